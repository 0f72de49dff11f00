"""Beam search and stochastic beam search over a sequence model given as a step function.

A sequence model over a vocabulary ``{0, …, V−1}`` defines a tree: the root is the empty prefix,
the children of a prefix are the prefix extended by one token, and a prefix's log-probability is
the sum of the conditional log-probabilities of its tokens,
``φ_S = Σ_t log p(y_t | y_<t)`` (Kool et al. 2019, §4; this is also the logsumexp of the
log-probabilities of all complete sequences below ``S``, *not* their sum). This module searches
that tree without ever enumerating it.

The step-function protocol
--------------------------
A model is a Python callable, ``step_fn``. The search calls it once per decoding step, with all
the prefixes that are still being extended, in one batch:

**Stateless models** (the default, ``init_state=None``)::

    log_probs = step_fn(prefixes)

- ``prefixes``: ``LongTensor [n, t]``, ``n ≥ 1`` prefixes of the same length ``t``. The first
  call has ``t = 0`` (an ``[n, 0]`` tensor: the empty prefix of each input). Prefixes never
  contain padding: a prefix that has ended (see ``eos``) is never passed again.
- ``log_probs``: floating tensor ``[n, V]``, row ``i`` holds ``log p(· | prefixes[i])``. Rows must
  be normalised (``logsumexp`` of each row is 0: use ``torch.log_softmax``); ``-inf`` means an
  impossible token, NaN and ``+inf`` are errors. ``V`` must be the same at every call. The
  dtype and device of ``log_probs`` are the ones the search computes in.

**Models with state** (RNNs, cached attention, an encoded source sentence), enabled by passing
``init_state``::

    log_probs, new_state = step_fn(prefixes, state)

- ``state`` is a tensor, or a (nested) tuple / list / dict of tensors, whose leading dimension
  is ``n`` and whose row ``i`` belongs to ``prefixes[i]``. At the first call it is
  ``init_state``; afterwards it is the ``new_state`` your previous call returned, **re-indexed by
  the search** (``index_select`` along dim 0 of every tensor) so that row ``i`` is the state of
  the parent of ``prefixes[i]`` — the prefix without its last token. A typical RNN step therefore
  reads the last token ``prefixes[:, -1]`` (when ``t > 0``), updates the hidden state it got,
  and returns the new hidden state beside the log-probabilities.
- Nothing else about the state is assumed; entries that are not tensors are passed through
  unchanged (so they must not depend on the row).

**Several independent inputs** (a batch of source sentences, or many independent repeats of a
search on one model): pass ``batch_size=B``. The first call then receives ``B`` empty prefixes
(``[B, 0]``), one per input, and ``init_state`` (if any) must have leading dimension ``B``. The
search keeps a separate beam per input and never mixes them; rows of later calls come from all
inputs at once (a stateless model that needs to know which input a row belongs to can carry
``torch.arange(B)`` as its state). Results gain a leading dimension ``B``. With
``batch_size=None`` (the default) there is one input, ``init_state`` has leading dimension 1, and
results have no batch dimension.

Sequences, ``eos`` and ``max_len``
-----------------------------------
A sequence ends with the first ``eos`` token (which is part of it) or after ``max_len`` tokens,
whichever comes first; these complete sequences are the leaves of the tree and their
probabilities sum to 1. Ended sequences stay in the beam and compete with open prefixes on their
score: there is no length normalisation and no early stopping (as in Kool et al.'s code), so
beam search maximises the plain log-probability and stochastic beam search is exact. In the
returned ``tokens``, positions after a sequence's end hold ``-1`` (``PAD``); ``lengths`` counts the
tokens, ``eos`` included. If the model has fewer than ``k`` sequences of positive probability, the
missing rows have ``log_probs = -inf`` and length 0.

Randomness comes only from the optional ``generator``; the search runs in whatever autograd mode
the caller has (wrap it in ``torch.no_grad()`` for inference).

References
----------
Kool, van Hoof & Welling (2019), *Stochastic Beams and Where to Find Them: The Gumbel-Top-k Trick
for Sampling Sequences Without Replacement*, ICML (Algorithm 1, eq. 11 for the estimator).
Duffield, Lund & Thorup (2007), *Priority sampling* (the inclusion-probability estimator).
Kool, van Hoof & Welling (2020), *Estimating gradients for discrete random variables by sampling
without replacement*, ICLR (the estimator as a gradient estimator with a built-in baseline).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, NamedTuple

import torch

from softmaxbook import _validate
from softmaxbook._validate import (
    as_float_tensor,
    check_generator,
    check_int,
    check_no_nan,
    check_no_posinf,
    check_positive_number,
)
from softmaxbook.softmax import _on_plain
from softmaxbook.gumbel import (
    _standard_gumbel,
    _log1mexp,
    _softplus,
    gumbel_with_max,
    sample_gumbel,
)

__all__ = [
    "PAD",
    "BeamSearchResult",
    "StochasticBeamSearchResult",
    "SampleResult",
    "beam_search",
    "stochastic_beam_search",
    "stochastic_beam_search_reference",
    "BROKEN_VARIANTS",
    "broken_stochastic_beam_search",
    "sample_sequences",
    "enumerate_sequences",
    "sbs_estimate",
    "sbs_inclusion_log_probs",
    "with_temperature",
    "sets_without_replacement",
    "SBSMoments",
    "sbs_estimator_moments",
    "UnorderedSetWeights",
    "unordered_set_weights",
]

PAD = -1
"""The value of ``tokens`` after the end of a sequence (and in rows that hold no sequence)."""


class BeamSearchResult(NamedTuple):
    """What :func:`beam_search` returns (``[B]`` only when ``batch_size`` is given).

    tokens: ``LongTensor [B, k, L]``, ``PAD`` after each sequence's end; ``L ≤ max_len``.
    lengths: ``LongTensor [B, k]``, tokens in each sequence (``eos`` included).
    log_probs: ``[B, k]``, the log-probability of each sequence, in decreasing order.
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    log_probs: torch.Tensor


class StochasticBeamSearchResult(NamedTuple):
    """What :func:`stochastic_beam_search` returns (``[B]`` only when ``batch_size`` is given).

    tokens: ``LongTensor [B, k, L]``, ``PAD`` after each sequence's end.
    lengths: ``LongTensor [B, k]``.
    log_probs: ``[B, k]``, log-probability ``φ_y`` of each sampled sequence.
    perturbed: ``[B, k]``, its perturbed log-probability ``G_y ~ Gumbel(φ_y)``, in decreasing
        order (the samples come out in the order of a sample without replacement).
    kappa: ``[B]``, the (k+1)-th largest perturbed log-probability over all sequences
        (``-inf`` if there are at most ``k`` sequences), the threshold of :func:`sbs_estimate`.
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    log_probs: torch.Tensor
    perturbed: torch.Tensor
    kappa: torch.Tensor


class SampleResult(NamedTuple):
    """What :func:`sample_sequences` and :func:`enumerate_sequences` return.

    tokens: ``LongTensor [n, L]``, ``PAD`` after each sequence's end.
    lengths: ``LongTensor [n]``.
    log_probs: ``[n]``, the log-probability of each sequence.
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    log_probs: torch.Tensor


# ---------------------------------------------------------------------------------------------
# Calling and checking the step function
# ---------------------------------------------------------------------------------------------

def _check_step_fn(step_fn, func: str) -> None:
    if not callable(step_fn):
        raise TypeError(f"{func}: argument 'step_fn' must be callable, got {type(step_fn).__name__}")


def _check_eos(eos, func: str):
    if eos is None:
        return None
    return check_int(eos, "eos", func, minimum=0)


def _norm_tolerance(dtype: torch.dtype) -> float:
    # How far from 0 a row's logsumexp may be. Measured on log_softmax rows of random logits
    # (V = 3 to 262144, scales 0.1 to 100): float32 rows are within 2e-6 (in float64 too when
    # a model computes in float32 and casts), float16 rows within 2e-4, bfloat16 within 1.3e-3.
    # 1e-5 for float32/float64 is 5 times the worst seen; 16-bit rows get 4 eps (3.9e-3 and
    # 3.1e-2). A bound of 1e-3 let rows whose probabilities sum to 1.001 through: every
    # sample and estimate would then be off by that much without a word.
    eps = torch.finfo(dtype).eps
    return 1e-5 if eps < 1e-6 else 4.0 * eps


def _state_leaves(state):
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, (tuple, list)):
        for s in state:
            yield from _state_leaves(s)
    elif isinstance(state, dict):
        for s in state.values():
            yield from _state_leaves(s)


