"""Build the mptutor site: the executed notebooks, a landing page and the API reference.

    python docs/build_site.py                    # from the committed notebooks into build/site/
    python docs/build_site.py --notebooks build  # from the copies that `make run` executed
    python docs/build_site.py --readme           # rewrite the README's notebook tables
    python docs/build_site.py --check-readme     # exit 1 if the README's tables are stale

``notebooks/index.yml`` is the one source of the notebook list: the README's tables and the
landing page are both generated from it. The build lays out a Sphinx source folder in
``build/site-src/`` (the landing page, one page per notebook, the API reference, the notes in
``docs/``) and runs Sphinx with myst-nb on it; no notebook is executed, their committed
outputs are rendered. Warnings are errors (``-W --keep-going -n``), so a broken reference, a
missing image or an unknown name fails the build.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
INDEX = ROOT / "notebooks" / "index.yml"
README = ROOT / "README.md"
SOURCE = ROOT / "build" / "site-src"
OUT = ROOT / "build" / "site"

README_BEGIN = (
    "<!-- The tables below are generated from notebooks/index.yml: edit that file, then run\n"
    "     `python docs/build_site.py --readme` (tests/test_site.py checks that they match). -->"
)
README_END = "<!-- End of the generated notebook tables. -->"
TABLE_HEAD = "| notebook | what it shows | needs | time (CPU) |\n| --- | --- | --- | --- |"

# The API reference: the public modules, in the order the README's module table gives them.
# Each page documents the names in the module's __all__; MODULE_SKIP are re-exports of a
# framework's own modules, documented by that framework.
API_MODULES = [
    "formats",
    "scaling",
    "gradients",
    "fp8",
    "hadamard",
    "hardware",
    "plots",
    "table",
    "bench",
    "torch",
    "torch_perf",
    "kernels",
    "tensorflow",
    "keras_cnn",
    "mxnet",
    "data",
]
MODULE_SKIP = {"mxnet": {"mx", "autograd", "gluon", "amp", "vision"}}
# How the notebooks import the package: `from mptutor import torch as mpt`, ...
ALIASES = {
    "mpt": "torch",
    "mtf": "tensorflow",
    "mmx": "mxnet",
    "tp": "torch_perf",
    "kc": "keras_cnn",
}
# The framework module whose names a track's bare mentions mean first.
TRACK_MODULE = {"pytorch": "torch", "keras": "tensorflow", "gluon": "mxnet"}


# --- the index ------------------------------------------------------------------------------


def load_index(path: Path = INDEX) -> dict[str, Any]:
    """Read and check the notebook index.

    Parameters
    ----------
    path : Path
        The index file (``notebooks/index.yml``). Every ``.ipynb`` in the track folders beside
        it must be listed once, and every listed notebook must exist there.

    Returns
    -------
    dict
        The index, each notebook with ``track`` and ``key`` (``"pytorch/03-loss-scaling"``).

    Raises
    ------
    ValueError
        A field is missing, a notebook is listed twice or not at all, or a ``read_first`` names
        an unknown notebook or one listed after it.
    """
    index = yaml.safe_load(path.read_text(encoding="utf-8"))
    folder = path.parent
    for field in ("teaches", "audience", "path", "tracks"):
        if not index.get(field):
            raise ValueError(f"{path}: missing '{field}'")
    seen: list[str] = []
    for track in index["tracks"]:
        for field in ("id", "title", "environment", "summary", "notebooks"):
            if not track.get(field):
                raise ValueError(f"{path}: a track without '{field}': {track.get('id')!r}")
        for nb in track["notebooks"]:
            for field in ("name", "shows", "needs", "time"):
                if not nb.get(field):
                    raise ValueError(f"{path}: {track['id']}/{nb.get('name')}: missing '{field}'")
            nb["time"] = str(nb["time"])
            nb["track"] = track["id"]
            nb["key"] = key = f"{track['id']}/{nb['name']}"
            if key in seen:
                raise ValueError(f"{path}: {key} is listed twice")
            for field in ("read_first", "see_also"):
                nb[field] = list(nb.get(field) or [])
                unknown = [k for k in nb[field] if k not in seen]
                if field == "read_first" and unknown:
                    raise ValueError(
                        f"{path}: {key} reads {unknown} first, which are not listed before it"
                    )
            seen.append(key)
    on_disk = sorted(
        f"{p.parent.name}/{p.stem}"
        for t in index["tracks"]
        for p in (folder / t["id"]).glob("*.ipynb")
    )
    if sorted(seen) != on_disk:
        missing = sorted(set(on_disk) - set(seen))
        absent = sorted(set(seen) - set(on_disk))
        raise ValueError(f"{path}: notebooks not listed: {missing}; listed but absent: {absent}")
    every = {nb["key"] for t in index["tracks"] for nb in t["notebooks"]}
    for t in index["tracks"]:
        for nb in t["notebooks"]:
            unknown = [k for k in nb["see_also"] if k not in every]
            if unknown:
                raise ValueError(f"{path}: {nb['key']}: see_also names unknown {unknown}")
    return index


def readme_tables(index: dict[str, Any]) -> str:
    """Return the README's notebook tables (one heading and table per track), as markdown."""
    parts = []
    for track in index["tracks"]:
        rows = [
            f"| [{nb['name']}](notebooks/{nb['key']}.ipynb) | {nb['shows']} | {nb['needs']} "
            f"| {nb['time']} |"
            for nb in track["notebooks"]
        ]
        parts.append(
            f"### {track['title']} ({track['environment']})\n\n{TABLE_HEAD}\n" + "\n".join(rows)
        )
    return "\n\n".join(parts)


