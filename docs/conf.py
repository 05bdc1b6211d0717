"""Sphinx configuration of the mptutor site (built by docs/build_site.py; see `make site`).

The notebooks are rendered with their committed outputs and never executed. Everything a page
loads is served from the site itself: MathJax comes from the sphinx-mathjax-offline package, the
theme's fonts and scripts from the theme, and nothing points at a CDN, so the site works offline.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from numpydoc.xref import DEFAULT_LINKS
from sphinx.ext.autodoc.mock import MockFinder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# TensorFlow's C++ start-up logs stay out of the build's output when autodoc imports it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _public_aliases() -> dict[str, str]:
    """Map each public name that one module alone exports to its qualified name."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from build_site import public_names

    owners: dict[str, list[str]] = {}
    for mod, members in public_names().items():
        for m in members:
            owners.setdefault(m, []).append(f"mptutor.{mod}.{m}")
    return {m: q[0] for m, q in owners.items() if len(q) == 1}


project = "mptutor"
author = "the mptutor authors"
copyright = "the mptutor authors"
html_title = "mptutor"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",
    "numpydoc",
]

exclude_patterns = ["_ipynb/**", "**.ipynb_checkpoints", "_build"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# myst-nb: render the committed outputs; never run a notebook.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
# The notebooks' markdown links to other sites; the site's own links are checked.
myst_url_schemes = ["http", "https", "mailto"]

# The API reference: numpydoc docstrings, the names of each module's __all__.
autodoc_default_options = {"members": True, "undoc-members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
# The frameworks are stood in for by mock modules for the whole build, not only while autodoc
# imports a module: autodoc also looks up the source of a class's bases later (for Keras layers),
# which would import TensorFlow, and the build needs none of them (MXNet is not even in this
# environment). Signatures and docstrings come from the package's own source.
FRAMEWORKS = ["mxnet", "tensorflow", "keras", "torch", "torchao"]
autodoc_mock_imports = FRAMEWORKS
sys.meta_path.insert(0, MockFinder(FRAMEWORKS))
numpydoc_show_class_members = False
# Types in Parameters/Returns: the package's public names link to their entries; other words
# (``int``, ``array_like``, ``numpy.ndarray``) are set as text.
numpydoc_xref_param_type = True
numpydoc_xref_ignore = "all"
# numpydoc's own aliases point the built-in words (``str``, ``bool``, ``array_like``) into
# Python's and NumPy's documentation, which an offline build cannot link: they stay as names.
numpydoc_xref_aliases = {
    **{word: f":obj:`{word}`" for word in DEFAULT_LINKS},
    **_public_aliases(),
}
numpydoc_validation_checks: set[str] = set()

# Every internal cross-reference must resolve. Names of other libraries cannot: their
# inventories would come from the network, and the build is offline.
nitpicky = True
nitpick_ignore_regex = [
    # Private helpers' types named in public signatures: no page documents a private name.
    (r"py:.*", r"mptutor(\.\w+)*\._\w+(\..*)?"),
    # Types that public functions return but that no module exports: their fields are described
    # in the docstrings of the functions that return them.
    (r"py:.*", r"mptutor\.(data\.DatasetFolders|hardware\.T|mxnet\.Checkpoint)"),
    (r"py:.*", r"(pooch|gluon|Figure|Axes|Checkpoint)(\..*)?"),
    # An attribute that __init__ sets and the class docstrings name; no docstring of its own.
    (r"py:attr", r"scale"),
    (
        r"py:.*",
        r"(numpy|np|torch|tensorflow|tf|keras|mxnet|mx|matplotlib|ml_dtypes|sklearn"
        r"|nn|array|collections|typing|pathlib|contextlib|dataclasses|enum|types|os|abc)(\..*)?",
    ),
    # The built-in words of numpydoc's type descriptions (see numpydoc_xref_aliases).
    (r"py:obj", "|".join(re.escape(word) for word in DEFAULT_LINKS)),
    # Built-in and standard types named in signatures.
    (
        r"py:.*",
        r"(int|float|str|bool|bytes|dict|list|tuple|set|object|None|Any|Callable|Path"
        r"|Iterable|Iterator|Sequence|Mapping|Literal|Optional|Union|Protocol)",
    ),
]

html_theme = "sphinx_book_theme"
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
# The theme's light/dark switch starts from the reader's system setting.
html_context = {"default_mode": "auto"}
html_copy_source = False
# Search summaries are fetched from the pages, which a browser refuses for a site opened from
# disk (file://); the results list each page's title and section instead.
html_show_search_summary = False
html_show_sourcelink = False
html_last_updated_fmt = None


def _escape_trailing_underscore(app, what, name, obj, options, lines: list[str]) -> None:
    """Set a bare ``numpy.bool_`` in a docstring as text: reST reads ``word_`` as a link."""
    for i, line in enumerate(lines):
        lines[i] = re.sub(r"(?<![`\w])(numpy\.bool)_(?![`\w])", r"\1\\_", line)


def setup(app) -> None:
    """Connect the docstring fix above."""
    app.connect("autodoc-process-docstring", _escape_trailing_underscore)
