"""The checks of the softmax chapter's coding exercises accept right answers and reject wrong ones
with a message that names the input."""

from __future__ import annotations

import pytest
import torch

from softmaxbook.exercises import ExerciseCheckFailed, check, registered


def test_registered():
    assert registered("softmax") == ["softmax-cross-entropy", "softmax-stable-lse"]


# --- softmax-stable-lse ----------------------------------------------------------------------
def right_lse(x):
    m = x.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).squeeze(-1)


def naive_lse(x):
    return torch.log(torch.exp(x).sum(dim=-1))


def max_of_exp_lse(x):  # the source notes' recipe: shift by max(exp(x))
    c = torch.exp(x).amax(dim=-1, keepdim=True)
    return (c + torch.log(torch.exp(x - c).sum(dim=-1, keepdim=True))).squeeze(-1)


def unguarded_lse(x):  # right except for an all -inf row
    m = x.amax(dim=-1, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).squeeze(-1)


def keepdim_lse(x):
    return right_lse(x).unsqueeze(-1)


def test_lse_accepts_right_answer(capsys):
    assert check("softmax-stable-lse", right_lse)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 7 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (naive_lse, r"x = \[1000, 999, 990\] \(exp overflows\)"),
    (max_of_exp_lse, r"for input x = \[1000, 999, 990\].*NaN"),
    (unguarded_lse, r"a row of -inf\) your result contains NaN"),
    (keepdim_lse, "should have shape"),
    (lambda x: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_lse_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("softmax-stable-lse", answer)


def test_instructors_page_shows_the_real_messages(capsys):
    # book/instructors.md quotes check()'s output for this exercise; keep it true.
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "book" / "instructors.md").read_text()
    check("softmax-stable-lse", right_lse)
    passed = " ".join(capsys.readouterr().out.split())
    assert f"`{passed}`" in page
    with pytest.raises(ExerciseCheckFailed) as info:
        check("softmax-stable-lse", naive_lse)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", info.value._render_traceback_()[0])
    assert f"```text\n{shown}\n```" in page


# --- softmax-cross-entropy -------------------------------------------------------------------
def right_ce(logits, target):
    m = logits.amax(dim=-1, keepdim=True)
    lse = m.squeeze(-1) + torch.log(torch.exp(logits - m).sum(dim=-1))
    return (lse - logits.gather(-1, target[:, None]).squeeze(-1)).mean()


def naive_ce(logits, target):
    p = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
    return -torch.log(p.gather(-1, target[:, None])).mean()


def wrong_sign_ce(logits, target):
    return -right_ce(logits, target)


def sum_not_mean_ce(logits, target):
    return right_ce(logits, target) * len(target)


def per_example_ce(logits, target):
    m = logits.amax(dim=-1, keepdim=True)
    lse = m.squeeze(-1) + torch.log(torch.exp(logits - m).sum(dim=-1))
    return lse - logits.gather(-1, target[:, None]).squeeze(-1)


def test_ce_accepts_right_answer(capsys):
    assert check("softmax-cross-entropy", right_ce)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 5 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (naive_ce, r"\(huge logits\)"),
    (wrong_sign_ce, r"logits = \[\[2, 1, 0.1\]\]"),
    (sum_not_mean_ce, r"target = \[0, 0\] \(huge logits\)\n  expected result tensor\(500\)"),
    (per_example_ce, "should be one number"),
    (..., "no answer yet"),
])
def test_ce_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("softmax-cross-entropy", answer)
