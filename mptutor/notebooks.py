"""Execute notebooks top to bottom, save executed copies and HTML, and summarise the run.

Command line (what ``make run`` and ``make notebooks`` call)::

    python -m mptutor.notebooks notebooks/pytorch --out build   # build/pytorch/*.ipynb + .html
    python -m mptutor.notebooks notebooks/gluon --out build --append   # add to the summary
    python -m mptutor.notebooks notebooks/pytorch --in-place    # refresh the committed outputs

Executed copies keep the name of their notebook's folder (``build/pytorch/...``), so several
tracks, run by several environments, land side by side; ``--append`` adds this run to the
``summary.json``/``summary.txt`` already there (runners that append side by side take turns). A
notebook that fails (a cell, a cell over ``--timeout``, a kernel that dies or is not installed, a
file that is no notebook) is recorded with its reason, the others still run, and the exit status
is 1. ``--in-place`` never replaces a notebook with a half-run copy.

Time budgets: ``--budgets notebooks/budgets.json`` names the seconds each notebook may take on
the slowest CI machine (a 2-core CPU with AVX2 only); the summary prints each notebook's time
beside its budget. The budgets are enforced, so that a notebook over its budget makes the exit
status 1, when ``MPTUTOR_BUDGETS=1``, or when ``CI`` is ``true`` and ``MPTUTOR_BUDGETS`` is not
``0``; elsewhere (a busy laptop) they are only printed. The same module is a pytest plugin that
does the same for strict nbval: ``pytest -p mptutor.notebooks --notebook-budgets FILE --nbval``
prints the seconds of each notebook (the sum of its cells' setup, call and teardown, the kernel's
start included) and, enforced, fails the session when one is over budget.

Kernels get the environment ``make`` gives them: :data:`KERNEL_ENVIRONMENT` (TensorFlow's own
kernels rather than its oneDNN ones, whose results depend on the CPU's instruction set and which
the Keras notebooks' compared outputs assume off; TensorFlow's C++ start-up log quiet) is set for
every variable the caller has not set, by the command line and by the pytest plugin alike, so that
``python -m mptutor.notebooks`` and ``pytest --nbval`` run the notebooks as ``make`` does.

The budgets are not scaled by the machine: faster machines only have more room under them,
so a check there can still fail (a notebook that grew by several times) but never fails
because the machine is fast or slow in a way the budget did not foresee.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mptutor import hardware
from mptutor._atomic import write_text
from mptutor.table import Table

__all__ = ["budgets_enforced", "load_budgets", "main"]

_BUDGETS_VAR = "MPTUTOR_BUDGETS"


@dataclass
class _Result:
    """Outcome of one notebook: ``folder/file`` name, success, seconds, hardware, error."""

    notebook: str
    ok: bool
    seconds: float
    device: str
    error: str = ""
    outputs: list[str] | None = None
    budget: float | None = None

    @property
    def over_budget(self) -> bool:
        """Whether the notebook took longer than its budget (never, without one)."""
        return self.budget is not None and self.seconds > self.budget


def _key(path: Path | str) -> str:
    """Name a notebook as summaries and the budget file do: ``folder/file``."""
    path = Path(path)
    return f"{path.parent.name}/{path.name}"


def load_budgets(path: str | Path) -> dict[str, float]:
    """Read a budget file: seconds per notebook, keyed ``folder/file.ipynb``.

    Parameters
    ----------
    path : str or path-like
        A JSON file ``{"seconds": {"pytorch/00-x.ipynb": 120, ...}}``; other top-level keys
        (a description) are ignored.

    Returns
    -------
    dict
        Budget in seconds (a positive finite number) per notebook.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If it is not JSON of that shape, or a budget is not a positive finite number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such budget file: {path}")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"the budget file {path} is not JSON: {exc}") from None
    seconds = record.get("seconds") if isinstance(record, dict) else None
    if not isinstance(seconds, dict) or not seconds:
        raise ValueError(
            f"the budget file {path} must hold a JSON object with a non-empty \"seconds\" "
            'object: {"seconds": {"folder/notebook.ipynb": seconds, ...}}'
        )
    for name, value in seconds.items():
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not (ok and math.isfinite(value) and value > 0 and name.endswith(".ipynb")):
            raise ValueError(
                f"the budget file {path}: {name!r}: {value!r} is not a notebook "
                "(folder/file.ipynb) with a positive finite number of seconds"
            )
    return {name: float(value) for name, value in seconds.items()}


