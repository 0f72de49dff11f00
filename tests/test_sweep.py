"""tools/sweep.py: the tool that measures an assert's false-alarm rate over many seeds.

A small notebook stands in for a chapter; its asserts have known failure seeds (computed here
independently from the same generator), known margins, and one that cannot fail.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import sweep  # noqa: E402

CELLS = [
    # 0: the seeding cell every chapter starts with
    "from softmaxbook.seeding import seed_everything\n"
    "import torch\n"
    "SEED, generator = seed_everything(3)\n",
    # 1: fails for about one seed in 50; its margin is u - 0.02
    "%matplotlib inline\n"
    "u = float(torch.rand((), generator=generator, dtype=torch.float64))\n"
    "assert u > 0.02, 'rare'\n",
    # 2: cannot fail, and its margin is the same under every seed
    "x = torch.ones(3, dtype=torch.float64)\n"
    "assert x.sum() >= 2.5\n",
    # 3: a cell that raises for some seeds; the next cell still runs
    "if u < 0.1:\n"
    "    raise RuntimeError('boom')\n",
    # 4: asserts in a loop, in a function, chained, 'and', allclose, (a < b).all()
    "import matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots()\n"
    "ax.plot([0, 1])\n"
    "plt.show()\n"
    "def inside(v):\n"
    "    assert v < 5\n"
    "for k in range(3):\n"
    "    inside(u + k)\n"
    "assert 0 <= u < 1\n"
    "assert u >= 0 and u <= 1.5\n"
    "d = torch.float64\n"
    "assert torch.allclose(torch.tensor(u, dtype=d), torch.tensor(u + 1e-9, dtype=d),\n"
    "                      rtol=0, atol=1e-6)\n"
    "assert (torch.tensor([u, 2 * u]) < 3).all()\n"
    "assert torch.equal(x, x)\n",
]


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    path = tmp_path_factory.mktemp("sweep") / "toy.ipynb"
    nbformat.write(nb, path)
    return path


def _u(seed: int) -> float:
    g = torch.Generator().manual_seed(seed)
    return float(torch.rand((), generator=g, dtype=torch.float64))


@pytest.fixture(scope="module")
def swept(notebook, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep-out") / "report.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "sweep.py"), str(notebook),
                           "--seeds", "150", "--start", "0", "-j", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out.read_text())


def _row(report, cell, line):
    return next(r for r in report["asserts"] if r["id"] == f"{cell}:{line}")


def test_expected_u_matches_the_chapter_generator():
    # the toy notebook's u comes from seed_everything's generator; check our independent copy
    import os
    from softmaxbook.seeding import seed_everything
    os.environ["SOFTMAXBOOK_SEED"] = "17"
    try:
        _, g = seed_everything(3)
        got = float(torch.rand((), generator=g, dtype=torch.float64))
    finally:
        del os.environ["SOFTMAXBOOK_SEED"]
    assert got == _u(17)


def test_a_one_in_fifty_failure_is_found_with_its_seeds(swept):
    _, report = swept
    row = _row(report, 1, 3)
    expected = [s for s in range(150) if not _u(s) > 0.02]
    assert expected, "the toy assert should fail for some of 150 seeds"
    assert row["seeds_run"] == 150
    assert row["failures"] == len(expected)
    assert row["failed_seeds"] == expected
    margins = [_u(s) - 0.02 for s in range(150)]
    assert math.isclose(row["min_margin"], min(margins), rel_tol=1e-12)
    # every seed's margin is kept, by seed
    assert [s for s, _ in row["margins"]] == list(range(150))
    assert all(math.isclose(m, _u(s) - 0.02, rel_tol=1e-12) for s, m in row["margins"])
    mean = sum(margins) / 150
    assert math.isclose(row["mean"], mean, rel_tol=1e-12)
    assert row["z"] == pytest.approx(mean / row["sd"])
    assert not row["same_every_seed"]


def test_an_assert_that_cannot_fail_is_flagged(swept):
    text, report = swept
    row = _row(report, 2, 2)
    assert row["failures"] == 0 and row["same_every_seed"]
    assert row["min_margin"] == 0.5
    assert "SAME EVERY SEED" in text
    # a seed-dependent assert is not flagged
    assert not _row(report, 4, 9)["same_every_seed"]


def test_raising_cells_are_reported_and_later_cells_run(swept):
    text, report = swept
    raised = [s for s in range(150) if _u(s) < 0.1]
    assert report["cell_errors"]["3"] == {"RuntimeError: boom": raised}
    assert _row(report, 4, 9)["seeds_run"] == 150
    assert "cell 3 raised under" in text


def test_margins_of_each_assert_form(swept):
    _, report = swept
    us = [_u(s) for s in range(150)]
    # in a function called in a loop: the smallest margin of the three calls, 5 - (u + 2)
    assert _row(report, 4, 6)["min_margin"] == pytest.approx(min(3 - u for u in us))
    # chained 0 <= u < 1: the smaller pair margin
    assert _row(report, 4, 9)["min_margin"] == pytest.approx(min(min(u, 1 - u) for u in us))
    # u >= 0 and u <= 1.5
    assert _row(report, 4, 10)["min_margin"] == pytest.approx(min(us))
    # allclose: atol + rtol |b| - |a - b| = 1e-6 - 1e-9
    assert _row(report, 4, 12)["min_margin"] == pytest.approx(1e-6 - 1e-9, rel=1e-6)
    # (a < b).all(): min over elements of 3 - a
    assert _row(report, 4, 14)["min_margin"] == pytest.approx(min(3 - 2 * u for u in us))
    # torch.equal: an outcome but no margin
    row = _row(report, 4, 15)
    assert row["failures"] == 0 and row["min_margin"] is None


def test_bad_arguments_name_the_argument(notebook):
    with pytest.raises(SystemExit, match="argument '--cells'"):
        sweep.parse_cells("0,9", 5)
    with pytest.raises(SystemExit, match="argument '--cells'"):
        sweep.parse_cells("a-b", 5)
    with pytest.raises(SystemExit, match="argument 'chapter'"):
        sweep.resolve_chapter("99")
    for bad in ("0", "-5", "nan"):
        with pytest.raises(SystemExit, match="argument '--timeout'"):
            sweep.main([str(notebook), "--timeout", bad])
    assert sweep.parse_cells("0,2-3", 5) == [0, 2, 3]
    assert sweep.resolve_chapter("2").name == "02_choice.ipynb"


def test_list_shows_cells_and_asserts(notebook):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "sweep.py"), str(notebook),
                           "--list"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "assert 1:3: u > 0.02" in proc.stdout
    assert "assert 4:6: v < 5" in proc.stdout


def test_a_seed_that_runs_too_long_is_killed_and_reported(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import time\ntime.sleep(60)\nassert True\n")]
    path = tmp_path / "slow.ipynb"
    nbformat.write(nb, path)
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "sweep.py"), str(path),
                           "--seeds", "1", "--timeout", "2", "--json",
                           str(tmp_path / "r.json")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert "killed" in proc.stdout


def test_a_stopped_sweep_resumes_from_its_journal(notebook, tmp_path):
    report = tmp_path / "r.json"
    journal = tmp_path / "r.partial.jsonl"
    cmd = [sys.executable, str(ROOT / "tools" / "sweep.py"), str(notebook), "--seeds", "6",
           "--start", "0", "-j", "1", "--json", str(report)]
    # as if seeds 0-2 had finished before the sweep was stopped (their lines kept), the last
    # line cut short
    first = subprocess.run(cmd[:4] + ["3"] + cmd[5:], capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0 and not journal.exists()
    full = json.loads(report.read_text())
    assert full["seeds"] == [0, 1, 2]
    lines = []
    for s in range(3):
        lines.append(json.dumps({"seed": s, "seconds": 0.0, "cells": {},
                                 "asserts": {"1:3": {"runs": 1, "failed": False,
                                                     "margin": 123.0, "error": None}}}))
    journal.write_text("\n".join(lines) + "\n{\"seed\": 3, \"cel")
    proc = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resuming: 3 seeds" in proc.stderr
    row = _row(json.loads(report.read_text()), 1, 3)
    # the three journal seeds were not rerun (their made-up margin 123 is kept) ...
    assert row["seeds_run"] == 6 and row["mean"] > 60
    # ... and the other three ran
    assert row["min_margin"] == pytest.approx(min(_u(s) - 0.02 for s in range(3, 6)))
    assert not journal.exists()


def test_a_child_that_cannot_open_its_log_exits_instead_of_running_seeds_twice(tmp_path):
    # the scratch folder vanished under a running sweep: the child must exit, and its seed is
    # reported as crashed exactly once
    import os
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("assert True\n")]
    path = tmp_path / "one.ipynb"
    nbformat.write(nb, path)
    gone = tmp_path / "gone"
    pid = os.getpid()
    runs = sweep.run_seeds(path, [0], [1, 2], jobs=1, threads=1, timeout=60, tmp=gone)
    assert os.getpid() == pid
    assert [r["seed"] for r in runs] == [1, 2]
    assert all("crash" in r for r in runs)
