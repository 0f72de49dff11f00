"""Tests of softmaxbook.calibration: exact values, agreement with scikit-learn and torchmetrics
under the same conventions, the exact temperature fit against a brute-force optimum, and a clear
error for each kind of bad input."""

from __future__ import annotations

import math
import pathlib
import runpy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import average_precision_score, roc_auc_score

from softmaxbook.calibration import (
    brier_score,
    confidence_loss,
    energy_score,
    expected_calibration_error,
    fit_temperature,
    kl_uniform,
    max_softmax_score,
    negative_log_likelihood,
    odin_score,
    ood_metrics,
    popular_temperature_recipe,
    reliability_bins,
    softmax_entropy,
    train_classifier,
    train_confidence_gan,
)

f64 = dict(dtype=torch.float64)


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors: one thread is faster, and fair to a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def synthetic(n=2000, k=10, scale=3.0, seed=0):
    """Logits and labels drawn from softmax(logits): calibrated at T = 1 in expectation."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, k, generator=g, **f64) * scale
    y = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    return z, y


# ------------------------------------------------------------------------------------------------
# Calibration error: exact values
# ------------------------------------------------------------------------------------------------
def test_ece_by_hand():
    # top confidences 0.9 (right), 0.8 (wrong), 0.6 (right), 0.6 (right); 5 bins of width 0.2
    probs = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.4, 0.6]], **f64)
    labels = torch.tensor([0, 0, 0, 1])
    # bins: (0.4, 0.6] holds 0.6, 0.6 (acc 1, conf 0.6); (0.6, 0.8] holds 0.8 (acc 0);
    # (0.8, 1] holds 0.9 (acc 1)
    ece = expected_calibration_error(probs, labels, 5)
    expected = (2 / 4) * 0.4 + (1 / 4) * 0.8 + (1 / 4) * 0.1
    assert ece.item() == pytest.approx(expected, abs=1e-12)
    mce = expected_calibration_error(probs, labels, 5, norm="max")
    assert mce.item() == pytest.approx(0.8, abs=1e-12)
    l2 = expected_calibration_error(probs, labels, 5, norm="l2")
    assert l2.item() == pytest.approx(math.sqrt(0.5 * 0.16 + 0.25 * 0.64 + 0.25 * 0.01), abs=1e-12)
    b = reliability_bins(probs, labels, 5)
    assert b.count.tolist() == [0, 0, 2, 1, 1]
    assert torch.isnan(b.accuracy[:2]).all()
    assert b.accuracy[2:].tolist() == [1.0, 0.0, 1.0]
    assert torch.allclose(b.confidence[2:], torch.tensor([0.6, 0.8, 0.9], **f64))


def test_width_bins_are_closed_on_the_right():
    # a confidence exactly on an edge m/M belongs to bin m (the lower one), 1.0 to the last bin
    probs = torch.tensor([[0.6, 0.4], [1.0, 0.0], [0.5, 0.5]], **f64)
    labels = torch.tensor([0, 0, 1])
    b = reliability_bins(probs, labels, 5)
    # 0.5 -> (0.4, 0.6]; 0.6 -> (0.4, 0.6]; 1.0 -> (0.8, 1]
    assert b.count.tolist() == [0, 0, 2, 0, 1]
    # the tie 0.5/0.5 predicts the first class (argmax), which is wrong here
    assert b.accuracy[2].item() == 0.5


def test_mass_bins_sizes_and_ties():
    conf = torch.tensor([0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85], **f64)
    probs = torch.stack([conf, 1 - conf], 1)
    labels = torch.zeros(7, dtype=torch.long)
    b = reliability_bins(probs, labels, 3, binning="mass")
    assert b.count.tolist() == [3, 2, 2]  # like numpy.array_split(7, 3)
    assert torch.allclose(b.edges, torch.tensor([0.55, 0.7, 0.8, 0.85], **f64))
    # ties are not split across bins, and the result does not depend on the order of rows
    conf = torch.tensor([0.6, 0.7, 0.7, 0.7, 0.9, 0.95], **f64)
    probs = torch.stack([conf, 1 - conf], 1)
    labels = torch.tensor([0, 1, 0, 0, 0, 1])
    b = reliability_bins(probs, labels, 3, binning="mass")
    # the run of three 0.7s fills one bin; the bins around it are not left empty
    assert b.count.tolist() == [1, 3, 2]
    assert b.edges.tolist() == [0.6, 0.7, 0.9, 0.95]
    perm = torch.tensor([5, 3, 0, 4, 1, 2])
    b2 = reliability_bins(probs[perm], labels[perm], 3, binning="mass")
    assert torch.equal(b.count, b2.count)
    assert torch.allclose(b.accuracy.nan_to_num(-1), b2.accuracy.nan_to_num(-1))


def test_mass_bins_more_bins_than_points():
    probs = torch.tensor([[0.7, 0.3], [0.2, 0.8]], **f64)
    b = reliability_bins(probs, torch.tensor([0, 1]), 5, binning="mass")
    assert b.count.tolist() == [1, 1, 0, 0, 0]


def test_ece_equals_torchmetrics_under_same_binning():
    tm = pytest.importorskip("torchmetrics.functional.classification")
    z, y = synthetic(3000, 10, 3.0, seed=1)
    probs = torch.softmax(z / 0.7, 1)
    for norm in ("l1", "l2", "max"):
        ours = expected_calibration_error(probs, y, 15, norm=norm).item()
        theirs = tm.multiclass_calibration_error(probs, y, 10, 15, norm=norm).item()
        # torchmetrics accumulates in the dtype it casts to (float32): agree to float32 rounding
        assert ours == pytest.approx(theirs, abs=1e-6), norm


def test_debiased_l2_equals_torchmetrics_internal_and_kumar_formula():
    from torchmetrics.functional.classification.calibration_error import _ce_compute

    z, y = synthetic(500, 4, 2.0, seed=2)
    probs = torch.softmax(z, 1)
    conf, pred = probs.max(1)
    ours = expected_calibration_error(probs, y, 10, norm="l2", debias=True).item()
    theirs = _ce_compute(conf, (pred == y).double(), 10, norm="l2", debias=True).item()
    assert ours == pytest.approx(theirs, abs=1e-12)
    # and by hand, Kumar et al. (2019): sum_m w_m [(acc - conf)^2 - acc (1 - acc) / (n_m - 1)]
    b = reliability_bins(probs, y, 10)
    full = b.count > 1
    w = b.count[full] / 500
    acc, cf, n = b.accuracy[full], b.confidence[full], b.count[full]
    single = (b.count == 1)
    sq = (w * ((acc - cf) ** 2 - acc * (1 - acc) / (n - 1))).sum()
    sq += ((b.count[single] / 500) * (b.accuracy[single] - b.confidence[single]) ** 2).sum()
    assert ours == pytest.approx(math.sqrt(max(sq.item(), 0.0)), abs=1e-12)
    # debiasing lowers the estimate
    assert ours < expected_calibration_error(probs, y, 10, norm="l2").item()


def test_plugin_ece_of_calibrated_model_is_positive_and_debiased_is_smaller():
    # labels drawn from the model's own probabilities: calibrated by construction. 40 seeds:
    # the plug-in ECE is always > 0 (bins of ~70 points have sampling noise ~0.05); the
    # debiased L2 is below the plug-in L2 in every seed (it subtracts a positive variance).
    for seed in range(40):
        z, y = synthetic(1000, 10, 2.0, seed=100 + seed)
        probs = torch.softmax(z, 1)
        assert expected_calibration_error(probs, y).item() > 0.005
        d = expected_calibration_error(probs, y, norm="l2", debias=True).item()
        assert d < expected_calibration_error(probs, y, norm="l2").item()


def test_ece_is_zero_for_exactly_calibrated_bins():
    # every bin: confidence 0.75, 3 of 4 right
    probs = torch.tensor([[0.75, 0.25]] * 4, **f64)
    labels = torch.tensor([0, 0, 0, 1])
    assert expected_calibration_error(probs, labels).item() == 0.0
    assert expected_calibration_error(probs, labels, binning="mass").item() == 0.0


def test_nll_and_brier_exact():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]], **f64)
    labels = torch.tensor([0, 2])
    p = torch.softmax(logits, 1)
    expected = -(math.log(p[0, 0].item()) + math.log(1 / 3)) / 2
    assert negative_log_likelihood(logits, labels).item() == pytest.approx(expected, rel=1e-14)
    brier = ((p[0] - torch.tensor([1.0, 0, 0], **f64)).square().sum()
             + (p[1] - torch.tensor([0, 0, 1.0], **f64)).square().sum()) / 2
    assert brier_score(p, labels).item() == pytest.approx(brier.item(), rel=1e-14)
    # huge logits: finite
    big = torch.tensor([[1e4, -1e4]], **f64)
    assert negative_log_likelihood(big, torch.tensor([1])).item() == pytest.approx(2e4)


# ------------------------------------------------------------------------------------------------
# Temperature scaling
# ------------------------------------------------------------------------------------------------
def brute_force_temperature(z, y):
    """Golden-section search in log T on a fine grid's best bracket (float64)."""
    def nll(logt):
        return F.cross_entropy(z / math.exp(logt), y).item()

    grid = np.linspace(math.log(0.05), math.log(50), 301)
    vals = [nll(t) for t in grid]
    i = int(np.argmin(vals))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    r = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        c, d = b - r * (b - a), a + r * (b - a)
        if nll(c) < nll(d):
            b = d
        else:
            a = c
    return math.exp((a + b) / 2)


