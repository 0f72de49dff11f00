"""The checks of the calibration chapter's coding exercises accept right answers and reject
plausible wrong ones with a message that names the input and helps."""

from __future__ import annotations

import math

import pytest
import torch

from softmaxbook.exercises import ExerciseCheckFailed, check, registered


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


def test_ece_accepts_reference(capsys):
    assert check("calibration-ece", right_ece)
    assert "correct on" in capsys.readouterr().out


@pytest.mark.parametrize("answer, message", [
    (unweighted_ece, "(?s)for input 400 random rows.*share of all examples"),
    (left_closed_ece, "(?s)for input confidences on the bin edges.*closed on the right"),
    (true_class_ece, "for input 400 random rows"),
    (signed_ece, "for input 400 random rows"),
    (library_ece, "ready-made calibration error"),
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

    with pytest.raises(ExerciseCheckFailed, match="ready-made"):
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
    (lambda z: -torch.log_softmax(z, 1).mean(1), "(?s)for input logits \\[\\[0, 0, 0\\].*off by log K"),
    # sum instead of mean over the classes
    (lambda z: -math.log(z.shape[1]) - torch.log_softmax(z, 1).sum(1), "for input logits"),
    # computed in float32 from float64 input: loses digits
    (lambda z: right_kl(z.float()), "for input logits .*float64.*changed precision"),
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


def test_fpr95_accepts_reference(capsys):
    assert check("calibration-fpr95", right_fpr95)
    assert "correct on" in capsys.readouterr().out


@pytest.mark.parametrize("answer, message", [
    (quantile_fpr95, "(?s)for input scores_in = 1, 2, ..., 30.*interpolate"),
    (strict_fpr95, "(?s)for input ties.*>="),
    (swapped_fpr95, "(?s)for input scores_in = 1, 2, ..., 20.*out-of-distribution as the positive"),
    (lambda a, b: 0.95, "for input scores_in = 1, 2, ..., 20"),
    (lambda a, b: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_fpr95_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("calibration-fpr95", answer)
