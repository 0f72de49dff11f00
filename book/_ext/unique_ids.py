"""One id per element: sphinx-exercise gives every exercise body ``id="exercise-content"`` and every
solution body ``id="solution-content"``, so a chapter repeated each id six or more times (invalid
HTML; a link or a screen reader's "go to" finds only the first). Each body's id becomes its
exercise's or solution's own id with ``-content`` appended (``softmax-stable-lse-content``).
"""

from __future__ import annotations

from docutils import nodes

SHARED = ("exercise-content", "solution-content")


def _unique(app, doctree, docname) -> None:
    taken = set()
    for node in doctree.findall(nodes.Element):
        taken.update(node.get("ids", []))
    for node in doctree.findall(nodes.section):
        ids = node.get("ids", [])
        if not any(i in SHARED for i in ids):
            continue
        owner = node.parent
        while owner is not None and not owner.get("ids"):
            owner = owner.parent
        base = (owner["ids"][0] if owner is not None else docname).replace("/", "-")
        new, n = f"{base}-content", 1
        while new in taken:
            n += 1
            new = f"{base}-content-{n}"
        taken.add(new)
        node["ids"] = [new if i in SHARED else i for i in ids]


def setup(app):
    app.connect("doctree-resolved", _unique)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
