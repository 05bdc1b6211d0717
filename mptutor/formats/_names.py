"""One vocabulary for dtypes: every spelling of the known formats, and the dtype of anything.

:data:`FORMATS` (with :data:`BLOCK_FORMATS`) is the one table of the formats' names and
spellings; :func:`dtype_name` and :func:`mptutor.formats.get` both read it, so every spelling one
understands the other does too.
Framework dtypes (``torch.float16``, ``tf.bfloat16``, MXNet's bfloat16) are recognised by their
names and attributes: no framework is imported here.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

#: The known formats, widest first: short name, the NumPy (or ml_dtypes) type that stores it,
#: and its other spellings besides the short name and NumPy's name of the dtype. ``"float"``
#: and ``"single"`` mean float32, as in the deep-learning frameworks (``torch.float``).
FORMATS: tuple[tuple[str, type, tuple[str, ...]], ...] = (
    ("fp32", np.float32, ("float", "single")),
    ("fp16", np.float16, ("half",)),
    ("bf16", ml_dtypes.bfloat16, ()),
    ("fp8_e4m3", ml_dtypes.float8_e4m3fn, ("e4m3",)),
    ("fp8_e5m2", ml_dtypes.float8_e5m2, ("e5m2",)),
)

#: The formats that live only inside block-scaled tensors (MX, NVFP4, :mod:`mptutor.fp8`): the
#: element formats FP6 and FP4 and E8M0, the power-of-two scale of an MX block (no sign, no zero,
#: no subnormals). Same columns as :data:`FORMATS`; listed when ml_dtypes has them (>= 0.5).
BLOCK_FORMATS: tuple[tuple[str, type, tuple[str, ...]], ...] = tuple(
    (short, getattr(ml_dtypes, kind), others)
    for short, kind, others in (
        ("fp6_e2m3", "float6_e2m3fn", ("e2m3",)),
        ("fp6_e3m2", "float6_e3m2fn", ("e3m2",)),
        ("fp4_e2m1", "float4_e2m1fn", ("e2m1",)),
        ("e8m0", "float8_e8m0fnu", ("fp8_e8m0", "ue8m0")),
    )
    if hasattr(ml_dtypes, kind)
)

#: Every spelling of a known format, normalised (lower case, ``_`` for ``-``), to NumPy's name
#: of its dtype: ``"half"``, ``"fp16"`` and ``"float16"`` all to ``"float16"``.
SPELLINGS: dict[str, str] = {
    spelling: np.dtype(kind).name
    for short, kind, others in FORMATS + BLOCK_FORMATS
    for spelling in (short, np.dtype(kind).name, *others)
}


#: The ways of computing that the lessons and benchmarks compare, one spelling each, with what
#: each stores and computes in. Storage formats keep their short names; ``"fp32"`` is strict FP32
#: (TF32 off), ``"tf32"`` FP32 storage with TF32 matrix products, ``"amp_*"`` automatic mixed
#: precision (FP32 weights, low-precision products where the framework deems them safe).
PRECISIONS: dict[str, str] = {
    "fp32": "FP32 storage and arithmetic, TF32 off",
    "tf32": "FP32 storage, matrix products with TF32 inputs and FP32 sums",
    "fp16": "FP16 storage and products, FP32 sums",
    "bf16": "BF16 storage and products, FP32 sums",
    "fp8_e4m3": "FP8 E4M3 inputs with a scale each, FP32 sums",
    "amp_fp16": "FP32 weights, FP16 products (autocast, mixed_float16), loss scaling",
    "amp_bf16": "FP32 weights, BF16 products (autocast, mixed_bfloat16)",
}


def precision(name: str) -> str:
    """Check a precision's name and give its one spelling (``"fp8-e4m3"`` -> ``"fp8_e4m3"``).

    Parameters
    ----------
    name : str
        A key of :data:`PRECISIONS`, in any case, with ``-`` or ``_``.

    Returns
    -------
    str
        The key of :data:`PRECISIONS`.

    Raises
    ------
    TypeError
        If ``name`` is not a string.
    ValueError
        If it names no precision of :data:`PRECISIONS`.
    """
    if not isinstance(name, str):
        raise TypeError(f"a precision is named by a string, not {type(name).__name__}")
    key = name.strip().lower().replace("-", "_")
    if key not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; known: {', '.join(PRECISIONS)}")
    return key


def _spelled(text: str) -> str:
    """NumPy's name for a spelling of a known format; any other text unchanged."""
    return SPELLINGS.get(text.strip().lower().replace("-", "_"), text)


def _numpy_name(dtype: np.dtype) -> str:
    return dtype.names[0] if dtype.names else dtype.name  # MXNet's bfloat16 is a record


def dtype_name(x: Any) -> str:
    """One spelling for the dtype of a tensor or a dtype of any library: ``"float16"``, ...

    Parameters
    ----------
    x : object
        A tensor or array (PyTorch, TensorFlow, NumPy, MXNet, Keras), a dtype of one of them, or
        a dtype's name. Nothing is imported: dtypes are recognised by their names and attributes.

    Returns
    -------
    str
        The dtype's name as NumPy spells it, e.g. ``"float16"``, ``"bfloat16"``, ``"int64"``.
        A name is returned as NumPy spells that format when it is a spelling of a known format
        (``"half"`` and ``"fp16"`` give ``"float16"``), and as given otherwise (a Keras policy
        name such as ``"mixed_float16"`` stays).

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
        return _spelled(x)
    kind = type(x)
    if kind.__module__ == "torch" and kind.__name__ == "dtype":
        return str(x).removeprefix("torch.")
    if hasattr(x, "as_numpy_dtype") and isinstance(getattr(x, "name", None), str):
        return x.name  # tf.DType
    if isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic)):
        return _numpy_name(np.dtype(x))
    if hasattr(x, "dtype") and not isinstance(x, type):
        return dtype_name(x.dtype)
    if x is None:
        raise TypeError("None is not a dtype and has no dtype")
    try:
        dtype = np.dtype(x)
    except TypeError:
        raise TypeError(f"{x!r} is not a dtype and has no dtype") from None
    return _numpy_name(dtype)
