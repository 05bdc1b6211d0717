"""The GPU plan's bookkeeping (benchmarks/ledger.py) and the time plan of ``gpu-plan.sh first``.

The ledger's format, its "due again" rule, the order of the notebooks and the chunks planned
from recorded times are checked here without a GPU; so are the parts of ``first`` (their shares
fit the 7 minutes of one command) and the benchmark scripts' ``--budget-s``.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import ledger  # noqa: E402
from test_benchmarks import load_script  # noqa: E402

PLAN = ROOT / "benchmarks" / "gpu-plan.sh"
FIRST_S = 420  # one command of at most 7 minutes


class Clock:
    """A clock that moves only when told to."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _entry(sha="a" * 64, status="passed", gpu="NVIDIA H100 80GB HBM3", seconds=60.0):
    return {"status": status, "sha256": sha, "seconds": seconds, "gpu": gpu,
            "torch": "2.11.0+cu130", "commit": "abc", "date": "2026-11-27T00:00:00Z"}  # fmt: skip


def _ledger(**entries):
    return ledger.validate({"format": 1, "notebooks": entries})


# --- the budget ------------------------------------------------------------------------------


def test_a_budget_counts_down_and_says_why_a_unit_was_not_started():
    clock = Clock()
    budget = ledger.Budget(60, clock)
    assert budget.left() == 60 and budget.allows(59) and not budget.allows(60)
    clock.now += 45
    assert budget.spent() == 45 and budget.left() == 15
    assert budget.allows(10) and not budget.allows(20)
    assert "45 s of this part's 60 s were spent" in budget.why_not()
    clock.now += 30
    assert budget.left() == -15 and not budget.allows()
    unlimited = ledger.Budget(None, clock)
    assert unlimited.left() == float("inf") and unlimited.allows(1e9)
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="positive number of seconds"):
            ledger.Budget(bad)


# --- the ledger's format ---------------------------------------------------------------------


def test_the_committed_ledger_is_valid_and_names_only_notebooks_of_the_gpu_path():
    committed = ledger.read(ledger.LEDGER)
    assert committed["format"] == ledger.FORMAT
    # an entry of a notebook left off the path stays as the record of what happened
    assert set(committed["notebooks"]) <= set(ledger.gpu_path()) | set(ledger.LEFT_OUT)
    assert ledger.LEDGER.parent != ROOT / "data" / "results"  # records are read from there


def test_an_entry_is_written_and_read_back(tmp_path):
    book = ledger.record(
        ledger.empty(), "notebooks/pytorch/06-x.ipynb", status="failed", sha256="f" * 64,
        seconds=12.345, gpu="NVIDIA H100", torch="2.11.0", commit="abc", detail="x" * 5000,
        date="2026-11-27T01:00:00Z",
    )  # fmt: skip
    path = ledger.write(book, tmp_path / "sub" / "gpu-ledger.json")
    back = ledger.read(path)
    entry = back["notebooks"]["notebooks/pytorch/06-x.ipynb"]
    assert entry["seconds"] == 12.3 and entry["status"] == "failed" and entry["commit"] == "abc"
    assert len(entry["detail"]) == 2000  # the end of the output
    assert json.loads(path.read_text())["format"] == 1
    assert ledger.read(tmp_path / "absent.json") == ledger.empty()


def _pytest_output(first_error, others=30):
    red, bold, reset = "\x1b[31m", "\x1b[1m", "\x1b[0m"
    sections = [f"{red}{bold}{'_' * 20} nb.ipynb::Cell 0 {'_' * 20}{reset}\n{first_error}\n"]
    for i in range(1, others):
        sections.append(
            f"{'_' * 20} nb.ipynb::Cell {i} {'_' * 20}\nNameError: name 'x' is not "
            f"defined (a consequence of cell 0)\n" + "  traceback line\n" * 10
        )
    summary = "".join(f"FAILED nb.ipynb::Cell {i} - {red}Notebook cell execution failed"
                      f"{reset}\n" for i in range(others))  # fmt: skip
    return (f"{bold}{'=' * 10} test session starts {'=' * 10}{reset}\nplatform linux\n"
            f"{red}{'=' * 30} FAILURES {'=' * 30}{reset}\n" + "".join(sections)
            + f"{'=' * 10} short test summary info {'=' * 10}\n" + summary
            + f"{red}{'=' * 10} {others} failed in 19.0s {'=' * 10}{reset}\n")  # fmt: skip


