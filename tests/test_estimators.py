"""Tests of softmaxbook.estimators.

Statistical tests use fixed seeds, so they are deterministic; the thresholds are stated beside
each as the false-alarm rate they would have under fresh randomness. KS tests reject at
p < 1e-3 (a correct sampler fails with probability 0.1 %); each has a twin showing that the same
test, at the same sample size, rejects a deliberately wrong sampler.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from softmaxbook import estimators as es
from softmaxbook.estimators import (
    MovingAverageBaseline,
    baseline_values,
    gaussian_kl,
    pathwise_estimates,
    score_function_estimates,
    square_example_variances,
)

P_CUT = 1e-3
F64 = dict(dtype=torch.float64)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------------
# A categorical (softmax) choice: exact gradient by enumeration
# ------------------------------------------------------------------------------------------------
LOGITS = torch.tensor([0.5, 0.0, -0.5, 1.0], **F64)
FVALS = torch.tensor([1.0, 3.0, -2.0, 0.5], **F64)


def cat_sample(th, n, g):
    return torch.multinomial(torch.softmax(th, -1), n, replacement=True, generator=g)


def cat_log_prob(z, th):
    return torch.log_softmax(th, -1)[z]


def exact_cat_grad():
    th = LOGITS.clone().requires_grad_(True)
    (torch.softmax(th, -1) @ FVALS).backward()
    return th.grad


@pytest.mark.parametrize("baseline", [None, 0.0, 1.7, -5.0])
def test_score_function_unbiased_by_enumeration(baseline):
    # "Sample" every class once; weighting row k by p_k gives the exact expectation.
    rows = score_function_estimates(lambda z: FVALS[z], lambda th, n, g: torch.arange(4),
                                    cat_log_prob, LOGITS, 4, baseline=baseline)
    p = torch.softmax(LOGITS, -1)
    expect = (p[:, None] * rows).sum(0)
    assert torch.allclose(expect, exact_cat_grad(), atol=1e-12)


def test_score_function_rows_are_f_times_score():
    rows = score_function_estimates(lambda z: FVALS[z], lambda th, n, g: torch.arange(4),
                                    cat_log_prob, LOGITS, 4)
    p = torch.softmax(LOGITS, -1)
    score = torch.eye(4, **F64) - p  # d/dlogits log softmax_k = e_k - p
    assert torch.allclose(rows, FVALS[:, None] * score, atol=1e-12)


def test_enumeration_test_can_fail():
    # A wrong score (e_k instead of e_k - p) is biased; the enumeration test sees it.
    rows = score_function_estimates(lambda z: FVALS[z], lambda th, n, g: torch.arange(4),
                                    lambda z, th: th[z], LOGITS, 4)
    p = torch.softmax(LOGITS, -1)
    assert not torch.allclose((p[:, None] * rows).sum(0), exact_cat_grad(), atol=1e-3)


@pytest.mark.parametrize("baseline", [None, "leave-one-out"])
def test_score_function_mean_matches_exact_gradient(baseline):
    n = 200_000
    rows = score_function_estimates(lambda z: FVALS[z], cat_sample, cat_log_prob, LOGITS, n,
                                    baseline=baseline, generator=gen(3))
    se = rows.std(0) / math.sqrt(n)
    # 5 standard errors per coordinate: false alarm 6e-7 per coordinate
    assert ((rows.mean(0) - exact_cat_grad()).abs() < 5 * se).all()


def test_leave_one_out_reduces_variance_here():
    # For this f (values spread around a nonzero mean) the leave-one-out baseline removes most
    # of the spread: total variance 1.97 -> 1.49 at n = 200000, a gap of ~50 standard errors.
    n = 200_000
    plain = score_function_estimates(lambda z: FVALS[z], cat_sample, cat_log_prob, LOGITS, n,
                                     generator=gen(4))
    loo = score_function_estimates(lambda z: FVALS[z], cat_sample, cat_log_prob, LOGITS, n,
                                   baseline="leave-one-out", generator=gen(4))
    assert loo.var(0).sum() < 0.85 * plain.var(0).sum()


def test_moving_average_baseline_is_used_then_updated():
    mab = MovingAverageBaseline(decay=0.5)
    assert mab.current() == 0.0
    f = torch.tensor([2.0, 4.0])
    assert torch.equal(baseline_values(f, mab), torch.zeros(2))
    mab.update(f)
    assert mab.current() == 3.0
    mab.update(torch.tensor([5.0]))
    assert mab.current() == 4.0
    # inside the estimator: the batch sees the old value, then the value moves
    mab = MovingAverageBaseline(decay=0.0)
    rows = score_function_estimates(lambda z: FVALS[z], lambda th, n, g: torch.arange(4),
                                    cat_log_prob, LOGITS, 4, baseline=mab)
    assert torch.allclose(rows, score_function_estimates(
        lambda z: FVALS[z], lambda th, n, g: torch.arange(4), cat_log_prob, LOGITS, 4))
    assert mab.current() == pytest.approx(float(FVALS.mean()))


def test_baseline_values_kinds():
    f = torch.tensor([1.0, 2.0, 6.0], **F64)
    assert torch.equal(baseline_values(f), torch.zeros(3, **F64))
    assert torch.equal(baseline_values(f, 2.5), torch.full((3,), 2.5, **F64))
    assert torch.allclose(baseline_values(f, "leave-one-out"),
                          torch.tensor([4.0, 3.5, 1.5], **F64))


# ------------------------------------------------------------------------------------------------
# The source's Gaussian example: closed forms against Monte Carlo
# ------------------------------------------------------------------------------------------------
A, B = 2.0, 3.0


def gauss_sample(th, n, g):
    return A * th + B + torch.randn(n, dtype=th.dtype, generator=g)


def gauss_log_prob(z, th):
    return -0.5 * (z - (A * th + B)) ** 2 - 0.5 * math.log(2 * math.pi)


def gauss_noise(n, g):
    return torch.randn(n, dtype=torch.float64, generator=g)


def test_square_example_closed_forms():
    v = square_example_variances(3.0, 2.0)
    assert v == {"mean": 12.0, "var_pathwise": 16.0, "var_score": 888.0}
    assert square_example_variances(3.0, 2.0, 10.0)["var_score"] == 4 * (8 * 9 + 10)
    assert square_example_variances(3.0, 2.0, 12.0)["var_score"] == 4 * (8 * 9 + 6)


@pytest.mark.parametrize("theta, baseline", [(0.0, 0.0), (0.0, 10.0), (-1.0, 0.0), (0.7, 2.0)])
def test_square_example_monte_carlo(theta, baseline):
    n = 400_000
    th = torch.tensor(theta, **F64)
    mu = A * theta + B
    exact = square_example_variances(mu, A, baseline)
    s = score_function_estimates(lambda z: z**2, gauss_sample, gauss_log_prob, th, n,
                                 baseline=baseline, generator=gen(5))
    p = pathwise_estimates(lambda z: z**2, lambda e, t: A * t + B + e, gauss_noise, th, n,
                           generator=gen(6))
    for rows, var in ((s, exact["var_score"]), (p, exact["var_pathwise"])):
        # mean within 5 standard errors (false alarm 6e-7); variance within 5 % (its relative
        # standard error is below 1 % here for both estimators, so 5 % is > 5 sigma)
        assert abs(float(rows.mean()) - exact["mean"]) < 5 * math.sqrt(var / n)
        assert abs(float(rows.var()) / var - 1) < 0.05


def test_square_example_monte_carlo_rejects_a_wrong_variance():
    # The source's density without the 2 in 2 sigma^2 doubles the score; the variance test fails.
    n = 400_000
    th = torch.tensor(0.0, **F64)
    s = score_function_estimates(lambda z: z**2, gauss_sample,
                                 lambda z, t: -((z - (A * t + B)) ** 2), th, n, generator=gen(5))
    assert abs(float(s.var()) / 888.0 - 1) > 0.05


def test_pathwise_linear_is_exact():
    rows = pathwise_estimates(lambda z: 3 * z, lambda e, t: t + e, gauss_noise,
                              torch.tensor(0.3, **F64), 10, generator=gen(0))
    assert torch.equal(rows, torch.full((10,), 3.0, **F64))


def test_pathwise_vector_theta_shape():
    th = torch.tensor([1.0, -2.0], **F64)
    rows = pathwise_estimates(lambda z: (z**2).sum(-1),
                              lambda e, t: t + e, lambda n, g: torch.randn(n, 2, generator=g,
                                                                            **F64),
                              th, 7, generator=gen(1))
    assert rows.shape == (7, 2)


# ------------------------------------------------------------------------------------------------
# Samplers: KS tests against scipy.stats, and their twins with a wrong sampler
# ------------------------------------------------------------------------------------------------
N_KS = 50_000

SAMPLERS = {
    "exponential": (lambda g: es.sample_exponential(torch.tensor(1.5, **F64), N_KS, generator=g),
                    stats.expon(scale=1 / 1.5).cdf),
    "cauchy": (lambda g: es.sample_cauchy(torch.tensor(0.5, **F64), torch.tensor(2.0, **F64),
                                          N_KS, generator=g),
               stats.cauchy(loc=0.5, scale=2.0).cdf),
    "laplace01": (lambda g: es.sample_laplace_standard(N_KS, generator=g, dtype=torch.float64),
                  stats.laplace().cdf),
    "laplace": (lambda g: es.sample_laplace(torch.tensor(-1.0, **F64), torch.tensor(0.5, **F64),
                                            N_KS, generator=g),
                stats.laplace(loc=-1.0, scale=0.5).cdf),
    "box_muller": (lambda g: es.sample_box_muller(N_KS, generator=g, dtype=torch.float64),
                   stats.norm().cdf),
    "lognormal": (lambda g: es.sample_lognormal(torch.tensor(0.3, **F64),
                                                torch.tensor(0.8, **F64), N_KS, generator=g),
                  stats.lognorm(s=0.8, scale=math.exp(0.3)).cdf),
    "inverse_gamma": (lambda g: es.sample_inverse_gamma(torch.tensor(3.0, **F64),
                                                        torch.tensor(2.0, **F64), N_KS,
                                                        generator=g),
                      stats.invgamma(a=3.0, scale=2.0).cdf),
}


def ks_p(x, cdf):
    return stats.kstest(np.asarray(x, dtype=np.float64), cdf).pvalue


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_matches_scipy(name):
    draw, cdf = SAMPLERS[name]
    x = draw(gen(11))
    assert x.shape == (N_KS,) and x.dtype == torch.float64
    assert ks_p(x, cdf) > P_CUT


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_ks_rejects_a_sampler_with_a_wrong_scale(name):
    # Scale 10 % off: the same test at the same n rejects it.
    draw, cdf = SAMPLERS[name]
    assert ks_p(1.1 * draw(gen(11)), cdf) < P_CUT


def test_ks_rejects_the_sources_box_muller():
    # The source's sqrt(ln(1/eps1)) cos(2 pi eps2) (no factor 2) has variance 1/2.
    g = gen(12)
    e1, e2 = torch.rand(N_KS, generator=g, **F64), torch.rand(N_KS, generator=g, **F64)
    wrong = torch.sqrt(-torch.log(e1)) * torch.cos(2 * math.pi * e2)
    assert ks_p(wrong, stats.norm().cdf) < P_CUT


def test_ks_rejects_inverse_gamma_with_scale_for_rate():
    # 1 / Gamma(k, scale theta) instead of 1 / Gamma(k, rate theta)
    g = gen(13)
    x = 1 / (2.0 * torch._standard_gamma(torch.full((N_KS,), 3.0, **F64), generator=g))
    assert ks_p(x, stats.invgamma(a=3.0, scale=2.0).cdf) < P_CUT


def test_sources_laplace_with_uniform_0_1_is_undefined():
    eps = torch.rand(1000, generator=gen(0), **F64)
    wrong = -torch.sign(eps) * torch.log(1 - 2 * eps.abs())
    assert torch.isnan(wrong).any()


def test_rademacher():
    x = es.sample_rademacher(100_000, generator=gen(14), dtype=torch.float64)
    assert set(x.unique().tolist()) == {-1.0, 1.0}
    k = int((x > 0).sum())
    # two-sided binomial test at 1e-3 (false alarm 0.1 %); a coin with p = 0.51 fails it
    assert stats.binomtest(k, 100_000, 0.5).pvalue > P_CUT
    wrong = (torch.rand(100_000, generator=gen(14)) < 0.51).sum().item()
    assert stats.binomtest(wrong, 100_000, 0.5).pvalue < P_CUT


def test_gaussian_with_covariance_factor():
    mean = torch.tensor([1.0, -2.0], **F64)
    r = torch.tensor([[1.0, 0.0], [1.5, 0.5]], **F64)
    x = es.sample_gaussian(mean, r, N_KS, generator=gen(15))
    cov = r @ r.T
    # each marginal and the projection on (1, -1) against its exact normal law
    for w in (torch.tensor([1.0, 0.0], **F64), torch.tensor([0.0, 1.0], **F64),
              torch.tensor([1.0, -1.0], **F64)):
        m, s = float(w @ mean), float(torch.sqrt(w @ cov @ w))
        assert ks_p(x @ w, stats.norm(m, s).cdf) > P_CUT
    # the transposed factor (covariance R^T R) fails the second marginal's test
    wrong = es.sample_gaussian(mean, r.T.contiguous(), N_KS, generator=gen(15))
    assert ks_p(wrong[:, 1], stats.norm(-2.0, math.sqrt(float(cov[1, 1]))).cdf) < P_CUT


def test_samplers_are_pathwise_differentiable():
    loc = torch.tensor(0.2, **F64, requires_grad=True)
    scale = torch.tensor(1.5, **F64, requires_grad=True)
    x = es.sample_laplace(loc, scale, 100, generator=gen(16))
    x.sum().backward()
    # dx/dloc = 1 and dx/dscale = (x - loc) / scale for every draw
    assert loc.grad == 100
    assert torch.allclose(scale.grad, ((x.detach() - 0.2) / 1.5).sum())


def test_samplers_follow_the_generator():
    a = es.sample_cauchy(0.0, 1.0, 5, generator=gen(3))
    b = es.sample_cauchy(0.0, 1.0, 5, generator=gen(3))
    assert torch.equal(a, b)


def test_uniform_zero_does_not_give_inf(monkeypatch):
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.zeros(*a[0:1], dtype=k.get("dtype")))
    assert torch.isfinite(es.sample_exponential(1.0, 4)).all()
    assert torch.isfinite(es.sample_laplace_standard(4)).all()
    assert torch.isfinite(es.sample_box_muller(4)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniform_extremes_give_finite_draws(monkeypatch, dtype):
    # torch.rand returns multiples of 2^-24 (float32) / 2^-53 (float64) in [0, 1). Its extreme
    # values 0 and 1 - step used to give +-inf: a 0 was clamped to the smallest normal number and
    # u - 1/2 then rounded to -1/2 (float32: 12 in 1e8 draws of sample_laplace, review 6).
    step = 2.0 ** -(24 if dtype == torch.float32 else 53)
    extremes = torch.tensor([0.0, step, 0.5 - step, 0.5, 1 - step], dtype=dtype)
    monkeypatch.setattr(torch, "rand", lambda shape, **k: extremes.to(k["dtype"]).expand(shape))
    lap = es.sample_laplace(torch.tensor(0.0, dtype=dtype), torch.tensor(1.0, dtype=dtype),
                            5)
    assert torch.isfinite(lap).all()
    # the exact inverse CDF at u = step/2 (the replaced 0), step, 1/2 - step, 1/2, 1 - step
    u = torch.tensor([step / 2, step, 0.5 - step, 0.5, 1 - step], **F64)
    exact = torch.where(u < 0.5, torch.log(2 * u), -torch.log(2 * (1 - u)))
    assert torch.allclose(lap.double(), exact, rtol=4 * torch.finfo(dtype).eps, atol=0)
    expo = es.sample_exponential(torch.tensor(1.0, dtype=dtype), 5)
    assert torch.isfinite(expo).all() and (expo > 0).all()
    for draw in (es.sample_laplace_standard(5, dtype=dtype), es.sample_box_muller(5, dtype=dtype),
                 es.sample_cauchy(torch.tensor(0.0, dtype=dtype), torch.tensor(1.0, dtype=dtype),
                                  5)):
        assert torch.isfinite(draw).all()


HALF = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_samplers_stay_in_their_support(dtype):
    # Review 6: in 2e5 draws sample_laplace gave 82 (float16) and 610 (bfloat16) infinities and
    # sample_exponential exact zeros: the uniform was rounded to the half dtype (1 once in ~4000
    # draws) before the logarithm. Now the noise is transformed in float32 and rounded once.
    n = 200_000
    one, zero = torch.tensor(1.0, dtype=dtype), torch.tensor(0.0, dtype=dtype)
    expo = es.sample_exponential(one, n, generator=gen(30))
    assert expo.dtype == dtype and (expo > 0).all() and torch.isfinite(expo).all()
    # a rate so large that many draws underflow: still > 0 (the smallest subnormal)
    assert (es.sample_exponential(torch.tensor(1e4, dtype=dtype), 1000, generator=gen(31))
            > 0).all()
    for x in (es.sample_laplace(zero, one, n, generator=gen(32)),
              es.sample_laplace_standard(n, generator=gen(33), dtype=dtype),
              es.sample_box_muller(n, generator=gen(34), dtype=dtype),
              es.sample_inverse_gamma(3 * one, one, n, generator=gen(35))):
        assert x.dtype == dtype and torch.isfinite(x).all()


@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_laplace_and_exponential_follow_their_laws(dtype):
    # Rounding to the half dtype moves each draw by at most 2^-9 (bfloat16) of its value, a CDF
    # error below 0.2 % of the density's scale; the KS test at n = 20000 resolves about 1.5 %
    # (p < 1e-3), so rounding passes and a 10 % scale error does not.
    n = 20_000
    lap = es.sample_laplace(torch.tensor(0.5, dtype=dtype), torch.tensor(2.0, dtype=dtype), n,
                            generator=gen(36)).double()
    assert ks_p(lap, stats.laplace(0.5, 2.0).cdf) > P_CUT
    assert ks_p(1.1 * (lap - 0.5) + 0.5, stats.laplace(0.5, 2.0).cdf) < P_CUT
    expo = es.sample_exponential(torch.tensor(2.0, dtype=dtype), n, generator=gen(37)).double()
    assert ks_p(expo, stats.expon(scale=0.5).cdf) > P_CUT
    # the tails are there: |x - loc| > 7 scales has probability e^-7 = 9.1e-4 (18 expected in
    # 20000, none with probability 1e-8)
    assert int(((lap - 0.5).abs() > 14).sum()) >= 1


# ------------------------------------------------------------------------------------------------
# gaussian_kl
# ------------------------------------------------------------------------------------------------
def torch_kl(mq, lq, mp, lp):
    q = torch.distributions.Normal(mq, torch.exp(0.5 * lq))
    p = torch.distributions.Normal(mp, torch.exp(0.5 * lp))
    return torch.distributions.kl_divergence(q, p).sum(-1)


def test_gaussian_kl_matches_torch():
    g = gen(20)
    mq, lq, mp, lp = (torch.randn(5, 3, generator=g, **F64) for _ in range(4))
    assert torch.allclose(gaussian_kl(mq, lq, mp, lp), torch_kl(mq, lq, mp, lp), rtol=1e-12)
    z = torch.zeros(3, **F64)
    assert torch.allclose(gaussian_kl(mq, lq), torch_kl(mq, lq, z, z), rtol=1e-12)


def test_gaussian_kl_matches_monte_carlo():
    mq, lq = torch.tensor([0.5, -1.0], **F64), torch.tensor([0.3, -0.7], **F64)
    z = mq + torch.exp(0.5 * lq) * torch.randn(400_000, 2, generator=gen(21), **F64)
    log_q = (-0.5 * (z - mq) ** 2 / torch.exp(lq) - 0.5 * lq).sum(-1)
    log_p = (-0.5 * z**2).sum(-1)
    diff = log_q - log_p
    # 5 standard errors
    assert abs(float(diff.mean() - gaussian_kl(mq, lq))) < 5 * float(diff.std()) / 632.0


def test_gaussian_kl_is_a_sum_over_dimensions():
    mq, lq = torch.tensor([[0.5, -1.0, 2.0]], **F64), torch.tensor([[0.3, -0.7, 1.0]], **F64)
    parts = sum(gaussian_kl(mq[:, i:i + 1], lq[:, i:i + 1]) for i in range(3))
    assert torch.allclose(gaussian_kl(mq, lq), parts)
    assert gaussian_kl(mq, lq).shape == (1,)


@pytest.mark.parametrize("lv", [-300.0, -40.0, 40.0, 300.0])
def test_gaussian_kl_huge_and_tiny_variances(lv):
    # exact: 1/2 [exp(lv) - 1 - lv] for mu = 0; in float64 exp(300) = 1.9e130 is fine, but the
    # naive form with var_q / var_p overflows when both variances are huge
    lq = torch.tensor([lv], **F64)
    kl = gaussian_kl(torch.zeros(1, **F64), lq)
    assert torch.isclose(kl, 0.5 * (torch.exp(lq) - 1 - lq), rtol=1e-12)
    both = gaussian_kl(torch.zeros(1, **F64), lq + 1e-3, torch.zeros(1, **F64), lq)
    # KL of variance ratio e^d: 1/2 (e^d - 1 - d), independent of the common scale
    d = 1e-3
    assert torch.isclose(both, torch.tensor(0.5 * (math.expm1(d) - d), **F64), rtol=1e-12)


def test_gaussian_kl_float32_huge_common_variance():
    lq = torch.tensor([200.0, 200.0])
    kl = gaussian_kl(torch.zeros(2), lq, torch.zeros(2), lq - 0.5)
    assert torch.isfinite(kl)
    # torch's Normal overflows: scale = exp(100) is inf in float32
    assert not torch.isfinite(torch_kl(torch.zeros(2), lq, torch.zeros(2), lq - 0.5))
    assert torch.isclose(kl, torch.tensor(2 * 0.5 * (math.expm1(0.5) - 0.5)), rtol=1e-5)


def test_gaussian_kl_tiny_difference_does_not_cancel():
    d = 1e-9
    kl = gaussian_kl(torch.zeros(1, **F64), torch.tensor([d], **F64))
    # KL = d^2/4 + O(d^3); the naive exp(d) - 1 - d loses every digit here
    assert kl.item() == pytest.approx(d**2 / 4, rel=1e-6)


@pytest.mark.parametrize("d", [1e-300, 1e-16, -1e-14, 1e-14, 1e-12, -1e-9, 1e-9, 1e-6, 0.05,
                               -0.1001, 0.4999, -0.4999, 0.5001, -0.5001, 1.0, -5.0, 30.0])
def test_gaussian_kl_log_variance_term_to_a_few_ulp(d):
    # Review 6: expm1(d) - d still cancels (relative error 1.5e-7 at d = 1e-9, 1 % at 1e-14, all
    # digits at 1e-16); the KL of N(0, e^d) to N(0, 1) is (e^d - 1 - d) / 2, checked against
    # 50-digit mpmath in float64 and float32
    with mpmath.workdps(50):
        exact = float((mpmath.expm1(mpmath.mpf(d)) - mpmath.mpf(d)) / 2)
    kl = gaussian_kl(torch.zeros(1, **F64), torch.tensor([d], **F64)).item()
    assert abs(kl - exact) <= 4 * 2.0**-52 * exact
    d32 = float(torch.tensor(d, dtype=torch.float32))  # the float32 input, exactly
    with mpmath.workdps(50):
        exact32 = float((mpmath.expm1(mpmath.mpf(d32)) - mpmath.mpf(d32)) / 2)
    kl32 = gaussian_kl(torch.zeros(1), torch.tensor([d32])).item()
    assert abs(kl32 - exact32) <= 4 * 2.0**-23 * exact32 + 1e-45


@pytest.mark.parametrize("dtype, logvar", [(torch.float32, -100.0), (torch.float32, -300.0),
                                           (torch.float64, -1500.0), (torch.float16, -30.0),
                                           (torch.bfloat16, -100.0)])
def test_gaussian_kl_identical_narrow_gaussians_is_zero(dtype, logvar):
    # Review 6: identical N(0.3, e^-100) in float32 gave NaN (mean term 0 * exp(100) = 0 * inf);
    # torch.distributions gives 0
    mu = torch.full((2,), 0.3, dtype=dtype, requires_grad=True)
    lv = torch.full((2,), logvar, dtype=dtype, requires_grad=True)
    kl = gaussian_kl(mu, lv, mu, lv)
    assert kl.dtype == dtype and kl.item() == 0.0
    kl.backward()
    assert torch.isfinite(mu.grad).all() and torch.isfinite(lv.grad).all()
    if dtype == torch.float32 and logvar == -100.0:
        assert torch_kl(mu.detach(), lv.detach(), mu.detach(), lv.detach()).item() == 0.0


def test_gaussian_kl_tiny_mean_difference_over_tiny_variance():
    # (1e-30)^2 underflows float32, e^100 overflows it; the KL 0.5 e^100 1e-60 = 1.3e-17 is fine
    kl = gaussian_kl(torch.tensor([1e-30]), torch.tensor([-100.0]), torch.zeros(1),
                     torch.tensor([-100.0]))
    exact = 0.5 * float(torch.tensor(1e-30).double()) ** 2 * math.exp(100)
    assert kl.item() == pytest.approx(exact, rel=1e-6)


@pytest.mark.parametrize("dtype", HALF)
def test_gaussian_kl_half_precision(dtype):
    # computed in float32 and rounded once: within a few half-precision ulp of float64
    g = gen(23)
    mq, lq, mp, lp = (2 * torch.randn(50, 3, generator=g) for _ in range(4))
    args = [t.to(dtype) for t in (mq, lq, mp, lp)]
    got = gaussian_kl(*args)
    assert got.dtype == dtype and torch.isfinite(got).all()
    # the inputs' own rounding (2^-8 relative for bfloat16) moves a KL of size K by ~ K * 2^-8
    # times the logvar's size: compare with the float64 KL of the rounded inputs
    ref = gaussian_kl(*(t.double() for t in args))
    assert torch.allclose(got.double(), ref, rtol=4 * torch.finfo(dtype).eps, atol=0)


def test_gaussian_kl_empty_batch():
    assert gaussian_kl(torch.zeros(0, 2), torch.zeros(0, 2)).shape == (0,)
    assert torch.equal(gaussian_kl(torch.zeros(3, 0), torch.zeros(3, 0)), torch.zeros(3))


@settings(max_examples=60, deadline=None)
@given(st.floats(-50, 50), st.floats(-30, 30), st.floats(-50, 50), st.floats(-30, 30))
def test_gaussian_kl_nonnegative_and_matches_torch(mq, lq, mp, lp):
    t = [torch.tensor([v], **F64) for v in (mq, lq, mp, lp)]
    kl = gaussian_kl(*t)
    assert kl.item() >= 0
    assert torch.allclose(kl, torch_kl(*t), rtol=1e-9, atol=1e-12)


def test_gaussian_kl_gradient():
    t = [torch.randn(2, 3, generator=gen(22), **F64).requires_grad_(True) for _ in range(4)]
    assert torch.autograd.gradcheck(lambda *a: gaussian_kl(*a), t)


# ------------------------------------------------------------------------------------------------
# Bad input: one test per kind
# ------------------------------------------------------------------------------------------------
def test_bad_theta():
    with pytest.raises(TypeError, match="argument 'theta' must be a torch.Tensor"):
        score_function_estimates(lambda z: z, gauss_sample, gauss_log_prob, 0.0, 3)
    with pytest.raises(ValueError, match="argument 'theta' contains NaN"):
        pathwise_estimates(lambda z: z, lambda e, t: e + t, gauss_noise,
                           torch.tensor([math.nan], **F64), 3)


def test_bad_n_and_callables():
    th = torch.tensor(0.0, **F64)
    with pytest.raises(ValueError, match="argument 'n' must be >= 1"):
        score_function_estimates(lambda z: z, gauss_sample, gauss_log_prob, th, 0)
    with pytest.raises(TypeError, match="argument 'log_prob' must be callable"):
        score_function_estimates(lambda z: z, gauss_sample, None, th, 3)
    with pytest.raises(ValueError, match="argument 'f' must return one value per sample"):
        score_function_estimates(lambda z: z[:2], gauss_sample, gauss_log_prob, th, 3)
    with pytest.raises(ValueError, match="does not depend on 'theta'"):
        score_function_estimates(lambda z: z, gauss_sample, lambda z, t: z, th, 3)
    with pytest.raises(ValueError, match="must return one value per sample"):
        pathwise_estimates(lambda z: z.sum(), lambda e, t: e + t, gauss_noise, th, 3)


def test_bad_generator():
    with pytest.raises(TypeError, match="argument 'generator' must be a torch.Generator"):
        es.sample_exponential(1.0, 3, generator=0)


def test_bad_baseline():
    f = torch.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="argument 'baseline' must be None"):
        baseline_values(f, "mean")
    with pytest.raises(ValueError, match="needs at least 2 samples"):
        baseline_values(f[:1], "leave-one-out")
    with pytest.raises(ValueError, match="argument 'baseline' must be finite"):
        baseline_values(f, math.inf)
    with pytest.raises(TypeError, match="argument 'baseline' must be None"):
        baseline_values(f, [1.0])
    with pytest.raises(ValueError, match="argument 'f_values' must be 1-D"):
        baseline_values(f[None], None)
    with pytest.raises(ValueError, match="argument 'decay' must be < 1"):
        MovingAverageBaseline(1.0)
    with pytest.raises(ValueError, match="argument 'decay' must be >= 0"):
        MovingAverageBaseline(-0.1)


def test_bad_sampler_parameters():
    with pytest.raises(ValueError, match="argument 'scale' must be > 0"):
        es.sample_laplace(0.0, torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="argument 'rate' must be > 0"):
        es.sample_exponential(0.0)
    with pytest.raises(ValueError, match="argument 'sigma' contains an infinite value"):
        es.sample_lognormal(0.0, math.inf)
    with pytest.raises(ValueError, match="argument 'sample_shape'"):
        es.sample_cauchy(0.0, 1.0, (-1,))
    with pytest.raises(ValueError, match="do not broadcast"):
        es.sample_laplace(torch.zeros(2), torch.ones(3))
    with pytest.raises(ValueError, match="argument 'factor' must have shape"):
        es.sample_gaussian(torch.zeros(2), torch.eye(3))
    with pytest.raises(TypeError, match="argument 'shape_k' must have a floating-point dtype"):
        es.sample_inverse_gamma(torch.tensor([2]), 1.0)


def test_bad_kl_input():
    with pytest.raises(ValueError, match="give both 'mu_p' and 'logvar_p'"):
        gaussian_kl(torch.zeros(2), torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match="argument 'logvar_q' contains NaN"):
        gaussian_kl(torch.zeros(2), torch.tensor([0.0, math.nan]))
    with pytest.raises(ValueError, match="do not broadcast"):
        gaussian_kl(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="0-d tensor"):
        gaussian_kl(torch.tensor(0.0), torch.tensor(0.0))
    with pytest.raises(ValueError, match="argument 'logvar_p' contains an infinite value"):
        gaussian_kl(torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.tensor([-math.inf]))
    with pytest.raises(TypeError, match="argument 'mu_q' must be a torch.Tensor"):
        gaussian_kl([0.0], torch.zeros(1))


def test_bad_square_example_input():
    with pytest.raises(ValueError, match="argument 'mu' must be a finite number"):
        square_example_variances(math.nan, 1.0)


# ------------------------------------------------------------------------------------------------
# The measure-valued estimator and the exact moments of all four estimators
# ------------------------------------------------------------------------------------------------
from softmaxbook.estimators import gaussian_gradient_moments, measure_valued_estimates  # noqa: E402


def step_at(c):
    # torch.sign has derivative 0 in autograd: the pathwise estimator of a step is 0
    return lambda z: (torch.sign(z - c) + 1) / 2


def test_moments_square_closed_forms():
    m = gaussian_gradient_moments(lambda z: z**2, 3.0, 1.0)
    assert m["gradient"] == pytest.approx(6.0, rel=1e-13)
    assert m["expectation"] == pytest.approx(10.0, rel=1e-13)
    for name, mean in m["mean"].items():
        assert mean == pytest.approx(6.0, rel=1e-12), name
    sq = square_example_variances(3.0, 1.0)
    sqb = square_example_variances(3.0, 1.0, baseline=10.0)
    assert m["var"]["score"] == pytest.approx(sq["var_score"], rel=1e-12)
    assert m["var"]["score + baseline"] == pytest.approx(sqb["var_score"], rel=1e-12)
    assert m["var"]["pathwise"] == pytest.approx(4.0, rel=1e-12)
    # coupled: c (f(mu + R) - f(mu - R)) = 4 mu R / sqrt(2 pi), Var R = 2 - pi / 2
    assert m["var"]["measure-valued"] == pytest.approx(
        16 * 9 * (2 - math.pi / 2) / (2 * math.pi), rel=1e-12)
    # independent: Var (mu + R)^2 + Var (mu - R)^2 over 2 pi, from the Rayleigh's moments
    # E R = sqrt(pi/2), E R^2 = 2, E R^3 = 3 sqrt(pi/2), E R^4 = 8
    er = [1, math.sqrt(math.pi / 2), 2, 3 * math.sqrt(math.pi / 2), 8]

    def var_of(s):  # Var (3 + s R)^2 = Var (6 s R + R^2)
        m1 = 6 * s * er[1] + er[2]
        m2 = 36 * er[2] + 12 * s * er[3] + er[4]
        return m2 - m1**2

    assert m["var"]["measure-valued, independent"] == pytest.approx(
        (var_of(1) + var_of(-1)) / (2 * math.pi), rel=1e-12)


@pytest.mark.parametrize("k", [0.5, 1.0, 5.0, 20.0])
@pytest.mark.parametrize("mu,sigma", [(0.3, 1.0), (-1.0, 0.5)])
def test_moments_sine_closed_forms(k, mu, sigma):
    m = gaussian_gradient_moments(lambda z: torch.sin(k * z), mu, sigma)
    damp = math.exp(-k * k * sigma**2 / 2)
    grad = k * math.cos(k * mu) * damp
    assert m["gradient"] == pytest.approx(grad, abs=1e-13)
    assert m["mean"]["pathwise"] == pytest.approx(grad, abs=1e-13)
    assert m["mean"]["measure-valued"] == pytest.approx(grad, abs=1e-13)
    d2 = math.exp(-2 * k * k * sigma**2)
    var_path = k * k / 2 * (1 + math.cos(2 * k * mu) * d2) - grad**2
    # E sin^2(kz) (z - mu)^2 / sigma^4, with E eps^2 e^{i t eps} = (s^2 - s^4 t^2) e^{-s^2 t^2/2}
    second = (sigma**2 - math.cos(2 * k * mu) * (sigma**2 - 4 * k * k * sigma**4) * d2) / (
        2 * sigma**4)
    assert m["var"]["pathwise"] == pytest.approx(var_path, rel=1e-11, abs=1e-13)
    assert m["var"]["score"] == pytest.approx(second - grad**2, rel=1e-11, abs=1e-13)
    # coupled: c * 2 cos(k mu) sin(k sigma R); E sin^2(a R) = (1 - E cos(2 a R)) / 2 with
    # E cos(b R) = 1 - b D(b / sqrt 2) sqrt 2 (D Dawson's integral)
    from scipy.special import dawsn

    b = 2 * k * sigma
    e_cos = 1 - b * math.sqrt(2) * dawsn(b / math.sqrt(2))
    c = 1 / (sigma * math.sqrt(2 * math.pi))
    var_mv = c**2 * 4 * math.cos(k * mu) ** 2 * (1 - e_cos) / 2 - grad**2
    assert m["var"]["measure-valued"] == pytest.approx(var_mv, rel=1e-10, abs=1e-13)


@pytest.mark.parametrize("c,mu,sigma", [(1.0, 0.0, 1.0), (-0.5, 0.7, 2.0), (0.2, 0.2, 1.0)])
def test_moments_step_closed_forms(c, mu, sigma):
    m = gaussian_gradient_moments(step_at(c), mu, sigma, breaks=[c])
    d = abs(c - mu) / sigma
    dens = stats.norm(mu, sigma).pdf(c)
    assert m["gradient"] == pytest.approx(dens, rel=1e-12)
    assert m["expectation"] == pytest.approx(stats.norm(mu, sigma).sf(c), rel=1e-12)
    # the pathwise estimator of a step is 0: biased
    assert m["mean"]["pathwise"] == 0.0 and m["var"]["pathwise"] == 0.0
    # measure-valued: exactly one of x+, x- can pass the step, with prob e^{-d^2/2}
    cc = 1 / (sigma * math.sqrt(2 * math.pi))
    assert m["mean"]["measure-valued"] == pytest.approx(dens, rel=1e-12)
    assert m["var"]["measure-valued"] == pytest.approx(
        cc**2 * math.exp(-d * d / 2) - dens**2, rel=1e-11)
    # score: E[1(z > c) (z - mu)^2] / sigma^4 = (sf(d) + d phi(d)) / sigma^2 (for c >= mu)
    t = (c - mu) / sigma
    second = (stats.norm.sf(t) + t * stats.norm.pdf(t)) / sigma**2
    assert m["var"]["score"] == pytest.approx(second - dens**2, rel=1e-11)


def test_moments_step_without_break_is_less_accurate():
    # the break matters: without a panel edge at the jump the quadrature is off (the test of
    # the break can fail)
    exact = stats.norm.pdf(1.0)
    # (61 panels on [-12, 12]: no edge falls on the jump at 1 by chance)
    rough = gaussian_gradient_moments(step_at(1.0), 0.0, 1.0, panels=61, order=8)
    assert abs(rough["gradient"] - exact) > 1e-6
    good = gaussian_gradient_moments(step_at(1.0), 0.0, 1.0, breaks=[1.0], panels=61, order=8)
    assert good["gradient"] == pytest.approx(exact, rel=1e-13)


def test_moments_baseline_argument():
    m = gaussian_gradient_moments(lambda z: z**2, 3.0, 1.0, baseline=12.0)
    assert m["baseline"] == 12.0
    assert m["var"]["score + baseline"] == pytest.approx(
        square_example_variances(3.0, 1.0, baseline=12.0)["var_score"], rel=1e-12)


@pytest.mark.parametrize("coupled", [True, False])
@pytest.mark.parametrize("f,mu,breaks", [
    (lambda z: z**2, 3.0, []),
    (lambda z: torch.sin(5 * z), 0.3, []),
    (step_at(1.0), 0.0, [1.0]),
])
def test_measure_valued_mean_and_variance_match_quadrature(f, mu, breaks, coupled):
    exact = gaussian_gradient_moments(f, mu, 1.0, breaks=breaks)
    name = "measure-valued" if coupled else "measure-valued, independent"
    n = 200_000
    est = measure_valued_estimates(f, torch.tensor(mu, **F64), torch.tensor(1.0, **F64), n,
                                   coupled=coupled, generator=gen(3))
    assert est.shape == (n,)
    var = exact["var"][name]
    # unbiased: the exact mean is the gradient, and the sample mean is within 5 s.e. (6e-7)
    assert exact["mean"][name] == pytest.approx(exact["gradient"], rel=1e-11, abs=1e-14)
    assert abs(est.mean().item() - exact["gradient"]) < 5 * math.sqrt(var / n)
    # the sample variance within 3 %: its relative s.e. is sqrt((kurtosis - 1) / n) < 0.6 %
    # for these f (kurtosis < 8), so 3 % is > 5 s.e.
    assert est.var().item() == pytest.approx(var, rel=0.03)


def test_measure_valued_test_rejects_a_wrong_constant():
    # the same mean test rejects c = 1 / sigma (the scale's constant) for the mean
    exact = gaussian_gradient_moments(lambda z: z**2, 3.0, 1.0)
    n = 200_000
    est = measure_valued_estimates(lambda z: z**2, torch.tensor(3.0, **F64),
                                   torch.tensor(1.0, **F64), n, generator=gen(3))
    wrong = est * math.sqrt(2 * math.pi)
    var = exact["var"]["measure-valued"] * 2 * math.pi
    assert abs(wrong.mean().item() - exact["gradient"]) > 5 * math.sqrt(var / n)


def test_measure_valued_scale():
    # d/dsigma E z^2 = 2 sigma; d/dsigma E sin(k z) = -k^2 sigma sin(k mu) e^{-k^2 sigma^2 / 2}
    n = 200_000
    mu, sigma = torch.tensor(0.5, **F64), torch.tensor(1.5, **F64)
    est = measure_valued_estimates(lambda z: z**2, mu, sigma, n, wrt="scale", generator=gen(4))
    assert abs(est.mean().item() - 3.0) < 5 * est.std().item() / math.sqrt(n)
    k = 0.8
    est = measure_valued_estimates(lambda z: torch.sin(k * z), mu, sigma, n, wrt="scale",
                                   generator=gen(5))
    exact = -k * k * 1.5 * math.sin(k * 0.5) * math.exp(-k * k * 1.5**2 / 2)
    assert abs(est.mean().item() - exact) < 5 * est.std().item() / math.sqrt(n)


def test_measure_valued_maxwell_part_follows_its_law():
    # x+ for the scale is mu + sigma M, M double-sided Maxwell: |M| is chi with 3 d.o.f.
    seen = {}

    def f(x):
        seen.setdefault("x", x)
        return x

    measure_valued_estimates(f, 0.0, 1.0, 20000, wrt="scale", generator=gen(6))
    x = seen["x"].double()
    assert stats.kstest(x.abs().numpy(), stats.chi(3).cdf).pvalue > P_CUT
    assert stats.binomtest(int((x > 0).sum()), len(x), 0.5).pvalue > P_CUT


def test_measure_valued_rayleigh_part_follows_its_law():
    seen = []
    measure_valued_estimates(lambda x: seen.append(x) or x, torch.tensor(1.0, **F64),
                             torch.tensor(2.0, **F64), 20000, coupled=False, generator=gen(7))
    r_plus = ((seen[0] - 1.0) / 2.0).numpy()
    r_minus = ((1.0 - seen[1]) / 2.0).numpy()
    assert stats.kstest(r_plus, stats.rayleigh().cdf).pvalue > P_CUT
    assert stats.kstest(r_minus, stats.rayleigh().cdf).pvalue > P_CUT
    # independent, not mirrored
    assert not np.allclose(r_plus, r_minus)


def test_measure_valued_shapes_broadcast_and_generator():
    mu = torch.tensor([0.0, 1.0, 2.0], **F64)
    sigma = torch.tensor([[1.0], [2.0]], **F64)
    est = measure_valued_estimates(torch.sin, mu, sigma, (5,), generator=gen(1))
    assert est.shape == (5, 2, 3) and est.dtype == torch.float64
    again = measure_valued_estimates(torch.sin, mu, sigma, (5,), generator=gen(1))
    assert torch.equal(est, again)
    one = measure_valued_estimates(torch.sin, 0.0, 1.0, (), generator=gen(1))
    assert one.shape == ()
    empty = measure_valued_estimates(torch.sin, mu, torch.tensor(1.0, **F64), (0,),
                                     generator=gen(1))
    assert empty.shape == (0, 3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_measure_valued_low_precision(dtype):
    mu, sigma = torch.tensor(0.0, dtype=dtype), torch.tensor(1.0, dtype=dtype)
    for wrt in ("mean", "scale"):
        est = measure_valued_estimates(lambda z: z * z + z, mu, sigma, 20000, wrt=wrt,
                                       generator=gen(2))
        assert est.dtype == dtype and torch.isfinite(est).all()
        # d/dmu E(z^2 + z) = 2 mu + 1 = 1; d/dsigma = 2 sigma = 2 (loose: rounding to dtype)
        target = 1.0 if wrt == "mean" else 2.0
        e = est.double()
        assert abs(e.mean().item() - target) < 6 * e.std().item() / math.sqrt(20000) + 0.02


def test_measure_valued_extreme_uniforms_stay_finite(monkeypatch):
    # torch.rand returning 0 would give R = inf; the open uniform keeps it finite (R <= 8.6)
    real_rand = torch.rand
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.zeros_like(real_rand(*a, **k)))
    est = measure_valued_estimates(lambda z: z, 0.0, 1.0, 4, generator=gen(0))
    assert torch.isfinite(est).all()


def test_bad_measure_valued_input():
    f = torch.sin
    with pytest.raises(TypeError, match="argument 'f'"):
        measure_valued_estimates(3.0, 0.0, 1.0, 4)
    with pytest.raises(ValueError, match="argument 'sigma'"):
        measure_valued_estimates(f, 0.0, 0.0, 4)
    with pytest.raises(ValueError, match="argument 'sigma'"):
        measure_valued_estimates(f, 0.0, -1.0, 4)
    with pytest.raises(ValueError, match="argument 'mu'"):
        measure_valued_estimates(f, float("nan"), 1.0, 4)
    with pytest.raises(ValueError, match="argument 'mu'"):
        measure_valued_estimates(f, torch.tensor([0.0, float("inf")]), 1.0, 4)
    with pytest.raises(TypeError, match="argument 'mu'"):
        measure_valued_estimates(f, torch.tensor([1, 2]), 1.0, 4)
    with pytest.raises(ValueError, match="argument 'wrt'"):
        measure_valued_estimates(f, 0.0, 1.0, 4, wrt="variance")
    with pytest.raises(TypeError, match="argument 'coupled'"):
        measure_valued_estimates(f, 0.0, 1.0, 4, coupled="yes")
    with pytest.raises(ValueError, match="argument 'coupled'"):
        measure_valued_estimates(f, 0.0, 1.0, 4, wrt="scale", coupled=False)
    with pytest.raises(ValueError, match="argument 'sample_shape'"):
        measure_valued_estimates(f, 0.0, 1.0, -1)
    with pytest.raises(TypeError, match="argument 'generator'"):
        measure_valued_estimates(f, 0.0, 1.0, 4, generator=0)
    with pytest.raises(ValueError, match="argument 'f' must map"):
        measure_valued_estimates(lambda z: z.sum(), 0.0, 1.0, 4)
    with pytest.raises(ValueError, match="do not broadcast"):
        measure_valued_estimates(f, torch.zeros(2), torch.ones(3), 4)


def test_bad_moments_input():
    f = torch.sin
    with pytest.raises(TypeError, match="argument 'f'"):
        gaussian_gradient_moments(None, 0.0, 1.0)
    with pytest.raises(ValueError, match="argument 'mu'"):
        gaussian_gradient_moments(f, float("inf"), 1.0)
    with pytest.raises(ValueError, match="argument 'mu'"):
        gaussian_gradient_moments(f, torch.tensor(0.0), 1.0)
    with pytest.raises(ValueError, match="argument 'sigma'"):
        gaussian_gradient_moments(f, 0.0, 0.0)
    with pytest.raises(ValueError, match="argument 'sigma'"):
        gaussian_gradient_moments(f, 0.0, float("nan"))
    with pytest.raises(TypeError, match="argument 'breaks'"):
        gaussian_gradient_moments(f, 0.0, 1.0, breaks=1.0)
    with pytest.raises(ValueError, match="argument 'breaks'"):
        gaussian_gradient_moments(f, 0.0, 1.0, breaks=[float("nan")])
    with pytest.raises(ValueError, match="argument 'baseline'"):
        gaussian_gradient_moments(f, 0.0, 1.0, baseline="mean")
    with pytest.raises(ValueError, match="argument 'width'"):
        gaussian_gradient_moments(f, 0.0, 1.0, width=-1.0)
    with pytest.raises(ValueError, match="argument 'panels'"):
        gaussian_gradient_moments(f, 0.0, 1.0, panels=0)
    with pytest.raises(ValueError, match="argument 'order'"):
        gaussian_gradient_moments(f, 0.0, 1.0, order=1)
    with pytest.raises(ValueError, match="argument 'f' must map"):
        gaussian_gradient_moments(lambda z: z.sum(), 0.0, 1.0)
    with pytest.raises(ValueError, match="non-finite value"):
        gaussian_gradient_moments(lambda z: 1 / (z - z[0]), 0.0, 1.0)
    with pytest.raises(ValueError, match="autograd derivative"):
        gaussian_gradient_moments(lambda z: torch.sqrt(z - z.detach().min()), 0.0, 1.0)


# ------------------------------------------------------------------------------------------------
# The surrogate loss
# ------------------------------------------------------------------------------------------------
from softmaxbook.estimators import score_function_surrogate  # noqa: E402


def test_surrogate_value_is_f_and_gradient_is_reinforce():
    th = torch.tensor([0.3, -0.2, 0.5], **F64, requires_grad=True)
    w = torch.tensor([1.0, 2.0, -1.0], **F64, requires_grad=True)  # f depends on w directly
    z = torch.tensor([0, 2, 2, 1])
    logp = torch.log_softmax(th, -1)[z]
    f = w[z] ** 2
    b = torch.tensor([0.5, -1.0, 2.0, 0.0], **F64)
    sur = score_function_surrogate(logp, f, b)
    assert torch.equal(sur.detach(), f.detach())
    g_th, g_w = torch.autograd.grad(sur.sum(), (th, w))
    score = torch.eye(3, **F64)[z] - torch.softmax(th, -1).detach()
    assert torch.allclose(g_th, ((f.detach() - b)[:, None] * score).sum(0), atol=1e-15)
    (g_w_direct,) = torch.autograd.grad((w[z] ** 2).sum(), w)
    assert torch.allclose(g_w, g_w_direct, atol=1e-15)


def test_surrogate_unbiased_by_enumeration():
    # weighting every class by its probability gives the exact gradient of E f
    th = LOGITS.clone().requires_grad_(True)
    z = torch.arange(4)
    sur = score_function_surrogate(torch.log_softmax(th, -1)[z], FVALS[z], baseline=1.7)
    (g,) = torch.autograd.grad((torch.softmax(LOGITS, -1) * sur).sum(), th)
    assert torch.allclose(g, exact_cat_grad(), atol=1e-12)


def test_surrogate_without_stopgrad_would_be_biased():
    # the enumeration test can fail: log_prob * f (no stop-gradient on f's weight, value
    # not f) differentiated with f depending on theta adds a wrong term
    th = LOGITS.clone().requires_grad_(True)
    z = torch.arange(4)
    f = torch.softmax(th, -1)[z]  # an f that depends on theta
    wrong = (torch.log_softmax(th, -1)[z] * f).sum()
    right = score_function_surrogate(torch.log_softmax(th, -1)[z], f)
    p = torch.softmax(LOGITS, -1)
    (g_right,) = torch.autograd.grad((p * right).sum(), th, retain_graph=True)
    th2 = LOGITS.clone().requires_grad_(True)
    (exact,) = torch.autograd.grad((torch.softmax(th2, -1) ** 2).sum(), th2)
    assert torch.allclose(g_right, exact, atol=1e-12)
    (g_wrong,) = torch.autograd.grad(wrong, th)
    assert not torch.allclose(g_wrong, exact, atol=1e-3)


def test_surrogate_baseline_gets_no_gradient():
    b = torch.zeros(3, **F64, requires_grad=True)
    th = torch.zeros(3, **F64, requires_grad=True)
    sur = score_function_surrogate(torch.log_softmax(th, -1), torch.ones(3, **F64), b)
    g = torch.autograd.grad(sur.sum(), b, allow_unused=True)[0]
    assert g is None or bool((g == 0).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_surrogate_dtypes_and_shapes(dtype):
    th = torch.zeros(2, 3, dtype=dtype, requires_grad=True)
    logp = torch.log_softmax(th, -1)
    f = torch.arange(6, dtype=dtype).reshape(2, 3)
    sur = score_function_surrogate(logp, f, torch.ones(2, 1, dtype=dtype))
    assert sur.shape == (2, 3) and sur.dtype == dtype and torch.equal(sur.detach(), f)
    (g,) = torch.autograd.grad(sur.sum(), th)
    assert torch.isfinite(g).all()
    one = score_function_surrogate(logp[0, :1], f[0, :1])
    assert one.shape == (1,)
    empty = score_function_surrogate(torch.zeros(0, dtype=dtype), torch.zeros(0, dtype=dtype))
    assert empty.shape == (0,)


def test_surrogate_near_certain_sample():
    # log_prob ~ 0 for a near-certain draw: its score is ~0, the value is still f
    th = torch.tensor([0.0, -40.0], **F64, requires_grad=True)
    sur = score_function_surrogate(torch.log_softmax(th, -1)[:1], torch.tensor([5.0], **F64))
    (g,) = torch.autograd.grad(sur.sum(), th)
    assert sur.item() == 5.0 and g.abs().max() < 1e-15


def test_bad_surrogate_input():
    lp, f = torch.zeros(3), torch.ones(3)
    with pytest.raises(TypeError, match="argument 'log_prob'"):
        score_function_surrogate([0.0, 0.0], f)
    with pytest.raises(TypeError, match="argument 'f'"):
        score_function_surrogate(lp, torch.ones(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="one shape"):
        score_function_surrogate(lp, torch.ones(4))
    with pytest.raises(ValueError, match="argument 'log_prob' contains NaN"):
        score_function_surrogate(torch.tensor([0.0, float("nan"), 0.0]), f)
    with pytest.raises(ValueError, match="argument 'log_prob' contains -inf"):
        score_function_surrogate(torch.tensor([0.0, -float("inf"), 0.0]), f)
    with pytest.raises(ValueError, match="argument 'log_prob' contains \\+inf"):
        score_function_surrogate(torch.tensor([0.0, float("inf"), 0.0]), f)
    with pytest.raises(ValueError, match="argument 'f'"):
        score_function_surrogate(lp, torch.tensor([1.0, float("inf"), 0.0]))
    with pytest.raises(ValueError, match="argument 'baseline' must be finite"):
        score_function_surrogate(lp, f, float("nan"))
    with pytest.raises(ValueError, match="argument 'baseline'"):
        score_function_surrogate(lp, f, torch.tensor([0.0, float("inf"), 1.0]))
    with pytest.raises(ValueError, match="argument 'baseline' of shape"):
        score_function_surrogate(lp, f, torch.zeros(2))
    with pytest.raises(TypeError, match="argument 'baseline'"):
        score_function_surrogate(lp, f, "mean")


def test_measure_valued_accepts_an_indicator_written_as_a_comparison():
    # R6 review of chapter 6: f = lambda z: z > 4 (bool) raised torch's "Subtraction ... with
    # two bool tensors is not supported", while gaussian_gradient_moments takes the same f.
    # Same draws as the float indicator; the mean is the density at the jump, phi(1).
    b = measure_valued_estimates(lambda z: z > 4, 3.0, 1.0, 20000, generator=gen(5))
    fl = measure_valued_estimates(lambda z: (z > 4).float(), 3.0, 1.0, 20000,
                                  generator=gen(5))
    assert b.dtype == torch.float32
    assert torch.equal(b, fl)
    phi1 = math.exp(-0.5) / math.sqrt(2 * math.pi)
    var = math.exp(-0.5) / (2 * math.pi) - phi1**2
    # 5.5 standard errors: false alarm 4e-8
    assert abs(b.double().mean().item() - phi1) < 5.5 * math.sqrt(var / 20000)


def test_moments_overflow_is_a_clear_error():
    # R6 review of chapter 6: sigma = 1e-300 raised Python's bare "OverflowError: (34,
    # 'Numerical result out of range')" (gradient**2 of a float); sigma = 1e-160 returned
    # infinite variances. Both now say what overflowed.
    for sigma in (1e-300, 1e-160):
        with pytest.raises(ValueError, match="overflow float64 \\(argument 'sigma'"):
            gaussian_gradient_moments(lambda z: z**2, 0.0, sigma)


def test_moments_refuse_an_f_that_outgrows_the_truncation():
    # R6 review of chapter 6: for f = exp(3 z), mu = 0, sigma = 2, the pathwise second
    # moment's integrand exp(12 t) phi(t) peaks at t = 12 = width: the quadrature returned
    # a pathwise variance of 8.36e31 against the exact 9 (e^72 - e^36) = 1.67e32, silently.
    with pytest.raises(ValueError, match="has not decayed"):
        gaussian_gradient_moments(lambda z: torch.exp(3 * z), 0.0, 2.0)
    # with room enough it is exact
    m = gaussian_gradient_moments(lambda z: torch.exp(3 * z), 0.0, 2.0, width=24.0,
                                  panels=1200)
    exact = 9 * (math.exp(72) - math.exp(36))
    assert abs(m["var"]["pathwise"] / exact - 1) < 1e-9
    # a polynomial f at the default width is not refused
    m = gaussian_gradient_moments(lambda z: z**8, 3.0, 1.0)
    assert m["gradient"] > 0


def test_surrogate_keeps_f_shape_and_dtype_whatever_the_baseline():
    # R6 review of chapter 6: a float64 baseline turned a float32 surrogate into float64, and
    # a baseline of shape (2, 4) against f of shape (4,) returned a (2, 4) result, both
    # silently, although the docstring promises f's shape and f's and log_prob's dtype.
    theta = torch.zeros(4, requires_grad=True)
    lp = torch.log_softmax(theta, -1)
    f = torch.arange(4.0)
    out = score_function_surrogate(lp, f, torch.ones(4, dtype=torch.float64))
    assert out.dtype == torch.float32 and torch.equal(out.detach(), f)
    with pytest.raises(ValueError, match="argument 'baseline' of shape \\(2, 4\\)"):
        score_function_surrogate(lp, f, torch.zeros(2, 4))
    # a baseline that broadcasts to f's shape is still taken
    assert score_function_surrogate(lp, f, torch.zeros(1)).shape == (4,)
