"""The reader's notebooks: what the site's download, Binder and Colab buttons give a reader.

Unit tests of softmaxbook.exercises.reader on every chapter (no MyST left, every solution kept
and folded, the install cell), one reader's notebook executed as a reader runs it, the build
step that puts them behind the download button (book/_ext/reader_notebooks.py), the command
that writes the branch the launch buttons open, the publishing workflow, and in Chromium, on
every chapter page of the built site: the download button's notebook and the launch buttons.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from conftest import ROOT, chapter_notebooks
from softmaxbook.exercises.reader import INSTALL_CELL, PACKAGE_URL, make_reader_notebook
from softmaxbook.exercises.readable import context_for
from test_browser import browser, download_notebook, server, toc_pages  # noqa: F401

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
MYST = ["```{", ":::{", "{eq}`", "{footcite", "{doc}`", "{ref}`", "{exercise", "{glue",
        "{solution", "{numref}`"]


def myst_left(nb) -> list[str]:
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return [m for m in MYST if m in text]


def solutions(nb) -> tuple[int, list[str]]:
    """How many solution blocks the authors' notebook has, and its solution code cells."""
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    blocks = len(re.findall(r"^\s*(?:`{3,}|:{3,})\{solution(?:-start)?\}", text, re.M))
    code = [c.source for c in nb.cells
            if c.cell_type == "code" and "solution" in c.metadata.get("tags", [])]
    return blocks, code


def reader(path: Path, number: int | None = None):
    nb = nbformat.read(path, as_version=4)
    return nb, make_reader_notebook(nb, chapter=path.stem,
                                    context=context_for(nb, number, glue=None))


@pytest.mark.parametrize("path", chapter_notebooks(), ids=lambda p: p.stem)
def test_reader_notebook_reads_without_myst_and_keeps_every_solution_folded(path):
    number = int(path.stem.split("_")[0])
    full, nb = reader(path, number)
    assert myst_left(nb) == [], f"{path.name}: MyST left: {myst_left(nb)}"
    blocks, code = solutions(full)
    assert blocks >= 3, f"{path.name}: the test found no solutions to look for"
    details = [c for c in nb.cells if c.cell_type == "markdown" and "<details>" in c.source]
    summaries = re.findall(r"<summary><b>Solution to Exercise (\d+)\.\d+</b> \(click",
                           "\n".join(c.source for c in details))
    # a gated solution's prose after its code is a second block, "..., continued"
    assert len(summaries) == blocks, f"{path.name}: {len(summaries)} folded of {blocks}"
    assert set(summaries) == {str(number)}, f"{path.name}: solutions numbered {set(summaries)}"
    for c in details:  # the HTML block must end before the Markdown inside it (CommonMark)
        assert "</summary>\n\n" in c.source and "\n\n</details>" in c.source
    folded = {c.source.split("\n", 1)[1]: c for c in nb.cells if c.cell_type == "code"
              and c.source.startswith("# @title Solution to Exercise")}
    for source in code:  # the code itself, unchanged, folded in JupyterLab and Colab
        assert source in folded, f"{path.name}: a solution cell is missing: {source[:60]!r}"
        cell = folded[source]
        assert cell.metadata["jupyter"]["source_hidden"] is True
        assert cell.metadata["cellView"] == "form"
        assert 'display-mode: "form"' in cell.source.splitlines()[0]
    hidden = [c for c in nb.cells if "hide-input" in c.metadata.get("tags", [])]
    assert hidden and all(c.metadata["jupyter"]["source_hidden"] for c in hidden)
    shown = [c for c in nb.cells if c.cell_type == "code" and not c.metadata.get("jupyter")]
    assert shown, f"{path.name}: every code cell folded"
    assert all(c.outputs == [] and c.execution_count is None
               for c in nb.cells if c.cell_type == "code")
    assert nb.cells[0].cell_type == "markdown" and f"Chapter {number}" in nb.cells[0].source
    assert nb.cells[1].source == INSTALL_CELL
    assert nb.metadata["softmaxbook"] == {"chapter": path.stem, "reader": True}
    assert "widgets" not in nb.metadata
    # the authors' notebook is not changed
    assert full == nbformat.read(path, as_version=4)


