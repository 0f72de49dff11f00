"""The checks of the calibration chapter's coding exercises accept right answers and reject
plausible wrong ones with a message that names the input and helps."""

from __future__ import annotations

import math
import re

import pytest
import torch

from softmaxbook.calibration import expected_calibration_error as nb_ece
from softmaxbook.calibration import fit_temperature as nb_fit_temperature
from softmaxbook.calibration import kl_uniform as nb_kl_uniform
from softmaxbook.calibration import ood_metrics as nb_ood_metrics
from softmaxbook.exercises import ExerciseCheckFailed, check, registered, salted

# The notebook's first cell imports expected_calibration_error, kl_uniform and ood_metrics:
# names bound before the check runs (nb_*) must be caught too, not only imports inside the
# answer.


def test_registered():
    assert registered("calibration") == ["calibration-ece", "calibration-fpr95",
                                         "calibration-kl-uniform",
                                         "calibration-mahalanobis", "calibration-murphy",
                                         "calibration-newton-step",
                                         "calibration-vector-maxent"]


# --- calibration-ece --------------------------------------------------------------------------
def right_ece(probs, labels, n_bins):
    conf, pred = probs.max(1)
    correct = (pred == labels).double()
    # right-closed bins ((m-1)/M, m/M]: ceil(conf * M) - 1, with conf = 0 in the first bin
    idx = (torch.ceil(conf * n_bins) - 1).clamp(0, n_bins - 1).long()
    total = 0.0
    for m in range(n_bins):
        mask = idx == m
        if mask.any():
            gap = (correct[mask].mean() - conf[mask].mean()).abs()
            total += mask.double().mean() * gap
    return total


def unweighted_ece(probs, labels, n_bins):
    conf, pred = probs.max(1)
    correct = (pred == labels).double()
    idx = (torch.ceil(conf * n_bins) - 1).clamp(0, n_bins - 1).long()
    gaps = [(correct[idx == m].mean() - conf[idx == m].mean()).abs()
            for m in range(n_bins) if (idx == m).any()]
    return sum(gaps) / len(gaps)


def left_closed_ece(probs, labels, n_bins):
    conf, pred = probs.max(1)
    correct = (pred == labels).double()
    idx = torch.floor(conf * n_bins).clamp(0, n_bins - 1).long()
    total = 0.0
    for m in range(n_bins):
        mask = idx == m
        if mask.any():
            total += mask.double().mean() * (correct[mask].mean() - conf[mask].mean()).abs()
    return total


def true_class_ece(probs, labels, n_bins):
    conf = probs.gather(1, labels[:, None]).squeeze(1)
    idx = (torch.ceil(conf * n_bins) - 1).clamp(0, n_bins - 1).long()
    total = 0.0
    for m in range(n_bins):
        mask = idx == m
        if mask.any():
            total += mask.double().mean() * (1.0 - conf[mask].mean()).abs()
    return total


def signed_ece(probs, labels, n_bins):
    conf, pred = probs.max(1)
    return ((pred == labels).double() - conf).mean().abs()


def library_ece(probs, labels, n_bins):
    from softmaxbook.calibration import expected_calibration_error
    return expected_calibration_error(probs, labels, n_bins)


def notebook_library_ece(probs, labels, n_bins):
    return nb_ece(probs, labels, n_bins)


def _binned(conf, correct, idx, n):
    total = 0.0
    for m in idx.unique():
        mask = idx == m
        total += mask.double().sum() / n * (correct[mask].mean() - conf[mask].mean()).abs()
    return total


def own_bin_for_one_ece(probs, labels, n_bins):
    # torchmetrics' convention: a confidence of exactly 1 gets a bin of its own
    conf, pred = probs.max(1)
    idx = (torch.ceil(conf * n_bins) - 1).clamp(0, n_bins - 1).long()
    idx[conf == 1] = n_bins
    return _binned(conf, (pred == labels).double(), idx, len(conf))


def drops_one_ece(probs, labels, n_bins):
    # bins (lo, hi) with conf < 1: the most confident rows are left out of every bin
    conf, pred = probs.max(1)
    idx = (torch.ceil(conf * n_bins) - 1).clamp(0, n_bins - 1).long()
    idx[conf == 1] = -1
    keep = idx >= 0
    return _binned(conf[keep], (pred == labels).double()[keep], idx[keep], len(conf))


def python_float_ece(probs, labels, n_bins):
    return float(right_ece(probs, labels, n_bins))


def dot_float_ece(probs, labels, n_bins):
    # the chapter's own idiom: correctness as float32 (the review: rejected with "expected
    # 0.19801 but got 0.19801")
    conf, pred = probs.max(1)
    correct = (pred == labels).float()
    idx = (torch.ceil(conf * n_bins) - 1).clamp(0, n_bins - 1).long()
    total = 0.0
    for m in range(n_bins):
        mask = idx == m
        if mask.any():
            total += mask.float().mean() * (correct[mask].mean() - conf[mask].mean()).abs()
    return total


def bucketize_ece(probs, labels, n_bins):
    # vectorised, edges m / M, bins ((m-1)/M, m/M] by bucketize
    conf, pred = probs.max(1)
    edges = torch.arange(n_bins + 1, dtype=probs.dtype) / n_bins
    idx = (torch.bucketize(conf, edges) - 1).clamp(min=0)
    n = torch.bincount(idx, minlength=n_bins).to(probs.dtype)
    s_conf = torch.zeros(n_bins, dtype=probs.dtype).index_add(0, idx, conf)
    s_acc = torch.zeros(n_bins, dtype=probs.dtype).index_add(
        0, idx, (pred == labels).to(probs.dtype))
    return ((s_acc - s_conf).abs().sum() / len(conf)).item()