def _index_state(state, index: torch.Tensor):
    """Select rows ``index`` (dim 0) of every tensor in a nested state; other leaves pass through."""
    if isinstance(state, torch.Tensor):
        return state.index_select(0, index.to(state.device))
    if isinstance(state, tuple) and hasattr(state, "_fields"):  # a NamedTuple
        return type(state)(*(_index_state(s, index) for s in state))
    if isinstance(state, (tuple, list)):
        return type(state)(_index_state(s, index) for s in state)
    if isinstance(state, dict):
        return {key: _index_state(s, index) for key, s in state.items()}
    return state


def _check_state(state, rows: int, what: str, func: str) -> None:
    for leaf in _state_leaves(state):
        if leaf.dim() == 0 or leaf.shape[0] != rows:
            raise ValueError(
                f"{func}: {what} must have leading dimension {rows} (one row per prefix), "
                f"but holds a tensor of shape {tuple(leaf.shape)}"
            )


def _same_device(a: torch.device, b: torch.device) -> bool:
    # torch.device("cuda") (the current device) and torch.device("cuda:0") name the same place.
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


class _Stepper:
    """Calls ``step_fn`` and checks what it returns; remembers ``V`` and the dtype."""

    def __init__(self, step_fn, stateful: bool, device, func: str, eos: int | None = None):
        self.step_fn = step_fn
        self.stateful = stateful
        self.device = device
        self.func = func
        self.eos = eos
        self.vocab = None
        self.dtype = None

    def __call__(self, prefixes: torch.Tensor, state):
        func = self.func
        n = prefixes.shape[0]
        if self.stateful:
            out = self.step_fn(prefixes, state)
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError(
                    f"{func}: argument 'step_fn' must return a pair (log_probs, new_state) when "
                    f"init_state is given, got {type(out).__name__}"
                )
            log_probs, new_state = out
            _check_state(new_state, n, "the new_state returned by 'step_fn'", func)
        else:
            log_probs, new_state = self.step_fn(prefixes), None
        if not isinstance(log_probs, torch.Tensor):
            raise TypeError(
                f"{func}: argument 'step_fn' must return a torch.Tensor of log-probabilities, "
                f"got {type(log_probs).__name__}"
            )
        if not log_probs.is_floating_point():
            raise TypeError(
                f"{func}: argument 'step_fn' must return floating-point log-probabilities, "
                f"got {log_probs.dtype}"
            )
        if log_probs.dim() != 2 or log_probs.shape[0] != n or log_probs.shape[1] == 0:
            raise ValueError(
                f"{func}: argument 'step_fn' returned log-probabilities of shape "
                f"{tuple(log_probs.shape)} for {n} prefixes; expected ({n}, V) with V >= 1"
            )
        if self.vocab is None:
            self.vocab, self.dtype = log_probs.shape[1], log_probs.dtype
            # eos is known to be >= 0; only now do we know V. A token the model never emits
            # would end nothing, and token 0 would be an ordinary token: a silent wrong search.
            if self.eos is not None and self.eos >= self.vocab:
                raise ValueError(
                    f"{func}: argument 'eos'={self.eos} is not a token of the model: 'step_fn' "
                    f"returns log-probabilities over V={self.vocab} tokens, 0 to {self.vocab - 1}"
                )
        elif log_probs.shape[1] != self.vocab:
            raise ValueError(
                f"{func}: argument 'step_fn' returned {log_probs.shape[1]} log-probabilities per "
                f"prefix, but {self.vocab} at the first step; the vocabulary size must not change"
            )
        if not _same_device(log_probs.device, self.device):
            raise ValueError(
                f"{func}: argument 'step_fn' returned log-probabilities on {log_probs.device}, "
                f"but the search runs on {self.device} (pass device=...)"
            )
        log_probs = log_probs.to(self.dtype)
        check_no_nan(log_probs, "step_fn", func)
        check_no_posinf(log_probs, "step_fn", func)
        # Normalisation check in at least float32, so that float16 rows do not overflow.
        lse = torch.logsumexp(log_probs.detach().float(), dim=1)
        bad = ~(lse.abs() <= _norm_tolerance(self.dtype))
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"{func}: argument 'step_fn' returned rows that are not normalised: row {i} has "
                f"logsumexp {float(lse[i]):.4g} (must be 0 within {_norm_tolerance(self.dtype):g}); "
                "return torch.log_softmax(logits, dim=-1)"
            )
        return log_probs, new_state


def _setup(step_fn, k, max_len, eos, init_state, batch_size, device, generator, func):
    _check_step_fn(step_fn, func)
    k = check_int(k, "k", func, minimum=1)
    max_len = check_int(max_len, "max_len", func, minimum=1)
    eos = _check_eos(eos, func)
    if batch_size is not None:
        batch_size = check_int(batch_size, "batch_size", func, minimum=1)
    rows = 1 if batch_size is None else batch_size
    if device is None:
        leaves = list(_state_leaves(init_state))
        device = leaves[0].device if leaves else torch.device("cpu")
    device = torch.device(device)
    if init_state is not None:
        _check_state(init_state, rows, "argument 'init_state'", func)
    generator = check_generator(generator, device, func)
    return k, max_len, eos, rows, device, generator


# ---------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------

def _conditioned_children(loc: torch.Tensor, t: torch.Tensor, generator) -> torch.Tensor:
    """Perturbed values of every child: ``Gumbel(loc)`` per row, conditioned on the row maximum
    being ``t`` (``[n, 1]``, finite; every row of ``loc`` has a finite entry).

    The draws are those of :func:`softmaxbook.gumbel.gumbel_with_max` (same noise, same order),
    and the map is its ``T - softplus(T - G + log(1 - e^{G - Z}))`` (Kool et al. 2019, Appendix
    B), in fewer operations, because stochastic beam search spends most of its own time here
    (its operations are tiny and dispatch-bound):
    ``log(1 - e^d)`` as ``log(-expm1(d))`` alone (``d = G - Z <= 0``). Far below 0 that loses the
    *relative* accuracy of the tiny result (Mächler 2012), but it is added to ``T - G``, so the
    error in the conditioned value stays within a rounding of ``T - G``; ``softplus`` is
    written without a branch, exact at every ``v``. The maximum maps to ``t`` exactly (``d = 0``,
    ``v = -inf``); an impossible child (``-inf``) stays ``-inf``. All ``V`` children are
    conditioned (the map is monotone per row, so the beam gets the same nodes as conditioning
    only each node's best ``k + 1``), and one ``topk`` over the beam's candidates picks them,
    as in beam search.
    """
    g = _standard_gumbel(loc.shape, loc.dtype, loc.device, generator).add_(loc)
    z = g.amax(dim=-1, keepdim=True)
    v = (t - g).add_(torch.expm1(g - z).neg_().log_())
    # T - softplus(v) = min(T, T - v) - log(1 + e^{-|v|}), for every v. log(1 + x) rather than
    # log1p(x) (x in (0, 1]; torch's CPU log1p costs ~6x log): its absolute error is a rounding
    # of 1, below a rounding of the O(1) result, as above. (torch.logaddexp(v, 0) computes the
    # same and costs ~3x these operations.)
    tail = v.abs().neg_().exp_().add_(1.0).log_()
    return torch.minimum(t - v, t).sub_(tail)


