"""Checks for the coding exercises of the chapter "Learning from choices" (book/02_choice)."""

from __future__ import annotations

import cmath
import math
import sys
from contextlib import ExitStack, contextmanager
from unittest import mock

import numpy as np
import torch

from softmaxbook import choice as _choice
from softmaxbook.choice import ck_gradient, rw_gradient, rw_values

from . import _ForbiddenCall, call, check_generator, check_salt, describe, exercise, \
    expect_close, expect_true
from . import fail_at_worst_entry

D = torch.float64

# The package's own recursions: every public function of softmaxbook.choice that computes values
# or derivatives goes through one of these two module attributes, so replacing them while the
# learner's function runs catches a call of rw_values, rw_log_likelihood, rw_gradient or fit_rw,
# however it was imported (a name bound by `from softmaxbook.choice import rw_values` in the
# notebook's first cell still refers to the same function, which looks these up at call time).
_PACKAGE_ROUTES = {
    "_values": "softmaxbook.choice.rw_values (or rw_log_likelihood or ck_log_likelihood, "
               "which use it)",
    "_derivatives": "softmaxbook.choice.rw_gradient (or fit_rw, which uses it)",
    "_ck_features": "softmaxbook.choice.ck_gradient (or fit_ck, which uses it)",
}
_NO_PACKAGE = ("The exercise asks you to write the recursion yourself, with a plain loop over "
               "the trials; the package's function is what the check compares with.")
# Automatic differentiation in either mode. Forward mode (torch.func.jvp, jacfwd,
# torch.autograd.forward_ad) goes through the dual-number primitives _make_dual/_unpack_dual;
# reverse mode (backward, torch.autograd.grad, torch.func.grad, jacobian) through grad/backward.
_AUTOGRAD = {torch.autograd.grad: "torch.autograd.grad",
             torch.Tensor.backward: "Tensor.backward (autograd)",
             torch._make_dual: "forward-mode autodiff (torch.func.jvp / forward_ad)",
             torch._unpack_dual: "forward-mode autodiff (torch.func.jvp / forward_ad)"}


# A complex-step derivative, Im ℓ(α + ih) / h, is a numerical derivative exact to rounding: no
# tolerance tells it from the recursion (independent review: it passed at 1e-13). It needs
# complex arithmetic, which the recursion never does, so complex numbers are refused where they
# can be seen: cmath's functions (a profile hook sees them however they were imported), NumPy's
# exp/log family returning complex values, and any torch call that makes or takes a complex
# tensor.
_COMPLEX = "complex arithmetic (a complex-step derivative)"
_NUMPY_COMPLEX = ("exp", "log", "log1p", "expm1", "sqrt", "power")


