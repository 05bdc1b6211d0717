"""Argument checks shared by every module: one validator for numbers, one for kinds of object.

``check_scalar`` follows scikit-learn's function of the same name: it accepts Python and NumPy
numbers alike (``np.float32(1.0)`` as well as ``1.0``), refuses booleans, and names the argument
and the accepted values in its error. ``check_type`` does the same for everything else (a model,
a tensor, a flag, a loss scaler).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal

__all__ = ["check_scalar", "check_type", "optional_positive"]

_BOUNDARIES = ("both", "left", "right", "neither")


def _bound(value: float) -> str:
    # integers in full (2147483647, not 2.14748e+09), other numbers short
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**63 else f"{value:g}"


def _short(value: Any) -> str:
    # the repr, cut short with "..." so that a huge value does not flood the message
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _interval(min_val: float | None, max_val: float | None, include: str) -> str:
    left = "[" if include in ("both", "left") else "("
    right = "]" if include in ("both", "right") else ")"
    low = "-inf" if min_val is None else _bound(min_val)
    high = "inf" if max_val is None else _bound(max_val)
    return f"{left}{low}, {high}{right}"


def check_scalar(
    value: Any,
    name: str,
    kind: type[int] | type[float] = float,
    *,
    min_val: float | None = None,
    max_val: float | None = None,
    include_boundaries: Literal["both", "left", "right", "neither"] = "both",
    allow_none: bool = False,
) -> Any:
    """Check that ``value`` is a finite number of the right kind within bounds.

    Parameters
    ----------
    value : object
        The value given.
    name : str
        The argument's name, for the error message.
    kind : {int, float}, optional
        ``int`` accepts integers only (Python or NumPy); ``float`` accepts any real number.
    min_val, max_val : float or None, optional
        Bounds; ``None`` leaves that side open.
    include_boundaries : {"both", "left", "right", "neither"}, optional
        Which bounds are allowed values themselves.
    allow_none : bool, optional
        Accept ``None`` and return it.

    Returns
    -------
    int, float or None
        The value as a Python ``int`` or ``float`` (``None`` when allowed and given).

    Raises
    ------
    TypeError
        If the value is not a number of that kind (booleans never are).
    ValueError
        If it is NaN or infinite, or lies outside the bounds; the message names the argument and
        the accepted interval.

    Examples
    --------
    >>> import numpy as np
    >>> check_scalar(np.float32(2.0), "scale", min_val=0, include_boundaries="neither")
    2.0
    >>> check_scalar(0, "steps", int, min_val=1)
    Traceback (most recent call last):
    ...
    ValueError: steps must be in [1, inf], got 0
    """
    if kind not in (int, float):
        raise ValueError(f"kind must be int or float, got {kind!r}")
    if include_boundaries not in _BOUNDARIES:
        raise ValueError(
            f"include_boundaries must be one of {_BOUNDARIES}, got {include_boundaries!r}"
        )
    if any(b is not None and b != b for b in (min_val, max_val)) or (
        min_val is not None and max_val is not None and min_val > max_val
    ):
        raise ValueError(f"min_val={min_val!r} and max_val={max_val!r} admit no value")
    if value is None and allow_none:
        return None
    wanted = numbers.Integral if kind is int else numbers.Real
    if isinstance(value, bool) or type(value).__name__ == "bool_" or not isinstance(value, wanted):
        what = "an int" if kind is int else "a real number"
        also = " or None" if allow_none else ""
        got = f"got {_short(value)} of type {type(value).__name__}"
        raise TypeError(f"{name} must be {what}{also}, {got}")
    try:
        number = int(value) if kind is int else float(value)
    except OverflowError:  # an int beyond float's range, e.g. 10**400
        number = math.inf
    if kind is not int and not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {_short(value)}")
    low_ok = min_val is None or (
        number >= min_val if include_boundaries in ("both", "left") else number > min_val
    )
    high_ok = max_val is None or (
        number <= max_val if include_boundaries in ("both", "right") else number < max_val
    )
    if not (low_ok and high_ok):
        interval = _interval(min_val, max_val, include_boundaries)
        raise ValueError(f"{name} must be in {interval}, got {_short(value)}")
    return number


def check_type(value: Any, name: str, types: type | tuple[type, ...], accepted: str) -> Any:
    """Check that ``value`` is an instance of ``types`` (a class itself never is).

    Parameters
    ----------
    value : object
        The value given.
    name : str
        The argument's name, for the error message.
    types : type or tuple of type
        What ``isinstance`` must accept; a ``runtime_checkable`` protocol works too.
    accepted : str
        What is accepted, in words, for the message (``"a torch.nn.Module"``).

    Returns
    -------
    object
        ``value`` itself.

    Raises
    ------
    TypeError
        If it is not; the message names the argument, the value, its type and what is accepted.

    Examples
    --------
    >>> check_type("False", "flat_master", bool, "True or False")
    Traceback (most recent call last):
    ...
    TypeError: flat_master must be True or False, got 'False' of type str
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
    """Accept ``None`` or a positive finite number, Python or NumPy (not a bool).

    Parameters
    ----------
    name : str
        The argument's name, for the error message.
    value : object
        The value given.

    Returns
    -------
    float or None
        The value as a float, or ``None``.

    Raises
    ------
    ValueError
        If the value is anything else; the message names the argument.
    """
    try:
        return check_scalar(
            value, name, float, min_val=0, include_boundaries="neither", allow_none=True
        )
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a positive finite number or None, got {_short(value)}"
        ) from None
