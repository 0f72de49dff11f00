"""Soft and hard attention over L annotations, and four ways to train where to look.

An input is a set of ``L`` annotation vectors ``a = (a_1, ..., a_L)``, each of size ``D`` (Xu et
al. 2015, "Show, attend and tell", §3). An attention network gives scores ``e_i`` and weights
``alpha = softmax(e)``. Then

* **soft attention** (deterministic) feeds the expected annotation ``z = sum_i alpha_i a_i`` to the
  classifier;
* **hard attention** (stochastic) samples one location ``s ~ Categorical(alpha)`` -- a one-hot
  vector, one location per glimpse -- and feeds ``z = a_s``.

(The source notes swap the two words and describe ``s`` as an on/off switch per input; see
``SOURCE-ERRATA.md``, items 12 and 13.)

With hard attention, ``p(y | a) = sum_s p(s | a) p(y | s, a)``. Its log is what we want; Xu et al.
maximise the Jensen lower bound ``L_s = sum_s p(s | a) log p(y | s, a) <= log p(y | a)`` whose
gradient is an expectation over ``s`` (a pathwise term plus a score-function term) and is
estimated by sampling ``s`` (REINFORCE, Williams 1992), with a moving-average baseline and an
entropy bonus. With one glimpse over a handful of locations both the marginal likelihood and the
bound can also be summed exactly, which is what lets this module *check* the estimators.

The module provides the attention operations, a small task where *where to look* must be learned
(:func:`glimpse_task`), a model (:class:`GlimpseNet`), the training objectives of six methods
(:data:`METHODS`) and a training loop (:func:`train_glimpse`) that records accuracy, how much
attention goes to the right place, and the spread of the gradient estimates.

Shapes: annotations ``[n, L, D]``, scores and weights ``[n, L]``, labels ``[n]`` (int64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ._validate import (as_float_tensor, check_finite, check_generator, check_int, check_no_nan,
                        check_positive_number)
from .gumbel import gumbel_max, gumbel_softmax

__all__ = [
    "METHODS",
    "soft_attention",
    "hard_attention",
    "glimpse_task",
    "GlimpseTask",
    "GlimpseNet",
    "per_location_log_lik",
    "marginal_log_lik",
    "jensen_bound",
    "surrogate_loss",
    "reinforce_surrogate",
    "reinforce_gradients",
    "train_glimpse",
    "TrainHistory",
    "evaluate",
    "AlignmentPosterior",
    "alignment_elbo",
    "iw_bound",
    "iw_bound_exact",
    "iw_enumerate",
    "IWEnumeration",
    "location_jacobians",
    "enumerated_variance",
    "train_variational",
    "VariationalHistory",
    "train_glimpse_runs",
    "RunsHistory",
]

#: The training methods of :func:`surrogate_loss` and :func:`train_glimpse`.
METHODS = ("soft", "marginal", "reinforce", "reinforce-baseline", "reinforce-entropy",
           "straight-through")


def _check_scores_annotations(scores, annotations, func: str):
    # An empty *batch* (a zero among the leading dimensions) gives an empty result, as in the
    # samplers of gumbel.py; no location (L = 0) or an empty annotation (D = 0) is an error.
    scores = as_float_tensor(scores, "scores", func, allow_empty=True)
    annotations = as_float_tensor(annotations, "annotations", func, allow_empty=True)
    check_no_nan(scores, "scores", func)
    if annotations.dim() < 2:
        raise ValueError(f"{func}: argument 'annotations' must have shape [..., L, D], got "
                         f"{tuple(annotations.shape)}")
    if annotations.shape[-2] == 0 or annotations.shape[-1] == 0:
        raise ValueError(f"{func}: argument 'annotations' has shape {tuple(annotations.shape)}: "
                         "it needs at least one location (L) with at least one feature (D)")
    if scores.shape != annotations.shape[:-1]:
        raise ValueError(f"{func}: argument 'scores' must have shape {tuple(annotations.shape[:-1])}"
                         f" (that of 'annotations', {tuple(annotations.shape)}, without its last "
                         f"dimension D: one score per location), got {tuple(scores.shape)}")
    if bool((scores == math.inf).any()):
        raise ValueError(f"{func}: argument 'scores' contains +inf")
    if bool((scores == -math.inf).all(dim=-1).any()):
        raise ValueError(f"{func}: argument 'scores' has a row that is all -inf (no location "
                         f"can be attended)")
    return scores, annotations


def soft_attention(scores: torch.Tensor, annotations: torch.Tensor):
    """Soft (deterministic) attention: the expected annotation under ``softmax(scores)``.

    Parameters
    ----------
    scores : Tensor ``[..., L]``
        Attention scores; ``-inf`` means "never look here".
    annotations : Tensor ``[..., L, D]``

    Returns
    -------
    context : Tensor ``[..., D]``
        ``sum_i alpha_i a_i`` (Xu et al. 2015, eq. 13).
    weights : Tensor ``[..., L]``
        ``alpha = softmax(scores)``.
    """
    scores, annotations = _check_scores_annotations(scores, annotations, "soft_attention")
    weights = torch.softmax(scores, dim=-1)
    return (weights.unsqueeze(-1) * annotations).sum(dim=-2), weights


def hard_attention(scores: torch.Tensor, annotations: torch.Tensor, *, generator=None):
    """Hard (stochastic) attention: one location sampled from ``softmax(scores)``.

    Parameters
    ----------
    scores : Tensor ``[..., L]``
    annotations : Tensor ``[..., L, D]``
    generator : torch.Generator, optional

    Returns
    -------
    context : Tensor ``[..., D]``
        The sampled annotation ``a_s``.
    location : LongTensor ``[...]``
        The sampled index ``s`` (a one-hot vector written as its index).
    log_prob : Tensor ``[...]``
        ``log alpha_s``, differentiable in ``scores`` (the score-function term needs it).
    """
    func = "hard_attention"
    scores, annotations = _check_scores_annotations(scores, annotations, func)
    check_generator(generator, scores.device, func)
    location = gumbel_max(scores.detach(), generator=generator)
    log_prob = torch.log_softmax(scores, dim=-1).gather(-1, location.unsqueeze(-1)).squeeze(-1)
    index = location[..., None, None].expand(*location.shape, 1, annotations.shape[-1])
    context = annotations.gather(-2, index).squeeze(-2)
    return context, location, log_prob


# ---------------------------------------------------------------------------------------------
# The task: L patches, one of which holds the digit to name
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GlimpseTask:
    """A data set of :func:`glimpse_task`: annotations ``[n, L, 64]`` (pixels in [0, 1]),
    labels ``[n]`` (the digit in the target patch) and target locations ``[n]``."""

    annotations: torch.Tensor
    labels: torch.Tensor
    targets: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def split(self, n_first: int):
        """The first ``n_first`` examples and the rest, as two tasks."""
        n_first = check_int(n_first, "n_first", "GlimpseTask.split", minimum=1)
        if n_first >= len(self):
            raise ValueError(f"GlimpseTask.split: argument 'n_first' must be < {len(self)}, got "
                             f"{n_first}")
        first = GlimpseTask(self.annotations[:n_first], self.labels[:n_first],
                            self.targets[:n_first])
        rest = GlimpseTask(self.annotations[n_first:], self.labels[n_first:],
                           self.targets[n_first:])
        return first, rest


def _digits():
    from sklearn.datasets import load_digits  # ships with scikit-learn, no download

    data = load_digits()
    return (torch.tensor(data.images.reshape(-1, 64), dtype=torch.float64) / 16.0,
            torch.tensor(data.target, dtype=torch.int64))


def glimpse_task(n: int, n_locations: int = 4, *, distractor: str = "rotated", generator=None,
                 dtype: torch.dtype = torch.float32) -> GlimpseTask:
    """``n`` examples of the "which patch holds the digit?" task.

    Each example has ``n_locations`` patches of 8 x 8 pixels (scikit-learn's digits, scaled to
    [0, 1], flattened to 64 values). One patch, at a uniformly random location, is a digit image;
    its class is the label. Every other patch is a *distractor* made from another, independently
    drawn digit image, so its class says nothing about the label:

    ``"rotated"`` (the default)
        the image turned a quarter turn anticlockwise (``torch.rot90``; written as a left-right
        flip followed by a transpose). It keeps the ink and the strokes, and some digits still
        look like digits when turned (a 0, an 8, a 1 that becomes a bar): the model has to learn
        which shapes belong to upright digits.
    ``"scrambled"``
        the image's 64 pixels randomly permuted (each patch its own permutation): the same
        intensities but no strokes at all, which makes the digit easy to find.
    ``"mirrored"``
        the name this option had before; the same as ``"rotated"``, kept so that old code runs.

    A classifier that looks at a distractor can only guess the label (about 1 in 10), so the
    model must learn where to look from the content of the patches.

    Parameters
    ----------
    n : int >= 1
    n_locations : int >= 2
        ``L``, the number of patches.
    distractor : ``"rotated"`` | ``"scrambled"`` | ``"mirrored"``
        How the distractors are made (above).
    generator : torch.Generator, optional
    dtype : floating dtype of the annotations

    Returns
    -------
    GlimpseTask
    """
    func = "glimpse_task"
    n = check_int(n, "n", func, minimum=1)
    n_locations = check_int(n_locations, "n_locations", func, minimum=2)
    check_generator(generator, "cpu", func)
    if distractor not in ("rotated", "scrambled", "mirrored"):
        raise ValueError(f"{func}: argument 'distractor' must be 'rotated' or 'scrambled', got "
                         f"{distractor!r}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{func}: argument 'dtype' must be a floating torch.dtype, got {dtype!r}")
    images, classes = _digits()
    m = images.shape[0]
    pick = torch.randint(m, (n, n_locations), generator=generator)
    patches = images[pick]  # [n, L, 64]
    if distractor == "scrambled":
        # each pixel order drawn independently (argsort of uniforms = a random permutation)
        perm = torch.rand(n, n_locations, 64, generator=generator).argsort(dim=-1)
        distractors = patches.gather(-1, perm)
    else:  # "rotated" ("mirrored" is its old name): flipped left-right, then transposed, is
        # a quarter turn anticlockwise (= torch.rot90(image, 1)); strokes kept, and some
        # digits (0, 8) still look like digits
        distractors = patches.reshape(n, n_locations, 8, 8).flip(-1).transpose(-1, -2)
        distractors = distractors.reshape(n, n_locations, 64)
    targets = torch.randint(n_locations, (n,), generator=generator)
    is_target = nn.functional.one_hot(targets, n_locations).bool()
    annotations = torch.where(is_target.unsqueeze(-1), patches, distractors)
    labels = classes[pick.gather(1, targets[:, None]).squeeze(1)]
    return GlimpseTask(annotations.to(dtype), labels, targets)


# ---------------------------------------------------------------------------------------------
# The model and the objectives
# ---------------------------------------------------------------------------------------------

class GlimpseNet(nn.Module):
    """An attention network and a classifier, both small MLPs over one 64-pixel patch.

    ``scores(a)`` gives ``e = f(a_i)`` per location ``[n, L]``; ``log_probs(z)`` gives
    ``log p(y | z)`` over ``n_classes`` for a context ``z`` (``[..., D]`` -> ``[..., K]``).
    Parameters are initialised from torch's global generator (seed it, or pass a model).
    """

    def __init__(self, dim: int = 64, hidden: int = 32, n_classes: int = 10):
        super().__init__()
        dim = check_int(dim, "dim", "GlimpseNet", minimum=1)
        hidden = check_int(hidden, "hidden", "GlimpseNet", minimum=1)
        n_classes = check_int(n_classes, "n_classes", "GlimpseNet", minimum=2)
        self.scorer = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.classifier = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(),
                                        nn.Linear(hidden, n_classes))

    def scores(self, annotations: torch.Tensor) -> torch.Tensor:
        return self.scorer(annotations).squeeze(-1)

    def log_probs(self, context: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.classifier(context), dim=-1)


def _check_baseline(baseline, func: str) -> float:
    """The baseline as a float: a number, or a one-element tensor such as ``reward.mean()`` (read
    as its value, no gradient); a bool (an int to Python) or a non-finite value is refused."""
    if isinstance(baseline, torch.Tensor) and baseline.numel() == 1 \
            and baseline.dtype != torch.bool:
        baseline = float(baseline.detach())
    if isinstance(baseline, bool) or not isinstance(baseline, (int, float)):
        raise TypeError(f"{func}: argument 'baseline' must be a number (or a one-element "
                        f"tensor), got {type(baseline).__name__}: {baseline!r}")
    if not math.isfinite(baseline):
        raise ValueError(f"{func}: argument 'baseline' must be a finite number, got {baseline!r}")
    return float(baseline)


def _check_batch(model, annotations, labels, func: str):
    if not isinstance(model, GlimpseNet):
        raise TypeError(f"{func}: argument 'model' must be a GlimpseNet, got "
                        f"{type(model).__name__}")
    annotations = as_float_tensor(annotations, "annotations", func)
    if annotations.dim() != 3:
        raise ValueError(f"{func}: argument 'annotations' must have shape [n, L, D], got "
                         f"{tuple(annotations.shape)}")
    # named here, not left to torch's "mat1 and mat2 ..." from inside the model (R3 review)
    weight = model.scorer[0].weight
    if annotations.shape[-1] != weight.shape[1]:
        raise ValueError(f"{func}: argument 'annotations' has D = {annotations.shape[-1]} "
                         f"features per location, but the model reads {weight.shape[1]}")
    if annotations.dtype != weight.dtype:
        raise TypeError(f"{func}: argument 'annotations' is {annotations.dtype} but the model's "
                        f"weights are {weight.dtype}: convert one to the other (e.g. "
                        f"model.double() and annotations.double())")
    if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64:
        raise TypeError(f"{func}: argument 'labels' must be an int64 tensor")
    if labels.shape != annotations.shape[:1]:
        raise ValueError(f"{func}: argument 'labels' must have shape [{annotations.shape[0]}], "
                         f"got {tuple(labels.shape)}")
    k = model.classifier[-1].out_features
    if bool(((labels < 0) | (labels >= k)).any()):
        raise ValueError(f"{func}: argument 'labels' must be in [0, {k - 1}]")


def per_location_log_lik(model: GlimpseNet, annotations: torch.Tensor,
                         labels: torch.Tensor) -> torch.Tensor:
    """``log p(y | s = i, a)`` for every location ``i``: ``[n, L]``."""
    _check_batch(model, annotations, labels, "per_location_log_lik")
    lp = model.log_probs(annotations)  # [n, L, K]
    return lp.gather(-1, labels[:, None, None].expand(-1, lp.shape[1], 1)).squeeze(-1)


def marginal_log_lik(model: GlimpseNet, annotations: torch.Tensor,
                     labels: torch.Tensor) -> torch.Tensor:
    """The exact ``log p(y | a) = log sum_s alpha_s p(y | s, a)`` per example ``[n]`` (a
    log-sum-exp, so it is stable where every ``p(y | s, a)`` underflows)."""
    _check_batch(model, annotations, labels, "marginal_log_lik")
    log_alpha = torch.log_softmax(model.scores(annotations), dim=-1)
    return torch.logsumexp(log_alpha + per_location_log_lik(model, annotations, labels), dim=-1)


def jensen_bound(model: GlimpseNet, annotations: torch.Tensor,
                 labels: torch.Tensor) -> torch.Tensor:
    """The exact Jensen bound ``L_s = sum_s alpha_s log p(y | s, a)`` per example ``[n]``
    (Xu et al. 2015, eq. 10); never above :func:`marginal_log_lik`."""
    _check_batch(model, annotations, labels, "jensen_bound")
    alpha = torch.softmax(model.scores(annotations), dim=-1)
    return (alpha * per_location_log_lik(model, annotations, labels)).sum(dim=-1)


def surrogate_loss(model: GlimpseNet, annotations: torch.Tensor, labels: torch.Tensor,
                   method: str, *, baseline: float = 0.0, entropy_weight: float = 0.0,
                   tau: float = 1.0, generator=None):
    """A loss whose gradient is the method's (estimate of the) gradient of minus its objective.

    Methods (:data:`METHODS`):

    ``"soft"``
        ``-log p(y | z)`` with ``z`` the soft attention context.
    ``"marginal"``
        ``-log p(y | a)``, summed exactly over the ``L`` locations.
    ``"reinforce"``, ``"reinforce-baseline"``, ``"reinforce-entropy"``
        One sample ``s ~ alpha`` per example. The surrogate
        ``-[log p(y|s,a) + (r - b) log alpha_s + lambda H(alpha)]`` with the reward
        ``r = log p(y|s,a)`` held constant has as gradient an unbiased estimate of
        ``-grad (L_s + lambda H)`` whatever the constant ``b`` (Williams 1992; Xu et al. 2015,
        eq. 12). ``"reinforce"`` uses ``b = 0`` and ``lambda = 0`` whatever is passed.
    ``"straight-through"``
        ``-log p(y | z)`` with ``z = sum_i h_i a_i`` and ``h`` a straight-through
        Gumbel-softmax sample at temperature ``tau`` (Jang et al. 2017): forward a one-hot
        sample, backward the relaxed gradient (biased).

    Returns
    -------
    loss : scalar Tensor (mean over the batch)
    reward : Tensor ``[n]`` (detached)
        ``log p(y | s, a)`` of the sampled location for the REINFORCE methods and
        straight-through; the objective per example otherwise.
    """
    func = "surrogate_loss"
    _check_batch(model, annotations, labels, func)
    if method not in METHODS:
        raise ValueError(f"{func}: argument 'method' must be one of {METHODS}, got {method!r}")
    baseline = _check_baseline(baseline, func)
    entropy_weight = check_positive_number(entropy_weight, "entropy_weight", func,
                                           allow_zero=True)
    check_generator(generator, annotations.device, func)
    scores = model.scores(annotations)
    if method == "soft":
        context, _ = soft_attention(scores, annotations)
        ll = model.log_probs(context).gather(-1, labels[:, None]).squeeze(-1)
        return -ll.mean(), ll.detach()
    if method == "marginal":
        ll = marginal_log_lik(model, annotations, labels)
        return -ll.mean(), ll.detach()
    if method == "straight-through":
        tau = check_positive_number(tau, "tau", func)
        h = gumbel_softmax(scores, tau, hard=True, generator=generator)
        context = (h.unsqueeze(-1) * annotations).sum(dim=-2)
        ll = model.log_probs(context).gather(-1, labels[:, None]).squeeze(-1)
        return -ll.mean(), ll.detach()
    # REINFORCE
    if method == "reinforce":
        baseline, entropy_weight = 0.0, 0.0
    elif method == "reinforce-baseline":
        entropy_weight = 0.0
    _, location, _ = hard_attention(scores, annotations, generator=generator)
    objective, reward = _reinforce_objective(model, scores, annotations, labels, location,
                                             baseline, entropy_weight)
    return -objective.mean(), reward


def _reinforce_objective(model, scores, annotations, labels, location, baseline, entropy_weight):
    """Per example, the REINFORCE surrogate at the given ``location`` [n]: its gradient is one
    estimate of grad (L_s + lambda H). Split out so tests can average it exactly over
    locations."""
    log_alpha = torch.log_softmax(scores, dim=-1)
    log_alpha_s = log_alpha.gather(-1, location[:, None]).squeeze(-1)
    context = annotations[torch.arange(annotations.shape[0]), location]
    ll = model.log_probs(context).gather(-1, labels[:, None]).squeeze(-1)
    reward = ll.detach()
    # pathwise term + score-function term (reward - baseline) * grad log alpha_s
    objective = ll + (reward - baseline) * log_alpha_s
    if entropy_weight:
        objective = objective - entropy_weight * (log_alpha.exp() * log_alpha).sum(dim=-1)
    return objective, reward


def reinforce_surrogate(model: GlimpseNet, annotations: torch.Tensor, labels: torch.Tensor,
                        locations: torch.Tensor, *, baseline: float = 0.0,
                        entropy_weight: float = 0.0):
    """The REINFORCE surrogate objective of :func:`surrogate_loss` at *given* locations.

    ``surrogate_loss`` samples ``s ~ alpha`` and then evaluates exactly this; with the location
    given, the estimator's exact expectation can be *enumerated*: ``sum_s alpha_s *
    grad reinforce_surrogate(..., s)`` must equal ``grad`` of :func:`jensen_bound` (plus
    ``lambda grad H``), whatever the baseline. Unlike an average of sampled estimates, that
    comparison has power at any model (a sign error or a log-probability taken at another
    location than the one rewarded fails it).

    Parameters
    ----------
    model : GlimpseNet
    annotations : Tensor ``[n, L, D]``
    labels : LongTensor ``[n]``
    locations : LongTensor ``[n]``
        The location ``s`` of each example, in ``[0, L)``.
    baseline : float
        ``b``, subtracted from the reward.
    entropy_weight : float >= 0
        ``lambda``, the weight of the entropy bonus ``H(alpha)``.

    Returns
    -------
    objective : Tensor ``[n]``
        ``log p(y|s,a) + (r - b) log alpha_s + lambda H(alpha)`` with the reward
        ``r = log p(y|s,a)`` held constant (Williams 1992; Xu et al. 2015, eq. 12): its gradient
        is one estimate of ``grad (L_s + lambda H)``. Maximise it (``surrogate_loss`` returns
        minus its batch mean).
    reward : Tensor ``[n]`` (detached)
    """
    func = "reinforce_surrogate"
    _check_batch(model, annotations, labels, func)
    n, n_loc = annotations.shape[:2]
    if not isinstance(locations, torch.Tensor) or locations.dtype != torch.int64:
        raise TypeError(f"{func}: argument 'locations' must be an int64 tensor")
    if locations.shape != (n,):
        raise ValueError(f"{func}: argument 'locations' must have shape [{n}], got "
                         f"{tuple(locations.shape)}")
    if bool(((locations < 0) | (locations >= n_loc)).any()):
        raise ValueError(f"{func}: argument 'locations' must be in [0, {n_loc - 1}]")
    baseline = _check_baseline(baseline, func)
    entropy_weight = check_positive_number(entropy_weight, "entropy_weight", func,
                                           allow_zero=True)
    return _reinforce_objective(model, model.scores(annotations), annotations, labels, locations,
                                baseline, entropy_weight)


def reinforce_gradients(model: GlimpseNet, annotations: torch.Tensor, labels: torch.Tensor,
                        n_samples: int, *, baseline: float = 0.0, generator=None):
    """``n_samples`` independent REINFORCE estimates of ``grad L_s`` for the attention network's
    parameters, on one batch: ``[n_samples, P]`` (flattened; ``L_s`` averaged over the batch).

    Their mean estimates ``grad`` of :func:`jensen_bound` (averaged); their spread is the
    estimator's variance (smaller with a good ``baseline``).
    """
    func = "reinforce_gradients"
    _check_batch(model, annotations, labels, func)
    n_samples = check_int(n_samples, "n_samples", func, minimum=1)
    params = list(model.scorer.parameters())
    rows = []
    for _ in range(n_samples):
        loss, _ = surrogate_loss(model, annotations, labels, "reinforce-baseline",
                                 baseline=baseline, generator=generator)
        grads = torch.autograd.grad(-loss, params)
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    return torch.stack(rows)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------

@dataclass
class TrainHistory:
    """What :func:`train_glimpse` records at every evaluation step."""

    steps: list = field(default_factory=list)
    accuracy: list = field(default_factory=list)        # test accuracy (marginal predictive)
    attention_on_target: list = field(default_factory=list)  # mean alpha at the target patch
    marginal_log_lik: list = field(default_factory=list)     # mean exact log p(y | a), test
    jensen_gap: list = field(default_factory=list)           # mean log p(y|a) - L_s, test


@torch.no_grad()
def evaluate(model: GlimpseNet, task: GlimpseTask, *, soft: bool = False) -> dict:
    """Accuracy, mean attention on the target, the mean exact marginal log-likelihood and the
    mean Jensen gap, on ``task``.

    The accuracy is that of the model's own prediction: ``argmax_y sum_s alpha_s p(y | s, a)``
    for a hard-attention model, ``argmax_y p(y | z)`` with the soft context ``z`` when ``soft``
    (a soft-attention model was trained on mixtures of patches, not on single ones).
    """
    if not isinstance(task, GlimpseTask):
        raise TypeError(f"evaluate: argument 'task' must be a GlimpseTask, got "
                        f"{type(task).__name__}")
    a, y = task.annotations, task.labels
    _check_batch(model, a, y, "evaluate")
    scores = model.scores(a)
    alpha = torch.softmax(scores, dim=-1)
    if soft:
        predictive = model.log_probs(soft_attention(scores, a)[0])
    else:
        predictive = (alpha.unsqueeze(-1) * model.log_probs(a).exp()).sum(dim=1)
    ll = marginal_log_lik(model, a, y)
    return {
        "accuracy": float((predictive.argmax(-1) == y).double().mean()),
        "attention_on_target": float(alpha.gather(1, task.targets[:, None]).double().mean()),
        "marginal_log_lik": float(ll.double().mean()),
        "jensen_gap": float((ll - jensen_bound(model, a, y)).double().mean()),
    }


def _check_training(func, train, test, steps, batch_size, eval_every, lr, baseline_decay,
                    generator, on_eval):
    """The arguments :func:`train_glimpse` and :func:`train_variational` share, validated;
    returns ``(steps, batch_size, eval_every, lr)`` as checked numbers."""
    for name, task in (("train", train), ("test", test)):
        if not isinstance(task, GlimpseTask):
            raise TypeError(f"{func}: argument '{name}' must be a GlimpseTask, got "
                            f"{type(task).__name__}")
    steps = check_int(steps, "steps", func, minimum=1)
    batch_size = check_int(batch_size, "batch_size", func, minimum=1)
    eval_every = check_int(eval_every, "eval_every", func, minimum=1)
    lr = check_positive_number(lr, "lr", func)
    if not 0.0 <= baseline_decay < 1.0:
        raise ValueError(f"{func}: argument 'baseline_decay' must be in [0, 1), got "
                         f"{baseline_decay}")
    check_generator(generator, "cpu", func)
    if on_eval is not None and not callable(on_eval):
        raise TypeError(f"{func}: argument 'on_eval' must be callable, got "
                        f"{type(on_eval).__name__}")
    return steps, batch_size, eval_every, lr


def train_glimpse(method: str, train: GlimpseTask, test: GlimpseTask, *, steps: int = 600,
                  batch_size: int = 64, lr: float = 3e-3, hidden: int = 32,
                  entropy_weight: float = 0.01, baseline_decay: float = 0.9, tau: float = 1.0,
                  eval_every: int = 50, generator=None, model: GlimpseNet | None = None,
                  on_eval=None):
    """Train a :class:`GlimpseNet` with one of :data:`METHODS` (Adam); returns
    ``(model, TrainHistory)``.

    The moving-average baseline follows Xu et al. 2015: after each step
    ``b <- decay * b + (1 - decay) * mean reward``, used by the next step. The initial weights come
    from torch's global generator unless ``model`` is given; minibatches and attention samples
    from ``generator``. The accuracy recorded for ``"soft"`` is that of the soft prediction (see
    :func:`evaluate`). ``on_eval(step, model, baseline)``, if given, is called at every
    evaluation (for snapshots; it must not change the model).
    """
    func = "train_glimpse"
    if method not in METHODS:
        raise ValueError(f"{func}: argument 'method' must be one of {METHODS}, got {method!r}")
    steps, batch_size, eval_every, lr = _check_training(
        func, train, test, steps, batch_size, eval_every, lr, baseline_decay, generator,
        on_eval)
    dim = train.annotations.shape[-1]
    if model is None:
        model = GlimpseNet(dim, hidden).to(train.annotations.dtype)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = TrainHistory()
    baseline = 0.0
    n = len(train)
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            stats = evaluate(model, test, soft=method == "soft")
            history.steps.append(step)
            for key, value in stats.items():
                getattr(history, key).append(value)
            if on_eval is not None:
                on_eval(step, model, baseline)
        if step == steps:
            break
        idx = torch.randint(n, (min(batch_size, n),), generator=generator)
        loss, reward = surrogate_loss(model, train.annotations[idx], train.labels[idx], method,
                                      baseline=baseline, entropy_weight=entropy_weight, tau=tau,
                                      generator=generator)
        opt.zero_grad()
        loss.backward()
        opt.step()
        baseline = baseline_decay * baseline + (1 - baseline_decay) * float(reward.mean())
    return model, history


# ---------------------------------------------------------------------------------------------
# Variational attention: a posterior q(s | a, y), its ELBO and the importance-weighted bound
# ---------------------------------------------------------------------------------------------

class AlignmentPosterior(nn.Module):
    """An amortised posterior ``q(s | a, y)`` over the ``L`` locations (Deng et al. 2018).

    A small MLP reads each patch ``a_i`` and gives one score per class; the score of the label
    ``y`` is the location's score, and ``q = softmax`` over the locations. Unlike the attention
    ``p(s | a)`` of :class:`GlimpseNet`, ``q`` sees the label, so it can point at the patch that
    explains it: it is an inference network, used in training only (prediction has no ``y``).
    Parameters are initialised from torch's global generator.
    """

    def __init__(self, dim: int = 64, hidden: int = 32, n_classes: int = 10):
        super().__init__()
        dim = check_int(dim, "dim", "AlignmentPosterior", minimum=1)
        hidden = check_int(hidden, "hidden", "AlignmentPosterior", minimum=1)
        n_classes = check_int(n_classes, "n_classes", "AlignmentPosterior", minimum=2)
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, n_classes))

    def log_probs(self, annotations: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``log q(s | a, y)`` for every location: ``[n, L]`` (annotations ``[n, L, D]``,
        labels ``[n]``, int64)."""
        func = "AlignmentPosterior.log_probs"
        annotations = as_float_tensor(annotations, "annotations", func)
        if annotations.dim() != 3:
            raise ValueError(f"{func}: argument 'annotations' must have shape [n, L, D], got "
                             f"{tuple(annotations.shape)}")
        weight = self.net[0].weight
        if annotations.shape[-1] != weight.shape[1]:
            raise ValueError(f"{func}: argument 'annotations' has D = {annotations.shape[-1]} "
                             f"features per location, but the posterior reads {weight.shape[1]}")
        if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64:
            raise TypeError(f"{func}: argument 'labels' must be an int64 tensor")
        if labels.shape != annotations.shape[:1]:
            raise ValueError(f"{func}: argument 'labels' must have shape "
                             f"[{annotations.shape[0]}], got {tuple(labels.shape)}")
        k = self.net[-1].out_features
        if bool(((labels < 0) | (labels >= k)).any()):
            raise ValueError(f"{func}: argument 'labels' must be in [0, {k - 1}]")
        out = self.net(annotations.to(weight.dtype))  # [n, L, K]
        e = out.gather(-1, labels[:, None, None].expand(-1, out.shape[1], 1)).squeeze(-1)
        return torch.log_softmax(e, dim=-1)


