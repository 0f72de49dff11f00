"""`book.py pdf`: the printing step (Chromium through Playwright) on a small page, and the
command's wiring. The whole book's PDF is made by the command itself (it needs the built book)."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from conftest import ROOT, skip_or_fail_browser


def _book_py():
    spec = importlib.util.spec_from_file_location("book_py_pdf", ROOT / "tools" / "book.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["book_py_pdf"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_print_pdf_prints_every_page(tmp_path):
    from pathlib import Path

    if not Path("/usr/bin/chromium").exists():
        skip_or_fail_browser("Chromium not found (apt-get install -y chromium)")
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
