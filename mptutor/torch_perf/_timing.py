"""Timing GPU and CPU work correctly: back-to-back calls per sample, CUDA graphs and events.

A small GPU product takes microseconds, less than the host needs to launch it; timing one call
at a time measures the launches. :func:`time_calls` packs enough calls into each sample, replays
them from a CUDA graph on a GPU, and times the replay with CUDA events.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from mptutor._checks import check_scalar

__all__ = ["DeviceLike", "is_cuda", "synchronize", "TIMING_METHODS", "CallTiming", "time_calls"]

#: A device as the functions here accept it: ``"cuda"``, ``"cuda:1"``, ``torch.device("cpu")``.
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
        """Return the timing for a JSON record.

        Returns
        -------
        dict
            ``method``, ``inner``, ``median_s`` and the raw ``times_s``; ``note`` when a
            fallback was taken.
        """
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
    TypeError
        If ``repeats``, ``warmup`` or ``max_inner`` is not an integer, or ``min_sample_s`` is
        not a number.
    ValueError
        If ``repeats < 1``, ``warmup < 0``, ``max_inner < 1`` or ``min_sample_s < 0``.
    """
    repeats = check_scalar(repeats, "repeats", int, min_val=1)
    warmup = check_scalar(warmup, "warmup", int, min_val=0)
    max_inner = check_scalar(max_inner, "max_inner", int, min_val=1)
    min_sample_s = check_scalar(min_sample_s, "min_sample_s", min_val=0, allow_none=True)
    cuda = is_cuda(device)
    if min_sample_s is None:
        min_sample_s = 0.01 if cuda else 0.02
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
