import argparse
import json
import sys
import types
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
    with pytest.raises(ValueError, match=r"repeats must be in \[1, inf\], got 0"):
        bench.time_fn(lambda: None, repeats=0)
    with pytest.raises(ValueError, match=r"warmup must be in \[0, inf\], got -1"):
        bench.time_fn(lambda: None, warmup=-1)
    with pytest.raises(TypeError, match="repeats must be an int, got 2.5"):
        bench.time_fn(lambda: None, repeats=2.5)


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


# --- device sync without importing a framework ------------------------------------------------


def test_cuda_timing_needs_the_caller_to_import_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as if PyTorch were not imported
    bench.time_fn(lambda: None, repeats=1, device="cpu")
    with pytest.raises(RuntimeError, match="imported by the caller"):
        bench.time_fn(lambda: None, repeats=1, device="cuda:0")


def test_cuda_sync_goes_through_the_torch_the_caller_imported(monkeypatch):
    synced = []
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=synced.append))
    monkeypatch.setitem(sys.modules, "torch", fake)
    bench.time_fn(lambda: None, repeats=2, warmup=1, device="cuda:1")
    assert synced == ["cuda:1"] * 3  # after the warm-up, then after each timed call


# --- targets ----------------------------------------------------------------------------------


def test_the_targets_are_stated_in_the_package():
    wanted = {(t.key, t.stated_for): (t.op, t.threshold) for t in bench.TARGETS}
    assert wanted[("gemm_fp16_tflops", "H100")] == (">=", 700)
    assert wanted[("gemm_fp16_vs_fp32_strict", "H100")] == (">=", 12)
    assert wanted[("gemm_fp16_vs_tf32", "H100")] == (">=", 1.8)
    assert wanted[("resnet50_amp_fp16_vs_fp32_strict", "H100")] == (">=", 3)
    assert wanted[("resnet50_amp_fp16_vs_tf32", "H100")] == (">=", 1.5)
    assert wanted[("resnet50_amp_fp16_images_per_s", "H100")] == (">=", 3000)
    assert wanted[("resnet50_amp_fp16_memory_vs_fp32", "H100")] == ("<=", 0.6)
    assert wanted[("scaler_step_time_ratio", "GPU")] == ("<=", 1.02)
    assert wanted[("scaler_step_time_ratio", "CPU")] == ("<=", 1.1)
    assert wanted[("scaler_host_syncs_per_step", "GPU")] == ("<=", 1)
    table = bench.targets_table()
    assert len(table) == len(bench.TARGETS) and table[0]["target"] == ">= 700 TFLOP/s"
    markdown = bench.targets_markdown().splitlines()
    assert len(markdown) == 2 + len(bench.TARGETS)
    assert "| FP16 / strict FP32 GEMM throughput at 8192^3 | >= 12x | H100 |" in markdown[3]


def _record(tmp_path, name, data, device="cuda"):
    gpus = (
        [{"name": "NVIDIA H100 80GB HBM3", "architecture": "Hopper", "compute_capability": [9, 0]}]
        if device == "cuda"
        else []
    )
    record = {
        "name": name,
        "date": "2026-01-01T00:00:00+0000",
        "command": "python x.py",
        "git_commit": "0123456789abcdef",
        "hardware": {"gpus": gpus, "device": device, "cpu": "some CPU", "cpu_count": 2},
        "data": {"device": device, **data},
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(record))
    return path


def _gemm_rows(fp16, fp32, tf32):
    return [
        {"precision": p, "m": 8192, "n": 8192, "k": 8192, "tflops": v}
        for p, v in (("fp16", fp16), ("fp32-strict", fp32), ("tf32", tf32))
    ]


def _resnet_rows(channels_last):
    speed = {"fp32-strict": 500, "tf32": 1000, "amp-fp16": 2000, "amp-bf16": 1900}
    memory = {"fp32-strict": 40, "tf32": 40, "amp-fp16": 22, "amp-bf16": 26}
    return [
        {
            "mode": m,
            "channels_last": channels_last,
            "images_per_s": speed[m] * (1.5 if channels_last else 1),
            "peak_memory_gib": memory[m],
        }
        for m in speed
    ]


