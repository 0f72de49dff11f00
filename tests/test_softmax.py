"""Tests of softmaxbook.softmax.

Accuracy is measured in ulp (units in the last place of float32 at the reference value) against
a float64 reference written independently here (shift by the maximum, drop the maximal term,
log1p), itself checked against 50-digit mpmath. There are no samplers in this module, so there are
no statistical tests; every check is deterministic.
"""

from __future__ import annotations

import doctest
import math
import runpy
from pathlib import Path

import mpmath
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import softmaxbook.softmax as sm
from softmaxbook.softmax import (
    cross_entropy,
    log_softmax,
    log_sigmoid,
    logistic_loss,
    logit,
    logsumexp,
    sigmoid,
    softmax,
    softplus,
)

INF = math.inf
ROOT = Path(__file__).resolve().parent.parent


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------------
# An independent float64 reference and an ulp measure
# ------------------------------------------------------------------------------------------------

def reference(x: torch.Tensor):
    """(logsumexp, softmax, log_softmax) of float32 ``x`` along the last dim, in float64.

    x - max is exact in float64 for float32 x, and the sum leaves out the maximal term (which is
    exactly 1) so that log1p keeps the digits of a tiny remainder."""
    x = x.double()
    m = x.max(-1, keepdim=True).values
    d = x - m
    e = d.exp()
    top = d.argmax(-1, keepdim=True)
    rest = e.scatter(-1, top, 0.0).sum(-1, keepdim=True)
    lse = (m + torch.log1p(rest)).squeeze(-1)
    return lse, e / (1.0 + rest), d - torch.log1p(rest)


def ulp_error(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|got - ref| in units of the float32 spacing at ref (elementwise, float64)."""
    r32 = ref.float().abs()
    spacing = (torch.nextafter(r32, torch.tensor(INF)) - r32).double()
    err = (got.double() - ref).abs()
    same = got.double() == ref  # covers equal infinities
    return torch.where(same, torch.zeros_like(err), err / spacing)


def softmax_bound(x: torch.Tensor, base: float = 8.0) -> torch.Tensor:
    """Per-entry ulp bound of our float32 softmax (module notes): ``base + |x_i - max|``, plus
    ``n / 250`` for the fused kernel's float32 row sum over ``n`` categories."""
    d = (x.double() - x.double().amax(-1, keepdim=True)).abs()
    return base + d + x.shape[-1] / 250.0


def mp_logsumexp(values):
    mpmath.mp.dps = 50
    return mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(v)) for v in values))


def test_reference_agrees_with_mpmath():
    x = torch.tensor([[0.0, -30.0, -31.5], [1000.0, 999.0, 990.0], [-5.0, 3.25, 3.0]])
    lse, p, ls = reference(x)
    for i, row in enumerate(x.tolist()):
        exact = mp_logsumexp(row)
        assert abs(float(exact) - lse[i].item()) <= 1e-15 * max(1.0, abs(float(exact)))
        for j, v in enumerate(row):
            lp = mpmath.mpf(v) - exact
            assert float(abs((ls[i, j].item() - lp) / lp)) < 1e-14
            assert float(abs((p[i, j].item() - mpmath.exp(lp)) / mpmath.exp(lp))) < 1e-14


# ------------------------------------------------------------------------------------------------
# Exact values
# ------------------------------------------------------------------------------------------------

def test_large_logits_do_not_overflow():
    x = torch.tensor([1000.0, 999.0, 990.0])
    assert torch.isnan(torch.exp(x) / torch.exp(x).sum()).all()  # the naive formula fails
    z = 1.0 + math.exp(-1.0) + math.exp(-10.0)
    assert logsumexp(x).item() == pytest.approx(1000.0 + math.log(z), rel=1e-7)
    expected = torch.tensor([1.0, math.exp(-1.0), math.exp(-10.0)]) / z
    torch.testing.assert_close(softmax(x), expected, rtol=2e-7, atol=0)
    torch.testing.assert_close(log_softmax(x), x - 1000.0 - math.log(z), rtol=1e-7, atol=0)


def test_near_certain_class_keeps_its_digits():
    x = torch.tensor([0.0, -30.0])
    expected = -math.log1p(math.exp(-30.0))  # -9.357622968840175e-14
    assert torch.log_softmax(x, -1)[0].item() == 0.0  # PyTorch rounds it away
    assert log_softmax(x)[0].item() == pytest.approx(expected, rel=1e-7)
    assert logsumexp(x).item() == pytest.approx(-expected, rel=1e-7)
    assert cross_entropy(x[None], torch.tensor([0])).item() == pytest.approx(-expected, rel=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [-1, 1])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("all_certain", [False, True])
def test_near_certain_slices_get_the_exact_top_entry(dtype, dim, temperature, all_certain):
    # The lean repair of near-certain slices (_repair_top: every slice, as slices, or some, by
    # index; any dim) must give the bits of the exact algorithm, and leave its input alone.
    x = torch.randn(6, 50, 3, generator=gen(7), dtype=torch.float64).mul(3).to(dtype)
    x = x.movedim(1, dim).contiguous()  # categories along `dim`
    xv = x.movedim(dim, -1)  # a view of x with the categories last, [6, 3, 50]
    if all_certain:
        xv[..., 4] += 20.0
    xv[0, :, 9] += 25.0  # certain slices in any case
    xv[1] = -math.inf
    xv[1, :, 0] = 0.0  # one possible class: log p = 0 exactly
    before = x.clone()
    got = log_softmax(x, dim=dim, temperature=temperature)
    assert torch.equal(x, before)
    exact = log_softmax(x, dim=dim, temperature=temperature, exact=True)
    top = x.argmax(dim=dim, keepdim=True)
    certain = exact.amax(dim=dim, keepdim=True) > -math.log(2.0)
    assert certain.any() and (certain.all() or not all_certain)
    assert torch.equal(got.gather(dim, top)[certain], exact.gather(dim, top)[certain])
    assert (got.gather(dim, top)[certain] < 0).sum() > 0  # not rounded to 0 as torch does


@pytest.mark.parametrize("all_certain", [False, True])
def test_near_certain_rows_of_a_long_2d_tensor(all_certain):
    # 140 rows of 32000: _repair_top works in blocks of 2^22 entries (131 rows), so this takes
    # two blocks; as slices of the tensor when every row is near-certain, by index otherwise.
    x = torch.randn(140, 32000, generator=gen(8)).mul(3)
    lead = torch.where(torch.arange(140) % 3 == 0, 35.0, 30.0 if all_certain else 0.0)
    x[:, 123] += lead
    got = log_softmax(x)
    exact = log_softmax(x, exact=True)
    certain = exact.amax(dim=-1) > -math.log(2.0)
    assert bool(certain.all()) == all_certain and int(certain.sum()) >= 24
    rows = torch.arange(140)[certain]
    assert torch.equal(got[rows, 123], exact[rows, 123])
    assert (got[rows, 123] < 0).all()
    # the repair matters here: PyTorch's own top entries are not the exact ones
    assert (torch.log_softmax(x, -1)[rows, 123] != exact[rows, 123]).any()


def test_logsumexp_cancellation_near_zero():
    # max = -10 and log(sum) = 10 + 1e-4 almost cancel: the result is small and must be relative
    x = torch.full((22027,), -10.0)
    ref = mp_logsumexp([-10.0] * 22027)
    assert logsumexp(x).item() == pytest.approx(float(ref), rel=4e-7)


