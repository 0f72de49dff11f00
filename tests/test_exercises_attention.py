"""The checks of the hard-attention chapter's coding exercises accept right answers and reject
plausible wrong ones with a message that names the input."""

from __future__ import annotations

import math

import pytest
import torch

from softmaxbook import attention
from softmaxbook.exercises import ExerciseCheckFailed, check, registered


def test_registered():
    assert registered("attention") == ["attention-baseline", "attention-biased-baseline",
                                       "attention-iw-bound", "attention-marginal",
                                       "attention-score-term"]


def stub(*args):
    raise NotImplementedError("Exercise attention-...: write this function")


# --- attention-score-term ----------------------------------------------------------------------
def score_term(scores, locations, rewards, baseline):
    alpha = torch.softmax(scores, dim=-1)
    onehot = torch.nn.functional.one_hot(locations, scores.shape[-1]).to(scores.dtype)
    return (rewards - baseline)[:, None] * (onehot - alpha)


def score_term_autograd(scores, locations, rewards, baseline):
    # right numbers, but the task asks for the derivative derived by hand
    e = scores.detach().clone().requires_grad_(True)
    log_alpha = torch.log_softmax(e, dim=-1).gather(-1, locations[:, None]).squeeze(-1)
    ((rewards - baseline) * log_alpha).sum().backward()
    return e.grad


def score_term_autograd_grad(scores, locations, rewards, baseline):
    e = scores.detach().clone().requires_grad_(True)
    log_alpha = torch.log_softmax(e, dim=-1).gather(-1, locations[:, None]).squeeze(-1)
    return torch.autograd.grad(((rewards - baseline) * log_alpha).sum(), e)[0]


def score_term_by_hand(scores, locations, rewards, baseline):
    # a second right answer: alpha from the log-softmax written out, each row shifted by its
    # own maximum; the one-hot built with scatter
    m = scores.max(dim=-1, keepdim=True).values
    alpha = torch.exp(scores - m - torch.log(torch.exp(scores - m).sum(-1, keepdim=True)))
    onehot = torch.zeros_like(scores).scatter(-1, locations[:, None], 1.0)
    return (rewards - baseline).unsqueeze(-1) * (onehot - alpha)


def _shifted_by(shift):
    """A score term whose softmax subtracts ``shift(row)`` instead of the row's maximum."""
    def answer(scores, locations, rewards, baseline):
        finite = torch.isfinite(scores)
        x = torch.exp(scores - shift(scores, finite))
        alpha = x / x.sum(-1, keepdim=True)
        onehot = torch.nn.functional.one_hot(locations, scores.shape[-1]).to(scores.dtype)
        return (rewards - baseline)[:, None] * (onehot - alpha)
    return answer


def _finite_mask(value):
    """A score term that replaces -inf by a finite ``value`` before the softmax."""
    def answer(scores, locations, rewards, baseline):
        alpha = torch.softmax(torch.nan_to_num(scores, neginf=value), dim=-1)
        onehot = torch.nn.functional.one_hot(locations, scores.shape[-1]).to(scores.dtype)
        return (rewards - baseline)[:, None] * (onehot - alpha)
    return answer


def changes_locations(scores, locations, rewards, baseline):
    out = score_term(scores, locations, rewards, baseline)
    locations.zero_()
    return out


def naive_alpha(scores, locations, rewards, baseline):
    alpha = scores.exp() / scores.exp().sum(-1, keepdim=True)
    onehot = torch.nn.functional.one_hot(locations, scores.shape[-1]).to(scores.dtype)
    return (rewards - baseline)[:, None] * (onehot - alpha)


def wrong_axis(scores, locations, rewards, baseline):
    alpha = torch.softmax(scores, dim=0)
    onehot = torch.nn.functional.one_hot(locations, scores.shape[-1]).to(scores.dtype)
    return (rewards - baseline)[:, None] * (onehot - alpha)


