import numpy as np
import pytest

from mptutor import formats
from mptutor.gradients import gradient_stats


def test_counts_against_fp16():
    values = np.array([0.0, np.inf, np.nan, 1.0, 2.0**-14, 2.0**-20, 2.0**-25, 2.0**-26, 1e5])
    s = gradient_stats(values, "fp16")
    assert (s.count, s.zeros, s.nonfinite) == (9, 1, 2)
    assert s.underflow == 1  # 2**-26 rounds to zero; 2**-25 is the tie at the edge
    assert s.subnormal == 2  # 2**-20 and 2**-25
    assert s.overflow == 1  # 1e5
    assert s.share("zeros") == pytest.approx(1 / 9)
    assert sorted(s.exponents.tolist()) == [-26, -25, -20, -14, 0, 16]


def test_counts_agree_with_rounding():
    rng = np.random.default_rng(1)
    values = np.exp2(rng.uniform(-40, 20, 5000)) * rng.choice([-1, 1], 5000)
    s = gradient_stats(values, "fp16")
    rounded = np.asarray(formats.round_to(values, "fp16"), dtype=np.float64)
    # Counting by exponent is exact away from the two half-way edges, which these values miss.
    assert s.underflow == np.count_nonzero(rounded == 0)
    assert s.overflow == np.count_nonzero(np.abs(values) >= 65536)
    assert s.overflow == np.count_nonzero(np.isinf(rounded)) - np.count_nonzero(
        (np.abs(values) >= 65520) & (np.abs(values) < 65536)
    )


def test_pools_several_arrays_and_scales_exactly():
    s = gradient_stats([np.full((2, 2), 2.0**-30), np.array([2.0**-3])], "fp16")
    assert s.count == 5 and s.underflow == 4
    t = s.scaled(2.0**8)
    assert t.underflow == 0 and t.subnormal == 4 and t.count == 5
    with pytest.raises(ValueError, match="power of two"):
        s.scaled(3.0)
    with pytest.raises(ValueError, match="power of two"):
        s.scaled(-2.0)


def test_empty_and_bad_category():
    s = gradient_stats([], "bf16")
    assert s.count == 0 and s.share("zeros") == 0.0
    with pytest.raises(ValueError, match="choose one of"):
        s.share("tiny")


@pytest.mark.parametrize("bad", [None, 5.0, "abc", b"xy"])
def test_values_that_are_not_arrays_are_refused(bad):
    with pytest.raises(TypeError, match="values must be"):
        gradient_stats(bad)


@pytest.mark.parametrize(
    "bad", [np.array(["a"]), np.ones(2) + 1j, np.array([True, False]), np.array([None])]
)
def test_arrays_that_are_not_real_numbers_are_refused(bad):
    with pytest.raises(TypeError, match=r"values\[1\] must hold real numbers"):
        gradient_stats([np.ones(2), bad])


def test_any_real_dtype_and_lists_of_numbers_are_counted():
    import ml_dtypes

    s = gradient_stats([np.ones(2, ml_dtypes.bfloat16), np.arange(3), [0.5, 0.0]])
    assert (s.count, s.zeros) == (7, 2)
