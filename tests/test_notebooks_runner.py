import json

import pytest

MISSING = "is not installed (the `notebooks` extra)"
nbformat = pytest.importorskip("nbformat", reason=f"nbformat {MISSING}")
pytest.importorskip("nbclient", reason=f"nbclient {MISSING}")

from mptutor import notebooks  # noqa: E402


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def test_run_all_writes_executed_copies_html_and_summary(tmp_path, capsys):
    src = tmp_path / "nbs"
    src.mkdir()
    _notebook(
        src / "01-ok.ipynb", "x = 6 * 7\nx", "import os\nprint(os.path.basename(os.getcwd()))"
    )
    _notebook(src / "02-bad.ipynb", "1 / 0", "print('not reached')")
    out = tmp_path / "build"
    results = notebooks._run_all([src], out, timeout=60, html=True, append=False)
    assert [(r.notebook, r.ok) for r in results] == [
        ("nbs/01-ok.ipynb", True),
        ("nbs/02-bad.ipynb", False),
    ]
    assert "ZeroDivisionError" in results[1].error
    executed = nbformat.read(out / "nbs" / "01-ok.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["data"]["text/plain"] == "42"
    assert executed.cells[1].outputs[0]["text"] == "nbs\n"  # ran in the notebook's folder
    assert [c.execution_count for c in executed.cells] == [1, 2]
    assert "42" in (out / "nbs" / "01-ok.html").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert [n["ok"] for n in summary["notebooks"]] == [True, False]
    assert summary["runs"][0]["hardware"]["cpu"]
    printed = capsys.readouterr().out
    assert "01-ok.ipynb" in printed and "FAIL" in printed
    assert "pass" in (out / "summary.txt").read_text()


def test_append_adds_a_second_environment_to_the_summary(tmp_path):
    for track, source in [("pytorch", "1 + 1"), ("gluon", "2 + 2")]:
        (tmp_path / track).mkdir()
        _notebook(tmp_path / track / "01-x.ipynb", source)
    out = tmp_path / "build"
    notebooks.main([str(tmp_path / "pytorch"), "--out", str(out), "--no-html"])
    notebooks.main([str(tmp_path / "gluon"), "--out", str(out), "--no-html", "--append"])
    notebooks.main([str(tmp_path / "gluon"), "--out", str(out), "--no-html", "--append"])
    summary = json.loads((out / "summary.json").read_text())
    expected = ["pytorch/01-x.ipynb", "gluon/01-x.ipynb"]
    assert [n["notebook"] for n in summary["notebooks"]] == expected
    assert len(summary["runs"]) == 2
    text = (out / "summary.txt").read_text()
    assert "pytorch/01-x.ipynb" in text and "gluon/01-x.ipynb" in text
    assert (out / "pytorch" / "01-x.ipynb").exists() and (out / "gluon" / "01-x.ipynb").exists()
    notebooks.main([str(tmp_path / "gluon"), "--out", str(out), "--no-html"])  # anew
    summary = json.loads((out / "summary.json").read_text())
    assert [n["notebook"] for n in summary["notebooks"]] == ["gluon/01-x.ipynb"]


def _append_results(out, lane, count):
    for i in range(count):
        result = notebooks._Result(f"lane{lane}/{i:02d}.ipynb", True, 1.0, "cpu")
        notebooks._write_summary(out, [result], append=True)


def test_runners_appending_side_by_side_keep_every_run(tmp_path):
    # `make run` starts a runner per environment at once, each with --append: no run may be lost
    import multiprocessing

    from mptutor import hardware

    hardware.report()  # measured once, before the lanes fork
    context = multiprocessing.get_context("fork")
    lanes = [context.Process(target=_append_results, args=(tmp_path, n, 40)) for n in range(3)]
    for lane in lanes:
        lane.start()
    for lane in lanes:
        lane.join(timeout=120)
        assert lane.exitcode == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["runs"]) == 120
    assert sorted(n["notebook"] for n in summary["notebooks"]) == [
        f"lane{lane}/{i:02d}.ipynb" for lane in range(3) for i in range(40)
    ]