def global_max(scores, locations, rewards, baseline):
    # shifted by the largest score of the whole batch, not each row's own
    x = (scores - scores.max()).exp()
    alpha = x / x.sum(-1, keepdim=True)
    onehot = torch.nn.functional.one_hot(locations, scores.shape[-1]).to(scores.dtype)
    return (rewards - baseline)[:, None] * (onehot - alpha)


def in_place(scores, locations, rewards, baseline):
    rewards -= baseline
    return score_term(scores, locations, rewards, 0.0)


@pytest.mark.parametrize("answer", [score_term, score_term_by_hand])
def test_score_term_accepts_right_answers(answer, capsys):
    assert check("attention-score-term", answer)
    assert "correct on 8 test cases" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("answer, message", [
    # the -alpha part forgotten: the gradient of e_s alone
    (lambda e, s, r, b: (r - b)[:, None] * torch.nn.functional.one_hot(s, e.shape[-1]).double(),
     r"for input scores \[\[0, 0, 0, 0\]\]"),
    # the sign flipped
    (lambda e, s, r, b: -score_term(e, s, r, b), r"for input scores \[\[0, 0, 0, 0\]\]"),
    # the baseline ignored (caught where b != 0)
    (lambda e, s, r, b: score_term(e, s, r, 0.0), r"for input scores \[\[1, -2, 0.5\]"),
    # the baseline added instead of subtracted
    (lambda e, s, r, b: score_term(e, s, r, -b), r"for input scores \[\[1, -2, 0.5\]"),
    # softmax over the wrong axis
    (wrong_axis, r"for input scores \[\[0, 0, 0, 0\]\]"),
    # exp without the shift: overflow
    (naive_alpha, r"(?s)scores \[\[1000, 999, 990\]\].*NaN or inf"),
    # one shift for the whole batch: the second row underflows to 0 / 0
    (global_max, r"(?s)rows on different scales.*NaN or inf.*its own maximum"),
    # computed in float32
    (lambda e, s, r, b: score_term(e.float(), s, r.float(), b),
     r"(?s)for input scores \[\[0, 0, 0, 0\]\].*torch.float32"),
    # changes the rewards in place
    (in_place, "changed its inputs in place"),
    # ... or the locations (review R3: only scores and rewards were compared)
    (changes_locations, "changed its inputs in place"),
    # shifted by the row's first score, its smallest finite score or their mean instead of its
    # maximum: exp(1000) or more on a row spanning 3000 (review R3: all three passed)
    (_shifted_by(lambda e, f: e[:, :1]), r"(?s)spread of 3000.*NaN or inf"),
    (_shifted_by(lambda e, f: torch.where(f, e, torch.inf).min(-1, keepdim=True).values),
     r"(?s)spread of 3000.*NaN or inf"),
    (_shifted_by(lambda e, f: torch.where(f, e, 0).sum(-1, keepdim=True)
                 / f.sum(-1, keepdim=True)), r"(?s)spread of 3000.*NaN or inf"),
    # -inf replaced by a finite mask: wrong where every score is below it (review R3: passed)
    (_finite_mask(-100.0), r"(?s)for input scores \[\[-20000, -inf, -19999\]\].*finite stand-in"),
    (_finite_mask(-1e4), r"for input scores \[\[-20000, -inf, -19999\]\]"),
    # autograd instead of the derived formula (review R3: passed as a right answer)
    (score_term_autograd, "(?s)calls Tensor.backward.*derive the derivative"),
    (score_term_autograd_grad, "(?s)calls torch.autograd.grad.*derive the derivative"),
    # one number per example instead of a gradient per location
    (lambda e, s, r, b: (r - b) * torch.log_softmax(e, -1).gather(-1, s[:, None]).squeeze(-1),
     "shape"),
    (stub, "NotImplementedError"),
])
def test_score_term_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("attention-score-term", answer)


