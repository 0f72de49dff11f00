"""Binary vs ranking NCE population losses and the class-factored softmax (nce.py)."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from softmaxbook.nce import (class_softmax_log_prob, nce_loss,
                             nce_population_loss, sampled_softmax_loss)

f64 = dict(dtype=torch.float64)


def _problem(C=3, V=4, seed=0, zero=False):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(C, V, generator=g, **f64)
    lp = torch.log_softmax(2 * torch.randn(C, V, generator=g, **f64), 1)
    if zero:  # a word that never occurs in context 0
        lp[0, 1] = -math.inf
        lp[0] = lp[0] - torch.logsumexp(lp[0], 0)
    lq = torch.log_softmax(torch.randn(V, generator=g, **f64), 0)
    return s, lp, lq


def _brute(s, lp, lq, k, kind, pi=None):
    """The expectation over every ordered tuple of k noise words, with the package's losses."""
    C, V = s.shape
    pi = torch.full((C,), 1.0 / C, **f64) if pi is None else pi
    tuples = torch.tensor(list(itertools.product(range(V), repeat=k))).reshape(-1, k)
    total = torch.zeros((), **f64)
    for c in range(C):
        for w in range(V):
            if lp[c, w] == -math.inf:
                continue
            n = tuples.shape[0]
            ws = torch.full((n,), w)
            prob = lp[c, w].exp() * lq[tuples].sum(1).exp()
            if kind == "binary":
                loss = nce_loss(s[c, ws], s[c][tuples], lq[ws], lq[tuples], reduction="none")
            else:
                loss = sampled_softmax_loss(s[c, ws], s[c][tuples], lq[ws], lq[tuples],
                                            reduction="none")
            total = total + pi[c] * (prob * loss).sum()
    return total


@pytest.mark.parametrize("kind", ["binary", "ranking"])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("zero", [False, True])
def test_population_loss_equals_enumeration_of_the_sampled_losses(kind, k, zero):
    s, lp, lq = _problem(zero=zero, seed=k)
    pi = torch.tensor([0.5, 0.2, 0.3], **f64)
    got = nce_population_loss(s, lp, lq, k, kind=kind, context_probs=pi)
    assert torch.allclose(got, _brute(s, lp, lq, k, kind, pi), rtol=1e-12, atol=0)
    assert got.dtype == torch.float64 and got.dim() == 0


@pytest.mark.parametrize("kind", ["binary", "ranking"])
def test_population_loss_gradient(kind):
    s, lp, lq = _problem(C=2, V=3)
    s.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x: nce_population_loss(x, lp, lq, 2, kind=kind), (s,))


def _newton(f, x, iters=60):
    for _ in range(iters):
        g = torch.autograd.functional.jacobian(f, x)
        h = torch.autograd.functional.hessian(f, x)
        step = torch.linalg.pinv(h, hermitian=True) @ g
        t, f0 = 1.0, f(x)
        while f(x - t * step) > f0 + 1e-15 and t > 1e-10:
            t /= 2
        x = x - t * step
        if g.abs().max() < 1e-12:
            break
    return x


def test_optima_with_a_free_table_of_scores():
    """Binary: s* = log p_d (self-normalised); ranking: s* = log p_d + a constant per context."""
    _, lp, lq = _problem(C=2, V=4, seed=5)
    for kind in ("binary", "ranking"):
        f = lambda x: nce_population_loss(x.reshape(2, 4), lp, lq, 3, kind=kind)
        s = _newton(f, torch.zeros(8, **f64)).reshape(2, 4)
        assert torch.allclose(torch.log_softmax(s, 1), lp, atol=1e-9)
        if kind == "binary":
            assert torch.allclose(s, lp, atol=1e-9)


def test_binary_needs_self_normalisation_ranking_does_not():
    """A log-linear model without a per-context bias cannot self-normalise when log Z(c) varies:
    binary NCE's optimum is then wrong, ranking NCE's is the truth (Ma & Collins 2018)."""
    g = torch.Generator().manual_seed(3)
    phi = torch.randn(4, 5, 2, generator=g, **f64)
    theta = torch.tensor([1.5, -1.0], **f64)
    lp = torch.log_softmax(phi @ theta, 1)
    lq = torch.log(lp.exp().mean(0))
    fits = {}
    for kind in ("binary", "ranking"):
        f = lambda t: nce_population_loss(phi @ t, lp, lq, 2, kind=kind)
        fits[kind] = _newton(f, torch.zeros(2, **f64))
    assert torch.allclose(fits["ranking"], theta, atol=1e-8)
    assert (fits["binary"] - theta).abs().max() > 0.5
    # with a bias per context both are right, and binary's scores are normalised
    f = lambda t: nce_population_loss(phi @ t[:2] + t[2:, None], lp, lq, 2, kind="binary")
    t = _newton(f, torch.zeros(6, **f64))
    assert torch.allclose(t[:2], theta, atol=1e-8)
    assert torch.logsumexp(phi @ t[:2] + t[2:, None], 1).abs().max() < 1e-8


