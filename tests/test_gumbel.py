"""Tests of softmaxbook.gumbel.

Statistical tests use fixed seeds, so they are deterministic; the thresholds are stated beside
each one as the false-alarm rate they would have under fresh randomness (p-value cut 1e-3 means a
correct sampler fails with probability 0.1 %). Each statistical test has a twin showing that the
same test rejects a deliberately wrong sampler, so the test can fail.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import softmaxbook.gumbel as gm
from softmaxbook.gumbel import (
    gumbel_max,
    gumbel_softmax,
    gumbel_topk,
    gumbel_with_max,
    log1mexp,
    plackett_luce_log_prob,
    sample_gumbel,
    truncated_gumbel,
)

P_CUT = 1e-3  # reject when p < 1e-3: a correct sampler fails with probability 0.1 % per test
EULER = 0.5772156649015329


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def gumbel_cdf(g, loc=0.0):
    return np.exp(-np.exp(-(g - loc)))


def truncated_cdf(g, loc, upper):
    # F_{loc,T}(g) = exp(exp(loc - T) - exp(loc - min(g, T)))
    g = np.minimum(g, upper)
    return np.exp(np.exp(loc - upper) - np.exp(loc - g))


def ks_p(samples, cdf):
    return stats.kstest(np.asarray(samples, dtype=np.float64), cdf).pvalue


# ------------------------------------------------------------------------------------------------
# sample_gumbel
# ------------------------------------------------------------------------------------------------
def test_sample_gumbel_matches_gumbel_cdf():
    x = sample_gumbel(20000, loc=1.5, generator=gen(1), dtype=torch.float64)
    assert ks_p(x, lambda g: gumbel_cdf(g, 1.5)) > P_CUT


def test_sample_gumbel_ks_rejects_wrong_location():
    x = sample_gumbel(20000, loc=1.5, generator=gen(1), dtype=torch.float64)
    # A sampler off by 0.05 in location: the same KS test at the same sample size must reject it.
    assert ks_p(x + 0.05, lambda g: gumbel_cdf(g, 1.5)) < P_CUT


def test_sample_gumbel_moments():
    x = sample_gumbel(200000, generator=gen(2), dtype=torch.float64)
    # mean gamma, variance pi^2/6; standard errors are 0.0029 and ~0.0056: 5 sigma bounds
    assert abs(x.mean().item() - EULER) < 0.015
    assert abs(x.var().item() - math.pi**2 / 6) < 0.03


def test_sample_gumbel_is_finite_when_uniforms_hit_0_or_1(monkeypatch):
    # torch.rand can return exactly 0 (float32: probability 2^-24 per draw); force it.
    for value in (0.0, 1.0):
        for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            monkeypatch.setattr(
                gm.torch, "rand", lambda *a, value=value, **kw: torch.full(a[0], value, dtype=kw["dtype"])
            )
            g = sample_gumbel((5,), dtype=dtype)
            assert torch.isfinite(g).all(), (value, dtype)
            assert g.dtype == dtype
    monkeypatch.undo()


def test_sample_gumbel_bounds_float32():
    lo = gm._standard_gumbel((1,), torch.float32, "cpu", None)  # just exercises the path
    assert torch.isfinite(lo).all()
    info = torch.finfo(torch.float32)
    assert -math.log(-math.log(info.tiny)) > -4.5
    assert -math.log(-math.log(1 - info.eps / 2)) < 16.7


def test_sample_gumbel_float32_range_is_as_documented(monkeypatch):
    # the docstring's range: -4.47 (U = 0, clamped to tiny), then [-2.81, 16.64] for torch.rand's
    # float32 values 2^-24 ... 1 - 2^-24 (it was stated loosely as [-4.5, 16.7])
    edges = torch.tensor([0.0, 2.0**-24, 1 - 2.0**-24], dtype=torch.float32)
    monkeypatch.setattr(gm.torch, "rand", lambda *a, **kw: edges.clone())
    g = gm._standard_gumbel((3,), torch.float32, "cpu", None).tolist()
    monkeypatch.undo()
    assert g == pytest.approx([-4.4698, -2.8115, 16.6355], abs=1e-4)
    draws = sample_gumbel(10**6, generator=gen(7), dtype=torch.float32)
    # -4.47 turns up where U = 0 (6 % of such batches), anything else lies in [-2.81, 16.64]
    low = draws < -2.8116
    assert (draws[low] == g[0]).all() and draws.max().item() <= 16.6356


def test_sample_gumbel_shape_dtype_device_and_loc_tensor():
    loc = torch.tensor([0.0, -math.inf, 3.0], dtype=torch.float64)
    g = sample_gumbel((4, 3), loc=loc, generator=gen(0))
    assert g.shape == (4, 3) and g.dtype == torch.float64 and g.device == loc.device
    assert torch.isneginf(g[:, 1]).all() and torch.isfinite(g[:, [0, 2]]).all()
    assert sample_gumbel(2).dtype == torch.get_default_dtype()
    assert sample_gumbel((2, 0)).shape == (2, 0)
    for dt in (torch.float16, torch.bfloat16):
        assert sample_gumbel(3, dtype=dt).dtype == dt


def test_sample_gumbel_generator_reproducible():
    a = sample_gumbel((3, 5), generator=gen(7))
    b = sample_gumbel((3, 5), generator=gen(7))
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(shape=(2, -1)), ValueError, "argument 'shape'"),
        (dict(shape="3"), TypeError, "argument 'shape'"),
        (dict(shape=3, loc=float("nan")), ValueError, "argument 'loc'"),
        (dict(shape=3, loc=torch.tensor([0.0, float("nan"), 0.0])), ValueError, "argument 'loc' contains NaN"),
        (dict(shape=3, loc=torch.tensor([0.0, float("inf"), 0.0])), ValueError, "argument 'loc' contains \\+inf"),
        (dict(shape=3, loc=torch.zeros(4)), ValueError, "argument 'loc' of shape"),
        (dict(shape=3, loc=torch.zeros(3, dtype=torch.long)), TypeError, "argument 'loc'"),
        (dict(shape=3, loc="0"), TypeError, "argument 'loc'"),
        (dict(shape=3, dtype=torch.long), TypeError, "argument 'dtype'"),
        (dict(shape=3, generator=1), TypeError, "argument 'generator'"),
    ],
)
def test_sample_gumbel_bad_arguments(kwargs, exc, match):
    shape = kwargs.pop("shape")
    with pytest.raises(exc, match="^sample_gumbel: .*" + match):
        sample_gumbel(shape, **kwargs)


# ------------------------------------------------------------------------------------------------
# log1mexp
# ------------------------------------------------------------------------------------------------
def test_log1mexp_accurate_everywhere():
    x = torch.tensor([-1e-20, -1e-8, -0.1, -math.log(2), -1.0, -30.0, -800.0], dtype=torch.float64)
    exact = [math.log(-math.expm1(v)) if v > -1 else math.log1p(-math.exp(v)) for v in x.tolist()]
    np.testing.assert_allclose(log1mexp(x).numpy(), exact, rtol=1e-14)
    # the naive form loses everything near 0
    assert not torch.isfinite(torch.log(1 - torch.exp(x[:1]))).all()
    assert log1mexp(torch.tensor([0.0])).item() == -math.inf
    assert log1mexp(torch.tensor([-math.inf])).item() == 0.0


def test_log1mexp_gradcheck():
    x = torch.tensor([-1e-3, -0.5, -0.7, -3.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(log1mexp, (x,))


def test_log1mexp_bad_arguments():
    with pytest.raises(ValueError, match="^log1mexp: argument 'x' must be <= 0"):
        log1mexp(torch.tensor([0.1]))
    with pytest.raises(ValueError, match="^log1mexp: argument 'x' contains NaN"):
        log1mexp(torch.tensor([float("nan")]))


# ------------------------------------------------------------------------------------------------
# truncated_gumbel
# ------------------------------------------------------------------------------------------------
def test_truncated_gumbel_matches_truncated_cdf():
    loc, upper = 0.7, 0.2
    x = truncated_gumbel(torch.full((20000,), loc, dtype=torch.float64), torch.tensor(upper, dtype=torch.float64),
                         generator=gen(3))
    assert (x <= upper).all()
    assert ks_p(x, lambda g: truncated_cdf(g, loc, upper)) > P_CUT


def test_truncated_gumbel_ks_rejects_clamping():
    # A plausible wrong sampler: min(G, T) puts an atom at T; the same KS test rejects it.
    loc, upper = 0.7, 0.2
    g = sample_gumbel(20000, loc=loc, generator=gen(3), dtype=torch.float64).clamp(max=upper)
    assert ks_p(g, lambda v: truncated_cdf(v, loc, upper)) < P_CUT


def test_truncated_gumbel_equals_inverse_cdf_formula():
    # Same uniforms through the textbook inverse CDF phi - log(exp(phi - T) - log u).
    loc = torch.tensor([-2.0, 0.0, 3.0, 10.0], dtype=torch.float64)
    upper = torch.tensor([0.5, 0.0, -1.0, 12.0], dtype=torch.float64)
    x = truncated_gumbel(loc, upper, generator=gen(4))
    u = torch.rand(4, dtype=torch.float64, generator=gen(4))
    naive = loc - torch.log(torch.exp(loc - upper) - torch.log(u))
    torch.testing.assert_close(x, naive, rtol=1e-12, atol=1e-12)


def test_truncated_gumbel_extremes_stay_finite_and_below_upper():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        loc = torch.tensor([0.0, 0.0, 1e4, -1e4, -math.inf], dtype=dtype)
        upper = torch.tensor([-1e3, 1e3, 0.0, 0.0, 0.0], dtype=dtype)
        x = truncated_gumbel(loc, upper, generator=gen(5))
        assert torch.isfinite(x[:4]).all() and x[4] == -math.inf, dtype
        assert (x <= upper).all(), dtype
        # loc far above the truncation: all the mass sits just below T
        torch.testing.assert_close(x[[0, 2]], upper[[0, 2]], rtol=0, atol=1e-6)
    # the naive form overflows to -inf there
    naive = 0.0 - torch.log(torch.exp(torch.tensor(0.0 + 1e3)) + 1.0)
    assert naive == -math.inf


def test_truncated_gumbel_infinite_upper_is_plain_gumbel():
    loc = torch.zeros(5, dtype=torch.float64)
    x = truncated_gumbel(loc, torch.tensor(math.inf, dtype=torch.float64), generator=gen(6))
    torch.testing.assert_close(x, sample_gumbel(5, generator=gen(6), dtype=torch.float64))


def test_truncated_gumbel_broadcasts_and_promotes():
    x = truncated_gumbel(torch.zeros(3, 1), torch.zeros(4, dtype=torch.float64), generator=gen(0))
    assert x.shape == (3, 4) and x.dtype == torch.float64


@pytest.mark.parametrize(
    "loc, upper, exc, match",
    [
        (torch.tensor([float("nan")]), torch.tensor(0.0), ValueError, "argument 'loc' contains NaN"),
        (torch.tensor([float("inf")]), torch.tensor(0.0), ValueError, "argument 'loc' contains \\+inf"),
        (torch.tensor([0.0]), torch.tensor(float("nan")), ValueError, "argument 'upper' contains NaN"),
        (torch.zeros(3), torch.zeros(2), ValueError, "argument 'upper' of shape"),
        ([0.0], torch.tensor(0.0), TypeError, "argument 'loc'"),
        (torch.zeros(3), 0.0, TypeError, "argument 'upper'"),
    ],
)
def test_truncated_gumbel_bad_arguments(loc, upper, exc, match):
    with pytest.raises(exc, match="^truncated_gumbel: " + match):
        truncated_gumbel(loc, upper)


# ------------------------------------------------------------------------------------------------
# gumbel_with_max
# ------------------------------------------------------------------------------------------------
PHI = torch.tensor([1.0, 0.0, -0.5, -math.inf, 0.3], dtype=torch.float64)


def naive_gumbel_with_max(loc, t, g):
    """The formula as written, in float64, from given unconditioned Gumbels g."""
    z = g.max(-1, keepdim=True).values
    return -torch.log(torch.exp(-t) - torch.exp(-z) + torch.exp(-g))


def test_gumbel_with_max_hits_the_maximum_exactly():
    t = torch.tensor([[2.0], [-3.0], [40.0]], dtype=torch.float64)
    out = gumbel_with_max(PHI.expand(3, 5), t, generator=gen(8))
    assert torch.equal(out.max(-1, keepdim=True).values, t)
    assert torch.isneginf(out[:, 3]).all() and torch.isfinite(out[:, [0, 1, 2, 4]]).all()


def test_gumbel_with_max_equals_the_formula_on_moderate_inputs():
    n = 1000
    loc = PHI.expand(n, 5)
    t = torch.linspace(-2, 3, n, dtype=torch.float64).unsqueeze(-1)
    out = gumbel_with_max(loc, t, generator=gen(9))
    g = sample_gumbel((n, 5), loc=loc, generator=gen(9))
    expected = naive_gumbel_with_max(loc, t, g)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_gumbel_with_max_argmax_follows_softmax():
    n = 20000
    out = gumbel_with_max(PHI.expand(n, 5), torch.tensor(0.0, dtype=torch.float64), generator=gen(10))
    counts = torch.bincount(out.argmax(-1), minlength=5).numpy()
    p = torch.softmax(PHI, 0).numpy()
    keep = p > 0
    assert counts[~keep].sum() == 0
    assert stats.chisquare(counts[keep], n * p[keep]).pvalue > P_CUT


def test_gumbel_with_max_others_are_truncated_gumbels():
    # Kool et al. (2019), eq. 23: given the max T, each non-argmax G~_i ~ TruncatedGumbel(phi_i, T).
    n, t = 20000, 0.4
    out = gumbel_with_max(PHI.expand(n, 5), torch.tensor(t, dtype=torch.float64), generator=gen(11))
    am = out.argmax(-1)
    for i in (0, 1, 2, 4):
        x = out[am != i, i]
        assert ks_p(x, lambda g, i=i: truncated_cdf(g, PHI[i].item(), t)) > P_CUT, i


def test_gumbel_with_max_ks_rejects_a_shift():
    # Wrong sampler: shift all Gumbels by T - Z (max becomes T, but the others are not truncated
    # Gumbels). The same KS test must reject it.
    n, t = 20000, 0.4
    g = sample_gumbel((n, 5), loc=PHI.expand(n, 5), generator=gen(11))
    out = g + (t - g.max(-1, keepdim=True).values)
    am = out.argmax(-1)
    assert ks_p(out[am != 1, 1], lambda v: truncated_cdf(v, 0.0, t)) < P_CUT


def test_gumbel_with_max_stable_where_naive_fails():
    # float32, T far below the locations and locations far below T: the naive formula gives
    # NaN/-inf/+inf (exp(-G) overflows, exp(-T) - exp(-Z) cancels); the stable form stays finite.
    loc = torch.tensor([[0.0, -1.0, 2.0], [0.0, -1.0, 2.0], [-200.0, -150.0, -100.0]])
    t = torch.tensor([[-120.0], [50.0], [0.0]])
    out = gumbel_with_max(loc, t, generator=gen(12))
    assert torch.isfinite(out).all()
    assert torch.equal(out.max(-1, keepdim=True).values, t)
    assert (out <= t).all()
    g = sample_gumbel((3, 3), loc=loc, generator=gen(12))
    assert not torch.isfinite(naive_gumbel_with_max(loc, t, g)).all()
    # and agrees with the naive formula evaluated in float64 (no overflow there) on the same draws
    # (at the argmax even float64 cancels: e^-T - e^-Z + e^-Z can round to <= 0, so skip it)
    ref = naive_gumbel_with_max(loc.double(), t.double(), g.double())
    other = g != g.max(-1, keepdim=True).values
    assert torch.isfinite(ref[other]).all()
    torch.testing.assert_close(out.double()[other], ref[other], rtol=1e-5, atol=1e-4)


def test_gumbel_with_max_maximum_shapes_and_dead_rows():
    loc = torch.zeros(2, 3, 4)
    a = gumbel_with_max(loc, torch.zeros(2, 3), generator=gen(0))
    b = gumbel_with_max(loc, torch.zeros(2, 3, 1), generator=gen(0))
    assert torch.equal(a, b) and a.shape == (2, 3, 4)
    c = gumbel_with_max(torch.zeros(4), torch.tensor(1.0), generator=gen(0))
    assert c.shape == (4,) and c.max() == 1.0
    # one parent, several maxima: broadcasting over the batch
    d = gumbel_with_max(torch.zeros(1, 4), torch.tensor([[0.0], [1.0], [2.0]]), generator=gen(0))
    assert d.shape == (3, 4)
    # maximum -inf: the row is all -inf, also when loc is all -inf
    e = gumbel_with_max(torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]]),
                        torch.tensor([-math.inf, -math.inf]), generator=gen(0))
    assert torch.isneginf(e).all()


def test_gumbel_with_max_gradcheck():
    loc = torch.tensor([[0.3, -0.2, 1.0], [2.0, 0.0, -1.0]], dtype=torch.float64, requires_grad=True)
    t = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: gumbel_with_max(a, b, generator=gen(13)), (loc, t))


@settings(max_examples=60, deadline=None)
@given(
    locs=st.lists(st.one_of(st.floats(-1e4, 1e4), st.just(-math.inf)), min_size=1, max_size=6),
    t=st.floats(-1e4, 1e4),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_gumbel_with_max_property_extreme_inputs(locs, t, dtype, seed):
    if all(v == -math.inf for v in locs):
        locs[0] = 0.0
    loc = torch.tensor(locs, dtype=dtype)
    tt = torch.tensor(t, dtype=dtype)
    out = gumbel_with_max(loc, tt, generator=gen(seed))
    finite = loc > -math.inf
    assert torch.isfinite(out[finite]).all() and torch.isneginf(out[~finite]).all()
    assert out.max() == tt and (out <= tt).all()


@pytest.mark.parametrize(
    "loc, maximum, exc, match",
    [
        (torch.tensor([0.0, float("nan")]), torch.tensor(0.0), ValueError, "argument 'loc' contains NaN"),
        (torch.tensor([0.0, float("inf")]), torch.tensor(0.0), ValueError, "argument 'loc' contains \\+inf"),
        (torch.zeros(2), torch.tensor(float("nan")), ValueError, "argument 'maximum' contains NaN"),
        (torch.zeros(2), torch.tensor(float("inf")), ValueError, "argument 'maximum' contains \\+inf"),
        (torch.zeros(3, 4), torch.zeros(4), ValueError, "argument 'maximum' of shape"),
        (torch.zeros(3, 4), torch.zeros(2, 1), ValueError, "argument 'maximum' of shape"),
        (torch.tensor(0.0), torch.tensor(0.0), ValueError, "argument 'loc' is a 0-d"),
        (torch.full((2, 3), -math.inf), torch.zeros(2), ValueError, "argument 'loc' has a row with no possible item"),
        (torch.zeros(3, dtype=torch.long), torch.tensor(0.0), TypeError, "argument 'loc'"),
        (torch.zeros(3), 0.0, TypeError, "argument 'maximum'"),
    ],
)
def test_gumbel_with_max_bad_arguments(loc, maximum, exc, match):
    with pytest.raises(exc, match="^gumbel_with_max: " + match):
        gumbel_with_max(loc, maximum)


# ------------------------------------------------------------------------------------------------
# gumbel_max
# ------------------------------------------------------------------------------------------------
LOGITS = torch.tensor([0.5, -1.0, 2.0, -math.inf, 0.0], dtype=torch.float64)


def chi2_p(counts, probs):
    counts, probs = np.asarray(counts), np.asarray(probs)
    keep = probs > 0
    assert counts[~keep].sum() == 0, "an impossible outcome was sampled"
    return stats.chisquare(counts[keep], counts.sum() * probs[keep] / probs[keep].sum()).pvalue


def test_gumbel_max_follows_softmax():
    idx = gumbel_max(LOGITS.expand(30000, 5), generator=gen(20))
    assert idx.shape == (30000,) and idx.dtype == torch.long
    assert chi2_p(torch.bincount(idx, minlength=5), torch.softmax(LOGITS, 0)) > P_CUT


def test_gumbel_max_chi2_rejects_one_shared_gumbel():
    # The recipe that reuses one G for every class (errata 28) always returns argmax(logits).
    g = sample_gumbel((30000, 1), generator=gen(20), dtype=torch.float64)
    idx = (LOGITS + g).argmax(-1)
    assert (idx == 2).all()
    assert chi2_p(torch.bincount(idx, minlength=5), torch.softmax(LOGITS, 0)) < P_CUT


def test_gumbel_max_chi2_rejects_a_slightly_wrong_sampler():
    # logits scaled by 1.1 (a temperature error of 10 %): the same test at the same size rejects it
    idx = gumbel_max(1.1 * LOGITS.expand(30000, 5), generator=gen(20))
    assert chi2_p(torch.bincount(idx, minlength=5), torch.softmax(LOGITS, 0)) < P_CUT


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_gumbel_max_dtypes_and_impossible_classes(dtype):
    logits = torch.tensor([[0.0, -math.inf, 1.0], [-math.inf, -math.inf, 5.0]], dtype=dtype)
    idx = gumbel_max(logits.repeat(500, 1), generator=gen(21)).view(500, 2)
    assert (idx[:, 0] != 1).all() and (idx[:, 1] == 2).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("sampler", ["max", "topk"])
def test_16_bit_logits_do_not_favour_the_first_class(dtype, sampler):
    # independent review: logits + G formed in bfloat16 rounded to a grid of spacing 0.5 near
    # 100, ties went to the first index, and class 1 of [100, 100] came out 43.8 % of the time
    # (float16: 49.3 %, 9 standard errors off). Now perturbed in float32. The share must lie
    # within 5 standard errors of 1/2 (a false alarm 5.7e-7 at this fixed seed and size).
    n = 400_000
    logits = torch.tensor([100.0, 100.0], dtype=dtype).expand(n, 2)
    if sampler == "max":
        idx = gumbel_max(logits, generator=gen(23))
    else:
        idx, values = gumbel_topk(logits, 1, generator=gen(23), return_perturbed=True)
        assert values.dtype == dtype
        idx = idx[:, 0]
    share = idx.double().mean().item()
    assert abs(share - 0.5) < 5 * 0.5 / math.sqrt(n), share


@pytest.mark.parametrize("sampler", ["max", "topk"])
def test_large_float32_logits_do_not_favour_the_first_class(sampler):
    # independent review: float32 [1e6, 1e6] drew class 0 in 50.8 % of rows (logits + G rounds
    # to a spacing of 0.0625 there and ties go to the first index). Now the rows are shifted by
    # their maximum first. Within 5 standard errors of 1/2, as above (false alarm 5.7e-7); the
    # old sampler is 10 standard errors off at this size. A row of small logits beside them is
    # untouched, and the perturbed values topk returns are still logits + G.
    n = 400_000
    logits = torch.tensor([[1e6, 1e6], [-3e5, -3e5]], dtype=torch.float32).repeat(n // 2, 1)
    if sampler == "max":
        idx = gumbel_max(logits, generator=gen(29))
    else:
        idx, values = gumbel_topk(logits, 1, generator=gen(29), return_perturbed=True)
        assert values.dtype == torch.float32
        assert ((values[:, 0] - logits[:, 0]).abs() < 30).all()
        idx = idx[:, 0]
    share = idx.double().mean().item()
    assert abs(share - 0.5) < 5 * 0.5 / math.sqrt(n), share
    small = torch.tensor([[2.0, 0.0, -1.0]]).expand(n, 3)
    freq = torch.bincount(gumbel_max(small, generator=gen(31)), minlength=3).double() / n
    p = torch.softmax(small[0].double(), 0)
    assert ((freq - p).abs() < 5 * (p * (1 - p) / n).sqrt()).all(), (freq, p)


@pytest.mark.parametrize(
    "logits, exc, match",
    [
        (torch.tensor([0.0, float("nan")]), ValueError, "argument 'logits' contains NaN"),
        (torch.tensor([0.0, float("inf")]), ValueError, "argument 'logits' contains \\+inf"),
        (torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]]), ValueError, "no possible class"),
        (torch.tensor(1.0), ValueError, "argument 'logits' is a 0-d"),
        (torch.zeros(2, 0), ValueError, "argument 'logits' has empty rows"),
        (torch.zeros(0), ValueError, "argument 'logits' has empty rows"),
        (torch.tensor([1, 2]), TypeError, "argument 'logits'"),
    ],
)
def test_gumbel_max_bad_arguments(logits, exc, match):
    with pytest.raises(exc, match="^gumbel_max: .*" + match):
        gumbel_max(logits)


@pytest.mark.parametrize("shape", [(0, 4), (2, 0, 4)])
def test_samplers_accept_an_empty_batch(shape):
    # review of the third edition: an empty batch (no rows) was rejected like an empty row,
    # though the docstrings promise only to reject empty rows
    x = torch.zeros(shape, dtype=torch.float64)
    batch = shape[:-1]
    assert gumbel_max(x, generator=gen(1)).shape == batch
    assert gumbel_softmax(x, 0.5, generator=gen(1)).shape == shape
    assert gumbel_softmax(x, 1e-3, hard=True, generator=gen(1)).shape == shape
    tau = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    assert gumbel_softmax(x, tau, generator=gen(1)).shape == shape
    idx, vals = gumbel_topk(x, 2, generator=gen(1), return_perturbed=True)
    assert idx.shape == vals.shape == batch + (2,)
    assert gumbel_with_max(x, torch.zeros(batch, dtype=torch.float64)).shape == shape
    assert plackett_luce_log_prob(x, torch.tensor([1, 0])).shape == batch
    assert truncated_gumbel(x, torch.zeros((), dtype=torch.float64)).shape == shape
    assert sample_gumbel(shape, loc=x).shape == shape


@pytest.mark.parametrize("func", [
    lambda x: gumbel_max(x), lambda x: gumbel_softmax(x, 1.0), lambda x: gumbel_topk(x, 1),
    lambda x: plackett_luce_log_prob(x, torch.zeros(x.shape[:-1] + (1,), dtype=torch.long)),
    lambda x: gumbel_with_max(x, torch.zeros(x.shape[:-1]))])
def test_samplers_reject_empty_rows(func):
    for shape in [(3, 0), (0, 0)]:
        with pytest.raises(ValueError, match=r"argument '(logits|loc)' has empty rows"):
            func(torch.zeros(shape))


# ------------------------------------------------------------------------------------------------
# gumbel_softmax
# ------------------------------------------------------------------------------------------------
def binary_concrete_cdf(x, delta, tau):
    # For two classes, Y_0 = sigmoid((delta + L) / tau) with L = G_0 - G_1 standard logistic, so
    # P(Y_0 <= x) = sigmoid(tau * logit(x) - delta)  (Maddison et al. 2017, section 3.3).
    return 1 / (1 + np.exp(-(tau * np.log(x / (1 - x)) - delta)))


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
def test_gumbel_softmax_binary_concrete_law(tau):
    logits = torch.tensor([0.8, -0.4], dtype=torch.float64)
    y = gumbel_softmax(logits.expand(20000, 2), tau, generator=gen(22))[:, 0]
    y = y[(y > 0) & (y < 1)]  # at tau = 0.3 a few saturate to exactly 0/1 in float64
    assert ks_p(y, lambda x: binary_concrete_cdf(x, 1.2, tau)) > P_CUT


def test_gumbel_softmax_ks_rejects_noise_not_divided_by_tau():
    # softmax(logits / tau + G) is a different law (for tau != 1); the same test must reject it.
    logits, tau = torch.tensor([0.8, -0.4], dtype=torch.float64), 0.5
    g = sample_gumbel((20000, 2), generator=gen(22), dtype=torch.float64)
    y = torch.softmax(logits / tau + g, -1)[:, 0]
    assert ks_p(y, lambda x: binary_concrete_cdf(x, 1.2, tau)) < P_CUT


def test_gumbel_softmax_same_law_as_pytorch():
    # Two-sample KS against F.gumbel_softmax on a 3-class problem (each coordinate).
    logits = torch.tensor([0.3, -1.0, 1.2], dtype=torch.float64).expand(20000, 3)
    ours = gumbel_softmax(logits, 0.7, generator=gen(23))
    torch.manual_seed(23)
    theirs = torch.nn.functional.gumbel_softmax(logits, tau=0.7)
    for j in range(3):
        assert stats.ks_2samp(ours[:, j].numpy(), theirs[:, j].numpy()).pvalue > P_CUT


def test_gumbel_softmax_rows_sum_to_one_and_impossible_is_zero():
    logits = torch.tensor([[0.0, -math.inf, 3.0, -2.0]]).expand(100, 4)
    y = gumbel_softmax(logits, 0.5, generator=gen(24))
    torch.testing.assert_close(y.sum(-1), torch.ones(100))
    assert (y[:, 1] == 0).all()


def test_gumbel_softmax_small_tau_is_one_hot_of_the_gumbel_max_sample():
    logits = torch.randn(200, 6, generator=gen(25), dtype=torch.float64)
    y = gumbel_softmax(logits, 1e-3, generator=gen(26))
    idx = gumbel_max(logits, generator=gen(26))  # same noise
    assert torch.equal(y.argmax(-1), idx)
    assert (y.max(-1).values > 1 - 1e-6).mean(dtype=torch.float64) > 0.99
    # ... and not max(softmax(logits)) (errata 29): the samples are spread over the classes
    assert len(set(idx.tolist())) > 1


def test_gumbel_softmax_hard_is_exactly_one_hot_with_soft_gradient():
    logits = torch.randn(50, 7, generator=gen(27), requires_grad=True)
    w = torch.randn(7, generator=gen(28))
    y = gumbel_softmax(logits, 0.8, hard=True, generator=gen(29))
    assert set(y.detach().unique().tolist()) == {0.0, 1.0} and (y.detach().sum(-1) == 1).all()
    (y * w).sum().backward()
    g_hard = logits.grad.clone()
    logits.grad = None
    ys = gumbel_softmax(logits, 0.8, generator=gen(29))
    assert torch.equal(y.detach().argmax(-1), ys.detach().argmax(-1))
    (ys * w).sum().backward()
    torch.testing.assert_close(g_hard, logits.grad)


def test_gumbel_softmax_gradcheck_and_analytic_gradient():
    logits = torch.tensor([[0.2, -0.7, 1.1]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: gumbel_softmax(x, 0.6, generator=gen(30)), (logits,))
    # d y / d logits = (diag(y) - y y^T) / tau for the fixed noise
    y = gumbel_softmax(logits, 0.6, generator=gen(30))[0]
    jac = torch.autograd.functional.jacobian(lambda x: gumbel_softmax(x, 0.6, generator=gen(30))[0], logits)[:, 0]
    yd = y.detach()
    torch.testing.assert_close(jac, (torch.diag(yd) - torch.outer(yd, yd)) / 0.6)


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        ((torch.zeros(3), 0.0), {}, ValueError, "argument 'tau' must be > 0"),
        ((torch.zeros(3), -1.0), {}, ValueError, "argument 'tau' must be > 0"),
        ((torch.zeros(3), float("nan")), {}, ValueError, "argument 'tau' must be finite"),
        ((torch.zeros(3), "1"), {}, TypeError, "argument 'tau'"),
        ((torch.tensor([0.0, float("nan")]), 1.0), {}, ValueError, "argument 'logits' contains NaN"),
        ((torch.tensor([0.0, float("inf")]), 1.0), {}, ValueError, "argument 'logits' contains \\+inf"),
        ((torch.full((2,), -math.inf), 1.0), {}, ValueError, "no possible class"),
        ((torch.zeros(3), 1.0), {"hard": 1}, TypeError, "argument 'hard'"),
    ],
)
def test_gumbel_softmax_bad_arguments(args, kwargs, exc, match):
    with pytest.raises(exc, match="^gumbel_softmax: .*" + match):
        gumbel_softmax(*args, **kwargs)


# ------------------------------------------------------------------------------------------------
# gumbel_topk and plackett_luce_log_prob
# ------------------------------------------------------------------------------------------------
PL_LOGITS = torch.tensor([1.0, 0.0, -0.5, 0.7, -math.inf], dtype=torch.float64)


def pl_prob_bruteforce(logits, order):
    """Sequential draws without replacement, straight from the definition."""
    p, left = 1.0, list(range(len(logits)))
    w = [math.exp(v) for v in logits]
    for i in order:
        p *= w[i] / sum(w[j] for j in left)
        left.remove(i)
    return p


def tuple_counts(idx, n):
    k = idx.shape[-1]
    tuples = list(itertools.permutations(range(n), k))
    code = {t: c for c, t in enumerate(tuples)}
    counts = np.zeros(len(tuples), dtype=np.int64)
    for row in idx.tolist():
        counts[code[tuple(row)]] += 1
    return tuples, counts


def test_plackett_luce_exact_values():
    logits = [1.0, 0.0, -0.5, 0.7]
    lg = torch.tensor(logits, dtype=torch.float64)
    for order in [(0, 1), (3, 2, 1), (2, 3, 0, 1), (1,)]:
        lp = plackett_luce_log_prob(lg, torch.tensor(order))
        assert lp.item() == pytest.approx(math.log(pl_prob_bruteforce(logits, order)), rel=1e-13)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_plackett_luce_sums_to_one(k):
    tuples = torch.tensor(list(itertools.permutations(range(5), k)))
    lp = plackett_luce_log_prob(PL_LOGITS, tuples)
    assert lp.shape == (len(tuples),)
    assert lp.exp().sum().item() == pytest.approx(1.0, abs=1e-12)
    # tuples with the impossible item 4 have probability 0
    assert torch.isneginf(lp[(tuples == 4).any(-1)]).all()


def test_plackett_luce_stable_when_drawn_items_hold_all_the_mass():
    logits = torch.tensor([30.0, 0.0, -30.0])
    lp = plackett_luce_log_prob(logits, torch.tensor([0, 1, 2]))
    exact = -math.log1p(math.exp(-30) + math.exp(-60)) - math.log1p(math.exp(-30))
    assert lp.item() == pytest.approx(exact, abs=1e-6)
    # "total minus drawn" in float32 loses the rest entirely: log(0) at step 2
    total = torch.logsumexp(logits, 0)
    naive = torch.log(total.exp() - logits[0].exp())
    assert not torch.isfinite(naive) or abs(naive.item() - math.log1p(math.exp(-30))) > 1


def test_plackett_luce_relatively_accurate_where_the_probability_is_near_one():
    # review of the third edition: [40, 0, -40], order [0, 1] gave -4.25e-18 (the first factor,
    # 40 - logsumexp, rounded to 0) instead of -8.50e-18
    lg = torch.tensor([40.0, 0.0, -40.0], dtype=torch.float64)
    exact = -math.log1p(math.exp(-40.0) + math.exp(-80.0)) - math.log1p(math.exp(-40.0))
    for order in ([0, 1], [0, 1, 2]):
        lp = plackett_luce_log_prob(lg, torch.tensor(order)).item()
        assert abs(lp - exact) <= 4e-16 * abs(exact), (order, lp, exact)
    # in float32 as well, and batched against broadcast rows
    lp32 = plackett_luce_log_prob(lg.float().expand(3, 3), torch.tensor([0, 1]))
    assert lp32.dtype == torch.float32
    assert ((lp32.double() - exact).abs() <= 4e-7 * abs(exact)).all()


def test_plackett_luce_relative_error_against_mpmath():
    # relative error about eps times the largest logit gap (rounding logits_l - logits_i)
    import mpmath

    def exact(logits, order):
        with mpmath.workdps(400):
            xs, rem, tot = [mpmath.mpf(v) for v in logits], set(range(len(logits))), 0
            for i in order:
                rem.discard(i)
                tot -= mpmath.log1p(mpmath.fsum(mpmath.exp(xs[l] - xs[i]) for l in rem))
            return float(tot)

    g = torch.Generator().manual_seed(12)
    eps = torch.finfo(torch.float64).eps
    for t in range(150):
        n = int(torch.randint(1, 7, (1,), generator=g))
        k = int(torch.randint(1, n + 1, (1,), generator=g))
        lg = torch.randn(n, generator=g, dtype=torch.float64) * (1.0, 10.0, 60.0)[t % 3]
        order = torch.randperm(n, generator=g)[:k]
        got = plackett_luce_log_prob(lg, order).item()
        want = exact(lg.tolist(), order.tolist())
        gap = float(lg.max() - lg.min())
        assert abs(got - want) <= 4 * eps * max(1.0, gap) * abs(want), (lg, order, got, want)


def test_plackett_luce_gradcheck_including_full_permutation():
    lg = torch.tensor([0.3, -1.2, 0.8, 0.1], dtype=torch.float64, requires_grad=True)
    for order in ([2, 0], [1, 3, 0, 2]):
        o = torch.tensor(order)
        assert torch.autograd.gradcheck(lambda x, o=o: plackett_luce_log_prob(x, o), (lg,))
        lp = plackett_luce_log_prob(lg, o)
        (g,) = torch.autograd.grad(lp, lg)
        assert torch.isfinite(g).all()


def test_plackett_luce_broadcasting():
    logits = torch.randn(3, 6, generator=gen(31), dtype=torch.float64)
    ordered = torch.tensor([[0, 1], [5, 2], [3, 4]])
    lp = plackett_luce_log_prob(logits, ordered)
    for b in range(3):
        assert lp[b].item() == pytest.approx(
            math.log(pl_prob_bruteforce(logits[b].tolist(), ordered[b].tolist())), rel=1e-12)
    assert plackett_luce_log_prob(logits, torch.tensor([1, 2])).shape == (3,)


@pytest.mark.parametrize("k", [2, 3])
def test_gumbel_topk_ordered_tuples_follow_plackett_luce(k):
    idx = gumbel_topk(PL_LOGITS.expand(40000, 5), k, generator=gen(32 + k))
    assert idx.shape == (40000, k)
    tuples, counts = tuple_counts(idx, 5)
    probs = plackett_luce_log_prob(PL_LOGITS, torch.tensor(tuples)).exp().numpy()
    assert chi2_p(counts, probs) > P_CUT


def test_gumbel_topk_chi2_rejects_wrong_order():
    # Wrong sampler: the right *set* but reported in index order instead of draw order.
    idx = gumbel_topk(PL_LOGITS.expand(40000, 5), 2, generator=gen(34)).sort(-1).values
    tuples, counts = tuple_counts(idx, 5)
    probs = plackett_luce_log_prob(PL_LOGITS, torch.tensor(tuples)).exp().numpy()
    assert chi2_p(counts, probs) < P_CUT


def test_gumbel_topk_same_law_as_torch_multinomial():
    logits = PL_LOGITS.expand(40000, 5)
    torch.manual_seed(35)
    theirs = torch.multinomial(torch.softmax(logits, -1), 2, replacement=False)
    tuples, c_theirs = tuple_counts(theirs, 5)
    _, c_ours = tuple_counts(gumbel_topk(logits, 2, generator=gen(35)), 5)
    keep = (c_theirs + c_ours) > 0
    assert stats.chi2_contingency(np.stack([c_ours[keep], c_theirs[keep]])).pvalue > P_CUT


@settings(max_examples=50, deadline=None)
@given(
    logits=st.lists(st.one_of(st.floats(-1e30, 1e30), st.just(-math.inf)), min_size=1, max_size=8),
    k=st.integers(1, 8),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
)
def test_gumbel_topk_property_distinct_and_possible(logits, k, seed, dtype):
    lg = torch.tensor(logits, dtype=torch.float64).to(dtype)
    possible = int(torch.isfinite(lg).sum())
    if lg.isinf().any() and (lg == math.inf).any():
        return  # float16 overflow of a huge finite value to +inf: an error case, tested elsewhere
    if 1 <= k <= possible:
        idx = gumbel_topk(lg, k, generator=gen(seed))
        assert len(set(idx.tolist())) == k
        assert torch.isfinite(lg[idx]).all()
    else:
        with pytest.raises(ValueError, match="argument 'k'"):
            gumbel_topk(lg, k, generator=gen(seed))


@pytest.mark.parametrize(
    "logits, k, exc, match",
    [
        (torch.zeros(4), 5, ValueError, "argument 'k'=5 is larger than the number of items"),
        (torch.tensor([0.0, -math.inf, 1.0]), 3, ValueError, "larger than the number of possible items"),
        (torch.zeros(4), 0, ValueError, "argument 'k' must be >= 1"),
        (torch.zeros(4), 2.0, TypeError, "argument 'k' must be an int"),
        (torch.tensor([0.0, float("nan"), 1.0]), 1, ValueError, "argument 'logits' contains NaN"),
        (torch.tensor([0.0, float("inf"), 1.0]), 1, ValueError, "argument 'logits' contains \\+inf"),
    ],
)
def test_gumbel_topk_bad_arguments(logits, k, exc, match):
    with pytest.raises(exc, match="^gumbel_topk: .*" + match):
        gumbel_topk(logits, k)


@pytest.mark.parametrize(
    "logits, ordered, exc, match",
    [
        (torch.zeros(4), torch.tensor([0, 0]), ValueError, "repeats an index"),
        (torch.zeros(4), torch.tensor([0, 4]), ValueError, "index outside"),
        (torch.zeros(4), torch.tensor([-1, 2]), ValueError, "index outside"),
        (torch.zeros(4), torch.tensor([0.0, 1.0]), TypeError, "argument 'ordered' must be an integer"),
        (torch.zeros(4), torch.arange(5), ValueError, "k=5 draws"),
        (torch.zeros(3, 4), torch.zeros(2, 1, dtype=torch.long), ValueError, "do not broadcast"),
        (torch.tensor([0.0, float("nan")]), torch.tensor([0]), ValueError, "argument 'logits' contains NaN"),
        (torch.zeros(4), [0, 1], TypeError, "argument 'ordered' must be a torch.Tensor"),
    ],
)
def test_plackett_luce_bad_arguments(logits, ordered, exc, match):
    with pytest.raises(exc, match="^plackett_luce_log_prob: .*" + match):
        plackett_luce_log_prob(logits, ordered)


def test_benchmark_script_runs_quick():
    import pathlib
    import runpy

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gumbel.py"
    rows = runpy.run_path(str(path), run_name="bench_gumbel")["main"](["--quick", "--repeats", "1"])
    assert len(rows) == 8 and all(r[3] > 0 for r in rows)


# ------------------------------------------------------------------------------------------------
# Issue 17: gradients that were NaN where the value is finite
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, x", [(torch.float64, -1e-20), (torch.float64, -1e-300),
                                      (torch.float32, -1e-8), (torch.float32, -1e-10)])
def test_log1mexp_gradient_finite_near_zero(dtype, x):
    # The exact derivative of log(1 - e^x) is -1/expm1(-x); the torch.where branch not taken
    # (log1p(-e^x) = log1p(-1) = -inf) used to turn it into 0 * inf = NaN.
    xt = torch.tensor([x], dtype=dtype, requires_grad=True)
    log1mexp(xt).sum().backward()
    exact = -1.0 / math.expm1(-x)
    assert torch.isfinite(xt.grad).all()
    assert math.isclose(xt.grad.item(), exact, rel_tol=1e-5)


def test_log1mexp_gradient_at_the_ends():
    x = torch.tensor([-math.inf, -800.0, -math.log(2), -1.0], dtype=torch.float64,
                     requires_grad=True)
    log1mexp(x).sum().backward()
    exact = [0.0, -math.exp(-800.0), -1.0 / math.expm1(math.log(2)), -1.0 / math.expm1(1.0)]
    np.testing.assert_allclose(x.grad.numpy(), exact, rtol=1e-14)


def test_gumbel_with_max_gradient_finite_when_two_values_are_one_ulp_apart(monkeypatch):
    # Perturbed values [1e-3, the next float32 below 1e-3, -1, -2] (issue 17): the forward value
    # is finite, and loc.grad was all NaN (log1mexp's gradient at G - Z = -1 ulp). The noise is
    # replaced by zeros so that the perturbed values are exactly these.
    monkeypatch.setattr(gm, "_standard_gumbel",
                        lambda shape, dtype, device, generator: torch.zeros(shape, dtype=dtype))
    target = torch.tensor([1e-3, 0.0, -1.0, -2.0])
    target[1] = torch.nextafter(target[0], torch.tensor(0.0))
    w = torch.tensor([1.0, 2.0, 3.0, 4.0])
    grads = {}
    for dtype in (torch.float32, torch.float64):
        loc = target.to(dtype, copy=True).requires_grad_()
        t = torch.tensor(0.5, dtype=dtype, requires_grad=True)
        out = gumbel_with_max(loc, t)
        assert torch.isfinite(out).all() and out[0] == t
        (out * w.to(dtype)).sum().backward()
        assert torch.isfinite(loc.grad).all() and torch.isfinite(t.grad).all()
        grads[dtype] = torch.cat([loc.grad, t.grad.reshape(1)]).double()
    # float64, where 1 - e^{G - Z} does not round to 0, gives the same gradient
    torch.testing.assert_close(grads[torch.float32], grads[torch.float64], rtol=1e-3, atol=1e-3)


def test_plackett_luce_impossible_item_in_a_full_permutation_is_minus_inf():
    # k = n with an impossible item drawn last: the docstring promises -inf, it returned NaN.
    logits = torch.tensor([0.0, 1.0, -math.inf], requires_grad=True)
    lp = plackett_luce_log_prob(logits, torch.tensor([0, 1, 2]))
    assert lp.item() == -math.inf
    lp2 = plackett_luce_log_prob(logits, torch.tensor([[2, 0, 1], [0, 2, 1]]))
    assert torch.isneginf(lp2).all()


def test_plackett_luce_gradient_finite_when_the_undrawn_items_are_impossible():
    # Drawing both possible items of [0, 1, -inf]: the value is log p(0) + log p(1 | not 0) =
    # -log(1 + e) + 0, finite; the never-drawn rest is an all -inf logsumexp, whose torch
    # gradient is NaN.
    logits = torch.tensor([0.0, 1.0, -math.inf], dtype=torch.float64, requires_grad=True)
    lp = plackett_luce_log_prob(logits, torch.tensor([0, 1]))
    assert math.isclose(lp.item(), -math.log1p(math.e), rel_tol=1e-15)
    lp.backward()
    e = math.e / (1 + math.e)
    np.testing.assert_allclose(logits.grad.numpy(), [e, -e, 0.0], rtol=1e-14)


# ------------------------------------------------------------------------------------------------
# Issue 17: gumbel_softmax with a temperature tensor, unrepresentable temperatures, dim
# ------------------------------------------------------------------------------------------------
def test_gumbel_softmax_is_differentiable_in_a_temperature_tensor():
    # A tau that requires grad used to become a float: no gradient reached it.
    logits = torch.tensor([[0.3, -1.0, 1.2], [2.0, 0.0, -math.inf]], dtype=torch.float64,
                          requires_grad=True)
    tau = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    y = gumbel_softmax(logits, tau, generator=gen(4))
    w = torch.tensor([[1.0, -2.0, 0.5], [0.3, 1.0, 4.0]], dtype=torch.float64)
    (y * w).sum().backward()
    assert tau.grad is not None and tau.grad.item() != 0.0
    # d y / d tau = -y (s - <s, y>) / tau with s = (logits + G) / tau, from the same noise
    noise = gm._standard_gumbel(logits.shape, torch.float64, logits.device, gen(4))
    s = (logits.detach() + noise) / 0.7
    yd = y.detach()
    ss = torch.where(torch.isfinite(s), s, 0.0)
    dy = -yd * (ss - (ss * yd).sum(-1, keepdim=True)) / 0.7
    torch.testing.assert_close(tau.grad, (dy * w).sum(), rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda lg, t: gumbel_softmax(lg, t, generator=gen(4)),
        (logits.detach()[:1].clone().requires_grad_(), tau.detach().clone().requires_grad_()))
    # hard=True: the straight-through gradient reaches tau too
    tau.grad = None
    (gumbel_softmax(logits, tau, hard=True, generator=gen(4)) * w).sum().backward()
    torch.testing.assert_close(tau.grad, (dy * w).sum(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("tau", [1e-39, 1e39, 1e-45])
def test_gumbel_softmax_refuses_a_temperature_float32_cannot_represent(tau):
    # float32 tau = 1e39 rounds to inf and 1e-39 is subnormal: the sample was all NaN.
    logits = torch.tensor([[0.0, -math.inf, 1.0]])
    with pytest.raises(ValueError, match="^gumbel_softmax: argument 'tau'=.* cannot be "
                                         "represented in torch.float32"):
        gumbel_softmax(logits, tau, generator=gen())
    # float64 logits can take it (and give the limits: one-hot, or uniform over the possible)
    y = gumbel_softmax(logits.double(), tau, generator=gen())
    assert torch.isfinite(y).all() and y[0, 1] == 0
    torch.testing.assert_close(y.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_gumbel_softmax_small_and_large_normal_temperatures_give_the_limits():
    logits = torch.tensor([[0.0, -math.inf, 1.0, 30.0]])
    cold = gumbel_softmax(logits, 1e-30, generator=gen(2))  # (logits + G) / tau ~ 1e31
    assert torch.isfinite(cold).all() and sorted(cold[0].tolist()) == [0.0, 0.0, 0.0, 1.0]
    hot = gumbel_softmax(logits, 3e38, generator=gen(2))
    torch.testing.assert_close(hot, torch.tensor([[1 / 3, 0.0, 1 / 3, 1 / 3]]))
    # float16 logits are computed in float32: tau = 1e5 is above float16's largest number
    half = gumbel_softmax(logits.half(), 1e5, generator=gen(2))
    assert half.dtype == torch.float16 and torch.isfinite(half).all()


def test_gumbel_softmax_dim():
    logits = torch.tensor([[0.3, 2.0], [-1.0, -math.inf], [1.2, 0.0]], dtype=torch.float64)
    y = gumbel_softmax(logits, 0.5, dim=0, generator=gen(6))
    noise = gm._standard_gumbel(logits.shape, torch.float64, logits.device, gen(6))
    torch.testing.assert_close(y, torch.softmax((logits + noise) / 0.5, dim=0))
    hard = gumbel_softmax(logits, 0.5, dim=0, hard=True, generator=gen(6))
    assert hard.sum(0).tolist() == [1.0, 1.0] and hard[1, 1] == 0
    with pytest.raises(ValueError, match="^gumbel_softmax: argument 'dim'=2 is out of range"):
        gumbel_softmax(logits, 0.5, dim=2)
    with pytest.raises(ValueError, match="^gumbel_softmax: argument 'logits' has a row with no "
                                         "possible class"):
        gumbel_softmax(logits, 0.5, dim=1)[0] if False else gumbel_softmax(
            torch.tensor([[0.0, -math.inf], [1.0, -math.inf]]), 0.5, dim=0)


# ------------------------------------------------------------------------------------------------
# Issue 17: torch.func on the Gumbel functions
# ------------------------------------------------------------------------------------------------
from torch import func as tf  # noqa: E402

GX = torch.tensor([[0.5, -1.0, 2.0], [0.0, -math.inf, 1.0]], dtype=torch.float64)
GUMBEL_FUNCS = {
    "gumbel_softmax": lambda a: gumbel_softmax(a, 0.5, generator=gen(1)),
    "gumbel_softmax_hard": lambda a: gumbel_softmax(a, 0.5, hard=True, generator=gen(1)),
    "gumbel_with_max": lambda a: gumbel_with_max(a, torch.tensor(0.3, dtype=torch.float64),
                                                 generator=gen(1)),
    "truncated_gumbel": lambda a: truncated_gumbel(a, torch.tensor(1.0, dtype=torch.float64),
                                                   generator=gen(1)),
    "sample_gumbel": lambda a: sample_gumbel(a.shape, loc=a, generator=gen(1)),
    "plackett_luce": lambda a: plackett_luce_log_prob(a, torch.tensor([[2, 0], [0, 2]])),
    "log1mexp": lambda a: log1mexp(-a.abs() - 0.1),
}


def _fin(out):
    return torch.where(torch.isfinite(out), out, 0.0)


@pytest.mark.parametrize("name", list(GUMBEL_FUNCS))
def test_gumbel_functions_under_torch_func(name):
    f = GUMBEL_FUNCS[name]
    jac = torch.autograd.functional.jacobian(lambda a: _fin(f(a)), GX)
    out = f(GX)
    w = torch.linspace(0.5, 1.5, out.numel(), dtype=torch.float64).reshape(out.shape)
    g = tf.grad(lambda a: (_fin(f(a)) * w).sum())(GX)
    torch.testing.assert_close(g, torch.tensordot(w, jac, dims=out.dim()))
    t = torch.linspace(-1.0, 1.0, GX.numel(), dtype=torch.float64).reshape(GX.shape)
    o, tangent = tf.jvp(lambda a: _fin(f(a)), (GX,), (t,))
    torch.testing.assert_close(o, _fin(out))
    torch.testing.assert_close(tangent, torch.tensordot(jac, t, dims=GX.dim()))
    torch.testing.assert_close(tf.jacrev(lambda a: _fin(f(a)))(GX), jac)
    # vmap: randomness="same" draws the noise once, so each element is the unbatched call
    batch = torch.stack([GX, GX - 1.0, GX * 0.5])
    vm = tf.vmap(f, randomness="same")(batch)
    torch.testing.assert_close(vm, torch.stack([f(b) for b in batch]))


def test_gumbel_softmax_vmap_different_randomness_draws_per_element():
    rows = torch.zeros(4, 3, dtype=torch.float64)
    out = tf.vmap(lambda a: gumbel_softmax(a, 1.0, generator=gen(2)),
                  randomness="different")(rows)
    assert out.shape == (4, 3) and len({tuple(r.tolist()) for r in out}) == 4
    torch.testing.assert_close(out.sum(-1), torch.ones(4, dtype=torch.float64))


def test_gumbel_functions_under_vmap_still_validate_values():
    with pytest.raises(ValueError, match="^gumbel_softmax: argument 'logits' has a row with no "
                                         "possible class"):
        tf.vmap(lambda a: gumbel_softmax(a, 1.0), randomness="same")(
            torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]]))
    with pytest.raises(ValueError, match="^log1mexp: argument 'x' must be <= 0"):
        tf.vmap(log1mexp)(torch.tensor([[-1.0], [0.5]]))


# ------------------------------------------------------------------------------------------------
# Issue 17: gumbel_topk's perturbed values, gumbel_with_max's true argmax
# ------------------------------------------------------------------------------------------------
def test_gumbel_topk_can_return_the_perturbed_logits():
    logits = torch.tensor([[0.3, -1.0, 1.2, -math.inf, 0.0]], dtype=torch.float64,
                          requires_grad=True)
    idx, values = gumbel_topk(logits, 3, generator=gen(8), return_perturbed=True)
    assert torch.equal(idx, gumbel_topk(logits, 3, generator=gen(8)))
    noise = gm._standard_gumbel(logits.shape, torch.float64, logits.device, gen(8))
    torch.testing.assert_close(values, (logits + noise).gather(-1, idx))
    assert (values[..., :-1] >= values[..., 1:]).all()  # decreasing
    values.sum().backward()  # d values / d logits: 1 at each drawn class
    assert logits.grad.sum().item() == 3.0 and (logits.grad[0, idx[0]] == 1).all()
    with pytest.raises(TypeError, match="^gumbel_topk: argument 'return_perturbed' must be a "
                                        "bool"):
        gumbel_topk(logits, 2, return_perturbed=1)


@pytest.mark.parametrize("t", [-10.0, -20.0])
def test_gumbel_with_max_returns_the_true_argmax_where_float32_ties(t):
    # T far below Z squeezes each row's top towards T: in float32 several entries round to
    # exactly T, and values.argmax(-1) (the first of them) is then often not the sampled maximum.
    loc = torch.zeros(500, 30)
    values, argmax = gumbel_with_max(loc, torch.full((500,), t), generator=gen(0),
                                     return_argmax=True)
    assert argmax.shape == (500,) and argmax.dtype == torch.long
    # the true argmax: that of the unconditioned draw, which is where the maximum T sits
    noise = gm._standard_gumbel(loc.shape, torch.float32, loc.device, gen(0))
    assert torch.equal(argmax, noise.argmax(-1))
    assert (values.gather(-1, argmax[:, None]) == t).all()
    ties = (values == t).sum(-1)
    assert ties.max() > 1  # the case is reached ...
    assert (values.argmax(-1) != argmax).any()  # ... and argmax of the values is wrong there
    # in float64 the same rows have no ties
    values64, argmax64 = gumbel_with_max(loc.double(), torch.full((500,), t).double(),
                                         generator=gen(0), return_argmax=True)
    assert torch.equal(values64.argmax(-1), argmax64)
    with pytest.raises(TypeError, match="^gumbel_with_max: argument 'return_argmax' must be"):
        gumbel_with_max(loc, torch.zeros(500), return_argmax="yes")


# ------------------------------------------------------------------------------------------------
# weighted_reservoir (Efraimidis & Spirakis 2006, A-Res) = Gumbel-top-k over a stream
# ------------------------------------------------------------------------------------------------
from softmaxbook.gumbel import gumbel_given_argmax, gumbel_rao, weighted_reservoir  # noqa: E402

RES_LOGITS = [0.4, -0.6, 1.1, 0.0, -1.5, 0.7]


def set_probabilities(logits, k):
    """Exact probability of each k-subset (sorted tuple) of a draw without replacement: the sum
    of the Plackett-Luce probabilities of its k! orders (enumeration)."""
    probs = {}
    for order in itertools.permutations(range(len(logits)), k):
        key = tuple(sorted(order))
        probs[key] = probs.get(key, 0.0) + pl_prob_bruteforce(logits, order)
    return probs


def as_chunks(logits):
    # a number, a 0-d tensor, a 1-d chunk and a float32 chunk: every kind of item
    yield logits[0]
    yield torch.tensor(logits[1], dtype=torch.float64)
    yield torch.tensor(logits[2:4], dtype=torch.float64)
    yield torch.tensor(logits[4:], dtype=torch.float64)


def reservoir_sets(sampler, logits, k, runs, seed):
    g = gen(seed)
    probs = set_probabilities(logits, k)
    code = {s: i for i, s in enumerate(probs)}
    counts = np.zeros(len(probs), dtype=np.int64)
    for _ in range(runs):
        counts[code[tuple(sorted(sampler(as_chunks(logits), k, generator=g).tolist()))]] += 1
    return counts, np.array(list(probs.values()))


def test_set_probabilities_are_exact():
    probs = set_probabilities(RES_LOGITS, 3)
    assert len(probs) == math.comb(6, 3) and sum(probs.values()) == pytest.approx(1, abs=1e-14)
    # inclusion probabilities sum to k
    incl = [sum(p for s, p in probs.items() if i in s) for i in range(6)]
    assert sum(incl) == pytest.approx(3, abs=1e-13)


def test_weighted_reservoir_is_gumbel_topk_on_the_same_uniforms():
    x = torch.tensor(RES_LOGITS, dtype=torch.float64)
    for k in (1, 3, 6):
        state = gen(5).get_state()
        g = torch.Generator()
        g.set_state(state)
        pos, keys = weighted_reservoir(as_chunks(RES_LOGITS), k, generator=g, return_keys=True)
        g.set_state(state)
        idx, vals = gumbel_topk(x, k, generator=g, return_perturbed=True)
        assert torch.equal(pos, idx) and torch.equal(keys, vals)
    # float32 chunks are computed in float64: the same result as gumbel_topk on float64
    g.set_state(state)
    pos = weighted_reservoir(iter([x.float()]), 3, generator=g)
    g.set_state(state)
    assert torch.equal(pos, gumbel_topk(x.float().double(), 3, generator=g))


def test_weighted_reservoir_keys_are_monotone_in_the_efraimidis_spirakis_keys():
    # u^(1/w) against log w - log(-log u) on the same uniforms: the same order, and the first is
    # exp(-exp(-second))
    state = gen(6).get_state()
    g = torch.Generator()
    g.set_state(state)
    logw = torch.linspace(-2, 2, 40, dtype=torch.float64)
    pos, keys = weighted_reservoir(iter(logw), 40, generator=g, return_keys=True)
    g.set_state(state)
    u = torch.rand(40, dtype=torch.float64, generator=g)
    es = u ** (1 / logw.exp())
    assert torch.equal(pos, es.argsort(descending=True))
    # read forwards (well conditioned): key = exp(-exp(-(log w + G))); backwards, -log(-log key)
    # loses every digit where the key rounds to 1
    assert torch.allclose(torch.exp(-torch.exp(-keys)), es[pos], rtol=1e-12, atol=0)


def test_weighted_reservoir_keeps_order_where_the_power_key_underflows():
    # weights 1e-6 .. 1e-4: u^(1/w) is 0 in float64 for (nearly) every u; our keys stay distinct
    logw = torch.log(torch.tensor([1e-6, 1e-5, 1e-4, 3e-6], dtype=torch.float64))
    state = gen(8).get_state()
    g = torch.Generator()
    g.set_state(state)
    u = torch.rand(4, dtype=torch.float64, generator=g)
    assert (u ** (1 / logw.exp()) == 0).all()
    g.set_state(state)
    pos, keys = weighted_reservoir(iter(logw), 4, generator=g, return_keys=True)
    assert torch.isfinite(keys).all() and keys.unique().numel() == 4


def test_weighted_reservoir_subsets_follow_sampling_without_replacement():
    # chi-square over the 20 subsets of size 3 of 6 items, exact probabilities by enumeration
    # (P_CUT: a correct sampler fails with probability 1e-3; seeds 30, 31, 32 gave p = 0.55, 0.77,
    # 0.98)
    counts, probs = reservoir_sets(weighted_reservoir, RES_LOGITS, 3, 3000, 30)
    assert stats.chisquare(counts, counts.sum() * probs).pvalue > P_CUT
    # inclusion probabilities, each within 5 standard errors (false alarm 5.7e-7 per item)
    probs_by_set = set_probabilities(RES_LOGITS, 3)
    sets = list(probs_by_set)
    for i in range(6):
        p_i = sum(p for s, p in probs_by_set.items() if i in s)
        share = sum(c for s, c in zip(sets, counts) if i in s) / counts.sum()
        assert abs(share - p_i) < 5 * math.sqrt(p_i * (1 - p_i) / counts.sum())


def wrong_reservoir(stream, k, generator):
    """The classic wrong key u * w (linear in the weight instead of u^(1/w)), else the same."""
    items = torch.cat([torch.as_tensor(c, dtype=torch.float64).reshape(-1) for c in stream])
    u = torch.rand(items.shape, dtype=torch.float64, generator=generator)
    return (u * items.exp()).topk(k).indices


def test_weighted_reservoir_chi2_rejects_the_key_u_times_w():
    # the same test at the same size: p ~ 1e-117
    counts, probs = reservoir_sets(wrong_reservoir, RES_LOGITS, 3, 3000, 30)
    assert stats.chisquare(counts, counts.sum() * probs).pvalue < P_CUT


def test_weighted_reservoir_impossible_items_and_laziness():
    consumed = []

    def stream():
        for i, v in enumerate([0.0, -math.inf, 1.0, -math.inf, 0.5]):
            consumed.append(i)
            yield v

    pos = weighted_reservoir(stream(), 3, generator=gen(1))
    assert sorted(pos.tolist()) == [0, 2, 4] and consumed == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="possible items"):
        weighted_reservoir(stream(), 4, generator=gen(1))
    # float16 and bfloat16 chunks, one item, k = 1
    for dtype in (torch.float16, torch.bfloat16):
        assert weighted_reservoir([torch.tensor([0.0, 1.0], dtype=dtype)], 1).shape == (1,)
    assert weighted_reservoir([2.5], 1).tolist() == [0]
    # near-certain: one weight e^50 times the others is drawn first every time
    firsts = [weighted_reservoir(iter([0.0, 50.0, 0.0]), 2, generator=gen(s))[0].item()
              for s in range(20)]
    assert firsts == [1] * 20


@pytest.mark.parametrize("stream, k, kwargs, exc, match", [
    ([], 1, {}, ValueError, "'stream' was empty"),
    ([0.0, 1.0], 3, {}, ValueError, "argument 'k'=3 is larger than the number of items"),
    ([0.0], 0, {}, ValueError, "argument 'k' must be >= 1"),
    ([0.0], 1.0, {}, TypeError, "argument 'k' must be an int"),
    ([0.0, math.nan], 1, {}, ValueError, "yielded NaN at item 1"),
    ([math.inf], 1, {}, ValueError, r"yielded \+inf at item 0"),
    # cold review R5: an int beyond float64 raised Python's bare OverflowError
    ([0.0, 10**400], 1, {}, ValueError, "number too large for float64 at item 1"),
    (["a"], 1, {}, TypeError, "yielded a str at item 0"),
    ([torch.zeros(2, 2)], 1, {}, ValueError, r"shape \(2, 2\) at item 0"),
    ([torch.tensor([1, 2])], 1, {}, TypeError, "dtype torch.int64 at item 0"),
    (torch.zeros(3), 1, {}, TypeError, "'stream' must be an iterable"),
    (5, 1, {}, TypeError, "'stream' must be an iterable"),
    ([0.0], 1, {"generator": 3}, TypeError, "argument 'generator'"),
    ([0.0], 1, {"return_keys": 1}, TypeError, "argument 'return_keys' must be a bool"),
])
def test_weighted_reservoir_bad_arguments(stream, k, kwargs, exc, match):
    with pytest.raises(exc, match="weighted_reservoir: " + ".*" + match):
        weighted_reservoir(stream, k, **kwargs)


# ------------------------------------------------------------------------------------------------
# gumbel_given_argmax and gumbel_rao (Paulus et al. 2021)
# ------------------------------------------------------------------------------------------------
GR_LOGITS = torch.tensor([0.5, -0.3, 1.0, 0.0], dtype=torch.float64)


def test_gumbel_given_argmax_puts_the_maximum_at_index():
    x = torch.tensor([[0.5, -0.3, -math.inf, 0.0], [30.0, -30.0, 0.0, 1.0]], dtype=torch.float64)
    for d in ([0, 1], [3, 1], [1, 0]):
        z = gumbel_given_argmax(x.expand(500, 2, 4), torch.tensor(d).expand(500, 2),
                                generator=gen(2))
        assert torch.equal(z.argmax(-1), torch.tensor(d).expand(500, 2))
        assert torch.isneginf(z[:, 0, 2]).all() and torch.isfinite(z[:, 1]).all()


def test_gumbel_given_argmax_mixed_over_the_softmax_is_the_unconditioned_law():
    # D ~ softmax, then Z | D: each coordinate must be Gumbel(logits_i) (KS, Bonferroni over 4)
    n = 20000
    d = gumbel_max(GR_LOGITS.expand(n, 4), generator=gen(40))
    z = gumbel_given_argmax(GR_LOGITS.expand(n, 4), d, generator=gen(41))
    ps = [ks_p(z[:, i], lambda g, i=i: gumbel_cdf(g, GR_LOGITS[i].item())) for i in range(4)]
    assert min(ps) > P_CUT / 4
    # and the maximum is Gumbel(logsumexp) given any argmax
    top = z.max(-1).values
    lse = torch.logsumexp(GR_LOGITS, 0).item()
    assert min(ks_p(top[d == i], lambda g: gumbel_cdf(g, lse)) for i in range(4)) > P_CUT / 4


def test_gumbel_given_argmax_ks_rejects_the_winners_own_location():
    # the plausible mistake: Z_D ~ Gumbel(logits_D) (the winner's own location, not logsumexp)
    n = 20000
    d = gumbel_max(GR_LOGITS.expand(n, 4), generator=gen(40))
    top = sample_gumbel(n, generator=gen(42), dtype=torch.float64) + GR_LOGITS[d]
    g = sample_gumbel((n, 4), generator=gen(43), dtype=torch.float64) + GR_LOGITS
    z = (-torch.logaddexp(-top[:, None], -g)).scatter(-1, d[:, None], top[:, None])
    ps = [ks_p(z[:, i], lambda g, i=i: gumbel_cdf(g, GR_LOGITS[i].item())) for i in range(4)]
    assert min(ps) < P_CUT / 4


def test_gumbel_given_argmax_extremes_dtypes_and_gradient():
    x = torch.tensor([[800.0, -800.0, 0.0], [-1e4, 0.0, 1e4]], dtype=torch.float64)
    z = gumbel_given_argmax(x, torch.tensor([1, 0]), generator=gen(3))
    assert torch.isfinite(z).all() and torch.equal(z.argmax(-1), torch.tensor([1, 0]))
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        z = gumbel_given_argmax(torch.zeros(3, 5, dtype=dtype), torch.tensor([0, 4, 2]),
                                generator=gen(3))
        assert z.dtype == dtype and z.shape == (3, 5)
    # an empty batch, one row as a 1-d tensor
    assert gumbel_given_argmax(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)).shape == (0, 3)
    assert gumbel_given_argmax(torch.zeros(3), torch.tensor(1)).shape == (3,)
    th = torch.tensor([0.0, -math.inf, 1.0], dtype=torch.float64, requires_grad=True)
    z = gumbel_given_argmax(th, torch.tensor(2), generator=gen(3))
    z[[0, 2]].sum().backward()
    assert torch.isfinite(th.grad).all() and th.grad[1] == 0


@pytest.mark.parametrize("logits, index, exc, match", [
    (torch.zeros(2, 3), torch.tensor([0, 3]), ValueError, r"outside \[0, 3\)"),
    (torch.zeros(2, 3), torch.tensor([0]), ValueError, r"'index' of shape \(1,\) does not fit"),
    (torch.zeros(2, 3), torch.tensor([0.0, 1.0]), TypeError, "'index' must be an integer"),
    (torch.zeros(2, 3), [0, 1], TypeError, "'index' must be a torch.Tensor"),
    (torch.tensor([[0.0, -math.inf]]), torch.tensor([1]), ValueError, "logit is -inf"),
    (torch.tensor([[0.0, math.nan]]), torch.tensor([0]), ValueError, "'logits' contains NaN"),
    (torch.tensor([[0.0, math.inf]]), torch.tensor([0]), ValueError, r"'logits' contains \+inf"),
    (torch.zeros(2, 0), torch.tensor([0, 0]), ValueError, "empty rows"),
    (torch.tensor([1, 2]), torch.tensor(0), TypeError, "floating-point dtype"),
])
def test_gumbel_given_argmax_bad_arguments(logits, index, exc, match):
    with pytest.raises(exc, match="gumbel_given_argmax: .*" + match):
        gumbel_given_argmax(logits, index)


def gr_test_bed_grads(estimator, tau, n, seed, **kwargs):
    """Single-sample gradients of E f(z), f(z) = ||z - b||^2, on the chapter's test bed."""
    b = torch.tensor([0.9, 0.1, 0.0, 0.6], dtype=torch.float64)
    x = GR_LOGITS.expand(n, 4).clone().requires_grad_()
    y = estimator(x, tau, generator=gen(seed), **kwargs)
    return torch.autograd.grad(((y - b) ** 2).sum(), x)[0]