# --- attention-baseline --------------------------------------------------------------------
def baselines(rewards, decay):
    out, b = [], 0.0
    for row in rewards:
        out.append(b)
        b = decay * b + (1 - decay) * float(row.mean())
    return torch.tensor(out, dtype=torch.float64)


def baselines_acausal(rewards, decay):
    out, b = [], 0.0
    for row in rewards:
        b = decay * b + (1 - decay) * float(row.mean())
        out.append(b)
    return torch.tensor(out, dtype=torch.float64)


def baselines_swapped(rewards, decay):
    out, b = [], 0.0
    for row in rewards:
        out.append(b)
        b = (1 - decay) * b + decay * float(row.mean())
    return torch.tensor(out, dtype=torch.float64)


def baselines_first_mean(rewards, decay):
    out, b = [], float(rewards[0].mean())
    for row in rewards:
        out.append(b)
        b = decay * b + (1 - decay) * float(row.mean())
    return torch.tensor(out, dtype=torch.float64)


def baselines_per_example(rewards, decay):
    out, b = [], torch.zeros(rewards.shape[1], dtype=torch.float64)
    for row in rewards:
        out.append(b)
        b = decay * b + (1 - decay) * row
    return torch.stack(out)


def baselines_in_place(rewards, decay):
    out = baselines(rewards, decay)
    rewards -= out[:, None]         # "centre the rewards" on the caller's tensor
    return out


def baselines_closed_form(rewards, decay):
    # b_t = (1 - decay) * sum_{k < t} decay^(t-1-k) * (mean reward of step k), as one matrix
    m = rewards.mean(dim=1).double()
    t = torch.arange(m.shape[0])
    power = (t[:, None] - 1 - t[None, :]).clamp(min=0).double()
    w = torch.where(t[:, None] > t[None, :], (1 - decay) * decay ** power,
                    torch.zeros((), dtype=torch.float64))
    return w @ m


def baselines_sum(rewards, decay):
    out, b = [], 0.0
    for row in rewards:
        out.append(b)
        b = decay * b + (1 - decay) * float(row.sum())      # the sum, not the mean
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("answer", [baselines, baselines_closed_form])
def test_baseline_accepts_right_answers(answer, capsys):
    assert check("attention-baseline", answer)
    assert "correct on 4 test cases" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("answer, message", [
    (baselines_acausal, "(?s)already includes that step's rewards.*current sample"),
    (baselines_swapped, r"for input rewards \[\[-1, -3\]"),
    (baselines_first_mean, r"for input rewards \[\[-2.0, -2.0\]\]"),
    (baselines_per_example, "shape"),
    # torch.tensor(list) without a dtype: float32
    (lambda r, d: baselines(r, d).float(), r"(?s)rewards \[\[-2.0, -2.0\]\].*torch.float32"),
    (baselines_in_place, "changed its inputs in place"),
    # the running mean of all rewards so far (not exponential)
    (lambda r, d: torch.cat([torch.zeros(1, dtype=torch.float64),
                             r.mean(1).cumsum(0)[:-1] / torch.arange(1, r.shape[0])]),
     r"for input rewards \[\[-1, -3\]"),
    # the step's summed reward instead of its mean
    (baselines_sum, r"for input rewards \[\[-1, -3\]"),
    # a Python list instead of a tensor
    (lambda r, d: baselines(r, d).tolist(), "should be a tensor of shape"),
    (stub, "NotImplementedError"),
])
def test_baseline_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("attention-baseline", answer)


# --- attention-marginal --------------------------------------------------------------------
def marginal(log_alpha, loglik):
    return torch.logsumexp(log_alpha + loglik, dim=-1)


def marginal_by_hand(log_alpha, loglik):
    x = log_alpha + loglik
    m = x.max(dim=-1, keepdim=True).values
    return (m + (x - m).exp().sum(-1, keepdim=True).log()).squeeze(-1)


class _Model(attention.GlimpseNet):
    pass


def marginal_global_max(log_alpha, loglik):
    # shifted by the largest value of the whole batch, not each row's own
    x = log_alpha + loglik
    m = x.max()
    return m + (x - m).exp().sum(-1).log()


