"""GEMM throughput (TFLOP/s) by precision and shape: strict FP32, TF32, FP16, BF16, FP8.

Each product ``C = A @ B`` with ``A`` of shape (m, k) and ``B`` (k, n) does ``2*m*n*k``
floating-point operations. Each size n is measured next to n - 1 (a multiple of 8 and one that
is not). Strict FP32 turns TF32 off (``torch.backends.cuda.matmul.fp32_precision = "ieee"``),
so the FP32 baseline runs on the ordinary FP32 units; FP8 (E4M3 inputs through
``torch._scaled_mm``) is measured on GPUs of compute capability 8.9 or later.

Timing: on a GPU, each sample replays a CUDA graph of back-to-back products, with as many
products as it takes for one sample to last at least --min-sample-ms, and is timed with CUDA
events; the time per product is the sample's time over the number of products. So a small
product (1024^3 takes microseconds on an H100) is timed by the GPU's work, not by the rate at
which the host launches kernels. --no-graph launches the products from the host instead. On a
CPU the samples are timed with a wall clock. The record says which method was used.

Usage::

    python benchmarks/gemm_sweep.py                        # this machine (CPU: small sizes)
    python benchmarks/gemm_sweep.py --save                 # GPU: record data/results/*.json
    python benchmarks/gemm_sweep.py --smoke --save         # tiny CPU run, record in a temp dir
"""

from __future__ import annotations

import argparse

import torch

from mptutor import bench, hardware
from mptutor import torch_perf as tp
from mptutor.table import Table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        default=None,
        help="cuda, cuda:N or cpu (default: cuda if any, unless MPTUTOR_DEVICE=cpu)",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument(
        "--precisions", nargs="+", default=list(tp.PRECISIONS), choices=list(tp.PRECISIONS)
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed samples per product")
    parser.add_argument(
        "--min-sample-ms",
        type=float,
        default=None,
        help="shortest sample (default 10 on a GPU, 20 on a CPU)",
    )
    parser.add_argument("--no-graph", action="store_true", help="no CUDA graph on a GPU")
    bench.add_record_options(
        parser, smoke_help="tiny run that checks the code path (CPU unless --device)"
    )
    args = parser.parse_args(argv)
    device = args.device or ("cpu" if args.smoke else tp.default_device())
    gpu = tp.is_cuda(device)
    if args.smoke:
        sizes, repeats, min_sample_s = args.sizes or [32], args.repeats or 2, 0.001
    else:
        sizes = args.sizes or ([1024, 2048, 4096, 8192] if gpu else [256, 512])
        repeats = args.repeats or (10 if gpu else 5)
        min_sample_s = None
    if args.min_sample_ms is not None:
        min_sample_s = args.min_sample_ms / 1e3
    rows = tp.gemm_sweep(
        sizes, device, args.precisions, repeats, min_sample_s, graph=not args.no_graph
    )
    print(hardware.report().summary())
    print(
        Table(
            [
                {
                    "precision": r["precision"],
                    "n": r["m"],
                    "TFLOP/s": r.get("tflops"),
                    "timing": r["timing"]["method"] if "timing" in r else None,
                    "products/sample": r["timing"]["inner"] if "timing" in r else None,
                    "skipped": r.get("skipped"),
                }
                for r in rows
            ],
            float_format=".3g",
        )
    )
    tflops = {(r["precision"], r["m"]): r["tflops"] for r in rows if "tflops" in r}
    top = max(sizes)
    ratios = {}
    for num, den in (
        ("fp16", "fp32-strict"),
        ("fp16", "tf32"),
        ("bf16", "fp32-strict"),
        ("fp8-e4m3", "fp16"),
    ):
        if (num, top) in tflops and (den, top) in tflops:
            ratios[f"{num}/{den}"] = tflops[(num, top)] / tflops[(den, top)]
            print(f"{num} / {den} at {top}^3: {ratios[f'{num}/{den}']:.2f}x")
    if args.save:
        methods = sorted({r["timing"]["method"] for r in rows if "timing" in r})
        data = {
            "sizes": sizes,
            "precisions": args.precisions,
            "repeats": repeats,
            "min_sample_s": min_sample_s,
            "timing_methods": {m: tp.TIMING_METHODS[m] for m in methods},
            "tf32_api": tp.tf32_settings()["api"],
            "rows": rows,
            "ratios_at_largest": ratios,
        }
        path = tp.save_record("gemm_sweep", device, data, args.smoke, args.out_dir)
        print("saved", path)
        checks = bench.check_targets([(path, bench.load_result(path))], every_target=False)
        print(checks if len(checks) else "no target applies to this record")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
