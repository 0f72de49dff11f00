"""The book's exercises read from the chapter notebooks: number, label, kind, check, chapter.

One parser serves the exercise index page for instructors, the grader
(:mod:`softmaxbook.exercises.grade`) and the student notebooks
(:mod:`softmaxbook.exercises.student`), so none of them keeps a hand-made list.

* An exercise is a ```` ```{exercise} ```` block (derivation or exploration) or a gated
  ```` ```{exercise-start} ```` block (coding) in a markdown cell, with ``:label:``.
* Exercises are numbered in order within their chapter, as sphinx-exercise numbers them
  ("Exercise 5.4" is the fourth exercise of the fifth numbered chapter of ``_toc.yml``).
* Its kind: an author may say it with ``:class: derivation`` / ``exploration`` / ``coding``;
  otherwise a gated exercise is ``coding``, and an ``{exercise}`` is ``exploration`` when its label
  says "explore" or its first sentence runs an experiment ("Run ...", "Rerun ...", "(Exploration.)",
  "... experiment ...", "... slider ..."), else ``derivation``.
* It is auto-checked when a code cell after it calls ``check("<check label>", <answer>)``; the
  answer expression (usually the name of the learner's function) is kept for the grader.

Run ``python -m softmaxbook.exercises.index ROOT OUT.md`` to write the index page (``ROOT`` holds
``_toc.yml``); ``python3 tools/book.py build`` does it before every build.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

__all__ = ["ExerciseInfo", "Chapter", "notebook_exercises", "equation_labels", "toc_chapters",
           "book_exercises", "index_markdown", "main"]

_OPEN = re.compile(r"^\s*(?P<fence>`{3,}|:{3,})\{(?P<name>exercise(?:-start)?)\}\s*(?P<arg>.*)$")
_END = re.compile(r"^\s*(`{3,}|:{3,})\{exercise-end\}")
_MATH = re.compile(r"^\s*(?P<fence>`{3,}|:{3,})\{math\}")
_OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):\s*(?P<value>.*)$")
_EXPLORE = re.compile(r"\(exploration\.?\)|\bexperiment\b|\bslider\b|^\s*(run|rerun|plot|try)\b",
                      re.IGNORECASE)
KINDS = ("coding", "derivation", "exploration")


@dataclass(frozen=True)
class ExerciseInfo:
    """One exercise of a chapter."""

    chapter: str            # notebook stem, e.g. "05_euler_lagrange"
    chapter_number: int | None  # its number in the book (None: not a numbered chapter)
    number: int             # 1-based position within the chapter
    label: str              # the exercise's :label:
    kind: str               # "coding", "derivation" or "exploration"
    task: str               # the task's markdown (options and fences removed)
    check: str | None = None   # label given to check(...), None if not auto-checked
    answer: str | None = None  # the answer expression given to check(...)

    @property
    def numbered(self) -> str:
        """'5.4' in a numbered chapter, else '4' (what the built book shows)."""
        if self.chapter_number is None:
            return str(self.number)
        return f"{self.chapter_number}.{self.number}"

    @property
    def auto_checked(self) -> bool:
        return self.check is not None


def _close(lines: list[str], start: int, fence: str) -> int:
    char, n = fence[0], len(fence)
    pattern = re.compile(rf"^\s*{re.escape(char)}{{{n},}}\s*$")
    for i in range(start + 1, len(lines)):
        if pattern.match(lines[i]):
            return i
    return len(lines) - 1


def _options(lines: list[str]) -> tuple[dict[str, str], int]:
    """Leading ``:key: value`` lines -> (dict, number of lines they take)."""
    opts: dict[str, str] = {}
    n = 0
    for line in lines:
        m = _OPTION.match(line)
        if m is None:
            break
        opts[m.group("key")] = m.group("value").strip()
        n += 1
    return opts, n


def _kind(gated: bool, label: str, opts: dict[str, str], task: str) -> str:
    for cls in opts.get("class", "").split():
        if cls in KINDS:
            return cls
    if gated:
        return "coding"
    first = re.split(r"(?<=[.?!])\s", task.strip(), maxsplit=1)[0] if task.strip() else ""
    if "explor" in label or _EXPLORE.search(first):
        return "exploration"
    return "derivation"


def _check_call(source: str) -> tuple[str, str] | None:
    """(check label, answer expression) of a ``check("label", answer)`` call in a code cell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "check" and len(node.args) >= 2
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            return node.args[0].value, ast.unparse(node.args[1])
    return None


