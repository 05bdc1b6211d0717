"""mptutor.torch.headroom (forward-hook peaks against a format's largest value) and
mptutor.torch.stochastic_round (unbiased rounding to bfloat16 or float16)."""

import math
from collections import OrderedDict

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from mptutor import formats
from mptutor import torch as mpt

FP16_MAX = formats.get("fp16").max

# --- headroom ------------------------------------------------------------------------------


class Pair(nn.Module):
    """Returns a tuple, as attention modules do, and an integer tensor that must be ignored."""

    def forward(self, x):
        return x, 2 * x, torch.ones(3, dtype=torch.int64) * 10**6


def _known_overflow():
    # "up" multiplies inputs of 1 by weights of 100 x 1000 and overflows FP16 (1e5 > 65504);
    # the LayerNorm after it brings the values back to ~1, and nothing else comes near
    torch.manual_seed(0)
    model = nn.Sequential(
        OrderedDict(
            inp=nn.Linear(4, 8, bias=False),
            up=nn.Linear(8, 8, bias=False),
            norm=nn.LayerNorm(8),
            pair=Pair(),
            head=nn.Linear(8, 2),
        )
    )
    with torch.no_grad():
        model.inp.weight.fill_(0.25)
        model.up.weight.fill_(0.0)
        model.up.weight[0].fill_(1e5 / 8)  # one output unit of 1e5, the rest 0
    return model


def _forward(model, x):
    out = x
    for name, module in model.named_children():
        out = module(out)
        if name == "pair":
            out = out[0]
    return out


class Wrapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = _known_overflow()

    def forward(self, x):
        return _forward(self.body, x)


