"""Measure a printed PDF: where each bookmark points, the text of a page, and the tallest empty
code box on each page (a run of rows filled with the code boxes' grey and no ink in them).

    .venv/bin/python tools/pdf/measure.py _build/book.pdf      # prints a summary

Uses pypdfium2 (PDFium: renders pages and reads their text and outline)."""

from __future__ import annotations

import sys
from pathlib import Path

#: The greys of code boxes: a cell's code (myst-nb, #f7f7f7), other code (pydata-sphinx-theme's
#: #f3f4f5); a pixel counts as box grey when its channels differ by at most 4 and lie in this
#: range (white paper is 255, text far darker).
GREY_RANGE = (232, 251)
DPI = 40


def open_pdf(path):
    import pypdfium2 as pdfium

    return pdfium.PdfDocument(str(path))


def outline(doc) -> list[tuple[int, str, int]]:
    """The bookmarks: (level, title, 1-based page) in order."""
    items = []
    for item in doc.get_toc(max_depth=8):
        dest = item.get_dest()
        page = dest.get_index() + 1 if dest is not None and dest.get_index() is not None else 0
        items.append((item.level, item.get_title(), page))
    return items


def page_text(doc, number: int) -> str:
    """The text of page ``number`` (1-based)."""
    page = doc[number - 1]
    text = page.get_textpage()
    try:
        return text.get_text_bounded()
    finally:
        text.close()
        page.close()


def _render(doc, number: int, dpi: int):
    import numpy as np

    page = doc[number - 1]
    try:
        return np.asarray(page.render(scale=dpi / 72).to_pil().convert("RGB")).astype(int)
    finally:
        page.close()


def empty_box_fraction(doc, number: int, dpi: int = DPI, image=None) -> float:
    """The height, as a fraction of the page's, of the tallest run of rows on page ``number``
    that are code-box grey across at least 40 % of the page's width with no ink (a pixel darker
    than 200) between the box's edges: an empty stretch of a code box."""
    import numpy as np

    img = _render(doc, number, dpi) if image is None else image
    height, width, _ = img.shape
    low, high = img.min(axis=2), img.max(axis=2)
    grey = (high - low <= 4) & (low >= GREY_RANGE[0]) & (high <= GREY_RANGE[1])
    ink = img.min(axis=2) < 200
    best = run = 0
    for y in range(height):
        row = grey[y]
        xs = np.flatnonzero(row)
        empty = False
        if xs.size >= 0.4 * width:
            left, right = xs[0], xs[-1]
            # inside the box: grey, with no ink (the box's border lies at its edges)
            inner = slice(left + 2, right - 1)
            empty = not ink[y, inner].any() and row[inner].mean() > 0.97
        run = run + 1 if empty else 0
        best = max(best, run)
    return best / height


def blank_end_fraction(doc, number: int, dpi: int = DPI, image=None,
                       bottom_margin_mm: float = 17) -> float:
    """How much of page ``number`` is blank below its last printed row (the footer's page
    number, in the bottom margin, left out), as a fraction of the page's height: a page that
    ends early because what came next (an unbreakable box, a figure) did not fit."""
    import numpy as np

    img = _render(doc, number, dpi) if image is None else image
    height = img.shape[0]
    body_end = height - int(round(bottom_margin_mm / 25.4 * dpi))
    inked = np.flatnonzero((img[:body_end].min(axis=2) < 245).any(axis=1))
    last = inked[-1] + 1 if inked.size else 0
    return (body_end - last) / height


def survey(path) -> dict:
    """Every page's empty code box and blank end, and the bookmarks."""
    doc = open_pdf(path)
    try:
        pages = len(doc)
        marks = outline(doc)
        boxes, blanks = [], []
        for n in range(1, pages + 1):
            img = _render(doc, n, DPI)
            boxes.append(empty_box_fraction(doc, n, image=img))
            blanks.append(blank_end_fraction(doc, n, image=img))
    finally:
        doc.close()
    # a page before a document's first page (a chapter start) may end early
    starts = {page for level, _title, page in marks if level == 0}
    return {"pages": pages, "bookmarks": marks, "empty_box": boxes, "blank_end": blanks,
            "chapter_starts": sorted(starts)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    found = survey(Path(argv[0]))
    boxes, blanks, starts = found["empty_box"], found["blank_end"], set(found["chapter_starts"])
    bad = [(n, f) for n, f in enumerate(boxes, 1) if f > 0.10]
    early = [(n, f) for n, f in enumerate(blanks, 1) if f > 0.25 and n + 1 not in starts
             and n != found["pages"]]
    print(f"{found['pages']} pages, {len(found['bookmarks'])} bookmarks "
          f"({len(starts)} at the top level); {len(bad)} pages with an empty code box taller "
          f"than 10 % of the page; {len(early)} pages (not before a chapter) ending with more "
          f"than 25 % of the page blank")
    for n, f in bad:
        print(f"  page {n}: {100 * f:.0f} % empty code box")
    for n, f in early:
        print(f"  page {n}: its last {100 * f:.0f} % blank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
