"""Functionals J[f] = ∫ₐᵇ F(x, f, f′) dx: Euler–Lagrange residuals and numerical minimisers.

SymPy derives Euler–Lagrange equations symbolically (``sympy.calculus.euler.euler_equations``);
this module adds the two numerical tools the book needs beside it:

* :func:`el_residual` evaluates ∂F/∂f − d/dx ∂F/∂f′ along a candidate path by automatic
  differentiation, so that "this f solves the Euler–Lagrange equation" can be checked at points;
* :func:`discrete_functional` and :func:`minimize_functional` approximate J on a polygon through
  grid points and minimise it over the interior values with L-BFGS, ends fixed.

Conventions used by every function here:

* A Lagrangian ``F`` is a Python callable ``F(x, f, fp)`` written with torch operations. It acts
  **elementwise**: given three tensors of one shape it returns a tensor of that shape whose entry
  ``i`` depends only on ``x[i]``, ``f[i]``, ``fp[i]`` (``fp`` stands for f′).
* A candidate path ``f`` (for :func:`el_residual`) is a callable acting elementwise on a tensor of
  points, also written with torch operations, differentiable twice.
* A discretised path is a polygon: values ``y`` at grid points ``x[0] < ... < x[n]``, joined by
  straight segments, so f′ is constant on each cell.
* Computations happen in the floating dtype of the inputs (float64 by default in
  :func:`minimize_functional`); there is no randomness.

Integrable end singularities
----------------------------
The brachistochrone's Lagrangian sqrt(1 + f′²)/sqrt(−2 g f) is infinite where the path starts
(f = 0). Its integral is finite, but a quadrature rule that samples near the end sees a
1/sqrt(distance) peak and loses accuracy there, and a uniform grid cannot follow the optimal
curve's vertical start (f ≈ −c x^(2/3), an infinite slope), so its error falls only like 1/n.
Two things put it right (see :func:`discrete_functional` and :func:`minimize_functional`):

1. each half-cell is integrated after the substitution x = node ± (h/2) v², which turns a
   1/sqrt(x − node) peak at a grid point into a smooth integrand in v (and leaves the
   minimiser no unresolved peak to exploit);
2. the grid is graded towards a singular end, x − a ∝ t³ for uniform t. The cycloid starts
   like f ≈ −c (x − a)^(2/3). Grading as t² would give f ∝ t^(4/3), still not smooth in t
   (its second t-derivative is infinite at the start), and the error of J falls at a measured
   order of only 1.89–1.91 for n = 16 to 512; with t³, f ∝ t² is smooth in t, the measured
   order is 2.00 and the error about 40 % smaller (tests/test_variational.py). Why 1.9: the
   error is a sum over cells of h³ times an error density that grows like t^(k − 3) for the
   grading t^k (the t-form of F_f′f′ ∝ t^(1 − k/3) times f_tt² ∝ t^(4k/3 − 4)); for k = 3 it is
   bounded, for k = 2 it grows like 1/t and its Riemann sum like log n, so the error is
   n⁻² (a log n + b): n² × error grows by a fixed step per doubling (measured 0.0126–0.0129),
   and the measured order creeps towards 2. Grading harder (t⁴) gains nothing: the first
   cells are so short that L-BFGS needs many more iterations. ``grading`` sets the power.

Second variation
----------------
:func:`second_variation` (d²/dε² J_n[y + εη], exact for the polygon functional, by autograd),
:func:`functional_hessian` (the tridiagonal Hessian in the interior values) and
:func:`functional_derivative` (the gradient divided by the trapezoid weights, the discrete L²
gradient) are the tools of the chapter's sufficiency section: Legendre's condition, Jacobi's
conjugate points, and δJ/δf as a limit. ``minimize_functional(..., fb=None)`` leaves an end
free (the natural boundary condition ∂F/∂f′ = 0 there).

References
----------
* Gelfand & Fomin (1963), *Calculus of Variations*, ch. 1 (the Euler–Lagrange equation, the
  fundamental lemma, the brachistochrone, the Beltrami identity, the variational derivative,
  free end points) and ch. 5 (the second variation, Legendre's and Jacobi's conditions).
* Nocedal & Wright (2006), *Numerical Optimization*, 2nd ed., alg. 7.4 (the L-BFGS two-loop
  recursion) and alg. 3.1 (backtracking line search with the Armijo condition).
* Davis & Rabinowitz (1984), *Methods of Numerical Integration*, §2.12 (removing an end
  singularity by a change of variable).
"""

from __future__ import annotations

import math
import warnings
from numbers import Real
from typing import Callable, NamedTuple

import numpy as np
import torch

from softmaxbook._validate import as_float_tensor, check_finite, check_int

__all__ = [
    "el_residual",
    "discrete_functional",
    "minimize_functional",
    "FunctionalMinimum",
    "cycloid",
    "cycloid_time",
    "second_variation",
    "functional_hessian",
    "functional_derivative",
]

# Gauss–Legendre nodes on [0, 1] and their weights, 8 points per half-cell (see
# discrete_functional: after the substitution the right half of a cell next to a 1/sqrt peak
# is v / sqrt(1 − v²/2), whose pole at v = sqrt(2) limits 3 points to a relative error of about
# 1e-4 -- an error the size of a fixed fraction of the first cell, i.e. O(1/n) in J; 8 points
# bring it below 1e-8).
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)
_GL_NODES = (_GL_NODES + 1.0) / 2.0
_GL_WEIGHTS = _GL_WEIGHTS / 2.0

_SINGULAR = ("auto", "none", "a", "b", "both")


# ------------------------------------------------------------------------------------------------
# Argument checks
# ------------------------------------------------------------------------------------------------
def _check_callable(obj, name: str, func: str) -> None:
    if not callable(obj):
        raise TypeError(f"{func}: argument '{name}' must be a callable, got "
                        f"{type(obj).__name__}")


def _check_real(value, name: str, func: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{func}: argument '{name}' must be a real number, got "
                        f"{type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{func}: argument '{name}' must be finite, got {value}")
    return value


def _call(fn, args, name: str, func: str, signature: str):
    """``fn(*args)``; an error raised inside a user's callable is re-raised naming the argument
    (a Lagrangian with two parameters, or one using ``math.sqrt`` on a tensor, otherwise gives
    a bare message from deep inside torch or Python)."""
    try:
        return fn(*args)
    except Exception as err:
        kind = TypeError if isinstance(err, TypeError) else ValueError
        raise kind(f"{func}: argument '{name}' failed when called as {signature} on tensors "
                   f"of shape {tuple(args[0].shape)} ({type(err).__name__}: {err}); it must "
                   "take tensors and use torch operations elementwise") from err


