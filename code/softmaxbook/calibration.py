"""Calibration and open-set recognition: measuring what a softmax probability means, fixing it
with one temperature, and scoring inputs that belong to none of the classes.

Conventions used by every function here (chosen once for the whole module):

* **Shapes.** Logits and probabilities are ``(N, K)``: ``N`` examples, ``K >= 2`` classes in the
  last dimension. Labels are an integer tensor of shape ``(N,)`` with values in ``[0, K)``.
  Scores for out-of-distribution detection are 1-D float tensors.
* **Probabilities** must be finite, in ``[0, 1]``, and each row must sum to 1 within ``1e-4``
  (``1e-2`` for float16/bfloat16); anything else is an error, not silently renormalised.
* **Top label.** The prediction is ``argmax`` over the classes; a tie goes to the *first* index
  (``torch.argmax``). The confidence is the largest probability of the row.
* **Equal-width bins** (``binning="width"``, Guo et al. 2017): ``M`` bins
  ``B_1 = [0, 1/M], B_m = ((m-1)/M, m/M]`` -- closed on the right, so a confidence of exactly
  ``m/M`` belongs to bin ``m`` and a confidence of 1 to the last bin. "Exactly ``m/M``" means
  equal to ``m/M`` rounded to the dtype of ``probs`` (0.55 with ``M = 20`` is in
  ``(0.50, 0.55]``, in float64 and in float32 alike). (torchmetrics closes its
  bins on the left and gives a confidence of exactly 1 a bin of its own; the two agree whenever
  no confidence lies exactly on an edge.)
* **Equal-mass bins** (``binning="mass"``, Kumar et al. 2019): the confidences sorted in
  increasing order are cut into ``M`` groups of sizes differing by at most one (the first
  ``N mod M`` groups one larger), like ``numpy.array_split`` -- when no two confidences are
  equal. Tied confidences are never split, so with ties the bins are cut greedily from the
  lowest confidence: each bin ends at the end of a run of ties nearest to an equal share of
  the examples left, and never so late that fewer distinct values than bins remain. A bin is
  therefore empty only when there are fewer distinct confidences than bins (then the empty
  bins come last, with zero width at the largest confidence).
* **OOD scores**: a higher score means "more in-distribution". The in-distribution examples are
  the **positive** class unless ``positive="out"`` is asked for. Ties between scores are handled
  exactly: a threshold ``t`` accepts every score ``>= t``, so tied scores move together.
* Randomness comes only from the optional keyword ``generator`` (a ``torch.Generator``);
  results are on the device of the inputs. Internal sums run in float64.

References
----------
* Guo, Pleiss, Sun & Weinberger (2017), *On Calibration of Modern Neural Networks*, ICML
  (reliability diagrams, ECE with 15 equal-width bins, temperature scaling).
* Kumar, Liang & Ma (2019), *Verified Uncertainty Calibration*, NeurIPS (equal-mass bins; the
  debiased estimate of the squared calibration error, after Bröcker 2012 and Ferro & Fricker 2012).
* Hendrycks & Gimpel (2017), *A Baseline for Detecting Misclassified and Out-of-Distribution
  Examples in Neural Networks*, ICLR (maximum softmax probability; AUROC, AUPR-In/Out).
* Liang, Li & Srikant (2018), *Enhancing the Reliability of Out-of-distribution Image Detection in
  Neural Networks* (ODIN), ICLR (temperature 1000, input perturbation; FPR at 95 % TPR,
  detection accuracy).
* Liu, Wang, Owens & Li (2020), *Energy-based Out-of-distribution Detection*, NeurIPS
  (the score ``T logsumexp(f / T)``).
* Lee, Lee, Lee & Shin (2018), *Training Confidence-calibrated Classifiers for Detecting
  Out-of-Distribution Samples*, ICLR (confidence loss, joint GAN training).
* Brier (1950), *Verification of forecasts expressed in terms of probability*.
"""

from __future__ import annotations

import bisect
import math
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from softmaxbook._validate import (
    as_float_tensor,
    check_finite,
    check_generator,
    check_int,
    check_positive_number,
)

__all__ = [
    "ReliabilityBins",
    "reliability_bins",
    "expected_calibration_error",
    "negative_log_likelihood",
    "brier_score",
    "fit_temperature",
    "popular_temperature_recipe",
    "max_softmax_score",
    "energy_score",
    "softmax_entropy",
    "odin_score",
    "ood_metrics",
    "kl_uniform",
    "confidence_loss",
    "train_classifier",
    "train_confidence_gan",
]


# ------------------------------------------------------------------------------------------------
# Argument checks
# ------------------------------------------------------------------------------------------------
def _check_logits(logits, func: str, name: str = "logits") -> torch.Tensor:
    as_float_tensor(logits, name, func)
    if logits.dim() != 2:
        raise ValueError(f"{func}: argument '{name}' must have shape (N, K), got shape "
                         f"{tuple(logits.shape)}")
    if logits.shape[1] < 2:
        raise ValueError(f"{func}: argument '{name}' needs at least 2 classes (K >= 2), got "
                         f"shape {tuple(logits.shape)}")
    check_finite(logits, name, func)
    return logits


def _check_probs(probs, func: str) -> torch.Tensor:
    as_float_tensor(probs, "probs", func)
    if probs.dim() != 2:
        raise ValueError(f"{func}: argument 'probs' must have shape (N, K), got shape "
                         f"{tuple(probs.shape)}")
    if probs.shape[1] < 2:
        raise ValueError(f"{func}: argument 'probs' needs at least 2 classes (K >= 2), got "
                         f"shape {tuple(probs.shape)}")
    # one pass finds NaN, +-inf and values outside [0, 1] (min and max propagate NaN, and NaN
    # fails both comparisons); the slower diagnosis runs only when something is wrong
    lo, hi = torch.aminmax(probs)
    if not (bool(lo >= 0) and bool(hi <= 1)):
        check_finite(probs, "probs", func)
        raise ValueError(f"{func}: argument 'probs' must lie in [0, 1], got values in "
                         f"[{probs.min().item():.4g}, {probs.max().item():.4g}]")
    tol = 1e-2 if probs.dtype in (torch.float16, torch.bfloat16) else 1e-4
    # a float32 sum of K numbers in [0, 1] is off by ~K * 6e-8, far below the tolerance
    wide = probs.dtype in (torch.float32, torch.float64)
    # the row sums as a matrix-vector product: BLAS does it ~1.7x faster than sum(1) for the
    # short rows of a classifier (K = 10: 3.4 ms against 5.7 ms for 10^6 rows)
    ones = torch.ones(probs.shape[1], dtype=torch.float32, device=probs.device)
    sums = probs @ ones.to(probs.dtype) if wide else probs.float() @ ones
    bad = (sums - 1).abs() > tol
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise ValueError(f"{func}: argument 'probs' must have rows that sum to 1, but row {i} "
                         f"sums to {sums[i].item():.6g}; pass softmax(logits), not the logits")
    return probs


