"""The checks of the Gumbel chapter's coding exercises accept right answers and reject wrong ones
with a message that helps."""

from __future__ import annotations

import math

import pytest
import torch

from softmaxbook.exercises import ExerciseCheckFailed, check, registered


def test_registered():
    assert registered("gumbel") == ["gumbel-ex-max-of-gumbels", "gumbel-ex-max-sampler",
                                    "gumbel-ex-plackett-luce", "gumbel-ex-race-key",
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


def right_sampler_exponential(logits, generator):  # G = -log E, E ~ Exp(1), float32 uniforms
    u = torch.rand(logits.shape, generator=generator).double()
    e = -torch.log1p(-u)  # u < 1 always, so e is finite; e = 0 only at u = 0
    e = e.clamp(min=torch.finfo(torch.float64).tiny)
    return (logits - torch.log(e)).argmax(dim=-1)


def right_sampler_where(logits, generator):  # redraw-free guard with torch.where, float64
    u = torch.rand(*logits.shape, generator=generator, dtype=torch.float64)
    u = torch.where(u == 0, torch.full_like(u, 2.0**-60), u)
    g = -torch.log(-torch.log(u))
    return torch.max(logits + g, dim=-1).indices


@pytest.mark.parametrize("answer", [right_sampler, right_sampler_exponential,
                                    right_sampler_where])
def test_max_sampler_accepts_right_answer(answer, capsys):
    assert check("gumbel-ex-max-sampler", answer)
    assert "correct" in capsys.readouterr().out


def clamped_sampler(logits, generator):  # U clamped to [0.01, 0.99]: G bounded to [-1.53, 4.60]
    u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator).clamp(0.01, 0.99)
    return (logits - torch.log(-torch.log(u))).argmax(-1)


def test_max_sampler_rejects_bounded_noise():
    # review of the third edition: the check tested only balanced logits, and a sampler whose U
    # is clamped to [0.01, 0.99] passed; for [0, -6.5] it never draws class 1
    with pytest.raises(ExerciseCheckFailed,
                       match=r"(?s)logits = \[0.0, -6.5\].*classes \[1\].*whole real line"):
        check("gumbel-ex-max-sampler", clamped_sampler)


def mildly_clamped(c):
    def sampler(logits, generator):  # U clamped to [c, 1 - c]: the tails beyond are cut
        u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator).clamp(c, 1 - c)
        return (logits - torch.log(-torch.log(u))).argmax(-1)
    return sampler


@pytest.mark.parametrize("c", [3e-3, 1e-3])
def test_max_sampler_rejects_milder_clamps(c):
    # independent review: U clamped to [3e-3, 1 - 3e-3] or [1e-3, 1 - 1e-3] passed the check
    # (on [0, -6.5] they keep 0.40 and 0.855 of the rare class's probability, which 20 000 rows
    # cannot tell, and the task forbids any clamp beyond the open interval). On [0, -8] they keep
    # 0 and 0.20 of it. The reference sampler on that case, over 1000 generator seeds: smallest
    # binomial p-value 6.7e-5, 0.8 % of them below 0.01 (the check rejects at 1e-6).
    with pytest.raises(ExerciseCheckFailed,
                       match=r"(?s)logits = \[0.0, -8.0\] repeated in 200000 rows.*classes \[1\]"):
        check("gumbel-ex-max-sampler", mildly_clamped(c))


@pytest.mark.parametrize("c", [1e-6, 1e-4])
def test_max_sampler_rejects_a_clamp_beyond_the_open_interval(c):
    # R3 review: the task forbids U further from 0 and 1 than (tiny, 1 - eps/2), but a clamp at
    # 1e-6 or 1e-4 passed (no sample the check can afford sees it); it caps G at 13.8 or 9.2,
    # so class 1 of [0, -15] never wins even when torch.rand returns its extreme values
    with pytest.raises(ExerciseCheckFailed, match=r"(?s)logits = \[0, -15\].*class 1 never won"):
        check("gumbel-ex-max-sampler", mildly_clamped(c))


def test_max_sampler_accepts_a_sampler_that_draws_no_uniforms():
    def exponential_race(logits, generator):  # G = -log E, E ~ Exp(1) from exponential_
        e = torch.empty(logits.shape, dtype=logits.dtype).exponential_(generator=generator)
        return (logits - torch.log(e)).argmax(-1)
    assert check("gumbel-ex-max-sampler", exponential_race)


