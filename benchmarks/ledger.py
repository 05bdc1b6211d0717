"""The GPU plan's bookkeeping: each part's share of a command's time, and the nbval ledger.

A GPU host is lent for a short window (benchmarks/gpu-plan.sh, README "GPU plan"), so the plan
keeps two kinds of account:

- **Time.** :class:`Budget` is the seconds a part of ``gpu-plan.sh first`` may spend. The
  benchmark scripts take ``--budget-s`` and start no new unit of work (a GEMM size, a ResNet50
  mode and layout, an FP8 width) once what is left is shorter than what such a unit took, so
  that they stop inside their share and still write a record of what they measured.
- **Which notebooks passed strict nbval on a GPU.** The ledger
  (``data/results/ledger/gpu-ledger.json``) holds one entry per notebook of the GPU path: its
  status (``passed``, ``failed`` or ``stopped`` when the chunk's time ran out), the SHA-256 of
  the notebook file it was for (no ``.git`` travels to a GPU host, so the file's content
  identifies its version), the GPU, the PyTorch version, the commit (``MPTUTOR_COMMIT``), the
  date, the seconds nbval took, and for a failure the first failure's report and the end of
  its output (:func:`failure_detail`). ``gpu-plan.sh next``
  runs the notebooks that are due, in chunks that fit one command, and writes the updated
  ledger into its output folder; committing it in place of the old one is how the next window
  resumes.

The "due" rule (:func:`due`): a notebook is due unless its entry is a pass on a GPU for the
file's current content, or a failure on a GPU for its current content (rerunning an unchanged
notebook that failed would fail again: fix it first, or name it with ``--retry-failed``). So a
notebook that changed since its entry is due again, and so is one that was stopped for time.
The order (:func:`ordered`) puts the notebooks that show GPU figures first. The GPU path is the
PyTorch track (:func:`gpu_path`); a notebook in :data:`LEFT_OUT` is never run by ``next``, and
its entry, if any, stays as the record of what happened.

Usage::

    python benchmarks/ledger.py status [--ledger FILE]
    python benchmarks/ledger.py next OUT_DIR --budget-s 420 [--ledger FILE] [--python PY]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # mptutor, when run as a script from elsewhere

from mptutor._atomic import write_text  # noqa: E402

#: Where the ledger is committed: beside the records, in a folder of its own, since every
#: ``*.json`` directly in data/results/ is read as a measurement record.
LEDGER = ROOT / "data" / "results" / "ledger" / "gpu-ledger.json"
FORMAT = 1
STATUSES = ("passed", "failed", "stopped")
#: The notebooks that show GPU figures, run first (in this order).
FIRST = (
    "notebooks/pytorch/06-tensor-core-performance.ipynb",
    "notebooks/pytorch/09-transformers-in-16-bits.ipynb",
    "notebooks/pytorch/11-fp8-and-block-scaling.ipynb",
)
#: Notebooks kept off the GPU path, and why. Their ledger entries may stay, as the record of
#: what happened before they were left out; ``next`` never runs them and ``status`` says why.
LEFT_OUT = {
    # keras/02 shows the record of benchmarks/keras_cnn_experiment.py, which runs on Keras's
    # PyTorch backend on a GPU host (`gpu-plan.sh keras`), but the notebook itself imports
    # TensorFlow in its setup cell (tf.config, tf.device, tf.raw_ops): its strict nbval failed
    # from the first cell on an H200 host, which has no TensorFlow.
    "notebooks/keras/02-keras-cnn-experiment.ipynb": (
        "imports TensorFlow in its setup cell, and a GPU host has no TensorFlow (its wheel is "
        "far larger than what can be carried to the host); its benchmark runs there with "
        "`gpu-plan.sh keras`"
    ),
}
#: The most characters of a failed notebook's output an entry keeps (:func:`failure_detail`).
DETAIL_CHARS = 2000
#: Seconds assumed for a notebook with no recorded time when a chunk is planned.
UNKNOWN_S = 90.0
#: A notebook is not started with less than this left of the chunk.
MIN_START_S = 30.0
#: The strict nbval command (tests/nbval-sanitize.cfg, never --nbval-lax).
NBVAL = ["-m", "pytest", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
         "--nbval-sanitize-with", "tests/nbval-sanitize.cfg",
         "--nbval-cell-timeout=400"]  # fmt: skip


class Budget:
    """Seconds a part may spend, counted from its creation; ``None`` means no limit.

    Parameters
    ----------
    seconds : float or None
        The part's share. Must be positive.
    clock : callable, optional
        Returns seconds (``time.monotonic``); tests pass their own.
    """

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        if seconds is not None and not seconds > 0:
            raise ValueError(f"a budget must be a positive number of seconds, got {seconds!r}")
        self.seconds, self._clock, self._start = seconds, clock, clock()

    def spent(self) -> float:
        """Seconds since the budget was made."""
        return self._clock() - self._start

    def left(self) -> float:
        """Seconds left (``inf`` without a limit; negative once overrun)."""
        return float("inf") if self.seconds is None else self.seconds - self.spent()

    def allows(self, unit_s: float = 0.0) -> bool:
        """Whether a unit of work expected to take ``unit_s`` seconds still fits."""
        return self.left() > max(unit_s, 0.0)

    def why_not(self) -> str:
        """The reason recorded for a unit that was not started."""
        return (
            f"not started: {self.spent():.0f} s of this part's {self.seconds:g} s were spent "
            "and the rest was shorter than such a unit took"
        )


# --- the ledger ---------------------------------------------------------------------------------


def content_hash(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes: which version of a notebook an entry is for."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def gpu_path(root: Path = ROOT) -> list[str]:
    """The notebooks of the GPU path (repository-relative): PyTorch's.

    The Keras notebooks (keras/02 included, :data:`LEFT_OUT`) and the Gluon track need
    TensorFlow or MXNet, which a GPU host does not bring.
    """
    found = sorted(
        p.relative_to(root).as_posix() for p in (root / "notebooks/pytorch").glob("*.ipynb")
    )
    return [nb for nb in found if nb not in LEFT_OUT]


def ordered(notebooks: Iterable[str]) -> list[str]:
    """The notebooks with those that show GPU figures (:data:`FIRST`) first, the rest sorted."""
    notebooks = list(dict.fromkeys(notebooks))
    first = [nb for nb in FIRST if nb in notebooks]
    return first + sorted(nb for nb in notebooks if nb not in first)


def empty() -> dict[str, Any]:
    """A ledger with no entries."""
    return {"format": FORMAT, "notebooks": {}}


def validate(ledger: Any, where: str = "ledger") -> dict[str, Any]:
    """Check a ledger's format; return it. ValueError naming the first thing wrong."""
    if not isinstance(ledger, dict) or ledger.get("format") != FORMAT:
        raise ValueError(f"{where}: not a ledger of format {FORMAT}")
    entries = ledger.get("notebooks")
    if not isinstance(entries, dict):
        raise ValueError(f"{where}: 'notebooks' must be an object of entries")
    for name, e in entries.items():
        if not isinstance(e, dict):
            raise ValueError(f"{where}: the entry of {name} must be an object")
        missing = [k for k in ("status", "sha256", "seconds", "gpu", "torch") if k not in e]
        if missing:
            raise ValueError(f"{where}: the entry of {name} lacks {missing}")
        if e["status"] not in STATUSES:
            raise ValueError(f"{where}: {name} has status {e['status']!r}, not one of {STATUSES}")
        if not isinstance(e["seconds"], int | float) or e["seconds"] < 0:
            raise ValueError(f"{where}: {name} has seconds {e['seconds']!r}")
    return ledger


