"""FP8 and block scaling, framework-free (NumPy and ml_dtypes).

A per-tensor scale maps a tensor's largest magnitude (*amax*) onto the format's largest value,
as in Transformer Engine: ``q = fmt(x * scale)``, ``x ~ q / scale``. Block scales (MX: 32
values, NVFP4: 16) go the other way, as those formats define them: ``x ~ element * scale``.
FP6, FP4 and E8M0 need ml_dtypes 0.5 or newer.

>>> s = scale_from_amax(3.5, "fp8_e4m3")  # 448 / 3.5 = 128: 0.01 rounds, 7 saturates
>>> s, [float(v) for v in dequantize(quantize([3.5, 0.01, 7.0], "fp8_e4m3", s), s)]
(128.0, [3.5, 0.009765625, 3.5])
"""

from __future__ import annotations

from collections import deque
from typing import Any

import ml_dtypes
import numpy as np

from mptutor import formats
from mptutor._checks import check_format, check_scalar

__all__ = [
    "scale_from_amax", "quantize", "dequantize", "DelayedScaling",
    "mx_quantize", "mx_dequantize", "nvfp4_quantize", "nvfp4_dequantize",
]  # fmt: skip

# The element formats of block scaling (MXFP8, MXFP6, MXFP4; NVFP4 uses fp4_e2m1).
_ELEMENT_FORMATS = ("fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1")
_E8M0_EXPONENTS = (-127, 127)  # the finite scales of E8M0: 2**-127 .. 2**127
# A per-tensor scale is a float32 on the device: it is kept within float32's normal numbers.
_SCALE_RANGE = (float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max))
_MAX_MARGIN = 127  # powers of two of headroom: more pushes any scale below float32's range
_MAX_HISTORY = 2**20  # amaxes a delayed-scaling window keeps at most


def _format(fmt: Any, name: str, allowed: tuple[str, ...] | None = None) -> formats.Format:
    """Return the Format named by ``fmt``; refuse one not in ``allowed``, naming those."""
    if allowed is None:  # every signed format
        allowed = tuple(f.name for f in formats.all_formats(block=True) if f.name != "e8m0")
    try:
        found = check_format(fmt, name)
    except (TypeError, ValueError):
        found = None
    if found is None or found.name not in allowed:
        old = "" if hasattr(ml_dtypes, "float4_e2m1fn") else "; FP6/FP4 need ml_dtypes >= 0.5"
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {fmt!r}{old}")
    return found


def _real_array(x: Any, name: str) -> np.ndarray:
    """Return ``x`` as an array of real numbers (ml_dtypes formats included)."""
    try:
        arr = np.asarray(x)
    except ValueError:  # a ragged nested list
        raise TypeError(f"{name} must be an array of real numbers, got {x!r:.60}") from None
    if arr.dtype.kind not in "fiu":
        try:
            formats.get(arr.dtype)
        except ValueError:
            raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}") from None
    return arr


def _scales(scale: Any, name: str) -> np.ndarray | float:
    """Return a positive finite scale, or an array of them, checked."""
    if np.ndim(scale) == 0 and not isinstance(scale, np.ndarray):
        return check_scalar(scale, name, min_val=0, include_boundaries="neither")
    arr = _real_array(scale, name).astype(np.float64)
    if not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ValueError(f"{name} must hold positive finite numbers only, got {arr.ravel()[:8]}")
    return arr


def _margin(margin: Any) -> int:
    """Return a margin checked: an int from 0 to 127."""
    return check_scalar(margin, "margin", int, min_val=0, max_val=_MAX_MARGIN)


def scale_from_amax(amax: Any, fmt: Any, margin: int = 0, previous: Any = 1.0) -> Any:
    """Return the scale ``max / amax / 2**margin`` that maps ``amax`` onto the format's largest.

    Parameters
    ----------
    amax : float or array_like
        Largest magnitude of the tensor (or one per row, block, ...); at least 0.
    fmt : str or dtype
        The format the scaled tensor is cast to, e.g. ``"fp8_e4m3"`` (any signed format).
    margin : int, optional
        Powers of two of headroom kept below the format's largest value, 0 to 127.
    previous : float or array_like, optional
        Positive and finite: returned where ``amax`` is 0 or not finite.

    Returns
    -------
    float or numpy.ndarray
        The scale (float64; a float for a scalar ``amax``), clipped to float32's normal numbers.
    """
    f = _format(fmt, "fmt")
    margin = _margin(margin)
    previous = _scales(previous, "previous")
    a = _real_array(amax, "amax").astype(np.float64)
    if np.any(a < 0):
        raise ValueError(f"amax must be >= 0 (an absolute maximum), got {a.ravel()[:8]}")
    ok = np.isfinite(a) & (a > 0)
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        scale = np.clip(np.ldexp(f.max / np.where(ok, a, 1.0), -margin), *_SCALE_RANGE)
    out = np.where(ok, scale, previous)
    return float(out) if out.ndim == 0 else out


