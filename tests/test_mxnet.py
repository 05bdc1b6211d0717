"""mptutor.mxnet's networks, loaders, training loop and checkpoints, on a CPU with tiny inputs.

MXNet has no float16 matrix products on a CPU, so float16 networks cannot run here; what can
is tested: the float32 pipeline, the checks that refuse float16 on a CPU, the multi_precision
optimizer on float16 parameters (an elementwise update), master-weight checkpoints, and
bfloat16 AMP (in a subprocess, because amp.init changes MXNet for the rest of the process).
One test marked `gpu` runs the float16 path. The context and dtype checks, the optimizer
survey and the loss-scaled step have files of their own: test_mxnet_context.py,
test_mxnet_optimizers.py and test_mxnet_loss_scaling.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "mxnet",
    reason="MXNet is not installed: these tests run in the MXNet environment "
    "(requirements-mxnet.txt, NumPy 1.23)",
)

from mptutor import data  # noqa: E402
from mptutor import mxnet as mmx  # noqa: E402
from mptutor.mxnet import _core, _training  # noqa: E402
from mptutor.mxnet._networks import _NETWORKS, Loaders  # noqa: E402

# MXNet's own modules come through mptutor.mxnet, which imports them with MXNet's import-time
# DeprecationWarnings (about MXNet's code, with the NumPy 1.23 it needs) silenced.
mx, autograd, gluon, vision = mmx.mx, mmx.autograd, mmx.gluon, mmx.vision

# MXNet 1.9.1's mx.nd.array (used by DataLoader to batch labels) looks up
# `scipy.sparse.csr.csr_matrix`, which SciPy deprecates on every call; scikit-learn brings SciPy
# into this environment. The warning is about MXNet's code, so only it is ignored.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Please import `csr_matrix` from the `scipy.sparse` namespace:DeprecationWarning"
)

CPU = mx.cpu()


def _seed(seed: int = 0) -> None:
    mmx.seed(seed)


class TinyNet(gluon.HybridBlock):
    """BatchNorm, one convolution, global pooling, a dense layer: the shape of a small CNN."""

    def __init__(self, classes: int = 3, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.bn = gluon.nn.BatchNorm(scale=False, center=False)
            self.conv = gluon.nn.Conv2D(8, 3, padding=1)
            self.pool = gluon.nn.GlobalAvgPool2D()
            self.out = gluon.nn.Dense(classes)

    def hybrid_forward(self, F, x):
        return self.out(self.pool(F.relu(self.conv(self.bn(x)))))


class Scale(gluon.HybridBlock):
    """y = x * w, elementwise: a float16 block that runs on a CPU (no GEMM)."""

    def __init__(self, size: int = 4, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.w = self.params.get("w", shape=(size,), init=mx.init.One())

    def hybrid_forward(self, F, x, w):
        return F.broadcast_mul(x, w)


def _tiny_net(classes: int = 3) -> TinyNet:
    _seed()
    net = TinyNet(classes)
    net.initialize(mx.init.Xavier(), ctx=CPU)
    net.hybridize()
    return net


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    """Three digit classes, 16 train and 8 test images each, 12 px."""
    digits = data.digits_image_folder(tmp_path_factory.mktemp("digits"), size=12)
    root = tmp_path_factory.mktemp("tiny")
    for split, src, count in (("train", digits.train, 16), ("test", digits.test, 8)):
        for name in ("0", "1", "7"):
            (root / split / name).mkdir(parents=True)
            for image in sorted((src / name).iterdir())[:count]:
                shutil.copy(image, root / split / name / image.name)
    return root / "train", root / "test"


@pytest.fixture(scope="module")
def loaders(folders) -> Loaders:
    return mmx.image_folder_loaders(*folders, image_size=12, batch_size=16)


def test_round_up():
    assert [mmx.round_up(n) for n in (1, 8, 9, 101, 102)] == [8, 8, 16, 104, 104]
    assert mmx.round_up(10, 1) == 10
    with pytest.raises(ValueError, match=r"value must be in \[1, inf\], got 0"):
        mmx.round_up(0)
    with pytest.raises(TypeError, match="multiple must be an int, got 2.0"):
        mmx.round_up(8, 2.0)


# --------------------------------------------------------------------------------------------
# Networks


def test_network_names_are_the_model_zoo():
    with pytest.raises(ValueError) as info:
        vision.get_model("no-such-network")
    zoo = {line.strip() for line in str(info.value).splitlines()[1:] if line.strip()}
    assert zoo == set(_NETWORKS)


def test_get_network_float32():
    _seed()
    net = mmx.get_network("resnet18_v2", classes=10, ctx=CPU, classes_multiple=8)
    out = net(mx.nd.ones((2, 3, 16, 16)))
    assert out.shape == (2, 16)  # 10 classes, padded to a multiple of 8
    assert {np.dtype(p.dtype).name for p in net.collect_params().values()} == {"float32"}
    assert net._active  # hybridized
    table = mmx.channel_alignment(net)
    assert table.title == "20 of 21 convolution and dense layers are multiples of 8"
    assert table.to_dicts() == [{"layer": "features.1", "kind": "convolution", "in": 3, "out": 64}]


def test_get_network_errors():
    with pytest.raises(ValueError, match="unknown network 'resnet51_v2'; known names: alexnet"):
        mmx.get_network("resnet51_v2", 10, ctx=CPU)
    with pytest.raises(ValueError, match=r"classes must be in \[1, inf\], got 0"):
        mmx.get_network("resnet18_v2", 0, ctx=CPU)
    with pytest.raises(TypeError, match="classes_multiple must be an int"):
        mmx.get_network("resnet18_v2", 10, ctx=CPU, classes_multiple=8.0)
    with pytest.raises(ValueError, match="dtype='float64' is not supported"):
        mmx.get_network("resnet18_v2", 10, "float64", ctx=CPU)
    with pytest.raises(ValueError, match="no float16 matrix products on a CPU"):
        mmx.get_network("resnet18_v2", 10, "float16", ctx=CPU)
    with pytest.raises(TypeError, match="mx.cpu"):
        mmx.get_network("resnet18_v2", 10, ctx="cpu")


def test_channel_alignment_needs_known_shapes():
    net = mmx.get_network("resnet18_v2", classes=10, ctx=CPU)
    with pytest.raises(ValueError, match="run one batch through the network first"):
        mmx.channel_alignment(net)


def test_pretrained_takes_features_and_makes_a_new_output(monkeypatch):
    real = vision.get_model

    def fake_get_model(name, **kwargs):  # the model zoo's download, without the internet
        if kwargs.pop("pretrained", False):
            zoo = real(name, classes=1000)
            zoo.initialize(mx.init.Constant(0.5), ctx=kwargs.get("ctx"))
            return zoo
        return real(name, **kwargs)

    monkeypatch.setattr(mmx.vision, "get_model", fake_get_model)
    net = mmx.get_network("resnet18_v2", classes=5, ctx=CPU, pretrained=True)
    assert net(mx.nd.ones((1, 3, 16, 16))).shape == (1, 5)
    conv = net.features[1].weight.data()
    assert float(conv.min().asscalar()) == float(conv.max().asscalar()) == 0.5
    assert float(net.output.weight.data().abs().max().asscalar()) != 0.5  # Xavier, not 0.5


# --------------------------------------------------------------------------------------------
# Data


def test_image_folder_loaders(loaders, folders):
    assert loaders.classes == ("0", "1", "7") and loaders.num_classes == 3
    assert (loaders.num_train, loaders.num_test) == (48, 24)
    assert (loaders.image_size, loaders.batch_size) == (12, 16)
    x, y = next(iter(loaders.train))
    assert x.shape == (16, 3, 12, 12) and x.dtype == np.float32
    assert -3 < float(x.min().asscalar()) < 0 < float(x.max().asscalar()) < 3  # normalised
    tx, ty = next(iter(loaders.test))
    assert ty.asnumpy().tolist() == [0] * 8 + [1] * 8  # folder order, not shuffled
    assert len(loaders.train) == 3 and len(loaders.test) == 2

    workers = mmx.image_folder_loaders(*folders, image_size=12, batch_size=16, num_workers=1)
    wx, wy = next(iter(workers.test))
    assert np.array_equal(wx.asnumpy(), tx.asnumpy()) and np.array_equal(wy.asnumpy(), ty.asnumpy())


def test_image_folder_loaders_errors(tmp_path, folders):
    train, test = folders
    with pytest.raises(FileNotFoundError, match="does not exist"):
        mmx.image_folder_loaders(tmp_path / "missing", test)
    other = tmp_path / "other"
    shutil.copytree(test, other)
    shutil.rmtree(other / "7")
    with pytest.raises(ValueError, match="have different classes"):
        mmx.image_folder_loaders(train, other)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no class sub-folders"):
        mmx.image_folder_loaders(train, empty)
    for bad in ({"batch_size": 0}, {"num_workers": -1}):
        (name, value), *_ = bad.items()
        with pytest.raises(ValueError, match=f"{name} must be in .*, got {value}"):
            mmx.image_folder_loaders(train, test, **bad)
    for bad in ({"image_size": 7.5}, {"batch_size": True}):
        with pytest.raises(TypeError, match=f"{next(iter(bad))} must be an int"):
            mmx.image_folder_loaders(train, test, **bad)


# --------------------------------------------------------------------------------------------
# Training and evaluation


def test_train_and_evaluate(loaders):
    net = _tiny_net()
    _seed()
    history = mmx.train(
        net, loaders.train, loaders.test, epochs=2, learning_rate=0.1, progress=False
    )
    assert [e.epoch for e in history.epochs] == [1, 2]
    assert history.dtype == "float32" and history.context == "cpu(0)"
    for e in history.epochs:
        assert np.isfinite(e.loss) and e.loss > 0
        assert 0 <= e.train_accuracy <= 1 and 0 <= e.test_accuracy <= 1
        assert e.seconds > 0 and e.images_per_second == pytest.approx(48 / e.seconds)
        assert e.memory_mib is None
    assert history.column("loss")[1] < history.column("loss")[0]
    assert mmx.evaluate(net, loaders.test) == history.final.test_accuracy
    assert history.table().columns == [
        "epoch",
        "loss",
        "train acc",
        "test acc",
        "seconds",
        "images/s",
    ]
    with pytest.raises(KeyError, match="no statistic"):
        history.column("accuracy")

    # The same seeds give the same losses, bit for bit, on the same machine (num_workers=0).
    again = _tiny_net()
    _seed()
    rerun = mmx.train(
        again, loaders.train, loaders.test, epochs=2, learning_rate=0.1, progress=False
    )
    assert rerun.column("loss") == history.column("loss")
    assert rerun.column("test_accuracy") == history.column("test_accuracy")


def test_train_continues_a_history(loaders):
    """One epoch, then one more through history=, equals two epochs in one call."""
    _seed()
    whole = mmx.train(_tiny_net(), loaders.train, loaders.test, 2, progress=False)
    net = _tiny_net()
    _seed()
    history = mmx.train(net, loaders.train, loaders.test, 1, progress=False)
    trainer = history.trainer
    again = mmx.train(net, loaders.train, loaders.test, 1, progress=False, history=history)
    assert again is history and history.trainer is trainer
    assert history.column("epoch") == [1, 2]
    assert history.column("loss") == whole.column("loss")
    assert history.column("test_accuracy") == whole.column("test_accuracy")
    with pytest.raises(ValueError, match="continue a run with the dtype"):
        mmx.train(
            net,
            loaders.train,
            loaders.test,
            1,
            progress=False,
            history=_training.History("bfloat16", True, "cpu(0)"),
        )


def test_predict(loaders):
    net = _tiny_net()
    mmx.train(net, loaders.train, loaders.test, 1, progress=False)
    predicted, labels = mmx.predict(net, loaders.test)
    assert predicted.dtype == labels.dtype == np.int64
    assert labels.tolist() == [0] * 8 + [1] * 8 + [2] * 8
    assert np.mean(predicted == labels) == mmx.evaluate(net, loaders.test)

    with pytest.raises(ValueError, match="yielded no batches"):
        mmx.predict(net, [])


def test_refresh_statistics_moves_the_running_averages_and_nothing_else(loaders):
    net = _tiny_net()
    net(next(iter(loaders.train))[0])
    weights = {k: p.data().copy() for k, p in net.collect_params().items() if "running" not in k}
    before = net.bn.running_var.data().copy()
    assert mmx.refresh_statistics(net, loaders.train, 2) == 2
    assert not np.allclose(net.bn.running_var.data().asnumpy(), before.asnumpy())
    for key, value in weights.items():  # no optimizer step: the weights are where they were
        assert np.array_equal(net.collect_params()[key].data().asnumpy(), value.asnumpy())
    # the averages follow the batches: many batches of the same data converge on its statistics
    same = [next(iter(loaders.train))] * 60
    mmx.refresh_statistics(net, same, 60)
    settled = net.bn.running_mean.data().asnumpy()
    mmx.refresh_statistics(net, same, 1)
    assert np.allclose(net.bn.running_mean.data().asnumpy(), settled, rtol=1e-3, atol=1e-5)
    assert mmx.refresh_statistics(net, same[:3], 10) == 3  # fewer batches than asked
    with pytest.raises(ValueError, match="no batches"):
        mmx.refresh_statistics(net, [], 1)
    with pytest.raises(ValueError, match="batches"):
        mmx.refresh_statistics(net, loaders.train, 0)


def test_train_updates_the_input_batchnorm_statistics(loaders):
    net = _tiny_net()
    mmx.train(net, loaders.train, loaders.test, epochs=1, progress=False)
    running_mean = net.bn.running_mean.data().asnumpy()
    assert np.all(running_mean != 0)  # MXNet updates them in backward, which now runs


def test_model_zoo_network_trains(loaders):
    _seed()
    net = mmx.get_network("resnet18_v2", loaders.num_classes, ctx=CPU, classes_multiple=8)
    history = mmx.train(net, loaders.train, loaders.test, epochs=1, progress=False)
    assert np.isfinite(history.final.loss)


def test_progress_bar(loaders, capsys):
    mmx.train(_tiny_net(), loaders.train, loaders.test, epochs=1, progress=True)
    assert "float32 epoch 1/1" in capsys.readouterr().err


def test_train_errors(loaders):
    net = _tiny_net()
    with pytest.raises(ValueError, match=r"epochs must be in \[1, inf\], got 0"):
        mmx.train(net, loaders.train, loaders.test, epochs=0, progress=False)
    for epochs in (1.5, True):
        with pytest.raises(TypeError, match="epochs must be an int"):
            mmx.train(net, loaders.train, loaders.test, epochs=epochs, progress=False)
    with pytest.raises(ValueError, match="no float16 matrix products on a CPU"):
        mmx.train(net, loaders.train, loaders.test, 1, dtype="float16", progress=False)
    with pytest.raises(ValueError, match="'float8' is not supported"):
        mmx.train(net, loaders.train, loaders.test, 1, dtype="float8", progress=False)
    with pytest.raises(ValueError, match="train_data yielded no batches"):
        mmx.train(net, [], loaders.test, 1, progress=False)
    with pytest.raises(ValueError, match="yielded no batches"):
        mmx.evaluate(net, [])
    half = Scale()
    half.initialize(ctx=CPU)
    half.cast("float16")
    with pytest.raises(ValueError, match="has float16 parameters"):
        mmx.train(half, loaders.train, loaders.test, 1, progress=False)
    with pytest.raises(RuntimeError, match="needs MXNet AMP"):
        mmx.make_trainer(net, "bfloat16")
    with pytest.raises(ValueError, match=r"learning_rate must be in \(0, inf\), got -1.0"):
        mmx.make_trainer(net, learning_rate=-1.0)
    with pytest.raises(ValueError, match="'float64' is not supported"):
        mmx.make_trainer(net, "float64")


def test_train_checks_dtype_once_per_call(loaders, monkeypatch):
    """train() checks dtype at its entry, not again in the trainer or in each epoch's test."""
    calls = []
    real = _core._check_dtype

    def counting(dtype, ctx=None):
        calls.append(dtype)
        return real(dtype, ctx)

    monkeypatch.setattr(_core, "_check_dtype", counting)
    monkeypatch.setattr(_training, "_check_dtype", counting)
    mmx.train(_tiny_net(), loaders.train, loaders.test, 2, "fp32", progress=False)
    assert calls == ["fp32"]
    calls.clear()
    mmx.evaluate(_tiny_net(), loaders.test)
    mmx.make_trainer(_tiny_net(), "float32")
    assert calls == ["float32", "float32"]  # the public entry points still check


