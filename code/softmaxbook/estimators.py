"""Gradients of expectations: the score-function (REINFORCE) and pathwise (reparameterisation)
estimators, baselines, reparameterised samplers and the KL divergence between diagonal Gaussians.

The problem: estimate ``d/dtheta E_{z ~ p(z; theta)}[f(z)]`` from samples. Two unbiased answers:

* **score function** (likelihood ratio, REINFORCE; Williams 1992):
  ``(f(z) - b) * d/dtheta log p(z; theta)`` with ``z ~ p(z; theta)`` and a baseline ``b`` that
  does not depend on ``z``. It needs only ``log p`` and values of ``f``; ``z`` may be discrete.
* **pathwise** (reparameterisation; Kingma & Welling 2014): write ``z = g(eps, theta)`` with noise
  ``eps ~ p(eps)`` free of ``theta``; then ``d/dtheta f(g(eps, theta))`` with ``eps ~ p(eps)``.
  It needs a differentiable ``f`` and ``g``.

Conventions used here:

* The estimators return the **per-sample** estimates, one row per sample (shape
  ``(n, *theta.shape)``), so that their mean is the gradient estimate and their variance can be
  measured. ``estimates.mean(0)`` is the usual minibatch estimate.
* Randomness comes only from the optional keyword ``generator`` (a ``torch.Generator``).
* The samplers ``sample_*`` are ``g(eps, theta)`` applied to noise drawn from ``generator``: the
  result is differentiable with respect to every floating-point parameter tensor (like
  ``torch.distributions``' ``rsample``), except :func:`sample_rademacher`, which is discrete.

References
----------
* Williams (1992), *Simple statistical gradient-following algorithms for connectionist
  reinforcement learning*, Machine Learning 8 (the score-function estimator, baselines).
* Kingma & Welling (2014), *Auto-Encoding Variational Bayes*, ICLR (the reparameterisation trick,
  the analytic Gaussian KL of Appendix B).
* Mohamed, Rosca, Figurnov & Mnih (2020), *Monte Carlo Gradient Estimation in Machine Learning*,
  JMLR 21 (sections 4-5: both estimators, their variances; section 7: control variates).
* Kool, van Hoof & Welling (2019), *Buy 4 REINFORCE Samples, Get a Baseline for Free!* (the
  leave-one-out baseline).
* Pflug (1989), *Sampling derivatives of probabilities*, Computing 42; Mohamed et al. (2020),
  section 6 and Table 1 (the measure-valued, or weak-derivative, estimator).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Callable

import torch

from softmaxbook._validate import (
    as_float_tensor,
    check_finite,
    check_no_nan,
    check_no_posinf,
    check_generator,
    check_int,
    check_positive_number,
)

__all__ = [
    "MovingAverageBaseline",
    "baseline_values",
    "score_function_estimates",
    "pathwise_estimates",
    "square_example_variances",
    "measure_valued_estimates",
    "gaussian_gradient_moments",
    "score_function_surrogate",
    "sample_exponential",
    "sample_cauchy",
    "sample_laplace_standard",
    "sample_laplace",
    "sample_box_muller",
    "sample_gaussian",
    "sample_rademacher",
    "sample_lognormal",
    "sample_inverse_gamma",
    "gaussian_kl",
]


# ------------------------------------------------------------------------------------------------
# Baselines
# ------------------------------------------------------------------------------------------------
class MovingAverageBaseline:
    """A baseline that is an exponentially decaying average of past values of ``f``.

    ``b_t = decay * b_{t-1} + (1 - decay) * mean(f values of batch t)``; the first batch sets
    ``b`` to its mean. The baseline used for a batch is the value **before** that batch updates it,
    so it does not depend on the batch's samples and the score-function estimate stays unbiased.
    This is the "decaying average" baseline of Pyro's SVI (``baseline_beta``) and of Williams (1992).

    Parameters
    ----------
    decay : float in [0, 1)
        Weight of the old value. ``0`` uses the previous batch's mean.
    """

    def __init__(self, decay: float = 0.9):
        decay = check_positive_number(decay, "decay", "MovingAverageBaseline", allow_zero=True)
        if decay >= 1:
            raise ValueError(f"MovingAverageBaseline: argument 'decay' must be < 1, got {decay}")
        self.decay = decay
        self.value: float | None = None

    def current(self) -> float:
        """The baseline for the next batch (0.0 before the first update)."""
        return 0.0 if self.value is None else self.value

    def update(self, f_values: torch.Tensor) -> None:
        """Fold the mean of a batch's values of ``f`` into the average."""
        f_values = as_float_tensor(f_values, "f_values", "MovingAverageBaseline.update")
        check_finite(f_values, "f_values", "MovingAverageBaseline.update")
        m = float(f_values.detach().mean())
        self.value = m if self.value is None else self.decay * self.value + (1 - self.decay) * m

    def __repr__(self) -> str:
        return f"MovingAverageBaseline(decay={self.decay}, value={self.value})"


def baseline_values(f_values: torch.Tensor, baseline=None) -> torch.Tensor:
    """The baseline ``b_i`` subtracted from each sample's ``f(z_i)``.

    Parameters
    ----------
    f_values : Tensor of shape (n,)
        Values ``f(z_i)`` of the ``n`` samples.
    baseline : None, a number, ``"leave-one-out"``, or a :class:`MovingAverageBaseline`
        * ``None``: ``b_i = 0`` (plain REINFORCE);
        * a number ``c``: ``b_i = c``;
        * ``"leave-one-out"``: ``b_i`` is the mean of the *other* samples' values,
          ``(sum_j f_j - f_i) / (n - 1)`` (Kool et al. 2019); it needs ``n >= 2``;
        * a :class:`MovingAverageBaseline`: its current value (this function does not update it).

    Returns
    -------
    Tensor of shape (n,), detached: a baseline never carries gradient.

    Every choice is independent of ``z_i`` given the other samples, which is what keeps
    ``(f_i - b_i) * score_i`` unbiased.
    """
    func = "baseline_values"
    f_values = as_float_tensor(f_values, "f_values", func)
    if f_values.dim() != 1:
        raise ValueError(f"{func}: argument 'f_values' must be 1-D (one value per sample), got "
                         f"shape {tuple(f_values.shape)}")
    check_finite(f_values, "f_values", func)
    f = f_values.detach()
    if baseline is None:
        return torch.zeros_like(f)
    if isinstance(baseline, str):
        if baseline != "leave-one-out":
            raise ValueError(f"{func}: argument 'baseline' must be None, a number, "
                             f"'leave-one-out' or a MovingAverageBaseline, got {baseline!r}")
        n = f.shape[0]
        if n < 2:
            raise ValueError(f"{func}: argument 'baseline'='leave-one-out' needs at least 2 "
                             f"samples, got {n}")
        return (f.sum() - f) / (n - 1)
    if isinstance(baseline, MovingAverageBaseline):
        return torch.full_like(f, baseline.current())
    if isinstance(baseline, Real) and not isinstance(baseline, bool):
        if not math.isfinite(baseline):
            raise ValueError(f"{func}: argument 'baseline' must be finite, got {baseline}")
        return torch.full_like(f, float(baseline))
    raise TypeError(f"{func}: argument 'baseline' must be None, a number, 'leave-one-out' or a "
                    f"MovingAverageBaseline, got {type(baseline).__name__}")