def _topk_rows(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x.topk(k, dim=1)`` (sorted, decreasing), faster on CPU for ``k <= n < 64 k``.

    PyTorch's CPU topk takes a partial sort when ``64 k <= n`` and a selection followed by a
    sort otherwise, which costs about twice as much per row near the switch (measured, torch
    2.13: 16 rows, k = 11: 93 us at n = 703, 44 us at n = 704; the same factor at k = 3, 5, 21).
    Padding the rows with -inf up to ``64 k`` columns takes the fast path; it pays where
    ``n >= 32 k``. A padded column can only be returned where the row has fewer than ``k``
    finite entries, with the value -inf; its index is moved into the row (the searches ignore
    the node of a -inf candidate).
    """
    n = x.shape[1]
    if x.device.type == "cpu" and 32 * k <= n < 64 * k:
        pad = x.new_full((x.shape[0], 64 * k - n), -math.inf)
        values, index = torch.cat([x, pad], dim=1).topk(k, dim=1)
        return values, index.clamp_(max=n - 1)
    return x.topk(k, dim=1)


def _search(step_fn, k, max_len, eos, init_state, batch_size, device, generator, stochastic, func,
            variant=None):
    """Beam search over ``B`` independent trees; with ``stochastic``, on perturbed scores.

    ``variant`` (stochastic only) is ``None`` for the exact search, or one of
    :data:`BROKEN_VARIANTS` (see :func:`broken_stochastic_beam_search`).

    The beam of every input holds up to ``width`` nodes, each with its tokens, its
    log-probability ``φ_S`` and its score (``φ_S`` for beam search, the perturbed ``G_S`` for
    stochastic beam search). A node that has ended (``eos``) is a leaf: it keeps its place by
    having one pseudo-child, itself, with the same ``φ`` and ``G`` (the maximum of one Gumbel is
    that Gumbel), so leaves and open prefixes compete for the beam on the same scores.
    """
    k, max_len, eos, B, device, generator = _setup(
        step_fn, k, max_len, eos, init_state, batch_size, device, generator, func
    )
    # Stochastic beam search keeps k + 1 nodes: the (k+1)-th leaf's perturbed value is κ.
    width = k + 1 if stochastic else k
    stepper = _Stepper(step_fn, init_state is not None, device, func, eos)
    state = init_state

    tokens = torch.empty(B, 1, 0, dtype=torch.long, device=device)
    finished = torch.zeros(B, 1, dtype=torch.bool, device=device)
    logp = score = None  # created at the first call, in the dtype the model returns
    raw = None  # variant "raw-parent" only: each node's unconditioned Gumbel

    for t in range(max_len):
        K = tokens.shape[1]
        if logp is None:
            active_flat = torch.arange(B, device=device)
        else:
            active = ~finished & (logp > -math.inf)
            active_flat = active.flatten().nonzero().squeeze(1)
            if active_flat.numel() == 0:
                break  # every node in every beam is a leaf
        prefixes = tokens.flatten(0, 1).index_select(0, active_flat)  # [n, t]
        lp, new_state = stepper(prefixes, state)
        V = stepper.vocab
        if logp is None:
            logp = torch.zeros(B, 1, dtype=lp.dtype, device=device)
            if stochastic:
                # The root's perturbed value is a fresh Gumbel(φ_root = 0), not 0: the samples
                # would be right either way, but κ and the perturbed values (and so the
                # estimator's inclusion probabilities) would not (errata 33).
                score = sample_gumbel((B, 1), generator=generator, dtype=lp.dtype, device=device)
                if variant == "root-zero":  # BROKEN on purpose
                    score = torch.zeros_like(score)
                raw = score
            else:
                score = logp
        # Candidates: children of every open node, plus a last column, the pseudo-child of a
        # leaf (the leaf itself, with its own φ and score).
        n_nodes = B * K
        all_open = active_flat.numel() == n_nodes  # the common case: no scatter needed
        flat_logp, flat_score = logp.flatten(), score.flatten()
        ninf = torch.tensor(-math.inf, dtype=lp.dtype, device=device)
        leaf = (finished & (logp > -math.inf)).flatten()
        leaf_logp = torch.where(leaf, flat_logp, ninf).unsqueeze(1)
        if stochastic:
            # Children's Gumbels conditioned on their maximum being the parent's perturbed
            # value (Kool et al. 2019, eq. 9/10; computed stably in softmaxbook.gumbel). The
            # exact search conditions all V children of every node and one topk over the
            # beam's candidates picks the next beam (see _conditioned_children); the broken
            # variants below keep only the top `m` children of each node.
            m = min(width, V)
            if all_open:  # every node is expanded: no rows to pick
                loc = flat_logp.unsqueeze(1) + lp  # φ_S' = φ_S + log p
                parent_score = flat_score.unsqueeze(1)
            else:
                loc = flat_logp.index_select(0, active_flat).unsqueeze(1) + lp
                parent_score = flat_score.index_select(0, active_flat).unsqueeze(1)
            if variant in (None, "root-zero"):  # root-zero: right children of a wrong root
                g = _conditioned_children(loc, parent_score, generator)
                if not all_open:  # nodes that are not expanded get -inf children
                    fill = torch.full((n_nodes, V), -math.inf, dtype=lp.dtype, device=device)
                    g = fill.index_copy(0, active_flat, g)
                    loc = fill.index_copy(0, active_flat, loc)
                cols = V + 1
                child_logp = torch.cat([loc, leaf_logp], dim=1)
                child_score = torch.cat(
                    [g, torch.where(leaf, flat_score, ninf).unsqueeze(1)], dim=1)
                child_tok = None  # the token is the column, as in beam search
            elif variant == "fresh-children":  # BROKEN: the parent's value is ignored
                fresh = loc + sample_gumbel(loc.shape, generator=generator, dtype=loc.dtype,
                                            device=device)
                g, tok_m = fresh.topk(m, dim=-1)
            elif variant == "raw-parent":  # BROKEN: conditioned on the parent's raw Gumbel
                fresh = loc + sample_gumbel(loc.shape, generator=generator, dtype=loc.dtype,
                                            device=device)
                raw_m, tok_m = fresh.topk(m, dim=-1)
                parent_raw = raw.flatten().index_select(0, active_flat).unsqueeze(1)
                g = _shift_to_max(raw_m, parent_raw)
            if variant in ("fresh-children", "raw-parent"):
                lp_m = loc.gather(1, tok_m)
            if variant in ("fresh-children", "raw-parent") and not all_open:
                # nodes that are not expanded get -inf children
                fill = torch.full((n_nodes, m), -math.inf, dtype=lp.dtype, device=device)
                g = fill.index_copy(0, active_flat, g)
                lp_m = fill.index_copy(0, active_flat, lp_m)
                if variant == "raw-parent":
                    raw_m = fill.index_copy(0, active_flat, raw_m)
                tok_m = torch.zeros((n_nodes, m), dtype=torch.long, device=device).index_copy_(
                    0, active_flat, tok_m)
            if variant in ("fresh-children", "raw-parent"):
                cols = m + 1
                child_logp = torch.cat([lp_m, leaf_logp], dim=1)
                child_score = torch.cat(
                    [g, torch.where(leaf, flat_score, ninf).unsqueeze(1)], dim=1)
                child_tok = torch.cat(
                    [tok_m, torch.full((n_nodes, 1), V, dtype=torch.long, device=device)],
                    dim=1)
            if variant == "raw-parent":
                child_raw = torch.cat(
                    [raw_m, torch.where(leaf, raw.flatten(), ninf).unsqueeze(1)], dim=1)
        else:
            if not all_open:  # rows of nodes that are not expanded get -inf children
                lp = torch.full((n_nodes, V), -math.inf, dtype=lp.dtype,
                                device=device).index_copy_(0, active_flat, lp)
            cols = V + 1
            child_logp = torch.cat([flat_logp.unsqueeze(1) + lp, leaf_logp], dim=1)
            child_score = child_logp
        cand = child_score.view(B, K * cols)
        top_score, top_idx = _topk_rows(cand, min(width, K * cols))  # sorted, decreasing
        parent = torch.div(top_idx, cols, rounding_mode="floor")
        if stochastic and child_tok is not None:
            tok = child_tok.view(B, -1).gather(1, top_idx)
        else:
            tok = top_idx % cols
        new_logp = child_logp.view(B, -1).gather(1, top_idx)
        if variant == "raw-parent":
            raw = child_raw.view(B, -1).gather(1, top_idx)
        impossible = top_score == -math.inf  # fewer than `width` candidates of positive prob.
        new_logp = new_logp.masked_fill(impossible, -math.inf)
        is_leaf = tok == V
        tokens = torch.cat(
            [
                tokens.gather(1, parent.unsqueeze(2).expand(-1, -1, tokens.shape[2])),
                torch.where(is_leaf | impossible, PAD, tok).unsqueeze(2),
            ],
            dim=2,
        )
        # A row without a candidate of positive probability (the model has fewer sequences
        # than the beam is wide) took an arbitrary parent's prefix: it is PAD throughout, so
        # that it comes out as the promised padding row of length 0.
        tokens = tokens.masked_fill(impossible.unsqueeze(2), PAD)
        finished = is_leaf | impossible
        if eos is not None:
            finished = finished | (tok == eos)
        if stepper.stateful:
            # Row of the step function's output that belongs to each new node's parent.
            pos = torch.full((n_nodes,), -1, dtype=torch.long, device=device)
            pos[active_flat] = torch.arange(active_flat.numel(), device=device)
            owner = torch.arange(B, device=device).unsqueeze(1) * K + parent
            src = pos[owner.flatten()]
            keep = (~finished & (new_logp > -math.inf)).flatten()
            state = _index_state(new_state, src[keep])
        logp, score = new_logp, top_score

    # Leaves, best first. Pad to k rows if the model has fewer sequences than that.
    K = logp.shape[1]
    if K < width:
        extra = width - K
        logp = torch.cat([logp, logp.new_full((B, extra), -math.inf)], dim=1)
        score = torch.cat([score, score.new_full((B, extra), -math.inf)], dim=1)
        tokens = torch.cat([tokens, tokens.new_full((B, extra, tokens.shape[2]), PAD)], dim=1)
    lengths = (tokens[:, :k] != PAD).sum(dim=2)
    L = max(int(lengths.max()), 1) if lengths.numel() else 1
    out_tokens = tokens[:, :k, :L]
    out_logp = logp[:, :k]
    if stochastic:
        kappa = score[:, k]
        result = StochasticBeamSearchResult(out_tokens, lengths, out_logp, score[:, :k], kappa)
    else:
        result = BeamSearchResult(out_tokens, lengths, out_logp)
    if batch_size is None:
        result = type(result)(*(x[0] for x in result))
    return result


def beam_search(step_fn: Callable, k: int, max_len: int, *, eos: int | None = None,
                init_state=None, batch_size: int | None = None,
                device: torch.device | str | None = None) -> BeamSearchResult:
    """Beam search: keep the ``k`` most probable prefixes at each step.

    At every step each of the (up to) ``k`` prefixes in the beam is extended by every token,
    and the ``k`` extensions of highest log-probability (ended sequences included, with their
    own log-probability) form the next beam. The score is the plain log-probability: no length
    normalisation, no early stopping. The result is deterministic and favours high probability,
    but it is a heuristic: the ``k`` sequences are not guaranteed to be the ``k`` most probable.

    Parameters
    ----------
    step_fn : callable
        The model; see the module docstring for the protocol (``step_fn(prefixes) → [n, V]``
        log-probabilities, or ``step_fn(prefixes, state) → (log_probs, new_state)``).
    k : int ≥ 1
        Beam width and number of sequences returned.
    max_len : int ≥ 1
        Maximum number of tokens in a sequence (``eos`` included).
    eos : int, optional
        End-of-sequence token; a sequence ends with its first ``eos``.
    init_state : tensor or nested tuple/list/dict of tensors, optional
        Initial state of a model with state (leading dimension 1, or ``batch_size``).
    batch_size : int, optional
        Number of independent inputs searched at once; adds a leading dimension to the result.
    device : torch.device or str, optional
        Device of the prefixes; default: that of ``init_state``, else CPU.

    Returns
    -------
    BeamSearchResult
        ``tokens [k, L]``, ``lengths [k]``, ``log_probs [k]`` (each with a leading ``[B]``
        when ``batch_size`` is given), best first.

    References
    ----------
    Kool et al. (2019), §2.2 (beam search as the deterministic limit of Algorithm 1).
    """
    return _search(step_fn, k, max_len, eos, init_state, batch_size, device, None, False,
                   "beam_search")


def stochastic_beam_search(step_fn: Callable, k: int, max_len: int, *, eos: int | None = None,
                           init_state=None, batch_size: int | None = None,
                           device: torch.device | str | None = None,
                           generator: torch.Generator | None = None
                           ) -> StochasticBeamSearchResult:
    """Sample ``k`` distinct sequences without replacement from a sequence model, exactly.

    Conceptually, every complete sequence ``y`` gets an independent perturbed log-probability
    ``G_y = φ_y + Gumbel(0)``, and the ``k`` sequences with the largest ``G_y`` are a sample
    without replacement (the Gumbel-top-k trick). Stochastic beam search draws those values top
    down instead of bottom up: the root gets a fresh ``Gumbel(0)``; the perturbed values of a
    node's children are Gumbels with locations ``φ_S'`` conditioned on their maximum being the
    parent's value ``G_S`` (the maximum of the leaves below a node is ``Gumbel(φ_S)``); and a
    beam of the ``k + 1`` largest values is kept at every depth. Because a node's value is the
    maximum of its leaves' values, the top ``k + 1`` leaves always lie below the top ``k + 1``
    nodes of each depth, so the result is exactly the top ``k`` (and ``κ``, the ``(k+1)``-th) of
    the bottom-up process, at the cost of a beam search.

    Parameters
    ----------
    step_fn, k, max_len, eos, init_state, batch_size, device
        As in :func:`beam_search` (the protocol is in the module docstring).
    generator : torch.Generator, optional
        Source of randomness, on the search's device.

    Returns
    -------
    StochasticBeamSearchResult
        ``tokens [k, L]``, ``lengths [k]``, ``log_probs [k]``, ``perturbed [k]`` (decreasing)
        and ``kappa []`` (each with a leading ``[B]`` when ``batch_size`` is given). The
        samples come out in the order of a sample without replacement.

    References
    ----------
    Kool, van Hoof & Welling (2019), Algorithm 1; the stable conditioning of their code
    (``gumbel_with_maximum``), here :func:`softmaxbook.gumbel.gumbel_with_max`, applied to each
    node's ``k + 1`` best children only (the conditioning keeps their order, and no other child
    can enter the beam).
    """
    return _search(step_fn, k, max_len, eos, init_state, batch_size, device, generator, True,
                   "stochastic_beam_search")


def stochastic_beam_search_reference(step_fn: Callable, k: int, max_len: int, *,
                                     eos: int | None = None,
                                     generator: torch.Generator | None = None
                                     ) -> StochasticBeamSearchResult:
    """The same algorithm as :func:`stochastic_beam_search`, one node at a time, in plain Python.

    A readable reference (and the peer in the benchmark): the beam is a Python list of
    ``(tokens, φ, G)`` triples, the model is called once per open node with a ``[1, t]``
    prefix, and the candidates are sorted with ``sorted``. It consumes random numbers in the
    same order as the vectorised version (``V`` Gumbels per open node, beam order), so with
    equal generators both return the same sequences. Stateless models and a single input only.

    Returns a :class:`StochasticBeamSearchResult` without batch dimension.
    """
    func = "stochastic_beam_search_reference"
    _check_step_fn(step_fn, func)
    k = check_int(k, "k", func, minimum=1)
    max_len = check_int(max_len, "max_len", func, minimum=1)
    eos = _check_eos(eos, func)
    generator = check_generator(generator, None, func)
    stepper = _Stepper(step_fn, False, torch.device("cpu"), func, eos)

    beam = None  # list of (tokens: tuple[int, ...], phi: float, g: float, ended: bool)
    for t in range(max_len):
        if beam is not None and all(ended for *_, ended in beam):
            break
        candidates = []
        nodes = [((), 0.0, None, False)] if beam is None else beam
        for tokens, phi, g, ended in nodes:
            if ended:  # a complete sequence stays as it is
                candidates.append((tokens, phi, g, True))
                continue
            prefix = torch.tensor([tokens], dtype=torch.long).view(1, t)
            lp, _ = stepper(prefix, None)
            if g is None:  # the root: a fresh Gumbel(0)
                g = float(sample_gumbel((1, 1), generator=generator, dtype=lp.dtype)[0, 0])
            phis = phi + lp[0]
            gs = gumbel_with_max(phis.unsqueeze(0), lp.new_tensor([g]), generator=generator)[0]
            for y in range(lp.shape[1]):
                if float(phis[y]) > -math.inf:
                    candidates.append((tokens + (y,), float(phis[y]), float(gs[y]),
                                       eos is not None and y == eos))
        beam = sorted(candidates, key=lambda c: c[2], reverse=True)[: k + 1]

    rows = beam[:k]
    L = max(len(c[0]) for c in rows)
    tokens = torch.full((k, L), PAD, dtype=torch.long)
    lengths = torch.zeros(k, dtype=torch.long)
    dtype = stepper.dtype
    log_probs = torch.full((k,), -math.inf, dtype=dtype)
    perturbed = torch.full((k,), -math.inf, dtype=dtype)
    for i, (toks, phi, g, _) in enumerate(rows):
        tokens[i, : len(toks)] = torch.tensor(toks, dtype=torch.long)
        lengths[i], log_probs[i], perturbed[i] = len(toks), phi, g
    kappa = torch.tensor(beam[k][2] if len(beam) > k else -math.inf, dtype=dtype)
    return StochasticBeamSearchResult(tokens, lengths, log_probs, perturbed, kappa)


BROKEN_VARIANTS = ("fresh-children", "root-zero", "raw-parent")
"""The deliberate mistakes that :func:`broken_stochastic_beam_search` can make."""


def _shift_to_max(values: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Move each row of ``values`` (decreasing, column 0 the row maximum ``Z``) so that its
    maximum is ``t`` (``[n, 1]``): ``-log(e^{-t} - e^{-Z} + e^{-G})``, in the stable form of
    ``softmaxbook.gumbel.gumbel_with_max`` (Kool et al. 2019, Appendix B)."""
    z, rest = values[..., :1], values[..., 1:]
    v = (t - rest) + _log1mexp(rest - z)
    return torch.cat([t.expand_as(z), t - _softplus(v)], dim=-1)