def test_max_sampler_rejects_perturbing_the_callers_logits():
    def in_place(logits, generator):  # right law, but the caller's logits come back changed
        u = torch.rand(logits.shape, dtype=logits.dtype, generator=generator)
        u = u.clamp(torch.finfo(u.dtype).tiny, 1 - torch.finfo(u.dtype).eps / 2)
        return logits.sub_(torch.log(-torch.log(u))).argmax(-1)
    with pytest.raises(ExerciseCheckFailed, match="changed the logits it was given"):
        check("gumbel-ex-max-sampler", in_place)


def test_max_sampler_accepts_a_clamp_far_in_the_tails():
    # a clamp at 1e-10 changes probabilities by ~1e-10: a right answer in every practical sense
    assert check("gumbel-ex-max-sampler", mildly_clamped(1e-10))


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
        (clamped_sampler, r"classes \[1\] came out"),
        # Gaussian noise instead of Gumbel: argmax of logits + N(0, 1) is not the softmax
        (lambda logits, g: (logits + torch.randn(logits.shape, generator=g,
                                                 dtype=logits.dtype)).argmax(-1),
         "do not match"),
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


def right_inverse_softplus(u, loc, upper):  # -log(e^-T + e^-G) = T - softplus(T - G), exact
    g = loc - torch.log(-torch.log(u))
    d = upper - g
    return upper - (d.clamp(min=0) + torch.log1p(torch.exp(-d.abs())))


@pytest.mark.parametrize("answer", [right_inverse, right_inverse_softplus])
def test_truncated_inverse_accepts_right_answer(answer):
    assert check("gumbel-ex-truncated-inverse", answer)


