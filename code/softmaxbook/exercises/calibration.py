"""Checks for the coding exercises of the chapter "Calibration and open-set recognition"
(book/03_calibration.ipynb).

* ``calibration-ece``: the expected calibration error by hand, with the chapter's bins
  ((m-1)/M, m/M], weighted by the share of examples in each bin. Calling the package's own
  ``expected_calibration_error`` (or torchmetrics) is rejected.
* ``calibration-kl-uniform``: ``KL(U || softmax(logits))`` per row from ``log_softmax``, finite at
  extreme logits (the reverse KL, a missing ``log K`` and ``log(softmax)`` are caught).
* ``calibration-fpr95``: the false-positive rate at 95 % true-positive rate, in-distribution
  positive, exact with ties (an interpolating quantile, a strict ``>`` and the swapped convention
  are caught).
"""

from __future__ import annotations

import math
from contextlib import ExitStack
from unittest import mock

import torch

from . import call, exercise, expect_close, expect_true
from .. import calibration as _cal

f64 = dict(dtype=torch.float64)


def _reference_ece(probs, labels, n_bins):
    return _cal.expected_calibration_error(probs, labels, n_bins).item()


def _no_library(func, *args, input_desc):
    """Run the learner's function with the ready-made ECEs replaced by a trap."""
    def trap(*a, **k):
        raise _UsedLibrary()

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(_cal, "expected_calibration_error", trap))
        stack.enter_context(mock.patch.object(_cal, "reliability_bins", trap))
        try:
            import torchmetrics.functional.classification as tmc
            for name in ("multiclass_calibration_error", "binary_calibration_error",
                         "calibration_error"):
                if hasattr(tmc, name):
                    stack.enter_context(mock.patch.object(tmc, name, trap))
        except ImportError:  # pragma: no cover - torchmetrics is in requirements.txt
            pass
        try:
            return call(func, *args, input_desc=input_desc)
        except _UsedLibrary:
            expect_true(False, f"for input {input_desc} your function calls a ready-made "
                        "calibration error (softmaxbook or torchmetrics); this exercise asks "
                        "you to compute the bins yourself.")


class _UsedLibrary(BaseException):  # not swallowed by a learner's `except Exception`
    pass


def _ece_cases():
    g = torch.Generator().manual_seed(31)
    z = 2.5 * torch.randn(400, 5, generator=g, **f64)
    y = torch.multinomial(torch.softmax(z / 1.7, 1), 1, generator=g).squeeze(1)
    cases = [
        ("400 random rows, 5 classes, 15 bins", torch.softmax(z, 1), y, 15),
        ("the same rows, 4 bins", torch.softmax(z, 1), y, 4),
    ]
    # hand-made: confidences on bin edges (0.6 and 0.8 with 5 bins) and a tie 0.5 / 0.5
    probs = torch.tensor([[0.6, 0.4], [0.2, 0.8], [0.5, 0.5], [0.9, 0.1], [0.6, 0.4]], **f64)
    labels = torch.tensor([0, 0, 1, 0, 1])
    cases.append(("confidences on the bin edges 0.6, 0.8 and a tie 0.5/0.5, 5 bins", probs,
                  labels, 5))
    # the true class is often not the predicted one: top-label, not true-class probability
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.45, 0.35, 0.2],
                          [0.34, 0.33, 0.33]], **f64)
    labels = torch.tensor([1, 2, 0, 2])
    cases.append(("4 rows, 3 classes, 10 bins", probs, labels, 10))
    return cases


