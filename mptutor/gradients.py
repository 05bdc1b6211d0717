"""Gradient statistics against a format: zeros, infs/NaNs, what would underflow or overflow.

The framework modules gather a model's gradients into NumPy arrays for :func:`gradient_stats`;
:func:`mptutor.plots.gradient_histogram` draws the result against the format's range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mptutor import formats
from mptutor._checks import check_scalar

__all__ = ["GradientStats", "gradient_stats"]


@dataclass(frozen=True)
class GradientStats:
    """Summary of a set of gradient values, measured against one format.

    Attributes
    ----------
    fmt : str
        The format the values are compared with, e.g. ``"fp16"``.
    count : int
        Number of values.
    zeros, nonfinite : int
        Values that are exactly zero; values that are inf or NaN.
    underflow : int
        Non-zero finite values below half the smallest subnormal: they round to zero.
    subnormal : int
        Values from there up to the smallest normal: kept, with fewer significant bits.
    overflow : int
        Finite values from the power of two above the largest binade on (fp16:
        ``|g| >= 65536``): they become inf (NaN in fp8_e4m3).
    exponents : numpy.ndarray
        ``floor(log2 |g|)`` of every non-zero finite value (int32).
    """

    fmt: str
    count: int
    zeros: int
    nonfinite: int
    underflow: int
    subnormal: int
    overflow: int
    exponents: np.ndarray

    def share(self, what: str) -> float:
        """Return the share (0 to 1) of all values in one category, a field name above.

        Raises
        ------
        ValueError
            For a name that is not one of the five counts.
        """
        names = ("zeros", "nonfinite", "underflow", "subnormal", "overflow")
        if what not in names:
            raise ValueError(f"unknown category {what!r}; choose one of {', '.join(names)}")
        return getattr(self, what) / self.count if self.count else 0.0

    def scaled(self, factor: float) -> GradientStats:
        """Return the statistics of the same values multiplied by ``factor`` (a loss scale).

        Raises
        ------
        ValueError
            If ``factor`` is not a positive power of two (exponents must shift exactly).
        TypeError
            If ``factor`` is not a real number.
        """
        name = "factor (a positive power of two)"
        shift = math.log2(check_scalar(factor, name, min_val=0, include_boundaries="neither"))
        if not shift.is_integer():
            raise ValueError(f"factor must be a positive power of two, got {factor!r}")
        exps = self.exponents + int(shift)
        under, sub, over = _classify(exps, formats.get(self.fmt))
        return GradientStats(
            self.fmt, self.count, self.zeros, self.nonfinite, under, sub, over, exps
        )


def _classify(exponents: np.ndarray, f: formats.Format) -> tuple[int, int, int]:
    """Count underflow, subnormal and overflow by exponent alone (a power of two shifts them)."""
    tiny = f.min_exponent - f.mantissa_bits  # exponent of the smallest subnormal
    under = int(np.count_nonzero(exponents < tiny - 1))
    sub = int(np.count_nonzero((exponents >= tiny - 1) & (exponents < f.min_exponent)))
    over = int(np.count_nonzero(exponents > f.max_exponent))
    return under, sub, over


def gradient_stats(values: np.ndarray | Iterable[np.ndarray], fmt: Any = "fp16") -> GradientStats:
    """Count zeros, infs/NaNs and the values a format would flush, keep coarsely or overflow.

    Parameters
    ----------
    values : numpy.ndarray or iterable of numpy.ndarray
        Gradient values (any float dtype, any shapes); several arrays are pooled.
    fmt : str or dtype, optional
        The format to compare with (see :func:`mptutor.formats.get`).

    Returns
    -------
    GradientStats
        Counts and exponents.

    Raises
    ------
    TypeError
        If ``values`` is not an array or a list of arrays of real numbers.
    ValueError
        If ``fmt`` is not a known format.
    """
    f = formats.get(fmt)
    if isinstance(values, np.ndarray):
        values = [values]
    elif not isinstance(values, Iterable) or isinstance(values, (str, bytes)):
        raise TypeError(
            "values must be an array of gradients or a list of arrays, got "
            f"{values!r:.80} of type {type(values).__name__}"
        )
    arrays = [np.asarray(a) for a in values]
    for i, a in enumerate(arrays):
        if not (a.dtype.kind in "iu" or (a.dtype.kind != "c" and formats._is_float(a.dtype))):
            raise TypeError(f"values[{i}] must hold real numbers, got an array of {a.dtype}")
    flat = np.concatenate([a.astype(np.float64).ravel() for a in arrays]) if arrays else np.zeros(0)
    finite = np.isfinite(flat)
    nonzero = finite & (flat != 0)
    mags = np.abs(flat[nonzero])
    exps = np.floor(np.log2(mags)).astype(np.int32) if mags.size else np.zeros(0, np.int32)
    under, sub, over = _classify(exps, f)
    zeros, nonfinite = int(np.count_nonzero(flat == 0)), int(np.count_nonzero(~finite))
    return GradientStats(f.name, int(flat.size), zeros, nonfinite, under, sub, over, exps)
