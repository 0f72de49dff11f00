"""The checks of the Euler-Lagrange chapter's coding exercises accept right answers and reject
plausible wrong ones with a message that names the input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from softmaxbook.exercises import ExerciseCheckFailed, check, registered
from softmaxbook.variational import el_residual


def test_registered():
    assert registered("variational") == ["variational-beltrami", "variational-ex-catenary",
                                         "variational-ex-sinh", "variational-jacobi",
                                         "variational-maxent", "variational-residual"]


def stub(*args):
    raise NotImplementedError


# --- variational-residual --------------------------------------------------------------------
def derivatives(f, x):
    x = x.detach().clone().requires_grad_(True)
    y = f(x)
    (d1,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    if not d1.requires_grad:
        return y.detach(), d1.detach(), torch.zeros_like(x)
    (d2,) = torch.autograd.grad(d1.sum(), x, allow_unused=True)
    return y.detach(), d1.detach(), (torch.zeros_like(x) if d2 is None else d2)


def right_residual(f, x):
    y, _, d2 = derivatives(f, x)
    return 2 * y - 2 * d2


def residual_by_func(f, x):
    # torch.func: f'' as the grad of the grad of f at each scalar point
    d2 = torch.func.vmap(torch.func.grad(torch.func.grad(f)))(x)
    return 2 * f(x) - 2 * d2


def residual_by_backward(f, x):
    # .backward twice on a copy, reading .grad
    t = x.clone().requires_grad_(True)
    y = f(t)
    (d1,) = torch.autograd.grad(y, t, torch.ones_like(y), create_graph=True)
    d1.sum().backward()
    return (2 * y - 2 * t.grad).detach()


@pytest.mark.parametrize("answer", [right_residual, residual_by_func, residual_by_backward])
def test_residual_accepts_right_answers(answer, capsys):
    assert check("variational-residual", answer)
    assert "correct on 5 test cases" in " ".join(capsys.readouterr().out.split())


def residual_on_callers_x(f, x):
    # the review's leak: requires_grad_ on the caller's tensor ("do not change x")
    x.requires_grad_(True)
    y = f(x)
    (d1,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), x)
    return (2 * y - 2 * d2).detach()


def residual_backward_on_callers_x(f, x):
    # the same, leaving a .grad on the caller's x
    x.requires_grad_(True)
    y = f(x)
    (d1,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    d1.sum().backward()
    return (2 * y - 2 * x.grad).detach()


def finite_difference(f, x, h=1e-4):
    return 2 * f(x) - 2 * (f(x + h) - 2 * f(x) + f(x - h)) / h ** 2


@pytest.mark.parametrize("answer, message", [
    # the sign of the d/dx term flipped
    (lambda f, x: -right_residual(f, x), "for input f = sin"),
    # the factors 2 forgotten (a multiple of the residual: still 0 at sinh, caught at sin)
    (lambda f, x: right_residual(f, x) / 2, r"for input f = sin\(x\)"),
    # f' instead of f''
    (lambda f, x: 2 * derivatives(f, x)[0] - 2 * derivatives(f, x)[1],
     r"for input f = sinh\(x\)"),
    # f'' by a finite difference: close, but not to 1e-9
    (finite_difference, r"(?s)for input f = .*Hint: .*finite difference"),
    # the sign of f'' flipped (2f + 2f''): wrong even at the solution sinh
    (lambda f, x: 2 * derivatives(f, x)[0] + 2 * derivatives(f, x)[2],
     r"for input f = sinh\(x\)"),
    # computed in float32: 1e-7 off
    (lambda f, x: right_residual(f, x.float()),
     r"for input f = sinh\(x\).* dtype torch.float32, not float64"),
    # the library's el_residual: forbidden
    (lambda f, x: el_residual(lambda t, y, p: p ** 2 + y ** 2, f, x),
     "calls softmaxbook.variational.el_residual"),
    # x.requires_grad_(True) on the caller's tensor
    (residual_on_callers_x, r"for input f = sinh\(x\).*changed x: it now requires grad"),
    (residual_backward_on_callers_x, r"changed x: it now requires grad and holds a \.grad"),
    # the d/dx term forgotten: 2f
    (lambda f, x: 2 * derivatives(f, x)[0], r"for input f = sinh\(x\)"),
    # only the d/dx term: -2f''
    (lambda f, x: -2 * derivatives(f, x)[2], r"for input f = sinh\(x\)"),
    # f'' by autograd, but of the wrong function (f' differentiated once only, then doubled)
    (lambda f, x: 2 * derivatives(f, x)[0] - 4 * derivatives(f, x)[1],
     r"for input f = sinh\(x\)"),
    (lambda f, x: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_residual_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("variational-residual", answer)


def test_residual_forbidden_call_detected_via_module_attribute():
    import softmaxbook.variational as v

    def sneaky(f, x):
        return v.el_residual(lambda t, y, p: p ** 2 + y ** 2, f, x)

    with pytest.raises(ExerciseCheckFailed, match="el_residual"):
        check("variational-residual", sneaky)


def test_residual_rejects_mutating_x():
    def mutating(f, x):
        r = right_residual(f, x)
        x.mul_(2)
        return r

    with pytest.raises(ExerciseCheckFailed, match="changed x"):
        check("variational-residual", mutating)


# --- variational-maxent ----------------------------------------------------------------------
def solve_beta(energies, mean_energy):
    lo, hi = -50.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if float((torch.softmax(-mid * energies, 0) * energies).sum()) > mean_energy:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def right_maxent(energies, mean_energy):
    return torch.softmax(-solve_beta(energies, mean_energy) * energies, 0)


def maxent_newton(energies, mean_energy):
    # Newton's method on beta: d mean / d beta = -variance
    beta = 0.0
    for _ in range(100):
        p = torch.softmax(-beta * energies, 0)
        mean = (p * energies).sum()
        var = (p * (energies - mean) ** 2).sum()
        step = float((mean - mean_energy) / var)
        beta = beta + max(-10.0, min(10.0, step))
    return torch.softmax(-beta * energies, 0)


def maxent_log_space(energies, mean_energy):
    # bisection, weights from log_softmax of energies shifted by their mean
    e = energies - energies.mean()
    beta = solve_beta(energies, mean_energy)
    return torch.log_softmax(-beta * e, 0).exp()


@pytest.mark.parametrize("answer", [right_maxent, maxent_newton, maxent_log_space])
def test_maxent_accepts_right_answers(answer, capsys):
    assert check("variational-maxent", answer)
    assert "correct on 7 test cases" in capsys.readouterr().out


def maxent_float32_inside(energies, mean_energy):
    # the review's case: computed in float32, returned as float64 -- rejected before with a
    # misleading "not a probability vector (sum 1)"
    return right_maxent(energies.float(), mean_energy).double()


def maxent_few_bisections(energies, mean_energy):
    # 12 bisection steps on [-50, 50]: beta only to 0.02
    lo, hi = -50.0, 50.0
    for _ in range(12):
        mid = (lo + hi) / 2
        if float((torch.softmax(-mid * energies, 0) * energies).sum()) > mean_energy:
            lo = mid
        else:
            hi = mid
    return torch.softmax(-(lo + hi) / 2 * energies, 0)


def test_maxent_float32_message_names_the_dtype_not_the_sum():
    with pytest.raises(ExerciseCheckFailed) as err:
        check("variational-maxent", maxent_float32_inside)
    text = " ".join(str(err.value).split())
    assert "sums to 1" in text or "sum to 1" in text
    assert "float64" in text and "(sum 1)" not in text


def shifted_by(energies, mean_energy, shift):
    # bisection with weights exp(-beta (E - shift)) for a fixed shift of the energies
    def probs(beta):
        w = torch.exp(-beta * (energies - shift))
        return w / w.sum()

    lo, hi = -1.0, 1.0
    while float((probs(lo) * energies).sum()) < mean_energy:
        lo *= 2
    while float((probs(hi) * energies).sum()) > mean_energy:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if float((probs(mid) * energies).sum()) > mean_energy:
            lo = mid
        else:
            hi = mid
    return probs((lo + hi) / 2)


def naive_exp(energies, mean_energy):
    w = torch.exp(-solve_beta(energies, mean_energy) * energies)
    return w / w.sum()


def two_point(energies, mean_energy):
    # the right mean, but not the maximum-entropy distribution: mass on the extreme states
    lo, hi = int(energies.argmin()), int(energies.argmax())
    a = (energies[hi] - mean_energy) / (energies[hi] - energies[lo])
    p = torch.zeros_like(energies)
    p[lo], p[hi] = a, 1 - a
    return p


@pytest.mark.parametrize("answer, message", [
    (naive_exp, r"for input energies \[10000, 10001, 10003\].*NaN"),
    # beta fixed at 1: a softmax, but the constraint is ignored
    (lambda e, m: torch.softmax(-e, 0), r"for input energies \[0, 1, 2, 3\], mean 1.5.*mean "
                                        r"energy"),
    # softmax(+beta E): the sign of beta flipped
    (lambda e, m: torch.softmax(solve_beta(e, m) * e, 0), "for input energies .*mean energy"),
    (lambda e, m: torch.full_like(e, 1 / e.numel()), r"mean 0.8 \(below the average\).*mean "
                                                     r"energy"),
    (two_point, r"(?s)for input energies \[0, 1, 2, 3\], mean 1.5.*expected "
                r"distribution"),
    # beta searched only in [0, 50]: a mean above the plain average needs beta < 0
    (lambda e, m: torch.softmax(-max(solve_beta(e, m), 0.0) * e, 0),
     r"mean 2.6 \(above the average\).*mean energy"),
    # computed in float32
    (lambda e, m: right_maxent(e.float(), m),
     r"for input energies \[0, 1, 2, 3\], mean 1.5.* dtype torch.float32, not float64"),
    (lambda e, m: right_maxent(e, m)[None], "should be a tensor of shape"),
    (maxent_float32_inside, r"(?s)for input energies \[0, 1, 2, 3\], mean 1.5.*probabilities "
                            r"sum to 1 . .*float64 rounding"),
    (maxent_few_bisections, r"mean 1.5.*mean energy"),
    # weights not normalised
    (lambda e, m: torch.exp(-solve_beta(e, m) * (e - e.min())),
     r"mean 1.5.*not a probability vector: it sums to 1 \+"),
    # stabilised by a fixed shift of the energies instead of the largest logit (independent
    # review, fourth edition): right for the first five cases, but exp(-beta (E - min E))
    # overflows for beta < 0 and exp(-beta (E - max E)) for beta > 0 once |beta| x spread is
    # large (about 850 here)
    (lambda e, m: shifted_by(e, m, e.min()),
     r"(?s)energies \[0, 999, 1000\], mean 999.7.*NaN or inf.*largest logit"),
    (lambda e, m: shifted_by(e, m, e.max()),
     r"(?s)energies \[0, 1, 1000\], mean 0.3.*every probability is 0.*largest logit"),
    (lambda e, m: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_maxent_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("variational-maxent", answer)


# --- variational-beltrami --------------------------------------------------------------------
def beltrami_parts(F, f, x):
    """F, f', dF/df' and dF/df along the path, by autograd (x, f, f' independent in F)."""
    x = x.detach().clone().requires_grad_(True)
    y = f(x)
    (yp,) = torch.autograd.grad(y.sum(), x)
    fv = y.detach().clone().requires_grad_(True)
    pv = yp.clone().requires_grad_(True)
    val = F(x.detach(), fv, pv)
    dF_df, dF_dp = torch.autograd.grad(val.sum(), (fv, pv), allow_unused=True)
    dF_df = torch.zeros_like(fv) if dF_df is None else dF_df
    return val.detach(), pv.detach(), dF_dp, dF_df


def right_beltrami(F, f, x):
    val, p, dF_dp, _ = beltrami_parts(F, f, x)
    return val - p * dF_dp


def beltrami_by_backward(F, f, x):
    # f' from .backward on a copy; dF/df' from .backward on a leaf copy of f'
    t = x.clone().requires_grad_(True)
    f(t).sum().backward()
    p = t.grad.clone().requires_grad_(True)
    value = F(x.clone(), f(x.clone()).detach(), p)
    value.sum().backward()
    return (value - p * p.grad).detach()


@pytest.mark.parametrize("answer", [right_beltrami, beltrami_by_backward])
def test_beltrami_accepts_right_answers(answer, capsys):
    assert check("variational-beltrami", answer)
    assert "correct on 5 test cases" in " ".join(capsys.readouterr().out.split())


def beltrami_on_callers_x(F, f, x):
    # the review's leak: requires_grad_ on the caller's tensor ("do not change x")
    x.requires_grad_(True)
    return right_beltrami(F, f, x)


def beltrami_total_derivative(F, f, x):
    # dF/dx along the path in place of the partial dF/df'
    t = x.detach().clone().requires_grad_(True)
    y = f(t)
    (yp,) = torch.autograd.grad(y.sum(), t, create_graph=True)
    val = F(t, y, yp)
    (dF_dx,) = torch.autograd.grad(val.sum(), t)
    return (val - yp * dF_dx).detach()


def fd_slope_beltrami(F, f, x, h=6e-6):
    # f' by a central difference at its best step; dF/df' by autograd
    p = ((f(x + h) - f(x - h)) / (2 * h)).requires_grad_(True)
    val = F(x, f(x), p)
    (dF_dp,) = torch.autograd.grad(val.sum(), p)
    return (val - p * dF_dp).detach()


CATENARY = r"for input F = f\*sqrt\(1 \+ fp\*\*2\) \(the catenary's\), f = cosh"


@pytest.mark.parametrize("answer, message", [
    # the sign of the second term flipped: F + f' dF/df'
    (lambda F, f, x: (lambda v, p, Fp, Ff: v + p * Fp)(*beltrami_parts(F, f, x)), CATENARY),
    # the constant with the wrong sign: f' dF/df' - F
    (lambda F, f, x: -right_beltrami(F, f, x), CATENARY),
    # the factor f' forgotten
    (lambda F, f, x: (lambda v, p, Fp, Ff: v - Fp)(*beltrami_parts(F, f, x)), CATENARY),
    # dF/df instead of dF/df'
    (lambda F, f, x: (lambda v, p, Fp, Ff: v - p * Ff)(*beltrami_parts(F, f, x)), CATENARY),
    # F alone
    (lambda F, f, x: beltrami_parts(F, f, x)[0], CATENARY),
    # float32
    (lambda F, f, x: right_beltrami(F, f, x).float(), "dtype torch.float32, not float64"),
    # f' by a finite difference: 1e-11 off, not 1e-13
    (fd_slope_beltrami, r"(?s)for input F = .*Hint: .*finite difference"),
    # x.requires_grad_(True) on the caller's tensor
    (beltrami_on_callers_x, "changed x: it now requires grad"),
    # the total derivative dF/dx along the path for dF/df'
    (beltrami_total_derivative, CATENARY),
    # f'^2 for f'
    (lambda F, f, x: (lambda v, p, Fp, Ff: v - p ** 2 * Fp)(*beltrami_parts(F, f, x)),
     CATENARY),
    # the second term alone: f' dF/df'
    (lambda F, f, x: (lambda v, p, Fp, Ff: p * Fp)(*beltrami_parts(F, f, x)), CATENARY),
    (lambda F, f, x: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_beltrami_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("variational-beltrami", answer)


# --- variational-ex-sinh: f = (a sinh(1 - x) + b sinh x) / sinh 1 ---------------------------------
def el_solution(x, a, b):
    return (a * torch.sinh(1 - x) + b * torch.sinh(x)) / math.sinh(1.0)


def el_solution_exponentials(x, a, b):
    # A e^x + B e^-x with A + B = a, A e + B / e = b
    e = math.e
    A = (b - a / e) / (e - 1 / e)
    return A * torch.exp(x) + (a - A) * torch.exp(-x)


def el_solution_cosh(x, a, b):
    # a cosh x + D sinh x, D fitted to f(1) = b; through NumPy and back, in float64
    xn = x.numpy()
    return torch.from_numpy(a * np.cosh(xn) + (b - a * np.cosh(1.0)) / np.sinh(1.0) * np.sinh(xn))


@pytest.mark.parametrize("answer", [el_solution, el_solution_exponentials, el_solution_cosh])
def test_sinh_accepts_right_answers(answer, capsys):
    assert check("variational-ex-sinh", answer)
    assert "correct on 7 test cases" in " ".join(capsys.readouterr().out.split())


def sinh_in_place(x, a, b):
    return x.sinh_().mul_(b / math.sinh(1.0))


S1 = math.sinh(1.0)


@pytest.mark.parametrize("answer, message", [
    # the chapter's printed path, for every a and b (review of the new checks, H4)
    (lambda x, a, b: torch.sinh(x) / S1, "(?s)a = 2, b = -1.*misses an end point"),
    # the general solution without fitting the right end
    (lambda x, a, b: a * torch.cosh(x) + b * torch.sinh(x), "misses an end point"),
    # only b's half: f(0) = a forgotten
    (lambda x, a, b: b * torch.sinh(x) / S1, "(?s)a = 2, b = -1.*misses an end point"),
    # a added on top: f(1) = a + b
    (lambda x, a, b: a + b * torch.sinh(x) / S1, "misses an end point"),
    # a and b swapped
    (lambda x, a, b: (b * torch.sinh(1 - x) + a * torch.sinh(x)) / S1, "misses an end point"),
    # a sinh(x - 1): the sign of the left term
    (lambda x, a, b: (a * torch.sinh(x - 1) + b * torch.sinh(x)) / S1, "misses an end point"),
    # f'' = -f: the sign of the Euler-Lagrange equation
    (lambda x, a, b: (a * torch.sin(1 - x) + b * torch.sin(x)) / math.sin(1.0),
     "(?s)too large.*solves f'' = -f"),
    # the straight line (the minimiser of the integral of f'^2)
    (lambda x, a, b: a + (b - a) * x, "(?s)too large.*straight line"),
    # f'' = 2f (a factor lost on one side of the equation)
    (lambda x, a, b: (a * torch.sinh(math.sqrt(2) * (1 - x)) + b * torch.sinh(math.sqrt(2) * x))
     / math.sinh(math.sqrt(2)), "too small"),
    # cosh instead of sinh, shifted to the ends (right only for a = 0)
    (lambda x, a, b: a + (b - a) * (torch.cosh(x) - 1) / (math.cosh(1.0) - 1), "wrong at"),
    (lambda x, a, b: el_solution(x.float(), a, b), "your path is torch.float32"),
    (lambda x, a, b: el_solution(x, a, b).sum(), "should be a float tensor of shape .2,."),
    (lambda x, a, b: [float(v) for v in el_solution(x, a, b)], "should be a float tensor"),
    (sinh_in_place, "changed x"),
    (stub, "NotImplementedError"),
    (..., "no answer yet"),
])
def test_sinh_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("variational-ex-sinh", answer)


def test_sinh_rejects_a_table_of_the_public_points():
    from softmaxbook.exercises import salted
    from softmaxbook.exercises.variational import _sinh_cases
    table = {(float(v), a, b): float(el_solution(v, a, b))
             for _, x, a, b in _sinh_cases() for v in x.flatten()}

    def lookup(x, a, b):
        return torch.tensor([table.get((float(v), a, b), 0.5) for v in x.flatten()],
                            dtype=torch.float64).reshape(x.shape)

    assert check("variational-ex-sinh", lookup)
    with salted(12345), pytest.raises(ExerciseCheckFailed, match="random points"):
        check("variational-ex-sinh", lookup)


# --- variational-ex-catenary: F - f' dF/df' = f / sqrt(1 + f'^2) ----------------------------------
def catenary_invariant(f, fp):
    return f / torch.sqrt(1 + fp**2)


def catenary_invariant_unsimplified(f, fp):
    # F - f' dF/df' as it comes, without the common denominator
    root = torch.sqrt(1 + fp**2)
    return f * root - fp * (f * fp / root)


def catenary_invariant_by_autograd(f, fp):
    # dF/df' by autograd on a copy of the slope
    p = fp.detach().clone().requires_grad_(True)
    F = f * torch.sqrt(1 + p**2)
    (dF,) = torch.autograd.grad(F.sum(), p)
    return (F - p * dF).detach()


@pytest.mark.parametrize("answer", [catenary_invariant, catenary_invariant_unsimplified,
                                    catenary_invariant_by_autograd,
                                    lambda f, fp: f * torch.rsqrt(1 + fp * fp)])
def test_catenary_invariant_accepts_right_answers(answer, capsys):
    assert check("variational-ex-catenary", answer)
    assert "correct on 5 test cases" in " ".join(capsys.readouterr().out.split())


def catenary_in_place(f, fp):
    return f.div_(torch.sqrt(1 + fp**2))


@pytest.mark.parametrize("answer, message", [
    (lambda f, fp: f * torch.sqrt(1 + fp**2), "(?s)wrong at 4 of 4 entries.*too large.*F itself"),
    (lambda f, fp: f * fp**2 / torch.sqrt(1 + fp**2), "(?s)too small.*alone"),
    (lambda f, fp: f * torch.sqrt(1 + fp**2) + f * fp**2 / torch.sqrt(1 + fp**2),
     "(?s)too large.*mind the sign"),
    (lambda f, fp: f * fp / torch.sqrt(1 + fp**2), "(?s)wrong at 2 of 2 entries.*dF/df' alone"),
    (lambda f, fp: torch.sqrt(1 + fp**2), "(?s)too small.*derivative in f'"),
    (lambda f, fp: -f / torch.sqrt(1 + fp**2), "(?s)wrong at 2 of 2 entries.*too small"),
    (lambda f, fp: f / (1 + fp**2), "wrong at 4 of 4 entries"),
    (lambda f, fp: 1 / torch.sqrt(1 + fp**2), "(?s)for f = 2.5, fp = 0 you return 1"),
    # f dropped from the subtracted term (right where f = 1 only)
    (lambda f, fp: f * torch.sqrt(1 + fp**2) - fp**2 / torch.sqrt(1 + fp**2),
     "(?s)cosh.x. at x = -1, 0.5, 1.*wrong at 3 of 3 entries"),
    (lambda f, fp: f / torch.sqrt(1 - fp**2), "(?s)wrong at 4 of 4 entries.*not a number"),
    (lambda f, fp: torch.sqrt(f**2 - 1 + 0 * fp), "wrong at"),
    (lambda f, fp: (f / torch.sqrt(1 + fp**2)).float(), "your value is torch.float32"),
    (lambda f, fp: float(f[0] / math.sqrt(1 + float(fp[0]) ** 2)),
     "should be a float tensor of shape"),
    (catenary_in_place, "changed its arguments in place"),
    (stub, "NotImplementedError"),
    (..., "no answer yet"),
])
def test_catenary_invariant_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("variational-ex-catenary", answer)


def test_sinh_end_points_use_the_stated_tolerance():
    """The task says 1e-9 (review of the new derivation checks, M2): sinh 1 typed to ten digits
    (3e-10 off) passes; float32 sinh(1) (1.4e-8 off) fails with the precision hint and the
    values printed to 12 digits, not as 'tensor([0, 1])'."""
    assert check("variational-ex-sinh",
                 lambda x, a, b: (a * torch.sinh(1 - x) + b * torch.sinh(x)) / 1.175201194)
    with pytest.raises(ExerciseCheckFailed, match=r"(?s)1\.00000001365.*off by 1\.4e-08"
                                                  r".*precision was lost"):
        check("variational-ex-sinh", lambda x, a, b: (a * torch.sinh(1 - x) + b * torch.sinh(x))
              / torch.sinh(torch.tensor(1.0)))


# --- R3 review: finite differences of higher order, right answers written otherwise, in place ---
BESIDE_X = r"(?s)evaluates f at .*not one of the x given: a finite difference"


def five_point_residual(f, x, h=2e-3):
    # f'' by the 5-point stencil: within 1e-9 of the exact residual at h = 2e-3 to 5e-3, so
    # the comparison's tolerance alone let it through (R3 review)
    d2 = (-f(x + 2 * h) + 16 * f(x + h) - 30 * f(x) + 16 * f(x - h) - f(x - 2 * h)) / (12 * h * h)
    return 2 * f(x) - 2 * d2


def richardson_residual(f, x, h=4e-3):
    # Richardson extrapolation of the 3-point stencil (order 4): also passed before
    def c(k):
        return (f(x + k) - 2 * f(x) + f(x - k)) / k ** 2
    return 2 * f(x) - 2 * (4 * c(h / 2) - c(h)) / 3


def seven_point_residual(f, x, h=1e-2):
    w = [2, -27, 270, -490, 270, -27, 2]
    d2 = sum(c * f(x + (i - 3) * h) for i, c in enumerate(w)) / (180 * h * h)
    return 2 * f(x) - 2 * d2


@pytest.mark.parametrize("answer", [five_point_residual, richardson_residual,
                                    seven_point_residual,
                                    lambda f, x: five_point_residual(f, x, 5e-3)])
def test_residual_rejects_finite_differences_of_any_order(answer):
    with pytest.raises(ExerciseCheckFailed, match=BESIDE_X):
        check("variational-residual", answer)


def residual_by_hessian(f, x):
    # the Hessian of sum f by torch.autograd.functional: diagonal, since f is elementwise
    t = x.detach().clone()
    H = torch.autograd.functional.hessian(lambda v: f(v).sum(), t)
    return (2 * f(t) - 2 * H.diagonal()).detach()


def residual_point_by_point(f, x):
    # a loop over the points, each a 0-d tensor with its own graph
    out = []
    for v in x:
        t = v.detach().clone().requires_grad_(True)
        y = f(t)
        (d1,) = torch.autograd.grad(y, t, create_graph=True)
        (d2,) = torch.autograd.grad(d1, t)
        out.append(2 * y.detach() - 2 * d2)
    return torch.stack(out)


@pytest.mark.parametrize("answer", [residual_by_hessian, residual_point_by_point,
                                    residual_by_func])
def test_residual_guard_accepts_autograd_answers(answer, capsys):
    assert check("variational-residual", answer)
    assert "correct on 5 test cases" in " ".join(capsys.readouterr().out.split())


def seven_point_slope_beltrami(F, f, x, h=1e-2):
    # f' by a 7-point stencil (order 6), dF/df' by autograd
    w = [-1, 9, -45, 0, 45, -9, 1]
    p = (sum(c * f(x + (i - 3) * h) for i, c in enumerate(w)) / (60 * h)).requires_grad_(True)
    val = F(x, f(x), p)
    (dF_dp,) = torch.autograd.grad(val.sum(), p)
    return (val - p * dF_dp).detach()


def test_beltrami_rejects_a_high_order_finite_difference():
    with pytest.raises(ExerciseCheckFailed, match=BESIDE_X):
        check("variational-beltrami", seven_point_slope_beltrami)


def test_maxent_rejects_changing_energies_in_place():
    def in_place(energies, mean_energy):
        p = right_maxent(energies, mean_energy)
        energies.sub_(energies.min())
        return p

    with pytest.raises(ExerciseCheckFailed,
                       match=r"(?s)energies \[2, -1, 0.5, 4, 0\].*changed energies in place"):
        check("variational-maxent", in_place)


# --- R4 review: a finite difference under torch.func.vmap, which the point recorder cannot read ---
def vmap_five_point_residual(f, x, h=2e-3):
    # the 5-point stencil written per point under vmap: within 1e-9 of the exact residual, and
    # vmap's batched tensors hide the points x ± h from the recorder (R4 review: it passed)
    def one(t):
        d2 = (-f(t + 2 * h) + 16 * f(t + h) - 30 * f(t) + 16 * f(t - h) - f(t - 2 * h)) \
            / (12 * h * h)
        return 2 * f(t) - 2 * d2
    return torch.func.vmap(one)(x)


def test_residual_rejects_a_finite_difference_under_vmap():
    with pytest.raises(ExerciseCheckFailed, match=r"(?s)residual.*finite difference"):
        check("variational-residual", vmap_five_point_residual)


def test_off_point_term_leaves_value_and_two_derivatives_at_the_points():
    from softmaxbook.exercises.variational import _OFF_POINT_WEIGHT, _off_point_term
    x = torch.linspace(-1.5, 1.5, 7, dtype=torch.float64)
    t = x.clone().requires_grad_(True)
    v = _off_point_term(t, x)
    (d1,) = torch.autograd.grad(v.sum(), t, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), t)
    assert v.abs().max() == 0 and d1.abs().max() == 0 and d2.abs().max() == 0
    h = 2e-3  # beside the points it is M |h|^3, which a stencil for f'' turns into about M h
    want = torch.full_like(x, _OFF_POINT_WEIGHT * h ** 3)
    assert torch.allclose(_off_point_term(x + h, x), want)


# --- variational-jacobi ----------------------------------------------------------------------
from torch.func import grad as fgrad, vmap  # noqa: E402


def jacobi_variant(variant=None):
    """The coefficients P = F_f'f', Q = F_ff - d/dx F_ff' by torch.func; ``variant`` names a
    plausible mistake."""
    def jacobi(F, f, x):
        x = x.detach()
        y = f(x)
        if variant == "finite difference":
            h = 1e-4
            yp = (f(x + h) - f(x - h)) / (2 * h)
            ypp = (f(x + h) - 2 * y + f(x - h)) / h ** 2
        else:
            yp = vmap(fgrad(f))(x)
            ypp = vmap(fgrad(fgrad(f)))(x)
        F_f, F_p = fgrad(F, argnums=1), fgrad(F, argnums=2)
        P = vmap(fgrad(F_p, argnums=2))(x, y, yp)
        F_ff = vmap(fgrad(F_f, argnums=1))(x, y, yp)
        d_x, d_f, d_p = vmap(fgrad(fgrad(F_f, argnums=2), argnums=(0, 1, 2)))(x, y, yp)
        total = {"no x": d_f * yp + d_p * ypp, "no f'": d_x + d_p * ypp,
                 "no f''": d_x + d_f * yp}.get(variant, d_x + d_f * yp + d_p * ypp)
        Q = F_ff - total
        if variant == "F_ff only":
            Q = F_ff
        if variant == "plus":
            Q = F_ff + total
        if variant == "half":
            P, Q = P / 2, Q / 2
        if variant == "swapped":
            P, Q = Q, P
        if variant == "F_p":
            P = vmap(F_p)(x, y, yp)
        if variant == "float32":
            P, Q = P.float(), Q.float()
        if variant == "P only":
            return P.detach()
        return P.detach(), Q.detach()
    return jacobi


def jacobi_by_autograd(F, f, x):
    # torch.autograd.grad throughout; a partial derivative that F does not have is 0
    def d(out, inputs, **kw):
        if not out.requires_grad:
            return [torch.zeros_like(i) for i in inputs]
        gs = torch.autograd.grad(out.sum(), inputs, allow_unused=True, **kw)
        return [torch.zeros_like(i) if g is None else g for g, i in zip(gs, inputs)]

    xg = x.detach().clone().requires_grad_(True)
    y = f(xg)
    (yp,) = d(y, [xg], create_graph=True)
    (ypp,) = d(yp, [xg])
    X, Y, Yp = (t.detach().clone().requires_grad_(True) for t in (x, y, yp))
    Ff, Fp = d(F(X, Y, Yp), [Y, Yp], create_graph=True)
    (P,) = d(Fp, [Yp], retain_graph=True)
    Fff, Ffp = d(Ff, [Y, Yp], create_graph=True)
    gx, gf, gp = d(Ffp, [X, Y, Yp])
    Q = Fff - (gx + gf * yp.detach() + gp * ypp.detach())
    return P.detach(), Q.detach()


def jacobi_by_composite(F, f, x):
    # d/dx F_ff' as the derivative of the composite x -> F_ff'(x, f(x), f'(x))
    F_f = fgrad(F, argnums=1)
    F_fp = fgrad(F_f, argnums=2)
    F_pp = fgrad(fgrad(F, argnums=2), argnums=2)

    def composite(t):
        return F_fp(t, f(t), fgrad(f)(t))

    x = x.detach()
    y, yp = f(x), vmap(fgrad(f))(x)
    Q = vmap(fgrad(F_f, argnums=1))(x, y, yp) - vmap(fgrad(composite))(x)
    return vmap(F_pp)(x, y, yp).detach(), Q.detach()


@pytest.mark.parametrize("answer", [jacobi_variant(), jacobi_by_autograd,
                                    jacobi_by_composite])
def test_jacobi_accepts_right_answers(answer, capsys):
    assert check("variational-jacobi", answer)
    assert "correct on 6 test cases" in " ".join(capsys.readouterr().out.split())


def jacobi_mutating(F, f, x):
    x.requires_grad_(True)
    return jacobi_variant()(F, f, x)


def jacobi_calls_el_residual(F, f, x):
    from softmaxbook.variational import el_residual as r
    r(F, f, x)
    return jacobi_variant()(F, f, x)


@pytest.mark.parametrize("answer, message", [
    # on the catenary F_ff alone is also Q without its f'' term: either hint is true
    (jacobi_variant("F_ff only"), "(?s)catenary.*Q.*(F_ff alone|f″ ∂/∂f′ F_ff′)"),
    (jacobi_variant("plus"), "(?s)catenary.*Q.*mind the sign"),
    (jacobi_variant("no x"), r"(?s)x\*\*2\*f\*fp.*Q.*explicit x-dependence"),
    (jacobi_variant("no f'"), r"(?s)f\*\*2\*fp\*\*2/2.*Q.*the term f′ ∂/∂f F_ff′"),
    (jacobi_variant("no f''"), r"(?s)catenary.*Q.*the term f″ ∂/∂f′ F_ff′"),
    (jacobi_variant("half"), "(?s)fp\\*\\*2 \\+ f\\*\\*2.*P.*half of it"),
    (jacobi_variant("swapped"), "(?s)catenary.*P.*swapped"),
    (jacobi_variant("F_p"), "(?s)fp\\*\\*2 \\+ f\\*\\*2.*P.*that is ∂F/∂f′"),
    (jacobi_variant("float32"), "(?s)dtype torch.float32"),
    (jacobi_variant("finite difference"), "(?s)a point that is not one of the x given"),
    (jacobi_variant("P only"), "should be a pair"),
    (jacobi_mutating, "changed x"),
    (jacobi_calls_el_residual, "calls softmaxbook.variational.el_residual"),
    (stub, "NotImplementedError"),
    (..., "no answer yet"),
])
def test_jacobi_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("variational-jacobi", answer)


def test_jacobi_closed_forms_match_autograd():
    """The check's expected values (closed forms written by hand) agree with an independent
    autograd computation, so that a typo in them cannot reject right answers."""
    from softmaxbook.exercises.variational import _JACOBI_CASES
    for name, F, f, x, exact in _JACOBI_CASES:
        P, Q = jacobi_by_autograd(F, f, x)
        Pe, Qe = exact(x)
        assert torch.allclose(P, Pe, atol=1e-12) and torch.allclose(Q, Qe, atol=1e-12), name


def jacobi_by_differences_in_F(h, order=2):
    """F_ff, F_f'f' and F_ff' by torch.func, the three partials of F_ff' by a central difference
    in F's own arguments: f is called at the points x only, so the path's guard cannot see it.
    Before the R5 review this passed at h = 1e-5 and 1e-6 (the check handed F over raw)."""
    def jacobi(F, f, x):
        x = x.detach()
        y, yp, ypp = f(x), vmap(fgrad(f))(x), vmap(fgrad(fgrad(f)))(x)
        F_f, F_p = fgrad(F, argnums=1), fgrad(F, argnums=2)
        P = vmap(fgrad(F_p, argnums=2))(x, y, yp)
        F_ff = vmap(fgrad(F_f, argnums=1))(x, y, yp)
        G = vmap(fgrad(F_f, argnums=2))

        def partial(k):
            def at(s):
                args = [x, y, yp]
                args[k] = args[k] + s
                return G(*args)
            if order == 2:
                return (at(h) - at(-h)) / (2 * h)
            return (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h)
        Q = F_ff - (partial(0) + partial(1) * yp + partial(2) * ypp)
        return P.detach(), Q.detach()
    return jacobi


@pytest.mark.parametrize("h, order", [(1e-5, 2), (1e-6, 2), (1e-3, 4), (1e-4, 4),
                                      (1e-2, 4)])
def test_jacobi_rejects_finite_differences_in_Fs_arguments(h, order):
    with pytest.raises(ExerciseCheckFailed, match="(?s)Q.*finite difference in F's arguments"):
        check("variational-jacobi", jacobi_by_differences_in_F(h, order))


@pytest.mark.parametrize("answer", [jacobi_variant(), jacobi_by_autograd,
                                    jacobi_by_composite])
def test_jacobi_accepts_right_answers_under_a_salt(answer):
    # the off-path term of F must stay invisible at the salted random points too
    from softmaxbook.exercises import salted
    for salt in (1, 12345, 2 ** 31 - 1):
        with salted(salt):
            result = check("variational-jacobi", answer)
            assert result and "correct on 12 test cases" in " ".join(str(result).split())
