"""Tests of softmaxbook.nce: the alias sampler against the exact distribution, the three losses
against direct formulas (float64), their stability at extreme scores, their gradients, their
population optima, and one clear error per kind of bad input."""

from __future__ import annotations

import itertools
import math
import pathlib
import runpy

import numpy as np
import pytest
import torch
from scipy import stats

from softmaxbook.nce import (
    AliasSampler,
    ContextModel,
    nce_loss,
    nce_posterior,
    negative_sampling_loss,
    sample_noise,
    sampled_softmax_loss,
    unigram_noise,
)

f64 = dict(dtype=torch.float64)


def _probs(V=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(V, generator=g, **f64) ** 3
    p[[3, 17]] = 0.0  # words that must never be drawn
    return p / p.sum()


# ------------------------------------------------------------------------------------------------
# AliasSampler
# ------------------------------------------------------------------------------------------------
def _chi_square_pvalue(draws, p):
    counts = torch.bincount(draws.reshape(-1), minlength=p.numel()).to(torch.float64)
    support = p > 0
    assert counts[~support].sum() == 0
    return stats.chisquare(counts[support].numpy(),
                           (counts.sum() * p[support]).numpy()).pvalue


def test_alias_table_is_exact():
    p = _probs(200, seed=1)
    a = AliasSampler(p * 7.0)  # unnormalised weights are normalised
    assert torch.allclose(a.table_probs(), p, rtol=0, atol=1e-15)
    assert torch.all(a.prob[p == 0] == 0)
    assert a.prob.min() >= 0 and a.prob.max() <= 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alias_sampler_matches_distribution(seed):
    # Chi-square goodness of fit, 200 000 draws over 38 support words (37 dof). Threshold
    # p > 1e-4: a correct sampler fails with probability 1e-4 per seed; the seeds are fixed.
    p = _probs(40)
    a = AliasSampler(p)
    draws = a.sample((400, 500), generator=torch.Generator().manual_seed(seed))
    assert draws.shape == (400, 500) and draws.dtype == torch.int64
    assert _chi_square_pvalue(draws, p) > 1e-4


def test_chi_square_rejects_a_wrong_sampler():
    # The same test on a table whose most-used alias points at the next word (a plausible
    # off-by-one bug): it must fail, or the test above proves nothing.
    p = _probs(40)
    a = AliasSampler(p)
    i = int(torch.where(p > 0, a.prob, torch.ones_like(p)).argmin())
    a.alias[i] = (a.alias[i] + 1) % 40
    a.alias[i] += 1 if int(a.alias[i]) in (3, 17) else 0
    draws = a.sample((400, 500), generator=torch.Generator().manual_seed(0))
    assert _chi_square_pvalue(draws, p) < 1e-4


def test_chi_square_rejects_sampling_the_weights_to_a_power():
    p = _probs(40)
    wrong = AliasSampler(p ** 0.9)
    draws = wrong.sample((400, 500), generator=torch.Generator().manual_seed(0))
    assert _chi_square_pvalue(draws, p) < 1e-4


def test_alias_sampler_generator_and_edge_cases():
    a = AliasSampler(_probs(40))
    d1 = a.sample(1000, generator=torch.Generator().manual_seed(5))
    d2 = a.sample(1000, generator=torch.Generator().manual_seed(5))
    assert torch.equal(d1, d2) and d1.shape == (1000,)
    assert a.sample((0, 3)).shape == (0, 3)
    one = AliasSampler(torch.tensor([0.0, 2.0, 0.0]))
    assert torch.all(one.sample(500) == 1)
    assert "V=40" in repr(a)


def test_alias_sampler_large_vocabulary_table():
    p = torch.distributions.Dirichlet(torch.full((20000,), 0.3, **f64)).sample()
    a = AliasSampler(p)
    assert torch.allclose(a.table_probs(), p / p.sum(), rtol=1e-9, atol=1e-18)


@pytest.mark.parametrize("probs, exc, match", [
    ([0.5, 0.5], TypeError, "argument 'probs' must be a torch.Tensor"),
    (torch.tensor([1, 2]), TypeError, "floating-point dtype"),
    (torch.ones(2, 2), ValueError, "must be 1-D"),
    (torch.tensor([0.5, -0.1]), ValueError, "must be >= 0"),
    (torch.tensor([0.5, float("nan")]), ValueError, "contains NaN"),
    (torch.tensor([0.5, float("inf")]), ValueError, "infinite"),
    (torch.zeros(3), ValueError, "sums to 0"),
    (torch.zeros(0), ValueError, "is empty"),
])
def test_alias_sampler_bad_probs(probs, exc, match):
    with pytest.raises(exc, match="^AliasSampler: .*" + match):
        AliasSampler(probs)


@pytest.mark.parametrize("shape, gen, exc, match", [
    (2.5, None, TypeError, "argument 'shape'"),
    ((2, -1), None, ValueError, "argument 'shape' must be >= 0"),
    (3, 7, TypeError, "argument 'generator'"),
])
def test_alias_sample_bad_arguments(shape, gen, exc, match):
    with pytest.raises(exc, match="^AliasSampler.sample: " + match):
        AliasSampler(_probs()).sample(shape, generator=gen)


# ------------------------------------------------------------------------------------------------
# unigram_noise, sample_noise
# ------------------------------------------------------------------------------------------------
def test_unigram_noise_values():
    counts = torch.tensor([16, 1, 0, 81])
    q = unigram_noise(counts)
    w = torch.tensor([8.0, 1.0, 0.0, 27.0], **f64)
    assert torch.allclose(q, w / w.sum(), atol=1e-15) and q.dtype == torch.float64
    assert torch.allclose(unigram_noise(counts.double(), power=1.0),
                          counts.double() / counts.sum())
    assert torch.equal(unigram_noise(counts, power=0.0),
                       torch.tensor([1 / 3, 1 / 3, 0.0, 1 / 3], **f64))
    assert unigram_noise(torch.tensor([2.0, 3.0])).dtype == torch.float32


@pytest.mark.parametrize("counts, power, want", [
    # independent review, fourth edition: counts ** power overflowed and the division gave a
    # "distribution" of zeros or NaN, silently
    (torch.full((100,), 60000.0, dtype=torch.float16), 1.0, torch.full((100,), 0.01, **f64)),
    (torch.tensor([3e38, 3e38]), 1.0, torch.tensor([0.5, 0.5], **f64)),
    (torch.tensor([1.0, 2.0, 1e10]), 50.0, torch.tensor([0.0, 0.0, 1.0], **f64)),
    # a subnormal float16 count was clamped to the smallest normal (6e-5) before the power
    (torch.tensor([1e-7, 1.0], dtype=torch.float16), 0.75,
     torch.tensor([float(torch.tensor(1e-7, dtype=torch.float16)) ** 0.75, 1.0], **f64)),
])
def test_unigram_noise_no_overflow(counts, power, want):
    q = unigram_noise(counts, power)
    assert q.dtype == counts.dtype and bool(torch.isfinite(q).all())
    want = want / want.sum()
    half = counts.dtype == torch.float16  # rounding to float16, subnormals included
    assert torch.allclose(q.double(), want, rtol=2e-3 if half else 1e-6,
                          atol=1e-7 if half else 0.0)


@pytest.mark.parametrize("counts, power, exc, match", [
    (torch.tensor([1.0, -1.0]), 0.75, ValueError, "argument 'counts' must be >= 0"),
    (torch.tensor([0, 0]), 0.75, ValueError, "argument 'counts' sums to 0"),
    (torch.tensor([1.0, 2.0]), -0.5, ValueError, "argument 'power' must be >= 0"),
    (torch.tensor([1.0, 2.0]), "a", TypeError, "argument 'power'"),
    ([1, 2], 0.75, TypeError, "argument 'counts'"),
])
def test_unigram_noise_bad_arguments(counts, power, exc, match):
    with pytest.raises(exc, match="^unigram_noise: " + match):
        unigram_noise(counts, power)


def test_sample_noise_shared_and_per_example():
    a = AliasSampler(torch.ones(1000, **f64))
    g = torch.Generator().manual_seed(0)
    shared = sample_noise(a, 8, 5, shared=True, generator=g)
    assert shared.shape == (8, 5) and bool((shared == shared[:1]).all())
    own = sample_noise(a, 8, 5, generator=g)
    assert own.shape == (8, 5) and not bool((own == own[:1]).all())


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(sampler=torch.ones(3), batch_size=2, k=3), TypeError, "argument 'sampler'"),
    (dict(batch_size=0, k=3), ValueError, "argument 'batch_size' must be >= 1"),
    (dict(batch_size=2, k=0), ValueError, "argument 'k' must be >= 1"),
    (dict(batch_size=2, k=3, shared=1), TypeError, "argument 'shared' must be a bool"),
])
def test_sample_noise_bad_arguments(kwargs, exc, match):
    kwargs.setdefault("sampler", AliasSampler(torch.ones(4)))
    with pytest.raises(exc, match="^sample_noise: " + match):
        sample_noise(**kwargs)


