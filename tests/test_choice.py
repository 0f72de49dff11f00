"""Tests of softmaxbook.choice: the Rescorla–Wagner softmax learner, its gradient and its fit."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from softmaxbook import choice as ch
from softmaxbook.choice import (
    fit_biased,
    fit_rw,
    fit_wsls,
    reversal_reward_probs,
    rw_gradient,
    rw_log_likelihood,
    rw_values,
    simulate_bandit,
    simulate_biased,
    simulate_wsls,
    stay_probabilities,
    wsls_log_likelihood,
)

D = torch.float64
PROBS = torch.tensor([0.2, 0.8], dtype=D)


def data(S=4, T=40, seed=0, alpha=None, beta=None):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(S, generator=g, dtype=D) if alpha is None else alpha
    b = 5 * torch.rand(S, generator=g, dtype=D) if beta is None else beta
    c, r = simulate_bandit(a, b, PROBS, T, generator=g)
    return a, b, c, r


# ---------------------------------------------------------------- exact values


def test_values_by_hand():
    # choices 1, 1, 0 with rewards 1, 0, 1 and α = 0.5, V0 = 0:
    # before t0: (0, 0); after t0 (option 1 ← 1): (0, .5); after t1 (option 1 ← 0): (0, .25)
    V = rw_values(torch.tensor([0.5], dtype=D), torch.tensor([[1, 1, 0]]),
                  torch.tensor([[1.0, 0.0, 1.0]], dtype=D))
    assert torch.equal(V[0], torch.tensor([[0, 0], [0, 0.5], [0, 0.25]], dtype=D))


def test_log_likelihood_by_hand():
    a, b = torch.tensor([0.5], dtype=D), torch.tensor([2.0], dtype=D)
    c, r = torch.tensor([[1, 1, 0]]), torch.tensor([[1.0, 0.0, 1.0]], dtype=D)
    # p_t = σ(2 ΔV): ΔV = 0, .5, .25; y = 1, 1, 0
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    want = math.log(0.5) + math.log(sig(1.0)) + math.log(1 - sig(0.5))
    assert rw_log_likelihood(a, b, c, r).item() == pytest.approx(want, abs=1e-14)


def test_beta_zero_is_coin_flips():
    a, b, c, r = data(S=3, T=25)
    ll = rw_log_likelihood(a, torch.zeros(3, dtype=D), c, r)
    assert torch.allclose(ll, torch.full((3,), 25 * math.log(0.5), dtype=D))


def test_initial_value_shifts_values():
    a, b, c, r = data(S=2, T=10)
    V = rw_values(a, c, r, initial_value=0.5)
    assert torch.all(V[:, 0] == 0.5)


def test_causal_timing_choice_uses_values_before_outcome():
    # a learner with α = 1 and huge β repeats a rewarded choice, and the first choice is 50:50
    g = torch.Generator().manual_seed(3)
    a = torch.ones(2000, dtype=D)
    b = torch.full((2000,), 50.0, dtype=D)
    c, r = simulate_bandit(a, b, torch.tensor([1.0, 1.0], dtype=D), 3, generator=g)
    assert abs(c[:, 0].double().mean().item() - 0.5) < 0.05  # 4.5 sd at n = 2000
    assert torch.equal(c[:, 1], c[:, 0]) and torch.equal(c[:, 2], c[:, 0])


# ---------------------------------------------------------------- gradients


def test_gradient_matches_autograd():
    a, b, c, r = data(S=6, T=120, seed=1)
    A, B = a.clone().requires_grad_(), b.clone().requires_grad_()
    rw_log_likelihood(A, B, c, r).sum().backward()
    g_a, g_b = rw_gradient(a, b, c, r)
    torch.testing.assert_close(g_a, A.grad, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(g_b, B.grad, rtol=1e-10, atol=1e-10)


def test_gradient_matches_finite_differences():
    a, b, c, r = data(S=5, T=80, seed=2)
    a = a.clamp(0.05, 0.95)
    g_a, g_b = rw_gradient(a, b, c, r)
    h = 1e-6
    fd_a = (rw_log_likelihood(a + h, b, c, r) - rw_log_likelihood(a - h, b, c, r)) / (2 * h)
    fd_b = (rw_log_likelihood(a, b + h, c, r) - rw_log_likelihood(a, b - h, c, r)) / (2 * h)
    torch.testing.assert_close(g_a, fd_a, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g_b, fd_b, rtol=1e-6, atol=1e-6)


def test_gradcheck_log_likelihood():
    a, b, c, r = data(S=3, T=15, seed=4)
    a = a.clamp(0.1, 0.9).requires_grad_()
    b = b.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: rw_log_likelihood(x, y, c, r), (a, b))


def test_hessian_matches_autograd():
    a, b, c, r = data(S=4, T=60, seed=5)

    def f(x, y):
        return rw_log_likelihood(x, y, c, r).sum()

    H = torch.autograd.functional.hessian(f, (a, b))
    _, _, (h_aa, h_ab, h_bb) = ch._derivatives(a, b, c.T.to(D), r.T, 0.0, 2)
    torch.testing.assert_close(h_aa, torch.diagonal(H[0][0]), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(h_ab, torch.diagonal(H[0][1]), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(h_bb, torch.diagonal(H[1][1]), rtol=1e-9, atol=1e-9)


def test_zeroing_unchosen_sensitivity_is_wrong():
    """SOURCE-ERRATA 6: resetting ∂V/∂α of the unchosen option to 0 gives a wrong gradient."""
    a, b, c, r = data(S=1, T=300, seed=6, alpha=torch.tensor([0.3], dtype=D),
                      beta=torch.tensor([3.0], dtype=D))
    V = rw_values(a, c, r)[0]
    y, rr, al, be = c[0].to(D), r[0], a.item(), b.item()
    dD_wrong, g_wrong = [0.0, 0.0], 0.0
    for t in range(300):
        p = 1 / (1 + math.exp(-be * (V[t, 1] - V[t, 0]).item()))
        g_wrong += be * (y[t].item() - p) * (dD_wrong[1] - dD_wrong[0])
        k = int(y[t])
        new = rr[t].item() - V[t, k].item() + (1 - al) * dD_wrong[k]
        dD_wrong = [0.0, 0.0]
        dD_wrong[k] = new
    g_right = rw_gradient(a, b, c, r)[0].item()
    assert abs(g_wrong - g_right) > 0.2 * abs(g_right)


def test_float32_and_bfloat16_inputs():
    a, b, c, r = data(S=3, T=30)
    ll64 = rw_log_likelihood(a, b, c, r)
    ll32 = rw_log_likelihood(a.float(), b.float(), c, r.float())
    assert ll32.dtype == torch.float32
    torch.testing.assert_close(ll32.double(), ll64, rtol=1e-5, atol=1e-4)
    g16 = rw_gradient(a.bfloat16(), b.bfloat16(), c, r.bfloat16())
    assert g16[0].dtype == torch.bfloat16 and torch.isfinite(g16[0].float()).all()


@settings(max_examples=30, deadline=None)
@given(alpha=st.floats(0.0, 1.0), beta=st.floats(0.0, 1e4), reward=st.floats(-1e3, 1e3),
       seed=st.integers(0, 2**16))
def test_extreme_parameters_stay_finite(alpha, beta, reward, seed):
    g = torch.Generator().manual_seed(seed)
    c = (torch.rand(2, 30, generator=g) < 0.5).long()
    r = torch.full((2, 30), reward, dtype=D)
    a, b = torch.tensor([alpha, alpha], dtype=D), torch.tensor([beta, beta], dtype=D)
    ll = rw_log_likelihood(a, b, c, r)
    g_a, g_b = rw_gradient(a, b, c, r)
    assert torch.all(ll <= 0) and torch.isfinite(ll).all()
    assert torch.isfinite(g_a).all() and torch.isfinite(g_b).all()
    ll_fast = ch._derivatives(a, b, c.T.to(D), r.T, 0.0, 0)
    torch.testing.assert_close(ll_fast, ll, rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------- simulation


def test_simulated_choice_frequencies_match_model():
    """Each simulated choice is a Bernoulli(p_t) draw, p_t from the values before trial t.

    Test: Σ_t (y_t − p_t) over 4000 × 20 choices is ~N(0, Σ p(1−p)); we require |z| < 4.5
    (false-alarm rate ~7e-6). A sampler that used the values *after* the outcome is rejected.
    """
    g = torch.Generator().manual_seed(7)
    S = 4000
    a = torch.full((S,), 0.4, dtype=D)
    b = torch.full((S,), 3.0, dtype=D)
    c, r = simulate_bandit(a, b, PROBS, 20, generator=g)
    V = rw_values(a, c, r)
    p = torch.sigmoid(b[:, None] * (V[..., 1] - V[..., 0]))
    z = ((c - p).sum() / (p * (1 - p)).sum().sqrt()).item()
    assert abs(z) < 4.5
    # the "values after the outcome" sampler (SOURCE-ERRATA 10): its choices are not
    # Bernoulli(p_t); they are chosen knowing r_t
    c_bad, r_bad = _acausal_sampler(a, b, 20, g)
    V_bad = rw_values(a, c_bad, r_bad)
    p_bad = torch.sigmoid(b[:, None] * (V_bad[..., 1] - V_bad[..., 0]))
    z_bad = ((c_bad - p_bad).sum() / (p_bad * (1 - p_bad)).sum().sqrt()).item()
    assert abs(z_bad) > 4.5


def _acausal_sampler(a, b, T, g):
    S = a.shape[0]
    V = torch.zeros(S, 2, dtype=D)
    cs, rs = [], []
    rows = torch.arange(S)
    for _ in range(T):
        rew = (torch.rand(S, 2, generator=g, dtype=D) < PROBS).to(D)  # outcomes of both options
        peek = V + a[:, None] * (rew - V)  # values already containing this trial's outcome
        c = (torch.rand(S, generator=g, dtype=D) < torch.sigmoid(b * (peek[:, 1] - peek[:, 0]))).long()
        r = rew[rows, c]
        V[rows, c] += a * (r - V[rows, c])
        cs.append(c)
        rs.append(r)
    return torch.stack(cs, 1), torch.stack(rs, 1)


def test_simulated_rewards_follow_reward_probs():
    # reward rate of option 1 among its choices ≈ 0.8 (binomial sd ≈ 0.002 at n ≈ 40k; 5 sd)
    g = torch.Generator().manual_seed(8)
    a, b = torch.full((500,), 0.3, dtype=D), torch.full((500,), 4.0, dtype=D)
    c, r = simulate_bandit(a, b, PROBS, 100, generator=g)
    rate = r[c == 1].mean().item()
    n = int((c == 1).sum())
    assert abs(rate - 0.8) < 5 * math.sqrt(0.16 / n)


def test_per_trial_reward_probs_and_generator_reproducible():
    S, T = 3, 12
    probs = torch.rand(S, T, 2, generator=torch.Generator().manual_seed(0), dtype=D)
    a, b = torch.full((S,), 0.5, dtype=D), torch.ones(S, dtype=D)
    out1 = simulate_bandit(a, b, probs, T, generator=torch.Generator().manual_seed(1))
    out2 = simulate_bandit(a, b, probs, T, generator=torch.Generator().manual_seed(1))
    assert torch.equal(out1[0], out2[0]) and torch.equal(out1[1], out2[1])
    assert out1[0].dtype == torch.long and out1[1].dtype == D


def test_reversal_reward_probs():
    p = reversal_reward_probs(2, 7, 3, 0.9)
    assert p.shape == (2, 7, 2)
    want1 = torch.tensor([0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.9], dtype=D)
    torch.testing.assert_close(p[1, :, 1], want1)
    torch.testing.assert_close(p[..., 0] + p[..., 1], torch.ones(2, 7, dtype=D))
    with pytest.raises(ValueError, match="argument 'p_good' must lie in"):
        reversal_reward_probs(2, 7, 3, 1.5)
    with pytest.raises(ValueError, match="argument 'block' must be >= 1"):
        reversal_reward_probs(2, 7, 0)


# ---------------------------------------------------------------- fitting


def test_fit_finds_the_maximum_of_a_grid():
    a, b, c, r = data(S=3, T=200, seed=9, alpha=torch.tensor([0.2, 0.5, 0.8], dtype=D),
                      beta=torch.tensor([2.0, 5.0, 8.0], dtype=D))
    fit = fit_rw(c, r, n_starts=4, generator=torch.Generator().manual_seed(0))
    assert fit.converged.all()
    # the estimate beats every point of a fine grid, and the gradient vanishes there
    ag = torch.linspace(0.01, 0.99, 99, dtype=D)
    bg = torch.linspace(0.1, 20, 100, dtype=D)
    A, B = torch.meshgrid(ag, bg, indexing="ij")
    for s in range(3):
        cs, rs = c[s:s + 1].expand(A.numel(), -1), r[s:s + 1].expand(A.numel(), -1)
        grid = rw_log_likelihood(A.reshape(-1), B.reshape(-1), cs, rs)
        assert fit.log_likelihood[s] >= grid.max() - 1e-9
    g_a, g_b = rw_gradient(fit.alpha, fit.beta, c, r)
    assert (g_a.abs() * fit.alpha * (1 - fit.alpha)).max() < 1e-3
    # at the bound β = beta_max the likelihood may still rise (projected gradient ≥ 0)
    at_bound = torch.isclose(fit.beta, torch.tensor(100.0, dtype=D))
    assert torch.all(torch.where(at_bound, g_b > 0, (g_b * fit.beta).abs() < 1e-3))
    torch.testing.assert_close(fit.log_likelihood, rw_log_likelihood(fit.alpha, fit.beta, c, r))


def _nll_python(theta, choices, rewards):
    """Independent pure-Python negative log-likelihood in (logit α, log β)."""
    alpha, beta = 1 / (1 + math.exp(-theta[0])), math.exp(theta[1])
    v, nll = [0.0, 0.0], 0.0
    for c, r in zip(choices, rewards):
        p1 = 1 / (1 + math.exp(-beta * (v[1] - v[0])))
        nll -= math.log(p1 if c else 1 - p1)
        v[c] += alpha * (r - v[c])
    return nll


def test_fit_agrees_with_scipy():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    a, b, c, r = data(S=3, T=150, seed=10)
    fit = fit_rw(c, r, n_starts=3, generator=torch.Generator().manual_seed(1))
    for s in range(3):
        best = min(
            (scipy_optimize.minimize(_nll_python, x0, args=(c[s].tolist(), r[s].tolist()),
                                     method="Nelder-Mead",
                                     options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 2000})
             for x0 in ([0.0, 0.0], [-2.0, 1.5], [2.0, 2.0])),
            key=lambda res: res.fun,
        )
        assert fit.log_likelihood[s].item() >= -best.fun - 1e-6


def test_fit_keeps_best_start_and_shapes():
    a, b, c, r = data(S=5, T=100, seed=11)
    fit = fit_rw(c, r, n_starts=3, generator=torch.Generator().manual_seed(2))
    assert fit.alpha.shape == fit.beta.shape == fit.log_likelihood.shape == (5,)
    assert fit.start_log_likelihoods.shape == (5, 3)
    torch.testing.assert_close(fit.log_likelihood, fit.start_log_likelihoods.max(1).values)
    assert torch.all((fit.alpha >= 0) & (fit.alpha <= 1) & (fit.beta > 0) & (fit.beta <= 100))


def test_fit_respects_beta_max_for_deterministic_chooser():
    # always choosing the option that always pays: ℓ rises towards its supremum as β → ∞
    c = torch.ones(2, 50, dtype=torch.long)
    c[:, 0] = 0  # first choice 50:50, the rest predictable
    r = torch.ones(2, 50, dtype=D)
    r[:, 0] = 0.0
    fit = fit_rw(c, r, n_starts=2, generator=torch.Generator().manual_seed(0), beta_max=50.0)
    # only the two tied trials (0 and 1) are uncertain: sup ℓ = 2 log ½, approached as β grows
    assert torch.allclose(fit.log_likelihood, torch.full((2,), 2 * math.log(0.5), dtype=D),
                          atol=1e-6)
    assert torch.all((fit.beta > 10) & (fit.beta <= 50 + 1e-9))


def test_fit_explicit_starts_float32():
    a, b, c, r = data(S=2, T=80, seed=12)
    starts = torch.tensor([[[0.5, 1.0]], [[0.3, 3.0]]], dtype=D)
    fit = fit_rw(c, r.float(), starts=starts)
    assert fit.alpha.dtype == torch.float32 and fit.start_log_likelihoods.shape == (2, 1)


def test_one_long_participant_likelihood_does_not_overflow():
    """Review, third edition: _derivatives summed log(1 + e^{-|η|}) as the log of a product of
    up to 65536 // N factors in [1, 2], which overflows (ℓ = −inf) for one participant with a
    long session; a nearly random chooser (factors near 2) overflowed after ~1100 trials."""
    a, b, c, r = data(S=1, T=3000, seed=21, alpha=torch.tensor([0.3], dtype=D),
                      beta=torch.tensor([0.5], dtype=D))
    grid_a = torch.tensor([0.1, 0.5, 0.9], dtype=D)
    for beta in (0.01, 0.5, 5.0):
        for alpha in grid_a:
            ll = ch._derivatives(alpha.reshape(1), torch.tensor([beta], dtype=D), c.T.to(D),
                                 r.T, 0.0, 2)[0]
            ref = rw_log_likelihood(alpha.reshape(1), torch.tensor([beta], dtype=D), c, r)
            torch.testing.assert_close(ll, ref, rtol=1e-12, atol=0)
    # float32 work dtype (rw_gradient on float32 inputs): products of ≤ 123 factors
    ll32 = ch._derivatives(torch.tensor([0.3]), torch.tensor([0.01]), c.T.float(),
                           r.T.float(), 0.0, 1)[0]
    assert torch.isfinite(ll32).all()
    torch.testing.assert_close(ll32.double(), rw_log_likelihood(
        torch.tensor([0.3], dtype=D), torch.tensor([0.01], dtype=D), c, r), rtol=1e-4, atol=0)
    # the fit of the single participant equals its fit among 100 copies
    fit1 = fit_rw(c, r, n_starts=5, generator=torch.Generator().manual_seed(1))
    fit100 = fit_rw(c.expand(100, -1), r.expand(100, -1), n_starts=5,
                    generator=torch.Generator().manual_seed(1))
    assert torch.isfinite(fit1.log_likelihood).all() and fit1.converged.all()
    torch.testing.assert_close(fit1.log_likelihood, rw_log_likelihood(fit1.alpha, fit1.beta, c, r))
    torch.testing.assert_close(fit1.log_likelihood[0], fit100.log_likelihood.max(), atol=1e-7,
                               rtol=0)
    torch.testing.assert_close(fit1.alpha[0], fit100.alpha[fit100.log_likelihood.argmax()],
                               atol=1e-4, rtol=0)


def test_fit_never_converged_at_non_finite_log_likelihood(monkeypatch):
    """Review, third edition: fit_rw returned converged=True with log_likelihood = -inf."""
    a, b, c, r = data(S=2, T=50, seed=22)
    original = ch._derivatives

    def broken(alpha, *args, **kwargs):
        out = original(alpha, *args, **kwargs)
        return (out[0] - math.inf,) + tuple(out[1:])

    monkeypatch.setattr(ch, "_derivatives", broken)
    fit = fit_rw(c, r, n_starts=2, generator=torch.Generator().manual_seed(0))
    assert torch.isinf(fit.log_likelihood).all()
    assert not fit.converged.any()


# ---------------------------------------------------------------- alternative models


def test_biased_and_wsls_closed_forms_are_maxima():
    g = torch.Generator().manual_seed(13)
    c, r = simulate_wsls(torch.tensor([0.1, 0.4, 1.0], dtype=D), PROBS, 60, generator=g)
    eps, ll = fit_wsls(c, r)
    grid = torch.linspace(0, 1, 201, dtype=D)
    for s in range(3):
        lls = wsls_log_likelihood(grid, c[s:s + 1].expand(201, -1), r[s:s + 1].expand(201, -1))
        assert ll[s] >= lls.max() - 1e-12
    bias, ll_b = fit_biased(c, dtype=D)
    torch.testing.assert_close(bias, c.to(D).mean(1))
    assert torch.all(ll_b <= 0)


def test_wsls_log_likelihood_by_hand():
    # choices 0, 0, 1; rewards 1, 0, 0: trial 1 stays after a win (rule), trial 2 shifts after
    # a loss (rule): ℓ = log ½ + 2 log(1 − ε/2)
    ll = wsls_log_likelihood(torch.tensor([0.2], dtype=D), torch.tensor([[0, 0, 1]]),
                             torch.tensor([[1.0, 0.0, 0.0]], dtype=D))
    assert ll.item() == pytest.approx(math.log(0.5) + 2 * math.log(0.9), abs=1e-14)


def test_wsls_sampler_follows_rule_at_rate():
    # rule followed with probability 1 − ε/2 = 0.85; n ≈ 99k trials, sd ≈ 0.0011; 5 sd
    g = torch.Generator().manual_seed(14)
    c, r = simulate_wsls(torch.full((1000,), 0.3, dtype=D), PROBS, 100, generator=g)
    rate = ch._wsls_consistent(c, r).to(D).mean().item()
    assert abs(rate - 0.85) < 5 * math.sqrt(0.85 * 0.15 / 99000)
    # a sampler that ignores the rule (biased random chooser) is rejected by the same test
    c2, r2 = simulate_biased(torch.full((1000,), 0.5, dtype=D), PROBS, 100, generator=g)
    rate2 = ch._wsls_consistent(c2, r2).to(D).mean().item()
    assert abs(rate2 - 0.85) > 5 * math.sqrt(0.85 * 0.15 / 99000)


def test_biased_sampler_rate():
    g = torch.Generator().manual_seed(15)
    c, _ = simulate_biased(torch.full((200,), 0.7, dtype=D), PROBS, 100, generator=g)
    # n = 20000, sd ≈ 0.0032; 5 sd
    assert abs(c.to(D).mean().item() - 0.7) < 5 * math.sqrt(0.21 / 20000)


# ---------------------------------------------------------------- model-free signatures


def test_stay_probabilities_by_hand():
    # trials 1…5 after: win (stay), loss (switch), win (stay), loss (stay), win (switch)
    c = torch.tensor([[0, 0, 1, 1, 1, 0]])
    r = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]], dtype=D)
    win, loss = stay_probabilities(c, r)
    assert win.item() == pytest.approx(2 / 3, abs=1e-15)
    assert loss.item() == pytest.approx(1 / 2, abs=1e-15)
    assert win.dtype == loss.dtype == D
    # the last trial's reward is never used (nothing follows it)
    r2 = r.clone()
    r2[0, -1] = 1.0
    assert torch.equal(torch.stack(stay_probabilities(c, r2)), torch.stack((win, loss)))
    # real-valued rewards: a win is r > 0
    win_f, loss_f = stay_probabilities(c, r * 2.5 - 0.5)  # 2.0 or −0.5
    assert torch.equal(torch.stack((win_f, loss_f)), torch.stack((win, loss)))


def test_stay_probabilities_undefined_is_nan_and_batches_independent():
    c = torch.tensor([[0, 0, 0], [1, 0, 1]])
    r = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 1.0]], dtype=torch.float32)
    win, loss = stay_probabilities(c, r)
    assert win.dtype == torch.float32
    assert win[0].item() == 1.0 and math.isnan(loss[0].item())  # never lost
    assert math.isnan(win[1].item()) and loss[1].item() == 0.0  # never won before trial 2


def test_stay_probabilities_of_wsls_and_biased_samplers():
    # WSLS: p(stay | win) = 1 − ε/2 = 0.9, p(stay | loss) = ε/2 = 0.1. With 400 × 200 trials
    # each proportion has sd ≤ 0.0015 (n ≥ 15000 per condition); 6 sd.
    g = torch.Generator().manual_seed(16)
    c, r = simulate_wsls(torch.full((400,), 0.2, dtype=D), PROBS, 200, generator=g)
    win, loss = stay_probabilities(c, r)
    stay = c[:, 1:] == c[:, :-1]
    won = r[:, :-1] > 0
    pooled_win = stay[won].to(D).mean().item()
    pooled_loss = stay[~won].to(D).mean().item()
    assert abs(pooled_win - 0.9) < 0.009 and abs(pooled_loss - 0.1) < 0.009
    # the per-participant values average to the same within their spread
    assert abs(win.mean().item() - 0.9) < 0.01 and abs(loss.mean().item() - 0.1) < 0.01
    # biased random, b = 0.7, on the reversal task (each option the better one half the time):
    # both b² + (1 − b)² = 0.58 (sd ≤ 0.004 each); a WSLS sampler fails the same test, so it
    # can fail
    rev = reversal_reward_probs(400, 200, 50)
    c2, r2 = simulate_biased(torch.full((400,), 0.7, dtype=D), rev, 200, generator=g)
    win2, loss2 = stay_probabilities(c2, r2)
    for value in (win2.mean().item(), loss2.mean().item()):
        assert abs(value - 0.58) < 0.024
    assert abs(win.mean().item() - 0.58) > 0.024


def test_stay_probabilities_errors():
    with pytest.raises(ValueError, match="stay_probabilities: argument 'choices' needs at least 2"):
        stay_probabilities(torch.tensor([[1]]), torch.tensor([[1.0]], dtype=D))
    with pytest.raises(ValueError, match="stay_probabilities: argument 'choices' must contain only"):
        stay_probabilities(torch.tensor([[0, 2]]), torch.tensor([[1.0, 0.0]], dtype=D))
    with pytest.raises(ValueError, match="'choices' and 'rewards' must have the same shape"):
        stay_probabilities(torch.tensor([[0, 1]]), torch.tensor([[1.0, 0.0, 1.0]], dtype=D))
    with pytest.raises(TypeError, match="stay_probabilities: argument 'rewards' must have a floating"):
        stay_probabilities(torch.tensor([[0, 1]]), torch.tensor([[1, 0]]))


# ---------------------------------------------------------------- bad input


def test_error_mismatched_shapes():
    a, b, c, r = data(S=3, T=10)
    with pytest.raises(ValueError, match="'choices' and 'rewards' must have the same shape"):
        rw_log_likelihood(a, b, c, r[:, :5])
    with pytest.raises(ValueError, match="participants"):
        rw_log_likelihood(a[:2], b[:2], c, r)
    with pytest.raises(ValueError, match="'alpha' and 'beta' must have the same shape"):
        rw_gradient(a, b[:2], c, r)
    with pytest.raises(ValueError, match="argument 'alpha' must have shape"):
        rw_values(a[:, None], c, r)
    with pytest.raises(ValueError, match="argument 'choices' must have shape"):
        fit_rw(c[0], r[0])
    with pytest.raises(ValueError, match="argument 'reward_probs' must have shape"):
        simulate_bandit(a, b, torch.ones(3, dtype=D) / 2, 10)
    with pytest.raises(ValueError, match="argument 'starts' must have shape"):
        fit_rw(c, r, starts=torch.full((3, 2), 0.5, dtype=D))


def test_error_choices_not_binary():
    a, b, c, r = data(S=2, T=10)
    with pytest.raises(ValueError, match="argument 'choices' must contain only 0 and 1"):
        rw_log_likelihood(a, b, c * 2, r)
    with pytest.raises(ValueError, match="argument 'choices' must contain only 0 and 1"):
        fit_rw(c.to(D) - 0.5, r)


def test_error_alpha_outside_unit_interval():
    a, b, c, r = data(S=2, T=10)
    with pytest.raises(ValueError, match=r"argument 'alpha' must lie in \[0, 1\]"):
        rw_log_likelihood(a + 1.5, b, c, r)
    with pytest.raises(ValueError, match=r"argument 'alpha' must lie in \[0, 1\]"):
        simulate_bandit(-a - 0.1, b, PROBS, 5)


def test_error_negative_beta():
    a, b, c, r = data(S=2, T=10)
    with pytest.raises(ValueError, match="argument 'beta' must be >= 0"):
        rw_gradient(a, -b - 1, c, r)


def test_error_nan():
    a, b, c, r = data(S=2, T=10)
    bad = a.clone()
    bad[1] = float("nan")
    with pytest.raises(ValueError, match="argument 'alpha' contains NaN"):
        rw_log_likelihood(bad, b, c, r)
    r2 = r.clone()
    r2[0, 3] = float("nan")
    with pytest.raises(ValueError, match="argument 'rewards' contains NaN"):
        fit_rw(c, r2)
    c2 = c.to(D)
    c2[0, 0] = float("nan")
    with pytest.raises(ValueError, match="argument 'choices' contains NaN"):
        rw_gradient(a, b, c2, r)


def test_error_types_and_numbers():
    a, b, c, r = data(S=2, T=10)
    with pytest.raises(TypeError, match="argument 'alpha' must be a torch.Tensor"):
        rw_log_likelihood([0.1, 0.2], b, c, r)
    with pytest.raises(TypeError, match="argument 'rewards' must have a floating-point dtype"):
        rw_log_likelihood(a, b, c, c)
    with pytest.raises(ValueError, match="argument 'n_trials' must be >= 1"):
        simulate_bandit(a, b, PROBS, 0)
    with pytest.raises(ValueError, match="argument 'n_starts' must be >= 1"):
        fit_rw(c, r, n_starts=0)
    with pytest.raises(ValueError, match="argument 'beta_max' must be > 0"):
        fit_rw(c, r, beta_max=-1.0)
    with pytest.raises(ValueError, match="argument 'initial_value' must be finite"):
        rw_values(a, c, r, initial_value=float("inf"))
    with pytest.raises(ValueError, match="argument 'rewards' must be finite"):
        rw_values(a, c, r.masked_fill(r == r, float("inf")))
    with pytest.raises(ValueError, match=r"argument 'epsilon' must lie in \[0, 1\]"):
        simulate_wsls(torch.tensor([1.5], dtype=D), PROBS, 10)
    with pytest.raises(TypeError, match="argument 'generator'"):
        simulate_bandit(a, b, PROBS, 5, generator=0)


def test_benchmark_quick_runs():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_choice.py"
    out = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "fit_rw" in out and "scipy" in out


# ------------------------------------------------------------------------------------------------
# fit_rw with a prior: maximum a posteriori (issue 26, section 2)
# ------------------------------------------------------------------------------------------------
def _map_data(S=6, T=120, seed=26):
    from softmaxbook.choice import reversal_reward_probs, simulate_bandit
    g = torch.Generator().manual_seed(seed)
    alpha = 0.1 + 0.8 * torch.rand(S, generator=g, dtype=torch.float64)
    beta = 0.5 + 8 * torch.rand(S, generator=g, dtype=torch.float64)
    c, r = simulate_bandit(alpha, beta, reversal_reward_probs(S, T, 40), T, generator=g)
    return c, r, g


PRIOR = ((0.0, 1.0), (1.0, 1.0))  # logit alpha ~ N(0, 1), log beta ~ N(1, 1)


# unequal means and sds: with PRIOR's equal sds a prior that swaps the sds of logit alpha and
# log beta passed every test (cold review R5, finding 3)
PRIOR_UNEQUAL = ((0.5, 0.7), (2.0, 0.6))


@pytest.mark.parametrize("prior, S", [(PRIOR, 6), (PRIOR_UNEQUAL, 3)])
def test_map_equals_a_direct_maximisation_of_the_posterior(prior, S):
    from scipy.optimize import minimize
    from softmaxbook.choice import fit_rw, rw_log_likelihood
    c, r, g = _map_data(S=S)
    fit = fit_rw(c, r, n_starts=4, generator=g, prior=prior)
    mean, sd = torch.tensor(prior[0], dtype=torch.float64), torch.tensor(prior[1],
                                                                         dtype=torch.float64)
    for s in range(c.shape[0]):
        def neg_post(th):
            th = torch.tensor(th, dtype=torch.float64)
            ll = rw_log_likelihood(torch.sigmoid(th[:1]), torch.exp(th[1:]), c[s:s + 1],
                                   r[s:s + 1])
            return float(-(ll.sum() - 0.5 * (((th - mean) / sd) ** 2).sum()))
        best = min((minimize(neg_post, x0, method="Nelder-Mead",
                             options=dict(xatol=1e-10, fatol=1e-12, maxiter=4000))
                    for x0 in ([0.0, 1.0], [2.0, 0.0], [-2.0, 2.0])), key=lambda o: o.fun)
        assert float(fit.log_posterior[s]) == pytest.approx(-best.fun, abs=1e-7)
        assert float(fit.log_posterior[s]) >= -best.fun - 1e-9
        assert float(torch.logit(fit.alpha[s])) == pytest.approx(best.x[0], abs=1e-4)
        assert float(torch.log(fit.beta[s])) == pytest.approx(best.x[1], abs=1e-4)
    # the parts: log_likelihood is ℓ at the estimate, log_posterior adds the prior
    ll = rw_log_likelihood(fit.alpha, fit.beta, c, r)
    torch.testing.assert_close(fit.log_likelihood, ll, rtol=0, atol=1e-9)
    th = torch.stack([torch.logit(fit.alpha), torch.log(fit.beta)], 1)
    lp = -0.5 * (((th - mean) / sd) ** 2).sum(1)
    torch.testing.assert_close(fit.log_posterior, ll + lp, rtol=0, atol=1e-9)
    assert fit.converged.all()


def test_map_gradient_vanishes_and_without_prior_nothing_changes():
    from softmaxbook.choice import fit_rw, rw_log_likelihood
    c, r, _ = _map_data(S=4, seed=3)
    starts = torch.tensor([[[0.3, 2.0], [0.7, 0.5]]] * 4, dtype=torch.float64)
    fit = fit_rw(c, r, starts=starts, prior=PRIOR)
    th = torch.stack([torch.logit(fit.alpha), torch.log(fit.beta)], 1).requires_grad_(True)
    mean, sd = torch.tensor(PRIOR[0]).double(), torch.tensor(PRIOR[1]).double()
    post = (rw_log_likelihood(torch.sigmoid(th[:, 0]), torch.exp(th[:, 1]), c, r).sum()
            - 0.5 * (((th - mean) / sd) ** 2).sum())
    (grad,) = torch.autograd.grad(post, th)
    # the fit stops once the Newton step predicts a gain below 1e-11 (1 + |l|): gradients of a
    # few 1e-6 remain; a prior gradient with the wrong sign or scale leaves O(1) ones
    assert float(grad.abs().max()) < 1e-4
    a = fit_rw(c, r, starts=starts)
    b = fit_rw(c, r, starts=starts, prior=None)
    assert a.log_posterior is None and b.log_posterior is None
    for x, y in zip(a[:5], b[:5]):
        assert torch.equal(x, y)
    # a very wide prior is maximum likelihood, to the prior's pull
    wide = fit_rw(c, r, starts=starts, prior=((0.0, 0.0), (1e3, 1e3)))
    torch.testing.assert_close(wide.alpha, a.alpha, rtol=0, atol=1e-4)


def test_map_keeps_a_predictable_participant_off_the_bound():
    from softmaxbook.choice import fit_rw
    # always the rewarded option after two coin flips: ℓ rises towards its supremum -2 log 2 as
    # β grows, and ML crawls up the ridge until the stall rule stops it
    T = 60
    c = torch.ones(1, T, dtype=torch.float64)
    r = torch.ones(1, T, dtype=torch.float64)
    c[0, 0] = 0.0
    r[0, 0] = 0.0
    ml = fit_rw(c, r, n_starts=3, generator=torch.Generator().manual_seed(0))
    mp = fit_rw(c, r, n_starts=3, generator=torch.Generator().manual_seed(0), prior=PRIOR)
    assert float(ml.log_likelihood) == pytest.approx(-2 * math.log(2), abs=1e-6)
    assert float(ml.beta) > 20.0
    assert float(mp.beta) < 0.5 * float(ml.beta) and bool(mp.converged.all())
    assert float(mp.log_likelihood) < float(ml.log_likelihood)


def test_map_bad_prior():
    from softmaxbook.choice import fit_rw
    c, r, g = _map_data(S=2)
    with pytest.raises(TypeError, match="argument 'prior' must be a pair"):
        fit_rw(c, r, generator=g, prior=1.0)
    with pytest.raises(ValueError, match="argument 'prior' needs a sd"):
        fit_rw(c, r, generator=g, prior=((0.0, 1.0), (1.0,)))
    with pytest.raises(ValueError, match="sd > 0"):
        fit_rw(c, r, generator=g, prior=((0.0, 1.0), (1.0, 0.0)))
    with pytest.raises(ValueError, match="must be finite"):
        fit_rw(c, r, generator=g, prior=((0.0, math.inf), (1.0, 1.0)))
    with pytest.raises(TypeError, match="must hold numbers"):
        fit_rw(c, r, generator=g, prior=(("a", "b"), (1.0, 1.0)))


def test_map_prior_terms_match_autograd():
    # the gradient and Hessian of log prior that the Newton method adds (cold review R5,
    # finding 3: a Hessian 4x too large, or the two sds swapped, passed the tests above)
    from softmaxbook.choice import _add_prior, _check_prior
    prior = _check_prior(PRIOR_UNEQUAL, "fit_rw", torch.device("cpu"), torch.float64)
    g0 = torch.Generator().manual_seed(5)
    theta = 3 * torch.randn(7, 2, generator=g0, dtype=torch.float64)
    zeros = torch.zeros(7, dtype=torch.float64)
    lp, g, h = _add_prior(zeros, torch.zeros(7, 2, dtype=torch.float64),
                          torch.zeros(7, 3, dtype=torch.float64), theta, prior)
    mean = torch.tensor(PRIOR_UNEQUAL[0], dtype=torch.float64)
    sd = torch.tensor(PRIOR_UNEQUAL[1], dtype=torch.float64)

    def log_prior(th):
        return -0.5 * (((th - mean) / sd) ** 2).sum()

    for n in range(7):
        th = theta[n]
        torch.testing.assert_close(lp[n], log_prior(th), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(g[n], torch.func.grad(log_prior)(th), rtol=1e-12,
                                   atol=1e-12)
        H = torch.func.hessian(log_prior)(th)
        torch.testing.assert_close(h[n], torch.stack((H[0, 0], H[0, 1], H[1, 1])),
                                   rtol=1e-12, atol=1e-12)


def test_map_log_likelihood_exact_with_a_tight_prior_outside_the_box():
    # objective - log prior cancelled: sd 1e-8 centred at beta = 1e4 left l off by ~6
    # (cold review R5, finding 4)
    from softmaxbook.choice import fit_rw, rw_log_likelihood
    c, r, g = _map_data(S=3)
    fit = fit_rw(c, r, n_starts=2, generator=g,
                 prior=((0.0, math.log(1e4)), (1.0, 1e-8)))
    torch.testing.assert_close(fit.log_likelihood,
                               rw_log_likelihood(fit.alpha, fit.beta, c, r),
                               rtol=0, atol=1e-9)
    assert bool((fit.beta > 99.0).all())


def test_map_bad_prior_more():
    from softmaxbook.choice import fit_rw
    c, r, g = _map_data(S=2)
    with pytest.raises(ValueError, match="argument 'prior' has an sd too small"):
        fit_rw(c, r, generator=g, prior=((0.0, 1.0), (1e-200, 1.0)))
    with pytest.raises(TypeError, match="got a tuple of length 4"):
        fit_rw(c, r, generator=g, prior=(0.0, 1.0, 1.0, 1.0))


# ---------------------------------------------------------------- learner with a choice kernel
# (Wilson & Collins 2019, model 5): simulate_ck, ck_log_likelihood, ck_gradient, fit_ck

from softmaxbook.choice import ck_gradient, ck_log_likelihood, fit_ck, simulate_ck  # noqa: E402


def ck_data(S=4, T=40, seed=0, beta_c=None):
    g = torch.Generator().manual_seed(seed)
    a = 0.05 + 0.9 * torch.rand(S, generator=g, dtype=D)
    b = 5 * torch.rand(S, generator=g, dtype=D)
    ac = 0.05 + 0.9 * torch.rand(S, generator=g, dtype=D)
    bc = 4 * torch.rand(S, generator=g, dtype=D) - 2 if beta_c is None else beta_c
    c, r = simulate_ck(a, b, ac, bc, PROBS, T, generator=g)
    return (a, b, ac, bc), c, r


def test_ck_log_likelihood_by_hand():
    # T = 3, α = 0.5, β = 2, α_c = 0.4, β_c = 1.5; choices 1, 1, 0; rewards 1, 0, 1
    a, b, ac, bc = 0.5, 2.0, 0.4, 1.5
    c = torch.tensor([[1, 1, 0]])
    r = torch.tensor([[1.0, 0.0, 1.0]], dtype=D)
    V, dK, ll = [0.0, 0.0], 0.0, 0.0
    for ct, rt in zip([1, 1, 0], [1.0, 0.0, 1.0]):
        eta = b * (V[1] - V[0]) + bc * dK
        p = 1 / (1 + math.exp(-eta))
        ll += math.log(p if ct == 1 else 1 - p)
        V[ct] += a * (rt - V[ct])
        dK += ac * ((2 * ct - 1) - dK)
    got = ck_log_likelihood(*(torch.tensor([x], dtype=D) for x in (a, b, ac, bc)), c, r)
    assert abs(float(got) - ll) < 1e-14


def test_ck_reduces_to_rw_without_kernel():
    (a, b, ac, _), c, r = ck_data(S=3, T=50, beta_c=torch.zeros(3, dtype=D))
    z = torch.zeros(3, dtype=D)
    assert torch.equal(ck_log_likelihood(a, b, ac, z, c, r), rw_log_likelihood(a, b, c, r))
    g = ck_gradient(a, b, ac, z, c, r)
    torch.testing.assert_close(g[0], rw_gradient(a, b, c, r)[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g[1], rw_gradient(a, b, c, r)[1], rtol=1e-12, atol=1e-12)
    assert torch.all(g[2] == 0)  # α_c has no effect when β_c = 0


def test_ck_gradient_matches_autograd_and_finite_differences():
    th, c, r = ck_data(S=5, T=80, seed=1)
    leaves = [x.clone().requires_grad_() for x in th]
    ck_log_likelihood(*leaves, c, r).sum().backward()
    mine = ck_gradient(*th, c, r)
    h = 1e-6
    for i, (leaf, gi) in enumerate(zip(leaves, mine)):
        torch.testing.assert_close(gi, leaf.grad, rtol=1e-10, atol=1e-10)
        up = [x + h * (j == i) for j, x in enumerate(th)]
        down = [x - h * (j == i) for j, x in enumerate(th)]
        fd = (ck_log_likelihood(*up, c, r) - ck_log_likelihood(*down, c, r)) / (2 * h)
        torch.testing.assert_close(gi, fd, rtol=1e-6, atol=1e-6)


def test_ck_gradcheck():
    th, c, r = ck_data(S=2, T=12, seed=2)
    leaves = tuple(x.clone().requires_grad_() for x in th)
    assert torch.autograd.gradcheck(lambda *p: ck_log_likelihood(*p, c, r), leaves)


def test_ck_wrong_kernel_recursions_give_wrong_gradients():
    """The two mistakes the chapter warns about change ∂ℓ/∂α_c (so the test can fail)."""
    th, c, r = ck_data(S=1, T=60, seed=3, beta_c=torch.tensor([1.5], dtype=D))
    a, b, ac, bc = (float(x) for x in th)
    right = float(ck_gradient(*th, c, r)[2])

    def grad_ac(post_update=False, no_recursion=False):
        V, dK, E, g = [0.0, 0.0], 0.0, 0.0, 0.0
        for ct, rt in zip(c[0].tolist(), r[0].tolist()):
            s = 2 * ct - 1
            if post_update:
                E, dK = (1 - ac) * E + s - dK, dK + ac * (s - dK)
            p = 1 / (1 + math.exp(-(b * (V[1] - V[0]) + bc * dK)))
            g += (ct - p) * bc * E
            if not post_update:
                E = (0.0 if no_recursion else (1 - ac) * E) + s - dK
                dK += ac * (s - dK)
            V[ct] += a * (rt - V[ct])
        return g

    assert abs(grad_ac() - right) < 1e-10
    assert abs(grad_ac(post_update=True) - right) > 0.05 * abs(right)
    assert abs(grad_ac(no_recursion=True) - right) > 0.05 * abs(right)


def test_ck_one_row_equals_its_row_in_a_batch():
    th, c, r = ck_data(S=4, T=30, seed=4)
    ll = ck_log_likelihood(*th, c, r)
    g = ck_gradient(*th, c, r)
    for s in range(4):
        one = [x[s:s + 1] for x in th]
        assert torch.equal(ck_log_likelihood(*one, c[s:s + 1], r[s:s + 1]), ll[s:s + 1])
        for gi, gj in zip(ck_gradient(*one, c[s:s + 1], r[s:s + 1]), g):
            torch.testing.assert_close(gi, gj[s:s + 1], rtol=1e-13, atol=1e-13)


def test_ck_near_certain_and_extreme_parameters_stay_finite():
    # β and β_c huge: η is in the thousands, every choice nearly certain (or nearly impossible)
    th, c, r = ck_data(S=3, T=40, seed=5)
    big = (th[0], torch.full((3,), 1e4, dtype=D), th[2], torch.tensor([1e4, -1e4, 0.0],
                                                                      dtype=D))
    ll = ck_log_likelihood(*big, c, r)
    assert torch.isfinite(ll).all() and torch.all(ll <= 0)
    assert all(torch.isfinite(x).all() for x in ck_gradient(*big, c, r))
    # α and α_c at 0 and 1, one trial
    edge = tuple(torch.tensor([v], dtype=D) for v in (1.0, 2.0, 0.0, 1.0))
    assert torch.isfinite(ck_log_likelihood(*edge, c[:1, :1], r[:1, :1])).all()
    assert abs(float(ck_log_likelihood(*edge, c[:1, :1], r[:1, :1])) - math.log(0.5)) < 1e-15


def test_ck_float32_and_bfloat16_inputs():
    th, c, r = ck_data(S=3, T=30, seed=6)
    ll64 = ck_log_likelihood(*th, c, r)
    ll32 = ck_log_likelihood(*(x.float() for x in th), c, r.float())
    assert ll32.dtype == torch.float32
    torch.testing.assert_close(ll32.double(), ll64, rtol=1e-5, atol=1e-4)
    g16 = ck_gradient(*(x.bfloat16() for x in th), c, r.bfloat16())
    assert all(x.dtype == torch.bfloat16 and torch.isfinite(x.float()).all() for x in g16)
    g16h = ck_gradient(*(x.half() for x in th), c, r.half())
    assert g16h[3].dtype == torch.float16
    c16, r16 = simulate_ck(*(x.half() for x in th), PROBS, 5,
                           generator=torch.Generator().manual_seed(0))
    assert r16.dtype == torch.float16 and c16.dtype == torch.long


def test_ck_simulated_choices_follow_the_model():
    """P(c_1 = 1 | c_0, r_0) = σ(β ΔV_1 + β_c ΔK_1) for each of the four (c_0, r_0) cells.

    20000 identical participants; each cell's count of c_1 = 1 is binomial, and we require it
    within 5 sd of the exact mean (false alarm ≤ 4 × 6e-7). The same test rejects the data of
    the plain learner (β_c = 0) against the kernel model's probabilities (z ≈ 20 and more).
    """
    S = 20000
    a, b, ac, bc = 0.5, 2.0, 0.6, 1.5
    par = [torch.full((S,), v, dtype=D) for v in (a, b, ac, bc)]

    def max_z(choices, rewards):
        out = 0.0
        for c0 in (0, 1):
            for r0 in (0.0, 1.0):
                m = (choices[:, 0] == c0) & (rewards[:, 0] == r0)
                V = [0.0, 0.0]
                V[c0] += a * (r0 - V[c0])
                p = 1 / (1 + math.exp(-(b * (V[1] - V[0]) + bc * ac * (2 * c0 - 1))))
                k, n = float(choices[m, 1].sum()), int(m.sum())
                out = max(out, abs(k - n * p) / math.sqrt(n * p * (1 - p)))
        return out

    g = torch.Generator().manual_seed(11)
    c, r = simulate_ck(*par, PROBS, 2, generator=g)
    assert max_z(c, r) < 5
    par[3] = torch.zeros(S, dtype=D)
    c0, r0 = simulate_ck(*par, PROBS, 2, generator=g)
    assert max_z(c0, r0) > 10


def test_ck_simulation_reproducible_and_reduces_to_rw():
    th, _, _ = ck_data(S=3, T=5, seed=7)
    rp = reversal_reward_probs(3, 30, 10)
    one = simulate_ck(*th, rp, 30, generator=torch.Generator().manual_seed(3))
    two = simulate_ck(*th, rp, 30, generator=torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(one, two))
    # β_c = 0 consumes the same random numbers as the plain learner and gives its data
    z = torch.zeros(3, dtype=D)
    ck = simulate_ck(th[0], th[1], th[2], z, rp, 30, generator=torch.Generator().manual_seed(3))
    rw = simulate_bandit(th[0], th[1], rp, 30, generator=torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(ck, rw))


def test_fit_ck_finds_a_maximum_at_least_as_good_as_scipy_and_the_truth():
    from scipy.optimize import minimize

    g = torch.Generator().manual_seed(8)
    S, T = 4, 200
    th = (torch.tensor([0.3, 0.6, 0.2, 0.5], dtype=D), torch.tensor([3.0, 6.0, 2.0, 4.0],
                                                                    dtype=D),
          torch.tensor([0.3, 0.5, 0.7, 0.4], dtype=D), torch.tensor([1.0, -1.0, 2.0, 0.5],
                                                                    dtype=D))
    c, r = simulate_ck(*th, reversal_reward_probs(S, T, 50), T, generator=g)
    fit = fit_ck(c, r, n_starts=4, generator=g)
    assert fit.alpha.shape == (S,) and fit.start_log_likelihoods.shape == (S, 4)
    assert bool(fit.converged.all())
    assert torch.all(fit.log_likelihood >= ck_log_likelihood(*th, c, r))
    # the reported ℓ is the model's ℓ at the estimate
    est = (fit.alpha, fit.beta, fit.alpha_c, fit.beta_c)
    torch.testing.assert_close(fit.log_likelihood, ck_log_likelihood(*est, c, r), rtol=0,
                               atol=1e-9)
    for s in range(S):
        def nll(x, s=s):
            # −ℓ and its gradient in θ = (logit α, log β, logit α_c, β_c), by ck_gradient
            a, b, ac = 1 / (1 + math.exp(-x[0])), math.exp(x[1]), 1 / (1 + math.exp(-x[2]))
            p = [torch.tensor([v], dtype=D) for v in (a, b, ac, x[3])]
            ll = float(ck_log_likelihood(*p, c[s:s + 1], r[s:s + 1]))
            g = [float(v) for v in ck_gradient(*p, c[s:s + 1], r[s:s + 1])]
            jac = [g[0] * a * (1 - a), g[1] * b, g[2] * ac * (1 - ac), g[3]]
            return -ll, [-v for v in jac]
        best = min(minimize(nll, x0, jac=True, method="L-BFGS-B",
                            options=dict(ftol=1e-13, gtol=1e-9, maxiter=500)).fun
                   for x0 in ([0.0, 1.0, 0.0, 0.0], [-1.0, 1.5, 1.0, 1.0]))
        assert float(fit.log_likelihood[s]) >= -best - 1e-6


def test_fit_ck_from_the_plain_learner_is_never_worse():
    (a, b, ac, bc), c, r = ck_data(S=6, T=60, seed=9)
    f_rw = fit_rw(c, r, n_starts=2, generator=torch.Generator().manual_seed(0))
    starts = torch.stack((f_rw.alpha, f_rw.beta, torch.full_like(a, 0.5), torch.zeros_like(a)),
                         -1)[:, None]
    f = fit_ck(c, r, starts=starts.float(), max_iter=5)
    assert torch.all(f.log_likelihood >= f_rw.log_likelihood - 1e-9)
    assert f.start_log_likelihoods.shape == (6, 1) and f.n_iter <= 5


def test_ck_errors():
    (a, b, ac, bc), c, r = ck_data(S=2, T=10)
    with pytest.raises(ValueError, match=r"ck_log_likelihood: argument 'alpha_c' must lie in"):
        ck_log_likelihood(a, b, ac + 1, bc, c, r)
    with pytest.raises(ValueError, match="ck_gradient: argument 'beta_c' must be finite"):
        ck_gradient(a, b, ac, torch.tensor([1.0, -math.inf], dtype=D), c, r)
    with pytest.raises(ValueError, match="simulate_ck: argument 'beta_c' must be finite"):
        simulate_ck(a, b, ac, torch.tensor([math.inf, 0.0], dtype=D), PROBS, 3)
    with pytest.raises(ValueError, match="argument 'beta_c' contains NaN"):
        ck_log_likelihood(a, b, ac, torch.tensor([1.0, math.nan], dtype=D), c, r)
    with pytest.raises(ValueError, match="argument 'beta_c' must have the shape of 'alpha'"):
        ck_gradient(a, b, ac, bc[:1], c, r)
    with pytest.raises(ValueError, match="argument 'alpha_c' must have shape"):
        ck_gradient(a, b, ac[:, None], bc, c, r)
    with pytest.raises(ValueError, match="argument 'beta' must be >= 0"):
        simulate_ck(a, -b - 1, ac, bc, PROBS, 3)
    with pytest.raises(ValueError, match="argument 'rewards' must be finite"):
        ck_log_likelihood(a, b, ac, bc, c, r.masked_fill(r == r, math.inf))
    with pytest.raises(ValueError, match="argument 'choices' must have shape"):
        ck_log_likelihood(a, b, ac, bc, c[:, :0], r[:, :0])
    with pytest.raises(ValueError, match="argument 'choices' must contain only 0 and 1"):
        fit_ck(c * 2, r)
    with pytest.raises(TypeError, match="fit_ck: argument 'generator'"):
        fit_ck(c, r, generator=0)
    with pytest.raises(ValueError, match=r"fit_ck: argument 'starts' must have shape \[S, K, 4\]"):
        fit_ck(c, r, starts=torch.full((2, 1, 2), 0.5, dtype=D))
    with pytest.raises(ValueError, match="fit_ck: argument 'starts' needs 0 < alpha < 1"):
        fit_ck(c, r, starts=torch.tensor([[[0.5, 1.0, 1.0, 0.0]]] * 2, dtype=D))
    with pytest.raises(ValueError, match="fit_ck: argument 'starts' must be finite"):
        fit_ck(c, r, starts=torch.tensor([[[0.5, 1.0, 0.5, math.inf]]] * 2, dtype=D))
    with pytest.raises(ValueError, match="fit_ck: argument 'beta_c_max' must be > 0"):
        fit_ck(c, r, beta_c_max=0.0)
    with pytest.raises(ValueError, match="fit_ck: argument 'ftol' must be > 0"):
        fit_ck(c, r, ftol=-1.0)
    with pytest.raises(ValueError, match="fit_ck: argument 'max_iter' must be >= 1"):
        fit_ck(c, r, max_iter=0)


# ------------------------------------------------------------------------------------------------
# fit_rw_hierarchical: the group prior fitted by EM with a Laplace approximation (issue 26, 2)
# ------------------------------------------------------------------------------------------------
def _quad_log_marginal(c, r, mean, sd, centre, width, n=241):
    """log ∫ exp(ℓ(θ)) N(θ; mean, sd²) dθ per participant, by a midpoint grid of n × n points
    over centre ± width in θ = (logit α, log β)."""
    out = []
    for s in range(c.shape[0]):
        a = torch.linspace(float(centre[s, 0] - width[s, 0]), float(centre[s, 0] + width[s, 0]),
                           n, dtype=D)
        b = torch.linspace(float(centre[s, 1] - width[s, 1]), float(centre[s, 1] + width[s, 1]),
                           n, dtype=D)
        A, B = torch.meshgrid(a, b, indexing="ij")
        A, B = A.reshape(-1), B.reshape(-1)
        N = A.numel()
        # ch._derivatives(order 0) is rw_log_likelihood's ℓ for [T, N] data (checked
        # against it in the tests above), faster on many columns
        ll = ch._derivatives(torch.sigmoid(A), B.exp(), c[s].to(D)[:, None].expand(-1, N),
                             r[s][:, None].expand(-1, N), 0.0, 0)
        theta = torch.stack((A, B), 1)
        lp = (-0.5 * ((theta - mean) / sd) ** 2 - sd.log()
              - 0.5 * math.log(2 * math.pi)).sum(1)
        out.append(float(torch.logsumexp(ll + lp, 0) + ((a[1] - a[0]) * (b[1] - b[0])).log()))
    return torch.tensor(out, dtype=D)


def test_hierarchical_laplace_marginal_matches_quadrature():
    from softmaxbook.choice import fit_rw_hierarchical
    c, r, g = _map_data(S=4, T=120, seed=27)
    h = fit_rw_hierarchical(c, r, n_starts=4, generator=g, tol=1e-6)
    assert h.converged and h.n_iter < 200
    theta = torch.stack((torch.logit(h.alpha), h.beta.log()), 1)
    quad = _quad_log_marginal(c, r, h.mean, h.sd, theta, 7 * h.posterior_sd, n=121)
    # the grid is converged: 81 points over ± 6 posterior sd agree to 1e-3
    coarse = _quad_log_marginal(c, r, h.mean, h.sd, theta, 6 * h.posterior_sd, n=81)
    assert (coarse - quad).abs().max() < 1e-3
    # Laplace's error here (T = 120) is at most 0.065 (seed 27); a missing log 2π (1.84) or
    # ½ log det(−H) (several units) or a prior without its constant would be far outside
    torch.testing.assert_close(h.log_marginal, quad, rtol=0, atol=0.15)
    assert h.history[-1] == pytest.approx(float(h.log_marginal.sum()), abs=1e-9)


def test_hierarchical_is_a_fixed_point_of_em_and_map_under_its_prior():
    from softmaxbook.choice import fit_rw_hierarchical
    c, r, g = _map_data(S=8, T=150, seed=28)
    tol = 1e-6
    h = fit_rw_hierarchical(c, r, n_starts=4, generator=g, tol=tol, max_iter=500)
    assert h.converged
    theta = torch.stack((torch.logit(h.alpha), h.beta.log()), 1)
    # M-step: the group mean and sd from the estimates and their Laplace variances
    mean = theta.mean(0)
    sd = ((theta - mean) ** 2 + h.posterior_sd ** 2).mean(0).sqrt()
    assert (mean - h.mean).abs().max() < tol
    assert (sd.log() - h.sd.log()).abs().max() < tol
    # E-step: the estimates are fit_rw's MAP under the returned prior
    st = torch.stack((h.alpha, h.beta), -1).unsqueeze(1)
    m = fit_rw(c, r, starts=st, prior=(h.mean, h.sd))
    torch.testing.assert_close(m.alpha, h.alpha, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(m.beta, h.beta, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(h.log_likelihood, rw_log_likelihood(h.alpha, h.beta, c, r))
    # EM raised the (Laplace) marginal likelihood from the starting prior
    assert h.history[-1] > h.history[0]
    # posterior sds: no wider than the prior's (the data add precision)
    assert torch.all(h.posterior_sd <= h.sd + 1e-12)


def test_hierarchical_recovers_a_group():
    # 60 participants drawn from the model's own normal prior: the group mean and sd come back
    # (sampling error of a mean of 60: sd / √60 ≈ 0.07 to 0.1, plus the estimates' noise)
    from softmaxbook.choice import fit_rw_hierarchical, reversal_reward_probs, simulate_bandit
    g = torch.Generator().manual_seed(5)
    S, T = 60, 200
    a = -0.5 + 0.7 * torch.randn(S, generator=g, dtype=D)
    b = 1.2 + 0.5 * torch.randn(S, generator=g, dtype=D)
    c, r = simulate_bandit(torch.sigmoid(a), b.exp(), reversal_reward_probs(S, T, 50), T,
                           generator=g)
    h = fit_rw_hierarchical(c, r, n_starts=3, generator=g)
    assert h.converged
    torch.testing.assert_close(h.mean, torch.tensor([-0.5, 1.2], dtype=D), rtol=0, atol=0.3)
    torch.testing.assert_close(h.sd, torch.tensor([0.7, 0.5], dtype=D), rtol=0, atol=0.3)
    # shrinkage: the hierarchical estimates of log β are closer to the truth than ML's on
    # average (rms)
    ml = fit_rw(c, r, n_starts=3, generator=g)
    rms = lambda est: float((est.log() - b.exp().log()).pow(2).mean().sqrt())  # noqa: E731
    assert rms(h.beta) < rms(ml.beta)


def test_hierarchical_edges():
    from softmaxbook.choice import fit_rw_hierarchical
    c, r, g = _map_data(S=3, T=60, seed=29)
    # float32 data: float32 results, the group parameters in float64
    # (5 iterations: with 3 participants and 60 trials the group sd of log β shrinks toward 0,
    # which EM approaches slowly; converged stays False for 200 iterations)
    h32 = fit_rw_hierarchical(c, r.float(), n_starts=2, generator=torch.Generator()
                              .manual_seed(1), max_iter=5)
    h64 = fit_rw_hierarchical(c, r, n_starts=2, generator=torch.Generator().manual_seed(1),
                              max_iter=5)
    assert not h64.converged and h64.n_iter == 5
    assert h32.alpha.dtype == torch.float32 and h32.log_marginal.dtype == torch.float32
    assert h32.mean.dtype == torch.float64
    torch.testing.assert_close(h32.mean, h64.mean)
    # one iteration: not converged, the starting prior returned
    h1 = fit_rw_hierarchical(c, r, n_starts=2, generator=g, max_iter=1,
                             init=((0.0, 1.0), (2.0, 1.0)))
    assert h1.n_iter == 1 and not h1.converged and len(h1.history) == 1
    torch.testing.assert_close(h1.sd, torch.tensor([2.0, 1.0], dtype=D))
    # a participant whose choices are all predictable (always option 1, always rewarded):
    # ℓ rises to the cap; the group prior keeps every number finite
    c2 = torch.cat((c, torch.ones(1, 60, dtype=c.dtype)))
    r2 = torch.cat((r, torch.ones(1, 60, dtype=D)))
    h2 = fit_rw_hierarchical(c2, r2, n_starts=2, generator=g, tol=1e-3, max_iter=30)
    for x in (h2.alpha, h2.beta, h2.log_marginal, h2.posterior_sd, h2.mean, h2.sd):
        assert torch.isfinite(x).all()
    assert torch.all(h2.posterior_sd > 0)


def test_hierarchical_bad_input():
    from softmaxbook.choice import fit_rw_hierarchical
    c, r, g = _map_data(S=3, T=30, seed=30)
    with pytest.raises(ValueError, match="at least 2 participants"):
        fit_rw_hierarchical(c[:1], r[:1], generator=g)
    with pytest.raises(ValueError, match="fit_rw_hierarchical: argument 'tol'"):
        fit_rw_hierarchical(c, r, generator=g, tol=0.0)
    with pytest.raises(ValueError, match="fit_rw_hierarchical: argument 'max_iter'"):
        fit_rw_hierarchical(c, r, generator=g, max_iter=0)
    with pytest.raises(ValueError, match="fit_rw_hierarchical: argument 'init' needs sd > 0"):
        fit_rw_hierarchical(c, r, generator=g, init=((0.0, 1.0), (1.0, -1.0)))
    with pytest.raises(TypeError, match="fit_rw_hierarchical: argument 'init' must be a pair"):
        fit_rw_hierarchical(c, r, generator=g, init=1.5)
    with pytest.raises(ValueError, match="fit_rw_hierarchical: argument 'choices'"):
        fit_rw_hierarchical(c.double() * 2, r, generator=g)
    with pytest.raises(ValueError, match="fit_rw_hierarchical: argument 'rewards'"):
        fit_rw_hierarchical(c, r.masked_fill(torch.zeros_like(r, dtype=torch.bool)
                                             .index_fill(1, torch.tensor([0]), True),
                                             math.nan), generator=g)
    with pytest.raises(ValueError, match="argument 'starts'"):
        fit_rw_hierarchical(c, r, starts=torch.full((3, 1, 2), 2.0, dtype=D))