def broken_stochastic_beam_search(step_fn: Callable, k: int, max_len: int, variant: str, *,
                                  eos: int | None = None, init_state=None,
                                  batch_size: int | None = None,
                                  device: torch.device | str | None = None,
                                  generator: torch.Generator | None = None
                                  ) -> StochasticBeamSearchResult:
    """Stochastic beam search with one deliberate mistake: **not a correct sampler**.

    For teaching and for testing tests: a statistical check of stochastic beam search is only
    worth something if it rejects these. Same arguments and result as
    :func:`stochastic_beam_search`, plus ``variant``, one of :data:`BROKEN_VARIANTS`:

    - ``"fresh-children"``: every child gets a fresh ``Gumbel(φ_S')``, ignoring the parent's
      value. The values of a tree are no longer consistent, and the sampled *sets* follow the
      wrong law.
    - ``"root-zero"``: the root's value is 0 instead of a fresh ``Gumbel(0)``. Every value is
      shifted by the same random amount, so the sets (and their order) are still right, but the
      perturbed values and ``κ`` are not, and :func:`sbs_estimate` is biased.
    - ``"raw-parent"``: children are conditioned on their parent's *raw* Gumbel (the fresh draw
      ``G_{φ_S} ~ Gumbel(φ_S)`` before it was conditioned) instead of its conditioned value
      ``G̃_S``; the beam still ranks by the conditioned values. This is the literal reading of
      the first of the two update lines in the source notes (errata 33).

    Returns
    -------
    StochasticBeamSearchResult
        As :func:`stochastic_beam_search`.
    """
    func = "broken_stochastic_beam_search"
    if not isinstance(variant, str) or variant not in BROKEN_VARIANTS:
        raise ValueError(f"{func}: argument 'variant' must be one of "
                         f"{', '.join(repr(v) for v in BROKEN_VARIANTS)}, got {variant!r}")
    return _search(step_fn, k, max_len, eos, init_state, batch_size, device, generator, True,
                   func, variant=variant)


