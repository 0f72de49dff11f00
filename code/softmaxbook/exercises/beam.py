"""Checks for the coding exercises of the chapter "Stochastic beam search" (book/08_beam.ipynb).

* ``beam-prefix-logprob``: ``prefix_log_prob(step_fn, prefixes)``, the log-probability ``φ_S`` of
  each prefix, the sum of the conditional log-probabilities of its tokens (errata 32: not the sum
  of the leaves' log-probabilities).
* ``beam-estimator``: ``sbs_estimator(values, log_probs, kappa)``, the unbiased estimator
  ``Σ p f / q`` with ``q = 1 − exp(−exp(φ − κ))``, stable where ``q`` is tiny and exact when
  ``κ = −inf``.
"""

from __future__ import annotations

import math

import torch

from softmaxbook.beam import sbs_estimate

from . import call, describe, exercise, expect_close, expect_true


class _Bigram:
    """A bigram model over ``V`` tokens; row ``V`` of the table is the start distribution."""

    def __init__(self, logits):
        self.table = torch.log_softmax(torch.as_tensor(logits, dtype=torch.float64), dim=-1)
        self.V = self.table.shape[1]

    def __call__(self, prefixes):
        if prefixes.shape[1] == 0:
            return self.table[torch.full((prefixes.shape[0],), self.V, dtype=torch.long)]
        return self.table[prefixes[:, -1]]

    def conditionals(self, prefixes):
        """``[t, n]``: log p(y_t | y_<t) of every token of every prefix."""
        start = torch.full((prefixes.shape[0], 1), self.V, dtype=torch.long)
        prev = torch.cat([start, prefixes[:, :-1]], dim=1)
        return self.table[prev, prefixes].T

    def log_prob(self, prefixes):
        return self.conditionals(prefixes).sum(0)


def _prefix_cases():
    g = torch.Generator().manual_seed(3)
    small = _Bigram([[0.5, 1.0, 0.0], [1.0, 0.2, -0.5], [0.3, -0.3, 0.8], [0.0, 0.7, 0.4]])
    peaked = _Bigram(torch.randn(6, 5, generator=g, dtype=torch.float64) * 30)
    impossible = torch.randn(4, 3, generator=g, dtype=torch.float64)
    impossible[:, 2] = -math.inf
    blocked = _Bigram(impossible)
    return [
        (small, torch.tensor([[1, 2, 0], [2, 2, 2]]), "3-token model, two prefixes of length 3"),
        (small, torch.empty(3, 0, dtype=torch.long), "three empty prefixes (the root: φ = 0)"),
        (small, torch.tensor([[0]]), "one prefix of length 1"),
        (peaked, torch.randint(0, 5, (20, 6), generator=g), "a peaked model (logits ~ ±30), "
                                                              "20 prefixes of length 6"),
        (blocked, torch.tensor([[0, 2, 1], [1, 0, 1]]), "a prefix through an impossible token "
                                                         "(φ = -inf) and a possible one"),
    ]


@exercise("beam-prefix-logprob", "log-probability of a prefix")
def _check_prefix_log_prob(prefix_log_prob):
    cases = _prefix_cases()
    for model, prefixes, desc in cases:
        got = call(prefix_log_prob, model, prefixes.clone(), input_desc=desc)
        expected = model.log_prob(prefixes)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and prefixes.shape[1]:
            expect_true(not torch.allclose(got.double(), model.conditionals(prefixes).exp().sum(0)),
                        f"for input {desc} you added the conditional probabilities; φ_S adds "
                        "their logarithms, log p(y_t | y_<t).")
        expect_close(got, expected, input_desc=desc, rtol=1e-6, atol=1e-9,
                     what="log-probabilities [n]",
                     hint="call step_fn on the prefixes cut at every length t = 0, 1, …, T-1 and "
                          "add the log-probability it gives to the next token, "
                          "step_fn(prefixes[:, :t]).gather(1, prefixes[:, t:t+1]); the empty "
                          "prefix has φ = 0.")
    return len(cases)


def _estimator_cases():
    f64 = torch.float64
    return [
        (torch.tensor([2.0, -1.0], dtype=f64), torch.log(torch.tensor([0.5, 0.2], dtype=f64)),
         torch.tensor(0.3, dtype=f64), "k = 2, kappa = 0.3"),
        (torch.tensor([[1.0, 3.0, 2.0], [0.5, 0.5, 4.0]], dtype=f64),
         torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -4.0, -6.0]], dtype=f64),
         torch.tensor([-1.5, 0.7], dtype=f64), "a batch of 2 searches with k = 3"),
        (torch.tensor([1.0, 1.0], dtype=f64), torch.tensor([-0.2, -1.8], dtype=f64),
         torch.tensor(-math.inf, dtype=f64), "kappa = -inf (every sequence sampled: q = 1)"),
        (torch.tensor([3.0, 5.0], dtype=f64), torch.tensor([-60.0, -70.0], dtype=f64),
         torch.tensor(-10.0, dtype=f64), "log_probs far below kappa (q ~ exp(phi - kappa) "
                                         "~ 1e-22: 1 - exp(-x) rounds to 0)"),
        (torch.tensor([3.0, 5.0], dtype=torch.float32), torch.tensor([-3.0, -4.0]),
         torch.tensor(20.0), "float32, q ~ 1e-10"),
    ]


@exercise("beam-estimator", "the stochastic beam search estimator")
def _check_estimator(sbs_estimator):
    cases = _estimator_cases()
    for values, log_probs, kappa, desc in cases:
        got = call(sbs_estimator, values.clone(), log_probs.clone(), kappa.clone(),
                   input_desc=f"{desc}: values = {describe(values)}, log_probs = "
                              f"{describe(log_probs)}, kappa = {describe(kappa)}")
        expected = sbs_estimate(values, log_probs, kappa)
        if isinstance(got, torch.Tensor) and not torch.isfinite(got).all():
            expect_true(False, f"for input {desc} your estimate is {describe(got)}, not finite: "
                               "q = 1 - exp(-exp(phi - kappa)) rounds to 0 there.",
                        hint="compute log q = log(-expm1(-exp(phi - kappa))) (expm1 keeps the "
                             "digits of 1 - e^{-x} for small x) and the weights as "
                             "exp(phi - log q).")
        expect_close(got, expected, input_desc=desc, rtol=1e-4 if values.dtype == torch.float32
                     else 1e-9, atol=1e-12, what="estimate",
                     hint="the estimate is sum_i exp(phi_i) * f_i / q_i with "
                          "q_i = 1 - exp(-exp(phi_i - kappa)), summed over the last dimension; "
                          "it is NOT divided by k or by the sum of the weights.")
    return len(cases)