def _check_log_weights(log_prior, loglik, log_q, func: str):
    """Validate the three ``[..., L]`` inputs of the bounds; return them in a common dtype.

    ``log_prior`` and ``log_q`` are normalised log-probabilities over the last axis (``-inf``
    = probability 0, at least one location possible); ``loglik`` is ``log p(y | s, a)``
    (``-inf`` allowed: the location cannot explain the label)."""
    tensors = {}
    for name, x in (("log_prior", log_prior), ("loglik", loglik), ("log_q", log_q)):
        x = as_float_tensor(x, name, func, allow_empty=True)
        check_no_nan(x, name, func)
        if bool((x == math.inf).any()):
            raise ValueError(f"{func}: argument '{name}' contains +inf")
        tensors[name] = x
    shape = tensors["log_prior"].shape
    for name in ("loglik", "log_q"):
        if tensors[name].shape != shape:
            raise ValueError(f"{func}: argument '{name}' must have the shape of 'log_prior', "
                             f"{tuple(shape)} (one value per location), got "
                             f"{tuple(tensors[name].shape)}")
    if len(shape) == 0 or shape[-1] == 0:
        raise ValueError(f"{func}: argument 'log_prior' has shape {tuple(shape)}: it needs a "
                         "last axis of at least one location")
    dtype = torch.promote_types(torch.promote_types(tensors["log_prior"].dtype,
                                                    tensors["loglik"].dtype),
                                tensors["log_q"].dtype)
    for name in ("log_prior", "log_q"):
        x = tensors[name]
        if x.numel() == 0:
            continue
        if bool((x == -math.inf).all(dim=-1).any()):
            raise ValueError(f"{func}: argument '{name}' has a row that is all -inf (no "
                             "location possible)")
        # normalised to the precision of the dtype (a log_softmax in float16 is off by ~L eps)
        tol = max(1e-6, 64 * torch.finfo(x.dtype).eps)
        total = torch.logsumexp(x.detach().double(), dim=-1)
        if bool((total.abs() > tol).any()):
            worst = float(total.abs().max())
            raise ValueError(f"{func}: argument '{name}' must be normalised log-probabilities "
                             f"(logsumexp over the last axis 0), but a row is off by {worst:.3g}"
                             f"; use torch.log_softmax")
    return (tensors["log_prior"].to(dtype), tensors["loglik"].to(dtype),
            tensors["log_q"].to(dtype))