def quantize(x: Any, fmt: Any, scale: Any) -> np.ndarray:
    """Cast ``x * scale`` to a format, rounding to nearest even and saturating at +-max.

    The product (float32; float64 for float64 or integer ``x``) is clipped before the cast, as
    libraries' casts differ (NaN, +-max or inf). NaN stays NaN; FP6 and FP4 refuse it.

    Parameters
    ----------
    x : array_like
        Values (any real dtype, ml_dtypes formats included).
    fmt : str or dtype
        Target format: any signed format of :mod:`mptutor.formats`.
    scale : float or array_like
        Positive finite scale(s), broadcast against ``x``.

    Returns
    -------
    numpy.ndarray
        In the format's dtype (ml_dtypes for FP8, FP6, FP4).
    """
    f = _format(fmt, "fmt")
    s = _scales(scale, "scale")
    arr = _real_array(x, "x")
    work = np.float64 if arr.dtype == np.float64 or arr.dtype.kind in "iu" else np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        y = arr.astype(work) * np.asarray(s, dtype=work)
    if not formats._has_nan(f.dtype) and np.isnan(y).any():  # FP6, FP4 have no NaN
        raise ValueError(f"x holds NaN, which {f.name} cannot represent")
    return np.clip(y, -f.max, f.max).astype(f.dtype)  # clip keeps NaN


def dequantize(q: Any, scale: Any) -> np.ndarray:
    """Return the values a quantized tensor stands for: ``q / scale`` in float32.

    Parameters
    ----------
    q : array_like
        Quantized values (an array of an ml_dtypes format, or any real array).
    scale : float or array_like
        The positive finite scale(s) :func:`quantize` used.

    Returns
    -------
    numpy.ndarray
        float32, the shape of ``q`` (broadcast against ``scale``).
    """
    s = _scales(scale, "scale")
    with np.errstate(over="ignore"):  # beyond float32's range: inf, as any float32 cast
        return _real_array(q, "q").astype(np.float32) / np.asarray(s, dtype=np.float32)


class DelayedScaling:
    """Delayed scaling: the scale of a step comes from the amaxes of the steps before it.

    Quantize a step's tensor with :attr:`scale` (first 1), then :meth:`update` with its amax:
    the next scale is :func:`scale_from_amax` of the largest (``algo="max"``) or newest amax of
    the last ``history_len``. An amax of 0, inf or NaN keeps the scale and stays out.

    Parameters
    ----------
    fmt : str or dtype
        The format the scaled tensor is cast to, e.g. ``"fp8_e4m3"``.
    history_len : int, optional
        Length of the amax window, 1 to ``2**20``.
    algo : {"max", "most_recent"}, optional
        Which amax of the window the next scale is computed from.
    margin : int, optional
        Powers of two of headroom, 0 to 127 (see :func:`scale_from_amax`).

    Examples
    --------
    >>> ds = DelayedScaling("fp8_e4m3", history_len=2)
    >>> [ds.update(a) for a in (4.0, 2.0, 1.0)]  # windows [4], [4, 2], [2, 1]
    [112.0, 112.0, 224.0]
    """

    def __init__(self, fmt: Any, history_len: int = 1024, algo: str = "max", margin: int = 0):
        self.format = _format(fmt, "fmt")
        self.history_len = check_scalar(
            history_len, "history_len", int, min_val=1, max_val=_MAX_HISTORY
        )
        if not isinstance(algo, str) or algo not in ("max", "most_recent"):
            raise ValueError(f"algo must be one of max, most_recent, got {algo!r}")
        self.algo = algo
        self.margin = _margin(margin)
        self._window: deque[float] = deque(maxlen=self.history_len)
        self.scale = 1.0

    @property
    def history(self) -> np.ndarray:
        """The amaxes in the window, oldest first (float64)."""
        return np.array(self._window, dtype=np.float64)

    @property
    def amax(self) -> float:
        """The amax the current scale was computed from (0 before the first update)."""
        window = self._window or [0.0]
        return max(window) if self.algo == "max" else window[-1]

    def update(self, amax: Any) -> float:
        """Record a step's amax (a float >= 0) and return the next step's :attr:`scale`.

        A refused amax (negative, not one real number) changes nothing; nor, by design, 0, inf
        or NaN.
        """
        arr = _real_array(amax, "amax")
        if arr.ndim != 0:
            raise ValueError(f"amax must be one number, got an array of shape {arr.shape}")
        a = float(arr.astype(np.float64))
        if a < 0:
            raise ValueError(f"amax must be >= 0 (an absolute maximum), got {amax!r}")
        if np.isfinite(a) and a > 0:
            window = deque(self._window, maxlen=self.history_len)
            window.append(a)
            chosen = max(window) if self.algo == "max" else window[-1]
            scale = scale_from_amax(chosen, self.format, self.margin, self.scale)
            self._window, self.scale = window, scale  # both or neither
        return self.scale

    def __repr__(self) -> str:
        return (
            f"DelayedScaling({self.format.name}, history_len={self.history_len}, algo="
            f"{self.algo!r}, margin={self.margin}, scale={self.scale:.6g}, "
            f"amaxes in window={len(self._window)})"
        )


