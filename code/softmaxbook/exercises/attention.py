"""Checks for the coding exercises of the chapter "Learning through discrete choices: hard attention
and Seq-GAN" (book/09_hard_attention.ipynb).

* ``attention-score-term``: the score-function (REINFORCE) term for a categorical location,
  ``(r - b) * grad_e log alpha_s = (r - b) (onehot(s) - softmax(e))``, per example.
* ``attention-baseline``: the moving-average baseline of Xu et al. (2015) along a run: the value
  used at step t comes from the rewards of the steps *before* t.
* ``attention-marginal``: the exact ``log p(y | a) = log sum_s alpha_s p(y | s, a)`` from
  ``log alpha`` and ``log p(y | s, a)``, stable when every ``p(y | s, a)`` underflows, without
  the library's :func:`~softmaxbook.attention.marginal_log_lik`.
* ``attention-biased-baseline`` (a derivation's end result): what the REINFORCE estimate with the
  baseline ``b_n = r_n`` has as its mean, with the scores ``e`` and the log-likelihoods
  ``l_s = log p(y | s, a)`` as the parameters: ``(0, softmax(e))``. The gradient of ``L_s`` (the
  unbiased estimate's mean), that of ``log p(y | a)``, the posterior and uniform weights get hints.
* ``attention-iw-bound``: the ``K``-sample importance-weighted bound (Burda et al. 2016) at given
  draws, ``log (1/K) sum_k p(s_k | a) p(y | s_k, a) / q(s_k)``, stable when every weight
  underflows, with a location drawn twice counted twice.
"""

from __future__ import annotations

import torch

from . import (call, check_generator, check_salt, describe, exercise, expect_close,
               expect_true, watch_calls)
from .. import attention


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


# The score-term exercise asks for the derivative of log softmax, derived by hand.
_AUTOGRAD = {torch.autograd.grad: "torch.autograd.grad",
             torch.Tensor.backward: "Tensor.backward (autograd)",
             torch._make_dual: "forward-mode autodiff (torch.func.jvp / forward_ad)",
             torch._unpack_dual: "forward-mode autodiff (torch.func.jvp / forward_ad)"}


def _expect_float64(got, desc):
    """Name a float32 (or other lower-precision) result instead of reporting a tiny difference."""
    if isinstance(got, torch.Tensor) and got.is_floating_point() and got.dtype != torch.float64:
        expect_true(False, f"for input {desc} (float64) your result is {got.dtype}: it lost "
                    f"precision on the way.",
                    hint="compute in float64, the dtype of the inputs; do not convert to "
                         "float32 (torch.tensor(list) makes float32 unless given a dtype).")


