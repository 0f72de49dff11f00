"""Student notebooks: no solution code or text survives, and every check fails on its stub helpfully.

The full notebooks pass their checks: the build (and nbval) executes them, and every
`check(...)` cell must succeed there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, chapter_notebooks
from softmaxbook.exercises.student import make_student_notebook, strip_solution_markdown, stub_source

NOTEBOOKS = chapter_notebooks() + [ROOT / "tools" / "chapter_template.ipynb"]
CHECK_CALL = re.compile(r"""\bcheck\(\s*["']([\w-]+)["']""")


def solution_parts(nb):
    """(markdown lines, code lines) that belong to solutions in the full notebook."""
    md_lines, code_lines = [], []
    in_gated = False
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown":
            kept, in_gated_after, _ = strip_solution_markdown(cell.source, in_gated)
            kept_set = set(kept.splitlines())
            md_lines += [ln for ln in cell.source.splitlines() if ln not in kept_set]
            in_gated = in_gated_after
        elif "solution" in tags or in_gated:
            code_lines += _body_lines(cell.source)
    return md_lines, code_lines


def _body_lines(source: str) -> list[str]:
    """Lines of a solution that a stub must not keep: not def lines, docstrings or imports."""
    tree = ast.parse(source)
    keep = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            keep.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            keep.update(range(node.lineno, node.body[0].lineno))
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant):
                keep.update(range(first.lineno, first.end_lineno + 1))
            keep.update(d.lineno for d in node.decorator_list)
    return [ln for i, ln in enumerate(source.splitlines(), 1) if i not in keep]


def _significant(line: str) -> bool:
    s = line.strip()
    return len(s) >= 12 and not s.startswith(("#", "```", ":::", ":class:", ":label:"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_student_notebook_has_no_solutions(path: Path):
    full = nbformat.read(path, as_version=4)
    student = make_student_notebook(full)
    md_lines, code_lines = solution_parts(full)
    assert code_lines or md_lines, f"{path.name} has no solutions at all"
    elsewhere = "\n".join(c.source for c in full.cells
                          if c.cell_type == "code" and "solution" not in c.get("metadata", {}).get("tags", []))
    text = "\n".join(c.source for c in student.cells)
    for line in md_lines + code_lines:
        if _significant(line) and line.strip() not in elsewhere:
            assert line.strip() not in text, f"{path.name}: solution line survives: {line.strip()!r}"
    assert "{solution" not in text, f"{path.name}: a solution directive survives"
    for cell in student.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_check_fails_helpfully_on_its_stub(path: Path, tmp_path: Path):
    from nbclient import NotebookClient

    student = make_student_notebook(nbformat.read(path, as_version=4))
    checks = [(i, CHECK_CALL.search(c.source).group(1)) for i, c in enumerate(student.cells)
              if c.cell_type == "code" and CHECK_CALL.search(c.source)]
    assert checks, f"{path.name} has no check(...) cells"
    # Only what a check on a stub needs: the chapter's first code cell (imports, seed), the
    # answer cells as the student gets them, and the check cells. The chapter's own cells are
    # emptied (the build executes them; here they doubled the test's time: ten whole chapters).
    # A check that needed one of them would fail here with a NameError, not pass silently.
    first = next(i for i, c in enumerate(student.cells) if c.cell_type == "code")
    wanted = {first} | {i for i, _ in checks} | {
        i for i, c in enumerate(student.cells) if c.cell_type == "code"
        and {"exercise-stub", "exercise-answer"} & set(c.get("metadata", {}).get("tags", []))}
    for i, c in enumerate(student.cells):
        if c.cell_type == "code" and i not in wanted:
            c.source = ""
    client = NotebookClient(student, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    for i, label in checks:
        errors = [o for o in student.cells[i].outputs if o.output_type == "error"]
        assert errors, f"{path.name}: check({label!r}) passed on the student's stub"
        err = errors[0]
        assert err.ename == "ExerciseCheckFailed", (
            f"{path.name}: check({label!r}) on the stub raised {err.ename}: {err.evalue}")
        assert label in err.evalue, f"{path.name}: the message does not name the exercise: {err.evalue}"
        assert ("NotImplementedError" in err.evalue or "no answer yet" in err.evalue), (
            f"{path.name}: the message does not tell the student what to do: {err.evalue}")


def test_stub_keeps_signature_and_docstring():
    src = 'import torch\n\n\ndef f(x, *, dim=-1):\n    """Doc."""\n    y = x.exp()\n    return y / y.sum(dim)\n\nanswer = 0.5\nprint(answer)\n'
    stub = stub_source(src, "softmax-x")
    assert "def f(x, *, dim=-1):" in stub and '"""Doc."""' in stub and "import torch" in stub
    assert "raise NotImplementedError('Exercise softmax-x: write the body of f')" in stub
    assert "answer = ..." in stub
    assert "x.exp()" not in stub and "0.5" not in stub and "print" not in stub
    ns: dict = {}
    exec(stub, ns)
    with pytest.raises(NotImplementedError, match="softmax-x"):
        ns["f"](1)


def test_markdown_solutions_are_removed():
    text = ("Before.\n```{solution} ex-1\n:class: dropdown\n\nSecret text.\n```\nAfter.\n"
            "````{solution-start} ex-2\n````\nSecret two.")
    kept, in_gated, label = strip_solution_markdown(text)
    assert "Secret" not in kept and "Before." in kept and "After." in kept
    assert in_gated and label == "ex-2"
    kept, in_gated, _ = strip_solution_markdown("hidden\n```{solution-end}\n```\nvisible", True)
    assert kept == "visible" and not in_gated


def test_solution_cell_outside_a_solution_block_is_an_error():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.cells[0].metadata["tags"] = ["solution"]
    with pytest.raises(ValueError, match="solution-start"):
        make_student_notebook(nb)


def test_each_answer_cell_follows_its_own_exercise():
    # tester finding 12: three exercises in one markdown cell put all three answer cells after
    # the third task; each answer cell now follows its own task (and its hidden solution)
    md = ("## Exercises\n\n"
          "```{exercise}\n:label: t-one\n\nDerive one.\n```\n"
          "```{solution} t-one\n:class: dropdown\n\nSecret one.\n```\n\n"
          "````{exercise}\n:label: t-two\n\nShow two; a fenced example:\n"
          "```{exercise}\nnot a directive here: inside a fence\n```\n````\n"
          "```{solution} t-two\n\nSecret two.\n```\n\n"
          "```{exercise}\n:label: t-three\n\n(Exploration.) Try three.\n```\n"
          "```{solution} t-three\n\nSecret three.\n```")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(md)])
    out = make_student_notebook(nb, "00_test")
    texts = [c.source for c in out.cells]
    where = {k: next(i for i, t in enumerate(texts) if t.startswith(f"**Your answer to "
                                                                      f"Exercise {n}."))
             for n, k in enumerate(("t-one", "t-two", "t-three"), 1)}
    task = {k: next(i for i, t in enumerate(texts) if f":label: {k}" in t)
            for k in ("t-one", "t-two", "t-three")}
    assert task["t-one"] < where["t-one"] < task["t-two"] < where["t-two"] < task["t-three"]
    assert where["t-three"] > task["t-three"]
    assert not any("Secret" in t for t in texts)
    # the fenced look-alike stayed inside its exercise, and the heading kept its cell
    assert "inside a fence" in texts[task["t-two"]] and texts[task["t-one"] - 1] == "## Exercises"