def test_append_with_in_place_is_refused(tmp_path, capsys):
    nb = _notebook(tmp_path / "x.ipynb", "1")
    with pytest.raises(SystemExit):
        notebooks.main([str(nb), "--in-place", "--append"])
    assert "--append" in capsys.readouterr().err


def test_in_place_keeps_a_failed_notebook_untouched(tmp_path):
    good = _notebook(tmp_path / "good.ipynb", "1 + 1")
    bad = _notebook(tmp_path / "bad.ipynb", "print('ran')", "raise RuntimeError('boom')")
    before = bad.read_text()
    assert notebooks.main([str(good), str(bad), "--in-place"]) == 1
    assert bad.read_text() == before
    assert nbformat.read(good, as_version=4).cells[0].outputs[0]["data"]["text/plain"] == "2"
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


@pytest.mark.parametrize("name", ["missing.ipynb", "empty-folder", "notes.txt"])
def test_bad_paths_are_refused(tmp_path, name, capsys):
    (tmp_path / "empty-folder").mkdir()
    (tmp_path / "notes.txt").write_text("not a notebook")
    assert notebooks.main([str(tmp_path / name)]) == 2
    assert "error:" in capsys.readouterr().err


def test_a_broken_notebook_is_recorded_and_the_rest_still_run(tmp_path, capsys):
    # A kernel that dies, a kernel that does not exist, a file that is not JSON: each is a
    # failed notebook with its reason; the good one after them runs and the summary is written.
    src = tmp_path / "nbs"
    src.mkdir()
    _notebook(src / "01-dies.ipynb", "import os\nos._exit(1)")
    missing = _notebook(src / "02-no-kernel.ipynb", "1 + 1")
    nb = nbformat.read(missing, as_version=4)
    nb.metadata["kernelspec"]["name"] = "no-such-kernel-for-mptutor-tests"
    nbformat.write(nb, missing)
    (src / "03-not-json.ipynb").write_text("{ this is not JSON")
    _notebook(src / "04-ok.ipynb", "6 * 7")
    out = tmp_path / "build"
    assert notebooks.main([str(src), "--out", str(out), "--no-html"]) == 1
    summary = json.loads((out / "summary.json").read_text())
    entries = {n["notebook"]: n for n in summary["notebooks"]}
    assert [n["ok"] for n in summary["notebooks"]] == [False, False, False, True]
    assert "DeadKernelError" in entries["nbs/01-dies.ipynb"]["error"]
    assert "no-such-kernel-for-mptutor-tests" in entries["nbs/02-no-kernel.ipynb"]["error"]
    assert "03-not-json.ipynb" in entries["nbs/03-not-json.ipynb"]["error"]
    assert (out / "nbs" / "04-ok.ipynb").exists()
    assert "FAIL" in (out / "summary.txt").read_text()


@pytest.mark.parametrize("timeout", ["0", "-5", "ten"])
def test_timeout_must_be_a_positive_number_of_seconds(tmp_path, timeout, capsys):
    nb = _notebook(tmp_path / "x.ipynb", "1")
    with pytest.raises(SystemExit) as exc:
        notebooks.main([str(nb), f"--timeout={timeout}"])
    assert exc.value.code == 2
    assert "--timeout" in capsys.readouterr().err


def test_out_pointing_at_a_file_fails_before_any_notebook_runs(tmp_path, capsys):
    nb = _notebook(tmp_path / "x.ipynb", "open('ran.txt', 'w').close()")
    taken = tmp_path / "build"
    taken.write_text("a file")
    assert notebooks.main([str(nb), "--out", str(taken)]) == 2
    assert "build" in capsys.readouterr().err
    assert not (tmp_path / "ran.txt").exists() and taken.read_text() == "a file"