def budgets_enforced() -> bool:
    """Whether notebooks over their budget fail the run.

    ``MPTUTOR_BUDGETS=1`` enforces and ``0`` does not; unset (or empty), the budgets are
    enforced when ``CI`` is ``true`` or ``1`` (as CI services set it).

    Returns
    -------
    bool

    Raises
    ------
    ValueError
        If ``MPTUTOR_BUDGETS`` is set to anything but ``0`` or ``1``.
    """
    value = os.environ.get(_BUDGETS_VAR, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{_BUDGETS_VAR} must be 0 or 1 (or unset), got {value!r}")
    if value:
        return value == "1"
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def _budget_for(budgets: dict[str, float] | None, names: list[str], where: str) -> None:
    """Refuse notebooks that have no budget in the file (before any runs)."""
    if budgets is None:
        return
    missing = [name for name in names if name not in budgets]
    if missing:
        raise ValueError(f"no budget for {', '.join(missing)} in {where}; add one (seconds)")


def _budget_cell(seconds: float, budget: float | None) -> str:
    if budget is None:
        return ""
    return f"{budget:.0f}" + (" OVER" if seconds > budget else "")


def _find_notebooks(paths: list[str]) -> list[Path]:
    """Expand notebook files and folders (not recursively) into notebooks; refuse bad paths."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            inside = sorted(p for p in path.glob("*.ipynb") if not p.name.startswith("."))
            if not inside:
                raise FileNotFoundError(f"no .ipynb notebooks in folder {path}")
            found.extend(inside)
        elif not path.is_file():
            raise FileNotFoundError(f"no such notebook or folder: {path}")
        elif path.suffix != ".ipynb":
            raise ValueError(f"{path} is not a Jupyter notebook (.ipynb)")
        else:
            found.append(path)
    return found


def _execute(path: Path, out: Path | None, timeout: int, html: bool) -> _Result:
    """Execute one notebook in a fresh kernel in its folder; write the copy (or it, if it ran)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    start, error, written = time.perf_counter(), "", []
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError, AttributeError) as exc:  # NotJSONError is a ValueError
        nb, error = None, f"{path} is not a readable notebook: {exc}"
    if nb is not None:
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
            extra_arguments=["--log-level=ERROR"],  # the kernel's own log is no cell output
            resources={"metadata": {"path": str(path.parent.resolve())}},
        )
        try:
            client.execute()
        except Exception as exc:  # noqa: BLE001 - a cell, a timeout, a dead or missing kernel
            last = ([ln for ln in str(exc).splitlines() if ln.strip()] or [""])[-1].strip()
            error = last if isinstance(exc, CellExecutionError) else f"{type(exc).__name__}: {last}"
        if out is not None or not error:
            target = path if out is None else out / path.parent.name / path.name
            write_text(target, nbformat.writes(nb) + "\n")
            written.append(str(target))
            if html and out is not None:
                from nbconvert import HTMLExporter

                write_text(target.with_suffix(".html"), HTMLExporter().from_notebook_node(nb)[0])
                written.append(str(target.with_suffix(".html")))
    seconds = round(time.perf_counter() - start, 1)
    return _Result(_key(path), not error, seconds, hardware.report().summary(), error, written)


def _table(results: list[_Result]) -> Table:
    """Tabulate results: notebook, status, seconds, budget, hardware, error."""
    return Table(
        {
            "notebook": r.notebook,
            "status": "pass" if r.ok else "FAIL",
            "seconds": f"{r.seconds:.1f}",
            "budget": _budget_cell(r.seconds, r.budget),
            "hardware": r.device,
            "error": r.error[:80],
        }
        for r in results
    )


