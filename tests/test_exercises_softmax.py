"""The checks of the softmax chapter's coding exercises accept right answers and reject wrong ones
with a message that names the input."""

from __future__ import annotations

import pytest
import torch

from softmaxbook.exercises import ExerciseCheckFailed, check, registered


def test_registered():
    assert registered("softmax") == ["softmax-cross-entropy", "softmax-ex-se-gradient",
                                     "softmax-lse-merge", "softmax-stable-lse"]


# --- softmax-stable-lse ----------------------------------------------------------------------
def right_lse(x):
    m = x.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).squeeze(-1)


def right_lse_nan_to_num(x):  # another right answer: max(), nan_to_num, method chaining
    m = x.max(dim=-1, keepdim=True).values.nan_to_num(neginf=0.0)
    return (m + (x - m).exp().sum(-1, keepdim=True).log())[..., 0]


def right_lse_masked(x):  # and another: masked_fill on the dead rows, float64 inside
    m = x.amax(-1)
    dead = m == -float("inf")
    m = m.masked_fill(dead, 0.0)
    s = torch.exp((x - m[..., None]).double()).sum(-1)
    return (m.double() + torch.log(s)).to(x.dtype)


def min_shift_lse(x):  # shifted by the row minimum of the finite entries
    finite = torch.where(torch.isfinite(x), x, torch.full_like(x, float("inf")))
    c = finite.amin(-1, keepdim=True)
    c = torch.where(torch.isinf(c), torch.zeros_like(c), c)
    return (c + torch.log(torch.exp(x - c).sum(-1, keepdim=True))).squeeze(-1)


def first_entry_shift_lse(x):  # shifted by the first entry
    c = x[..., :1]
    c = torch.where(torch.isinf(c), torch.zeros_like(c), c)
    return (c + torch.log(torch.exp(x - c).sum(-1, keepdim=True))).squeeze(-1)


def mean_shift_lse(x):  # shifted by the mean of the finite entries
    finite = torch.isfinite(x)
    c = (torch.where(finite, x, 0.0).sum(-1, keepdim=True)
         / finite.sum(-1, keepdim=True).clamp(min=1))
    return (c + torch.log(torch.exp(x - c).sum(-1, keepdim=True))).squeeze(-1)


def last_entry_shift_lse(x):  # shifted by the last entry (cold review R3: it passed)
    c = x[..., -1:]
    c = torch.where(torch.isinf(c), torch.zeros_like(c), c)
    return (c + torch.log(torch.exp(x - c).sum(-1, keepdim=True))).squeeze(-1)


def scipy_lse(x):
    import scipy.special
    return torch.as_tensor(scipy.special.logsumexp(x.numpy(), axis=-1), dtype=x.dtype)


def scipy_imported_lse(x, _lse=__import__("scipy.special").special.logsumexp):
    return torch.as_tensor(_lse(x.numpy(), axis=-1), dtype=x.dtype)


def logcumsumexp_lse(x):
    return torch.logcumsumexp(x, -1)[..., -1]


def reduce_logaddexp_lse(x):
    import functools
    return functools.reduce(torch.logaddexp, x.unbind(-1))


def numpy_logaddexp_lse(x):
    import numpy as np
    return torch.as_tensor(np.logaddexp.reduce(x.numpy(), axis=-1), dtype=x.dtype)


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


def in_place_lse(x):  # right value, but shifts the caller's tensor in place
    m = x.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    x.sub_(m)
    return (m + torch.log(torch.exp(x).sum(dim=-1, keepdim=True))).squeeze(-1)


def half_precision_lse(x):  # the tester's float32_inside: input rounded to float16
    return right_lse(x.to(torch.float16).to(torch.float32)).to(x.dtype)