def _hook_count(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_peaks_above_one_at_the_overflowing_layer_only():
    model = Wrapped()
    x = torch.ones(5, 4)
    with torch.no_grad(), mpt.headroom(model, fmt="fp16") as room:
        model(x)
    peaks = room.peaks
    assert peaks["body.up"] == pytest.approx(1e5 / FP16_MAX)
    assert [name for name, ratio in peaks.items() if ratio > 1] == ["body.up"]
    # every module that produced a float output is there, in named_modules order; the
    # containers (body: a Sequential called by hand here) never ran their own forward
    assert list(peaks) == ["", "body.inp", "body.up", "body.norm", "body.pair", "body.head"]


def test_the_ratio_is_largest_magnitude_over_the_formats_max():
    model = Wrapped()
    x = torch.linspace(-3, 2, 20).reshape(5, 4)
    with torch.no_grad(), mpt.headroom(model, fmt="bf16") as room:
        model(x)
        inp = model.body.inp(x)
        pair_second = 2 * model.body.norm(model.body.up(inp))
    bf16_max = formats.get("bf16").max
    assert room.peaks["body.inp"] == pytest.approx(inp.abs().max().item() / bf16_max)
    # a tuple output: the largest over its float tensors (the int64 one is ignored)
    assert room.peaks["body.pair"] == pytest.approx(pair_second.abs().max().item() / bf16_max)
    assert max(room.peaks.values()) < 1e-30  # BF16's range holds all of it


def test_peaks_keep_the_maximum_over_calls_and_are_readable_after_exit():
    model = nn.Sequential(nn.Identity())
    with mpt.headroom(model) as room:
        model(torch.tensor([1000.0]))
        model(torch.tensor([-30000.0]))
        model(torch.tensor([5.0]))
        inside = room.peaks
    assert inside == room.peaks == {"": 30000 / FP16_MAX, "0": 30000 / FP16_MAX}


def test_hooks_are_removed_on_exit():
    model = Wrapped()
    before = _hook_count(model)
    with mpt.headroom(model) as room:
        assert _hook_count(model) == before + len(list(model.modules()))
        model(torch.ones(2, 4))
    assert _hook_count(model) == before
    seen = dict(room.peaks)
    model(100 * torch.ones(2, 4))  # runs after exit are not recorded
    assert room.peaks == seen


def test_hooks_are_removed_when_the_body_raises():
    model = Wrapped()
    before = _hook_count(model)
    with pytest.raises(RuntimeError, match="shapes"), mpt.headroom(model):
        model(torch.ones(2, 3))  # wrong width: the first Linear raises
    assert _hook_count(model) == before


def test_overflow_already_happened_shows_as_inf_and_nan_as_nan():
    model = Wrapped()
    with torch.no_grad(), mpt.headroom(model) as room:
        model.half()(torch.ones(2, 4, dtype=torch.float16))
    assert room.peaks["body.up"] == math.inf
    nan_model = nn.Sequential(nn.Identity())
    with mpt.headroom(nan_model) as room:
        nan_model(torch.tensor([1.0, math.nan]))
    assert math.isnan(room.peaks["0"])


def test_a_monitor_cannot_be_entered_twice_and_bad_arguments_are_named():
    model = nn.Sequential(nn.Identity())
    room = mpt.headroom(model)
    with room, pytest.raises(RuntimeError, match="already active"), room:
        pass
    assert _hook_count(model) == 0
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        mpt.headroom(lambda x: x)
    with pytest.raises(ValueError, match="unknown floating-point format 'fp12'.*fp16"):
        mpt.headroom(model, fmt="fp12")
    assert mpt.headroom(model, fmt=torch.float8_e4m3fn).fmt.max == 448


def test_no_output_no_entry():
    with mpt.headroom(nn.Sequential(nn.Identity())) as room:
        pass
    assert room.peaks == {}


@given(exponent=st.floats(-20, 20), n=st.integers(1, 50))
def test_peak_of_any_input_is_its_largest_magnitude_over_65504(exponent, n):
    x = torch.linspace(-1, 0.5, n, dtype=torch.float64) * 2.0**exponent
    with mpt.headroom(nn.Identity()) as room:
        nn.Identity()(x)  # another module: not watched
    assert room.peaks == {}
    model = nn.Identity()
    with mpt.headroom(model) as room:
        model(x)
    assert room.peaks[""] == pytest.approx(x.abs().max().item() / FP16_MAX, rel=1e-6)


@pytest.mark.gpu
def test_hooks_make_no_host_sync_on_a_gpu():
    model = Wrapped().cuda()
    x = torch.ones(8, 4, device="cuda")
    with torch.no_grad():
        model(x)  # warm up
        with mpt.headroom(model) as room:
            syncs = mpt.count_host_syncs(lambda: model(x))
        assert syncs == 0
    assert room.peaks["body.up"] > 1


# --- stochastic_round -----------------------------------------------------------------------

DTYPES = [torch.bfloat16, torch.float16]


def _neighbours(x, dtype):
    """The two values of dtype around each value x (equal when x is exact), via NumPy/ml_dtypes."""
    x = np.asarray(x, np.float64)
    nearest = formats.round_to(x, dtype)
    toward = lambda v: np.full_like(nearest, v)  # noqa: E731
    below = np.nextafter(nearest, toward(-np.inf)).astype(np.float64)
    above = np.nextafter(nearest, toward(np.inf)).astype(np.float64)
    nearest = nearest.astype(np.float64)
    lower = np.where(nearest <= x, nearest, below)
    upper = np.where(nearest >= x, nearest, above)
    return lower, upper


finite_float32 = st.floats(
    -(2.0**15), 2.0**15, width=32, allow_nan=False, allow_infinity=False, allow_subnormal=True
)


@pytest.mark.parametrize("dtype", DTYPES)
@given(values=st.lists(finite_float32, min_size=1, max_size=20))
def test_the_result_is_one_of_the_two_neighbours(dtype, values):
    x = torch.tensor(values, dtype=torch.float32).repeat(50)
    r = mpt.stochastic_round(x, dtype, generator=torch.Generator().manual_seed(1))
    assert r.dtype == dtype and r.shape == x.shape
    lower, upper = _neighbours(x.double().numpy(), dtype)
    got = r.double().numpy()
    assert np.all((got == lower) | (got == upper))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_quarter_of_the_way_up_rounds_up_a_quarter_of_the_time(dtype):
    # between 1 and its next value 1 + eps, a quarter of the way: 1 + eps / 4
    eps = formats.get(dtype).eps
    n = 200_000
    x = torch.full((n,), 1 + eps / 4)
    r = mpt.stochastic_round(x, dtype, generator=torch.Generator().manual_seed(0))
    assert set(r.double().unique().tolist()) == {1.0, 1 + eps}
    share_up = (r > 1).double().mean().item()
    # the count of ups is binomial(n, 1/4): 5 standard deviations, sqrt(p (1 - p) / n), is a
    # bound that a correct rounding exceeds with probability below 1e-6 for any seed
    assert abs(share_up - 0.25) < 5 * math.sqrt(0.25 * 0.75 / n)


@pytest.mark.parametrize("dtype", DTYPES)
@given(values=st.lists(finite_float32, min_size=1, max_size=8))
def test_the_mean_of_many_roundings_is_the_value(dtype, values):
    n = 4096
    x = torch.tensor(values, dtype=torch.float32)
    draws = mpt.stochastic_round(x.repeat(n, 1), dtype, torch.Generator().manual_seed(2))
    lower, upper = _neighbours(x.double().numpy(), dtype)
    # each draw is lower + (upper - lower) * Bernoulli(p): the mean's standard deviation is at
    # most (upper - lower) / (2 sqrt(n)); 5 of them bound it with probability below 1e-6
    bound = 5 * (upper - lower) / (2 * math.sqrt(n))
    mean = draws.double().mean(0).numpy()
    assert np.all(np.abs(mean - x.double().numpy()) <= bound)


def _representable(dtype):
    # every finite and infinite value of dtype, and NaN, from their bit patterns
    return st.integers(-(2**15), 2**15 - 1).map(
        lambda b: torch.tensor([b], dtype=torch.int16).view(dtype)
    )


@pytest.mark.parametrize("dtype", DTYPES)
@given(data=st.data())
def test_values_the_dtype_holds_are_unchanged(dtype, data):
    exact = data.draw(_representable(dtype))
    for source in (torch.float32, torch.float64, dtype):
        r = mpt.stochastic_round(exact.to(source).repeat(10), dtype)
        if torch.isnan(exact).item():
            assert torch.isnan(r).all()
        else:
            assert torch.equal(r.view(torch.int16), exact.repeat(10).view(torch.int16))


def test_signed_zeros_infinities_and_nan():
    x = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan])
    r = mpt.stochastic_round(x)
    assert r[:4].tolist() == [0.0, 0.0, math.inf, -math.inf]
    assert [math.copysign(1, v) for v in r[:2].tolist()] == [1, -1]
    assert math.isnan(r[4].item())


