"""The checks of the NCE chapter's coding exercises accept right answers and reject plausible
wrong ones with a message that names the input and helps."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from softmaxbook.exercises import ExerciseCheckFailed, check, registered
from softmaxbook.nce import AliasSampler, nce_loss


def test_registered():
    assert registered("nce") == ["nce-alias-table", "nce-class-softmax", "nce-ex-ns-optimum",
                                 "nce-ex-posterior", "nce-infonce-symmetric", "nce-objective",
                                 "nce-shifted-pmi"]


def stub(*args):
    raise NotImplementedError


# --- nce-objective ----------------------------------------------------------------------------
def right_objective(s, n, lq, nq):
    k = n.shape[-1]
    d, e = s - lq - math.log(k), n - nq - math.log(k)
    return (-F.logsigmoid(d) - F.logsigmoid(-e).sum(-1)).mean()


def source_sign(s, n, lq, nq):  # the source's + sum log sigma(Delta')
    k = n.shape[-1]
    d, e = s - lq - math.log(k), n - nq - math.log(k)
    return (-F.logsigmoid(d) + F.logsigmoid(e).sum(-1)).mean()


def no_log_k(s, n, lq, nq):
    return (-F.logsigmoid(s - lq) - F.logsigmoid(-(n - nq)).sum(-1)).mean()


def mean_over_k(s, n, lq, nq):
    k = n.shape[-1]
    d, e = s - lq - math.log(k), n - nq - math.log(k)
    return (-F.logsigmoid(d) - F.logsigmoid(-e).mean(-1)).mean()


def naive_log_sigmoid(s, n, lq, nq):
    k = n.shape[-1]
    d, e = s - lq - math.log(k), n - nq - math.log(k)
    return (-torch.log(torch.sigmoid(d)) - torch.log(torch.sigmoid(-e)).sum(-1)).mean()


def _log_k_batch_axis(s, n, lq, nq):
    # the difference between using log B and log k in Delta
    k, B = n.shape[-1], s.shape[0]
    wrong = (-F.logsigmoid(s - lq - math.log(B))
             - F.logsigmoid(-(n - nq - math.log(B))).sum(-1)).mean()
    return wrong - right_objective(s, n, lq, nq)


def right_objective_softplus(s, n, lq, nq):
    # -log sigma(x) = softplus(-x): the same loss written another way, with log k inside log(k q)
    k = torch.tensor(float(n.shape[1]), dtype=s.dtype)
    d = s - (torch.log(k) + lq)
    e = n - (torch.log(k) + nq)
    return torch.mean(F.softplus(-d) + torch.sum(F.softplus(e), dim=1))


@pytest.mark.parametrize("answer", [right_objective, right_objective_softplus])
def test_objective_accepts_right_answer(answer, capsys):
    assert check("nce-objective", answer)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("answer, message", [
    (source_sign, "moderate scores.*a noise word has label 0"),
    (no_log_k, "k = 3.*not s - log q"),
    (mean_over_k, "k = 3.*do not average"),
    (naive_log_sigmoid, "extreme scores.*logsigmoid"),
    (lambda s, n, lq, nq: right_objective(s, n, lq, nq) * s.shape[0], "moderate scores"),
    # the package's own loss: the check compares with it, so it must be refused
    (lambda s, n, lq, nq: nce_loss(s, n, lq, nq), "moderate scores.*softmaxbook.nce.*forbids"),
    # log k from the batch axis instead of the noise axis
    (lambda s, n, lq, nq: right_objective(s, n, lq, nq)
     + (n.shape[-1] - s.shape[0]) * 0.0 + _log_k_batch_axis(s, n, lq, nq), "moderate scores"),
    # float32 inside: right formula, float32 rounding
    (lambda s, n, lq, nq: right_objective(s.float(), n.float(), lq.float(), nq.float()),
     "moderate scores"),
    # negative sampling's loss: the log(k q) left out altogether
    (lambda s, n, lq, nq: (-F.logsigmoid(s) - F.logsigmoid(-n).sum(-1)).mean(), "moderate scores"),
    # the sum over the batch, not the mean
    (lambda s, n, lq, nq: (-F.logsigmoid(s - lq - math.log(n.shape[-1]))
                           - F.logsigmoid(-(n - nq - math.log(n.shape[-1]))).sum(-1)).sum(),
     "moderate scores"),
    (stub, "NotImplementedError"),
    (..., "no answer yet"),
])
def test_objective_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=f"(?s){message}"):
        check("nce-objective", answer)


# --- nce-alias-table --------------------------------------------------------------------------
def right_table(p):
    V = p.numel()
    scaled = (p * V).tolist()
    prob, alias = [1.0] * V, list(range(V))
    small = [i for i, x in enumerate(scaled) if x < 1]
    large = [i for i, x in enumerate(scaled) if x >= 1]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s], alias[s] = scaled[s], g
        scaled[g] = scaled[g] + scaled[s] - 1
        (small if scaled[g] < 1 else large).append(g)
    return torch.tensor(prob, dtype=torch.float64), torch.tensor(alias)


def unscaled_table(p):  # forgets to multiply by V
    V = p.numel()
    scaled = p.tolist()
    prob, alias = [1.0] * V, list(range(V))
    small = [i for i, x in enumerate(scaled) if x < 1 / V]
    large = [i for i, x in enumerate(scaled) if x >= 1 / V]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s], alias[s] = scaled[s], g
        scaled[g] = scaled[g] + scaled[s] - 1 / V
        (small if scaled[g] < 1 / V else large).append(g)
    return torch.tensor(prob, dtype=torch.float64), torch.tensor(alias)


def no_mass_update(p):  # the donor's mass is never reduced
    V = p.numel()
    scaled = (p * V).tolist()
    prob, alias = [1.0] * V, list(range(V))
    small = [i for i, x in enumerate(scaled) if x < 1]
    large = [i for i, x in enumerate(scaled) if x >= 1]
    j = 0
    for s in small:
        prob[s], alias[s] = scaled[s], large[j % len(large)]
        j += 1
    return torch.tensor(prob, dtype=torch.float64), torch.tensor(alias)


def right_table_lists(p):
    # the same algorithm, returned as Python lists (review, third edition: refused before)
    prob, alias = right_table(p)
    return prob.tolist(), alias.tolist()


def right_table_numpy(p):
    # Walker's layout built with NumPy: scaled probabilities, a queue of under-full columns
    V = p.numel()
    mass = p.numpy() * V
    prob, alias = np.ones(V), np.arange(V)
    under = [i for i in range(V) if mass[i] < 1]
    over = [i for i in range(V) if mass[i] >= 1]
    while under and over:
        s, g = under.pop(0), over[-1]
        prob[s], alias[s] = mass[s], g
        mass[g] -= 1 - mass[s]
        if mass[g] < 1:
            over.pop()
            under.append(g)
    return prob, alias


@pytest.mark.parametrize("answer", [right_table, right_table_lists, right_table_numpy])
def test_alias_table_accepts_right_answer(answer):
    assert check("nce-alias-table", answer)


def swapped_coin(p):  # keeps the alias with probability prob[i] instead of the own word
    prob, alias = right_table(p)
    return 1 - prob, alias


def alias_off_by_one(p):
    prob, alias = right_table(p)
    return prob, torch.where(prob < 1, (alias + 1) % p.numel(), alias)


def no_alias(p):  # scaled, clipped at 1, and no alias: the under-full columns lose mass
    return (p * p.numel()).clamp(max=1), torch.arange(p.numel())


@pytest.mark.parametrize("answer, message", [
    (unscaled_table, "for input probs = \\[0.5, 0.3, 0.2\\].*distribution the table samples"),
    (no_mass_update, "two impossible words.*remaining mass"),
    (lambda p: (p, torch.arange(p.numel())), "probs = \\[0.5, 0.3, 0.2\\]"),
    (lambda p: right_table(p)[0], "return a pair"),
    # the package's sampler builds the same table: refused
    (lambda p: (AliasSampler(p).prob, AliasSampler(p).alias),
     "probs = \\[0.5, 0.3, 0.2\\].*softmaxbook.nce.*forbids"),
    # the table in float32: off by ~1e-8
    (lambda p: (right_table(p.float())[0].float(), right_table(p)[1]),
     "probs = \\[0.5, 0.3, 0.2\\].*float64"),
    (swapped_coin, "probs = \\[0.5, 0.3, 0.2\\].*distribution the table samples"),
    (alias_off_by_one, "probs = \\[0.5, 0.3, 0.2\\].*distribution the table samples"),
    (no_alias, "probs = \\[0.5, 0.3, 0.2\\].*distribution the table samples"),
    # (alias, prob) in the wrong order
    (lambda p: right_table(p)[::-1], "probs = \\[0.5, 0.3, 0.2\\].*integer word indices"),
    # alias as floats (2.0 is not an index)
    (lambda p: (right_table(p)[0], right_table(p)[1].double()), "integer word indices"),
    # a [V, 1] column instead of [V]
    (lambda p: (right_table(p)[0][:, None], right_table(p)[1]), "sequences of length 3"),
    (stub, "NotImplementedError"),
])
def test_alias_table_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=f"(?s){message}"):
        check("nce-alias-table", answer)


# --- nce-shifted-pmi --------------------------------------------------------------------------
def right_pmi(joint, k):
    return (torch.log(joint) - torch.log(joint.sum(1, keepdim=True))
            - torch.log(joint.sum(0, keepdim=True)) - math.log(k))


def right_pmi_ratio(joint, k):
    # log of the ratio p(w, c) / (p(c) p(w) k) in one go; log 0 = -inf for unseen pairs
    outer = torch.outer(joint.sum(dim=1), joint.sum(dim=0))
    return torch.log(joint / (k * outer))


@pytest.mark.parametrize("answer", [right_pmi, right_pmi_ratio])
def test_shifted_pmi_accepts_right_answer(answer):
    assert check("nce-shifted-pmi", answer)


@pytest.mark.parametrize("answer, message", [
    (lambda j, k: right_pmi(j, k) + math.log(k), "k = 5.*subtract log k"),
    (lambda j, k: torch.log(j / j.sum(1, keepdim=True)) - math.log(k), "k = 5.*unigram"),
    (lambda j, k: (torch.log(j) - 2 * torch.log(j.sum(0, keepdim=True)) - math.log(k)),
     "k = 5.*dim 1"),
    (lambda j, k: torch.log(j.clamp(min=1e-12)) - torch.log(j.sum(1, keepdim=True))
     - torch.log(j.sum(0, keepdim=True)) - math.log(k), "never seen"),
    # marginals without keepdim: crashes on a 3 x 4 table
    (lambda j, k: torch.log(j) - torch.log(j.sum(1)) - torch.log(j.sum(0)) - math.log(k),
     "3 x 4 joint table"),
    # the same on a square table only: broadcasts p(c) along the wrong axis
    (lambda j, k: right_pmi(j, k) if j.shape[0] != j.shape[1] else
     torch.log(j) - torch.log(j.sum(1)) - torch.log(j.sum(0, keepdim=True)) - math.log(k),
     "3 x 3 joint table"),
    # smoothed noise (unigram^0.75) instead of the unigram the task names
    (lambda j, k: torch.log(j) - torch.log(j.sum(1, keepdim=True))
     - torch.log(j.sum(0, keepdim=True) ** 0.75 / (j.sum(0) ** 0.75).sum()) - math.log(k),
     "3 x 4 joint table"),
    # log p(c | w) - log k: divides by p(w) but forgets p(c)
    (lambda j, k: torch.log(j) - torch.log(j.sum(0, keepdim=True)) - math.log(k),
     "3 x 4 joint table"),
    # + log k instead of - log k
    (lambda j, k: right_pmi(j, k) + 2 * math.log(k), "k = 5"),
    # the probability ratio itself, not its log
    (lambda j, k: j / (j.sum(1, keepdim=True) * j.sum(0, keepdim=True)) / k, "k = 5"),
    (stub, "NotImplementedError"),
])
def test_shifted_pmi_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=f"(?s){message}"):
        check("nce-shifted-pmi", answer)


# --- nce-ex-ns-optimum: log sum_w exp(log p_d - log kq) -------------------------------------------
def ns_log_mass(p_d, q, k):
    return torch.log((p_d / q).sum(-1)) - math.log(k)


def ns_log_mass_lse(p_d, q, k):
    # logsumexp of the optimal scores, log 0 = -inf for unseen words drops out
    return torch.logsumexp(torch.log(p_d) - torch.log(k * q), dim=-1)


def ns_log_mass_sigmoid(p_d, q, k):
    # from the optimum's posterior sigma(s*) = p_d / (p_d + kq): e^s* = sigma / (1 - sigma)
    post = p_d / (p_d + k * q)
    return torch.log((post / (1 - post)).sum(dim=-1))


@pytest.mark.parametrize("answer", [ns_log_mass, ns_log_mass_lse, ns_log_mass_sigmoid])
def test_ns_log_mass_accepts_right_answers(answer, capsys):
    assert check("nce-ex-ns-optimum", answer)
    assert "correct on 6 test cases" in " ".join(capsys.readouterr().out.split())


def ns_in_place(p_d, q, k):
    return p_d.div_(q).sum(-1).log() - math.log(k)


@pytest.mark.parametrize("answer, message", [
    # the optimum taken for normalised (NCE's optimum)
    (lambda p, q, k: torch.zeros(p.shape[:-1], dtype=p.dtype),
     "(?s)k = 3 .*too small.*not a normalised log-probability"),
    (lambda p, q, k: torch.log((p / q).sum(-1)), "(?s)k = 5 .*too large.*k is missing"),
    (lambda p, q, k: torch.log((p / q).sum(-1)) + math.log(k), "(?s)mind the sign of log k"),
    (lambda p, q, k: (p / q).sum(-1) / k, "(?s)k = 5 .*return 1, which is too large.*logarithm"),
    (lambda p, q, k: torch.log((p / (p + k * q)).sum(-1)), "(?s)posterior sigma"),
    (lambda p, q, k: torch.full(p.shape[:-1], -math.log(k), dtype=p.dtype),
     "(?s)q does not cancel"),
    # log of the mean instead of the sum
    (lambda p, q, k: torch.log((p / q).mean(-1)) - math.log(k), "too small"),
    # log q taken k times: s* = log p_d - k log q
    (lambda p, q, k: torch.logsumexp(torch.log(p) - k * torch.log(q), -1),
     "wrong at 1 of 1 entries"),
    # the expected optimal score E_pd[s*] instead of the log of the total mass
    (lambda p, q, k: torch.nansum(p * (torch.log(p) - torch.log(k * q)), -1),
     "wrong at 1 of 1 entries"),
    # the words the data never produce make it NaN: 0 * log 0
    (lambda p, q, k: torch.log((p * torch.exp(-torch.log(p) * 0) / q).sum(-1)) - math.log(k)
     + 0 * (p * torch.log(p)).sum(-1), "(?s)not a number.*p_d = 0"),
    # summed over the contexts instead of the words
    (lambda p, q, k: torch.log((p / q).sum(0)) - math.log(k), "should be a float tensor of shape"),
    (lambda p, q, k: (torch.log((p / q).sum(-1)) - math.log(k)).float(),
     "your log of the sum is torch.float32"),
    (lambda p, q, k: float(torch.log((p / q).sum()) - math.log(k)),
     "should be a float tensor of shape"),
    (ns_in_place, "changed its arguments in place"),
    (stub, "NotImplementedError"),
    (..., "no answer yet"),
])
def test_ns_log_mass_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("nce-ex-ns-optimum", answer)


# --- nce-ex-posterior: log-odds log p_d - log q + log(pi / (1 - pi)) ------------------------------
def data_log_odds(log_pd, log_q, prior):
    return log_pd - log_q + torch.log(prior) - torch.log1p(-prior)


def data_log_odds_by_ratio(log_pd, log_q, prior):
    # log of the posterior odds pi p_d / ((1 - pi) q)
    return torch.log(prior * torch.exp(log_pd) / ((1 - prior) * torch.exp(log_q)))


def data_log_odds_logit(log_pd, log_q, prior):
    # the prior's logit, torch.logit(pi) = log(pi / (1 - pi))
    return (log_pd - log_q) + torch.logit(prior)


@pytest.mark.parametrize("answer", [data_log_odds, data_log_odds_by_ratio, data_log_odds_logit])
def test_log_odds_accepts_right_answers(answer, capsys):
    assert check("nce-ex-posterior", answer)
    assert "correct on 5 test cases" in " ".join(capsys.readouterr().out.split())


def log_odds_in_place(log_pd, log_q, prior):
    return log_pd.sub_(log_q).add_(torch.logit(prior))


@pytest.mark.parametrize("answer, message", [
    (lambda lp, lq, pi: lp - lq, "(?s)k = 1, 3, 10, 100.*too large.*the prior is missing"),
    (lambda lp, lq, pi: lp - lq - torch.logit(pi), "(?s)too large.*upside down"),
    (lambda lp, lq, pi: lp - lq + torch.log(pi), "(?s)too small.*the noise's prior enters"),
    (lambda lp, lq, pi: torch.sigmoid(lp - lq + torch.logit(pi)),
     "(?s)posterior probability"),
    (lambda lp, lq, pi: F.logsigmoid(lp - lq + torch.logit(pi)), "(?s)also subtract"),
    (lambda lp, lq, pi: lq - lp - torch.logit(pi), "(?s)noise's log-odds"),
    # the data's prior dropped from the odds: only 1 / (1 - pi)
    (lambda lp, lq, pi: lp - lq - torch.log1p(-pi), "too large"),
    # the odds, not their log
    (lambda lp, lq, pi: torch.exp(lp - lq) * pi / (1 - pi), "wrong at 4 of 4 entries"),
    # the posterior of Bayes' rule with the likelihoods added instead of multiplied
    (lambda lp, lq, pi: torch.log(pi + torch.exp(lp)) - torch.log(1 - pi + torch.exp(lq)),
     "wrong at 4 of 4 entries"),
    # log q dropped (the noise's likelihood)
    (lambda lp, lq, pi: lp + torch.logit(pi), "too small"),
    # the -inf word turned into NaN: 0 * inf
    (lambda lp, lq, pi: torch.where(torch.isinf(lp), torch.nan, lp) - lq + torch.logit(pi),
     "not a number"),
    (lambda lp, lq, pi: (lp - lq + torch.logit(pi)).float(), "your log-odds is torch.float32"),
    (lambda lp, lq, pi: (lp - lq + torch.logit(pi)).sum(), "should be a float tensor of shape"),
    (log_odds_in_place, "changed its arguments in place"),
    (stub, "NotImplementedError"),
    (..., "no answer yet"),
])
def test_log_odds_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("nce-ex-posterior", answer)


def test_ns_log_mass_precision_loss_gets_the_precision_hint():
    """torch.log of an integer tensor is float32 (review of the new derivation checks, M3): the
    message names the precision loss, measured against the size of the terms (the right
    answer here is 0, which has no relative error of its own)."""
    def ns(p_d, q, k):
        return torch.log((p_d / q).sum(-1)) - torch.log(torch.tensor(k))
    with pytest.raises(ExerciseCheckFailed, match=r"(?s)relative difference \d\.\de-0[78]"
                                                  r".*precision was lost"):
        check("nce-ex-ns-optimum", ns)


def test_derivation_checks_refuse_the_package_for_the_stated_reason():
    """The two derivation checks compute their own formula: the refusal says the package is off
    limits as the task says, not that the check compares with it (review L1)."""
    from softmaxbook.nce import nce_posterior

    def via_package(log_pd, log_q, prior):
        p = nce_posterior(log_pd, log_q, 1)
        return torch.log(p) - torch.log1p(-p) + torch.log(prior / (1 - prior))
    with pytest.raises(ExerciseCheckFailed, match=r"(?s)off limits here, as the task says") as e:
        check("nce-ex-posterior", via_package)
    assert "compares with" not in str(e.value)


# --- nce-infonce-symmetric --------------------------------------------------------------------
def _binomial_infonce(m, eps, k, *, ratio_k=None, num_k=None, p_neg=None, partner_always=False,
                      own_in_denominator=True):
    a = 1 - eps + eps / m
    R, e = m * a, eps
    p = 1 / m if p_neg is None else p_neg
    top = (k + 1) if num_k is None else num_k
    total = 0.0
    for c in range(k + 1):
        w = math.comb(k, c) * p**c * (1 - p) ** (k - c)
        own_r, other_r = (R, e) if own_in_denominator else (0.0, 0.0)
        total += w * a * math.log(top * R / (own_r + c * R + (k - c) * e))
        if not partner_always and a < 1:
            total += w * (1 - a) * math.log(top * e / (other_r + c * R + (k - c) * e))
    return total


def right_binomial(m, eps, k):
    return _binomial_infonce(m, eps, k)


def right_by_tuples(m, eps, k):
    # every (x's partner or not) positive and every tuple of negatives, x = 0 by symmetry
    import itertools
    p_pos = [(1 - eps + eps / m) if y == 0 else eps / m for y in range(m)]
    r = [p * m for p in p_pos]
    total = 0.0
    for y0 in range(m):
        if p_pos[y0] == 0:
            continue
        for negs in itertools.product(range(m), repeat=k):
            s = r[y0] + sum(r[y] for y in negs)
            total += p_pos[y0] * m ** -k * math.log((k + 1) * r[y0] / s)
    return total


def right_tensor(m, eps, k):
    c = torch.arange(k + 1, dtype=torch.float64)
    logw = (torch.lgamma(torch.tensor(k + 1.0, dtype=torch.float64)) - torch.lgamma(c + 1)
            - torch.lgamma(k - c + 1) + c * math.log(1 / m) + (k - c) * math.log1p(-1 / m))
    w = logw.exp()
    a = 1 - eps + eps / m
    R = m * a
    den = c * R + (k - c) * eps
    out = a * (w * torch.log((k + 1) * R / (R + den))).sum()
    if eps > 0:
        out = out + (1 - a) * (w * torch.log((k + 1) * eps / (eps + den))).sum()
    return out


def k_not_k_plus_1(m, eps, k):
    return _binomial_infonce(m, eps, k, num_k=k)


def positive_not_in_denominator(m, eps, k):
    return _binomial_infonce(m, eps, k, own_in_denominator=False)


def negatives_from_the_conditional(m, eps, k):
    return _binomial_infonce(m, eps, k, p_neg=1 - eps + eps / m)


def positive_always_the_partner(m, eps, k):
    return _binomial_infonce(m, eps, k, partner_always=True)


def the_ceiling_formula(m, eps, k):
    a = 1 - eps + eps / m
    P = [a] + [eps / m] * (m - 1)
    mi = sum(p * math.log(p * m) for p in P if p > 0)
    return min(mi, math.log(k + 1))


def mutual_information_itself(m, eps, k):
    a = 1 - eps + eps / m
    return sum(p * math.log(p * m) for p in [a] + [eps / m] * (m - 1) if p > 0)


def expected_count_plugged_in(m, eps, k):
    a = 1 - eps + eps / m
    R, c = m * a, k / m
    out = a * math.log((k + 1) * R / (R + c * R + (k - c) * eps))
    if eps > 0:
        out += (1 - a) * math.log((k + 1) * eps / (eps + c * R + (k - c) * eps))
    return out


def in_bits(m, eps, k):
    return _binomial_infonce(m, eps, k) / math.log(2)


def mixing_over_the_other_values(m, eps, k):
    # "else uniform over the m - 1 others": a different joint
    a = 1 - eps
    R, e = m * a, m * eps / (m - 1)
    total = 0.0
    for c in range(k + 1):
        w = math.comb(k, c) * (1 / m) ** c * (1 - 1 / m) ** (k - c)
        total += w * a * math.log((k + 1) * R / (R + c * R + (k - c) * e))
        if eps > 0:
            total += w * eps * math.log((k + 1) * e / (e + c * R + (k - c) * e))
    return total


def nan_at_eps_zero(m, eps, k):
    a = 1 - eps + eps / m
    R, e = m * a, eps
    total = 0.0
    for c in range(k + 1):
        w = math.comb(k, c) * (1 / m) ** c * (1 - 1 / m) ** (k - c)
        total += w * a * math.log((k + 1) * R / (R + c * R + (k - c) * e))
        other = (k + 1) * e / (e + c * R + (k - c) * e)
        total += w * (1 - a) * (math.log(other) if other > 0 else float("nan"))
    return total


def library_call(m, eps, k):
    from softmaxbook.nce import infonce_exact
    P = torch.full((m, m), eps / m, dtype=torch.float64) + (1 - eps) * torch.eye(m)
    return infonce_exact(P / m, k)


@pytest.mark.parametrize("answer", [right_binomial, right_by_tuples, right_tensor])
def test_symmetric_infonce_accepts_right_answers(answer, capsys):
    assert check("nce-infonce-symmetric", answer)
    assert "correct on 7 test cases" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("answer", [
    k_not_k_plus_1, positive_not_in_denominator, negatives_from_the_conditional,
    positive_always_the_partner, the_ceiling_formula, mutual_information_itself,
    expected_count_plugged_in, in_bits, mixing_over_the_other_values, nan_at_eps_zero,
    library_call,
])
def test_symmetric_infonce_rejects_wrong_answers(answer):
    with pytest.raises(ExerciseCheckFailed):
        check("nce-infonce-symmetric", answer)


@pytest.mark.parametrize("to_low", [
    lambda v: torch.tensor(v, dtype=torch.float32),
    lambda v: torch.tensor(v, dtype=torch.bfloat16),
    lambda v: np.float32(v),
])
def test_symmetric_infonce_float32_is_refused_for_its_precision(to_low):
    # cold review R5: a float32 result of the right formula was refused with the formula's hint
    # (about the partner's ratio and the binomial count), as if the derivation were wrong
    def float32_answer(m, eps, k):
        return to_low(_binomial_infonce(m, eps, k))

    with pytest.raises(ExerciseCheckFailed, match=r"(?s)float64.*1e-9") as e:
        check("nce-infonce-symmetric", float32_answer)
    assert "Binomial" not in str(e.value)


# --- nce-class-softmax ------------------------------------------------------------------------
def _blocks(sizes):
    ends = torch.tensor(np.cumsum(sizes).tolist())
    return ends - torch.tensor(sizes), ends


def class_padded(h, cw, ww, sizes, t):  # the package's way: pad to the largest class
    starts, ends = _blocks(sizes)
    cls = torch.bucketize(t, ends, right=True)
    m = max(sizes)
    offs = torch.arange(m)
    rows = (starts[cls][:, None] + offs).clamp(max=ww.shape[0] - 1)
    logits = torch.einsum("bmd,bd->bm", ww[rows], h)
    logits = logits.masked_fill(offs >= (ends - starts)[cls][:, None], -math.inf)
    own = logits.gather(1, (t - starts[cls])[:, None]).squeeze(1)
    return (torch.log_softmax(h @ cw.T, 1).gather(1, cls[:, None]).squeeze(1)
            + own - torch.logsumexp(logits, 1))


def class_loop(h, cw, ww, sizes, t):
    out = []
    for b in range(h.shape[0]):
        w, start = int(t[b]), 0
        for c, size in enumerate(sizes):
            if w < start + size:
                break
            start += size
        lc = torch.log_softmax(cw @ h[b], 0)[c]
        lw = torch.log_softmax(ww[start:start + size] @ h[b], 0)[w - start]
        out.append(lc + lw)
    return torch.stack(out)


def class_full_table(h, cw, ww, sizes, t):
    parts, start = [], 0
    lc = torch.log_softmax(h @ cw.T, 1)
    for c, size in enumerate(sizes):
        parts.append(lc[:, c:c + 1]
                     + torch.log_softmax(h @ ww[start:start + size].T, 1))
        start += size
    return torch.cat(parts, 1).gather(1, t[:, None]).squeeze(1)


def _word_only(h, ww, sizes, t):
    starts, ends = _blocks(sizes)
    cls = torch.bucketize(t, ends, right=True)
    return torch.stack([torch.log_softmax(ww[starts[c]:ends[c]] @ h[b], 0)[t[b] - starts[c]]
                        for b, c in enumerate(cls.tolist())])


def class_only(h, cw, ww, sizes, t):
    _, ends = _blocks(sizes)
    cls = torch.bucketize(t, ends, right=True)
    return torch.log_softmax(h @ cw.T, 1).gather(1, cls[:, None]).squeeze(1)


def word_softmax_over_all(h, cw, ww, sizes, t):
    return class_only(h, cw, ww, sizes, t) + torch.log_softmax(h @ ww.T, 1).gather(
        1, t[:, None]).squeeze(1)


def boundary_off_by_one(h, cw, ww, sizes, t):
    starts, ends = _blocks(sizes)
    # right=False: the last word of a class goes to the next class
    cls = torch.bucketize(t, ends).clamp(max=len(sizes) - 1)
    out = []
    for b, c in enumerate(cls.tolist()):
        lw = torch.log_softmax(ww[starts[c]:ends[c]] @ h[b], 0)
        j = min(int(t[b] - starts[c]), lw.numel() - 1)
        out.append(torch.log_softmax(cw @ h[b], 0)[c] + lw[j])
    return torch.stack(out)


def log_of_softmax(h, cw, ww, sizes, t):
    starts, ends = _blocks(sizes)
    cls = torch.bucketize(t, ends, right=True)
    out = []
    for b, c in enumerate(cls.tolist()):
        pc = torch.softmax(cw @ h[b], 0)[c]
        pw = torch.softmax(ww[starts[c]:ends[c]] @ h[b], 0)[t[b] - starts[c]]
        out.append(torch.log(pc) + torch.log(pw))
    return torch.stack(out)


def probabilities(h, cw, ww, sizes, t):
    return class_loop(h, cw, ww, sizes, t).exp()


def class_softmax_over_the_batch(h, cw, ww, sizes, t):
    _, ends = _blocks(sizes)
    cls = torch.bucketize(t, ends, right=True)
    return (torch.log_softmax(h @ cw.T, 0).gather(1, cls[:, None]).squeeze(1)
            + _word_only(h, ww, sizes, t))


def mean_over_the_batch(h, cw, ww, sizes, t):
    return class_loop(h, cw, ww, sizes, t).mean()


def equal_classes_assumed(h, cw, ww, sizes, t):
    per = ww.shape[0] // len(sizes)
    cls = (t // per).clamp(max=len(sizes) - 1)
    starts = cls * per
    out = []
    for b, c in enumerate(cls.tolist()):
        end = ww.shape[0] if c == len(sizes) - 1 else int(starts[b]) + per
        lw = torch.log_softmax(ww[int(starts[b]):end] @ h[b], 0)[t[b] - starts[b]]
        out.append(torch.log_softmax(cw @ h[b], 0)[c] + lw)
    return torch.stack(out)


def in_float32(h, cw, ww, sizes, t):
    return class_loop(h.float(), cw.float(), ww.float(), sizes, t)


def shifts_hidden_in_place(h, cw, ww, sizes, t):
    h -= h.mean()
    return class_loop(h, cw, ww, sizes, t)


def library_class_softmax(h, cw, ww, sizes, t):
    from softmaxbook.nce import class_softmax_log_prob
    return class_softmax_log_prob(h, cw, ww, sizes, t)


@pytest.mark.parametrize("answer", [class_padded, class_loop, class_full_table])
def test_class_softmax_accepts_right_answers(answer, capsys):
    assert check("nce-class-softmax", answer)
    assert "correct on 5 test cases" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("answer, message", [
    (lambda h, cw, ww, sizes, t: _word_only(h, ww, sizes, t), "class term is missing"),
    (class_only, "word term is missing"),
    (word_softmax_over_all, "over all V words"),
    (boundary_off_by_one, "class boundary"),
    (log_of_softmax, "underflows"),
    (probabilities, "not probabilities"),
    (class_softmax_over_the_batch, None),
    (mean_over_the_batch, None),
    (equal_classes_assumed, None),
    (in_float32, None),
    (shifts_hidden_in_place, "in place"),
    (library_class_softmax, "off limits|yourself"),
])
def test_class_softmax_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed) as e:
        check("nce-class-softmax", answer)
    if message:
        import re
        assert re.search(message, " ".join(str(e.value).split())), str(e.value)
