"""The solution-free site (``book.py build-nosolutions``) gives out no solution, by any route.

Its pages lose every solution (book/_ext/solution_free.py; `.ci/run` greps the pages). Here the
other two routes: the download button must hand out the student notebook (solution code stubbed),
and no launch, repository or issue button may lead to the full notebooks in the repository.

The first test runs the extension's post-processing on copies of every chapter notebook, so it
runs in every test run. The browser test needs the solution-free site, which CI builds after the
test step: it reads $BOOK_NOSOL_SITE (default `_build/nosolutions/_build/html`) and skips when
that site is not built, unless $BOOK_NOSOL_SITE is set (then a missing site fails).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
import yaml

from conftest import ROOT, chapter_notebooks
from softmaxbook.exercises.student import stub_source
from test_browser import (CHROMIUM_FLAGS, chromium_path, download_notebook, serve_directory,
                          toc_pages)

NOSOL_SITE = Path(os.environ.get("BOOK_NOSOL_SITE",
                                 ROOT / "_build" / "nosolutions" / "_build" / "html"))


def _extension():
    spec = importlib.util.spec_from_file_location(
        "solution_free", ROOT / "book" / "_ext" / "solution_free.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def solution_lines(nb) -> set[str]:
    """Lines of solution code that a student notebook must not contain.

    Every line of a code cell tagged ``solution`` that its stub does not keep (imports, signatures
    and docstrings stay in a stub), and every line of an untagged code cell inside a gated
    solution block (a demonstration of the solution). Short lines (``return x``) are left out:
    they could also occur in the chapter's own code.
    """
    lines: set[str] = set()
    in_gated = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            if "{solution-start}" in cell.source:
                in_gated = True
            if "{solution-end}" in cell.source:
                in_gated = False
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        if "solution" in tags:
            kept = set(stub_source(cell.source, "x").splitlines())
            new = [ln for ln in cell.source.splitlines() if ln not in kept]
        elif in_gated:
            new = cell.source.splitlines()
        else:
            continue
        lines |= {ln.strip() for ln in new if len(ln.strip()) >= 16}
    # A line that also occurs outside solutions gives nothing away.
    elsewhere = set()
    in_gated = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            in_gated = ("{solution-start}" in cell.source
                        or (in_gated and "{solution-end}" not in cell.source))
            continue
        if not in_gated and "solution" not in cell.get("metadata", {}).get("tags", []):
            elsewhere |= {ln.strip() for ln in cell.source.splitlines()}
    return lines - elsewhere


def leaks(downloaded, full) -> list[str]:
    """What of ``full``'s solutions the notebook ``downloaded`` still contains."""
    text = "\n".join(cell.source for cell in downloaded.cells)
    found = [ln for ln in sorted(solution_lines(full)) if ln in text]
    for marker in ("{solution-start}", "{solution}", "{solution-end}"):
        if marker in text:
            found.append(marker)
    found += [f"cell tagged 'solution': {c.source[:60]!r}" for c in downloaded.cells
              if "solution" in c.get("metadata", {}).get("tags", [])]
    return found


def test_solution_lines_finds_the_solutions():
    """The detector itself: every chapter has solution code it recognises."""
    for path in chapter_notebooks():
        nb = nbformat.read(path, as_version=4)
        assert len(solution_lines(nb)) >= 3, f"{path.name}: no solution code recognised"
        assert leaks(nb, nb), f"{path.name}: the full notebook is not seen to leak"


def test_downloadable_notebooks_become_student_notebooks(tmp_path):
    """The build-finished step replaces each notebook in _sources by its student version."""
    sources = tmp_path / "_sources" / "book"
    sources.mkdir(parents=True)
    chapters = chapter_notebooks()
    for path in chapters:
        shutil.copy(path, sources / path.name)
    (sources / "intro.md").write_text("# intro\n")
    # no execution cache here: the glued numbers are checked on the built site below
    done = _extension().studentise_sources(tmp_path / "_sources", srcdir=ROOT)
    assert sorted(p.name for p in done) == sorted(p.name for p in chapters)
    for path in chapters:
        student = nbformat.read(sources / path.name, as_version=4)
        full = nbformat.read(path, as_version=4)
        assert leaks(student, full) == [], f"{path.name}: solutions left in the download"
        stubs = [c for c in student.cells if "exercise-stub" in c.metadata.get("tags", [])]
        assert stubs, f"{path.name}: the download has no exercise stubs"
        # readable, as `book.py student` writes it: numbered stubs, no MyST left
        assert all(re.match(r"# Exercise \d+\.\d+:", c.source) for c in stubs), \
            f"{path.name}: a stub names its exercise by label: {stubs[0].source[:60]!r}"
        assert myst_left(student, glue=False) == [], \
            f"{path.name}: MyST source left in the download: {myst_left(student, glue=False)}"
    assert (sources / "intro.md").read_text() == "# intro\n"


def myst_left(nb, glue=True) -> list[str]:
    """MyST syntax that a plain notebook reader would show as source."""
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    marks = ["```{math}", "{eq}`", "{footcite", "{doc}`", "{ref}`", "{exercise", "{glue"]
    return [m for m in marks if m in text and (glue or m != "{glue")]


@pytest.fixture(scope="module")
def nosol_url():
    if not (NOSOL_SITE / "index.html").exists():
        message = (f"no solution-free site at {NOSOL_SITE}; run `python3 tools/book.py "
                   "build-nosolutions` first")
        if "BOOK_NOSOL_SITE" in os.environ:
            pytest.fail(message)
        pytest.skip(message)
    with serve_directory(NOSOL_SITE) as url:
        yield url


@pytest.fixture(scope="module")
def nosol_browser():
    exe = chromium_path()
    if exe is None:
        pytest.skip("Chromium not found (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS)
        yield b
        b.close()


CHAPTERS = [p for p in toc_pages() if (ROOT / (p + ".ipynb")).exists()]


@pytest.mark.parametrize("page", CHAPTERS)
def test_download_button_gives_the_student_notebook(nosol_url, nosol_browser, page, tmp_path):
    context = nosol_browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        pg, downloaded = download_notebook(context, f"{nosol_url}/{page}.html",
                                           tmp_path / "download.ipynb")
        full = nbformat.read(ROOT / (page + ".ipynb"), as_version=4)
        assert leaks(downloaded, full) == [], f"{page}: the download button hands out solutions"
        outputs = [c for c in downloaded.cells if c.cell_type == "code" and c.outputs]
        assert outputs == [], f"{page}: the downloaded notebook has outputs"
        assert myst_left(downloaded) == [], \
            f"{page}: the download is not the readable student notebook: {myst_left(downloaded)}"

        hrefs = pg.evaluate("() => Array.from(document.querySelectorAll('a[href]'))"
                            ".map(a => a.href)")
        repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
        repo = repo.split("://", 1)[-1]
        bad = [h for h in hrefs if any(s in h for s in ("mybinder.org", "colab.research", repo))]
        assert bad == [], f"{page}: links that open the full notebooks: {bad}"
    finally:
        context.close()