def _log_weights(log_prior, loglik, log_q):
    """``log w_s = log p(s | a) + log p(y | s, a) - log q(s)``, set to -inf where ``q_s = 0``
    (such a location is never drawn, and ``log 0 - log 0`` would be NaN)."""
    possible = log_q > -math.inf
    safe_q = torch.where(possible, log_q, torch.zeros_like(log_q))
    return torch.where(possible, log_prior + loglik - safe_q,
                       torch.full_like(log_q, -math.inf))


def alignment_elbo(log_prior: torch.Tensor, loglik: torch.Tensor,
                   log_q: torch.Tensor) -> torch.Tensor:
    """The evidence lower bound of a posterior ``q(s)`` over locations, exactly.

    ``ELBO = sum_s q_s [log p(s | a) + log p(y | s, a) - log q_s] = log p(y | a) -
    KL(q || p(s | y, a)) <= log p(y | a)`` (Jordan et al. 1999; Deng et al. 2018). With
    ``q = p(s | a)`` it is the Jensen bound of Xu et al. (:func:`jensen_bound`); with ``q`` the
    exact posterior it equals ``log p(y | a)``.

    Parameters
    ----------
    log_prior : Tensor ``[..., L]``
        ``log p(s | a)``, normalised over the last axis; ``-inf`` = never attended.
    loglik : Tensor ``[..., L]``
        ``log p(y | s, a)``; ``-inf`` allowed.
    log_q : Tensor ``[..., L]``
        ``log q(s)``, normalised; a location with ``q_s = 0`` contributes nothing
        (``0 log 0 = 0``).

    Returns
    -------
    Tensor ``[...]``
        Differentiable in all three inputs; ``-inf`` where ``q`` puts mass on a location with
        ``p(s | a) p(y | s, a) = 0``. Empty batch in, empty out.
    """
    log_prior, loglik, log_q = _check_log_weights(log_prior, loglik, log_q, "alignment_elbo")
    # q_s = 0 terms are 0: their log-weight is replaced by 0 *before* the product, so that
    # neither the value nor the gradient meets 0 * -inf (NaN)
    possible = log_q > -math.inf
    log_w = torch.where(possible, _log_weights(log_prior, loglik, log_q),
                        torch.zeros_like(log_q))
    return (log_q.exp() * log_w).sum(dim=-1)