# ------------------------------------------------------------------------------------------------
# The two estimators
# ------------------------------------------------------------------------------------------------
def _check_theta(theta, func: str) -> torch.Tensor:
    theta = as_float_tensor(theta, "theta", func)
    check_finite(theta, "theta", func)
    return theta


def _per_sample_jacobian(fn: Callable, theta: torch.Tensor, data: torch.Tensor, func: str,
                         what: str) -> torch.Tensor:
    """Rows ``d fn(data, theta)[i] / d theta``, shape ``(n, *theta.shape)``.

    ``fn(data, theta)`` returns one value per row of ``data`` (shape ``(n,)``), row ``i``
    depending on ``data[i]`` only. Computed with ``theta.numel() + 1`` backward passes, whatever
    ``n``: with ``v`` a vector of ones, ``g(v) = d/dtheta sum_i v_i fn_i`` is linear in ``v`` and
    ``d g_p / d v_i`` is the entry ``(i, p)`` of the Jacobian (the double-backward trick; one
    backward pass per sample would cost ``n`` passes). ``theta`` is small in this module's uses.
    """
    n = data.shape[0]
    leaf = theta.detach().requires_grad_(True)
    with torch.enable_grad():
        values = fn(data, leaf)
        if (not isinstance(values, torch.Tensor) or values.dim() != 1
                or values.shape[0] != n):
            shape = (tuple(values.shape) if isinstance(values, torch.Tensor)
                     else type(values).__name__)
            raise ValueError(f"{func}: {what} must return one value per sample (shape "
                             f"({n},)), got {shape}")
        if not values.requires_grad:
            raise ValueError(f"{func}: {what} does not depend on 'theta' through autograd (its "
                             f"result has no gradient); compute it from 'theta' with torch "
                             f"operations")
        v = torch.ones_like(values, requires_grad=True)
        (g,) = torch.autograd.grad(values, leaf, v, create_graph=True, allow_unused=True)
        if g is None:
            g = torch.zeros_like(leaf)
        flat = g.reshape(-1)
        cols = []
        for p in range(flat.numel()):
            col = None
            if flat.requires_grad:
                (col,) = torch.autograd.grad(flat[p], v, retain_graph=True, allow_unused=True)
            cols.append(torch.zeros_like(values) if col is None else col)
    return torch.stack(cols, dim=-1).reshape((n,) + tuple(theta.shape)).detach()


def score_function_estimates(f: Callable, sample: Callable, log_prob: Callable,
                             theta: torch.Tensor, n: int, *, baseline=None,
                             generator: torch.Generator | None = None) -> torch.Tensor:
    """Per-sample score-function (REINFORCE) estimates of ``d/dtheta E_{p(z; theta)}[f(z)]``.

    For ``z_i ~ p(z; theta)``, ``i = 1..n``, returns the rows
    ``(f(z_i) - b_i) * d/dtheta log p(z_i; theta)``. Each row is an unbiased estimate; their mean
    is the usual estimate from ``n`` samples. Williams (1992); Mohamed et al. (2020), eq. 13.

    Parameters
    ----------
    f : callable ``f(z) -> Tensor (n,)``
        The function whose expectation is differentiated; only its values are used (it may be
        a black box, and ``z`` may be discrete).
    sample : callable ``sample(theta, n, generator) -> z``
        Draws ``n`` samples (first dimension ``n``); it is called without gradient.
    log_prob : callable ``log_prob(z, theta) -> Tensor (n,)``
        ``log p(z_i; theta)`` for each sample, computed from ``theta`` with torch operations.
    theta : Tensor
        The parameters (any shape, floating point).
    n : int >= 1
        Number of samples.
    baseline : see :func:`baseline_values`
        A :class:`MovingAverageBaseline` is used with its current value and then updated with
        this batch's values of ``f``.
    generator : torch.Generator, optional

    Returns
    -------
    Tensor of shape ``(n, *theta.shape)``.
    """
    func = "score_function_estimates"
    theta = _check_theta(theta, func)
    n = check_int(n, "n", func, minimum=1)
    check_generator(generator, theta.device, func)
    for name, c in (("f", f), ("sample", sample), ("log_prob", log_prob)):
        if not callable(c):
            raise TypeError(f"{func}: argument '{name}' must be callable, got {type(c).__name__}")
    with torch.no_grad():
        z = sample(theta.detach(), n, generator)
        fz = f(z)
    fz = as_float_tensor(torch.as_tensor(fz), "f(z)", func)
    if tuple(fz.shape) != (n,):
        raise ValueError(f"{func}: argument 'f' must return one value per sample (shape ({n},)), "
                         f"got shape {tuple(fz.shape)}")
    b = baseline_values(fz, baseline)
    if isinstance(baseline, MovingAverageBaseline):
        baseline.update(fz)
    scores = _per_sample_jacobian(log_prob, theta, z, func, "argument 'log_prob'")
    weight = (fz - b).reshape((n,) + (1,) * theta.dim())
    return weight * scores


