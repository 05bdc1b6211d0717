"""Evaluation: accuracy and predictions of a network on batches, in its type and context."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from mptutor.mxnet._context import check_dtype, resolve_context
from mptutor.mxnet._imports import autograd, gluon, mx
from mptutor.mxnet._networks import net_context, param_dtypes

__all__ = ["evaluate", "predict", "accuracy"]


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