def test_gumbel_rao_forward_is_the_gumbel_max_sample():
    x = torch.tensor([[0.5, -0.3, 1.0, -math.inf]] * 300, dtype=torch.float64)
    y, d = gumbel_rao(x, 0.5, samples=4, generator=gen(9), return_index=True)
    assert torch.equal(d, gumbel_max(x, generator=gen(9)))
    assert torch.equal(y, F_one_hot(d, 4))


def F_one_hot(d, n):
    return torch.nn.functional.one_hot(d, n).double()


def test_gumbel_rao_gradient_is_the_mean_jacobian_over_conditional_gumbels():
    # replay the generator: the K conditional draws given D, then the straight-through Jacobian
    # at each, averaged
    tau, k = 0.7, 5
    x = GR_LOGITS.expand(3, 4).clone().requires_grad_()
    c = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    y = gumbel_rao(x, tau, samples=k, generator=gen(11))
    (got,) = torch.autograd.grad((y * c).sum(), x)
    g = gen(11)
    d = (sample_gumbel((3, 4), generator=g, dtype=torch.float64) + GR_LOGITS).argmax(-1)
    z = gumbel_given_argmax(GR_LOGITS.expand(k, 3, 4), d.expand(k, 3), generator=g)
    th = GR_LOGITS.expand(3, 4).clone().requires_grad_()
    soft = torch.softmax((th + (z - GR_LOGITS)) / tau, -1).mean(0)
    (want,) = torch.autograd.grad((soft * c).sum(), th)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-14)