@pytest.mark.parametrize("answer, message", [
    # truncation by clamping the plain Gumbel: piles the mass above `upper` onto it
    (lambda u, loc, upper: torch.minimum(loc - torch.log(-torch.log(u)), upper), "moderate"),
    # logaddexp without the minus signs: log(e^T + e^G) >= max(T, G), above `upper`
    (lambda u, loc, upper: torch.logaddexp(upper, loc - torch.log(-torch.log(u))), "moderate"),
    # log u where the inverse has log(-log u)
    (lambda u, loc, upper: -torch.logaddexp(-upper, -(loc - torch.log(u))), "moderate"),
    # the truncated CDF itself, not its inverse
    (lambda u, loc, upper: torch.exp(torch.exp(loc - upper) - torch.exp(loc - u)), "moderate"),
    (lambda u, loc, upper: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_truncated_inverse_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("gumbel-ex-truncated-inverse", answer)


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
def right_log_prob(logits, order):  # each factor -softplus(logsumexp(others) - x_i)
    lp, x = torch.zeros((), dtype=logits.dtype), logits.clone()
    for i in order:
        others = x.clone()
        others[i] = -math.inf
        lp = lp - torch.nn.functional.softplus(torch.logsumexp(others - x[i], 0))
        x[i] = -math.inf
    return lp


def right_log_prob_logaddexp(logits, order):  # -log(1 + sum e^{x_l - x_i}) via logaddexp
    remaining = list(range(len(logits)))
    total = 0.0
    for i in order:
        remaining.remove(i)
        if remaining:
            rest = torch.logsumexp(logits[remaining] - logits[i], dim=0)
            total = total - torch.logaddexp(torch.zeros_like(rest), rest)
    return torch.as_tensor(total, dtype=logits.dtype)


def right_log_prob_log1p(logits, order):  # shift by the max of the remaining items, log1p
    x, lp = logits.clone(), torch.tensor(0.0, dtype=logits.dtype)
    for i in order:
        m, top = x.max(0)
        s = torch.exp(x - m)
        s[top] = 0.0
        lp = lp + (x[i] - m) - torch.log1p(s.sum())
        x[i] = -math.inf
    return lp


def absolute_log_prob(logits, order):  # x_i - logsumexp(remaining): -4.25e-18 for [40, 0, -40]
    lp, x = 0.0, logits.clone()
    for i in order:
        lp = lp + x[i] - torch.logsumexp(x, 0)
        x[i] = -math.inf
    return lp


def finite_mask_log_prob(logits, order):  # drawn items masked with -100, not -inf
    lp, x = 0.0, logits.clone()
    for i in order:
        lp = lp - torch.nn.functional.softplus(
            torch.logsumexp(torch.cat([x[:i], x[i + 1:]]) - x[i], 0))
        x[i] = -100.0
    return lp


def mask_first_log_prob(logits, order):  # removes the item before computing its factor
    lp, x = 0.0, logits.clone()
    for i in order:
        x[i] = -math.inf
        lp = lp + logits[i] - torch.logsumexp(x, 0)
    return lp


def renormalised_probability_log_prob(logits, order):  # p_i / (1 - drawn mass), in probabilities
    p, drawn, lp = torch.softmax(logits, 0), 0.0, 0.0
    for i in order:
        lp = lp + torch.log(p[i] / (1 - drawn))
        drawn = drawn + p[i]
    return lp


def subtracting_log_prob(logits, order):
    total, lp = torch.logsumexp(logits, 0).exp(), 0.0
    for i in order:
        lp = lp + logits[i] - torch.log(total)
        total = total - logits[i].exp()
    return lp


def with_replacement_log_prob(logits, order):
    return sum(torch.log_softmax(logits, 0)[i] for i in order)


@pytest.mark.parametrize("answer", [right_log_prob, right_log_prob_logaddexp,
                                    right_log_prob_log1p])
def test_plackett_luce_accepts_right_answer(answer):
    assert check("gumbel-ex-plackett-luce", answer)


@pytest.mark.parametrize("answer, message", [
    # review of the third edition: an absolute tolerance accepted x_i - logsumexp (and 0) where
    # the answer is -8.5e-18, and a finite mask of -100 passed
    (absolute_log_prob, r"(?s)\[40.0, 0.0, -40.0\].*relative to its size"),
    (lambda logits, order: torch.zeros((), dtype=logits.dtype) if logits[0] == 40.0
     else right_log_prob(logits, order), r"(?s)\[40.0, 0.0, -40.0\].*relative to its size"),
    (finite_mask_log_prob, r"(?s)order = \[0, 1\].*but got +tensor\(-300\).*log\(1/2\)"),
    (mask_first_log_prob, r"order = \[0\]"),
    (renormalised_probability_log_prob, r"\[40.0, 0.0, -40.0\]"),
    (lambda logits, order: -right_log_prob(logits, order), r"order = \[0\]"),
    (lambda logits, order: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_plackett_luce_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("gumbel-ex-plackett-luce", answer)


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


def masked_with(value):
    def log_prob(logits, order):  # right factors, drawn items masked with a finite value
        x, lp = logits.clone(), torch.zeros((), dtype=logits.dtype)
        for i in order:
            others = x.clone()
            others[i] = -math.inf
            a = torch.logsumexp(others - x[i], 0)
            lp = lp - torch.logaddexp(torch.zeros_like(a), a)
            x[i] = value
        return lp
    return log_prob


@pytest.mark.parametrize("value", [-1000.0, -1e4, -1e9, -1e13, -1e300])
def test_plackett_luce_rejects_any_finite_mask(value):
    # R3 review: only a mask of -100 was caught ([0, -400, -400]); -1000 and -1e4 passed
    # R4 review: -1e13 and -1e300 passed (no logit lay below -1e12)
    with pytest.raises(ExerciseCheckFailed,
                       match=r"(?s)order = \[0, 1\].*tensor\(-0.693147\).*finite negative"):
        check("gumbel-ex-plackett-luce", masked_with(value))


def test_plackett_luce_rejects_log1p_of_exp():
    def log1p_exp(logits, order):  # log(1 + e^a) as log1p(exp(a)): inf once a > 709
        x, lp = logits.clone(), torch.zeros((), dtype=logits.dtype)
        for i in order:
            others = x.clone()
            others[i] = -math.inf
            lp = lp - torch.log1p(torch.exp(torch.logsumexp(others - x[i], 0)))
            x[i] = -math.inf
        return lp
    with pytest.raises(ExerciseCheckFailed, match=r"(?s)\[0.0, -800.0\].*overflows float64"):
        check("gumbel-ex-plackett-luce", log1p_exp)


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


# --- gumbel-ex-max-of-gumbels: the location of the maximum of n i.i.d. Gumbel(mu) ---------------
EULER_GAMMA = 0.5772156649015329


def max_location(mu, n):
    return mu + torch.log(n)


def max_location_by_lse(mu, n):
    # log(n e^mu): the logsumexp of n equal locations, written out (|mu| <= ~40 in the check)
    return torch.log(n * torch.exp(mu))


def max_location_logaddexp(mu, n):
    # one Gumbel, then the maximum of the other n - 1 (n = 1: log 0 = -inf drops out)
    return torch.logaddexp(mu, mu + torch.log(n - 1))


@pytest.mark.parametrize("answer", [max_location, max_location_by_lse, max_location_logaddexp])
def test_max_location_accepts_right_answers(answer, capsys):
    assert check("gumbel-ex-max-of-gumbels", answer)
    assert "correct" in capsys.readouterr().out


def in_place(mu, n):
    return mu.add_(torch.log(n))


@pytest.mark.parametrize("answer, message", [
    # the maximum of Gumbels is again a Gumbel, but not with the same location
    (lambda mu, n: mu.clone(), "(?s)for mu = 1.5, n = 10 you return 1.5.*Try n = 1 first"),
    # the mean, not the location
    (lambda mu, n: mu + torch.log(n) + EULER_GAMMA, "(?s)wrong at 6 of 6.*Euler's constant"),
    (lambda mu, n: mu - torch.log(n), "wrong at 3 of 6 entries"),
    (lambda mu, n: torch.log(n), "wrong at 3 of 6 entries"),          # dropped mu
    (lambda mu, n: n * mu, "wrong at 3 of 6 entries"),                # a sum of n draws
    (lambda mu, n: mu + n, "wrong at 6 of 6 entries"),
    (lambda mu, n: mu * torch.log(n), "wrong at 5 of 6 entries"),
    (lambda mu, n: mu + torch.log(n + 1), "wrong at 6 of 6 entries"),  # off by one
    (lambda mu, n: mu + torch.log(n) / n, "for mu = 1.5, n = 10 you return 1.73026"),
    (lambda mu, n: mu + torch.log2(n), "wrong at 3 of 6 entries"),
    (lambda mu, n: mu + torch.sqrt(2 * torch.log(n)), "(?s)wrong at 3 of 6.*standard normals"),
    (lambda mu, n: torch.logsumexp(mu, dim=-1), "should be a float tensor of shape .6,."),
    (lambda mu, n: (mu + torch.log(n)).float(), "your result is torch.float32"),
    (in_place, "changed its arguments in place"),
    (lambda mu, n: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_max_location_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("gumbel-ex-max-of-gumbels", answer)


def test_max_location_message_does_not_hand_out_the_answer():
    with pytest.raises(ExerciseCheckFailed) as err:
        check("gumbel-ex-max-of-gumbels", lambda mu, n: mu.clone())
    text = str(err.value)
    assert "log" not in text.split("Hint:")[0] and "0.693147" not in text and "3.80259" not in text


# --- R4 review: the mocked uniforms respect uniform_'s bounds ------------------------------------
def uniform_from_tiny_sampler(logits, generator, low=None, high=1.0):  # uniform_(tiny, 1)
    low = torch.finfo(logits.dtype).tiny if low is None else low
    u = torch.empty(logits.shape, dtype=logits.dtype).uniform_(low, high, generator=generator)
    return (logits - torch.log(-torch.log(u))).argmax(-1)


def test_max_sampler_accepts_uniform_from_tiny(capsys):
    # uniform_(tiny, 1) never returns 0; the U = 0 mock filled 0 anyway and the check said
    # "torch.rand returns 0 ... your sampler returned the impossible class 0"
    assert check("gumbel-ex-max-sampler", uniform_from_tiny_sampler)
    assert "correct" in capsys.readouterr().out


def test_max_sampler_rejects_a_clamp_by_uniform_bounds():
    with pytest.raises(ExerciseCheckFailed, match="class 1 never won"):
        check("gumbel-ex-max-sampler",
              lambda logits, g: uniform_from_tiny_sampler(logits, g, 1e-6, 1 - 1e-6))


# --- R4 review: the [0, -15] extreme-uniform test follows the layout of the draws ----------------
def per_class_sampler(logits, generator, c=None):  # one column of uniforms per class
    info = torch.finfo(logits.dtype)
    lo, hi = (info.tiny, 1 - info.eps / 2) if c is None else (c, 1 - c)
    u = torch.stack([torch.rand(logits.shape[:-1], dtype=logits.dtype, generator=generator)
                     for _ in range(logits.shape[-1])], dim=-1).clamp(lo, hi)
    return (logits - torch.log(-torch.log(u))).argmax(-1)


def transposed_sampler(logits, generator):  # uniforms drawn (n, ..., rows), then transposed
    info = torch.finfo(logits.dtype)
    u = torch.rand(logits.shape[::-1], dtype=logits.dtype, generator=generator)
    u = u.permute(*reversed(range(u.dim()))).clamp(info.tiny, 1 - info.eps / 2)
    return (logits - torch.log(-torch.log(u))).argmax(-1)


@pytest.mark.parametrize("answer", [per_class_sampler, transposed_sampler])
def test_max_sampler_accepts_other_layouts_of_the_uniforms(answer, capsys):
    # both were rejected as "your Gumbel noise stops short of its tail": the mock gave both
    # classes the same uniforms, so class 0 always won
    assert check("gumbel-ex-max-sampler", answer)
    assert "correct" in capsys.readouterr().out


def test_max_sampler_rejects_a_clamp_drawn_per_class():
    with pytest.raises(ExerciseCheckFailed, match="class 1 never won"):
        check("gumbel-ex-max-sampler", lambda logits, g: per_class_sampler(logits, g, c=1e-6))


def test_truncated_inverse_rejects_changing_u_in_place():
    def in_place(u, loc, upper):  # right values, but the caller's u is overwritten
        g = loc - u.log_().neg_().log_()
        return -torch.logaddexp(-upper, -g)

    # R4 review: it passed
    with pytest.raises(ExerciseCheckFailed, match="changed its arguments in place"):
        check("gumbel-ex-truncated-inverse", in_place)


# --- gumbel-ex-race-key ------------------------------------------------------------------------
import numpy as np  # noqa: E402


def right_race_key(log_weight, u):
    return log_weight - torch.log(-torch.log(u))


def right_race_key_exp_variable(log_weight, u):  # E = -log U is Exp(1); key = log w - log E
    e = torch.log(u) * -1
    return -torch.log(e) + log_weight


def right_race_key_numpy(log_weight, u):
    return torch.from_numpy(log_weight.numpy() - np.log(-np.log(u.numpy())))


def right_race_key_log1p_near_one(log_weight, u):
    # cold review R5: 1 - u is exact for u in [1/2, 1] (Sterbenz), so -log1p(-(1 - u)) is as
    # accurate as -log u there; the solution once said anything with 1 - u loses the digits
    e = torch.where(u > 0.5, -torch.log1p(-(1 - u)), -torch.log(u))
    return log_weight - torch.log(e)


@pytest.mark.parametrize("answer", [right_race_key, right_race_key_exp_variable,
                                    right_race_key_numpy, right_race_key_log1p_near_one])
def test_race_key_accepts_right_answers(answer):
    assert check("gumbel-ex-race-key", answer)


def _in_place(log_weight, u):
    return log_weight - torch.log(u.log_().neg_())


@pytest.mark.parametrize("answer, message", [
    # the key itself, formed, then sent through -log(-log .): 1 or 0 at extreme weights
    (lambda x, u: -torch.log(-torch.log(u ** torch.exp(-x))), "(?s)rounds to 1.*Simplify"),
    (lambda x, u: -torch.log(-torch.log(u ** (1 / torch.exp(x)))), "(?s)rounds to 1.*Simplify"),
    # half simplified: -log(-log(u) / w), the weight still exponentiated
    (lambda x, u: -torch.log(-torch.log(u) * torch.exp(-x)), "(?s)rounds to 1.*Simplify"),
    # the sign of the Gumbel term
    (lambda x, u: x + torch.log(-torch.log(u)), "sign of the term in u"),
    # the sign of the log-weight
    (lambda x, u: -x - torch.log(-torch.log(u)), "sign of the log-weight"),
    # one log too few: log w - log u (an exponential, not a Gumbel)
    (lambda x, u: x - torch.log(u), "(?s)moderate.*log of a power"),
    # the weight where the log-weight belongs
    (lambda x, u: torch.exp(x) - torch.log(-torch.log(u)), "(?s)moderate.*log of a power"),
    # 1 - u for u: the same law, another value
    (lambda x, u: x - torch.log(-torch.log(1 - u)), "1 - u has the same law"),
    # the Efraimidis-Spirakis key itself, and its log
    (lambda x, u: u ** torch.exp(-x), r"the key u \*\* \(1 / w\) itself"),
    (lambda x, u: torch.log(u) / torch.exp(x), r"the key u \*\* \(1 / w\) itself"),
    # log(1 / u) for -log u: loses the digits near u = 1
    (lambda x, u: x - torch.log(torch.log(1 / u)), "(?s)near 0 and near 1.*from u itself"),
    # log1p(u - 1) for log u: u - 1 rounds to -1 for u = 1e-300
    (lambda x, u: x - torch.log(-torch.log1p(u - 1)), "(?s)near 0 and near 1.*rounds to -1"),
    # float32
    (lambda x, u: right_race_key(x.float(), u.float()), "is torch.float32"),
    # changing u in place
    (_in_place, "changed its arguments in place"),
    (lambda x, u: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_race_key_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("gumbel-ex-race-key", answer)


def test_race_key_rejects_an_answer_right_only_on_moderate_inputs():
    def clamped(x, u):  # the naive key with the log-weight clamped to [-20, 20]: wrong beyond
        x = x.clamp(-20, 20)
        return -torch.log(-torch.log(u ** torch.exp(-x)))

    with pytest.raises(ExerciseCheckFailed, match="large log-weights"):
        check("gumbel-ex-race-key", clamped)