def numpy_ece(probs, labels, n_bins):
    import numpy as np
    p, y = probs.numpy(), labels.numpy()
    conf, pred = p.max(1), p.argmax(1)
    idx = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    gaps = [abs((pred[idx == m] == y[idx == m]).mean() - conf[idx == m].mean())
            * (idx == m).mean() for m in range(n_bins) if (idx == m).any()]
    return np.float64(sum(gaps))


def test_ece_accepts_reference(capsys):
    assert check("calibration-ece", right_ece)
    assert "correct on" in capsys.readouterr().out


@pytest.mark.parametrize("answer", [python_float_ece, dot_float_ece, bucketize_ece, numpy_ece,
                                    lambda p, y, m: right_ece(p, y, m).float(),
                                    lambda p, y, m: right_ece(p.float(), y, m),
                                    lambda p, y, m: [float(right_ece(p, y, m))]])
def test_ece_accepts_right_answers_written_differently(answer):
    # a Python float, float32 arithmetic (the chapter's .float() idiom), a vectorised
    # bucketize, NumPy, a float32 result, a one-element list: compared to ~5 digits
    assert check("calibration-ece", answer)


def linspace_ece(probs, labels, n_bins):
    # the package's old bug: linspace edges, one ulp below m/M at some edges
    conf, pred = probs.max(1)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=probs.dtype)
    idx = (torch.bucketize(conf, edges) - 1).clamp(min=0)
    return _binned(conf, (pred == labels).double(), idx, len(conf))


def last_index_tie_ece(probs, labels, n_bins):
    # a tie predicts the LAST class with the top probability
    conf = probs.max(1).values
    k = probs.shape[1]
    pred = k - 1 - probs.flip(1).argmax(1)
    idx = (torch.ceil(conf * n_bins) - 1).clamp(0, n_bins - 1).long()
    return _binned(conf, (pred == labels).double(), idx, len(conf))


def squared_gap_ece(probs, labels, n_bins):
    conf, pred = probs.max(1)
    correct = (pred == labels).double()
    idx = (torch.ceil(conf * n_bins) - 1).clamp(0, n_bins - 1).long()
    return sum((idx == m).double().mean() * (correct[idx == m].mean()
               - conf[idx == m].mean()) ** 2 for m in range(n_bins) if (idx == m).any())


def max_gap_ece(probs, labels, n_bins):
    conf, pred = probs.max(1)
    correct = (pred == labels).double()
    idx = (torch.ceil(conf * n_bins) - 1).clamp(0, n_bins - 1).long()
    return max((correct[idx == m].mean() - conf[idx == m].mean()).abs()
               for m in range(n_bins) if (idx == m).any())


def missing_last_bin_ece(probs, labels, n_bins):
    # ceil(c M) without the -1, looping over range(M): the top bin is never visited
    conf, pred = probs.max(1)
    correct = (pred == labels).double()
    idx = torch.ceil(conf * n_bins).long()
    return sum((idx == m).double().mean() * (correct[idx == m].mean()
               - conf[idx == m].mean()).abs() for m in range(n_bins) if (idx == m).any())


def in_place_ece(probs, labels, n_bins):  # sorts the caller's probabilities in place
    value = right_ece(probs.clone(), labels, n_bins)
    probs[:] = probs.sort(1, descending=True).values
    return value


