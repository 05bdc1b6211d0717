"""TensorFlow / Keras 3 helpers: device choice, a loss-scaled GradientTape step, gradient stats.

Use it the d2l way (this module imports TensorFlow and Keras)::

    from mptutor import tensorflow as mtf

Import it before TensorFlow itself, so that TensorFlow's start-up messages stay out of notebook
outputs: it sets ``TF_CPP_MIN_LOG_LEVEL=3`` (unless you set it yourself), which hides the C++
logs, and it imports TensorFlow and Keras with the process's standard error captured, dropping
only the notice that TensorFlow prints there on x86-64 at import ("oneDNN custom operations are
on ...", with its logging preamble). Anything else printed during the import is passed on.
TensorFlow's kernels are left as they are (oneDNN stays on).

For everyday training prefer Keras's own ``mixed_float16`` policy with
``keras.optimizers.LossScaleOptimizer`` (the Keras track's first notebook); :class:`LossScaledStep`
drives the same state machine as :mod:`mptutor.scaling`, so that it can be compared step for step
with Keras and with the other frameworks.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

#: Parts of the lines that TensorFlow prints on standard error at import, which are dropped.
IMPORT_NOTICES = (
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    "oneDNN custom operations are on",
)


def _import_quietly(*names: str) -> list[ModuleType]:
    """Import modules; pass on what they print on stderr, except the lines of IMPORT_NOTICES."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            return [importlib.import_module(name) for name in names]
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines(keepends=True)
            kept = [line for line in lines if not any(n in line for n in IMPORT_NOTICES)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


keras, tf = _import_quietly("keras", "tensorflow")

from mptutor import hardware  # noqa: E402
from mptutor.checks import optional_positive  # noqa: E402
from mptutor.gradients import GradientStats, gradient_stats  # noqa: E402
from mptutor.scaling import DynamicLossScaler, StaticLossScaler  # noqa: E402

__all__ = [
    "LossScaledStep",
    "device",
    "gpu_available",
    "gradients_stats",
    "pick",
    "tf",
    "keras",
]

LossScaler = DynamicLossScaler | StaticLossScaler
T = TypeVar("T")


def gpu_available() -> bool:
    """Whether notebooks take their GPU path with TensorFlow here.

    Returns
    -------
    bool
        ``True`` when :func:`mptutor.hardware.has_gpu` says so (a CUDA GPU is present and
        ``MPTUTOR_DEVICE=cpu`` is not set) *and* TensorFlow can compute on a GPU. A machine
        with a GPU but a CPU-only TensorFlow build takes the CPU path.
    """
    return hardware.has_gpu() and bool(tf.config.list_physical_devices("GPU"))


def pick(cpu: T, gpu: T) -> T:
    """Choose a size for a TensorFlow computation: ``gpu`` on the GPU path, else ``cpu``.

    Like :func:`mptutor.hardware.pick`, but the GPU value is chosen only when TensorFlow itself
    can use the GPU (:func:`gpu_available`), so a CPU-only TensorFlow never gets full sizes.

    Parameters
    ----------
    cpu, gpu : object
        The values for the two paths.

    Returns
    -------
    object
        ``gpu`` or ``cpu``.
    """
    return gpu if gpu_available() else cpu


def device() -> str:
    """Return the TensorFlow device of the notebook path; hide GPUs on the CPU path.

    On the CPU path (no GPU, a CPU-only TensorFlow, or ``MPTUTOR_DEVICE=cpu``) every GPU is
    hidden from TensorFlow, so that no operation lands on one by default. Call it once, before
    TensorFlow has run anything: devices cannot be hidden afterwards.

    Returns
    -------
    str
        ``"/GPU:0"`` or ``"/CPU:0"``.

    Raises
    ------
    RuntimeError
        If GPUs have to be hidden but TensorFlow has already initialised them.
    """
    if gpu_available():
        return "/GPU:0"
    if tf.config.list_physical_devices("GPU") and tf.config.get_visible_devices("GPU"):
        try:
            tf.config.set_visible_devices([], "GPU")
        except RuntimeError as err:
            raise RuntimeError(
                "TensorFlow has already initialised its GPUs, so they cannot be hidden for the "
                "CPU path: call mptutor.tensorflow.device() before running anything"
            ) from err
    return "/CPU:0"


def gradients_stats(grads: Sequence[tf.Tensor | None], fmt: Any = "fp16") -> GradientStats:
    """Statistics of a list of gradients (``None`` entries are ignored).

    Parameters
    ----------
    grads : sequence of tf.Tensor or None
        As returned by ``tape.gradient``.
    fmt : str or dtype, optional
        The format to measure against (see :func:`mptutor.formats.get`).

    Returns
    -------
    GradientStats
        Zeros, infs/NaNs, values that would underflow or overflow in ``fmt``, exponents.
    """
    return gradient_stats([g.numpy() for g in grads if g is not None], fmt)


class LossScaledStep:
    """One training step with loss scaling in a ``tf.GradientTape`` loop.

    The loss is cast to float32 and multiplied by the scaler's scale; the gradients of the
    trainable variables are divided by the scale, checked for inf/NaN (one host read per step),
    and applied only if they are all finite. The scaler then adjusts the scale. With the
    ``mixed_float16`` policy the variables, and so the gradients, are float32: master weights
    come for free.

    Parameters
    ----------
    model : keras.Model
        The model.
    optimizer : keras.optimizers.Optimizer
        A plain optimizer (not a ``LossScaleOptimizer``: the scaling happens here).
    loss_fn : callable
        ``loss_fn(y_true, y_pred) -> scalar tensor``.
    loss_scaler : DynamicLossScaler or StaticLossScaler, optional
        A :class:`~mptutor.scaling.DynamicLossScaler` with Keras's defaults (initial scale
        ``2**15``, growth every 2000 clean steps) when omitted.
    clip_norm : float, optional
        Clip the global norm of the unscaled gradients to this value.
    compile : bool, optional
        Trace the forward and backward pass with ``tf.function`` (default) or run eagerly.

    Raises
    ------
    TypeError
        If ``optimizer`` is a ``LossScaleOptimizer`` (the loss would be scaled twice).
    ValueError
        If ``clip_norm`` is not a positive finite number or the model has no trainable
        variables.
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        loss_fn: Callable[[Any, Any], tf.Tensor],
        loss_scaler: LossScaler | None = None,
        clip_norm: float | None = None,
        compile: bool = True,
    ) -> None:
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            raise TypeError(
                "pass the inner optimizer, not a LossScaleOptimizer: LossScaledStep scales the "
                "loss itself, so the loss would be scaled twice"
            )
        clip_norm = optional_positive("clip_norm", clip_norm)
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.loss_scaler: LossScaler = (
            loss_scaler if loss_scaler is not None else DynamicLossScaler(init_scale=2.0**15)
        )
        self.clip_norm = clip_norm
        self._grads = tf.function(self._scaled_grads) if compile else self._scaled_grads

    def _scaled_grads(
        self, x: Any, y: Any, scale: tf.Tensor
    ) -> tuple[tf.Tensor, list[tf.Tensor | None], tf.Tensor]:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            pred = self.model(x, training=True)
            loss = tf.cast(self.loss_fn(y, pred), tf.float32)
            scaled = loss * scale
        grads = tape.gradient(scaled, variables)
        grads = [None if g is None else tf.cast(g, tf.float32) / scale for g in grads]
        present = [g for g in grads if g is not None]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in present])
        return loss, grads, finite

    def __call__(self, x: Any, y: Any) -> tuple[float, bool]:
        """Run one step.

        Parameters
        ----------
        x, y : array_like or tf.Tensor
            A batch of inputs and targets.

        Returns
        -------
        loss : float
            The unscaled loss of the batch.
        took : bool
            Whether the update was applied (``False``: inf/NaN found, step skipped).

        Raises
        ------
        ValueError
            If the model has no trainable variables.
        """
        if not self.model.trainable_variables:
            if not self.model.built:
                self.model(x)
            if not self.model.trainable_variables:
                raise ValueError("the model has no trainable variables")
        scale = tf.constant(self.loss_scaler.scale, tf.float32)
        loss, grads, finite = self._grads(x, y, scale)
        took = self.loss_scaler.update(not bool(finite.numpy()))  # the one host read
        if took:
            pairs = [
                (g, v)
                for g, v in zip(grads, self.model.trainable_variables, strict=True)
                if g is not None
            ]
            new_grads = [g for g, _ in pairs]
            if self.clip_norm is not None:
                new_grads, _ = tf.clip_by_global_norm(new_grads, self.clip_norm)
            self.optimizer.apply(new_grads, [v for _, v in pairs])
        return float(loss.numpy()), took
