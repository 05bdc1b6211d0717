import pytest

from mptutor.checks import optional_positive


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), True, "1"])
def test_refuses_and_names_the_argument(bad):
    with pytest.raises(ValueError, match="max_norm must be a positive finite number"):
        optional_positive("max_norm", bad)


def test_accepts_none_and_positive_numbers():
    assert optional_positive("x", None) is None
    assert optional_positive("x", 2) == 2.0