# ------------------------------------------------------------------------------------------------
# Losses against direct formulas (float64, moderate scores)
# ------------------------------------------------------------------------------------------------
def _batch(B=6, k=4, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, generator=g, **f64) * scale
    n = torch.randn(B, k, generator=g, **f64) * scale
    lq = torch.log(torch.rand(B, generator=g, **f64) * 0.1 + 1e-3)
    nq = torch.log(torch.rand(B, k, generator=g, **f64) * 0.1 + 1e-3)
    return s, n, lq, nq


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_nce_loss_matches_direct_formula():
    s, n, lq, nq = _batch()
    k = n.shape[1]
    S, N, LQ, NQ = (t.numpy() for t in (s, n, lq, nq))
    for log_z in (0.0, 1.3):
        d = S - log_z - np.log(k * np.exp(LQ))
        e = N - log_z - np.log(k * np.exp(NQ))
        want = -np.log(_sig(d)) - np.log(1 - _sig(e)).sum(1)
        got = nce_loss(s, n, lq, nq, log_z=log_z, reduction="none")
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
        assert torch.isclose(nce_loss(s, n, lq, nq, log_z=log_z), torch.tensor(want.mean(), **f64))
        assert torch.isclose(nce_loss(s, n, lq, nq, log_z=log_z, reduction="sum"),
                             torch.tensor(want.sum(), **f64))
    # per-example log Z [B] and batch-shared noise log q [1, k]
    lz = torch.linspace(-1, 1, 6, **f64)
    got = nce_loss(s, n, lq, nq[:1], log_z=lz, reduction="none")
    want = -np.log(_sig(S - lz.numpy() - np.log(k) - LQ)) - np.log(
        1 - _sig(N - lz.numpy()[:, None] - np.log(k) - NQ[0][None])).sum(1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_nce_posterior_and_skipgram_refuse_what_their_siblings_refuse():
    # independent review, fourth edition: nce_posterior took log q > 0 (q > 1) that nce_loss
    # refuses, and skipgram_pairs took a bool tensor as word ids
    with pytest.raises(ValueError, match="^nce_posterior: argument 'log_q' holds "
                                         "log-probabilities"):
        nce_posterior(torch.tensor([1.0]), torch.tensor([0.5]), 2)
    from softmaxbook.nce import skipgram_pairs
    with pytest.raises(TypeError, match="^skipgram_pairs: argument 'ids'"):
        skipgram_pairs(torch.tensor([True, False, True]), 1)


def test_nce_posterior_is_u_over_u_plus_kq():
    s = torch.tensor([-2.0, 0.0, 3.0], **f64)
    q = torch.tensor([0.01, 0.2, 0.05], **f64)
    k = 7
    u = torch.exp(s)
    assert torch.allclose(nce_posterior(s, q.log(), k), u / (u + k * q), rtol=1e-14)


def test_negative_sampling_is_nce_with_kq_equal_one():
    s, n, _, _ = _batch()
    k = n.shape[1]
    want = (-np.log(_sig(s.numpy())) - np.log(_sig(-n.numpy())).sum(1)).mean()
    assert math.isclose(float(negative_sampling_loss(s, n)), want, rel_tol=1e-12)
    lq = torch.full((6,), -math.log(k), **f64)
    assert torch.isclose(negative_sampling_loss(s, n),
                         nce_loss(s, n, lq, lq[:, None].expand(6, k)), rtol=1e-14)


def test_sampled_softmax_matches_direct_formula():
    s, n, lq, nq = _batch()
    logits = torch.cat([(s - lq)[:, None], n - nq], 1).numpy()
    want = -(logits[:, 0] - np.log(np.exp(logits).sum(1)))
    got = sampled_softmax_loss(s, n, lq, nq, remove_accidental_hits=False, reduction="none")
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    raw = torch.cat([s[:, None], n], 1).numpy()
    want_raw = -(raw[:, 0] - np.log(np.exp(raw).sum(1)))
    got_raw = sampled_softmax_loss(s, n, lq, nq, subtract_log_q=False,
                                   remove_accidental_hits=False, reduction="none")
    np.testing.assert_allclose(got_raw.numpy(), want_raw, rtol=1e-12)


def test_sampled_softmax_removes_accidental_hits():
    s, n, lq, nq = _batch(B=3, k=4)
    data_ids = torch.tensor([5, 6, 7])
    noise_ids = torch.tensor([[5, 1, 2, 5], [0, 1, 2, 3], [9, 7, 8, 4]])
    got = sampled_softmax_loss(s, n, lq, nq, data_ids=data_ids, noise_ids=noise_ids,
                               remove_accidental_hits=True, reduction="none")
    for b, keep in enumerate([[1, 2], [0, 1, 2, 3], [0, 2, 3]]):
        ref = sampled_softmax_loss(s[b:b + 1], n[b:b + 1, keep], lq[b:b + 1], nq[b:b + 1, keep],
                                   remove_accidental_hits=False)
        assert torch.isclose(got[b], ref, rtol=1e-14)
    # without removal the hit counts as a negative and the loss is larger
    kept = sampled_softmax_loss(s, n, lq, nq, remove_accidental_hits=False, reduction="none")
    assert kept[0] > got[0] and kept[2] > got[2] and torch.isclose(kept[1], got[1])
    # shared noise ids [1, k]
    shared = sampled_softmax_loss(s, n, lq, nq[:1], data_ids=data_ids,
                                  noise_ids=torch.tensor([[5, 1, 7, 3]]),
                                  remove_accidental_hits=True, reduction="none")
    assert torch.isfinite(shared).all()
    # every noise word a hit: only the data word is left, loss 0
    allhit = sampled_softmax_loss(s, n, lq, nq, data_ids=torch.zeros(3, dtype=torch.long),
                                  noise_ids=torch.zeros(3, 4, dtype=torch.long),
                                  remove_accidental_hits=True, reduction="none")
    assert torch.equal(allhit, torch.zeros(3, **f64))


# ------------------------------------------------------------------------------------------------
# Stability at extreme scores
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_losses_stable_at_extreme_scores(dtype):
    big = torch.tensor([800.0, -800.0, 40.0, -40.0], dtype=dtype)
    lq = torch.full((4,), -math.log(3.0), dtype=dtype)  # k q = 1 with k = 3
    noise = torch.stack([big, -big, big * 0], 1).to(dtype).T.reshape(4, 3)
    nq = lq[:, None].expand(4, 3)
    for loss in (nce_loss(big, noise, lq, nq, reduction="none"),
                 negative_sampling_loss(big, noise, reduction="none"),
                 sampled_softmax_loss(big, noise, lq, nq, remove_accidental_hits=False,
                                      reduction="none")):
        assert torch.isfinite(loss).all()
    # -log σ(x) = x + log1p(e^{-x}) for x << 0 and e^{-x} for x >> 0: the exact tails
    s = torch.tensor([800.0, -800.0, 40.0], dtype=dtype)
    zero_noise = torch.full((3, 1), -800.0, dtype=dtype)
    got = negative_sampling_loss(s, zero_noise, reduction="none").double()
    want = torch.tensor([0.0, 800.0, math.exp(-40.0)], **f64)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-300)
    assert got[2] > 0  # not rounded to 0


