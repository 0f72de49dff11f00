"""Write student versions of the chapter notebooks: solutions out, stubs in, outputs empty.

Run ``python -m softmaxbook.exercises.student book _build/student`` (or
``python3 tools/book.py student``). For each notebook:

* every solution block in markdown is removed: the gated form (a cell opening with
  ```` ```{solution-start} LABEL ```` up to the cell with ```` ```{solution-end} ````, every cell
  between included) and the one-cell form (```` ```{solution} LABEL ... ``` ````);
* every code cell tagged ``solution`` is replaced by a stub: imports are kept, each top-level
  function keeps its signature and docstring and its body becomes
  ``raise NotImplementedError("Exercise LABEL: ...")``, each top-level assignment becomes
  ``name = ...``; everything else (comments included) is dropped;
* untagged code cells inside a solution block (a demonstration of the solution) are dropped;
* outputs, execution counts and widget state are cleared, and a note at the top says what this is.

The check cell that follows each exercise (``check("LABEL", answer)``) stays, so a student runs it
and is told whether the answer is right.
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
from pathlib import Path

import nbformat

__all__ = ["make_student_notebook", "stub_source", "strip_solution_markdown", "main"]

_DIRECTIVE = re.compile(r"^\s*(?P<fence>`{3,}|:{3,})\{(?P<name>solution(?:-start|-end)?)\}\s*(?P<arg>\S*)")


def _close_index(lines: list[str], start: int, fence: str) -> int:
    """Index of the line that closes the fence opened on ``lines[start]`` (CommonMark rule)."""
    char, n = fence[0], len(fence)
    pattern = re.compile(rf"^\s*{re.escape(char)}{{{n},}}\s*$")
    for i in range(start + 1, len(lines)):
        if pattern.match(lines[i]):
            return i
    raise ValueError(f"unclosed directive fence {fence!r} opened on line {start + 1}")


def strip_solution_markdown(text: str, in_gated: bool = False) -> tuple[str, bool, str | None]:
    """Remove solution blocks from one markdown cell.

    ``in_gated`` says whether the cell starts inside a gated solution (after a solution-start).
    Returns the remaining text, whether the cell ends inside a gated solution, and the label of
    the last solution-start seen (or None).
    """
    lines = text.splitlines()
    kept: list[str] = []
    label = None
    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        if m is None:
            if not in_gated:
                kept.append(lines[i])
            i += 1
            continue
        end = _close_index(lines, i, m.group("fence"))
        name = m.group("name")
        if name == "solution-start":
            in_gated, label = True, m.group("arg") or None
        elif name == "solution-end":
            in_gated = False
        # {solution}: the whole block (lines i..end) is simply dropped
        i = end + 1
    return "\n".join(kept).strip("\n"), in_gated, label


def stub_source(source: str, label: str) -> str:
    """The stub that replaces a solution code cell (see the module docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise ValueError(f"solution cell of exercise {label} is not valid Python: {err}") from err
    lines = source.splitlines()
    parts: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            parts.append(ast.get_source_segment(source, node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
            body0 = node.body[0]
            has_doc = (isinstance(body0, ast.Expr) and isinstance(body0.value, ast.Constant)
                       and isinstance(body0.value.value, str))
            head_end = body0.end_lineno if has_doc else body0.lineno - 1
            indent = " " * body0.col_offset
            head = "\n".join(lines[first:head_end])
            message = f"Exercise {label}: write the body of {node.name}"
            parts.append(f"{head}\n{indent}raise NotImplementedError({message!r})")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = " = ".join(ast.get_source_segment(source, t) for t in targets)
            parts.append(f"{names} = ...  # Exercise {label}: your answer")
    header = f"# Exercise {label}: your code here."
    return "\n\n".join([header] + parts) + "\n"


def make_student_notebook(nb: nbformat.NotebookNode,
                          chapter: str | None = None) -> nbformat.NotebookNode:
    """Return a student copy of ``nb`` (the input is not changed).

    ``chapter`` (the notebook's stem, e.g. ``"05_euler_lagrange"``) is written to the metadata
    (``softmaxbook.chapter``), so that the grader knows the chapter whatever the file is renamed to.
    """
    nb = copy.deepcopy(nb)
    cells = []
    in_gated, label = False, None
    for cell in nb.cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell.cell_type == "markdown":
            text, in_gated_after, new_label = strip_solution_markdown(cell.source, in_gated)
            label = new_label or label
            in_gated = in_gated_after
            if text.strip():
                cell.source = text
                cells.append(cell)
            continue
        if cell.cell_type == "code" and "solution" in tags:
            if not in_gated or label is None:
                raise ValueError("a code cell tagged 'solution' must sit inside a gated solution "
                                 f"block (solution-start ... solution-end): {cell.source[:80]!r}")
            cell.source = stub_source(cell.source, label)
            cell.metadata["tags"] = sorted(tags - {"solution"} | {"exercise-stub"})
        elif in_gated:
            continue  # a demonstration inside a solution
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cells.append(cell)
    note = nbformat.v4.new_markdown_cell(
        "**Student version.** The solutions are removed. Fill in each cell that raises "
        "`NotImplementedError` or holds `...`, then run the `check(...)` cell below it: it tells "
        "you whether your answer is right, and if not, for which input.")
    nb.cells = [note] + cells
    nb.metadata.pop("widgets", None)
    if chapter is not None:
        nb.metadata["softmaxbook"] = {"chapter": chapter}
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder with the chapter notebooks (book/)")
    parser.add_argument("target", type=Path, help="where to write the student notebooks")
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        parser.error(f"argument 'source': {args.source} is not a folder")
    args.target.mkdir(parents=True, exist_ok=True)
    paths = sorted(p for p in args.source.glob("*.ipynb"))
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        out = args.target / path.name
        nbformat.write(make_student_notebook(nb, chapter=path.stem), out)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
