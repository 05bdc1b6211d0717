"""Reading the experiment's measurement records, and the step-time figure of live and recorded runs.

The records are written by ``benchmarks/keras_cnn_experiment.py --out DIR`` and committed to
``data/results/``; each carries the machine, the versions, the date, the command and the commit
that made it. They are read through :mod:`mptutor.bench`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mptutor import bench
from mptutor.table import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "EXPERIMENT",
    "VARIANT_ORDER",
    "find_records",
    "provenance",
    "speedup_rows",
    "tensor_core_shares",
    "step_time_runs",
    "plot_step_times",
]

#: The name that the experiment's records start with.
EXPERIMENT = "keras_cnn_experiment"
#: The precision variants, in the order the tables list them.
VARIANT_ORDER = ("float32", "float32-tf32", "mixed_float16")


def find_records(
    results_dir: str | os.PathLike[str] | None = None,
) -> list[tuple[Path, dict[str, Any]]]:
    """Return the experiment's records made on a CUDA GPU (smoke tests left out).

    Parameters
    ----------
    results_dir : path-like, optional
        The folder (default: ``data/results`` of the checkout).

    Returns
    -------
    list of (pathlib.Path, dict)
        Each record with its path, sorted by file name.
    """
    return bench.find_records(kind=EXPERIMENT, device="cuda", results_dir=results_dir)


def provenance(path: str | os.PathLike[str], record: dict[str, Any]) -> Table:
    """Show where and how a record was made: file, device, Keras backend, versions, command.

    Parameters
    ----------
    path : path-like
        The record's file.
    record : dict
        The record (:func:`mptutor.bench.load_result`).

    Returns
    -------
    mptutor.table.Table
        One row per field, titled as a recorded run.
    """
    data = record["data"]
    fields = bench.provenance(path, record)
    fields.pop("torch", None)
    fields["Keras backend"] = (
        f"{data.get('backend')} {data.get('backend_version')} (Keras {data.get('keras_version')})"
    )
    fields["note"] = data.get("backend_note", "")
    return Table(
        [{"field": k, "value": v} for k, v in fields.items()],
        title="Recorded run (not measured by this notebook)",
    )


def speedup_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Tabulate the step times of a record with achieved TFLOP/s and speedups.

    Parameters
    ----------
    data : dict
        A record's ``data`` (or the data that the benchmark script is about to save).

    Returns
    -------
    list of dict
        ``model, variant, feed, batch, ms/step, images/s, TFLOP/s`` (from the training FLOPs
        per image that the record carries), ``vs float32`` (strict, same model, feed and batch),
        ``vs float32+TF32`` and ``error`` (a configuration that failed, e.g. out of memory),
        sorted by model, feed, batch and variant.
    """
    steps = {(r["model"], r["variant"], r["feed"], r["batch"]): r for r in data["steps_s"]}
    rows = []
    for (model, variant, feed, n), r in steps.items():
        base = steps.get((model, "float32", feed, n), {})
        tf32 = steps.get((model, "float32-tf32", feed, n), {})
        flops = data["models"].get(model, {}).get("flops_per_image_training")
        ok = "median_s" in r
        rows.append(
            {
                "model": model,
                "variant": variant,
                "feed": feed,
                "batch": n,
                "ms/step": 1e3 * r["median_s"] if ok else None,
                "images/s": n / r["median_s"] if ok else None,
                "TFLOP/s": n / r["median_s"] * flops / 1e12 if ok and flops else None,
                "vs float32": base["median_s"] / r["median_s"]
                if ok and "median_s" in base
                else None,
                "vs float32+TF32": tf32["median_s"] / r["median_s"]
                if ok and "median_s" in tf32
                else None,
                "error": r.get("error", ""),
            }
        )
    order = {v: i for i, v in enumerate(VARIANT_ORDER)}
    return sorted(
        rows,
        key=lambda r: (r["model"], r["feed"], r["batch"], order.get(r["variant"], len(order))),
    )


def tensor_core_shares(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Tabulate the share of GPU time in Tensor Core kernels, per profiled training step.

    Parameters
    ----------
    data : dict
        A record's ``data``.

    Returns
    -------
    list of dict
        ``model, variant, batch, GPU time ms, share in Tensor Core kernels``; empty when no
        kernels were profiled (another backend than PyTorch).
    """
    return [
        {
            "model": k["model"],
            "variant": k["variant"],
            "batch": k["batch"],
            "GPU time ms": k["total_us"] / 1e3,
            "share in Tensor Core kernels": k["tensor_core_us"] / k["total_us"],
        }
        for k in data.get("kernels", [])
        if k["total_us"]
    ]


def step_time_runs(data: dict[str, Any], feed: str) -> dict[str, list[dict[str, Any]]]:
    """Regroup a record's step times for :func:`plot_step_times`: one run per model.

    Parameters
    ----------
    data : dict
        A record's ``data``.
    feed : str
        ``"host"`` or ``"device"``.

    Returns
    -------
    dict
        Model name: rows of ``policy`` (the variant), ``batch``, ``ms/step``, ``images/s``.
    """
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in speedup_rows(data):
        if r["feed"] == feed and r["ms/step"] is not None:
            runs.setdefault(r["model"], []).append(
                {
                    "policy": r["variant"],
                    "batch": r["batch"],
                    "ms/step": r["ms/step"],
                    "images/s": r["images/s"],
                }
            )
    return runs


_LINES = {"float32": "-", "float32-tf32": ":", "mixed_float16": "--", "mixed_bfloat16": "-."}
_MARKERS = "o^sDv"


def plot_step_times(runs: dict[str, list[dict[str, Any]]], title: str) -> Figure:
    """Plot step time and throughput against batch size, both axes logarithmic.

    One colour and marker shape per run; a solid line with filled markers for ``float32``,
    other line styles with open markers for the other policies, so that lines lying on top of
    each other stay visible.

    Parameters
    ----------
    runs : dict
        Label: rows with ``policy``, ``batch``, ``ms/step`` and ``images/s``.
    title : str
        The figure's title: say where the numbers were measured.

    Returns
    -------
    matplotlib.figure.Figure
        Two panels: milliseconds per step, and images per second.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    batches = sorted({r["batch"] for rows in runs.values() for r in rows})
    for i, (label, rows) in enumerate(runs.items()):
        present = {r["policy"] for r in rows}
        for policy in [p for p in _LINES if p in present] + sorted(present - set(_LINES)):
            sel = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["batch"])
            if not sel:
                continue
            for ax, key in zip(axes, ("ms/step", "images/s"), strict=True):
                ax.plot(
                    [r["batch"] for r in sel],
                    [r[key] for r in sel],
                    _LINES.get(policy, "-."),
                    marker=_MARKERS[i % len(_MARKERS)],
                    ms=7,
                    mfc=f"C{i}" if policy == "float32" else "white",
                    color=f"C{i}",
                    label=f"{label}, {policy}",
                )
    for ax, ylabel in zip(axes, ("ms per training step", "images per second"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(batches, [str(n) for n in batches])
        ax.set_xticks([], minor=True)
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig
