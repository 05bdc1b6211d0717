"""Floating-point formats used in mixed-precision training, through NumPy and ml_dtypes.

Every fact is read from ``ml_dtypes.finfo`` or computed by rounding. A format is named by a
short name (``"fp16"``), NumPy's name, another spelling (``"half"``, :data:`SPELLINGS`), a dtype
of any library (matched by name, nothing imported), or an array or tensor. :data:`PRECISIONS`
names the ways of computing that the lessons compare.

>>> get("fp16").max, float(ulp(32768, "fp16")), bool(update_survives(1.0, 1e-4, "fp16"))
(65504.0, 32.0, False)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from mptutor._checks import check_scalar
from mptutor.table import Table

__all__ = [
    "Format", "FORMAT_NAMES", "SPELLINGS", "PRECISIONS", "precision", "get", "all_formats",
    "ulp", "round_to", "update_survives", "lost_update_ratio", "always_lost_update_ratio",
    "representable_values", "table", "dtype_name",
]  # fmt: skip

# The formats, widest first: short name, the NumPy (or ml_dtypes) type that stores it, and its
# other spellings. "float" and "single" mean float32, as in the frameworks (torch.float).
_FORMATS: tuple[tuple[str, Any, tuple[str, ...]], ...] = (
    ("fp32", np.float32, ("float", "single")),
    ("fp16", np.float16, ("half",)),
    ("bf16", ml_dtypes.bfloat16, ()),
    ("fp8_e4m3", ml_dtypes.float8_e4m3fn, ("e4m3",)),
    ("fp8_e5m2", ml_dtypes.float8_e5m2, ("e5m2",)),
)
# The formats found only inside block-scaled tensors (mptutor.fp8): the element formats FP6 and
# FP4, and E8M0, the power-of-two scale of an MX block (no sign, zero or subnormals); with
# ml_dtypes >= 0.5.
_BLOCK_FORMATS = tuple(
    (short, getattr(ml_dtypes, kind), others)
    for short, kind, others in (
        ("fp6_e2m3", "float6_e2m3fn", ("e2m3",)),
        ("fp6_e3m2", "float6_e3m2fn", ("e3m2",)),
        ("fp4_e2m1", "float4_e2m1fn", ("e2m1",)),
        ("e8m0", "float8_e8m0fnu", ("fp8_e8m0", "ue8m0")),
    )
    if hasattr(ml_dtypes, kind)
)

#: Every spelling of a known format (lower case, ``_`` for ``-``) to NumPy's name of its dtype:
#: ``"half"``, ``"fp16"`` and ``"float16"`` all to ``"float16"``.
SPELLINGS: dict[str, str] = {
    spelling: np.dtype(kind).name
    for short, kind, others in _FORMATS + _BLOCK_FORMATS
    for spelling in (short, np.dtype(kind).name, *others)
}
#: The short names of the formats that hold whole tensors, widest first.
FORMAT_NAMES: tuple[str, ...] = tuple(short for short, _, _ in _FORMATS)
_BLOCK_NAMES = tuple(short for short, _, _ in _BLOCK_FORMATS)

#: The ways of computing that the lessons and benchmarks compare, one spelling each: storage
#: formats by their short names, ``"fp32"`` strict (TF32 off), ``"tf32"`` FP32 storage with TF32
#: matrix products, ``"amp_*"`` automatic mixed precision.
PRECISIONS: dict[str, str] = {
    "fp32": "FP32 storage and arithmetic, TF32 off",
    "tf32": "FP32 storage, matrix products with TF32 inputs and FP32 sums",
    "fp16": "FP16 storage and products, FP32 sums",
    "bf16": "BF16 storage and products, FP32 sums",
    "fp8_e4m3": "FP8 E4M3 inputs with a scale each, FP32 sums (Hopper sums more narrowly)",
    "amp_fp16": "FP32 weights, FP16 products (autocast, mixed_float16), loss scaling",
    "amp_bf16": "FP32 weights, BF16 products (autocast, mixed_bfloat16)",
}


def precision(name: str) -> str:
    """Return the key of :data:`PRECISIONS` that ``name`` spells (``"FP8-e4m3"``: ``"fp8_e4m3"``).

    Parameters
    ----------
    name : str
        A key of :data:`PRECISIONS`, in any case, with ``-`` or ``_``.

    Raises
    ------
    TypeError, ValueError
        If ``name`` is not a string, or names no precision of :data:`PRECISIONS`.
    """
    if not isinstance(name, str):
        raise TypeError(f"a precision is named by a string, not {type(name).__name__}")
    key = name.strip().lower().replace("-", "_")
    if key not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; known: {', '.join(PRECISIONS)}")
    return key


def dtype_name(x: Any) -> str:
    """One spelling for the dtype of a tensor or a dtype of any library: ``"float16"``, ...

    Parameters
    ----------
    x : object
        A tensor or array (PyTorch, TensorFlow, NumPy, MXNet, Keras), a dtype of one of them, or
        a dtype's name; recognised by names and attributes, nothing is imported.

    Returns
    -------
    str
        NumPy's name of the dtype (``"float16"``, ``"bfloat16"``); other text is returned as
        given (``"mixed_float16"`` stays).

    Raises
    ------
    TypeError
        If ``x`` neither is nor has a dtype.

    Examples
    --------
    >>> dtype_name(np.ones(2, np.float16)), dtype_name("bf16"), dtype_name(np.float32)
    ('float16', 'bfloat16', 'float32')
    """
    if isinstance(x, str):
        return SPELLINGS.get(x.strip().lower().replace("-", "_"), x)
    kind = type(x)
    if kind.__module__ == "torch" and kind.__name__ == "dtype":
        return str(x).removeprefix("torch.")
    if hasattr(x, "as_numpy_dtype") and isinstance(getattr(x, "name", None), str):
        return x.name  # tf.DType
    if hasattr(x, "dtype") and not isinstance(x, type):
        return dtype_name(x.dtype)
    if x is None:
        raise TypeError("None is not a dtype and has no dtype")
    try:
        dtype = np.dtype(x)
    except TypeError:
        raise TypeError(f"{x!r} is not a dtype and has no dtype") from None
    return dtype.names[0] if dtype.names else dtype.name  # MXNet's bfloat16 is a record


@dataclass(frozen=True)
class Format:
    """The properties of one floating-point format.

    Attributes
    ----------
    name : str
        Short name, e.g. ``"fp16"``.
    dtype : numpy.dtype
        The NumPy (or ml_dtypes) dtype that stores values of this format.
    bits, exponent_bits, mantissa_bits : int
        Storage bits, exponent bits and stored fraction bits (the significand has one more).
    max, smallest_normal, smallest_subnormal, eps : float
        The largest finite value, ``2**min_exponent``, ``2**(min_exponent - mantissa_bits)``,
        and the distance from 1.0 to the next larger value.
    min_exponent, max_exponent : int
        Exponents of the smallest normal value and of the largest binade.
    has_inf : bool
        Whether the format holds infinities (``fp8_e4m3`` does not: it overflows to NaN).
    """

    name: str
    dtype: np.dtype
    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float
    min_exponent: int
    max_exponent: int
    has_inf: bool

    @property
    def powers_of_two(self) -> int:
        """Binades from the smallest subnormal to the largest value (40 for fp16)."""
        return self.max_exponent - (self.min_exponent - self.mantissa_bits) + 1

    @property
    def lost_update_ratio(self) -> float:
        """Largest ``|update / weight|`` that *can* be rounded away: ``2**-(mantissa_bits + 1)``.

        Half the spacing at ``w``, relative to ``w``: this at a power of two, shrinking towards
        :attr:`always_lost_update_ratio` just below the next; in between, lost or kept by ``w``.
        The update is taken after its own rounding to the format, as it is added; before it, an
        update below :attr:`smallest_normal` can round by a large share of itself.
        """
        return self.eps / 2

    @property
    def always_lost_update_ratio(self) -> float:
        """Largest ``|update / weight|`` always rounded away: ``2**-(mantissa_bits + 2)``.

        The update is taken after its own rounding to the format, as it is added.
        """
        return self.eps / 4

    def __repr__(self) -> str:
        sign = self.bits - self.exponent_bits - self.mantissa_bits  # 0 for e8m0
        return (
            f"Format({self.name!r}: {self.bits} bits = {sign} sign + {self.exponent_bits} exponent"
            f" + {self.mantissa_bits} mantissa, max={self.max:.6g},"
            f" smallest normal={self.smallest_normal:.6g},"
            f" smallest subnormal={self.smallest_subnormal:.6g}, eps={self.eps:.6g})"
        )


def _make(name: str, kind: Any) -> Format:
    """Read a format's properties from ``ml_dtypes.finfo``."""
    dtype = np.dtype(kind)
    info = ml_dtypes.finfo(dtype)
    return Format(
        name=name,
        dtype=dtype,
        bits=int(info.bits),
        exponent_bits=int(info.nexp),
        mantissa_bits=int(info.nmant),
        max=float(info.max),
        smallest_normal=float(info.smallest_normal),
        smallest_subnormal=float(info.smallest_subnormal),
        eps=float(info.eps),
        min_exponent=int(info.minexp),
        max_exponent=math.floor(math.log2(float(info.max))),
        has_inf=bool(np.isinf(np.array(np.inf).astype(dtype))),
    )


