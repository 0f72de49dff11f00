"""Tests of softmaxbook.calibration_beyond: Brier decomposition, classwise ECE, the error of a
known calibration curve, the reliability diagram with histogram, the Mahalanobis score."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from softmaxbook.calibration import (  # noqa: E402
    brier_score, expected_calibration_error)
from softmaxbook.calibration_beyond import (  # noqa: E402
    brier_decomposition, class_gaussians, classwise_calibration_error,
    curve_calibration_error, mahalanobis_score, reliability_diagram,
    trace_temperature_recipe)


def _data(n=500, k=4, seed=0, sharp=2.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    return torch.softmax(sharp * z, 1).to(dtype), y


def _identity(d):
    return (d.reliability - d.resolution + d.uncertainty + d.within_variance
            - 2 * d.within_covariance)


# ---------------------------------------------------------------- Brier decomposition
@pytest.mark.parametrize("binning", ["width", "unique"])
@pytest.mark.parametrize("n_bins", [1, 3, 10, 50])
def test_brier_decomposition_identity_is_exact(binning, n_bins):
    p, y = _data()
    d = brier_decomposition(p, y, n_bins, binning=binning)
    assert torch.isclose(d.brier, brier_score(p, y), rtol=0, atol=1e-12)
    assert torch.isclose(_identity(d), d.brier, rtol=0, atol=1e-12)


def test_three_term_identity_exact_when_forecasts_constant_in_bins():
    # forecasts of one binary event on the bin centres 0.05, ..., 0.95: every bin holds one
    # value, so Murphy's REL - RES + UNC equals the Brier score exactly
    g = torch.Generator().manual_seed(1)
    f = (torch.randint(10, (2000,), generator=g).double() + 0.5) / 10
    o = (torch.rand(2000, generator=g, dtype=torch.float64) < f ** 1.3).long()
    d = brier_decomposition(f, o, 10)
    # (0 up to the rounding of a bin mean of equal numbers)
    assert float(d.within_variance) < 1e-25 and abs(float(d.within_covariance)) < 1e-25
    three = d.reliability - d.resolution + d.uncertainty
    assert abs(float(three - d.brier)) < 1e-14
    # and with coarser bins that mix forecasts it is not exact
    d5 = brier_decomposition(f, o, 3)
    assert float(d5.within_variance) > 1e-3
    assert abs(float(d5.reliability - d5.resolution + d5.uncertainty - d5.brier)) > 1e-4


def test_brier_decomposition_by_hand():
    # 4 binary forecasts, 2 bins of 2 width: [0, .5] holds .2, .4; (.5, 1] holds .8, .8
    f = torch.tensor([0.2, 0.4, 0.8, 0.8], dtype=torch.float64)
    o = torch.tensor([0, 1, 1, 0])
    d = brier_decomposition(f, o, 2)
    # bin 1: fbar .3, obar .5; bin 2: fbar .8, obar .5; obar = .5
    assert math.isclose(float(d.reliability), 0.5 * 0.04 + 0.5 * 0.09)
    assert math.isclose(float(d.resolution), 0.0, abs_tol=1e-15)
    assert math.isclose(float(d.uncertainty), 0.25)
    assert math.isclose(float(d.within_variance), (0.01 + 0.01) / 4)
    # d = (-.1, .1, 0, 0), e = (-.5, .5, .5, -.5)
    assert math.isclose(float(d.within_covariance), (0.05 + 0.05) / 4)
    assert math.isclose(float(d.brier), (0.04 + 0.36 + 0.04 + 0.64) / 4)


def test_brier_decomposition_perfect_and_uninformative():
    y = torch.tensor([0, 1, 1, 0, 1])
    sure = torch.nn.functional.one_hot(y, 2).double()
    d = brier_decomposition(sure, y)
    assert float(d.brier) == 0 and float(d.reliability) == 0
    assert math.isclose(float(d.resolution), float(d.uncertainty))
    # climatology: every forecast the base rate -> no resolution, no reliability error
    base = torch.full((5,), 0.6, dtype=torch.float64)
    d = brier_decomposition(base, y)
    assert abs(float(d.reliability)) < 1e-15 and abs(float(d.resolution)) < 1e-15
    assert math.isclose(float(d.brier), 0.24)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_brier_decomposition_low_precision(dtype):
    p, y = _data(dtype=dtype)
    d = brier_decomposition(p, y)
    assert d.brier.dtype == torch.float64
    assert torch.isclose(_identity(d), d.brier, atol=1e-10)
    ref = brier_score(p.double() / p.double().sum(1, keepdim=True), y)
    assert abs(float(d.brier - ref)) < 2e-2


def test_brier_decomposition_one_row_and_near_certain():
    p = torch.tensor([[1 - 1e-12, 1e-12]], dtype=torch.float64)
    d = brier_decomposition(p, torch.tensor([0]))
    assert float(d.brier) < 1e-20 and float(d.uncertainty) == 0
    assert torch.isclose(_identity(d), d.brier, atol=1e-15)


@pytest.mark.parametrize("probs, labels, kwargs, exc, match", [
    (torch.tensor([[0.5, 0.5]]), torch.tensor([0]), {"n_bins": 0}, ValueError, "n_bins"),
    (torch.tensor([[0.5, 0.5]]), torch.tensor([0]), {"binning": "mass"}, ValueError,
     "argument 'binning'"),
    (torch.tensor([[0.5, 0.6]]), torch.tensor([0]), {}, ValueError, "sum to 1"),
    (torch.tensor([1.5]), torch.tensor([0]), {}, ValueError, r"\[0, 1\]"),
    (torch.tensor([0.5]), torch.tensor([2]), {}, ValueError, "argument 'labels'"),
    (torch.tensor([float("nan")]), torch.tensor([0]), {}, ValueError, "NaN"),
    (torch.tensor([[float("inf"), 0.0]]), torch.tensor([0]), {}, ValueError, "probs"),
    (torch.tensor([[-float("inf"), 1.0]]), torch.tensor([0]), {}, ValueError, "probs"),
    (torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), {}, ValueError, "empty"),
    (torch.tensor([[1, 0]]), torch.tensor([0]), {}, TypeError, "floating-point"),
    (torch.tensor([[0.5, 0.5]]), torch.tensor([0.0]), {}, TypeError, "integer"),
])
def test_brier_decomposition_bad_input(probs, labels, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        brier_decomposition(probs, labels, **kwargs)


# ---------------------------------------------------------------- classwise ECE
def test_classwise_ece_by_hand():
    # 2 classes, 2 bins; class 0 probs .3 .3 .8 .8, labels 0 1 0 0
    p = torch.tensor([[0.3, 0.7], [0.3, 0.7], [0.8, 0.2], [0.8, 0.2]], dtype=torch.float64)
    y = torch.tensor([0, 1, 0, 0])
    # class 0: bin [0,.5]: mean .3, freq .5 -> .5 * .2; bin (.5,1]: mean .8, freq 1 -> .5 * .2
    # class 1: bin [0,.5]: mean .2, freq 0 -> .5 * .2; bin (.5,1]: mean .7, freq .5 -> .5 * .2
    got = classwise_calibration_error(p, y, 2)
    assert math.isclose(float(got), 0.2, rel_tol=1e-12)


def test_classwise_ece_zero_when_constant_and_matching():
    p = torch.tensor([[0.25, 0.75]] * 4, dtype=torch.float64)
    y = torch.tensor([0, 1, 1, 1])
    assert float(classwise_calibration_error(p, y, 10)) < 1e-15


def test_classwise_ece_binary_equals_twice_nothing_new():
    # for K = 2 both classes see the same gaps: classwise ECE equals the ECE of the class-1
    # probability read as a binary forecast (bins mirrored, edges aside)
    p, y = _data(k=2, n=400)
    cw = classwise_calibration_error(p, y, 10)
    one = classwise_calibration_error(p.flip(1), 1 - y, 10)
    assert torch.isclose(cw, one, atol=1e-12)


def test_classwise_ece_sees_non_top_classes():
    # same top-label confidences and correctness, non-top mass moved between classes
    y = torch.tensor([0, 0, 0, 1])
    a = torch.tensor([[0.6, 0.2, 0.2]] * 4, dtype=torch.float64)
    b = torch.tensor([[0.6, 0.25, 0.15]] * 4, dtype=torch.float64)
    assert torch.isclose(expected_calibration_error(a, y), expected_calibration_error(b, y))
    # class 0: |.6 - .75| in both; class 1: |.2 - .25| vs 0; class 2: .2 vs .15
    assert math.isclose(float(classwise_calibration_error(a, y)), (0.15 + 0.05 + 0.2) / 3)
    assert math.isclose(float(classwise_calibration_error(b, y)), (0.15 + 0.0 + 0.15) / 3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_classwise_ece_dtypes(dtype):
    p, y = _data(dtype=dtype)
    got = classwise_calibration_error(p, y)
    assert got.dtype == dtype
    pd = p.double()
    ref = classwise_calibration_error(pd / pd.sum(1, keepdim=True), y)
    assert abs(float(got) - float(ref)) < 2e-2


def test_classwise_ece_one_row():
    p = torch.tensor([[0.9, 0.1]], dtype=torch.float64)
    assert math.isclose(float(classwise_calibration_error(p, torch.tensor([0]))), 0.1)


@pytest.mark.parametrize("probs, labels, kwargs, exc, match", [
    (torch.tensor([[0.5, 0.5]]), torch.tensor([0]), {"n_bins": 0}, ValueError, "n_bins"),
    (torch.tensor([[0.5, 0.6]]), torch.tensor([0]), {}, ValueError, "sum to 1"),
    (torch.tensor([[float("nan"), 0.5]]), torch.tensor([0]), {}, ValueError, "NaN"),
    (torch.tensor([0.5, 0.5]), torch.tensor([0]), {}, ValueError, r"shape \(N, K\)"),
    (torch.tensor([[0.5, 0.5]]), torch.tensor([3]), {}, ValueError, "argument 'labels'"),
    (torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), {}, ValueError, "empty"),
])
def test_classwise_ece_bad_input(probs, labels, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        classwise_calibration_error(probs, labels, **kwargs)


# ---------------------------------------------------------------- known calibration curve
def test_curve_error_closed_forms():
    wiggle = lambda c: c + 0.08 * torch.sin(4 * math.pi * c)  # noqa: E731
    true = curve_calibration_error(wiggle)
    assert math.isclose(true, 0.16 / math.pi, rel_tol=1e-6)
    # one bin per half period: no cancellation inside a bin
    assert math.isclose(curve_calibration_error(wiggle, 4), true, rel_tol=1e-10)
    # whole periods per bin: complete cancellation
    assert curve_calibration_error(wiggle, 2) < 1e-12
    # c - c^2 never changes sign: every binning gives the truth (1/6)
    sq = lambda c: c ** 2  # noqa: E731
    for m in (1, 7, 15):
        assert math.isclose(curve_calibration_error(sq, m), 1 / 6, rel_tol=1e-10)
    assert math.isclose(curve_calibration_error(sq, norm="l2"), math.sqrt(1 / 30),
                        rel_tol=1e-10)
    assert curve_calibration_error(lambda c: c) == 0


def test_binned_never_above_true_and_grows_under_refinement():
    curve = lambda c: c + 0.16 * (1 - c) * torch.sin(7 * math.pi * c)  # noqa: E731
    dens = lambda c: 3 * c ** 2  # noqa: E731
    for norm in ("l1", "l2"):
        true = curve_calibration_error(curve, density=dens, norm=norm)
        prev = 0.0
        for m in (1, 2, 4, 8, 16, 32, 64):
            b = curve_calibration_error(curve, m, density=dens, norm=norm)
            assert b <= true + 1e-12
            assert b >= prev - 1e-12  # nested bins: the triangle inequality
            prev = b
        assert prev > 0.95 * true


def test_curve_error_matches_monte_carlo():
    # the binned value is the limit of the plug-in ECE: check with many draws (z < 1e-3)
    curve = lambda c: c + 0.16 * (1 - c) * torch.sin(7 * math.pi * c)  # noqa: E731
    g = torch.Generator().manual_seed(3)
    c = torch.rand(400000, generator=g, dtype=torch.float64)
    right = torch.rand(400000, generator=g, dtype=torch.float64) < curve(c)
    probs = torch.stack([c, 1 - c], 1)
    # confidence = max(c, 1-c) would fold; use a binary forecast of "right" instead
    d = brier_decomposition(c, right.long(), 5)
    # REL with 5 bins = sum_m P_m gap_m^2, the squared binned l2 error
    binned_l2 = curve_calibration_error(curve, 5, norm="l2")
    assert abs(math.sqrt(float(d.reliability)) - binned_l2) < 3e-3
    del probs


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"curve": 3}, TypeError, "argument 'curve'"),
    ({"curve": lambda c: c + 1}, ValueError, r"\[0, 1\]"),
    ({"curve": lambda c: c * float("nan")}, ValueError, "NaN"),
    ({"curve": lambda c: c[:3]}, ValueError, "shape"),
    ({"curve": lambda c: c, "n_bins": 0}, ValueError, "n_bins"),
    ({"curve": lambda c: c, "norm": "max"}, ValueError, "argument 'norm'"),
    ({"curve": lambda c: c, "density": lambda c: 2 * torch.ones_like(c)}, ValueError,
     "integrate to 1"),
    ({"curve": lambda c: c, "density": lambda c: 0.5 + 0 * c}, ValueError, "integrate"),
    ({"curve": lambda c: c, "density": lambda c: 4 - 6 * c}, ValueError, ">= 0"),
    ({"curve": lambda c: c, "density": "uniform"}, TypeError, "argument 'density'"),
    ({"curve": lambda c: c, "pieces": 2}, ValueError, "pieces"),
])
def test_curve_error_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        curve_calibration_error(**kwargs)


# ---------------------------------------------------------------- reliability diagram
def test_reliability_diagram_draws_histogram():
    import matplotlib.pyplot as plt
    p, y = _data()
    fig, ax = plt.subplots()
    ax, hist = reliability_diagram(ax, p, y, 15)
    heights = sorted(r.get_height() for r in hist.patches)
    from softmaxbook.calibration import reliability_bins
    b = reliability_bins(p, y, 15)
    assert heights == sorted(float(c) for c in b.count[b.count > 0])
    assert hist.get_xlim() == (0.0, 1.0)
    plt.close(fig)
    with pytest.raises(ValueError, match="sum to 1"):
        reliability_diagram(ax, torch.tensor([[0.5, 0.6]]), torch.tensor([0]))


# ---------------------------------------------------------------- Mahalanobis
def test_mahalanobis_by_hand():
    h = torch.tensor([[0.0, 0.0], [2.0, 0.0], [10.0, 10.0], [12.0, 10.0]],
                     dtype=torch.float64)
    y = torch.tensor([0, 0, 1, 1])
    means, prec = class_gaussians(h, y, shrinkage=0.5)
    assert torch.allclose(means, torch.tensor([[1.0, 0.0], [11.0, 10.0]],
                                              dtype=torch.float64))
    # Sigma = diag(1, 0); shrunk: 0.5 diag(1, 0) + 0.5 * 0.5 I = diag(.75, .25)
    assert torch.allclose(prec, torch.diag(torch.tensor([4 / 3, 4.0], dtype=torch.float64)))
    s = mahalanobis_score(torch.tensor([[1.0, 1.0], [11.0, 10.0]], dtype=torch.float64),
                          means, prec)
    assert torch.allclose(s, torch.tensor([-4.0, 0.0], dtype=torch.float64))


def test_mahalanobis_against_scipy_and_dtypes():
    from scipy.spatial.distance import mahalanobis
    g = torch.Generator().manual_seed(5)
    h = torch.randn(200, 6, generator=g, dtype=torch.float64)
    y = torch.randint(3, (200,), generator=g)
    h = h + 3 * torch.nn.functional.one_hot(y, 6).double()
    means, prec = class_gaussians(h, y)
    x = torch.randn(7, 6, generator=g, dtype=torch.float64)
    got = mahalanobis_score(x, means, prec)
    want = [-min(mahalanobis(x[i], means[k], prec) ** 2 for k in range(3)) for i in range(7)]
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), rtol=1e-10)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        s = mahalanobis_score(x.to(dtype), means, prec)
        assert s.dtype == dtype
        assert torch.allclose(s.double(), got, rtol=3e-2, atol=3e-2)
    # one row vs many
    assert torch.allclose(mahalanobis_score(x[:1], means, prec), got[:1])
    assert (got <= 0).all()


def test_mahalanobis_singular_needs_shrinkage():
    h = torch.randn(3, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="shrinkage > 0"):
        class_gaussians(h, torch.tensor([0, 1, 1]))
    class_gaussians(h, torch.tensor([0, 1, 1]), shrinkage=0.1)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"features": torch.ones(3, 2, dtype=torch.long)}, TypeError, "floating-point"),
    ({"features": torch.ones(3)}, ValueError, r"shape \(N, D\)"),
    ({"features": torch.tensor([[float("inf"), 0.0]] * 3)}, ValueError, "features"),
    ({"labels": torch.tensor([0.0, 1.0, 1.0])}, TypeError, "integer"),
    ({"labels": torch.tensor([0, 1])}, ValueError, "shape"),
    ({"labels": torch.tensor([0, 2, 2])}, ValueError, "no example of class 1"),
    ({"labels": torch.tensor([0, -1, 1])}, ValueError, ">= 0"),
    ({"shrinkage": 1.5}, ValueError, "shrinkage"),
    ({"shrinkage": True}, ValueError, "shrinkage"),
])
def test_class_gaussians_bad_input(kwargs, exc, match):
    args = {"features": torch.randn(3, 2, dtype=torch.float64),
            "labels": torch.tensor([0, 1, 1]), "shrinkage": 0.5}
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        class_gaussians(**args)


def test_class_gaussians_numpy_shrinkage_and_constant_features():
    # R6 review: np.float32(0.1) was refused as "must be a number in [0, 1]"; features
    # without spread inside the classes were told to "pass shrinkage > 0" at s = 0.5
    h = torch.randn(6, 2, dtype=torch.float64)
    y = torch.tensor([0, 1, 0, 1, 0, 1])
    want = class_gaussians(h, y, shrinkage=0.25)
    for s in (np.float32(0.25), np.float64(0.25)):
        got = class_gaussians(h, y, shrinkage=s)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    with pytest.raises(ValueError, match="do not vary within the classes"):
        class_gaussians(torch.ones(6, 2), y, shrinkage=0.5)


def test_mahalanobis_score_bad_input():
    means, prec = torch.zeros(2, 3), torch.eye(3)
    # R6 review: NaN means or precision gave NaN scores silently
    with pytest.raises(ValueError, match="argument 'means'"):
        mahalanobis_score(torch.zeros(4, 3), means * float("nan"), prec)
    with pytest.raises(ValueError, match="argument 'precision'"):
        mahalanobis_score(torch.zeros(4, 3), means, prec * float("inf"))
    with pytest.raises(ValueError, match="argument 'means'"):
        mahalanobis_score(torch.zeros(4, 2), means, prec)
    with pytest.raises(ValueError, match="argument 'precision'"):
        mahalanobis_score(torch.zeros(4, 3), means, torch.eye(2))
    with pytest.raises(ValueError, match="features"):
        mahalanobis_score(torch.tensor([[float("nan"), 0.0, 0.0]]), means, prec)
    with pytest.raises(ValueError, match="empty"):
        mahalanobis_score(torch.zeros(0, 3), means, prec)


def test_edges_are_m_over_M_as_in_the_ece():
    # 0.55 lies on the edge 11/20 and belongs to (0.50, 0.55], as in reliability_bins
    f = torch.tensor([0.55, 0.52, 0.58], dtype=torch.float64)
    o = torch.tensor([1, 0, 1])
    d = brier_decomposition(f, o, 20)
    # bins: {0.55, 0.52} together, {0.58} alone
    fbar, obar = (0.55 + 0.52) / 2, 0.5
    rel = (2 / 3) * (fbar - obar) ** 2 + (1 / 3) * (0.58 - 1) ** 2
    assert math.isclose(float(d.reliability), rel, rel_tol=1e-12)


# ---------------------------------------------------------------- LBFGS recipe trace
def _recipe_data(t_target, seed):
    from softmaxbook.calibration import fit_temperature
    g = torch.Generator().manual_seed(seed)
    z = 3 * torch.randn(500, 10, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    return z * (t_target / float(fit_temperature(z, y))), y


@pytest.mark.parametrize("t_target, seed", [(0.7, 0), (0.7, 1), (2.5, 2)])
def test_trace_reproduces_the_recipe_bit_for_bit(t_target, seed):
    from softmaxbook.calibration import popular_temperature_recipe
    z, y = _recipe_data(t_target, seed)
    t_end, path = popular_temperature_recipe(z, y)
    tr = trace_temperature_recipe(z, y)
    assert torch.equal(tr.temperature[:len(path)], path)
    if len(path) == len(tr.temperature):
        assert float(tr.final) == float(t_end)
    # the step taken is t * d, and it moves T to the next evaluation point
    steps = tr.step_size * tr.direction
    assert torch.allclose(tr.temperature[:-1] + steps[:-1], tr.temperature[1:], rtol=0,
                          atol=1e-15)
    # without a pair in memory, H_diag is 1 and the direction is -g
    none = tr.memory == 0
    assert (tr.h_diag[none] == 1).all()
    assert torch.equal(tr.direction[none], -tr.grad[none])


def test_trace_keeps_pairs_where_convex():
    # above T* = 2.5 the start 1.5 lies in the convex part: every pair is kept
    z, y = _recipe_data(2.5, 3)
    tr = trace_temperature_recipe(z, y, max_iter=10)
    assert tr.memory.tolist() == list(range(10))
    # H_diag = y s / y y: in one dimension s / y, the inverse of the secant curvature
    s = tr.temperature.diff()
    yv = tr.grad.diff()
    assert torch.allclose(tr.h_diag[1:], s / yv, rtol=1e-9)


def test_trace_stops_at_a_minimum_and_one_row():
    # a single example whose NLL has its minimum at T -> infinity is not needed: start at a
    # point with zero gradient (logits all equal) and LBFGS returns at once
    z = torch.zeros(1, 3, dtype=torch.float64)
    tr = trace_temperature_recipe(z, torch.tensor([1]))
    assert len(tr.temperature) == 0 and float(tr.final) == 1.5
    z = torch.tensor([[2.0, 0.0]], dtype=torch.float32)
    tr = trace_temperature_recipe(z, torch.tensor([0]), max_iter=3)
    assert len(tr.temperature) == 3 and tr.temperature.dtype == torch.float64


def test_trace_records_only_steps_taken():
    # R6 review: with lr = 1 the recipe converges to T* = 1.3; near it LBFGS's test
    # g d > -1e-9 stops it before the update. The trace used to go on for all 50 calls,
    # recording 44 rows at one T whose step_size * direction (~2e-6) was never taken
    from softmaxbook.calibration import popular_temperature_recipe
    z, y = _recipe_data(1.3, 5)
    t_end, path = popular_temperature_recipe(z, y, lr=1.0)
    tr = trace_temperature_recipe(z, y, lr=1.0)
    assert len(tr.temperature) < 50
    assert len(set(tr.temperature.tolist())) == len(tr.temperature)
    steps = tr.step_size * tr.direction
    assert torch.allclose(tr.temperature[:-1] + steps[:-1], tr.temperature[1:],
                          rtol=0, atol=1e-15)
    assert float(tr.final) == float(tr.temperature[-1] + steps[-1])
    # the recipe evaluated the NLL at the point where it stopped, then took no step:
    # the trace's rows are its iterations before that, and its final T is that point
    n = len(tr.temperature)
    assert torch.equal(tr.temperature, path[:n]) and len(path) == n + 1
    assert float(tr.final) == float(path[n]) == float(t_end)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"init": -1.0}, ValueError, "argument 'init'"),
    ({"lr": 0.0}, ValueError, "argument 'lr'"),
    ({"max_iter": 0}, ValueError, "max_iter"),
    ({"logits": torch.tensor([[float("inf"), 0.0]])}, ValueError, "logits"),
    ({"logits": torch.tensor([[float("nan"), 0.0]])}, ValueError, "NaN"),
    ({"logits": torch.tensor([1.0, 0.0])}, ValueError, r"shape \(N, K\)"),
    ({"labels": torch.tensor([2])}, ValueError, "argument 'labels'"),
])
def test_trace_bad_input(kwargs, exc, match):
    args = {"logits": torch.tensor([[1.0, 0.0]]), "labels": torch.tensor([0])}
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        trace_temperature_recipe(**args)
