"""benchmarks/: the records they write, the targets, the scripts run tiny, and the GPU plan.

``records.py`` and ``targets.py`` are framework-free and imported here as the scripts import
them. The scripts are loaded as modules and their ``main`` is called in this process (with
warnings as errors), so that a smoke run costs no PyTorch start-up; on a GPU the tests marked
``gpu`` run the same scripts on the CUDA path. ``gpu-plan.sh`` is run as bash.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_bench import write_record

from mptutor import bench

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "benchmarks" / "gpu-plan.sh"
sys.path.insert(0, str(ROOT / "benchmarks"))

import records  # noqa: E402
import targets  # noqa: E402


def load_script(name):
    """A benchmark script of benchmarks/ as a module, to call its main() (skips without torch)."""
    pytest.importorskip("torch", reason="PyTorch is not installed")
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", ROOT / "benchmarks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _only_record(folder):
    found = bench.find_records(results_dir=folder, include_smoke=True)
    assert len(found) == 1, found
    return found[0]


# --- records.py -------------------------------------------------------------------------------


def test_record_options_are_the_same_in_every_script():
    parser = argparse.ArgumentParser()
    records.add_record_options(parser, smoke_help="tiny")
    assert vars(parser.parse_args([])) == {"smoke": False, "out": None, "commit": None}
    args = parser.parse_args(["--smoke", "--out", "x", "--commit", "abc"])
    assert (args.smoke, args.out, args.commit) == (True, "x", "abc")


def test_a_record_carries_its_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MPTUTOR_COMMIT", "feedc0ffee")
    path = records.save_result("demo-cpu", {"times": [0.1, 0.2]}, tmp_path / "new", command="demo")
    record = bench._read_record(path)
    assert record["data"] == {"times": [0.1, 0.2]} and record["command"] == "demo"
    assert record["git_commit"] == "feedc0ffee" and record["hardware"]["cpu"]
    variables = record["environment"]["variables"]
    assert variables == {k: os.environ[k] for k in records.ENV_VARIABLES if k in os.environ}
    assert variables["NVIDIA_TF32_OVERRIDE"] == "0" and "OMP_NUM_THREADS" not in variables
    assert "NVIDIA_TF32_OVERRIDE" in record["environment"]["variables_checked"]
    assert set(record["environment"]) >= {"packages", "gpu_state_before", "gpu_state_after"}
    assert records.save_result("x", {}, tmp_path, commit_id="given") != path
    assert bench._read_record(tmp_path / "x.json")["git_commit"] == "given"


def test_the_command_names_no_folder_of_the_machine(monkeypatch):
    script = str(records.ROOT / "benchmarks" / "gemm_sweep.py")
    argv = [script, "--budget-s", "32", "--out", "/somewhere/out/first", "--save",
            f"--out={records.ROOT / 'build' / 'r'}", "--label=/a/b/", "rel/dir", "/"]
    monkeypatch.setattr(sys, "argv", argv)
    assert records.this_command() == (
        "python benchmarks/gemm_sweep.py --budget-s 32 --out .../first --save --out=build/r"
        " --label=.../b rel/dir ..."
    )
    monkeypatch.setattr(sys, "argv", ["/elsewhere/tool.py", str(records.ROOT)])
    assert records.this_command() == "python tool.py ."


def test_no_committed_record_names_a_folder_of_the_machine():
    commands = {
        path: json.loads(path.read_text(encoding="utf-8")).get("command", "")
        for path in (records.ROOT / "data" / "results").rglob("*.json")
    }
    assert any(commands.values())
    for path, command in commands.items():
        assert not any(os.path.isabs(a.partition("=")[2] or a) for a in command.split()), path


def test_the_commit_comes_from_the_argument_the_variable_or_git(monkeypatch):
    monkeypatch.setenv("MPTUTOR_COMMIT", "fromenv")
    assert records.commit("given") == "given" and records.commit() == "fromenv"
    monkeypatch.delenv("MPTUTOR_COMMIT")
    monkeypatch.setattr(records, "ROOT", Path("/nonexistent"))  # a copy without .git
    assert records.commit() is None


def test_the_default_command_names_no_machine_path(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", [str(ROOT / "benchmarks" / "x.py"), "--out", "DIR"])
    record = bench._read_record(records.save_result("cmd", {}, tmp_path))
    assert record["command"] == "python benchmarks/x.py --out DIR"


def test_bad_records_are_never_half_written(tmp_path):
    with pytest.raises(ValueError, match="letters, digits"):
        records.save_result("../escape", {}, tmp_path)
    with pytest.raises(TypeError):
        records.save_result("bad", {"x": object()}, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_gpu_state_reads_nvidia_smi_field_by_field(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        '#!/bin/sh\ncase "$1" in\n'
        "  --query-gpu=index) echo 0 ;;\n"
        "  --query-gpu=clocks.sm) echo '1980 MHz' ;;\n"
        "  --query-gpu=power.limit) echo '700.00 W' ;;\n"
        "  *) echo 'Field is not a valid field to query.' >&2; exit 2 ;;\nesac\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert records.gpu_state() == [
        {"index": "0", "clocks.sm": "1980 MHz", "power.limit": "700.00 W"}
    ]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert records.gpu_state() is None


# --- targets.py -------------------------------------------------------------------------------


def test_the_targets_are_stated_in_benchmarks():
    wanted = {(t.key, t.stated_for): (t.op, t.threshold) for t in targets.TARGETS}
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
    table = targets.targets_table()
    assert len(table) == len(targets.TARGETS) and table[0]["target"] == ">= 700 TFLOP/s"
    markdown = targets.targets_markdown().splitlines()
    assert len(markdown) == 2 + len(targets.TARGETS)
    assert "| FP16 / strict FP32 GEMM throughput at 8192^3 | >= 12x | H100 |" in markdown[3]


def _gemm_rows(fp16, fp32, tf32):
    return [
        {"precision": p, "m": 8192, "n": 8192, "k": 8192, "tflops": v}
        for p, v in (("fp16", fp16), ("fp32", fp32), ("tf32", tf32))
    ]


def _resnet_rows():
    # strict FP32 is fastest in NCHW, the AMP modes in channels_last
    speed = {
        ("fp32", False): 600, ("fp32", True): 500, ("tf32", False): 900,
        ("tf32", True): 1000, ("amp_fp16", False): 1500, ("amp_fp16", True): 2400,
        ("amp_bf16", False): 1400, ("amp_bf16", True): 2280,
    }  # fmt: skip
    memory = {"fp32": 40, "tf32": 40, "amp_fp16": 22, "amp_bf16": 26}
    return [
        {"mode": m, "channels_last": cl, "images_per_s": v, "peak_memory_gib": memory[m]}
        for (m, cl), v in speed.items()
    ]


def test_records_are_held_against_the_targets(tmp_path):
    write_record(tmp_path, "gemm_sweep-cuda-H100", {"rows": _gemm_rows(750, 50, 500)})
    write_record(tmp_path, "resnet50_amp-cuda-H100", {"model": "resnet50", "rows": _resnet_rows()})
    write_record(tmp_path, "resnet50_amp-cuda-tiny", {"model": "tiny", "rows": _resnet_rows()})
    write_record(tmp_path, "scaler_overhead-cpu-mlp", {"iteration_ratio": 1.05}, device="cpu")
    write_record(tmp_path, "scaler_overhead-smoke-cuda", {"smoke": True, "iteration_ratio": 9.0})
    found = bench.find_records(results_dir=tmp_path)
    rows = {
        (r["target"], r["stated for"], r.get("record")): r
        for r in targets.check_targets(found).to_dicts()
    }
    gemm = "gemm_sweep-cuda-H100.json"
    assert rows[("FP16 GEMM 8192^3 throughput", "H100", gemm)]["met"] is True
    ratio = rows[("FP16 / strict FP32 GEMM throughput at 8192^3", "H100", gemm)]
    assert ratio["recorded"] == 15.0 and ratio["met"] is True
    assert rows[("FP16 / TF32 GEMM throughput at 8192^3", "H100", gemm)]["met"] is False
    resnet = "resnet50_amp-cuda-H100.json"
    what = "ResNet50 training images/s, AMP FP16 / strict FP32 (TF32 off), each at its best layout"
    amp = rows[(what, "H100", resnet)]
    assert amp["recorded"] == 4.0 and amp["met"] is True  # 2400 (channels_last) / 600 (NCHW)
    speed = rows[("ResNet50 training images/s, AMP FP16, channels_last", "H100", resnet)]
    assert speed["recorded"] == 2400 and speed["met"] is False
    memory = rows[("ResNet50 peak memory, AMP BF16 / strict FP32, each at its best layout", "H100",
                   resnet)]  # fmt: skip
    assert memory["recorded"] == 0.65 and memory["met"] is False
    assert not any(r.get("record") == "resnet50_amp-cuda-tiny.json" for r in rows.values())
    scaler = "training step time, mptutor FP32 master weights + loss scaler / torch.amp.GradScaler"
    assert rows[(scaler, "CPU", "scaler_overhead-cpu-mlp.json")]["met"] is True
    assert rows[(scaler, "GPU", None)]["recorded"] == "no record"  # the smoke record is not one
    only = targets.check_targets(
        bench.find_records("gemm_sweep", results_dir=tmp_path), every_target=False
    )
    assert len(only) == 3


def test_the_fp8_step_target_reads_the_best_speedup(tmp_path):
    rows = [{"variant": "bf16"}, {"variant": "fp8", "speedup_vs_bf16": 1.2},
            {"variant": "fp8", "speedup_vs_bf16": 1.45}]  # fmt: skip
    write_record(tmp_path, "fp8_step-cuda-H100", {"rows": rows})
    table = targets.check_targets(bench.find_records(results_dir=tmp_path), every_target=False)
    (row,) = table.to_dicts()
    assert row["wanted"] == ">= 1.3x" and row["recorded"] == 1.45 and row["met"] is True


def test_h100_targets_are_not_applied_to_another_gpu(tmp_path):
    write_record(tmp_path, "gemm_sweep-cuda-H200", {"rows": _gemm_rows(750, 50, 500)},
                 gpu="NVIDIA H200")  # fmt: skip
    write_record(
        tmp_path, "scaler_overhead-cuda-H200", {"iteration_ratio": 1.01}, gpu="NVIDIA H200"
    )
    found = bench.find_records(results_dir=tmp_path)
    table = targets.check_targets(found, every_target=False).to_dicts()
    assert [(r["stated for"], r["record"]) for r in table] == [
        ("GPU", "scaler_overhead-cuda-H200.json")  # stated for any GPU: step time, host syncs
    ] * 2


def test_a_record_without_the_size_says_so(tmp_path):
    write_record(tmp_path, "gemm_sweep-cuda-x", {"rows": [{"precision": "fp16", "m": 4096}]})
    table = targets.check_targets(bench.find_records(results_dir=tmp_path), every_target=False)
    assert {r["recorded"] for r in table.to_dicts()} == {"not in record"}


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("gemm_sweep-cuda-H100", {"rows": [{"m": 8192, "tflops": 1.0}]},
         r"rows\[0\] lacks \['precision'\]"),
        ("resnet50_amp-cuda-H100", {"model": "resnet50", "rows": [{"mode": "tf32"}]},
         r"lacks \['channels_last', 'images_per_s'\]"),
        ("gemm_sweep-cuda-H100", {"rows": {"precision": "fp16"}}, "'rows' must be a list"),
        ("gemm_sweep-cuda-H100", {"rows": [42]}, r"rows\[0\] must be an object"),
    ],
)  # fmt: skip
def test_a_record_missing_a_field_gets_a_clear_error(tmp_path, name, data, message):
    path = write_record(tmp_path, name, data)
    with pytest.raises(ValueError, match=message) as caught:
        targets.check_targets(bench.find_records(results_dir=tmp_path))
    assert path.name in str(caught.value)


def test_the_targets_command_prints_and_checks(tmp_path, capsys):
    assert targets.main([]) == 0
    assert capsys.readouterr().out.startswith("| what | target | stated for | measured by |")
    write_record(tmp_path, "gemm_sweep-cuda-H200", {"rows": []}, gpu="NVIDIA H200")
    assert targets.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no record" in out and "records no target is stated for: gemm_sweep-cuda-H200" in out


# --- the scripts, tiny, on a CPU --------------------------------------------------------------


def test_gemm_sweep_smoke_run_writes_a_record(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    load_script("gemm_sweep").main(["--smoke", "--out", str(tmp_path), "--commit", "abc"])
    out = capsys.readouterr().out
    assert "tf32 is measured on CUDA GPUs only" in out and "wall-clock" in out
    path, record = _only_record(tmp_path)
    assert path.name == "gemm_sweep-smoke-cpu.json" and record["git_commit"] == "abc"
    data = record["data"]
    assert data["smoke"] and data["device"] == "cpu" and data["torch"] == torch.__version__
    assert set(data["timing_methods"]) == {"wall-clock"}
    assert data["fp8_use_fast_accum"] is False and data["clock_warmup_s"] == 0.0
    measured = [r for r in data["rows"] if "tflops" in r]
    assert {r["precision"] for r in measured} == {"fp32", "fp16", "bf16"}
    assert {r["m"] for r in data["rows"]} == {32, 31}
    assert all(r["input_sets"] == 1 for r in measured)  # a CPU's caches are left as they are
    assert all(len(r["timing"]["times"]) == data["repeats"] for r in measured)
    assert record["command"].startswith("python") and record["hardware"]["packages"]["torch"]
    assert not bench.find_records(results_dir=tmp_path)  # smoke records are left out
    accumulation = data["fp8_accumulation"]  # after the timings; the CPU sums in FP32
    assert [r["K"] for r in accumulation["rows"]] == accumulation["ks"] == [32, 256]
    assert all(r["identical"] for r in accumulation["rows"]) and "FP8 accumulation" in out
    load_script("gemm_sweep").main(["--smoke", "--precisions", "fp32", "--out", str(tmp_path)])
    assert _only_record(tmp_path)[1]["data"]["fp8_accumulation"] is None  # FP8 not asked for


def test_scripts_write_nothing_without_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    load_script("gemm_sweep").main(["--smoke", "--precisions", "fp32"])
    assert "saved" not in capsys.readouterr().out and not list(tmp_path.iterdir())


def test_resnet50_benchmark_compares_each_mode_at_its_best_layout(tmp_path, capsys):
    modes = ["fp32", "tf32", "amp-bf16"]  # any spelling formats.precision reads
    load_script("resnet50_amp").main(["--smoke", "--modes", *modes, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "not measured: tf32" in out and "Each mode at its best layout" in out
    _, record = _only_record(tmp_path)
    data = record["data"]
    assert [(r["mode"], r["channels_last"]) for r in data["rows"]] == [
        (mode, layout) for layout in (True, False) for mode in ("fp32", "amp_bf16")
    ]  # channels_last first: the layout of the images/s target
    assert all(r["peak_memory_gib"] is None and r["times_s"] for r in data["rows"])
    best = {r["mode"]: r for r in data["best_layouts"]}
    for mode, row in best.items():
        fastest = max(
            (r for r in data["rows"] if r["mode"] == mode), key=lambda r: r["images_per_s"]
        )
        assert row["images_per_s"] == fastest["images_per_s"]
    fp32 = best["fp32"]["images_per_s"]
    assert best["amp_bf16"]["speedup_vs_fp32"] == pytest.approx(
        best["amp_bf16"]["images_per_s"] / fp32
    )


def test_scaler_benchmark_smoke_run_keeps_master_and_model_strides_equal(tmp_path, capsys):
    load_script("scaler_overhead").main(["--smoke", "--out", str(tmp_path)])
    assert "master strides match: True" in capsys.readouterr().out
    path, record = _only_record(tmp_path)
    data = record["data"]
    assert path.name == "scaler_overhead-smoke-cpu-tiny_cnn.json"
    assert data["channels_last"] and data["master_strides_match"]
    assert data["iteration_ratio"] > 0 and len(data["iteration_s"]["mptutor"]) == 2
    assert "host_syncs_per_step" not in data  # counted on a GPU only


def _masters(convert_first):
    torch = pytest.importorskip("torch")
    from mptutor import torch as mpt

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.BatchNorm2d(8))
    if convert_first:
        model = model.to(memory_format=torch.channels_last)
    model = mpt.network_to_half(model)
    opt = mpt.MasterWeightOptimizer(lambda p: torch.optim.SGD(p, lr=0.1), model)
    if not convert_first:
        model.to(memory_format=torch.channels_last)
    return load_script("scaler_overhead").stride_mismatches(opt.model_params, opt.master_params)


def test_masters_share_the_layout_only_when_the_model_is_converted_first():
    assert _masters(convert_first=True) == []
    assert _masters(convert_first=False) == [0]  # the conv weight: the benchmark's old bug


def test_stride_mismatches_checks_its_input():
    torch = pytest.importorskip("torch")
    stride_mismatches = load_script("scaler_overhead").stride_mismatches
    with pytest.raises(ValueError, match="2 tensors against 1"):
        stride_mismatches([torch.zeros(1), torch.zeros(1)], [torch.zeros(1)])
    with pytest.raises(ValueError, match="differs in shape"):
        stride_mismatches([torch.zeros(2)], [torch.zeros(3)])


def test_scaler_benchmark_refuses_channels_last_for_an_mlp():
    with pytest.raises(SystemExit):
        load_script("scaler_overhead").main(["--model", "mlp", "--channels-last"])


# --- the GPU plan -----------------------------------------------------------------------------


def _plan(*args, env=None):
    return subprocess.run(
        ["bash", str(PLAN), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable, "GPU_PLAN_REHEARSE": "0", **(env or {})},
        timeout=300,
    )


def test_the_gpu_plan_is_strict_bash_with_its_steps_documented():
    text = PLAN.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    helped = _plan("--help").stdout
    for step in ("first", "next", "wheelhouse", "install", "check", "keras", "nbval"):
        assert f"\n  {step} " in helped, step
    for gone in ("records", "fp8", "tests", "nbval-a", "nbval-b"):  # `first` and `next` do these
        assert f"\n  {gone} " not in helped, gone
        assert _plan(gone, "x").returncode == 2
    done = _plan("no-such-step", "x")
    assert done.returncode == 2 and "unknown step" in done.stderr
    done = _plan("first")
    assert done.returncode == 2 and "needs an output folder" in done.stderr


def test_the_gpu_plan_fails_clearly_without_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = _plan("first", str(tmp_path / "out"))
    assert done.returncode == 2 and "sees no CUDA GPU" in done.stdout + done.stderr
    assert "sees no CUDA GPU" in (tmp_path / "out" / "first.log").read_text()
    assert not bench.find_records(results_dir=tmp_path / "out", include_smoke=True)


def test_the_install_fails_clearly_without_a_wheelhouse_offline(tmp_path):
    # a bare Python, which lacks what the plan installs
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "bare"], check=True)
    env = {
        "PYTHON": str(tmp_path / "bare" / "bin" / "python"),
        "GPU_PLAN_WHEELHOUSE": str(tmp_path / "wheelhouse"),
        "GPU_PLAN_VENV": str(tmp_path / "venv"),
    }
    done = _plan("install", env=env)
    assert done.returncode == 2
    assert "wheelhouse/ holds no wheels" in done.stderr and "gpu-plan.sh wheelhouse" in done.stderr
    assert not (tmp_path / "venv").exists()


def test_a_step_writes_its_log_into_the_output_folder(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("nbval")  # this Python has all the plan installs: nothing to install
    done = _plan("check", str(tmp_path / "out"), env={"GPU_PLAN_REHEARSE": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    log = (tmp_path / "out" / "check.log").read_text()
    assert "nothing to install" in log and "== machine" in log and "rehearsal: 1" in log
    assert "all commands passed" in log


# --- on a GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gemm_sweep_on_a_gpu_times_with_cuda_graphs_past_the_l2_cache(tmp_path):
    load_script("gemm_sweep").main(
        ["--smoke", "--device", "cuda", "--sizes", "256", "--out", str(tmp_path)]
    )
    _, record = _only_record(tmp_path)
    data = record["data"]
    assert set(data["timing_methods"]) == {"cuda-graph"}
    assert data["gpu"] and record["hardware"]["gpus"]
    assert all(r["input_sets"] > 1 for r in data["rows"] if "tflops" in r)  # 256^3 fits in L2
    assert record["environment"]["gpu_state_after"]  # nvidia-smi answered
    accumulation = data["fp8_accumulation"]  # measured, or why not (a GPU without FP8)
    assert accumulation["rows"] if record["hardware"]["gpus"][0]["fp8"] else accumulation["skipped"]


@pytest.mark.gpu
def test_resnet50_benchmark_takes_the_cuda_path_for_an_indexed_device(tmp_path):
    module = load_script("resnet50_amp")
    module.main(["--smoke", "--device", "cuda:0", "--out", str(tmp_path)])
    _, record = _only_record(tmp_path)
    rows = record["data"]["rows"]
    assert all(r["peak_memory_gib"] > 0 for r in rows)  # memory stats: the CUDA path ran
    if module.torch.cuda.get_device_capability() >= (8, 0):
        assert "tf32" in {r["mode"] for r in rows}


@pytest.mark.gpu
def test_scaler_benchmark_on_a_gpu_counts_host_syncs(tmp_path):
    load_script("scaler_overhead").main(["--smoke", "--device", "cuda:0", "--out", str(tmp_path)])
    _, record = _only_record(tmp_path)
    data = record["data"]
    assert data["master_strides_match"]
    assert data["host_syncs_per_iteration"]["mptutor"] <= 1
    assert data["host_syncs_per_step"]["torch"] >= 1  # GradScaler reads its inf flag too
    for part in data["optimizer_part_kernels"].values():  # both recipes launch kernels
        assert part["launches"] > 0 and part["kernel_time_ms"] > 0 and part["longest"]
