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

For each model, precision variant, input feed and batch size it times ``model.train_on_batch``
(warm-up calls first, then the median of ``--steps`` timed steps:
:func:`mptutor.keras_cnn.time_step`). The variants:

- ``float32``: the ``float32`` policy with TF32 switched off (strict FP32, what a V100 does):
  ``tf.config.experimental.enable_tensor_float_32_execution(False)`` on TensorFlow,
  ``fp32_precision = "ieee"`` (or ``allow_tf32 = False``) for cuDNN and cuBLAS on PyTorch,
  ``jax_default_matmul_precision = "float32"`` on JAX. The record lists what was set;
- ``float32-tf32``: the ``float32`` policy with TF32 allowed (the default of TensorFlow, of
  PyTorch's cuDNN convolutions and of JAX on Ampere and later GPUs); measured on CUDA devices
  only;
- ``mixed_float16``: the ``mixed_float16`` policy (Keras wraps the optimizer in a
  ``LossScaleOptimizer``), with TF32 off for what stays in float32.

The feeds: ``host`` passes NumPy arrays to every step (what an input pipeline hands over: a
conversion and, on a GPU, a host-to-device copy per step); ``device`` converts the batch to a
backend tensor once, so the step does no copy.

It also times every layer's forward pass (and forward plus backward on the TensorFlow and
PyTorch backends) at one batch size, waiting for the device after every call
(:func:`mptutor.keras_cnn.profile_layers`), and on a CUDA device with the PyTorch backend lists
the GPU kernels of one training step (:func:`mptutor.keras_cnn.kernel_profile`: which of them
ran on Tensor Cores, and how long each took). Each model's record carries its FLOPs per image,
forward and for a training step (:func:`mptutor.keras_cnn.training_flops`), so that recorded
step times can be turned into achieved FLOP/s.

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

On a CPU the ``mixed_float16`` steps can be the slow part: CPUs without fast float16 arithmetic
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

from mptutor import hardware  # noqa: E402
from mptutor import keras_cnn as kc  # noqa: E402
from mptutor.table import Table  # noqa: E402

VARIANTS = {  # name: (Keras dtype policy, TF32 allowed)
    "float32": ("float32", False),
    "float32-tf32": ("float32", True),
    "mixed_float16": ("mixed_float16", False),
}
FEEDS = ("host", "device")
#: Sizes of ``--smoke``: a run that checks the code path and measures nothing.
SMOKE = {"image_size": 8, "batch_sizes": [4], "steps": 1, "warmup": 1}


def device_slug(report: hardware.HardwareReport, device: str) -> str:
    """Short file-name part naming the device: ``cpu`` or the GPU's name in lower case."""
    if device == "cpu" or not report.gpus:
        return device
    return re.sub(r"[^a-z0-9]+", "-", report.gpus[0].name.lower()).strip("-")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run every configuration; return the record's data."""
    backend = keras.backend.backend()
    device = kc.device_kind(backend)
    variants = args.variants or (
        list(VARIANTS) if device == "cuda" else ["float32", "mixed_float16"]
    )
    report = hardware.report()
    data: dict[str, Any] = {
        "experiment": kc.EXPERIMENT,
        "smoke": args.smoke,
        "backend": backend,
        "backend_version": kc.backend_version(backend),
        "keras_version": keras.__version__,
        "backend_note": args.backend_note,
        "device": device,
        "device_name": report.summary(),
        "image_size": args.image_size,
        "batch_sizes": args.batch_sizes,
        "steps": args.steps,
        "warmup": args.warmup,
        "feeds": args.feeds,
        "variants": {},
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
    for variant in variants:
        policy, tf32 = VARIANTS[variant]
        flags = kc.set_tf32(tf32, backend)
        data["variants"][variant] = {"policy": policy, "tf32": tf32, "flags": flags}
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
                        "variant": variant,
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
                                {"model": kind, "variant": variant, "batch": size, **layer_row}
                            )
                        kernels = kc.kernel_profile(
                            model,
                            keras.ops.convert_to_tensor(x_host),
                            keras.ops.convert_to_tensor(y_host),
                        )
                    except Exception as err:
                        data["layers"].append(
                            {
                                "model": kind,
                                "variant": variant,
                                "batch": size,
                                "error": f"{type(err).__name__}: {err}"[:200],
                            }
                        )
                        kernels = None
                    if kernels is not None:
                        data["kernels"].append(
                            {"model": kind, "variant": variant, "batch": size, **kernels}
                        )
                del model
                kc.free_memory()
    return data


def _progress(row: dict[str, Any]) -> str:
    where = f"{row['model']:8s} {row['variant']:14s} {row['feed']:6s} batch {row['batch']:4d}"
    if "error" in row:
        return f"{where}  failed: {row['error']}"
    return f"{where}  {1e3 * row['median_s']:9.2f} ms/step  {row['images_per_s']:9.1f} images/s"


def summary_table(data: dict[str, Any]) -> Table:
    """Step times, achieved TFLOP/s and speedups over strict float32 and over TF32."""
    return Table(kc.speedup_rows(data), float_format=".4g")


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
    parser.add_argument("--models", type=_names(kc.MODELS), default=list(kc.MODELS))
    parser.add_argument(
        "--variants",
        type=_names(list(VARIANTS)),
        default=None,
        help="default: all three on CUDA, float32 and mixed_float16 elsewhere",
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
    gpu = kc.device_kind() != "cpu"
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
    gpu_before = records.gpu_state() if kc.device_kind(backend) == "cuda" else None
    print(
        f"Keras {keras.__version__} on {backend} {kc.backend_version(backend)}, "
        f"{hardware.report().summary()}; images {args.image_size}x{args.image_size}, "
        f"batch sizes {args.batch_sizes}, {args.steps} timed steps after {args.warmup}",
        flush=True,
    )
    data = measure(args)
    print(summary_table(data))
    if args.out is not None:
        smoke = "-smoke" if args.smoke else ""
        slug = device_slug(hardware.report(), data["device"])
        name = f"keras_cnn_experiment{smoke}-{backend}-{slug}"
        path = records.save_result(
            name, data, args.out, commit_id=args.commit, gpu_before=gpu_before
        )
        print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
