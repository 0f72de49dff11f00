"""Gumbel tricks: Gumbel-max, Gumbel-softmax, Gumbel-top-k and Gumbels with a given maximum.

Conventions used by every function here:

* The Gumbel distribution has unit scale: ``Gumbel(mu)`` has CDF ``F(g) = exp(-exp(-(g - mu)))``
  and density ``p(g) = exp(-(g - mu)) F(g)``.
* Logits (locations) live in the **last** dimension; all leading dimensions are batch dimensions.
* A logit of ``-inf`` means "impossible": its Gumbel is ``-inf`` and it is never sampled. A row
  whose logits are all ``-inf`` has nothing to sample and is an error. ``NaN`` and ``+inf`` are
  errors. So are empty rows (a last dimension of size 0) and 0-d logits, deliberately unlike
  the softmax functions (which follow PyTorch and SciPy there): a value of an empty reduction
  exists (``-inf``), a sample from an empty row does not, and a 0-d tensor has no dimension of
  classes to sample from. An empty *batch* (e.g. shape ``(0, n)``) is fine: no rows, an empty
  result.
* Randomness comes only from the optional keyword ``generator`` (a ``torch.Generator`` on the
  device of the tensors); results are on the device, and in the floating dtype, of the inputs.
* ``torch.func`` works (``grad``, ``jvp``, ``vmap``, ``jacrev``; ``jacfwd`` with
  ``randomness="same"``). Under ``vmap``, ``randomness="same"`` draws the noise once for the
  whole batch (each element gets what the unbatched call would) and ``"different"`` draws it
  per element; the checks of values still run, on the whole batch.

References
----------
* Gumbel (1954); Maddison, Tarlow & Minka (2014), *A\\* Sampling* (the Gumbel-max trick and
  truncated Gumbels).
* Maddison, Mnih & Teh (2017), *The Concrete Distribution*; Jang, Gu & Poole (2017), *Categorical
  Reparameterization with Gumbel-Softmax*.
* Kool, van Hoof & Welling (2019), *Stochastic Beams and Where to Find Them: The Gumbel-Top-k
  Trick for Sampling Sequences Without Replacement*, ICML (eq. 8-10 and Appendix B: the
  numerically stable form of :func:`gumbel_with_max`).
* Mächler (2012), *Accurately Computing log(1 - exp(-|a|))* (:func:`log1mexp`).
* Efraimidis & Spirakis (2006), *Weighted random sampling with a reservoir*
  (:func:`weighted_reservoir`).
* Paulus, Maddison & Krause (2021), *Rao-Blackwellizing the Straight-Through Gumbel-Softmax
  Gradient Estimator* (:func:`gumbel_given_argmax`, :func:`gumbel_rao`).
"""

from __future__ import annotations

import math
from numbers import Real

import torch

from softmaxbook._validate import (
    as_float_tensor,
    check_generator,
    check_dim,
    check_int,
    check_no_nan,
    check_no_posinf,
    check_positive_number,
)
from softmaxbook.softmax import _any, _on_plain, _plain, _wrapped
from softmaxbook.softmax import logsumexp as _lse

# Value checks look through torch.func's wrappers, so that the functions work under vmap.
check_no_nan = _on_plain(check_no_nan)
check_no_posinf = _on_plain(check_no_posinf)

__all__ = [
    "sample_gumbel",
    "log1mexp",
    "truncated_gumbel",
    "gumbel_with_max",
    "gumbel_max",
    "gumbel_softmax",
    "gumbel_topk",
    "plackett_luce_log_prob",
    "weighted_reservoir",
    "gumbel_given_argmax",
    "gumbel_rao",
]

_LN2 = math.log(2.0)


# ------------------------------------------------------------------------------------------------
# Standard Gumbel noise
# ------------------------------------------------------------------------------------------------
def _standard_gumbel(shape, dtype: torch.dtype, device, generator) -> torch.Tensor:
    """Standard Gumbel(0) noise of ``shape``, always finite. No argument checks (internal)."""
    # Half-precision uniforms are far too coarse (bfloat16 has 8 significant bits), so the noise is
    # drawn in float32 (float64 when that is what the caller works in) and cast at the end.
    work = torch.float64 if dtype == torch.float64 else torch.float32
    u = torch.rand(shape, dtype=work, device=device, generator=generator)
    info = torch.finfo(work)
    # Inverse CDF: G = -log(-log U) needs U in the OPEN interval (0, 1). torch.rand draws from
    # [0, 1), and U = 0 really happens: in float32 with probability 2^-24 per draw, i.e. about
    # 1.5 times in one 256 x 100000 batch, and -log(-log 0) = -inf (the NaNs and infs reported in
    # pytorch issues 22442, 22557, 41663 come from the same kind of zero draw in exponential_).
    # Clamping to [tiny, 1 - eps/2] keeps every draw inside (0, 1) -- 1 - eps/2 is the largest
    # float below 1, a guard for backends whose uniforms include 1 -- so that G is always finite:
    # in float32 it lies in [-4.47, 16.64] (-4.47 = -log(-log tiny) only where U = 0 was drawn;
    # torch.rand's other float32 values, multiples of 2^-24, give [-2.81, 16.64]; 16.64 is
    # -log(-log(1 - 2^-24))). The clamp moves only draws that were 0 (or 1), an event
    # of probability 2^-24 (float32) or 2^-53 (float64), which is also the scale of the Gumbel
    # tail that the grid of uniforms cannot represent anyway.
    u.clamp_(info.tiny, 1.0 - info.eps / 2)
    g = u.log_().neg_().log_().neg_()  # in place: -log(-log u), two passes fewer than out-of-place
    return g if g.dtype == dtype else g.to(dtype)


def _as_shape(shape, func: str) -> tuple[int, ...]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list, torch.Size)) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in shape
    ):
        raise TypeError(
            f"{func}: argument 'shape' must be an int or a tuple of ints, got {shape!r}"
        )
    if any(s < 0 for s in shape):
        raise ValueError(f"{func}: argument 'shape' must not have negative sizes, got {tuple(shape)}")
    return tuple(shape)


