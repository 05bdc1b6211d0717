import json
import subprocess
import sys
from pathlib import Path

import pytest

from mptutor import bench

ROOT = Path(__file__).resolve().parents[1]


def test_time_fn_counts_calls_and_reports_median():
    calls = []
    timing = bench.time_fn(lambda: calls.append(1), repeats=5, warmup=2)
    assert len(calls) == 7 and len(timing.times) == 5 and timing.warmup == 2
    assert min(timing.times) <= timing.median <= max(timing.times)
    assert timing.as_dict()["median_s"] == timing.median
    with pytest.raises(ValueError, match="repeats"):
        bench.time_fn(lambda: None, repeats=0)


def test_save_and_load_a_record(tmp_path):
    path = bench.save_result("demo-cpu", {"times": [0.1, 0.2]}, command="demo", out_dir=tmp_path)
    record = bench.load_result(path)
    assert record["data"] == {"times": [0.1, 0.2]}
    assert record["command"] == "demo" and record["hardware"]["cpu"]
    assert json.loads(path.read_text())["name"] == "demo-cpu"
    assert [p.name for p in tmp_path.iterdir()] == ["demo-cpu.json"]


def test_default_command_names_no_machine_path(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", [str(ROOT / "benchmarks" / "x.py"), "--save"])
    record = bench.load_result(bench.save_result("cmd", {}, out_dir=tmp_path))
    assert record["command"] == "python benchmarks/x.py --save"


def test_bad_records(tmp_path):
    with pytest.raises(ValueError, match="letters, digits"):
        bench.save_result("../escape", {}, out_dir=tmp_path)
    with pytest.raises(TypeError):
        bench.save_result("bad", {"x": object()}, out_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing half-written
    with pytest.raises(FileNotFoundError, match="no measurement record"):
        bench.load_result(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="not a measurement record"):
        bench.load_result(tmp_path / "other.json")


def test_committed_records_have_provenance():
    for path in sorted((ROOT / "data" / "results").glob("*.json")):
        record = bench.load_result(path)
        assert record["command"] and record["date"] and record["hardware"]["packages"], path


def test_scaler_overhead_benchmark_runs(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scaler_overhead.py"),
            "--device",
            "cpu",
            "--batch",
            "8",
            "--rounds",
            "1",
            "--iters",
            "2",
            "--warmup",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "ratio mptutor/torch: iteration" in out


def _run(*args):
    return subprocess.run(
        [sys.executable, *map(str, args)], capture_output=True, text=True, check=True
    ).stdout


def test_gemm_sweep_runs_and_skips_gpu_formats_on_cpu():
    out = _run(
        ROOT / "benchmarks" / "gemm_sweep.py",
        "--device",
        "cpu",
        "--sizes",
        "64",
        "--repeats",
        "1",
        "--inner",
        "1",
    )
    assert "fp16 / fp32-strict at 64^3" in out
    assert "TF32 and FP8 are GPU formats" in out


def test_resnet50_benchmark_smoke_run():
    out = _run(
        ROOT / "benchmarks" / "resnet50_amp.py",
        "--device",
        "cpu",
        "--model",
        "tiny",
        "--batch",
        "2",
        "--image-size",
        "16",
        "--steps",
        "1",
        "--warmup",
        "1",
    )
    assert "amp-fp16" in out and "speedup vs strict FP32" in out


def test_keras_cnn_experiment_smoke_run():
    out = _run(ROOT / "benchmarks" / "keras_cnn_experiment.py", "--batch-sizes", "8",
               "--image-size", "8", "--steps", "1", "--warmup", "1")
    assert "mixed_float16" in out and "float32" in out
