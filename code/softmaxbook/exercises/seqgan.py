"""Checks for the Seq-GAN coding exercise of the chapter "Learning through discrete choices: hard
attention and Seq-GAN" (book/09_hard_attention.ipynb).

* ``seqgan-surrogate``: the Seq-GAN policy-gradient surrogate ``mean_n sum_t Q_t log G(y_t |
  y_{1:t-1})``, whose gradient is the estimate of ``grad J``, ``J = E_{Y~G}[D(Y)]`` (Yu et al.
  2017, eq. 6). Checked *exactly* on models small enough to enumerate every sequence (V = 3,
  T = 3: 27 sequences; V = 4, T = 2: 16): the estimate's average over all sequences, weighted by
  their probabilities, must equal autograd's ``grad sum_y G(y) D(y)``, and for each sequence the
  estimate must be the one with ``Q`` (not the final ``D(Y)``) at every step.
"""

from __future__ import annotations

import torch

from . import call, check_generator, describe, exercise, expect_close, expect_true, watch_calls
from .. import seqgan


def _setup(vocab: int, length: int, seed: int):
    """A float64 generator with gradients, scores D(y) in (0.1, 0.9) for every sequence, the
    exact Q table [n_seq, T], the exact grad J, and the reference estimate per sequence."""
    g = check_generator(seed)  # public in a notebook; the grader's secret salt changes it
    model = seqgan.random_oracle(vocab, 8, embed=4, scale=0.8, generator=g).double()
    model.requires_grad_(True)
    params = list(model.parameters())
    seqs = torch.cartesian_prod(*[torch.arange(vocab)] * length).reshape(-1, length)
    d = 0.1 + 0.8 * torch.rand(seqs.shape[0], generator=g, dtype=torch.float64)
    with torch.no_grad():
        p = model.log_prob(seqs).exp()
    q = torch.empty(seqs.shape, dtype=torch.float64)
    for t in range(1, length + 1):
        # Q(y_{1:t-1}, y_t) = E[D(Y) | Y_{1:t} = y_{1:t}], by summing over the completions
        same = (seqs[:, None, :t] == seqs[None, :, :t]).all(-1).double()      # [n, n]
        q[:, t - 1] = (same @ (p * d)) / (same @ p)
    grad_j = _flat(torch.autograd.grad((model.log_prob(seqs).exp() * d).sum(), params), params)
    ref = torch.stack([_flat(torch.autograd.grad(
        (q[i] * model.token_log_probs(seqs[i:i + 1])[0]).sum(), params), params)
        for i in range(seqs.shape[0])])
    d_weighted = torch.stack([_flat(torch.autograd.grad(
        d[i] * model.log_prob(seqs[i:i + 1])[0], params), params)
        for i in range(seqs.shape[0])])
    return model, params, seqs, p, q, grad_j, ref, d_weighted


def _flat(grads, params):
    return torch.cat([(torch.zeros_like(w) if gr is None else gr).reshape(-1)
                      for gr, w in zip(grads, params)])


def _gradient_of(answer, model, params, tokens, q, desc):
    """Call the learner's function, check its result and inputs, return the gradient of the
    result with respect to the model's parameters (flattened, float64)."""
    args = (model, tokens.clone(), q.clone())
    with watch_calls(seqgan.policy_gradient_loss) as seen:
        got = call(answer, *args, input_desc=desc)
    expect_true(not seen,
                f"for input {desc} your function calls softmaxbook.seqgan.policy_gradient_loss, "
                f"which this exercise asks you to write yourself.")
    expect_true(isinstance(got, torch.Tensor) and got.dim() == 0,
                f"for input {desc} the result should be a scalar tensor (one objective for the "
                f"batch), got {describe(got)}.",
                hint="average over the sequences of the batch, after summing over the steps.")
    expect_true(torch.equal(args[1], tokens) and torch.equal(args[2], q),
                f"for input {desc} your function changed its inputs in place.")
    expect_true(got.requires_grad,
                f"for input {desc} your result has no gradient with respect to the model's "
                f"parameters: {describe(got)}.",
                hint="compute log G(y_t | y_{1:t-1}) with the model (e.g. "
                     "model.token_log_probs(tokens)), not under torch.no_grad() and without "
                     ".item() or .detach() on it.")
    grads = torch.autograd.grad(got, params, allow_unused=True)
    return _flat(grads, params).to(torch.float64)