class _NoComplexTorch(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        values = list(args) + list(kwargs.values())
        if any((isinstance(v, torch.Tensor) and v.is_complex()) or isinstance(v, complex)
               or (isinstance(v, torch.dtype) and v.is_complex) for v in values):
            raise _ForbiddenCall(_COMPLEX)
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.is_complex():
            raise _ForbiddenCall(_COMPLEX)
        return out


def _numpy_real_only(name):
    ufunc = getattr(np, name)

    def real_only(*args, **kwargs):
        out = ufunc(*args, **kwargs)
        if np.iscomplexobj(out):
            raise _ForbiddenCall(_COMPLEX)
        return out
    return real_only


@contextmanager
def _complex_forbidden():
    """While active, complex arithmetic through cmath, NumPy's exp/log family or torch raises."""
    def hook(frame, event, arg):
        if event == "c_call" and getattr(arg, "__module__", None) == "cmath":
            raise _ForbiddenCall(_COMPLEX)

    old = sys.getprofile()
    with ExitStack() as stack:
        for name in _NUMPY_COMPLEX:
            stack.enter_context(mock.patch.object(np, name, _numpy_real_only(name)))
        stack.enter_context(_NoComplexTorch())
        sys.setprofile(hook)
        try:
            yield
        finally:
            sys.setprofile(old)


@contextmanager
def _package_forbidden():
    """While active, any use of the package's value/derivative recursions raises."""
    saved = {name: getattr(_choice, name) for name in _PACKAGE_ROUTES}

    def tripwire(shown):
        def raise_forbidden(*args, **kwargs):
            raise _ForbiddenCall(shown)
        return raise_forbidden

    try:
        for name, shown in _PACKAGE_ROUTES.items():
            setattr(_choice, name, tripwire(shown))
        yield
    finally:
        for name, func in saved.items():
            setattr(_choice, name, func)


def _expect_unchanged(passed, originals, desc):
    """Fail if the learner's function changed ``choices`` or ``rewards`` in place: the check
    passes copies, and used to accept a function that, say, rescaled the caller's rewards
    (independent review)."""
    for name, got, want in zip(("choices", "rewards"), passed, originals):
        expect_true(torch.equal(got, want),
                    f"for input {desc} your function changed its argument '{name}' in place "
                    "(an in-place operation such as .mul_(...), += or an assignment to "
                    f"{name}[t]): a function should not change the data its caller passed.",
                    hint="read the inputs, and keep what you compute in tensors or lists of "
                         "your own.")


def _cases():
    """(alpha, beta, choices, rewards) for one participant: 1-D tensors of length T."""
    # fixed test inputs in a notebook, not a chapter's draws; under the grader they change
    # with its secret salt, and salted variants of the hand-made cases are added
    g = check_generator(2019)
    out = []
    for alpha, beta, T in ((0.3, 3.0, 40), (0.9, 8.0, 60), (0.05, 1.0, 30)):
        c = (torch.rand(T, generator=g) < 0.6).long()
        r = (torch.rand(T, generator=g) < 0.7).to(D)
        out.append((alpha, beta, c, r, f"alpha={alpha}, beta={beta}, {T} trials"))
    # one option never chosen (its value and sensitivity never move)
    out.append((0.5, 2.0, torch.ones(12, dtype=torch.long), torch.tensor(
        [1.0, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0], dtype=D),
        "alpha=0.5, beta=2, option 0 never chosen"))
    # long run of the same option after a switch: the sensitivity of the other one carries
    c = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0])
    r = torch.tensor([1.0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 1], dtype=D)
    out.append((0.4, 5.0, c, r, "alpha=0.4, beta=5, choices 0,0,1,1,1,1,1,1,0,1,1,0"))
    # real-valued rewards (not 0/1)
    out.append((0.7, 0.5, torch.tensor([1, 0, 1, 0, 0, 1]),
                torch.tensor([2.5, -1.0, 0.3, 4.0, -2.0, 1.0], dtype=D),
                "alpha=0.7, beta=0.5, rewards 2.5, -1, 0.3, 4, -2, 1"))
    # long sessions with large rewards: |ℓ| is in the hundreds or thousands, where a finite
    # difference loses digits that the recursion keeps (see _check_grad_alpha)
    for alpha, beta, T, scale in ((0.3, 1.0, 300, 20.0), (0.05, 0.2, 2000, 30.0)):
        c = (torch.rand(T, generator=g) < 0.5).long()
        r = ((2 * torch.rand(T, generator=g, dtype=D) - 1) * scale)
        out.append((alpha, beta, c, r, f"alpha={alpha}, beta={beta}, {T} trials, rewards "
                    f"uniform on [-{scale:g}, {scale:g}]"))
    if check_salt():
        alpha, beta = (round(0.05 + 0.9 * float(v), 3) for v in torch.rand(2, generator=g))
        beta = round(10 * beta, 2)
        T = 10 + int(torch.randint(0, 10, (1,), generator=g))
        never = int(torch.randint(0, 2, (1,), generator=g))
        r = (4 * torch.rand(T, generator=g, dtype=D) - 2).round(decimals=2)
        out.append((alpha, beta, torch.full((T,), 1 - never, dtype=torch.long), r,
                    f"alpha={alpha}, beta={beta}, option {never} never chosen, rewards "
                    f"{r.tolist()}"))
        c = (torch.rand(T, generator=g) < 0.5).long()
        out.append((alpha, beta, c, r, f"alpha={alpha}, beta={beta}, choices {c.tolist()}, "
                                       f"rewards {r.tolist()}"))
    return out


