"""Step time of mptutor's MasterWeightOptimizer + DynamicLossScaler vs torch.amp.GradScaler.

Both train the same network with the same optimizer (SGD with momentum) in FP16:

- mptutor: the network converted to FP16 (BatchNorm in FP32), FP32 master weights kept by
  ``MasterWeightOptimizer``, loss scaled by ``DynamicLossScaler``;
- torch: the FP32 network under ``torch.autocast(dtype=torch.float16)`` with
  ``torch.amp.GradScaler``, PyTorch's own recipe.

Layout: with channels_last (the default for a convolutional model on a GPU), each model is put
in channels_last *before* its FP32 master copies are made, so that the FP16 weights and their
masters have the same strides and the fused copies between them (``torch._foreach_copy_``) run
on their fast path. The script checks that the strides match, and stops if they do not.

Each round times mptutor's iterations, then torch's (always in that order), so drift of the
machine from round to round hits both alike. Two ratios are reported (mptutor / torch, median of
repeats): the whole training step (forward, backward and optimizer: the figure the project's
target is stated for), and the optimizer part alone (unscale, inf check, step, scale update). On
a GPU the host syncs are counted with ``torch.cuda.set_sync_debug_mode``, for the optimizer part
and for the whole step, and one optimizer part of each runs under the profiler
(``mptutor.torch.tensor_core_kernels``): its kernel launches and kernel time
(``optimizer_part_kernels``), to set against the part's wall-clock time.

Time: with --budget-s no round starts once what is left is shorter than the longest round so
far took (the first round always runs); the record gives the rounds run.

Usage::

    python benchmarks/scaler_overhead.py                   # CPU: small MLP
    python benchmarks/scaler_overhead.py --out DIR         # GPU: ResNet50 (torchvision), record
    python benchmarks/scaler_overhead.py --budget-s 30 --out DIR  # rounds within 30 s
    python benchmarks/scaler_overhead.py --smoke --out DIR # tiny CNN on CPU, checks the path
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # records and targets beside this file

import records  # noqa: E402
import targets  # noqa: E402
from ledger import Budget  # noqa: E402

from mptutor import torch as mpt  # noqa: E402
from mptutor.scaling import DynamicLossScaler  # noqa: E402

CONV_MODELS = ("resnet50", "tiny-cnn")


def build_model(name: str, seed: int = 0) -> tuple[nn.Module, tuple[int, ...], int]:
    """Return a fresh FP32 model, its input shape (without batch) and number of classes."""
    torch.manual_seed(seed)
    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50(num_classes=1000), (3, 224, 224), 1000
    if name == "mlp":
        width = 1024
        layers: list[nn.Module] = [nn.Flatten()]
        sizes = [512, width, width, width, width]
        for a, b in zip(sizes[:-1], sizes[1:], strict=True):
            layers += [nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU()]
        layers.append(nn.Linear(width, 16))
        return nn.Sequential(*layers), (512,), 16
    if name == "tiny-cnn":
        return (
            nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1, bias=False),
                nn.BatchNorm2d(8),
                nn.ReLU(),
                nn.Conv2d(8, 16, 3, padding=1, bias=False),
                nn.BatchNorm2d(16),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(16, 10),
            ),
            (3, 16, 16),
            10,
        )
    raise ValueError(f"unknown model {name!r}; choose resnet50, mlp or tiny-cnn")


def _sgd(params):
    return torch.optim.SGD(params, lr=1e-3, momentum=0.9)


def _layout(channels_last: bool) -> torch.memory_format:
    return torch.channels_last if channels_last else torch.contiguous_format


def stride_mismatches(tensors: list[torch.Tensor], others: list[torch.Tensor]) -> list[int]:
    """Positions where two lists of same-shaped tensors differ in strides (memory layout).

    A model's FP16 parameters and their FP32 master copies must share a layout (both
    channels_last, or both contiguous): fused copies between them (``torch._foreach_copy_``)
    take a slower path when the strides differ. Raises ValueError if the lists differ in length
    or a pair in shape.
    """
    if len(tensors) != len(others):
        raise ValueError(f"{len(tensors)} tensors against {len(others)}")
    bad = []
    for i, (a, b) in enumerate(zip(tensors, others, strict=True)):
        if a.shape != b.shape:
            raise ValueError(f"pair {i} differs in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
        if a.stride() != b.stride():
            bad.append(i)
    return bad


class Mptutor:
    """FP16 model with FP32 master weights and dynamic loss scaling."""

    def __init__(self, model: nn.Module, device: torch.device, channels_last: bool) -> None:
        # layout first, master copies second: the masters inherit the model's strides
        model = model.to(device, memory_format=_layout(channels_last))
        self.model = mpt.network_to_half(model)
        self.opt = mpt.MasterWeightOptimizer(_sgd, self.model, DynamicLossScaler())
        bad = stride_mismatches(self.opt.model_params, self.opt.master_params)
        if bad:
            raise SystemExit(
                f"{len(bad)} FP16 parameters and their FP32 masters differ in strides; "
                "the comparison would time the slow copy path"
            )

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        loss = nn.functional.cross_entropy(self.model(x.half()).float(), y)
        self.opt.backward(loss)

    def step(self) -> None:
        self.opt.step()


class TorchAmp:
    """FP32 model under autocast with torch.amp.GradScaler."""

    def __init__(self, model: nn.Module, device: torch.device, channels_last: bool) -> None:
        self.model = model.to(device, memory_format=_layout(channels_last))
        self.device_type = device.type
        self.opt = _sgd(self.model.parameters())
        self.scaler = torch.amp.GradScaler(device.type)

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.autocast(self.device_type, dtype=torch.float16):
            loss = nn.functional.cross_entropy(self.model(x), y)
        self.scaler.scale(loss).backward()

    def step(self) -> None:
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)


def measure(args: argparse.Namespace, budget: Budget | None = None) -> dict:
    budget = budget or Budget(None)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    model_a, shape, classes = build_model(args.model)
    model_b, _, _ = build_model(args.model)
    if cuda:
        torch.backends.cudnn.benchmark = True
    trainers = {
        "mptutor": Mptutor(model_a, device, args.channels_last),
        "torch": TorchAmp(model_b, device, args.channels_last),
    }
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(args.batch, *shape, generator=gen).to(device)
    y = torch.randint(0, classes, (args.batch,), generator=gen).to(device)
    if args.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    iteration = {k: [] for k in trainers}
    step = {k: [] for k in trainers}
    for t in trainers.values():  # warm-up: kernels, optimizer state, allocator
        for _ in range(args.warmup):
            t.forward_backward(x, y)
            t.step()
    rounds, longest = 0, 0.0
    for _ in range(args.rounds):
        if rounds and not budget.allows(longest):
            break
        round_start = budget.spent()
        rounds += 1
        for name, t in trainers.items():
            for _ in range(args.iters):
                sync()
                start = time.perf_counter()
                t.forward_backward(x, y)
                sync()
                mid = time.perf_counter()
                t.step()
                sync()
                end = time.perf_counter()
                iteration[name].append(end - start)
                step[name].append(end - mid)
        longest = max(longest, budget.spent() - round_start)

    mp = trainers["mptutor"].opt
    result = {
        "model": args.model,
        "batch": args.batch,
        "device": str(device),
        "channels_last": args.channels_last,
        "master_strides_match": not stride_mismatches(mp.model_params, mp.master_params),
        "rounds": rounds,
        "rounds_asked": args.rounds,
        "budget_s": budget.seconds,
        "iters_per_round": args.iters,
        "parameters": sum(p.numel() for p in model_b.parameters()),
        "parameter_tensors": sum(1 for _ in model_b.parameters()),
        "timing": "wall clock between device syncs: forward+backward, then the optimizer part",
        "iteration_s": iteration,
        "step_s": step,
    }
    med = {k: statistics.median(v) for k, v in iteration.items()}
    med_step = {k: statistics.median(v) for k, v in step.items()}
    result["median_iteration_s"] = med
    result["median_step_s"] = med_step
    result["iteration_ratio"] = med["mptutor"] / med["torch"]
    result["step_ratio"] = med_step["mptutor"] / med_step["torch"]
    result["skipped_steps_mptutor"] = int(mp.loss_scaler.history.skipped_steps().size)
    if cuda:
        result["host_syncs_per_step"] = {}
        result["host_syncs_per_iteration"] = {}
        for k, t in trainers.items():
            t.forward_backward(x, y)
            result["host_syncs_per_step"][k] = mpt.count_host_syncs(t.step)
            result["host_syncs_per_iteration"][k] = mpt.count_host_syncs(
                lambda t=t: (t.forward_backward(x, y), t.step())
            )
        # The kernels of one optimizer part under the profiler: how many launches, and how
        # long the GPU computed, against the part's wall-clock time above (the rest is the
        # host's: Python, dispatch, launches, the sync)
        result["optimizer_part_kernels"] = {}
        for k, t in trainers.items():
            t.forward_backward(x, y)
            kernels = mpt.tensor_core_kernels(t.step, warmup=0)
            result["optimizer_part_kernels"][k] = {
                "launches": sum(kernel.calls for kernel in kernels),
                "kernel_time_ms": sum(kernel.cuda_time_us for kernel in kernels) / 1e3,
                "longest": [
                    {
                        "name": kernel.name[:120],
                        "calls": kernel.calls,
                        "time_us": kernel.cuda_time_us,
                    }
                    for kernel in kernels[:5]
                ],
            }
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        default=None,
        help="cuda, cuda:N or cpu (default: cuda if any, unless MPTUTOR_DEVICE=cpu)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="resnet50, mlp or tiny-cnn (default: resnet50 on a GPU, mlp on a CPU)",
    )
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="channels_last layout (default: on for a CNN on a GPU)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="default 5")
    parser.add_argument("--iters", type=int, default=None, help="default 10")
    parser.add_argument("--warmup", type=int, default=None, help="default 5")
    parser.add_argument(
        "--budget-s", type=float, default=None, help="start no round after this many seconds"
    )
    records.add_record_options(
        parser, smoke_help="tiny CNN in channels_last, checks the code path (CPU unless --device)"
    )
    args = parser.parse_args(argv)
    budget = Budget(args.budget_s)
    args.device = args.device or ("cpu" if args.smoke else mpt.device())
    cuda = torch.device(args.device).type == "cuda"
    gpu_before = records.gpu_state() if cuda else None
    if args.model is None:
        args.model = "tiny-cnn" if args.smoke else ("resnet50" if cuda else "mlp")
    if args.channels_last is None:
        args.channels_last = args.model in CONV_MODELS and (cuda or args.smoke)
    if args.channels_last and args.model not in CONV_MODELS:
        parser.error(f"--channels-last needs a convolutional model ({', '.join(CONV_MODELS)})")
    if args.batch is None:
        args.batch = 4 if args.smoke else (128 if args.model == "resnet50" else 64)
    small = 1 if args.smoke else None
    args.rounds = args.rounds or small or 5
    args.iters = args.iters or (2 if args.smoke else 10)
    args.warmup = args.warmup if args.warmup is not None else (small or 5)
    result = measure(args, budget)
    print(
        f"model {result['model']} ({result['parameters']:,} parameters in "
        f"{result['parameter_tensors']} tensors), batch {result['batch']}, {result['device']}, "
        f"channels_last {result['channels_last']}, master strides match: "
        f"{result['master_strides_match']}"
    )
    for k in ("mptutor", "torch"):
        print(
            f"  {k:8s} training step {1e3 * result['median_iteration_s'][k]:8.2f} ms, "
            f"optimizer part {1e3 * result['median_step_s'][k]:7.2f} ms"
        )
    print(
        f"  ratio mptutor/torch: training step {result['iteration_ratio']:.3f}, "
        f"optimizer part {result['step_ratio']:.3f}"
    )
    if "host_syncs_per_step" in result:
        print(f"  host syncs per optimizer part: {result['host_syncs_per_step']}")
        print(f"  host syncs per training step: {result['host_syncs_per_iteration']}")
        for k, part in result["optimizer_part_kernels"].items():
            print(
                f"  {k} optimizer part under the profiler: {part['launches']} kernel launches,"
                f" {part['kernel_time_ms']:.2f} ms of kernel time"
            )
    path = records.save_record(
        "scaler_overhead", args.device, result, args, suffix=args.model, gpu_before=gpu_before
    )
    if path is not None:
        print(f"saved {path}")
        checks = targets.check_targets([(path, records.read_record(path))], every_target=False)
        print(checks if len(checks) else "no target applies to this record")


if __name__ == "__main__":
    main()
