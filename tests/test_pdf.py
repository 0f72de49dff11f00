"""`book.py pdf`: the printing step (Chromium through Playwright) on a small page, the command's
wiring, and a one-chapter book printed by the command itself (with and without solutions): its
bookmarks, its contents' page numbers, chapters that start a page, no empty code box, and a
student handout with no solution in it. tools/pdf/measure.py reads the PDFs (pypdfium2)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, skip_or_fail_browser

sys.path.insert(0, str(ROOT / "tools" / "pdf"))

#: The chapter the command prints in these tests: the smallest notebook, so that the Sphinx build
#: stays short (the other chapters become one-line pages, which the PDF leaves out).
CHAPTER = "05_euler_lagrange"


def _book_py():
    spec = importlib.util.spec_from_file_location("book_py_pdf", ROOT / "tools" / "book.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["book_py_pdf"] = module
    spec.loader.exec_module(module)
    return module


def _need_chromium():
    if not Path("/usr/bin/chromium").exists():
        skip_or_fail_browser("Chromium not found (apt-get install -y chromium)")


@pytest.mark.slow
def test_print_pdf_prints_every_page(tmp_path):
    _need_chromium()
    page = tmp_path / "index.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><style>"
        "@media print { .break { break-before: page; } }</style></head><body>"
        "<h1>Chapter one</h1><p>Text.</p>"
        "<svg width='200' height='100'><rect width='200' height='100' fill='#369'/></svg>"
        "<h1 class='break'>Chapter two</h1><p>More text.</p>"
        "<h1 class='break'>Chapter three</h1></body></html>")
    target = tmp_path / "out" / "book.pdf"
    pages = _book_py().print_pdf(page, target)
    data = target.read_bytes()
    assert data.startswith(b"%PDF-")
    assert pages == 3
    # A4 in points
    box = re.search(rb"/MediaBox\s*\[\s*0\s+0\s+([\d.]+)\s+([\d.]+)\s*\]", data)
    assert box and abs(float(box.group(1)) - 595.9) < 1 and abs(float(box.group(2)) - 842.9) < 1


def test_pdf_command_is_wired():
    book_py = _book_py()
    assert callable(book_py.pdf) and callable(book_py.print_pdf)
    text = (ROOT / "tools" / "book.py").read_text()
    assert 'sub.add_parser("pdf"' in text and '"--builder", "singlehtml"' in text
    assert '"--no-solutions"' in text and "hide_solutions=hide" in text


def test_contents_pages_come_from_the_bookmarks():
    import printer

    marks = [(0, "Contents", 2), (0, "1. Softmax facts: stablecomputation", 4),
             (1, "1.1. The softmax and why thenaive formula fails", 4),
             (2, "Exercise 1.1", 7), (1, "1.10. 1.10. ExercisesExercises", 7)]
    entries = [{"title": "1. Softmax facts: stable computation"},
               {"title": "1.1. The softmax and why the naive formula fails"},
               {"title": "1.10. Exercises"}]
    assert printer.pages_of_entries(marks, entries) == [4, 4, 7]
    with pytest.raises(RuntimeError, match="no bookmark"):
        printer.pages_of_entries(marks, entries + [{"title": "2. Choices"}])


def test_empty_code_box_is_measured():
    """measure.empty_box_fraction finds a code box's empty stretch (the issue's pages: a grey box
    at a page's end, its code on the next page), not a box full of code lines."""
    np = pytest.importorskip("numpy")
    import measure

    page = np.full((500, 350, 3), 255)
    page[300:400, 40:320] = (247, 247, 247)  # a cell's code box: grey ...
    page[300:400, 40:43] = (74, 168, 74)  # ... with its green edge
    page[100:110, 40:300] = 20  # a line of text above it
    assert abs(measure.empty_box_fraction(None, 1, image=page) - 100 / 500) < 0.01
    page[305:400:12, 60:200] = 30  # the box's code lines: at most 11 rows free of ink
    assert measure.empty_box_fraction(None, 1, image=page) < 0.03
    other = np.full((500, 350, 3), 255)
    other[350:450, 30:330] = (243, 244, 245)  # the theme's other code grey, 20 % of the page
    assert abs(measure.empty_box_fraction(None, 1, image=other) - 100 / 500) < 0.01


# ---- the command on one chapter ------------------------------------------------------------------

def _contents(text: str) -> list[tuple[str, int]]:
    """(title, page) per line of a printed contents page; a title that wraps ends on the line
    with its number."""
    found, pending = [], ""
    # (PDFium reads a hyphen where a title wrapped as \x02, and may glue the number to the title)
    for line in text.replace("\x02", "-").splitlines():
        line = line.strip()
        if not line or line == "Contents":
            continue
        m = re.fullmatch(r"(.*?\D)\s*(\d+)", line)
        if m:
            found.append(((pending + " " + m.group(1)).strip(), int(m.group(2))))
            pending = ""
        else:
            pending = (pending + " " + line).strip()
    return found


