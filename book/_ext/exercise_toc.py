"""The exercises in the page contents (the "Contents" sidebar on the right).

sphinx-exercise draws an exercise as an admonition, not as a section, so Sphinx's table of contents
of a page never lists one: a reader looking for "Exercise 7.3" had to scroll. This extension
adds an entry per numbered exercise under the section that holds it ("Exercises"), linking to the
exercise: its number as the page's own title shows it and its kind from the exercise index
(:mod:`softmaxbook.exercises.index`), "Exercise 7.3 (coding, checked)".

Two steps, because the numbers exist only after every page is read:
1. ``doctree-read`` (after Sphinx's own table-of-contents collector, priority 500): append the
   entries to ``env.tocs[docname]``, under the entry of the exercise's section, with a provisional
   text;
2. ``doctree-resolved`` (when the page is written, after the figure numbers are assigned, before
   its table of contents is rendered): write each entry's number from ``env.toc_fignumbers``,
   the numbers the exercise titles on the page use.
"""

from __future__ import annotations

from docutils import nodes
from sphinx import addnodes

#: marks the reference nodes this extension made (their number is filled in at env-updated)
FLAG = "book_exercise_toc"


def _section_entry(toc: nodes.Node, anchor: str):
    for ref in toc.findall(nodes.reference):
        if ref.get("anchorname") == anchor:
            return ref.parent.parent  # reference < compact_paragraph < list_item
    return None


def _kinds(path) -> dict[str, str]:
    """{label: "coding, checked"} of a chapter notebook's exercises ({} for other pages)."""
    from pathlib import Path

    path = Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        return {}
    import nbformat

    from softmaxbook.exercises.index import notebook_exercises

    nb = nbformat.read(path, as_version=4)
    return {e.label: e.kind + (", checked" if e.check else "")
            for e in notebook_exercises(nb, path.stem)}


def _add_entries(app, doctree) -> None:
    from sphinx_exercise.nodes import exercise_enumerable_node

    env = app.env
    docname = env.docname
    toc = env.tocs.get(docname)
    if toc is None:
        return
    kinds = None
    for ex in doctree.findall(exercise_enumerable_node):
        ids = ex.get("ids", [])
        if not ids:
            continue
        section = ex.parent
        while section is not None and not isinstance(section, nodes.section):
            section = section.parent
        item = None
        if section is not None and section.get("ids"):
            item = _section_entry(toc, "#" + section["ids"][0])
        if item is None:  # not inside a listed section: under the page's own entry
            item = toc.next_node(nodes.list_item)
            if item is None:
                continue
        sub = next((c for c in item.children if isinstance(c, nodes.bullet_list)), None)
        if sub is None:
            sub = nodes.bullet_list()
            item += sub
        ref = nodes.reference("", "", nodes.Text("Exercise"), internal=True, refuri=docname,
                              anchorname="#" + ids[0])
        ref[FLAG] = ids[0]
        if kinds is None:
            kinds = _kinds(env.doc2path(docname))
        ref["book_exercise_kind"] = kinds.get(ids[0], "")
        sub += nodes.list_item("", addnodes.compact_paragraph("", "", ref))


def _number_entries(app, doctree, docname) -> None:
    env = app.env
    toc = env.tocs.get(docname)
    if toc is not None:
        numbers = env.toc_fignumbers.get(docname, {}).get("exercise", {})
        for ref in list(toc.findall(nodes.reference)):
            label = ref.get(FLAG)
            if label is None:
                continue
            number = numbers.get(label)
            text = "Exercise " + ".".join(map(str, number)) if number else "Exercise"
            if ref.get("book_exercise_kind"):
                text += f" ({ref['book_exercise_kind']})"
            ref[:] = [nodes.Text(text)]
            # In a numbered part Sphinx gives every nested entry a section number ("7.9.1."),
            # which an exercise is not: its own number is in the text.
            if "secnumber" in ref:
                del ref["secnumber"]


def setup(app):
    app.connect("doctree-read", _add_entries, priority=600)
    app.connect("doctree-resolved", _number_entries)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