def _run_all(
    paths: list[str], out: Path | None, timeout: int, html: bool, append: bool, budgets: dict[str,
    float] | None = None,
) -> list[_Result]:  # fmt: skip
    """Execute every notebook, printing progress; write the summary into ``out``."""
    notebooks = _find_notebooks(paths)
    _budget_for(budgets, [_key(p) for p in notebooks], "the budget file")
    if out is not None:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(f"the output folder {out} is a file; choose a folder")
        out.mkdir(parents=True, exist_ok=True)
    print(hardware.report().summary(), flush=True)
    results = []
    for i, path in enumerate(notebooks, 1):
        print(f"[{i}/{len(notebooks)}] {path.name} ...", end=" ", flush=True)
        result = _execute(path, out, timeout, html)
        result.budget = None if budgets is None else budgets[result.notebook]
        over = f" (budget {result.budget:.0f} s: OVER)" if result.over_budget else ""
        print(f"{'pass' if result.ok else 'FAIL'} in {result.seconds:.1f} s{over}", flush=True)
        if result.error:
            print(f"    {result.error}", flush=True)
        results.append(result)
    print(f"\n{_table(results)}")
    if out is not None:
        _write_summary(out, results, append)
        print(f"\nExecuted notebooks, HTML and summary are in {out}/")
    return results