def _grad_alpha_terms(alpha, beta, choices, rewards):
    """∂ℓ/∂α by the recursion, and Σ_t |term_t|, the size of what is summed (Python floats)."""
    V, Dk, total, size = [0.0, 0.0], [0.0, 0.0], 0.0, 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = 1 / (1 + math.exp(-beta * (V[1] - V[0])))
        term = beta * (c - p) * (Dk[1] - Dk[0])
        total, size = total + term, size + abs(term)
        Dk[c] = r - V[c] + (1 - alpha) * Dk[c]
        V[c] += alpha * (r - V[c])
    return total, size


@exercise("choice-values", "values before each trial (causal timing)")
def _check_values(values_before):
    cases = _cases()
    for alpha, _, c, r, desc in cases:
        want = rw_values(torch.tensor([alpha], dtype=D), c[None], r[None])[0]
        with _package_forbidden():
            passed = (c.clone(), r.clone())
            got = call(values_before, alpha, *passed, input_desc=desc,
                       forbid_reason=_NO_PACKAGE)
        _expect_unchanged(passed, (c, r), desc)
        if isinstance(got, torch.Tensor) and got.shape == want.shape and got.is_floating_point():
            expect_true(got.dtype == D,
                        f"for input {desc} your values have dtype {got.dtype}; the task asks for "
                        "float64. (In float32 the values carry about 7 significant digits, "
                        "and the check compares to 1e-9.)",
                        hint="the dtype of the result follows the tensor you store the values "
                             "in: create it as float64.")
            err = float((got.detach().cpu() - want).abs().max())
            expect_true(not (1e-9 < err <= 1e-6 * (1 + float(want.abs().max()))),
                        f"for input {desc} your values agree with the expected ones to about "
                        f"7 significant digits only (largest difference {err:.2g}): that is "
                        "float32 precision, although the result has dtype float64. The "
                        "recursion is right; the numbers were computed in float32 (e.g. in a "
                        "tensor created without dtype=torch.float64) and converted afterwards.",
                        hint="compute in float64 from the start: create the tensor that holds "
                             "the values with dtype=torch.float64 (Python floats are float64).")
            after = torch.cat((want[1:], want[-1:] + 0), 0)
            shifted = torch.allclose(got[:-1], after[:-1], atol=1e-9) and not torch.allclose(
                got, want, atol=1e-9)
            expect_true(not shifted, f"for input {desc} your values already contain each "
                        "trial's own reward: row t must hold the values *before* trial t's "
                        "outcome (row 0 is the initial value 0).",
                        hint="think about when, inside the loop, a row is recorded.")
        expect_close(got, want, input_desc=desc, rtol=1e-9, atol=1e-9, what="values [T, 2]",
                     hint="row t holds (V_0, V_1) before trial t's outcome, starting from 0. "
                          "Compare your update with the chapter's update rule "
                          "(choice-update): which value moves, in which direction, and by "
                          "how much?")
    return len(cases)


