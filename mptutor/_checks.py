"""Argument checks shared by the modules: one for numbers, one for every other kind of object.

``check_scalar`` follows scikit-learn's function of that name: Python and NumPy numbers alike,
no booleans, and an error that names the argument and the values it accepts.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal


def _short(value: Any) -> str:
    """Return the repr, cut short so that a huge value does not flood a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bound(value: float) -> str:
    """Write a bound: integers in full (2147483647, not 2.14748e+09), other numbers short."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**63 else f"{value:g}"


def check_scalar(
    value: Any, name: str, kind: type[int] | type[float] = float, *, min_val: float | None = None,
    max_val: float | None = None, include_boundaries: Literal["both", "left", "right", "neither"] =
    "both", allow_none: bool = False,
) -> Any:  # fmt: skip
    """Return a finite ``int`` (or ``float``: any real) within bounds as a Python number.

    ``TypeError`` for another kind (booleans included), ``ValueError`` for NaN, infinity or a
    value out of bounds (``include_boundaries``), naming ``name`` and the interval.
    """
    if value is None and allow_none:
        return None
    wanted = numbers.Integral if kind is int else numbers.Real
    if isinstance(value, bool) or type(value).__name__ == "bool_" or not isinstance(value, wanted):
        what = ("an int" if kind is int else "a real number") + (" or None" if allow_none else "")
        raise TypeError(
            f"{name} must be {what}, got {_short(value)} of type {type(value).__name__}"
        )
    try:
        number = int(value) if kind is int else float(value)
    except OverflowError:  # an int beyond float's range, e.g. 10**400
        number = math.inf
    if kind is not int and not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {_short(value)}")
    left = include_boundaries in ("both", "left")
    right = include_boundaries in ("both", "right")
    if (min_val is not None and (number < min_val or (number == min_val and not left))) or (
        max_val is not None and (number > max_val or (number == max_val and not right))
    ):
        low = "-inf" if min_val is None else _bound(min_val)
        high = "inf" if max_val is None else _bound(max_val)
        interval = f"{'[' if left else '('}{low}, {high}{']' if right else ')'}"
        raise ValueError(f"{name} must be in {interval}, got {_short(value)}")
    return number


def check_type(value: Any, name: str, types: type | tuple[type, ...], accepted: str) -> Any:
    """Return ``value`` if it is an instance of ``types`` (a protocol too), else a TypeError.

    It names the argument, the value, its type and ``accepted`` (in words), and a class given
    for an instance.
    """
    classes = types if isinstance(types, tuple) else (types,)
    if isinstance(value, type) and type not in classes:  # a protocol's isinstance passes it
        raise TypeError(
            f"{name} must be {accepted}, got the class {value.__name__}: pass an instance, "
            f"e.g. {value.__name__}()"
        )
    if not isinstance(value, types):
        raise TypeError(
            f"{name} must be {accepted}, got {_short(value)} of type {type(value).__name__}"
        )
    return value


def optional_positive(name: str, value: Any) -> float | None:
    """Return ``None`` or a positive finite number as a float; else a ``ValueError``."""
    try:
        return check_scalar(value, name, min_val=0, include_boundaries="neither", allow_none=True)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a positive finite number or None, got {_short(value)}"
        ) from None


def check_format(value: Any, name: str = "fmt") -> Any:
    """Return the :class:`mptutor.formats.Format` that ``value`` names, refusing numbers.

    A number is no format (NumPy would read ``np.float32(1)`` as its type): a ``TypeError``
    naming ``name``; an unknown name the ``ValueError`` of :func:`mptutor.formats.get`.
    """
    if isinstance(value, numbers.Number) or type(value).__name__ in ("bool", "bool_"):
        raise TypeError(
            f"{name} must name a format (e.g. 'fp16', 'fp8_e4m3' or a dtype), got "
            f"{_short(value)} of type {type(value).__name__}"
        )
    from mptutor import formats  # formats imports this module

    return formats.get(value)