def test_uniform_and_one_hot_limits_of_temperature():
    x = torch.tensor([1.0, 3.0, 2.0, 3.0])
    torch.testing.assert_close(softmax(x, temperature=1e6), torch.full((4,), 0.25), rtol=1e-5,
                               atol=0)
    torch.testing.assert_close(softmax(x, temperature=1e-3), torch.tensor([0.0, 0.5, 0.0, 0.5]))
    torch.testing.assert_close(softmax(x, temperature=2.0), torch.softmax(x / 2.0, -1))
    torch.testing.assert_close(log_softmax(x, temperature=0.5), torch.log_softmax(x / 0.5, -1))


def test_temperature_divides_after_the_shift():
    # x/T rounded separately loses the low bits of large logits; (x - max)/T does not
    x = torch.tensor([10000.0, 9999.0009765625])  # exactly representable, 0.9990234375 apart
    p = softmax(x, temperature=3.0)
    assert p[1].item() == pytest.approx(1.0 / (1.0 + math.exp(0.9990234375 / 3.0)), rel=1e-6)


@pytest.mark.parametrize("temperature", [2.0, 0.5, 0.25, 8.0, 2.0 ** -40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_power_of_two_temperature_takes_the_short_path_with_the_same_bits(temperature, dtype):
    # For T = 2^k, x / T is exact, so the kernel's own shift by max(x / T) is the one rounding
    # of (x - max) / T that the general path computes: the same bits, with large logits (whose
    # low bits x / T loses for other T), an impossible class and an all -inf slice.
    x = (torch.randn(40, 300, generator=gen(9), dtype=torch.float64) * 1e4).to(dtype)
    x[:10] = x[:10] / 1e4 + 9999.0  # logits that differ in their low bits
    x[3, 7] = -INF
    x[5, :] = -INF
    m = x.amax(-1, keepdim=True)
    z = (x - torch.where(torch.isneginf(m), 0.0, m)) / temperature  # the general path
    short, own = sm._scaled(x, 1, temperature)
    assert own and torch.equal(short, x * (1.0 / temperature))  # it did take the short path
    for kernel in (torch.softmax, torch.log_softmax):
        torch.testing.assert_close(kernel(short, -1), kernel(z, -1), rtol=0, atol=0,
                                   equal_nan=True)
    assert torch.equal(softmax(x, temperature=temperature), softmax(z))


def test_power_of_two_temperature_that_overflows_is_recomputed_exactly():
    # x / T overflows to +-inf (inf - inf = NaN in the kernel): that slice takes the exact path
    x = torch.tensor([[1e38, 0.0, -1e38], [1.0, 0.0, -1.0]])
    p = softmax(x, temperature=0.25)
    ls = log_softmax(x, temperature=0.25)
    assert p[0].tolist() == [1.0, 0.0, 0.0] and ls[0].tolist() == [0.0, -INF, -INF]
    # the other slice as usual: a few ulp from the float64 values
    x64 = x[1].double() * 4.0
    torch.testing.assert_close(p[1].double(), torch.softmax(x64, -1), rtol=5e-7, atol=0)
    torch.testing.assert_close(ls[1].double(), torch.log_softmax(x64, -1), rtol=5e-7, atol=0)


def test_max_le_logsumexp_le_max_plus_log_n():
    x = 5.0 * torch.randn(200, 17, generator=gen(1))
    lse, m = logsumexp(x), x.amax(-1)
    assert (m <= lse).all() and (lse <= m + math.log(17) + 1e-5).all()
    ties = torch.zeros(17)
    assert logsumexp(ties).item() == pytest.approx(math.log(17), rel=1e-7)  # upper bound attained


def test_two_class_softmax_is_sigmoid_of_difference_and_logit_inverts_it():
    a, b = torch.randn(1000, generator=gen(2)), torch.randn(1000, generator=gen(3))
    p = softmax(torch.stack([a, b], -1))[:, 0]
    torch.testing.assert_close(p, sigmoid(a - b), rtol=2e-6, atol=0)
    z = (a - b).double()  # the round trip is ill-conditioned near p = 0 or 1; test it in float64
    torch.testing.assert_close(logit(sigmoid(z)), z, rtol=1e-12, atol=1e-14)
    assert logit(torch.tensor([0.0, 1.0])).tolist() == [-INF, INF]
    assert logit(torch.tensor(1e-30)).item() == pytest.approx(math.log(1e-30), rel=1e-7)


def test_argmax_needs_no_exponential():
    x = 50.0 * torch.randn(300, 9, generator=gen(4))
    assert torch.equal(softmax(x).argmax(-1), x.argmax(-1))


# ------------------------------------------------------------------------------------------------
# Accuracy in ulp against the reference
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [1.0, 10.0, 100.0, 1e3, 1e4])
@pytest.mark.parametrize("n", [2, 10, 1000])
def test_float32_accuracy_in_ulp(scale, n):
    x = (scale * torch.randn(64, n, generator=gen(n))).float()
    x[:16, 0] = x[:16].amax(-1) + 25.0  # near-certain rows: the case PyTorch gets wrong
    lse, p, ls = reference(x)
    d = (x.double() - x.double().amax(-1, keepdim=True)).abs()
    # logsumexp and log_softmax: a few ulp everywhere
    assert ulp_error(logsumexp(x), lse).max() <= 2.0
    assert ulp_error(log_softmax(x), ls).max() <= 4.0
    # softmax: a few ulp where the probability is not negligible; elsewhere the float32 rounding
    # of x_i - max (an error of |x_i - max| * 2^-24, magnified by exp) adds |x_i - max|/2 ulp.
    assert (ulp_error(softmax(x), p) <= softmax_bound(x)).all()
    # exact=True: the float64 algorithm, correctly rounded up to a fraction of an ulp
    assert ulp_error(softmax(x, exact=True), p).max() <= 1.0
    assert ulp_error(log_softmax(x, exact=True), ls).max() <= 1.0
    assert ulp_error(logsumexp(x, exact=True), lse).max() <= 1.0


@pytest.mark.parametrize("sigma", [1.0, 3.0, 10.0, 30.0])
@pytest.mark.parametrize("n", [10, 1000])
def test_float32_accuracy_at_scale(sigma, n):
    """The module docstring's bounds over 2048 Gaussian rows (the 64 rows above missed the rows
    whose top log-probability lies just outside the repaired range: 9.3 ulp, not 4)."""
    x = (sigma * torch.randn(2048, n, generator=gen(7 * n + int(sigma)))).float()
    lse, p, ls = reference(x)
    d = (x.double() - x.double().amax(-1, keepdim=True)).abs()
    assert ulp_error(logsumexp(x), lse).max() <= 2.0
    assert ulp_error(log_softmax(x), ls).max() <= 10.0
    assert (ulp_error(softmax(x), p) <= softmax_bound(x)).all()


def test_pytorch_log_softmax_is_not_accurate_where_ours_is():
    # The test above could not fail if the reference were as blind as the code: show that it
    # catches PyTorch's error on the same kind of input.
    x = torch.randn(64, 10, generator=gen(5))
    x[:, 0] = x.amax(-1) + 25.0
    _, _, ls = reference(x)
    assert ulp_error(torch.log_softmax(x, -1), ls).max() > 1e6
    assert ulp_error(log_softmax(x), ls).max() <= 1.0


def test_long_rows_accuracy():
    # 32000 classes (a vocabulary): PyTorch's fused float32 row sum drifts, which softmax and the
    # log-probabilities inherit (module notes); the top entry of a near-certain row is
    # recomputed exactly.
    x = 3.0 * torch.randn(2048, 32000, generator=gen(6))
    x[::8, 5] += 40.0  # near-certain rows
    lse, p, ls = reference(x)
    assert (ulp_error(softmax(x), p) <= softmax_bound(x)).all()
    assert ulp_error(logsumexp(x), lse).max() <= 2.0
    assert ulp_error(log_softmax(x), ls).max() <= 128.0
    # the top entry of a near-certain row is recomputed exactly
    assert ulp_error(log_softmax(x)[::8, 5], ls[::8, 5]).max() <= 1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_computed_in_float32(dtype):
    x = (8.0 * torch.randn(50, 300, generator=gen(7))).to(dtype)
    for f in (softmax, log_softmax, logsumexp):
        out = f(x)
        assert out.dtype == dtype
        torch.testing.assert_close(out, f(x.float()).to(dtype), rtol=0, atol=0)
    # float16 exp overflows at 11.1: a float16 computation would give inf/NaN here
    assert torch.isfinite(logsumexp(torch.tensor([12.0, 11.0], dtype=torch.float16)))


def test_float64_input_stays_float64():
    x = torch.randn(5, 7, dtype=torch.float64, generator=gen(8))
    assert softmax(x).dtype == torch.float64
    torch.testing.assert_close(log_softmax(x), torch.log_softmax(x, -1), rtol=1e-14, atol=0)


@pytest.mark.parametrize("dim", [0, 1, 2, -2])
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_dim(dim, keepdim):
    x = 4.0 * torch.randn(3, 4, 5, generator=gen(9))
    x[1, 2, 3] = -INF
    torch.testing.assert_close(softmax(x, dim), torch.softmax(x, dim))
    torch.testing.assert_close(log_softmax(x, dim), torch.log_softmax(x, dim))
    torch.testing.assert_close(logsumexp(x, dim, keepdim), torch.logsumexp(x, dim, keepdim))
    # non-contiguous input, and repairs through views
    xt = x.transpose(0, 2)
    torch.testing.assert_close(softmax(xt, dim, exact=True), torch.softmax(xt, dim))
    torch.testing.assert_close(log_softmax(xt, dim, exact=True), torch.log_softmax(xt, dim))
    torch.testing.assert_close(logsumexp(xt, dim, keepdim, exact=True),
                               torch.logsumexp(xt, dim, keepdim))


def test_empty_batch_is_fine():
    x = torch.empty(0, 5)
    assert softmax(x).shape == (0, 5) and logsumexp(x).shape == (0,)


# ------------------------------------------------------------------------------------------------
# -inf: impossible entries and all -inf slices
# ------------------------------------------------------------------------------------------------

def test_masked_entries_are_impossible():
    x = torch.tensor([[1.0, -INF, 2.0], [-INF, -INF, 0.5]])
    p, ls = softmax(x), log_softmax(x)
    assert p[0, 1].item() == 0.0 and ls[0, 1].item() == -INF
    assert p[1].tolist() == [0.0, 0.0, 1.0] and ls[1].tolist() == [-INF, -INF, 0.0]
    torch.testing.assert_close(p[0, [0, 2]], torch.softmax(torch.tensor([1.0, 2.0]), -1))


@pytest.mark.parametrize("exact", [False, True])
def test_all_neg_inf_slice_convention(exact):
    x = torch.tensor([[-INF, -INF, -INF], [0.0, 1.0, -INF]])
    assert logsumexp(x, exact=exact)[0].item() == -INF
    assert softmax(x, exact=exact)[0].tolist() == [0.0, 0.0, 0.0]
    assert log_softmax(x, exact=exact)[0].tolist() == [-INF] * 3
    assert softmax(x, temperature=0.3, exact=exact)[0].tolist() == [0.0, 0.0, 0.0]
    assert log_softmax(x, temperature=3.0, exact=exact)[0].tolist() == [-INF] * 3
    torch.testing.assert_close(softmax(x, exact=exact)[1], torch.softmax(x[1], -1))


def _grads(f, x, order):
    x = x.clone().requires_grad_(True)
    w = torch.arange(1.0, x.shape[-1] + 1)
    y = f(x)
    y = torch.where(torch.isfinite(y), y, torch.zeros_like(y))  # a finite scalar to differentiate
    (g,) = torch.autograd.grad((y * (w if y.dim() == x.dim() else 1.0)).sum(), x,
                               create_graph=True)
    if order == 1:
        return g
    (h,) = torch.autograd.grad((g * w).sum(), x)
    return h


@pytest.mark.parametrize("f", [logsumexp, softmax, log_softmax,
                               lambda x: softmax(x, temperature=0.5),
                               lambda x: log_softmax(x, temperature=2.0)])
@pytest.mark.parametrize("order", [1, 2])
def test_all_neg_inf_gradients_are_zero_not_nan(f, order):
    x = torch.tensor([[-INF, -INF, -INF], [0.3, -INF, 1.2]])
    g = _grads(f, x, order)
    assert torch.isfinite(g).all()
    assert g[0].tolist() == [0.0, 0.0, 0.0]
    assert g[1, 1].item() == 0.0  # nothing flows into an impossible entry


def test_pytorch_gives_nan_gradient_on_all_neg_inf():
    # the behaviour the convention above fixes (pytorch issue 31829): keeps that test honest
    x = torch.full((3,), -INF, requires_grad=True)
    torch.logsumexp(x, 0).backward()
    assert torch.isnan(x.grad).all()


def test_gradient_at_finite_entries_with_masking_matches_unmasked():
    x = torch.tensor([0.3, -INF, 1.2, -0.7], dtype=torch.float64)
    keep = [0, 2, 3]
    for f, tf in [(logsumexp, lambda v: torch.logsumexp(v, 0)),
                  (lambda v: softmax(v)[0], lambda v: torch.softmax(v, 0)[0]),
                  (lambda v: log_softmax(v)[2], lambda v: torch.log_softmax(v, 0)[1])]:
        a = x.clone().requires_grad_(True)
        f(a).backward()
        b = x[keep].clone().requires_grad_(True)
        tf(b).backward()
        torch.testing.assert_close(a.grad[keep], b.grad)


# ------------------------------------------------------------------------------------------------
# Gradients against finite differences (float64)
# ------------------------------------------------------------------------------------------------

CASES = [
    ("logsumexp", lambda x: logsumexp(x)),
    ("logsumexp dim0 keepdim", lambda x: logsumexp(x, 0, True)),
    ("softmax", lambda x: softmax(x)),
    ("softmax T", lambda x: softmax(x, 0, temperature=0.7)),
    ("log_softmax", lambda x: log_softmax(x)),
    ("log_softmax T", lambda x: log_softmax(x, temperature=3.0)),
    ("cross_entropy", lambda x: cross_entropy(x, torch.tensor([0, 3, 1]))),
    ("logistic_loss", lambda x: logistic_loss(x, torch.ones_like(x) * 0.3)),
]


@pytest.mark.parametrize("name,f", CASES, ids=[c[0] for c in CASES])
def test_gradcheck_and_gradgradcheck(name, f):
    x = (2.0 * torch.randn(3, 4, dtype=torch.float64, generator=gen(10))).requires_grad_(True)
    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))


