"""Checks for the coding exercises of the chapter "Noise-contrastive estimation and negative
sampling" (book/04_nce.ipynb).

* ``nce-objective``: the NCE loss from scores and log noise probabilities, with the noise term's
  sign right (the source's sign makes the objective unbounded), the ``log k`` in the log-odds,
  the sum (not the mean) over the k noise words, and stable at extreme scores.
* ``nce-alias-table``: Vose's alias table; checked by the distribution the table samples, exactly.
* ``nce-shifted-pmi``: the optimum of negative sampling, PMI - log k, from a joint table.
* ``nce-ex-ns-optimum`` (a derivation's end result): ``ns_log_mass(p_d, q, k)``, the log of the
  total mass sum_w exp s*(w) = sum_w p_d(w) / (k q(w)) of negative sampling's optimum per row
  (0 for a normalised optimum, k missing or with the wrong sign, the sum without its log, the
  posterior for e^s*, q dropped get hints of their own).
* ``nce-ex-posterior`` (a derivation's end result): ``data_log_odds(log_pd, log_q, prior)``, the
  posterior log-odds log p_d - log q + log(pi / (1 - pi)) that a word came from the data when
  the data's prior is pi (pi = 1 / (k + 1) gives NCE's log p_d - log kq; the prior missing,
  upside down or without the noise's part, the posterior or its log for the log-odds, and the
  noise's log-odds get hints of their own).
* ``nce-infonce-symmetric``: ``symmetric_infonce(m, eps, k)``, the exact InfoNCE bound with the
  best critic for x uniform on m values and y = x with probability 1 - eps (else uniform), as a
  sum over the binomial number of negatives that land on x's partner.
* ``nce-class-softmax``: ``class_log_prob(hidden, class_weight, word_weight, class_sizes,
  targets)``, the log-probabilities of the targets under a class-factored softmax (words in
  consecutive blocks), compared with ``class_softmax_log_prob``; a missing class or word term,
  a word softmax over all V words, boundaries off by one, log of a softmax that underflows, and
  probabilities for log-probabilities get hints of their own.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import torch

from .. import nce as _nce
from . import (_ForbiddenCall, call, check_generator, check_salt, describe, exercise,
               expect_close, expect_true)
from . import expect_formula
from ..nce import nce_loss

f64 = dict(dtype=torch.float64)

_NO_PACKAGE = ("The exercise asks you to write it yourself; the package's function is what the "
               "check compares with.")
# the derivation checks compute their own formula: the package is off limits all the same (its
# functions hold the chapter's results), but not because the check compares with it (review L1)
_NO_PACKAGE_DERIVED = ("The exercise asks for the result of your own derivation; softmaxbook.nce "
                       "is off limits here, as the task says.")


@contextmanager
def _package_forbidden():
    """While active, every public function and class of ``softmaxbook.nce`` raises.

    Each of them validates its tensor arguments through the module attribute
    ``as_float_tensor``, looked up when it runs; replacing it catches a call of ``nce_loss``,
    ``negative_sampling_loss``, ``AliasSampler`` ... however the learner imported them (a name
    bound by ``from softmaxbook.nce import nce_loss`` still runs the same function).
    """
    saved = _nce.as_float_tensor

    def tripwire(*args, **kwargs):
        raise _ForbiddenCall("a function of softmaxbook.nce")

    _nce.as_float_tensor = tripwire
    try:
        yield
    finally:
        _nce.as_float_tensor = saved


# ------------------------------------------------------------------------------------------------
def _objective_cases():
    g = check_generator(7)  # public in a notebook; the grader's secret salt changes it
    s = torch.randn(5, generator=g, **f64)
    n = torch.randn(5, 3, generator=g, **f64)
    lq = torch.log(torch.rand(5, generator=g, **f64) * 0.2 + 0.01)
    nq = torch.log(torch.rand(5, 3, generator=g, **f64) * 0.2 + 0.01)
    yield "5 examples, k = 3, moderate scores", s, n, lq, nq, None
    k1 = torch.tensor([[0.5], [-1.0]], **f64)
    yield ("2 examples, k = 1", torch.tensor([1.0, -2.0], **f64), k1,
           torch.tensor([-2.0, -1.0], **f64), torch.tensor([[-1.5], [-3.0]], **f64), None)
    big = torch.tensor([900.0, -900.0, 60.0], **f64)
    yield ("extreme scores s = [900, -900, 60], noise scores [[-900, 900]] * 3",
           big, torch.tensor([[-900.0, 900.0]] * 3, **f64), torch.full((3,), -2.0, **f64),
           torch.full((3, 2), -2.0, **f64),
           "log(sigmoid(x)) is log(0) = -inf once sigmoid underflows (x < -745 in float64). "
           "Use torch.nn.functional.logsigmoid, or -softplus(-x), which are exact everywhere.")
    if check_salt():  # the grader's secret salt: extreme random scores, k = 4
        s = 900 * torch.randn(4, generator=g, **f64)
        n = 900 * torch.randn(4, 4, generator=g, **f64)
        lq = torch.log(torch.rand(4, generator=g, **f64) * 0.2 + 0.01)
        nq = torch.log(torch.rand(4, 4, generator=g, **f64) * 0.2 + 0.01)
        yield (f"extreme random scores s = {describe(s)}, noise scores {describe(n)}, k = 4",
               s, n, lq, nq, "log(sigmoid(x)) is log(0) = -inf once sigmoid underflows (x < "
               "-745 in float64). Use torch.nn.functional.logsigmoid, or -softplus(-x).")


@exercise("nce-objective", "the NCE loss")
def _check_objective(objective):
    """``objective(data_scores [B], noise_scores [B, k], data_log_q [B], noise_log_q [B, k])``
    -> the mean over the batch of the per-example NCE loss (a 0-d tensor)."""
    n_cases = 0
    for desc, s, n, lq, nq, hint in _objective_cases():
        with _package_forbidden():
            got = call(objective, s.clone(), n.clone(), lq.clone(), nq.clone(),
                       input_desc=desc, forbid_reason=_NO_PACKAGE)
        want = nce_loss(s, n, lq, nq)
        if hint is None:
            k = n.shape[1]
            d_n = n - nq - math.log(k)
            d_s = s - lq - math.log(k)
            wrong_sign = (-torch.nn.functional.logsigmoid(d_s)
                          + torch.nn.functional.logsigmoid(d_n).sum(-1)).mean()
            no_log_k = nce_loss(s, n, lq - math.log(k), nq - math.log(k))
            mean_k = (-torch.nn.functional.logsigmoid(d_s)
                      - torch.nn.functional.logsigmoid(-d_n).mean(-1)).mean()
            g = torch.as_tensor(got, **f64) if isinstance(got, (torch.Tensor, float)) else None
            if g is not None and g.numel() == 1 and torch.isclose(g.reshape(()), wrong_sign):
                hint = ("a noise word has label 0: its term is log P(Y = 0 | w') = "
                        "log(1 - sigma(Delta)) = log sigma(-Delta). With the opposite sign the "
                        "loss can be driven to -infinity by raising the noise scores.")
            elif g is not None and g.numel() == 1 and k > 1 and torch.isclose(
                    g.reshape(()), no_log_k):
                hint = ("the log-odds of 'data' are Delta = s - log(k q), not s - log q: "
                        "there are k noise words for every data word.")
            elif g is not None and g.numel() == 1 and k > 1 and torch.isclose(
                    g.reshape(()), mean_k):
                hint = "sum the k noise terms of an example; do not average them."
            else:
                hint = ("per example: -log sigma(Delta(w)) - sum_j log sigma(-Delta(w'_j)) with "
                        "Delta = s - log(k q); then the mean over the batch.")
        expect_close(got, want, input_desc=desc, rtol=1e-9, atol=1e-12, hint=hint)
        n_cases += 1
    # float32 input stays float32-accurate and finite
    s, n = torch.tensor([30.0, -30.0]), torch.tensor([[-30.0, 30.0], [0.0, 1.0]])
    lq, nq = torch.full((2,), -1.0), torch.full((2, 2), -1.0)
    desc = "float32 scores [30, -30], noise [[-30, 30], [0, 1]], log q = -1"
    with _package_forbidden():
        got = call(objective, s, n, lq, nq, input_desc=desc, forbid_reason=_NO_PACKAGE)
    expect_close(got, nce_loss(s.double(), n.double(), lq.double(), nq.double()),
                 input_desc=desc, rtol=1e-5, atol=1e-6,
                 hint="keep the computation stable: logsigmoid, not log of sigmoid.")
    return n_cases + 1


# ------------------------------------------------------------------------------------------------
def _table_distribution(prob, alias, V):
    prob = torch.as_tensor(prob, **f64).reshape(-1)
    alias = torch.as_tensor(alias).long().reshape(-1)
    out = prob.clone()
    out.index_add_(0, alias, 1.0 - prob)
    return out / V


def _as_table(prob, alias, V):
    """(prob float64 [V], alias int64 [V]) from tensors, NumPy arrays or lists; None where the
    value is not a flat sequence of V numbers (alias: of integers, e.g. 2 but not 2.0)."""
    def flat(x):
        try:
            if isinstance(x, torch.Tensor):
                t = x.detach()
            elif isinstance(x, (list, tuple)):
                # Python floats are float64; torch.as_tensor would round them to float32
                floats = any(isinstance(v, float) for v in x)
                t = torch.tensor(x, dtype=torch.float64) if floats else torch.tensor(x)
            else:  # NumPy arrays keep their dtype
                t = torch.as_tensor(np.array(x))
        except (TypeError, ValueError, RuntimeError):
            return None
        return t if t.dim() == 1 and t.numel() == V else None

    prob_t, alias_t = flat(prob), flat(alias)
    if prob_t is not None and (prob_t.is_complex() or prob_t.dtype == torch.bool):
        prob_t = None
    if alias_t is not None and (alias_t.is_floating_point() or alias_t.is_complex()
                                or alias_t.dtype == torch.bool):
        alias_t = None
    # the float64 check of the sampled distribution keeps the learner's precision: a float32
    # prob stays float32-rounded (and is caught), a list of Python floats is float64
    if prob_t is not None and not prob_t.is_floating_point():
        prob_t = prob_t.to(torch.float64)
    return prob_t, (alias_t.long() if alias_t is not None else None)


@exercise("nce-alias-table", "Vose's alias table")
def _check_alias_table(alias_table):
    """``alias_table(probs [V], float64, sums to 1)`` -> ``(prob [V] float, alias [V] int)``."""
    cases = [
        ("probs = [0.5, 0.3, 0.2]", torch.tensor([0.5, 0.3, 0.2], **f64)),
        ("uniform over 4 words", torch.full((4,), 0.25, **f64)),
        ("one word", torch.tensor([1.0], **f64)),
        ("probs = [0.1, 0, 0.6, 0, 0.3] (two impossible words)",
         torch.tensor([0.1, 0.0, 0.6, 0.0, 0.3], **f64)),
        ("a Zipf law over 50 words", (1 / torch.arange(1, 51, **f64)) /
         (1 / torch.arange(1, 51, **f64)).sum()),
        ("one word with 0.97 of the mass", torch.tensor([0.01, 0.97, 0.01, 0.01], **f64)),
    ]
    if check_salt():  # the grader's secret salt: random laws with impossible words
        g = check_generator(71)
        for V in (int(v) for v in torch.randint(3, 40, (2,), generator=g)):
            w = torch.rand(V, generator=g, **f64) ** 3
            w[torch.rand(V, generator=g) < 0.25] = 0.0
            w[int(torch.randint(0, V, (1,), generator=g))] += 0.5
            p = w / w.sum()
            cases.append((f"probs = {describe(p)} ({V} words, random)", p))
    for desc, p in cases:
        with _package_forbidden():
            out = call(alias_table, p.clone(), input_desc=desc,
                       forbid_reason=_NO_PACKAGE + " (AliasSampler builds the same table.)")
        expect_true(isinstance(out, tuple) and len(out) == 2,
                    f"for input {desc} return a pair (prob, alias), got {type(out).__name__}.")
        prob, alias = out
        V = p.numel()
        prob, alias = _as_table(prob, alias, V)
        expect_true(prob is not None and alias is not None,
                    f"for input {desc} prob and alias should be sequences of length {V} "
                    f"(tensors, NumPy arrays or lists): prob of numbers in [0, 1], alias of "
                    f"integer word indices.")
        expect_true(bool(((prob >= 0) & (prob <= 1 + 1e-12)).all()),
                    f"for input {desc} some entries of prob lie outside [0, 1]: "
                    f"{prob.tolist()}.",
                    hint="scale the probabilities by V first: column i holds V p_i of its own "
                         "word, and a column is full at 1.")
        expect_true(bool(((alias >= 0) & (alias < V)).all()),
                    f"for input {desc} some aliases are not word indices in [0, {V}).")
        expect_close(_table_distribution(prob, alias, V), p, input_desc=desc, rtol=0,
                     atol=1e-12, what="distribution the table samples",
                     hint=("keep the table in float64 (the dtype of probs): float32 "
                           "rounds every entry by about 1e-8."
                           if prob.dtype != torch.float64 else
                           "P(w) = (prob[w] + sum over columns i with alias[i] = w of "
                           "(1 - prob[i])) / V must equal p. When a small column s borrows "
                           "from a large word g, take 1 - V p_s away from g's remaining "
                           "mass."))
    return len(cases)


# ------------------------------------------------------------------------------------------------
def _shifted_pmi(joint, k):
    pw = joint.sum(0, keepdim=True)
    pc = joint.sum(1, keepdim=True)
    return torch.log(joint) - torch.log(pc) - torch.log(pw) - math.log(k)


@exercise("nce-shifted-pmi", "the optimum of negative sampling")
def _check_shifted_pmi(shifted_pmi):
    """``shifted_pmi(joint [C, V], k)`` -> ``[C, V]``: PMI(w, c) - log k."""
    g = check_generator(3)  # public in a notebook; the grader's secret salt changes it
    j1 = torch.rand(3, 4, generator=g, **f64)
    j1 /= j1.sum()
    j2 = torch.tensor([[0.1, 0.0, 0.2], [0.3, 0.25, 0.15]], **f64)
    # a square table: summing over the wrong axis, or a marginal that broadcasts along the wrong
    # axis (no keepdim), gives the right shape and the wrong values here
    j3 = torch.tensor([[0.3, 0.05, 0.05], [0.02, 0.2, 0.08], [0.1, 0.05, 0.15]], **f64)
    cases = [("a 3 x 4 joint table, k = 5", j1, 5),
             ("a 3 x 4 joint table, k = 1", j1, 1),
             ("joint [[0.1, 0, 0.2], [0.3, 0.25, 0.15]] (a pair never seen), k = 15", j2, 15),
             ("a 3 x 3 joint table [[0.3, 0.05, 0.05], [0.02, 0.2, 0.08], "
              "[0.1, 0.05, 0.15]], k = 2", j3, 2)]
    if check_salt():  # the grader's secret salt: a random square table with unseen pairs
        j4 = torch.rand(4, 4, generator=g, **f64)
        j4[torch.arange(4), torch.randperm(4, generator=g)] = 0.0
        j4 /= j4.sum()
        k = int(torch.randint(2, 20, (1,), generator=g))
        cases.append((f"a random 4 x 4 joint table {describe(j4)} (pairs never seen), k = {k}",
                      j4, k))
    for desc, joint, k in cases:
        with _package_forbidden():
            got = call(shifted_pmi, joint.clone(), k, input_desc=desc,
                       forbid_reason=_NO_PACKAGE)
        want = _shifted_pmi(joint, k)
        hint = ("PMI(w, c) = log p(w, c) - log p(c) - log p(w): p(c) sums the joint over words "
                "(dim 1), p(w) over contexts (dim 0). Then subtract log k.")
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            gg = got.detach().double()
            if torch.allclose(gg, want + math.log(k)) and k > 1:
                hint = "the optimum of negative sampling is shifted: subtract log k."
            elif torch.allclose(gg, torch.log(joint / joint.sum(1, keepdim=True)) - math.log(k)):
                hint = ("that is log p(w | c) - log k; negative sampling also divides by the "
                        "noise probability q(w) = p(w), the unigram distribution.")
        expect_close(got, want, input_desc=desc, rtol=1e-9, atol=1e-12, hint=hint)
        if bool((joint == 0).any()):
            expect_true(bool(torch.isneginf(torch.as_tensor(got)[joint == 0]).all()),
                        f"for input {desc} a pair with p(w, c) = 0 should get -inf.")
    return len(cases)


# ------------------------------------------------------------------------------------------------
# Derivations whose end result is a formula, entered as a function of float64 tensors
# ------------------------------------------------------------------------------------------------
# nce-ex-ns-optimum: log sum_w exp s*(w) for negative sampling's optimum s* = log p_d - log kq
def _ns_log_mass_cases():
    g = check_generator(97)  # public in a notebook; the grader's secret salt changes it
    pd5 = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05], **f64)
    u5 = torch.full((5,), 0.2, **f64)
    zipf = 1 / torch.arange(1, 9, **f64)
    zipf = zipf / zipf.sum()
    with_zero = torch.tensor([0.5, 0.25, 0.0, 0.25], **f64)
    q4 = torch.tensor([0.4, 0.3, 0.2, 0.1], **f64)
    C, V = 3, 12
    pd = torch.rand(C, V, generator=g, **f64) ** 3
    pd[torch.rand(C, V, generator=g) < 0.2] = 0.0
    pd[:, 0] += 0.01
    pd = pd / pd.sum(-1, keepdim=True)
    q = torch.rand(C, V, generator=g, **f64) + 0.05
    q = q / q.sum(-1, keepdim=True)
    k_rand = int(torch.randint(2, 30, (1,), generator=g))
    return [
        ("the sign experiment's p_d, uniform q, k = V = 5", pd5, u5, 5),
        ("the sign experiment's p_d, uniform q, k = 3", pd5, u5, 3),
        ("a Zipf p_d over 8 words, q = p_d, k = 10", zipf, zipf.clone(), 10),
        ("q = Zipf^0.75, k = 1", zipf, zipf**0.75 / (zipf**0.75).sum(), 1),
        ("a word the data never produce", with_zero, q4, 2),
        (f"{C} contexts of {V} words, some unseen, random q, k = {k_rand}", pd, q, k_rand),
    ]


@exercise("nce-ex-ns-optimum", "the total mass of negative sampling's optimum")
def _check_ns_log_mass(ns_log_mass):
    """``ns_log_mass(p_d, q, k)`` -> log sum_w p_d(w) / (k q(w)) over the last dimension."""
    cases = _ns_log_mass_cases()
    for name, pd, q, k in cases:
        desc = f"p_d = {describe(pd)}, q = {describe(q)}, k = {k} ({name})"
        args = (pd.clone(), q.clone())
        with _package_forbidden():
            got = call(ns_log_mass, *args, k, input_desc=desc, forbid_reason=_NO_PACKAGE_DERIVED)
        expect_true(all(torch.equal(x, y) for x, y in zip(args, (pd, q))),
                    f"for input {desc} your function changed its arguments in place.",
                    hint="compute new tensors; do not use in-place methods such as log_.")
        ratio = (pd / q).sum(-1)
        expected = torch.log(ratio) - math.log(k)
        scale = 1 + expected.abs()
        known = (
            (torch.zeros_like(expected),
             "s* is not a normalised log-probability: the sum of e^s* is 1 only in special "
             "cases. Compute it from s* = log p_d - log kq."),
            (torch.log(ratio), "k is missing: k noise words per data word scale the noise "
                               "term of the objective."),
            (torch.log(ratio) + math.log(k), "mind the sign of log k: more noise words push "
                                             "the optimal scores down."),
            (ratio / k, "that is the sum itself; the exercise asks for its logarithm."),
            (torch.log((pd / (pd + k * q)).sum(-1)),
             "p_d / (p_d + kq) is the posterior sigma(s*), not e^s*."),
            (torch.full_like(expected, -math.log(k)),
             "the noise distribution q does not cancel: it enters s* word by word."),
        )
        def where(i, pd=pd):
            return f"row {i} of p_d and q" if pd.dim() > 1 else "these p_d and q"

        hint = ("set the derivative of the per-word objective "
                "-p_d log sigma(s) - k q log sigma(-s) to zero, solve for s*, then sum e^s* "
                "over the words (the last dimension).")
        if (isinstance(got, torch.Tensor) and bool(torch.isnan(got).any())
                and bool((pd == 0).any())):
            hint = ("a word the data never produce (p_d = 0) has s* = -inf and adds "
                    "e^-inf = 0 to the sum; 0 * log 0 is NaN in floating point.")
        expect_formula(got, expected, where, desc, "log of the sum", scale, hint, known,
                       per_entry=False)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# nce-ex-posterior: the log-odds that a word came from the data, for a prior pi of the data
def _log_odds_cases():
    g = check_generator(101)  # public in a notebook; the grader's secret salt changes it
    n = 200
    log_pd = torch.log(torch.rand(n, generator=g, **f64) * 0.5 + 1e-4)
    log_q = torch.log(torch.rand(n, generator=g, **f64) * 0.5 + 1e-4)
    prior = 0.01 + 0.98 * torch.rand(n, generator=g, **f64)
    ks = torch.tensor([1.0, 3.0, 10.0, 100.0], **f64)
    return [
        ("NCE's prior 1 / (k + 1) for k = 1, 3, 10, 100",
         torch.log(torch.tensor([0.4, 0.3, 0.15, 0.1], **f64)),
         torch.full((4,), math.log(0.2), **f64),
         1 / (ks + 1)),
        ("p_d = q, priors 0.5, 0.9, 0.1", torch.full((3,), math.log(0.25), **f64),
         torch.full((3,), math.log(0.25), **f64), torch.tensor([0.5, 0.9, 0.1], **f64)),
        ("a word the data never produce (log p_d = -inf)",
         torch.tensor([-math.inf, math.log(0.3)], **f64),
         torch.log(torch.tensor([0.1, 0.1], **f64)),
         torch.tensor([0.25, 0.25], **f64)),
        (f"{n} random words and priors in [0.01, 0.99]", log_pd, log_q, prior),
        ("a [2, 3] batch", log_pd[:6].reshape(2, 3), log_q[:6].reshape(2, 3),
         prior[:6].reshape(2, 3)),
    ]


@exercise("nce-ex-posterior", "the posterior log-odds of data against noise")
def _check_log_odds(data_log_odds):
    """``data_log_odds(log_pd, log_q, prior)`` -> log_pd - log_q + log(prior / (1 - prior))."""
    cases = _log_odds_cases()
    for name, log_pd, log_q, prior in cases:
        desc = (f"log_pd = {describe(log_pd)}, log_q = {describe(log_q)}, "
                f"prior = {describe(prior)} ({name})")
        args = (log_pd.clone(), log_q.clone(), prior.clone())
        with _package_forbidden():
            got = call(data_log_odds, *args, input_desc=desc, forbid_reason=_NO_PACKAGE_DERIVED)
        expect_true(all(torch.equal(x, y) for x, y in zip(args, (log_pd, log_q, prior))),
                    f"for input {desc} your function changed its arguments in place.",
                    hint="compute a new tensor; do not use in-place methods such as sub_.")
        prior_odds = torch.log(prior) - torch.log1p(-prior)
        expected = log_pd - log_q + prior_odds
        scale = 1 + log_q.abs() + prior_odds.abs() + log_pd.abs().nan_to_num(posinf=0.0)
        known = (
            (log_pd - log_q, "the prior is missing: the posterior odds are the prior odds "
                             "times the likelihood ratio."),
            (log_pd - log_q - prior_odds, "the prior odds are upside down: the data word "
                                          "is favoured when its prior is large."),
            (log_pd - log_q + torch.log(prior), "the prior odds are pi / (1 - pi), not pi: "
                                                "the noise's prior enters too."),
            (torch.sigmoid(expected), "that is the posterior probability P(Y = 1 | w); the "
                                      "exercise asks for its log-odds."),
            (torch.nn.functional.logsigmoid(expected),
             "that is log P(Y = 1 | w); the log-odds also subtract log P(Y = 0 | w)."),
            (-expected, "that is the noise's log-odds; the exercise asks for the data's."),
        )

        def where(i, log_pd=log_pd, log_q=log_q, prior=prior):
            return (f"log_pd = {float(log_pd.flatten()[i]):.6g}, "
                    f"log_q = {float(log_q.flatten()[i]):.6g}, "
                    f"prior = {float(prior.flatten()[i]):.6g}")

        expect_formula(got, expected, where, desc, "log-odds", scale,
                       "Bayes' rule: P(Y = 1 | w) is proportional to pi p_d(w), P(Y = 0 | w) "
                       "to (1 - pi) q(w); take the log of their ratio. With pi = 1 / (k + 1) "
                       "you should get the chapter's log p_d - log kq.", known)
    return len(cases)


# ---------------------------------------------------------------------------------------------
# nce-infonce-symmetric: the exact InfoNCE bound of the symmetric pair
# ---------------------------------------------------------------------------------------------
def _symmetric_joint(m, eps):
    P = torch.full((m, m), eps / m, **f64) + (1 - eps) * torch.eye(m, **f64)
    return P / m


def _infonce_cases():
    cases = [(4, 0.3, 1), (8, 0.05, 3), (16, 0.02, 3), (64, 0.5, 2), (2, 0.9, 7),
             (16, 1.0, 5), (8, 0.0, 3)]
    if check_salt():
        g = check_generator(211)
        m = int(torch.randint(3, 12, (1,), generator=g))
        eps = float(torch.rand(1, generator=g, **f64)) * 0.8 + 0.1
        cases.append((m, round(eps, 6), int(torch.randint(2, 5, (1,), generator=g))))
    return cases


@exercise("nce-infonce-symmetric", "the exact InfoNCE bound of a symmetric pair")
def _check_symmetric_infonce(symmetric_infonce):
    cases = _infonce_cases()
    for m, eps, k in cases:
        desc = f"m = {m}, eps = {eps}, k = {k}"
        expected = float(_nce.infonce_exact(_symmetric_joint(m, eps), k))
        with _package_forbidden():
            got = call(symmetric_infonce, m, eps, k, input_desc=desc,
                       forbid_reason=_NO_PACKAGE)
        # a float32 answer is right to its rounding (~1e-7) but not to the 1e-9 compared below:
        # say so, rather than let the formula's hint suggest the derivation is wrong
        low = None
        if (isinstance(got, torch.Tensor) and got.is_floating_point()
                and got.dtype != torch.float64):
            low = str(got.dtype)
        elif isinstance(got, np.floating) and not isinstance(got, np.float64):
            low = f"numpy.{type(got).__name__}"
        if low is not None:
            expect_true(False, f"for input {desc} your bound is {low}; the task asks for a "
                               "float in float64 precision.",
                        hint=f"compute in float64 (Python floats, or tensors with "
                             f"dtype=torch.float64): {low} rounds at about 1e-7 or worse, "
                             "far above the 1e-9 relative that this check compares to.")
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = float(got)
        if isinstance(got, float) and math.isnan(got):
            expect_true(False, f"for input {desc} your bound is NaN.",
                        hint="with eps = 0 the positive is always x's partner and every other "
                             "value has probability 0: a term with weight 0 contributes 0, "
                             "even where its log is -inf.")
        expect_close(got, expected, input_desc=desc, rtol=1e-9, atol=1e-12, what="bound",
                     hint="given x, the positive y_0 is x's partner with probability "
                          "1 - eps + eps/m (else one of the others); the best critic's ratio "
                          "p(y | x) / p(y) is m (1 - eps) + eps for the partner and eps for the "
                          "others; each of the k negatives is drawn from p(y), uniform, so the "
                          "number c of them on the partner is Binomial(k, 1/m). Average "
                          "log((k + 1) r_0 / (r_0 + sum of the negatives' r)) over both.")
    return len(cases)


# ------------------------------------------------------------------------------------------------
def _class_cases():
    g = check_generator(311)

    def make(B, d, sizes, scale=1.0, targets=None):
        V = sum(sizes)
        h = scale * torch.randn(B, d, generator=g, **f64)
        cw = torch.randn(len(sizes), d, generator=g, **f64)
        ww = torch.randn(V, d, generator=g, **f64)
        t = (torch.randint(V, (B,), generator=g) if targets is None
             else torch.tensor(targets, dtype=torch.long))
        return h, cw, ww, list(sizes), t

    yield "B = 6, d = 4, class sizes [3, 5, 2, 6]", make(6, 4, [3, 5, 2, 6])
    sizes = [4, 1, 7, 3]
    ends = np.cumsum(sizes).tolist()
    edge = sorted({e - 1 for e in ends} | {e - s for e, s in zip(ends, sizes)})
    yield (f"class sizes {sizes}, targets {edge} (the first and last word of every class)",
           make(len(edge), 3, sizes, targets=edge))
    yield "one class of 9 words (a plain softmax)", make(5, 3, [9])
    yield "one word per class, 8 classes", make(4, 3, [1] * 8)
    yield ("near-certain rows: class sizes [3, 4, 5], hidden of size ~400",
           make(4, 3, [3, 4, 5], scale=400.0))
    if check_salt():
        n = int(torch.randint(2, 7, (1,), generator=g))
        sz = (torch.randint(1, 6, (n,), generator=g)).tolist()
        yield f"class sizes {sz}, B = 5", make(5, 3, sz)


def _class_wrong_variants(h, cw, ww, sizes, t):
    """What the usual mistakes return on this input, for the hints."""
    V = ww.shape[0]
    ends = torch.tensor(np.cumsum(sizes).tolist())
    starts = ends - torch.tensor(sizes)
    cls = torch.bucketize(t, ends, right=True)
    log_pc = torch.log_softmax(h @ cw.T, -1).gather(1, cls[:, None]).squeeze(1)
    logits = h @ ww.T
    own = logits.gather(1, t[:, None]).squeeze(1)
    mask = (torch.arange(V)[None] >= starts[cls][:, None]) & (torch.arange(V)[None] <
                                                             ends[cls][:, None])
    log_pw = own - torch.logsumexp(logits.masked_fill(~mask, -math.inf), 1)
    # the last word of each class put in the next class (bucketize without right=True)
    early = torch.bucketize(t, ends).clamp(max=len(sizes) - 1)
    off = []
    for b, c in enumerate(early.tolist()):
        lw = torch.log_softmax(ww[int(starts[c]):int(ends[c])] @ h[b], 0)
        j = min(int(t[b] - starts[c]), lw.numel() - 1)
        off.append(torch.log_softmax(cw @ h[b], 0)[c] + lw[j])
    return {
        "boundary": torch.stack(off) if off else log_pw,
        "class": log_pw,
        "word": log_pc,
        "all": log_pc + own - torch.logsumexp(logits, 1),
        "prob": (log_pc + log_pw).exp(),
    }


@exercise("nce-class-softmax", "the class-factored softmax")
def _check_class_softmax(class_log_prob):
    n_cases = 0
    for desc, (h, cw, ww, sizes, t) in _class_cases():
        want = _nce.class_softmax_log_prob(h, cw, ww, sizes, t)
        args = (h.clone(), cw.clone(), ww.clone(), list(sizes), t.clone())
        with _package_forbidden():
            got = call(class_log_prob, *args, input_desc=desc, forbid_reason=_NO_PACKAGE)
        expect_true(all(torch.equal(a, b) for a, b in zip(args[:3], (h, cw, ww)))
                    and torch.equal(args[4], t) and args[3] == sizes,
                    f"for input {desc} your function changed its arguments in place.",
                    hint="work on new tensors (x = x - m, not x -= m).")
        hint = ("log p(w | h) = log softmax(h W_class)[class of w] + log softmax over the words "
                "of w's class only of (h . u_v)[w]; the classes are consecutive blocks of word "
                "ids of the given sizes.")
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            g64 = got.detach().double()
            wrong = _class_wrong_variants(h, cw, ww, sizes, t)
            if not torch.isfinite(g64).all() and torch.isfinite(want).all():
                hint = ("your result is -inf or NaN where the exact one is finite: the log of a "
                        "softmax underflows for near-certain rows. Use torch.log_softmax or "
                        "subtract a logsumexp.")
            elif torch.allclose(g64, wrong["class"], rtol=1e-9, atol=1e-9):
                hint = ("the class term is missing: p(w | h) = p(class | h) p(w | class, h); "
                        "add log softmax(h W_class) at w's class.")
            elif torch.allclose(g64, wrong["word"], rtol=1e-9, atol=1e-9):
                hint = ("the word term is missing: add the log-probability of w among the words "
                        "of its class.")
            elif torch.allclose(g64, wrong["all"], rtol=1e-9, atol=1e-9):
                hint = ("the word's softmax runs over all V words; it must run over the words "
                        "of w's class only (that is what makes the model cheap and normalised).")
            elif torch.allclose(g64, wrong["prob"], rtol=1e-9, atol=1e-9):
                hint = "return log-probabilities, not probabilities."
            if (hint.startswith("log p(w | h)") and ("first and last" in desc or torch.allclose(
                    g64, wrong["boundary"], rtol=1e-9, atol=1e-9))):
                hint = ("check the class of the words on a class boundary: with sizes "
                        f"{sizes} word {sizes[0] - 1} is the last of class 0 and word "
                        f"{sizes[0]} the first of class 1.")
        expect_close(got, want, input_desc=desc, rtol=1e-9, atol=1e-9,
                     what="log-probabilities", hint=hint)
        n_cases += 1
    return n_cases