# ---------------------------------------------------------------------------------------------
# Ancestral sampling and enumeration (the baselines and the ground truth)
# ---------------------------------------------------------------------------------------------

def sample_sequences(step_fn: Callable, n: int, max_len: int, *, eos: int | None = None,
                     init_state=None, device: torch.device | str | None = None,
                     generator: torch.Generator | None = None) -> SampleResult:
    """Draw ``n`` independent sequences (with replacement) by ancestral sampling.

    Each sequence is built token by token, ``y_t ~ p(· | y_<t)``, until ``eos`` or ``max_len``.
    The ``n`` samples are drawn in one batch; duplicates are possible (and, for a peaked model,
    frequent). ``init_state`` (leading dimension 1) is repeated for the ``n`` rows.

    Returns
    -------
    SampleResult
        ``tokens [n, L]`` (``PAD`` after each end), ``lengths [n]``, ``log_probs [n]``.
    """
    func = "sample_sequences"
    _check_step_fn(step_fn, func)
    n = check_int(n, "n", func, minimum=1)
    _, max_len, eos, _, device, generator = _setup(
        step_fn, 1, max_len, eos, init_state, None, device, generator, func
    )
    stepper = _Stepper(step_fn, init_state is not None, device, func, eos)
    state = None if init_state is None else _index_state(
        init_state, torch.zeros(n, dtype=torch.long, device=device))
    tokens = torch.full((n, max_len), PAD, dtype=torch.long, device=device)
    open_rows = torch.arange(n, device=device)
    logp = None
    for t in range(max_len):
        lp, new_state = stepper(tokens[open_rows, :t], state)
        if logp is None:
            logp = torch.zeros(n, dtype=lp.dtype, device=device)
        # Inverse-CDF-free categorical draw: multinomial on the probabilities of each row.
        y = torch.multinomial(lp.exp().float(), 1, generator=generator).squeeze(1)
        tokens[open_rows, t] = y
        logp[open_rows] = logp[open_rows] + lp.gather(1, y.unsqueeze(1)).squeeze(1)
        still = torch.ones_like(y, dtype=torch.bool) if eos is None else y != eos
        open_rows = open_rows[still]
        if stepper.stateful:
            state = _index_state(new_state, still.nonzero().squeeze(1))
        if open_rows.numel() == 0:
            break
    lengths = (tokens != PAD).sum(dim=1)
    return SampleResult(tokens[:, : int(lengths.max())], lengths, logp)


def enumerate_sequences(step_fn: Callable, max_len: int, *, eos: int | None = None,
                        init_state=None, device: torch.device | str | None = None,
                        max_sequences: int = 100_000) -> SampleResult:
    """All complete sequences of positive probability, with their log-probabilities.

    Breadth first over the tree, one batched ``step_fn`` call per depth. Only for small models:
    raises ``ValueError`` when more than ``max_sequences`` open prefixes or sequences appear.
    The log-probabilities of the result sum (in probability) to 1. Sequences come in the order
    of the tree (ended sequences first at each depth, then by token).

    Returns
    -------
    SampleResult
        ``tokens [m, L]`` (``PAD`` after each end), ``lengths [m]``, ``log_probs [m]``.
    """
    func = "enumerate_sequences"
    _check_step_fn(step_fn, func)
    max_sequences = check_int(max_sequences, "max_sequences", func, minimum=1)
    _, max_len, eos, _, device, _ = _setup(
        step_fn, 1, max_len, eos, init_state, None, device, None, func
    )
    stepper = _Stepper(step_fn, init_state is not None, device, func, eos)
    prefixes = torch.empty(1, 0, dtype=torch.long, device=device)
    logp, state = None, init_state
    done_tokens, done_logp = [], []
    for t in range(max_len):
        lp, new_state = stepper(prefixes, state)
        if logp is None:
            logp = torch.zeros(1, dtype=lp.dtype, device=device)
        n, V = lp.shape
        child = (logp.unsqueeze(1) + lp).flatten()
        parent = torch.arange(n, device=device).repeat_interleave(V)
        tok = torch.arange(V, device=device).repeat(n)
        possible = child > -math.inf
        if int(possible.sum()) > max_sequences:
            raise ValueError(
                f"{func}: the model has more than max_sequences={max_sequences} prefixes of "
                f"length {t + 1}; it is too large to enumerate"
            )
        ext = torch.cat([prefixes[parent], tok.unsqueeze(1)], dim=1)
        ended = possible & (tok == eos) if eos is not None else torch.zeros_like(possible)
        if t == max_len - 1:
            ended = possible
        done_tokens.append(ext[ended])
        done_logp.append(child[ended])
        keep = possible & ~ended
        prefixes, logp = ext[keep], child[keep]
        if stepper.stateful:
            state = _index_state(new_state, parent[keep])
        if prefixes.shape[0] == 0:
            break
    L = max(x.shape[1] for x in done_tokens)
    tokens = torch.cat([torch.nn.functional.pad(x, (0, L - x.shape[1]), value=PAD)
                        for x in done_tokens])
    return SampleResult(tokens, (tokens != PAD).sum(dim=1), torch.cat(done_logp))


def with_temperature(step_fn: Callable, temperature: float, *, stateful: bool = False) -> Callable:
    """A step function whose next-token distributions are ``softmax(log p / temperature)``.

    ``temperature < 1`` sharpens every conditional, ``> 1`` flattens it. (This changes each
    conditional, so the sequence distribution is *not* the old one raised to ``1/temperature``
    and renormalised.) Pass ``stateful=True`` for a step function with state.
    """
    func = "with_temperature"
    _check_step_fn(step_fn, func)
    temperature = check_positive_number(temperature, "temperature", func)

    if stateful:
        def tempered(prefixes, state):
            lp, new_state = step_fn(prefixes, state)
            return torch.log_softmax(lp / temperature, dim=-1), new_state
    else:
        def tempered(prefixes):
            return torch.log_softmax(step_fn(prefixes) / temperature, dim=-1)
    return tempered


# ---------------------------------------------------------------------------------------------
# Estimators
# ---------------------------------------------------------------------------------------------

def sbs_inclusion_log_probs(log_probs: torch.Tensor, kappa: torch.Tensor) -> torch.Tensor:
    """``log q(y) = log P(G_y > κ) = log(1 − exp(−exp(φ_y − κ)))``, computed stably.

    ``q(y)`` is the probability that sequence ``y`` is among the ``k`` samples, *given* the
    threshold ``κ`` (Duffield et al. 2007; Kool et al. 2019, §4.2).

    Parameters
    ----------
    log_probs : ``[..., k]`` tensor of ``φ_y`` (``-inf`` marks an empty row: result ``-inf``).
    kappa : ``[...]`` tensor, the ``(k+1)``-th largest perturbed log-probability
        (``-inf``: every sequence was sampled, ``q = 1``).
    """
    func = "sbs_inclusion_log_probs"
    log_probs, kappa = _check_estimator_inputs(None, log_probs, kappa, func)
    return _inclusion_log_probs(log_probs, kappa)


def _working(x: torch.Tensor) -> torch.Tensor:
    # float16 / bfloat16 are computed in float32 and the result cast back: the backward pass
    # divides by q, and in float16 an upstream 400 over q = 0.0025 already overflows to inf.
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _inclusion_log_probs(log_probs, kappa):
    dtype = log_probs.dtype
    return _inclusion_log_probs_work(_working(log_probs), _working(kappa)).to(dtype)