def _check_output(out, shape, what: str, func: str) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{func}: {what} must return a torch.Tensor, got {type(out).__name__}")
    if out.shape != shape:
        raise ValueError(f"{func}: {what} must act elementwise and return shape "
                         f"{tuple(shape)}, got {tuple(out.shape)}")
    return out


def _check_finite_values(values, name: str, what: str, x, func: str) -> None:
    """A clear error where a user's callable gives NaN or ±inf (names the first point)."""
    bad = ~torch.isfinite(values.detach())
    if bool(bad.any()):
        i = int(torch.nonzero(bad.reshape(-1))[0])
        raise ValueError(f"{func}: argument '{name}' gives a non-finite value "
                         f"({float(values.detach().reshape(-1)[i])}) for {what} at x = "
                         f"{float(x.reshape(-1)[i]):.6g} (index {i}); evaluate inside its "
                         "domain (an end where F is singular is not a point of the residual)")


# ------------------------------------------------------------------------------------------------
# The Euler–Lagrange residual
# ------------------------------------------------------------------------------------------------
def el_residual(F: Callable, f: Callable, x: torch.Tensor) -> torch.Tensor:
    """The Euler–Lagrange residual ∂F/∂f − d/dx ∂F/∂f′ of the path ``f``, at the points ``x``.

    A path that makes J[f] = ∫ F(x, f, f′) dx stationary has residual 0 at every interior point
    (Gelfand & Fomin 1963, §1.4). Everything is computed by autograd: f′ and f″ from ``f``, the
    partial derivatives of ``F`` with x, f, f′ treated as independent variables, and the total
    derivative by the chain rule

        d/dx ∂F/∂f′ = ∂²F/∂x∂f′ + ∂²F/∂f∂f′ · f′ + ∂²F/∂f′² · f″.

    Parameters
    ----------
    F : callable
        The Lagrangian ``F(x, f, fp)``, elementwise, written with torch operations (module
        docstring).
    f : callable
        The candidate path, ``f(x)`` elementwise, twice differentiable by autograd.
    x : Tensor, shape (m,) or any shape
        Points where the residual is evaluated (floating dtype, finite).

    Returns
    -------
    Tensor, shape of ``x``
        The residual at each point, detached, in the dtype of ``x``.

    Raises
    ------
    TypeError, ValueError
        For a non-callable ``F`` or ``f``, a bad ``x``, an ``f`` or ``F`` that does not return
        the shape of ``x`` or fails when called, an ``f`` whose values carry no autograd
        gradient (NumPy, ``.detach()``; a constant path is fine), or an ``f`` or ``F`` that is
        NaN or infinite at one of the points (the message names the first; the
        brachistochrone's start x = 0 is such a point).

    Notes
    -----
    Only the shape is checked: a callable that keeps the shape but mixes entries (say
    ``torch.cumsum(x, 0)`` as ``f``) is not caught, and its "residual" means nothing, since the
    gradient of ``sum(f)`` is then not the vector of f′(x_i).
    """
    func = "el_residual"
    _check_callable(F, "F", func)
    _check_callable(f, "f", func)
    x = as_float_tensor(x, "x", func)
    check_finite(x, "x", func)

    with torch.enable_grad():
        xg = x.detach().clone().requires_grad_(True)
        y = _check_output(_call(f, (xg,), "f", func, "f(x)"), x.shape, "argument 'f'", func)
        if not y.is_floating_point():
            raise TypeError(f"{func}: argument 'f' must return a floating tensor, got {y.dtype}")
        _check_finite_values(y, "f", "f(x)", x, func)
        # f acts elementwise, so the gradient of sum(f) is the vector of f′(x_i). A graph that
        # does not reach x (a constant built from a tensor that requires grad, e.g. a
        # parameter) gives None with allow_unused, where torch would otherwise raise.
        yp = (torch.autograd.grad(y.sum(), xg, create_graph=True, allow_unused=True)[0]
              if y.requires_grad else None)
        if yp is None:
            # No graph back to x: a constant path (f′ = f″ = 0) -- or a path computed outside
            # autograd (NumPy, .detach()), whose derivatives we cannot take. Tell them apart.
            if y.numel() and not bool((y == y.reshape(-1)[0]).all()):
                raise ValueError(f"{func}: argument 'f' is not differentiable by autograd: its "
                                 "values vary with x but carry no gradient (computed with "
                                 "NumPy, math or .detach()?); write it with torch operations")
            yp = torch.zeros_like(y)
            ypp = torch.zeros_like(y)
        elif yp.requires_grad:
            (ypp,) = torch.autograd.grad(yp.sum(), xg, allow_unused=True)
            ypp = torch.zeros_like(y) if ypp is None else ypp
        else:  # f linear: f″ = 0
            ypp = torch.zeros_like(y)
        # Independent copies: partial derivatives of F hold the other two arguments fixed.
        X = x.detach().clone().requires_grad_(True)
        Y = y.detach().clone().requires_grad_(True)
        YP = yp.detach().clone().requires_grad_(True)
        val = _check_output(_call(F, (X, Y, YP), "F", func, "F(x, f, fp)"), x.shape,
                            "argument 'F'", func)
        _check_finite_values(val, "F", "F(x, f(x), f'(x))", x, func)
        if not val.requires_grad:
            # F does not depend on any of its arguments: every partial derivative is 0.
            return torch.zeros_like(y).detach()
        dF_dy, dF_dyp = torch.autograd.grad(val.sum(), (Y, YP), create_graph=True,
                                            allow_unused=True)
        dF_dy = torch.zeros_like(y) if dF_dy is None else dF_dy
        if dF_dyp is None or not dF_dyp.requires_grad:
            # ∂F/∂f′ is absent or constant: its total derivative vanishes.
            total = torch.zeros_like(y)
        else:
            gx, gy, gyp = torch.autograd.grad(dF_dyp.sum(), (X, Y, YP), allow_unused=True)
            total = torch.zeros_like(y)
            if gx is not None:
                total = total + gx
            if gy is not None:
                total = total + gy * yp.detach()
            if gyp is not None:
                total = total + gyp * ypp.detach()
        return (dF_dy - total).detach()


