"""Benchmark of softmaxbook.calibration against its peers, measured side by side in one run.

* ``fit_temperature`` (exact Newton in 1/T) against the popular recipe (LBFGS on T from 1.5,
  lr 0.01, 50 iterations) and against ``scipy.optimize.minimize_scalar`` (bounded, on log T),
  on 100 000 x 100 and 10 000 x 1000 logits whose optimal temperature is known (T* = 2.5 and
  0.7): time and |T - T*|;
* ``ood_metrics`` (AUROC, both AUPRs, FPR@95, detection accuracy in one call) against
  scikit-learn's ``roc_auc_score`` + ``average_precision_score`` (both ways) on 10^6 scores;
* ``expected_calibration_error`` against torchmetrics' ``multiclass_calibration_error`` (same
  15 equal-width bins), checking that both give the same value.

Ratios are ours / theirs (below 1: ours is faster). Our functions validate their inputs on every
call; that time is included.

Run: ``.venv/bin/python benchmarks/bench_calibration.py`` (or ``--quick`` for a smoke test).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import minimize_scalar

from softmaxbook.calibration import (
    expected_calibration_error,
    fit_temperature,
    ood_metrics,
    popular_temperature_recipe,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import add_json_argument, interleaved, report  # noqa: E402


def timed_pair(ours, peer, repeats: int):
    """(ours' median s, ours' result, peer's median s, peer's result), run interleaved."""
    t = interleaved({"ours": ours, "peer": peer}, repeats)
    return t["ours"].median, t["ours"].result, t["peer"].median, t["peer"].result


def logits_with_temperature(n, k, target, gen):
    """Logits and labels whose NLL-optimal temperature is ``target`` (up to ~1e-9)."""
    z = 3.0 * torch.randn(n, k, generator=gen, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z, 1), 1, generator=gen).squeeze(1)
    return z * (target / fit_temperature(z, y).item()), y


def scipy_fit(z, y):
    def nll(logt):
        return F.cross_entropy(z / math.exp(logt), y).item()
    res = minimize_scalar(nll, bounds=(math.log(0.01), math.log(100.0)), method="bounded",
                          options=dict(xatol=1e-8))
    return math.exp(res.x)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    add_json_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(0)
    if args.quick:
        shapes, n_scores, n_ece, repeats = [(500, 10), (200, 50)], 2000, 2000, 1
    else:
        shapes, n_scores, n_ece = [(100_000, 100), (10_000, 1000)], 1_000_000, 1_000_000
        repeats = args.repeats
    rows = []
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {repeats}")
    print(f"{'task':34s} {'ours ms':>9s} {'peer':22s} {'peer ms':>9s} {'ratio':>7s}  notes")

    def add(task, t_ours, peer, t_peer, note):
        ratio = t_ours / t_peer
        rows.append(dict(task=task, ours=t_ours, peer=peer, theirs=t_peer, ratio=ratio,
                         note=note))
        print(f"{task:34s} {1e3 * t_ours:9.1f} {peer:22s} {1e3 * t_peer:9.1f} {ratio:7.3f}  "
              f"{note}")

    for (n, k), target in zip(shapes, (2.5, 0.7)):
        z, y = logits_with_temperature(n, k, target, gen)
        t3 = interleaved({"ours": lambda: fit_temperature(z, y).item(),
                          "recipe": lambda: popular_temperature_recipe(z, y),
                          "scipy": lambda: scipy_fit(z, y)}, repeats)
        (t_ours, t), (t_rec, (t_r, _)), (t_sp, t_s) = (
            (t3[m].median, t3[m].result) for m in ("ours", "recipe", "scipy"))
        task = f"fit_temperature {n}x{k} T*={target}"
        add(task, t_ours, "LBFGS recipe", t_rec,
            f"|T-T*| ours {abs(t - target):.1e}, recipe {abs(t_r.item() - target):.2g}")
        add(task, t_ours, "scipy minimize_scalar", t_sp,
               f"|T-T*| scipy {abs(t_s - target):.1e}")

    from sklearn.metrics import average_precision_score, roc_auc_score

    s_in = torch.randn(n_scores // 2, generator=gen, dtype=torch.float64) + 1.0
    s_out = torch.randn(n_scores // 2, generator=gen, dtype=torch.float64)
    lab = np.r_[np.ones(s_in.numel()), np.zeros(s_out.numel())]
    s = np.r_[s_in.numpy(), s_out.numpy()]

    def sk():
        return (roc_auc_score(lab, s), average_precision_score(lab, s),
                average_precision_score(1 - lab, -s))

    t_ours, m, t_sk, ref = timed_pair(lambda: ood_metrics(s_in, s_out), sk, repeats)
    same = max(abs(m["auroc"] - ref[0]), abs(m["aupr_in"] - ref[1]), abs(m["aupr_out"] - ref[2]))
    add(f"ood_metrics {n_scores} scores", t_ours, "sklearn AUROC+2 AP", t_sk,
           f"max |diff| {same:.1e} (ours also gives FPR@95, det. acc.)")

    from torchmetrics.functional.classification import multiclass_calibration_error

    probs = torch.softmax(3 * torch.randn(n_ece, 10, generator=gen), 1)
    labels = torch.randint(10, (n_ece,), generator=gen)
    t_ours, e, t_tm, e_tm = timed_pair(
        lambda: expected_calibration_error(probs, labels).item(),
        lambda: multiclass_calibration_error(probs, labels, 10, 15).item(), repeats)
    add(f"ECE {n_ece}x10, 15 bins", t_ours, "torchmetrics", t_tm, f"|diff| {abs(e - e_tm):.1e}")
    # ours / peer: the first fit_temperature shape against both peers, then OOD and ECE
    report("bench_calibration", rows, ", ".join(
        f"{r['task'].split(' ')[0]} vs {r['peer']} {r['ratio']:.2f}"
        for r in rows[:2] + rows[-2:]), args.json)
    return rows


if __name__ == "__main__":
    main()
