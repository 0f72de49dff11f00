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

__all__ = ["make_student_notebook", "make_answer_key", "select_chapters", "stub_source",
           "strip_solution_markdown", "main"]

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


def make_student_notebook(nb: nbformat.NotebookNode, chapter: str | None = None,
                          context=None) -> nbformat.NotebookNode:
    """Return a student copy of ``nb`` (the input is not changed).

    ``chapter`` (the notebook's stem, e.g. ``"05_euler_lagrange"``) is written to the metadata
    (``softmaxbook.chapter``), so that the grader knows the chapter whatever the file is renamed to.
    ``context`` (a :class:`softmaxbook.exercises.readable.Context`) makes the markdown readable
    without MyST (numbered equations, glued numbers, citations, exercise numbers; see that module)
    and the stubs name the exercise by its number ("Exercise 5.4") instead of its label.
    """
    from .index import notebook_exercises

    nb = copy.deepcopy(nb)
    number = context.chapter_number if context is not None else None
    exercises = notebook_exercises(nb, chapter or "", number)
    by_label = {ex.label: ex for ex in exercises}
    answered: set[str] = set()  # exercises given an answer cell
    cells = []
    in_gated, label = False, None
    for cell in _split_exercise_cells(nb.cells):
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell.cell_type == "markdown":
            solved = [arg for name, arg, _ in _segments(cell.source)
                      if name in ("solution", "solution-start") and arg in by_label]
            text, in_gated_after, new_label = strip_solution_markdown(cell.source, in_gated)
            label = new_label or label
            in_gated = in_gated_after
            if context is not None and text.strip():
                from .readable import readable_markdown

                text = readable_markdown(text, context)
            if text.strip():
                cell.source = text
                cells.append(cell)
            for lab in solved:  # where the solution was: the student's answer goes there
                ex = by_label[lab]
                if not ex.auto_checked and lab not in answered:
                    answered.add(lab)
                    cells.extend(_answer_cells(ex))
            continue
        if cell.cell_type == "code" and "solution" in tags:
            if not in_gated or label is None:
                raise ValueError("a code cell tagged 'solution' must sit inside a gated solution "
                                 f"block (solution-start ... solution-end): {cell.source[:80]!r}")
            name = label
            if context is not None and label in context.exercises:
                name = context.exercises[label]
            cell.source = stub_source(cell.source, name)
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
    checked = [ex for ex in exercises if ex.auto_checked]
    if exercises:
        items = ",\n    ".join(f"({ex.check!r}, {ex.answer!r}, {ex.numbered!r})"
                               for ex in checked)
        hand = ", ".join(f"({ex.numbered!r}, {ex.kind!r})" for ex in exercises
                         if not ex.auto_checked)
        cells.append(nbformat.v4.new_markdown_cell(
            "## Your progress\n\nRun the cell below: it runs every check of this chapter on "
            "your answers and lists which exercises pass."))
        progress_cell = nbformat.v4.new_code_cell(
            "from softmaxbook.exercises.progress import progress\n\n"
            f"progress([\n    {items}\n], globals(), by_hand=[{hand}])")
        progress_cell.metadata["tags"] = ["exercise-progress"]
        cells.append(progress_cell)
    nb.cells = [note] + cells
    nb.metadata.pop("widgets", None)
    if chapter is not None:
        nb.metadata["softmaxbook"] = {"chapter": chapter}
    return nb


_FENCE = re.compile(r"^\s*(?P<fence>`{3,}|:{3,})")
_EXERCISE_OPEN = re.compile(r"^\s*(?:`{3,}|:{3,})\{exercise(?:-start)?\}")


def split_at_exercises(text: str) -> list[str]:
    """Split one markdown cell's text before each exercise that is not its first thing, so that
    a cell holding several exercises (task, solution, next task, ...) becomes one cell per
    exercise and the answer cell of each can follow its own task, not the last one's.
    Fenced blocks (maths, code, directives) are skipped whole: a split happens only at the top
    level, never inside a fence."""
    lines = text.splitlines()
    parts: list[list[str]] = [[]]
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            parts[-1].append(lines[i])
            i += 1
            continue
        if _EXERCISE_OPEN.match(lines[i]) and any(x.strip() for x in parts[-1]):
            parts.append([])
        try:
            end = _close_index(lines, i, m.group("fence"))
        except ValueError:  # an unclosed fence: leave the rest of the cell as it is
            end = len(lines) - 1
        parts[-1].extend(lines[i:end + 1])
        i = end + 1
    return ["\n".join(p).strip("\n") for p in parts if any(x.strip() for x in p)] or [text]


def _split_exercise_cells(cells) -> list:
    """The notebook's cells with each markdown cell that holds several exercises split into one
    cell per exercise (:func:`split_at_exercises`); the first part keeps the cell's id and
    metadata, the others get fresh ids."""
    out = []
    for cell in cells:
        if cell.cell_type != "markdown" or not isinstance(cell.source, str):
            out.append(cell)
            continue
        parts = split_at_exercises(cell.source)
        if len(parts) == 1:
            out.append(cell)
            continue
        first = copy.deepcopy(cell)
        first.source = parts[0]
        out.append(first)
        for text in parts[1:]:
            extra = nbformat.v4.new_markdown_cell(text)
            extra.metadata = copy.deepcopy(cell.get("metadata", {}))
            out.append(extra)
    return out