_BY_DTYPE = {
    np.dtype(kind).name: _make(short, kind) for short, kind, _ in _FORMATS + _BLOCK_FORMATS
}
_BLOCK = f"; block formats {', '.join(_BLOCK_NAMES)}" if _BLOCK_NAMES else ""
_OTHERS = ", ".join(sorted(set(SPELLINGS) - set(FORMAT_NAMES + _BLOCK_NAMES)))


def get(fmt: Any) -> Format:
    """Look up a format by any spelling :func:`dtype_name` understands, or by a Format.

    Parameters
    ----------
    fmt : str, dtype, Format, array or tensor
        ``"fp16"``, ``"float16"``, ``"half"``, ``np.float16``, ``torch.float16``, ``"e5m2"``,
        ... (:data:`SPELLINGS`), or an array or tensor, whose dtype is taken.

    Raises
    ------
    ValueError
        If the format is not one of the known formats; the message lists them.

    Examples
    --------
    >>> get("half") is get(np.float16) is get(np.ones(2, np.float16))
    True
    """
    if isinstance(fmt, Format):
        return fmt
    try:
        found = _BY_DTYPE.get(dtype_name(fmt))
    except (TypeError, ValueError):  # neither is nor has a dtype
        found = None
    if found is None:
        raise ValueError(
            f"unknown floating-point format {fmt!r}; known formats are {', '.join(FORMAT_NAMES)}"
            f"{_BLOCK} (other spellings: {_OTHERS})"
        )
    return found


