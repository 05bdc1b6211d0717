"""Training steps timed in strict FP32, TF32, AMP FP16 and AMP BF16; master-weight layouts."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mptutor import bench
from mptutor.torch_perf._tf32 import tf32
from mptutor.torch_perf._timing import DeviceLike, is_cuda, synchronize

__all__ = [
    "TrainingMode",
    "TRAINING_MODES",
    "measure_training",
    "conv_step_times",
    "stride_mismatches",
]


@dataclass(frozen=True)
class TrainingMode:
    """How a training step runs.

    Attributes
    ----------
    name : str
        ``"fp32-strict"``, ``"tf32"``, ``"amp-fp16"`` or ``"amp-bf16"``.
    tf32 : bool
        TF32 allowed for FP32 matrix products and cuDNN convolutions.
    autocast : torch.dtype or None
        The ``torch.autocast`` dtype, ``None`` for no autocast.
    grad_scaler : bool
        Whether ``torch.amp.GradScaler`` scales the loss.
    precision : str
        The GEMM precision (key of :data:`PRECISIONS`) whose hardware support the mode needs.
    """

    name: str
    tf32: bool
    autocast: torch.dtype | None
    grad_scaler: bool
    precision: str


#: The four ways of training compared on ResNet50; strict FP32 is the fair baseline.
TRAINING_MODES: dict[str, TrainingMode] = {
    m.name: m
    for m in (
        TrainingMode("fp32-strict", False, None, False, "fp32-strict"),
        TrainingMode("tf32", True, None, False, "tf32"),
        TrainingMode("amp-fp16", False, torch.float16, True, "fp16"),
        TrainingMode("amp-bf16", False, torch.bfloat16, False, "bf16"),
    )
}


def measure_training(
    build_model: Callable[[], nn.Module],
    mode: str,
    batch: int,
    image_size: int,
    classes: int,
    device: DeviceLike = "cpu",
    steps: int = 20,
    warmup: int = 5,
    channels_last: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Time training steps of an image classifier in one mode; peak GPU memory on a GPU.

    A fresh model from ``build_model()`` (seeded) is trained with SGD and momentum on one
    synthetic batch, with ``cudnn.benchmark`` on and TF32 set by the mode; both settings are
    restored afterwards. Peak memory is ``torch.cuda.max_memory_allocated`` over the timed steps.

    Parameters
    ----------
    build_model : callable
        Returns an FP32 ``nn.Module`` taking ``(batch, 3, image_size, image_size)`` images.
    mode : str
        A key of :data:`TRAINING_MODES`.
    batch, image_size, classes : int
        The synthetic batch.
    device : str or torch.device, optional
        Where it runs (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
    steps, warmup : int, optional
        Timed and untimed steps.
    channels_last : bool, optional
        Model and input in the channels_last memory format.
    seed : int, optional
        Seeds the model and the batch.

    Returns
    -------
    dict
        ``mode, channels_last, batch, image_size, median_step_s, images_per_s,
        peak_memory_gib`` (``None`` on a CPU), ``final_loss`` and the raw ``times_s``.

    Raises
    ------
    ValueError
        For an unknown mode.
    """
    if mode not in TRAINING_MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {list(TRAINING_MODES)}")
    m = TRAINING_MODES[mode]
    dev = torch.device(device)
    cuda = is_cuda(dev)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    benchmark_before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        with tf32(m.tf32):
            torch.manual_seed(seed)
            model = build_model().to(dev, memory_format=fmt)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            scaler = torch.amp.GradScaler(dev.type, enabled=m.grad_scaler)
            gen = torch.Generator().manual_seed(seed)
            images = torch.randn(batch, 3, image_size, image_size, generator=gen)
            images = images.to(dev).contiguous(memory_format=fmt)
            labels = torch.randint(0, classes, (batch,), generator=gen).to(dev)
            losses = []

            def step() -> None:
                context = (
                    torch.autocast(dev.type, dtype=m.autocast)
                    if m.autocast is not None
                    else contextlib.nullcontext()
                )
                with context:
                    loss = nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                losses.append(loss.detach())

            for _ in range(warmup):
                step()
            synchronize(dev)
            if cuda:
                torch.cuda.reset_peak_memory_stats(dev)
            timing = bench.time_fn(step, repeats=steps, warmup=0, device=str(dev))
            peak = torch.cuda.max_memory_allocated(dev) / 2**30 if cuda else None
            final_loss = float(losses[-1])
    finally:
        torch.backends.cudnn.benchmark = benchmark_before
    return {
        "mode": mode,
        "channels_last": channels_last,
        "batch": batch,
        "image_size": image_size,
        "median_step_s": timing.median,
        "images_per_s": batch / timing.median,
        "peak_memory_gib": peak,
        "final_loss": final_loss,
        "times_s": list(timing.times),
    }


_LAYOUTS = {"NCHW": torch.contiguous_format, "channels_last": torch.channels_last}


