"""Checks for the coding exercises of the chapter "Calibration and open-set recognition"
(book/03_calibration.ipynb).

* ``calibration-ece``: the expected calibration error by hand, with the chapter's bins
  ((m-1)/M, m/M], weighted by the share of examples in each bin, a confidence of exactly 1 in the
  last bin. Calling the package's own ``expected_calibration_error`` / ``reliability_bins`` or
  torchmetrics' calibration error is rejected however it was imported.
* ``calibration-kl-uniform``: ``KL(U || softmax(logits))`` per row from ``log_softmax``, finite at
  extreme logits (the reverse KL, a missing ``log K`` and ``log(softmax)`` are caught; the
  package's ``kl_uniform`` and ``confidence_loss`` are rejected).
* ``calibration-fpr95``: the false-positive rate at 95 % true-positive rate, in-distribution
  positive, exact with ties (an interpolating quantile, a strict ``>`` and the swapped convention
  are caught; the package's ``ood_metrics`` and scikit-learn's ``roc_curve`` are rejected).
* ``calibration-newton-step`` (a derivation's end result): ``newton_beta(beta, logits, labels)``,
  the new ``beta`` after one Newton step on NLL(beta), compared to 1e-12; autograd is refused,
  and a numerical derivative or float32 arithmetic gets a hint of its own.
* ``calibration-vector-maxent`` (a derivation's end result): ``vector_map(logits, lam)``, the
  maximum-entropy probabilities under one logit constraint per class, ``softmax(lam * z_i)``
  with the multipliers' sign of (calibration-lagrangian) (a flipped sign gets a hint).
* ``calibration-murphy``: ``murphy_terms(forecasts, outcomes, n_bins)``, Murphy's reliability,
  resolution and uncertainty of a binary forecast with the chapter's right-closed equal-width
  bins, compared to RTOL (unweighted bins, left-closed bins, edges from ``torch.linspace``
  (0.55 of 20 bins one bin up), the mean forecast in place of the
  base rate, NaN from empty bins and swapped terms are caught; the package's
  ``brier_decomposition`` is rejected).
* ``calibration-mahalanobis``: ``mahalanobis_ood(h_fit, y_fit, h)``, minus the smallest squared
  Mahalanobis distance to the class means under one pooled covariance (divided by N), compared
  to 1e-6 (per-class or diagonal covariances, the Euclidean distance, the covariance not
  inverted, the overall mean, the maximum, a flipped sign and the square root are caught; the
  package's ``class_gaussians`` / ``mahalanobis_score`` are rejected).

The ECE and the FPR may come back as a Python or NumPy number or a one-element tensor of any
float dtype: they are compared to about 5 significant digits (RTOL), which float32 arithmetic
meets, so the chapter's own ``.float()`` idiom is accepted; a failure message writes the two
numbers with enough digits to differ and gives their difference. The KL exercise asks for a
tensor in the dtype of the logits, computed in that dtype (float64 logits are compared at
float64's precision, so float32 arithmetic on them is caught), and says so in its task.
"""

from __future__ import annotations

import inspect
import math
import sys

import torch

from . import (call, check_generator, check_salt, describe, exercise, expect_close,
               expect_true, watch_calls)
from .. import calibration as _cal

f64 = dict(dtype=torch.float64)


def _library_calls(module_funcs: dict, outside: dict) -> list:
    """The functions a check watches: ``module_funcs`` of the package, plus the functions named
    in ``outside`` ({module name: [attribute, ...]}) of libraries that are already imported (a
    library the learner never imported cannot be called)."""
    targets = list(module_funcs)
    for module, names in outside.items():
        mod = sys.modules.get(module)
        for name in names if mod is not None else ():
            func = getattr(mod, name, None)
            # scikit-learn wraps its public functions in a validating decorator whose code is
            # shared by all of them: watch the function inside
            func = inspect.unwrap(func) if func is not None else None
            if func is not None and hasattr(func, "__code__"):
                targets.append(func)
    return targets


def _run_watched(func, args, *, input_desc, targets, shown, task):
    """Call the learner's function, failing if it enters one of the functions that
    ``targets()`` lists. A library imported during the call (inside the learner's function)
    was not watched yet: then the call runs once more with it watched."""
    watched = targets()
    with watch_calls(*watched) as seen:
        got = call(func, *args, input_desc=input_desc)
    if not seen and len(targets()) > len(watched):
        with watch_calls(*targets()) as seen:
            got = call(func, *args, input_desc=input_desc)
    if seen:
        expect_true(False, f"for input {input_desc} your function calls {shown(seen[0])}, a "
                    f"ready-made {task}; this exercise asks you to write it yourself.")
    return got


# Right answers are compared at a tolerance that any float dtype meets: a learner who writes
# the chapter's own ``(pred == labels).float()`` or ``.float().mean()`` computes a right ECE or
# FPR to ~1e-7, and was rejected at rtol 1e-9 with "expected 0.19801 but got 0.19801". Every
# wrong answer the tests feed is off by far more than this on some input (1e-3 and up).
RTOL, ATOL = 1e-5, 1e-7


