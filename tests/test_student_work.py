"""`book.py student` keeps students' work: an edited notebook in the work folder survives a rerun
(the new version goes beside it, and the command says so); an unedited one is updated; nothing
is executed (fast, quiet, no kernel) when there is no build cache; `book.py lab` opens the student
notebooks, and passes --allow-root when run as root."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time

import nbformat

from conftest import ROOT


def run_student(out, *chapters):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "book.py"), "student", *chapters,
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr, time.monotonic() - t0


def test_edited_notebook_survives(tmp_path):
    out = tmp_path / "work"
    text, seconds = run_student(out, "5")
    nb_path = out / "05_euler_lagrange.ipynb"
    assert nb_path.is_file()
    assert "Warning" not in text and "kernel" not in text.lower(), text
    # unedited: a rerun rewrites it in place, nothing beside it
    text, _ = run_student(out, "5")
    assert sorted(p.name for p in out.glob("*.ipynb")) == ["05_euler_lagrange.ipynb"]
    # edited: kept, the new version beside it, and the command says so
    nb = nbformat.read(nb_path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("my notes"))
    nbformat.write(nb, nb_path)
    (out / "notes.md").write_text("mine")
    text, _ = run_student(out, "5")
    assert "my notes" in nb_path.read_text()
    assert (out / "05_euler_lagrange (new).ipynb").is_file()
    assert "you have edited it" in text and "05_euler_lagrange (new).ipynb" in text
    assert (out / "notes.md").read_text() == "mine"
    assert seconds < 60, f"book.py student took {seconds:.0f} s for one chapter"
    # a rerun leaves an unedited (new) copy to be refreshed in place ...
    text, _ = run_student(out, "5")
    assert not (out / "05_euler_lagrange (new 2).ipynb").exists()
    # ... but a student who worked in the (new) copy keeps that work too (review of issue 23)
    new = out / "05_euler_lagrange (new).ipynb"
    nb = nbformat.read(new, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("my work in new"))
    nbformat.write(nb, new)
    text, _ = run_student(out, "5")
    assert "my work in new" in new.read_text() and "my notes" in nb_path.read_text()
    assert (out / "05_euler_lagrange (new 2).ipynb").is_file()
    assert "05_euler_lagrange (new 2).ipynb" in text


def _book_module():
    spec = importlib.util.spec_from_file_location("book_tool", ROOT / "tools" / "book.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_lab_opens_student_notebooks(tmp_path, monkeypatch):
    book = _book_module()
    calls = []
    monkeypatch.setattr(book, "setup", lambda *a: None)
    monkeypatch.setattr(book, "run", lambda cmd, **kw: calls.append([str(c) for c in cmd]))
    monkeypatch.setattr(book, "WORK", tmp_path / "work")
    monkeypatch.setattr(book, "student", lambda a: (tmp_path / "work").mkdir()
                        or (tmp_path / "work" / "01_softmax.ipynb").write_text("{}"))
    monkeypatch.setattr(book.os, "geteuid", lambda: 0)
    book.lab(argparse.Namespace(authors=False, lab_args=[]))
    assert calls[-1][1:3] == ["lab", str(tmp_path / "work")] and "--allow-root" in calls[-1]
    book.lab(argparse.Namespace(authors=True, lab_args=[]))
    assert calls[-1][2] == str(ROOT / "book")


def test_lab_passes_options_to_jupyterlab(monkeypatch, tmp_path):
    # `book.py lab --no-browser --port 8893` (with or without "--") reaches JupyterLab; other
    # commands still refuse options they do not know
    book = _book_module()
    calls = []
    monkeypatch.setattr(book, "setup", lambda *a: None)
    monkeypatch.setattr(book, "run", lambda cmd, **kw: calls.append([str(c) for c in cmd]))
    monkeypatch.setattr(book, "WORK", tmp_path)
    (tmp_path / "01_softmax.ipynb").write_text("{}")
    for argv in (["lab", "--no-browser", "--port", "8893"],
                 ["lab", "--", "--no-browser", "--port", "8893"],
                 ["lab", "--authors", "--no-browser", "--port", "8893"]):
        book.main(argv)
        assert calls[-1][-3:] == ["--no-browser", "--port", "8893"] and "--" not in calls[-1]
    assert calls[-1][2] == str(ROOT / "book")
    import pytest
    with pytest.raises(SystemExit):
        book.main(["clean", "--no-such-option"])
