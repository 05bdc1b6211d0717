"""What differs between Keras's backends: versions, the device, TF32, waiting for the device.

Each function imports the package behind the active backend (``keras.backend.backend()``) only
when it needs it, so that nothing here imports TensorFlow unless TensorFlow is the backend.
"""

from __future__ import annotations

import gc
import importlib
from typing import Any

import keras

__all__ = ["backend_version", "device_kind", "set_tf32", "block", "detach", "free_memory"]

_PACKAGES = {"tensorflow": "tensorflow", "torch": "torch", "jax": "jax"}


def _name(backend: str | None) -> str:
    return keras.backend.backend() if backend is None else backend


def backend_version(backend: str | None = None) -> str:
    """Return the version of the package behind a Keras backend.

    Parameters
    ----------
    backend : str, optional
        ``"tensorflow"``, ``"torch"`` or ``"jax"``; the active backend when omitted.

    Returns
    -------
    str
        The version, or ``"unknown"`` for another backend.
    """
    module = _PACKAGES.get(_name(backend))
    if module is None:
        return "unknown"
    return str(importlib.import_module(module).__version__)


def device_kind(backend: str | None = None) -> str:
    """Return ``"cuda"`` when the backend computes on an NVIDIA GPU, else its platform.

    Parameters
    ----------
    backend : str, optional
        ``"tensorflow"``, ``"torch"`` or ``"jax"``; the active backend when omitted.

    Returns
    -------
    str
        ``"cuda"``, ``"cpu"`` or another platform that JAX names (``"tpu"``).
    """
    name = _name(backend)
    if name == "torch":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "jax":
        import jax

        platform = jax.devices()[0].platform
        return "cuda" if platform == "gpu" else platform
    if name == "tensorflow":
        import tensorflow as tf

        return "cuda" if tf.config.list_physical_devices("GPU") else "cpu"
    return "cpu"


def set_tf32(allowed: bool, backend: str | None = None) -> dict[str, Any]:
    """Allow or forbid TF32 for float32 convolutions and matrix products.

    TF32 is TensorFlow's default and PyTorch's default for cuDNN convolutions on Ampere and
    later GPUs; forbidding it makes ``float32`` strict FP32, as on a V100.

    Parameters
    ----------
    allowed : bool
        Whether TF32 may be used.
    backend : str, optional
        ``"tensorflow"``, ``"torch"`` or ``"jax"``; the active backend when omitted.

    Returns
    -------
    dict
        The settings made, by name, for the record. On PyTorch they are made by
        :func:`mptutor.torch_perf.set_tf32`.
    """
    name = _name(backend)
    if name == "torch":
        from mptutor import torch_perf

        torch_perf.set_tf32(allowed)
        return {"torch": torch_perf.tf32_settings()}
    if name == "jax":
        import jax

        value = "tensorfloat32" if allowed else "float32"
        jax.config.update("jax_default_matmul_precision", value)
        return {"jax_default_matmul_precision": value}
    if name == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(allowed)
        return {"tf.config.experimental.enable_tensor_float_32_execution": allowed}
    return {}


def block(value: Any) -> Any:
    """Wait until the backend has computed ``value``, then return it.

    A GPU runs the kernels that a call queued after the call has returned; without this wait a
    timed call measures only how long it takes to queue them. TensorFlow waits with
    ``tf.test.experimental.sync_devices()`` (no copy to the host), PyTorch with
    ``torch.cuda.synchronize()``, JAX with ``jax.block_until_ready``.

    Parameters
    ----------
    value : object
        What the timed call returned.

    Returns
    -------
    object
        ``value``, computed.
    """
    name = keras.backend.backend()
    if name == "jax":
        import jax

        return jax.block_until_ready(value)
    if name == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return value
    if name == "tensorflow":
        import tensorflow as tf

        tf.test.experimental.sync_devices()
    return value


def detach(x: Any) -> Any:
    """Return a tensor cut from the autograd graph that made it (PyTorch), else ``x`` itself.

    Parameters
    ----------
    x : tensor
        A backend tensor.

    Returns
    -------
    tensor
        ``x.detach()`` on the PyTorch backend, ``x`` otherwise.
    """
    if keras.backend.backend() == "torch":
        return x.detach()
    return x


def free_memory() -> None:
    """Drop Keras's global state and cached device memory between measurements."""
    keras.backend.clear_session()
    gc.collect()
    if keras.backend.backend() == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
