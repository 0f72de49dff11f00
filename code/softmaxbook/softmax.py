"""Numerically exact softmax, log-softmax and log-sum-exp, and the losses built on them.

Conventions shared by every function here
-----------------------------------------
* Tensors of any shape; the categories run along ``dim`` (default: the last one).
* ``-inf`` in the logits means "impossible": that category gets probability exactly 0 and
  log-probability ``-inf``, and no gradient flows back into it (an impossible event stays
  impossible under any small change of the other logits).
* A slice along ``dim`` that is *entirely* ``-inf`` ("nothing is possible") is a documented
  convention, not an error: ``logsumexp`` gives ``-inf``, ``softmax`` all zeros, ``log_softmax``
  all ``-inf``, and every gradient (first and second derivative) through it is ``0``, never NaN.
  PyTorch's own functions give NaN there (pytorch issue 31829, :cite:`pytorch31829`).
* NaN or ``+inf`` in the logits, a temperature that is not a finite number > 0, and integer,
  boolean or complex tensors are rejected with a ``ValueError``/``TypeError`` that names the
  argument. The streaming log-sum-exp (:func:`lse_state`, :func:`lse_merge`,
  :func:`online_logsumexp`) is the one exception: it accepts ``+inf`` and returns ``+inf``,
  since a stream cannot be rejected after part of it has been merged (NaN is still rejected).
* The two edges follow PyTorch and SciPy: an *empty* ``dim`` is an empty slice, nothing is
  possible in it, so (as for an all ``-inf`` slice) ``logsumexp`` gives ``-inf`` and
  ``softmax`` / ``log_softmax`` an empty tensor; a *0-d* tensor is a single category (``dim``
  0 or -1): ``logsumexp(x) = x``, ``softmax`` 1 and ``log_softmax`` 0 (0 and ``-inf`` for
  ``x = -inf``).
* ``float16`` and ``bfloat16`` inputs are computed in ``float32`` and returned in their own dtype;
  ``float32`` and ``float64`` are computed in their own precision.
* ``torch.func`` works: ``grad``, ``jvp`` (forward mode), ``vmap``, ``jacrev``, ``jacfwd`` and
  ``hessian``. The custom autograd Functions have a forward-mode rule and a vmap rule (the
  batch goes through the fused kernels at once); under ``vmap`` the checks of values (NaN,
  ``+inf``) still run, on the whole batch.

Accuracy
--------
Float32 results compared with the exact value (``tests/test_softmax.py`` measures it in ulp,
units in the last place, for logits up to 1e4 in size; the bounds below are the largest errors
seen over thousands of Gaussian rows at spreads 1 to 30, not proofs):

* ``logsumexp``: within 2 ulp, also when the result is close to 0;
* ``log_softmax``: within 10 ulp for rows of up to 1000 categories (largest seen 9.3, on rows
  whose top log-probability lies just outside the repaired range; ``torch.log_softmax`` reaches
  the same there), including the log-probability of a nearly certain class, where
  ``torch.log_softmax`` returns 0 (an error of ~1e7 ulp). For very long rows (32000 categories)
  the sum of the exponentials drifts in float32: up to ~120 ulp on log-probabilities close to 0
  (PyTorch's fused kernel: ~350);
* ``softmax``: every probability within ``8 + |x_i - max| + n / 250`` ulp for slices of ``n``
  categories (largest seen over 2048 rows: 11.7 + ``|x_i - max|`` at n = 1000, 108 + that at
  32000): the float32 rounding of ``x_i - max`` is magnified by ``exp``, which is how every
  float32 softmax behaves on small probabilities, and PyTorch's fused kernel sums the
  exponentials in float32 vector lanes, whose drift grows with ``n`` and is passed on to every
  probability of the slice (the same bits as ``torch.softmax``). Dividing by a pairwise sum of
  the output would remove the drift (4 + ``|x_i - max|`` ulp) but costs a third of the kernel's
  time; the default is PyTorch's speed, ``exact=True`` gives 1 ulp;
* ``exact=True``: every entry within 1 ulp (float64 inside; several times slower).

Two cases where the textbook "shift by the maximum" formula is *not* enough are repaired: the
log-probability of a class that is almost certain (``log p = -log(1 + s)`` with ``s`` tiny) and a
log-sum-exp close to zero. Both are handled as Blanchard, Higham and Higham (2021, Algorithm 2
and eq. 3.3) suggest: drop the largest term, which is exactly ``exp(0) = 1`` after the shift, and
use ``log1p`` of the rest.

How it is fast
--------------
PyTorch's fused kernels (``torch.softmax``, ``torch.log_softmax``, ``torch.logsumexp``) already
shift by the maximum and are hard to beat. Each function here calls the fused kernel first, then
finds, as cheaply as it can, (a) slices that were invalid or entirely ``-inf`` (they come back as
NaN: ``softmax`` reads one entry per slice, see :func:`_invalid_slices`) and (b) slices where the
kernel's formula is known to lose relative accuracy (``log_softmax``: one maximum over its
output; ``logsumexp``: the maximum of ``x`` only for the slices whose result lies where the final
addition can cancel). Only those slices are recomputed with the exact algorithm
(:func:`_exact`), in float64; for a near-certain log-softmax slice only its top entry is, by the
leaner :func:`_repair_top` (most slices of a trained classifier are near-certain). That repair
needs the float64 ``exp`` of every entry of the slice, which costs about twice PyTorch's whole
float32 log-softmax: near-certain slices are the one case where exactness costs time (2 to 3
times PyTorch's). A temperature ``T`` is applied as ``(x - max) / T`` (one rounding), or, for
``T = 2^k``, as one exact multiplication by ``2^-k`` (see :func:`_scaled`); either way into a
tensor of our own, which the kernel then overwrites with its result: one fresh tensor where
``torch.softmax(x / T)`` makes two, and fresh memory is much of the cost of these kernels. The
benchmark ``benchmarks/bench_softmax.py`` reports the cost.

References: Blanchard, Higham & Higham (2021), "Accurately computing the log-sum-exp and
softmax functions", IMA J. Numer. Anal. 41(4) :cite:`blanchard2021`; Bridle (1990) for the
name "softmax" :cite:`bridle1990`.
"""

from __future__ import annotations

import math

import torch

from softmaxbook._validate import as_float_tensor, check_dim, check_no_nan, check_no_posinf, \
    check_positive_number
from softmaxbook._validate import check_finite as _check_finite
from softmaxbook._validate import check_reduction as _check_reduction
from softmaxbook._validate import reduce_loss as _reduce

__all__ = [
    "logsumexp",
    "softmax",
    "log_softmax",
    "sigmoid",
    "logit",
    "softplus",
    "log_sigmoid",
    "cross_entropy",
    "logistic_loss",
]

_LN2 = math.log(2.0)


# --------------------------------------------------------------------------------------------
# Argument handling shared by the public functions
# --------------------------------------------------------------------------------------------

# _plain sees through torch.func's wrappers with three functions of torch._C._functorch. They
# are private (present in every torch since 2.0, but with no promise): where a torch lacks them,
# the package still works. _plain is then the identity, _wrapped says "maybe" (True: the out-of-
# place path, always correct), and a value check that meets a vmap'ed tensor, whose value Python
# cannot read ("data-dependent control flow"), is skipped instead of failing the call. Outside
# torch.func every check runs as before. Tested by simulating their absence (tests/test_softmax.py).
_FUNCTORCH_NAMES = ("is_functorch_wrapped_tensor", "is_batchedtensor", "get_unwrapped")


def _functorch_helpers():
    f = getattr(torch._C, "_functorch", None)
    return f if f is not None and all(hasattr(f, n) for n in _FUNCTORCH_NAMES) else None


_FUNCTORCH = _functorch_helpers()


def _plain(x: torch.Tensor) -> torch.Tensor:
    """The tensor under torch.func's wrappers (vmap's batched tensor, grad's tracking tensor).

    Checks of values (NaN, +inf, a range) need data-dependent control flow, which ``vmap``
    forbids on its batched tensors; on the underlying tensor, the whole batch at once, they are
    ordinary Python. Outside torch.func it is ``x`` itself (also where torch lacks the helpers;
    see ``_FUNCTORCH``)."""
    f = _FUNCTORCH
    if f is None:
        return x
    while f.is_functorch_wrapped_tensor(x) or f.is_batchedtensor(x):
        x = f.get_unwrapped(x)
    return x


def _unreadable(error: RuntimeError) -> bool:
    """Whether ``error`` is torch.func refusing to give Python a batched tensor's value."""
    return _FUNCTORCH is None and "data-dependent" in str(error)


def _any(mask: torch.Tensor, unreadable: bool = False) -> bool:
    """``bool(mask.any())`` on :func:`_plain` of ``mask``; ``unreadable`` where torch.func hides
    the value and the helpers to unwrap it are missing (False for a check: it is skipped; True
    where the answer picks the safe path)."""
    try:
        return bool(_plain(mask).any())
    except RuntimeError as e:
        if _unreadable(e):
            return unreadable
        raise


