"""torchao's ``_AdamW(bf16_stochastic_round=True)`` against the project's stochastic rounding.

torchao computes each AdamW step in FP32 and writes the BF16 weight with its own stochastic
rounding (``torchao/optim/quant_utils.py``, ``_fp32_to_bf16_sr``): away from zero when a random
16-bit number is below the FP32 value's lower 16 bits, else toward zero. ``mpt.stochastic_round``
(what pytorch/10 builds by hand) rounds up with probability ``(x - lo) / (hi - lo)``. For an
FP32 value both give the same two BF16 neighbours with the same probabilities; the random
numbers differ, so the tests compare distributions, with bounds of five standard deviations.

torchao compiles its step with ``torch.compile``; the tests run the same step function eagerly
(``torch.compiler.set_stance("force_eager")``), which takes a fraction of a second where the
first compiled step takes most of a minute on a CPU.

torchao's ``AdamW8bit`` and ``AdamW4bit`` keep each of Adam's moments block-quantized
(``torchao/optim/subclass_8bit.py``, ``subclass_4bit.py``): one FP32 scale per block (the block's
largest magnitude) and one 8-bit or 4-bit code per value, an index into a lookup table of
``2**bits`` values in [-1, 1] (first moment) or [0, 1] (second moment), held by each state
tensor. Only tensors of at least 4096 values whose size is a multiple of the block size are
quantized; the others keep moments in the weights' dtype (``_new_buffer`` in
``torchao/optim/adam.py``). pytorch/10 counts the state's bytes from these tensors; the tests
hold that count against the formula, and each quantized value against its table.
"""

import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("torchao", reason="torchao is not installed")

from mptutor import torch as mpt  # noqa: E402

N = 200_000


def _adamw():
    """torchao's AdamW with a BF16 option, imported through the package (quiet on a CPU)."""
    return mpt.import_torchao().optim._AdamW


def _step(weights: torch.Tensor, grads: torch.Tensor, **options) -> torch.Tensor:
    """One torchao AdamW step of ``weights`` (a copy) with gradients ``grads``, run eagerly."""
    param = torch.nn.Parameter(weights.clone())
    param.grad = grads.to(weights.dtype)
    optimizer = _adamw()([param], **options)
    with torch.compiler.set_stance("force_eager"):
        optimizer.step()
    return param.detach()


def _neighbours(target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The BF16 values toward zero and away from zero of each FP32 value (equal when exact)."""
    bits = target.view(torch.int32) & -(2**16)  # cut the lower 16 bits: toward zero
    toward = bits.view(torch.float32)
    away = (bits + 2**16).view(torch.float32)  # one more unit in the last kept bit: away from 0
    return toward, torch.where(toward == target, toward, away)


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """BF16 weights over several binades and both signs, and gradients of mixed sizes."""
    gen = torch.Generator().manual_seed(seed)
    magnitude = 2.0 ** torch.randint(-6, 3, (N,), generator=gen).float()
    sign = torch.where(torch.rand(N, generator=gen) < 0.5, -1.0, 1.0)
    weights = (sign * magnitude * (1 + torch.rand(N, generator=gen))).to(torch.bfloat16)
    grads = torch.randn(N, generator=gen).to(torch.bfloat16).float()  # the same in either dtype
    return weights, grads


def test_bf16_stochastic_round_matches_the_lesson_in_distribution():
    weights, grads = _inputs(0)
    # eps = 1 makes each update lr * g / (|g| + 1): sizes spread over a range, so the results
    # spread over every fraction of the way between two BF16 neighbours
    options = dict(lr=1e-2, weight_decay=0.1, eps=1.0)
    # torchao's FP32 result: the same step on an FP32 copy writes p_f32 exactly
    target = _step(weights.float(), grads, **options)
    torch.manual_seed(1)
    theirs = _step(weights, grads, bf16_stochastic_round=True, **options).float()
    ours = mpt.stochastic_round(target, generator=torch.Generator().manual_seed(2)).float()
    toward, away = _neighbours(target)
    inexact = toward != target
    assert inexact.float().mean() > 0.99  # nearly every result lies between two BF16 values
    fraction = ((target - toward) / (away - toward)).where(inexact, 0.0).double()
    for name, result in (("torchao", theirs), ("mpt.stochastic_round", ours)):
        assert ((result == toward) | (result == away)).all(), name  # one of the two neighbours
    went_away = {"torchao": theirs == away, "mpt": ours == away}
    edges = torch.linspace(0, 1, 9, dtype=torch.float64)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        chosen = inexact & (fraction >= lo) & (fraction < hi)
        n = int(chosen.sum())
        assert n > 5_000  # the fractions cover every eighth
        expected = fraction[chosen].mean().item()
        sd = math.sqrt((fraction[chosen] * (1 - fraction[chosen])).sum().item()) / n
        shares = {k: v[chosen].double().mean().item() for k, v in went_away.items()}
        for k, share in shares.items():  # each rounds away with the right probability
            assert abs(share - expected) < 5 * sd, (k, lo.item(), share, expected)
        assert abs(shares["torchao"] - shares["mpt"]) < 5 * math.sqrt(2) * sd
    # unbiased: the mean rounding error is within 5 standard deviations of zero for both
    spacing = (away - toward).abs().double()
    sd_error = math.sqrt((spacing**2 * fraction * (1 - fraction)).sum().item()) / N
    for result in (theirs, ours):
        assert abs((result.double() - target.double()).mean().item()) < 5 * sd_error


def test_weight_decay_survives_on_average_with_stochastic_rounding_only():
    # zero gradients: Adam's update is 0, only the decoupled decay lr * wd moves the weights
    weights, grads = torch.ones(N, dtype=torch.bfloat16), torch.zeros(N)
    lr, decay = 1e-3, 0.1
    assert lr * decay < 2**-9  # below BF16's always-lost ratio
    nearest = _step(weights, grads, lr=lr, weight_decay=decay)
    assert torch.equal(nearest, weights)  # round to nearest: the decay is lost, exactly
    torch.manual_seed(0)
    stochastic = _step(weights, grads, lr=lr, weight_decay=decay, bf16_stochastic_round=True)
    below = 1 - 2**-8  # the BF16 value below 1
    assert set(stochastic.float().unique().tolist()) == {below, 1.0}
    share = (stochastic.float() == below).double().mean().item()
    expected = lr * decay / 2**-8  # the fraction of the way from 1 down to its neighbour
    assert abs(share - expected) < 5 * math.sqrt(expected * (1 - expected) / N)


def _lowbit(bits: int):
    """torchao's AdamW with ``bits``-bit state, and its state class."""
    ao = mpt.import_torchao()
    if bits == 8:
        return ao.optim.AdamW8bit, ao.optim.subclass_8bit.OptimState8bit
    return ao.optim.AdamW4bit, ao.optim.subclass_4bit.OptimState4bit


def _stepped(bits: int, shapes: list[tuple[int, ...]]):
    """A low-bit AdamW after one eager step on FP32 parameters of ``shapes``."""
    optimizer_class, _ = _lowbit(bits)
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape, generator=gen)) for shape in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    optimizer = optimizer_class(params, lr=1e-3)
    with torch.compiler.set_stance("force_eager"):
        optimizer.step()
    return optimizer, params