def test_gumbel_rao_has_the_mean_of_straight_through_and_less_variance():
    n, tau = 20000, 0.5
    st_g = gr_test_bed_grads(lambda x, t, generator: gumbel_softmax(x, t, hard=True,
                                                                     generator=generator),
                             tau, n, 12)
    gr_g = gr_test_bed_grads(gumbel_rao, tau, n, 13, samples=10)
    # the means agree: each coordinate within 5 standard errors of the difference (5.7e-7 each)
    se = torch.sqrt(st_g.var(0) / n + gr_g.var(0) / n)
    assert ((st_g.mean(0) - gr_g.mean(0)).abs() < 5 * se).all()
    # the variance falls (Rao-Blackwell): 0.51 of straight-through's at these settings (0.19 at
    # tau = 0.1, 0.77 at tau = 1; K = 1 gives 1.00); the sd of such a ratio at n = 20000 is ~0.02
    var = lambda g: ((g - g.mean(0)) ** 2).sum(-1).mean().item()
    assert var(gr_g) < 0.65 * var(st_g)


def test_gumbel_rao_with_one_sample_has_the_law_of_straight_through():
    n, tau = 20000, 0.5
    st_g = gr_test_bed_grads(lambda x, t, generator: gumbel_softmax(x, t, hard=True,
                                                                     generator=generator),
                             tau, n, 14)
    gr1 = gr_test_bed_grads(gumbel_rao, tau, n, 15, samples=1)
    gr10 = gr_test_bed_grads(gumbel_rao, tau, n, 15, samples=10)
    # two-sample KS on the first coordinate: K = 1 passes, K = 10 (the twin) is rejected
    assert stats.ks_2samp(st_g[:, 0].numpy(), gr1[:, 0].numpy()).pvalue > P_CUT
    assert stats.ks_2samp(st_g[:, 0].numpy(), gr10[:, 0].numpy()).pvalue < P_CUT


