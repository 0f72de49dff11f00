"""Prose first (issue 24, item 2): on a chapter page the reader meets the argument, not the code.

Plotting code and assert cells are folded (myst-nb's ``hide-input`` tag: a closed ``<details>``
that one click opens); a folded check shows one line, "✓ checked: ...", printed by
``softmaxbook.glue.checked`` and styled by book/_ext/folds.py. These tests read the built site in $BOOK_SITE (default
`_build/html`), like tests/test_browser.py.

The measure: the characters of the code a reader sees (every ``pre`` block in the article that is
laid out and not inside a closed ``details``: cell sources and printed outputs alike) over the
characters of the article's visible text (its ``innerText``, which leaves out closed folds and
closed solutions). Whitespace is not counted, so that indentation does not count as code.
"""

from __future__ import annotations

import pytest

from test_browser import PageVisit, browser, server  # noqa: F401 (fixtures)
from test_site_reader import CHAPTERS, DESKTOP, visit  # noqa: F401 (fixture)

#: The target of issue 24: visible code at most a quarter of a chapter page's text.
MAX_CODE_SHARE = 0.25

CODE_SHARE_JS = r"""() => {
    const art = document.querySelector('main article.bd-article');
    const folded = e => {
        for (let d = e.closest('details'); d; d = d.parentElement.closest('details'))
            if (!d.open) return true;
        return false;
    };
    const shown = e => e.checkVisibility({checkVisibilityCSS: true, opacityProperty: true});
    const count = s => s.replace(/\s+/g, '').length;
    const pres = Array.from(art.querySelectorAll('pre'))
        .filter(p => !p.parentElement.closest('pre') && shown(p) && !folded(p));
    const sources = pres.filter(p => p.closest('.cell_input'));
    const folds = Array.from(art.querySelectorAll('div.cell details.hide'));
    return {
        code: pres.reduce((n, p) => n + count(p.innerText), 0),
        source: sources.reduce((n, p) => n + count(p.innerText), 0),
        text: count(art.innerText),
        cells: art.querySelectorAll('div.cell').length,
        folds: folds.length,
        open_folds: folds.filter(d => d.open).length,
        checks: art.querySelectorAll('p.checked-claim').length,
    };
}"""


def code_share(page) -> dict:
    """The measure above on an open Playwright page, with ``share`` = code / text added."""
    m = page.evaluate(CODE_SHARE_JS)
    m["share"] = m["code"] / m["text"]
    return m


@pytest.mark.parametrize("page", CHAPTERS)
def test_visible_code_is_at_most_a_quarter_of_the_text(visit, page):  # noqa: F811
    m = code_share(visit(page, *DESKTOP).page)
    assert m["open_folds"] == 0, f"{page}: {m['open_folds']} folded cells are open on load"
    assert m["share"] <= MAX_CODE_SHARE, (
        f"{page}: visible code is {m['share']:.0%} of the page's text ({m['code']} of "
        f"{m['text']} characters; {m['folds']} of {m['cells']} cells folded), more than "
        f"{MAX_CODE_SHARE:.0%}: fold plotting and assert cells (tag hide-input)")


@pytest.mark.parametrize("page", CHAPTERS[:1])
def test_one_click_shows_a_folded_cell(browser, server, page):  # noqa: F811
    """A fold's toggle is named by what it shows ("Show code cell source", no aria-label that
    says something else: book/_ext/folds.py); a click opens it and the code shows, Enter closes
    it, and the "✓ checked" line under it stays."""
    v = PageVisit(browser, f"{server}/{page}.html", *DESKTOP)
    try:
        cell = v.page.locator("div.cell:has(details.hide.above-input):has(p.checked-claim)").first
        summary = cell.locator("details.hide > summary")
        code = cell.locator("details.hide pre")
        assert summary.is_visible() and not code.is_visible()
        name = summary.evaluate("s => s.innerText.trim()")
        assert name.startswith("Show code"), f"{page}: the fold's toggle reads {name!r}"
        assert summary.get_attribute("aria-label") is None, (
            f"{page}: the toggle's aria-label {summary.get_attribute('aria-label')!r} hides "
            f"its visible label {name!r}")
        checked = cell.locator("p.checked-claim")
        assert checked.is_visible() and checked.inner_text().startswith("\u2713 checked: ")
        summary.click()
        assert code.is_visible(), f"{page}: a click on the toggle does not show the code"
        assert checked.is_visible()
        summary.focus()
        v.page.keyboard.press("Enter")
        assert not code.is_visible(), f"{page}: Enter on the open toggle does not fold it again"
    finally:
        v.close()
