"""GEMM throughput (TFLOP/s) by precision and shape: strict FP32, TF32, FP16, BF16, FP8.

Each product ``C = A @ B`` with ``A`` of shape (m, k) and ``B`` (k, n) does ``2*m*n*k``
floating-point operations. Shapes come in pairs: a multiple of 8 and the same size minus one,
to show the Tensor Core rule of the GTC talk. Strict FP32 turns TF32 off
(``torch.backends.cuda.matmul.allow_tf32 = False``), so the FP32 baseline is fair; FP8 (E4M3
inputs through ``torch._scaled_mm``) is measured on GPUs of compute capability 8.9 or later.
Each timing is the median of repeats of a batch of products between device syncs.

Usage::

    python benchmarks/gemm_sweep.py                        # this machine (CPU: small sizes)
    python benchmarks/gemm_sweep.py --sizes 8192 --save    # GPU: record data/results/*.json
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from mptutor import bench, hardware
from mptutor.table import Table

PRECISIONS = ("fp32-strict", "tf32", "fp16", "bf16", "fp8-e4m3")


def supported(precision: str, device: str) -> str | None:
    """Return why a precision cannot run here, or None when it can."""
    if device == "cpu":
        return "TF32 and FP8 are GPU formats" if precision in ("tf32", "fp8-e4m3") else None
    major, minor = torch.cuda.get_device_capability()
    if precision in ("tf32", "bf16") and major < 8:
        return f"needs compute capability 8.0, this GPU has {major}.{minor}"
    if precision == "fp8-e4m3" and (major, minor) < (8, 9):
        return f"needs compute capability 8.9, this GPU has {major}.{minor}"
    return None


def make_product(precision: str, m: int, n: int, k: int, device: str) -> Callable[[], object]:
    """Return a function that runs one product of the given precision and shape."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(m, k, device=device, generator=gen)
    b = torch.randn(k, n, device=device, generator=gen)
    if precision in ("fp32-strict", "tf32"):
        return lambda: a @ b
    if precision in ("fp16", "bf16"):
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        a16, b16 = a.to(dtype), b.to(dtype)
        return lambda: a16 @ b16
    # FP8: row-major A and column-major B, per-tensor scales of 1, BF16 output
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def measure(sizes: list[int], device: str, repeats: int, inner: int) -> list[dict]:
    rows = []
    for size in sizes:
        for m in (size, size - 1):
            for precision in PRECISIONS:
                why = supported(precision, device)
                row = {"precision": precision, "m": m, "n": m, "k": m}
                if why is None and precision == "fp8-e4m3" and m % 16:
                    why = "FP8 products need dimensions divisible by 16"
                if why is not None:
                    rows.append({**row, "skipped": why})
                    continue
                if device == "cuda":
                    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
                product = make_product(precision, m, m, m, device)
                timing = bench.time_fn(
                    lambda p=product: [p() for _ in range(inner)], repeats=repeats, device=device
                )
                seconds = timing.median / inner
                rows.append(
                    {
                        **row,
                        "seconds": seconds,
                        "tflops": 2 * m**3 / seconds / 1e12,
                        "times_s": [t / inner for t in timing.times],
                    }
                )
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--inner", type=int, default=None, help="products per timed call")
    parser.add_argument("--save", action="store_true", help="write data/results/<name>.json")
    args = parser.parse_args()
    gpu = args.device == "cuda"
    sizes = args.sizes or ([1024, 2048, 4096, 8192] if gpu else [256, 512])
    inner = args.inner or (10 if gpu else 2)
    rows = measure(sizes, args.device, args.repeats, inner)
    print(hardware.report().summary())
    print(
        Table(
            [{k: r.get(k) for k in ("precision", "m", "tflops", "skipped")} for r in rows],
            float_format=".3g",
        )
    )
    by = {(r["precision"], r["m"]): r.get("tflops") for r in rows}
    top = max(sizes)
    ratios = {}
    for num, den in (("fp16", "fp32-strict"), ("fp16", "tf32"), ("bf16", "fp32-strict")):
        if by.get((num, top)) and by.get((den, top)):
            ratios[f"{num}/{den}"] = by[(num, top)] / by[(den, top)]
            print(f"{num} / {den} at {top}^3: {ratios[f'{num}/{den}']:.2f}x")
    if args.save:
        name = f"gemm_sweep-{args.device}"
        if gpu:
            name += "-" + torch.cuda.get_device_name().replace(" ", "_").replace("/", "_")
        data = {
            "device": args.device,
            "sizes": sizes,
            "inner": inner,
            "rows": rows,
            "ratios_at_largest": ratios,
            "torch": torch.__version__,
        }
        print(
            "saved", bench.save_result("".join(c for c in name if c.isalnum() or c in "-_"), data)
        )


if __name__ == "__main__":
    main()
