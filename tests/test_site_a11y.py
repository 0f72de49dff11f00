"""Accessibility and print of the built site: axe-core in the page, tab stops, headings, unique
ids, and what a printed page shows. Reads the site in $BOOK_SITE (default `_build/html`), like
tests/test_browser.py; axe-core is installed with npm into `_build/.axe-core` on first use.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import ROOT
from test_browser import PageVisit, browser, server, toc_pages  # noqa: F401 (fixtures)
from test_site_reader import CHAPTERS, DESKTOP, PAGES, visit  # noqa: F401 (fixture)

# --- accessibility: axe-core (https://github.com/dequelabs/axe-core) in the page ------------------
AXE_VERSION = "4.14.1"
AXE_DIR = ROOT / "_build" / ".axe-core"  # npm installs it here at test time; never committed


def _axe_js() -> str:
    """axe-core's browser build, installed with npm into _build/.axe-core on first use."""
    import shutil
    import subprocess

    from conftest import skip_or_fail_browser

    given = os.environ.get("AXE_CORE_JS")
    path = Path(given) if given else AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"
    if not path.exists() and not given:
        npm = shutil.which("npm")
        if npm is None:
            skip_or_fail_browser("npm not found: it installs axe-core for the accessibility test")
        result = subprocess.run(
            [npm, "install", "--prefix", str(AXE_DIR), "--no-save", "--no-audit", "--no-fund",
             f"axe-core@{AXE_VERSION}"], capture_output=True, text=True, timeout=300)
        if result.returncode != 0 or not path.exists():
            skip_or_fail_browser(f"npm could not install axe-core: {result.stderr[-500:]}")
    return path.read_text()


@pytest.fixture(scope="module")
def axe_js():
    return _axe_js()


#: The book's own content: the article (the theme's chrome around it is the theme's). MathJax's
#: output is left out: thousands of glyph elements made one run take 40 s on a loaded 2-core
#: machine, and its accessible form is MathJax's hidden MathML.
CONTENT = {"include": [["article.bd-article"]], "exclude": [["mjx-container"]]}
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]


def run_axe(page, axe_source: str, context=CONTENT, rules=None) -> list[dict]:
    """axe-core's violations in ``context`` (None: the whole page): WCAG 2.1 A and AA and best
    practice, or only ``rules`` (a list of rule ids).

    When the context excludes ``mjx-container``, MathJax's glyph elements are taken out of the
    page while axe runs and put back after: axe walks the whole tree even where a context
    excludes it, and chapter 6's ~14 500 glyph elements doubled each run (27 s -> 14 s measured
    on a loaded 2-core machine)."""
    if not page.evaluate("() => !!window.axe"):
        page.add_script_tag(content=axe_source)
    only = {"type": "rule", "values": rules} if rules else {"type": "tag", "values": TAGS}
    detach = bool(context) and ["mjx-container"] in context.get("exclude", [])
    return page.evaluate("""async ([ctx, only, detach]) => {
        const stash = [];
        if (detach) {
            document.querySelectorAll('mjx-container').forEach(c => {
                const kept = document.createDocumentFragment();
                while (c.firstChild) kept.appendChild(c.firstChild);
                stash.push([c, kept]);
            });
        }
        try {
            const result = await axe.run(ctx || document,
                                         {resultTypes: ['violations'], runOnly: only});
            return result.violations.map(v => ({id: v.id, impact: v.impact, n: v.nodes.length,
                where: v.nodes.slice(0, 3).map(n => n.target.join(' '))}));
        } finally {
            stash.forEach(([c, kept]) => c.appendChild(kept));
        }
    }""", [context, only, detach])


def open_solutions(page) -> None:
    """Open every solution dropdown (one script, not one click per solution: faster)."""
    page.evaluate("""() => document.querySelectorAll('div.solution.dropdown.toggle-hidden')
        .forEach(s => s.querySelector('.admonition-title').click())""")
    page.wait_for_timeout(400)


@pytest.mark.parametrize("page", PAGES)
def test_no_serious_accessibility_violation_in_the_content(visit, axe_js, page):  # noqa: F811
    """axe-core finds no serious or critical violation in the article, every solution opened (and
    no colour-contrast failure in the dark theme either)."""
    v = visit(page, *DESKTOP)
    open_solutions(v.page)
    found = []
    try:
        for theme, rules in (("light", None), ("dark", ["color-contrast"])):
            v.page.evaluate("t => document.documentElement.setAttribute('data-theme', t)", theme)
            v.page.wait_for_timeout(200)
            found += [dict(x, theme=theme) for x in run_axe(v.page, axe_js, rules=rules)
                      if x["impact"] in ("serious", "critical")]
    finally:
        v.page.evaluate("() => document.documentElement.setAttribute('data-theme', 'light')")
    assert found == [], f"{page}: serious or critical axe-core violations: {found}"


