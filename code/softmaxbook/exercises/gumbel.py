"""Checks for the coding exercises of the chapter "Gumbel tricks" (book/07_gumbel.ipynb).

The labels are the exercises' labels in the chapter (``gumbel-ex-...``), so that the task, its
solution and its check carry one name.

* ``gumbel-ex-max-sampler``: one categorical sample per row by the Gumbel-max trick, each class
  with its own Gumbel, drawn from the ``generator`` argument (the recipe that shares one Gumbel
  across classes, ``torch.multinomial`` / ``Categorical.sample``, the package's own samplers and
  torch's global generator are caught).
* ``gumbel-ex-truncated-inverse``: the inverse CDF of a Gumbel truncated at ``upper``, written so
  that it neither overflows nor cancels.
* ``gumbel-ex-plackett-luce``: the log-probability of an ordered draw without replacement, accurate
  relative to its size even when the drawn items hold almost all of the mass (compared with a
  relative tolerance only: the answer for [40, 0, -40], order [0, 1] is -8.5e-18).
* ``gumbel-ex-race-key``: the Efraimidis-Spirakis reservoir key ``u ** (1 / w)`` sent through
  ``-log(-log .)``, i.e. ``log w - log(-log u)``, right where the key itself rounds to 0 or 1
  (log-weights of +-1000) and where ``u`` is within 1e-12 of 1.
* ``gumbel-ex-max-of-gumbels`` (a derivation's end result): ``max_location(mu, n)``, the location
  ``mu + log n`` of the maximum of ``n`` i.i.d. Gumbels with location ``mu`` (the mean and the
  Gaussian's ``sqrt(2 log n)`` get hints of their own).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from unittest import mock

import numpy as np
import torch
from scipy import stats

from . import _ForbiddenCall, call, check_generator, check_salt, describe, exercise, \
    expect_close, expect_true
from . import fail_at_worst_entry
from .. import gumbel as _gumbel
from ..gumbel import plackett_luce_log_prob

# ------------------------------------------------------------------------------------------------
# The exercise asks for the Gumbel-max trick written out: uniforms from the `generator` argument,
# -log(-log U), argmax. Ready-made categorical samplers answer a different question.
_NO_SHORTCUT = {torch.multinomial: "torch.multinomial (Categorical(...).sample calls it too)"}
_NO_SHORTCUT_REASON = ("Write the Gumbel-max trick yourself: uniforms from "
                       "torch.rand(..., generator=generator), then -log(-log U), then argmax.")


@contextmanager
def _package_samplers_forbidden():
    """While active, the package's Gumbel samplers raise (they all draw their noise through
    ``softmaxbook.gumbel._standard_gumbel``, looked up at call time, so this also catches a name
    the learner imported before the check ran)."""
    saved = _gumbel._standard_gumbel

    def tripwire(*args, **kwargs):
        raise _ForbiddenCall("a sampler from softmaxbook.gumbel (gumbel_max, sample_gumbel, ...)")

    _gumbel._standard_gumbel = tripwire
    try:
        yield
    finally:
        _gumbel._standard_gumbel = saved


def _uniform_bounds(args, kwargs):
    """``(from, to)`` of a ``Tensor.uniform_(from=0, to=1, *, generator=None)`` call."""
    low = args[0] if len(args) > 0 else kwargs.get("from", 0.0)
    high = args[1] if len(args) > 1 else kwargs.get("to", 1.0)
    return float(low), float(high)


def _call_sampler(sampler, logits, gen, desc):
    """Run the learner's sampler with every shortcut forbidden and torch's global generator
    watched (a sampler must draw only from its ``generator`` argument)."""
    with _package_samplers_forbidden():
        return call(sampler, logits, gen, input_desc=desc, forbid=_NO_SHORTCUT,
                    forbid_reason=_NO_SHORTCUT_REASON, no_global_rng=True)


# (logits, the rare classes, the generator's seed, rows). [0, -6.5]: class 1 has probability
# 1.5e-3, 30 expected draws in 20 000 rows; [3, 0, -3, -6]: classes 2 and 3 together 2.5e-3, 50
# expected draws. [0, -8] in 200 000 rows (3.4e-4, 67 expected draws) catches milder clamps,
# which the first two miss (independent review): U clamped to [1e-3, 1 - 1e-3] bounds G to
# [-1.93, 6.91] and draws class 1 of [0, -8] with 0.20 of its probability (exact, by quadrature
# over the clamped law), which the test below rejects with probability > 0.999, while on
# [0, -6.5] the same clamp keeps 0.855 of it and passes; a clamp at 3e-3 (0.40 of it on
# [0, -6.5], rejected there with probability 0.085 only) never draws class 1 here. A clamp at
# 1e-4 keeps 0.96 of the probability and passes: below what 200 000 rows can see.
_TAIL_CASES = [([0.0, -6.5], [1], 11, 20000), ([3.0, 0.0, -3.0, -6.0], [2, 3], 12, 20000),
               ([0.0, -8.0], [1], 13, 200000)]


def _tail_test(idx, logits, rare):
    """Exact two-sided binomial test of the count of the ``rare`` classes among ``idx``.
    Returns ``(p-value, observed share, exact share)``; a p-value of 0 for a malformed result."""
    want = float(torch.softmax(logits, 0)[rare].sum())
    if not isinstance(idx, torch.Tensor) or idx.is_floating_point() or idx.dim() != 1:
        return 0.0, float("nan"), want
    n = idx.numel()
    k = int(sum(int((idx == r).sum()) for r in rare))
    return float(stats.binomtest(k, n, want).pvalue), k / max(n, 1), want


@exercise("gumbel-ex-max-sampler", "Gumbel-max sampler")
def _check_max_sampler(sampler):
    """``sampler(logits, generator)`` -> LongTensor of shape logits.shape[:-1]."""
    logits = torch.tensor([1.0, 0.0, -1.0, 0.5], dtype=torch.float64)
    n = 20000
    # fixed test inputs in a notebook (a check is deterministic given the learner's function);
    # under the grader every generator's seed changes with its secret salt
    gen = check_generator(2024)
    desc = f"logits = {logits.tolist()} repeated in {n} rows"
    given = logits.expand(n, 4).clone()
    idx = _call_sampler(sampler, given, gen, desc)
    # a sampler must leave the caller's logits as they were (independent review: one that
    # added the noise in place, logits.sub_(log(-log U)), passed)
    expect_true(torch.equal(given, logits.expand(n, 4)),
                f"for input {desc} your sampler changed the logits it was given: the caller's "
                f"tensor came back perturbed by the noise.",
                hint="add the noise out of place (logits - torch.log(-torch.log(u))), not with "
                     "an in-place method such as sub_ or add_.")
    expect_true(isinstance(idx, torch.Tensor) and not idx.is_floating_point(),
                f"for input {desc} the result should be an integer tensor of class indices, got "
                f"{type(idx).__name__}"
                + (f" of dtype {idx.dtype}" if isinstance(idx, torch.Tensor) else ""),
                hint="return class indices (what argmax returns), not the noisy scores or "
                     "probabilities.")
    expect_true(tuple(idx.shape) == (n,),
                f"for input {desc} the result should have shape ({n},): one class per row; got "
                f"shape {tuple(idx.shape)}.",
                hint="take the argmax over the last dimension, one class per row, without "
                     "keeping that dimension.")
    expect_true(bool(((idx >= 0) & (idx < 4)).all()),
                f"for input {desc} some indices are outside [0, 4).")
    # logits of shape (..., n): any number of leading dimensions, also none (a sampler that
    # takes the argmax over dim=1, or draws torch.rand(logits.size(0), logits.size(1)), only
    # works for 2-D logits)
    for shape in ((4,), (3, 5, 4)):
        desc_s = f"logits = {logits.tolist()} broadcast to shape {shape}"
        out = _call_sampler(sampler, logits.expand(shape).clone(),
                            check_generator(5), desc_s)
        got_shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        expect_true(isinstance(out, torch.Tensor) and tuple(out.shape) == shape[:-1],
                    f"for input {desc_s} the result should have shape {shape[:-1]}: one class "
                    f"per row, whatever the number of leading dimensions; got {got_shape}.",
                    hint="logits have shape (..., n): the classes are always the last "
                         "dimension, and there may be no leading dimension or several.")
    counts = torch.bincount(idx, minlength=4).numpy()
    p = torch.softmax(logits, 0).numpy()
    if counts[0] == n:
        expect_true(False, f"every one of the {n} rows returned class 0, the largest logit: the "
                    "sampler is deterministic.",
                    hint="each class needs its own Gumbel: draw noise of the same shape as logits, "
                         "not one number per row (a shared G shifts every score equally and "
                         "never changes the argmax). Check also that the noise is never NaN "
                         "(the log of a negative number): argmax returns the first NaN's "
                         "index, here 0.")
    pval = stats.chisquare(counts, n * p).pvalue
    # The inputs and the generator's seed are fixed, so the check is deterministic: a right
    # sampler gives the same counts every time. Over all seeds, a right sampler would fall below
    # 1e-6 once in a million seeds; the wrong samplers in tests/test_exercises_gumbel.py give
    # p < 1e-30.
    expect_true(pval > 1e-6,
                f"for input {desc} the class frequencies {np.round(counts / n, 3).tolist()} do "
                f"not match softmax(logits) = {np.round(p, 3).tolist()} "
                f"(chi-square p = {pval:.2g}).",
                hint="check the noise: a standard Gumbel is -log(-log U) for U uniform on (0, 1), "
                     "and it is added to the logits, not to the probabilities.")
    # Unbalanced logits, where the answer depends on the Gumbel's tails: a sampler whose noise is
    # bounded (U clamped to [0.01, 0.99] bounds G to [-1.53, 4.60], so no class 6.13 or more below
    # the best can ever win) passes the balanced test above but never draws the rare classes
    # here (review of the third edition). The count of the rare classes is compared with its
    # exact binomial law (scipy's exact two-sided binomial test): a right sampler fails it with
    # probability at most 1e-6 per case (the inputs and seeds are fixed, so for a given sampler
    # the outcome is too). Measured: 3000 generator seeds x 2 cases with the reference sampler,
    # no rejection, smallest p-value 8.5e-5, 0.7 % of them below 0.01 (the exact test is
    # conservative); the [0, -8] case over 1000 seeds: see tests/test_exercises_gumbel.py.
    for tail_logits, rare, tail_seed, tail_rows in _TAIL_CASES:
        tl = torch.tensor(tail_logits, dtype=torch.float64)
        desc_t = f"logits = {tail_logits} repeated in {tail_rows} rows"
        out = _call_sampler(sampler, tl.expand(tail_rows, len(tail_logits)).clone(),
                            check_generator(tail_seed), desc_t)
        pval, got_share, want_share = _tail_test(out, tl, rare)
        expect_true(pval > 1e-6,
                    f"for input {desc_t} the classes {rare} came out in a share "
                    f"{got_share:.2e} of the rows, but softmax(logits) gives them "
                    f"{want_share:.2e} (exact binomial test p = {pval:.2g}).",
                    hint="rare classes win only when their Gumbel noise is large, or the others' "
                         "very negative: the noise must cover the whole real line. Clamp U only "
                         "to the smallest positive float and the largest float below 1 (see "
                         "torch.finfo), not to a wider margin such as [0.01, 0.99].")
    # Reproducible and driven by the generator: the same seed gives the same classes, another
    # seed other classes (a sampler that makes its own generator gives the same classes twice).
    desc2 = f"logits = {logits.tolist()} repeated in 200 rows, two generators"
    rows = logits.expand(200, 4).clone()
    a = _call_sampler(sampler, rows.clone(), check_generator(7), desc2)
    b = _call_sampler(sampler, rows.clone(), check_generator(7), desc2)
    c = _call_sampler(sampler, rows.clone(), check_generator(8), desc2)
    expect_true(torch.equal(torch.as_tensor(a), torch.as_tensor(b)),
                f"for input {desc2} seeded alike, your sampler returned different classes: its "
                f"draws do not all come from the `generator` argument.",
                hint="pass generator=generator to every random draw.")
    expect_true(not torch.equal(torch.as_tensor(a), torch.as_tensor(c)),
                f"for input {desc2} seeded differently, your sampler returned the same "
                f"200 classes: it ignores the `generator` argument.",
                hint="draw the uniforms with torch.rand(..., generator=generator), the generator "
                     "the caller passes, not one you create.")
    # -inf means impossible
    lg = torch.tensor([0.0, -math.inf, 0.0], dtype=torch.float64).expand(2000, 3).clone()
    idx = _call_sampler(sampler, lg, check_generator(1), "logits = [0, -inf, 0]")
    expect_true(bool((idx != 1).all()),
                "for logits = [0, -inf, 0] the sampler returned the impossible class 1.",
                hint="-inf + G is -inf, which never wins an argmax as long as G is finite: "
                     "keep U away from 0 and 1, so that G is never +inf.")
    # torch.rand draws from [0, 1), and U = 0 does come out (once in 2^24 float32 draws). An
    # unclamped sampler turns it into G = -inf; if that hits the only possible class of a row,
    # every score is -inf and argmax returns index 0 -- here the impossible class. Such a rare
    # event cannot be sampled in a check, so we make torch.rand return zeros while the learner's
    # function runs, and Tensor.uniform_ too, which also samples [0, 1) (a sampler that draws
    # no uniforms, e.g. -log of an exponential draw, is not affected and passes).
    real_rand = torch.rand

    def zero_rand(*args, **kwargs):
        return torch.zeros_like(real_rand(*args, **kwargs))

    def zero_uniform_(self, *args, **kwargs):
        # U = 0 is uniform_(a, b)'s value a (R4 review: filling 0 whatever the bounds rejected
        # the right uniform_(tiny, 1), which never returns 0)
        return self.fill_(_uniform_bounds(args, kwargs)[0])

    desc = "logits = [-inf, 0] while torch.rand returns 0"
    lg = torch.tensor([-math.inf, 0.0], dtype=torch.float64).expand(8, 2).clone()
    with mock.patch.object(torch, "rand", zero_rand), \
            mock.patch.object(torch.Tensor, "uniform_", zero_uniform_):
        idx = _call_sampler(sampler, lg, check_generator(3), desc)
    expect_true(bool((torch.as_tensor(idx) == 1).all()),
                "when torch.rand returns 0 (it samples [0, 1), so it can; Tensor.uniform_ "
                "too), your sampler returned the impossible class 0 for logits = [-inf, 0].",
                hint="at U = 0, -log(-log U) is -inf: every score becomes -inf and argmax picks "
                     "index 0. Keep U inside the open interval (torch.finfo has the smallest "
                     "positive float and the spacing below 1).")
    # The task also forbids keeping U further from 0 and 1 than the open interval needs, which
    # no sample can check: U clamped to [1e-6, 1 - 1e-6] bounds G to [-2.6, 13.8], so a class
    # 15 below the best (probability 3e-7) can never win, and the tail cases above cannot see
    # a clamp tighter than about 1e-4 (R3 review). So, as for U = 0, we choose the uniforms:
    # 1/2 for class 0 of logits [0, -15] (G = 0.37) and, for class 1, the value of torch.rand
    # next to 1 in one row and next to 0 in the other (whichever end the learner's noise map
    # sends to +inf). Unclamped or clamped to [tiny, 1 - eps/2], class 1 wins one of them (its
    # G is 16.6 from float32 uniforms, 36.7 from float64 ones, above 15.37); a clamp at 1e-6
    # caps it at 13.8 and class 0 wins both. A sampler that draws no uniforms is not tested.
    # The uniforms' layout: one draw of the logits' shape (or as many numbers, row-major), its
    # transpose, or one draw per class of the rows' shape, class 0 first (R4 review: a sampler
    # drawing a column per class got 0.5, far, 0.5, far in both classes, so class 0 always won
    # and the check blamed the tails of a right sampler).
    drawn = []
    rows, classes = 4, 2

    def extremes(u):
        if not u.is_floating_point():
            return u
        half = torch.finfo(u.dtype).eps / 2  # rand's grid step: 2^-24 (float32), 2^-53
        i = torch.arange(u.numel())
        if u.numel() == rows:  # one draw per class: the class is the number of earlier draws
            cls = torch.full_like(i, min(sum(1 for n in drawn if n == rows), classes) - 1)
            row = i
        elif tuple(u.shape) == (classes, rows):  # drawn transposed
            cls, row = i // rows, i % rows
        else:  # the logits' shape, row-major
            cls, row = i % classes, i // classes
        far = torch.where(row % 2 == 0, torch.tensor(1 - half, dtype=torch.float64),
                          torch.tensor(half, dtype=torch.float64))
        return torch.where(cls == 0, 0.5, far).to(u.dtype).reshape(u.shape)

    def extreme_rand(*args, **kwargs):
        u = real_rand(*args, **kwargs)
        drawn.append(u.numel())
        return extremes(u)

    def extreme_uniform_(self, *args, **kwargs):
        drawn.append(self.numel())
        low, high = _uniform_bounds(args, kwargs)  # values in uniform_'s own [low, high)
        return self.copy_(low + (high - low) * extremes(self))

    desc = ("logits = [0, -15] in 4 rows while torch.rand returns 1/2 for class 0 and its "
            "values next to 1 and next to 0 for class 1")
    lg = torch.tensor([0.0, -15.0], dtype=torch.float64).expand(rows, classes).clone()
    with mock.patch.object(torch, "rand", extreme_rand), \
            mock.patch.object(torch.Tensor, "uniform_", extreme_uniform_):
        idx = _call_sampler(sampler, lg, check_generator(4), desc)
    if drawn:
        expect_true(bool((torch.as_tensor(idx) == 1).any()),
                    f"for {desc}, class 1 never won: your Gumbel noise stops short of its tail, "
                    "so a class 15 below the best can never be drawn (its probability is 3e-7, "
                    "not 0).",
                    hint="keep U away from 0 and 1 only as far as the open interval needs: clamp "
                         "to the smallest positive float and the largest float below 1 "
                         "(torch.finfo: tiny and 1 - eps/2). A clamp such as [1e-6, 1 - 1e-6] "
                         "caps the noise at 13.8.")
    return 5 + len(_TAIL_CASES)


# ------------------------------------------------------------------------------------------------
def _truncated_reference(u, loc, upper):
    g = loc - torch.log(-torch.log(u))
    return -torch.logaddexp(-upper, -g)


@exercise("gumbel-ex-truncated-inverse", "inverse CDF of a truncated Gumbel")
def _check_truncated_inverse(inverse):
    """``inverse(u, loc, upper)`` -> tensor, elementwise."""
    f64 = dict(dtype=torch.float64)
    cases = [
        ("moderate", torch.tensor([0.1, 0.5, 0.9], **f64), torch.tensor([0.0, 1.0, -1.0], **f64),
         torch.tensor([0.5, 0.5, 0.5], **f64)),
        ("loc far below upper", torch.tensor([0.2, 0.7], **f64),
         torch.tensor([-50.0, -800.0], **f64), torch.tensor([0.0, 0.0], **f64)),
        ("loc far above upper", torch.tensor([0.2, 0.7], **f64),
         torch.tensor([800.0, 1000.0], **f64), torch.tensor([0.0, 3.0], **f64)),
    ]
    if check_salt():  # the grader's secret salt: random u, loc far below and above upper
        g = check_generator(89)
        u = 0.02 + 0.96 * torch.rand(6, generator=g, **f64)
        upper = 4 * torch.randn(6, generator=g, **f64)
        loc = upper + torch.tensor([-900.0, -60.0, -1.0, 1.0, 60.0, 900.0], **f64) * (
            0.5 + torch.rand(6, generator=g, **f64))
        cases.append(("random", u, loc, upper))
    hints = {
        "moderate": "solve u = F(g) for g, with F(g) = exp(exp(loc - upper) - exp(loc - g)) the "
                    "truncated CDF: take the log twice.",
        "loc far below upper": "the truncation hardly matters here, so the result is close to "
                               "the plain Gumbel that the same u gives; look for a step that "
                               "overflows (e^x with x in the hundreds) or loses its digits.",
        "loc far above upper": "exp(loc - upper) overflows here. Rewrite the inverse in terms of "
                               "the plain Gumbel G that the same u gives (the chapter shows a "
                               "second form), and evaluate log(e^a + e^b) with a torch function "
                               "that does not overflow.",
        "random": "loc lies far below or far above upper in some entries: solve u = F(g) for "
                  "g in a form that neither overflows (e^x with x in the hundreds) nor loses "
                  "its digits, e.g. in terms of the plain Gumbel G that the same u gives.",
    }
    for name, u, loc, upper in cases:
        desc = f"u = {u.tolist()}, loc = {loc.tolist()}, upper = {upper.tolist()} ({name})"
        args = (u.clone(), loc.clone(), upper.clone())
        got = call(inverse, *args, input_desc=desc)
        # R4 review: an inverse that overwrote u (u.log_()) passed
        expect_true(all(torch.equal(a, b) for a, b in zip(args, (u, loc, upper))),
                    f"for input {desc} your function changed its arguments in place.",
                    hint="compute new tensors; do not use in-place methods such as log_ on u.")
        if isinstance(got, torch.Tensor) and got.is_floating_point() and got.dtype != u.dtype:
            expect_true(False, f"for input {desc} (float64) your result is {got.dtype}: it "
                        f"lost precision on the way.",
                        hint="compute in the dtype of the inputs; do not convert to float32.")
        hint = hints[name]
        # The source notes' slip (SOURCE-ERRATA, erratum 31): "-u" where the inverse has "-log u"
        # (told apart only on moderate inputs: elsewhere both forms overflow alike).
        minus_u = loc - torch.log(torch.exp(loc - upper) - u)
        if (name == "moderate" and isinstance(got, torch.Tensor) and got.shape == u.shape
                and torch.allclose(got.to(torch.float64), minus_u, rtol=1e-9, atol=1e-9,
                                   equal_nan=True)):
            hint = ("your result matches loc - log(exp(loc - upper) - u), the source notes' slip: "
                    "check the term that u enters through when you solve u = F(g).")
        expect_close(got, _truncated_reference(u, loc, upper), input_desc=desc, rtol=1e-9,
                     atol=1e-9, hint=hint)
    u = torch.tensor([1e-12, 0.5, 1 - 1e-12], **f64)
    got = call(inverse, u, torch.zeros(3, **f64), torch.full((3,), 0.25, **f64),
               input_desc="u near 0 and 1, loc = 0, upper = 0.25")
    expect_true(bool((torch.as_tensor(got) <= 0.25).all()),
                "some results are above 'upper': a truncated Gumbel never exceeds its truncation.")
    return len(cases) + 1


# ------------------------------------------------------------------------------------------------
@exercise("gumbel-ex-plackett-luce", "Plackett-Luce log-probability")
def _check_plackett_luce(log_prob):
    """``log_prob(logits, order)``: logits a 1-D tensor, order a list of distinct ints."""
    f64 = dict(dtype=torch.float64)
    cases = [
        (torch.tensor([1.0, 0.0, -0.5, 0.7], **f64), [0]),
        (torch.tensor([1.0, 0.0, -0.5, 0.7], **f64), [3, 0]),
        (torch.tensor([1.0, 0.0, -0.5, 0.7], **f64), [2, 1, 3, 0]),
        (torch.tensor([0.0, -math.inf, 2.0], **f64), [2, 0]),
        # probability e^-800: it underflows in float64, its log does not
        (torch.tensor([0.0, -400.0, -400.0], **f64), [1, 2]),
        (torch.tensor([40.0, 0.0, -40.0], **f64), [0, 1]),
        # the first item drawn, then one of two items 400 below it: log(1/2) = -0.693. Drawn
        # items masked with a finite -100 instead of -inf stay in the second normaliser and
        # give -300 (review of the third edition: only order [1, 2] was tested on these logits)
        (torch.tensor([0.0, -400.0, -400.0], **f64), [0, 1]),
        # the same with the other two items 1e12 below: a drawn item masked with any finite
        # number above about -1e12 (-1e4, -1e9, ...) stays in the second normaliser and swamps
        # them (R3 review: masks of -1000 and -1e4 passed); the answer is still log(1/2)
        (torch.tensor([0.0, -1e12, -1e12], **f64), [0, 1]),
        # ... and 1e300 below (R4 review: masks of -1e13, -1e15 and -1e300 passed): now every
        # finite mask from -1e300 up is caught; below it, exp makes a mask exact for every
        # float64 logit the check passes
        (torch.tensor([0.0, -1e300, -1e300], **f64), [0, 1]),
        # one factor of probability e^-800: log(1 + e^800), written log1p(exp(800)), overflows
        # to inf (R3 review: it passed, no factor was below e^-709)
        (torch.tensor([0.0, -800.0], **f64), [1]),
    ]
    if check_salt():  # the grader's secret salt: random logits on mixed scales, -inf included
        g = check_generator(97)
        lg = torch.randn(6, generator=g, **f64) * torch.tensor(
            [1.0, 1.0, 5.0, 30.0, 300.0, 1.0], **f64)[torch.randperm(6, generator=g)]
        perm = torch.randperm(6, generator=g).tolist()
        lg[perm[-1]] = -math.inf
        cases.append((lg, perm[:4]))
    for logits, order in cases:
        desc = f"logits = {logits.tolist()}, order = {order}"
        given = logits.clone()
        got = call(log_prob, given, list(order), input_desc=desc)
        expect_true(torch.equal(given, logits),
                    f"for input {desc} your function changed the logits it was given: they came "
                    f"back as {given.tolist()}. A caller's tensor must be left as it was (a "
                    f"second call on the same logits would see the drawn items removed).",
                    hint="remove drawn items from a copy of the logits, not from the logits "
                         "themselves.")
        if isinstance(got, torch.Tensor) and got.dtype == torch.float32:
            expect_true(False, f"for input {desc} (float64) your result is torch.float32: it "
                        f"lost precision on the way.",
                        hint="compute in the dtype of the logits; do not convert to float32.")
        expected = plackett_luce_log_prob(logits, torch.tensor(order))
        hint = ("take the log of the Plackett-Luce product one draw at a time: each factor "
                "normalises over the items not drawn yet, not over all of them.")
        if logits[0] == 40.0:
            hint = ("the first item holds almost all the mass, so subtracting the drawn mass from "
                    "the total cancels (e^40 + 1 - e^40 is 0 in float64). Compute each step's "
                    "normaliser from the remaining items themselves.")
            if isinstance(got, torch.Tensor) and got.numel() == 1 and bool(
                    (got.detach().double() - expected).abs() <= 1e-15):
                hint = ("right to 15 decimal places, but the answer itself is about -8.5e-18 and "
                        "must be right relative to its size: x_i - logsumexp(remaining) rounds "
                        "40 - (40 + 4e-18) to 0. Write each factor as -log(1 + sum of exp(x_l - "
                        "x_i)) over the other remaining items l, with a function that keeps the "
                        "digits of log(1 + tiny).")
        if logits[1] == -400.0:
            hint = ("this order has probability about e^-800, below the smallest positive "
                    "float64 (about e^-745): a product of probabilities underflows to 0 before "
                    "its log is taken. Add log-probabilities instead.")
        if logits.numel() == 2 and logits[1] == -800.0:
            hint = ("this order has probability about e^-800: its factor is -log(1 + e^a) with "
                    "a = 800, and e^800 overflows float64 (above e^709) before the log is "
                    "taken. Use a function that computes log(1 + e^a) without forming e^a.")
        if order == [0, 1] and float(logits[1]) in (-1e12, -1e300) and \
                isinstance(got, torch.Tensor) and \
                got.numel() == 1 and float(got) < -1.0:
            hint = ("the second factor should be log(1/2): two equally likely items remain. A "
                    "drawn item masked with a large but finite negative number is still in the "
                    "normaliser, here far above the remaining items; mask it with a value that "
                    "exp turns into exactly 0 whatever the other logits are.")
        if order == [0, 1] and logits[1] == -400.0 and isinstance(got, torch.Tensor) and \
                got.numel() == 1 and abs(float(got) + 300.0) < 1e-6:
            hint = ("the second factor should be log(1/2): two equally likely items remain. A "
                    "drawn item masked with a large negative number (e.g. -100) is still in the "
                    "normaliser, here far above the remaining ones; mask it with a value that "
                    "exp turns into exactly 0.")
        # relative: the answer for [40, 0, -40] is about -8.5e-18, so an absolute tolerance
        # would accept 0 (review of the third edition)
        expect_close(torch.as_tensor(got, **f64), expected, input_desc=desc, rtol=1e-9,
                     atol=0.0, hint=hint)
    # probabilities of all ordered pairs of 4 items sum to one
    logits = torch.tensor([1.0, 0.0, -0.5, 0.7], **f64)
    total = sum(math.exp(float(call(log_prob, logits.clone(), [a, b],
                                    input_desc=f"order = {[a, b]}")))
                for a in range(4) for b in range(4) if a != b)
    expect_true(abs(total - 1) < 1e-9,
                f"the probabilities of the 12 ordered pairs of 4 items sum to {total:.6g}, not 1.")
    return len(cases) + 1


# ------------------------------------------------------------------------------------------------
# gumbel-ex-max-of-gumbels: the location of the maximum of n i.i.d. Gumbel(mu)
_EULER_GAMMA = 0.5772156649015329  # the mean of a standard Gumbel


def _max_location_cases():
    f64 = dict(dtype=torch.float64)
    g = check_generator(61)  # public in a notebook; the grader's secret salt changes it
    n_rand = torch.randint(1, 10**6, (200,), generator=g).to(torch.float64)
    return [
        ("one Gumbel (n = 1) and small n", torch.tensor([0.0, 2.5, -3.0, 0.0, 0.0, 1.5], **f64),
         torch.tensor([1.0, 1.0, 1.0, 2.0, 3.0, 10.0], **f64)),
        ("standard Gumbels (mu = 0), n up to 10^12", torch.zeros(4, **f64),
         torch.tensor([4.0, 100.0, 1e6, 1e12], **f64)),
        ("200 random mu ~ N(0, 10^2), n from 1 to 10^6", 10 * torch.randn(200, generator=g, **f64),
         n_rand),
        ("a [3, 4] batch", torch.randn(3, 4, generator=g, **f64),
         torch.randint(1, 50, (3, 4), generator=g).to(torch.float64)),
    ]


@exercise("gumbel-ex-max-of-gumbels", "location of the maximum of n Gumbels")
def _check_max_location(max_location):
    """``max_location(mu, n)`` -> tensor of the shape of ``mu`` and ``n``, elementwise."""
    cases = _max_location_cases()
    for name, mu, n in cases:
        desc = f"mu = {describe(mu)}, n = {describe(n)} ({name})"
        mu_in, n_in = mu.clone(), n.clone()
        got = call(max_location, mu_in, n_in, input_desc=desc)
        expect_true(torch.equal(mu_in, mu) and torch.equal(n_in, n),
                    f"for input {desc} your function changed its arguments in place.",
                    hint="compute a new tensor; do not use in-place methods such as add_ on mu.")
        if isinstance(got, torch.Tensor) and got.is_floating_point() and got.dtype != mu.dtype:
            expect_true(False, f"for input {desc} (float64) your result is {got.dtype}: return "
                               "the inputs' dtype.")
        expected = mu + torch.log(n)
        hint = ("set every mu_i = mu in logsumexp_i mu_i. Try n = 1 first: the maximum of one "
                "Gumbel is that Gumbel.")
        if isinstance(got, torch.Tensor) and got.shape == mu.shape:
            g64 = got.detach().to(torch.float64)
            if torch.allclose(g64, expected + _EULER_GAMMA, rtol=1e-9, atol=1e-9):
                hint = ("your result is off by Euler's constant 0.5772 everywhere: that is the "
                        "mean of a Gumbel minus its location. The exercise asks for the "
                        "location.")
            elif torch.allclose(g64, mu + torch.sqrt(2 * torch.log(n)), rtol=1e-9, atol=1e-9):
                hint = ("sqrt(2 log n) is how the maximum of n standard normals grows; "
                        "Gumbels have heavier tails. Work from the Gumbel's CDF.")
        expect_true(isinstance(got, torch.Tensor) and got.is_floating_point()
                    and got.shape == mu.shape,
                    f"for input {desc} the location should be a float tensor of shape "
                    f"{tuple(mu.shape)} (one location per entry of mu and n), got "
                    f"{describe(got)}.", hint="work elementwise; do not reduce over a dimension.")
        # The message names the entry that is furthest off, not the expected values: a table of
        # them (log 2 = 0.693 beside n = 2) would hand out the answer to a derivation.
        g64 = got.detach().to(torch.float64)
        wrong = ~torch.isclose(g64, expected, rtol=1e-10, atol=1e-10)
        if bool(wrong.any()):
            fail_at_worst_entry(g64, expected, wrong, (g64 - expected).abs(),
                                lambda i: f"mu = {float(mu.flatten()[i]):.6g}, "
                                          f"n = {float(n.flatten()[i]):.6g}",
                                desc, "location", hint, 1e-3, digits=6)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# gumbel-ex-race-key: -log(-log(u ** (1 / w))) = log w - log(-log u), w = exp(log_weight)
def _race_key_reference(log_weight, u):
    return log_weight - torch.log(-torch.log(u))


def _race_key_cases():
    f64 = dict(dtype=torch.float64)
    g = check_generator(71)  # public in a notebook; the grader's secret salt changes it
    cases = [
        ("moderate", torch.tensor([0.0, 1.5, -2.0, 0.3], **f64),
         torch.tensor([0.3, 0.5, 0.9, 0.05], **f64)),
        ("large log-weights: u ** (1 / w) rounds to 1", torch.tensor([40.0, 800.0, 1000.0], **f64),
         torch.tensor([0.2, 0.5, 0.9], **f64)),
        ("small log-weights: u ** (1 / w) underflows to 0",
         torch.tensor([-40.0, -800.0, -1000.0], **f64), torch.tensor([0.2, 0.5, 0.9], **f64)),
        ("u near 0 and near 1", torch.tensor([0.0, 0.0, 2.0, -2.0], **f64),
         torch.tensor([1e-300, 1 - 1e-12, 1e-12, 1 - 1e-9], **f64)),
        ("a [2, 3] batch", 3 * torch.randn(2, 3, generator=g, **f64),
         0.01 + 0.98 * torch.rand(2, 3, generator=g, **f64)),
    ]
    if check_salt():  # the grader's secret salt: log-weights on every scale, u anywhere
        scale = torch.tensor([1.0, 10.0, 100.0, 1000.0], **f64)
        lw = torch.randn(4, 5, generator=g, **f64).clamp(-1, 1) * scale[:, None]
        u = torch.rand(4, 5, generator=g, **f64).clamp(1e-12, 1 - 1e-12)
        cases.append(("random log-weights on four scales", lw, u))
    return cases


def _race_key_diagnosis(got, log_weight, u):
    """A hint for a recognisable wrong formula, or None."""
    if not (isinstance(got, torch.Tensor) and got.shape == u.shape and got.is_floating_point()):
        return None
    g = got.detach().to(torch.float64)
    close = lambda other: bool(torch.allclose(g, other, rtol=1e-9, atol=1e-9))
    e = -torch.log(u)
    if close(log_weight + torch.log(e)):
        return ("the Gumbel that u gives is -log(-log u): check the sign of the term in u.")
    if close(-log_weight - torch.log(e)):
        return ("a larger weight must give a larger key (u ** (1 / w) grows with w): check the "
                "sign of the log-weight.")
    if close(log_weight - torch.log(-torch.log1p(-u))):
        return ("the key is built from u itself; 1 - u has the same law but another value, "
                "and the items would come out in another order.")
    if close(u ** torch.exp(-log_weight)) or close(torch.log(u) * torch.exp(-log_weight)):
        return ("that is the key u ** (1 / w) itself (or its log); the exercise asks for "
                "-log(-log(key)), which orders the items alike and stays accurate.")
    return None


@exercise("gumbel-ex-race-key", "the reservoir key in Gumbel form")
def _check_race_key(race_key):
    """``race_key(log_weight, u)`` -> tensor of their shape, elementwise."""
    cases = _race_key_cases()
    hints = {
        "moderate": "send u ** (1 / w) through -log(-log .) on paper and simplify: the log of a "
                    "power is a product.",
        "large log-weights: u ** (1 / w) rounds to 1": (
            "here 1 / w = e^-800 underflows to 0, so u ** (1 / w) is exactly 1 and -log(-log 1) "
            "is infinite. Simplify on paper first, so that the weight is never exponentiated."),
        "small log-weights: u ** (1 / w) underflows to 0": (
            "here 1 / w = e^800 overflows, so u ** (1 / w) is exactly 0. Simplify on paper "
            "first, so that the weight is never exponentiated."),
        "u near 0 and near 1": (
            "for u within 1e-12 of 1, -log u is about 1e-12: compute it as -log(u) from u "
            "itself, whose log is accurate; log(1 / u) loses its digits (1 / u rounds). For "
            "u = 1e-300, u - 1 rounds to -1 and 1 - u to 1: they forget u altogether."),
        "a [2, 3] batch": "work elementwise, whatever the shape.",
        "random log-weights on four scales": (
            "some log-weights are in the hundreds: never exponentiate them, and take -log u "
            "from u itself."),
    }
    for name, log_weight, u in cases:
        desc = f"log_weight = {describe(log_weight)}, u = {describe(u)} ({name})"
        args = (log_weight.clone(), u.clone())
        got = call(race_key, *args, input_desc=desc)
        expect_true(torch.equal(args[0], log_weight) and torch.equal(args[1], u),
                    f"for input {desc} your function changed its arguments in place.",
                    hint="compute new tensors; do not use in-place methods such as log_ on u.")
        if isinstance(got, torch.Tensor) and got.is_floating_point() and got.dtype != u.dtype:
            expect_true(False, f"for input {desc} (float64) your result is {got.dtype}: it "
                        f"lost precision on the way.",
                        hint="compute in the dtype of the inputs; do not convert to float32.")
        hint = _race_key_diagnosis(got, log_weight, u) or hints[name]
        expect_close(got, _race_key_reference(log_weight, u), input_desc=desc, rtol=1e-10,
                     atol=1e-10, what="key", hint=hint)
    return len(cases)