@pytest.mark.parametrize("target", [0.7, 1.0, 2.5])
def test_fit_temperature_matches_brute_force(target):
    z, y = synthetic(2000, 10, 3.0, seed=3)
    t0 = fit_temperature(z, y).item()
    # scaling the logits by c scales the optimal temperature by c exactly
    zz = z * (target / t0)
    t = fit_temperature(zz, y).item()
    assert t == pytest.approx(target, rel=1e-8)
    assert t == pytest.approx(brute_force_temperature(zz, y), rel=1e-6)
    nll = lambda temp: F.cross_entropy(zz / temp, y).item()  # noqa: E731
    assert nll(t) <= nll(1.0) + 1e-12
    assert nll(t) <= min(nll(t * 1.001), nll(t / 1.001))


def test_fit_temperature_float32_and_many_classes():
    z, y = synthetic(500, 200, 4.0, seed=4)
    t64 = fit_temperature(z, y)
    t32 = fit_temperature(z.float(), y)
    assert t32.dtype == torch.float32
    assert t32.item() == pytest.approx(t64.item(), rel=1e-6)


@pytest.mark.parametrize("target, stalls, negative", [(2.5, True, False), (0.7, False, True)])
def test_popular_recipe_fails_where_exact_fit_does_not(target, stalls, negative):
    # the recipe: LBFGS(lr=0.01, max_iter=50) from T = 1.5, no line search, no T > 0
    z, y = synthetic(2000, 10, 3.0, seed=0)
    zz = z * (target / fit_temperature(z, y).item())
    t_exact = fit_temperature(zz, y).item()
    assert t_exact == pytest.approx(target, rel=1e-8)
    t_recipe, path = popular_temperature_recipe(zz, y)
    assert path[0].item() == 1.5 and len(path) >= 2
    if stalls:  # stops well short of T* = 2.5 (at about 1.73)
        assert 1.5 < t_recipe.item() < 2.0
    if negative:  # runs through T = 0 into negative temperatures
        assert t_recipe.item() < 0
    nll = lambda temp: F.cross_entropy(zz / temp, y).item()  # noqa: E731
    assert nll(t_exact) < nll(t_recipe.item())