def _check_labels(labels, n: int, k: int, func: str) -> torch.Tensor:
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"{func}: argument 'labels' must be a torch.Tensor, got "
                        f"{type(labels).__name__}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TypeError(f"{func}: argument 'labels' must have an integer dtype, got "
                        f"{labels.dtype}")
    if labels.shape != (n,):
        raise ValueError(f"{func}: argument 'labels' must have shape ({n},), one label per row, "
                         f"got shape {tuple(labels.shape)}")
    if n and (bool((labels < 0).any()) or bool((labels >= k).any())):
        raise ValueError(f"{func}: argument 'labels' must lie in [0, {k}) for {k} classes, got "
                         f"values in [{int(labels.min())}, {int(labels.max())}]")
    return labels.long()


def _check_choice(value, options, name: str, func: str):
    if value not in options:
        raise ValueError(f"{func}: argument '{name}' must be one of {options}, got {value!r}")
    return value


def _check_scores(scores, name: str, func: str) -> torch.Tensor:
    as_float_tensor(scores, name, func)
    if scores.dim() != 1:
        raise ValueError(f"{func}: argument '{name}' must be 1-D, got shape "
                         f"{tuple(scores.shape)}")
    check_finite(scores, name, func)
    return scores


# ------------------------------------------------------------------------------------------------
# Reliability diagram and calibration error
# ------------------------------------------------------------------------------------------------
class ReliabilityBins(NamedTuple):
    """Per-bin data of a reliability diagram (all 1-D tensors of length ``n_bins``, float64).

    ``confidence``: mean top-label confidence in the bin (NaN for an empty bin);
    ``accuracy``: fraction of correct top labels in the bin (NaN for an empty bin);
    ``count``: number of examples in the bin; ``edges``: ``n_bins + 1`` bin edges (for
    ``binning="mass"`` the edges are the smallest confidence of each bin and, last, the largest
    confidence; never NaN: a bin left empty, which happens only with fewer distinct
    confidences than bins, has zero width at the largest confidence).
    """

    confidence: torch.Tensor
    accuracy: torch.Tensor
    count: torch.Tensor
    edges: torch.Tensor


def _width_edges(n_bins: int, dtype: torch.dtype, device) -> torch.Tensor:
    """The edges ``m / M`` (m = 0..M) as the float64 numbers that ``m / M`` rounds to.

    ``torch.linspace(0, 1, M + 1)`` does not give them: ``linspace(0, 1, 21)[11]`` is
    0.5499999999999999, one ulp below 0.55, which put a confidence of 0.55 into (0.55, 0.60].
    ``arange(M + 1) / M`` divides exact integers, so each edge is ``m / M`` correctly rounded.
    """
    return torch.arange(n_bins + 1, dtype=torch.float64, device=device).div_(n_bins)


# Up to this many equal-width bins, _width_index computes the bin by arithmetic; beyond it (or
# for float16/bfloat16 confidences, whose rounded edges lie far from m / M) bucketize's binary
# search is used.
_FAST_BINS = 4096


def _width_index(conf: torch.Tensor, cut: torch.Tensor, n_bins: int) -> torch.Tensor:
    """The m - 1 with ``cut[m-1] < c <= cut[m]`` (clamped to [0, M-1]), as bucketize gives it.

    ``cut`` holds the edges m / M as the confidences' dtype rounds them. For the exact edges
    the index is ``ceil(c M) - 1``. With float32 confidences ``c M`` is exact in float64 (24 + 12
    bits), and a rounded edge can only move a confidence down a bin: ``fl(m/M) < c`` implies
    ``m/M < c`` (rounding is monotone), and the converse fails only for ``c = fl(m/M) > m/M``,
    the float32 number the edge itself rounds to. So one equality test against the edge of the
    estimated bin corrects it. With float64 confidences ``c M`` is rounded, and may cross an
    integer either way; one comparison with each neighbouring edge corrects it (the rounding,
    ~1e-16 M, is far below a bin's width 1/M). A table lookup and a comparison or two cost
    ~3x less than bucketize's binary search.
    """
    c = conf.double()
    k = torch.mul(c, n_bins).ceil_().sub_(1).clamp_(0, n_bins - 1).long()
    if conf.dtype == torch.float32:
        # c equal to its bin's lower edge belongs to the bin below; the first bin is closed
        # at 0 (its "edge" is set to -1, which no confidence equals)
        low = cut.float()[:-1].clone()
        low[0] = -1.0
        return k.sub_((torch.take(low, k) == conf).long()).clamp_(min=0)
    below = cut[:-1].clone()          # below[m] = cut[m], -inf for the first bin
    below[0] = -math.inf
    above = cut[1:].clone()           # above[m] = cut[m+1], +inf for the last bin
    above[-1] = math.inf
    return k.sub_((c <= torch.take(below, k)).long()).add_(
        (c > torch.take(above, k)).long())


