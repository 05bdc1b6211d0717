"""mptutor.mxnet's LossScaledStep and gradient_stats: mptutor.scaling's scalers in a Gluon loop.

The network is two small dense layers in float32 on a CPU; what is tested is the adapter's
contract, the same as the PyTorch and TensorFlow modules': any LossScaler, skipped overflow
steps, clip_norm on the unscaled gradients.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip(
    "mxnet",
    reason="MXNet is not installed: these tests run in the MXNet environment "
    "(requirements-mxnet.txt, NumPy 1.23)",
)

from mptutor import gradients  # noqa: E402
from mptutor import mxnet as mmx  # noqa: E402
from mptutor.scaling import DynamicLossScaler, LossScaler, StaticLossScaler  # noqa: E402

# MXNet's own modules come through mptutor.mxnet, with its import-time warnings hidden.
mx, autograd, gluon = mmx.mx, mmx.autograd, mmx.gluon

# MXNet 1.9.1's mx.nd.array looks up `scipy.sparse.csr.csr_matrix`, which SciPy deprecates on
# every call; the warning is about MXNet's code, so only it is ignored.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Please import `csr_matrix` from the `scipy.sparse` namespace:DeprecationWarning"
)

CPU = mx.cpu()


def _scaled_setup(scaler=None, clip_norm=None, seed=0):
    mmx.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, activation="relu", in_units=6), gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier(), ctx=CPU)
    trainer = gluon.Trainer(
        net.collect_params(),
        "sgd",
        {"learning_rate": 0.1, "momentum": 0.9, "multi_precision": True},
    )
    step = mmx.LossScaledStep(
        net,
        trainer,
        gluon.loss.SoftmaxCrossEntropyLoss(),
        scaler or StaticLossScaler(2.0**10),
        clip_norm=clip_norm,
    )
    return net, trainer, step


def _xy(i, poison=None):
    rng = np.random.default_rng(50 + i)
    x = rng.normal(size=(5, 6)).astype("float32")
    if poison is not None:
        x[0, 0] = poison
    return mx.nd.array(x, ctx=CPU), mx.nd.array(rng.integers(0, 3, 5), ctx=CPU)


def _weights(net):
    return [p.data().asnumpy().copy() for p in net.collect_params().values()]


def test_static_scaling_is_bit_identical_to_an_unscaled_trainer():
    """A power-of-two scale cancels exactly: scaled steps equal plain Trainer steps."""
    net, _, step = _scaled_setup()
    mmx.seed(0)
    ref = gluon.nn.HybridSequential()
    ref.add(gluon.nn.Dense(8, activation="relu", in_units=6), gluon.nn.Dense(3, in_units=8))
    ref.initialize(mx.init.Xavier(), ctx=CPU)
    ref_trainer = gluon.Trainer(
        ref.collect_params(),
        "sgd",
        {"learning_rate": 0.1, "momentum": 0.9, "multi_precision": True},
    )
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for i in range(5):
        x, y = _xy(i)
        with autograd.record():
            loss = loss_fn(ref(x), y)
        loss.backward()
        ref_trainer.step(x.shape[0])
        assert step(x, y)[1]
    for a, b in zip(_weights(ref), _weights(net), strict=True):
        np.testing.assert_array_equal(a, b)


def test_overflow_is_skipped_and_the_scale_backs_off():
    net, _, step = _scaled_setup(DynamicLossScaler(init_scale=2.0**12, growth_interval=2))
    step(*_xy(0))
    before = _weights(net)
    loss, took = step(*_xy(1, poison=np.inf))
    assert not took and not np.isfinite(loss)
    assert step.loss_scaler.scale == 2.0**11
    for a, b in zip(before, _weights(net), strict=True):
        np.testing.assert_array_equal(a, b)
    losses = [step(*_xy(0))[0] for _ in range(20)]
    assert losses[-1] < losses[0]
    assert step.loss_scaler.history.skipped_steps().tolist() == [1]


def test_clipping_limits_the_unscaled_gradient_norm():
    net, trainer, step = _scaled_setup(clip_norm=1e-3)
    trainer.set_learning_rate(1.0)
    trainer._optimizer.momentum = 0.0
    before = _weights(net)
    step(*_xy(0))
    delta = np.concatenate([(a - b).ravel() for a, b in zip(before, _weights(net), strict=True)])
    assert np.linalg.norm(delta) == pytest.approx(1e-3, rel=1e-3)


def test_gradient_stats_and_bad_arguments():
    net, _, step = _scaled_setup()
    step(*_xy(0))
    stats = mmx.gradient_stats(net, "fp16")
    assert isinstance(stats, gradients.GradientStats) and stats.fmt == "fp16"
    assert stats.count == sum(p.data().size for p in net.collect_params().values())
    with pytest.raises(ValueError, match="clip_norm"):
        _scaled_setup(clip_norm=-1.0)
    frozen = gluon.nn.Dense(2, in_units=2)
    frozen.initialize(ctx=CPU)
    frozen.collect_params().setattr("grad_req", "null")
    trainer = gluon.Trainer(frozen.collect_params(), "sgd")
    with pytest.raises(ValueError, match="no parameter with a gradient"):
        mmx.LossScaledStep(frozen, trainer, gluon.loss.L2Loss())


def test_default_scaler_is_mxnet_amps_and_any_loss_scaler_is_taken():
    _, _, step = _scaled_setup()
    assert isinstance(step.loss_scaler, LossScaler)
    net, trainer, _ = _scaled_setup()
    default = mmx.LossScaledStep(net, trainer, gluon.loss.SoftmaxCrossEntropyLoss())
    assert isinstance(default.loss_scaler, DynamicLossScaler)
    assert default.loss_scaler.scale == 2.0**16  # MXNet AMP's start

    class OwnScaler:  # a scaler of its own kind, with the LossScaler protocol
        def __init__(self):
            self.inner = StaticLossScaler(4.0)
            self.scale = 4.0
            self.history = self.inner.history

        def update(self, found_inf):
            return self.inner.update(found_inf)

        def state_dict(self):
            return self.inner.state_dict()

        def load_state_dict(self, state):
            self.inner.load_state_dict(state)

    own = OwnScaler()
    assert isinstance(own, LossScaler)
    step = mmx.LossScaledStep(net, trainer, gluon.loss.SoftmaxCrossEntropyLoss(), own)
    assert step(*_xy(0))[1] and own.history.steps == 1


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"loss_scaler": 128.0}, TypeError, r"loss_scaler must be None or a LossScaler.*128.0"),
        ({"loss_scaler": "dynamic"}, TypeError, "loss_scaler must be.*'dynamic' of type str"),
        ({"loss_scaler": DynamicLossScaler}, TypeError, "the class DynamicLossScaler"),
        ({"net": None}, TypeError, "net must be an mxnet.gluon.Block, got None"),
        ({"net": "abc"}, TypeError, "net must be an mxnet.gluon.Block, got 'abc'"),
        ({"trainer": None}, TypeError, "trainer must be an mxnet.gluon.Trainer, got None"),
        ({"loss_fn": None}, TypeError, "loss_fn must be a loss, e.g. gluon.loss"),
        ({"loss_fn": gluon.loss.L2Loss}, TypeError, r"the class L2Loss: pass an instance"),
        ({"clip_norm": "1"}, ValueError, "clip_norm must be a positive finite number"),
        ({"trainer": "other"}, ValueError, "the trainer does not hold 4 of the network's"),
    ],
)
def test_bad_constructor_arguments_are_refused_clearly(change, error, message):
    net, trainer, _ = _scaled_setup()
    if change.get("trainer") == "other":
        change = {"trainer": _scaled_setup()[1]}  # the trainer of another network
    args = {
        "net": net,
        "trainer": trainer,
        "loss_fn": gluon.loss.SoftmaxCrossEntropyLoss(),
        "loss_scaler": None,
    } | change
    with pytest.raises(error, match=message):
        mmx.LossScaledStep(**args)


@pytest.mark.parametrize(
    ("data", "label", "error", "message"),
    [
        (np.ones((5, 6), "float32"), None, TypeError, "data must be an mxnet.nd.NDArray"),
        (None, None, TypeError, "data must be an mxnet.nd.NDArray, got None"),
        ("x", "y", TypeError, "data must be an mxnet.nd.NDArray"),
        ("empty", None, ValueError, r"at least one sample, got shape \(0, 6\)"),
    ],
)
def test_bad_batches_are_refused_before_anything_changes(data, label, error, message):
    net, _, step = _scaled_setup()
    before = _weights(net)
    if isinstance(data, str) and data == "empty":  # MXNet makes one from NumPy, not with ones
        data = mx.nd.array(np.zeros((0, 6), "float32"), ctx=CPU)
    if label is None and data is not None:
        label = _xy(0)[1]
    with pytest.raises(error, match=message):
        step(data, label)
    with pytest.raises(TypeError, match="label must be an mxnet.nd.NDArray, got None"):
        step(_xy(0)[0], None)
    assert step.loss_scaler.history.steps == 0
    for a, b in zip(before, _weights(net), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_default_scaler_has_a_floor_and_a_long_run_of_nan_batches_ends():
    net, _, step = _scaled_setup(DynamicLossScaler())
    before = _weights(net)
    for _ in range(40):  # 16 halvings take 2**16 to the floor of 1; the rest stay there
        assert step(*_xy(0, poison=np.nan))[1] is False
    assert step.loss_scaler.scale == 1.0 and step.loss_scaler.overflows_at_floor == 40 - 16
    for a, b in zip(before, _weights(net), strict=True):
        np.testing.assert_array_equal(a, b)
    assert step(*_xy(0))[1] is True  # training resumes with the first finite batch


def test_gradient_stats_refuses_what_is_not_a_network():
    with pytest.raises(TypeError, match="net must be an mxnet.gluon.Block, got 'abc'"):
        mmx.gradient_stats("abc")
    with pytest.raises(ValueError, match="unknown floating-point format"):
        mmx.gradient_stats(_scaled_setup()[0], "fp17")