def test_beyond_the_largest_value_inf_is_the_next_value_up():
    # FP16: 65504, and inf one spacing (32) above it, at 65536
    x = torch.tensor([65504.0 + 8, -(65504.0 + 8), 65536.0, 1e6]).repeat(20_000, 1)
    r = mpt.stochastic_round(x, torch.float16, torch.Generator().manual_seed(3)).float()
    assert set(r[:, 0].unique().tolist()) == {65504.0, math.inf}
    share_inf = torch.isinf(r[:, 0]).double().mean().item()
    assert abs(share_inf - 0.25) < 5 * math.sqrt(0.25 * 0.75 / 20_000)
    assert set(r[:, 1].unique().tolist()) == {-65504.0, -math.inf}
    assert torch.isinf(r[:, 2:]).all()


def test_repeatable_with_a_seeded_generator():
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    first = mpt.stochastic_round(x, generator=torch.Generator().manual_seed(7))
    again = mpt.stochastic_round(x, generator=torch.Generator().manual_seed(7))
    other = mpt.stochastic_round(x, generator=torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)
    torch.manual_seed(5)
    from_global = mpt.stochastic_round(x)
    torch.manual_seed(5)
    assert torch.equal(from_global, mpt.stochastic_round(x))


def test_dtypes_shapes_and_no_gradient():
    x = torch.randn(3, 4, 5, requires_grad=True)
    r = mpt.stochastic_round(x)
    assert r.dtype == torch.bfloat16 and r.shape == x.shape and not r.requires_grad
    assert mpt.stochastic_round(x, torch.float16).dtype == torch.float16


def test_bad_arguments_are_named_before_anything_happens():
    x = torch.ones(3)
    with pytest.raises(ValueError, match=r"torch.bfloat16 or torch.float16, got torch.float32"):
        mpt.stochastic_round(x, torch.float32)
    with pytest.raises(ValueError, match="got 'bf16'"):
        mpt.stochastic_round(x, "bf16")
    with pytest.raises(TypeError, match="floating-point"):
        mpt.stochastic_round(torch.ones(3, dtype=torch.int32))
    with pytest.raises(TypeError, match="x must be"):
        mpt.stochastic_round([1.0, 2.0])
    with pytest.raises(TypeError, match="generator must be"):
        mpt.stochastic_round(x, generator=7)


@pytest.mark.gpu
def test_a_cpu_generator_for_a_gpu_tensor_is_refused_and_gpu_rounding_is_unbiased():
    x = torch.full((200_000,), 1 + 2**-9, device="cuda")
    with pytest.raises(ValueError, match="torch.Generator\\(device='cuda'\\)"):
        mpt.stochastic_round(x, generator=torch.Generator())
    r = mpt.stochastic_round(x, generator=torch.Generator(device="cuda").manual_seed(0))
    assert abs((r > 1).double().mean().item() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / 200_000)


def test_an_all_zero_output_peaks_at_plus_zero():
    model = nn.Sequential(nn.ReLU())
    with mpt.headroom(model) as room:
        model(-torch.ones(3))  # ReLU of negatives: all +0.0
        model(torch.tensor([-0.0, -0.0]))  # and negative zeros alone
    for peak in room.peaks.values():
        assert peak == 0.0 and math.copysign(1.0, peak) == 1.0  # +0.0, never -0.0


@pytest.mark.parametrize("fmt", [5, 1.0, np.float32(1.0), True])
def test_a_number_is_refused_as_the_format(fmt):
    with pytest.raises(TypeError, match="fmt must name a format"):
        mpt.headroom(nn.Identity(), fmt=fmt)