# ------------------------------------------------------------------------------------------------
# The discretised functional
# ------------------------------------------------------------------------------------------------
def _check_singular(singular, func: str) -> str:
    if singular not in _SINGULAR:
        raise ValueError(f"{func}: argument 'singular' must be one of {_SINGULAR}, got "
                         f"{singular!r}")
    return singular


def discrete_functional(F: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """J of the polygon through the points ``(x[i], y[i])``: ∫ F(x, f, f′) dx, cell by cell.

    On each cell f is the straight segment between its end values and f′ its slope. Each half
    of a cell is integrated after the change of variable x = node ± (h/2) v² (v from 0 to 1,
    measured from the half's outer node), with an 8-point Gauss–Legendre rule in v (Davis &
    Rabinowitz 1984, §2.12). The rule never evaluates ``F`` at a grid point, and a peak like
    1/sqrt(x − node) at any node -- the brachistochrone's 1/sqrt(−f) where the path starts --
    becomes a smooth function of v, integrated accurately. This matters for minimisation: a rule
    that misses such a peak underestimates J near it, and a minimiser would exploit that. For a
    smooth F the rule's error, O(h³) overall, is below the polygon's own O(h²).

    Parameters
    ----------
    F : callable
        The Lagrangian ``F(x, f, fp)`` (elementwise, torch operations).
    x : Tensor, shape (n + 1,)
        Strictly increasing grid, n ≥ 1 cells.
    y : Tensor, shape (n + 1,)
        Path values at the grid points (may require grad: the result is differentiable in y).

    Returns
    -------
    Tensor, 0-d
        The approximation of J, in the dtype of ``y``.

    Raises
    ------
    TypeError, ValueError
        For a bad ``x`` or ``y``, a non-callable ``F`` or one that fails when called or does
        not act elementwise, and a path on which the integral is NaN or infinite (the path
        leaves F's domain; the message names the first such cell).
    """
    func = "discrete_functional"
    _check_callable(F, "F", func)
    x = as_float_tensor(x, "x", func)
    y = as_float_tensor(y, "y", func)
    if x.dim() != 1 or x.numel() < 2:
        raise ValueError(f"{func}: argument 'x' must be 1-d with at least 2 points, got shape "
                         f"{tuple(x.shape)}")
    if y.shape != x.shape:
        raise ValueError(f"{func}: argument 'y' must have the shape of 'x' {tuple(x.shape)}, "
                         f"got {tuple(y.shape)}")
    check_finite(x, "x", func)
    check_finite(y.detach(), "y", func)
    if not bool((x[1:] > x[:-1]).all()):
        raise ValueError(f"{func}: argument 'x' must be strictly increasing")
    J = _polygon_integral(F, x.to(y.dtype), y, func)
    if not torch.isfinite(J.detach()):
        # name the first cell where the integral is not finite (NaN: the path leaves F's
        # domain, e.g. sqrt of a negative number; inf: a singularity that is not integrable)
        with torch.no_grad():
            cells = torch.stack([_polygon_integral(F, x[i:i + 2].to(y.dtype), y[i:i + 2], func)
                                 for i in range(x.numel() - 1)])
        bad = torch.nonzero(~torch.isfinite(cells))
        i = int(bad[0]) if bad.numel() else 0
        raise ValueError(f"{func}: argument 'F' gives a non-finite integral ({float(J)}) on "
                         f"this path (first in cell {i}, x in [{float(x[i]):.4g}, "
                         f"{float(x[i + 1]):.4g}]); the path leaves F's domain there")
    return J


def _polygon_integral(F, x, y, func: str) -> torch.Tensor:
    """∫ F over the polygon (no argument checks)."""
    h = x[1:] - x[:-1]
    slope = (y[1:] - y[:-1]) / h
    v = torch.as_tensor(_GL_NODES, dtype=y.dtype, device=y.device)
    w = torch.as_tensor(_GL_WEIGHTS, dtype=y.dtype, device=y.device)
    # Fractions u of the cell width: the left half as u = v²/2, the right half as u = 1 − v²/2,
    # v in [0, 1]; du = v dv in both halves. A 1/sqrt(u) peak at either node becomes smooth.
    u = torch.cat([v * v / 2, 1 - v * v / 2])
    weight = torch.cat([w * v, w * v])
    xs = x[:-1, None] + h[:, None] * u
    fs = y[:-1, None] + (y[1:] - y[:-1])[:, None] * u
    ps = slope[:, None].expand_as(xs)
    vals = _check_output(_call(F, (xs, fs, ps), "F", func, "F(x, f, fp)"), xs.shape,
                         "argument 'F'", func)
    return (vals * weight).sum(dim=1).mul(h).sum()


# ------------------------------------------------------------------------------------------------
# Second variation, Hessian and functional derivative of the discretised functional
# ------------------------------------------------------------------------------------------------
def _check_grid_path(F, x, y, func: str, *, name: str = "y"):
    """The checks of :func:`discrete_functional` (callable F, 1-d increasing finite grid, a
    finite path of its shape); returns (x, y) with x in the dtype of y."""
    _check_callable(F, "F", func)
    x = as_float_tensor(x, "x", func)
    y = as_float_tensor(y, name, func)
    if x.dim() != 1 or x.numel() < 2:
        raise ValueError(f"{func}: argument 'x' must be 1-d with at least 2 points, got shape "
                         f"{tuple(x.shape)}")
    if y.shape != x.shape:
        raise ValueError(f"{func}: argument '{name}' must have the shape of 'x' "
                         f"{tuple(x.shape)}, got {tuple(y.shape)}")
    check_finite(x, "x", func)
    check_finite(y.detach(), name, func)
    if not bool((x[1:] > x[:-1]).all()):
        raise ValueError(f"{func}: argument 'x' must be strictly increasing")
    return x.detach().to(y.dtype), y.detach()


def _finite_or_raise(value, func: str, what: str) -> torch.Tensor:
    if not bool(torch.isfinite(value.detach()).all()):
        hint = ("the path leaves F's domain: discrete_functional names the first bad cell"
                if what == "integral" else
                "F is not twice differentiable on this path, e.g. sqrt(p**2) where p = 0")
        raise ValueError(f"{func}: argument 'F' gives a non-finite {what} on this path "
                         f"({hint})")
    return value


def second_variation(F: Callable, x: torch.Tensor, y: torch.Tensor,
                     eta: torch.Tensor) -> torch.Tensor:
    """d²/dε² J_n[y + ε η] at ε = 0: the second variation of the polygon functional along η.

    J_n is :func:`discrete_functional` of the polygon through ``(x[i], y[i])``; the result is
    its exact second derivative along the direction ``eta`` (no finite-difference step), by
    autograd applied twice to one scalar ε. For a smooth path and perturbation it converges,
    at order 2 on a uniform grid, to the second variation of the continuous functional
    (Gelfand & Fomin 1963, ch. 5)

        δ²J[η] = ∫ₐᵇ (F_ff η² + 2 F_ff′ η η′ + F_f′f′ η′²) dx = ∫ₐᵇ (P η′² + Q η²) dx,

    with P = F_f′f′ and Q = F_ff − d/dx F_ff′ when η(a) = η(b) = 0 (the second form after an
    integration by parts). At a stationary path, δ²J[η] < 0 for one admissible η means the
    path is not a minimum: J decreases along η. (This is d²/dε², Gelfand & Fomin's δ²J is half
    of it.)

    Parameters
    ----------
    F : callable
        The Lagrangian ``F(x, f, fp)``, elementwise, torch operations (module docstring).
    x : Tensor, shape (n + 1,)
        Strictly increasing grid, n ≥ 1 cells.
    y : Tensor, shape (n + 1,)
        The path's values at the grid points.
    eta : Tensor, shape (n + 1,)
        The direction. An admissible perturbation of a fixed-end problem has
        ``eta[0] == eta[-1] == 0``; any η is accepted (a free end moves).

    Returns
    -------
    Tensor, 0-d
        The second derivative, detached, in the dtype of ``y`` (``x`` and ``eta`` are converted
        to it).

    Raises
    ------
    TypeError, ValueError
        For a non-callable ``F``, a bad ``x``, ``y`` or ``eta`` (not a floating tensor, wrong
        shape, NaN or ±inf, ``x`` not increasing), an ``F`` that fails when called or does not
        act elementwise, and a second derivative that is not finite.

    Notes
    -----
    The value is exact for the discretised functional: for a quadratic Lagrangian such as
    F = f′² + f², J_n is a quadratic form and the result equals 2 J_n[η] to rounding.
    """
    func = "second_variation"
    x, y = _check_grid_path(F, x, y, func)
    _, eta = _check_grid_path(F, x, eta.to(y.dtype) if isinstance(eta, torch.Tensor)
                              and eta.is_floating_point() else eta, func, name="eta")
    with torch.enable_grad():
        eps = torch.zeros((), dtype=y.dtype, device=y.device, requires_grad=True)
        J = _finite_or_raise(_polygon_integral(F, x, y + eps * eta, func), func, "integral")
        if not J.requires_grad:  # F ignores f and f′: J does not change along η
            return torch.zeros((), dtype=y.dtype, device=y.device)
        (d1,) = torch.autograd.grad(J, eps, create_graph=True)
        if not d1.requires_grad:  # J linear in ε
            return torch.zeros((), dtype=y.dtype, device=y.device)
        (d2,) = torch.autograd.grad(d1, eps)
    return _finite_or_raise(d2.detach(), func, "second variation")


def functional_hessian(F: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The Hessian of the polygon functional J_n in the interior values y[1], …, y[n−1].

    J_n (:func:`discrete_functional`) is a sum over cells, and cell i depends on y[i] and
    y[i+1] only, so the Hessian is tridiagonal. It is recovered exactly from three
    Hessian-vector products by autograd (probe vectors with ones at the indices ≡ 0, 1, 2 mod 3:
    each row meets exactly one nonzero entry per probe). With the ends held fixed,
    ηᵀ H η = :func:`second_variation` along the η that is 0 at both ends. At a stationary
    path, H positive definite makes it a strict local minimum of J_n; H is positive
    semidefinite at every local minimum (F = f′⁴ + f⁴ at f = 0: the strict minimum, H = 0);
    an eigenvector with a negative eigenvalue is a direction along which J_n decreases. The
    eigenvalues depend on the inner product (the L² Hessian W^(-1/2) H W^(-1/2), W the
    trapezoid weights, has others), their signs do not (Sylvester's law of inertia): that is
    how the discrete problem sees Legendre's and Jacobi's conditions (Gelfand & Fomin 1963,
    ch. 5).

    Parameters
    ----------
    F : callable
        The Lagrangian ``F(x, f, fp)``, elementwise, torch operations.
    x : Tensor, shape (n + 1,)
        Strictly increasing grid, n ≥ 2 cells.
    y : Tensor, shape (n + 1,)
        The path's values at the grid points (the ends are held fixed).

    Returns
    -------
    Tensor, shape (n − 1, n − 1)
        The symmetric, tridiagonal Hessian, detached, in the dtype of ``y``.

    Raises
    ------
    TypeError, ValueError
        As :func:`second_variation`; also for fewer than 2 cells (no interior value), and a
        Hessian that is not finite.
    """
    func = "functional_hessian"
    x, y = _check_grid_path(F, x, y, func)
    m = y.numel() - 2
    if m < 1:
        raise ValueError(f"{func}: argument 'y' must have at least 3 points (an interior "
                         f"value), got {y.numel()}")
    idx = torch.arange(m, device=y.device)
    H = torch.zeros(m, m, dtype=y.dtype, device=y.device)
    with torch.enable_grad():
        inner = y[1:-1].clone().requires_grad_(True)
        J = _finite_or_raise(_polygon_integral(F, x, torch.cat([y[:1], inner, y[-1:]]), func),
                             func, "integral")
        if not J.requires_grad:
            return H
        (g,) = torch.autograd.grad(J, inner, create_graph=True)
        for k in range(min(3, m)):
            probe = (idx % 3 == k).to(y.dtype)
            if not g.requires_grad:  # J linear in y: zero Hessian
                break
            (hv,) = torch.autograd.grad(g, inner, probe, retain_graph=True, allow_unused=True)
            if hv is None:
                continue
            # row j's one nonzero among columns ≡ k (mod 3) lies in column j−1, j or j+1
            for off in (-1, 0, 1):
                rows = idx[(idx + off >= 0) & (idx + off < m) & ((idx + off) % 3 == k)]
                H[rows, rows + off] = hv[rows].detach()
    H = (H + H.T) / 2  # symmetric to rounding already; make it exactly so for eigh
    return _finite_or_raise(H, func, "Hessian")


def functional_derivative(F: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The discrete functional derivative at the interior grid points: ∂J_n/∂y_i divided by w_i.

    The functional derivative δJ/δf is the gradient of J in the L² inner product,
    d/dε J[f + εη] = ∫ (δJ/δf) η dx (Gelfand & Fomin 1963, ch. 1). For the polygon functional
    J_n (:func:`discrete_functional`) the same holds with the inner product of the grid,
    Σ w_i u_i v_i with the trapezoid weights w_i = (x[i+1] − x[i−1]) / 2: the discrete
    gradient is ∂J_n/∂y_i / w_i. As the grid refines (uniformly) it converges, at order 2 for a
    smooth F and path, to δJ/δf = ∂F/∂f − d/dx ∂F/∂f′ (:func:`el_residual`) at the points:
    the gradient ∂J_n/∂y_i alone tends to 0 like w_i.

    Parameters
    ----------
    F : callable
        The Lagrangian ``F(x, f, fp)``, elementwise, torch operations.
    x : Tensor, shape (n + 1,)
        Strictly increasing grid, n ≥ 2 cells.
    y : Tensor, shape (n + 1,)
        The path's values at the grid points.

    Returns
    -------
    Tensor, shape (n − 1,)
        ∂J_n/∂y_i / w_i at x[1], …, x[n−1], detached, in the dtype of ``y``. The gradient sums
        terms of the size of ∂F/∂f′ that cancel to O(h), so dividing by w_i amplifies rounding
        to about eps / h: fine in float64 and float32, coarse in float16 and bfloat16.

    Raises
    ------
    TypeError, ValueError
        As :func:`functional_hessian`.
    """
    func = "functional_derivative"
    x, y = _check_grid_path(F, x, y, func)
    if y.numel() < 3:
        raise ValueError(f"{func}: argument 'y' must have at least 3 points (an interior "
                         f"value), got {y.numel()}")
    with torch.enable_grad():
        inner = y[1:-1].clone().requires_grad_(True)
        J = _finite_or_raise(_polygon_integral(F, x, torch.cat([y[:1], inner, y[-1:]]), func),
                             func, "integral")
        if not J.requires_grad:
            return torch.zeros_like(inner).detach()
        (g,) = torch.autograd.grad(J, inner, allow_unused=True)
    if g is None:
        return torch.zeros_like(inner).detach()
    weight = (x[2:] - x[:-2]) / 2
    return _finite_or_raise(g / weight, func, "gradient")


# ------------------------------------------------------------------------------------------------
# Minimisation
# ------------------------------------------------------------------------------------------------
class FunctionalMinimum(NamedTuple):
    """What :func:`minimize_functional` returns."""

    #: grid, shape (n + 1,), from a to b
    x: torch.Tensor
    #: the minimising path's values at the grid, shape (n + 1,), ends fixed
    f: torch.Tensor
    #: J of that path (0-d tensor), by :func:`discrete_functional`
    value: torch.Tensor
    #: number of L-BFGS iterations taken
    iterations: int
    #: True when a stopping test was met before ``max_iter``
    converged: bool
    #: which test stopped L-BFGS: ``"gradient"`` (max-norm of the preconditioned gradient
    #: ≤ gtol), ``"decrease"`` (three steps in a row each lowered J by at most ftol·max(1, |J|)),
    #: ``"max_iter"`` or ``"line search"`` (no step along the search direction lowered J: the
    #: last two are not converged)
    stop: str


def _grid(a: float, b: float, n: int, singular: str, dtype, device,
          grading: float = 3.0) -> torch.Tensor:
    """Grid of n cells on [a, b], graded as t**grading towards singular ends (module
    docstring; the default 3 is what the cycloid's start needs)."""
    t = torch.linspace(0.0, 1.0, n + 1, dtype=dtype, device=device)
    if singular == "a":
        tau = t ** grading
    elif singular == "b":
        tau = 1 - (1 - t) ** grading
    elif singular == "both":
        if grading == 3.0:
            # smootherstep 10t³ − 15t⁴ + 6t⁵: cubic at both ends, symmetric
            tau = t ** 3 * (10 - 15 * t + 6 * t * t)
        else:  # the same power at both ends, symmetric about the middle
            half = torch.where(t <= 0.5, (2 * t) ** grading / 2,
                               1 - (2 - 2 * t) ** grading / 2)
            tau = half
    else:
        tau = t
    x = a + (b - a) * tau
    x[0], x[-1] = a, b
    return x


def _preconditioner(x: torch.Tensor, free_a: bool = False, free_b: bool = False) -> torch.Tensor:
    """P with Pᵀ K P = I for the stiffness matrix K of ∫ f′² dx on the grid's interior nodes
    (and on a free end's node: there K has only the one cell's term, the Neumann end).

    The f′-part of J is what makes the discrete problem ill-conditioned (condition number
    ∝ n²). In the coordinates c of y_interior = y₀ + P c the path-length-like part of J is well
    scaled, so L-BFGS needs far fewer iterations (what is left is the conditioning of the rest
    of F: for the brachistochrone on the t³-graded grid, about 450 iterations at n = 128).
    """
    h = x[1:] - x[:-1]
    w = 1.0 / h
    if free_a or free_b:
        # all nodes' stiffness matrix, then the fixed ends' rows and columns dropped
        full = torch.zeros(x.numel(), dtype=x.dtype, device=x.device)
        full[:-1] += w
        full[1:] += w
        K = torch.diag(full) + torch.diag(-w, 1) + torch.diag(-w, -1)
        if free_a and free_b:
            # ∫ f′² does not see a constant shift: add the lumped mass ∫ f² / (b − a)², so that
            # K is positive definite with the same scaling
            mass = torch.zeros_like(full)
            mass[:-1] += h / 2
            mass[1:] += h / 2
            K = K + torch.diag(mass) / (x[-1] - x[0]) ** 2
        keep = slice(0 if free_a else 1, None if free_b else -1)
        K = K[keep, keep]
    else:
        diag = w[:-1] + w[1:]
        off = -w[1:-1]
        K = torch.diag(diag) + torch.diag(off, 1) + torch.diag(off, -1)
    evals, evecs = torch.linalg.eigh(K)
    return evecs / evals.sqrt()


def _lbfgs(fun, c0, *, max_iter: int, history: int, gtol: float, ftol: float):
    """Minimise fun(c) -> (value, gradient) by L-BFGS with a backtracking Armijo line search.

    Returns (c, value, iterations, stop), stop naming the test that ended it (FunctionalMinimum).

    Nocedal & Wright (2006), alg. 7.4 (two-loop recursion) and alg. 3.1. A trial point where
    the value or gradient is not finite (a path outside F's domain) counts as "too far": the
    step is halved, as for a failed Armijo test.
    """
    c = c0
    f, g = fun(c)
    S, Y, R = [], [], []
    small = 0
    for it in range(1, max_iter + 1):
        if float(g.abs().max()) <= gtol:
            return c, f, it - 1, "gradient"
        q = g.clone()
        alphas = []
        for s, yv, rho in zip(reversed(S), reversed(Y), reversed(R)):
            alpha = rho * torch.dot(s, q)
            q = q - alpha * yv
            alphas.append(alpha)
        gamma = torch.dot(S[-1], Y[-1]) / torch.dot(Y[-1], Y[-1]) if S else 1.0
        r = gamma * q
        for s, yv, rho, alpha in zip(S, Y, R, reversed(alphas)):
            beta = rho * torch.dot(yv, r)
            r = r + s * (alpha - beta)
        d = -r
        gtd = torch.dot(g, d)
        if not gtd < 0:  # not a descent direction: restart from steepest descent
            S, Y, R = [], [], []
            d = -g
            gtd = torch.dot(g, d)
        step = 1.0
        while True:
            c_new = c + step * d
            f_new, g_new = fun(c_new)
            if (math.isfinite(float(f_new)) and bool(torch.isfinite(g_new).all())
                    and float(f_new) <= float(f) + 1e-4 * step * float(gtd)):
                break
            step *= 0.5
            if step < 1e-30:
                return c, f, it, "line search"
        s, yv = c_new - c, g_new - g
        sy = torch.dot(s, yv)
        if sy > 1e-300:  # keep the curvature pairs that make the inverse Hessian positive
            S.append(s)
            Y.append(yv)
            R.append(1.0 / sy)
            if len(S) > history:
                S.pop(0), Y.pop(0), R.pop(0)
        decrease = float(f) - float(f_new)
        c, f, g = c_new, f_new, g_new
        # stop after a few steps in a row that no longer change J (rounding level)
        small = small + 1 if decrease <= ftol * max(1.0, abs(float(f))) else 0
        if small >= 3:
            return c, f, it, "decrease"
    return c, f, max_iter, "max_iter"


def minimize_functional(F: Callable, a, b, fa, fb, *, n: int = 64, singular: str = "auto",
                        init: Callable | None = None, dtype: torch.dtype = torch.float64,
                        grading: float = 3.0, max_iter: int = 2000, history: int = 20,
                        gtol: float = 1e-12, ftol: float = 1e-15) -> FunctionalMinimum:
    """Minimise J[f] = ∫ₐᵇ F(x, f, f′) dx over paths with f(a) = fa, f(b) = fb.

    The path is a polygon through n + 1 grid points (its ends fixed); J is
    :func:`discrete_functional` of it, and the n − 1 interior values are found by L-BFGS with a
    backtracking line search (Nocedal & Wright 2006, alg. 7.4 and 3.1), gradients by autograd,
    in coordinates preconditioned by the stiffness of ∫ f′² dx on the grid.

    For a smooth problem the error of the minimiser and of J falls like n⁻². At an end where F
    is infinite but integrable (the brachistochrone's 1/sqrt(−f) at its start), the grid is
    graded as t³ towards that end and each half-cell is integrated after the substitution
    x = node ± (h/2) v² (module docstring), which keeps the error of J at order n⁻² for a path
    that starts like (x − a)^(2/3); on a uniform grid it falls only like n⁻¹.

    Parameters
    ----------
    F : callable
        The Lagrangian ``F(x, f, fp)``, elementwise, torch operations.
    a, b : float
        The interval, a < b.
    fa, fb : float or None
        The fixed end values f(a) and f(b). ``None`` leaves that end free: its value is
        minimised over too, and the minimiser meets the natural boundary condition
        ∂F/∂f′ = 0 there (Gelfand & Fomin 1963, ch. 1).
    n : int
        Number of cells (n ≥ 2; n + 1 grid points).
    singular : {"auto", "none", "a", "b", "both"}
        Ends where F is singular. ``"auto"`` (default) evaluates F at both ends of the straight
        line from (a, fa) to (b, fb) and treats an end as singular where the value is not finite.
    init : callable, optional
        ``init(x) -> tensor`` the starting path on the grid; its fixed end values are replaced
        by fa, fb. Default: the straight line (level with the fixed end where the other is
        free, 0 where both are).
    grading : float
        The power of the grading towards a singular end, x − a ∝ t**grading for uniform t
        (≥ 1; 1 is a uniform grid). The default 3 makes a start like (x − a)^(2/3), the
        cycloid's, smooth in t; 2 leaves (x − a)^(2/3) ∝ t^(4/3), and the order of the error
        of J drops below 2 (module docstring). Ignored where no end is singular.
    dtype : torch.dtype
        ``torch.float64`` (default) or ``torch.float32``: the dtype of the computation (the
        preconditioner's eigendecomposition has no half-precision kernel).
    max_iter, history, gtol, ftol
        L-BFGS iteration limit, memory, gradient tolerance (max-norm, preconditioned
        coordinates) and relative decrease of J below which three steps in a row stop it.

    Returns
    -------
    FunctionalMinimum
        ``(x, f, value, iterations, converged, stop)``: grid (n + 1,), path values (n + 1,),
        J (0-d), and which stopping test ended L-BFGS. When it did not converge (``max_iter``
        reached, or the line search failed) a ``RuntimeWarning`` says so.

    Raises
    ------
    TypeError, ValueError
        For b ≤ a, non-finite ends, n < 2, an unknown ``singular``, a non-float dtype,
        negative or non-finite ``gtol``/``ftol``, an ``F`` or ``init`` that fails when called,
        or a Lagrangian whose value on the initial path is NaN or infinite (the message names
        the first bad cell).
    """
    func = "minimize_functional"
    _check_callable(F, "F", func)
    a = _check_real(a, "a", func)
    b = _check_real(b, "b", func)
    free_a, free_b = fa is None, fb is None
    fa = None if free_a else _check_real(fa, "fa", func)
    fb = None if free_b else _check_real(fb, "fb", func)
    # the straight line through the fixed ends (a free end: level with the other end, or 0)
    la = fa if not free_a else (fb if not free_b else 0.0)
    lb = fb if not free_b else la
    if not b > a:
        raise ValueError(f"{func}: argument 'b' must be > a = {a}, got {b}")
    n = check_int(n, "n", func, minimum=2)
    singular = _check_singular(singular, func)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{func}: argument 'dtype' must be a floating torch.dtype, got {dtype!r}")
    if dtype not in (torch.float32, torch.float64):
        # torch.linalg.eigh (the preconditioner) has no float16/bfloat16 kernel: say so here
        # rather than with torch's "linalg_eigh_cpu not implemented for 'Half'"
        raise TypeError(f"{func}: argument 'dtype' must be torch.float64 or torch.float32, got "
                        f"{dtype!r}")
    if init is not None:
        _check_callable(init, "init", func)
    grading = _check_real(grading, "grading", func)
    if grading < 1:
        raise ValueError(f"{func}: argument 'grading' must be >= 1, got {grading}")
    max_iter = check_int(max_iter, "max_iter", func, minimum=1)
    history = check_int(history, "history", func, minimum=1)
    for name, tol in (("gtol", gtol), ("ftol", ftol)):
        if _check_real(tol, name, func) < 0:
            raise ValueError(f"{func}: argument '{name}' must be >= 0, got {tol}")
    gtol, ftol = float(gtol), float(ftol)

    if singular == "auto":
        slope = torch.tensor([(lb - la) / (b - a)] * 2, dtype=dtype)
        with torch.no_grad():
            ends = _call(F, (torch.tensor([a, b], dtype=dtype),
                             torch.tensor([la, lb], dtype=dtype), slope),
                         "F", func, "F(x, f, fp)")
        ends = _check_output(ends, (2,), "argument 'F'", func)
        bad = [not math.isfinite(float(v)) for v in ends]
        singular = {(False, False): "none", (True, False): "a", (False, True): "b",
                    (True, True): "both"}[tuple(bad)]

    x = _grid(a, b, n, singular, dtype, None, grading)
    if init is None:
        y0 = la + (lb - la) * (x - a) / (b - a)
    else:
        y0 = _check_output(_call(init, (x,), "init", func, "init(x)"), x.shape,
                           "argument 'init'", func).detach().to(dtype)
        check_finite(y0, "init(x)", func)
        y0 = y0.clone()
    if not free_a:
        y0[0] = fa
    if not free_b:
        y0[-1] = fb

    with torch.no_grad():
        start = _polygon_integral(F, x, y0, func)
    if not math.isfinite(float(start)):
        with torch.no_grad():
            h = x[1:] - x[:-1]
            mid = (y0[1:] + y0[:-1]) / 2
            cell = _call(F, (x[:-1] + h / 2, mid, (y0[1:] - y0[:-1]) / h), "F", func,
                         "F(x, f, fp)")
        where = torch.nonzero(~torch.isfinite(cell))
        first = int(where[0]) if where.numel() else 0
        raise ValueError(
            f"{func}: argument 'F' gives a non-finite value ({float(start)}) on the initial "
            f"path (first in cell {first}, x in [{float(x[first]):.4g}, "
            f"{float(x[first + 1]):.4g}]); choose an initial path inside F's domain with "
            "'init', or mark a singular end with 'singular'")

    P = _preconditioner(x, free_a, free_b)
    lo, hi = (0 if free_a else 1), (n + 1 if free_b else n)
    base = y0[lo:hi]

    def path(c):
        # the fixed ends, and the free values moved by P c
        return torch.cat([y0[:lo], base + P @ c, y0[hi:]])

    def fun(c):
        with torch.enable_grad():
            c = c.detach().requires_grad_(True)
            J = _polygon_integral(F, x, path(c), func)
            if not torch.isfinite(J):
                return J.detach(), torch.full_like(c, float("nan"))
            (grad,) = torch.autograd.grad(J, c)
        return J.detach(), grad

    c0 = torch.zeros(hi - lo, dtype=dtype)
    c, J, iters, stop = _lbfgs(fun, c0, max_iter=max_iter, history=history, gtol=gtol,
                               ftol=ftol)
    converged = stop in ("gradient", "decrease")
    if not converged:
        # not silently: the path returned is wherever L-BFGS was when it gave up
        warnings.warn(f"{func}: L-BFGS did not converge ({stop!r} after {iters} iterations, "
                      f"n = {n}); the path returned is not a minimiser to the tolerances asked "
                      "for (raise max_iter, or loosen gtol/ftol)", RuntimeWarning, stacklevel=2)
    y = path(c).detach()
    return FunctionalMinimum(x, y, J.detach(), iters, converged, stop)


# ------------------------------------------------------------------------------------------------
# The exact brachistochrone
# ------------------------------------------------------------------------------------------------
# θ − sin θ and 1 − cos θ lose all their digits to cancellation for small θ (θ − sin θ ≈ θ³/6,
# and 1 − cos θ ≈ θ²/2 also near 2π): a path that starts almost vertically, b / (−fb) = 1e-9,
# got a travel time 2 % off. 1 − cos θ = 2 sin²(θ/2) has no cancellation; θ − sin θ is summed
# as its Taylor series below θ = 1/4 (the first omitted term, θ¹³/13!, is below 1e-15 of it).
_SERIES_BELOW = 0.25


def _one_minus_cos(t):
    s = torch.sin(t / 2) if isinstance(t, torch.Tensor) else math.sin(t / 2)
    return 2 * s * s


def _t_minus_sin(t):
    t2 = t * t
    series = t * t2 / 6 * (1 - t2 / 20 * (1 - t2 / 42 * (1 - t2 / 72 * (1 - t2 / 110))))
    if isinstance(t, torch.Tensor):
        return torch.where(t.abs() < _SERIES_BELOW, series, t - torch.sin(t))
    return series if abs(t) < _SERIES_BELOW else t - math.sin(t)


def _cycloid_params(b: float, fb: float) -> tuple[float, float]:
    """(r, θ_b) of the cycloid x = r(θ − sin θ), f = −r(1 − cos θ) through (b, fb)."""
    if fb == 0:
        # the end at the start's height: the whole arch, θ_b = 2π and b = 2π r
        return b / (2 * math.pi), 2 * math.pi
    # (θ − sin θ)/(1 − cos θ) increases from 0 to +inf on (0, 2π): bisection for θ_b.
    ratio = b / -fb
    if ratio > math.pi / 2:
        # The end lies beyond the lowest point (θ_b > π): solve for δ = 2π − θ_b instead, in
        # which the ratio is (2π − δ + sin δ) / (2 sin²(δ/2)), decreasing on (0, π]. Near the
        # whole arch (an end just below the start's height) θ_b itself keeps only the absolute
        # precision of 2π, so δ and r = −fb / (2 sin²(δ/2)) lost their digits: b / (−fb) = 1e16
        # gave a time 6e-9 off, 1e20 2e-6, 1e24 2e-4, and from 1.3e25 on the bracket's end
        # 2π − 1e-12 gave 0.28 s for 0.80 s (1e300: 3e-138 s). Geometric bisection on δ reaches
        # δ ≈ 3.5e-154, where b / (−fb) overflows.
        lo, hi = 1e-160, math.pi
        for _ in range(300):
            mid = math.sqrt(lo * hi)
            s2 = 2 * math.sin(mid / 2) ** 2
            if s2 * ratio < 2 * math.pi - mid + math.sin(mid):
                lo = mid  # the ratio at mid is still above the target: δ is larger
            else:
                hi = mid
        delta = math.sqrt(lo * hi)
        return -fb / (2 * math.sin(delta / 2) ** 2), 2 * math.pi - delta
    lo, hi = 1e-12, 2 * math.pi - 1e-12
    for _ in range(200):
        mid = (lo + hi) / 2
        if _t_minus_sin(mid) / _one_minus_cos(mid) < ratio:
            lo = mid
        else:
            hi = mid
    theta = (lo + hi) / 2
    return -fb / _one_minus_cos(theta), theta


def _check_end(b, fb, func: str) -> tuple[float, float]:
    b = _check_real(b, "b", func)
    fb = _check_real(fb, "fb", func)
    if not b > 0:
        raise ValueError(f"{func}: argument 'b' must be > 0 (the path starts at x = 0), got {b}")
    if not fb <= 0:
        raise ValueError(f"{func}: argument 'fb' must be <= 0 (the end cannot lie above the "
                         f"start: the bead starts at rest), got {fb}")
    return b, fb


def cycloid(x: torch.Tensor, b, fb) -> torch.Tensor:
    """The brachistochrone from (0, 0) to (b, fb): the cycloid's height f(x), differentiable.

    The curve of fastest descent under gravity is the cycloid x = r(θ − sin θ),
    f = −r(1 − cos θ), 0 ≤ θ ≤ θ_b, with r and θ_b fixed by the end point (Gelfand & Fomin
    1963, §1.4, example 3; the height f is measured upwards). For each x, θ(x) is found by
    bisection without gradient, then two Newton steps are taken with autograd on: since Newton's
    map has zero derivative in θ at its fixed point, those two steps carry the exact f′ and f″
    (so :func:`el_residual` can check the cycloid).

    Parameters
    ----------
    x : Tensor, any shape
        Points in [0, b] (floating dtype).
    b, fb : float
        The end point: b > 0, fb ≤ 0. The curve passes below the end point's height when
        b / (−fb) > π / 2. For fb = 0 it is the whole arch (θ_b = 2π): the bead slides down
        and climbs back to its starting height, arriving at rest with a vertical slope.

    Returns
    -------
    Tensor, shape of ``x``
        f(x) on the cycloid, differentiable in ``x`` (f′ is infinite at x = 0, and at x = b
        when fb = 0).
    """
    func = "cycloid"
    b, fb = _check_end(b, fb, func)
    x = as_float_tensor(x, "x", func)
    check_finite(x.detach(), "x", func)
    if bool(((x < 0) | (x > b)).any()):
        raise ValueError(f"{func}: argument 'x' must lie in [0, b] = [0, {b}]")
    r, theta_b = _cycloid_params(b, fb)
    if fb == 0:
        # The whole arch is symmetric about x = b/2: evaluate the first half at min(x, b − x).
        # (Near θ = 2π Newton's step for θ − sin θ = u divides by 1 − cos θ ≈ 0.)
        x = torch.minimum(x, b - x)
        theta_b = math.pi
    u = x / r
    with torch.no_grad():
        lo = torch.zeros_like(u)
        hi = torch.full_like(u, theta_b)
        for _ in range(60 if u.dtype == torch.float64 else 30):
            mid = (lo + hi) / 2
            below = _t_minus_sin(mid) < u
            lo = torch.where(below, mid, lo)
            hi = torch.where(below, hi, mid)
        theta0 = (lo + hi) / 2
    theta = theta0
    for _ in range(2):
        # Newton step for θ − sin θ = u; 1 − cos θ vanishes only at θ = 0 (x = 0), kept finite.
        denom = _one_minus_cos(theta).clamp_min(torch.finfo(u.dtype).tiny)
        theta = theta - (_t_minus_sin(theta) - u) / denom
    f = -r * _one_minus_cos(theta)
    # At x = 0 the bisection leaves θ ≈ 1e-18 instead of 0: f there is −r θ²/2 ≈ −1e-36. Make
    # the value exactly 0 and keep the (huge, negative) derivative of the vertical start.
    return f - f.detach() * (u == 0)


def cycloid_time(b, fb, g: float = 9.81) -> float:
    """Travel time from rest at (0, 0) to (b, fb) along the cycloid: θ_b sqrt(r / g).

    Parameters
    ----------
    b, fb : float
        The end point: b > 0, fb ≤ 0 (fb = 0: the whole arch, time 2π sqrt(r / g)).
    g : float
        Gravitational acceleration (> 0).

    Returns
    -------
    float
        The least possible travel time (Gelfand & Fomin 1963, §1.4). For (π, −2) and g = 9.81
        it is π / sqrt(9.81) ≈ 1.0030 s.
    """
    func = "cycloid_time"
    b, fb = _check_end(b, fb, func)
    g = _check_real(g, "g", func)
    if not g > 0:
        raise ValueError(f"{func}: argument 'g' must be > 0, got {g}")
    r, theta_b = _cycloid_params(b, fb)
    return theta_b * math.sqrt(r / g)
