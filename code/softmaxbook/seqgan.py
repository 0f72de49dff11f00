"""Seq-GAN on a synthetic oracle: sequence models, Monte Carlo rollouts and the policy gradient.

A generator ``G_theta`` writes a sequence ``y_1 .. y_T`` one token at a time, each token *sampled*
from a softmax. A discriminator ``D`` scores whole sequences. The GAN objective
``E_{y ~ G}[log D(y)]`` cannot be differentiated through the sampling of discrete tokens, so
Seq-GAN (Yu et al. 2017) treats the generator as a policy and uses the score-function (REINFORCE)
gradient

    grad E_{y~G}[D(y)] = E_{y~G} sum_t Q(y_{1:t-1}, y_t) grad log G(y_t | y_{1:t-1}),

with ``Q(y_{1:t-1}, y_t) = E[D(Y) | Y_{1:t} = y_{1:t}]``, the expected score of the finished
sequence, estimated by completing the prefix ``N`` times with the generator ("rollouts"; Yu et
al. 2017, eq. 4). (The paper rolls out with the generator itself. Their released code also
writes an update of a *delayed copy*, ``w <- 0.8 w + 0.2 w_gen``, which reimplementations port;
in its TensorFlow 1 graph the roll-outs read the generator's current weights, so that update
never reaches them. :func:`rollout_q` takes either model, :func:`train_seqgan` either rule.)

The synthetic set-up follows Yu et al. (§5): an *oracle* -- a randomly initialised recurrent
network -- plays the true data distribution, so the quality of a generator can be measured
exactly by the oracle's negative log-likelihood of the generator's samples
(:func:`oracle_nll`, lower is better). Since a generator can lower that number by collapsing onto
a few likely sequences, we also report the generator's NLL of fresh oracle samples
(:func:`model_nll`, coverage; Caccia et al. 2020 show the trade-off through the temperature).

Shapes: token sequences are int64 ``[n, T]`` with tokens in ``[0, V)``; every sequence has the
same length ``T`` (no end token), as in Yu et al.'s synthetic experiment.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ._validate import check_generator, check_int, check_positive_number

__all__ = [
    "SequenceModel",
    "Discriminator",
    "random_oracle",
    "oracle_nll",
    "model_nll",
    "train_mle",
    "train_discriminator",
    "rollout_q",
    "policy_gradient_loss",
    "train_seqgan",
    "SeqGANHistory",
]


def _check_tokens(tokens, vocab: int, name: str, func: str) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.int64:
        raise TypeError(f"{func}: argument '{name}' must be an int64 tensor of tokens")
    if tokens.dim() != 2 or tokens.shape[1] == 0 or tokens.shape[0] == 0:
        raise ValueError(f"{func}: argument '{name}' must have shape [n, T] with n, T >= 1, got "
                         f"{tuple(tokens.shape)}")
    if bool(((tokens < 0) | (tokens >= vocab)).any()):
        raise ValueError(f"{func}: argument '{name}' has tokens outside [0, {vocab - 1}]")
    return tokens


class SequenceModel(nn.Module):
    """A GRU language model over ``vocab`` tokens: ``p(y) = prod_t p(y_t | y_{1:t-1})``.

    The first token is predicted from a start symbol (index ``vocab`` of the embedding). Weights
    are initialised from torch's global generator (:func:`random_oracle` draws them from a
    given generator instead).
    """

    def __init__(self, vocab: int, hidden: int = 32, embed: int = 16):
        super().__init__()
        self.vocab = check_int(vocab, "vocab", "SequenceModel", minimum=2)
        hidden = check_int(hidden, "hidden", "SequenceModel", minimum=1)
        embed = check_int(embed, "embed", "SequenceModel", minimum=1)
        self.embed = nn.Embedding(vocab + 1, embed)
        self.rnn = nn.GRU(embed, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def _inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        start = torch.full((tokens.shape[0], 1), self.vocab, dtype=torch.int64,
                           device=tokens.device)
        return torch.cat([start, tokens], dim=1)

    def token_log_probs(self, tokens: torch.Tensor) -> torch.Tensor:
        """``log p(y_t | y_{1:t-1})`` for every position: ``[n, T]``."""
        _check_tokens(tokens, self.vocab, "tokens", "SequenceModel.token_log_probs")
        h, _ = self.rnn(self.embed(self._inputs(tokens[:, :-1])))
        logp = torch.log_softmax(self.out(h), dim=-1)
        return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)

    def log_prob(self, tokens: torch.Tensor) -> torch.Tensor:
        """The exact ``log p(y)`` of each sequence: ``[n]``."""
        return self.token_log_probs(tokens).sum(dim=-1)

    @torch.no_grad()
    def sample(self, n: int, length: int, *, prefix: torch.Tensor | None = None,
               temperature: float = 1.0, generator=None) -> torch.Tensor:
        """``n`` sequences of ``length`` tokens, ``[n, length]``; with ``prefix`` ``[n, t]``
        (``t < length``) the first ``t`` tokens are given and the rest sampled from
        ``p(. | prefix)`` (a rollout). ``temperature`` divides the logits (1 = the model)."""
        func = "SequenceModel.sample"
        n = check_int(n, "n", func, minimum=1)
        length = check_int(length, "length", func, minimum=1)
        temperature = check_positive_number(temperature, "temperature", func)
        check_generator(generator, self.out.weight.device, func)
        device = self.out.weight.device
        if prefix is None:
            prefix = torch.zeros((n, 0), dtype=torch.int64, device=device)
        if not isinstance(prefix, torch.Tensor) or prefix.dim() != 2 or prefix.shape[0] != n \
                or prefix.shape[1] >= length:
            raise ValueError(f"{func}: argument 'prefix' must have shape [{n}, t] with "
                             f"t < {length}, got {getattr(prefix, 'shape', prefix)}")
        if prefix.shape[1] > 0:
            _check_tokens(prefix, self.vocab, "prefix", func)
        # Run the prefix (after the start symbol) through the network, then sample step by step.
        h_seq, state = self.rnn(self.embed(self._inputs(prefix)))
        logits = self.out(h_seq[:, -1])
        tokens = [prefix]
        for _ in range(length - prefix.shape[1]):
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator)
            tokens.append(nxt)
            h, state = self.rnn(self.embed(nxt), state)
            logits = self.out(h[:, -1])
        return torch.cat(tokens, dim=1)


class Discriminator(nn.Module):
    """A GRU classifier of whole sequences: ``forward(tokens)`` gives the logit of
    ``D(y) = P(y is real)``, ``[n]``."""

    def __init__(self, vocab: int, hidden: int = 32, embed: int = 16):
        super().__init__()
        self.vocab = check_int(vocab, "vocab", "Discriminator", minimum=2)
        self.embed = nn.Embedding(vocab, check_int(embed, "embed", "Discriminator", minimum=1))
        self.rnn = nn.GRU(embed, check_int(hidden, "hidden", "Discriminator", minimum=1),
                          batch_first=True)
        self.out = nn.Linear(hidden, 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        _check_tokens(tokens, self.vocab, "tokens", "Discriminator")
        _, h = self.rnn(self.embed(tokens))
        return self.out(h[-1]).squeeze(-1)


def random_oracle(vocab: int, hidden: int = 32, *, scale: float = 1.0, embed: int = 16,
                  generator=None) -> SequenceModel:
    """A frozen :class:`SequenceModel` with weights drawn i.i.d. ``N(0, scale^2)`` from
    ``generator`` (Yu et al. 2017 draw their oracle LSTM's weights from ``N(0, 1)``). A larger
    ``scale`` gives sharper next-token distributions (lower entropy)."""
    func = "random_oracle"
    scale = check_positive_number(scale, "scale", func)
    check_generator(generator, "cpu", func)
    model = SequenceModel(vocab, hidden, embed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=generator))
    model.requires_grad_(False)
    return model.eval()


def _check_models(func, **models):
    for name, m in models.items():
        if not isinstance(m, SequenceModel):
            raise TypeError(f"{func}: argument '{name}' must be a SequenceModel, got "
                            f"{type(m).__name__}")
    vocabs = {m.vocab for m in models.values()}
    if len(vocabs) > 1:
        raise ValueError(f"{func}: the models have different vocabularies {sorted(vocabs)}")


@torch.no_grad()
def oracle_nll(oracle: SequenceModel, model: SequenceModel, n: int, length: int, *,
               temperature: float = 1.0, generator=None) -> float:
    """Yu et al.'s quality measure: ``-E_{y ~ model}[log p_oracle(y)] / 1`` per sequence,
    estimated from ``n`` samples of ``model`` at ``temperature`` (lower is better)."""
    func = "oracle_nll"
    _check_models(func, oracle=oracle, model=model)
    # checked here, so that a bad argument is named as oracle_nll's (it was reported as
    # SequenceModel.sample's, a function the caller never called)
    n = check_int(n, "n", func, minimum=1)
    length = check_int(length, "length", func, minimum=1)
    temperature = check_positive_number(temperature, "temperature", func)
    y = model.sample(n, length, temperature=temperature, generator=generator)
    return float(-oracle.log_prob(y).double().mean())


@torch.no_grad()
def model_nll(model: SequenceModel, data: torch.Tensor, *, temperature: float = 1.0) -> float:
    """The model's mean negative log-likelihood of ``data`` ``[n, T]`` (held-out oracle
    samples) at ``temperature``: how well it covers the data (lower is better)."""
    func = "model_nll"
    _check_models(func, model=model)
    _check_tokens(data, model.vocab, "data", func)
    temperature = check_positive_number(temperature, "temperature", func)
    h, _ = model.rnn(model.embed(model._inputs(data[:, :-1])))
    logp = torch.log_softmax(model.out(h) / temperature, dim=-1)
    return float(-logp.gather(-1, data.unsqueeze(-1)).squeeze(-1).sum(-1).double().mean())


def train_mle(model: SequenceModel, data: torch.Tensor, *, steps: int = 300,
              batch_size: int = 64, lr: float = 1e-2, generator=None) -> list[float]:
    """Maximum-likelihood training (teacher forcing) on ``data`` ``[n, T]`` with Adam; returns
    the training NLL per step."""
    func = "train_mle"
    _check_models(func, model=model)
    _check_tokens(data, model.vocab, "data", func)
    steps = check_int(steps, "steps", func, minimum=1)
    batch_size = check_int(batch_size, "batch_size", func, minimum=1)
    lr = check_positive_number(lr, "lr", func)
    check_generator(generator, "cpu", func)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        idx = torch.randint(data.shape[0], (min(batch_size, data.shape[0]),), generator=generator)
        loss = -model.log_prob(data[idx]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def train_discriminator(disc: Discriminator, real: torch.Tensor, fake: torch.Tensor, *,
                        steps: int = 50, batch_size: int = 64, lr: float = 1e-3,
                        generator=None, optimizer=None) -> float:
    """Logistic regression of real (label 1) against fake (label 0) sequences; returns the
    final mean loss. ``optimizer`` lets a caller keep Adam's state across calls."""
    func = "train_discriminator"
    if not isinstance(disc, Discriminator):
        raise TypeError(f"{func}: argument 'disc' must be a Discriminator")
    _check_tokens(real, disc.vocab, "real", func)
    _check_tokens(fake, disc.vocab, "fake", func)
    steps = check_int(steps, "steps", func, minimum=1)
    batch_size = check_int(batch_size, "batch_size", func, minimum=1)
    opt = optimizer or torch.optim.Adam(disc.parameters(), lr=check_positive_number(lr, "lr",
                                                                                     func))
    bce = nn.functional.binary_cross_entropy_with_logits
    loss = torch.tensor(math.nan)
    for _ in range(steps):
        i = torch.randint(real.shape[0], (batch_size,), generator=generator)
        j = torch.randint(fake.shape[0], (batch_size,), generator=generator)
        logits = torch.cat([disc(real[i]), disc(fake[j])])
        target = torch.cat([torch.ones(batch_size), torch.zeros(batch_size)]).to(logits.dtype)
        loss = bce(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())