@exercise("choice-grad-alpha", "∂ℓ/∂α by the sensitivity recursion")
def _check_grad_alpha(grad_alpha):
    cases = _cases()
    for alpha, beta, c, r, desc in cases:
        want = rw_gradient(torch.tensor([alpha], dtype=D), torch.tensor([beta], dtype=D),
                           c[None], r[None])[0][0]
        _, size = _grad_alpha_terms(alpha, beta, c, r)
        with _package_forbidden(), _complex_forbidden():
            passed = (c.clone(), r.clone())
            got = call(grad_alpha, alpha, beta, *passed, input_desc=desc,
                       forbid=_AUTOGRAD,
                       forbid_reason="The exercise asks for the forward sensitivity "
                                     "recursion, written by hand in one loop (no autograd, "
                                     "no package function, no numerical derivative).")
        _expect_unchanged(passed, (c, r), desc)
        if isinstance(got, torch.Tensor):
            expect_true(got.numel() == 1, f"for input {desc} the result should be one number "
                        f"(a float or a 0-d tensor), got shape {tuple(got.shape)}.")
            got = got.reshape(())
        # The recursion in float64 agrees with the package to ~1e-15 of Σ_t |term_t| (measured
        # on these cases, summed in any order); a central finite difference, whatever its step
        # (1e-4 … 1e-6), is off by 2e-11 of it or more, 4th-order Richardson by 3e-14 to 2e-10.
        # A tolerance of 1e-13 of that size accepts the first and rejects the others.
        tol = 1e-13 * (1 + size)
        if isinstance(got, (torch.Tensor, float, int)) and not isinstance(got, bool):
            err = abs(float(got) - float(want))
            expect_true(not (tol < err <= 1e-5 * (1 + size)),
                        f"for input {desc} your ∂ℓ/∂α is {float(got)!r}, close to the "
                        f"expected {float(want)!r} but off by {err:.2g}, which is far more "
                        "than rounding leaves in the float64 recursion (about 1e-15 of the "
                        f"size of the terms summed, {size:.3g} here). A finite difference of "
                        "ℓ, or a computation in float32, gives such an error.",
                        hint="the exercise asks for the forward sensitivity recursion "
                             "(choice-sensitivity) run in float64 (Python floats): carry "
                             "D_k = ∂V_k/∂α through the loop, and differentiate nothing "
                             "numerically.")
        expect_close(got, want, input_desc=desc, rtol=0, atol=tol, what="∂ℓ/∂α",
                     hint="keep one sensitivity D_k = ∂V_k/∂α per option, starting at 0. "
                          "Compare your recursion with (choice-sensitivity), in particular "
                          "what happens to the option that was not chosen, and your sum with "
                          "(choice-dl-dalpha): which values and sensitivities does trial t's "
                          "term use, and in which order do you update them?")
    return len(cases)


# ------------------------------------------------------------------------------------------------
# choice-second-order (a derivation's end result): ∂²ℓ/∂α² by the second-order recursion
def _hess_alpha_terms(alpha, beta, choices, rewards):
    """∂²ℓ/∂α² by the recursion for E = ∂²V/∂α², and Σ_t (|Fisher term| + |(y − p) term|), the
    size of what is summed (Python floats)."""
    V, Dk, E, total, size = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], 0.0, 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = 1 / (1 + math.exp(-beta * (V[1] - V[0])))
        fisher = -p * (1 - p) * beta ** 2 * (Dk[1] - Dk[0]) ** 2
        curv = (c - p) * beta * (E[1] - E[0])
        total, size = total + fisher + curv, size + abs(fisher) + abs(curv)
        E[c] = -2 * Dk[c] + (1 - alpha) * E[c]
        Dk[c] = r - V[c] + (1 - alpha) * Dk[c]
        V[c] += alpha * (r - V[c])
    return total, size


def _package_hess_alpha(alpha, beta, choices, rewards):
    """∂²ℓ/∂α² from the package's recursion (the one fit_rw's Newton steps use)."""
    _, _, (h_aa, _, _) = _choice._derivatives(
        torch.tensor([alpha], dtype=D), torch.tensor([beta], dtype=D), choices.to(D)[:, None],
        rewards.to(D)[:, None], 0.0, order=2)
    return float(h_aa[0])