def notebook_exercises(nb: nbformat.NotebookNode, chapter: str,
                       chapter_number: int | None = None) -> list[ExerciseInfo]:
    """Every exercise of one chapter notebook, in order."""
    found: list[dict] = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            call = _check_call(cell.source)
            if call is not None:
                # the check belongs to the latest coding exercise that has none yet
                for ex in reversed(found):
                    if ex["gated"]:
                        if ex["check"] is None:
                            ex["check"], ex["answer"] = call
                        break
            continue
        if cell.cell_type != "markdown":
            continue
        lines = cell.source.splitlines()
        i = 0
        while i < len(lines):
            m = _OPEN.match(lines[i])
            if m is None:
                i += 1
                continue
            gated = m.group("name") == "exercise-start"
            end = _close(lines, i, m.group("fence"))
            opts, n_opts = _options(lines[i + 1:end])
            if gated:
                # the directive closes at once; the task runs to {exercise-end} (or the cell end)
                stop = next((j for j in range(end + 1, len(lines)) if _END.match(lines[j])),
                            len(lines))
                task = "\n".join(lines[end + 1:stop])
                i = stop + 1
            else:
                task = "\n".join(lines[i + 1 + n_opts:end])
                i = end + 1
            label = opts.get("label", "")
            found.append(dict(label=label, gated=gated, opts=opts, task=task.strip(),
                              check=None, answer=None))
    return [ExerciseInfo(chapter=chapter, chapter_number=chapter_number, number=k,
                         label=ex["label"], kind=_kind(ex["gated"], ex["label"], ex["opts"],
                                                       ex["task"]),
                         task=ex["task"], check=ex["check"], answer=ex["answer"])
            for k, ex in enumerate(found, 1)]


def equation_labels(nb: nbformat.NotebookNode) -> list[str]:
    """Labels of the chapter's numbered equations (```` ```{math} ```` blocks with ``:label:``),
    in order: equation k of the list is shown as (chapter.k) in the book."""
    labels = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        lines = cell.source.splitlines()
        for i, line in enumerate(lines):
            m = _MATH.match(line)
            if m is None:
                continue
            end = _close(lines, i, m.group("fence"))
            opts, _ = _options(lines[i + 1:end])
            if "label" in opts:
                labels.append(opts["label"])
    return labels


@dataclass(frozen=True)
class Chapter:
    path: Path
    number: int | None   # its number in the book; None when not in a numbered part of the toc
    title: str

    @property
    def stem(self) -> str:
        return self.path.stem


def _title(nb: nbformat.NotebookNode, default: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return default


def toc_chapters(root: Path) -> list[Chapter]:
    """The chapter notebooks listed in ``root/_toc.yml``, in book order, with their numbers
    (consecutive over the numbered parts, as ``use_multitoc_numbering`` numbers them)."""
    import yaml

    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text())
    chapters, n = [], 0
    for part in toc.get("parts", []):
        numbered = bool(part.get("numbered", False))
        for entry in part.get("chapters", []):
            if numbered:
                n += 1  # a page of any kind takes a number
            path = Path(root) / (entry["file"] + ".ipynb")
            if not path.is_file():
                continue
            nb = nbformat.read(path, as_version=4)
            chapters.append(Chapter(path, n if numbered else None, _title(nb, path.stem)))
    return chapters