@torch.no_grad()
def rollout_q(rollout_model: SequenceModel, disc: Discriminator, tokens: torch.Tensor,
              n_rollouts: int, *, generator=None) -> torch.Tensor:
    """Monte Carlo estimates of ``Q(y_{1:t-1}, y_t) = E[D(Y) | Y_{1:t} = y_{1:t}]``: ``[n, T]``.

    For ``t < T`` each prefix ``y_{1:t}`` is completed ``n_rollouts`` times by sampling from
    ``rollout_model`` and the completed sequences' ``D = sigmoid(disc(.))`` are averaged; for
    ``t = T`` the value is ``D(y)`` itself (Yu et al. 2017, eq. 4). Unbiased for each entry when
    ``rollout_model`` is the generator.
    """
    func = "rollout_q"
    _check_models(func, rollout_model=rollout_model)
    if not isinstance(disc, Discriminator):
        raise TypeError(f"{func}: argument 'disc' must be a Discriminator")
    _check_tokens(tokens, rollout_model.vocab, "tokens", func)
    n_rollouts = check_int(n_rollouts, "n_rollouts", func, minimum=1)
    n, length = tokens.shape
    # in the discriminator's dtype: a float64 D gives a float64 Q (it was float32 whatever D was)
    q = torch.empty(n, length, dtype=disc.out.weight.dtype, device=tokens.device)
    for t in range(1, length):
        prefix = tokens[:, :t].repeat_interleave(n_rollouts, dim=0)
        full = rollout_model.sample(n * n_rollouts, length, prefix=prefix, generator=generator)
        q[:, t - 1] = torch.sigmoid(disc(full)).reshape(n, n_rollouts).mean(dim=1)
    q[:, length - 1] = torch.sigmoid(disc(tokens))
    return q