def _inclusion_log_probs_work(log_probs, kappa):
    a = log_probs - kappa.unsqueeze(-1)  # φ − κ; +inf when κ = −inf
    valid = log_probs > -math.inf
    a = torch.where(valid, a, 0.0)  # keep −inf − (−inf) = NaN out of the graph
    # Three regimes of x = e^a, P(G ≤ κ) = exp(−x). Each branch is fed only the a it is used
    # for (a harmless value elsewhere): torch.where gives the branch not taken a zero gradient,
    # but 0 times an infinite local derivative is NaN (issue 17: φ − κ = 97 in float32 made
    # exp overflow, and φ − κ = −800 made log(−expm1(−0)) = log 0).
    # (1) a < −20: x underflows in float32; log q = a − x/2 + O(x²), to 1e-18.
    tiny = a < -20
    a_tiny = torch.where(tiny, a, -30.0)
    # (2) a ≥ 10: q = 1 − e^{−22026}, which is 1 in every float dtype, so log q = 0 and its
    # derivative x e^{−x} / (1 − e^{−x}) is 0 too; clamping there keeps exp from overflowing.
    x = torch.exp(torch.where(tiny, 0.0, a).clamp(max=10.0))
    # (3) otherwise log(1 − e^{−x}) ("log1mexp", Mächler 2012): −expm1(−x) is accurate for
    # small x, log1p(−e^{−x}) for large x.
    large = x > math.log(2)
    big = torch.log1p(-torch.exp(-torch.where(large, x, 1.0)))
    small = torch.log(-torch.expm1(-torch.where(large, 1.0, x)))
    logq = torch.where(large, big, small)
    logq = torch.where(tiny, a_tiny - 0.5 * torch.exp(a_tiny), logq)
    return torch.where(valid, logq, -math.inf)


def _check_log_probabilities(x: torch.Tensor, name: str, func: str) -> None:
    """Log-probabilities are <= 0. A little above 0 is rounding (a sum of per-step values that
    are 0 to rounding); more is a mistake, which gave a finite, wrong estimate (R4 review)."""
    if x.numel() and float(x.max()) > 1e-5:
        raise ValueError(f"{func}: argument '{name}' must hold log-probabilities (<= 0), got a "
                         f"largest value of {float(x.max()):.6g}")


def _check_estimator_inputs(values, log_probs, kappa, func):
    # value checks look through torch.func's wrappers (vmap)
    check_no_nan, check_no_posinf = _on_plain(_validate.check_no_nan), \
        _on_plain(_validate.check_no_posinf)
    log_probs = as_float_tensor(log_probs, "log_probs", func)
    kappa = as_float_tensor(kappa, "kappa", func, allow_empty=True)
    if log_probs.dim() == 0:
        raise ValueError(f"{func}: argument 'log_probs' must have at least one dimension (the k "
                         "samples), got a 0-d tensor")
    check_no_nan(log_probs, "log_probs", func)
    check_no_posinf(log_probs, "log_probs", func)
    check_no_nan(kappa, "kappa", func)
    check_no_posinf(kappa, "kappa", func)
    if tuple(kappa.shape) != tuple(log_probs.shape[:-1]):
        raise ValueError(
            f"{func}: argument 'kappa' must have shape {tuple(log_probs.shape[:-1])} (log_probs "
            f"without its last dimension), got {tuple(kappa.shape)}"
        )
    if values is not None:
        values = as_float_tensor(values, "values", func)
        if values.shape != log_probs.shape:
            raise ValueError(
                f"{func}: argument 'values' must have the shape of 'log_probs' "
                f"{tuple(log_probs.shape)}, got {tuple(values.shape)}"
            )
        check_no_nan(values.masked_fill(log_probs == -math.inf, 0.0), "values", func)
        return values, log_probs, kappa
    return log_probs, kappa


def sbs_estimate(values: torch.Tensor, log_probs: torch.Tensor, kappa: torch.Tensor, *,
                 normalized: bool = False) -> torch.Tensor:
    """Estimate ``E_{y~p}[f(y)]`` from a stochastic beam search sample.

    With the ``k`` samples ``y_1…y_k``, their log-probabilities ``φ`` and the threshold ``κ``,
    the inclusion probabilities are ``q(y) = 1 − exp(−exp(φ_y − κ))`` and

    - ``normalized=False``: ``Σ_i p(y_i) f(y_i) / q(y_i)``, unbiased (Kool et al. 2019, eq. 11);
    - ``normalized=True``: ``Σ_i w_i f(y_i) / Σ_i w_i`` with ``w_i = p(y_i) / q(y_i)``: biased but
      consistent, often of lower variance, and exact for a constant ``f``.

    When every sequence was sampled (``κ = -inf``), ``q = 1`` and both are exact. Rows with
    ``log_probs = -inf`` (fewer sequences than ``k``) are ignored, whatever their ``values``.

    Parameters
    ----------
    values : ``[..., k]``, ``f(y_i)``.
    log_probs : ``[..., k]``, ``φ_i = log p(y_i)``.
    kappa : ``[...]``, the ``(k+1)``-th largest perturbed log-probability.
    normalized : bool
        Use the self-normalised variant.

    Returns
    -------
    ``[...]`` tensor, the estimate (differentiable in ``values`` and ``log_probs``).
    """
    func = "sbs_estimate"
    if not isinstance(normalized, bool):
        raise TypeError(f"{func}: argument 'normalized' must be a bool, "
                        f"got {type(normalized).__name__}")
    values, log_probs, kappa = _check_estimator_inputs(values, log_probs, kappa, func)
    _on_plain(_check_log_probabilities)(log_probs, "log_probs", func)
    dtype = torch.promote_types(values.dtype, log_probs.dtype)
    values, log_probs, kappa = _working(values), _working(log_probs), _working(kappa)
    log_w = log_probs - _inclusion_log_probs(log_probs, kappa)  # log p/q, finite where valid
    valid = log_probs > -math.inf
    log_w = torch.where(valid, log_w, torch.full_like(log_w, -math.inf))
    f = torch.where(valid, values, torch.zeros_like(values))
    if normalized:
        return (torch.softmax(log_w, dim=-1) * f).sum(-1).to(dtype)
    return (torch.exp(log_w) * f).sum(-1).to(dtype)


# ---------------------------------------------------------------------------------------------
# Exact distribution of a sample without replacement (for checking samplers on small models)
# ---------------------------------------------------------------------------------------------

def sets_without_replacement(probs: torch.Tensor, k: int):
    """Exact distribution of the *unordered* set of ``k`` draws without replacement.

    Items are drawn one at a time, each with probability proportional to ``probs`` among those
    not drawn yet (the Plackett–Luce / Gumbel-top-k law). The probability of an ordered draw
    ``(i_1, …, i_k)`` is ``Π_j p_{i_j} / (1 − Σ_{l<j} p_{i_l})``; a set's probability sums this
    over its ``k!`` orders. Cost ``O(C(m, k) · k!)``: for small ``m`` and ``k`` only.

    Parameters
    ----------
    probs : ``[m]`` tensor, non-negative, summing to 1 (zeros are never drawn).
    k : int, ``1 ≤ k ≤`` number of positive entries.

    Returns
    -------
    (subsets, set_probs): ``LongTensor [c, k]`` of sorted index sets (lexicographic order) and
    ``[c]`` float64 probabilities summing to 1.
    """
    func = "sets_without_replacement"
    probs = as_float_tensor(probs, "probs", func)
    if probs.dim() != 1:
        raise ValueError(f"{func}: argument 'probs' must be 1-d, got shape {tuple(probs.shape)}")
    check_no_nan(probs, "probs", func)
    if bool((probs < 0).any()):
        raise ValueError(f"{func}: argument 'probs' must be non-negative")
    p = probs.double().cpu()
    if abs(float(p.sum()) - 1.0) > 1e-6:
        raise ValueError(f"{func}: argument 'probs' must sum to 1, sums to {float(p.sum()):.6g}")
    support = [i for i in range(p.numel()) if p[i] > 0]
    k = check_int(k, "k", func, minimum=1, maximum=len(support))
    pl = p.tolist()
    subsets, set_probs = [], []
    for subset in itertools.combinations(support, k):
        total = 0.0
        for order in itertools.permutations(subset):
            prob, drawn = 1.0, set()
            for i in order:
                # The mass not drawn yet, summed from the remaining probabilities (fsum), not
                # 1 − Σ drawn: that subtraction cancels when the drawn items hold almost all the
                # mass (the log1mexp problem of the Gumbel chapter); [1 − 2e-15, 1e-15, 1e-15]
                # then gave sets whose probabilities summed to 1.0008.
                left = math.fsum(pl[j] for j in support if j not in drawn)
                prob *= pl[i] / left
                drawn.add(i)
            total += prob
        subsets.append(subset)
        set_probs.append(total)
    return torch.tensor(subsets, dtype=torch.long), torch.tensor(set_probs, dtype=torch.float64)


