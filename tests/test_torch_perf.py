"""mptutor.torch_perf: TF32 switches, GEMM products, timing, training and convolution steps."""

import math
import subprocess
import sys
import time
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
from torch import nn

from mptutor import bench
from mptutor import torch_perf as tp
from mptutor.torch_perf import _gemm, _timing, _training


def test_is_cuda_accepts_device_indices():
    is_cuda = _timing._is_cuda
    assert is_cuda("cuda") and is_cuda("cuda:0") and is_cuda(torch.device("cuda", 1))
    assert not is_cuda("cpu") and not is_cuda(torch.device("cpu"))


def test_tf32_switch_uses_the_fp32_precision_settings_without_warnings():
    before = tp.tf32_settings()
    if before["api"] != "fp32_precision":
        pytest.skip("this PyTorch predates the fp32_precision settings")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecation warning would fail here
        with tp.tf32(False):
            assert torch.backends.cuda.matmul.fp32_precision == "ieee"
            assert torch.backends.cudnn.conv.fp32_precision == "ieee"
            with tp.tf32(True):
                assert tp.tf32_settings() == {
                    "api": "fp32_precision",
                    "matmul": "tf32",
                    "cudnn_conv": "tf32",
                }
            assert tp.tf32_settings()["matmul"] == "ieee"
        assert tp.tf32_settings() == before
        # nothing was mixed: PyTorch's own getters still answer
        assert torch.get_float32_matmul_precision() == "highest"
        assert torch.backends.cuda.matmul.allow_tf32 is False


def test_tf32_is_restored_after_an_error():
    before = tp.tf32_settings()
    with pytest.raises(KeyError), tp.tf32(True):
        raise KeyError("inside")
    assert tp.tf32_settings() == before


