"""Evaluation: accuracy and predictions of a network on batches, in its type and context."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from mptutor._checks import check_scalar
from mptutor.mxnet._context import check_dtype, resolve_context
from mptutor.mxnet._imports import autograd, gluon, mx
from mptutor.mxnet._networks import net_context, param_dtypes

__all__ = ["evaluate", "predict", "accuracy", "refresh_statistics"]


def _where_and_how(net: gluon.Block, ctx: mx.Context | None, dtype: Any) -> tuple[mx.Context, str]:
    """Check the public arguments once: the context and the type the images are cast to."""
    ctx = net_context(net) if ctx is None else resolve_context(ctx)
    if dtype is None:
        dtype = "float16" if "float16" in param_dtypes(net) else "float32"
    return ctx, check_dtype(dtype, ctx)


def _outputs(
    net: gluon.Block,
    data: Iterable[Any],
    ctx: mx.Context,
    dtype: str,
    batch_statistics: bool,
) -> Iterator[tuple[mx.nd.NDArray, mx.nd.NDArray]]:
    """Yield float32 outputs and labels batch by batch; ``ctx`` and ``dtype`` are checked."""
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


def accuracy(
    net: gluon.Block,
    data: Iterable[Any],
    ctx: mx.Context,
    dtype: str,
    batch_statistics: bool = False,
) -> float:
    """:func:`evaluate` for a ``ctx`` and a ``dtype`` that the caller has checked already."""
    correct = None
    seen = 0
    for out, y in _outputs(net, data, ctx, dtype, batch_statistics):
        hits = (out.argmax(axis=1) == y).sum()
        correct = hits if correct is None else correct + hits
        seen += y.shape[0]
    return float(correct.asscalar()) / seen  # type: ignore[union-attr]


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
        averages do not describe what the current weights produce. It needs batches that mix
        the classes: on a loader that is not shuffled, each batch of a class-sorted folder
        holds one or two classes, and its statistics are biased. Refreshing the running
        averages on a few training batches with the weights fixed
        (:func:`refresh_statistics`) is the sounder test.

    Returns
    -------
    float
        Correct predictions divided by the number of images.

    Raises
    ------
    ValueError
        If ``data`` yields no batch, or float16 is asked for on a CPU.
    """
    ctx, dtype = _where_and_how(net, ctx, dtype)
    return accuracy(net, data, ctx, dtype, batch_statistics)


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
    net : mxnet.gluon.Block
        The network.
    data : iterable of (NDArray, NDArray)
        Batches, e.g. ``loaders.test``.
    ctx : mxnet.Context, optional
        Where to compute, as for :func:`evaluate`.
    dtype : str, optional
        Type the images are cast to, as for :func:`evaluate`.
    batch_statistics : bool, default False
        Normalise with each batch's statistics, as for :func:`evaluate`.

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
    ctx, dtype = _where_and_how(net, ctx, dtype)
    predicted, labels = [], []
    for out, y in _outputs(net, data, ctx, dtype, batch_statistics):
        predicted.append(out.argmax(axis=1).asnumpy().astype(np.int64))
        labels.append(y.asnumpy().astype(np.int64))
    return np.concatenate(predicted), np.concatenate(labels)


def refresh_statistics(
    net: gluon.Block,
    data: Iterable[Any],
    batches: int,
    ctx: mx.Context | None = None,
    dtype: str | None = None,
) -> int:
    """Fold training batches into every BatchNorm's running averages, the weights left fixed.

    Each batch goes through the network in training mode and back (MXNet 1.9 updates a
    BatchNorm's running mean and variance in its backward pass); no optimizer step is taken, so
    only the running averages change. With BatchNorm's momentum ``m``, what the averages held
    before weighs ``m**batches`` afterwards: 22 batches bring it below 10 % at Gluon's default
    ``m = 0.9``. Scoring the network before and after tells running averages that lag behind
    the weights (the accuracy jumps) from weights that have not learned (it does not).

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network; its parameters must be initialised.
    data : iterable of (NDArray, NDArray)
        Training batches, e.g. ``loaders.train`` (iterating a shuffling loader draws from
        NumPy's global random state).
    batches : int
        How many batches to fold in, at least 1; fewer are used if ``data`` runs out.
    ctx : mxnet.Context, optional
        Where to compute, as for :func:`evaluate`.
    dtype : str, optional
        Type the images are cast to, as for :func:`evaluate`.

    Returns
    -------
    int
        The number of batches folded in.

    Raises
    ------
    ValueError
        If ``batches`` is below 1, ``data`` yields no batch, or float16 is asked for on a CPU.
    """
    batches = check_scalar(batches, "batches", int, min_val=1)
    ctx, dtype = _where_and_how(net, ctx, dtype)
    used = 0
    for images, _ in data:
        if used == batches:
            break
        images = images.as_in_context(ctx)
        if dtype == "float16":
            images = images.astype("float16", copy=False)
        images.attach_grad()  # as in training: the first BatchNorm's backward must run
        with autograd.record():  # training mode: each BatchNorm uses the batch's statistics
            out = net(images)
        out.backward()
        used += 1
    if used == 0:
        raise ValueError("the data yielded no batches: nothing to refresh the statistics with")
    return used