class SBSMoments(NamedTuple):
    """Exact moments of the two estimators of :func:`sbs_estimate` over the randomness of one
    stochastic beam search (see :func:`sbs_estimator_moments`); 0-d float64 tensors."""
    exact: torch.Tensor            # E_{y ~ p}[f(y)], the target
    mean: torch.Tensor             # E[unbiased estimate] (equal to exact, up to quadrature)
    variance: torch.Tensor         # Var[unbiased estimate] (+inf for k = 1)
    mean_normalized: torch.Tensor  # E[normalised estimate]
    variance_normalized: torch.Tensor
    set_mass: torch.Tensor         # Σ over sets of P(set), 1 up to quadrature (a self-check)


def _threshold_grid(rel_max: float, k: int, step: float, device=None):
    """Points ``x = t - φ_C`` and spacing of the trapezoidal rule for the integrals over the
    Gumbel-top-k threshold (:func:`sbs_estimator_moments`, :func:`unordered_set_weights`).

    The integrand ``exp(-x - e^{-x}) Π_{y ∈ S} q(rel_y - x)`` has, where the sample's ``q`` are
    small, its peak near ``x = -log(k + 1)`` with a width of about ``1 / sqrt(k + 1)``: the
    rule's error grows with ``k`` at a fixed step (step 0.2: relative 1e-5 at k = 40, 1e-3 at
    k = 80; R5 review). So the spacing is ``step · min(1, 4 / sqrt(k + 1))`` (``step`` itself
    for k <= 15), the lower end ``min(-6, -log(k + 1) - 2)`` (-6 for k < 54; the integrand
    there is below e^{-39} of its peak) and the upper end 40 past both the largest ``rel`` and
    0 (the integrand falls like e^{-x} or faster beyond them; ``rel_max`` far below 0, a sample
    of tiny probability, made the old upper end fall below the lower one).
    """
    h = step * min(1.0, 4.0 / math.sqrt(k + 1))
    lo = min(-6.0, -math.log(k + 1) - 2.0)
    hi = max(rel_max, 0.0) + 40.0
    return torch.arange(lo, hi + h, h, dtype=torch.float64, device=device), h