def test_fit_temperature_boundaries_raise():
    logits = torch.tensor([[3.0, 0.0], [0.0, 2.0], [1.0, -1.0]], **f64)
    with pytest.raises(ValueError, match="separable.*T -> 0"):
        fit_temperature(logits, torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="T -> infinity"):
        fit_temperature(logits, torch.tensor([1, 0, 1]))
    # one mistake: a finite optimum exists
    t = fit_temperature(logits, torch.tensor([0, 1, 1]))
    assert 0 < t.item() < math.inf


# ------------------------------------------------------------------------------------------------
# Scores
# ------------------------------------------------------------------------------------------------
def test_scores_exact_values():
    logits = torch.tensor([[2.0, 0.0, 0.0], [1000.0, 1000.0, -1000.0]], **f64)
    e = math.exp(2.0)
    assert torch.allclose(max_softmax_score(logits), torch.tensor([e / (e + 2), 0.5], **f64))
    assert torch.allclose(energy_score(logits),
                          torch.tensor([math.log(e + 2), 1000 + math.log(2)], **f64))
    assert torch.allclose(energy_score(logits, 2.0),
                          2 * torch.tensor([math.log(math.exp(1) + 2), 500 + math.log(2)], **f64))
    p = torch.tensor([e, 1, 1], **f64) / (e + 2)
    assert torch.allclose(softmax_entropy(logits),
                          torch.tensor([-(p * p.log()).sum().item(), math.log(2)], **f64))
    assert not torch.isnan(softmax_entropy(torch.tensor([[1e4, -1e4]]))).any()
    # temperature T -> large: MSP -> 1/K
    assert max_softmax_score(logits[:1], 1e6).item() == pytest.approx(1 / 3, rel=1e-5)


def test_kl_uniform_stable_and_exact():
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0], [800.0, -800.0]], **f64)
    # KL(U || (3/4, 1/4)) = 0.5 log(0.5/0.75) + 0.5 log(0.5/0.25)
    kl12 = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(2.0)
    assert torch.allclose(kl_uniform(logits), torch.tensor([0.0, kl12, 800.0 - math.log(2)], **f64))
    # float32 at extreme logits: finite, where log(softmax) is -inf
    big = torch.tensor([[100.0, -100.0]])
    assert torch.isfinite(kl_uniform(big)).all()
    assert torch.isinf(torch.log(torch.softmax(big, 1))).any()
    # float16 logits whose spread exceeds float16's range: the KL (59999.3) is representable,
    # log_softmax's intermediate -1.2e5 is not (R3 review: inf before)
    half = torch.tensor([[6e4, -6e4], [1.0, 0.0]], dtype=torch.float16)
    got = kl_uniform(half)
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    assert torch.allclose(got.double(), kl_uniform(half.double()), rtol=1e-3)


def test_confidence_loss_value_and_gradient():
    g = torch.Generator().manual_seed(5)
    li = torch.randn(6, 4, generator=g, **f64, requires_grad=True)
    lo = torch.randn(5, 4, generator=g, **f64, requires_grad=True)
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    loss = confidence_loss(li, y, lo, 0.5)
    ce = F.cross_entropy(li, y)
    pu = torch.full((5, 4), 0.25, **f64)
    kl = F.kl_div(torch.log_softmax(lo, 1), pu, reduction="none").sum(1).mean()
    assert loss.item() == pytest.approx((ce + 0.5 * kl).item(), rel=1e-12)
    assert torch.autograd.gradcheck(lambda a, b: confidence_loss(a, y, b, 0.5), (li, lo))
    huge = torch.tensor([[1e4, -1e4, 0.0, 0.0]], requires_grad=True)
    out = confidence_loss(huge, torch.tensor([1]), huge, 1.0)
    out.backward()
    assert torch.isfinite(out) and torch.isfinite(huge.grad).all()


