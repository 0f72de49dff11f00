"""Checks for the coding exercises of the chapter "Softmax facts" (book/01_softmax.ipynb).

* ``softmax-stable-lse``: ``stable_logsumexp(x)`` along the last dimension, which must survive huge
  logits, ``-inf`` entries and slices that are entirely ``-inf`` (result ``-inf``), shifting each
  row by its own maximum, written with basic tensor operations: ``torch.logsumexp`` (also as a
  method or ``torch.special.logsumexp``), ``torch.logcumsumexp``, ``torch.logaddexp`` (so also
  ``functools.reduce(torch.logaddexp, ...)``), torch's softmax/log-softmax,
  ``scipy.special.logsumexp``, ``numpy.logaddexp`` and the book's library are forbidden. A test
  row has its maximum last with a spread of 1000, so that a shift by the minimum, by the first
  entry or by the mean of the finite entries overflows there, and another its maximum first with
  its last entry 1000 below, so that a shift by the last entry overflows too (cold review R3: with
  every hard row's maximum last, a shift by the last entry passed every public and salted case).
* ``softmax-cross-entropy``: ``mean_cross_entropy(logits, target)`` from logits and class indices,
  without ever forming ``exp(logits)`` unshifted, also where a logit is ``-inf``; ready-made
  cross entropies and log-softmaxes are forbidden.
* ``softmax-lse-merge``: ``merge_states(a, b)`` merges two (max, scaled sum) states of the online
  log-sum-exp (Milakov & Gimelshein 2018), rescaling both sums to the new maximum without ever
  exponentiating a maximum, and giving (-inf, 0), not NaN, for two empty states; ready-made
  log-sum-exps and the book's own merge are forbidden.
"""

from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager
from unittest import mock

import numpy as np
import torch

from . import (_ForbiddenCall, _fail, call, check_generator, check_salt, describe, exercise,
               expect_close, expect_true, watch_calls)
from . import fail_at_worst_entry
from .. import softmax as _softmax
from ..softmax import cross_entropy, logsumexp

INF = math.inf

# Ready-made answers. Matched by name (see softmaxbook.exercises.forbidden), so torch.logsumexp
# also catches x.logsumexp(...) and torch.special.logsumexp, and torch.log_softmax also catches
# torch.nn.functional.log_softmax and x.log_softmax(...).
# torch.logcumsumexp(x, -1)[..., -1] and functools.reduce(torch.logaddexp, x.unbind(-1)) are
# log-sum-exps too (review of the third edition).
_NO_LSE = {torch.logsumexp: "torch.logsumexp", torch.softmax: "torch.softmax",
           torch.log_softmax: "torch.log_softmax", torch.logcumsumexp: "torch.logcumsumexp",
           torch.logaddexp: "torch.logaddexp", torch.logaddexp2: "torch.logaddexp2"}
_NO_LSE_REASON = ("Write it with basic tensor operations (amax, exp, sum, log, where): the "
                  "point of the exercise is the shift that makes it stable.")
_NO_CE = {**_NO_LSE,
          torch.nn.functional.cross_entropy: "torch.nn.functional.cross_entropy",
          torch.nn.functional.nll_loss: "torch.nn.functional.nll_loss"}
_NO_CE_REASON = ("Build it from your stable_logsumexp (or the same shift written out) and "
                 "basic tensor operations.")


@contextmanager
def _book_library_forbidden():
    """While active, the book's softmax, log_softmax, logsumexp and cross_entropy raise: each of
    them validates its input with ``softmaxbook.softmax._check_x``, looked up at call time, so
    this also catches a name the learner imported before the check ran."""
    saved = _softmax._check_x

    def tripwire(*args, **kwargs):
        raise _ForbiddenCall("a function of the book's library (softmaxbook.softmax)")

    _softmax._check_x = tripwire
    try:
        yield
    finally:
        _softmax._check_x = saved


class _NumpyTripwire:
    """Stands in for ``numpy.logaddexp`` while a check runs: ``np.logaddexp.reduce(x)`` is a
    ready-made log-sum-exp (numpy ufuncs are not Python functions, so a profile hook cannot see
    them; the name is looked up at call time)."""

    def __init__(self, name):
        self.name = name

    def __getattr__(self, attr):
        raise _ForbiddenCall(self.name)

    def __call__(self, *args, **kwargs):
        raise _ForbiddenCall(self.name)