def _on_plain(check):
    """A check from ``softmaxbook._validate`` applied to :func:`_plain` of its tensor."""
    def checked(x, *args, **kwargs):
        try:
            return check(_plain(x), *args, **kwargs)
        except RuntimeError as e:
            if _unreadable(e):
                return None  # inside vmap without the helpers: the check is skipped
            raise
    checked.__name__ = check.__name__
    return checked


def _wrapped(x: torch.Tensor) -> bool:
    """Whether ``x`` is a torch.func wrapper (then in-place updates of a plain buffer by ``x``
    are not allowed: they must be written out of place). True where that cannot be known."""
    return _FUNCTORCH is None or _plain(x) is not x


check_no_nan = _on_plain(check_no_nan)
check_no_posinf = _on_plain(check_no_posinf)
_check_finite = _on_plain(_check_finite)


def _working_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16/bfloat16 are computed in float32: their 8- and 11-bit significands cannot hold
    the sum of many exponentials, and their exp overflows at 11 (float16)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _exact_dtype(device: torch.device) -> torch.dtype:
    # The slices we repair are recomputed in float64; MPS has no float64, so it uses float32
    # (still with the log1p form, which is what fixes the large errors).
    return torch.float32 if device.type == "mps" else torch.float64


def _check_x(x, dim, func: str, *, edges: bool = False, several: bool = False):
    """Check the logits ``x`` and ``dim`` of a public function; every public function that
    takes logits calls this (the exercise checks rely on it to detect the library).

    ``edges=False`` returns ``(x, dim)`` and refuses 0-d tensors and empty dimensions;
    ``edges=True`` (logsumexp, softmax, log_softmax) returns ``(x, dim, scalar)`` and follows
    PyTorch and SciPy there (see :func:`_check_slices`)."""
    if edges:
        return _check_slices(x, dim, func, several=several)
    x = as_float_tensor(x, "x", func, allow_empty=True)
    dim = check_dim(x, dim, "x", func)
    return x, dim


