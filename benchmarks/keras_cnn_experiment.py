"""Step time of the Keras CNN from the "first experiments with mixed precision" post, FP32 vs FP16.

Two models, both built with Keras 3 by :func:`mptutor.keras_cnn.build_model`, the function that
``notebooks/keras/02-keras-cnn-experiment.ipynb`` builds them with and explains:

- ``blog``: the post's CNN, layer for layer as its code has it. Three strided convolutions, each
  with its ReLU and followed by BatchNorm: Conv2D 32 filters 5x5 stride 2 on the 3 input
  channels, Conv2D 64 filters 7x7 stride 2, Conv2D 128 filters 11x11 stride 2 (``same``
  padding, ``activation="relu"``), then global average pooling, Dense 10 and a softmax in
  float32. It takes float32 images scaled to [0, 1]; the post used 256x256.
- ``changed``: the same computation arranged for Tensor Cores. It takes uint8 images (a quarter
  of the bytes to feed), scales them on the device, and pads them with zero channels from 3 to 8
  so that the first convolution meets the Tensor Core channel rule.

For each model, precision, input feed and batch size it times ``model.train_on_batch``
(warm-up calls first, then the median of ``--steps`` timed steps:
:func:`mptutor.keras_cnn.time_step`). The precisions, named as in
:data:`mptutor.formats.PRECISIONS`:

- ``fp32``: the ``float32`` policy with TF32 switched off (strict FP32, what a V100 does):
  ``tf.config.experimental.enable_tensor_float_32_execution(False)`` on TensorFlow,
  :func:`mptutor.torch_perf.tf32` on PyTorch, ``jax_default_matmul_precision = "float32"``
  on JAX. The record lists what was set;
- ``tf32``: the ``float32`` policy with TF32 allowed (the default of TensorFlow, of PyTorch's
  cuDNN convolutions and of JAX on Ampere and later GPUs); measured on CUDA devices only;
- ``amp_fp16``: the ``mixed_float16`` policy (Keras wraps the optimizer in a
  ``LossScaleOptimizer``), with TF32 off for what stays in float32.

The feeds: ``host`` passes NumPy arrays to every step (what an input pipeline hands over: a
conversion and, on a GPU, a host-to-device copy per step); ``device`` converts the batch to a
backend tensor once, so the step does no copy.

It also times every layer's forward pass (and forward plus backward on the TensorFlow and
PyTorch backends) at one batch size, waiting for the device after every call
(:func:`mptutor.keras_cnn.profile_layers`), and on a CUDA device with the PyTorch backend lists
the GPU kernels of one training step (:func:`kernel_profile`: which of them ran on Tensor Cores,
and how long each took). Each model's record carries its FLOPs per image, forward and for a
training step (:func:`mptutor.keras_cnn.training_flops`), and the record carries the summary
table that the notebook shows (``summary``: step times, achieved TFLOP/s, speedups over
``fp32`` and ``tf32``; ``tensor_core_shares``: the share of GPU time in Tensor Core kernels).

It runs on whatever Keras backend is active (``KERAS_BACKEND``): ``tensorflow``, ``torch`` or
``jax``, and records which one measured what. Neither this script nor :mod:`mptutor.keras_cnn`
imports TensorFlow unless it is the backend, so a GPU host with PyTorch and Keras but no
TensorFlow runs it as it is.

Usage::

    # any machine: a smoke test at a tiny size (seconds), nothing measured
    python benchmarks/keras_cnn_experiment.py --smoke
    KERAS_BACKEND=torch python benchmarks/keras_cnn_experiment.py --smoke

    # a GPU machine without TensorFlow: Keras on the PyTorch backend, full size, recorded
    KERAS_BACKEND=torch PYTHONPATH=. python benchmarks/keras_cnn_experiment.py \
        --backend-note "H100, Keras on torch" --out DIR

On a CPU the ``amp_fp16`` steps can be the slow part: CPUs without fast float16 arithmetic
run the float16 convolutions and their gradients through slow kernels. Sizes default to full
size on a GPU (256x256 images, batch sizes 32 to 512) and to 16x16 images and batch sizes 32
and 64 on a CPU; ``--smoke`` uses 8x8 images, one batch size of 4 and one timed step.

With ``--out DIR`` the record goes to ``DIR/keras_cnn_experiment-<backend>-<device>.json``
(``keras_cnn_experiment-smoke-<backend>-<device>.json`` for ``--smoke``), written by
``records.save_result`` (beside this script) with the machine, versions, date, command and
commit; recorded GPU runs are committed to ``data/results/`` afterwards.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before Keras loads TensorFlow, if it does
sys.path.insert(0, str(Path(__file__).resolve().parent))  # records beside this file

import keras  # noqa: E402
import records  # noqa: E402

from mptutor import formats, hardware  # noqa: E402
from mptutor import keras_cnn as kc  # noqa: E402
from mptutor.table import Table  # noqa: E402

EXPERIMENT = "keras_cnn_experiment"  # the name the records start with
MODELS = ("blog", "changed")
POLICIES = {  # precision (formats.PRECISIONS): (Keras dtype policy, TF32 allowed)
    formats.precision("fp32"): ("float32", False),
    formats.precision("tf32"): ("float32", True),
    formats.precision("amp_fp16"): ("mixed_float16", False),
}
FEEDS = ("host", "device")
#: Sizes of ``--smoke``: a run that checks the code path and measures nothing.
SMOKE = {"image_size": 8, "batch_sizes": [4], "steps": 1, "warmup": 1}


def device_kind(backend: str) -> str:
    """``"cuda"`` when the Keras backend computes on an NVIDIA GPU, else its platform."""
    if backend == "torch":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if backend == "jax":
        import jax

        platform = jax.devices()[0].platform
        return "cuda" if platform == "gpu" else platform
    if backend == "tensorflow":
        import tensorflow as tf

        return "cuda" if tf.config.list_physical_devices("GPU") else "cpu"
    return "cpu"


def backend_version(backend: str) -> str:
    """The version of the package behind a Keras backend."""
    return str(importlib.import_module(backend).__version__)


def set_tf32(allowed: bool, backend: str) -> dict[str, Any]:
    """Allow or forbid TF32 for float32 products on the backend; return what was set."""
    if backend == "torch":
        import torch

        from mptutor.torch_perf._timing import _set_tf32

        _set_tf32(allowed)
        matmul = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
        if matmul is not None:  # PyTorch 2.9 and later
            conv = torch.backends.cudnn.conv.fp32_precision
        else:
            matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        return {"torch": {"matmul": matmul, "cudnn_conv": conv}}
    if backend == "jax":
        import jax

        value = "tensorfloat32" if allowed else "float32"
        jax.config.update("jax_default_matmul_precision", value)
        return {"jax_default_matmul_precision": value}
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(allowed)
        return {"tf.config.experimental.enable_tensor_float_32_execution": allowed}
    return {}


def free_memory(backend: str) -> None:
    """Drop Keras's global state and cached device memory between measurements."""
    keras.backend.clear_session()
    gc.collect()
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def kernel_profile(model: keras.Model, x: Any, y: Any) -> dict[str, Any] | None:
    """The CUDA kernels of one training step, Tensor Core ones marked (PyTorch on CUDA only)."""
    backend = keras.backend.backend()
    if backend != "torch" or device_kind(backend) != "cuda":
        return None
    from mptutor import torch as mpt

    kernels = mpt.tensor_core_kernels(lambda: model.train_on_batch(x, y), warmup=2)
    return {
        "total_us": sum(k.cuda_time_us for k in kernels),
        "tensor_core_us": sum(k.cuda_time_us for k in kernels if k.tensor_core),
        "kernels": [
            {
                "name": k.name[:160],
                "calls": k.calls,
                "cuda_time_us": k.cuda_time_us,
                "tensor_core": k.tensor_core,
            }
            for k in kernels[:25]
        ],
    }


