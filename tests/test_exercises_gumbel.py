"""The checks of the Gumbel chapter's coding exercises accept right answers and reject wrong ones
with a message that helps."""

from __future__ import annotations

import math

import pytest
import torch

from softmaxbook.exercises import ExerciseCheckFailed, check, registered


def test_registered():
    assert registered("gumbel") == ["gumbel-ex-max-sampler", "gumbel-ex-plackett-luce",
                                    "gumbel-ex-truncated-inverse"]


def test_labels_agree_with_the_chapter():
    # the exercise's label in the notebook, its solution block and check(...) carry one name
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "book" / "07_gumbel.ipynb"
    text = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
    for label in registered("gumbel"):
        assert f":label: {label}\n" in text
        assert f"{{solution-start}} {label}\n" in text
        assert f'check("{label}",' in text


# --- gumbel-ex-max-sampler ----------------------------------------------------------------------
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


def multinomial_sampler(logits, generator):
    probs = torch.softmax(logits, -1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def tensor_method_multinomial_sampler(logits, generator):
    return torch.softmax(logits, -1).multinomial(1, generator=generator).squeeze(-1)


def categorical_sampler(logits, generator):
    return torch.distributions.Categorical(logits=logits).sample()


def global_rng_sampler(logits, generator):  # right formula, but ignores `generator`
    u = torch.rand(logits.shape, dtype=logits.dtype)
    u = u.clamp(torch.finfo(u.dtype).tiny, 1 - torch.finfo(u.dtype).eps / 2)
    return (logits - torch.log(-torch.log(u))).argmax(-1)


def own_generator_sampler(logits, generator):  # ignores `generator`, makes its own
    return right_sampler(logits, torch.Generator().manual_seed(0))


def package_sampler(logits, generator):
    from softmaxbook.gumbel import gumbel_max

    return gumbel_max(logits, generator=generator)


def package_noise_sampler(logits, generator):
    from softmaxbook.gumbel import sample_gumbel

    noise = sample_gumbel(logits.shape, generator=generator, dtype=logits.dtype)
    return (logits + noise).argmax(-1)


def minus_log_u_sampler(logits, generator):  # exponential noise -log U: not a Gumbel
    u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator)
    u = u.clamp(torch.finfo(u.dtype).tiny, 1 - torch.finfo(u.dtype).eps / 2)
    return (logits - torch.log(u)).argmax(-1)


def wrong_sign_sampler(logits, generator):  # adds -G instead of G
    u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator)
    u = u.clamp(torch.finfo(u.dtype).tiny, 1 - torch.finfo(u.dtype).eps / 2)
    return (logits + torch.log(-torch.log(u))).argmax(-1)


def swallowing_sampler(logits, generator):  # hides the forbidden call in try/except
    try:
        return multinomial_sampler(logits, generator)
    except Exception:
        return right_sampler(logits, generator)


def test_max_sampler_accepts_right_answer(capsys):
    assert check("gumbel-ex-max-sampler", right_sampler)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer, message",
    [
        (shared_g_sampler, "each class needs its own Gumbel"),
        (probs_plus_noise_sampler, "repeated in 20000 rows the class frequencies.*do not match"),
        (minus_log_u_sampler, "do not match"),
        (wrong_sign_sampler, "do not match"),
        (multinomial_sampler, "calls torch.multinomial.*which this exercise forbids"),
        (tensor_method_multinomial_sampler, "calls torch.multinomial.*forbids"),
        (categorical_sampler, "calls torch.multinomial.*forbids"),
        (swallowing_sampler, "calls torch.multinomial.*forbids"),
        (global_rng_sampler, "drew random numbers from torch's global generator"),
        (own_generator_sampler, "seeded differently.*ignores the `generator` argument"),
        (package_sampler, "a sampler from softmaxbook.gumbel.*forbids"),
        (package_noise_sampler, "a sampler from softmaxbook.gumbel.*forbids"),
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
        check("gumbel-ex-max-sampler", answer)


def test_max_sampler_rejects_sampling_impossible_class():
    def unclamped_positive_noise(logits, generator):
        # +inf noise on the impossible class: -inf + inf = nan wins the argmax
        idx = right_sampler(logits, generator)
        if logits.shape[-1] == 3:
            return torch.ones_like(idx)
        return idx

    with pytest.raises(ExerciseCheckFailed, match="impossible class 1"):
        check("gumbel-ex-max-sampler", unclamped_positive_noise)


def test_max_sampler_rejects_unclamped_uniforms():
    def unclamped(logits, generator):  # right in distribution, but U = 0 gives G = -inf
        u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator)
        return (logits - torch.log(-torch.log(u))).argmax(-1)

    with pytest.raises(ExerciseCheckFailed, match="torch.rand returns 0.*impossible class 0"):
        check("gumbel-ex-max-sampler", unclamped)


