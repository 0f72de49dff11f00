"""What a reader sees: the built site opened in a real browser (Chromium driven by Playwright).

The site (`_build/html`, or the folder in $BOOK_SITE) is served from 127.0.0.1. For every page in
the table of contents we check: it loads with no console error, no page error, no failed request
and no request to another host; math is rendered (MathJax loaded once, from the site itself, and no
raw `\\(` left in the text); every image has loaded. On chapter pages a solution dropdown opens on
click and shows its text. Screenshots go to `_build/screenshots/` for people to look at.

In CI these tests must run (`.ci/run` installs Chromium); a local run without Chromium or without
a built site skips them with a loud message.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from conftest import ROOT, skip_or_fail_browser

SITE = Path(os.environ.get("BOOK_SITE", ROOT / "_build" / "html"))
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [c["file"] for c in part.get("chapters", [])]
    return pages


def chromium_path() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve_directory(site: Path):
    """Serve ``site`` on a free port of 127.0.0.1; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


def download_notebook(context, url: str, target: Path):
    """Open the page ``url`` in ``context``, press its download button and fetch the notebook its
    .ipynb link points at into ``target``; returns (the page, the notebook)."""
    import nbformat

    page = context.new_page()
    page.goto(url, wait_until="domcontentloaded")
    page.locator(".dropdown-download-buttons > button").click()
    link = page.locator(".dropdown-download-buttons a", has_text=".ipynb")
    link.wait_for(state="visible", timeout=5000)
    # the link opens in a new tab (target=_blank): fetch what it points at
    response = context.request.get(link.evaluate("a => a.href"))
    assert response.ok, f"{url}: the download button's link gives HTTP {response.status}"
    target.write_bytes(response.body())
    return page, nbformat.read(target, as_version=4)


