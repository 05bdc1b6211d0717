"""Training steps timed in strict FP32, TF32, AMP FP16 and AMP BF16; master-weight layouts."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mptutor import bench
from mptutor.torch_perf._tf32 import tf32
from mptutor.torch_perf._timing import DeviceLike, is_cuda, synchronize

__all__ = ["TrainingMode", "TRAINING_MODES", "measure_training", "stride_mismatches"]


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
