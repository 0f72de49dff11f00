"""Alternative text for the figures a notebook draws (instead of their file path).

myst-nb writes an output image with no ``alt``, so the page's ``<img>`` got its file path as alt
text: a screen reader read "underscore images slash 3f2a...png". For each such image this
extension takes the text form of the same output, which the notebook stored beside the PNG:
for a figure made with :func:`softmaxbook.plotting.figure` that is
:func:`softmaxbook.plotting.describe` (its titles, axis labels and legends in words). A figure
without one gets "Figure drawn by the code cell above." An ``alt`` given in the cell's metadata
(``mystnb: image: alt: ...``) is kept.

The text is read from the executed notebook myst-nb writes to ``jupyter_execute/`` while it
reads a page, matched cell by cell (``cell_index``) and image by image.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

FALLBACK = "Figure drawn by the code cell above."
IMAGE_TYPES = ("image/png", "image/svg+xml", "image/jpeg", "image/gif")


def alt_from_output(output) -> str:
    """The alt text for an image output: its text form when that says more than matplotlib's
    "<Figure size 700x320 with 2 Axes>", else :data:`FALLBACK`."""
    text = output.get("data", {}).get("text/plain", "")
    if isinstance(text, list):
        text = "".join(text)
    text = " ".join(str(text).split())
    if not text or text.startswith("<"):
        return FALLBACK
    return text


def _image_outputs(cell) -> list:
    return [o for o in cell.get("outputs", [])
            if o.get("output_type") in ("display_data", "execute_result")
            and any(t in o.get("data", {}) for t in IMAGE_TYPES)]


def _add_alt(app, doctree) -> None:
    docname = app.env.docname
    containers = [c for c in doctree.findall(nodes.container)
                  if c.get("nb_element") == "cell_code" and "cell_index" in c]
    if not containers:
        return
    path = Path(app.outdir).parent / "jupyter_execute" / (docname + ".ipynb")
    if not path.is_file():
        return
    nb = nbformat.read(path, as_version=4)
    for container in containers:
        index = container["cell_index"]
        if not 0 <= index < len(nb.cells):
            continue
        images = [img for img in container.findall(nodes.image)]
        outputs = _image_outputs(nb.cells[index])
        for k, image in enumerate(images):
            if image.get("alt"):
                continue
            image["alt"] = alt_from_output(outputs[k]) if k < len(outputs) else FALLBACK


def setup(app):
    app.connect("doctree-read", _add_alt)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