def marginal_in_place(log_alpha, loglik):
    log_alpha += loglik
    return torch.logsumexp(log_alpha, dim=-1)


def uses_library(log_alpha, loglik):
    attention.jensen_bound(attention.GlimpseNet(), torch.zeros(1, 2, 64),
                           torch.zeros(1, dtype=torch.int64))
    return marginal(log_alpha, loglik)


def marginal_logaddexp(log_alpha, loglik):
    # a third right answer: logaddexp folded over the locations
    x = log_alpha + loglik
    out = x[:, 0]
    for j in range(1, x.shape[1]):
        out = torch.logaddexp(out, x[:, j])
    return out


def _marginal_shifted_by(shift):
    """log sum exp(x) with x = log_alpha + loglik shifted by ``shift(x, finite)``, not the row's
    maximum."""
    def answer(log_alpha, loglik):
        x = log_alpha + loglik
        m = shift(x, torch.isfinite(x))
        return (m + (x - m).exp().sum(-1, keepdim=True).log()).squeeze(-1)
    return answer


def marginal_loglik_max(log_alpha, loglik):
    # shifted by the largest log-likelihood, weights alpha outside the exp: -inf where the best
    # location has alpha = 0 and the others underflow
    m = loglik.max(-1, keepdim=True).values
    return (m + (log_alpha.exp() * (loglik - m).exp()).sum(-1, keepdim=True).log()).squeeze(-1)


@pytest.mark.parametrize("answer", [marginal, marginal_by_hand, marginal_logaddexp])
def test_marginal_accepts_right_answers(answer, capsys):
    assert check("attention-marginal", answer)
    assert "correct on 7 test cases" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("answer, message", [
    # the Jensen bound instead of the marginal
    (lambda la, ll: (la.exp() * ll).sum(-1), "(?s)log_alpha = log.*Jensen bound"),
    # the naive log of a sum: underflows
    (lambda la, ll: (la.exp() * ll.exp()).sum(-1).log(), r"(?s)-1000.*not finite"),
    # the unweighted average over locations
    (lambda la, ll: torch.logsumexp(ll, -1) - torch.log(torch.tensor(float(ll.shape[-1]))),
     "log_alpha = log"),
    # the wrong axis
    (lambda la, ll: torch.logsumexp(la + ll, dim=0), "shape"),
    # one shift for the whole batch: the first row underflows to log 0
    (marginal_global_max, r"(?s)rows on different scales.*not finite"),
    # computed in float32
    (lambda la, ll: torch.logsumexp((la + ll).float(), dim=-1), "torch.float32"),
    (marginal_in_place, "changed its inputs in place"),
    (uses_library, "calls softmaxbook.attention.jensen_bound"),
    # shifted by the smallest finite term or the mean of the finite terms, or by the mean
    # log-likelihood: exp(1900) or more when one location explains the label (review R3: passed)
    (_marginal_shifted_by(lambda x, f: torch.where(f, x, torch.inf).min(-1, keepdim=True).values),
     r"(?s)loglik \[\[-2000, -0.1, -2000, -2000\]\].*not finite"),
    (_marginal_shifted_by(lambda x, f: torch.where(f, x, 0).sum(-1, keepdim=True)
                          / f.sum(-1, keepdim=True)),
     r"(?s)loglik \[\[-2000, -0.1, -2000, -2000\]\].*not finite"),
    (lambda la, ll: (ll.mean(-1) + (la.exp() * (ll - ll.mean(-1, keepdim=True)).exp()).sum(-1)
                     .log()), r"(?s)loglik \[\[-2000, -0.1, -2000, -2000\]\].*not finite"),
    # alpha = 0 made finite: log(alpha + 1e-12), or log alpha clamped at -50, gives the
    # never-chosen best location a weight (review R3: passed)
    (lambda la, ll: torch.logsumexp(torch.log(la.exp() + 1e-12) + ll, dim=-1),
     r"for input alpha \[\[0.0, 0.6, 0.4\]\] \(location 0 never chosen\), loglik \[\[0,"),
    (lambda la, ll: torch.logsumexp(la.clamp(min=-50.0) + ll, dim=-1),
     r"for input alpha \[\[0.0, 0.6, 0.4\]\] \(location 0 never chosen\), loglik \[\[0,"),
    (marginal_loglik_max, r"(?s)location 0 never chosen\), loglik \[\[0,.*not finite"),
    (stub, "NotImplementedError"),
])
def test_marginal_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("attention-marginal", answer)