def _call(func, *args, desc, forbid, reason):
    import scipy.special

    with ExitStack() as stack:
        stack.enter_context(_book_library_forbidden())
        for name in ("logaddexp", "logaddexp2"):
            stack.enter_context(mock.patch.object(np, name, _NumpyTripwire(f"numpy.{name}")))
        # scipy.special.logsumexp is a Python function: a profile hook sees it however the
        # learner imported it (also before the check ran)
        seen = stack.enter_context(watch_calls(scipy.special.logsumexp))
        result = call(func, *args, input_desc=desc, forbid=forbid, forbid_reason=reason)
    if seen:
        _fail(f"for input {desc} your function calls scipy.special.logsumexp, which this "
              f"exercise forbids. {reason}")
    return result


def _expect_unchanged(passed, original, name, desc):
    """Fail if the learner's function changed its argument in place (``x.sub_(m)``,
    ``x -= m``): the caller's tensor would then hold something else afterwards (independent
    review: both checks accepted it, as they passed a copy and never looked at it again)."""
    if not torch.equal(passed, original):
        _fail(f"for input {desc} your function changed its argument '{name}' in place (an "
              f"in-place operation such as {name}.sub_(...) or {name} -= ...): afterwards it "
              f"holds {describe(passed)} instead of {describe(original)}.",
              "use out-of-place operations (x - m, not x -= m or x.sub_(m)); a function should "
              "not change the tensor its caller passed.")


MAX_LAST = "the maximum is last"
MAX_FIRST = "the maximum is first, the last entry 1000 below it"
PER_ROW = "a batch of 3 rows, float64 (each row needs its own maximum)"

LSE_CASES = [
    (torch.tensor([1.0, 2.0, 3.0]), "x = [1, 2, 3]"),
    (torch.tensor([1000.0, 999.0, 990.0]), "x = [1000, 999, 990] (exp overflows)"),
    # the maximum first, the last entry 1000 below it: a shift by the last entry (or by the
    # minimum) leaves exp(1000), which overflows; unshifted, every exp underflows to 0
    (torch.tensor([-1000.0, -1001.0, -2000.0]),
     f"x = [-1000, -1001, -2000] (exp underflows to 0; {MAX_FIRST})"),
    (torch.tensor([7.5]), "x = [7.5] (one element)"),
    # the maximum last, 1000 above the rest: a shift by the minimum, the first entry or the mean
    # of the finite entries (500) leaves exp(500) or exp(1000), which overflow in float32
    (torch.tensor([0.0, -INF, 1000.0]),
     f"x = [0, -inf, 1000] (an impossible entry; {MAX_LAST})"),
    # shifted by the maximum of the whole tensor (1000), the second row underflows to log 0
    (torch.tensor([[1000.0, 999.0], [-1000.0, -1001.0], [3.0, 3.0]], dtype=torch.float64),
     "x = [[1000, 999], [-1000, -1001], [3, 3]], " + PER_ROW),
    (torch.tensor([[-INF, -INF], [0.0, 0.0]]), "x = [[-inf, -inf], [0, 0]] (a row of -inf)"),
    # decimals that float16 cannot hold (the cases above are all exact in float16): an answer
    # that rounds through half precision passed every case at home and failed under the
    # grader's salted inputs (independent tester, finding 9)
    (torch.tensor([770.911, 774.909, 769.123, 775.001]),
     "x = [770.911, 774.909, 769.123, 775.001] (decimals float16 cannot hold)"),
]

_LSE_HINT = ("log-sum-exp is m + log(sum(exp(x - m))) with m the maximum along the last "
             "dimension; reduce over dim=-1 and return one value per row.")
_ROW_HINT = ("shift each row by its own maximum (x.amax(dim=-1, keepdim=True)), not by the "
             "maximum of the whole tensor: a row far below the overall maximum underflows to "
             "exp(...) = 0 and log 0 = -inf.")