def test_gradient_of_logsumexp_is_softmax():
    x = (3.0 * torch.randn(6, 5, generator=gen(11))).requires_grad_(True)
    logsumexp(x).sum().backward()
    torch.testing.assert_close(x.grad, softmax(x.detach()))


def test_hessian_of_logsumexp_is_softmax_jacobian():
    x = torch.randn(5, dtype=torch.float64, generator=gen(12))
    h = torch.autograd.functional.hessian(logsumexp, x)
    p = softmax(x)
    torch.testing.assert_close(h, torch.diag(p) - torch.outer(p, p))


def test_gradcheck_with_extreme_logits():
    x = torch.tensor([[1e4, 1e4 - 3.0, -1e4, 1e4 - 0.5]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: log_softmax(v), (x,))
    assert torch.autograd.gradcheck(lambda v: softmax(v), (x,))


# ------------------------------------------------------------------------------------------------
# Hypothesis: properties at extreme inputs
# ------------------------------------------------------------------------------------------------

logit_value = st.one_of(
    st.floats(-1e4, 1e4, width=32),
    st.floats(width=32, allow_nan=False, allow_infinity=False),
    st.just(-INF),
    st.sampled_from([0.0, -0.0, 1e-45, -1e-45, 88.7, -103.9]),
)
rows = st.lists(logit_value, min_size=1, max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows)
def test_properties_at_extreme_inputs(values):
    x = torch.tensor(values, dtype=torch.float32)
    p, ls, lse = softmax(x), log_softmax(x), logsumexp(x)
    assert not torch.isnan(p).any() and not torch.isnan(ls).any() and not torch.isnan(lse)
    if torch.isneginf(x).all():
        assert lse.item() == -INF and (p == 0).all() and torch.isneginf(ls).all()
        return
    assert (p >= 0).all() and (p <= 1).all()
    assert abs(p.double().sum().item() - 1.0) <= len(values) * 2.4e-7
    assert (ls <= 0).all()
    m = x.max().item()
    assert m <= lse.item() <= m + math.log(len(values)) * (1 + 1e-6) + 1e-6 * abs(m)
    assert (p[torch.isneginf(x)] == 0).all() and torch.isneginf(ls[torch.isneginf(x)]).all()
    # agreement with the float64 reference (an absolute-or-relative test that holds at any scale)
    ref_lse, ref_p, ref_ls = reference(x[None])
    assert ulp_error(lse, ref_lse[0]).item() <= 2.0
    assert (p.double() - ref_p[0]).abs().max().item() <= 1e-6
    fin = torch.isfinite(ls) & torch.isfinite(ref_ls[0])
    assert (ulp_error(ls[fin], ref_ls[0][fin]) <= 4.0).all()


@settings(max_examples=100, deadline=None)
@given(rows, st.floats(-1e4, 1e4, width=32))
def test_shift_invariance(values, c):
    x = torch.tensor(values, dtype=torch.float64)
    assert torch.equal(torch.isneginf(softmax(x + c)), torch.isneginf(softmax(x)))
    if torch.isfinite(x).any() and x[torch.isfinite(x)].abs().max() < 1e5:
        torch.testing.assert_close(softmax(x + c), softmax(x), rtol=1e-9, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-50, 50), min_size=1, max_size=8), st.floats(1e-3, 1e3))
