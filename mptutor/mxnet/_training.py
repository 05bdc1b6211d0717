"""Training and evaluation: the lessons' trainer, one loop for every type, accuracy."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mptutor._checks import check_scalar
from mptutor.mxnet._core import (
    _amp_target,
    _check_dtype,
    _is_gpu,
    _net_context,
    _param_dtypes,
    _refuse_after_amp,
    _where_and_how,
    autograd,
    gluon,
    mx,
    tqdm,
)
from mptutor.table import Table


@dataclass
class EpochStats:
    """What one epoch of :func:`~mptutor.mxnet.train` measured.

    ``loss`` is the mean training loss, ``train_accuracy`` measured during the epoch,
    ``test_accuracy`` after it, ``seconds`` the training time (data loading included),
    ``memory_mib`` the GPU memory in use minus that before training (``None`` on a CPU).
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
    """The epochs of a :func:`~mptutor.mxnet.train` run and the trainer that produced them."""

    dtype: str
    multi_precision: bool
    context: str
    epochs: list[EpochStats] = field(default_factory=list)
    trainer: gluon.Trainer | None = field(default=None, repr=False, compare=False)

    def column(self, name: str) -> list[Any]:
        """One field of :class:`EpochStats` for every epoch, e.g. ``column("loss")``."""
        names = list(EpochStats.__dataclass_fields__)
        if name not in names:
            raise KeyError(f"no statistic {name!r}; statistics are {names}")
        return [getattr(e, name) for e in self.epochs]

    @property
    def final(self) -> EpochStats:
        """The last epoch's statistics."""
        return self.epochs[-1]

    def table(self) -> Table:
        """Return the history as a table, one row per epoch (GPU MiB only on a GPU)."""
        rows = []
        for e in self.epochs:
            row = {
                "epoch": e.epoch,
                "loss": float(f"{e.loss:.4g}"),
                "train acc": float(f"{e.train_accuracy:.4g}"),
                "test acc": float(f"{e.test_accuracy:.4g}"),
                "seconds": round(e.seconds, 1),
                "images/s": round(e.images_per_second, 1),
            }
            if e.memory_mib is not None:
                row["GPU MiB"] = round(e.memory_mib)
            rows.append(row)
        title = f"{self.dtype}, multi_precision={self.multi_precision}, on {self.context}"
        return Table(rows, title=title)


def _trainer(net: gluon.Block, dtype: str, multi_precision: bool, lr: Any) -> gluon.Trainer:
    """:func:`make_trainer` for a ``dtype`` checked by the caller."""
    lr = check_scalar(lr, "learning_rate", min_val=0, include_boundaries="neither")
    params = {"learning_rate": lr, "momentum": 0.9, "wd": 1e-4, "multi_precision": multi_precision}
    if dtype == "bfloat16" and _amp_target() is None:
        raise RuntimeError(
            "dtype='bfloat16' needs MXNet AMP: build the network with "
            "get_network(..., dtype='bfloat16'), which calls amp.init first"
        )
    # No amp.init_trainer for bfloat16: see make_trainer's docstring.
    return gluon.Trainer(net.collect_params(), "sgd", params)


def make_trainer(
    net: gluon.Block, dtype: str = "float32", multi_precision: bool = True, *, learning_rate: float
    = 0.05,
) -> gluon.Trainer:  # fmt: skip
    """Create the lessons' trainer: SGD, momentum 0.9, weight decay 1e-4, float32 masters.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network.
    dtype : {"float32", "float16", "bfloat16"}, default "float32"
        Its training type. For ``"bfloat16"`` (MXNet AMP) no loss scaler is attached: bfloat16
        has float32's range of normal numbers, and ``amp.init_trainer``'s scaler would check
        every gradient for inf/NaN at every step (and skip a step that has one).
    multi_precision : bool, default True
        Update a float32 copy of every float16 parameter, copied back rounded to float16.
    learning_rate : float, default 0.05

    Raises
    ------
    TypeError, ValueError
        For a bad ``dtype``, or a learning rate that is not a positive finite number.
    RuntimeError
        For ``dtype="bfloat16"`` before ``amp.init`` (see :func:`~mptutor.mxnet.get_network`).
    """
    return _trainer(net, _check_dtype(dtype), bool(multi_precision), learning_rate)


def _check_net_dtype(net: gluon.Block, dtype: str) -> None:
    """Refuse a network whose parameters do not match the training type."""
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


