"""The project's performance targets, and recorded runs held against them.

Usage::

    python benchmarks/targets.py                   # the targets, as a Markdown table
    python benchmarks/targets.py data/results DIR  # every record in these folders, checked
    python benchmarks/targets.py --summary OUT/summary.md --parts OUT/parts.tsv OUT

A target is checked only against records it is stated for: the kind of benchmark, a real run
(never a smoke run), the kind of device (a CPU target against CPU records, a GPU target against
GPU records) and, for a target stated for one GPU model (``"H100"``), records made on that model
only: an H200 or an A100 record is listed but not held against an H100 target.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mptutor._atomic import write_text
from mptutor.bench import _record_device as record_device
from mptutor.bench import _record_kind as record_kind
from mptutor.bench import find_records
from mptutor.table import Table

#: The GEMM size at which the GEMM targets are stated.
TARGET_GEMM_SIZE = 8192


@dataclass(frozen=True)
class Target:
    """One performance target: ``key`` names the figure of :func:`record_figures`.

    ``benchmark`` is the record kind that measures it (``benchmarks/<benchmark>.py`` writes
    it), ``op`` is ``">="`` or ``"<="``, ``unit`` is ``"x"`` for a ratio, and ``stated_for``
    is a GPU model (``"H100"``), ``"GPU"`` (any CUDA GPU) or ``"CPU"``.
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
        """Whether a record is one this target is checked against (see the module docstring)."""
        if record_kind(record) != self.benchmark or record["data"].get("smoke"):
            return False
        device = record_device(record)
        if self.stated_for == "CPU" or device == "cpu":
            return self.stated_for == "CPU" and device == "cpu"
        if self.stated_for != "GPU" and self.stated_for not in _gpu_name(record):
            return False
        return self.benchmark != "resnet50_amp" or record["data"].get("model") == "resnet50"


def _gpu_name(record: dict[str, Any]) -> str:
    gpus = record["hardware"].get("gpus") or [{}]
    return str(record["data"].get("gpu") or gpus[0].get("name") or "")


_S = TARGET_GEMM_SIZE
_GEMM, _RESNET, _SCALER, _FP8 = "gemm_sweep", "resnet50_amp", "scaler_overhead", "fp8_step"
_R50 = "ResNet50 training images/s"
_SYNCED = "training step time, mptutor FP32 master weights + loss scaler / torch.amp.GradScaler"
#: The project's performance targets. Speed and memory targets are checked against recorded
#: runs of the benchmarks, never asserted in timed unit tests.
TARGETS: tuple[Target, ...] = (
    Target("gemm_fp16_tflops", f"FP16 GEMM {_S}^3 throughput", _GEMM, ">=", 700, "TFLOP/s",
           "H100"),
    Target("gemm_fp16_vs_fp32_strict", f"FP16 / strict FP32 GEMM throughput at {_S}^3", _GEMM,
           ">=", 12, "x", "H100"),
    Target("gemm_fp16_vs_tf32", f"FP16 / TF32 GEMM throughput at {_S}^3", _GEMM, ">=", 1.8, "x",
           "H100"),
    Target("resnet50_amp_fp16_vs_fp32_strict",
           f"{_R50}, AMP FP16 / strict FP32 (TF32 off), each at its best layout", _RESNET, ">=",
           3, "x", "H100"),
    Target("resnet50_amp_bf16_vs_fp32_strict",
           f"{_R50}, AMP BF16 / strict FP32 (TF32 off), each at its best layout", _RESNET, ">=",
           3, "x", "H100"),
    Target("resnet50_amp_fp16_vs_tf32", f"{_R50}, AMP FP16 / TF32, each at its best layout",
           _RESNET, ">=", 1.5, "x", "H100"),
    Target("resnet50_amp_bf16_vs_tf32", f"{_R50}, AMP BF16 / TF32, each at its best layout",
           _RESNET, ">=", 1.5, "x", "H100"),
    Target("resnet50_amp_fp16_images_per_s", f"{_R50}, AMP FP16, channels_last", _RESNET, ">=",
           3000, "images/s", "H100"),
    Target("resnet50_amp_fp16_memory_vs_fp32",
           "ResNet50 peak memory, AMP FP16 / strict FP32, each at its best layout", _RESNET,
           "<=", 0.6, "x", "H100"),
    Target("resnet50_amp_bf16_memory_vs_fp32",
           "ResNet50 peak memory, AMP BF16 / strict FP32, each at its best layout", _RESNET,
           "<=", 0.6, "x", "H100"),
    Target("scaler_step_time_ratio", _SYNCED, _SCALER, "<=", 1.02, "x", "GPU"),
    Target("scaler_step_time_ratio", _SYNCED, _SCALER, "<=", 1.1, "x", "CPU"),
    Target("scaler_host_syncs_per_step",
           "host syncs per training step, mptutor FP32 master weights + loss scaler", _SCALER,
           "<=", 1, "", "GPU"),
    Target("fp8_step_vs_bf16",
           "transformer training step, FP8 linear layers (delayed scaling) / BF16 autocast,"
           " speed-up at the best recorded width", _FP8, ">=", 1.3, "x", "H100"),
)  # fmt: skip
del _S


