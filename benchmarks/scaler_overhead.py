"""Step time of mptutor's MasterWeightOptimizer + DynamicLossScaler vs torch.amp.GradScaler.

Both train the same network with the same optimizer (SGD with momentum) in FP16:

- mptutor: the network converted to FP16 (BatchNorm in FP32), FP32 master weights kept by
  ``MasterWeightOptimizer``, loss scaled by ``DynamicLossScaler``;
- torch: the FP32 network under ``torch.autocast(dtype=torch.float16)`` with
  ``torch.amp.GradScaler``, PyTorch's own recipe.

Timings alternate between the two in rounds, so drift of the machine hits both alike. Two
ratios are reported (mptutor / torch, median of repeats): the whole training iteration, and
the optimizer part alone (unscale, inf check, step, scale update). On a GPU the host syncs of
one optimizer step are counted with ``torch.cuda.set_sync_debug_mode``.

Usage::

    python benchmarks/scaler_overhead.py                 # CPU: small MLP
    python benchmarks/scaler_overhead.py --device cuda   # GPU: ResNet50 (torchvision)
    python benchmarks/scaler_overhead.py --save          # also write data/results/*.json
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from mptutor import bench
from mptutor import torch as mpt
from mptutor.scaling import DynamicLossScaler


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
    raise ValueError(f"unknown model {name!r}; choose resnet50 or mlp")


def _sgd(params):
    return torch.optim.SGD(params, lr=1e-3, momentum=0.9)


class Mptutor:
    """FP16 model with FP32 master weights and dynamic loss scaling."""

    def __init__(self, model: nn.Module) -> None:
        self.model = mpt.network_to_half(model)
        self.opt = mpt.MasterWeightOptimizer(_sgd, self.model, DynamicLossScaler())

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        loss = nn.functional.cross_entropy(self.model(x.half()).float(), y)
        self.opt.backward(loss)

    def step(self) -> None:
        self.opt.step()


class TorchAmp:
    """FP32 model under autocast with torch.amp.GradScaler."""

    def __init__(self, model: nn.Module, device: str) -> None:
        self.model = model
        self.device = device
        self.opt = _sgd(model.parameters())
        self.scaler = torch.amp.GradScaler(device)

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.autocast(self.device, dtype=torch.float16):
            loss = nn.functional.cross_entropy(self.model(x), y)
        self.scaler.scale(loss).backward()

    def step(self) -> None:
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)


def count_syncs(trainer: Mptutor | TorchAmp, x: torch.Tensor, y: torch.Tensor) -> int:
    """Host syncs during one optimizer step (CUDA only)."""
    trainer.forward_backward(x, y)
    return mpt.count_host_syncs(trainer.step)


def measure(args: argparse.Namespace) -> dict:
    device = args.device
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    model_a, shape, classes = build_model(args.model)
    model_b, _, _ = build_model(args.model)
    trainers = {
        "mptutor": Mptutor(model_a.to(device)),
        "torch": TorchAmp(model_b.to(device), device),
    }
    if device == "cuda":
        torch.backends.cudnn.benchmark = True
        for t in trainers.values():
            if args.model == "resnet50":
                t.model.to(memory_format=torch.channels_last)
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(args.batch, *shape, generator=gen).to(device)
    y = torch.randint(0, classes, (args.batch,), generator=gen).to(device)
    if device == "cuda" and args.model == "resnet50":
        x = x.contiguous(memory_format=torch.channels_last)

    iteration = {k: [] for k in trainers}
    step = {k: [] for k in trainers}
    for t in trainers.values():  # warm-up: kernels, optimizer state, allocator
        for _ in range(args.warmup):
            t.forward_backward(x, y)
            t.step()
    for _ in range(args.rounds):
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

    result = {
        "model": args.model,
        "batch": args.batch,
        "device": device,
        "rounds": args.rounds,
        "iters_per_round": args.iters,
        "parameters": sum(p.numel() for p in model_b.parameters()),
        "parameter_tensors": sum(1 for _ in model_b.parameters()),
        "iteration_s": {k: v for k, v in iteration.items()},
        "step_s": {k: v for k, v in step.items()},
    }
    med = {k: statistics.median(v) for k, v in iteration.items()}
    med_step = {k: statistics.median(v) for k, v in step.items()}
    result["median_iteration_s"] = med
    result["median_step_s"] = med_step
    result["iteration_ratio"] = med["mptutor"] / med["torch"]
    result["step_ratio"] = med_step["mptutor"] / med_step["torch"]
    result["skipped_steps_mptutor"] = int(
        trainers["mptutor"].opt.loss_scaler.history.skipped_steps().size
    )
    if device == "cuda":
        result["host_syncs_per_step"] = {k: count_syncs(t, x, y) for k, t in trainers.items()}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default=None, help="resnet50 or mlp (default: by device)")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--save", action="store_true", help="write data/results/<name>.json")
    args = parser.parse_args()
    if args.model is None:
        args.model = "resnet50" if args.device == "cuda" else "mlp"
    if args.batch is None:
        args.batch = 128 if args.model == "resnet50" else 64
    result = measure(args)
    print(
        f"model {result['model']} ({result['parameters']:,} parameters in "
        f"{result['parameter_tensors']} tensors), batch {result['batch']}, {result['device']}"
    )
    for k in ("mptutor", "torch"):
        print(
            f"  {k:8s} iteration {1e3 * result['median_iteration_s'][k]:8.2f} ms, "
            f"optimizer part {1e3 * result['median_step_s'][k]:7.2f} ms"
        )
    print(
        f"  ratio mptutor/torch: iteration {result['iteration_ratio']:.3f}, "
        f"optimizer part {result['step_ratio']:.3f}"
    )
    if "host_syncs_per_step" in result:
        print(f"  host syncs per optimizer step: {result['host_syncs_per_step']}")
    if args.save:
        path = bench.save_result(f"scaler_overhead-{result['device']}-{result['model']}", result)
        print(f"saved {path}")


if __name__ == "__main__":
    main()
