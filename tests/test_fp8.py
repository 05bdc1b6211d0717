"""mptutor.fp8 and the block formats of mptutor.formats: NumPy and ml_dtypes only."""

import functools
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mptutor import formats, fp8

needs_block_formats = pytest.mark.skipif(
    not hasattr(ml_dtypes, "float4_e2m1fn"), reason="FP6, FP4 and E8M0 need ml_dtypes >= 0.5"
)
FP8 = ("fp8_e4m3", "fp8_e5m2")
ELEMENTS = FP8 + ("fp6_e2m3", "fp6_e3m2", "fp4_e2m1")
finite32 = st.floats(-1e6, 1e6, allow_nan=False, width=32)
scales = st.integers(-20, 20).map(lambda k: 2.0**k)


@functools.cache
def _values(fmt):
    return formats.representable_values(-formats.get(fmt).max, formats.get(fmt).max, fmt)


def _nearest(y, fmt):
    """The value(s) of the format nearest to y (one, or both neighbours of a tie)."""
    values = _values(fmt)
    gaps = np.abs(values - y)
    return set(values[gaps == gaps.min()].tolist())


# --- the block formats in the one table ----------------------------------------------------------


@needs_block_formats
@pytest.mark.parametrize(
    ("name", "spelling", "bits", "exp", "mant", "largest", "emax"),
    [
        ("fp6_e2m3", "E2M3", 6, 2, 3, 7.5, 2),
        ("fp6_e3m2", "float6_e3m2fn", 6, 3, 2, 28.0, 4),
        ("fp4_e2m1", "e2m1", 4, 2, 1, 6.0, 2),
        ("e8m0", "float8_e8m0fnu", 8, 8, 0, 2.0**127, 127),
    ],
)
def test_block_formats_are_in_the_one_table(name, spelling, bits, exp, mant, largest, emax):
    f = formats.get(spelling)
    assert f.name == name and formats.get(f.dtype) is f
    assert (f.bits, f.exponent_bits, f.mantissa_bits, f.max, f.max_exponent) == (
        bits,
        exp,
        mant,
        largest,
        emax,
    )
    assert not f.has_inf
    assert f.name in formats.table([name]).column("format")


@needs_block_formats
def test_tensor_formats_stay_the_default_list():
    assert [f.name for f in formats.all_formats()] == list(formats.FORMAT_NAMES)
    assert formats.FORMAT_NAMES == ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
    every = [f.name for f in formats.all_formats(block=True)]
    assert every == [*formats.FORMAT_NAMES, "fp6_e2m3", "fp6_e3m2", "fp4_e2m1", "e8m0"]
    assert "0 sign + 8 exponent + 0 mantissa" in repr(formats.get("e8m0"))
    with pytest.raises(ValueError, match="block formats fp6_e2m3, fp6_e3m2, fp4_e2m1, e8m0"):
        formats.get("fp2")


# --- per-tensor scales ---------------------------------------------------------------------------


def test_scale_from_amax():
    assert fp8.scale_from_amax(2.0, "fp8_e4m3") == 224.0
    assert fp8.scale_from_amax(2.0, "e5m2", margin=2) == 57344 / 2 / 4
    for amax in (0.0, math.inf, math.nan):
        assert fp8.scale_from_amax(amax, "fp8_e4m3", previous=3.0) == 3.0
    rows = fp8.scale_from_amax(np.array([1.0, 0.0, 4.0]), "fp8_e4m3", previous=np.array([5.0] * 3))
    np.testing.assert_array_equal(rows, [448.0, 5.0, 112.0])
    assert fp8.scale_from_amax(1e-300, "fp8_e4m3") == np.finfo(np.float32).max  # stays FP32


