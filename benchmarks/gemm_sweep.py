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

Caches and clocks: on a GPU the products of a sample cycle through enough input pairs to fill
twice the L2 cache (the record gives ``input_sets`` per row), so that a 1024^3 product is not
timed on inputs that the cache still holds from the call before; and FP16 products keep the GPU
busy for --clock-warmup seconds before the first row, so that the first rows are not timed while
its clocks ramp up. ``nvidia-smi``'s clocks, power limit and throttle reasons before and after
the run are in the record. On a CPU the inputs are reused and its caches are not flushed.
FP8 products run with ``use_fast_accum=False`` (cuBLAS promotes the partial sums to higher
precision at intervals) unless --fp8-fast-accum; Hopper's FP8 Tensor Cores sum more narrowly than
FP32 between promotions (pytorch/11, section 6). After the timings the record also gets
``fp8_accumulation``: the error of ``torch._scaled_mm``'s sums with and without the flag at
several inner dimensions (``mptutor.torch.scaled_mm_accumulation``), which pytorch/11 shows.

Order and time: the sizes run in the order given (the GPU default puts the size the targets are
stated at, 8192, first, then the smaller ones). With --budget-s a size is not started once what
is left of the budget is shorter than the longest size so far took; the record lists such sizes
under ``skipped_sizes``.

Usage::

    python benchmarks/gemm_sweep.py                        # this machine (CPU: small sizes)
    python benchmarks/gemm_sweep.py --out DIR              # GPU: write the record into DIR
    python benchmarks/gemm_sweep.py --budget-s 45 --out DIR  # stop starting sizes after 45 s
    python benchmarks/gemm_sweep.py --smoke --out DIR      # tiny CPU run that checks the path
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # records and targets beside this file

import records  # noqa: E402
import targets  # noqa: E402
from ledger import Budget  # noqa: E402

from mptutor import formats, hardware  # noqa: E402
from mptutor import torch as mpt  # noqa: E402
from mptutor import torch_perf as tp  # noqa: E402
from mptutor.table import Table  # noqa: E402

