import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mptutor import formats

# Stands in for torch.float16: an instance of torch.dtype, which prints as "torch.float16".
FakeTorchDtype = type("dtype", (), {"__module__": "torch", "__str__": lambda self: "torch.float16"})


class FakeTfDtype:
    """Stands in for tf.bfloat16: a tf.DType has .name and .as_numpy_dtype."""

    name = "bfloat16"
    as_numpy_dtype = ml_dtypes.bfloat16


# MXNet stores bfloat16 as a NumPy record dtype with one field named "bfloat16".
MXNET_BF16 = np.dtype([("bfloat16", np.uint16)])


def test_fp16_facts():
    f = formats.get("fp16")
    assert (f.bits, f.exponent_bits, f.mantissa_bits) == (16, 5, 10)
    assert f.max == 65504.0
    assert f.smallest_normal == 2.0**-14
    assert f.smallest_subnormal == 2.0**-24
    assert math.isclose(f.smallest_subnormal, 5.96e-8, rel_tol=1e-3)
    assert f.eps == 2.0**-10
    assert f.powers_of_two == 40
    assert f.lost_update_ratio == 2.0**-11
    assert f.always_lost_update_ratio == 2.0**-12
    assert f.has_inf


@pytest.mark.parametrize(
    ("name", "bits", "exp", "mant", "largest", "subnormal", "powers"),
    [
        ("fp32", 32, 8, 23, float(np.finfo(np.float32).max), 2.0**-149, 277),
        ("bf16", 16, 8, 7, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 2.0**-133, 261),
        ("fp8_e4m3", 8, 4, 3, 448.0, 2.0**-9, 18),
        ("fp8_e5m2", 8, 5, 2, 57344.0, 2.0**-16, 32),
    ],
)
def test_other_formats(name, bits, exp, mant, largest, subnormal, powers):
    f = formats.get(name)
    assert (f.bits, f.exponent_bits, f.mantissa_bits) == (bits, exp, mant)
    assert f.max == largest
    assert f.smallest_subnormal == subnormal
    assert f.powers_of_two == powers
    assert f.eps == 2.0**-mant


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("float16", "fp16"),
        ("HALF", "fp16"),
        (np.float16, "fp16"),
        (np.dtype("float32"), "fp32"),
        (ml_dtypes.bfloat16, "bf16"),
        ("e4m3", "fp8_e4m3"),
        ("float8-e5m2", "fp8_e5m2"),
        (FakeTorchDtype(), "fp16"),
        (FakeTfDtype(), "bf16"),
        (MXNET_BF16, "bf16"),
        (np.ones(2, np.float16), "fp16"),
        (np.zeros(1, ml_dtypes.float8_e5m2), "fp8_e5m2"),
    ],
)
def test_aliases(alias, expected):
    assert formats.get(alias).name == expected
    assert formats.get(formats.get(alias)) is formats.get(expected)


def test_one_vocabulary_for_get_and_dtype_name():
    # Every spelling of the table names one format, for get and dtype_name alike, whatever its
    # case or dashes.
    for spelling, numpy_name in formats.SPELLINGS.items():
        for text in (spelling, spelling.upper(), spelling.replace("_", "-")):
            assert formats.dtype_name(text) == numpy_name
            assert formats.get(text).dtype.name == numpy_name
    # Whatever dtype_name gives a known format's name, get accepts.
    for fmt in formats.all_formats():
        for thing in (fmt.dtype, fmt.dtype.type, np.zeros(1, fmt.dtype), fmt, fmt.name):
            assert formats.dtype_name(thing) == fmt.dtype.name
            assert formats.get(thing) is fmt
    assert formats.dtype_name(MXNET_BF16) == "bfloat16" == formats.dtype_name(FakeTfDtype())
    assert formats.dtype_name(FakeTorchDtype()) == "float16"


@pytest.mark.skipif(not hasattr(ml_dtypes, "float8_e4m3"), reason="ml_dtypes < 0.5")
def test_ieee_float8_e4m3_is_not_taken_for_e4m3fn():
    # ml_dtypes' float8_e4m3 (with inf, largest 240) is another format than float8_e4m3fn (448).
    assert formats.dtype_name(ml_dtypes.float8_e4m3) == "float8_e4m3"
    with pytest.raises(ValueError, match="unknown floating-point format"):
        formats.get(ml_dtypes.float8_e4m3)