def speedup_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Step times with achieved TFLOP/s and speedups over fp32 and tf32, sorted.

    One row per model, precision, feed and batch: ``model, precision, feed, batch, ms/step,
    images/s, TFLOP/s`` (from the training FLOPs per image), ``vs fp32``, ``vs tf32`` (same
    model, feed and batch) and ``error`` (a configuration that failed, e.g. out of memory).
    """
    steps = {(r["model"], r["precision"], r["feed"], r["batch"]): r for r in data["steps_s"]}
    rows = []
    for (model, precision, feed, n), r in steps.items():
        flops = data["models"].get(model, {}).get("flops_per_image_training")
        ok = "median_s" in r
        row = {
            "model": model,
            "precision": precision,
            "feed": feed,
            "batch": n,
            "ms/step": 1e3 * r["median_s"] if ok else None,
            "images/s": n / r["median_s"] if ok else None,
            "TFLOP/s": n / r["median_s"] * flops / 1e12 if ok and flops else None,
        }
        for base in ("fp32", "tf32"):
            other = steps.get((model, base, feed, n), {})
            row[f"vs {base}"] = (
                other["median_s"] / r["median_s"] if ok and "median_s" in other else None
            )
        row["error"] = r.get("error", "")
        rows.append(row)
    order = {v: i for i, v in enumerate(POLICIES)}
    return sorted(rows, key=lambda r: (r["model"], r["feed"], r["batch"], order[r["precision"]]))


def tensor_core_shares(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The share of GPU time in Tensor Core kernels, per profiled training step."""
    return [
        {
            "model": k["model"],
            "precision": k["precision"],
            "batch": k["batch"],
            "GPU time ms": k["total_us"] / 1e3,
            "share in Tensor Core kernels": k["tensor_core_us"] / k["total_us"],
        }
        for k in data["kernels"]
        if k["total_us"]
    ]


