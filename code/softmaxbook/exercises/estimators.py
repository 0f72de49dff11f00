"""Checks for the coding exercises of the chapter "REINFORCE and the reparameterisation trick"
(book/06_estimators.ipynb).

* ``estimators-gaussian-kl``: KL(N(mu, diag exp(logvar)) || N(0, I)), summed over the last
  dimension (the missing 1/2, log sigma for log sigma^2 and the wrong axis are caught).
* ``estimators-bernoulli-score``: per-sample score-function estimates of
  d/dl E_{b ~ Bernoulli(sigmoid(l))} f(b) (a score in p instead of l, a wrong sign, and returning
  the exact gradient instead of samples are caught).
* ``estimators-laplace-sampler``: a reparameterised Laplace(loc, scale) sampler (the source's
  uniform on [0, 1], a wrong scale, detached draws and torch's global generator are caught).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import stats

from . import call, exercise, expect_close, expect_true

F64 = dict(dtype=torch.float64)


# ------------------------------------------------------------------------------------------------
@exercise("estimators-gaussian-kl", "KL to the standard normal")
def _check_gaussian_kl(kl):
    """``kl(mu, logvar)`` -> tensor of shape mu.shape[:-1]."""
    cases = [
        ("one dimension", torch.tensor([0.5], **F64), torch.tensor([0.3], **F64)),
        ("q = p", torch.zeros(3, **F64), torch.zeros(3, **F64)),
        ("a batch of 2 in 3 dimensions", torch.tensor([[0.5, -1.0, 2.0], [0.0, 0.1, -0.3]], **F64),
         torch.tensor([[0.3, -0.7, 1.0], [-2.0, 0.0, 0.5]], **F64)),
        ("large variances", torch.tensor([1.0, 2.0], **F64), torch.tensor([8.0, -6.0], **F64)),
    ]
    z = torch.zeros((), **F64)
    for name, mu, lv in cases:
        desc = f"mu = {mu.tolist()}, logvar = {lv.tolist()} ({name})"
        got = call(kl, mu.clone(), lv.clone(), input_desc=desc)
        q = torch.distributions.Normal(mu, torch.exp(0.5 * lv))
        p = torch.distributions.Normal(z, torch.ones((), **F64))
        expected = torch.distributions.kl_divergence(q, p).sum(-1)
        expect_close(got, expected, input_desc=desc, rtol=1e-9, atol=1e-12,
                     hint="per dimension the KL is 1/2 (sigma^2 + mu^2 - 1 - log sigma^2) with "
                          "sigma^2 = exp(logvar); sum it over the last dimension only, so a "
                          "batch keeps its leading dimensions.")
    return len(cases)


# ------------------------------------------------------------------------------------------------
def _bern_exact(fv, logit):
    p = torch.sigmoid(logit)
    return (fv[1] - fv[0]) * p * (1 - p)


@exercise("estimators-bernoulli-score", "score-function estimates for a Bernoulli")
def _check_bernoulli_score(estimates):
    """``estimates(f, logit, n, generator)`` -> tensor (n,) of per-sample estimates."""
    cases = [(torch.tensor([1.0, 4.0], **F64), 0.3), (torch.tensor([-2.0, 0.5], **F64), -1.5),
             (torch.tensor([3.0, 3.0], **F64), 2.0)]
    for fv, l0 in cases:
        def f(b, fv=fv):
            return fv[b.long()]
        logit = torch.tensor(l0, **F64)
        desc = f"f(0) = {fv[0].item()}, f(1) = {fv[1].item()}, logit = {l0}, n = 20000"
        got = call(estimates, f, logit.clone(), 20000, torch.Generator().manual_seed(7),
                   input_desc=desc, no_global_rng=True)
        expect_true(isinstance(got, torch.Tensor) and tuple(got.shape) == (20000,),
                    f"for input {desc} the result should be a tensor of shape (20000,), one "
                    f"estimate per sample; got "
                    f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}.",
                    hint="return the per-sample values f(b_i) * d/dlogit log p(b_i), not their "
                         "mean.")
        got = got.detach().to(torch.float64)
        p = torch.sigmoid(logit)
        allowed = torch.stack([fv[0] * (0 - p), fv[1] * (1 - p)])
        close = (got[:, None] - allowed[None, :]).abs().min(1).values
        expect_true(bool((close < 1e-9 * (1 + allowed.abs().max())).all()),
                    f"for input {desc} the per-sample estimates should take only the two values "
                    f"f(b) * (b - sigmoid(logit)) for b = 0, 1, i.e. "
                    f"{[round(v, 6) for v in allowed.tolist()]}; got e.g. "
                    f"{[round(v, 6) for v in got[:4].tolist()]}.",
                    hint="d/dlogit log Bernoulli(b; sigmoid(logit)) = b - sigmoid(logit): the "
                         "derivative is in the logit, not in the probability.")
        frac1 = float(((got - allowed[1]).abs() < (got - allowed[0]).abs()).double().mean())
        n1 = int(round(frac1 * 20000))
        # two-sided binomial test at 1e-6: a correct sampler fails once in a million
        pval = stats.binomtest(n1, 20000, float(p)).pvalue
        expect_true(pval > 1e-6,
                    f"for input {desc} b = 1 came up in {frac1:.3f} of the samples, but its "
                    f"probability is sigmoid(logit) = {float(p):.3f}.",
                    hint="draw b = 1 with probability sigmoid(logit), e.g. "
                         "(torch.rand(n, generator=generator) < p).")
        exact = float(_bern_exact(fv, logit))
        se = float(got.std()) / math.sqrt(20000) + 1e-12
        expect_true(abs(float(got.mean()) - exact) < 6 * se + 1e-12,
                    f"for input {desc} the mean of your estimates, {float(got.mean()):.4f}, is "
                    f"not the gradient {exact:.4f} (6 standard errors: {6 * se:.4f}).")
    return len(cases)


# ------------------------------------------------------------------------------------------------
@exercise("estimators-laplace-sampler", "a reparameterised Laplace sampler")
def _check_laplace_sampler(sampler):
    """``sampler(loc, scale, n, generator)`` -> tensor (n,), differentiable in loc and scale."""
    n = 20000
    for l0, s0 in ((0.0, 1.0), (-1.5, 0.3)):
        loc = torch.tensor(l0, **F64, requires_grad=True)
        scale = torch.tensor(s0, **F64, requires_grad=True)
        desc = f"loc = {l0}, scale = {s0}, n = {n}"
        x = call(sampler, loc, scale, n, torch.Generator().manual_seed(11), input_desc=desc,
                 no_global_rng=True)
        expect_true(isinstance(x, torch.Tensor) and tuple(x.shape) == (n,),
                    f"for input {desc} the result should be a tensor of shape ({n},), got "
                    f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}.")
        expect_true(not bool(torch.isnan(x).any()),
                    f"for input {desc} some draws are NaN.",
                    hint="ln(1 - 2|eps|) needs |eps| < 1/2: draw eps uniform on (-1/2, 1/2), "
                         "not on (0, 1).")
        expect_true(bool(torch.isfinite(x).all()), f"for input {desc} some draws are infinite.",
                    hint="keep eps away from -1/2 and 1/2 (torch.rand can return 0).")
        pval = stats.kstest(x.detach().numpy().astype(np.float64),
                            stats.laplace(loc=l0, scale=s0).cdf).pvalue
        # KS at 1e-4: a correct sampler fails with probability 1e-4 (deterministic given the
        # generator, so only a sampler that ignores it could flake)
        expect_true(pval > 1e-4,
                    f"for input {desc} the draws do not follow Laplace(loc, scale) "
                    f"(Kolmogorov-Smirnov p = {pval:.2g}).",
                    hint="invert the CDF: x = loc - scale * sgn(eps) * ln(1 - 2|eps|) with eps "
                         "uniform on (-1/2, 1/2).")
        expect_true(x.requires_grad,
                    f"for input {desc} the draws carry no gradient: the sampler is not "
                    f"reparameterised.",
                    hint="compute x from loc and scale with torch operations (no .detach(), "
                         "no .item(), no torch.no_grad).")
        gl, gs = torch.autograd.grad(x.sum(), (loc, scale), allow_unused=True)
        expect_true(gl is not None and gs is not None,
                    f"for input {desc} the draws do not depend on both loc and scale.")
        expect_close(gl, torch.tensor(float(n), **F64), input_desc=desc,
                     what="d(sum of draws)/d loc", rtol=1e-9,
                     hint="each draw is loc plus something: its derivative in loc is 1.")
        expect_close(gs, ((x.detach() - l0) / s0).sum(), input_desc=desc,
                     what="d(sum of draws)/d scale", rtol=1e-7, atol=1e-7,
                     hint="each draw is loc + scale * (a function of eps): its derivative in "
                          "scale is (x - loc) / scale.")
    return 2
