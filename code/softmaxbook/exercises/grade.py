"""Grade submitted student notebooks: run each in a fresh kernel, run the book's checks on it,
write a gradebook and a feedback file per student.

    python -m softmaxbook.exercises.grade SUBMISSIONS --book book --out _build/grades
    (or: python3 tools/book.py grade SUBMISSIONS)

``SUBMISSIONS`` holds one folder per student with that student's notebooks
(``SUBMISSIONS/ada/05_euler_lagrange.ipynb``), or one notebook per student
(``SUBMISSIONS/ada.ipynb``). A notebook's chapter is read from the metadata the student export
writes, else from its file name, else from the checks it calls.

For every submitted notebook:

* the student's folder is copied to a temporary working directory and the notebook runs there, in
  a fresh kernel, cell by cell, errors allowed: a notebook that deletes or writes files only
  touches the copy;
* a cell that runs longer than ``cell_timeout`` seconds, or kills its kernel, is recorded and
  skipped: the kernel is started again and the other cells are run again without it (so a loop in
  one cell costs the student that cell, not the whole notebook); the whole run stops executing
  cells after ``notebook_timeout`` seconds;
* then, in that kernel, the grader calls the book's ``check(label, answer)`` for every
  auto-checked exercise of the chapter, with the check label and the answer's name taken from the
  book's own notebook (not from the submission, whose check cells may be edited or deleted), each
  under a time limit;
* forbidden shortcuts are reported by the checks themselves (``call(..., forbid=...)``): the
  exercise fails with the check's message.

Outputs in ``--out``: ``gradebook.csv`` (one row per student, one column per auto-checked
exercise: ``passed`` or the reason, then the number passed and checked), ``feedback/<student>.md``
(the full messages, the exercises graded by hand, the problems met while running the notebook)
and ``executed/<student>/<notebook>`` (the notebook with its outputs).

The grader guards against accidents (loops, crashes, files deleted in the working directory),
not against deliberate cheating: the submission's code runs with the grader's permissions.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import ExerciseCheckFailed
from . import check as _check  # bound when the kernel's set-up cell imports this module
from .index import ExerciseInfo, notebook_exercises

__all__ = ["Result", "TimeLimitExceeded", "grade_notebook", "grade_submissions", "main"]

_MARK = "@@softmaxbook-grade@@"
PASSED = "passed"


# ------------------------------------------------------------------------------------------------
# In the kernel
# ------------------------------------------------------------------------------------------------
class TimeLimitExceeded(BaseException):  # not swallowed by `except Exception` in a learner's code
    """Raised inside the kernel when a cell or a check runs past the grader's time limit."""


def _on_alarm(signum, frame):
    raise TimeLimitExceeded("the grader's time limit")


def _arm(seconds: float) -> None:
    """Interrupt the next cell after ``seconds`` (a Python-level loop stops there; the grader's
    own timeout, a little longer, restarts the kernel if the cell ignores this)."""
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)