def test_temperature_is_a_scaling(values, t):
    x = torch.tensor(values, dtype=torch.float64)
    torch.testing.assert_close(softmax(x, temperature=t), softmax(x / t), rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# Losses
# ------------------------------------------------------------------------------------------------

def test_cross_entropy_matches_pytorch_and_handles_masks():
    z = 3.0 * torch.randn(20, 6, generator=gen(13))
    y = torch.randint(0, 6, (20,), generator=gen(14))
    torch.testing.assert_close(cross_entropy(z, y), F.cross_entropy(z, y))
    torch.testing.assert_close(cross_entropy(z, y, reduction="none"),
                               F.cross_entropy(z, y, reduction="none"))
    q = softmax(torch.randn(20, 6, generator=gen(15)))
    torch.testing.assert_close(cross_entropy(z, q, reduction="sum"),
                               F.cross_entropy(z, q, reduction="sum"))
    # class dim not last
    torch.testing.assert_close(cross_entropy(z.T, y, dim=0), F.cross_entropy(z, y))
    masked = torch.tensor([[0.0, -INF, 1.0]])
    assert cross_entropy(masked, torch.tensor([[0.5, 0.0, 0.5]])).isfinite()  # 0 * log 0 = 0
    assert cross_entropy(masked, torch.tensor([1])).item() == INF  # an impossible label
    assert F.cross_entropy(masked, torch.tensor([[0.5, 0.0, 0.5]])).isnan()  # PyTorch: NaN


def test_logistic_loss_is_two_class_cross_entropy():
    a, b = torch.randn(50, generator=gen(16)), torch.randn(50, generator=gen(17))
    y = (torch.rand(50, generator=gen(18)) < 0.5).long()
    two = cross_entropy(torch.stack([b, a], -1), y)  # class 1 has logit a
    torch.testing.assert_close(logistic_loss(a - b, y), two, rtol=1e-6, atol=0)
    torch.testing.assert_close(logistic_loss(a, y.float()),
                               F.binary_cross_entropy_with_logits(a, y.float()))
    big = torch.tensor([40.0, -40.0])
    loss = logistic_loss(big, torch.tensor([1.0, 0.0]), reduction="none")
    torch.testing.assert_close(loss, torch.full((2,), math.exp(-40.0)), rtol=1e-6, atol=0)


# ------------------------------------------------------------------------------------------------
# Bad input: one test per kind, each asserting the message
# ------------------------------------------------------------------------------------------------

FUNCS = [softmax, log_softmax, logsumexp]
NAMES = ["softmax", "log_softmax", "logsumexp"]


@pytest.mark.parametrize("f", FUNCS, ids=NAMES)
def test_nan_input_is_rejected(f):
    with pytest.raises(ValueError, match=r"argument 'x' contains NaN \(first at index \(1, 2\)\)"):
        f(torch.tensor([[0.0, 1.0, 2.0], [0.0, 1.0, math.nan]]))


@pytest.mark.parametrize("f", FUNCS, ids=NAMES)
def test_posinf_input_is_rejected(f):
    with pytest.raises(ValueError, match=r"^" + f.__name__ + r": argument 'x' contains \+inf"):
        f(torch.tensor([0.0, INF, -INF]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bad", [math.nan, INF, "all -inf"])
def test_a_bad_value_anywhere_in_a_slice_is_found(dtype, bad):
    # softmax and log_softmax look at one entry per slice of their output to find the
    # invalid slices (_invalid_slices): that relies on the fused kernels making the whole slice
    # NaN. Every position of the bad value, short and long slices (the kernels' vector loop and
    # its tail), categories last and not, one slice and many, a temperature or none.
    for n in (1, 2, 3, 7, 8, 9, 15, 16, 17, 33, 100, 1025):
        for pos in sorted({0, 1, n // 2, n - 2, n - 1} & set(range(n))):
            x = torch.randn(4, n, generator=gen(n + pos), dtype=dtype)
            if bad == "all -inf":
                x[2] = -INF
            else:
                x[2, pos] = bad
            for f in (softmax, log_softmax):
                for xx, dim in ((x, -1), (x.t().contiguous(), 0), (x[2], 0)):
                    for t, exact in ((1.0, False), (0.5, False), (0.7, False), (0.7, True)):
                        if bad == "all -inf":
                            out = f(xx, dim, temperature=t, exact=exact)
                            row = out.movedim(dim, -1)[2] if xx.dim() == 2 else out
                            assert (row == (0.0 if f is softmax else -INF)).all()
                        else:
                            with pytest.raises(ValueError, match="argument 'x' contains"):
                                f(xx, dim, temperature=t, exact=exact)
            if bad != "all -inf":  # logsumexp, exact=True: no fused kernel to find it first
                with pytest.raises(ValueError, match="argument 'x' contains"):
                    logsumexp(x, -1, exact=True)


@pytest.mark.parametrize("temperature", [0.5, 0.7, 3.0])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_temperature_output_written_in_place_is_the_kernels_result(temperature, dim):
    # With a temperature the scaled logits are a tensor of our own, and the fused kernel writes
    # its output over them (out=): the same bits as writing into a fresh tensor.
    x = 4.0 * torch.randn(7, 300, 5, generator=gen(13))
    y, own = sm._scaled(x, dim, temperature)
    assert own
    for f, kernel in ((softmax, torch.softmax), (log_softmax, torch.log_softmax)):
        expected = kernel(y.clone(), dim)
        got = f(x, dim, temperature=temperature)
        if f is log_softmax:  # the top entries of near-certain slices are repaired
            keep = expected.amax(dim, keepdim=True) <= -math.log(2.0)
            got, expected = got * keep, expected * keep
        assert torch.equal(got, expected)


def test_logsumexp_finds_the_slices_to_repair_without_every_maximum():
    # logsumexp computes the maximum only of the slices whose result lies between
    # -max(1, 2 log n) and max(1, log n) (_logsumexp_forward); outside, the final addition is
    # well conditioned. Slices on both sides of both limits, and some in between, in one call:
    # every result within 2 ulp, and the slices that need it repaired as before.
    n = 50
    log_n = math.log(n)
    base = torch.randn(400, n, generator=gen(14), dtype=torch.float64)
    lse0 = torch.logsumexp(base, -1, keepdim=True)
    targets = torch.cat([
        torch.linspace(-2 * log_n - 3, -2 * log_n + 3, 100),
        torch.linspace(-1.5, 1.5, 100),
        torch.linspace(log_n - 3, log_n + 3, 100),
        torch.linspace(-40.0, 40.0, 100),
    ]).double()[:, None]
    x = (base - lse0 + targets).float()  # logsumexp(x) is close to the target
    lse, _, _ = reference(x)
    assert ulp_error(logsumexp(x), lse).max() <= 2.0
    # and the same on one slice at a time (the path where all or none are candidates)
    one = torch.stack([logsumexp(row) for row in x])
    assert torch.equal(one, logsumexp(x))


def test_logsumexp_repairs_the_same_slices_as_with_every_maximum(monkeypatch):
    # White-box: the slices handed to _repair are exactly those of the criterion computed with
    # every slice's maximum (condition number of m + log s above 2, or |lse| < 1).
    n = 50
    log_n = math.log(n)
    base = torch.randn(600, n, generator=gen(15), dtype=torch.float64)
    targets = torch.linspace(-2 * log_n - 4, log_n + 4, 600).double()[:, None]
    spread = torch.linspace(0.1, 6.0, 600).double()[:, None]  # s from ~n down to ~1
    x = (base * spread)
    x = (x - torch.logsumexp(x, -1, keepdim=True) + targets).float()
    seen = []
    real = sm._repair
    monkeypatch.setattr(sm, "_repair", lambda x_, out, dim, rows, kind, *a: (
        seen.append(rows.clone()), real(x_, out, dim, rows, kind, *a)))
    lse = logsumexp(x)
    lse_fused, m = torch.logsumexp(x, -1), x.amax(-1)
    expected = (lse_fused.abs() < 1.0) | ((m.abs() + (lse_fused - m).abs()) > 2 * lse_fused.abs())
    assert len(seen) == 1 and torch.equal(seen[0], expected)
    assert 50 < int(expected.sum()) < 550  # both kinds present
    lse_ref, _, _ = reference(x)
    assert ulp_error(lse, lse_ref).max() <= 2.0


@pytest.mark.parametrize("f", [softmax, log_softmax], ids=NAMES[:2])
@pytest.mark.parametrize("t,err,msg", [
    (0.0, ValueError, "must be > 0, got 0.0"),
    (-1.0, ValueError, "must be > 0, got -1.0"),
    (INF, ValueError, "must be finite"),
    (math.nan, ValueError, "must be finite"),
    ("hot", TypeError, "must be a number, got str"),
    (torch.tensor([1.0, 2.0]), TypeError, "must be a number, got a tensor"),
    (torch.tensor(2.0, requires_grad=True), TypeError, "must be a number, not a tensor that"),
])
def test_bad_temperature_is_rejected(f, t, err, msg):
    with pytest.raises(err, match=r"argument 'temperature' " + msg):
        f(torch.zeros(3), temperature=t)


def test_empty_dim_follows_pytorch_and_scipy():
    # Issue 17: an empty slice has nothing possible in it, like an all -inf slice: logsumexp
    # -inf, (log-)softmax empty; with a zero gradient. (It used to raise "empty dimension".)
    x = torch.empty(3, 0, requires_grad=True)
    lse = logsumexp(x)
    assert lse.shape == (3,) and torch.isneginf(lse).all()
    assert torch.equal(lse, torch.logsumexp(x.detach(), dim=1))
    lse.sum().backward()
    assert x.grad.shape == (3, 0)
    assert logsumexp(torch.empty(2, 0, 4), dim=1, keepdim=True).shape == (2, 1, 4)
    assert softmax(torch.empty(3, 0)).shape == (3, 0)
    assert log_softmax(torch.empty(2, 0, 4), dim=1).shape == (2, 0, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scalar_is_one_category(dtype):
    # Issue 17: a 0-d tensor is a single category (dim 0 or -1), as in PyTorch and SciPy.
    x = torch.tensor(2.5, dtype=dtype, requires_grad=True)
    out = logsumexp(x)
    assert out.shape == () and out.item() == 2.5
    out.backward()
    assert x.grad.item() == 1.0
    assert softmax(x).item() == 1.0 and log_softmax(x, dim=0).item() == 0.0
    dead = torch.tensor(-INF, dtype=dtype)
    assert softmax(dead).item() == 0.0 and log_softmax(dead).item() == -INF
    assert logsumexp(dead).item() == -INF
    with pytest.raises(ValueError, match="^softmax: argument 'dim'=1 is out of range for a 0-d"):
        softmax(x, dim=1)


def test_logsumexp_over_several_dims():
    gen_ = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64, generator=gen_) * 30
    x[0, 1, :, 2] = -INF
    x[1, :, :, 4] = -INF  # an all -inf slice over dims (1, 2)
    for dims in [(0, 2), (2, 0), (1, 2), (-1, 1), (0, 1, 2, 3), [3, 1]]:
        for keepdim in (False, True):
            ours = logsumexp(x, dim=dims, keepdim=keepdim)
            torch.testing.assert_close(ours, torch.logsumexp(x, dim=tuple(dims),
                                                             keepdim=keepdim))
    # the gradient is the softmax over the flattened slice; 0 (not NaN) on the all -inf one
    xr = x.clone().requires_grad_()
    logsumexp(xr, dim=(1, 2)).sum().backward()
    flat = x.movedim((1, 2), (2, 3)).flatten(2)
    expected = torch.softmax(flat, -1).nan_to_num(0.0).unflatten(-1, (3, 4)).movedim(
        (2, 3), (1, 2))
    torch.testing.assert_close(xr.grad, expected)
    assert torch.isfinite(xr.grad).all()
    # near 0 the result keeps its digits over several dims too (the repair path)
    y = torch.tensor([[0.0, -40.0], [-40.0, -45.0]])
    assert logsumexp(y, dim=(0, 1)).item() > 0
    assert math.isclose(logsumexp(y, dim=(0, 1)).item(),
                        math.log1p(2 * math.exp(-40) + math.exp(-45)), rel_tol=1e-6)
    with pytest.raises(ValueError, match="^logsumexp: argument 'dim'=\\(1, -2\\) names a "
                                         "dimension twice"):
        logsumexp(x[0], dim=(1, -2))
    with pytest.raises(ValueError, match="^logsumexp: argument 'dim' is an empty tuple"):
        logsumexp(x, dim=())
    with pytest.raises(ValueError, match="^logsumexp: argument 'dim'=4 is out of range"):
        logsumexp(x, dim=(0, 4))


@pytest.mark.parametrize("f", FUNCS, ids=NAMES)
@pytest.mark.parametrize("x", [torch.tensor([1, 2, 3]), torch.tensor([True, False]),
                               torch.tensor([1 + 1j])], ids=["int", "bool", "complex"])
def test_non_float_tensor_is_rejected(f, x):
    with pytest.raises(TypeError, match="argument 'x' must have a floating-point dtype"):
        f(x)


@pytest.mark.parametrize("f", FUNCS, ids=NAMES)
def test_non_tensor_is_rejected(f):
    with pytest.raises(TypeError, match="argument 'x' must be a torch.Tensor, got list"):
        f([1.0, 2.0])


@pytest.mark.parametrize("f", FUNCS, ids=NAMES)
def test_bad_dim_is_rejected(f):
    with pytest.raises(ValueError, match="argument 'dim'=2 is out of range"):
        f(torch.zeros(2, 3), 2)
    with pytest.raises(TypeError, match="argument 'dim' must be an int, got float"):
        f(torch.zeros(2, 3), 1.0)


def test_bad_flags_are_rejected():
    with pytest.raises(TypeError, match="logsumexp: argument 'keepdim' must be a bool"):
        logsumexp(torch.zeros(3), keepdim=1)
    with pytest.raises(TypeError, match="softmax: argument 'exact' must be a bool"):
        softmax(torch.zeros(3), exact="yes")


def test_bad_probabilities_for_logit_are_rejected():
    with pytest.raises(ValueError, match=r"logit: argument 'p' must lie in \[0, 1\], got 1.5"):
        logit(torch.tensor([0.5, 1.5]))
    with pytest.raises(ValueError, match="logit: argument 'p' contains NaN"):
        logit(torch.tensor([math.nan]))
    with pytest.raises(ValueError, match="sigmoid: argument 'x' contains NaN"):
        sigmoid(torch.tensor([math.nan]))


def test_bad_targets_are_rejected():
    z = torch.zeros(4, 3)
    with pytest.raises(ValueError, match=r"argument 'target' must hold class indices in \[0, 3\)"):
        cross_entropy(z, torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match=r"must have shape \(4,\)"):
        cross_entropy(z, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="must have the shape of 'logits'"):
        cross_entropy(z, torch.zeros(4, 2))
    with pytest.raises(ValueError, match="must be >= 0"):
        cross_entropy(z, torch.full((4, 3), -0.1))
    with pytest.raises(TypeError, match="must hold integer class indices or floating-point"):
        cross_entropy(z, torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="argument 'reduction' must be one of"):
        cross_entropy(z, torch.tensor([0, 1, 2, 0]), reduction="avg")
    with pytest.raises(ValueError, match=r"logistic_loss: argument 'target' must lie in \[0, 1\]"):
        logistic_loss(torch.zeros(2), torch.tensor([0.0, 2.0]))
    with pytest.raises(ValueError, match="logistic_loss: argument 'logits' contains an infinite"):
        logistic_loss(torch.tensor([INF]), torch.tensor([1.0]))


# ------------------------------------------------------------------------------------------------
# The docstring examples and the benchmark script stay runnable
# ------------------------------------------------------------------------------------------------

def test_docstring_examples():
    result = doctest.testmod(sm, extraglobs={"torch": torch})
    assert result.attempted >= 4 and result.failed == 0


def test_benchmark_quick_runs():
    ns = runpy.run_path(str(ROOT / "benchmarks" / "bench_softmax.py"))
    rows = ns["main"](["--quick"])
    assert len(rows) == 8 and all(r[3] > 0 for r in rows)


# ------------------------------------------------------------------------------------------------
# softplus and log_sigmoid: the two-class log-sum-exp
# ------------------------------------------------------------------------------------------------

def _mp_softplus(v: float) -> float:
    with mpmath.workdps(50):
        return float(mpmath.log1p(mpmath.exp(mpmath.mpf(v))))


EXTREME = [-INF, -800.0, -200.0, -104.0, -88.0, -40.0, -1e-8, 0.0, 1e-8, 1.0, 20.0, 40.0, 88.8,
           200.0, 800.0, INF]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softplus_and_log_sigmoid_exact_at_extreme_inputs(dtype):
    x = torch.tensor(EXTREME, dtype=dtype)
    tiny = torch.finfo(dtype).tiny
    for f, sign in ((softplus, 1.0), (log_sigmoid, -1.0)):
        got = f(x).double()
        for v, g in zip(EXTREME, got.tolist()):
            want = sign * _mp_softplus(sign * v) if math.isfinite(v) else (
                (INF if v > 0 else 0.0) if f is softplus else (0.0 if v > 0 else -INF))
            # the float32/float64 value of the exact result, relative error of a few ulp
            want = float(torch.tensor(want, dtype=dtype))
            if math.isinf(want) or want == 0.0:
                assert g == want, (f.__name__, v, g, want)
            else:
                assert abs(g - want) <= 4 * torch.finfo(dtype).eps * abs(want) + tiny, \
                    (f.__name__, v, g, want)


@pytest.mark.parametrize("dtype, lo, hi", [(torch.float32, -103.97, -88.73),
                                            (torch.float64, -745.13, -709.79),
                                            (torch.bfloat16, -92.5, -89.0)])
def test_sigmoid_keeps_its_subnormal_values(dtype, lo, hi):
    # torch.sigmoid on the CPU computes 1/(1+exp(-x)): exp(-x) overflows from x = -88.72 in
    # float32 and it returns 0 down to -103.97, where sigmoid(x) ~ e^x is a positive subnormal
    # (review of the third edition, the -104 / -88.7 finding). Ours: the float64 (mpmath for
    # float64) value, rounded to the dtype.
    x = torch.linspace(lo, hi, 2001, dtype=torch.float64).to(dtype)
    if dtype == torch.float64:
        with mpmath.workdps(30):
            want = torch.tensor([float(mpmath.exp(v) / (1 + mpmath.exp(v))) for v in x.tolist()],
                                dtype=torch.float64)
    else:
        xd = x.double()
        want = (torch.exp(xd) / (1 + torch.exp(xd))).to(dtype)
    assert (torch.sigmoid(x) == 0).any()          # the shortfall being fixed
    got = sigmoid(x)
    assert (got > 0).all()
    tiny = torch.finfo(dtype).tiny
    # a subnormal result carries an absolute error of at most a few of its smallest steps
    assert ((got.double() - want.double()).abs()
            <= 4 * torch.finfo(dtype).eps * want.double() + 2 * tiny * torch.finfo(dtype).eps
            ).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_sigmoid_edges_and_gradient(dtype):
    x = torch.tensor([-INF, -1e4, -20.0, -1.0, 0.0, 1.0, 20.0, 1e4, INF], dtype=dtype)
    got = sigmoid(x)
    assert got.dtype == dtype
    assert got[0] == 0 and got[-1] == 1 and got[4] == 0.5
    want = torch.sigmoid(x.double()).to(dtype).double()  # exact, rounded to the dtype
    assert torch.allclose(got.double(), want, rtol=8e-3, atol=0)
    assert sigmoid(torch.empty(0, 3, dtype=dtype)).shape == (0, 3)
    if dtype == torch.float64:
        d = torch.tensor([-800.0, -30.0, -1e-300, 0.0, 1e-300, 30.0, 800.0],
                         dtype=dtype, requires_grad=True)
        (g,) = torch.autograd.grad(sigmoid(d).sum(), d)
        want = torch.sigmoid(d.detach()) * torch.sigmoid(-d.detach())
        assert torch.allclose(g, want, rtol=1e-12, atol=0) and g[3] == 0.25
        r = torch.randn(10, dtype=dtype, generator=gen(5), requires_grad=True)
        assert torch.autograd.gradcheck(sigmoid, (r,))
        assert torch.autograd.gradgradcheck(sigmoid, (r,))
        xi = torch.tensor([-INF, INF], dtype=dtype, requires_grad=True)
        (gi,) = torch.autograd.grad(sigmoid(xi).sum(), xi)
        assert torch.equal(gi, torch.zeros(2, dtype=dtype))


def test_softplus_beats_the_naive_formulas():
    x = torch.tensor([-200.0, -40.0, 100.0, 200.0])  # float32
    # exp(-200) underflows in float32 (the exact softplus rounds to 0 there too)
    naive_sp = torch.log(1 + torch.exp(x))
    assert naive_sp[0] == 0 and naive_sp[1] == 0 and torch.isinf(naive_sp[2:]).all()
    assert softplus(x)[0] == 0
    assert abs(softplus(x)[1].item() / math.exp(-40.0) - 1) < 1e-6
    assert torch.equal(softplus(x)[2:], x[2:])
    naive_ls = torch.log(torch.sigmoid(x))
    assert torch.isinf(naive_ls[0]) and naive_ls[2] == 0
    assert log_sigmoid(x)[0] == -200.0 and log_sigmoid(x)[2] < 0
    # torch's softplus returns x itself above its threshold (20): relative error ~1e-10
    t = torch.tensor([21.0], dtype=torch.float64)
    assert F.softplus(t) == t and softplus(t) > t


def test_softplus_is_two_class_logsumexp_and_log_sigmoid_its_log_probability():
    g = gen(3)
    x = 30.0 * torch.randn(500, dtype=torch.float64, generator=g)
    pair = torch.stack([torch.zeros_like(x), x], dim=-1)
    assert torch.allclose(softplus(x), logsumexp(pair), rtol=1e-14, atol=0)
    assert torch.allclose(log_sigmoid(x), log_softmax(pair)[:, 1], rtol=1e-14, atol=1e-300)
    assert torch.allclose(log_sigmoid(x), -softplus(-x), rtol=0, atol=0)
    assert torch.allclose(log_sigmoid(x), F.logsigmoid(x), rtol=1e-14, atol=0)


def test_softplus_gradients():
    x = torch.tensor(EXTREME, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(softplus(x).sum(), x)
    assert torch.equal(g, torch.sigmoid(x.detach()))  # 1/2 at 0, 0 and 1 at -inf and +inf
    (g,) = torch.autograd.grad(log_sigmoid(x).sum(), x)
    assert torch.equal(g, torch.sigmoid(-x.detach()))
    d = torch.randn(12, dtype=torch.float64, generator=gen(4), requires_grad=True)
    for f in (softplus, log_sigmoid):
        assert torch.autograd.gradcheck(f, (d,))
        assert torch.autograd.gradgradcheck(f, (d,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softplus_half_precision_computed_in_float32(dtype):
    x = torch.tensor([-20.0, 0.0, 20.0], dtype=dtype)
    assert softplus(x).dtype == dtype and log_sigmoid(x).dtype == dtype
    for f in (softplus, log_sigmoid):
        assert torch.equal(f(x), f(x.float()).to(dtype))


@pytest.mark.parametrize("f", [softplus, log_sigmoid])
def test_softplus_bad_input_is_rejected(f):
    with pytest.raises(ValueError, match=f"^{f.__name__}: argument 'x' contains NaN"):
        f(torch.tensor([0.0, math.nan]))
    with pytest.raises(TypeError, match=f"^{f.__name__}: argument 'x' must have a floating"):
        f(torch.tensor([1, 2]))
    with pytest.raises(TypeError, match=f"^{f.__name__}: argument 'x' must be a torch.Tensor"):
        f([1.0])


# --------------------------------------------------------------------------------------------
# Issue 17: the gradient of the logistic loss at z = 0
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logistic_loss_gradient_at_zero(dtype):
    # d/dz [softplus(z) - y z] = sigmoid(z) - y: -1/2 for y = 1 and +1/2 for y = 0 at z = 0.
    # Autograd through clamp(min=0) (1 at the boundary) and abs (0 at 0) gave 1 and 0.
    z = torch.zeros(3, dtype=dtype, requires_grad=True)
    y = torch.tensor([0.0, 1.0, 0.25], dtype=dtype)
    logistic_loss(z, y, reduction="sum").backward()
    torch.testing.assert_close(z.grad, torch.tensor([0.5, -0.5, 0.25], dtype=dtype))
    z2 = torch.tensor([0.0, 1e-30, -1e-30], dtype=dtype, requires_grad=True)
    logistic_loss(z2, torch.ones(3, dtype=dtype), reduction="sum").backward()
    torch.testing.assert_close(z2.grad, torch.full((3,), -0.5, dtype=dtype))


def test_cross_entropy_gradient_in_a_zero_target_entry_is_minus_log_p():
    # d/dy_k of -sum_j y_j log p_j is -log p_k, also where y_k = 0 (label smoothing and
    # distillation differentiate in the target). It was 0 there (the term went through
    # torch.where); where p_k = 0 as well the value stays finite and the gradient NaN-free.
    x = torch.tensor([0.5, -1.0, -INF], dtype=torch.float64)
    y = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64, requires_grad=True)
    loss = cross_entropy(x, y)
    assert torch.isfinite(loss)
    loss.backward()
    ls = torch.log_softmax(x, -1)
    torch.testing.assert_close(y.grad[:2], -ls[:2])
    assert torch.isfinite(y.grad).all()


# --------------------------------------------------------------------------------------------
# Issue 17: torch.func (grad, jvp, vmap, jacrev, jacfwd, hessian) on the custom Functions
# --------------------------------------------------------------------------------------------
from torch import func as tf  # noqa: E402

FUNC_X = torch.tensor([[0.5, -1.0, 2.0, 1e4], [0.0, -INF, 1.0, -3.0], [-INF, -INF, -INF, -INF]],
                      dtype=torch.float64)
FUNC_CASES = {
    "softmax": lambda a: softmax(a, temperature=0.7),
    "log_softmax": lambda a: log_softmax(a, temperature=1.3),
    "log_softmax_dim0": lambda a: log_softmax(a[:2], dim=0),
    "logsumexp": lambda a: logsumexp(a),
    "logsumexp_keepdim": lambda a: logsumexp(a, dim=1, keepdim=True),
    "logsumexp_dims": lambda a: logsumexp(a.unflatten(1, (2, 2)), dim=(0, 2)),
    "softplus": lambda a: softplus(a.clamp(min=-50)),
    "log_sigmoid": lambda a: log_sigmoid(a.clamp(min=-50)),
    "cross_entropy": lambda a: cross_entropy(a[:2], torch.tensor([0, 2]), reduction="none"),
}


def _finite_part(out):
    return torch.where(torch.isfinite(out), out, 0.0)


def _autograd_jacobian(f, x):
    return torch.autograd.functional.jacobian(lambda a: _finite_part(f(a)), x)


@pytest.mark.parametrize("name", list(FUNC_CASES))
def test_torch_func_grad_jvp_jacrev_jacfwd_agree_with_autograd(name):
    f = FUNC_CASES[name]
    x = FUNC_X
    jac = _autograd_jacobian(f, x)
    out_shape = f(x).shape
    # grad of a weighted sum of the finite outputs
    w = torch.linspace(0.5, 1.5, int(torch.Size(out_shape).numel()),
                       dtype=torch.float64).reshape(out_shape)
    g = tf.grad(lambda a: (_finite_part(f(a)) * w).sum())(x)
    torch.testing.assert_close(g, torch.tensordot(w, jac, dims=len(out_shape)))
    # forward mode: J t (impossible entries get tangent 0 on both sides)
    t = torch.linspace(-1.0, 1.0, x.numel(), dtype=torch.float64).reshape(x.shape)
    out, tangent = tf.jvp(f, (x,), (t,))
    torch.testing.assert_close(out, f(x))
    expected = torch.tensordot(jac, t, dims=x.dim())
    torch.testing.assert_close(torch.where(torch.isfinite(out), tangent, 0.0), expected)
    assert torch.isfinite(tangent).all()
    # Jacobians both ways
    torch.testing.assert_close(tf.jacrev(lambda a: _finite_part(f(a)))(x), jac)
    torch.testing.assert_close(tf.jacfwd(lambda a: _finite_part(f(a)))(x), jac)


@pytest.mark.parametrize("name", list(FUNC_CASES))
def test_torch_func_vmap_equals_a_loop(name):
    f = FUNC_CASES[name]
    batch = torch.stack([FUNC_X, FUNC_X.flip(-1) * 0.5, FUNC_X - 3.0])
    out = tf.vmap(f)(batch)
    torch.testing.assert_close(out, torch.stack([f(b) for b in batch]))
    # the batch dimension in another place, and vmap of grad
    out1 = tf.vmap(f, in_dims=1, out_dims=0)(batch.movedim(0, 1))
    torch.testing.assert_close(out1, out)
    gs = tf.vmap(tf.grad(lambda a: _finite_part(f(a)).sum()))(batch)
    for b, gb in zip(batch, gs):
        torch.testing.assert_close(gb, tf.grad(lambda a: _finite_part(f(a)).sum())(b))


def test_torch_func_hessian_of_logsumexp_is_the_softmax_jacobian():
    x = torch.tensor([0.3, -2.0, 1.0, -INF], dtype=torch.float64)
    p = torch.softmax(x, 0)
    h = tf.hessian(logsumexp)(x)
    torch.testing.assert_close(h, torch.diag(p) - torch.outer(p, p))
    # and on an all -inf slice: 0, not NaN
    assert (tf.hessian(logsumexp)(torch.full((3,), -INF, dtype=torch.float64)) == 0).all()


def test_torch_func_vmap_still_validates_values():
    with pytest.raises(ValueError, match="^softmax: argument 'x' contains NaN"):
        tf.vmap(softmax)(torch.tensor([[0.0, 1.0], [float("nan"), 0.0]]))
    with pytest.raises(ValueError, match="^sigmoid: argument 'x' contains NaN"):
        tf.vmap(sigmoid)(torch.tensor([[0.0, 1.0], [float("nan"), 0.0]]))
    with pytest.raises(ValueError, match="^logit: argument 'p' must lie in"):
        tf.vmap(logit)(torch.tensor([[0.5], [1.5]]))


def test_without_the_private_functorch_helpers_everything_still_works(monkeypatch):
    # softmax._plain unwraps torch.func's tensors with private torch._C._functorch functions. A
    # torch without them is simulated: results are unchanged, checks outside torch.func still
    # raise, and inside vmap (where a value cannot be read) the value checks are skipped.
    import softmaxbook.softmax as sm
    from softmaxbook.gumbel import gumbel_softmax, log1mexp

    x = torch.tensor([[0.0, 1.0, -INF], [2.0, -1.0, 0.5]], dtype=torch.float64)
    with_helpers = tf.vmap(softmax)(x), tf.vmap(tf.grad(lambda a: logsumexp(a)))(x)
    g1 = tf.vmap(lambda a: gumbel_softmax(a, 0.5, generator=torch.Generator().manual_seed(3)),
                 randomness="same")(x)
    with monkeypatch.context() as m:  # a torch that lacks one of them is noticed
        m.delattr(torch._C._functorch, "get_unwrapped")
        assert sm._functorch_helpers() is None
    assert sm._functorch_helpers() is sm._FUNCTORCH is not None
    monkeypatch.setattr(sm, "_FUNCTORCH", None)
    torch.testing.assert_close(tf.vmap(softmax)(x), with_helpers[0], rtol=0, atol=0)
    torch.testing.assert_close(tf.vmap(tf.grad(lambda a: logsumexp(a)))(x), with_helpers[1],
                               rtol=0, atol=0)
    g2 = tf.vmap(lambda a: gumbel_softmax(a, 0.5, generator=torch.Generator().manual_seed(3)),
                 randomness="same")(x)
    torch.testing.assert_close(g2, g1, rtol=0, atol=0)
    # outside torch.func the checks run as before
    with pytest.raises(ValueError, match="^softmax: argument 'x' contains NaN"):
        softmax(torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="^logit: argument 'p' must lie in"):
        logit(torch.tensor([1.5]))
    with pytest.raises(ValueError, match="^log1mexp: argument 'x' must be <= 0"):
        log1mexp(torch.tensor([0.5]))
    # inside vmap a batched value cannot be read: the check is skipped, not a crash (NaN in,
    # NaN out); softmax's own check still runs there (its autograd Function sees plain tensors)
    out = tf.vmap(sigmoid)(torch.tensor([[0.0, 1.0], [float("nan"), 0.0]]))
    assert torch.isnan(out[1, 0]) and torch.isfinite(out[0]).all()
    out = tf.vmap(logit)(torch.tensor([[0.5], [1.5]]))
    assert out[0].item() == 0.0 and torch.isnan(out[1]).all()
    assert torch.isnan(tf.vmap(log1mexp)(torch.tensor([[-1.0], [0.5]]))[1]).all()
    with pytest.raises(ValueError, match="^softmax: argument 'x' contains NaN"):
        tf.vmap(softmax)(torch.tensor([[0.0, 1.0], [float("nan"), 0.0]]))
    # an error that is not torch.func's refusal still propagates
    with pytest.raises(RuntimeError, match="boom"):
        sm._on_plain(lambda t: (_ for _ in ()).throw(RuntimeError("boom")))(x)