def device_slug(report: hardware.HardwareReport, device: str) -> str:
    """Short file-name part naming the device: ``cpu`` or the GPU's name in lower case."""
    if device == "cpu" or not report.gpus:
        return device
    return re.sub(r"[^a-z0-9]+", "-", report.gpus[0].name.lower()).strip("-")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run every configuration; return the record's data."""
    backend = keras.backend.backend()
    device = device_kind(backend)
    precisions = args.precisions or (list(POLICIES) if device == "cuda" else ["fp32", "amp_fp16"])
    report = hardware.report()
    data: dict[str, Any] = {
        "experiment": EXPERIMENT,
        "smoke": args.smoke,
        "backend": backend,
        "backend_version": backend_version(backend),
        "keras_version": keras.__version__,
        "backend_note": args.backend_note,
        "device": device,
        "device_name": report.summary(),
        "image_size": args.image_size,
        "batch_sizes": args.batch_sizes,
        "steps": args.steps,
        "warmup": args.warmup,
        "feeds": args.feeds,
        "precisions": {},
        "models": {},
        "steps_s": [],
        "layers": [],
        "kernels": [],
    }
    for kind in args.models:
        model = kc.build_model(kind, args.image_size)
        data["models"][kind] = {
            "parameters": int(model.count_params()),
            "input_dtype": model.inputs[0].dtype,
            "layers": [f"{layer.name}:{type(layer).__name__}" for layer in model.layers],
            "flops_per_image_forward": sum(kc.layer_flops(layer, 1) for layer in model.layers[1:]),
            "flops_per_image_training": kc.training_flops(model, 1),
        }
        del model
    for precision in precisions:
        policy, tf32 = POLICIES[precision]
        flags = set_tf32(tf32, backend)
        data["precisions"][precision] = {"policy": policy, "tf32": tf32, "flags": flags}
        for kind in args.models:
            for size in args.batch_sizes:
                x_host, y_host = kc.make_batch(kind, size, args.image_size)
                model = kc.build_model(kind, args.image_size, policy)
                for feed in args.feeds:
                    if feed == "device":
                        x = keras.ops.convert_to_tensor(x_host)
                        y = keras.ops.convert_to_tensor(y_host)
                    else:
                        x, y = x_host, y_host
                    row: dict[str, Any] = {
                        "model": kind,
                        "precision": precision,
                        "feed": feed,
                        "batch": size,
                    }
                    try:
                        timing = kc.time_step(model, x, y, args.steps, args.warmup)
                    except Exception as err:  # out of memory at a large batch: record, go on
                        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
                    else:
                        row.update(timing.as_dict())
                        row["images_per_s"] = size / timing.median
                        row["jit_compile"] = bool(getattr(model, "jit_compile", False))
                    data["steps_s"].append(row)
                    print(_progress(row), flush=True)
                if args.profile and size == args.profile_batch:
                    try:
                        layer_rows = kc.profile_layers(
                            model, x_host, args.steps, max(1, args.warmup)
                        )
                        for layer_row in layer_rows:
                            data["layers"].append(
                                {"model": kind, "precision": precision, "batch": size, **layer_row}
                            )
                        kernels = kernel_profile(
                            model,
                            keras.ops.convert_to_tensor(x_host),
                            keras.ops.convert_to_tensor(y_host),
                        )
                    except Exception as err:
                        data["layers"].append(
                            {
                                "model": kind,
                                "precision": precision,
                                "batch": size,
                                "error": f"{type(err).__name__}: {err}"[:200],
                            }
                        )
                        kernels = None
                    if kernels is not None:
                        data["kernels"].append(
                            {"model": kind, "precision": precision, "batch": size, **kernels}
                        )
                del model
                free_memory(backend)
    data["summary"] = speedup_rows(data)
    data["tensor_core_shares"] = tensor_core_shares(data)
    return data


