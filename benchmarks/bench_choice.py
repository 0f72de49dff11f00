"""Benchmark: fit_rw (all participants and starts at once) against per-participant SciPy loops.

The same simulated data set (default 500 participants × 300 trials, 5 starts each, the same
starting points for every method) is fitted by

* ``fit_rw``: batched trust-region Newton with analytic gradient and Hessian (this package);
* ``scipy L-BFGS-B (numerical gradient)``: the usual loop: one ``scipy.optimize.minimize`` per
  participant and start, a pure-Python likelihood, finite-difference gradients;
* ``scipy L-BFGS-B (analytic gradient)``: the same loop given the sensitivity-recursion
  gradient (``jac=True``), a stronger peer.

All three optimise the same function in the same coordinates (logit α, log β) with the same
box (β ≤ beta_max). Printed: wall time, the ratio to ``fit_rw``, and the largest log-likelihood
difference per participant (best start) against ``fit_rw`` (positive: SciPy found a higher ℓ).

Run: ``.venv/bin/python benchmarks/bench_choice.py`` (``--quick`` for a small version).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import minimize

from softmaxbook.choice import _A_MAX, _B_MIN, _draw_starts, fit_rw, simulate_bandit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import add_json_argument, interleaved, report  # noqa: E402


def nll(theta, choices, rewards):
    """Negative log-likelihood of one participant, the way it is usually written."""
    a, b = theta
    alpha = 1.0 / (1.0 + math.exp(-a))
    beta = math.exp(b)
    v0 = v1 = 0.0
    ll = 0.0
    for c, r in zip(choices, rewards):
        x = beta * (v1 - v0) if c else beta * (v0 - v1)
        ll -= math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x)) - x  # −log σ(x)
        if c:
            v1 += alpha * (r - v1)
        else:
            v0 += alpha * (r - v0)
    return -ll


def nll_and_grad(theta, choices, rewards):
    """Negative log-likelihood and its gradient in (a, b) by the sensitivity recursion."""
    a, b = theta
    alpha = 1.0 / (1.0 + math.exp(-a))
    beta = math.exp(b)
    v0 = v1 = d0 = d1 = 0.0
    ll = g_alpha = g_beta = 0.0
    for c, r in zip(choices, rewards):
        dv = v1 - v0
        x = beta * dv if c else -beta * dv
        ll -= math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x)) - x
        p = 1.0 / (1.0 + math.exp(-beta * dv)) if beta * dv > -700 else 0.0
        res = c - p
        g_beta += res * dv
        g_alpha += beta * res * (d1 - d0)
        if c:
            d1 += r - v1 - alpha * d1
            v1 += alpha * (r - v1)
        else:
            d0 += r - v0 - alpha * d0
            v0 += alpha * (r - v0)
    grad = np.array([-g_alpha * alpha * (1 - alpha), -g_beta * beta])
    return -ll, grad


def scipy_loop(choices, rewards, starts, beta_max, analytic):
    S, K = starts.shape[:2]
    C, R = choices.tolist(), rewards.tolist()
    bounds = [(-_A_MAX, _A_MAX), (_B_MIN, math.log(beta_max))]
    best = np.full(S, -np.inf)
    for s in range(S):
        for k in range(K):
            al, be = starts[s, k].tolist()
            x0 = [math.log(al / (1 - al)), math.log(be)]
            if analytic:
                res = minimize(nll_and_grad, x0, args=(C[s], R[s]), jac=True,
                               method="L-BFGS-B", bounds=bounds)
            else:
                res = minimize(nll, x0, args=(C[s], R[s]), method="L-BFGS-B", bounds=bounds)
            best[s] = max(best[s], -res.fun)
    return best


def main(argv=None) -> list[tuple[str, float, float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast version")
    parser.add_argument("--participants", type=int, default=500)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="repeats of fit_rw (median)")
    parser.add_argument("--scipy-repeats", type=int, default=1,
                        help="repeats of each SciPy loop (median; each takes ~10–60 s)")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.participants, args.trials, args.starts, args.repeats = 20, 60, 2, 1
    torch.set_num_threads(2)
    beta_max = 100.0
    g = torch.Generator().manual_seed(2019)
    S, T, K = args.participants, args.trials, args.starts
    alpha = 0.05 + 0.9 * torch.rand(S, generator=g, dtype=torch.float64)
    beta = torch.exp(math.log(0.5) + math.log(40) * torch.rand(S, generator=g, dtype=torch.float64))
    probs = torch.tensor([0.2, 0.8], dtype=torch.float64)
    choices, rewards = simulate_bandit(alpha, beta, probs, T, generator=g)
    starts = _draw_starts(S, K, g, "cpu", torch.float64)

    fit_rw(choices[:4], rewards[:4], starts=starts[:4], beta_max=beta_max)  # warm-up
    # the SciPy loops take 10-60 s a run, so they are timed apart from fit_rw (not interleaved)
    t = interleaved({"fit_rw": lambda: fit_rw(choices, rewards, starts=starts,
                                              beta_max=beta_max)}, args.repeats, warmup=0)
    t_ours, fit = t["fit_rw"].median, t["fit_rw"].result
    ll_ours = fit.log_likelihood.numpy()

    rows = [("fit_rw (batched Newton)", t_ours, 0.0, 0.0)]
    for name, analytic in (("scipy L-BFGS-B, numerical gradient", False),
                           ("scipy L-BFGS-B, analytic gradient", True)):
        t = interleaved({name: lambda: scipy_loop(choices, rewards, starts, beta_max, analytic)},
                        args.scipy_repeats, warmup=0)[name]
        diff = t.result - ll_ours
        rows.append((name, t.median, float(np.abs(diff).max()), float(diff.max())))

    print(f"{S} participants × {T} trials, {K} starts each (same starts for all), "
          f"beta_max={beta_max}, torch threads=2; fit_rw median of {args.repeats}, "
          f"SciPy median of {args.scipy_repeats}; fit_rw: {int(fit.converged.sum())}/{S} "
          f"converged, {fit.n_iter} iterations")
    print(f"{'method':<38} {'time [s]':>9} {'time / fit_rw':>14} {'max |Δℓ|':>10} "
          f"{'max (ℓ - ℓ_fit_rw)':>19}")
    for name, t, dmax, dpos in rows:
        print(f"{name:<38} {t:9.3f} {t / t_ours:14.1f} {dmax:10.2e} {dpos:19.2e}")
    report("bench_choice", [dict(method=n, seconds=t, speedup=t / t_ours, max_abs_dll=d,
                                 max_dll=p) for n, t, d, p in rows],
           f"fit_rw {rows[2][1] / t_ours:.1f}x faster than SciPy L-BFGS-B with the analytic "
           f"gradient ({rows[1][1] / t_ours:.1f}x: numerical), max |dl| {rows[2][2]:.1e}",
           args.json)
    return rows


if __name__ == "__main__":
    main()