@pytest.mark.parametrize("answer, message", [
    (unweighted_ece, "(?s)for input 400 random rows.*share of all examples"),
    (left_closed_ece, "(?s)for input confidences on the bin edges.*closed on the right"),
    (true_class_ece, "for input 400 random rows"),
    (signed_ece, "for input 400 random rows"),
    (library_ece, "calls softmaxbook.calibration.expected_calibration_error"),
    (notebook_library_ece, "calls softmaxbook.calibration.expected_calibration_error"),
    (own_bin_for_one_ece, "(?s)for input confidences 1, 1, 0.95.*last bin"),
    (drops_one_ece, "(?s)for input confidences 1, 1, 0.95.*neither left out"),
    (linspace_ece, "(?s)for input confidences 0.55, 0.52, 0.58, 20 bins.*linspace"),
    (last_index_tie_ece, "(?s)for input confidences on the bin edges.*first class"),
    (squared_gap_ece, "for input 400 random rows"),
    (max_gap_ece, "for input 400 random rows"),
    (missing_last_bin_ece, "for input 400 random rows"),
    (lambda p, y, m: float("nan"), "(?s)for input 400 random rows.*not a finite"),
    (lambda p, y, m: torch.zeros(2), "(?s)for input 400 random rows.*one number"),
    # independent review: right values, but the caller's tensors changed in place
    (in_place_ece, "(?s)for input 400 random rows.*changed its argument 'probs' in place"),
    (lambda p, y, m: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_ece_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-ece", answer)


def test_ece_message_never_shows_two_identical_numbers():
    # off by 2e-5 relative: the two numbers are written with enough digits to differ
    def slightly_off(p, y, m):
        return right_ece(p, y, m) * (1 + 2e-5)

    with pytest.raises(ExerciseCheckFailed) as err:
        check("calibration-ece", slightly_off)
    text = str(err.value)
    exp = re.search(r"expected ECE (\S+)", text).group(1)
    got = re.search(r"but got +(\S+)", text).group(1)
    assert exp != got and "difference +" in text, text


def test_ece_rejects_torchmetrics():
    def tm_ece(probs, labels, n_bins):
        from torchmetrics.functional.classification import multiclass_calibration_error
        return multiclass_calibration_error(probs, labels, probs.shape[1], n_bins)

    with pytest.raises(ExerciseCheckFailed, match="calls torchmetrics' calibration error"):
        check("calibration-ece", tm_ece)


def test_ece_rejects_torchmetrics_imported_before():
    from torchmetrics.functional.classification import multiclass_calibration_error as mce

    def tm_ece(probs, labels, n_bins):
        return mce(probs, labels, probs.shape[1], n_bins)

    with pytest.raises(ExerciseCheckFailed, match="calls torchmetrics' calibration error"):
        check("calibration-ece", tm_ece)


# --- calibration-kl-uniform -------------------------------------------------------------------
def right_kl(logits):
    return -math.log(logits.shape[1]) - torch.log_softmax(logits, 1).mean(1)


def test_kl_accepts_reference(capsys):
    assert check("calibration-kl-uniform", right_kl)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("answer", [
    # log-sum-exp form: KL(U || p) = logsumexp(z) - mean(z) - log K
    lambda z: torch.logsumexp(z, -1) - z.mean(-1) - math.log(z.shape[-1]),
    # torch's kl_div(input=log p, target=U) sums U (log U - log p)
    lambda z: torch.nn.functional.kl_div(
        torch.log_softmax(z, 1), torch.full_like(z, 1 / z.shape[1]), reduction="none").sum(1),
])
def test_kl_accepts_right_answers_written_differently(answer):
    assert check("calibration-kl-uniform", answer)


@pytest.mark.parametrize("answer, message", [
    # log(softmax): -inf once a probability underflows
    (lambda z: -math.log(z.shape[1]) - torch.log(torch.softmax(z, 1)).mean(1),
     "(?s)for input huge logits.*not finite.*log_softmax"),
    # KL(p || U), the reverse direction
    (lambda z: (torch.softmax(z, 1) * (torch.log_softmax(z, 1) + math.log(z.shape[1]))).sum(1),
     "(?s)for input logits \\[\\[0, 0, 0\\].*reverse direction"),
    # missing -log K
    (lambda z: -torch.log_softmax(z, 1).mean(1),
     "(?s)for input logits \\[\\[0, 0, 0\\].*off by log K"),
    # sum instead of mean over the classes
    (lambda z: -math.log(z.shape[1]) - torch.log_softmax(z, 1).sum(1), "for input logits"),
    # computed in float32 from float64 input: loses digits
    (lambda z: right_kl(z.float()), "for input logits .*float64.*changed precision"),
    # the package's own function, imported by the notebook's first cell
    (lambda z: nb_kl_uniform(z), "calls softmaxbook.calibration.kl_uniform"),
    # wrong axis: log_softmax over the examples
    (lambda z: -math.log(z.shape[1]) - torch.log_softmax(z, 0).mean(1),
     "for input logits \\[\\[0, 0, 0\\]"),
    # + log K instead of - log K
    (lambda z: math.log(z.shape[1]) - torch.log_softmax(z, 1).mean(1),
     "for input logits \\[\\[0, 0, 0\\]"),
    # the entropy of p, not a KL
    (lambda z: -(torch.softmax(z, 1) * torch.log_softmax(z, 1)).sum(1),
     "for input logits \\[\\[0, 0, 0\\]"),
    # log of a clamped softmax: finite, but capped at -log(1e-12) where p underflows
    (lambda z: -math.log(z.shape[1]) - torch.log(torch.softmax(z, 1).clamp_min(1e-12)).mean(1),
     "(?s)for input huge logits.*row 0: expected 799.3"),
    # one number for the batch (cross entropy against the uniform target)
    (lambda z: torch.nn.functional.cross_entropy(z, torch.full_like(z, 1 / z.shape[1]))
     - math.log(z.shape[1]), "for input logits .*shape"),
    # float64 result for float32 logits
    (lambda z: right_kl(z.double()), "(?s)for input float32 logits.*changed precision"),
    # NumPy instead of torch
    (lambda z: right_kl(z).numpy(), "(?s)for input logits .*torch tensor.*ndarray"),
    # independent review: the shift by the row maximum done in the caller's logits
    (lambda z: right_kl(z.sub_(z.amax(1, keepdim=True))),
     "(?s)for input logits.*changed its argument 'logits' in place"),
])
def test_kl_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-kl-uniform", answer)


def float32_compute_kl(z):
    # R4 review, finding 6: float32 arithmetic on float64 logits, returned as float64. It
    # passed when every case was compared at float32's tolerance; on [[1e4 + 0.1, 1e4],
    # [0.001, 0]] it is 0.8 % and 4.6 % off
    return (-math.log(z.shape[1]) - torch.log_softmax(z.float(), -1).mean(-1)).to(z.dtype)


@pytest.mark.parametrize("salt", [0, 12345, 777])
def test_kl_rejects_float32_arithmetic_on_float64_logits(salt):
    with salted(salt), pytest.raises(ExerciseCheckFailed,
                                     match="(?s)for input logits.*computed in float32"):
        check("calibration-kl-uniform", float32_compute_kl)


def test_kl_float32_arithmetic_is_wrong_where_it_matters():
    # the case the check added: the float32 answer is off by far more than any tolerance
    z = torch.tensor([[1e4 + 0.1, 1e4], [0.001, 0.0]], dtype=torch.float64)
    # two classes a gap d apart: KL(U || p) = log cosh(d / 2) = log1p(2 sinh(d / 4)^2)
    gaps = (z[:, 0] - z[:, 1]).tolist()  # exact differences of the float64 logits
    exact = torch.tensor([math.log1p(2 * math.sinh(d / 4) ** 2) for d in gaps],
                         dtype=torch.float64)
    # (the package cancels log 2 against log p: 1e-16 absolute, 1e-9 relative on row 1)
    assert torch.allclose(nb_kl_uniform(z), exact, rtol=1e-12, atol=1e-15)
    rel = ((float32_compute_kl(z) - exact) / exact).abs()
    assert (rel > 5e-3).all(), rel
    # and the new case is salted too: the salted variant has the same kind of logits
    for salt in (0, 12345):
        with salted(salt):
            assert check("calibration-kl-uniform", right_kl)


@pytest.mark.parametrize("salt", [12345, 777])
@pytest.mark.parametrize("answer", [
    right_kl,
    lambda z: torch.logsumexp(z, -1) - z.mean(-1) - math.log(z.shape[-1]),
    lambda z: torch.nn.functional.kl_div(
        torch.log_softmax(z, 1), torch.full_like(z, 1 / z.shape[1]), reduction="none").sum(1),
])
def test_kl_accepts_right_answers_under_salt(answer, salt):
    # float64 cases are compared at float64's precision, scaled by the logits' size: the
    # log-sum-exp form cancels terms of size max |z| and must still pass
    with salted(salt):
        assert check("calibration-kl-uniform", answer)


# --- calibration-fpr95 ------------------------------------------------------------------------
def right_fpr95(scores_in, scores_out):
    s = torch.sort(scores_in, descending=True).values
    k = math.ceil(0.95 * len(s) - 1e-9)  # at least 95 % of the in-scores accepted
    t = s[k - 1]
    return (scores_out >= t).double().mean()


def quantile_fpr95(scores_in, scores_out):
    t = torch.quantile(scores_in, 0.05)
    return (scores_out >= t).double().mean()


def strict_fpr95(scores_in, scores_out):
    t = torch.sort(scores_in, descending=True).values[math.ceil(0.95 * len(scores_in)) - 1]
    return (scores_out > t).double().mean()


def swapped_fpr95(scores_in, scores_out):
    return right_fpr95(-scores_out, -scores_in)


def library_fpr95(scores_in, scores_out):
    return nb_ood_metrics(scores_in, scores_out)["fpr_at_95_tpr"]


def sklearn_fpr95(scores_in, scores_out):
    import numpy as np
    from sklearn.metrics import roc_curve
    y = np.r_[np.ones(len(scores_in)), np.zeros(len(scores_out))]
    fpr, tpr, _ = roc_curve(y, np.r_[scores_in.numpy(), scores_out.numpy()])
    return float(fpr[np.searchsorted(tpr, 0.95)])


def test_fpr95_accepts_reference(capsys):
    assert check("calibration-fpr95", right_fpr95)
    assert "correct on" in capsys.readouterr().out


def counting_fpr95(scores_in, scores_out):
    # the largest threshold among the in-scores that still accepts >= 95 % of them, by counting
    n = len(scores_in)
    t = max(float(v) for v in scores_in if (scores_in >= v).sum() >= 0.95 * n - 1e-9)
    return float((scores_out >= t).sum()) / len(scores_out)


def np_fpr95(scores_in, scores_out):
    import numpy as np
    t = np.sort(scores_in)[::-1][math.ceil(0.95 * len(scores_in) - 1e-9) - 1]
    return np.mean(scores_out >= t)


@pytest.mark.parametrize("answer", [
    lambda a, b: float(right_fpr95(a, b)),
    # the chapter's .float().mean() idiom: float32, right to ~1e-7 (the review: rejected)
    lambda a, b: (b >= torch.sort(a, descending=True).values[
        math.ceil(0.95 * len(a) - 1e-9) - 1]).float().mean(),
    counting_fpr95,
    # NumPy, returned as numpy.float64
    lambda a, b: np_fpr95(a.numpy(), b.numpy()),
])
def test_fpr95_accepts_right_answers_written_differently(answer):
    assert check("calibration-fpr95", answer)


@pytest.mark.parametrize("answer, message", [
    (quantile_fpr95, "(?s)for input scores_in = 1, 2, ..., 30.*interpolate"),
    # R3 review: a nearest-rank quantile keeps 18 of 19 in-scores (94.7 %); it passed every
    # public case before the 19-score one was added
    (lambda a, b: (b >= torch.quantile(a, 0.05, interpolation="nearest")).double().mean(),
     "(?s)for input scores_in = 1, 2, ..., 19.*18 of 19"),
    (strict_fpr95, "(?s)for input ties.*>="),
    (swapped_fpr95, "(?s)for input scores_in = 1, 2, ..., 20.*out-of-distribution as the positive"),
    (lambda a, b: 0.95, "for input scores_in = 1, 2, ..., 20"),
    (library_fpr95, "calls softmaxbook.calibration.ood_metrics"),
    (sklearn_fpr95, "calls scikit-learn's roc_curve"),
    # floor / round instead of ceil: fewer than 95 % of scores_in accepted
    (lambda a, b: (b >= torch.sort(a, descending=True).values[
        math.floor(0.95 * len(a)) - 1]).double().mean(), "(?s)for input scores_in = 1, 2, ..., 30"),
    (lambda a, b: (b >= torch.sort(a, descending=True).values[
        round(0.95 * len(a)) - 1]).double().mean(), "(?s)for input scores_in = 1, 2, ..., 30"),
    # the TPR instead of the FPR
    (lambda a, b: (a >= torch.sort(a, descending=True).values[
        math.ceil(0.95 * len(a) - 1e-9) - 1]).double().mean(), "for input scores_in = 1, 2"),
    # 1 - FPR (the fraction of OOD rejected)
    (lambda a, b: 1 - right_fpr95(a, b), "for input scores_in = 1, 2, ..., 20"),
    # divided by the number of in-distribution scores
    (lambda a, b: (b >= torch.sort(a, descending=True).values[
        math.ceil(0.95 * len(a) - 1e-9) - 1]).double().sum() / len(a),
     "for input scores_in = 1, 2, ..., 20"),
    # sorted ascending: the threshold is near the top instead of the bottom
    (lambda a, b: (b >= torch.sort(a).values[math.ceil(0.95 * len(a) - 1e-9) - 1]
                   ).double().mean(), "for input scores_in = 1, 2, ..., 20"),
    (lambda a, b: [0.8, 0.2], "(?s)for input scores_in = 1, 2, ..., 20.*one number"),
    # independent review: sorts the caller's scores in place
    (lambda a, b: right_fpr95(a.copy_(torch.sort(a, descending=True).values), b),
     "(?s)for input scores_in = 1, 2, ..., 20.*changed its argument 'scores_in' in place"),
    (lambda a, b: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_fpr95_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-fpr95", answer)


# --- calibration-newton-step: one Newton step on NLL(beta) -------------------------------------
def _moments(beta, logits, labels, *, use_beta=True):
    z = logits.double()
    p = torch.softmax((beta if use_beta else 1.0) * z, dim=1)
    m1 = (p * z).sum(1)
    m2 = (p * z * z).sum(1)
    zy = z.gather(1, labels[:, None])[:, 0]
    return p, m1, m2, zy


def newton_beta(beta, logits, labels):
    _, m1, m2, zy = _moments(beta, logits, labels)
    return beta - float((m1 - zy).mean() / (m2 - m1 ** 2).mean())


def newton_beta_sums(beta, logits, labels):  # sums instead of means: the 1/n cancels
    logp = torch.log_softmax(beta * logits, dim=1)
    p = logp.exp()
    mean = (p * logits).sum(1, keepdim=True)
    grad = (mean[:, 0] - logits[torch.arange(len(labels)), labels]).sum()
    return beta - grad / (p * (logits - mean) ** 2).sum()


def newton_beta_numpy(beta, logits, labels):  # NumPy, a float back
    import numpy as np
    z = logits.numpy()
    e = np.exp(beta * (z - z.max(1, keepdims=True)))
    p = e / e.sum(1, keepdims=True)
    m1 = (p * z).sum(1)
    var = (p * (z - m1[:, None]) ** 2).sum(1)
    return float(beta - np.mean(m1 - z[np.arange(len(z)), labels.numpy()]) / np.mean(var))


def _nll(beta, logits, labels):
    z = logits.double()
    return float((torch.logsumexp(beta * z, 1) - beta * z.gather(1, labels[:, None])[:, 0]).mean())


def newton_beta_finite_differences(beta, logits, labels, h=1e-4):
    f = [_nll(beta + k * h, logits, labels) for k in (-1, 0, 1)]
    return beta - ((f[2] - f[0]) / (2 * h)) / ((f[2] - 2 * f[1] + f[0]) / h ** 2)


def newton_beta_autograd(beta, logits, labels):
    b = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    nll = (torch.logsumexp(b * logits, 1) - b * logits.gather(1, labels[:, None])[:, 0]).mean()
    (g,) = torch.autograd.grad(nll, b, create_graph=True)
    (h,) = torch.autograd.grad(g, b)
    return float(b - g / h)


def newton_beta_on_t(beta, logits, labels):  # the step taken in T = 1/beta
    _, m1, m2, zy = _moments(beta, logits, labels)
    g, h = float((m1 - zy).mean()), float((m2 - m1 ** 2).mean())
    t = 1 / beta
    d1, d2 = -g / t ** 2, h / t ** 4 + 2 * g / t ** 3
    return 1 / (t - d1 / d2)


def _step(beta, logits, labels, *, sign=-1.0, grad_only=False, no_center=False,
          use_beta=True, sum_grad=False, predicted=False, no_square=False, ratio_only=False,
          inverted=False, dtype=torch.float64):
    z = logits.to(dtype)
    p, m1, m2, zy = _moments(beta, z, labels, use_beta=use_beta)
    p, m1, m2 = p.to(dtype), m1.to(dtype), m2.to(dtype)
    if predicted:
        zy = z.max(1).values
    else:
        zy = zy.to(dtype)
    g = (m1 - zy).sum() if sum_grad else (m1 - zy).mean()
    h = m2.mean() if no_center else ((m2 - m1).mean() if no_square else (m2 - m1 ** 2).mean())
    if grad_only:
        return beta + sign * float(g)
    if ratio_only:
        return float(g / h)
    return beta + sign * float(h / g if inverted else g / h)


@pytest.mark.parametrize("answer", [newton_beta, newton_beta_sums, newton_beta_numpy])
def test_newton_step_accepts_right_answers(answer, capsys):
    assert check("calibration-newton-step", answer)
    assert "correct on 5 test cases" in " ".join(capsys.readouterr().out.split())


HAND = r"for input beta = 1, 4 rows of 3 logits .*\n  expected new beta"


@pytest.mark.parametrize("answer, message", [
    (lambda b, z, y: _step(b, z, y, sign=1.0), HAND),  # the step uphill
    (lambda b, z, y: _step(b, z, y, grad_only=True), HAND),  # a gradient step of size 1
    (lambda b, z, y: _step(b, z, y, inverted=True), HAND),  # NLL''/NLL'
    (lambda b, z, y: _step(b, z, y, no_center=True), HAND),  # E[z^2] for the variance
    (lambda b, z, y: _step(b, z, y, no_square=True), HAND),  # E[z^2] - E[z]
    (lambda b, z, y: _step(b, z, y, use_beta=False), r"for input beta = 0.3, 200 rows"),  # p(z)
    (lambda b, z, y: _step(b, z, y, sum_grad=True), HAND),  # a sum over a mean
    (lambda b, z, y: _step(b, z, y, predicted=True), HAND),  # the top logit for z_y
    (lambda b, z, y: _step(b, z, y, ratio_only=True), HAND),  # the step, not the new beta
    (newton_beta_on_t, HAND),
    (newton_beta_finite_differences, r"(?s)expected new beta.*close but off.*numerical "
                                     r"derivative"),
    (lambda b, z, y: _step(b, z, y, dtype=torch.float32), r"(?s)close but off.*float32"),
    (newton_beta_autograd, r"calls torch.autograd.grad, which this exercise forbids"),
    # the fitted beta, many steps: the package does the work (refused since review H2)
    (lambda b, z, y: float(nb_fit_temperature(z, y)), r"calls softmaxbook\.calibration\.fit_temp"),
    (lambda b, z, y: newton_beta(b, z.mul_(b), y), "changed its argument 'logits' in place"),
    (lambda b, z, y: torch.zeros(2), "should be one number"),
    (lambda b, z, y: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_newton_step_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-newton-step", answer)


def test_newton_step_reference_agrees_with_autograd():
    from softmaxbook.exercises.calibration import _newton_cases, _reference_newton
    for beta, z, y, _ in _newton_cases():
        assert abs(_reference_newton(beta, z, y) - newton_beta_autograd(beta, z, y)) <= \
            1e-12 * (1 + abs(beta))


# --- calibration-vector-maxent: softmax(lam * z_i), one multiplier per class --------------------
def vector_map(logits, lam):
    return torch.softmax(lam * logits, dim=1)


def vector_map_diag(logits, lam):  # logits times diag(lam), then the softmax written out
    s = logits @ torch.diag(lam)
    e = torch.exp(s - s.max(1, keepdim=True).values)
    return e / e.sum(1, keepdim=True)


def vector_map_logs(logits, lam):  # through log q = lam z - logsumexp(lam z)
    s = lam[None, :] * logits
    return torch.exp(s - torch.logsumexp(s, 1, keepdim=True))


@pytest.mark.parametrize("answer", [vector_map, vector_map_diag, vector_map_logs])
def test_vector_maxent_accepts_right_answers(answer, capsys):
    assert check("calibration-vector-maxent", answer)
    assert "correct on 5 test cases" in " ".join(capsys.readouterr().out.split())


SCALED = r"for input logits = .*\(one multiplier per class\)\n  expected probabilities"


@pytest.mark.parametrize("answer, message", [
    # one temperature after all: the mean multiplier for every class
    (lambda z, lam: torch.softmax(lam.mean() * z, 1), SCALED),
    (lambda z, lam: torch.softmax(z + lam, 1), SCALED),  # a bias per class, not a scale
    (lambda z, lam: torch.softmax(z / lam, 1), SCALED),  # a temperature per class
    (lambda z, lam: torch.softmax(-lam * z, 1), r"(?s)\(all multipliers 1 .*sign flipped"),
    (lambda z, lam: torch.exp(lam * z), r"(?s)multipliers 1 .*each row of q should sum to 1"),
    (lambda z, lam: torch.softmax(lam * z, 0), r"(?s)multipliers 1 .*sum to 1"),  # over rows
    (lambda z, lam: lam * torch.softmax(z, 1), r"(?s)" + SCALED + r".*sum to 1"),
    (lambda z, lam: (lam * torch.softmax(z, 1)) / (lam * torch.softmax(z, 1)).sum(1, True),
     SCALED),  # the softmax reweighted by lam
    (lambda z, lam: torch.softmax(z, 1), SCALED),  # the multipliers ignored
    (lambda z, lam: torch.softmax(lam * z, 1).float(), "your probabilities are torch.float32"),
    (lambda z, lam: torch.softmax(lam * z, 1)[:, :-1], "should be a float tensor of the shape"),
    (lambda z, lam: torch.softmax(z.mul_(lam), 1), "changed its argument 'logits' in place"),
    (lambda z, lam: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_vector_maxent_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-vector-maxent", answer)


def test_vector_maxent_reference_solves_the_constrained_problem():
    # softmax(lam * z_i) is the stationary point of the Lagrangian with one multiplier per class:
    # the gradient of the entropy plus the constraints' terms vanishes up to a per-row constant
    from softmaxbook.exercises.calibration import _vector_maxent_cases
    for _, z, lam in _vector_maxent_cases():
        q = vector_map(z, lam).requires_grad_()
        lagrangian = -(q * q.log()).sum() + (lam * (z * q).sum(0)).sum()
        (grad,) = torch.autograd.grad(lagrangian, q)
        # ∂L/∂q_ik = -log q_ik - 1 + lam_k z_ik: the same for every k of a row (that is mu_i)
        assert torch.allclose(grad - grad[:, :1], torch.zeros_like(grad), atol=1e-9)


def test_newton_step_refuses_the_package_derivatives():
    """Review of the new checks, H2: the private _nll_derivatives (and fit_temperature) passed
    because the check watched only autograd."""
    import torch

    from softmaxbook import calibration as cal

    def via_private(beta, logits, labels):
        d = logits - logits.amax(dim=1, keepdim=True)
        dy = d.gather(1, labels[:, None]).squeeze(1)
        _, g, h = cal._nll_derivatives(d, dy, beta, torch.empty_like(d))
        return beta - g / h
    with pytest.raises(ExerciseCheckFailed, match=r"calls softmaxbook\.calibration\._nll_deriv"):
        check("calibration-newton-step", via_private)


# --- calibration-murphy: reliability, resolution, uncertainty ---------------------------------
def _bins(f, n_bins, closed="right"):
    if closed == "right":
        return (torch.ceil(f * n_bins) - 1).clamp(0, n_bins - 1).long()
    return torch.floor(f * n_bins).clamp(0, n_bins - 1).long()


def right_murphy(forecasts, outcomes, n_bins):
    o = outcomes.double()
    idx = _bins(forecasts, n_bins)
    obar = o.mean()
    rel = res = 0.0
    for m in range(n_bins):
        inside = idx == m
        if inside.any():
            w = inside.double().mean()
            rel += w * (forecasts[inside].mean() - o[inside].mean()) ** 2
            res += w * (o[inside].mean() - obar) ** 2
    return rel, res, obar * (1 - obar)


def bincount_murphy(forecasts, outcomes, n_bins):
    o = outcomes.double()
    idx = _bins(forecasts, n_bins)
    n = torch.bincount(idx, minlength=n_bins).double()
    full = n > 0
    fbar = torch.bincount(idx, forecasts, n_bins)[full] / n[full]
    ob = torch.bincount(idx, o, n_bins)[full] / n[full]
    w = n[full] / len(o)
    base = o.mean()
    return (float((w * (fbar - ob) ** 2).sum()),
            float((w * (ob - base) ** 2).sum()), float(base * (1 - base)))


def numpy_murphy(forecasts, outcomes, n_bins):
    import numpy as np
    f, o = forecasts.numpy(), outcomes.numpy().astype(float)
    idx = np.clip(np.ceil(f * n_bins) - 1, 0, n_bins - 1).astype(int)
    rel = res = 0.0
    for m in np.unique(idx):
        sel = idx == m
        rel += sel.mean() * (f[sel].mean() - o[sel].mean()) ** 2
        res += sel.mean() * (o[sel].mean() - o.mean()) ** 2
    return [rel, res, o.mean() * (1 - o.mean())]


def _murphy_of_bins(forecasts, outcomes, idx):
    o = outcomes.double()
    rel = res = 0.0
    for m in idx.unique():
        inside = idx == m
        w = inside.double().mean()
        rel += w * (forecasts[inside].mean() - o[inside].mean()) ** 2
        res += w * (o[inside].mean() - o.mean()) ** 2
    return rel, res, o.mean() * (1 - o.mean())


def linspace_murphy(forecasts, outcomes, n_bins):
    # right-closed bins, but with the edges of torch.linspace(0, 1, M + 1)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)
    idx = (torch.bucketize(forecasts, edges) - 1).clamp(0, n_bins - 1)
    return _murphy_of_bins(forecasts, outcomes, idx)


def exact_edges_murphy(forecasts, outcomes, n_bins):
    # right: bucketize on the edges m / M, each m / M correctly rounded
    edges = torch.arange(n_bins + 1, dtype=torch.float64) / n_bins
    idx = (torch.bucketize(forecasts, edges) - 1).clamp(0, n_bins - 1)
    return _murphy_of_bins(forecasts, outcomes, idx)


def test_murphy_accepts_reference(capsys):
    assert check("calibration-murphy", right_murphy)


@pytest.mark.parametrize("answer", [
    bincount_murphy, numpy_murphy, exact_edges_murphy,
    lambda f, o, m: tuple(torch.tensor(float(v)) for v in right_murphy(f, o, m)),
    lambda f, o, m: tuple(torch.tensor(float(v), dtype=torch.float32)
                          for v in right_murphy(f, o, m)),
])
def test_murphy_accepts_right_answers_written_differently(answer):
    assert check("calibration-murphy", answer)


@pytest.mark.parametrize("salt", [1, 2])
def test_murphy_accepts_right_answers_under_salt(salt):
    with salted(salt):
        assert check("calibration-murphy", right_murphy)
        assert check("calibration-murphy", bincount_murphy)


def unweighted_murphy(forecasts, outcomes, n_bins):
    # averages the bins instead of weighting them by their share
    o = outcomes.double()
    idx = _bins(forecasts, n_bins)
    gaps, spreads = [], []
    for m in range(n_bins):
        inside = idx == m
        if inside.any():
            gaps.append((forecasts[inside].mean() - o[inside].mean()) ** 2)
            spreads.append((o[inside].mean() - o.mean()) ** 2)
    return (sum(gaps) / len(gaps), sum(spreads) / len(spreads),
            o.mean() * (1 - o.mean()))


def _variant(rel_sq=True, res_base="obar", res_bin="obar", unc="right", closed="right",
             skip_empty=True):
    def murphy(forecasts, outcomes, n_bins):
        o = outcomes.double()
        idx = _bins(forecasts, n_bins, closed)
        obar, fall = o.mean(), forecasts.mean()
        rel = res = 0.0
        for m in range(n_bins):
            inside = idx == m
            if not inside.any() and skip_empty:
                continue
            w = inside.double().mean()
            fb, ob = forecasts[inside].mean(), o[inside].mean()
            gap = fb - ob
            rel += w * (gap ** 2 if rel_sq else gap.abs())
            centre = obar if res_base == "obar" else fall
            res += w * ((ob if res_bin == "obar" else fb) - centre) ** 2
        u = {"right": obar * (1 - obar), "obar": obar,
             "forecast": fall * (1 - fall)}[unc]
        return rel, res, u
    return murphy


@pytest.mark.parametrize("answer, message", [
    (unweighted_murphy, "(?s)300 uniform forecasts.*weighted by the share"),
    (_variant(rel_sq=False), "(?s)forecasts \\[0.2, 0.4.*expected reliability"),
    (_variant(res_base="forecast"), "(?s)forecasts \\[0.2, 0.4.*not the mean forecast"),
    (_variant(res_bin="forecast"), "(?s)forecasts \\[0.2, 0.4.*expected resolution"),
    (_variant(unc="obar"), "(?s)does not depend on the forecasts"),
    (_variant(unc="forecast"), "(?s)forecasts \\[0.2, 0.4.*expected uncertainty"),
    (_variant(closed="left"), "(?s)bin edges.*closed on the right"),
    # R6 review: edges from torch.linspace were accepted (no case sat on such an edge)
    (linspace_murphy, "(?s)of 20 bins.*not m/M"),
    (_variant(skip_empty=False), "(?s)empty bins.*not a finite number"),
    (lambda f, o, m: (lambda r: (r[1], r[0], r[2]))(right_murphy(f, o, m)),
     "reliability and resolution are swapped"),
    (lambda f, o, m: tuple(math.sqrt(float(v)) for v in right_murphy(f, o, m)),
     "(?s)expected uncertainty"),
    (lambda f, o, m: right_murphy(f, o, m)[:2], "return three numbers"),
    (lambda f, o, m: __import__("softmaxbook.calibration_beyond", fromlist=["x"])
     .brier_decomposition(f, o, m)[1:4], "calls softmaxbook.calibration_beyond"),
    (lambda f, o, m: right_murphy(f.clamp_(0.01, 0.99), o, m),
     "changed its argument 'forecasts' in place"),
    (..., "no answer yet"),
])
def test_murphy_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-murphy", answer)


# --- calibration-mahalanobis ------------------------------------------------------------------
def _fit(h_fit, y_fit, per_class=False, diagonal=False, ddof=0, pooled_mean=False):
    k = int(y_fit.max()) + 1
    means = torch.stack([h_fit[y_fit == c].mean(0) for c in range(k)])
    if pooled_mean:
        means = h_fit.mean(0).expand(k, -1)
    dev = h_fit - means[y_fit]
    cov = dev.T @ dev / (len(h_fit) - ddof)
    if diagonal:
        cov = torch.diag(torch.diag(cov))
    if per_class:
        covs = []
        for c in range(k):
            d = h_fit[y_fit == c] - means[c]
            covs.append(d.T @ d / len(d))
        return means, covs
    return means, cov


def right_mahalanobis(h_fit, y_fit, h):
    means, cov = _fit(h_fit, y_fit)
    prec = torch.linalg.inv(cov)
    diff = h[:, None, :] - means[None]
    dist = torch.einsum("nkd,de,nke->nk", diff, prec, diff)
    return -dist.min(1).values


def solve_mahalanobis(h_fit, y_fit, h):
    means, cov = _fit(h_fit, y_fit)
    out = []
    for row in h:
        d = row[None, :] - means
        out.append(-(d * torch.linalg.solve(cov, d.T).T).sum(1).min())
    return torch.stack(out)


def numpy_mahalanobis(h_fit, y_fit, h):
    import numpy as np
    hf, yf, q = h_fit.numpy(), y_fit.numpy(), h.numpy()
    mus = np.stack([hf[yf == c].mean(0) for c in range(yf.max() + 1)])
    dev = hf - mus[yf]
    prec = np.linalg.inv(dev.T @ dev / len(hf))
    d = q[:, None, :] - mus[None]
    return torch.from_numpy(-np.einsum("nkd,de,nke->nk", d, prec, d).min(1))


def test_mahalanobis_accepts_reference(capsys):
    assert check("calibration-mahalanobis", right_mahalanobis)


@pytest.mark.parametrize("answer", [solve_mahalanobis, numpy_mahalanobis,
                                    lambda a, b, c: right_mahalanobis(a, b, c).float()])
def test_mahalanobis_accepts_right_answers_written_differently(answer):
    assert check("calibration-mahalanobis", answer)


@pytest.mark.parametrize("salt", [1, 2])
def test_mahalanobis_accepts_right_answers_under_salt(salt):
    with salted(salt):
        assert check("calibration-mahalanobis", right_mahalanobis)


def _wrong(per_class=False, diagonal=False, ddof=0, pooled_mean=False, no_inverse=False,
           euclid=False, reduce="min", sign=-1, root=False):
    def answer(h_fit, y_fit, h):
        means, cov = _fit(h_fit, y_fit, per_class, diagonal, ddof, pooled_mean)
        diff = h[:, None, :] - means[None]
        if per_class:
            dist = torch.stack([torch.einsum("nd,de,ne->n", diff[:, c], torch.linalg.inv(cv),
                                             diff[:, c]) for c, cv in enumerate(cov)], 1)
        else:
            prec = (torch.eye(cov.shape[0], dtype=cov.dtype) if euclid
                    else cov if no_inverse else torch.linalg.inv(cov))
            dist = torch.einsum("nkd,de,nke->nk", diff, prec, diff)
        if root:
            dist = dist.sqrt()
        best = dist.min(1).values if reduce == "min" else dist.max(1).values
        return sign * best
    return answer


@pytest.mark.parametrize("answer, message", [
    (_wrong(per_class=True), "(?s)60 correlated.*ONE covariance"),
    (_wrong(diagonal=True), "(?s)60 correlated.*expected scores"),
    (_wrong(ddof=1), "(?s)6 fitting points.*divided by N"),
    (_wrong(pooled_mean=True), "(?s)6 fitting points.*expected scores"),
    (_wrong(no_inverse=True), "(?s)6 fitting points.*expected scores"),
    (_wrong(euclid=True), "(?s)6 fitting points.*expected scores"),
    (_wrong(reduce="max"), "(?s)6 fitting points.*expected scores"),
    (_wrong(sign=1), "wrong sign"),
    (_wrong(root=True), "not its square root"),
    # right formula in float32 arithmetic: told so, not sent back to the formula
    (lambda a, b, c: right_mahalanobis(a.float(), b, c.float()).double(),
     "(?s)6 fitting points.*float64's precision"),
    (lambda a, b, c: right_mahalanobis(a, b, c)[:, None], "return a tensor of shape"),
    (lambda a, b, c: __import__("softmaxbook.calibration_beyond", fromlist=["x"])
     .mahalanobis_score(c, *__import__("softmaxbook.calibration_beyond", fromlist=["x"])
                        .class_gaussians(a, b)), "calls softmaxbook.calibration_beyond"),
    (lambda a, b, c: right_mahalanobis(a.sub_(a.mean(0)), b, c),
     "changed its argument 'h_fit' in place"),
    (..., "no answer yet"),
])
def test_mahalanobis_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-mahalanobis", answer)