def test_max_sampler_rejects_unclamped_tensor_uniform():
    def unclamped_uniform_(logits, generator):  # Tensor.uniform_ also samples [0, 1)
        u = torch.empty(logits.shape, dtype=logits.dtype).uniform_(generator=generator)
        return (logits - torch.log(-torch.log(u))).argmax(-1)

    with pytest.raises(ExerciseCheckFailed, match="Tensor.uniform_.*impossible class 0"):
        check("gumbel-ex-max-sampler", unclamped_uniform_)


def argmax_dim1_sampler(logits, generator):  # right for 2-D logits only
    u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator)
    u = u.clamp(torch.finfo(u.dtype).tiny, 1 - torch.finfo(u.dtype).eps / 2)
    return (logits - torch.log(-torch.log(u))).argmax(dim=1)


def two_d_noise_sampler(logits, generator):  # assumes logits of shape (rows, n)
    u = torch.rand(logits.size(0), logits.size(1), dtype=logits.dtype, generator=generator)
    u = u.clamp(torch.finfo(u.dtype).tiny, 1 - torch.finfo(u.dtype).eps / 2)
    return (logits - torch.log(-torch.log(u))).argmax(-1)


def flattening_sampler(logits, generator):  # loses the leading dimensions
    flat = logits.reshape(-1, logits.shape[-1])
    return right_sampler(flat, generator)


def nan_noise_sampler(logits, generator):  # -log(log U): the log of a negative number
    u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator)
    return (logits - torch.log(torch.log(u))).argmax(-1)


