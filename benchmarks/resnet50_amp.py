"""ResNet50 training throughput and peak memory: strict FP32, TF32, AMP FP16, AMP BF16.

Every mode trains the same ResNet50 (torchvision) with SGD and momentum on synthetic images,
with ``cudnn.benchmark`` on. Strict FP32 turns TF32 off for matrix products and convolutions,
so that the baseline is fair; "tf32" turns it on; "amp-fp16" uses ``torch.autocast`` with
``torch.amp.GradScaler``; "amp-bf16" uses autocast with BF16 and no scaler. Each mode runs
in NCHW and, with ``--channels-last``, also in channels_last memory format. Images/s is the
batch size over the median step time; peak memory is ``torch.cuda.max_memory_allocated``
over the timed steps.

Usage::

    python benchmarks/resnet50_amp.py --save                      # GPU: the full comparison
    python benchmarks/resnet50_amp.py --model tiny --batch 4 --image-size 32 --steps 2  # smoke
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
from torch import nn

from mptutor import bench, hardware
from mptutor.table import Table

MODES = ("fp32-strict", "tf32", "amp-fp16", "amp-bf16")


def build_model(name: str) -> nn.Module:
    """ResNet50 from torchvision, or a tiny CNN for smoke tests on machines without it."""
    torch.manual_seed(0)
    if name == "resnet50":
        try:
            import torchvision
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise SystemExit(
                "resnet50 needs torchvision; use --model tiny for a smoke run"
            ) from exc
        return torchvision.models.resnet50(num_classes=1000)
    if name == "tiny":
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, 1000),
        )
    raise SystemExit(f"unknown model {name!r}: choose resnet50 or tiny")


def set_tf32(enabled: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def run_mode(mode: str, args: argparse.Namespace, channels_last: bool) -> dict:
    device = args.device
    cuda = device == "cuda"
    if cuda:
        set_tf32(mode == "tf32")
        torch.backends.cudnn.benchmark = True
    model = build_model(args.model).to(device)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp_dtype = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(mode)
    scaler = torch.amp.GradScaler(device, enabled=mode == "amp-fp16")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=gen)
    x = x.to(device).contiguous(memory_format=fmt)
    y = torch.randint(0, 1000, (args.batch,), generator=gen).to(device)

    def step() -> None:
        autocast = (
            torch.autocast(device, dtype=amp_dtype)
            if amp_dtype is not None
            else contextlib.nullcontext()
        )
        with autocast:
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {
        "mode": mode,
        "channels_last": channels_last,
        "batch": args.batch,
        "median_step_s": median,
        "images_per_s": args.batch / median,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "times_s": times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--channels-last", action="store_true", help="also run channels_last")
    parser.add_argument("--save", action="store_true", help="write data/results/<name>.json")
    args = parser.parse_args()
    modes = [m for m in args.modes if args.device == "cuda" or m not in ("tf32",)]
    rows = []
    for channels_last in [False, True] if args.channels_last else [False]:
        for mode in modes:
            rows.append(run_mode(mode, args, channels_last))
            if args.device == "cuda":
                torch.cuda.empty_cache()
    print(hardware.report().summary())
    print(
        Table(
            [
                {k: r[k] for k in ("mode", "channels_last", "images_per_s", "peak_memory_gib")}
                for r in rows
            ],
            float_format=".4g",
        )
    )
    base = {r["channels_last"]: r for r in rows if r["mode"] == "fp32-strict"}
    for r in rows:
        b = base.get(r["channels_last"])
        if b and r is not b:
            r["speedup_vs_fp32_strict"] = r["images_per_s"] / b["images_per_s"]
            if r["peak_memory_gib"] and b["peak_memory_gib"]:
                r["memory_vs_fp32_strict"] = r["peak_memory_gib"] / b["peak_memory_gib"]
            print(
                f"{r['mode']:9s} channels_last={r['channels_last']!s:5s} "
                f"speedup vs strict FP32 {r['speedup_vs_fp32_strict']:.2f}x"
            )
    if args.save:
        name = f"resnet50_amp-{args.device}"
        if args.device == "cuda":
            name += "-" + torch.cuda.get_device_name()
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
        data = {
            "model": args.model,
            "image_size": args.image_size,
            "rows": rows,
            "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(),
        }
        print("saved", bench.save_result(name, data))


if __name__ == "__main__":
    main()