def sbs_estimator_moments(log_probs: torch.Tensor, values: torch.Tensor, k: int, *,
                          step: float = 0.2) -> SBSMoments:
    """Exact bias and variance of the stochastic-beam-search estimators for a small model.

    The sample of a search is the set ``S`` of the ``k`` largest perturbed values
    ``G_y ~ Gumbel(φ_y)`` (independent) and ``κ`` the ``(k+1)``-th largest. Their joint law has
    a closed form: ``S`` is the sample and ``κ ∈ dt`` exactly when one sequence ``z`` outside
    ``S`` has ``G_z ∈ dt``, the rest of the complement ``C`` lies below ``t`` and all of ``S``
    above it, and summing over ``z`` (the Gumbel density is ``e^{φ_z - t}`` times its CDF)
    gives::

        P(S, κ ∈ dt) = gumbel_pdf(t; φ_C) · Π_{y ∈ S} q_y(t) dt,
        φ_C = log Σ_{z ∉ S} p(z),   q_y(t) = 1 - exp(-e^{φ_y - t}).

    So any function of the sample has the expectation ``Σ_S ∫ gumbel_pdf(t; φ_C) Π q_y(t)
    g(S, t) dt``: a sum over the ``C(n, k)`` sets of one-dimensional integrals. Each is taken
    by the trapezoidal rule in ``x = t - φ_C`` over ``[-6, max_y (φ_y - φ_C) + 40]``, where the
    integrand is smooth and decays (double-)exponentially at both ends, so the rule converges
    exponentially fast in ``1/step`` (Trefethen & Weideman 2014); ``set_mass`` (the integral of
    ``g = 1``) checks it. The unbiased estimator's mean comes out as ``exact`` (the tower-property
    argument; a check of the computation), its variance is infinite at ``k = 1`` (the
    integrand of its second moment tends to a constant as ``t → ∞``: the weight ``p/q`` grows
    like ``e^t``) and finite from ``k = 2``. The normalised estimator is exactly unbiased at
    ``k = 1`` (it is then ``f`` of a Gumbel-max draw) and at ``k = n`` (it sums over every
    sequence); in between it is biased. Kool, van Hoof & Welling (2019), Sec. 4 and App. C.

    Parameters
    ----------
    log_probs : Tensor [n]
        The log-probabilities of *all* ``n`` sequences of the model (finite, summing to 1 in
        probability within 1e-6), e.g. ``enumerate_sequences(...).log_probs``.
    values : Tensor [n]
        ``f`` of each sequence, finite.
    k : int
        The beam size, ``1 ≤ k``; ``k ≥ n`` samples every sequence (variance 0).
    step : float
        Quadrature step in ``t`` (default 0.2: on chapter 8's toy model the moments at steps 0.2,
        0.1 and 0.05 agree to 2e-15; at 0.3 to 6e-10), for ``k <= 15``; for larger ``k`` the
        step taken is ``step · 4 / sqrt(k + 1)``, since the integrand's peak narrows like
        ``1 / sqrt(k + 1)``.

    Returns
    -------
    SBSMoments
    """
    func = "sbs_estimator_moments"
    log_probs = as_float_tensor(log_probs, "log_probs", func)
    values = as_float_tensor(values, "values", func)
    if log_probs.dim() != 1 or log_probs.numel() < 2:
        raise ValueError(f"{func}: argument 'log_probs' must be 1-d with at least 2 sequences, "
                         f"got shape {tuple(log_probs.shape)}")
    if values.shape != log_probs.shape:
        raise ValueError(f"{func}: argument 'values' must have the shape of 'log_probs' "
                         f"{tuple(log_probs.shape)}, got {tuple(values.shape)}")
    check_no_nan(log_probs, "log_probs", func)
    check_no_nan(values, "values", func)
    if not bool(torch.isfinite(log_probs).all()):
        raise ValueError(f"{func}: argument 'log_probs' must be finite (leave out the sequences "
                         "of probability 0: they are never sampled)")
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{func}: argument 'values' must be finite")
    phi = log_probs.detach().double().cpu()
    total = float(torch.logsumexp(phi, 0))
    if abs(total) > 1e-6:
        raise ValueError(f"{func}: argument 'log_probs' must hold the log-probabilities of all "
                         f"sequences (their exp summing to 1), got logsumexp {total:.6g}")
    n = phi.numel()
    k = check_int(k, "k", func, minimum=1)
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not 0 < step <= 0.5:
        raise ValueError(f"{func}: argument 'step' must be a number in (0, 0.5], got {step!r}")
    f = values.detach().double().cpu()
    p = phi.exp()
    exact = (p * f).sum()
    zero = torch.zeros((), dtype=torch.float64)
    if k >= n:  # the sample is every sequence, κ = -inf, every q = 1: both estimates exact
        return SBSMoments(exact, exact.clone(), zero, exact.clone(), zero.clone(),
                          torch.ones((), dtype=torch.float64))
    n_sets = math.comb(n, k)
    if n_sets > 200_000:
        raise ValueError(f"{func}: C(n, k) = C({n}, {k}) = {n_sets} sets is too many to "
                         "enumerate (at most 200000); use a smaller model")
    # itertools, not torch.combinations: that one builds all n^k tuples and masks them
    sets = torch.tensor(list(itertools.combinations(range(n), k)), dtype=torch.long)
    m1, m2, n1, n2, mass = (torch.zeros((), dtype=torch.float64) for _ in range(5))
    for chunk in sets.split(max(1, 60_000 // (k * 64)), dim=0):
        c = chunk.shape[0]
        inside = torch.zeros(c, n, dtype=torch.bool).scatter_(1, chunk, True)
        phi_c = torch.logsumexp(phi.masked_fill(inside, -math.inf), dim=1)        # [c]
        rel = phi[chunk] - phi_c.unsqueeze(1)                                     # [c, k]
        x, h = _threshold_grid(float(rel.max()), k, step)                         # [m]
        # Gumbel(φ_C) density at t = φ_C + x, and e^{φ_y - t} = e^{rel - x}
        log_pdf = -x - torch.exp(-x)
        z = torch.exp(rel.unsqueeze(2) - x)                                       # [c, k, m]
        q = -torch.expm1(-z)
        dens = torch.exp(log_pdf + torch.log(q).sum(1)) * h                       # [c, m]
        w = p[chunk].unsqueeze(2) / q                                             # p/q
        est = (w * f[chunk].unsqueeze(2)).sum(1)                                  # unbiased
        est_n = est / w.sum(1)                                                    # normalised
        # where a q underflows to 0 (φ_y - t below -745) the density is 0 and p/q = inf:
        # those points contribute 0, not 0 * inf = NaN (R5 review: a sequence of
        # log-probability -800 made every moment NaN)
        live = dens > 0
        dens = torch.where(live, dens, 0.0)
        est = torch.where(live, est, 0.0)
        est_n = torch.where(live, est_n, 0.0)
        mass += dens.sum()
        m1 += (dens * est).sum()
        n1 += (dens * est_n).sum()
        # central second moments about the target: no cancellation of E[X²] - E[X]²
        if k > 1:
            m2 += (dens * (est - exact) ** 2).sum()
        n2 += (dens * (est_n - exact) ** 2).sum()
    variance = m2 - (m1 - exact) ** 2 if k > 1 else torch.tensor(math.inf, dtype=torch.float64)
    return SBSMoments(exact, m1, variance, n1, n2 - (n1 - exact) ** 2, mass)


class UnorderedSetWeights(NamedTuple):
    """Weights of the unordered set estimator (see :func:`unordered_set_weights`)."""
    weights: torch.Tensor             # [..., k]: p(s) R(S, s)
    baseline: torch.Tensor | None     # [..., k, k]: row s gives B(S, s) = baseline[s] @ f
    set_probability: torch.Tensor     # [...]: p(S), the probability of drawing the set S


#: The most numbers one block of the pairwise integrand of :func:`unordered_set_weights` holds.
_PAIR_CHUNK_ELEMENTS = 1 << 22


def unordered_set_weights(log_probs: torch.Tensor, *, step: float = 0.2) -> UnorderedSetWeights:
    """Weights of the unordered set estimator and its built-in baseline (Kool, van Hoof &
    Welling 2020) for a sample without replacement ``S`` of size ``k``.

    With ``p(S)`` the probability of drawing the *set* ``S`` (in any order), the estimator of
    ``E_p[f]`` is ``Σ_{s ∈ S} p(s) R(S, s) f(s)`` with the leave-one-out ratio
    ``R(S, s) = p^{D∖s}(S ∖ s) / p(S)`` (``p^{D∖s}``: sampling without ``s``, renormalised). It is
    unbiased: ``Σ_S p(S) p(s) R(S, s) = p(s) Σ_{S ∋ s} p^{D∖s}(S ∖ s) = p(s)``. For a gradient,
    ``Σ_s p(s) R(S, s) ∇log p(s) (f(s) - B(S, s))`` has the mean
    ``Σ_s ∇p(s) Σ_{S ∋ s} p^{D∖s}(S ∖ s) (f(s) - B(S, s))``: each ``B(S, s)`` is averaged over
    the rest of the sample drawn from ``D ∖ s`` (the law of ``S ∖ s`` when ``s`` is drawn
    *first*, not the law of ``S`` given ``s ∈ S``). The baseline
    ``B(S, s) = p(s) f(s) + Σ_{s' ∈ S ∖ s} p(s') p^{D∖{s,s'}}(S ∖ {s,s'}) / p^{D∖s}(S ∖ s) f(s')``
    is ``p(s) f(s)`` plus the unordered set estimate of ``(1 - p(s)) E_{p^{D∖s}}[f]`` from
    ``S ∖ s``, so under that law its mean is ``E_p[f]`` whatever ``s`` is, and
    ``Σ_s ∇p(s) E_p[f] = 0``. (Given only ``s ∈ S``, its mean is in general not ``E_p[f]``.)

    Every set probability here is an integral over the threshold of the Gumbel-top-k draw
    (:func:`sbs_estimator_moments`): ``p^{D∖A}(S ∖ A) = ∫ gumbel_pdf(t; φ_C) Π_{y ∈ S∖A} q_t(y) dt``
    with ``C`` the sequences outside ``S`` (a common shift of the log-probabilities moves ``t``
    and changes nothing, so the renormalisation is free). ``φ_C = log(1 - Σ_S p)`` needs only
    the sample's own log-probabilities. The integrals are taken by the trapezoidal rule in ``t``.

    Parameters
    ----------
    log_probs : Tensor [..., k]
        Log-probabilities ``log p(s)`` of the ``k`` distinct sampled sequences (finite, their
        probabilities summing to less than 1: some mass must lie outside the sample).
    step : float
        Quadrature step in ``t`` (default 0.2) for ``k <= 15``; ``step · 4 / sqrt(k + 1)`` for
        larger ``k`` (the integrand's peak narrows like ``1 / sqrt(k + 1)``). The integrals are
        summed in logs, so a sample of tiny probability (``p(S)`` below the smallest double)
        still gets finite weights.

    Returns
    -------
    UnorderedSetWeights
        ``weights`` ``[..., k]`` (estimate ``(weights * f).sum(-1)``) and ``baseline``
        ``[..., k, k]`` (``B = baseline @ f``), float64; ``baseline`` is None for ``k = 1``
        (no other sample to build it from); ``set_probability`` ``[...]``, ``p(S)``.
    """
    func = "unordered_set_weights"
    log_probs = as_float_tensor(log_probs, "log_probs", func)
    if log_probs.dim() == 0 or log_probs.shape[-1] == 0:
        raise ValueError(f"{func}: argument 'log_probs' must have a last dimension of k >= 1 "
                         f"sampled sequences, got shape {tuple(log_probs.shape)}")
    check_no_nan(log_probs, "log_probs", func)
    if not bool(torch.isfinite(log_probs).all()):
        raise ValueError(f"{func}: argument 'log_probs' must be finite (a sampled sequence has "
                         "positive probability)")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not 0 < step <= 0.5:
        raise ValueError(f"{func}: argument 'step' must be a number in (0, 0.5], got {step!r}")
    phi = log_probs.detach().double()
    lse = torch.logsumexp(phi, dim=-1)
    if bool((lse >= -1e-12).any()):
        raise ValueError(f"{func}: argument 'log_probs' must leave some probability outside the "
                         "sample (its probabilities sum to 1 or more); with the whole support "
                         "sampled, the exact expectation needs no estimator")
    k = phi.shape[-1]
    # φ_C = log(1 - Σ_S p) = log1mexp(lse), accurate when the sample holds nearly everything
    phi_c = torch.where(lse > -math.log(2), torch.log(-torch.expm1(lse)),
                        torch.log1p(-torch.exp(lse)))
    rel = phi - phi_c.unsqueeze(-1)                                    # [..., k]
    x, h = _threshold_grid(float(rel.max()), k, step, phi.device)
    log_pdf = -x - torch.exp(-x)                                       # Gumbel(φ_C) at φ_C + x
    a = rel.unsqueeze(-1) - x                                          # [..., k, m]: φ_y - t
    e = torch.exp(a)
    log_q = torch.where(a < -20, a - e / 2, torch.log(-torch.expm1(-e)))
    full = log_pdf + log_q.sum(-2)                                     # [..., m]
    # The integrals in logs (logsumexp over the grid): a set of k sequences of small
    # probability has p(S) far below the smallest double (k = 20 sequences of probability
    # e^-40 each), and the ratios below are of such numbers (R5 review: NaN weights).
    log_h = math.log(h)
    log_s = torch.logsumexp(full, -1) + log_h                          # log p(S)
    log_s1 = torch.logsumexp(full.unsqueeze(-2) - log_q, -1) + log_h   # log p^{D∖s}(S∖s)
    weights = torch.exp(phi + log_s1 - log_s.unsqueeze(-1))
    if k == 1:
        return UnorderedSetWeights(weights, None, log_s.exp())
    # [..., k, k]: log p^{D∖{s,s'}}(S ∖ {s,s'}) for s ≠ s'. The integrand is [..., k, k, m]:
    # built a block of rows s at a time, at most _PAIR_CHUNK_ELEMENTS numbers per block (k in the
    # hundreds with its finer grid would otherwise need gigabytes; R5 review of chapter 8)
    left = full.unsqueeze(-2) - log_q                                  # [..., k, m]: row s
    per_row = max(1, left.numel())                 # one row s of the integrand: [..., 1, k, m]
    rows_per_block = max(1, _PAIR_CHUNK_ELEMENTS // per_row)
    log_s2 = torch.cat([
        torch.logsumexp(left[..., i:i + rows_per_block, :].unsqueeze(-2)
                        - log_q.unsqueeze(-3), -1)
        for i in range(0, k, rows_per_block)], dim=-2) + log_h
    ratio = torch.exp(log_s2 - log_s1.unsqueeze(-1))                   # row s: / p^{D∖s}(S∖s)
    eye = torch.eye(k, dtype=torch.bool, device=phi.device)
    baseline = torch.where(eye, torch.ones_like(ratio), ratio) * phi.exp().unsqueeze(-2)
    return UnorderedSetWeights(weights, baseline, log_s.exp())