def _number(got, *, input_desc: str, what: str) -> float:
    """One number from whatever a learner may return for a scalar: a Python or NumPy number, a
    tensor or array with one element (any float dtype), or a list of one number."""
    value = got
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        value = value.detach().cpu().double().item()
    elif type(value).__module__ == "numpy" and getattr(value, "size", 0) == 1:
        if getattr(value.dtype, "kind", "") in "fiu":
            value = float(value.reshape(()).item() if hasattr(value, "reshape") else value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        expect_true(False, f"for input {input_desc} the {what} should be one number (a float, "
                    "or a tensor or array with one element), got " + describe(got) + ".")
    value = float(value)
    if not math.isfinite(value):
        expect_true(False, f"for input {input_desc} your {what} is {value}, not a finite "
                    "number.", hint="look for a division by an empty bin or a log of 0.")
    return value


def _apart(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` written with just enough significant digits to look different."""
    for digits in range(6, 18):
        sa, sb = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if sa != sb:
            return sa, sb
    return repr(a), repr(b)


def _expect_number(got: float, expected: float, *, input_desc: str, what: str,
                   hint: str | None = None) -> None:
    """``got`` equal to ``expected`` within RTOL/ATOL, else a message whose two numbers look
    different and that gives their difference."""
    if abs(got - expected) <= ATOL + RTOL * abs(expected):
        return
    e, g = _apart(expected, got)
    expect_true(False, f"for input {input_desc}\n  expected {what} {e}\n  but got      {g}\n"
                f"  (difference {got - expected:+.3g}).", hint)


def _expect_unchanged(passed, originals, names, input_desc):
    """Fail if the learner's function changed one of its tensor arguments in place: the check
    passes copies, and used to accept, say, logits shifted in place (independent review)."""
    for name, got, want in zip(names, passed, originals):
        expect_true(isinstance(got, torch.Tensor) and got.shape == want.shape
                    and bool(((got == want) | (got.isnan() & want.isnan())).all()),
                    f"for input {input_desc} your function changed its argument '{name}' in "
                    f"place (an in-place operation such as {name} -= ... or {name}.div_(...)): "
                    "a function should not change the tensors its caller passed.",
                    hint="use out-of-place operations (x = x - m, not x -= m).")


def _reference_ece(probs, labels, n_bins):
    return _cal.expected_calibration_error(probs, labels, n_bins).item()


def _ece_cases():
    g = check_generator(31)  # public in a notebook; the grader's secret salt changes it
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
    # confidences of exactly 1 share the last bin (0.9, 1] with 0.95 and 0.97: an answer that
    # drops them, or gives them a bin of their own (as torchmetrics does), gets another value
    probs = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.95, 0.05, 0.0],
                          [0.97, 0.0, 0.03], [0.5, 0.3, 0.2]], **f64)
    labels = torch.tensor([0, 1, 0, 0, 2])
    cases.append(("confidences 1, 1, 0.95, 0.97, 0.5, 10 bins", probs, labels, 10))
    # the review's input: 0.55 lies exactly on the edge 11/20 and belongs to (0.50, 0.55];
    # edges made by torch.linspace(0, 1, 21) put it one bin up (linspace gives 0.5499999...)
    probs = torch.tensor([[0.55, 0.45], [0.52, 0.48], [0.58, 0.42]], **f64)
    labels = torch.tensor([0, 1, 0])
    cases.append(("confidences 0.55, 0.52, 0.58, 20 bins", probs, labels, 20))
    if check_salt():  # the grader's secret salt: confidences on random bin edges, and 1
        n_bins = [4, 5, 8, 10, 20][int(torch.randint(0, 5, (1,), generator=g))]
        k = torch.randint((n_bins + 1) // 2, n_bins + 1, (12,), generator=g)
        conf = k.to(torch.float64) / n_bins
        probs = torch.stack([conf, 1 - conf], 1)
        flip = torch.rand(12, generator=g) < 0.5
        probs[flip] = probs[flip].flip(1)
        labels = torch.randint(0, 2, (12,), generator=g)
        cases.append((f"confidences on the bin edges {conf.tolist()} (columns swapped at "
                      f"random, ties 0.5/0.5 included), labels {labels.tolist()}, "
                      f"{n_bins} bins", probs, labels, n_bins))
    return cases


_ECE_LIBRARY = {
    "torchmetrics.functional.classification.calibration_error": ["_ce_compute"],
}


@exercise("calibration-ece", "expected calibration error by hand")
def _check_ece(ece):
    """``ece(probs, labels, n_bins)`` -> float or 0-d tensor."""
    cases = _ece_cases()
    own = {_cal.expected_calibration_error: "expected_calibration_error",
           _cal.reliability_bins: "reliability_bins", _cal._reliability: "_reliability"}
    for desc, probs, labels, n_bins in cases:
        passed = (probs.clone(), labels.clone())
        got = _run_watched(
            ece, (*passed, n_bins), input_desc=desc,
            targets=lambda: _library_calls(own, _ECE_LIBRARY),
            shown=lambda name: (f"softmaxbook.calibration.{name}" if name in own.values()
                                else "torchmetrics' calibration error"),
            task="calibration error")
        _expect_unchanged(passed, (probs, labels), ("probs", "labels"), desc)
        got = _number(got, input_desc=desc, what="ECE")
        expected = _reference_ece(probs, labels, n_bins)
        hint = ("for each bin: the share of all examples in it times |accuracy - mean "
                "confidence| of its examples; sum over non-empty bins. The confidence is the "
                "largest probability of a row, and 'correct' means its argmax is the label.")
        if "edges" in desc:
            hint = ("check which bin a confidence exactly on an edge goes to: the chapter's "
                    "bins are closed on the right, ((m-1)/M, m/M], so 0.6 is in (0.4, 0.6]; "
                    "and a tie 0.5/0.5 predicts the first class (argmax).")
        elif "confidences 1" in desc:
            hint = ("a confidence of exactly 1 belongs to the last bin ((M-1)/M, 1] together "
                    "with the other confidences there; it is neither left out nor given a bin "
                    "of its own.")
        elif "0.55" in desc:
            hint = ("0.55 is the edge 11/20 and belongs to (0.50, 0.55]. Edges from "
                    "torch.linspace(0, 1, 21) are not exactly m/M (the 12th is "
                    "0.5499999999999999): use ceil(c * M) - 1, or edges m / M.")
        _expect_number(got, expected, input_desc=desc, what="ECE", hint=hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
@exercise("calibration-kl-uniform", "KL(U || p) from log-softmax")
def _check_kl_uniform(kl):
    """``kl(logits)`` -> Tensor (N,): KL(U || softmax(logits)) per row."""
    cases = [
        ("logits [[0, 0, 0], [log 3, 0, 0]]",
         torch.tensor([[0.0, 0.0, 0.0], [math.log(3.0), 0.0, 0.0]], **f64)),
        ("random logits, 4 rows, 6 classes",
         torch.randn(4, 6, generator=check_generator(5), **f64)),
        ("huge logits [[800, -800], [0, 1000]]", torch.tensor([[800.0, -800.0],
                                                               [0.0, 1000.0]], **f64)),
        ("float32 logits [[100, -100, 0]]", torch.tensor([[100.0, -100.0, 0.0]])),
        # differences float32 cannot hold: float32 arithmetic on these float64 logits is off
        # by 0.8 % and 4.6 % (R4 review, finding 6)
        ("logits [[1e4 + 0.1, 1e4], [0.001, 0]]",
         torch.tensor([[1e4 + 0.1, 1e4], [0.001, 0.0]], **f64)),
    ]
    if check_salt():  # the grader's secret salt: huge random logits, float64 and float32
        g = check_generator(37)
        huge = 600 * torch.randn(3, 4, generator=g, **f64)
        cases.append((f"huge random logits {describe(huge)}", huge))
        cases.append((f"float32 logits {describe(huge[:1].float() / 6)}", huge[:1].float() / 6))
        u = 0.5 + torch.rand(2, generator=g, **f64)
        near = torch.tensor([[5e3 * (1 + u[0]) + 0.1 * u[1], 5e3 * (1 + u[0])],
                             [1e-3 * u[1], 0.0]], **f64)
        cases.append((f"logits {describe(near)}", near))
    own = {_cal.kl_uniform: "kl_uniform", _cal.confidence_loss: "confidence_loss"}
    for desc, logits in cases:
        passed = (logits.clone(),)
        got = _run_watched(kl, passed, input_desc=desc, targets=lambda: list(own),
                           shown=lambda name: f"softmaxbook.calibration.{name}",
                           task="KL(U || p)")
        _expect_unchanged(passed, (logits,), ("logits",), desc)
        expected = _cal.kl_uniform(logits)
        hint = ("KL(U || p) = sum_k (1/K) log((1/K) / p_k): the expectation is under the "
                "uniform U, and log p comes from log_softmax.")
        if not isinstance(got, torch.Tensor):
            expect_true(False, f"for input {desc} the KL per row should be a torch tensor of "
                        f"shape ({logits.shape[0]},) in the dtype of the logits, got "
                        f"{type(got).__name__}: {describe(got)}.",
                        hint="stay in torch: torch.log_softmax(logits, -1) and tensor "
                        "arithmetic keep the dtype and the shape.")
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
        expect_close(got, expected, input_desc=desc, rtol=0, atol=float("inf"),
                     what="KL per row", hint=hint)  # shape, NaN and inf only
        g64, e64 = got.detach().double().cpu(), expected.double()
        if logits.dtype == torch.float64:
            # float64 logits are compared at float64's precision: a few hundred rounding
            # errors of the row's largest term (|z_k| or log K), so that a right answer in
            # another form (logsumexp(z) - mean(z) - log K cancels terms of size max |z|)
            # passes, and float32 arithmetic on float64 logits (R4 review) does not
            scale = logits.abs().amax(1) + math.log(logits.shape[1])
            tol = 1e-12 * e64.abs() + 256 * torch.finfo(torch.float64).eps * scale
        else:
            tol = 1e-6 + 1e-6 * e64.abs()
        off = (g64 - e64).abs() > tol
        if bool(off.any()) and logits.dtype == torch.float64:
            low = _cal.kl_uniform(logits.float()).double()
            if torch.allclose(g64, low, rtol=1e-5, atol=1e-6):
                hint = ("your result matches the KL computed in float32: these logits are "
                        "float64, and the KL must be computed in float64 (converting to "
                        "float32 on the way and back loses the digits that matter here).")
        if bool(off.any()):
            i = int(off.nonzero()[0])
            e, g = _apart(float(e64[i]), float(g64[i]))
            expect_true(False, f"for input {desc}\n  expected KL per row {describe(expected)}"
                        f"\n  but got             {describe(got)}\n  (row {i}: expected "
                        f"{e}, got {g})", hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
_ROC_LIBRARY = {"sklearn.metrics": ["roc_curve"],
                "sklearn.metrics._ranking": ["_binary_clf_curve"]}


@exercise("calibration-fpr95", "FPR at 95 % TPR by hand")
def _check_fpr95(fpr95):
    """``fpr95(scores_in, scores_out)`` -> float or 0-d tensor."""
    g = check_generator(7)  # public in a notebook; the grader's secret salt changes it
    cases = [
        ("scores_in = 1, 2, ..., 20; scores_out = 0.5, 1.5, ..., 9.5",
         torch.arange(1, 21, **f64), torch.arange(10, **f64) + 0.5),
        ("scores_in = 1, 2, ..., 30; scores_out = 2.2, 2.4, 3.5, 4.5, ..., 10.5 (95 % of 30 "
         "is 28.5)", torch.arange(1, 31, **f64),
         torch.tensor([2.2, 2.4] + [3.5 + k for k in range(8)], **f64)),
        # 19 scores: 95 % is 18.05, so all 19 must be accepted. A nearest-rank 5 % quantile
        # (torch.quantile(..., interpolation="nearest"): index round(0.05 * 18) = 1) keeps only
        # 18 of 19 = 94.7 %, and passed every other public case (R3 review)
        ("scores_in = 1, 2, ..., 19; scores_out = 0.5, 1.5, ..., 9.5 (95 % of 19 is 18.05)",
         torch.arange(1, 20, **f64), torch.arange(10, **f64) + 0.5),
        ("ties: scores_in = [1, 1, 1, 1], scores_out = [1, 0]",
         torch.tensor([1.0, 1.0, 1.0, 1.0], **f64), torch.tensor([1.0, 0.0], **f64)),
        ("200 normal scores_in (mean 1), 150 scores_out (mean 0), rounded to 0.1",
         (torch.randn(200, generator=g, **f64) + 1).round(decimals=1),
         torch.randn(150, generator=g, **f64).round(decimals=1)),
    ]
    if check_salt():  # the grader's secret salt: small integer scores, many ties
        n_in, n_out = (int(v) for v in torch.randint(10, 40, (2,), generator=g))
        s_in = torch.randint(2, 12, (n_in,), generator=g).to(torch.float64)
        s_out = torch.randint(0, 9, (n_out,), generator=g).to(torch.float64)
        cases.append((f"ties: scores_in = {s_in.tolist()}, scores_out = {s_out.tolist()}",
                      s_in, s_out))
    own = {_cal.ood_metrics: "ood_metrics", _cal._metrics_one_way: "_metrics_one_way",
           _cal._curve: "_curve"}
    for desc, s_in, s_out in cases:
        passed = (s_in.clone(), s_out.clone())
        got = _run_watched(
            fpr95, passed, input_desc=desc,
            targets=lambda: _library_calls(own, _ROC_LIBRARY),
            shown=lambda name: (f"softmaxbook.calibration.{name}" if name in own.values()
                                else f"scikit-learn's {name.lstrip('_')}"),
            task="ROC curve")
        _expect_unchanged(passed, (s_in, s_out), ("scores_in", "scores_out"), desc)
        got = _number(got, input_desc=desc, what="FPR")
        expected = _cal.ood_metrics(s_in, s_out)["fpr_at_95_tpr"]
        swapped = _cal.ood_metrics(s_in, s_out, positive="out")["fpr_at_95_tpr"]
        hint = ("take the largest threshold t such that at least 95 % of scores_in are >= t, "
                "then return the fraction of scores_out that are >= t.")
        value = got
        if abs(value - swapped) < 1e-6 and abs(swapped - expected) > 1e-6:
            hint = ("this is the FPR with out-of-distribution as the positive class; the "
                    "exercise takes in-distribution as positive (higher score = in).")
        elif "ties" in desc:
            hint = ("a threshold accepts every score >= t: tied scores are accepted together, "
                    "so compare with >=, not >.")
        elif "28.5" in desc:
            hint = ("at least 95 % means 29 of the 30 (28.5 rounded up); do not interpolate "
                    "between scores (torch.quantile does).")
        elif "18.05" in desc:
            hint = ("at least 95 % means all 19 (18.05 rounded up): the threshold is the "
                    "smallest score. A 5 % quantile by nearest rank (or any rounding to the "
                    "nearest) takes the second smallest and accepts only 18 of 19.")
        _expect_number(got, expected, input_desc=desc, what="FPR at 95 % TPR", hint=hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# calibration-newton-step (a derivation's end result): one Newton step on NLL(beta)
# Automatic differentiation in either mode (as in the choice chapter's checks): the exercise asks
# for the derivatives derived by hand.
_AUTOGRAD = {torch.autograd.grad: "torch.autograd.grad",
             torch.Tensor.backward: "Tensor.backward (autograd)",
             torch._make_dual: "forward-mode autodiff (torch.func.jvp / forward_ad)",
             torch._unpack_dual: "forward-mode autodiff (torch.func.jvp / forward_ad)"}
NEWTON_RTOL = 1e-12


def _reference_newton(beta, logits, labels):
    """beta - NLL'(beta) / NLL''(beta), the variance computed about the mean (float64)."""
    z = logits.to(torch.float64)
    p = torch.softmax(beta * z, dim=1)
    mean = (p * z).sum(1)
    grad = (mean - z.gather(1, labels[:, None])[:, 0]).mean()
    curv = (p * (z - mean[:, None]) ** 2).sum(1).mean()
    return float(beta - grad / curv)


def _newton_cases():
    g = check_generator(2031)  # public in a notebook; the grader's secret salt changes it
    hand = torch.tensor([[2.0, 0.0, -1.0], [0.5, 1.5, 0.0], [1.0, 1.0, 3.0], [0.0, -2.0, 1.0]],
                        **f64)
    hand_y = torch.tensor([0, 0, 2, 2])
    cases = [(1.0, hand, hand_y, "beta = 1, 4 rows of 3 logits " + str(hand.tolist())
              + ", labels [0, 0, 2, 2]")]
    # labels drawn from softmax(beta_true z): NLL(beta) has its minimum near beta_true, and the
    # step from beta goes towards it (the true values are not shown: the check's inputs are
    # the logits and labels)
    for beta, beta_true, n, k, scale in ((1.0, 0.6, 50, 10, 3.0), (0.3, 0.5, 200, 5, 8.0),
                                         (2.5, 2.0, 30, 4, 1.0), (0.05, 0.08, 100, 100, 20.0)):
        z = scale * torch.randn(n, k, generator=g, **f64)
        y = torch.multinomial(torch.softmax(beta_true * z, 1), 1, generator=g)[:, 0]
        cases.append((beta, z, y, f"beta = {beta}, {n} rows of {k} logits ~ N(0, {scale:g}^2)"))
    if check_salt():  # the hand case with every row shifted and the classes permuted
        shift = 10 * torch.randn(4, 1, generator=g, **f64)
        perm = torch.randperm(3, generator=g)
        inv = torch.argsort(perm)
        z = (hand + shift)[:, perm]
        cases.append((1.0, z, inv[hand_y], "beta = 1, 4 rows of 3 logits "
                      + str([[round(v, 4) for v in row] for row in z.tolist()])
                      + f", labels {inv[hand_y].tolist()}"))
    return cases


@exercise("calibration-newton-step", "one Newton step on NLL(beta)")
def _check_newton_step(newton_beta):
    cases = _newton_cases()
    for beta, z, y, desc in cases:
        want = _reference_newton(beta, z, y)
        passed = (z.clone(), y.clone())
        # the package's own derivatives (a private helper of fit_temperature) and fit itself
        # are off limits too (review of the new checks, H2)
        with watch_calls(_cal._nll_derivatives, _cal.fit_temperature) as seen:
            got = call(newton_beta, beta, *passed, input_desc=desc, forbid=_AUTOGRAD,
                       forbid_reason="The exercise asks for the step from the two derivatives "
                                     "you derived (no automatic differentiation).")
        expect_true(not seen, f"for input {desc} your function calls softmaxbook.calibration."
                              f"{seen[0] if seen else ''}, which does this exercise's work; "
                              "write the step from your own derivatives.")
        _expect_unchanged(passed, (z, y), ("logits", "labels"), desc)
        value = _number(got, input_desc=desc, what="new beta")
        err = abs(value - want)
        if err <= NEWTON_RTOL * abs(want) + 1e-12:
            continue
        hint = ("a Newton step divides the first derivative of NLL(beta) by the second, both at "
                "the current beta, with the probabilities softmax(beta z) (not softmax(z)); "
                "check the sign of the step and that both derivatives are means over the "
                "same rows.")
        if err <= 1e-5 * (abs(want) + abs(beta)):
            hint = ("your step is close but off by far more than float64 rounding leaves: a "
                    "numerical derivative, or float32 arithmetic, gives such an error. Compute "
                    "NLL' and NLL'' from their formulas in float64.")
        e, gv = _apart(want, value)
        expect_true(False, f"for input {desc}\n  expected new beta {e}\n  but got           "
                           f"{gv}\n  (difference {value - want:+.3g}).", hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# calibration-vector-maxent (a derivation's end result): the maximum-entropy map under one logit
# constraint per class, q_i = softmax(lam * z_i) with lam one multiplier per class
def _vector_maxent_cases():
    g = check_generator(2037)  # public in a notebook; the grader's secret salt changes it
    z_hand = torch.tensor([[2.0, 0.0, -1.0], [0.5, 1.5, 0.0]], **f64)
    cases = [
        ("all multipliers 1 (the softmax itself)", z_hand, torch.ones(3, **f64)),
        ("one multiplier per class", z_hand, torch.tensor([2.0, 0.5, 1.0], **f64)),
        ("a multiplier 0 and a negative one", z_hand, torch.tensor([0.0, -1.0, 3.0], **f64)),
        ("20 rows of 7 logits ~ N(0, 3^2), multipliers uniform on [-2, 3]",
         3 * torch.randn(20, 7, generator=g, **f64),
         -2 + 5 * torch.rand(7, generator=g, **f64)),
        ("one row of 40 logits", 2 * torch.randn(1, 40, generator=g, **f64),
         0.1 + 2 * torch.rand(40, generator=g, **f64)),
    ]
    if check_salt():  # the hand case with its classes permuted and new multipliers
        perm = torch.randperm(3, generator=g)
        cases.append(("one multiplier per class, classes permuted", z_hand[:, perm],
                      -1 + 3 * torch.rand(3, generator=g, **f64)))
    return cases


@exercise("calibration-vector-maxent", "maximum entropy with one constraint per class")
def _check_vector_maxent(vector_map):
    """``vector_map(logits, lam)`` -> probabilities of the shape of ``logits``."""
    cases = _vector_maxent_cases()
    for name, z, lam in cases:
        desc = f"logits = {describe(z)}, lam = {describe(lam)} ({name})"
        passed = (z.clone(), lam.clone())
        got = call(vector_map, *passed, input_desc=desc)
        _expect_unchanged(passed, (z, lam), ("logits", "lam"), desc)
        expect_true(isinstance(got, torch.Tensor) and got.is_floating_point()
                    and got.shape == z.shape,
                    f"for input {desc} the result should be a float tensor of the shape of the "
                    f"logits, {tuple(z.shape)} (one distribution q_i per row), got "
                    f"{describe(got)}.")
        expect_true(got.dtype == torch.float64, f"for input {desc} (float64) your "
                    f"probabilities are {got.dtype}: return float64, the logits' dtype.")
        want = torch.softmax(lam * z, dim=1)
        g64 = got.detach().cpu()
        hint = ("give each constraint k its own multiplier lam_k, entering the Lagrangian as "
                "lambda does in (calibration-lagrangian), and set the derivative with respect "
                "to q_ik to zero: which multipliers does the term of q_ik contain?")
        if torch.allclose(g64, torch.softmax(-lam * z, dim=1), rtol=1e-9, atol=1e-12):
            hint = ("your map has the multipliers' sign flipped: with the sign convention of "
                    "(calibration-lagrangian), one constraint gives softmax(lambda z_i).")
        elif not torch.allclose(g64.sum(1), torch.ones(len(z), **f64), atol=1e-9):
            hint = ("each row of q should sum to 1 (the normalisation constraints, one "
                    "multiplier mu_i per example).")
        expect_close(got, want, input_desc=desc, rtol=1e-10, atol=1e-14, what="probabilities",
                     hint=hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# calibration-murphy: Murphy's reliability, resolution and uncertainty of a binary forecast
def _murphy_reference(f, o, n_bins):
    from .. import calibration_beyond as _beyond
    d = _beyond.brier_decomposition(f, o, n_bins)
    return float(d.reliability), float(d.resolution), float(d.uncertainty)


def _murphy_cases():
    g = check_generator(43)  # public in a notebook; the grader's secret salt changes it
    f = torch.rand(300, generator=g, **f64)
    o = (torch.rand(300, generator=g, **f64) < f ** 1.5).long()
    cases = [
        ("forecasts [0.2, 0.4, 0.8, 0.8], outcomes [0, 1, 1, 0], 2 bins",
         torch.tensor([0.2, 0.4, 0.8, 0.8], **f64), torch.tensor([0, 1, 1, 0]), 2),
        ("300 uniform forecasts, outcomes drawn with probability f^1.5, 10 bins", f, o, 10),
        # forecasts on the edges 0, 1/4, 1/2, 3/4, 1 (exact in binary): right-closed bins put
        # 0.25 into [0, 1/4] and 1 into (3/4, 1]
        ("forecasts on the bin edges [0, 0.25, 0.25, 0.5, 0.75, 1, 1, 0.6], outcomes "
         "[0, 0, 1, 1, 0, 1, 1, 1], 4 bins",
         torch.tensor([0.0, 0.25, 0.25, 0.5, 0.75, 1.0, 1.0, 0.6], **f64),
         torch.tensor([0, 0, 1, 1, 0, 1, 1, 1]), 4),
        # forecasts only in (0.6, 0.9): most of the 10 bins are empty
        ("40 forecasts in (0.6, 0.9) (empty bins), 10 bins",
         0.6 + 0.3 * f[:40], o[:40], 10),
        # edges of 20 bins, where torch.linspace(0, 1, 21) is not m / M: it gives
        # 0.5499999999999999 for 11/20, which moves 0.55 one bin up (its 0.15000000000000002,
        # 0.30000000000000004, 0.35000000000000003 lie above 3/20, 6/20, 7/20: harmless;
        # ceil(f * M) - 1 is exact for all eight)
        ("forecasts on the bin edges [0.15, 0.3, 0.35, 0.55] of 20 bins and beside them "
         "[0.16, 0.31, 0.36, 0.54], outcomes [1, 0, 1, 1, 0, 1, 0, 0], 20 bins",
         torch.tensor([0.15, 0.3, 0.35, 0.55, 0.16, 0.31, 0.36, 0.54], **f64),
         torch.tensor([1, 0, 1, 1, 0, 1, 0, 0]), 20),
    ]
    if check_salt():  # the grader's secret salt: another size, base rate and bin count
        n = int(torch.randint(50, 200, (1,), generator=g))
        n_bins = int(torch.randint(3, 13, (1,), generator=g))
        f = torch.rand(n, generator=g, **f64) ** 2
        o = (torch.rand(n, generator=g, **f64) < f).long()
        cases.append((f"{n} forecasts, {n_bins} bins", f, o, n_bins))
    return cases


@exercise("calibration-murphy", "Murphy's decomposition of the Brier score")
def _check_murphy(murphy_terms):
    """``murphy_terms(forecasts, outcomes, n_bins)`` -> (reliability, resolution, uncertainty)."""
    from .. import calibration_beyond as _beyond
    own = {_beyond.brier_decomposition: "brier_decomposition"}
    cases = _murphy_cases()
    for desc, f, o, n_bins in cases:
        passed = (f.clone(), o.clone())
        got = _run_watched(
            murphy_terms, (*passed, n_bins), input_desc=desc,
            targets=lambda: _library_calls(own, {}),
            shown=lambda name: f"softmaxbook.calibration_beyond.{name}",
            task="Brier decomposition")
        _expect_unchanged(passed, (f, o), ("forecasts", "outcomes"), desc)
        expect_true(isinstance(got, (tuple, list)) and len(got) == 3,
                    f"for input {desc} return three numbers (reliability, resolution, "
                    f"uncertainty), got {describe(got)}.")
        rel, res, unc = (_number(v, input_desc=desc, what=w)
                         for v, w in zip(got, ("reliability", "resolution", "uncertainty")))
        want = _murphy_reference(f, o, n_bins)
        hints = {
            "uncertainty": "the uncertainty is obar (1 - obar), with obar the fraction of "
                           "outcomes that are 1; it does not depend on the forecasts or bins.",
            "reliability": "reliability = sum over non-empty bins of (n_m / N) (fbar_m - "
                           "obar_m)^2: squared gaps, weighted by the share of the examples in "
                           "the bin (not averaged over bins).",
            "resolution": "resolution = sum over non-empty bins of (n_m / N) (obar_m - obar)^2: "
                          "the bins' observed frequencies around the overall frequency of the "
                          "outcome (not the mean forecast).",
        }
        if "edges" in desc and "20 bins" in desc:
            edge_hint = ("a forecast exactly on an edge m/M belongs to bin m: 0.55 with 20 bins "
                         "is in (0.50, 0.55], 0.3 in (0.25, 0.30]. Edges from torch.linspace("
                         "0, 1, 21) are not m/M (linspace gives 0.5499999999999999 and "
                         "0.30000000000000004): use ceil(f * M) - 1, or edges m / M.")
            hints["reliability"] = hints["resolution"] = edge_hint
        elif "edges" in desc:
            edge_hint = ("bins are closed on the right, [0, 1/M], ((m-1)/M, m/M]: 0.25 with 4 "
                         "bins is in the first bin, 1 in the last; floor(f * M) puts them one "
                         "bin up.")
            hints["reliability"] = hints["resolution"] = edge_hint
        if abs(rel - want[1]) < 1e-9 and abs(res - want[0]) < 1e-9 and want[0] != want[1]:
            expect_true(False, f"for input {desc} your reliability and resolution are "
                        "swapped: return (reliability, resolution, uncertainty).")
        for name, value, expected in zip(("uncertainty", "reliability", "resolution"),
                                         (unc, rel, res), (want[2], want[0], want[1])):
            _expect_number(value, expected, input_desc=desc, what=name, hint=hints[name])
    return len(cases)


# ------------------------------------------------------------------------------------------------
# calibration-mahalanobis: the Mahalanobis OOD score with class means and a shared covariance
def _mahalanobis_cases():
    g = check_generator(47)  # public in a notebook; the grader's secret salt changes it
    cases = []
    # by hand: 2 classes in 2-D, covariance diag(.75, .25) after fitting (see the tests)
    h = torch.tensor([[0.0, 0.0], [2.0, 0.0], [10.0, 10.0], [12.0, 10.0], [1.0, 1.0],
                      [11.0, 9.0]], **f64)
    y = torch.tensor([0, 0, 1, 1, 0, 1])
    x = torch.tensor([[1.0, 1.0], [11.0, 10.0], [6.0, 5.0]], **f64)
    cases.append(("6 fitting points in 2-D (2 classes), 3 query points", h, y, x))
    # correlated features: a diagonal covariance or the Euclidean distance is wrong here
    a = torch.tensor([[1.0, 0.0, 0.0], [0.9, 0.5, 0.0], [0.3, 0.2, 0.4]], **f64)
    y = torch.randint(3, (60,), generator=g)
    h = torch.randn(60, 3, generator=g, **f64) @ a.T + 2 * torch.nn.functional.one_hot(
        y, 3).double()
    x = torch.randn(8, 3, generator=g, **f64) * 2
    cases.append(("60 correlated 3-D features (3 classes of unequal size), 8 queries", h, y, x))
    if check_salt():
        k = int(torch.randint(2, 5, (1,), generator=g))
        d = int(torch.randint(2, 5, (1,), generator=g))
        y = torch.arange(40) % k
        h = torch.randn(40, d, generator=g, **f64) + y[:, None].double()
        x = torch.randn(5, d, generator=g, **f64) * 3
        cases.append((f"40 features in {d}-D, {k} classes, 5 queries", h, y, x))
    return cases


@exercise("calibration-mahalanobis", "Mahalanobis score with a shared covariance")
def _check_mahalanobis(mahalanobis_ood):
    """``mahalanobis_ood(h_fit, y_fit, h)`` -> Tensor (M,) of scores."""
    from .. import calibration_beyond as _beyond
    own = {_beyond.class_gaussians: "class_gaussians",
           _beyond.mahalanobis_score: "mahalanobis_score"}
    cases = _mahalanobis_cases()
    for desc, h_fit, y_fit, x in cases:
        passed = (h_fit.clone(), y_fit.clone(), x.clone())
        got = _run_watched(
            mahalanobis_ood, passed, input_desc=desc,
            targets=lambda: _library_calls(own, {}),
            shown=lambda name: f"softmaxbook.calibration_beyond.{name}",
            task="Mahalanobis score")
        _expect_unchanged(passed, (h_fit, y_fit, x), ("h_fit", "y_fit", "h"), desc)
        expect_true(isinstance(got, torch.Tensor) and got.shape == (len(x),),
                    f"for input {desc} return a tensor of shape ({len(x)},), one score per "
                    f"query row, got {describe(got)}.")
        means, prec = _beyond.class_gaussians(h_fit, y_fit)
        want = _beyond.mahalanobis_score(x, means, prec)
        g = got.detach().double()
        hint = ("fit the class means and ONE covariance of the deviations h_i - mu_{y_i}, "
                "divided by N (all classes pooled); score = -min_k (h - mu_k)^T Sigma^-1 "
                "(h - mu_k).")
        if torch.allclose(g, -want, rtol=1e-6, atol=1e-9):
            hint = ("your scores have the wrong sign: higher must mean more in-distribution, "
                    "so return minus the smallest squared distance.")
        elif torch.allclose(g, -(-want).sqrt(), rtol=1e-6, atol=1e-9):
            hint = "the score uses the squared distance, not its square root."
        elif torch.allclose(g, want, rtol=1e-3, atol=1e-6):
            hint = ("close, but not to float64's precision: compute in float64 (the "
                    "inputs' dtype); float32 loses ~1e-7 of every number, and inverting "
                    "the covariance multiplies that by its condition number.")
        expect_close(got.double(), want, input_desc=desc, rtol=1e-6, atol=1e-9,
                     what="scores", hint=hint)
    return len(cases)