@pytest.mark.parametrize("fmt", FP8)
@given(x=finite32, scale=scales)
def test_quantize_rounds_to_the_nearest_value_and_saturates(fmt, x, scale):
    f = formats.get(fmt)
    q = fp8.quantize(np.float32(x), fmt, scale)
    assert q.dtype == f.dtype
    y = float(np.float32(x) * np.float32(scale))
    if abs(y) >= f.max:
        assert float(q) == math.copysign(f.max, y)
    else:
        assert float(q) in _nearest(y, fmt)
        assert q == np.float32(y).astype(f.dtype)  # ml_dtypes' own cast agrees in range


@needs_block_formats
@pytest.mark.parametrize("fmt", ELEMENTS)
@given(k=st.integers(-10, 10), data=st.data())
def test_values_of_the_format_round_trip(fmt, k, data):
    v = data.draw(st.sampled_from(_values(fmt).tolist()))
    q = fp8.quantize(np.float32(v * 2.0**-k), fmt, 2.0**k)
    assert float(q) == v
    assert fp8.dequantize(q, 2.0**k) == np.float32(v * 2.0**-k)


def test_saturation_is_the_same_whatever_the_library_does():
    big = np.array([1000.0, np.inf, -np.inf, np.nan], dtype=np.float32)
    q = fp8.quantize(big, "fp8_e4m3", 1.0)
    np.testing.assert_array_equal(q.astype(np.float32)[:3], [448, 448, -448])
    assert np.isnan(q.astype(np.float32)[3])
    assert np.isnan(np.float32(1000).astype(ml_dtypes.float8_e4m3fn))  # ml_dtypes: NaN
    e5 = fp8.quantize(np.array([1e6, -np.inf]), "fp8_e5m2", 1.0).astype(np.float64)
    np.testing.assert_array_equal(e5, [57344, -57344])


def test_per_row_scales_broadcast():
    x = np.array([[1.0, -2.0], [100.0, 50.0]], dtype=np.float32)
    s = fp8.scale_from_amax(np.abs(x).max(axis=1, keepdims=True), "fp8_e4m3")
    q = fp8.quantize(x, "fp8_e4m3", s)
    np.testing.assert_array_equal(np.abs(q.astype(np.float32)).max(axis=1), [448, 448])
    back = fp8.dequantize(q, s)
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, x, rtol=2**-4)


# --- delayed scaling -----------------------------------------------------------------------------


def test_delayed_scaling_worked_by_hand():
    # e4m3, margin 1: scale = 448 / amax / 2 = 224 / amax; window of 3, largest amax.
    ds = fp8.DelayedScaling("fp8_e4m3", history_len=3, algo="max", margin=1)
    used = []
    for amax in (2.0, 8.0, 4.0, 1.0, 0.0, math.nan, 0.5, math.inf):
        used.append(ds.scale)  # the scale this step quantizes with
        ds.update(amax)
    # windows after each step: [2] [2 8] [2 8 4] [8 4 1] (0, NaN: kept) [4 1 .5] (inf: kept)
    assert used == [1.0, 112.0, 28.0, 28.0, 28.0, 28.0, 28.0, 56.0]
    assert ds.scale == 56.0 and ds.amax == 4.0
    np.testing.assert_array_equal(ds.history, [4.0, 1.0, 0.5])
    recent = fp8.DelayedScaling("e4m3", history_len=3, algo="most_recent")
    assert [recent.update(a) for a in (2.0, 8.0, 0.0, 0.5)] == [224.0, 56.0, 56.0, 896.0]
    assert "history_len=3" in repr(recent)


def test_delayed_scaling_trails_current_scaling_by_one_step():
    amaxes = [1.0, 3.0, 2.0, 50.0, 2.0]
    ds = fp8.DelayedScaling("fp8_e4m3", history_len=1)
    for t, amax in enumerate(amaxes):
        expected = 1.0 if t == 0 else fp8.scale_from_amax(amaxes[t - 1], "fp8_e4m3")
        assert ds.scale == expected
        ds.update(amax)


# --- MX blocks -----------------------------------------------------------------------------------


