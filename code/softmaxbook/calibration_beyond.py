"""Beyond top-label ECE and the maximum softmax probability: classwise calibration, the
decomposition of the Brier score, the calibration error of a known calibration curve, a
reliability diagram with its confidence histogram, and a feature-space score for open-set
recognition (Mahalanobis distance to class means).

Conventions are those of :mod:`softmaxbook.calibration`: probabilities ``(N, K)`` with rows
summing to 1, integer labels ``(N,)``, equal-width bins ``[0, 1/M], ((m-1)/M, m/M]`` closed on
the right, OOD scores oriented so that higher means "more in-distribution". Sums run in
float64; results come back in the dtype of the input.

References
----------
* Murphy (1973), *A new vector partition of the probability score*, J. Appl. Meteorology 12
  (Brier score = reliability - resolution + uncertainty).
* Stephenson, Coelho & Jolliffe (2008), *Two extra components in the Brier score
  decomposition*, Weather and Forecasting 23 (the within-bin variance and covariance terms
  that make the decomposition exact when forecasts vary inside a bin).
* Kull, Perello-Nieto, Kängsepp, Silva Filho, Song & Flach (2019), *Beyond temperature
  scaling: obtaining well-calibrated multiclass probabilities with Dirichlet calibration*,
  NeurIPS (classwise ECE).
* Kumar, Liang & Ma (2019), *Verified Uncertainty Calibration*, NeurIPS (binned calibration
  error underestimates the error of scaling methods).
* Lee, Lee, Lee & Shin (2018), *A Simple Unified Framework for Detecting Out-of-Distribution
  Samples and Adversarial Attacks*, NeurIPS (Mahalanobis score with class means and a shared
  covariance).
"""

from __future__ import annotations

import numbers
from typing import Callable, NamedTuple

import numpy as np
import torch

import torch.nn.functional as F

from softmaxbook._validate import as_float_tensor, check_finite, check_int, check_positive_number
from softmaxbook.calibration import (
    _check_choice,
    _check_labels,
    _check_logits,
    _check_probs,
    reliability_bins,
)

__all__ = [
    "BrierDecomposition",
    "brier_decomposition",
    "classwise_calibration_error",
    "curve_calibration_error",
    "reliability_diagram",
    "RecipeTrace",
    "trace_temperature_recipe",
    "class_gaussians",
    "mahalanobis_score",
]


