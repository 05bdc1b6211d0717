"""bfloat16 through MXNet AMP: whether this CPU can run it, and ``amp.init`` done once.

``amp.init`` rewires MXNet's operators for the rest of the process and cannot be undone, so the
training functions ask here before building or training a float32 or float16 network.
"""

from __future__ import annotations

import functools
import math
import subprocess
import sys

from mptutor._checks import check_scalar
from mptutor.mxnet._imports import amp

__all__ = ["probe_bf16", "bf16_supported", "amp_initialized", "init_amp_bf16", "refuse_after_amp"]

#: The type that this package initialised MXNet AMP for, under the key ``"target"``.
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
def probe_bf16(timeout: float = 120.0) -> tuple[bool, str]:
    """Find out whether MXNet AMP can train in bfloat16 on this CPU.

    A small convolutional network takes one AMP bfloat16 training step in a separate Python
    process, so that neither ``amp.init`` nor a failure (oneDNN prints its complaint to the
    process's stderr) touches this one. MXNet 1.9.1's oneDNN has bfloat16 convolutions for CPUs
    with AVX-512; on an AVX2-only CPU it fails with "could not create a primitive descriptor
    iterator". The answer is cached for the life of the process.

    Parameters
    ----------
    timeout : float, default 120
        Seconds to wait for the probe (more than 0).

    Returns
    -------
    supported : bool
        Whether the step ran and gave a finite loss.
    reason : str
        ``"ok"``, or the last line of the failure.

    Raises
    ------
    TypeError, ValueError
        If ``timeout`` is not a positive finite number.
    """
    timeout = check_scalar(timeout, "timeout", min_val=0, include_boundaries="neither")
    try:
        out = subprocess.run(
            [sys.executable, "-c", _BF16_PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
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
    found = [line for line in lines if "MXNetError" in line or "Error" in line]
    return False, (found or lines or [f"exit status {out.returncode}"])[-1]


def bf16_supported() -> bool:
    """Whether MXNet AMP can train in bfloat16 on this CPU (see :func:`probe_bf16`).

    Returns
    -------
    bool
        ``probe_bf16()[0]``.
    """
    return probe_bf16()[0]


def amp_initialized() -> str | None:
    """Return the type MXNet AMP was initialised for in this process, if it was.

    Returns
    -------
    str or None
        ``"bfloat16"`` or ``"float16"`` after ``amp.init``, ``"unknown"`` if ``amp.init`` was
        called other than through this package, ``None`` before.
    """
    if not amp.amp._amp_initialized:
        return None
    return _AMP_STATE.get("target", "unknown")


def init_amp_bf16() -> None:
    """Call ``amp.init(target_dtype="bfloat16")`` unless it was done already.

    Raises
    ------
    RuntimeError
        If MXNet AMP was initialised for float16 in this process.
    """
    target = amp_initialized()
    if target is None:
        amp.init(target_dtype="bfloat16")
        _AMP_STATE["target"] = "bfloat16"
    elif target == "float16":
        raise RuntimeError(
            "MXNet AMP was already initialised for float16 in this process; amp.init cannot be "
            "undone, so bfloat16 AMP needs a new process"
        )


def refuse_after_amp(what: str) -> None:
    """Refuse a float32 or float16 network or run once ``amp.init`` has rewired MXNet.

    Parameters
    ----------
    what : str
        What is refused, for the message, e.g. ``"float32 network"``.

    Raises
    ------
    RuntimeError
        If MXNet AMP was initialised in this process.
    """
    target = amp_initialized()
    if target is not None:
        raise RuntimeError(
            f"MXNet AMP was initialised ({target}) in this process: amp.init rewires MXNet's "
            f"operators for good, so a {what} would compute its convolutions in low precision. "
            "Build and train float32 and float16 networks before the first bfloat16 one, or "
            "start a new process"
        )
