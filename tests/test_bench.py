"""mptutor.bench: timing a function, and reading measurement records (framework-free)."""

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


# --- reading records --------------------------------------------------------------------------


def write_record(folder, name, data, device="cuda", gpu="NVIDIA H100 80GB HBM3", **extra):
    """A record as the benchmarks write it, made on an H100 (or a CPU)."""
    gpus = (
        [{"name": gpu, "architecture": "Hopper", "compute_capability": [9, 0]}]
        if device == "cuda"
        else []
    )
    record = {
        "name": name,
        "date": "2026-01-31T12:00:00+0000",
        "command": "python benchmarks/x.py --out DIR",
        "git_commit": "0123456789abcdef",
        "hardware": {"gpus": gpus, "device": device, "cpu": "some CPU", "cpu_count": 2},
        "data": {"device": device, **data},
        **extra,
    }
    path = Path(folder) / f"{name}.json"
    path.write_text(json.dumps(record))
    return path


def test_find_records_by_kind_device_and_smoke(tmp_path):
    write_record(tmp_path, "gemm_sweep-cuda-H100", {"rows": []})
    write_record(tmp_path, "resnet50_amp-cuda-H100", {"rows": []})
    write_record(tmp_path, "scaler_overhead-cpu-mlp", {}, device="cpu")
    write_record(tmp_path, "scaler_overhead-smoke-cuda", {"smoke": True})
    names = [p.name for p, _ in bench.find_records(results_dir=tmp_path)]
    assert names == [
        "gemm_sweep-cuda-H100.json",
        "resnet50_amp-cuda-H100.json",
        "scaler_overhead-cpu-mlp.json",
    ]
    assert len(bench.find_records(results_dir=tmp_path, include_smoke=True)) == 4
    assert len(bench.find_records("resnet50_amp", "cuda", tmp_path)) == 1
    assert [p.name for p, _ in bench.find_records(device="cpu", results_dir=tmp_path)] == [
        "scaler_overhead-cpu-mlp.json"
    ]
    record = bench._read_record(tmp_path / "gemm_sweep-cuda-H100.json")
    assert bench._record_kind(record) == "gemm_sweep" and bench._record_device(record) == "cuda"


def test_provenance_and_label_of_a_record(tmp_path):
    path = write_record(tmp_path, "gemm_sweep-cuda-H100", {"rows": [], "torch": "2.11.0+cu130"})
    record = bench._read_record(path)
    row = bench.provenance(path, record)
    assert row["device"] == "NVIDIA H100 80GB HBM3 (Hopper, sm_90)"
    assert row["torch"] == "2.11.0+cu130" and row["git commit"] == "0123456789"
    assert row["record"] == path.name and row["command"] == "python benchmarks/x.py --out DIR"
    assert bench.label(record) == "RECORDED 2026-01-31 on NVIDIA H100 80GB HBM3 (Hopper, sm_90)"
    cpu = bench._read_record(write_record(tmp_path, "x-cpu", {}, device="cpu"))
    assert bench.label(cpu) == "RECORDED 2026-01-31 on CPU: some CPU, 2 cores"


def test_a_missing_record_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no measurement record at .*missing.json"):
        bench._read_record(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"name": "x", "date": ', "is not valid JSON"),  # a record cut off while written
        ("\xff\xfe", "is not valid JSON"),
        ("42", "holds a JSON int, not a measurement record"),
        ("null", "holds a JSON NoneType, not a measurement record"),
        ('["name"]', "holds a JSON list, not a measurement record"),
        ("{}", r"missing \['name', 'date', 'command', 'hardware', 'data'\]"),
        (
            '{"name": "x", "date": "d", "command": "c", "hardware": {}, "data": 3}',
            "'data' must be a JSON object",
        ),
    ],
)
def test_a_bad_record_is_refused_with_its_path(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=message) as caught:
        bench._read_record(path)
    assert str(path) in str(caught.value)
    with pytest.raises(ValueError, match="bad.json"):  # a folder with it says which file
        bench.find_records(results_dir=tmp_path)


