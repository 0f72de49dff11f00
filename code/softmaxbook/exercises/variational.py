"""Checks for the coding exercises of the chapter "Functional derivatives and the Euler–Lagrange
equation" (book/05_euler_lagrange.ipynb).

* ``variational-residual``: the Euler–Lagrange residual of F = f′² + f², i.e. 2f − 2f″, with f″
  by autograd and without the library's :func:`~softmaxbook.variational.el_residual`.
* ``variational-maxent``: the maximum-entropy distribution over states with energies E_i and a
  given mean energy, a softmax of −βE with β solved for, stable for large energies.
* ``variational-beltrami``: the Beltrami expression F − f′ ∂F/∂f′ along a path, for any
  Lagrangian F(x, f, fp), with f′ and ∂F/∂f′ by autograd: constant on the catenary and the
  cycloid, exact values on paths that solve nothing.
* ``variational-ex-sinh`` (a derivation's end result): ``el_solution(x)``, the minimiser
  sinh(x) / sinh(1) of the integral of f'^2 + f^2 with f(0) = 0, f(1) = 1, at points of [0, 1]
  (a path that misses an end, the solution of f'' = -f and the straight line get hints of their
  own).
* ``variational-jacobi``: the coefficients P = F_f'f' and Q = F_ff - d/dx F_ff' of the second
  variation along a path, for any Lagrangian F(x, f, fp), every derivative by autograd (a
  missing term of the total derivative, the wrong sign, Gelfand and Fomin's factor 1/2 and P
  and Q swapped get hints of their own).
* ``variational-ex-catenary`` (a derivation's end result): ``catenary_invariant(f, fp)``, the
  quantity F - f' dF/df' = f / sqrt(1 + f'^2) that the Beltrami identity keeps constant for the
  hanging chain (F itself, the subtracted term alone, the wrong sign, dF/df' and dF/df get hints
  of their own).
"""

from __future__ import annotations

import math
import warnings

import torch

from . import (call, check_generator, check_salt, describe, exercise, expect_close,
               expect_true, watch_calls)
from . import expect_formula, precision_hint
from .. import variational
from ..variational import cycloid


def _expect_float64_tensor(got, arg, x, desc: str) -> None:
    """The answer is a float64 tensor and the learner's function left its input ``x`` alone
    (``arg`` is the copy it was given)."""
    expect_true(isinstance(got, torch.Tensor),
                f"for input {desc} the result should be a tensor, got "
                f"{type(got).__name__}: {describe(got)}.")
    expect_true(torch.equal(arg, x), f"for input {desc} your function changed x.",
                hint="work on x.detach().clone().requires_grad_(True), not on x itself.")
    # requires_grad_ on the caller's tensor changes it too (not its values): every later
    # operation on x then builds a graph, and x.grad may fill up behind the caller's back
    expect_true(not arg.requires_grad and arg.grad is None,
                f"for input {desc} your function changed x: it now requires grad"
                f"{' and holds a .grad' if arg.grad is not None else ''}.",
                hint="work on x.detach().clone().requires_grad_(True), not on x itself.")
    expect_true(got.dtype == torch.float64,
                f"for input {desc} the result has dtype {got.dtype}, not float64: "
                f"{describe(got)}.",
                hint="compute in the dtype of x; float32 keeps only 7 of float64's 16 digits.")


# Added to every evaluation of the learner's path: M |t - x_near|^3, with x_near the nearest of the
# points x. It is 0, with f' and f'' also 0, at every point x, so an autograd answer sees the path
# unchanged; an evaluation at x +- h gains M h^3, which any finite-difference stencil for f''
# turns into about M h (|u|^3 is not a polynomial, so no stencil's weights cancel it). It catches
# what the recorder cannot read: a stencil written under torch.func.vmap (R4 review: a 5-point
# stencil there, h = 2e-3, passed within 1e-9).
_OFF_POINT_WEIGHT = 1e6


