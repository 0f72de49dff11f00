"""The checks of the choice chapter's coding exercises accept right answers and reject wrong ones
with a message that names the input."""

from __future__ import annotations

import math

import pytest
import torch

from softmaxbook.exercises import ExerciseCheckFailed, check, registered

D = torch.float64


def test_registered():
    assert registered("choice") == ["choice-ck-grad", "choice-grad-alpha", "choice-second-order",
                                    "choice-valueB",
                                    "choice-values", "choice-wsls-mle"]


# --- choice-values ---------------------------------------------------------------------------
def right_values(alpha, choices, rewards):
    V = torch.zeros(2, dtype=D)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        out.append(V.clone())
        V[c] += alpha * (r - V[c])
    return torch.stack(out)


def values_after(alpha, choices, rewards):  # acausal: includes trial t's own reward
    V = torch.zeros(2, dtype=D)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        V[c] += alpha * (r - V[c])
        out.append(V.clone())
    return torch.stack(out)


def values_update_both(alpha, choices, rewards):  # moves the unchosen option too
    V = torch.zeros(2, dtype=D)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        out.append(V.clone())
        V += alpha * (r - V)
    return torch.stack(out)


def values_swapped(alpha, choices, rewards):  # options in the wrong columns
    return right_values(alpha, choices, rewards).flip(-1)


def values_float32(alpha, choices, rewards):  # right recursion, torch.zeros(2) default dtype
    V = torch.zeros(2)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        out.append(V.clone())
        V[c] += alpha * (r - V[c])
    return torch.stack(out)


def values_sign_error(alpha, choices, rewards):  # moves away from the reward
    V = torch.zeros(2, dtype=D)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        out.append(V.clone())
        V[c] += alpha * (V[c] - r)
    return torch.stack(out)


def values_alpha_swapped(alpha, choices, rewards):  # keeps α of the old value
    V = torch.zeros(2, dtype=D)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        out.append(V.clone())
        V[c] = alpha * V[c] + (1 - alpha) * r
    return torch.stack(out)


def values_from_package(alpha, choices, rewards):  # the forbidden shortcut
    from softmaxbook.choice import rw_values
    return rw_values(torch.tensor([alpha], dtype=D), choices[None], rewards[None])[0]


def values_via_log_likelihood(alpha, choices, rewards):
    import softmaxbook.choice as sc
    a = torch.tensor([alpha], dtype=D)
    sc.rw_log_likelihood(a, torch.ones(1, dtype=D), choices[None], rewards[None])
    return right_values(alpha, choices, rewards)


def right_values_preallocated(alpha, choices, rewards):  # rows filled in place
    T = len(choices)
    V = torch.zeros(T, 2, dtype=D)
    for t in range(T - 1):
        V[t + 1] = V[t]
        c = int(choices[t])
        V[t + 1, c] = V[t, c] + alpha * (float(rewards[t]) - V[t, c])
    return V


def right_values_python(alpha, choices, rewards):  # Python floats, one tensor at the end
    v0 = v1 = 0.0
    rows = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        rows.append([v0, v1])
        if c == 1:
            v1 = (1 - alpha) * v1 + alpha * r
        else:
            v0 = (1 - alpha) * v0 + alpha * r
    return torch.tensor(rows, dtype=torch.float64)


def values_float32_then_double(alpha, choices, rewards):  # float64 dtype, float32 digits
    return values_float32(alpha, choices, rewards).double()


def values_no_clone(alpha, choices, rewards):  # every row is the same tensor, updated in place
    V = torch.zeros(2, dtype=D)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        out.append(V)
        V[c] += alpha * (r - V[c])
    return torch.stack(out)


def values_transposed(alpha, choices, rewards):  # [2, T]
    return right_values(alpha, choices, rewards).T


def values_start_half(alpha, choices, rewards):  # starts from 0.5 instead of 0
    V = torch.full((2,), 0.5, dtype=D)
    out = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        out.append(V.clone())
        V[c] += alpha * (r - V[c])
    return torch.stack(out)


def values_errors_in_place(alpha, choices, rewards):  # right values; rewards overwritten
    V = torch.zeros(2, dtype=D)
    out = []
    for t in range(len(choices)):
        out.append(V.clone())
        c = int(choices[t])
        rewards[t] -= V[c]  # the prediction error, stored over the caller's reward
        V[c] += alpha * rewards[t]
    return torch.stack(out)


