"""mptutor.keras_cnn and benchmarks/keras_cnn_experiment.py: the Keras track's CNN experiment.

The script is loaded as a module and its ``main`` called in this process on the TensorFlow
backend; one test runs it on Keras's PyTorch backend in a subprocess, as a GPU host without
TensorFlow would.
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

from mptutor import bench
from mptutor import keras_cnn as kc
from mptutor import tensorflow as mtf
from mptutor.keras_cnn._costs import _training_passes

tf, keras = mtf.tf, mtf.keras
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "keras_cnn_experiment.py"


@pytest.fixture(scope="module")
def kce():
    spec = importlib.util.spec_from_file_location("keras_cnn_experiment", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def blog():
    return kc.build_model("blog", 256, "mixed_float16")


# --- the models ---------------------------------------------------------------------------------


def test_blog_model_is_the_posts_conv_relu_then_batchnorm(blog):
    kinds = [type(layer).__name__ for layer in blog.layers[1:]]
    assert kinds == ["Conv2D", "BatchNormalization"] * 3 + [
        "GlobalAveragePooling2D",
        "Dense",
        "Activation",
    ]
    convs = [layer for layer in blog.layers if isinstance(layer, keras.layers.Conv2D)]
    assert [(c.filters, c.kernel_size[0], c.strides[0]) for c in convs] == [
        (32, 5, 2),
        (64, 7, 2),
        (128, 11, 2),
    ]
    assert all(c.activation is keras.activations.relu for c in convs)  # ReLU before BatchNorm
    assert all(c.padding == "same" for c in convs)
    assert [c.output.shape[1] for c in convs] == [128, 64, 32]
    assert blog.count_params() == 1096394


def test_policy_for_the_layers_float32_softmax_and_the_global_policy_restored(blog):
    assert keras.mixed_precision.dtype_policy().name == "float32"
    *body, softmax = blog.layers[1:]
    assert {layer.dtype_policy.name for layer in body} == {"mixed_float16"}
    assert softmax.dtype_policy.name == "float32" and blog.output.dtype == "float32"
    assert isinstance(blog.optimizer, keras.optimizers.LossScaleOptimizer)
    assert not isinstance(kc.build_model("blog", 8).optimizer, keras.optimizers.LossScaleOptimizer)
    with pytest.raises(ValueError):
        kc.build_model("blog", 8, "mixed_float16", convolutions=((8, 0, 1),))  # kernel size 0
    assert keras.mixed_precision.dtype_policy().name == "float32"  # restored after a failure
    with pytest.raises(ValueError, match="unknown model"):
        kc.build_model("resnet", 8)


def test_changed_model_computes_the_same_function():
    blog, changed = kc.build_model("blog", 16), kc.build_model("changed", 16)
    for layer in blog.layers[1:]:
        weights = layer.get_weights()
        if layer.name == "conv1":
            weights[0] = np.pad(weights[0], [(0, 0), (0, 0), (0, 5), (0, 0)])
        changed.get_layer(layer.name).set_weights(weights)
    pixels, labels = kc.make_batch("changed", 4, 16)
    floats, same_labels = kc.make_batch("blog", 4, 16)
    assert pixels.dtype == np.uint8 and floats.dtype == np.float32 and floats.max() <= 1
    np.testing.assert_array_equal(labels, same_labels)
    np.testing.assert_allclose(blog(floats), changed(pixels), rtol=0, atol=1e-6)
    assert changed.get_layer("conv1").input.shape[-1] == 8
    assert changed.input.dtype == "uint8"


def test_pad_channels():
    layer = kc.PadChannels(8)
    out = layer(np.ones((2, 3, 3, 3), np.float32))
    assert out.shape == (2, 3, 3, 8)
    np.testing.assert_array_equal(np.asarray(out)[..., 3:], 0)
    assert kc.PadChannels.from_config(layer.get_config()).channels == 8
    with pytest.raises(ValueError, match="more than"):
        kc.PadChannels(2)(np.ones((1, 2, 2, 3), np.float32))
    with pytest.raises(ValueError, match="channels"):
        kc.PadChannels(0)


# --- the counts ---------------------------------------------------------------------------------


def test_layer_flops_and_training_passes(blog):
    forward = {layer.name: kc.layer_flops(layer, 1) for layer in blog.layers[1:]}
    assert forward["conv1"] == 2 * 128 * 128 * 32 * 5 * 5 * 3
    assert forward["conv3"] == 2 * 32 * 32 * 128 * 11 * 11 * 64
    assert forward["dense"] == 2 * 128 * 10
    assert forward["bn1"] == 5 * 128 * 128 * 32 and forward["pool"] == 32 * 32 * 128
    passes = _training_passes(blog)
    assert passes["conv1"] == 2 and passes["conv2"] == passes["bn3"] == passes["dense"] == 3
    assert passes["pool"] == passes["softmax"] == 2  # no weights, input gradient only
    changed = kc.build_model("changed", 256)
    assert _training_passes(changed)["rescale"] == _training_passes(changed)["pad_to_8"] == 1
    expected = sum(passes[name] * flops for name, flops in forward.items())
    assert kc.training_flops(blog, 1) == expected
    assert kc.training_flops(blog, 32) == 32 * expected


def test_layer_costs_count_bytes_and_intensity(blog):
    costs = {r["layer"]: r for r in kc.layer_costs(blog, 128)}
    conv1 = costs["conv1"]
    values = 128 * (256 * 256 * 3 + 128 * 128 * 32) + 5 * 5 * 3 * 32 + 32
    assert conv1["MB moved fp32"] == pytest.approx(4 * values / 1e6)
    assert conv1["FLOP/byte fp16"] == pytest.approx(2 * conv1["FLOP/byte fp32"])
    assert sum(r["share of FLOPs"] for r in costs.values()) == pytest.approx(1)
    small = {r["layer"]: r for r in kc.layer_costs(blog, 32)}
    assert costs["conv3"]["FLOP/byte fp32"] > small["conv3"]["FLOP/byte fp32"]  # weights amortised
    assert costs["bn3"]["FLOP/byte fp32"] == pytest.approx(small["bn3"]["FLOP/byte fp32"], 1e-3)


def test_tensor_core_check_finds_the_layers_that_break_the_channel_rule(blog):
    rows = {r["layer"]: r for r in kc.tensor_core_check(blog, 128)}
    assert [name for name, r in rows.items() if not r["C_in, C_out multiples of 8"]] == [
        "conv1",
        "dense",
    ]
    assert rows["conv1"]["GEMM M x N x K"] == f"{128 * 128 * 128} x 32 x 75"
    changed = {r["layer"]: r for r in kc.tensor_core_check(kc.build_model("changed", 256), 128)}
    assert changed["conv1"]["C_in, C_out multiples of 8"]
    assert changed["conv1"]["GEMM M x N x K"].endswith("x 200")


def test_roofline_by_hand(blog):
    sheet = kc.DATASHEETS["V100 SXM2"]
    costs = {r["layer"]: r for r in kc.layer_costs(blog, 128)}

    def seconds(name):  # the longer of the arithmetic and the memory traffic, in FP16
        r = costs[name]
        return max(
            r["GFLOP"] * 1e9 / sheet["fp16 tensor"], r["MB moved fp16"] * 1e6 / sheet["memory"]
        )

    mixed = kc.roofline(blog, "V100 SXM2", "amp_fp16", 128)
    assert costs["conv3"]["GFLOP"] * 1e9 / sheet["fp16 tensor"] == seconds("conv3")  # compute
    expected = 3 * seconds("conv2") + 3 * seconds("conv3")  # three forward passes each
    assert mixed["conv/dense meeting the rule"] == pytest.approx(expected, rel=1e-12)
    assert mixed["host copy"] == pytest.approx(128 * 256 * 256 * 3 * 4 / sheet["host link"])
    rows = kc.roofline_table(blog)
    assert [(r["GPU (data sheet)"], r["precision"]) for r in rows] == [
        ("V100 SXM2", "fp32"),
        ("V100 SXM2", "amp_fp16"),
        ("H100 SXM5", "fp32"),
        ("H100 SXM5", "tf32"),
        ("H100 SXM5", "amp_fp16"),
    ]
    assert all(r["speedup, layers only"] >= r["speedup with host copy"] >= 1 for r in rows)
    assert kc.roofline(blog, "V100 SXM2", "AMP-FP16") == kc.roofline(blog, "V100 SXM2", "amp_fp16")
    with pytest.raises(ValueError, match="no tf32"):
        kc.roofline(blog, "V100 PCIe", "tf32")
    with pytest.raises(ValueError, match="unknown precision"):
        kc.roofline(blog, "V100 SXM2", "mixed_float16")  # a Keras policy, not a precision
    with pytest.raises(ValueError, match="no roofline for 'bf16'"):
        kc.roofline(blog, "V100 SXM2", "bf16")
    with pytest.raises(ValueError, match="unknown GPU"):
        kc.roofline(blog, "A100", "fp32")
    with pytest.raises(TypeError, match="string"):
        kc.roofline(blog, "V100 SXM2", None)


# --- the backend, timing and profiling ----------------------------------------------------------


def test_fp32_switches_tf32_off(kce):
    try:
        flags = kce.set_tf32(False, "tensorflow")
        assert flags == {"tf.config.experimental.enable_tensor_float_32_execution": False}
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(True)
    assert kce.POLICIES == {
        "fp32": ("float32", False),
        "tf32": ("float32", True),
        "amp_fp16": ("mixed_float16", False),
    }
    assert kce.backend_version("tensorflow") == tf.__version__
    assert kce.device_kind("tensorflow") == "cpu"


def test_layer_profile_waits_for_the_device_after_every_call(monkeypatch):
    calls = []
    monkeypatch.setattr(tf.test.experimental, "sync_devices", lambda: calls.append(1))
    model = kc.build_model("blog", 8)
    x, _ = kc.make_batch("blog", 2, 8)
    rows = kc.profile_layers(model, x, repeats=1, warmup=2)
    assert [r["layer"] for r in rows] == [layer.name for layer in model.layers[1:]]
    timed_calls = 3 * len(rows) + 3 * sum(r["forward_backward_s"] is not None for r in rows)
    assert len(calls) == timed_calls  # warm-up 2 + 1 timed, for each forward and each backward
    assert all(r["forward_backward_s"] is not None for r in rows)  # every layer has a gradient


def test_time_step_times_train_on_batch(kce):
    model = kc.build_model("blog", 8)
    x, y = kc.make_batch("blog", 4, 8)
    timing = kc.time_step(model, x, y, repeats=2, warmup=1)
    assert len(timing.times) == 2 and timing.median > 0
    assert int(model.optimizer.iterations.numpy()) == 3
    assert kce.kernel_profile(model, x, y) is None  # PyTorch backend on a CUDA GPU only


# --- the records --------------------------------------------------------------------------------


def _data(device="cuda", smoke=False):
    steps = [
        {"model": "blog", "precision": v, "feed": "device", "batch": 32, "median_s": s}
        for v, s in (("amp_fp16", 0.01), ("fp32", 0.04), ("tf32", 0.02))
    ]
    steps.append({"model": "blog", "precision": "fp32", "feed": "host", "batch": 32, "error": "x"})
    return {
        "smoke": smoke,
        "device": device,
        "backend": "torch",
        "backend_version": "2.9",
        "keras_version": "3.12",
        "backend_note": "test",
        "models": {"blog": {"flops_per_image_training": 1e9}},
        "steps_s": steps,
        "kernels": [
            {"model": "blog", "precision": "amp_fp16", "batch": 32, "total_us": 2000.0,
             "tensor_core_us": 1500.0, "kernels": []}
        ],
    }  # fmt: skip


def test_speedup_rows_and_kernel_shares(kce):
    rows = kce.speedup_rows(_data())
    assert [(r["feed"], r["precision"]) for r in rows] == [
        ("device", "fp32"),
        ("device", "tf32"),
        ("device", "amp_fp16"),
        ("host", "fp32"),
    ]
    mixed = rows[2]
    assert mixed["vs fp32"] == pytest.approx(4) and mixed["vs tf32"] == pytest.approx(2)
    assert mixed["TFLOP/s"] == pytest.approx(32 / 0.01 * 1e9 / 1e12)
    assert rows[3]["ms/step"] is None and rows[3]["error"] == "x"
    assert kce.tensor_core_shares(_data())[0]["share in Tensor Core kernels"] == 0.75


def test_the_notebook_finds_gpu_runs_of_this_experiment_through_bench(kce, tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import records  # what the benchmark scripts write records with

    records.save_result(f"{kce.EXPERIMENT}-torch-h100", _data(), tmp_path)
    records.save_result(f"{kce.EXPERIMENT}-torch-cpu", _data("cpu"), tmp_path)
    records.save_result(f"{kce.EXPERIMENT}-smoke-torch-h100", _data(smoke=True), tmp_path)
    records.save_result("gemm_sweep-cuda", {"device": "cuda"}, tmp_path)
    found = bench.find_records(kind=kce.EXPERIMENT, device="cuda", results_dir=tmp_path)
    ((path, record),) = found
    assert path.name == "keras_cnn_experiment-torch-h100.json"
    assert record["data"]["backend"] == "torch"


def test_plot_step_times_marks_every_line():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        {"precision": p, "batch": n, "ms/step": 1.0 + n, "images/s": n / 1e-3}
        for p in ("fp32", "amp_fp16")
        for n in (32, 64)
    ]
    fig = kc.plot_step_times({"blog model": rows, "changed model": rows}, "test")
    try:
        lines = [line for ax in fig.axes for line in ax.get_lines()]
        assert len(lines) == 2 * 2 * 2  # two panels, two models, two policies
        assert all(line.get_marker() not in (None, "None", "") for line in lines)
        styles = {(line.get_marker(), line.get_linestyle(), line.get_color()) for line in lines}
        assert len(styles) == 4  # lines that lie on top of each other stay distinguishable
        fig.canvas.draw()
        for ax in fig.axes:  # values readable off each axis, not decades only
            low, high = ax.get_ylim()
            shown = [t for t in ax.get_yticks() if low <= t <= high]
            assert len(shown) >= 2, ax.get_ylabel()
            labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
            assert set(labels) >= {f"{t:g}" for t in shown}
            assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "64"]
    finally:
        plt.close(fig)


@pytest.mark.parametrize(("batches", "log"), [((32, 64, 128), False), ((32, 512), True)])
def test_plot_step_times_keeps_every_marker_visible(batches, log):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [  # the four precisions and the two models coincide at every point
        {"precision": p, "batch": n, "ms/step": 2.0 * n, "images/s": 500.0}
        for p in ("fp32", "tf32", "amp_fp16", "amp_bf16")  # every line style of the GPU runs
        for n in batches
    ]
    fig = kc.plot_step_times({"blog model": rows, "changed model": rows}, "test")
    try:
        for ax in fig.axes:
            assert ax.get_xscale() == ("log" if log else "linear")
            # images/s is flat here: a log y axis only for ms/step, which spans a factor of 16
            wide = log and ax is fig.axes[0]
            assert ax.get_yscale() == ("log" if wide else "linear")
            assert (ax.get_legend() is not None) == (not log or ax is fig.axes[0])
            lines = {line.get_label(): line for line in ax.get_lines()}
            sizes = {label.split(", ")[1]: line.get_markersize() for label, line in lines.items()}
            assert sizes["fp32"] < sizes["tf32"] < sizes["amp_fp16"] < sizes["amp_bf16"]
            styles = {label.split(", ")[1]: line.get_linestyle() for label, line in lines.items()}
            assert styles == {"fp32": "-", "tf32": ":", "amp_fp16": "--", "amp_bf16": "-."}
            assert all(lines[f"blog model, {p}"].get_markerfacecolor() == "none"
                       for p in ("tf32", "amp_fp16", "amp_bf16"))  # fmt: skip
            fp32_line = lines["blog model, fp32"]  # filled, edged in white, on top
            assert fp32_line.get_markeredgecolor() == "white"
            assert fp32_line.get_zorder() > lines["blog model, amp_fp16"].get_zorder()
            xs = {m: np.asarray(lines[f"{m} model, fp32"].get_xdata()) for m in ("blog", "changed")}
            assert (xs["blog"] < batches).all() and (xs["changed"] > batches).all()  # apart
            # within a run, each precision a little further right, and still left of the next run
            order = [f"blog model, {p}" for p in ("fp32", "tf32", "amp_fp16", "amp_bf16")]
            order.append("changed model, fp32")
            x = np.array([lines[label].get_xdata() for label in order])
            assert (np.diff(x, axis=0) > 0).all()
            if not wide:  # from zero
                assert ax.get_ylim()[0] == 0
            fig.canvas.draw()
            frame = ax.get_window_extent()
            for line in lines.values():  # every marker whole inside the frame, in pixels
                radius = line.get_markersize() / 2 * fig.dpi / 72
                for px, py in ax.transData.transform(line.get_xydata()):
                    assert frame.x0 + radius < px < frame.x1 - radius, line.get_label()
                    assert frame.y0 + radius < py < frame.y1 - radius, line.get_label()
    finally:
        plt.close(fig)


def test_plot_step_times_refuses_rows_without_batches():
    with pytest.raises(ValueError, match="positive batch sizes"):
        kc.plot_step_times({"blog model": []}, "test")


# --- the script ---------------------------------------------------------------------------------


def test_smoke_run_writes_a_record(kce, tmp_path, capsys):
    assert kce.main(["--smoke", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "images 8x8, batch sizes [4]" in out
    (path,) = tmp_path.glob("*.json")
    assert path.name == "keras_cnn_experiment-smoke-tensorflow-cpu.json"
    record = json.loads(path.read_text())
    data = record["data"]
    assert data["smoke"] and data["backend"] == "tensorflow" and data["device"] == "cpu"
    assert data["precisions"]["fp32"]["flags"] == {
        "tf.config.experimental.enable_tensor_float_32_execution": False
    }
    combos = {(r["model"], r["precision"], r["feed"]) for r in data["steps_s"] if "median_s" in r}
    assert len(combos) == len(data["steps_s"]) == 2 * 2 * 2
    model = kc.build_model("blog", 8)
    assert data["models"]["blog"]["flops_per_image_training"] == kc.training_flops(model, 1)
    assert {r["model"] for r in data["layers"]} == {"blog", "changed"}
    assert all("error" not in r for r in data["layers"])
    summary = {(r["model"], r["precision"], r["feed"]): r for r in data["summary"]}
    assert set(summary) == combos and summary["blog", "fp32", "host"]["vs fp32"] == 1
    assert data["tensor_core_shares"] == []  # no kernels profiled on a CPU
    found = bench.find_records(kind=kce.EXPERIMENT, device="cuda", results_dir=tmp_path)
    assert not found  # a smoke test on a CPU is no GPU result


def test_runs_on_the_torch_backend_without_tensorflow_imported(tmp_path):
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['keras_cnn_experiment.py', '--smoke', '--models', 'blog', '--feeds',"
        f" 'device', '--out', {str(tmp_path)!r}]\n"
        "try:\n"
        f"    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'\n"
        "assert 'mptutor.keras_cnn' in sys.modules\n"
    )
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())["data"]
    assert data["backend"] == "torch" and data["smoke"]
    assert data["precisions"]["fp32"]["tf32"] is False
    torch_flags = data["precisions"]["fp32"]["flags"]["torch"]  # torch_perf._timing._set_tf32
    assert torch_flags["matmul"] in ("ieee", False) and torch_flags["cudnn_conv"] in ("ieee", False)
    assert all("median_s" in r for r in data["steps_s"])
    assert data["layers"] and all("error" not in r for r in data["layers"])