# --------------------------------------------------------------------------------------------
# multi_precision: float16 weights, float32 master copies (an elementwise update, runs on CPU)


def _steps(block: Scale, trainer: gluon.Trainer, steps: int, grad: float = 0.05) -> None:
    x = mx.nd.full((4,), grad, dtype=block.w.dtype)
    for _ in range(steps):
        with autograd.record():
            loss = block(x).sum()  # d loss / d w = x
        loss.backward()
        trainer.step(1)


def _half_block() -> Scale:
    block = Scale()
    block.initialize(ctx=CPU)
    block.cast("float16")
    return block


def test_multi_precision_moves_a_float32_master_that_float16_alone_cannot():
    lr, steps = 1e-3, 100  # each update is 5e-5: below half the float16 spacing at 1.0
    plain = _half_block()
    trainer = gluon.Trainer(plain.collect_params(), "sgd", {"learning_rate": lr})
    with pytest.warns(UserWarning, match="Accumulating with float16 in optimizer"):
        _steps(plain, trainer, steps)
    assert plain.w.data().asnumpy().tolist() == [1.0] * 4  # every update was lost

    mixed = _half_block()
    trainer = gluon.Trainer(
        mixed.collect_params(), "sgd", {"learning_rate": lr, "multi_precision": True}
    )
    _steps(mixed, trainer, steps)
    weights, from_master = mmx.master_weights(mixed, trainer)
    assert from_master == {"w"}
    master = weights["w"].asnumpy()
    assert master.dtype == np.float32
    expected = 1.0 - steps * lr * float(np.float16(0.05))
    np.testing.assert_allclose(master, expected, rtol=1e-5)
    fp16 = mixed.w.data().asnumpy()
    assert fp16.dtype == np.float16 and np.array_equal(fp16, master.astype(np.float16))
    assert fp16[0] < 1.0 and master[0] != fp16[0]  # the copy moved; the master holds more bits


