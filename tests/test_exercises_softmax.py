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


def global_max_lse(x):  # right except that every row is shifted by the overall maximum
    m = x.max()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return m + torch.log(torch.exp(x - m).sum(dim=-1))


def torch_lse(x):
    return torch.logsumexp(x, dim=-1)


def method_lse(x):
    return x.logsumexp(-1)


def special_lse(x):
    return torch.special.logsumexp(x, -1)


def log_softmax_lse(x):  # LSE = x_0 - log p_0, from torch's log_softmax
    return x[..., 0] - torch.nn.functional.log_softmax(x, dim=-1)[..., 0]


def library_lse(x):
    from softmaxbook.softmax import logsumexp
    return logsumexp(x)


def library_softmax_lse(x):  # LSE = x_0 - log p_0, from the book's softmax
    from softmaxbook.softmax import softmax
    return x[..., 0] - torch.log(softmax(x)[..., 0])


def guarded_library_lse(x):  # the learner swallows errors: the check must still see the call
    from softmaxbook.softmax import logsumexp
    try:
        return logsumexp(x)
    except Exception:
        return right_lse(x)


def test_lse_accepts_right_answer(capsys):
    assert check("softmax-stable-lse", right_lse)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 7 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (naive_lse, r"x = \[1000, 999, 990\] \(exp overflows\)"),
    (max_of_exp_lse, r"for input x = \[1000, 999, 990\].*NaN"),
    (unguarded_lse, r"a row of -inf\) your result contains NaN"),
    (keepdim_lse, "should have shape"),
    (global_max_lse, r"x = \[\[1000, 999\], \[-1000, -1001\], \[3, 3\]\].*own maximum"
                     r"(.|\n)*Hint: shift each row by its own maximum"),
    (torch_lse, r"calls torch.logsumexp, which this exercise forbids"),
    (method_lse, r"calls torch.logsumexp, which this exercise forbids"),
    (special_lse, r"calls torch.logsumexp, which this exercise forbids"),
    (log_softmax_lse, r"calls torch.log_softmax, which this exercise forbids"),
    (library_lse, r"calls a function of the book's library"),
    (library_softmax_lse, r"calls a function of the book's library"),
    (guarded_library_lse, r"calls a function of the book's library"),
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


def global_max_ce(logits, target):  # every row shifted by the overall maximum
    m = logits.max()
    lse = m + torch.log(torch.exp(logits - m).sum(dim=-1))
    return (lse - logits.gather(-1, target[:, None]).squeeze(-1)).mean()


def one_hot_ce(logits, target):  # right, except 0 * log 0 = NaN at a -inf logit
    m = logits.amax(dim=-1, keepdim=True)
    log_p = logits - m - torch.log(torch.exp(logits - m).sum(dim=-1, keepdim=True))
    y = torch.nn.functional.one_hot(target, logits.shape[-1])
    return -(y * log_p).sum(-1).mean()


def torch_ce(logits, target):
    return torch.nn.functional.cross_entropy(logits, target)


def library_ce(logits, target):
    from softmaxbook.softmax import cross_entropy
    return cross_entropy(logits, target)


def log_softmax_ce(logits, target):
    log_p = logits.log_softmax(-1)
    return -log_p.gather(-1, target[:, None]).mean()


def per_example_ce(logits, target):
    m = logits.amax(dim=-1, keepdim=True)
    lse = m.squeeze(-1) + torch.log(torch.exp(logits - m).sum(dim=-1))
    return lse - logits.gather(-1, target[:, None]).squeeze(-1)


def test_ce_accepts_right_answer(capsys):
    assert check("softmax-cross-entropy", right_ce)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 6 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (naive_ce, r"\(huge logits\)"),
    (wrong_sign_ce, r"logits = \[\[2, 1, 0.1\]\]"),
    (sum_not_mean_ce, r"target = \[0, 0\] \(huge logits\)\n  expected result tensor\(500\)"),
    (per_example_ce, "should be one number"),
    (global_max_ce, r"\[-1000, -1001\]\] \(float64\), target = \[0, 1\] \(each row needs its "
                    r"own maximum\)(.|\n)*Hint: shift each row by its own maximum"),
    (one_hot_ce, r"\[\[0, -inf, 1\]\], target = \[2\] \(an impossible class\) your result is "
                 r"NaN(.|\n)*0 \* \(-inf\) = NaN"),
    (torch_ce, r"calls torch.nn.functional.cross_entropy, which this exercise forbids"),
    (log_softmax_ce, r"calls torch.log_softmax, which this exercise forbids"),
    (library_ce, r"calls a function of the book's library"),
    (lambda logits, target: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_ce_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("softmax-cross-entropy", answer)


def test_forbidding_leaves_the_library_usable_afterwards():
    from softmaxbook.softmax import logsumexp
    with pytest.raises(ExerciseCheckFailed):
        check("softmax-stable-lse", library_lse)
    assert torch.isclose(logsumexp(torch.tensor([0.0, 0.0])), torch.tensor(2.0).log())


def test_hints_do_not_give_the_answer_away():
    import softmaxbook.exercises.softmax as ex
    for hint in (ex._NAN_HINT, ex._LSE_HINT, ex._ROW_HINT, ex._CE_HINT, ex._CE_NAN_HINT):
        assert "torch.where" not in hint and "isinf" not in hint


def test_notebook_labels_match_the_registered_checks():
    # every exercise-start label with a check cell names a registered check, and vice versa
    import json
    import re
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "book" / "01_softmax.ipynb")
                    .read_text())
    text = ["".join(c["source"]) for c in nb["cells"]]
    checked = {m for t in text for m in re.findall(r'check\("([^"]+)"', t)}
    coding = {m for t in text for m in re.findall(r"```\{exercise-start\}\n:label: (\S+)", t)}
    assert checked == coding == set(registered("softmax"))
