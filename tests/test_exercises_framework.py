"""The exercise-check framework, through the template's worked example."""

import pytest
import torch

from softmaxbook.exercises import (ExerciseCheckFailed, check, describe, exercise, expect_close,
                                   registered)


def normalise(w):
    return w / w.sum(dim=-1, keepdim=True)


def test_right_answer_passes_and_prints(capsys):
    result = check("template-normalise", normalise)
    assert result and "✓ Exercise template-normalise" in capsys.readouterr().out
    assert result._ipython_display_() is None and "correct" in repr(result)


def test_stub_and_missing_answers_fail_helpfully():
    def stub(w):
        raise NotImplementedError("Exercise template-normalise: write the body of normalise")

    with pytest.raises(ExerciseCheckFailed, match="still raises NotImplementedError"):
        check("template-normalise", stub)
    with pytest.raises(ExerciseCheckFailed, match=r"no answer yet: the value is still `...`"):
        check("template-normalise", ...)
    with pytest.raises(ExerciseCheckFailed, match="expected a function"):
        check("template-normalise", 3)


@pytest.mark.parametrize("wrong,message", [
    (lambda w: w / w.sum(), r"for input w = \[\[1.0, 3.0\], \[2.0, 2.0\]\]"),       # no keepdim, wrong total
    (lambda w: w.exp() / w.exp().sum(-1, keepdim=True), r"expected result"),     # a softmax
    (lambda w: w.div_(w.sum(-1, keepdim=True)), "changed its input in place"),  # in place
    (lambda w: w.sum(-1), "should have shape"),
    (lambda w: 1 / 0, "your function raised ZeroDivisionError"),
])
def test_wrong_answers_fail_with_the_input(wrong, message):
    with pytest.raises(ExerciseCheckFailed, match=message) as info:
        check("template-normalise", wrong)
    assert "Exercise template-normalise" in str(info.value)


def test_message_shows_without_traceback_in_ipython():
    err = ExerciseCheckFailed("Exercise x: nope")
    assert err._render_traceback_() == ["\x1b[31m✗ Exercise x: nope\x1b[0m"]


def test_unknown_labels_and_duplicates():
    with pytest.raises(ValueError, match="'nosuch-thing' is not a known exercise"):
        check("nosuch-thing", normalise)
    with pytest.raises(TypeError, match="argument 'label' must be a str"):
        check(3, normalise)
    with pytest.raises(ValueError, match="registered twice"):
        exercise("template-normalise", "again")(lambda a: None)
    with pytest.raises(ValueError, match="must look like"):
        exercise("nodash", "x")
    assert "template-normalise" in registered("template")


def test_expect_close_reports_nan_and_shape():
    with pytest.raises(ExerciseCheckFailed, match="nan"):
        expect_close(torch.tensor([float("nan")]), torch.tensor([1.0]), input_desc="x")
    expect_close(torch.tensor([1.0, 2.0]), [1.0, 2.0 + 1e-9], input_desc="x")
    assert describe(torch.arange(20.0)).startswith("tensor([0, 1, 2")
    assert "shape (20,)" in describe(torch.arange(20.0))


def test_messages_are_wrapped_to_the_code_width(capsys):
    # The ✓ line and the ✗ message appear under code cells on the book's pages: no line may be
    # wider than the book's code (76 columns), or it scrolls sideways.
    from softmaxbook.exercises import _wrap

    text = _wrap("✗ Exercise x (a title): for input " + "word " * 40 + "\n  expected 1\nHint: "
                 + "hint " * 30)
    lines = text.split("\n")
    assert max(map(len, lines)) <= 76 and len(lines) > 4
    assert lines[1].startswith("  ") and "  expected 1" in lines
    assert " ".join(text.split()).count("word") == 40


def test_mistyped_label_is_one_line_listing_the_valid_ones():
    from softmaxbook.exercises import ExerciseLabelError

    with pytest.raises(ExerciseLabelError) as info:
        check("template-normalize", normalise)
    lines = info.value._render_traceback_()
    assert len(lines) == 1 and "template-normalise" in lines[0]
    assert "valid labels" in lines[0]


def _lse_forbidding(func):
    from softmaxbook.exercises import call

    return call(func, torch.tensor([1.0, 2.0]), input_desc="x = [1, 2]",
                forbid={torch.logsumexp: "torch.logsumexp"},
                forbid_reason="Build it from max, exp, sum and log.")


