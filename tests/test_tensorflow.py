import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed")

from mptutor import formats, hardware
from mptutor import tensorflow as mtf
from mptutor.scaling import DynamicLossScaler, LossScaler, ScaleHistory, StaticLossScaler

tf, keras = mtf.tf, mtf.keras


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)]
    )


def _batch(step, poison=None):
    rng = np.random.default_rng(100 + step)
    x = rng.normal(size=(5, 6)).astype("float32")
    if poison is not None:
        x[0, 0] = poison
    return x, rng.integers(0, 3, 5)


LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
PLAN = [None, None, np.inf, None, None, None, np.nan, None, None]


def test_matches_keras_loss_scale_optimizer_step_for_step():
    """Same model, same batches, same overflows: identical weights and scales at every step."""
    ref = _model()
    lso = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.1, momentum=0.9), initial_scale=2.0**15, dynamic_growth_steps=2
    )
    mine = _model()
    step = mtf.LossScaledStep(
        mine,
        keras.optimizers.SGD(0.1, momentum=0.9),
        LOSS,
        DynamicLossScaler(init_scale=2.0**15, growth_interval=2),
    )
    for t, poison in enumerate(PLAN):
        x, y = _batch(t, poison)
        with tf.GradientTape() as tape:
            scaled = lso.scale_loss(LOSS(y, ref(x, training=True)))
        lso.apply(tape.gradient(scaled, ref.trainable_variables), ref.trainable_variables)
        _, took = step(x, y)
        assert took == (poison is None)
        assert step.loss_scaler.scale == float(lso.dynamic_scale.numpy())
        for a, b in zip(ref.get_weights(), mine.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)


def test_skipped_step_changes_nothing_and_weights_stay_finite():
    model = _model()
    step = mtf.LossScaledStep(model, keras.optimizers.Adam(1e-2), LOSS, StaticLossScaler(2.0**10))
    step(*_batch(0))
    before = [w.copy() for w in model.get_weights()]
    opt_before = [v.numpy().copy() for v in step.optimizer.variables]
    loss, took = step(*_batch(1, poison=np.inf))
    assert not took and not np.isfinite(loss)
    for a, b in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, v in zip(opt_before, step.optimizer.variables, strict=True):
        np.testing.assert_array_equal(a, v.numpy())
    assert step.loss_scaler.history.skipped_steps().tolist() == [1]


def test_mixed_float16_model_keeps_float32_variables_and_trains():
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        model = _model()
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    step = mtf.LossScaledStep(model, keras.optimizers.SGD(0.5), LOSS, compile=False)
    losses = [step(*_batch(0))[0] for _ in range(15)]
    assert losses[-1] < losses[0]


def test_clipping_limits_the_update():
    model = _model()
    step = mtf.LossScaledStep(
        model, keras.optimizers.SGD(1.0), LOSS, StaticLossScaler(8.0), clip_norm=1e-3
    )
    before = model.get_weights()
    step(*_batch(0))
    delta = np.concatenate(
        [(a - b).ravel() for a, b in zip(before, model.get_weights(), strict=True)]
    )
    assert np.linalg.norm(delta) == pytest.approx(1e-3, rel=1e-3)


def test_bad_arguments():
    model = _model()
    lso = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    with pytest.raises(TypeError, match="scaled twice"):
        mtf.LossScaledStep(model, lso, LOSS)
    for bad in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="clip_norm"):
            mtf.LossScaledStep(model, keras.optimizers.SGD(0.1), LOSS, clip_norm=bad)
    empty = keras.Sequential([keras.Input((6,)), keras.layers.Lambda(lambda t: t)])
    with pytest.raises(ValueError, match="no trainable variables"):
        mtf.LossScaledStep(empty, keras.optimizers.SGD(0.1), LOSS)(*_batch(0))


# --- device choice and the quiet import --------------------------------------------------------


def test_this_cpu_machine_takes_the_cpu_path():
    assert not mtf._gpu_available()  # a CPU-only TensorFlow here
    assert hardware.pick(cpu=16, gpu=256, on=mtf.device()) == 16
    assert mtf.device() == "/CPU:0"


def _fake_tensorflow_gpu(monkeypatch, override, tf_sees_gpu, visible=True, hide_error=None):
    hidden = []
    gpu = ["/physical_device:GPU:0"] if tf_sees_gpu else []

    def set_visible_devices(devices, kind):
        if hide_error is not None:
            raise hide_error
        hidden.append((devices, kind))

    monkeypatch.setattr(mtf.hardware, "_device_override", lambda: override)
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: gpu)
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind=None: gpu if visible else [])
    monkeypatch.setattr(tf.config, "set_visible_devices", set_visible_devices)
    return hidden


