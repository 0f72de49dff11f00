"""The instructors' exercise index (book/exercise_index.md, written by `book.py exercise-index`
before every build) lists every exercise of every chapter, with its number, kind and check.

The expected lists are read from the notebooks here with plain regular expressions, independently
of the parser in softmaxbook.exercises.index.
"""

from __future__ import annotations

import json
import re

import nbformat
import pytest

from conftest import ROOT, chapter_notebooks
from softmaxbook.exercises.index import (KINDS, book_exercises, index_markdown, main,
                                         notebook_exercises, toc_chapters)

EXERCISE = re.compile(r"^(?:`{3,}|:{3,})\{(exercise(?:-start)?)\}[^\n]*\n(?::[\w-]+:[^\n]*\n)*?"
                      r":label:\s*(\S+)", re.M)
CHECK = re.compile(r"""^check\(\s*["']([\w-]+)["']""", re.M)
# a gated exercise whose :class: names another kind: a derivation whose end result the student
# enters and a check tests (issue 23), still auto-checked
GATED_OPTIONS = re.compile(r"^(?:`{3,}|:{3,})\{exercise-start\}[^\n]*\n((?::[\w-]+:[^\n]*\n)+)",
                           re.M)


def declared_kinds(path):
    """{label: kind} of the gated exercises whose :class: option names a kind other than coding."""
    cells = json.loads(path.read_text())["cells"]
    md = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    out = {}
    for block in GATED_OPTIONS.findall(md):
        opts = dict(re.findall(r"^:([\w-]+):\s*(\S*)", block, re.M))
        if opts.get("class") in ("derivation", "exploration"):
            out[opts["label"]] = opts["class"]
    return out


def raw(path):
    """(kind of directive, label) of every exercise, and the labels of every check call."""
    cells = json.loads(path.read_text())["cells"]
    md = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return EXERCISE.findall(md), CHECK.findall(code)


@pytest.fixture(scope="module")
def page():
    return index_markdown(ROOT)


def rows(page):
    """(chapter number, exercise number, label, chapter stem, kind, auto-checked) per row."""
    out, number, stem = [], None, None
    for line in page.splitlines():
        m = re.match(r"^## (\d+)\. ", line)
        if m:
            number, stem = m.group(1), None
        m = re.match(r"^\{doc\}`The chapter <(\w+)>`", line)
        if m:
            stem = m.group(1)
        m = re.match(r"^\| \{ref\}`(\d+)\.(\d+) <([\w-]+)>` \| (\w+) \| (yes|no) \| "
                     r"`([\w-]+)`: ", line)
        if m:
            assert m.group(1) == number and stem and m.group(3) == m.group(6), line
            out.append((m.group(1), m.group(2), m.group(3), stem, m.group(4), m.group(5)))
    return out


def test_every_exercise_of_every_chapter_is_listed(page):
    listed = rows(page)
    chapters = chapter_notebooks()
    assert chapters
    expected = []
    for number, path in enumerate(chapters, 1):  # the toc's chapters part is numbered
        exercises, _ = raw(path)
        assert len(exercises) >= 5, f"{path.name}: fewer than five exercises found"
        expected += [(str(number), str(k), label, path.stem)
                     for k, (_, label) in enumerate(exercises, 1)]
    got = [r[:4] for r in listed]
    assert got == expected
    total = re.search(r"The book has (\d+) exercises", page)
    assert total and int(total.group(1)) == len(expected)


def test_kinds_and_checks(page):
    listed = {r[2]: r for r in rows(page)}
    for path in chapter_notebooks():
        exercises, checks = raw(path)
        coding = [label for kind, label in exercises if kind == "exercise-start"]
        declared = declared_kinds(path)
        for kind, label in exercises:
            row = listed[label]
            assert row[4] in KINDS
            assert (row[4] == "coding") == (kind == "exercise-start"
                                            and label not in declared), label
            assert row[4] == declared.get(label, row[4]), label
            assert (row[5] == "yes") == (label in coding), label
        # every check(...) call of the chapter belongs to one of its coding exercises
        nb = nbformat.read(path, as_version=4)
        parsed = notebook_exercises(nb, path.stem)
        assert sorted(e.check for e in parsed if e.check) == sorted(checks), path.name
        assert all(e.check for e in parsed if e.kind == "coding"), path.name
        assert all(e.check for e in parsed if e.label in declared), path.name


def test_the_parser_on_a_made_up_notebook():
    md = nbformat.v4.new_markdown_cell
    nb = nbformat.v4.new_notebook(cells=[
        md("# T\n\n```{math}\n:label: t-eq\nx\n```\n\n## Exercises\n\n"
           "```{exercise}\n:label: t-derive\n\nShow that $a | b$ holds.\n```\n\n"
           "```{solution} t-derive\n:class: dropdown\n\nBecause.\n```\n\n"
           "````{exercise}\n:label: t-look\n:class: exploration\n\nLook at it.\n````"),
        md("```{exercise-start}\n:label: t-code\n```\nWrite `f(x)`.\n```{exercise-end}\n```"),
        nbformat.v4.new_code_cell("check('t-code-check', f)"),
        md(":::{exercise}\n:label: t-run\nRun the experiment again.\n:::"),
    ])
    got = notebook_exercises(nb, "09_t", 9)
    assert [(e.numbered, e.label, e.kind, e.check, e.answer) for e in got] == [
        ("9.1", "t-derive", "derivation", None, None),
        ("9.2", "t-look", "exploration", None, None),
        ("9.3", "t-code", "coding", "t-code-check", "f"),
        ("9.4", "t-run", "exploration", None, None),
    ]
    assert got[0].task == "Show that $a | b$ holds."


def test_chapter_numbers_follow_the_toc():
    chapters = toc_chapters(ROOT)
    assert [c.number for c in chapters if c.number] == list(range(1, len(chapter_notebooks()) + 1))
    assert {e.chapter for e in book_exercises(ROOT)} == {p.stem for p in chapter_notebooks()}


def test_command_writes_the_page(tmp_path, page):
    target = tmp_path / "exercise_index.md"
    assert main([str(ROOT), str(target)]) == 0
    assert target.read_text() == page
    # pipes inside math are escaped, so no table row has too many cells
    for line in page.splitlines():
        if line.startswith("| {ref}"):
            assert len(re.findall(r"(?<!\\)\|", line)) == 5, line