@pytest.mark.parametrize("cheat", [
    lambda x: torch.logsumexp(x, -1),
    lambda x: x.logsumexp(-1),
    lambda x: torch.special.logsumexp(x, -1),
])
def test_a_forbidden_function_fails_the_check(cheat):
    with pytest.raises(ExerciseCheckFailed, match="calls torch.logsumexp, which this exercise "
                                                  "forbids. Build it"):
        _lse_forbidding(cheat)


def test_a_forbidden_call_is_not_swallowed_by_the_learners_except():
    def sneaky(x):
        try:
            return torch.logsumexp(x, -1)
        except Exception:
            return x.max()

    with pytest.raises(ExerciseCheckFailed, match="forbids"):
        _lse_forbidding(sneaky)


def test_allowed_functions_pass_under_forbid():
    def honest(x):
        m = x.max(-1).values
        return m + (x - m).exp().sum(-1).log()

    assert torch.isclose(_lse_forbidding(honest), torch.logsumexp(torch.tensor([1.0, 2.0]), -1))


def test_global_rng_use_fails_when_forbidden():
    from softmaxbook.exercises import call

    g = torch.Generator().manual_seed(0)
    state = torch.get_rng_state()
    with pytest.raises(ExerciseCheckFailed, match="global generator"):
        call(lambda n, generator: torch.rand(n), 3, g, input_desc="n = 3", no_global_rng=True)
    assert torch.equal(state, torch.get_rng_state())
    out = call(lambda n, generator: torch.rand(n, generator=generator), 3, g,
               input_desc="n = 3", no_global_rng=True)
    assert out.shape == (3,)


def test_watch_calls_sees_calls_however_imported_and_restores_the_profiler():
    import sys

    from softmaxbook.exercises import watch_calls
    from softmaxbook.softmax import logsumexp as alias

    before = sys.getprofile()
    with watch_calls(alias) as seen:
        import softmaxbook.softmax as sm
        sm.logsumexp(torch.zeros(3), dim=0)
    assert seen and seen[0] == "logsumexp"
    with watch_calls(alias) as seen:
        torch.logsumexp(torch.zeros(3), dim=0)
    assert seen == []
    assert sys.getprofile() is before



def test_expect_close_compares_python_floats_in_float64():
    """A right answer returned as a Python float passes a tight tolerance (it was made float32,
    1e-8 off, and failed at rtol 1e-9); a float32 tensor still does not."""
    import pytest
    import torch

    from softmaxbook.exercises import expect_close

    x = 0.1 + 1e-12
    expect_close(x, torch.tensor(0.1, dtype=torch.float64), input_desc="x", rtol=1e-9, atol=0)
    expect_close(torch.tensor(x, dtype=torch.float64), 0.1, input_desc="x", rtol=1e-9, atol=0)
    with pytest.raises(AssertionError):
        expect_close(torch.tensor(0.1), 0.1, input_desc="x", rtol=1e-9, atol=0)


def test_a_mismatch_never_shows_two_identical_looking_values():
    # the review's case: a float32 answer 1e-8 off a float64 expectation looked like
    # "expected 0.19801 but got 0.19801"
    from softmaxbook.exercises import expect_close, expect_equal
    exp = torch.tensor(0.198012345678, dtype=torch.float64)
    got = exp.float()
    with pytest.raises(ExerciseCheckFailed) as info:
        expect_close(got, exp, input_desc="x", rtol=1e-12, atol=0)
    text = str(info.value)
    lines = [ln for ln in text.splitlines() if "expected" in ln or "but got" in ln]
    shown = [ln.split("result", 1)[-1].split("got", 1)[-1].strip() for ln in lines[:2]]
    assert shown[0] != shown[1], text
    assert "0.19801235198974609" in text and "torch.float32" in text
    # values that differ in the 6th digit are shown as before, with 6 digits
    with pytest.raises(ExerciseCheckFailed, match=r"expected result tensor\(0\.5\)\n  but got +tensor\(0\.6\)"):
        expect_close(0.6, 0.5, input_desc="x")
    # a difference past the entries shown is located
    e = torch.zeros(20, dtype=torch.float64)
    g = e.clone()
    g[13] = 1e-3
    with pytest.raises(ExerciseCheckFailed, match=r"first difference at index \(13,\)"):
        expect_close(g, e, input_desc="x", atol=1e-6)
    with pytest.raises(ExerciseCheckFailed, match=r"first difference at index \(1, 3\)"):
        expect_equal(g.reshape(2, 10), e.reshape(2, 10), input_desc="x")