def _answer_cells(ex) -> list:
    """The cell(s) where a student answers a derivation or an exploration."""
    if ex.kind == "exploration":
        cell = nbformat.v4.new_code_cell(f"# Exercise {ex.numbered}: your exploration here.\n")
        cell.metadata["tags"] = ["exercise-answer"]
        md = nbformat.v4.new_markdown_cell(f"**Your answer to Exercise {ex.numbered}.** "
                                           "What did you find? (double-click to write)")
        md.metadata["tags"] = ["exercise-answer"]
        return [cell, md]
    md = nbformat.v4.new_markdown_cell(
        f"**Your answer to Exercise {ex.numbered}.** Write your {ex.kind} here (double-click; "
        "Markdown, with LaTeX between `$` signs).")
    md.metadata["tags"] = ["exercise-answer"]
    return [md]


_BLOCK = re.compile(r"^\s*(?P<fence>`{3,}|:{3,})\{(?P<name>(?:exercise|solution)(?:-start|-end)?)\}"
                    r"\s*(?P<arg>\S*)")
_OPT = re.compile(r"^\s*:[\w-]+:.*$")


def _segments(text: str):
    """Split a markdown cell into ("text", None, text) and (directive, argument, body) parts,
    for the exercise and solution directives (options dropped from the body)."""
    lines = text.splitlines()
    plain: list[str] = []
    i = 0
    while i < len(lines):
        m = _BLOCK.match(lines[i])
        if m is None:
            plain.append(lines[i])
            i += 1
            continue
        if plain:
            yield "text", None, "\n".join(plain)
            plain = []
        end = _close_index(lines, i, m.group("fence"))
        body = lines[i + 1:end]
        arg = m.group("arg") or None
        while body and _OPT.match(body[0]):
            if body[0].strip().startswith(":label:"):
                arg = body[0].split(":label:", 1)[1].strip()
            body = body[1:]
        yield m.group("name"), arg, "\n".join(body).strip("\n")
        i = end + 1
    if plain:
        yield "text", None, "\n".join(plain)


def make_answer_key(nb: nbformat.NotebookNode, chapter: str | None = None,
                    chapter_number: int | None = None, context=None) -> nbformat.NotebookNode:
    """The answer key of a chapter: only its exercises, each with its solution.

    The notebook holds the chapter's first code cell (its imports), then per exercise a heading
    ("Exercise 5.4", the number the book shows when ``chapter_number`` is given), the task, the
    solution's text, the reference code and the check cell, so that running it checks every
    reference answer. Outputs are empty.
    """
    from .index import notebook_exercises

    infos = {e.label: e for e in notebook_exercises(nb, chapter or "", chapter_number)}
    parts: dict[str, list] = {}
    order: list[str] = []
    collecting: str | None = None      # exercise-start ... exercise-end: the task
    solving: str | None = None         # solution-start ... solution-end: the solution
    last: str | None = None            # the last exercise whose check cell may follow

    def add(label, kind, text):
        if label not in parts:
            parts[label] = []
            order.append(label)
        if text.strip():
            parts[label].append((kind, text.strip("\n")))

    for cell in nb.cells:
        if cell.cell_type == "code":
            if solving is not None:
                add(solving, "code", cell.source)
            elif last is not None and re.match(r"\s*check\(", cell.source):
                add(last, "check", cell.source)
                last = None
            continue
        if cell.cell_type != "markdown":
            continue
        for name, arg, body in _segments(cell.source):
            if name == "text":
                if collecting is not None:
                    add(collecting, "task", body)
                elif solving is not None:
                    add(solving, "solution", body)
            elif name == "exercise":
                add(arg, "task", body)
                last = None
            elif name == "exercise-start":
                collecting = arg
                add(arg, "task", "")
            elif name == "exercise-end":
                collecting = None
            elif name == "solution":
                add(arg, "solution", body)
            elif name == "solution-start":
                solving = arg
                add(arg, "solution", body)
            elif name == "solution-end":
                last, solving = solving, None
    title = next((ln[2:].strip() for c in nb.cells if c.cell_type == "markdown"
                  for ln in c.source.splitlines() if ln.startswith("# ")), chapter or "")
    cells = [nbformat.v4.new_markdown_cell(
        f"# Answer key: {title}\n\n**For instructors.** Every exercise of the chapter with its "
        "solution. Running the notebook runs each reference answer through its check.")]
    first = next((c for c in nb.cells if c.cell_type == "code"), None)
    if first is not None:
        cells.append(nbformat.v4.new_code_cell(first.source))
    for label in order:
        info = infos.get(label)
        name = f"Exercise {info.numbered}" if info else "Exercise"
        kind = f", {info.kind}" if info else ""
        cells.append(nbformat.v4.new_markdown_cell(f"## {name} (`{label}`{kind})"))
        for kind_, text in parts[label]:
            if kind_ == "task":
                cells.append(nbformat.v4.new_markdown_cell(text))
            elif kind_ == "solution":
                cells.append(nbformat.v4.new_markdown_cell("**Solution.** " + text))
            else:
                cells.append(nbformat.v4.new_code_cell(text))
    if context is not None:
        from .readable import readable_markdown

        for cell in cells:
            if cell.cell_type == "markdown":
                cell.source = readable_markdown(cell.source, context)
        refs = readable_markdown("```{footbibliography}\n```", context)
        if refs.strip():
            cells.append(nbformat.v4.new_markdown_cell("## References\n\n" + refs))
    key = nbformat.v4.new_notebook(cells=cells, metadata=copy.deepcopy(nb.metadata))
    key.metadata.pop("widgets", None)
    if chapter is not None:
        key.metadata["softmaxbook"] = {"chapter": chapter, "answer_key": True}
    return key