def targets_table() -> Table:
    """Return the performance targets as a table: what, target, stated for, measured by."""
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
    """Return the performance targets as a Markdown table (what the README quotes)."""
    lines = ["| what | target | stated for | measured by |", "| --- | --- | --- | --- |"]
    for t in TARGETS:
        lines.append(f"| {t.what} | {t.wanted} | {t.stated_for} | `benchmarks/{t.benchmark}.py` |")
    return "\n".join(lines)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _rows(data: dict[str, Any], fields: tuple[str, ...], where: str) -> list[dict[str, Any]]:
    rows = data.get("rows", [])
    if not isinstance(rows, list):
        raise ValueError(f"{where}: 'rows' must be a list, got {type(rows).__name__}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{where}: rows[{i}] must be an object, got {row!r:.40}")
        missing = [f for f in fields if f not in row]
        if missing:
            raise ValueError(f"{where}: rows[{i}] lacks {missing} (it has {sorted(row)})")
    return rows


def _gemm_figures(data: dict[str, Any], where: str) -> dict[str, float | None]:
    tflops = {
        r["precision"]: r["tflops"]
        for r in _rows(data, ("precision", "m"), where)
        if "tflops" in r
        and (r["m"], r.get("n", r["m"]), r.get("k", r["m"])) == (TARGET_GEMM_SIZE,) * 3
    }
    fp16 = tflops.get("fp16")
    return {
        "gemm_fp16_tflops": fp16,
        "gemm_fp16_vs_fp32_strict": _ratio(fp16, tflops.get("fp32")),
        "gemm_fp16_vs_tf32": _ratio(fp16, tflops.get("tf32")),
    }