def test_population_loss_low_precision_and_one_context():
    s, lp, lq = _problem(C=1, V=3)
    ref = nce_population_loss(s, lp, lq, 2, kind="ranking")
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        got = nce_population_loss(s.to(dt), lp.to(dt), lq.to(dt), 2, kind="ranking")
        assert got.dtype == torch.float64
        assert abs(float(got - ref)) < 0.05


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(kind="softmax"), ValueError, "'kind' must be 'binary' or 'ranking'"),
    (dict(k=0), ValueError, "'k'"),
    (dict(k=1.5), TypeError, "'k'"),
    (dict(k=True), TypeError, "'k'"),
    (dict(scores=torch.zeros(3)), ValueError, "'scores' must have shape"),
    (dict(scores=torch.zeros(3, 1)), ValueError, "'scores' must have shape"),
    (dict(scores=torch.full((3, 4), math.nan)), ValueError, "'scores'"),
    (dict(scores=torch.full((3, 4), math.inf)), ValueError, "'scores'"),
    (dict(log_p=torch.zeros(3, 5)), ValueError, "'log_p' must have the shape"),
    (dict(log_p=torch.zeros(3, 4)), ValueError, "row 0 has logsumexp"),
    (dict(log_p=torch.full((3, 4), math.inf)), ValueError, "must not contain \\+inf"),
    (dict(log_p=torch.full((3, 4), math.nan)), ValueError, "'log_p'"),
    (dict(log_q=torch.zeros(3)), ValueError, "'log_q' must have shape \\[4\\]"),
    (dict(log_q=torch.zeros(4)), ValueError, "'log_q' must hold log-probabilities"),
    (dict(log_q=torch.tensor([0.0, -math.inf, -math.inf, -math.inf])), ValueError, "'log_q'"),
    (dict(context_probs=torch.ones(2) / 2), ValueError, "'context_probs' must have shape"),
    (dict(context_probs=torch.tensor([1.5, -0.25, -0.25])), ValueError, "non-negative"),
    (dict(context_probs=torch.ones(3)), ValueError, "sum to 1"),
    (dict(scores="abc"), TypeError, "'scores'"),
])
def test_population_loss_bad_input(kwargs, exc, match):
    s, lp, lq = _problem()
    args = dict(scores=s, log_p=lp, log_q=lq, k=2)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        nce_population_loss(**args)


def test_population_loss_refuses_too_large_an_enumeration():
    s, lp, lq = _problem(C=1, V=30)
    with pytest.raises(ValueError, match="count vectors"):
        nce_population_loss(s, lp, lq, 20, kind="ranking")
    # binary needs no enumeration
    assert torch.isfinite(nce_population_loss(s, lp, lq, 10**6, kind="binary"))


# ------------------------------------------------------------------------------------------
def _layout(V=23, n=5, d=6, B=7, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    # sizes growing along the list, as for frequency-sorted words
    sizes = torch.diff(torch.linspace(0, 1, n + 1) ** 2 * (V - n)).round().long() + 1
    sizes[-1] += V - int(sizes.sum())
    h = torch.randn(B, d, generator=g, dtype=dtype)
    cw = torch.randn(n, d, generator=g, dtype=dtype)
    ww = torch.randn(V, d, generator=g, dtype=dtype)
    t = torch.randint(V, (B,), generator=g)
    return h, cw, ww, sizes, t


@pytest.mark.parametrize("n", [1, 2, 5, 23])
def test_class_softmax_is_normalised_and_targets_agree(n):
    h, cw, ww, sizes, t = _layout(n=n)
    table = class_softmax_log_prob(h, cw, ww, sizes)
    assert table.shape == (7, 23)
    assert torch.allclose(torch.logsumexp(table, 1), torch.zeros(7, **f64), atol=1e-13)
    got = class_softmax_log_prob(h, cw, ww, sizes, t)
    assert torch.allclose(got, table.gather(1, t[:, None]).squeeze(1), atol=1e-13)


def test_class_softmax_special_cases():
    h, cw, ww, _, t = _layout()
    # one class: the plain softmax over the word vectors
    one = class_softmax_log_prob(h, cw[:1], ww, [23], t)
    assert torch.allclose(one, torch.log_softmax(h @ ww.T, 1).gather(1, t[:, None]).squeeze(1))
    # one word per class: the softmax over the class vectors
    each = class_softmax_log_prob(h, torch.randn(23, 6, **f64), ww, [1] * 23)
    assert torch.allclose(torch.logsumexp(each, 1), torch.zeros(7, **f64), atol=1e-13)
    # the factorisation: log p(class) + log p(word | class), by hand for one example
    sizes = [3, 20]
    lp = class_softmax_log_prob(h[:1], cw[:2], ww, sizes, torch.tensor([4]))
    by_hand = (torch.log_softmax(h[0] @ cw[:2].T, 0)[1]
               + torch.log_softmax(ww[3:] @ h[0], 0)[1])
    assert torch.allclose(lp[0], by_hand, atol=1e-14)


def test_class_softmax_gradients_dense_sparse_and_table_agree():
    h, cw, ww, sizes, t = _layout()
    grads = []
    for mode in ("table", "dense", "sparse"):
        w = ww.clone().requires_grad_(True)
        if mode == "table":
            out = class_softmax_log_prob(h, cw, w, sizes).gather(1, t[:, None]).sum()
        else:
            out = class_softmax_log_prob(h, cw, w, sizes, t, sparse_grad=mode == "sparse").sum()
        out.backward()
        grads.append(w.grad.to_dense())
    assert torch.allclose(grads[0], grads[1], atol=1e-13)
    assert torch.allclose(grads[1], grads[2], atol=1e-13)
    hh = h.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x: class_softmax_log_prob(x, cw, ww, sizes, t), (hh,))


