"""The checks of the Gumbel chapter's coding exercises accept right answers and reject wrong ones
with a message that helps."""

from __future__ import annotations

import math

import pytest
import torch

from softmaxbook.exercises import ExerciseCheckFailed, check, registered


def test_registered():
    assert registered("gumbel") == ["gumbel-max-sampler", "gumbel-plackett-luce", "gumbel-truncated-inverse"]


# --- gumbel-max-sampler ----------------------------------------------------------------------
def right_sampler(logits, generator):
    u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator)
    u = u.clamp(torch.finfo(u.dtype).tiny, 1 - torch.finfo(u.dtype).eps / 2)
    return (logits - torch.log(-torch.log(u))).argmax(-1)


def shared_g_sampler(logits, generator):
    u = torch.rand(logits.shape[:-1] + (1,), dtype=logits.dtype, generator=generator)
    return (logits - torch.log(-torch.log(u))).argmax(-1)


def probs_plus_noise_sampler(logits, generator):
    u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator)
    return (torch.softmax(logits, -1) - torch.log(-torch.log(u))).argmax(-1)


def test_max_sampler_accepts_right_answer(capsys):
    assert check("gumbel-max-sampler", right_sampler)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer, message",
    [
        (shared_g_sampler, "each class needs its own Gumbel"),
        (probs_plus_noise_sampler, "do not match"),
        (lambda logits, g: (logits - torch.log(-torch.log(torch.rand(logits.shape, generator=g,
                                                                     dtype=logits.dtype))))
         .argmax(-1, keepdim=True), "should have shape"),
        (lambda logits, g: torch.softmax(logits, -1), "integer tensor"),
        (lambda logits, g: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
        (..., "no answer yet"),
    ],
)
def test_max_sampler_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("gumbel-max-sampler", answer)


def test_max_sampler_rejects_sampling_impossible_class():
    def unclamped_positive_noise(logits, generator):
        # +inf noise on the impossible class: -inf + inf = nan wins the argmax
        idx = right_sampler(logits, generator)
        if logits.shape[-1] == 3:
            return torch.ones_like(idx)
        return idx

    with pytest.raises(ExerciseCheckFailed, match="impossible class 1"):
        check("gumbel-max-sampler", unclamped_positive_noise)


def test_max_sampler_rejects_unclamped_uniforms():
    def unclamped(logits, generator):  # right in distribution, but U = 0 gives G = -inf
        u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator)
        return (logits - torch.log(-torch.log(u))).argmax(-1)

    with pytest.raises(ExerciseCheckFailed, match="torch.rand returns 0.*impossible class 0"):
        check("gumbel-max-sampler", unclamped)


def test_max_sampler_check_restores_torch_rand():
    real = torch.rand
    check("gumbel-max-sampler", right_sampler)
    assert torch.rand is real


# --- gumbel-truncated-inverse ------------------------------------------------------------------
def right_inverse(u, loc, upper):
    return -torch.logaddexp(-upper, -(loc - torch.log(-torch.log(u))))


def naive_inverse(u, loc, upper):
    return loc - torch.log(torch.exp(loc - upper) - torch.log(u))


def test_truncated_inverse_accepts_right_answer():
    assert check("gumbel-truncated-inverse", right_inverse)


def test_truncated_inverse_rejects_naive_overflow():
    with pytest.raises(ExerciseCheckFailed, match="overflows here"):
        check("gumbel-truncated-inverse", naive_inverse)


def test_truncated_inverse_rejects_untruncated_gumbel():
    with pytest.raises(ExerciseCheckFailed, match="solve u = F"):
        check("gumbel-truncated-inverse", lambda u, loc, upper: loc - torch.log(-torch.log(u)))


# --- gumbel-plackett-luce ----------------------------------------------------------------------
def right_log_prob(logits, order):
    lp, x = 0.0, logits.clone()
    for i in order:
        lp = lp + x[i] - torch.logsumexp(x, 0)
        x[i] = -math.inf
    return lp


def subtracting_log_prob(logits, order):
    total, lp = torch.logsumexp(logits, 0).exp(), 0.0
    for i in order:
        lp = lp + logits[i] - torch.log(total)
        total = total - logits[i].exp()
    return lp


def with_replacement_log_prob(logits, order):
    return sum(torch.log_softmax(logits, 0)[i] for i in order)


def test_plackett_luce_accepts_right_answer():
    assert check("gumbel-plackett-luce", right_log_prob)


def test_plackett_luce_rejects_subtraction_from_total():
    with pytest.raises(ExerciseCheckFailed, match="cancels"):
        check("gumbel-plackett-luce", subtracting_log_prob)


def test_plackett_luce_rejects_with_replacement():
    with pytest.raises(ExerciseCheckFailed, match="order = \\[3, 0\\]"):
        check("gumbel-plackett-luce", with_replacement_log_prob)