def best_layouts(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each training mode's fastest row over the memory layouts it was run in."""
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("images_per_s") and (
            r["mode"] not in best or r["images_per_s"] > best[r["mode"]]["images_per_s"]
        ):
            best[r["mode"]] = r
    return best


def _resnet_figures(data: dict[str, Any], where: str) -> dict[str, float | None]:
    rows = _rows(data, ("mode", "channels_last", "images_per_s"), where)
    best = best_layouts(rows)
    channels_last = {r["mode"]: r for r in rows if r["channels_last"]}

    def get(mode: str, key: str) -> float | None:
        return best.get(mode, {}).get(key)

    out: dict[str, float | None] = {
        "resnet50_amp_fp16_images_per_s": channels_last.get("amp_fp16", {}).get("images_per_s")
    }
    for amp in ("fp16", "bf16"):
        speed = get(f"amp_{amp}", "images_per_s")
        out[f"resnet50_amp_{amp}_vs_fp32_strict"] = _ratio(speed, get("fp32", "images_per_s"))
        out[f"resnet50_amp_{amp}_vs_tf32"] = _ratio(speed, get("tf32", "images_per_s"))
        out[f"resnet50_amp_{amp}_memory_vs_fp32"] = _ratio(
            get(f"amp_{amp}", "peak_memory_gib"), get("fp32", "peak_memory_gib")
        )
    return out


def _scaler_figures(data: dict[str, Any], where: str) -> dict[str, float | None]:
    syncs = data.get("host_syncs_per_iteration") or data.get("host_syncs_per_step") or {}
    if not isinstance(syncs, dict):
        raise ValueError(f"{where}: host syncs must be an object, got {syncs!r:.40}")
    return {
        "scaler_step_time_ratio": data.get("iteration_ratio"),
        "scaler_host_syncs_per_step": syncs.get("mptutor"),
    }


def _fp8_figures(data: dict[str, Any], where: str) -> dict[str, float | None]:
    speedups = [
        r["speedup_vs_bf16"]
        for r in _rows(data, (), where)
        if "speedup_vs_bf16" in r and r.get("variant", "fp8") == "fp8"  # not torchao's rows
    ]
    return {"fp8_step_vs_bf16": max(speedups) if speedups else None}


_FIGURES = {
    _GEMM: _gemm_figures,
    _RESNET: _resnet_figures,
    _SCALER: _scaler_figures,
    _FP8: _fp8_figures,
}


def record_figures(record: dict[str, Any], path: Any = None) -> dict[str, float | None]:
    """Compute the figures that the targets are stated in from a record's raw data.

    GEMM figures are read at ``TARGET_GEMM_SIZE``. ResNet50 ratios compare each mode at its
    best memory layout (the faster of NCHW and channels_last in the record), so that neither
    side of a ratio is held back by a layout that suits the other. The scaler's step time ratio
    is the whole training iteration (forward, backward, optimizer). The FP8 speed-up is the
    largest of the project's FP8 layers (``fp8`` rows, delayed scaling; torchao's recipes are
    not what the target is stated for) over the record's widths and its eager and compiled runs.

    Parameters
    ----------
    record : dict
        A record (:func:`records.read_record`).
    path : path-like, optional
        Its file, named in errors.

    Returns
    -------
    dict
        Target key to value, ``None`` where the record lacks a mode or size it takes.

    Raises
    ------
    ValueError
        If a row of the record lacks a field that the figures are computed from.
    """
    figures = _FIGURES.get(record_kind(record))
    where = f"{path or record.get('name', 'record')}"
    return figures(record["data"], where) if figures else {}


def check_targets(records: list[tuple[Path, dict[str, Any]]], every_target: bool = True) -> Table:
    """Hold records against :data:`TARGETS`.

    Parameters
    ----------
    records : list of (pathlib.Path, dict)
        As :func:`mptutor.bench.find_records` returns them.
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
            value = record_figures(record, path).get(target.key)
            rows.append(
                {
                    **base,
                    "recorded": "not in record" if value is None else round(value, 3),
                    "met": "" if value is None else target.met(value),
                    "record": Path(path).name,
                }
            )
    return Table(rows, title="Performance targets against recorded runs")


def _markdown(rows: list[dict[str, Any]]) -> list[str]:
    """Rows of dicts as a Markdown table (the columns of all rows, in order of appearance)."""
    if not rows:
        return ["(none)"]
    columns = list(dict.fromkeys(k for r in rows for k in r))

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v).replace("|", "/")

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return lines


def _measured(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The headline figures of one record, beyond the target figures: one row each."""
    kind, data = record_kind(record), record["data"]
    rows: list[dict[str, Any]] = []
    if kind == _GEMM:
        for r in data.get("rows", []):
            if r["m"] in data.get("sizes", []) and "tflops" in r:  # n, not n - 1
                rows.append({"figure": f"GEMM {r['m']}^3 {r['precision']}",
                             "value": r["tflops"], "unit": "TFLOP/s"})  # fmt: skip
        for size, why in data.get("skipped_sizes", {}).items():
            rows.append({"figure": f"GEMM {size}^3", "value": None, "unit": why})
    elif kind == _RESNET:
        for r in data.get("rows", []):
            layout = "channels_last" if r["channels_last"] else "NCHW"
            rows.append({"figure": f"{data.get('model')} {r['mode']} {layout}",
                         "value": r["images_per_s"], "unit": "images/s"})  # fmt: skip
            rows.append({"figure": f"{data.get('model')} {r['mode']} {layout} peak memory",
                         "value": r.get("peak_memory_gib"), "unit": "GiB"})  # fmt: skip
        for what, why in data.get("skipped", {}).items():
            rows.append({"figure": f"{data.get('model')} {what}", "value": None, "unit": why})
    elif kind == _SCALER:
        rows.append({"figure": f"scaler {data.get('model')}: training step, mptutor / torch",
                     "value": data.get("iteration_ratio"), "unit": "x"})  # fmt: skip
        rows.append({"figure": f"scaler {data.get('model')}: optimizer part, mptutor / torch",
                     "value": data.get("step_ratio"), "unit": "x"})  # fmt: skip
        for who, n in (data.get("host_syncs_per_iteration") or {}).items():
            rows.append({"figure": f"host syncs per training step, {who}", "value": n,
                         "unit": ""})  # fmt: skip
    elif kind == _FP8:
        for r in data.get("rows", []):
            if "speedup_vs_bf16" in r:
                mode = "compiled" if r.get("compiled") else "eager"
                rows.append({"figure": f"{r['variant']} / bf16 step, width {r['width']}, {mode}",
                             "value": r["speedup_vs_bf16"], "unit": "x"})  # fmt: skip
        for variant, why in (data.get("unavailable") or {}).items():
            rows.append({"figure": variant, "value": None, "unit": f"not measured: {why}"})
        for what, why in (data.get("skipped") or {}).items():
            rows.append({"figure": f"fp8 step {what}", "value": None, "unit": why})
    return rows


def summary_markdown(folder: str | Path, parts: str | Path | None = None) -> str:
    """The summary of one ``gpu-plan.sh first`` run: its parts, every figure, the targets.

    Parameters
    ----------
    folder : path-like
        The run's output folder (its records; smoke records are listed but held against no
        target).
    parts : path-like, optional
        The plan's table of parts (tab-separated: part, share s, budget s, took s, outcome).

    Returns
    -------
    str
        Markdown.
    """
    found = find_records(results_dir=folder, include_smoke=True)
    lines = ["# GPU plan `first`: every figure against its target", ""]
    for path, record in found:
        data = record["data"]
        lines.append(
            f"- `{path.name}`: {_gpu_name(record) or record_device(record)}, torch "
            f"{data.get('torch')}, commit {record.get('git_commit')}"
            + (", smoke sizes (a rehearsal, no target applies)" if data.get("smoke") else "")
        )
    if parts is not None and Path(parts).exists():
        fields = ("part", "share s", "budget s", "took s", "outcome")
        rows = [
            dict(zip(fields, line.split("\t"), strict=False))
            for line in Path(parts).read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        lines += ["", "## Parts", "", *_markdown(rows)]
    real = [(p, r) for p, r in found if not r["data"].get("smoke")]
    lines += ["", "## Targets", "", *_markdown(check_targets(real).to_dicts())]
    figures = [
        {"record": p.name, **row} for p, r in found for row in _measured(r)
    ]  # fmt: skip
    lines += ["", "## Figures", "", *_markdown(figures), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the targets, or check the records in the folders named on the command line.

    ``--summary FILE [--parts TSV] FOLDER`` writes :func:`summary_markdown` of one folder.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "--summary":
        parts = None
        if len(args) == 5 and args[2] == "--parts":
            parts, args = args[3], args[:2] + args[4:]
        if len(args) != 3:
            raise SystemExit("usage: targets.py --summary FILE [--parts TSV] FOLDER")
        text = summary_markdown(args[2], parts)
        write_text(Path(args[1]), text)
        print(text)
        return 0
    folders = args
    if not folders:
        print(targets_markdown())
        return 0
    records = [r for folder in folders for r in find_records(results_dir=folder)]
    others = [
        f"{p.name} ({_gpu_name(r) or record_device(r)})"
        for p, r in records
        if not any(t.applies_to(r) for t in TARGETS)
    ]
    print(check_targets(records))
    if others:
        print("records no target is stated for:", ", ".join(others))
    return 0


if __name__ == "__main__":
    sys.exit(main())
