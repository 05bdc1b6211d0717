"""Timing, measurement records and the project's performance targets.

Framework-free: this module never imports a deep-learning framework. A CUDA device is
synchronised through PyTorch only when the caller has already imported it (it is then in
``sys.modules``). Results are saved as JSON under ``data/results/`` with what is needed to trust
them later: the machine (:func:`mptutor.hardware.report`), package versions, date, command, git
commit and the raw timings. :data:`TARGETS` states the project's performance targets, and
:func:`check_targets` holds recorded runs against them.

The targets, as a Markdown table (for the README)::

    python -m mptutor.bench
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
from mptutor.table import Table

__all__ = [
    "Timing",
    "time_fn",
    "save_result",
    "load_result",
    "RESULTS_DIR",
    "TARGET_GEMM_SIZE",
    "Target",
    "TARGETS",
    "targets_table",
    "targets_markdown",
    "record_kind",
    "record_device",
    "find_records",
    "provenance",
    "record_figures",
    "check_targets",
]

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
    RuntimeError
        If a CUDA device is named but the caller has not imported PyTorch.
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


# --- performance targets ----------------------------------------------------------------------

#: The GEMM size at which the GEMM targets are stated.
TARGET_GEMM_SIZE = 8192


@dataclass(frozen=True)
class Target:
    """One of the project's performance targets.

    Attributes
    ----------
    key : str
        Name of the figure in :func:`record_figures`.
    what : str
        What is measured, in words.
    benchmark : str
        The record kind that measures it (``gemm_sweep``, ``resnet50_amp``,
        ``scaler_overhead``): ``benchmarks/<benchmark>.py`` writes it.
    op : str
        ``">="`` or ``"<="``.
    threshold : float
        The value to reach.
    unit : str
        Unit of the figure (``"x"`` for a ratio).
    stated_for : str
        The machine the target is stated for: ``"H100"``, ``"GPU"`` or ``"CPU"``.
    """

    key: str
    what: str
    benchmark: str
    op: str
    threshold: float
    unit: str
    stated_for: str

    @property
    def wanted(self) -> str:
        """The target as text, e.g. ``">= 700 TFLOP/s"`` or ``">= 12x"``."""
        unit = {"x": "x", "": ""}.get(self.unit, f" {self.unit}")
        return f"{self.op} {self.threshold:g}{unit}"

    def met(self, value: float) -> bool:
        """Whether a figure meets the target."""
        return value >= self.threshold if self.op == ">=" else value <= self.threshold

    def applies_to(self, record: dict[str, Any]) -> bool:
        """Whether a record is one this target is checked against (kind, device, model).

        Smoke-test records never are.
        """
        if record_kind(record) != self.benchmark or record["data"].get("smoke"):
            return False
        if (record_device(record) == "cpu") != (self.stated_for == "CPU"):
            return False
        return self.benchmark != "resnet50_amp" or record["data"].get("model") == "resnet50"


_S = TARGET_GEMM_SIZE
#: The project's performance targets. Speed and memory targets are checked against recorded
#: runs of the benchmarks, never asserted in timed unit tests.
TARGETS: tuple[Target, ...] = (
    Target(
        "gemm_fp16_tflops",
        f"FP16 GEMM {_S}^3 throughput",
        "gemm_sweep",
        ">=",
        700,
        "TFLOP/s",
        "H100",
    ),
    Target(
        "gemm_fp16_vs_fp32_strict",
        f"FP16 / strict FP32 GEMM throughput at {_S}^3",
        "gemm_sweep",
        ">=",
        12,
        "x",
        "H100",
    ),
    Target(
        "gemm_fp16_vs_tf32",
        f"FP16 / TF32 GEMM throughput at {_S}^3",
        "gemm_sweep",
        ">=",
        1.8,
        "x",
        "H100",
    ),
    Target(
        "resnet50_amp_fp16_vs_fp32_strict",
        "ResNet50 training images/s, AMP FP16 / strict FP32 (TF32 off)",
        "resnet50_amp",
        ">=",
        3,
        "x",
        "H100",
    ),
    Target(
        "resnet50_amp_bf16_vs_fp32_strict",
        "ResNet50 training images/s, AMP BF16 / strict FP32 (TF32 off)",
        "resnet50_amp",
        ">=",
        3,
        "x",
        "H100",
    ),
    Target(
        "resnet50_amp_fp16_vs_tf32",
        "ResNet50 training images/s, AMP FP16 / TF32",
        "resnet50_amp",
        ">=",
        1.5,
        "x",
        "H100",
    ),
    Target(
        "resnet50_amp_bf16_vs_tf32",
        "ResNet50 training images/s, AMP BF16 / TF32",
        "resnet50_amp",
        ">=",
        1.5,
        "x",
        "H100",
    ),
    Target(
        "resnet50_amp_fp16_images_per_s",
        "ResNet50 training images/s, AMP FP16, channels_last",
        "resnet50_amp",
        ">=",
        3000,
        "images/s",
        "H100",
    ),
    Target(
        "resnet50_amp_fp16_memory_vs_fp32",
        "ResNet50 peak memory of the same step, AMP FP16 / strict FP32",
        "resnet50_amp",
        "<=",
        0.6,
        "x",
        "H100",
    ),
    Target(
        "resnet50_amp_bf16_memory_vs_fp32",
        "ResNet50 peak memory of the same step, AMP BF16 / strict FP32",
        "resnet50_amp",
        "<=",
        0.6,
        "x",
        "H100",
    ),
    Target(
        "scaler_step_time_ratio",
        "training step time, mptutor FP32 master weights + loss scaler / torch.amp.GradScaler",
        "scaler_overhead",
        "<=",
        1.02,
        "x",
        "GPU",
    ),
    Target(
        "scaler_step_time_ratio",
        "training step time, mptutor FP32 master weights + loss scaler / torch.amp.GradScaler",
        "scaler_overhead",
        "<=",
        1.1,
        "x",
        "CPU",
    ),
    Target(
        "scaler_host_syncs_per_step",
        "host syncs per training step, mptutor FP32 master weights + loss scaler",
        "scaler_overhead",
        "<=",
        1,
        "",
        "GPU",
    ),
)
del _S


def targets_table() -> Table:
    """Return the performance targets as a table.

    Returns
    -------
    Table
        One row per target: what, target, stated for, measured by.
    """
    return Table(
        [
            {
                "what": t.what,
                "target": t.wanted,
                "stated for": t.stated_for,
                "measured by": f"benchmarks/{t.benchmark}.py",
            }
            for t in TARGETS
        ],
        title="Performance targets",
    )


def targets_markdown() -> str:
    """Return the performance targets as a Markdown table (what the README quotes).

    Returns
    -------
    str
        A Markdown table, one row per target.
    """
    lines = ["| what | target | stated for | measured by |", "| --- | --- | --- | --- |"]
    for t in TARGETS:
        lines.append(f"| {t.what} | {t.wanted} | {t.stated_for} | `benchmarks/{t.benchmark}.py` |")
    return "\n".join(lines)


# --- reading records --------------------------------------------------------------------------


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


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _gemm_figures(data: dict[str, Any]) -> dict[str, float | None]:
    tflops = {
        r["precision"]: r["tflops"]
        for r in data.get("rows", [])
        if "tflops" in r
        and (r["m"], r.get("n", r["m"]), r.get("k", r["m"])) == (TARGET_GEMM_SIZE,) * 3
    }
    fp16 = tflops.get("fp16")
    return {
        "gemm_fp16_tflops": fp16,
        "gemm_fp16_vs_fp32_strict": _ratio(fp16, tflops.get("fp32-strict")),
        "gemm_fp16_vs_tf32": _ratio(fp16, tflops.get("tf32")),
    }


def _resnet_figures(data: dict[str, Any]) -> dict[str, float | None]:
    rows = {(r["mode"], bool(r["channels_last"])): r for r in data.get("rows", [])}
    # compare in one layout: channels_last when the baseline was run that way, else NCHW
    layout = ("fp32-strict", True) in rows

    def get(mode: str, key: str, channels_last: bool = layout) -> float | None:
        row = rows.get((mode, channels_last))
        return row.get(key) if row else None

    out: dict[str, float | None] = {
        "resnet50_amp_fp16_images_per_s": get("amp-fp16", "images_per_s", True)
    }
    for amp in ("fp16", "bf16"):
        speed = get(f"amp-{amp}", "images_per_s")
        out[f"resnet50_amp_{amp}_vs_fp32_strict"] = _ratio(
            speed, get("fp32-strict", "images_per_s")
        )
        out[f"resnet50_amp_{amp}_vs_tf32"] = _ratio(speed, get("tf32", "images_per_s"))
        out[f"resnet50_amp_{amp}_memory_vs_fp32"] = _ratio(
            get(f"amp-{amp}", "peak_memory_gib"), get("fp32-strict", "peak_memory_gib")
        )
    return out


def _scaler_figures(data: dict[str, Any]) -> dict[str, float | None]:
    syncs = data.get("host_syncs_per_iteration") or data.get("host_syncs_per_step") or {}
    return {
        "scaler_step_time_ratio": data.get("iteration_ratio"),
        "scaler_host_syncs_per_step": syncs.get("mptutor"),
    }


_FIGURES = {
    "gemm_sweep": _gemm_figures,
    "resnet50_amp": _resnet_figures,
    "scaler_overhead": _scaler_figures,
}


def record_figures(record: dict[str, Any]) -> dict[str, float | None]:
    """Compute the figures that the targets are stated in from a record's raw data.

    GEMM figures are read at ``TARGET_GEMM_SIZE``; ResNet50 ratios compare modes in one
    memory layout (channels_last when the strict FP32 baseline was run in it, NCHW otherwise).
    The scaler's step time ratio is the whole training iteration (forward, backward, optimizer).

    Parameters
    ----------
    record : dict
        A record (:func:`load_result`).

    Returns
    -------
    dict
        Target key to value, ``None`` where the record lacks what it takes.
    """
    figures = _FIGURES.get(record_kind(record))
    return figures(record["data"]) if figures else {}


def check_targets(records: list[tuple[Path, dict[str, Any]]], every_target: bool = True) -> Table:
    """Hold records against :data:`TARGETS`.

    Parameters
    ----------
    records : list of (pathlib.Path, dict)
        As :func:`find_records` returns them.
    every_target : bool, optional
        Also list the targets that no record applies to (as ``no record``).

    Returns
    -------
    Table
        One row per target and record it applies to (``recorded``, ``met``: ``"not in
        record"`` and blank when the record lacks a mode or size the figure needs).
    """
    rows = []
    for target in TARGETS:
        base = {"target": target.what, "wanted": target.wanted, "stated for": target.stated_for}
        matching = [(p, r) for p, r in records if target.applies_to(r)]
        if not matching and every_target:
            rows.append({**base, "recorded": "no record", "met": ""})
        for path, record in matching:
            value = record_figures(record).get(target.key)
            rows.append(
                {
                    **base,
                    "recorded": "not in record" if value is None else round(value, 3),
                    "met": "" if value is None else target.met(value),
                    "record": Path(path).name,
                }
            )
    return Table(rows, title="Performance targets against recorded runs")


if __name__ == "__main__":  # pragma: no cover - manual use: python -m mptutor.bench
    print(targets_markdown())
