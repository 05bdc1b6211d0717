"""Timing and measurement records: warm-up, repeats, median, device sync, provenance.

Framework-free: a CUDA device is synchronised through PyTorch only when one is asked for.
Results are saved as JSON under ``data/results/`` with what is needed to trust them later:
the machine (:func:`mptutor.hardware.report`), package versions, date, command, git commit and
the raw timings.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mptutor import hardware
from mptutor.atomic import write_text

__all__ = ["Timing", "time_fn", "save_result", "load_result", "RESULTS_DIR"]

#: Where measurement records are committed.
RESULTS_DIR = Path(__file__).resolve().parents[1] / "data" / "results"


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


def _synchronizer(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


def time_fn(
    fn: Callable[[], Any], repeats: int = 20, warmup: int = 3, device: str = "cpu"
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
    device : str, optional
        ``"cpu"`` or ``"cuda"``/``"cuda:N"``: on CUDA each call is bracketed by
        ``torch.cuda.synchronize()`` so the time covers the GPU work.

    Returns
    -------
    Timing
        The times.

    Raises
    ------
    ValueError
        If ``repeats < 1`` or ``warmup < 0``.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats=}, {warmup=}")
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


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _this_command() -> str:
    """Return this process's command line, the script path relative to the checkout."""
    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    root = RESULTS_DIR.parents[1]
    if script is not None and script.is_relative_to(root):
        shown = str(script.relative_to(root))
    else:
        shown = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    return " ".join(["python", shown, *sys.argv[1:]])


def save_result(
    name: str,
    data: dict[str, Any],
    command: str | None = None,
    out_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write a measurement record as JSON, atomically, with its provenance.

    Parameters
    ----------
    name : str
        File stem, e.g. ``"scaler_overhead-cuda"``; letters, digits, ``-`` and ``_`` only.
    data : dict
        The measurement (raw timings included); must be JSON-serialisable.
    command : str, optional
        The command that produced it (default: this process's command line).
    out_dir : path-like, optional
        Folder (default: ``data/results`` of the checkout).

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    ValueError
        If ``name`` has other characters.
    TypeError
        If ``data`` is not JSON-serialisable (nothing is written).
    """
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise ValueError(f"name must use letters, digits, '-' and '_' only, got {name!r}")
    record = {
        "name": name,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command if command is not None else _this_command(),
        "git_commit": _git_commit(),
        "hardware": hardware.report().as_dict(),
        "data": data,
    }
    text = json.dumps(record, indent=2, sort_keys=False) + "\n"
    folder = Path(out_dir) if out_dir is not None else RESULTS_DIR
    target = folder / f"{name}.json"
    write_text(target, text)
    return target


def load_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a record written by :func:`save_result`.

    Parameters
    ----------
    path : path-like
        A JSON record, or a bare name looked up in ``data/results``.

    Returns
    -------
    dict
        The record: ``name, date, command, git_commit, hardware, data``.

    Raises
    ------
    FileNotFoundError
        If there is no such record.
    ValueError
        If the file is not a measurement record.
    """
    p = Path(path)
    if not p.suffix and not p.exists():
        p = RESULTS_DIR / f"{p}.json"
    if not p.is_file():
        raise FileNotFoundError(f"no measurement record at {p}")
    record = json.loads(p.read_text(encoding="utf-8"))
    missing = {"name", "date", "command", "hardware", "data"} - set(record)
    if missing:
        raise ValueError(f"{p} is not a measurement record: missing {sorted(missing)}")
    return record