def test_gumbel_rao_edges():
    # an impossible class: zero gradient there, no NaN; near-certain rows; 16-bit dtypes
    x = torch.tensor([[0.0, -math.inf, 2.0], [60.0, 0.0, -60.0]], dtype=torch.float64,
                     requires_grad=True)
    y = gumbel_rao(x, 0.3, samples=3, generator=gen(2))
    (grad,) = torch.autograd.grad((y * torch.tensor([1.0, 2.0, 3.0])).sum(), x)
    assert torch.isfinite(grad).all() and grad[0, 1] == 0
    assert y[1, 0] == 1  # e^60 times more likely than the rest
    for dtype in (torch.float16, torch.bfloat16):
        y = gumbel_rao(torch.zeros(4, 3, dtype=dtype), 1.0, generator=gen(2))
        assert y.dtype == dtype and (y.sum(-1) == 1).all()
    assert gumbel_rao(torch.zeros(0, 3), 1.0).shape == (0, 3)


@pytest.mark.parametrize("args, kwargs, exc, match", [
    ((torch.zeros(2, 3), 0.0), {}, ValueError, "argument 'tau' must be > 0"),
    ((torch.zeros(2, 3), -1.0), {}, ValueError, "argument 'tau' must be > 0"),
    ((torch.zeros(2, 3), torch.tensor(1.0, requires_grad=True)), {}, TypeError,
     "'tau' must not require grad"),
    ((torch.zeros(2, 3), 1.0), {"samples": 0}, ValueError, "argument 'samples' must be >= 1"),
    ((torch.zeros(2, 3), 1.0), {"samples": 2.0}, TypeError, "argument 'samples' must be an int"),
    ((torch.zeros(2, 3), 1.0), {"return_index": 1}, TypeError, "'return_index' must be a bool"),
    ((torch.tensor([[0.0, math.nan]]), 1.0), {}, ValueError, "'logits' contains NaN"),
    ((torch.full((1, 2), -math.inf), 1.0), {}, ValueError, "no possible class"),
    ((torch.zeros(2, 0), 1.0), {}, ValueError, "empty rows"),
])
def test_gumbel_rao_bad_arguments(args, kwargs, exc, match):
    with pytest.raises(exc, match="gumbel_rao: .*" + match):
        gumbel_rao(*args, **kwargs)