_OVERFLOW_HINT = ("an exponent overflowed: exp(x - c) stays finite for every entry only when c "
                  "is at least the largest entry of the row. Which shift makes every exponent "
                  "<= 0? (The minimum, the first or the last entry, or the mean do not.)")
_NAN_HINT = ("shift by the maximum m of x (not by max(exp(x))). For a row that is all -inf, "
             "m = -inf and x - m = -inf - (-inf) = NaN; the answer for that row is log 0 = "
             "-inf. Which shift gives that without a NaN?")


def _salted_lse_cases():
    """Under the grader's secret salt (none in a notebook): the hard cases again with entries
    shifted, spread and permuted at random, so that a table of answers to LSE_CASES is no use."""
    if not check_salt():
        return []
    g = check_generator(101)

    def u(lo, hi, *shape, dtype=torch.float32):
        return lo + (hi - lo) * torch.rand(*shape, generator=g, dtype=torch.float64).to(dtype)

    big = (u(600, 1000, 1) + u(-12, 0, 4)).to(torch.float32)
    big = big[torch.randperm(4, generator=g)]
    last = torch.cat([u(-5, 5, 2), torch.tensor([-INF]), u(900, 1100, 1)])
    rows = torch.cat([u(-1100, -600, 2, 1, dtype=torch.float64),
                      u(600, 1100, 2, 1, dtype=torch.float64)])[torch.randperm(4, generator=g)]
    rows = rows + u(-10, 0, 4, 3, dtype=torch.float64)
    first = torch.cat([u(-1100, -600, 1), torch.tensor([-INF]), u(-5, 5, 1)])
    first[1:] = first[1:] + (first[0] - 1000.0)  # the last entry ~1000 below the first
    dead = u(-50, 50, 3, 4)
    dead[int(torch.randint(3, (1,), generator=g))] = -INF
    return [(big, f"x = {describe(big)} (exp overflows)"),
            (last, f"x = {describe(last)} (an impossible entry; {MAX_LAST})"),
            (first, f"x = {describe(first)} ({MAX_FIRST})"),
            (rows, f"x = {describe(rows)}, {PER_ROW}"),
            (dead, f"x = {describe(dead)} (a row of -inf)")]


@exercise("softmax-stable-lse", "a log-sum-exp that never overflows")
def _check_stable_lse(stable_logsumexp):
    cases = LSE_CASES + _salted_lse_cases()
    for x, desc in cases:
        arg = x.clone()
        got = _call(stable_logsumexp, arg, desc=desc, forbid=_NO_LSE,
                    reason=_NO_LSE_REASON)
        _expect_unchanged(arg, x, "x", desc)
        expected = logsumexp(x)
        if isinstance(got, torch.Tensor) and bool(torch.isnan(got).any()):
            expect_true(False, f"for input {desc} your result contains NaN: {got.tolist()}.",
                        hint=_NAN_HINT)
        hint = _ROW_HINT if PER_ROW in desc else _LSE_HINT
        if ((MAX_LAST in desc or MAX_FIRST in desc) and isinstance(got, torch.Tensor)
                and got.shape == expected.shape
                and bool((torch.isposinf(got) & torch.isfinite(expected)).any())):
            hint = _OVERFLOW_HINT
        expect_close(got, expected, input_desc=desc, rtol=1e-6, atol=1e-6, hint=hint)
    return len(cases)


CE_PER_ROW = "(each row needs its own maximum)"

CE_CASES = [
    (torch.tensor([[2.0, 1.0, 0.1]]), torch.tensor([0]), "logits = [[2, 1, 0.1]], target = [0]"),
    (torch.tensor([[1000.0, 0.0], [0.0, 1000.0]]), torch.tensor([0, 0]),
     "logits = [[1000, 0], [0, 1000]], target = [0, 0] (huge logits)"),
    (torch.tensor([[-800.0, -805.0, -790.0]]), torch.tensor([1]),
     "logits = [[-800, -805, -790]], target = [1] (exp underflows)"),
    (torch.tensor([[1000.0, 999.0], [-1000.0, -1001.0]], dtype=torch.float64),
     torch.tensor([0, 1]),
     "logits = [[1000, 999], [-1000, -1001]] (float64), target = [0, 1] " + CE_PER_ROW),
    (torch.tensor([[0.0, -INF, 1.0]]), torch.tensor([2]),
     "logits = [[0, -inf, 1]], target = [2] (an impossible class)"),
]

