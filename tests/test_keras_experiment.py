"""benchmarks/keras_cnn_experiment.py: the post's model, strict FP32, synchronised timings, --smoke.

The script is loaded as a module and its ``main`` called in this process on the TensorFlow
backend, so the smoke run costs no second TensorFlow start-up. One test runs it on Keras's
PyTorch backend in a subprocess, as a GPU host without TensorFlow would.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed")

from mptutor import tensorflow as mtf

tf, keras = mtf.tf, mtf.keras
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "keras_cnn_experiment.py"


@pytest.fixture(scope="module")
def kce():
    spec = importlib.util.spec_from_file_location("keras_cnn_experiment", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_blog_model_is_the_posts_conv_relu_then_batchnorm(kce):
    model = kce.build_model("blog", 256)
    kinds = [type(layer).__name__ for layer in model.layers[1:]]
    assert kinds == ["Conv2D", "BatchNormalization"] * 3 + [
        "GlobalAveragePooling2D",
        "Dense",
        "Activation",
    ]
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert [(c.filters, c.kernel_size[0], c.strides[0]) for c in convs] == [
        (32, 5, 2),
        (64, 7, 2),
        (128, 11, 2),
    ]
    assert all(c.activation is keras.activations.relu for c in convs)  # ReLU before BatchNorm
    assert [c.output.shape[1] for c in convs] == [128, 64, 32]
    assert model.layers[-1].dtype_policy.name == "float32"


def test_training_flops_count_the_first_conv_twice_and_the_rest_three_times(kce):
    model = kce.build_model("blog", 256)
    forward = {layer.name: kce.layer_flops(layer, 1) for layer in model.layers}
    assert forward["conv1"] == 2 * 128 * 128 * 32 * 5 * 5 * 3
    assert forward["conv3"] == 2 * 32 * 32 * 128 * 11 * 11 * 64
    expected = 2 * forward["conv1"] + 3 * (forward["conv2"] + forward["conv3"] + forward["dense"])
    assert kce.training_flops(model, 1) == expected
    assert kce.training_flops(model, 32) == 32 * expected


def test_changed_model_computes_the_same_function(kce):
    blog, changed = kce.build_model("blog", 16), kce.build_model("changed", 16)
    for layer in blog.layers[1:]:
        weights = layer.get_weights()
        if layer.name == "conv1":
            weights[0] = np.pad(weights[0], [(0, 0), (0, 0), (0, 5), (0, 0)])
        changed.get_layer(layer.name).set_weights(weights)
    pixels, _ = kce.batch("changed", 4, 16)
    floats, _ = kce.batch("blog", 4, 16)
    np.testing.assert_allclose(blog(floats), changed(pixels), rtol=0, atol=1e-6)
    assert changed.get_layer("conv1").input.shape[-1] == 8


def test_float32_variant_switches_tf32_off(kce):
    try:
        flags = kce.set_tf32("tensorflow", False)
        assert flags == {"tf.config.experimental.enable_tensor_float_32_execution": False}
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(True)
    assert kce.VARIANTS["float32"] == ("float32", False)


def test_layer_profile_waits_for_the_device_after_every_call(kce, monkeypatch):
    calls = []
    monkeypatch.setattr(tf.test.experimental, "sync_devices", lambda: calls.append(1))
    model = kce.build_model("blog", 8)
    x, _ = kce.batch("blog", 2, 8)
    rows = kce.profile_layers(model, x, repeats=1, timing_device="cpu")
    assert [r["layer"] for r in rows] == [layer.name for layer in model.layers[1:]]
    timed_calls = 3 * len(rows) + 3 * sum(r["forward_backward_s"] is not None for r in rows)
    assert len(calls) == timed_calls  # warm-up 2 + 1 timed, for each forward and each backward


def test_smoke_run_writes_a_record(kce, tmp_path, capsys):
    assert kce.main(["--smoke", "--save", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "images 8x8, batch sizes [4]" in out
    (path,) = tmp_path.glob("*.json")
    assert path.name == "keras_cnn_experiment-smoke-tensorflow-cpu.json"
    record = json.loads(path.read_text())
    data = record["data"]
    assert data["smoke"] and data["backend"] == "tensorflow" and data["device"] == "cpu"
    assert data["variants"]["float32"]["flags"] == {
        "tf.config.experimental.enable_tensor_float_32_execution": False
    }
    combos = {(r["model"], r["variant"], r["feed"]) for r in data["steps_s"] if "median_s" in r}
    assert len(combos) == len(data["steps_s"]) == 2 * 2 * 2
    assert data["models"]["blog"]["flops_per_image_training"] > 0
    assert {r["model"] for r in data["layers"]} == {"blog", "changed"}
    assert all("error" not in r for r in data["layers"])


@pytest.mark.slow
def test_runs_on_the_torch_backend_without_tensorflow_imported(tmp_path):
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['keras_cnn_experiment.py', '--smoke', '--models', 'blog', '--feeds',"
        f" 'device', '--save', '--out-dir', {str(tmp_path)!r}]\n"
        "try:\n"
        f"    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())["data"]
    assert data["backend"] == "torch" and data["smoke"]
    assert data["variants"]["float32"]["tf32"] is False
    assert all("median_s" in r for r in data["steps_s"])
