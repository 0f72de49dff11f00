"""Checks for the coding exercises of the chapter "Learning from choices" (book/02_choice)."""

from __future__ import annotations

import torch

from softmaxbook.choice import rw_gradient, rw_values

from . import call, exercise, expect_close, expect_true

D = torch.float64


def _cases():
    """(alpha, beta, choices, rewards) for one participant: 1-D tensors of length T."""
    g = torch.Generator().manual_seed(2019)
    out = []
    for alpha, beta, T in ((0.3, 3.0, 40), (0.9, 8.0, 60), (0.05, 1.0, 30)):
        c = (torch.rand(T, generator=g) < 0.6).long()
        r = (torch.rand(T, generator=g) < 0.7).to(D)
        out.append((alpha, beta, c, r, f"alpha={alpha}, beta={beta}, {T} trials"))
    # one option never chosen (its value and sensitivity never move)
    out.append((0.5, 2.0, torch.ones(12, dtype=torch.long), torch.tensor(
        [1.0, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0], dtype=D), "alpha=0.5, beta=2, option 0 never chosen"))
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
        got = call(values_before, alpha, c.clone(), r.clone(), input_desc=desc)
        want = rw_values(torch.tensor([alpha], dtype=D), c[None], r[None])[0]
        if isinstance(got, torch.Tensor) and got.shape == want.shape and got.is_floating_point():
            after = torch.cat((want[1:], want[-1:] + 0), 0)
            shifted = torch.allclose(got[:-1].to(D), after[:-1], atol=1e-9) and not torch.allclose(
                got.to(D), want, atol=1e-9)
            expect_true(not shifted, f"for input {desc} your values already contain each "
                        "trial's own reward: row t must hold the values *before* trial t's "
                        "outcome (row 0 is the initial value 0).",
                        hint="record V before you update it inside the loop.")
        expect_close(got, want, input_desc=desc, rtol=1e-9, atol=1e-9, what="values [T, 2]",
                     hint="row t holds (V_0, V_1) before trial t; only the chosen option moves: "
                          "V[c] += alpha * (r - V[c]).")
    return len(cases)


@exercise("choice-grad-alpha", "∂ℓ/∂α by the sensitivity recursion")
def _check_grad_alpha(grad_alpha):
    cases = _cases()
    for alpha, beta, c, r, desc in cases:
        got = call(grad_alpha, alpha, beta, c.clone(), r.clone(), input_desc=desc)
        want = rw_gradient(torch.tensor([alpha], dtype=D), torch.tensor([beta], dtype=D),
                           c[None], r[None])[0][0]
        if isinstance(got, torch.Tensor):
            expect_true(got.numel() == 1, f"for input {desc} the result should be one number "
                        f"(a float or a 0-d tensor), got shape {tuple(got.shape)}.")
            got = got.reshape(())
        expect_close(got, want, input_desc=desc, rtol=1e-7, atol=1e-9, what="∂ℓ/∂α",
                     hint="keep one sensitivity D_k = ∂V_k/∂α per option, starting at 0. On "
                          "each trial add β (y − p)(D_1 − D_0) using the values and sensitivities "
                          "before the outcome; then update only the chosen option: "
                          "D_c ← r − V_c + (1 − α) D_c. The other option's D is carried forward, "
                          "not reset to 0.")
    return len(cases)
