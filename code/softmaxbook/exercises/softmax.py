"""Checks for the coding exercises of the chapter "Softmax facts" (book/01_softmax.ipynb).

* ``softmax-stable-lse``: ``stable_logsumexp(x)`` along the last dimension, which must survive huge
  logits, ``-inf`` entries and slices that are entirely ``-inf`` (result ``-inf``).
* ``softmax-cross-entropy``: ``mean_cross_entropy(logits, target)`` from logits and class indices,
  without ever forming ``exp(logits)`` unshifted.
"""

from __future__ import annotations

import math

import torch

from . import call, exercise, expect_close, expect_true
from ..softmax import cross_entropy, logsumexp

INF = math.inf

LSE_CASES = [
    (torch.tensor([1.0, 2.0, 3.0]), "x = [1, 2, 3]"),
    (torch.tensor([1000.0, 999.0, 990.0]), "x = [1000, 999, 990] (exp overflows)"),
    (torch.tensor([-1000.0, -1001.0]), "x = [-1000, -1001] (exp underflows to 0)"),
    (torch.tensor([7.5]), "x = [7.5] (one element)"),
    (torch.tensor([0.0, -INF, 2.0]), "x = [0, -inf, 2] (an impossible entry)"),
    (torch.tensor([[1.0, 2.0], [500.0, -500.0], [3.0, 3.0]], dtype=torch.float64),
     "a batch of 3 rows (float64)"),
    (torch.tensor([[-INF, -INF], [0.0, 0.0]]), "x = [[-inf, -inf], [0, 0]] (a row of -inf)"),
]


@exercise("softmax-stable-lse", "a log-sum-exp that never overflows")
def _check_stable_lse(stable_logsumexp):
    for x, desc in LSE_CASES:
        got = call(stable_logsumexp, x.clone(), input_desc=desc)
        expected = logsumexp(x)
        if isinstance(got, torch.Tensor) and bool(torch.isnan(got).any()):
            expect_true(False, f"for input {desc} your result contains NaN: {got.tolist()}.",
                        hint="shift by the maximum m of x (not by max(exp(x))): "
                             "m + log(sum(exp(x - m))). For a row that is all -inf, x - m is "
                             "-inf - (-inf) = NaN: shift such rows by 0 instead "
                             "(torch.where(torch.isinf(m), 0, m)).")
        expect_close(got, expected, input_desc=desc, rtol=1e-6, atol=1e-6,
                     hint="log-sum-exp is m + log(sum(exp(x - m))) with m the maximum along the "
                          "last dimension; reduce over dim=-1 and return one value per row.")
    return len(LSE_CASES)


CE_CASES = [
    (torch.tensor([[2.0, 1.0, 0.1]]), torch.tensor([0]), "logits = [[2, 1, 0.1]], target = [0]"),
    (torch.tensor([[1000.0, 0.0], [0.0, 1000.0]]), torch.tensor([0, 0]),
     "logits = [[1000, 0], [0, 1000]], target = [0, 0] (huge logits)"),
    (torch.tensor([[-800.0, -805.0, -790.0]]), torch.tensor([1]),
     "logits = [[-800, -805, -790]], target = [1] (exp underflows)"),
    (torch.tensor([[0.0, -INF, 1.0]]), torch.tensor([2]),
     "logits = [[0, -inf, 1]], target = [2] (an impossible class)"),
]


@exercise("softmax-cross-entropy", "mean cross entropy from logits")
def _check_cross_entropy(mean_cross_entropy):
    g = torch.Generator().manual_seed(7)
    z = 4.0 * torch.randn(32, 10, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (32,), generator=g)
    cases = CE_CASES + [(z, y, "random logits of shape (32, 10) (float64)")]
    for logits, target, desc in cases:
        got = call(mean_cross_entropy, logits.clone(), target.clone(), input_desc=desc)
        expected = cross_entropy(logits, target)
        if isinstance(got, torch.Tensor) and got.dim() > 0:
            expect_true(False, f"for input {desc} the result should be one number (the mean over "
                        f"the batch), got shape {tuple(got.shape)}.",
                        hint="average the per-example losses: .mean().")
        expect_close(got, expected, input_desc=desc, rtol=1e-5, atol=1e-6,
                     hint="the loss of one example is logsumexp(z) - z[target]: the negative "
                          "log-probability of the right class, computed from logits with the "
                          "maximum shifted out (never log(softmax(z)) with an unshifted exp).")
    return len(cases)
