"""Training step time of transformer blocks: FP8 linear layers against BF16 autocast.

Both variants train the same stack of pre-norm transformer blocks (LayerNorm, a QKV projection,
causal scaled-dot-product attention, an output projection, LayerNorm, an MLP of 4x the width
with GELU) from FP32 master weights with AdamW, under ``torch.autocast(dtype=torch.bfloat16)``:

- ``bf16``: autocast as it is, every matrix product in BF16;
- ``fp8``: every ``nn.Linear`` replaced by ``mptutor.torch.FP8Linear`` (``to_fp8``): input and
  weight in E4M3, the output gradient in E5M2, delayed scaling (amax window of
  --history-len), products through ``torch._scaled_mm``, the forward one with
  ``use_fast_accum`` unless --no-fast-accum; attention, LayerNorm and GELU stay as autocast
  runs them;
- ``torchao_tensorwise`` and ``torchao_rowwise``: every ``nn.Linear`` converted by torchao's
  ``convert_to_float8_training`` with its "tensorwise" or "rowwise" recipe (dynamic scaling,
  per tensor or per row). They are measured when torchao imports beside this PyTorch; when it
  does not, or a recipe fails on the device, the record says so under ``unavailable`` and the
  other variants are measured as usual.

Timing: for each width the two variants alternate in rounds, so that drift of the machine hits
both alike; each timed step (forward, backward, optimizer) is bracketed by device syncs.
With --compile both models go through ``torch.compile`` (the FP8 casts and amax reductions
fuse); "both" (the default on a GPU) measures eager and compiled. The record holds every
step's time, the median per variant and the speed-up (BF16 step time / FP8 step time) per
width, and the first losses of each (the FP8 runs must stay finite). The target is read from
the ``fp8`` rows (the project's delayed scaling); torchao's rows carry their own speed-ups.

Order and time: eager runs first, then compiled ones, each over the widths in the order given.
With --budget-s a width is not started once what is left is shorter than the longest unit so far
took, and the record is saved after every unit, so that a run stopped from outside (a compile
that outlasts the part's time) still leaves what it measured.

Usage::

    python benchmarks/fp8_step.py --out DIR              # GPU: widths 2048 and 4096, record
    python benchmarks/fp8_step.py --smoke --out DIR      # tiny CPU run that checks the path
    python benchmarks/fp8_step.py --variants bf16 fp8 torchao_tensorwise --budget-s 90 --out DIR
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # records and targets beside this file

import records  # noqa: E402
import targets  # noqa: E402
from ledger import Budget  # noqa: E402

from mptutor import hardware  # noqa: E402
from mptutor import torch as mpt  # noqa: E402

VARIANTS = ("bf16", "fp8", "torchao_tensorwise", "torchao_rowwise")
#: torchao's recipe of each torchao variant.
TORCHAO_RECIPES = {"torchao_tensorwise": "tensorwise", "torchao_rowwise": "rowwise"}


def torchao_state() -> dict:
    """Whether torchao's float8 training imports here: version, or the error."""
    try:
        ao = mpt.import_torchao()
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any failure to import is recorded as such
        return {"imported": False, "error": f"{type(error).__name__}: {error}"[:500]}
    return {"imported": True, "version": getattr(ao, "__version__", None)}


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention, then an MLP of 4x the width."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, seq, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(batch, seq, width))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def build(variant: str, width: int, args: argparse.Namespace, device: torch.device):
    """Return a model of ``args.layers`` blocks for one variant, its optimizer and step."""
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(width, args.heads) for _ in range(args.layers)]).to(device)
    if variant == "fp8":
        mpt.to_fp8(
            model, scaling="delayed", history_len=args.history_len, fast_accum=args.fast_accum
        )
    elif variant in TORCHAO_RECIPES:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        config = Float8LinearConfig.from_recipe_name(TORCHAO_RECIPES[variant])
        convert_to_float8_training(model, config=config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    forward = torch.compile(model) if args.compiled else model

    def step(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = forward(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return model, step


def measure(
    width: int, args: argparse.Namespace, device: torch.device, unavailable: dict | None = None
) -> list[dict]:
    """Time the variants of ``args.variants`` at one width; one row per variant measured.

    ``bf16`` and ``fp8`` must run. A torchao variant that fails to build or to take its warm-up
    steps is left out, with the error put into ``unavailable`` (variant -> reason).
    """
    unavailable = {} if unavailable is None else unavailable
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(args.batch, args.seq, width, generator=gen).to(device)
    steps, losses = {}, {}
    for v in args.variants:
        if v in unavailable:
            continue
        try:
            steps[v] = build(v, width, args, device)[1]
            losses[v] = [float(steps[v](x)) for _ in range(args.warmup)]
        except Exception as error:  # noqa: BLE001 - a recipe this device lacks is recorded
            if v not in TORCHAO_RECIPES:
                raise
            unavailable[v] = f"width {width}: {type(error).__name__}: {error}"[:500]
            steps.pop(v, None)
    variants = list(steps)
    times: dict[str, list[float]] = {v: [] for v in variants}

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(args.rounds):
        for v in variants:
            for _ in range(args.iters):
                sync()
                start = time.perf_counter()
                steps[v](x)
                sync()
                times[v].append(time.perf_counter() - start)
    tokens = args.batch * args.seq
    rows = []
    for v in variants:
        med = statistics.median(times[v])
        rows.append({
            "variant": v, "width": width, "layers": args.layers, "heads": args.heads,
            "batch": args.batch, "seq": args.seq, "tokens": tokens, "compiled": args.compiled,
            "times_s": times[v], "median_s": med, "tokens_per_s": tokens / med,
            "warmup_losses": losses[v],
        })  # fmt: skip
    for row in rows[1:]:
        row["speedup_vs_bf16"] = rows[0]["median_s"] / row["median_s"]
    for v in variants[1:]:
        if not all(math.isfinite(a) for a in losses[v]):
            raise SystemExit(f"the {v} run at width {width} gave a non-finite loss: {losses[v]}")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        default=None,
        help="cuda, cuda:N or cpu (default: cuda if any, unless MPTUTOR_DEVICE=cpu)",
    )
    parser.add_argument("--widths", type=int, nargs="+", default=None, help="model widths")
    parser.add_argument("--layers", type=int, default=None, help="blocks (default 2; smoke 1)")
    parser.add_argument("--heads", type=int, default=None, help="default width // 128")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--seq", type=int, default=None, help="sequence length")
    parser.add_argument("--history-len", type=int, default=16, help="delayed-scaling window")
    parser.add_argument(
        "--fast-accum",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="use_fast_accum for the forward FP8 product (torchao's default; the gradients' "
        "products never use it)",
    )
    parser.add_argument(
        "--compile", choices=("off", "on", "both"), default=None,
        help="torch.compile both models (default: both on a GPU, off on a CPU)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=None, help="default 5")
    parser.add_argument("--iters", type=int, default=None, help="default 5")
    parser.add_argument("--warmup", type=int, default=None, help="default 3")
    parser.add_argument(
        "--variants", nargs="+", choices=VARIANTS, default=None,
        help="bf16 and fp8 always; default on a GPU: all four, else bf16 fp8",
    )  # fmt: skip
    parser.add_argument(
        "--budget-s", type=float, default=None, help="start no width after this many seconds"
    )
    records.add_record_options(
        parser, smoke_help="width 32, one block, a few steps on the CPU (unless --device)"
    )
    args = parser.parse_args(argv)
    budget = Budget(args.budget_s)
    device = torch.device(args.device or ("cpu" if args.smoke else mpt.device()))
    gpu = device.type == "cuda"
    asked = args.variants or (VARIANTS if gpu else VARIANTS[:2])
    args.variants = ["bf16", "fp8"] + [v for v in VARIANTS[2:] if v in asked]
    torchao = torchao_state() if len(args.variants) > 2 else None
    unavailable = {}
    if torchao is not None and not torchao["imported"]:
        unavailable = {v: f"torchao did not import: {torchao['error']}" for v in args.variants[2:]}
    gpu_before = records.gpu_state() if gpu else None
    small = args.smoke or not gpu  # _scaled_mm on a CPU is a slow reference kernel
    args.widths = args.widths or ([32] if args.smoke else [64] if small else [2048, 4096])
    args.layers = args.layers or (1 if small else 2)
    args.batch = args.batch or (2 if small else 4)
    args.seq = args.seq or (16 if small else 2048)
    args.rounds = args.rounds or (1 if args.smoke else 5)
    args.iters = args.iters or (2 if args.smoke else 5)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 3)
    modes = {"off": [False], "on": [True], "both": [False, True]}[
        args.compile or ("both" if gpu else "off")
    ]
    print(hardware.report().summary())
    if torchao is not None:
        print("torchao:", torchao.get("version") or torchao["error"])
    rows, skipped, longest, path = [], {}, 0.0, None
    for compiled in modes:
        for width in args.widths:
            unit = f"width {width}, {'compiled' if compiled else 'eager'}"
            if not budget.allows(longest):
                skipped[unit] = budget.why_not()
                print(f"{unit}: {skipped[unit]}")
                continue
            start = budget.spent()
            run = argparse.Namespace(**vars(args))
            run.heads, run.compiled = args.heads or max(1, width // 128), compiled
            for row in measure(width, run, device, unavailable):
                rows.append(row)
                gain = row.get("speedup_vs_bf16")
                print(
                    f"width {width:5d} x {run.layers} blocks, {row['tokens']} tokens, "
                    f"{'compiled' if compiled else 'eager':8s} {row['variant']:18s} "
                    f"{1e3 * row['median_s']:9.2f} ms/step"
                    + (f"  FP8 speed-up {gain:.2f}x" if gain else "")
                )
            longest = max(longest, budget.spent() - start)
            path = _save(rows, skipped, unavailable, torchao, args, device, gpu_before)
    path = _save(rows, skipped, unavailable, torchao, args, device, gpu_before, complete=True)
    for v, why in unavailable.items():
        print(f"not measured: {v}: {why}")
    if path is not None:
        print(f"saved {path}")
        checks = targets.check_targets([(path, records.read_record(path))], every_target=False)
        print(checks if len(checks) else "no target applies to this record")


def _save(rows, skipped, unavailable, torchao, args, device, gpu_before, complete=False):
    """Write the record of the rows so far (``complete`` once every unit ran or was skipped)."""
    speedups = [r["speedup_vs_bf16"] for r in rows if r["variant"] == "fp8"]
    data = {
        "what": "training step (forward, backward, AdamW) of transformer blocks under BF16 "
        "autocast; fp8: nn.Linear -> mptutor.torch.FP8Linear, delayed scaling; torchao_*: "
        "torchao.float8.convert_to_float8_training with that recipe",
        "timing": "wall clock between device syncs, one step per sample",
        "history_len": args.history_len,
        "fast_accum_forward": args.fast_accum,
        "rounds": args.rounds,
        "iters_per_round": args.iters,
        "warmup": args.warmup,
        "variants": args.variants,
        "torchao": torchao,
        "unavailable": unavailable,
        "budget_s": args.budget_s,
        "skipped": skipped,
        "complete": complete,
        "rows": rows,
        "best_speedup_fp8_vs_bf16": max(speedups, default=None),
    }
    return records.save_record("fp8_step", device, data, args, gpu_before=gpu_before)


if __name__ == "__main__":
    main()
