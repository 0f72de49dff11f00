"""Grade submitted student notebooks: each runs in a sandbox; every verdict is decided outside it.

    python -m softmaxbook.exercises.grade SUBMISSIONS --book book --out _build/grades [-j 2]
    (or: python3 tools/book.py grade SUBMISSIONS)

``SUBMISSIONS`` holds one folder per student with that student's notebooks
(``SUBMISSIONS/ada/05_euler_lagrange.ipynb``), or one notebook per student
(``SUBMISSIONS/ada.ipynb``). A notebook's chapter is read from the metadata the student export
writes, else from its file name, else from the checks it calls.

Two processes, one trusted (see ``book/instructors.md`` for what this protects against):

* the student's notebook runs in a bubblewrap sandbox (:mod:`.sandbox`): its code cells, then,
  for every auto-checked exercise, the book's check with the student's answer wrapped so that
  each call's result is recorded *as data* (:mod:`.sandbox_runner`);
* the grader (this process) loads those results with ``torch.load(weights_only=True)`` and runs
  the same check again on its own inputs with the recorded results (:mod:`.replay`): the
  comparisons and the verdict never run in the student's process. A static scan of the code the
  student wrote (:mod:`.scan`) flags tampering and the use of forbidden functions, which the
  runtime guard inside the sandbox alone cannot promise.

Without bubblewrap the grader refuses to run unless told ``--unsafe`` (then the notebook runs as a
plain process of the grader's user, with a fresh environment and resource limits only).

Outputs in ``--out``: ``results/<student>.json`` (one per student, written atomically as soon as
that student is graded; a rerun reuses those whose submission has not changed), then, assembled
from them, ``gradebook.csv`` (short status codes, points), ``feedback/<student>.md`` (the full
messages) and ``executed/<student>/<notebook>`` (the notebook with the text outputs of the cells
that ran).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import secrets
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .index import ExerciseInfo, notebook_exercises

__all__ = ["Result", "grade_submissions", "main", "GRADER_VERSION", "student_key",
           "csv_cell", "new_salt"]

GRADER_VERSION = "3"  # 3: checks under a secret per-run salt
PASSED = "passed"

#: the short codes of the gradebook
CODES = {"passed": "ok", "failed": "wrong", "missing": "missing", "stub": "stub",
         "timeout": "timeout", "error": "error", "not submitted": "absent", "conflict": "conflict",
         "flagged": "FLAGGED", "forbidden": "forbidden", "tampered": "FLAGGED"}


@dataclass
class Result:
    """The grade of one exercise: ``status`` is "passed", "failed", "missing", "timeout",
    "error", "forbidden", "flagged", "conflict" or "not submitted"; ``message`` the full text."""

    exercise: ExerciseInfo
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def reason(self) -> str:
        """One line: 'passed' or why not (the check's message without its prefix and hint)."""
        if self.passed:
            return PASSED
        text = self.message.split("\nHint:", 1)[0]
        text = re.sub(r"^Exercise [\w-]+ \([^)]*\): ", "", text)
        text = " ".join(text.split())
        prefix = {"timeout": "timed out: ", "error": "error: "}.get(self.status, "")
        return prefix + text

    def code(self) -> str:
        if self.status == "failed" and "NotImplementedError" in self.message:
            return CODES["stub"]
        return CODES.get(self.status, self.status)


# ------------------------------------------------------------------------------------------------
# The book's side
# ------------------------------------------------------------------------------------------------
def _reference(book: Path, toc_root: Path | None) -> dict[str, list[ExerciseInfo]]:
    numbers: dict[str, int | None] = {}
    if toc_root is not None and (toc_root / "_toc.yml").is_file():
        from .index import toc_chapters
        numbers = {ch.stem: ch.number for ch in toc_chapters(toc_root)}
    ref = {}
    for p in sorted(book.glob("*.ipynb")):
        ref[p.stem] = notebook_exercises(nbformat.read(p, as_version=4), p.stem,
                                         numbers.get(p.stem))
    return ref


def _pristine(book: Path, chapter: str) -> list[str]:
    """The code cells of the student notebook the book hands out for ``chapter``."""
    from .student import make_student_notebook

    nb = make_student_notebook(nbformat.read(book / f"{chapter}.ipynb", as_version=4),
                               chapter=chapter)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _is_unedited(path: Path, pristine: list[str]) -> bool:
    """True if every code cell of the notebook at ``path`` is a cell of the handout (or the
    progress cell): a copy the student never worked in. An unreadable notebook is not."""
    from . import scan

    try:
        nb = _read(path)
    except Exception:  # noqa: BLE001
        return False
    code = [(i, c.source) for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and isinstance(c.source, str)]
    return bool(pristine) and not scan.student_cells(code, pristine)


def _chapter_of(path: Path, ref: dict[str, list[ExerciseInfo]]) -> str | None:
    return _chapter_evidence(path, ref)[0]


def _chapter_evidence(path: Path, ref: dict[str, list[ExerciseInfo]]
                      ) -> tuple[str | None, str | None]:
    """(the notebook's chapter, a note for the feedback when its three witnesses disagree).

    The witnesses: the check cells (the labels they check name one chapter), the metadata that
    the student export writes (``softmaxbook.chapter``) and the file name. The check cells win
    (they say what the notebook answers), then the metadata, then the file name; a
    disagreement is reported, never silent (tester finding 14: a notebook whose metadata said
    chapter 2 was graded as chapter 2 although its name and its check cells said chapter 1)."""
    stem = path.stem if path.stem in ref else None
    try:
        nb = _read(path)
    except Exception:  # noqa: BLE001
        return stem, None
    meta = nb.metadata.get("softmaxbook", {}).get("chapter")
    meta = meta if isinstance(meta, str) and meta in ref else None
    text = "\n".join(c.source for c in nb.cells
                     if c.cell_type == "code" and isinstance(c.source, str))
    labels = set(re.findall(r"""check\(\s*["']([\w-]+)["']""", text))
    overlap = {ch: len(labels & {e.check for e in exs if e.check}) for ch, exs in ref.items()}
    best = max(overlap, key=overlap.get, default=None)
    checks = best if best is not None and overlap[best] > 0 else None
    chosen = checks or meta or stem
    said = [(what, ch) for what, ch in (("its check cells", checks), ("its metadata", meta),
                                        ("its file name", stem)) if ch is not None]
    note = None
    if chosen is not None and any(ch != chosen for _, ch in said):
        verb = {"its check cells": "say"}
        note = (f"{path.name}: " + ", ".join(f"{what} {verb.get(what, 'says')} {ch}"
                                              for what, ch in said)
                + f"; graded as chapter {chosen}, the chapter {said[0][0]} "
                f"{verb.get(said[0][0], 'says')}.")
    return chosen, note


_MAX_NOTEBOOK = 50 * 1024 * 1024


def _read(path: Path):
    if path.stat().st_size > _MAX_NOTEBOOK:
        raise ValueError(f"the file is larger than {_MAX_NOTEBOOK // 2**20} MB")
    return nbformat.read(path, as_version=4)


# ------------------------------------------------------------------------------------------------
# Submissions
# ------------------------------------------------------------------------------------------------
def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", name).lstrip(".") or "_"


def student_key(name: str) -> str:
    """A file name for the student ``name``: the name itself when it is one already, else its
    sanitised form plus a hash of the name (two names never share a key)."""
    safe = _safe(name)[:80]
    if safe == name:
        return safe
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def _students(submissions: Path) -> tuple[dict[str, list[Path]], dict[str, list[str]]]:
    """({student: notebooks}, {student: problems}); symbolic links are refused, not followed."""
    out: dict[str, list[Path]] = {}
    problems: dict[str, list[str]] = {}
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith("."):
            continue
        name = entry.name if not entry.name.endswith(".ipynb") or entry.is_dir() else entry.stem
        if entry.is_symlink():
            out.setdefault(name, [])
            problems.setdefault(name, []).append(
                f"{entry.name} is a symbolic link: not graded (hand in the file itself).")
            continue
        if entry.is_dir():
            nbs = []
            for root, dirs, files in os.walk(entry, followlinks=False):
                dirs[:] = sorted(d for d in dirs if d != ".ipynb_checkpoints")
                for f in sorted(files):
                    p = Path(root) / f
                    if not f.endswith(".ipynb"):
                        continue
                    if p.is_symlink():
                        problems.setdefault(name, []).append(
                            f"{p.relative_to(entry)} is a symbolic link: not graded.")
                        continue
                    nbs.append(p)
            for d in [Path(r) / x for r, ds, _ in os.walk(entry) for x in ds]:
                if d.is_symlink():
                    problems.setdefault(name, []).append(
                        f"{d.relative_to(entry)} is a symbolic link: not followed.")
            out.setdefault(name, []).extend(nbs)
        elif entry.suffix == ".ipynb":
            out.setdefault(name, []).append(entry)
    return out, problems


def _fingerprint(paths: list[Path], extra: str, submissions: Path) -> str:
    """What a student's grade depends on: their notebooks and the files of their folder (a
    notebook handed in directly in SUBMISSIONS: that file only), and the grader's settings."""
    h = hashlib.sha256(extra.encode())
    files: set[Path] = set()
    for p in paths:
        files.add(p)
        if p.parent != submissions:
            files.update(q for q in p.parent.rglob("*") if q.is_file() and not q.is_symlink())
    for q in sorted(files):
        h.update(str(q).encode())
        if q.stat().st_size < 100 * 2**20:
            h.update(q.read_bytes())
    return h.hexdigest()


def csv_cell(value) -> str:
    """A CSV cell that a spreadsheet does not read as a formula."""
    text = str(value)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + text
    return text


# ------------------------------------------------------------------------------------------------
# One notebook
# ------------------------------------------------------------------------------------------------
_VERDICT_LOCK = threading.Lock()


@dataclass
class NotebookGrade:
    path: Path | None
    chapter: str | None
    results: list[Result] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    hand_graded: list[ExerciseInfo] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    salt: int | None = None   # the checks' secret inputs salt (result file only)


def new_salt() -> int:
    """A fresh secret salt for one notebook's checks (:func:`softmaxbook.exercises.salted`):
    drawn by the grader from the operating system's randomness, never from anything the student
    controls; never 0 (the public inputs)."""
    return secrets.randbelow(2 ** 62 - 1) + 1


def _first_line(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text or "")
    return (text.strip().splitlines() or [""])[0][:200]


def grade_notebook(path: Path, exercises: list[ExerciseInfo], folder: Path | None, *,
                   pristine: list[str], cell_timeout: float = 120, check_timeout: float = 60,
                   notebook_timeout: float = 900, executed_copy: Path | None = None,
                   unsafe: bool = False, bwrap: str | None = None, limits=None) -> NotebookGrade:
    """Run the notebook ``path`` in a sandbox (``folder``, the student's folder, is copied as
    its working directory) and decide every auto-checked exercise of ``exercises`` here."""
    from . import replay, scan
    from .sandbox import run_notebook

    t0 = time.monotonic()
    grade = NotebookGrade(path, exercises[0].chapter if exercises else None)
    grade.hand_graded = [ex for ex in exercises if not ex.auto_checked]
    checked = [ex for ex in exercises if ex.auto_checked]
    try:
        nb = _read(path)
        code = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"
                and isinstance(c.source, str)]
        # the progress cell only repeats the checks for the student: not run when grading
        code = [(i, src) for i, src in code if "exercise-progress" not in
                nb.cells[i].get("metadata", {}).get("tags", [])]
    except Exception as err:  # noqa: BLE001 - an unreadable file is graded, not fatal
        msg = f"the notebook could not be read ({type(err).__name__}: {_first_line(str(err))})."
        grade.problems.append(msg)
        grade.results = [Result(ex, "error", msg) for ex in checked]
        return grade
    number = {i: k + 1 for k, (i, _) in enumerate(code)}
    # tester finding 11: "code cell 25" named a number no editor shows. The executed copy now
    # numbers its cells In [1], In [2], ... the same way, and a cell inside the exercise section
    # is named by its exercise too.
    where = _cell_places(nb, exercises, number)
    mine = scan.student_cells(code, pristine)
    grade.flags = scan.notebook_flags(mine, where)
    grade.salt = salt = new_salt()  # this notebook's check inputs: secret, drawn per run
    run = run_notebook(code, [{"label": ex.check, "answer": ex.answer} for ex in checked],
                       folder, path.name, cell_timeout=cell_timeout,
                       check_timeout=check_timeout, notebook_timeout=notebook_timeout,
                       unsafe=unsafe, bwrap=bwrap, limits=limits, salt=salt)
    for i, msg in run.problems:
        grade.problems.append(f"code cell {where[i]} {msg}" if i in number else msg)
    for i, _ in code:
        info = run.cells.get(i)
        if info and info.get("error") and isinstance(info["error"], list) and \
                info["error"][0] not in ("ExerciseCheckFailed", "NotImplementedError"):
            name, value = (str(x) for x in info["error"][:2])
            if name == "TimeLimitExceeded":
                grade.problems.append(f"code cell {where[i]} did not finish within "
                                      f"{cell_timeout:g} s and was stopped.")
            else:
                grade.problems.append(f"code cell {where[i]} raised {name}: "
                                      f"{_first_line(value)}")
    grade.cpu_seconds = run.cpu_seconds
    if run.exited is not None:
        grade.problems.append(f"code cell {where[run.exited]} ended the notebook (exit()); "
                              "the cells after it were not run, the checks ran on what the cells "
                              "before had defined.")
    records = {}
    if run.tampered:
        grade.flags.append(f"{run.tampered} (sealed by the grader's runner, then rewritten "
                           "or never sealed: something in the notebook changed it).")
    if run.record is not None and checked and run.record.get("salt_received") is not True:
        grade.flags.append("the checks did not start: the grader's secret for their inputs, "
                           "sent once the cells were done, did not reach them (something in "
                           "the notebook read it first?).")
    if run.record is not None:
        for entry in run.record.get("records", []) if isinstance(run.record.get("records"),
                                                                  list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("label"), str):
                records.setdefault(entry["label"], entry)
    results: dict[str, Result] = {}
    for ex in checked:
        if ex.check in run.skipped_checks:
            status = run.skipped_checks[ex.check]
            results[ex.check] = Result(ex, status, f"the check did not finish within "
                                       f"{check_timeout:g} s." if status == "timeout" else
                                       "the Python process died while the check ran your "
                                       "answer.")
            continue
        if run.record is None:
            results[ex.check] = Result(ex, "error", "the notebook's run produced no results.")
            continue
        with _VERDICT_LOCK:
            v = replay.verdict(ex.check, records.get(ex.check), check_timeout, salt=salt)
        r = Result(ex, v.status, v.message)
        if v.tampered:
            r = Result(ex, "tampered", f"{v.message} ({v.tampered})")
            grade.flags.append(f"Exercise {ex.numbered}: the results sent back by the notebook "
                               f"do not match the check ({v.tampered}).")
        elif v.status == PASSED and (v.forbidden_names or v.package_forbidden):
            used = scan.answer_uses(mine, ex.answer or "", set(v.forbidden_names),
                                    v.package_forbidden)
            if used:
                r = Result(ex, "forbidden", "the code of your answer uses "
                           + ", ".join(used) + ", which this exercise forbids.")
        results[ex.check] = r
    errors = [p for p in grade.problems if p.startswith("code cell ")]
    for ex in checked:
        r = results[ex.check]
        if r.status == "missing" and errors:
            name = re.escape(str(ex.answer))
            mention = [p for p in errors
                       if re.search(rf"\b{name}\b", dict(code).get(_cell_of(p, number), ""))]
            shown = (mention or errors)[:2]
            r.message += " (" + "; ".join(e.rstrip(".") for e in shown) + ")"
        grade.results.append(r)
    if grade.flags:
        grade.results = [r if r.status in ("tampered",) else Result(
            r.exercise, "flagged", "not graded: the notebook was flagged for review ("
            + grade.flags[0] + "); was: " + r.reason()) for r in grade.results]
    grade.seconds = time.monotonic() - t0
    if executed_copy is not None:
        for i, c in enumerate(nb.cells):
            if c.cell_type != "code":
                continue
            info = run.cells.get(i)
            c.outputs = ([nbformat.v4.new_output("stream", name="stdout",
                                                 text=info["output"])]
                         if info and info.get("output") else [])
            # In [n] = the n of "code cell n" in the feedback (None: not run when grading)
            c.execution_count = number.get(i)
        executed_copy.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(executed_copy, nbformat.writes(nb))
    return grade


