"""Assignments: student notebooks, answer keys and the solution-free site for a selection of
chapters (`book.py student 5 7`, `book.py answer-key 5`, `book.py build-nosolutions 5`)."""

from __future__ import annotations

import importlib.util
import re
import sys

import nbformat
import pytest
import yaml

from conftest import BOOK, ROOT, chapter_notebooks
from softmaxbook.exercises.index import notebook_exercises
from softmaxbook.exercises.student import main, make_answer_key, select_chapters

CHAPTERS = chapter_notebooks()


def test_select_chapters_by_stem_name_path_or_number():
    every = sorted(BOOK.glob("*.ipynb"))
    assert select_chapters(BOOK, None) == every == select_chapters(BOOK, [])
    first, last = CHAPTERS[0], CHAPTERS[-1]
    number = str(int(last.stem.split("_")[0]))
    got = select_chapters(BOOK, [number, first.name, str(first), last.stem])
    assert got == [first, last]  # book order, once each
    assert select_chapters(BOOK, ["0" + number]) == [last]


@pytest.mark.parametrize("bad", ["99", "softmax", "01_softmax.ipynb.bak"])
def test_select_chapters_rejects_unknown_names(bad):
    with pytest.raises(ValueError, match=r"argument 'chapters' names .*chapters: 01_softmax"):
        select_chapters(BOOK, [bad])


def test_student_command_writes_only_the_selection(tmp_path):
    pick = CHAPTERS[:2]
    # --glue none: no execution to fill in numbers (tests/test_student_readable.py does that)
    assert main([str(BOOK), str(tmp_path), *[p.stem for p in pick], "--glue", "none"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in pick)
    nb = nbformat.read(tmp_path / pick[0].name, as_version=4)
    assert nb.metadata["softmaxbook"]["chapter"] == pick[0].stem
    assert not any("solution" in c.metadata.get("tags", []) for c in nb.cells)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_answer_key_has_every_exercise_and_its_solution(path):
    full = nbformat.read(path, as_version=4)
    exercises = notebook_exercises(full, path.stem, 7)
    key = make_answer_key(full, chapter=path.stem, chapter_number=7)
    text = "\n".join(c.source for c in key.cells)
    headings = re.findall(r"^## Exercise (7\.\d+) \(`([\w-]+)`, (\w+)\)$", text, re.M)
    assert headings == [(e.numbered, e.label, e.kind) for e in exercises]
    # every solution's code and every check is there, in the order of the chapter
    solutions = [c.source for c in full.cells if "solution" in c.metadata.get("tags", [])]
    code = [c.source for c in key.cells if c.cell_type == "code"]
    assert [s for s in code if s in solutions] == solutions
    checks = [c.source for c in full.cells if c.cell_type == "code"
              and c.source.lstrip().startswith("check(")]
    assert [s for s in code if s in checks] == checks
    # every exercise has some solution text or code, and no directive is left to render
    for block in re.split(r"^## Exercise ", text, flags=re.M)[1:]:
        assert "**Solution.**" in block or "check(" in block, block[:80]
    assert not re.search(r"\{(exercise|solution)(-start|-end)?\}", text)
    assert key.metadata["softmaxbook"] == {"chapter": path.stem, "answer_key": True}
    assert all(c.outputs == [] for c in key.cells if c.cell_type == "code")


def test_answer_key_command(tmp_path):
    pick = CHAPTERS[0]
    assert main([str(BOOK), str(tmp_path), pick.stem, "--answer-key", "--glue", "none"]) == 0
    key = nbformat.read(tmp_path / pick.name, as_version=4)
    assert key.cells[0].source.startswith("# Answer key: ")
    assert "## Exercise 1.1 (" in "\n".join(c.source for c in key.cells)


def _book_py():
    spec = importlib.util.spec_from_file_location("book_py", ROOT / "tools" / "book.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["book_py"] = module
    spec.loader.exec_module(module)
    return module


def test_assignment_site_source_keeps_numbers(tmp_path):
    """The source tree of `build-nosolutions CH ...`: the toc unchanged, the chapters not chosen
    replaced by one-line pages with their titles, the chosen notebooks copied as they are."""
    book_py = _book_py()
    chosen = CHAPTERS[1]
    src = book_py._assignment_source([chosen.stem], tmp_path / "src")
    assert (src / "_toc.yml").read_text() == (ROOT / "_toc.yml").read_text()
    toc = yaml.safe_load((src / "_toc.yml").read_text())
    for part in toc["parts"]:
        for entry in part["chapters"]:
            name = entry["file"]
            if (ROOT / (name + ".ipynb")).is_file():
                if name.endswith(chosen.stem):
                    assert (src / (name + ".ipynb")).read_bytes() == chosen.read_bytes()
                    assert not (src / (name + ".md")).exists()
                else:
                    assert not (src / (name + ".ipynb")).exists()
                    page = (src / (name + ".md")).read_text()
                    assert page.startswith("# ") and "not part of this assignment" in page
            elif (ROOT / (name + ".md")).is_file():  # intro, instructors
                assert (src / (name + ".md")).read_bytes() == (ROOT / (name + ".md")).read_bytes()
    assert (src / "book" / "references.bib").is_file()
    assert (src / "book" / "_static").is_dir()
    assert not (src / "book" / "_ext").exists()  # the config names it absolutely
