"""MXNet Gluon helpers: model-zoo networks in float16 or bfloat16, a training loop, checkpoints.

Use it the d2l way (this package imports MXNet; ``import mptutor`` does not)::

    from mptutor import mxnet as mmx

It packages the recipe of the MXNet float16 tutorial (a Gluon ResNet-50 v2 on Caltech 101):
cast the network with ``net.cast("float16")``, cast each batch to match, and give the optimizer
``multi_precision=True`` so that it keeps a float32 master copy of every float16 weight. The
notebook ``notebooks/gluon/02-resnet50-caltech101`` writes each of these steps out; the functions
here are the tested versions it then calls. ``notebooks/gluon/01-mixed-precision-in-gluon`` uses
:class:`LossScaledStep` and :func:`multi_precision_survey`.

What runs where (MXNet 1.9.1):

* **float16** needs a GPU. MXNet has no float16 matrix products on a CPU: a float16 convolution
  fails there with ``FP16 gemm on cpu not implemented!``, a float16 dense layer with a message
  that it needs cuDNN. :func:`get_network` and :func:`train` refuse float16 on a CPU context
  with a message that says so.
* **bfloat16** runs through MXNet AMP (``mxnet.contrib.amp``) on a CPU whose oneDNN has bfloat16
  kernels (AVX-512 CPUs); the network keeps float32 parameters and AMP casts the inputs of
  convolutions and dense layers. ``amp.init`` changes MXNet's operators for the rest of the
  process and cannot be undone, so build float32 networks before the first bfloat16 one.
  :func:`probe_bf16` tells, without touching this process, whether this CPU can do it.
* the ``multi_precision`` optimizer update (``mp_sgd_mom_update`` and friends) is elementwise
  and runs on a CPU as well.

This file only gathers the public names. The code lives in private modules, one per job:

``_imports``
    MXNet and tqdm, imported once with their import-time warnings hidden; every other module
    takes them from here. ``mmx.mx``, ``mmx.gluon``, ``mmx.autograd``, ``mmx.amp`` and
    ``mmx.vision`` are these modules.
``_context``
    Where and in which type: :func:`seed`, :func:`context` (the GPU MXNet sees unless
    ``MPTUTOR_DEVICE=cpu``; sizes by it: ``hardware.pick(..., on=context())``),
    :func:`check_dtype`, :data:`DTYPES`.
``_amp``
    bfloat16 through MXNet AMP: :func:`probe_bf16`, :func:`bf16_supported`,
    :func:`amp_initialized`, and ``amp.init`` done once.
``_networks``
    :func:`get_network` (the model zoo, :data:`NETWORKS`), :func:`round_up`,
    :func:`channel_alignment`, and the network-parameter helpers the other modules share.
``_loaders``
    :class:`Loaders`, :func:`image_transform`, :func:`image_folder_loaders`.
``_history``
    :class:`EpochStats` and :class:`History`, what a training run measured.
``_training``
    :func:`make_trainer` and :func:`train`.
``_evaluation``
    :func:`evaluate`, :func:`predict`, and :func:`refresh_statistics` (BatchNorm's running
    averages refreshed with the weights fixed).
``_checkpoints``
    :func:`master_weights`, :class:`Checkpoint`, :func:`save_master_weights`,
    :func:`load_master_weights`: the optimizer's float32 master copies, saved and restored.
``_loss_scaling``
    :class:`LossScaledStep` (a Gluon ``Trainer`` step driven by any
    :class:`mptutor.scaling.LossScaler`) and :func:`gradient_stats`, the same names as in the
    PyTorch and TensorFlow modules.
``_optimizers``
    :class:`OptimizerTrial`, :func:`try_multi_precision`, :func:`multi_precision_survey`:
    which registered optimizers keep a float32 master copy.

Examples
--------
>>> from mptutor import data, mxnet as mmx  # doctest: +SKIP
>>> folders = data.digits_image_folder(size=32)  # doctest: +SKIP
>>> loaders = mmx.image_folder_loaders(folders.train, folders.test, image_size=32)  # doctest: +SKIP
>>> net = mmx.get_network("resnet18_v2", classes=10, dtype="float32")  # doctest: +SKIP
>>> history = mmx.train(net, loaders.train, loaders.test, epochs=2)  # doctest: +SKIP
>>> mmx.save_master_weights(net, "resnet18.params", trainer=history.trainer)  # doctest: +SKIP
"""

from mptutor.mxnet._amp import amp_initialized, bf16_supported, probe_bf16
from mptutor.mxnet._checkpoints import (
    Checkpoint,
    load_master_weights,
    master_weights,
    save_master_weights,
)
from mptutor.mxnet._context import DTYPES, NO_FP16_ON_CPU, check_dtype, context, seed
from mptutor.mxnet._evaluation import evaluate, predict, refresh_statistics
from mptutor.mxnet._history import EpochStats, History

# MXNet's own modules, as _imports imported them: attributes of this package, not in `*`.
from mptutor.mxnet._imports import amp as amp
from mptutor.mxnet._imports import autograd as autograd
from mptutor.mxnet._imports import gluon as gluon
from mptutor.mxnet._imports import mx as mx
from mptutor.mxnet._imports import vision as vision
from mptutor.mxnet._loaders import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Loaders,
    image_folder_loaders,
    image_transform,
)
from mptutor.mxnet._loss_scaling import LossScaledStep, gradient_stats
from mptutor.mxnet._networks import NETWORKS, channel_alignment, get_network, round_up
from mptutor.mxnet._optimizers import OptimizerTrial, multi_precision_survey, try_multi_precision
from mptutor.mxnet._training import make_trainer, train

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
    "context",
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
    "refresh_statistics",
    "master_weights",
    "save_master_weights",
    "load_master_weights",
    "gradient_stats",
    "LossScaledStep",
    "try_multi_precision",
    "multi_precision_survey",
]
