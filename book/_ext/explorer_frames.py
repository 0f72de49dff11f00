"""Kernel-free explorers: the frames a notebook's ``explorer.show()`` drew, served as image files.

When the build executes a chapter, ``Explorer.show()`` (``softmaxbook.widgets``) displays HTML:
range inputs, a select for a choice, and every precomputed frame as a data URI inside a JSON
block. Left inline, a chapter's page would carry megabytes of base64 before its first paint. This
extension, for each such output of an HTML page:

* writes every frame to ``_images/explorers/<sha1 of its bytes>.<ext>`` (one file per distinct
  image) and puts the file's address, relative to the page, where the data URI was: the page's
  default frame is an ``<img loading="lazy">`` and the others are fetched by
  ``_static/explorer.js`` only when a control moves (and their neighbours just after);
* adds ``explorer.js`` (deferred) and ``explorer.css`` to every page;
* drops the explorer from builders that are not page-per-document HTML (the single-page HTML
  the PDF is printed from, LaTeX): print has the static panel beside it.

It also sets ``SOFTMAXBOOK_EXPLORER_FRAMES=1`` (``widgets.FRAMES_ENV``) for the kernels this
Sphinx process starts, so that a plain ``jupyter-book build`` draws the frames too;
tools/book.py sets it for its own prefill of the execution cache.
"""

from __future__ import annotations

import base64
import hashlib
import os
import posixpath
import re
from pathlib import Path

from docutils import nodes

FRAMES_ENV = "SOFTMAXBOOK_EXPLORER_FRAMES"  # = softmaxbook.widgets.FRAMES_ENV
MARKER = 'class="sbx-explorer"'
DATA_URI = re.compile(r"data:image/(webp|png);base64,([A-Za-z0-9+/=]+)")
SUBDIR = "_images/explorers"


def externalise(text: str, write, page_uri: str) -> tuple[str, int]:
    """Replace every frame data URI in ``text`` by the address of a file, relative to the page
    ``page_uri`` (e.g. ``book/01_softmax.html``). ``write(name, data)`` stores one file under
    :data:`SUBDIR`. Returns the new text and the number of data URIs replaced."""
    base = posixpath.dirname(page_uri)
    count = 0

    def one(match) -> str:
        nonlocal count
        ext, payload = match.group(1), match.group(2)
        data = base64.b64decode(payload)
        name = hashlib.sha1(data).hexdigest()[:20] + "." + ext
        write(name, data)
        count += 1
        return posixpath.relpath(f"{SUBDIR}/{name}", base or ".")

    return DATA_URI.sub(one, text), count


def _resolved(app, doctree, docname) -> None:
    raws = [n for n in doctree.findall(nodes.raw)
            if "html" in n.get("format", "").split() and MARKER in n.astext()]
    if not raws:
        return
    if app.builder.format != "html" or app.builder.name not in ("html", "dirhtml"):
        for node in raws:
            node.parent.remove(node)
        return
    folder = Path(app.outdir) / SUBDIR
    folder.mkdir(parents=True, exist_ok=True)

    def write(name: str, data: bytes) -> None:
        path = folder / name
        if not path.exists():
            path.write_bytes(data)

    for node in raws:
        text, _ = externalise(node.astext(), write, app.builder.get_target_uri(docname))
        node.replace_self(nodes.raw("", text, format="html", classes=node.get("classes", [])))


def setup(app):
    os.environ.setdefault(FRAMES_ENV, "1")
    app.add_js_file("explorer.js", loading_method="defer")
    # after book.css (html_css_files, priority 800): its phone rules for figures are overridden
    app.add_css_file("explorer.css", priority=900)
    app.connect("doctree-resolved", _resolved)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
