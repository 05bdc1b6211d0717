"""TensorFlow / Keras 3 helpers: device choice, a loss-scaled GradientTape step, gradient stats.

Use it the d2l way (this module imports TensorFlow and Keras; ``import mptutor`` does not)::

    from mptutor import tensorflow as mtf

    with mtf.tf.device(mtf.device()):      # "/GPU:0" or "/CPU:0", honouring MPTUTOR_DEVICE
        ...

The names are those of the other framework adapters: :func:`device` (where TensorFlow
computes; ``MPTUTOR_DEVICE=cpu`` forces the CPU), :func:`gradient_stats` (the TensorFlow side of
:func:`mptutor.gradients.gradient_stats`) and :class:`LossScaledStep` (any
:class:`mptutor.scaling.LossScaler`, ``clip_norm=``). :func:`gpu_available` and :func:`pick`
choose sizes by whether TensorFlow itself can use a GPU.

Import it before TensorFlow itself, so that TensorFlow's start-up messages stay out of notebook
outputs: it sets ``TF_CPP_MIN_LOG_LEVEL=3`` (unless you set it yourself), which hides the C++
logs, and it imports TensorFlow and Keras with the process's standard error captured, dropping
only the notice that TensorFlow prints there on x86-64 at import ("oneDNN custom operations are
on ...", with its logging preamble). Anything else printed during the import is passed on.
TensorFlow's kernels are left as they are (oneDNN stays on).

For everyday training prefer Keras's own ``mixed_float16`` policy with
``keras.mixed_precision.LossScaleOptimizer`` (the Keras track's first notebook);
:class:`LossScaledStep` drives the same state machine as :mod:`mptutor.scaling`, so that it can
be compared step for step with Keras and with the other frameworks. The CNN experiment of the
Keras track's second notebook, which also runs on Keras's PyTorch and JAX backends, is in
:mod:`mptutor.keras_cnn`, which imports Keras but not TensorFlow.
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

from mptutor import gradients, hardware, scaling  # noqa: E402
from mptutor.checks import optional_positive  # noqa: E402

__all__ = [
    "LossScaledStep",
    "device",
    "gpu_available",
    "gradient_stats",
    "pick",
    "tf",
    "keras",
]

T = TypeVar("T")


def gpu_available() -> bool:
    """Whether notebooks take their GPU path with TensorFlow here.

    Returns
    -------
    bool
        ``True`` when TensorFlow itself lists a GPU and ``MPTUTOR_DEVICE=cpu`` is not set (read
        through :func:`mptutor.hardware.device_override`, the one place that reads it). A
        machine with a GPU but a CPU-only TensorFlow build takes the CPU path; asking for
        ``cuda`` cannot conjure a GPU either.

    Raises
    ------
    ValueError
        If ``MPTUTOR_DEVICE`` holds something other than ``cpu``, ``cuda`` or nothing.
    """
    if hardware.device_override() == "cpu":
        return False
    return bool(tf.config.list_physical_devices("GPU"))


def pick(cpu: T, gpu: T) -> T:
    """Choose a size for a TensorFlow computation: ``gpu`` on the GPU path, else ``cpu``.

    Like :func:`mptutor.hardware.pick`, but the GPU value is chosen only when TensorFlow itself
    can use the GPU (:func:`gpu_available`), so a CPU-only TensorFlow never gets full sizes.

    Parameters
    ----------
    cpu : object
        The value for the CPU path.
    gpu : object
        The value for the GPU path.

    Returns
    -------
    object
        ``gpu`` or ``cpu``.
    """
    return gpu if gpu_available() else cpu


def device() -> str:
    """Return the TensorFlow device of the notebook path; hide GPUs on the CPU path.

    d2l's ``try_gpu`` idea, with this project's override: the GPU path needs a GPU that
    TensorFlow lists and no ``MPTUTOR_DEVICE=cpu`` (read through
    :func:`mptutor.hardware.device_override`, the one place that reads it). On the CPU path
    every GPU is hidden from TensorFlow, so that no operation lands on one by default. Call it
    once, before TensorFlow has run anything: devices cannot be hidden afterwards.

    Returns
    -------
    str
        ``"/GPU:0"`` or ``"/CPU:0"``, for ``tf.device``.

    Raises
    ------
    ValueError
        If ``MPTUTOR_DEVICE`` holds something other than ``cpu``, ``cuda`` or nothing.
    RuntimeError
        If GPUs have to be hidden but TensorFlow has already initialised them.

    Examples
    --------
    >>> from mptutor import tensorflow as mtf
    >>> with mtf.tf.device(mtf.device()):
    ...     x = mtf.tf.ones(2)
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


def gradient_stats(grads: Sequence[tf.Tensor | None], fmt: Any = "fp16") -> gradients.GradientStats:
    """Measure a list of gradients against a format (``None`` entries are left out).

    The TensorFlow side of :func:`mptutor.gradients.gradient_stats`: each gradient is cast to
    float32 (bfloat16 included) and copied to the host, then counted there.

    Parameters
    ----------
    grads : sequence of tf.Tensor or None
        As returned by ``tape.gradient``.
    fmt : str or dtype, optional
        A format name or dtype that :func:`mptutor.formats.get` knows (``"fp16"``,
        ``tf.bfloat16``, ...).

    Returns
    -------
    mptutor.gradients.GradientStats
        Counts of zeros, infs/NaNs, values that ``fmt`` would flush or overflow, and the
        exponents.
    """
    arrays = [tf.cast(g, tf.float32).numpy() for g in grads if g is not None]
    return gradients.gradient_stats(arrays, fmt)


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
    loss_scaler : mptutor.scaling.LossScaler, optional
        Any scaler with the :class:`~mptutor.scaling.LossScaler` protocol; a
        :class:`~mptutor.scaling.DynamicLossScaler` with Keras's defaults (initial scale
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
        loss_scaler: scaling.LossScaler | None = None,
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
        self.loss_scaler: scaling.LossScaler = (
            loss_scaler
            if loss_scaler is not None
            else scaling.DynamicLossScaler(init_scale=2.0**15)
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
