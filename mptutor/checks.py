"""Argument checks shared by the framework helpers."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["optional_positive"]


def optional_positive(name: str, value: Any) -> float | None:
    """Accept ``None`` or a positive finite number (not a bool).

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
    if value is None:
        return None
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    ):
        return float(value)
    raise ValueError(f"{name} must be a positive finite number, got {value!r}")