def test_gumbel_given_argmax_gradcheck():
    # with the noise replayed (a fresh generator per call) it is a smooth function of the logits
    x = torch.tensor([[0.3, -0.7, 1.2], [2.0, 0.0, -1.0]], dtype=torch.float64,
                     requires_grad=True)
    d = torch.tensor([0, 2])
    assert torch.autograd.gradcheck(lambda t: gumbel_given_argmax(t, d, generator=gen(5)), (x,))


def test_gumbel_rao_one_row_and_many_rows():
    # a 1-d row gives what the same row gives as the only row of a batch (same noise)
    x = torch.tensor([0.5, -0.3, 1.0], dtype=torch.float64)
    one, d1 = gumbel_rao(x, 0.5, samples=3, generator=gen(6), return_index=True)
    many, d2 = gumbel_rao(x[None], 0.5, samples=3, generator=gen(6), return_index=True)
    assert one.shape == (3,) and d1.shape == () and torch.equal(one, many[0]) and d1 == d2[0]
    assert gumbel_given_argmax(x, torch.tensor(2), generator=gen(6)).shape == (3,)


def test_gumbel_rao_rejects_plus_inf():
    with pytest.raises(ValueError, match=r"gumbel_rao: .*'logits' contains \+inf"):
        gumbel_rao(torch.tensor([[0.0, math.inf]]), 1.0)