def _one_dim(x: torch.Tensor, dim, func: str) -> int:
    """``dim`` as a non-negative int for ``x`` (which has at least one dimension); unlike
    ``check_dim``, an empty dimension is allowed (see :func:`_check_slices`)."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{func}: argument 'dim' must be an int, got {type(dim).__name__}")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"{func}: argument 'dim'={dim} is out of range for 'x' with "
                         f"{x.dim()} dimension(s) (shape {tuple(x.shape)})")
    return dim % x.dim()


def _check_slices(x, dim, func: str, *, several: bool = False):
    """Check ``x`` and ``dim`` for logsumexp / softmax / log_softmax, following PyTorch and
    SciPy at the two edges:

    * a 0-d tensor is a single category (``dim`` must be 0 or -1): it is returned with a
      dimension of size 1 in front, and ``scalar=True`` tells the caller to remove it again;
    * an empty dimension is an empty slice, which has no possible category: by the convention
      for all ``-inf`` slices, its log-sum-exp is ``-inf`` and its (log-)softmax is empty.

    ``several``: ``dim`` may also be a tuple or list of distinct dims (logsumexp). Returns
    ``(x, dim, scalar)`` with ``dim`` non-negative (a tuple when several were given).
    """
    x = as_float_tensor(x, "x", func, allow_empty=True)
    scalar = x.dim() == 0
    if scalar:
        dims = tuple(dim) if several and isinstance(dim, (tuple, list)) else (dim,)
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, int):
                raise TypeError(f"{func}: argument 'dim' must be an int, got {type(d).__name__}")
            if d not in (0, -1):
                raise ValueError(f"{func}: argument 'dim'={d} is out of range for a 0-d 'x' "
                                 "(a single category): use 0 or -1")
        return x.unsqueeze(0), (0 if not isinstance(dim, (tuple, list)) else (0,)), True
    if several and isinstance(dim, (tuple, list)):
        if len(dim) == 0:
            raise ValueError(f"{func}: argument 'dim' is an empty tuple; name at least one "
                             "dimension to reduce over")
        dims = tuple(_one_dim(x, d, func) for d in dim)
        if len(set(dims)) != len(dims):
            raise ValueError(f"{func}: argument 'dim'={tuple(dim)} names a dimension twice")
        return x, (dims if len(dims) > 1 else dims[0]), False
    return x, _one_dim(x, dim, func), False


def _check_temperature(temperature, func: str) -> float:
    if isinstance(temperature, torch.Tensor) and temperature.requires_grad:
        raise TypeError(
            f"{func}: argument 'temperature' must be a number, not a tensor that requires grad; "
            "to learn a temperature, divide the logits yourself: "
            f"{func}(x / temperature)"
        )
    return check_positive_number(temperature, "temperature", func)


def _raise_for_bad_values(x: torch.Tensor, func: str) -> None:
    """Called only when a fused kernel returned NaN: find out whether the input is to blame."""
    check_no_nan(x, "x", func)
    check_no_posinf(x, "x", func)


def _bool_arg(value, name: str, func: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{func}: argument '{name}' must be a bool, got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------------------------
# The exact algorithm, applied to the slices the fast path cannot be trusted with
# --------------------------------------------------------------------------------------------

def _exact(rows: torch.Tensor, temperature: float = 1.0, *, need_e: bool = False):
    """Exact shifted log-sum-exp of each row of a 2-D tensor ``rows`` (categories last).

    Returns ``(shift, d, s, e)``, in the exact dtype (float64 on CPU/CUDA), such that

    * ``logsumexp(rows / T) = shift + log1p(s)``,
    * ``log_softmax(rows / T) = d - log1p(s)``,
    * ``softmax(rows / T) = e / (1 + s)``, ``e = exp(d)`` (only with ``need_e``; else None).

    ``d = (rows - max) / T``, and ``s`` is the sum of ``exp(d)`` over every entry *except* one
    maximal entry (Blanchard, Higham & Higham 2021, Algorithm 2). For a row that is entirely
    ``-inf``: ``shift = -inf``, ``d = -inf``, ``s = 0``, ``e = 0``, which gives exactly the
    conventions above. ``d`` is a fresh tensor (the caller may overwrite it).
    """
    # the copy is d: every later step works in place on it
    d = rows.to(_exact_dtype(rows.device), copy=True)
    # the maximum is exact in any dtype; the index of one maximal entry says which term to
    # leave out. Read from the working dtype (half the bytes of float64).
    m, k = rows.max(dim=-1, keepdim=True)
    m = m.to(d.dtype)
    # An all -inf row has max -inf; shifting by it would give -inf - (-inf) = NaN. Shift such
    # rows by 0 instead: d stays -inf, every exp(d) is 0 and s = 0.
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    # For float32 input this difference is exact in float64 (both operands have 24-bit
    # significands and the exponent range is far from float64's limits); dividing by T after the
    # shift, not before, keeps large logits from losing their low bits (x/T - max(x)/T would
    # round each term separately).
    d.sub_(m_safe)
    if temperature != 1.0:
        d.div_(temperature)
    e = d.exp()
    # The maximal entry contributes exp(0) = 1 exactly. Leaving it out of the sum and adding it
    # back with log1p keeps the digits of s when s is tiny (a near-certain class): log(1 + s)
    # would round 1 + s to 1 and return 0. (Blanchard et al. 2021, eq. (3.3).)
    top = e.gather(-1, k)  # 1, or 0 for an all -inf row
    s = e.scatter_(-1, k, 0.0).sum(dim=-1, keepdim=True)
    shift = m / temperature  # -inf for an all -inf row: logsumexp = -inf + log1p(0) = -inf
    if need_e:
        e.scatter_(-1, k, top)
    else:
        e = None
    return shift, d, s, e


def _repair(x: torch.Tensor, out: torch.Tensor, dim: int, rows: torch.Tensor, kind: str,
            temperature: float = 1.0) -> None:
    """Overwrite, in place, the slices of ``out`` selected by the boolean mask ``rows`` (shape of
    ``x`` without ``dim``) with the exact values computed from ``x`` by :func:`_exact`.

    ``kind`` is ``"softmax"`` or ``"log_softmax"`` -- for these ``out`` has the shape of ``x`` --
    or ``"logsumexp"`` (``out`` has the shape of ``rows``). Works in chunks of about 4M entries so
    that the float64 temporaries stay small even when every slice is repaired. Slices of a
    contiguous tensor are read whole (as slices when all are selected, by ``index_select``
    otherwise) and written back the same way: advanced indexing copies entry by entry, several
    times slower (``exact=True`` repairs every slice).
    """
    xv = x.movedim(dim, -1)  # views: writing into ov writes into out
    ov = out if kind == "logsumexp" else out.movedim(dim, -1)
    if xv.dim() == 1:  # a single slice: give it a batch dimension of size 1
        xv, ov, rows = xv.unsqueeze(0), ov.unsqueeze(0), rows.reshape(1)
    n = xv.shape[-1]
    if xv.dim() > 2 and xv.is_contiguous() and ov.is_contiguous():
        xv, rows = xv.reshape(-1, n), rows.reshape(-1)
        ov = ov.reshape(-1) if kind == "logsumexp" else ov.reshape(-1, n)
    chunk = max(1, (1 << 22) // n)
    if xv.dim() == 2 and bool(rows.all()):
        sels = [slice(a, a + chunk) for a in range(0, xv.shape[0], chunk)]
    elif xv.dim() == 2:
        idx = rows.nonzero().squeeze(-1)
        sels = [idx[a:a + chunk] for a in range(0, idx.numel(), chunk)]
    else:
        idx = rows.nonzero(as_tuple=True)
        sels = [tuple(i[a:a + chunk] for i in idx) for a in range(0, idx[0].numel(), chunk)]
    for sel in sels:
        if isinstance(sel, torch.Tensor):
            xs = xv.index_select(0, sel)
        else:
            xs = xv[sel]
        shift, d, s, e = _exact(xs, temperature, need_e=kind == "softmax")
        if kind == "softmax":
            res = e.div_(s.add_(1.0))
        elif kind == "log_softmax":
            res = d.sub_(torch.log1p(s))
        else:
            res = (shift + torch.log1p(s)).squeeze(-1)
        if isinstance(sel, slice):
            ov[sel].copy_(res)  # a view of out; copy_ rounds to its dtype
        elif isinstance(sel, torch.Tensor):
            ov.index_copy_(0, sel, res.to(ov.dtype))
        else:
            ov[sel] = res.to(ov.dtype)


_TOP_BLOCK = 1 << 22  # entries per block of _repair_top


def _repair_top(x: torch.Tensor, out: torch.Tensor, dim: int, rows: torch.Tensor,
                temperature: float = 1.0) -> None:
    """In the log-softmax ``out``, rewrite the top entry of each slice selected by ``rows`` with
    the exact ``-log1p(s)`` (see :func:`_exact`); the other entries of PyTorch's result are
    accurate there (see :func:`_log_softmax_forward`).

    The same arithmetic as ``_exact``, hence the same bits, but lean, because on a trained
    classifier nearly every slice is near-certain and takes this path: only ``s`` is formed, in
    place, in blocks of 2^22 entries (few blocks: on a busy machine every operation that goes
    through the thread pool has a cost of its own, whatever its size), and the small operations
    on the sums are done once for all blocks. The maximum and its index come from one
    ``torch.max`` in the working dtype (the maximum is exact in any dtype), not from an argmax
    and a gather in float64. Selected slices of a contiguous tensor are gathered whole by
    ``index_select`` (advanced indexing copies entry by entry, several times slower), and when
    every slice of a 2-D tensor is selected the blocks are slices (no gathered copy).

    What it cannot avoid is the float64 ``exp`` of every entry of a selected slice: ``s`` is
    needed to about 2^-30 relative (float32's ``exp`` has an error of up to 1 ulp, and
    ``x - max`` in float32 a rounding error of up to ``|x - max| / 2`` ulp, both passed on to
    ``s``). That ``exp`` alone takes about twice the time of PyTorch's whole float32
    log-softmax of the slice, so a near-certain slice costs 3 to 5 times PyTorch's
    (inaccurate) result; ``benchmarks/bench_softmax.py`` measures it.
    """
    xv, ov = x.movedim(dim, -1), out.movedim(dim, -1)
    if xv.dim() == 1:  # a single slice: give it a batch dimension of size 1
        xv, ov, rows = xv.unsqueeze(0), ov.unsqueeze(0), rows.reshape(1)
    n = xv.shape[-1]
    if xv.dim() > 2 and xv.is_contiguous() and ov.is_contiguous():
        # views with one batch dimension: rows are then gathered whole by index_select
        xv, ov, rows = xv.reshape(-1, n), ov.reshape(-1, n), rows.reshape(-1)
    chunk = max(1, _TOP_BLOCK // n)
    exact_dtype = _exact_dtype(x.device)
    if xv.dim() == 2 and bool(rows.all()):
        sels = [slice(a, a + chunk) for a in range(0, xv.shape[0], chunk)]
    elif xv.dim() == 2:
        idx = rows.nonzero().squeeze(-1)
        sels = [idx[a:a + chunk] for a in range(0, idx.numel(), chunk)]
    else:  # not contiguous (dim is not the last): advanced indexing
        idx = rows.nonzero(as_tuple=True)
        sels = [tuple(i[a:a + chunk] for i in idx) for a in range(0, idx[0].numel(), chunk)]
    sums, tops = [], []
    for sel in sels:
        xs = xv.index_select(0, sel) if isinstance(sel, torch.Tensor) else xv[sel]
        # the maximum is exact in any dtype; its index says which term to leave out
        m, k = xs.max(dim=-1, keepdim=True)
        # a copy in any case (clone when x is float64 already): the ops below work in place
        d = xs.to(exact_dtype, copy=True)
        d.sub_(m.to(exact_dtype))  # exact in float64 for float32 input (see _exact)
        if temperature != 1.0:
            d.div_(temperature)
        d.exp_().scatter_(-1, k, 0.0)  # leave out the top term, exp(0) = 1 (eq. 3.3)
        sums.append(d.sum(dim=-1, keepdim=True))
        tops.append(k)
        del d
    # the small operations once for all blocks (each call has a fixed cost)
    top = (-torch.log1p(torch.cat(sums))).to(ov.dtype)
    k = torch.cat(tops)
    if xv.dim() == 2 and not isinstance(sels[0], (torch.Tensor, tuple)):
        ov.scatter_(-1, k, top)  # a view: writes into out
    elif xv.dim() == 2:
        ov[idx, k.squeeze(-1)] = top.squeeze(-1)
    else:
        ov[idx + (k.squeeze(-1),)] = top.squeeze(-1)


# --------------------------------------------------------------------------------------------
# Forward computations (no autograd): fast fused kernel + targeted repair
# --------------------------------------------------------------------------------------------

def _scaled(x: torch.Tensor, dim: int, temperature: float) -> tuple[torch.Tensor, bool]:
    """The logits divided by the temperature, for the fused kernels, which shift by the maximum;
    and whether the result is a fresh tensor of our own (the kernel may then write its output
    into it, in place: one fresh output fewer to fault into memory than ``softmax(x / T)``).

    In general ``(x - max) / T``: dividing after the shift (see :func:`_exact`) rounds once,
    where ``x / T - max / T`` would round each large logit first and lose its low bits. The
    maximum of ``x / T`` is at the same place as the maximum of ``x`` because ``T > 0``; an all
    ``-inf`` slice keeps its ``-inf`` (the kernel returns NaN there, which is repaired).

    For ``T = 2^k`` (2, 0.5, ...) the shift is left to the kernel and ``x / T`` is one
    multiplication by ``2^-k``: scaling by a power of two is exact, so ``x / T`` and ``max / T``
    are exact and the kernel's ``x / T - max / T`` is the same single rounding of
    ``(x - max) / T``, the same bits, with two fewer passes over ``x``. (Not quite the same
    where ``|x| / T`` falls below the smallest normal number, ``2^-126`` in float32: there the
    difference is below ``2^-149`` in the argument of ``exp``, invisible in the result. An
    ``x / T`` that overflows gives ``inf - inf = NaN``, and that slice is recomputed exactly,
    as an invalid one would be.)
    """
    if temperature == 1.0:
        return x, False
    mantissa, exponent = math.frexp(temperature)
    if mantissa == 0.5 and -100 <= exponent <= 100:  # 2^-k is exact in every float dtype
        return x * (1.0 / temperature), True
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    return (x - m).div_(temperature), True


def _invalid_slices(out: torch.Tensor, dim: int) -> torch.Tensor:
    """The slices (shape of ``out`` without ``dim``) where the fused kernel returned NaN.

    One entry per slice is enough: a slice with a NaN or ``+inf`` logit has a NaN or ``+inf``
    maximum, and one that is entirely ``-inf`` the maximum ``-inf``; either way ``x - max`` is
    NaN in some entry, so the sum of the exponentials is NaN and so is every entry of the
    slice's softmax and log-softmax (``x - max - log(sum)``). A finite slice has no NaN at all.
    ``tests/test_softmax.py`` checks this of PyTorch's kernels (every position of the bad
    value, short and long slices, last and other dims), which is what makes it safe to rely on:
    one strided read instead of a reduction over the whole output."""
    return torch.isnan(out.select(dim, 0))


def _exact_forward(x: torch.Tensor, dim: int, temperature: float, func: str,
                   kind: str) -> torch.Tensor:
    """``exact=True``: every slice by the float64 algorithm, without the fused kernel first (its
    result would be overwritten). A NaN or ``+inf`` logit leaves a NaN in its slice's result
    (not in every entry: ``x - max`` is ``-inf`` beside a ``+inf``), so one sum of the whole
    result finds them afterwards (a valid result has no NaN and no ``+inf``)."""
    if kind == "logsumexp":
        out = torch.empty(x.shape[:dim] + x.shape[dim + 1:], dtype=x.dtype, device=x.device)
    else:
        out = torch.empty_like(x)
    if x.numel() == 0:
        return out.fill_(-math.inf) if kind == "logsumexp" else out
    rows = torch.ones(out.shape if kind == "logsumexp" else out.select(dim, 0).shape,
                      dtype=torch.bool, device=x.device)
    _repair(x, out, dim, rows, kind, temperature)
    # (a slice of one +inf logit gives logsumexp +inf: its s is an empty sum)
    total = out.sum()
    if bool(torch.isnan(total) | torch.isposinf(total)):
        _raise_for_bad_values(x, func)
    return out


def _softmax_forward(x: torch.Tensor, dim: int, temperature: float, func: str,
                     exact: bool = False) -> torch.Tensor:
    if exact:
        return _exact_forward(x, dim, temperature, func, "softmax")
    y, own = _scaled(x, dim, temperature)
    p = torch.softmax(y, dim=dim, out=y) if own else torch.softmax(y, dim=dim)
    if x.numel() == 0:
        return p
    # No renormalisation: dividing by the sum of the output would repair the fused kernel's
    # float32 row-sum drift on long rows (about 100 ulp at 32000 classes) but costs two more
    # passes over the whole output, a third of PyTorch's time (issue 25 chose PyTorch's speed;
    # exact=True gives 1 ulp). The module notes state the bound.
    nan_rows = _invalid_slices(p, dim)
    invalid = bool(nan_rows.any())
    if invalid:
        _raise_for_bad_values(x, func)  # raises for NaN/+inf input; else they are all -inf
    if invalid:  # the all -inf slices are recomputed exactly
        _repair(x, p, dim, nan_rows, "softmax", temperature)
    return p


def _log_softmax_forward(x: torch.Tensor, dim: int, temperature: float, func: str,
                         exact: bool = False) -> torch.Tensor:
    if exact:
        return _exact_forward(x, dim, temperature, func, "log_softmax")
    y, own = _scaled(x, dim, temperature)
    ls = torch.log_softmax(y, dim=dim, out=y) if own else torch.log_softmax(y, dim=dim)
    if x.numel() == 0:
        return ls
    top = ls.amax(dim=dim)
    nan_rows = torch.isnan(top)
    invalid = bool(nan_rows.any())
    if invalid:
        _raise_for_bad_values(x, func)
    # The fused kernel returns d - log(s) with s = 1 + (the other terms). When one class holds
    # more than half of the mass (log p > -log 2), s < 2 and rounding 1 + tiny to float loses
    # the digits of log p for that class: torch gives log p = 0 for p = 1 - 1e-9. Those slices,
    # and the all -inf ones (NaN here), are recomputed exactly.
    if invalid:
        _repair(x, ls, dim, nan_rows, "log_softmax", temperature)
    # In the near-certain slices only the top entry, -log(s), is wrong: d_j - log(s) is accurate
    # for the others (|d_j - log s| >= |d_j| and log s is accurate in absolute terms).
    rows = top > -_LN2  # False where top is NaN
    if bool(rows.any()):
        _repair_top(x, ls, dim, rows, temperature)
    return ls


def _logsumexp_forward(x: torch.Tensor, dim: int, func: str, exact: bool = False) -> torch.Tensor:
    if exact:
        return _exact_forward(x, dim, 1.0, func, "logsumexp")
    lse = torch.logsumexp(x, dim=dim)
    if x.numel() == 0:
        return lse
    if bool((torch.isnan(lse) | torch.isposinf(lse)).any()):
        _raise_for_bad_values(x, func)
    # lse = m + log(s) with s in [1, n]. Its relative accuracy is lost in two cases:
    # (1) |lse| small while log(s) carries the digits (s = 1 + tiny rounds to 1), and
    # (2) cancellation between m < 0 and log(s) > 0, e.g. m = -10, log s = 10.3.
    # Condition number of the final addition: (|m| + |log s|) / |lse|. Repair when it exceeds 2
    # or when |lse| < 1. The all -inf slices are already right (-inf) and are left alone.
    # The maximum m costs a pass over x, and most slices do not need it: m lies in
    # [lse - log n, lse], so for lse >= max(1, log n) m >= 0 and the condition number is 1,
    # and for lse <= -max(1, 2 log n) it is at most (|lse| + 2 log n) / |lse| <= 2. Only the
    # slices between (widened by 0.1 %, for the rounding of lse) get their maximum.
    finite = torch.isfinite(lse)
    log_n = math.log(x.shape[dim])
    hi, lo = max(1.0, log_n) * 1.001 + 1e-3, -max(1.0, 2.0 * log_n) * 1.001 - 1e-3
    near = finite & (lse < hi) & (lse > lo)
    if bool(near.all()):
        m = x.amax(dim=dim)
        rows = finite & ((lse.abs() < 1.0) | (m.abs() + (lse - m).abs() > 2.0 * lse.abs()))
    elif bool(near.any()):
        ln = lse[near]
        m = x.movedim(dim, -1)[near].amax(dim=-1)
        rows = torch.zeros_like(near)
        rows[near] = (ln.abs() < 1.0) | (m.abs() + (ln - m).abs() > 2.0 * ln.abs())
    else:
        rows = near  # all False
    if bool(rows.any()):
        _repair(x, lse, dim, rows, "logsumexp")
    return lse


# --------------------------------------------------------------------------------------------
# Autograd: custom Functions so that -inf slices have zero (not NaN) first and second derivatives
# --------------------------------------------------------------------------------------------

# The Functions follow torch.func's protocol (forward without ctx, setup_context, jvp and a vmap
# rule), so torch.func.grad, jvp, vmap, jacrev, jacfwd and hessian work on them. The vmap rule
# moves the batch dimension to the front and calls the Function on the whole batch: the forward
# pass has data-dependent branches (which slices to repair) that vmap could not trace, but on
# the unwrapped batch they are ordinary Python.

def _vmap_front(x, in_dim, dim):
    """``x`` with its vmap batch dimension (if any) moved to 0, and ``dim`` shifted past it."""
    if in_dim is None:
        return x, dim, None
    return x.movedim(in_dim, 0), dim + 1, 0


def _finish(out: torch.Tensor, scalar: bool, dtype: torch.dtype) -> torch.Tensor:
    """A public function's result: the 0-d shape back where ``_check_x`` made a 0-d input one
    slice of one category, and the caller's dtype where the work ran in another."""
    if scalar:
        out = out.squeeze(0)
    return out if out.dtype == dtype else out.to(dtype)


