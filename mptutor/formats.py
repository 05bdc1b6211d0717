"""Floating-point formats used in mixed-precision training, through NumPy and ml_dtypes.

Every fact here is read from the format's own definition (``ml_dtypes.finfo``) or computed by
rounding in that format, so the notebooks can show numbers instead of quoting them.

Formats can be named by a short name (``"fp16"``), a long name (``"float16"``), an alias
(``"half"``), a NumPy or ml_dtypes dtype, or a framework dtype such as ``torch.float16`` or
``tf.bfloat16`` (matched by name, so no framework is imported here).

Examples
--------
>>> from mptutor import formats
>>> formats.get("fp16").max
65504.0
>>> float(formats.ulp(32768, "fp16"))
32.0
>>> bool(formats.update_survives(1.0, 1e-4, "fp16"))
False
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from mptutor.table import Table

__all__ = [
    "Format",
    "FORMAT_NAMES",
    "get",
    "all_formats",
    "ulp",
    "round_to",
    "update_survives",
    "lost_update_ratio",
    "always_lost_update_ratio",
    "representable_values",
    "table",
    "dtype_name",
]


@dataclass(frozen=True)
class Format:
    """The properties of one floating-point format.

    Attributes
    ----------
    name : str
        Short name, e.g. ``"fp16"``.
    dtype : numpy.dtype
        The NumPy (or ml_dtypes) dtype that stores values of this format.
    bits : int
        Total storage bits.
    exponent_bits : int
        Bits of the exponent field.
    mantissa_bits : int
        Explicitly stored fraction bits (the significand has one more, implicit, bit).
    max : float
        Largest finite value.
    smallest_normal : float
        Smallest positive normal value, ``2**min_exponent``.
    smallest_subnormal : float
        Smallest positive subnormal value, ``2**(min_exponent - mantissa_bits)``.
    eps : float
        Machine epsilon: the distance from 1.0 to the next larger value.
    min_exponent : int
        Exponent of the smallest normal value.
    max_exponent : int
        Exponent of the largest binade, ``floor(log2(max))``.
    has_inf : bool
        Whether the format can hold infinities (``fp8_e4m3`` cannot: it overflows to NaN).
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
        """Number of binades (powers of two) from the smallest subnormal to the largest value.

        Returns
        -------
        int
            For fp16 this is 40: from ``2**-24`` up to ``2**15``.
        """
        return self.max_exponent - (self.min_exponent - self.mantissa_bits) + 1

    @property
    def lost_update_ratio(self) -> float:
        """Largest ``|update / weight|`` that *can* be rounded away: ``2**-(mantissa_bits + 1)``.

        Adding ``dw`` to a weight ``w`` leaves ``w`` unchanged when ``dw`` is at most half the
        spacing between ``w`` and its neighbour on that side. Relative to ``w`` that half spacing
        depends on where ``w`` sits between two powers of two, ``2**e <= |w| < 2**(e+1)``: it is
        ``2**-(mantissa_bits + 1)`` at ``|w| = 2**e`` and shrinks towards
        ``2**-(mantissa_bits + 2)`` just below ``2**(e+1)``. So, for a normal weight and an update
        that is itself a value of the format (fp16: ``2**-11`` and ``2**-12``):

        - ``|dw / w| <= 2**-(mantissa_bits + 2)`` (:attr:`always_lost_update_ratio`): the update
          is always lost;
        - ``2**-(mantissa_bits + 2) < |dw / w| <= 2**-(mantissa_bits + 1)``: it can be lost, and
          is for weights just above a power of two, kept for weights just below the next one;
        - ``|dw / w| > 2**-(mantissa_bits + 1)``: it always changes the weight.

        Returns
        -------
        float
            ``eps / 2``.
        """
        return self.eps / 2

    @property
    def always_lost_update_ratio(self) -> float:
        """Largest ``|update / weight|`` that is always rounded away: ``2**-(mantissa_bits + 2)``.

        See :attr:`lost_update_ratio` for the rule; for fp16 this is ``2**-12``. It also holds for
        subnormal weights.

        Returns
        -------
        float
            ``eps / 4``.
        """
        return self.eps / 4

    def __repr__(self) -> str:
        return (
            f"Format({self.name!r}: {self.bits} bits = 1 sign + {self.exponent_bits} exponent"
            f" + {self.mantissa_bits} mantissa, max={self.max:.6g},"
            f" smallest normal={self.smallest_normal:.6g},"
            f" smallest subnormal={self.smallest_subnormal:.6g}, eps={self.eps:.6g})"
        )