_EXERCISE_LABEL = re.compile(r"^\s*(?:`{3,}|:{3,})\{exercise(?:-start)?\}[^\n]*\n"
                             r"(?:\s*:[\w-]+:[^\n]*\n)*?\s*:label:\s*(\S+)", re.M)


def _cell_places(nb, exercises: list[ExerciseInfo], number: dict[int, int]) -> dict[int, str]:
    """How feedback names each graded code cell: its number (the executed copy's In [n]) and,
    inside the exercise section, the exercise it follows: ``"25 (In [25], Exercise 1.1)"``."""
    numbered = {ex.label: ex.numbered for ex in exercises}
    current = None
    places = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and isinstance(cell.source, str):
            for label in _EXERCISE_LABEL.findall(cell.source):
                if label in numbered:
                    current = numbered[label]
        if i in number:
            places[i] = (f"{number[i]} (In [{number[i]}]"
                         + (f", Exercise {current})" if current else ")"))
    return places


def _cell_of(problem: str, number: dict[int, int]) -> int | None:
    m = re.match(r"code cell (\d+) ", problem)
    if not m:
        return None
    k = int(m.group(1))
    return next((i for i, n in number.items() if n == k), None)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------
# One student, all students
# ------------------------------------------------------------------------------------------------
def _result_json(student: str, grades: list[NotebookGrade], problems: list[str],
                 fingerprint: str) -> dict:
    return {
        "version": GRADER_VERSION, "student": student, "fingerprint": fingerprint,
        "problems": problems,
        "notebooks": [{
            "name": g.path.name if g.path else "?", "chapter": g.chapter,
            "seconds": round(g.seconds, 1), "cpu_seconds": round(g.cpu_seconds, 1),
            "salt": g.salt,
            "problems": g.problems, "flags": g.flags,
            "hand_graded": [ex.check or ex.label for ex in g.hand_graded],
            "results": [{"label": r.exercise.label, "check": r.exercise.check,
                         "status": r.status, "message": r.message} for r in g.results],
        } for g in grades],
    }