def _words(text: str) -> str:
    return re.sub(r"\W+", "", text).lower()


@pytest.fixture(scope="module")
def printed():
    """The chapter printed with solutions and without, by two runs of the command at once."""
    _need_chromium()
    pytest.importorskip("pypdfium2")
    env = dict(os.environ)
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tools" / "book.py"), "pdf", CHAPTER,
                               *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for extra in ([], ["--no-solutions"])]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for proc, out in zip(procs, outs):
        assert proc.returncode == 0, out[-3000:]
    print(f"two one-chapter PDFs in {time.time() - t0:.0f} s")
    return {"book": ROOT / "_build" / f"book-{CHAPTER}.pdf",
            "handout": ROOT / "_build" / f"book-{CHAPTER}-nosolutions.pdf"}


@pytest.mark.slow
def test_pdf_is_a_book(printed):
    import measure

    found = measure.survey(printed["book"])
    marks = found["bookmarks"]
    doc = measure.open_pdf(printed["book"])
    texts = [measure.page_text(doc, n) for n in range(1, found["pages"] + 1)]
    doc.close()

    # bookmarks: the contents, the front page, the chapter (with its sections), the instructors'
    # pages, every document at the top level
    top = [title for level, title, _ in marks if level == 0]
    assert top[0] == "Contents" and len(top) >= 4, top
    chapter = [i for i, (level, title, _) in enumerate(marks)
               if level == 0 and _words(title).startswith("5functionalderivatives")]
    assert len(chapter) == 1, top
    sections = [m for m in marks[chapter[0] + 1:] if m[0] == 1]
    assert len(sections) >= 5, marks

    # every document starts a page, its title the first thing on it
    for level, title, page in marks:
        if level == 0:
            assert _words(texts[page - 1]).startswith(_words(title)[:20]), (title, page)

    # the contents: every document and its sections (the exercise index's sections, the
    # chapters' titles again, left out), in the order and with the pages of their bookmarks,
    # each heading printed on its page
    contents_page = marks[0][2]
    first_doc = marks[1][2]
    listed = [entry for n in range(contents_page, first_doc)
              for entry in _contents(texts[n - 1])]
    expected, parent = [], None
    for level, title, page in marks[1:]:
        if level == 0:
            parent = title
        if level == 0 or (level == 1 and parent != "Exercise index"):
            expected.append((title, page))
    assert len(listed) == len(expected) >= 10, (listed, expected)
    from difflib import SequenceMatcher

    for (title, page), (mark, mark_page) in zip(listed, expected):
        # (the text of a heading's maths is read apart from its line: the words nearly match)
        assert SequenceMatcher(None, _words(title), _words(mark)).ratio() > 0.8, (title, mark)
        assert page == mark_page, (title, page, mark_page)
        assert _words(title)[:12] in _words(texts[page - 1]), (title, page)

    # no page ends in (or holds) an empty stretch of code box taller than 10 % of the page
    worst = max(range(found["pages"]), key=lambda i: found["empty_box"][i])
    assert found["empty_box"][worst] <= 0.10, f"page {worst + 1}: {found['empty_box'][worst]}"

    # the book prints its solutions (what the handout must not)
    assert any("Solution to" in t for t in texts)


@pytest.mark.slow
def test_handout_has_no_solutions(printed):
    import measure

    doc = measure.open_pdf(printed["handout"])
    texts = [measure.page_text(doc, n) for n in range(1, len(doc) + 1)]
    doc.close()
    assert "without their solutions" in texts[0]
    assert len(measure.outline(measure.open_pdf(printed["handout"]))) > 5
    whole = "\n".join(texts)
    assert "Exercise 5.1" in whole
    assert "Solution to" not in whole
    # the lines of the chapter's solution code (cells tagged `solution`): every one printed in
    # the book's PDF, none in the handout
    import json

    notebook = json.loads((ROOT / "book" / f"{CHAPTER}.ipynb").read_text())
    lines = [line.strip() for cell in notebook["cells"]
             if "solution" in cell.get("metadata", {}).get("tags", [])
             for line in "".join(cell["source"]).splitlines()
             if len(line.strip()) >= 25
             and not line.strip().startswith(("def ", "import ", "from ", '"""', "#"))]
    assert len(lines) >= 5, lines
    book = measure.open_pdf(printed["book"])
    text = " ".join(measure.page_text(book, n) for n in range(1, len(book) + 1))
    book.close()
    flat = lambda s: re.sub(r"\s+", " ", s)  # noqa: E731
    assert all(flat(line) in flat(text) for line in lines)
    assert not [line for line in lines if flat(line) in flat(whole)]
    # nor the chapter's checks' verdicts on the reference solutions ("✓ Exercise
    # variational-residual (...): correct on 5 test cases"), which the book prints
    verdict = r"Exercise\s+variational-[\w-]+\s+\([^)]*\)\S*\s+correct\s+on"
    assert re.search(verdict, text)
    assert not re.search(verdict, whole)
