"""Checks for the coding exercises of the chapter "Learning from choices" (book/02_choice)."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from softmaxbook import choice as _choice
from softmaxbook.choice import rw_gradient, rw_values

from . import _ForbiddenCall, call, exercise, expect_close, expect_true

D = torch.float64

# The package's own recursions: every public function of softmaxbook.choice that computes values
# or derivatives goes through one of these two module attributes, so replacing them while the
# learner's function runs catches a call of rw_values, rw_log_likelihood, rw_gradient or fit_rw,
# however it was imported (a name bound by `from softmaxbook.choice import rw_values` in the
# notebook's first cell still refers to the same function, which looks these up at call time).
_PACKAGE_ROUTES = {
    "_values": "softmaxbook.choice.rw_values (or rw_log_likelihood, which uses it)",
    "_derivatives": "softmaxbook.choice.rw_gradient (or fit_rw, which uses it)",
}
_NO_PACKAGE = ("The exercise asks you to write the recursion yourself, with a plain loop over "
               "the trials; the package's function is what the check compares with.")
_AUTOGRAD = {torch.autograd.grad: "torch.autograd.grad",
             torch.Tensor.backward: "Tensor.backward (autograd)"}


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


def _cases():
    """(alpha, beta, choices, rewards) for one participant: 1-D tensors of length T."""
    g = torch.Generator().manual_seed(2019)  # fixed test inputs, not a chapter's draws
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
    return out


@exercise("choice-values", "values before each trial (causal timing)")
def _check_values(values_before):
    cases = _cases()
    for alpha, _, c, r, desc in cases:
        want = rw_values(torch.tensor([alpha], dtype=D), c[None], r[None])[0]
        with _package_forbidden():
            got = call(values_before, alpha, c.clone(), r.clone(), input_desc=desc,
                       forbid_reason=_NO_PACKAGE)
        if isinstance(got, torch.Tensor) and got.shape == want.shape and got.is_floating_point():
            expect_true(got.dtype == D,
                        f"for input {desc} your values have dtype {got.dtype}; the task asks for "
                        "float64. (In float32 the values carry about 7 significant digits, "
                        "and the check compares to 1e-9.)",
                        hint="the dtype of the result follows the tensor you store the values "
                             "in: create it as float64.")
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
        with _package_forbidden():
            got = call(grad_alpha, alpha, beta, c.clone(), r.clone(), input_desc=desc,
                       forbid=_AUTOGRAD,
                       forbid_reason="The exercise asks for the forward sensitivity "
                                     "recursion, written by hand in one loop (no autograd, no "
                                     "package function).")
        if isinstance(got, torch.Tensor):
            expect_true(got.numel() == 1, f"for input {desc} the result should be one number "
                        f"(a float or a 0-d tensor), got shape {tuple(got.shape)}.")
            got = got.reshape(())
        expect_close(got, want, input_desc=desc, rtol=1e-7, atol=1e-9, what="∂ℓ/∂α",
                     hint="keep one sensitivity D_k = ∂V_k/∂α per option, starting at 0. "
                          "Compare your recursion with (choice-sensitivity), in particular "
                          "what happens to the option that was not chosen, and your sum with "
                          "(choice-dl-dalpha): which values and sensitivities does trial t's "
                          "term use, and in which order do you update them?")
    return len(cases)
