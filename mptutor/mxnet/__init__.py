"""MXNet Gluon helpers: model-zoo networks in float16 or bfloat16, a training loop, checkpoints.

Use it as ``from mptutor import mxnet as mmx`` (this package imports MXNet; ``import mptutor``
does not). ``mmx.mx``, ``mmx.gluon``, ``mmx.autograd`` and ``mmx.amp`` are MXNet's modules,
imported with MXNet's import-time warnings hidden.

It packages the recipe of the MXNet float16 tutorial (a Gluon ResNet-50 v2 on Caltech 101):
cast the network with ``net.cast("float16")``, cast each batch to match, and give the optimizer
``multi_precision=True`` so that it keeps a float32 master copy of every float16 weight.

What runs where (MXNet 1.9.1): float16 needs a GPU (MXNet has no float16 matrix products on a
CPU; :func:`get_network` and :func:`train` refuse it there). bfloat16 runs through MXNet AMP on
a CPU whose oneDNN has bfloat16 kernels (:func:`probe_bf16`); ``amp.init`` changes MXNet's
operators for the rest of the process, so build float32 networks before the first bfloat16
one. The ``multi_precision`` optimizer update is elementwise and runs on a CPU as well.

Examples
--------
>>> from mptutor import data, mxnet as mmx  # doctest: +SKIP
>>> folders = data.digits_image_folder(size=32)  # doctest: +SKIP
>>> loaders = mmx.image_folder_loaders(folders.train, folders.test, image_size=32)  # doctest: +SKIP
>>> net = mmx.get_network("resnet18_v2", classes=10, dtype="float32")  # doctest: +SKIP
>>> history = mmx.train(net, loaders.train, loaders.test, epochs=2)  # doctest: +SKIP
>>> mmx.save_master_weights(net, "resnet18.params", trainer=history.trainer)  # doctest: +SKIP
"""

from mptutor.mxnet._core import amp as amp
from mptutor.mxnet._core import autograd as autograd
from mptutor.mxnet._core import context, probe_bf16, seed
from mptutor.mxnet._core import gluon as gluon
from mptutor.mxnet._core import mx as mx
from mptutor.mxnet._core import vision as vision
from mptutor.mxnet._loss_scaling import LossScaledStep, gradient_stats
from mptutor.mxnet._master_weights import (
    load_master_weights,
    master_weights,
    multi_precision_survey,
    save_master_weights,
)
from mptutor.mxnet._networks import channel_alignment, get_network, image_folder_loaders, round_up
from mptutor.mxnet._training import evaluate, make_trainer, predict, refresh_statistics, train

__all__ = [
    "seed", "context", "probe_bf16",
    "round_up", "get_network", "channel_alignment", "image_folder_loaders",
    "make_trainer", "train", "evaluate", "predict", "refresh_statistics",
    "master_weights", "save_master_weights", "load_master_weights",
    "gradient_stats", "LossScaledStep", "multi_precision_survey",
]  # fmt: skip