_HINT = ("the estimate of one sequence is sum_t Q(y_{1:t-1}, y_t) * grad log G(y_t | y_{1:t-1}): "
         "Q of step t times the log-probability of the token written at step t, summed over the "
         "steps and averaged over the batch; to be ascended, so no minus sign.")


@exercise("seqgan-surrogate", "the Seq-GAN policy-gradient surrogate")
def _check_surrogate(surrogate):
    """``surrogate(model, tokens, q)`` -> scalar whose gradient estimates ``grad J``."""
    cases = 0
    for vocab, length, seed in ((3, 3, 0), (4, 2, 1)):
        model, params, seqs, p, q, grad_j, ref, d_weighted = _setup(vocab, length, seed)
        n = seqs.shape[0]
        # float64 throughout; a float32 answer is right to float32 precision, so entries are
        # compared to 1e-6 of the gradient's scale (wrong answers are off by order one)
        tol = dict(rtol=1e-5, atol=1e-6 * float(ref.abs().max()))
        one = (f"each of the {n} sequences of a V = {vocab}, T = {length} generator on its own "
               f"(tokens [1, {length}], q [1, {length}] the exact Q)")
        est = torch.stack([_gradient_of(surrogate, model, params, seqs[i:i + 1], q[i:i + 1],
                                        f"sequence {seqs[i].tolist()} of {one}")
                           for i in range(n)])
        mean = (p[:, None] * est).sum(0)
        # The average over every sequence, weighted by its probability: must be grad J.
        expect_true(not torch.allclose(mean, -grad_j, **tol),
                    f"for input {one} your estimate averages to minus the gradient of "
                    f"J = E[D(Y)]: it would lower the discriminator's score.",
                    hint="return the objective to be maximised, sum_t Q_t log G(y_t | ...), "
                         "not the loss (its negative).")
        expect_close(mean, grad_j, input_desc=one, **tol,
                     what="average of your estimate over all sequences (weighted by G(y)) "
                          "compared with grad J",
                     hint="your estimator is biased. " + _HINT)
        # Unbiased, but is it the Seq-GAN estimate, sequence by sequence?
        same_as_d = torch.allclose(est, d_weighted, **tol)
        expect_true(not same_as_d,
                    f"for input {one} your estimate weights every step by the final score "
                    f"D(Y) = q[:, -1]: unbiased, but not Seq-GAN's estimator, which weights "
                    f"step t by Q(y_{{1:t-1}}, y_t) = E[D(Y) | y_{{1:t}}].",
                    hint="use q[:, t] for step t.")
        for i in range(n):
            expect_close(est[i], ref[i], input_desc=f"sequence {seqs[i].tolist()} of {one}",
                         **tol, what="gradient of your result", hint=_HINT)
        # A batch: the estimate is the mean over its sequences.
        pick = torch.arange(0, n, 3)
        batch = (f"a batch of {len(pick)} sequences of the V = {vocab}, T = {length} generator "
                 f"(tokens [{len(pick)}, {length}])")
        got = _gradient_of(surrogate, model, params, seqs[pick], q[pick], batch)
        expect_true(not torch.allclose(got, ref[pick].sum(0), **tol),
                    f"for input {batch} your result sums over the sequences of the batch.",
                    hint="average over the batch (the estimate of grad J from n sequences is "
                         "their mean), after summing over the steps.")
        expect_close(got, ref[pick].mean(0), input_desc=batch, **tol,
                     what="gradient of your result", hint=_HINT)
        cases += n + 1
    return cases