@pytest.mark.parametrize("answer", [right_lse, right_lse_nan_to_num, right_lse_masked])
def test_lse_accepts_right_answer(answer, capsys):
    assert check("softmax-stable-lse", answer)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 8 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (naive_lse, r"x = \[1000, 999, 990\] \(exp overflows\)"),
    (max_of_exp_lse, r"for input x = \[1000, 999, 990\].*NaN"),
    (unguarded_lse, r"a row of -inf\) your result contains NaN"),
    (keepdim_lse, "should have shape"),
    (global_max_lse, r"x = \[\[1000, 999\], \[-1000, -1001\], \[3, 3\]\].*own maximum"
                     r"(.|\n)*Hint: shift each row by its own maximum"),
    # review of the third edition: shifts by another entry than the maximum overflow on a row
    # whose maximum is last and 1000 above the rest
    # (the minimum of [-1000, -1001, -2000] is 1000 below its maximum too: it fails there first)
    (min_shift_lse, r"x = \[-1000, -1001, -2000\](.|\n)*but got +tensor\(inf\)"
                    r"(.|\n)*Hint: an exponent overflowed"),
    (first_entry_shift_lse, r"x = \[0, -inf, 1000\](.|\n)*but got +tensor\(inf\)"),
    (mean_shift_lse, r"x = \[-1000, -1001, -2000\](.|\n)*but got +tensor\(inf\)"),
    # cold review R3: every hard row had its maximum last, so a shift by the last entry passed
    (last_entry_shift_lse, r"x = \[-1000, -1001, -2000\](.|\n)*but got +tensor\(inf\)"
                           r"(.|\n)*Hint: an exponent overflowed"),
    (scipy_lse, r"calls scipy.special.logsumexp, which this exercise forbids"),
    (scipy_imported_lse, r"calls scipy.special.logsumexp, which this exercise forbids"),
    (logcumsumexp_lse, r"calls torch.logcumsumexp, which this exercise forbids"),
    (reduce_logaddexp_lse, r"calls torch.logaddexp, which this exercise forbids"),
    (numpy_logaddexp_lse, r"calls numpy.logaddexp, which this exercise forbids"),
    (torch_lse, r"calls torch.logsumexp, which this exercise forbids"),
    (method_lse, r"calls torch.logsumexp, which this exercise forbids"),
    (special_lse, r"calls torch.logsumexp, which this exercise forbids"),
    (log_softmax_lse, r"calls torch.log_softmax, which this exercise forbids"),
    (library_lse, r"calls a function of the book's library"),
    (library_softmax_lse, r"calls a function of the book's library"),
    (guarded_library_lse, r"calls a function of the book's library"),
    # independent review: an answer that changes its input in place passed
    (in_place_lse, r"x = \[1, 2, 3\] your function changed its argument 'x' in place"),
    # independent tester: rounds through float16, right on inputs float16 holds exactly
    (half_precision_lse, r"x = \[770.911, 774.909, 769.123, 775.001\]"),
    (lambda x: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_lse_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("softmax-stable-lse", answer)


@pytest.mark.parametrize("salt", [1, 2, 3, 12345])
def test_lse_rejects_a_last_entry_shift_under_any_salt(salt):
    # the salted cases too: the salted rows had their maximum last or a spread below 88
    from softmaxbook.exercises import salted
    with salted(salt), pytest.raises(ExerciseCheckFailed, match=r"tensor\(inf\)"):
        check("softmax-stable-lse", last_entry_shift_lse)


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


def right_ce_log_probs(logits, target):  # another right answer: shifted log-probabilities
    shifted = logits - logits.max(-1, keepdim=True).values
    log_p = shifted - shifted.exp().sum(-1, keepdim=True).log()
    return -log_p[torch.arange(len(target)), target].mean()


def shifted_by_ce(pick):  # right except for the shift c = pick(logits)
    def answer(logits, target):
        c = pick(logits)
        lse = c.squeeze(-1) + torch.log(torch.exp(logits - c).sum(dim=-1))
        return (lse - logits.gather(-1, target[:, None]).squeeze(-1)).mean()
    return answer


min_shift_ce = shifted_by_ce(lambda z: z.amin(-1, keepdim=True))
first_entry_ce = shifted_by_ce(lambda z: z[:, :1])
mean_shift_ce = shifted_by_ce(lambda z: z.mean(-1, keepdim=True))


def logaddexp_ce(logits, target):
    import functools
    lse = functools.reduce(torch.logaddexp, logits.unbind(-1))
    return (lse - logits.gather(-1, target[:, None]).squeeze(-1)).mean()


def scipy_ce(logits, target):
    from scipy.special import logsumexp
    lse = torch.as_tensor(logsumexp(logits.numpy(), axis=-1), dtype=logits.dtype)
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


def in_place_ce(logits, target):  # right value, but shifts the caller's logits in place
    m = logits.amax(dim=-1, keepdim=True)
    logits -= m
    lse = m.squeeze(-1) + torch.log(torch.exp(logits).sum(dim=-1))
    return (lse - (logits + m).gather(-1, target[:, None]).squeeze(-1)).mean()


def float32_ce(logits, target):  # computes float64 logits in float32 (cold review R3)
    return right_ce(logits.float(), target)


def in_place_target_ce(logits, target):  # right value, but reshapes the caller's target
    m = logits.amax(dim=-1, keepdim=True)
    lse = m.squeeze(-1) + torch.log(torch.exp(logits - m).sum(dim=-1))
    return (lse - logits.gather(-1, target.unsqueeze_(-1)).squeeze(-1)).mean()


@pytest.mark.parametrize("answer", [right_ce, right_ce_log_probs])
def test_ce_accepts_right_answer(answer, capsys):
    assert check("softmax-cross-entropy", answer)
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
    (min_shift_ce, r"target = \[0, 0\] \(huge logits\)(.|\n)*but got +tensor\(inf\)"),
    (first_entry_ce, r"target = \[0, 0\] \(huge logits\)(.|\n)*but got +tensor\(inf\)"),
    (mean_shift_ce, r"target = \[0, 0\] \(huge logits\)(.|\n)*but got +tensor\(inf\)"),
    (logaddexp_ce, r"calls torch.logaddexp, which this exercise forbids"),
    (scipy_ce, r"calls scipy.special.logsumexp, which this exercise forbids"),
    (torch_ce, r"calls torch.nn.functional.cross_entropy, which this exercise forbids"),
    (log_softmax_ce, r"calls torch.log_softmax, which this exercise forbids"),
    (library_ce, r"calls a function of the book's library"),
    # independent review: answers that change their inputs in place passed
    (in_place_ce, r"logits = \[\[2, 1, 0.1\]\], target = \[0\] your function changed its "
                  r"argument 'logits' in place"),
    (in_place_target_ce, r"your function changed its argument 'target' in place"),
    # its hint used to blame the per-row shift, which the answer gets right
    (float32_ce, r"\(float64\), target = \[0, 1\](.|\n)*Hint: your result is torch.float32 "
                 r"for torch.float64 logits: compute in the logits' dtype"),
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


# --- softmax-ex-se-gradient: the squared error's gradient on the true logit, K classes ---------
def se_grad_true(p, K):
    return -2 * K / (K - 1) * p * (1 - p) ** 2


def se_grad_true_split(p, K):  # the two-class result times 1 + 1/(K - 1), over 2
    return -2 * p * (1 - p) ** 2 * (1 + 1 / (K - 1))


def se_grad_true_bracket(p, K):  # (softmax-se-grad) written out: 2 p ((p − 1) − Σ_k ...)
    total = (p - 1) * p + (K - 1) * ((1 - p) / (K - 1)) ** 2
    return 2 * p * ((p - 1) - total)


@pytest.mark.parametrize("answer", [se_grad_true, se_grad_true_split, se_grad_true_bracket])
def test_se_gradient_accepts_right_answers(answer, capsys):
    assert check("softmax-ex-se-gradient", answer)
    assert "correct on 4 test cases" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("answer, message", [
    # the two-class result for every K
    (lambda p, K: -4 * p * (1 - p) ** 2, r"(?s)K = 3, 10 and 1000\) your gradient is wrong at "
                                         r"21 of 21.*two-class one for every K"),
    (lambda p, K: -2 * p * (1 - p) ** 2, r"two classes\) your gradient is wrong at 7 of 7"),
    (lambda p, K: 2 * K / (K - 1) * p * (1 - p) ** 2, r"(?s)wrong at 7 of 7.*wrong sign"),
    (lambda p, K: -2 * K / (K - 1) * (1 - p) ** 2, "wrong at 7 of 7"),  # the factor p dropped
    (lambda p, K: 2 * p * (p - 1), "wrong at 6 of 7"),  # the sum over k dropped
    (lambda p, K: p - 1, "wrong at 6 of 7"),  # cross entropy's gradient
    (lambda p, K: -2 * (K - 1) / K * p * (1 - p) ** 2, r"two classes\) .*wrong at 7 of 7"),
    (lambda p, K: -2 * K * p * (1 - p) ** 2, r"K = 3, 10 and 1000\) .*wrong at 21 of 21"),
    # K instead of K - 1 other classes in the sum
    (lambda p, K: -2 * (K + 1) / K * p * (1 - p) ** 2, "wrong at 7 of 7"),
    # the mean over the classes, (1/K) Σ_k (p_k − y_k)²
    (lambda p, K: -2 / (K - 1) * p * (1 - p) ** 2, "wrong at 7 of 7"),
    (lambda p, K: -2 * K / (K - 1) * p ** 2 * (1 - p), "wrong at 6 of 7"),
    (lambda p, K: se_grad_true(p, K).float(), "your gradient is torch.float32"),
    (lambda p, K: se_grad_true(p, K).sum(), "should be a float tensor of shape"),
    (lambda p, K: p.mul_(-2 * K / (K - 1) * (1 - p) ** 2), "changed its arguments in place"),
    (lambda p, K: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_se_gradient_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("softmax-ex-se-gradient", answer)


def test_se_gradient_reference_is_the_autograd_gradient():
    # the gradient of Σ_k (softmax(z)_k − y_k)² on z_1, by autograd, for logits that give the
    # true class p and the others (1 − p)/(K − 1) each
    for K in (2, 3, 7):
        p = torch.tensor([0.05, 1 / 3, 0.8], dtype=torch.float64)
        z = torch.log(torch.cat([p[:, None], ((1 - p) / (K - 1))[:, None].expand(3, K - 1)],
                                1)).requires_grad_()
        y = torch.zeros(3, K, dtype=torch.float64)
        y[:, 0] = 1
        ((torch.softmax(z, 1) - y) ** 2).sum().backward()
        assert torch.allclose(z.grad[:, 0], se_grad_true(p, torch.full_like(p, K)), rtol=1e-12)


def test_se_gradient_message_does_not_hand_out_the_answer():
    with pytest.raises(ExerciseCheckFailed) as err:
        check("softmax-ex-se-gradient", lambda p, K: -4 * p * (1 - p) ** 2)
    assert "expected" not in str(err.value)


def test_se_gradient_precision_loss_gets_the_precision_hint():
    """A right formula with K made an integer (int64 / int64 is float32): the message says the
    values agree to ~7 digits and why, instead of sending the student back to the derivation
    (review of the new derivation checks, M3)."""
    def se(p, K):
        K = K.long()
        return -2 * K / (K - 1) * p * (1 - p) ** 2
    with pytest.raises(ExerciseCheckFailed, match=r"(?s)largest relative difference \d\.\de-0[78]"
                                                  r".*precision was lost.*float64"):
        check("softmax-ex-se-gradient", se)


# --- softmax-lse-merge: merge two (max, scaled sum) states of the online log-sum-exp ----------
def merge_where(a, b):
    (ma, sa), (mb, sb) = a, b
    m = torch.maximum(ma, mb)
    safe = torch.where(m == -float("inf"), torch.zeros_like(m), m)
    return m, sa * torch.exp(ma - safe) + sb * torch.exp(mb - safe)


def merge_nan_to_num(a, b):  # another right answer: the NaN of two empty states replaced by 0
    (ma, sa), (mb, sb) = a, b
    m = torch.max(ma, mb)
    return m, (sa * (ma - m).exp()).nan_to_num(0.0) + (sb * (mb - m).exp()).nan_to_num(0.0)


def merge_top_and_other(a, b):  # and another: keep the top state, rescale the other one
    (ma, sa), (mb, sb) = a, b
    a_top = ma >= mb
    m = torch.where(a_top, ma, mb)
    low_m, low_s = torch.where(a_top, mb, ma), torch.where(a_top, sb, sa)
    top_s = torch.where(a_top, sa, sb)
    gap = torch.where(torch.isneginf(low_m), -float("inf"), low_m - m)
    return m, top_s + low_s * torch.exp(gap)


def merge_unguarded(a, b):  # right except for two empty states: -inf - (-inf) = NaN
    (ma, sa), (mb, sb) = a, b
    m = torch.maximum(ma, mb)
    return m, sa * torch.exp(ma - m) + sb * torch.exp(mb - m)


def merge_no_rescale_of_old(a, b):  # streaming: a is the running state, only b rescaled
    (ma, sa), (mb, sb) = a, b
    m = torch.maximum(ma, mb)
    safe = torch.where(torch.isneginf(m), 0.0, m)
    return m, sa + sb * torch.exp(mb - safe)


def merge_wrong_side(a, b):  # each sum rescaled by the other state's factor
    (ma, sa), (mb, sb) = a, b
    m = torch.maximum(ma, mb)
    safe = torch.where(torch.isneginf(m), 0.0, m)
    return m, sa * torch.exp(mb - safe) + sb * torch.exp(ma - safe)


def merge_no_exp(a, b):  # the new maximum used without exp: an additive "rescaling"
    (ma, sa), (mb, sb) = a, b
    m = torch.maximum(ma, mb)
    return m, (sa + (ma - m)) + (sb + (mb - m))


def merge_plain_sum(a, b):  # no rescaling at all
    (ma, sa), (mb, sb) = a, b
    return torch.maximum(ma, mb), sa + sb


def merge_added_maxima(a, b):
    (ma, sa), (mb, sb) = a, b
    return ma + mb, sa + sb


def merge_unshifted(a, b):  # exp of the maxima themselves
    (ma, sa), (mb, sb) = a, b
    m = torch.maximum(ma, mb)
    safe = torch.where(torch.isneginf(m), 0.0, m)
    return m, (sa * torch.exp(ma) + sb * torch.exp(mb)) / torch.exp(safe)


def merge_in_a_frame(a, b):  # b rescaled to a's maximum whatever the larger one is
    (ma, sa), (mb, sb) = a, b
    m = torch.maximum(ma, mb)
    return m, sa + sb * torch.exp(mb - ma).nan_to_num(0.0)


def merge_min(a, b):  # the smaller maximum
    (ma, sa), (mb, sb) = a, b
    m = torch.minimum(ma, mb)
    safe = torch.where(torch.isneginf(m), 0.0, m)
    return m, sa * torch.exp(ma - safe) + sb * torch.exp(mb - safe)


def merge_dead_is_one(a, b):  # NaN of two empty states replaced by 1: one possible entry
    (ma, sa), (mb, sb) = a, b
    m = torch.maximum(ma, mb)
    return m, (sa * torch.exp(ma - m) + sb * torch.exp(mb - m)).nan_to_num(1.0)


def merge_returns_lse(a, b):  # the log-sum-exp of the union instead of its state
    m, s = merge_where(a, b)
    return m + torch.log(s)


def merge_logaddexp(a, b):  # via a ready-made log-sum-exp of the two
    (ma, sa), (mb, sb) = a, b
    lse = torch.logaddexp(ma + torch.log(sa), mb + torch.log(sb))
    m = torch.maximum(ma, mb)
    return m, torch.exp(lse - m)


def merge_library(a, b):  # the book's own merge, converted from (m, rest)
    from softmaxbook.softmax import LSEState, lse_merge
    out = lse_merge(LSEState(a[0], a[1] - 1), LSEState(b[0], b[1] - 1))
    return out.max, out.rest + 1


def merge_float32(a, b):  # computes float64 states in float32
    m, s = merge_where((a[0].float(), a[1].float()), (b[0].float(), b[1].float()))
    return m.to(a[0].dtype), s


def merge_float64(a, b):  # float32 states merged and returned in float64
    m, s = merge_where((a[0].double(), a[1].double()), (b[0].double(), b[1].double()))
    return m, s


def merge_via_mean(a, b):  # both rescaled to the mean of the maxima, then to m: exp of
    (ma, sa), (mb, sb) = a, b  # a positive half-difference, which overflows far apart
    m = torch.maximum(ma, mb)
    shift = torch.where(torch.isneginf(m), 0.0, m)
    c = torch.where(torch.isfinite(ma) & torch.isfinite(mb), (ma + mb) / 2, shift)
    return m, (sa * torch.exp(ma - c) + sb * torch.exp(mb - c)) * torch.exp(c - shift)


def merge_via_a_frame(a, b):  # b rescaled to a's maximum, then the sum to m: exp(mb - ma)
    (ma, sa), (mb, sb) = a, b  # overflows when b is far above a
    m = torch.maximum(ma, mb)
    shift = torch.where(torch.isneginf(m), 0.0, m)
    ma0 = torch.where(torch.isneginf(ma), shift, ma)
    return m, (sa + sb * torch.exp(mb - ma0)) * torch.exp(ma0 - shift)


def merge_in_place(a, b):  # right values, but rescales the caller's sums in place
    (ma, sa), (mb, sb) = a, b
    m = torch.maximum(ma, mb)
    safe = torch.where(torch.isneginf(m), 0.0, m)
    sa.mul_(torch.exp(ma - safe))
    return m, sa + sb * torch.exp(mb - safe)


@pytest.mark.parametrize("answer", [merge_where, merge_nan_to_num, merge_top_and_other])
def test_lse_merge_accepts_right_answers(answer, capsys):
    assert check("softmax-lse-merge", answer)
    assert "correct on 10 test cases" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("salt", [1, 2, 3, 12345])
def test_lse_merge_right_answers_pass_salted(salt):
    from softmaxbook.exercises import salted
    with salted(salt):
        for answer in (merge_where, merge_nan_to_num, merge_top_and_other):
            assert check("softmax-lse-merge", answer)


@pytest.mark.parametrize("answer, message", [
    (merge_unguarded, r"(?s)both states empty.*your result contains NaN.*Hint: for two empty "
                      r"states"),
    (merge_no_rescale_of_old, r"(?s)b has the larger maximum\).*sum s.*Hint: each s is a sum"),
    (merge_wrong_side, r"(?s)a = \(\[2\], \[1.5\]\), b = \(\[0.5\], \[2\]\).*sum s"),
    (merge_no_exp, r"a = \(\[2\], \[1.5\]\)"),
    (merge_plain_sum, r"a = \(\[2\], \[1.5\]\)"),
    (merge_added_maxima, r"(?s)maximum m.*Hint: the maximum of the union"),
    (merge_unshifted, r"(?s)maxima near 1000.*Hint: an exponential overflowed"),
    (merge_in_a_frame, r"(?s)b has the larger maximum\).*sum s"),
    (merge_min, r"(?s)maximum m.*Hint: the maximum of the union"),
    (merge_dead_is_one, r"(?s)both states empty.*sum s"),
    (merge_returns_lse, r"should return a pair \(m, s\) of tensors"),
    (merge_logaddexp, r"calls torch.logaddexp, which this exercise forbids"),
    (merge_library, r"calls a function of the book's library"),
    (merge_float32, r"(?s)float64.*your s is torch.float32, for torch.float64 states"),
    (merge_in_place, r"changed its argument 'a\[1\]' in place"),
    (merge_via_mean, r"(?s)maxima 2000 apart.*Hint: an exponential overflowed"),
    (merge_via_a_frame, r"(?s)maxima 2000 apart.*Hint: an exponential overflowed"),
    (merge_float64, r"(?s)larger maximum.*your m is torch.float64, for torch.float32"),
    (lambda a, b: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_lse_merge_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("softmax-lse-merge", answer)


def test_lse_merge_reference_agrees_with_the_library():
    # the check's reference (m, s) is the library's (max, rest + 1) on the same blocks
    from softmaxbook.exercises.softmax import _merge_reference
    from softmaxbook.softmax import lse_merge, lse_state
    g = torch.Generator().manual_seed(0)
    xa, xb = 20 * torch.randn(2, 50, 6, generator=g, dtype=torch.float64)
    xa[4] = -float("inf")

    def ms(x):
        m = x.amax(-1)
        return m, torch.exp(x - torch.where(torch.isneginf(m), 0.0, m)[:, None]).sum(-1)

    m, s = _merge_reference(ms(xa), ms(xb))
    lib = lse_merge(lse_state(xa), lse_state(xb))
    assert torch.equal(m, lib.max) and torch.allclose(s, lib.rest + 1, rtol=1e-13)


@pytest.mark.parametrize("salt", [1, 2, 3, 12345])
def test_lse_merge_rejects_wrong_answers_under_any_salt(salt):
    # the salted inputs keep the fixed hard cases, so a one-sided rescaling and the unguarded
    # formula fail there too
    from softmaxbook.exercises import salted
    with salted(salt):
        for answer in (merge_no_rescale_of_old, merge_unguarded, merge_unshifted):
            with pytest.raises(ExerciseCheckFailed):
                check("softmax-lse-merge", answer)
