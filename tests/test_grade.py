"""The grader (`python3 tools/book.py grade SUBMISSIONS/`) on made-up submissions of every kind.

The chapter is the exercise part of 05_euler_lagrange (its two checked exercises, with their real
checks) behind a one-line import cell, so that each submission runs in seconds. Students: one
correct (the solutions pasted back into the student notebook), one untouched (stubs only), one
wrong answer, one that crashes (an exception, a syntax error, a cell that kills the kernel), one
that loops forever (in a cell and inside an answer), one that deletes every file it can reach in
its working directory, one that calls the function the exercise forbids.
"""

from __future__ import annotations

import csv
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from conftest import BOOK
from softmaxbook.exercises.grade import grade_submissions
from softmaxbook.exercises.student import make_student_notebook

# Every test here shares one grading run (about a minute on an idle 2-core machine).
pytestmark = pytest.mark.slow

CHAPTER = "05_euler_lagrange"
RESIDUAL = "5.4 variational-ex-residual"  # gradebook columns: "<number> <label>"
BELTRAMI = "5.5 variational-ex-beltrami-code"
MAXENT = "5.6 variational-ex-maxent"


def small_chapter() -> nbformat.NotebookNode:
    """The chapter's exercises section behind a minimal first cell."""
    full = nbformat.read(BOOK / f"{CHAPTER}.ipynb", as_version=4)
    start = next(i for i, c in enumerate(full.cells)
                 if c.cell_type == "markdown" and "## Exercises" in c.source)
    first = nbformat.v4.new_code_cell("import torch\n\nfrom softmaxbook.exercises import check")
    full.cells = [full.cells[0], first] + full.cells[start:]
    return full


def solutions(full) -> list[str]:
    return [c.source for c in full.cells
            if c.cell_type == "code" and "solution" in c.metadata.get("tags", [])]


def with_answers(student, answers: list[str | None]):
    """The student notebook with its stub cells replaced by ``answers`` (None keeps the stub)."""
    nb = nbformat.reads(nbformat.writes(student), as_version=4)
    stubs = [c for c in nb.cells if "exercise-stub" in c.metadata.get("tags", [])]
    assert len(stubs) == len(answers) == 3  # residual, Beltrami, maxent
    for cell, answer in zip(stubs, answers):
        if answer is not None:
            cell.source = answer
    return nb


def insert_cell(nb, source: str, position: int = 2):
    nb.cells.insert(position, nbformat.v4.new_code_cell(source))
    return nb


WRONG_SIGN = '''import torch


def residual(f, x):
    x = x.detach().clone().requires_grad_(True)
    y = f(x)
    (d1,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), x)
    return (2 * d2 - 2 * y).detach()
'''

LOOPING = '''def residual(f, x):
    while True:
        pass
'''

FORBIDDEN = '''from softmaxbook.variational import el_residual


def residual(f, x):
    return el_residual(lambda x, f, p: p ** 2 + f ** 2, f, x)
'''

