"""Execute notebooks top to bottom, save executed copies and HTML, and summarise the run.

Command line (what ``make run`` and ``make notebooks`` call)::

    python -m mptutor.notebooks notebooks/pytorch --out build   # build/pytorch/*.ipynb + .html
    python -m mptutor.notebooks notebooks/gluon --out build --append   # add to the summary
    python -m mptutor.notebooks notebooks/pytorch --in-place    # refresh the committed outputs

Executed copies keep the name of their notebook's folder (``build/pytorch/...``), so several
tracks, run by several environments, land side by side; ``--append`` adds this run to the
``summary.json``/``summary.txt`` already there. A notebook that fails (a cell, a cell over
``--timeout``, a kernel that dies or is not installed, a file that is no notebook) is recorded
with its reason, the others still run, and the exit status is 1. ``--in-place`` never replaces
a notebook with a half-run copy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mptutor import hardware
from mptutor._atomic import write_text
from mptutor.table import Table

__all__ = ["main"]


@dataclass
class _Result:
    """Outcome of one notebook: ``folder/file`` name, success, seconds, hardware, error."""

    notebook: str
    ok: bool
    seconds: float
    device: str
    error: str = ""
    outputs: list[str] | None = None


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
    name = f"{path.parent.name}/{path.name}"
    return _Result(name, not error, seconds, hardware.report().summary(), error, written)


def _table(results: list[_Result]) -> Table:
    """Tabulate results: notebook, status, seconds, hardware, error."""
    return Table(
        {
            "notebook": r.notebook,
            "status": "pass" if r.ok else "FAIL",
            "seconds": f"{r.seconds:.1f}",
            "hardware": r.device,
            "error": r.error[:80],
        }
        for r in results
    )


def _run_all(
    paths: list[str], out: Path | None, timeout: int, html: bool, append: bool
) -> list[_Result]:
    """Execute every notebook, printing progress; write the summary into ``out``."""
    notebooks = _find_notebooks(paths)
    if out is not None:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(f"the output folder {out} is a file; choose a folder")
        out.mkdir(parents=True, exist_ok=True)
    print(hardware.report().summary(), flush=True)
    results = []
    for i, path in enumerate(notebooks, 1):
        print(f"[{i}/{len(notebooks)}] {path.name} ...", end=" ", flush=True)
        result = _execute(path, out, timeout, html)
        print(f"{'pass' if result.ok else 'FAIL'} in {result.seconds:.1f} s", flush=True)
        if result.error:
            print(f"    {result.error}", flush=True)
        results.append(result)
    print(f"\n{_table(results)}")
    if out is not None:
        run = {
            "python": sys.executable,
            "hardware": hardware.report().as_dict(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "notebooks": [asdict(r) for r in results],
        }
        runs = _previous_runs(out / "summary.json") if append else []
        for earlier in runs:  # a later run of a notebook replaces its earlier line
            names = {r.notebook for r in results}
            earlier["notebooks"] = [n for n in earlier["notebooks"] if n["notebook"] not in names]
        runs = [r for r in runs if r["notebooks"]] + [run]
        every = [_Result(**n) for r in runs for n in r["notebooks"]]
        record = {"runs": runs, "notebooks": [asdict(r) for r in every]}
        write_text(out / "summary.json", json.dumps(record, indent=2) + "\n")
        write_text(out / "summary.txt", f"{_table(every)!r}\n")
        print(f"\nExecuted notebooks, HTML and summary are in {out}/")
    return results


def _previous_runs(path: Path) -> list[dict]:
    """Return the runs of an earlier summary; none if it is missing or of another shape."""
    try:
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        return [run for run in runs if all(_Result(**n) for n in run["notebooks"])]
    except (OSError, ValueError, KeyError, TypeError):  # TypeError: fields of another shape
        return []


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
    args = parser.parse_args(argv)
    if args.append and args.in_place:
        parser.error("--append adds to a summary in an output folder; --in-place writes none")
    if args.timeout < 1:
        parser.error(f"--timeout must be a whole number of seconds >= 1, got {args.timeout}")
    out = None if args.in_place else Path(args.out)
    try:
        results = _run_all(args.paths, out, args.timeout, not args.no_html, args.append)
    except (OSError, ValueError) as exc:  # a bad path or output folder: nothing has run
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
