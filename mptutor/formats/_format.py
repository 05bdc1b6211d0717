"""The formats themselves: their properties, read from ml_dtypes, and a table of them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from mptutor.formats._names import BLOCK_FORMATS, FORMATS, SPELLINGS, dtype_name
from mptutor.table import Table


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
        sign = self.bits - self.exponent_bits - self.mantissa_bits  # 0 for e8m0
        return (
            f"Format({self.name!r}: {self.bits} bits = {sign} sign + {self.exponent_bits} exponent"
            f" + {self.mantissa_bits} mantissa, max={self.max:.6g},"
            f" smallest normal={self.smallest_normal:.6g},"
            f" smallest subnormal={self.smallest_subnormal:.6g}, eps={self.eps:.6g})"
        )


#: The short names of the formats that hold whole tensors, widest first.
FORMAT_NAMES: tuple[str, ...] = tuple(short for short, _, _ in FORMATS)
#: The short names of the formats found only inside block-scaled tensors (element formats FP6 and
#: FP4, the scale format E8M0); empty with ml_dtypes older than 0.5.
BLOCK_FORMAT_NAMES: tuple[str, ...] = tuple(short for short, _, _ in BLOCK_FORMATS)


def _make(name: str, kind: type) -> Format:
    dtype = np.dtype(kind)
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


#: The formats by NumPy's name of their dtype.
_BY_DTYPE: dict[str, Format] = {
    np.dtype(kind).name: _make(short, kind) for short, kind, _ in FORMATS + BLOCK_FORMATS
}
_OTHER_SPELLINGS = ", ".join(sorted(set(SPELLINGS) - set(FORMAT_NAMES) - set(BLOCK_FORMAT_NAMES)))
_BLOCK_KNOWN = f"; block formats {', '.join(BLOCK_FORMAT_NAMES)}" if BLOCK_FORMAT_NAMES else ""


def get(fmt: Any) -> Format:
    """Look up a format by name or dtype: every spelling that :func:`dtype_name` understands.

    Parameters
    ----------
    fmt : str, numpy.dtype, type, Format, framework dtype, array or tensor
        ``"fp16"``, ``"float16"``, ``"half"``, ``np.float16``, ``torch.float16``, ``tf.float16``,
        ``"bf16"``, ``"fp8_e4m3"``, ``"e5m2"``, ... (:data:`SPELLINGS`), a :class:`Format`, or
        an array or tensor, whose dtype is taken.

    Returns
    -------
    Format
        The format's properties.

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
            f"unknown floating-point format {fmt!r}; known formats are "
            f"{', '.join(FORMAT_NAMES)}{_BLOCK_KNOWN} (other spellings: {_OTHER_SPELLINGS})"
        )
    return found


def all_formats(block: bool = False) -> list[Format]:
    """Return the formats that hold whole tensors, widest first (and the block formats).

    Parameters
    ----------
    block : bool, optional
        Also return the block formats (:data:`BLOCK_FORMAT_NAMES`) after them.

    Returns
    -------
    list of Format
        fp32, fp16, bf16, fp8_e4m3, fp8_e5m2; then fp6_e2m3, fp6_e3m2, fp4_e2m1, e8m0 if asked.
    """
    names = FORMAT_NAMES + (BLOCK_FORMAT_NAMES if block else ())
    return [get(name) for name in names]


def table(fmts: Any = None) -> Table:
    """Tabulate the formats' properties in a table that prints well in a notebook.

    Parameters
    ----------
    fmts : sequence of str or dtype, optional
        Which formats, in order; the formats of :func:`all_formats` by default.

    Returns
    -------
    Table
        One row per format: bits, exponent and mantissa bits, largest value, smallest normal
        and subnormal, machine epsilon, powers of two covered, and the two update ratios of
        :attr:`Format.lost_update_ratio`: at or below the first an update ``dw`` added to a
        weight ``w`` is always lost, at or below the second it can be (depending on ``w``).
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