@pytest.mark.parametrize(
    "optimizer, params",
    [
        ("sgd", {}),  # (None, master)
        ("sgd", {"momentum": 0.9}),  # (momentum, master)
        ("nag", {"momentum": 0.9}),
        ("lars", {"momentum": 0.9}),
        ("lbsgd", {"momentum": 0.9}),
        ("signum", {}),  # the base Optimizer's layout from here on: (master, state)
        ("rmsprop", {}),
        ("adam", {}),
        ("lamb", {}),
    ],
)
def test_master_copy_is_found_for_each_optimizer(optimizer, params):
    block = _half_block()
    trainer = gluon.Trainer(
        block.collect_params(),
        optimizer,
        {"learning_rate": 1e-4, "multi_precision": True, **params},
    )
    _steps(block, trainer, 3)
    weights, from_master = mmx.master_weights(block, trainer)
    assert from_master == {"w"}
    master = weights["w"].asnumpy()
    assert np.all(master < 1.0)  # moved, by less than a float16 step for most optimizers
    assert np.array_equal(block.w.data().asnumpy(), master.astype(np.float16))


# --------------------------------------------------------------------------------------------
# Checkpoints of the master weights


def _params_of(net) -> dict[str, np.ndarray]:
    return {k: p.data().asnumpy() for k, p in net._collect_params_with_prefix().items()}


