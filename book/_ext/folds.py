"""Folded cells (issue 24, "prose first"): their toggles and their "✓ checked" lines.

The chapters fold plotting and assert cells with myst-nb's tag ``hide-input``: the code sits in
a closed ``<details>`` whose ``<summary>`` reads "Show code cell source". myst-nb gives every such
summary ``aria-label="Toggle hidden content"``, a name that is not its visible label (WCAG 2.5.3,
axe's label-content-name-mismatch) and the same for every fold; here the summary is written
without it, so that its name is what it shows ("Show code cell source", "Hide code cell source"
when open: myst-nb's CSS hides the other line).

``softmaxbook.glue.checked(claim)`` ends a cell whose asserts check a claim of the prose: it
prints one line, ``✓ checked: <claim>``. In a notebook that is a plain line of output. On the site
the cell's code is folded (tag ``hide-input``) and the line should read as a note, not as code
output, so this extension takes such lines off the end of a cell's printed output (a stream
``literal_block``) and puts each in a paragraph of class ``checked-claim`` (styled in
book/_static/book.css); text in backticks becomes code, as in the book's Markdown. What the cell
printed before stays a code block; an output that was only the line disappears.

A printed line rather than a rich (HTML) display, because myst-nb wraps every rich display of a
cell that draws a captioned figure in that figure, which would give the figure twice.
"""

from __future__ import annotations

import html
import re

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

try:
    from myst_nb.sphinx_ import HideCodeCellNode, depart_HideCellInput
except ImportError:  # another myst-nb layout: keep its own toggle
    HideCodeCellNode = None

MARK = "\u2713 checked: "


def claim_html(claim: str) -> str:
    """The paragraph for one claim: escaped text, `code` in backticks, the mark hidden from
    screen readers (they read "checked: ...")."""
    parts = re.split(r"`([^`]+)`", claim)
    body = "".join(html.escape(p) if i % 2 == 0 else f"<code>{html.escape(p)}</code>"
                   for i, p in enumerate(parts))
    return ('<p class="checked-claim"><span class="checked-mark" aria-hidden="true">'
            f"\u2713</span> checked: {body}</p>\n")


def split_claims(text: str) -> tuple[str, list[str]]:
    """(what stays printed, the claims) of a stream's text: the claims are its last lines that
    start with MARK."""
    lines = text.rstrip("\n").split("\n")
    claims = []
    while lines and lines[-1].startswith(MARK):
        claims.insert(0, lines.pop()[len(MARK):].strip())
    return "\n".join(lines), claims


class CheckedLines(SphinxPostTransform):
    default_priority = 199  # with myst-nb's own output transforms
    formats = ("html",)

    def run(self, **kwargs) -> None:
        for block in list(self.document.findall(nodes.literal_block)):
            classes = block.get("classes", [])
            if "stream" not in classes or "output" not in classes:
                continue
            kept, claims = split_claims(block.astext())
            if not claims:
                continue
            lines = [nodes.raw("", claim_html(c), format="html") for c in claims]
            if kept.strip():
                new = block.copy()  # same classes and language, the claims taken off
                new += nodes.Text(kept)
                lines.insert(0, new)
            # a slice, not replace_self: that would give a lone line the block's classes
            # ("output stream", a code box)
            parent = block.parent
            at = parent.index(block)
            parent[at:at + 1] = lines


def visit_fold(self, node) -> None:
    """myst-nb's visit_HideCellInput without the aria-label (see the module docstring)."""
    classes = " ".join(node["classes"])
    self.body.append(f'<details class="admonition hide {classes}">\n<summary>\n')
    self.body.append(
        f'<p class="collapsed admonition-title">{html.escape(node["prompt_show"])}</p>\n')
    self.body.append(
        f'<p class="expanded admonition-title">{html.escape(node["prompt_hide"])}</p>\n')
    self.body.append("</summary>\n")


def setup(app):
    app.setup_extension("myst_nb")
    if HideCodeCellNode is not None:
        app.add_node(HideCodeCellNode, override=True, html=(visit_fold, depart_HideCellInput))
    app.add_post_transform(CheckedLines)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