def _blocks(x: Any, block: int, name: str = "x") -> np.ndarray:
    """Return ``x`` in float32, its last axis split in blocks: shape (..., n / block, block)."""
    with np.errstate(over="ignore"):  # beyond float32's range: inf, as any float32 cast
        arr = _real_array(x, name).astype(np.float32)
    if arr.ndim == 0 or arr.shape[-1] % block:
        raise ValueError(
            f"the last axis of {name} (shape {arr.shape}) must be a multiple of block={block}"
        )
    return arr.reshape(*arr.shape[:-1], arr.shape[-1] // block, block)


def mx_quantize(
    x: Any, elem_fmt: Any, block: int = 32, scale_rounding: str = "floor"
) -> tuple[np.ndarray, np.ndarray]:
    """Quantize to OCP Microscaling (MX): one power-of-two E8M0 scale per block of values.

    Each block of ``block`` values along the last axis shares ``2**e``: by the OCP rule
    (``"floor"``) ``e = floor(log2(amax)) - emax`` (``emax`` of the element format's largest
    binade; larger values saturate), by ``"rceil"`` the smallest ``e`` with
    ``amax / 2**e <= max``; clipped to ``[-127, 127]``; NaN for a block holding NaN or inf.

    Parameters
    ----------
    x : array_like
        Values (taken in float32: beyond its range, inf); the last axis a multiple of ``block``.
    elem_fmt : str or dtype
        ``fp8_e4m3``, ``fp8_e5m2``, ``fp6_e2m3``, ``fp6_e3m2`` or ``fp4_e2m1``.
    block : int, optional
        Values per block (32 in the MX formats).
    scale_rounding : {"floor", "rceil"}, optional
        How the shared exponent is chosen.

    Returns
    -------
    elements, scales : numpy.ndarray
        ``x / scale`` rounded to the element format (saturating, the shape of ``x``), and the
        E8M0 scales, one per block (shape ``x.shape[:-1] + (x.shape[-1] // block,)``).
    """
    f = _format(elem_fmt, "elem_fmt", _ELEMENT_FORMATS)
    block = check_scalar(block, "block", int, min_val=1)
    if scale_rounding not in ("floor", "rceil"):
        raise ValueError(f"scale_rounding must be one of floor, rceil, got {scale_rounding!r}")
    v = _blocks(x, block)
    amax = np.max(np.abs(v), axis=-1).astype(np.float64)
    finite = np.isfinite(amax)
    positive = finite & (amax > 0)
    safe = np.where(positive, amax, 1.0)
    if scale_rounding == "floor":
        e = np.frexp(safe)[1] - 1 - f.max_exponent  # frexp: safe = m * 2**k, 0.5 <= m < 1
    else:
        e = np.ceil(np.log2(safe / f.max)).astype(int)
        e = e + (safe > f.max * np.exp2(e)) - (safe <= f.max * np.exp2(e - 1))  # exact
    scale = np.exp2(np.clip(np.where(positive, e, -127), *_E8M0_EXPONENTS).astype(np.float64))
    with np.errstate(invalid="ignore"):
        elements = quantize(np.where(finite[..., None], v, 0) / scale[..., None], f, 1.0)
    scales = np.where(finite, scale, np.nan).astype(formats.get("e8m0").dtype)
    return elements.reshape(np.shape(x)), scales


def mx_dequantize(elements: Any, scales: Any, block: int = 32) -> np.ndarray:
    """Return the values of block-scaled elements (float32): each times its block's scale.

    Parameters
    ----------
    elements, scales : array_like
        As :func:`mx_quantize` returns them: one scale per block.
    block : int, optional
        Values per block.
    """
    block = check_scalar(block, "block", int, min_val=1)
    v = _blocks(elements, block, "elements")
    return _times_scales(v, scales, "scales").reshape(np.shape(elements))


def _times_scales(v: np.ndarray, scales: Any, name: str) -> np.ndarray:
    """Return blocks ``v`` times their scales (float32), one scale a block, checked."""
    with np.errstate(over="ignore"):
        s = _real_array(scales, name).astype(np.float32)
    if s.shape != v.shape[:-1]:
        raise ValueError(f"{name} must have shape {v.shape[:-1]} (one a block), got {s.shape}")
    return v * s[..., None]


_NVFP4_BLOCKS = ((1, 16), (16, 16))  # NVFP4's blocks: 16 along a row; 16x16 for 2D weights
_ROUNDINGS = ("nearest", "stochastic")


def _block_shape(block_shape: Any) -> tuple[int, int]:
    """Return ``block_shape`` as ``(1, 16)`` or ``(16, 16)``; refuse anything else."""
    ints = isinstance(block_shape, (tuple, list)) and all(
        isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in block_shape
    )
    shape = tuple(int(n) for n in block_shape) if ints else None
    if shape not in _NVFP4_BLOCKS:
        raise ValueError(f"block_shape must be (1, 16) or (16, 16), got {block_shape!r}")
    return shape


def _rounding(rounding: Any) -> str:
    """Return ``rounding`` checked: ``"nearest"`` or ``"stochastic"``."""
    if not isinstance(rounding, str) or rounding not in _ROUNDINGS:
        raise ValueError(f"rounding must be one of {', '.join(_ROUNDINGS)}, got {rounding!r}")
    return rounding


def _rng(seed: Any) -> np.random.Generator:
    """Return a NumPy Generator from ``seed``: None, an int >= 0, or a Generator (used as is)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None:
        check_scalar(seed, "seed", int, min_val=0)
    return np.random.default_rng(seed)


def _check_nvfp4_shape(shape: tuple[int, ...], block_shape: tuple[int, int], name: str) -> None:
    """Refuse a ``shape`` whose last axis (two axes, for 16x16 blocks) is not a multiple of 16."""
    two = block_shape == (16, 16)
    if len(shape) < 1 + two or shape[-1] % 16 or (two and shape[-2] % 16):
        raise ValueError(
            f"the {'last two axes' if two else 'last axis'} of {name} (shape {shape}) must be "
            f"multiples of 16 for block_shape={block_shape}"
        )


def _nvfp4_blocks(x: Any, block_shape: tuple[int, int], name: str = "x") -> np.ndarray:
    """Return ``x`` in float32, shape ``(..., c / 16, 16)`` or ``(..., r / 16, c / 16, 256)``."""
    if block_shape == (1, 16):
        return _blocks(x, 16, name)
    with np.errstate(over="ignore"):
        arr = _real_array(x, name).astype(np.float32)
    _check_nvfp4_shape(arr.shape, block_shape, name)
    *lead, r, c = arr.shape
    v = arr.reshape(*lead, r // 16, 16, c // 16, 16)
    return np.moveaxis(v, -3, -2).reshape(*lead, r // 16, c // 16, 256)


def _nvfp4_unblock(v: np.ndarray, shape: tuple[int, ...], block_shape: tuple[int, int]):
    """Undo :func:`_nvfp4_blocks`: blocks back to an array of ``shape``."""
    if block_shape == (1, 16):
        return v.reshape(shape)
    *lead, r, c = shape
    v = v.reshape(*lead, r // 16, c // 16, 16, 16)
    return np.moveaxis(v, -2, -3).reshape(shape)


def _fp4_stochastic(scaled: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Round float32 values to FP4 at random (+-6 saturating): up with probability ``f``."""
    # lo + f * step (0 <= f < 1; step 0.5 below 2, 1 below 4, 2 up to 6); float64 draws
    size = np.minimum(np.abs(scaled), np.float32(6.0))
    step = np.where(size < 2, np.float32(0.5), np.where(size < 4, np.float32(1), np.float32(2)))
    low = np.floor(size / step) * step  # exact: step is a power of two
    up = rng.random(size.shape) < (size - low) / step
    return np.copysign(low + up * step, scaled).astype(formats.get("fp4_e2m1").dtype)


def nvfp4_quantize(
    x: Any, block_shape: Any = (1, 16), rounding: str = "nearest", seed: Any = None
) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """Quantize to NVFP4: FP4 (E2M1) elements, an E4M3 scale per 16 values, one FP32 scale.

    The tensor scale ``amax / (6 * 448)`` brings the block scales ``block amax / 6 / tensor
    scale`` into E4M3 (to nearest, saturating); each element is ``x / (block scale * tensor
    scale)`` rounded to FP4, saturating at +-6. A block holding NaN or inf gets a NaN scale
    (and elements 0: it decodes to NaN); a block whose scale rounds to 0 decodes to 0.

    Parameters
    ----------
    x : array_like
        Values (taken in float32); the last axis a multiple of 16 (for 16x16 blocks, the last
        two axes).
    block_shape : (1, 16) or (16, 16), optional
        Blocks of 16 along the last axis, or 16x16 blocks over the last two axes (as the
        published recipe quantizes weights, so that a matrix and its transpose share them).
    rounding : {"nearest", "stochastic"}, optional
        FP4 elements to nearest even, or up with probability the distance to the lower
        neighbour over the spacing (``E[element] = x / scale`` inside +-6); block scales are
        always rounded to nearest.
    seed : None, int or numpy.random.Generator, optional
        Source of the draws of ``"stochastic"``: the same seed gives the same elements.

    Returns
    -------
    elements, block_scales, tensor_scale : numpy.ndarray, numpy.ndarray, numpy.float32
        FP4 elements (the shape of ``x``), E4M3 block scales (shape ``(..., c / 16)`` or
        ``(..., r / 16, c / 16)``), and ``x ~ element * block_scale * tensor_scale`` (1 for a
        tensor of zeros; never below ``1 / float32 max``, as Transformer Engine's).

    Raises
    ------
    TypeError, ValueError
        For a bad ``block_shape``, ``rounding`` or ``seed`` (None, an int >= 0 or a
        Generator), or axes that are not multiples of 16, before anything is computed.
    """
    block_shape = _block_shape(block_shape)
    rounding = _rounding(rounding)
    rng = _rng(seed)  # checked for "nearest" too, then unused
    fp4 = _format("fp4_e2m1", "elem_fmt")
    v = _nvfp4_blocks(x, block_shape)
    amax = float(np.max(np.abs(v[np.isfinite(v)]), initial=0.0))
    # Transformer Engine's rule (common/cast/nvfp4/core_nvfp4.cuh): the encode scale
    # 6 * 448 / amax is at most the largest float32, so the decode scale is never 0.
    tiny = np.float32(1 / np.finfo(np.float32).max)  # a float32 subnormal, not zero
    wide = amax / (fp4.max * formats.get("fp8_e4m3").max)
    tensor_scale = max(np.float32(wide), tiny) if amax else np.float32(1.0)
    block_amax = np.max(np.abs(v), axis=-1)
    with np.errstate(invalid="ignore"):
        wanted = np.where(np.isfinite(block_amax), block_amax / fp4.max / tensor_scale, np.nan)
    block_scales = quantize(wanted, "fp8_e4m3", 1.0)
    decode = block_scales.astype(np.float32) * tensor_scale
    ok = np.isfinite(decode) & (decode > 0)
    scaled = np.where(ok[..., None], v / np.where(ok, decode, 1.0)[..., None], 0)
    if rounding == "nearest":
        elements = quantize(scaled, fp4, 1.0)
    else:
        elements = _fp4_stochastic(scaled.astype(np.float32), rng)
    return _nvfp4_unblock(elements, np.shape(x), block_shape), block_scales, tensor_scale


def nvfp4_dequantize(
    elements: Any, block_scales: Any, tensor_scale: Any, block_shape: Any = (1, 16)
) -> np.ndarray:
    """Return the values of an NVFP4 tensor: element x block scale x tensor scale, float32.

    Parameters
    ----------
    elements, block_scales, tensor_scale
        The three parts :func:`nvfp4_quantize` returns.
    block_shape : (1, 16) or (16, 16), optional
        The blocks they were quantized in.
    """
    block_shape = _block_shape(block_shape)
    scale = np.float32(
        check_scalar(tensor_scale, "tensor_scale", min_val=0, include_boundaries="neither")
    )
    v = _nvfp4_blocks(elements, block_shape, "elements")
    v = _times_scales(v, block_scales, "block_scales")
    return _nvfp4_unblock(v, np.shape(elements), block_shape) * scale