def _width_bins(values: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Bin index of each value in ``[0, 1]``: right-closed equal-width bins, 0 joins bin 0."""
    # m / M correctly rounded (linspace(0, 1, 21)[11] is 0.5499999999999999, not 0.55), then
    # as the dtype of the values writes it (see calibration._width_edges and _bin_index)
    edges = torch.arange(n_bins + 1, dtype=torch.float64, device=values.device) / n_bins
    cut = edges.to(values.dtype).double()
    return torch.bucketize(values.double().contiguous(), cut, right=False).sub_(1).clamp_(0, n_bins - 1)


# ------------------------------------------------------------------------------------------------
# Brier score decomposition
# ------------------------------------------------------------------------------------------------
class BrierDecomposition(NamedTuple):
    """Terms of the Brier score, summed over the classes (0-d tensors, float64).

    ``brier == reliability - resolution + uncertainty + within_variance
    - 2 * within_covariance`` holds exactly (up to rounding) for any data; the last two terms
    vanish when the forecasts are constant within each bin (``binning="unique"`` always).
    """

    brier: torch.Tensor
    reliability: torch.Tensor
    resolution: torch.Tensor
    uncertainty: torch.Tensor
    within_variance: torch.Tensor
    within_covariance: torch.Tensor


def brier_decomposition(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 10, *,
                        binning: str = "width") -> BrierDecomposition:
    """Murphy's decomposition of the multi-class Brier score, class by class.

    For each class ``k`` the event ``o_i = [y_i = k]`` is forecast by ``f_i = p_ik``. The
    forecasts are grouped into bins ``m`` holding ``n_m`` of the ``N`` examples, with mean
    forecast ``fbar_m`` and observed frequency ``obar_m``; ``obar`` is the overall frequency::

        reliability = sum_m (n_m/N) (fbar_m - obar_m)^2
        resolution  = sum_m (n_m/N) (obar_m - obar)^2
        uncertainty = obar (1 - obar)
        within_variance   = (1/N) sum_i (f_i - fbar_m(i))^2
        within_covariance = (1/N) sum_i (f_i - fbar_m(i)) (o_i - obar_m(i))

    and ``mean_i (f_i - o_i)^2 = reliability - resolution + uncertainty + within_variance
    - 2 within_covariance`` exactly. Murphy's three-term identity (Brier = REL - RES + UNC)
    is the case where every bin holds a single forecast value: then the last two terms are 0.
    With bins of varying forecasts they are not, and REL - RES + UNC alone is only an
    approximation (Stephenson et al. 2008). Each term is summed over the ``K`` classes, so
    ``brier`` equals :func:`softmaxbook.calibration.brier_score` (for 1-D ``probs``, the
    binary Brier score ``mean_i (f_i - o_i)^2``).

    Parameters
    ----------
    probs : Tensor (N, K), rows summing to 1; or Tensor (N,) in ``[0, 1]``: forecasts of one
        binary event (then ``labels`` in ``{0, 1}`` say whether it happened).
    labels : integer Tensor (N,) in ``[0, K)``.
    n_bins : int >= 1, default 10
        Equal-width bins of each class's probability (ignored for ``binning="unique"``).
    binning : {"width", "unique"}
        ``"width"``: bins ``[0, 1/M], ((m-1)/M, m/M]``; ``"unique"``: one bin per distinct
        forecast value of each class (Murphy 1973), where the three-term identity is exact.

    Returns
    -------
    BrierDecomposition of 0-d float64 tensors.

    References
    ----------
    Murphy (1973); Stephenson, Coelho & Jolliffe (2008).
    """
    func = "brier_decomposition"
    as_float_tensor(probs, "probs", func)
    if probs.dim() == 1:
        # one binary event: forecasts f_i in [0, 1], outcomes labels_i in {0, 1}
        check_finite(probs, "probs", func)
        if bool((probs < 0).any()) or bool((probs > 1).any()):
            raise ValueError(f"{func}: argument 'probs' must lie in [0, 1], got values in "
                             f"[{float(probs.min()):.4g}, {float(probs.max()):.4g}]")
        labels = _check_labels(labels, probs.shape[0], 2, func)
        events = [(probs.detach().double(), labels.double())]
    else:
        _check_probs(probs, func)
        labels = _check_labels(labels, probs.shape[0], probs.shape[1], func)
        p = probs.detach().double()
        events = [(p[:, c], (labels == c).double()) for c in range(p.shape[1])]
    n_bins = check_int(n_bins, "n_bins", func, minimum=1)
    _check_choice(binning, ("width", "unique"), "binning", func)
    n = probs.shape[0]
    terms = torch.zeros(6, dtype=torch.float64, device=probs.device)
    for f, o in events:
        if binning == "unique":
            _, idx = torch.unique(f, return_inverse=True)
        else:
            idx = _width_bins(f, n_bins)
        m = int(idx.max()) + 1
        count = torch.bincount(idx, minlength=m).double()
        full = count > 0
        fbar = torch.bincount(idx, weights=f, minlength=m)[full] / count[full]
        obar = torch.bincount(idx, weights=o, minlength=m)[full] / count[full]
        w = count[full] / n
        o_all = o.mean()
        # deviations from the bin means: with these the cross terms of the square vanish
        remap = torch.cumsum(full.long(), 0) - 1
        d = f - fbar[remap[idx]]
        e = o - obar[remap[idx]]
        terms += torch.stack([
            (f - o).square().mean(),
            (w * (fbar - obar).square()).sum(),
            (w * (obar - o_all).square()).sum(),
            o_all * (1 - o_all),
            d.square().mean(),
            (d * e).mean(),
        ])
    return BrierDecomposition(*terms.unbind())


# ------------------------------------------------------------------------------------------------
# Classwise calibration error
# ------------------------------------------------------------------------------------------------
def classwise_calibration_error(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15,
                                ) -> torch.Tensor:
    """Classwise ECE: the binned calibration error of every class's probability, averaged.

    For each class ``k``, the probabilities ``p_ik`` of *all* examples are put into ``M``
    equal-width bins; in bin ``m`` (``n_mk`` examples) the mean of ``p_ik`` is compared with
    the fraction of those examples whose label is ``k``::

        classwise-ECE = (1/K) sum_k sum_m (n_mk / N) |freq_mk - conf_mk|

    Unlike the top-label ECE it also sees the probabilities a model gives to the classes it
    does not predict. It is 0 for forecasts that are constant within each bin and match the
    frequencies there.

    Parameters
    ----------
    probs : Tensor (N, K), rows summing to 1.
    labels : integer Tensor (N,) in ``[0, K)``.
    n_bins : int >= 1, default 15

    Returns
    -------
    0-d Tensor in the dtype of ``probs``, in ``[0, 1]``.

    References
    ----------
    Kull et al. (2019) (classwise-ECE); Nixon et al. (2019), *Measuring Calibration in Deep
    Learning*, call a close relative the static calibration error.
    """
    func = "classwise_calibration_error"
    _check_probs(probs, func)
    labels = _check_labels(labels, probs.shape[0], probs.shape[1], func)
    n_bins = check_int(n_bins, "n_bins", func, minimum=1)
    p = probs.detach().double()
    n, k = p.shape
    total = torch.zeros((), dtype=torch.float64, device=p.device)
    for c in range(k):
        idx = _width_bins(p[:, c], n_bins)
        gap = (torch.bincount(idx, weights=p[:, c], minlength=n_bins)
               - torch.bincount(idx, weights=(labels == c).double(), minlength=n_bins))
        # (n_m / N) |mean p - freq| = |sum p - sum o| / N: empty bins add 0
        total += gap.abs().sum() / n
    return (total / k).to(probs.dtype)


# ------------------------------------------------------------------------------------------------
# Calibration error of a known calibration curve (Kumar et al. 2019)
# ------------------------------------------------------------------------------------------------
def curve_calibration_error(curve: Callable[[torch.Tensor], torch.Tensor],
                            n_bins: int | None = None, *,
                            density: Callable[[torch.Tensor], torch.Tensor] | None = None,
                            norm: str = "l1", pieces: int = 4096) -> float:
    """The true or the binned calibration error of a model whose calibration curve is known.

    The model's confidence ``C`` has density ``density`` on ``[0, 1]`` (uniform by default) and
    is right with probability ``curve(c)`` when ``C = c``. The true error and its binned
    version with ``M`` equal-width bins ``B_m`` are, for ``norm="l1"``::

        true   = integral |c - curve(c)| density(c) dc
        binned = sum_m | integral_{B_m} (c - curve(c)) density(c) dc |

    (for ``norm="l2"``: ``sqrt(integral (c - curve)^2 density)`` and
    ``sqrt(sum_m P_m (E[C - curve(C) | B_m])^2)``). The binned value is what the plug-in ECE
    estimates with infinitely many examples; by the triangle (or Jensen's) inequality it is
    never above the true error, and it is below whenever ``c - curve(c)`` changes sign
    inside a bin: over- and under-confidence cancel (Kumar et al. 2019, Sec. 3).

    The integrals use 8-point Gauss-Legendre rules on ``pieces`` sub-intervals (split at the
    bin edges), in float64; the kink of ``|.|`` limits the accuracy to about ``pieces^-2``.

    Parameters
    ----------
    curve : callable, float64 Tensor (S,) -> Tensor (S,) with values in [0, 1].
    n_bins : int >= 1 or None
        ``None`` for the true error.
    density : callable or None
        Density of the confidence on ``[0, 1]`` (it must integrate to 1; checked to 1e-6).
    norm : {"l1", "l2"}
    pieces : int >= 8, default 4096

    Returns
    -------
    float

    References
    ----------
    Kumar, Liang & Ma (2019), Sec. 3.
    """
    func = "curve_calibration_error"
    if not callable(curve):
        raise TypeError(f"{func}: argument 'curve' must be callable, got "
                        f"{type(curve).__name__}")
    if density is not None and not callable(density):
        raise TypeError(f"{func}: argument 'density' must be callable or None, got "
                        f"{type(density).__name__}")
    if n_bins is not None:
        n_bins = check_int(n_bins, "n_bins", func, minimum=1)
    _check_choice(norm, ("l1", "l2"), "norm", func)
    pieces = check_int(pieces, "pieces", func, minimum=8)
    bins = 1 if n_bins is None else n_bins
    # an even number of pieces per bin: then c = 1/2 (where the density of a top-label
    # confidence of two classes starts) is always the end of a piece
    per_bin = 2 * max(1, -(-pieces // (2 * bins)))
    nodes, weights = np.polynomial.legendre.leggauss(8)
    # sub-interval ends: each bin split into per_bin equal pieces
    ends = torch.linspace(0, 1, bins * per_bin + 1, dtype=torch.float64)
    a, b = ends[:-1, None], ends[1:, None]
    x = (a + b) / 2 + (b - a) / 2 * torch.tensor(nodes)
    wx = (b - a) / 2 * torch.tensor(weights)
    h = curve(x.reshape(-1))
    if not isinstance(h, torch.Tensor) or h.shape != (x.numel(),):
        raise ValueError(f"{func}: argument 'curve' must return a Tensor of the shape of its "
                         f"input ({x.numel()},)")
    h = h.double().reshape(x.shape)
    check_finite(h, "curve", func)
    if bool((h < 0).any()) or bool((h > 1).any()):
        raise ValueError(f"{func}: argument 'curve' must return probabilities in [0, 1], got "
                         f"values in [{float(h.min()):.4g}, {float(h.max()):.4g}]")
    dens = torch.ones_like(x) if density is None else density(x.reshape(-1))
    if not isinstance(dens, torch.Tensor) or dens.numel() != x.numel():
        raise ValueError(f"{func}: argument 'density' must return a Tensor of the shape of "
                         f"its input ({x.numel()},)")
    dens = dens.double().reshape(x.shape)
    check_finite(dens, "density", func)
    if bool((dens < 0).any()):
        raise ValueError(f"{func}: argument 'density' must be >= 0")
    mass = float((wx * dens).sum())
    if abs(mass - 1) > 1e-6:
        raise ValueError(f"{func}: argument 'density' must integrate to 1 on [0, 1], "
                         f"got {mass:.6g}")
    gap = x - h
    if n_bins is None:
        if norm == "l1":
            return float((wx * dens * gap.abs()).sum())
        return float((wx * dens * gap.square()).sum().sqrt())
    # per bin: the integral of gap * density and the bin's probability
    g = (wx * dens * gap).reshape(bins, -1).sum(1)
    pm = (wx * dens).reshape(bins, -1).sum(1)
    if norm == "l1":
        return float(g.abs().sum())
    full = pm > 0
    return float((g[full].square() / pm[full]).sum().sqrt())


# ------------------------------------------------------------------------------------------------
# Reliability diagram with its confidence histogram
# ------------------------------------------------------------------------------------------------
def reliability_diagram(ax, probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15, *,
                        binning: str = "width", title: str | None = None,
                        hist_size: float = 0.3):
    """Draw a reliability diagram on ``ax`` and, below it, the histogram of the confidences.

    Bars: accuracy per bin; dots: (mean confidence, accuracy); dashed: the diagonal. The
    panel below (an inset ``hist_size`` times the height of ``ax``) shows how many examples each
    bin holds, on a log scale: how far to trust the bar above it (Guo et al. 2017 draw the
    same pair; a bin of five examples can only show accuracies 0, 0.2, ..., 1).

    Parameters
    ----------
    ax : matplotlib Axes
    probs, labels, n_bins, binning : as :func:`softmaxbook.calibration.reliability_bins`.
    title : str or None
    hist_size : float, default 0.3

    Returns
    -------
    (ax, ax_hist) : the diagram's axes and the histogram's.
    """
    from softmaxbook import plotting

    b = reliability_bins(probs, labels, n_bins, binning=binning)
    full = b.count > 0
    conf, acc = b.confidence[full], b.accuracy[full]
    widths = (b.edges[1:] - b.edges[:-1])[full]
    lefts = b.edges[:-1][full]
    ax.bar(lefts, acc, width=widths, align="edge", alpha=0.75, edgecolor="white",
           label="accuracy")
    ax.plot(conf, acc, "o", ms=3, color=plotting.PALETTE[3],
            label="(mean confidence, accuracy)")
    ax.plot([0, 1], [0, 1], "--", color="grey", lw=1, label="calibrated")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    plotting.label(ax, "confidence", "accuracy", title=title, legend=False)
    # the histogram below carries the x axis
    ax.set_xlabel("")
    ax.tick_params(labelbottom=False)
    # an inset below the axes (axes coordinates): a child of ``ax``, so that a constrained
    # layout makes room for it, and it follows ``ax`` into any grid (an Explorer's panels)
    ax_hist = ax.inset_axes([0.0, -0.06 - hist_size, 1.0, hist_size], sharex=ax)
    ax_hist.bar(lefts, b.count[full], align="edge", width=widths, color="grey",
                edgecolor="white")
    ax_hist.set_yscale("log")
    # a bin with one example still shows
    ax_hist.set_ylim(bottom=0.5, top=float(b.count.max()) * 3)
    ax_hist.set_xlim(0, 1)
    plotting.label(ax_hist, "confidence", "count", legend=False)
    return ax, ax_hist


# ------------------------------------------------------------------------------------------------
# The popular LBFGS temperature recipe, one iteration at a time
# ------------------------------------------------------------------------------------------------
class RecipeTrace(NamedTuple):
    """Per-iteration record of the LBFGS temperature recipe (1-D float64 tensors of length
    ``n``, the number of iterations run; ``memory`` is int64).

    ``temperature[j]`` and ``grad[j]``: where iteration ``j`` evaluated the NLL and its slope
    ``dNLL/dT`` there. After iteration ``j``: ``memory[j]`` curvature pairs ``(s, y)`` in the
    optimizer's history, its inverse-curvature scale ``h_diag[j]`` (``y s / y y`` of the
    newest pair kept; 1 while none is), its direction ``direction[j]`` and step size
    ``step_size[j]``; the step taken is ``step_size[j] * direction[j]``. ``final``: ``T`` after
    the last step (0-d).
    """

    temperature: torch.Tensor
    grad: torch.Tensor
    memory: torch.Tensor
    h_diag: torch.Tensor
    direction: torch.Tensor
    step_size: torch.Tensor
    final: torch.Tensor


def trace_temperature_recipe(logits: torch.Tensor, labels: torch.Tensor, *, init: float = 1.5,
                             lr: float = 0.01, max_iter: int = 50) -> RecipeTrace:
    """Run the popular LBFGS temperature recipe one iteration at a time and read the
    optimizer's own state after each.

    :func:`softmaxbook.calibration.popular_temperature_recipe` calls
    ``torch.optim.LBFGS([T], lr, max_iter).step`` once; here ``step`` is called ``max_iter``
    times with ``max_iter=1``. LBFGS keeps its history (``old_dirs``, ``old_stps``, ``H_diag``,
    ``d``, ``t``, ``prev_flat_grad``) in its state between calls, and evaluates the NLL at the
    same points in the same order, so the path is the same (the tests check it, bit for bit)
    -- except that the recipe can stop early on its tolerances (1e-9 on the change of the NLL
    or of ``T``), which this trace does not reproduce; compare the common prefix. Where LBFGS
    finds no descent left (``g d > -1e-9``) it takes no step, and the trace ends there, as
    the recipe does; every row's step is the one taken. torch keeps a
    pair only if ``y s > 1e-10`` and then sets ``H_diag = y s / y y``; without a pair the
    direction is ``-g`` (``H = 1``) and every step after the first is ``lr * direction``.

    Parameters
    ----------
    logits : Tensor (N, K), labels : integer Tensor (N,)
    init, lr : float > 0; max_iter : int >= 1
        As for ``popular_temperature_recipe``.

    Returns
    -------
    RecipeTrace

    References
    ----------
    Nocedal & Wright (2006), *Numerical Optimization*, Alg. 7.4 (the two-loop recursion) and
    eq. (7.20) (the initial scaling ``H_diag``); PyTorch's ``torch/optim/lbfgs.py``.
    """
    func = "trace_temperature_recipe"
    _check_logits(logits, func)
    labels = _check_labels(labels, logits.shape[0], logits.shape[1], func)
    init = check_positive_number(init, "init", func)
    lr = check_positive_number(lr, "lr", func)
    max_iter = check_int(max_iter, "max_iter", func, minimum=1)
    z = logits.detach().double()
    temperature = torch.nn.Parameter(torch.full((1,), init, dtype=torch.float64))
    opt = torch.optim.LBFGS([temperature], lr=lr, max_iter=1)
    rows = []
    seen = []

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(z / temperature, labels)
        loss.backward()
        seen.append((temperature.detach().item(), temperature.grad.item()))
        return loss

    for _ in range(max_iter):
        before = opt.state[temperature].get("n_iter", 0)
        opt.step(closure)
        state = opt.state[temperature]
        if state.get("n_iter", 0) == before:
            # converged at the start of the call (|g| <= 1e-7): LBFGS returned without a step
            seen.pop()
            break
        if temperature.detach().item() == seen[-1][0]:
            # LBFGS computed a direction but did not step: its test g d > -1e-9 (no descent
            # left) breaks before the update. The recipe's single call stops there too; the
            # trace ends with it rather than record a step that was never taken
            seen.pop()
            break
        t_now, g_now = seen[-1]
        rows.append((t_now, g_now, len(state["old_dirs"]), float(state["H_diag"]),
                     float(state["d"]), float(state["t"])))
    cols = list(zip(*rows)) if rows else [()] * 6
    as64 = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return RecipeTrace(as64(cols[0]), as64(cols[1]), torch.tensor(cols[2], dtype=torch.int64),
                       as64(cols[3]), as64(cols[4]), as64(cols[5]),
                       temperature.detach()[0].clone())


# ------------------------------------------------------------------------------------------------
# Mahalanobis score (Lee et al. 2018, NeurIPS)
# ------------------------------------------------------------------------------------------------
def class_gaussians(features: torch.Tensor, labels: torch.Tensor, *,
                    shrinkage: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Class means and the precision of one shared (tied) covariance, fitted to features.

    ``mu_k`` is the mean of the features of class ``k``;
    ``Sigma = (1/N) sum_i (h_i - mu_{y_i})(h_i - mu_{y_i})^T`` (Lee et al. 2018, Sec. 2),
    optionally shrunk towards a multiple of the identity,
    ``(1 - s) Sigma + s (tr Sigma / D) I``, which keeps it invertible when ``D >= N``.

    Parameters
    ----------
    features : Tensor (N, D), finite.
    labels : integer Tensor (N,) in ``[0, K)``; every class from 0 to ``max(labels)`` must
        occur.
    shrinkage : float in [0, 1], default 0

    Returns
    -------
    (means, precision) : Tensor (K, D) and Tensor (D, D), float64.

    Raises
    ------
    ValueError if the covariance is singular (use ``shrinkage > 0``).
    """
    func = "class_gaussians"
    as_float_tensor(features, "features", func)
    if features.dim() != 2:
        raise ValueError(f"{func}: argument 'features' must have shape (N, D), got shape "
                         f"{tuple(features.shape)}")
    check_finite(features, "features", func)
    if not isinstance(labels, torch.Tensor) or labels.is_floating_point() \
            or labels.dtype == torch.bool:
        raise TypeError(f"{func}: argument 'labels' must be an integer torch.Tensor")
    if labels.shape != (features.shape[0],):
        raise ValueError(f"{func}: argument 'labels' must have shape ({features.shape[0]},), "
                         f"got shape {tuple(labels.shape)}")
    if bool((labels < 0).any()):
        raise ValueError(f"{func}: argument 'labels' must be >= 0")
    # any real number (NumPy's float32 too, as numbers.Real registers it); bool is refused
    if isinstance(shrinkage, bool) or not isinstance(shrinkage, numbers.Real) \
            or not 0 <= shrinkage <= 1:
        raise ValueError(f"{func}: argument 'shrinkage' must be a number in [0, 1], got "
                         f"{shrinkage!r}")
    shrinkage = float(shrinkage)
    h = features.detach().double()
    y = labels.long()
    k = int(y.max()) + 1
    count = torch.bincount(y, minlength=k)
    if bool((count == 0).any()):
        missing = int((count == 0).nonzero()[0])
        raise ValueError(f"{func}: argument 'labels' has no example of class {missing}")
    means = torch.zeros(k, h.shape[1], dtype=torch.float64).index_add_(0, y, h)
    means /= count[:, None].double()
    centred = h - means[y]
    cov = centred.T @ centred / h.shape[0]
    d = h.shape[1]
    cov = (1 - shrinkage) * cov + shrinkage * (torch.trace(cov) / d) * torch.eye(
        d, dtype=torch.float64)
    # a Cholesky factorisation fails exactly when the covariance is not positive definite
    chol, info = torch.linalg.cholesky_ex(cov)
    if int(info) != 0:
        if shrinkage > 0:
            # (1 - s) Sigma + s (tr Sigma / D) I is singular for s > 0 only if tr Sigma = 0
            raise ValueError(f"{func}: the shared covariance is singular even with shrinkage "
                             f"{shrinkage:g}: the features do not vary within the classes "
                             f"(trace {float(torch.trace(cov)):.3g})")
        raise ValueError(f"{func}: the shared covariance is singular ({d} dimensions, "
                         f"{h.shape[0]} examples); pass shrinkage > 0")
    precision = torch.cholesky_inverse(chol)
    return means, precision


def mahalanobis_score(features: torch.Tensor, means: torch.Tensor,
                      precision: torch.Tensor) -> torch.Tensor:
    """Mahalanobis OOD score: minus the smallest squared distance to a class mean.

    ``score(h) = -min_k (h - mu_k)^T Sigma^{-1} (h - mu_k)``, higher = more in-distribution
    (Lee et al. 2018, Sec. 2, without their input preprocessing and layer ensemble).

    Parameters
    ----------
    features : Tensor (N, D), finite.
    means : Tensor (K, D); precision : Tensor (D, D), from :func:`class_gaussians`.

    Returns
    -------
    Tensor (N,) in the dtype of ``features``, <= 0. Computed in float64; in float16 a
    squared distance above 65504 comes back as ``-inf`` (all such inputs tie), so pass
    float16 features as ``features.float()`` where distances can be large.
    """
    func = "mahalanobis_score"
    as_float_tensor(features, "features", func)
    as_float_tensor(means, "means", func)
    as_float_tensor(precision, "precision", func)
    if features.dim() != 2 or means.dim() != 2 or means.shape[1] != features.shape[1]:
        raise ValueError(f"{func}: argument 'means' must have shape (K, D) with D = "
                         f"features.shape[1], got features {tuple(features.shape)} and means "
                         f"{tuple(means.shape)}")
    d = features.shape[1]
    if precision.shape != (d, d):
        raise ValueError(f"{func}: argument 'precision' must have shape ({d}, {d}), got "
                         f"{tuple(precision.shape)}")
    check_finite(features, "features", func)
    check_finite(means, "means", func)
    check_finite(precision, "precision", func)
    h = features.detach().double()
    diff = h[:, None, :] - means.double()[None, :, :]
    dist = torch.einsum("nkd,de,nke->nk", diff, precision.double(), diff)
    # rounding can make a distance of a point at its class mean slightly negative
    return (-dist.clamp(min=0).min(1).values).to(features.dtype)
