"""The checks of the choice chapter's coding exercises accept right answers and reject wrong ones
with a message that names the input."""

from __future__ import annotations

import math

import pytest
import torch

from softmaxbook.exercises import ExerciseCheckFailed, check, registered

D = torch.float64


def test_registered():
    assert registered("choice") == ["choice-grad-alpha", "choice-values"]


# --- choice-values ---------------------------------------------------------------------------
def right_values(alpha, choices, rewards):
    V = torch.zeros(2, dtype=D)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        out.append(V.clone())
        V[c] += alpha * (r - V[c])
    return torch.stack(out)


def values_after(alpha, choices, rewards):  # acausal: includes trial t's own reward
    V = torch.zeros(2, dtype=D)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        V[c] += alpha * (r - V[c])
        out.append(V.clone())
    return torch.stack(out)


def values_update_both(alpha, choices, rewards):  # moves the unchosen option too
    V = torch.zeros(2, dtype=D)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        out.append(V.clone())
        V += alpha * (r - V)
    return torch.stack(out)


def values_swapped(alpha, choices, rewards):  # options in the wrong columns
    return right_values(alpha, choices, rewards).flip(-1)


def test_values_accepts_right_answer(capsys):
    assert check("choice-values", right_values)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 6 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (values_after, r"alpha=0.3, beta=3.0, 40 trials your values already contain"),
    (values_update_both, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected values"),
    (values_swapped, r"for input alpha=0.3"),
    (lambda a, c, r: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_values_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("choice-values", answer)


# --- choice-grad-alpha -----------------------------------------------------------------------
def _grad(alpha, beta, choices, rewards, *, reset_unchosen=False, no_beta=False):
    V, Dv, g = [0.0, 0.0], [0.0, 0.0], 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = 1 / (1 + math.exp(-beta * (V[1] - V[0])))
        g += (1.0 if no_beta else beta) * (c - p) * (Dv[1] - Dv[0])
        new_d = r - V[c] + (1 - alpha) * Dv[c]
        if reset_unchosen:
            Dv = [0.0, 0.0]
        Dv[c] = new_d
        V[c] += alpha * (r - V[c])
    return g


def right_grad(alpha, beta, choices, rewards):
    return _grad(alpha, beta, choices, rewards)


def grad_reset_unchosen(alpha, beta, choices, rewards):  # the source notes' rule (erratum 6)
    return _grad(alpha, beta, choices, rewards, reset_unchosen=True)


def grad_without_beta(alpha, beta, choices, rewards):
    return _grad(alpha, beta, choices, rewards, no_beta=True)


def grad_tensor(alpha, beta, choices, rewards):  # a 0-d tensor is fine
    return torch.tensor(_grad(alpha, beta, choices, rewards), dtype=D)


def test_grad_accepts_right_answers(capsys):
    assert check("choice-grad-alpha", right_grad)
    assert check("choice-grad-alpha", grad_tensor)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 6 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (grad_reset_unchosen, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected ∂ℓ/∂α"),
    (grad_without_beta, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected ∂ℓ/∂α"),
    (lambda a, b, c, r: torch.zeros(2), "should be one number"),
    (lambda a, b, c, r: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_grad_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("choice-grad-alpha", answer)