def test_checkpoint_round_trip(tmp_path, loaders):
    net = _tiny_net()
    history = mmx.train(net, loaders.train, loaders.test, 1, progress=False)
    saved = mmx.save_master_weights(net, tmp_path / "tiny.params", history.trainer)
    assert saved.path == tmp_path / "tiny.params" and saved.arrays == 8 and saved.from_master == 0
    assert saved.bytes == saved.path.stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.params"]  # no temporary left

    fresh = TinyNet(3)  # shapes not inferred yet: the file sets them
    fresh.initialize(ctx=CPU)
    fresh.hybridize()
    assert mmx.load_master_weights(fresh, saved.path) == 0
    assert mmx.evaluate(fresh, loaders.test) == mmx.evaluate(net, loaders.test)
    x, _ = next(iter(loaders.test))
    assert np.array_equal(fresh(x).asnumpy(), net(x).asnumpy())
    original = _params_of(net)
    assert all(np.array_equal(v, original[k]) for k, v in _params_of(fresh).items())


def test_float16_checkpoint_holds_the_master_and_resumes_exactly(tmp_path):
    def sgd(block):
        return gluon.Trainer(
            block.collect_params(), "sgd", {"learning_rate": 1e-3, "multi_precision": True}
        )

    block = _half_block()
    trainer = sgd(block)
    _steps(block, trainer, 30)
    saved = mmx.save_master_weights(block, tmp_path / "half.params", trainer)
    assert saved.from_master == 1
    on_disk = mx.nd.load(str(saved.path))["w"].asnumpy()
    master = mmx.master_weights(block, trainer)[0]["w"].asnumpy()
    assert on_disk.dtype == np.float32 and np.array_equal(on_disk, master)
    assert not np.array_equal(on_disk, block.w.data().asnumpy().astype(np.float32))

    resumed = _half_block()
    resumed_trainer = sgd(resumed)
    assert mmx.load_master_weights(resumed, saved.path, resumed_trainer) == 1
    assert np.array_equal(resumed.w.data().asnumpy(), block.w.data().asnumpy())
    _steps(block, trainer, 30)
    _steps(resumed, resumed_trainer, 30)
    assert np.array_equal(
        mmx.master_weights(resumed, resumed_trainer)[0]["w"].asnumpy(),
        mmx.master_weights(block, trainer)[0]["w"].asnumpy(),
    )

    without_trainer = _half_block()  # no trainer: the float16 copy only, rounded from the master
    assert mmx.load_master_weights(without_trainer, saved.path) == 0
    assert np.dtype(without_trainer.w.dtype) == np.float16


