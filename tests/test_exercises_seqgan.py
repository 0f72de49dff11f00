"""The check of the Seq-GAN policy-gradient exercise accepts right answers, written differently,
and rejects the mistakes students make, with a message that names the input."""

from __future__ import annotations

import pytest
import torch

from softmaxbook import seqgan
from softmaxbook.exercises import ExerciseCheckFailed, check, registered


def test_registered():
    assert registered("seqgan") == ["seqgan-surrogate"]


def stub(model, tokens, q):
    raise NotImplementedError("Exercise seqgan-surrogate: write this function")


# --- right answers, written differently ---------------------------------------------------------
def surrogate(model, tokens, q):
    return (q * model.token_log_probs(tokens)).sum(-1).mean()


def surrogate_by_prefixes(model, tokens, q):
    # log G(y_t | y_{1:t-1}) = log G(y_{1:t}) - log G(y_{1:t-1}), one step at a time
    total, previous = 0.0, 0.0
    for t in range(tokens.shape[1]):
        current = model.log_prob(tokens[:, :t + 1])
        total = total + q[:, t].detach() * (current - previous)
        previous = current
    return total.mean()


def surrogate_by_hand(model, tokens, q):
    # the network run by hand: start symbol, GRU, log-softmax, the written token's entry
    start = torch.full((tokens.shape[0], 1), model.vocab, dtype=torch.int64)
    h, _ = model.rnn(model.embed(torch.cat([start, tokens[:, :-1]], 1)))
    logp = torch.log_softmax(model.out(h), -1).gather(-1, tokens[..., None])[..., 0]
    return torch.einsum("nt,nt->n", q.detach(), logp).mean()


def surrogate_float32(model, tokens, q):
    # a float32 result: the gradient is still right to float32 precision
    return (q.float() * model.token_log_probs(tokens).float()).sum(-1).mean()


@pytest.mark.parametrize("answer", [surrogate, surrogate_by_prefixes, surrogate_by_hand,
                                    surrogate_float32])
def test_accepts_right_answers(answer, capsys):
    assert check("seqgan-surrogate", answer)
    assert "correct on 45 test cases" in " ".join(capsys.readouterr().out.split())


# --- wrong answers --------------------------------------------------------------------------------
def lp(model, tokens):
    return model.token_log_probs(tokens)


def in_place(model, tokens, q):
    q -= 0.5                          # "a baseline", subtracted from the caller's tensor
    return (q * lp(model, tokens)).sum(-1).mean()


def no_gradient(model, tokens, q):
    with torch.no_grad():
        return (q * lp(model, tokens)).sum(-1).mean()


@pytest.mark.parametrize("answer, message", [
    # the loss instead of the objective (the library's sign)
    (lambda m, y, q: -(q * lp(m, y)).sum(-1).mean(), "minus the gradient of J"),
    # D(Y) = q[:, -1] at every step: unbiased, but not Seq-GAN's estimator
    (lambda m, y, q: (q[:, -1:] * lp(m, y)).sum(-1).mean(), "weights every step by the final"),
    # Q off by one step: step t weighted by Q of step t + 1 (unbiased too, since
    # E[Q_{t+1} | y_{1:t}] = Q_t, but not the estimator asked for: caught sequence by sequence)
    (lambda m, y, q: (torch.cat([q[:, 1:], q[:, -1:]], 1) * lp(m, y)).sum(-1).mean(),
     r"(?s)sequence \[0, 0, 0\] of each of the 27.*gradient of your result"),
    # a mean over the steps instead of a sum
    (lambda m, y, q: (q * lp(m, y)).mean(-1).mean(), "estimator is biased"),
    # a sum over the batch instead of a mean
    (lambda m, y, q: (q * lp(m, y)).sum(), "sums over the sequences of the batch"),
    # probabilities instead of log-probabilities
    (lambda m, y, q: (q * lp(m, y).exp()).sum(-1).mean(), "estimator is biased"),
    # the whole sequence's log-probability times the summed Q
    (lambda m, y, q: (q.sum(-1) * m.log_prob(y)).mean(), "estimator is biased"),
    # the last step only
    (lambda m, y, q: (q[:, -1] * lp(m, y)[:, -1]).mean(), "estimator is biased"),
    # a baseline that depends on the sequence itself (its own mean Q)
    (lambda m, y, q: ((q - q.mean(-1, keepdim=True)) * lp(m, y)).sum(-1).mean(),
     "estimator is biased"),
    # reward-to-go of Q (summing the Q's of later steps)
    (lambda m, y, q: (q.flip(-1).cumsum(-1).flip(-1) * lp(m, y)).sum(-1).mean(),
     "estimator is biased"),
    # G(y) D(y) differentiated: the gradient of the summand of J, not an estimate of grad J
    (lambda m, y, q: (m.log_prob(y).exp() * q[:, -1]).mean(), "estimator is biased"),
    # the library's function, which the exercise asks to write
    (lambda m, y, q: -seqgan.policy_gradient_loss(m, y, q), "calls softmaxbook.seqgan"),
    (in_place, "changed its inputs in place"),
    (no_gradient, "has no gradient"),
    # one number per sequence instead of a scalar
    (lambda m, y, q: (q * lp(m, y)).sum(-1), "scalar tensor"),
    (stub, "NotImplementedError"),
])
def test_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("seqgan-surrogate", answer)


def test_the_check_compares_the_exact_expectation():
    # The reference quantities of the check: the G(y)-weighted mean of the per-sequence estimates
    # is grad J, and the D(Y)-weighted estimator has the same mean (so only the per-sequence
    # comparison can tell it apart).
    from softmaxbook.exercises.seqgan import _setup

    model, params, seqs, p, q, grad_j, ref, d_weighted = _setup(3, 3, 0)
    assert seqs.shape == (27, 3) and torch.isclose(p.sum(), torch.tensor(1.0, dtype=p.dtype))
    assert torch.allclose((p[:, None] * ref).sum(0), grad_j, atol=1e-12)
    assert torch.allclose((p[:, None] * d_weighted).sum(0), grad_j, atol=1e-12)
    assert (ref - d_weighted).abs().max() > 1e-3
    assert torch.allclose(q[:, -1], q[:, -1])  # Q at t = T is D(y) itself
