import numpy as np
import pytest

from mptutor._checks import check_scalar, check_type, optional_positive


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), True, "1", np.bool_(True)])
def test_optional_positive_refuses_and_names_the_argument(bad):
    with pytest.raises(ValueError, match="max_norm must be a positive finite number"):
        optional_positive("max_norm", bad)


def test_optional_positive_accepts_none_python_and_numpy_numbers():
    assert optional_positive("x", None) is None
    assert optional_positive("x", 2) == 2.0
    value = optional_positive("x", np.float32(1.0))
    assert value == 1.0 and type(value) is float


def test_check_scalar_returns_python_numbers():
    assert type(check_scalar(np.int64(3), "n", int)) is int
    assert check_scalar(np.float16(0.5), "p", float, min_val=0, max_val=1) == 0.5


@pytest.mark.parametrize(
    ("value", "kind", "error", "message"),
    [
        (True, int, TypeError, "steps must be an int, got True of type bool"),
        (np.bool_(False), float, TypeError, "steps must be a real number"),
        (1.5, int, TypeError, "steps must be an int"),
        ("3", float, TypeError, "got '3' of type str"),
        (float("nan"), float, ValueError, "steps must be a finite number"),
        (0, int, ValueError, r"steps must be in \[1, 10\), got 0"),
        (10, int, ValueError, r"steps must be in \[1, 10\), got 10"),
    ],
)
def test_check_scalar_refuses_with_the_accepted_values(value, kind, error, message):
    with pytest.raises(error, match=message):
        check_scalar(value, "steps", kind, min_val=1, max_val=10, include_boundaries="left")


def test_check_scalar_boundaries():
    assert check_scalar(0.0, "x", min_val=0) == 0.0
    with pytest.raises(ValueError, match=r"\(0, inf\)"):
        check_scalar(0.0, "x", min_val=0, include_boundaries="neither")
    assert check_scalar(None, "x", allow_none=True) is None
    with pytest.raises(TypeError, match="x must be a real number, got None"):
        check_scalar(None, "x")


def test_check_scalar_prints_integer_bounds_in_full():
    with pytest.raises(ValueError, match=r"count must be in \[0, 2147483647\], got 2147483648"):
        check_scalar(2**31, "count", int, min_val=0, max_val=2**31 - 1)


def test_check_type_names_the_argument_the_value_and_what_is_accepted():
    assert check_type(True, "flag", bool, "True or False") is True
    with pytest.raises(TypeError, match="flag must be True or False, got 'False' of type str"):
        check_type("False", "flag", bool, "True or False")
    with pytest.raises(TypeError, match=r"got the class int: pass an instance, e.g. int\(\)"):
        check_type(int, "number", (int, float), "a number")
    long = "x" * 500
    with pytest.raises(TypeError) as info:
        check_type(long, "name", int, "an int")
    assert len(str(info.value)) < 150  # a huge value is cut short in the message


def test_check_scalar_refuses_an_int_beyond_the_float_range():
    with pytest.raises(ValueError, match=r"scale must be a finite number, got 1000000000+\.\.\.$"):
        check_scalar(10**400, "scale")
    assert check_scalar(10**400, "count", int) == 10**400  # an int is an int


def test_messages_cut_a_huge_value_short():
    for check in (
        lambda: check_scalar(10**400, "n", int, max_val=10),
        lambda: optional_positive("x", 10**400),
        lambda: check_scalar("9" * 400, "x"),
    ):
        with pytest.raises((TypeError, ValueError)) as info:
            check()
        assert len(str(info.value)) < 200


def test_check_type_accepts_a_class_where_classes_are_asked_for():
    assert check_type(int, "kind", type, "a class") is int


def test_check_format_names_formats_and_refuses_numbers():
    from mptutor._checks import check_format

    assert check_format("fp16").name == "fp16"
    assert check_format(np.dtype("float32")).name == "fp32"
    assert check_format(np.ones(2, np.float16)).name == "fp16"  # an array names its dtype
    for number in (5, 1.5, np.float32(1.0), True, np.bool_(True)):
        with pytest.raises(TypeError, match="fmt must name a format"):
            check_format(number)
    with pytest.raises(ValueError, match="unknown floating-point format 'fp12'"):
        check_format("fp12")
