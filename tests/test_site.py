"""The site (docs/build_site.py, `make site`) checked as a reader would meet it.

- notebooks/index.yml is the one source of the README's notebook tables: they must match it.
- The site builds from the committed notebooks with warnings as errors (``-W --keep-going -n``):
  a broken cross-reference, a missing image or an unknown name in the API reference fails it.
- Every internal link and anchor of the built HTML resolves, and no page loads anything from
  the network (scripts, styles, images, fonts, math).
- A real browser, Debian's Chromium driven by Playwright, opens the landing page from disk,
  follows the navigation to every notebook page and the API reference, and fails on a console
  error, a request outside the site, an image that did not load or math that did not render; the
  search page must find the loss-scaling notebook for "loss scaling". Screenshots of the landing
  page and of one notebook page go to build/site-screenshots/.

The site is built in the main environment (requirements.txt); the MXNet environment has no
Sphinx and skips this module. Without Chromium the browser test is skipped with how to get it,
except under CI (``CI=true``), where a missing browser is an error.
"""

from __future__ import annotations

import html.parser
import importlib.util
import json
import os
import re
import shutil
import time
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest

pytest.importorskip("sphinx", reason="the site is built in the main environment (requirements.txt)")
pytest.importorskip(
    "myst_nb", reason="the site is built in the main environment (requirements.txt)"
)

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "build" / "site-screenshots"
CHROMIUM = Path("/usr/bin/chromium")
# Chromium without the services that call home: on a closed network they fail, and none of
# them belongs to the page under test.
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--metrics-recording-only",
    "--no-pings",
    "--disable-client-side-phishing-detection",
]


def _load_builder():
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "docs" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bs = _load_builder()


# --- the index and the README -------------------------------------------------------------


def test_readme_tables_are_generated_from_the_index():
    index = bs.load_index()
    readme = bs.README.read_text(encoding="utf-8")
    assert bs.README_BEGIN in readme and bs.README_END in readme
    assert bs.readme_with_tables(readme, index) == readme, (
        "README.md's notebook tables differ from notebooks/index.yml: "
        "run `python docs/build_site.py --readme`"
    )
    # The generated part is the whole of each track's table: every notebook has its row.
    for track in index["tracks"]:
        for nb in track["notebooks"]:
            assert f"| [{nb['name']}](notebooks/{nb['key']}.ipynb) | {nb['shows']} |" in readme


def test_the_index_lists_every_notebook_once_in_reading_order(tmp_path):
    index = bs.load_index()
    keys = [nb["key"] for t in index["tracks"] for nb in t["notebooks"]]
    on_disk = sorted(f"{p.parent.name}/{p.stem}" for p in (ROOT / "notebooks").glob("*/*.ipynb"))
    assert sorted(keys) == on_disk
    assert [t["id"] for t in index["tracks"]] == ["pytorch", "keras", "gluon"]

    # A notebook missing from the index, or read before it is listed, is a clear error.
    text = bs.INDEX.read_text(encoding="utf-8")
    for track in ("pytorch", "keras", "gluon"):
        (tmp_path / track).mkdir()
    for key in keys:
        (tmp_path / f"{key}.ipynb").write_text("{}", encoding="utf-8")
    (tmp_path / "pytorch" / "99-new.ipynb").write_text("{}", encoding="utf-8")
    (tmp_path / "index.yml").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"not listed: \['pytorch/99-new'\]"):
        bs.load_index(tmp_path / "index.yml")
    swapped = text.replace(
        "read_first: [pytorch/01-floating-point-formats]",
        "read_first: [pytorch/03-loss-scaling]",
        1,
    )
    assert swapped != text
    (tmp_path / "index.yml").write_text(swapped, encoding="utf-8")
    with pytest.raises(ValueError, match="not listed before it"):
        bs.load_index(tmp_path / "index.yml")


def test_mentions_of_public_names_become_links():
    names = bs.public_names()
    full, bare = bs._targets(names, "pytorch")
    text = (
        'Use `mpt.find_nonfinite` and `formats.ulp(32768, "fp16")`, or `MasterWeightOptimizer`;'
        " `train` and `x.find_nonfinite` are not ours.\n```python\n`mpt.find_nonfinite`\n```"
    )
    out = bs.link_mentions(text, full, bare)
    assert "{py:obj}`mpt.find_nonfinite <mptutor.torch.find_nonfinite>`" in out
    assert '{py:obj}`formats.ulp(32768, "fp16") <mptutor.formats.ulp>`' in out
    assert "{py:obj}`MasterWeightOptimizer <mptutor.torch.MasterWeightOptimizer>`" in out
    assert "`train` and `x.find_nonfinite` are not ours" in out
    assert out.endswith("```python\n`mpt.find_nonfinite`\n```")  # code blocks stay as written
    # A bare name means the track's own framework module: LossScaledStep is in two.
    assert bs._targets(names, "keras")[1]["LossScaledStep"] == "mptutor.tensorflow.LossScaledStep"
    assert bs._targets(names, "gluon")[1]["LossScaledStep"] == "mptutor.mxnet.LossScaledStep"


