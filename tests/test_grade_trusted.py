"""The grader's trusted side without a sandbox (fast): the replay decides on recorded results,
forged or malformed records fail and are flagged, the static scan flags tampering and finds
forbidden functions in the answer's own code, honest code is not flagged."""

from __future__ import annotations

import os
import time

import nbformat
import pytest
import torch

from conftest import BOOK, chapter_notebooks
from softmaxbook.exercises import scan
from softmaxbook.exercises.replay import verdict
from softmaxbook.exercises.sandbox_runner import Recorder, encode



# an honest, right answer to softmax-stable-lse, as a student's cell
HONEST_LSE = ("def lse(x):\n    m = x.amax(dim=-1, keepdim=True)\n"
              "    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)\n"
              "    return (m + torch.log(torch.exp(x - m).sum(-1, keepdim=True)))"
              ".squeeze(-1)\n")

def record(label, func):
    """What the sandbox sends back for ``func`` (recorded in this process, for the test)."""
    from softmaxbook.exercises import check

    calls = []
    try:
        check(label, Recorder(func, calls))
    except BaseException:  # noqa: BLE001 - a failing answer still has its record
        pass
    return {"label": label, "answer": "function", "calls": calls}


def good_lse(x):
    m = x.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).squeeze(-1)


def test_replay_passes_a_right_answer_and_fails_a_wrong_one():
    assert verdict("softmax-stable-lse", record("softmax-stable-lse", good_lse)).status == "passed"
    v = verdict("softmax-stable-lse", record("softmax-stable-lse",
                                             lambda x: torch.log(torch.exp(x).sum(-1))))
    assert v.status == "failed" and "expected" in v.message and v.tampered is None


def test_forged_records_fail_and_are_flagged():
    entry = record("softmax-stable-lse", good_lse)
    # results for other inputs (a lookup table keyed wrongly, or a patched recorder)
    forged = dict(entry, calls=[dict(c, digest="0" * 64) for c in entry["calls"]])
    v = verdict("softmax-stable-lse", forged)
    assert v.status == "error" and v.tampered
    # too few results
    v = verdict("softmax-stable-lse", dict(entry, calls=entry["calls"][:1]))
    assert v.tampered and v.status == "error"
    # a value the encoder cannot have written
    bad = dict(entry, calls=[dict(entry["calls"][0], value=["tensor", "not a tensor", False])]
               + entry["calls"][1:])
    assert verdict("softmax-stable-lse", bad).tampered
    # the answer "passed" in the sandbox means nothing: the verdict is the grader's
    stub = record("softmax-stable-lse", lambda x: torch.zeros(x.shape[:-1]))
    stub["local"] = "passed"
    assert verdict("softmax-stable-lse", stub).status == "failed"


def test_forbidden_call_recorded_in_the_sandbox_fails_here():
    v = verdict("softmax-stable-lse", record("softmax-stable-lse",
                                             lambda x: x.logsumexp(-1)))
    assert v.status == "failed" and "torch.logsumexp" in v.message
    assert "torch.logsumexp" in v.forbidden_names


def test_missing_and_value_answers():
    assert verdict("softmax-stable-lse", {"label": "x", "answer": "missing",
                                          "message": "name 'f' is not defined"}).status \
        == "missing"
    assert verdict("softmax-stable-lse", None).status == "error"
    assert encode(torch.tensor([1.0]))[0] == "tensor" and encode(Ellipsis) == ["ellipsis"]


@pytest.mark.parametrize("source", [
    "import torch\ntorch.allclose = lambda *a, **k: True",
    "import sys\nsys.modules['softmaxbook.exercises'] = None",
    "import sys\nsys.stdout = open('/dev/null', 'w')",
    "with torch._C.DisableTorchFunction():\n    pass",
    "import softmaxbook.exercises as E\nE._fail = print",
    "from softmaxbook.exercises import _REGISTRY",
    "import sys\nsys.setprofile(None)",
    "x = open('/proc/1/cmdline').read()",
    "import subprocess",
    "import os\nos.kill(os.getppid(), 9)",
    "f = getattr(torch, 'log' + 'sumexp')",
    "import gc\ngc.get_objects()",
    "import inspect\ninspect.currentframe().f_back.f_locals",
    "setattr(torch, 'equal', lambda *a: True)",
    "%load_ext foo\ntorch.equal = None",
])
def test_scan_flags_tampering(source):
    assert scan.notebook_flags([(0, source)], {0: 1}), source


