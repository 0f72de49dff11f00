"""softmaxbook.attention, variational attention: the posterior network, the ELBO, the
importance-weighted bound (sampled, exact and enumerated), the per-location Jacobians, the exact
variance of an enumerable estimator, and the batched REINFORCE runs."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch

from softmaxbook.attention import (AlignmentPosterior, GlimpseNet, alignment_elbo,
                                   enumerated_variance, glimpse_task, iw_bound, iw_bound_exact,
                                   iw_enumerate, jensen_bound, location_jacobians,
                                   marginal_log_lik, per_location_log_lik, train_glimpse,
                                   train_glimpse_runs, train_variational)

D = torch.float64


def _rows(n=5, L=4, seed=0, dtype=D):
    g = torch.Generator().manual_seed(seed)
    lp = torch.log_softmax(torch.randn(n, L, generator=g, dtype=D), -1)
    ll = -3 * torch.rand(n, L, generator=g, dtype=D)
    lq = torch.log_softmax(torch.randn(n, L, generator=g, dtype=D), -1)
    return lp.to(dtype), ll.to(dtype), lq.to(dtype)


def _iw_by_loops(lp, ll, lq, k):
    """E log mean_k w over all L^k tuples, one row at a time with Python loops."""
    out = []
    for p, l, q in zip(lp.tolist(), ll.tolist(), lq.tolist()):
        total = 0.0
        for t in itertools.product(range(len(p)), repeat=k):
            prob = math.exp(sum(q[s] for s in t))
            if prob == 0:
                continue
            w = sum(math.exp(p[s] + l[s] - q[s]) for s in t)
            # a tuple of possible draws whose weights are all 0: the bound is -inf
            total += prob * (math.log(w / k) if w > 0 else -math.inf)
        out.append(total)
    return torch.tensor(out, dtype=D)


# --- alignment_elbo ------------------------------------------------------------------------------
def test_elbo_is_jensen_at_the_prior_and_exact_at_the_posterior():
    lp, ll, lq = _rows()
    marg = torch.logsumexp(lp + ll, -1)
    assert torch.allclose(alignment_elbo(lp, ll, lp), (lp.exp() * ll).sum(-1), rtol=0,
                          atol=1e-14)
    post = torch.log_softmax(lp + ll, -1)
    assert torch.allclose(alignment_elbo(lp, ll, post), marg, rtol=0, atol=1e-14)
    # and in general log p(y|a) - KL(q || posterior)
    kl = (lq.exp() * (lq - post)).sum(-1)
    assert torch.allclose(alignment_elbo(lp, ll, lq), marg - kl, rtol=0, atol=1e-13)
    assert (alignment_elbo(lp, ll, lq) <= marg).all()


def test_elbo_matches_the_model_functions():
    torch.manual_seed(0)
    model = GlimpseNet().double()
    task = glimpse_task(8, 5, generator=torch.Generator().manual_seed(1), dtype=D)
    lp = torch.log_softmax(model.scores(task.annotations), -1)
    ll = per_location_log_lik(model, task.annotations, task.labels)
    assert torch.allclose(alignment_elbo(lp, ll, lp), jensen_bound(model, task.annotations,
                                                                   task.labels), atol=1e-12)
    assert torch.allclose(iw_bound_exact(lp, ll, lp, 1),
                          jensen_bound(model, task.annotations, task.labels), atol=1e-12)
    post = torch.log_softmax(lp + ll, -1)
    assert torch.allclose(alignment_elbo(lp, ll, post),
                          marginal_log_lik(model, task.annotations, task.labels), atol=1e-12)


def test_elbo_zero_q_contributes_nothing_and_its_gradient_is_finite():
    lp = torch.log(torch.tensor([[0.5, 0.5, 0.0]], dtype=D)).requires_grad_(True)
    ll = torch.tensor([[-1.0, -2.0, -0.5]], dtype=D, requires_grad=True)
    lq = torch.log(torch.tensor([[0.25, 0.75, 0.0]], dtype=D)).requires_grad_(True)
    elbo = alignment_elbo(lp, ll, lq)
    expected = 0.25 * (math.log(0.5) - 1 - math.log(0.25)) + 0.75 * (
        math.log(0.5) - 2 - math.log(0.75))
    assert abs(float(elbo.detach()) - expected) < 1e-14
    elbo.sum().backward()
    for x in (lp, ll, lq):
        assert torch.isfinite(x.grad).all()
    # q puts mass where the model gives probability 0: -inf
    lq2 = torch.log(torch.tensor([[0.25, 0.25, 0.5]], dtype=D))
    assert alignment_elbo(lp.detach(), ll.detach(), lq2).item() == -math.inf


def test_elbo_gradcheck():
    lp, ll, lq = (x.requires_grad_(True) for x in _rows(3, 4, seed=2))
    assert torch.autograd.gradcheck(alignment_elbo, (lp, ll, lq))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_elbo_low_precision(dtype):
    lp, ll, lq = _rows(4, 3, seed=3)
    exact = alignment_elbo(lp, ll, lq)
    got = alignment_elbo(lp.to(dtype), ll.to(dtype), lq.to(dtype))
    assert got.dtype == dtype
    tol = {torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]
    assert torch.allclose(got.double(), exact, atol=tol)


def test_elbo_shapes_one_row_many_rows_empty_and_certain():
    lp, ll, lq = _rows(3, 4)
    many = alignment_elbo(lp, ll, lq)
    one = alignment_elbo(lp[1], ll[1], lq[1])
    assert one.shape == () and torch.allclose(one, many[1], rtol=0, atol=0)
    assert alignment_elbo(*(torch.empty(0, 4, dtype=D) for _ in range(3))).shape == (0,)
    # near-certain rows from scores 1000 apart: finite
    lp = torch.log_softmax(torch.tensor([[1000.0, 0.0, -1000.0]], dtype=D), -1)
    lq = torch.log_softmax(torch.tensor([[-1000.0, 1000.0, 0.0]], dtype=D), -1)
    ll = torch.tensor([[-0.1, -1.0, -2.0]], dtype=D)
    assert torch.isfinite(alignment_elbo(lp, ll, lq)).all()
    assert torch.isfinite(iw_bound_exact(lp, ll, lq, 3)).all()


@pytest.mark.parametrize("func", [alignment_elbo,
                                  lambda *a: iw_bound(*a, 2),
                                  lambda *a: iw_bound_exact(*a, 2),
                                  lambda *a: iw_enumerate(*a, 2)])
@pytest.mark.parametrize("change, exc, message", [
    (lambda lp, ll, lq: (lp.tolist(), ll, lq), TypeError, "argument 'log_prior' must be a torch"),
    (lambda lp, ll, lq: (lp, ll.long(), lq), TypeError, "argument 'loglik' must have a floating"),
    (lambda lp, ll, lq: (lp, ll, lq.clone().fill_(math.nan)), ValueError,
     "argument 'log_q' contains NaN"),
    (lambda lp, ll, lq: (lp, ll + math.inf, lq), ValueError, "argument 'loglik' contains \\+inf"),
    (lambda lp, ll, lq: (lp, ll[:, :3], lq), ValueError, "argument 'loglik' must have the shape"),
    (lambda lp, ll, lq: (lp, ll, lq[:1]), ValueError, "argument 'log_q' must have the shape"),
    (lambda lp, ll, lq: (lp[:, :0], ll[:, :0], lq[:, :0]), ValueError,
     "argument 'log_prior' has shape"),
    (lambda lp, ll, lq: (lp + 0.5, ll, lq), ValueError,
     "argument 'log_prior' must be normalised"),
    (lambda lp, ll, lq: (lp, ll, lq.exp()), ValueError, "argument 'log_q' must be normalised"),
    (lambda lp, ll, lq: (torch.full_like(lp, -math.inf), ll, lq), ValueError,
     "argument 'log_prior' has a row that is all -inf"),
])
def test_bounds_bad_input(func, change, exc, message):
    with pytest.raises(exc, match=message):
        func(*change(*_rows(2, 4)))


# --- the importance-weighted bound ----------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 3])
def test_iw_bound_exact_equals_the_enumeration_by_loops(k):
    lp, ll, lq = _rows(4, 3, seed=k)
    # a location with q = 0 (never drawn: nothing changes if its p(s|a) is 0 too), and one with
    # p(s|a) = 0 but q > 0 (the bound is -inf: some possible draw has weight 0 only)
    lq[0] = torch.log(torch.tensor([0.0, 0.4, 0.6], dtype=D))
    lp[0] = torch.log(torch.tensor([0.0, 0.5, 0.5], dtype=D))
    lp[1] = torch.log(torch.tensor([0.7, 0.0, 0.3], dtype=D))
    got = iw_bound_exact(lp, ll, lq, k)
    expected = _iw_by_loops(lp, ll, lq, k)
    assert torch.isfinite(got[0]) and got[1] == -math.inf
    assert torch.allclose(got, expected, rtol=0, atol=1e-13)


def test_iw_bound_rises_with_k_to_the_marginal():
    lp, ll, lq = _rows(6, 4, seed=5)
    marg = torch.logsumexp(lp + ll, -1)
    chain = [alignment_elbo(lp, ll, lq)] + [iw_bound_exact(lp, ll, lq, k) for k in (1, 2, 3, 5)]
    assert torch.allclose(chain[0], chain[1], rtol=0, atol=1e-14)
    for lo, hi in zip(chain[1:], chain[2:] + [marg]):
        assert (lo < hi).all()
    # with q the exact posterior every weight is p(y|a): no gap at any k
    post = torch.log_softmax(lp + ll, -1)
    assert torch.allclose(iw_bound_exact(lp, ll, post, 3), marg, rtol=0, atol=1e-13)


def test_iw_bound_limit_is_over_the_support_of_q():
    # R6 review: with q = 0 where p(s|a) p(y|s,a) > 0 the bound does not rise to log p(y|a)
    # but stays at the log of the sum over q's support, whatever k
    lp = torch.full((1, 4), 0.25, dtype=D).log()
    ll = torch.tensor([[0.1, 0.1, 0.9, 0.9]], dtype=D).log()
    lq = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=D).log()
    on_support = torch.logsumexp((lp + ll)[:, :2], -1)
    for k in (1, 2, 4, 6):
        assert torch.allclose(iw_bound_exact(lp, ll, lq, k), on_support, rtol=0, atol=1e-13)
    assert float(torch.logsumexp(lp + ll, -1) - on_support) > 2


def test_iw_enumerate_probabilities_and_weights():
    lp, ll, lq = _rows(3, 4, seed=6)
    e = iw_enumerate(lp, ll, lq, 3)
    assert e.tuples.shape == (64, 3) and e.prob.shape == (3, 64) and e.weights.shape == (3, 64, 4)
    assert torch.allclose(e.prob.sum(-1), torch.ones(3, dtype=D), atol=1e-14)
    assert torch.allclose(e.weights.sum(-1), torch.ones(3, 64, dtype=D), atol=1e-14)
    assert torch.allclose(e.mean(), iw_bound_exact(lp, ll, lq, 3), rtol=0, atol=1e-14)
    # tuple t = (1, 3, 3): weights at locations 1 and 3 in the ratio w_1 : 2 w_3
    t = 1 * 16 + 3 * 4 + 3
    assert e.tuples[t].tolist() == [1, 3, 3]
    log_w = lp + ll - lq
    w1, w3 = log_w[0, 1].exp(), log_w[0, 3].exp()
    assert torch.allclose(e.weights[0, t], torch.stack(
        [torch.tensor(0.0, dtype=D), w1, torch.tensor(0.0, dtype=D), 2 * w3]) / (w1 + 2 * w3))
    with pytest.raises(ValueError, match="argument 'k' = 3 gives L\\^k = 4\\^3 = 64 tuples"):
        iw_enumerate(lp, ll, lq, 3, max_tuples=63)
    with pytest.raises(ValueError, match="argument 'k' must be >= 1"):
        iw_enumerate(lp, ll, lq, 0)


def test_iw_bound_exact_gradcheck():
    lp, ll, lq = (x.requires_grad_(True) for x in _rows(2, 3, seed=7))

    def f(lp, ll, lq):
        # keep the inputs normalised along the finite-difference steps
        return iw_bound_exact(torch.log_softmax(lp, -1), ll, torch.log_softmax(lq, -1), 2)
    assert torch.autograd.gradcheck(f, (lp, ll, lq))


def test_iw_bound_sampled_averages_to_the_exact_bound():
    # a row where the bounds differ a lot with k: one location explains the label
    lp = torch.log(torch.full((1, 4), 0.25, dtype=D))
    ll = torch.tensor([[0.0, -6.0, -6.0, -6.0]], dtype=D)
    lq = torch.log(torch.tensor([[0.1, 0.3, 0.3, 0.3]], dtype=D))
    k, n = 3, 20000
    draws = iw_bound(lp.expand(n, 4), ll.expand(n, 4), lq.expand(n, 4), k,
                     generator=torch.Generator().manual_seed(11))
    exact = float(iw_bound_exact(lp, ll, lq, k))
    se = float(draws.std()) / math.sqrt(n)
    # within 5 standard errors: a correct sampler fails with probability 5.7e-7 (normal limit)
    assert abs(float(draws.mean()) - exact) < 5 * se
    # the test has power: the k = 2 and k = 4 bounds lie far outside
    for other in (2, 4):
        assert abs(float(iw_bound_exact(lp, ll, lq, other)) - exact) > 10 * se


def test_iw_bound_gradient_is_the_normalised_weights():
    lp, ll, lq = _rows(3, 4, seed=8)
    lp.requires_grad_(True)
    ll.requires_grad_(True)
    g1 = torch.Generator().manual_seed(3)
    value = iw_bound(lp, ll, lq, 4, generator=g1)
    value.sum().backward()
    assert torch.allclose(lp.grad, ll.grad, rtol=0, atol=1e-15)
    assert torch.allclose(lp.grad.sum(-1), torch.ones(3, dtype=D), atol=1e-14)
    assert (lp.grad >= 0).all()
    # reproducible with the same generator seed
    again = iw_bound(lp.detach(), ll.detach(), lq, 4, generator=torch.Generator().manual_seed(3))
    assert torch.equal(again, value.detach())


def test_iw_bound_shapes_and_k_validation():
    lp, ll, lq = _rows(2, 3)
    assert iw_bound(lp, ll, lq, 2, generator=torch.Generator().manual_seed(0)).shape == (2,)
    assert iw_bound(lp[0], ll[0], lq[0], 2).shape == ()
    assert iw_bound(*(torch.empty(0, 3, dtype=D) for _ in range(3)), 2).shape == (0,)
    with pytest.raises(ValueError, match="iw_bound: argument 'k' must be >= 1"):
        iw_bound(lp, ll, lq, 0)
    with pytest.raises(TypeError, match="iw_bound: argument 'k'"):
        iw_bound(lp, ll, lq, 1.5)
    # a location with q = 0 is never drawn
    lq0 = torch.log(torch.tensor([[0.0, 1.0, 0.0]], dtype=D))
    v = iw_bound(lp[:1], ll[:1], lq0, 5, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(v, lp[0, 1] + ll[0, 1], rtol=0, atol=1e-14)


# --- location_jacobians and enumerated_variance -------------------------------------------------
def test_location_jacobians_match_autograd():
    torch.manual_seed(1)
    model = GlimpseNet(64, 8).double()
    task = glimpse_task(3, 4, generator=torch.Generator().manual_seed(2), dtype=D)
    ja, jl = location_jacobians(model, task.annotations, task.labels)
    n_par = sum(p.numel() for p in model.parameters())
    assert ja.shape == jl.shape == (3, 4, n_par)
    params = list(model.parameters())
    lp = torch.log_softmax(model.scores(task.annotations), -1)
    ll = per_location_log_lik(model, task.annotations, task.labels)
    for i, s in ((0, 0), (1, 3), (2, 1)):
        for value, jac in ((lp[i, s], ja), (ll[i, s], jl)):
            grads = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
            flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                              for g, p in zip(grads, params)])
            assert torch.allclose(jac[i, s], flat, rtol=0, atol=1e-13)


def test_enumerated_variance_equals_the_explicit_sum():
    g = torch.Generator().manual_seed(4)
    n, T, B, P = 3, 5, 4, 7
    prob = torch.softmax(torch.randn(n, T, generator=g, dtype=D), -1)
    coeff = torch.randn(n, T, B, generator=g, dtype=D)
    basis = torch.randn(n, B, P, generator=g, dtype=D)
    est = torch.einsum("itb,ibp->itp", coeff, basis)   # [n, T, P]
    mean_i = (prob[..., None] * est).sum(1)
    var_i = (prob * (est - mean_i[:, None]).pow(2).sum(-1)).sum(-1)
    expected = var_i.sum() / n ** 2
    got = enumerated_variance(prob, coeff, basis @ basis.transpose(1, 2))
    assert torch.allclose(got, expected, rtol=1e-12, atol=0)
    # one outcome: no variance
    assert float(enumerated_variance(torch.ones(n, 1, dtype=D), coeff[:, :1],
                                     basis @ basis.transpose(1, 2))) == 0.0


@pytest.mark.parametrize("args, message", [
    (lambda p, c, g: (p[0], c, g), "must have shapes"),
    (lambda p, c, g: (p, c[:, :1], g), "must have shapes"),
    (lambda p, c, g: (p, c, g[:, :2]), "must have shapes"),
    (lambda p, c, g: (p * 2, c, g), "argument 'prob' must have rows that sum to 1"),
    (lambda p, c, g: (torch.tensor([[1.5, -0.5]] * 2, dtype=D), c, g),
     "argument 'prob' has a negative entry"),
    (lambda p, c, g: (p, c.clone().fill_(math.inf), g), "argument 'coeff'"),
    (lambda p, c, g: (p, c, g.long()), "argument 'gram' must have a floating"),
    # R6 review: these were accepted, and -I gave a variance of 0 (clamped)
    (lambda p, c, g: (p, c, -g), "argument 'gram' must be positive semi-definite"),
    (lambda p, c, g: (p, c, g + torch.triu(torch.ones(3, 3, dtype=D), 1)),
     "argument 'gram' must be symmetric"),
])
def test_enumerated_variance_bad_input(args, message):
    prob = torch.tensor([[0.5, 0.5]] * 2, dtype=D)
    coeff = torch.ones(2, 2, 3, dtype=D)
    gram = torch.eye(3, dtype=D).expand(2, 3, 3)
    with pytest.raises((ValueError, TypeError), match=message):
        enumerated_variance(*args(prob, coeff, gram))


# --- AlignmentPosterior and train_variational ---------------------------------------------------
def test_posterior_log_probs_are_normalised_and_read_the_label():
    torch.manual_seed(0)
    q = AlignmentPosterior(64, 8).double()
    task = glimpse_task(6, 5, generator=torch.Generator().manual_seed(0), dtype=D)
    lq = q.log_probs(task.annotations, task.labels)
    assert lq.shape == (6, 5)
    assert torch.allclose(lq.exp().sum(-1), torch.ones(6, dtype=D), atol=1e-14)
    other = (task.labels + 1) % 10
    assert not torch.allclose(lq, q.log_probs(task.annotations, other))
    with pytest.raises(ValueError, match="labels' must be in \\[0, 9\\]"):
        q.log_probs(task.annotations, task.labels + 10)
    with pytest.raises(TypeError, match="argument 'labels' must be an int64"):
        q.log_probs(task.annotations, task.labels.float())
    with pytest.raises(ValueError, match="has D = 3 features"):
        q.log_probs(torch.zeros(2, 5, 3, dtype=D), task.labels[:2])
    with pytest.raises(ValueError, match="must have shape \\[n, L, D\\]"):
        q.log_probs(task.annotations[0], task.labels)


def test_train_variational_records_and_learns_a_little():
    task = glimpse_task(300, 4, generator=torch.Generator().manual_seed(0))
    train, test = task.split(200)
    torch.manual_seed(0)
    seen = []
    model, q, hist = train_variational(train, test, steps=40, eval_every=20,
                                       generator=torch.Generator().manual_seed(1),
                                       on_eval=lambda *args: seen.append(args[0]))
    assert hist.steps == seen == [0, 20, 40]
    assert len(hist.elbo_gap) == 3 and all(g >= -1e-6 for g in hist.elbo_gap)
    assert isinstance(q, AlignmentPosterior)
    with pytest.raises(TypeError, match="argument 'posterior' must be an AlignmentPosterior"):
        train_variational(train, test, steps=1, posterior=GlimpseNet())
    with pytest.raises(ValueError, match="argument 'baseline_decay'"):
        train_variational(train, test, steps=1, baseline_decay=1.0)


# --- train_glimpse_runs ------------------------------------------------------------------------
def test_one_batched_run_is_train_glimpse():
    task = glimpse_task(300, 5, generator=torch.Generator().manual_seed(0))
    train, test = task.split(200)
    for method in ("reinforce", "reinforce-baseline"):
        torch.manual_seed(3)
        m = GlimpseNet()
        before = copy.deepcopy(m.state_dict())
        runs = train_glimpse_runs(method, train, test, [m], steps=6, eval_every=2,
                                  generator=torch.Generator().manual_seed(7))
        assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
        _, h = train_glimpse(method, train, test, steps=6, eval_every=2, model=m,
                             entropy_weight=0.0, generator=torch.Generator().manual_seed(7))
        assert runs.steps == h.steps
        assert torch.allclose(runs.attention_on_target[:, 0],
                              torch.tensor(h.attention_on_target, dtype=D), atol=1e-5)
        assert runs.accuracy[:, 0].tolist() == h.accuracy
        assert runs.reward.shape == (6, 1) and runs.entropy.shape == (4, 1)


def test_batched_runs_shapes_and_bad_input():
    task = glimpse_task(120, 3, generator=torch.Generator().manual_seed(0))
    train, test = task.split(100)
    torch.manual_seed(0)
    models = [GlimpseNet() for _ in range(3)]
    runs = train_glimpse_runs("reinforce", train, test, models, steps=3, eval_every=3)
    assert runs.attention_on_target.shape == (2, 3)
    assert (runs.entropy <= math.log(3) + 1e-6).all()
    with pytest.raises(ValueError, match="argument 'method' must be 'reinforce' or"):
        train_glimpse_runs("soft", train, test, models)
    with pytest.raises(TypeError, match="argument 'models' must be a non-empty list"):
        train_glimpse_runs("reinforce", train, test, [])
    with pytest.raises(ValueError, match="GlimpseNets of one size"):
        train_glimpse_runs("reinforce", train, test, [GlimpseNet(), GlimpseNet(hidden=8)])