def iw_bound(log_prior: torch.Tensor, loglik: torch.Tensor, log_q: torch.Tensor, k: int, *,
             generator=None) -> torch.Tensor:
    """One draw of the ``k``-sample importance-weighted bound (Burda et al. 2016).

    Draws ``s_1, ..., s_k ~ q`` independently per row and returns
    ``log (1/k) sum_j p(s_j | a) p(y | s_j, a) / q(s_j)``. Its expectation is
    :func:`iw_bound_exact`: a lower bound on ``log p(y | a)`` that never decreases with ``k``
    (Burda et al. 2016, Theorem 1); ``k = 1`` gives the ELBO in expectation. It tends to
    ``log p(y | a)`` as ``k`` grows only if ``q_s > 0`` wherever ``p(s | a) p(y | s, a) > 0``
    (the theorem's bounded weights); otherwise to ``log sum_{s: q_s > 0} p(s | a) p(y | s, a)``.

    The locations are drawn without gradient, so the gradient with respect to ``log_prior`` and
    ``loglik`` (the model) is the pathwise estimate ``sum_j w~_j grad log w_j`` with the
    normalised weights ``w~``; with respect to ``log_q`` it lacks the score-function term that
    ``q``'s own parameters need (Mnih & Rezende 2016).

    Parameters
    ----------
    log_prior, loglik, log_q : Tensor ``[..., L]``
        As in :func:`alignment_elbo`.
    k : int >= 1
        The number of samples.
    generator : torch.Generator, optional

    Returns
    -------
    Tensor ``[...]``
    """
    func = "iw_bound"
    log_prior, loglik, log_q = _check_log_weights(log_prior, loglik, log_q, func)
    k = check_int(k, "k", func, minimum=1)
    check_generator(generator, log_q.device, func)
    batch = log_q.shape[:-1]
    if log_q.numel() == 0:
        return log_q.new_empty(batch)
    drawn = gumbel_max(log_q.detach().unsqueeze(-2).expand(*batch, k, log_q.shape[-1]),
                       generator=generator)  # [..., k]
    log_w = _log_weights(log_prior, loglik, log_q).gather(-1, drawn)
    # the log of a mean of weights that may all underflow: log-sum-exp, then - log k
    return torch.logsumexp(log_w, dim=-1) - math.log(k)