@needs_block_formats
@pytest.mark.parametrize("fmt", ELEMENTS)
@given(
    x=st.lists(
        st.floats(-1e4, 1e4, allow_nan=False, width=32).filter(lambda v: v == 0 or abs(v) > 1e-6),
        min_size=8,
        max_size=8,
    )
)
def test_mx_floor_rule(fmt, x):
    f = formats.get(fmt)
    elements, scales = fp8.mx_quantize(np.array(x, np.float32), fmt, block=4)
    assert elements.dtype == f.dtype and scales.dtype == ml_dtypes.float8_e8m0fnu
    assert elements.shape == (8,) and scales.shape == (2,)
    back = fp8.mx_dequantize(elements, scales, block=4)
    for i in range(2):
        amax = max(abs(v) for v in x[4 * i : 4 * i + 4])
        s = float(scales[i])
        if amax == 0:
            assert s == 2.0**-127
            continue
        assert s == 2.0 ** (math.frexp(amax)[1] - 1 - f.max_exponent)  # floor(log2 amax) - emax
        assert 2.0**f.max_exponent <= amax / s < 2.0 ** (f.max_exponent + 1)
        for j in range(4 * i, 4 * i + 4):  # each element: the nearest value, or saturated
            y = x[j] / s
            if abs(y) >= f.max:
                assert float(elements[j]) == math.copysign(f.max, y)
            else:
                assert float(elements[j]) in _nearest(y, fmt)
            assert back[j] == np.float32(float(elements[j]) * s)


@needs_block_formats
@pytest.mark.parametrize("fmt", ELEMENTS)
@given(x=st.lists(st.floats(2.0**-10, 1e4, width=32), min_size=4, max_size=4))
def test_mx_rceil_never_saturates(fmt, x):
    f = formats.get(fmt)
    elements, scales = fp8.mx_quantize(np.array(x, np.float32), fmt, 4, "rceil")
    s, amax = float(scales[0]), max(x)
    assert amax / s <= f.max < 2 * amax / s  # the smallest power of two that fits
    floor_scale = float(fp8.mx_quantize(np.array(x, np.float32), fmt, 4)[1][0])
    assert s in (floor_scale, 2 * floor_scale)


@needs_block_formats
def test_mx_worked_examples():
    x = np.array([500.0, 1.0, -3.0, 0.25], np.float32)
    e, s = fp8.mx_quantize(x, "fp8_e4m3", block=4)  # floor(log2 500) = 8 = emax: scale 1
    assert float(s[0]) == 1.0 and float(e[0]) == 448.0  # 500 saturates
    e, s = fp8.mx_quantize(x, "fp8_e4m3", block=4, scale_rounding="rceil")
    assert float(s[0]) == 2.0 and float(e[0]) == 256.0  # 500 / 2 fits, rounded to 256
    e, s = fp8.mx_quantize(np.array([7.0, 1.0], np.float32), "fp4_e2m1", block=2)
    assert float(s[0]) == 1.0 and float(e[0]) == 6.0  # floor(log2 7) = 2 = emax of FP4


@needs_block_formats
def test_mx_all_zero_and_non_finite_blocks():
    x = np.zeros((2, 64), np.float32)
    x[1, :32] = np.linspace(-1, 1, 32)
    x[1, 40] = np.nan
    e, s = fp8.mx_quantize(x, "fp4_e2m1")
    scales = s.astype(np.float64)
    np.testing.assert_array_equal(scales[0], [2.0**-127, 2.0**-127])  # all-zero blocks
    assert scales[1, 0] == 2.0**-2 and np.isnan(scales[1, 1])  # floor(log2 1) - 2
    back = fp8.mx_dequantize(e, s)
    np.testing.assert_array_equal(back[0], 0.0)
    assert np.isfinite(back[1, :32]).all() and np.isnan(back[1, 32:]).all()
    np.testing.assert_allclose(back[1, :32], x[1, :32], atol=1 * 2.0**-2)  # half of FP4's step 2


