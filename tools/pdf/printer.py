"""Print the single-page HTML of the book as a book (`python3 tools/book.py pdf`; runs under the
venv's Python).

Chromium prints the page through Playwright, with print.css (code boxes that split across pages,
figures kept with their captions, each chapter on a new page) and prepare.js (a title page, a
contents list, headings nested by document). Page numbers of the contents come from a first
printing: Chromium's outline of that PDF (one bookmark per heading, ``outline=True``) says on
which page each heading landed; they are written into the contents and the page printed again,
and the second PDF's outline must put every heading on the same page (else a third pass).
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import measure  # noqa: E402  (tools/pdf/measure.py)

MARGIN = {"top": "15mm", "bottom": "17mm", "left": "16mm", "right": "16mm"}
FOOTER = ('<div style="font-size:9px;width:100%;text-align:center;color:#555">'
          '<span class="pageNumber"></span></div>')


def _book_info() -> dict:
    text = (ROOT / "_config.yml").read_text()
    found = {k: re.search(rf"^{k}:\s*(.+)$", text, re.M) for k in ("title", "author")}
    return {k: (m.group(1).strip().strip('"') if m else "") for k, m in found.items()}


def _serve(root: Path):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def _norm(title: str) -> str:
    # Chromium's bookmark titles lose the spaces where a heading wraps (and sometimes repeat a
    # wrapped line); maths in a heading is text in a bookmark, nothing in the page's text
    return re.sub(r"\W+", "", title).lower()


def pages_of_entries(marks: list, entries: list) -> list[int]:
    """The page of each contents entry (prepare.js: chapters and their sections, in order),
    from the PDF's bookmarks: the next bookmark, in order, whose title ends like the entry's
    (the outline also has bookmarks for deeper headings and for exercises)."""
    pages, j = [], 0
    for entry in entries:
        key = _norm(entry.get("key", entry["title"]))[-10:]
        while j < len(marks) and key not in _norm(marks[j][1]):
            j += 1
        if j == len(marks):
            raise RuntimeError(f"no bookmark for the heading {entry['title']!r}")
        pages.append(marks[j][2])
        j += 1
    return pages


def clean_titles(marks: list, headings: list[dict]) -> dict[int, str]:
    """{bookmark index: the heading's text} for the bookmarks that are headings (matched in
    order, as in pages_of_entries; a heading without a bookmark is passed over). Chromium
    builds a bookmark's title from the heading's text runs and repeats those it laid out twice
    (a heading moved to the next page: "How to read itHow to read it")."""
    titles, j = {}, 0
    for heading in headings:
        key = _norm(heading["key"])[-10:]
        if not key:
            continue
        k = j
        while k < len(marks) and key not in _norm(marks[k][1]):
            k += 1
        if k < len(marks):
            titles[k] = heading["title"]
            j = k + 1
    return titles


def retitle_bookmarks(path: Path, titles: dict[int, str]) -> None:
    """Set the titles of the PDF's bookmarks (index in document order, as measure.outline
    lists them) in place, with pypdf."""
    import logging

    from pypdf import PdfWriter
    from pypdf.generic import NameObject, TextStringObject

    # (pypdf warns that Chromium's trailer counts fewer objects than the file has: harmless)
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    writer = PdfWriter(clone_from=str(path))
    index = 0

    def walk(item):
        nonlocal index
        while item is not None:
            node = item.get_object()
            if index in titles:
                node[NameObject("/Title")] = TextStringObject(titles[index])
            index += 1
            if "/First" in node:
                walk(node["/First"])
            item = node.get("/Next")

    outlines = writer.root_object.get("/Outlines")
    if outlines is not None and "/First" in outlines.get_object():
        walk(outlines.get_object()["/First"])
    tmp = path.with_name(path.stem + ".titled.pdf")
    with open(tmp, "wb") as f:
        writer.write(f)
    tmp.replace(path)


HANDOUT = "Student edition: the exercises without their solutions"


def print_book(html: Path, target: Path, *, handout: bool = False, chromium: str | None = None,
               plain: bool = False) -> dict:
    """Print ``html`` to ``target`` (A4). ``handout``: the students' copy of a solution-free
    build (said on the title page; the checks' verdicts, which the reference solutions earned,
    left out). ``plain``: print the page as it is (no book preparation, no contents pass).
    Returns {"pages", "passes", "contents": [(title, page)]}."""
    from playwright.sync_api import sync_playwright

    html, target = Path(html).resolve(), Path(target).resolve()
    exe = chromium or os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    root = html.parent
    # Jupyter Book's index.html only redirects to the root page (book/intro.html). Sphinx's
    # single-page builder writes that page's links (_static/, _images/) relative to the site's
    # top folder, so a copy of it there is what prints with its styles, scripts and figures.
    redirect = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', html.read_text())
    if redirect:
        page_file = (root / redirect.group(1)).resolve()
        html = root / "_print.html"
        html.write_text(page_file.read_text())
    url_path = html.relative_to(root).as_posix()
    target.parent.mkdir(parents=True, exist_ok=True)
    draft = target.with_name(target.stem + ".pass.pdf")
    info = _book_info()
    result = {"passes": 0, "contents": []}
    httpd = _serve(root)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=[
                "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update"])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{httpd.server_address[1]}/{url_path}",
                      wait_until="networkidle", timeout=300_000)
            # every equation typeset before printing: wait until MathJax 3 has loaded (on a busy
            # machine it may not have when the network is idle), then for its first typesetting
            page.wait_for_function(
                "() => !document.querySelector('.math') || (window.MathJax && MathJax.startup "
                "&& MathJax.startup.promise)", timeout=300_000)
            page.evaluate("async () => { if (window.MathJax && MathJax.startup) "
                          "{ await MathJax.startup.promise; } }")
            page.emulate_media(media="print")

            def pdf(path: Path) -> None:
                page.pdf(path=str(path), format="A4", print_background=True, margin=MARGIN,
                         display_header_footer=True, header_template="<span></span>",
                         footer_template=FOOTER, outline=True, tagged=True)

            if plain:
                page.add_style_tag(content="@media print { pre, .highlight pre { white-space: "
                                           "pre-wrap !important; overflow-wrap: anywhere; } }")
                pdf(target)
            else:
                page.add_style_tag(content=(HERE / "print.css").read_text())
                found = page.evaluate((HERE / "prepare.js").read_text(),
                                      {"title": info["title"], "author": info["author"],
                                       "subtitle": HANDOUT if handout else "",
                                       "handout": handout})
                if found is None:
                    pdf(target)
                    browser.close()
                    return _finish(target, result, plain=True)
                entries = found["entries"]
                pages = None
                for _ in range(4):
                    pdf(draft)
                    result["passes"] += 1
                    with measure.open_pdf(draft) as doc:
                        marks = measure.outline(doc)
                    try:
                        now = pages_of_entries(marks, entries)
                    except RuntimeError:
                        import json
                        debug = target.with_suffix(".outline.json")
                        debug.write_text(json.dumps({"bookmarks": marks, "entries": entries},
                                                    indent=1, ensure_ascii=False))
                        print(f"(bookmarks and headings written to {debug})")
                        raise
                    if now == pages:
                        break
                    pages = now
                    page.evaluate("(pages) => window.__pdfEntries.forEach((e, i) => "
                                  "{ e.page.textContent = String(pages[i]); })", pages)
                else:
                    raise RuntimeError("the contents' page numbers did not settle in 4 passes")
                draft.replace(target)
                retitle_bookmarks(target, clean_titles(marks, found["headings"]))
                result["contents"] = [(e["title"], n) for e, n in zip(entries, pages)]
            browser.close()
    finally:
        httpd.shutdown()
        if draft.exists():
            draft.unlink()
    return _finish(target, result, plain=plain)


def _finish(target: Path, result: dict, *, plain: bool) -> dict:
    with measure.open_pdf(target) as doc:
        result["pages"] = len(doc)
    print(f"printed {target} ({result['pages']} pages"
          + (f", contents settled after {result['passes']} printings)" if not plain else ")"))
    return result
