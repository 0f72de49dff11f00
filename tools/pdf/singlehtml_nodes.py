"""Sphinx extension for the PDF's single-page build (`book.py pdf` adds it; the site does not
need it): give the ``singlehtml`` builder every node handler registered for ``html``.

Sphinx looks a builder's node handlers up by the builder's name and falls back to its format
("html") only when no extension registered any for that name. sphinx-exercise registers its
nodes for ``singlehtml``, so the single-page builder then finds none of the ``html`` ones (myst-nb's
folded cell, ``HideCodeCellNode``, among them) and fails: "unknown node type".
"""

from __future__ import annotations


def _share_html_handlers(app) -> None:
    handlers = app.registry.translation_handlers
    single = handlers.setdefault("singlehtml", {})
    for node, visitors in handlers.get("html", {}).items():
        single.setdefault(node, visitors)


def setup(app):
    app.connect("builder-inited", _share_html_handlers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