def readme_with_tables(readme: str, index: dict[str, Any]) -> str:
    """Return the README text with the part between the markers generated from the index."""
    start, end = readme.find(README_BEGIN), readme.find(README_END)
    if start < 0 or end < start:
        raise ValueError(
            f"README.md has no generated-tables markers:\n{README_BEGIN}\n{README_END}"
        )
    head = readme[: start + len(README_BEGIN)]
    return f"{head}\n\n{readme_tables(index)}\n\n{readme[end:]}"


# --- the landing page -----------------------------------------------------------------------


def _link(nb: dict[str, Any], here: str = "") -> str:
    """Return a markdown link to a notebook's page from a page in folder ``here``."""
    if not here:
        return f"[{nb['key']}]({nb['key']}.ipynb)"
    if here == nb["track"]:
        return f"[{nb['name']}]({nb['name']}.ipynb)"
    return f"[{nb['key']}](../{nb['key']}.ipynb)"


def landing_page(index: dict[str, Any]) -> str:
    """Return the landing page (MyST markdown) generated from the index."""
    by_key = {nb["key"]: nb for t in index["tracks"] for nb in t["notebooks"]}
    count = len(by_key)
    out = [
        "# mptutor: mixed-precision training, measured\n",
        f"{index['teaches']}\n",
        f"**For whom.** {index['audience']}\n",
        "## The three tracks\n",
        f"{count} notebooks in {len(index['tracks'])} tracks, each run in the environment of its "
        "framework:\n",
    ]
    for t in index["tracks"]:
        first = t["notebooks"][0]
        out.append(
            f"- **[{t['title']}](#{t['id']}-track)** ({t['environment']}; "
            f"{len(t['notebooks'])} notebooks, starting at {_link(first)}): {t['summary']}"
        )
    out += ["", "## Learning path\n", f"{index['path']}\n"]
    out.append("| notebook | read first | explains a part of it |\n| --- | --- | --- |")
    for t in index["tracks"]:
        for nb in t["notebooks"]:
            first = ", ".join(_link(by_key[k]) for k in nb["read_first"]) or "nothing"
            also = ", ".join(_link(by_key[k]) for k in nb["see_also"]) or ""
            out.append(f"| {_link(nb)} | {first} | {also} |")
    out.append("")
    out.append("## The notebooks\n")
    out.append(
        "What each notebook shows, what it needs and how long it took: wall-clock seconds of one "
        "`make run` on a 2-core CPU. Each notebook's page names the machine its outputs come "
        "from and links its `.ipynb`.\n"
    )
    for t in index["tracks"]:
        out.append(f"({t['id']}-track)=\n### {t['title']} ({t['environment']})\n")
        out.append(TABLE_HEAD)
        out += [
            f"| {_link(nb)} | {nb['shows']} | {nb['needs']} | {nb['time']} |"
            for nb in t["notebooks"]
        ]
        out.append("")
    out.append(
        "## Reference\n\n"
        "- [The API reference](api/index.md) of the `mptutor` package, from its docstrings; "
        "the notebooks' mentions of its names link there.\n"
        "- [Loss scaling in PyTorch, Keras and MXNet](loss-scaling-notes.md): how the "
        "frameworks' scalers behave at the edges.\n"
    )
    for t in index["tracks"]:
        names = "\n".join(nb["key"] for nb in t["notebooks"])
        out.append(f"```{{toctree}}\n:hidden:\n:caption: {t['title']}\n\n{names}\n```\n")
    out.append(
        "```{toctree}\n:hidden:\n:caption: Reference\n\napi/index\nloss-scaling-notes\n```\n"
    )
    return "\n".join(out)