@pytest.fixture(scope="module")
def server():
    if not (SITE / "index.html").exists():
        skip_or_fail_browser(f"no built site at {SITE}; run `python3 tools/book.py build` first")
    with serve_directory(SITE) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    exe = chromium_path()
    if exe is None:
        skip_or_fail_browser("Chromium not found (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail_browser("the Python package playwright is not installed")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS)
        yield b
        b.close()


class PageVisit:
    """Open one page and record everything a reader's browser did."""

    def __init__(self, browser, url: str, width: int = 1280, height: int = 900):
        self.requests: list[str] = []
        self.failed: list[str] = []
        self.bad_status: list[str] = []
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.context = browser.new_context(viewport={"width": width, "height": height})
        page = self.context.new_page()
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("requestfailed", lambda r: self.failed.append(f"{r.url} ({r.failure})"))
        page.on("response", lambda r: r.status >= 400 and self.bad_status.append(f"{r.url} {r.status}"))
        page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        page.goto(url, wait_until="load")
        # MathJax typesets asynchronously; wait for its start-up promise when it is there.
        page.wait_for_function("() => !window.MathJax || (window.MathJax.startup && "
                               "window.MathJax.startup.promise)", timeout=20000)
        page.evaluate("() => window.MathJax ? window.MathJax.startup.promise : null")
        page.wait_for_load_state("networkidle")
        self.page = page

    def close(self):
        self.context.close()


@pytest.fixture(scope="module")
def visits(server, browser):
    done: dict[str, PageVisit] = {}

    def visit(page: str) -> PageVisit:
        if page not in done:
            done[page] = PageVisit(browser, f"{server}/{page}.html")
        return done[page]

    yield visit
    for v in done.values():
        v.close()


PAGES = toc_pages()


@pytest.mark.parametrize("page", PAGES)
def test_page_loads_cleanly(visits, page):
    v = visits(page)
    assert v.page_errors == [], f"{page}: JavaScript errors {v.page_errors}"
    assert v.console_errors == [], f"{page}: console errors {v.console_errors}"
    assert v.failed == [], f"{page}: failed requests {v.failed}"
    assert v.bad_status == [], f"{page}: HTTP errors {v.bad_status}"
    foreign = [u for u in v.requests
               if urlparse(u).scheme in ("http", "https") and urlparse(u).hostname != "127.0.0.1"]
    assert foreign == [], f"{page}: requests to other hosts {foreign}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    v.page.screenshot(path=str(SHOTS / f"{page.replace('/', '_')}.png"))


@pytest.mark.parametrize("page", PAGES)
def test_math_is_rendered(visits, page):
    v = visits(page)
    n_math = v.page.locator(".math").count()
    if n_math == 0:
        pytest.skip(f"{page} has no math")
    mathjax_loads = [u for u in v.requests if urlparse(u).path.endswith("/tex-mml-chtml.js")]
    assert len(mathjax_loads) == 1, f"{page}: MathJax loaded {len(mathjax_loads)} times"
    assert urlparse(mathjax_loads[0]).hostname == "127.0.0.1"
    rendered = v.page.locator("mjx-container").count()
    assert rendered >= n_math, f"{page}: {n_math} math elements but {rendered} rendered"
    text = v.page.inner_text("main")
    for raw in ("\\(", "\\[", "$$"):
        assert raw not in text, f"{page}: raw math delimiter {raw!r} left in the text"


@pytest.mark.parametrize("page", PAGES)
def test_images_load(visits, page):
    v = visits(page)
    # a lazy image (an explorer's frame) loads only near the viewport: load it now, then check
    v.page.evaluate("""() => Promise.all(Array.from(document.images)
        .filter(img => img.loading === 'lazy' && !img.complete)
        .map(img => new Promise(done => {
            img.addEventListener('load', done); img.addEventListener('error', done);
            img.loading = 'eager'; })))""")
    broken = v.page.evaluate("""() => Array.from(document.images)
        .filter(img => !(img.complete && img.naturalWidth > 0))
        .map(img => img.src)""")
    assert broken == [], f"{page}: images that did not load: {broken}"


@pytest.mark.parametrize("page", PAGES)
def test_in_page_links_resolve(visits, page):
    """Every link to an anchor on the same page (equations, footnote citations) has a target."""
    v = visits(page)
    dangling = v.page.evaluate("""() => Array.from(document.querySelectorAll('a[href^="#"]'))
        .map(a => decodeURIComponent(a.getAttribute('href').slice(1)))
        .filter(id => id && !document.getElementById(id))""")
    assert dangling == [], f"{page}: links to missing anchors {sorted(set(dangling))}"


@pytest.mark.parametrize("page", [p for p in PAGES if Path(ROOT / (p + ".ipynb")).exists()])
def test_solution_dropdown_opens(visits, page):
    v = visits(page)
    solutions = v.page.locator("div.solution.dropdown")
    assert solutions.count() >= 5, f"{page}: expected at least 5 solutions, found {solutions.count()}"
    first = solutions.first
    body = first.locator("section, .admonition-title ~ *").first
    assert not body.is_visible(), f"{page}: the first solution is open before any click"
    first.locator(".admonition-title").click()
    body.wait_for(state="visible", timeout=5000)
    assert len(body.inner_text().strip()) > 0, f"{page}: the opened solution shows no text"


@pytest.mark.parametrize("page", PAGES)
def test_code_fits_the_page(visits, page):
    """At 1280 px no code cell, output or solution code scrolls sideways.

    Chapter code lines are kept to 76 columns (74 in solutions, whose box is narrower; see
    book/_static/book.css). Every solution dropdown is opened first, so that its code is laid out.
    """
    v = visits(page)
    titles = v.page.locator("div.solution.dropdown .admonition-title")
    for i in range(titles.count()):
        body = v.page.locator("div.solution.dropdown").nth(i).locator(
            "section, .admonition-title ~ *").first
        if not body.is_visible():
            titles.nth(i).click()
            body.wait_for(state="visible", timeout=5000)
    wide = v.page.evaluate("""() => Array.from(document.querySelectorAll('div.highlight pre'))
        .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
        .map(pre => pre.textContent.split('\\n')
                       .reduce((a, line) => line.length > a.length ? line : a, ''))""")
    assert wide == [], f"{page}: code blocks that scroll sideways; their longest lines: {wide}"
