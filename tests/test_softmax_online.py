"""Tests of the online (streaming) log-sum-exp of softmaxbook.softmax: LSEState, lse_state,
lse_merge, lse_value and online_logsumexp (Milakov & Gimelshein 2018).

Every check is deterministic (fixed generators, no samplers). Accuracy is measured against a
float64 reference (the package's ``logsumexp(..., exact=True)``, checked in
tests/test_softmax.py) and compared with a first-order rounding-error bound for the float32
algorithm, stated in `bound` below; where a tolerance is in ulp it says so.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from softmaxbook.softmax import (
    LSEState,
    logsumexp,
    lse_merge,
    lse_state,
    lse_value,
    online_logsumexp,
    softmax,
)

INF = math.inf
U32 = 2.0 ** -24  # unit roundoff of float32


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def ulps(got, ref):
    """|got - ref| in units of the float32 spacing at ref (float64 ref)."""
    r32 = ref.float().abs()
    spacing = (torch.nextafter(r32, torch.tensor(INF)) - r32).double()
    return ((got.double() - ref) / spacing).abs()


def bound(x, blocks_merged, block):
    """First-order bound on |online_logsumexp(x) - LSE(x)| in float32 (rows along the last dim).

    Each term exp(x_j - m) reaches the result through: the rounding of x_j - m (an absolute
    error u |x_j - m| in the exponent: the differences along its path of merges add up to
    m - x_j), exp (one ulp, 2u), the sum inside its block (block - 1 additions), and per merge
    at most 1 + rest, the product by the scale, the exp of the scale (2u) and one addition
    (5u: 4 roundings and the exp's second ulp); it enters the result weighted by p_j. Then
    log1p (2u relative to y - m) and the final addition (u |y|). Blanchard, Higham & Higham
    (2021) bound the shifted (two-pass) algorithms this way; they treat no streaming merge,
    so the 5u per merge level is this book's addition."""
    x = x.double()
    y = logsumexp(x, exact=True)
    m = x.amax(-1)
    p = softmax(x)
    block = min(block, x.shape[-1])
    per_term = (m[..., None] - x).nan_to_num(posinf=0.0) + 2 + block + 5 * blocks_merged
    terms = torch.where(p > 0, p * per_term, 0.0).sum(-1)
    return U32 * (y.abs() + 2 * (y - m) + terms)


def rows(seed=0):
    """Float32 rows: Gaussian at spreads 1, 30 and 1e4, every fourth row near-certain (its
    first entry 25 above the rest), and rows whose log-sum-exp is close to 0."""
    g = gen(seed)
    out = []
    for scale in (1.0, 30.0, 1e4):
        for n in (2, 7, 100, 1000):
            x = scale * torch.randn(64, n, generator=g)
            x[::4, 0] = x[::4].amax(-1) + 25.0
            out.append(x)
    # LSE ~ 0: n equal entries -log n, nudged (cancellation between max and log1p)
    for n in (2, 10, 1000):
        x = torch.full((16, n), -math.log(n)) + 1e-3 * torch.randn(16, n, generator=g)
        out.append(x.float())
    return out


# --------------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block", [1, 3, 64, 4096])
def test_online_within_the_first_order_bound(block):
    worst = 0.0
    for x in rows():
        got = online_logsumexp(x, block=block).double()
        ref = logsumexp(x.double(), exact=True)
        merges = math.ceil(x.shape[-1] / block) - 1
        err = (got - ref).abs()
        b = bound(x, merges, block)
        assert (err <= b).all(), (x.shape, block, float((err / b).max()))
        worst = max(worst, float((err / b).max()))
    # the bound is not loose by orders of magnitude either: largest err / bound seen 0.56
    # (block 1), 0.61 (3), 0.65 (64 and 4096)
    assert worst > 0.1


def test_online_within_a_few_ulp_where_the_result_is_not_near_zero():
    # in ulp: rows whose log-sum-exp is at least 1 in size (no cancellation): <= 4 ulp, for
    # every block size (largest seen 3.2, at block 1 over 1000 entries)
    for x in rows()[:12]:
        ref = logsumexp(x.double(), exact=True)
        keep = ref.abs() >= 1
        for block in (1, 5, 128):
            got = online_logsumexp(x, block=block)
            assert (ulps(got[keep], ref[keep]) <= 4).all()


def test_near_certain_row_keeps_its_digits():
    # log(s) would round 1 + e^-30 to 1 and give 0; the log1p of rest keeps e^-30 to ~30 ulp
    # (the rounding of x - m = -30 is magnified by 30 in exp)
    x = torch.tensor([0.0, -30.0])
    exact = math.log1p(math.exp(-30.0))
    for block in (1, 2):
        got = online_logsumexp(x, block=block).item()
        assert got != 0.0 and abs(got - exact) <= 40 * U32 * exact
    assert torch.logsumexp(x, 0).item() == 0.0  # the textbook form loses all of it


def test_large_and_mixed_blocks():
    big = torch.tensor([3.0e38, 3.0e38, -3.0e38, 1.0])  # exp of none of these is finite
    assert online_logsumexp(big, block=1).item() == pytest.approx(3.0e38 + math.log(2),
                                                                   rel=1e-7)
    mixed = torch.tensor([-1000.0, 1000.0, -INF, 999.0, -2000.0, 0.0])
    ref = logsumexp(mixed.double(), exact=True)
    for block in (1, 2, 3, 6):
        assert ulps(online_logsumexp(mixed, block=block), ref).item() <= 1


def test_minus_inf_edges():
    assert online_logsumexp(torch.full((5,), -INF), block=2).item() == -INF
    assert online_logsumexp(torch.empty(0)).item() == -INF
    assert online_logsumexp(torch.empty(3, 0)).tolist() == [-INF] * 3
    # all -inf blocks before, between and after a finite one
    x = torch.tensor([-INF, -INF, -INF, 2.0, -INF, -INF, -INF])
    for block in (1, 2, 3):
        assert online_logsumexp(x, block=block).item() == 2.0
    # a state of nothing possible is the identity of the merge, on either side
    s = lse_state(torch.tensor([1.0, 3.0]))
    none = lse_state(torch.empty(0))
    assert none.max.item() == -INF and none.rest.item() == -1
    for merged in (lse_merge(s, none), lse_merge(none, s)):
        assert torch.equal(merged.max, s.max) and torch.equal(merged.rest, s.rest)
    both = lse_merge(none, lse_state(torch.tensor([-INF])))
    assert both.max.item() == -INF and both.rest.item() == -1  # not NaN
    assert lse_value(both).item() == -INF


def test_plus_inf_gives_plus_inf():
    # decided and documented: +inf in any block gives +inf, never NaN (inf - inf is not formed)
    for x in ([1.0, INF], [INF, 1.0], [INF, INF, -INF], [-INF, 5.0, INF, INF, 0.0]):
        t = torch.tensor(x)
        for block in (1, 2, 5):
            assert online_logsumexp(t, block=block).item() == INF
    s = lse_state(torch.tensor([INF, INF, 3.0]))
    assert s.max.item() == INF and s.rest.item() == 1.0  # two +inf entries
    assert torch.logsumexp(torch.tensor([1.0, INF]), 0).item() == INF  # as PyTorch does


def test_one_row_and_many_rows_agree_and_dim():
    x = 5.0 * torch.randn(6, 9, 4, generator=gen(1))
    whole = online_logsumexp(x, dim=1, block=4)
    assert whole.shape == (6, 4)
    for i in range(6):
        assert torch.equal(online_logsumexp(x[i], dim=0, block=4), whole[i])
    assert torch.equal(online_logsumexp(x.transpose(1, 2), dim=-1, block=4), whole)
    assert online_logsumexp(torch.tensor(2.5)).item() == 2.5  # 0-d: one entry


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precisions_are_accumulated_in_float32(dtype):
    x = (20.0 * torch.randn(32, 300, generator=gen(2))).to(dtype)
    got = online_logsumexp(x, block=7)
    assert got.dtype == dtype
    assert torch.equal(got, logsumexp(x))  # the same value rounded once to the half dtype
    state = lse_state(x)
    assert state.max.dtype == torch.float32 and state.rest.dtype == torch.float32


# --------------------------------------------------------------------------------------------
# order and tree shape
# --------------------------------------------------------------------------------------------

def random_tree_merge(states, rnd):
    """Merge a list of states in a random tree: pick two at random, merge in a random order."""
    states = list(states)
    while len(states) > 1:
        i, j = rnd.sample(range(len(states)), 2)
        a, b = states[i], states[j]
        merged = lse_merge(a, b) if rnd.random() < 0.5 else lse_merge(b, a)
        states = [s for k, s in enumerate(states) if k not in (i, j)] + [merged]
    return states[0]


def test_merge_is_commutative_exactly():
    g = gen(3)
    for _ in range(20):
        a = lse_state(10.0 * torch.randn(8, 5, generator=g))
        b = lse_state(10.0 * torch.randn(8, 5, generator=g))
        ab, ba = lse_merge(a, b), lse_merge(b, a)
        assert torch.equal(ab.max, ba.max) and torch.equal(ab.rest, ba.rest)
    # ties too (the rest is (rest_a + rest_b) + 1 either way)
    a, b = lse_state(torch.tensor([1.0, 0.3])), lse_state(torch.tensor([1.0, -2.0, 0.1]))
    assert torch.equal(lse_merge(a, b).rest, lse_merge(b, a).rest)


@pytest.mark.parametrize("spread", [1.0, 30.0, 1e4])
def test_any_order_and_tree_shape(spread):
    # 200 random trees over the blocks of 32 rows: every result within the bound with the
    # merges counted as the number of blocks - 1 (a chain, the deepest tree); the results of
    # different trees differ by at most 2 ulp where the result is >= 1 (largest seen 1)
    rnd = random.Random(4)
    g = gen(5)
    x = spread * torch.randn(32, 60, generator=g)
    x[::3, 7] = x[::3].amax(-1) + 20.0
    x[1::5, 10:20] = -INF  # whole blocks of -inf in some rows
    blocks = list(x.split(5, dim=-1))
    ref = logsumexp(x.double(), exact=True)
    b = bound(x, len(blocks) - 1, 5)
    first = None
    for _ in range(200):
        rnd.shuffle(blocks)
        got = lse_value(random_tree_merge([lse_state(blk) for blk in blocks], rnd)).double()
        assert ((got - ref).abs() <= b).all()
        if first is None:
            first = got
        keep = ref.abs() >= 1
        assert (ulps(got[keep], first[keep]) <= 2).all()


# --------------------------------------------------------------------------------------------
# gradients
# --------------------------------------------------------------------------------------------

def test_gradient_is_the_softmax_and_gradcheck():
    x = 3.0 * torch.randn(4, 11, dtype=torch.float64, generator=gen(6))
    assert torch.autograd.gradcheck(lambda t: online_logsumexp(t, block=3), (x.requires_grad_(),))
    x = x.detach().requires_grad_()
    online_logsumexp(x, block=4).sum().backward()
    assert torch.allclose(x.grad, softmax(x.detach()), rtol=1e-12, atol=1e-15)
    # second derivatives too (the Hessian diag(p) - pp^T)
    v = torch.randn(5, dtype=torch.float64, generator=gen(7))
    h = torch.autograd.functional.hessian(lambda t: online_logsumexp(t, block=2), v)
    p = softmax(v)
    assert torch.allclose(h, torch.diag(p) - torch.outer(p, p), atol=1e-12)


def test_gradient_at_ties_and_minus_inf():
    x = torch.tensor([[2.0, 2.0, -INF, 0.0], [-INF, -INF, -INF, -INF]], dtype=torch.float64,
                     requires_grad=True)
    online_logsumexp(x, block=2).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert torch.allclose(x.grad[0], softmax(x.detach()[0]), rtol=1e-12)
    assert torch.equal(x.grad[1], torch.zeros(4, dtype=torch.float64))  # the convention


# --------------------------------------------------------------------------------------------
# bad input: one test per kind, asserting the message
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, message", [
    (lambda: online_logsumexp([1.0, 2.0]), TypeError,
     r"online_logsumexp: argument 'x' must be a torch.Tensor, got list"),
    (lambda: online_logsumexp(torch.tensor([1, 2])), TypeError,
     r"online_logsumexp: argument 'x' must have a floating-point dtype"),
    (lambda: online_logsumexp(torch.tensor([1.0, math.nan])), ValueError,
     r"online_logsumexp: argument 'x' contains NaN"),
    (lambda: online_logsumexp(torch.ones(3), dim=1.0), TypeError,
     r"online_logsumexp: argument 'dim' must be an int"),
    (lambda: online_logsumexp(torch.ones(3), dim=2), ValueError,
     r"online_logsumexp: argument 'dim'=2 is out of range"),
    (lambda: online_logsumexp(torch.tensor(1.0), dim=1), ValueError,
     r"online_logsumexp: argument 'dim'=1 is out of range for a 0-d 'x'"),
    (lambda: online_logsumexp(torch.ones(3), block=0), ValueError,
     r"online_logsumexp: argument 'block' must be >= 1, got 0"),
    (lambda: online_logsumexp(torch.ones(3), block=2.0), TypeError,
     r"online_logsumexp: argument 'block' must be an int, got float"),
    (lambda: online_logsumexp(torch.ones(3), block=True), TypeError,
     r"online_logsumexp: argument 'block' must be an int, got bool"),
    (lambda: lse_state(torch.tensor(1.0)), ValueError,
     r"lse_state: argument 'x' is a 0-d tensor"),
    (lambda: lse_state(torch.tensor([math.nan])), ValueError,
     r"lse_state: argument 'x' contains NaN"),
    (lambda: lse_merge(torch.ones(2), lse_state(torch.ones(2))), TypeError,
     r"lse_merge: argument 'a' must be an LSEState"),
    (lambda: lse_merge(lse_state(torch.ones(2)), (torch.zeros(2), torch.zeros(3))), ValueError,
     r"lse_merge: argument 'b' has max of shape \(2,\) but rest of shape \(3,\)"),
    (lambda: lse_merge(lse_state(torch.ones(2)), (torch.zeros(1), torch.zeros(1).double())),
     TypeError, r"lse_merge: argument 'b' has max of dtype torch.float32 but rest of dtype"),
    (lambda: lse_merge(lse_state(torch.ones(2)), lse_state(torch.ones(2).double())), TypeError,
     r"lse_merge: arguments 'a' and 'b' must have one dtype"),
    (lambda: lse_merge(LSEState(torch.zeros(2), torch.zeros(2)),
                       LSEState(torch.zeros(3), torch.zeros(3))), ValueError,
     r"lse_merge: the shapes of 'a' \(2,\) and 'b' \(3,\) do not broadcast"),
    (lambda: lse_merge(LSEState(torch.tensor([math.nan]), torch.zeros(1)),
                       lse_state(torch.ones(1))), ValueError,
     r"lse_merge: argument 'a.max' contains NaN"),
    (lambda: lse_merge(LSEState(torch.zeros(1), torch.tensor([-2.0])),
                       lse_state(torch.ones(1))), ValueError,
     r"lse_merge: argument 'a.rest' must be >= -1"),
    (lambda: lse_merge(LSEState(torch.tensor([-INF]), torch.tensor([0.0])),
                       lse_state(torch.ones(1))), ValueError,
     r"lse_merge: argument 'a' is not a state: rest must be -1 exactly where max is -inf"),
    (lambda: lse_merge(LSEState(torch.tensor([0.0]), torch.tensor([-0.5])),
                       lse_state(torch.ones(1))), ValueError,
     r"lse_merge: argument 'a' is not a state"),
    (lambda: lse_value(LSEState(torch.tensor([1.0]), torch.tensor([INF]))), ValueError,
     r"lse_value: argument 'state.rest' must be finite"),
    (lambda: lse_merge(lse_state(torch.ones(1)), LSEState(torch.tensor([1.0]),
                                                         torch.tensor([INF]))), ValueError,
     r"lse_merge: argument 'b.rest' must be finite"),
    (lambda: lse_value((torch.zeros(1),)), TypeError,
     r"lse_value: argument 'state' must be an LSEState"),
    (lambda: lse_value(LSEState(torch.tensor([1, 2]), torch.tensor([0, 0]))), TypeError,
     r"lse_value: argument 'state.max' must have a floating-point dtype"),
])
def test_bad_input_messages(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_doc_example():
    assert online_logsumexp(torch.tensor([1000.0, 999.0, 990.0]), block=2).item() == \
        pytest.approx(1000.3133, abs=1e-4)
    assert LSEState._fields == ("max", "rest")