def _bin_index(conf: torch.Tensor, n_bins: int, binning: str) -> tuple[torch.Tensor, torch.Tensor]:
    n = conf.numel()
    if binning == "width":
        edges = _width_edges(n_bins, conf.dtype, conf.device)
        # the edges as the learner's dtype writes m / M: a float32 confidence equal to
        # float32(0.55) sits on the edge 0.55 (in float64 it would be 1.2e-8 above it).
        # Rounding to float32 and back is exact and monotone, so the comparison is exact.
        cut = edges.to(conf.dtype).double()
        if conf.dtype in (torch.float32, torch.float64) and n_bins <= _FAST_BINS:
            return _width_index(conf, cut, n_bins), edges
        # right-closed bins ((m-1)/M, m/M]: bucketize with right=False returns the m with
        # cut[m-1] < c <= cut[m]; c = 0 gives 0, which joins the first bin [0, 1/M].
        idx = torch.bucketize(conf.double(), cut, right=False).sub_(1).clamp_(0, n_bins - 1)
        return idx, edges
    conf = conf.double()
    values, order = torch.sort(conf, stable=True)
    # ends of the runs of tied values in sorted order (exclusive); a bin may end only there
    run_ends = (torch.nonzero(values[1:] != values[:-1]).squeeze(1) + 1).tolist() + [n]
    n_runs = len(run_ends)
    # Greedy from the lowest confidences: each bin ends at the run end nearest to an equal
    # share of what is left, ceil(left / bins left) -- exactly numpy.array_split when there are
    # no ties -- but never so late that fewer runs than bins remain, so that no bin is empty
    # unless there are fewer distinct confidences than bins. (Cutting the array_split
    # positions and moving each cut to a run end instead emptied every bin whose cuts fell
    # in one long run of ties, e.g. the many confidences of exactly 1.0 of a float32 model.)
    ends = []
    start, first_run = 0, 0
    for bins_left in range(n_bins, 0, -1):
        if start == n:
            break
        if bins_left == 1:
            k = n_runs - 1
        else:
            last_ok = n_runs - 1 - min(bins_left - 1, n_runs - 1 - first_run)
            target = start + -(-(n - start) // bins_left)
            k = bisect.bisect_left(run_ends, target, first_run, last_ok + 1)
            # the run end just below the target, if it is nearer (a tie goes up)
            if k > last_ok or (k > first_run
                               and target - run_ends[k - 1] < run_ends[k] - target):
                k -= 1
        ends.append(run_ends[k])
        start, first_run = run_ends[k], k + 1
    starts = [0] + ends[:-1]
    sizes = torch.tensor([b - a for a, b in zip(starts, ends)], device=conf.device)
    by_rank = torch.repeat_interleave(torch.arange(len(ends), device=conf.device), sizes)
    idx = torch.empty_like(by_rank)
    idx[order] = by_rank
    # edges: the smallest confidence of each bin, then the largest confidence; bins left
    # empty (fewer distinct confidences than bins) come last, with zero width at the top
    lows = values[torch.tensor(starts, dtype=torch.long, device=conf.device)] if n else values
    top = values[-1:] if n else torch.zeros(1, dtype=torch.float64, device=conf.device)
    edges = torch.cat([lows, top.expand(n_bins + 1 - len(ends))])
    return idx, edges


def reliability_bins(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15, *,
                     binning: str = "width") -> ReliabilityBins:
    """Bin the top-label confidences and return what a reliability diagram draws.

    Parameters
    ----------
    probs : Tensor (N, K)
        Predicted probabilities (rows sum to 1).
    labels : integer Tensor (N,)
        True classes in ``[0, K)``.
    n_bins : int, default 15
        Number of bins ``M`` (Guo et al. 2017 use 15).
    binning : {"width", "mass"}
        Equal-width bins ``((m-1)/M, m/M]`` (first bin closed at 0), or equal-mass bins (sorted
        confidences cut into ``M`` groups of nearly equal size, ties kept together); see the
        module docstring.

    Returns
    -------
    ReliabilityBins
        ``confidence``, ``accuracy`` (NaN in empty bins), ``count``, ``edges``; float64.
    """
    func = "reliability_bins"
    _check_probs(probs, func)
    labels = _check_labels(labels, probs.shape[0], probs.shape[1], func)
    n_bins = check_int(n_bins, "n_bins", func, minimum=1)
    _check_choice(binning, ("width", "mass"), "binning", func)
    return _reliability(probs, labels, n_bins, binning)


def _top_label(probs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The top probability of each row and whether ``labels`` is the top class, as
    ``probs.max(1)`` decides it (the first of tied maxima).

    ``max(1)`` with its indices costs ~3x ``amax(1)`` on CPU for short rows. Here the label is
    right where its probability equals the row's maximum, unless an earlier class ties it; the
    tie is looked for only in those rows, and only where the maximum is small enough to be
    shared. The rows must sum to 1 within 1e-2 (as ``_check_probs`` ensures).
    """
    conf = probs.amax(1)
    hit = probs.gather(1, labels.unsqueeze(1)).squeeze(1) == conf
    # Two classes can share the maximum only where it is at most about 1/2: the rows sum to 1
    # within 1e-2 (_check_probs' widest tolerance, float16), so a tie has 2 conf <= 1.01. A
    # confident model's right answers mostly lie above that and skip the search for a tie.
    rows = (hit & (conf <= 0.51)).nonzero().squeeze(1)
    if rows.numel():
        # rows where another class ties the label's (maximal) probability: the row's
        # maximum without the label (set to -1, below every probability) still reaches it
        lab = labels.index_select(0, rows).unsqueeze(1)
        top = conf.index_select(0, rows)
        sub = probs.index_select(0, rows).scatter_(1, lab, -1.0)
        tied = (sub.amax(1) == top).nonzero().squeeze(1)
        if tied.numel():
            # the first-index rule decides against the label only if the tie is earlier
            cols = torch.arange(probs.shape[1], device=probs.device)
            earlier = ((cols < lab[tied])
                       & (sub[tied] == top[tied].unsqueeze(1))).any(1)
            hit[rows[tied[earlier]]] = False
    return conf, hit


def _reliability(probs, labels, n_bins, binning) -> ReliabilityBins:
    conf, correct = _top_label(probs.detach(), labels)
    # the bins are decided in the dtype of probs (see _bin_index); only the N confidences go
    # to float64 for the sums over bins, not the N x K table
    idx, edges = _bin_index(conf, n_bins, binning)
    conf = conf.double()
    # bincount sums in float64 (exact for counts below 2^53); one call per sum
    count = torch.bincount(idx, minlength=n_bins).double()
    csum = torch.bincount(idx, weights=conf, minlength=n_bins)
    asum = torch.bincount(idx, weights=correct.double(), minlength=n_bins)
    # 0 / 0 = NaN marks an empty bin
    return ReliabilityBins(csum / count, asum / count, count, edges)


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15, *,
                               binning: str = "width", norm: str = "l1",
                               debias: bool = False) -> torch.Tensor:
    """Top-label calibration error of ``probs`` against ``labels``, estimated with bins.

    With ``n_m`` examples in bin ``m`` (out of ``N``), mean confidence ``conf_m`` and accuracy
    ``acc_m``::

        norm="l1"  (ECE):   sum_m (n_m / N) |acc_m - conf_m|
        norm="l2"  (RMSCE): sqrt( sum_m (n_m / N) (acc_m - conf_m)^2 )
        norm="max" (MCE):   max over non-empty bins of |acc_m - conf_m|

    These are *plug-in* estimates: even a perfectly calibrated model gets a positive value,
    about ``sqrt(acc (1 - acc) / n_m)`` per bin, because ``acc_m`` is a noisy mean.
    ``debias=True`` (only with ``norm="l2"``) subtracts that noise from the square before the
    root, per bin ``(acc_m - conf_m)^2 - acc_m (1 - acc_m) / (n_m - 1)`` (bins with one example
    keep their plug-in term), and returns ``sqrt(max(0, sum))`` -- Kumar et al. (2019), Sec. 5,
    the same as torchmetrics' internal ``debias`` option.

    Parameters
    ----------
    probs : Tensor (N, K)
        Predicted probabilities (rows sum to 1; pass ``softmax(logits)``).
    labels : integer Tensor (N,)
    n_bins : int, default 15
    binning : {"width", "mass"}
        See :func:`reliability_bins` and the module docstring for the bin edges.
    norm : {"l1", "l2", "max"}
    debias : bool, default False

    Returns
    -------
    0-d Tensor in the dtype of ``probs``, in ``[0, 1]``.

    References
    ----------
    Guo et al. (2017), eq. 3 (ECE) and the MCE; Naeini et al. (2015); Kumar et al. (2019).
    """
    func = "expected_calibration_error"
    _check_probs(probs, func)
    labels = _check_labels(labels, probs.shape[0], probs.shape[1], func)
    n_bins = check_int(n_bins, "n_bins", func, minimum=1)
    _check_choice(binning, ("width", "mass"), "binning", func)
    _check_choice(norm, ("l1", "l2", "max"), "norm", func)
    if not isinstance(debias, bool):
        raise TypeError(f"{func}: argument 'debias' must be a bool, got {type(debias).__name__}")
    if debias and norm != "l2":
        raise ValueError(f"{func}: argument 'debias'=True needs norm='l2' (the debiased "
                         f"estimate is of the squared error, Kumar et al. 2019), got "
                         f"norm={norm!r}")
    b = _reliability(probs, labels, n_bins, binning)
    full = b.count > 0
    gap = (b.accuracy[full] - b.confidence[full])
    w = b.count[full] / b.count.sum()
    if norm == "l1":
        out = (w * gap.abs()).sum()
    elif norm == "max":
        out = gap.abs().max()
    else:
        sq = gap.square()
        if debias:
            n_m = b.count[full]
            acc = b.accuracy[full]
            # unbiased for E[acc_m] - conf_m squared: the plug-in square overshoots by the
            # variance of acc_m, estimated without bias by acc (1 - acc) / (n_m - 1)
            var = torch.where(n_m > 1, acc * (1 - acc) / (n_m - 1).clamp(min=1),
                              torch.zeros_like(acc))
            sq = sq - var
        out = (w * sq).sum().clamp(min=0).sqrt()
    return out.to(probs.dtype)


def negative_log_likelihood(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood (cross entropy, nats) of ``labels`` under softmax(logits).

    Parameters
    ----------
    logits : Tensor (N, K), finite.
    labels : integer Tensor (N,).

    Returns
    -------
    0-d Tensor in the dtype of ``logits``; differentiable. Computed with ``log_softmax``, so
    huge logits do not overflow.
    """
    func = "negative_log_likelihood"
    _check_logits(logits, func)
    labels = _check_labels(labels, logits.shape[0], logits.shape[1], func)
    return F.cross_entropy(logits, labels)


def brier_score(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Multi-class Brier score: ``mean_i sum_k (p_ik - [k = y_i])^2`` (Brier 1950), in [0, 2].

    Parameters
    ----------
    probs : Tensor (N, K), rows summing to 1.
    labels : integer Tensor (N,).

    Returns
    -------
    0-d Tensor in the dtype of ``probs``.
    """
    func = "brier_score"
    _check_probs(probs, func)
    labels = _check_labels(labels, probs.shape[0], probs.shape[1], func)
    onehot = F.one_hot(labels, probs.shape[1]).to(probs.dtype)
    return (probs - onehot).square().sum(1).mean()


# ------------------------------------------------------------------------------------------------
# Temperature scaling
# ------------------------------------------------------------------------------------------------
def _nll_derivatives(d: torch.Tensor, dy: torch.Tensor, beta: float, buf: torch.Tensor):
    """NLL(beta), dNLL/dbeta, d2NLL/dbeta2 of softmax(beta z), given ``d = z - max_k z`` and
    ``dy = z_y - max_k z`` (float64, no checks).

    Shifting every row by its largest logit changes neither the softmax nor the derivatives
    (only the NLL, by ``beta * max``, which cancels against ``z_y``), and since ``beta d <= 0``
    the exponentials cannot overflow: no max pass per evaluation. With ``d`` the variance is
    ``E[d^2] - E[d]^2``; when ``p`` is peaked on the top class both terms are small and
    ``E[d]^2 <= (1 - p_top) E[d^2]`` (Cauchy-Schwarz), so the difference does not cancel.
    ``buf`` (shape of ``d``) is reused by every call: a fresh allocation of that size costs as
    much as the arithmetic.
    """
    e = torch.mul(d, beta, out=buf).exp_()
    total = e.sum(1)
    ed = e.mul_(d)
    m1 = ed.sum(1).div_(total)
    m2 = ed.mul_(d).sum(1).div_(total)
    nll = (total.log() - beta * dy).mean().item()
    return nll, (m1 - dy).mean().item(), (m2 - m1.square()).clamp_(min=0).mean().item()


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, *, rtol: float = 1e-10,
                    max_iter: int = 200) -> torch.Tensor:
    """The temperature ``T* > 0`` that minimises the NLL of ``softmax(logits / T)`` -- exactly.

    The NLL is convex in the inverse temperature ``beta = 1 / T``: it is a mean of
    ``logsumexp(beta z_i) - beta z_{i, y_i}``, whose second derivative is the variance of the
    logits under ``softmax(beta z_i)``, never negative. So the optimum is the one root of
    ``mean_i (E_{softmax(beta z_i)}[z_i] - z_{i, y_i}) = 0``, found here by Newton's method in
    ``beta`` inside a bracket that shrinks at every step (a bisection step whenever Newton would
    leave it), in float64. The result is the global minimum (to ``rtol`` in ``beta``, far
    below the ``1e-6`` asked for), so it is never worse than ``T = 1``.

    (In ``T`` the NLL is *not* convex: the popular recipe that runs LBFGS on ``T`` itself, see
    :func:`popular_temperature_recipe`, can stall or leave ``T > 0``.)

    Parameters
    ----------
    logits : Tensor (N, K)
        Finite logits of a held-out (validation) set.
    labels : integer Tensor (N,)
    rtol : float, default 1e-10
        Relative tolerance on ``beta``.
    max_iter : int, default 200

    Returns
    -------
    0-d Tensor ``T*`` in the dtype of ``logits``.

    Raises
    ------
    ValueError
        When there is no finite optimum. If every label is already the top-scoring class (the
        data are separable), the NLL keeps falling as ``T -> 0``. If the labels score no better
        than the average logit, it keeps falling as ``T -> infinity`` (uniform predictions).
        The message says which.

    References
    ----------
    Guo et al. (2017), Sec. 4.2 (temperature scaling, fitted by NLL on the validation set).
    """
    func = "fit_temperature"
    _check_logits(logits, func)
    labels = _check_labels(labels, logits.shape[0], logits.shape[1], func)
    rtol = check_positive_number(rtol, "rtol", func)
    max_iter = check_int(max_iter, "max_iter", func, minimum=1)
    z = logits.detach().double()
    zy = z.gather(1, labels[:, None]).squeeze(1)
    zmax = z.max(1).values
    # slope at beta = 0 (T = infinity): mean_k z_ik - z_iy averaged over i
    g0 = (z.mean(1) - zy).mean().item()
    if g0 >= 0:
        raise ValueError(
            f"{func}: the labels score no higher than the average logit (slope of the NLL at "
            f"T = infinity is {g0:.3g} >= 0), so the NLL decreases all the way to T -> infinity "
            "(uniform predictions); no finite temperature is optimal")
    # slope as beta -> infinity: mean_i (max_k z_ik - z_iy) >= 0; it is 0 iff every label is
    # a top-scoring class, and then the NLL falls for ever as T -> 0
    ginf = (zmax - zy).mean().item()
    if ginf <= 0:
        raise ValueError(
            f"{func}: every label is the top-scoring class (the data are separable), so the NLL "
            "keeps decreasing as T -> 0; no finite temperature is optimal (use held-out data "
            "the model makes mistakes on)")
    d = z - zmax[:, None]
    dy = zy - zmax
    del z
    # Newton in beta from beta = 1 inside a bracket [lo, hi] that always holds the root:
    # g(lo) < 0 <= g(hi), with hi = infinity until a point with g >= 0 is seen
    lo, hi = 0.0, math.inf
    beta = 1.0
    buf = torch.empty_like(d)
    for _ in range(max_iter):
        _, g, h = _nll_derivatives(d, dy, beta, buf)
        if g == 0:
            break
        if g < 0:
            lo = beta
        else:
            hi = beta
        step = beta - g / h if h > 0 else math.nan
        if math.isinf(hi):
            # no upper end seen yet: Newton, but at most 4x further (where p is nearly
            # one-hot, h is tiny and the step would overshoot by orders of magnitude)
            # (g < 0 here, so a Newton step never goes down; NaN when h = 0)
            new = 4.0 * beta if math.isnan(step) else min(step, 4.0 * beta)
        elif lo < step < hi:
            new = step
        elif lo > 0 and hi > 4.0 * lo:
            # bisect in log beta: a wide bracket shrinks by orders of magnitude per step
            new = math.sqrt(lo * hi)
        else:
            new = 0.5 * (lo + hi)
        if abs(new - beta) <= rtol * new or (hi - lo <= rtol * hi < math.inf):
            beta = new
            break
        beta = new
    return torch.tensor(1.0 / beta, dtype=logits.dtype, device=logits.device)


def popular_temperature_recipe(logits: torch.Tensor, labels: torch.Tensor, *,
                               init: float = 1.5, lr: float = 0.01,
                               max_iter: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    """The widely copied temperature-scaling recipe, reproduced to study where it goes wrong.

    One call of ``torch.optim.LBFGS([T], lr=0.01, max_iter=50)`` on the NLL of
    ``softmax(logits / T)``, starting from ``T = 1.5``, with no line search and nothing keeping
    ``T > 0`` -- as in the temperature-scaling code released with Guo et al. (2017) and copied
    into many projects. It is here so that the book can run it beside :func:`fit_temperature`;
    do not use it to calibrate a model.

    Parameters
    ----------
    logits : Tensor (N, K), labels : integer Tensor (N,)
    init, lr : float; max_iter : int
        The recipe's settings (defaults are the popular ones).

    Returns
    -------
    (T, path) : 0-d Tensor and 1-D Tensor (float64)
        The final ``T`` (which may be negative) and every ``T`` at which the NLL was evaluated.
    """
    func = "popular_temperature_recipe"
    _check_logits(logits, func)
    labels = _check_labels(labels, logits.shape[0], logits.shape[1], func)
    init = check_positive_number(init, "init", func)
    lr = check_positive_number(lr, "lr", func)
    max_iter = check_int(max_iter, "max_iter", func, minimum=1)
    z = logits.detach().double()
    temperature = torch.nn.Parameter(torch.full((1,), init, dtype=torch.float64))
    opt = torch.optim.LBFGS([temperature], lr=lr, max_iter=max_iter)
    path = []

    def closure():
        opt.zero_grad()
        path.append(temperature.item())
        loss = F.cross_entropy(z / temperature, labels)
        loss.backward()
        return loss

    opt.step(closure)
    return (temperature.detach()[0].to(logits.dtype),
            torch.tensor(path, dtype=torch.float64))


# ------------------------------------------------------------------------------------------------
# Scores for out-of-distribution detection (higher = more in-distribution)
# ------------------------------------------------------------------------------------------------
def max_softmax_score(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Maximum softmax probability ``max_k softmax(logits / T)_k`` (Hendrycks & Gimpel 2017).

    Parameters
    ----------
    logits : Tensor (N, K), finite.
    temperature : float > 0, default 1.

    Returns
    -------
    Tensor (N,) in ``[1/K, 1]``; higher = more in-distribution.
    """
    func = "max_softmax_score"
    _check_logits(logits, func)
    t = check_positive_number(temperature, "temperature", func)
    return torch.softmax(logits / t, 1).max(1).values


def energy_score(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Negative free energy ``T * logsumexp(logits / T)`` (Liu et al. 2020, eq. 7 with the sign
    flipped, so that higher = more in-distribution).

    Parameters
    ----------
    logits : Tensor (N, K), finite.
    temperature : float > 0, default 1.

    Returns
    -------
    Tensor (N,). Unlike the softmax it is not shift-invariant: adding ``c`` to every logit of a
    row adds ``c`` to its score, which is what lets it see "far from every class".
    """
    func = "energy_score"
    _check_logits(logits, func)
    t = check_positive_number(temperature, "temperature", func)
    return t * torch.logsumexp(logits / t, 1)


def softmax_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of ``softmax(logits)`` per row, in ``[0, log K]``.

    As an OOD score use its negative (higher = more in-distribution). Computed from
    ``log_softmax``, so rows with huge logits give 0, not NaN.
    """
    func = "softmax_entropy"
    _check_logits(logits, func)
    logp = torch.log_softmax(logits, 1)
    # p log p with p = 0 is 0: exp(-inf) * -inf would be NaN, so mask it
    return -(logp.exp() * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(1)


def odin_score(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, *,
               temperature: float = 1000.0, epsilon: float = 0.0014) -> torch.Tensor:
    """ODIN's score (Liang et al. 2018): perturb the input, then take the tempered MSP.

    ``x~ = x - epsilon * sign(-grad_x log S_yhat(x; T))`` with ``S(x; T) = softmax(f(x) / T)``
    and ``yhat`` the predicted class: a small step that *raises* the top softmax score (it rises
    more for in-distribution inputs), then the score ``max_k S_k(x~; T)``.

    Parameters
    ----------
    model : callable
        ``model(x)`` returns logits ``(N, K)``; differentiable in ``x``. Its parameters get no
        gradient (they are not touched). A ``torch.nn.Module`` is run in eval mode (dropout
        off, batch norm on running statistics) and left in the mode it came in.
    x : Tensor (N, ...)
        Inputs.
    temperature : float > 0, default 1000 (Liang et al.)
    epsilon : float >= 0, default 0.0014 (their choice for CIFAR-10 DenseNet; tune it on
        held-out in-distribution data, in the units of ``x``).

    Returns
    -------
    Tensor (N,), detached; higher = more in-distribution.
    """
    func = "odin_score"
    if not callable(model):
        raise TypeError(f"{func}: argument 'model' must be callable, got {type(model).__name__}")
    as_float_tensor(x, "x", func)
    check_finite(x, "x", func)
    t = check_positive_number(temperature, "temperature", func)
    eps = check_positive_number(epsilon, "epsilon", func, allow_zero=True)
    # A score is a prediction: dropout off, batch norm on its running statistics. In training
    # mode dropout made the score random and the gradient that of another network. The mode of
    # every submodule is restored afterwards, as it was (some may have been in eval already).
    modes = ([(m, m.training) for m in model.modules()]
             if isinstance(model, torch.nn.Module) else [])
    if modes:
        model.eval()
    try:
        with torch.enable_grad():
            xg = x.detach().clone().requires_grad_(True)
            logits = model(xg)
            _check_logits(logits, func, "model(x)")
            logp = torch.log_softmax(logits / t, 1)
            top = logp.max(1).values
            (grad,) = torch.autograd.grad(top.sum(), xg)
        with torch.no_grad():
            # x - eps * sign(-grad log S) = x + eps * sign(grad log S)
            x_pert = x.detach() + eps * grad.sign()
            return torch.softmax(model(x_pert) / t, 1).max(1).values
    finally:
        for m, mode in modes:
            m.training = mode


def _curve(scores_pos: torch.Tensor, scores_neg: torch.Tensor):
    """Cumulative true/false positives at each distinct threshold, highest threshold first."""
    s = torch.cat([scores_pos.double(), scores_neg.double()])
    is_pos = torch.cat([torch.ones(scores_pos.numel(), dtype=torch.float64),
                        torch.zeros(scores_neg.numel(), dtype=torch.float64)]).to(s.device)
    s, order = torch.sort(s, descending=True, stable=True)
    is_pos = is_pos[order]
    tps = torch.cumsum(is_pos, 0)
    fps = torch.cumsum(1 - is_pos, 0)
    # a threshold accepts every score >= it: keep the last position of each run of ties
    last = torch.ones_like(s, dtype=torch.bool)
    last[:-1] = s[1:] != s[:-1]
    return tps[last], fps[last], s[last]


def _metrics_one_way(pos: torch.Tensor, neg: torch.Tensor) -> dict:
    tps, fps, _ = _curve(pos, neg)
    n_pos, n_neg = float(pos.numel()), float(neg.numel())
    tpr = torch.cat([tps.new_zeros(1), tps / n_pos])
    fpr = torch.cat([fps.new_zeros(1), fps / n_neg])
    auroc = torch.trapezoid(tpr, fpr).item()
    precision = tps / (tps + fps)
    recall_steps = torch.diff(tpr)
    # average precision as scikit-learn defines it: sum_n (R_n - R_{n-1}) P_n
    ap = (recall_steps * precision).sum().item()
    # FPR at the largest threshold whose TPR reaches 95 % (exact: no interpolation)
    k = int(torch.searchsorted(tpr, torch.tensor(0.95, dtype=torch.float64), right=False))
    fpr95 = fpr[k].item()
    # detection accuracy: 1 - min over thresholds of (1 - TPR)/2 + FPR/2 (Liang et al. 2018)
    det = (1 - (0.5 * (1 - tpr) + 0.5 * fpr).min()).item()
    return dict(auroc=auroc, aupr=ap, fpr_at_95_tpr=fpr95, detection_accuracy=det)


def ood_metrics(scores_in: torch.Tensor, scores_out: torch.Tensor, *,
                positive: str = "in") -> dict:
    """Threshold-free and 95 %-TPR metrics of separating in- from out-of-distribution scores.

    Convention: a **higher score means more in-distribution**; a threshold ``t`` accepts (calls
    "in") every score ``>= t``; ties are exact (tied scores are accepted together).

    Returns a dict of Python floats:

    * ``auroc``: area under the ROC curve, ``P(s_in > s_out) + P(s_in = s_out) / 2``, computed
      from the ROC curve of the chosen positive class; the same (to rounding, ~1e-16) whichever
      class is positive. Equals ``sklearn.metrics.roc_auc_score``.
    * ``aupr_in``: average precision with in-distribution positive (scores as given);
      ``aupr_out``: with out-of-distribution positive (scores negated). Both equal
      ``sklearn.metrics.average_precision_score`` (the step sum ``sum_n (R_n - R_{n-1}) P_n``,
      no interpolation).
    * ``fpr_at_95_tpr``: the false-positive rate at the largest threshold at which the
      true-positive rate is at least 95 %. With ``positive="in"`` (default, Liang et al. 2018):
      the fraction of OOD inputs accepted when 95 % of in-distribution inputs are; with
      ``positive="out"``: the fraction of in-distribution inputs rejected when 95 % of OOD
      inputs are. The two differ -- report which one you use.
    * ``detection_accuracy``: ``1 - min_t [ (1 - TPR(t)) / 2 + FPR(t) / 2 ]`` (equal priors), for
      the same positive class.

    Parameters
    ----------
    scores_in, scores_out : 1-D Tensors, finite, not empty.
    positive : {"in", "out"}, default "in".
    """
    func = "ood_metrics"
    _check_scores(scores_in, "scores_in", func)
    _check_scores(scores_out, "scores_out", func)
    _check_choice(positive, ("in", "out"), "positive", func)
    s_in, s_out = scores_in.detach(), scores_out.detach().to(scores_in.device)
    m_in = _metrics_one_way(s_in, s_out)
    m_out = _metrics_one_way(-s_out, -s_in)
    chosen = m_in if positive == "in" else m_out
    # the AUROC of the chosen positive class, computed from its own ROC curve: the two agree
    # (to rounding) because P(s_in > s_out) + P(tie)/2 is symmetric, and comparing them
    # checks the curve code (returning m_in's whatever `positive` made that comparison empty)
    return dict(auroc=chosen["auroc"], aupr_in=m_in["aupr"], aupr_out=m_out["aupr"],
                fpr_at_95_tpr=chosen["fpr_at_95_tpr"],
                detection_accuracy=chosen["detection_accuracy"])


# ------------------------------------------------------------------------------------------------
# Confidence loss (Lee et al. 2018)
# ------------------------------------------------------------------------------------------------
def kl_uniform(logits: torch.Tensor) -> torch.Tensor:
    """``KL(U || softmax(logits))`` per row, with ``U`` uniform over the ``K`` classes.

    ``KL(U || p) = sum_k (1/K) log((1/K) / p_k) = -log K - mean_k log p_k``, computed from
    ``log_softmax``: finite for any finite logits (a naive ``log(softmax)`` gives ``-inf`` once a
    probability underflows). Zero exactly when ``p`` is uniform.

    Returns
    -------
    Tensor (N,) >= 0; differentiable.
    """
    func = "kl_uniform"
    _check_logits(logits, func)
    k = logits.shape[1]
    # half precision: log_softmax's z - logsumexp(z) overflows to -inf once the logits spread
    # over more than 65504 (float16 [6e4, -6e4]: -1.2e5), though the KL itself (6e4) is
    # representable; compute in float32 and round once at the end (R3 review)
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    return (-math.log(k) - torch.log_softmax(z, 1).mean(1)).to(logits.dtype)


def confidence_loss(logits_in: torch.Tensor, labels: torch.Tensor, logits_out: torch.Tensor,
                    beta: float) -> torch.Tensor:
    """Lee et al. (2018), eq. 1: ``mean CE(logits_in, labels) + beta * mean KL(U || p_out)``.

    The first term makes in-distribution predictions right and confident; the second pushes the
    predictions on the out batch towards uniform (high entropy).

    Parameters
    ----------
    logits_in : Tensor (N, K); labels : integer Tensor (N,)
    logits_out : Tensor (M, K), the classifier's logits on out-of-distribution inputs.
    beta : float >= 0 (Lee et al. use values around 0.1-1).

    Returns
    -------
    0-d Tensor; differentiable; finite for any finite logits (both terms use ``log_softmax``).
    """
    func = "confidence_loss"
    _check_logits(logits_in, func, "logits_in")
    labels = _check_labels(labels, logits_in.shape[0], logits_in.shape[1], func)
    _check_logits(logits_out, func, "logits_out")
    if logits_out.shape[1] != logits_in.shape[1]:
        raise ValueError(f"{func}: argument 'logits_out' has {logits_out.shape[1]} classes but "
                         f"'logits_in' has {logits_in.shape[1]}")
    beta = check_positive_number(beta, "beta", func, allow_zero=True)
    ce = F.cross_entropy(logits_in, labels)
    k = logits_out.shape[1]
    kl = -math.log(k) - torch.log_softmax(logits_out, 1).mean(1)
    return ce + beta * kl.mean()


# ------------------------------------------------------------------------------------------------
# Training routines (small, for the book's experiments)
# ------------------------------------------------------------------------------------------------
def _check_module(m, name: str, func: str):
    if not isinstance(m, torch.nn.Module):
        raise TypeError(f"{func}: argument '{name}' must be a torch.nn.Module, got "
                        f"{type(m).__name__}")


def _check_xy(x, y, func: str):
    as_float_tensor(x, "x", func)
    check_finite(x, "x", func)
    if not isinstance(y, torch.Tensor) or y.is_floating_point() or y.dtype == torch.bool:
        raise TypeError(f"{func}: argument 'y' must be an integer torch.Tensor, got "
                        f"{getattr(y, 'dtype', type(y).__name__)}")
    if y.shape != (x.shape[0],):
        raise ValueError(f"{func}: argument 'y' must have shape ({x.shape[0]},), got "
                         f"{tuple(y.shape)}")
    if bool((y < 0).any()):
        raise ValueError(f"{func}: argument 'y' must be >= 0, got min {int(y.min())}")


def train_classifier(classifier: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *,
                     steps: int = 500, batch_size: int = 64, lr: float = 1e-2,
                     weight_decay: float = 0.0, x_out=None, beta: float = 0.0,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Train ``classifier`` in place with Adam on minibatches, optionally with the confidence
    loss.

    Each step draws a batch of ``batch_size`` indices with replacement from ``generator``, and
    minimises the cross entropy; if ``x_out`` is given, :func:`confidence_loss` with an out
    batch of the same size: ``x_out`` is either a tensor of out-of-distribution inputs (a batch
    is drawn from it) or a callable ``x_out(batch_size, generator)`` that makes one (e.g. fresh
    noise).

    Returns
    -------
    Tensor (steps,) of the loss at each step (float64).
    """
    func = "train_classifier"
    _check_module(classifier, "classifier", func)
    _check_xy(x, y, func)
    steps = check_int(steps, "steps", func, minimum=1)
    batch_size = check_int(batch_size, "batch_size", func, minimum=1)
    lr = check_positive_number(lr, "lr", func)
    weight_decay = check_positive_number(weight_decay, "weight_decay", func, allow_zero=True)
    beta = check_positive_number(beta, "beta", func, allow_zero=True)
    check_generator(generator, None, func)
    if x_out is not None and not callable(x_out):
        as_float_tensor(x_out, "x_out", func)
        check_finite(x_out, "x_out", func)
    opt = torch.optim.Adam(classifier.parameters(), lr=lr, weight_decay=weight_decay)
    losses = torch.empty(steps, dtype=torch.float64)
    n = x.shape[0]
    for step in range(steps):
        idx = torch.randint(n, (batch_size,), generator=generator)
        logits = classifier(x[idx])
        if x_out is None:
            loss = F.cross_entropy(logits, y[idx])
        else:
            if callable(x_out):
                xo = x_out(batch_size, generator)
            else:
                xo = x_out[torch.randint(x_out.shape[0], (batch_size,), generator=generator)]
            loss = confidence_loss(logits, y[idx], classifier(xo), beta)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[step] = loss.item()
    return losses


def train_confidence_gan(classifier: torch.nn.Module, gen_net: torch.nn.Module,
                         disc_net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *,
                         noise_dim: int, beta: float = 1.0, steps: int = 500,
                         batch_size: int = 64, lr: float = 1e-3, lr_gan: float = 1e-3,
                         generator: torch.Generator | None = None) -> dict:
    """Joint training of Lee et al. (2018), Algorithm 1: a GAN whose generator is pushed towards
    the classifier's boundary, and a classifier taught to be uncertain on its samples.

    Each step, with fresh noise ``z ~ N(0, I)`` of shape ``(batch_size, noise_dim)`` and a batch
    ``(x, y)`` drawn with replacement (all from ``generator``):

    1. discriminator: minimise ``BCE(D(x), 1) + BCE(D(G(z)), 0)``;
    2. generator: minimise ``BCE(D(G(z)), 1) + beta * mean KL(U || p(y | G(z)))`` -- the
       non-saturating form of ``log(1 - D(G(z)))`` (as in Lee et al.'s code): samples that look
       like data but on which the classifier is unsure, i.e. near its decision boundary;
    3. classifier: minimise :func:`confidence_loss` on ``(x, y)`` and ``G(z)`` (``G`` fixed).

    ``disc_net(x)`` returns one logit per input (shape ``(B,)`` or ``(B, 1)``). All three
    modules are trained in place with Adam (``lr`` for the classifier, ``lr_gan`` for ``G`` and
    ``D``).

    Returns
    -------
    dict of Tensors (steps,): ``"d_loss"``, ``"g_loss"``, ``"c_loss"``, ``"kl_fake"`` (mean
    KL(U || p) on the step's generated batch, as the classifier saw it before its update).
    """
    func = "train_confidence_gan"
    _check_module(classifier, "classifier", func)
    _check_module(gen_net, "gen_net", func)
    _check_module(disc_net, "disc_net", func)
    _check_xy(x, y, func)
    noise_dim = check_int(noise_dim, "noise_dim", func, minimum=1)
    beta = check_positive_number(beta, "beta", func, allow_zero=True)
    steps = check_int(steps, "steps", func, minimum=1)
    batch_size = check_int(batch_size, "batch_size", func, minimum=1)
    lr = check_positive_number(lr, "lr", func)
    lr_gan = check_positive_number(lr_gan, "lr_gan", func)
    check_generator(generator, None, func)
    opt_c = torch.optim.Adam(classifier.parameters(), lr=lr)
    opt_g = torch.optim.Adam(gen_net.parameters(), lr=lr_gan, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc_net.parameters(), lr=lr_gan, betas=(0.5, 0.999))
    hist = {k: torch.empty(steps, dtype=torch.float64)
            for k in ("d_loss", "g_loss", "c_loss", "kl_fake")}
    n = x.shape[0]
    ones = torch.ones(batch_size, dtype=x.dtype)
    zeros = torch.zeros(batch_size, dtype=x.dtype)

    def d_logit(v):
        return disc_net(v).reshape(-1)

    def noise():
        return torch.randn(batch_size, noise_dim, generator=generator, dtype=x.dtype)

    for step in range(steps):
        # 1. discriminator
        xb = x[torch.randint(n, (batch_size,), generator=generator)]
        fake = gen_net(noise()).detach()
        d_loss = (F.binary_cross_entropy_with_logits(d_logit(xb), ones)
                  + F.binary_cross_entropy_with_logits(d_logit(fake), zeros))
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        # 2. generator: fool D and sit where the classifier is unsure
        fake = gen_net(noise())
        kl = kl_uniform(classifier(fake)).mean()
        g_loss = F.binary_cross_entropy_with_logits(d_logit(fake), ones) + beta * kl
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
        # 3. classifier: confident on data, uniform on the generator's samples
        idx = torch.randint(n, (batch_size,), generator=generator)
        fake = gen_net(noise()).detach()
        logits_fake = classifier(fake)
        c_loss = confidence_loss(classifier(x[idx]), y[idx], logits_fake, beta)
        opt_c.zero_grad()
        c_loss.backward()
        opt_c.step()
        hist["d_loss"][step] = d_loss.item()
        hist["g_loss"][step] = g_loss.item()
        hist["c_loss"][step] = c_loss.item()
        hist["kl_fake"][step] = kl_uniform(logits_fake.detach()).mean().item()
    return hist