def pathwise_estimates(f: Callable, transform: Callable, noise: Callable, theta: torch.Tensor,
                       n: int, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """Per-sample pathwise (reparameterisation) estimates of ``d/dtheta E_{p(z; theta)}[f(z)]``.

    With ``eps_i ~ p(eps)`` (free of ``theta``) and ``z_i = g(eps_i, theta)``, returns the rows
    ``d/dtheta f(g(eps_i, theta))``. Kingma & Welling (2014); Mohamed et al. (2020), eq. 35.

    Parameters
    ----------
    f : callable ``f(z) -> Tensor (n,)``, differentiable.
    transform : callable ``transform(eps, theta) -> z``, the map ``g``, differentiable in theta.
    noise : callable ``noise(n, generator) -> eps``, the base noise (first dimension ``n``).
    theta : Tensor (any shape, floating point).
    n : int >= 1
    generator : torch.Generator, optional

    Returns
    -------
    Tensor of shape ``(n, *theta.shape)``.
    """
    func = "pathwise_estimates"
    theta = _check_theta(theta, func)
    n = check_int(n, "n", func, minimum=1)
    check_generator(generator, theta.device, func)
    for name, c in (("f", f), ("transform", transform), ("noise", noise)):
        if not callable(c):
            raise TypeError(f"{func}: argument '{name}' must be callable, got {type(c).__name__}")
    with torch.no_grad():
        eps = noise(n, generator)
    return _per_sample_jacobian(lambda e, th: f(transform(e, th)), theta, eps, func,
                                "f(transform(eps, theta))")


def square_example_variances(mu, a, baseline=0.0) -> dict:
    """Closed-form means and variances of the two single-sample estimators for the source's
    example: ``z ~ N(mu, 1)`` with ``mu = a * theta + b``, ``f(z) = z**2``, gradient in ``theta``.

    With ``z = mu + eps``, ``eps ~ N(0, 1)``:

    * pathwise ``2 a z``: mean ``2 a mu``, variance ``4 a**2``;
    * score function ``a (z**2 - c) (z - mu)`` with a constant baseline ``c``: mean ``2 a mu``,
      and a variance quadratic in ``c`` (from the Gaussian moments ``E eps**2 = 1``,
      ``E eps**4 = 3``, ``E eps**6 = 15``). Its closed form and the best constant are chapter
      6's exercises ``estimators-ex-variances`` and ``estimators-ex-best-baseline`` (the
      checks refuse this function): the help text does not print them.

    Parameters
    ----------
    mu, a, baseline : float

    Returns
    -------
    dict with keys ``"mean"``, ``"var_pathwise"``, ``"var_score"``.
    """
    func = "square_example_variances"
    vals = []
    for name, v in (("mu", mu), ("a", a), ("baseline", baseline)):
        if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
            raise ValueError(f"{func}: argument '{name}' must be a finite number, got {v!r}")
        vals.append(float(v))
    mu, a, c = vals
    return {
        "mean": 2 * a * mu,
        "var_pathwise": 4 * a**2,
        "var_score": a**2 * (mu**4 + 14 * mu**2 + 15 - 2 * c * (mu**2 + 3) + c**2),
    }


def score_function_surrogate(log_prob: torch.Tensor, f: torch.Tensor, baseline=None) -> torch.Tensor:
    """A surrogate objective whose *value* is ``f`` and whose *gradient* is the score-function
    (REINFORCE) estimate plus the pathwise part of ``f``.

    ``surrogate = f + (log_prob - stopgrad(log_prob)) * stopgrad(f - b)``

    The second term is 0 in value (so the surrogate reports the objective itself), and its
    gradient is ``(f - b) * grad log_prob``, the score-function term; ``f``'s own gradient, if it
    depends on parameters directly (a decoder), passes through the first term. Maximise
    ``surrogate.mean()`` (or minimise its negative) with any optimiser: this is how REINFORCE is
    written in an autograd framework (Schulman et al. 2015, "stochastic computation graphs";
    the ``log_prob - stopgrad(log_prob)`` form keeps the value equal to ``f``, as in Foerster et
    al. 2018's DiCE). The baseline gets no gradient from it: train a learned baseline with its
    own loss, e.g. ``(b - f.detach())**2``.

    Parameters
    ----------
    log_prob : Tensor (...), ``log p(z_i; theta)`` of the drawn samples, differentiable in theta.
        ``-inf`` is refused: a drawn sample has positive probability.
    f : Tensor of the same shape, the samples' values (differentiable or not).
    baseline : None, a number, or a Tensor broadcastable to ``f``'s shape (e.g. a learned,
        state-dependent ``b(x_i)``). It must not depend on the sample ``z_i`` itself, or the
        estimate is biased; this function cannot check that.

    Returns
    -------
    Tensor of ``f``'s shape (and the promoted dtype of ``f`` and ``log_prob``): equal to ``f``
    in value.
    """
    func = "score_function_surrogate"
    log_prob = as_float_tensor(log_prob, "log_prob", func, allow_empty=True)
    f = as_float_tensor(f, "f", func, allow_empty=True)
    if log_prob.shape != f.shape:
        raise ValueError(f"{func}: arguments 'log_prob' and 'f' must have one shape (one value "
                         f"per sample), got {tuple(log_prob.shape)} and {tuple(f.shape)}")
    check_no_nan(log_prob, "log_prob", func)
    if bool((log_prob.detach() == -math.inf).any()):
        raise ValueError(f"{func}: argument 'log_prob' contains -inf: a drawn sample cannot "
                         f"have probability 0 (was it drawn from another distribution?)")
    check_no_posinf(log_prob, "log_prob", func)
    check_finite(f.detach(), "f", func)
    if baseline is None:
        b = torch.zeros((), dtype=f.dtype, device=f.device)
    elif isinstance(baseline, torch.Tensor):
        b = as_float_tensor(baseline, "baseline", func, allow_empty=True)
        check_finite(b.detach(), "baseline", func)
        try:
            fits = torch.broadcast_shapes(b.shape, f.shape) == f.shape
        except RuntimeError:
            fits = False
        # a baseline of more dimensions than f would broadcast f up and return a result
        # that is not of f's shape
        if not fits:
            raise ValueError(f"{func}: argument 'baseline' of shape {tuple(b.shape)} does not "
                             f"broadcast to f's shape {tuple(f.shape)}")
        # f's dtype, so that a float64 baseline does not promote a float32 result
        b = b.to(f.dtype)
    elif isinstance(baseline, Real) and not isinstance(baseline, bool):
        if not math.isfinite(baseline):
            raise ValueError(f"{func}: argument 'baseline' must be finite, got {baseline}")
        b = torch.tensor(float(baseline), dtype=f.dtype, device=f.device)
    else:
        raise TypeError(f"{func}: argument 'baseline' must be None, a number or a tensor, got "
                        f"{type(baseline).__name__}")
    weight = (f - b).detach()
    return f + (log_prob - log_prob.detach()) * weight


# ------------------------------------------------------------------------------------------------
# The measure-valued (weak-derivative) estimator, and exact moments of all four by quadrature
# ------------------------------------------------------------------------------------------------
def measure_valued_estimates(f: Callable, mu, sigma, sample_shape=(), *, wrt: str = "mean",
                             coupled: bool = True, generator=None) -> torch.Tensor:
    """Per-sample measure-valued (weak-derivative) estimates of ``d/dtheta E_{N(mu, sigma^2)} f``.

    The derivative of a density is a signed measure, and a signed measure is a positive part
    minus a negative part: ``d/dtheta p(x; theta) = c_theta (p+(x) - p-(x))`` with two
    densities ``p+``, ``p-`` and a constant ``c_theta > 0``. Then
    ``d/dtheta E_p f = c_theta (E_{p+} f - E_{p-} f)``, and one sample of each part gives the
    unbiased estimate ``c_theta (f(x+) - f(x-))``. Only values of ``f`` are used, so ``f`` may be
    discontinuous (Pflug 1989; Mohamed et al. 2020, section 6 and Table 1). For the Gaussian:

    * ``wrt="mean"``: ``d/dmu N(x; mu, sigma^2) = (x - mu) / sigma^2 N(x; mu, sigma^2)``. Its
      positive part lives on ``x > mu``, its negative part on ``x < mu``; both integrate to
      ``c = 1 / (sigma sqrt(2 pi))``, and normalised they are ``mu + sigma R`` and
      ``mu - sigma R`` with ``R`` Rayleigh, density ``r exp(-r^2 / 2)`` on ``r > 0`` (a Weibull
      law with shape 2). ``R = sqrt(2 ln(1 / eps))``, ``eps ~ U(0, 1)``. With ``coupled=True``
      the two parts share one ``R`` (common random numbers): ``x+`` and ``x-`` are mirror
      images about ``mu`` and the estimate is ``2 c`` times the odd part of ``f`` about ``mu``
      at ``sigma R``, which cancels what is even (an oscillation centred near ``mu``). Coupling
      is not always better: for a monotone ``f``, ``f(x+)`` and ``f(x-)`` move in opposite
      directions as ``R`` grows, and the shared ``R`` *raises* the variance over independent
      draws (``coupled=False``); for ``f(z) = z^2`` at ``mu = 3``, ``sigma = 1`` it is 9.84
      against 6.19 (:func:`gaussian_gradient_moments`).
    * ``wrt="scale"``: ``d/dsigma N = (((x - mu) / sigma)^2 - 1) / sigma N``: ``c = 1 / sigma``,
      ``p+`` the double-sided Maxwell ``mu + sigma M`` (density ``m^2 phi(m)``, drawn as a random
      sign times ``sqrt(X^2 + Y^2 + Z^2)``, three standard normals) and ``p-`` the Gaussian
      itself, drawn independently (``coupled`` must be left at its default).

    Parameters
    ----------
    f : callable ``f(x) -> Tensor`` of ``x``'s shape (elementwise). Only its values are used;
        a bool or integer result (an indicator ``x > c``) is cast to the parameters' dtype.
    mu, sigma : Tensor or float, broadcastable; ``sigma > 0``. Floats become tensors of the
        default dtype.
    sample_shape : int or tuple of ints
    wrt : ``"mean"`` or ``"scale"``
    coupled : bool
    generator : torch.Generator, optional

    Returns
    -------
    Tensor ``sample_shape + broadcast(mu, sigma).shape`` in the parameters' dtype: each entry an
    unbiased single-sample estimate of the derivative. The noise is drawn in float32 or float64
    (:func:`_work_dtype`) and rounded to the parameters' dtype once.
    """
    func = "measure_valued_estimates"
    if not callable(f):
        raise TypeError(f"{func}: argument 'f' must be callable, got {type(f).__name__}")
    if wrt not in ("mean", "scale"):
        raise ValueError(f"{func}: argument 'wrt' must be 'mean' or 'scale', got {wrt!r}")
    if not isinstance(coupled, bool):
        raise TypeError(f"{func}: argument 'coupled' must be a bool, got {type(coupled).__name__}")
    if wrt == "scale" and not coupled:
        raise ValueError(f"{func}: argument 'coupled'=False applies to wrt='mean' only; the "
                         f"scale's two parts are always drawn independently")
    mu = _param(mu, "mu", func)
    sigma = _param(sigma, "sigma", func, positive=True)
    shape, dtype, device = _setup(func, sample_shape, generator, mu=mu, sigma=sigma)
    work = _work_dtype(dtype)
    if wrt == "mean":
        # R = sqrt(2 ln(1/eps)) is the Rayleigh's inverse CDF; eps in (0, 1) keeps it finite
        r_plus = torch.sqrt(-2 * torch.log(_uniform_open(shape, dtype, device, generator)))
        r_minus = r_plus if coupled else torch.sqrt(
            -2 * torch.log(_uniform_open(shape, dtype, device, generator)))
        x_plus = mu + sigma * r_plus.to(dtype)
        x_minus = mu - sigma * r_minus.to(dtype)
        c = 1 / (sigma * math.sqrt(2 * math.pi))
    else:
        chi3 = torch.randn(shape + (3,), dtype=work, device=device, generator=generator)
        sign = torch.where(_uniform_open(shape, dtype, device, generator) < 0.5, -1.0, 1.0)
        m = sign.to(work) * chi3.square().sum(-1).sqrt()
        eps = torch.randn(shape, dtype=work, device=device, generator=generator)
        x_plus = mu + sigma * m.to(dtype)
        x_minus = mu + sigma * eps.to(dtype)
        c = 1 / sigma
    f_plus, f_minus = f(x_plus), f(x_minus)
    for name, v, x in (("f(x+)", f_plus, x_plus), ("f(x-)", f_minus, x_minus)):
        if not isinstance(v, torch.Tensor) or v.shape != x.shape:
            got = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
            raise ValueError(f"{func}: argument 'f' must map a tensor elementwise (shape "
                             f"{tuple(x.shape)}), got {got} for {name}")
    # an indicator written as a comparison returns bool (or an integer tensor), which
    # torch cannot subtract; gaussian_gradient_moments accepts it, so cast here too
    return c * (f_plus.to(dtype) - f_minus.to(dtype))


def _gauss_legendre(lo: float, hi: float, cuts, panels: int, order: int):
    """Nodes and weights (float64 tensors) of composite Gauss-Legendre quadrature on
    ``[lo, hi]``, with panel edges at every cut inside, ``panels`` panels in all spread in
    proportion to the pieces' lengths (at least one per piece)."""
    import numpy as np

    edges = sorted({lo, hi, *(c for c in cuts if lo < c < hi)})
    x0, w0 = np.polynomial.legendre.leggauss(order)
    nodes, weights = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        k = max(1, round(panels * (b - a) / (hi - lo)))
        for left in np.linspace(a, b, k + 1)[:-1]:
            h = (b - a) / k
            nodes.append(left + h / 2 * (x0 + 1))
            weights.append(h / 2 * w0)
    return (torch.from_numpy(np.concatenate(nodes)), torch.from_numpy(np.concatenate(weights)))


def _real_number(v, name: str, func: str) -> float:
    if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
        raise ValueError(f"{func}: argument '{name}' must be a finite number, got {v!r}")
    return float(v)


def gaussian_gradient_moments(f: Callable, mu: float, sigma: float, *, breaks=(), baseline=None,
                              width: float = 12.0, panels: int = 600, order: int = 16) -> dict:
    """Exact means and variances of the single-sample estimators of ``d/dmu E_{N(mu, sigma^2)} f``.

    Every moment is an integral against the Gaussian (or, for the measure-valued estimator, the
    Rayleigh law), computed by composite Gauss-Legendre quadrature on ``mu +- width * sigma``
    with ``panels`` panels of ``order`` nodes, in float64. The estimators (Mohamed et al. 2020,
    sections 4-6), each from one draw:

    * ``"score"``: ``f(z) (z - mu) / sigma^2``, ``z ~ N(mu, sigma^2)``;
    * ``"score + baseline"``: ``(f(z) - b) (z - mu) / sigma^2`` with the constant ``b``
      (default ``E f``);
    * ``"pathwise"``: ``f'(z)`` with ``z = mu + sigma eps``, where ``f'`` is what autograd
      returns (0 where ``f``'s result does not depend on its input through autograd, e.g. a
      step written with ``torch.sign`` or a comparison). For a discontinuous ``f`` this
      derivative misses the jumps: its mean is then *not* the gradient (the estimator is
      biased), and the returned ``"mean"`` shows it;
    * ``"measure-valued"``: ``c (f(mu + sigma R) - f(mu - sigma R))``, ``R`` Rayleigh, one ``R``
      for both (see :func:`measure_valued_estimates`); ``"measure-valued, independent"``: two
      independent ``R``.

    ``"gradient"`` is the exact derivative, ``E[f(z) (z - mu)] / sigma^2`` (the score-function
    identity, valid for every ``f`` integrable against the Gaussian).

    Accuracy: the truncation at ``width = 12`` standard deviations leaves out a Gaussian mass
    of ``2 Phi(-12) = 3.6e-33`` (and a Rayleigh mass ``exp(-72) = 5e-32``); for an ``f`` that grows at most polynomially, or is bounded, every moment is then
    exact to about 1e-12 relative, provided the panels resolve ``f``: put every jump of ``f`` in
    ``breaks`` (a panel edge there, so no panel straddles it), and for ``f`` that oscillates
    with angular frequency ``k`` keep ``k * 2 * width * sigma / panels`` below about 2
    radians per panel (16 nodes integrate such a panel to machine precision). An ``f`` that
    grows so fast that an integrand has not decayed at the truncation (more than 1e-10 of its
    mass in the outermost twelfth of the range, e.g. ``exp(3 z)`` with ``sigma = 2``) is
    refused with a ``ValueError`` rather than integrated wrongly; so are moments that
    overflow float64 (a tiny ``sigma``).

    Parameters
    ----------
    f : callable ``f(z) -> Tensor`` elementwise on a float64 tensor ``z`` of shape ``(n,)``.
    mu : float
    sigma : float > 0
    breaks : iterable of floats, the points where ``f`` jumps or has a kink.
    baseline : float or None (``E f``)
    width : float > 0, panels : int >= 1, order : int in [2, 100]

    Returns
    -------
    dict with ``"gradient"``, ``"expectation"`` (``E f``), ``"baseline"``, and ``"mean"`` and
    ``"var"``: dicts from the estimator names above to floats.
    """
    func = "gaussian_gradient_moments"
    if not callable(f):
        raise TypeError(f"{func}: argument 'f' must be callable, got {type(f).__name__}")
    mu = _real_number(mu, "mu", func)
    sigma = _real_number(sigma, "sigma", func)
    if sigma <= 0:
        raise ValueError(f"{func}: argument 'sigma' must be > 0, got {sigma}")
    if isinstance(breaks, (str, bytes)) or not hasattr(breaks, "__iter__"):
        raise TypeError(f"{func}: argument 'breaks' must be an iterable of numbers, got "
                        f"{type(breaks).__name__}")
    breaks = [_real_number(b, "breaks", func) for b in breaks]
    if baseline is not None:
        baseline = _real_number(baseline, "baseline", func)
    width = check_positive_number(width, "width", func)
    panels = check_int(panels, "panels", func, minimum=1)
    order = check_int(order, "order", func, minimum=2, maximum=100)

    def values(z, name, grad=False):
        z = z.detach().requires_grad_(grad)
        with torch.enable_grad():
            v = f(z)
            if not isinstance(v, torch.Tensor) or v.shape != z.shape:
                got = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
                raise ValueError(f"{func}: argument 'f' must map a tensor elementwise (shape "
                                 f"{tuple(z.shape)}), got {got}")
            v = v.to(torch.float64)
            if not bool(torch.isfinite(v).all()):
                raise ValueError(f"{func}: argument 'f' returned a non-finite value at "
                                 f"{name} = {float(z.detach()[~torch.isfinite(v)][0]):.6g}")
            if not grad:
                return v.detach()
            if not v.requires_grad:
                return v.detach(), torch.zeros_like(v)
            (d,) = torch.autograd.grad(v.sum(), z, allow_unused=True)
            d = torch.zeros_like(v) if d is None else d
        if not bool(torch.isfinite(d).all()):
            raise ValueError(f"{func}: the autograd derivative of argument 'f' is not finite "
                             f"at z = {float(z.detach()[~torch.isfinite(d)][0]):.6g}")
        return v.detach(), d.detach()

    def moments():
        # the Gaussian: z = mu + sigma t, density phi(t)
        t, wt = _gauss_legendre(-width, width, [(b - mu) / sigma for b in breaks], panels,
                                order)
        wt = wt * torch.exp(-0.5 * t**2) / math.sqrt(2 * math.pi)
        fz, dfz = values(mu + sigma * t, "z", grad=True)
        score = t / sigma
        gradient = float((wt * fz * score).sum())
        expectation = float((wt * fz).sum())
        b = expectation if baseline is None else baseline
        mean = {"score": gradient, "score + baseline": gradient,
                "pathwise": float((wt * dfz).sum())}
        var = {
            "score": float((wt * (fz * score) ** 2).sum()) - gradient**2,
            "score + baseline": float((wt * ((fz - b) * score) ** 2).sum()) - gradient**2,
            "pathwise": float((wt * dfz**2).sum()) - mean["pathwise"] ** 2,
        }
        # the Rayleigh: r > 0 with density r exp(-r^2 / 2); f(mu + sigma r) jumps at
        # r = (b - mu) / sigma, f(mu - sigma r) at r = (mu - b) / sigma
        cuts = [abs(b_ - mu) / sigma for b_ in breaks]
        r, wr = _gauss_legendre(0.0, width, cuts, max(1, panels // 2), order)
        wr = wr * r * torch.exp(-0.5 * r**2)
        c = 1 / (sigma * math.sqrt(2 * math.pi))
        f_plus = values(mu + sigma * r, "z")
        f_minus = values(mu - sigma * r, "z")
        diff = f_plus - f_minus
        mean["measure-valued"] = c * float((wr * diff).sum())
        mean["measure-valued, independent"] = mean["measure-valued"]
        var["measure-valued"] = c**2 * float((wr * diff**2).sum()) - mean["measure-valued"] ** 2
        var_plus = float((wr * f_plus**2).sum()) - float((wr * f_plus).sum()) ** 2
        var_minus = float((wr * f_minus**2).sum()) - float((wr * f_minus).sum()) ** 2
        var["measure-valued, independent"] = c**2 * (var_plus + var_minus)
        # The truncation at width sigma is harmless only if every second-moment integrand
        # has decayed there. An f that grows exponentially (exp(3z), sigma = 2: its square's
        # integrand peaks at 12 sigma) would otherwise give moments off by a factor of 2,
        # silently. Refuse when the outermost twelfth of the range holds more than 1e-10 of
        # an integrand's mass (for f = z^2 at width 12 it is below 1e-20).
        edge_t, edge_r = t.abs() > width * 11 / 12, r > width * 11 / 12
        integrands = (
            (wt * fz**2, edge_t, "f^2"), (wt * (fz * score) ** 2, edge_t, "score"),
            (wt * ((fz - b) * score) ** 2, edge_t, "score + baseline"),
            (wt * dfz**2, edge_t, "pathwise"), (wr * f_plus**2, edge_r, "f(x+)^2"),
            (wr * f_minus**2, edge_r, "f(x-)^2"), (wr * diff**2, edge_r, "MV"))
        for x, edge, what in integrands:
            total = float(x.abs().sum())
            share = float(x[edge].abs().sum()) / total if total > 0 else 0.0
            # (a non-finite share is an overflow, reported below)
            if math.isfinite(share) and share > 1e-10:
                raise ValueError(
                    f"{func}: the {what} integrand has not decayed at mu +- width * sigma "
                    f"({share:.1e} of its mass lies beyond {width * 11 / 12:.4g} sigma): f "
                    f"grows too fast for argument 'width' = {width:g}; raise 'width' (and "
                    f"'panels' with it)")
        return {"gradient": gradient, "expectation": expectation, "baseline": b, "mean": mean,
                "var": var}

    # a tiny sigma makes the score (z - mu) / sigma^2 overflow float64: say so, rather
    # than raise Python's bare OverflowError or return inf
    try:
        out = moments()
    except OverflowError:
        out = None
    numbers = [] if out is None else [out["gradient"], out["expectation"],
                                      *out["mean"].values(), *out["var"].values()]
    if out is None or not all(math.isfinite(x) for x in numbers):
        raise ValueError(f"{func}: the moments overflow float64 (argument 'sigma' = "
                         f"{sigma:g}: the score (z - mu) / sigma^2 or f's values are too "
                         f"large); rescale z")
    return out


# ------------------------------------------------------------------------------------------------
# Reparameterised samplers (the source's table, corrected: erratum 26)
# ------------------------------------------------------------------------------------------------
def _param(x, name: str, func: str, *, positive: bool = False) -> torch.Tensor:
    if isinstance(x, Real) and not isinstance(x, bool):
        x = torch.tensor(float(x), dtype=torch.get_default_dtype())
    x = as_float_tensor(x, name, func)
    check_finite(x, name, func)
    if positive and bool((x <= 0).any()):
        raise ValueError(f"{func}: argument '{name}' must be > 0 everywhere, got a value "
                         f"{float(x[x <= 0].flatten()[0])}")
    return x


def _shape(sample_shape, func: str) -> tuple[int, ...]:
    if isinstance(sample_shape, int) and not isinstance(sample_shape, bool):
        sample_shape = (sample_shape,)
    if not isinstance(sample_shape, (tuple, list, torch.Size)) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in sample_shape):
        raise ValueError(f"{func}: argument 'sample_shape' must be an int or a tuple of "
                         f"non-negative ints, got {sample_shape!r}")
    return tuple(sample_shape)


def _common(params, func):
    """Broadcast shape, dtype and device of the parameter tensors (all must agree)."""
    dtypes = {p.dtype for p in params}
    devices = {p.device for p in params}
    if len(dtypes) > 1 or len(devices) > 1:
        raise ValueError(f"{func}: the parameters must share one dtype and device, got "
                         f"{sorted(map(str, dtypes))} on {sorted(map(str, devices))}")
    try:
        shape = torch.broadcast_shapes(*(p.shape for p in params))
    except RuntimeError:
        raise ValueError(f"{func}: the parameters' shapes "
                         f"{[tuple(p.shape) for p in params]} do not broadcast") from None
    return tuple(shape), params[0].dtype, params[0].device


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype in which the noise and the parameter-free part of ``g`` are computed: float64
    for float64, float32 for every other float dtype. Half-precision uniforms are too coarse:
    float16 has 2^11 values in [1/2, 1), so a uniform cast to it rounds to exactly 1 once in
    about 4000 draws (and ln(1 - 2|eps|) becomes -inf, ln(1/eps) exactly 0)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _uniform_open(shape, dtype, device, generator):
    """Uniforms in the open interval (0, 1), in the work dtype :func:`_work_dtype` ``(dtype)``
    (the callers round only their final result to ``dtype``, once).

    ``torch.rand`` returns multiples of 2^-24 (float32) or 2^-53 (float64) in [0, 1): never 1,
    but 0 with probability 2^-24 resp. 2^-53, and ``log 0 = -inf``. A 0 is replaced by half the
    grid step (2^-25 resp. 2^-54), so every uniform lies strictly inside (0, 1) and the
    largest draw of ``ln(1/eps)`` is ``ln 2^25 = 17.3`` (float32) rather than
    ``ln(1/tiny) = 87``."""
    work = _work_dtype(dtype)
    u = torch.rand(shape, dtype=work, device=device, generator=generator)
    return u.clamp_(torch.finfo(work).eps / 4, 1.0)


def _setup(func, sample_shape, generator, **params):
    shape = _shape(sample_shape, func)
    tensors = params.values()
    bshape, dtype, device = _common(list(tensors), func)
    check_generator(generator, device, func)
    return shape + bshape, dtype, device


def sample_exponential(rate=1.0, sample_shape=(), *, generator=None) -> torch.Tensor:
    """Exponential(rate) by the inverse CDF: ``g(eps) = ln(1 / eps) / rate``, ``eps ~ U(0, 1)``.

    Density ``rate * exp(-rate * x)``, ``x > 0``. Returns ``sample_shape + rate.shape``.
    ``ln(1 / eps)`` is computed in float32 or float64 (:func:`_work_dtype`) and then rounded to
    ``rate``'s dtype; a draw too small for that dtype (below its smallest subnormal, e.g.
    ``2^-24`` in float16) is returned as that smallest positive number, so every draw lies in the
    support ``x > 0`` (its derivative in ``rate`` is then 0 instead of about 0).
    """
    func = "sample_exponential"
    rate = _param(rate, "rate", func, positive=True)
    shape, dtype, device = _setup(func, sample_shape, generator, rate=rate)
    eps = _uniform_open(shape, dtype, device, generator)
    # ln(1/eps) > 0 for eps < 1; computed before rounding to dtype, where eps could become 1
    standard = (-torch.log(eps)).to(dtype)
    tiny = torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps
    return (standard / rate).clamp_min(tiny)


def sample_cauchy(loc=0.0, scale=1.0, sample_shape=(), *, generator=None) -> torch.Tensor:
    """Cauchy(loc, scale): ``g(eps) = loc + scale * tan(pi * (eps - 1/2))``, ``eps ~ U(0, 1)``.

    Density ``1 / (pi * scale * (1 + ((x - loc) / scale)**2))``. The source's ``tan(pi eps)`` has
    the same law (tan has period pi) but jumps at ``eps = 1/2``; the shifted form is the
    increasing inverse CDF. The standard draw ``tan(pi (eps - 1/2))`` is computed in float32 or
    float64 and then rounded to the parameters' dtype: in float16 a standard Cauchy draw exceeds
    the largest finite value 65504 with probability ``2 / (65504 pi) = 1e-5`` and rounds to
    +-inf, as the true value would.
    """
    func = "sample_cauchy"
    loc = _param(loc, "loc", func)
    scale = _param(scale, "scale", func, positive=True)
    shape, dtype, device = _setup(func, sample_shape, generator, loc=loc, scale=scale)
    eps = _uniform_open(shape, dtype, device, generator)
    return loc + scale * torch.tan(math.pi * (eps - 0.5)).to(dtype)


def sample_laplace_standard(sample_shape=(), *, generator=None, dtype=None) -> torch.Tensor:
    """Laplace(0, 1), density ``exp(-|x|) / 2`` (erratum 26: the source omits the 1/2):
    ``g(eps1, eps2) = ln(eps1 / eps2)`` with ``eps1, eps2 ~ U(0, 1)`` independent (a difference
    of two Exponential(1) variables). Computed in float32 or float64, then rounded to ``dtype``."""
    func = "sample_laplace_standard"
    shape = _shape(sample_shape, func)
    check_generator(generator, None, func)
    dtype = dtype or torch.get_default_dtype()
    e1 = _uniform_open(shape, dtype, "cpu", generator)
    e2 = _uniform_open(shape, dtype, "cpu", generator)
    return (torch.log(e1) - torch.log(e2)).to(dtype)


def sample_laplace(loc=0.0, scale=1.0, sample_shape=(), *, generator=None) -> torch.Tensor:
    """Laplace(loc, scale), density ``exp(-|x - loc| / scale) / (2 scale)``, by the inverse CDF:
    ``g(eps) = loc - scale * sgn(eps) * ln(1 - 2 |eps|)`` with ``eps ~ U(-1/2, 1/2)``
    (erratum 26: the source draws ``eps`` from [0, 1], where ``ln(1 - 2|eps|)`` is undefined for
    half the draws).

    Numerics: with ``eps = u - 1/2`` for ``u ~ U(0, 1)`` the formula is ``ln(2 u)`` for
    ``u < 1/2`` and ``-ln(2 (1 - u))`` above, and that is how it is evaluated, in float32 or
    float64 (:func:`_work_dtype`): ``u - 1/2`` would round to ``-1/2`` for every ``u < 2^-25`` in
    float32 (``ln 0 = -inf``; ``torch.rand`` returns 0 with probability 2^-24), and a uniform
    rounded to float16 reaches 1 once in about 4000 draws. ``1 - u`` is exact for ``u >= 1/2`` (Sterbenz), so neither branch
    takes the logarithm of 0. The standard draw is rounded to the parameters' dtype once.
    """
    func = "sample_laplace"
    loc = _param(loc, "loc", func)
    scale = _param(scale, "scale", func, positive=True)
    shape, dtype, device = _setup(func, sample_shape, generator, loc=loc, scale=scale)
    u = _uniform_open(shape, dtype, device, generator)
    lower = u < 0.5
    # each branch sees only values where its logarithm is finite (no -inf to mask afterwards)
    left = torch.log(2 * torch.where(lower, u, 0.25))
    right = -torch.log(2 * (1 - torch.where(lower, 0.75, u)))
    standard = torch.where(lower, left, right).to(dtype)
    return loc + scale * standard


def sample_box_muller(sample_shape=(), *, generator=None, dtype=None) -> torch.Tensor:
    """N(0, 1) by Box-Muller: ``g(eps1, eps2) = sqrt(2 ln(1 / eps1)) * cos(2 pi eps2)`` with
    ``eps1, eps2 ~ U(0, 1)`` (erratum 26: the source omits the factor 2 under the root, which
    gives variance 1/2)."""
    func = "sample_box_muller"
    shape = _shape(sample_shape, func)
    check_generator(generator, None, func)
    dtype = dtype or torch.get_default_dtype()
    e1 = _uniform_open(shape, dtype, "cpu", generator)
    e2 = _uniform_open(shape, dtype, "cpu", generator)
    return (torch.sqrt(-2 * torch.log(e1)) * torch.cos(2 * math.pi * e2)).to(dtype)


def sample_gaussian(mean: torch.Tensor, factor: torch.Tensor, sample_shape=(), *,
                    generator=None) -> torch.Tensor:
    """N(mean, R R^T) with a covariance factor ``R``: ``g(eps) = mean + R eps``, ``eps ~ N(0, I)``.

    Parameters
    ----------
    mean : Tensor (d,)
    factor : Tensor (d, k), any factor with ``R R^T`` the covariance (e.g. a Cholesky factor).

    Returns
    -------
    Tensor ``sample_shape + (d,)``.
    """
    func = "sample_gaussian"
    mean = _param(mean, "mean", func)
    factor = _param(factor, "factor", func)
    if mean.dim() != 1 or factor.dim() != 2 or factor.shape[0] != mean.shape[0]:
        raise ValueError(f"{func}: argument 'factor' must have shape (d, k) with d = "
                         f"len(mean); got mean {tuple(mean.shape)} and factor "
                         f"{tuple(factor.shape)}")
    shape = _shape(sample_shape, func)
    _common([mean, factor], func)
    check_generator(generator, mean.device, func)
    eps = torch.randn(shape + (factor.shape[1],), dtype=mean.dtype, device=mean.device,
                      generator=generator)
    return mean + eps @ factor.T


def sample_rademacher(sample_shape=(), *, generator=None, dtype=None) -> torch.Tensor:
    """Rademacher (+1 or -1 with probability 1/2 each): ``g(eps) = 2 eps - 1``,
    ``eps ~ Bernoulli(1/2)``. No parameter, hence nothing to differentiate: a discrete law has
    no pathwise gradient."""
    func = "sample_rademacher"
    shape = _shape(sample_shape, func)
    check_generator(generator, None, func)
    dtype = dtype or torch.get_default_dtype()
    eps = torch.randint(0, 2, shape, generator=generator).to(dtype)
    return 2 * eps - 1


def sample_lognormal(mu=0.0, sigma=1.0, sample_shape=(), *, generator=None) -> torch.Tensor:
    """Log-normal: ``g(eps) = exp(mu + sigma * eps)`` with ``eps ~ N(0, 1)`` (erratum 26: the
    source draws ``eps ~ N(mu, sigma**2)``, which leaves no parameter in ``g``)."""
    func = "sample_lognormal"
    mu = _param(mu, "mu", func)
    sigma = _param(sigma, "sigma", func, positive=True)
    shape, dtype, device = _setup(func, sample_shape, generator, mu=mu, sigma=sigma)
    eps = torch.randn(shape, dtype=dtype, device=device, generator=generator)
    return torch.exp(mu + sigma * eps)


def sample_inverse_gamma(shape_k, scale=1.0, sample_shape=(), *, generator=None) -> torch.Tensor:
    """Inverse gamma IG(k, theta), density ``theta**k / Gamma(k) x**(-k-1) exp(-theta / x)``:
    ``g(eps, theta) = theta / eps`` with ``eps ~ Gamma(k, 1)`` (erratum 26: the source's
    ``IG(lk; theta)`` is ``IG(k; theta)``). ``1 / eps'`` with ``eps' ~ Gamma(k, rate theta)`` has
    the same law but puts ``theta`` into the noise; since ``Gamma(k, rate theta)`` is
    ``Gamma(k, 1) / theta``, ``theta`` comes out into ``g``, with ``dz/dtheta = z / theta``.

    The gradient in ``theta`` is pathwise; the gradient in ``k`` flows through PyTorch's gamma
    sampler, which differentiates its draws implicitly (Figurnov, Mohamed & Mnih 2018).
    """
    func = "sample_inverse_gamma"
    k = _param(shape_k, "shape_k", func, positive=True)
    scale = _param(scale, "scale", func, positive=True)
    shape, dtype, device = _setup(func, sample_shape, generator, shape_k=k, scale=scale)
    # PyTorch's gamma sampler has no half-precision kernel: draw in float32, round once
    work = _work_dtype(dtype)
    g = torch._standard_gamma(k.to(work).expand(shape), generator=generator)
    return scale / g.to(dtype)


# ------------------------------------------------------------------------------------------------
# KL divergence between diagonal Gaussians
# ------------------------------------------------------------------------------------------------
def _expm1_minus_x(d: torch.Tensor) -> torch.Tensor:
    """``e^d - 1 - d`` to a few ulp for every finite ``d``.

    ``expm1(d) - d`` still cancels for small ``|d|``: the result ``~ d^2 / 2`` is the difference
    of two numbers of size ``|d|``, so its relative error is about ``eps / |d|`` (float64:
    1.5e-7 at ``d = 1e-9``, 1 % at ``1e-14``, 100 % at ``1e-16``; still ~7 ulp at
    ``|d| = 0.1``). Below ``|d| = 1/2`` the Taylor series ``d^2 (1/2 + d/6 + d^2/24 + ...)`` is
    used instead (terms to ``d^16 / 16!``; the first omitted one is below ``1e-18`` of the sum);
    above, ``expm1(d) - d`` loses at most ~2 ulp. Each branch sees only inputs where it is
    finite, so the unused one passes no NaN into the gradient."""
    small = d.abs() < 0.5
    ds = torch.where(small, d, torch.zeros_like(d))
    poly = torch.full_like(d, 1 / math.factorial(16))
    for k in range(15, 1, -1):
        poly = 1 / math.factorial(k) + ds * poly
    series = ds * ds * poly
    dl = torch.where(small, torch.ones_like(d), d)
    return torch.where(small, series, torch.expm1(dl) - dl)


def gaussian_kl(mu_q: torch.Tensor, logvar_q: torch.Tensor, mu_p: torch.Tensor | None = None,
                logvar_p: torch.Tensor | None = None) -> torch.Tensor:
    """KL(q || p) between diagonal Gaussians, summed over the last dimension.

    ``q = N(mu_q, diag(exp(logvar_q)))``, ``p = N(mu_p, diag(exp(logvar_p)))``; ``p`` defaults to
    the standard normal. Per dimension (erratum 24),

    ``KL = 1/2 [ r - 1 - log r + (mu_q - mu_p)**2 / var_p ]``,  ``r = var_q / var_p``,

    and the KL between products of independent factors is the sum over dimensions.

    Numerics:

    * ``r = exp(logvar_q - logvar_p)`` is formed from the difference of the log-variances, so
      huge or tiny variances (``logvar`` of +-500 in float64) neither overflow nor underflow.
    * ``r - 1 - log r = e^d - 1 - d`` with ``d = logvar_q - logvar_p``: the naive form cancels
      to 0 near ``d = 0`` while the KL is ``d**2 / 4 > 0``; ``expm1(d) - d`` cancels less, but
      still loses ``log10(1/|d|)`` digits, so small ``|d|`` use the Taylor series
      (:func:`_expm1_minus_x`): a few ulp for every ``d``.
    * The mean term is ``((mu_q - mu_p) * exp(-logvar_p / 2))**2``, and exactly 0 where the
      means are equal: for two identical narrow Gaussians (``logvar = -100`` in float32)
      ``exp(-logvar_p)`` overflows and ``0 * inf`` would be NaN (``torch.distributions``
      gives 0).
    * float16 and bfloat16 inputs are computed in float32 (their ``exp`` overflows from 11.1
      and 88.7) and the result rounded to the inputs' dtype.

    Parameters
    ----------
    mu_q, logvar_q : Tensor (..., d)
    mu_p, logvar_p : Tensor broadcastable to (..., d), optional (both or neither)

    Returns
    -------
    Tensor (...): the KL for each leading index, in nats, >= 0. Empty leading dimensions give an
    empty result; ``d = 0`` gives 0.

    Reference: Kingma & Welling (2014), Appendix B; equal to ``torch.distributions.kl_divergence``
    of two ``Normal`` laws summed over the last dimension.
    """
    func = "gaussian_kl"
    mu_q = as_float_tensor(mu_q, "mu_q", func, allow_empty=True)
    logvar_q = as_float_tensor(logvar_q, "logvar_q", func, allow_empty=True)
    if (mu_p is None) != (logvar_p is None):
        raise ValueError(f"{func}: give both 'mu_p' and 'logvar_p' or neither (p = N(0, I))")
    names = [("mu_q", mu_q), ("logvar_q", logvar_q)]
    if mu_p is None:
        mu_p = torch.zeros((), dtype=mu_q.dtype, device=mu_q.device)
        logvar_p = torch.zeros((), dtype=mu_q.dtype, device=mu_q.device)
    else:
        mu_p = as_float_tensor(mu_p, "mu_p", func, allow_empty=True)
        logvar_p = as_float_tensor(logvar_p, "logvar_p", func, allow_empty=True)
        names += [("mu_p", mu_p), ("logvar_p", logvar_p)]
    for name, t in names:
        check_finite(t, name, func)
    try:
        shape = torch.broadcast_shapes(*(t.shape for _, t in names))
    except RuntimeError:
        raise ValueError(f"{func}: the shapes of " + ", ".join(
            f"'{n}' {tuple(t.shape)}" for n, t in names) + " do not broadcast") from None
    if len(shape) == 0:
        raise ValueError(f"{func}: argument 'mu_q' is a 0-d tensor; the KL is summed over the "
                         f"last dimension, so give shape (..., d)")
    out_dtype = mu_q.dtype
    for _, t in names[1:]:
        out_dtype = torch.promote_types(out_dtype, t.dtype)
    work = torch.float64 if out_dtype == torch.float64 else torch.float32
    mu_q, logvar_q, mu_p, logvar_p = (t.to(work) for t in (mu_q, logvar_q, mu_p, logvar_p))
    d = logvar_q - logvar_p
    diff = mu_q - mu_p
    same = diff == 0
    # where the means agree the term is 0; elsewhere exp(-logvar_p / 2) multiplies before
    # squaring, so a tiny difference over a tiny variance is not 0 * inf
    lp = torch.where(same, torch.zeros_like(logvar_p), logvar_p)
    mean_term = (diff * torch.exp(-0.5 * lp)) ** 2
    per_dim = _expm1_minus_x(d) + mean_term
    return (0.5 * per_dim.expand(shape).sum(-1)).to(out_dtype)
