"""mptutor.tensorflow.LossScaledStep against Keras 3's LossScaleOptimizer, step for step.

Each test re-expresses a scenario of Keras's own suite,
keras/src/optimizers/loss_scale_optimizer_test.py (the peer test is named in each), with a
loss instead of hand-made gradients: the model is ``sum(w * x)``, so a batch ``x`` sets the
gradient of ``w``. Both sides get the same model, the same batches and the same settings;
after every step their variables, loss scales and iteration counts must be identical.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed")

from mptutor import tensorflow as mtf  # noqa: E402
from mptutor.scaling import DynamicLossScaler  # noqa: E402

tf, keras = mtf.tf, mtf.keras
START = [1.0, 2.0, 3.0, 4.0]
GRAD = [1.0, 6.0, 7.0, 2.0]
INF = [np.inf] * 4


def _overwritten_by(new):
    """Identity on a variable whose gradient is ``new`` whatever comes from above.

    Keras's float8 layers compute their new scales and amax histories so, and mark those
    variables ``overwrite_with_gradient``: the optimizer assigns the gradient to them.
    """

    @tf.custom_gradient
    def identity(value):
        return tf.identity(value), lambda upstream: new

    return identity


class Probe(keras.layers.Layer):
    """``sum(w * x)``: the gradient of w is the batch x; a variable s overwritten by x, if asked."""

    def __init__(self, overwrite=False):
        super().__init__()
        self.overwrite = overwrite

    def build(self, input_shape):
        const = keras.initializers.Constant(START)
        self.w = self.add_weight(shape=(4,), initializer=const, name="w")
        if self.overwrite:
            self.s = self.add_weight(shape=(4,), initializer=const, name="s")
            self.s.overwrite_with_gradient = True

    def call(self, x):
        out = tf.reduce_sum(self.w * x)
        if self.overwrite:
            out += 0.0 * tf.reduce_sum(_overwritten_by(x[0])(tf.convert_to_tensor(self.s)))
        return out


def _model(overwrite=False):
    inputs = keras.Input((4,))
    return keras.Model(inputs, Probe(overwrite)(inputs))


def _loss(y_true, y_pred):
    return y_pred


def _pair(inner, initial_scale=2.0**15, growth=2000, overwrite=False, compile=True):
    """A Keras LossScaleOptimizer run and a LossScaledStep, each with its own model."""
    ref, mine = _model(overwrite), _model(overwrite)
    lso = keras.optimizers.LossScaleOptimizer(
        inner(), initial_scale=initial_scale, dynamic_growth_steps=growth
    )
    scaler = DynamicLossScaler(initial_scale, growth_interval=growth)
    step = mtf.LossScaledStep(mine, inner(), _loss, scaler, compile=compile)
    return ref, lso, mine, step


def _step_both(ref, lso, step, batch):
    x = np.asarray([batch], np.float32)
    with tf.GradientTape() as tape:
        scaled = lso.scale_loss(_loss(None, ref(x, training=True)))
    lso.apply(tape.gradient(scaled, ref.trainable_variables), ref.trainable_variables)
    _, took = step(x, None)
    return took


def _assert_same(ref, lso, mine, step):
    for a, b in zip(ref.get_weights(), mine.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert step.loss_scaler.scale == float(lso.dynamic_scale.numpy())
    assert int(step.optimizer.iterations.numpy()) == int(lso.iterations.numpy())


def _run(batches, **settings):
    inner = settings.pop("inner", lambda: keras.optimizers.SGD(learning_rate=0.5))
    ref, lso, mine, step = _pair(inner, **settings)
    took = []
    for batch in batches:
        took.append(_step_both(ref, lso, step, batch))
        _assert_same(ref, lso, mine, step)
    return mine, step, took


def test_finite_step():
    # peer: test_finite_step
    mine, _, took = _run([GRAD])
    assert took == [True]
    np.testing.assert_allclose(mine.get_weights()[0], [0.5, -1.0, -0.5, 3.0])


def test_finite_step_with_inner_loss_scale():
    # peer: test_finite_step_with_inner_loss_scale. Keras switches the inner optimizer's own
    # loss_scale_factor off; LossScaledStep must not divide the gradients by it a second time.
    inner = lambda: keras.optimizers.SGD(learning_rate=0.5, loss_scale_factor=100)  # noqa: E731
    mine, step, _ = _run([GRAD, GRAD], inner=inner)
    np.testing.assert_allclose(mine.get_weights()[0], [0.0, -4.0, -4.0, 2.0])
    assert step.optimizer.loss_scale_factor is None


def test_infinite_step():
    # peer: test_infinite_step
    mine, step, took = _run([INF])
    assert took == [False]
    np.testing.assert_array_equal(mine.get_weights()[0], START)
    assert step.loss_scaler.scale == 2.0**14


def test_finite_step_with_overwrite():
    # peer: test_finite_step_with_overwrite. The overwritten variable takes its gradient as it
    # is: not divided by the loss scale, not stepped by the optimizer.
    mine, _, took = _run([GRAD, [3.0, 1.0, 4.0, 1.0]], overwrite=True)
    assert took == [True, True]
    w, s = mine.get_weights()
    np.testing.assert_array_equal(s, [3.0, 1.0, 4.0, 1.0])
    np.testing.assert_allclose(w, [-1.0, -1.5, -2.5, 2.5])


def test_overwrite_with_clipping_and_an_infinite_step():
    # The overwritten variable is left out of the clipped norm (Keras's optimizer removes it
    # before clipping) and an inf in its gradient skips the step as on the Keras side.
    inner = lambda: keras.optimizers.SGD(learning_rate=0.5, global_clipnorm=1.0)  # noqa: E731
    ref, lso, mine, step = _pair(inner, overwrite=True)
    mine_clipped = mtf.LossScaledStep(
        _model(True), keras.optimizers.SGD(learning_rate=0.5), _loss, clip_norm=1.0
    )
    for batch in (GRAD, INF, [0.5, 0.5, 0.5, 0.5]):
        _step_both(ref, lso, step, batch)
        mine_clipped(np.asarray([batch], np.float32), None)
        _assert_same(ref, lso, mine, step)
        for a, b in zip(ref.get_weights(), mine_clipped.model.get_weights(), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)


def test_downscaling():
    # peer: test_downscaling
    _, step, took = _run([INF] * 4, initial_scale=400.0)
    assert took == [False] * 4 and step.loss_scaler.scale == 25.0


def test_upscaling():
    # peer: test_upscaling
    _, step, took = _run([GRAD] * 8, initial_scale=2.0, growth=2)
    assert all(took) and step.loss_scaler.scale == 32.0


def test_iterations_update():
    # peer: test_iterations_update; a skipped step does not count, on either side
    _, step, took = _run([GRAD, INF, GRAD, GRAD])
    assert took == [True, False, True, True]
    assert int(step.optimizer.iterations.numpy()) == 3


def test_eager_and_traced_steps_agree_with_keras():
    for compile in (False, True):
        _run([GRAD, INF, [0.25, 0.5, 1.0, 2.0]], overwrite=True, compile=compile)


def test_float8_model_matches_keras_step_for_step():
    # Keras's float8 Dense layers keep their scales and amax histories in variables marked
    # overwrite_with_gradient; a mixed run of finite and inf batches keeps both sides equal.
    def model():
        keras.utils.set_random_seed(1)
        layers = [keras.layers.Dense(8), keras.layers.Dense(3)]
        m = keras.Sequential([keras.Input((6,)), *layers])
        for layer in layers:
            layer.quantize("float8")
        return m

    loss = keras.losses.MeanSquaredError()
    ref, mine = model(), model()
    assert any(getattr(v, "overwrite_with_gradient", False) for v in mine.trainable_variables)
    lso = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=2.0**10)
    step = mtf.LossScaledStep(
        mine, keras.optimizers.SGD(0.1), loss, DynamicLossScaler(init_scale=2.0**10)
    )

    lso.build(ref.trainable_variables)  # so that the traced scale_loss reads dynamic_scale

    @tf.function  # Keras's float8 gradients need a traced function (eagerly they fail)
    def scaled_grads(x, y):
        with tf.GradientTape() as tape:
            scaled = lso.scale_loss(loss(y, ref(x, training=True)))
        return tape.gradient(scaled, ref.trainable_variables)

    rng = np.random.default_rng(0)
    for t in range(4):
        x = rng.normal(size=(5, 6)).astype("float32") * (t + 1)
        y = rng.normal(size=(5, 3)).astype("float32")
        if t == 2:
            x[0, 0] = np.inf
        lso.apply(scaled_grads(x, y), ref.trainable_variables)
        assert step(x, y)[1] == (t != 2)
        for a, b in zip(ref.get_weights(), mine.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
        assert step.loss_scaler.scale == float(lso.dynamic_scale.numpy())