def _progress(row: dict[str, Any]) -> str:
    where = f"{row['model']:8s} {row['precision']:9s} {row['feed']:6s} batch {row['batch']:4d}"
    if "error" in row:
        return f"{where}  failed: {row['error']}"
    return f"{where}  {1e3 * row['median_s']:9.2f} ms/step  {row['images_per_s']:9.1f} images/s"


def summary_table(data: dict[str, Any]) -> Table:
    """Step times, achieved TFLOP/s and speedups over strict fp32 and over tf32."""
    return Table(data["summary"], float_format=".4g")


def _ints(text: str) -> list[int]:
    values = [int(v) for v in text.replace(",", " ").split()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need positive integers, got {text!r}")
    return values


def _names(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        values = [v for v in text.replace(",", " ").split() if v]
        unknown = [v for v in values if v not in allowed]
        if unknown or not values:
            raise argparse.ArgumentTypeError(
                f"unknown {unknown or text!r}; choose from {', '.join(allowed)}"
            )
        return values

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options; sizes default to full size on a GPU and small on a CPU."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batch-sizes",
        type=_ints,
        default=None,
        help="comma-separated (default: 32,64,128,256,512 on a GPU, 32,64 on a CPU)",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="square image side in pixels (default: 256 on a GPU, 16 on a CPU)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="timed training steps per configuration (default: 20 GPU, 3 CPU)",
    )
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 3)")
    records.add_record_options(
        parser,
        smoke_help="a tiny run that checks the code path and measures nothing: 8x8 images, "
        "batch size 4, one timed step (other size options are then ignored)",
    )
    parser.add_argument("--models", type=_names(MODELS), default=list(MODELS))
    parser.add_argument(
        "--precisions",
        type=_names(list(POLICIES)),  # spelled as formats.PRECISIONS spells them
        default=None,
        help="precisions; default: all three on CUDA, fp32 and amp_fp16 elsewhere",
    )
    parser.add_argument("--feeds", type=_names(FEEDS), default=list(FEEDS))
    parser.add_argument(
        "--profile-batch",
        type=int,
        default=None,
        help="batch size for the per-layer and kernel profile (default: 128 on a "
        "GPU, the first batch size on a CPU)",
    )
    parser.add_argument(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="skip the per-layer and kernel profile",
    )
    parser.add_argument(
        "--backend-note",
        default="",
        help="free text stored in the record, e.g. how Keras was installed",
    )
    args = parser.parse_args(argv)
    gpu = device_kind(keras.backend.backend()) != "cpu"
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
        args.profile_batch = None
    if args.warmup is None:
        args.warmup = 3
    if args.batch_sizes is None:
        args.batch_sizes = [32, 64, 128, 256, 512] if gpu else [32, 64]
    if args.image_size is None:
        args.image_size = 256 if gpu else 16
    if args.steps is None:
        args.steps = 20 if gpu else 3
    if args.profile_batch is None:
        args.profile_batch = 128 if gpu and 128 in args.batch_sizes else args.batch_sizes[0]
    if args.image_size < 4 or args.image_size % 4 or args.steps < 1 or args.warmup < 0:
        parser.error("need --image-size a positive multiple of 4, --steps >= 1, --warmup >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the table, and save the record if asked."""
    args = parse_args(argv)
    backend = keras.backend.backend()
    gpu_before = records.gpu_state() if device_kind(backend) == "cuda" else None
    print(
        f"Keras {keras.__version__} on {backend} {backend_version(backend)}, "
        f"{hardware.report().summary()}; images {args.image_size}x{args.image_size}, "
        f"batch sizes {args.batch_sizes}, {args.steps} timed steps after {args.warmup}",
        flush=True,
    )
    data = measure(args)
    print(summary_table(data))
    if args.out is not None:
        smoke = "-smoke" if args.smoke else ""
        slug = device_slug(hardware.report(), data["device"])
        name = f"{EXPERIMENT}{smoke}-{backend}-{slug}"
        path = records.save_result(
            name, data, args.out, commit_id=args.commit, gpu_before=gpu_before
        )
        print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
