"""A small variational auto-encoder for scikit-learn's 8 x 8 digits, with a likelihood that fits
the data.

The pixels of ``sklearn.datasets.load_digits`` are **counts** from 0 to 16 (each is the number of
"on" pixels in a 4 x 4 block of a 32 x 32 bitmap). So the decoder ``p(x | z)`` here is a
distribution on {0, ..., 16} per pixel:

* ``"binomial"`` (default): ``x ~ Binomial(16, sigmoid(logit))``, one logit per pixel;
* ``"categorical"``: a 17-way softmax per pixel, 17 logits per pixel.

Binary cross-entropy on grey values scaled to [0, 1] (the common MNIST recipe, e.g. the VAE of
pytorch/examples, whose issue 460 on it is still open) is not the log-likelihood of any
distribution over those values: as a density on [0, 1] its exponential integrates to
``1 / C(p) <= 1/2``, the normaliser of the continuous Bernoulli (Loaiza-Ganem & Cunningham
2019). The "ELBO" it reports is a lower bound only on a continuous-Bernoulli model's
log-density, loose by ``sum_j log C(p_j) >= 64 log 2`` nats, not on the probability of the
counts. The two likelihoods here are normalised over the values the data can take, so ELBO and
the importance-weighted bound are honest lower bounds on ``log p(x)`` in nats per digit.

The encoder ``q(z | x) = N(mu(x), diag(exp(logvar(x))))`` and the decoder are one-hidden-layer
MLPs; the prior is ``N(0, I)``.

References
----------
* Kingma & Welling (2014), *Auto-Encoding Variational Bayes* (the ELBO, the reparameterised
  gradient, the analytic KL term).
* Burda, Grosse & Salakhutdinov (2016), *Importance Weighted Autoencoders* (the bound
  ``E log (1/K) sum_k p(x, z_k) / q(z_k | x)``, which increases with K towards ``log p(x)``).
* Loaiza-Ganem & Cunningham (2019), *The continuous Bernoulli: fixing a pervasive error in
  variational autoencoders*, NeurIPS (the normaliser that binary cross-entropy omits).
* Bowman, Vilnis, Vinyals, Dai, Jozefowicz & Bengio (2016), *Generating sentences from a
  continuous space*, CoNLL (posterior collapse; KL annealing, :func:`kl_warmup_weight`).
* Kingma, Salimans, Jozefowicz, Chen, Sutskever & Welling (2016), *Improved variational
  inference with inverse autoregressive flow*, NeurIPS (free bits, :func:`free_bits_kl`).
* Burda et al. (2016), section 5.2 ("active units", :func:`active_units`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from softmaxbook._validate import (
    as_float_tensor,
    check_finite,
    check_generator,
    check_int,
    check_positive_number,
)
from softmaxbook.estimators import gaussian_kl

__all__ = ["MAX_COUNT", "load_digits_counts", "binomial_log_prob", "DigitsVAE", "train_vae",
           "kl_per_dimension", "free_bits_kl", "kl_warmup_weight", "active_units"]

#: The largest pixel value of the 8 x 8 digits: each pixel counts the on-pixels of a 4 x 4 block.
MAX_COUNT = 16
_LOG_2PI = math.log(2 * math.pi)


def load_digits_counts(test_fraction: float = 0.25, *, generator=None,
                       dtype=torch.float32):
    """scikit-learn's 1797 digits as count tensors, split at random into train and test.

    Parameters
    ----------
    test_fraction : float in (0, 1)
    generator : torch.Generator, optional (the split's permutation)
    dtype : floating dtype of the result (the values are the integers 0..16)

    Returns
    -------
    (train, test, train_labels, test_labels): Tensors (n, 64) and LongTensors (n,).
    """
    func = "load_digits_counts"
    test_fraction = check_positive_number(test_fraction, "test_fraction", func)
    if test_fraction >= 1:
        raise ValueError(f"{func}: argument 'test_fraction' must be < 1, got {test_fraction}")
    check_generator(generator, None, func)
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

    d = load_digits()
    x = torch.tensor(d.data, dtype=dtype)
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(x.shape[0], generator=generator)
    n_test = max(1, int(round(test_fraction * x.shape[0])))
    te, tr = perm[:n_test], perm[n_test:]
    return x[tr], x[te], y[tr], y[te]


def _check_counts(x, func: str) -> torch.Tensor:
    x = as_float_tensor(x, "x", func)
    check_finite(x, "x", func)
    if bool(((x < 0) | (x > MAX_COUNT) | (x != x.round())).any()):
        raise ValueError(f"{func}: argument 'x' must hold integer counts in [0, {MAX_COUNT}] "
                         f"(the digits' pixel values), got a value outside")
    return x


def binomial_log_prob(x: torch.Tensor, logits: torch.Tensor, total: int = MAX_COUNT):
    """``log Binomial(x; total, sigmoid(logits))`` elementwise, from logits.

    ``log C(total, x) + x * l - total * softplus(l)``: with ``log sigmoid(l) = l - softplus(l)``
    and ``log (1 - sigmoid(l)) = -softplus(l)``, no probability is formed, so large ``|l|``
    neither overflows nor takes ``log 0``.
    """
    func = "binomial_log_prob"
    x = as_float_tensor(x, "x", func)
    logits = as_float_tensor(logits, "logits", func)
    total = check_int(total, "total", func, minimum=1)
    check_finite(x, "x", func)
    if bool(((x < 0) | (x > total) | (x != x.round())).any()):
        raise ValueError(f"{func}: argument 'x' must hold integer counts in [0, {total}] "
                         "(argument 'total'), got a value outside")
    if bool(torch.isnan(logits).any()):
        raise ValueError(f"{func}: argument 'logits' contains NaN")
    # l = +inf (p = 1) puts all mass on x = total, l = -inf on x = 0; the formula would give
    # inf - inf there, so those entries are set apart (and the formula sees a finite l)
    pos, neg = torch.isposinf(logits), torch.isneginf(logits)
    l_fin = torch.where(pos | neg, torch.zeros_like(logits), logits)
    log_choose = (math.lgamma(total + 1) - torch.lgamma(x + 1) - torch.lgamma(total - x + 1))
    out = log_choose + x * l_fin - total * nn.functional.softplus(l_fin)
    if bool((pos | neg).any()):
        certain = torch.where(pos, x == total, x == 0)
        out = torch.where(pos | neg, torch.where(certain, 0.0, -math.inf).to(out.dtype), out)
    return out


class DigitsVAE(nn.Module):
    """A VAE for 8 x 8 count images: encoder ``q(z | x)`` (Gaussian), decoder ``p(x | z)``.

    Parameters
    ----------
    latent_dim : int >= 1 (2 gives a latent space that can be drawn)
    hidden : int >= 1, width of the one hidden layer of each MLP
    likelihood : ``"binomial"`` or ``"categorical"`` (see the module docstring)
    generator : torch.Generator, optional; initial weights (default: torch's global generator)
    """

    def __init__(self, latent_dim: int = 2, hidden: int = 128, likelihood: str = "binomial",
                 *, generator=None):
        super().__init__()
        func = "DigitsVAE"
        self.latent_dim = check_int(latent_dim, "latent_dim", func, minimum=1)
        hidden = check_int(hidden, "hidden", func, minimum=1)
        if likelihood not in ("binomial", "categorical"):
            raise ValueError(f"{func}: argument 'likelihood' must be 'binomial' or "
                             f"'categorical', got {likelihood!r}")
        check_generator(generator, None, func)
        self.likelihood = likelihood
        self.per_pixel = 1 if likelihood == "binomial" else MAX_COUNT + 1
        self.encoder = nn.Sequential(nn.Linear(64, hidden), nn.Tanh(),
                                     nn.Linear(hidden, 2 * self.latent_dim))
        self.decoder = nn.Sequential(nn.Linear(self.latent_dim, hidden), nn.Tanh(),
                                     nn.Linear(hidden, 64 * self.per_pixel))
        if generator is not None:
            for layer in (*self.encoder, *self.decoder):
                if isinstance(layer, nn.Linear):
                    bound = 1 / math.sqrt(layer.in_features)
                    nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
                    nn.init.uniform_(layer.bias, -bound, bound, generator=generator)

    # -- the two conditionals -------------------------------------------------------------------
    def encode(self, x: torch.Tensor):
        """``(mu, logvar)`` of ``q(z | x)``, each ``(batch, latent_dim)``; ``x`` counts (batch, 64)."""
        x = _check_counts(x, "DigitsVAE.encode")
        if x.dim() == 0 or x.shape[-1] != 64:
            raise ValueError("DigitsVAE.encode: argument 'x' must have 64 columns (the 8 x 8 "
                             f"pixels), got shape {tuple(x.shape)}")
        # counts are small integers, exact in any float dtype: use the weights' dtype
        x = x.to(self.encoder[0].weight.dtype)
        h = self.encoder(x / MAX_COUNT)
        mu, logvar = h.chunk(2, dim=-1)
        return mu, logvar

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Logits of ``p(x | z)``: ``(..., 64)`` (binomial) or ``(..., 64, 17)`` (categorical)."""
        z = as_float_tensor(z, "z", "DigitsVAE.decode")
        out = self.decoder(z)
        if self.per_pixel > 1:
            out = out.unflatten(-1, (64, self.per_pixel))
        return out

    def log_likelihood(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """``log p(x | z)`` summed over the 64 pixels; ``z`` (..., batch, latent) -> (..., batch)."""
        logits = self.decode(z)
        if self.likelihood == "binomial":
            return binomial_log_prob(x, logits).sum(-1)
        logp = torch.log_softmax(logits, dim=-1)
        idx = x.long().expand(logp.shape[:-1]).unsqueeze(-1)
        return logp.gather(-1, idx).squeeze(-1).sum(-1)

    def mean_image(self, z: torch.Tensor) -> torch.Tensor:
        """The expected counts ``E[x | z]`` (..., 64), for pictures."""
        logits = self.decode(z)
        if self.likelihood == "binomial":
            return MAX_COUNT * torch.sigmoid(logits)
        values = torch.arange(MAX_COUNT + 1, dtype=logits.dtype, device=logits.device)
        return (torch.softmax(logits, -1) * values).sum(-1)

    # -- bounds ---------------------------------------------------------------------------------
    def _draw(self, mu, logvar, k, generator):
        eps = torch.randn((k,) + tuple(mu.shape), dtype=mu.dtype, device=mu.device,
                          generator=generator)
        return mu + torch.exp(0.5 * logvar) * eps, eps

    def elbo(self, x: torch.Tensor, *, n_samples: int = 1, generator=None,
             recon_weight: float = 1.0, kl_weight: float = 1.0) -> torch.Tensor:
        """Per-digit ELBO ``E_q log p(x | z) - KL(q(z | x) || p(z))`` (batch,), in nats.

        The expectation is estimated with ``n_samples`` reparameterised draws
        ``z = mu + exp(logvar / 2) * eps``; the KL term is exact (:func:`gaussian_kl`).
        ``recon_weight`` and ``kl_weight`` reweight the two terms for ablations; the result is
        the ELBO only when both are 1.
        """
        func = "DigitsVAE.elbo"
        n_samples = check_int(n_samples, "n_samples", func, minimum=1)
        recon_weight = check_positive_number(recon_weight, "recon_weight", func, allow_zero=True)
        kl_weight = check_positive_number(kl_weight, "kl_weight", func, allow_zero=True)
        check_generator(generator, None, func)
        mu, logvar = self.encode(x)
        z, _ = self._draw(mu, logvar, n_samples, generator)
        rec = self.log_likelihood(x, z).mean(0)
        return recon_weight * rec - kl_weight * gaussian_kl(mu, logvar)

    def log_weights(self, x: torch.Tensor, k: int, *, generator=None) -> torch.Tensor:
        """Importance log-weights ``log p(x, z_j) - log q(z_j | x)`` for ``k`` draws
        ``z_j ~ q(z | x)``, shape ``(k, batch)``.

        Their mean over ``j`` is a ``k``-sample estimate of the ELBO; ``logsumexp - log k`` of the
        same draws is the importance-weighted bound (:meth:`iwae`). By Jensen's inequality the
        second is at least the first for every set of draws, not only on average.
        """
        func = "DigitsVAE.log_weights"
        k = check_int(k, "k", func, minimum=1)
        check_generator(generator, None, func)
        mu, logvar = self.encode(x)
        z, eps = self._draw(mu, logvar, k, generator)
        log_prior = -0.5 * (z**2 + _LOG_2PI).sum(-1)
        log_q = -0.5 * (eps**2 + _LOG_2PI + logvar).sum(-1)
        return self.log_likelihood(x, z) + log_prior - log_q

    def iwae(self, x: torch.Tensor, k: int, *, generator=None) -> torch.Tensor:
        """Importance-weighted bound ``log (1/k) sum_j p(x, z_j) / q(z_j | x)`` (batch,), nats.

        With ``z_j ~ q(z | x)`` i.i.d.; its expectation increases with ``k``, equals the ELBO at
        ``k = 1`` and tends to ``log p(x)`` (Burda et al. 2016, Theorem 1). Evaluated with
        ``logsumexp`` so that the weights never overflow.
        """
        log_w = self.log_weights(x, k, generator=generator)
        return torch.logsumexp(log_w, dim=0) - math.log(log_w.shape[0])

    def sample(self, n: int, *, generator=None) -> torch.Tensor:
        """Expected images ``E[x | z]`` for ``n`` draws ``z ~ N(0, I)`` of the prior, (n, 64)."""
        n = check_int(n, "n", "DigitsVAE.sample", minimum=1)
        check_generator(generator, None, "DigitsVAE.sample")
        p = next(self.parameters())
        z = torch.randn(n, self.latent_dim, dtype=p.dtype, generator=generator)
        return self.mean_image(z)


def _check_mu_logvar(mu, logvar, func):
    mu = as_float_tensor(mu, "mu", func)
    logvar = as_float_tensor(logvar, "logvar", func)
    if mu.shape != logvar.shape:
        raise ValueError(f"{func}: arguments 'mu' and 'logvar' must have one shape, got "
                         f"{tuple(mu.shape)} and {tuple(logvar.shape)}")
    if mu.dim() == 0:
        raise ValueError(f"{func}: arguments 'mu' and 'logvar' must have a latent dimension "
                         "(shape (..., d)), got 0-d tensors")
    for t, name in ((mu, "mu"), (logvar, "logvar")):
        if bool(torch.isnan(t).any()):
            raise ValueError(f"{func}: argument '{name}' contains NaN")
    return mu, logvar


def kl_per_dimension(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """``KL(N(mu_k, e^{logvar_k}) || N(0, 1))`` for every latent dimension ``k``, same shape.

    The terms of :func:`softmaxbook.estimators.gaussian_kl` before its sum over the last axis
    (with its series for ``logvar`` near 0), so ``kl_per_dimension(mu, lv).sum(-1)`` is the
    whole KL. NaN and infinite values are refused (ValueError).
    """
    mu, logvar = _check_mu_logvar(mu, logvar, "kl_per_dimension")
    return gaussian_kl(mu.unsqueeze(-1), logvar.unsqueeze(-1))


def free_bits_kl(mu: torch.Tensor, logvar: torch.Tensor, free_bits: float) -> torch.Tensor:
    """The free-bits KL term ``sum_k max(lambda, mean_batch KL_k)`` (a 0-d tensor), in nats.

    Kingma et al. (2016, appendix C): each latent dimension's KL, averaged over the minibatch
    (the leading axes of ``mu`` and ``logvar``, shape ``(..., d)``), is charged at least
    ``lambda = free_bits`` nats. Below ``lambda`` a dimension costs a constant, so the gradient
    stops pushing it onto the prior, and the optimiser may spend up to ``lambda`` nats on it
    for free. ``free_bits = 0`` gives the mean KL, the ordinary term.
    """
    func = "free_bits_kl"
    free_bits = check_positive_number(free_bits, "free_bits", func, allow_zero=True)
    mu, logvar = _check_mu_logvar(mu, logvar, func)
    if mu.numel() == 0:
        raise ValueError(f"{func}: arguments 'mu' and 'logvar' must not be empty, got shape "
                         f"{tuple(mu.shape)}")
    per_dim = kl_per_dimension(mu, logvar).reshape(-1, mu.shape[-1]).mean(0)
    return torch.clamp(per_dim, min=free_bits).sum()


def kl_warmup_weight(step: int, warmup: int) -> float:
    """Weight of the KL term at ``step`` (0-based) of a linear KL annealing, in [0, 1].

    ``min(1, step / warmup)``: 0 at the first step, rising linearly to 1 at ``step = warmup``
    and 1 after; ``warmup = 0`` is no annealing (1 from the start). Bowman et al. (2016) anneal
    the weight from 0 to 1 so that the decoder learns to use the code before the KL term can
    push ``q(z | x)`` onto the prior.
    """
    func = "kl_warmup_weight"
    step = check_int(step, "step", func, minimum=0)
    warmup = check_int(warmup, "warmup", func, minimum=0)
    if warmup == 0:
        return 1.0
    return min(1.0, step / warmup)


def active_units(mu: torch.Tensor, threshold: float = 1e-2):
    """Burda et al.'s active units: ``(count, variances)`` of the encoder means over the data.

    ``mu`` is ``E_q[z | x]`` for ``n >= 2`` data points, shape ``(n, d)``. Dimension ``k`` is
    active when ``Var_x(mu_k(x)) > threshold`` (Burda et al. 2016, section 5.2, use 0.01):
    an inactive dimension gives (nearly) the same code to every digit, carries no information
    about it, and its KL is (nearly) spent on nothing. The variance is the unbiased sample
    variance; returns ``(int, Tensor (d,))``.
    """
    func = "active_units"
    mu = as_float_tensor(mu, "mu", func)
    threshold = check_positive_number(threshold, "threshold", func, allow_zero=True)
    if mu.dim() != 2 or mu.shape[0] < 2:
        raise ValueError(f"{func}: argument 'mu' must have shape (n, d) with n >= 2, got "
                         f"{tuple(mu.shape)}")
    check_finite(mu, "mu", func)
    var = mu.var(0)
    return int((var > threshold).sum()), var


def train_vae(model: DigitsVAE, data: torch.Tensor, *, steps: int = 1500, batch_size: int = 128,
              lr: float = 3e-3, recon_weight: float = 1.0, kl_weight: float = 1.0,
              kl_warmup: int = 0, free_bits: float = 0.0, generator=None) -> list[float]:
    """Train ``model`` with Adam on minibatches of ``data`` (counts, (n, 64)).

    Maximises the mean of :meth:`DigitsVAE.elbo` (with the given weights) by the
    reparameterisation gradient, one sample per digit. Returns the objective per step (nats per
    digit), a noisy curve. Minibatches and noise come from ``generator``.

    Two remedies for posterior collapse: ``kl_warmup = W > 0`` multiplies the KL weight at
    step ``t`` by :func:`kl_warmup_weight` ``(t, W)`` (Bowman et al. 2016); ``free_bits =
    lambda > 0`` replaces the KL term by :func:`free_bits_kl` (Kingma et al. 2016). With both
    at their defaults the draws and the steps are those of plain training. The returned
    objective is the one optimised at each step (the ELBO only without either remedy and with
    both weights 1).
    """
    func = "train_vae"
    if not isinstance(model, DigitsVAE):
        raise TypeError(f"{func}: argument 'model' must be a DigitsVAE, got {type(model).__name__}")
    data = _check_counts(data, func)
    if data.dim() != 2 or data.shape[1] != 64:
        raise ValueError(f"{func}: argument 'data' must have shape (n, 64), got "
                         f"{tuple(data.shape)}")
    steps = check_int(steps, "steps", func, minimum=1)
    batch_size = check_int(batch_size, "batch_size", func, minimum=1)
    lr = check_positive_number(lr, "lr", func)
    kl_warmup = check_int(kl_warmup, "kl_warmup", func, minimum=0)
    free_bits = check_positive_number(free_bits, "free_bits", func, allow_zero=True)
    check_generator(generator, None, func)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    n = data.shape[0]
    for step in range(steps):
        idx = torch.randint(0, n, (min(batch_size, n),), generator=generator)
        beta = kl_weight * kl_warmup_weight(step, kl_warmup)
        batch = data[idx]
        if free_bits == 0:
            obj = model.elbo(batch, generator=generator, recon_weight=recon_weight,
                             kl_weight=beta).mean()
        else:
            # the reconstruction term from the same draws as elbo's, the KL term clamped
            rec = model.elbo(batch, generator=generator, recon_weight=recon_weight,
                             kl_weight=0.0).mean()
            mu, logvar = model.encode(batch)
            obj = rec - beta * free_bits_kl(mu, logvar, free_bits)
        opt.zero_grad()
        (-obj).backward()
        opt.step()
        history.append(float(obj.detach()))
    return history