def test_gumbel_rao_large_float32_rows_are_not_tied_to_the_first_class():
    # Cold review R5: without the shift of gumbel_max, logits + G rounded to the float32 spacing
    # of 1e7 (1.0) and class 0 won 61.9 % of the rows of [1e7, 1e7] (1e6: 50.7 %). With it, D is
    # gumbel_max's sample, and the share stays within 5 standard errors of 1/2 (5.7e-7).
    n = 200_000
    x = torch.full((n, 2), 1e7)
    _, d = gumbel_rao(x, 1.0, generator=gen(21), return_index=True)
    assert torch.equal(d, gumbel_max(x, generator=gen(21)))
    assert abs((d == 0).double().mean().item() - 0.5) < 5 * math.sqrt(0.25 / n)
    # and the gradient keeps the conditional noise: on the same draws, logits 2^20 + (0, 0.5)
    # give the gradients of logits (0, 0.5) to float32 rounding (unshifted, every row got the
    # noiseless Jacobian: differences up to 0.9)
    w = torch.tensor([1.0, 3.0])
    grads = []
    for c in (0.0, 2.0**20):
        t = torch.tensor([[0.0, 0.5]]).add(c).expand(20000, 2).clone().requires_grad_()
        y = gumbel_rao(t, 0.5, samples=2, generator=gen(22))
        grads.append(torch.autograd.grad((y * w).sum(), t)[0])
    assert torch.allclose(grads[0], grads[1], rtol=0, atol=1e-4)