# --- the build ----------------------------------------------------------------------------


# The committed notebooks as the build read them.
BUILT_FROM: dict[str, bytes] = {}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Build the site from the committed notebooks, warnings as errors; return its folder.

    It is built in a folder of its own, as `make site` builds build/site/, so that a `make site`
    running beside the tests changes neither.
    """
    tmp = tmp_path_factory.mktemp("site")
    for nb in (ROOT / "notebooks").glob("*/*.ipynb"):
        BUILT_FROM[f"{nb.parent.name}/{nb.stem}"] = nb.read_bytes()
    start = time.perf_counter()
    # Raises SystemExit on any warning.
    index_page = bs.build(ROOT / "notebooks", out=tmp / "site", source=tmp / "site-src")
    print(f"site built in {time.perf_counter() - start:.1f} s")
    return index_page.parent


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)


class _Links(html.parser.HTMLParser):
    """Collect a page's ids and the URLs it links to and loads."""

    LOADS = {
        ("script", "src"),
        ("img", "src"),
        ("iframe", "src"),
        ("source", "src"),
        ("video", "src"),
        ("audio", "src"),
        ("embed", "src"),
        ("object", "data"),
        ("input", "src"),
        ("image", "href"),
    }

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.loads: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "link" and attrs.get("href"):
            self.loads.append(attrs["href"])
        for t, a in self.LOADS:
            if tag == t and attrs.get(a):
                self.loads.append(attrs[a])
        if attrs.get("srcset"):
            self.loads += [part.split()[0] for part in attrs["srcset"].split(",")]


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_every_notebook_and_module_has_a_page(site):
    index = bs.load_index()
    for track in index["tracks"]:
        for nb in track["notebooks"]:
            page = site / f"{nb['key']}.html"
            text = page.read_text(encoding="utf-8")
            assert "About this notebook" in text and "Ran on:" in text, page
            # The download link serves the committed notebook, byte for byte.
            parsed = _parse(page)
            downloads = [h for h in parsed.links if h.endswith(f"/{nb['name']}.ipynb")]
            assert downloads, f"{page}: no download link"
            served = (page.parent / unquote(downloads[0])).resolve()
            assert served.read_bytes() == BUILT_FROM[nb["key"]]
            # The hardware it ran on: the report of its setup cell.
            report = bs.hardware_report(json.loads(served.read_text(encoding="utf-8")))
            assert report and report.splitlines()[1].split("(")[0].strip() in text
            # Previous and next pages.
            assert 'class="left-prev"' in text or 'class="right-next"' in text, page
    for mod in bs.API_MODULES:
        text = (site / "api" / f"mptutor.{mod}.html").read_text(encoding="utf-8")
        for name in bs.public_names()[mod]:
            assert f'id="mptutor.{mod}.{name}"' in text, f"mptutor.{mod}.{name} not documented"


def test_notebook_mentions_link_to_the_api_reference(site):
    text = (site / "pytorch" / "07-troubleshooting.html").read_text(encoding="utf-8")
    assert "../api/mptutor.torch.html#mptutor.torch.find_nonfinite" in text
    text = (site / "keras" / "01-mixed-precision-in-keras.html").read_text(encoding="utf-8")
    assert "../api/mptutor.tensorflow.html#mptutor.tensorflow.LossScaledStep" in text


def test_every_internal_link_and_anchor_resolves(site):
    parsed = {page: _parse(page) for page in _pages(site)}
    broken = []
    for page, links in parsed.items():
        for href in links.links + links.loads:
            if urlsplit(href).scheme in ("http", "https", "mailto", "data", "javascript"):
                continue
            url, fragment = urldefrag(href)
            target = (page.parent / unquote(urlsplit(url).path)).resolve() if url else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {href} (no file)")
            elif fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if unquote(fragment) not in ids:
                    broken.append(f"{page.relative_to(site)}: {href} (no anchor)")
    assert not broken, "\n".join(broken)


def test_nothing_is_loaded_from_the_network(site):
    remote = re.compile(r"^(https?:)?//", re.I)
    found = []
    for page in _pages(site):
        found += [f"{page.relative_to(site)}: {u}" for u in _parse(page).loads if remote.match(u)]
    for css in site.rglob("*.css"):
        for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", css.read_text(encoding="utf-8")):
            if remote.match(url):
                found.append(f"{css.relative_to(site)}: {url}")
        found += [
            f"{css.relative_to(site)}: @import {m}"
            for m in re.findall(
                r"@import\s+['\"]?(https?:[^'\";]+)", css.read_text(encoding="utf-8")
            )
        ]
    assert not found, "\n".join(found)
    # Math is typeset by the MathJax copy inside the site.
    page = (site / "pytorch" / "01-floating-point-formats.html").read_text(encoding="utf-8")
    scripts = re.findall(r'<script[^>]+src="([^"]*mathjax[^"]*)"', page, re.I)
    assert scripts and all(not remote.match(s) for s in scripts)
    assert (site / "pytorch" / scripts[0].split("?")[0]).resolve().is_file()


