"""Checks on the committed notebooks that strict nbval alone would not catch."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(
    p for p in (ROOT / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
)
IGNORE = re.compile(r"\s*#\s*NBVAL_(IGNORE_OUTPUT|SKIP)")

# Each track's notebooks run in one environment; the Makefile and README say the same.
TRACKS = {
    "pytorch": {"framework": "torch", "requirements": "requirements.txt"},
    "keras": {"framework": "tensorflow", "requirements": "requirements.txt"},
    "gluon": {"framework": "mxnet", "requirements": "requirements-mxnet.txt"},
}
# Import names of the deep-learning frameworks; Keras 3 and TensorFlow are one framework here.
FRAMEWORK_OF_MODULE = {
    "torch": "torch",
    "torchvision": "torch",
    "tensorflow": "tensorflow",
    "keras": "tensorflow",
    "mxnet": "mxnet",
    "gluoncv": "mxnet",
    "jax": "jax",
    "paddle": "paddle",
}
# mptutor's own framework modules import their framework.
MPTUTOR_MODULE_FRAMEWORK = {"torch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}


def _rel(path):
    return path.relative_to(ROOT).as_posix()


def _code_cells(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    return nb, [c for c in nb["cells"] if c["cell_type"] == "code"]


def frameworks_imported(source: str) -> set[str]:
    """The deep-learning frameworks that import statements in ``source`` load."""
    found = set()
    statement = r"^\s*(?:from\s+([\w.]+)\s+import\s+([^\n#]+)|import\s+([^\n#]+))"
    for match in re.finditer(statement, source, re.M):
        if match.group(1):
            top = match.group(1).split(".")[0]
            if top == "mptutor":
                parts = match.group(1).split(".")
                names = [parts[1]] if len(parts) > 1 else re.findall(r"\w+", match.group(2))
                found |= {MPTUTOR_MODULE_FRAMEWORK.get(n) for n in names} - {None}
            elif top in FRAMEWORK_OF_MODULE:
                found.add(FRAMEWORK_OF_MODULE[top])
        else:
            for name in match.group(3).split(","):
                top = name.strip().split(" ")[0].split(".")[0]
                if top in FRAMEWORK_OF_MODULE:
                    found.add(FRAMEWORK_OF_MODULE[top])
                if name.strip().startswith("mptutor."):
                    sub = name.strip().split(" ")[0].split(".")[1]
                    if sub in MPTUTOR_MODULE_FRAMEWORK:
                        found.add(MPTUTOR_MODULE_FRAMEWORK[sub])
    return found


def test_there_are_notebooks_in_every_track():
    for track in TRACKS:
        assert list((ROOT / "notebooks" / track).glob("*.ipynb")), f"no notebooks in {track}/"
    assert {p.parent.name for p in NOTEBOOKS} <= set(TRACKS), "a notebook outside the tracks"


def test_the_makefile_runs_every_track_in_its_environment():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    main = re.search(r"^MAIN_NOTEBOOKS := (.*)$", makefile, re.M).group(1).split()
    mxnet = re.search(r"^MXNET_NOTEBOOKS := (.*)$", makefile, re.M).group(1).split()
    for track, info in TRACKS.items():
        where = main if info["requirements"] == "requirements.txt" else mxnet
        assert f"notebooks/{track}" in where


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import torch\nfrom torch import nn", {"torch"}),
        ("import numpy as np, torch", {"torch"}),
        ("import keras\nimport tensorflow as tf", {"tensorflow"}),
        ("from mptutor import torch as mpt", {"torch"}),
        ("from mptutor import formats, hardware, mxnet as mmx", {"mxnet"}),
        ("from mptutor.tensorflow import LossScaledStep", {"tensorflow"}),
        ("import torch\nimport mxnet as mx", {"torch", "mxnet"}),
        ("# import torch is a comment\nx = 'import mxnet'", set()),
        ("from mptutor import formats, plots\nimport numpy", set()),
    ],
)
def test_frameworks_imported_reads_imports(source, expected):
    assert frameworks_imported(source) == expected


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_rel)
def test_one_framework_per_notebook_the_one_of_its_track(path):
    _, cells = _code_cells(path)
    used = frameworks_imported("\n".join("".join(c["source"]) for c in cells))
    assert len(used) <= 1, f"imports several frameworks: {sorted(used)}"
    assert used <= {TRACKS[path.parent.name]["framework"]}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_rel)
def test_what_you_need_names_the_environment(path):
    nb, _ = _code_cells(path)
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    wanted = TRACKS[path.parent.name]["requirements"]
    assert re.search(rf"(?<![\w-]){re.escape(wanted)}", text), f"never names {wanted}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_rel)
def test_committed_executed_in_order_without_errors_or_warnings(path):
    nb, cells = _code_cells(path)
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), "re-run top to bottom: make notebooks"
    for cell in cells:
        for out in cell["outputs"]:
            assert out["output_type"] != "error", "".join(cell["source"])[:80]
            assert out.get("name") != "stderr", f"stderr output: {out.get('text', '')[:200]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_rel)
def test_most_outputs_are_checked_by_nbval(path):
    _, cells = _code_cells(path)
    ignored = [c for c in cells if IGNORE.match("".join(c["source"]))]
    assert len(ignored) <= len(cells) / 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_rel)
def test_speaks_of_itself_only(path):
    text = path.read_text(encoding="utf-8")
    for outside in ("DESIGN.md", "../shared", "shared/seeds"):
        assert outside not in text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_rel)
def test_skeleton_and_readme_index(path):
    nb, _ = _code_cells(path)
    first = "".join(nb["cells"][0]["source"])
    assert first.startswith("# "), "one H1 title first"
    headings = [
        line
        for c in nb["cells"]
        if c["cell_type"] == "markdown"
        for line in "".join(c["source"]).splitlines()
        if line.startswith("#")
    ]
    assert sum(h.startswith("# ") for h in headings) == 1
    text = " ".join(headings).lower()
    for part in ("setup", "summary", "exercises"):
        assert part in text, f"missing a '{part}' section"
    assert f"({_rel(path)})" in (ROOT / "README.md").read_text(encoding="utf-8"), (
        "the README's notebook index links every notebook"
    )


@pytest.mark.parametrize("base", ["/tmp", "/var/tmp/ci", "/home/learner/.cache/tmp"])
def test_nbval_sanitizer_hides_the_notebooks_temporary_folders(base):
    # strict nbval compares outputs after these rewrites, applied in the file's order, to both the
    # committed and the new output: a temporary folder must read the same wherever TMPDIR points
    plugin = pytest.importorskip("nbval.plugin")
    patterns = plugin.get_sanitize_patterns((ROOT / "tests" / "nbval-sanitize.cfg").read_text())

    def sanitize(text):
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        return text

    several = json.loads((ROOT / "notebooks/pytorch/08-several-processes.ipynb").read_text())
    written = [
        line
        for cell in several["cells"]
        for output in cell.get("outputs", [])
        for line in output.get("text", [])
        if line.startswith("Writing ")
    ]  # %%writefile
    assert written and all(sanitize(line) == "Writing TMPDIR\n" for line in written)
    assert sanitize(f"Appending to {base}/mptutor-k2_9xq/workers.py\n") == "Appending to TMPDIR\n"
    assert sanitize("mptutor-tayrfsti") == "mptutor-tayrfsti"  # a folder's name alone stays