@exercise("calibration-ece", "expected calibration error by hand")
def _check_ece(ece):
    """``ece(probs, labels, n_bins)`` -> float or 0-d tensor."""
    cases = _ece_cases()
    for desc, probs, labels, n_bins in cases:
        got = _no_library(ece, probs.clone(), labels.clone(), n_bins, input_desc=desc)
        expected = _reference_ece(probs, labels, n_bins)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.reshape(())
        hint = ("for each bin: the share of all examples in it times |accuracy - mean "
                "confidence| of its examples; sum over non-empty bins. The confidence is the "
                "largest probability of a row, and 'correct' means its argmax is the label.")
        if "edges" in desc:
            hint = ("check which bin a confidence exactly on an edge goes to: the chapter's "
                    "bins are closed on the right, ((m-1)/M, m/M], so 0.6 is in (0.4, 0.6]; "
                    "and a tie 0.5/0.5 predicts the first class (argmax).")
        expect_close(got, torch.tensor(expected, **f64), input_desc=desc, rtol=1e-9, atol=1e-12,
                     what="ECE", hint=hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
@exercise("calibration-kl-uniform", "KL(U || p) from log-softmax")
def _check_kl_uniform(kl):
    """``kl(logits)`` -> Tensor (N,): KL(U || softmax(logits)) per row."""
    cases = [
        ("logits [[0, 0, 0], [log 3, 0, 0]]",
         torch.tensor([[0.0, 0.0, 0.0], [math.log(3.0), 0.0, 0.0]], **f64)),
        ("random logits, 4 rows, 6 classes",
         torch.randn(4, 6, generator=torch.Generator().manual_seed(5), **f64)),
        ("huge logits [[800, -800], [0, 1000]]", torch.tensor([[800.0, -800.0],
                                                               [0.0, 1000.0]], **f64)),
        ("float32 logits [[100, -100, 0]]", torch.tensor([[100.0, -100.0, 0.0]])),
    ]
    for desc, logits in cases:
        got = call(kl, logits.clone(), input_desc=desc)
        expected = _cal.kl_uniform(logits)
        hint = ("KL(U || p) = sum_k (1/K) log((1/K) / p_k): the expectation is under the "
                "uniform U, and log p comes from log_softmax.")
        if (isinstance(got, torch.Tensor) and got.is_floating_point()
                and got.dtype != logits.dtype):
            expect_true(False, f"for input {desc} ({logits.dtype}) your result is {got.dtype}: "
                        "it changed precision on the way.",
                        hint="compute in the dtype of the logits; do not convert them.")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            g64 = got.detach().double()
            reverse = (torch.softmax(logits.double(), 1)
                       * (torch.log_softmax(logits.double(), 1) + math.log(logits.shape[1]))
                       ).sum(1)
            if not torch.isfinite(g64).all():
                hint = ("your result is not finite: log(softmax(x)) is -inf once a probability "
                        "underflows. Use torch.log_softmax, which stays finite.")
            elif torch.allclose(g64, reverse, rtol=1e-6, atol=1e-9):
                hint = ("this is KL(p || U), the reverse direction: the average must be taken "
                        "under U (weights 1/K), not under p.")
            elif torch.allclose(g64 - expected.double(), torch.full_like(g64, -math.log(
                    logits.shape[1])), atol=1e-6) or torch.allclose(
                    g64 - expected.double(), torch.full_like(g64, math.log(logits.shape[1])),
                    atol=1e-6):
                hint = "you are off by log K: KL(U || U) must be 0."
        expect_close(got, expected, input_desc=desc, rtol=1e-6, atol=1e-6,
                     what="KL per row", hint=hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
@exercise("calibration-fpr95", "FPR at 95 % TPR by hand")
def _check_fpr95(fpr95):
    """``fpr95(scores_in, scores_out)`` -> float or 0-d tensor."""
    g = torch.Generator().manual_seed(7)
    cases = [
        ("scores_in = 1, 2, ..., 20; scores_out = 0.5, 1.5, ..., 9.5",
         torch.arange(1, 21, **f64), torch.arange(10, **f64) + 0.5),
        ("scores_in = 1, 2, ..., 30; scores_out = 2.2, 2.4, 3.5, 4.5, ..., 10.5 (95 % of 30 "
         "is 28.5)", torch.arange(1, 31, **f64),
         torch.tensor([2.2, 2.4] + [3.5 + k for k in range(8)], **f64)),
        ("ties: scores_in = [1, 1, 1, 1], scores_out = [1, 0]",
         torch.tensor([1.0, 1.0, 1.0, 1.0], **f64), torch.tensor([1.0, 0.0], **f64)),
        ("200 normal scores_in (mean 1), 150 scores_out (mean 0), rounded to 0.1",
         (torch.randn(200, generator=g, **f64) + 1).round(decimals=1),
         torch.randn(150, generator=g, **f64).round(decimals=1)),
    ]
    for desc, s_in, s_out in cases:
        got = call(fpr95, s_in.clone(), s_out.clone(), input_desc=desc)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.reshape(())
        expected = _cal.ood_metrics(s_in, s_out)["fpr_at_95_tpr"]
        swapped = _cal.ood_metrics(s_in, s_out, positive="out")["fpr_at_95_tpr"]
        hint = ("take the largest threshold t such that at least 95 % of scores_in are >= t, "
                "then return the fraction of scores_out that are >= t.")
        try:
            value = float(got)
        except (TypeError, ValueError):
            value = None
        if value is not None and abs(value - swapped) < 1e-12 and abs(swapped - expected) > 1e-12:
            hint = ("this is the FPR with out-of-distribution as the positive class; the "
                    "exercise takes in-distribution as positive (higher score = in).")
        elif "ties" in desc:
            hint = ("a threshold accepts every score >= t: tied scores are accepted together, "
                    "so compare with >=, not >.")
        elif "28.5" in desc:
            hint = ("at least 95 % means 29 of the 30 (28.5 rounded up); do not interpolate "
                    "between scores (torch.quantile does).")
        expect_close(got, torch.tensor(expected, **f64), input_desc=desc, rtol=0, atol=1e-12,
                     what="FPR at 95 % TPR", hint=hint)
    return len(cases)