# --- attention-biased-baseline: the mean of the estimate with b_n = r_n ------------------------
def self_baseline_mean(scores, loglik):
    return torch.zeros_like(scores), torch.softmax(scores, dim=-1)


def self_baseline_by_enumeration(scores, loglik):
    # the estimate for every location s, averaged with weights alpha_s
    alpha = torch.softmax(scores, dim=-1)
    eye = torch.eye(scores.shape[-1], dtype=scores.dtype)
    d_scores = torch.zeros_like(scores)
    d_loglik = torch.zeros_like(scores)
    for s in range(scores.shape[-1]):
        r = loglik[:, s:s + 1]
        b = r  # the student's baseline: the same example's reward
        d_scores = d_scores + alpha[:, s:s + 1] * (r - b) * (eye[s] - alpha)
        d_loglik = d_loglik + alpha[:, s:s + 1] * eye[s]
    return d_scores, d_loglik


def self_baseline_autograd(scores, loglik):
    # autograd of the exact mean of the surrogate (r - b) log alpha_s + l_s, b = r held constant
    e = scores.detach().clone().requires_grad_(True)
    ll = loglik.detach().clone().requires_grad_(True)
    alpha = torch.softmax(e, dim=-1).detach()
    log_alpha = torch.log_softmax(e, dim=-1).masked_fill(alpha == 0, 0.0)
    r = ll.detach()
    (alpha * ((r - r) * log_alpha + ll)).sum().backward()
    return e.grad, ll.grad


@pytest.mark.parametrize("answer", [self_baseline_mean, self_baseline_by_enumeration,
                                    self_baseline_autograd])
def test_biased_baseline_accepts_right_answers(answer, capsys):
    assert check("attention-biased-baseline", answer)
    assert "correct" in capsys.readouterr().out


def _alpha_ls(scores, loglik):
    alpha = torch.softmax(scores, dim=-1)
    return alpha, (alpha * loglik.masked_fill(alpha == 0, 0.0)).sum(-1, keepdim=True)


def unbiased_gradient(scores, loglik):
    # what a valid baseline gives: the gradient of L_s
    alpha, ls = _alpha_ls(scores, loglik)
    return alpha * (loglik - ls), alpha


def marginal_gradient(scores, loglik):
    alpha = torch.softmax(scores, dim=-1)
    post = torch.softmax(scores + loglik, dim=-1)
    return post - alpha, post


def score_term_without_baseline(scores, loglik):
    # the mean of r * (onehot - alpha): the score term as if b were 0
    alpha, ls = _alpha_ls(scores, loglik)
    return alpha * loglik.masked_fill(alpha == 0, 0.0), alpha


def one_sample_argmax(scores, loglik):
    # the most likely location's one-hot instead of the mean over the sampled location
    onehot = torch.nn.functional.one_hot(scores.argmax(-1), scores.shape[-1])
    return torch.zeros_like(scores), onehot.to(scores.dtype)


def zeroes_the_scores(scores, loglik):
    # right values, but the zeros are the caller's scores, overwritten in place
    alpha = torch.softmax(scores, dim=-1)
    return scores.zero_(), alpha