def _off_point_term(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    d = t.unsqueeze(-1) - x.reshape(-1).to(t.dtype)
    nearest = d.detach().abs().argmin(-1, keepdim=True)
    u = torch.gather(d, -1, nearest).squeeze(-1)
    # |u|^3 as u^3 sign(u), the sign taken without a derivative: abs's second derivative goes
    # through a Python decomposition that imports torch._dynamo, which reads os.getcwd() and
    # failed in a grading sandbox whose working directory the notebook had deleted
    # (tests/test_grade.py, "fay")
    return _OFF_POINT_WEIGHT * (u * u * u * torch.sign(u.detach()))


def _recording_points(f, x: torch.Tensor, beside: list):
    """``f``, noting in ``beside`` the first value at which it is called that is not one of
    the points ``x``: an autograd answer evaluates the path at x only, a finite difference of
    any order (3-, 5-, 7-point stencils, Richardson extrapolation) at x ± h. A 5-point stencil
    for f'' with h = 2e-3 is within 1e-9 of the exact residual, so the comparison's tolerance
    alone cannot tell it from autograd (R3 review). Calls inside torch.func transforms
    (vmap) cannot be read and are let through; there ``_off_point_term``, added to the path's
    values, makes a stencil's result wrong instead."""
    def recorded(t):
        if not beside and isinstance(t, torch.Tensor) and t.is_floating_point():
            try:
                with warnings.catch_warnings():  # vmap's "no batching rule for isin"
                    warnings.simplefilter("ignore")
                    v = t.detach().to(x.dtype).reshape(-1)
                    outside = ~torch.isin(v, x.reshape(-1))
                    if bool(outside.any()):
                        beside.append(float(v[outside][0]))
            except Exception:  # a batched tensor under torch.func.vmap: not inspected
                pass
        value = f(t)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0:
            value = value + _off_point_term(t, x).to(value.dtype)
        return value
    return recorded


def _expect_only_at_x(beside: list, desc: str, what: str) -> None:
    expect_true(not beside,
                f"for input {desc} your function evaluates f at {beside[0]!r}, a point that "
                f"is not one of the x given: a finite difference, which this exercise does "
                f"not ask for." if beside else "",
                hint=f"compute {what} with torch.autograd.grad on a copy of x that requires "
                     "grad: the path is then evaluated at the points x only, where a finite "
                     "difference of any order evaluates it beside them.")


# ------------------------------------------------------------------------------------------------
_CANDIDATES = [
    # (description, f, exact residual 2f - 2f'')
    ("f = sinh(x), a solution", torch.sinh, lambda x: torch.zeros_like(x)),
    ("f = sin(x)", torch.sin, lambda x: 4 * torch.sin(x)),
    ("f = x**3", lambda x: x ** 3, lambda x: 2 * x ** 3 - 12 * x),
    ("f = exp(2x)", lambda x: torch.exp(2 * x), lambda x: -6 * torch.exp(2 * x)),
    ("f = cosh(x) + x**2", lambda x: torch.cosh(x) + x ** 2, lambda x: 2 * x ** 2 - 4),
]


@exercise("variational-residual", "Euler–Lagrange residual of f′² + f²")
def _check_residual(residual):
    """``residual(f, x)`` -> tensor of the shape of x: 2 f(x) − 2 f″(x)."""
    grid = torch.linspace(-1.5, 1.5, 7, dtype=torch.float64)
    cases = [(c, grid, "torch.linspace(-1.5, 1.5, 7, dtype=torch.float64)") for c in _CANDIDATES]
    if check_salt():  # the grader's secret salt: the candidates again at random points
        g = check_generator(53)
        x = (3 * torch.rand(7, generator=g, dtype=torch.float64) - 1.5).sort().values
        cases += [(c, x, describe(x)) for c in _CANDIDATES]
    for (name, f, exact), x, shown in cases:
        desc = f"{name}, x = {shown}"
        arg = x.clone()
        beside: list = []
        with watch_calls(variational.el_residual) as seen:
            got = call(residual, _recording_points(f, x, beside), arg, input_desc=desc)
        expect_true(not seen,
                    f"for input {desc} your function calls softmaxbook.variational.el_residual, "
                    "which this exercise asks you to write yourself.",
                    hint="compute f′ with torch.autograd.grad(..., create_graph=True), then f″ "
                         "from f′ the same way.")
        _expect_float64_tensor(got, arg, x, desc)
        _expect_only_at_x(beside, desc, "f′ and f″ (create_graph=True for the first)")
        hint = ("for F = f′² + f²: ∂F/∂f = 2f and ∂F/∂f′ = 2f′, so the residual is "
                "∂F/∂f − d/dx ∂F/∂f′ — mind which term is subtracted, the factors 2 and "
                "which derivative of f appears. f″ must come from autograd: the check "
                "compares to 1e-9, which a 3-point finite difference does not reach.")
        expect_close(got.detach(), exact(x), input_desc=desc, rtol=1e-9, atol=1e-9,
                     what="residual", hint=hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
def _maxent_reference(energies: torch.Tensor, mean_energy: float) -> torch.Tensor:
    """p ∝ exp(−β E) with Σ p E = mean_energy; β by bisection (the mean falls as β grows)."""
    def mean(beta):
        return float((torch.softmax(-beta * energies, 0) * energies).sum())

    lo, hi = -1.0, 1.0
    while mean(lo) < mean_energy:
        lo *= 2
    while mean(hi) > mean_energy:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if mean(mid) > mean_energy:
            lo = mid
        else:
            hi = mid
    return torch.softmax(-(lo + hi) / 2 * energies, 0)


_MAXENT_CASES = [
    ("energies [0, 1, 2, 3], mean 1.5 (the plain average)", [0.0, 1.0, 2.0, 3.0], 1.5),
    ("energies [0, 1, 2, 3], mean 0.8 (below the average)", [0.0, 1.0, 2.0, 3.0], 0.8),
    ("energies [0, 1, 2, 3], mean 2.6 (above the average)", [0.0, 1.0, 2.0, 3.0], 2.6),
    ("energies [2, -1, 0.5, 4, 0], mean -0.5", [2.0, -1.0, 0.5, 4.0, 0.0], -0.5),
    ("energies [10000, 10001, 10003], mean 10001 (large energies)",
     [10000.0, 10001.0, 10003.0], 10001.0),
    # widely spread energies, beta far from 0 on either side: |beta| * spread is about 850, so a
    # fixed shift of the *energies* overflows (exp(-beta (E - min E)) for beta < 0,
    # exp(-beta (E - max E)) for beta > 0); only the largest *logit* -beta E_i is safe to subtract
    ("energies [0, 999, 1000], mean 999.7 (widely spread, beta < 0)",
     [0.0, 999.0, 1000.0], 999.7),
    ("energies [0, 1, 1000], mean 0.3 (widely spread, beta > 0)", [0.0, 1.0, 1000.0], 0.3),
]


def _salted_maxent_cases():
    """Under the grader's secret salt (none in a notebook): random energies, one case shifted
    by a large random offset, and a random attainable mean energy."""
    if not check_salt():
        return []
    g = check_generator(59)
    out = []
    for k, offset in ((4, 0.0), (5, 5000.0 + 5000.0 * float(torch.rand(1, generator=g)))):
        e = torch.randn(k, generator=g, dtype=torch.float64) * 2
        e = (e - e.min()).round(decimals=3) + round(offset)
        lo, hi = float(e.min()), float(e.max())
        m = round(lo + (hi - lo) * (0.15 + 0.7 * float(torch.rand(1, generator=g))), 3)
        out.append((f"energies {e.tolist()}, mean {m}" + (" (large energies)" if offset
                                                          else ""), e.tolist(), m))
    return out


@exercise("variational-maxent", "maximum-entropy distribution with a given mean energy")
def _check_maxent(maxent):
    """``maxent(energies, mean_energy)`` -> probabilities of the shape of energies."""
    cases = _MAXENT_CASES + _salted_maxent_cases()
    for desc, e, m in cases:
        energies = torch.tensor(e, dtype=torch.float64)
        arg = energies.clone()
        p = call(maxent, arg, m, input_desc=desc)
        # the copy it was given must come back unchanged (an energies.sub_(...) inside the
        # learner's function changes the caller's tensor; R3 review)
        expect_true(torch.equal(arg, energies),
                    f"for input {desc} your function changed energies in place (it is now "
                    f"{describe(arg)}).",
                    hint="compute new tensors (energies - shift), not in-place ones "
                         "(energies.sub_(shift), energies -= shift).")
        expect_true(isinstance(p, torch.Tensor) and p.shape == energies.shape,
                    f"for input {desc} the result should be a tensor of shape "
                    f"{tuple(energies.shape)}, got {describe(p)}.")
        expect_true(p.dtype == torch.float64,
                    f"for input {desc} the result has dtype {p.dtype}, not float64: "
                    f"{describe(p)}.",
                    hint="compute in the dtype of the energies; float32 keeps only 7 digits, "
                         "too few for a mean energy near 10000.")
        p = p.detach()
        expect_true(bool(torch.isfinite(p).all()),
                    f"for input {desc} the result contains NaN or inf: {describe(p)}.",
                    hint="exp(−β E) under- or overflows for large energies, and so does "
                         "exp(−β (E − min E)) or exp(−β (E − max E)) for widely spread ones "
                         "once |β| is large: subtract the largest logit −β E_i, as "
                         "torch.softmax does.")
        expect_true(bool((p >= 0).all()),
                    f"for input {desc} the result has negative entries: {describe(p)}.")
        expect_true(bool((p > 0).any()),
                    f"for input {desc} every probability is 0: {describe(p)}.",
                    hint="the weights overflowed (inf / inf) or all underflowed to 0: subtract "
                         "the largest logit −β E_i before exponentiating, as torch.softmax "
                         "does; a fixed shift of the energies is not enough once |β| × "
                         "(spread of the energies) exceeds about 700.")
        off = float(p.sum()) - 1
        expect_true(abs(off) < 1e-5,
                    f"for input {desc} the result is not a probability vector: it sums to "
                    f"1 {'+' if off > 0 else '-'} {abs(off):.2g}: {describe(p)}.",
                    hint="normalise the weights exp(−β E_i) by their sum.")
        expect_true(abs(off) < 1e-9,
                    f"for input {desc} the probabilities sum to 1 {'+' if off > 0 else '-'} "
                    f"{abs(off):.2g}: further from 1 than float64 rounding allows (the check "
                    "asks for 1e-9).",
                    hint="compute in float64 throughout (the dtype of the energies): float32 "
                         "keeps about 7 digits, and converting its result to float64 at the "
                         "end does not bring the others back.")
        got_mean = float((p * energies).sum())
        expect_true(abs(got_mean - m) < 1e-7 * max(1.0, abs(m)),
                    f"for input {desc} the mean energy Σ p_i E_i of your distribution is "
                    f"{got_mean:.10g}, not {m}.",
                    hint="the constraint fixes β: the mean energy under softmax(−β E) falls "
                         "as β grows; solve for β (bisection works), and mind the sign.")
        expect_close(p, _maxent_reference(energies, m), input_desc=desc, rtol=1e-6,
                     atol=1e-9, what="distribution",
                     hint="among distributions with this mean, the one with the largest "
                          "entropy has the form softmax(−β E).")
    return len(cases)



# ------------------------------------------------------------------------------------------------
_G = 9.81


def _catenary(x, f, p):
    return f * torch.sqrt(1 + p ** 2)


def _brach(x, f, p):
    return torch.sqrt(1 + p ** 2) / torch.sqrt(-2 * _G * f)


def _arc(x, f, p):
    return torch.sqrt(1 + p ** 2)


def _quad(x, f, p):
    return p ** 2 + f ** 2


_X = torch.linspace(-1.5, 1.5, 7, dtype=torch.float64)
_X_CYC = torch.linspace(0.2, math.pi, 6, dtype=torch.float64)
_BELTRAMI_CASES = [
    # (description, F, f, x, exact F - f' dF/df')
    ("F = f*sqrt(1 + fp**2) (the catenary's), f = cosh(x)", _catenary, torch.cosh, _X,
     lambda x: torch.ones_like(x)),
    ("F = f*sqrt(1 + fp**2), f = 0.7*cosh(x/0.7)", _catenary,
     lambda x: 0.7 * torch.cosh(x / 0.7), _X, lambda x: torch.full_like(x, 0.7)),
    ("F = sqrt(1 + fp**2)/sqrt(-2*9.81*f) (the brachistochrone's), f = the cycloid "
     "cycloid(x, math.pi, -2.0), x in [0.2, pi]", _brach,
     lambda x: cycloid(x, math.pi, -2.0), _X_CYC,
     lambda x: torch.full_like(x, 1 / (2 * math.sqrt(_G)))),
    ("F = fp**2 + f**2, f = sin(x) (not a solution)", _quad, torch.sin, _X,
     lambda x: -torch.cos(2 * x)),
    ("F = sqrt(1 + fp**2), f = x**2 (not a solution)", _arc, lambda x: x ** 2, _X,
     lambda x: 1 / torch.sqrt(1 + 4 * x ** 2)),
]


@exercise("variational-beltrami", "the Beltrami expression F − f′ ∂F/∂f′")
def _check_beltrami(beltrami):
    """``beltrami(F, f, x)`` -> tensor of the shape of x: F − f′ ∂F/∂f′ along f."""
    cases = list(_BELTRAMI_CASES)
    if check_salt():  # the grader's secret salt: every case again at random points
        g = check_generator(61)
        for name, F, f, x, exact in _BELTRAMI_CASES:
            lo, hi = float(x[0]), float(x[-1])
            xr = (lo + (hi - lo) * torch.rand(len(x), generator=g, dtype=torch.float64)).sort()
            cases.append((name.split(", x in")[0], F, f, xr.values, exact))
    for name, F, f, x, exact in cases:
        desc = f"{name}, x = {describe(x)}"
        arg = x.clone()
        beside: list = []
        got = call(beltrami, F, _recording_points(f, x, beside), arg, input_desc=desc)
        _expect_float64_tensor(got, arg, x, desc)
        _expect_only_at_x(beside, desc, "f′")
        hint = ("evaluate F at the path, then ∂F/∂f′ with x, f and f′ held fixed: give F "
                "copies of f and f′ that require grad and differentiate with respect to the "
                "f′ copy. Mind which derivative of F appears, the factor f′ and the sign of "
                "the second term. Both derivatives must come from autograd: the check "
                "compares to 1e-13, which a finite difference does not reach.")
        # Autograd answers are within 3e-15 of these closed forms; a central difference for
        # f′ at its best step (6e-6) is 2e-12 to 1e-11 off, so 1e-13 tells them apart.
        expect_close(got.detach(), exact(x), input_desc=desc, rtol=1e-13, atol=1e-13,
                     what="value of F − f′ ∂F/∂f′", hint=hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# Derivations whose end result is a formula, entered as an elementwise function of float64 tensors
# ------------------------------------------------------------------------------------------------
# variational-ex-sinh: the minimiser of J[f] = int_0^1 (f'^2 + f^2) dx with f(0) = a, f(1) = b.
# The chapter prints the case a = 0, b = 1 (sinh x / sinh 1) before the exercise, so the student
# enters the general end values (review of the new checks, H4): a sinh(1 - x) / sinh 1 +
# b sinh(x) / sinh 1.
def _sinh_cases():
    g = check_generator(67)  # public in a notebook; the grader's secret salt changes it
    f64 = dict(dtype=torch.float64)
    x = torch.rand(200, generator=g, **f64)
    ab = (6 * torch.rand(2, generator=g, **f64) - 3).tolist()
    ends = torch.tensor([0.0, 1.0], **f64)
    return [
        ("the ends, a = 0, b = 1: the chapter's path", ends, 0.0, 1.0),
        ("the ends, a = 2, b = -1", ends, 2.0, -1.0),
        ("torch.linspace(0, 1, 11), a = 0, b = 1", torch.linspace(0, 1, 11, **f64), 0.0, 1.0),
        ("torch.linspace(0, 1, 11), a = 1, b = 0", torch.linspace(0, 1, 11, **f64), 1.0, 0.0),
        ("torch.linspace(0, 1, 11), a = 2, b = -1", torch.linspace(0, 1, 11, **f64), 2.0, -1.0),
        (f"200 random points in [0, 1], a = {ab[0]:.6g}, b = {ab[1]:.6g}", x, ab[0], ab[1]),
        ("a [2, 3] batch, a = -0.5, b = 3", x[:6].reshape(2, 3), -0.5, 3.0),
    ]


def _sinh_path(x, a, b):
    return (a * torch.sinh(1 - x) + b * torch.sinh(x)) / math.sinh(1.0)


@exercise("variational-ex-sinh", "the minimiser of the integral of f'^2 + f^2")
def _check_sinh(el_solution):
    """``el_solution(x, a, b)`` -> (a sinh(1 - x) + b sinh x) / sinh 1, elementwise."""
    cases = _sinh_cases()
    for name, x, a, b in cases:
        desc = f"x = {describe(x)}, a = {a:.6g}, b = {b:.6g} ({name})"
        arg = x.clone()
        got = call(el_solution, arg, a, b, input_desc=desc)
        expect_true(torch.equal(arg, x), f"for input {desc} your function changed x.",
                    hint="compute a new tensor; do not use in-place methods such as mul_.")
        expected = _sinh_path(x, a, b)
        size = max(abs(a), abs(b))
        if isinstance(got, torch.Tensor) and got.shape == x.shape and got.is_floating_point():
            g = got.detach().to(torch.float64)
            at = (x == 0) | (x == 1)
            want = torch.where(x == 0, a, b)
            # the task's tolerance, 1e-9 of the end values' size (it was 1e-12 for f(0) = 0,
            # f(1) = 1: sinh 1 typed to ten digits was rejected; review M2)
            off_end = at & ((g - want).abs() > 1e-9 * size)
            if bool(off_end.any()):
                expect_true(False,
                            f"for input {desc} your path misses an end point: it should pass "
                            f"through f(0) = a and f(1) = b, but you return "
                            f"{describe(g[at], digits=12)} at x = {describe(x[at])} (off by "
                            f"{float((g[at] - want[at]).abs().max()):.1e}).",
                            hint=precision_hint(g[at], want[at], size)[1] or
                            "fit both constants of the general solution to the two end "
                            "conditions, f(0) = a and f(1) = b.")
        known = (
            ((a * torch.sin(1 - x) + b * torch.sin(x)) / math.sin(1.0),
             "your path solves f'' = -f. Recheck the Euler–Lagrange equation "
             "dF/df - d/dx dF/df' = 0: with F = f'^2 + f^2 both terms are positive in F, so "
             "f'' has the sign of f."),
            (a + (b - a) * x, "the straight line minimises the integral of f'^2 alone; the f^2 "
                              "term pulls the path towards 0."),
            ((b * torch.sinh(1 - x) + a * torch.sinh(x)) / math.sinh(1.0),
             "a and b are swapped: f(0) = a and f(1) = b."),
        )
        expect_formula(got, expected, {"x": x}, desc, "path",
                       torch.full_like(x, max(size, 1e-300)),
                       "derive the Euler–Lagrange equation of F = f'^2 + f^2, write its "
                       "general solution with two constants and fit them to f(0) = a, "
                       "f(1) = b.", known)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# variational-ex-catenary: Beltrami's first integral of F = f sqrt(1 + f'^2)
def _catenary_cases():
    g = check_generator(71)  # public in a notebook; the grader's secret salt changes it
    f64 = dict(dtype=torch.float64)
    n = 200
    f = 0.1 + 4.9 * torch.rand(n, generator=g, **f64)
    fp = 20 * torch.rand(n, generator=g, **f64) - 10
    return [
        ("a flat path (fp = 0)", torch.tensor([1.0, 2.5], **f64), torch.zeros(2, **f64)),
        ("f = 1, fp = +-1, +-2", torch.ones(4, **f64), torch.tensor([1.0, -1.0, 2.0, -2.0], **f64)),
        ("the catenary cosh(x) at x = -1, 0.5, 1",
         torch.cosh(torch.tensor([-1.0, 0.5, 1.0], **f64)),
         torch.sinh(torch.tensor([-1.0, 0.5, 1.0], **f64))),
        (f"{n} random f in [0.1, 5], fp in [-10, 10]", f, fp),
        ("a [2, 3] batch", f[:6].reshape(2, 3), fp[:6].reshape(2, 3)),
    ]


@exercise("variational-ex-catenary", "the catenary's first integral")
def _check_catenary_invariant(invariant):
    """``invariant(f, fp)`` -> F - f' dF/df' = f / sqrt(1 + fp^2) for F = f sqrt(1 + fp^2)."""
    cases = _catenary_cases()
    for name, f, fp in cases:
        desc = f"f = {describe(f)}, fp = {describe(fp)} ({name})"
        args = (f.clone(), fp.clone())
        got = call(invariant, *args, input_desc=desc)
        expect_true(all(torch.equal(x, y) for x, y in zip(args, (f, fp))),
                    f"for input {desc} your function changed its arguments in place.",
                    hint="compute a new tensor; do not use in-place methods such as mul_.")
        root = torch.sqrt(1 + fp**2)
        expected = f / root
        known = (
            (f * root, "that is F itself; the Beltrami expression subtracts f' dF/df'."),
            (f * fp**2 / root, "that is the term f' dF/df' alone; Beltrami's expression is "
                               "F minus it."),
            (f * root + f * fp**2 / root, "mind the sign: the Beltrami expression is "
                                          "F - f' dF/df'."),
            (f * fp / root, "that is dF/df' alone; it is multiplied by f' and subtracted "
                            "from F."),
            (root, "that is dF/df, the derivative in f; the Beltrami expression needs the "
                   "derivative in f'."),
        )
        # the unsimplified F - f' dF/df' loses about fp^2 * 1e-16 to cancellation: 1e-9 of
        # f sqrt(1 + fp^2) covers it for |fp| <= 10
        expect_formula(got, expected, {"f": f, "fp": fp}, desc, "value", f * root,
                       "differentiate F = f sqrt(1 + f'^2) in f' with f held fixed, multiply "
                       "by f', subtract from F and simplify over the common denominator.",
                       known)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# variational-jacobi: the coefficients P = F_f'f' and Q = F_ff - d/dx F_ff' of the second
# variation J''(0) = int (P eta'^2 + Q eta^2) dx along a path (issue 27, sufficiency)
def _chain_x(x, f, p):  # F_ff' = x^2 + 2p depends on x: catches a missing partial-x term
    return x ** 2 * f * p + f * p ** 2


def _coupled(x, f, p):  # F_ff' = 2 f p depends on f: catches a missing f' F_ff'f term
    return f ** 2 * p ** 2 / 2


_JACOBI_CASES = [
    # (description, F, f, x, exact (P, Q)); every case's Q has a term that a plausible
    # mistake drops: the catenary's f'' term, _chain_x's partial-x term, _coupled's f' term
    ("F = fp**2 + f**2, f = sin(x)", _quad, torch.sin, _X,
     lambda x: (torch.full_like(x, 2.0), torch.full_like(x, 2.0))),
    ("F = f*sqrt(1 + fp**2) (the catenary's), f = cosh(x)", _catenary, torch.cosh, _X,
     lambda x: (1 / torch.cosh(x) ** 2, -1 / torch.cosh(x) ** 2)),
    ("F = f*sqrt(1 + fp**2), f = 0.7*cosh(x/0.7)", _catenary,
     lambda x: 0.7 * torch.cosh(x / 0.7), _X,
     lambda x: (0.7 / torch.cosh(x / 0.7) ** 2, -1 / (0.7 * torch.cosh(x / 0.7) ** 2))),
    ("F = x**2*f*fp + f*fp**2, f = sin(x)", _chain_x, torch.sin, _X,
     lambda x: (2 * torch.sin(x), -2 * x + 2 * torch.sin(x))),
    ("F = f**2*fp**2/2, f = x**2 + 1", _coupled, lambda x: x ** 2 + 1, _X,
     lambda x: ((x ** 2 + 1) ** 2, -8 * x ** 2 - 4)),
    ("F = sqrt(1 + fp**2) (arc length), f = x**2", _arc, lambda x: x ** 2, _X,
     lambda x: (1 / (1 + 4 * x ** 2) ** 1.5, torch.zeros_like(x))),
]


# An off-path term for the Lagrangian handed to the learner (R5 review): the path's guard above
# sees only calls of f, so F_ff', F_ff and F_f'f' by autograd with the three partials of F_ff'
# taken by a central difference in F's own arguments (f called at x only) passed at h = 1e-5 and
# 1e-6. M psi(u), psi(u) = u^4.5 for u > 0 and 0 otherwise, is zero with its first three
# derivatives at u = 0, so the partial derivatives that P and Q need (up to third order) are
# unchanged on the path, while a stencil beside it sees about M h^1.5 or more. The power is not
# an integer: a one-sided u^5 (a polynomial on each side) is cancelled exactly by the 4th-order
# stencil (8 (g(h) - g(-h)) - (g(2h) - g(-2h))) / 12h of its second derivative 20 u^3.
_OFF_PATH_WEIGHT = 1e8


def _psi(u: torch.Tensor) -> torch.Tensor:
    # u^4 sqrt(u) for u > 0, else 0; autograd sees u^4 times a constant (the root of the
    # detached u, 0 on the path), so no derivative of abs or of sqrt at 0 is ever taken
    # (see _off_point_term)
    return u ** 4 * u.detach().clamp(min=0).sqrt()


def _off_path_lagrangian(F, x: torch.Tensor, y: torch.Tensor, yp: torch.Tensor):
    """``F`` plus M psi of the offsets of (x, f, f') from the path's values at the nearest check
    point: the same value and partial derivatives up to the third at every (x_i, f(x_i),
    f'(x_i)), wrong beside them."""
    table = torch.stack([x.reshape(-1), y.reshape(-1), yp.reshape(-1)])

    def F_checked(t, f, p):
        value = F(t, f, p)
        if not all(isinstance(v, torch.Tensor) and v.is_floating_point() for v in (t, f, p)):
            return value
        d = t.unsqueeze(-1) - table[0].to(t.dtype)
        nearest = d.detach().abs().argmin(-1, keepdim=True)
        u_x = torch.gather(d, -1, nearest).squeeze(-1)
        rows = table.to(t.dtype)
        u_f = f - torch.gather(rows[1].expand_as(d), -1, nearest).squeeze(-1)
        u_p = p - torch.gather(rows[2].expand_as(d), -1, nearest).squeeze(-1)
        term = _psi(u_f) + _psi(u_p) + _psi(u_x + u_f + u_p)
        return value + _OFF_PATH_WEIGHT * term.to(value.dtype)
    return F_checked


def _jacobi_parts(F, f, x):
    """The pieces of P and Q along f at x, by torch.func (for the hints only; the expected
    values are the closed forms above): F_f', F_f'f', F_ff, and the three terms of the total
    derivative d/dx F_ff' = F_ff'x + F_ff'f f' + F_ff'f' f''."""
    from torch.func import grad, vmap
    flat = x.detach().reshape(-1)
    y, yp, ypp = f(flat), vmap(grad(f))(flat), vmap(grad(grad(f)))(flat)
    F_f, F_p = grad(F, argnums=1), grad(F, argnums=2)
    d_x, d_f, d_p = vmap(grad(grad(F_f, argnums=2), argnums=(0, 1, 2)))(flat, y, yp)
    parts = {"Fp": vmap(F_p)(flat, y, yp), "P": vmap(grad(F_p, argnums=2))(flat, y, yp),
             "Fff": vmap(grad(F_f, argnums=1))(flat, y, yp),
             "Tx": d_x, "Tf": d_f * yp, "Tp": d_p * ypp, "yp": yp}
    return {k: v.detach().reshape(x.shape) for k, v in parts.items()}


@exercise("variational-jacobi", "the coefficients P and Q of the second variation")
def _check_jacobi(jacobi_coefficients):
    """``jacobi_coefficients(F, f, x)`` -> (P, Q), P = F_f'f', Q = F_ff - d/dx F_ff'."""
    cases = list(_JACOBI_CASES)
    if check_salt():  # the grader's secret salt: every case again at random points
        g = check_generator(73)
        for name, F, f, x, exact in _JACOBI_CASES:
            lo, hi = float(x[0]), float(x[-1])
            xr = (lo + (hi - lo) * torch.rand(len(x), generator=g, dtype=torch.float64)).sort()
            cases.append((name, F, f, xr.values, exact))
    for name, F, f, x, exact in cases:
        desc = f"{name}, x = {describe(x)}"
        arg = x.clone()
        beside: list = []
        parts = _jacobi_parts(F, f, x)
        F_checked = _off_path_lagrangian(F, x, f(x), parts["yp"])
        with watch_calls(variational.el_residual, variational.second_variation,
                         variational.functional_hessian) as seen:
            got = call(jacobi_coefficients, F_checked, _recording_points(f, x, beside), arg,
                       input_desc=desc)
        expect_true(not seen,
                    f"for input {desc} your function calls softmaxbook.variational."
                    f"{seen[0] if seen else ''}, which this exercise asks you to do without.",
                    hint="take every derivative with torch.autograd.grad yourself.")
        expect_true(isinstance(got, (tuple, list)) and len(got) == 2,
                    f"for input {desc} the result should be a pair (P, Q) of tensors, got "
                    f"{describe(got)}.", hint="return P, Q")
        P, Q = got
        for part, what in ((P, "P"), (Q, "Q")):
            _expect_float64_tensor(part, arg, x, f"{desc} ({what})")
        _expect_only_at_x(beside, desc, "f′ and f″ (create_graph=True for the first)")
        P_exact, Q_exact = exact(x)
        total = parts["Tx"] + parts["Tf"] + parts["Tp"]
        swapped = "P and Q are swapped: P = F_f′f′ multiplies η′², Q multiplies η²."
        half = ("that is half of it, Gelfand and Fomin's ½ of the second variation; here "
                "J″(0) = ∫ (P η′² + Q η²) dx, without the ½.")
        expect_formula(P.detach(), P_exact, {"x": x}, desc, "P", P_exact.abs() + 1,
                       "P is the second partial derivative of F in f′ (x and f held fixed), "
                       "evaluated along the path, by autograd: the F given here is exact on "
                       "the path only, so a finite difference in F's arguments misses by far "
                       "more than the check's 1e-9.",
                       ((Q_exact, swapped), (P_exact / 2, half),
                        (parts["Fp"], "that is ∂F/∂f′; P is its derivative in f′ again.")))
        expect_formula(Q.detach(), Q_exact, {"x": x}, desc, "Q", Q_exact.abs() + 1,
                       "Q = F_ff − d/dx F_ff′ with the total derivative along the path, "
                       "d/dx F_ff′ = ∂/∂x F_ff′ + f′ ∂/∂f F_ff′ + f″ ∂/∂f′ F_ff′; every "
                       "derivative by autograd: the F given here is exact on the path only, "
                       "so a finite difference in F's arguments misses by far more than the "
                       "check's 1e-9.",
                       # the first that matches is shown: where two coincide (on the catenary
                       # F_ff alone equals Q without its f'' term) both hints are true
                       ((parts["Fff"] + total, "mind the sign: Q = F_ff − d/dx F_ff′."),
                        (Q_exact / 2, half),
                        (Q_exact + parts["Tx"], "the total derivative misses the explicit "
                                                "x-dependence of F_ff′, the term ∂/∂x F_ff′."),
                        (Q_exact + parts["Tf"], "the total derivative misses the term "
                                                "f′ ∂/∂f F_ff′."),
                        (Q_exact + parts["Tp"], "the total derivative misses the term "
                                                "f″ ∂/∂f′ F_ff′."),
                        (parts["Fff"], "that is F_ff alone: subtract the total derivative "
                                       "d/dx F_ff′ along the path."),
                        (P_exact, swapped)))
    return len(cases)