def read(path: str | os.PathLike = LEDGER) -> dict[str, Any]:
    """Read a ledger file (an empty ledger when the file does not exist)."""
    path = Path(path)
    if not path.exists():
        return empty()
    return validate(json.loads(path.read_text(encoding="utf-8")), str(path))


def write(ledger: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write a ledger (sorted, indented), whole or not at all."""
    validate(ledger)
    text = json.dumps(ledger, indent=1, sort_keys=True) + "\n"
    write_text(Path(path), text)
    return Path(path)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_FAILURES = re.compile(r"^=+ FAILURES =+$", re.M)
_SECTION = re.compile(r"^_{3,} .* _{3,}$", re.M)  # pytest's "____ test id ____" headers
_BANNER = re.compile(r"^={3,}( .* )?={3,}$", re.M)


def failure_detail(output: str, limit: int = DETAIL_CHARS) -> str:
    """What a failed entry keeps of pytest's output: the first failure's report and the end.

    ANSI colour codes are stripped. When the output is longer than ``limit`` characters, the
    first section after pytest's ``FAILURES`` banner (the first error, which later ones often
    follow from) is kept, cut to fit, then the output's end (the summary of every failure),
    joined by a line that says what was left out; the result is at most ``limit`` characters.
    """
    if limit < 200:
        raise ValueError(f"limit must be at least 200 characters, got {limit!r}")
    text = _ANSI.sub("", output)
    if len(text) <= limit:
        return text
    first, pos = "", 0
    banner = _FAILURES.search(text)
    if banner:
        start = _SECTION.search(text, banner.end())
        if start:
            ends = [m.start() for m in (_SECTION.search(text, start.end()),
                                        _BANNER.search(text, start.end())) if m]  # fmt: skip
            pos = start.start()
            first = text[pos : min(ends, default=len(text))].rstrip("\n")
    if not first:
        return text[-limit:]
    gap = "\n[... output left out ...]\n"
    room = limit - len(gap)
    head = first[: room * 3 // 5]
    head_end = pos + len(head)
    tail_start = len(text) - (room - len(head))
    if head_end >= tail_start:  # the end alone reaches back over the first failure
        return text[-limit:]
    return head + gap + text[tail_start:]


def record(
    ledger: dict[str, Any],
    notebook: str,
    *,
    status: str,
    sha256: str,
    seconds: float,
    gpu: str | None,
    torch: str | None,
    commit: str | None = None,
    detail: str | None = None,
    date: str | None = None,
) -> dict[str, Any]:
    """Return a new ledger with ``notebook``'s entry replaced (the latest run is kept)."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    entry = {
        "status": status, "sha256": sha256, "seconds": round(float(seconds), 1), "gpu": gpu,
        "torch": torch, "commit": commit,
        "date": date or _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }  # fmt: skip
    if detail:
        entry["detail"] = failure_detail(detail)
    out = validate({**ledger, "notebooks": {**ledger["notebooks"], notebook: entry}})
    return out