_CE_HINT = ("the loss of one example is logsumexp(z) - z[target]: the negative log-probability "
            "of the right class, computed from logits with the maximum shifted out (never "
            "log(softmax(z)) with an unshifted exp).")
_CE_DTYPE_HINT = ("your result is {got} for {want} logits: compute in the logits' dtype (no "
                  ".float() on the way). float32 keeps about 7 significant digits: near a "
                  "logit of 1000 the loss loses its 5th digit.")
_CE_NAN_HINT = ("a logit of -inf (an impossible class, never the target) has log p = -inf, and "
                "multiplying by a one-hot target gives 0 * (-inf) = NaN. Pick the target's "
                "entry out instead of multiplying (indexing or gather).")


@exercise("softmax-cross-entropy", "mean cross entropy from logits")
def _check_cross_entropy(mean_cross_entropy):
    # fixed test inputs in a notebook (a check is deterministic given the learner's function);
    # under the grader they change with its secret salt, and salted hard cases are added
    g = check_generator(7)
    z = 4.0 * torch.randn(32, 10, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (32,), generator=g)
    cases = CE_CASES + [(z, y, "random logits of shape (32, 10) (float64)")]
    if check_salt():
        huge = 300.0 * torch.randn(6, 5, generator=g, dtype=torch.float64)
        huge += 800.0 * torch.sign(torch.randn(6, 1, generator=g, dtype=torch.float64))
        t = torch.randint(0, 5, (6,), generator=g)
        huge[torch.arange(6), (t + 1 + torch.randint(0, 4, (6,), generator=g)) % 5] = -INF
        cases.append((huge, t, f"logits {describe(huge)} with -inf entries, target "
                               f"{describe(t)} {CE_PER_ROW}"))
    for logits, target, desc in cases:
        arg, arg_target = logits.clone(), target.clone()
        got = _call(mean_cross_entropy, arg, arg_target, desc=desc,
                    forbid=_NO_CE, reason=_NO_CE_REASON)
        _expect_unchanged(arg, logits, "logits", desc)
        _expect_unchanged(arg_target, target, "target", desc)
        expected = cross_entropy(logits, target)
        if isinstance(got, torch.Tensor) and got.dim() > 0:
            expect_true(False, f"for input {desc} the result should be one number (the mean over "
                        f"the batch), got shape {tuple(got.shape)}.",
                        hint="average the per-example losses: .mean().")
        if isinstance(got, torch.Tensor) and bool(torch.isnan(got).any()) and \
                bool(torch.isneginf(logits).any()):
            expect_true(False, f"for input {desc} your result is NaN.", hint=_CE_NAN_HINT)
        hint = _ROW_HINT if CE_PER_ROW in desc else _CE_HINT
        if (isinstance(got, torch.Tensor) and got.is_floating_point()
                and torch.finfo(got.dtype).bits < torch.finfo(logits.dtype).bits):
            # cold review R3: a float32 computation of float64 logits was told to shift each
            # row by its own maximum, which it did
            hint = _CE_DTYPE_HINT.format(got=got.dtype, want=logits.dtype)
        expect_close(got, expected, input_desc=desc, rtol=1e-5, atol=1e-6, hint=hint)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# softmax-ex-se-gradient (a derivation's end result): the squared error's gradient on the true
# logit, K classes, the true class first with probability p and the others sharing 1 - p equally
F64 = torch.float64


def _se_grad_cases():
    g = check_generator(1011)  # public in a notebook; the grader's secret salt changes it
    grid = torch.tensor([1e-9, 0.01, 0.2, 1 / 3, 0.5, 0.9, 1 - 1e-6], dtype=F64)
    k_rand = torch.randint(2, 1001, (200,), generator=g).to(F64)
    cases = [
        ("two classes", grid, torch.full_like(grid, 2.0)),
        ("K = 3, 10 and 1000", grid.repeat(3), torch.tensor([3.0, 10.0, 1000.0],
                                                             dtype=F64).repeat_interleave(7)),
        ("200 random p in (0, 1), K from 2 to 1000",
         torch.rand(200, generator=g, dtype=F64).clamp(1e-6, 1 - 1e-6), k_rand),
        ("a [3, 4] batch", torch.rand(3, 4, generator=g, dtype=F64).clamp(1e-3, 1 - 1e-3),
         torch.randint(2, 20, (3, 4), generator=g).to(F64)),
    ]
    return cases


