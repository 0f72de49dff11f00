"""The grader (`python3 tools/book.py grade SUBMISSIONS/`) on made-up submissions of every kind,
honest and hostile, graded by the real grader (sandbox and all) in one shared run with -j 2.

The book is the exercise parts of 05_euler_lagrange (three checked exercises) and 01_softmax
(two; the first forbids torch.logsumexp) behind a one-line import cell, so that each submission
runs in seconds. Honest students: correct, untouched stubs, a wrong answer, crashes, endless
loops, a cell that deletes every file it can reach, a forbidden function, exit() half-way, a
stale second notebook, a symbolic link, names that a spreadsheet or a file system would mangle.
Attackers (stub answers, every one must earn 0 and be flagged): the ones issue 23 lists. A
lookup table of the right results for the checks' public inputs (passes the notebook's check(),
earns 0: the grader draws the inputs under a secret salt), and a cell that looks for that salt.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from conftest import BOOK, ROOT
from softmaxbook.exercises.grade import csv_cell, grade_submissions, student_key
from softmaxbook.exercises.sandbox import bwrap_path
from softmaxbook.exercises.student import make_student_notebook

pytestmark = pytest.mark.slow

CHAPTER = "05_euler_lagrange"
CH1 = "01_softmax"
RESIDUAL = "variational-residual"  # check labels
BELTRAMI = "variational-beltrami"
MAXENT = "variational-maxent"
LSE = "softmax-stable-lse"
CE = "softmax-cross-entropy"



#: The checks these tests grade, per chapter; a chapter's other auto-checked exercises lose their
#: answer and check cells here (they stay in the text, graded by hand, numbers unchanged), so
#: that a new checked exercise in the book does not change what these students hand in.
GRADED = {CHAPTER: {RESIDUAL, BELTRAMI, MAXENT}, CH1: {LSE, CE}}


def small_chapter(chapter: str = CHAPTER, stop_after: str | None = None) -> nbformat.NotebookNode:
    """The chapter's exercises section behind a minimal first cell (up to the check cell of
    ``stop_after``, if given), with only the checks in GRADED."""
    full = nbformat.read(BOOK / f"{chapter}.ipynb", as_version=4)
    start = next(i for i, c in enumerate(full.cells)
                 if c.cell_type == "markdown" and "## Exercises" in c.source)
    end = len(full.cells)
    if stop_after:
        end = next(i for i, c in enumerate(full.cells) if c.cell_type == "code"
                   and f'check("{stop_after}"' in c.source) + 1
    cells = full.cells[start:end]
    drop = set()
    for j, c in enumerate(cells):
        label = re.search(r"""check\(\s*["']([\w-]+)["']""", c.source) \
            if c.cell_type == "code" else None
        if label and label.group(1) not in GRADED.get(chapter, {label.group(1)}):
            k = j  # back to the solution block's start: its answer cell goes too
            while k > 0 and not (cells[k].cell_type == "markdown"
                                 and "{solution-start}" in cells[k].source):
                k -= 1
            drop |= {i for i in range(k, j + 1) if cells[i].cell_type == "code"}
    cells = [c for i, c in enumerate(cells) if i not in drop]
    first = nbformat.v4.new_code_cell("import torch\n\nfrom softmaxbook.exercises import check")
    full.cells = [full.cells[0], first] + cells
    return full


def solutions(full) -> list[str]:
    return [c.source for c in full.cells
            if c.cell_type == "code" and "solution" in c.metadata.get("tags", [])]


def with_answers(student, answers: list[str | None]):
    """The student notebook with its stub cells replaced by ``answers`` (None keeps the stub)."""
    nb = nbformat.reads(nbformat.writes(student), as_version=4)
    stubs = [c for c in nb.cells if "exercise-stub" in c.metadata.get("tags", [])]
    assert len(stubs) == len(answers)
    for cell, answer in zip(stubs, answers):
        if answer is not None:
            cell.source = answer
    return nb


def insert_cell(nb, source: str, position: int = 2):
    nb.cells.insert(position, nbformat.v4.new_code_cell(source))
    return nb


def append_cell(nb, source: str):
    nb.cells.append(nbformat.v4.new_code_cell(source))
    return nb


WRONG_SIGN = '''import torch


def residual(f, x):
    x = x.detach().clone().requires_grad_(True)
    y = f(x)
    (d1,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), x)
    return (2 * d2 - 2 * y).detach()
'''

LOOPING = '''def residual(f, x):
    while True:
        pass
'''

FORBIDDEN = '''from softmaxbook.variational import el_residual


def residual(f, x):
    return el_residual(lambda x, f, p: p ** 2 + f ** 2, f, x)
'''

DELETE_ALL = '''import os
import shutil

for root in (".", ".."):
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
print(os.listdir("."))
'''

# ---- attacks: each runs before the check cells, the answers stay stubs -------------------------
ATTACKS = {
    # the registry: every check accepts anything
    "att_registry": '''import softmaxbook.exercises as E
for key, ex in list(E._REGISTRY.items()):
    E._REGISTRY[key] = E._Exercise(ex.label, ex.title, lambda answer: 3)
''',
    # the fail helper never fails
    "att_fail": '''from softmaxbook import exercises
exercises._fail = lambda *args, **kwargs: None
import softmaxbook.exercises.variational as V
V.expect_close = V.expect_true = lambda *args, **kwargs: None
''',
    # every comparison is true
    "att_allclose": '''import torch
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
''',
    # a fake exercises package in sys.modules
    "att_sysmodules": '''import sys, types
fake = types.ModuleType("softmaxbook.exercises")
fake.check = lambda *args, **kwargs: True
fake.ExerciseCheckFailed = AssertionError
sys.modules["softmaxbook.exercises"] = fake
''',
    # the grader's own objects in the student's process, rebound
    "att_rebind": '''import softmaxbook.exercises.sandbox_runner as R
import softmaxbook.exercises as E
E.check = lambda *args, **kwargs: True
R.Recorder.__call__ = lambda self, *a, **k: __import__("torch").zeros(7)
''',
    # stdout filtered so that failures read as passes
    "att_stdout": '''import sys
class Filter:
    def __init__(self, s): self.s = s
    def write(self, t): return self.s.write(t.replace("failed", "passed")
                                             .replace("error", "passed"))
    def flush(self): self.s.flush()
sys.stdout = Filter(sys.stdout)
''',
    # the solutions from disk: the package's path leads to book/
    "att_solutions": '''import json, pathlib, softmaxbook
found = []
package = pathlib.Path(softmaxbook.__file__).resolve()
for p in [package.parents[2] / "book" / "05_euler_lagrange.ipynb",
          pathlib.Path("BOOK") / "05_euler_lagrange.ipynb"]:
    if p.exists():
        try:
            nb = json.loads(p.read_text())
        except Exception:
            continue
        for c in nb["cells"]:
            if "solution" in c.get("metadata", {}).get("tags", []):
                exec("".join(c["source"]))
                found.append(str(p))
print("found", found)
''',
    # a classmate's notebook, found through the grader's command line in /proc
    "att_proc": '''import glob, json, os, re
stolen = []
for f in glob.glob("/proc/*/cmdline") + glob.glob("/proc/*/environ"):
    try:
        text = open(f, "rb").read().replace(b"\\0", b" ").decode()
    except Exception:
        continue
    for path in re.findall(r"(/\\S*SUBMISSIONS\\S*)", text) + ["SUBS"]:
        for nbp in glob.glob(os.path.join(path, "ada", "*.ipynb")):
            nb = json.load(open(nbp))
            for c in nb["cells"]:
                if c["cell_type"] == "code" and "def residual" in "".join(c["source"]):
                    exec("".join(c["source"]))
                    stolen.append(nbp)
print("stolen", stolen)
''',
    # torch's dispatch switched off: the forbidden function used anyway (chapter 1)
    "att_dispatch": None,
    # a detached process that outlives the notebook and rewrites the gradebook
    "att_detached": '''import subprocess, sys
code = """
import os, time, glob
for _ in range(60):
    for p in glob.glob("GRADES/**/*", recursive=True) + glob.glob("SUBS/**/*.ipynb",
                                                                recursive=True):
        try:
            open(p, "w").write("=HYPERLINK(1)")
        except Exception:
            pass
    try:
        open("GRADES/gradebook.csv", "w").write("student,passed\\\\natt_detached,99\\\\n")
    except Exception:
        pass
    time.sleep(0.5)
"""
subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
''',
    # kills its parent (and everything else it can)
    "att_kill": '''import os, signal
try:
    os.kill(-1, signal.SIGKILL)
except Exception:
    pass
os.kill(os.getppid(), signal.SIGKILL)
''',
}

LSE_WITH_DISPATCH_OFF = '''import torch


def stable_logsumexp(x):
    with torch._C.DisableTorchFunction():
        return torch.logsumexp(x, dim=-1)
'''

LSE_METHOD = '''def stable_logsumexp(x):
    return x.logsumexp(-1)
'''


# ---- a lookup table: the right answers for the public (salt 0) inputs, zeros elsewhere ---------
def table_answer(label: str, name: str, solution_cells: list[str]) -> str:
    """The source of a function ``name`` that answers exercise ``label`` from a table of the
    right results for the inputs the check draws in a notebook (salt 0), built by running the
    book's solution through the check, and returns zeros for any other input."""
    from softmaxbook.exercises import check

    ns: dict = {}
    for src in ["import torch"] + solution_cells:
        exec(src, ns)  # noqa: S102 - the book's own solution
    table = {}

    def spy(*args):
        out = ns[name](*args)
        key = json.dumps([[a.tolist(), str(a.dtype)] for a in args])
        table[key] = out.tolist()
        return out

    check(label, spy)
    assert len(table) >= 5
    return (f"import json\n\nimport torch\n\nTABLE = json.loads({json.dumps(table)!r})\n\n\n"
            f"def {name}(*args):\n"
            f"    key = json.dumps([[a.tolist(), str(a.dtype)] for a in args])\n"
            f"    if key in TABLE:\n"
            f"        return torch.tensor(TABLE[key], dtype=args[0].dtype)\n"
            f"    shape = args[0].shape[:-1] if len(args) == 1 else ()\n"
            f"    return torch.zeros(shape, dtype=args[0].dtype)\n")


# ---- looks for the checks' secret salt while the cells run: there is none to find --------------
PEEK = '''import json
import os

job = open("/job/job.json").read()
fd = json.loads(job)["salt_fd"]
os.set_blocking(fd, False)
try:
    print("peeked", os.read(fd, 64))
except BlockingIOError:
    print("nothing to read yet")
print("job", job)
'''


def _need_bwrap():
    if bwrap_path() is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("bubblewrap (bwrap) is missing: CI must grade in a sandbox")
        pytest.skip("bubblewrap (bwrap) is not installed: the grader refuses without it")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    _need_bwrap()
    base = tmp_path_factory.mktemp("grading")
    book = base / "book"
    book.mkdir()
    full = small_chapter()
    nbformat.write(full, book / f"{CHAPTER}.ipynb")
    full1 = small_chapter(CH1, stop_after=CE)
    nbformat.write(full1, book / f"{CH1}.ipynb")
    (base / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nparts:\n  - caption: C\n"
                                   "    numbered: true\n    chapters:\n"
                                   f"      - file: book/{CH1}\n" + "".join(
                                       f"      - file: book/0{k}_x\n" for k in range(2, 5))
                                   + f"      - file: book/{CHAPTER}\n")
    student = make_student_notebook(full, chapter=CHAPTER)
    student1 = make_student_notebook(full1, chapter=CH1)
    good = solutions(full)
    good1 = solutions(full1)
    subs = base / "SUBMISSIONS"
    out = base / "grades"
    kinds = {
        "ada": with_answers(student, good),
        "bob": with_answers(student, [None, None, None]),
        "cyd": with_answers(student, [WRONG_SIGN, good[1], good[2]]),
        "dan": insert_cell(insert_cell(with_answers(student, [good[0], good[1], "def maxent(:\n"]),
                                       "1 / 0"), "import os\nos._exit(1)"),
        "eve": insert_cell(with_answers(student, [LOOPING, good[1], good[2]]),
                           "while True:\n    pass"),
        "fay": insert_cell(with_answers(student, good), DELETE_ALL, position=3),
        # exit() after the answers: the checks still run on them, nothing is blamed
        "hal": append_cell(append_cell(with_answers(student, good), "exit()"), "1 / 0"),
    }
    for name, source in ATTACKS.items():
        if source is None:
            continue
        source = source.replace("GRADES", str(out)).replace("SUBS", str(subs)).replace(
            "BOOK", str(book))
        kinds[name] = insert_cell(with_answers(student, [None, None, None]), source)
    for name, nb in kinds.items():
        (subs / name).mkdir(parents=True)
        nbformat.write(nb, subs / name / f"{CHAPTER}.ipynb")
        (subs / name / "notes.txt").write_text("keep me")
    # chapter 1: the forbidden function behind switched-off dispatch; as a tensor method
    (subs / "att_dispatch").mkdir()
    nbformat.write(with_answers(student1, [LSE_WITH_DISPATCH_OFF, good1[1]]),
                   subs / "att_dispatch" / f"{CH1}.ipynb")
    (subs / "kim").mkdir()
    nbformat.write(with_answers(student1, [LSE_METHOD, good1[1]]), subs / "kim" / f"{CH1}.ipynb")
    # answers looked up in a table of the public inputs' right results (issue 23)
    tables = [table_answer(LSE, "stable_logsumexp", good1),
              table_answer(CE, "mean_cross_entropy", good1)]
    (subs / "tab").mkdir()
    nbformat.write(with_answers(student1, tables), subs / "tab" / f"{CH1}.ipynb")
    # right answers, and a cell that looks for the checks' secret salt while the cells run
    (subs / "pia").mkdir()
    nbformat.write(insert_cell(with_answers(student1, good1), PEEK), subs / "pia" / f"{CH1}.ipynb")
    # one student hands in a single notebook, named after themselves
    nbformat.write(with_answers(student, [FORBIDDEN, good[1], good[2]]), subs / "gus.ipynb")
    # a stale copy, with work in it, beside the real notebook: a conflict, not a silent winner
    (subs / "ivy").mkdir()
    nbformat.write(with_answers(student, good), subs / "ivy" / f"{CHAPTER}.ipynb")
    nbformat.write(with_answers(student, [WRONG_SIGN, None, None]),
                   subs / "ivy" / f"{CHAPTER}_old.ipynb")
    # the unedited "(new)" copy `book.py student` writes beside an edited notebook (tester
    # finding 4): set aside, the student's notebook graded
    (subs / "uma").mkdir()
    nbformat.write(with_answers(student, good), subs / "uma" / f"{CHAPTER}.ipynb")
    nbformat.write(student, subs / "uma" / f"{CHAPTER} (new).ipynb")
    # a symbolic link to a classmate's notebook
    os.symlink(subs / "ada" / f"{CHAPTER}.ipynb", subs / "jon.ipynb")
    # names: a spreadsheet formula, two that sanitise alike
    for name in ("=1+2", "lee mo", "lee_mo"):
        (subs / name).mkdir()
        nbformat.write(with_answers(student, [None, good[1], None]),
                       subs / name / f"{CHAPTER}.ipynb")
    before = {p: (p.read_bytes() if p.is_file() else None)
              for p in sorted(subs.rglob("*")) if not p.is_symlink()}
    t0 = time.monotonic()
    results = grade_submissions(subs, book, out, toc_root=base, cell_timeout=10,
                                check_timeout=10, notebook_timeout=120, jobs=2,
                                log=lambda *_: None)
    seconds = time.monotonic() - t0
    gradebook = (out / "gradebook.csv").read_text()
    time.sleep(3)  # a detached process would have rewritten it by now
    with open(out / "gradebook.csv", newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    return dict(subs=subs, before=before, out=out, rows=rows, results=results,
                seconds=seconds, gradebook=gradebook, base=base, book=book, tables=tables)


def status(graded, student, check):
    for nb in graded["results"][student]["notebooks"]:
        for r in nb["results"]:
            if r["check"] == check:
                return r["status"], r["message"]
    return None, None


def column(graded, check):
    return next(k for k in next(iter(graded["rows"].values())) if k.endswith(" " + {
        RESIDUAL: "variational-ex-residual", BELTRAMI: "variational-ex-beltrami-code",
        MAXENT: "variational-ex-maxent", LSE: "softmax-stable-lse",
        CE: "softmax-cross-entropy"}.get(check, check)))


def feedback(graded, student):
    return (graded["out"] / "feedback" / f"{student_key(student)}.md").read_text()


def test_every_student_is_graded(graded):
    names = set(graded["rows"])
    assert {"ada", "bob", "cyd", "dan", "eve", "fay", "gus", "hal", "ivy", "jon", "kim",
            "tab", "pia", "uma", "'=1+2", "lee mo", "lee_mo"} | set(ATTACKS) <= names
    for name in graded["results"]:
        assert (graded["out"] / "feedback" / f"{student_key(name)}.md").is_file()
        assert (graded["out"] / "results" / f"{student_key(name)}.json").is_file()


def test_correct_submission_passes(graded):
    row = graded["rows"]["ada"]
    assert [row[column(graded, c)] for c in (RESIDUAL, BELTRAMI, MAXENT)] == ["ok"] * 3
    assert row["passed"] == "3" and row["problems"] == "0" and row["flagged"] == ""
    assert row["points"] == "3"
    # the assignment is both chapters: the chapter not handed in counts as not submitted
    assert row[column(graded, LSE)] == "absent" and row["max points"] == "5"
    assert "(by hand)" in ",".join(graded["rows"]["ada"])  # blank columns, graded by hand


def test_stubs_fail_with_what_to_do(graded):
    row = graded["rows"]["bob"]
    assert row[column(graded, RESIDUAL)] == "stub" and row["passed"] == "0"
    assert "NotImplementedError" in status(graded, "bob", RESIDUAL)[1]


def test_wrong_answer_fails_with_the_input(graded):
    assert status(graded, "cyd", MAXENT)[0] == "passed"
    st, msg = status(graded, "cyd", RESIDUAL)
    assert st == "failed" and "for input f = " in msg and "expected residual" in msg
    text = feedback(graded, "cyd")
    assert "Hint:" in text and "Exercise 5.4 (`variational-ex-residual`): not yet right" in text


def test_crashing_notebook_is_graded(graded):
    assert status(graded, "dan", RESIDUAL)[0] == "passed", "the cells after the crashes ran"
    st, msg = status(graded, "dan", MAXENT)
    assert st == "missing" and "not defined" in msg and "SyntaxError" in msg, msg
    text = feedback(graded, "dan")
    assert "stopped the Python process" in text and "ZeroDivisionError" in text
    # tester finding 11: the feedback's cell number is the executed copy's In [n], and a cell
    # of the exercise section is named by its exercise
    import re
    m = re.search(r"code cell (\d+) \(In \[(\d+)\](, Exercise 5\.\d+)?\) raised ZeroDivision",
                  text)
    assert m and m.group(1) == m.group(2), text
    nb = nbformat.reads((graded["out"] / "executed" / "dan" / f"{CHAPTER}.ipynb").read_text(), 4)
    shown = [c for c in nb.cells if c.cell_type == "code"
             and c.execution_count == int(m.group(1))]
    assert len(shown) == 1 and "ZeroDivisionError" in "".join(
        o.get("text", "") for o in shown[0].outputs), shown


def test_endless_loops_are_stopped(graded):
    assert status(graded, "eve", RESIDUAL)[0] == "timeout"
    assert status(graded, "eve", MAXENT)[0] == "passed"
    assert "did not finish within 10 s" in feedback(graded, "eve")


def test_deleting_files_touches_only_a_copy(graded):
    assert status(graded, "fay", RESIDUAL)[0] == "passed"
    assert (graded["subs"] / "fay" / "notes.txt").read_text() == "keep me"


def test_forbidden_function_fails_the_exercise(graded):
    st, msg = status(graded, "gus", RESIDUAL)
    assert st == "failed" and "calls softmaxbook.variational.el_residual" in msg
    assert status(graded, "gus", MAXENT)[0] == "passed"
    # the sandbox's runtime guard catches a tensor method
    st, msg = status(graded, "kim", LSE)
    assert st == "failed" and "torch.logsumexp" in msg, msg
    assert status(graded, "kim", CE)[0] == "passed"


def test_exit_ends_the_notebook_cleanly(graded):
    row = graded["rows"]["hal"]
    assert row["passed"] == "3", row
    text = feedback(graded, "hal")
    assert "ended the notebook (exit())" in text and "ZeroDivisionError" not in text
    assert text.count("code cell") == 1, text


def test_two_notebooks_for_one_chapter_are_a_conflict(graded):
    row = graded["rows"]["ivy"]
    assert row[column(graded, RESIDUAL)] == "conflict" and row["passed"] == "0"
    assert "more than one notebook for chapter" in feedback(graded, "ivy")


def test_an_unedited_copy_of_the_handout_is_set_aside(graded):
    row = graded["rows"]["uma"]
    assert [row[column(graded, c)] for c in (RESIDUAL, BELTRAMI, MAXENT)] == ["ok"] * 3
    assert row["passed"] == "3"
    text = feedback(graded, "uma")
    assert f"{CHAPTER} (new).ipynb: an unedited copy of the handout" in text
    assert "more than one notebook" not in text


def test_symbolic_links_are_refused(graded):
    row = graded["rows"]["jon"]
    assert row["passed"] == "0"
    assert "symbolic link" in feedback(graded, "jon")


def test_names_are_escaped_and_unique(graded):
    assert graded["rows"]["'=1+2"]["passed"] == "1"
    assert "\n=" not in graded["gradebook"] and ",=" not in graded["gradebook"]
    assert csv_cell("-3") == "'-3" and csv_cell("@x") == "'@x" and csv_cell("ada") == "ada"
    keys = {student_key(n) for n in ("lee mo", "lee_mo", "=1+2", "ada")}
    assert len(keys) == 4
    assert "# Feedback for lee mo" in feedback(graded, "lee mo")
    assert "# Feedback for lee_mo" in feedback(graded, "lee_mo")


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attacks_earn_nothing_and_are_flagged(graded, attack):
    row = graded["rows"][attack]
    assert row["points"] == "0" and row["passed"] == "0", row
    assert row["flagged"] == "yes", (row, feedback(graded, attack))


def test_a_lookup_table_of_the_public_inputs_earns_nothing(graded):
    """Right results for every input the notebook's check() draws pass there (salt 0), but the
    grader's inputs are drawn under a secret salt per run: the table earns 0 (issue 23)."""
    import softmaxbook.exercises as E

    for (label, name), source in zip([(LSE, "stable_logsumexp"), (CE, "mean_cross_entropy")],
                                     graded["tables"]):
        ns: dict = {}
        exec(source, ns)  # noqa: S102
        assert E.check_salt() == 0 and E.check(label, ns[name])
        st, msg = status(graded, "tab", label)
        assert st == "failed" and "expected" in msg, (st, msg)
    row = graded["rows"]["tab"]
    assert row["points"] == "0" and row["flagged"] == "", row


def test_the_salt_is_secret_until_the_checks(graded):
    """Each notebook's checks ran under a fresh salt, recorded in its result file only; a cell
    found it neither in the job file nor in the pipe it comes through, and the right answers
    beside that cell passed under it."""
    salts = {s: nb["salt"] for s, r in graded["results"].items() for nb in r["notebooks"]
             if nb.get("salt") is not None}
    assert len(salts) >= 20 and all(type(v) is int and v > 0 for v in salts.values())
    assert len(set(salts.values())) == len(salts)  # one per notebook
    assert graded["rows"]["pia"]["passed"] == "2" and graded["rows"]["pia"]["flagged"] == ""
    executed = (graded["out"] / "executed" / "pia" / f"{CH1}.ipynb").read_text()
    assert "nothing to read yet" in executed and "salt_fd" in executed, executed[-2000:]
    assert str(salts["pia"]) not in executed
    for student, salt in salts.items():
        assert str(salt) not in feedback(graded, student)


def test_sandbox_hides_the_host(graded):
    """The attacks that looked for files found nothing (their output is in the executed
    notebook); the detached process changed nothing, the submissions are intact."""
    executed = graded["out"] / "executed"
    assert "found []" in (executed / "att_solutions" / f"{CHAPTER}.ipynb").read_text()
    assert "stolen []" in (executed / "att_proc" / f"{CHAPTER}.ipynb").read_text()
    assert (graded["out"] / "gradebook.csv").read_text() == graded["gradebook"]
    for p, content in graded["before"].items():
        assert p.exists() and (content is None or p.read_bytes() == content), p


def test_killing_the_parent_costs_nobody_else(graded):
    assert graded["rows"]["att_kill"]["passed"] == "0"
    assert graded["rows"]["ada"]["passed"] == "3"  # graded beside it, in parallel


def test_rerun_resumes(graded):
    """A rerun keeps every unchanged student's result file and regrades a changed one."""
    out, subs = graded["out"], graded["subs"]
    before = {p.name: p.stat().st_mtime_ns for p in (out / "results").glob("*.json")}
    nb = nbformat.read(subs / "bob" / f"{CHAPTER}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("x = 1"))
    nbformat.write(nb, subs / "bob" / f"{CHAPTER}.ipynb")
    logs = []
    grade_submissions(subs, graded["book"], out, toc_root=graded["base"], cell_timeout=10,
                      check_timeout=10, notebook_timeout=120, jobs=2, log=logs.append)
    after = {p.name: p.stat().st_mtime_ns for p in (out / "results").glob("*.json")}
    changed = {n for n in after if after[n] != before.get(n)}
    assert changed == {"bob.json"}, changed
    assert sum("result kept" in m for m in logs) == len(before) - 1
    assert any(m.startswith("gradebook columns: chapters") for m in logs), logs
    # tester finding 15: naming the chapters already graded (--chapters), or a book notebook
    # touched without a change, regrades nobody
    shown = next(m for m in logs if m.startswith("gradebook columns:"))
    chapters = [c for c in (CHAPTER, CH1) if c in shown]
    for path in graded["book"].glob("*.ipynb"):
        path.touch()
    logs = []
    grade_submissions(subs, graded["book"], out, toc_root=graded["base"], cell_timeout=10,
                      check_timeout=10, notebook_timeout=120, jobs=2, log=logs.append,
                      chapters=chapters)
    again = {p.name: p.stat().st_mtime_ns for p in (out / "results").glob("*.json")}
    assert again == after and sum("result kept" in m for m in logs) == len(before), logs


def test_disagreeing_chapter_witnesses_are_reported(tmp_path):
    """Tester finding 14: metadata saying chapter 2 beat a file name and check cells saying
    chapter 1, silently. The check cells decide now, and the disagreement is reported."""
    from softmaxbook.exercises.grade import _chapter_evidence, _reference

    ref = _reference(ROOT / "book", ROOT)
    nb = nbformat.read(ROOT / "book" / f"{CH1}.ipynb", as_version=4)
    nb.metadata["softmaxbook"] = {"chapter": "02_choice"}
    nbformat.write(nb, tmp_path / f"{CH1}.ipynb")
    chapter, note = _chapter_evidence(tmp_path / f"{CH1}.ipynb", ref)
    assert chapter == CH1 and "its metadata says 02_choice" in note, note
    assert f"its file name says {CH1}" in note and f"graded as chapter {CH1}" in note
    nb.metadata["softmaxbook"] = {"chapter": CH1}
    nbformat.write(nb, tmp_path / "renamed.ipynb")
    assert _chapter_evidence(tmp_path / "renamed.ipynb", ref) == (CH1, None)
    # no check cell left: the metadata decides, and a file name that disagrees is reported
    nb.cells = [c for c in nb.cells if "check(" not in c.source]
    nbformat.write(nb, tmp_path / "02_choice.ipynb")
    chapter, note = _chapter_evidence(tmp_path / "02_choice.ipynb", ref)
    assert chapter == CH1 and "its file name says 02_choice" in note


def test_missing_chapter_and_unknown_notebook(tmp_path):
    _need_bwrap()
    subs = tmp_path / "subs"
    (subs / "hal").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), subs / "hal" / "scratch.ipynb")
    book = tmp_path / "book"
    book.mkdir()
    nbformat.write(small_chapter(), book / f"{CHAPTER}.ipynb")
    grade_submissions(subs, book, tmp_path / "out", log=lambda *_: None)
    text = (tmp_path / "out" / "feedback" / "hal.md").read_text()
    assert "no chapter of the book matches" in text


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="argument 'submissions'"):
        grade_submissions(tmp_path / "nope", tmp_path, tmp_path / "out")


def test_command_line(tmp_path):
    """`python -m softmaxbook.exercises.grade` (what `book.py grade` runs) writes its outputs;
    --chapters fixes the columns; a notebook of no chapter is graded without a sandbox run."""
    from softmaxbook.exercises.grade import main

    _need_bwrap()
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(nbformat.v4.new_notebook(), subs / "ivy.ipynb")
    book = tmp_path / "book"
    book.mkdir()
    nbformat.write(small_chapter(), book / f"{CHAPTER}.ipynb")
    assert main([str(subs), "--book", str(book), "--out", str(tmp_path / "out"),
                 "--chapters", CHAPTER, "--points", f"{RESIDUAL}=2"]) == 0
    text = (tmp_path / "out" / "gradebook.csv").read_text()
    assert text.startswith("student,") and "variational-ex-residual" in text
    assert text.splitlines()[1].split(",")[-6:-4] == ["0", "4"]  # points, max points
    with pytest.raises(SystemExit):
        main([str(subs), "--book", str(book), "--cell-timeout", "0"])


def test_refuses_without_bubblewrap(tmp_path):
    """No bwrap on PATH: the grader says so and refuses, unless --unsafe."""
    subs = tmp_path / "subs"
    subs.mkdir()
    book = tmp_path / "book"
    book.mkdir()
    nbformat.write(small_chapter(), book / f"{CHAPTER}.ipynb")
    env = dict(os.environ, PATH=str(tmp_path))
    cmd = [sys.executable, "-m", "softmaxbook.exercises.grade", str(subs), "--book", str(book),
           "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "bubblewrap" in proc.stderr, proc.stderr
    proc = subprocess.run(cmd + ["--unsafe"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "WITHOUT a sandbox" in proc.stderr, proc.stderr


def test_bwrap_is_here_in_ci():
    """CI must grade in a sandbox: bubblewrap has to be installed there."""
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        assert bwrap_path() is not None, "install bubblewrap (apt-get install bubblewrap)"