def test_odin_perturbation_raises_top_score_and_matches_manual():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    model = model.double()
    x = torch.randn(10, 3, generator=torch.Generator().manual_seed(1), **f64)
    t, eps = 1000.0, 0.01
    s0 = odin_score(model, x, temperature=t, epsilon=0.0)
    assert torch.allclose(s0, max_softmax_score(model(x).detach(), t))
    s = odin_score(model, x, temperature=t, epsilon=eps)
    xg = x.clone().requires_grad_(True)
    top = torch.log_softmax(model(xg) / t, 1).max(1).values.sum()
    (grad,) = torch.autograd.grad(top, xg)
    manual = max_softmax_score(model(x + eps * grad.sign()).detach(), t)
    assert torch.allclose(s, manual)
    assert (s >= s0 - 1e-12).all()  # a small step up the gradient raises the score
    assert all(p.grad is None for p in model.parameters())


# ------------------------------------------------------------------------------------------------
# OOD metrics: equal to scikit-learn, exact with ties, both conventions
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("decimals", [None, 1, 0])
def test_ood_metrics_equal_sklearn(decimals):
    g = torch.Generator().manual_seed(6)
    si = torch.randn(800, generator=g, **f64) + 1.0
    so = torch.randn(500, generator=g, **f64)
    if decimals is not None:  # many ties
        si, so = si.round(decimals=decimals), so.round(decimals=decimals)
    m = ood_metrics(si, so)
    lab = np.r_[np.ones(800), np.zeros(500)]
    s = np.r_[si.numpy(), so.numpy()]
    assert m["auroc"] == pytest.approx(roc_auc_score(lab, s), abs=1e-12)
    assert m["aupr_in"] == pytest.approx(average_precision_score(lab, s), abs=1e-12)
    assert m["aupr_out"] == pytest.approx(average_precision_score(1 - lab, -s), abs=1e-12)
    # AUROC is the Mann-Whitney probability with ties counted one half
    diff = si[:, None] - so[None, :]
    mw = ((diff > 0).double() + 0.5 * (diff == 0).double()).mean().item()
    assert m["auroc"] == pytest.approx(mw, abs=1e-12)


def test_ood_metrics_fpr95_by_hand_and_convention():
    # 20 in-distribution scores 1..20, 10 OOD scores 0.5, 2.5, ..., 9.5 (no ties)
    si = torch.arange(1, 21, **f64)
    so = torch.arange(10, **f64) + 0.5
    m = ood_metrics(si, so)
    # 95 % TPR = 19 of 20 in accepted: threshold 2, OOD accepted: 2.5 .. 9.5 = 8 of 10
    assert m["fpr_at_95_tpr"] == pytest.approx(0.8)
    mo = ood_metrics(si, so, positive="out")
    # OOD positive: 95 % of 10 OOD -> all 10 must be flagged (score <= 9.5): in flagged 1..9
    assert mo["fpr_at_95_tpr"] == pytest.approx(9 / 20)
    assert mo["auroc"] == pytest.approx(m["auroc"], abs=1e-12)  # two curves, one area
    # detection accuracy: best threshold 10 -> in accepted 11/20, OOD rejected 10/10
    assert m["detection_accuracy"] == pytest.approx(1 - 0.5 * (9 / 20) - 0.0)


def test_ood_metrics_ties_move_together():
    si = torch.tensor([1.0, 1.0, 1.0, 1.0], **f64)
    so = torch.tensor([1.0, 0.0], **f64)
    m = ood_metrics(si, so)
    # the only threshold with TPR >= 95 % accepts every score >= 1, including the tied OOD one
    assert m["fpr_at_95_tpr"] == 0.5
    assert m["auroc"] == pytest.approx(0.75)


def test_ood_metrics_perfect_and_reversed():
    si = torch.tensor([3.0, 4.0, 5.0])
    so = torch.tensor([0.0, 1.0])
    m = ood_metrics(si, so)
    assert m == dict(auroc=1.0, aupr_in=1.0, aupr_out=1.0, fpr_at_95_tpr=0.0,
                     detection_accuracy=1.0)
    r = ood_metrics(so, si)
    assert r["auroc"] == 0.0 and r["fpr_at_95_tpr"] == 1.0


# ------------------------------------------------------------------------------------------------
# Training routines
# ------------------------------------------------------------------------------------------------
def blobs(n=150, seed=7):
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[0.0, 2.0], [-2.0, -1.0], [2.0, -1.0]])
    y = torch.arange(3).repeat_interleave(n // 3)
    x = centres[y] + 0.5 * torch.randn(n, 2, generator=g)
    return x, y


def mlp(seed, d_in=2, d_out=3, hidden=32):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, d_out))