def test_gpu_path_needs_a_gpu_that_tensorflow_can_use(monkeypatch):
    for override in (None, "cuda"):
        hidden = _fake_tensorflow_gpu(monkeypatch, override, tf_sees_gpu=True)
        assert mtf._gpu_available() and hardware.pick(cpu=16, gpu=256, on=mtf.device()) == 256
        assert mtf.device() == "/GPU:0" and not hidden
        _fake_tensorflow_gpu(monkeypatch, override, tf_sees_gpu=False)  # a CPU-only TensorFlow
        assert not mtf._gpu_available() and hardware.pick(cpu=16, gpu=256, on=mtf.device()) == 16
        assert mtf.device() == "/CPU:0"  # asking for cuda cannot conjure a GPU


def test_cpu_path_hides_the_gpus_from_tensorflow(monkeypatch):
    hidden = _fake_tensorflow_gpu(monkeypatch, "cpu", tf_sees_gpu=True)  # MPTUTOR_DEVICE=cpu
    assert not mtf._gpu_available()
    assert mtf.device() == "/CPU:0" and hidden == [([], "GPU")]
    hidden = _fake_tensorflow_gpu(monkeypatch, "cpu", tf_sees_gpu=True, visible=False)
    assert mtf.device() == "/CPU:0" and not hidden  # already hidden: nothing to do
    _fake_tensorflow_gpu(
        monkeypatch, "cpu", tf_sees_gpu=True, hide_error=RuntimeError("initialized")
    )
    with pytest.raises(RuntimeError, match="before running anything"):
        mtf.device()


def test_device_reads_the_override_only_through_hardware(monkeypatch):
    monkeypatch.setenv("MPTUTOR_DEVICE", "tpu")  # would raise if read anywhere else
    monkeypatch.setattr(mtf.hardware, "_device_override", lambda: "cpu")
    assert mtf.device() == "/CPU:0" and not mtf._gpu_available()
    monkeypatch.undo()
    monkeypatch.setenv("MPTUTOR_DEVICE", "tpu")
    with pytest.raises(ValueError, match="MPTUTOR_DEVICE"):
        mtf.device()


def test_common_adapter_names_and_no_old_ones():
    for old in ("gradients_stats", "LossScaledTrainerStep", "default_context", "LossScaler"):
        assert not hasattr(mtf, old), old
    assert {"device", "LossScaledStep"} <= set(mtf.__all__)
    assert all(hasattr(mtf, name) for name in mtf.__all__)
    assert "clip_norm" in mtf.LossScaledStep.__init__.__code__.co_varnames
    annotation = mtf.LossScaledStep.__init__.__annotations__["loss_scaler"]
    assert annotation == "scaling.LossScaler | None" and mtf.scaling.LossScaler is LossScaler


class _HalvingScaler:
    """A scaler of one's own: the LossScaler protocol is all LossScaledStep needs."""

    def __init__(self):
        self._scale, self.history = 1024.0, ScaleHistory()

    @property
    def scale(self):
        return self._scale

    def update(self, found_inf):
        self.history.append(self._scale, bool(found_inf))
        self._scale /= 2
        return not found_inf

    def state_dict(self):
        return {"scale": self._scale}

    def load_state_dict(self, state):
        self._scale = state["scale"]


def test_any_loss_scaler_will_do():
    scaler = _HalvingScaler()
    assert isinstance(scaler, LossScaler)
    step = mtf.LossScaledStep(_model(), keras.optimizers.SGD(0.1), LOSS, scaler)
    assert step(*_batch(0))[1] and not step(*_batch(1, poison=np.inf))[1]
    assert list(scaler.history.scales) == [1024.0, 512.0] and step.loss_scaler is scaler


