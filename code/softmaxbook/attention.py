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

from ._validate import as_float_tensor, check_generator, check_int, check_no_nan, check_positive_number
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