@needs_block_formats
def test_nvfp4():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 64)) * np.logspace(-1, 2, 4)[:, None]).astype(np.float32)
    e, bs, ts = fp8.nvfp4_quantize(x)
    assert (e.dtype, bs.dtype, e.shape, bs.shape) == (
        np.dtype(ml_dtypes.float4_e2m1fn),
        np.dtype(ml_dtypes.float8_e4m3fn),
        (4, 64),
        (4, 4),
    )
    assert isinstance(ts, np.float32) and ts == np.float32(np.abs(x).max() / (6 * 448))
    assert float(bs.astype(np.float32).max()) == 448.0  # the block of the tensor's amax
    back = fp8.nvfp4_dequantize(e, bs, ts)
    block_amax = np.abs(x).reshape(4, 4, 16).max(axis=-1)
    error = np.abs(back - x).reshape(4, 4, 16).max(axis=-1)
    assert (error <= block_amax / 6 * 1.07).all()  # at most one FP4 step of the top binade
    zeros = fp8.nvfp4_quantize(np.zeros(16))
    assert zeros[2] == 1.0 and not fp8.nvfp4_dequantize(*zeros).any()


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: fp8.quantize([1.0], "fp64", 1.0),
            ValueError,
            "fmt must be one of fp32,.*fp8_e4m3",
        ),
        (lambda: fp8.quantize([1.0], "e4m3", 0.0), ValueError, r"scale must be in \(0, inf\)"),
        (lambda: fp8.quantize([1.0], "e4m3", -np.ones(1)), ValueError, "scale must hold positive"),
        (lambda: fp8.quantize([1.0], "e4m3", math.inf), ValueError, "scale must be a finite"),
        (lambda: fp8.quantize(["a"], "e4m3", 1.0), TypeError, "x must hold real numbers"),
        (lambda: fp8.dequantize([1.0], "2"), TypeError, "scale must be a real number"),
        (lambda: fp8.scale_from_amax(-1.0, "e4m3"), ValueError, "amax must be >= 0"),
        (lambda: fp8.scale_from_amax(1.0, "e4m3", margin=-1), ValueError, r"margin must be in \[0"),
        (lambda: fp8.scale_from_amax(1.0, "e4m3", margin=0.5), TypeError, "margin must be an int"),
        (lambda: fp8.DelayedScaling("e4m3", history_len=0), ValueError, "history_len must be in"),
        (lambda: fp8.DelayedScaling("e4m3", algo="mean"), ValueError, "max, most_recent"),
        (lambda: fp8.DelayedScaling("e4m3").update(-2.0), ValueError, "amax must be >= 0"),
        (lambda: fp8.DelayedScaling("e4m3").update([1, 2]), ValueError, "amax must be one number"),
    ],
)
def test_bad_input_names_the_argument_and_what_is_accepted(call, error, message):
    with pytest.raises(error, match=message):
        call()


