"""The built site as a reader uses it on a phone (390 px) and a desktop (1280 px).

Each test here stands for something that was broken while tests/test_browser.py passed (issue 16):
the menu buttons did nothing, pages scrolled sideways on a phone, references showed raw LaTeX,
equations were cut off, images had their file path for alt text, solutions printed collapsed.
Like test_browser.py it reads the site in $BOOK_SITE (default `_build/html`).
"""

from __future__ import annotations

import pytest

from conftest import ROOT
from test_browser import PageVisit, browser, server, toc_pages  # noqa: F401 (fixtures)

PAGES = toc_pages()
CHAPTERS = [p for p in PAGES if (ROOT / (p + ".ipynb")).exists()]
PHONE = (390, 844)
DESKTOP = (1280, 900)


@pytest.fixture(scope="module")
def visit(server, browser):  # noqa: F811
    """visit(page, width, height): one page opened at one window size (kept for the module)."""
    done: dict[tuple, PageVisit] = {}

    def open_page(page: str, width: int, height: int) -> PageVisit:
        key = (page, width, height)
        if key not in done:
            done[key] = PageVisit(browser, f"{server}/{page}.html", width, height)
        return done[key]

    yield open_page
    for v in done.values():
        v.close()


def visible_count(page, selector: str) -> int:
    """How many elements matching ``selector`` a reader can see (laid out, not hidden)."""
    return page.evaluate("""sel => Array.from(document.querySelectorAll(sel)).filter(e => {
        const r = e.getBoundingClientRect(), s = getComputedStyle(e);
        return e.getClientRects().length > 0 && s.visibility !== 'hidden' && r.width > 0
               && r.right > 0 && r.left < window.innerWidth && parseFloat(s.opacity) > 0;
    }).length""", selector)


CHAPTER_LINKS = "nav.bd-docs-nav a.reference"
PAGE_CONTENTS_LINKS = "#pst-secondary-sidebar-modal a, .bd-sidebar-secondary nav a"


def _visible_button(page, selector: str):
    buttons = [b for b in page.locator(selector).all() if b.is_visible()]
    assert buttons, f"no visible {selector} button"
    return buttons[0]


@pytest.mark.parametrize("page", CHAPTERS[:1] + PAGES[:1])
def test_menu_button_opens_the_chapter_list_on_a_phone(browser, server, page):  # noqa: F811
    v = PageVisit(browser, f"{server}/{page}.html", *PHONE)
    try:
        n_chapters = len(CHAPTERS)
        assert visible_count(v.page, CHAPTER_LINKS) == 0, "the chapter list shows before a click"
        _visible_button(v.page, ".primary-toggle").click()
        v.page.wait_for_timeout(300)
        shown = visible_count(v.page, CHAPTER_LINKS)
        assert shown >= n_chapters, (f"{page}: after a click on the menu button {shown} chapter "
                                     f"links are visible, expected at least {n_chapters}")
        v.page.keyboard.press("Escape")
        v.page.wait_for_timeout(300)
        assert visible_count(v.page, CHAPTER_LINKS) == 0, "Escape does not close the chapter list"
    finally:
        v.close()


@pytest.mark.parametrize("page", CHAPTERS[:1])
def test_contents_button_opens_the_page_contents_on_a_phone(browser, server, page):  # noqa: F811
    v = PageVisit(browser, f"{server}/{page}.html", *PHONE)
    try:
        assert visible_count(v.page, PAGE_CONTENTS_LINKS) == 0
        _visible_button(v.page, ".secondary-toggle").click()
        v.page.wait_for_timeout(300)
        shown = visible_count(v.page, PAGE_CONTENTS_LINKS)
        assert shown >= 3, f"{page}: after a click on the contents button {shown} links show"
    finally:
        v.close()


@pytest.mark.parametrize("page", CHAPTERS[:1])
def test_menu_button_hides_and_shows_the_sidebar_on_a_desktop(browser, server, page):  # noqa: F811
    v = PageVisit(browser, f"{server}/{page}.html", *DESKTOP)
    try:
        before = visible_count(v.page, CHAPTER_LINKS)
        assert before >= len(CHAPTERS), f"{page}: the sidebar shows {before} chapter links"
        button = _visible_button(v.page, ".primary-toggle")
        button.click()
        v.page.wait_for_timeout(600)
        assert visible_count(v.page, CHAPTER_LINKS) == 0, "the menu button does not hide it"
        button.click()
        v.page.wait_for_timeout(600)
        assert visible_count(v.page, CHAPTER_LINKS) == before, "the menu button does not bring it back"
    finally:
        v.close()


@pytest.mark.parametrize("page", PAGES)
def test_no_page_is_wider_than_a_phone(visit, page):
    """At 390 px nothing widens the page (a URL in a reference once made it 444 px wide).

    Code cells and display equations scroll inside their own box; the page itself never does.
    """
    v = visit(page, *PHONE)
    widths = v.page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    if widths[0] > widths[1]:
        culprits = v.page.evaluate("""() => Array.from(document.querySelectorAll('main p, main li'))
            .filter(e => e.scrollWidth > e.clientWidth + 1)
            .map(e => e.textContent.replace(/\\s+/g, ' ').slice(0, 80))""")
        pytest.fail(f"{page}: the page is {widths[0]} px wide in a {widths[1]} px window; "
                    f"too wide: {culprits}")


