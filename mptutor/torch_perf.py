"""PyTorch performance helpers: TF32 switches, GEMMs by precision, timing, training steps.

One home for the code that the benchmarks (``benchmarks/gemm_sweep.py``,
``benchmarks/resnet50_amp.py``, ``benchmarks/scaler_overhead.py``) and the Tensor Core notebook
share. This module imports PyTorch (``import mptutor`` does not)::

    from mptutor import torch_perf as tp

- TF32: :func:`set_tf32` and the context manager :func:`tf32` switch TF32 for FP32 matrix
  products and cuDNN convolutions together, through PyTorch's ``fp32_precision`` settings where
  they exist (PyTorch 2.9 and later) and the older ``allow_tf32`` flags only where they do not.
- GEMMs: :data:`PRECISIONS`, :func:`why_not`, :func:`make_product`, :func:`measure_gemm` and
  :func:`gemm_sweep` build and time ``A @ B`` in strict FP32, TF32, FP16, BF16 and FP8 E4M3.
- Timing: :func:`time_calls` times back-to-back calls. On a GPU each sample replays a CUDA graph
  of enough calls to take at least a few milliseconds and is timed with CUDA events, so that a
  small product is not measured by the rate at which the host launches kernels.
- Training: :data:`TRAINING_MODES` and :func:`measure_training` time one training step in
  strict FP32, TF32, AMP FP16 (with ``torch.amp.GradScaler``) and AMP BF16.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mptutor import bench

__all__ = [
    "DeviceLike",
    "is_cuda",
    "synchronize",
    "tf32_settings",
    "set_tf32",
    "tf32",
    "Precision",
    "PRECISIONS",
    "gemm_flops",
    "why_not",
    "make_product",
    "CallTiming",
    "time_calls",
    "measure_gemm",
    "gemm_sweep",
    "TrainingMode",
    "TRAINING_MODES",
    "measure_training",
    "stride_mismatches",
    "default_device",
    "save_record",
]

DeviceLike = str | torch.device


def is_cuda(device: DeviceLike) -> bool:
    """Whether a device names a CUDA GPU (``"cuda"``, ``"cuda:0"``, ``torch.device("cuda", 1)``).

    Parameters
    ----------
    device : str or torch.device
        The device.

    Returns
    -------
    bool
        ``True`` for a CUDA device, with or without an index.
    """
    return torch.device(device).type == "cuda"


def synchronize(device: DeviceLike) -> None:
    """Wait for the work queued on a CUDA device; nothing to wait for on a CPU.

    Parameters
    ----------
    device : str or torch.device
        The device.
    """
    if is_cuda(device):
        torch.cuda.synchronize(torch.device(device))


# --- TF32 -------------------------------------------------------------------------------------


def _new_tf32_api() -> tuple[Any, Any] | None:
    """Return the objects carrying ``fp32_precision`` (cuBLAS, cuDNN convolutions), if any."""
    matmul = torch.backends.cuda.matmul
    conv = getattr(torch.backends.cudnn, "conv", None)
    try:
        matmul.fp32_precision  # noqa: B018 - probing the attribute
        conv.fp32_precision  # noqa: B018
    except AttributeError:
        return None
    return matmul, conv


def tf32_settings() -> dict[str, Any]:
    """PyTorch's current TF32 settings for FP32 matrix products and cuDNN convolutions.

    Returns
    -------
    dict
        ``api``: ``"fp32_precision"`` (PyTorch 2.9 and later) or ``"allow_tf32"`` (older);
        ``matmul`` and ``cudnn_conv``: the raw settings, ``"ieee"``, ``"tf32"`` or ``"none"``
        (inherit the global setting) with the first API, booleans with the second.
    """
    new = _new_tf32_api()
    if new is not None:
        matmul, conv = new
        return {
            "api": "fp32_precision",
            "matmul": matmul.fp32_precision,
            "cudnn_conv": conv.fp32_precision,
        }
    return {
        "api": "allow_tf32",
        "matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_conv": bool(torch.backends.cudnn.allow_tf32),
    }


def _restore_tf32(settings: dict[str, Any]) -> None:
    new = _new_tf32_api()
    if settings["api"] == "fp32_precision" and new is not None:
        new[0].fp32_precision = settings["matmul"]
        new[1].fp32_precision = settings["cudnn_conv"]
    else:
        torch.backends.cuda.matmul.allow_tf32 = bool(settings["matmul"])
        torch.backends.cudnn.allow_tf32 = bool(settings["cudnn_conv"])


def set_tf32(enabled: bool) -> dict[str, Any]:
    """Allow TF32 for FP32 matrix products and cuDNN convolutions, or forbid it (strict FP32).

    Uses ``torch.backends.cuda.matmul.fp32_precision`` and
    ``torch.backends.cudnn.conv.fp32_precision`` (``"tf32"`` or ``"ieee"``) where this PyTorch
    has them, so no deprecation warning is raised; the older ``allow_tf32`` flags only where it
    does not. The two APIs are never mixed. It changes nothing on a CPU: TF32 is a GPU format.

    Parameters
    ----------
    enabled : bool
        ``True`` for TF32 Tensor Core math, ``False`` for IEEE FP32.

    Returns
    -------
    dict
        The settings before the change (as :func:`tf32_settings` gives them).
    """
    before = tf32_settings()
    new = _new_tf32_api()
    if new is not None:
        mode = "tf32" if enabled else "ieee"
        new[0].fp32_precision = mode
        new[1].fp32_precision = mode
    else:  # PyTorch older than the fp32_precision settings
        torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
        torch.backends.cudnn.allow_tf32 = bool(enabled)
    return before


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """Context manager: :func:`set_tf32` inside, the previous settings restored on exit.

    Parameters
    ----------
    enabled : bool
        ``True`` for TF32, ``False`` for strict (IEEE) FP32.

    Examples
    --------
    >>> with tf32(False):
    ...     tf32_settings()["matmul"] in ("ieee", False)
    True
    """
    before = set_tf32(enabled)
    try:
        yield
    finally:
        _restore_tf32(before)


# --- GEMM products ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Precision:
    """A way to run ``C = A @ B`` and what it needs.

    Attributes
    ----------
    name : str
        ``"fp32-strict"``, ``"tf32"``, ``"fp16"``, ``"bf16"`` or ``"fp8-e4m3"``.
    dtype : torch.dtype
        The dtype of the inputs.
    tf32 : bool
        Whether TF32 is allowed while it runs (FP32 inputs on Tensor Cores).
    tensor_cores_from : tuple of int or None
        Compute capability from which Tensor Cores take it; ``None`` for strict FP32, which
        runs on the ordinary FP32 units by design.
    needs_capability : tuple of int or None
        Compute capability without which it is not measured on a GPU (TF32 and BF16 from
        Ampere, FP8 from Ada/Hopper); ``None`` when any CUDA GPU runs it.
    on_cpu : bool
        Whether it is measured on a CPU (TF32 and FP8 are measured on GPUs only).
    multiple_of : int
        Every dimension must be a multiple of this (16 for FP8 products).
    """

    name: str
    dtype: torch.dtype
    tf32: bool
    tensor_cores_from: tuple[int, int] | None
    needs_capability: tuple[int, int] | None
    on_cpu: bool
    multiple_of: int = 1


#: The precisions of the GEMM sweep, in the order they are shown.
PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32-strict", torch.float32, False, None, None, True),
        Precision("tf32", torch.float32, True, (8, 0), (8, 0), False),
        Precision("fp16", torch.float16, False, (7, 0), None, True),
        Precision("bf16", torch.bfloat16, False, (8, 0), (8, 0), True),
        Precision("fp8-e4m3", torch.float8_e4m3fn, False, (8, 9), (8, 9), False, 16),
    )
}


def gemm_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of ``(m, k) @ (k, n)``: ``2*m*n*k`` (a multiply and an add).

    Parameters
    ----------
    m, n, k : int
        The dimensions.

    Returns
    -------
    int
        The operation count.
    """
    return 2 * m * n * k


