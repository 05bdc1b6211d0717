"""Timing a function: warm-up calls, repeated timed calls, the device synchronised."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from mptutor.checks import check_scalar


@dataclass(frozen=True)
class Timing:
    """Repeated timings of one function, in seconds.

    Attributes
    ----------
    times : tuple of float
        Every timed call, in order.
    warmup : int
        Untimed calls made first.
    """

    times: tuple[float, ...]
    warmup: int

    @property
    def median(self) -> float:
        """Median time per call."""
        return statistics.median(self.times)

    @property
    def spread(self) -> float:
        """Interquartile range divided by the median (0 for fewer than 4 repeats)."""
        if len(self.times) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.times, n=4)
        return (q3 - q1) / self.median

    def as_dict(self) -> dict[str, Any]:
        """Return the raw times with their median, for a JSON record."""
        return {"median_s": self.median, "spread": self.spread, **asdict(self)}


def _synchronizer(device: Any) -> Callable[[], None]:
    name = str(device)
    if name.split(":")[0] != "cuda":
        return lambda: None
    torch = sys.modules.get("torch")
    if torch is None:
        raise RuntimeError(
            f"device {name!r}: timing CUDA work needs PyTorch, imported by the caller first "
            "(mptutor.bench never imports a framework itself)"
        )
    return lambda: torch.cuda.synchronize(name)


def time_fn(
    fn: Callable[[], Any], repeats: int = 20, warmup: int = 3, device: Any = "cpu"
) -> Timing:
    """Time a function: warm-up calls, then ``repeats`` timed calls with the device synchronised.

    Parameters
    ----------
    fn : callable
        Called with no arguments.
    repeats : int, optional
        Timed calls (at least 1).
    warmup : int, optional
        Untimed calls first (kernel selection, caches, allocator).
    device : str or torch.device, optional
        ``"cpu"`` or ``"cuda"``/``"cuda:N"``: on CUDA each call is bracketed by
        ``torch.cuda.synchronize()`` so the time covers the GPU work. Each call is timed
        alone: for work shorter than a few milliseconds on a GPU, time many calls per sample
        instead (``mptutor.torch_perf.time_calls``).

    Returns
    -------
    Timing
        The times.

    Raises
    ------
    ValueError
        If ``repeats < 1`` or ``warmup < 0``.
    TypeError
        If ``repeats`` or ``warmup`` is not an int.
    RuntimeError
        If a CUDA device is named but the caller has not imported PyTorch.
    """
    repeats = check_scalar(repeats, "repeats", int, min_val=1)
    warmup = check_scalar(warmup, "warmup", int, min_val=0)
    sync = _synchronizer(device)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return Timing(tuple(times), warmup)