def test_committed_records_have_provenance():
    for path in sorted((ROOT / "data" / "results").glob("*.json")):
        record = bench._read_record(path)
        assert record["command"] and record["date"] and record["hardware"]["packages"], path


# --- the boundary: misspelt devices, records that the readers could not read -------------------


@pytest.mark.parametrize(
    "device",
    ["gpu", "cuda0", "mps", "CUDA", "cuda:", "cuda:x", "", None, 0],
    ids=lambda d: f"device={d!r}",  # an id of "gpu" would mark the test as needing one
)
def test_time_fn_refuses_a_device_it_would_not_wait_for(device):
    calls = []
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda' or 'cuda:N'"):
        bench.time_fn(lambda: calls.append(1), repeats=1, device=device)
    assert calls == []  # refused before the first call


def test_time_fn_refuses_what_it_cannot_call():
    with pytest.raises(TypeError, match="fn must be a callable taking no arguments, got 3"):
        bench.time_fn(3)


def test_find_records_reads_cuda_n_as_cuda_and_refuses_other_devices(tmp_path):
    write_record(tmp_path, "gemm_sweep-cuda-H100", {"rows": []}, device="cuda:0")
    write_record(tmp_path, "scaler_overhead-cpu-mlp", {}, device="cpu")
    for device in ("cuda", "cuda:0", "cuda:3"):
        found = bench.find_records(device=device, results_dir=tmp_path)
        assert [p.name for p, _ in found] == ["gemm_sweep-cuda-H100.json"], device
    for device in ("gpu", "cuda0", "mps"):
        with pytest.raises(ValueError, match=f"device must be 'cpu', 'cuda' or 'cuda:N'.*{device}"):
            bench.find_records(device=device, results_dir=tmp_path)
    with pytest.raises(TypeError, match="kind must be a benchmark's name"):
        bench.find_records(kind=3, results_dir=tmp_path)
    with pytest.raises(NotADirectoryError, match="nowhere is not a folder"):
        bench.find_records(results_dir=tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("hardware", "message"),
    [
        ({"gpus": "NVIDIA H100"}, r"hardware\['gpus'\] must be a list of JSON objects"),
        ({"gpus": ["NVIDIA H100"]}, r"hardware\['gpus'\] must be a list of JSON objects"),
        (
            {"gpus": [{"name": "H100", "compute_capability": 90}]},
            r"must be a pair \[major, minor\]",
        ),
        ({"gpus": [{"compute_capability": [9, 0, 1]}]}, r"must be a pair \[major, minor\]"),
        ({"packages": ["torch"]}, r"hardware\['packages'\] must be a JSON object"),
        ({"device": "gpu"}, r"hardware\['device'\] must be 'cpu', 'cuda' or 'cuda:N'"),
    ],
)
def test_a_record_the_readers_cannot_read_is_refused_by_name(tmp_path, hardware, message):
    path = write_record(tmp_path, "gemm_sweep-cuda-H100", {"rows": []})
    record = json.loads(path.read_text())
    record["hardware"] |= hardware
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=message) as caught:
        bench.find_records(results_dir=tmp_path)
    assert "gemm_sweep-cuda-H100.json" in str(caught.value)
    with pytest.raises(ValueError, match=message):  # and a record handed over directly
        bench.label(record)
    with pytest.raises(ValueError, match=message):
        bench.provenance(path, record)


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", 3), ("date", None), ("command", ["python"]), ("git_commit", 12345)],
)
def test_a_record_with_a_field_of_the_wrong_type_is_refused_by_name(tmp_path, field, value):
    path = write_record(tmp_path, "gemm_sweep-cuda-H100", {"rows": []})
    path.write_text(json.dumps(json.loads(path.read_text()) | {field: value}))
    with pytest.raises(ValueError, match=f"'{field}' must be a string"):
        bench.find_records(results_dir=tmp_path)


@pytest.mark.parametrize("record", [None, [], "x", {"name": "x"}])
def test_label_and_provenance_refuse_what_is_not_a_record(record):
    with pytest.raises(ValueError, match="record"):
        bench.label(record)
    with pytest.raises(ValueError, match="record"):
        bench.provenance("x.json", record)