@dataclass(frozen=True)
class IWEnumeration:
    """Every ``k``-tuple of locations of :func:`iw_enumerate`, one row per tuple ``t``.

    ``prob [..., T]``: its probability ``prod_j q(s_j)``; ``bound [..., T]``: the bound's value
    there; ``weights [..., T, L]``: the normalised importance weights ``w~_j`` summed per
    location, so that the pathwise gradient at tuple ``t`` is ``sum_s weights[t, s]
    grad log w_s``; ``tuples [T, k]``: the locations."""

    prob: torch.Tensor
    bound: torch.Tensor
    weights: torch.Tensor
    tuples: torch.Tensor

    def mean(self) -> torch.Tensor:
        """The exact expected bound ``sum_t prob_t bound_t`` (tuples of probability 0 left
        out)."""
        # the bound of an impossible tuple may be -inf: replaced before the product, so that
        # neither the value nor the gradient meets 0 * -inf
        bound = torch.where(self.prob > 0, self.bound, torch.zeros_like(self.bound))
        return (self.prob * bound).sum(dim=-1)


def iw_enumerate(log_prior: torch.Tensor, loglik: torch.Tensor, log_q: torch.Tensor, k: int,
                 *, max_tuples: int = 100_000) -> IWEnumeration:
    """The ``k``-sample importance-weighted bound at every one of the ``L^k`` tuples of draws.

    With a few locations the expectation over ``s_1, ..., s_k ~ q`` is a finite sum, so the
    bound's exact mean (:func:`iw_bound_exact`), its gradient and the exact variance of its
    gradient estimate can be computed instead of estimated (Burda et al. 2016).

    Parameters
    ----------
    log_prior, loglik, log_q : Tensor ``[..., L]``
        As in :func:`alignment_elbo`.
    k : int >= 1
    max_tuples : int
        Refuse ``L^k`` above this (the memory is ``L^k * (k + L)`` numbers per row).

    Returns
    -------
    IWEnumeration
    """
    func = "iw_enumerate"
    log_prior, loglik, log_q = _check_log_weights(log_prior, loglik, log_q, func)
    k = check_int(k, "k", func, minimum=1)
    max_tuples = check_int(max_tuples, "max_tuples", func, minimum=1)
    return _iw_tuples(log_prior, loglik, log_q, k, max_tuples, func, with_weights=True)


