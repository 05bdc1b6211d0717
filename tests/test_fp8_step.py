"""benchmarks/fp8_step.py run tiny (--smoke) on the CPU: the record it writes, and where."""

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from mptutor import bench  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _script():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "bench_fp8_step", ROOT / "benchmarks" / "fp8_step.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_smoke_run_writes_a_record_into_the_folder_given(tmp_path, capsys):
    before = sorted(bench._RESULTS.glob("*.json"))
    _script().main(["--smoke", "--out", str(tmp_path / "out"), "--commit", "abc123"])
    out = capsys.readouterr().out
    assert "FP8 speed-up" in out and "no target applies" in out
    (path,) = (tmp_path / "out").glob("*.json")
    assert path.name == "fp8_step-smoke-cpu.json"
    assert sorted(bench._RESULTS.glob("*.json")) == before  # nothing into data/results
    record = bench._read_record(path)
    assert record["git_commit"] == "abc123" and record["command"].startswith("python")
    assert record["hardware"]["packages"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    data = record["data"]
    assert data["smoke"] and data["device"] == "cpu" and data["torch"] == torch.__version__
    rows = data["rows"]
    assert [(r["variant"], r["width"], r["compiled"]) for r in rows] == [
        ("bf16", 32, False),
        ("fp8", 32, False),
    ]
    assert all(len(r["times_s"]) == 2 and r["median_s"] > 0 for r in rows)
    assert rows[1]["speedup_vs_bf16"] == pytest.approx(rows[0]["median_s"] / rows[1]["median_s"])
    assert data["best_speedup_fp8_vs_bf16"] == rows[1]["speedup_vs_bf16"]
    assert data["fast_accum_forward"] is True and data["history_len"] == 16
    assert all(all(map(torch.isfinite, map(torch.tensor, r["warmup_losses"]))) for r in rows)


def test_without_out_nothing_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _script().main(["--smoke", "--widths", "16", "--iters", "1"])
    assert "saved" not in capsys.readouterr().out and not list(tmp_path.iterdir())


@pytest.mark.gpu
# torch.compile's own internals warn (torch 2.11 on the GPU host, 2.13 here), as in
# test_torch_fp8.py's compiled test; the warnings are not about this code
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:<class 'torch.autograd.function.Function'> should not be")
def test_smoke_run_on_a_gpu_takes_the_cuda_path(tmp_path):
    _script().main(["--smoke", "--device", "cuda", "--widths", "64", "--out", str(tmp_path)])
    (path,) = tmp_path.glob("*.json")
    data = bench._read_record(path)["data"]
    assert data["device"].startswith("cuda") and data["gpu"]
    assert {r["compiled"] for r in data["rows"]} == {False, True}  # both, by default on a GPU