_DTYPES: dict[str, Any] = {
    "fp32": np.float32,
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}

_ALIASES: dict[str, str] = {
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "single": "fp32",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8_e4m3",
    "e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
}

#: The short names of the known formats, widest first.
FORMAT_NAMES: tuple[str, ...] = tuple(_DTYPES)
_EXTRA_ALIASES: tuple[str, ...] = tuple(sorted(set(_ALIASES) - set(FORMAT_NAMES)))


def _make(name: str) -> Format:
    dtype = np.dtype(_DTYPES[name])
    info = ml_dtypes.finfo(dtype)
    big = float(info.max)
    return Format(
        name=name,
        dtype=dtype,
        bits=int(info.bits),
        exponent_bits=int(info.nexp),
        mantissa_bits=int(info.nmant),
        max=big,
        smallest_normal=float(info.smallest_normal),
        smallest_subnormal=float(info.smallest_subnormal),
        eps=float(info.eps),
        min_exponent=int(info.minexp),
        max_exponent=int(math.floor(math.log2(big))),
        has_inf=bool(np.isinf(np.array(np.inf).astype(dtype))),
    )


_FORMATS: dict[str, Format] = {name: _make(name) for name in FORMAT_NAMES}


def _key(fmt: Any) -> str:
    """Turn a name, dtype or framework dtype into a lookup key."""
    if isinstance(fmt, str):
        return fmt.strip().lower().replace("-", "_")
    if isinstance(fmt, np.dtype):
        return fmt.name
    if isinstance(fmt, type) and issubclass(fmt, np.generic):
        return np.dtype(fmt).name
    name = getattr(fmt, "name", None)  # tf.DType has .name == "float16"
    if isinstance(name, str):
        return name.lower()
    text = str(fmt)  # torch.float16 prints as "torch.float16"
    return text.rsplit(".", 1)[-1].lower()


def get(fmt: Any) -> Format:
    """Look up a format by name or dtype.

    Parameters
    ----------
    fmt : str, numpy.dtype, type, Format or framework dtype
        ``"fp16"``, ``"float16"``, ``"half"``, ``np.float16``, ``torch.float16``, ``tf.float16``,
        ``"bf16"``, ``"fp8_e4m3"``, ``"e5m2"``, ... or a :class:`Format`.

    Returns
    -------
    Format
        The format's properties.

    Raises
    ------
    ValueError
        If the format is not one of the known formats; the message lists them.
    """
    if isinstance(fmt, Format):
        return fmt
    try:
        key = _key(fmt)
    except TypeError:  # e.g. np.dtype() of something odd
        key = repr(fmt)
    short = _ALIASES.get(key)
    if short is None:
        raise ValueError(
            f"unknown floating-point format {fmt!r}; known formats are "
            f"{', '.join(FORMAT_NAMES)} (aliases: {', '.join(_EXTRA_ALIASES)})"
        )
    return _FORMATS[short]


def all_formats() -> list[Format]:
    """Return every known format, widest first.

    Returns
    -------
    list of Format
        fp32, fp16, bf16, fp8_e4m3, fp8_e5m2.
    """
    return [_FORMATS[name] for name in FORMAT_NAMES]