# --- the API reference ----------------------------------------------------------------------


def public_names(root: Path = ROOT) -> dict[str, list[str]]:
    """Return each public module's documented names, read from its ``__all__`` without importing.

    Returns
    -------
    dict
        ``{"torch": ["MasterWeightOptimizer", ...], ...}`` for the modules of ``API_MODULES``.
    """
    names: dict[str, list[str]] = {}
    for mod in API_MODULES:
        path = root / "mptutor" / f"{mod}.py"
        if not path.exists():
            path = root / "mptutor" / mod / "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found: list[str] = []
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                found = [
                    n for n in ast.literal_eval(node.value) if n not in MODULE_SKIP.get(mod, ())
                ]
        if not found:
            raise ValueError(f"mptutor.{mod} has no __all__ to document")
        names[mod] = found
    return names


def api_pages(names: dict[str, list[str]]) -> dict[str, str]:
    """Return the API reference's pages, ``{"api/index.md": text, "api/mptutor.X.rst": ...}``."""
    pages = {
        "api/index.md": "# API reference\n\n"
        "The public names of the `mptutor` package, module by module, from their numpydoc "
        "docstrings. `import mptutor` imports no deep-learning framework; each framework has its "
        "own module (`from mptutor import torch as mpt`, `from mptutor import tensorflow as mtf`, "
        "`from mptutor import mxnet as mmx`).\n\n"
        "```{toctree}\n:maxdepth: 1\n\n" + "\n".join(f"mptutor.{m}" for m in names) + "\n```\n"
    }
    for mod, members in names.items():
        title = f"mptutor.{mod}"
        # Constants are documented one by one: autodoc skips data that a package re-exports.
        path = ROOT / "mptutor" / f"{mod}.py"
        own = path.read_text(encoding="utf-8") if path.exists() else ""
        constants = [m for m in members if m.isupper() and not re.search(rf"^{m}\b", own, re.M)]
        text = (
            f"{title}\n{'=' * len(title)}\n\n.. automodule:: mptutor.{mod}\n"
            f"   :members: {', '.join(m for m in members if m not in constants)}\n"
        )
        for c in constants:
            text += f"\n.. autodata:: mptutor.{mod}.{c}\n   :no-value:\n"
        pages[f"api/mptutor.{mod}.rst"] = text
    return pages