@exercise("softmax-ex-se-gradient", "squared error's gradient on the true logit")
def _check_se_gradient(se_grad_true):
    """``se_grad_true(p, K)`` -> tensor of the shape of ``p`` and ``K``, elementwise."""
    cases = _se_grad_cases()
    for name, p, k in cases:
        desc = f"p = {describe(p)}, K = {describe(k)} ({name})"
        p_in, k_in = p.clone(), k.clone()
        got = call(se_grad_true, p_in, k_in, input_desc=desc)
        expect_true(torch.equal(p_in, p) and torch.equal(k_in, k),
                    f"for input {desc} your function changed its arguments in place.",
                    hint="compute a new tensor; do not use in-place methods such as mul_ on p.")
        expect_true(isinstance(got, torch.Tensor) and got.is_floating_point()
                    and got.shape == p.shape,
                    f"for input {desc} the gradient should be a float tensor of shape "
                    f"{tuple(p.shape)} (one gradient per entry of p and K), got "
                    f"{describe(got)}.", hint="work elementwise; do not reduce over a dimension.")
        expect_true(got.dtype == F64, f"for input {desc} (float64) your gradient is "
                                      f"{got.dtype}: return float64, the inputs' dtype.")
        expected = -2 * k / (k - 1) * p * (1 - p) ** 2
        g64 = got.detach().cpu()
        hint = ("put p_1 = p, p_k = (1 − p)/(K − 1) for the other classes and y = (1, 0, …, 0) "
                "into (softmax-se-grad) with j = 1: the sum over k has one term for the true "
                "class and K − 1 equal ones. For K = 2 the result must be −4p(1 − p)².")
        if torch.allclose(g64, -4 * p * (1 - p) ** 2, rtol=1e-9, atol=0) and name != "two classes":
            hint = ("your gradient is the two-class one for every K: with K classes the other "
                    "K − 1 classes have probability (1 − p)/(K − 1) each, and all of them enter "
                    "the sum in (softmax-se-grad).")
        elif torch.allclose(g64, -expected, rtol=1e-9, atol=0):
            hint = ("your gradient has the wrong sign: gradient descent must raise the true "
                    "logit z_1, so the derivative of the loss with respect to it is negative.")
        # Compared to 1e-12 relative plus 1e-14 p (1 - p), the size of the terms in the bracket
        # of (softmax-se-grad): a right formula written as that bracket loses digits near p = 1.
        # The message names the entry that is furthest off, not the expected values.
        tol = 1e-12 * expected.abs() + 1e-14 * p * (1 - p)
        wrong = ~((g64 - expected).abs() <= tol)
        if bool(wrong.any()):
            fail_at_worst_entry(g64, expected, wrong, (g64 - expected).abs() / tol,
                                lambda i: f"p = {float(p.flatten()[i]):.12g}, "
                                          f"K = {float(k.flatten()[i]):g}",
                                desc, "gradient", hint, digits=6)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# softmax-lse-merge: merge two (max, scaled sum) states of the online log-sum-exp (Milakov &
# Gimelshein 2018). A state (m, s) of a block: m its maximum, s = sum_j exp(x_j - m); an empty
# or all -inf block is (-inf, 0). The union has m = max(m_a, m_b) and
# s = s_a exp(m_a - m) + s_b exp(m_b - m), with (-inf, 0) for two empty states (no NaN).
# Cases: either side holding the larger maximum (an answer that rescales only one side, or the
# wrong side, fails one of them), a tie, maxima of +-1000 (exp of a maximum overflows or
# underflows), an empty state on either side and on both, and a float64 batch (a float32 step
# loses digits there).

_NO_MERGE = {**_NO_LSE}
_NO_MERGE_REASON = ("Write the rescaling yourself with maximum, exp and where: the point of the "
                    "exercise is the merge that the online log-sum-exp is built from.")