def test_gradients_at_zero_are_exact():
    # word2vec starts its output vectors at 0, so every score is exactly 0 at the first step:
    # d/ds[-log σ(s)] = -1/2 and d/ds'[-log σ(-s')] = +1/2 there.
    s = torch.zeros(3, **f64, requires_grad=True)
    n = torch.zeros(3, 2, **f64, requires_grad=True)
    negative_sampling_loss(s, n, reduction="sum").backward()
    assert torch.equal(s.grad, torch.full((3,), -0.5, **f64))
    assert torch.equal(n.grad, torch.full((3, 2), 0.5, **f64))


# ------------------------------------------------------------------------------------------------
# Gradients against autograd's numerical check (float64)
# ------------------------------------------------------------------------------------------------
def test_gradcheck_all_losses():
    s, n, lq, nq = _batch(B=4, k=3, seed=3)
    s.requires_grad_(), n.requires_grad_()
    lz = torch.tensor(0.4, **f64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, z: nce_loss(a, b, lq, nq, log_z=z), (s, n, lz))
    assert torch.autograd.gradcheck(negative_sampling_loss, (s, n))
    ids, nids = torch.tensor([0, 1, 2, 3]), torch.tensor([[0, 5, 6], [4, 1, 1], [7, 8, 9],
                                                          [3, 3, 3]])
    assert torch.autograd.gradcheck(
        lambda a, b: sampled_softmax_loss(a, b, lq, nq, data_ids=ids, noise_ids=nids,
                                          remove_accidental_hits=True), (s, n))


def test_nce_gradient_matches_hand_derivation():
    # d/ds [-log σ(Δ)] = -(1 - σ(Δ)) and d/ds' [-log σ(-Δ')] = σ(Δ')
    s, n, lq, nq = _batch(B=5, k=3, seed=4)
    s.requires_grad_(), n.requires_grad_()
    nce_loss(s, n, lq, nq, reduction="sum").backward()
    k = 3
    assert torch.allclose(s.grad, -(1 - torch.sigmoid(s - lq - math.log(k))), rtol=1e-12)
    assert torch.allclose(n.grad, torch.sigmoid(n - nq - math.log(k)), rtol=1e-12)


# ------------------------------------------------------------------------------------------------
# Population optima (exact expectations, tabular scores)
# ------------------------------------------------------------------------------------------------
def _fit_table(objective, V):
    s = torch.zeros(V, **f64, requires_grad=True)
    opt = torch.optim.LBFGS([s], lr=1, max_iter=500, tolerance_grad=1e-12,
                            tolerance_change=1e-15, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        val = objective(s)
        val.backward()
        return val

    opt.step(closure)
    return s.detach()


def test_population_optima():
    V, k = 30, 5
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(V, generator=g, **f64) * 1.5, 0)
    q = unigram_noise(torch.rand(V, generator=g, **f64) + 0.05)
    lq = q.log()

    def nce_pop(s):  # E_p[-log σ(Δ)] + k E_q[-log σ(-Δ)]
        d = s - lq - math.log(k)
        return -(p * torch.nn.functional.logsigmoid(d)).sum() - k * (
            q * torch.nn.functional.logsigmoid(-d)).sum()

    def ns_pop(s):
        return -(p * torch.nn.functional.logsigmoid(s)).sum() - k * (
            q * torch.nn.functional.logsigmoid(-s)).sum()

    s_nce = _fit_table(nce_pop, V)
    assert torch.allclose(s_nce, p.log(), atol=1e-6)  # self-normalised density
    s_ns = _fit_table(ns_pop, V)
    assert torch.allclose(s_ns, p.log() - lq - math.log(k), atol=1e-6)
    assert abs(float(torch.logsumexp(s_ns, 0))) > 0.5  # not a density
    # the population objectives agree with the library's losses on a batch made of every word
    s = torch.randn(V, generator=g, **f64)
    ids = torch.arange(V)
    per_data = nce_loss(s, s[None].expand(V, V), lq, lq[None].expand(V, V), reduction="none")
    assert per_data.shape == (V,)
    # E over data words of the data term + k E_q of a noise term equals nce_pop
    data_term = -torch.nn.functional.logsigmoid(s - lq - math.log(k))
    noise_term = -torch.nn.functional.logsigmoid(-(s - lq - math.log(k)))
    assert torch.isclose((p * data_term).sum() + k * (q * noise_term).sum(), nce_pop(s))
    assert ids.numel() == V


