"""Student notebooks read well in plain JupyterLab: no MyST source left (numbered equations as
$$ … \\tag{N.k} $$, glued numbers filled in, citations as "(Author, Year)" with a reference list,
exercise numbers instead of labels in the task and in the stubs)."""

from __future__ import annotations

import re
import shutil
import time

import nbformat
import pytest

from conftest import BOOK, ROOT, chapter_notebooks
from softmaxbook.exercises.index import equation_labels, notebook_exercises, toc_chapters
from softmaxbook.exercises.readable import (Context, bibliography, context_for,
                                            readable_markdown)
from softmaxbook.exercises.student import main, make_student_notebook

CHAPTERS = chapter_notebooks()
NUMBERS = {c.stem: c.number for c in toc_chapters(ROOT)}
LEFTOVERS = ["{glue", "{footcite", "{footbibliography}", "```{math}", "{eq}`", "{ref}`",
             "{doc}`", "{exercise", "{note}", "{solution", ":label:", ":class:"]
GLUED = re.compile(r"""\bglue\(\s*(?:f?["'])([^"']+)["']""")


def leftovers(nb) -> list[str]:
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return [s for s in LEFTOVERS if s in text]


@pytest.fixture(scope="module")
def references():
    return bibliography(BOOK / "references.bib")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_myst_source_left(path, references):
    full = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in full.cells if c.cell_type == "code")
    md = "\n".join(c.source for c in full.cells if c.cell_type == "markdown")
    # every number the prose pastes is glued by a code cell (else the export could not fill it)
    keys = set(GLUED.findall(code))
    used = {k.rsplit(":", 1)[0] if ":" in k else k
            for k in re.findall(r"\{glue:text\}`([^`]*)`", md)}
    f_keys = re.findall(r"""\bglue\(\s*f["']""", code)
    assert used <= keys or f_keys, f"{path.name}: glue keys never glued: {sorted(used - keys)}"
    number = NUMBERS[path.stem]
    ctx = context_for(full, number, glue={k: "0.25" for k in used}, references=references,
                      titles={p.stem: p.stem for p in CHAPTERS})
    student = make_student_notebook(full, chapter=path.stem, context=ctx)
    assert leftovers(student) == [], path.name
    text = "\n".join(c.source for c in student.cells if c.cell_type == "markdown")
    # every numbered equation, with the number the book gives it, in order
    n_eq = len(equation_labels(full))
    assert re.findall(r"\\tag\{([\d.]+)\}", text) == [f"{number}.{k}" for k in
                                                      range(1, n_eq + 1)]
    # every exercise announced by its number; stubs name it by number, not by label
    exercises = notebook_exercises(full, path.stem, number)
    assert re.findall(r"^\*\*Exercise ([\d.]+)\.\*\*", text, re.M) == [e.numbered
                                                                     for e in exercises]
    stubs = [c.source for c in student.cells if "exercise-stub" in c.metadata.get("tags", [])]
    # a stub per coding exercise and per derivation whose end result the student enters (issue 23)
    answered = [e for e in exercises if e.kind == "coding" or e.check]
    assert len(stubs) == len(answered)
    for stub, ex in zip(stubs, answered):
        assert f"Exercise {ex.numbered}" in stub and ex.label not in stub
    # citations are readable and listed at the end
    cited = re.findall(r"\{footcite:[pt]\}`([^`]*)`", md)
    if cited:
        assert "(" in text and not re.search(r"\{footcite", text)
        for key in {k.strip() for group in cited for k in group.split(",")}:
            r = references[key]
            assert r["title"][:30] in text, f"{path.name}: {key} not in the reference list"


def test_conversion_by_hand():
    ctx = Context(chapter_number=3, equations={"t-a": "3.1", "t-b": "3.2"},
                  exercises={"t-ex": "3.4"}, glue={"t-x": "0.123456", "t-s": "'text'"},
                  references={"k1": {"authors": ["Gutmann", "Hyvärinen"], "year": "2010",
                                     "title": "NCE", "where": "AISTATS",
                                     "full": ["Gutmann, Michael", "Hyvärinen, Aapo"]}},
                  titles={"01_softmax": "Softmax facts"})
    src = ("(t-target)=\n## Head\n\n```{math}\n:label: t-b\nx = 1\n```\n\nSee {eq}`t-b`, "
           "{ref}`t-ex`, {doc}`01_softmax`, {glue:text}`t-x:.2f`, {glue:text}`t-s` and "
           "{footcite:t}`k1`.\n\n```{note}\nMind {footcite:p}`k1`.\n```\n\n"
           "```{footbibliography}\n```")
    out = readable_markdown(src, ctx)
    assert out.startswith("## Head")
    assert "$$\nx = 1 \\tag{3.2}\n$$" in out
    assert "See (3.2), Exercise 3.4, [Softmax facts](01_softmax.ipynb), 0.12, text and " \
           "Gutmann and Hyvärinen (2010)." in out
    assert "> **Note.**\n> Mind (Gutmann and Hyvärinen, 2010)." in out
    assert out.endswith("- Gutmann, Michael, Hyvärinen, Aapo (2010). NCE. AISTATS.")
    # without glue values (no build cache: book.py student executes nothing) the text points
    # to the code that computes the number instead of showing a MyST role
    assert readable_markdown("{glue:text}`t-x:.2f`", Context()) == \
        "*(`t-x`, computed by the code of this chapter)*"


@pytest.mark.slow
def test_export_fills_glue_from_an_execution_and_from_the_build_cache(tmp_path):
    """`book.py student` end to end on the template chapter: numbers from one execution of the
    notebook, then the same numbers from a Jupyter cache holding the executed notebook."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from softmaxbook.exercises.readable import executed_notebook, glue_values

    book = tmp_path / "book"
    book.mkdir()
    shutil.copy(ROOT / "tools" / "chapter_template.ipynb", book / "01_template.ipynb")
    shutil.copy(BOOK / "references.bib", book / "references.bib")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nparts:\n"
                                       "  - numbered: true\n    chapters:\n"
                                       "      - file: book/01_template\n")
    t0 = time.monotonic()
    assert main([str(book), str(tmp_path / "a")]) == 0
    seconds = time.monotonic() - t0
    a = nbformat.read(tmp_path / "a" / "01_template.ipynb", as_version=4)
    assert leftovers(a) == []
    executed, how = executed_notebook(book / "01_template.ipynb")
    assert how == "executed"
    value = float(glue_values(executed)["template-pmax"])
    text = "\n".join(c.source for c in a.cells)
    assert f"{value:.3f}" in text and "\\tag{1.1}" in text and "(1.1)" in text
    # the build's cache: the same notebook, executed, found by its code
    cache = get_cache(str(tmp_path / "cache"))
    cache.cache_notebook_bundle(CacheBundleIn(executed, str(book / "01_template.ipynb")))
    assert main([str(book), str(tmp_path / "b"), "--glue", "cache",
                 "--cache", str(tmp_path / "cache")]) == 0
    b = nbformat.read(tmp_path / "b" / "01_template.ipynb", as_version=4)
    assert [c.source for c in b.cells] == [c.source for c in a.cells]
    # no cache and no execution: each number is named and points to the code that computes it
    # (no raw {glue} role is left for a student to puzzle over), nothing else changes
    assert main([str(book), str(tmp_path / "c"), "--glue", "none"]) == 0
    c = nbformat.read(tmp_path / "c" / "01_template.ipynb", as_version=4)
    assert leftovers(c) == []
    assert "*(`template-pmax`, computed by the code of this chapter)*" in "\n".join(
        cell.source for cell in c.cells)
    print(f"export with one execution: {seconds:.1f} s")