@contextmanager
def _merge_library_forbidden():
    """The book's own merge (softmaxbook.softmax.lse_merge and its helpers) raises while the
    check runs, like the rest of the library (see _book_library_forbidden)."""
    saved = (_softmax._check_state, _softmax._merge, _softmax._state_of)

    def tripwire(*args, **kwargs):
        raise _ForbiddenCall("a function of the book's library (softmaxbook.softmax)")

    _softmax._check_state = _softmax._merge = _softmax._state_of = tripwire
    try:
        yield
    finally:
        _softmax._check_state, _softmax._merge, _softmax._state_of = saved


def _merge_reference(a, b):
    (ma, sa), (mb, sb) = a, b
    m = torch.maximum(ma, mb)
    dead = torch.isneginf(m)
    safe = torch.where(dead, 0.0, m)  # exp(-inf - 0) = 0: no -inf - (-inf)
    return m, sa * torch.exp(ma - safe) + sb * torch.exp(mb - safe)


def _state(m, s, dtype=torch.float32):
    return torch.tensor(m, dtype=dtype), torch.tensor(s, dtype=dtype)


A_TOP = "a has the larger maximum"
B_TOP = "b has the larger maximum"
DEAD = "an empty state (-inf, 0)"
BOTH_DEAD = "both states empty (-inf, 0): nothing possible in either block"
HUGE = "maxima near 1000: exp of a maximum overflows"
TINY = "maxima near -1000: exp of a maximum underflows to 0"
# an answer that rescales through a positive difference (to a's frame, or to the mean of the
# maxima, then on to m) is right in exact arithmetic and passed every case above: it
# overflows only when the maxima are far apart (R5 cold review, finding 9)
FAR = "maxima 2000 apart: exp of a positive difference of maxima overflows"
MERGE_CASES = [
    (_state([2.0], [1.5]), _state([0.5], [2.0]),
     f"a = ([2], [1.5]), b = ([0.5], [2]) ({A_TOP})"),
    (_state([0.0], [2.0]), _state([3.0], [1.25]), f"a = ([0], [2]), b = ([3], [1.25]) ({B_TOP})"),
    (_state([1.0], [1.5]), _state([1.0], [1.0]), "a = ([1], [1.5]), b = ([1], [1]) (a tie)"),
    (_state([1000.0], [1.0]), _state([990.0], [2.0]),
     f"a = ([1000], [1]), b = ([990], [2]) ({HUGE}; {A_TOP})"),
    (_state([-1010.0], [1.5]), _state([-1000.0], [1.0]),
     f"a = ([-1010], [1.5]), b = ([-1000], [1]) ({TINY}; {B_TOP})"),
    (_state([-1000.0], [2.0]), _state([1000.0], [1.0]),
     f"a = ([-1000], [2]), b = ([1000], [1]) ({FAR}; {B_TOP})"),
    (_state([-INF], [0.0]), _state([5.0], [1.5]), f"a = ([-inf], [0]), b = ([5], [1.5]) ({DEAD})"),
    (_state([4.0], [3.0]), _state([-INF], [0.0]), f"a = ([4], [3]), b = ([-inf], [0]) ({DEAD})"),
    (_state([-INF], [0.0]), _state([-INF], [0.0]), f"a = ([-inf], [0]), b = ([-inf], [0]) "
                                                   f"({BOTH_DEAD})"),
]

_MERGE_HINT = ("each s is a sum of exp(x_j - its own maximum). Against the new maximum "
               "m = max(m_a, m_b) each must be rescaled by exp(its maximum - m), a factor <= 1, "
               "and then the two sums add.")
_MERGE_MAX_HINT = ("the maximum of the union of two blocks is the larger of their two maxima "
                   "(not their sum, nor the smaller one).")
_MERGE_OVERFLOW_HINT = ("an exponential overflowed or underflowed: never exponentiate a "
                        "maximum itself. Only differences m_a - m and m_b - m (<= 0) go "
                        "into exp.")
_MERGE_NAN_HINT = ("for two empty states the new maximum is -inf, and m_a - m = -inf - (-inf) "
                   "is NaN. The union of two empty blocks is empty: (-inf, 0). Which "
                   "difference can you use instead where the maximum is -inf?")