def test_scan_does_not_flag_the_books_own_code():
    """Every code cell of every chapter (solutions included) is honest code."""
    for path in chapter_notebooks():
        nb = nbformat.read(path, as_version=4)
        cells = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        assert scan.notebook_flags(cells, {}) == [], path.name


def test_answer_uses_finds_forbidden_names_in_the_answers_code_only():
    cells = [(3, "from softmaxbook.variational import el_residual\n\n"
                 "def residual(f, x):\n    return helper(f, x)\n"),
             (4, "def helper(f, x):\n    return el_residual(lambda x, f, p: p, f, x)\n"),
             (5, "def other(x):\n    return x.logsumexp(-1)\n")]
    assert scan.answer_uses(cells, "residual", {"el_residual"}, False) == ["el_residual"]
    assert scan.answer_uses(cells, "residual", {"torch.logsumexp"}, False) == []
    assert scan.answer_uses(cells, "other", {"torch.logsumexp"}, False) == ["torch.logsumexp"]
    assert scan.answer_uses(cells, "residual", set(), True) == [
        "softmaxbook.variational.el_residual"]


def test_student_cells_are_those_not_in_the_handout():
    from softmaxbook.exercises.student import make_student_notebook

    full = nbformat.read(BOOK / "01_softmax.ipynb", as_version=4)
    handout = [c.source for c in make_student_notebook(full).cells if c.cell_type == "code"]
    submitted = [(i, s) for i, s in enumerate(handout)] + [(99, "x = 1")]
    assert scan.student_cells(submitted, handout) == [(99, "x = 1")]


# --- hidden inputs: the checks run under the grader's secret per-run salt (issue 23) ----------
def salted_record(label, func, salt):
    from softmaxbook.exercises import salted

    with salted(salt):
        return record(label, func)


def test_replay_draws_the_inputs_under_the_sandboxs_salt():
    """The trusted replay makes the same inputs as the sandbox only under the same salt: an
    honest record passes there; replayed under another salt (or the public inputs, salt 0), its
    calls do not match and the notebook is flagged."""
    salt = 2 ** 61 + 12345
    entry = salted_record("softmax-stable-lse", good_lse, salt)
    assert len(entry["calls"]) > 7  # the fixed cases and the salted variants
    assert verdict("softmax-stable-lse", entry, salt=salt).status == "passed"
    for other in (0, salt + 1):
        v = verdict("softmax-stable-lse", entry, salt=other)
        assert v.status == "error" and v.tampered, other
    # answers recorded for the public inputs (a patched salt in the sandbox) do not match either
    public = record("softmax-stable-lse", good_lse)
    assert verdict("softmax-stable-lse", public, salt=salt).tampered
    # a tampered call under the right salt still fails
    forged = dict(entry, calls=[dict(c, digest="0" * 64) for c in entry["calls"]])
    assert verdict("softmax-stable-lse", forged, salt=salt).tampered


def test_the_runner_reads_its_salt_from_the_pipe_only():
    from softmaxbook.exercises.sandbox_runner import _read_salt

    r, w = os.pipe()
    os.write(w, b"123456789\n")
    assert _read_salt(r, timeout=5) == 123456789
    os.close(w)
    for data in (b"", b"not a number\n", b"-5\n"):
        r, w = os.pipe()
        os.write(w, data)
        os.close(w)
        assert _read_salt(r, timeout=5) is None, data
    r, w = os.pipe()  # nothing written: gives up after the timeout
    t0 = time.monotonic()
    assert _read_salt(r, timeout=0.3) is None and time.monotonic() - t0 < 5
    os.close(w)
    assert _read_salt(None, timeout=1) is None


def test_the_sandbox_gets_the_salt_only_after_the_cells(tmp_path):
    """A real run (without bubblewrap, as --unsafe): no cell sees the salt (not in the job file,
    nothing in its pipe yet), the checks run under it, and the replay agrees only under it."""
    from softmaxbook.exercises.sandbox import run_notebook

    salt = 2 ** 60 + 4321
    cells = [(0, "import json, os\nimport torch\n"
                 "job = open('../job.json').read()\n"
                 "fd = json.loads(job)['salt_fd']\nos.set_blocking(fd, False)\n"
                 "try:\n    print('read', os.read(fd, 64))\n"
                 "except BlockingIOError:\n    print('nothing yet')\n"
                 "print(str(2 ** 60 + 4321) in job)"),  # the salt, not written out
             (1, HONEST_LSE)]
    run = run_notebook(cells, [{"label": "softmax-stable-lse", "answer": "lse"}], None,
                       "x.ipynb", cell_timeout=60, check_timeout=60, notebook_timeout=120,
                       unsafe=True, salt=salt)
    assert run.cells[0]["output"].split() == ["nothing", "yet", "False"], run.cells
    assert run.record["salt_received"] is True
    entry = run.record["records"][0]
    assert verdict("softmax-stable-lse", entry, salt=salt).status == "passed"
    assert verdict("softmax-stable-lse", entry, salt=0).tampered