RAW_LATEX = r"\\[A-Za-z]+|\$"


@pytest.mark.parametrize("page", PAGES)
def test_references_show_no_raw_latex(visit, page):
    """No reference shows TeX source (\\texttt, $\\log ...$): the bibliography is rendered."""
    v = visit(page, *DESKTOP)
    raw = v.page.evaluate("""re => Array.from(document.querySelectorAll(
            'main aside.footnote, main .footnote, main .citation, main .bibliography'))
        .map(e => e.textContent.replace(/\\s+/g, ' ').trim())
        .filter(t => new RegExp(re).test(t))""", RAW_LATEX)
    assert raw == [], f"{page}: references with raw LaTeX: {raw}"


DISPLAY_MATH = 'div.math mjx-container[display="true"]'


def _wide_equations(page) -> list[dict]:
    return page.evaluate("""sel => Array.from(document.querySelectorAll(sel))
        .filter(c => c.scrollWidth > c.clientWidth + 1)
        .map(c => { const s = getComputedStyle(c), d = c.closest('div.math');
            return {id: d ? d.id : '', width: c.scrollWidth, room: c.clientWidth,
                    overflow: s.overflowX, image: s.backgroundImage,
                    attachment: s.backgroundAttachment}; })""", DISPLAY_MATH)


@pytest.mark.parametrize("page", PAGES)
def test_display_equations_fit_their_column_on_a_desktop(visit, page):
    v = visit(page, *DESKTOP)
    wide = [(e["id"], e["width"], e["room"]) for e in _wide_equations(v.page)]
    assert wide == [], f"{page}: display equations wider than their column (id, px, room): {wide}"


@pytest.mark.parametrize("page", PAGES)
def test_wide_equations_show_that_they_scroll_on_a_phone(visit, page):
    """An equation wider than a phone's column scrolls in its own box, with a shadow at the edge
    where more of it lies (book.css); nothing is cut off without a cue."""
    v = visit(page, *PHONE)
    for e in _wide_equations(v.page):
        assert e["overflow"] in ("auto", "scroll"), f"{page}: {e['id']} is cut off: {e}"
        assert "radial-gradient" in e["image"] and "local" in e["attachment"], (
            f"{page}: {e['id']} scrolls with no visible cue: {e}")


@pytest.mark.parametrize("page", PAGES)
def test_images_have_real_alt_text(visit, page):
    """No image's alternative text is its file path (myst-nb's default for notebook outputs)."""
    v = visit(page, *DESKTOP)
    bad = v.page.evaluate(r"""() => Array.from(document.querySelectorAll('main img'))
        .map(img => [img.getAttribute('alt'), img.getAttribute('src')])
        .filter(([alt, src]) => alt === null || !alt.trim()
                || /(^|\/)[^\s\/]+\.(png|svg|jpe?g|gif)$/i.test(alt.trim())
                || alt.includes('_images/'))""")
    assert bad == [], f"{page}: images whose alt text is empty or a path: {bad}"


@pytest.mark.parametrize("page", CHAPTERS)
def test_figures_are_sharp_on_high_density_screens(visit, page):
    """Every figure a notebook draws has at least 1.8 image pixels per CSS pixel at 1280 px."""
    v = visit(page, *DESKTOP)
    # an explorer's frame is a lazy image: load it (naturalWidth is 0 until then)
    v.page.evaluate("""() => Promise.all(Array.from(document.images)
        .filter(img => img.loading === 'lazy' && !img.complete)
        .map(img => new Promise(done => {
            img.addEventListener('load', done); img.addEventListener('error', done);
            img.loading = 'eager'; })))""")
    blurred = v.page.evaluate("""() => Array.from(document.querySelectorAll('main .cell_output img'))
        .filter(img => img.width > 0 && img.naturalWidth < 1.8 * img.width)
        .map(img => [img.getAttribute('src').split('/').pop().slice(0, 12),
                     img.naturalWidth, img.width])""")
    assert blurred == [], f"{page}: figures at under 2x density (file, pixels, shown): {blurred}"