def test_a_failed_entry_keeps_the_first_error_and_the_end_of_the_output():
    error = "ModuleNotFoundError: No module named 'tensorflow'"
    output = _pytest_output(f"----> 1 import tensorflow as tf\n{error}")
    assert len(output) > 5000
    entry = ledger.record(ledger.empty(), "nb.ipynb", status="failed", sha256="f" * 64,
                          seconds=19, gpu="NVIDIA H200", torch="2.11.0",
                          detail=output)["notebooks"]["nb.ipynb"]  # fmt: skip
    detail = entry["detail"]
    assert len(detail) <= ledger.DETAIL_CHARS and "\x1b" not in detail  # colours stripped
    assert detail.startswith("_" * 20 + " nb.ipynb::Cell 0 ") and error in detail
    assert "Cell 1 " not in detail.split("[... output left out ...]")[0]  # the first section only
    assert detail.endswith("30 failed in 19.0s " + "=" * 10 + "\n")  # and the end
    # a first report longer than the room is cut, and the end is still kept
    long = ledger.failure_detail(_pytest_output("E   " + "y" * 5000, others=3))
    assert len(long) == ledger.DETAIL_CHARS and long.startswith("_" * 20 + " nb.ipynb::Cell 0")
    assert long.endswith("3 failed in 19.0s " + "=" * 10 + "\n")
    # short outputs are kept whole; outputs without a FAILURES section keep their end
    assert ledger.failure_detail("\x1b[91mboom\x1b[0m") == "boom"
    assert ledger.failure_detail("x" * 2100 + "end") == "x" * 1997 + "end"
    with pytest.raises(ValueError, match="at least 200"):
        ledger.failure_detail("x", limit=10)


@pytest.mark.parametrize(
    ("book", "message"),
    [
        ({"format": 2, "notebooks": {}}, "not a ledger of format 1"),
        ([], "not a ledger"),
        ({"format": 1, "notebooks": []}, "'notebooks' must be an object"),
        ({"format": 1, "notebooks": {"nb": {"status": "passed"}}}, "lacks"),
        ({"format": 1, "notebooks": {"nb": {**_entry(), "status": "ok"}}}, "status 'ok'"),
        ({"format": 1, "notebooks": {"nb": {**_entry(), "seconds": -1}}}, "seconds -1"),
    ],
)
def test_a_bad_ledger_gets_a_clear_error_and_is_never_written(tmp_path, book, message):
    with pytest.raises(ValueError, match=message):
        ledger.validate(book)
    with pytest.raises((ValueError, TypeError)):
        ledger.write(book, tmp_path / "l.json")
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="status must be one of"):
        ledger.record(ledger.empty(), "nb", status="ok", sha256="", seconds=1, gpu=None, torch=None)


# --- the "due again" rule --------------------------------------------------------------------


def test_a_notebook_is_due_unless_a_gpu_passed_or_failed_its_current_content():
    book = _ledger(
        passed=_entry(sha="1"),
        changed=_entry(sha="old"),
        rehearsed=_entry(sha="3", gpu=None),
        stopped=_entry(sha="4", status="stopped", seconds=300),
        failed=_entry(sha="5", status="failed"),
        failed_changed=_entry(sha="old", status="failed"),
    )
    now = {"passed": "1", "changed": "2", "rehearsed": "3", "stopped": "4", "failed": "5",
           "failed_changed": "6", "new": "7"}  # fmt: skip
    reasons = ledger.due(book, now)
    assert list(reasons) == ["changed", "rehearsed", "stopped", "failed_changed", "new"]
    assert reasons["changed"] == "changed since its passed entry"
    assert reasons["rehearsed"] == "passed only off a GPU (a rehearsal)"
    assert reasons["stopped"] == "stopped after 300 s" and reasons["new"] == "no entry"
    assert "failed" in ledger.due(book, now, retry_failed=True)