def all_formats(block: bool = False) -> list[Format]:
    """Return the formats that hold whole tensors, widest first (then the block formats).

    Parameters
    ----------
    block : bool, optional
        Also return fp6_e2m3, fp6_e3m2, fp4_e2m1 and e8m0 (with ml_dtypes >= 0.5).
    """
    return [get(name) for name in FORMAT_NAMES + (_BLOCK_NAMES if block else ())]


def table(fmts: Any = None) -> Table:
    """Tabulate the formats' properties: bits, range, epsilon, powers of two, lost updates.

    Parameters
    ----------
    fmts : str, dtype or sequence of them, optional
        Which formats, in order; those of :func:`all_formats` by default.
    """
    if isinstance(fmts, (str, Format)) or not (fmts is None or isinstance(fmts, Iterable)):
        fmts = [fmts]  # one format alone
    chosen = all_formats() if fmts is None else [get(f) for f in fmts]
    rows = [
        {
            "format": f.name,
            "bits": f.bits,
            "exp": f.exponent_bits,
            "mant": f.mantissa_bits,
            "max": f.max,
            "min normal": f.smallest_normal,
            "min subnormal": f.smallest_subnormal,
            "eps": f.eps,
            "powers of 2": f.powers_of_two,
            "always lost if |dw/w| <=": f"2**{int(math.log2(f.always_lost_update_ratio))}",
            "can be lost if |dw/w| <=": f"2**{int(math.log2(f.lost_update_ratio))}",
        }
        for f in chosen
    ]
    return Table(rows, float_format=".4g")