def round_to(x: Any, fmt: Any) -> np.ndarray | np.generic:
    """Round values to the nearest value of a format (round half to even).

    Parameters
    ----------
    x : array_like
        Values to round.
    fmt : str or dtype
        Target format, see :func:`get`.

    Returns
    -------
    numpy.ndarray or numpy scalar
        ``x`` stored in the format's dtype. Values beyond the largest finite value become
        ``inf`` (or NaN in ``fp8_e4m3``, which has no infinity), as the hardware does.
    """
    f = get(fmt)
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
        arr = arr.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(f.dtype)
    return out[()] if out.ndim == 0 else out


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
        ``True`` where the update changed the stored weight.

    Examples
    --------
    >>> bool(update_survives(1.0, 1e-4, "fp16")), bool(update_survives(1.0, 1e-4, "fp32"))
    (False, True)
    """
    f = get(fmt)
    w = np.asarray(round_to(weight, f), dtype=np.float64)
    dw = np.asarray(round_to(update, f), dtype=np.float64)
    # A float64 sum of two values of at most 24 significant bits rounds at most once more,
    # and rounding that float64 to a format of p <= 24 bits gives the correctly rounded sum.
    total = np.asarray(round_to(w + dw, f), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        changed = total != w
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
        If ``low > high``, an end is not finite, or the interval holds more than ``limit`` values.
    """
    f = get(fmt)
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"interval ends must be finite, got [{low}, {high}]")
    if low > high:
        raise ValueError(f"low must not exceed high, got [{low}, {high}]")
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
    uint = np.dtype(f"uint{f.bits}")
    patterns = np.arange(2**f.bits, dtype=np.uint32).astype(uint)
    with np.errstate(invalid="ignore"):  # the NaN bit patterns
        every = patterns.view(f.dtype).astype(np.float64)
    every = every[np.isfinite(every)]
    chosen = np.unique(every[(every >= low) & (every <= high)])
    if chosen.size > limit:
        raise ValueError(f"{chosen.size} {f.name} values in [{low}, {high}] exceed limit={limit}")
    return chosen + 0.0  # turns -0.0 into 0.0


def table(fmts: Any = None) -> Table:
    """Tabulate the formats' properties in a table that prints well in a notebook.

    Parameters
    ----------
    fmts : sequence of str or dtype, optional
        Which formats, in order; all known formats by default.

    Returns
    -------
    Table
        One row per format: bits, exponent and mantissa bits, largest value, smallest normal
        and subnormal, machine epsilon, powers of two covered, and the two update ratios of
        :attr:`Format.lost_update_ratio`: at or below the first an update ``dw`` added to a
        weight ``w`` is always lost, at or below the second it can be (depending on ``w``).
    """
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


def dtype_name(x: Any) -> str:
    """One spelling for the dtype of a tensor or a dtype of any library: ``"float16"``, ...

    Parameters
    ----------
    x : object
        A tensor or array (PyTorch, TensorFlow, NumPy, MXNet), or a dtype of one of them, or a
        Keras dtype string. Nothing is imported: dtypes are recognised by their attributes.

    Returns
    -------
    str
        The dtype's name as NumPy spells it, e.g. ``"float16"``, ``"bfloat16"``, ``"int64"``.

    Raises
    ------
    TypeError
        If ``x`` neither is nor has a dtype.

    Examples
    --------
    >>> dtype_name(np.ones(2, np.float16)), dtype_name("bfloat16"), dtype_name(np.float32)
    ('float16', 'bfloat16', 'float32')
    """
    if isinstance(x, str):
        return x
    kind = type(x)
    if kind.__module__ == "torch" and kind.__name__ == "dtype":
        return str(x).removeprefix("torch.")
    if hasattr(x, "as_numpy_dtype") and isinstance(getattr(x, "name", None), str):
        return x.name  # tf.DType
    if isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic)):
        dtype = np.dtype(x)
        return dtype.names[0] if dtype.names else dtype.name  # MXNet's bfloat16 is a record
    if hasattr(x, "dtype") and not isinstance(x, type):
        return dtype_name(x.dtype)
    try:
        dtype = np.dtype(x)
    except TypeError:
        raise TypeError(f"{x!r} is not a dtype and has no dtype") from None
    return dtype.names[0] if dtype.names else dtype.name