DELETE_ALL = '''import os
import shutil

for root in (".", ".."):
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
print(os.listdir("."))
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("grading")
    book = base / "book"
    book.mkdir()
    full = small_chapter()
    nbformat.write(full, book / f"{CHAPTER}.ipynb")
    (base / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nparts:\n  - caption: C\n"
                                   "    numbered: true\n    chapters:\n" + "".join(
                                       f"      - file: book/0{k}_x\n" for k in range(1, 5))
                                   + f"      - file: book/{CHAPTER}\n")
    for k in range(1, 5):  # chapters 1-4 of the toc, so that this one is chapter 5
        nbformat.write(nbformat.v4.new_notebook(), book / f"0{k}_x.ipynb")
    student = make_student_notebook(full, chapter=CHAPTER)
    good = solutions(full)
    subs = base / "SUBMISSIONS"
    kinds = {
        "ada": with_answers(student, good),
        "bob": with_answers(student, [None, None, None]),
        "cyd": with_answers(student, [WRONG_SIGN, good[1], good[2]]),
        "dan": insert_cell(insert_cell(with_answers(student, [good[0], good[1], "def maxent(:\n"]),
                                       "1 / 0"), "import os\nos._exit(1)"),
        "eve": insert_cell(with_answers(student, [LOOPING, good[1], good[2]]), "while True:\n    pass"),
        "fay": insert_cell(with_answers(student, good), DELETE_ALL, position=3),
    }
    for name, nb in kinds.items():
        (subs / name).mkdir(parents=True)
        nbformat.write(nb, subs / name / f"{CHAPTER}.ipynb")
        (subs / name / "notes.txt").write_text("keep me")
    # one student hands in a single notebook, named after themselves
    nbformat.write(with_answers(student, [FORBIDDEN, good[1], good[2]]), subs / "gus.ipynb")
    before = sorted(p.relative_to(subs) for p in subs.rglob("*"))
    out = base / "grades"
    t0 = time.monotonic()
    grades = grade_submissions(subs, book, out, toc_root=base, cell_timeout=10, check_timeout=5,
                               notebook_timeout=120, log=lambda *_: None)
    seconds = time.monotonic() - t0
    with open(out / "gradebook.csv", newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    return dict(subs=subs, before=before, out=out, rows=rows, grades=grades, seconds=seconds)


def test_every_student_is_graded(graded):
    assert set(graded["rows"]) == {"ada", "bob", "cyd", "dan", "eve", "fay", "gus"}
    assert set(graded["rows"]["ada"]) == {"student", RESIDUAL, MAXENT, BELTRAMI, "passed",
                                          "checked", "problems"}
    for name in graded["rows"]:
        assert (graded["out"] / "feedback" / f"{name}.md").is_file()
        assert list((graded["out"] / "executed" / name).glob("*.ipynb"))


def test_correct_submission_passes(graded):
    row = graded["rows"]["ada"]
    assert row[RESIDUAL] == "passed" and row[MAXENT] == "passed" and row[BELTRAMI] == "passed"
    assert row["passed"] == "3" and row["checked"] == "3" and row["problems"] == "0"


def test_stubs_fail_with_what_to_do(graded):
    row = graded["rows"]["bob"]
    assert "NotImplementedError" in row[RESIDUAL] and "NotImplementedError" in row[MAXENT]
    assert row["passed"] == "0"


def test_wrong_answer_fails_with_the_input(graded):
    row = graded["rows"]["cyd"]
    assert row[MAXENT] == "passed"
    assert row[RESIDUAL].startswith("for input f = ") and "expected residual" in row[RESIDUAL]
    feedback = (graded["out"] / "feedback" / "cyd.md").read_text()
    assert "Hint:" in feedback and "Exercise 5.4 (`variational-ex-residual`): not yet right" in \
        feedback


def test_crashing_notebook_is_graded(graded):
    row = graded["rows"]["dan"]
    assert row[RESIDUAL] == "passed", "the cells after the crashes still ran"
    assert "not defined" in row[MAXENT] and "SyntaxError" in row[MAXENT], row[MAXENT]
    feedback = (graded["out"] / "feedback" / "dan.md").read_text()
    assert "stopped the Python kernel" in feedback and "ZeroDivisionError" in feedback


def test_endless_loops_are_stopped(graded):
    row = graded["rows"]["eve"]
    assert row[RESIDUAL].startswith("timed out") and row[MAXENT] == "passed"
    feedback = (graded["out"] / "feedback" / "eve.md").read_text()
    assert "did not finish within 10 s" in feedback


def test_deleting_files_touches_only_a_copy(graded):
    row = graded["rows"]["fay"]
    assert row[RESIDUAL] == "passed" and row[MAXENT] == "passed"
    after = sorted(p.relative_to(graded["subs"]) for p in graded["subs"].rglob("*"))
    assert after == graded["before"]
    assert (graded["subs"] / "fay" / "notes.txt").read_text() == "keep me"


def test_forbidden_function_fails_the_exercise(graded):
    row = graded["rows"]["gus"]
    assert "calls softmaxbook.variational.el_residual" in row[RESIDUAL]
    assert row[MAXENT] == "passed"


def test_missing_chapter_and_unknown_notebook(tmp_path):
    subs = tmp_path / "subs"
    (subs / "hal").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), subs / "hal" / "scratch.ipynb")
    book = tmp_path / "book"
    book.mkdir()
    nbformat.write(small_chapter(), book / f"{CHAPTER}.ipynb")
    grade_submissions(subs, book, tmp_path / "out", log=lambda *_: None)
    feedback = (tmp_path / "out" / "feedback" / "hal.md").read_text()
    assert "no chapter of the book matches" in feedback


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="argument 'submissions'"):
        grade_submissions(tmp_path / "nope", tmp_path, tmp_path / "out")


def test_command_line(tmp_path):
    """`python -m softmaxbook.exercises.grade` (what `book.py grade` runs) writes its outputs;
    a notebook of no chapter is graded without starting a kernel."""
    from softmaxbook.exercises.grade import main

    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(nbformat.v4.new_notebook(), subs / "ivy.ipynb")
    book = tmp_path / "book"
    book.mkdir()
    nbformat.write(small_chapter(), book / f"{CHAPTER}.ipynb")
    assert main([str(subs), "--book", str(book), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "gradebook.csv").read_text().startswith("student,")
    with pytest.raises(SystemExit):
        main([str(subs), "--book", str(book), "--cell-timeout", "0"])