#: The precisions of the sweep, as :data:`mptutor.formats.PRECISIONS` names them.
PRECISIONS = ["fp32", "tf32", "fp16", "bf16", "fp8_e4m3"]
#: How each timing method of ``tp.time_calls`` works (the ``method`` of every row's timing).
TIMING_METHODS = {
    "cuda-graph": "each sample replays a CUDA graph of `inner` back-to-back calls, timed with "
    "CUDA events; time per call = sample time / inner",
    "cuda-events": "each sample runs `inner` back-to-back calls from the host, timed with CUDA "
    "events (used when graph capture is turned off or fails); time per call = sample / inner",
    "wall-clock": "each sample runs `inner` back-to-back calls, timed with time.perf_counter; "
    "time per call = sample time / inner",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        default=None,
        help="cuda, cuda:N or cpu (default: cuda if any, unless MPTUTOR_DEVICE=cpu)",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument(
        "--precisions",
        nargs="+",
        default=PRECISIONS,
        type=formats.precision,
        choices=PRECISIONS,
        help=f"default: all of {' '.join(PRECISIONS)} (fp32: strict, TF32 off)",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed samples per product")
    parser.add_argument(
        "--min-sample-ms",
        type=float,
        default=None,
        help="shortest sample (default 10 on a GPU, 20 on a CPU)",
    )
    parser.add_argument("--no-graph", action="store_true", help="no CUDA graph on a GPU")
    parser.add_argument(
        "--clock-warmup", type=float, default=2.0, help="seconds of FP16 products first (GPU)"
    )
    parser.add_argument(
        "--fp8-fast-accum", action="store_true", help="FP8 with use_fast_accum=True"
    )
    parser.add_argument(
        "--budget-s", type=float, default=None, help="start no size after this many seconds"
    )
    records.add_record_options(
        parser, smoke_help="tiny run that checks the code path (CPU unless --device)"
    )
    args = parser.parse_args(argv)
    budget = Budget(args.budget_s)
    device = args.device or ("cpu" if args.smoke else mpt.device())
    gpu = torch.device(device).type == "cuda"
    gpu_before = records.gpu_state() if gpu else None
    if args.smoke:
        sizes, repeats, min_sample_s = args.sizes or [32], args.repeats or 2, 0.001
    else:
        sizes = args.sizes or ([targets.TARGET_GEMM_SIZE, 1024, 2048, 4096] if gpu else [256, 512])
        repeats = args.repeats or (10 if gpu else 5)
        min_sample_s = None
    if args.min_sample_ms is not None:
        min_sample_s = args.min_sample_ms / 1e3
    rows, skipped_sizes, longest = [], {}, 0.0
    for i, size in enumerate(sizes):
        if not budget.allows(longest):
            skipped_sizes[size] = budget.why_not()
            print(f"size {size}: {skipped_sizes[size]}")
            continue
        start = budget.spent()
        rows += tp.gemm_sweep(
            [size],
            device,
            args.precisions,
            repeats,
            min_sample_s,
            graph=not args.no_graph,
            fp8_fast_accum=args.fp8_fast_accum,
            clock_warmup_s=0.0 if args.smoke or i else args.clock_warmup,
        )
        longest = max(longest, budget.spent() - start)
    sizes = [s for s in sizes if s not in skipped_sizes]
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
                    "input sets": r.get("input_sets"),
                    "skipped": r.get("skipped"),
                }
                for r in rows
            ],
            float_format=".3g",
        )
    )
    tflops = {(r["precision"], r["m"]): r["tflops"] for r in rows if "tflops" in r}
    top = max(sizes, default=None)
    ratios = {}
    for num, den in (
        ("fp16", "fp32"),
        ("fp16", "tf32"),
        ("bf16", "fp32"),
        ("fp8_e4m3", "fp16"),
    ):
        if (num, top) in tflops and (den, top) in tflops:
            ratios[f"{num}/{den}"] = tflops[(num, top)] / tflops[(den, top)]
            print(f"{num} / {den} at {top}^3: {ratios[f'{num}/{den}']:.2f}x")
    methods = sorted({r["timing"]["method"] for r in rows if "timing" in r})
    # After the timings, never before them: how _scaled_mm sums FP8 products (well under a
    # second), with and without use_fast_accum, as pytorch/11 measures it live
    accumulation = None
    if "fp8_e4m3" in args.precisions:
        ks = [32, 256] if args.smoke else [64, 1024, 4096, 16384]
        try:
            accumulation = {
                "ks": ks,
                "rows": mpt.scaled_mm_accumulation(device, ks, 16 if args.smoke else 32),
                "what": "mptutor.torch.scaled_mm_accumulation: non-negative E4M3 operands, "
                "errors against the exact product of the same FP8 values",
            }
            print(Table(accumulation["rows"], float_format=".3g", title="FP8 accumulation"))
        except Exception as err:  # e.g. torch._scaled_mm refuses this GPU: keep the timings
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
            accumulation = {"skipped": f"{type(err).__name__}: {first_line}"}
            print("FP8 accumulation not measured:", accumulation["skipped"])
    data = {
        "sizes": sizes,
        "skipped_sizes": skipped_sizes,
        "budget_s": args.budget_s,
        "precisions": args.precisions,
        "repeats": repeats,
        "min_sample_s": min_sample_s,
        "timing_methods": {m: TIMING_METHODS[m] for m in methods},
        "clock_warmup_s": args.clock_warmup if gpu and not args.smoke else 0.0,
        "fp8_use_fast_accum": args.fp8_fast_accum,
        "tf32_api": tp.tf32_settings()["api"],
        "rows": rows,
        "ratios_at_largest": ratios,
        "fp8_accumulation": accumulation,
    }
    path = records.save_record("gemm_sweep", device, data, args, gpu_before=gpu_before)
    if path is not None:
        print("saved", path)
        checks = targets.check_targets([(path, records.read_record(path))], every_target=False)
        print(checks if len(checks) else "no target applies to this record")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