def _targets(names: dict[str, list[str]], track: str) -> tuple[dict[str, str], dict[str, str]]:
    """Return (qualified names -> target, bare names -> target) for linking mentions."""
    full: dict[str, str] = {}
    for mod, members in names.items():
        full[f"mptutor.{mod}"] = f"mptutor.{mod}"
        for m in members:
            full[f"mptutor.{mod}.{m}"] = f"mptutor.{mod}.{m}"
            full[f"{mod}.{m}"] = f"mptutor.{mod}.{m}"
    for alias, mod in ALIASES.items():
        for m in names[mod]:
            full[f"{alias}.{m}"] = f"mptutor.{mod}.{m}"
    owners: dict[str, list[str]] = {}
    for mod, members in names.items():
        for m in members:
            owners.setdefault(m, []).append(mod)
    bare = {}
    prefer = TRACK_MODULE.get(track)
    for m, mods in owners.items():
        # Only names that cannot be an ordinary word: a class, or a name with an underscore.
        if not (m[0].isupper() or "_" in m) or m.isupper():
            continue
        mod = prefer if prefer in mods else (mods[0] if len(mods) == 1 else None)
        if mod:
            bare[m] = f"mptutor.{mod}.{m}"
    return full, bare


_CODE = re.compile(r"(?<![`\[])`([^`\n]+)`(?!`)")
_NAME = re.compile(r"^([A-Za-z_][\w.]*)(\(.*\))?$")


def link_mentions(markdown: str, full: dict[str, str], bare: dict[str, str]) -> str:
    """Turn inline-code mentions of public names into cross-references to the API reference.

    Fenced code blocks, link texts and mentions that are not a public name stay as they are.
    """
    out, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if fenced or line.lstrip().startswith(("```", "~~~")):
            out.append(line)
            continue

        def sub(m: re.Match[str]) -> str:
            code = m.group(1)
            parsed = _NAME.match(code.strip())
            if not parsed:
                return m.group(0)
            target = full.get(parsed.group(1)) or bare.get(parsed.group(1))
            if not target:
                return m.group(0)
            text = code.replace("<", r"\<")
            return f"{{py:obj}}`{text} <{target}>`"

        out.append(_CODE.sub(sub, line))
    return "\n".join(out)


# --- the notebook pages ---------------------------------------------------------------------


def hardware_report(nb: dict[str, Any]) -> str | None:
    """Return the hardware report that the notebook's setup cell printed, or None."""
    for cell in nb["cells"]:
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            if text.startswith("Python ") and "\nCPU:" in text:
                return text.strip()
    return None


def about_cell(entry: dict[str, Any], by_key: dict[str, dict[str, Any]], report: str | None) -> str:
    """Return the markdown of the box under a notebook page's title."""
    first = ", ".join(_link(by_key[k], here=entry["track"]) for k in entry["read_first"])
    also = ", ".join(_link(by_key[k], here=entry["track"]) for k in entry["see_also"])
    ran = (
        "The outputs on this page come from this machine (the hardware report of the notebook's "
        f"setup cell):\n\n```text\n{report}\n```"
        if report
        else "The notebook prints no hardware report."
    )
    lines = [
        "````{admonition} About this notebook",
        ":class: note",
        "",
        f"**Track:** [{entry['title']}](../index.md#{entry['track']}-track) · "
        f"**needs:** {entry['needs']} · **time (CPU):** {entry['time']}",
        "",
        f"**Read first:** {first or 'nothing'}"
        + (f" · **explains a part:** {also}" if also else ""),
        "",
        f"**Download:** {{download}}`{entry['name']}.ipynb <../_ipynb/{entry['key']}.ipynb>` "
        "(the notebook with its outputs; run it with `make run` or in JupyterLab)",
        "",
        f"**Ran on:** {ran}",
        "````",
    ]
    return "\n".join(lines)


def notebook_page(
    nb: dict[str, Any],
    entry: dict[str, Any],
    by_key: dict[str, dict[str, Any]],
    names: dict[str, list[str]],
) -> dict[str, Any]:
    """Return the page's copy of a notebook: the box under its title, mentions linked."""
    page = copy.deepcopy(nb)
    full, bare = _targets(names, entry["track"])
    for cell in page["cells"]:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cell["source"] = link_mentions(source, full, bare)
    first = page["cells"][0]
    lines = first["source"].split("\n")
    if first["cell_type"] != "markdown" or not lines[0].startswith("# "):
        raise ValueError(f"{entry['key']}: the first cell does not start with the notebook's title")
    title = {"cell_type": "markdown", "metadata": {}, "source": lines[0], "id": "site-title"}
    about = {
        "cell_type": "markdown",
        "metadata": {},
        "id": "site-about",
        "source": about_cell(entry, by_key, hardware_report(nb)),
    }
    first["source"] = "\n".join(lines[1:]).lstrip("\n")
    page["cells"][:1] = [title, about, first]
    return page