# --- in a real browser --------------------------------------------------------------------


def _browser():
    """Return (sync_playwright, executable) or skip (fail under CI) with how to get them."""
    ci = os.environ.get("CI", "").lower() == "true"
    how = (
        "the browser test needs Debian's Chromium (`apt-get install chromium`, which .ci/run "
        "does) and Playwright (requirements.txt)"
    )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        (pytest.fail if ci else pytest.skip)(f"Playwright is not installed: {how}")
    executable = CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")
    if not executable:
        (pytest.fail if ci else pytest.skip)(f"no Chromium at {CHROMIUM} or on the PATH: {how}")
    return sync_playwright, str(executable)


MATH_RENDERED = """async () => {
    const maths = document.querySelectorAll('.math');
    if (maths.length === 0) return {maths: 0};
    if (!window.MathJax || !MathJax.startup) return {maths: maths.length, mathjax: false};
    await MathJax.startup.promise;
    return {maths: maths.length, mathjax: true,
            typeset: document.querySelectorAll('mjx-container').length,
            errors: document.querySelectorAll('mjx-merror').length};
}"""
BROKEN_IMAGES = """() => [...document.images]
    .filter(img => !img.complete || img.naturalWidth === 0).map(img => img.src)"""


def test_in_a_browser(site):
    sync_playwright, executable = _browser()
    root = site.resolve().as_uri() + "/"
    problems: list[str] = []
    SHOTS.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        # Nothing outside the site: a request elsewhere is recorded and never sent.
        context.route(
            re.compile(r"^(?!file:|data:|blob:|about:).*"),
            lambda route: (
                problems.append(f"request outside the site: {route.request.url}"),
                route.abort(),
            ),
        )
        page = context.new_page()
        here = {"url": ""}
        page.on(
            "console",
            lambda m: (
                m.type == "error" and problems.append(f"{here['url']}: console error: {m.text}")
            ),
        )
        page.on("pageerror", lambda e: problems.append(f"{here['url']}: page error: {e}"))
        page.on(
            "request",
            lambda r: (
                None
                if r.url.startswith((root, "data:", "blob:"))
                else problems.append(f"{here['url']}: request outside the site: {r.url}")
            ),
        )
        page.on(
            "requestfailed",
            lambda r: problems.append(f"{here['url']}: failed to load {r.url}: {r.failure}"),
        )

        def visit(url: str) -> dict:
            here["url"] = url[len(root) :]
            page.goto(url, wait_until="load")
            broken = page.evaluate(BROKEN_IMAGES)
            problems.extend(f"{here['url']}: image did not load: {src}" for src in broken)
            math = page.evaluate(MATH_RENDERED)
            if math["maths"] and not (
                math.get("mathjax") and math["typeset"] >= math["maths"] and not math["errors"]
            ):
                problems.append(f"{here['url']}: math not rendered: {math}")
            return math

        visit(root + "index.html")
        page.screenshot(path=str(SHOTS / "landing.png"))
        # The navigation: the sidebar of the landing page reaches every page of the site.
        hrefs = page.eval_on_selector_all(
            "nav.bd-docs-nav a.reference.internal", "els => els.map(e => e.href)"
        )
        visited = {urldefrag(h)[0] for h in hrefs}
        index = bs.load_index()
        expected = {root + f"{nb['key']}.html" for t in index["tracks"] for nb in t["notebooks"]}
        expected.add(root + "api/index.html")
        assert expected <= visited, f"not in the navigation: {sorted(expected - visited)}"
        typeset = 0
        for url in sorted(visited):
            typeset += visit(url).get("typeset", 0)
            if url.endswith("api/index.html"):  # the reference's own pages
                for sub in page.eval_on_selector_all(
                    "article a.reference.internal", "els => els.map(e => e.href)"
                ):
                    if urldefrag(sub)[0] not in visited:
                        visit(urldefrag(sub)[0])
        assert typeset > 0, "no page had math for MathJax to typeset"
        # Previous and next: from the first notebook, "next" leads to the second.
        first = root + "pytorch/00-why-and-the-recipe.html"
        visit(first)
        page.click("a.right-next")
        page.wait_for_load_state("load")
        assert page.url == root + "pytorch/01-floating-point-formats.html"
        visit(root + "pytorch/03-loss-scaling.html")
        page.screenshot(path=str(SHOTS / "notebook.png"))
        # Search across the pages.
        here["url"] = "search.html?q=loss+scaling"
        page.goto(root + "search.html?q=loss+scaling", wait_until="load")
        page.wait_for_selector("#search-results ul.search li a", timeout=60_000)
        results = page.eval_on_selector_all(
            "#search-results ul.search li a", "els => els.map(e => e.href)"
        )
        assert any("03-loss-scaling.html" in r for r in results), results
        browser.close()
    print(f"browser test: {len(visited)} pages in {time.perf_counter() - start:.1f} s")
    assert not problems, "\n".join(problems)
    for shot in ("landing.png", "notebook.png"):
        assert (SHOTS / shot).stat().st_size > 10_000