def _run_check(label: str, get_answer, timeout: float) -> None:
    """Run ``check(label, get_answer())`` in the kernel and print the outcome as one marked JSON
    line (the grader reads the last such line of the cell's output)."""
    out: dict = {"label": label}
    try:
        answer = get_answer()
    except NameError as err:
        out.update(status="missing", message=f"no answer: {err}.")
        print(_MARK + json.dumps(out))
        return
    except BaseException as err:  # noqa: BLE001 - report anything
        out.update(status="error", message=f"evaluating the answer raised {type(err).__name__}: "
                                           f"{err}")
        print(_MARK + json.dumps(out))
        return
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        _check(label, answer)
        out.update(status=PASSED, message="passed")
    except TimeLimitExceeded:
        out.update(status="timeout", message=f"the check did not finish within {timeout:g} s "
                                             "(an endless loop?).")
    except ExerciseCheckFailed as err:
        message = str(err.args[0]) if err.args else str(err)
        out.update(status="failed", message=message)
    except BaseException as err:  # noqa: BLE001 - a crash of the check is a failed check
        out.update(status="error", message=f"the check raised {type(err).__name__}: {err}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    print(_MARK + json.dumps(out))


# ------------------------------------------------------------------------------------------------
# The grader
# ------------------------------------------------------------------------------------------------
@dataclass
class Result:
    """The grade of one exercise: ``status`` is "passed", "failed", "missing", "timeout",
    "error" or "not submitted"; ``message`` the full text for the feedback."""

    exercise: ExerciseInfo
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def reason(self) -> str:
        """One line for the gradebook: 'passed' or why not (the check's message without its
        exercise prefix and hint)."""
        if self.passed:
            return PASSED
        text = self.message.split("\nHint:", 1)[0]
        text = re.sub(r"^Exercise [\w-]+ \([^)]*\): ", "", text)
        text = " ".join(text.split())
        prefix = {"failed": "", "missing": "", "timeout": "timed out: ", "error": "error: ",
                  "not submitted": ""}.get(self.status, "")
        return prefix + text


@dataclass
class NotebookGrade:
    path: Path | None
    chapter: str | None
    results: list[Result] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    hand_graded: list[ExerciseInfo] = field(default_factory=list)
    seconds: float = 0.0


def _grade_cell(ex: ExerciseInfo, timeout: float) -> nbformat.NotebookNode:
    code = (f"__softmaxbook_grade._run_check({ex.check!r}, lambda: ({ex.answer}), "
            f"{float(timeout)!r})")
    return nbformat.v4.new_code_cell(code)


_SETUP = "import softmaxbook.exercises.grade as __softmaxbook_grade"
#: Seconds the grader waits beyond a time limit before it restarts a kernel that ignored the
#: in-kernel interruption (a cell that catches BaseException in a loop, a long C call).
_MARGIN = 20


def _first_line(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text or "")
    return (text.strip().splitlines() or [""])[0][:200]


def grade_notebook(path: Path, exercises: list[ExerciseInfo], workdir: Path, *,
                   cell_timeout: float = 120, check_timeout: float = 60,
                   notebook_timeout: float = 900, kernel_name: str = "python3",
                   executed_copy: Path | None = None) -> NotebookGrade:
    """Run the notebook ``path`` in ``workdir`` and check every auto-checked exercise of
    ``exercises`` (see the module docstring). Never raises for anything the notebook does."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    t0 = time.monotonic()
    grade = NotebookGrade(path, exercises[0].chapter if exercises else None)
    grade.hand_graded = [ex for ex in exercises if not ex.auto_checked]
    checked = [ex for ex in exercises if ex.auto_checked]
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 - an unreadable file is graded, not fatal
        msg = f"the notebook could not be read ({type(err).__name__}: {_first_line(str(err))})."
        grade.problems.append(msg)
        grade.results = [Result(ex, "error", msg) for ex in checked]
        return grade
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    skip: set[int] = set()
    results: dict[str, Result] = {}
    deadline = t0 + notebook_timeout
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    stopped_for_time = False

    def number(i: int) -> int:  # the cell's 1-based position among code cells
        return code_cells.index(i) + 1

    while True:
        restart = False
        client = NotebookClient(nb, timeout=cell_timeout, kernel_name=kernel_name,
                                allow_errors=True, interrupt_on_timeout=False,
                                shutdown_kernel="immediate",
                                resources={"metadata": {"path": str(workdir)}})
        try:
            with client.setup_kernel(env=env, cwd=str(workdir)):
                # importing torch in a fresh kernel may take a while on a busy machine
                client.timeout = max(cell_timeout, 300)
                client.execute_cell(nbformat.v4.new_code_cell(_SETUP), 0)
                client.timeout = cell_timeout
                for i in code_cells:
                    if i in skip:
                        nb.cells[i].outputs = []
                        continue
                    if stopped_for_time or time.monotonic() > deadline:
                        if not stopped_for_time:
                            grade.problems.append(
                                f"the notebook ran past its time limit of {notebook_timeout:g} s: "
                                f"code cell {number(i)} and later ones were not run.")
                        stopped_for_time = True
                        skip.add(i)
                        continue
                    try:
                        client.execute_cell(nbformat.v4.new_code_cell(
                            f"__softmaxbook_grade._arm({float(cell_timeout)!r})"), 0)
                        client.timeout = cell_timeout + _MARGIN
                        client.execute_cell(nb.cells[i], i)
                        client.timeout = cell_timeout
                        client.execute_cell(nbformat.v4.new_code_cell(
                            "__softmaxbook_grade._disarm()"), 0)
                        if any(o.get("ename") == "TimeLimitExceeded"
                               for o in nb.cells[i].get("outputs", [])):
                            grade.problems.append(f"code cell {number(i)} did not finish within "
                                                  f"{cell_timeout:g} s and was stopped.")
                    except CellTimeoutError:
                        skip.add(i)
                        grade.problems.append(f"code cell {number(i)} did not finish within "
                                              f"{cell_timeout + _MARGIN:g} s, ignored the "
                                              "interruption and was skipped.")
                        restart = True
                        break
                    except DeadKernelError:
                        skip.add(i)
                        grade.problems.append(f"code cell {number(i)} stopped the Python kernel "
                                              "and was skipped.")
                        restart = True
                        break
                if restart:
                    continue
                for ex in checked:
                    if ex.check in results:
                        continue
                    cell = _grade_cell(ex, check_timeout)
                    client.timeout = check_timeout + _MARGIN  # the in-kernel alarm comes first
                    try:
                        client.execute_cell(cell, 0)
                    except CellTimeoutError:
                        results[ex.check] = Result(ex, "timeout", f"the check did not finish "
                                                   f"within {check_timeout:g} s.")
                        restart = any(e.check not in results for e in checked)
                        break
                    except DeadKernelError:
                        results[ex.check] = Result(ex, "error", "the Python kernel died while "
                                                   "the check ran your answer.")
                        restart = any(e.check not in results for e in checked)
                        break
                    finally:
                        client.timeout = cell_timeout
                    results[ex.check] = _parse(ex, cell)
        except Exception as err:  # noqa: BLE001 - the kernel could not start, and the like
            grade.problems.append(f"the grader could not run the notebook: "
                                  f"{type(err).__name__}: {_first_line(str(err))}")
            for ex in checked:
                results.setdefault(ex.check, Result(ex, "error", "the notebook could not be "
                                                    "run."))
            break
        if not restart:
            break
    for i in code_cells:
        for out in nb.cells[i].get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") not in (
                    "ExerciseCheckFailed", "NotImplementedError", "TimeLimitExceeded"):
                grade.problems.append(f"code cell {number(i)} raised {out.get('ename')}: "
                                      f"{_first_line(out.get('evalue', ''))}")
    cell_problems = [(i, p) for p in grade.problems for i in code_cells
                     if p.startswith(f"code cell {number(i)} ")]
    errors = [(n, p) for n, p in cell_problems if " raised " in p or "did not finish" in p
              or "skipped" in p]
    for ex in checked:
        r = results.get(ex.check) or Result(ex, "error", "the check was not run.")
        if r.status == "missing" and errors:
            # the problems of the cells that mention the answer first, then the others
            name = re.escape(str(ex.answer))
            mention = [p for n, p in errors if re.search(rf"\b{name}\b", nb.cells[n].source)]
            shown = (mention + [p for _, p in errors if p not in mention])[:2]
            r.message += " (" + "; ".join(e.rstrip(".") for e in shown) + ")"
        grade.results.append(r)
    grade.seconds = time.monotonic() - t0
    if executed_copy is not None:
        executed_copy.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, executed_copy)
    return grade


def _parse(ex: ExerciseInfo, cell) -> Result:
    text = "".join(o.get("text", "") for o in cell.outputs
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")
    lines = [ln for ln in text.splitlines() if ln.startswith(_MARK)]
    if not lines:
        err = next((o for o in cell.outputs if o.get("output_type") == "error"), None)
        why = (f"{err.get('ename')}: {_first_line(err.get('evalue', ''))}" if err
               else "no result")
        return Result(ex, "error", f"the check could not be run ({why}).")
    data = json.loads(lines[-1][len(_MARK):])
    return Result(ex, data["status"], data["message"])


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


def _chapter_of(path: Path, ref: dict[str, list[ExerciseInfo]]) -> str | None:
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001
        return path.stem if path.stem in ref else None
    meta = nb.metadata.get("softmaxbook", {}).get("chapter")
    if meta in ref:
        return meta
    if path.stem in ref:
        return path.stem
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    labels = set(re.findall(r"""check\(\s*["']([\w-]+)["']""", text))
    best = max(ref, key=lambda s: len(labels & {e.check for e in ref[s] if e.check}),
               default=None)
    if best and labels & {e.check for e in ref[best] if e.check}:
        return best
    return None


def _students(submissions: Path) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            nbs = sorted(p for p in entry.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
            out[entry.name] = nbs
        elif entry.suffix == ".ipynb":
            out.setdefault(entry.stem, []).append(entry)
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", name) or "_"


def grade_submissions(submissions: Path, book: Path, out: Path, *, toc_root: Path | None = None,
                      cell_timeout: float = 120, check_timeout: float = 60,
                      notebook_timeout: float = 900, log=print) -> dict[str, list[NotebookGrade]]:
    """Grade every student in ``submissions`` against the chapters in ``book``; write the
    gradebook, feedback files and executed notebooks to ``out``. Returns the grades."""
    submissions, book, out = Path(submissions), Path(book), Path(out)
    if not submissions.is_dir():
        raise ValueError(f"grade_submissions: argument 'submissions' must be a folder, got "
                         f"{submissions}")
    if not book.is_dir():
        raise ValueError(f"grade_submissions: argument 'book' must be a folder, got {book}")
    ref = _reference(book, toc_root)
    students = _students(submissions)
    grades: dict[str, list[NotebookGrade]] = {}
    for student, paths in students.items():
        grades[student] = []
        for path in paths:
            chapter = _chapter_of(path, ref)
            if chapter is None:
                g = NotebookGrade(path, None)
                g.problems.append(f"{path.name}: no chapter of the book matches this notebook "
                                  "(by metadata, file name or check cells); not graded.")
                grades[student].append(g)
                log(f"{student}: {path.name}: unknown chapter")
                continue
            with tempfile.TemporaryDirectory(prefix="softmaxbook-grade-") as tmp:
                base = path.parent if path.parent != submissions else None
                work = Path(tmp) / "work"
                if base is not None:
                    shutil.copytree(base, work, symlinks=True)
                    local = work / path.relative_to(base)
                else:
                    work.mkdir()
                    local = work / path.name
                    shutil.copy2(path, local)
                g = grade_notebook(local, ref[chapter], local.parent, cell_timeout=cell_timeout,
                                   check_timeout=check_timeout, notebook_timeout=notebook_timeout,
                                   executed_copy=out / "executed" / _safe(student) / path.name)
            g.path = path
            grades[student].append(g)
            n_ok = sum(r.passed for r in g.results)
            log(f"{student}: {path.name} ({chapter}): {n_ok}/{len(g.results)} checks passed "
                f"in {g.seconds:.0f} s")
    _write(grades, ref, out)
    return grades


def _write(grades: dict[str, list[NotebookGrade]], ref: dict[str, list[ExerciseInfo]],
           out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    chapters = sorted({g.chapter for gs in grades.values() for g in gs if g.chapter})
    columns = [ex for ch in chapters for ex in ref[ch] if ex.auto_checked]
    with open(out / "gradebook.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["student"] + [f"{ex.numbered} {ex.label}" for ex in columns]
                   + ["passed", "checked", "problems"])
        for student, gs in grades.items():
            by = {r.exercise.check: r for g in gs for r in g.results}
            row, n_ok = [student], 0
            for ex in columns:
                r = by.get(ex.check)
                row.append(r.reason() if r else "not submitted")
                n_ok += bool(r and r.passed)
            problems = sum(len(g.problems) for g in gs)
            w.writerow(row + [n_ok, len(columns), problems])
    fb = out / "feedback"
    fb.mkdir(exist_ok=True)
    for student, gs in grades.items():
        lines = [f"# Feedback for {student}", ""]
        submitted = {g.chapter for g in gs}
        for g in gs:
            name = g.path.name if g.path else "?"
            if g.chapter is None:
                lines += [f"## {name}", ""] + [f"- {p}" for p in g.problems] + [""]
                continue
            n_ok = sum(r.passed for r in g.results)
            lines += [f"## {name} (chapter {g.chapter})", "",
                      f"Checked automatically: {n_ok} of {len(g.results)} passed.", ""]
            for r in g.results:
                ex = r.exercise
                if r.passed:
                    lines.append(f"- Exercise {ex.numbered} (`{ex.label}`): passed.")
                else:
                    lines += [f"- Exercise {ex.numbered} (`{ex.label}`): not yet right.", "",
                              "  ```text"] + [f"  {ln}" for ln in r.message.splitlines()] + [
                              "  ```"]
            if g.hand_graded:
                lines += ["", "Graded by hand: " + ", ".join(
                    f"Exercise {ex.numbered} (`{ex.label}`, {ex.kind})" for ex in g.hand_graded)
                    + "."]
            if g.problems:
                lines += ["", "Problems while running your notebook:", ""]
                lines += [f"- {p}" for p in g.problems]
            lines.append("")
        for ch in chapters:
            if ch not in submitted:
                lines += [f"## {ch}", "", "Not submitted.", ""]
        (fb / f"{_safe(student)}.md").write_text("\n".join(lines))


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
    out = args.out or args.submissions.with_name(args.submissions.name + "-graded")
    toc = args.toc or args.book.resolve().parent
    grade_submissions(args.submissions, args.book, out, toc_root=toc,
                      cell_timeout=args.cell_timeout, check_timeout=args.check_timeout,
                      notebook_timeout=args.notebook_timeout)
    print(f"gradebook: {out / 'gradebook.csv'}; feedback: {out / 'feedback'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