@pytest.mark.parametrize("page", CHAPTERS)
def test_exercises_are_in_the_page_contents(visit, page):
    """Every exercise has an entry in the page contents (book/_ext/exercise_toc.py) with the
    number its title shows, and the entry is on screen once the reader is at that exercise."""
    v = visit(page, *DESKTOP)
    found = v.page.evaluate(r"""() => Array.from(document.querySelectorAll(
            'main div.exercise[id]')).map(ex => {
        const title = ex.querySelector('.admonition-title').textContent.trim();
        const link = document.querySelector(
            '.bd-sidebar-secondary nav a[href="#' + ex.id + '"]');
        return [ex.id, title, link ? link.textContent.trim() : null];
    })""")
    assert found, f"{page}: no exercises found"
    for label, title, entry in found:
        assert entry is not None, f"{page}: exercise {label} is not in the page contents"
        number = title.split()[1]
        assert entry.startswith(f"Exercise {number} ("), (
            f"{page}: the page contents say {entry!r} for the exercise titled {title!r}")
    last = found[-1][0]
    v.page.locator(f"#{last}").scroll_into_view_if_needed()
    v.page.wait_for_timeout(600)  # the theme's scroll spy marks the section on screen
    link = v.page.locator(f'.bd-sidebar-secondary nav a[href="#{last}"]')
    assert link.is_visible(), f"{page}: at exercise {last}, its page-contents entry is hidden"
    v.page.evaluate("() => window.scrollTo(0, 0)")  # the page is shared with other tests


@pytest.mark.parametrize("page", CHAPTERS)
def test_figure_labels_are_readable_on_a_phone(visit, page):
    """At 390 px no figure is shrunk so far that its 9-point tick labels (12.5 px at the figure's
    own size, half its 2x PNG's width) fall under 9 px; a figure wider than the column scrolls
    inside its own output box (book.css), not the page."""
    from softmaxbook.plotting import _STYLE

    label_px = _STYLE["xtick.labelsize"] * _STYLE["figure.dpi"] / 72
    v = visit(page, *PHONE)
    figures = v.page.evaluate("""() => Array.from(document.querySelectorAll(
            'main .cell_output img')).filter(img => img.naturalWidth > 0).map(img => {
        const box = img.closest('.cell_output');
        return [img.getAttribute('src').split('/').pop().slice(0, 12), img.width,
                img.naturalWidth, getComputedStyle(box).overflowX];
    })""")
    assert figures, f"{page}: no figures found"
    small = [(name, shown, natural) for name, shown, natural, _ in figures
             if label_px * shown / (natural / 2) < 9]
    assert small == [], f"{page}: tick labels under 9 px on a phone (file, shown, pixels): {small}"
    clipped = [name for name, shown, natural, overflow in figures
               if overflow not in ("auto", "scroll")]
    assert clipped == [], f"{page}: figures whose box does not scroll sideways: {clipped}"


@pytest.mark.parametrize("page", CHAPTERS)
def test_phone_figures_fit_where_they_can_and_only_the_others_say_swipe(visit, page):
    """A figure that fits a 390 px column at 3/4 of its own size or more is shrunk to fit (no
    sideways swipe); only under an output box that really scrolls is the line "swipe sideways"
    shown (it once showed under every figure, fitting or not)."""
    v = visit(page, *PHONE)
    v.page.evaluate("() => window.dispatchEvent(new Event('resize'))")
    v.page.wait_for_timeout(400)
    boxes = v.page.evaluate("""() => Array.from(document.querySelectorAll('main .cell_output'))
        .filter(b => b.querySelector('img') && b.querySelector('img').naturalWidth > 0)
        .map(b => {
            const img = b.querySelector('img');
            const own = parseFloat(img.style.width) || img.naturalWidth / 2;
            return {name: img.getAttribute('src').split('/').pop().slice(0, 12),
                    own: own, shown: img.getBoundingClientRect().width,
                    room: b.clientWidth, scrolls: b.scrollWidth > b.clientWidth + 1,
                    hint: getComputedStyle(b, '::after').content};
        })""")
    assert boxes, f"{page}: no figures found"
    for b in boxes:
        if b["scrolls"]:
            assert "swipe" in b["hint"], f"{page}: {b['name']} scrolls with no hint: {b}"
        else:
            assert b["hint"] in ("none", "normal", ""), \
                f"{page}: {b['name']} fits but says 'swipe': {b}"
        if 0.75 * b["own"] <= b["room"]:
            assert not b["scrolls"] and b["shown"] <= b["room"] + 1, \
                f"{page}: {b['name']} could fit the column at >= 3/4 of its size: {b}"


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_the_colour_mode_follows_the_operating_system(browser, server, scheme):  # noqa: F811
    """A reader whose system asks for dark pages gets the dark theme (it once stayed light)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    try:
        pg = context.new_page()
        pg.goto(f"{server}/{CHAPTERS[0]}.html", wait_until="load")
        pg.wait_for_function("() => document.documentElement.dataset.theme", timeout=5000)
        theme = pg.evaluate("() => document.documentElement.dataset.theme")
        assert theme == scheme, f"system preference {scheme}, page theme {theme}"
        # and the page's own text follows (not only the attribute)
        bg = pg.evaluate("() => getComputedStyle(document.body).backgroundColor")
        rgb = [int(x) for x in bg[bg.index("(") + 1:bg.index(")")].split(",")[:3]]
        assert (sum(rgb) < 200) == (scheme == "dark"), f"{scheme}: body background {bg}"
    finally:
        context.close()
