"""MXNet imported once, quietly; where and in which type it computes; bfloat16 AMP; parameters.

MXNet 1.9.1 emits ``DeprecationWarning`` from its own import code with the NumPy 1.23 it needs
(``np.bool``, NEP 32, distutils' ``Version``); in Jupyter without ipywidgets ``tqdm.auto`` warns
that it falls back to a text bar. Exactly those are hidden, during the import only, here only.
"""

from __future__ import annotations

import functools
import math
import random
import subprocess
import sys
import warnings
from typing import Any

import numpy as np

from mptutor import formats, hardware
from mptutor._checks import check_scalar

with warnings.catch_warnings():
    for _message in (
        r"`np\.bool` is a deprecated alias",
        r"In accordance with NEP 32",
        r"distutils Version classes are deprecated",
    ):
        warnings.filterwarnings("ignore", message=_message, category=DeprecationWarning)
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.contrib import amp
    from mxnet.gluon.data.vision import ImageFolderDataset, transforms
    from mxnet.gluon.model_zoo import vision

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="IProgress not found")
    from tqdm.auto import tqdm

__all__ = ["mx", "autograd", "gluon", "amp", "ImageFolderDataset", "transforms", "vision", "tqdm"]

_DTYPES = ("float32", "float16", "bfloat16")

_NO_FP16_ON_CPU = (
    "MXNet has no float16 matrix products on a CPU: a float16 convolution fails there with "
    "'FP16 gemm on cpu not implemented!' and a float16 dense layer with 'float16 fully "
    "connected layer is currently only supported by CuDNN version'. On a CPU use "
    "dtype='bfloat16' (MXNet AMP, for CPUs with AVX-512; see mptutor.mxnet.probe_bf16) or "
    "float32; for float16 use a GPU context "
    "(mx.gpu(0)) with a CUDA build of MXNet such as mxnet-cu112"
)


def seed(value: int = 0) -> None:
    """Seed MXNet's, NumPy's global (``DataLoader``'s shuffling) and Python's random state.

    With the same seed, machine and ``num_workers=0`` a CPU run repeats bit for bit.

    Parameters
    ----------
    value : int, default 0
        The seed, from 0 to ``2**32 - 1``.

    Raises
    ------
    TypeError, ValueError
        If ``value`` is not an int, or is out of that range.
    """
    value = check_scalar(value, "seed", int, min_val=0, max_val=2**32 - 1)
    random.seed(value)
    np.random.seed(value)  # noqa: NPY002 - DataLoader's RandomSampler uses the global state
    mx.random.seed(value)


def context() -> mx.Context:
    """Return ``mx.gpu(0)`` if MXNet sees a GPU not hidden by ``MPTUTOR_DEVICE``, else ``mx.cpu()``.

    Raises
    ------
    ValueError
        If ``MPTUTOR_DEVICE`` is set to neither ``cpu`` nor ``cuda``.
    """
    if hardware._device_override() == "cpu":
        return mx.cpu()
    try:
        count = mx.context.num_gpus()
    except mx.base.MXNetError:  # a CUDA build without a usable driver
        count = 0
    return mx.gpu(0) if count > 0 else mx.cpu()


def _is_gpu(ctx: mx.Context) -> bool:
    """Whether a context is a GPU."""
    return ctx.device_type == "gpu"


def _resolve_context(ctx: Any) -> mx.Context:
    """Return ``ctx``, or :func:`context` for ``None``; a ``TypeError`` for anything else."""
    if ctx is None:
        return context()
    if not isinstance(ctx, mx.Context):
        raise TypeError(f"ctx={ctx!r}: give an mxnet Context such as mx.cpu() or mx.gpu(0)")
    return ctx


def _check_dtype(dtype: Any, ctx: mx.Context | None = None) -> str:
    """Name float32, float16 or bfloat16 as formats does; refuse one the context cannot run."""
    try:
        name: str | None = formats.dtype_name(dtype)
    except (TypeError, ValueError):  # neither a dtype nor anything that has one
        name = None
    if name not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(_DTYPES)}")
    if ctx is not None and name == "float16" and not _is_gpu(ctx):
        raise ValueError(f"dtype='float16' on {ctx}: {_NO_FP16_ON_CPU}")
    if ctx is not None and name == "bfloat16" and _is_gpu(ctx):
        raise ValueError(
            f"dtype='bfloat16' on {ctx}: MXNet 1.9 runs bfloat16 AMP through oneDNN on CPUs "
            "only; on a GPU use dtype='float16' (net.cast plus multi_precision=True)"
        )
    return name


