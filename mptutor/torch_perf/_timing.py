"""Measuring correctly: the TF32 switch, and back-to-back calls per sample (CUDA graphs, events).

TF32 is switched through PyTorch's ``fp32_precision`` settings (PyTorch 2.9 and later), else
the older ``allow_tf32`` flags; the two are never mixed. A small GPU product takes less time
than its launch: :func:`time_calls` times many calls per sample, from a CUDA graph on a GPU.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mptutor._checks import check_scalar
from mptutor.bench import Timing

_MAX_INNER = 10_000  # most calls in one timed sample


def _is_cuda(device: str | torch.device) -> bool:
    """Whether a device names a CUDA GPU (``"cuda"``, ``"cuda:1"``, ``torch.device``)."""
    return torch.device(device).type == "cuda"


def _tf32_switches() -> tuple[str, Any, Any]:
    """Return the TF32 setting's name and the objects carrying it (cuBLAS, cuDNN convolutions)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(torch.backends.cuda.matmul, "fp32_precision") and hasattr(conv, "fp32_precision"):
        return "fp32_precision", torch.backends.cuda.matmul, conv
    return "allow_tf32", torch.backends.cuda.matmul, torch.backends.cudnn  # before PyTorch 2.9


def tf32_settings() -> dict[str, Any]:
    """PyTorch's current TF32 settings for FP32 matrix products and cuDNN convolutions.

    Returns
    -------
    dict
        ``api``: ``"fp32_precision"`` or ``"allow_tf32"``; ``matmul`` and ``cudnn_conv``: the
        settings as PyTorch's getters report them (``"ieee"``, ``"tf32"`` or ``"none"``; a
        ``"none"`` that a setting above it resolves, such as ``torch.backends.fp32_precision``,
        reads as that setting's value; booleans with the second).
    """
    api, matmul, conv = _tf32_switches()
    return {"api": api, "matmul": getattr(matmul, api), "cudnn_conv": getattr(conv, api)}


def _set_tf32(matmul: Any, conv: Any = None) -> dict[str, Any]:
    """Set TF32 for products and convolutions (bools or raw values); return the old settings."""
    before = tf32_settings()
    api, *switches = _tf32_switches()
    raw = {True: "tf32", False: "ieee"} if api == "fp32_precision" else {}
    for switch, value in zip(switches, (matmul, matmul if conv is None else conv), strict=True):
        setattr(switch, api, raw.get(value, value))
    return before


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """Allow TF32 for FP32 matrix products and cuDNN convolutions, or forbid it (strict FP32).

    Inside the ``with`` block ``torch.backends.cuda.matmul`` and ``torch.backends.cudnn.conv``
    take ``fp32_precision`` ``"tf32"`` or ``"ieee"`` (or the older ``allow_tf32`` flags); the
    previous settings, as :func:`tf32_settings` reads them, are written back on exit, so one that
    was inherited from a setting above it keeps that value afterwards. No CPU computation
    changes: TF32 is a GPU format.

    Parameters
    ----------
    enabled : bool
        ``True`` for TF32 Tensor Core math, ``False`` for strict (IEEE) FP32.

    Examples
    --------
    >>> with tf32(False):
    ...     tf32_settings()["matmul"] in ("ieee", False)
    True
    """
    before = _set_tf32(bool(enabled))
    try:
        yield
    finally:
        _set_tf32(before["matmul"], before["cudnn_conv"])


def time_calls(
    fn: Callable[[], Any], device: str | torch.device = "cpu", repeats: int = 10, warmup: int = 3,
    min_sample_s: float | None = None, graph: bool = True,
) -> Timing:  # fmt: skip
    """Time ``fn`` called back to back, so that each sample takes at least ``min_sample_s``.

    The calls per sample (``inner``) grow until a sample takes ``min_sample_s`` (at most
    10,000). On a CUDA device the calls are captured into a CUDA graph and each sample is one
    replay, timed with CUDA events (the GPU work, not the launches); if the capture fails, or
    ``graph=False``, launched from the host. On a CPU, ``time.perf_counter``.

    Parameters
    ----------
    fn : callable
        Called with no arguments; its result is dropped.
    device : str or torch.device, optional
    repeats : int, optional
        Timed samples (at least 1).
    warmup : int, optional
        Untimed calls first (library loading, kernel selection, allocator).
    min_sample_s : float, optional
        Shortest sample wanted: 10 ms on a GPU, 20 ms on a CPU by default.
    graph : bool, optional
        Capture a CUDA graph on a GPU.

    Returns
    -------
    mptutor.bench.Timing
        With ``inner``, the ``method`` used and, after a fallback, a ``note`` saying why.

    Raises
    ------
    TypeError, ValueError
        If ``repeats`` (at least 1) or ``warmup`` (at least 0) is not such an integer, or
        ``min_sample_s`` is not a number of at least 0.
    """
    repeats = check_scalar(repeats, "repeats", int, min_val=1)
    warmup = check_scalar(warmup, "warmup", int, min_val=0)
    min_sample_s = check_scalar(min_sample_s, "min_sample_s", min_val=0, allow_none=True)
    cuda = _is_cuda(device)
    if min_sample_s is None:
        min_sample_s = 0.01 if cuda else 0.02

    def run(build: Callable[[int], Callable], clock: Callable, method: str, note="") -> Timing:
        inner = 1
        calls = build(inner)
        sample = clock(calls)
        while sample < min_sample_s and inner < _MAX_INNER:
            grow = min_sample_s / max(sample, 1e-9) * 1.2
            inner = min(_MAX_INNER, max(2 * inner, math.ceil(inner * grow)))
            calls = None  # let a previous CUDA graph go before the next one is captured
            calls = build(inner)
            sample = clock(calls)
        times = tuple(clock(calls) / inner for _ in range(repeats))
        return Timing(times, warmup, inner, method, note)

    if not cuda:
        for _ in range(warmup):
            fn()
        return run(lambda inner: _loop(fn, inner), _wall_seconds, "wall-clock")
    with torch.cuda.device(torch.device(device)):
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
                return run(lambda inner: _graph(fn, inner), _event_seconds, "cuda-graph")
            except RuntimeError as err:  # an operation that cannot be captured
                torch.cuda.synchronize()
                note = f"CUDA graph capture failed ({str(err).splitlines()[0]})"
        return run(lambda inner: _loop(fn, inner), _event_seconds, "cuda-events", note)


def _loop(fn: Callable[[], Any], inner: int) -> Callable[[], None]:
    """Return a function that calls ``fn`` ``inner`` times, dropping each result at once."""

    def calls() -> None:
        for _ in range(inner):
            fn()

    return calls


def _graph(fn: Callable[[], Any], inner: int) -> Callable[[], None]:
    """Capture ``inner`` calls into a CUDA graph, replay it once; return its replay."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()  # the first replay uploads the graph: not timed
    torch.cuda.synchronize()
    return g.replay  # the bound method keeps the graph (and its memory pool) alive


def _event_seconds(calls: Callable[[], Any]) -> float:
    """Time ``calls()`` on the current CUDA stream with CUDA events."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    calls()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _wall_seconds(calls: Callable[[], Any]) -> float:
    """Time ``calls()`` with ``time.perf_counter``."""
    start = time.perf_counter()
    calls()
    return time.perf_counter() - start