@pytest.mark.parametrize("bad", ["fp64", "int8", np.int32, "", None, "float8_e4m3", object()])
def test_unknown_format_lists_the_known_ones(bad):
    with pytest.raises(ValueError, match="unknown floating-point format") as info:
        formats.get(bad)
    for name in formats.FORMAT_NAMES:
        assert name in str(info.value)


def test_ulp():
    assert formats.ulp(1.0, "fp16") == 2.0**-10
    assert formats.ulp(32768, "fp16") == 32.0
    assert formats.ulp(65504, "fp16") == 32.0
    assert formats.ulp(40000.0, "fp16") == 32.0
    assert formats.ulp(1024, "fp16") == 1.0
    assert formats.ulp(0.0, "fp16") == 2.0**-24
    assert formats.ulp(1e-7, "fp16") == 2.0**-24  # subnormal range: constant spacing
    assert formats.ulp(1.0, "bf16") == 2.0**-7
    assert formats.ulp(70000, "fp16") == np.inf  # rounds to inf: no spacing there
    spacing = formats.ulp(np.array([-2.0, 2.0, 3.0]), "fp16")
    np.testing.assert_array_equal(spacing, [2.0**-9] * 3)


def test_ulp_matches_numpy_spacing_for_fp16_and_fp32():
    values = np.array([1e-6, 0.1, 1.0, 3.0, 1000.0, 60000.0])
    for dtype, name in [(np.float16, "fp16"), (np.float32, "fp32")]:
        expected = np.spacing(values.astype(dtype)).astype(np.float64)
        np.testing.assert_array_equal(formats.ulp(values, name), expected)


def test_round_to_edges():
    assert formats.round_to(65519, "fp16") == 65504
    assert np.isinf(formats.round_to(65520, "fp16"))
    assert formats.round_to(2.0**-25, "fp16") == 0  # halfway to the smallest subnormal: to even
    assert formats.round_to(3.0e-8, "fp16") == 2.0**-24
    assert formats.round_to(32768 + 16, "fp16") == 32768  # tie: to even
    assert formats.round_to(32768 + 17, "fp16") == 32768 + 32
    assert np.isnan(formats.round_to(1000.0, "fp8_e4m3"))  # no inf in e4m3: NaN
    assert formats.round_to(1.0001, "fp32") == np.float32(1.0001)
    out = formats.round_to([1.0, 2.0], "bf16")
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)


def test_round_to_does_not_warn_on_overflow():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        formats.round_to(1e6, "fp16")


def test_one_plus_small_update():
    assert not formats.update_survives(1.0, 1e-4, "fp16")
    assert formats.update_survives(1.0, 1e-4, "fp32")
    assert formats.update_survives(1.0, 1e-4, "bf16") is np.False_
    # The 2**-11 rule at w = 1: exactly half an ulp is a tie that rounds back to 1.
    assert not formats.update_survives(1.0, 2.0**-11, "fp16")
    assert formats.update_survives(1.0, 2.0**-11 * (1 + 2.0**-10), "fp16")
    assert formats.update_survives(1.0, 2.0**-10, "fp16")
    # An update that underflows to zero in the format is lost whatever the weight.
    assert not formats.update_survives(0.0, 1e-9, "fp16")


finite_fp16 = st.floats(-60000, 60000, allow_nan=False, width=16)


@given(w=finite_fp16, dw=finite_fp16)
def test_update_survives_matches_numpy_fp16_arithmetic(w, dw):
    w16, dw16 = np.float16(w), np.float16(dw)
    with np.errstate(over="ignore"):
        expected = (w16 + dw16) != w16
    assert bool(formats.update_survives(w, dw, "fp16")) == bool(expected)


