"""mpt.stochastic_round beyond BF16's largest finite value: inf plays the next value up."""

import math

import pytest

torch = pytest.importorskip("torch")

from mptutor import formats  # noqa: E402
from mptutor import torch as mpt  # noqa: E402

BF16 = formats.get("bf16")
LARGEST = float(torch.finfo(torch.bfloat16).max)  # (2 - 2**-7) * 2**127
SPACING = 2.0 ** (BF16.max_exponent - BF16.mantissa_bits)  # between the largest two, 2**120
N = 20_000


def _five_sigma(p: float) -> float:
    return 5 * math.sqrt(p * (1 - p) / N)


def test_the_constants_are_bf16s():
    assert LARGEST == (2 - 2**-7) * 2.0**127 and SPACING == 2.0**120
    below = torch.tensor(LARGEST).to(torch.bfloat16).view(torch.int16) - 1
    assert LARGEST - below.view(torch.bfloat16).item() == SPACING


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_beyond_the_largest_value_inf_with_the_right_probability(fraction, sign):
    x = torch.full((N,), sign * (LARGEST + fraction * SPACING))  # exact in FP32
    assert x[0].item() == sign * (LARGEST + fraction * SPACING)
    r = mpt.stochastic_round(x, torch.bfloat16, torch.Generator().manual_seed(11)).float()
    assert set(r.unique().tolist()) == {sign * LARGEST, sign * math.inf}
    share_inf = torch.isinf(r).double().mean().item()
    assert abs(share_inf - fraction) < _five_sigma(fraction)


def test_float64_inputs_beyond_the_largest_value():
    # a float64 input is worked in float64: values far beyond FP32's range too
    x = torch.tensor([LARGEST + 0.5 * SPACING, LARGEST + SPACING, 1e39, -1e300],
                     dtype=torch.float64).repeat(N, 1)
    r = mpt.stochastic_round(x, torch.bfloat16, torch.Generator().manual_seed(12)).float()
    assert set(r[:, 0].unique().tolist()) == {LARGEST, math.inf}
    assert abs(torch.isinf(r[:, 0]).double().mean().item() - 0.5) < _five_sigma(0.5)
    assert torch.isinf(r[:, 1:]).all() and (r[:, 3] < 0).all()


def test_fp32_largest_value_is_almost_always_inf():
    # FP32's largest value lies 1 - 2**-16 of a spacing above BF16's largest
    fp32_max = float(torch.finfo(torch.float32).max)
    fraction = (fp32_max - LARGEST) / SPACING
    assert fraction == 1 - 2**-16
    r = mpt.stochastic_round(torch.full((N,), fp32_max), torch.bfloat16,
                             torch.Generator().manual_seed(13)).float()
    assert set(r.unique().tolist()) <= {LARGEST, math.inf}
    assert torch.isinf(r).double().mean().item() > 0.99


def test_just_below_the_largest_value_stays_finite():
    # half a spacing below the largest value: the largest or the one below, never inf
    x = torch.full((N,), LARGEST - 0.5 * SPACING)
    r = mpt.stochastic_round(x, torch.bfloat16, torch.Generator().manual_seed(14)).float()
    assert set(r.unique().tolist()) == {LARGEST - SPACING, LARGEST}
    assert abs((r == LARGEST).double().mean().item() - 0.5) < _five_sigma(0.5)