def test_train_classifier_learns_and_confidence_loss_flattens_far_away():
    x, y = blobs()
    far = torch.tensor([[12.0, 12.0], [-12.0, 10.0], [0.0, -12.0]])

    def noise(b, gen):  # broad noise covering the far points (not beyond: see Vernekar 2019)
        return 40 * torch.rand(b, 2, generator=gen) - 20

    plain, conf = mlp(0), mlp(0)
    train_classifier(plain, x, y, steps=300, generator=torch.Generator().manual_seed(1))
    losses = train_classifier(conf, x, y, steps=300, x_out=noise, beta=1.0,
                              generator=torch.Generator().manual_seed(1))
    assert losses.shape == (300,) and torch.isfinite(losses).all()
    for net in (plain, conf):
        assert (net(x).argmax(1) == y).double().mean() > 0.95
    with torch.no_grad():
        # on far points the plain net is confident, the confidence-loss net much less so
        assert max_softmax_score(plain(far)).min() > 0.9
        assert max_softmax_score(conf(far)).max() < 0.6


def test_train_confidence_gan_lowers_kl_on_fakes_and_is_deterministic():
    x, y = blobs()

    def run(beta, steps):
        clf = mlp(0)
        gen = mlp(1, d_in=4, d_out=2)
        disc = mlp(2, d_in=2, d_out=1)
        h = train_confidence_gan(clf, gen, disc, x, y, noise_dim=4, beta=beta, steps=steps,
                                 generator=torch.Generator().manual_seed(3))
        return clf, h

    clf, h = run(1.0, 150)
    assert set(h) == {"d_loss", "g_loss", "c_loss", "kl_fake"}
    assert all(torch.isfinite(v).all() and v.shape == (150,) for v in h.values())
    assert (clf(x).argmax(1) == y).double().mean() > 0.9
    # with beta = 0 (a plain GAN beside a plain classifier) the classifier is confident on
    # the generator's samples; with beta = 1 it learns to be unsure there (0.07 vs 0.68)
    _, h0 = run(0.0, 150)
    assert h["kl_fake"][-20:].mean() < 0.3 * h0["kl_fake"][-20:].mean()
    # every draw comes from the generator: a shorter run repeats the first steps exactly
    _, h_short = run(1.0, 20)
    assert torch.equal(h["c_loss"][:20], h_short["c_loss"])


# ------------------------------------------------------------------------------------------------
# Bad input: one test per kind
# ------------------------------------------------------------------------------------------------
P = torch.tensor([[0.7, 0.3], [0.4, 0.6]], **f64)
Y = torch.tensor([0, 1])


@pytest.mark.parametrize("probs, labels, kwargs, exc, match", [
    ([[0.7, 0.3]], Y, {}, TypeError, "argument 'probs' must be a torch.Tensor"),
    (torch.tensor([[1, 0]]), Y[:1], {}, TypeError, "argument 'probs' must have a floating"),
    (P[:0], Y[:0], {}, ValueError, "argument 'probs' is empty"),
    (P[0], Y, {}, ValueError, r"argument 'probs' must have shape \(N, K\)"),
    (P[:, :1], Y, {}, ValueError,
     "argument 'probs' needs at least 2 classes"),
    (torch.tensor([[float("nan"), 0.5], [0.4, 0.6]]), Y, {}, ValueError,
     "argument 'probs' contains NaN"),
    (torch.tensor([[1.2, -0.2], [0.4, 0.6]]), Y, {}, ValueError,
     r"argument 'probs' must lie in \[0, 1\]"),
    (torch.tensor([[0.7, 0.2], [0.4, 0.6]]), Y, {}, ValueError,
     "argument 'probs' must have rows that sum to 1, but row 0 sums to 0.9"),
    (P, Y.double(), {}, TypeError, "argument 'labels' must have an integer dtype"),
    (P, Y[:1], {}, ValueError, r"argument 'labels' must have shape \(2,\)"),
    (P, torch.tensor([0, 2]), {}, ValueError, r"argument 'labels' must lie in \[0, 2\)"),
    (P, torch.tensor([-1, 0]), {}, ValueError, r"argument 'labels' must lie in \[0, 2\)"),
    (P, Y, {"n_bins": 0}, ValueError, "argument 'n_bins' must be >= 1"),
    (P, Y, {"binning": "equal"}, ValueError, "argument 'binning' must be one of"),
    (P, Y, {"norm": "l3"}, ValueError, "argument 'norm' must be one of"),
    (P, Y, {"debias": True}, ValueError, "argument 'debias'=True needs norm='l2'"),
    (P, Y, {"debias": 1}, TypeError, "argument 'debias' must be a bool"),
])
def test_ece_bad_input(probs, labels, kwargs, exc, match):
    with pytest.raises(exc, match="^expected_calibration_error: " + match):
        expected_calibration_error(probs, labels, **kwargs)