# ------------------------------------------------------------------------------------------------
# attention-score-term
_SCORE_CASES = [
    # (description, scores [n, L], locations [n], rewards [n], baseline)
    ("scores [[0, 0, 0, 0]], location [2], reward [-1.5], baseline 0",
     [[0.0, 0.0, 0.0, 0.0]], [2], [-1.5], 0.0),
    ("scores [[1, -2, 0.5], [0, 3, -1]], locations [0, 2], rewards [-0.3, -2.0], baseline -1",
     [[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], [0, 2], [-0.3, -2.0], -1.0),
    ("3 examples over L = 5, rewards [-0.2, -4, -1], baseline -1.2",
     [[0.3, -1.0, 2.0, 0.0, 0.7], [1.5, 1.5, -0.5, 0.2, -2.0], [0.0, 0.1, 0.2, 0.3, 0.4]],
     [4, 0, 2], [-0.2, -4.0, -1.0], -1.2),
    ("scores [[1000, 999, 990]] (large), location [1], reward [-0.7], baseline -0.2",
     [[1000.0, 999.0, 990.0]], [1], [-0.7], -0.2),
    ("scores [[0, -inf, 1]] (never look at location 1), location [2], reward [-1], baseline 0",
     [[0.0, float("-inf"), 1.0]], [2], [-1.0], 0.0),
    # rows on different scales: a shift by the maximum of the whole batch instead of each row's
    # own maximum underflows the second row to 0 / 0
    ("scores [[1000, 999, 990], [0, 1, -1]] (rows on different scales), locations [0, 1], "
     "rewards [-0.5, -2], baseline -1",
     [[1000.0, 999.0, 990.0], [0.0, 1.0, -1.0]], [0, 1], [-0.5, -2.0], -1.0),
    # a row spanning 3000 with its maximum in the middle: any shift but the row's maximum (its
    # first entry, its minimum, its mean) leaves exp(1000) or more, which overflows (review R3)
    ("scores [[-2000, 1000, 990, -2000]] (a spread of 3000, the largest not first), location "
     "[2], reward [-1.2], baseline -0.4",
     [[-2000.0, 1000.0, 990.0, -2000.0]], [2], [-1.2], -0.4),
    # every possible score far below any finite stand-in for -inf: a mask of -100 or -1e4
    # instead of -inf would take nearly all the attention (review R3)
    ("scores [[-20000, -inf, -19999]] (very negative, location 1 never looked at), location "
     "[0], reward [-0.8], baseline -1",
     [[-20000.0, float("-inf"), -19999.0]], [0], [-0.8], -1.0),
]


def _salted_score_cases():
    """Under the grader's secret salt (none in a notebook): random cases of the same kinds,
    rows on scales up to 1000 apart and an impossible location, so that a table of answers to
    the fixed cases is no use."""
    if not check_salt():
        return []
    g = check_generator(41)
    n, L = 4, 5
    e = torch.randn(n, L, generator=g, dtype=torch.float64) * 3
    e += torch.tensor([[1000.0], [0.0], [-1000.0], [300.0]], dtype=torch.float64)[
        torch.randperm(n, generator=g)]
    s = torch.randint(0, L, (n,), generator=g)
    blocked = (s + 1 + torch.randint(0, L - 1, (n,), generator=g)) % L
    e[torch.arange(n), blocked] = float("-inf")
    r = -3 * torch.rand(n, generator=g, dtype=torch.float64)
    b = -float(torch.rand(1, generator=g, dtype=torch.float64))
    # one row spanning thousands, its largest score at a random place (not first), and one row
    # of scores far below any finite mask, with an impossible location
    wide = torch.full((2, L), -2000.0, dtype=torch.float64) + torch.randn(2, L, generator=g,
                                                                        dtype=torch.float64)
    top = 1 + torch.randint(0, L - 1, (1,), generator=g)
    wide[0, top] = 1000.0
    wide[1] -= 18000.0
    wide[1, (top + 1) % L] = float("-inf")
    s2 = torch.tensor([int(top), int(top) % L])
    r2 = -3 * torch.rand(2, generator=g, dtype=torch.float64)
    return [(f"scores {describe(e)} (rows on different scales, -inf entries), locations "
             f"{s.tolist()}, rewards {describe(r)}, baseline {b:.6g}",
             e.tolist(), s.tolist(), r.tolist(), b),
            (f"scores {describe(wide)} (a spread of 3000; scores near -20000 with a -inf), "
             f"locations {s2.tolist()}, rewards {describe(r2)}, baseline {b:.6g}",
             wide.tolist(), s2.tolist(), r2.tolist(), b)]


def _score_term_reference(scores, locations, rewards, baseline):
    alpha = torch.softmax(scores, dim=-1)
    onehot = torch.nn.functional.one_hot(locations, scores.shape[-1]).to(scores.dtype)
    return (rewards - baseline)[:, None] * (onehot - alpha)


@exercise("attention-score-term", "the REINFORCE term for a categorical location")
def _check_score_term(score_term):
    """``score_term(scores, locations, rewards, baseline)`` -> ``[n, L]``."""
    cases = _SCORE_CASES + _salted_score_cases()
    for desc, e, s, r, b in cases:
        scores, locations, rewards = _t(e), torch.tensor(s), _t(r)
        args = (scores.clone(), locations.clone(), rewards.clone(), b)
        got = call(score_term, *args, input_desc=desc, forbid=_AUTOGRAD,
                   forbid_reason="The exercise asks you to derive the derivative of "
                                 "log softmax and write it down: onehot(s) minus the "
                                 "weights, no autograd.")
        expect_true(isinstance(got, torch.Tensor) and got.shape == scores.shape,
                    f"for input {desc} the result should be a tensor of shape "
                    f"{tuple(scores.shape)} (one gradient per example and location), got "
                    f"{describe(got)}.")
        expect_true(bool(torch.isfinite(got).all()),
                    f"for input {desc} the result contains NaN or inf: {describe(got)}.",
                    hint="exp of a large score overflows, exp(-inf) times an infinite log "
                         "is NaN, and a shift by the largest score of the whole batch "
                         "underflows the other rows: each row needs its own maximum. The "
                         "probabilities alpha = softmax(e) are all you need, and torch.softmax "
                         "computes them stably.")
        expect_true(torch.equal(args[0], scores) and torch.equal(args[1], locations)
                    and torch.equal(args[2], rewards),
                    f"for input {desc} your function changed its inputs in place.")
        _expect_float64(got, desc)
        expect_close(got.detach(), _score_term_reference(scores, locations, rewards, b),
                     input_desc=desc, rtol=1e-9, atol=1e-12, what="score-function term",
                     hint="differentiate log alpha_s = e_s - log sum_j exp(e_j) with respect "
                          "to every e_j (each row on its own), and remember what multiplies "
                          "it in the estimator, baseline included. A score of -inf has weight "
                          "exactly 0: a finite stand-in such as -100 is not, once every other "
                          "score of the row lies below it.")
    return len(cases)


# ------------------------------------------------------------------------------------------------
# attention-baseline
_BASELINE_CASES = [
    # (description, rewards [S, n], decay)
    ("rewards [[-2.0, -2.0]] (one step), decay 0.9", [[-2.0, -2.0]], 0.9),
    ("rewards [[-1, -3], [-0.5, -0.5], [0, -1]], decay 0.9",
     [[-1.0, -3.0], [-0.5, -0.5], [0.0, -1.0]], 0.9),
    ("rewards [[-2.3, -2.1, -2.5], [-1.0, -0.2, -0.6], [-0.1, -0.3, 0.0], [-0.05, -0.1, -0.2]], "
     "decay 0.5",
     [[-2.3, -2.1, -2.5], [-1.0, -0.2, -0.6], [-0.1, -0.3, 0.0], [-0.05, -0.1, -0.2]], 0.5),
    ("rewards of 6 steps x 1 example, decay 0.0",
     [[-3.0], [-2.0], [-1.5], [-1.0], [-0.5], [-0.25]], 0.0),
]


def _salted_baseline_cases():
    """Random rewards and decay under the grader's secret salt (none in a notebook)."""
    if not check_salt():
        return []
    g = check_generator(43)
    r = -3 * torch.rand(5, 3, generator=g, dtype=torch.float64)
    decay = round(0.2 + 0.7 * float(torch.rand(1, generator=g, dtype=torch.float64)), 3)
    return [(f"rewards {describe(r)} (5 steps x 3 examples), decay {decay}", r.tolist(), decay)]


def _baseline_reference(rewards, decay):
    out, b = [], 0.0
    for row in rewards:
        out.append(b)
        b = decay * b + (1 - decay) * float(row.mean())
    return torch.tensor(out, dtype=torch.float64)


@exercise("attention-baseline", "the moving-average baseline")
def _check_baseline(baselines):
    """``baselines(rewards, decay)`` -> ``[S]``: the baseline used at each of S steps."""
    cases = _BASELINE_CASES + _salted_baseline_cases()
    for desc, r, decay in cases:
        rewards = _t(r)
        arg = rewards.clone()
        got = call(baselines, arg, decay, input_desc=desc)
        expect_true(isinstance(got, torch.Tensor) and got.shape == rewards.shape[:1],
                    f"for input {desc} the result should be a tensor of shape "
                    f"{tuple(rewards.shape[:1])} (one baseline per step), got {describe(got)}.")
        expect_true(torch.equal(arg, rewards),
                    f"for input {desc} your function changed its inputs in place.")
        _expect_float64(got, desc)
        ref = _baseline_reference(rewards, decay)
        # The commonest mistake, named: the baseline of step t already contains step t.
        acausal = decay * ref + (1 - decay) * rewards.mean(dim=1)
        expect_true(not (torch.allclose(got.double(), acausal, rtol=1e-9, atol=1e-12)
                         and not torch.allclose(acausal, ref)),
                    f"for input {desc} the baseline of each step already includes that step's "
                    f"rewards: {describe(got)}.",
                    hint="a baseline that depends on the current sample biases the estimator; "
                         "use the value from before the step, then update it.")
        expect_close(got.detach(), ref, input_desc=desc, rtol=1e-9, atol=1e-12,
                     what="baselines",
                     hint="the baseline starts at 0; after each step it moves a fraction "
                          "(1 - decay) of the way towards that step's mean reward.")
    return len(cases)


# ------------------------------------------------------------------------------------------------
# attention-marginal
_MARGINAL_CASES = [
    # (description, log_alpha [n, L] (normalised), loglik [n, L])
    ("log_alpha = log [[0.5, 0.25, 0.25]], loglik [[-0.1, -2.3, -2.3]]",
     [[0.5, 0.25, 0.25]], [[-0.1, -2.3, -2.3]]),
    ("2 examples, L = 4",
     [[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]],
     [[-3.0, -0.5, -1.0, -2.0], [-0.05, -4.0, -6.0, -2.5]]),
    ("loglik [[-1000, -1001, -1003]] (every p(y | s, a) underflows), alpha [0.2, 0.3, 0.5]",
     [[0.2, 0.3, 0.5]], [[-1000.0, -1001.0, -1003.0]]),
    ("alpha [[0.0, 0.6, 0.4]] (location 0 never chosen), loglik [[-0.01, -5, -7]]",
     [[0.0, 0.6, 0.4]], [[-0.01, -5.0, -7.0]]),
    # rows on different scales: a shift by the maximum of the whole batch instead of each row's
    # own maximum underflows the first row to log 0
    ("loglik [[-1000, -1001, -1003], [-0.5, -2, -1]] (rows on different scales), alpha "
     "[[0.2, 0.3, 0.5], [0.5, 0.25, 0.25]]",
     [[0.2, 0.3, 0.5], [0.5, 0.25, 0.25]], [[-1000.0, -1001.0, -1003.0], [-0.5, -2.0, -1.0]]),
    # one location explains the label, the others not at all: a shift by anything but the row's
    # maximum (its first term, its minimum, its mean) overflows (review R3)
    ("loglik [[-2000, -0.1, -2000, -2000]] (one location explains the label), alpha "
     "[[0.25, 0.25, 0.25, 0.25]]",
     [[0.25, 0.25, 0.25, 0.25]], [[-2000.0, -0.1, -2000.0, -2000.0]]),
    # the location that would explain the label is never chosen: log(alpha + eps) or a clamped
    # log alpha gives it a weight and an answer near log eps instead of about -1000 (review R3)
    ("alpha [[0.0, 0.6, 0.4]] (location 0 never chosen), loglik [[0, -1000, -1001]]",
     [[0.0, 0.6, 0.4]], [[0.0, -1000.0, -1001.0]]),
]


def _salted_marginal_cases():
    """Random alphas (one location never chosen) and log-likelihoods on scales far apart,
    under the grader's secret salt (none in a notebook)."""
    if not check_salt():
        return []
    g = check_generator(47)
    a = torch.rand(3, 4, generator=g, dtype=torch.float64) + 0.05
    a[torch.arange(3), torch.randint(0, 4, (3,), generator=g)] = 0.0
    a = a / a.sum(-1, keepdim=True)
    ll = -3 * torch.rand(3, 4, generator=g, dtype=torch.float64)
    ll += torch.tensor([[-1000.0], [0.0], [-300.0]], dtype=torch.float64)[
        torch.randperm(3, generator=g)]
    # the kinds of the last two fixed cases: one location explaining the label among terms near
    # -2000, and the best location never chosen (its alpha 0)
    a2 = torch.rand(2, 4, generator=g, dtype=torch.float64) + 0.05
    ll2 = torch.tensor([[-2000.0], [-1000.0]], dtype=torch.float64) - torch.rand(
        2, 4, generator=g, dtype=torch.float64)
    best = torch.randint(0, 4, (2,), generator=g)
    ll2[torch.arange(2), best] = -torch.rand(2, generator=g, dtype=torch.float64)
    a2[1, best[1]] = 0.0
    a2 = a2 / a2.sum(-1, keepdim=True)
    return [(f"alpha {describe(a)}, loglik {describe(ll)} (rows on different scales)",
             a.tolist(), ll.tolist()),
            (f"alpha {describe(a2)}, loglik {describe(ll2)} (one location explains the label; "
             f"in the second row it is never chosen)", a2.tolist(), ll2.tolist())]


@exercise("attention-marginal", "the exact marginal log-likelihood over locations")
def _check_marginal(marginal):
    """``marginal(log_alpha, loglik)`` -> ``[n]``."""
    cases = _MARGINAL_CASES + _salted_marginal_cases()
    for desc, a, ll in cases:
        log_alpha, loglik = _t(a).log(), _t(ll)
        args = (log_alpha.clone(), loglik.clone())
        with watch_calls(attention.marginal_log_lik, attention.jensen_bound) as seen:
            got = call(marginal, *args, input_desc=desc)
        expect_true(not seen,
                    f"for input {desc} your function calls softmaxbook.attention."
                    f"{seen[0] if seen else ''}, which this exercise asks you to write "
                    f"yourself.")
        expect_true(isinstance(got, torch.Tensor) and got.shape == loglik.shape[:1],
                    f"for input {desc} the result should be a tensor of shape "
                    f"{tuple(loglik.shape[:1])} (one value per example), got {describe(got)}.",
                    hint="sum over the locations (the last axis), not over the examples.")
        expect_true(bool(torch.isfinite(got).all()),
                    f"for input {desc} the result is not finite: {describe(got)}.",
                    hint="exp(-1000) is 0 in floating point; work with log-probabilities "
                         "throughout (the log-sum-exp of chapter 1), shifting each row by its "
                         "own maximum.")
        expect_true(torch.equal(args[0], log_alpha) and torch.equal(args[1], loglik),
                    f"for input {desc} your function changed its inputs in place.")
        _expect_float64(got, desc)
        expect_close(got.detach(), torch.logsumexp(log_alpha + loglik, dim=-1),
                     input_desc=desc, rtol=1e-9, atol=1e-9, what="log p(y | a)",
                     hint="log p(y | a) is the log of an alpha-weighted sum of probabilities, "
                          "not an alpha-weighted sum of log-probabilities (that is the Jensen "
                          "bound, which is lower).")
    return len(cases)


# ------------------------------------------------------------------------------------------------
# attention-biased-baseline: what REINFORCE estimates with the baseline b_n = r_n (a derivation's
# end result: its expected value, with the scores e and log-likelihoods l as the parameters)
def _biased_baseline_cases():
    cases = [
        ("uniform scores [[0, 0, 0, 0]], loglik [[-2.3, -0.1, -4, -1]]",
         _t([[0.0, 0.0, 0.0, 0.0]]), _t([[-2.3, -0.1, -4.0, -1.0]])),
        ("scores [[1, -2, 0.5], [0, 3, -1]], loglik [[-0.2, -3, -1], [-2, -0.5, -6]]",
         _t([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]]), _t([[-0.2, -3.0, -1.0], [-2.0, -0.5, -6.0]])),
        ("scores [[1000, 999, 990]] (large), loglik [[-1, -0.3, -2]]",
         _t([[1000.0, 999.0, 990.0]]), _t([[-1.0, -0.3, -2.0]])),
        ("scores [[0, -inf, 1]] (location 1 never looked at), loglik [[-1, -0.1, -2]]",
         _t([[0.0, float("-inf"), 1.0]]), _t([[-1.0, -0.1, -2.0]])),
    ]
    g = check_generator(53)  # public in a notebook; the grader's secret salt changes it
    scores = 2 * torch.randn(40, 6, generator=g, dtype=torch.float64)
    loglik = -torch.exp(torch.randn(40, 6, generator=g, dtype=torch.float64))
    cases.append(("40 random examples over L = 6", scores, loglik))
    return cases