def test_a_missing_path_is_named_and_no_path_is_refused(tmp_path, capsys):
    assert notebooks.main([str(tmp_path / "abc"), "--out", str(tmp_path / "out")]) == 2
    assert "abc" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        notebooks.main(["--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


# Time budgets: notebooks/budgets.json, `--budgets` and the pytest plugin.

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
SLOW = "import time\ntime.sleep(1.5)"  # over a budget of 0.5 s however busy the machine is


def _budgets(path, seconds):
    path.write_text(json.dumps({"seconds": seconds}))
    return path


def test_the_budget_file_names_every_notebook_and_no_other():
    budgets = notebooks.load_budgets(ROOT / "notebooks" / "budgets.json")
    there = {f"{p.parent.name}/{p.name}" for p in (ROOT / "notebooks").glob("*/*.ipynb")}
    assert set(budgets) == there
    # About two minutes each on CI's machine; the file names each notebook that needs more.
    over = json.loads((ROOT / "notebooks" / "budgets.json").read_text())["over_target"]
    assert {name for name, s in budgets.items() if s > 120} == set(over)
    assert all(0 < s for s in budgets.values())


@pytest.mark.parametrize(
    "text",
    [
        "{ not json",
        "[]",
        '{"seconds": {}}',
        '{"seconds": [120]}',
        '{"seconds": {"nbs/x.ipynb": 0}}',
        '{"seconds": {"nbs/x.ipynb": -1}}',
        '{"seconds": {"nbs/x.ipynb": NaN}}',
        '{"seconds": {"nbs/x.ipynb": Infinity}}',
        '{"seconds": {"nbs/x.ipynb": true}}',
        '{"seconds": {"nbs/x.ipynb": "120"}}',
        '{"seconds": {"nbs/x.txt": 120}}',
    ],
)
def test_a_bad_budget_file_is_refused_before_any_notebook_runs(tmp_path, text, capsys):
    nb = _notebook(tmp_path / "x.ipynb", "open('ran.txt', 'w').close()")
    (tmp_path / "budgets.json").write_text(text)
    with pytest.raises(ValueError, match="budget file"):
        notebooks.load_budgets(tmp_path / "budgets.json")
    argv = [str(nb), "--out", str(tmp_path / "out"), "--budgets", str(tmp_path / "budgets.json")]
    assert notebooks.main(argv) == 2
    assert "budget file" in capsys.readouterr().err
    assert not (tmp_path / "ran.txt").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("budgets_var", "ci", "enforced"),
    [(None, None, False), (None, "true", True), (None, "1", True), (None, "false", False),
     ("0", "true", False), ("1", None, True), ("", "true", True)],
)
def test_budgets_are_enforced_under_ci_or_when_asked(monkeypatch, budgets_var, ci, enforced):
    for name, value in (("MPTUTOR_BUDGETS", budgets_var), ("CI", ci)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert notebooks.budgets_enforced() is enforced


def test_a_bad_budgets_switch_is_refused(monkeypatch):
    monkeypatch.setenv("MPTUTOR_BUDGETS", "yes")
    with pytest.raises(ValueError, match="MPTUTOR_BUDGETS must be 0 or 1"):
        notebooks.budgets_enforced()


@pytest.mark.parametrize("enforced", [True, False])
def test_a_notebook_over_budget_fails_the_run_only_where_enforced(
    tmp_path, monkeypatch, capsys, enforced
):
    monkeypatch.setenv("MPTUTOR_BUDGETS", "1" if enforced else "0")
    src = tmp_path / "nbs"
    src.mkdir()
    _notebook(src / "01-slow.ipynb", SLOW)
    _notebook(src / "02-quick.ipynb", "1 + 1")
    budgets = _budgets(tmp_path / "b.json", {"nbs/01-slow.ipynb": 0.5, "nbs/02-quick.ipynb": 600})
    out = tmp_path / "build"
    code = notebooks.main([str(src), "--out", str(out), "--no-html", "--budgets", str(budgets)])
    assert code == (1 if enforced else 0)
    printed = capsys.readouterr()
    assert "nbs/01-slow.ipynb" in printed.err and "02-quick" not in printed.err
    assert ("enforced: the run fails" in printed.err) is enforced
    entries = json.loads((out / "summary.json").read_text())["notebooks"]
    assert [(n["budget"], n["ok"]) for n in entries] == [(0.5, True), (600, True)]
    assert entries[0]["seconds"] >= 1.5
    assert "0 OVER" in (out / "summary.txt").read_text()  # the budget column: "0 OVER" for 0.5 s


def test_a_notebook_without_a_budget_is_refused_before_any_runs(tmp_path, capsys):
    nb = _notebook(tmp_path / "x.ipynb", "open('ran.txt', 'w').close()")
    budgets = _budgets(tmp_path / "b.json", {"other/y.ipynb": 60})
    assert notebooks.main([str(nb), "--in-place", "--budgets", str(budgets)]) == 2
    assert f"no budget for {tmp_path.name}/x.ipynb" in capsys.readouterr().err
    assert not (tmp_path / "ran.txt").exists()


def _nbval(tmp_path, budgets, enforced):
    import os
    import subprocess
    import sys

    pytest.importorskip("nbval", reason="nbval is not installed (the `test` extra)")
    env = {**os.environ, "MPTUTOR_BUDGETS": "1" if enforced else "0"}
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "mptutor.notebooks",
            "--notebook-budgets", str(budgets), "--nbval", "--nbval-current-env", "nbs"]
    return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)