# --------------------------------------------------------------------------------------------
# bfloat16 through MXNet AMP: amp.init rewires MXNet's operators for good, so the functions
# that build or train a float32 or float16 network refuse to run after it.

_AMP_STATE: dict[str, str] = {}

_BF16_PROBE = """
import warnings
warnings.simplefilter("ignore")
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp
amp.init(target_dtype="bfloat16")
net = gluon.nn.HybridSequential()
net.add(gluon.nn.Conv2D(8, 3, padding=1), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
        gluon.nn.GlobalAvgPool2D(), gluon.nn.Dense(8))
net.initialize(mx.init.Xavier())
net.hybridize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
amp.init_trainer(trainer)
x = mx.nd.random.uniform(shape=(8, 3, 8, 8))
y = mx.nd.arange(8)
with autograd.record():
    loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    with amp.scale_loss(loss, trainer) as scaled:
        autograd.backward(scaled)
trainer.step(8)
print("bf16-ok", float(loss.sum().asscalar()))
"""


@functools.lru_cache(maxsize=1)
def probe_bf16() -> tuple[bool, str]:
    """Find out whether MXNet AMP can train in bfloat16 on this CPU (cached for the process).

    A small network takes one AMP bfloat16 step in a separate process (two minutes at most), so
    that neither ``amp.init`` nor a failure touches this one. MXNet 1.9.1's oneDNN has bfloat16
    convolutions for CPUs with AVX-512 only.

    Returns
    -------
    supported : bool
        Whether the step ran and gave a finite loss.
    reason : str
        ``"ok"``, or the last line of the failure.
    """
    try:
        out = subprocess.run(
            [sys.executable, "-c", _BF16_PROBE], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"the probe could not run: {exc}"
    for line in out.stdout.splitlines():
        if line.startswith("bf16-ok"):
            value = float(line.split()[1])
            if math.isfinite(value):
                return True, "ok"
            return False, f"the bfloat16 step gave a loss of {value}"
    lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
    found = [line for line in lines if "Error" in line]
    return False, (found or lines or [f"exit status {out.returncode}"])[-1]


def _amp_target() -> str | None:
    """Return the type ``amp.init`` was called for here (``"unknown"``: not by us), or None."""
    if not amp.amp._amp_initialized:
        return None
    return _AMP_STATE.get("target", "unknown")


def _init_amp_bf16() -> None:
    """Call ``amp.init(target_dtype="bfloat16")`` unless done; refuse after a float16 init."""
    target = _amp_target()
    if target is None:
        amp.init(target_dtype="bfloat16")
        _AMP_STATE["target"] = "bfloat16"
    elif target == "float16":
        raise RuntimeError(
            "MXNet AMP was already initialised for float16 in this process; amp.init cannot be "
            "undone, so bfloat16 AMP needs a new process"
        )


def _refuse_after_amp(what: str) -> None:
    """Raise a RuntimeError about ``what`` (e.g. "float32 network") once amp.init has run."""
    target = _amp_target()
    if target is not None:
        raise RuntimeError(
            f"MXNet AMP was initialised ({target}) in this process: amp.init rewires MXNet's "
            f"operators for good, so a {what} would compute its convolutions in low precision. "
            "Build and train float32 and float16 networks before the first bfloat16 one, or "
            "start a new process"
        )


# --------------------------------------------------------------------------------------------
# A network's parameters


def _params_of(net: gluon.Block) -> dict[str, gluon.Parameter]:
    """Every parameter of a Block by structural name (``"features.1.weight"``), none: errors."""
    if not isinstance(net, gluon.Block):
        raise TypeError(f"expected a Gluon Block, got {type(net).__name__}")
    params = net._collect_params_with_prefix()
    if not params:
        raise ValueError("the network has no parameters")
    return params


def _param_dtypes(net: gluon.Block) -> set[str]:
    """Name the types of a network's parameters."""
    return {formats.dtype_name(p.dtype) for p in _params_of(net).values()}


def _net_context(net: gluon.Block) -> mx.Context:
    """Where a network's parameters live (a ``ValueError`` if none is initialised)."""
    for param in _params_of(net).values():
        try:
            return param.list_ctx()[0]
        except RuntimeError:
            continue
    raise ValueError("the network's parameters are not initialised: call net.initialize() first")


def _where_and_how(net: gluon.Block, dtype: Any) -> tuple[mx.Context, str]:
    """Return the network's context and the checked type (by default the network's)."""
    ctx = _net_context(net)
    if dtype is None:
        dtype = "float16" if "float16" in _param_dtypes(net) else "float32"
    return ctx, _check_dtype(dtype, ctx)
