"""Gradient properties of every differentiable public function of softmax, gumbel and beam.

Over extreme inputs (tiny and huge magnitudes, values at the edges of exp's range, ``-inf``
where a function allows it) and every float dtype:

1. wherever the value is finite, the gradient is finite -- except where the exact gradient
   itself is too large for the dtype (e.g. ``log1mexp'(x) = -1/expm1(-x)`` at ``x = -1e-39`` in
   float32): those entries are left out, judged by the float64 gradient at the same input;
2. in float64, the gradient matches central finite differences along a random direction
   wherever those are meaningful: finite, and stable when the step is halved (a step that
   crosses a kink or a switch of the argmax gives two different quotients, and is skipped).

Hypothesis runs derandomized (the same examples on every run, so CI is reproducible), with few
examples per function: the whole file takes a few seconds.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from softmaxbook import beam, gumbel, softmax

INF = math.inf
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

_MAGNITUDES = (0.0, 5e-324, 1e-300, 1e-40, 1e-20, 1e-10, 1e-8, 1e-3, 0.5, math.log(2), 1.0,
               20.0, 50.0, 88.5, 89.0, 100.0, 700.0, 710.0, 800.0, 1e4, 1e30, 1e300)
EXTREME = st.sampled_from(_MAGNITUDES + tuple(-m for m in _MAGNITUDES))
MODERATE = st.floats(-30.0, 30.0, allow_nan=False)
REAL = st.one_of(EXTREME, MODERATE)
REAL_OR_NEGINF = st.one_of(EXTREME, MODERATE, st.just(-INF))


def _vectors(elements, min_size=1, max_size=5):
    return st.lists(elements, min_size=min_size, max_size=max_size)


def _weights(n_out, dtype):
    w = torch.linspace(0.5, 1.5, max(n_out, 1), dtype=torch.float64)[:n_out]
    return w.to(dtype)


def _loss(fn, inputs):
    """A weighted sum of the finite outputs of ``fn(*inputs)``, and the output itself."""
    out = fn(*inputs)
    out = out.reshape(-1)
    finite = torch.isfinite(out.detach())
    w = _weights(out.numel(), out.dtype)
    return (torch.where(finite, out, 0.0) * w).sum(), out.detach()


def _grads(fn, inputs, diff):
    xs = [x.detach().clone().requires_grad_(i in diff) for i, x in enumerate(inputs)]
    loss, out = _loss(fn, xs)
    gs = torch.autograd.grad(loss, [xs[i] for i in diff], allow_unused=True)
    gs = [torch.zeros_like(xs[i]) if g is None else g for i, g in zip(diff, gs)]
    return loss.detach(), out, gs


def check_gradients(fn, inputs64, diff=(0,), dtypes=DTYPES, fd=True, elementwise=False):
    """The two properties of the module docstring for ``fn`` at ``inputs64`` (float64 values;
    integer tensors pass through unchanged); ``diff``: the positions differentiated. For an
    ``elementwise`` function, an entry whose own value is infinite is not checked."""
    for dtype in dtypes:
        big = torch.finfo(dtype).max
        inputs = [torch.where(torch.isfinite(x), x.clamp(-big, big), x).to(dtype)
                  if x.is_floating_point() else x for x in inputs64]
        loss, out, gs = _grads(fn, inputs, diff)
        if not torch.isfinite(out).any():
            continue
        # the float64 gradient at the same (rounded) input says which entries are representable
        ref_inputs = [x.double() if x.is_floating_point() else x for x in inputs]
        _, _, ref = _grads(fn, ref_inputs, diff)
        for g, r, i in zip(gs, ref, diff):
            # NaN is never the exact gradient where the value is finite: it counts as
            # representable, so a NaN from the function under test is not excused by itself
            representable = ~(torch.isinf(r) | (r.abs() >= big / 4))
            if elementwise:
                representable &= torch.isfinite(out).reshape(representable.shape)
            bad = representable & ~torch.isfinite(g)
            assert not bad.any(), (
                f"{dtype}: gradient of input {i} not finite where the value is finite: "
                f"inputs {[x.tolist() for x in inputs]}, out {out.tolist()}, grad {g.tolist()}, "
                f"float64 grad {r.tolist()}")
    if fd:
        _check_finite_differences(fn, inputs64, diff)


def _check_finite_differences(fn, inputs64, diff):
    inputs = [x.clone() for x in inputs64]
    loss, out, gs = _grads(fn, inputs, diff)
    if not torch.isfinite(loss):
        return
    gen = torch.Generator().manual_seed(1)
    dirs = []
    for i, x in enumerate(inputs):
        if i in diff:
            v = torch.randn(x.shape, dtype=torch.float64, generator=gen)
            # perturb finite entries only, each on its own scale
            v = torch.where(torch.isfinite(x), v * x.abs().clamp(min=1.0), 0.0)
            dirs.append(v)
        else:
            dirs.append(None)
    ad = sum((g * v).sum() for g, v in zip(gs, [d for d in dirs if d is not None]))
    if not torch.isfinite(ad):
        return
    finite_out = torch.isfinite(out)

    def directional(h):
        vals = []
        for sign in (1.0, -1.0):
            moved = [x if d is None else torch.where(torch.isfinite(x), x + sign * h * d, x)
                     for x, d in zip(inputs, dirs)]
            try:
                o = fn(*moved).detach().reshape(-1)
            except ValueError:  # the step left the domain (e.g. log1mexp above 0)
                return math.nan
            if not torch.equal(torch.isfinite(o), finite_out):
                return math.nan
            w = _weights(o.numel(), o.dtype)
            vals.append((torch.where(finite_out, o, 0.0) * w).sum())
        return float((vals[0] - vals[1]) / (2 * h))

    h = 1e-6
    d1, d2 = directional(h), directional(h / 2)
    if not (math.isfinite(d1) and math.isfinite(d2)):
        return
    scale = max(abs(d1), abs(d2), 1e-300)
    if abs(d1 - d2) > 1e-4 * scale + 1e-9:  # not smooth at this step size: not meaningful
        return
    assert abs(float(ad) - d2) <= 1e-3 * scale + 1e-7, (
        f"gradient {float(ad)} vs finite differences {d2} (h={h / 2}) at "
        f"{[x.tolist() for x in inputs64]}")


def t64(values):
    return torch.tensor(values, dtype=torch.float64)


def _at_least_one_finite(values):
    if all(v == -INF for v in values):
        values = [0.0] + list(values[1:])
    return values


# ------------------------------------------------------------------------------------------------
# softmax module
# ------------------------------------------------------------------------------------------------
TEMPERATURES = st.sampled_from([1.0, 1e-3, 0.3, 7.0, 1e3])


@SETTINGS
@given(x=_vectors(REAL_OR_NEGINF), temperature=TEMPERATURES)
def test_softmax_family(x, temperature):
    x = t64(x)
    check_gradients(lambda a: softmax.logsumexp(a), [x])
    check_gradients(lambda a: softmax.softmax(a, temperature=temperature), [x])
    check_gradients(lambda a: softmax.log_softmax(a, temperature=temperature), [x])


@SETTINGS
@given(x=_vectors(st.one_of(REAL, st.just(INF), st.just(-INF))))
def test_elementwise(x):
    x = t64(x)
    for f in (softmax.sigmoid, softmax.softplus, softmax.log_sigmoid):
        check_gradients(f, [x], elementwise=True)


@SETTINGS
@given(p=_vectors(st.sampled_from([0.0, 5e-324, 1e-300, 1e-40, 1e-8, 1e-3, 0.25, 0.5,
                                   1 - 1e-8, 1 - 2**-53, 1.0])))
def test_logit(p):
    check_gradients(softmax.logit, [t64(p)], elementwise=True)


@SETTINGS
@given(z=_vectors(REAL), y=st.sampled_from([0.0, 1.0, 0.3, 1e-30]))
def test_logistic_loss(z, y):
    z = t64(z)
    target = torch.full_like(z, y)
    check_gradients(lambda a, b: softmax.logistic_loss(a, b, reduction="none"), [z, target],
                    diff=(0, 1))


@SETTINGS
@given(x=_vectors(REAL_OR_NEGINF, min_size=2), data=st.data())
def test_cross_entropy(x, data):
    x = t64(_at_least_one_finite(x))
    n = x.numel()
    label = data.draw(st.integers(0, n - 1))
    check_gradients(lambda a: softmax.cross_entropy(a, torch.tensor(label)), [x])
    probs = t64(data.draw(st.lists(st.sampled_from([0.0, 1e-30, 0.2, 1.0]), min_size=n,
                                   max_size=n)))
    check_gradients(lambda a, b: softmax.cross_entropy(a, b, reduction="none"), [x, probs],
                    diff=(0, 1))


# ------------------------------------------------------------------------------------------------
# gumbel module (random functions: a fixed generator, so every call draws the same noise)
# ------------------------------------------------------------------------------------------------
def g(seed=3):
    return torch.Generator().manual_seed(seed)


@SETTINGS
@given(x=_vectors(st.one_of(EXTREME, MODERATE, st.just(-INF)).map(lambda v: -abs(v))))
def test_log1mexp(x):
    check_gradients(gumbel.log1mexp, [t64(x)], elementwise=True)


@SETTINGS
@given(loc=_vectors(REAL_OR_NEGINF), upper=st.one_of(REAL, st.just(INF)))
def test_truncated_gumbel(loc, upper):
    check_gradients(lambda a, b: gumbel.truncated_gumbel(a, b, generator=g()),
                    [t64(loc), t64(upper)], diff=(0, 1))


@SETTINGS
@given(loc=_vectors(REAL_OR_NEGINF), maximum=REAL)
def test_gumbel_with_max(loc, maximum):
    loc = _at_least_one_finite(loc)
    check_gradients(lambda a, b: gumbel.gumbel_with_max(a, b, generator=g()),
                    [t64(loc), t64(maximum)], diff=(0, 1))


@SETTINGS
@given(loc=_vectors(REAL_OR_NEGINF))
def test_sample_gumbel(loc):
    loc = t64(loc)
    check_gradients(lambda a: gumbel.sample_gumbel(a.shape, loc=a, generator=g()), [loc])


@SETTINGS
@given(logits=_vectors(REAL_OR_NEGINF), tau=st.sampled_from([1e-3, 0.1, 1.0, 10.0, 1e3]),
       hard=st.booleans())
def test_gumbel_softmax(logits, tau, hard):
    logits = t64(_at_least_one_finite(logits))
    # hard=True: the value is piecewise constant and the gradient is straight-through's (that
    # of the soft sample) by design, so it is not compared with finite differences
    check_gradients(lambda a: gumbel.gumbel_softmax(a, tau, hard=hard, generator=g()),
                    [logits], fd=not hard)
    # a temperature tensor is differentiated too
    check_gradients(lambda a, t: gumbel.gumbel_softmax(a, t, hard=hard, generator=g()),
                    [logits, t64(tau)], diff=(0, 1), fd=not hard)


@SETTINGS
@given(logits=_vectors(REAL_OR_NEGINF, min_size=2), data=st.data())
def test_plackett_luce_log_prob(logits, data):
    n = len(logits)
    order = data.draw(st.permutations(range(n)))
    k = data.draw(st.integers(1, n))
    check_gradients(gumbel.plackett_luce_log_prob, [t64(logits), torch.tensor(order[:k])])


# ------------------------------------------------------------------------------------------------
# beam module: the estimator
# ------------------------------------------------------------------------------------------------
LOG_PROB = st.one_of(EXTREME, MODERATE, st.just(-INF)).map(lambda v: -abs(v))


@SETTINGS
@given(log_probs=_vectors(LOG_PROB), kappa=st.one_of(REAL, st.just(-INF)))
def test_sbs_inclusion_log_probs(log_probs, kappa):
    check_gradients(beam.sbs_inclusion_log_probs, [t64(log_probs), t64(kappa)], diff=(0, 1))


@SETTINGS
@given(log_probs=_vectors(LOG_PROB, min_size=2), kappa=st.one_of(REAL, st.just(-INF)),
       normalized=st.booleans())
def test_sbs_estimate(log_probs, kappa, normalized):
    lp = t64(log_probs)
    values = torch.linspace(-1.0, 2.0, lp.numel(), dtype=torch.float64)
    check_gradients(lambda v, a, b: beam.sbs_estimate(v, a, b, normalized=normalized),
                    [values, lp, t64(kappa)], diff=(0, 1, 2))


def test_the_property_can_fail():
    # The check is not vacuous: the old log1mexp (a single torch.where) fails it.
    def old_log1mexp(x):
        return torch.where(x > -math.log(2), torch.log(-torch.expm1(x)),
                           torch.log1p(-torch.exp(x)))

    with pytest.raises(AssertionError, match="not finite where the value is finite"):
        check_gradients(old_log1mexp, [t64([-1e-20, -1.0])])
    # and a wrong gradient fails the finite-difference comparison
    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.exp()

        @staticmethod
        def backward(ctx, grad):
            return grad * 1.01

    with pytest.raises(AssertionError, match="finite differences"):
        check_gradients(Wrong.apply, [t64([0.3, -0.2])], dtypes=())
