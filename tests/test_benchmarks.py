"""The benchmark scripts and benchmarks/record-gpu.sh, run tiny (--smoke) on a CPU.

The scripts are loaded as modules and their ``main`` is called in this process (with warnings
as errors), so that a smoke run costs no PyTorch start-up. On a GPU the tests marked ``gpu`` run
the same scripts on the CUDA path.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from mptutor import bench

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "record-gpu.sh"


def _script(name):
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", ROOT / "benchmarks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _only_record(folder):
    records = bench.find_records(results_dir=folder, include_smoke=True)
    assert len(records) == 1, records
    return records[0]


def test_gemm_sweep_smoke_run_writes_a_record(tmp_path, capsys):
    _script("gemm_sweep").main(["--smoke", "--save", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "tf32 is measured on CUDA GPUs only" in out and "wall-clock" in out
    path, record = _only_record(tmp_path)
    assert path.name == "gemm_sweep-smoke-cpu.json"
    data = record["data"]
    assert data["smoke"] and data["device"] == "cpu" and data["torch"] == torch.__version__
    assert set(data["timing_methods"]) == {"wall-clock"}
    measured = [r for r in data["rows"] if "tflops" in r]
    assert {r["precision"] for r in measured} == {"fp32-strict", "fp16", "bf16"}
    assert {r["m"] for r in data["rows"]} == {32, 31}
    assert all(len(r["timing"]["times_s"]) == data["repeats"] for r in measured)
    assert record["command"].startswith("python") and record["hardware"]["packages"]["torch"]
    assert not bench.find_records(results_dir=tmp_path)  # smoke records are left out


def test_resnet50_benchmark_smoke_run_writes_a_record(tmp_path, capsys):
    _script("resnet50_amp").main(["--smoke", "--save", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "not measured: tf32" in out and "no target applies" in out
    _, record = _only_record(tmp_path)
    rows = record["data"]["rows"]
    assert [(r["mode"], r["channels_last"]) for r in rows] == [
        (mode, layout)
        for layout in (False, True)
        for mode in ("fp32-strict", "amp-fp16", "amp-bf16")
    ]
    assert all(r["peak_memory_gib"] is None and r["times_s"] for r in rows)
    assert all("speedup_vs_fp32_strict" in r for r in rows if r["mode"] != "fp32-strict")


def test_scaler_benchmark_smoke_run_keeps_master_and_model_strides_equal(tmp_path, capsys):
    _script("scaler_overhead").main(["--smoke", "--save", "--out-dir", str(tmp_path)])
    assert "master strides match: True" in capsys.readouterr().out
    path, record = _only_record(tmp_path)
    data = record["data"]
    assert path.name == "scaler_overhead-smoke-cpu-tiny_cnn.json"
    assert data["channels_last"] and data["master_strides_match"]
    assert data["iteration_ratio"] > 0 and len(data["iteration_s"]["mptutor"]) == 2
    assert "host_syncs_per_step" not in data  # counted on a GPU only


def test_scaler_benchmark_refuses_channels_last_for_an_mlp():
    with pytest.raises(SystemExit):
        _script("scaler_overhead").main(["--model", "mlp", "--channels-last"])


def _record_gpu(*args, env=None):
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable, **(env or {})},
        timeout=300,
    )


def test_record_gpu_script_is_strict_bash():
    text = SCRIPT.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert 'PYTHON="${PYTHON:-python3}"' in text
    done = _record_gpu("--no-such-option")
    assert done.returncode == 2 and "unknown option" in done.stderr
    assert "--smoke" in _record_gpu("--help").stdout


@pytest.mark.slow
def test_record_gpu_smoke_run_covers_every_benchmark(tmp_path):
    done = _record_gpu("--smoke", "--out-dir", str(tmp_path))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    names = sorted(p.name for p, _ in bench.find_records(results_dir=tmp_path, include_smoke=True))
    assert names == [
        "gemm_sweep-smoke-cpu.json",
        "resnet50_amp-smoke-cpu.json",
        "scaler_overhead-smoke-cpu-tiny_cnn.json",
    ]
    assert "4/6 records of this run against the targets" in done.stdout


def test_record_gpu_needs_a_gpu_without_smoke(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = _record_gpu("--out-dir", str(tmp_path))
    assert done.returncode != 0 and "no CUDA GPU" in done.stderr
    assert not list(tmp_path.iterdir())


# --- on a GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gemm_sweep_on_a_gpu_times_with_cuda_graphs(tmp_path):
    _script("gemm_sweep").main(
        ["--smoke", "--device", "cuda", "--sizes", "256", "--save", "--out-dir", str(tmp_path)]
    )
    _, record = _only_record(tmp_path)
    assert set(record["data"]["timing_methods"]) == {"cuda-graph"}
    assert record["data"]["gpu"] and record["hardware"]["gpus"]


@pytest.mark.gpu
def test_resnet50_benchmark_takes_the_cuda_path_for_an_indexed_device(tmp_path):
    _script("resnet50_amp").main(
        ["--smoke", "--device", "cuda:0", "--save", "--out-dir", str(tmp_path)]
    )
    _, record = _only_record(tmp_path)
    rows = record["data"]["rows"]
    assert all(r["peak_memory_gib"] > 0 for r in rows)  # memory stats: the CUDA path ran
    if torch.cuda.get_device_capability() >= (8, 0):
        assert "tf32" in {r["mode"] for r in rows}


@pytest.mark.gpu
def test_scaler_benchmark_on_a_gpu_counts_host_syncs(tmp_path):
    _script("scaler_overhead").main(
        ["--smoke", "--device", "cuda:0", "--save", "--out-dir", str(tmp_path)]
    )
    _, record = _only_record(tmp_path)
    data = record["data"]
    assert data["master_strides_match"]
    assert data["host_syncs_per_iteration"]["mptutor"] <= 1
    assert data["host_syncs_per_step"]["torch"] >= 1  # GradScaler reads its inf flag too
