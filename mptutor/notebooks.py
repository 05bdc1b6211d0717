"""Execute notebooks top to bottom, save executed copies and HTML, and summarise the run.

Command line (what ``make run`` and ``make notebooks`` call)::

    python -m mptutor.notebooks notebooks/pytorch --out build   # build/pytorch/*.ipynb + .html
    python -m mptutor.notebooks notebooks/gluon --out build --append   # add to the summary
    python -m mptutor.notebooks notebooks/pytorch --in-place    # refresh the committed outputs

Executed copies keep the name of the folder each notebook is in (``build/pytorch/...``), so
notebooks of several tracks, run by several environments, land side by side. ``--append``
adds this run's results to the ``summary.json``/``summary.txt`` already in the output folder
(a later run of the same notebook replaces its line) instead of starting a new summary.

A notebook that fails is reported, the others still run, and the exit status is 1: a failing
cell, a cell over ``--timeout``, a kernel that dies, a kernel that is not installed, a file
that is not a notebook are each recorded with the reason, and the summary is written. In
``--in-place`` mode a failed notebook is left as it was: its committed file is never replaced
by a half-run copy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from mptutor import hardware
from mptutor.atomic import write_text
from mptutor._checks import check_scalar
from mptutor.table import Table

__all__ = ["NotebookResult", "find_notebooks", "execute_notebook", "run_all", "main"]


@dataclass
class NotebookResult:
    """Outcome of executing one notebook.

    Attributes
    ----------
    notebook : str
        The notebook's folder and file name, e.g. ``"pytorch/01-floating-point-formats.ipynb"``.
    ok : bool
        Whether every cell ran without error.
    seconds : float
        Wall time of the execution.
    device : str
        One-line description of the hardware it ran on.
    error : str
        The error's last line, empty when ``ok``.
    outputs : list of str
        Files written for this notebook.
    """

    notebook: str
    ok: bool
    seconds: float
    device: str
    error: str = ""
    outputs: list[str] | None = None


def find_notebooks(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand files and folders into a sorted list of notebooks.

    Parameters
    ----------
    paths : path-like or iterable of path-like
        Notebook files or folders holding them (not searched recursively).

    Returns
    -------
    list of pathlib.Path
        The notebooks, folders expanded in name order.

    Raises
    ------
    TypeError
        If ``paths`` is not a path or a list of paths.
    FileNotFoundError
        If a path does not exist, or a folder holds no notebook.
    ValueError
        If a file is not an ``.ipynb`` notebook.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]  # one notebook or folder
    elif not isinstance(paths, Iterable):
        raise TypeError(f"paths must be notebooks or folders (a list of paths), got {paths!r:.80}")
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted(p for p in path.glob("*.ipynb") if not p.name.startswith("."))
            if not inside:
                raise FileNotFoundError(f"no .ipynb notebooks in folder {path}")
            found.extend(inside)
        elif path.is_file():
            if path.suffix != ".ipynb":
                raise ValueError(f"{path} is not a Jupyter notebook (.ipynb)")
            found.append(path)
        else:
            raise FileNotFoundError(f"no such notebook or folder: {path}")
    return found


def execute_notebook(
    path: Path,
    out_dir: Path | None,
    timeout: int = 1800,
    html: bool = True,
) -> NotebookResult:
    """Execute one notebook in a fresh kernel, in the notebook's own folder.

    Parameters
    ----------
    path : pathlib.Path
        The notebook.
    out_dir : pathlib.Path or None
        Where to write the executed copy (and HTML), in a sub-folder named like the notebook's
        own folder; ``None`` replaces ``path`` itself, but only when every cell succeeded.
    timeout : int, optional
        Seconds allowed per cell, at least 1.
    html : bool, optional
        Also write an HTML rendering next to the executed copy (ignored in place).

    Returns
    -------
    NotebookResult
        What happened. A notebook that cannot run (not a notebook file, a kernel that is not
        installed, a kernel that dies) is a failed result whose ``error`` says why.

    Raises
    ------
    TypeError, ValueError
        If ``timeout`` is not a positive int.
    """
    import nbformat
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    timeout = check_scalar(timeout, "timeout (seconds allowed per cell)", int, min_val=1)
    path = Path(path)
    start = time.perf_counter()
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError, AttributeError) as exc:  # NotJSONError is a ValueError
        return _failed(path, start, f"{path} is not a readable notebook: {exc}")
    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel,
        # The kernel's own log (e.g. a note on its local TCP sockets) is not the notebook's
        # output; keep the run's console to notebook progress and errors.
        extra_arguments=["--log-level=ERROR"],
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    error = ""
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as exc:
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        error = lines[-1] if lines else type(exc).__name__
    except DeadKernelError as exc:
        error = f"DeadKernelError: {exc} (the kernel process exited, e.g. out of memory)"
    except NoSuchKernel:
        return _failed(
            path,
            start,
            f"NoSuchKernel: the notebook asks for kernel {kernel!r}, which is not installed "
            "(jupyter kernelspec list); install it or change metadata.kernelspec.name",
        )
    seconds = time.perf_counter() - start
    ok = not error
    written: list[str] = []
    if out_dir is None:
        if ok:
            write_text(path, nbformat.writes(nb) + "\n")
            written.append(str(path))
    else:
        target = out_dir / path.parent.name / path.name
        write_text(target, nbformat.writes(nb) + "\n")
        written.append(str(target))
        if html:
            from nbconvert import HTMLExporter

            body, _ = HTMLExporter().from_notebook_node(nb)
            page = target.with_suffix(".html")
            write_text(page, body)
            written.append(str(page))
    return NotebookResult(_name(path), ok, round(seconds, 1), _device(), error, written)


def _name(path: Path) -> str:
    """Name a notebook by its folder and file name, as results and executed copies do."""
    return f"{path.parent.name}/{path.name}"


def _device() -> str:
    """Describe the hardware in one line."""
    return hardware.report().summary()


def _failed(path: Path, start: float, error: str) -> NotebookResult:
    """Record a notebook that could not run at all."""
    return NotebookResult(
        _name(path), False, round(time.perf_counter() - start, 1), _device(), error, []
    )


def summary_table(results: Sequence[NotebookResult]) -> Table:
    """Tabulate results: notebook, status, seconds, hardware.

    Parameters
    ----------
    results : sequence of NotebookResult
        From :func:`run_all`.

    Returns
    -------
    Table
        One row per notebook.
    """
    rows = [
        {
            "notebook": r.notebook,
            "status": "pass" if r.ok else "FAIL",
            "seconds": f"{r.seconds:.1f}",
            "hardware": r.device,
            "error": r.error[:80],
        }
        for r in results
    ]
    return Table(rows)


def run_all(
    paths: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str] | None = "build",
    timeout: int = 1800,
    html: bool = True,
    append: bool = False,
) -> list[NotebookResult]:
    """Execute every notebook, printing progress, and write a summary next to the outputs.

    Parameters
    ----------
    paths : iterable of path-like
        Notebooks or folders of notebooks.
    out_dir : path-like or None, optional
        Output folder; ``None`` executes in place.
    timeout : int, optional
        Seconds allowed per cell, at least 1.
    html : bool, optional
        Also write HTML renderings.
    append : bool, optional
        Add to the summary already in ``out_dir`` (from a run in another environment) instead
        of replacing it.

    Returns
    -------
    list of NotebookResult
        One per notebook, in order; a notebook that could not run at all is a failed result
        with the reason, and the others still run.

    Raises
    ------
    FileNotFoundError, ValueError
        If a path is not a notebook or a folder of notebooks (see :func:`find_notebooks`), or
        no path is given.
    NotADirectoryError
        If ``out_dir`` is a file. These are checked before any notebook runs.
    TypeError, ValueError
        If ``timeout`` is not a positive int.
    """
    timeout = check_scalar(timeout, "timeout (seconds allowed per cell)", int, min_val=1)
    notebooks = find_notebooks(paths)
    if not notebooks:
        raise ValueError("no notebooks given: name notebooks or folders of notebooks")
    out = None if out_dir is None else Path(out_dir)
    if out is not None:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(f"the output folder {out} is a file; choose a folder")
        out.mkdir(parents=True, exist_ok=True)
    print(_device(), flush=True)
    results = []
    for i, nb_path in enumerate(notebooks, 1):
        print(f"[{i}/{len(notebooks)}] {nb_path.name} ...", end=" ", flush=True)
        start = time.perf_counter()
        try:
            result = execute_notebook(nb_path, out, timeout=timeout, html=html)
        except Exception as exc:  # noqa: BLE001 - one notebook must not stop the others
            result = _failed(nb_path, start, f"{type(exc).__name__}: {exc}")
        print(f"{'pass' if result.ok else 'FAIL'} in {result.seconds:.1f} s", flush=True)
        if result.error:
            print(f"    {result.error}", flush=True)
        results.append(result)
    print()
    print(summary_table(results))
    if out is not None:
        run = {
            "python": sys.executable,
            "hardware": hardware.report().as_dict(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "notebooks": [asdict(r) for r in results],
        }
        runs = _previous_runs(out / "summary.json") if append else []
        names = {r.notebook for r in results}
        for earlier in runs:
            earlier["notebooks"] = [n for n in earlier["notebooks"] if n["notebook"] not in names]
        runs = [r for r in runs if r["notebooks"]] + [run]
        every = [NotebookResult(**n) for r in runs for n in r["notebooks"]]
        record = {"runs": runs, "notebooks": [asdict(r) for r in every]}
        write_text(out / "summary.json", json.dumps(record, indent=2) + "\n")
        write_text(out / "summary.txt", repr(summary_table(every)) + "\n")
        print(f"\nExecuted notebooks, HTML and summary are in {out}/")
    return results


def _previous_runs(path: Path) -> list[dict]:
    """Read the runs of an earlier summary; a missing or unreadable one counts as none."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        runs = record["runs"]
        for run in runs:
            for entry in run["notebooks"]:
                NotebookResult(**entry)  # raises TypeError on a summary of another shape
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return runs


