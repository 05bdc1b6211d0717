"""Loss scaling with :mod:`mptutor.scaling`'s scalers in a Gluon ``Trainer`` loop; gradient stats.

The same names and contract as in the PyTorch and TensorFlow modules.
"""

from __future__ import annotations

from typing import Any

from mptutor import gradients
from mptutor._checks import check_type, optional_positive
from mptutor.mxnet._core import _params_of, autograd, gluon, mx
from mptutor.scaling import DynamicLossScaler, LossScaler

_MAX_ARRAYS = 200  # multi_all_finite takes at most this many arrays per call


def _trainable(net: gluon.Block) -> list[gluon.Parameter]:
    """List the parameters that take a gradient."""
    return [p for p in _params_of(net).values() if p.grad_req != "null"]


def gradient_stats(net: gluon.Block, fmt: Any = "fp16") -> gradients.GradientStats:
    """Measure the gradients now held by a Gluon network's parameters against a format.

    :func:`mptutor.gradients.gradient_stats` of every parameter's gradient with
    ``grad_req != "null"``, copied to the host.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network, after a backward pass.
    fmt : str or dtype, optional
        A format :func:`mptutor.formats.get` knows (``"fp16"``, ``numpy.float16``, ...).

    Raises
    ------
    TypeError, ValueError
        If ``net`` is not a Gluon ``Block``, or ``fmt`` is not a known format.
    """
    check_type(net, "net", gluon.Block, "an mxnet.gluon.Block")
    return gradients.gradient_stats([p.grad().asnumpy() for p in _trainable(net)], fmt)


class LossScaledStep:
    """One Gluon training step driven by :mod:`mptutor.scaling`'s loss scaler.

    The float32 per-sample losses are multiplied by the scale before backward; the gradients
    are checked for inf/NaN with ``multi_all_finite`` (as MXNet AMP does) and one host read; a
    non-finite step is skipped, otherwise ``trainer.step(batch_size * scale)`` unscales through
    the optimizer's ``rescale_grad`` (in float32 with ``multi_precision=True``).

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network.
    trainer : mxnet.gluon.Trainer
        Its trainer (use ``multi_precision=True`` for a float16 network).
    loss_fn : mxnet.gluon.loss.Loss
        A loss returning one value per sample, e.g. ``SoftmaxCrossEntropyLoss()``.
    loss_scaler : mptutor.scaling.LossScaler, optional
        By default a :class:`~mptutor.scaling.DynamicLossScaler` (``2**16``, growth interval
        2000, as MXNet AMP).
    clip_norm : float, optional
        Clip the global norm of the unscaled, batch-averaged gradients to this value.

    Attributes
    ----------
    params : list of mxnet.gluon.Parameter
        The parameters that take a gradient.

    Raises
    ------
    TypeError, ValueError
        If an argument is not of its type (a number is no loss scaler), ``clip_norm`` not a
        positive finite number, or the trainer does not hold the parameters with a gradient
        (at least one).
    """

    def __init__(
        self,
        net: gluon.Block,
        trainer: gluon.Trainer,
        loss_fn: gluon.loss.Loss,
        loss_scaler: LossScaler | None = None,
        clip_norm: float | None = None,
    ) -> None:
        check_type(net, "net", gluon.Block, "an mxnet.gluon.Block")
        check_type(trainer, "trainer", gluon.Trainer, "an mxnet.gluon.Trainer")
        if isinstance(loss_fn, type) or not callable(loss_fn):
            check_type(loss_fn, "loss_fn", (), "a loss, e.g. gluon.loss.SoftmaxCrossEntropyLoss()")
        if loss_scaler is None:
            loss_scaler = DynamicLossScaler()
        check_type(
            loss_scaler,
            "loss_scaler",
            LossScaler,
            "None or a LossScaler such as DynamicLossScaler() or StaticLossScaler(128.0)",
        )
        clip_norm = optional_positive("clip_norm", clip_norm)
        self.params = _trainable(net)
        if not self.params:
            raise ValueError("the network has no parameter with a gradient (grad_req != 'null')")
        held = {id(p) for p in trainer._params}
        missing = [p.name for p in self.params if id(p) not in held]
        if missing:
            raise ValueError(
                f"the trainer does not hold {len(missing)} of the network's parameters "
                f"({', '.join(missing[:3])}...): build it from net.collect_params()"
            )
        self.net = net
        self.trainer = trainer
        self.loss_fn = loss_fn
        self.loss_scaler: LossScaler = loss_scaler
        self.clip_norm = clip_norm

    def __call__(self, data: Any, label: Any) -> tuple[float, bool]:
        """Run one step on a batch.

        Parameters
        ----------
        data, label : mxnet.nd.NDArray
            A batch (in the network's dtype and context).

        Returns
        -------
        loss, took : float, bool
            The mean unscaled loss of the batch; whether the update was applied (``False``:
            skipped).

        Raises
        ------
        TypeError, ValueError
            If ``data`` or ``label`` is not an ``mxnet.nd.NDArray``, or the batch is empty.
        """
        check_type(data, "data", mx.nd.NDArray, "an mxnet.nd.NDArray")
        check_type(label, "label", mx.nd.NDArray, "an mxnet.nd.NDArray")
        if not data.shape or data.shape[0] == 0:
            raise ValueError(
                f"data must hold a batch of at least one sample, got shape {data.shape}"
            )
        scale = self.loss_scaler.scale
        batch_size = data.shape[0]
        with autograd.record():
            out = self.net(data)
            losses = self.loss_fn(out.astype("float32"), label)
            scaled = losses * scale
        scaled.backward()
        grads = [p.grad() for p in self.params]
        flag = mx.nd.ones((1,), ctx=grads[0].context)
        for start in range(0, len(grads), _MAX_ARRAYS):
            chunk = grads[start : start + _MAX_ARRAYS]
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