def due(
    ledger: dict[str, Any], hashes: dict[str, str], retry_failed: bool = False
) -> dict[str, str]:
    """Which notebooks are due, and why; the rest are left out.

    Parameters
    ----------
    ledger : dict
        A ledger (:func:`read`).
    hashes : dict
        Notebook to the SHA-256 of its file now (:func:`content_hash`).
    retry_failed : bool, optional
        Rerun a failure even when the notebook has not changed.

    Returns
    -------
    dict
        Notebook to reason, in the order of ``hashes``.
    """
    out = {}
    for nb, sha in hashes.items():
        e = ledger["notebooks"].get(nb)
        if e is None:
            out[nb] = "no entry"
        elif e["sha256"] != sha:
            out[nb] = f"changed since its {e['status']} entry"
        elif not e["gpu"]:
            out[nb] = f"{e['status']} only off a GPU (a rehearsal)"
        elif e["status"] == "stopped":
            out[nb] = f"stopped after {e['seconds']:g} s"
        elif e["status"] == "failed" and retry_failed:
            out[nb] = "failed, retried"
    return out


def expected_s(ledger: dict[str, Any], notebook: str) -> float | None:
    """The recorded seconds of a notebook on a GPU (a lower bound when it was stopped)."""
    e = ledger["notebooks"].get(notebook)
    return float(e["seconds"]) if e and e["gpu"] else None


@dataclass(frozen=True)
class Chunk:
    """The notebooks one command runs, and those left for a later one with the reason."""

    run: list[str]
    later: dict[str, str]


def plan_chunk(
    notebooks: Sequence[str],
    times: dict[str, float | None],
    budget_s: float,
    unknown_s: float = UNKNOWN_S,
) -> Chunk:
    """Pick, in order, the notebooks whose recorded times fit in ``budget_s`` together.

    A notebook without a recorded time counts as ``unknown_s``. One whose time does not fit in
    what is left waits for a later chunk, and smaller ones after it may still go in; one whose
    recorded time is longer than a whole chunk is left out with that reason (it needs a longer
    command).
    """
    if not budget_s > 0:
        raise ValueError(f"budget_s must be positive, got {budget_s!r}")
    run, later, total = [], {}, 0.0
    for nb in notebooks:
        need = times.get(nb)
        need = unknown_s if need is None else need
        if need > budget_s:
            later[nb] = f"took {need:g} s before, longer than a chunk of {budget_s:g} s"
        elif total + need <= budget_s:
            run.append(nb)
            total += need
        else:
            later[nb] = f"needs {need:g} s, {budget_s - total:g} s of the chunk left"
    return Chunk(run, later)


# --- running a chunk -------------------------------------------------------------------------