class _OverSlices(torch.autograd.Function):
    """What softmax and log_softmax share: inputs (x, dim, temperature, exact); the output is
    saved for both modes (their derivatives are functions of it); the vmap rule applies the
    concrete Function to the whole batch."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, dim, temperature, _ = inputs
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)
        ctx.dim, ctx.temperature = dim, temperature

    @classmethod
    def vmap(cls, info, in_dims, x, dim, temperature, exact):
        x, dim, out_dim = _vmap_front(x, in_dims[0], dim)
        return cls.apply(x, dim, temperature, exact), out_dim


class _Softmax(_OverSlices):
    @staticmethod
    def forward(x, dim, temperature, exact):
        return _softmax_forward(x, dim, temperature, "softmax", exact)

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        # Jacobian-vector product of softmax: J = diag(p) - p p^T, so J^T g = p * (g - <g, p>).
        # Where p = 0 (an impossible class, or an all -inf slice) the gradient is exactly 0.
        # Written with differentiable ops on the saved *output*, so autograd can differentiate
        # this backward again (second derivatives) through _Softmax once more.
        gx = p * (g - (g * p).sum(dim=ctx.dim, keepdim=True))
        if ctx.temperature != 1.0:
            gx = gx / ctx.temperature
        return gx, None, None, None

    @staticmethod
    def jvp(ctx, t, *_):
        # J is symmetric, so the forward-mode product J t has the backward's formula.
        (p,) = ctx.saved_tensors
        # an impossible class (p = 0) gets tangent 0 even if t is not finite there
        t = torch.where(p == 0, 0.0, t)
        out = p * (t - (t * p).sum(dim=ctx.dim, keepdim=True))
        return out / ctx.temperature if ctx.temperature != 1.0 else out


class _LogSoftmax(_OverSlices):
    @staticmethod
    def forward(x, dim, temperature, exact):
        return _log_softmax_forward(x, dim, temperature, "log_softmax", exact)

    @staticmethod
    def backward(ctx, g):
        (ls,) = ctx.saved_tensors
        # d log p_i / d z_j = [i = j] - p_j, so the vector-Jacobian product is g - p * sum(g).
        # exp(-inf) = 0, so p needs no special case. Entries whose log-probability is -inf are
        # impossible categories: by convention no gradient flows into them (the formula would
        # pass g through unchanged, and for an all -inf slice that would not be 0).
        p = ls.exp()
        gx = g - p * g.sum(dim=ctx.dim, keepdim=True)
        gx = torch.where(torch.isneginf(ls), torch.zeros_like(gx), gx)
        if ctx.temperature != 1.0:
            gx = gx / ctx.temperature
        return gx, None, None, None

    @staticmethod
    def jvp(ctx, t, *_):
        # forward mode: (J t)_i = t_i - <p, t>; impossible entries (-inf) stay -inf: tangent 0
        (ls,) = ctx.saved_tensors
        dead = torch.isneginf(ls)
        t = torch.where(dead, 0.0, t)
        out = t - (ls.exp() * t).sum(dim=ctx.dim, keepdim=True)
        out = torch.where(dead, 0.0, out)
        return out / ctx.temperature if ctx.temperature != 1.0 else out


class _LogSumExp(torch.autograd.Function):
    @staticmethod
    def forward(x, dim, keepdim, exact):
        # dim: an int or a tuple of ints (every one non-negative); the slices are flattened
        dims = dim if isinstance(dim, tuple) else (dim,)
        if len(dims) == 1:
            lse = _logsumexp_forward(x, dims[0], "logsumexp", exact)
        else:
            flat = x.movedim(dims, tuple(range(x.dim() - len(dims), x.dim()))).flatten(-len(dims))
            lse = _logsumexp_forward(flat, flat.dim() - 1, "logsumexp", exact)
        if keepdim:
            for d in sorted(dims):
                lse = lse.unsqueeze(d)
        return lse

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, dim, keepdim, _ = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        ctx.dims = dim if isinstance(dim, tuple) else (dim,)
        ctx.keepdim = keepdim

    @staticmethod
    def _keep(ctx, g):
        if not ctx.keepdim:
            for d in sorted(ctx.dims):
                g = g.unsqueeze(d)
        return g

    @staticmethod
    def _softmax(x, dims):
        # the softmax over the (possibly several) reduced dims, through _Softmax
        if len(dims) == 1:
            return _Softmax.apply(x, dims[0], 1.0, False)
        n = len(dims)
        moved = x.movedim(dims, tuple(range(x.dim() - n, x.dim())))
        p = _Softmax.apply(moved.flatten(-n), moved.dim() - n, 1.0, False)
        return p.unflatten(-1, moved.shape[-n:]).movedim(
            tuple(range(x.dim() - n, x.dim())), dims)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        # The gradient of log-sum-exp is the softmax. Computing it with _Softmax (rather than
        # exp(x - lse), which is exp(NaN) on an all -inf slice) gives 0 there, and makes the
        # second derivative (the softmax Jacobian) available through _Softmax.backward.
        return _LogSumExp._keep(ctx, g) * _LogSumExp._softmax(x, ctx.dims), None, None, None

    @staticmethod
    def jvp(ctx, t, *_):
        (x,) = ctx.saved_tensors
        p = _LogSumExp._softmax(x, ctx.dims)
        t = torch.where(p == 0, 0.0, t)  # impossible entries: no contribution
        return (p * t).sum(dim=ctx.dims, keepdim=ctx.keepdim)

    @staticmethod
    def vmap(info, in_dims, x, dim, keepdim, exact):
        if in_dims[0] is None:
            return _LogSumExp.apply(x, dim, keepdim, exact), None
        x = x.movedim(in_dims[0], 0)
        dims = tuple(d + 1 for d in dim) if isinstance(dim, tuple) else dim + 1
        return _LogSumExp.apply(x, dims, keepdim, exact), 0


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------

def _to_working(x: torch.Tensor) -> torch.Tensor:
    w = _working_dtype(x.dtype)
    return x if x.dtype == w else x.to(w)


def logsumexp(x: torch.Tensor, dim: int | tuple[int, ...] = -1, keepdim: bool = False, *,
              exact: bool = False) -> torch.Tensor:
    r"""Log-sum-exp :math:`\log \sum_j e^{x_j}` along ``dim``, without overflow.

    Parameters
    ----------
    x : torch.Tensor, shape ``(..., n, ...)``
        Floating-point logits. ``-inf`` is allowed (an impossible category), NaN and ``+inf``
        are not. ``n = 0`` (an empty slice) gives ``-inf``; a 0-d ``x`` is one category and
        gives ``x`` (PyTorch's and SciPy's conventions).
    dim : int or tuple of ints
        The dimension(s) to reduce, distinct. Default: the last. Over several dimensions the
        slices are flattened first (the same numbers as reducing over one dimension).
    keepdim : bool
        Keep each reduced dimension as a dimension of size 1 in the result.
    exact : bool
        ``False`` (default): PyTorch's fused kernel, repaired where it fails (see the module
        notes). ``True``: every slice by the exact algorithm in float64 (2 to 4 times
        PyTorch's time, measured); use it for reference values.

    Returns
    -------
    torch.Tensor
        Shape of ``x`` without ``dim`` (or with size 1 there if ``keepdim``), dtype of ``x``.
        ``-inf`` for a slice that is entirely ``-inf`` (or empty).

    Notes
    -----
    Bounds: ``max(x) <= logsumexp(x) <= max(x) + log(n)``. The gradient is ``softmax(x)``
    (zero on an all ``-inf`` slice, where PyTorch's gives NaN); second derivatives work.
    Accuracy: within a few ulp of the exact value for any finite input, also when the result is
    close to 0 (the ``log1p`` form of Blanchard, Higham & Higham 2021, eq. 3.3).

    Examples
    --------
    >>> logsumexp(torch.tensor([1000.0, 999.0, 990.0]))
    tensor(1000.3133)
    >>> logsumexp(torch.tensor([-float("inf"), -float("inf")]))
    tensor(-inf)
    """
    func = "logsumexp"
    x, dim, scalar = _check_x(x, dim, func, edges=True, several=True)
    keepdim = _bool_arg(keepdim, "keepdim", func)
    dtype = x.dtype
    out = _LogSumExp.apply(_to_working(x), dim, keepdim, _bool_arg(exact, "exact", func))
    return _finish(out, scalar, dtype)


def softmax(x: torch.Tensor, dim: int = -1, temperature: float = 1.0, *,
            exact: bool = False) -> torch.Tensor:
    r"""Softmax :math:`p_i = e^{x_i/T} / \sum_j e^{x_j/T}` along ``dim``, without overflow.

    Parameters
    ----------
    x : torch.Tensor, shape ``(..., n, ...)``
        Floating-point logits. ``-inf`` means "impossible" (probability exactly 0); NaN and
        ``+inf`` are rejected. ``n = 0`` gives an empty result; a 0-d ``x`` is one category
        (probability 1, or 0 if it is ``-inf``).
    dim : int
        The dimension holding the categories. Default: the last.
    temperature : float
        ``T > 0``, finite. ``T -> 0`` approaches the one-hot vector of the argmax (uniform over
        ties), ``T -> inf`` the uniform distribution over the possible categories. A tensor that
        requires grad is refused: to learn ``T``, call ``softmax(x / T)``.
    exact : bool
        ``False`` (default): PyTorch's fused kernel, repaired where it fails (see the module
        notes). ``True``: every slice by the exact algorithm in float64 (2 to 4 times
        PyTorch's time, measured); use it for reference values.

    Returns
    -------
    torch.Tensor
        Same shape and dtype as ``x``; non-negative, summing to 1 along ``dim`` (all zeros for a
        slice that is entirely ``-inf``).

    Notes
    -----
    Shift invariance: ``softmax(x + c) = softmax(x)`` for any constant ``c``, which is why the
    maximum can be subtracted first (the constant is ``max(x)``, not ``max(exp(x))``).
    Gradient: ``p * (g - <g, p>)``; zero into impossible categories and all ``-inf`` slices.
    Reference: Bridle (1990); Blanchard, Higham & Higham (2021).

    Examples
    --------
    >>> softmax(torch.tensor([1000.0, 999.0, 990.0]))
    tensor([7.3103e-01, 2.6893e-01, 3.3189e-05])
    """
    func = "softmax"
    x, dim, scalar = _check_x(x, dim, func, edges=True)
    temperature = _check_temperature(temperature, func)
    dtype = x.dtype
    out = _Softmax.apply(_to_working(x), dim, temperature, _bool_arg(exact, "exact", func))
    return _finish(out, scalar, dtype)


def log_softmax(x: torch.Tensor, dim: int = -1, temperature: float = 1.0, *,
                exact: bool = False) -> torch.Tensor:
    r"""Log-softmax :math:`\log p_i = x_i/T - \log \sum_j e^{x_j/T}` along ``dim``.

    Parameters
    ----------
    x : torch.Tensor, shape ``(..., n, ...)``
        Floating-point logits (``-inf`` allowed, NaN and ``+inf`` rejected). ``n = 0`` gives
        an empty result; a 0-d ``x`` is one category (log-probability 0, or ``-inf``).
    dim : int
        The dimension holding the categories. Default: the last.
    temperature : float
        ``T > 0``, finite (see :func:`softmax`).
    exact : bool
        ``False`` (default): PyTorch's fused kernel, repaired where it fails (see the module
        notes). ``True``: every slice by the exact algorithm in float64 (2 to 4 times
        PyTorch's time, measured); use it for reference values.

    Returns
    -------
    torch.Tensor
        Same shape and dtype as ``x``; ``<= 0``, ``-inf`` exactly where ``x`` is ``-inf`` (and
        everywhere on an all ``-inf`` slice).

    Notes
    -----
    Unlike ``torch.log_softmax``, the log-probability of a nearly certain class keeps its
    digits: for logits ``[0, -30]`` it returns ``-9.36e-14``, not ``0``. The gradient is
    ``g - p * sum(g)``, set to 0 for the ``-inf`` entries (no gradient flows into an
    impossible category). Reference: Blanchard, Higham & Higham (2021), Algorithm 2.

    Examples
    --------
    >>> log_softmax(torch.tensor([0.0, -30.0]))
    tensor([-9.3576e-14, -3.0000e+01])
    """
    func = "log_softmax"
    x, dim, scalar = _check_x(x, dim, func, edges=True)
    temperature = _check_temperature(temperature, func)
    dtype = x.dtype
    out = _LogSoftmax.apply(_to_working(x), dim, temperature, _bool_arg(exact, "exact", func))
    return _finish(out, scalar, dtype)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    r"""Logistic sigmoid :math:`\sigma(x) = 1 / (1 + e^{-x})`, elementwise.

    The two-class softmax is a sigmoid of the difference of the logits:
    ``softmax([a, b])[0] = sigmoid(a - b)``. :func:`logit` is its inverse.

    Parameters
    ----------
    x : torch.Tensor, any shape
        Floating-point; ``±inf`` are allowed (giving 1 and 0), NaN is not.

    Returns
    -------
    torch.Tensor
        Same shape and dtype, in ``[0, 1]``.
    """
    func = "sigmoid"
    x = as_float_tensor(x, "x", func, allow_empty=True)
    check_no_nan(x, "x", func)
    # 1/(1+exp(-x)) for x >= 0 and exp(x)/(1+exp(x)) for x < 0: neither exp sees a positive
    # argument. (torch.sigmoid on the CPU evaluates 1/(1+exp(-x)) everywhere: exp(-x) overflows
    # from x = -88.72 in float32 (-709.78 in float64) and it returns 0 there, although sigmoid(x)
    # ~ e^x is a positive subnormal down to x = -103.97 (-745.13).) Each branch is fed only the
    # inputs it is used for (the "double where"), so that the branch not taken neither overflows
    # nor puts 0 * inf = NaN into the gradient; float16/bfloat16 are computed in float32.
    w = _to_working(x)
    neg = w < 0
    e = torch.exp(torch.where(neg, w, 0.0))
    out = torch.where(neg, e / (1 + e), 1 / (1 + torch.exp(-torch.where(neg, 0.0, w))))
    return out.to(x.dtype)


def logit(p: torch.Tensor) -> torch.Tensor:
    r"""Log-odds :math:`\operatorname{logit}(p) = \log\frac{p}{1-p}`, the inverse of :func:`sigmoid`.

    Parameters
    ----------
    p : torch.Tensor, any shape
        Probabilities in ``[0, 1]``; ``logit(0) = -inf`` and ``logit(1) = +inf``.

    Returns
    -------
    torch.Tensor
        Same shape and dtype as ``p``.

    Notes
    -----
    Computed as ``log(p) - log1p(-p)``: for ``p`` near 0 this keeps all digits of ``log p``,
    and ``log1p(-p)`` is exact to rounding where ``1 - p`` would cancel.
    """
    func = "logit"
    p = as_float_tensor(p, "p", func, allow_empty=True)
    check_no_nan(p, "p", func)
    bad = _plain((p < 0) | (p > 1))
    if _any(bad):
        idx = bad.nonzero()[0].tolist()
        raise ValueError(
            f"{func}: argument 'p' must lie in [0, 1], got {_plain(p)[tuple(idx)].item()} at "
            "index "
            f"{tuple(idx) if len(idx) != 1 else idx[0]}"
        )
    w = _to_working(p)
    return (torch.log(w) - torch.log1p(-w)).to(p.dtype)


class _Softplus(torch.autograd.Function):
    """``max(x, 0) + log1p(exp(-|x|))`` with the gradient ``sigmoid(x)`` written out: autograd
    through ``clamp`` and ``abs`` would give 1 at ``x = 0`` (clamp passes the gradient at its
    boundary, ``abs`` has 0 there) instead of 1/2. The backward uses torch operations, so it is
    differentiable again (second derivatives, ``gradgradcheck``). Forward mode (``jvp``) and
    ``vmap`` (a generated rule: the forward has no data-dependent branch) for torch.func."""

    generate_vmap_rule = True

    @staticmethod
    def forward(w):
        # exp only of -|w| <= 0: no overflow, and log1p keeps the digits of a tiny exp
        return w.clamp(min=0) + torch.log1p(torch.exp(-w.abs()))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad * torch.sigmoid(w)

    @staticmethod
    def jvp(ctx, t):
        (w,) = ctx.saved_tensors
        return t * torch.sigmoid(w)


def softplus(x: torch.Tensor) -> torch.Tensor:
    r"""Softplus :math:`\log(1 + e^{x})`, elementwise, without overflow or lost digits.

    It is the two-class log-sum-exp, :math:`\operatorname{softplus}(x) = \operatorname{LSE}(0, x)`,
    so :math:`\max(x, 0) \le \operatorname{softplus}(x) \le \max(x, 0) + \log 2`, and its
    derivative is :func:`sigmoid`.

    Parameters
    ----------
    x : torch.Tensor, any shape
        Floating-point; ``-inf`` gives 0 and ``+inf`` gives ``+inf``; NaN is rejected.

    Returns
    -------
    torch.Tensor
        Same shape and dtype, ``>= 0``.

    Notes
    -----
    Computed as ``max(x, 0) + log1p(exp(-|x|))`` (the log-sum-exp shift by the larger of 0 and
    ``x``, Blanchard, Higham & Higham 2021): ``exp`` never sees a positive argument, so nothing
    overflows (``log(1 + exp(x))`` is ``inf`` in float32 from ``x = 88.7``), and for a very
    negative ``x`` the result is ``exp(x)`` to full relative precision instead of
    ``log(1 + tiny) = 0``. Unlike ``torch.nn.functional.softplus``, which returns ``x`` itself
    above its ``threshold`` of 20 (a relative error up to 1e-10 in float64), every input gets
    the exact formula.
    """
    func = "softplus"
    x = as_float_tensor(x, "x", func, allow_empty=True)
    check_no_nan(x, "x", func)
    return _Softplus.apply(_to_working(x)).to(x.dtype)


def log_sigmoid(x: torch.Tensor) -> torch.Tensor:
    r"""Log of the logistic sigmoid, :math:`\log \sigma(x) = -\operatorname{softplus}(-x)`.

    The log-probability of the first of two classes whose logits differ by ``x``: by the
    two-class softmax, :math:`\log \sigma(x) = x - \operatorname{LSE}(0, x)`.

    Parameters
    ----------
    x : torch.Tensor, any shape
        Floating-point; ``-inf`` gives ``-inf`` and ``+inf`` gives 0; NaN is rejected.

    Returns
    -------
    torch.Tensor
        Same shape and dtype, ``<= 0``.

    Notes
    -----
    ``log(1 / (1 + exp(-x)))`` computed as written loses everything at both ends: in float32
    ``exp(-x)`` overflows from ``x = -88.72`` (log gives ``-inf`` instead of about ``x``; even
    the exact ``sigmoid(x)``, a subnormal there, underflows to 0 below ``x = -103.97``), and for
    a large positive ``x`` ``sigmoid(x)`` rounds to 1 (log gives 0 instead of ``-exp(-x)``).
    ``-softplus(-x)`` keeps both.
    """
    func = "log_sigmoid"
    x = as_float_tensor(x, "x", func, allow_empty=True)
    check_no_nan(x, "x", func)
    return (-_Softplus.apply(-_to_working(x))).to(x.dtype)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, dim: int = -1,
                  reduction: str = "mean") -> torch.Tensor:
    r"""Cross entropy :math:`-\sum_k y_k \log \operatorname{softmax}(z)_k`, the negative
    log-likelihood of a categorical (multinomial with one draw) model.

    Parameters
    ----------
    logits : torch.Tensor, shape ``(..., K, ...)``
        Floating-point logits, categories along ``dim``; ``-inf`` means impossible. ``K >= 1``
        and at least one dimension: a loss needs a class to be right about (unlike
        :func:`logsumexp`, which follows PyTorch at the empty and 0-d edges).
    target : torch.Tensor
        Either integer class indices with the shape of ``logits`` without ``dim``, values in
        ``[0, K)``; or floating-point probabilities with the shape of ``logits`` (non-negative;
        they normally sum to 1 along ``dim``, which is not checked, so label smoothing works).
    dim : int
        The dimension of the categories. Default: the last.
    reduction : {"mean", "sum", "none"}
        How to combine the per-example losses (``"none"`` returns the shape without ``dim``).

    Returns
    -------
    torch.Tensor
        The loss, in nats. ``+inf`` if the target puts mass on an impossible (``-inf``) class.

    Notes
    -----
    Built on :func:`log_softmax`, so it neither overflows nor rounds the loss of a confident,
    correct prediction to 0. Terms with ``y_k = 0`` count as 0 even where ``log p_k = -inf``
    (the convention ``0 log 0 = 0``). Reference: Bishop (2006), section 4.3.4.
    """
    func = "cross_entropy"
    logits, dim = _check_x(logits, dim, func)
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{func}: argument 'target' must be a torch.Tensor, got "
                        f"{type(target).__name__}")
    reduction = _check_reduction(reduction, func)
    ls = log_softmax(logits, dim)
    n_classes = logits.shape[dim]
    if target.is_floating_point():
        if target.shape != logits.shape:
            raise ValueError(f"{func}: argument 'target' holds probabilities, so it must have the "
                             f"shape of 'logits' {tuple(logits.shape)}, got {tuple(target.shape)}")
        check_no_nan(target, "target", func)
        if bool(_plain(target < 0).any()):
            raise ValueError(f"{func}: argument 'target' holds probabilities and must be >= 0")
        # 0 * log(0) = 0 * (-inf) would be NaN; by convention the term is 0. Only that -inf is
        # replaced (by 0), inside the product: the derivative in a target entry y_k = 0 stays
        # -log p_k (it was 0 when the whole term went through torch.where), and no NaN appears.
        y = target.to(ls.dtype)
        terms = y * torch.where((y == 0) & torch.isneginf(ls), 0.0, ls)
        loss = -terms.sum(dim=dim)
    elif not (target.dtype == torch.bool or target.is_complex()):
        expected = logits.shape[:dim] + logits.shape[dim + 1:]
        if target.shape != expected:
            raise ValueError(f"{func}: argument 'target' holds class indices, so it must have shape "
                             f"{tuple(expected)} (that of 'logits' without dim {dim}), "
                             f"got {tuple(target.shape)}")
        if target.numel() and bool(_plain((target < 0) | (target >= n_classes)).any()):
            raise ValueError(f"{func}: argument 'target' must hold class indices in "
                             f"[0, {n_classes}), got values in [{int(_plain(target).min())}, "
                             f"{int(_plain(target).max())}]")
        loss = -ls.gather(dim, target.long().unsqueeze(dim)).squeeze(dim)
    else:
        raise TypeError(f"{func}: argument 'target' must hold integer class indices or "
                        f"floating-point probabilities, got {target.dtype}")
    return _reduce(loss, reduction)


def logistic_loss(logits: torch.Tensor, target: torch.Tensor,
                  reduction: str = "mean") -> torch.Tensor:
    r"""Logistic loss (binary cross entropy on logits), the negative log-likelihood of a
    Bernoulli model with :math:`P(y = 1) = \sigma(z)`:

    .. math:: \ell(z, y) = -y \log \sigma(z) - (1 - y) \log(1 - \sigma(z))
              = \operatorname{softplus}(z) - y z.

    Parameters
    ----------
    logits : torch.Tensor, any shape
        Floating-point logits ``z`` (finite).
    target : torch.Tensor, same shape
        Labels or probabilities ``y`` in ``[0, 1]`` (float, or integer/bool 0/1).
    reduction : {"mean", "sum", "none"}

    Returns
    -------
    torch.Tensor
        The loss in nats, in the dtype of ``logits``.

    Notes
    -----
    ``softplus(z) = max(z, 0) + log1p(exp(-|z|))``: the exponential never overflows, and for a
    large ``|z|`` the loss of the right answer is ``exp(-|z|)`` to full relative precision,
    not 0. With ``logits = a - b`` this equals the two-class :func:`cross_entropy`.
    """
    func = "logistic_loss"
    z = as_float_tensor(logits, "logits", func, allow_empty=True)
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{func}: argument 'target' must be a torch.Tensor, got "
                        f"{type(target).__name__}")
    if target.is_complex():
        raise TypeError(f"{func}: argument 'target' must be real, got {target.dtype}")
    if target.shape != z.shape:
        raise ValueError(f"{func}: argument 'target' must have the shape of 'logits' "
                         f"{tuple(z.shape)}, got {tuple(target.shape)}")
    if bool(~_plain(torch.isfinite(z)).all()):
        _check_finite(z, "logits", func)
    y = target.to(_to_working(z).dtype)
    check_no_nan(y, "target", func)
    if bool(_plain((y < 0) | (y > 1)).any()):
        raise ValueError(f"{func}: argument 'target' must lie in [0, 1]")
    w = _to_working(z)
    # softplus(z) - y z with softplus(z) = max(z, 0) + log1p(exp(-|z|)): exp never sees a
    # positive argument. The two large terms are combined first, so for a confident right answer
    # (z = 40, y = 1) they cancel exactly and the loss keeps the digits of exp(-40).
    # max(z, 0) by torch.maximum, which gives each side half of the gradient at a tie: the
    # derivative at z = 0 is then the exact sigmoid(0) - y = 1/2 - y (clamp(min=0) passes 1 at
    # its boundary, and abs has derivative 0 at 0, which gave 1 - y).
    loss = (torch.maximum(w, torch.zeros_like(w)) - y * w) + torch.log1p(torch.exp(-w.abs()))
    return _reduce(loss, reduction).to(z.dtype)


# --------------------------------------------------------------------------------------------
# The online (streaming) log-sum-exp: merging (max, rest) states of blocks
# --------------------------------------------------------------------------------------------
# Milakov & Gimelshein (2018) keep, for the entries read so far, the running maximum m and the
# sum s of exp(x_j - m); two such pairs merge in O(1), so a log-sum-exp (and the normaliser of
# a softmax) needs one pass over the data instead of two (FlashAttention's inner loop, Dao et
# al. 2022). The state here carries rest = s - 1 instead of s: the maximum's own term is
# exactly exp(0) = 1, and keeping it out of the sum lets the end use log1p(rest), which keeps
# the digits of a near-certain slice (Blanchard, Higham & Higham 2021, Algorithm 2), where
# log(s) in float32 rounds 1 + 1e-13 to 1 (float64 keeps about 3 of its digits).

from typing import NamedTuple as _NamedTuple


class LSEState(_NamedTuple):
    """The log-sum-exp of the entries seen so far, as ``max + log1p(rest)``.

    ``max``: their maximum (``-inf`` if none is possible: no entry yet, or all ``-inf``);
    ``rest``: ``sum_j exp(x_j - max) - 1``, the sum without one maximal entry's term
    ``exp(0) = 1`` (``>= 0``; exactly ``-1`` when ``max = -inf``). Both are tensors of one
    shape (one state per slice) and one floating dtype. A slice that holds ``+inf`` has
    ``max = +inf`` and ``rest`` = (its number of ``+inf`` entries) - 1.
    """

    max: torch.Tensor
    rest: torch.Tensor


def _check_state(state, name: str, func: str) -> LSEState:
    if not (isinstance(state, tuple) and len(state) == 2):
        raise TypeError(f"{func}: argument '{name}' must be an LSEState (a pair of tensors "
                        f"max, rest), got {type(state).__name__}")
    m = as_float_tensor(state[0], f"{name}.max", func, allow_empty=True)
    r = as_float_tensor(state[1], f"{name}.rest", func, allow_empty=True)
    if m.shape != r.shape:
        raise ValueError(f"{func}: argument '{name}' has max of shape {tuple(m.shape)} but rest "
                         f"of shape {tuple(r.shape)}; they must have one shape")
    if m.dtype != r.dtype:
        raise TypeError(f"{func}: argument '{name}' has max of dtype {m.dtype} but rest of "
                        f"dtype {r.dtype}; they must have one dtype")
    check_no_nan(m, f"{name}.max", func)
    check_no_nan(r, f"{name}.rest", func)
    # rest is a sum of exponentials <= 1 each (or a count of +inf entries), minus 1: never
    # infinite; an infinite rest would make lse_value +inf silently (R5 cold review)
    if bool(_plain(torch.isinf(r)).any()):
        raise ValueError(f"{func}: argument '{name}.rest' must be finite (a sum of "
                         "exponentials <= 1 each, minus 1), got inf")
    if bool(_plain(r < -1).any()):
        raise ValueError(f"{func}: argument '{name}.rest' must be >= -1 (it is a sum of "
                         f"exponentials minus 1), got {float(_plain(r).min())}")
    dead = _plain(torch.isneginf(m))
    if bool((dead & (_plain(r) != -1)).any()) or bool((~dead & (_plain(r) < 0)).any()):
        raise ValueError(f"{func}: argument '{name}' is not a state: rest must be -1 exactly "
                         "where max is -inf (nothing possible) and >= 0 elsewhere (the "
                         "maximum's own term exp(0) = 1 is left out of rest)")
    return LSEState(m, r)


def _state_of(x: torch.Tensor) -> LSEState:
    """The state of each slice along the LAST dimension of ``x`` (working dtype, checked)."""
    if x.shape[-1] == 0:
        shape = x.shape[:-1]
        return LSEState(torch.full(shape, -math.inf, dtype=x.dtype, device=x.device),
                        torch.full(shape, -1.0, dtype=x.dtype, device=x.device))
    m = x.amax(dim=-1)
    mk = m.unsqueeze(-1)
    top = x == mk  # every maximal entry; for m = -inf every entry, for m = +inf the +inf ones
    # exp(x - m) of the entries below the maximum; the maximal ones are counted apart (each is
    # exactly exp(0) = 1). torch.where before exp: x - m is NaN where x = m = +-inf, and the
    # where keeps that NaN out of the value and of the gradient.
    below = torch.exp(torch.where(top, -math.inf, x - mk)).sum(dim=-1)
    ties = top.sum(dim=-1).to(x.dtype)
    rest = below + (ties - 1)
    # nothing possible (all -inf): rest = -1, so that the state says "sum 0"
    rest = torch.where(torch.isneginf(m), -1.0, rest)
    return LSEState(m, rest)


def lse_state(x: torch.Tensor, dim: int = -1) -> LSEState:
    r"""The streaming log-sum-exp state of one block: the maximum of each slice of ``x`` along
    ``dim`` and the sum of ``exp(x_j - max)`` without the maximum's own term.

    Parameters
    ----------
    x : torch.Tensor, shape ``(..., n, ...)``
        Floating-point logits; ``-inf`` is an impossible entry, ``+inf`` is allowed (see
        :func:`online_logsumexp`), NaN is not. ``n = 0`` (an empty block) is allowed.
    dim : int
        The dimension of the block's entries. Default: the last.

    Returns
    -------
    LSEState
        ``max`` and ``rest``, each of the shape of ``x`` without ``dim``; float16/bfloat16
        inputs give float32 states (the sum of many exponentials does not fit their 8 or 11
        bits), other dtypes their own. ``log-sum-exp = max + log1p(rest)``
        (:func:`lse_value`). An empty or all ``-inf`` block gives ``(-inf, -1)``.

    Notes
    -----
    Milakov & Gimelshein (2018), "Online normalizer calculation for softmax", keep
    :math:`(m, s)` with :math:`s = \sum_j e^{x_j - m}`; here ``rest = s - 1`` (Blanchard,
    Higham & Higham 2021, Algorithm 2), so :func:`lse_value` can use ``log1p``.
    """
    func = "lse_state"
    x = as_float_tensor(x, "x", func, allow_empty=True)
    if x.dim() == 0:
        raise ValueError(f"{func}: argument 'x' is a 0-d tensor (a scalar); a block needs "
                         "a dimension of entries")
    dim = _one_dim(x, dim, func)
    check_no_nan(x, "x", func)
    return _state_of(_to_working(x).movedim(dim, -1))


def lse_merge(a: LSEState, b: LSEState) -> LSEState:
    r"""Merge the states of two disjoint sets of entries into the state of their union.

    With :math:`m = \max(m_a, m_b)` and :math:`s = 1 + \mathrm{rest}`,

    .. math:: s = s_a\, e^{m_a - m} + s_b\, e^{m_b - m},

    the Milakov & Gimelshein (2018) update, written for ``rest``: the state with the larger
    maximum keeps its ``rest``, the other is rescaled by :math:`e^{m_{\text{other}} - m} \le 1`
    (never an overflow), and on a tie :math:`\mathrm{rest} = (\mathrm{rest}_a +
    \mathrm{rest}_b) + 1`.

    Parameters
    ----------
    a, b : LSEState
        States (``max``, ``rest``) of one dtype whose shapes broadcast.

    Returns
    -------
    LSEState
        The state of the union, of the broadcast shape. The merge is commutative exactly (the
        same bits for ``(a, b)`` and ``(b, a)``) and associative up to rounding: any order and
        tree of merges gives the log-sum-exp within the first-order rounding bound that
        ``tests/test_softmax_online.py`` states (each term's error grows with its distance
        below the maximum and with the number of merges it passes through).

    Notes
    -----
    Exact at the edges: a state with nothing possible, ``(-inf, -1)``, is the identity
    (``-inf - (-inf)`` is never formed, so two of them give ``(-inf, -1)``, not NaN); a
    ``+inf`` maximum wins over every finite one, and two of them add their counts.
    """
    func = "lse_merge"
    a = _check_state(a, "a", func)
    b = _check_state(b, "b", func)
    if a.max.dtype != b.max.dtype:
        raise TypeError(f"{func}: arguments 'a' and 'b' must have one dtype, got "
                        f"{a.max.dtype} and {b.max.dtype}")
    try:
        torch.broadcast_shapes(a.max.shape, b.max.shape)
    except RuntimeError:
        raise ValueError(f"{func}: the shapes of 'a' {tuple(a.max.shape)} and 'b' "
                         f"{tuple(b.max.shape)} do not broadcast") from None
    return _merge(a, b)


def _merge(a: LSEState, b: LSEState) -> LSEState:
    m = torch.maximum(a.max, b.max)
    tie = a.max == b.max  # also both -inf or both +inf, where max - max would be NaN
    a_top = a.max > b.max
    # the state with the smaller maximum, and the exponent that rescales it (<= 0): formed
    # only where the maxima differ, so no inf - inf (the where comes before exp, which keeps
    # NaN out of the gradient too)
    low_m = torch.where(a_top, b.max, a.max)
    low_s = 1 + torch.where(a_top, b.rest, a.rest)
    top_rest = torch.where(a_top, a.rest, b.rest)
    scale = torch.exp(torch.where(tie, 0.0, low_m - m))
    rest = torch.where(tie, (a.rest + b.rest) + 1, top_rest + low_s * scale)
    return LSEState(m, rest)


def lse_value(state: LSEState) -> torch.Tensor:
    r"""The log-sum-exp ``max + log1p(rest)`` of a state (``-inf`` for ``(-inf, -1)``,
    ``+inf`` for a ``+inf`` maximum).

    Parameters
    ----------
    state : LSEState
        From :func:`lse_state` / :func:`lse_merge`.

    Returns
    -------
    torch.Tensor
        Shape and dtype of ``state.max``. Gradients flow to the logits the state came from
        (the softmax); an infinite result has zero gradient (the convention of
        :func:`logsumexp` for an all ``-inf`` slice).
    """
    func = "lse_value"
    m, r = _check_state(state, "state", func)
    return _value(LSEState(m, r))


def _value(state: LSEState) -> torch.Tensor:
    m, r = state
    finite = torch.isfinite(m)
    # log1p of the rest keeps the digits of a near-certain slice (rest ~ 1e-13); the where's
    # on both sides keep log1p(-1) = -inf (and its infinite derivative) out of the result and
    # of the gradient at an infinite maximum
    safe = torch.where(finite, r, 0.0)
    return torch.where(finite, m + torch.log1p(safe), m.detach())


def online_logsumexp(x: torch.Tensor, dim: int = -1, block: int = 1024) -> torch.Tensor:
    r"""Log-sum-exp along ``dim`` in one pass, ``block`` entries at a time (the online
    normaliser of Milakov & Gimelshein 2018).

    Reads each block once, forms its :func:`lse_state` and merges it into the running state
    with :func:`lse_merge`; the value is :func:`lse_value` of the last state. The same numbers
    as :func:`logsumexp` up to rounding (within the first-order bound that
    ``tests/test_softmax_online.py`` states and checks), without a second pass over ``x``.

    Parameters
    ----------
    x : torch.Tensor, shape ``(..., n, ...)``
        Floating-point logits. ``-inf`` means impossible; NaN is rejected. ``+inf`` is allowed
        and gives ``+inf`` (the sum of the exponentials is infinite; :func:`logsumexp` instead
        rejects it as a bad logit). ``n = 0`` gives ``-inf``; a 0-d ``x`` is one entry.
    dim : int
        The dimension to reduce. Default: the last.
    block : int
        Entries read per step, ``>= 1``.

    Returns
    -------
    torch.Tensor
        Shape of ``x`` without ``dim``, dtype of ``x`` (float16/bfloat16 are accumulated in
        float32). ``-inf`` for an empty or all ``-inf`` slice, with zero gradient there; the
        gradient elsewhere is the softmax.

    References
    ----------
    Milakov & Gimelshein (2018), arXiv:1805.02867; Dao et al. (2022), FlashAttention, which
    merges these states tile by tile; Blanchard, Higham & Higham (2021) for the ``log1p``.

    Examples
    --------
    >>> online_logsumexp(torch.tensor([1000.0, 999.0, 990.0]), block=2)
    tensor(1000.3133)
    """
    func = "online_logsumexp"
    x = as_float_tensor(x, "x", func, allow_empty=True)
    scalar = x.dim() == 0
    if scalar:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"{func}: argument 'dim' must be an int, got {type(dim).__name__}")
        if dim not in (0, -1):
            raise ValueError(f"{func}: argument 'dim'={dim} is out of range for a 0-d 'x' "
                             "(a single entry): use 0 or -1")
        x, dim = x.unsqueeze(0), 0
    dim = _one_dim(x, dim, func)
    if isinstance(block, bool) or not isinstance(block, int):
        raise TypeError(f"{func}: argument 'block' must be an int, got {type(block).__name__}")
    if block < 1:
        raise ValueError(f"{func}: argument 'block' must be >= 1, got {block}")
    check_no_nan(x, "x", func)
    dtype = x.dtype
    w = _to_working(x).movedim(dim, -1)
    state = _state_of(w[..., :block])
    for start in range(block, w.shape[-1], block):
        state = _merge(state, _state_of(w[..., start:start + block]))
    return _value(state).to(dtype)


__all__ += ["LSEState", "lse_state", "lse_merge", "lse_value", "online_logsumexp"]