@pytest.mark.parametrize("page", CHAPTERS)
def test_formulas_are_not_tab_stops(visit, page):
    """Only display equations that scroll (a keyboard must scroll them) are in the tab order."""
    v = visit(page, *DESKTOP)
    stops = v.page.evaluate("""() => Array.from(document.querySelectorAll('mjx-container'))
        .filter(c => c.tabIndex >= 0 && c.getAttribute('tabindex') !== null
                     && c.scrollWidth <= c.clientWidth + 1).length""")
    assert stops == 0, f"{page}: {stops} formulas are tab stops"


@pytest.mark.parametrize("page", CHAPTERS)
def test_exercise_titles_are_headings(visit, page):
    v = visit(page, *DESKTOP)
    titles = v.page.evaluate("""() => Array.from(
            document.querySelectorAll('div.exercise.admonition > .admonition-title'))
        .map(t => [t.textContent.trim(), t.getAttribute('role'), t.getAttribute('aria-level')])""")
    assert titles, f"{page}: no exercises found"
    bad = [t for t in titles if t[1] != "heading" or not (t[2] or "").isdigit()]
    assert bad == [], f"{page}: exercise titles that are not headings: {bad}"


@pytest.mark.parametrize("page", CHAPTERS)
def test_ids_are_unique(visit, page):
    v = visit(page, *DESKTOP)
    repeated = v.page.evaluate("""() => { const seen = {};
        document.querySelectorAll('[id]').forEach(e => { seen[e.id] = (seen[e.id] || 0) + 1; });
        return Object.entries(seen).filter(([id, n]) => n > 1); }""")
    assert repeated == [], f"{page}: ids used more than once: {repeated}"


@pytest.mark.parametrize("page", CHAPTERS)
def test_solutions_print_expanded(browser, server, page):  # noqa: F811
    """On paper the full book shows every solution open (a closed one printed as a bare title)."""
    v = PageVisit(browser, f"{server}/{page}.html", *DESKTOP)
    try:
        v.page.emulate_media(media="print")
        v.page.wait_for_timeout(500)  # the theme's 0.3 s transitions, should any remain
        closed = v.page.evaluate("""() => Array.from(document.querySelectorAll('div.solution.dropdown'))
            .filter(s => { const body = s.querySelector(':scope > .admonition-title ~ *');
                           return !body || body.offsetHeight === 0
                                  || getComputedStyle(body).visibility !== 'visible'
                                  || getComputedStyle(body).opacity === '0'; })
            .map(s => s.querySelector('.admonition-title').textContent.trim())""")
        assert closed == [], f"{page}: solutions that print closed: {closed}"
        shown = v.page.evaluate("""() => Array.from(document.querySelectorAll(
            'div.solution button.toggle-button')).filter(b => b.offsetParent !== null).length""")
        assert shown == 0, f"{page}: {shown} toggle buttons on the printed page"
    finally:
        v.close()


@pytest.mark.parametrize("page", PAGES)
def test_the_theme_chrome_has_no_axe_finding_we_fixed(visit, axe_js, page):  # noqa: F811
    """The whole page, the theme's header and chapter list included: the search and colour
    buttons' names match what they show (label-content-name-mismatch, once 2 on every page),
    and every part of the page lies in a landmark (region, once the book's title in the
    chapter list). Both fixed by book.js."""
    v = visit(page, *DESKTOP)
    found = run_axe(v.page, axe_js, context={"exclude": [["mjx-container"]]},
                    rules=["label-content-name-mismatch", "region"])
    assert found == [], f"{page}: {[(f['id'], f['where']) for f in found]}"


def test_the_colour_button_is_named_by_its_mode_after_a_click(browser, server):  # noqa: F811
    v = PageVisit(browser, f"{server}/{CHAPTERS[0]}.html", *DESKTOP)
    try:
        button = v.page.locator(".theme-switch-button").first
        names = []
        for _ in range(3):
            names.append(button.get_attribute("aria-label"))
            button.click()
            v.page.wait_for_timeout(200)
        assert all(n and n.startswith("Color mode: ") for n in names), names
        assert len(set(names)) == 3, f"the name does not follow the mode: {names}"
    finally:
        v.close()
