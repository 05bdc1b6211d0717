"""The scale is held in float32, like GradScaler's: rounding to float32 and checking a scale."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mptutor._checks import check_scalar

#: Largest finite float32 value: the scale is held in float32, like GradScaler's.
FLOAT32_MAX: float = float(np.finfo(np.float32).max)


def f32(x: float) -> float:
    """Round a float to the nearest float32 (ties to even); may give inf or 0."""
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(x))


def f32_up(x: float) -> float:
    """Round up to a float32 value (the smallest float32 >= x)."""
    y = f32(x)
    if y < x:
        y = float(np.nextafter(np.float32(y), np.float32(np.inf)))
    return y


def f32_down(x: float) -> float:
    """Round down to a float32 value (the largest float32 <= x)."""
    y = f32(x)
    if y > x:
        y = float(np.nextafter(np.float32(y), np.float32(-np.inf)))
    return y


def scale_value(name: str, value: Any) -> float:
    """Check a scale (a finite number > 0) and round it to the nearest float32.

    Raises
    ------
    TypeError
        If ``value`` is not a real number (booleans are not).
    ValueError
        If it is not finite and > 0, or falls outside float32's range when rounded.
    """
    x = check_scalar(value, name, float, min_val=0, include_boundaries="neither")
    y = f32(x)
    if math.isinf(y):
        raise ValueError(
            f"{name}={x!r} overflows float32 (largest {FLOAT32_MAX:.8g}); the scale is held "
            "in float32"
        )
    if y == 0:
        raise ValueError(f"{name}={x!r} rounds to 0 in float32; the scale is held in float32")
    return y