@exercise("choice-second-order", "∂²ℓ/∂α² by a second-order recursion")
def _check_second_order(hess_alpha):
    cases = _cases()
    for alpha, beta, c, r, desc in cases:
        want = _package_hess_alpha(alpha, beta, c, r)
        _, size = _hess_alpha_terms(alpha, beta, c, r)
        with _package_forbidden(), _complex_forbidden():
            passed = (c.clone(), r.clone())
            got = call(hess_alpha, alpha, beta, *passed, input_desc=desc,
                       forbid=_AUTOGRAD,
                       forbid_reason="The exercise asks for your recursion for "
                                     "E = ∂²V/∂α², run by hand in one loop (no autograd, no "
                                     "package function, no numerical derivative).")
        _expect_unchanged(passed, (c, r), desc)
        if isinstance(got, torch.Tensor):
            expect_true(got.numel() == 1, f"for input {desc} the result should be one number "
                        f"(a float or a 0-d tensor), got shape {tuple(got.shape)}.")
            got = got.reshape(())
        # The recursion in float64 agrees with the package (and autograd) to at most 5e-16 of
        # Σ_t |terms| on these cases (measured); a central difference of an exact ∂ℓ/∂α, with
        # any step from 1e-2 to 1e-7, is off by more than 7e-11 of it on one case at least, a
        # 4th-order Richardson by more than 2.9e-12; a complex step is refused. A tolerance of
        # 1e-13 of that size accepts the first and rejects the others.
        tol = 1e-13 * (1 + size)
        if isinstance(got, (torch.Tensor, float, int)) and not isinstance(got, bool):
            err = abs(float(got) - want)
            expect_true(not (tol < err <= 1e-5 * (1 + size)),
                        f"for input {desc} your ∂²ℓ/∂α² is close to the expected value but "
                        f"off by {err:.2g}, far more than rounding leaves in the float64 "
                        f"recursion (about 1e-15 of the size of the terms summed, {size:.3g} "
                        "here). A numerical derivative (of ℓ or of your grad_alpha), or a "
                        "computation in float32, gives such an error.",
                        hint="carry E_k = ∂²V_k/∂α² through the loop beside V_k and D_k, in "
                             "float64 (Python floats), and differentiate nothing "
                             "numerically.")
        expect_close(got, want, input_desc=desc, rtol=0, atol=tol, what="∂²ℓ/∂α²",
                     hint="differentiate each line of the sensitivity update "
                          "(choice-sensitivity) once more in α: every factor that depends on "
                          "α contributes, the option not chosen keeps its E, and E starts at "
                          "0. Then differentiate trial t's term of (choice-dl-dalpha): both "
                          "β(D_1 − D_0) and y_t − p_t depend on α.")
    return len(cases)


# ------------------------------------------------------------------------------------------------
# choice-wsls-mle (a derivation's end result): the maximum likelihood noise level of noisy
# win-stay/lose-shift, eps_hat(m, n) = min(2m/n, 1)
def _wsls_cases():
    g = check_generator(2023)  # public in a notebook; the grader's secret salt changes it
    n_rand = torch.randint(1, 1001, (200,), generator=g).to(D)
    m_rand = torch.floor(torch.rand(200, generator=g, dtype=D) * (n_rand + 1))
    n_b = torch.randint(1, 50, (3, 4), generator=g).to(D)
    m_b = torch.floor(torch.rand(3, 4, generator=g, dtype=D) * (n_b + 1))
    cases = [
        ("n = 10, m = 0 … 10", torch.arange(11, dtype=D), torch.full((11,), 10.0, dtype=D)),
        ("odd n and n = 1", torch.tensor([0.0, 1, 3, 4, 0, 1, 149, 150], dtype=D),
         torch.tensor([1.0, 1, 7, 7, 299, 299, 299, 299], dtype=D)),
        ("200 random n from 1 to 1000, m from 0 to n", m_rand, n_rand),
        ("a [3, 4] batch", m_b, n_b),
    ]
    if check_salt():  # the first case again with another n
        n = float(torch.randint(11, 60, (1,), generator=g))
        cases.append((f"n = {n:g}, m = 0 … {n:g}", torch.arange(n + 1, dtype=D),
                      torch.full((int(n) + 1,), n, dtype=D)))
    return cases