def _iw_tuples(log_prior, loglik, log_q, k, max_tuples, func, *, with_weights):
    n_loc = log_q.shape[-1]
    if n_loc ** k > max_tuples:
        raise ValueError(f"{func}: argument 'k' = {k} gives L^k = {n_loc}^{k} = {n_loc ** k} "
                         f"tuples, more than max_tuples = {max_tuples}")
    grids = torch.meshgrid(*[torch.arange(n_loc, device=log_q.device)] * k, indexing="ij")
    tuples = torch.stack([g.reshape(-1) for g in grids], dim=-1)  # [T, k], lexicographic
    log_w = _log_weights(log_prior, loglik, log_q)
    lw = log_w[..., tuples]  # [..., T, k]
    prob = log_q[..., tuples].sum(dim=-1).exp()
    bound = torch.logsumexp(lw, dim=-1) - math.log(k)
    if not with_weights:
        return IWEnumeration(prob, bound, None, tuples)
    # normalised weights; a tuple whose weights are all 0 (-inf) gets 0, not 0/0
    finite = bound > -math.inf
    shift = torch.where(finite, bound + math.log(k), torch.zeros_like(bound))
    w_norm = torch.where(finite[..., None], (lw - shift[..., None]).exp(), torch.zeros_like(lw))
    weights = lw.new_zeros(*lw.shape[:-1], n_loc)  # [..., T, L]
    weights = weights.scatter_add(-1, tuples.expand(*lw.shape), w_norm)
    return IWEnumeration(prob, bound, weights, tuples)


def iw_bound_exact(log_prior: torch.Tensor, loglik: torch.Tensor, log_q: torch.Tensor,
                   k: int) -> torch.Tensor:
    """The exact expectation of the ``k``-sample importance-weighted bound, ``[...]``.

    ``E_{s_1..k ~ q} log (1/k) sum_j w_{s_j}`` summed over all ``L^k`` tuples
    (:func:`iw_enumerate`). ``k = 1`` is :func:`alignment_elbo`; it never decreases with ``k``
    and never exceeds ``log p(y | a)`` (Burda et al. 2016, Theorem 1); it tends to ``log p(y |
    a)`` only if ``q_s > 0`` wherever ``p(s | a) p(y | s, a) > 0`` (else to the log of the sum
    over ``q``'s support). Differentiable in all three inputs (through the tuples'
    probabilities too).
    """
    func = "iw_bound_exact"
    log_prior, loglik, log_q = _check_log_weights(log_prior, loglik, log_q, func)
    k = check_int(k, "k", func, minimum=1)
    return _iw_tuples(log_prior, loglik, log_q, k, 100_000, func, with_weights=False).mean()


def location_jacobians(model: GlimpseNet, annotations: torch.Tensor, labels: torch.Tensor):
    """Per example and location, the gradients of ``log p(s | a)`` and ``log p(y | s, a)`` with
    respect to all of the model's parameters.

    Every estimator of this chapter's gradients but straight-through (which differentiates
    through the relaxed sample), at one draw, is a combination of these
    ``2L`` vectors per example (REINFORCE: ``(r - b) grad log alpha_s + grad log p(y | s, a)``;
    the importance-weighted bound: ``sum_s w~_s (grad log alpha_s + grad log p(y | s, a))``), so
    with them the exact mean and variance of an estimator follow from a finite sum
    (:func:`enumerated_variance`).

    Returns
    -------
    (jac_log_prior, jac_loglik) : two Tensors ``[n, L, P]``
        ``P`` = the number of the model's parameters, flattened in the order of
        ``model.parameters()`` (the scorer's first).
    """
    func = "location_jacobians"
    _check_batch(model, annotations, labels, func)
    names = [name for name, _ in model.named_parameters()]
    params = {name: p.detach() for name, p in model.named_parameters()}

    def sub(p, prefix):
        return {key[len(prefix):]: value for key, value in p.items() if key.startswith(prefix)}

    def rows(p, a, y):
        # one example: a [L, D], y [] -> [2L] (log alpha_s, then log p(y | s, a))
        e = torch.func.functional_call(model.scorer, sub(p, "scorer."), (a,)).squeeze(-1)
        logits = torch.func.functional_call(model.classifier, sub(p, "classifier."), (a,))
        ll = torch.log_softmax(logits, dim=-1).index_select(-1, y.reshape(1)).squeeze(-1)
        return torch.cat([torch.log_softmax(e, dim=-1), ll])

    jac = torch.func.vmap(torch.func.jacrev(rows), in_dims=(None, 0, 0))(
        params, annotations, labels)
    flat = torch.cat([jac[name].reshape(*jac[name].shape[:2], -1) for name in names], dim=-1)
    n_loc = annotations.shape[1]
    return flat[:, :n_loc], flat[:, n_loc:]