def test_checkpoint_errors(tmp_path, monkeypatch):
    block = _half_block()
    with pytest.raises(ValueError, match="pass the Trainer"):
        mmx.save_master_weights(block, tmp_path / "a.params")
    no_master = gluon.Trainer(block.collect_params(), "sgd", {"learning_rate": 0.1})
    with pytest.raises(ValueError, match="multi_precision=False"):
        mmx.save_master_weights(block, tmp_path / "a.params", no_master)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        mmx.save_master_weights(_tiny_net(), tmp_path / "no" / "a.params")
    deferred = TinyNet(3)
    deferred.initialize(ctx=CPU)
    with pytest.raises(ValueError, match="run one batch"):
        mmx.save_master_weights(deferred, tmp_path / "a.params")

    net = _tiny_net()
    net(mx.nd.ones((1, 3, 4, 4)))
    good = mmx.save_master_weights(net, tmp_path / "good.params")
    before = good.path.read_bytes()

    def failing_save(fname, arrays):  # dies halfway through writing
        Path(fname).write_bytes(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(mmx.mx.nd, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        mmx.save_master_weights(net, good.path)
    monkeypatch.undo()
    assert good.path.read_bytes() == before  # the old checkpoint is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.params"]

    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        mmx.load_master_weights(net, tmp_path / "missing.params")
    with pytest.raises(ValueError, match="shape"):
        five = _tiny_net(5)
        five(mx.nd.ones((1, 3, 4, 4)))
        mmx.load_master_weights(five, good.path)
    with pytest.raises(ValueError, match="missing .*'w'.*unexpected"):
        mmx.load_master_weights(Scale(), good.path)
    mx.nd.save(str(tmp_path / "list.params"), [mx.nd.ones(2)])
    with pytest.raises(ValueError, match="not a master-weights checkpoint"):
        mmx.load_master_weights(net, tmp_path / "list.params")
    (tmp_path / "junk.params").write_bytes(b"not an MXNet file")
    with pytest.raises(ValueError, match="not an MXNet array file"):
        mmx.load_master_weights(net, tmp_path / "junk.params")
    waiting = _tiny_net()  # shapes unknown until its first batch
    trainer = gluon.Trainer(waiting.collect_params(), "sgd", {"multi_precision": True})
    with pytest.raises(ValueError, match="not initialised yet .*one batch"):
        mmx.load_master_weights(waiting, good.path, trainer)
    waiting(mx.nd.ones((1, 3, 4, 4)))
    assert mmx.load_master_weights(waiting, good.path, trainer) == 0  # float32: no masters


# --------------------------------------------------------------------------------------------
# bfloat16 AMP, in a subprocess: amp.init changes MXNet for the rest of the process

_AMP_SCRIPT = """
import json, random, sys, warnings
warnings.simplefilter("ignore", DeprecationWarning)
import numpy as np
import mxnet as mx
from mptutor import mxnet as mmx
mx.random.seed(0); np.random.seed(0); random.seed(0)
loaders = mmx.image_folder_loaders(sys.argv[1], sys.argv[2], image_size=12, batch_size=16)
net = mmx.get_network("resnet18_v2", 3, "bfloat16", mx.cpu(), classes_multiple=8)
history = mmx.train(net, loaders.train, loaders.test, 1, "bfloat16", progress=False)
dtypes = sorted({np.dtype(p.dtype).name for p in net.collect_params().values()})
try:
    mmx.get_network("resnet18_v2", 3, "float32", mx.cpu())
    refused = ""
except RuntimeError as exc:
    refused = str(exc)
from mptutor.mxnet import _core
print(json.dumps({"amp": _core._amp_target(), "loss": history.final.loss,
                  "accuracy": history.final.test_accuracy, "dtypes": dtypes,
                  "scaler": getattr(history.trainer, "_amp_loss_scaler", None) is not None,
                  "refused": refused}))
"""


def test_bfloat16_amp_trains_on_cpu(folders):
    supported, reason = mmx.probe_bf16()
    assert isinstance(reason, str) and reason
    if not supported:
        pytest.skip(f"this CPU's oneDNN cannot run bfloat16 convolutions: {reason}")
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_AMP_SCRIPT), *map(str, folders)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["amp"] == "bfloat16" and not got["scaler"]  # bfloat16 scales no loss
    assert got["dtypes"] == ["float32"]  # AMP keeps float32 parameters and casts inside
    assert np.isfinite(got["loss"]) and 0 <= got["accuracy"] <= 1
    assert "amp.init" in got["refused"] and "float32 network" in got["refused"]


# --------------------------------------------------------------------------------------------
# float16 on a GPU (needs a CUDA build of MXNet, e.g. mxnet-cu112)


@pytest.mark.gpu
def test_float16_training_on_gpu(tmp_path, folders):
    if mx.context.num_gpus() == 0:
        pytest.fail("a GPU is present but this MXNet build sees none: install mxnet-cu112")
    gpu = mx.gpu(0)
    loaders = mmx.image_folder_loaders(*folders, image_size=32, batch_size=16)

    _seed()
    net32 = mmx.get_network("resnet18_v2", 3, "float32", gpu, classes_multiple=8)
    x, _ = next(iter(loaders.test))
    out32 = net32(x.as_in_context(gpu)).asnumpy()
    weights32 = mmx.save_master_weights(net32, tmp_path / "fp32.params")

    net16 = mmx.get_network("resnet18_v2", 3, "float16", gpu, classes_multiple=8)
    mmx.load_master_weights(net16, weights32.path)
    out16 = net16(x.as_in_context(gpu).astype("float16"))
    assert out16.dtype == np.float16
    np.testing.assert_allclose(out16.asnumpy().astype(np.float32), out32, rtol=0.05, atol=0.05)

    history = mmx.train(net16, loaders.train, loaders.test, 2, "float16", progress=False)
    assert all(np.isfinite(history.column("loss")))
    assert all(m is not None and m > 0 for m in history.column("memory_mib"))
    half = {
        k for k, p in net16._collect_params_with_prefix().items() if np.dtype(p.dtype) == np.float16
    }
    weights, from_master = mmx.master_weights(net16, history.trainer)
    assert half and from_master == half
    for key in half:
        stored = net16._collect_params_with_prefix()[key].data().asnumpy()
        assert np.array_equal(stored, weights[key].asnumpy().astype(np.float16))

    saved = mmx.save_master_weights(net16, tmp_path / "fp16.params", history.trainer)
    assert saved.from_master == len(half)
    reloaded = mmx.get_network("resnet18_v2", 3, "float16", gpu, classes_multiple=8)
    mmx.load_master_weights(reloaded, saved.path)
    x16 = x.as_in_context(gpu).astype("float16")
    predicted = net16(x16).asnumpy()
    np.testing.assert_allclose(reloaded(x16).asnumpy(), predicted, rtol=1e-3, atol=1e-3)
    original = _params_of(net16)
    assert all(np.array_equal(v, original[k]) for k, v in _params_of(reloaded).items())
    assert mmx.evaluate(reloaded, loaders.test) == mmx.evaluate(net16, loaders.test)
    assert mmx.evaluate(reloaded, loaders.test) == history.final.test_accuracy