def _seconds(text: str) -> int:
    """Parse ``--timeout``: a whole number of seconds, at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of seconds >= 1, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 when every notebook passed, 1 otherwise, 2 for bad arguments (a bad path, an output
        folder that is a file, a timeout below 1 s), found before any notebook runs.
    """
    parser = argparse.ArgumentParser(
        prog="python -m mptutor.notebooks",
        description="Execute notebooks top to bottom and summarise the run.",
    )
    parser.add_argument("paths", nargs="+", help="notebooks or folders of notebooks")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", default="build", help="output folder (default: build)")
    where.add_argument(
        "--in-place", action="store_true", help="overwrite each notebook with its executed copy"
    )
    parser.add_argument(
        "--timeout", type=_seconds, default=1800, help="seconds allowed per cell (default: 1800)"
    )
    parser.add_argument("--no-html", action="store_true", help="skip the HTML renderings")
    parser.add_argument(
        "--append", action="store_true", help="add to the summary already in the output folder"
    )
    args = parser.parse_args(argv)
    if args.append and args.in_place:
        parser.error("--append adds to a summary in an output folder; --in-place writes none")
    try:
        results = run_all(
            args.paths,
            out_dir=None if args.in_place else args.out,
            timeout=args.timeout,
            html=not args.no_html,
            append=args.append,
        )
    except (OSError, ValueError) as exc:  # a bad path or output folder: nothing has run
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