def test_numbers_and_equations_are_filled_in():
    path = ROOT / "book" / "05_euler_lagrange.ipynb"
    full = nbformat.read(path, as_version=4)
    keys = set(re.findall(r"\{glue(?::text)?\}`([\w-]+)", "\n".join(
        c.source for c in full.cells if c.cell_type == "markdown")))
    assert keys, "the chapter glues no number: pick another for this test"
    context = context_for(full, 5, glue={k: "0.123456" for k in keys})
    nb = make_reader_notebook(full, chapter=path.stem, context=context)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "0.123" in text and "computed by the code" not in text
    assert re.search(r"\\tag\{5\.\d+\}", text), "no numbered equation"
    assert re.search(r"\(5\.\d+\)", text), "no equation reference by number"


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="argument 'nb'"):
        make_reader_notebook({"cells": []})
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("```{solution-start} ex-a\n```\nprose"),
        nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(ValueError, match="no solution-end"):
        make_reader_notebook(nb)


def test_one_solution_cell_form_and_gated_form():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(
            "Before.\n\n```{solution} ex-a\n:class: dropdown\n\nThe answer is $1$.\n```\n\nAfter."),
        nbformat.v4.new_markdown_cell(
            "```{solution-start} ex-b\n:class: dropdown\n```\nSay why."),
        nbformat.v4.new_code_cell("y = 2", metadata={"tags": ["solution"]}),
        nbformat.v4.new_code_cell("print(y)"),
        nbformat.v4.new_markdown_cell("More prose.\n```{solution-end}\n```\nOutside again."),
        nbformat.v4.new_code_cell("check('ex-b', y)")])
    out = make_reader_notebook(nb)
    md = [c.source for c in out.cells if c.cell_type == "markdown"][1:]
    assert md[0].startswith("Before.") and md[0].endswith("After.")
    assert "<summary><b>Solution (ex-a)</b>" in md[0] and "The answer is $1$." in md[0]
    assert ":class:" not in "\n".join(md)
    assert "<summary><b>Solution (ex-b)</b>" in md[1] and "Say why." in md[1]
    assert "More prose." in md[2] and md[2].endswith("Outside again.")
    assert "<summary><b>Solution (ex-b), continued</b>" in md[2]
    assert md[2].index("</details>") < md[2].index("Outside again.")
    code = [c for c in out.cells if c.cell_type == "code"][1:]
    assert "Solution (ex-b): code" in code[0].source and code[0].source.endswith("y = 2")
    assert "demonstration" in code[1].source and code[1].metadata["jupyter"]["source_hidden"]
    assert code[2].source == "check('ex-b', y)" and not code[2].metadata.get("jupyter")


def test_install_cell_names_the_repository():
    repo = CONFIG["repository"]["url"].replace("https://", "git+https://")
    assert PACKAGE_URL == f"{repo}#subdirectory=code"
    namespace: dict = {}
    exec(compile(INSTALL_CELL, "install", "exec"), namespace)  # installed here: does nothing


def test_reader_notebook_runs_as_a_reader_runs_it(tmp_path):
    """Chapter 5's reader's notebook, executed in its folder: every cell, the folded solutions
    and their checks included, runs as it is."""
    from nbclient import NotebookClient

    _, nb = reader(ROOT / "book" / "05_euler_lagrange.ipynb", 5)
    env_frames = os.environ.pop("SOFTMAXBOOK_EXPLORER_FRAMES", None)
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT / "book")}}).execute()
    finally:
        if env_frames is not None:
            os.environ["SOFTMAXBOOK_EXPLORER_FRAMES"] = env_frames
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert errors == []
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.outputs)
    assert "✓" in text, "no check line printed"