def sample_gumbel(shape, *, loc=0.0, generator=None, dtype=None, device=None) -> torch.Tensor:
    """Draw i.i.d. Gumbel samples with location ``loc`` and unit scale, by the inverse CDF.

    ``G = loc - log(-log U)`` with ``U`` uniform on the open interval (0, 1): the uniform draw is
    clamped away from 0 and 1 so that the result is **always finite** (a ``loc`` of ``-inf`` gives
    ``-inf``, meaning "impossible").

    Parameters
    ----------
    shape : int or tuple of int
        Shape of the result.
    loc : float or Tensor, default 0.0
        Location(s) ``mu``; a tensor must be broadcastable to ``shape``. ``-inf`` allowed, NaN and
        ``+inf`` are errors.
    generator : torch.Generator, optional
        Source of randomness (on the result's device).
    dtype : torch.dtype, optional
        Floating dtype of the result; default ``loc.dtype`` for a tensor ``loc``, else
        ``torch.get_default_dtype()``. The noise is drawn in float32 (float64 for float64) and
        cast, so float16/bfloat16 results are not coarser than the dtype itself.
    device : torch.device or str, optional
        Device of the result; default ``loc.device`` for a tensor ``loc``, else the CPU.

    Returns
    -------
    Tensor of shape ``shape``.

    Notes
    -----
    In float32 the draws lie in [-2.81, 16.64], and are -4.47 where the uniform was 0 (probability
    2^-24, clamped to the smallest normal float): the grid of float32 uniforms (multiples of
    2^-24) cannot represent the tails beyond (probability about 6e-8 each); in float64 the cut is
    at probability ~1e-16.
    Reference: Gumbel (1954); Maddison, Tarlow & Minka (2014).
    """
    func = "sample_gumbel"
    shape = _as_shape(shape, func)
    if isinstance(loc, torch.Tensor):
        as_float_tensor(loc, "loc", func, allow_empty=True)
        check_no_nan(loc, "loc", func)
        check_no_posinf(loc, "loc", func)
        if dtype is None:
            dtype = loc.dtype
        if device is None:
            device = loc.device
        elif torch.device(device) != loc.device:
            raise ValueError(
                f"{func}: argument 'device' is {torch.device(device)} but 'loc' is on {loc.device}"
            )
        try:
            target = torch.broadcast_shapes(loc.shape, shape)
        except RuntimeError:
            target = None
        if target != torch.Size(shape):
            raise ValueError(
                f"{func}: argument 'loc' of shape {tuple(loc.shape)} does not broadcast to "
                f"'shape' {shape}"
            )
    elif isinstance(loc, Real) and not isinstance(loc, bool):
        loc = float(loc)
        if math.isnan(loc) or loc == math.inf:
            raise ValueError(f"{func}: argument 'loc' must be finite or -inf, got {loc}")
    else:
        raise TypeError(f"{func}: argument 'loc' must be a number or a tensor, got {type(loc).__name__}")
    if dtype is None:
        dtype = torch.get_default_dtype()
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{func}: argument 'dtype' must be a floating torch.dtype, got {dtype!r}")
    device = torch.device("cpu") if device is None else torch.device(device)
    check_generator(generator, device, func)
    g = _standard_gumbel(shape, dtype, device, generator)
    if isinstance(loc, torch.Tensor):
        return g + loc.to(dtype) if _wrapped(loc) else g.add_(loc.to(dtype))
    return g.add_(loc) if loc != 0.0 else g


# ------------------------------------------------------------------------------------------------
# log(1 - exp(x)), truncated Gumbels, Gumbels with a given maximum
# ------------------------------------------------------------------------------------------------
def _log1mexp(x: torch.Tensor) -> torch.Tensor:
    # Mächler (2012): for x close to 0, exp(x) is close to 1 and 1 - exp(x) cancels, so use
    # expm1, which is exact there; for x far below 0, exp(x) is tiny and log1p is exact. The
    # switch at -log 2 is where both are accurate.
    near = x > -_LN2
    # The "double where": each branch is fed only the inputs it is used for (and a harmless -1
    # elsewhere). torch.where passes a zero gradient to the branch not taken, but 0 times an
    # infinite local derivative is NaN: log1p(-exp(x)) at x = -1e-20 is log1p(-1) = -inf, and
    # its derivative is infinite there, which made the gradient of log1mexp(-1e-20) NaN
    # although the exact one, -1/expm1(-x), is a finite -1e20 (issue 17).
    x_near = torch.where(near, x, -1.0)
    x_far = torch.where(near, -1.0, x)
    return torch.where(near, torch.log(-torch.expm1(x_near)), torch.log1p(-torch.exp(x_far)))


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """``log(1 - exp(x))`` for ``x <= 0``, accurate for every ``x`` (Mächler 2012).

    The naive form loses all digits near ``x = 0`` (``1 - exp(-1e-20)`` is 0 in float64) and
    ``log(-expm1(x))`` loses them for very negative ``x``; this picks the accurate branch.
    ``log1mexp(0) = -inf`` and ``log1mexp(-inf) = 0``.

    Parameters
    ----------
    x : Tensor, any shape, every entry ``<= 0`` (``-inf`` allowed).

    Returns
    -------
    Tensor of the same shape and dtype.
    """
    func = "log1mexp"
    as_float_tensor(x, "x", func, allow_empty=True)
    check_no_nan(x, "x", func)
    if _any(x > 0):
        raise ValueError(f"{func}: argument 'x' must be <= 0 everywhere, got max "
                         f"{_plain(x).max().item()}")
    return _log1mexp(x)


def _softplus(v: torch.Tensor) -> torch.Tensor:
    # log(1 + e^v) written as max(v, 0) + log1p(e^{-|v|}): exact for every v, +inf -> +inf and
    # -inf -> 0. (F.softplus returns v itself above its threshold of 20, an error of up to 2e-9.)
    # torch.maximum splits the gradient at a tie (1/2 each), so the derivative at v = 0 is the
    # exact sigmoid(0) = 1/2 (relu would give 0 there, abs has derivative 0 at 0).
    return torch.maximum(v, torch.zeros_like(v)) + torch.log1p(torch.exp(-v.abs()))


def _check_loc(x, name: str, func: str, allow_empty: bool = False) -> torch.Tensor:
    as_float_tensor(x, name, func, allow_empty=allow_empty)
    check_no_nan(x, name, func)
    check_no_posinf(x, name, func)
    return x


def truncated_gumbel(loc: torch.Tensor, upper: torch.Tensor, *, generator=None) -> torch.Tensor:
    """Sample ``Gumbel(loc)`` conditioned to be ``<= upper``, elementwise.

    The truncated CDF is ``F(g) = exp(exp(loc - upper) - exp(loc - g))`` for ``g <= upper``; its
    inverse applied to a uniform ``U`` equals ``-log(exp(-upper) + exp(-G))`` with
    ``G = loc - log(-log U)`` a plain Gumbel draw (Maddison et al. 2014; Kool et al. 2019, eq. 22).
    We compute it as ``-logaddexp(-upper, -G)``, which never overflows and is ``<= upper`` exactly.

    Parameters
    ----------
    loc : Tensor
        Locations; ``-inf`` (impossible) gives ``-inf``. NaN/``+inf`` are errors.
    upper : Tensor
        Truncation points, broadcastable against ``loc``. ``+inf`` means no truncation; ``-inf``
        gives ``-inf`` (the limit). NaN is an error.
    generator : torch.Generator, optional

    Returns
    -------
    Tensor of shape ``broadcast(loc.shape, upper.shape)`` and the promoted dtype of both.
    """
    func = "truncated_gumbel"
    _check_loc(loc, "loc", func, allow_empty=True)
    as_float_tensor(upper, "upper", func, allow_empty=True)
    check_no_nan(upper, "upper", func)
    if upper.device != loc.device:
        raise ValueError(
            f"{func}: argument 'upper' is on {upper.device} but 'loc' is on {loc.device}"
        )
    try:
        shape = torch.broadcast_shapes(loc.shape, upper.shape)
    except RuntimeError:
        raise ValueError(
            f"{func}: argument 'upper' of shape {tuple(upper.shape)} does not broadcast against "
            f"'loc' of shape {tuple(loc.shape)}"
        ) from None
    check_generator(generator, loc.device, func)
    dtype = torch.promote_types(loc.dtype, upper.dtype)
    g = _standard_gumbel(shape, dtype, loc.device, generator)
    g = g + loc.to(dtype) if _wrapped(loc) else g.add_(loc.to(dtype))
    # Naively phi - log(exp(phi - T) - log U): exp(phi - T) overflows once phi - T > 88 (float32)
    # and the result becomes -inf instead of ~T. With G a Gumbel(phi) draw the same number is
    # -log(e^{-T} + e^{-G}), i.e. -logaddexp(-T, -G), which torch evaluates as
    # max + log1p(exp(-|diff|)): no overflow, and the result is <= T exactly since log1p(.) >= 0.
    return torch.logaddexp(-upper.to(dtype), -g).neg_()