@needs_block_formats
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: fp8.quantize([1.0], "e8m0", 1.0),
            "fmt must be one of fp32, .*, fp4_e2m1, got 'e8m0'",
        ),
        (lambda: fp8.quantize([np.nan], "fp4_e2m1", 1.0), "NaN, which fp4_e2m1 cannot represent"),
        (
            lambda: fp8.mx_quantize(np.ones(32), "bf16"),
            "elem_fmt must be one of fp8_e4m3, fp8_e5m2",
        ),
        (lambda: fp8.mx_quantize(np.ones(32), "e4m3", scale_rounding="up"), "floor, rceil"),
        (lambda: fp8.mx_quantize(np.ones(32), "e4m3", block=0), r"block must be in \[1"),
        (lambda: fp8.mx_quantize(np.ones(30), "e4m3"), "must be a multiple of block=32"),
        (lambda: fp8.mx_dequantize(np.ones(64), np.ones(3)), r"scales must have shape \(2,\)"),
        (lambda: fp8.nvfp4_quantize(np.ones(8)), "multiple of block=16"),
        (lambda: fp8.nvfp4_dequantize(np.ones(16), np.ones(1), 0.0), "tensor_scale must be in"),
    ],
)
def test_bad_block_input_names_the_argument_and_what_is_accepted(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- the boundary: refused calls change nothing, tiny and huge inputs -------------------------


def test_a_margin_beyond_float32s_range_is_refused_before_the_window_moves():
    with pytest.raises(ValueError, match=r"margin must be in \[0, 127\], got 2000"):
        fp8.scale_from_amax(1.0, "fp8_e4m3", margin=2000)
    with pytest.raises(ValueError, match=r"margin must be in \[0, 127\], got 2000"):
        fp8.DelayedScaling("fp8_e4m3", margin=2000)
    with pytest.raises(ValueError, match=r"history_len must be in \[1, 1048576\]"):
        fp8.DelayedScaling("fp8_e4m3", history_len=10**24)
    # the largest margin still gives a positive float32 scale, however large the amax
    for amax in (1e-30, 1.0, 3e38):
        scale = fp8.scale_from_amax(amax, "fp8_e4m3", margin=127)
        assert np.float32(scale) > 0 and np.isfinite(np.float32(scale))
    assert fp8.scale_from_amax(1.0, "fp8_e4m3", margin=2) == 112.0  # unchanged where it fits


@given(
    amaxes=st.lists(st.floats(0, 1e30, allow_nan=False), min_size=1, max_size=6),
    bad=st.sampled_from([-1.0, [1.0, 2.0], "2", None, True, np.ones((1, 1))]),
)
def test_a_refused_update_changes_neither_the_window_nor_the_scale(amaxes, bad):
    ds = fp8.DelayedScaling("fp8_e4m3", history_len=4)
    for a in amaxes:
        ds.update(a)
    before = (ds.history.tolist(), ds.scale, ds.amax)
    with pytest.raises((TypeError, ValueError), match="amax must"):
        ds.update(bad)
    assert (ds.history.tolist(), ds.scale, ds.amax) == before


@pytest.mark.parametrize("call", [fp8.scale_from_amax, fp8.quantize])
def test_a_number_is_no_format(call):
    with pytest.raises(ValueError, match="fmt must be one of fp32"):
        call(1.0, np.float32(1.0), 1.0) if call is fp8.quantize else call(1.0, np.float32(1.0))


@needs_block_formats
def test_nvfp4_of_tiny_values_has_a_positive_tensor_scale_and_round_trips():
    x = 1e-45 * np.linspace(-1, 1, 32)  # finite, but amax / (6 * 448) is below float32's range
    e, bs, ts = fp8.nvfp4_quantize(x)
    assert ts > 0 and ts == np.float32(1 / np.finfo(np.float32).max)  # Transformer Engine's
    assert not np.isnan(bs.astype(np.float32)).any()
    back = fp8.nvfp4_dequantize(e, bs, ts)  # its own output is accepted
    assert np.isfinite(back).all() and np.abs(back).max() <= 2e-45
    # above that floor the tensor scale is amax / (6 * 448) as before
    y = np.float32(1e-30) * np.linspace(-1, 1, 32, dtype=np.float32)
    assert fp8.nvfp4_quantize(y)[2] == np.float32(np.abs(y).max() / (6 * 448))


@needs_block_formats
def test_values_beyond_float32_become_inf_without_a_warning():
    x = np.full(32, 1e300)  # float64; the block formats take float32
    e, s = fp8.mx_quantize(x, "fp8_e4m3")
    assert np.isnan(s.astype(np.float32)).all()  # a block holding inf gets a NaN scale
    assert np.isinf(fp8.dequantize(np.array([1e300]), 1.0)).all()