def _extension():
    spec = importlib.util.spec_from_file_location(
        "reader_notebooks", ROOT / "book" / "_ext" / "reader_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_step_puts_reader_notebooks_behind_the_download_button(tmp_path):
    sources = tmp_path / "_sources" / "book"
    sources.mkdir(parents=True)
    for path in chapter_notebooks():
        shutil.copy(path, sources / path.name)
    (sources / "intro.md").write_text("# intro\n")
    done = _extension().readerise_sources(tmp_path / "_sources", srcdir=ROOT,
                                          cache=tmp_path / "no-cache")
    assert sorted(p.name for p in done) == sorted(p.name for p in chapter_notebooks())
    for path in done:
        nb = nbformat.read(path, as_version=4)
        assert nb.metadata["softmaxbook"]["reader"] is True
        assert myst_left(nb) == [], f"{path.name}: {myst_left(nb)}"
    assert (sources / "intro.md").read_text() == "# intro\n"
    assert "reader_notebooks" in CONFIG["sphinx"]["local_extensions"]


def test_command_never_replaces_a_folder_it_did_not_write(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    proc = subprocess.run([sys.executable, ROOT / "tools" / "book.py", "reader-notebooks",
                           "--out", mine], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0
    assert "argument '--out'" in proc.stderr and "did not write" in proc.stderr
    assert (mine / "thesis.tex").read_text() == "years of work"


def test_workflow_runs_ci_and_publishes_both():
    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "publish.yml").read_text())
    steps = flow["jobs"]["build"]["steps"]
    commands = "\n".join(s.get("run", "") for s in steps)
    assert "bash .ci/run" in commands, "the site is not published with CI's own commands"
    assert "tools/book.py reader-notebooks" in commands
    branch = CONFIG["repository"]["branch"]
    assert re.search(rf"git push .*\s{re.escape(branch)}\s*$", commands, re.S | re.M), \
        f"the workflow does not push the branch the launch buttons open ({branch})"
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/upload-pages-artifact") for u in uses)
    assert any(s.get("with", {}).get("path") == "_build/html" for s in steps)
    deploy = [s.get("uses", "") for s in flow["jobs"]["deploy"]["steps"]]
    assert any(u.startswith("actions/deploy-pages") for u in deploy)
    assert "download.pytorch.org/whl/cpu" in commands  # never the CUDA wheel


# --- in Chromium, on the built site --------------------------------------------------------------
CHAPTERS = [p for p in toc_pages() if (ROOT / (p + ".ipynb")).exists()]


@pytest.mark.parametrize("page", CHAPTERS)
def test_download_and_launch_buttons_give_the_reader_notebook(server, browser, page, tmp_path):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        pg, nb = download_notebook(context, f"{server}/{page}.html", tmp_path / "d.ipynb")
        assert nb.metadata.get("softmaxbook", {}).get("reader") is True, \
            f"{page}: the download button gives the authors' notebook"
        assert myst_left(nb) == [], f"{page}: raw MyST in the download: {myst_left(nb)}"
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert "computed by the code of this chapter" not in text, \
            f"{page}: the download lacks the build's numbers"
        assert "<details>" in text
        hrefs = pg.evaluate("() => Array.from(document.querySelectorAll('a[href]'))"
                            ".map(a => a.href)")
        org_repo = CONFIG["repository"]["url"].split("github.com/", 1)[1]
        branch = CONFIG["repository"]["branch"]
        binder = [h for h in hrefs if "mybinder.org" in h]
        colab = [h for h in hrefs if "colab.research.google.com" in h]
        assert binder == [f"https://mybinder.org/v2/gh/{org_repo}/{branch}"
                          f"?urlpath=lab/tree/{page}.ipynb"], f"{page}: Binder: {binder}"
        assert colab == [f"https://colab.research.google.com/github/{org_repo}/blob/"
                         f"{branch}/{page}.ipynb"], f"{page}: Colab: {colab}"
    finally:
        context.close()
