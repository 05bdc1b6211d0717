"""Arithmetic in a format: rounding, spacing, whether an update survives, the values of a range."""

from __future__ import annotations

import math
import numbers
from typing import Any

import ml_dtypes
import numpy as np

from mptutor._checks import check_scalar
from mptutor.formats._format import get


def _real(x: Any) -> np.ndarray:
    """``x`` as an array of float64 (or a wider float), refusing what is not real numbers."""
    arr = np.asarray(x)
    kind = arr.dtype.kind
    if kind in "iu" or (kind in "fV" and arr.dtype.itemsize <= 8 and _inexact(arr.dtype)):
        return arr.astype(np.float64)  # exact, integers up to 2**53 included
    if kind == "f":
        return arr  # long double: rounded in its own precision
    if kind == "O" and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in arr.flat
    ):  # e.g. Python ints beyond int64; those beyond float64 overflow any format
        flat = [v if abs(v) < 2**1024 else (math.inf if v > 0 else -math.inf) for v in arr.flat]
        return np.array(flat, dtype=np.float64).reshape(arr.shape)
    raise TypeError(
        f"round_to: x must hold real numbers (Python or NumPy floats and ints, or arrays of "
        f"them), got {x!r:.80} of dtype {arr.dtype}"
    )


def _inexact(dtype: np.dtype) -> bool:
    try:
        ml_dtypes.finfo(dtype)  # NumPy's floats and ml_dtypes' (bfloat16, float8, ...)
    except ValueError:
        return False
    return True


def round_to(x: Any, fmt: Any) -> np.ndarray | np.generic:
    """Round values to the nearest value of a format, correctly (round half to even).

    Each value is rounded once, from its exact value: a Python float or NumPy float64 is not
    read as float32 first, so ``round_to(1 + 2**-8 + 2**-30, "bf16")`` is ``1.0078125`` (the
    tie at ``1 + 2**-8`` lies below it). Subnormals of the format are kept, as IEEE 754
    rounds; values below half the smallest subnormal become zero of their sign.

    Parameters
    ----------
    x : array_like
        Values to round: Python or NumPy floats (float16 to float64, long double, bfloat16 and
        the other ml_dtypes formats) or integers (read as float64: exact up to ``2**53``).
    fmt : str or dtype
        Target format, see :func:`get`.

    Returns
    -------
    numpy.ndarray or numpy scalar
        ``x`` stored in the format's dtype, in its shape (a scalar for a scalar). A value that
        rounds beyond the largest finite one becomes ``inf`` of its sign where the format has
        infinities (fp32, fp16, bf16, fp8_e5m2); NaN in ``fp8_e4m3``, which has none (the
        non-saturating conversion of the OCP FP8 specification); and the largest value of its
        sign in formats with neither inf nor NaN (saturation). ``inf`` inputs go the same way.

    Raises
    ------
    TypeError
        If ``x`` holds something other than real numbers (strings, booleans, complex numbers,
        ``None``).
    ValueError
        If the format is unknown or ``e8m0`` (a scale format, see :mod:`mptutor.fp8`), or ``x``
        holds NaN and the format has no NaN.

    Examples
    --------
    >>> float(round_to(1 + 2**-8 + 2**-30, "bf16")), float(round_to(65520, "fp16"))
    (1.0078125, inf)
    """
    f = get(fmt)
    if f.mantissa_bits == 0:  # e8m0: no sign, no zero, no significand
        raise ValueError(
            f"round_to: {f.name} holds the scales of block formats, powers of two chosen by the "
            "floor or ceiling of log2 (mptutor.fp8), not by rounding to nearest"
        )
    values = _real(x)
    has_nan = _has_nan(f.dtype)
    if not has_nan and np.isnan(values).any():
        raise ValueError(f"round_to: x holds NaN, which {f.name} cannot represent (it has no NaN)")
    # Scale each value so that the format's spacing at it is 1, round to an integer (half to
    # even), scale back: every step is exact in float64, so the value is rounded once.
    _, exponent = np.frexp(values)  # values = m * 2**exponent, 0.5 <= |m| < 1
    shift = f.mantissa_bits - np.maximum(exponent - 1, f.min_exponent)
    rounded = np.ldexp(np.rint(np.ldexp(values, shift)), -shift)
    with np.errstate(invalid="ignore"):
        over = np.abs(rounded) > f.max  # inf inputs too
    if over.any():
        big = np.inf if f.has_inf else (np.nan if has_nan else f.max)
        rounded = np.where(over, np.copysign(big, rounded), rounded)
    with np.errstate(over="ignore", invalid="ignore"):
        out = rounded.astype(f.dtype)  # exact: every value is one of the format's
    return out[()] if out.ndim == 0 else out


