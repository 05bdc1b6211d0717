"""Step time of the Keras CNN from the "first experiments with mixed precision" post, FP32 vs FP16.

Two models, both built with Keras 3 (``notebooks/keras/02-keras-cnn-experiment.ipynb`` builds
the same ones and explains them):

- ``blog``: the post's CNN, layer for layer as its code has it. Three strided convolutions, each
  with its ReLU and followed by BatchNorm: Conv2D 32 filters 5x5 stride 2 on the 3 input
  channels, Conv2D 64 filters 7x7 stride 2, Conv2D 128 filters 11x11 stride 2 (``same``
  padding, ``activation="relu"``), then global average pooling, Dense 10 and a softmax in
  float32. It takes float32 images scaled to [0, 1]; the post used 256x256.
- ``changed``: the same computation arranged for Tensor Cores. It takes uint8 images (a quarter
  of the bytes to feed), scales them on the device, and pads them with zero channels from 3 to 8
  so that the first convolution meets the Tensor Core channel rule.

For each model, precision variant, input feed and batch size it times ``model.train_on_batch``
(warm-up calls first, then the median of ``--steps`` timed steps through
:func:`mptutor.bench.time_fn`). The variants:

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
PyTorch backends) at one batch size, waiting for the device after every call (see
:func:`block`), and on a CUDA device with the PyTorch backend lists the GPU kernels of one
training step with :func:`mptutor.torch.tensor_core_kernels` (which of them ran on Tensor
Cores, and how long each took). Each model's record carries its FLOPs per image, forward and for
a training step (:func:`training_flops`), so that recorded step times can be turned into
achieved FLOP/s.

It runs on whatever Keras backend is active (``KERAS_BACKEND``): ``tensorflow``, ``torch`` or
``jax``, and records which one measured what. Nothing here imports TensorFlow unless it is the
backend, so a GPU host with PyTorch and Keras but no TensorFlow runs it as it is.

Usage::

    # any machine: a smoke test at a tiny size (seconds), nothing measured
    python benchmarks/keras_cnn_experiment.py --smoke
    KERAS_BACKEND=torch python benchmarks/keras_cnn_experiment.py --smoke

    # a GPU machine without TensorFlow: Keras on the PyTorch backend, full size, saved
    KERAS_BACKEND=torch PYTHONPATH=. python benchmarks/keras_cnn_experiment.py \
        --backend-note "H100, Keras on torch" --save

On a CPU the ``mixed_float16`` steps can be the slow part: CPUs without fast float16 arithmetic
run the float16 convolutions and their gradients through slow kernels. Sizes default to full
size on a GPU (256x256 images, batch sizes 32 to 512) and to 16x16 images and batch sizes 32
and 64 on a CPU; ``--smoke`` uses 8x8 images, one batch size of 4 and one timed step.

With ``--save`` the record goes to ``data/results/keras_cnn_experiment-<backend>-<device>.json``
(``keras_cnn_experiment-smoke-<backend>-<device>.json`` for ``--smoke``), written by
:func:`mptutor.bench.save_result` with the machine, versions, date and command.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from mptutor import bench, hardware  # noqa: E402
from mptutor.table import Table  # noqa: E402

MODELS = ("blog", "changed")
VARIANTS = {  # name: (Keras dtype policy, TF32 allowed)
    "float32": ("float32", False),
    "float32-tf32": ("float32", True),
    "mixed_float16": ("mixed_float16", False),
}
FEEDS = ("host", "device")
CLASSES = 10
#: The post's convolutions, in order: (filters, kernel size); each has stride 2, "same" padding
#: and a ReLU, and is followed by BatchNorm.
CONVOLUTIONS = ((32, 5), (64, 7), (128, 11))
#: Sizes of ``--smoke``: a run that checks the code path and measures nothing.
SMOKE = {"image_size": 8, "batch_sizes": [4], "steps": 1, "warmup": 1}


# --- the models ---------------------------------------------------------------------------------


class PadChannels(keras.layers.Layer):
    """Append zero channels to an NHWC tensor, up to ``channels``."""

    def __init__(self, channels: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.channels = channels

    def call(self, x):
        extra = self.channels - x.shape[-1]
        return keras.ops.pad(x, [[0, 0], [0, 0], [0, 0], [0, extra]])

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.channels)

    def get_config(self):
        return {**super().get_config(), "channels": self.channels}


def build_model(kind: str, image_size: int, policy: str = "float32") -> keras.Model:
    """The ``blog`` or ``changed`` CNN under a dtype policy, compiled with Adam.

    The global policy is set only while the layers are created and restored afterwards.
    """
    if kind not in MODELS:
        raise ValueError(f"unknown model {kind!r}; choose from {MODELS}")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        if kind == "blog":
            images = keras.Input((image_size, image_size, 3), name="images")
            h = images
        else:
            images = keras.Input((image_size, image_size, 3), dtype="uint8", name="images")
            h = keras.layers.Rescaling(1 / 255, name="rescale")(images)
            h = PadChannels(8, name="pad_to_8")(h)
        for i, (filters, kernel) in enumerate(CONVOLUTIONS, start=1):  # conv + ReLU, then BN
            h = keras.layers.Conv2D(
                filters, kernel, strides=2, padding="same", activation="relu", name=f"conv{i}"
            )(h)
            h = keras.layers.BatchNormalization(name=f"bn{i}")(h)
        h = keras.layers.GlobalAveragePooling2D(name="pool")(h)
        h = keras.layers.Dense(CLASSES, name="dense")(h)
        probs = keras.layers.Activation("softmax", dtype="float32", name="softmax")(h)
        model = keras.Model(images, probs, name=kind)
    finally:
        keras.config.set_dtype_policy(previous)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def batch(kind: str, size: int, image_size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random images as each model takes them (float32 in [0, 1] or uint8) and integer labels."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size, image_size, image_size, 3), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, size).astype(np.int32)
    if kind == "blog":
        return (pixels / np.float32(255)).astype(np.float32), labels
    return pixels, labels


def layer_flops(layer: keras.layers.Layer, batch_size: int) -> int:
    """Multiply-adds x 2 of one forward pass of a Conv2D or Dense layer (0 for other layers)."""
    if isinstance(layer, keras.layers.Conv2D):
        _, h, w, c_out = layer.output.shape
        kh, kw = layer.kernel_size
        return 2 * batch_size * h * w * c_out * kh * kw * layer.input.shape[-1]
    if isinstance(layer, keras.layers.Dense):
        return 2 * batch_size * layer.input.shape[-1] * layer.units
    return 0


def training_flops(model: keras.Model, batch_size: int) -> int:
    """FLOPs of the Conv2D and Dense layers in one training step (forward and backward).

    The backward pass of such a layer computes the gradient of its weights (as many FLOPs as
    its forward pass) and, unless no trainable layer comes before it, the gradient of its input
    (as many again). So the first convolution costs 2 forward passes, every later one 3.
    """
    total, after_trainable = 0, False
    for layer in model.layers:
        forward = layer_flops(layer, batch_size)
        total += forward * (3 if after_trainable else 2)
        after_trainable = after_trainable or bool(layer.trainable_weights)
    return total


# --- the backend --------------------------------------------------------------------------------


def backend_version(name: str) -> str:
    """Version of the package behind a Keras backend."""
    module = {"tensorflow": "tensorflow", "torch": "torch", "jax": "jax"}.get(name)
    if module is None:
        return "unknown"
    return str(__import__(module).__version__)


def device_kind(name: str) -> str:
    """``cuda`` when the backend computes on an NVIDIA GPU, else its platform (``cpu``, ``tpu``)."""
    if name == "torch":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "jax":
        import jax

        platform = jax.devices()[0].platform
        return "cuda" if platform == "gpu" else platform
    if name == "tensorflow":
        import tensorflow as tf

        return "cuda" if tf.config.list_physical_devices("GPU") else "cpu"
    return "cpu"


def set_tf32(name: str, allowed: bool) -> dict[str, Any]:
    """Allow or forbid TF32 for float32 convolutions and matrix products; return what was set."""
    if name == "torch":
        import torch

        conv = getattr(torch.backends.cudnn, "conv", None)
        if conv is not None and hasattr(conv, "fp32_precision"):  # PyTorch 2.9 and later
            value = "tf32" if allowed else "ieee"
            torch.backends.cudnn.conv.fp32_precision = value
            torch.backends.cuda.matmul.fp32_precision = value
            return {
                "torch.backends.cudnn.conv.fp32_precision": value,
                "torch.backends.cuda.matmul.fp32_precision": value,
            }
        torch.backends.cudnn.allow_tf32 = allowed
        torch.backends.cuda.matmul.allow_tf32 = allowed
        return {
            "torch.backends.cudnn.allow_tf32": allowed,
            "torch.backends.cuda.matmul.allow_tf32": allowed,
        }
    if name == "jax":
        import jax

        value = "tensorfloat32" if allowed else "float32"
        jax.config.update("jax_default_matmul_precision", value)
        return {"jax_default_matmul_precision": value}
    if name == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(allowed)
        return {"tf.config.experimental.enable_tensor_float_32_execution": allowed}
    return {}


def block(value: Any) -> Any:
    """Wait until the backend has computed ``value`` (its work may be queued on a device).

    Without this, a timed call on a GPU measures only how long it takes to queue the kernels.
    """
    name = keras.backend.backend()
    if name == "jax":
        import jax

        return jax.block_until_ready(value)
    if name == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return value
    if name == "tensorflow":
        import tensorflow as tf

        tf.test.experimental.sync_devices()  # waits for the GPU's queue; no copy to the host
    return value


def forward_backward_fn(
    layer: keras.layers.Layer, x: Any, input_grad: bool
) -> Callable[[], Any] | None:
    """One forward and backward pass of a layer (gradients of its input and weights), or None."""
    name = keras.backend.backend()
    weights = list(layer.trainable_variables)
    if not weights and not input_grad:
        return None
    if name == "tensorflow":
        import tensorflow as tf

        def step():
            with tf.GradientTape() as tape:
                if input_grad:
                    tape.watch(x)
                out = layer(x, training=True)
                total = tf.reduce_sum(tf.cast(out, tf.float32))
            sources = ([x] if input_grad else []) + [w.value for w in weights]
            return block(tape.gradient(total, sources))

        return step
    if name == "torch":
        import torch

        xin = x.detach().requires_grad_(input_grad) if torch.is_floating_point(x) else x

        def step():
            out = layer(xin, training=True)
            total = out.float().sum()
            sources = ([xin] if input_grad else []) + [w.value for w in weights]
            return block(torch.autograd.grad(total, sources))

        return step
    return None  # jax: forward only


# --- the measurements ---------------------------------------------------------------------------


def free_memory() -> None:
    """Drop models and cached device memory between measurements."""
    keras.backend.clear_session()
    gc.collect()
    if keras.backend.backend() == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def time_steps(
    model: keras.Model, x: Any, y: Any, steps: int, warmup: int, timing_device: str
) -> bench.Timing:
    """Median-ready timings of ``model.train_on_batch(x, y)``."""
    return bench.time_fn(
        lambda: model.train_on_batch(x, y), repeats=steps, warmup=warmup, device=timing_device
    )


def profile_layers(
    model: keras.Model, x: np.ndarray, repeats: int, timing_device: str, warmup: int = 2
) -> list[dict[str, Any]]:
    """Time each layer's forward (and forward+backward) pass on the previous layer's output."""
    rows = []
    h = keras.ops.convert_to_tensor(x)
    trainable_before = False
    for layer in model.layers[1:]:
        current = h

        def forward(layer=layer, current=current):
            return block(layer(current, training=True))

        fwd = bench.time_fn(forward, repeats=repeats, warmup=warmup, device=timing_device)
        fb = forward_backward_fn(layer, current, input_grad=trainable_before)
        both = None
        if fb is not None:
            both = bench.time_fn(fb, repeats=repeats, warmup=warmup, device=timing_device).median
        rows.append(
            {
                "layer": layer.name,
                "kind": type(layer).__name__,
                "output_shape": [int(d) for d in layer.output.shape[1:]],
                "flops": layer_flops(layer, int(x.shape[0])),
                "forward_s": fwd.median,
                "forward_backward_s": both,
            }
        )
        h = _detach(layer(current, training=True))
        trainable_before = trainable_before or bool(layer.trainable_variables)
    return rows


def _detach(x: Any) -> Any:
    if keras.backend.backend() == "torch":
        return x.detach()
    return x


def kernel_profile(model: keras.Model, x: Any, y: Any) -> dict[str, Any] | None:
    """CUDA kernels of one training step (PyTorch backend on a CUDA GPU only)."""
    if keras.backend.backend() != "torch":
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    from mptutor import torch as mpt

    kernels = mpt.tensor_core_kernels(lambda: model.train_on_batch(x, y), warmup=2)
    total = sum(k.cuda_time_us for k in kernels)
    tensor_core = sum(k.cuda_time_us for k in kernels if k.tensor_core)
    return {
        "total_us": total,
        "tensor_core_us": tensor_core,
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


def device_slug(report: hardware.HardwareReport, device: str) -> str:
    """Short file-name part naming the device: ``cpu`` or the GPU's name in lower case."""
    if device == "cpu" or not report.gpus:
        return device
    return re.sub(r"[^a-z0-9]+", "-", report.gpus[0].name.lower()).strip("-")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run every configuration; return the record's data."""
    backend = keras.backend.backend()
    device = device_kind(backend)
    timing_device = "cuda" if backend == "torch" and device == "cuda" else "cpu"
    variants = args.variants or (
        list(VARIANTS) if device == "cuda" else ["float32", "mixed_float16"]
    )
    report = hardware.report()
    data: dict[str, Any] = {
        "experiment": "keras_cnn_experiment",
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
        "variants": {},
        "models": {},
        "steps_s": [],
        "layers": [],
        "kernels": [],
    }
    for kind in args.models:
        model = build_model(kind, args.image_size)
        data["models"][kind] = {
            "parameters": int(model.count_params()),
            "input_dtype": model.inputs[0].dtype,
            "layers": [f"{layer.name}:{type(layer).__name__}" for layer in model.layers],
            "flops_per_image_forward": sum(layer_flops(layer, 1) for layer in model.layers),
            "flops_per_image_training": training_flops(model, 1),
        }
        del model
    for variant in variants:
        policy, tf32 = VARIANTS[variant]
        flags = set_tf32(backend, tf32)
        data["variants"][variant] = {"policy": policy, "tf32": tf32, "flags": flags}
        for kind in args.models:
            for size in args.batch_sizes:
                x_host, y_host = batch(kind, size, args.image_size)
                model = build_model(kind, args.image_size, policy)
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
                        timing = time_steps(model, x, y, args.steps, args.warmup, timing_device)
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
                        layer_rows = profile_layers(
                            model, x_host, args.steps, timing_device, max(1, args.warmup)
                        )
                        for layer_row in layer_rows:
                            data["layers"].append(
                                {"model": kind, "variant": variant, "batch": size, **layer_row}
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
                free_memory()
    return data


def _progress(row: dict[str, Any]) -> str:
    where = f"{row['model']:8s} {row['variant']:14s} {row['feed']:6s} batch {row['batch']:4d}"
    if "error" in row:
        return f"{where}  failed: {row['error']}"
    return f"{where}  {1e3 * row['median_s']:9.2f} ms/step  {row['images_per_s']:9.1f} images/s"


def summary_table(data: dict[str, Any]) -> Table:
    """Step times with the speedup over strict float32 (same model, feed and batch size)."""
    base = {
        (r["model"], r["feed"], r["batch"]): r["median_s"]
        for r in data["steps_s"]
        if r["variant"] == "float32" and "median_s" in r
    }
    rows = []
    for r in data["steps_s"]:
        ok = "median_s" in r
        ref = base.get((r["model"], r["feed"], r["batch"]))
        rows.append(
            {
                "model": r["model"],
                "variant": r["variant"],
                "feed": r["feed"],
                "batch": r["batch"],
                "ms/step": 1e3 * r["median_s"] if ok else None,
                "images/s": r["images_per_s"] if ok else None,
                "speedup vs float32": ref / r["median_s"] if ok and ref else None,
                "error": r.get("error", ""),
            }
        )
    return Table(rows, float_format=".4g")


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
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run that checks the code path and measures nothing: 8x8 images, "
        "batch size 4, one timed step (other size options are then ignored)",
    )
    parser.add_argument("--models", type=_names(MODELS), default=list(MODELS))
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
    parser.add_argument(
        "--save",
        action="store_true",
        help="write data/results/keras_cnn_experiment-<backend>-<device>.json",
    )
    parser.add_argument(
        "--out-dir", default=None, help="folder for --save (default: data/results of the checkout)"
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
    print(
        f"Keras {keras.__version__} on {backend} {backend_version(backend)}, "
        f"{hardware.report().summary()}; images {args.image_size}x{args.image_size}, "
        f"batch sizes {args.batch_sizes}, {args.steps} timed steps after {args.warmup}",
        flush=True,
    )
    data = measure(args)
    print(summary_table(data))
    if args.save:
        smoke = "-smoke" if args.smoke else ""
        slug = device_slug(hardware.report(), data["device"])
        name = f"keras_cnn_experiment{smoke}-{backend}-{slug}"
        path = bench.save_result(name, data, out_dir=args.out_dir)
        print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