def test_quiet_import_drops_only_the_tensorflow_notices(tmp_path, monkeypatch, capfd):
    module = tmp_path / "noisy_module_for_mptutor_test.py"
    module.write_text(
        "import os\n"
        "os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are"
        " written to STDERR\\n')\n"
        "os.write(2, b'I0000 port.cc:153] oneDNN custom operations are on. You may see ...\\n')\n"
        "os.write(2, b'something else went wrong\\n')\n"
        "VALUE = 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (imported,) = mtf._import_quietly("noisy_module_for_mptutor_test")
    assert imported.VALUE == 42
    err = capfd.readouterr().err
    assert err == "something else went wrong\n"
    with pytest.raises(ModuleNotFoundError):
        mtf._import_quietly("no_such_module_for_mptutor_test")


def test_formats_dtype_name_reads_tensorflow_dtypes():
    assert formats.dtype_name(tf.ones(1, tf.bfloat16)) == "bfloat16"
    assert formats.dtype_name(tf.float16) == "float16"


# --- long runs of overflows, and bad input refused before anything changes ---------------------


def test_training_resumes_after_a_long_run_of_nan_batches():
    # 250 batches with a NaN input (NaN gradients): the scale falls to the scaler's floor (1 by
    # default) and stays; every one of those steps is skipped; the first finite batch is taken.
    model = _model()
    step = mtf.LossScaledStep(model, keras.optimizers.SGD(0.1), LOSS)
    assert step(*_batch(0))[1]
    before = model.get_weights()
    for t in range(250):
        assert not step(*_batch(t, poison=np.nan))[1]
    for a, b in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    scaler = step.loss_scaler
    assert scaler.scale == scaler.min_scale == 1.0 and scaler.overflows_at_floor == 250 - 15
    assert all(step(*_batch(300 + t))[1] for t in range(3))
    assert scaler.overflows_at_floor == 0
    assert not np.array_equal(before[0], model.get_weights()[0])


def test_a_scale_that_tensorflow_would_flush_to_zero_is_refused():
    # TensorFlow flushes float32 subnormals to zero: a scale below 2**-126 would make every
    # gradient 0 / 0 = NaN and every later step a skipped one.
    with pytest.raises(ValueError, match="min_scale"):
        mtf.LossScaledStep(
            _model(), keras.optimizers.SGD(0.1), LOSS, DynamicLossScaler(1.0, min_scale=2.0**-149)
        )
    scaler = _HalvingScaler()
    scaler._scale = 2.0**-130
    model = _model()
    step = mtf.LossScaledStep(model, keras.optimizers.SGD(0.1), LOSS, scaler)
    before = model.get_weights()
    with pytest.raises(ValueError, match=r"loss_scaler\.scale"):
        step(*_batch(0))
    assert len(scaler.history) == 0
    for a, b in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_vector_loss_is_refused_before_any_update():
    model = _model()
    per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    for compile in (True, False):
        step = mtf.LossScaledStep(model, keras.optimizers.SGD(0.1), per_example, compile=compile)
        before = model.get_weights()
        with pytest.raises(ValueError, match="scalar"):
            step(*_batch(0))
        for a, b in zip(before, model.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
        assert len(step.loss_scaler.history) == 0
        assert int(step.optimizer.iterations.numpy()) == 0


def test_a_loss_that_ignores_the_model_is_refused_before_any_update():
    step = mtf.LossScaledStep(_model(), keras.optimizers.SGD(0.1), lambda y, p: tf.constant(1.0))
    with pytest.raises(ValueError, match="depend"):
        step(*_batch(0))
    assert len(step.loss_scaler.history) == 0


@pytest.mark.parametrize(
    ("argument", "bad", "error"),
    [
        ("model", None, TypeError),
        ("model", "abc", TypeError),
        ("optimizer", "sgd", TypeError),
        ("optimizer", None, TypeError),
        ("loss_fn", "mse", TypeError),
        ("loss_scaler", 128.0, TypeError),
        ("loss_scaler", "dynamic", TypeError),
        ("loss_scaler", DynamicLossScaler, TypeError),
        ("compile", "False", TypeError),
        ("clip_norm", "1.0", ValueError),
    ],
)
def test_bad_constructor_arguments_name_themselves(argument, bad, error):
    args = {"model": _model(), "optimizer": keras.optimizers.SGD(0.1), "loss_fn": LOSS}
    args[argument] = bad
    with pytest.raises(error, match=argument):
        mtf.LossScaledStep(**args)


def test_another_keras_backend_is_refused_before_any_import():
    code = ("import os, sys\n"
            "try:\n    import mptutor.tensorflow\n"
            "except ImportError as error:\n    print(error)\n"
            "print(sorted(m for m in ('keras', 'tensorflow', 'torch', 'jax') if m in sys.modules),"
            " os.environ.get('TF_CPP_MIN_LOG_LEVEL'))\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    for name in ("torch", "jax", "no-such-backend"):  # any other value, loadable or not
        run = subprocess.run([sys.executable, "-c", code], env={**env, "KERAS_BACKEND": name},
                             capture_output=True, text=True, timeout=120, check=True)
        error, state = run.stdout.splitlines()
        assert error.startswith("mptutor.tensorflow needs Keras on its TensorFlow backend")
        assert f"KERAS_BACKEND selects {name!r}" in error
        assert state == "[] None"  # nothing imported, nothing set