def test_set_tf32_falls_back_to_allow_tf32_where_fp32_precision_is_missing():
    # in a fresh process, so that the legacy flags never mix with the settings of this one (a
    # CUDA build of a recent PyTorch may warn about the legacy flags: that is the point of the
    # new settings, and the fallback is only taken where they are missing)
    code = (
        "import torch\n"
        "from mptutor import torch_perf as tp\n"
        "from mptutor.torch_perf import _timing\n"
        "old = ('allow_tf32', torch.backends.cuda.matmul, torch.backends.cudnn)\n"
        "_timing._tf32_switches = lambda: old\n"
        "before = _timing._set_tf32(True)\n"
        "assert before == {'api': 'allow_tf32', 'matmul': False, 'cudnn_conv': True}, before\n"
        "assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32\n"
        "with tp.tf32(False):\n"
        "    assert not torch.backends.cuda.matmul.allow_tf32\n"
        "    assert not torch.backends.cudnn.allow_tf32\n"
        "assert torch.backends.cuda.matmul.allow_tf32\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_precisions_on_a_cpu():
    assert list(_gemm._GEMMS) == ["fp32", "tf32", "fp16", "bf16", "fp8_e4m3"]
    assert [p for p in _gemm._GEMMS if _gemm._why_not(p, "cpu") is None] == ["fp32", "fp16", "bf16"]
    assert "CUDA GPUs only" in _gemm._why_not("tf32", "cpu")
    assert "CUDA GPUs only" in _gemm._why_not("fp8-e4m3", "cpu")  # formats.precision's spelling
    with pytest.raises(ValueError, match="unknown precision 'fp4'"):
        _gemm._why_not("fp4", "cpu")
    with pytest.raises(ValueError, match="'amp_fp16' is not a precision of the sweep"):
        tp.measure_gemm("amp_fp16", 8, 8, 8)


@pytest.mark.parametrize(
    ("capability", "precision", "shape", "expected"),
    [
        ((7, 0), "tf32", (), "needs compute capability 8.0, this GPU has 7.0"),
        ((7, 5), "bf16", (), "needs compute capability 8.0"),
        ((7, 0), "fp16", (), None),
        ((8, 0), "fp8-e4m3", (), "needs compute capability 8.9"),
        ((9, 0), "fp8-e4m3", (8191, 8191, 8191), "divisible by 16"),
        ((9, 0), "fp8-e4m3", (8192, 8192, 8192), None),
        ((9, 0), "fp16", (8191, 8191, 8191), None),
    ],
)
def test_why_not_on_gpus_of_each_generation(monkeypatch, capability, precision, shape, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    reason = _gemm._why_not(precision, "cuda:0", shape)
    assert reason is None if expected is None else expected in reason


@pytest.mark.parametrize("precision", list(_gemm._GEMMS))
def test_products_compute_a_at_b_in_their_precision(precision):
    dtype = _gemm._GEMMS[precision][0]
    product = _gemm._make_product(precision, 24, 16, 32, "cpu", seed=3)
    c = product()
    assert c.shape == (24, 16)
    assert c.dtype == (torch.bfloat16 if precision == "fp8_e4m3" else dtype)
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(24, 32, generator=gen), torch.randn(32, 16, generator=gen)
    exact = a.to(dtype).double() @ b.to(dtype).double()  # the rounded inputs, exactly
    tolerance = {"fp16": 2e-2, "bf16": 0.2, "fp8_e4m3": 0.2}.get(precision, 1e-4)
    assert torch.allclose(c.double(), exact, atol=tolerance, rtol=tolerance)


def test_gemm_flops():
    assert tp.gemm_flops(256, 2048, 1024) == 2 * 256 * 2048 * 1024


def test_time_calls_packs_enough_calls_into_each_sample():
    calls = []

    def work():
        calls.append(1)
        time.sleep(0.001)

    # a call sleeps 1 ms, so a 20 ms sample needs several of them even on a busy machine (the
    # calibration's own sample may run slower than the timed ones: no bound on those)
    timing = tp.time_calls(work, "cpu", repeats=3, warmup=2, min_sample_s=0.02)
    assert timing.method == "wall-clock" and timing.inner >= 2 and timing.warmup == 2
    assert len(timing.times) == 3 and all(t >= 0.001 for t in timing.times)
    record = timing.as_dict()
    assert record["inner"] == timing.inner and record["median_s"] == timing.median
    assert "note" not in record  # no fallback was taken
    assert len(calls) >= 2 + 3 * timing.inner  # warm-up, calibration, then the samples


def test_time_calls_rejects_bad_arguments():
    with pytest.raises(ValueError, match="repeats"):
        tp.time_calls(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="min_sample_s"):
        tp.time_calls(lambda: None, min_sample_s=-1)
    with pytest.raises(TypeError, match="warmup must be an int"):
        tp.time_calls(lambda: None, warmup=1.5)


def test_time_calls_stops_at_its_most_calls_per_sample(monkeypatch):
    monkeypatch.setattr(_timing, "_MAX_INNER", 64)
    timing = tp.time_calls(lambda: None, "cpu", repeats=2, warmup=0, min_sample_s=10.0)
    assert timing.inner == 64


def test_measure_gemm_rows():
    row = tp.measure_gemm("fp32", 16, 16, 16, "cpu", repeats=2, min_sample_s=0.001)
    assert row["tflops"] > 0 and math.isclose(
        row["tflops"], tp.gemm_flops(16, 16, 16) / row["seconds"] / 1e12
    )
    assert row["timing"]["method"] == "wall-clock" and len(row["timing"]["times"]) == 2
    assert tp.measure_gemm("tf32", 16, 16, 16, "cpu")["skipped"].startswith("tf32 is measured")


def test_gemm_sweep_measures_each_size_and_the_size_minus_one():
    rows = tp.gemm_sweep([8], "cpu", ["fp32", "fp8-e4m3"], repeats=1, min_sample_s=0.0)
    assert [(r["precision"], r["m"], "tflops" in r) for r in rows] == [
        ("fp32", 8, True),
        ("fp8_e4m3", 8, False),
        ("fp32", 7, True),
        ("fp8_e4m3", 7, False),
    ]


def _tiny_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 10),
    )


@pytest.mark.parametrize("mode", ["fp32", "amp_bf16", "amp-fp16"])
def test_measure_training_on_a_cpu(mode):
    benchmark_before, tf32_before = torch.backends.cudnn.benchmark, tp.tf32_settings()
    row = tp.measure_training(
        _tiny_cnn,
        mode,
        batch=4,
        image_size=8,
        classes=10,
        device="cpu",
        steps=2,
        warmup=1,
        channels_last=True,
    )
    assert row["mode"] == mode.replace("-", "_") and row["channels_last"]
    assert len(row["times_s"]) == 2
    assert row["images_per_s"] > 0 and row["peak_memory_gib"] is None
    assert math.isfinite(row["final_loss"])
    assert torch.backends.cudnn.benchmark == benchmark_before
    assert tp.tf32_settings() == tf32_before
    with pytest.raises(ValueError, match="unknown mode 'fp16'"):
        tp.measure_training(_tiny_cnn, "fp16", 2, 8, 10)


def test_training_modes_a_cpu_does_not_time_are_skipped_with_the_reason():
    row = tp.measure_training(_tiny_cnn, "tf32", 4, 8, 10, "cpu", steps=1, warmup=0)
    assert row["skipped"] == "tf32 is measured on CUDA GPUs only" and "times_s" not in row


