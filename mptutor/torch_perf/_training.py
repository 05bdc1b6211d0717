"""Training steps timed in strict FP32, TF32, AMP FP16 and AMP BF16; a convolution's first call."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mptutor import bench, formats
from mptutor.torch_perf._gemm import _why_not
from mptutor.torch_perf._timing import _is_cuda, tf32

#: The training modes (keys of :data:`mptutor.formats.PRECISIONS`): TF32 allowed, the autocast
#: dtype (``None``: no autocast), a ``GradScaler``, and the product precision the mode needs.
_MODES: dict[str, tuple[bool, torch.dtype | None, bool, str]] = {
    "fp32": (False, None, False, "fp32"),
    "tf32": (True, None, False, "tf32"),
    "amp_fp16": (False, torch.float16, True, "fp16"),
    "amp_bf16": (False, torch.bfloat16, False, "bf16"),
}


def measure_training(
    build_model: Callable[[], nn.Module], mode: str, batch: int, image_size: int, classes: int,
    device: str | torch.device = "cpu", steps: int = 20, warmup: int = 5, channels_last: bool =
    False,
) -> dict[str, Any]:  # fmt: skip
    """Time training steps of an image classifier in one mode; peak GPU memory on a GPU.

    A fresh model (seed 0) is trained with SGD and momentum on one synthetic batch, with
    ``cudnn.benchmark`` on and TF32 set by the mode (both restored afterwards).

    Parameters
    ----------
    build_model : callable
        Returns an FP32 ``nn.Module`` taking ``(batch, 3, image_size, image_size)`` images.
    mode : str
        ``"fp32"`` (strict), ``"tf32"``, ``"amp_fp16"`` (autocast and ``GradScaler``) or
        ``"amp_bf16"`` (autocast, no scaler), as :func:`mptutor.formats.precision` reads it.
    batch, image_size, classes : int
        The synthetic batch.
    device : str or torch.device, optional
    steps, warmup : int, optional
        Timed and untimed steps.
    channels_last : bool, optional
        Model and input in the channels_last memory format.

    Returns
    -------
    dict
        ``mode, channels_last, batch, image_size`` and either ``skipped`` (why not timed here:
        TF32 on a CPU, a GPU too old) or ``median_step_s, images_per_s, peak_memory_gib``
        (``max_memory_allocated``; ``None`` on a CPU), ``final_loss`` and the raw ``times_s``.

    Raises
    ------
    ValueError
        For a mode that is not one of the four above.
    """
    name = formats.precision(mode)
    if name not in _MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {list(_MODES)}")
    allow_tf32, autocast, grad_scaler, product = _MODES[name]
    row = {"mode": name, "channels_last": channels_last, "batch": batch, "image_size": image_size}
    reason = _why_not(product, device)
    if reason is not None:
        return {**row, "skipped": reason}
    dev = torch.device(device)
    cuda = _is_cuda(dev)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    benchmark_before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        with tf32(allow_tf32):
            torch.manual_seed(0)
            model = build_model().to(dev, memory_format=fmt)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            scaler = torch.amp.GradScaler(dev.type, enabled=grad_scaler)
            gen = torch.Generator().manual_seed(0)
            images = torch.randn(batch, 3, image_size, image_size, generator=gen)
            images = images.to(dev).contiguous(memory_format=fmt)
            labels = torch.randint(0, classes, (batch,), generator=gen).to(dev)
            losses = []

            def step() -> None:
                with (
                    torch.autocast(dev.type, dtype=autocast)
                    if autocast is not None
                    else contextlib.nullcontext()
                ):
                    loss = nn.functional.cross_entropy(model(images), labels)
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                losses.append(loss.detach())

            for _ in range(warmup):
                step()
            if cuda:
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            timing = bench.time_fn(step, repeats=steps, warmup=0, device=str(dev))
            peak = torch.cuda.max_memory_allocated(dev) / 2**30 if cuda else None
            final_loss = float(losses[-1])
    finally:
        torch.backends.cudnn.benchmark = benchmark_before
    median = timing.median
    return {**row, "median_step_s": median, "images_per_s": batch / median, "peak_memory_gib": peak,
            "final_loss": final_loss, "times_s": list(timing.times)}  # fmt: skip


_LAYOUTS = {"NCHW": torch.contiguous_format, "channels_last": torch.channels_last}


def conv_step_times(
    batch: int, channels: int, sides: Sequence[int], dtype: torch.dtype = torch.float32, autotune:
    bool = False, layouts: Sequence[str] = ("NCHW", "channels_last"), device: str | torch.device =
    "cpu", repeats: int = 10,
) -> list[dict[str, Any]]:  # fmt: skip
    """Time a 3x3 convolution's forward and backward pass: its first call, then the median.

    For each image side and layout, a seeded ``Conv2d(channels, channels, 3, padding=1)`` takes
    training steps on a random batch. The first call pays what a new shape costs once (with
    ``cudnn.benchmark``, the algorithm search); a batch of one runs first in each layout, so no
    row pays for loading the library. cuDNN keeps its plans for the process, so the steps run in
    a fresh Python process (with this one's thread count).

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
    repeats : int, optional
        Timed calls after the first (plus two untimed ones).

    Returns
    -------
    list of dict
        ``image side, layout, cudnn.benchmark, first call ms, median ms``, in the order run.

    Raises
    ------
    ValueError, RuntimeError
        For an unknown layout, or if the fresh process fails (its error output in the message).
    """
    unknown = [name for name in layouts if name not in _LAYOUTS]
    if unknown:
        raise ValueError(f"unknown layouts {unknown}; choose from {list(_LAYOUTS)}")
    args = [batch, channels, list(sides), str(dtype).removeprefix("torch."), autotune,
            list(layouts), str(device), repeats]  # fmt: skip
    code = (
        "import json, sys, torch\n"
        f"torch.set_num_threads({torch.get_num_threads()})\n"
        "from mptutor.torch_perf._training import _conv_steps\n"
        "print(json.dumps(_conv_steps(*json.loads(sys.stdin.read()))))\n"
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
    batch: int, channels: int, sides: list[int], dtype: str, autotune: bool, layouts: list[str],
    device: str, repeats: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """Run :func:`conv_step_times` in this process."""
    dtype_ = getattr(torch, dtype)
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = autotune
    rows = []
    try:
        for name in layouts:  # load the library and its kernels once, at a shape no row uses
            warm = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            warm = warm.to(device, dtype_, memory_format=_LAYOUTS[name])
            x = torch.randn(1, channels, max(sides) + 1, max(sides) + 1, device=device)
            out = warm(x.to(dtype_).contiguous(memory_format=_LAYOUTS[name]).requires_grad_())
            out.backward(torch.randn_like(out))
        for side in sides:
            for name in layouts:
                torch.manual_seed(0)
                conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
                conv = conv.to(device, dtype_, memory_format=_LAYOUTS[name])
                images = torch.randn(batch, channels, side, side, device=device, dtype=dtype_)
                images = images.contiguous(memory_format=_LAYOUTS[name]).requires_grad_()
                grad_out = torch.randn_like(images)  # the output has the input's shape here

                def step(conv=conv, images=images, grad_out=grad_out) -> None:
                    conv.weight.grad = None  # a training step starts from cleared gradients
                    images.grad = None
                    conv(images).backward(grad_out)

                first = bench.time_fn(step, repeats=1, warmup=0, device=device).median
                steady = bench.time_fn(step, repeats=repeats, warmup=2, device=device).median
                rows.append({"image side": side, "layout": name, "cudnn.benchmark": autotune,
                             "first call ms": first * 1e3, "median ms": steady * 1e3})  # fmt: skip
    finally:
        torch.backends.cudnn.benchmark = before
    return rows