def _first_wrong(got, expected, tol=1e-10):
    """(number of wrong entries, (row, column) of the worst) or None if ``got`` is right."""
    g64 = got.detach().to(torch.float64)
    wrong = ~torch.isclose(g64, expected, rtol=tol, atol=tol)
    if not bool(wrong.any()):
        return None
    err = (g64 - expected).abs().nan_to_num(float("inf"))
    i = int(err.flatten().argmax())
    return int(wrong.sum()), divmod(i, expected.shape[-1])


@exercise("attention-biased-baseline", "what REINFORCE estimates with b_n = r_n")
def _check_biased_baseline(self_baseline_mean):
    """``self_baseline_mean(scores, loglik)`` -> ``(d_scores, d_loglik)``, each ``[n, L]``."""
    cases = _biased_baseline_cases()
    for desc, scores, loglik in cases:
        s_in, l_in = scores.clone(), loglik.clone()
        got = call(self_baseline_mean, s_in, l_in, input_desc=desc)
        expect_true(torch.equal(s_in, scores) and torch.equal(l_in, loglik),
                    f"for input {desc} your function changed its arguments in place.",
                    hint="compute new tensors; do not use in-place methods on the inputs.")
        shape = tuple(scores.shape)
        expect_true(isinstance(got, (tuple, list)) and len(got) == 2
                    and all(isinstance(t, torch.Tensor) and t.is_floating_point()
                            and tuple(t.shape) == shape for t in got),
                    f"for input {desc} the result should be a pair (d_scores, d_loglik) of "
                    f"float tensors of shape {shape}, got {describe(got)}.",
                    hint="one expected gradient per example and location, for each of the two "
                         "kinds of parameters.")
        for t in got:
            _expect_float64(t, desc)
        alpha = torch.softmax(scores, dim=-1)
        l_s = (alpha * loglik.masked_fill(alpha == 0, 0.0)).sum(-1, keepdim=True)
        posterior = torch.softmax(scores + loglik, dim=-1)
        d_scores, d_loglik = (t.detach().to(torch.float64) for t in got)
        off = _first_wrong(d_scores, torch.zeros_like(scores))
        if off is not None:
            hint = ("write the estimate for one sampled location with b_n = r_n, then take its "
                    "mean over the sampled location.")
            if torch.allclose(d_scores, alpha * (loglik - l_s), atol=1e-10):
                hint = ("that is the gradient of L_s itself with respect to the scores, what "
                        "the estimate has in expectation with a valid baseline. With b_n = r_n, "
                        "what is r_n - b_n for every sample?")
            elif torch.allclose(d_scores, posterior - alpha, atol=1e-10):
                hint = ("that is the gradient of log p(y | a), which no REINFORCE estimate "
                        "here has as its mean. With b_n = r_n, what is r_n - b_n?")
            (k, (row, col)) = off
            expect_true(False, f"for input {desc} d_scores is wrong at {k} of "
                               f"{scores.numel()} entries, e.g. example {row}, location {col}: "
                               f"you return {float(d_scores[row, col]):.6g}.", hint=hint)
        off = _first_wrong(d_loglik, alpha)
        if off is not None:
            hint = ("the pathwise term of one sample is the gradient of l at the sampled "
                    "location; average it over the location drawn.")
            if torch.allclose(d_loglik, posterior, atol=1e-10):
                hint = ("those are the posterior weights p(s | y, a); the location is drawn "
                        "before the label is seen.")
            elif torch.allclose(d_loglik, torch.full_like(alpha, 1 / alpha.shape[-1])):
                hint = "the model does not look at every location equally often."
            (k, (row, col)) = off
            expect_true(False, f"for input {desc} d_loglik is wrong at {k} of "
                               f"{scores.numel()} entries, e.g. example {row}, location {col}: "
                               f"you return {float(d_loglik[row, col]):.6g}.", hint=hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# attention-iw-bound: the K-sample importance-weighted bound at given draws
def _log(x):
    return _t(x).log()


_IW_CASES = [
    # (description, prior [n, L], loglik [n, L], q [n, L], locations [n, K])
    ("prior [[0.5, 0.3, 0.2]], loglik [[-0.5, -2, -1]], q [[0.2, 0.5, 0.3]], locations [[0, 2]]",
     [[0.5, 0.3, 0.2]], [[-0.5, -2.0, -1.0]], [[0.2, 0.5, 0.3]], [[0, 2]]),
    # a location drawn twice is two of the K samples: counted twice
    ("prior [[0.5, 0.3, 0.2]], loglik [[-0.5, -2, -1]], q [[0.2, 0.5, 0.3]], locations "
     "[[1, 1, 0]] (location 1 drawn twice)",
     [[0.5, 0.3, 0.2]], [[-0.5, -2.0, -1.0]], [[0.2, 0.5, 0.3]], [[1, 1, 0]]),
    ("K = 1: prior [[0.25, 0.75]], loglik [[-3, -0.2]], q [[0.6, 0.4]], locations [[0]]",
     [[0.25, 0.75]], [[-3.0, -0.2]], [[0.6, 0.4]], [[0]]),
    ("2 examples over L = 4, K = 4, locations [[3, 0, 3, 1], [2, 2, 2, 2]]",
     [[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]],
     [[-1.0, -0.3, -2.5, -0.8], [-4.0, -1.5, -0.05, -3.0]],
     [[0.3, 0.3, 0.1, 0.3], [0.1, 0.1, 0.7, 0.1]], [[3, 0, 3, 1], [2, 2, 2, 2]]),
    # every weight underflows: exp(-1000) is 0 in float64
    ("loglik [[-1000, -1001, -1003]] (every weight underflows), prior [[0.2, 0.3, 0.5]], "
     "q [[0.4, 0.4, 0.2]], locations [[0, 1, 2]]",
     [[0.2, 0.3, 0.5]], [[-1000.0, -1001.0, -1003.0]], [[0.4, 0.4, 0.2]], [[0, 1, 2]]),
    # rows on different scales: one shift for the whole batch underflows the first row
    ("loglik [[-1000, -1002, -1001], [-0.5, -2, -1]] (rows on different scales), prior and q "
     "uniform, locations [[0, 1], [2, 0]]",
     [[1 / 3] * 3, [1 / 3] * 3], [[-1000.0, -1002.0, -1001.0], [-0.5, -2.0, -1.0]],
     [[1 / 3] * 3, [1 / 3] * 3], [[0, 1], [2, 0]]),
    # one drawn location explains the label, the other not at all: any shift but the maximum
    # (the first term, the minimum, the mean) overflows
    ("loglik [[-2000, -0.1, -2000, -2000]] (one location explains the label), prior and q "
     "uniform, locations [[0, 1, 3]]",
     [[0.25] * 4], [[-2000.0, -0.1, -2000.0, -2000.0]], [[0.25] * 4], [[0, 1, 3]]),
    # a drawn location the model never attends (prior 0): its weight is 0, the bound finite;
    # q = 0 at a location never drawn
    ("prior [[0.0, 0.6, 0.4]] (location 0 never attended), q [[0.5, 0.5, 0.0]] (location 2 "
     "never drawn), loglik [[-0.1, -1.5, -0.2]], locations [[0, 1, 1]]",
     [[0.0, 0.6, 0.4]], [[-0.1, -1.5, -0.2]], [[0.5, 0.5, 0.0]], [[0, 1, 1]]),
]


def _salted_iw_cases():
    """Random draws (with repeats), under the grader's secret salt (none in a notebook)."""
    if not check_salt():
        return []
    g = check_generator(59)
    n, L, K = 3, 5, 4
    prior = torch.softmax(torch.randn(n, L, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(n, L, generator=g, dtype=torch.float64), -1)
    ll = -3 * torch.rand(n, L, generator=g, dtype=torch.float64)
    ll += torch.tensor([[-1000.0], [0.0], [-300.0]], dtype=torch.float64)[
        torch.randperm(n, generator=g)]
    locs = torch.multinomial(q, K, replacement=True, generator=g)
    return [(f"prior {describe(prior)}, loglik {describe(ll)} (rows on different scales), q "
             f"{describe(q)}, locations {locs.tolist()}",
             prior.tolist(), ll.tolist(), q.tolist(), locs.tolist())]


def _iw_reference(log_prior, loglik, log_q, locations):
    log_w = (log_prior.gather(-1, locations) + loglik.gather(-1, locations)
             - log_q.gather(-1, locations))
    return torch.logsumexp(log_w, dim=-1) - torch.log(torch.tensor(
        float(locations.shape[-1]), dtype=torch.float64))


@exercise("attention-iw-bound", "the importance-weighted bound at given draws")
def _check_iw_bound(iw_sample_bound):
    """``iw_sample_bound(log_prior, loglik, log_q, locations)`` -> ``[n]``."""
    cases = _IW_CASES + _salted_iw_cases()
    for desc, prior, ll, q, locs in cases:
        log_prior, loglik, log_q = _log(prior), _t(ll), _log(q)
        locations = torch.tensor(locs, dtype=torch.int64)
        args = (log_prior.clone(), loglik.clone(), log_q.clone(), locations.clone())
        with watch_calls(attention.iw_bound, attention.iw_bound_exact,
                         attention.iw_enumerate) as seen:
            got = call(iw_sample_bound, *args, input_desc=desc)
        expect_true(not seen,
                    f"for input {desc} your function calls softmaxbook.attention."
                    f"{seen[0] if seen else ''}, which this exercise asks you to write "
                    f"yourself.")
        n = loglik.shape[0]
        expect_true(isinstance(got, torch.Tensor) and got.shape == (n,),
                    f"for input {desc} the result should be a tensor of shape ({n},) (one "
                    f"value per example), got {describe(got)}.",
                    hint="average the K weights of each example: reduce over the last axis of "
                         "'locations', not over the examples.")
        expect_true(bool(torch.isfinite(got).all()),
                    f"for input {desc} the result is not finite: {describe(got)}.",
                    hint="exp(-1000) is 0 in floating point; stay in log space: the log of a "
                         "mean of weights is a log-sum-exp of the log-weights (shifted by each "
                         "row's own maximum) minus log K.")
        expect_true(all(torch.equal(x, y) for x, y in zip(args, (log_prior, loglik, log_q,
                                                                 locations))),
                    f"for input {desc} your function changed its inputs in place.")
        _expect_float64(got, desc)
        expect_close(got.detach(), _iw_reference(log_prior, loglik, log_q, locations),
                     input_desc=desc, rtol=1e-9, atol=1e-9, what="bound",
                     hint="the bound is log((1/K) sum_k w_k) with w_k = p(s_k | a) p(y | s_k, a) "
                          "/ q(s_k), one term per draw (a location drawn twice counts twice): "
                          "the log of the mean of the weights, not the mean of their logs (the "
                          "ELBO's one-draw estimate), with 1/K, not 1/L, and q dividing.")
    return len(cases)
