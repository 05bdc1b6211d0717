"""mpt.FP8Linear (current scaling) against torchao's tensorwise Float8Linear: the same numbers.

Both cast the input and the weight to E4M3 and the output gradient to E5M2, each with the scale
``max / amax`` of the tensor being cast, and run the three products through ``torch._scaled_mm``.
On a CPU without AMX that product is torch's FP32 emulation, so the two layers agree bit for
bit; elsewhere (oneDNN's AMX kernel, a GPU's FP8 Tensor Cores) to the product's rounding.
"""

import copy

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("torchao", reason="torchao is not installed")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from mptutor import hardware  # noqa: E402
from mptutor import torch as mpt  # noqa: E402


def _float8():
    """torchao.float8, imported through the package (quiet on a CPU-only machine)."""
    return mpt.import_torchao().float8


def _exact() -> bool:
    """Whether ``torch._scaled_mm`` is the FP32 emulation here (CPU, no AMX)."""
    return not hardware.report().cpu_features["amx_bf16"]


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    if _exact():
        assert torch.equal(a, b), float((a - b).abs().max())
    else:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def _pair(seed: int = 0, sizes=(64, 128, 10)):
    """The same MLP twice: first layer as mpt.FP8Linear and as torchao's tensorwise layer."""
    torch.manual_seed(seed)
    base = nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.ReLU(), nn.Linear(sizes[1], sizes[2]))
    ours = mpt.to_fp8(copy.deepcopy(base), skip={"2"}, scaling="current")
    float8 = _float8()
    config = float8.Float8LinearConfig.from_recipe_name("tensorwise")
    theirs = float8.convert_to_float8_training(
        copy.deepcopy(base), config=config, module_filter_fn=lambda module, fqn: fqn == "0"
    )
    assert type(ours[0]).__name__ == "FP8Linear"
    assert type(theirs[0]).__name__ == "Float8Linear" and type(theirs[2]) is nn.Linear
    return ours, theirs


def _batch(seed: int, rows: int = 32, cols: int = 64, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen) * scale
    y = torch.randint(0, 10, (rows,), generator=gen)
    return x, y


@pytest.mark.parametrize("scale", [1e-3, 1.0, 300.0])
def test_forward_and_both_gradients_are_the_same(scale):
    ours, theirs = _pair()
    x, y = _batch(1, scale=scale)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_a, out_b = ours(xa), theirs(xb)
    _check(out_a, out_b)
    F.cross_entropy(out_a, y).backward()
    F.cross_entropy(out_b, y).backward()
    _check(xa.grad, xb.grad)
    _check(ours[0].weight.grad, theirs[0].weight.grad)
    _check(ours[0].bias.grad, theirs[0].bias.grad)
    # the products ran in FP8: the layer's output is not the FP32 one
    exact = F.linear(x, ours[0].weight, ours[0].bias)
    assert not torch.equal(out_a, exact)


def test_twenty_training_steps_stay_the_same():
    ours, theirs = _pair(seed=3)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ours, theirs)]
    for step in range(20):
        x, y = _batch(100 + step)
        for model, opt in zip((ours, theirs), opts, strict=True):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        _check(p.detach(), q.detach())


def test_the_tensorwise_recipe_is_the_one_fp8linear_implements():
    """What the comparison rests on, read from torchao's config: e4m3/e4m3/e5m2, per tensor."""
    float8 = _float8()
    config = float8.Float8LinearConfig.from_recipe_name("tensorwise")
    assert config.cast_config_input.target_dtype == torch.float8_e4m3fn
    assert config.cast_config_weight.target_dtype == torch.float8_e4m3fn
    assert config.cast_config_grad_output.target_dtype == torch.float8_e5m2
    for cast in (
        config.cast_config_input,
        config.cast_config_weight,
        config.cast_config_grad_output,
    ):
        assert cast.scaling_granularity is float8.config.ScalingGranularity.TENSORWISE
    assert not config.round_scales_to_power_of_2
    # fast accumulation in the forward product only, as FP8Linear(fast_accum=True) does
    assert config.gemm_config_output.use_fast_accum
    assert not config.gemm_config_grad_input.use_fast_accum
    assert not config.gemm_config_grad_weight.use_fast_accum


def test_power_of_two_scales_change_the_numbers():
    """round_scales_to_power_of_2 gives other numbers than FP8Linear's 448 / amax (a control)."""
    float8 = _float8()
    config = float8.Float8LinearConfig(round_scales_to_power_of_2=True)
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(64, 128))
    ours = mpt.to_fp8(copy.deepcopy(base), scaling="current")
    theirs = float8.convert_to_float8_training(copy.deepcopy(base), config=config)
    x, _ = _batch(2, scale=1.3)
    assert not torch.equal(ours(x), theirs(x))
    scale = float8.float8_utils.amax_to_scale(torch.tensor(1.0), torch.float8_e4m3fn, True)
    assert float(scale) == 256.0  # 448 / 1 rounded down to a power of two