def _keepdim_maximum(maximum: torch.Tensor, loc: torch.Tensor, func: str) -> torch.Tensor:
    """Return ``maximum`` with a trailing dimension of size 1, checking its shape against loc."""
    batch = loc.shape[:-1]
    if maximum.dim() >= 1 and maximum.shape[-1] == 1:
        m = maximum
    elif maximum.shape == batch:
        m = maximum.unsqueeze(-1)
    elif maximum.dim() == 0:
        m = maximum.reshape(1)
    else:
        raise ValueError(
            f"{func}: argument 'maximum' of shape {tuple(maximum.shape)} does not fit 'loc' of "
            f"shape {tuple(loc.shape)}: give one maximum per row, of shape {tuple(batch)} or "
            f"{tuple(batch) + (1,)} (the maximum is over the last dimension of 'loc')"
        )
    try:
        torch.broadcast_shapes(m.shape, loc.shape)
    except RuntimeError:
        raise ValueError(
            f"{func}: argument 'maximum' of shape {tuple(maximum.shape)} does not broadcast "
            f"against 'loc' of shape {tuple(loc.shape)} (with a trailing dimension of size 1)"
        ) from None
    return m


def gumbel_with_max(loc: torch.Tensor, maximum: torch.Tensor, *, generator=None,
                    return_argmax: bool = False):
    """Sample Gumbels ``G_i ~ Gumbel(loc_i)`` over the last dimension, conditioned on ``max_i G_i = maximum``.

    We draw unconditioned Gumbels ``G_i`` with maximum ``Z`` and map each through the monotone
    function ``G~_i = -log(exp(-T) - exp(-Z) + exp(-G_i))`` (``T = maximum``), i.e.
    ``F^{-1}_{loc_i, T}(F_{loc_i, Z}(G_i))`` with ``F_{loc, T}`` the CDF of a Gumbel truncated at
    ``T``. The argmax keeps its place and becomes exactly ``T``; every other entry is a Gumbel
    truncated at ``T`` (Kool et al. 2019, eq. 23 and Appendix B). This is the step that stochastic
    beam search uses to pass a parent's perturbed log-probability to its children.

    Stable form (Kool et al. 2019, Appendix B): with
    ``v = T - G_i + log1mexp(G_i - Z)`` we have ``exp(-T) - exp(-Z) + exp(-G_i) = exp(-T)(1 + e^v)``
    so ``G~_i = T - softplus(v)``.

    Parameters
    ----------
    loc : Tensor of shape ``(..., n)``
        Locations; ``-inf`` entries (impossible) come out as ``-inf``. A row that is all ``-inf``
        with a finite maximum is an error (no Gumbels can have that maximum).
    maximum : Tensor of shape ``(...)`` or ``(..., 1)``
        The required maximum ``T`` of each row; broadcastable against ``loc``'s batch dims.
        ``-inf`` gives a row of ``-inf``; NaN and ``+inf`` are errors.
    generator : torch.Generator, optional

    return_argmax : bool, default False
        Also return the index of the maximum of each row.

    Returns
    -------
    Tensor of shape ``broadcast(loc.shape, maximum_keepdim.shape)``, promoted dtype; its max
    over the last dimension equals ``maximum`` exactly. With ``return_argmax=True``, the pair
    ``(values, argmax)``, ``argmax`` a LongTensor of the batch shape: the entry that is the
    maximum by construction (the argmax of the unconditioned Gumbels, which the monotone map
    keeps in place; 0 for a row whose ``maximum`` is ``-inf``).

    Notes
    -----
    Ties in the output. When ``T`` lies far below the unconditioned maximum ``Z``, the map
    squeezes the top of a row towards ``T``, and in float32 entries near the top can round to
    exactly ``T``: ``values.argmax(-1)`` then names the first of the tied entries, which need
    not be the sampled maximum (``tests/test_gumbel.py`` builds such rows and counts them). Use
    ``return_argmax=True`` when the identity of the maximum matters (e.g. the winner of a
    Gumbel-max sample with a given maximum); float64 makes such ties far rarer.
    """
    func = "gumbel_with_max"
    if not isinstance(return_argmax, bool):
        raise TypeError(f"{func}: argument 'return_argmax' must be a bool, got "
                        f"{type(return_argmax).__name__}")
    _check_rows(loc, "loc", func, what="items")
    check_no_nan(loc, "loc", func)
    check_no_posinf(loc, "loc", func)
    as_float_tensor(maximum, "maximum", func, allow_empty=True)
    check_no_nan(maximum, "maximum", func)
    check_no_posinf(maximum, "maximum", func)
    if maximum.device != loc.device:
        raise ValueError(
            f"{func}: argument 'maximum' is on {maximum.device} but 'loc' is on {loc.device}"
        )
    check_generator(generator, loc.device, func)
    t = _keepdim_maximum(maximum, loc, func)
    dtype = torch.promote_types(loc.dtype, maximum.dtype)
    t = t.to(dtype)
    shape = torch.broadcast_shapes(t.shape, loc.shape)
    g = _standard_gumbel(shape, dtype, loc.device, generator)
    g = g + loc.to(dtype) if _wrapped(loc) else g.add_(loc.to(dtype))
    z = g.amax(dim=-1, keepdim=True)
    t_dead = t == -math.inf
    bad = _plain((z == -math.inf) & ~t_dead)
    if _any(bad):
        row = tuple(bad.squeeze(-1).nonzero()[0].tolist()) if bad.dim() > 1 else ()
        raise ValueError(
            f"{func}: argument 'loc' has a row with no possible item (all -inf) at batch index "
            f"{row} but a finite 'maximum'; no Gumbels can have that maximum"
        )
    t_safe = torch.where(t_dead, torch.zeros_like(t), t)
    z_safe = torch.where(z == -math.inf, torch.zeros_like(z), z)
    d = g - z_safe  # <= 0; exactly 0 at the argmax
    is_max = d == 0
    # log1mexp(0) = -inf would make v = -inf (fine forwards: softplus(-inf) = 0, result T) but its
    # gradient is inf * 0 = NaN; the argmax is overwritten with T below, so feed it a dummy -1.
    d_safe = torch.where(is_max, torch.full_like(d, -1.0), d)
    # Naively -log(e^{-T} - e^{-Z} + e^{-G}): e^{-G} overflows for G < -88 (float32), and
    # e^{-T} - e^{-Z} cancels catastrophically when T ~ Z. The stable form: v = T - G + log(1 -
    # e^{G - Z}), where log(1 - e^{G-Z}) is log1mexp (G - Z near 0 is exactly where 1 - e^{G-Z}
    # loses every digit), and then G~ = T - softplus(v), each piece bounded.
    v = t_safe - g + _log1mexp(d_safe)
    out = t_safe - _softplus(v)
    out = torch.where(is_max, t_safe.expand_as(out), out)
    # G = -inf (impossible item): d = -inf, log1mexp(-inf) = 0, v = +inf, softplus = +inf -> -inf.
    out = torch.where(t_dead, torch.full_like(out, -math.inf), out)
    if return_argmax:
        # the argmax of the unconditioned draw: exact, while out may hold rounded ties at T
        return out, g.detach().argmax(dim=-1)
    return out


