"""The reader's notebook of a chapter: what the site's download, Binder and Colab buttons give.

The chapter notebooks in ``book/`` are written for Jupyter Book (MyST directives and roles,
``{glue:text}`` numbers filled in by the build, solutions in ``{solution}`` blocks). Opened in
plain JupyterLab or Colab they show that source. :func:`make_reader_notebook` makes the version a
reader opens instead:

* every markdown cell passes through :func:`softmaxbook.exercises.readable.readable_markdown`:
  numbered equations (``\\tag{5.3}``), the glued numbers of the book's build, exercise numbers,
  citations, plain Markdown maths;
* every solution stays, folded: its prose inside ``<details>`` ("Solution to Exercise 5.4",
  one click opens it, in JupyterLab and Colab alike); its code cells keep their code, so that
  the checks and every later cell run, but start folded: ``jupyter.source_hidden`` (JupyterLab)
  and a ``# @title ... {display-mode: "form"}`` first line (Colab's folded form);
* the cells the site folds (tag ``hide-input``: plotting code, assert cells) start folded in
  JupyterLab too;
* a first markdown cell says what the notebook is, and a first code cell installs the book's
  package where it is missing (Colab, a fresh Python; it does nothing where it is installed).

Outputs are empty: running the notebook recomputes every number and figure (under
``SOFTMAXBOOK_SEED``, if set). The student notebooks (``book.py student``) are a different thing:
their solutions are removed and stubbed, for graded work.
"""

from __future__ import annotations

import copy
import re

import nbformat

from .student import _close_index  # the CommonMark fence rule, shared

__all__ = ["make_reader_notebook", "INSTALL_CELL", "solution_summary"]

#: Where the package comes from when it is not installed: the repository named in _config.yml
#: (tests/test_reader_notebooks.py keeps the two equal).
PACKAGE_URL = "git+https://github.com/softmax-book/softmax-book#subdirectory=code"

INSTALL_CELL = f"""\
# Installs the book's package where it is missing (Colab, a fresh Python);
# does nothing where it is installed (Binder, a clone of the repository).
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("softmaxbook") is None:
    url = "{PACKAGE_URL}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    f"softmaxbook[book] @ {{url}}"], check=True)
"""

_DIRECTIVE = re.compile(
    r"^\s*(?P<fence>`{3,}|:{3,})\{(?P<name>solution(?:-start|-end)?)\}\s*(?P<arg>\S*)\s*$")
_OPTION = re.compile(r"^\s*:[\w-]+:.*$")


def solution_summary(label: str | None, context) -> str:
    """"Solution to Exercise 5.4" (the book's number), or to the label where none is known."""
    if label and context is not None and label in context.exercises:
        return f"Solution to Exercise {context.exercises[label]}"
    return f"Solution ({label})" if label else "Solution"


def _details(summary: str, body: str) -> list[str]:
    # Blank lines around the body: CommonMark ends the HTML block there, so the body is read as
    # Markdown (maths, lists, code) by JupyterLab's and Colab's renderers alike.
    return ["<details>", f"<summary><b>{summary}</b> (click to open)</summary>", "",
            body.strip("\n"), "", "</details>"]


def _fold_solutions(text: str, in_gated: bool, label: str | None, context,
                    opened: set | None = None):
    """One markdown cell with its solution blocks folded into ``<details>``.

    ``in_gated``/``label``: whether the cell starts inside a gated solution (solution-start ...
    solution-end over several cells), and whose. ``opened``: the labels whose solution already
    had a folded block (a gated solution's prose after its code: "..., continued").
    Returns the new text and the state after it.
    """
    opened = set() if opened is None else opened
    lines = text.splitlines()
    out: list[str] = []
    gated: list[str] = []  # the prose of a gated solution met in this cell

    def flush():
        if in_gated and any(ln.strip() for ln in gated):
            summary = solution_summary(label, context)
            if label in opened:
                summary += ", continued"
            opened.add(label)
            out.extend(_details(summary, "\n".join(gated)))
        gated.clear()

    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        if m is None:
            (gated if in_gated else out).append(lines[i])
            i += 1
            continue
        end = _close_index(lines, i, m.group("fence"))
        body = lines[i + 1:end]
        while body and _OPTION.match(body[0]):
            body = body[1:]
        name, arg = m.group("name"), m.group("arg") or None
        if name == "solution":
            out.extend(_details(solution_summary(arg, context), "\n".join(body)))
            opened.add(arg)
        elif name == "solution-start":
            flush()
            in_gated, label = True, arg
            gated.extend(body)
        else:  # solution-end
            flush()
            in_gated = False
        i = end + 1
    flush()
    return "\n".join(out).strip("\n"), in_gated, label


def _fold_code(cell, title: str | None) -> None:
    """Start the cell folded: in JupyterLab (source_hidden) and, with a title, in Colab."""
    meta = cell.setdefault("metadata", {})
    meta.setdefault("jupyter", {})["source_hidden"] = True
    if title is not None:
        # Colab shows a cell whose first line is "# @title T" with display-mode form as its title
        # alone; a double click opens the code. Elsewhere it is a comment.
        cell.source = f'# @title {title} {{ display-mode: "form" }}\n' + cell.source
        meta["cellView"] = "form"