def _real(x: Any) -> np.ndarray:
    """Return ``x`` as float64 (or a wider float), refusing what is not real numbers."""
    arr = np.asarray(x)
    kind = arr.dtype.kind
    if kind in "iu" or (kind in "fV" and arr.dtype.itemsize <= 8 and _is_float(arr.dtype)):
        return arr.astype(np.float64)  # exact, integers up to 2**53 included
    if kind == "f":
        return arr  # long double: rounded in its own precision
    if kind == "O" and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in arr.flat
    ):
        # Python ints beyond int64; those beyond float64 overflow any format
        flat = [v if abs(v) < 2**1024 else math.copysign(math.inf, v) for v in arr.flat]
        return np.array(flat, dtype=np.float64).reshape(arr.shape)
    raise TypeError(
        f"round_to: x must hold real numbers (Python or NumPy floats and ints, or arrays of "
        f"them), got {x!r:.80} of dtype {arr.dtype}"
    )


def _is_float(dtype: np.dtype) -> bool:
    """Whether a dtype is a float of NumPy or ml_dtypes (bfloat16, float8, ...)."""
    try:
        ml_dtypes.finfo(dtype)
    except ValueError:
        return False
    return True


def _has_nan(dtype: np.dtype) -> bool:
    """Whether a format can hold NaN."""
    with np.errstate(invalid="ignore"):
        return bool(np.isnan(np.array(np.nan).astype(dtype).astype(np.float64)))