def _gpu_memory_used(ctx: mx.Context) -> float | None:
    """MiB in use on a GPU context, None on a CPU."""
    if not _is_gpu(ctx):
        return None
    free, total = mx.context.gpu_memory_info(ctx.device_id)
    return (total - free) / 2**20


def train(
    net: gluon.Block, train_data: Iterable[Any], test_data: Iterable[Any], epochs: int, dtype: str =
    "float32", multi_precision: bool = True, *, learning_rate: float = 0.05, progress: bool = True,
    history: History | None = None,
) -> History:  # fmt: skip
    """Train a classifier with softmax cross-entropy, the same loop for every type.

    Batches are cast to float16 for a float16 network, outputs to float32 before the loss;
    with bfloat16, MXNet AMP casts inside, and no loss is scaled (see :func:`make_trainer`).
    The test set is evaluated after each epoch.

    Parameters
    ----------
    net : mxnet.gluon.Block
        An initialised network: float32, cast to float16, or built for bfloat16 AMP (see
        :func:`~mptutor.mxnet.get_network`).
    train_data, test_data : iterable of (NDArray, NDArray)
        Batches of images and labels, e.g. :func:`~mptutor.mxnet.image_folder_loaders`'.
    epochs : int
        Number of passes over ``train_data`` (at least 1).
    dtype : {"float32", "float16", "bfloat16"}, default "float32"
        Training type; it must match the network's parameters.
    multi_precision, learning_rate
        Of the trainer, made by :func:`make_trainer`.
    progress : bool, default True
        Show a tqdm progress bar.
    history : History, optional
        Continue this run of the same network with its trainer, appending the new epochs.

    Returns
    -------
    History
        The epochs' statistics and the ``trainer``; ``history`` itself, extended, if given.

    Raises
    ------
    TypeError, ValueError
        If ``epochs`` is not an int of at least 1, ``dtype`` is unknown, cannot run on the
        context (float16 on a CPU) or does not match the network or ``history``, or a data
        source yields no batch.
    RuntimeError
        For float32 or float16 training after ``amp.init``, or bfloat16 training without it.
    """
    epochs = check_scalar(epochs, "epochs", int, min_val=1)
    ctx = _net_context(net)
    dtype = _check_dtype(dtype, ctx)
    _check_net_dtype(net, dtype)
    if dtype != "bfloat16":
        _refuse_after_amp(f"{dtype} training run")
    first = 1
    if history is None:
        trainer = _trainer(net, dtype, bool(multi_precision), learning_rate)
        history = History(dtype, bool(multi_precision), str(ctx), trainer=trainer)
    elif history.dtype != dtype or history.trainer is None:
        raise ValueError(
            f"history is a {history.dtype} run without its trainer or of another type than "
            f"dtype={dtype!r}: continue a run with the dtype it was started with"
        )
    elif history.epochs:
        first = history.epochs[-1].epoch + 1
    trainer = history.trainer
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    mx.nd.waitall()
    if _is_gpu(ctx):
        ctx.empty_cache()
    memory_before = _gpu_memory_used(ctx)
    last = first + epochs - 1
    for epoch in range(first, last + 1):
        total_loss = mx.nd.zeros((1,), ctx=ctx)
        correct = mx.nd.zeros((1,), ctx=ctx)
        seen = 0
        start = time.perf_counter()
        bar = tqdm(
            train_data,
            desc=f"{dtype} epoch {epoch}/{last}",
            disable=not progress,
            leave=False,
            unit="batch",
        )
        for batch, (x, y) in enumerate(bar, 1):
            x = x.as_in_context(ctx)
            y = y.as_in_context(ctx)
            if dtype == "float16":
                x = x.astype("float16", copy=False)
            # On a CPU MXNet 1.9 updates a BatchNorm's running statistics in its backward pass
            # (a CUDA build's cuDNN BatchNorm does it in the forward pass). The first layer of
            # a ResNet v2 is a BatchNorm of the input with nothing to learn, so on a CPU its
            # backward runs only if the input asks for a gradient; without this its running
            # mean and variance stay 0 and 1.
            x.attach_grad()
            with autograd.record():
                out = net(x).astype("float32", copy=False)
                loss = loss_fn(out, y)
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
        mx.nd.waitall()
        seconds = time.perf_counter() - start
        memory = _gpu_memory_used(ctx)
        history.epochs.append(
            EpochStats(
                epoch=epoch,
                loss=float(total_loss.asscalar()) / seen,
                train_accuracy=float(correct.asscalar()) / seen,
                test_accuracy=_accuracy(net, test_data, ctx, dtype),
                seconds=seconds,
                images_per_second=seen / seconds,
                memory_mib=None if memory is None else memory - memory_before,
            )
        )
    return history