# --- the build ------------------------------------------------------------------------------


def stage(notebooks: Path, source: Path = SOURCE) -> Path:
    """Lay out the Sphinx source folder from the index, the notebooks and ``docs/``.

    ``notebooks`` is the folder of the track folders to render: ``notebooks`` (committed) or
    ``build`` (what `make run` executed); a notebook missing there is taken from the committed
    ones, and said so.
    """
    index = load_index()
    names = public_names()
    by_key = {nb["key"]: nb for t in index["tracks"] for nb in t["notebooks"]}
    if source.exists():
        shutil.rmtree(source)
    (source / "_ipynb").mkdir(parents=True)
    for md in DOCS.glob("*.md"):
        shutil.copy2(md, source / md.name)
    (source / "index.md").write_text(landing_page(index), encoding="utf-8")
    for rel, text in api_pages(names).items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(text, encoding="utf-8")
    for t in index["tracks"]:
        (source / t["id"]).mkdir()
        (source / "_ipynb" / t["id"]).mkdir()
        for entry in t["notebooks"]:
            src = notebooks / f"{entry['key']}.ipynb"
            if not src.exists():
                print(f"{src} not found: the site shows the committed notebook", file=sys.stderr)
                src = INDEX.parent / f"{entry['key']}.ipynb"
            shutil.copy2(src, source / "_ipynb" / f"{entry['key']}.ipynb")
            nb = json.loads(src.read_text(encoding="utf-8"))
            page = notebook_page(nb, dict(entry, title=t["title"]), by_key, names)
            (source / f"{entry['key']}.ipynb").write_text(
                json.dumps(page, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
            )
    return source


def build(notebooks: Path, out: Path = OUT, source: Path = SOURCE, strict: bool = True) -> Path:
    """Stage the sources and run Sphinx; return the index page. Raises on a failed build."""
    stage(notebooks, source)
    if out.exists():
        shutil.rmtree(out)
    cmd = [
        sys.executable,
        "-m",
        "sphinx",
        "-b",
        "html",
        "-q",
        "-c",
        str(DOCS),
        str(source),
        str(out),
        "-d",
        str(source.parent / "site-doctrees"),
        "-E",
    ]
    if strict:
        cmd += ["-W", "--keep-going", "-n"]
    result = subprocess.run(cmd, check=False)
    if result.returncode:
        raise SystemExit(f"the site did not build (sphinx exit status {result.returncode})")
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    """Command line: build the site, or write or check the README's tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--notebooks",
        default="notebooks",
        help="folder of the track folders: notebooks (committed) or build (make run)",
    )
    parser.add_argument("--out", default=str(OUT), help="output folder (default build/site)")
    parser.add_argument("--readme", action="store_true", help="rewrite the README's tables")
    parser.add_argument(
        "--check-readme",
        action="store_true",
        help="exit 1 if the README's tables differ from the index",
    )
    args = parser.parse_args(argv)
    if args.readme or args.check_readme:
        index = load_index()
        text = README.read_text(encoding="utf-8")
        new = readme_with_tables(text, index)
        if args.check_readme:
            if new != text:
                print(
                    "README.md's notebook tables differ from notebooks/index.yml: "
                    "run `python docs/build_site.py --readme`",
                    file=sys.stderr,
                )
                return 1
            return 0
        README.write_text(new, encoding="utf-8")
        return 0
    start = time.perf_counter()
    page = build(ROOT / args.notebooks, Path(args.out))
    print(
        f"site built in {time.perf_counter() - start:.0f} s: open {page.relative_to(ROOT)}"
        if page.is_relative_to(ROOT)
        else f"site built: open {page}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
