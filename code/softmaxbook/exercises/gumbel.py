"""Checks for the coding exercises of the chapter "Gumbel tricks" (book/07_gumbel.ipynb).

* ``gumbel-max-sampler``: one categorical sample per row by the Gumbel-max trick, each class with
  its own Gumbel (the recipe that shares one Gumbel across classes is caught).
* ``gumbel-truncated-inverse``: the inverse CDF of a Gumbel truncated at ``upper``, written so that
  it neither overflows nor cancels.
* ``gumbel-plackett-luce``: the log-probability of an ordered draw without replacement, accurate
  even when the drawn items hold almost all of the mass.
"""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import torch
from scipy import stats

from . import call, exercise, expect_close, expect_true
from ..gumbel import plackett_luce_log_prob


# ------------------------------------------------------------------------------------------------
@exercise("gumbel-max-sampler", "Gumbel-max sampler")
def _check_max_sampler(sampler):
    """``sampler(logits, generator)`` -> LongTensor of shape logits.shape[:-1]."""
    logits = torch.tensor([1.0, 0.0, -1.0, 0.5], dtype=torch.float64)
    n = 20000
    gen = torch.Generator().manual_seed(2024)
    desc = f"logits = {logits.tolist()} repeated in {n} rows"
    idx = call(sampler, logits.expand(n, 4).clone(), gen, input_desc=desc)
    expect_true(isinstance(idx, torch.Tensor) and not idx.is_floating_point(),
                f"for input {desc} the result should be an integer tensor of class indices, got "
                f"{type(idx).__name__}" + (f" of dtype {idx.dtype}" if isinstance(idx, torch.Tensor) else ""),
                hint="return the argmax over the last dimension, e.g. (logits + g).argmax(dim=-1).")
    expect_true(tuple(idx.shape) == (n,),
                f"for input {desc} the result should have shape ({n},): one class per row; got "
                f"shape {tuple(idx.shape)}.",
                hint="take the argmax over the last dimension (dim=-1), one per row.")
    expect_true(bool(((idx >= 0) & (idx < 4)).all()),
                f"for input {desc} some indices are outside [0, 4).")
    counts = torch.bincount(idx, minlength=4).numpy()
    p = torch.softmax(logits, 0).numpy()
    if counts[0] == n:
        expect_true(False, "every one of the 20000 rows returned class 0, the largest logit: the "
                    "sampler is deterministic.",
                    hint="each class needs its own Gumbel: draw noise of the same shape as logits, "
                         "not one number per row (a shared G shifts every score equally and "
                         "never changes the argmax).")
    pval = stats.chisquare(counts, n * p).pvalue
    # Threshold 1e-4: a correct sampler fails with probability 1e-4 (only if it ignores the
    # generator; with it, the result is deterministic).
    expect_true(pval > 1e-4,
                f"the class frequencies {np.round(counts / n, 3).tolist()} do not match "
                f"softmax(logits) = {np.round(p, 3).tolist()} (chi-square p = {pval:.2g}).",
                hint="G = -log(-log(U)) with U uniform in (0, 1); add it to the logits (not to "
                     "the probabilities) and take the argmax.")
    # -inf means impossible
    lg = torch.tensor([0.0, -math.inf, 0.0], dtype=torch.float64).expand(2000, 3).clone()
    idx = call(sampler, lg, torch.Generator().manual_seed(1), input_desc="logits = [0, -inf, 0]")
    expect_true(bool((idx != 1).all()),
                "for logits = [0, -inf, 0] the sampler returned the impossible class 1.",
                hint="-inf + G is -inf, which never wins an argmax as long as G is finite: "
                     "keep U away from 0 and 1 (clamp it), so that G is never +inf.")
    # torch.rand draws from [0, 1), and U = 0 does come out (once in 2^24 float32 draws). An
    # unclamped sampler turns it into G = -inf; if that hits the only possible class of a row,
    # every score is -inf and argmax returns index 0 -- here the impossible class. Such a rare
    # event cannot be sampled in a check, so we make torch.rand return zeros while the learner's
    # function runs (a sampler that does not use torch.rand is not affected and passes).
    real_rand = torch.rand

    def zero_rand(*args, **kwargs):
        return torch.zeros_like(real_rand(*args, **kwargs))

    desc = "logits = [-inf, 0] while torch.rand returns 0"
    lg = torch.tensor([-math.inf, 0.0], dtype=torch.float64).expand(8, 2).clone()
    with mock.patch.object(torch, "rand", zero_rand):
        idx = call(sampler, lg, torch.Generator().manual_seed(3), input_desc=desc)
    expect_true(bool((torch.as_tensor(idx) == 1).all()),
                "when torch.rand returns 0 (it samples [0, 1), so it can), your sampler returned "
                "the impossible class 0 for logits = [-inf, 0].",
                hint="at U = 0, -log(-log U) is -inf: every score becomes -inf and argmax picks "
                     "index 0. Clamp U to [tiny, 1 - eps/2] (torch.finfo) before the logs.")
    return 3


