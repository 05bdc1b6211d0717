"""Timing a function, and reading the measurement records that ``benchmarks/`` wrote.

Framework-free: a CUDA device is synchronised through PyTorch only when the caller has imported
it. The records are JSON files in ``data/results/`` with their provenance (machine, versions,
date, command, commit, raw timings); notebooks show them labelled as recorded (:func:`label`).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mptutor._checks import _short, check_scalar, check_type

__all__ = ["Timing", "time_fn", "find_records", "provenance", "label"]

_RESULTS = Path(__file__).resolve().parents[1] / "data" / "results"
_ROOT = _RESULTS.parents[1]
_FIELDS = ("name", "date", "command", "hardware", "data")


@dataclass(frozen=True)
class Timing:
    """Repeated timings of one function, in seconds per call.

    Attributes
    ----------
    times : tuple of float
        Seconds per call, one value per timed sample (the sample's time over ``inner``).
    warmup, inner : int
        Untimed calls made first; calls per sample (1 for :func:`time_fn`).
    method : str
        ``"wall-clock"`` (``time.perf_counter``, a GPU waited for), ``"cuda-graph"`` (a CUDA
        graph's replay) or ``"cuda-events"`` (calls launched from the host), the last two timed
        with CUDA events.
    note : str
        Why a fallback was taken, if one was.
    """

    times: tuple[float, ...]
    warmup: int
    inner: int = 1
    method: str = "wall-clock"
    note: str = ""

    @property
    def median(self) -> float:
        """Median seconds per call."""
        return statistics.median(self.times)

    def as_dict(self) -> dict[str, Any]:
        """Return the raw times with their median (and a note only if any), for a JSON record."""
        out = {"median_s": self.median, **asdict(self)}
        return out if self.note else {k: v for k, v in out.items() if k != "note"}


def _device_type(device: Any, name: str = "device") -> str:
    """Return ``"cpu"`` or ``"cuda"`` for ``"cpu"``, ``"cuda"``, ``"cuda:N"``; refuse the rest."""
    text = str(device) if type(device).__name__ == "device" else device
    if isinstance(text, str):
        kind, colon, index = text.partition(":")
        if kind in ("cpu", "cuda") and (not colon or (index.isdigit() and index.isascii())):
            return kind
    raise ValueError(
        f"{name} must be 'cpu', 'cuda' or 'cuda:N' (N a GPU index), got {_short(device)}"
    )


def _synchronizer(device: Any) -> Callable[[], None]:
    """Return a function that waits for a CUDA device (through the caller's PyTorch), or not."""
    name = str(device)
    if _device_type(device) != "cuda":
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
    repeats, warmup : int, optional
        Timed calls (at least 1), and untimed calls first (kernel selection, caches, allocator).
    device : str or torch.device, optional
        ``"cpu"`` or ``"cuda"``/``"cuda:N"`` (waited for after each call; for GPU work shorter
        than a few milliseconds, ``mptutor.torch_perf.time_calls`` times many calls a sample).

    Raises
    ------
    TypeError, ValueError
        If ``fn`` is not callable, ``repeats`` (at least 1) or ``warmup`` (at least 0) not such
        an int, or ``device`` none of ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
    RuntimeError
        If a CUDA device is named but the caller has not imported PyTorch.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {_short(fn)}")
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


def _read_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a JSON record; FileNotFoundError or a ValueError naming the file if it is not one."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no measurement record at {p}")
    try:
        record = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{p} is not valid JSON (truncated or corrupt?): {err}") from None
    if not isinstance(record, dict):
        raise ValueError(
            f"{p} holds a JSON {type(record).__name__}, not a measurement record "
            f"(an object with {', '.join(_FIELDS)})"
        )
    _check_record(record, str(p))
    return record


def _check_record(record: Any, where: str) -> None:
    """Refuse a record the readers cannot read: a ValueError naming ``where`` and the field."""
    if not isinstance(record, dict):
        raise ValueError(f"{where} is not a measurement record (a dict), got {_short(record)}")
    missing = [key for key in _FIELDS if key not in record]
    if missing:
        raise ValueError(f"{where} is not a measurement record: missing {missing}")
    for key in ("name", "date", "command"):
        if not isinstance(record[key], str):
            raise ValueError(f"{where}: {key!r} must be a string, got {_short(record[key])}")
    if not isinstance(record.get("git_commit"), (str, type(None))):
        raise ValueError(
            f"{where}: 'git_commit' must be a string or null, got {_short(record['git_commit'])}"
        )
    for key in ("hardware", "data"):
        if not isinstance(record[key], dict):
            raise ValueError(f"{where}: {key!r} must be a JSON object, got {_short(record[key])}")
    hw = record["hardware"]
    for part in ("data", "hardware"):
        device = record[part].get("device")
        if device not in (None, ""):
            try:
                _device_type(device)
            except ValueError:
                raise ValueError(
                    f"{where}: {part}['device'] must be 'cpu', 'cuda' or 'cuda:N', got "
                    f"{_short(device)}"
                ) from None
    if not isinstance(hw.get("packages", {}), dict):
        raise ValueError(
            f"{where}: hardware['packages'] must be a JSON object, got {_short(hw['packages'])}"
        )
    gpus = hw.get("gpus") or []
    if not isinstance(gpus, list) or not all(isinstance(gpu, dict) for gpu in gpus):
        raise ValueError(
            f"{where}: hardware['gpus'] must be a list of JSON objects, got {_short(gpus)}"
        )
    for i, gpu in enumerate(gpus):
        cc = gpu.get("compute_capability", ("?", "?"))
        if not (isinstance(cc, (list, tuple)) and len(cc) == 2):
            raise ValueError(
                f"{where}: hardware['gpus'][{i}]['compute_capability'] must be a pair "
                f"[major, minor], got {_short(cc)}"
            )


def _record_kind(record: dict[str, Any]) -> str:
    """Return the benchmark that wrote a record: its name up to the first ``-``."""
    return str(record["name"]).split("-")[0]


def _record_device(record: dict[str, Any]) -> str:
    """Return ``"cuda"`` or ``"cpu"``: the device the recorded benchmark ran on."""
    device = record["data"].get("device") or record["hardware"].get("device") or "cpu"
    return _device_type(device)


def find_records(
    kind: str | None = None,
    device: str | None = None,
    results_dir: str | os.PathLike[str] | None = None,
    include_smoke: bool = False,
) -> list[tuple[Path, dict[str, Any]]]:
    """Read the measurement records in a folder, by file name.

    Parameters
    ----------
    kind : str, optional
        Only records of this benchmark (``"gemm_sweep"``, ``"resnet50_amp"``, ...).
    device : str, optional
        Only records made on ``"cuda"`` (``"cuda:N"`` says the same) or on ``"cpu"``.
    results_dir : path-like, optional
        The folder (default: ``data/results`` of the checkout).
    include_smoke : bool, optional
        Also return smoke-test records (``data["smoke"]`` true), which measure nothing.

    Returns
    -------
    list of (pathlib.Path, dict)
        Each record with its path, sorted by file name.

    Raises
    ------
    TypeError, ValueError
        If ``kind`` is not a string, ``results_dir`` not a path, ``device`` none of ``"cpu"``,
        ``"cuda"``, ``"cuda:N"``, or a file in the folder not a measurement record (named).
    NotADirectoryError
        If ``results_dir`` is not a folder.
    """
    if kind is not None:
        check_type(kind, "kind", str, "a benchmark's name (a str) or None")
    if device is not None:
        device = _device_type(device)
    if results_dir is not None:
        check_type(results_dir, "results_dir", (str, os.PathLike), "a folder (str or path)")
    folder = Path(results_dir) if results_dir is not None else _RESULTS
    if not folder.is_dir():
        raise NotADirectoryError(f"results_dir {folder} is not a folder")
    found = [(path, _read_record(path)) for path in sorted(folder.glob("*.json"))]
    return [
        (path, r)
        for path, r in found
        if kind in (None, _record_kind(r))
        and device in (None, _record_device(r))
        and (include_smoke or not r["data"].get("smoke"))
    ]


def _machine(record: dict[str, Any]) -> str:
    """Name the machine of a record: its first GPU if it ran on one, else its CPU."""
    hw = record["hardware"]
    if _record_device(record) == "cuda" and hw.get("gpus"):
        gpu = hw["gpus"][0]
        major, minor = gpu.get("compute_capability", ("?", "?"))
        return f"{gpu.get('name', '?')} ({gpu.get('architecture', '?')}, sm_{major}{minor})"
    return f"CPU: {hw.get('cpu', '?')}, {hw.get('cpu_count', '?')} cores"


def label(record: dict[str, Any]) -> str:
    """Title for a recorded figure: ``"RECORDED 2026-01-31 on NVIDIA H100 80GB HBM3 (...)"``.

    Parameters
    ----------
    record : dict
        A record, as :func:`find_records` gives it.

    Returns
    -------
    str
        RECORDED, the date and the machine: never taken for a figure measured in the notebook.

    Raises
    ------
    ValueError
        If ``record`` is not a measurement record (the message names the field).
    """
    _check_record(record, "record")
    return f"RECORDED {str(record['date'])[:10]} on {_machine(record)}"


def provenance(path: str | os.PathLike[str], record: dict[str, Any]) -> dict[str, Any]:
    """Where and how a record was made, as one table row.

    Parameters
    ----------
    path, record : path-like, dict
        A record's file and the record, as :func:`find_records` gives them.

    Returns
    -------
    dict
        ``record, device, driver, CUDA, torch, date, git commit, command``.

    Raises
    ------
    TypeError, ValueError
        If ``path`` is not a path, or ``record`` not a measurement record (the field named).
    """
    check_type(path, "path", (str, os.PathLike), "the record's file (str or path)")
    _check_record(record, "record")
    p = Path(path).resolve()
    shown = str(p.relative_to(_ROOT)) if p.is_relative_to(_ROOT) else p.name
    hw = record["hardware"]
    return {
        "record": shown,
        "device": _machine(record),
        "driver": hw.get("driver"),
        "CUDA": hw.get("cuda"),
        "torch": record["data"].get("torch") or hw.get("packages", {}).get("torch"),
        "date": record["date"],
        "git commit": (record.get("git_commit") or "")[:10],
        "command": record["command"],
    }
