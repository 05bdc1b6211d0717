"""Training: the tutorial's trainer and one softmax cross-entropy loop for every type."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from mptutor._checks import check_scalar
from mptutor.mxnet._amp import amp_initialized, refuse_after_amp
from mptutor.mxnet._context import check_dtype, is_gpu, resolve_context
from mptutor.mxnet._evaluation import accuracy
from mptutor.mxnet._history import EpochStats, History
from mptutor.mxnet._imports import amp, autograd, gluon, mx, tqdm
from mptutor.mxnet._networks import net_context, param_dtypes

__all__ = ["make_trainer", "train"]

#: Optimizers that take a ``momentum`` setting.
_WITH_MOMENTUM = ("sgd", "nag", "lbsgd", "signum", "lars")


def _check_net_dtype(net: gluon.Block, dtype: str) -> None:
    found = param_dtypes(net)
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


def _trainer(
    net: gluon.Block,
    dtype: str,
    multi_precision: bool,
    optimizer: str,
    learning_rate: float,
    momentum: float,
    wd: float,
) -> gluon.Trainer:
    """:func:`make_trainer` for a ``dtype`` checked by the caller."""
    learning_rate = check_scalar(
        learning_rate, "learning_rate", min_val=0, include_boundaries="neither"
    )
    params: dict[str, Any] = {
        "learning_rate": learning_rate,
        "wd": wd,
        "multi_precision": bool(multi_precision),
    }
    if optimizer.lower() in _WITH_MOMENTUM:
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
    TypeError
        If ``learning_rate`` is not a real number.
    ValueError
        For a bad ``dtype`` or a learning rate that is not positive and finite.
    RuntimeError
        For ``dtype="bfloat16"`` before ``amp.init`` (see :func:`~mptutor.mxnet.get_network`).
    """
    dtype = check_dtype(dtype)
    return _trainer(net, dtype, multi_precision, optimizer, learning_rate, momentum, wd)


def _gpu_memory_used(ctx: mx.Context) -> float | None:
    if not is_gpu(ctx):
        return None
    free, total = mx.context.gpu_memory_info(ctx.device_id)
    return (total - free) / 2**20


def _batches(train_data: Iterable[Any], description: str, progress: bool) -> Any:
    try:
        total = len(train_data)  # type: ignore[arg-type]
    except TypeError:
        total = None
    return tqdm(
        train_data, total=total, desc=description, disable=not progress, leave=False, unit="batch"
    )


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
    epoch the test set is evaluated. ``dtype`` is checked once, here, for the whole run.

    Parameters
    ----------
    net : mxnet.gluon.Block
        An initialised network: float32, cast to float16, or built for bfloat16 AMP (see
        :func:`~mptutor.mxnet.get_network`).
    train_data, test_data : iterable of (NDArray, NDArray)
        Batches of images and labels, e.g. :func:`~mptutor.mxnet.image_folder_loaders`'
        loaders.
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
    TypeError
        If ``epochs`` is not an int or ``ctx`` is not a Context.
    ValueError
        If ``epochs`` is below 1, ``dtype`` is unknown or cannot run on the context (float16
        on a CPU), does not match the network's parameters, or either data source yields no
        batch.
    RuntimeError
        For float32 or float16 training after ``amp.init``, or bfloat16 training without it.
    """
    epochs = check_scalar(epochs, "epochs", int, min_val=1)
    ctx = net_context(net) if ctx is None else resolve_context(ctx)
    dtype = check_dtype(dtype, ctx)
    _check_net_dtype(net, dtype)
    if dtype != "bfloat16":
        refuse_after_amp(f"{dtype} training run")
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
        trainer = _trainer(net, dtype, multi_precision, "sgd", learning_rate, momentum, wd)
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
    if is_gpu(ctx):
        ctx.empty_cache()
    memory_before = _gpu_memory_used(ctx)
    name = label or dtype
    last = first + epochs - 1
    for epoch in range(first, last + 1):
        total_loss = mx.nd.zeros((1,), ctx=ctx)
        correct = mx.nd.zeros((1,), ctx=ctx)
        seen = 0
        start = time.perf_counter()
        bar = _batches(train_data, f"{name} epoch {epoch}/{last}", progress)
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
        history.epochs.append(
            EpochStats(
                epoch=epoch,
                loss=mean_loss,
                train_accuracy=train_accuracy,
                test_accuracy=accuracy(net, test_data, ctx, dtype),
                seconds=seconds,
                images_per_second=seen / seconds,
                memory_mib=None
                if memory is None or memory_before is None
                else memory - memory_before,
            )
        )
    return history