def _outputs(
    net: gluon.Block, data: Iterable[Any], ctx: mx.Context, dtype: str
) -> Iterator[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
    """Yield float32 outputs and labels batch by batch; ``ctx`` and ``dtype`` are checked."""
    seen = 0
    for x, y in data:
        x = x.as_in_context(ctx)
        if dtype == "float16":
            x = x.astype("float16", copy=False)
        out = net(x)
        seen += x.shape[0]
        yield out.astype("float32", copy=False), y.as_in_context(ctx).astype("float32")
    if seen == 0:
        raise ValueError("the data yielded no batches: nothing to evaluate")


def _accuracy(net: gluon.Block, data: Iterable[Any], ctx: mx.Context, dtype: str) -> float:
    """:func:`evaluate` for a ``ctx`` and a ``dtype`` that the caller has checked."""
    correct, seen = None, 0
    for out, y in _outputs(net, data, ctx, dtype):
        hits = (out.argmax(axis=1) == y).sum()
        correct = hits if correct is None else correct + hits
        seen += y.shape[0]
    return float(correct.asscalar()) / seen  # type: ignore[union-attr]


def evaluate(net: gluon.Block, data: Iterable[Any], dtype: str | None = None) -> float:
    """Classification accuracy of a network on batches of ``(images, labels)``.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network (BatchNorm uses its running statistics).
    data : iterable of (NDArray, NDArray)
        Batches, e.g. ``loaders.test``, computed where the network's parameters are.
    dtype : str, optional
        Type the images are cast to; default float16 if the network has float16 parameters,
        else float32 (bfloat16 AMP networks take float32 input).

    Returns
    -------
    float
        The share of correct predictions.

    Raises
    ------
    ValueError
        If ``data`` yields no batch, or float16 is asked for on a CPU.
    """
    return _accuracy(net, data, *_where_and_how(net, dtype))


def predict(
    net: gluon.Block, data: Iterable[Any], dtype: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted classes and true labels of every image, as NumPy arrays.

    Parameters
    ----------
    net, data, dtype
        As for :func:`evaluate`.

    Returns
    -------
    predicted, labels : numpy.ndarray
        The class with the largest output for each image, and its label (int64).

    Raises
    ------
    ValueError
        As :func:`evaluate`.
    """
    predicted, labels = [], []
    for out, y in _outputs(net, data, *_where_and_how(net, dtype)):
        predicted.append(out.argmax(axis=1).asnumpy().astype(np.int64))
        labels.append(y.asnumpy().astype(np.int64))
    return np.concatenate(predicted), np.concatenate(labels)


def refresh_statistics(
    net: gluon.Block,
    data: Iterable[Any],
    batches: int,
    dtype: str | None = None,
) -> int:
    """Fold training batches into every BatchNorm's running averages, the weights left fixed.

    Each batch goes forward in training mode and back (on a CPU MXNet 1.9 updates the running
    averages in the backward pass; a CUDA build's cuDNN BatchNorm, in the forward pass), with no
    optimizer step: what the averages held weighs
    ``momentum**batches`` afterwards. Scoring before and after tells lagging averages (the
    accuracy jumps) from weights that have not learned.

    Parameters
    ----------
    net, dtype
        As for :func:`evaluate`.
    data : iterable of (NDArray, NDArray)
        Training batches, e.g. ``loaders.train``.
    batches : int
        How many batches to fold in, at least 1 (fewer if ``data`` runs out).

    Returns
    -------
    int
        The number of batches folded in.

    Raises
    ------
    TypeError, ValueError
        If ``batches`` is not an int of at least 1, ``data`` yields no batch, or float16 is
        asked for on a CPU.
    """
    batches = check_scalar(batches, "batches", int, min_val=1)
    ctx, dtype = _where_and_how(net, dtype)
    used = 0
    for images, _ in data:
        if used == batches:
            break
        images = images.as_in_context(ctx)
        if dtype == "float16":
            images = images.astype("float16", copy=False)
        images.attach_grad()  # as in training: on a CPU the first BatchNorm's backward must run
        with autograd.record():  # training mode: each BatchNorm uses the batch's statistics
            out = net(images)
        out.backward()
        used += 1
    if used == 0:
        raise ValueError("the data yielded no batches: nothing to refresh the statistics with")
    return used