def test_logits_functions_bad_input():
    bad = torch.tensor([[0.0, float("inf")]])
    for fn in (max_softmax_score, energy_score, softmax_entropy, kl_uniform):
        with pytest.raises(ValueError, match=f"^{fn.__name__}: argument 'logits' contains an inf"):
            fn(bad)
    with pytest.raises(ValueError, match="^energy_score: argument 'temperature' must be > 0"):
        energy_score(P, 0.0)
    with pytest.raises(ValueError, match="^max_softmax_score: argument 'temperature' must be > 0"):
        max_softmax_score(P, -1.0)
    with pytest.raises(ValueError, match="^negative_log_likelihood: argument 'labels' must lie"):
        negative_log_likelihood(P, torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="^brier_score: argument 'probs' must have rows"):
        brier_score(P * 2 / 3, Y)
    with pytest.raises(ValueError, match="^fit_temperature: argument 'logits' contains NaN"):
        fit_temperature(torch.tensor([[float("nan"), 0.0]]), Y[:1])
    with pytest.raises(ValueError, match="^fit_temperature: argument 'logits' is empty"):
        fit_temperature(P[:0], Y[:0])
    with pytest.raises(ValueError, match="^popular_temperature_recipe: argument 'init' must be > 0"):
        popular_temperature_recipe(P, Y, init=0.0)


def test_ood_metrics_bad_input():
    s = torch.tensor([0.1, 0.2])
    with pytest.raises(ValueError, match="^ood_metrics: argument 'scores_in' is empty"):
        ood_metrics(s[:0], s)
    with pytest.raises(ValueError, match="^ood_metrics: argument 'scores_out' contains NaN"):
        ood_metrics(s, torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match="^ood_metrics: argument 'scores_in' must be 1-D"):
        ood_metrics(s[None], s)
    with pytest.raises(ValueError, match="^ood_metrics: argument 'positive' must be one of"):
        ood_metrics(s, s, positive="ood")
    with pytest.raises(TypeError, match="^ood_metrics: argument 'scores_out' must be a torch"):
        ood_metrics(s, [0.1])


def test_confidence_and_training_bad_input():
    with pytest.raises(ValueError, match="^confidence_loss: argument 'logits_out' has 3 classes"):
        confidence_loss(P, Y, torch.zeros(1, 3, **f64), 1.0)
    with pytest.raises(ValueError, match="^confidence_loss: argument 'beta' must be >= 0"):
        confidence_loss(P, Y, P, -0.1)
    with pytest.raises(TypeError, match="^odin_score: argument 'model' must be callable"):
        odin_score(None, P)
    with pytest.raises(ValueError, match="^odin_score: argument 'epsilon' must be >= 0"):
        odin_score(lambda v: v, P, epsilon=-1.0)
    x, y = blobs(30)
    with pytest.raises(TypeError, match="^train_classifier: argument 'classifier' must be a torch"):
        train_classifier(lambda v: v, x, y)
    with pytest.raises(ValueError, match=r"^train_classifier: argument 'y' must have shape \(30,\)"):
        train_classifier(mlp(0), x, y[:5])
    with pytest.raises(TypeError, match="^train_confidence_gan: argument 'generator' must be"):
        train_confidence_gan(mlp(0), mlp(1, 4, 2), mlp(2, 2, 1), x, y, noise_dim=4,
                             generator=0)
    with pytest.raises(ValueError, match="^train_confidence_gan: argument 'noise_dim' must be >= 1"):
        train_confidence_gan(mlp(0), mlp(1, 4, 2), mlp(2, 2, 1), x, y, noise_dim=0)


# ------------------------------------------------------------------------------------------------
# The benchmark script runs
# ------------------------------------------------------------------------------------------------
def test_benchmark_quick_runs():
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_calibration.py"
    rows = runpy.run_path(str(path), run_name="bench_calibration")["main"](["--quick"])
    assert len(rows) >= 4 and all(r["ratio"] > 0 for r in rows)


def test_fit_temperature_takes_few_newton_steps(monkeypatch):
    # Newton in 1/T converges quadratically: a handful of passes over the data, also when the
    # optimum lies above beta = 1 and the last step's slope rounds to -1e-16 (it once made the
    # fit double beta and bisect back, 40 passes instead of 6)
    import softmaxbook.calibration as cal

    calls = []
    real = cal._nll_derivatives

    def counting(*args):
        calls.append(args[2])
        return real(*args)

    monkeypatch.setattr(cal, "_nll_derivatives", counting)
    for seed in range(6):
        for target, k in ((0.7, 1000), (0.7, 10), (2.5, 100), (0.2, 50)):
            z, y = synthetic(300, k, 3.0, seed=200 + seed)
            zz = z * (target / fit_temperature(z, y).item())
            calls.clear()
            t = fit_temperature(zz, y).item()
            assert t == pytest.approx(target, rel=1e-8)
            assert len(calls) <= 12, (seed, target, k, calls)