@pytest.mark.parametrize("bits", [8, 4])
def test_state_bytes_follow_the_formula(bits):
    _, state_class = _lowbit(bits)
    # quantized; too small; large enough but not a multiple of the block; a 1-d one quantized
    shapes = [(64, 256), (64,), (4097,), (8192,)]
    optimizer, params = _stepped(bits, shapes)
    block = optimizer.block_size
    assert block == {8: 256, 4: 128}[bits]  # the defaults the lesson reads from the object
    counted = formula = 0
    for p in params:
        n = p.numel()
        quantized = n >= 4096 and n % block == 0
        for key in ("exp_avg", "exp_avg_sq"):
            t = optimizer.state[p][key]
            assert isinstance(t, state_class) == quantized, (p.shape, key)
            if quantized:
                assert t.codes.dtype == torch.uint8 and t.scale.dtype == torch.float32
                assert t.block_size == block and t.qmap.numel() == 2**bits
                counted += sum(x.numel() * x.element_size() for x in (t.codes, t.scale, t.qmap))
                formula += n * bits // 8 + 4 * (n // block) + 4 * 2**bits
            else:
                assert t.dtype == p.dtype  # kept as the weights are: FP32 here
                counted += t.numel() * t.element_size()
                formula += 4 * n
        step = optimizer.state[p]["step"]
        counted += step.numel() * step.element_size()
        formula += 4  # one FP32 step counter per tensor
    assert counted == formula


def _nearest(values: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Each value's distance to the nearest entry of ``table`` (both already scaled)."""
    return (values.unsqueeze(-1) - table).abs().amin(-1)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("signed", [True, False])
def test_quantized_state_is_the_nearest_table_value_of_its_block(bits, signed):
    _, state_class = _lowbit(bits)
    gen = torch.Generator().manual_seed(1)
    n_blocks, block = 64, {8: 256, 4: 128}[bits]
    # values over eight decades within a block, blocks of very different sizes, some zeros
    x = torch.randn(n_blocks, block, generator=gen) * 10.0 ** torch.randint(
        -8, 1, (n_blocks, block), generator=gen)
    x = x * 10.0 ** torch.randint(-6, 4, (n_blocks, 1), generator=gen)
    x[:, :3] = 0
    if not signed:
        x = x.abs()  # the second moment is never negative
    x = x.flatten()
    state = state_class.zeros(x.shape, signed, block)
    state.copy_(x)  # what the optimizer's step does with the updated FP32 moment
    back = state.dequantize().flatten()
    scale = x.view(n_blocks, block).abs().amax(-1)
    assert torch.equal(state.scale, scale)  # one scale per block: its largest magnitude
    table = state.qmap
    per_value_scale = scale.repeat_interleave(block)
    error = (back - x).abs()
    nearest = _nearest(x, table.unsqueeze(0) * per_value_scale.unsqueeze(-1))
    # the nearest table value, up to FP32 rounding of x / scale and of table * scale
    assert (error <= nearest + 1e-6 * per_value_scale).all()
    # so the error relative to the block's largest magnitude is at most the largest distance
    # from a point of the normalised range to the table, computed from the table itself
    lo = -1.0 if signed else 0.0
    worst = max((table.diff().max() / 2).item(), table[0].item() - lo, 1 - table[-1].item())
    assert (error <= (worst + 1e-6) * per_value_scale).all()
    if bits == 4 and not signed:  # the 4-bit second moment: sixteen equal steps, no zero
        assert torch.equal(table, torch.arange(1, 17) / 16)
        assert (back[x == 0] > 0).all()  # a zero is stored as one step of its block, never 0
    else:  # the dynamic maps hold 0, and values far below the block's largest become 0
        assert (table == 0).any() and (back[x == 0] == 0).all()
