"""ResNet50 training throughput and peak memory: strict FP32, TF32, AMP FP16, AMP BF16.

Every mode trains the same ResNet50 (torchvision) with SGD and momentum on one synthetic batch,
with ``cudnn.benchmark`` on. Strict FP32 turns TF32 off for matrix products and convolutions
(``fp32_precision = "ieee"``), so that the baseline runs on the ordinary FP32 units; "tf32"
turns it on; "amp_fp16" uses ``torch.autocast`` with ``torch.amp.GradScaler``; "amp_bf16" uses
autocast with BF16 and no scaler. Each mode runs in NCHW and in the channels_last memory
format (``--layouts`` picks). Images/s is the batch size over the median step time (each step
timed between device syncs; a ResNet50 step takes tens of milliseconds or more); peak memory is
``torch.cuda.max_memory_allocated`` over the timed steps.

Modes are named as in ``mptutor.formats.PRECISIONS`` ("fp32" is strict FP32, TF32 off).
Speed-ups are given two ways: against strict FP32 in the same layout (``speedup_vs_fp32`` per
row), and with each mode at its own best layout (``best_layouts``): strict FP32 may run
faster in NCHW while the AMP modes run faster in channels_last, and a speed-up against FP32 held
in its slower layout would flatter mixed precision. The project's targets use the second.

Order and time: on a GPU an untimed warm-up runs first (one ``measure_training`` call at a
small batch, ``--warmup-batch``, in the first layout and mode): it pays the one-time start-up (the
CUDA context, loading cuDNN and cuBLAS) so that no measured run carries it; its seconds are
printed and stored as ``startup_s`` (no row). Then channels_last (the layout of the images/s
target), then NCHW, each mode in the order of --modes. With --budget-s a mode is not started once
what is left is shorter than what it took in the other layout (or, before that, the longest run
so far); the record lists it under ``skipped`` with the reason. The record is saved after every
run (``complete`` false until the end), so that a run stopped from outside keeps what it measured.

Usage::

    python benchmarks/resnet50_amp.py --out DIR          # GPU: the full comparison, recorded
    python benchmarks/resnet50_amp.py --steps 30 --budget-s 120 --out DIR  # within 120 s
    python benchmarks/resnet50_amp.py --smoke --out DIR  # tiny CPU run that checks the path
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # records and targets beside this file

import records  # noqa: E402
import targets  # noqa: E402
from ledger import Budget  # noqa: E402

from mptutor import formats, hardware  # noqa: E402
from mptutor import torch as mpt  # noqa: E402
from mptutor import torch_perf as tp  # noqa: E402
from mptutor.table import Table  # noqa: E402

LAYOUTS = {"channels_last": True, "nchw": False}
#: The training modes of ``tp.measure_training``, as ``mptutor.formats.PRECISIONS`` names them.
MODES = ["fp32", "tf32", "amp_fp16", "amp_bf16"]


def build_model(name: str) -> nn.Module:
    """ResNet50 from torchvision, or a tiny CNN for smoke runs."""
    if name == "resnet50":
        try:
            import torchvision
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise SystemExit("resnet50 needs torchvision; use --smoke for a tiny run") from exc
        return torchvision.models.resnet50(num_classes=1000)
    if name == "tiny":
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, 1000),
        )
    raise SystemExit(f"unknown model {name!r}: choose resnet50 or tiny")


def compare(rows: list[dict]) -> list[dict]:
    """Add each row's ratios to strict FP32 and TF32 in its layout; return the best-layout rows."""
    base = {r["channels_last"]: r for r in rows if r["mode"] == "fp32"}
    tf32_rows = {r["channels_last"]: r for r in rows if r["mode"] == "tf32"}
    for r in rows:
        b, t = base.get(r["channels_last"]), tf32_rows.get(r["channels_last"])
        if b is not None and r is not b:
            r["speedup_vs_fp32"] = r["images_per_s"] / b["images_per_s"]
            if r["peak_memory_gib"] and b["peak_memory_gib"]:
                r["memory_vs_fp32"] = r["peak_memory_gib"] / b["peak_memory_gib"]
        if t is not None and r["mode"].startswith("amp"):
            r["speedup_vs_tf32"] = r["images_per_s"] / t["images_per_s"]
    best = targets.best_layouts(rows)
    best_rows = []
    for mode, r in best.items():
        row = {"mode": mode, "best layout": "channels_last" if r["channels_last"] else "nchw"}
        row["images_per_s"] = r["images_per_s"]
        row["peak_memory_gib"] = r["peak_memory_gib"]
        for base in ("fp32", "tf32"):
            if base in best and mode != base:
                row[f"speedup_vs_{base}"] = r["images_per_s"] / best[base]["images_per_s"]
        if "fp32" in best and r["peak_memory_gib"] and mode != "fp32":
            row["memory_vs_fp32"] = r["peak_memory_gib"] / best["fp32"]["peak_memory_gib"]
        best_rows.append(row)
    return best_rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        default=None,
        help="cuda, cuda:N or cpu (default: cuda if any, unless MPTUTOR_DEVICE=cpu)",
    )
    parser.add_argument("--model", default=None, help="resnet50 (default) or tiny")
    parser.add_argument("--batch", type=int, default=None, help="default 256 (smoke: 2)")
    parser.add_argument("--image-size", type=int, default=None, help="default 224 (smoke: 16)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps, default 20")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps, default 5")
    parser.add_argument("--modes", nargs="+", default=MODES, type=formats.precision, choices=MODES)
    parser.add_argument(
        "--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS), help="default both"
    )
    parser.add_argument(
        "--budget-s", type=float, default=None, help="start no run after this many seconds"
    )
    parser.add_argument(
        "--warmup-batch",
        type=int,
        default=None,
        help="batch of the untimed start-up run before the measured ones; 0: none "
        "(default 8 on a GPU, none on a CPU)",
    )
    records.add_record_options(
        parser, smoke_help="tiny model and batch, checks the code path (CPU unless --device)"
    )
    args = parser.parse_args(argv)
    budget = Budget(args.budget_s)
    device = args.device or ("cpu" if args.smoke else mpt.device())
    gpu_before = records.gpu_state() if torch.device(device).type == "cuda" else None
    small = args.smoke
    model = args.model or ("tiny" if small else "resnet50")
    batch = args.batch or (2 if small else 256)
    image_size = args.image_size or (16 if small else 224)
    steps = args.steps or (1 if small else 20)
    warmup = args.warmup if args.warmup is not None else (1 if small else 5)
    layouts = [v for k, v in LAYOUTS.items() if k in args.layouts]
    if args.warmup_batch is not None and args.warmup_batch < 0:
        parser.error(f"--warmup-batch must be 0 or more, got {args.warmup_batch}")
    cuda = torch.device(device).type == "cuda"
    warmup_batch = args.warmup_batch if args.warmup_batch is not None else (8 if cuda else 0)
    startup: dict = {"startup_s": None, "startup": None}

    def save(rows: list[dict], skipped: dict, complete: bool = False):
        # after every run too, so that a part stopped from outside keeps the runs it finished
        data = {
            "model": model,
            "batch": batch,
            "image_size": image_size,
            "steps": steps,
            "warmup": warmup,
            "timing": "median of per-step wall-clock times, each step between device syncs",
            **startup,
            "skipped": skipped,
            "budget_s": args.budget_s,
            "complete": complete,
            "rows": rows,
            "best_layouts": compare(rows),
        }
        return records.save_record("resnet50_amp", device, data, args, gpu_before=gpu_before)

    rows, skipped, took = [], {}, {}
    if warmup_batch and layouts and budget.allows():
        # The first run on a GPU pays the CUDA context and the loading of cuDNN and cuBLAS (on
        # an H200 the first run took 78 s, later ones ~23 s): left in the first measured run,
        # it would also be the estimate of every mode not run yet, and block them.
        first = "channels_last" if layouts[0] else "nchw"
        start = budget.spent()
        tp.measure_training(
            lambda: build_model(model),
            args.modes[0],
            warmup_batch,
            image_size,
            1000,
            device,
            1,
            1,
            layouts[0],
        )
        startup["startup_s"] = budget.spent() - start
        startup["startup"] = (
            f"an untimed run of {args.modes[0]} {first} at batch {warmup_batch} (one step and "
            "one warm-up) before the measured runs: the one-time start-up, not in any row"
        )
        print(f"start-up: {startup['startup_s']:.1f} s ({startup['startup']})", flush=True)
    for channels_last in layouts:
        for mode in args.modes:
            layout = "channels_last" if channels_last else "nchw"
            if not budget.allows(took.get(mode, max(took.values(), default=0.0))):
                skipped[f"{mode} {layout}"] = budget.why_not()
                continue
            start = budget.spent()
            row = tp.measure_training(
                lambda: build_model(model),
                mode,
                batch,
                image_size,
                1000,
                device,
                steps,
                warmup,
                channels_last,
            )
            took[mode] = budget.spent() - start
            if "skipped" in row:
                skipped[mode] = row["skipped"]
            else:
                rows.append(row)
                print(f"{mode} {layout}: {row['images_per_s']:.4g} images/s", flush=True)
                save(rows, skipped)
    best_rows = compare(rows)
    print(hardware.report().summary(), f"| {model}, batch {batch}, {image_size} px")
    columns = (
        "mode",
        "channels_last",
        "images_per_s",
        "peak_memory_gib",
        "speedup_vs_fp32",
        "speedup_vs_tf32",
        "memory_vs_fp32",
    )
    print(Table([{k: r.get(k) for k in columns} for r in rows], float_format=".4g",
                title="Each mode against strict FP32 and TF32 in the same layout"))  # fmt: skip
    print(Table(best_rows, float_format=".4g", title="Each mode at its best layout"))
    for mode, why in skipped.items():
        print(f"not measured: {mode}: {why}")
    path = save(rows, skipped, complete=True)
    if path is not None:
        print("saved", path)
        checks = targets.check_targets([(path, records.read_record(path))], every_target=False)
        print(checks if len(checks) else "no target applies to this record")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
