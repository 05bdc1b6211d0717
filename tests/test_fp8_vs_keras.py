"""mptutor.fp8.DelayedScaling against a Keras 3 float8 Dense layer fed the same inputs.

Keras's float8 layers keep, per tensor, a scale stored as a reciprocal (the layer quantizes
``x / inputs_scale``; mptutor's scale multiplies, so ``inputs_scale == 1 / DelayedScaling.scale``)
and an amax history. The layer here is trained with ``train_on_batch`` and SGD at learning rate 0
(its kernel frozen), so only the scaling state moves; each batch is built to have a chosen amax.

Measured with Keras 3.15 (TensorFlow backend): a training step computes the next scale from the
history as it was *before* this step's amax joined it, so Keras trails ``DelayedScaling`` by one
step: the scale Keras uses at step t is the one ``DelayedScaling`` used at step t - 1. The windows
have the same length. Where the amaxes differ from positive finite numbers the two part ways:
an inf or NaN amax joins Keras's history and freezes its scale for as long as it stays there, and
a zero amax takes a place in Keras's window; ``DelayedScaling`` leaves both out of its window.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("TensorFlow is not installed", allow_module_level=True)

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mptutor import fp8  # noqa: E402
from mptutor import tensorflow as mtf  # noqa: E402

tf, keras = mtf.tf, mtf.keras
CPU = "/CPU:0"
WINDOW = 4  # a short amax history, so that values leave it within a test
BATCH, FEATURES = 8, 4
# One batch of largest magnitude exactly 1: times a float32 amax a, its amax is exactly a.
BASE = np.random.default_rng(0).uniform(-0.9, 0.9, (BATCH, FEATURES)).astype(np.float32)
BASE[0, 0] = 1.0


class KerasFloat8Probe:
    """A float8 Dense layer (amax history of WINDOW) trained at learning rate 0, reusable."""

    def __init__(self, jit_compile: bool | str = "auto") -> None:
        policy = keras.dtype_policies.QuantizedFloat8DTypePolicy(
            "float8", "float32", amax_history_length=WINDOW
        )
        with tf.device(CPU):
            self.layer = keras.layers.Dense(2, use_bias=False, dtype=policy)
            self.model = keras.Sequential([keras.Input((FEATURES,)), self.layer])
            self.layer.kernel.trainable = False  # an inf or NaN input must not reach it
            self.model.compile(
                optimizer=keras.optimizers.SGD(0.0), loss="mse", jit_compile=jit_compile
            )

    def run(self, amaxes: list[float]) -> tuple[list[float], np.ndarray]:
        """The inputs_scale (as stored) before each step, and the history after the last."""
        self.layer.inputs_scale.assign(1.0)
        self.layer.inputs_amax_history.assign(np.zeros(WINDOW, np.float32))
        stored = []
        with tf.device(CPU):
            for a in amaxes:
                x = BASE * np.float32(a) if np.isfinite(a) else BASE.copy()
                if not np.isfinite(a):
                    x[0, 0] = a
                stored.append(float(self.layer.inputs_scale.numpy()))
                self.model.train_on_batch(x, np.zeros((BATCH, 2), np.float32))
        return stored, self.layer.inputs_amax_history.numpy()


@pytest.fixture(scope="module")
def probe() -> KerasFloat8Probe:
    return KerasFloat8Probe()


def ours(amaxes: list[float], history_len: int = WINDOW) -> list[float]:
    """The scale DelayedScaling uses at each step, fed the same amaxes."""
    ds = fp8.DelayedScaling("fp8_e4m3", history_len=history_len)
    used = []
    for a in amaxes:
        used.append(ds.scale)
        ds.update(a)
    return used


def as_stored(scales: list[float]) -> list[float]:
    """Scales as Keras stores them: 1 / (448 / amax), each division in float32."""
    return [float(np.float32(1) / np.float32(s)) for s in scales]


def test_defaults_match_and_keras_stores_reciprocals():
    with tf.device(CPU):
        layer = keras.layers.Dense(3)
        layer.build((None, 5))
        layer.quantize("float8")
    assert layer.dtype_policy.name == "float8_from_float32"
    default = fp8.DelayedScaling("fp8_e4m3")
    for name in ("inputs", "kernel", "outputs_grad"):
        history = getattr(layer, f"{name}_amax_history")
        assert tuple(history.shape) == (default.history_len,) == (1024,)
        assert float(getattr(layer, f"{name}_scale").numpy()) == default.scale == 1.0


def test_keras_trails_by_one_step_worked_sequence(probe):
    # amaxes 1, 2, 4, 0.5, ...: an 8 that leaves the window of 4, and the window then refilled.
    amaxes = [1.0, 2.0, 4.0, 0.5, 0.5, 0.5, 8.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    stored, history = probe.run(amaxes)
    used = [1 / s for s in stored]
    np.testing.assert_allclose(
        used, [1, 1, 448, 224, 112, 112, 112, 112, 56, 56, 56, 56], rtol=1e-6
    )
    expected = ours(amaxes)  # 448 / amax of the steps before, as DelayedScaling gives it
    assert expected[1:] == [448, 224, 112, 112, 112, 112, 56, 56, 56, 56, 448]
    assert stored[1:] == as_stored(expected[:-1])  # one step behind, bit for bit
    assert stored != as_stored(expected)  # not in step
    # Keras writes the newest amax at position 0 after rolling left: rolled back one place,
    # the history is the last WINDOW amaxes, oldest first, as DelayedScaling keeps its window.
    assert np.roll(history, -1).tolist() == amaxes[-WINDOW:]


@given(
    st.lists(
        st.floats(2.0**-20, 2.0**20, width=32).filter(lambda a: a > 0), min_size=2, max_size=12
    )
)
def test_keras_trails_by_one_step_any_positive_amaxes(probe, amaxes):
    stored, history = probe.run(amaxes)
    expected = ours(amaxes)
    assert stored[0] == 1.0 and stored[1:] == as_stored(expected[:-1])
    assert np.roll(history, -1)[-len(amaxes) :].tolist() == amaxes[-WINDOW:]


@pytest.fixture(scope="module")
def probe_without_xla() -> KerasFloat8Probe:
    # jit_compile="auto" turns XLA on wherever TensorFlow sees a GPU, and XLA's maximum may
    # pass over a NaN (then the NaN never reaches the history): the step is compiled without it
    return KerasFloat8Probe(jit_compile=False)


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_non_finite_amax_freezes_the_keras_scale_for_a_window(probe_without_xla, bad):
    # After a step with inf or NaN, the amax jumps from 1 to 4. DelayedScaling leaves the bad
    # amax out and follows the 4 at once; Keras (not compiled by XLA) keeps the inf or NaN in its
    # history, whose max is then not finite, and keeps its scale (fitted to amax 1) until it has
    # left the window.
    amaxes = [1.0, bad] + [4.0] * 8
    stored, history = probe_without_xla.run(amaxes)
    keras_used = [1 / s for s in stored]
    np.testing.assert_allclose(keras_used, [1, 1] + [448] * 5 + [112] * 3, rtol=1e-6)
    assert ours(amaxes) == [1, 448, 448] + [112] * 7
    frozen = sum(
        1 for a, s in zip(amaxes, keras_used, strict=True) if a == 4 and np.isclose(s, 448)
    )
    assert frozen == WINDOW + 1  # steps whose 4 saturates at 448 / 448 = 1, in Keras only
    assert np.all(np.isfinite(history))  # it has left the window by the end


def test_zero_amax_takes_a_place_in_the_keras_window(probe):
    # A step of zeros: Keras writes its amax, 0, into the history, and the 4 before it leaves
    # after WINDOW steps; DelayedScaling keeps its window of non-zero amaxes, the 4 included.
    amaxes = [4.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    stored, history = probe.run(amaxes)
    np.testing.assert_allclose(
        [1 / s for s in stored], [1, 1, 112, 112, 112, 112, 112, 448], rtol=1e-6
    )
    assert ours(amaxes) == [1, 112, 112, 112, 112, 112, 112, 112]
    assert np.roll(history, -1).tolist() == [0.0, 1.0, 1.0, 1.0]
