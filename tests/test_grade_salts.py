"""The checks under the grader's secret per-run salt (issue 23, "Hidden inputs").

The grader runs every check under a fresh secret salt (``softmaxbook.exercises.salted``): every
random input changes with it and each check adds salted variants of its fixed edge cases. Here:

* every reference solution of the book (the chapters' ``solution`` cells) passes every check under
  random salts: a salt must never reject a right answer;
* the checks' known wrong answers (the rejection tests of ``tests/test_exercises_<topic>.py``)
  are still rejected, and their right answers accepted, under nonzero salts (a slow test);
* salt 0 is the public inputs of the notebook's ``check()``: unchanged.

Run as a script for the full measurement (what the comments quote)::

    python tests/test_grade_salts.py --salts 200          # reference solutions, random salts
    python tests/test_grade_salts.py --reject-salts 3     # the rejection tests, random salts

Measured (2026-11-26): the reference solutions, 25 checks x 200 random salts = 5000 runs, 0
rejected, twice (before and after the grader's last commits: 10000 runs, 0 rejected; 95 % upper
bound on the rate 3/10000 per check run). By
construction the sampler checks' statistical tests (chi-square, binomial, KS at p > 1e-6) reject a
right sampler with probability about 1e-6 each under a new salt: at most about 1e-5 per graded
notebook of chapter 6, 4e-6 of chapter 7, which 5000 runs cannot see. The rejection tests of all
ten topics (about 480 tests, the "slow" ones left out) under 5 random salts (1316257859389036726,
1158257755090756889, 1342301468905286338, 2107314687510823267, 2078413680415427479): every wrong
answer rejected. The failures are the right answers' "correct on N test cases" lines (they count
the salted cases), and under 1158257755090756889 one wrong ECE (the signed gap) rejected at the
bin-edge case instead of the 400 random rows, whose signed and absolute gaps agree there.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from conftest import chapter_notebooks  # noqa: E402
from softmaxbook.exercises import check, check_generator, check_salt, salted  # noqa: E402
from softmaxbook.exercises.index import notebook_exercises  # noqa: E402

#: checks that take most of the time (about 1 s per salt together): run under fewer salts here
SLOW_CHECKS = {"seqgan-surrogate", "choice-values", "choice-grad-alpha"}


def reference_answers() -> list[tuple[str, object]]:
    """(check label, the book's reference answer) for every auto-checked exercise: each chapter's
    first code cell (its imports) and its solution cells, run in a namespace of their own."""
    out = []
    for path in chapter_notebooks():
        nb = nbformat.read(path, as_version=4)
        exs = [e for e in notebook_exercises(nb, path.stem) if e.check]
        if not exs:
            continue
        code = [c for c in nb.cells if c.cell_type == "code"]
        ns: dict = {}
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code[0].source, f"{path.stem}:first", "exec"), ns)  # noqa: S102
            for c in code:
                if "solution" in c.metadata.get("tags", []):
                    exec(compile(c.source, f"{path.stem}:solution", "exec"), ns)  # noqa: S102
        out += [(e.check, eval(e.answer, ns)) for e in exs]  # noqa: S307
    return out


def run_references(refs, salts, skip_after: int | None = None) -> list[str]:
    """The checks that rejected a reference answer, as 'label under salt S: message'."""
    failures = []
    for k, salt in enumerate(salts):
        for label, answer in refs:
            if skip_after is not None and k >= skip_after and label in SLOW_CHECKS:
                continue
            try:
                with salted(salt), contextlib.redirect_stdout(io.StringIO()):
                    check(label, answer)
            except BaseException as err:  # noqa: BLE001
                failures.append(f"{label} under salt {salt}: {str(err)[:500]}")
    return failures


@pytest.fixture(scope="module")
def refs():
    found = reference_answers()
    assert len(found) >= 25, [label for label, _ in found]
    return found


def test_salt_zero_is_the_public_inputs():
    assert check_salt() == 0
    a = torch.rand(5, generator=check_generator(7))
    assert torch.equal(a, torch.rand(5, generator=torch.Generator().manual_seed(7)))
    with salted(123) as s:
        assert s == 123 and check_salt() == 123
        b = torch.rand(5, generator=check_generator(7))
        assert torch.equal(b, torch.rand(5, generator=check_generator(7)))  # same salt: same
        assert not torch.equal(a, b)
        with salted(124):
            assert not torch.equal(b, torch.rand(5, generator=check_generator(7)))
    assert check_salt() == 0
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(ValueError, match="argument 'salt'"):
            with salted(bad):
                pass


def test_checks_draw_only_from_check_generator():
    """No check module seeds a generator of its own: its inputs would be the same under every
    salt (the grader's secret inputs would not be secret)."""
    import softmaxbook.exercises as E

    folder = Path(E.__file__).parent
    own = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"
           and re.search(r"manual_seed\(|torch\.default_generator|np\.random\.", p.read_text())]
    assert not own, own


def test_salted_checks_add_cases(refs, capsys):
    """A salted run checks the fixed cases and salted variants: it reports more cases."""
    label, answer = next((lb, a) for lb, a in refs if lb == "softmax-stable-lse")
    check(label, answer)
    with salted(99):
        check(label, answer)
    counts = [int(n) for n in re.findall(r"on (\d+) test cases", capsys.readouterr().out)]
    assert len(counts) == 2 and counts[1] > counts[0], counts


def test_every_check_changes_its_inputs_with_the_salt(refs):
    """Each check makes calls whose inputs are not among its public ones under a salt, so a
    table of the public inputs' answers cannot pass any check."""
    from softmaxbook.exercises.sandbox_runner import digest

    def inputs(label, answer, salt):
        seen = set()

        def spy(*args, **kwargs):
            seen.add(digest([list(args), kwargs]))
            return answer(*args, **kwargs)

        with salted(salt), contextlib.redirect_stdout(io.StringIO()):
            check(label, spy)
        return seen

    same = [label for label, answer in refs if label != "seqgan-surrogate"
            and inputs(label, answer, 1234567) <= inputs(label, answer, 0)]
    assert not same, same


def test_reference_solutions_pass_under_ten_salts(refs):
    """Salts 1 to 10 (the slow checks: 1 to 3), fixed so that the suite is deterministic: the
    sampler checks' statistical tests reject a right sampler with probability about 1e-6 each
    under a salt they have not seen. The script's run over 200 random salts is quoted in the
    module's docstring."""
    failures = run_references(refs, range(1, 11), skip_after=3)
    assert not failures, "\n".join(failures)


def run_rejection_tests(salt: int) -> tuple[int, list[str]]:
    """Run every tests/test_exercises_*.py under ``salt``; (return code, the failures that are
    neither a right answer's 'correct on N test cases' line, which counts the salted cases, nor
    a wrong answer rejected at another case than the test expects)."""
    # COLUMNS: a wide terminal, so that every failure header keeps its "___ name ___" rule (at
    # 80 columns a test id of 75 characters gets one underscore a side, which the split below
    # missed, and the count check then failed the whole run)
    env = dict(os.environ, SOFTMAXBOOK_TEST_SALT=str(salt), OMP_NUM_THREADS="1", COLUMNS="250")
    files = sorted(p.name for p in HERE.glob("test_exercises_*.py"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "check_salt_plugin", "-q",
                           "-p", "no:cacheprovider", "-m", "not slow", "--tb=short", *files],
                          cwd=HERE, env=env, capture_output=True, text=True, timeout=900)
    blocks = re.split(r"\n_{3,} (.+?) _{3,}\n", proc.stdout)
    failures = dict(zip(blocks[1::2], blocks[2::2]))
    errors = [f"{name}:\n{text[-1500:]}" for name, text in failures.items()
              if not re.search(r"correct on \d+ test cases", text)
              and not re.search(r"Regex pattern did not match\.\n.*\n.*Actual message: "
                                r"[\"']Exercise ", text)]
    n_failed = re.search(r"(\d+) failed", proc.stdout)
    if proc.returncode not in (0, 1) or "passed" not in proc.stdout or \
            len(failures) != (int(n_failed.group(1)) if n_failed else 0):
        errors.append(proc.stdout[-3000:] + proc.stderr[-3000:])
    return proc.returncode, errors


@pytest.mark.slow
def test_wrong_answers_are_still_rejected_under_a_salt():
    """Under salt 11 (fixed: the suite stays deterministic; the script draws random ones)."""
    salt = 11
    _, errors = run_rejection_tests(salt)
    assert not errors, f"salt {salt}:\n" + "\n".join(errors)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--salts", type=int, default=0)
    parser.add_argument("--reject-salts", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    status = 0
    if args.salts:
        refs = reference_answers()
        salts = [secrets.randbelow(2 ** 62 - 1) + 1 for _ in range(args.salts)]
        failures = run_references(refs, salts)
        print(f"reference solutions: {len(refs)} checks x {len(salts)} random salts = "
              f"{len(refs) * len(salts)} runs, {len(failures)} rejected")
        for f in failures:
            print("  ", f)
        status |= bool(failures)
    for _ in range(args.reject_salts):
        salt = secrets.randbelow(2 ** 62 - 1) + 1
        code, errors = run_rejection_tests(salt)
        print(f"rejection tests under salt {salt}: pytest exit {code}, "
              f"{len(errors)} failures other than the case counts")
        for e in errors:
            print("  ", e)
        status |= bool(errors)
    return status


if __name__ == "__main__":
    sys.exit(main())