def _has_nan(dtype: np.dtype) -> bool:
    with np.errstate(invalid="ignore"):
        return bool(np.isnan(np.array(np.nan).astype(dtype).astype(np.float64)))


def ulp(x: Any, fmt: Any) -> np.ndarray | np.float64:
    """Spacing of representable values at ``x``: the gap from ``|x|`` to the next value away from 0.

    ``x`` is first rounded to the format. Between ``2**e`` and ``2**(e+1)`` the spacing is
    ``2**(e - mantissa_bits)``; below the smallest normal value it is the smallest subnormal.

    Parameters
    ----------
    x : array_like
        Where to measure the spacing.
    fmt : str or dtype
        The format, see :func:`get`.

    Returns
    -------
    numpy.ndarray or numpy.float64
        The spacing as float64 (exact: it is a power of two). ``inf`` where ``x`` rounds to a
        non-finite value.

    Examples
    --------
    >>> float(ulp(1.0, "fp16")), float(ulp(32768, "fp16")), float(ulp(65504, "fp16"))
    (0.0009765625, 32.0, 32.0)
    """
    f = get(fmt)
    v = np.abs(np.asarray(round_to(x, f), dtype=np.float64))
    finite = np.isfinite(v)
    safe = np.where(finite & (v > 0), v, 1.0)
    exponent = np.maximum(np.floor(np.log2(safe)), f.min_exponent)
    exponent = np.where(v > 0, exponent, f.min_exponent)
    spacing = np.where(finite, np.exp2(exponent - f.mantissa_bits), np.inf)
    return spacing[()] if spacing.ndim == 0 else spacing