def test_values_accepts_right_answer(capsys):
    assert check("choice-values", right_values)
    assert check("choice-values", right_values_preallocated)
    assert check("choice-values", right_values_python)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 8 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (values_after, r"alpha=0.3, beta=3.0, 40 trials your values already contain"),
    (values_update_both, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected values"),
    (values_swapped, r"for input alpha=0.3"),
    (values_float32, r"alpha=0.3, beta=3.0, 40 trials your values have dtype torch.float32"),
    (values_sign_error, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected values"),
    (values_alpha_swapped, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected values"),
    (values_from_package, r"calls softmaxbook.choice.rw_values.*forbids.*plain loop"),
    (values_via_log_likelihood, r"calls softmaxbook.choice.rw_values"),
    (values_float32_then_double, r"alpha=0.3, beta=3.0, 40 trials your values agree with the "
                                 r"expected ones to about 7 significant digits only \(largest "
                                 r"difference .*float32 precision"),
    (values_no_clone, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected values"),
    (values_transposed, r"should have shape \(40, 2\), got \(2, 40\)"),
    (values_start_half, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected values"),
    # independent review: an answer that overwrote the caller's rewards passed
    (values_errors_in_place, r"40 trials your function changed its argument 'rewards' in "
                             r"place"),
    (lambda a, c, r: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_values_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("choice-values", answer)


def test_values_rejects_package_imported_before_the_check():
    # the chapter's first cell imports rw_values into the notebook's namespace; an answer that
    # uses that name is caught too
    from softmaxbook.choice import rw_values as imported_early

    def answer(alpha, choices, rewards):
        return imported_early(torch.tensor([alpha], dtype=D), choices[None], rewards[None])[0]

    with pytest.raises(ExerciseCheckFailed, match="calls softmaxbook.choice.rw_values"):
        check("choice-values", answer)
    # and the package works again afterwards
    c, r = torch.tensor([[1, 0]]), torch.tensor([[1.0, 0.0]], dtype=D)
    assert imported_early(torch.tensor([0.5], dtype=D), c, r).shape == (1, 2, 2)


def test_hints_do_not_give_the_update_line():
    with pytest.raises(ExerciseCheckFailed) as err:
        check("choice-values", values_sign_error)
    assert "alpha * (r - V[c])" not in str(err.value)
    with pytest.raises(ExerciseCheckFailed) as err:
        check("choice-grad-alpha", grad_reset_unchosen)
    assert "r − V_c + (1 − α) D_c" not in str(err.value)


# --- choice-grad-alpha -----------------------------------------------------------------------
def _grad(alpha, beta, choices, rewards, *, reset_unchosen=False, no_beta=False, sign=1.0,
          acausal=False, value_first=False):
    V, Dv, g = [0.0, 0.0], [0.0, 0.0], 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = 1 / (1 + math.exp(-beta * (V[1] - V[0])))
        if not acausal:
            g += sign * (1.0 if no_beta else beta) * (c - p) * (Dv[1] - Dv[0])
        if value_first:
            V[c] += alpha * (r - V[c])
        new_d = r - V[c] + (1 - alpha) * Dv[c]
        if reset_unchosen:
            Dv = [0.0, 0.0]
        Dv[c] = new_d
        if not value_first:
            V[c] += alpha * (r - V[c])
        if acausal:  # the term with the values and sensitivities after the outcome
            p = 1 / (1 + math.exp(-beta * (V[1] - V[0])))
            g += beta * (c - p) * (Dv[1] - Dv[0])
    return g


def right_grad(alpha, beta, choices, rewards):
    return _grad(alpha, beta, choices, rewards)


def grad_reset_unchosen(alpha, beta, choices, rewards):  # the source notes' rule (erratum 6)
    return _grad(alpha, beta, choices, rewards, reset_unchosen=True)


def grad_without_beta(alpha, beta, choices, rewards):
    return _grad(alpha, beta, choices, rewards, no_beta=True)


def grad_sign_error(alpha, beta, choices, rewards):  # p − y instead of y − p
    return _grad(alpha, beta, choices, rewards, sign=-1.0)


def grad_acausal(alpha, beta, choices, rewards):  # V_t already contains r_t (the notes' timing)
    return _grad(alpha, beta, choices, rewards, acausal=True)


def grad_value_updated_first(alpha, beta, choices, rewards):  # D update uses the new value
    return _grad(alpha, beta, choices, rewards, value_first=True)


def grad_tensor(alpha, beta, choices, rewards):  # a 0-d tensor is fine
    return torch.tensor(_grad(alpha, beta, choices, rewards), dtype=D)


def grad_autograd(alpha, beta, choices, rewards):  # right number, forbidden route
    a = torch.tensor(alpha, dtype=D, requires_grad=True)
    _torch_log_lik(a, beta, choices, rewards).backward()
    return float(a.grad)


def grad_package(alpha, beta, choices, rewards):
    from softmaxbook.choice import rw_gradient
    return float(rw_gradient(torch.tensor([alpha], dtype=D), torch.tensor([beta], dtype=D),
                             choices[None], rewards[None])[0][0])


def right_grad_separate(alpha, beta, choices, rewards):  # named variables, tanh, fsum
    v0 = v1 = d0 = d1 = 0.0
    terms = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = 0.5 * (1 + math.tanh(0.5 * beta * (v1 - v0)))
        terms.append(beta * (c - p) * (d1 - d0))
        if c:
            d1, v1 = r - v1 + (1 - alpha) * d1, v1 + alpha * (r - v1)
        else:
            d0, v0 = r - v0 + (1 - alpha) * d0, v0 + alpha * (r - v0)
    return math.fsum(terms)


def right_grad_torch64(alpha, beta, choices, rewards):  # float64 tensors, torch.sigmoid
    V, Dk = torch.zeros(2, dtype=D), torch.zeros(2, dtype=D)
    g = torch.zeros((), dtype=D)
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = torch.sigmoid(beta * (V[1] - V[0]))
        g = g + beta * (c - p) * (Dk[1] - Dk[0])
        Dk[c] = r - V[c] + (1 - alpha) * Dk[c]
        V[c] = V[c] + alpha * (r - V[c])
    return g


def _log_lik(alpha, beta, choices, rewards):
    V, ll = [0.0, 0.0], 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        x = beta * (V[1] - V[0]) * (1 if c else -1)
        ll += -math.log1p(math.exp(-x)) if x > 0 else x - math.log1p(math.exp(x))
        V[c] += alpha * (r - V[c])
    return ll


def grad_central_difference(alpha, beta, choices, rewards, h=1e-6):  # the review's leak
    return (_log_lik(alpha + h, beta, choices, rewards)
            - _log_lik(alpha - h, beta, choices, rewards)) / (2 * h)


def grad_central_difference_1e5(alpha, beta, choices, rewards):  # near-optimal step
    return grad_central_difference(alpha, beta, choices, rewards, h=1e-5)


def grad_richardson(alpha, beta, choices, rewards, h=1e-4):  # 4th-order finite difference
    def ll(a):
        return _log_lik(a, beta, choices, rewards)
    return (8 * (ll(alpha + h) - ll(alpha - h)) - (ll(alpha + 2 * h) - ll(alpha - 2 * h))) / (
        12 * h)


def _torch_log_lik(a, beta, choices, rewards):
    V = [torch.zeros((), dtype=D), torch.zeros((), dtype=D)]
    ll = torch.zeros((), dtype=D)
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = torch.sigmoid(beta * (V[1] - V[0]))
        ll = ll + (p.log() if c else (1 - p).log())
        V[c] = V[c] + a * (r - V[c])
    return ll


def grad_forward_ad(alpha, beta, choices, rewards):  # the review's leak: forward mode
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        a = fwAD.make_dual(torch.tensor(alpha, dtype=D), torch.tensor(1.0, dtype=D))
        return float(fwAD.unpack_dual(_torch_log_lik(a, beta, choices, rewards)).tangent)


def grad_func_jvp(alpha, beta, choices, rewards):  # the review's leak: torch.func.jvp
    _, tangent = torch.func.jvp(lambda a: _torch_log_lik(a, beta, choices, rewards),
                                (torch.tensor(alpha, dtype=D),), (torch.tensor(1.0, dtype=D),))
    return float(tangent)


def grad_func_grad(alpha, beta, choices, rewards):  # reverse mode through torch.func
    return float(torch.func.grad(lambda a: _torch_log_lik(a, beta, choices, rewards))(
        torch.tensor(alpha, dtype=D)))


def grad_float32(alpha, beta, choices, rewards):  # the recursion in float32 tensors
    V, Dk = torch.zeros(2), torch.zeros(2)
    g = torch.zeros(())
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = torch.sigmoid(beta * (V[1] - V[0]))
        g = g + beta * (c - p) * (Dk[1] - Dk[0])
        Dk[c] = r - V[c] + (1 - alpha) * Dk[c]
        V[c] = V[c] + alpha * (r - V[c])
    return float(g)


def _complex_log_lik(alpha, beta, choices, rewards, exp, log):
    V, ll = [0.0, 0.0], 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        x = beta * (V[1] - V[0]) * (1 if c else -1)
        ll = ll - log(1 + exp(-x))
        V[c] = V[c] + alpha * (r - V[c])
    return ll


def grad_complex_step(alpha, beta, choices, rewards):  # the review's leak: exact to rounding
    import cmath
    return (_complex_log_lik(alpha + 1e-30j, beta, choices, rewards, cmath.exp, cmath.log).imag
            / 1e-30)


def grad_complex_step_numpy(alpha, beta, choices, rewards):  # the same with NumPy's ufuncs
    import numpy as np
    return float(np.imag(_complex_log_lik(alpha + 1e-30j, beta, choices, rewards, np.exp,
                                          np.log)) / 1e-30)


def grad_complex_step_torch(alpha, beta, choices, rewards):  # and with complex tensors
    a = torch.tensor(alpha + 1e-30j, dtype=torch.complex128)
    return float(_complex_log_lik(a, beta, choices, rewards, torch.exp, torch.log).imag / 1e-30)


def right_grad_numpy(alpha, beta, choices, rewards):  # real NumPy arithmetic is fine
    import numpy as np
    V, Dk, g = np.zeros(2), np.zeros(2), 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = 1 / (1 + np.exp(-beta * (V[1] - V[0])))
        g += beta * (c - p) * (Dk[1] - Dk[0])
        Dk[c] = r - V[c] + (1 - alpha) * Dk[c]
        V[c] += alpha * (r - V[c])
    return float(g)


def grad_choices_in_place(alpha, beta, choices, rewards):  # right value; choices recoded
    choices.mul_(2).sub_(1)  # +-1 instead of 0/1, in the caller's tensor
    V, Dk, g = [0.0, 0.0], [0.0, 0.0], 0.0
    for s, r in zip(choices.tolist(), rewards.tolist()):
        c = (s + 1) // 2
        p = 1 / (1 + math.exp(-beta * (V[1] - V[0])))
        g += beta * (c - p) * (Dk[1] - Dk[0])
        Dk[c] = r - V[c] + (1 - alpha) * Dk[c]
        V[c] += alpha * (r - V[c])
    return g


def test_grad_accepts_right_answers(capsys):
    assert check("choice-grad-alpha", right_grad)
    assert check("choice-grad-alpha", grad_tensor)
    assert check("choice-grad-alpha", right_grad_separate)
    assert check("choice-grad-alpha", right_grad_torch64)
    assert check("choice-grad-alpha", right_grad_numpy)
    printed = " ".join(capsys.readouterr().out.split())  # check() wraps its line
    assert "correct on 8 test cases" in printed


@pytest.mark.parametrize("answer, message", [
    (grad_reset_unchosen, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected ∂ℓ/∂α"),
    (grad_without_beta, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected ∂ℓ/∂α"),
    (grad_sign_error, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected ∂ℓ/∂α"),
    (grad_acausal, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected ∂ℓ/∂α"),
    (grad_value_updated_first, r"for input alpha=0.3, beta=3.0, 40 trials\n  expected ∂ℓ/∂α"),
    (grad_autograd, r"calls Tensor.backward \(autograd\), which this exercise forbids"),
    (grad_package, r"calls softmaxbook.choice.rw_gradient"),
    (grad_forward_ad, r"calls forward-mode autodiff .*which this exercise forbids"),
    (grad_func_jvp, r"calls forward-mode autodiff .*which this exercise forbids"),
    (grad_func_grad, r"calls torch.autograd.grad, which this exercise forbids"),
    (grad_central_difference, r"alpha=0.3, beta=3.0, 40 trials your ∂ℓ/∂α is .* off by .*"
                              r"finite difference"),
    (grad_central_difference_1e5, r"your ∂ℓ/∂α is .* off by .*finite difference"),
    (grad_richardson, r"your ∂ℓ/∂α is .* off by .*finite difference"),
    (grad_float32, r"alpha=0.3, beta=3.0, 40 trials your ∂ℓ/∂α is .* off by .*float32"),
    # independent review: a complex-step derivative is exact to rounding and passed
    (grad_complex_step, r"40 trials your function calls complex arithmetic \(a complex-step "
                        r"derivative\), which this exercise forbids"),
    (grad_complex_step_numpy, r"calls complex arithmetic \(a complex-step derivative\)"),
    (grad_complex_step_torch, r"calls complex arithmetic \(a complex-step derivative\)"),
    (grad_choices_in_place, r"40 trials your function changed its argument 'choices' in place"),
    (lambda a, b, c, r: torch.zeros(2), "should be one number"),
    (lambda a, b, c, r: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_grad_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("choice-grad-alpha", answer)


# --- choice-second-order: ∂²ℓ/∂α² by the recursion for E = ∂²V/∂α² ----------------------------
def _hess(alpha, beta, choices, rewards, *, e_factor=2.0, reset_unchosen=False, fisher=True,
          curvature=True, fisher_sign=-1.0, beta_power=2, d_first=False, curv_sign=1.0,
          decay=True):
    V, Dk, E, h = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = 1 / (1 + math.exp(-beta * (V[1] - V[0])))
        if fisher:
            h += fisher_sign * p * (1 - p) * beta ** beta_power * (Dk[1] - Dk[0]) ** 2
        if curvature:
            h += curv_sign * (c - p) * beta * (E[1] - E[0])
        if d_first:
            Dk[c] = r - V[c] + (1 - alpha) * Dk[c]
        new_e = -e_factor * Dk[c] + ((1 - alpha) if decay else 1.0) * E[c]
        if reset_unchosen:
            E = [0.0, 0.0]
        E[c] = new_e
        if not d_first:
            Dk[c] = r - V[c] + (1 - alpha) * Dk[c]
        V[c] += alpha * (r - V[c])
    return h


def right_hess(alpha, beta, choices, rewards):
    return _hess(alpha, beta, choices, rewards)


def right_hess_separate(alpha, beta, choices, rewards):  # named variables, tanh, fsum, F = E/2
    v0 = v1 = d0 = d1 = f0 = f1 = 0.0
    terms = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = 0.5 * (1 + math.tanh(0.5 * beta * (v1 - v0)))
        terms += [-p * (1 - p) * (beta * (d1 - d0)) ** 2, 2 * beta * (c - p) * (f1 - f0)]
        if c:
            f1, d1, v1 = -d1 + (1 - alpha) * f1, r - v1 + (1 - alpha) * d1, v1 + alpha * (r - v1)
        else:
            f0, d0, v0 = -d0 + (1 - alpha) * f0, r - v0 + (1 - alpha) * d0, v0 + alpha * (r - v0)
    return math.fsum(terms)


def right_hess_torch64(alpha, beta, choices, rewards):  # float64 tensors, a 0-d tensor back
    V, Dk, E = (torch.zeros(2, dtype=D) for _ in range(3))
    h = torch.zeros((), dtype=D)
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = torch.sigmoid(beta * (V[1] - V[0]))
        h = h - p * (1 - p) * beta ** 2 * (Dk[1] - Dk[0]) ** 2 + (c - p) * beta * (E[1] - E[0])
        E[c] = -2 * Dk[c] + (1 - alpha) * E[c]
        Dk[c] = r - V[c] + (1 - alpha) * Dk[c]
        V[c] = V[c] + alpha * (r - V[c])
    return h


def hess_central_difference(alpha, beta, choices, rewards, h=1e-5):  # of the exact gradient
    return (right_grad(alpha + h, beta, choices, rewards)
            - right_grad(alpha - h, beta, choices, rewards)) / (2 * h)


def hess_richardson(alpha, beta, choices, rewards, h=1e-3):  # 4th order, of the exact gradient
    def g(a):
        return right_grad(a, beta, choices, rewards)
    return (8 * (g(alpha + h) - g(alpha - h)) - (g(alpha + 2 * h) - g(alpha - 2 * h))) / (12 * h)


def hess_autograd(alpha, beta, choices, rewards):  # right number, forbidden route
    a = torch.tensor(alpha, dtype=D, requires_grad=True)
    (g,) = torch.autograd.grad(_torch_log_lik(a, beta, choices, rewards), a, create_graph=True)
    g.backward()
    return float(a.grad)


def hess_func(alpha, beta, choices, rewards):  # torch.func.hessian
    return float(torch.func.hessian(lambda a: _torch_log_lik(a, beta, choices, rewards))(
        torch.tensor(alpha, dtype=D)))


def hess_package(alpha, beta, choices, rewards):  # fit_rw's own recursion
    from softmaxbook import choice as package
    _, _, (h_aa, _, _) = package._derivatives(
        torch.tensor([alpha], dtype=D), torch.tensor([beta], dtype=D), choices.to(D)[:, None],
        rewards.to(D)[:, None], 0.0, order=2)
    return float(h_aa[0])


def hess_complex_step(alpha, beta, choices, rewards):  # complex step of the exact gradient
    import cmath
    V, Dk, g = [0.0, 0.0], [0.0, 0.0], 0.0
    a = alpha + 1e-30j
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = 1 / (1 + cmath.exp(-beta * (V[1] - V[0])))
        g += beta * (c - p) * (Dk[1] - Dk[0])
        Dk[c] = r - V[c] + (1 - a) * Dk[c]
        V[c] += a * (r - V[c])
    return g.imag / 1e-30


def hess_float32(alpha, beta, choices, rewards):  # the recursion in float32 tensors
    V, Dk, E = torch.zeros(2), torch.zeros(2), torch.zeros(2)
    h = torch.zeros(())
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = torch.sigmoid(beta * (V[1] - V[0]))
        h = h - p * (1 - p) * beta ** 2 * (Dk[1] - Dk[0]) ** 2 + (c - p) * beta * (E[1] - E[0])
        E[c] = -2 * Dk[c] + (1 - alpha) * E[c]
        Dk[c] = r - V[c] + (1 - alpha) * Dk[c]
        V[c] = V[c] + alpha * (r - V[c])
    return float(h)


def test_second_order_reference_agrees_with_autograd():
    from softmaxbook.exercises import choice as checks
    for alpha, beta, c, r, _ in checks._cases():
        want = hess_autograd(alpha, beta, c, r)
        total, size = checks._hess_alpha_terms(alpha, beta, c, r)
        assert abs(checks._package_hess_alpha(alpha, beta, c, r) - want) <= 1e-14 * size
        assert abs(total - want) <= 1e-14 * size


def test_second_order_accepts_right_answers(capsys):
    for answer in (right_hess, right_hess_separate, right_hess_torch64):
        assert check("choice-second-order", answer)
    printed = " ".join(capsys.readouterr().out.split())
    assert printed.count("correct on 8 test cases") == 3


FIRST = r"for input alpha=0.3, beta=3.0, 40 trials\n  expected ∂²ℓ/∂α²"


@pytest.mark.parametrize("answer, message", [
    # −D instead of −2D: −V_c and −αD_c each give a −D_c when differentiated
    (lambda a, b, c, r: _hess(a, b, c, r, e_factor=1.0), FIRST),
    (lambda a, b, c, r: _hess(a, b, c, r, reset_unchosen=True), FIRST),  # erratum 6 again
    (lambda a, b, c, r: _hess(a, b, c, r, curvature=False), FIRST),  # Fisher part only
    (lambda a, b, c, r: _hess(a, b, c, r, fisher=False), FIRST),  # (y − p) term only
    (lambda a, b, c, r: _hess(a, b, c, r, fisher_sign=1.0), FIRST),  # +p(1 − p)
    (lambda a, b, c, r: _hess(a, b, c, r, beta_power=1), FIRST),  # β instead of β²
    (lambda a, b, c, r: _hess(a, b, c, r, d_first=True), FIRST),  # E update uses the new D
    (lambda a, b, c, r: _hess(a, b, c, r, curv_sign=-1.0), FIRST),  # p − y
    (lambda a, b, c, r: _hess(a, b, c, r, decay=False), FIRST),  # E not multiplied by 1 − α
    (hess_central_difference, r"alpha=0.3, beta=3.0, 40 trials your ∂²ℓ/∂α² is close .*"
                              r"off by .*numerical derivative"),
    (hess_richardson, r"your ∂²ℓ/∂α² is close .* off by .*numerical derivative"),
    (hess_float32, r"alpha=0.3, beta=3.0, 40 trials your ∂²ℓ/∂α² is close .*float32"),
    (hess_autograd, r"calls torch.autograd.grad, which this exercise forbids"),
    (hess_func, r"which this exercise forbids"),
    (hess_package, r"calls softmaxbook.choice.rw_gradient"),
    (hess_complex_step, r"calls complex arithmetic \(a complex-step derivative\)"),
    (right_grad, FIRST),  # the first derivative
    (lambda a, b, c, r: torch.zeros(2), "should be one number"),
    (lambda a, b, c, r: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_second_order_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("choice-second-order", answer)


def test_second_order_rejects_finite_differences_at_every_step():
    # a central difference of an exact ∂ℓ/∂α, whatever its step, misses 1e-13 of the size
    for h in (1e-3, 1e-4, 1e-5, 1e-6, 1e-7):
        with pytest.raises(ExerciseCheckFailed):
            check("choice-second-order",
                  lambda a, b, c, r, h=h: hess_central_difference(a, b, c, r, h=h))


# --- choice-wsls-mle: the maximum likelihood noise of win-stay/lose-shift ---------------------
def eps_hat(m, n):
    return torch.clamp(2 * m / n, max=1.0)


def eps_hat_where(m, n):  # the two branches written out
    return torch.where(2 * m > n, torch.ones_like(m), 2 * m / n)


def eps_hat_minimum(m, n):  # q = m/n, at most one half, doubled
    return 2 * torch.minimum(m / n, torch.full_like(m, 0.5))


def eps_hat_in_place(m, n):
    return m.mul_(2).div_(n).clamp_(max=1.0)


@pytest.mark.parametrize("answer", [eps_hat, eps_hat_where, eps_hat_minimum])
def test_wsls_mle_accepts_right_answers(answer, capsys):
    assert check("choice-wsls-mle", answer)
    assert "correct on 4 test cases" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("answer, message", [
    # the stationary point without the constraint ε <= 1
    (lambda m, n: 2 * m / n, r"(?s)n = 10, m = 0 … 10\).*wrong at 5 of 11 entries, e.g. for "
                             r"m = 10, n = 10 you return 2, which is too large"
                             r".*probability of choosing at random"),
    (lambda m, n: m / n, r"(?s)wrong at 9 of 11.*with probability ε/2, not ε"),  # ε for ε/2
    (lambda m, n: torch.clamp(m / n, max=1.0), r"(?s)wrong at 9 of 11.*ε/2, not ε"),
    (lambda m, n: torch.clamp(2 * m / n, max=0.5), "wrong at 8 of 11"),  # q's bound on ε
    (lambda m, n: 1 - torch.clamp(2 * m / n, max=1.0), "wrong at 11 of 11"),  # rule followed
    (lambda m, n: torch.clamp(2 * (n - m) / n, max=1.0), "wrong at 10 of 11"),  # counts followers
    (lambda m, n: torch.clamp(2 * m / (n + 1), max=1.0), "wrong at 5 of 11"),  # T, not T - 1
    (lambda m, n: torch.clamp((2 * m + 1) / (n + 2), max=1.0), "wrong at 6 of 11"),  # Laplace
    (lambda m, n: torch.clamp(2 * m / n, 1e-6, 1.0), "for m = 0, n = 10 you return 1e-06"),
    (lambda m, n: torch.clamp(2 * torch.div(m, n, rounding_mode="floor"), max=1.0),
     "wrong at 9 of 11"),  # integer division
    (lambda m, n: torch.clamp(2 * m / n, max=1.0).float(), "your estimate is torch.float32"),
    (lambda m, n: torch.clamp(2 * m / n, max=1.0).mean(), "should be a float tensor of shape"),
    (lambda m, n: torch.minimum(2 * m, n) // n, "wrong at 4 of 11"),  # floor division
    (eps_hat_in_place, "changed its arguments in place"),
    (lambda m, n: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_wsls_mle_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("choice-wsls-mle", answer)


def test_wsls_mle_message_does_not_hand_out_the_answer():
    with pytest.raises(ExerciseCheckFailed) as err:
        check("choice-wsls-mle", lambda m, n: m / n)
    text = str(err.value).split("Hint:")[0]
    assert "expected" not in text and "min(" not in str(err.value)
    # nor the difference (value +- difference was the answer: review of the new checks, M1)
    assert "difference" not in text and "which is too small" in text


def test_wsls_mle_agrees_with_the_package():
    # fit_wsls's closed form on data whose rule breaks are counted by the package
    from softmaxbook.choice import fit_wsls
    from softmaxbook.choice import _wsls_consistent
    g = torch.Generator().manual_seed(5)
    c = (torch.rand(40, 21, generator=g) < 0.5).long()
    r = (torch.rand(40, 21, generator=g) < 0.5).to(D)
    m = (~_wsls_consistent(c, r)).to(D).sum(1)
    assert torch.allclose(eps_hat(m, torch.full_like(m, 20.0)), fit_wsls(c, r)[0])


# --- choice-valueB: ∂²p_t/∂V_0² = β² p_t (1 − p_t)(1 − 2 p_t), in terms of p_t and β -----------
# (the first derivative, −β p_t (1 − p_t), is printed in the chapter: review of the new checks, H3)
def d2p_dv0(p, beta):
    return beta**2 * p * (1 - p) * (1 - 2 * p)


def d2p_dv0_polynomial(p, beta):  # β² (p − 3p² + 2p³): expanded, loses digits near p = 1
    return beta * beta * (p - 3 * p**2 + 2 * p**3)


def d2p_dv0_chain(p, beta):  # −β (1 − 2p) times the first derivative, as derived
    first = -beta * p * (1 - p)
    return -beta * (1 - 2 * p) * first


@pytest.mark.parametrize("answer", [d2p_dv0, d2p_dv0_polynomial, d2p_dv0_chain])
def test_value_b_accepts_right_answers(answer, capsys):
    assert check("choice-valueB", answer)
    assert "correct on 4 test cases" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("answer, message", [
    # the sign lost
    (lambda p, b: -b**2 * p * (1 - p) * (1 - 2 * p),
     r"(?s)p = 1/4 and beta = 1, 2, 4\) your derivative is wrong at 3 of 3.*wrong sign"),
    # one β: the chain rule applied once
    (lambda p, b: b * p * (1 - p) * (1 - 2 * p), r"(?s)wrong at 2 of 3 entries.*two factors"),
    # the first derivative, the one printed in the chapter
    (lambda p, b: -b * p * (1 - p), r"(?s)wrong at 3 of 3.*first derivative"),
    # d/dp p (1 − p) taken as 1
    (lambda p, b: b**2 * p * (1 - p), r"(?s)wrong at 3 of 3.*1 − 2p"),
    (lambda p, b: b**2 * p * (1 - p) * (2 * p - 1), "wrong sign"),
    (lambda p, b: b**2 * (1 - 2 * p), "wrong at 3 of 3"),
    (lambda p, b: -b**2 * (1 - 2 * p) * p, "wrong at 3 of 3"),
    (lambda p, b: b**2 * p * (1 - p) ** 2, "wrong at 3 of 3"),
    (lambda p, b: b**2 * p**2 * (1 - p), "wrong at 3 of 3"),
    (lambda p, b: p * (1 - p) * (1 - 2 * p) / b**2, "wrong at 2 of 3"),  # τ = 1/β mixed up
    # p taken for the logit: σ''(p)
    (lambda p, b: b**2 * torch.sigmoid(p) * (1 - torch.sigmoid(p))
     * (1 - 2 * torch.sigmoid(p)), "wrong at 3 of 3"),
    (lambda p, b: d2p_dv0(p, b).float(), "your derivative is torch.float32"),
    (lambda p, b: d2p_dv0(p, b).sum(), "should be a float tensor of shape"),
    (lambda p, b: p.mul_(b**2 * (1 - p) * (1 - 2 * p)), "changed its arguments in place"),
    (lambda p, b: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_value_b_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("choice-valueB", answer)


def test_value_b_reference_is_the_second_derivative():
    # ∂²p/∂V_0² of p = softmax(β V)_1, by autograd twice, at the check's random points
    from softmaxbook.exercises.choice import _value_b_cases
    _, p, beta = _value_b_cases()[2]
    v1 = torch.zeros_like(p)
    v0 = (-torch.logit(p) / beta).requires_grad_()
    q = torch.softmax(beta[:, None] * torch.stack((v0, v1), 1), 1)[:, 1]
    (g,) = torch.autograd.grad(q.sum(), v0, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), v0)
    scale = beta**2
    assert torch.allclose(q, p, rtol=1e-9)
    assert ((h - d2p_dv0(p, beta)).abs() <= 1e-6 * scale).all()


def test_value_b_message_does_not_hand_out_the_answer():
    with pytest.raises(ExerciseCheckFailed) as err:
        check("choice-valueB", lambda p, b: b**2 * p * (1 - p))
    text = str(err.value)
    # the expected values at p = 1/4 are 3 beta^2 / 32: 0.09375, 0.375, 1.5; 3 is the answer's
    assert "expected" not in text and "0.09375" not in text and "0.375" not in text
    assert "1.5" not in text and "for p = 0.25, beta = 1 you return 0.1875" in text


def test_value_b_precision_loss_gets_the_precision_hint():
    """A float32 step in a right formula (review of the new derivation checks, M2): the
    message says so instead of giving the derivation hint beside a value that looks exact; a
    wrong formula's message gives no relative difference (it would hand out |expected|)."""
    with pytest.raises(ExerciseCheckFailed, match=r"(?s)you return \S+, which is too "
                       r"(?:large|small) \(largest relative difference .*precision was lost"):
        check("choice-valueB", lambda p, b: d2p_dv0(p, b).float().double())
    with pytest.raises(ExerciseCheckFailed) as info:
        check("choice-valueB", lambda p, b: -d2p_dv0(p, b))
    assert "relative difference" not in str(info.value)


def test_fit_wsls_help_text_does_not_print_the_exercise_answer():
    # review of the new checks, H5: help(fit_wsls) showed eps = min(2m/n, 1)
    from softmaxbook.choice import fit_wsls
    assert "2m/n" not in fit_wsls.__doc__ and "choice-wsls-mle" in fit_wsls.__doc__


# --- choice-ck-grad: the choice kernel's gradient (∂ℓ/∂α_c, ∂ℓ/∂β_c) ------------------------
def right_kernel(alpha, beta, alpha_c, beta_c, choices, rewards):
    V, dK, E, g_ac, g_bc = [0.0, 0.0], 0.0, 0.0, 0.0, 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = 1 / (1 + math.exp(-(beta * (V[1] - V[0]) + beta_c * dK)))
        g_ac += (c - p) * beta_c * E
        g_bc += (c - p) * dK
        s = 2 * c - 1
        E = (1 - alpha_c) * E + s - dK
        dK += alpha_c * (s - dK)
        V[c] += alpha * (r - V[c])
    return g_ac, g_bc


def right_kernel_per_option(alpha, beta, alpha_c, beta_c, choices, rewards):
    """Both kernel entries and their sensitivities, summed with torch, returned as a tensor."""
    V = torch.zeros(2, dtype=D)
    K = torch.zeros(2, dtype=D)
    dK_da = torch.zeros(2, dtype=D)  # ∂K_k/∂α_c per option
    terms = []
    for c, r in zip(choices.tolist(), rewards.tolist()):
        p = torch.sigmoid(beta * (V[1] - V[0]) + beta_c * (K[1] - K[0]))
        terms.append(torch.stack(((c - p) * beta_c * (dK_da[1] - dK_da[0]),
                                  (c - p) * (K[1] - K[0]))))
        a = torch.zeros(2, dtype=D)
        a[c] = 1.0
        dK_da = (1 - alpha_c) * dK_da + (a - K)
        K = K + alpha_c * (a - K)
        V[c] = V[c] + alpha * (r - V[c])
    return torch.stack(terms).sum(0)


def right_kernel_numpy(alpha, beta, alpha_c, beta_c, choices, rewards):
    import numpy as np
    y = np.asarray(choices.tolist(), dtype=float)
    V, dK, E, out = np.zeros(2), 0.0, 0.0, np.zeros(2)
    for c, r, yt in zip(choices.tolist(), rewards.tolist(), y):
        p = 1 / (1 + np.exp(-(beta * (V[1] - V[0]) + beta_c * dK)))
        out += (yt - p) * np.array([beta_c * E, dK])
        dK, E = dK + alpha_c * (2 * yt - 1 - dK), (1 - alpha_c) * E + (2 * yt - 1) - dK
        V[c] += alpha * (r - V[c])
    return [float(out[0]), float(out[1])]


def _kernel(alpha, beta, alpha_c, beta_c, choices, rewards, *, sign=1.0, recursion=True,
            post_update=False, chain=False, drop_dk=False, drop_s=False, no_beta_c=False,
            chosen_only=False, target01=False, no_values=False, swap=False, e_after=False):
    """right_kernel with one of the mistakes students make switched on."""
    V, K, dK, E, G = [0.0, 0.0], [0.0, 0.0], 0.0, 0.0, [0.0, 0.0]
    g_ac, g_bc = 0.0, 0.0

    def update(c):
        nonlocal dK, E
        if chosen_only:  # the kernel treated like a value: only the chosen entry moves
            G[c] = (1 - alpha_c) * G[c] + 1 - K[c]
            K[c] += alpha_c * (1 - K[c])
            dK, E = K[1] - K[0], G[1] - G[0]
            return
        s = c if target01 else 2 * c - 1
        direct = (0.0 if drop_s else s) - (0.0 if drop_dk else dK)
        if chain:
            direct *= alpha_c
        new_dk = dK + alpha_c * (s - dK)
        if e_after:
            direct = s - new_dk
        E = ((1 - alpha_c) * E if recursion else 0.0) + direct
        dK = new_dk

    for c, r in zip(choices.tolist(), rewards.tolist()):
        if post_update:
            update(c)
        eta = (0.0 if no_values else beta * (V[1] - V[0])) + beta_c * dK
        p = 1 / (1 + math.exp(-eta))
        g_ac += sign * (c - p) * (1.0 if no_beta_c else beta_c) * E
        g_bc += sign * (c - p) * dK
        if not post_update:
            update(c)
        V[c] += alpha * (r - V[c])
    return (g_bc, g_ac) if swap else (g_ac, g_bc)


def _wrong(**flag):
    return lambda *args: _kernel(*args, **flag)


def kernel_autograd(alpha, beta, alpha_c, beta_c, choices, rewards):
    ac = torch.tensor(alpha_c, dtype=D, requires_grad=True)
    bc = torch.tensor(beta_c, dtype=D, requires_grad=True)
    V, dK, ll = [0.0, 0.0], torch.zeros((), dtype=D), torch.zeros((), dtype=D)
    for c, r in zip(choices.tolist(), rewards.tolist()):
        eta = beta * (V[1] - V[0]) + bc * dK
        ll = ll + torch.nn.functional.logsigmoid(eta if c == 1 else -eta)
        dK = dK + ac * (2 * c - 1 - dK)
        V[c] += alpha * (r - V[c])
    ll.backward()
    return float(ac.grad), float(bc.grad)


def kernel_via_likelihood(alpha, beta, alpha_c, beta_c, choices, rewards):
    from softmaxbook.choice import ck_log_likelihood
    p = [torch.tensor([v], dtype=D, requires_grad=True) for v in (alpha, beta, alpha_c, beta_c)]
    ck_log_likelihood(*p, choices[None], rewards[None]).sum().backward()
    return float(p[2].grad), float(p[3].grad)


def kernel_package(alpha, beta, alpha_c, beta_c, choices, rewards):
    from softmaxbook.choice import ck_gradient
    g = ck_gradient(*(torch.tensor([v], dtype=D) for v in (alpha, beta, alpha_c, beta_c)),
                    choices[None], rewards[None])
    return float(g[2]), float(g[3])


def _ll_kernel(alpha, beta, alpha_c, beta_c, choices, rewards):
    V, dK, ll = [0.0, 0.0], 0.0, 0.0
    for c, r in zip(choices.tolist(), rewards.tolist()):
        eta = beta * (V[1] - V[0]) + beta_c * dK
        ll -= math.log1p(math.exp(-eta if c == 1 else eta))
        dK += alpha_c * (2 * c - 1 - dK)
        V[c] += alpha * (r - V[c])
    return ll


def kernel_central_difference(alpha, beta, alpha_c, beta_c, choices, rewards):
    h = 1e-6
    f = _ll_kernel
    return ((f(alpha, beta, alpha_c + h, beta_c, choices, rewards)
             - f(alpha, beta, alpha_c - h, beta_c, choices, rewards)) / (2 * h),
            (f(alpha, beta, alpha_c, beta_c + h, choices, rewards)
             - f(alpha, beta, alpha_c, beta_c - h, choices, rewards)) / (2 * h))


def kernel_float32(alpha, beta, alpha_c, beta_c, choices, rewards):
    g = right_kernel_per_option(alpha, beta, alpha_c, beta_c, choices.clone(),
                                rewards.float())
    return g.float()


def test_kernel_accepts_right_answers(capsys):
    assert check("choice-ck-grad", right_kernel)
    assert check("choice-ck-grad", right_kernel_per_option)
    assert check("choice-ck-grad", right_kernel_numpy)
    printed = " ".join(capsys.readouterr().out.split())
    assert "correct on 8 test cases" in printed


def test_kernel_float32_answer_is_really_off():
    # the float32 answer is wrong only in digits: make sure the check sees a difference
    from softmaxbook.exercises.choice import _ck_cases
    a, b, ac, bc, c, r, _ = _ck_cases()[0]
    assert (torch.tensor(right_kernel(a, b, ac, bc, c, r), dtype=D)
            - kernel_float32(a, b, ac, bc, c, r).double()).abs().max() > 1e-9


FIRST = r"for input alpha=0.3, beta=3.0, 40 trials, alpha_c=0.3, beta_c=1.5\n  expected"


@pytest.mark.parametrize("answer, message", [
    (_wrong(sign=-1.0), FIRST),
    (_wrong(recursion=False), FIRST),
    (_wrong(post_update=True), FIRST),
    (_wrong(chain=True), FIRST),
    (_wrong(drop_dk=True), FIRST),
    (_wrong(drop_s=True), FIRST),
    (_wrong(no_beta_c=True), FIRST),
    (_wrong(chosen_only=True), FIRST),
    (_wrong(target01=True), FIRST),
    (_wrong(no_values=True), FIRST),
    (_wrong(e_after=True), FIRST),
    (_wrong(swap=True), r"return the pair in the order"),
    (kernel_autograd, r"calls Tensor.backward \(autograd\), which this exercise forbids"),
    (kernel_package, r"calls softmaxbook.choice.ck_gradient"),
    (kernel_via_likelihood, r"calls softmaxbook.choice.rw_values \(or .*ck_log_likelihood"),
    (kernel_central_difference, r"beta_c=1.5 your gradient is .* off by .*finite difference"),
    (kernel_float32, r"your gradient is .* off by .*float32"),
    (lambda *a: 0.0, "should be a pair of numbers"),
    (lambda *a: (_ for _ in ()).throw(NotImplementedError()), "NotImplementedError"),
    (..., "no answer yet"),
])
def test_kernel_rejects_wrong_answers(answer, message):
    with pytest.raises(ExerciseCheckFailed, match=message):
        check("choice-ck-grad", answer)