def test_a_notebook_that_changed_on_disk_is_due_again(tmp_path):
    nb = tmp_path / "n.ipynb"
    nb.write_text('{"cells": []}')
    book = ledger.record(ledger.empty(), "n.ipynb", status="passed", sha256=ledger.content_hash(nb),
                         seconds=5, gpu="NVIDIA H200", torch="2.11.0")  # fmt: skip
    assert ledger.due(book, {"n.ipynb": ledger.content_hash(nb)}) == {}
    nb.write_text('{"cells": [1]}')
    assert ledger.due(book, {"n.ipynb": ledger.content_hash(nb)}) == {
        "n.ipynb": "changed since its passed entry"
    }


# --- order and chunks ------------------------------------------------------------------------


def test_the_notebooks_that_show_gpu_figures_come_first():
    path = ledger.gpu_path()
    assert all((ROOT / nb).exists() for nb in path)
    assert {nb for nb in path if nb.startswith("notebooks/pytorch/")} == {
        p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks/pytorch").glob("*.ipynb")
    }
    # neither TensorFlow (keras/02's setup cell imports it) nor MXNet is on a GPU host
    assert not any("keras" in nb or "gluon" in nb for nb in path)
    assert "notebooks/keras/02-keras-cnn-experiment.ipynb" in ledger.LEFT_OUT
    order = ledger.ordered(path)
    assert [re.sub(r"-.*", "", nb.split("/", 1)[1]) for nb in order[:3]] == [
        "pytorch/06", "pytorch/09", "pytorch/11"
    ]  # fmt: skip
    rest = order[3:]
    assert rest == sorted(rest) and len(order) == len(set(path))
    assert ledger.ordered(["b", "notebooks/pytorch/11-fp8-and-block-scaling.ipynb", "a"])[0] == (
        "notebooks/pytorch/11-fp8-and-block-scaling.ipynb"
    )


def test_a_chunk_takes_the_notebooks_whose_recorded_times_fit():
    times = {"a": 100.0, "b": 250.0, "c": None, "d": 30.0, "e": 500.0}
    chunk = ledger.plan_chunk(["a", "b", "c", "d", "e"], times, 300, unknown_s=90)
    assert chunk.run == ["a", "c", "d"]  # 100 + 90 (unknown) + 30; b waits, smaller ones go in
    assert chunk.later["b"] == "needs 250 s, 200 s of the chunk left"  # after a
    assert "longer than a chunk of 300 s" in chunk.later["e"]
    assert ledger.plan_chunk(["b"], times, 300).run == ["b"]
    with pytest.raises(ValueError, match="budget_s must be positive"):
        ledger.plan_chunk(["a"], times, 0)


def test_recorded_times_count_only_from_a_gpu():
    book = _ledger(gpu=_entry(seconds=42), cpu=_entry(gpu=None, seconds=7))
    assert ledger.expected_s(book, "gpu") == 42
    assert ledger.expected_s(book, "cpu") is None and ledger.expected_s(book, "none") is None