def _grade_student(student, paths, extra_problems, ref, pristine, submissions, opts, out, log):
    by_chapter: dict[str, list[Path]] = {}
    grades: list[NotebookGrade] = []
    problems = list(extra_problems)
    for path in paths:
        chapter, note = _chapter_evidence(path, ref)
        if note:
            problems.append(note)
        if chapter is None:
            problems.append(f"{path.name}: no chapter of the book matches this notebook "
                            "(by metadata, file name or check cells); not graded.")
            continue
        by_chapter.setdefault(chapter, []).append(path)
    for chapter, cpaths in by_chapter.items():
        if opts["chapters"] and chapter not in opts["chapters"]:
            problems.append(f"{', '.join(p.name for p in cpaths)}: chapter {chapter} is not "
                            "part of this assignment; not graded.")
            continue
        if len(cpaths) > 1:
            # `book.py student` writes "NN_x (new).ipynb" beside a notebook the student has
            # edited; a student who hands in the folder as it is hands in both. An unedited
            # copy of the handout (every code cell the book's) is nobody's work: set it aside.
            edited = [p for p in cpaths if not _is_unedited(p, pristine[chapter])]
            if len(edited) <= 1:
                keep = edited[0] if edited else min(cpaths, key=lambda p: (len(p.name), p.name))
                aside = ", ".join(str(p.relative_to(submissions)) for p in cpaths if p != keep)
                problems.append(f"{aside}: an unedited copy of the handout for chapter {chapter}"
                                f"; set aside, {keep.relative_to(submissions)} graded.")
                cpaths = [keep]
        if len(cpaths) > 1:
            g = NotebookGrade(None, chapter)
            names = ", ".join(str(p.relative_to(submissions)) for p in cpaths)
            msg = (f"more than one notebook for chapter {chapter} ({names}): none was graded. "
                   "Hand in exactly one notebook per chapter.")
            g.problems.append(msg)
            g.results = [Result(ex, "conflict", msg) for ex in ref[chapter] if ex.auto_checked]
            g.hand_graded = [ex for ex in ref[chapter] if not ex.auto_checked]
            grades.append(g)
            continue
        path = cpaths[0]
        folder = path.parent if path.parent != submissions else None
        g = grade_notebook(path, ref[chapter], folder, pristine=pristine[chapter],
                           cell_timeout=opts["cell_timeout"],
                           check_timeout=opts["check_timeout"],
                           notebook_timeout=opts["notebook_timeout"],
                           executed_copy=out / "executed" / student_key(student) / path.name,
                           unsafe=opts["unsafe"], bwrap=opts["bwrap"], limits=opts["limits"])
        grades.append(g)
        n_ok = sum(r.passed for r in g.results)
        log(f"{student}: {path.name} ({chapter}): {n_ok}/{len(g.results)} checks passed "
            f"in {g.seconds:.0f} s" + (" [FLAGGED]" if g.flags else ""))
    return grades, problems


