"""Learning from choices: a Rescorla–Wagner learner with a softmax choice rule.

The model (the "delta rule" bandit of Rescorla & Wagner 1972, as in hBayesDM's
``bandit2arm_delta``, Ahn et al. 2017, and Wilson & Collins 2019, model 3):

* two options, numbered 0 and 1; ``V[t, k]`` is the learner's value of option ``k`` *before*
  the outcome of trial ``t`` (all values start at ``initial_value``, 0 by default);
* the choice on trial ``t`` is drawn from a softmax over the values before trial ``t``'s outcome::

      p_t = P(c_t = 1) = exp(β V[t,1]) / (exp(β V[t,0]) + exp(β V[t,1])) = σ(β ΔV_t),
      ΔV_t = V[t,1] − V[t,0];

* then the chosen option's value moves towards the reward, the other one is left alone::

      V[t+1, c_t] = V[t, c_t] + α (r_t − V[t, c_t]),      V[t+1, 1−c_t] = V[t, 1−c_t].

This is the *causal* timing convention: ``p_t`` uses ``V[t]``, which does not yet contain ``r_t``
(the choice is made before the outcome is seen), so the model can simulate choices.

The log-likelihood of one participant is a binary cross entropy with ``y_t = c_t``::

      ℓ(α, β) = Σ_t [ y_t log p_t + (1 − y_t) log(1 − p_t) ],

and its gradient is (sensitivity recursion, ``D[t, k] = ∂V[t, k]/∂α``)::

      ∂ℓ/∂β = Σ_t (y_t − p_t) ΔV_t,
      ∂ℓ/∂α = Σ_t β (y_t − p_t) (D[t, 1] − D[t, 0]),
      D[0, k] = 0,  D[t+1, c_t] = r_t − V[t, c_t] + (1 − α) D[t, c_t],  D[t+1, 1−c_t] = D[t, 1−c_t].

The unchosen option's sensitivity is carried forward unchanged: it is not reset to 0.

Shapes: ``S`` participants (leading dimension) and ``T`` trials. Parameters ``alpha`` and
``beta`` are ``[S]``; ``choices`` and ``rewards`` are ``[S, T]``.

Two simpler models are included as alternatives for model recovery (Wilson & Collins 2019,
models 1 and 2): a biased random chooser and a noisy win-stay/lose-shift.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from softmaxbook._validate import (
    as_float_tensor,
    check_generator,
    check_int,
    check_no_nan,
    check_positive_number,
)

__all__ = [
    "reversal_reward_probs",
    "simulate_bandit",
    "rw_values",
    "rw_log_likelihood",
    "rw_gradient",
    "fit_rw",
    "RWFit",
    "fit_rw_hierarchical",
    "RWHierarchicalFit",
    "simulate_wsls",
    "wsls_log_likelihood",
    "fit_wsls",
    "simulate_biased",
    "fit_biased",
    "stay_probabilities",
    "simulate_ck",
    "ck_log_likelihood",
    "ck_gradient",
    "fit_ck",
    "CKFit",
]


# --------------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------------


def _check_rate(x, name: str, func: str):
    """A [S] tensor of numbers in [0, 1] (learning rates, lapse rates, biases)."""
    x = as_float_tensor(x, name, func)
    if x.dim() != 1:
        raise ValueError(
            f"{func}: argument '{name}' must have shape [S] (one value per participant), "
            f"got shape {tuple(x.shape)}"
        )
    check_no_nan(x, name, func)
    bad = (x < 0) | (x > 1)
    if bool(bad.any()):
        raise ValueError(f"{func}: argument '{name}' must lie in [0, 1], got {x[bad][0].item()}")
    return x


def _check_params(alpha, beta, func: str):
    alpha = _check_rate(alpha, "alpha", func)
    beta = as_float_tensor(beta, "beta", func)
    if beta.dim() != 1:
        raise ValueError(
            f"{func}: argument 'beta' must have shape [S] (one value per participant), "
            f"got shape {tuple(beta.shape)}"
        )
    check_no_nan(beta, "beta", func)
    if alpha.shape != beta.shape:
        raise ValueError(
            f"{func}: arguments 'alpha' and 'beta' must have the same shape [S], got "
            f"{tuple(alpha.shape)} and {tuple(beta.shape)}"
        )
    if alpha.device != beta.device:
        raise ValueError(
            f"{func}: arguments 'alpha' and 'beta' are on different devices "
            f"({alpha.device} and {beta.device})"
        )
    if bool((beta < 0).any()):
        raise ValueError(f"{func}: argument 'beta' must be >= 0, got {beta[beta < 0][0].item()}")
    if bool(torch.isinf(beta).any()):
        raise ValueError(f"{func}: argument 'beta' must be finite, got inf")
    return alpha, beta


def _check_data(choices, rewards, func: str, *, S: int | None = None, device=None):
    """Validate choices [S, T] in {0, 1} and rewards [S, T] (finite floats)."""
    if not isinstance(choices, torch.Tensor):
        raise TypeError(
            f"{func}: argument 'choices' must be a torch.Tensor, got {type(choices).__name__}"
        )
    if choices.is_complex():
        raise TypeError(f"{func}: argument 'choices' must be real, got {choices.dtype}")
    if choices.dim() != 2 or choices.numel() == 0:
        raise ValueError(
            f"{func}: argument 'choices' must have shape [S, T] with S, T >= 1, "
            f"got shape {tuple(choices.shape)}"
        )
    if choices.is_floating_point():
        check_no_nan(choices, "choices", func)
    bad = (choices != 0) & (choices != 1)
    if bool(bad.any()):
        raise ValueError(
            f"{func}: argument 'choices' must contain only 0 and 1 (the option chosen), got "
            f"{choices[bad][0].item()}"
        )
    rewards = as_float_tensor(rewards, "rewards", func)
    if rewards.shape != choices.shape:
        raise ValueError(
            f"{func}: arguments 'choices' and 'rewards' must have the same shape [S, T], got "
            f"{tuple(choices.shape)} and {tuple(rewards.shape)}"
        )
    check_no_nan(rewards, "rewards", func)
    if bool(torch.isinf(rewards).any()):
        raise ValueError(f"{func}: argument 'rewards' must be finite, got an infinite value")
    if S is not None and choices.shape[0] != S:
        raise ValueError(
            f"{func}: 'choices' has {choices.shape[0]} participants (rows) but the parameters "
            f"have {S}"
        )
    if device is not None and (choices.device != device or rewards.device != device):
        raise ValueError(
            f"{func}: arguments 'choices' and 'rewards' must be on the parameters' device "
            f"{device}, got {choices.device} and {rewards.device}"
        )
    if choices.device != rewards.device:
        raise ValueError(
            f"{func}: arguments 'choices' and 'rewards' are on different devices "
            f"({choices.device} and {rewards.device})"
        )
    return choices, rewards


def _check_initial_value(initial_value, func: str) -> float:
    if isinstance(initial_value, torch.Tensor) and initial_value.numel() == 1:
        initial_value = initial_value.item()
    if isinstance(initial_value, bool) or not isinstance(initial_value, (int, float)):
        raise TypeError(
            f"{func}: argument 'initial_value' must be a number, got {type(initial_value).__name__}"
        )
    if not math.isfinite(initial_value):
        raise ValueError(f"{func}: argument 'initial_value' must be finite, got {initial_value}")
    return float(initial_value)


def _check_reward_probs(reward_probs, S: int, n_trials: int, func: str, device) -> torch.Tensor:
    """Return reward probabilities broadcast to [T, S, 2] (trial-major, for the simulation loop)."""
    reward_probs = as_float_tensor(reward_probs, "reward_probs", func)
    check_no_nan(reward_probs, "reward_probs", func)
    if reward_probs.shape not in ((2,), (S, 2), (S, n_trials, 2)):
        raise ValueError(
            f"{func}: argument 'reward_probs' must have shape [2], [S, 2] or [S, T, 2] "
            f"(S={S}, T={n_trials}), got {tuple(reward_probs.shape)}"
        )
    if bool(((reward_probs < 0) | (reward_probs > 1)).any()):
        raise ValueError(f"{func}: argument 'reward_probs' must lie in [0, 1]")
    if reward_probs.device != device:
        raise ValueError(
            f"{func}: argument 'reward_probs' is on {reward_probs.device} but the parameters "
            f"are on {device}"
        )
    if reward_probs.dim() == 1:
        return reward_probs.expand(n_trials, S, 2)
    if reward_probs.dim() == 2:
        return reward_probs.unsqueeze(0).expand(n_trials, S, 2)
    return reward_probs.transpose(0, 1)


def _work_dtype(*dtypes) -> torch.dtype:
    """At least float32: sums over hundreds of trials in float16/bfloat16 lose too much."""
    dtype = dtypes[0]
    for d in dtypes[1:]:
        dtype = torch.promote_types(dtype, d)
    return torch.promote_types(dtype, torch.float32)


# --------------------------------------------------------------------------------------------
# simulation
# --------------------------------------------------------------------------------------------


def reversal_reward_probs(n_participants, n_trials, block, p_good=0.8, *,
                          dtype=torch.float64, device=None):
    """Reward probabilities of a reversal task: the better option swaps every ``block`` trials.

    Option 1 pays with probability ``p_good`` (option 0 with ``1 − p_good``) on trials
    ``0 … block − 1``, then the two swap, and so on. Reversals make the learning rate much
    better identified than a stationary bandit, where values settle and stop moving.

    Returns
    -------
    Tensor [S, T, 2]
        For :func:`simulate_bandit`'s ``reward_probs`` (a broadcast view; clone to modify).

    References
    ----------
    Wilson & Collins (2019), rule 1 ("design a good experiment": one in which the parameters
    can be identified).
    """
    func = "reversal_reward_probs"
    S = check_int(n_participants, "n_participants", func, minimum=1)
    T = check_int(n_trials, "n_trials", func, minimum=1)
    block = check_int(block, "block", func, minimum=1)
    p_good = check_positive_number(p_good, "p_good", func, allow_zero=True)
    if p_good > 1:
        raise ValueError(f"{func}: argument 'p_good' must lie in [0, 1], got {p_good}")
    swapped = (torch.arange(T, device=device) // block) % 2 == 1  # [T]
    p1 = torch.where(swapped, 1 - p_good, p_good).to(dtype)
    return torch.stack((1 - p1, p1), dim=-1).expand(S, T, 2)


def simulate_bandit(alpha, beta, reward_probs, n_trials, generator=None, *, initial_value=0.0):
    """Simulate Rescorla–Wagner learners with a softmax choice rule on a two-armed bandit.

    On trial ``t`` each learner chooses option 1 with probability ``σ(β (V[t,1] − V[t,0]))``
    from its values *before* the trial's outcome, receives a Bernoulli reward with probability
    ``reward_probs[..., c_t]``, then updates the chosen option's value by the delta rule.

    Parameters
    ----------
    alpha, beta : Tensor [S]
        Learning rates in [0, 1] and inverse temperatures >= 0, one per participant.
    reward_probs : Tensor [2], [S, 2] or [S, T, 2]
        Probability that each option pays 1 (same for everyone, per participant, or per trial,
        e.g. for a reversal task).
    n_trials : int
        Number of trials ``T``.
    generator : torch.Generator, optional
        Source of randomness (on the parameters' device).
    initial_value : float
        Value of both options before the first trial (default 0, as hBayesDM).

    Returns
    -------
    choices : Tensor [S, T], int64
        The option chosen on each trial (0 or 1).
    rewards : Tensor [S, T], dtype of ``alpha``/``beta``
        The reward received (0 or 1).

    References
    ----------
    Wilson & Collins (2019), rule 3 ("simulate, simulate, simulate!") and its Box 2; Ahn et
    al. (2017), bandit2arm_delta.
    """
    func = "simulate_bandit"
    alpha, beta = _check_params(alpha, beta, func)
    n_trials = check_int(n_trials, "n_trials", func, minimum=1)
    initial_value = _check_initial_value(initial_value, func)
    check_generator(generator, alpha.device, func)
    S = alpha.shape[0]
    out_dtype = torch.promote_types(alpha.dtype, beta.dtype)
    dtype = _work_dtype(out_dtype)
    probs = _check_reward_probs(reward_probs, S, n_trials, func, alpha.device).to(dtype)
    a, b = alpha.to(dtype), beta.to(dtype)
    u = torch.rand((2, n_trials, S), generator=generator, device=alpha.device, dtype=dtype)
    V = torch.full((S, 2), initial_value, device=alpha.device, dtype=dtype)
    choices = torch.empty((n_trials, S), device=alpha.device, dtype=torch.long)
    rewards = torch.empty((n_trials, S), device=alpha.device, dtype=dtype)
    rows = torch.arange(S, device=alpha.device)
    for t in range(n_trials):
        p1 = torch.sigmoid(b * (V[:, 1] - V[:, 0]))  # values before trial t's outcome
        c = (u[0, t] < p1).long()
        r = (u[1, t] < probs[t, rows, c]).to(dtype)
        V[rows, c] += a * (r - V[rows, c])
        choices[t], rewards[t] = c, r
    return choices.T.contiguous(), rewards.T.contiguous().to(out_dtype)


# --------------------------------------------------------------------------------------------
# values, likelihood, gradient
# --------------------------------------------------------------------------------------------


def rw_values(alpha, choices, rewards, *, initial_value=0.0):
    """The learner's values before each trial.

    Parameters
    ----------
    alpha : Tensor [S]
        Learning rates in [0, 1].
    choices : Tensor [S, T]
        Options chosen (0 or 1; any integer, bool or float dtype).
    rewards : Tensor [S, T]
        Rewards received (any finite real numbers).
    initial_value : float
        Value of both options before trial 0.

    Returns
    -------
    Tensor [S, T, 2]
        ``V[s, t, k]``: value of option ``k`` before trial ``t``'s outcome, so ``V[:, 0]`` is the
        initial value and trial ``t``'s reward first appears in ``V[:, t + 1]``. Differentiable
        in ``alpha`` by autograd.

    References
    ----------
    Rescorla & Wagner (1972); Sutton & Barto (2018), eq. 2.3 (constant step size).
    """
    func = "rw_values"
    alpha = _check_rate(alpha, "alpha", func)
    choices, rewards = _check_data(choices, rewards, func, S=alpha.shape[0], device=alpha.device)
    initial_value = _check_initial_value(initial_value, func)
    return _values(alpha, choices, rewards, initial_value)


def _values(alpha, choices, rewards, initial_value):
    dtype = _work_dtype(alpha.dtype, rewards.dtype)
    S, T = choices.shape
    onehot = F.one_hot(choices.long(), 2).to(dtype)  # [S, T, 2]
    r = rewards.to(dtype).unsqueeze(-1)
    a = alpha.to(dtype).unsqueeze(-1)
    V = torch.full((S, 2), initial_value, dtype=dtype, device=alpha.device)
    out = []
    for t in range(T):
        out.append(V)
        # only the chosen option moves (onehot masks the other one)
        V = V + a * onehot[:, t] * (r[:, t] - V)
    return torch.stack(out, dim=1).to(torch.promote_types(alpha.dtype, rewards.dtype))


def rw_log_likelihood(alpha, beta, choices, rewards, *, initial_value=0.0):
    """Log-likelihood of each participant's choices under the Rescorla–Wagner softmax model.

    ``ℓ = Σ_t y_t log p_t + (1 − y_t) log(1 − p_t)`` with ``y_t = choices[:, t]`` and
    ``p_t = σ(β (V[t,1] − V[t,0]))``: the negative binary cross entropy. Computed as
    ``Σ_t log σ((2 y_t − 1) β ΔV_t)``, which never takes the log of a rounded 0.

    Parameters
    ----------
    alpha, beta : Tensor [S]
    choices, rewards : Tensor [S, T]
    initial_value : float

    Returns
    -------
    Tensor [S]
        Differentiable in ``alpha`` and ``beta`` by autograd (used to check :func:`rw_gradient`).

    References
    ----------
    Daw (2011), section 2; Wilson & Collins (2019), rule 4 ("fit the parameters").
    """
    func = "rw_log_likelihood"
    alpha, beta = _check_params(alpha, beta, func)
    choices, rewards = _check_data(choices, rewards, func, S=alpha.shape[0], device=alpha.device)
    initial_value = _check_initial_value(initial_value, func)
    V = _values(alpha, choices, rewards, initial_value)
    dtype = _work_dtype(V.dtype, beta.dtype)
    eta = beta.to(dtype).unsqueeze(-1) * (V[..., 1] - V[..., 0]).to(dtype)  # logit of p_t
    sign = 2 * choices.to(dtype) - 1
    # log σ(±η) is exact for any η; log(sigmoid(η)) underflows to log 0 = −inf for η < −745
    ll = F.logsigmoid(sign * eta).sum(-1)
    return ll.to(torch.promote_types(torch.promote_types(alpha.dtype, beta.dtype), rewards.dtype))


def _derivatives(alpha, beta, y, r, initial_value, order, onehot=None):
    """ℓ and its derivatives in (α, β) by forward sensitivities, for N independent learners.

    alpha, beta : [N]; y, r : [T, N] (trial-major, so each trial's slice is contiguous);
    onehot : optional [T, 2, N] one-hot of the chosen option (built from y when not given).
    order 0: ℓ; 1: also (ℓ_α, ℓ_β); 2: also (ℓ_αα, ℓ_αβ, ℓ_ββ). No autograd: plain recursions.

    The loop over trials only propagates the values V, their sensitivities D = ∂V/∂α and
    (order 2) F = ½ ∂²V/∂α²; these do not depend on β, so everything else is vectorised over
    trials after the loop. Sums over trials are matrix–vector products (much faster than a
    strided reduction over the leading dimension).
    """
    T, N = y.shape
    dev, dtype = alpha.device, alpha.dtype
    M = torch.stack((1 - y, y), dim=1) if onehot is None else onehot  # [T, 2, N]
    n_state = 1 + min(order, 2)
    # State Z = (V, D, F), each [2 options, N], stored as buf[k, 1:] with a slot of zeros in
    # front, buf[k, 0] = 0, so that buf[k, :-1] = (0, V, D) is Z "shifted by one" for free.
    # For the chosen option the three updates (see the docstring) are
    #   V' = V − (αV − αr),   D' = D − (V + αD − r),   F' = F − (D + αF),
    # i.e. Z' = Z − m ⊙ (shift(Z) + α Z − R) with R = (α r, r, 0): three tensor operations per
    # trial for all learners and all three recursions together (the loop is dispatch-bound).
    # Trials are processed in blocks of B: the recursion fills B rows of a small buffer, then
    # the block's contributions to ℓ, gradient and Hessian are added while those rows are
    # still in cache (on the full [T, N] arrays the same arithmetic is memory-bound).
    B = max(32, min(T, 65536 // max(N, 1)))  # ~0.5 MB per [B, N] float64 array
    # factors in [1, 2] per product: 2^L must stay below the dtype's largest number (2^1024
    # in float64, 2^128 in float32), with room to spare for rounding
    L = int(math.log2(torch.finfo(dtype).max)) - 4
    buf = torch.empty((B + 1, n_state + 1, 2, N), device=dev, dtype=dtype)
    buf[:, 0] = 0.0
    buf[0, 1] = initial_value
    buf[0, 2:] = 0.0  # V[0] does not depend on α
    shifted = buf[:, :-1].unbind(0)  # unbind once: indexing inside the loop costs more
    state = buf[:, 1:].unbind(0)
    W = torch.empty_like(state[0])
    n_r = min(n_state, 2)
    W_head = W[:n_r]
    ll = torch.zeros(N, device=dev, dtype=dtype)
    log_prod = torch.zeros(N, device=dev, dtype=dtype)
    G = torch.zeros(n_state * N, device=dev, dtype=dtype)  # Σ_t (y_t − p_t) X_t
    Sw = torch.zeros(3 * N, device=dev, dtype=dtype)  # Σ_t w_t (ΔD², ΔD ΔV, ΔV²)
    for start in range(0, T, B):
        nb = min(B, T - start)
        blk = slice(start, start + nb)
        r_b = r[blk]
        R = torch.stack((alpha * r_b, r_b), dim=1)[:, :n_r].unsqueeze(2)  # [nb, ≤2, 1, N]
        for k, (m, R_t) in enumerate(zip(M[blk].unbind(0), R.unbind(0))):
            torch.addcmul(shifted[k], state[k], alpha, out=W)  # shift(Z) + α Z
            W_head.sub_(R_t)
            # only the chosen option (m = 1) moves; the other keeps its value *and* its
            # sensitivities
            torch.addcmul(state[k], m, W, value=-1, out=state[k + 1])
        # rows 0 … nb−1 hold the state before trials start … start+nb−1
        X = buf[:nb, 1:, 1] - buf[:nb, 1:, 0]  # [nb, n_state, N]: ΔV, ∂ΔV/∂α, ½ ∂²ΔV/∂α²
        y_b = y[blk]
        ones = torch.ones(nb, device=dev, dtype=dtype)
        dV = X[:, 0]
        eta = beta * dV  # logit of p_t
        # log σ(z) = −relu(−z) − log(1 + e^{−|z|}) with z = ±η: exact for any η (log(sigmoid(η))
        # would give log 0 for η < −745). The log(1 + e^{−|η|}) terms are summed as the logs of
        # products of at most L factors (log1p is the slowest operation here). Each factor is
        # in [1, 2], so such a product is at most 2^L and cannot overflow: a whole block's
        # product could (B is up to 65536 // N factors, 2^1024 overflows float64), which made
        # ℓ = −inf for a single participant with a long session.
        e = torch.exp(-eta.abs())
        ll -= ones @ torch.relu((1 - 2 * y_b) * eta)
        for i in range(0, nb, L):
            log_prod += torch.log((1 + e[i:i + L]).prod(0))
        if order >= 1:
            p = torch.sigmoid(eta)
            res = y_b - p  # ∂ℓ_t/∂η_t
            G += ones @ (res.unsqueeze(1) * X).reshape(nb, -1)
        if order >= 2:
            w = p - p * p  # p (1 − p) = −∂²ℓ_t/∂η_t²
            dD = X[:, 1]
            wdD = w * dD
            Sw += ones @ torch.stack((wdD * dD, wdD * dV, w * dV * dV), 1).reshape(nb, -1)
        buf[0].copy_(buf[nb])  # the state before the next block's first trial
    ll = ll - log_prod
    if order == 0:
        return ll
    g_a = beta * G[N:2 * N]  # η_α = β ∂ΔV/∂α
    g_b = G[:N]  # η_β = ΔV
    if order == 1:
        return ll, (g_a, g_b)
    S_dd, S_dv, S_vv = Sw[:N], Sw[N:2 * N], Sw[2 * N:]
    # H = −Σ w ∇η ∇ηᵀ + Σ (y − p) ∇²η with η_αα = β ∂²ΔV/∂α² = 2 β ΔF, η_αβ = ∂ΔV/∂α, η_ββ = 0
    h_aa = beta * (2 * G[2 * N:] - beta * S_dd)
    h_ab = G[N:2 * N] - beta * S_dv
    h_bb = -S_vv
    return ll, (g_a, g_b), (h_aa, h_ab, h_bb)


def rw_gradient(alpha, beta, choices, rewards, *, initial_value=0.0):
    """Analytic gradient of :func:`rw_log_likelihood` by the sensitivity recursion (no autograd).

    ``∂ℓ/∂β = Σ_t (y_t − p_t) ΔV_t`` and ``∂ℓ/∂α = Σ_t β (y_t − p_t) (D[t,1] − D[t,0])`` with
    ``D[t,k] = ∂V[t,k]/∂α`` from ``D[0] = 0``, ``D[t+1,c_t] = r_t − V[t,c_t] + (1−α) D[t,c_t]``
    and the unchosen option's ``D`` carried forward unchanged (SOURCE-ERRATA 6: setting it to 0
    gives a wrong gradient).

    Parameters
    ----------
    alpha, beta : Tensor [S]
    choices, rewards : Tensor [S, T]
    initial_value : float

    Returns
    -------
    (Tensor [S], Tensor [S])
        ``∂ℓ/∂α`` and ``∂ℓ/∂β`` per participant, in the parameters' dtype (computed in at
        least float32). Not differentiable (plain recursion under ``torch.no_grad``).

    References
    ----------
    The forward-mode ("real-time recurrent learning") sensitivity recursion, Williams & Zipser
    (1989); for this model see the corrected derivation in the chapter "Learning from choices".
    """
    func = "rw_gradient"
    alpha, beta = _check_params(alpha, beta, func)
    choices, rewards = _check_data(choices, rewards, func, S=alpha.shape[0], device=alpha.device)
    initial_value = _check_initial_value(initial_value, func)
    out = torch.promote_types(torch.promote_types(alpha.dtype, beta.dtype), rewards.dtype)
    dtype = _work_dtype(out)
    with torch.no_grad():
        _, (g_a, g_b) = _derivatives(
            alpha.detach().to(dtype), beta.detach().to(dtype), choices.T.to(dtype),
            rewards.T.to(dtype), initial_value, order=1,
        )
    return g_a.to(out), g_b.to(out)


# --------------------------------------------------------------------------------------------
# fitting
# --------------------------------------------------------------------------------------------


class RWFit(NamedTuple):
    """Result of :func:`fit_rw`, one entry per participant (best start)."""

    alpha: torch.Tensor  #: [S] maximum-likelihood learning rate
    beta: torch.Tensor  #: [S] maximum-likelihood inverse temperature
    log_likelihood: torch.Tensor  #: [S] ℓ at the estimate
    converged: torch.Tensor  #: [S] bool, the best start met the convergence test at a finite ℓ
    start_log_likelihoods: torch.Tensor  #: [S, K] ℓ reached from each start
    n_iter: int  #: iterations until the last start converged
    #: [S] ℓ + log prior at the estimate (the maximised objective), the prior's normal
    #: densities without their constant -Σ log(sd √(2π)); None without a prior
    log_posterior: torch.Tensor | None = None


# Box on the unconstrained parameters a = logit α, b = log β: α in [3e-7, 1 − 3e-7] and
# β in [2e-9, beta_max]. Some participants' likelihood keeps rising as β → ∞ (every choice
# predictable, the supremum is not attained); the upper bound on β stops them there.
_A_MAX, _B_MIN = 15.0, -20.0


def _draw_starts(S, K, generator, device, dtype):
    u = torch.rand((S, K, 2), generator=generator, device=device, dtype=dtype)
    alpha0 = 0.05 + 0.9 * u[..., 0]
    beta0 = torch.exp(math.log(0.5) + (math.log(20.0) - math.log(0.5)) * u[..., 1])
    return torch.stack((alpha0, beta0), dim=-1)


def fit_rw(choices, rewards, n_starts=5, generator=None, *, starts=None, beta_max=100.0,
           max_iter=100, gtol=1e-9, initial_value=0.0, prior=None):
    """Maximum-likelihood α and β for every participant at once, from several starting points
    (maximum a posteriori with ``prior``).

    Method. Each (participant, start) pair is an independent 2-parameter problem, so all of them
    are optimised together as one batch: one pass over the trials computes, for every pair, ℓ,
    its gradient and its exact Hessian by forward sensitivities (``∂V/∂α`` and ``∂²V/∂α²``).
    The optimiser is a trust-region Newton method in the unconstrained coordinates
    ``a = logit α``, ``b = log β`` (kept in a box: ``|a| ≤ 15``, ``β ≤ beta_max``). Why Newton
    rather than batched L-BFGS or projected gradient: with two parameters the exact Hessian
    costs one extra recursion and a 2×2 eigen-decomposition, Newton converges quadratically near
    the optimum (so the optimum agrees with a per-participant SciPy fit to rounding), and every
    iteration needs exactly one pass over the trials, where a batched line search would need a
    different number of passes per participant. Where the Hessian is not negative definite (far
    from the optimum) the step is "saddle-free": its eigenvalues are replaced by their absolute
    values, so the step still goes uphill. A step that lowers ℓ is rejected and the trust
    radius shrinks, so ℓ never decreases. Converged pairs leave the batch. Finally the start
    with the largest ℓ is kept per participant. Speed: see ``benchmarks/bench_choice.py``.

    Parameters
    ----------
    choices, rewards : Tensor [S, T]
        The data (choices in {0, 1}).
    n_starts : int
        Random starting points per participant (``α ~ U(0.05, 0.95)``, ``log β ~ U(log 0.5,
        log 20)``), ignored when ``starts`` is given.
    generator : torch.Generator, optional
        Source of the random starts.
    starts : Tensor [S, K, 2], optional
        Explicit starting points ``(α, β)`` (α in (0, 1), β > 0).
    beta_max : float
        Upper bound on β. Participants whose choices are all predictable have no finite
        maximum (ℓ keeps rising as β → ∞); their fits stop at this bound, which flags them.
    max_iter : int
        Iteration limit.
    gtol : float
        A pair has converged when the largest gradient component in (a, b) is below ``gtol``
        times ``(1 + |ℓ|)``, when the Newton step predicts a gain below 1e-11 (1 + |ℓ|), when an
        accepted step changes ℓ by less than 1e-12 (1 + |ℓ|), or when three iterations together
        gained less than 1e-9 (1 + |ℓ|) (a crawl towards a supremum on the box).
    initial_value : float
        Value of both options before trial 0.
    prior : (mean, sd), optional
        Independent normal priors on ``a = logit α`` and ``b = log β``: ``mean`` and ``sd`` are
        pairs (or 2-element tensors), ``sd > 0``. The fit then maximises ``ℓ + log prior`` (the
        prior's gradient ``-(θ - mean) / sd²`` and Hessian ``-1 / sd²`` are added to ℓ's), which
        keeps estimates off the box's bounds where the data say little (Daw 2011;
        Wilson & Collins 2019, rule 4). "log prior" is the sum of the normal log-densities
        without their constant -Σ log(sd √(2π)), and the estimate is the mode in (a, b)
        (a mode depends on the coordinates a density is written in). ``log_likelihood`` is
        then still ℓ at the estimate, the best start is the one with the largest
        ``ℓ + log prior``, and ``start_log_likelihoods`` and ``log_posterior`` hold
        ℓ + log prior. A prior whose sd is below ~1e-154 (1 / sd² overflows) is refused.

    Returns
    -------
    RWFit
        ``alpha, beta, log_likelihood, converged`` ([S] each, in the rewards' dtype),
        ``start_log_likelihoods`` [S, K], ``n_iter`` and ``log_posterior`` ([S], or None without
        a prior). The optimisation itself runs in float64.

    References
    ----------
    Wilson & Collins (2019), rule 4 ("fit the parameters": restarts against local maxima, their
    Box 3); Daw (2011); Nocedal & Wright (2006),
    ch. 4 (trust regions); Dauphin et al. (2014) (saddle-free Newton).
    """
    func = "fit_rw"
    choices, rewards = _check_data(choices, rewards, func)
    initial_value = _check_initial_value(initial_value, func)
    max_iter = check_int(max_iter, "max_iter", func, minimum=1)
    beta_max = check_positive_number(beta_max, "beta_max", func)
    if beta_max <= math.exp(_B_MIN):
        raise ValueError(f"{func}: argument 'beta_max' must be > {math.exp(_B_MIN):.3g}, "
                         f"got {beta_max}")
    if isinstance(gtol, bool) or not isinstance(gtol, (int, float)) or not gtol > 0:
        raise ValueError(f"{func}: argument 'gtol' must be a number > 0, got {gtol!r}")
    device = choices.device
    dtype = torch.float64  # a well-defined optimum for comparisons; see the docstring
    S, T = choices.shape
    if starts is None:
        K = check_int(n_starts, "n_starts", func, minimum=1)
        check_generator(generator, device, func)
        starts = _draw_starts(S, K, generator, device, dtype)
    else:
        starts = as_float_tensor(starts, "starts", func)
        if starts.dim() != 3 or starts.shape[0] != S or starts.shape[2] != 2 or starts.shape[1] < 1:
            raise ValueError(
                f"{func}: argument 'starts' must have shape [S, K, 2] with S={S}, got "
                f"{tuple(starts.shape)}"
            )
        check_no_nan(starts, "starts", func)
        if not bool(((starts[..., 0] > 0) & (starts[..., 0] < 1) & (starts[..., 1] > 0)).all()):
            raise ValueError(f"{func}: argument 'starts' needs 0 < alpha < 1 and beta > 0")
        if bool(torch.isinf(starts).any()):
            raise ValueError(f"{func}: argument 'starts' must be finite")
        starts = starts.to(device=device, dtype=dtype)
        K = starts.shape[1]

    prior = _check_prior(prior, func, device, dtype)
    with torch.no_grad():
        theta, ll, conv, n_iter = _newton(
            choices, rewards, starts.reshape(S * K, 2), K, initial_value, max_iter, gtol,
            beta_max, prior,
        )
    ll_sk = ll.reshape(S, K)
    best = torch.nan_to_num(ll_sk, nan=-math.inf).argmax(dim=1)
    rows = torch.arange(S, device=device)
    theta = theta.reshape(S, K, 2)[rows, best]
    objective = ll_sk[rows, best]
    out = rewards.dtype
    if prior is None:
        like, post = objective, None
    else:
        # ℓ at the estimate computed again, not objective - log prior: with a tight prior
        # centred outside the box that difference cancels (sd 1e-8: ℓ off by units)
        like = rw_log_likelihood(torch.sigmoid(theta[:, 0]), torch.exp(theta[:, 1]),
                                 choices.to(dtype), rewards.to(dtype),
                                 initial_value=initial_value)
        post = objective.to(out)
    return RWFit(
        alpha=torch.sigmoid(theta[:, 0]).to(out),
        beta=torch.exp(theta[:, 1]).to(out),
        log_likelihood=like.to(out),
        # a non-finite ℓ is never a converged fit (the tests above all hold at ℓ = −inf)
        converged=conv.reshape(S, K)[rows, best] & torch.isfinite(objective),
        start_log_likelihoods=ll_sk.to(out),
        n_iter=n_iter,
        log_posterior=post,
    )


def _check_prior(prior, func, device, dtype):
    """``(mean, precision)`` float64 [2] tensors from ``prior = (mean, sd)``, or None."""
    if prior is None:
        return None
    if not isinstance(prior, (tuple, list)) or len(prior) != 2:
        got = type(prior).__name__
        if isinstance(prior, (tuple, list)):
            got = f"a {got} of length {len(prior)}"
        raise TypeError(f"{func}: argument 'prior' must be a pair (mean, sd) of pairs for "
                        f"(logit alpha, log beta), got {got}")
    parts = []
    for name, x in zip(("mean", "sd"), prior):
        try:
            t = torch.as_tensor(x, dtype=dtype, device=device)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{func}: argument 'prior' must hold numbers; its {name} is "
                            f"{x!r}") from None
        if t.shape != (2,):
            raise ValueError(f"{func}: argument 'prior' needs a {name} for logit alpha and for "
                             f"log beta (2 numbers), got shape {tuple(t.shape)}")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{func}: argument 'prior' must be finite, its {name} is "
                             f"{t.tolist()}")
        parts.append(t)
    mean, sd = parts
    if not bool((sd > 0).all()):
        raise ValueError(f"{func}: argument 'prior' needs sd > 0, got {sd.tolist()}")
    prec = sd.pow(-2)
    if not bool(torch.isfinite(prec).all()):  # sd ≲ 1e-154: 1 / sd² overflows
        raise ValueError(f"{func}: argument 'prior' has an sd too small for 1 / sd² in "
                         f"float64, got {sd.tolist()}")
    return mean, prec


def _log_prior(theta, prior):
    """Normal log-density of θ = (logit α, log β) up to its constant: -Σ (θ - mean)² / 2 sd²."""
    mean, prec = prior
    return -0.5 * ((theta - mean).pow(2) * prec).sum(-1)


def _add_prior(ll, g, h, theta, prior):
    """ℓ + log prior, its gradient and Hessian (h = [∂aa, ∂ab, ∂bb]) in θ [N, 2].

    The log prior is a quadratic in θ: gradient -(θ - mean) / sd², Hessian diag(-1 / sd²).
    """
    mean, prec = prior
    ll = ll + _log_prior(theta, prior)
    g = g - (theta - mean) * prec
    h = h - torch.stack((prec[0], prec.new_zeros(()), prec[1])).expand_as(h)
    return ll, g, h


def _unconstrained(ll, g, h, theta):
    """Gradient and Hessian of ℓ in θ = (logit α, log β) from those in (α, β)."""
    alpha, beta = torch.sigmoid(theta[:, 0]), torch.exp(theta[:, 1])
    da = alpha * (1 - alpha)  # dα/da
    d2a = da * (1 - 2 * alpha)  # d²α/da²
    g_a, g_b = g[0] * da, g[1] * beta  # dβ/db = d²β/db² = β
    h_aa = h[0] * da**2 + g[0] * d2a
    h_ab = h[1] * da * beta
    h_bb = h[2] * beta**2 + g[1] * beta
    return ll, torch.stack((g_a, g_b), -1), torch.stack((h_aa, h_ab, h_bb), -1)


def _projected(theta, g, lo, hi):
    """Gradient with the components that push against the box set to 0, and that mask."""
    fixed = ((theta >= hi) & (g > 0)) | ((theta <= lo) & (g < 0))
    return g.masked_fill(fixed, 0.0), fixed


def _step(g, h, radius, fixed):
    """Saddle-free Newton step δ = |H|⁻¹ g, shortened to the trust radius.

    ``|H|`` is the Hessian with its eigenvalues replaced by their absolute values (floored at
    1e-10 of the largest): where −H is positive definite this is exactly Newton's step; where
    H is indefinite (far from the optimum) it still goes uphill, and, unlike the Fisher
    (Gauss–Newton) matrix, it does not overstate the curvature near a saddle. ``g`` is the
    projected gradient; a coordinate held at the box (``fixed``) gets no step.
    Returns the step, whether it was shortened, and ½ gᵀ|H|⁻¹g, the gain in ℓ that the
    quadratic model predicts for the full step (half the squared Newton decrement). Dauphin et al. (2014); Nocedal & Wright
    (2006), ch. 4 and 6.3.
    """
    # with a coordinate held at the box, solve for the free one alone: drop the cross term
    h_ab = h[:, 1].masked_fill(fixed.any(-1), 0.0)
    H = torch.stack((h[:, 0], h_ab, h_ab, h[:, 2]), -1).reshape(-1, 2, 2)
    evals, evecs = torch.linalg.eigh(H)
    absval = evals.abs()
    absval = torch.maximum(absval, 1e-10 * absval.amax(-1, keepdim=True) + 1e-300)
    coords = (evecs.transpose(-1, -2) @ g.unsqueeze(-1)).squeeze(-1) / absval
    step = (evecs @ coords.unsqueeze(-1)).squeeze(-1)
    step = step.masked_fill(fixed, 0.0)
    gain = 0.5 * (g * step).sum(-1)  # the quadratic model's predicted gain of the full step
    norm = step.norm(dim=-1)
    short = norm > radius
    step = step * torch.where(short, radius / norm, torch.ones_like(norm)).unsqueeze(-1)
    return step, short, gain


def _newton(choices, rewards, theta0_ab, K, initial_value, max_iter, gtol, beta_max,
            prior=None):
    """Batched trust-region Newton on N = S·K independent problems; returns θ, ℓ, converged, it.

    Each problem keeps its own trust radius (in θ = (logit α, log β) units): a step that lowers
    ℓ is rejected and the radius shrinks to a quarter of that step; a full-length accepted step
    quadruples it (up to 4). Problems that have converged leave the batch.
    """
    dtype = torch.float64
    dev = choices.device
    y = choices.T.to(dtype).repeat_interleave(K, dim=1)  # [T, N]; column n = participant n // K
    r = rewards.T.to(dtype).repeat_interleave(K, dim=1)
    N = y.shape[1]
    lo = torch.tensor([-_A_MAX, _B_MIN], dtype=dtype, device=dev)
    hi = torch.tensor([_A_MAX, math.log(beta_max)], dtype=dtype, device=dev)
    theta = torch.stack((torch.logit(theta0_ab[:, 0]), torch.log(theta0_ab[:, 1])), -1)
    theta = torch.minimum(torch.maximum(theta, lo), hi)

    # The data of the problems still in the batch ("cols") are gathered again only when the
    # batch has shrunk by a third: gathering [T, N] columns every iteration costs more than
    # re-evaluating a few problems that have already converged.
    data = {}

    def gather(cols):
        yc = y[:, cols]
        data.update(cols=cols, y=yc, r=r[:, cols], onehot=torch.stack((1 - yc, yc), dim=1))

    def evaluate(th, pos):
        """ℓ, gradient, Hessian in θ at th for the active problems (at positions pos of cols)."""
        th_c = theta[data["cols"]]
        th_c[pos] = th
        alpha, beta = torch.sigmoid(th_c[:, 0]), torch.exp(th_c[:, 1])
        ll, g, h = _derivatives(alpha, beta, data["y"], data["r"], initial_value, 2,
                                onehot=data["onehot"])
        ll, g, h = _unconstrained(ll, g, h, th_c)
        if prior is not None:
            ll, g, h = _add_prior(ll, g, h, th_c, prior)
        return ll[pos], g[pos], h[pos]

    active = torch.arange(N, device=dev)
    gather(active)
    ll, g, h = evaluate(theta, active)
    radius = torch.ones(N, dtype=dtype, device=dev)
    converged = torch.zeros(N, dtype=torch.bool, device=dev)
    ll_mark = ll.clone()
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        if active.numel() < 0.67 * data["cols"].numel():
            gather(active)
        pos = torch.searchsorted(data["cols"], active)  # both sorted
        th_a, ll_old, rad = theta[active], ll[active], radius[active]
        gp, fixed = _projected(th_a, g[active], lo, hi)
        step, short, gain = _step(gp, h[active], rad, fixed)
        # Newton-decrement test: nothing left to gain (within 1e-11 (1 + |ℓ|)). Unlike a test on
        # |g| alone it also holds when ℓ creeps towards a supremum at the box (α → 1, say), where
        # the gradient is small but so is the curvature, and the remaining gain is about |g|.
        small = gain < 1e-11 * (1 + ll_old.abs())
        if bool(small.any()):
            converged[active[small]] = True
            keep = ~small
            active, pos, th_a, ll_old, rad = active[keep], pos[keep], th_a[keep], ll_old[keep], \
                rad[keep]
            step, short = step[keep], short[keep]
            if active.numel() == 0:
                break
        th_new = torch.minimum(torch.maximum(th_a + step, lo), hi)
        ll_new, g_new, h_new = evaluate(th_new, pos)
        # accept if ℓ did not go down (a few ulps of |ℓ| absorb rounding)
        accept = ll_new >= ll_old - 4 * torch.finfo(dtype).eps * ll_old.abs()
        idx = active[accept]
        theta[idx], ll[idx], g[idx], h[idx] = (th_new[accept], ll_new[accept], g_new[accept],
                                               h_new[accept])
        step_norm = step.norm(dim=-1)
        radius[active] = torch.where(
            accept, torch.where(short, torch.clamp(4 * rad, max=4.0), rad), 0.25 * step_norm
        )
        scale = 1 + ll[active].abs()
        gmax = _projected(theta[active], g[active], lo, hi)[0].abs().amax(-1)
        done = (
            (gmax < gtol * scale)
            # a full Newton step that no longer changes ℓ: stationary, or drifting along an
            # asymptote (e.g. β → ∞ for a participant whose choices are all predictable)
            | (accept & ((ll_new - ll_old).abs() <= 1e-12 * scale))
            # no uphill step longer than 1e-9 exists: stationary to rounding (ℓ is flat to
            # ~1e-13 there, so accept/reject flips on rounding noise)
            | (radius[active] < 1e-9)
        )
        if n_iter % 3 == 0:
            # stalled: three iterations gained less than 1e-9 (1 + |ℓ|) in total. This ends the
            # slow crawl along a curved ridge towards a supremum at β → ∞, where the remaining
            # gain is below that (such fits are flagged by their huge β; Wilson & Collins 2019,
            # rule 4, on parameters that run to the bounds).
            done |= (ll[active] - ll_mark[active]) <= 1e-9 * scale
            ll_mark[active] = ll[active]
        converged[active[done]] = True
        active = active[~done]
        if active.numel() == 0:
            break
    return theta, ll, converged, n_iter


class RWHierarchicalFit(NamedTuple):
    """Result of :func:`fit_rw_hierarchical`."""

    alpha: torch.Tensor  #: [S] MAP learning rate under the fitted group prior
    beta: torch.Tensor  #: [S] MAP inverse temperature under the fitted group prior
    mean: torch.Tensor  #: [2] group mean of (logit α, log β)
    sd: torch.Tensor  #: [2] group sd of (logit α, log β)
    posterior_sd: torch.Tensor  #: [S, 2] Laplace posterior sd of (logit α, log β)
    log_marginal: torch.Tensor  #: [S] Laplace log p(data_i | mean, sd), constants included
    log_likelihood: torch.Tensor  #: [S] ℓ at the estimates
    converged: bool  #: the group parameters stopped moving (see ``tol``)
    n_iter: int  #: EM iterations (E-steps) done
    history: list  #: Σ_i log_marginal after each E-step, in float


def _laplace(choices, rewards, theta, mean, sd, initial_value):
    """Laplace approximation at the MAP θ [S, 2]: log p(data_i | mean, sd) [S], cov [S, 2, 2].

    log p(y) ≈ ℓ(θ̂) + log N(θ̂; mean, sd²) + log 2π − ½ log det(−H), H the Hessian of
    ℓ + log prior at θ̂ (2 dimensions: (2π)^{d/2} = 2π). Where −H is not positive definite
    (an estimate held at the box) its eigenvalues are replaced by their absolute values,
    floored at the prior's smaller precision, so the covariance stays positive definite and no
    wider than the prior.
    """
    y, r = choices.T.to(torch.float64), rewards.T.to(torch.float64)
    alpha, beta = torch.sigmoid(theta[:, 0]), torch.exp(theta[:, 1])
    ll, g, h = _derivatives(alpha, beta, y, r, initial_value, 2)
    ll, g, h = _unconstrained(ll, g, h, theta)
    prec = sd.pow(-2)
    neg_h = -torch.stack((h[:, 0], h[:, 1], h[:, 1], h[:, 2]), -1).reshape(-1, 2, 2)
    neg_h = neg_h + torch.diag(prec)
    evals, evecs = torch.linalg.eigh(neg_h)
    evals = torch.maximum(evals.abs(), prec.min())
    cov = evecs @ torch.diag_embed(1 / evals) @ evecs.transpose(-1, -2)
    z = (theta - mean) / sd
    log_prior = (-0.5 * z.pow(2) - sd.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
    log_marg = ll + log_prior + math.log(2 * math.pi) - 0.5 * evals.log().sum(-1)
    return log_marg, cov, ll


def fit_rw_hierarchical(choices, rewards, n_starts=5, generator=None, *, starts=None,
                        init=None, max_iter=200, tol=1e-4, beta_max=100.0,
                        initial_value=0.0):
    """Hierarchical (empirical-Bayes) fit: the group prior of ``(logit α, log β)`` estimated
    from the participants themselves, and each participant's MAP estimate under it.

    Model: ``θ_i = (logit α_i, log β_i) ~ N(mean, diag(sd²))`` independently, and participant
    i's choices follow the Rescorla–Wagner learner with ``θ_i``. The group parameters
    ``(mean, sd)`` maximise the marginal likelihood ``Σ_i log ∫ p(data_i | θ) N(θ; mean, sd²)
    dθ``, found by expectation–maximisation with a Laplace approximation of each participant's
    posterior (Daw 2011, "hierarchical models"; Huys et al. 2011):

    * E-step: MAP ``θ̂_i`` under the current prior (:func:`fit_rw` with ``prior``, all
      participants in one batch), and the posterior covariance ``Σ_i = (−H_i)⁻¹``, ``H_i`` the
      Hessian of ``ℓ_i + log prior`` at ``θ̂_i``;
    * M-step: ``mean = avg_i θ̂_i`` and ``sd² = avg_i ((θ̂_i − mean)² + diag Σ_i)``.

    The first E-step starts each participant from ``n_starts`` random points; later ones start
    from the previous estimate (the prior moves little between iterations). The iteration stops
    when no component of ``mean`` or ``log sd`` moves by more than ``tol``. EM converges
    linearly, slowly where the group sd is small compared with the participants' posterior sd:
    with few participants or few trials a group sd can shrink toward 0 for hundreds of
    iterations (3 participants × 60 trials in the tests), and ``converged`` is then False.

    Parameters
    ----------
    choices, rewards : Tensor [S, T]
        The data (choices in {0, 1}), S >= 2 participants (one participant's sd is not defined).
    n_starts : int
        Random starting points per participant for the first E-step.
    generator : torch.Generator, optional
        Source of the random starts.
    starts : Tensor [S, K, 2], optional
        Explicit starting points ``(α, β)`` of the first E-step, as in :func:`fit_rw` (e.g. the
        estimates of a MAP fit under ``init``, which saves the first E-step's restarts).
    init : (mean, sd), optional
        Starting prior, pairs for (logit α, log β) as in :func:`fit_rw`'s ``prior``; default
        ``((0, log 3), (1.5, 1.5))``, a weak prior.
    max_iter : int
        Most EM iterations.
    tol : float
        Convergence test on the change of ``mean`` and ``log sd`` in one iteration.
    beta_max, initial_value
        As in :func:`fit_rw`.

    Returns
    -------
    RWHierarchicalFit
        ``alpha, beta, log_likelihood, log_marginal`` [S] and ``posterior_sd`` [S, 2] (in the
        rewards' dtype) are those of the last E-step, under the prior ``mean, sd`` ([2] each,
        float64) that is returned; ``log_marginal`` is the Laplace approximation of
        ``log p(data_i | mean, sd)`` with all constants (it can be compared across priors and
        models); ``history`` is its sum after each E-step. The work runs in float64.

    References
    ----------
    Daw (2011), "Trial-by-trial data analysis using computational models", sec. on
    hierarchical models (the Laplace/EM approach); Huys et al. (2011) (EM for
    reinforcement-learning parameters); Wilson & Collins (2019), rule 4.
    """
    func = "fit_rw_hierarchical"
    choices, rewards = _check_data(choices, rewards, func)
    if choices.shape[0] < 2:
        raise ValueError(f"{func}: needs at least 2 participants (rows) to estimate a group "
                         f"sd, got {choices.shape[0]}")
    max_iter = check_int(max_iter, "max_iter", func, minimum=1)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol > 0:
        raise ValueError(f"{func}: argument 'tol' must be a number > 0, got {tol!r}")
    initial_value = _check_initial_value(initial_value, func)
    device, dtype = choices.device, torch.float64
    out = rewards.dtype
    rewards = rewards.to(dtype)  # the work in float64, as in fit_rw
    if init is None:
        init = ((0.0, math.log(3.0)), (1.5, 1.5))
    try:
        mean, prec = _check_prior(init, func, device, dtype)
    except (TypeError, ValueError) as err:
        raise type(err)(str(err).replace("'prior'", "'init'")) from None
    sd = prec.rsqrt()
    # fit_rw checks n_starts, generator, starts and beta_max (its messages name fit_rw)
    fit = fit_rw(choices, rewards, n_starts, generator, starts=starts, beta_max=beta_max,
                 initial_value=initial_value, prior=(mean, sd))
    history = []
    converged, n_iter = False, 0
    for n_iter in range(1, max_iter + 1):
        theta = torch.stack((torch.logit(fit.alpha.to(dtype)), fit.beta.to(dtype).log()), -1)
        log_marg, cov, ll = _laplace(choices, rewards, theta, mean, sd, initial_value)
        history.append(float(log_marg.sum()))
        new_mean = theta.mean(0)
        var = ((theta - new_mean).pow(2) + torch.diagonal(cov, dim1=-2, dim2=-1)).mean(0)
        new_sd = var.sqrt()
        moved = max(float((new_mean - mean).abs().max()),
                    float((new_sd.log() - sd.log()).abs().max()))
        if moved < tol:
            converged = True
            break
        if n_iter == max_iter:
            break
        mean, sd = new_mean, new_sd
        # warm start from the last estimates (inside the box: fit_rw refuses α in {0, 1})
        a = torch.sigmoid(theta[:, 0].clamp(-_A_MAX + 1e-6, _A_MAX - 1e-6))
        starts = torch.stack((a, theta[:, 1].exp()), -1).unsqueeze(1)
        fit = fit_rw(choices, rewards, starts=starts, beta_max=beta_max,
                     initial_value=initial_value, prior=(mean, sd))
    return RWHierarchicalFit(
        alpha=fit.alpha.to(out), beta=fit.beta.to(out), mean=mean, sd=sd,
        posterior_sd=torch.diagonal(cov, dim1=-2, dim2=-1).sqrt().to(out),
        log_marginal=log_marg.to(out), log_likelihood=ll.to(out), converged=converged,
        n_iter=n_iter, history=history,
    )

# --------------------------------------------------------------------------------------------
# alternative models for model recovery (Wilson & Collins 2019, models 1 and 2)
# --------------------------------------------------------------------------------------------


def simulate_biased(bias, reward_probs, n_trials, generator=None):
    """Simulate a biased random chooser: option 1 with probability ``bias`` on every trial.

    Parameters
    ----------
    bias : Tensor [S]
        Probability of choosing option 1, in [0, 1].
    reward_probs : Tensor [2], [S, 2] or [S, T, 2]
        As in :func:`simulate_bandit` (rewards are drawn, but do not affect the choices).
    n_trials : int
    generator : torch.Generator, optional

    Returns
    -------
    choices : Tensor [S, T], int64;  rewards : Tensor [S, T], dtype of ``bias``

    References
    ----------
    Wilson & Collins (2019), model 1 ("random responding").
    """
    func = "simulate_biased"
    bias = _check_rate(bias, "bias", func)
    n_trials = check_int(n_trials, "n_trials", func, minimum=1)
    check_generator(generator, bias.device, func)
    S = bias.shape[0]
    dtype = _work_dtype(bias.dtype)
    probs = _check_reward_probs(reward_probs, S, n_trials, func, bias.device).to(dtype)
    u = torch.rand((2, n_trials, S), generator=generator, device=bias.device, dtype=dtype)
    choices = (u[0] < bias.to(dtype)).long()  # [T, S]
    p_reward = probs.gather(-1, choices.unsqueeze(-1)).squeeze(-1)
    rewards = (u[1] < p_reward).to(bias.dtype)
    return choices.T.contiguous(), rewards.T.contiguous()


def fit_biased(choices, *, dtype=None):
    """Maximum-likelihood bias of a biased random chooser (closed form: the fraction of 1s).

    Parameters
    ----------
    choices : Tensor [S, T]
        Options chosen (0 or 1).
    dtype : torch.dtype, optional
        Floating dtype of the results (default: ``torch.get_default_dtype()``).

    Returns
    -------
    bias : Tensor [S];  log_likelihood : Tensor [S]
        ``ℓ = k log b + (T − k) log(1 − b)`` at ``b = k / T`` (with 0 log 0 = 0).

    References
    ----------
    Wilson & Collins (2019), model 1.
    """
    func = "fit_biased"
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"{func}: argument 'dtype' must be a floating torch.dtype, got {dtype!r}")
    choices, _ = _check_data(choices, torch.zeros(choices.shape if isinstance(
        choices, torch.Tensor) else (0,), dtype=dtype), func)
    T = choices.shape[1]
    k = choices.to(torch.float64).sum(1)
    b = k / T
    # xlogy(0, 0) = 0: a participant who always picks the same option has ℓ = 0, not NaN
    ll = torch.xlogy(k, b) + torch.xlogy(T - k, 1 - b)
    return b.to(dtype), ll.to(dtype)


def _wsls_consistent(choices, rewards):
    """[S, T−1] bool: trial t ≥ 1 follows win-stay/lose-shift given trial t − 1."""
    stay = choices[:, 1:] == choices[:, :-1]
    win = rewards[:, :-1] > 0
    return stay == win


def simulate_wsls(epsilon, reward_probs, n_trials, generator=None):
    """Simulate noisy win-stay/lose-shift choosers on a two-armed bandit.

    Trial 0 is a coin flip. On trial ``t ≥ 1`` the chooser repeats the previous choice after a
    win (``r_{t−1} > 0``) and switches after a loss, except that with probability ``ε`` it
    chooses at random instead: the rule is followed with probability ``1 − ε/2``.

    Parameters
    ----------
    epsilon : Tensor [S]
        Noise level in [0, 1] (0: the rule always, 1: random).
    reward_probs : Tensor [2], [S, 2] or [S, T, 2]
    n_trials : int
    generator : torch.Generator, optional

    Returns
    -------
    choices : Tensor [S, T], int64;  rewards : Tensor [S, T], dtype of ``epsilon``

    References
    ----------
    Wilson & Collins (2019), model 2 ("noisy win-stay-lose-shift").
    """
    func = "simulate_wsls"
    epsilon = _check_rate(epsilon, "epsilon", func)
    n_trials = check_int(n_trials, "n_trials", func, minimum=1)
    check_generator(generator, epsilon.device, func)
    S = epsilon.shape[0]
    dtype = _work_dtype(epsilon.dtype)
    probs = _check_reward_probs(reward_probs, S, n_trials, func, epsilon.device).to(dtype)
    u = torch.rand((2, n_trials, S), generator=generator, device=epsilon.device, dtype=dtype)
    eps = epsilon.to(dtype)
    choices = torch.empty((n_trials, S), dtype=torch.long, device=epsilon.device)
    rewards = torch.empty((n_trials, S), dtype=dtype, device=epsilon.device)
    rows = torch.arange(S, device=epsilon.device)
    c = (u[0, 0] < 0.5).long()
    for t in range(n_trials):
        if t > 0:
            rule = torch.where(rewards[t - 1] > 0, choices[t - 1], 1 - choices[t - 1])
            follow = u[0, t] < 1 - eps / 2
            c = torch.where(follow, rule, 1 - rule)
        choices[t] = c
        rewards[t] = (u[1, t] < probs[t, rows, c]).to(dtype)
    return choices.T.contiguous(), rewards.T.contiguous().to(epsilon.dtype)


def wsls_log_likelihood(epsilon, choices, rewards):
    """Log-likelihood of each participant's choices under noisy win-stay/lose-shift.

    ``ℓ = log ½ + Σ_{t≥1} [k_t log(1 − ε/2) + (1 − k_t) log(ε/2)]``, where ``k_t = 1`` when
    trial ``t`` follows the rule given trial ``t − 1`` (0 log 0 = 0).

    Parameters
    ----------
    epsilon : Tensor [S];  choices, rewards : Tensor [S, T]

    Returns
    -------
    Tensor [S]

    References
    ----------
    Wilson & Collins (2019), model 2.
    """
    func = "wsls_log_likelihood"
    epsilon = _check_rate(epsilon, "epsilon", func)
    choices, rewards = _check_data(choices, rewards, func, S=epsilon.shape[0],
                                   device=epsilon.device)
    dtype = _work_dtype(epsilon.dtype)
    k = _wsls_consistent(choices, rewards).to(dtype).sum(1)
    n = choices.shape[1] - 1
    e = epsilon.to(dtype) / 2
    ll = math.log(0.5) + torch.xlogy(k, 1 - e) + torch.xlogy(n - k, e)
    return ll.to(epsilon.dtype)


def fit_wsls(choices, rewards):
    """Maximum-likelihood noise level of noisy win-stay/lose-shift (closed form).

    With ``n = T − 1`` rule-governed trials of which ``m`` break the rule, ``ℓ(ε)`` has a
    closed-form maximiser in ``m / n``, capped at ``ε = 1`` (random choice). Deriving it is
    chapter 2's exercise ``choice-wsls-mle``; the help text does not print it.

    Parameters
    ----------
    choices, rewards : Tensor [S, T]

    Returns
    -------
    epsilon : Tensor [S];  log_likelihood : Tensor [S]   (rewards' dtype)

    References
    ----------
    Wilson & Collins (2019), model 2.
    """
    func = "fit_wsls"
    choices, rewards = _check_data(choices, rewards, func)
    T = choices.shape[1]
    n = T - 1
    if n == 0:
        eps = torch.ones(choices.shape[0], dtype=torch.float64, device=choices.device)
    else:
        m = (~_wsls_consistent(choices, rewards)).to(torch.float64).sum(1)
        eps = torch.clamp(2 * m / n, max=1.0)
    ll = wsls_log_likelihood(eps, choices, rewards)
    return eps.to(rewards.dtype), ll.to(rewards.dtype)


# --------------------------------------------------------------------------------------------
# model-free behavioural signatures (Wilson & Collins 2019, rule 3 and Box 2)
# --------------------------------------------------------------------------------------------


def stay_probabilities(choices, rewards):
    """How often each participant repeats a choice after a win and after a loss.

    Model-free signatures of behaviour, computed from the data before any model is fitted: trial
    ``t ≥ 1`` is a *stay* when ``c_t = c_{t−1}``, and it follows a *win* when ``r_{t−1} > 0``
    (a loss otherwise, the same split as :func:`simulate_wsls`). Then::

        p(stay | win)  = #{t ≥ 1: stay, r_{t−1} > 0}  / #{t ≥ 1: r_{t−1} > 0},
        p(stay | loss) = #{t ≥ 1: stay, r_{t−1} ≤ 0} / #{t ≥ 1: r_{t−1} ≤ 0}.

    Noisy win-stay/lose-shift has ``p(stay | win) = 1 − ε/2`` and ``p(stay | loss) = ε/2``
    whatever the task. A biased random chooser ignores outcomes; when each option pays as often
    as the other on average (the reversal task of :func:`reversal_reward_probs`, or equal reward
    probabilities) it has ``p(stay | win) = p(stay | loss) = b² + (1 − b)²`` in expectation (with
    unequal probabilities a win makes the better-paying, more often chosen option the likelier
    previous choice, and the two differ). A Rescorla–Wagner learner with β > 0 lies in
    between, typically with ``p(stay | win) > p(stay | loss)``.

    Parameters
    ----------
    choices : Tensor [S, T]
        Options chosen (0 or 1), ``T ≥ 2``.
    rewards : Tensor [S, T]
        Rewards received (floating point).

    Returns
    -------
    p_stay_win, p_stay_loss : Tensor [S] each, the rewards' dtype
        NaN for a participant who never won (or never lost) on trials ``0 … T−2``: the
        proportion is undefined there, not 0.

    References
    ----------
    Wilson & Collins (2019), rule 3 and Box 2 (win-stay/lose-shift behaviour of the five
    models, before any fitting).
    """
    func = "stay_probabilities"
    choices, rewards = _check_data(choices, rewards, func)
    if choices.shape[1] < 2:
        raise ValueError(
            f"{func}: argument 'choices' needs at least 2 trials (a stay compares two), got "
            f"shape {tuple(choices.shape)}"
        )
    stay = (choices[:, 1:] == choices[:, :-1]).to(torch.float64)
    win = (rewards[:, :-1] > 0).to(torch.float64)
    n_win, n_loss = win.sum(1), (1 - win).sum(1)
    # 0/0 = NaN on purpose: no wins means p(stay | win) is not defined
    p_win = (stay * win).sum(1) / n_win
    p_loss = (stay * (1 - win)).sum(1) / n_loss
    return p_win.to(rewards.dtype), p_loss.to(rewards.dtype)


# --------------------------------------------------------------------------------------------
# Rescorla–Wagner with a choice kernel (perseveration; Wilson & Collins 2019, model 5)
# --------------------------------------------------------------------------------------------


def _check_ck_params(alpha, beta, alpha_c, beta_c, func: str):
    """α, α_c in [0, 1], β >= 0 finite, β_c finite (any sign), all [S] on one device."""
    alpha, beta = _check_params(alpha, beta, func)
    alpha_c = _check_rate(alpha_c, "alpha_c", func)
    beta_c = as_float_tensor(beta_c, "beta_c", func)
    check_no_nan(beta_c, "beta_c", func)
    for name, x in (("alpha_c", alpha_c), ("beta_c", beta_c)):
        if x.shape != alpha.shape:
            raise ValueError(
                f"{func}: argument '{name}' must have the shape of 'alpha', [S] = "
                f"{tuple(alpha.shape)}, got {tuple(x.shape)}"
            )
        if x.device != alpha.device:
            raise ValueError(f"{func}: argument '{name}' is on {x.device} but 'alpha' is on "
                             f"{alpha.device}")
    if bool(torch.isinf(beta_c).any()):
        raise ValueError(f"{func}: argument 'beta_c' must be finite, got inf")
    return alpha, beta, alpha_c, beta_c


def simulate_ck(alpha, beta, alpha_c, beta_c, reward_probs, n_trials, generator=None, *,
                initial_value=0.0):
    """Simulate Rescorla–Wagner learners with a choice kernel (perseveration).

    Besides the values ``V`` of :func:`simulate_bandit`, each learner keeps a *choice kernel*
    ``K[t, k]``, a running average of how often it chose option ``k``, which starts at 0 and
    moves for *both* options after every choice (``a_t`` is the one-hot of ``c_t``)::

        K[t+1, k] = K[t, k] + α_c (a_t,k − K[t, k]),
        P(c_t = 1) = σ(β ΔV_t + β_c ΔK_t),   ΔK_t = K[t, 1] − K[t, 0].

    ``β_c > 0`` makes the learner repeat recent choices whatever they paid (perseveration),
    ``β_c < 0`` makes it alternate; ``β_c = 0`` is the plain learner (and then ``α_c`` has no
    effect).

    Parameters
    ----------
    alpha, beta : Tensor [S]
        Learning rates in [0, 1] and inverse temperatures >= 0 of the values.
    alpha_c, beta_c : Tensor [S]
        The kernel's learning rates in [0, 1] and its weights (finite, any sign).
    reward_probs : Tensor [2], [S, 2] or [S, T, 2]
        As in :func:`simulate_bandit`.
    n_trials : int
    generator : torch.Generator, optional
    initial_value : float
        Value of both options before trial 0 (the kernel starts at 0).

    Returns
    -------
    choices : Tensor [S, T], int64;  rewards : Tensor [S, T], dtype of the parameters

    References
    ----------
    Wilson & Collins (2019), model 5 ("Rescorla Wagner + choice kernel") and their Box 2.
    """
    func = "simulate_ck"
    alpha, beta, alpha_c, beta_c = _check_ck_params(alpha, beta, alpha_c, beta_c, func)
    n_trials = check_int(n_trials, "n_trials", func, minimum=1)
    initial_value = _check_initial_value(initial_value, func)
    check_generator(generator, alpha.device, func)
    S, dev = alpha.shape[0], alpha.device
    out_dtype = torch.promote_types(torch.promote_types(alpha.dtype, beta.dtype),
                                    torch.promote_types(alpha_c.dtype, beta_c.dtype))
    dtype = _work_dtype(out_dtype)
    probs = _check_reward_probs(reward_probs, S, n_trials, func, dev).to(dtype)
    a, b = alpha.to(dtype), beta.to(dtype)
    ac, bc = alpha_c.to(dtype), beta_c.to(dtype)
    u = torch.rand((2, n_trials, S), generator=generator, device=dev, dtype=dtype)
    V = torch.full((S, 2), initial_value, device=dev, dtype=dtype)
    dK = torch.zeros(S, device=dev, dtype=dtype)  # K[t, 1] − K[t, 0]
    choices = torch.empty((n_trials, S), device=dev, dtype=torch.long)
    rewards = torch.empty((n_trials, S), device=dev, dtype=dtype)
    rows = torch.arange(S, device=dev)
    for t in range(n_trials):
        p1 = torch.sigmoid(b * (V[:, 1] - V[:, 0]) + bc * dK)  # before trial t's outcome
        c = (u[0, t] < p1).long()
        r = (u[1, t] < probs[t, rows, c]).to(dtype)
        V[rows, c] += a * (r - V[rows, c])
        # both kernel entries move: ΔK moves toward a_t,1 − a_t,0 = 2 c_t − 1
        dK = dK + ac * ((2 * c - 1).to(dtype) - dK)
        choices[t], rewards[t] = c, r
    return choices.T.contiguous(), rewards.T.contiguous().to(out_dtype)


def ck_log_likelihood(alpha, beta, alpha_c, beta_c, choices, rewards, *, initial_value=0.0):
    """Log-likelihood of each participant's choices under the learner with a choice kernel.

    ``ℓ = Σ_t log σ((2 y_t − 1) η_t)`` with ``η_t = β ΔV_t + β_c ΔK_t`` (see
    :func:`simulate_ck`); the kernel difference follows
    ``ΔK_{t+1} = (1 − α_c) ΔK_t + α_c (2 y_t − 1)`` from ``ΔK_0 = 0``.

    Parameters
    ----------
    alpha, beta, alpha_c, beta_c : Tensor [S]
    choices, rewards : Tensor [S, T]
    initial_value : float

    Returns
    -------
    Tensor [S]
        Differentiable in all four parameters by autograd (used to check :func:`ck_gradient`).
        With ``beta_c = 0`` it equals :func:`rw_log_likelihood`.

    References
    ----------
    Wilson & Collins (2019), model 5; Daw (2011), section 2.
    """
    func = "ck_log_likelihood"
    alpha, beta, alpha_c, beta_c = _check_ck_params(alpha, beta, alpha_c, beta_c, func)
    choices, rewards = _check_data(choices, rewards, func, S=alpha.shape[0], device=alpha.device)
    initial_value = _check_initial_value(initial_value, func)
    V = _values(alpha, choices, rewards, initial_value)
    dtype = _work_dtype(V.dtype, beta.dtype, alpha_c.dtype, beta_c.dtype)
    sign = 2 * choices.to(dtype) - 1  # [S, T]
    ac = alpha_c.to(dtype)
    dK = torch.zeros_like(ac)
    kernel = []
    for t in range(choices.shape[1]):
        kernel.append(dK)
        dK = dK + ac * (sign[:, t] - dK)
    eta = (beta.to(dtype).unsqueeze(-1) * (V[..., 1] - V[..., 0]).to(dtype)
           + beta_c.to(dtype).unsqueeze(-1) * torch.stack(kernel, 1))
    # log σ(±η) is exact for any η (log(sigmoid(η)) gives log 0 for η < −745)
    ll = F.logsigmoid(sign * eta).sum(-1)
    out = torch.promote_types(torch.promote_types(alpha.dtype, beta.dtype),
                              torch.promote_types(alpha_c.dtype, beta_c.dtype))
    return ll.to(torch.promote_types(out, rewards.dtype))


def _ck_features(alpha, alpha_c, y, r, initial_value, order=1):
    """Per-trial features before each outcome, by forward recursions: [T, 4, N]
    (ΔV, ΔD, ΔK, E) for order 1, [T, 6, N] (…, ΔF, E₂) for order 2.

    y, r : [T, N]. D = ∂V/∂α (the chosen option: D' = r − V + (1 − α) D, the other keeps
    its D); E = ∂ΔK/∂α_c, from ΔK' = (1 − α_c) ΔK + α_c s with s = 2y − 1:
    E' = (1 − α_c) E + s − ΔK. Both use the state *before* the update (old V, old ΔK).
    Second order: F = ∂²V/∂α², F' = F + m (−2D − α F); E₂ = ∂²ΔK/∂α_c²,
    E₂' = E₂ − 2E − α_c E₂.

    The three quantities that move, Z = (V_0, V_1, ΔK), share one form, and so do their
    sensitivities G = (D_0, D_1, E) and H = (F_0, F_1, E₂): with the mask m = (1 − y, y, 1),
    the rate a = (α, α, α_c) and the target R = (r, r, s), ``u = R − Z``,
    ``H' = H − m (2G + a H)``, ``G' = G + m (u − a G)``, ``Z' = Z + m a u``: a few tensor
    operations per trial for all learners (the loop is dispatch-bound, so fewer operations
    is faster).
    """
    T, N = y.shape
    dev, dtype = alpha.device, alpha.dtype
    n_state = 1 + order
    rate = torch.stack((alpha, alpha, alpha_c))  # [3, N]
    mask = torch.stack((1 - y, y, torch.ones_like(y)), 1)  # [T, 3, N]
    target = torch.stack((r, r, 2 * y - 1), 1)  # [T, 3, N]
    m_rate = mask * rate
    buf = torch.empty((T + 1, n_state, 3, N), device=dev, dtype=dtype)  # state before trial
    buf[0] = 0.0
    buf[0, 0, :2] = initial_value
    for t in range(T):
        Z, G = buf[t, 0], buf[t, 1]
        if order == 2:
            # H' = H − m (2G + a H), from the old G and H
            w = torch.addcmul(2 * G, rate, buf[t, 2])
            torch.addcmul(buf[t, 2], mask[t], w, value=-1, out=buf[t + 1, 2])
        u = target[t] - Z
        # G' = G + m (u − a G) and Z' = Z + m a u, from the old Z and G (the right order)
        torch.addcmul(G, mask[t], torch.addcmul(u, rate, G, value=-1), out=buf[t + 1, 1])
        torch.addcmul(Z, m_rate[t], u, out=buf[t + 1, 0])
    X = buf[:T]
    cols = [X[:, 0, 1] - X[:, 0, 0], X[:, 1, 1] - X[:, 1, 0], X[:, 0, 2], X[:, 1, 2]]
    if order == 2:
        cols += [X[:, 2, 1] - X[:, 2, 0], X[:, 2, 2]]
    return torch.stack(cols, 1)


def _ck_derivatives(alpha, beta, alpha_c, beta_c, y, r, initial_value, order=1):
    """ℓ [N], its gradient [N, 4] in (α, β, α_c, β_c) and (order 2) its Hessian [N, 4, 4].

    With η_t = β ΔV_t + β_c ΔK_t: ∇ℓ = Σ_t (y_t − p_t) ∇η_t and
    ∇²ℓ = −Σ_t p_t (1 − p_t) ∇η_t ∇η_tᵀ + Σ_t (y_t − p_t) ∇²η_t, where ∇η_t =
    (β ΔD, ΔV, β_c E, ΔK) and the non-zero entries of ∇²η_t are ∂αα = β ΔF, ∂αβ = ΔD,
    ∂α_cα_c = β_c E₂, ∂α_cβ_c = E.
    """
    X = _ck_features(alpha, alpha_c, y, r, initial_value, order=order)
    dV, dD, dK, E = X[:, :4].unbind(1)
    eta = beta * dV + beta_c * dK
    ll = F.logsigmoid((2 * y - 1) * eta).sum(0)
    p = torch.sigmoid(eta)
    res = y - p
    J = torch.stack((beta * dD, dV, beta_c * E, dK), -1)  # [T, N, 4]: ∇η_t
    g = torch.einsum("tn,tnk->nk", res, J)
    if order == 1:
        return ll, g, None
    hess = -torch.einsum("tn,tnk,tnl->nkl", p * (1 - p), J, J)
    dF, E2 = X[:, 4], X[:, 5]
    s_aa, s_ab = (res * beta * dF).sum(0), (res * dD).sum(0)
    s_cc, s_cd = (res * beta_c * E2).sum(0), (res * E).sum(0)
    hess[:, 0, 0] += s_aa
    hess[:, 0, 1] += s_ab
    hess[:, 1, 0] += s_ab
    hess[:, 2, 2] += s_cc
    hess[:, 2, 3] += s_cd
    hess[:, 3, 2] += s_cd
    return ll, g, hess


def ck_gradient(alpha, beta, alpha_c, beta_c, choices, rewards, *, initial_value=0.0):
    """Analytic gradient of :func:`ck_log_likelihood` by forward sensitivities (no autograd).

    With ``η_t = β ΔV_t + β_c ΔK_t`` and ``y_t − p_t = ∂ℓ_t/∂η_t``::

        ∂ℓ/∂α   = Σ_t (y_t − p_t) β ΔD_t,      ∂ℓ/∂β   = Σ_t (y_t − p_t) ΔV_t,
        ∂ℓ/∂α_c = Σ_t (y_t − p_t) β_c E_t,     ∂ℓ/∂β_c = Σ_t (y_t − p_t) ΔK_t,

    ``D = ∂V/∂α`` as in :func:`rw_gradient` (the unchosen option keeps its D) and
    ``E_t = ∂ΔK_t/∂α_c`` from a forward recursion, found by differentiating
    ``ΔK_{t+1} = (1 − α_c) ΔK_t + α_c (2 y_t − 1)``; deriving it is chapter 2's exercise
    ``choice-ck-grad``, so the help text does not print it.

    Parameters
    ----------
    alpha, beta, alpha_c, beta_c : Tensor [S]
    choices, rewards : Tensor [S, T]
    initial_value : float

    Returns
    -------
    (Tensor [S], Tensor [S], Tensor [S], Tensor [S])
        ``∂ℓ/∂α, ∂ℓ/∂β, ∂ℓ/∂α_c, ∂ℓ/∂β_c`` in the parameters' dtype (computed in at least
        float32). Not differentiable.

    References
    ----------
    Wilson & Collins (2019), model 5; Williams & Zipser (1989) (forward sensitivities).
    """
    func = "ck_gradient"
    alpha, beta, alpha_c, beta_c = _check_ck_params(alpha, beta, alpha_c, beta_c, func)
    choices, rewards = _check_data(choices, rewards, func, S=alpha.shape[0], device=alpha.device)
    initial_value = _check_initial_value(initial_value, func)
    out = torch.promote_types(torch.promote_types(alpha.dtype, beta.dtype),
                              torch.promote_types(alpha_c.dtype, beta_c.dtype))
    out = torch.promote_types(out, rewards.dtype)
    dtype = _work_dtype(out)
    with torch.no_grad():
        _, g, _ = _ck_derivatives(*(x.detach().to(dtype) for x in (alpha, beta, alpha_c, beta_c)),
                                  choices.T.to(dtype), rewards.T.to(dtype), initial_value)
    return tuple(g[:, i].to(out) for i in range(4))


class CKFit(NamedTuple):
    """Result of :func:`fit_ck`, one entry per participant (best start)."""

    alpha: torch.Tensor  #: [S] learning rate of the values
    beta: torch.Tensor  #: [S] inverse temperature of the values
    alpha_c: torch.Tensor  #: [S] learning rate of the choice kernel
    beta_c: torch.Tensor  #: [S] weight of the choice kernel
    log_likelihood: torch.Tensor  #: [S] ℓ at the estimate
    converged: torch.Tensor  #: [S] bool
    start_log_likelihoods: torch.Tensor  #: [S, K] ℓ reached from each start
    n_iter: int  #: iterations until the last start converged


def fit_ck(choices, rewards, n_starts=5, generator=None, *, starts=None, beta_max=100.0,
           beta_c_max=20.0, max_iter=200, ftol=1e-8, initial_value=0.0):
    """Maximum-likelihood (α, β, α_c, β_c) of the learner with a choice kernel, for every
    participant at once, from several starting points.

    Method. As :func:`fit_rw`, every (participant, start) pair is an independent problem and
    all are optimised as one batch, in unconstrained coordinates ``θ = (logit α, log β,
    logit α_c, β_c)`` kept in a box (``|logit| ≤ 15``, ``β ≤ beta_max``, ``|β_c| ≤
    beta_c_max``). The step is a damped saddle-free Newton step,
    ``(|H| + λ diag|H| + λ I) δ = g``, with H the exact Hessian in θ (forward sensitivities
    to second order: ∂²V/∂α² and ∂²ΔK/∂α_c²) and ``|H|`` the matrix with H's eigenvalues
    replaced by their absolute values (floored at 1e-10 of the largest): Newton's step where
    ℓ is concave, still uphill where it is not. A step that lowers ℓ is rejected and λ grows
    ×4, an accepted one shrinks it ×3 (Levenberg–Marquardt's rule, λ from 1e-3), so ℓ never
    decreases from a start. A coordinate at the box whose gradient points outward takes no
    step. A pair stops when an accepted step changes ℓ by less than 1e-10 (1 + |ℓ|) and the
    largest gradient component is below 1e-5 (1 + |ℓ|), when three accepted steps in a row
    gain less than ``ftol`` (1 + |ℓ|) together (a crawl along a ridge, e.g. α_c unidentified
    when β_c ≈ 0), or when λ exceeds 1e12 (no uphill step left); ``converged`` is False for
    pairs stopped by ``max_iter``, and for those stopped by λ with a gradient that is not
    small. Pass the plain learner's fit as a start (``β_c = 0``) to make sure the fit is at
    least as good as :func:`fit_rw`'s.

    Parameters
    ----------
    choices, rewards : Tensor [S, T]
    n_starts : int
        Random starts per participant (``α, α_c ~ U(0.05, 0.95)``, ``log β ~ U(log 0.5,
        log 20)``, ``β_c ~ U(−2, 2)``), ignored when ``starts`` is given.
    generator : torch.Generator, optional
    starts : Tensor [S, K, 4], optional
        Explicit starts ``(α, β, α_c, β_c)`` (α, α_c in (0, 1), β > 0, β_c finite).
    beta_max, beta_c_max : float
        Bounds on β and |β_c|.
    max_iter : int
        Iteration limit (one pass over the trials per iteration, for all pairs at once).
    ftol : float
        Relative gain below which three accepted steps count as a crawl (see Method).
    initial_value : float
        Value of both options before trial 0 (the kernel starts at 0).

    Returns
    -------
    CKFit
        ``alpha, beta, alpha_c, beta_c, log_likelihood, converged`` ([S], rewards' dtype),
        ``start_log_likelihoods`` [S, K], ``n_iter``. Runs in float64.

    References
    ----------
    Wilson & Collins (2019), model 5 and rule 4 (restarts); Daw (2011); Nocedal & Wright
    (2006), ch. 10.3 (Levenberg–Marquardt); Dauphin et al. (2014) (saddle-free Newton).
    """
    func = "fit_ck"
    choices, rewards = _check_data(choices, rewards, func)
    initial_value = _check_initial_value(initial_value, func)
    max_iter = check_int(max_iter, "max_iter", func, minimum=1)
    beta_max = check_positive_number(beta_max, "beta_max", func)
    beta_c_max = check_positive_number(beta_c_max, "beta_c_max", func)
    ftol = check_positive_number(ftol, "ftol", func)
    if beta_max <= math.exp(_B_MIN):
        raise ValueError(f"{func}: argument 'beta_max' must be > {math.exp(_B_MIN):.3g}, "
                         f"got {beta_max}")
    dev, dtype = choices.device, torch.float64
    S, T = choices.shape
    if starts is None:
        K = check_int(n_starts, "n_starts", func, minimum=1)
        check_generator(generator, dev, func)
        u = torch.rand((S, K, 4), generator=generator, device=dev, dtype=dtype)
        starts = torch.stack((
            0.05 + 0.9 * u[..., 0],
            torch.exp(math.log(0.5) + (math.log(20.0) - math.log(0.5)) * u[..., 1]),
            0.05 + 0.9 * u[..., 2],
            4 * u[..., 3] - 2,
        ), -1)
    else:
        starts = as_float_tensor(starts, "starts", func)
        if starts.dim() != 3 or starts.shape[0] != S or starts.shape[2] != 4 \
                or starts.shape[1] < 1:
            raise ValueError(f"{func}: argument 'starts' must have shape [S, K, 4] with S={S}, "
                             f"got {tuple(starts.shape)}")
        check_no_nan(starts, "starts", func)
        if bool(torch.isinf(starts).any()):
            raise ValueError(f"{func}: argument 'starts' must be finite")
        ok = ((starts[..., 0] > 0) & (starts[..., 0] < 1) & (starts[..., 1] > 0)
              & (starts[..., 2] > 0) & (starts[..., 2] < 1))
        if not bool(ok.all()):
            raise ValueError(f"{func}: argument 'starts' needs 0 < alpha < 1, beta > 0 and "
                             "0 < alpha_c < 1")
        starts = starts.to(device=dev, dtype=dtype)
        K = starts.shape[1]
    s = starts.reshape(S * K, 4)
    lo = torch.tensor([-_A_MAX, _B_MIN, -_A_MAX, -beta_c_max], dtype=dtype, device=dev)
    hi = torch.tensor([_A_MAX, math.log(beta_max), _A_MAX, beta_c_max], dtype=dtype, device=dev)
    theta = torch.stack((torch.logit(s[:, 0]), s[:, 1].log(), torch.logit(s[:, 2]), s[:, 3]),
                        -1)
    theta = torch.minimum(torch.maximum(theta, lo), hi)
    y = choices.T.to(dtype).repeat_interleave(K, dim=1)  # [T, N], column n = participant n // K
    r = rewards.T.to(dtype).repeat_interleave(K, dim=1)

    def evaluate(th, cols):
        a, b = torch.sigmoid(th[:, 0]), torch.exp(th[:, 1])
        ac, bc = torch.sigmoid(th[:, 2]), th[:, 3]
        ll, g, hess = _ck_derivatives(a, b, ac, bc, y[:, cols], r[:, cols], initial_value,
                                      order=2)
        # chain rule to θ: dα/da = α(1 − α), dβ/db = β, dα_c/da_c = α_c(1 − α_c), dβ_c = 1,
        # and the second derivatives α(1 − α)(1 − 2α), β, …, 0 times the gradient
        jac = torch.stack((a * (1 - a), b, ac * (1 - ac), torch.ones_like(bc)), -1)
        d2 = torch.stack((a * (1 - a) * (1 - 2 * a), b, ac * (1 - ac) * (1 - 2 * ac),
                          torch.zeros_like(bc)), -1)
        hess = hess * jac.unsqueeze(-1) * jac.unsqueeze(-2) + torch.diag_embed(g * d2)
        # saddle-free: −H with its eigenvalues replaced by their absolute values (floored),
        # a positive definite curvature that is Newton's where ℓ is concave (Dauphin et al.
        # 2014), so that the step goes uphill everywhere
        evals, evecs = torch.linalg.eigh(-hess)
        absval = evals.abs()
        absval = torch.maximum(absval, 1e-10 * absval.amax(-1, keepdim=True) + 1e-300)
        curv = evecs @ torch.diag_embed(absval) @ evecs.transpose(-1, -2)
        return ll, g * jac, curv

    N = theta.shape[0]
    with torch.no_grad():
        all_cols = torch.arange(N, device=dev)
        ll, g, curv = evaluate(theta, all_cols)
        lam = torch.full((N,), 1e-3, dtype=dtype, device=dev)
        converged = torch.zeros(N, dtype=torch.bool, device=dev)
        active = all_cols.clone()
        eye = torch.eye(4, dtype=dtype, device=dev)
        ll_mark = ll.clone()
        n_acc = torch.zeros(N, dtype=torch.long, device=dev)
        n_iter = 0
        for n_iter in range(1, max_iter + 1):
            th, gg, ff, lm = theta[active], g[active], curv[active], lam[active]
            # a coordinate at the box whose gradient pushes outward gets no step
            fixed = ((th >= hi) & (gg > 0)) | ((th <= lo) & (gg < 0))
            gg = gg.masked_fill(fixed, 0.0)
            free = (~fixed).to(dtype)
            ff = ff * free.unsqueeze(-1) * free.unsqueeze(-2)
            diag = torch.diagonal(ff, dim1=-2, dim2=-1)
            A = ff + lm[:, None, None] * (torch.diag_embed(diag) + eye)
            step = torch.linalg.solve(A, gg.unsqueeze(-1)).squeeze(-1)
            th_new = torch.minimum(torch.maximum(th + step, lo), hi)
            ll_new, g_new, f_new = evaluate(th_new, active)
            scale = 1 + ll[active].abs()
            accept = torch.isfinite(ll_new) & (ll_new >= ll[active] - 1e-13 * scale)
            idx = active[accept]
            gain = (ll_new - ll[active]).abs()
            theta[idx], g[idx], curv[idx] = th_new[accept], g_new[accept], f_new[accept]
            ll[idx] = ll_new[accept]
            lam[active] = torch.where(accept, lm / 3, lm * 4).clamp(min=1e-12)
            gmax = g[active].masked_fill(fixed, 0.0).abs().amax(-1)
            flat = gmax < 1e-5 * scale
            small = accept & (gain < 1e-10 * scale) & flat
            stuck = lam[active] > 1e12  # no uphill step left at any damping
            # a crawl: three accepted steps in a row gained less than ftol (1 + |ℓ|) together
            # (along a ridge toward the box, e.g. α_c unidentified when β_c ≈ 0). Rejected
            # steps do not count: a run of them only means that λ is still growing.
            n_acc[idx] += 1
            check = accept & (n_acc[active] % 3 == 0)
            crawl = check & ((ll[active] - ll_mark[active]) <= ftol * scale)
            ll_mark[active[check]] = ll[active[check]]
            done = small | stuck | crawl
            converged[active[small | crawl | (stuck & flat)]] = True
            active = active[~done]
            if active.numel() == 0:
                break
    ll_sk = ll.reshape(S, K)
    best = torch.nan_to_num(ll_sk, nan=-math.inf).argmax(1)
    rows = torch.arange(S, device=dev)
    th = theta.reshape(S, K, 4)[rows, best]
    out = rewards.dtype
    best_ll = ll_sk[rows, best]
    return CKFit(
        alpha=torch.sigmoid(th[:, 0]).to(out), beta=torch.exp(th[:, 1]).to(out),
        alpha_c=torch.sigmoid(th[:, 2]).to(out), beta_c=th[:, 3].to(out),
        log_likelihood=best_ll.to(out),
        converged=converged.reshape(S, K)[rows, best] & torch.isfinite(best_ll),
        start_log_likelihoods=ll_sk.to(out), n_iter=n_iter,
    )
