"""Search on the built site, as a reader uses it: the chapter named in the query first, plain-text
snippets, and a search that works when the site is opened from disk (file://)."""

from __future__ import annotations

import pytest

from test_browser import SITE, browser, server  # noqa: F401 (fixtures)


def search(page, base: str, query: str) -> list[dict]:
    page.goto(f"{base}/search.html?q={query.replace(' ', '+')}", wait_until="load")
    page.wait_for_function(
        "() => document.querySelector('#search-results') && /found|did not match/.test("
        "(document.querySelector('#search-results .search-summary') || {}).textContent || '')",
        timeout=20000)
    page.wait_for_timeout(800)  # the snippets arrive one by one
    return page.evaluate("""() => Array.from(document.querySelectorAll('#search-results ul.search > li'))
        .map(li => ({href: li.querySelector('a').getAttribute('href'),
                     snippet: (li.querySelector('p.context') || {}).textContent || null}))""")


@pytest.mark.parametrize("query, chapter", [
    ("gumbel", "07_gumbel"),                       # once chapter 6 came first
    ("temperature scaling", "03_calibration"),    # once chapter 1 came first
    ("beam search", "08_beam"),
    ("negative sampling", "04_nce"),
    ("hard attention", "09_hard_attention"),
    ("euler lagrange", "05_euler_lagrange"),
])
def test_the_chapter_named_in_the_query_comes_first(browser, server, query, chapter):  # noqa: F811
    context = browser.new_context()
    try:
        results = search(context.new_page(), server, query)
        assert results, f"{query!r}: no results"
        assert chapter in results[0]["href"], \
            f"{query!r}: first result {results[0]['href']}, not chapter {chapter}"
    finally:
        context.close()


@pytest.mark.parametrize("query", ["softmax", "temperature", "gradient estimator"])
def test_snippets_are_plain_text(browser, server, query):  # noqa: F811
    """Snippets once showed MathJax source (29 of 79 with \\(p_y\\) or \\begin{split})."""
    context = browser.new_context()
    try:
        results = search(context.new_page(), server, query)
        snippets = [r["snippet"] for r in results if r["snippet"]]
        assert len(snippets) >= 3, f"{query!r}: {len(snippets)} snippets"
        raw = [s for s in snippets if any(m in s for m in ("\\(", "\\)", "\\[", "\\begin",
                                                           "\\frac", "\\operatorname"))]
        assert raw == [], f"{query!r}: snippets with TeX source: {raw[:3]}"
    finally:
        context.close()


def test_search_works_from_disk(browser):  # noqa: F811
    """Opened as a file (the README's _build/html/index.html), search lists results, says why
    there are no snippets, and logs no error (it once failed with CORS errors)."""
    if not (SITE / "search.html").exists():
        pytest.skip(f"no built site at {SITE}")
    context = browser.new_context()
    errors = []
    try:
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        results = search(page, SITE.resolve().as_uri(), "gumbel")
        assert results and "07_gumbel" in results[0]["href"]
        assert page.locator(".book-search-offline").is_visible()
        assert "book.py serve" in page.locator(".book-search-offline").inner_text()
        assert errors == [], f"console errors from file://: {errors}"
    finally:
        context.close()


@pytest.mark.parametrize("width", [390, 1280])
def test_one_search_box_on_a_chapter_page(browser, server, width):  # noqa: F811
    """The theme showed two search fields on a wide screen (the header's and the chapter
    list's); one stays at every width."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{server}/book/04_nce.html", wait_until="load")
        page.evaluate("() => { const s = document.querySelector('.bd-sidebar-primary');"
                      " if (s) s.scrollTop = 0; }")
        shown = page.evaluate("""() => Array.from(document.querySelectorAll(
                '.search-button-field, .search-button, form.bd-search, input[type=search]'))
            .filter(e => { const r = e.getBoundingClientRect();
                           return r.width > 0 && r.height > 0
                                  && getComputedStyle(e).visibility === 'visible'; })
            .map(e => e.className)""")
        assert len(shown) == 1, f"{width} px: {len(shown)} search boxes: {shown}"
    finally:
        context.close()
