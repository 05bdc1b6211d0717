import numpy as np
import pytest

from mptutor import formats
from mptutor.gradients import gradient_stats


def test_counts_against_fp16():
    values = np.array([0.0, np.inf, np.nan, 1.0, 2.0**-14, 2.0**-20, 2.0**-25, 2.0**-26, 1e5])
    s = gradient_stats(values, "fp16")
    assert (s.count, s.zeros, s.nonfinite) == (9, 1, 2)
    assert s.underflow == 2  # 2**-26 rounds to zero, and so does 2**-25: the tie goes to 0
    assert s.subnormal == 1  # 2**-20
    assert s.overflow == 1  # 1e5
    assert s.share("zeros") == pytest.approx(1 / 9)
    assert sorted(s.exponents.tolist()) == [-26, -25, -20, -14, 0, 16]


def test_counts_agree_with_rounding():
    rng = np.random.default_rng(1)
    values = np.exp2(rng.uniform(-40, 20, 5000)) * rng.choice([-1, 1], 5000)
    s = gradient_stats(values, "fp16")
    rounded = np.asarray(formats.round_to(values, "fp16"), dtype=np.float64)
    assert s.underflow == np.count_nonzero(rounded == 0)
    assert s.overflow == np.count_nonzero(np.isinf(rounded))
    assert s.subnormal == np.count_nonzero((rounded != 0) & (np.abs(rounded) < 2.0**-14))


def _edges(f):
    """Every edge of a format's ranges, each with its neighbours on either side (float64)."""
    half_tiny = f.smallest_subnormal / 2
    spacing = 2.0 ** (f.max_exponent - f.mantissa_bits)
    points = [
        half_tiny, f.smallest_subnormal, f.smallest_normal - half_tiny, f.smallest_normal,
        f.max, f.max + spacing / 2, f.max + spacing, 2.0 ** (f.max_exponent + 1),
    ]  # fmt: skip
    near = [np.nextafter(p, d) for p in points for d in (0.0, np.inf)]
    return np.array(points + near)


def _reference(values, f):
    """Underflow, subnormal and overflow counts read off formats.round_to."""
    mags = np.abs(values)
    rounded = np.abs(np.asarray(formats.round_to(mags, f.name), dtype=np.float64))
    if f.has_inf or np.isnan(float(formats.round_to(f.max * 4, f.name))):
        over = ~np.isfinite(rounded)
    else:  # FP6, FP4 saturate: round half of each value (exact for normal values), see if
        # twice the result passes the largest value
        halves = np.asarray(formats.round_to(mags / 2, f.name), dtype=np.float64)
        over = (mags > f.max) & (2 * halves > f.max)
    under = rounded == 0
    sub = ~under & ~over & (rounded < f.smallest_normal)
    return int(under.sum()), int(sub.sum()), int(over.sum())


@pytest.mark.parametrize(
    "fmt", [f.name for f in formats.all_formats(block=True) if f.mantissa_bits > 0]
)
def test_counts_agree_with_round_to_at_every_edge(fmt):
    f = formats.get(fmt)
    values = _edges(f)
    s = gradient_stats(values, fmt)
    assert (s.underflow, s.subnormal, s.overflow) == _reference(values, f)
    for value in values:  # one at a time: each edge lands in the right category
        one = gradient_stats(np.array([value, -value]), fmt)
        assert (one.underflow, one.subnormal, one.overflow) == _reference(
            np.array([value, -value]), f
        ), value


def test_the_two_edges_the_issue_names():
    s = gradient_stats(np.array([65520.0, 65519.99, 2.0**-25, 2.0**-25 * (1 + 2**-20)]), "fp16")
    assert (s.overflow, s.underflow, s.subnormal) == (1, 1, 1)
    assert formats.round_to(65520.0, "fp16") == np.inf
    assert formats.round_to(2.0**-25, "fp16") == 0


@pytest.mark.parametrize(
    "fmt", [f.name for f in formats.all_formats(block=True) if f.mantissa_bits > 0]
)
def test_scaled_agrees_with_round_to_of_the_scaled_values(fmt):
    f = formats.get(fmt)
    values = _edges(f)
    for k in (-3, -1, 1, 2, 5):
        scaled = gradient_stats(values, fmt).scaled(2.0**k)
        direct = gradient_stats(values * 2.0**k, fmt)
        assert (scaled.underflow, scaled.subnormal, scaled.overflow) == (
            direct.underflow, direct.subnormal, direct.overflow
        )  # fmt: skip
        assert (direct.underflow, direct.subnormal, direct.overflow) == _reference(
            values * 2.0**k, f
        )


def test_the_scale_format_is_refused():
    # Where ml_dtypes has no E8M0 (before 0.5, as in the MXNet environment) the format is unknown.
    known = "e8m0" in [f.name for f in formats.all_formats(block=True)]
    message = "e8m0: it holds the scales of block formats" if known else "unknown .* 'e8m0'"
    with pytest.raises(ValueError, match=message):
        gradient_stats(np.ones(2), "e8m0")


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