def _forge_value(entry, value):
    """``entry`` with its first returned result replaced by ``value`` (what a notebook's exit
    handler or thread could write into the record)."""
    calls = [dict(c) for c in entry["calls"]]
    first = next(c for c in calls if c.get("outcome") == "return")
    first["value"] = value
    return dict(entry, calls=calls)


def test_a_forged_record_cannot_make_the_grader_expand_it():
    """Finding 7 (issue 23): a shared list (a DAG: tiny file, 4**11 or 1000**25 leaves), a
    stride-0 expanded tensor (4 bytes of data, 1 GiB as a result) and deep nesting are refused
    as malformed, quickly, without building them; a value just under the limits decodes."""
    from softmaxbook.exercises import replay

    entry = record("softmax-stable-lse", good_lse)
    v = ["int", "1"]
    for _ in range(11):
        v = ["list", [v] * 4]
    wide = ["int", "1"]
    for _ in range(25):
        wide = ["list", [wide] * 1000]
    big = ["tensor", torch.zeros(1).expand(2 ** 28), False]
    strided = ["tensor", torch.zeros(10)[::2], False]
    deep = ["int", "1"]
    for _ in range(40):
        deep = ["list", [deep]]
    for value in (v, wide, big, strided, deep):
        t0 = time.monotonic()
        out = verdict("softmax-stable-lse", _forge_value(entry, value))
        assert out.status == "error" and out.tampered, (value[:1], out)
        assert time.monotonic() - t0 < 10
        with pytest.raises(replay._Malformed):
            replay.decode(value)
    # an answer returned as a value (not a function) goes through the same limits
    assert verdict("softmax-stable-lse", {"label": "softmax-stable-lse", "answer": "value",
                                          "value": wide}).tampered
    ok = replay.decode(["list", [["int", "1"]] * (replay.MAX_NODES - 10)])
    assert len(ok) == replay.MAX_NODES - 10
    # derivatives sent back with a result are held to the same rule
    bad = dict(entry["calls"][0], jacobians=[[[], [0], torch.zeros(1).expand(4, 4)]])
    assert verdict("softmax-stable-lse", dict(entry, calls=[bad] + entry["calls"][1:])).tampered


def test_the_replay_has_a_time_limit():
    """Finding 7: the replay of a record stops at the check's time limit (a grader slot is not
    held for ever) and flags the record."""
    entry = record("softmax-stable-lse", good_lse)
    v = ["int", "1"]
    for _ in range(3):
        v = ["list", [v] * 40]   # 64000 leaves: under the size limit, decoded in well under 1 s
    t0 = time.monotonic()
    out = verdict("softmax-stable-lse", _forge_value(entry, v), replay_timeout=0.0)
    assert out.tampered and "took over" in out.tampered and time.monotonic() - t0 < 10
    from softmaxbook.exercises import replay

    with pytest.raises(replay._ReplayTimeout):  # decoding itself stops at the deadline
        replay.decode(v, budget=replay._Budget(deadline=time.monotonic() - 1))


ATEXIT_FORGE = """import atexit
import torch
def _after():
    rec = torch.load('../record.pt', weights_only=True)
    rec['records'] = [dict(e, calls=[]) for e in rec['records']]
    torch.save(rec, '../record.pt')
atexit.register(_after)
"""


def test_a_notebook_cannot_rewrite_the_record_after_the_runner(tmp_path):
    """Finding 7 (issue 23): an exit handler registered by a cell used to rewrite record.pt
    after the runner wrote it, and the grader read the rewritten file. Now the runner ends with
    os._exit (no exit handler runs) and the grader takes record.pt only with the seal (its
    SHA-256) that the runner sent through its pipe."""
    from softmaxbook.exercises.sandbox import run_notebook

    cells = [(0, ATEXIT_FORGE),
             (1, HONEST_LSE)]
    run = run_notebook(cells, [{"label": "softmax-stable-lse", "answer": "lse"}], None,
                       "x.ipynb", cell_timeout=60, check_timeout=60, notebook_timeout=120,
                       unsafe=True, salt=7)
    assert run.tampered is None and run.record is not None, run
    entry = run.record["records"][0]
    assert entry["calls"], "the exit handler's rewrite reached the grader"
    assert verdict("softmax-stable-lse", entry, salt=7).status == "passed"


