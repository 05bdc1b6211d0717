"""Measurement records: JSON files with their provenance, and the readers of a folder of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mptutor import hardware
from mptutor.atomic import write_text

#: Where measurement records are committed.
RESULTS_DIR = Path(__file__).resolve().parents[2] / "data" / "results"


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


def record_kind(record: dict[str, Any]) -> str:
    """Return the benchmark that wrote a record: its name up to the first ``-``."""
    return str(record["name"]).split("-")[0]


def record_device(record: dict[str, Any]) -> str:
    """Return ``"cuda"`` or ``"cpu"``: the device the recorded benchmark ran on."""
    device = record["data"].get("device") or record["hardware"].get("device") or "cpu"
    return str(device).split(":")[0]


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
        Only records made on ``"cuda"`` or on ``"cpu"``.
    results_dir : path-like, optional
        The folder (default: ``data/results`` of the checkout).
    include_smoke : bool, optional
        Also return tiny smoke-test records (``data["smoke"]`` true); they are left out by
        default, as they measure nothing.

    Returns
    -------
    list of (pathlib.Path, dict)
        Each record with its path, sorted by file name.
    """
    folder = Path(results_dir) if results_dir is not None else RESULTS_DIR
    found = []
    for path in sorted(folder.glob("*.json")):
        record = load_result(path)
        if kind is not None and record_kind(record) != kind:
            continue
        if device is not None and record_device(record) != device:
            continue
        if record["data"].get("smoke") and not include_smoke:
            continue
        found.append((path, record))
    return found


def _machine(record: dict[str, Any]) -> str:
    hw = record["hardware"]
    if record_device(record) == "cuda" and hw.get("gpus"):
        gpu = hw["gpus"][0]
        major, minor = gpu.get("compute_capability", ("?", "?"))
        return f"{gpu.get('name', '?')} ({gpu.get('architecture', '?')}, sm_{major}{minor})"
    return f"CPU: {hw.get('cpu', '?')}, {hw.get('cpu_count', '?')} cores"


def provenance(path: str | os.PathLike[str], record: dict[str, Any]) -> dict[str, Any]:
    """Where and how a record was made, as one table row.

    Parameters
    ----------
    path : path-like
        The record's file.
    record : dict
        The record (:func:`load_result`).

    Returns
    -------
    dict
        ``record, device, driver, CUDA, torch, date, git commit, command``.
    """
    p = Path(path).resolve()
    root = RESULTS_DIR.parents[1]
    shown = str(p.relative_to(root)) if p.is_relative_to(root) else p.name
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
