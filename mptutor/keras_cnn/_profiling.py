"""Timing a training step, profiling it layer by layer, and listing its GPU kernels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from mptutor import bench
from mptutor.keras_cnn._backend import block, detach, device_kind
from mptutor.keras_cnn._costs import layer_flops

__all__ = ["timing_device", "time_step", "profile_layers", "kernel_profile"]


def timing_device() -> str:
    """Return the device that :func:`mptutor.bench.time_fn` should synchronise.

    Returns
    -------
    str
        ``"cuda"`` on the PyTorch backend with a CUDA GPU, where ``time_fn`` synchronises
        through PyTorch; ``"cpu"`` otherwise (the timed functions here wait themselves).
    """
    backend = keras.backend.backend()
    return "cuda" if backend == "torch" and device_kind(backend) == "cuda" else "cpu"


def time_step(
    model: keras.Model, x: Any, y: Any, repeats: int = 10, warmup: int = 2
) -> bench.Timing:
    """Time ``model.train_on_batch(x, y)``: warm-up calls, then timed calls.

    ``train_on_batch`` returns the loss as a NumPy value, so each call waits for the device.
    The first warm-up call traces the step into a graph; the next ones warm the allocator.

    Parameters
    ----------
    model : keras.Model
        A compiled model.
    x, y : array_like or backend tensor
        A batch: NumPy arrays are converted at every call (and copied to a GPU), tensors made
        once are not.
    repeats : int, optional
        Timed calls; their median is the step time.
    warmup : int, optional
        Untimed calls first.

    Returns
    -------
    mptutor.bench.Timing
        The times of the timed calls.
    """
    return bench.time_fn(
        lambda: model.train_on_batch(x, y), repeats=repeats, warmup=warmup, device=timing_device()
    )


def _forward_backward(
    layer: keras.layers.Layer, x: Any, input_grad: bool
) -> Callable[[], Any] | None:
    """One forward and backward pass of a layer: gradients of its weights, and of ``x`` if asked.

    Returns ``None`` on JAX (forward only) or when there is nothing to differentiate.
    """
    weights = list(layer.trainable_variables)
    if not weights and not input_grad:
        return None
    name = keras.backend.backend()
    if name == "tensorflow":
        import tensorflow as tf

        def step() -> Any:
            with tf.GradientTape() as tape:
                if input_grad:
                    tape.watch(x)
                total = tf.reduce_sum(tf.cast(layer(x, training=True), tf.float32))
            sources = ([x] if input_grad else []) + [w.value for w in weights]
            return block(tape.gradient(total, sources))

        return step
    if name == "torch":
        import torch

        xin = x.detach().requires_grad_(input_grad) if torch.is_floating_point(x) else x

        def step() -> Any:
            total = layer(xin, training=True).float().sum()
            sources = ([xin] if input_grad else []) + [w.value for w in weights]
            return block(torch.autograd.grad(total, sources))

        return step
    return None


def profile_layers(
    model: keras.Model, x: np.ndarray, repeats: int = 5, warmup: int = 1
) -> list[dict[str, Any]]:
    """Time each layer's forward pass, and its forward and backward pass, one layer at a time.

    Each layer runs on the output of the one before it. The backward pass computes the
    gradients of the layer's weights and, where a trainable layer comes before it, of its input
    (the first convolution's input gradient is never needed). Every timed call waits for the
    device (:func:`block`): without that, a GPU timing measures only the kernel launches. The
    layers run eagerly, one call each, so each timing includes the per-call overhead that a
    traced training step avoids.

    Parameters
    ----------
    model : keras.Model
        A functional model.
    x : numpy.ndarray
        An input batch.
    repeats : int, optional
        Timed calls per measurement; their median is kept.
    warmup : int, optional
        Untimed calls first.

    Returns
    -------
    list of dict
        One row per layer after the input: ``layer, kind, output_shape, flops, forward_s,
        forward_backward_s`` (``None`` on JAX, where only the forward pass is timed).
    """
    rows = []
    h = keras.ops.convert_to_tensor(x)
    trained_before = False
    device = timing_device()
    for layer in model.layers[1:]:
        current = h

        def forward(layer: keras.layers.Layer = layer, current: Any = current) -> Any:
            return block(layer(current, training=True))

        fwd = bench.time_fn(forward, repeats=repeats, warmup=warmup, device=device)
        both = _forward_backward(layer, current, input_grad=trained_before)
        rows.append(
            {
                "layer": layer.name,
                "kind": type(layer).__name__,
                "output_shape": [int(d) for d in layer.output.shape[1:]],
                "flops": layer_flops(layer, int(x.shape[0])),
                "forward_s": fwd.median,
                "forward_backward_s": None
                if both is None
                else bench.time_fn(both, repeats=repeats, warmup=warmup, device=device).median,
            }
        )
        h = detach(layer(current, training=True))
        trained_before = trained_before or bool(layer.trainable_variables)
    return rows


def kernel_profile(model: keras.Model, x: Any, y: Any) -> dict[str, Any] | None:
    """List the CUDA kernels of one training step, with the Tensor Core ones marked.

    Uses :func:`mptutor.torch.tensor_core_kernels`, so it needs the PyTorch backend and a CUDA
    GPU.

    Parameters
    ----------
    model : keras.Model
        A compiled model.
    x, y : backend tensor
        A batch.

    Returns
    -------
    dict or None
        ``total_us``, ``tensor_core_us`` and the 25 longest ``kernels`` (name, calls, CUDA time,
        whether it ran on Tensor Cores); ``None`` on another backend or without a CUDA GPU.
    """
    if keras.backend.backend() != "torch" or device_kind("torch") != "cuda":
        return None
    from mptutor import torch as mpt

    kernels = mpt.tensor_core_kernels(lambda: model.train_on_batch(x, y), warmup=2)
    return {
        "total_us": sum(k.cuda_time_us for k in kernels),
        "tensor_core_us": sum(k.cuda_time_us for k in kernels if k.tensor_core),
        "kernels": [
            {
                "name": k.name[:160],
                "calls": k.calls,
                "cuda_time_us": k.cuda_time_us,
                "tensor_core": k.tensor_core,
            }
            for k in kernels[:25]
        ],
    }
