"""Kernel-free explorers on the built site (issue 24, item 1), in Chromium.

Every chapter's explorer shows frames drawn at build time (softmaxbook.widgets.Explorer.show,
book/_ext/explorer_frames.py, book/_static/explorer.js). On every chapter page: at least one
explorer, each started by its script; moving each slider, by keyboard and by setting its value,
changes the image, its alt text and the value shown; a choice's select does the same; the
frames are files (no data URI in the page), fetched only when needed; no console error. One
chapter is also opened from disk (file://), as the README tells a reader with a downloaded copy.
Like test_browser.py it reads the site in $BOOK_SITE (default `_build/html`).
"""

from __future__ import annotations

import pytest

from conftest import ROOT
from test_browser import SITE, PageVisit, browser, server, toc_pages  # noqa: F401 (fixtures)

CHAPTERS = [p for p in toc_pages() if (ROOT / (p + ".ipynb")).exists()]
FRAMES = "/_images/explorers/"

STATE = """root => ({
    src: root.querySelector('img.sbx-frame').currentSrc || root.querySelector('img.sbx-frame').src,
    alt: root.querySelector('img.sbx-frame').alt,
    outputs: Array.from(root.querySelectorAll('output')).map(o => o.textContent),
    values: Array.from(root.querySelectorAll('[data-name]')).map(f => f.value),
})"""

LOADED = """root => { const img = root.querySelector('img.sbx-frame');
    return img.complete && img.naturalWidth > 0; }"""


def _frame_loaded(page, root) -> None:
    page.wait_for_function(f"r => ({LOADED})(r)", arg=root.element_handle(), timeout=10000)


def _check_moves(page, root, where: str) -> int:
    """Move every control of one explorer; return the number of moves checked."""
    moves = 0
    for field in root.locator("input[type=range]").all():
        name = field.get_attribute("data-name")
        top = int(field.get_attribute("max"))
        # by keyboard: one step (back from the top end)
        before = root.evaluate(STATE)
        field.focus()
        key = "ArrowLeft" if int(field.input_value()) == top else "ArrowRight"
        page.keyboard.press(key)
        after = root.evaluate(STATE)
        assert after["src"] != before["src"], f"{where}: {key} on '{name}' left the image as it was"
        assert after["alt"] != before["alt"], f"{where}: {key} on '{name}' left the alt text"
        assert after["outputs"] != before["outputs"], f"{where}: {key} on '{name}': same value shown"
        assert field.get_attribute("aria-valuetext") in after["outputs"]
        _frame_loaded(page, root)
        # by setting its value: to the far end
        target = "0" if int(field.input_value()) > top // 2 else str(top)
        field.fill(target)
        later = root.evaluate(STATE)
        assert later["src"] != after["src"] and later["outputs"] != after["outputs"], (
            f"{where}: setting '{name}' to position {target} changed nothing")
        _frame_loaded(page, root)
        moves += 2
    for field in root.locator("select").all():
        name = field.get_attribute("data-name")
        options = field.locator("option").all()
        before = root.evaluate(STATE)
        current = field.input_value()
        other = next(o.get_attribute("value") for o in options
                     if o.get_attribute("value") != current)
        field.select_option(other)
        after = root.evaluate(STATE)
        assert after["src"] != before["src"] and after["alt"] != before["alt"], (
            f"{where}: choosing another '{name}' changed nothing")
        _frame_loaded(page, root)
        moves += 1
    return moves


@pytest.mark.parametrize("page", CHAPTERS)
def test_explorers_work_without_a_kernel(server, browser, page):  # noqa: F811
    v = PageVisit(browser, f"{server}/{page}.html")
    try:
        p = v.page
        roots = p.locator(".sbx-explorer").all()
        assert roots, f"{page}: no kernel-free explorer on the page"
        # lazy: at most the default frame of each explorer is fetched with the page
        eager = [u for u in v.requests if FRAMES in u]
        assert len(eager) <= len(roots), f"{page}: {len(eager)} frames fetched on load"
        inline = p.evaluate("() => Array.from(document.querySelectorAll('.sbx-explorer'))"
                            ".filter(r => r.outerHTML.includes('data:image/')).length")
        assert inline == 0, f"{page}: frames inline in the page (data URIs)"
        moves = 0
        for i, root in enumerate(roots):
            where = f"{page}, explorer {i + 1}"
            assert "sbx-ready" in (root.get_attribute("class") or ""), f"{where}: script did not start"
            root.scroll_into_view_if_needed()
            _frame_loaded(p, root)
            assert root.locator("input[type=range]").count() >= 1 or root.locator("select").count()
            for field in root.locator("input[type=range], select").all():
                fid = field.get_attribute("id")
                assert root.locator(f'label[for="{fid}"]').count() == 1, f"{where}: {fid} unlabelled"
            assert root.locator(".sbx-note").inner_text().strip(), f"{where}: no grid sentence"
            moves += _check_moves(p, root, where)
        assert moves >= 1
        p.wait_for_load_state("networkidle")
        assert v.console_errors == [] and v.page_errors == [], (
            f"{page}: console errors {v.console_errors} {v.page_errors}")
        assert v.failed == [] and v.bad_status == [], f"{page}: {v.failed} {v.bad_status}"
    finally:
        v.close()


def test_explorer_works_from_disk(browser):  # noqa: F811
    """A downloaded copy opened as file://: the script and the frame files still work."""
    page = next((c for c in CHAPTERS if (SITE / (c + ".html")).exists()), None)
    if page is None:
        pytest.skip("no built chapter")
    v = PageVisit(browser, (SITE / (page + ".html")).resolve().as_uri())
    try:
        root = v.page.locator(".sbx-explorer").first
        root.scroll_into_view_if_needed()
        _frame_loaded(v.page, root)
        assert _check_moves(v.page, root, f"{page} from disk") >= 1
        assert v.console_errors == [] and v.page_errors == [], v.console_errors
    finally:
        v.close()