@pytest.mark.parametrize("answer, message", [
    (unbiased_gradient, "(?s)d_scores is wrong.*gradient of L_s itself"),
    (marginal_gradient, "(?s)d_scores is wrong.*gradient of log p.y . a."),
    (score_term_without_baseline, "(?s)d_scores is wrong at 4 of 4.*then take its mean"),
    (lambda s, l: (torch.zeros_like(s), torch.softmax(s + l, dim=-1)),
     "(?s)d_loglik is wrong.*posterior weights"),
    (lambda s, l: (torch.zeros_like(s), torch.softmax(l, dim=-1)),
     "(?s)d_loglik is wrong.*posterior weights"),  # the wrong variable: the same, alpha uniform
    (lambda s, l: (torch.zeros_like(s), torch.full_like(s, 1 / s.shape[-1])),
     r"(?s)scores \[\[1, -2, 0.5\].*d_loglik is wrong.*not look at every location equally"),
    (lambda s, l: (torch.zeros_like(s), torch.zeros_like(s)),
     "(?s)d_loglik is wrong at 4 of 4.*average it over the location drawn"),
    (lambda s, l: (torch.zeros_like(s), -torch.softmax(s, dim=-1)), "d_loglik is wrong at 4"),
    (one_sample_argmax, "(?s)uniform scores.*d_loglik is wrong at 4 of 4"),
    (lambda s, l: (torch.zeros_like(s), torch.softmax(s, dim=0)), "d_loglik is wrong"),
    (lambda s, l: (torch.zeros_like(s), torch.exp(s) / torch.exp(s).sum(-1, keepdim=True)),
     r"(?s)\[\[1000, 999, 990\]\].*d_loglik is wrong at 3 of 3"),  # nan: exp overflows
    (lambda s, l: torch.softmax(s, dim=-1), "should be a pair .d_scores, d_loglik."),
    (lambda s, l: (torch.zeros_like(s), torch.softmax(s, dim=-1).sum(-1)),
     "should be a pair .d_scores, d_loglik. of float tensors of shape .1, 4."),
    (lambda s, l: (torch.zeros_like(s).float(), torch.softmax(s, dim=-1).float()),
     "your result is torch.float32"),
    (zeroes_the_scores, "changed its arguments in place"),
    (stub, "NotImplementedError"),
    (..., "no answer yet"),
])
def test_biased_baseline_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("attention-biased-baseline", answer)


# --- attention-iw-bound ------------------------------------------------------------------------
def iw_sample_bound(log_prior, loglik, log_q, locations):
    log_w = (log_prior + loglik - log_q).gather(-1, locations)
    return torch.logsumexp(log_w, dim=-1) - math.log(locations.shape[-1])


def iw_by_hand(log_prior, loglik, log_q, locations):
    # gathered term by term, shifted by each row's own maximum
    log_w = (log_prior.gather(-1, locations) + loglik.gather(-1, locations)
             - log_q.gather(-1, locations))
    m = log_w.max(dim=-1, keepdim=True).values
    return (m + (log_w - m).exp().mean(-1, keepdim=True).log()).squeeze(-1)


def iw_loop(log_prior, loglik, log_q, locations):
    # one example at a time, with logaddexp over the draws
    out = []
    for lp, ll, lq, locs in zip(log_prior, loglik, log_q, locations):
        acc = torch.tensor(-math.inf, dtype=torch.float64)
        for s in locs:
            acc = torch.logaddexp(acc, lp[s] + ll[s] - lq[s])
        out.append(acc - math.log(len(locs)))
    return torch.stack(out)


def _log_w(log_prior, loglik, log_q, locations):
    return (log_prior + loglik - log_q).gather(-1, locations)


def iw_unique(log_prior, loglik, log_q, locations):
    # each location drawn counted once
    drawn = torch.nn.functional.one_hot(locations, log_q.shape[-1]).amax(1).bool()
    log_w = torch.where(drawn, log_prior + loglik - log_q, -torch.inf)
    return torch.logsumexp(log_w, dim=-1) - math.log(locations.shape[-1])


