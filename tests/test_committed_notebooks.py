"""Checks on the committed notebooks that strict nbval alone would not catch."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IGNORE = re.compile(r"\s*#\s*NBVAL_(IGNORE_OUTPUT|SKIP)")


def _code_cells(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    return nb, [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_executed_in_order_without_errors_or_warnings(path):
    nb, cells = _code_cells(path)
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), "re-run top to bottom: make notebooks"
    for cell in cells:
        for out in cell["outputs"]:
            assert out["output_type"] != "error", "".join(cell["source"])[:80]
            assert out.get("name") != "stderr", f"stderr output: {out.get('text', '')[:200]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_most_outputs_are_checked_by_nbval(path):
    _, cells = _code_cells(path)
    ignored = [c for c in cells if IGNORE.match("".join(c["source"]))]
    assert len(ignored) <= len(cells) / 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
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
    assert path.name in (ROOT / "README.md").read_text(encoding="utf-8")
