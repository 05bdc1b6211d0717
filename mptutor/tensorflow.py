"""TensorFlow / Keras 3 helpers: where TensorFlow computes, and a loss-scaled GradientTape step.

Import it before TensorFlow itself (``from mptutor import tensorflow as mtf``): it sets
``TF_CPP_MIN_LOG_LEVEL=3`` unless set, and drops TensorFlow's import notices on standard error
("oneDNN custom operations are on ..."); anything else printed is passed on. It needs Keras on
its TensorFlow backend: it raises ``ImportError`` before importing anything when
``KERAS_BACKEND`` selects another, and after importing Keras when ``keras.json`` does.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from collections.abc import Callable
from types import ModuleType
from typing import Any

_BACKEND_ERROR = (
    "mptutor.tensorflow needs Keras on its TensorFlow backend, but {where} selects {name!r}: unset"
    " KERAS_BACKEND or set it to 'tensorflow' before Keras is first imported"
)
_CHOSEN = os.environ.get("KERAS_BACKEND", "")  # Keras's own rule: set and non-empty wins
if _CHOSEN not in ("", "tensorflow"):  # refused before any import
    raise ImportError(_BACKEND_ERROR.format(where="KERAS_BACKEND", name=_CHOSEN))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

_IMPORT_NOTICES = (  # parts of the lines TensorFlow prints on stderr at import, dropped
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    "oneDNN custom operations are on",
)


def _import_quietly(*names: str) -> list[ModuleType]:
    """Import modules; pass on what they print on stderr, except TensorFlow's notices."""
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
            kept = [line for line in lines if not any(n in line for n in _IMPORT_NOTICES)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


keras, tf = _import_quietly("keras", "tensorflow")
_CHOSEN = keras.backend.backend()  # keras.json's choice shows only after the import
if isinstance(_CHOSEN, str) and _CHOSEN != "tensorflow":  # not a str: Keras mocked (API docs)
    raise ImportError(_BACKEND_ERROR.format(where="keras.json", name=_CHOSEN))

from mptutor import hardware, scaling  # noqa: E402
from mptutor._checks import check_scalar, check_type, optional_positive  # noqa: E402

__all__ = ["device", "LossScaledStep"]

_SMALLEST_NORMAL = 2.0**-126  # smallest normal float32: TensorFlow flushes scales below to 0


def _gpu_available() -> bool:
    """Whether TensorFlow lists a GPU and ``MPTUTOR_DEVICE=cpu`` is not set."""
    if hardware._device_override() == "cpu":
        return False
    return bool(tf.config.list_physical_devices("GPU"))


def device() -> str:
    """Return where TensorFlow computes: ``"/GPU:0"`` or ``"/CPU:0"``; on the CPU, hide the GPUs.

    The GPU when TensorFlow lists one and ``MPTUTOR_DEVICE=cpu`` is not set; otherwise every GPU
    is hidden from TensorFlow (call it before TensorFlow has run anything).

    Returns
    -------
    str
        For ``tf.device`` and ``hardware.pick(cpu, gpu, on=mtf.device())``.

    Raises
    ------
    ValueError
        If ``MPTUTOR_DEVICE`` holds something other than ``cpu``, ``cuda`` or nothing.
    RuntimeError
        If GPUs have to be hidden but TensorFlow has already initialised them.
    """
    if _gpu_available():
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


class LossScaledStep:
    """One training step with loss scaling in a ``tf.GradientTape`` loop.

    The float32 loss is multiplied by the scale; the gradients are divided by it, checked for
    inf/NaN (one host read) and applied only if all are finite. As Keras 3's
    ``LossScaleOptimizer``: the optimizer's ``loss_scale_factor`` is set to ``None``, and
    variables marked ``overwrite_with_gradient`` (float8 scales, amaxes) take their gradient as is.

    Parameters
    ----------
    model : keras.Model or keras.Layer
    optimizer : keras.optimizers.Optimizer
        A plain Keras 3 optimizer (not a ``LossScaleOptimizer``: the scaling happens here).
    loss_fn : callable
        ``loss_fn(y_true, y_pred) -> scalar tensor`` (a Keras loss with its default reduction).
    loss_scaler : mptutor.scaling.LossScaler, optional
        By default a :class:`~mptutor.scaling.DynamicLossScaler` with Keras's defaults (``2**15``,
        growth every 2000 steps), floor 1. Its scale must stay at least ``2**-126`` (TensorFlow
        flushes smaller float32 numbers to 0).
    clip_norm : float, optional
        Clip the global norm of the unscaled gradients to this value.
    compile : bool, optional
        Trace the forward and backward pass with ``tf.function`` (default) or run eagerly.

    Raises
    ------
    TypeError, ValueError
        If an argument is not of its kind, ``optimizer`` is a ``LossScaleOptimizer`` (the loss
        would be scaled twice), ``clip_norm`` not positive and finite, or the scaler's
        ``min_scale`` below ``2**-126``.
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
        check_type(model, "model", keras.layers.Layer, "a Keras model (keras.Model or a layer)")
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            raise TypeError(
                "pass the inner optimizer, not a LossScaleOptimizer: LossScaledStep scales the "
                "loss itself, so the loss would be scaled twice"
            )
        check_type(optimizer, "optimizer", keras.optimizers.Optimizer, "a Keras 3 optimizer")
        if not callable(loss_fn):
            raise TypeError(
                f"loss_fn must be a callable loss_fn(y_true, y_pred), got {loss_fn!r:.80} of "
                f"type {type(loss_fn).__name__}"
            )
        if loss_scaler is None:
            loss_scaler = scaling.DynamicLossScaler(init_scale=2.0**15)
        check_type(loss_scaler, "loss_scaler", scaling.LossScaler, "a loss scaler or None")
        floor = getattr(loss_scaler, "min_scale", None)
        if isinstance(floor, float) and floor < _SMALLEST_NORMAL:
            raise ValueError(
                f"the loss scaler's min_scale={floor!r} is below 2**-126, the smallest normal "
                "float32: TensorFlow flushes smaller scales to zero, so every step after the "
                "scale got there would be skipped. Give the scaler min_scale >= 2**-126 (the "
                "default, 1.0, is the usual floor)"
            )
        self.clip_norm = optional_positive("clip_norm", clip_norm)
        check_type(compile, "compile", bool, "True or False")
        self.model = model
        self.optimizer = optimizer
        self.optimizer.loss_scale_factor = None  # as Keras's LossScaleOptimizer does
        self.loss_fn = loss_fn
        self.loss_scaler: scaling.LossScaler = loss_scaler
        self._grads = tf.function(self._scaled_grads) if compile else self._scaled_grads

    def _scaled_grads(
        self, x: Any, y: Any, scale: tf.Tensor
    ) -> tuple[tf.Tensor, list[tf.Tensor | None], tf.Tensor]:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            pred = self.model(x, training=True)
            loss = tf.cast(self.loss_fn(y, pred), tf.float32)
            scaled = loss * scale
        grads = [
            g if g is None or _overwritten(v) else tf.cast(g, tf.float32) / scale
            for g, v in zip(tape.gradient(scaled, variables), variables, strict=True)
        ]
        present = [tf.reduce_all(tf.math.is_finite(g)) for g in grads if g is not None]
        finite = tf.reduce_all(present) if present else tf.constant(True)
        return loss, grads, finite

    def __call__(self, x: Any, y: Any) -> tuple[float, bool]:
        """Run one step.

        Parameters
        ----------
        x, y : array_like or tf.Tensor
            Inputs and targets.

        Returns
        -------
        loss, took : float, bool
            The unscaled loss of the batch; whether the update was applied (``False``: skipped).

        Raises
        ------
        ValueError
            If the model has no trainable variables, the loss is not a scalar or depends on
            none of them, or the scale is outside ``[2**-126, FLOAT32_MAX]``; nothing changes.
        """
        if not self.model.trainable_variables:
            if not self.model.built:
                self.model(x)
            if not self.model.trainable_variables:
                raise ValueError("the model has no trainable variables")
        scale = check_scalar(
            self.loss_scaler.scale,
            "loss_scaler.scale (TensorFlow flushes float32 numbers below 2**-126 to zero)",
            min_val=_SMALLEST_NORMAL,
            max_val=scaling.FLOAT32_MAX,
        )
        loss, grads, finite = self._grads(x, y, tf.constant(scale, tf.float32))
        if loss.shape.rank != 0:
            raise ValueError(
                f"loss_fn must return a scalar, the loss of the batch; it returned shape "
                f"{loss.shape.as_list()}. Reduce it (e.g. keras.ops.mean), or use a Keras loss "
                "with its default reduction"
            )
        variables = self.model.trainable_variables
        if all(g is None for g in grads):
            raise ValueError("the loss depends on none of the model's trainable variables")
        took = self.loss_scaler.update(not bool(finite.numpy()))  # the one host read
        if took:
            pairs = [(g, v) for g, v in zip(grads, variables, strict=True) if g is not None]
            new_grads = [g for g, _ in pairs]
            if self.clip_norm is not None:
                stepped = [i for i, (_, v) in enumerate(pairs) if not _overwritten(v)]
                clipped, _ = tf.clip_by_global_norm([new_grads[i] for i in stepped], self.clip_norm)
                for i, g in zip(stepped, clipped, strict=True):
                    new_grads[i] = g
            self.optimizer.apply(new_grads, [v for _, v in pairs])
        return float(loss.numpy()), took


def _overwritten(variable: Any) -> bool:
    """Whether Keras's optimizers assign this variable its gradient (float8 scales, amaxes)."""
    return bool(getattr(variable, "overwrite_with_gradient", False))
