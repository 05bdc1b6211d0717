"""The project's performance targets, and recorded runs held against them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mptutor.bench._records import record_device, record_kind
from mptutor.table import Table

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