def test_products_cycle_through_their_input_sets():
    product = _gemm._make_product("fp32", 8, 8, 8, "cpu", seed=1, input_sets=3)
    results = [product() for _ in range(4)]
    assert not torch.equal(results[0], results[1]) and not torch.equal(results[1], results[2])
    assert torch.equal(results[0], results[3])  # the fourth call takes the first pair again
    single = _gemm._make_product("fp32", 8, 8, 8, "cpu", seed=1)
    assert torch.equal(single(), results[0]) and torch.equal(single(), results[0])


def test_gpu_inputs_fill_twice_the_l2_cache(monkeypatch):
    assert _gemm._input_sets_past_l2("fp16", 1024, 1024, 1024, "cpu") == 1
    props = type("Props", (), {"L2_cache_size": 50 * 2**20})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    assert _gemm._input_sets_past_l2("fp16", 1024, 1024, 1024, "cuda") == 25  # 4 MiB a pair
    assert _gemm._input_sets_past_l2("fp32", 8192, 8192, 8192, "cuda") == 1
    assert _gemm._input_sets_past_l2("fp8-e4m3", 256, 256, 256, "cuda") == 64  # at most 64


def test_fp8_rows_say_how_they_accumulate():
    row = tp.measure_gemm("fp8-e4m3", 32, 32, 32, "cpu", repeats=1, min_sample_s=0.0)
    assert row["skipped"]  # measured on GPUs only, but the setting is on the row
    assert row["use_fast_accum"] is False
    fast = _gemm._make_product("fp8-e4m3", 32, 16, 32, "cpu", fp8_fast_accum=True)
    slow = _gemm._make_product("fp8-e4m3", 32, 16, 32, "cpu")
    assert fast().shape == slow().shape == (32, 16)


def test_conv_step_times_clears_gradients_and_runs_each_shape():
    rows = _training._conv_steps(2, 4, [6, 8], "float32", True, ["channels_last"], "cpu", 2)
    assert [(r["image side"], r["layout"], r["cudnn.benchmark"]) for r in rows] == [
        (6, "channels_last", True),
        (8, "channels_last", True),
    ]
    assert all(r["first call ms"] > 0 and r["median ms"] > 0 for r in rows)
    assert torch.backends.cudnn.benchmark is False  # restored
    with pytest.raises(ValueError, match="unknown layouts"):
        tp.conv_step_times(2, 4, [6], layouts=["NHWC"])


def test_conv_step_times_runs_in_a_fresh_process_with_this_thread_count():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        rows = tp.conv_step_times(2, 4, [6], torch.bfloat16, layouts=["NCHW"], repeats=1)
    finally:
        torch.set_num_threads(threads)
    assert [(r["image side"], r["layout"]) for r in rows] == [(6, "NCHW")]


# --- on a GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_small_products_are_timed_from_a_cuda_graph_not_by_the_launch_rate():
    product = _gemm._make_product("fp16", 1024, 1024, 1024, "cuda")
    graphed = tp.time_calls(product, "cuda", repeats=5)
    assert graphed.method == "cuda-graph" and graphed.inner > 1
    assert graphed.median * graphed.inner >= 0.009  # at least about 10 ms of work per sample
    one_at_a_time = bench.time_fn(product, repeats=20, warmup=3, device="cuda")
    assert graphed.median < one_at_a_time.median  # the synchronised call pays the launch


@pytest.mark.gpu
def test_eager_back_to_back_timing_is_the_fallback():
    product = _gemm._make_product("fp16", 512, 512, 512, "cuda:0")
    timing = tp.time_calls(product, "cuda:0", repeats=3, graph=False)
    assert timing.method == "cuda-events" and timing.note == "graph capture turned off"


@pytest.mark.gpu
def test_gemm_sweep_on_a_gpu_restores_tf32():
    before = tp.tf32_settings()
    rows = tp.gemm_sweep([256], "cuda", repeats=2, min_sample_s=0.002)
    assert tp.tf32_settings() == before
    measured = {r["precision"] for r in rows if "tflops" in r}
    assert {"fp32", "fp16"} <= measured
    assert all(r["timing"]["method"] == "cuda-graph" for r in rows if "timing" in r)


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_measure_training_on_a_gpu_reports_peak_memory(device):
    row = tp.measure_training(
        _tiny_cnn, "amp-fp16", 8, 16, 10, device, steps=2, warmup=1, channels_last=True
    )
    assert row["peak_memory_gib"] > 0 and math.isfinite(row["final_loss"])
