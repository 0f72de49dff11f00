"""Noise-contrastive estimation, negative sampling and sampled softmax.

Three ways to train a model of p(w | c) over a vocabulary of V words without computing the
softmax's denominator, plus the pieces they need (a fast sampler for the noise words, the
unigram^power noise distribution, a small context model).

Conventions used by every function here:

* A **score** ``s(w | c)`` is an unnormalised log-probability: the model's density is
  ``exp(s - log_z)``, with ``log_z`` a learned or fixed number (``0`` by default, the choice of
  Mnih & Teh 2012). Scores must be finite.
* **Noise.** The k noise words of an example are drawn i.i.d. (with replacement) from a fixed
  distribution ``q``; ``k`` is read from the last dimension of ``noise_scores``. Noise can be
  drawn per example (``[B, k]`` different words) or shared by the whole batch (one set of k words,
  what TensorFlow's ``nce_loss`` and ``sampled_softmax_loss`` do); see :func:`sample_noise`.
  ``log_q`` arguments are natural logs of q of the same words, finite (a data word must have
  ``q > 0``: this is NCE's one condition on the noise, Gutmann & Hyvärinen 2012, sec. 2.2).
* **Losses** are to be minimised, in nats, and averaged over the batch by default
  (``reduction="mean"``; ``"sum"`` and ``"none"`` are available).
* Randomness comes only from the optional keyword ``generator``.

What each loss converges to, for a model flexible enough (Gutmann & Hyvärinen 2012, Theorem 1;
Levy & Goldberg 2014, sec. 3.1):

* :func:`nce_loss`: ``s - log_z -> log p_d(w | c)``; the model becomes self-normalised.
* :func:`negative_sampling_loss`: ``s -> log p_d(w | c) - log q(w) - log k``, a shifted
  (pointwise mutual information when ``q`` is the unigram distribution) -- not a density.
* :func:`sampled_softmax_loss` (i.i.d. noise, ``log q`` subtracted, accidental hits kept): the
  *normalised* ``softmax(s) -> p_d(. | c)`` at every ``k >= 1`` -- it is ranking NCE (Ma & Collins
  2018); the scores themselves are defined only up to a constant per context.
  Masking accidental hits (``remove_accidental_hits=True``) biases that optimum, more as k grows.

References
----------
* Walker (1977), *An efficient method for generating discrete random variables with general
  distributions*, ACM TOMS 3(3); Vose (1991), *A linear algorithm for generating random numbers
  with a given distribution*, IEEE TSE 17(9) (:class:`AliasSampler`).
* Gutmann & Hyvärinen (2012), *Noise-contrastive estimation of unnormalized statistical models*,
  JMLR 13 (:func:`nce_loss`, eq. 7-8).
* Mnih & Teh (2012), *A fast and simple algorithm for training neural probabilistic language
  models*, ICML (NCE with ``log_z = 0``).
* Mikolov et al. (2013), *Distributed representations of words and phrases and their
  compositionality*, NeurIPS (:func:`negative_sampling_loss`, eq. 4; unigram^0.75 noise).
* Levy & Goldberg (2014), *Neural word embedding as implicit matrix factorization*, NeurIPS.
* Jean et al. (2015), *On using very large target vocabulary for neural machine translation*,
  ACL; TensorFlow's ``tf.nn.sampled_softmax_loss`` (:func:`sampled_softmax_loss`).
* Ma & Collins (2018), *Noise contrastive estimation and negative sampling for conditional
  models: consistency and statistical efficiency*, EMNLP (ranking NCE:
  :func:`sampled_softmax_loss`).
"""

from __future__ import annotations

import itertools
import math
import operator

import torch
import torch.nn.functional as F

from softmaxbook._validate import (
    as_float_tensor,
    check_finite,
    check_generator,
    check_int,
    check_no_nan,
    check_positive_number,
    check_reduction as _check_reduction,
    reduce_loss as _reduce,
)
from softmaxbook.softmax import cross_entropy

__all__ = [
    "AliasSampler",
    "unigram_noise",
    "sample_noise",
    "nce_loss",
    "negative_sampling_loss",
    "sampled_softmax_loss",
    "nce_posterior",
    "ContextModel",
    "pydoc_corpus",
    "build_vocabulary",
    "subsample_keep_probs",
    "skipgram_pairs",
    "nce_asymptotic_covariance",
    "infonce_exact",
    "nce_population_loss",
    "class_softmax_log_prob",
]

def _check_probs(probs, name: str, func: str) -> torch.Tensor:
    probs = as_float_tensor(probs, name, func)
    if probs.dim() != 1:
        raise ValueError(f"{func}: argument '{name}' must be 1-D (one entry per word), got "
                         f"shape {tuple(probs.shape)}")
    check_finite(probs, name, func)
    if bool((probs < 0).any()):
        i = int((probs < 0).nonzero()[0])
        raise ValueError(f"{func}: argument '{name}' must be >= 0, got {probs[i].item()} at "
                         f"index {i}")
    if not float(probs.sum()) > 0:
        raise ValueError(f"{func}: argument '{name}' sums to 0; at least one entry must be > 0")
    return probs