def enumerated_variance(prob: torch.Tensor, coeff: torch.Tensor,
                        gram: torch.Tensor) -> torch.Tensor:
    """The exact summed variance of a batch-mean estimator with finitely many outcomes.

    For each of ``n`` examples an outcome ``t`` is drawn with probability ``prob[i, t]``
    (independently across examples) and the example's estimate is ``g_i(t) = coeff[i, t] @
    basis[i]`` for vectors ``basis[i]`` ``[B, P]`` (e.g. those of :func:`location_jacobians`);
    the estimator is the mean over the examples. With ``m_i = sum_t prob[i, t] coeff[i, t]``
    and the Gram matrices ``gram[i] = basis[i] @ basis[i]^T``, its variance summed over the
    ``P`` coordinates is::

        (1/n^2) sum_i [sum_t prob[i, t] coeff[i, t]^T gram[i] coeff[i, t] - m_i^T gram[i] m_i]

    (the variance of a mean of independent terms; ``E|g|^2 - |E g|^2`` per example). Only the
    ``B x B`` Gram matrices are needed, never the ``T x P`` estimates themselves.

    Parameters
    ----------
    prob : Tensor ``[n, T]``
        Each row sums to 1.
    coeff : Tensor ``[n, T, B]``
    gram : Tensor ``[n, B, B]``
        Symmetric positive semi-definite (checked: anything else raises, since the formula
        would return a meaningless number, or a negative one clamped to 0).

    Returns
    -------
    Tensor, 0-dim
        Clamped at 0 (rounding can make a zero variance slightly negative).
    """
    func = "enumerated_variance"
    prob = as_float_tensor(prob, "prob", func)
    coeff = as_float_tensor(coeff, "coeff", func)
    gram = as_float_tensor(gram, "gram", func)
    for name, x in (("prob", prob), ("coeff", coeff), ("gram", gram)):
        check_finite(x, name, func)
    if prob.dim() != 2 or coeff.dim() != 3 or gram.dim() != 3 \
            or coeff.shape[:2] != prob.shape \
            or gram.shape != (prob.shape[0], coeff.shape[2], coeff.shape[2]):
        raise ValueError(f"{func}: arguments 'prob', 'coeff', 'gram' must have shapes "
                         f"[n, T], [n, T, B], [n, B, B] with the same n, T, B, got "
                         f"{tuple(prob.shape)}, {tuple(coeff.shape)}, {tuple(gram.shape)}")
    if bool((prob < 0).any()):
        raise ValueError(f"{func}: argument 'prob' has a negative entry")
    tol = max(1e-6, 64 * torch.finfo(prob.dtype).eps)
    if bool(((prob.sum(dim=-1) - 1).abs() > tol).any()):
        raise ValueError(f"{func}: argument 'prob' must have rows that sum to 1")
    # a gram that is not a Gram matrix gives a number that is no variance (a negative one would
    # be clamped to 0 below, silently): refuse it (eigenvalues to the dtype's rounding)
    g_tol = max(1e-9, 1024 * torch.finfo(gram.dtype).eps)
    g_scale = gram.abs().amax(dim=(-2, -1), keepdim=True).clamp(min=torch.finfo(gram.dtype).tiny)
    if bool(((gram - gram.transpose(-2, -1)).abs() > g_tol * g_scale).any()):
        raise ValueError(f"{func}: argument 'gram' must be symmetric (basis @ basis^T)")
    if gram.numel() and bool((torch.linalg.eigvalsh(gram.double())
                              < -g_tol * g_scale[..., 0].double()).any()):
        raise ValueError(f"{func}: argument 'gram' must be positive semi-definite "
                         "(basis @ basis^T), but has a negative eigenvalue")
    n = prob.shape[0]
    m = (prob.unsqueeze(-1) * coeff).sum(dim=1)  # [n, B]
    second = (prob * torch.einsum("itb,ibc,itc->it", coeff, gram, coeff)).sum(dim=-1)
    first = torch.einsum("ib,ibc,ic->i", m, gram, m)
    return ((second - first).sum() / n ** 2).clamp(min=0)
@dataclass
class VariationalHistory(TrainHistory):
    """:class:`TrainHistory` plus the mean gap of the posterior's ELBO on the test set,
    ``log p(y | a) - ELBO = KL(q || p(s | y, a))``."""

    elbo_gap: list = field(default_factory=list)


def train_variational(train: GlimpseTask, test: GlimpseTask, *, steps: int = 600,
                      batch_size: int = 64, lr: float = 3e-3, baseline_decay: float = 0.9,
                      eval_every: int = 50, generator=None, model: GlimpseNet | None = None,
                      posterior: AlignmentPosterior | None = None, on_eval=None):
    """Variational attention: train a :class:`GlimpseNet` and an :class:`AlignmentPosterior`
    jointly against the ELBO (Deng et al. 2018); returns ``(model, posterior, history)``.

    Per step and example one location ``s ~ q(s | a, y)`` is drawn, and Adam ascends

    ``log p(y | s, a) - KL(q || p(s | a)) + (r - b) log q(s | a, y)``

    with ``r = log p(y | s, a)`` held constant: the first term gives the classifier a pathwise
    estimate of ``grad E_q log p(y | s, a)`` (no score-function term: ``s`` is drawn from ``q``,
    which the model's parameters do not move); the categorical KL is summed exactly over the
    ``L`` locations (the attention network's gradient is exact); the last term is the
    score-function estimate for ``q``'s parameters, with the moving-average baseline ``b`` of
    :func:`train_glimpse` (after each step ``b <- decay b + (1 - decay) mean r``). Its
    expectation is the gradient of :func:`alignment_elbo` in both networks.

    The model (its attention ``p(s | a)``, not ``q``) makes the predictions and is evaluated as
    in :func:`train_glimpse`; ``on_eval(step, model, posterior, baseline)`` is called at every
    evaluation.
    """
    func = "train_variational"
    steps, batch_size, eval_every, lr = _check_training(
        func, train, test, steps, batch_size, eval_every, lr, baseline_decay, generator,
        on_eval)
    dim = train.annotations.shape[-1]
    if model is None:
        model = GlimpseNet(dim).to(train.annotations.dtype)
    if posterior is None:
        posterior = AlignmentPosterior(dim).to(train.annotations.dtype)
    if not isinstance(posterior, AlignmentPosterior):
        raise TypeError(f"{func}: argument 'posterior' must be an AlignmentPosterior, got "
                        f"{type(posterior).__name__}")
    opt = torch.optim.Adam(list(model.parameters()) + list(posterior.parameters()), lr=lr)
    history = VariationalHistory()
    baseline = 0.0
    n = len(train)
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            stats = evaluate(model, test)
            history.steps.append(step)
            for key, value in stats.items():
                getattr(history, key).append(value)
            with torch.no_grad():
                a, y = test.annotations, test.labels
                log_prior = torch.log_softmax(model.scores(a), dim=-1)
                elbo = alignment_elbo(log_prior, per_location_log_lik(model, a, y),
                                      posterior.log_probs(a, y))
                history.elbo_gap.append(stats["marginal_log_lik"]
                                        - float(elbo.double().mean()))
            if on_eval is not None:
                on_eval(step, model, posterior, baseline)
        if step == steps:
            break
        idx = torch.randint(n, (min(batch_size, n),), generator=generator)
        a, y = train.annotations[idx], train.labels[idx]
        log_prior = torch.log_softmax(model.scores(a), dim=-1)
        log_q = posterior.log_probs(a, y)
        s = gumbel_max(log_q.detach(), generator=generator)
        context = a[torch.arange(a.shape[0]), s]
        ll = model.log_probs(context).gather(-1, y[:, None]).squeeze(-1)
        reward = ll.detach()
        q = log_q.exp()
        kl = (q * (log_q - log_prior)).sum(dim=-1)
        log_q_s = log_q.gather(-1, s[:, None]).squeeze(-1)
        objective = ll - kl + (reward - baseline) * log_q_s
        opt.zero_grad()
        (-objective.mean()).backward()
        opt.step()
        baseline = baseline_decay * baseline + (1 - baseline_decay) * float(reward.mean())
    return model, posterior, history


# ---------------------------------------------------------------------------------------------
# Many independent REINFORCE runs at once
# ---------------------------------------------------------------------------------------------