def _write_summary(out: Path, results: list[_Result], append: bool) -> None:
    """Write (or add this run to) ``out``'s summary; runners appending side by side take turns."""
    import fcntl

    run = {
        "python": sys.executable,
        "hardware": hardware.report().as_dict(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "notebooks": [asdict(r) for r in results],
    }
    with open(out / ".summary.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        runs = _previous_runs(out / "summary.json") if append else []
        for earlier in runs:  # a later run of a notebook replaces its earlier line
            names = {r.notebook for r in results}
            earlier["notebooks"] = [n for n in earlier["notebooks"] if n["notebook"] not in names]
        runs = [r for r in runs if r["notebooks"]] + [run]
        every = [_Result(**n) for r in runs for n in r["notebooks"]]
        record = {"runs": runs, "notebooks": [asdict(r) for r in every]}
        write_text(out / "summary.json", json.dumps(record, indent=2) + "\n")
        write_text(out / "summary.txt", f"{_table(every)!r}\n")


def _previous_runs(path: Path) -> list[dict]:
    """Return the runs of an earlier summary; none if it is missing or of another shape."""
    try:
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        return [run for run in runs if all(_Result(**n) for n in run["notebooks"])]
    except (OSError, ValueError, KeyError, TypeError):  # TypeError: fields of another shape
        return []


#: What every notebook kernel gets unless the caller set it (the Makefile exports the same).
KERNEL_ENVIRONMENT = {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "3"}


def _kernel_environment() -> None:
    """Set what :data:`KERNEL_ENVIRONMENT` names and this process has not (kernels inherit it)."""
    for name, value in KERNEL_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def main(argv: list[str] | None = None) -> int:
    """Run the command line.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 when every notebook passed, 1 otherwise, 2 for bad arguments (before any notebook runs).
    """
    parser = argparse.ArgumentParser(
        prog="python -m mptutor.notebooks",
        description="Execute notebooks top to bottom and summarise the run.",
    )
    parser.add_argument("paths", nargs="+", help="notebooks or folders of notebooks")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", default="build", help="output folder (default: build)")
    where.add_argument("--in-place", action="store_true", help="overwrite each notebook")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument("--no-html", action="store_true", help="skip the HTML renderings")
    parser.add_argument("--append", action="store_true", help="add to the folder's summary")
    parser.add_argument(
        "--budgets",
        metavar="FILE",
        help="seconds per notebook (JSON); enforced under CI=true or MPTUTOR_BUDGETS=1",
    )
    args = parser.parse_args(argv)
    if args.append and args.in_place:
        parser.error("--append adds to a summary in an output folder; --in-place writes none")
    if args.timeout < 1:
        parser.error(f"--timeout must be a whole number of seconds >= 1, got {args.timeout}")
    out = None if args.in_place else Path(args.out)
    _kernel_environment()
    try:
        enforced = budgets_enforced()
        budgets = None if args.budgets is None else load_budgets(args.budgets)
        results = _run_all(args.paths, out, args.timeout, not args.no_html, args.append, budgets)
    except (OSError, ValueError) as exc:  # a bad path, output or budget file: nothing has run
        print(f"error: {exc}", file=sys.stderr)
        return 2
    over = [r for r in results if r.over_budget]
    if over:
        names = ", ".join(f"{r.notebook} ({r.seconds:.0f} s > {r.budget:.0f} s)" for r in over)
        verdict = "enforced: the run fails" if enforced else "not enforced here"
        print(f"over budget ({verdict}; {_BUDGETS_VAR}, CI): {names}", file=sys.stderr)
    return 0 if all(r.ok for r in results) and not (enforced and over) else 1


# The pytest plugin: `pytest -p mptutor.notebooks --notebook-budgets FILE --nbval ...`.


def pytest_addoption(parser: Any) -> None:
    """Add ``--notebook-budgets`` to pytest's options."""
    parser.addoption(
        "--notebook-budgets",
        metavar="FILE",
        help="seconds per notebook (JSON, mptutor.notebooks): each notebook's time is printed, "
        "and under CI=true or MPTUTOR_BUDGETS=1 a notebook over budget fails the session",
    )


def pytest_configure(config: Any) -> None:
    """Read the budget file, before any notebook runs, and start timing the notebooks."""
    import pytest

    path = config.getoption("--notebook-budgets")
    try:
        budgets = None if path is None else load_budgets(path)
        enforced = budgets_enforced()
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    _kernel_environment()  # before nbval starts any kernel
    config.pluginmanager.register(_NotebookTimes(path, budgets, enforced), "mptutor-notebook-times")


class _NotebookTimes:
    """Seconds per notebook from nbval's cell reports; the table; the budget verdict."""

    def __init__(self, path: str | None, budgets: dict[str, float] | None, enforced: bool):
        self.path, self.budgets, self.enforced = path, budgets, enforced
        self.seconds: dict[str, float] = {}  # by notebook file, in the order they ran

    def pytest_collection_finish(self, session: Any) -> None:
        import pytest

        files = {item.nodeid.split("::")[0] for item in session.items}
        names = sorted(_key(f) for f in files if f.endswith(".ipynb"))
        try:
            _budget_for(self.budgets, names, str(self.path))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None

    def pytest_runtest_logreport(self, report: Any) -> None:
        file = report.nodeid.split("::")[0]
        if file.endswith(".ipynb"):  # setup (the kernel's start), call and teardown of a cell
            self.seconds[file] = self.seconds.get(file, 0.0) + report.duration

    def _over(self) -> list[tuple[str, float, float]]:
        if self.budgets is None:
            return []
        found = ((_key(f), s, self.budgets[_key(f)]) for f, s in self.seconds.items())
        return [(name, s, budget) for name, s, budget in found if s > budget]

    def pytest_sessionfinish(self, session: Any) -> None:
        import pytest

        if self.enforced and self._over() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.seconds:
            return
        budgets = self.budgets or {}
        rows = [
            {
                "notebook": _key(f),
                "seconds": f"{s:.1f}",
                "budget": _budget_cell(s, budgets.get(_key(f))),
            }
            for f, s in self.seconds.items()
        ]
        total = sum(self.seconds.values())
        terminalreporter.section("seconds per notebook")
        title = f"{len(rows)} notebooks, {total:.0f} s"
        terminalreporter.write_line(repr(Table(rows, title=title)))
        over = self._over()
        if over:
            names = ", ".join(f"{n} ({s:.0f} s > {b:.0f} s)" for n, s, b in over)
            verdict = "enforced: the session fails" if self.enforced else "not enforced here"
            terminalreporter.write_line(f"over budget ({verdict}; {_BUDGETS_VAR}, CI): {names}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
