"""The checks of the beam chapter's coding exercises accept right answers and reject wrong ones
with a message that names the input."""

from __future__ import annotations

import math

import pytest
import torch

from softmaxbook.exercises import ExerciseCheckFailed, check, registered


def test_registered():
    assert registered("beam") == ["beam-estimator", "beam-prefix-logprob"]


# --- beam-prefix-logprob ---------------------------------------------------------------------
def right_prefix_log_prob(step_fn, prefixes):
    n, T = prefixes.shape
    out = torch.zeros(n, dtype=torch.float64)
    for t in range(T):
        out = out + step_fn(prefixes[:, :t]).gather(1, prefixes[:, t:t + 1]).squeeze(1)
    return out


def sum_of_probs(step_fn, prefixes):
    n, T = prefixes.shape
    out = torch.zeros(n, dtype=torch.float64)
    for t in range(T):
        out = out + step_fn(prefixes[:, :t]).gather(1, prefixes[:, t:t + 1]).squeeze(1).exp()
    return out


def last_token_only(step_fn, prefixes):
    n, T = prefixes.shape
    if T == 0:
        return torch.zeros(n, dtype=torch.float64)
    return step_fn(prefixes[:, :-1]).gather(1, prefixes[:, -1:]).squeeze(1)


def logsumexp_of_children(step_fn, prefixes):
    # confuses φ_S with the log of the total probability of the children (always 0)
    return torch.logsumexp(step_fn(prefixes), dim=-1)


def nan_for_impossible(step_fn, prefixes):
    out = right_prefix_log_prob(step_fn, prefixes)
    return out.nan_to_num(neginf=float("nan"))


def test_prefix_accepts_right_answer(capsys):
    assert check("beam-prefix-logprob", right_prefix_log_prob)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 5 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (sum_of_probs, "you added the conditional probabilities"),
    (last_token_only, "expected log-probabilities"),
    (logsumexp_of_children, "expected log-probabilities"),
    (nan_for_impossible, "impossible token"),
    (lambda step_fn, p: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_prefix_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("beam-prefix-logprob", answer)


# --- beam-estimator --------------------------------------------------------------------------
def right_estimator(values, log_probs, kappa):
    x = torch.exp(log_probs - kappa.unsqueeze(-1))
    log_q = torch.where(x < 1e-8, torch.log(x) - x / 2, torch.log(-torch.expm1(-x)))
    return (torch.exp(log_probs - log_q) * values).sum(-1)


def naive_estimator(values, log_probs, kappa):
    q = 1 - torch.exp(-torch.exp(log_probs - kappa.unsqueeze(-1)))
    return (log_probs.exp() * values / q).sum(-1)


def mean_estimator(values, log_probs, kappa):
    return values.mean(-1)


def normalised_estimator(values, log_probs, kappa):
    x = torch.exp(log_probs - kappa.unsqueeze(-1))
    w = torch.exp(log_probs - torch.log(-torch.expm1(-x)))
    return (w * values).sum(-1) / w.sum(-1)


def without_q(values, log_probs, kappa):
    return (log_probs.exp() * values).sum(-1)


def test_estimator_accepts_right_answer(capsys):
    assert check("beam-estimator", right_estimator)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 5 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (naive_estimator, "not finite"),
    (mean_estimator, "k = 2, kappa = 0.3"),
    (normalised_estimator, "NOT divided"),
    (without_q, "expected estimate"),
    (lambda v, lp, k: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_estimator_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("beam-estimator", answer)