# ------------------------------------------------------------------------------------------------
# Sampled softmax's population optimum, exactly (review, third edition: "only consistent as
# k -> inf" was wrong, and the old default remove_accidental_hits=True biased the optimum)
# ------------------------------------------------------------------------------------------------
_P_REVIEW = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05], **f64)


def _sampled_population_loss(s, p, q, k, **kwargs):
    """E over the data word (p) and k i.i.d. noise words (q) of sampled_softmax_loss: every
    ordered tuple of noise words, weighted by its probability -- exact, no sampling."""
    V = p.numel()
    tuples = torch.cartesian_prod(*[torch.arange(V)] * k).reshape(-1, k)
    T = tuples.shape[0]
    data = torch.arange(V).repeat_interleave(T)
    noise = tuples.repeat(V, 1)
    weight = p[data] * q[noise].prod(1)
    lq = q.log()
    loss = sampled_softmax_loss(s[data], s[noise], lq[data], lq[noise], data_ids=data,
                                noise_ids=noise, reduction="none", **kwargs)
    return (weight * loss).sum()


def _sampled_population_optimum(p, q, k, **kwargs):
    # Newton on the V - 1 free scores (the loss is invariant to a common shift)
    x = torch.zeros(p.numel() - 1, **f64)

    def f(x):
        return _sampled_population_loss(torch.cat([x.new_zeros(1), x]), p, q, k, **kwargs)

    for _ in range(12):
        g = torch.autograd.functional.jacobian(f, x)
        x = x - torch.linalg.solve(torch.autograd.functional.hessian(f, x), g)
    return torch.softmax(torch.cat([x.new_zeros(1), x]), 0), g


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("q", [torch.full((5,), 0.2, **f64),
                               torch.tensor([0.1, 0.1, 0.2, 0.25, 0.35], **f64)])
def test_sampled_softmax_default_is_consistent_at_every_k(k, q):
    # i.i.d. noise + log q correction = ranking NCE (Ma & Collins 2018): the exact population
    # gradient vanishes at s = log p_d (+ any constant) for every k, with the default arguments
    s = (_P_REVIEW.log() + 0.7).requires_grad_()
    loss = _sampled_population_loss(s, _P_REVIEW, q, k)
    (grad,) = torch.autograd.grad(loss, s)
    assert grad.abs().max() < 1e-15
    p_star, _ = _sampled_population_optimum(_P_REVIEW, q, k)
    assert (p_star - _P_REVIEW).abs().max() < 1e-13


def test_sampled_softmax_hit_removal_biases_the_optimum_more_as_k_grows():
    # masking accidental hits of i.i.d. draws moves the optimum off p_d (uniform q; exact):
    # KL(p_d || optimum) = 0 at k = 1 (a hit then leaves a constant loss), 4.95e-4 at k = 2,
    # 1.3e-3 at k = 3 (1.7e-2 at k = 20, in the chapter), towards the frequent words
    q = torch.full((5,), 0.2, **f64)
    kl = {}
    for k in (1, 2, 3):
        p_star, g = _sampled_population_optimum(_P_REVIEW, q, k, remove_accidental_hits=True)
        assert g.abs().max() < 1e-14  # a stationary point
        kl[k] = float((_P_REVIEW * (_P_REVIEW / p_star).log()).sum())
    assert abs(kl[1]) < 1e-14
    assert math.isclose(kl[2], 4.9497897943771e-4, rel_tol=1e-6)
    assert kl[3] > 2 * kl[2]
    assert p_star[0] > _P_REVIEW[0] and p_star[-1] < _P_REVIEW[-1]


def test_sampled_softmax_keeps_accidental_hits_by_default():
    s, n, lq, nq = _batch(B=3, k=4)
    data_ids = torch.tensor([5, 6, 7])
    noise_ids = torch.tensor([[5, 1, 2, 5], [0, 1, 2, 3], [9, 7, 8, 4]])
    default = sampled_softmax_loss(s, n, lq, nq, data_ids=data_ids, noise_ids=noise_ids,
                                   reduction="none")
    assert torch.equal(default, sampled_softmax_loss(s, n, lq, nq, reduction="none"))
    masked = sampled_softmax_loss(s, n, lq, nq, data_ids=data_ids, noise_ids=noise_ids,
                                  remove_accidental_hits=True, reduction="none")
    assert default[0] > masked[0]


# ------------------------------------------------------------------------------------------------
# Bad input to the losses: one test per kind
# ------------------------------------------------------------------------------------------------
def _good():
    s, n, lq, nq = _batch(B=3, k=2)
    return dict(data_scores=s, noise_scores=n, data_log_q=lq, noise_log_q=nq)


@pytest.mark.parametrize("loss", [nce_loss, sampled_softmax_loss])
@pytest.mark.parametrize("change, exc, match", [
    (dict(data_scores=torch.zeros(3, 1, **f64)), ValueError, "argument 'data_scores' must be 1-D"),
    (dict(noise_scores=torch.zeros(4, 2, **f64)), ValueError, "'noise_scores' must have shape"),
    (dict(noise_scores=torch.zeros(3, **f64)), ValueError, "'noise_scores' must have shape"),
    (dict(data_scores=torch.tensor([0.0, float("nan"), 1.0], **f64)), ValueError,
     "'data_scores' contains NaN"),
    (dict(noise_scores=torch.full((3, 2), float("inf"), **f64)), ValueError,
     "'noise_scores' contains an infinite"),
    (dict(data_scores=[1.0, 2.0, 3.0]), TypeError, "'data_scores' must be a torch.Tensor"),
    (dict(data_log_q=torch.tensor([-1.0, -math.inf, -1.0], **f64)), ValueError,
     r"'data_log_q' is -inf \(q = 0\)"),
    (dict(noise_log_q=torch.full((3, 2), 0.5, **f64)), ValueError,
     "'noise_log_q' holds log-probabilities"),
    (dict(noise_log_q=torch.zeros(3, 3, **f64) - 1), ValueError,
     r"'noise_log_q' must have shape \[3, 2\] or \[1, 2\]"),
    (dict(data_log_q=torch.zeros(2, **f64) - 1), ValueError, "'data_log_q' must have shape"),
    (dict(data_log_q=torch.tensor([-1.0, float("nan"), -1.0], **f64)), ValueError,
     "'data_log_q' contains NaN"),
])
def test_loss_bad_inputs(loss, change, exc, match):
    kwargs = _good()
    kwargs.update(change)
    extra = {} if loss is nce_loss else dict(remove_accidental_hits=False)
    with pytest.raises(exc, match=f"^{loss.__name__}: .*" + match):
        loss(**kwargs, **extra)