def update_survives(weight: Any, update: Any, fmt: Any) -> np.ndarray | np.bool_:
    """Whether ``weight + update`` computed in a format differs from ``weight``.

    Both operands are rounded to the format, added exactly and the sum rounded to the format,
    which is what a fused FP16 (or BF16, FP8) add does.

    Parameters
    ----------
    weight, update : array_like
        Weights and the updates added to them (broadcast against each other).
    fmt : str or dtype
        The format, see :func:`get`.

    Returns
    -------
    numpy.ndarray of bool or numpy.bool_
        ``True`` where the update changed the stored weight (a NaN weight never changes; an
        inf or NaN update changes a finite one).

    Raises
    ------
    ValueError
        If ``weight`` and ``update`` do not broadcast together, or the format is unknown.
    TypeError
        If they are not real numbers.

    Examples
    --------
    >>> bool(update_survives(1.0, 1e-4, "fp16")), bool(update_survives(1.0, 1e-4, "fp32"))
    (False, True)
    """
    f = get(fmt)
    w = np.asarray(round_to(weight, f), dtype=np.float64)
    dw = np.asarray(round_to(update, f), dtype=np.float64)
    try:
        np.broadcast_shapes(w.shape, dw.shape)
    except ValueError:
        raise ValueError(
            f"weight and update must broadcast together, got shapes {w.shape} and {dw.shape}"
        ) from None
    # A float64 sum of two values of at most 24 significant bits rounds at most once more,
    # and rounding that float64 to a format of p <= 24 bits gives the correctly rounded sum.
    total = np.asarray(round_to(w + dw, f), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        changed = (total != w) & ~(np.isnan(total) & np.isnan(w))  # a NaN weight stays NaN
    return changed[()] if changed.ndim == 0 else changed


def lost_update_ratio(fmt: Any) -> float:
    """Largest ``|update / weight|`` that can be lost: it is, when the weight is a power of two.

    Updates up to this ratio are lost for some weights and kept for others; only those up to
    :func:`always_lost_update_ratio` are lost for every weight. See
    :attr:`Format.lost_update_ratio`.

    Parameters
    ----------
    fmt : str or dtype
        The format, see :func:`get`.

    Returns
    -------
    float
        ``2**-(mantissa_bits + 1)``: ``2**-11`` for fp16, ``2**-8`` for bf16.

    Examples
    --------
    >>> w = 1.0  # a power of two: an update of 2**-11 of it is a tie that rounds back to w
    >>> bool(update_survives(w, w * lost_update_ratio("fp16"), "fp16"))
    False
    >>> w = 1.5  # halfway between powers of two: the same ratio moves it
    >>> bool(update_survives(w, w * lost_update_ratio("fp16"), "fp16"))
    True
    """
    return get(fmt).lost_update_ratio


def always_lost_update_ratio(fmt: Any) -> float:
    """Largest ``|update / weight|`` that is lost whatever the weight.

    Parameters
    ----------
    fmt : str or dtype
        The format, see :func:`get`.

    Returns
    -------
    float
        ``2**-(mantissa_bits + 2)``: ``2**-12`` for fp16, ``2**-9`` for bf16. An update that
        is a value of the format and at most this share of the weight never changes it.

    Examples
    --------
    >>> w = 2.0 - 2.0**-9  # just below a power of two, where the relative spacing is smallest
    >>> bool(update_survives(w, w * always_lost_update_ratio("fp16"), "fp16"))
    False
    """
    return get(fmt).always_lost_update_ratio


def representable_values(low: float, high: float, fmt: Any, limit: int = 100_000) -> np.ndarray:
    """All values of a format in the closed interval ``[low, high]``, in increasing order.

    Parameters
    ----------
    low, high : float
        Interval ends, ``low <= high``.
    fmt : str or dtype
        The format, see :func:`get`.
    limit : int, optional
        Refuse intervals that hold more values than this.

    Returns
    -------
    numpy.ndarray of float64
        The representable values (negative zero is not listed separately).

    Raises
    ------
    ValueError
        If an end is not finite, ``high < low``, ``limit < 1``, or the interval holds more than
        ``limit`` values.
    TypeError
        If ``low`` or ``high`` is not a real number, or ``limit`` not an int.
    """
    f = get(fmt)
    low = check_scalar(low, "low")
    high = check_scalar(high, "high (the upper end, at least low)", min_val=low)
    limit = check_scalar(limit, "limit", int, min_val=1)
    if f.bits > 16:  # fp32: walk from the first value >= low with nextafter
        top = np.float32(np.inf)
        with np.errstate(over="ignore"):
            v = np.float32(low)
        if float(v) < low:
            v = np.nextafter(v, top)
        values = []
        while float(v) <= high:
            values.append(float(v))
            if len(values) > limit:
                raise ValueError(f"more than {limit} fp32 values in [{low}, {high}]; narrow it")
            v = np.nextafter(v, top)
        return np.array(values, dtype=np.float64)
    # 16 bits or fewer: enumerate every bit pattern of the format once.
    uint = np.dtype(f"uint{8 * f.dtype.itemsize}")  # fp6 and fp4 take a byte each
    patterns = np.arange(2**f.bits, dtype=np.uint32).astype(uint)
    with np.errstate(invalid="ignore"):  # the NaN bit patterns
        every = patterns.view(f.dtype).astype(np.float64)
    every = every[np.isfinite(every)]
    chosen = np.unique(every[(every >= low) & (every <= high)])
    if chosen.size > limit:
        raise ValueError(f"{chosen.size} {f.name} values in [{low}, {high}] exceed limit={limit}")
    return chosen + 0.0  # turns -0.0 into 0.0