def select_chapters(book: Path, chapters: list[str] | None) -> list[Path]:
    """The chapter notebooks of ``book`` named in ``chapters`` (an assignment), in book order.

    A chapter is named by its file stem (``05_euler_lagrange``), file name or path, or its
    number (``5`` or ``05``). None or an empty list selects every notebook.
    """
    book = Path(book)
    every = sorted(book.glob("*.ipynb"))
    if not chapters:
        return every
    chosen: set[Path] = set()
    for name in chapters:
        key = Path(str(name)).name
        key = key[:-len(".ipynb")] if key.endswith(".ipynb") else key
        hits = [p for p in every if p.stem == key]
        if not hits and key.isdigit():
            hits = [p for p in every if p.stem.split("_", 1)[0].isdigit()
                    and int(p.stem.split("_", 1)[0]) == int(key)]
        if len(hits) != 1:
            known = ", ".join(p.stem for p in every) or "none"
            raise ValueError(f"select_chapters: argument 'chapters' names {name!r}, which is not "
                             f"one chapter in {book} (chapters: {known})")
        chosen.add(hits[0])
    return [p for p in every if p in chosen]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder with the chapter notebooks (book/)")
    parser.add_argument("target", type=Path, help="where to write the student notebooks")
    parser.add_argument("chapters", nargs="*",
                        help="only these chapters (stem, file name or number; default: all)")
    parser.add_argument("--answer-key", action="store_true",
                        help="write the answer keys (exercises and solutions only) instead")
    parser.add_argument("--toc", type=Path, default=None,
                        help="folder with _toc.yml, for the chapter numbers (default: the "
                             "parent of source)")
    parser.add_argument("--glue", choices=("auto", "cache", "none"), default="auto",
                        help="where the glued numbers come from: the build's execution cache, "
                             "else one execution of the notebook (auto, the default); the cache "
                             "only; or nowhere (the text then points to the code that computes "
                             "them)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="the build's Jupyter cache (default: .jupyter_cache next to source)")
    parser.add_argument("--myst", action="store_true",
                        help="keep the MyST markdown as the book has it (for jupyterlab-myst)")
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        parser.error(f"argument 'source': {args.source} is not a folder")
    try:
        paths = select_chapters(args.source, args.chapters)
    except ValueError as err:
        parser.error(str(err))
    root = args.toc or args.source.resolve().parent
    numbers = _chapter_numbers(root)
    cache = args.cache or args.source.resolve().parent / ".jupyter_cache"
    args.target.mkdir(parents=True, exist_ok=True)
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        out = args.target / path.name
        number = numbers.get(path.stem)
        context = None
        if not args.myst:
            context = _context(path, nb, number, args.source, cache, args.glue)
        if args.answer_key:
            result = make_answer_key(nb, chapter=path.stem, chapter_number=number,
                                     context=context)
        else:
            result = make_student_notebook(nb, chapter=path.stem, context=context)
        nbformat.write(result, out)
        print(f"wrote {out}")
    return 0


def _context(path: Path, nb, number, book: Path, cache: Path, glue: str):
    """The readable-markdown context of one chapter (see softmaxbook.exercises.readable)."""
    from .index import _title
    from .readable import bibliography, context_for, executed_notebook, glue_values

    values = None
    if glue != "none" and "{glue" in "".join(c.source for c in nb.cells):
        executed, source = executed_notebook(path, cache, execute=(glue == "auto"))
        if executed is not None:
            values = glue_values(executed)
            print(f"{path.name}: glued numbers from the {'build cache' if source == 'cache' else 'execution of the notebook'}")
    bib = book / "references.bib"
    references = bibliography(bib) if bib.is_file() else {}
    titles = {p.stem: _title(nbformat.read(p, as_version=4), p.stem) for p in book.glob("*.ipynb")}
    return context_for(nb, number, glue=values, references=references, titles=titles)


def _chapter_numbers(root: Path) -> dict[str, int | None]:
    """{stem: number} from ``root/_toc.yml`` (empty when there is none)."""
    if not (Path(root) / "_toc.yml").is_file():
        return {}
    from .index import toc_chapters

    return {ch.stem: ch.number for ch in toc_chapters(Path(root))}


if __name__ == "__main__":
    sys.exit(main())