@pytest.mark.parametrize("loss", [nce_loss, sampled_softmax_loss])
def test_shared_noise_is_one_row_never_1d(loss):
    # review, third edition: with B == k a [B] noise_log_q was silently read as the shared [k]
    # form. Shared noise is now [1, k]; any 1-D noise_log_q is refused with a clear message.
    s, n, lq, nq = _batch(B=4, k=4)
    shared_row = nq[:1]
    got = loss(s, n, lq, shared_row, reduction="none")
    assert torch.equal(got, loss(s, n, lq, shared_row.expand(4, 4), reduction="none"))
    for one_d in (lq, nq[0]):  # the data words' log q by mistake, or the old [k] form
        with pytest.raises(ValueError, match=r"^" + loss.__name__ + r": argument 'noise_log_q' "
                           r"must have shape \[4, 4\] or \[1, 4\] .*got \[4\]; a 1-D tensor "
                           r"is ambiguous.*noise_log_q\[None\]"):
            loss(s, n, lq, one_d)
    if loss is sampled_softmax_loss:
        ids = torch.tensor([0, 1, 2, 3])
        with pytest.raises(ValueError, match=r"argument 'noise_ids' must have shape \[4, 4\] or "
                           r"\[1, 4\].*ambiguous"):
            loss(s, n, lq, nq, data_ids=ids, noise_ids=ids, remove_accidental_hits=True)
        row = loss(s, n, lq, nq, data_ids=ids, noise_ids=torch.tensor([[0, 0, 5, 3]]),
                   remove_accidental_hits=True, reduction="none")
        full = loss(s, n, lq, nq, data_ids=ids, noise_ids=torch.tensor([[0, 0, 5, 3]] * 4),
                    remove_accidental_hits=True, reduction="none")
        assert torch.equal(row, full)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_losses_in_half_precision_keep_their_dtype_and_value(dtype):
    # edge probe: half-precision inputs give a loss of their dtype, close to float64's; one row
    # (B = 1) and many rows agree row by row
    s, n, lq, nq = _batch(B=5, k=3, seed=8)
    tol = dict(rtol=2e-2, atol=2e-2)
    for loss in (nce_loss, sampled_softmax_loss):
        half = loss(s.to(dtype), n.to(dtype), lq.to(dtype), nq.to(dtype), reduction="none")
        assert half.dtype == dtype
        assert torch.allclose(half.double(), loss(s, n, lq, nq, reduction="none"), **tol)
        one = loss(s[:1], n[:1], lq[:1], nq[:1], reduction="none")
        assert torch.allclose(one, loss(s, n, lq, nq, reduction="none")[:1], rtol=1e-15)
    half = negative_sampling_loss(s.to(dtype), n.to(dtype), reduction="none")
    assert half.dtype == dtype
    assert torch.allclose(half.double(), negative_sampling_loss(s, n, reduction="none"), **tol)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(log_z=float("nan")), ValueError, "argument 'log_z' must be finite"),
    (dict(log_z="0"), TypeError, "argument 'log_z' must be a number or a tensor"),
    (dict(log_z=torch.zeros(2, **f64)), ValueError, r"argument 'log_z' .* shape \[B\] = \[3\]"),
    (dict(log_z=torch.tensor(float("inf"))), ValueError, "argument 'log_z' contains an infinite"),
    (dict(reduction="avg"), ValueError, "argument 'reduction' must be one of"),
])
def test_nce_loss_bad_options(kwargs, exc, match):
    with pytest.raises(exc, match="^nce_loss: " + match):
        nce_loss(**_good(), **kwargs)


def test_negative_sampling_bad_inputs():
    with pytest.raises(ValueError, match="^negative_sampling_loss: .*'noise_scores' must have"):
        negative_sampling_loss(torch.zeros(3), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="^negative_sampling_loss: .*'data_scores' contains NaN"):
        negative_sampling_loss(torch.tensor([float("nan")]), torch.zeros(1, 5))
    with pytest.raises(ValueError, match="^negative_sampling_loss: argument 'reduction'"):
        negative_sampling_loss(torch.zeros(3), torch.zeros(3, 5), reduction=None)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(remove_accidental_hits=True), ValueError,
     "remove_accidental_hits=True needs 'data_ids' and 'noise_ids'"),
    (dict(data_ids=torch.zeros(3), noise_ids=torch.zeros(3, 2, dtype=torch.long),
          remove_accidental_hits=True), TypeError,
     "argument 'data_ids' must be an integer tensor"),
    (dict(data_ids=torch.zeros(3, dtype=torch.long), noise_ids=torch.zeros(3, 3,
                                                                          dtype=torch.long),
          remove_accidental_hits=True),
     ValueError, r"argument 'noise_ids' must have shape \[3, 2\] or \[1, 2\]"),
    (dict(subtract_log_q=1, remove_accidental_hits=False), TypeError,
     "argument 'subtract_log_q' must be a bool"),
])
def test_sampled_softmax_bad_options(kwargs, exc, match):
    with pytest.raises(exc, match="^sampled_softmax_loss: " + match):
        sampled_softmax_loss(**_good(), **kwargs)