def iw_global_max(log_prior, loglik, log_q, locations):
    log_w = _log_w(log_prior, loglik, log_q, locations)
    m = log_w.max()
    return m + (log_w - m).exp().mean(-1).log()


def iw_in_place(log_prior, loglik, log_q, locations):
    log_prior += loglik
    log_prior -= log_q
    return torch.logsumexp(log_prior.gather(-1, locations), -1) - math.log(locations.shape[-1])


def iw_uses_library(log_prior, loglik, log_q, locations):
    attention.iw_bound(log_prior, loglik, log_q, 1)
    return iw_sample_bound(log_prior, loglik, log_q, locations)


def _iw_shifted_by(shift):
    def answer(log_prior, loglik, log_q, locations):
        log_w = _log_w(log_prior, loglik, log_q, locations)
        m = shift(log_w)
        return (m + (log_w - m).exp().mean(-1, keepdim=True).log()).squeeze(-1)
    return answer


@pytest.mark.parametrize("answer", [iw_sample_bound, iw_by_hand, iw_loop])
def test_iw_bound_accepts_right_answers(answer, capsys):
    assert check("attention-iw-bound", answer)
    assert "correct on 8 test cases" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("answer, message", [
    # the mean of the log-weights: the one-draw ELBO estimate, averaged
    (lambda lp, ll, lq, s: _log_w(lp, ll, lq, s).mean(-1), r"(?s)locations \[\[0, 2\]\].*ELBO"),
    # log of the sum, without 1/K
    (lambda lp, ll, lq, s: torch.logsumexp(_log_w(lp, ll, lq, s), -1),
     r"locations \[\[0, 2\]\]"),
    # 1/L instead of 1/K
    (lambda lp, ll, lq, s: torch.logsumexp(_log_w(lp, ll, lq, s), -1) - math.log(lq.shape[-1]),
     r"locations \[\[0, 2\]\]"),
    # the naive log of a mean: underflows
    (lambda lp, ll, lq, s: _log_w(lp, ll, lq, s).exp().mean(-1).log(),
     r"(?s)every weight underflows.*not finite"),
    # q forgotten, or multiplying instead of dividing
    (lambda lp, ll, lq, s: torch.logsumexp((lp + ll).gather(-1, s), -1) - math.log(s.shape[-1]),
     r"locations \[\[0, 2\]\]"),
    (lambda lp, ll, lq, s: torch.logsumexp((lp + ll + lq).gather(-1, s), -1)
     - math.log(s.shape[-1]), r"locations \[\[0, 2\]\]"),
    # the exact marginal over all locations, ignoring the draws
    (lambda lp, ll, lq, s: torch.logsumexp(lp + ll, -1), r"locations \[\[0, 2\]\]"),
    # the largest weight instead of their mean
    (lambda lp, ll, lq, s: _log_w(lp, ll, lq, s).max(-1).values, r"locations \[\[0, 2\]\]"),
    # a location drawn twice counted once
    (iw_unique, r"location 1 drawn twice"),
    # one shift for the whole batch
    (iw_global_max, r"(?s)rows on different scales.*not finite"),
    # shifted by the smallest or the mean log-weight: overflows
    (_iw_shifted_by(lambda x: x.min(-1, keepdim=True).values),
     r"(?s)one location explains the label.*not finite"),
    (_iw_shifted_by(lambda x: x.mean(-1, keepdim=True)),
     r"(?s)one location explains the label.*not finite"),
    # the wrong axis
    (lambda lp, ll, lq, s: torch.logsumexp(_log_w(lp, ll, lq, s), 0) - math.log(s.shape[-1]),
     "shape"),
    (lambda lp, ll, lq, s: iw_sample_bound(lp.float(), ll.float(), lq.float(), s),
     "torch.float32"),
    (iw_in_place, "changed its inputs in place"),
    (iw_uses_library, "calls softmaxbook.attention.iw_bound"),
    (stub, "NotImplementedError"),
])
def test_iw_bound_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("attention-iw-bound", answer)
