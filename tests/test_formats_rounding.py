"""formats.round_to against a correctly rounded reference built without it.

The reference lists every finite value of a format (every bit pattern of the formats of 16 bits
or fewer; the float32 neighbours that NumPy's own, correctly rounded, float64 -> float32 cast
lands next to), and picks the nearest one to ``x`` in exact rational arithmetic
(``fractions.Fraction``), ties to the value with the even bit pattern. Beyond the largest
value sits one more, virtual, value (the next one the format would have with one more
exponent): a value rounding to it overflows, to inf where the format has one, to NaN in
fp8_e4m3 (no inf), to the largest value in formats with neither (saturation).
"""

from __future__ import annotations

import bisect
import functools
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mptutor import formats

# Every format round_to rounds to, the MX element formats (no inf, no NaN) included; e8m0,
# the block scale, has no rounding to nearest (tested below).
FORMATS = [f for f in formats.all_formats(block=True) if f.name != "e8m0"]


@functools.cache
def _values(f: formats.Format) -> tuple[list[Fraction], list[int]]:
    """Every non-negative finite value of a format of <= 16 bits, and its bit pattern's parity."""
    uint = np.dtype(f"uint{8 * f.dtype.itemsize}")  # fp6 and fp4 take a byte each
    patterns = np.arange(2 ** (f.bits - 1), dtype=np.uint32).astype(uint)  # sign bit clear
    with np.errstate(invalid="ignore"):
        every = patterns.view(f.dtype).astype(np.float64)
    keep = np.isfinite(every)
    values = [Fraction(float(v)) for v in every[keep]]
    parity = [int(p) & 1 for p in patterns[keep]]
    order = sorted(range(len(values)), key=values.__getitem__)
    values, parity = [values[i] for i in order], [parity[i] for i in order]
    # the virtual value past the largest: one spacing further, the other parity
    spacing = Fraction(2) ** (f.max_exponent - f.mantissa_bits)
    return values + [values[-1] + spacing], parity + [1 - parity[-1]]


def _neighbours32(x: float) -> tuple[list[Fraction], list[int]]:
    """The float32 values around x (NumPy's float64 -> float32 cast is correctly rounded)."""
    with np.errstate(over="ignore"):
        y = np.float32(abs(x))
    if np.isinf(y):
        y = np.float32(formats.get("fp32").max)
    with np.errstate(over="ignore"):
        cands = [np.nextafter(y, np.float32(0)), y, np.nextafter(y, np.float32(np.inf))]
    out = sorted({Fraction(float(c)) for c in cands if np.isfinite(c)})
    bits = [int(np.float32(float(v)).view(np.uint32)) & 1 for v in out]
    big = Fraction(formats.get("fp32").max)
    if out[-1] == big:  # the virtual 2**128 past the largest float32
        out, bits = out + [Fraction(2) ** 128], bits + [0]
    return out, bits


def reference(x: float, f: formats.Format) -> float:
    """The value of format f nearest to x, ties to even, with the overflow rule above."""
    if math.isnan(x):
        return math.nan
    if math.isinf(x):
        big = math.inf if f.has_inf else (math.nan if _has_nan(f) else f.max)
        return math.copysign(big, x)
    exact = abs(Fraction(x))
    values, parity = _values(f) if f.bits <= 16 else _neighbours32(abs(x))
    i = bisect.bisect_left(values, exact)
    if i == len(values):  # beyond the virtual value: overflow
        j = i - 1
    elif values[i] == exact:
        j = i
    else:
        lo, hi = i - 1, i
        if lo < 0:
            j = hi
        else:
            below, above = exact - values[lo], values[hi] - exact
            j = lo if below < above or (below == above and parity[lo] == 0) else hi
    if values[j] > Fraction(f.max):  # the virtual value: overflow
        big = math.inf if f.has_inf else (math.nan if _has_nan(f) else f.max)
        return math.copysign(big, x)
    return math.copysign(float(values[j]), x)


def _has_nan(f: formats.Format) -> bool:
    with np.errstate(invalid="ignore"):
        return bool(np.isnan(np.array(np.nan).astype(f.dtype).astype(np.float64)))


def _same(got, want: float) -> bool:
    g = float(got)
    if math.isnan(want):
        return math.isnan(g)
    return g == want and math.copysign(1, g) == math.copysign(1, want)


def _check(x, f: formats.Format) -> None:
    got = formats.round_to(x, f)
    assert np.asarray(got).dtype == f.dtype
    want = reference(float(x), f)
    assert _same(got, want), (x, f.name, float(got), want)


# --- the examples of the report, and edges ------------------------------------------------------


def test_python_floats_are_not_rounded_twice():
    # 1 + 2**-8 is the tie between bf16's 1 and 1 + 2**-7; 2**-30 above it decides. Read as
    # float32 first, the 2**-30 is lost and the tie goes to even, 1.0.
    x = 1 + 2**-8 + 2**-30
    assert formats.round_to(x, "bf16") == 1.0078125
    assert formats.round_to(np.float64(x), "bf16") == 1.0078125
    assert formats.round_to(1 + 2**-4 + 2**-30, "fp8_e4m3") == 1.125
    assert formats.round_to(1 + 2**-3 + 2**-30, "fp8_e5m2") == 1.25
    assert formats.round_to(1 + 2**-11 + 2**-40, "fp16") == 1 + 2**-10
    # below the tie it rounds down, on the tie to even
    assert formats.round_to(1 + 2**-8 - 2**-40, "bf16") == 1.0
    assert formats.round_to(1 + 2**-8, "bf16") == 1.0