@exercise("choice-wsls-mle", "maximum likelihood noise of win-stay/lose-shift")
def _check_wsls_mle(eps_hat):
    """``eps_hat(m, n)`` -> tensor of the shape of ``m`` and ``n``, elementwise."""
    cases = _wsls_cases()
    for name, m, n in cases:
        desc = f"m = {describe(m)}, n = {describe(n)} ({name})"
        m_in, n_in = m.clone(), n.clone()
        got = call(eps_hat, m_in, n_in, input_desc=desc)
        expect_true(torch.equal(m_in, m) and torch.equal(n_in, n),
                    f"for input {desc} your function changed its arguments in place.",
                    hint="compute a new tensor; do not use in-place methods such as mul_ on m.")
        expect_true(isinstance(got, torch.Tensor) and got.is_floating_point()
                    and got.shape == m.shape,
                    f"for input {desc} the estimate should be a float tensor of shape "
                    f"{tuple(m.shape)} (one estimate per entry of m and n), got "
                    f"{describe(got)}.", hint="work elementwise; do not reduce over a dimension.")
        expect_true(got.dtype == D, f"for input {desc} (float64) your estimate is {got.dtype}: "
                                    "return float64, the inputs' dtype.")
        expected = torch.clamp(2 * m / n, max=1.0)
        g64 = got.detach().cpu()
        hint = ("write the log-likelihood of m rule-breaking trials out of n as a function of "
                "ε, find where its derivative is zero, and check that this point is an allowed "
                "value of ε.")
        if torch.allclose(g64, 2 * m / n, rtol=1e-12, atol=1e-12):
            hint = ("for some inputs your estimate is above 1, but ε is the probability of "
                    "choosing at random. Where does ℓ(ε) reach its largest value on the "
                    "allowed range when its stationary point lies outside it?")
        elif torch.allclose(g64.clamp(max=1.0), torch.clamp(m / n, max=1.0), rtol=1e-12,
                            atol=1e-12):
            hint = ("a trial breaks the rule with probability ε/2, not ε: with probability ε "
                    "the choice is random, and a random choice still follows the rule half "
                    "of the time.")
        # The message names the entry that is furthest off, not the expected values: a table of
        # them beside m and n would hand out the answer to the derivation.
        wrong = ~torch.isclose(g64, expected, rtol=1e-12, atol=1e-12)
        if bool(wrong.any()):
            fail_at_worst_entry(g64, expected, wrong, (g64 - expected).abs(),
                                lambda i: f"m = {float(m.flatten()[i]):g}, "
                                          f"n = {float(n.flatten()[i]):g}",
                                desc, "estimate", hint, 1e-3, digits=6)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# choice-valueB (a derivation's end result): ∂p_t/∂V_{0,t} = −β p_t (1 − p_t), entered as a
# function of p_t and β
def _value_b_cases():
    g = check_generator(2029)  # public in a notebook; the grader's secret salt changes it
    u = torch.rand(200, generator=g, dtype=D)
    cases = [
        ("p = 1/4 and beta = 1, 2, 4", torch.full((3,), 0.25, dtype=D),
         torch.tensor([1.0, 2.0, 4.0], dtype=D)),
        ("p near 0 and near 1", torch.tensor([1e-12, 1e-3, 0.2, 0.8, 0.999, 1 - 1e-9], dtype=D),
         torch.tensor([3.0, 0.5, 10.0, 10.0, 0.5, 3.0], dtype=D)),
        ("200 random p in (0, 1), beta from 0.1 to 30", 1e-6 + (1 - 2e-6) * u,
         torch.exp(torch.empty(200, dtype=D).uniform_(math.log(0.1), math.log(30), generator=g))),
        ("a [3, 4] batch", torch.rand(3, 4, generator=g, dtype=D).clamp(1e-3, 1 - 1e-3),
         5 * torch.rand(3, 4, generator=g, dtype=D) + 0.1),
    ]
    return cases