@pytest.mark.parametrize(
    "answer, message",
    [
        (argmax_dim1_sampler, "(?s)IndexError.*broadcast to shape \\(4,\\)"),
        (two_d_noise_sampler, "(?s)IndexError.*broadcast to shape \\(4,\\)"),
        (flattening_sampler, "broadcast to shape \\(4,\\) the result should have shape"),
        (nan_noise_sampler, "(?s)deterministic.*NaN"),
    ],
)
def test_max_sampler_rejects_wrong_batch_shapes_and_nan_noise(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("gumbel-ex-max-sampler", answer)


def test_max_sampler_check_restores_torch_rand():
    real, real_uniform = torch.rand, torch.Tensor.uniform_
    check("gumbel-ex-max-sampler", right_sampler)
    assert torch.rand is real and torch.Tensor.uniform_ is real_uniform


def test_max_sampler_check_restores_the_package_after_a_forbidden_call():
    from softmaxbook import gumbel

    real = gumbel._standard_gumbel
    with pytest.raises(ExerciseCheckFailed):
        check("gumbel-ex-max-sampler", package_sampler)
    assert gumbel._standard_gumbel is real
    assert gumbel.gumbel_max(torch.zeros(3, 2)).shape == (3,)


# --- gumbel-ex-truncated-inverse ------------------------------------------------------------------
def right_inverse(u, loc, upper):
    return -torch.logaddexp(-upper, -(loc - torch.log(-torch.log(u))))


def naive_inverse(u, loc, upper):
    return loc - torch.log(torch.exp(loc - upper) - torch.log(u))


def test_truncated_inverse_accepts_right_answer():
    assert check("gumbel-ex-truncated-inverse", right_inverse)


def test_truncated_inverse_rejects_naive_overflow():
    with pytest.raises(ExerciseCheckFailed, match="overflows here"):
        check("gumbel-ex-truncated-inverse", naive_inverse)


def test_truncated_inverse_rejects_exp_of_minus_g():
    def direct(u, loc, upper):  # -log(e^-T + e^-G) written out: e^-G overflows for G << 0
        g = loc - torch.log(-torch.log(u))
        return -torch.log(torch.exp(-upper) + torch.exp(-g))

    with pytest.raises(ExerciseCheckFailed, match="(?s)loc far below upper.*overflows"):
        check("gumbel-ex-truncated-inverse", direct)


def test_truncated_inverse_rejects_untruncated_gumbel():
    with pytest.raises(ExerciseCheckFailed, match="(?s)moderate.*solve u = F"):
        check("gumbel-ex-truncated-inverse", lambda u, loc, upper: loc - torch.log(-torch.log(u)))


def test_truncated_inverse_rejects_the_source_notes_minus_u():
    def minus_u(u, loc, upper):  # erratum 31: "-u" where the inverse has "-log u"
        return loc - torch.log(torch.exp(loc - upper) - u)

    with pytest.raises(ExerciseCheckFailed, match="(?s)moderate.*source notes' slip"):
        check("gumbel-ex-truncated-inverse", minus_u)


def test_truncated_inverse_rejects_float32():
    def in_float32(u, loc, upper):
        return right_inverse(u.float(), loc.float(), upper.float())

    with pytest.raises(ExerciseCheckFailed, match="(?s)moderate.*is torch.float32"):
        check("gumbel-ex-truncated-inverse", in_float32)


def test_truncated_inverse_hints_do_not_give_the_answer():
    # the hints point to the method; the reference line itself is never shown
    for answer in (naive_inverse, lambda u, loc, upper: loc - torch.log(-torch.log(u))):
        with pytest.raises(ExerciseCheckFailed) as info:
            check("gumbel-ex-truncated-inverse", answer)
        assert "logaddexp" not in str(info.value)
        assert "exp(-upper) + exp(-G)" not in str(info.value)


# --- gumbel-ex-plackett-luce ----------------------------------------------------------------------
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
    assert check("gumbel-ex-plackett-luce", right_log_prob)


def test_plackett_luce_rejects_subtraction_from_total():
    with pytest.raises(ExerciseCheckFailed, match="cancels"):
        check("gumbel-ex-plackett-luce", subtracting_log_prob)


def test_plackett_luce_hints_do_not_give_the_answer():
    with pytest.raises(ExerciseCheckFailed) as info:
        check("gumbel-ex-plackett-luce", subtracting_log_prob)
    assert "-inf" not in str(info.value) and "mask" not in str(info.value)


def test_plackett_luce_rejects_with_replacement():
    with pytest.raises(ExerciseCheckFailed, match="order = \\[3, 0\\]"):
        check("gumbel-ex-plackett-luce", with_replacement_log_prob)


def test_plackett_luce_rejects_changing_the_callers_logits():
    def in_place(logits, order):  # masks drawn items in the caller's tensor
        lp = 0.0
        for i in order:
            lp = lp + logits[i] - torch.logsumexp(logits, 0)
            logits[i] = -math.inf
        return lp

    with pytest.raises(ExerciseCheckFailed, match="changed the logits it was given"):
        check("gumbel-ex-plackett-luce", in_place)


def test_plackett_luce_rejects_float32():
    def in_float32(logits, order):
        return right_log_prob(logits.float(), order)

    with pytest.raises(ExerciseCheckFailed, match="is torch.float32"):
        check("gumbel-ex-plackett-luce", in_float32)


def test_plackett_luce_rejects_log_of_a_product_of_probabilities():
    def log_of_product(logits, order):  # the probability e^-800 underflows to 0 first
        x, p = logits.clone(), 1.0
        for i in order:
            p = p * torch.softmax(x, 0)[i]
            x[i] = -math.inf
        return torch.log(p)

    with pytest.raises(ExerciseCheckFailed, match="(?s)order = \\[1, 2\\].*underflows"):
        check("gumbel-ex-plackett-luce", log_of_product)