def test_nbval_prints_seconds_per_notebook_and_fails_over_budget_where_enforced(tmp_path):
    src = tmp_path / "nbs"
    src.mkdir()
    for name, source in (("01-slow", SLOW), ("02-quick", "1 + 1")):
        nb = nbformat.read(_notebook(src / f"{name}.ipynb", source), as_version=4)
        nb = notebooks_execute(nb, src)
        nbformat.write(nb, src / f"{name}.ipynb")
    budgets = _budgets(tmp_path / "b.json", {"nbs/01-slow.ipynb": 0.5, "nbs/02-quick.ipynb": 600})
    for enforced in (True, False):
        done = _nbval(tmp_path, budgets, enforced)
        assert "2 passed" in done.stdout, done.stdout + done.stderr
        assert "seconds per notebook" in done.stdout and "nbs/02-quick.ipynb" in done.stdout
        assert "over budget" in done.stdout and "nbs/01-slow.ipynb (" in done.stdout
        assert done.returncode == (1 if enforced else 0)
    # a notebook with no budget is a usage error before any cell runs, enforced or not
    _budgets(budgets, {"nbs/01-slow.ipynb": 600})
    for enforced in (True, False):
        done = _nbval(tmp_path, budgets, enforced)
        assert done.returncode == 4 and "no budget for nbs/02-quick.ipynb" in done.stderr


def notebooks_execute(nb, folder):
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=60, resources={"metadata": {"path": str(folder)}}).execute()
    return nb


def test_the_command_line_runs_as_a_module(tmp_path):
    import subprocess
    import sys

    nb = _notebook(tmp_path / "x.ipynb", "6 * 7")
    args = [sys.executable, "-m", "mptutor.notebooks", str(nb), "--out", str(tmp_path / "out")]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "x.ipynb ... pass in" in done.stdout
    assert (tmp_path / "out" / tmp_path.name / "x.html").exists()


def test_kernels_get_the_makefile_environment_unless_the_caller_set_it(tmp_path, monkeypatch):
    _notebook(
        tmp_path / "01-env.ipynb",
        "import os\nprint(os.environ.get('TF_ENABLE_ONEDNN_OPTS'), "
        "os.environ.get('TF_CPP_MIN_LOG_LEVEL'))",
    )
    out = tmp_path / "build"
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")  # the caller's choice is kept
    assert notebooks.main([str(tmp_path / "01-env.ipynb"), "--out", str(out), "--no-html"]) == 0
    executed = nbformat.read(out / tmp_path.name / "01-env.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "0 1\n"