# ------------------------------------------------------------------------------------------------
# Gumbel-max, Gumbel-softmax, Gumbel-top-k, Plackett-Luce
# ------------------------------------------------------------------------------------------------
def _check_rows(x, name: str, func: str, what: str = "classes") -> torch.Tensor:
    """A floating tensor with a last dimension of at least one entry. An empty *batch* (a zero
    among the leading dimensions, e.g. shape ``(0, n)``) is fine and gives an empty result; an
    empty *row* (last dimension 0) has nothing to sample from and is an error."""
    as_float_tensor(x, name, func, allow_empty=True)
    if x.dim() == 0:
        raise ValueError(
            f"{func}: argument '{name}' is a 0-d tensor; it needs a last dimension of {what}"
        )
    if x.shape[-1] == 0:
        raise ValueError(
            f"{func}: argument '{name}' has empty rows (shape {tuple(x.shape)}, last dimension 0): "
            f"there are no {what} to sample from"
        )
    return x


def _check_logits(logits, func: str) -> torch.Tensor:
    return _check_rows(logits, "logits", func)


def _explain_bad_rows(logits: torch.Tensor, func: str, k: int | None = None) -> None:
    """Called after a cheap check on the perturbed top values failed: find and report the cause."""
    check_no_nan(logits, "logits", func)
    check_no_posinf(logits, "logits", func)
    logits = _plain(logits)
    possible = (logits > -math.inf).sum(-1)
    short = possible < (1 if k is None else k)
    if _any(short):
        row = tuple(short.nonzero()[0].tolist()) if short.dim() >= 1 else ()
        where = f"the row at batch index {row} of 'logits'" if row else "'logits'"
        if k is None:
            where = f"at batch index {row}" if row else ""
            raise ValueError(
                f"{func}: argument 'logits' has a row with no possible class (all -inf) {where}"
                .rstrip()
            )
        raise ValueError(
            f"{func}: argument 'k'={k} is larger than the number of possible items "
            f"({int(possible[row])}, the finite logits) in {where}"
        )


def _check_top_values(values: torch.Tensor, logits: torch.Tensor, func: str,
                      k: int | None = None) -> None:
    # torch.max/topk put NaN first and +inf is the largest value, so the k top perturbed values of
    # a row are all finite iff the row has no NaN, no +inf and at least k finite logits. Checking
    # these k values instead of the whole input keeps validation off the hot path.
    if _any(~torch.isfinite(values)):
        _explain_bad_rows(logits, func, k)


def _at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """float16/bfloat16 logits as float32 (others unchanged), for forming ``logits + G``.

    In a 16-bit dtype the perturbed scores round to a coarse grid (bfloat16: spacing 0.0625 near
    10, 2 near 300), ties are frequent, and max/topk give a tie to the first index: bfloat16
    logits [10, 10] drew class 1 in 49.1 % and [100, 100] in 43.8 % of 400 000 rows, float16
    [100, 100] in 49.3 % (independent review). In float32 these ties have probability ~1e-7."""
    return logits.to(torch.float32) if logits.dtype in (torch.float16, torch.bfloat16) else logits