def test_class_softmax_dtypes_and_empty_batch():
    h, cw, ww, sizes, t = _layout()
    ref = class_softmax_log_prob(h, cw, ww, sizes, t)
    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, 0.1)):
        got = class_softmax_log_prob(h.to(dt), cw.to(dt), ww.to(dt), sizes, t)
        assert got.dtype == dt
        assert torch.allclose(got.double(), ref, atol=tol * 10, rtol=tol)
    empty = class_softmax_log_prob(h[:0], cw, ww, sizes, t[:0])
    assert empty.shape == (0,)
    # a near-certain row: huge logits stay finite and normalised
    big = class_softmax_log_prob(1e3 * h, cw, ww, sizes)
    assert torch.isfinite(big).all()
    assert torch.allclose(torch.logsumexp(big, 1), torch.zeros(7, **f64), atol=1e-10)


@pytest.mark.parametrize("change, exc, match", [
    (dict(hidden=torch.zeros(7)), ValueError, "'hidden' must be 2-d"),
    (dict(hidden=torch.full((7, 6), math.nan, **f64)), ValueError, "'hidden'"),
    (dict(class_weight=torch.zeros(5, 4, **f64)), ValueError, "must have 6 columns"),
    (dict(class_weight=torch.zeros(4, 6, **f64)), ValueError, "one row per class \\(5\\)"),
    (dict(class_sizes=[5, 5, 5, 5, 2]), ValueError, "sum to the number of words 23"),
    (dict(class_sizes=[0, 5, 5, 5, 8]), ValueError, "positive"),
    (dict(class_sizes=[]), ValueError, "positive"),
    (dict(class_sizes=[4.0, 4, 5, 5, 5]), TypeError, "ints"),
    (dict(class_sizes=torch.tensor([4.0, 4, 5, 5, 5])), TypeError, "integers"),
    (dict(class_sizes=7), TypeError, "sequence"),
    (dict(targets=torch.zeros(7)), TypeError, "'targets' must be an integer tensor"),
    (dict(targets=torch.zeros(6, dtype=torch.long)), ValueError, "'targets' must have shape"),
    (dict(targets=torch.full((7,), 23)), ValueError, "word ids in \\[0, 23\\)"),
    (dict(targets=torch.full((7,), -1)), ValueError, "word ids"),
    (dict(sparse_grad=1), TypeError, "'sparse_grad' must be a bool"),
])
def test_class_softmax_bad_input(change, exc, match):
    h, cw, ww, sizes, t = _layout()
    args = dict(hidden=h, class_weight=cw, word_weight=ww, class_sizes=sizes, targets=t)
    args.update(change)
    with pytest.raises(exc, match=match):
        class_softmax_log_prob(**args)


def test_class_sizes_accept_numpy_integers():
    # R6 review: a numpy int array is a sequence of ints (np.int64 is not int)
    np = pytest.importorskip("numpy")
    h, cw, ww, sizes, t = _layout()
    ref = class_softmax_log_prob(h, cw, ww, sizes, t)
    for arr in (np.array(sizes.tolist()), np.array(sizes.tolist(), dtype=np.int32)):
        assert torch.equal(class_softmax_log_prob(h, cw, ww, arr, t), ref)
    with pytest.raises(TypeError, match="ints"):
        class_softmax_log_prob(h, cw, ww, np.array(sizes.tolist(), dtype=float), t)
    with pytest.raises(TypeError, match="ints"):
        class_softmax_log_prob(h, cw, ww, [True] * 23, t[:0] * 0)


def test_ranking_enumeration_in_blocks_is_exact(monkeypatch):
    # R6 review: the ranking expectation is built a block of count vectors at a time (memory
    # bounded); any block size gives the same value and gradient
    import softmaxbook.nce as nce
    s, lp, lq = _problem(C=3, V=5, seed=11, zero=True)
    s.requires_grad_(True)
    ref = nce_population_loss(s, lp, lq, 4, kind="ranking")
    (g_ref,) = torch.autograd.grad(ref, s)
    for block in (1, 7, 45, 10**9):
        monkeypatch.setattr(nce, "_RANKING_BLOCK", block)
        got = nce_population_loss(s, lp, lq, 4, kind="ranking")
        (g,) = torch.autograd.grad(got, s)
        assert torch.allclose(got, ref, rtol=1e-13, atol=0)
        assert torch.allclose(g, g_ref, rtol=1e-12, atol=1e-15)