@dataclass
class RunsHistory:
    """What :func:`train_glimpse_runs` records: ``steps`` (list), and per evaluation and run
    ``accuracy``, ``attention_on_target`` (as in :func:`evaluate`) and ``entropy`` (the
    attention's mean entropy in nats), Tensors ``[n_evals, runs]``; ``reward``
    (``[steps, runs]``: each step's mean reward on its minibatch)."""

    steps: list
    accuracy: torch.Tensor
    attention_on_target: torch.Tensor
    entropy: torch.Tensor
    reward: torch.Tensor


def _stack_models(models):
    """The parameters of ``R`` GlimpseNets as leaf tensors with a leading ``R`` axis, weights
    transposed to ``[R, in, out]`` and biases ``[R, 1, out]`` for batched matrix products."""
    out = []
    for net in ("scorer", "classifier"):
        for layer in (0, 2):
            lin = [getattr(m, net)[layer] for m in models]
            out.append(torch.stack([l.weight.detach().T for l in lin]).clone().requires_grad_())
            out.append(torch.stack([l.bias.detach()[None] for l in lin]).clone()
                       .requires_grad_())
    return out


def _runs_scores(params, x):
    """Attention scores ``[R, m]`` of ``x`` ``[R, m, D]`` under ``R`` stacked scorers."""
    w1, b1, w2, b2 = params[:4]
    return (torch.tanh(torch.baddbmm(b1, x, w1)) @ w2 + b2).squeeze(-1)


def _runs_log_probs(params, x):
    """Class log-probabilities ``[R, m, K]`` of ``x`` ``[R, m, D]`` under ``R`` classifiers."""
    v1, c1, v2, c2 = params[4:]
    return torch.log_softmax(torch.relu(torch.baddbmm(c1, x, v1)) @ v2 + c2, dim=-1)


def train_glimpse_runs(method: str, train: GlimpseTask, test: GlimpseTask, models, *,
                       steps: int = 150, batch_size: int = 64, lr: float = 3e-3,
                       baseline_decay: float = 0.9, eval_every: int = 25, generator=None):
    """Train ``R = len(models)`` GlimpseNets independently with REINFORCE, all at once.

    The same algorithm as :func:`train_glimpse` with ``method`` ``"reinforce"`` (no baseline) or
    ``"reinforce-baseline"`` (the moving-average baseline, one per run), run for ``R`` models in
    batched matrix products: each run draws its own minibatches and locations from
    ``generator`` and has its own Adam state (Adam acts element by element, so one Adam over the
    stacked parameters is ``R`` independent ones). It is meant for measuring how often
    something happens across runs; the models given are not changed.

    Parameters
    ----------
    method : ``"reinforce"`` | ``"reinforce-baseline"``
    train, test : GlimpseTask
    models : sequence of GlimpseNet
        The initial weights of each run (same sizes, float32 or float64 like ``train``).
    steps, batch_size, lr, baseline_decay, eval_every, generator
        As in :func:`train_glimpse`.

    Returns
    -------
    RunsHistory
    """
    func = "train_glimpse_runs"
    if method not in ("reinforce", "reinforce-baseline"):
        raise ValueError(f"{func}: argument 'method' must be 'reinforce' or "
                         f"'reinforce-baseline', got {method!r}")
    for name, task in (("train", train), ("test", test)):
        if not isinstance(task, GlimpseTask):
            raise TypeError(f"{func}: argument '{name}' must be a GlimpseTask, got "
                            f"{type(task).__name__}")
    models = list(models) if isinstance(models, (list, tuple)) else models
    if not isinstance(models, list) or not models \
            or not all(isinstance(m, GlimpseNet) for m in models):
        raise TypeError(f"{func}: argument 'models' must be a non-empty list of GlimpseNet")
    for m in models:
        _check_batch(m, train.annotations[:1], train.labels[:1], func)
        if m.scorer[0].weight.shape != models[0].scorer[0].weight.shape \
                or m.classifier[2].weight.shape != models[0].classifier[2].weight.shape:
            raise ValueError(f"{func}: argument 'models' must hold GlimpseNets of one size")
    steps = check_int(steps, "steps", func, minimum=1)
    batch_size = check_int(batch_size, "batch_size", func, minimum=1)
    eval_every = check_int(eval_every, "eval_every", func, minimum=1)
    lr = check_positive_number(lr, "lr", func)
    if not 0.0 <= baseline_decay < 1.0:
        raise ValueError(f"{func}: argument 'baseline_decay' must be in [0, 1), got "
                         f"{baseline_decay}")
    check_generator(generator, "cpu", func)
    n_runs, n = len(models), len(train)
    params = _stack_models(models)
    opt = torch.optim.Adam(params, lr=lr)
    baseline = torch.zeros(n_runs, dtype=train.annotations.dtype)
    use_baseline = method == "reinforce-baseline"
    a_test = test.annotations.reshape(1, -1, test.annotations.shape[-1]).expand(n_runs, -1, -1)
    n_test, n_loc = test.annotations.shape[:2]
    hist_steps, accuracy, on_target, entropy, rewards = [], [], [], [], []
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            with torch.no_grad():
                scores = _runs_scores(params, a_test)
                log_p = _runs_log_probs(params, a_test)
                alpha = torch.softmax(scores.reshape(n_runs, n_test, n_loc), dim=-1)
                log_p = log_p.reshape(n_runs, n_test, n_loc, -1)
                # the marginal predictive sum_s alpha_s p(y | s, a), as in evaluate()
                pred = (alpha.unsqueeze(-1) * log_p.exp()).sum(dim=2).argmax(-1)
                accuracy.append((pred == test.labels).double().mean(-1))
                on_target.append(alpha.gather(-1, test.targets.expand(n_runs, -1)[..., None])
                                 .squeeze(-1).double().mean(-1))
                log_alpha = torch.log_softmax(scores.reshape(n_runs, n_test, n_loc), dim=-1)
                # 0 log 0 = 0 where a weight underflows
                plogp = torch.where(alpha > 0, alpha * log_alpha, torch.zeros_like(alpha))
                entropy.append(-plogp.sum(-1).double().mean(-1))
                hist_steps.append(step)
        if step == steps:
            break
        idx = torch.randint(n, (n_runs, min(batch_size, n)), generator=generator)
        a, y = train.annotations[idx], train.labels[idx]  # [R, B, L, D], [R, B]
        b_size = a.shape[1]
        scores = _runs_scores(params, a.reshape(n_runs, -1, a.shape[-1]))
        scores = scores.reshape(n_runs, b_size, n_loc)
        s = gumbel_max(scores.detach(), generator=generator)  # [R, B]
        log_alpha_s = torch.log_softmax(scores, -1).gather(-1, s[..., None]).squeeze(-1)
        context = a.gather(2, s[..., None, None].expand(-1, -1, 1, a.shape[-1])).squeeze(2)
        log_p = _runs_log_probs(params, context)
        ll = log_p.gather(-1, y[..., None]).squeeze(-1)  # [R, B]
        reward = ll.detach()
        b = baseline[:, None] if use_baseline else 0.0
        # per run: pathwise term + (r - b) grad log alpha_s, as in train_glimpse; summed over
        # the runs, so that each run's parameters get their own run's gradient
        objective = (ll + (reward - b) * log_alpha_s).mean(-1).sum()
        opt.zero_grad()
        (-objective).backward()
        opt.step()
        mean_r = reward.mean(-1)
        rewards.append(mean_r)
        baseline = baseline_decay * baseline + (1 - baseline_decay) * mean_r
    return RunsHistory(hist_steps, torch.stack(accuracy), torch.stack(on_target),
                       torch.stack(entropy), torch.stack(rewards))