_MERGE_DTYPE_HINT = ("compute in the states' dtype (no .float() on the way): float32 keeps "
                     "about 7 significant digits, float64 about 16.")


def _merge_batch_cases():
    """A float64 batch: states of random blocks (public in a notebook, salted under the
    grader), with an empty state in some rows and ties in others."""
    g = check_generator(2021)
    x_a = 30.0 * torch.randn(12, 5, generator=g, dtype=torch.float64)
    x_b = 30.0 * torch.randn(12, 5, generator=g, dtype=torch.float64)
    x_a[3] = -INF
    x_b[7] = -INF
    x_b[5] = x_a[5]  # a tie

    def state(x):
        m = x.amax(-1)
        safe = torch.where(torch.isneginf(m), 0.0, m)
        return m, torch.exp(x - safe[:, None]).sum(-1)

    cases = [(state(x_a), state(x_b), "a batch of 12 states of random blocks, float64 (an "
                                      "empty state in two rows, a tie in one)")]
    if check_salt():
        shift = float(torch.empty(1).uniform_(600.0, 1100.0, generator=g))
        sign = 1.0 if bool(torch.rand(1, generator=g) < 0.5) else -1.0
        x = sign * shift + torch.randn(2, 6, 4, generator=g, dtype=torch.float64)
        cases.append((state(x[0]), state(x[1]), f"a batch of 6 states with maxima near "
                                                f"{sign * shift:.0f}, float64"))
    return cases


@exercise("softmax-lse-merge", "merge two states of the online log-sum-exp")
def _check_lse_merge(merge_states):
    cases = [(a, b, d) for a, b, d in MERGE_CASES] + _merge_batch_cases()
    for a, b, desc in cases:
        args = (tuple(t.clone() for t in a), tuple(t.clone() for t in b))
        with _merge_library_forbidden():
            got = _call(merge_states, *args, desc=desc, forbid=_NO_MERGE, reason=_NO_MERGE_REASON)
        for passed, original, name in zip(args[0] + args[1], a + b,
                                          ("a[0]", "a[1]", "b[0]", "b[1]")):
            _expect_unchanged(passed, original, name, desc)
        m_want, s_want = _merge_reference(a, b)
        expect_true(isinstance(got, (tuple, list)) and len(got) == 2
                    and all(isinstance(t, torch.Tensor) for t in got),
                    f"for input {desc} your function should return a pair (m, s) of tensors, "
                    f"got {describe(got)}.",
                    hint="return the state of the union, (m, s), not its log-sum-exp.")
        m_got, s_got = got
        if bool(torch.isnan(m_got).any()) or bool(torch.isnan(s_got).any()):
            nan_hint = (_MERGE_NAN_HINT if BOTH_DEAD in desc or "empty" in desc else
                        _MERGE_OVERFLOW_HINT if any(k in desc for k in (HUGE, TINY, FAR))
                        else _MERGE_HINT)
            expect_true(False, f"for input {desc} your result contains NaN: m = "
                               f"{describe(m_got)}, s = {describe(s_got)}.", hint=nan_hint)
        for t, what in ((m_got, "m"), (s_got, "s")):
            # the task asks for the states' dtype: a wider one (float64 results for
            # float32 states) is rejected too (R5 cold review, finding 5)
            expect_true(t.dtype == s_want.dtype,
                        f"for input {desc} your {what} is {t.dtype}, for {s_want.dtype} "
                        f"states.", hint=_MERGE_DTYPE_HINT)
        expect_close(m_got, m_want, input_desc=desc, rtol=0, atol=0, what="maximum m",
                     hint=_MERGE_MAX_HINT)
        hint = _MERGE_HINT
        if any(k in desc for k in (HUGE, TINY, FAR)) and (bool(torch.isinf(s_got).any())
                                              or bool((s_got == 0).any())):
            hint = _MERGE_OVERFLOW_HINT
        rtol = 1e-12 if s_want.dtype == torch.float64 else 1e-6
        expect_close(s_got, s_want, input_desc=desc, rtol=rtol, atol=0, what="sum s",
                     hint=hint)
    return len(cases)