def _precision(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ValueError(f"unknown precision {name!r}; choose one of {list(PRECISIONS)}") from None


def why_not(precision: str, device: DeviceLike, shape: Sequence[int] = ()) -> str | None:
    """Say why a precision is not measured on this device (and shape), or ``None`` if it is.

    Parameters
    ----------
    precision : str
        A key of :data:`PRECISIONS`.
    device : str or torch.device
        Where it would run.
    shape : sequence of int, optional
        The product's dimensions ``(m, n, k)``, checked against ``multiple_of``.

    Returns
    -------
    str or None
        The reason, or ``None`` when it can be measured.

    Raises
    ------
    ValueError
        For an unknown precision.
    """
    p = _precision(precision)
    if not is_cuda(device):
        return None if p.on_cpu else f"{p.name} is measured on CUDA GPUs only"
    major, minor = torch.cuda.get_device_capability(torch.device(device))
    if p.needs_capability is not None and (major, minor) < p.needs_capability:
        need = "{}.{}".format(*p.needs_capability)
        return f"{p.name} needs compute capability {need}, this GPU has {major}.{minor}"
    if p.name == "fp8-e4m3" and not hasattr(torch, "_scaled_mm"):
        return "this PyTorch has no torch._scaled_mm"
    if p.multiple_of > 1 and any(d % p.multiple_of for d in shape):
        return f"{p.name} products need dimensions divisible by {p.multiple_of}"
    return None


def make_product(
    precision: str, m: int, n: int, k: int, device: DeviceLike = "cpu", seed: int = 0
) -> Callable[[], torch.Tensor]:
    """Return a function that computes one product ``A @ B`` of the given precision and shape.

    The inputs are drawn once (standard normal, seeded) and converted to the precision's dtype.
    FP32 and TF32 share the same product: TF32 is a setting (:func:`tf32`) that must be on while
    the product runs (or is captured into a CUDA graph). FP8 E4M3 runs through
    ``torch._scaled_mm`` with ``A`` row-major, ``B`` column-major (as the FP8 kernels require),
    per-tensor scales of 1 and a BF16 result.

    Parameters
    ----------
    precision : str
        A key of :data:`PRECISIONS`.
    m, n, k : int
        ``A`` is ``(m, k)``, ``B`` is ``(k, n)``.
    device : str or torch.device, optional
        Where the inputs live.
    seed : int, optional
        Seed of the inputs.

    Returns
    -------
    callable
        Called with no arguments, returns ``C``.
    """
    p = _precision(precision)
    gen = torch.Generator(device=torch.device(device)).manual_seed(seed)
    a = torch.randn(m, k, device=device, generator=gen)
    b = torch.randn(k, n, device=device, generator=gen)
    if p.dtype == torch.float32:
        return lambda: a @ b
    if p.name != "fp8-e4m3":
        a_low, b_low = a.to(p.dtype), b.to(p.dtype)
        return lambda: a_low @ b_low
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


# --- timing -----------------------------------------------------------------------------------

#: How each timing method works, for the records and the notebook.
TIMING_METHODS = {
    "cuda-graph": "each sample replays a CUDA graph of `inner` back-to-back calls, timed with "
    "CUDA events; time per call = sample time / inner",
    "cuda-events": "each sample runs `inner` back-to-back calls from the host, timed with CUDA "
    "events (used when graph capture is turned off or fails); time per call = sample / inner",
    "wall-clock": "each sample runs `inner` back-to-back calls, timed with time.perf_counter; "
    "time per call = sample time / inner",
}


@dataclass(frozen=True)
class CallTiming:
    """Timings of a function called back to back.

    Attributes
    ----------
    times_s : tuple of float
        Seconds per call, one value per sample (the sample's time divided by ``inner``).
    inner : int
        Calls per sample.
    method : str
        A key of :data:`TIMING_METHODS`.
    note : str
        Why a fallback was taken, if one was.
    """

    times_s: tuple[float, ...]
    inner: int
    method: str
    note: str = ""

    @property
    def median_s(self) -> float:
        """Median seconds per call."""
        return statistics.median(self.times_s)

    @property
    def sample_s(self) -> float:
        """Median seconds per sample (``inner`` calls)."""
        return self.median_s * self.inner

    def as_dict(self) -> dict[str, Any]:
        """Return the timing for a JSON record."""
        out = {
            "method": self.method,
            "inner": self.inner,
            "median_s": self.median_s,
            "times_s": list(self.times_s),
        }
        if self.note:
            out["note"] = self.note
        return out


def _loop(fn: Callable[[], Any], inner: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(inner):
            fn()  # each result is dropped at once, so memory does not grow with inner

    return run


def _event_seconds(run: Callable[[], Any]) -> float:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _wall_seconds(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def time_calls(
    fn: Callable[[], Any],
    device: DeviceLike = "cpu",
    repeats: int = 10,
    warmup: int = 3,
    min_sample_s: float | None = None,
    max_inner: int = 10_000,
    graph: bool = True,
) -> CallTiming:
    """Time ``fn`` called back to back, so that each sample takes at least ``min_sample_s``.

    The number of calls per sample (``inner``) is calibrated first: it grows until one sample
    takes ``min_sample_s`` or ``max_inner`` is reached. On a CUDA device the calls are captured
    into a CUDA graph (``torch.cuda.CUDAGraph``) and each sample is one replay, timed with CUDA
    events: the time covers the GPU work only, not the host launching one kernel after another.
    If the capture fails, or ``graph=False``, the calls are launched from the host and timed with
    CUDA events. On a CPU, each sample is timed with ``time.perf_counter``.

    Parameters
    ----------
    fn : callable
        Called with no arguments; its result is dropped.
    device : str or torch.device, optional
        Where ``fn`` runs.
    repeats : int, optional
        Timed samples (at least 1).
    warmup : int, optional
        Untimed calls first (library loading, kernel selection, allocator).
    min_sample_s : float, optional
        Shortest sample wanted: 10 ms on a GPU, 20 ms on a CPU by default.
    max_inner : int, optional
        Most calls per sample.
    graph : bool, optional
        Capture a CUDA graph on a GPU.

    Returns
    -------
    CallTiming
        Seconds per call for each sample, ``inner`` and the method used.

    Raises
    ------
    ValueError
        If ``repeats < 1``, ``warmup < 0``, ``max_inner < 1`` or ``min_sample_s < 0``.
    """
    if repeats < 1 or warmup < 0 or max_inner < 1:
        raise ValueError(
            f"need repeats >= 1, warmup >= 0, max_inner >= 1, got {repeats=}, "
            f"{warmup=}, {max_inner=}"
        )
    cuda = is_cuda(device)
    if min_sample_s is None:
        min_sample_s = 0.01 if cuda else 0.02
    if min_sample_s < 0:
        raise ValueError(f"min_sample_s must be >= 0, got {min_sample_s}")
    if not cuda:
        for _ in range(warmup):
            fn()
        return _calibrate_and_time(
            lambda inner: _loop(fn, inner),
            _wall_seconds,
            repeats,
            min_sample_s,
            max_inner,
            "wall-clock",
        )
    dev = torch.device(device)
    with torch.cuda.device(dev):
        # warm up on a side stream, as CUDA graph capture asks (lazy initialisation, workspaces)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(warmup, 1)):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        note = "graph capture turned off"
        if graph:
            try:
                return _calibrate_and_time(
                    lambda inner: _graph_runner(fn, inner),
                    _event_seconds,
                    repeats,
                    min_sample_s,
                    max_inner,
                    "cuda-graph",
                )
            except RuntimeError as err:  # an operation that cannot be captured
                torch.cuda.synchronize()
                note = f"CUDA graph capture failed ({str(err).splitlines()[0]})"
        timing = _calibrate_and_time(
            lambda inner: _loop(fn, inner),
            _event_seconds,
            repeats,
            min_sample_s,
            max_inner,
            "cuda-events",
        )
        return CallTiming(timing.times_s, timing.inner, timing.method, note)


def _graph_runner(fn: Callable[[], Any], inner: int) -> Callable[[], None]:
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()  # the first replay uploads the graph: not timed
    torch.cuda.synchronize()
    return g.replay  # the bound method keeps the graph (and its memory pool) alive


def _calibrate_and_time(
    build: Callable[[int], Callable[[], Any]],
    clock: Callable[[Callable[[], Any]], float],
    repeats: int,
    min_sample_s: float,
    max_inner: int,
    method: str,
) -> CallTiming:
    inner = 1
    run = build(inner)
    sample = clock(run)
    while sample < min_sample_s and inner < max_inner:
        grow = min_sample_s / max(sample, 1e-9) * 1.2
        inner = min(max_inner, max(2 * inner, math.ceil(inner * grow)))
        run = None  # let a previous CUDA graph go before the next one is captured
        run = build(inner)
        sample = clock(run)
    times = tuple(clock(run) / inner for _ in range(repeats))
    return CallTiming(times, inner, method)


def measure_gemm(
    precision: str,
    m: int,
    n: int,
    k: int,
    device: DeviceLike = "cpu",
    repeats: int = 10,
    min_sample_s: float | None = None,
    graph: bool = True,
) -> dict[str, Any]:
    """Time one product shape in one precision; a row of a GEMM sweep.

    TF32 is switched on for ``"tf32"`` and off for every other precision while the product is
    built, warmed up, captured and timed (:func:`tf32`), then restored.

    Parameters
    ----------
    precision : str
        A key of :data:`PRECISIONS`.
    m, n, k : int
        The product's dimensions.
    device : str or torch.device, optional
        Where it runs.
    repeats : int, optional
        Timed samples.
    min_sample_s : float, optional
        Shortest sample (see :func:`time_calls`).
    graph : bool, optional
        Use a CUDA graph on a GPU.

    Returns
    -------
    dict
        ``precision, m, n, k`` and either ``skipped`` (the reason) or ``seconds`` (median per
        product), ``tflops``, ``timing`` (method, calls per sample, raw times).
    """
    p = _precision(precision)
    row: dict[str, Any] = {"precision": precision, "m": m, "n": n, "k": k}
    reason = why_not(precision, device, (m, n, k))
    if reason is not None:
        return {**row, "skipped": reason}
    with tf32(p.tf32):
        product = make_product(precision, m, n, k, device)
        try:
            timing = time_calls(
                product, device, repeats=repeats, min_sample_s=min_sample_s, graph=graph
            )
        except RuntimeError as err:  # torch._scaled_mm is a private API and may refuse
            if p.name != "fp8-e4m3":
                raise
            return {**row, "skipped": f"torch._scaled_mm failed: {str(err).splitlines()[0]}"}
    seconds = timing.median_s
    return {
        **row,
        "seconds": seconds,
        "tflops": gemm_flops(m, n, k) / seconds / 1e12,
        "timing": timing.as_dict(),
    }


def gemm_sweep(
    sizes: Sequence[int],
    device: DeviceLike = "cpu",
    precisions: Sequence[str] | None = None,
    repeats: int = 10,
    min_sample_s: float | None = None,
    graph: bool = True,
) -> list[dict[str, Any]]:
    """Square products ``n x n x n`` for each size and the size minus one, in each precision.

    Each size ``n`` is measured next to ``n - 1``: when ``n`` is a multiple of 8, the pair
    shows what alignment is worth.

    Parameters
    ----------
    sizes : sequence of int
        The sizes ``n`` (each at least 2).
    device : str or torch.device, optional
        Where the products run.
    precisions : sequence of str, optional
        Keys of :data:`PRECISIONS` (default: all).
    repeats, min_sample_s, graph
        As in :func:`measure_gemm`.

    Returns
    -------
    list of dict
        One row per size and precision (:func:`measure_gemm`).
    """
    rows = []
    for size in sizes:
        for n in (size, size - 1):
            for precision in precisions or list(PRECISIONS):
                rows.append(measure_gemm(precision, n, n, n, device, repeats, min_sample_s, graph))
                if is_cuda(device):
                    torch.cuda.empty_cache()
    return rows


# --- training steps ---------------------------------------------------------------------------


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


# --- benchmark records ------------------------------------------------------------------------


def default_device() -> str:
    """``"cuda"`` when PyTorch sees a CUDA GPU, else ``"cpu"``: the benchmarks' default."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def save_record(
    benchmark: str,
    device: DeviceLike,
    data: dict[str, Any],
    smoke: bool = False,
    out_dir: str | os.PathLike[str] | None = None,
    suffix: str = "",
) -> Path:
    """Save a benchmark's measurement with its provenance (:func:`mptutor.bench.save_result`).

    The record is named ``<benchmark>-<device type>[-<GPU name>][-<suffix>]``, or
    ``<benchmark>-smoke-<device type>[-<suffix>]`` for a smoke run, so that a smoke run never
    passes for a measurement. The data gains ``device``, ``smoke``, the PyTorch and cuDNN
    versions and, on a GPU, the device's name. A smoke run without ``out_dir`` goes to a new
    temporary folder, never to ``data/results``.

    Parameters
    ----------
    benchmark : str
        The benchmark's name, e.g. ``"gemm_sweep"``.
    device : str or torch.device
        The device it measured.
    data : dict
        The measurement, raw timings included.
    smoke : bool, optional
        Whether this was a tiny run that checks the code path only.
    out_dir : path-like, optional
        The folder (default: ``data/results`` of the checkout).
    suffix : str, optional
        Appended to the name (e.g. the model).

    Returns
    -------
    pathlib.Path
        The file written.
    """
    dev = torch.device(device)
    parts = [benchmark, "smoke", dev.type] if smoke else [benchmark, dev.type]
    extra: dict[str, Any] = {
        "device": str(dev),
        "smoke": smoke,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
    }
    if is_cuda(dev):
        extra["gpu"] = torch.cuda.get_device_name(dev)
        if not smoke:
            parts.append(extra["gpu"])
    if suffix:
        parts.append(suffix)
    name = "-".join("".join(c if c.isalnum() or c == "_" else "_" for c in part) for part in parts)
    if smoke and out_dir is None:
        out_dir = tempfile.mkdtemp(prefix="mptutor-smoke-")
    return bench.save_result(name, {**extra, **data}, out_dir=out_dir)
