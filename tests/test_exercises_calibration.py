"""The checks of the calibration chapter's coding exercises accept right answers and reject
plausible wrong ones with a message that names the input and helps."""

from __future__ import annotations

import math

import pytest
import torch

from softmaxbook.calibration import expected_calibration_error as nb_ece
from softmaxbook.calibration import kl_uniform as nb_kl_uniform
from softmaxbook.calibration import ood_metrics as nb_ood_metrics
from softmaxbook.exercises import ExerciseCheckFailed, check, registered

# The notebook's first cell imports expected_calibration_error, kl_uniform and ood_metrics:
# names bound before the check runs (nb_*) must be caught too, not only imports inside the
# answer.


def test_registered():
    assert registered("calibration") == ["calibration-ece", "calibration-fpr95",
                                         "calibration-kl-uniform"]


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


def float32_ece(probs, labels, n_bins):
    return right_ece(probs.float(), labels, n_bins)


def python_float_ece(probs, labels, n_bins):
    return float(right_ece(probs, labels, n_bins))


def test_ece_accepts_reference(capsys):
    assert check("calibration-ece", right_ece)
    assert "correct on" in capsys.readouterr().out


def test_ece_accepts_python_float():
    # torch.as_tensor(python float) is float32: the check must not compare in float32
    assert check("calibration-ece", python_float_ece)


@pytest.mark.parametrize("answer, message", [
    (unweighted_ece, "(?s)for input 400 random rows.*share of all examples"),
    (left_closed_ece, "(?s)for input confidences on the bin edges.*closed on the right"),
    (true_class_ece, "for input 400 random rows"),
    (signed_ece, "for input 400 random rows"),
    (library_ece, "calls softmaxbook.calibration.expected_calibration_error"),
    (notebook_library_ece, "calls softmaxbook.calibration.expected_calibration_error"),
    (own_bin_for_one_ece, "(?s)for input confidences 1, 1, 0.95.*last bin"),
    (drops_one_ece, "(?s)for input confidences 1, 1, 0.95.*neither left out"),
    (float32_ece, "(?s)for input 400 random rows.*6 digits only.*float32"),
    (lambda p, y, m: right_ece(p, y, m).float(), "(?s)for input 400 random rows.*float32.*lost"),
    (lambda p, y, m: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_ece_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-ece", answer)


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
])
def test_kl_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-kl-uniform", answer)


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


def test_fpr95_accepts_python_float():
    assert check("calibration-fpr95", lambda a, b: float(right_fpr95(a, b)))


@pytest.mark.parametrize("answer, message", [
    (quantile_fpr95, "(?s)for input scores_in = 1, 2, ..., 30.*interpolate"),
    (strict_fpr95, "(?s)for input ties.*>="),
    (swapped_fpr95, "(?s)for input scores_in = 1, 2, ..., 20.*out-of-distribution as the positive"),
    (lambda a, b: 0.95, "for input scores_in = 1, 2, ..., 20"),
    (library_fpr95, "calls softmaxbook.calibration.ood_metrics"),
    (sklearn_fpr95, "calls scikit-learn's roc_curve"),
    (lambda a, b: right_fpr95(a, b).float(), "(?s)for input scores_in = 1, 2.*float32"),
    (lambda a, b: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_fpr95_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-fpr95", answer)