# ------------------------------------------------------------------------------------------------
# Third-edition regressions (review of 2026-11-26)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_width_bins_follow_the_stated_rule_at_exact_edges(dtype):
    # The review's input: linspace(0, 1, 21)[11] = 0.5499999999999999 put 0.55 into
    # (0.55, 0.60] and gave 0.463; the stated rule puts it into (0.50, 0.55]: 0.163.
    probs = torch.tensor([[0.55, 0.45], [0.52, 0.48], [0.58, 0.42]], dtype=dtype)
    labels = torch.tensor([0, 1, 0])
    ece = expected_calibration_error(probs, labels, 20).item()
    # (0.50, 0.55]: 0.55 (right), 0.52 (wrong); (0.55, 0.60]: 0.58 (right)
    expected = (2 / 3) * abs(0.5 - 0.535) + (1 / 3) * abs(1 - 0.58)
    assert ece == pytest.approx(expected, abs=1e-6)
    assert reliability_bins(probs, labels, 20).count[10:12].tolist() == [2, 1]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_width_bins_every_edge_m_over_M_joins_bin_m(dtype):
    # every confidence m/M (as the dtype rounds it) in bin m, for many M: 0.5 <= m/M <= 1
    # (a top-label confidence of a 2-class row is at least 0.5)
    for n_bins in range(1, 60):
        for m in range(1, n_bins + 1):
            c = m / n_bins
            if c < 0.5:
                continue
            probs = torch.tensor([[c, 1 - c]], dtype=dtype)
            b = reliability_bins(probs, torch.tensor([0]), n_bins)
            assert int(b.count.argmax()) == m - 1, (n_bins, m)
            # and the next number above it goes to the next bin
            if m < n_bins:
                up = torch.nextafter(torch.tensor(c, dtype=dtype), torch.tensor(2.0, dtype=dtype))
                probs = torch.stack([up, 1 - up])[None]
                b = reliability_bins(probs, torch.tensor([0]), n_bins)
                assert int(b.count.argmax()) == m, (n_bins, m, "above")
    # the reported edges are m / M correctly rounded, not linspace's
    assert reliability_bins(torch.tensor([[0.6, 0.4]], dtype=dtype), torch.tensor([0]),
                            20).edges[11].item() == 0.55


def test_mass_bins_with_a_long_run_of_ties_leave_no_bin_empty():
    # The review: a float32 network's confidences of exactly 1.0 (86 % of them) emptied every
    # bin whose array_split cuts fell inside the run: NaN edges, NaN-width bars. 86 ones and 14
    # distinct values below them, 15 bins: every bin holds something, the ones share one bin.
    conf = torch.cat([torch.linspace(0.5, 0.9, 14, **f64), torch.ones(86, **f64)])
    probs = torch.stack([conf, 1 - conf], 1)
    labels = torch.zeros(100, dtype=torch.long)
    b = reliability_bins(probs, labels, 15, binning="mass")
    assert (b.count > 0).all() and b.count.sum() == 100
    assert b.count[-1] == 86
    assert torch.isfinite(b.edges).all() and (b.edges.diff() >= 0).all()
    assert torch.isfinite(b.confidence).all() and torch.isfinite(b.accuracy).all()
    assert torch.isfinite(expected_calibration_error(probs, labels, 15, binning="mass"))


@pytest.mark.parametrize("seed", range(20))
def test_mass_bins_never_split_ties_and_empty_only_when_values_run_out(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 300, (1,), generator=g))
    n_bins = int(torch.randint(1, 40, (1,), generator=g))
    # confidences on a coarse grid: many ties, sometimes fewer values than bins
    levels = int(torch.randint(1, 60, (1,), generator=g))
    conf = 0.5 + 0.5 * torch.randint(0, levels + 1, (n,), generator=g).double() / levels
    probs = torch.stack([conf, 1 - conf], 1)
    labels = torch.randint(0, 2, (n,), generator=g)
    b = reliability_bins(probs, labels, n_bins, binning="mass")
    idx = torch.bucketize(conf, b.edges[1:-1], right=True)  # bin of each value by its edges
    distinct = conf.unique().numel()
    assert b.count.sum() == n and torch.isfinite(b.edges).all()
    assert int((b.count > 0).sum()) == min(n_bins, distinct)
    # each distinct value lies in exactly one bin, and the bins are in increasing order
    for v in conf.unique():
        assert idx[conf == v].unique().numel() == 1
    assert (b.edges.diff() >= 0).all()
    if distinct == n:  # no ties: numpy.array_split's sizes
        sizes = [len(a) for a in np.array_split(np.arange(n), n_bins)]
        assert b.count.tolist() == sizes


def test_odin_runs_the_model_in_eval_mode_and_restores_its_mode():
    # The review: odin_score left a model in training mode as it came, so dropout made the
    # score random. Now: eval mode inside, every submodule's own mode restored afterwards.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(16, 4), torch.nn.BatchNorm1d(4)).double()
    x = torch.randn(32, 3, generator=torch.Generator().manual_seed(2), **f64)
    model.eval()
    expected = odin_score(model, x, temperature=10.0, epsilon=0.01)
    assert not model.training
    model.train()
    model[4].eval()  # a submodule already in eval mode stays so
    running = model[4].running_mean.clone()
    a = odin_score(model, x, temperature=10.0, epsilon=0.01)
    b = odin_score(model, x, temperature=10.0, epsilon=0.01)
    assert torch.equal(a, b) and torch.allclose(a, expected, rtol=0, atol=1e-14)
    assert model.training and model[2].training and not model[4].training
    assert torch.equal(model[4].running_mean, running)  # batch norm statistics untouched
    # and the mode is restored when the model raises
    model.train()

    class Broken(torch.nn.Module):
        def forward(self, v):
            raise RuntimeError("boom")

    broken = Broken()
    with pytest.raises(RuntimeError, match="boom"):
        odin_score(broken, x)
    assert broken.training


