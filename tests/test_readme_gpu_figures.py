"""The README's column of GPU figures says what the committed records in data/results/ hold."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "data" / "results"
COLUMN = "NVIDIA H200, 2026-11-27"


def _data(name):
    path = RESULTS / f"{name}.json"
    if not path.exists():
        pytest.fail(f"the README quotes {path.name}, which is not committed")
    return json.loads(path.read_text(encoding="utf-8"))["data"]


def _column():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    header = next(line for line in readme.splitlines() if line.startswith("| what | target |"))
    assert header.rstrip().endswith(f"| {COLUMN} |"), header
    rows = re.findall(r"^\| (.+?) \| (.+?) \| (\S+) \| .+? \| (.+) \|$", readme, re.M)
    return {(what, stated): cell for what, _, stated, cell in rows}


def test_the_h200_column_quotes_the_records():
    cells = _column()
    gemm = _data("gemm_sweep-cuda-NVIDIA_H200")
    fp16 = next(r["tflops"] for r in gemm["rows"]
                if r["precision"] == "fp16" and r["m"] == r["n"] == r["k"] == 8192)
    ratios = gemm["ratios_at_largest"]
    record = _data("resnet50_amp-cuda-NVIDIA_H200")
    resnet = {(r["mode"], r["channels_last"]): r for r in record["rows"]}
    best = {r["mode"]: r for r in record["best_layouts"]}
    scaler = _data("scaler_overhead-cuda-NVIDIA_H200-resnet50")
    cpu = _data("scaler_overhead-cpu-mlp")
    fp8 = _data("fp8_step-cuda-NVIDIA_H200")
    expected = {
        ("FP16 GEMM 8192^3 throughput", "H100"): f"{fp16:.4g} TFLOP/s",
        ("FP16 / strict FP32 GEMM throughput at 8192^3", "H100"): f"{ratios['fp16/fp32']:.2f}x",
        ("FP16 / TF32 GEMM throughput at 8192^3", "H100"): f"{ratios['fp16/tf32']:.3f}x",
        ("ResNet50 training images/s, AMP FP16 / strict FP32 (TF32 off), each at its best layout",
         "H100"): f"{best['amp_fp16']['speedup_vs_fp32']:.2f}x (AMP FP16 "
                  f"{best['amp_fp16']['images_per_s']:.0f}, strict FP32 "
                  f"{best['fp32']['images_per_s']:.0f} images/s",
        ("ResNet50 training images/s, AMP BF16 / strict FP32 (TF32 off), each at its best layout",
         "H100"): f"{best['amp_bf16']['speedup_vs_fp32']:.2f}x (AMP BF16 "
                  f"{best['amp_bf16']['images_per_s']:.0f} images/s",
        ("ResNet50 training images/s, AMP FP16 / TF32, each at its best layout", "H100"):
            f"{best['amp_fp16']['speedup_vs_tf32']:.2f}x (TF32 {best['tf32']['images_per_s']:.0f}",
        ("ResNet50 training images/s, AMP BF16 / TF32, each at its best layout", "H100"):
            f"{best['amp_bf16']['speedup_vs_tf32']:.2f}x",
        ("ResNet50 training images/s, AMP FP16, channels_last", "H100"):
            f"{resnet['amp_fp16', True]['images_per_s']:.0f} images/s",
        ("ResNet50 peak memory, AMP FP16 / strict FP32, each at its best layout", "H100"):
            f"{best['amp_fp16']['memory_vs_fp32']:.3f}x ({best['amp_fp16']['peak_memory_gib']:.1f} "
            f"of {best['fp32']['peak_memory_gib']:.1f} GiB",
        ("ResNet50 peak memory, AMP BF16 / strict FP32, each at its best layout", "H100"):
            f"{best['amp_bf16']['memory_vs_fp32']:.3f}x",
        ("training step time, mptutor FP32 master weights + loss scaler / torch.amp.GradScaler",
         "GPU"): f"{scaler['iteration_ratio']:.3f}x, met",
        ("training step time, mptutor FP32 master weights + loss scaler / torch.amp.GradScaler",
         "CPU"): f"{cpu['iteration_ratio']:.3f}x",
        ("host syncs per training step, mptutor FP32 master weights + loss scaler", "GPU"):
            f"{scaler['host_syncs_per_step']['mptutor']}, met",
        ("transformer training step, FP8 linear layers (delayed scaling) / BF16 autocast, "
         "speed-up at the best recorded width", "H100"):
            f"{fp8['best_speedup_fp8_vs_bf16']:.3f}x, slower than BF16",
    }  # fmt: skip
    for key, text in expected.items():
        assert text in cells[key], (key, text, cells[key])
    # the optimizer part's ratio, and the layouts: the record has channels_last runs only,
    # so every "best layout" cell says so
    gpu_step = ("training step time, mptutor FP32 master weights + loss scaler / "
                "torch.amp.GradScaler", "GPU")
    assert f"the optimizer part took {scaler['step_ratio']:.2f}x" in cells[gpu_step]
    # the first window's scaler record, kept beside its logs (data/results/ holds the second's)
    first = RESULTS / "logs" / "2026-11-27-h200-window1"
    window1 = json.loads(next(first.glob("scaler_overhead-cuda-*.json")).read_text("utf-8"))["data"]
    assert window1["iteration_ratio"] > 1.02
    assert (f"`data/results/logs/{first.name}/`: {window1['iteration_ratio']:.3f}x, not met, and "
            f"{window1['step_ratio']:.2f}x" in cells[gpu_step]), cells[gpu_step]
    assert scaler["iteration_ratio"] <= 1.02
    assert all(channels_last for _, channels_last in resnet)
    assert all("channels_last only" in cells[key] for key in cells if "best layout" in key[0])