def _environment(python: str) -> tuple[str | None, str | None]:
    """The GPU name (None without one) and PyTorch version that ``python`` sees."""
    code = (
        "import torch; print(torch.__version__); "
        "print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    version, gpu = (done.stdout.splitlines() + ["", ""])[:2]
    return gpu or None, version or None


def run_chunk(
    ledger: dict[str, Any],
    notebooks: Sequence[str],
    budget: Budget,
    run_one: Callable[[str, float], tuple[str, str]],
    root: Path = ROOT,
    **provenance: Any,
) -> dict[str, Any]:
    """Run notebooks one at a time while the budget lasts; return the updated ledger.

    ``run_one(notebook, seconds_left)`` runs one notebook, stopped after ``seconds_left``, and
    returns its status and output; notebooks are paths under ``root``. ``provenance`` (``gpu``,
    ``torch``, ``commit``) goes into each entry.
    """
    for nb in notebooks:
        left = budget.left()
        if left < MIN_START_S:
            print(f"not started, {max(left, 0):.0f} s left of the chunk: {nb}", flush=True)
            continue
        start = budget.spent()
        status, output = run_one(nb, left)
        took = budget.spent() - start
        print(f"{status} in {took:.0f} s: {nb}", flush=True)
        ledger = record(
            ledger, nb, status=status, sha256=content_hash(root / nb), seconds=took,
            detail=output if status != "passed" else None, **provenance,
        )  # fmt: skip
    return ledger


def nbval_runner(python: str, env: dict[str, str]) -> Callable[[str, float], tuple[str, str]]:
    """A ``run_one`` for :func:`run_chunk`: strict nbval of one notebook with ``python``."""

    def run_one(nb: str, seconds: float) -> tuple[str, str]:
        # a session of its own, so that a stop takes nbval's kernel down with pytest
        proc = subprocess.Popen(
            [python, *NBVAL, nb], cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            return "stopped", output
        print(output[-3000:], flush=True)
        return ("passed" if proc.returncode == 0 else "failed"), output

    return run_one


def _hashes(notebooks: Iterable[str]) -> dict[str, str]:
    return {nb: content_hash(ROOT / nb) for nb in notebooks}


def status_lines(ledger: dict[str, Any], retry_failed: bool = False) -> list[str]:
    """One line per notebook of the GPU path: due or not, and its entry."""
    hashes = _hashes(ordered(gpu_path()))
    reasons = due(ledger, hashes, retry_failed)
    lines = []
    for nb in hashes:
        e = ledger["notebooks"].get(nb)
        entry = (
            f"{e['status']} on {e['gpu'] or 'no GPU'}, torch {e['torch']}, "
            f"{e['seconds']:g} s, {e['date']}"
            if e
            else "no entry"
        )
        lines.append(f"{'due ' if nb in reasons else 'done'}  {nb}: {reasons.get(nb, entry)}")
    for nb, why in LEFT_OUT.items():
        e = ledger["notebooks"].get(nb)
        last = (
            f"; its last entry: {e['status']} on {e['gpu'] or 'no GPU'}, {e['date']}" if e else ""
        )
        lines.append(f"off   {nb}: not on the GPU path: {why}{last}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """``status``: the ledger against the notebooks; ``next``: run the next chunk.

    ``next`` exits with 1 when a notebook failed; one stopped for time is not a failure.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", help="which notebooks are due")
    nx = sub.add_parser("next", help="strict nbval of the next chunk; the ledger into OUT_DIR")
    nx.add_argument("out", type=Path, help="the updated ledger goes to OUT_DIR/gpu-ledger.json")
    nx.add_argument("--budget-s", type=float, required=True, help="seconds for the chunk")
    nx.add_argument("--python", default=sys.executable, help="the Python that runs nbval")
    for p in (st, nx):
        p.add_argument("--ledger", type=Path, default=LEDGER)
        p.add_argument("--retry-failed", action="store_true")
    args = parser.parse_args(argv)
    ledger = read(args.ledger)
    if args.command == "status":
        print("\n".join(status_lines(ledger, args.retry_failed)))
        return 0
    budget = Budget(args.budget_s)
    reasons = due(ledger, _hashes(ordered(gpu_path())), args.retry_failed)
    chunk = plan_chunk(list(reasons), {nb: expected_s(ledger, nb) for nb in reasons},
                       args.budget_s)  # fmt: skip
    print(f"due: {len(reasons)} notebooks; this chunk ({args.budget_s:g} s): {len(chunk.run)}")
    for nb in chunk.run:
        print(f"  run    {nb} ({reasons[nb]})")
    for nb, why in chunk.later.items():
        print(f"  later  {nb} ({why})")
    gpu, torch = _environment(args.python)
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    ledger = run_chunk(
        ledger, chunk.run, budget, nbval_runner(args.python, env), gpu=gpu, torch=torch,
        commit=os.environ.get("MPTUTOR_COMMIT"),
    )  # fmt: skip
    path = write(ledger, args.out / "gpu-ledger.json")
    print(f"ledger written to {path}")
    print("\n".join(status_lines(ledger, args.retry_failed)))
    entries = ledger["notebooks"]
    return 1 if any(entries.get(nb, {}).get("status") == "failed" for nb in chunk.run) else 0


if __name__ == "__main__":
    sys.exit(main())