def round_to(x: Any, fmt: Any) -> np.ndarray | np.generic:
    """Round values to the nearest value of a format, once, from their exact values (half to even).

    Subnormals included; below half the smallest subnormal, zero of the value's sign.

    Parameters
    ----------
    x : array_like
        Python or NumPy floats (ml_dtypes formats too) or integers (exact up to ``2**53``).
    fmt : str or dtype
        Target format, see :func:`get`.

    Returns
    -------
    numpy.ndarray or numpy scalar
        ``x`` in the format's dtype and shape. Beyond the largest value: ``inf``, NaN in
        ``fp8_e4m3`` (OCP's non-saturating conversion), the largest value in FP6 and FP4.

    Raises
    ------
    TypeError, ValueError
        If ``x`` holds other than real numbers (strings, bools, complex, ``None``), the format
        is unknown or ``e8m0``, or ``x`` holds NaN and the format has none.

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
    # Scale each value so that the spacing at it is 1, round to an integer (half to even),
    # scale back: every step is exact in float64, so the value is rounded once.
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


def ulp(x: Any, fmt: Any) -> np.ndarray | np.float64:
    """Spacing of a format's values at ``x``: from ``|x|`` to the next value away from 0.

    Parameters
    ----------
    x : array_like
        Where to measure, rounded to the format first.
    fmt : str or dtype
        The format, see :func:`get`.

    Returns
    -------
    numpy.ndarray or numpy.float64
        ``2**(e - mantissa_bits)`` for ``2**e <= |x| < 2**(e+1)``, the smallest subnormal
        below the smallest normal, ``inf`` where ``x`` rounds to a non-finite value.

    Examples
    --------
    >>> float(ulp(1.0, "fp16")), float(ulp(32768, "fp16")), float(ulp(65504, "fp16"))
    (0.0009765625, 32.0, 32.0)
    """
    f = get(fmt)
    v = np.abs(np.asarray(round_to(x, f), dtype=np.float64))
    finite = np.isfinite(v)
    safe = np.where(finite & (v > 0), v, 1.0)
    exponent = np.where(v > 0, np.maximum(np.floor(np.log2(safe)), f.min_exponent), f.min_exponent)
    spacing = np.where(finite, np.exp2(exponent - f.mantissa_bits), np.inf)
    return spacing[()] if spacing.ndim == 0 else spacing


def update_survives(weight: Any, update: Any, fmt: Any) -> np.ndarray | np.bool_:
    """Whether ``weight + update`` in a format (both rounded to it, the sum too) changes ``weight``.

    Parameters
    ----------
    weight, update : array_like
        Weights and the updates added to them (broadcast together).
    fmt : str or dtype
        The format, see :func:`get`.

    Returns
    -------
    numpy.ndarray of bool or numpy.bool_
        ``True`` where the update changed the stored weight (a NaN weight never changes).

    Raises
    ------
    TypeError, ValueError
        If they are not real numbers or do not broadcast together, or the format is unknown.

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
    # The float64 sum of two values of at most 24 significant bits, rounded to a format of
    # p <= 24 bits, is the correctly rounded sum.
    total = np.asarray(round_to(w + dw, f), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        changed = (total != w) & ~(np.isnan(total) & np.isnan(w))
    return changed[()] if changed.ndim == 0 else changed


def lost_update_ratio(fmt: Any) -> float:
    """Largest ``|update / weight|`` that can be lost: ``2**-(mantissa_bits + 1)`` (fp16: 2**-11).

    The update is taken after its own rounding to the format, as it is added.

    Parameters
    ----------
    fmt : str or dtype
        The format, see :func:`get` (:attr:`Format.lost_update_ratio`).
    """
    return get(fmt).lost_update_ratio


def always_lost_update_ratio(fmt: Any) -> float:
    """Largest ``|update / weight|`` lost whatever the weight: ``2**-(mantissa_bits + 2)``.

    The update is taken after its own rounding to the format, as it is added.

    Parameters
    ----------
    fmt : str or dtype
        The format, see :func:`get`.
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
        The values (negative zero is not listed separately).

    Raises
    ------
    TypeError, ValueError
        If an end is not a finite number, ``high < low``, or ``limit`` is not an int >= 1 or is
        exceeded.
    """
    f = get(fmt)
    low = check_scalar(low, "low")
    high = check_scalar(high, "high (the upper end, at least low)", min_val=low)
    limit = check_scalar(limit, "limit", int, min_val=1)
    if f.bits > 16:  # fp32: walk up from the first value >= low
        top = np.float32(np.inf)
        with np.errstate(over="ignore"):
            v = np.float32(low)
        v = np.nextafter(v, top) if float(v) < low else v
        values = []
        while float(v) <= high:
            values.append(float(v))
            if len(values) > limit:
                raise ValueError(f"more than {limit} fp32 values in [{low}, {high}]; narrow it")
            v = np.nextafter(v, top)
        return np.array(values, dtype=np.float64)
    # 16 bits or fewer: every bit pattern of the format once (fp6 and fp4 take a byte each).
    patterns = np.arange(2**f.bits, dtype=np.uint32).astype(f"uint{8 * f.dtype.itemsize}")
    with np.errstate(invalid="ignore"):  # the NaN patterns
        every = patterns.view(f.dtype).astype(np.float64)
    chosen = np.unique(every[np.isfinite(every) & (every >= low) & (every <= high)])
    if chosen.size > limit:
        raise ValueError(f"{chosen.size} {f.name} values in [{low}, {high}] exceed limit={limit}")
    return chosen + 0.0  # turns -0.0 into 0.0