@pytest.mark.parametrize("decimals", [None, 1])
def test_ood_metrics_auroc_out_positive_is_computed_from_its_own_curve(decimals):
    # The review: ood_metrics returned the in-positive AUROC whatever `positive` was, so the
    # chapter's assert near_out["auroc"] == near["auroc"] compared a number with itself.
    g = torch.Generator().manual_seed(8)
    si = torch.randn(700, generator=g, **f64) + 0.8
    so = torch.randn(400, generator=g, **f64)
    if decimals is not None:
        si, so = si.round(decimals=decimals), so.round(decimals=decimals)
    m_in, m_out = ood_metrics(si, so), ood_metrics(si, so, positive="out")
    lab = np.r_[np.zeros(700), np.ones(400)]  # OOD positive, scored by -s
    s = np.r_[si.numpy(), so.numpy()]
    assert m_out["auroc"] == pytest.approx(roc_auc_score(lab, -s), abs=1e-12)
    assert m_out["auroc"] == pytest.approx(m_in["auroc"], abs=1e-12)


def test_ood_metrics_positive_out_auroc_depends_on_the_out_curve(monkeypatch):
    # with the out-positive curve broken, the out-positive AUROC must change (it did not)
    import softmaxbook.calibration as cal

    si = torch.arange(1, 21, **f64)
    so = torch.arange(10, **f64) + 0.5
    honest = cal._metrics_one_way

    def broken(pos, neg):
        m = honest(pos, neg)
        if bool((pos <= 0).all()):  # the out-positive call gets the negated OOD scores
            m["auroc"] = 0.123
        return m

    monkeypatch.setattr(cal, "_metrics_one_way", broken)
    assert cal.ood_metrics(si, so, positive="out")["auroc"] == 0.123
    assert cal.ood_metrics(si, so)["auroc"] != 0.123


# ------------------------------------------------------------------------------------------------
# Issue 25: the fast top label and the arithmetic bin index agree with what they replace
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_top_label_agrees_with_max_including_ties(dtype):
    from softmaxbook.calibration import _top_label
    g = torch.Generator().manual_seed(25)
    for _ in range(300):
        n = int(torch.randint(1, 40, (1,), generator=g))
        k = int(torch.randint(2, 7, (1,), generator=g))
        # integer weights 0..2: many rows with tied maxima, some with the label among them
        q = torch.randint(0, 3, (n, k), generator=g).to(dtype)
        q[q.sum(1) == 0, 0] = 1
        probs = q / q.sum(1, keepdim=True)
        labels = torch.randint(k, (n,), generator=g)
        conf, correct = _top_label(probs, labels)
        ref_conf, pred = probs.max(1)
        assert torch.equal(conf, ref_conf)
        assert torch.equal(correct, pred == labels), (probs, labels)
    # a uniform row: the first class is the prediction, every other label is wrong
    probs = torch.full((4, 4), 0.25, dtype=dtype)
    assert _top_label(probs, torch.arange(4))[1].tolist() == [True, False, False, False]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_bins", [1, 2, 3, 7, 10, 15, 20, 49, 100, 999, 4096])
def test_width_index_equals_bucketize_at_and_beside_every_edge(dtype, n_bins):
    from softmaxbook.calibration import _width_edges, _width_index
    g = torch.Generator().manual_seed(n_bins)
    edges = _width_edges(n_bins, dtype, "cpu").to(dtype)
    up = torch.nextafter(edges, torch.tensor(2.0, dtype=dtype))
    down = torch.nextafter(edges, torch.tensor(-1.0, dtype=dtype))
    conf = torch.cat([edges, up, down, torch.rand(5000, generator=g, dtype=dtype),
                      torch.tensor([0.0, 1.0], dtype=dtype)]).clamp(0, 1)
    cut = edges.double()
    ref = torch.bucketize(conf.double(), cut, right=False).sub_(1).clamp_(0, n_bins - 1)
    assert torch.equal(_width_index(conf, cut, n_bins), ref)


def test_width_index_edges_that_round_up_are_the_case_it_corrects():
    # float32(m/M) > m/M for some edges: a confidence equal to such an edge belongs to the bin
    # below; ceil(c M) - 1 alone would put it one bin up. The test above would miss a broken
    # correction only if no edge rounded up: here several do.
    from softmaxbook.calibration import _width_edges
    e = _width_edges(15, torch.float64, "cpu")
    assert int((e.float().double() > e).sum()) >= 3


def test_ece_fast_paths_agree_with_the_slow_ones():
    # float16 (bucketize kept) against float32 of the same values, and > 4096 bins
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(3 * torch.randn(2000, 10, generator=g), 1)
    labels = torch.randint(10, (2000,), generator=g)
    b32 = reliability_bins(probs, labels, 5000)
    idx = torch.bucketize(probs.amax(1).double(), b32.edges.float().double()).sub(1)
    ref = torch.bincount(idx.clamp(0, 4999), minlength=5000).double()
    assert torch.equal(b32.count, ref)
    assert expected_calibration_error(probs.half(), labels).dtype == torch.float16