# ------------------------------------------------------------------------------------------------
# ContextModel
# ------------------------------------------------------------------------------------------------
def test_context_model_scores_agree():
    m = ContextModel(5, 12, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with torch.no_grad():
        m.word_vectors.normal_(generator=torch.Generator().manual_seed(1))
        m.bias.uniform_(-1, 1, generator=torch.Generator().manual_seed(2))
    c = torch.tensor([0, 3, 4])
    table = m.all_scores(c)
    w = torch.tensor([1, 11, 0])
    assert torch.allclose(m.score(c, w), table[torch.arange(3), w])
    nw = torch.tensor([[1, 2], [3, 4], [5, 6]])
    assert torch.allclose(m.score(c, nw), table.gather(1, nw))
    sw = torch.tensor([2, 7, 9, 10])
    assert torch.allclose(m.shared_scores(c, sw), table[:, sw])
    m2 = ContextModel(5, 12, 4, bias=False)
    assert m2.bias is None and m2.score(c, w).shape == (3,)
    assert torch.equal(m2.score(c, w), torch.zeros(3))  # word vectors start at 0


@pytest.mark.parametrize("call, exc, match", [
    (lambda m: m.score(torch.tensor([0, 9]), torch.tensor([0, 1])), ValueError,
     r"^ContextModel.score: argument 'contexts' must hold indices in \[0, 5\)"),
    (lambda m: m.score(torch.tensor([0.0]), torch.tensor([0])), TypeError,
     "^ContextModel.score: argument 'contexts' must be an integer tensor"),
    (lambda m: m.score(torch.tensor([0, 1]), torch.tensor([0, 1, 2])), ValueError,
     r"^ContextModel.score: argument 'words' must have shape \[B\] or \[B, k\]"),
    (lambda m: m.shared_scores(torch.tensor([0]), torch.tensor([[0]])), ValueError,
     "^ContextModel.shared_scores: .* must be 1-D"),
    (lambda m: ContextModel(0, 3, 2), ValueError, "^ContextModel: argument 'num_contexts'"),
    (lambda m: ContextModel(3, 3, 2, dtype=torch.int64), TypeError,
     "^ContextModel: argument 'dtype'"),
])
def test_context_model_bad_inputs(call, exc, match):
    m = ContextModel(5, 12, 4)
    with pytest.raises(exc, match=match):
        call(m)


# ------------------------------------------------------------------------------------------------
# The benchmark script runs
# ------------------------------------------------------------------------------------------------
def test_benchmark_quick_runs():
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_nce.py"
    rows = runpy.run_path(str(path), run_name="bench_nce")["main"](["--quick"])
    assert rows and all(r["ratio"] > 0 for r in rows)


# ------------------------------------------------------------------------------------------------
# Corpus helpers
# ------------------------------------------------------------------------------------------------
def test_corpus_helpers():
    from softmaxbook.nce import build_vocabulary, pydoc_corpus, skipgram_pairs, \
        subsample_keep_probs

    tokens = pydoc_corpus()
    assert len(tokens) > 30000 and tokens.count("the") > 1000
    words, counts, ids = build_vocabulary(["b", "a", "b", "c", "b", "a"], min_count=2)
    assert words == ["b", "a"] and counts.tolist() == [3, 2] and ids.tolist() == [0, 1, 0, 0, 1]
    c, x = skipgram_pairs(torch.tensor([5, 6, 7]), 1)
    assert sorted(zip(c.tolist(), x.tolist())) == [(5, 6), (6, 5), (6, 7), (7, 6)]
    assert skipgram_pairs(torch.arange(10), 3)[0].numel() == 2 * (9 + 8 + 7)
    keep = subsample_keep_probs(torch.tensor([1000, 10, 1]), t=1e-2)
    f = torch.tensor([1000, 10, 1], **f64) / 1011
    assert torch.allclose(keep, ((1e-2 / f).sqrt() + 1e-2 / f).clamp(max=1))
    assert keep[0] < 0.2 and keep[2] == 1
    with pytest.raises(ValueError, match="^build_vocabulary: no word occurs"):
        build_vocabulary(["a"], min_count=2)
    with pytest.raises(TypeError, match="^build_vocabulary: argument 'tokens'"):
        build_vocabulary("abc")
    with pytest.raises(ValueError, match="^skipgram_pairs: argument 'window' must be >= 1"):
        skipgram_pairs(torch.arange(3), 0)
    with pytest.raises(TypeError, match="^skipgram_pairs: argument 'ids'"):
        skipgram_pairs(torch.arange(3.0), 1)
    with pytest.raises(ValueError, match="^subsample_keep_probs: argument 't' must be > 0"):
        subsample_keep_probs(torch.tensor([1, 2]), t=0)


# ------------------------------------------------------------------------------------------------
# nce_asymptotic_covariance (issue 26: the best noise distribution)
# ------------------------------------------------------------------------------------------------
def _zipf(V=50, a=1.2):
    lw = torch.log(torch.arange(1, V + 1, dtype=torch.float64))
    jac = torch.stack([-lw, -torch.ones(V, dtype=torch.float64)], 1)
    p = torch.softmax(-a * lw, 0)
    fisher_a = float((p * lw**2).sum() - (p * lw).sum() ** 2)
    return lw, jac, p, fisher_a


@pytest.mark.parametrize("k", [1, 3, 10, 0.5])
def test_asymptotic_covariance_at_q_equal_p_is_one_plus_one_over_k(k):
    from softmaxbook.nce import nce_asymptotic_covariance
    lw, jac, p, fisher_a = _zipf()
    cov = nce_asymptotic_covariance(p.log(), p.log(), k, jac)
    assert float(cov[0, 0]) * fisher_a == pytest.approx(1 + 1 / k, rel=1e-10)
    assert torch.allclose(cov, cov.T, atol=1e-12)
    # positive semi-definite (at q = p one direction, a mix of a and log Z, has no variance)
    assert bool((torch.linalg.eigvalsh(cov) > -1e-10).all())


def test_asymptotic_covariance_falls_with_k_and_matches_simulated_fits():
    from softmaxbook.nce import nce_asymptotic_covariance
    V, a0 = 8, 1.0
    lw, jac, p, fisher_a = _zipf(V, a0)
    q = torch.softmax(-0.3 * lw, 0)
    ratios = [float(nce_asymptotic_covariance(p.log(), q.log(), k, jac)[0, 0]) * fisher_a
              for k in (1, 3, 10, 100, 1000)]
    assert all(x > y for x, y in zip(ratios, ratios[1:])) and ratios[-1] < 1.01
    # simulated: R data sets of n words and k n noise words, NCE fitted by Newton
    g = np.random.default_rng(2612)
    R, n, k = 3000, 4000, 2
    nd = torch.from_numpy(g.multinomial(n, p.numpy(), size=R)).double()
    nn = torch.from_numpy(g.multinomial(n * k, q.numpy(), size=R)).double()
    th = torch.tensor([1.0, float(torch.logsumexp(-lw, 0))], dtype=torch.float64).repeat(R, 1)
    log_kq = torch.log(k * q)
    for _ in range(40):
        d = -th[:, :1] * lw - th[:, 1:] - log_kq
        r = -nd * torch.sigmoid(-d) + nn * torch.sigmoid(d)
        h = (nd + nn) * torch.sigmoid(d) * torch.sigmoid(-d)
        hess = torch.einsum("rv,vi,vj->rij", h, jac, jac)
        th = th - torch.linalg.solve(hess, r @ jac)
    var_a = float(th[:, 0].var()) * n
    theory = float(nce_asymptotic_covariance(p.log(), q.log(), k, jac)[0, 0])
    # a variance from 3000 replicates has a relative sd ~ sqrt(2/3000) = 2.6 %; 15 % is ~6 sd
    # (plus the O(1/n) finite-sample bias, small at n = 4000)
    assert var_a == pytest.approx(theory, rel=0.15)


def test_asymptotic_covariance_bad_input():
    from softmaxbook.nce import nce_asymptotic_covariance
    lw, jac, p, _ = _zipf(5)
    lp = p.log()
    with pytest.raises(ValueError, match="argument 'log_p' must be 1-d"):
        nce_asymptotic_covariance(lp[None], lp, 1, jac)
    with pytest.raises(ValueError, match="argument 'log_q' must have the shape"):
        nce_asymptotic_covariance(lp, lp[:3], 1, jac)
    with pytest.raises(ValueError, match="argument 'jacobian' must have shape"):
        nce_asymptotic_covariance(lp, lp, 1, jac[:3])
    with pytest.raises(ValueError, match="argument 'log_q' must be finite"):
        nce_asymptotic_covariance(lp, torch.cat([lp[:4], lp.new_tensor([-math.inf])]), 1, jac)
    with pytest.raises(ValueError, match="argument 'log_q' must hold log-probabilities"):
        nce_asymptotic_covariance(lp, lp - 1, 1, jac)
    with pytest.raises(ValueError, match="argument 'k'"):
        nce_asymptotic_covariance(lp, lp, 0, jac)
    with pytest.raises(ValueError, match="argument 'log_p'"):
        nce_asymptotic_covariance(torch.full((5,), math.nan), lp, 1, jac)
    with pytest.raises(TypeError, match="argument 'jacobian'"):
        nce_asymptotic_covariance(lp, lp, 1, [[1.0]])


# ------------------------------------------------------------------------------------------------
# infonce_exact (issue 26: InfoNCE and its log(k + 1) ceiling)
# ------------------------------------------------------------------------------------------------
def _symmetric_joint(m, eps):
    P = torch.full((m, m), eps / m, dtype=torch.float64) + (1 - eps) * torch.eye(m, **f64)
    return P / m


def _mutual_information(P):
    px, py = P.sum(1), P.sum(0)
    nz = P > 0
    return float((P[nz] * (P[nz].log() - torch.outer(px, py)[nz].log())).sum())


def _brute_infonce(P, k, f):
    py = P.sum(0)
    m, n = P.shape
    total = 0.0
    for x in range(m):
        for y0 in range(n):
            if P[x, y0] == 0:
                continue
            for negs in itertools.product(range(n), repeat=k):
                w = float(P[x, y0]) * math.prod(float(py[y]) for y in negs)
                e0 = math.exp(float(f[x, y0]))
                s = e0 + sum(math.exp(float(f[x, y])) for y in negs)
                total += w * math.log((k + 1) * e0 / s)
    return total


@pytest.mark.parametrize("k", [1, 2, 3])
def test_infonce_exact_equals_brute_force(k):
    from softmaxbook.nce import infonce_exact
    g = torch.Generator().manual_seed(k)
    P = torch.rand(3, 4, generator=g, **f64) ** 2
    P /= P.sum()
    crit = torch.randn(3, 4, generator=g, **f64)
    assert float(infonce_exact(P, k, crit)) == pytest.approx(_brute_infonce(P, k, crit),
                                                             abs=1e-12)
    px, py = P.sum(1), P.sum(0)
    best = P.log() - px.log()[:, None] - py.log()[None, :]
    assert float(infonce_exact(P, k)) == pytest.approx(_brute_infonce(P, k, best), abs=1e-12)
    # a joint with zeros: the default critic is -inf there
    Z = P.clone()
    Z[0, 1] = Z[2, 3] = 0.0
    Z /= Z.sum()
    pz, qz = Z.sum(1), Z.sum(0)
    fz = Z.log() - pz.log()[:, None] - qz.log()[None, :]
    assert float(infonce_exact(Z, k)) == pytest.approx(_brute_infonce(Z, k, fz), abs=1e-12)


def test_infonce_bounds_ceiling_and_limits():
    from softmaxbook.nce import infonce_exact
    # independent: exactly 0
    ind = torch.outer(torch.tensor([0.2, 0.8], **f64), torch.tensor([0.5, 0.3, 0.2], **f64))
    assert abs(float(infonce_exact(ind, 5))) < 1e-14
    for m, eps in [(4, 0.05), (16, 0.02), (16, 0.6), (64, 0.02)]:
        P = _symmetric_joint(m, eps)
        mi = _mutual_information(P)
        vals = [float(infonce_exact(P, k)) for k in (1, 3, 7, 31, 255)]
        for k, v in zip((1, 3, 7, 31, 255), vals):
            assert v <= min(mi, math.log(k + 1)) + 1e-12, (m, eps, k)
        assert all(a < b for a, b in zip(vals, vals[1:]))
    # the ceiling binds: high information, few negatives
    P = _symmetric_joint(64, 0.02)
    assert _mutual_information(P) > 3.9 and float(infonce_exact(P, 3)) > 0.9 * math.log(4)
    # the limit: low information, many negatives
    P = _symmetric_joint(64, 0.8)
    assert float(infonce_exact(P, 1023)) > 0.99 * _mutual_information(P)
    # adding a function of x to the critic changes nothing
    g = torch.Generator().manual_seed(9)
    P = torch.rand(3, 3, generator=g, **f64)
    P /= P.sum()
    crit = torch.randn(3, 3, generator=g, **f64)
    shift = torch.tensor([[5.0], [-40.0], [300.0]], **f64)
    assert float(infonce_exact(P, 4, crit + shift)) == pytest.approx(
        float(infonce_exact(P, 4, crit)), abs=1e-12)


def test_infonce_bad_input():
    from softmaxbook.nce import infonce_exact
    P = _symmetric_joint(3, 0.5)
    with pytest.raises(ValueError, match="argument 'joint' must have shape"):
        infonce_exact(P[:, :1], 1)
    with pytest.raises(ValueError, match="argument 'joint' must sum to 1"):
        infonce_exact(2 * P, 1)
    with pytest.raises(ValueError, match="argument 'joint' must be non-negative"):
        infonce_exact(P - 0.2, 1)
    with pytest.raises(ValueError, match="positive mass"):
        infonce_exact(torch.tensor([[0.5, 0.0], [0.5, 0.0]], **f64), 1)
    with pytest.raises(ValueError, match="argument 'k'"):
        infonce_exact(P, 0)
    with pytest.raises(ValueError, match="argument 'critic' must have the shape"):
        infonce_exact(P, 1, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="argument 'critic'"):
        infonce_exact(P, 1, torch.full((3, 3), math.inf))
    with pytest.raises(ValueError, match="too many"):
        infonce_exact(P, 3000, torch.randn(3, 3, generator=torch.Generator().manual_seed(0)))


def _brute_infonce_log(P, k, f):
    # the brute force kept in logs (exp(f) underflows past ~745 nats)
    py = P.sum(0)
    m, n = P.shape
    total = 0.0
    for x in range(m):
        for y0 in range(n):
            if P[x, y0] == 0:
                continue
            for negs in itertools.product(range(n), repeat=k):
                w = float(P[x, y0]) * math.prod(float(py[y]) for y in negs)
                lse = torch.logsumexp(f[x, [y0, *negs]], 0)
                total += w * (math.log(k + 1) + float(f[x, y0]) - float(lse))
    return total


@pytest.mark.parametrize("spread", [700.0, 760.0, 800.0, 1e4])
def test_infonce_exact_critic_spread_past_exp_underflow(spread):
    # cold review R5: exp(f - max f) underflowed to 0 past ~745 nats and 0 / 0 gave NaN
    from softmaxbook.nce import infonce_exact
    P = torch.tensor([[0.3, 0.2, 0.05], [0.1, 0.3, 0.05]], **f64)
    f = torch.tensor([[0.0, -spread, -spread / 2], [-spread, 0.0, 3.0]], **f64)
    for k in (1, 2, 3):
        got = float(infonce_exact(P, k, f))
        assert math.isfinite(got)
        assert got == pytest.approx(_brute_infonce_log(P, k, f), rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_infonce_exact_low_precision_joint(dtype):
    # cold review R5: a joint normalised in float32 was refused ("must sum to 1, sums to 1")
    from softmaxbook.nce import infonce_exact
    J = torch.rand(5, 6, generator=torch.Generator().manual_seed(4)).to(dtype)
    J = J / J.sum()
    ref = J.double() / J.double().sum()
    assert float(infonce_exact(J, 3)) == pytest.approx(float(infonce_exact(ref, 3)), abs=1e-12)
    with pytest.raises(ValueError, match="argument 'joint' must sum to 1"):
        infonce_exact(J * 1.5, 3)


@pytest.mark.parametrize("k", [0.5, 1, 4, 25])
def test_asymptotic_covariance_full_matrix_is_gutmann_hyvarinen_theorem(k):
    # cold review R5: the tests compared only the exponent's entry [0, 0], which does not see
    # the mean term of M (H^-1 m = -e_logZ: it moves only the normaliser's entries); dropping
    # it passed every test. Gutmann & Hyvarinen (2012), Theorem 3: with g = d log p_theta,
    # P_nu = k q / (p + k q), I = E_p[P_nu g g^T], m = E_p[P_nu g],
    # Sigma = I^-1 - (1 + 1/k) I^-1 m m^T I^-1.
    from softmaxbook.nce import nce_asymptotic_covariance
    g = torch.Generator().manual_seed(26)
    V = 12
    feat = torch.randn(V, 2, generator=g, **f64)
    lp = torch.log_softmax(feat @ torch.tensor([0.7, -0.4], **f64), 0)
    jac = torch.cat([feat, -torch.ones(V, 1, **f64)], 1)
    lq = torch.log_softmax(torch.randn(V, generator=g, **f64), 0)
    p, q = lp.exp(), lq.exp()
    w = p * k * q / (p + k * q)
    info = (jac.T * w) @ jac
    m = (jac * w[:, None]).sum(0)
    Ii = torch.linalg.inv(info)
    sigma = Ii - (1 + 1 / k) * Ii @ torch.outer(m, m) @ Ii
    got = nce_asymptotic_covariance(lp, lq, k, jac)
    assert torch.allclose(got, sigma, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_asymptotic_covariance_low_precision_log_probs(dtype):
    # cold review R5: a log_softmax in float16/bfloat16 was refused as not log-probabilities
    from softmaxbook.nce import nce_asymptotic_covariance
    lw, jac, p, _ = _zipf(40)
    q = torch.softmax(-0.5 * lw, 0)
    lp = torch.log_softmax((-1.2 * lw).to(dtype), 0)
    lq = torch.log_softmax((-0.5 * lw).to(dtype), 0)
    got = nce_asymptotic_covariance(lp, lq, 3, jac.to(dtype))
    ref = nce_asymptotic_covariance(p.log(), q.log(), 3, jac)
    assert got.dtype == torch.float64
    assert torch.allclose(got, ref, rtol=0.1)
    with pytest.raises(ValueError, match="argument 'log_q' must hold log-probabilities"):
        nce_asymptotic_covariance(lp, lq - 0.5, 3, jac.to(dtype))


def test_asymptotic_covariance_unidentifiable_parameters():
    from softmaxbook.nce import nce_asymptotic_covariance
    lw, jac, p, _ = _zipf(6)
    with pytest.raises(ValueError, match="argument 'jacobian' must have linearly independent"):
        nce_asymptotic_covariance(p.log(), p.log(), 2, torch.cat([jac, 2 * jac[:, :1]], 1))


def test_asymptotic_covariance_theta_block_at_q_equal_p():
    # the docstring's claim, with two parameters besides the normaliser
    from softmaxbook.nce import nce_asymptotic_covariance
    g = torch.Generator().manual_seed(5)
    feat = torch.randn(9, 2, generator=g, **f64)
    lp = torch.log_softmax(feat @ torch.tensor([0.5, 1.1], **f64), 0)
    jac = torch.cat([feat, -torch.ones(9, 1, **f64)], 1)
    fisher = torch.cov(feat.T, aweights=lp.exp(), correction=0)
    for k in (1, 3):
        cov = nce_asymptotic_covariance(lp, lp, k, jac)
        assert torch.allclose(cov[:2, :2], (1 + 1 / k) * torch.linalg.inv(fisher), rtol=1e-9)
        assert abs(float(torch.linalg.det(cov))) < 1e-10 * float(cov.diagonal().prod())


def test_infonce_below_mutual_information_for_any_critic():
    # I_NCE <= I(X; Y) holds for every critic, not only the best one
    from softmaxbook.nce import infonce_exact
    g = torch.Generator().manual_seed(11)
    for _ in range(10):
        P = torch.rand(3, 4, generator=g, **f64) ** 3
        P /= P.sum()
        mi = _mutual_information(P)
        for k in (1, 2, 4):
            crit = 3 * torch.randn(3, 4, generator=g, **f64)
            assert float(infonce_exact(P, k, crit)) <= min(mi, math.log(k + 1)) + 1e-12
            assert float(infonce_exact(P, k, crit)) <= float(infonce_exact(P, k)) + 1e-12
