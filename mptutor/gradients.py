"""Gradient statistics against a format: zeros, infs/NaNs, what would underflow or overflow.

The framework modules gather a model's gradients into NumPy arrays for :func:`gradient_stats`;
:func:`mptutor.plots.gradient_histogram` draws the result against the format's range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mptutor import formats
from mptutor._checks import check_format, check_scalar

__all__ = ["GradientStats", "gradient_stats"]


@dataclass(frozen=True)
class GradientStats:
    """Summary of a set of gradient values, measured against one format.

    Attributes
    ----------
    fmt, count : str, int
        The format the values are compared with (``"fp16"``), and the number of values.
    zeros, nonfinite : int
        Values that are exactly zero; values that are inf or NaN.
    underflow, subnormal, overflow : int
        Values whose correctly rounded value (:func:`mptutor.formats.round_to`) is 0 (fp16:
        ``|g| <= 2**-25``), a subnormal, or beyond the largest value (fp16: ``|g| >= 65520``).
    exponents, magnitudes : numpy.ndarray
        ``floor(log2 |g|)`` (int32) and ``|g|`` (float64) of every non-zero finite value.
    """

    fmt: str
    count: int
    zeros: int
    nonfinite: int
    underflow: int
    subnormal: int
    overflow: int
    exponents: np.ndarray
    magnitudes: np.ndarray | None = field(default=None, repr=False, compare=False)

    def share(self, what: str) -> float:
        """Return the share (0 to 1) of all values in one of the five counts, named as above.

        Raises
        ------
        ValueError
            For another name.
        """
        names = ("zeros", "nonfinite", "underflow", "subnormal", "overflow")
        if what not in names:
            raise ValueError(f"unknown category {what!r}; choose one of {', '.join(names)}")
        return getattr(self, what) / self.count if self.count else 0.0

    def scaled(self, factor: float) -> GradientStats:
        """Return the statistics of the same values multiplied by ``factor`` (a loss scale).

        Raises
        ------
        TypeError, ValueError
            If ``factor`` is not a positive power of two (exponents must shift exactly).
        """
        name = "factor (a positive power of two)"
        shift = math.log2(check_scalar(factor, name, min_val=0, include_boundaries="neither"))
        if not shift.is_integer():
            raise ValueError(f"factor must be a positive power of two, got {factor!r}")
        exps = self.exponents + int(shift)
        mags = np.exp2(self.exponents) if self.magnitudes is None else self.magnitudes
        with np.errstate(over="ignore", under="ignore"):
            mags = np.ldexp(mags, int(shift))  # exact (float64's range aside)
        under, sub, over = _classify(mags, formats.get(self.fmt))
        return GradientStats(
            self.fmt, self.count, self.zeros, self.nonfinite, under, sub, over, exps, mags
        )


def _classify(magnitudes: np.ndarray, f: formats.Format) -> tuple[int, int, int]:
    """Count the magnitudes that round to 0, to a subnormal and beyond the largest value."""
    # The edges are midpoints, decided half to even as formats.round_to does: the largest
    # subnormal is odd; the largest value is odd in every format but fp8_e4m3 (448).
    half_tiny = f.smallest_subnormal / 2
    under = int(np.count_nonzero(magnitudes <= half_tiny))
    sub = int(
        np.count_nonzero((magnitudes > half_tiny) & (magnitudes < f.smallest_normal - half_tiny))
    )
    spacing = 2.0 ** (f.max_exponent - f.mantissa_bits)  # between the largest values
    top = f.max + spacing / 2
    odd = (f.max / spacing) % 2 == 1
    over = int(np.count_nonzero(magnitudes >= top if odd else magnitudes > top))
    return under, sub, over


def gradient_stats(values: np.ndarray | Iterable[np.ndarray], fmt: Any = "fp16") -> GradientStats:
    """Count zeros, infs/NaNs and the values a format would flush, keep coarsely or overflow.

    Parameters
    ----------
    values : numpy.ndarray or iterable of numpy.ndarray
        Gradient values (any float dtype, any shapes); several arrays are pooled.
    fmt : str or dtype, optional
        The format to compare with (see :func:`mptutor.formats.get`).

    Raises
    ------
    TypeError, ValueError
        If ``values`` is not an array or a list of arrays of real numbers, or ``fmt`` is not a
        known format or is ``e8m0`` (it holds scales: no sign, no zero).
    """
    f = check_format(fmt)
    if f.mantissa_bits == 0:
        raise ValueError(
            f"fmt must be a format that holds gradients, got {f.name}: it holds the scales of "
            "block formats (no sign, no zero, no significand)"
        )
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
    under, sub, over = _classify(mags, f)
    zeros, nonfinite = int(np.count_nonzero(flat == 0)), int(np.count_nonzero(~finite))
    return GradientStats(f.name, int(flat.size), zeros, nonfinite, under, sub, over, exps, mags)
