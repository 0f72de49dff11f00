"""Serve MathJax from the built site itself, so the book renders math offline.

Sphinx loads MathJax from a CDN by default; a reader with no network (or a downloaded copy of the
site) then sees raw ``\\(x\\)``. The PyPI package ``django-static-mathjax`` ships MathJax 3.2.2 as a
plain package ``mathjax`` (no Django needed); the set-up installs it from the registry and this
extension copies the browser build (``es5/``) into ``<site>/_static/mathjax/`` when the build
finishes and points ``mathjax_path`` at it. Nothing of MathJax is committed to this repository.

The copy is made by hand in ``build-finished`` rather than by listing the folder in
``html_static_path``: Sphinx would otherwise copy and fingerprint it like a theme asset, and the
theme's own script tag plus ours would load MathJax twice.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

# The one combined component we load: TeX and MathML input, CommonHTML output. Everything it may
# fetch later (fonts, the menu, accessibility, TeX extensions) sits beside it in es5/.
ENTRY = "tex-mml-chtml.js"
# Other combined bundles in es5/ are alternatives to ENTRY that are never requested; leave them out.
SKIP = {
    "tex-chtml-full-speech.js", "tex-chtml-full.js", "tex-chtml.js", "tex-mml-svg.js",
    "tex-svg-full.js", "tex-svg.js", "mml-chtml.js", "mml-svg.js", "node-main.js",
}


def mathjax_source() -> Path:
    try:
        import mathjax  # provided by django-static-mathjax
    except ImportError as err:  # pragma: no cover - set-up installs it
        raise RuntimeError(
            "offline_mathjax: the package 'django-static-mathjax' is not installed; "
            "run `python3 tools/book.py setup`"
        ) from err
    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (es5 / ENTRY).is_file():  # pragma: no cover
        raise RuntimeError(f"offline_mathjax: {es5 / ENTRY} not found; reinstall django-static-mathjax")
    return es5


def _set_path(app: Sphinx, config) -> None:
    mathjax_source()  # fail early, before any notebook is executed
    config.mathjax_path = f"mathjax/{ENTRY}"


def _copy(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    if (target / ENTRY).is_file():
        return  # already copied by an earlier build; MathJax is the same version
    shutil.copytree(mathjax_source(), target, dirs_exist_ok=True,
                    ignore=lambda d, names: [n for n in names if n in SKIP])
    logger.info("offline_mathjax: copied MathJax into %s", target)


def setup(app: Sphinx):
    app.connect("config-inited", _set_path, priority=900)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