# ------------------------------------------------------------------------------------------------
# Sampling the noise
# ------------------------------------------------------------------------------------------------
class AliasSampler:
    """Draws from a fixed categorical distribution in O(1) per draw (Walker's alias method).

    The table is built once in O(V) with Vose's algorithm: every column ``i`` of the table holds
    the word ``i`` with probability ``prob[i]`` and its alias ``alias[i]`` otherwise, and every
    column is chosen with probability 1/V, so that

        P(w) = (prob[w] + sum_{i: alias[i] = w} (1 - prob[i])) / V.

    A draw is then one uniform column and one coin, whatever V is: no search through a cumulative
    sum (O(log V) per draw, and cache misses at large V).

    Parameters
    ----------
    probs : torch.Tensor, shape ``[V]``
        Non-negative weights (normalised here; they need not sum to one). Finite, not all zero.

    Attributes
    ----------
    probs : torch.Tensor ``[V]``, float64
        The normalised distribution.
    prob : torch.Tensor ``[V]``, float64
        The probability of keeping column ``i``'s own word.
    alias : torch.Tensor ``[V]``, int64
        The other word of column ``i``.

    Notes
    -----
    The table is built in float64 (the probabilities of a million-word vocabulary are ~1e-6 each,
    and the running "excess" of Vose's algorithm would drift in float32). A word of probability 0
    is never drawn: its column keeps it with probability exactly 0.
    References: Walker (1977); Vose (1991), section III.
    """

    def __init__(self, probs: torch.Tensor):
        func = "AliasSampler"
        probs = _check_probs(probs, "probs", func)
        p = probs.detach().to("cpu", torch.float64)
        p = p / p.sum()
        V = p.numel()
        scaled = (p * V).tolist()
        prob = [0.0] * V
        alias = list(range(V))
        small = [i for i, x in enumerate(scaled) if x < 1.0]
        large = [i for i, x in enumerate(scaled) if x >= 1.0]
        # Vose: pair each under-full column (mass < 1) with an over-full word that tops it up;
        # the donor's remaining mass decides which list it joins next.
        while small and large:
            s, g = small.pop(), large.pop()
            prob[s] = scaled[s]
            alias[s] = g
            scaled[g] = (scaled[g] + scaled[s]) - 1.0
            (small if scaled[g] < 1.0 else large).append(g)
        # What is left is full up to rounding: keep its own word with probability 1.
        for i in large + small:
            prob[i] = 1.0
        # A word of probability 0 must never be drawn, not even through rounding in the loop.
        self.probs = p.to(probs.device)
        self.prob = torch.tensor(prob, dtype=torch.float64).to(probs.device)
        self.alias = torch.tensor(alias, dtype=torch.int64).to(probs.device)
        self.prob[p == 0] = 0.0
        self.num_words = V

    def __repr__(self) -> str:
        return f"AliasSampler(V={self.num_words})"

    def table_probs(self) -> torch.Tensor:
        """The distribution the table really samples (float64 ``[V]``): for checking the table."""
        V = self.num_words
        out = self.prob.clone()
        out.index_add_(0, self.alias, 1.0 - self.prob)
        return out / V

    def sample(self, shape, *, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw word indices.

        Parameters
        ----------
        shape : int or tuple of int
            Shape of the result.
        generator : torch.Generator, optional
            Source of randomness (on the table's device).

        Returns
        -------
        torch.Tensor of int64, shape ``shape``, values in ``[0, V)``.
        """
        func = "AliasSampler.sample"
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, (tuple, list, torch.Size)):
            raise TypeError(f"{func}: argument 'shape' must be an int or a tuple of ints, got "
                            f"{type(shape).__name__}")
        shape = tuple(check_int(n, "shape", func, minimum=0) for n in shape)
        check_generator(generator, self.prob.device, func)
        V = self.num_words
        # One float64 uniform gives both the column and the coin: x = U * V, column floor(x),
        # coin x - floor(x). The coin keeps 53 - log2(V) bits (33 at V = 10^6), plenty for
        # comparing with prob; and one random draw instead of two halves the cost of the RNG.
        x = torch.rand(shape, dtype=torch.float64, device=self.prob.device,
                       generator=generator).mul_(V)
        # x < V always (U < 1); the clamp guards a backend whose uniforms may reach 1.
        col = x.long().clamp_(max=V - 1)
        # index_select rather than prob[col]: the same gather, without advanced indexing's
        # overhead; and no mixed long/float arithmetic (slow in torch's type promotion).
        keep = torch.frac(x) < self.prob.index_select(0, col.reshape(-1)).reshape(col.shape)
        other = self.alias.index_select(0, col.reshape(-1)).reshape(col.shape)
        return torch.where(keep, col, other)


def unigram_noise(counts: torch.Tensor, power: float = 0.75) -> torch.Tensor:
    """The noise distribution of word2vec: ``q(w) ∝ counts(w) ** power``.

    Parameters
    ----------
    counts : torch.Tensor, shape ``[V]``
        Word counts (or frequencies), non-negative, finite, not all zero. Integer or float.
    power : float >= 0
        ``1`` gives the unigram distribution, ``0`` the uniform distribution over the words with a
        positive count, ``0.75`` Mikolov et al.'s choice (2013, sec. 2.2): it lifts rare words.

    Returns
    -------
    torch.Tensor, shape ``[V]``
        Probabilities summing to one, float64 (or the float dtype of ``counts``). A word with count
        0 has probability 0 for every power (also for ``power = 0``, where ``0 ** 0 = 1`` would
        otherwise give it mass) -- such a word can then never be a data word for NCE.
    """
    func = "unigram_noise"
    if isinstance(counts, torch.Tensor) and not counts.is_floating_point() \
            and not counts.is_complex() and counts.dtype != torch.bool:
        counts = counts.to(torch.float64)
    counts = _check_probs(counts, "counts", func)
    power = check_positive_number(power, "power", func, allow_zero=True)
    # In log space and float64, normalised by a logsumexp: counts ** power overflows for large
    # counts or powers (float16 counts summing past 65504, float32 counts of 1e10 with power
    # 50), and w / w.sum() was then 0 or NaN everywhere, silently.
    c = counts.to(torch.float64)
    log_w = torch.where(c > 0, power * torch.log(c.clamp(min=torch.finfo(torch.float64).tiny)),
                        torch.full_like(c, -math.inf))
    return torch.softmax(log_w, dim=0).to(counts.dtype)


def sample_noise(sampler: AliasSampler, batch_size: int, k: int, *, shared: bool = False,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """k noise words for each of ``batch_size`` examples.

    Parameters
    ----------
    sampler : AliasSampler
        The noise distribution q.
    batch_size, k : int >= 1
    shared : bool
        ``False`` (default): each example gets its own k words (what word2vec and Mnih & Teh do).
        ``True``: one set of k words for the whole batch, repeated in every row (TensorFlow's
        ``nce_loss`` / ``sampled_softmax_loss``): k draws per batch instead of B k, and one score
        matrix ``[B, k]`` from one matrix product, but the B rows' noise terms are no longer
        independent, so the gradient's variance falls more slowly with B.

    Returns
    -------
    torch.Tensor of int64, shape ``[batch_size, k]``.
    """
    func = "sample_noise"
    if not isinstance(sampler, AliasSampler):
        raise TypeError(f"{func}: argument 'sampler' must be an AliasSampler, got "
                        f"{type(sampler).__name__}")
    batch_size = check_int(batch_size, "batch_size", func, minimum=1)
    k = check_int(k, "k", func, minimum=1)
    if not isinstance(shared, bool):
        raise TypeError(f"{func}: argument 'shared' must be a bool, got {type(shared).__name__}")
    if shared:
        return sampler.sample((1, k), generator=generator).expand(batch_size, k)
    return sampler.sample((batch_size, k), generator=generator)


# ------------------------------------------------------------------------------------------------
# Losses
# ------------------------------------------------------------------------------------------------
def _check_scores(data_scores, noise_scores, func: str):
    data_scores = as_float_tensor(data_scores, "data_scores", func)
    noise_scores = as_float_tensor(noise_scores, "noise_scores", func)
    if data_scores.dim() != 1:
        raise ValueError(f"{func}: argument 'data_scores' must be 1-D [B] (one score per "
                         f"example), got shape {tuple(data_scores.shape)}")
    if noise_scores.dim() != 2 or noise_scores.shape[0] != data_scores.shape[0]:
        raise ValueError(f"{func}: argument 'noise_scores' must have shape [B, k] with "
                         f"B = {data_scores.shape[0]} (that of 'data_scores'), got "
                         f"{tuple(noise_scores.shape)}")
    check_finite(data_scores, "data_scores", func)
    check_finite(noise_scores, "noise_scores", func)
    return data_scores, noise_scores


def _shared_shape_error(name, shape, got, func):
    # Batch-shared noise is one row [1, k], never a 1-D [k]: with B == k a 1-D [B] tensor (say,
    # the data words' log q passed by mistake) would be read as the shared form without a word.
    hint = (f"; a 1-D tensor is ambiguous (it could be [B] or [k]): pass {name}[None] for "
            f"batch-shared noise") if len(got) == 1 else ""
    raise ValueError(f"{func}: argument '{name}' must have shape {list(shape)} or "
                     f"[1, {shape[1]}] (one row shared by the batch), got {list(got)}{hint}")


def _check_log_q(log_q, name: str, shape, func: str, dtype) -> torch.Tensor:
    log_q = as_float_tensor(log_q, name, func)
    if len(shape) == 2:
        if tuple(log_q.shape) not in (tuple(shape), (1, shape[1])):
            _shared_shape_error(name, shape, tuple(log_q.shape), func)
    elif tuple(log_q.shape) != tuple(shape):
        raise ValueError(f"{func}: argument '{name}' must have shape {list(shape)}, got "
                         f"{list(log_q.shape)}")
    check_no_nan(log_q, name, func)
    bad = torch.isneginf(log_q)
    if bool(bad.any()):
        raise ValueError(f"{func}: argument '{name}' is -inf (q = 0) at index "
                         f"{tuple(bad.nonzero()[0].tolist())}: the noise must give every data "
                         f"and noise word a probability > 0")
    check_finite(log_q, name, func)
    if bool((log_q > 1e-6).any()):
        raise ValueError(f"{func}: argument '{name}' holds log-probabilities, which are <= 0; "
                         f"got max {log_q.max().item():.4g} (did you pass q instead of log q?)")
    return log_q.to(dtype)


def _check_log_z(log_z, B: int, func: str):
    if isinstance(log_z, torch.Tensor):
        as_float_tensor(log_z, "log_z", func)
        if not (log_z.dim() == 0 or tuple(log_z.shape) in ((1,), (B,))):
            raise ValueError(f"{func}: argument 'log_z' must be a number, a scalar tensor or "
                             f"have shape [B] = [{B}], got {list(log_z.shape)}")
        check_finite(log_z, "log_z", func)
        return log_z.reshape(-1) if log_z.dim() else log_z
    if isinstance(log_z, bool) or not isinstance(log_z, (int, float)):
        raise TypeError(f"{func}: argument 'log_z' must be a number or a tensor, got "
                        f"{type(log_z).__name__}")
    if not math.isfinite(log_z):
        raise ValueError(f"{func}: argument 'log_z' must be finite, got {log_z}")
    return float(log_z)


def nce_posterior(scores: torch.Tensor, log_q: torch.Tensor, k: int) -> torch.Tensor:
    r"""The probability that word w came from the data rather than from the k noise draws:

    .. math:: P(Y = 1 \mid w) = \frac{e^{s}}{e^{s} + k q(w)} = \sigma\bigl(s - \log(k q(w))\bigr).

    Parameters
    ----------
    scores : torch.Tensor, any shape
        Log-densities ``s`` of the model (``log_z`` already subtracted), finite.
    log_q : torch.Tensor, broadcastable to ``scores``
        ``log q(w)``, finite.
    k : int >= 1
        Noise words per data word.

    Returns
    -------
    torch.Tensor, the shape of ``scores + log_q``.

    Reference: Gutmann & Hyvärinen (2012), eq. 5-6 (their ``G = log p_m - log(nu p_n)``).
    """
    func = "nce_posterior"
    scores = as_float_tensor(scores, "scores", func)
    check_finite(scores, "scores", func)
    log_q = as_float_tensor(log_q, "log_q", func)
    check_finite(log_q, "log_q", func)
    if bool((log_q > 1e-6).any()):  # as nce_loss: q > 1 is not a probability
        raise ValueError(f"{func}: argument 'log_q' holds log-probabilities, which are <= 0; "
                         f"got max {log_q.max().item():.4g} (did you pass q instead of log q?)")
    k = check_int(k, "k", func, minimum=1)
    return torch.sigmoid(scores - (log_q + math.log(k)))


def nce_loss(data_scores: torch.Tensor, noise_scores: torch.Tensor, data_log_q: torch.Tensor,
             noise_log_q: torch.Tensor, *, log_z: float | torch.Tensor = 0.0,
             reduction: str = "mean") -> torch.Tensor:
    r"""Noise-contrastive estimation: logistic regression of data words against k noise words.

    With ``Δ(w) = s(w) - log_z - log(k q(w))`` (the log-odds that w is a data word), the loss of
    one example with data word w and noise words w'_1..w'_k is

    .. math:: -\log\sigma(\Delta(w)) - \sum_{j=1}^k \log\sigma(-\Delta(w'_j)).

    Note the minus inside the second sigmoid: a noise word's label is 0, and its probability of
    being noise is ``1 - σ(Δ) = σ(-Δ)``.

    Parameters
    ----------
    data_scores : torch.Tensor ``[B]``
        Unnormalised log-scores ``s(w_b | c_b)`` of the data words, finite.
    noise_scores : torch.Tensor ``[B, k]``
        Scores ``s(w'_{bj} | c_b)`` of each example's k noise words under the example's context
        (for batch-shared noise, the same k words scored under each context).
    data_log_q : torch.Tensor ``[B]``
        ``log q(w_b)``, finite (q must give every data word a positive probability).
    noise_log_q : torch.Tensor ``[B, k]``, or ``[1, k]`` for batch-shared noise
        ``log q(w'_{bj})``. A 1-D ``[k]`` is refused: with ``B == k`` it could not be told from
        a ``[B]`` tensor passed by mistake.
    log_z : float or torch.Tensor (scalar or ``[B]``)
        The model's log normaliser: ``0`` (default) fixes it, as Mnih & Teh (2012) do; pass a
        tensor with ``requires_grad=True`` to learn it (Gutmann & Hyvärinen 2012, sec. 2.3).
    reduction : {"mean", "sum", "none"}
        Mean over the batch (default), sum, or the ``[B]`` per-example losses.

    Returns
    -------
    torch.Tensor: the loss in nats.

    Notes
    -----
    ``-log σ(x)`` is evaluated by ``F.logsigmoid``, which neither overflows nor rounds to 0 for
    large ``|x|`` (``-log σ(40) = 4.2e-18``, not 0; ``-log σ(-800) = 800``, not ``inf``) and has
    the exact gradient at ``x = 0``. The convention matches TensorFlow's ``nce_loss`` (whose logits
    are ``s - log(expected count)``, with the expected count ``k q`` for sampling with replacement).
    Reference: Gutmann & Hyvärinen (2012), eq. 7-8.
    """
    func = "nce_loss"
    data_scores, noise_scores = _check_scores(data_scores, noise_scores, func)
    reduction = _check_reduction(reduction, func)
    dtype = torch.promote_types(data_scores.dtype, noise_scores.dtype)
    data_log_q = _check_log_q(data_log_q, "data_log_q", data_scores.shape, func, dtype)
    noise_log_q = _check_log_q(noise_log_q, "noise_log_q", noise_scores.shape, func, dtype)
    B, k = noise_scores.shape
    log_z = _check_log_z(log_z, B, func)
    lz_data = log_z
    # a per-example log Z [B] must broadcast over the k noise words of its row
    lz_noise = log_z.reshape(-1, 1) if isinstance(log_z, torch.Tensor) and log_z.dim() == 1 \
        else log_z
    log_k = math.log(k)
    delta_data = data_scores - lz_data - (data_log_q + log_k)
    delta_noise = noise_scores - lz_noise - (noise_log_q + log_k)
    loss = -F.logsigmoid(delta_data) - F.logsigmoid(-delta_noise).sum(dim=-1)
    return _reduce(loss, reduction)


def negative_sampling_loss(data_scores: torch.Tensor, noise_scores: torch.Tensor, *,
                           reduction: str = "mean") -> torch.Tensor:
    r"""Negative sampling (word2vec): NCE's loss with the ``log(k q)`` term dropped.

    .. math:: -\log\sigma(s(w)) - \sum_{j=1}^k \log\sigma(-s(w'_j)).

    It is NCE only when ``k q(w) = 1`` for every word (k = V, uniform q). With any other noise its
    optimum is ``s* = log p_d(w | c) - log q(w) - log k`` (Levy & Goldberg 2014, eq. 6 for the
    unigram q, where it is PMI - log k): a useful embedding objective, not a density estimator.

    Parameters
    ----------
    data_scores : torch.Tensor ``[B]``
        Scores of the data words (for skip-gram, ``u_w · v_c``).
    noise_scores : torch.Tensor ``[B, k]``
        Scores of the k noise words of each example.
    reduction : {"mean", "sum", "none"}

    Returns
    -------
    torch.Tensor: the loss in nats.

    Notes
    -----
    Stable at any score (``F.logsigmoid``). word2vec's C code and gensim instead read σ from a
    table on [-6, 6] and treat scores beyond as saturated (no gradient) -- a speed trick, not part
    of the objective. Reference: Mikolov et al. (2013), eq. 4.
    """
    func = "negative_sampling_loss"
    data_scores, noise_scores = _check_scores(data_scores, noise_scores, func)
    reduction = _check_reduction(reduction, func)
    loss = -F.logsigmoid(data_scores) - F.logsigmoid(-noise_scores).sum(dim=-1)
    return _reduce(loss, reduction)


def sampled_softmax_loss(data_scores: torch.Tensor, noise_scores: torch.Tensor,
                         data_log_q: torch.Tensor, noise_log_q: torch.Tensor, *,
                         data_ids: torch.Tensor | None = None,
                         noise_ids: torch.Tensor | None = None,
                         subtract_log_q: bool = True,
                         remove_accidental_hits: bool = False,
                         reduction: str = "mean") -> torch.Tensor:
    r"""Sampled softmax: the cross entropy of a softmax over the data word and k noise words.

    The logits are ``s(w) - log q(w)`` (the "log-Q correction", which makes the sampled
    normaliser ``sum_j exp(s_j) / q_j`` an importance-sampling estimate of ``k Z``), and the loss
    of one example is the cross entropy with the data word as the target:

    .. math:: -\log \frac{e^{s(w) - \log q(w)}}{e^{s(w) - \log q(w)} +
              \sum_j e^{s(w'_j) - \log q(w'_j)}}.

    (TensorFlow subtracts ``log(k q)``; the common ``log k`` cancels in the softmax.)

    Parameters
    ----------
    data_scores : torch.Tensor ``[B]``
    noise_scores : torch.Tensor ``[B, k]``
    data_log_q : torch.Tensor ``[B]``
    noise_log_q : torch.Tensor ``[B, k]``, or ``[1, k]`` for batch-shared noise (not ``[k]``,
        which could not be told from a ``[B]`` tensor when ``B == k``)
    data_ids : torch.Tensor of int ``[B]``, optional
    noise_ids : torch.Tensor of int ``[B, k]`` or ``[1, k]``, optional
        The words themselves: needed for ``remove_accidental_hits``.
    subtract_log_q : bool
        Apply the log-Q correction (default). Without it the loss is biased towards the noise
        distribution's frequent words: it trains ``softmax(s + log q)`` towards p_d.
    remove_accidental_hits : bool
        ``False`` (default): a noise word equal to the example's data word stays in the
        softmax as a candidate. That is right for i.i.d. draws (the noise of this module): the
        ``k + 1`` candidates are then exactly ranking NCE's, and the optimum is unbiased.
        ``True``: mask such noise words (logit ``-inf``), as ``tf.nn.sampled_softmax_loss`` does
        by default. TensorFlow's candidate samplers draw ``k`` *distinct* words (sampling without
        replacement, with an expected-count correction), where the data word must not reappear.
        With i.i.d. draws masking takes a word out of its own normaliser exactly when it is the
        data word, which happens most for frequent words: the optimum leans towards them, more
        as k grows (see Notes). Needs ``data_ids`` and ``noise_ids``.
    reduction : {"mean", "sum", "none"}

    Returns
    -------
    torch.Tensor: the loss in nats (through :func:`softmaxbook.softmax.cross_entropy`).

    Notes
    -----
    With i.i.d. noise from q and the log-Q correction this is *ranking NCE* (Ma & Collins 2018):
    given the k + 1 candidates, the probability that candidate ``i`` is the data word is
    ``(p_d(w_i) / q(w_i)) / sum_j (p_d(w_j) / q(w_j))`` exactly, a softmax of ``log p_d - log q``.
    So the population loss is minimised by ``softmax(s) = p_d`` (scores ``log p_d + const``) at
    *every* ``k >= 1``, whenever the model can represent ``p_d``; k only sets the variance. (As
    an estimate of the *full* softmax's loss or gradient at given scores the sampled loss is
    biased for finite k -- Bengio & Senécal 2008; Jean et al. 2015, sec. 3 -- but that bias does
    not move the optimum.) With ``remove_accidental_hits=True`` the posterior above no longer
    holds: for ``p_d = [.4, .3, .15, .1, .05]`` and uniform q the optimum's
    ``KL(p_d || softmax(s*))`` is 5e-4 at k = 2 and 1.7e-2 at k = 20, growing with k (exact
    population optima, computed in the NCE chapter).
    """
    func = "sampled_softmax_loss"
    data_scores, noise_scores = _check_scores(data_scores, noise_scores, func)
    reduction = _check_reduction(reduction, func)
    dtype = torch.promote_types(data_scores.dtype, noise_scores.dtype)
    data_log_q = _check_log_q(data_log_q, "data_log_q", data_scores.shape, func, dtype)
    noise_log_q = _check_log_q(noise_log_q, "noise_log_q", noise_scores.shape, func, dtype)
    for name, val in (("subtract_log_q", subtract_log_q),
                      ("remove_accidental_hits", remove_accidental_hits)):
        if not isinstance(val, bool):
            raise TypeError(f"{func}: argument '{name}' must be a bool, got {type(val).__name__}")
    B, k = noise_scores.shape
    if subtract_log_q:
        data_logit = data_scores - data_log_q
        noise_logit = noise_scores - noise_log_q
    else:
        data_logit, noise_logit = data_scores, noise_scores
    if remove_accidental_hits:
        if data_ids is None or noise_ids is None:
            raise ValueError(f"{func}: remove_accidental_hits=True needs 'data_ids' and "
                             f"'noise_ids' (or pass remove_accidental_hits=False)")
        for name, ids in (("data_ids", data_ids), ("noise_ids", noise_ids)):
            if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or \
                    ids.is_complex() or ids.dtype == torch.bool:
                raise TypeError(f"{func}: argument '{name}' must be an integer tensor of word "
                                f"indices, got {getattr(ids, 'dtype', type(ids).__name__)}")
        if tuple(data_ids.shape) != (B,):
            raise ValueError(f"{func}: argument 'data_ids' must have shape [{B}], got "
                             f"{list(data_ids.shape)}")
        if tuple(noise_ids.shape) not in ((B, k), (1, k)):
            _shared_shape_error("noise_ids", (B, k), tuple(noise_ids.shape), func)
        hits = noise_ids.to(data_ids.device) == data_ids.reshape(-1, 1)
        noise_logit = noise_logit.expand(B, k).masked_fill(hits, -math.inf)
    logits = torch.cat([data_logit.unsqueeze(-1), noise_logit.expand(B, k)], dim=-1)
    target = torch.zeros(B, dtype=torch.long, device=logits.device)
    return cross_entropy(logits, target, reduction=reduction)


# ------------------------------------------------------------------------------------------------
# A small context model
# ------------------------------------------------------------------------------------------------
class ContextModel(torch.nn.Module):
    r"""A log-bilinear model of words given a context: ``s(w | c) = u_w · v_c + b_w``.

    With ``bias=False`` and the context a word, this is skip-gram's score (Mikolov et al. 2013):
    ``v_c`` the "input" vector of the centre word, ``u_w`` the "output" vector of a word in its
    window. With ``bias=True`` it is Mnih & Teh's (2012) log-bilinear model with one context
    word. The scores are unnormalised: how they relate to p(w | c) depends on the loss.

    Parameters
    ----------
    num_contexts, num_words : int >= 1
    dim : int >= 1
        Embedding dimension. With ``dim >= num_contexts`` and a bias, any table of scores
        ``[num_contexts, num_words]`` can be represented exactly.
    bias : bool
        A per-word bias ``b_w`` (default True).
    generator : torch.Generator, optional
        For the initial context vectors (uniform in ±0.5/dim, as word2vec); word vectors and
        biases start at 0, as in word2vec.
    dtype : torch.dtype
        Parameter dtype (default float32).

    Methods
    -------
    score(contexts, words): ``[B]`` scores of ``words[b]`` given ``contexts[b]``, or ``[B, k]``
    when ``words`` is ``[B, k]``.
    shared_scores(contexts, words): ``[B, k]`` scores of the same k words under each context.
    all_scores(contexts): ``[B, V]`` -- the full score table, what the full softmax needs.
    """

    def __init__(self, num_contexts: int, num_words: int, dim: int, *, bias: bool = True,
                 generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32):
        super().__init__()
        func = "ContextModel"
        num_contexts = check_int(num_contexts, "num_contexts", func, minimum=1)
        num_words = check_int(num_words, "num_words", func, minimum=1)
        dim = check_int(dim, "dim", func, minimum=1)
        check_generator(generator, None, func)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"{func}: argument 'dtype' must be a floating torch.dtype, got "
                            f"{dtype!r}")
        init = (torch.rand(num_contexts, dim, generator=generator, dtype=torch.float64) - 0.5)
        self.context_vectors = torch.nn.Parameter((init / dim).to(dtype))
        self.word_vectors = torch.nn.Parameter(torch.zeros(num_words, dim, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(num_words, dtype=dtype)) if bias else None
        self.num_words = num_words
        self.num_contexts = num_contexts

    def _check_ids(self, ids, name, limit, func):
        if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.is_complex() \
                or ids.dtype == torch.bool:
            raise TypeError(f"{func}: argument '{name}' must be an integer tensor, got "
                            f"{getattr(ids, 'dtype', type(ids).__name__)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= limit):
            raise ValueError(f"{func}: argument '{name}' must hold indices in [0, {limit}), got "
                             f"values in [{int(ids.min())}, {int(ids.max())}]")

    def score(self, contexts: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
        func = "ContextModel.score"
        self._check_ids(contexts, "contexts", self.num_contexts, func)
        self._check_ids(words, "words", self.num_words, func)
        if contexts.dim() != 1:
            raise ValueError(f"{func}: argument 'contexts' must be 1-D [B], got "
                             f"{list(contexts.shape)}")
        B = contexts.shape[0]
        v = self.context_vectors[contexts]
        if words.dim() == 1 and words.shape[0] == B:
            out = (self.word_vectors[words] * v).sum(-1)
        elif words.dim() == 2 and words.shape[0] == B:
            out = torch.einsum("bkd,bd->bk", self.word_vectors[words], v)
        else:
            raise ValueError(f"{func}: argument 'words' must have shape [B] or [B, k] with "
                             f"B = {B} (that of 'contexts'), got {list(words.shape)}")
        if self.bias is not None:
            out = out + self.bias[words]
        return out

    def shared_scores(self, contexts: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
        """``[B, k]`` scores of the same k ``words`` (1-D) under each of the B contexts: one
        ``[B, d] x [d, k]`` product, the saving that batch-shared noise buys."""
        func = "ContextModel.shared_scores"
        self._check_ids(contexts, "contexts", self.num_contexts, func)
        self._check_ids(words, "words", self.num_words, func)
        if contexts.dim() != 1 or words.dim() != 1:
            raise ValueError(f"{func}: arguments 'contexts' and 'words' must be 1-D, got "
                             f"{list(contexts.shape)} and {list(words.shape)}")
        out = self.context_vectors[contexts] @ self.word_vectors[words].T
        if self.bias is not None:
            out = out + self.bias[words]
        return out

    def all_scores(self, contexts: torch.Tensor) -> torch.Tensor:
        func = "ContextModel.all_scores"
        self._check_ids(contexts, "contexts", self.num_contexts, func)
        out = self.context_vectors[contexts] @ self.word_vectors.T
        if self.bias is not None:
            out = out + self.bias
        return out


# ------------------------------------------------------------------------------------------------
# A small real corpus and skip-gram pairs
# ------------------------------------------------------------------------------------------------
def pydoc_corpus() -> list[str]:
    """The English prose of Python's own help topics (``pydoc_data.topics``), as lower-case words.

    About 64 000 words, shipped with every CPython, so the book needs no download. Tokens are the
    maximal runs of the letters a-z after lower-casing (code fragments give some odd tokens).
    """
    import re

    from pydoc_data.topics import topics

    text = " ".join(topics[key] for key in sorted(topics))
    return re.findall(r"[a-z]+", text.lower())


def build_vocabulary(tokens, min_count: int = 5):
    """Words with at least ``min_count`` occurrences, most frequent first.

    Returns ``(words, counts, ids)``: the list of words, their counts (int64 ``[V]``), and the
    corpus as word ids (int64), with the rarer words dropped (word2vec's ``min_count``).
    """
    from collections import Counter

    func = "build_vocabulary"
    if isinstance(tokens, str) or not hasattr(tokens, "__iter__"):
        raise TypeError(f"{func}: argument 'tokens' must be a sequence of words, got "
                        f"{type(tokens).__name__}")
    min_count = check_int(min_count, "min_count", func, minimum=1)
    tokens = list(tokens)
    freq = Counter(tokens)
    words = sorted((w for w, n in freq.items() if n >= min_count), key=lambda w: (-freq[w], w))
    if not words:
        raise ValueError(f"{func}: no word occurs at least min_count = {min_count} times")
    index = {w: i for i, w in enumerate(words)}
    ids = torch.tensor([index[t] for t in tokens if t in index], dtype=torch.int64)
    counts = torch.tensor([freq[w] for w in words], dtype=torch.int64)
    return words, counts, ids


def subsample_keep_probs(counts: torch.Tensor, t: float = 1e-3) -> torch.Tensor:
    """Probability of keeping each occurrence of a word (word2vec's subsampling of frequent words).

    ``keep(w) = min(1, sqrt(t / f) + t / f)`` with ``f = counts / total``: the formula of the
    word2vec C code and gensim (the paper, Mikolov et al. 2013 eq. 5, discards with probability
    ``1 - sqrt(t / f)``). Frequent words ("the", "of") are thinned, rare ones always kept.

    Parameters
    ----------
    counts : torch.Tensor ``[V]``, non-negative, not all zero.
    t : float > 0, the threshold (1e-3 in gensim, 1e-5 in the paper for billion-word corpora).

    Returns
    -------
    torch.Tensor float64 ``[V]`` in [0, 1].
    """
    func = "subsample_keep_probs"
    if isinstance(counts, torch.Tensor) and not counts.is_floating_point() \
            and not counts.is_complex() and counts.dtype != torch.bool:
        counts = counts.to(torch.float64)
    counts = _check_probs(counts, "counts", func).to(torch.float64)
    t = check_positive_number(t, "t", func)
    f = counts / counts.sum()
    ratio = t / f.clamp(min=torch.finfo(torch.float64).tiny)
    return (ratio.sqrt() + ratio).clamp(max=1.0)


def skipgram_pairs(ids: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All (centre, context) pairs within ``window`` positions of each other.

    Parameters
    ----------
    ids : torch.Tensor of int ``[N]``, the corpus as word ids.
    window : int >= 1

    Returns
    -------
    (centres, contexts): int64 ``[M]`` each, ``M = 2 sum_{d=1}^{window} (N - d)``; both
    directions of each pair are included, as skip-gram predicts each neighbour from the centre.
    (word2vec also shrinks the window at random per position; we keep it fixed.)
    """
    func = "skipgram_pairs"
    if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.is_complex() \
            or ids.dtype == torch.bool or ids.dim() != 1:
        raise TypeError(f"{func}: argument 'ids' must be a 1-D integer tensor, got "
                        f"{getattr(ids, 'dtype', type(ids).__name__)}")
    window = check_int(window, "window", func, minimum=1)
    centres, contexts = [], []
    for d in range(1, min(window, ids.numel() - 1) + 1):
        centres += [ids[:-d], ids[d:]]
        contexts += [ids[d:], ids[:-d]]
    if not centres:
        raise ValueError(f"{func}: argument 'ids' needs at least 2 words, got {ids.numel()}")
    return torch.cat(centres).long(), torch.cat(contexts).long()


# ---------------------------------------------------------------------------------------------
# Asymptotic efficiency (issue 26: the best noise distribution)
# ---------------------------------------------------------------------------------------------
def nce_asymptotic_covariance(log_p: torch.Tensor, log_q: torch.Tensor, k: float,
                              jacobian: torch.Tensor) -> torch.Tensor:
    """Asymptotic covariance of the NCE estimate, times ``n`` (the number of data words).

    For a model ``log p_θ(w)`` with its normaliser learned as a parameter, correctly specified
    (``log p`` is the truth and the model's value at ``θ*``), fitted by minimising the NCE loss
    with ``k`` noise words from ``q`` per data word, ``√n (θ̂ - θ*)`` tends to a normal law with
    covariance ``H⁻¹ M H⁻¹`` (the "sandwich" of an M-estimator; Gutmann & Hyvärinen 2012,
    on NCE's asymptotic normality): with the log-odds ``d = log p - log(k q)`` and ``J = ∂ log p_θ / ∂θ``,

        H = Σ_w (p + k q) σ(d) σ(-d) J Jᵀ,
        M = Cov_p(σ(-d) J) + k Cov_q(σ(d) J).

    At ``q = p`` its block for the model's own parameters (all but the normaliser) is
    ``(1 + 1/k)`` times maximum likelihood's ``I⁻¹`` for the normalised model, and the whole
    matrix is singular (the normaliser moves with them); Chehab et al. (2022) show that the ``q``
    which minimises it is in general not ``p``.

    Parameters
    ----------
    log_p, log_q : Tensor [V]
        Log-probabilities of the data law and of the noise (finite: ``q > 0`` wherever
        ``p > 0`` is what makes NCE consistent; here both must be positive everywhere).
    k : float
        Noise words per data word, > 0.
    jacobian : Tensor [V, P]
        ``∂ log p_θ(w) / ∂θ`` at ``θ*``, the normaliser's parameter included (its column is -1).

    Returns
    -------
    Tensor [P, P], float64.
    """
    func = "nce_asymptotic_covariance"
    log_p = as_float_tensor(log_p, "log_p", func)
    log_q = as_float_tensor(log_q, "log_q", func)
    jacobian = as_float_tensor(jacobian, "jacobian", func)
    if log_p.dim() != 1 or log_p.numel() < 2:
        raise ValueError(f"{func}: argument 'log_p' must be 1-d with at least 2 words, got "
                         f"shape {tuple(log_p.shape)}")
    if log_q.shape != log_p.shape:
        raise ValueError(f"{func}: argument 'log_q' must have the shape of 'log_p' "
                         f"{tuple(log_p.shape)}, got {tuple(log_q.shape)}")
    if jacobian.dim() != 2 or jacobian.shape[0] != log_p.numel():
        raise ValueError(f"{func}: argument 'jacobian' must have shape (V, P) with "
                         f"V={log_p.numel()}, got {tuple(jacobian.shape)}")
    for name, x in (("log_p", log_p), ("log_q", log_q), ("jacobian", jacobian)):
        check_no_nan(x, name, func)
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{func}: argument '{name}' must be finite")
    # log-probabilities rounded to their dtype sum to 1 only to that rounding (bfloat16: ~1e-3)
    for name, x in (("log_p", log_p), ("log_q", log_q)):
        total = float(torch.logsumexp(x.double(), 0))
        if abs(total) > max(1e-6, 4 * x.numel() ** 0.5 * torch.finfo(x.dtype).eps):
            raise ValueError(f"{func}: argument '{name}' must hold log-probabilities (their exp "
                             f"summing to 1), got logsumexp {total:.6g}")
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k <= 0:
        raise ValueError(f"{func}: argument 'k' must be a finite number > 0, got {k!r}")
    lp, lq, jac = log_p.double(), log_q.double(), jacobian.double()
    p, q = lp.exp(), lq.exp()
    d = lp - lq - math.log(k)
    sp, sn = torch.sigmoid(d), torch.sigmoid(-d)
    H = (jac.T * ((p + k * q) * sp * sn)) @ jac

    def cov(g, w):
        m = (w[:, None] * g).sum(0)
        return (g.T * w) @ g - torch.outer(m, m)

    M = cov(-sn[:, None] * jac, p) + k * cov(sp[:, None] * jac, q)
    try:
        Hi = torch.linalg.inv(H)
    except torch.linalg.LinAlgError:
        raise ValueError(f"{func}: argument 'jacobian' must have linearly independent columns "
                         "(the parameters must be identifiable): H = sum_w (p + k q) "
                         "sigma(d) sigma(-d) J J^T is singular") from None
    return Hi @ M @ Hi


def infonce_exact(joint: torch.Tensor, k: int, critic: torch.Tensor | None = None) -> torch.Tensor:
    """The InfoNCE bound on the mutual information of a discrete pair, exactly.

    InfoNCE (van den Oord et al. 2018) is ranking NCE used as a bound: draw ``(x, y_0)`` from the
    joint law and ``k`` negatives ``y_1..y_k`` from the marginal ``p(y)``, and score

        I_NCE = E[ log( (k + 1) e^{f(x, y_0)} / Σ_{j=0}^{k} e^{f(x, y_j)} ) ].

    For every critic ``f``, ``I_NCE ≤ I(X; Y)``, and ``I_NCE ≤ log(k + 1)`` (the ratio is at most
    ``k + 1``): a bound that cannot certify more than ``log(k + 1)`` nats, however large the
    mutual information (Poole et al. 2019). With the best critic, ``f = log(p(y | x) / p(y))``
    (the default), it tends to ``I(X; Y)`` as ``k`` grows.

    Exact: given ``x``, the negatives enter only through ``Σ_j e^{f(x, y_j)}``, which depends on
    how many negatives fell on each *distinct value* of ``f(x, ·)``, a multinomial count vector
    over those ``u`` values. The function sums over all ``C(k + u - 1, u - 1)`` of them (``u = 2``
    for a critic that only tells "the partner of x" from "not": then ``k + 1`` terms). Values of a
    row equal to 2^-40 relative count as one.

    Parameters
    ----------
    joint : Tensor [m, n]
        The joint probabilities ``p(x, y)`` (non-negative, summing to 1; every row and column
        with positive mass).
    k : int
        The number of negatives, ``>= 1``.
    critic : Tensor [m, n], optional
        ``f(x, y)``, finite. Default: ``log p(x, y) - log p(x) - log p(y)`` (``-inf`` where
        ``p(x, y) = 0``).

    Returns
    -------
    0-d float64 Tensor, in nats.
    """
    func = "infonce_exact"
    joint = as_float_tensor(joint, "joint", func)
    if joint.dim() != 2 or joint.shape[0] < 1 or joint.shape[1] < 2:
        raise ValueError(f"{func}: argument 'joint' must have shape (m, n) with n >= 2, got "
                         f"{tuple(joint.shape)}")
    check_finite(joint, "joint", func)
    if bool((joint < 0).any()):
        raise ValueError(f"{func}: argument 'joint' must be non-negative")
    P = joint.detach().double().cpu()
    # a joint normalised in its own dtype sums to 1 only to that dtype's rounding (float32:
    # ~1e-7 per entry); renormalised in float64 after the check
    tol = max(1e-9, 4 * P.numel() ** 0.5 * torch.finfo(joint.dtype).eps)
    if abs(float(P.sum()) - 1) > tol:
        raise ValueError(f"{func}: argument 'joint' must sum to 1 (to {tol:.2g} in "
                         f"{joint.dtype}), sums to {float(P.sum()):.12g}")
    P = P / P.sum()
    px, py = P.sum(1), P.sum(0)
    if bool((px <= 0).any()) or bool((py <= 0).any()):
        raise ValueError(f"{func}: argument 'joint' must give every row and column positive mass")
    k = check_int(k, "k", func, minimum=1)
    m, n = P.shape
    if critic is None:
        f = torch.log(P) - torch.log(px)[:, None] - torch.log(py)[None, :]
    else:
        critic = as_float_tensor(critic, "critic", func)
        if tuple(critic.shape) != (m, n):
            raise ValueError(f"{func}: argument 'critic' must have the shape of 'joint' "
                             f"{(m, n)}, got {tuple(critic.shape)}")
        check_finite(critic, "critic", func)
        f = critic.detach().double().cpu()
    # the bound is unchanged by adding a function of x to f: shift each row to max 0. Kept
    # as logs throughout: exp(f) underflows for a critic spread over more than ~745 nats, and
    # a ratio 0 / 0 would then give NaN where the exact value is finite
    lv = f - f.amax(1, keepdim=True)                                         # [m, n]
    total = torch.zeros((), dtype=torch.float64)
    cache = {}  # rows with the same distinct values and group masses share the enumeration
    for x in range(m):
        # the distinct values of the row, equal to 2^-40 (in log, i.e. relative in e^f) counting
        # as one (the rounding of log p differences must not split a value that is one in exact
        # arithmetic; the result moves by at most that much); -inf (p(x, y) = 0 with the
        # default critic) is a value of its own, and so is any log below -2^900
        key = torch.where(lv[x] > -2.0**900, torch.round(lv[x] * 2.0**40), lv[x])
        uniq, group = torch.unique(key, return_inverse=True)
        u = uniq.shape[0]
        # one log-value per group (the first member's: members differ by <= 2^-40)
        first = torch.full((u,), -1, dtype=torch.long)
        first.scatter_reduce_(0, group, torch.arange(n), "amax", include_self=False)
        values = lv[x][first]                                                # [u], log e^f
        q = torch.bincount(group, weights=py, minlength=u)                  # P(negative in group)
        sig = (tuple(uniq.tolist()), tuple(torch.round(q * 2.0**40).tolist()))
        if sig not in cache:
            n_counts = math.comb(k + u - 1, u - 1)
            if n_counts > 2_000_000:
                raise ValueError(f"{func}: row {x} of the critic has {u} distinct values: "
                                 f"{n_counts} count vectors of k={k} negatives is too many to "
                                 "enumerate (at most 2000000)")
            # stars and bars: the u - 1 bar positions among k + u - 1 slots give the counts
            combos = list(itertools.combinations(range(k + u - 1), u - 1))
            bars = torch.tensor(combos, dtype=torch.float64).reshape(len(combos), u - 1)
            ends = torch.full((bars.shape[0], 1), float(k + u - 1), dtype=torch.float64)
            counts = torch.cat([-torch.ones_like(ends), bars, ends], 1).diff(dim=1) - 1
            log_pc = (math.lgamma(k + 1) - torch.lgamma(counts + 1).sum(1)
                      + torch.where(counts > 0, counts * torch.log(q), 0.0).sum(1))
            # log sum_j e^{f(x, y_j)} over the negatives; a group with no negative adds
            # log 0 = -inf (also where its value is -inf: no -inf + inf)
            lc = torch.where(counts > 0, counts.log() + values, -math.inf)
            cache[sig] = (torch.exp(log_pc), torch.logsumexp(lc, 1))          # P(c), log sum
        pc, log_neg = cache[sig]
        # the positive y_0 enters through its value too: one term per group
        mass = torch.bincount(group, weights=P[x], minlength=u)             # P(x, y_0 in group)
        live = mass > 0
        v0 = values[live]
        term = (math.log(k + 1) + v0[:, None]
                - torch.logaddexp(v0[:, None], log_neg[None, :]))
        total += (mass[live] * (term @ pc)).sum()
    return total


# ------------------------------------------------------------------------------------------------
# Binary and ranking NCE for conditional models: exact population losses
# ------------------------------------------------------------------------------------------------
_RANKING_BLOCK = 1 << 22      # numbers per block of nce_population_loss's ranking enumeration


def _noise_count_vectors(V: int, k: int, log_q: torch.Tensor, func: str):
    """Every count vector of k i.i.d. draws over V words (stars and bars) with its probability."""
    n_counts = math.comb(k + V - 1, V - 1)
    if n_counts > 500_000:
        raise ValueError(f"{func}: kind='ranking' with V={V} words and k={k} has {n_counts} "
                         "count vectors of the noise to enumerate (at most 500000): make V or k "
                         "smaller")
    bars = torch.tensor(list(itertools.combinations(range(k + V - 1), V - 1)),
                        dtype=torch.float64).reshape(n_counts, V - 1)
    ends = torch.full((n_counts, 1), float(k + V - 1), dtype=torch.float64)
    counts = torch.cat([-torch.ones_like(ends), bars, ends], 1).diff(dim=1) - 1        # [M, V]
    log_w = (math.lgamma(k + 1) - torch.lgamma(counts + 1).sum(1)
             + torch.where(counts > 0, counts * log_q, 0.0).sum(1))
    return counts, log_w.exp()


def nce_population_loss(scores: torch.Tensor, log_p: torch.Tensor, log_q: torch.Tensor, k: int,
                        *, kind: str = "binary",
                        context_probs: torch.Tensor | None = None) -> torch.Tensor:
    r"""The expected loss of binary or ranking NCE for a conditional model, exactly.

    The data are pairs ``(c, w)``: a context ``c`` with probability ``context_probs[c]`` and a
    word ``w ~ p_d(· | c)``; each data word comes with ``k`` noise words drawn i.i.d. from
    ``q``. The expectation over all of them is computed exactly (no sampling), so the minimiser
    of this function over a model's parameters is the population optimum of the loss, the point
    the estimate converges to with infinite data (Ma & Collins 2018).

    * ``kind="binary"``: NCE as logistic regression with ``log Z = 0`` fixed (:func:`nce_loss`),

      .. math:: \sum_c \pi_c \Bigl[\sum_w p_d(w|c)\,\mathrm{softplus}(-\Delta_c(w))
                + k \sum_w q(w)\,\mathrm{softplus}(\Delta_c(w))\Bigr],
                \qquad \Delta_c(w) = s(w|c) - \log k q(w).

      Its optimum is ``s = log p_d`` -- *if* the model can put its scores there, that is, if it
      can be self-normalised in every context.
    * ``kind="ranking"``: ranking NCE, the cross entropy of a softmax over the data word and the
      ``k`` noise words with logits ``s - log q`` (:func:`sampled_softmax_loss` with i.i.d.
      noise and accidental hits kept). Only the differences of a context's scores enter, so its
      optimum is any ``s = log p_d + b(c)``: consistent whenever the model can represent
      ``p_d(· | c)`` up to a constant per context. The expectation runs over every count vector
      of the ``k`` noise words (``C(k + V - 1, V - 1)`` of them, each with its multinomial
      probability).

    Parameters
    ----------
    scores : Tensor [C, V]
        The model's scores ``s(w | c)``, finite; gradients flow through them.
    log_p : Tensor [C, V]
        ``log p_d(w | c)``: each row's exp sums to 1; ``-inf`` where a word never occurs.
    log_q : Tensor [V]
        ``log q(w)`` of the noise, finite (NCE needs ``q > 0`` wherever ``p_d > 0``), summing
        to 1 after exp.
    k : int
        Noise words per data word, ``>= 1``.
    kind : {"binary", "ranking"}
    context_probs : Tensor [C], optional
        The contexts' probabilities (default: equally likely).

    Returns
    -------
    0-d Tensor, float64, in nats.

    References
    ----------
    Gutmann & Hyvärinen (2012), JMLR 13 (binary NCE); Mnih & Teh (2012), ICML (``log Z = 0``);
    Ma & Collins (2018), *Noise contrastive estimation and negative sampling for conditional
    models: consistency and statistical efficiency*, EMNLP (the ranking objective and the two
    consistency conditions).
    """
    func = "nce_population_loss"
    if kind not in ("binary", "ranking"):
        raise ValueError(f"{func}: argument 'kind' must be 'binary' or 'ranking', got {kind!r}")
    scores = as_float_tensor(scores, "scores", func)
    log_p = as_float_tensor(log_p, "log_p", func)
    log_q = as_float_tensor(log_q, "log_q", func)
    if scores.dim() != 2 or scores.shape[0] < 1 or scores.shape[1] < 2:
        raise ValueError(f"{func}: argument 'scores' must have shape [C, V] with C >= 1 contexts "
                         f"and V >= 2 words, got {list(scores.shape)}")
    C, V = scores.shape
    if tuple(log_p.shape) != (C, V):
        raise ValueError(f"{func}: argument 'log_p' must have the shape of 'scores' {[C, V]}, "
                         f"got {list(log_p.shape)}")
    if tuple(log_q.shape) != (V,):
        raise ValueError(f"{func}: argument 'log_q' must have shape [{V}] (one per word), got "
                         f"{list(log_q.shape)}")
    check_finite(scores, "scores", func)
    check_no_nan(log_p, "log_p", func)
    if bool((log_p == math.inf).any()):
        raise ValueError(f"{func}: argument 'log_p' must not contain +inf (log-probabilities "
                         "are <= 0)")
    check_finite(log_q, "log_q", func)
    # log-probabilities rounded to their dtype sum to 1 only to that rounding (bfloat16: ~1e-3)
    tol_p = max(1e-6, 4 * V ** 0.5 * torch.finfo(log_p.dtype).eps)
    row_lse = torch.logsumexp(log_p.double(), 1)
    bad = (row_lse.abs() > tol_p).nonzero()
    if bad.numel():
        c = int(bad[0, 0])
        raise ValueError(f"{func}: argument 'log_p' must hold log-probabilities per context "
                         f"(each row's exp summing to 1), row {c} has logsumexp "
                         f"{float(row_lse[c]):.6g}")
    tol_q = max(1e-6, 4 * V ** 0.5 * torch.finfo(log_q.dtype).eps)
    lse_q = float(torch.logsumexp(log_q.double(), 0))
    if abs(lse_q) > tol_q:
        raise ValueError(f"{func}: argument 'log_q' must hold log-probabilities (their exp "
                         f"summing to 1), got logsumexp {lse_q:.6g}")
    k = check_int(k, "k", func, minimum=1)
    if context_probs is None:
        pi = torch.full((C,), 1.0 / C, dtype=torch.float64)
    else:
        pi = as_float_tensor(context_probs, "context_probs", func)
        if tuple(pi.shape) != (C,):
            raise ValueError(f"{func}: argument 'context_probs' must have shape [{C}], got "
                             f"{list(pi.shape)}")
        check_finite(pi, "context_probs", func)
        if bool((pi < 0).any()) or abs(float(pi.double().sum()) - 1) > 1e-6:
            raise ValueError(f"{func}: argument 'context_probs' must be non-negative and sum "
                             f"to 1, sums to {float(pi.double().sum()):.6g}")
        pi = pi.double()
    s = scores.double()
    lp = log_p.double() - row_lse[:, None]            # renormalised in float64
    lq = log_q.double() - lse_q
    p = lp.exp()
    if kind == "binary":
        d = s - math.log(k) - lq
        per_context = (p * F.softplus(-d)).sum(1) + k * (lq.exp() * F.softplus(d)).sum(1)
        return pi @ per_context
    counts, weight = _noise_count_vectors(V, k, lq, func)                   # [M, V], [M]
    logit = s - lq                                                          # [C, V]
    per_context = torch.zeros(C, dtype=torch.float64)
    # [C, rows, V] at a time, at most _RANKING_BLOCK numbers: the whole [C, M, V] array would
    # take gigabytes at the enumeration's limit (C = 50, V = 12: 2.4 GB). This bounds a pass
    # without gradients; with them autograd keeps every block, V * C * M * V numbers in all
    rows = max(1, _RANKING_BLOCK // (C * V))
    for w in range(V):
        if not bool((p[:, w] > 0).any()):
            continue
        expected = torch.zeros(C, dtype=torch.float64)
        for i in range(0, counts.shape[0], rows):
            # the candidates: the data word w plus the noise counts; log of each word's copies
            copies = counts[i:i + rows].clone()
            copies[:, w] += 1.0
            lse = torch.logsumexp(copies.log()[None] + logit[:, None, :], 2)  # [C, rows]
            expected = expected + lse @ weight[i:i + rows]
        per_context = per_context + p[:, w] * (expected - logit[:, w])
    return pi @ per_context


# ------------------------------------------------------------------------------------------------
# A class-factored (two-level) softmax
# ------------------------------------------------------------------------------------------------
def _check_class_sizes(class_sizes, V: int, func: str) -> torch.Tensor:
    if isinstance(class_sizes, torch.Tensor):
        if class_sizes.is_floating_point() or class_sizes.is_complex() or \
                class_sizes.dtype == torch.bool:
            raise TypeError(f"{func}: argument 'class_sizes' must hold integers, got "
                            f"{class_sizes.dtype}")
        sizes = class_sizes.detach().cpu().long().reshape(-1)
    else:
        try:
            items = list(class_sizes)
        except TypeError:
            raise TypeError(f"{func}: argument 'class_sizes' must be a sequence of ints, got "
                            f"{type(class_sizes).__name__}") from None
        # numpy integers are not int but have __index__ (floats and numpy bools have not)
        if not all(hasattr(x, "__index__") and not isinstance(x, bool) for x in items):
            raise TypeError(f"{func}: argument 'class_sizes' must be a sequence of ints")
        sizes = torch.tensor([operator.index(x) for x in items], dtype=torch.long)
    if sizes.numel() < 1 or bool((sizes < 1).any()):
        raise ValueError(f"{func}: argument 'class_sizes' must be at least one positive size")
    if int(sizes.sum()) != V:
        raise ValueError(f"{func}: argument 'class_sizes' must sum to the number of words "
                         f"{V} (rows of 'word_weight'), sums to {int(sizes.sum())}")
    return sizes


def class_softmax_log_prob(hidden: torch.Tensor, class_weight: torch.Tensor,
                           word_weight: torch.Tensor, class_sizes,
                           targets: torch.Tensor | None = None, *,
                           sparse_grad: bool = False) -> torch.Tensor:
    r"""Log-probabilities of a class-factored ("two-level hierarchical") softmax.

    The vocabulary is split into ``n`` classes, contiguous blocks of word ids of sizes
    ``class_sizes`` (number the words by frequency and cut the list into blocks). The model is

    .. math:: p(w \mid h) = \operatorname{softmax}(h W_{\text{class}})_{c(w)}
              \cdot \operatorname{softmax}_{v \in c(w)}(h \cdot u_v)_w,

    a normalised distribution over all ``V`` words whose training cost for one target is
    ``O((n + |c(w)|) d)`` instead of ``O(V d)``: with ``n ≈ √V`` classes of ``√V`` words,
    ``O(√V d)`` (Goodman 2001; Morin & Bengio 2005 for the binary tree, ``O(log V)``;
    Mikolov et al. 2011 for classes of frequency-sorted words). A batch is padded to its
    largest target class: classes of equal size keep that at ``V / n`` (frequency bins of
    equal mass, Mikolov's choice for one example at a time, make the rare words' classes far
    larger, and a batch then pays for the largest it touches). Memory: each example gathers its
    class's word vectors, a ``[B, m, d]`` copy (and with ``sparse_grad`` a gradient of ``B m``
    rows), so examples of one class share nothing: at ``B = 2048``, ``m = 317``, ``d = 256``
    (float32) the copy is 665 MB against a 102 MB word matrix. For large ``B d`` split the batch.

    Parameters
    ----------
    hidden : Tensor [B, d]
    class_weight : Tensor [n, d]
    word_weight : Tensor [V, d]
    class_sizes : sequence of int or int Tensor [n]
        Positive, summing to ``V``.
    targets : int Tensor [B], optional
        With targets: the ``[B]`` log-probabilities of the targets, costing ``O(B (n + m) d)``
        with ``m`` the largest class. Without: the ``[B, V]`` table of all log-probabilities
        (``O(B V d)``, for checking and evaluation).
    sparse_grad : bool
        With targets: gather the target classes' word vectors with
        ``torch.nn.functional.embedding(..., sparse=True)``, so that ``word_weight.grad`` is a
        sparse tensor over the rows used instead of a dense ``[V, d]`` one (default False).

    Returns
    -------
    Tensor [B] or [B, V], in the dtype of the inputs.
    """
    func = "class_softmax_log_prob"
    hidden = as_float_tensor(hidden, "hidden", func, allow_empty=True)   # a batch of 0 is fine
    class_weight = as_float_tensor(class_weight, "class_weight", func)
    word_weight = as_float_tensor(word_weight, "word_weight", func)
    for name, x in (("hidden", hidden), ("class_weight", class_weight),
                    ("word_weight", word_weight)):
        if x.dim() != 2:
            raise ValueError(f"{func}: argument '{name}' must be 2-d, got shape "
                             f"{tuple(x.shape)}")
    # only 'hidden' is checked for NaN/inf: a scan of the [V, d] word vectors costs O(V d), more
    # than the O((n + m) d) per example this function exists to save (measured: 33 ms of a
    # 50 ms step at V = 1e5, d = 64, B = 128); a non-finite weight gives a non-finite output
    check_finite(hidden, "hidden", func)
    B, d = hidden.shape
    V = word_weight.shape[0]
    if class_weight.shape[1] != d or word_weight.shape[1] != d:
        raise ValueError(f"{func}: arguments 'class_weight' and 'word_weight' must have {d} "
                         f"columns (the width of 'hidden'), got {class_weight.shape[1]} and "
                         f"{word_weight.shape[1]}")
    sizes = _check_class_sizes(class_sizes, V, func)
    n = sizes.numel()
    if class_weight.shape[0] != n:
        raise ValueError(f"{func}: argument 'class_weight' must have one row per class ({n}), "
                         f"got {class_weight.shape[0]}")
    if not isinstance(sparse_grad, bool):
        raise TypeError(f"{func}: argument 'sparse_grad' must be a bool, got "
                        f"{type(sparse_grad).__name__}")
    dev = hidden.device
    sizes = sizes.to(dev)
    ends = torch.cumsum(sizes, 0)
    starts = ends - sizes
    log_pc = torch.log_softmax(hidden @ class_weight.T, -1)                   # [B, n]
    if targets is None:
        logits = hidden @ word_weight.T                                       # [B, V]
        m = int(sizes.max())
        cls_of = torch.repeat_interleave(torch.arange(n, device=dev), sizes)  # [V]
        slot = torch.arange(V, device=dev) - starts[cls_of]
        padded = logits.new_full((B, n, m), -math.inf)
        padded[:, cls_of, slot] = logits
        lse = torch.logsumexp(padded, -1)                                     # [B, n]
        return log_pc[:, cls_of] + logits - lse[:, cls_of]
    if not isinstance(targets, torch.Tensor) or targets.is_floating_point() or \
            targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(f"{func}: argument 'targets' must be an integer tensor of word ids, "
                        f"got {getattr(targets, 'dtype', type(targets).__name__)}")
    if tuple(targets.shape) != (B,):
        raise ValueError(f"{func}: argument 'targets' must have shape [{B}], got "
                         f"{list(targets.shape)}")
    if B and (int(targets.min()) < 0 or int(targets.max()) >= V):
        raise ValueError(f"{func}: argument 'targets' must hold word ids in [0, {V}), got "
                         f"values in [{int(targets.min())}, {int(targets.max())}]")
    targets = targets.to(dev).long()
    cls = torch.bucketize(targets, ends, right=True)                          # [B]
    # padded to the largest class among the targets (not among all classes): the cost is
    # O(B (n + m) d) with m that size
    m = int(sizes[cls].max()) if B else 1
    offs = torch.arange(m, device=dev)
    valid = offs[None, :] < sizes[cls][:, None]                               # [B, m]
    rows = (starts[cls][:, None] + offs[None, :]).clamp(max=V - 1)
    vecs = F.embedding(rows, word_weight, sparse=sparse_grad)                 # [B, m, d]
    logits = torch.einsum("bmd,bd->bm", vecs, hidden).masked_fill(~valid, -math.inf)
    own = logits.gather(1, (targets - starts[cls])[:, None]).squeeze(1)
    return log_pc.gather(1, cls[:, None]).squeeze(1) + own - torch.logsumexp(logits, 1)