def _load_result(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == GRADER_VERSION else None


def grade_submissions(submissions: Path, book: Path, out: Path, *, toc_root: Path | None = None,
                      cell_timeout: float = 120, check_timeout: float = 60,
                      notebook_timeout: float = 900, log=print, jobs: int = 1,
                      unsafe: bool = False, chapters: list[str] | None = None,
                      points: dict[str, float] | None = None, resume: bool = True,
                      limits=None) -> dict[str, dict]:
    """Grade every student in ``submissions`` against the chapters in ``book``; write one
    result file per student as soon as it is graded, then the gradebook, feedback files and
    executed notebooks, to ``out``. Returns {student: result} (the result files' content)."""
    from .sandbox import bwrap_path

    submissions, book, out = Path(submissions), Path(book), Path(out)
    if not submissions.is_dir():
        raise ValueError(f"grade_submissions: argument 'submissions' must be a folder, got "
                         f"{submissions}")
    if not book.is_dir():
        raise ValueError(f"grade_submissions: argument 'book' must be a folder, got {book}")
    ref = _reference(book, toc_root)
    if chapters:
        unknown = [c for c in chapters if c not in ref]
        if unknown:
            raise ValueError(f"grade_submissions: argument 'chapters': {', '.join(unknown)} "
                             f"not in {book} (chapters: {', '.join(ref)})")
    bwrap = None if unsafe else bwrap_path()
    if not unsafe and bwrap is None:
        raise RuntimeError(
            "bubblewrap (bwrap) is missing or cannot create a sandbox on this machine: the "
            "grader refuses to run students' code without it. Install it (Debian/Ubuntu: "
            "apt-get install bubblewrap) or, knowing that the notebooks then run with your "
            "permissions, pass --unsafe.")
    students, link_problems = _students(submissions)
    pristine = {ch: (_pristine(book, ch) if any(ex.auto_checked for ex in ref[ch]) else [])
                for ch in ref}
    opts = dict(cell_timeout=cell_timeout, check_timeout=check_timeout,
                notebook_timeout=notebook_timeout, unsafe=unsafe, bwrap=bwrap,
                chapters=list(chapters or []), limits=limits)
    (out / "results").mkdir(parents=True, exist_ok=True)
    settings = json.dumps([GRADER_VERSION, cell_timeout, check_timeout, notebook_timeout,
                           unsafe])
    # tester finding 15: a student's result depends on the chapters of THEIR notebooks (the
    # content of those chapters' book notebooks, and whether --chapters includes them), not on
    # every chapter file's mtime or the whole --chapters list: adding --chapters to a finished
    # run, or a `git pull` that touches another chapter, no longer regrades the class.
    book_hash = {ch: hashlib.sha256((book / f"{ch}.ipynb").read_bytes()).hexdigest()
                 if (book / f"{ch}.ipynb").is_file() else "" for ch in ref}
    results: dict[str, dict] = {}
    todo = []
    for student, paths in students.items():
        mine = sorted({c for c in (_chapter_of(p, ref) for p in paths) if c is not None})
        depends = json.dumps([(c, book_hash[c], not chapters or c in chapters) for c in mine])
        fp = _fingerprint(paths, settings + depends + "\n".join(link_problems.get(student, [])),
                          submissions)
        target = out / "results" / f"{student_key(student)}.json"
        old = _load_result(target) if resume else None
        if old is not None and old.get("fingerprint") == fp and old.get("student") == student:
            results[student] = old
            log(f"{student}: unchanged since the last run, result kept")
            continue
        todo.append((student, paths, fp, target))

    if todo:
        from .sandbox import probe

        why = probe(unsafe=unsafe, bwrap=bwrap, limits=limits,
                    timeout=max(cell_timeout, 120))
        if why is not None:
            raise RuntimeError(
                "the sandbox cannot run Python here, so no student was graded (grading on "
                f"would give every notebook an error): {why} Check that the grader's Python "
                f"environment ({sys.prefix}) and bubblewrap work, then run the grader again.")

    def work(item):
        student, paths, fp, target = item
        grades, problems = _grade_student(student, paths, link_problems.get(student, []), ref,
                                          pristine, submissions, opts, out, log)
        data = _result_json(student, grades, problems, fp)
        _atomic_write(target, json.dumps(data, indent=1))
        return student, data

    if jobs <= 1:
        for item in todo:
            student, data = work(item)
            results[student] = data
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for student, data in pool.map(work, todo):
                results[student] = data
    results = {s: results[s] for s in students if s in results}
    if not chapters:
        shown = _column_chapters(results, ref, None)
        log(f"gradebook columns: chapter{'s' if len(shown) != 1 else ''} "
            f"{', '.join(shown) or '(none)'}, the chapters submitted; --chapters fixes the "
            "columns and totals of an assignment")
    write_gradebook(results, ref, out, chapters=chapters, points=points)
    return results


def _column_chapters(results: dict[str, dict], ref, chapters: list[str] | None) -> list[str]:
    if chapters:
        return list(chapters)
    return sorted({nb["chapter"] for r in results.values() for nb in r["notebooks"]
                   if nb.get("chapter") in ref})


# ------------------------------------------------------------------------------------------------
# The gradebook, from the result files
# ------------------------------------------------------------------------------------------------
def write_gradebook(results: dict[str, dict], ref: dict[str, list[ExerciseInfo]], out: Path, *,
                    chapters: list[str] | None = None,
                    points: dict[str, float] | None = None) -> None:
    """``gradebook.csv`` and ``feedback/<student>.md`` from the per-student results."""
    out.mkdir(parents=True, exist_ok=True)
    points = points or {}
    cols_ch = _column_chapters(results, ref, chapters)
    columns = [ex for ch in cols_ch for ex in ref[ch]]
    auto = [ex for ex in columns if ex.auto_checked]

    def pts(ex):
        return float(points.get(ex.check or ex.label, points.get(ex.label, 1.0)))

    header = ["student"] + [f"{ex.numbered} {ex.label}" + ("" if ex.auto_checked else
                                                           " (by hand)") for ex in columns]
    header += ["points", "max points", "passed", "checked", "flagged", "problems"]
    rows = []
    for student, data in results.items():
        by = {}
        for nb in data["notebooks"]:
            for r in nb["results"]:
                by[r["check"]] = r
        row, score, n_ok = [student], 0.0, 0
        for ex in columns:
            if not ex.auto_checked:
                row.append("")
                continue
            r = by.get(ex.check)
            if r is None:
                row.append(CODES["not submitted"])
                continue
            res = Result(ex, r["status"], r["message"])
            row.append(res.code())
            if res.passed:
                score += pts(ex)
                n_ok += 1
        flagged = sum(len(nb["flags"]) for nb in data["notebooks"])
        problems = len(data["problems"]) + sum(len(nb["problems"]) for nb in data["notebooks"])
        row += [f"{score:g}", f"{sum(pts(ex) for ex in auto):g}", n_ok, len(auto),
                "yes" if flagged else "", problems]
        rows.append(row)
    tmp = out / ".gradebook.csv.tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([csv_cell(h) for h in header])
        for row in rows:
            w.writerow([csv_cell(v) for v in row])
    os.replace(tmp, out / "gradebook.csv")
    fb = out / "feedback"
    fb.mkdir(exist_ok=True)
    for student, data in results.items():
        _atomic_write(fb / f"{student_key(student)}.md", _feedback(student, data, ref, cols_ch))


def _fence(text: str) -> str:
    """A code fence that ``text`` cannot close: longer than any run of backticks in it (a
    student's exception message may hold a fence of its own)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _feedback(student: str, data: dict, ref, chapters: list[str]) -> str:
    exs = {ex.check: ex for ch in ref.values() for ex in ch if ex.check}
    lines = [f"# Feedback for {student}", ""]
    if data["problems"]:
        lines += [f"- {p}" for p in data["problems"]] + [""]
    submitted = set()
    for nb in data["notebooks"]:
        submitted.add(nb["chapter"])
        n_ok = sum(r["status"] == PASSED for r in nb["results"])
        lines += [f"## {nb['name']} (chapter {nb['chapter']})", "",
                  f"Checked automatically: {n_ok} of {len(nb['results'])} passed.", ""]
        if nb["flags"]:
            lines += ["**Flagged for review** (no points until an instructor has looked):", ""]
            lines += [f"- {f}" for f in nb["flags"]] + [""]
        for r in nb["results"]:
            ex = exs.get(r["check"])
            num = ex.numbered if ex else "?"
            if r["status"] == PASSED:
                lines.append(f"- Exercise {num} (`{r['label']}`): passed.")
            else:
                fence = _fence(r["message"])
                lines += [f"- Exercise {num} (`{r['label']}`): not yet right.", "",
                          f"  {fence}text"]
                lines += [f"  {ln}" for ln in r["message"].splitlines()] + [f"  {fence}"]
        if nb["hand_graded"]:
            hg = [ex for ch in ref.values() for ex in ch if (ex.check or ex.label) in
                  nb["hand_graded"]]
            lines += ["", "Graded by hand: " + ", ".join(
                f"Exercise {ex.numbered} (`{ex.label}`, {ex.kind})" for ex in hg) + "."]
        if nb["problems"]:
            lines += ["", "Problems while running your notebook:", ""]
            lines += [f"- {p}" for p in nb["problems"]]
        lines.append("")
    for ch in chapters:
        if ch not in submitted:
            lines += [f"## {ch}", "", "Not submitted.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="one folder (or notebook) per student")
    parser.add_argument("--book", type=Path, default=Path("book"),
                        help="the folder of the full chapter notebooks (default: book)")
    parser.add_argument("--toc", type=Path, default=None,
                        help="the folder with _toc.yml, for exercise numbers (default: the "
                             "parent of --book)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the gradebook (default: SUBMISSIONS-graded)")
    parser.add_argument("--chapters", nargs="+", default=None,
                        help="the assignment's chapters (notebook stems): they fix the "
                             "gradebook's columns and totals, whatever was submitted")
    parser.add_argument("--points", nargs="*", default=[], metavar="LABEL=N",
                        help="points of an exercise (check label or exercise label; default 1)")
    parser.add_argument("-j", "--jobs", type=int, default=1,
                        help="students graded at the same time (default 1)")
    parser.add_argument("--fresh", action="store_true",
                        help="grade everyone again (default: keep the results of students "
                             "whose submission has not changed)")
    parser.add_argument("--unsafe", action="store_true",
                        help="grade without the sandbox when bubblewrap is missing: the "
                             "notebooks run with your permissions")
    parser.add_argument("--memory-mb", type=int, default=4096,
                        help="memory (address space) of each sandboxed process (default 4096)")
    parser.add_argument("--cell-timeout", type=float, default=120,
                        help="seconds one cell of a notebook may run (default 120)")
    parser.add_argument("--check-timeout", type=float, default=60,
                        help="seconds one check may run (default 60)")
    parser.add_argument("--notebook-timeout", type=float, default=900,
                        help="seconds after which no further cell of a notebook is started "
                             "(default 900)")
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"argument 'submissions': {args.submissions} is not a folder")
    if not args.book.is_dir():
        parser.error(f"argument '--book': {args.book} is not a folder")
    for name in ("cell_timeout", "check_timeout", "notebook_timeout"):
        if getattr(args, name) <= 0:
            parser.error(f"argument '--{name.replace('_', '-')}' must be > 0")
    if args.jobs < 1:
        parser.error("argument '-j/--jobs' must be >= 1")
    points = {}
    for item in args.points:
        label, _, value = item.partition("=")
        try:
            points[label] = float(value)
        except ValueError:
            parser.error(f"argument '--points': {item!r} is not LABEL=NUMBER")
    from .sandbox import Limits

    out = args.out or args.submissions.with_name(args.submissions.name + "-graded")
    toc = args.toc or args.book.resolve().parent
    if args.unsafe:
        print("WARNING: --unsafe: the students' notebooks run WITHOUT a sandbox, with your "
              "permissions (files, network, environment). Grade only code you trust.",
              file=sys.stderr)
    try:
        grade_submissions(args.submissions, args.book, out, toc_root=toc,
                          cell_timeout=args.cell_timeout, check_timeout=args.check_timeout,
                          notebook_timeout=args.notebook_timeout, jobs=args.jobs,
                          unsafe=args.unsafe, chapters=args.chapters, points=points,
                          resume=not args.fresh, limits=Limits(memory_mb=args.memory_mb))
    except (RuntimeError, ValueError) as err:
        print(f"grade: {err}", file=sys.stderr)
        return 2
    print(f"gradebook: {out / 'gradebook.csv'}; feedback: {out / 'feedback'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
