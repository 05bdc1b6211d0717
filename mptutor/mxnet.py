"""MXNet Gluon helpers: model-zoo networks in float16 or bfloat16, a training loop, checkpoints.

Use it the d2l way (this module imports MXNet)::

    from mptutor import mxnet as mmx

It packages the recipe of the MXNet float16 tutorial (a Gluon ResNet-50 v2 on Caltech 101):
cast the network with ``net.cast("float16")``, cast each batch to match, and give the optimizer
``multi_precision=True`` so that it keeps a float32 master copy of every float16 weight. The
notebook ``notebooks/gluon/02-resnet50-caltech101`` writes each of these steps out; the functions
here are the tested versions it then calls. ``notebooks/gluon/01-mixed-precision-in-gluon`` uses
:class:`LossScaledTrainerStep` and :func:`multi_precision_survey`.

What runs where (MXNet 1.9.1):

* **float16** needs a GPU. MXNet has no float16 matrix products on a CPU: a float16 convolution
  fails there with ``FP16 gemm on cpu not implemented!``, a float16 dense layer with a message
  that it needs cuDNN. :func:`get_network` and
  :func:`train` refuse float16 on a CPU context with a message that says so.
* **bfloat16** runs through MXNet AMP (``mxnet.contrib.amp``) on a CPU whose oneDNN has bfloat16
  kernels (AVX-512 CPUs); the network keeps float32 parameters and AMP casts the inputs of
  convolutions and dense layers. ``amp.init`` changes MXNet's operators for the rest of the
  process and cannot be undone, so build float32 networks before the first bfloat16 one.
  :func:`probe_bf16` tells, without touching this process, whether this CPU can do it.
* the ``multi_precision`` optimizer update (``mp_sgd_mom_update`` and friends) is elementwise
  and runs on a CPU as well.

Examples
--------
>>> from mptutor import data, mxnet as mmx  # doctest: +SKIP
>>> folders = data.digits_image_folder(size=32)  # doctest: +SKIP
>>> loaders = mmx.image_folder_loaders(folders.train, folders.test, image_size=32)  # doctest: +SKIP
>>> net = mmx.get_network("resnet18_v2", classes=10, dtype="float32")  # doctest: +SKIP
>>> history = mmx.train(net, loaders.train, loaders.test, epochs=2)  # doctest: +SKIP
>>> mmx.save_master_weights(net, "resnet18.params", trainer=history.trainer)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import math
import os
import random
import subprocess
import sys
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# MXNet 1.9.1, the last release, emits DeprecationWarnings from its own import code with the
# NumPy 1.23 it needs (`np.bool`, the NEP 32 financial functions, distutils' Version classes).
# They concern MXNet's code, not the caller's, and cannot be acted upon: hide exactly those.
with warnings.catch_warnings():
    for _message in (
        r"`np\.bool` is a deprecated alias",
        r"In accordance with NEP 32",
        r"distutils Version classes are deprecated",
    ):
        warnings.filterwarnings("ignore", message=_message, category=DeprecationWarning)
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.contrib import amp
    from mxnet.gluon.data.vision import ImageFolderDataset, transforms
    from mxnet.gluon.model_zoo import vision

# In Jupyter without ipywidgets, tqdm.auto warns on import that it falls back to a text bar; the
# text bar works, and train() shows none unless asked (progress=True), so that note is hidden.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="IProgress not found")
    from tqdm.auto import tqdm

from mptutor import data as _data
from mptutor import hardware as _hardware
from mptutor.atomic import atomic_path
from mptutor.checks import optional_positive
from mptutor.gradients import GradientStats, gradient_stats
from mptutor.scaling import DynamicLossScaler, StaticLossScaler
from mptutor.table import Table

__all__ = [
    "DTYPES",
    "NETWORKS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "NO_FP16_ON_CPU",
    "Loaders",
    "EpochStats",
    "History",
    "Checkpoint",
    "OptimizerTrial",
    "seed",
    "default_context",
    "pick",
    "check_dtype",
    "probe_bf16",
    "bf16_supported",
    "amp_initialized",
    "round_up",
    "get_network",
    "channel_alignment",
    "image_transform",
    "image_folder_loaders",
    "make_trainer",
    "train",
    "evaluate",
    "predict",
    "master_weights",
    "save_master_weights",
    "load_master_weights",
    "gradients_stats",
    "LossScaledTrainerStep",
    "try_multi_precision",
    "multi_precision_survey",
]

#: Data types that :func:`get_network` and :func:`train` accept.
DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")

#: Names that :func:`get_network` accepts: the model zoo of ``mxnet.gluon.model_zoo.vision``.
NETWORKS: tuple[str, ...] = (
    "alexnet",
    "densenet121",
    "densenet161",
    "densenet169",
    "densenet201",
    "inceptionv3",
    "mobilenet0.25",
    "mobilenet0.5",
    "mobilenet0.75",
    "mobilenet1.0",
    "mobilenetv2_0.25",
    "mobilenetv2_0.5",
    "mobilenetv2_0.75",
    "mobilenetv2_1.0",
    "resnet101_v1",
    "resnet101_v2",
    "resnet152_v1",
    "resnet152_v2",
    "resnet18_v1",
    "resnet18_v2",
    "resnet34_v1",
    "resnet34_v2",
    "resnet50_v1",
    "resnet50_v2",
    "squeezenet1.0",
    "squeezenet1.1",
    "vgg11",
    "vgg11_bn",
    "vgg13",
    "vgg13_bn",
    "vgg16",
    "vgg16_bn",
    "vgg19",
    "vgg19_bn",
)

#: Per-channel mean and standard deviation of ImageNet, as the model zoo's weights expect.
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)

#: Why float16 is refused on a CPU context.
NO_FP16_ON_CPU = (
    "MXNet has no float16 matrix products on a CPU: a float16 convolution fails there with "
    "'FP16 gemm on cpu not implemented!' and a float16 dense layer with 'float16 fully "
    "connected layer is currently only supported by CuDNN version'. On a CPU use "
    "dtype='bfloat16' (MXNet AMP, for CPUs with AVX-512; see mptutor.mxnet.probe_bf16) or "
    "float32; for float16 use a GPU context "
    "(mx.gpu(0)) with a CUDA build of MXNet such as mxnet-cu112"
)

_AMP_STATE: dict[str, str] = {}


# ---------------------------------------------------------------------------------------------
# Where to run, in which type


def seed(value: int = 0) -> None:
    """Seed every random source a Gluon training run uses.

    MXNet's generator draws the initial weights, NumPy's global state orders the shuffled
    batches of ``DataLoader``, Python's ``random`` is seeded for completeness. With the same
    seed, the same machine and ``num_workers=0`` a CPU run repeats bit for bit; another CPU
    (other oneDNN kernels) or thread count gives slightly different sums, which training then
    amplifies.

    Parameters
    ----------
    value : int, default 0
        The seed (0 or more).

    Raises
    ------
    ValueError
        If ``value`` is not an int of at least 0.
    """
    value = _positive_int("seed", value, minimum=0)
    random.seed(value)
    np.random.seed(value)  # noqa: NPY002 - DataLoader's RandomSampler uses the global state
    mx.random.seed(value)


def default_context() -> mx.Context:
    """Return the context the notebooks train on: the first GPU MXNet sees, else the CPU.

    Returns
    -------
    mxnet.Context
        ``mx.gpu(0)`` when this MXNet build sees a GPU and ``MPTUTOR_DEVICE=cpu`` is not set,
        otherwise ``mx.cpu()``. It asks MXNet itself, so a CPU build of MXNet on a GPU machine
        gives the CPU.

    Raises
    ------
    RuntimeError
        If ``MPTUTOR_DEVICE=cuda`` asks for a GPU and this MXNet build sees none.
    ValueError
        If ``MPTUTOR_DEVICE`` holds something other than ``cpu`` or ``cuda``.
    """
    override = _hardware.device_override()
    if override == "cpu":
        return mx.cpu()
    try:
        count = mx.context.num_gpus()
    except mx.base.MXNetError:  # a CUDA build without a usable driver
        count = 0
    if count == 0 and override == "cuda":
        raise RuntimeError(
            "MPTUTOR_DEVICE=cuda asks for a GPU, but this MXNet build sees none: install a CUDA "
            "build of MXNet (e.g. mxnet-cu112) or unset MPTUTOR_DEVICE"
        )
    return mx.gpu(0) if count > 0 else mx.cpu()


def pick(cpu: Any, gpu: Any, ctx: mx.Context | None = None) -> Any:
    """Choose a setting by where MXNet computes: full size on a GPU, small on a CPU.

    :func:`mptutor.hardware.pick` asks whether the machine has a GPU; MXNet also needs its own
    CUDA build to use one. This asks MXNet, through :func:`default_context`, so that a CPU
    build of MXNet on a GPU machine takes the CPU sizes.

    Parameters
    ----------
    cpu, gpu : object
        The values for a CPU context and for a GPU context.
    ctx : mxnet.Context, optional
        The context to decide by; default :func:`default_context`.

    Returns
    -------
    object
        ``gpu`` when the context is a GPU, else ``cpu``.
    """
    return gpu if _is_gpu(_check_context(ctx)) else cpu


def _is_gpu(ctx: mx.Context) -> bool:
    return ctx.device_type == "gpu"


def _check_context(ctx: Any) -> mx.Context:
    if ctx is None:
        return default_context()
    if not isinstance(ctx, mx.Context):
        raise TypeError(f"ctx={ctx!r}: give an mxnet Context such as mx.cpu() or mx.gpu(0)")
    return ctx


def check_dtype(dtype: Any, ctx: mx.Context | None = None) -> str:
    """Normalise a data type name and check that it can train on a context.

    Parameters
    ----------
    dtype : str or numpy.dtype
        ``"float32"``, ``"float16"`` or ``"bfloat16"`` (also ``"fp32"``, ``"fp16"``, ``"bf16"``,
        ``numpy.float32``, ``numpy.float16``).
    ctx : mxnet.Context, optional
        Where it will run; ``None`` skips the check of the context.

    Returns
    -------
    str
        One of :data:`DTYPES`.

    Raises
    ------
    ValueError
        If ``dtype`` is none of :data:`DTYPES`, if it is float16 and ``ctx`` is a CPU (MXNet has
        no float16 GEMM there), or if it is bfloat16 and ``ctx`` is a GPU (MXNet 1.9 runs
        bfloat16 AMP through oneDNN, on CPUs only).
    """
    aliases = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}
    name: str | None
    if isinstance(dtype, str):
        name = aliases.get(dtype.lower(), dtype.lower())
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
    if name not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    if ctx is not None and name == "float16" and not _is_gpu(ctx):
        raise ValueError(f"dtype='float16' on {ctx}: {NO_FP16_ON_CPU}")
    if ctx is not None and name == "bfloat16" and _is_gpu(ctx):
        raise ValueError(
            f"dtype='bfloat16' on {ctx}: MXNet 1.9 runs bfloat16 AMP through oneDNN on CPUs "
            "only; on a GPU use dtype='float16' (net.cast plus multi_precision=True)"
        )
    return name


_BF16_PROBE = """
import warnings
warnings.simplefilter("ignore")
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp
amp.init(target_dtype="bfloat16")
net = gluon.nn.HybridSequential()
net.add(gluon.nn.Conv2D(8, 3, padding=1), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
        gluon.nn.GlobalAvgPool2D(), gluon.nn.Dense(8))