def test_a_chunk_runs_while_its_budget_lasts_and_records_each_notebook(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text(name)
    clock = Clock()
    budget = ledger.Budget(200, clock)
    given = {}

    def run_one(nb, left):
        given[nb] = left
        clock.now += {"a": 100, "b": 80}[nb]
        return ("passed", "") if nb == "a" else ("failed", "AssertionError in cell 3")

    book = ledger.run_chunk(ledger.empty(), ["a", "b", "c"], budget, run_one, root=tmp_path,
                            gpu="NVIDIA H100", torch="2.11.0", commit="abc")  # fmt: skip
    assert given == {"a": 200, "b": 100}  # c: 20 s left, under the 30 s a start needs
    entries = book["notebooks"]
    assert set(entries) == {"a", "b"} and entries["a"]["seconds"] == 100
    assert entries["b"]["status"] == "failed" and "cell 3" in entries["b"]["detail"]
    assert "detail" not in entries["a"] and entries["a"]["sha256"] == ledger.content_hash(
        tmp_path / "a"
    )
    assert ledger.due(book, {n: ledger.content_hash(tmp_path / n) for n in "abc"}) == {
        "c": "no entry"
    }


def test_the_status_command_lists_every_notebook_of_the_gpu_path(capsys):
    assert ledger.main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(ledger.gpu_path()) + len(ledger.LEFT_OUT)
    assert lines[0].split()[1] == "notebooks/pytorch/06-tensor-core-performance.ipynb:"
    off = [line for line in lines if line.startswith("off ")]
    assert len(off) == len(ledger.LEFT_OUT) and "TensorFlow" in off[0]


def test_next_never_runs_a_notebook_left_off_the_path_and_keeps_its_entry(
    tmp_path, monkeypatch, capsys
):
    keras02 = "notebooks/keras/02-keras-cnn-experiment.ipynb"
    old = ledger.record(ledger.empty(), keras02, status="failed", sha256="0" * 64, seconds=19,
                        gpu="NVIDIA H200", torch="2.11.0", detail="no tensorflow")  # fmt: skip
    ledger.write(old, tmp_path / "old.json")
    ran = []

    def runner(python, env):
        def run_one(nb, left):
            ran.append(nb)
            return "passed", ""

        return run_one

    monkeypatch.setattr(ledger, "nbval_runner", runner)
    monkeypatch.setattr(ledger, "_environment", lambda python: ("NVIDIA H200", "2.11.0"))
    code = ledger.main(["next", str(tmp_path), "--budget-s", "2000", "--retry-failed",
                        "--ledger", str(tmp_path / "old.json")])  # fmt: skip
    assert code == 0 and ran and keras02 not in ran
    assert set(ran) == set(ledger.gpu_path())  # 2000 s hold every notebook at 90 s
    new = ledger.read(tmp_path / "gpu-ledger.json")["notebooks"]
    assert new[keras02] == old["notebooks"][keras02]
    assert f"off   {keras02}" in capsys.readouterr().out


# --- the parts of `first` --------------------------------------------------------------------


def _shell_array(name):
    text = PLAN.read_text(encoding="utf-8")
    match = re.search(rf"^{name}=\((.*?)\)$", text, re.M)
    assert match, name
    return match.group(1).split()


def test_the_parts_of_first_fit_one_command_and_each_has_its_share_explained():
    parts, shares = _shell_array("FIRST_PARTS"), [int(s) for s in _shell_array("FIRST_SHARES")]
    assert parts == ["install", "machine", "gemm", "resnet50", "scaler", "fp8", "tests", "summary"]
    assert len(shares) == len(parts) and sum(shares) <= FIRST_S
    text = PLAN.read_text(encoding="utf-8")
    assert 'LIMIT="${GPU_PLAN_FIRST_S:-420}"' in text
    for name, share in zip(parts, shares, strict=True):
        assert re.search(rf"^#\s+{name}\s+{share}\s+\S", text, re.M), name  # share, and why
        assert f"part_{name}() {{" in text, name
    for script in ("gemm_sweep", "resnet50_amp", "scaler_overhead", "fp8_step"):
        assert f"benchmarks/{script}.py" in text and "--budget-s" in text


# --- --budget-s in the scripts ---------------------------------------------------------------


def _record(folder):
    (path,) = Path(folder).glob("*.json")
    return json.loads(path.read_text())["data"]


def test_a_spent_budget_skips_the_gemm_sizes_and_says_so(tmp_path, capsys):
    load_script("gemm_sweep").main(["--smoke", "--sizes", "16", "8", "--precisions", "fp32",
                                "--budget-s", "1e-9", "--out", str(tmp_path)])  # fmt: skip
    data = _record(tmp_path)
    assert data["rows"] == [] and data["sizes"] == [] and data["budget_s"] == 1e-9
    assert set(data["skipped_sizes"]) == {"16", "8"}
    assert all("were spent" in why for why in data["skipped_sizes"].values())
    assert "size 16: not started" in capsys.readouterr().out


def test_the_fp8_step_measures_torchaos_recipes_when_torchao_imports(tmp_path, capsys):
    module = load_script("fp8_step")
    if not module.torchao_state()["imported"]:
        pytest.skip("torchao does not import here")
    module.main(["--smoke", "--variants", "bf16", "fp8", "torchao_tensorwise", "torchao_rowwise",
                 "--out", str(tmp_path)])  # fmt: skip
    data = _record(tmp_path)
    assert data["torchao"]["imported"] and data["complete"]
    measured = {r["variant"] for r in data["rows"]}
    assert measured | set(data["unavailable"]) == set(module.VARIANTS)
    assert {"bf16", "fp8"} <= measured
    for r in data["rows"][1:]:
        assert r["speedup_vs_bf16"] == pytest.approx(data["rows"][0]["median_s"] / r["median_s"])
    fp8 = [r["speedup_vs_bf16"] for r in data["rows"] if r["variant"] == "fp8"]
    assert data["best_speedup_fp8_vs_bf16"] == max(fp8)  # torchao's rows are not the target's


def test_the_fp8_step_records_that_torchao_did_not_import(tmp_path, monkeypatch, capsys):
    module = load_script("fp8_step")
    monkeypatch.setattr(
        module, "torchao_state", lambda: {"imported": False, "error": "ImportError: no torchao"}
    )
    module.main(["--smoke", "--variants", "torchao_rowwise", "--out", str(tmp_path)])
    data = _record(tmp_path)
    assert [r["variant"] for r in data["rows"]] == ["bf16", "fp8"]
    assert data["unavailable"] == {
        "torchao_rowwise": "torchao did not import: ImportError: no torchao"
    }
    assert "not measured: torchao_rowwise" in capsys.readouterr().out


def test_first_skips_the_parts_its_time_cannot_hold_and_still_writes_the_summary(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("nbval")  # this Python has all the plan installs: nothing to install
    shares = dict(zip(_shell_array("FIRST_PARTS"), _shell_array("FIRST_SHARES"), strict=True))
    first_s = int(shares["summary"]) + 4  # under the 5 s a part needs, once the summary's is kept
    env = {**os.environ, "PYTHON": sys.executable, "GPU_PLAN_REHEARSE": "1",
           "GPU_PLAN_FIRST_S": str(first_s), "GPU_PLAN_VENV": str(tmp_path / "venv")}  # fmt: skip
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(PLAN), "first", str(out)], capture_output=True,
                          text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    rows = [line.split("\t") for line in (out / "parts.tsv").read_text().splitlines()]
    assert [r[0] for r in rows] == _shell_array("FIRST_PARTS")
    # the time less the later parts' shares (the summary's) leaves under the 5 s a part needs
    # for every part before the summary
    assert all(r[4] == "not started: no time left" for r in rows[:-1]), rows
    assert rows[-1][4] == "ok" and int(rows[-1][2]) <= first_s
    summary = (out / "summary.md").read_text()
    assert f"| gemm | {shares['gemm']} |" in summary and "## Targets" in summary
    assert "no record" in summary
    assert "failed: gemm (no time left)" in (out / "first.log").read_text()


def test_the_nbval_runner_reports_passed_failed_and_stopped(tmp_path):
    fake = tmp_path / "python"  # stands for the Python that runs nbval; the notebook picks
    fake.write_text('#!/bin/sh\nfor a; do last=$a; done\necho "nbval of $last"\n'
                    'case $last in *ok*) exit 0 ;; *slow*) sleep 30 ;; esac\nexit 1\n')  # fmt: skip
    fake.chmod(0o755)
    run_one = ledger.nbval_runner(str(fake), dict(os.environ))
    assert run_one("ok.ipynb", 20) == ("passed", "nbval of ok.ipynb\n")
    assert run_one("bad.ipynb", 20)[0] == "failed"
    status, output = run_one("slow.ipynb", 1)
    assert status == "stopped" and "nbval of slow.ipynb" in output


def test_the_readme_and_make_test_gpu_say_what_the_script_does():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## GPU plan") :].split("\n## ")[0]
    table = dict(re.findall(r"^\| (\w+) \| (\d+) s \|", section, re.M))
    shares = zip(_shell_array("FIRST_PARTS"), _shell_array("FIRST_SHARES"), strict=True)
    assert table == dict(shares)
    assert "gpu-plan.sh first" in section and "gpu-plan.sh next" in section
    assert "data/results/ledger/gpu-ledger.json" in section
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile[makefile.index("\ntest-gpu:") :].split("\n\n")[0]
    assert re.findall(r"\$\(GPU_PLAN\) (\w+)", recipe) == ["first", "next"]


def test_a_spent_budget_skips_the_resnet_runs_and_the_record_says_which(tmp_path):
    load_script("resnet50_amp").main(["--smoke", "--modes", "fp32", "amp_bf16",
                                      "--budget-s", "1e-9", "--out", str(tmp_path)])  # fmt: skip
    data = _record(tmp_path)
    assert data["rows"] == [] and data["best_layouts"] == [] and data["complete"]
    assert set(data["skipped"]) == {f"{m} {layout}" for m in ("fp32", "amp_bf16")
                                    for layout in ("channels_last", "nchw")}  # fmt: skip


def test_the_resnet_start_up_runs_untimed_first_and_is_not_any_modes_estimate(
    tmp_path, monkeypatch, capsys
):
    module = load_script("resnet50_amp")
    clock, calls = Clock(), []

    def fake_training(build, mode, batch, image_size, classes, device, steps, warmup, cl):
        calls.append((mode, batch, cl))
        clock.now += 60 if batch == 3 else 20  # the start-up, then each measured run
        return {"mode": mode, "channels_last": cl, "batch": batch, "image_size": image_size,
                "median_step_s": 0.1, "images_per_s": batch / 0.1, "peak_memory_gib": None,
                "final_loss": 1.0, "times_s": [0.1]}  # fmt: skip

    monkeypatch.setattr(module.tp, "measure_training", fake_training)
    monkeypatch.setattr(module, "Budget", lambda s: ledger.Budget(s, clock))
    module.main(["--smoke", "--warmup-batch", "3", "--budget-s", "130", "--out", str(tmp_path)])
    data = _record(tmp_path)
    # 60 s of start-up, then 20 s a run: three runs fit, the fourth would end past 130 s. With
    # the start-up inside the first run (80 s), every later mode would have been estimated at
    # 80 s and none started.
    assert calls[0] == ("fp32", 3, True) and data["startup_s"] == 60
    assert "batch 3" in data["startup"] and "start-up: 60.0 s" in capsys.readouterr().out
    assert [(r["mode"], r["channels_last"]) for r in data["rows"]] == [
        ("fp32", True), ("tf32", True), ("amp_fp16", True)
    ]  # fmt: skip
    assert all(r["batch"] == 2 for r in data["rows"])  # the start-up is no row
    assert "amp_bf16 channels_last" in data["skipped"] and "fp32 nchw" in data["skipped"]


def test_the_resnet_start_up_runs_on_a_cpu_when_asked_and_keeps_the_rows(tmp_path, capsys):
    module = load_script("resnet50_amp")
    module.main(["--smoke", "--modes", "fp32", "--layouts", "nchw", "--warmup-batch", "1",
                 "--out", str(tmp_path)])  # fmt: skip
    data = _record(tmp_path)
    assert data["startup_s"] > 0 and "fp32 nchw at batch 1" in data["startup"]
    assert [(r["mode"], r["channels_last"], r["batch"]) for r in data["rows"]] == [
        ("fp32", False, 2)
    ]
    module.main(["--smoke", "--modes", "fp32", "--out", str(tmp_path / "none")])
    assert _record(tmp_path / "none")["startup_s"] is None  # a CPU has no start-up to pay
    with pytest.raises(SystemExit):
        module.main(["--smoke", "--warmup-batch", "-1"])
    assert "--warmup-batch must be 0 or more" in capsys.readouterr().err
