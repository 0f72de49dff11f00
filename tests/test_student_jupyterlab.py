"""A student notebook opened in a real JupyterLab (no MyST extension) in Chromium: the equations
are typeset by MathJax (none left as LaTeX source or as a code block), and no role or directive of
the book's MyST source is visible."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from conftest import BOOK, ROOT, skip_or_fail_browser
from softmaxbook.exercises.index import equation_labels, toc_chapters
from softmaxbook.exercises.readable import bibliography, context_for
from softmaxbook.exercises.student import make_student_notebook

pytestmark = pytest.mark.slow

CHAPTER = "05_euler_lagrange"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving a folder with the chapter's student notebook; yields (url, notebook)."""
    chromium = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        skip_or_fail_browser("Chromium not found (apt-get install -y chromium)")
    base = tmp_path_factory.mktemp("lab")
    full = nbformat.read(BOOK / f"{CHAPTER}.ipynb", as_version=4)
    md = "\n".join(c.source for c in full.cells if c.cell_type == "markdown")
    keys = {k.rsplit(":", 1)[0] for k in re.findall(r"\{glue:text\}`([^`]*)`", md)}
    number = {c.stem: c.number for c in toc_chapters(ROOT)}[CHAPTER]
    # glued numbers stand in for an execution (tests/test_student_readable.py tests that part)
    ctx = context_for(full, number, glue={k: "0.25" for k in keys},
                      references=bibliography(BOOK / "references.bib"))
    nb = make_student_notebook(full, chapter=CHAPTER, context=ctx)
    (base / "work").mkdir()
    nbformat.write(nb, base / "work" / f"{CHAPTER}.ipynb")
    # render every cell (JupyterLab 4 renders only the visible ones by default)
    settings = base / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port = _free_port()
    log = open(base / "jupyterlab.log", "w")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(base / "runtime"),
               JUPYTER_CONFIG_DIR=str(base / "config"), JUPYTER_DATA_DIR=str(base / "data"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--allow-root",
         "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=", "--ServerApp.password=",
         f"--ServerApp.root_dir={base / 'work'}",
         f"--LabApp.user_settings_dir={base / 'settings'}",
         f"--LabApp.workspaces_dir={base / 'workspaces'}"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(url + "/lab", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start within two minutes: "
                        + (base / "jupyterlab.log").read_text()[-2000:])
        yield url, full
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_student_notebook_renders_in_jupyterlab(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    url, full = lab
    n_tagged = len(equation_labels(full))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ.get("CHROMIUM")
                                    or "/usr/bin/chromium", args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{url}/lab/tree/{CHAPTER}.ipynb", timeout=120_000)
        page.wait_for_selector(".jp-MarkdownCell .jp-RenderedMarkdown", timeout=120_000)
        # MathJax typesets asynchronously: wait until every tagged equation is typeset
        page.wait_for_function(
            f"document.querySelectorAll('.jp-RenderedMarkdown mjx-container[display=\"true\"]')"
            f".length >= {n_tagged}", timeout=120_000)
        page.wait_for_timeout(1000)
        text = page.evaluate("Array.from(document.querySelectorAll("
                             "'.jp-MarkdownCell .jp-RenderedMarkdown')).map(e => e.innerText)"
                             ".join('\\n')")
        errors = page.evaluate("document.querySelectorAll('mjx-merror').length")
        code_blocks = page.evaluate("Array.from(document.querySelectorAll("
                                    "'.jp-RenderedMarkdown pre')).map(e => e.innerText)")
        stubs = page.evaluate("Array.from(document.querySelectorAll('.jp-CodeCell "
                              ".jp-InputArea-editor')).map(e => e.innerText).join('\\n')")
        page.screenshot(path=str(tmp_path / "lab.png"))
        browser.close()
    for raw in ["{glue", "{eq}", "{footcite", "{ref}", "{doc}", "{math}", "{exercise", ":label:",
                "\\tag", "$$", "\\frac", "{note}"]:
        assert raw not in text, f"JupyterLab shows MyST/LaTeX source {raw!r}"
    assert errors == 0
    assert not [b for b in code_blocks if "\\" in b], "an equation is shown as a code block"
    assert "Exercise 5.4." in text and "(5.6)" in text and "Gelfand and Fomin, 1963" in text
    assert "Exercise 5.4: write the body of residual" in stubs