net.initialize(mx.init.Xavier())
net.hybridize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
amp.init_trainer(trainer)
x = mx.nd.random.uniform(shape=(8, 3, 8, 8))
y = mx.nd.arange(8)
with autograd.record():
    loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    with amp.scale_loss(loss, trainer) as scaled:
        autograd.backward(scaled)
trainer.step(8)
print("bf16-ok", float(loss.sum().asscalar()))
"""


@functools.lru_cache(maxsize=1)
def probe_bf16(timeout: float = 120.0) -> tuple[bool, str]:
    """Find out whether MXNet AMP can train in bfloat16 on this CPU.

    A small convolutional network takes one AMP bfloat16 training step in a separate Python
    process, so that neither ``amp.init`` nor a failure (oneDNN prints its complaint to the
    process's stderr) touches this one. MXNet 1.9.1's oneDNN has bfloat16 convolutions for CPUs
    with AVX-512; on an AVX2-only CPU it fails with "could not create a primitive descriptor
    iterator". The answer is cached for the life of the process.

    Parameters
    ----------
    timeout : float, default 120
        Seconds to wait for the probe.

    Returns
    -------
    supported : bool
        Whether the step ran and gave a finite loss.
    reason : str
        ``"ok"``, or the last line of the failure.
    """
    try:
        out = subprocess.run(
            [sys.executable, "-c", _BF16_PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"the probe could not run: {exc}"
    for line in out.stdout.splitlines():
        if line.startswith("bf16-ok"):
            value = float(line.split()[1])
            if math.isfinite(value):
                return True, "ok"
            return False, f"the bfloat16 step gave a loss of {value}"
    lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
    found = [line for line in lines if "MXNetError" in line or "Error" in line]
    return False, (found or lines or [f"exit status {out.returncode}"])[-1]


def bf16_supported() -> bool:
    """Whether MXNet AMP can train in bfloat16 on this CPU (see :func:`probe_bf16`).

    Returns
    -------
    bool
        ``probe_bf16()[0]``.
    """
    return probe_bf16()[0]


def amp_initialized() -> str | None:
    """Return the type MXNet AMP was initialised for in this process, if it was.

    Returns
    -------
    str or None
        ``"bfloat16"`` or ``"float16"`` after ``amp.init``, ``"unknown"`` if ``amp.init`` was
        called other than through this module, ``None`` before.
    """
    if not amp.amp._amp_initialized:
        return None
    return _AMP_STATE.get("target", "unknown")


def _init_amp_bf16() -> None:
    target = amp_initialized()
    if target is None:
        amp.init(target_dtype="bfloat16")
        _AMP_STATE["target"] = "bfloat16"
    elif target == "float16":
        raise RuntimeError(
            "MXNet AMP was already initialised for float16 in this process; amp.init cannot be "
            "undone, so bfloat16 AMP needs a new process"
        )


def _refuse_after_amp(what: str) -> None:
    target = amp_initialized()
    if target is not None:
        raise RuntimeError(
            f"MXNet AMP was initialised ({target}) in this process: amp.init rewires MXNet's "
            f"operators for good, so a {what} would compute its convolutions in low precision. "
            "Build and train float32 and float16 networks before the first bfloat16 one, or "
            "start a new process"
        )


# ---------------------------------------------------------------------------------------------
# Networks


def round_up(value: int, multiple: int = 8) -> int:
    """Round a positive int up to a multiple, e.g. a layer width for Tensor Cores.

    Parameters
    ----------
    value : int
        The number to round (at least 1).
    multiple : int, default 8
        The multiple (at least 1).

    Returns
    -------
    int
        The smallest multiple of ``multiple`` that is at least ``value``.

    Raises
    ------
    ValueError
        If either argument is not a positive int.
    """
    for name, number in (("value", value), ("multiple", multiple)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ValueError(f"{name}={number!r}: give a positive int")
    return -(-value // multiple) * multiple


def get_network(
    name: str,
    classes: int,
    dtype: str = "float32",
    ctx: mx.Context | None = None,
    *,
    pretrained: bool = False,
    hybridize: bool = True,
    classes_multiple: int = 1,
) -> gluon.HybridBlock:
    """Build a model-zoo network, initialise it, hybridise it and cast it, as the tutorial does.

    Parameters
    ----------
    name : str
        A name from :data:`NETWORKS`, e.g. ``"resnet50_v2"``.
    classes : int
        Number of classes of the dataset.
    dtype : {"float32", "float16", "bfloat16"}, default "float32"
        ``"float16"`` casts the network with ``net.cast("float16")`` (BatchNorm keeps float32
        parameters, as Gluon's BatchNorm does); it needs a GPU context. ``"bfloat16"`` calls
        ``amp.init(target_dtype="bfloat16")`` first (if not done yet) and keeps float32
        parameters; AMP casts inside the network.
    ctx : mxnet.Context, optional
        Where the parameters live; default :func:`default_context`.
    pretrained : bool, default False
        Start the feature layers from the model zoo's ImageNet weights (downloaded on first use
        to ``$MXNET_HOME/models``, which needs network access) and give the network a new,
        Xavier-initialised output layer for ``classes``.
    hybridize : bool, default True
        Call ``net.hybridize()``.
    classes_multiple : int, default 1
        Round the width of the output layer up to this multiple (8 keeps every GEMM of a
        ResNet a multiple of 8 for float16 Tensor Cores). The extra outputs are never a target
        and learn to stay low; labels are unchanged.

    Returns
    -------
    mxnet.gluon.HybridBlock
        The network. Its first convolution infers its input channels from the first batch.

    Raises
    ------
    ValueError
        For an unknown ``name``, ``classes`` below 1, a ``dtype`` not in :data:`DTYPES`, or a
        ``dtype`` the context cannot run (see :func:`check_dtype`).
    RuntimeError
        For a float32 or float16 network after ``amp.init`` in this process (see
        :func:`amp_initialized`).
    """
    if not isinstance(name, str) or name.lower() not in NETWORKS:
        raise ValueError(f"unknown network {name!r}; known names: {', '.join(NETWORKS)}")
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 1:
        raise ValueError(f"classes={classes!r}: give the number of classes as a positive int")
    ctx = _check_context(ctx)
    dtype = check_dtype(dtype, ctx)
    outputs = round_up(classes, classes_multiple)
    if dtype == "bfloat16":
        _init_amp_bf16()
    else:
        _refuse_after_amp(f"{dtype} network")
    if pretrained:
        net = vision.get_model(name.lower(), classes=outputs)
        zoo = vision.get_model(name.lower(), pretrained=True, ctx=ctx)
        net.features = zoo.features
        net.output.initialize(mx.init.Xavier(magnitude=2.24), ctx=ctx)
    else:
        net = vision.get_model(name.lower(), classes=outputs)
        net.initialize(mx.init.Xavier(magnitude=2.24), ctx=ctx)
    if hybridize:
        net.hybridize()
    if dtype == "float16":
        net.cast("float16")
    return net


def channel_alignment(net: gluon.Block, multiple: int = 8) -> Table:
    """List the convolution and dense layers whose channel counts are not a multiple of 8.

    float16 Tensor Cores run a convolution or GEMM at full speed when its channel (or unit)
    counts are multiples of 8. Run one batch through the network first so that every shape is
    known.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network.
    multiple : int, default 8
        The multiple to check against.

    Returns
    -------
    Table
        One row per convolution or dense layer that is not aligned: ``layer``, ``kind``,
        ``in``, ``out``; its title counts the aligned layers.

    Raises
    ------
    ValueError
        If a layer's shape is not known yet, or the network has no such layer.
    """
    rows: list[dict[str, Any]] = []
    total = 0
    for key, param in net._collect_params_with_prefix().items():
        if not key.endswith("weight") or len(param.shape) not in (2, 4):
            continue
        if 0 in param.shape:
            raise ValueError(
                f"the shape of {key} is not known yet ({param.shape}): run one batch through "
                "the network first"
            )
        total += 1
        out_ch, in_ch = param.shape[0], param.shape[1]
        if out_ch % multiple or in_ch % multiple:
            kind = "dense" if len(param.shape) == 2 else "convolution"
            rows.append({"layer": key[: -len(".weight")], "kind": kind, "in": in_ch, "out": out_ch})
    if total == 0:
        raise ValueError("the network has no convolution or dense layer")
    aligned = total - len(rows)
    title = f"{aligned} of {total} convolution and dense layers are multiples of {multiple}"
    return Table(rows, title=title)


# ---------------------------------------------------------------------------------------------
# Data


@dataclass
class Loaders:
    """Train and test ``DataLoader`` for an image-folder dataset.

    Attributes
    ----------
    train : mxnet.gluon.data.DataLoader
        Shuffled training batches ``(images, labels)``; images are float32 ``(N, 3, H, W)``.
    test : mxnet.gluon.data.DataLoader
        Test batches in folder order.
    classes : tuple of str
        Class names; label ``i`` is ``classes[i]``.
    num_train : int
        Number of training images.
    num_test : int
        Number of test images.
    image_size : int
        Edge of the square images, in pixels.
    batch_size : int
        Images per batch.
    """

    train: gluon.data.DataLoader = field(repr=False)
    test: gluon.data.DataLoader = field(repr=False)
    classes: tuple[str, ...]
    num_train: int
    num_test: int
    image_size: int
    batch_size: int

    @property
    def num_classes(self) -> int:
        """Number of classes.

        Returns
        -------
        int
            ``len(classes)``.
        """
        return len(self.classes)


def image_transform(
    image_size: int,
    resize: int | None = None,
    mean: tuple[float, ...] = IMAGENET_MEAN,
    std: tuple[float, ...] = IMAGENET_STD,
) -> transforms.Compose:
    """Build the tutorial's transform: resize the short edge, crop the centre, normalise.

    Parameters
    ----------
    image_size : int
        Edge of the square crop, in pixels.
    resize : int, optional
        Length the short edge is resized to first; default ``image_size``.
    mean, std : tuple of float
        Per-channel statistics for ``Normalize``; default ImageNet's.

    Returns
    -------
    mxnet.gluon.data.vision.transforms.Compose
        Maps an HWC uint8 image to a normalised CHW float32 array.
    """
    resize = image_size if resize is None else resize
    return transforms.Compose(
        [
            transforms.Resize(resize, keep_ratio=True),
            transforms.CenterCrop(image_size),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ]
    )


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r}: give an int of at least {minimum}")
    return value


def image_folder_loaders(
    train_root: str | os.PathLike[str],
    test_root: str | os.PathLike[str],
    image_size: int = 224,
    batch_size: int = 64,
    num_workers: int = 0,
    *,
    resize: int | None = None,
    mean: tuple[float, ...] = IMAGENET_MEAN,
    std: tuple[float, ...] = IMAGENET_STD,
    pin_memory: bool = False,
) -> Loaders:
    """Build the tutorial's input pipeline on two image folders.

    ``ImageFolderDataset`` reads ``<root>/<class>/<image>``; :func:`image_transform` resizes,
    crops, converts to CHW float32 and normalises; ``DataLoader`` batches, shuffling the
    training set with NumPy's global random state (seed it for a repeatable order) and keeping
    the last, smaller batch.

    Parameters
    ----------
    train_root, test_root : path-like
        Image folders, e.g. :func:`mptutor.data.caltech101` or
        :func:`mptutor.data.digits_image_folder` results' ``train`` and ``test``.
    image_size : int, default 224
        Edge of the square images given to the network.
    batch_size : int, default 64
        Images per batch (a multiple of 8 suits float16 Tensor Cores).
    num_workers : int, default 0
        Worker processes that decode images; 0 decodes in this process (repeatable, and what CI
        uses); e.g. ``os.cpu_count()`` on a GPU machine.
    resize : int, optional
        Short edge before the centre crop; default ``image_size``.
    mean, std : tuple of float
        Normalisation statistics; default ImageNet's.
    pin_memory : bool, default False
        Put batches in page-locked memory (faster copies to a GPU).

    Returns
    -------
    Loaders
        The two loaders and the dataset's sizes and class names.

    Raises
    ------
    FileNotFoundError, NotADirectoryError
        If a folder is missing or is a file.
    ValueError
        If a folder has no class sub-folders or an empty class, the two folders have different
        classes, or a size is not a positive int.
    """
    image_size = _positive_int("image_size", image_size)
    batch_size = _positive_int("batch_size", batch_size)
    num_workers = _positive_int("num_workers", num_workers, minimum=0)
    if resize is not None:
        resize = _positive_int("resize", resize)
    train_counts = _data.check_image_folder(train_root)
    test_counts = _data.check_image_folder(test_root)
    if sorted(train_counts) != sorted(test_counts):
        only = sorted(set(train_counts) ^ set(test_counts))
        raise ValueError(
            f"{train_root} and {test_root} have different classes ({', '.join(only[:5])} in only "
            "one of them): labels would not match. Split both from the same source."
        )
    transform = image_transform(image_size, resize, mean, std)
    train_set = ImageFolderDataset(str(train_root)).transform_first(transform)
    test_set = ImageFolderDataset(str(test_root)).transform_first(transform)
    common = {"batch_size": batch_size, "num_workers": num_workers, "pin_memory": pin_memory}
    return Loaders(
        train=gluon.data.DataLoader(train_set, shuffle=True, last_batch="keep", **common),
        test=gluon.data.DataLoader(test_set, shuffle=False, last_batch="keep", **common),
        classes=tuple(sorted(train_counts)),
        num_train=len(train_set),
        num_test=len(test_set),
        image_size=image_size,
        batch_size=batch_size,
    )


# ---------------------------------------------------------------------------------------------
# Training


@dataclass
class EpochStats:
    """What one epoch of :func:`train` measured.

    Attributes
    ----------
    epoch : int
        Epoch number, from 1.
    loss : float
        Mean training loss over the epoch's images.
    train_accuracy : float
        Share of training images classified correctly during the epoch.
    test_accuracy : float
        Share of test images classified correctly after the epoch.
    seconds : float
        Wall time of the epoch's training (data loading included, evaluation excluded).
    images_per_second : float
        Training images per second.
    memory_mib : float or None
        GPU memory in use at the end of the epoch minus that in use before training, in MiB
        (MXNet keeps freed memory in its pool, so this is the run's high-water mark); ``None``
        on a CPU.
    """

    epoch: int
    loss: float
    train_accuracy: float
    test_accuracy: float
    seconds: float
    images_per_second: float
    memory_mib: float | None = None


@dataclass
class History:
    """Per-epoch results of :func:`train` and the trainer that produced them.

    Attributes
    ----------
    dtype : str
        ``"float32"``, ``"float16"`` or ``"bfloat16"``.
    multi_precision : bool
        Whether the optimizer kept float32 master weights.
    context : str
        Where it ran, e.g. ``"cpu(0)"``.
    epochs : list of EpochStats
        One entry per epoch.
    trainer : mxnet.gluon.Trainer
        The trainer (its optimizer holds the master weights); not part of ``as_dict``.
    """

    dtype: str
    multi_precision: bool
    context: str
    epochs: list[EpochStats] = field(default_factory=list)
    trainer: gluon.Trainer | None = field(default=None, repr=False, compare=False)

    def column(self, name: str) -> list[Any]:
        """One statistic for every epoch, e.g. ``history.column("loss")``.

        Parameters
        ----------
        name : str
            A field of :class:`EpochStats`.

        Returns
        -------
        list
            Its values, in epoch order.

        Raises
        ------
        KeyError
            If ``name`` is not a field of :class:`EpochStats`.
        """
        names = list(EpochStats.__dataclass_fields__)
        if name not in names:
            raise KeyError(f"no statistic {name!r}; statistics are {names}")
        return [getattr(e, name) for e in self.epochs]

    @property
    def final(self) -> EpochStats:
        """The last epoch's statistics.

        Returns
        -------
        EpochStats
            ``epochs[-1]``.
        """
        return self.epochs[-1]

    def table(self, digits: int = 4) -> Table:
        """Return the history as a table, one row per epoch.

        Parameters
        ----------
        digits : int, default 4
            Significant digits of loss and accuracy.

        Returns
        -------
        Table
            Columns epoch, loss, train acc, test acc, seconds, images/s (and GPU MiB on a GPU).
        """
        rows = []
        for e in self.epochs:
            row = {
                "epoch": e.epoch,
                "loss": float(f"{e.loss:.{digits}g}"),
                "train acc": float(f"{e.train_accuracy:.{digits}g}"),
                "test acc": float(f"{e.test_accuracy:.{digits}g}"),
                "seconds": round(e.seconds, 1),
                "images/s": round(e.images_per_second, 1),
            }
            if e.memory_mib is not None:
                row["GPU MiB"] = round(e.memory_mib)
            rows.append(row)
        title = f"{self.dtype}, multi_precision={self.multi_precision}, on {self.context}"
        return Table(rows, title=title)

    def as_dict(self) -> dict[str, Any]:
        """Return the history as plain data (for JSON).

        Returns
        -------
        dict
            ``dtype``, ``multi_precision``, ``context`` and ``epochs`` as a list of dicts.
        """
        return {
            "dtype": self.dtype,
            "multi_precision": self.multi_precision,
            "context": self.context,
            "epochs": [asdict(e) for e in self.epochs],
        }


def _params(net: gluon.Block) -> dict[str, gluon.Parameter]:
    if not isinstance(net, gluon.Block):
        raise TypeError(f"expected a Gluon Block, got {type(net).__name__}")
    params = net._collect_params_with_prefix()
    if not params:
        raise ValueError("the network has no parameters")
    return params


def _param_dtypes(net: gluon.Block) -> set[str]:
    return {np.dtype(p.dtype).name for p in _params(net).values()}


def _net_context(net: gluon.Block) -> mx.Context:
    for param in _params(net).values():
        try:
            return param.list_ctx()[0]
        except RuntimeError:
            continue
    raise ValueError("the network's parameters are not initialised: call net.initialize() first")


def _check_net_dtype(net: gluon.Block, dtype: str) -> None:
    found = _param_dtypes(net)
    if dtype == "float16" and "float16" not in found:
        raise ValueError(
            "dtype='float16' but the network has no float16 parameters: cast it first with "
            "net.cast('float16'), or build it with get_network(..., dtype='float16')"
        )
    if dtype != "float16" and "float16" in found:
        raise ValueError(
            f"dtype={dtype!r} but the network has float16 parameters: pass dtype='float16' "
            "(on a GPU), or build a float32 network"
        )


def make_trainer(
    net: gluon.Block,
    dtype: str = "float32",
    multi_precision: bool = True,
    *,
    optimizer: str = "sgd",
    learning_rate: float = 0.05,
    momentum: float = 0.9,
    wd: float = 1e-4,
) -> gluon.Trainer:
    """Create the tutorial's trainer: SGD with momentum, float32 master weights for float16.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network.
    dtype : {"float32", "float16", "bfloat16"}, default "float32"
        Its training type; ``"bfloat16"`` also calls ``amp.init_trainer`` (dynamic loss
        scaling; bfloat16 has float32's range, so the scale rarely has to back off).
    multi_precision : bool, default True
        Give the optimizer ``multi_precision``: it keeps a float32 copy of every float16
        parameter, applies the update there and copies the result back rounded to float16.
        It has no effect on float32 parameters.
    optimizer : str, default "sgd"
        An MXNet optimizer name (``"sgd"``, ``"nag"``, ``"adam"``, ...).
    learning_rate, momentum, wd : float
        Optimizer settings (``momentum`` only for optimizers that take one).

    Returns
    -------
    mxnet.gluon.Trainer
        The trainer.

    Raises
    ------
    ValueError
        For a bad ``dtype`` or a non-positive, non-finite learning rate.
    """
    dtype = check_dtype(dtype)
    if not (isinstance(learning_rate, int | float) and math.isfinite(learning_rate)):
        raise ValueError(f"learning_rate={learning_rate!r}: give a positive finite number")
    if learning_rate <= 0:
        raise ValueError(f"learning_rate={learning_rate!r}: give a positive finite number")
    params: dict[str, Any] = {
        "learning_rate": learning_rate,
        "wd": wd,
        "multi_precision": bool(multi_precision),
    }
    if optimizer.lower() in ("sgd", "nag", "lbsgd", "signum", "lars"):
        params["momentum"] = momentum
    trainer = gluon.Trainer(net.collect_params(), optimizer, params)
    if dtype == "bfloat16":
        if amp_initialized() is None:
            raise RuntimeError(
                "dtype='bfloat16' needs MXNet AMP: build the network with "
                "get_network(..., dtype='bfloat16'), which calls amp.init first"
            )
        amp.init_trainer(trainer)
    return trainer


def _gpu_memory_used(ctx: mx.Context) -> float | None:
    if not _is_gpu(ctx):
        return None
    free, total = mx.context.gpu_memory_info(ctx.device_id)
    return (total - free) / 2**20


def train(
    net: gluon.Block,
    train_data: Iterable[Any],
    test_data: Iterable[Any],
    epochs: int,
    dtype: str = "float32",
    multi_precision: bool = True,
    *,
    ctx: mx.Context | None = None,
    trainer: gluon.Trainer | None = None,
    learning_rate: float = 0.05,
    momentum: float = 0.9,
    wd: float = 1e-4,
    progress: bool = True,
    label: str | None = None,
    history: History | None = None,
) -> History:
    """Train a classifier with softmax cross-entropy, the same loop for every type.

    Each batch is moved to ``ctx`` and, for float16, cast to float16 to match the network; the
    network's output is cast to float32 before the softmax cross-entropy. With bfloat16, MXNet
    AMP casts inside the network and the loss goes through ``amp.scale_loss``. After each
    epoch the test set is evaluated.

    Parameters
    ----------
    net : mxnet.gluon.Block
        An initialised network: float32, cast to float16, or built for bfloat16 AMP (see
        :func:`get_network`).
    train_data, test_data : iterable of (NDArray, NDArray)
        Batches of images and labels, e.g. :func:`image_folder_loaders`' loaders.
    epochs : int
        Number of passes over ``train_data`` (at least 1).
    dtype : {"float32", "float16", "bfloat16"}, default "float32"
        Training type; it must match the network's parameters.
    multi_precision : bool, default True
        Keep float32 master weights in the optimizer (see :func:`make_trainer`).
    ctx : mxnet.Context, optional
        Where to compute; default: where the network's parameters are.
    trainer : mxnet.gluon.Trainer, optional
        Continue with this trainer; default a new one from :func:`make_trainer` with
        ``learning_rate``, ``momentum`` and ``wd``.
    learning_rate, momentum, wd : float
        Settings of the SGD optimizer made when ``trainer`` is not given.
    progress : bool, default True
        Show a tqdm progress bar (``tqdm.auto``: a widget in Jupyter, text elsewhere).
    label : str, optional
        Prefix of the progress bar; default ``dtype``.
    history : History, optional
        Continue this run of the same network: its trainer is used (``trainer`` must not be
        given) and the new epochs are appended to it, numbered after its last one.

    Returns
    -------
    History
        Loss, accuracies, seconds and images per second for every epoch, and the trainer
        (``history`` itself, extended, when it was given).

    Raises
    ------
    ValueError
        If ``epochs`` is not an int of at least 1, ``dtype`` is unknown or cannot run on the
        context (float16 on a CPU), does not match the network's parameters, or either data
        source yields no batch.
    RuntimeError
        For float32 or float16 training after ``amp.init``, or bfloat16 training without it.
    """
    epochs = _positive_int("epochs", epochs)
    ctx = _net_context(net) if ctx is None else _check_context(ctx)
    dtype = check_dtype(dtype, ctx)
    _check_net_dtype(net, dtype)
    if dtype != "bfloat16":
        _refuse_after_amp(f"{dtype} training run")
    if history is not None:
        if trainer is not None:
            raise ValueError("give either trainer or history (whose trainer continues), not both")
        if history.dtype != dtype or history.trainer is None:
            raise ValueError(
                f"history is a {history.dtype} run without its trainer or of another type than "
                f"dtype={dtype!r}: continue a run with the dtype it was started with"
            )
        trainer = history.trainer
    if trainer is None:
        trainer = make_trainer(
            net, dtype, multi_precision, learning_rate=learning_rate, momentum=momentum, wd=wd
        )
    use_amp = dtype == "bfloat16"
    if use_amp and getattr(trainer, "_amp_loss_scaler", None) is None:
        amp.init_trainer(trainer)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    first = 1
    if history is None:
        history = History(
            dtype=dtype, multi_precision=bool(multi_precision), context=str(ctx), trainer=trainer
        )
    elif history.epochs:
        first = history.epochs[-1].epoch + 1
    mx.nd.waitall()
    if _is_gpu(ctx):
        ctx.empty_cache()
    memory_before = _gpu_memory_used(ctx)
    name = label or dtype
    last = first + epochs - 1
    for epoch in range(first, last + 1):
        total_loss = mx.nd.zeros((1,), ctx=ctx)
        correct = mx.nd.zeros((1,), ctx=ctx)
        seen = 0
        start = time.perf_counter()
        try:
            total = len(train_data)  # type: ignore[arg-type]
        except TypeError:
            total = None
        bar = tqdm(
            train_data,
            total=total,
            desc=f"{name} epoch {epoch}/{last}",
            disable=not progress,
            leave=False,
            unit="batch",
        )
        for batch, (x, y) in enumerate(bar, 1):
            x = x.as_in_context(ctx)
            y = y.as_in_context(ctx)
            if dtype == "float16":
                x = x.astype("float16", copy=False)
            # MXNet 1.9 updates a BatchNorm's running statistics in its backward pass. The
            # first layer of a ResNet v2 is a BatchNorm of the input with nothing to learn, so
            # its backward runs only if the input asks for a gradient; without this its
            # running mean and variance stay 0 and 1 and test-time inputs are scaled unlike
            # training ones.
            x.attach_grad()
            with autograd.record():
                out = net(x).astype("float32", copy=False)
                loss = loss_fn(out, y)
                if use_amp:
                    with amp.scale_loss(loss, trainer) as scaled:
                        autograd.backward(scaled)
            if not use_amp:
                loss.backward()
            trainer.step(x.shape[0])
            total_loss += loss.sum()
            correct += (out.argmax(axis=1) == y.astype("float32", copy=False)).sum()
            seen += x.shape[0]
            if progress and batch % 10 == 0:
                bar.set_postfix(loss=f"{total_loss.asscalar() / seen:.4f}")
        bar.close()
        if seen == 0:
            raise ValueError("train_data yielded no batches: check the dataset and batch size")
        mean_loss = float(total_loss.asscalar()) / seen
        train_accuracy = float(correct.asscalar()) / seen
        mx.nd.waitall()
        seconds = time.perf_counter() - start
        memory = _gpu_memory_used(ctx)
        test_accuracy = evaluate(net, test_data, ctx=ctx, dtype=dtype)
        history.epochs.append(
            EpochStats(
                epoch=epoch,
                loss=mean_loss,
                train_accuracy=train_accuracy,
                test_accuracy=test_accuracy,
                seconds=seconds,
                images_per_second=seen / seconds,
                memory_mib=None
                if memory is None or memory_before is None
                else memory - memory_before,
            )
        )
    return history


def _outputs(
    net: gluon.Block,
    data: Iterable[Any],
    ctx: mx.Context | None,
    dtype: str | None,
    batch_statistics: bool,
) -> Iterable[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
    ctx = _net_context(net) if ctx is None else _check_context(ctx)
    if dtype is None:
        dtype = "float16" if "float16" in _param_dtypes(net) else "float32"
    dtype = check_dtype(dtype, ctx)
    seen = 0
    for x, y in data:
        x = x.as_in_context(ctx)
        if dtype == "float16":
            x = x.astype("float16", copy=False)
        if batch_statistics:
            with autograd.train_mode():  # BatchNorm normalises with this batch's statistics
                out = net(x)
        else:
            out = net(x)
        seen += x.shape[0]
        yield out.astype("float32", copy=False), y.as_in_context(ctx).astype("float32")
    if seen == 0:
        raise ValueError("the data yielded no batches: nothing to evaluate")


def evaluate(
    net: gluon.Block,
    data: Iterable[Any],
    ctx: mx.Context | None = None,
    dtype: str | None = None,
    *,
    batch_statistics: bool = False,
) -> float:
    """Classification accuracy of a network on batches of ``(images, labels)``.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network (in inference mode: BatchNorm uses its running statistics).
    data : iterable of (NDArray, NDArray)
        Batches, e.g. ``loaders.test``.
    ctx : mxnet.Context, optional
        Where to compute; default where the network's parameters are.
    dtype : str, optional
        Type the images are cast to; default float16 if the network has float16 parameters,
        else float32 (bfloat16 AMP networks take float32 input).
    batch_statistics : bool, default False
        Normalise every BatchNorm layer with the statistics of each test batch (Gluon's
        training mode, without recording or updating anything) instead of its running
        averages. A diagnostic: a large gap between the two accuracies means the running
        averages do not describe what the current weights produce.

    Returns
    -------
    float
        Correct predictions divided by the number of images.

    Raises
    ------
    ValueError
        If ``data`` yields no batch, or float16 is asked for on a CPU.
    """
    correct = None
    seen = 0
    for out, y in _outputs(net, data, ctx, dtype, batch_statistics):
        hits = (out.argmax(axis=1) == y).sum()
        correct = hits if correct is None else correct + hits
        seen += y.shape[0]
    return float(correct.asscalar()) / seen  # type: ignore[union-attr]


def predict(
    net: gluon.Block,
    data: Iterable[Any],
    ctx: mx.Context | None = None,
    dtype: str | None = None,
    *,
    batch_statistics: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted classes and true labels of every image, as NumPy arrays.

    Parameters
    ----------
    net, data, ctx, dtype, batch_statistics
        As for :func:`evaluate`.

    Returns
    -------
    predicted : numpy.ndarray
        The class with the largest output for each image (int64).
    labels : numpy.ndarray
        The labels (int64), in the same order.

    Raises
    ------
    ValueError
        If ``data`` yields no batch, or float16 is asked for on a CPU.
    """
    predicted, labels = [], []
    for out, y in _outputs(net, data, ctx, dtype, batch_statistics):
        predicted.append(out.argmax(axis=1).asnumpy().astype(np.int64))
        labels.append(y.asnumpy().astype(np.int64))
    return np.concatenate(predicted), np.concatenate(labels)


# ---------------------------------------------------------------------------------------------
# Master weights and checkpoints


def _updaters(trainer: gluon.Trainer) -> list[Any]:
    """List the optimizer updaters whose ``states`` hold the master copies, one per device."""
    if not isinstance(trainer, gluon.Trainer):
        raise TypeError(f"trainer: expected a gluon.Trainer, got {type(trainer).__name__}")
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._kvstore is not None and trainer._update_on_kvstore:
        return [trainer._kvstore._updater]
    return list(trainer._updaters)


def _master_index(optimizer: mx.optimizer.Optimizer) -> int:
    # Where create_state_multi_precision puts the float32 copy in the state tuple: the base
    # Optimizer (Adam, LAMB, ...) returns (master, state); SGD, NAG, LARS, LBSGD, which define
    # their own, return (state, master).
    own = type(optimizer).create_state_multi_precision
    return 0 if own is mx.optimizer.Optimizer.create_state_multi_precision else 1


def _master_copy(
    trainer: gluon.Trainer, param: gluon.Parameter, device: int = 0
) -> mx.nd.NDArray | None:
    """Find the optimizer's float32 master copy of a float16 parameter (None: none yet)."""
    optimizer = trainer._optimizer
    if np.dtype(param.dtype) != np.float16 or not optimizer.multi_precision:
        return None
    index = trainer._param2idx.get(param.name)
    if index is None:
        return None
    state = _updaters(trainer)[device].states.get(index)
    if state is None:
        return None
    master = state[_master_index(optimizer)]
    if not (
        isinstance(master, mx.nd.NDArray)
        and master.dtype == np.float32
        and master.shape == param.shape
    ):
        raise RuntimeError(
            f"cannot find the float32 master copy of {param.name} in the state of "
            f"{type(optimizer).__name__}; this helper knows MXNet 1.9's optimizers"
        )
    return master


def _check_trainer_for(net_params: Mapping[str, gluon.Parameter], trainer: Any) -> None:
    half = [key for key, p in net_params.items() if np.dtype(p.dtype) == np.float16]
    if not half:
        return
    if trainer is None:
        raise ValueError(
            f"the network has {len(half)} float16 parameters (e.g. {half[0]}): pass the "
            "Trainer, whose optimizer keeps their float32 master copies (multi_precision=True); "
            "saving the float16 copies would lose the bits the master weights exist for"
        )
    if not trainer._optimizer.multi_precision:
        raise ValueError(
            "the trainer's optimizer has multi_precision=False, so it keeps no float32 master "
            "copy of the float16 parameters; create it with multi_precision=True"
        )


def master_weights(
    net: gluon.Block, trainer: gluon.Trainer | None = None
) -> tuple[dict[str, mx.nd.NDArray], set[str]]:
    """Collect the network's weights in float32: the optimizer's master copy where there is one.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network, its parameters initialised (run one batch first if shapes are deferred).
    trainer : mxnet.gluon.Trainer, optional
        The trainer of a float16 network. Required when the network has float16 parameters.

    Returns
    -------
    weights : dict of str to NDArray
        Every parameter (BatchNorm running statistics included) as a float32 CPU array, keyed
        by its structural name (``"features.1.weight"``, as ``save_parameters`` uses).
    from_master : set of str
        The names whose values came from the optimizer's float32 master copies. A float16
        parameter that has not been updated yet has no master copy; its value, cast to
        float32, is exactly what the optimizer will start from.

    Raises
    ------
    ValueError
        If the network has float16 parameters and no trainer, or a trainer without
        ``multi_precision``, or a parameter is not initialised.
    """
    params = _params(net)
    _check_trainer_for(params, trainer)
    weights: dict[str, mx.nd.NDArray] = {}
    from_master: set[str] = set()
    for key, param in params.items():
        try:
            value = param.data(param.list_ctx()[0])
        except (RuntimeError, gluon.parameter.DeferredInitializationError) as exc:
            raise ValueError(
                f"parameter {key} has no value yet ({type(exc).__name__}): initialise the "
                "network and run one batch through it first"
            ) from exc
        master = _master_copy(trainer, param) if trainer is not None else None
        if master is not None:
            value = master
            from_master.add(key)
        weights[key] = value.astype("float32").copyto(mx.cpu())
    return weights, from_master


@dataclass(frozen=True)
class Checkpoint:
    """What :func:`save_master_weights` wrote.

    Attributes
    ----------
    path : pathlib.Path
        The file.
    arrays : int
        Number of float32 arrays in it.
    from_master : int
        How many came from the optimizer's float32 master copies.
    bytes : int
        File size.
    """

    path: Path
    arrays: int
    from_master: int
    bytes: int


def save_master_weights(
    net: gluon.Block, path: str | os.PathLike[str], trainer: gluon.Trainer | None = None
) -> Checkpoint:
    """Save the float32 master weights of a network, atomically.

    The file holds one float32 array per parameter (``mx.nd.save`` format), the optimizer's
    master copy for every float16 parameter that has one, so a float16 run loses nothing when
    it is saved. It is written to a temporary file in the same folder and renamed into place:
    a crash leaves the old file or the new one, never half of one. Optimizer state such as
    momentum is not included (``trainer.save_states`` saves it).

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network.
    path : path-like
        Where to write; its folder must exist.
    trainer : mxnet.gluon.Trainer, optional
        The trainer; required when the network has float16 parameters.

    Returns
    -------
    Checkpoint
        Path, number of arrays, how many were master copies, size in bytes.

    Raises
    ------
    ValueError
        See :func:`master_weights`.
    FileNotFoundError
        If the folder of ``path`` does not exist.
    """
    target = Path(path)
    if not target.parent.is_dir():
        raise FileNotFoundError(f"folder {target.parent} does not exist: create it first")
    weights, from_master = master_weights(net, trainer)
    with atomic_path(target) as tmp:
        mx.nd.save(str(tmp), weights)
    return Checkpoint(
        path=target,
        arrays=len(weights),
        from_master=len(from_master),
        bytes=target.stat().st_size,
    )


def load_master_weights(
    net: gluon.Block,
    path: str | os.PathLike[str],
    trainer: gluon.Trainer | None = None,
) -> int:
    """Load float32 master weights saved by :func:`save_master_weights` into a network.

    Each parameter gets the saved value cast to its own type (float16 parameters get the master
    rounded to float16). With a ``trainer`` whose optimizer has ``multi_precision``, the
    optimizer's master copies are set to the saved float32 values too, so training resumes
    from the exact master weights rather than from their float16 rounding.

    Parameters
    ----------
    net : mxnet.gluon.Block
        A network of the same architecture (float32, float16 or bfloat16 AMP), initialised.
    path : path-like
        The file.
    trainer : mxnet.gluon.Trainer, optional
        The trainer that will continue training ``net``.

    Returns
    -------
    int
        Number of optimizer master copies set, one per float16 parameter and device (0
        without a trainer or without float16 parameters).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the file is not a dict of float32 arrays, or its names or shapes do not match the
        network's parameters (the message lists the differences).
    """
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"no checkpoint at {source}")
    try:
        loaded = mx.nd.load(str(source))
    except mx.base.MXNetError as exc:
        raise ValueError(f"{source} is not an MXNet array file: {exc}") from exc
    if not isinstance(loaded, dict) or not all(v.dtype == np.float32 for v in loaded.values()):
        raise ValueError(
            f"{source} is not a master-weights checkpoint: expected named float32 arrays, as "
            "save_master_weights writes"
        )
    params = _params(net)
    missing = sorted(set(params) - set(loaded))
    extra = sorted(set(loaded) - set(params))
    if missing or extra:
        raise ValueError(
            f"{source} does not match the network: missing {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}, unexpected {extra[:5]}"
            f"{' ...' if len(extra) > 5 else ''} (is it the same architecture and classes?)"
        )
    for key, param in params.items():
        known = tuple(param.shape or ())
        shape = tuple(loaded[key].shape)
        if 0 not in known and known != shape:
            raise ValueError(f"{key}: the file has shape {shape}, the network {known}")
    set_masters = 0
    updaters = _updaters(trainer) if trainer is not None else []
    for key, param in params.items():
        value = loaded[key]
        if 0 in tuple(param.shape or ()):
            param.shape = value.shape
        param.set_data(value.astype(param.dtype))
        if trainer is None or np.dtype(param.dtype) != np.float16:
            continue
        if not trainer._optimizer.multi_precision:
            continue
        index = trainer._param2idx.get(param.name)
        if index is None:
            continue
        for device, (updater, weight) in enumerate(zip(updaters, param.list_data(), strict=False)):
            if index not in updater.states:
                updater.states[index] = trainer._optimizer.create_state_multi_precision(
                    index, weight
                )
                updater.states_synced[index] = True
            master = _master_copy(trainer, param, device)
            if master is not None:
                master[:] = value.as_in_context(master.context)
                set_masters += 1
    return set_masters


# ---------------------------------------------------------------------------------------------
# Loss scaling with mptutor's scaler in a Gluon Trainer loop


def gradients_stats(net: gluon.Block, fmt: Any = "fp16") -> GradientStats:
    """Statistics of the gradients currently held by a network's parameters.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network, after a backward pass.
    fmt : str or dtype, optional
        The format to measure against (see :func:`mptutor.formats.get`).

    Returns
    -------
    GradientStats
        Zeros, infs/NaNs, values that would underflow or overflow in ``fmt``, exponents.
    """
    grads = [p.grad().asnumpy() for p in _params(net).values() if p.grad_req != "null"]
    return gradient_stats(grads, fmt)


class LossScaledTrainerStep:
    """One Gluon training step driven by :mod:`mptutor.scaling`'s loss scaler.

    The per-sample losses are computed in float32 and multiplied by the scale before the
    backward pass. The gradients are checked for inf/NaN in one fused operator
    (``multi_all_finite``, as MXNet AMP does) and one host read; a step with a non-finite
    gradient is skipped. Otherwise ``trainer.step(batch_size * scale)`` applies it: the
    optimizer's ``rescale_grad`` divides by the scale, in float32 when the trainer uses
    ``multi_precision=True``. Clipping, when asked for, limits the norm of the unscaled
    gradients.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network.
    trainer : mxnet.gluon.Trainer
        Its trainer (use ``multi_precision=True`` for a float16 network).
    loss_fn : mxnet.gluon.loss.Loss
        A loss returning one value per sample, e.g. ``SoftmaxCrossEntropyLoss()``.
    loss_scaler : DynamicLossScaler or StaticLossScaler, optional
        A :class:`~mptutor.scaling.DynamicLossScaler` with MXNet AMP's start (``2**16``) and
        growth interval (2000) when omitted.
    clip_norm : float, optional
        Clip the global norm of the unscaled, batch-averaged gradients to this value.

    Raises
    ------
    ValueError
        If ``clip_norm`` is not a positive finite number, or the network has no parameter
        with a gradient.
    """

    def __init__(
        self,
        net: gluon.Block,
        trainer: gluon.Trainer,
        loss_fn: gluon.loss.Loss,
        loss_scaler: DynamicLossScaler | StaticLossScaler | None = None,
        clip_norm: float | None = None,
    ) -> None:
        clip_norm = optional_positive("clip_norm", clip_norm)
        self.params = [p for p in _params(net).values() if p.grad_req != "null"]
        if not self.params:
            raise ValueError("the network has no parameter with a gradient (grad_req != 'null')")
        self.net = net
        self.trainer = trainer
        self.loss_fn = loss_fn
        self.loss_scaler = loss_scaler if loss_scaler is not None else DynamicLossScaler()
        self.clip_norm = clip_norm

    def __call__(self, data: Any, label: Any) -> tuple[float, bool]:
        """Run one step on a batch.

        Parameters
        ----------
        data, label : mxnet.nd.NDArray
            A batch (in the network's dtype and context).

        Returns
        -------
        loss : float
            The mean unscaled loss of the batch.
        took : bool
            Whether the update was applied (``False``: inf/NaN found, step skipped).
        """
        scale = self.loss_scaler.scale
        batch_size = data.shape[0]
        with autograd.record():
            out = self.net(data)
            losses = self.loss_fn(out.astype("float32"), label)
            scaled = losses * scale
        scaled.backward()
        grads = [p.grad() for p in self.params]
        flag = mx.nd.ones((1,), ctx=grads[0].context)
        for start in range(0, len(grads), 200):  # the operator takes at most 200 arrays
            chunk = grads[start : start + 200]
            mx.nd.multi_all_finite(*chunk, num_arrays=len(chunk), init_output=False, out=flag)
        finite = bool(flag.asscalar())  # the one host read of the step
        took = self.loss_scaler.update(not finite)
        if took:
            if self.clip_norm is not None:
                gluon.utils.clip_global_norm(
                    grads, self.clip_norm * scale * batch_size, check_isfinite=False
                )
            self.trainer.step(batch_size * scale)
        return float(losses.mean().asscalar()), took


# ---------------------------------------------------------------------------------------------
# Which optimizers support multi_precision? Try every registered one.


@dataclass
class OptimizerTrial:
    """What one optimizer did to a float16 weight in :func:`try_multi_precision`.

    Attributes
    ----------
    optimizer : str
        Its registered name.
    multi_precision : bool
        Whether it was created with ``multi_precision=True``.
    error : str
        The error it raised, shortened (empty when it ran).
    weight_moved : bool or None
        Whether any entry of the float16 weight left 1.0 (``None`` after an error).
    weight_after : float or None
        The first entry of the float16 weight after the updates.
    master : bool or None
        Whether its state holds a float32 array of the weight's shape that rounds to the
        float16 weight: the master copy.
    master_moved : bool or None
        Whether that master copy left 1.0.
    own_code : bool
        Whether the class overrides ``update_multi_precision`` (fused multi-precision kernels)
        rather than inheriting the base class's generic version.
    warnings : dict of str to int
        Each warning raised during the updates (``"Category: message"``) and how often.
    """

    optimizer: str
    multi_precision: bool
    error: str = ""
    weight_moved: bool | None = None
    weight_after: float | None = None
    master: bool | None = None
    master_moved: bool | None = None
    own_code: bool = False
    warnings: dict[str, int] = field(default_factory=dict)


def _find_master(state: Any, weight: mx.nd.NDArray) -> mx.nd.NDArray | None:
    """Find a float32 array in an optimizer state that rounds to the float16 weight (or None)."""
    if isinstance(state, tuple | list):
        for part in state:
            found = _find_master(part, weight)
            if found is not None:
                return found
        return None
    if (
        isinstance(state, mx.nd.NDArray)
        and state.dtype == np.float32
        and state.shape == weight.shape
        and bool((state.astype("float16") == weight).min().asscalar())
    ):
        return state
    return None


def _short_error(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join((lines[-1] if lines else "").split())
    return f"{type(exc).__name__}: {text.rsplit(': ', 1)[-1]}"[:80]


def try_multi_precision(
    name: str,
    multi_precision: bool = True,
    *,
    steps: int = 100,
    learning_rate: float = 3e-5,
    seed: int = 0,
) -> OptimizerTrial:
    """Update a float16 weight of ones with a gradient of ones, ``steps`` times.

    The optimizer is created with ``mx.optimizer.create(name, learning_rate=...,
    multi_precision=...)`` and applied through ``mx.optimizer.get_updater`` on a CPU to a
    2x4 float16 weight (2-D, because GroupAdaGrad takes only matrices). A step of about the
    learning rate is far below half the float16 spacing just below 1.0 (``2**-12``) for the
    default learning rate, so an optimizer that updates the float16 weight directly leaves it
    at 1.0, while a float32 master copy accumulates the steps. Every exception the
    optimizer raises is recorded as the result, not raised; every warning is counted.

    Parameters
    ----------
    name : str
        A name registered in ``mx.optimizer.Optimizer.opt_registry``.
    multi_precision : bool, default True
        Create the optimizer with ``multi_precision``.
    steps : int, default 100
        Number of updates (at least 1).
    learning_rate : float, default 3e-5
        The optimizer's learning rate.
    seed : int, default 0
        Seed of MXNet's generator (SGLD adds random noise).

    Returns
    -------
    OptimizerTrial
        What happened.

    Raises
    ------
    ValueError
        If ``name`` is not a registered optimizer or ``steps`` is not a positive int.
    """
    registry = mx.optimizer.Optimizer.opt_registry
    if name not in registry:
        raise ValueError(f"unknown optimizer {name!r}; registered: {', '.join(sorted(registry))}")
    steps = _positive_int("steps", steps)
    cls = registry[name]
    trial = OptimizerTrial(
        optimizer=name,
        multi_precision=bool(multi_precision),
        own_code=cls.update_multi_precision is not mx.optimizer.Optimizer.update_multi_precision,
    )
    mx.random.seed(seed)
    weight = mx.nd.ones((2, 4), ctx=mx.cpu(), dtype="float16")
    grad = mx.nd.ones((2, 4), ctx=mx.cpu(), dtype="float16")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            optimizer = mx.optimizer.create(
                name, learning_rate=learning_rate, multi_precision=bool(multi_precision)
            )
            updater = mx.optimizer.get_updater(optimizer)
            for _ in range(steps):
                updater(0, grad, weight)
            mx.nd.waitall()
        except Exception as exc:  # noqa: BLE001 - any failure is a result of the survey
            trial.error = _short_error(exc)
        else:
            master = _find_master(updater.states[0], weight)
            trial.weight_moved = bool((weight != 1).max().asscalar())
            trial.weight_after = float(weight[0, 0].asscalar())
            trial.master = master is not None
            if master is not None:
                trial.master_moved = bool((master != 1).max().asscalar())
    for w in caught:
        text = f"{w.category.__name__}: {w.message}"
        trial.warnings[text] = trial.warnings.get(text, 0) + 1
    return trial


def multi_precision_survey(
    names: Iterable[str] | None = None,
    *,
    steps: int = 100,
    learning_rate: float = 3e-5,
) -> tuple[Table, list[tuple[OptimizerTrial, OptimizerTrial]]]:
    """Try every registered optimizer on a float16 weight with and without ``multi_precision``.

    Parameters
    ----------
    names : iterable of str, optional
        Optimizer names; default every name in ``mx.optimizer.Optimizer.opt_registry``, sorted.
    steps, learning_rate
        As for :func:`try_multi_precision`.

    Returns
    -------
    table : Table
        One row per optimizer: ``optimizer``; ``code`` (``own`` fused multi-precision kernels
        or the base class's ``generic`` wrapper); ``fp32 master`` (``moved``, ``unchanged``,
        ``none`` or the error) and ``fp16 weight after`` with ``multi_precision=True``;
        ``warnings`` (how many were raised with it); ``without multi_precision`` (whether the
        float16 weight ``moved``, stayed ``unchanged``, or the error).
    trials : list of (OptimizerTrial, OptimizerTrial)
        The trials with and without ``multi_precision``, in the table's order.
    """
    chosen = sorted(mx.optimizer.Optimizer.opt_registry) if names is None else list(names)
    rows, trials = [], []
    for name in chosen:
        with_mp = try_multi_precision(name, True, steps=steps, learning_rate=learning_rate)
        without = try_multi_precision(name, False, steps=steps, learning_rate=learning_rate)
        trials.append((with_mp, without))
        if with_mp.error:
            master = with_mp.error
        elif not with_mp.master:
            master = "none"
        else:
            master = "moved" if with_mp.master_moved else "unchanged"
        rows.append(
            {
                "optimizer": name,
                "code": "own" if with_mp.own_code else "generic",
                "fp32 master": master,
                "fp16 weight after": with_mp.weight_after,
                "warnings": sum(with_mp.warnings.values()),
                "without multi_precision": without.error
                or ("moved" if without.weight_moved else "unchanged"),
            }
        )
    return Table(rows, float_format=".5g"), trials