def conv_step_times(
    batch: int,
    channels: int,
    sides: Sequence[int],
    dtype: torch.dtype = torch.float32,
    autotune: bool = False,
    layouts: Sequence[str] = ("NCHW", "channels_last"),
    device: DeviceLike = "cpu",
    repeats: int = 10,
    fresh_process: bool = True,
) -> list[dict[str, Any]]:
    """Time a 3x3 convolution's forward and backward pass: its first call, then the median.

    For each image side and memory layout, a ``Conv2d(channels, channels, 3, padding=1)``
    (seeded) runs a training step on a random batch: gradients cleared, forward, backward
    (:func:`mptutor.bench.time_fn`, the device synchronised after each call). The first call is
    timed alone, so it includes what a new combination of shapes pays once (with
    ``cudnn.benchmark`` on, the search for the fastest algorithm). A convolution of a batch of one
    runs first in each layout, so no row pays for loading the library.

    cuDNN keeps the plan it chose for each combination of shapes, dtype and layout for the rest
    of the process, and its cache does not key on ``cudnn.benchmark``: a shape already run with
    the flag off would reuse the untuned plan with it on. So by default the passes run in a
    fresh Python process each (with this process's thread count), which sees no earlier shape.

    Parameters
    ----------
    batch, channels : int
        The batch size and the channels in and out.
    sides : sequence of int
        Image sides, each timed in turn (a new shape each).
    dtype : torch.dtype, optional
        The dtype of the layer and the batch.
    autotune : bool, optional
        The value of ``torch.backends.cudnn.benchmark`` while it runs.
    layouts : sequence of str, optional
        ``"NCHW"`` and/or ``"channels_last"``.
    device : str or torch.device, optional
        Where it runs.
    repeats : int, optional
        Timed calls after the first (plus two untimed ones).
    fresh_process : bool, optional
        Run in a new Python process.

    Returns
    -------
    list of dict
        ``image side, layout, cudnn.benchmark, first call ms, median ms``, in the order run.

    Raises
    ------
    ValueError
        For an unknown layout.
    RuntimeError
        If the fresh process fails (its error output is in the message).
    """
    unknown = [name for name in layouts if name not in _LAYOUTS]
    if unknown:
        raise ValueError(f"unknown layouts {unknown}; choose from {list(_LAYOUTS)}")
    args = {
        "batch": batch,
        "channels": channels,
        "sides": list(sides),
        "dtype": str(dtype).removeprefix("torch."),
        "autotune": autotune,
        "layouts": list(layouts),
        "device": str(device),
        "repeats": repeats,
    }
    if not fresh_process:
        return _conv_steps(**args)
    code = (
        "import json, sys, torch\n"
        f"torch.set_num_threads({torch.get_num_threads()})\n"
        "from mptutor.torch_perf._training import _conv_steps\n"
        "print(json.dumps(_conv_steps(**json.loads(sys.stdin.read()))))\n"
    )
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds mptutor
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(args), capture_output=True, text=True,
        env=env,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the convolution timing process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _conv_steps(
    batch: int,
    channels: int,
    sides: list[int],
    dtype: str,
    autotune: bool,
    layouts: list[str],
    device: str,
    repeats: int,
) -> list[dict[str, Any]]:
    """Run :func:`conv_step_times` in this process."""
    torch_dtype = getattr(torch, dtype)
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = autotune
    try:
        for name in layouts:  # load the library and its kernels once, at a shape no row uses
            fmt = _LAYOUTS[name]
            warm = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            warm = warm.to(device, torch_dtype, memory_format=fmt)
            x = torch.randn(1, channels, max(sides) + 1, max(sides) + 1, device=device)
            x = x.to(torch_dtype).contiguous(memory_format=fmt).requires_grad_()
            out = warm(x)
            out.backward(torch.randn_like(out))
        synchronize(device)
        rows = []
        for side in sides:
            for name in layouts:
                fmt = _LAYOUTS[name]
                torch.manual_seed(0)
                conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
                conv = conv.to(device, torch_dtype, memory_format=fmt)
                images = torch.randn(batch, channels, side, side, device=device, dtype=torch_dtype)
                images = images.contiguous(memory_format=fmt).requires_grad_()
                grad_out = torch.randn_like(images)  # the output has the input's shape here

                def step(conv=conv, images=images, grad_out=grad_out) -> None:
                    conv.weight.grad = None  # a training step starts from cleared gradients
                    images.grad = None
                    conv(images).backward(grad_out)

                first = bench.time_fn(step, repeats=1, warmup=0, device=device).median
                steady = bench.time_fn(step, repeats=repeats, warmup=2, device=device).median
                rows.append(
                    {
                        "image side": side,
                        "layout": name,
                        "cudnn.benchmark": autotune,
                        "first call ms": first * 1e3,
                        "median ms": steady * 1e3,
                    }
                )
    finally:
        torch.backends.cudnn.benchmark = before
    return rows


def stride_mismatches(tensors: Sequence[torch.Tensor], others: Sequence[torch.Tensor]) -> list[int]:
    """Positions where two lists of same-shaped tensors differ in strides (memory layout).

    A model's FP16 parameters and their FP32 master copies must share a layout (both
    channels_last, or both contiguous): fused copies between them (``torch._foreach_copy_``)
    take a slower path when the strides differ.

    Parameters
    ----------
    tensors, others : sequence of torch.Tensor
        Paired tensors, e.g. ``opt.model_params`` and ``opt.master_params`` of a
        :class:`mptutor.torch.MasterWeightOptimizer`.

    Returns
    -------
    list of int
        Indices of the pairs whose strides differ (empty when all match).

    Raises
    ------
    ValueError
        If the lists differ in length or a pair differs in shape.
    """
    if len(tensors) != len(others):
        raise ValueError(f"{len(tensors)} tensors against {len(others)}")
    bad = []
    for i, (a, b) in enumerate(zip(tensors, others, strict=True)):
        if a.shape != b.shape:
            raise ValueError(f"pair {i} differs in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
        if a.stride() != b.stride():
            bad.append(i)
    return bad