@pytest.mark.parametrize("f", FORMATS, ids=lambda f: f.name)
def test_overflow_and_the_largest_value(f):
    big, step = f.max, 2.0 ** (f.max_exponent - f.mantissa_bits)
    tie = big + step / 2
    for x in (big, tie - step / 8, np.nextafter(tie, 0), tie, np.nextafter(tie, np.inf), 1e300):
        _check(x, f)
        _check(-x, f)
    assert formats.round_to(np.nextafter(tie, 0), f) == big  # just below the tie: kept
    over = float(formats.round_to(1e300, f))
    if f.has_inf:
        assert over == math.inf and float(formats.round_to(tie, f)) == math.inf
    elif _has_nan(f):
        assert math.isnan(over)  # fp8_e4m3: no inf, overflow gives NaN
    else:
        assert over == big  # neither inf nor NaN: saturates


@pytest.mark.parametrize("f", FORMATS, ids=lambda f: f.name)
def test_subnormals_and_zero(f):
    tiny = f.smallest_subnormal
    for x in (tiny, tiny / 2, np.nextafter(tiny / 2, 1), tiny * 1.5, tiny * 2.5, 5e-324, 0.0):
        _check(x, f)
        _check(-x, f)
    assert math.copysign(1, float(formats.round_to(-tiny / 4, f))) == -1  # -0, as IEEE rounds


@pytest.mark.parametrize("f", FORMATS, ids=lambda f: f.name)
def test_inf_and_nan_inputs(f):
    _check(math.inf, f)
    _check(-math.inf, f)
    if _has_nan(f):
        assert math.isnan(float(formats.round_to(math.nan, f)))
    else:
        with pytest.raises(ValueError, match="NaN"):
            formats.round_to([1.0, math.nan], f)


def test_arrays_keep_their_shape_and_scalars_stay_scalars():
    x = np.array([[1 + 2**-8 + 2**-30, 3.0], [-1e-40, 7e4]])
    out = formats.round_to(x, "bf16")
    assert out.shape == (2, 2) and out.dtype == np.dtype(ml_dtypes.bfloat16)
    bf16 = formats.get("bf16")
    assert [float(v) for v in out.ravel()] == [reference(float(v), bf16) for v in x.ravel()]
    assert isinstance(formats.round_to(1.0, "fp16"), np.float16)
    assert formats.round_to([], "fp16").shape == (0,)
    assert formats.round_to(np.ones(3, ml_dtypes.bfloat16), "fp8_e5m2").tolist() == [1.0] * 3


def test_bad_inputs_are_refused_with_their_name():
    for bad in ("1.5", [1.0, "a"], 1 + 2j, np.ones(2, complex), True, np.zeros(2, bool), None):
        with pytest.raises(TypeError, match="round_to: x must"):
            formats.round_to(bad, "fp16")
    with pytest.raises(ValueError, match="unknown floating-point format"):
        formats.round_to(1.0, "fp12")
    if "e8m0" in [f.name for f in formats.all_formats(block=True)]:  # ml_dtypes >= 0.5
        with pytest.raises(ValueError, match="e8m0 holds the scales"):
            formats.round_to(3.0, "e8m0")


# --- property tests -----------------------------------------------------------------------------


@st.composite
def near_ties(draw, fmts=FORMATS):
    """A value near a tie between two neighbours of a format, and the format."""
    f = draw(st.sampled_from(fmts))
    if f.bits <= 16:
        values, _ = _values(f)
        i = draw(st.integers(0, len(values) - 2))
        low, high = values[i], values[i + 1]
    else:  # fp32: a float32 and the next one up
        a = np.float32(draw(st.floats(0, allow_infinity=False, width=32)))
        low, high = Fraction(float(a)), Fraction(float(np.nextafter(a, np.float32(np.inf))))
    x = float((low + high) / 2)  # exact in float64: at most 25 significant bits
    for _ in range(draw(st.integers(0, 3))):
        x = float(np.nextafter(x, draw(st.sampled_from([0.0, math.inf]))))
    return draw(st.sampled_from([1.0, -1.0])) * x, f


@given(near_ties())
def test_float64_near_ties(case):
    x, f = case
    _check(x, f)
    _check(np.float64(x), f)


@given(st.floats(allow_nan=False, width=64), st.sampled_from(FORMATS))
def test_any_python_float(x, f):
    _check(x, f)


@given(st.floats(allow_nan=False, width=32), st.sampled_from(FORMATS))
def test_any_float32(x, f):
    _check(np.float32(x), f)


@given(near_ties([f for f in FORMATS if f.mantissa_bits < 23]))
def test_float32_near_ties(case):
    x, f = case
    x32 = np.float32(x)
    _check(x32, f)


@given(st.sampled_from(FORMATS), st.floats(-6, 6), st.integers(-60, 60))
def test_subnormal_and_out_of_range_magnitudes(f, mantissa, shift):
    low = math.log2(f.smallest_subnormal)
    high = f.max_exponent + 2
    e = int(np.clip(low + (high - low) * (shift + 60) / 120, -1074, 1023))
    x = math.ldexp(mantissa, e) if mantissa else 0.0
    _check(x, f)
    _check(np.asarray([x, -x]).astype(np.float64)[0], f)


def test_update_survives_names_shapes_that_do_not_match_and_keeps_nan_weights():
    with pytest.raises(ValueError, match="weight and update"):
        formats.update_survives([1.0, 2.0], [1.0, 2.0, 3.0], "fp16")
    assert not formats.update_survives(math.nan, 1.0, "fp16")  # NaN stays NaN: unchanged
    assert formats.update_survives(1.0, math.nan, "fp16")  # the weight becomes NaN
    assert formats.update_survives(1.0, math.inf, "fp16")