def test_the_grader_takes_only_the_sealed_record(tmp_path):
    import hashlib

    from softmaxbook.exercises.sandbox import _load_record

    path = tmp_path / "record.pt"
    torch.save({"records": []}, path)
    good = hashlib.sha256(path.read_bytes()).hexdigest()
    assert _load_record(path, f"cells-done\nrecord {good}\n".encode()) == ({"records": []}, None)
    torch.save({"records": [], "forged": 1}, path)  # rewritten after the seal
    record, why = _load_record(path, f"cells-done\nrecord {good}\n".encode())
    assert record is None and "changed" in why
    forged = hashlib.sha256(path.read_bytes()).hexdigest()  # a second seal sent by the notebook
    record, why = _load_record(path, f"record {forged}\nrecord {good}\n".encode())
    assert record is None and why
    record, why = _load_record(path, b"cells-done\n")  # no seal at all
    assert record is None and "seal" in why
    assert _load_record(tmp_path / "none.pt", b"") == (None, None)  # no record: not tampering


def test_a_sandbox_that_cannot_start_stops_the_grader(tmp_path):
    """Finding 3 (issue 23): when the sandbox cannot start Python (a symlinked environment,
    a broken bwrap), every student used to get 'error' under exit status 0 and a normal-looking
    gradebook. Now the grader probes the sandbox first, says so and exits non-zero, and writes
    no gradebook."""
    import shutil
    import subprocess
    import sys

    from conftest import ROOT

    fake = tmp_path / "bin"
    fake.mkdir()
    # a bwrap that passes the grader's "can it create a sandbox" test but runs nothing
    (fake / "bwrap").write_text('#!/bin/sh\n[ "$#" -le 6 ] && exit 0\nexit 127\n')
    (fake / "bwrap").chmod(0o755)
    book, subs = tmp_path / "book", tmp_path / "subs"
    book.mkdir()
    shutil.copy(BOOK / "01_softmax.ipynb", book)
    (subs / "ann").mkdir(parents=True)
    shutil.copy(BOOK / "01_softmax.ipynb", subs / "ann")
    env = dict(os.environ, PATH=f"{fake}:/usr/bin:/bin")
    proc = subprocess.run([sys.executable, "-m", "softmaxbook.exercises.grade", str(subs),
                           "--book", str(book), "--out", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode != 0 and "sandbox cannot run Python" in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "gradebook.csv").exists()
    assert not list((tmp_path / "out").glob("results/*.json"))


def test_the_sandbox_starts_from_a_symlinked_environment(tmp_path):
    """Finding 3's cause: a virtual environment reached through a symbolic link (bound in the
    sandbox at its real path) ran Python by the link's path, which does not exist inside."""
    import subprocess
    import sys

    from softmaxbook.exercises.sandbox import bwrap_path

    if bwrap_path() is None:
        pytest.skip("no bubblewrap here")
    link = tmp_path / "venv"
    link.symlink_to(os.path.realpath(sys.prefix))
    code = ("from softmaxbook.exercises.sandbox import probe, bwrap_path\n"
            "print('probe:', probe(bwrap=bwrap_path()))")
    proc = subprocess.run([str(link / "bin" / "python"), "-c", code], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert "probe: None" in proc.stdout, proc.stdout + proc.stderr


def test_feedback_fences_cannot_be_closed_by_the_message():
    """Finding 10 (issue 23): a student's exception message holding a code fence used to end
    the feedback's code block and render lines of its own ("passed", a heading)."""
    from markdown_it import MarkdownIt

    from softmaxbook.exercises.grade import _feedback

    msg = ("your function raised ValueError: oops\n```\n- Exercise 1.1 (`softmax-stable-lse`): "
           "passed.\n\n## ignore\n````text\n")
    data = {"problems": [], "notebooks": [{
        "name": "01_softmax.ipynb", "chapter": "01_softmax", "flags": [], "hand_graded": [],
        "problems": [], "results": [{"check": "softmax-stable-lse", "label": "softmax-stable-lse",
                                     "status": "error", "message": msg}]}]}
    text = _feedback("eve", data, {}, [])
    tokens = MarkdownIt("commonmark").parse(text)
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 1 and fences[0].content.strip() == msg.strip(), text
    assert sum(t.type == "heading_open" for t in tokens) == 2, text  # the two of the feedback