# The first derivative, -beta p (1 - p), is printed in the chapter ({eq}`choice-dp-dv`), so the
# student enters the second, which the derivation continues to (review of the new checks, H3):
# d/dV_0 of -beta p (1 - p) = -beta (1 - 2p) dp/dV_0 = beta^2 p (1 - p) (1 - 2p).
@exercise("choice-valueB", "∂²p/∂V_0² in terms of p and β")
def _check_value_b(d2p_dv0):
    """``d2p_dv0(p, beta)`` -> beta^2 p (1 - p) (1 - 2p), elementwise."""
    cases = _value_b_cases()
    for name, p, beta in cases:
        desc = f"p = {describe(p)}, beta = {describe(beta)} ({name})"
        p_in, beta_in = p.clone(), beta.clone()
        got = call(d2p_dv0, p_in, beta_in, input_desc=desc)
        expect_true(torch.equal(p_in, p) and torch.equal(beta_in, beta),
                    f"for input {desc} your function changed its arguments in place.",
                    hint="compute a new tensor; do not use in-place methods such as mul_ on p.")
        expect_true(isinstance(got, torch.Tensor) and got.is_floating_point()
                    and got.shape == p.shape,
                    f"for input {desc} the derivative should be a float tensor of shape "
                    f"{tuple(p.shape)} (one derivative per entry of p and beta), got "
                    f"{describe(got)}.", hint="work elementwise; do not reduce over a dimension.")
        expect_true(got.dtype == D, f"for input {desc} (float64) your derivative is "
                                    f"{got.dtype}: return float64, the inputs' dtype.")
        expected = beta**2 * p * (1 - p) * (1 - 2 * p)
        g64 = got.detach().cpu()
        hint = ("differentiate ∂p_t/∂V_0 = −β p_t (1 − p_t) once more with respect to V_0: "
                "β is a constant, and p_t (1 − p_t) depends on V_0 only through p_t, whose "
                "derivative you have just found (the chain rule).")
        close = dict(rtol=1e-9, atol=1e-14)
        if torch.allclose(g64, -expected, **close):
            hint = ("your second derivative has the wrong sign: where p_t < 1/2 the first "
                    "derivative −β p_t (1 − p_t) grows more negative as p_t grows, and p_t "
                    "falls as V_0 rises.")
        elif torch.allclose(g64 * beta, expected, **close):
            hint = ("each differentiation with respect to V_0 brings out a factor β (the "
                    "exponent is β V_0): two differentiations, two factors.")
        elif torch.allclose(g64, -beta * p * (1 - p), **close):
            hint = "that is the first derivative; the exercise asks for the second."
        elif torch.allclose(g64 * (1 - 2 * p), expected, **close):
            hint = ("d/dp of p (1 − p) is 1 − 2p, not 1: differentiate the product, then "
                    "multiply by ∂p_t/∂V_0.")
        # The message names the entry that is furthest off, not the expected values.
        # Compared to 1e-14 of beta^2 (|∂²p/∂V_0²| <= 0.1 beta^2): a right formula written as a
        # polynomial in p, beta^2 (p - 3p^2 + 2p^3), loses digits near p = 1, ~1e-16 beta^2.
        tol = 1e-12 * expected.abs() + 1e-14 * beta**2
        wrong = ~((g64 - expected).abs() <= tol)
        if bool(wrong.any()):
            fail_at_worst_entry(g64, expected, wrong, (g64 - expected).abs() / tol,
                                lambda i: f"p = {float(p.flatten()[i]):.12g}, "
                                          f"beta = {float(beta.flatten()[i]):.6g}",
                                desc, "derivative", hint, 1e-3 * beta**2, digits=6)
    return len(cases)


# ------------------------------------------------------------------------------------------------
# choice-ck-grad: the choice kernel's gradient (∂ℓ/∂α_c, ∂ℓ/∂β_c) by the sensitivity recursion
_KERNEL_PARAMS = ((0.3, 1.5), (0.7, -1.0), (0.1, 3.0), (0.5, 0.8), (0.9, 2.0), (0.4, -0.5),
                  (0.2, 1.0), (0.6, 4.0))


def _ck_cases():
    """(alpha, beta, alpha_c, beta_c, choices, rewards, desc): _cases() with a kernel each."""
    out = []
    for (alpha, beta, c, r, desc), (ac, bc) in zip(_cases(), _KERNEL_PARAMS * 2):
        out.append((alpha, beta, ac, bc, c, r, f"{desc}, alpha_c={ac}, beta_c={bc}"))
    if check_salt():
        g = check_generator(2031)
        for k in range(2):
            alpha, beta, c, r, desc = out[k][0], out[k][1], out[k][4], out[k][5], _cases()[k][4]
            ac = round(0.05 + 0.9 * float(torch.rand((), generator=g)), 3)
            bc = round(6 * float(torch.rand((), generator=g)) - 3, 2)
            out.append((alpha, beta, ac, bc, c, r, f"{desc}, alpha_c={ac}, beta_c={bc}"))
    return out


def _ck_terms_size(alpha, beta, alpha_c, beta_c, choices, rewards):
    """Σ_t |term_t| of each gradient component (the size of what is summed), Python floats."""
    V, dK, E, size_a, size_b = [0.0, 0.0], 0.0, 0.0, 0.0, 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        eta = beta * (V[1] - V[0]) + beta_c * dK
        p = 1 / (1 + math.exp(-eta)) if eta > -700 else 0.0
        size_a += abs((c - p) * beta_c * E)
        size_b += abs((c - p) * dK)
        s = 2 * c - 1
        E, dK = (1 - alpha_c) * E + s - dK, dK + alpha_c * (s - dK)
        V[c] += alpha * (r - V[c])
    return size_a, size_b