def policy_gradient_loss(model: SequenceModel, tokens: torch.Tensor, q: torch.Tensor,
                         baseline: torch.Tensor | float = 0.0) -> torch.Tensor:
    """The surrogate ``-mean_n sum_t (Q_t - b) log G(y_t | y_{1:t-1})`` whose gradient is the
    REINFORCE estimate of ``-grad E_{y~G}[D(y)]`` (with ``Q`` exact or unbiased and ``b`` not
    depending on ``y_t``)."""
    func = "policy_gradient_loss"
    _check_models(func, model=model)
    _check_tokens(tokens, model.vocab, "tokens", func)
    if not isinstance(q, torch.Tensor) or q.shape != tokens.shape:
        raise ValueError(f"{func}: argument 'q' must be a tensor of shape {tuple(tokens.shape)}")
    advantage = (q - baseline).detach()
    return -(advantage * model.token_log_probs(tokens)).sum(dim=-1).mean()


@dataclass
class SeqGANHistory:
    """Oracle NLL (quality) and model NLL of held-out oracle data (coverage) per evaluation."""

    steps: list = field(default_factory=list)
    oracle_nll: list = field(default_factory=list)
    model_nll: list = field(default_factory=list)


def train_seqgan(gen: SequenceModel, disc: Discriminator, oracle: SequenceModel,
                 real: torch.Tensor, heldout: torch.Tensor, *, rounds: int = 20,
                 g_batch: int = 64, n_rollouts: int = 8, d_steps: int = 15, lr: float = 1e-3,
                 rollout: str = "current", delay: float = 0.8, eval_n: int = 2000,
                 eval_every: int = 5, generator=None) -> SeqGANHistory:
    """Adversarial training (Yu et al. 2017, Algorithm 1): per round, one policy-gradient step of
    the generator on ``g_batch`` samples with rollout estimates of ``Q``, then ``d_steps`` steps
    of the discriminator on ``real`` against fresh generator samples.

    ``rollout="current"`` rolls out with the generator itself (the paper); ``"delayed"`` with a
    copy updated as ``w <- delay * w + (1 - delay) * w_gen`` after each step (the rule written in
    their released code and ported by reimplementations). The generator is changed in place.
    """
    func = "train_seqgan"
    _check_models(func, gen=gen, oracle=oracle)
    if rollout not in ("current", "delayed"):
        raise ValueError(f"{func}: argument 'rollout' must be 'current' or 'delayed', got "
                         f"{rollout!r}")
    if not 0.0 <= delay < 1.0:
        raise ValueError(f"{func}: argument 'delay' must be in [0, 1), got {delay}")
    if not isinstance(disc, Discriminator):
        raise TypeError(f"{func}: argument 'disc' must be a Discriminator, got "
                        f"{type(disc).__name__}")
    _check_tokens(real, gen.vocab, "real", func)
    _check_tokens(heldout, gen.vocab, "heldout", func)
    if heldout.shape[1] != real.shape[1]:
        raise ValueError(f"{func}: arguments 'real' and 'heldout' must have the same length T, "
                         f"got {real.shape[1]} and {heldout.shape[1]}")
    rounds = check_int(rounds, "rounds", func, minimum=1)
    eval_every = check_int(eval_every, "eval_every", func, minimum=1)
    g_batch = check_int(g_batch, "g_batch", func, minimum=1)
    n_rollouts = check_int(n_rollouts, "n_rollouts", func, minimum=1)
    d_steps = check_int(d_steps, "d_steps", func, minimum=1)
    eval_n = check_int(eval_n, "eval_n", func, minimum=1)
    length = real.shape[1]
    opt_g = torch.optim.Adam(gen.parameters(), lr=check_positive_number(lr, "lr", func))
    opt_d = torch.optim.Adam(disc.parameters(), lr=lr)
    roller = copy.deepcopy(gen) if rollout == "delayed" else gen
    history = SeqGANHistory()
    for r in range(rounds + 1):
        if r % eval_every == 0 or r == rounds:
            history.steps.append(r)
            history.oracle_nll.append(oracle_nll(oracle, gen, eval_n, length,
                                                 generator=generator))
            history.model_nll.append(model_nll(gen, heldout))
        if r == rounds:
            break
        y = gen.sample(g_batch, length, generator=generator)
        q = rollout_q(roller, disc, y, n_rollouts, generator=generator)
        loss = policy_gradient_loss(gen, y, q)
        opt_g.zero_grad()
        loss.backward()
        opt_g.step()
        if rollout == "delayed":
            with torch.no_grad():
                for w_r, w_g in zip(roller.parameters(), gen.parameters()):
                    w_r.mul_(delay).add_(w_g, alpha=1 - delay)
        fake = gen.sample(real.shape[0], length, generator=generator)
        train_discriminator(disc, real, fake, steps=d_steps, batch_size=g_batch,
                            generator=generator, optimizer=opt_d)
    return history