def _shift_large_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(``x`` shifted by its row maximum, the shift) where a float32 row's maximum exceeds 256 in
    size; else (``x``, None).

    ``logits + G`` rounds to the spacing of float32 at the logits' size: 0.0625 near 1e6, where
    Gumbel noise of spread ~1 then ties often and max/topk give a tie to the first index
    (float32 [1e6, 1e6] drew class 0 in 50.8 % of rows; independent review). After the shift
    the top logits are near 0, where the spacing is ~1e-7; ``x - max`` is exact for the logits
    within a factor 2 of the maximum (Sterbenz), the ones that can win. Below 256 the spacing
    is <= 3e-5 and the tie probability ~1e-5 at most, so the extra pass is skipped. float64 has
    spacing 1e-10 at 1e6 and is left alone."""
    if x.dtype != torch.float32 or x.numel() == 0:
        return x, None
    top = x.detach().amax(dim=-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros((), dtype=top.dtype,
                                                             device=top.device))
    if not _any(top.abs() > 256.0):
        return x, None
    return x - top, top


def gumbel_max(logits: torch.Tensor, *, generator=None) -> torch.Tensor:
    """Draw one categorical sample per row by the Gumbel-max trick.

    ``argmax_i (logits_i + G_i)`` with ``G_i`` i.i.d. standard Gumbel is distributed as
    ``Categorical(softmax(logits))`` (Gumbel 1954; Maddison et al. 2014, 2017). Each class needs
    its **own** Gumbel: a single ``G`` shared by all classes always returns ``argmax logits``.

    Parameters
    ----------
    logits : Tensor of shape ``(..., n)``
        Unnormalised log-probabilities over the last dimension; ``-inf`` means impossible. Each
        row needs at least one finite entry. float16/bfloat16 logits are perturbed in float32
        (in their own dtype, rounding ties would favour the first class).
    generator : torch.Generator, optional

    Returns
    -------
    LongTensor of shape ``(...)``: the sampled class per row.
    """
    func = "gumbel_max"
    _check_logits(logits, func)
    check_generator(generator, logits.device, func)
    x, _ = _shift_large_rows(_at_least_float32(logits))
    perturbed = _standard_gumbel(x.shape, x.dtype, x.device, generator)
    perturbed = perturbed + x if _wrapped(x) else perturbed.add_(x)
    values, idx = perturbed.max(dim=-1)
    _check_top_values(values, logits, func)
    return idx


def _check_tau(tau, dtype: torch.dtype, func: str):
    """``tau`` as a float, or as a tensor when it requires grad (then it is differentiated).

    It must be finite and > 0 and, in the dtype the sample is computed in, a normal number: a
    float32 ``tau`` of 1e39 rounds to inf and one of 1e-39 is subnormal (dividing by either
    gave NaN samples). A tensor ``tau`` must have one element."""
    if isinstance(tau, torch.Tensor):
        as_float_tensor(tau, "tau", func)
        if tau.numel() != 1:
            raise TypeError(f"{func}: argument 'tau' must be a number or a tensor with one "
                            f"element, got a tensor of shape {tuple(tau.shape)}")
    value = check_positive_number(tau.detach() if isinstance(tau, torch.Tensor) else tau,
                                  "tau", func)
    info = torch.finfo(dtype)
    if not info.tiny <= value <= info.max:
        raise ValueError(
            f"{func}: argument 'tau'={value:g} cannot be represented in {dtype}, the dtype "
            f"the sample is computed in (normal numbers lie in [{info.tiny:g}, {info.max:g}]); "
            "use float64 logits for such a temperature"
        )
    if isinstance(tau, torch.Tensor) and tau.requires_grad:
        return value, tau.reshape(())
    return value, None


def gumbel_softmax(logits: torch.Tensor, tau, *, hard: bool = False, dim: int = -1,
                   generator=None) -> torch.Tensor:
    """Gumbel-softmax / Concrete sample: ``softmax((logits + G) / tau)`` along ``dim``.

    A reparameterised, differentiable relaxation of a one-hot categorical sample (Maddison, Mnih
    & Teh 2017; Jang, Gu & Poole 2017). As ``tau -> 0`` the sample tends to
    ``one_hot(argmax(logits + G))`` -- a *sample* from ``softmax(logits)`` -- and its gradient
    estimates are biased for every ``tau > 0``.

    With ``hard=True`` the forward value is exactly ``one_hot(argmax(logits + G))`` and the
    gradient is that of the soft sample (the straight-through estimator, Bengio et al. 2013;
    Jang et al. 2017).

    Parameters
    ----------
    logits : Tensor of shape ``(..., n, ...)``
        ``-inf`` means impossible (probability 0 in every sample). Each slice along ``dim``
        needs a finite entry.
    tau : float > 0, or a one-element tensor
        Temperature. A tensor that requires grad is differentiated (as in PyTorch's
        ``RelaxedOneHotCategorical``): ``d sample / d tau = -sample * (s - <s, sample>) / tau``
        with ``s = (logits + G) / tau``. It must be a normal number of the dtype the sample is
        computed in (float32 for float16/bfloat16 logits); outside that range (float32: below
        1.2e-38 or above 3.4e38) a ``ValueError`` names it, where the division would give NaN.
    hard : bool, default False
    dim : int, default -1
        The dimension of the classes.
    generator : torch.Generator, optional

    Returns
    -------
    Tensor of the shape and dtype of ``logits``; each slice along ``dim`` sums to 1.

    Notes
    -----
    Where dividing by ``tau`` could overflow (a small ``tau`` and large perturbed logits), and
    for a tensor ``tau``, the perturbed logits are first shifted by their (detached) maximum,
    which changes nothing mathematically (softmax is shift-invariant): the limit ``tau -> 0``
    is reached as a one-hot vector, not as NaN. float16 and bfloat16 logits are computed in
    float32 and the sample is cast back.
    """
    func = "gumbel_softmax"
    _check_logits(logits, func)
    dim = check_dim(logits, dim, "logits", func)
    dtype = logits.dtype
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    tau_value, tau_tensor = _check_tau(tau, work, func)
    if not isinstance(hard, bool):
        raise TypeError(f"{func}: argument 'hard' must be a bool, got {type(hard).__name__}")
    check_generator(generator, logits.device, func)
    x = logits if dtype == work else logits.to(work)
    # float32 rows far from 0 shifted by their maximum, as in gumbel_max: else logits + G rounds
    # to the spacing there and hard=True gave ties to the first class (float32 [1e6, 1e6]:
    # class 0 in 50.9 % of 200 000 rows, [1e7, 1e7] in 62.0 %; cold review R5). softmax is
    # shift-invariant and the shift is detached, so only the rounding changes.
    x = _shift_large_rows(x.movedim(dim, -1))[0].movedim(-1, dim)
    noise = _standard_gumbel(x.shape, work, x.device, generator)
    # logits + G is formed out of place when autograd must see logits; else the noise buffer is
    # reused, as is the shifted copy below.
    grad = x.requires_grad or tau_tensor is not None or _wrapped(x)
    perturbed = noise + x if x.requires_grad or _wrapped(x) else noise.add_(x)
    top, idx = perturbed.detach().max(dim=dim, keepdim=True)
    _check_top_values(top, logits.movedim(dim, -1), func)
    # Shift by the maximum (detached: softmax is shift-invariant, so its gradient is exactly 0),
    # then divide: every entry is <= 0, the maximal one exactly 0, so no tau makes it overflow.
    # The shift costs a pass over the logits, so a float tau takes it only where dividing could
    # overflow (|logits + G| / tau near the dtype's largest number); torch.softmax shifts too.
    if tau_tensor is not None or (
            tau_value < 1.0 and top.numel() > 0
            and _any(top.abs() > tau_value * torch.finfo(work).max * 1e-6, unreadable=True)):
        z = perturbed - top if grad else perturbed.sub_(top)
    else:
        z = perturbed
    if tau_tensor is not None:
        # An impossible class has z = -inf, and d(z / tau)/d tau = -z / tau^2 = inf there; its
        # zero softmax gradient times that is NaN. Such entries are divided as 0 and put back.
        dead = torch.isneginf(z)
        z = torch.where(dead, -math.inf, torch.where(dead, 0.0, z) / tau_tensor.to(work))
    elif tau_value != 1.0:
        z = z / tau_value if grad else z.div_(tau_value)
    soft = torch.softmax(z, dim=dim)
    if hard:
        one_hot = torch.zeros_like(soft).scatter_(dim, idx, 1.0)
        # Straight-through: forward value one_hot exactly (soft - soft.detach() is exactly 0,
        # unlike one_hot - soft.detach() + soft, which can round to 0.9999999), backward the
        # soft gradient.
        soft = one_hot + (soft - soft.detach())
    return soft if soft.dtype == dtype else soft.to(dtype)


def gumbel_topk(logits: torch.Tensor, k: int, *, generator=None,
                return_perturbed: bool = False):
    """Sample ``k`` distinct classes per row without replacement, in sampled order (Gumbel-top-k).

    The indices of the ``k`` largest ``logits_i + G_i`` (in decreasing order) are distributed as
    ``k`` successive draws without replacement from ``softmax(logits)``: the Plackett-Luce
    distribution whose log-probability is :func:`plackett_luce_log_prob` (Vieira 2014; Kool, van
    Hoof & Welling 2019, eq. 8-10).

    Parameters
    ----------
    logits : Tensor of shape ``(..., n)``
        ``-inf`` means impossible: such items are never drawn, so ``k`` may not exceed the number
        of finite logits in any row. float16/bfloat16 logits are perturbed in float32 (in their
        own dtype, rounding ties would favour the first index).
    k : int, ``1 <= k <= n``
    generator : torch.Generator, optional

    return_perturbed : bool, default False
        Also return the perturbed logits ``logits_i + G_i`` of the drawn classes (decreasing),
        differentiable in ``logits``; e.g. the ``(k+1)``-th of them is the threshold of the
        estimators that stochastic beam search uses (Kool et al. 2019, section 4.2).

    Returns
    -------
    LongTensor of shape ``(..., k)``: the drawn classes, first draw first. With
    ``return_perturbed=True``, the pair ``(indices, perturbed)``, ``perturbed`` of shape
    ``(..., k)`` in the dtype of ``logits``.
    """
    func = "gumbel_topk"
    if not isinstance(return_perturbed, bool):
        raise TypeError(f"{func}: argument 'return_perturbed' must be a bool, got "
                        f"{type(return_perturbed).__name__}")
    _check_logits(logits, func)
    n = logits.shape[-1]
    k = check_int(k, "k", func, minimum=1)
    if k > n:
        raise ValueError(
            f"{func}: argument 'k'={k} is larger than the number of items n={n} (last dim of 'logits')"
        )
    check_generator(generator, logits.device, func)
    x, shift = _shift_large_rows(_at_least_float32(logits))
    perturbed = _standard_gumbel(x.shape, x.dtype, x.device, generator)
    perturbed = perturbed + x if _wrapped(x) else perturbed.add_(x)
    values, idx = perturbed.topk(k, dim=-1, largest=True, sorted=True)
    if shift is not None:
        values = values + shift  # the perturbed logits themselves, as documented
    _check_top_values(values, logits, func, k)
    return (idx, values.to(logits.dtype)) if return_perturbed else idx


def plackett_luce_log_prob(logits: torch.Tensor, ordered: torch.Tensor) -> torch.Tensor:
    """Log-probability of an ordered draw without replacement (Plackett-Luce), accurate in
    relative terms, also where it is tiny.

    ``log P(i_1, ..., i_k) = sum_j [ logits_{i_j} - logsumexp_{l not in {i_1..i_{j-1}}} logits_l ]``
    (Plackett 1975; Luce 1959; Kool et al. 2019, eq. 9): the law of :func:`gumbel_topk`.

    The remaining mass at step ``j`` is never formed as "total minus what was drawn" (that
    subtraction cancels catastrophically once the drawn items hold almost all the mass). Each
    factor is computed as ``-softplus(o_j - logits_{i_j})``, ``o_j`` the logsumexp of the items
    left after draw ``j`` (the later draws, by a reversed cumulative logsumexp, and the items
    never drawn), i.e. ``-log1p(sum_l exp(logits_l - logits_{i_j}))``: for logits
    ``[40, 0, -40]`` and order ``[0, 1]`` it returns ``-8.50e-18``, where
    ``logits_{i_j} - logsumexp`` rounds the first factor to 0 and gives ``-4.25e-18``. The
    relative error is about the machine epsilon times the largest logit gap involved (rounding
    ``logits_l - logits_{i_j}``): measured against mpmath, at most 1 ulp for gaps below 1 and
    33 ulp for gaps up to 130.

    Parameters
    ----------
    logits : Tensor of shape ``(..., n)``
        ``-inf`` means impossible (a tuple containing such an item has log-probability ``-inf``).
    ordered : LongTensor of shape ``(..., k)``, ``1 <= k <= n``
        Distinct indices in ``[0, n)`` per row, first draw first. Batch dimensions broadcast
        against those of ``logits``.

    Returns
    -------
    Tensor of shape ``broadcast(logits.shape[:-1], ordered.shape[:-1])``, differentiable in
    ``logits``.
    """
    func = "plackett_luce_log_prob"
    _check_logits(logits, func)
    check_no_nan(logits, "logits", func)
    check_no_posinf(logits, "logits", func)
    if not isinstance(ordered, torch.Tensor):
        raise TypeError(f"{func}: argument 'ordered' must be a torch.Tensor, got {type(ordered).__name__}")
    if ordered.dtype.is_floating_point or ordered.dtype.is_complex or ordered.dtype == torch.bool:
        raise TypeError(f"{func}: argument 'ordered' must be an integer tensor, got {ordered.dtype}")
    if ordered.dim() == 0:
        raise ValueError(f"{func}: argument 'ordered' is a 0-d tensor; it needs a last dimension of draws")
    if ordered.device != logits.device:
        raise ValueError(
            f"{func}: argument 'ordered' is on {ordered.device} but 'logits' is on {logits.device}"
        )
    n, k = logits.shape[-1], ordered.shape[-1]
    if not 1 <= k <= n:
        raise ValueError(
            f"{func}: argument 'ordered' has k={k} draws per row; it needs 1 <= k <= n={n}"
        )
    if _any((ordered < 0) | (ordered >= n)):
        raise ValueError(
            f"{func}: argument 'ordered' has an index outside [0, {n}) "
            f"(min {_plain(ordered).min().item()}, max {_plain(ordered).max().item()})"
        )
    try:
        batch = torch.broadcast_shapes(logits.shape[:-1], ordered.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"{func}: the batch shapes of 'logits' {tuple(logits.shape[:-1])} and 'ordered' "
            f"{tuple(ordered.shape[:-1])} do not broadcast"
        ) from None
    idx = ordered.long().expand(*batch, k)
    srt = idx.sort(dim=-1).values
    if k > 1 and _any(srt[..., 1:] == srt[..., :-1]):
        raise ValueError(f"{func}: argument 'ordered' repeats an index within a row; draws without "
                         "replacement are distinct")
    lg = logits.expand(*batch, n)
    chosen = lg.gather(-1, idx)  # (..., k)
    # A drawn item that is impossible makes the whole draw impossible: -inf. Such rows are
    # computed with 0 in its place and overwritten at the end, so that no -inf - (-inf) = NaN
    # (the value) and no 0 * inf (the gradient) appears.
    dead = torch.isneginf(chosen)
    dead_row = dead.any(-1)
    chosen = torch.where(dead, 0.0, chosen)
    # Each factor is written as log p_j = -log(1 + exp(o_j - x_{i_j})) = -softplus(o_j - x_{i_j}),
    # with o_j the logsumexp of the items still in play after draw j (the drawn items i_{j+1..k}
    # and those never drawn). x_{i_j} - logsumexp(R_j) gives the same number but only to an
    # absolute accuracy: for logits [40, 0, -40] and order [0, 1], logsumexp(R_1) = 40 + 4e-18
    # rounds to 40 and the first factor to 0 (review of the third edition); softplus(-40) keeps
    # the 4.2e-18, so every factor, hence the sum of these same-signed terms, is accurate to a
    # few ulp relative.
    # The items never drawn: logits with the k drawn ones masked out (-inf).
    drawn = torch.zeros(lg.shape, dtype=torch.bool, device=lg.device).scatter_(-1, idx, True)
    if k < n:
        # softmaxbook's logsumexp: an all -inf row (every undrawn item impossible) gives -inf
        # with a zero gradient; torch.logsumexp's gradient is NaN there (exp(-inf - (-inf))).
        rest = _lse(lg.masked_fill(drawn, -math.inf), dim=-1, keepdim=True)  # (..., 1)
    else:
        rest = torch.full_like(chosen[..., :1], -math.inf)  # nothing is never drawn
    # drawn_lse[j] = logsumexp(chosen[j:]), a reversed cumulative logsumexp; then
    # o_j = logaddexp(drawn_lse[j + 1], rest), and o_{k-1} = rest (for the last draw only the
    # never-drawn items remain; -inf when there are none, giving softplus(-inf) = 0).
    drawn_lse = chosen.flip(-1).logcumsumexp(-1).flip(-1)
    others = torch.cat([torch.logaddexp(drawn_lse[..., 1:], rest), rest], dim=-1)
    out = -_softplus(others - chosen).sum(-1)
    return torch.where(dead_row, -math.inf, out)


# ------------------------------------------------------------------------------------------------
# Weighted reservoir sampling (Efraimidis & Spirakis 2006) as Gumbel-top-k over a stream
# ------------------------------------------------------------------------------------------------
def _stream_chunk(item, position: int, func: str) -> torch.Tensor:
    """One item of the stream of :func:`weighted_reservoir` as a 1-D float tensor."""
    if isinstance(item, torch.Tensor):
        if not item.is_floating_point():
            raise TypeError(
                f"{func}: argument 'stream' yielded a tensor of dtype {item.dtype} at item "
                f"{position}; log-weights must be floating point"
            )
        if item.dim() > 1:
            raise ValueError(
                f"{func}: argument 'stream' yielded a tensor of shape {tuple(item.shape)} at "
                f"item {position}; each item must be a number, a 0-d or a 1-d tensor"
            )
        return _plain(item).detach().reshape(-1)
    if isinstance(item, Real) and not isinstance(item, bool):
        try:
            value = float(item)
        except OverflowError:  # an int such as 10**400: Python's message names no function
            raise ValueError(f"{func}: argument 'stream' yielded a number too large for float64 "
                             f"at item {position}; log-weights must be finite or -inf") from None
        return torch.tensor([value], dtype=torch.float64)
    raise TypeError(
        f"{func}: argument 'stream' yielded a {type(item).__name__} at item {position}; each "
        "item must be a log-weight (a number) or a 0-d or 1-d tensor of log-weights"
    )


def weighted_reservoir(stream, k: int, *, generator=None, return_keys: bool = False):
    """Sample ``k`` items without replacement from a stream in one pass, with memory for ``k``.

    The A-Res algorithm of Efraimidis & Spirakis (2006): item ``i`` of weight ``w_i`` gets the
    key ``U_i ** (1 / w_i)`` with ``U_i`` uniform, and the reservoir keeps the ``k`` items with the
    largest keys seen so far. The key is a monotone transform of a Gumbel-perturbed log-weight,
    ``-log(-log(U ** (1/w))) = log w - log(-log U)``, so the reservoir is Gumbel-top-k
    (:func:`gumbel_topk`) computed one item at a time, and its output, ordered by decreasing key,
    has the Plackett-Luce law of ``k`` draws without replacement from ``softmax(log w)``
    (Vieira 2014; Kool et al. 2019). We keep the Gumbel form: ``U ** (1/w)`` underflows to 0 for
    small weights (``0.5 ** 1e4`` is 0 in float64), where many keys tie and the order is lost.

    Parameters
    ----------
    stream : iterable
        Log-weights ``log w_i`` (unnormalised log-probabilities), consumed once, in order; e.g. a
        Python generator. Each item is a number (one log-weight), a 0-d tensor, or a 1-d tensor
        (a chunk of consecutive log-weights). ``-inf`` means impossible (weight 0, never drawn);
        NaN and ``+inf`` are errors.
    k : int >= 1
        Size of the reservoir; the stream must hold at least ``k`` finite log-weights.
    generator : torch.Generator, optional
        Source of the uniforms (a CPU generator): one uniform per item, in stream order, drawn
        as ``torch.rand(len(chunk), dtype=torch.float64)`` per chunk.
    return_keys : bool, default False
        Also return the keys ``log w_i - log(-log U_i)`` of the sampled items (float64).

    Returns
    -------
    LongTensor of shape ``(k,)``: the positions in the stream (counting from 0 across chunks) of
    the sampled items, largest key first. With ``return_keys=True``, the pair
    ``(positions, keys)``.

    Notes
    -----
    The keys are computed in float64 whatever the dtype of the items, on the CPU. Since
    ``torch.rand`` on a CPU generator draws the same numbers in one call or in several, the
    result equals ``gumbel_topk(torch.cat(chunks).double(), k)`` for the same generator state
    (``tests/test_gumbel.py`` checks it). Memory: the ``k`` kept items plus one chunk.
    Reference: Efraimidis & Spirakis (2006), *Weighted random sampling with a reservoir*, IPL
    97(5), algorithm A-Res; Vieira (2014); Kool, van Hoof & Welling (2019).
    """
    func = "weighted_reservoir"
    k = check_int(k, "k", func, minimum=1)
    if not isinstance(return_keys, bool):
        raise TypeError(f"{func}: argument 'return_keys' must be a bool, got "
                        f"{type(return_keys).__name__}")
    if isinstance(stream, torch.Tensor) or not hasattr(stream, "__iter__"):
        raise TypeError(
            f"{func}: argument 'stream' must be an iterable of log-weights (a generator, a list "
            f"of numbers or of 1-d tensors), got {type(stream).__name__}; for a tensor of "
            "log-weights use gumbel_topk"
        )
    check_generator(generator, "cpu", func)
    keys = torch.empty(0, dtype=torch.float64)
    positions = torch.empty(0, dtype=torch.long)
    seen = 0
    for number, item in enumerate(stream):
        x = _stream_chunk(item, number, func)
        if x.device.type != "cpu":
            raise ValueError(f"{func}: argument 'stream' yielded a tensor on {x.device} at item "
                             f"{number}; the reservoir works on the CPU")
        x = x.to(torch.float64)
        if _any(torch.isnan(x)) or _any(torch.isposinf(x)):
            what = "NaN" if _any(torch.isnan(x)) else "+inf"
            raise ValueError(
                f"{func}: argument 'stream' yielded {what} at item {number}; log-weights must be "
                "finite or -inf (impossible)"
            )
        # The Gumbel form of the key U^(1/w): log w + G, G = -log(-log U) (same noise as
        # gumbel_topk draws; -inf stays -inf and is never kept ahead of a possible item).
        key = _standard_gumbel(x.shape, torch.float64, x.device, generator).add_(x)
        keys = torch.cat([keys, key])
        positions = torch.cat([positions, torch.arange(seen, seen + x.numel())])
        seen += x.numel()
        if keys.numel() > k:
            # the k largest keys of (reservoir + chunk) are the k largest of the whole prefix
            keys, top = keys.topk(k)
            positions = positions[top]
    if seen == 0:
        raise ValueError(f"{func}: argument 'stream' was empty; there is nothing to sample")
    if seen < k:
        raise ValueError(f"{func}: argument 'k'={k} is larger than the number of items in the "
                         f"stream ({seen})")
    keys, order = keys.sort(descending=True)
    positions = positions[order]
    if _any(torch.isneginf(keys)):
        possible = int(torch.isfinite(keys).sum())
        raise ValueError(f"{func}: argument 'k'={k} is larger than the number of possible items "
                         f"(finite log-weights) in the stream ({possible})")
    return (positions, keys) if return_keys else positions


# ------------------------------------------------------------------------------------------------
# Gumbels conditioned on their argmax; the Gumbel-Rao gradient estimator (Paulus et al. 2020)
# ------------------------------------------------------------------------------------------------
def _index_tensor(index, batch: torch.Size, n: int, device, func: str) -> torch.Tensor:
    if not isinstance(index, torch.Tensor):
        raise TypeError(f"{func}: argument 'index' must be a torch.Tensor of class indices, got "
                        f"{type(index).__name__}")
    if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
        raise TypeError(f"{func}: argument 'index' must be an integer tensor, got {index.dtype}")
    if index.device != device:
        raise ValueError(f"{func}: argument 'index' is on {index.device} but 'logits' is on "
                         f"{device}")
    if index.shape != batch:
        raise ValueError(f"{func}: argument 'index' of shape {tuple(index.shape)} does not fit "
                         f"'logits' of shape {tuple(batch) + (n,)}: give one class per row, shape "
                         f"{tuple(batch)}")
    if _any((index < 0) | (index >= n)):
        raise ValueError(f"{func}: argument 'index' has a class outside [0, {n}) (min "
                         f"{_plain(index).min().item()}, max {_plain(index).max().item()})")
    return index.long()


def _given_argmax(x: torch.Tensor, index: torch.Tensor, generator) -> torch.Tensor:
    """Perturbed logits ``x + G`` conditioned on ``argmax = index``; ``x`` (..., n) has a finite
    entry at ``index`` in every row. No argument checks (internal)."""
    idx = index.unsqueeze(-1)
    # The maximum is Gumbel(logsumexp x), independent of which class attains it (the chapter's
    # eq. gumbel-max-joint); every other class is Gumbel(x_i) truncated at that maximum.
    top = _standard_gumbel(idx.shape, x.dtype, x.device, generator) + _lse(x, dim=-1, keepdim=True)
    g = _standard_gumbel(x.shape, x.dtype, x.device, generator) + x
    # -log(e^-T + e^-G) as in truncated_gumbel: never overflows, never above T; -inf stays -inf.
    others = torch.logaddexp(-top, -g).neg()
    return others.scatter(-1, idx, top)


def gumbel_given_argmax(logits: torch.Tensor, index: torch.Tensor, *,
                        generator=None) -> torch.Tensor:
    """Sample perturbed logits ``Z = logits + G`` conditioned on ``argmax_i Z_i = index``.

    Without the condition, ``argmax Z`` follows ``softmax(logits)`` and ``max Z`` is a Gumbel
    with location ``logsumexp(logits)``, independent of the argmax (Gumbel-max). So given the
    argmax ``D``, ``Z_D`` is a ``Gumbel(logsumexp(logits))`` and every other ``Z_i`` a
    ``Gumbel(logits_i)`` truncated at ``Z_D`` (:func:`truncated_gumbel`). Drawing ``D`` from the
    softmax and then ``Z`` given ``D`` is drawing ``Z`` (Maddison et al. 2014; Paulus et al.
    2020, Appendix). This is the step of the Gumbel-Rao estimator (:func:`gumbel_rao`).

    Parameters
    ----------
    logits : Tensor of shape ``(..., n)``
        ``-inf`` means impossible (its ``Z`` is ``-inf``); NaN and ``+inf`` are errors.
    index : LongTensor of shape ``(...)``
        The argmax to condition on, one class per row; its logit must be finite.
    generator : torch.Generator, optional

    Returns
    -------
    Tensor of the shape and dtype of ``logits`` (float16/bfloat16 are computed in float32 and
    cast back), with ``Z[..., index]`` the row maximum; the other entries are ``<=`` it.
    Gradients flow into ``logits`` through the location of the maximum and the truncations.
    """
    func = "gumbel_given_argmax"
    _check_rows(logits, "logits", func)
    check_no_nan(logits, "logits", func)
    check_no_posinf(logits, "logits", func)
    idx = _index_tensor(index, logits.shape[:-1], logits.shape[-1], logits.device, func)
    check_generator(generator, logits.device, func)
    dead = torch.isneginf(_plain(logits).gather(-1, idx.unsqueeze(-1)))
    if _any(dead):
        row = tuple(dead.squeeze(-1).nonzero()[0].tolist()) if dead.dim() > 1 else ()
        raise ValueError(f"{func}: argument 'index' names a class whose logit is -inf (at batch "
                         f"index {row}); an impossible class is never the argmax")
    x = _at_least_float32(logits)
    return _given_argmax(x, idx, generator).to(logits.dtype)


def gumbel_rao(logits: torch.Tensor, tau, *, samples: int = 10, generator=None,
               return_index: bool = False):
    """A one-hot categorical sample whose gradient is the Gumbel-Rao estimator.

    Forward: ``one_hot(D)`` with ``D = argmax(logits + G)``, a sample from ``softmax(logits)``,
    as ``gumbel_softmax(..., hard=True)`` (straight-through) gives it; ``D`` is the sample of
    :func:`gumbel_max` on the same generator (float32 rows far from 0 shifted by their maximum
    first, so that rounding gives no ties). Backward: where
    straight-through uses the Jacobian of ``softmax((logits + G) / tau)`` at the one ``G`` that
    produced ``D``, Gumbel-Rao averages it over ``samples`` draws of ``G`` conditioned on
    ``argmax(logits + G) = D`` (:func:`gumbel_given_argmax`), the noise held fixed:

    ``d/dlogits ~ (1/K) sum_j d softmax((logits + G_j) / tau) / d logits,  G_j ~ G | D``.

    Its expectation is that of straight-through (it is straight-through's conditional
    expectation given ``D``, Rao-Blackwellised over the noise), so it has the same bias, and
    its variance is never larger; with ``samples=1`` it has the same law as straight-through.
    Reference: Paulus, Maddison & Krause (2021), *Rao-Blackwellizing the Straight-Through
    Gumbel-Softmax Gradient Estimator*, ICLR (arXiv 2010.04838, 2020): the estimator
    they call GR-MC with K samples.

    Parameters
    ----------
    logits : Tensor of shape ``(..., n)``
        ``-inf`` means impossible; NaN and ``+inf`` are errors.
    tau : float > 0
        Temperature of the relaxation the gradient is taken through.
    samples : int >= 1, default 10
        Number ``K`` of conditional Gumbel draws averaged in the backward pass.
    generator : torch.Generator, optional
    return_index : bool, default False
        Also return ``D``, the sampled class per row.

    Returns
    -------
    Tensor of the shape and dtype of ``logits``: exactly one-hot rows (forward). With
    ``return_index=True``, the pair ``(one_hot, D)``.
    """
    func = "gumbel_rao"
    _check_logits(logits, func)
    dtype = logits.dtype
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    tau_value, tau_tensor = _check_tau(tau, work, func)
    if tau_tensor is not None:
        raise TypeError(f"{func}: argument 'tau' must not require grad (the estimator is a "
                        "gradient with respect to the logits only)")
    samples = check_int(samples, "samples", func, minimum=1)
    if not isinstance(return_index, bool):
        raise TypeError(f"{func}: argument 'return_index' must be a bool, got "
                        f"{type(return_index).__name__}")
    check_generator(generator, logits.device, func)
    x = logits if dtype == work else logits.to(work)
    # As in gumbel_max: a float32 row far from 0 is shifted by its maximum first, or logits + G
    # rounds to the spacing there (0.0625 near 1e6) and ties go to the first class (float32
    # [1e6, 1e6] gave class 0 in 50.7 % of 200 000 rows, [1e7, 1e7] in 61.9 %; cold review R5),
    # and the conditional noise below is rounded away in the same way. Same D as gumbel_max.
    plain, shift = _shift_large_rows(x.detach())
    if shift is not None:
        x = x - shift
    noise = _standard_gumbel(plain.shape, work, plain.device, generator)
    top, d = (noise + plain).max(dim=-1)
    _check_top_values(top, logits, func)
    # K conditional draws per row, the noise G = Z - logits held fixed (detached): a dead class
    # (-inf) gets G = 0, so logits + G stays -inf (not -inf - (-inf) = NaN).
    z = _given_argmax(plain.expand((samples,) + plain.shape), d.expand((samples,) + d.shape),
                      generator)
    dead = torch.isneginf(plain)
    g = torch.where(dead, 0.0, z - torch.where(dead, 0.0, plain))
    s = x + g
    # shift by the (detached) row maximum: softmax is shift-invariant, and nothing overflows
    s = (s - s.detach().amax(dim=-1, keepdim=True)) / tau_value
    soft = torch.softmax(s, dim=-1).mean(0)
    one_hot = torch.zeros_like(soft).scatter_(-1, d.unsqueeze(-1), 1.0)
    out = one_hot + (soft - soft.detach())
    out = out if out.dtype == dtype else out.to(dtype)
    return (out, d) if return_index else out
