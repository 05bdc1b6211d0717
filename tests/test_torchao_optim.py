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