# ------------------------------------------------------------------------------------------------
def _truncated_reference(u, loc, upper):
    g = loc - torch.log(-torch.log(u))
    return -torch.logaddexp(-upper, -g)


@exercise("gumbel-truncated-inverse", "inverse CDF of a truncated Gumbel")
def _check_truncated_inverse(inverse):
    """``inverse(u, loc, upper)`` -> tensor, elementwise."""
    f64 = dict(dtype=torch.float64)
    cases = [
        ("moderate", torch.tensor([0.1, 0.5, 0.9], **f64), torch.tensor([0.0, 1.0, -1.0], **f64),
         torch.tensor([0.5, 0.5, 0.5], **f64)),
        ("loc far below upper", torch.tensor([0.2, 0.7], **f64), torch.tensor([-50.0, -800.0], **f64),
         torch.tensor([0.0, 0.0], **f64)),
        ("loc far above upper", torch.tensor([0.2, 0.7], **f64), torch.tensor([800.0, 1000.0], **f64),
         torch.tensor([0.0, 3.0], **f64)),
    ]
    for name, u, loc, upper in cases:
        desc = f"u = {u.tolist()}, loc = {loc.tolist()}, upper = {upper.tolist()} ({name})"
        got = call(inverse, u.clone(), loc.clone(), upper.clone(), input_desc=desc)
        hint = None
        if name == "loc far above upper":
            hint = ("exp(loc - upper) overflows here. Write the result as -log(exp(-upper) + "
                    "exp(-G)) with G = loc - log(-log u), and evaluate that as "
                    "-torch.logaddexp(-upper, -G).")
        elif name == "loc far below upper":
            hint = "here the result should be a plain Gumbel draw loc - log(-log u); check for cancellation."
        else:
            hint = ("F(g) = exp(exp(loc - upper) - exp(loc - g)); solve u = F(g) for g: "
                    "g = loc - log(exp(loc - upper) - log u).")
        expect_close(got, _truncated_reference(u, loc, upper), input_desc=desc, rtol=1e-9,
                     atol=1e-9, hint=hint)
    u = torch.tensor([1e-12, 0.5, 1 - 1e-12], **f64)
    got = call(inverse, u, torch.zeros(3, **f64), torch.full((3,), 0.25, **f64),
               input_desc="u near 0 and 1, loc = 0, upper = 0.25")
    expect_true(bool((torch.as_tensor(got) <= 0.25).all()),
                "some results are above 'upper': a truncated Gumbel never exceeds its truncation.")
    return len(cases) + 1


# ------------------------------------------------------------------------------------------------
@exercise("gumbel-plackett-luce", "Plackett-Luce log-probability")
def _check_plackett_luce(log_prob):
    """``log_prob(logits, order)``: logits a 1-D tensor, order a list of distinct ints."""
    f64 = dict(dtype=torch.float64)
    cases = [
        (torch.tensor([1.0, 0.0, -0.5, 0.7], **f64), [0]),
        (torch.tensor([1.0, 0.0, -0.5, 0.7], **f64), [3, 0]),
        (torch.tensor([1.0, 0.0, -0.5, 0.7], **f64), [2, 1, 3, 0]),
        (torch.tensor([0.0, -math.inf, 2.0], **f64), [2, 0]),
        (torch.tensor([40.0, 0.0, -40.0], **f64), [0, 1]),
    ]
    for logits, order in cases:
        desc = f"logits = {logits.tolist()}, order = {order}"
        got = call(log_prob, logits.clone(), list(order), input_desc=desc)
        expected = plackett_luce_log_prob(logits, torch.tensor(order))
        hint = ("log P = sum over steps j of logits[i_j] - logsumexp(logits of the items not yet "
                "drawn); remove drawn items by setting their logits to -inf.")
        if logits[0] == 40.0:
            hint = ("the first item holds almost all the mass: 'log(total - drawn)' cancels to "
                    "log(0) here. Take the logsumexp over the remaining items directly (mask the "
                    "drawn ones with -inf) instead of subtracting from the total.")
        expect_close(torch.as_tensor(got, **f64), expected, input_desc=desc, rtol=1e-9,
                     atol=1e-9, hint=hint)
    # probabilities of all ordered pairs of 4 items sum to one
    logits = torch.tensor([1.0, 0.0, -0.5, 0.7], **f64)
    total = sum(math.exp(float(call(log_prob, logits.clone(), [a, b], input_desc=f"order = {[a, b]}")))
                for a in range(4) for b in range(4) if a != b)
    expect_true(abs(total - 1) < 1e-9,
                f"the probabilities of the 12 ordered pairs of 4 items sum to {total:.6g}, not 1.")
    return len(cases) + 1