def test_records_are_held_against_the_targets(tmp_path):
    _record(tmp_path, "gemm_sweep-cuda-H100", {"rows": _gemm_rows(750, 50, 500)})
    _record(
        tmp_path,
        "resnet50_amp-cuda-H100",
        {"model": "resnet50", "rows": _resnet_rows(False) + _resnet_rows(True)},
    )
    _record(tmp_path, "resnet50_amp-cuda-tiny", {"model": "tiny", "rows": _resnet_rows(True)})
    _record(tmp_path, "scaler_overhead-cpu-mlp", {"iteration_ratio": 1.05}, device="cpu")
    _record(tmp_path, "scaler_overhead-smoke-cuda", {"smoke": True, "iteration_ratio": 9.0})
    records = bench.find_records(results_dir=tmp_path)
    assert [p.name for p, _ in records] == [
        "gemm_sweep-cuda-H100.json",
        "resnet50_amp-cuda-H100.json",
        "resnet50_amp-cuda-tiny.json",
        "scaler_overhead-cpu-mlp.json",
    ]
    assert len(bench.find_records("resnet50_amp", "cuda", tmp_path)) == 2
    assert len(bench.find_records(device="cpu", results_dir=tmp_path)) == 1
    rows = {
        (r["target"], r["stated for"], r.get("record")): r
        for r in bench.check_targets(records).to_dicts()
    }
    gemm = "gemm_sweep-cuda-H100.json"
    assert rows[("FP16 GEMM 8192^3 throughput", "H100", gemm)]["met"] is True
    ratio = rows[("FP16 / strict FP32 GEMM throughput at 8192^3", "H100", gemm)]
    assert ratio["recorded"] == 15.0 and ratio["met"] is True
    assert rows[("FP16 / TF32 GEMM throughput at 8192^3", "H100", gemm)]["met"] is False
    resnet = "resnet50_amp-cuda-H100.json"
    amp = rows[("ResNet50 training images/s, AMP FP16 / strict FP32 (TF32 off)", "H100", resnet)]
    assert amp["recorded"] == 4.0 and amp["met"] is True  # compared in channels_last
    speed = rows[("ResNet50 training images/s, AMP FP16, channels_last", "H100", resnet)]
    assert speed["recorded"] == 3000.0 and speed["met"] is True
    memory = rows[("ResNet50 peak memory of the same step, AMP BF16 / strict FP32", "H100", resnet)]
    assert memory["recorded"] == 0.65 and memory["met"] is False
    assert not any(r.get("record") == "resnet50_amp-cuda-tiny.json" for r in rows.values())
    scaler = "training step time, mptutor FP32 master weights + loss scaler / torch.amp.GradScaler"
    assert rows[(scaler, "CPU", "scaler_overhead-cpu-mlp.json")]["met"] is True
    assert rows[(scaler, "GPU", None)]["recorded"] == "no record"  # the smoke record is not one
    only = bench.check_targets(
        bench.find_records("gemm_sweep", results_dir=tmp_path), every_target=False
    )
    assert len(only) == 3


def test_a_record_without_the_size_says_so(tmp_path):
    _record(
        tmp_path, "gemm_sweep-cuda-x", {"rows": [{"precision": "fp16", "m": 4096, "tflops": 600.0}]}
    )
    table = bench.check_targets(bench.find_records(results_dir=tmp_path), every_target=False)
    assert {r["recorded"] for r in table.to_dicts()} == {"not in record"}


def test_provenance_of_a_record(tmp_path):
    path = _record(tmp_path, "gemm_sweep-cuda-H100", {"rows": [], "torch": "2.11.0+cu130"})
    row = bench.provenance(path, bench.load_result(path))
    assert row["device"] == "NVIDIA H100 80GB HBM3 (Hopper, sm_90)"
    assert row["torch"] == "2.11.0+cu130" and row["git commit"] == "0123456789"
    assert row["record"] == path.name and row["command"] == "python x.py"
    assert bench.record_kind(bench.load_result(path)) == "gemm_sweep"


def test_record_options_are_the_same_in_every_script():
    parser = argparse.ArgumentParser()
    bench.add_record_options(parser, smoke_help="tiny")
    assert vars(parser.parse_args([])) == {"smoke": False, "save": False, "out_dir": None}
    args = parser.parse_args(["--smoke", "--save", "--out-dir", "x"])
    assert (args.smoke, args.save, args.out_dir) == (True, True, "x")