def make_reader_notebook(nb: nbformat.NotebookNode, chapter: str | None = None,
                         context=None) -> nbformat.NotebookNode:
    """Return the reader's version of the chapter notebook ``nb`` (``nb`` is not changed).

    ``context`` (:class:`softmaxbook.exercises.readable.Context`) gives the book's equation and
    exercise numbers, glued numbers and references; without it the markdown keeps its MyST and
    only the solutions are folded.
    """
    if not isinstance(nb, nbformat.NotebookNode):
        raise TypeError(f"make_reader_notebook: argument 'nb' must be a notebook "
                        f"(nbformat.NotebookNode), got {type(nb).__name__}")
    nb = copy.deepcopy(nb)
    cells = []
    in_gated, label = False, None
    opened: set = set()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            text, in_gated, label = _fold_solutions(cell.source, in_gated, label, context,
                                                    opened)
            if context is not None and text.strip():
                from .readable import readable_markdown

                text = readable_markdown(text, context)
            if text.strip():
                cell.source = text
                cells.append(cell)
            continue
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            tags = set(cell.get("metadata", {}).get("tags", []))
            if in_gated:
                summary = solution_summary(label, context)
                what = "code" if "solution" in tags else "a demonstration"
                _fold_code(cell, f"{summary}: {what} (double-click to open)")
            elif "hide-input" in tags:
                _fold_code(cell, None)
        cells.append(cell)
    if in_gated:
        raise ValueError(f"make_reader_notebook: the solution of {label!r} has no solution-end")
    title = "this chapter"
    if context is not None and context.chapter_number is not None:
        title = f"Chapter {context.chapter_number}"
    note = nbformat.v4.new_markdown_cell(
        f"**The reader's notebook of {title} of *The Softmax and Its Tricks*.** The numbers in "
        "the text are those of the book's build; running the cells recomputes them, and every "
        "figure. Solutions are folded: click *Solution to Exercise …* to open one (their code "
        "cells start folded too: the checks below them need them run). The plotting and "
        "checking cells the book's pages fold start folded here as well. Run the cell below "
        "first on Colab or any Python without the book's package; it does nothing elsewhere. "
        "For graded work use the student notebooks instead (solutions removed, each exercise "
        "checked).")
    install = nbformat.v4.new_code_cell(INSTALL_CELL)
    install.metadata["tags"] = ["reader-install"]
    nb.cells = [note, install] + cells
    nb.metadata.pop("widgets", None)
    if chapter is not None:
        nb.metadata["softmaxbook"] = {"chapter": chapter, "reader": True}
    return nb


def write_reader_notebooks(source, target, chapters=None, *, cache=None, glue: str = "cache",
                           toc=None) -> list:
    """Write the reader's notebook of every chapter in ``source`` (or of ``chapters``) to
    ``target``; the glued numbers from the build's execution cache ``cache`` (``glue="cache"``,
    nothing executed), or from one execution where the cache has none (``"auto"``), or left
    out (``"none"``). Returns the paths written."""
    from pathlib import Path

    from .student import _chapter_numbers, _context, select_chapters

    source, target = Path(source), Path(target)
    if not source.is_dir():
        raise ValueError(f"write_reader_notebooks: argument 'source' must be a folder of "
                         f"chapter notebooks, got {source}")
    if glue not in ("auto", "cache", "none"):
        raise ValueError(f"write_reader_notebooks: argument 'glue' must be 'auto', 'cache' or "
                         f"'none', got {glue!r}")
    numbers = _chapter_numbers(Path(toc) if toc else source.resolve().parent)
    cache = Path(cache) if cache else source.resolve().parent / ".jupyter_cache"
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for path in select_chapters(source, chapters):
        nb = nbformat.read(path, as_version=4)
        context = _context(path, nb, numbers.get(path.stem), source, cache, glue)
        out = target / path.name
        nbformat.write(make_reader_notebook(nb, chapter=path.stem, context=context), out)
        written.append(out)
    return written


def main(argv=None) -> int:
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description="Write the reader's notebooks of the chapters.")
    parser.add_argument("source", type=Path, help="folder with the chapter notebooks (book/)")
    parser.add_argument("target", type=Path, help="where to write them")
    parser.add_argument("chapters", nargs="*", help="only these chapters (default: all)")
    parser.add_argument("--glue", choices=("auto", "cache", "none"), default="auto",
                        help="glued numbers from the build's cache, else one execution (auto); "
                             "the cache only; or none")
    parser.add_argument("--cache", type=Path, default=None,
                        help="the build's Jupyter cache (default: .jupyter_cache beside source)")
    args = parser.parse_args(argv)
    try:
        for out in write_reader_notebooks(args.source, args.target, args.chapters,
                                          cache=args.cache, glue=args.glue):
            print(f"wrote {out}")
    except ValueError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