@given(w=st.floats(-(2.0**100), 2.0**100, allow_nan=False, width=32), ratio=st.floats(-24, 0))
def test_update_survives_matches_bf16_through_fp32(w, ratio):
    # bf16 + bf16 rounded through float32 is correctly rounded (24 >= 2*8 + 2 bits).
    dw = w * 2.0**ratio
    wb = np.asarray(w).astype(ml_dtypes.bfloat16)
    db = np.asarray(dw).astype(ml_dtypes.bfloat16)
    total = (wb.astype(np.float32) + db.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert bool(formats.update_survives(w, dw, "bf16")) == bool(total != wb)


def test_lost_update_ratio():
    assert formats.lost_update_ratio("fp16") == 2.0**-11
    assert formats.lost_update_ratio("bf16") == 2.0**-8
    assert formats.lost_update_ratio("fp32") == 2.0**-24
    assert formats.always_lost_update_ratio("fp16") == 2.0**-12
    assert formats.always_lost_update_ratio("bf16") == 2.0**-9
    assert formats.always_lost_update_ratio("fp32") == 2.0**-25


def _every_value(name):
    """Every finite value of a format of at most 16 bits, as float64 (both signs, no zeros)."""
    bits = formats.get(name).bits
    patterns = np.arange(2**bits, dtype=np.uint32).astype(np.dtype(f"uint{bits}"))
    with np.errstate(invalid="ignore"):  # NaN bit patterns
        values = patterns.view(formats.get(name).dtype).astype(np.float64)
    return values[np.isfinite(values) & (values != 0)]


def _round_down(x, name):
    """Largest value of the format that is <= x (x > 0), as float64."""
    f = formats.get(name)
    r = np.asarray(formats.round_to(x, f))
    too_big = r.astype(np.float64) > x
    r = np.where(too_big, np.nextafter(r, np.zeros_like(r)), r)
    return r.astype(np.float64)


def _round_up_strictly(x, name):
    """Smallest value of the format that is > x (x > 0), as float64."""
    f = formats.get(name)
    r = np.asarray(formats.round_to(x, f))
    not_above = r.astype(np.float64) <= x
    r = np.where(not_above, np.nextafter(r, np.full_like(r, f.max)), r)
    return r.astype(np.float64)


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"])
def test_lost_update_ratios_on_every_weight_of_the_format(name):
    # The rule of Format.lost_update_ratio, checked on every finite weight of the format, with
    # updates that are values of the format, added in both directions.
    f = formats.get(name)
    w = _every_value(name)
    always, can = f.always_lost_update_ratio, f.lost_update_ratio
    for sign in (1.0, -1.0):
        # |dw/w| <= 2**-(m+2): lost for every weight, normal or subnormal.
        small = sign * _round_down(np.abs(w) * always, name)
        assert not formats.update_survives(w, small, name).any()
        # |dw/w| > 2**-(m+1): kept by every normal weight (that does not overflow).
        normal = (np.abs(w) >= f.smallest_normal) & (np.abs(w) < f.max / 2)
        big = sign * _round_up_strictly(np.abs(w[normal]) * can, name)
        assert formats.update_survives(w[normal], big, name).all()
    # |dw/w| = 2**-(m+1) exactly: lost when w is a power of two (a tie that rounds back to w),
    # kept by every other normal weight. (Only weights whose update is a normal value, so that
    # w * 2**-(m+1) is exact.)
    exact = (np.abs(w) * can >= f.smallest_normal) & (np.abs(w) < f.max / 2)
    w = w[exact]
    power_of_two = np.exp2(np.floor(np.log2(np.abs(w)))) == np.abs(w)
    survives = formats.update_survives(w, w * can, name)
    np.testing.assert_array_equal(survives, ~power_of_two)


def test_between_the_ratios_it_depends_on_where_the_weight_sits():
    # fp16, |dw/w| = 1.5 * 2**-12, between 2**-12 and 2**-11: within each binade
    # [2**e, 2**(e+1)) the spacing is 2**(e-10), so the update is lost just above a power of
    # two (spacing 2**-10 of the weight) and kept just below the next one (close to 2**-11).
    ratio = 1.5 * 2.0**-12
    w = formats.representable_values(1.0, 2.0 - 2.0**-10, "fp16")  # one binade
    survives = formats.update_survives(w, w * ratio, "fp16")
    assert not survives[0] and survives[-1]
    # Kept once the update, as stored in fp16, passes half the spacing 2**-11 (w > 4/3 or so);
    # an exact tie goes to the even neighbour.
    dw = formats.round_to(w * ratio, "fp16").astype(np.float64)
    odd = (w * 2**10) % 2 == 1
    np.testing.assert_array_equal(survives, (dw > 2.0**-11) | ((dw == 2.0**-11) & odd))
    assert not survives[w < 4 / 3 - 2**-8].any() and survives[w > 4 / 3 + 2**-8].all()
    assert 0.3 < survives.mean() < 0.7
    # The same share in every normal binade: the rule is relative.
    w8 = w * 2.0**8
    np.testing.assert_array_equal(formats.update_survives(w8, w8 * ratio, "fp16"), survives)


def test_representable_values():
    top = formats.representable_values(32768, 65504, "fp16")
    assert top.size == 1024
    assert set(np.diff(top)) == {32.0}
    assert top[-1] == 65504
    ones = formats.representable_values(1.0, 2.0, "fp16")
    assert ones.size == 1025 and ones[1] - ones[0] == 2.0**-10
    assert formats.representable_values(1.0, 2.0, "bf16").size == 129  # and no NaN-cast warning
    fp32 = formats.representable_values(1.0, 1.0 + 8 * 2.0**-23, "fp32")
    assert fp32.size == 9
    around_zero = formats.representable_values(-1e-7, 1e-7, "fp16")
    np.testing.assert_array_equal(around_zero, np.array([-1, 0, 1]) * 2.0**-24)


@pytest.mark.parametrize(
    ("low", "high", "message"),
    [
        (2.0, 1.0, r"high \(the upper end, at least low\) must be in \[2, inf\], got 1.0"),
        (0.0, math.inf, "high .* must be a finite number, got inf"),
        (math.nan, 1.0, "low must be a finite number, got nan"),
        (0.0, 60000.0, "exceed limit"),
    ],
)
def test_representable_values_rejects_bad_intervals(low, high, message):
    with pytest.raises(ValueError, match=message):
        formats.representable_values(low, high, "fp16", limit=10_000)


def test_table_lists_every_format():
    t = formats.table()
    assert [row["format"] for row in t] == list(formats.FORMAT_NAMES)
    text = repr(t)
    assert "65504" in text and "5.96e-08" in text
    assert t.column("always lost if |dw/w| <=")[:3] == ["2**-25", "2**-12", "2**-9"]
    assert t.column("can be lost if |dw/w| <=")[:3] == ["2**-24", "2**-11", "2**-8"]
    assert "<table>" in t._repr_html_()
    assert formats.table(["half"]).column("format") == ["fp16"]


def test_dtype_name_spells_numpy_ml_dtypes_and_strings():
    assert formats.dtype_name(np.ones(1, np.float32)) == "float32"
    assert formats.dtype_name(np.dtype([("bfloat16", np.uint16)])) == "bfloat16"  # MXNet's bf16
    assert formats.dtype_name("mixed_float16") == "mixed_float16"  # a Keras policy stays
    assert formats.dtype_name("int64") == "int64" == formats.dtype_name(np.int64)
    assert formats.dtype_name("half") == "float16"
    assert formats.dtype_name(ml_dtypes.bfloat16) == "bfloat16"
    for bad in (object(), None):
        with pytest.raises(TypeError, match="has no dtype"):
            formats.dtype_name(bad)


def test_table_takes_one_format_alone_but_not_a_number():
    assert [row["format"] for row in formats.table("bf16").rows] == ["bf16"]  # not "b", "f", ...
    with pytest.raises(ValueError, match="unknown floating-point format 5"):
        formats.table(5)


def test_one_spelling_per_precision():
    assert formats.precision("FP8-E4M3") == "fp8_e4m3"
    assert formats.precision("amp_bf16") == "amp_bf16"
    assert set(formats.FORMAT_NAMES) - {"fp8_e5m2"} <= set(formats.PRECISIONS)
    with pytest.raises(ValueError, match="known: fp32, tf32"):
        formats.precision("fp32-strict")
    with pytest.raises(TypeError, match="string"):
        formats.precision(None)
