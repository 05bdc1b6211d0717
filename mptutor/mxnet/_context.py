"""Where MXNet computes and in which type: seeds, the context, dtype checks."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from mptutor import formats, hardware
from mptutor._checks import check_scalar
from mptutor.mxnet._imports import mx

__all__ = ["DTYPES", "NO_FP16_ON_CPU", "seed", "context", "check_dtype"]

#: Data types that :func:`~mptutor.mxnet.get_network` and :func:`~mptutor.mxnet.train` accept,
#: spelled as :func:`mptutor.formats.dtype_name` spells them.
DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")

#: Why float16 is refused on a CPU context.
NO_FP16_ON_CPU = (
    "MXNet has no float16 matrix products on a CPU: a float16 convolution fails there with "
    "'FP16 gemm on cpu not implemented!' and a float16 dense layer with 'float16 fully "
    "connected layer is currently only supported by CuDNN version'. On a CPU use "
    "dtype='bfloat16' (MXNet AMP, for CPUs with AVX-512; see mptutor.mxnet.probe_bf16) or "
    "float32; for float16 use a GPU context "
    "(mx.gpu(0)) with a CUDA build of MXNet such as mxnet-cu112"
)


def seed(value: int = 0) -> None:
    """Seed every random source a Gluon training run uses.

    MXNet's generator draws the initial weights, NumPy's global state orders the shuffled
    batches of ``DataLoader``, Python's ``random`` is seeded for completeness. With the same
    seed, the same machine and ``num_workers=0`` a CPU run repeats bit for bit; another CPU
    (other oneDNN kernels) or thread count gives slightly different sums, which training then
    amplifies.

    Parameters
    ----------
    value : int, default 0
        The seed, from 0 to ``2**32 - 1``.

    Raises
    ------
    TypeError
        If ``value`` is not an int.
    ValueError
        If ``value`` is out of that range.
    """
    value = check_scalar(value, "seed", int, min_val=0, max_val=2**32 - 1)
    random.seed(value)
    np.random.seed(value)  # noqa: NPY002 - DataLoader's RandomSampler uses the global state
    mx.random.seed(value)


def context() -> mx.Context:
    """Return the context the notebooks train on: the first GPU MXNet sees, else the CPU.

    d2l's ``try_gpu`` idea, with this project's override: ``MPTUTOR_DEVICE=cpu`` forces the CPU
    (read through :func:`mptutor.hardware._device_override`, the one place that reads it). It asks
    MXNet itself, so a CPU build of MXNet on a GPU machine gives the CPU; asking for ``cuda``
    cannot conjure a GPU either.

    Returns
    -------
    mxnet.Context
        ``mx.gpu(0)`` when this MXNet build sees a GPU and ``MPTUTOR_DEVICE=cpu`` is not set,
        otherwise ``mx.cpu()``.

    Raises
    ------
    ValueError
        If ``MPTUTOR_DEVICE`` is set to neither ``cpu`` nor ``cuda`` (see
        :func:`mptutor.hardware._device_override`).

    Examples
    --------
    >>> from mptutor import mxnet as mmx  # doctest: +SKIP
    >>> x = mmx.mx.nd.ones((2,), ctx=mmx.context())  # doctest: +SKIP
    """
    if hardware._device_override() == "cpu":
        return mx.cpu()
    try:
        count = mx.context.num_gpus()
    except mx.base.MXNetError:  # a CUDA build without a usable driver
        count = 0
    return mx.gpu(0) if count > 0 else mx.cpu()


def is_gpu(ctx: mx.Context) -> bool:
    """Whether a context is a GPU.

    Parameters
    ----------
    ctx : mxnet.Context
        The context.

    Returns
    -------
    bool
        ``True`` for ``mx.gpu(i)``.
    """
    return ctx.device_type == "gpu"


def resolve_context(ctx: Any) -> mx.Context:
    """Return ``ctx``, or :func:`context` for ``None``, refusing anything but a Context.

    Parameters
    ----------
    ctx : mxnet.Context or None
        The context given.

    Returns
    -------
    mxnet.Context
        The context to use.

    Raises
    ------
    TypeError
        If ``ctx`` is neither ``None`` nor an MXNet context.
    """
    if ctx is None:
        return context()
    if not isinstance(ctx, mx.Context):
        raise TypeError(f"ctx={ctx!r}: give an mxnet Context such as mx.cpu() or mx.gpu(0)")
    return ctx


def check_dtype(dtype: Any, ctx: mx.Context | None = None) -> str:
    """Name a data type as :mod:`mptutor.formats` does and check that it can train on a context.

    The public functions call it once, on their ``dtype`` argument, and hand the checked name
    on to the helpers they call.

    Parameters
    ----------
    dtype : str or dtype
        Any spelling of float32, float16 or bfloat16 that :func:`mptutor.formats.dtype_name`
        knows: ``"float16"``, ``"fp16"``, ``"half"``, ``"BF16"``, ``numpy.float32``, ...
    ctx : mxnet.Context, optional
        Where it will run; ``None`` skips the check of the context.

    Returns
    -------
    str
        One of :data:`DTYPES`.

    Raises
    ------
    ValueError
        If ``dtype`` is none of :data:`DTYPES`, if it is float16 and ``ctx`` is a CPU (MXNet has
        no float16 GEMM there), or if it is bfloat16 and ``ctx`` is a GPU (MXNet 1.9 runs
        bfloat16 AMP through oneDNN, on CPUs only).
    """
    try:
        name: str | None = formats.dtype_name(dtype)
    except (TypeError, ValueError):  # neither a dtype nor anything that has one
        name = None
    if name not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    if ctx is not None and name == "float16" and not is_gpu(ctx):
        raise ValueError(f"dtype='float16' on {ctx}: {NO_FP16_ON_CPU}")
    if ctx is not None and name == "bfloat16" and is_gpu(ctx):
        raise ValueError(
            f"dtype='bfloat16' on {ctx}: MXNet 1.9 runs bfloat16 AMP through oneDNN on CPUs "
            "only; on a GPU use dtype='float16' (net.cast plus multi_precision=True)"
        )
    return name