def book_exercises(root: Path) -> list[ExerciseInfo]:
    """Every exercise of every chapter in the toc, in book order."""
    out: list[ExerciseInfo] = []
    for ch in toc_chapters(root):
        out += notebook_exercises(nbformat.read(ch.path, as_version=4), ch.stem, ch.number)
    return out


_ATOM = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|\{[\w:-]+\}`[^`]*`|`[^`]*`")


def _plain(markdown: str, limit: int = 120) -> str:
    """The task's first sentence (at most about ``limit`` characters) as one table cell: math,
    code and roles are never cut, citations become their keys, ``|`` is escaped."""
    text = " ".join(markdown.split())
    text = re.sub(r"\{footcite[:\w]*\}`([^`]*)`", r"(\1)", text)
    out, pos, size = [], 0, 0
    for m in list(_ATOM.finditer(text)) + [None]:
        plain = text[pos:m.start()] if m else text[pos:]
        end = re.search(r"[.?!](?=\s|$)", plain)
        if end and size + end.end() >= 30:
            out.append(plain[:end.end()])
            break
        if size + len(plain) > limit:
            out.append(plain[:max(limit - size, 0)].rsplit(" ", 1)[0] + " …")
            break
        out.append(plain)
        size += len(plain)
        if m is None:
            break
        if size + len(m.group()) > limit:
            out.append(" …")
            break
        out.append(m.group())
        size += len(m.group())
        pos = m.end()
    return "".join(out).strip().replace("|", "\\|")


def index_markdown(root: Path) -> str:
    """The exercise index page (MyST markdown): one table per chapter."""
    sections = []
    counts = {k: 0 for k in KINDS}
    checked = 0
    for ch in toc_chapters(root):
        exercises = notebook_exercises(nbformat.read(ch.path, as_version=4), ch.stem, ch.number)
        if not exercises:
            continue
        number = f"{ch.number}. " if ch.number else ""
        n_auto = sum(ex.auto_checked for ex in exercises)
        lines = [f"## {number}{ch.title}", "",
                 f"{{doc}}`The chapter <{ch.stem}>` (`book/{ch.path.name}`): {len(exercises)} "
                 f"exercises, {n_auto} auto-checked.", "",
                 "| Exercise | Kind | Auto-checked | Label and task |", "|---|---|---|---|"]
        for ex in exercises:
            counts[ex.kind] = counts.get(ex.kind, 0) + 1
            checked += ex.auto_checked
            auto = "yes" if ex.auto_checked else "no"
            lines.append(f"| {{ref}}`{ex.numbered} <{ex.label}>` | {ex.kind} | {auto} | "
                         f"`{ex.label}`: {_plain(ex.task)} |")
        sections.append("\n".join(lines))
    total = sum(counts.values())
    head = [
        "# Exercise index",
        "",
        "<!-- Generated by softmaxbook.exercises.index from the chapter notebooks; do not edit. -->",
        "",
        f"The book has {total} exercises: {counts['coding']} coding, "
        f"{counts['derivation']} derivation and {counts['exploration']} exploration exercises. "
        f"The {checked} auto-checked ones have a `check(...)` cell that tells a student whether "
        "the answer is right; `python3 tools/book.py grade` runs the same checks on submitted "
        "notebooks. The others are graded by hand against the solutions in the book. This page "
        "is generated from the chapter notebooks each time the book is built.",
    ]
    return "\n\n".join(["\n".join(head)] + sections) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the book's root folder (with _toc.yml)")
    parser.add_argument("target", type=Path, help="the markdown file to write")
    args = parser.parse_args(argv)
    if not (args.root / "_toc.yml").is_file():
        parser.error(f"argument 'root': {args.root} has no _toc.yml")
    text = index_markdown(args.root)
    if not args.target.exists() or args.target.read_text() != text:
        args.target.write_text(text)  # unchanged content keeps the build cache valid
    print(f"wrote {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