def _as_pair(got):
    """A pair of numbers (tuple, list or 2-element tensor) as a float64 [2] tensor, else got."""
    if isinstance(got, torch.Tensor) and got.numel() == 2:
        return got.detach().reshape(2).to(D).cpu()
    if isinstance(got, (tuple, list)) and len(got) == 2:
        parts = []
        for x in got:
            if isinstance(x, torch.Tensor) and x.numel() == 1:
                x = x.detach().reshape(()).to(D).item()
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                return got
            parts.append(float(x))
        return torch.tensor(parts, dtype=D)
    return got


@exercise("choice-ck-grad", "the choice kernel's gradient by its sensitivity recursion")
def _check_ck_grad(grad_kernel):
    cases = _ck_cases()
    for alpha, beta, ac, bc, c, r, desc in cases:
        g = ck_gradient(*(torch.tensor([v], dtype=D) for v in (alpha, beta, ac, bc)),
                        c[None], r[None])
        want = torch.tensor([float(g[2]), float(g[3])], dtype=D)
        size = _ck_terms_size(alpha, beta, ac, bc, c, r)
        with _package_forbidden(), _complex_forbidden():
            passed = (c.clone(), r.clone())
            got = call(grad_kernel, alpha, beta, ac, bc, *passed, input_desc=desc,
                       forbid=_AUTOGRAD,
                       forbid_reason="The exercise asks for the forward sensitivity "
                                     "recursion, written by hand in one loop (no autograd, "
                                     "no package function, no numerical derivative).")
        _expect_unchanged(passed, (c, r), desc)
        pair = _as_pair(got)
        expect_true(isinstance(pair, torch.Tensor),
                    f"for input {desc} the result should be a pair of numbers (∂ℓ/∂α_c, "
                    f"∂ℓ/∂β_c), as a tuple or a 2-element tensor, got {describe(got)}.")
        # As in choice-grad-alpha: the float64 recursion agrees with the package to ~1e-15 of
        # Σ_t |term_t|; a central finite difference is off by 1e-11 of it or more.
        tol = torch.tensor([1e-13 * (1 + size[0]), 1e-13 * (1 + size[1])], dtype=D)
        err = (pair - want).abs()
        near = bool(((err > tol) & (err <= 1e-5 * (1 + torch.tensor(size, dtype=D)))).any()
                    and (err <= 1e-5 * (1 + torch.tensor(size, dtype=D))).all())
        expect_true(not near,
                    f"for input {desc} your gradient is {pair.tolist()!r}, close to the "
                    f"expected {want.tolist()!r} but off by {float(err.max()):.2g}, far more "
                    "than rounding leaves in the float64 recursion. A finite difference of ℓ, "
                    "or a computation in float32, gives such an error.",
                    hint="the exercise asks for the sensitivity recursion (choice-ck-grad) run "
                         "in float64 (Python floats): carry E = ∂ΔK/∂α_c through the loop, "
                         "and differentiate nothing numerically.")
        hint = ("compare your loop with (choice-ck-kernel) and (choice-ck-grad): the logit "
                "η_t contains both the values and the kernel; trial t's term uses ΔK_t and "
                "E_t from *before* trial t's choice is added to the kernel; both kernel "
                "entries move after every choice, toward 1 for the option chosen and 0 for "
                "the other; and E carries α_c's earlier influence forward.")
        if bool((pair[[1, 0]] - want).abs().le(tol.flip(0)).all()) and not bool(
                (pair - want).abs().le(tol).all()):
            hint = "return the pair in the order (∂ℓ/∂α_c, ∂ℓ/∂β_c)."
        expect_close(pair, want, input_desc=desc, rtol=0, atol=float(tol.max()),
                     what="(∂ℓ/∂α_c, ∂ℓ/∂β_c)", hint=hint)
        expect_true(bool((err <= tol).all()),
                    f"for input {desc} your gradient {pair.tolist()!r} differs from the "
                    f"expected {want.tolist()!r}.", hint=hint)
    return len(cases)