@pytest.mark.parametrize("dim", [-1, 0])
def test_gumbel_softmax_hard_large_float32_rows_are_not_tied_to_the_first_class(dim):
    # Cold review R5: unshifted, float32 [1e7, 1e7] gave class 0 in 62.0 % of the rows. Now the
    # sample is gumbel_max's on the same generator, and the share of class 0 is within 5
    # standard errors of 1/2 (5.7e-7); the relaxed sample of 2^20 + (0, 0.5) is that of (0, 0.5)
    # to float32 rounding (unshifted: up to 0.059 apart)
    n = 200_000
    x = torch.full((n, 2), 1e7)
    y = gumbel_softmax(x if dim == -1 else x.T, 1.0, hard=True, dim=dim, generator=gen(23))
    d = y.argmax(dim)
    if dim == -1:  # (the noise of the transposed layout is drawn in another order)
        assert torch.equal(d, gumbel_max(x, generator=gen(23)))
    assert abs((d == 0).double().mean().item() - 0.5) < 5 * math.sqrt(0.25 / n)
    base = torch.tensor([[0.0, 0.5]]).expand(1000, 2)
    soft = [gumbel_softmax(base + c, 0.5, generator=gen(24)) for c in (0.0, 2.0**20)]
    assert torch.allclose(soft[0], soft[1], rtol=0, atol=1e-5)
