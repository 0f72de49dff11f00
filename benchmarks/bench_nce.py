"""Benchmark of softmaxbook.nce: the alias sampler and the cost of a training step against V.

Prints three tables, each measured interleaved in one run (median of the repeats):

* ``AliasSampler.sample`` against ``torch.multinomial(probs, n, replacement=True)`` and
  ``torch.searchsorted`` on the cumulative sum, for n draws from a vocabulary of V words
  (probabilities from a Zipf law, as word frequencies are). Ratio = peer time / alias time
  (above 1: the alias sampler is faster). The table is built once, outside the timing.
* One SGD step of a log-bilinear model (d = 128, batch 256, k = 20) with NCE, negative sampling
  and the full softmax (``softmaxbook.softmax.cross_entropy`` over all V words), for V from 10^3
  to 10^6. The sampled losses gather the rows they touch and scatter their update back (a sparse
  step, as word2vec and Mnih & Teh do); the full softmax needs every row. Printed: milliseconds
  per step, and each step's time relative to its own time at the smallest V.
* Skip-gram with negative sampling, ours (chapter 4's training from the package's pieces:
  ``pydoc_corpus``, ``build_vocabulary``, ``subsample_keep_probs``, ``skipgram_pairs``,
  ``unigram_noise``, ``AliasSampler``, ``ContextModel``, ``negative_sampling_loss``, Adam) against
  gensim's ``Word2Vec(sg=1, negative=5)`` on the same corpus (Python's ``pydoc_data`` topics).
  Only when gensim is importable: it is not a dependency of the book (``pip install gensim`` to
  run this part; without it one line says that it is skipped). Printed:

  - words per second (corpus words after min_count, before subsampling, the same count for
    both), gensim with workers=1 and 2 (full runs), ours with ``torch.set_num_threads(1)`` and 2
    (the full 1-thread runs, and slices of 20 batches timed without the set-up: 2 threads are
    too slow on a loaded machine for full runs), interleaved, medians, with the load
    average before and after (on a shared machine the numbers move with it);
  - seconds to train one model; gensim is also trained for 20 epochs, since its SGD needs more
    passes than our Adam to fit the same target;
  - agreement: the Spearman correlation of the cosine similarities of all pairs among the 300 most
    frequent words, between two models of each kind with other seeds (the yardstick) and across;
  - the Pearson correlation of ``u_w . v_c`` with ``PMI - log k`` (``log p(w | c) - log q(w) -
    log k``, the chapter's target, Levy & Goldberg 2014) on the pairs seen at least 20 times;
  - the share of scores with ``|s| >= 6``, which gensim leaves out of its update (MAX_EXP);
  - gensim's running loss: one ``train()`` of 20 epochs against 20 one-epoch calls with the same
    schedule (same vectors): the reported total is a float32 sum, term by term.

  Same in both: tokens, min_count = 5 (the same 1,304 words), window 2 fixed
  (``shrink_windows=False``: word2vec draws a smaller window per position by default), d = 48,
  k = 5, noise ``count^0.75``, subsampling ``keep = sqrt(t/f) + t/f`` with t = 1e-3 (gensim's
  ``sample``), rare words dropped before the windows, 2 epochs, float32. What does not map:

  - optimiser: ours Adam, lr 0.01 constant, gradient averaged over batches of 1,024 pairs (the
    chapter's); gensim plain SGD pair by pair, lr falling linearly from 0.025 to 0.0001 over all
    epochs (its defaults). Adam's per-coordinate step has no SGD equivalent, so the same epochs
    do not mean the same fit: hence the 20-epoch gensim models;
  - subsampling: ours draws it once (the chapter), gensim every epoch;
  - a noise word equal to the data word: gensim skips it, ours keeps it (no accidental-hit
    removal in ``negative_sampling_loss``);
  - gensim leaves out terms with ``|score| >= 6`` and takes sigma from a 1,000-entry table; ours
    is exact;
  - gensim's windows end at the 10,000-token chunks the corpus is fed in (its sentence limit);
  - initial input vectors: gensim 4 uniform in +-1/d, ours +-0.5/d (the C word2vec's); output
    vectors 0 in both; different random generators;
  - gensim's input vector is the neighbour's and its output the centre's, ours the other way
    round; with a symmetric window the pairs are the same.

  gensim's ``compute_loss=True`` given to the constructor only is overridden by ``train()``'s own
  default (False) when ``train()`` is called: the loss then reads 0.

Run: ``.venv/bin/python benchmarks/bench_nce.py`` (about two minutes for the first two tables on
an idle machine, much longer on a loaded one; the skip-gram part took two minutes at load 5-8 on 2
cores; needs ~3 GB of memory at V = 10^6), or ``--quick`` (seconds: tiny sizes, and the skip-gram
part on 6,000 tokens for one epoch, without the loss check). ``--gensim-loss-epochs 0`` skips the
loss check.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import scipy.stats
import torch

from softmaxbook.nce import (AliasSampler, ContextModel, build_vocabulary, nce_loss,
                             negative_sampling_loss, pydoc_corpus, sample_noise,
                             skipgram_pairs, subsample_keep_probs, unigram_noise)
from softmaxbook.softmax import cross_entropy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import add_json_argument, interleaved, report  # noqa: E402


def medians(fns: dict, repeats: int, warmup: int = 1) -> dict:
    """Median seconds per call of each function, run interleaved (benchmarks/_harness.py)."""
    return {name: t.median for name, t in interleaved(fns, repeats, warmup).items()}


def zipf(V: int) -> torch.Tensor:
    p = 1.0 / torch.arange(1, V + 1, dtype=torch.float64)
    return p / p.sum()


def bench_sampling(vocab_sizes, n, repeats, gen):
    rows = []
    print(f"\nSampling {n:,} words (Zipf probabilities); ratio = peer / alias")
    print(f"{'V':>9} {'alias ms':>9} {'multinomial ms':>15} {'ratio':>6} "
          f"{'searchsorted ms':>16} {'ratio':>6}")
    for V in vocab_sizes:
        p = zipf(V)
        sampler = AliasSampler(p)
        p32 = p.float()
        cdf = torch.cumsum(p, 0)
        cdf[-1] = 1.0

        def search():
            u = torch.rand(n, dtype=torch.float64, generator=gen)
            return torch.searchsorted(cdf, u, right=True).clamp_(max=V - 1)

        t = medians({"alias": lambda: sampler.sample(n, generator=gen),
                         "multinomial": lambda: torch.multinomial(p32, n, replacement=True,
                                                                  generator=gen),
                         "searchsorted": search}, repeats)
        r1, r2 = t["multinomial"] / t["alias"], t["searchsorted"] / t["alias"]
        print(f"{V:>9,} {1e3 * t['alias']:>9.2f} {1e3 * t['multinomial']:>15.2f} {r1:>6.2f} "
              f"{1e3 * t['searchsorted']:>16.2f} {r2:>6.2f}")
        rows.append(dict(table="sampling", V=V, peer="multinomial", ratio=r1))
        rows.append(dict(table="sampling", V=V, peer="searchsorted", ratio=r2))
    return rows


def make_steps(V, d, B, k, contexts, gen):
    """Three training-step closures (NCE, negative sampling, full softmax) on one model."""
    C = contexts
    ctx = (torch.rand(C, d, generator=gen) - 0.5) / d
    out = torch.zeros(V, d)
    bias = torch.zeros(V)
    noise = AliasSampler(zipf(V))
    log_q = zipf(V).log().float()
    data_sampler = AliasSampler(zipf(V))
    lr = 0.05

    def batch():
        c = torch.randint(C, (B,), generator=gen)
        w = data_sampler.sample(B, generator=gen)
        return c, w

    def sparse_step(kind):
        c, w = batch()
        nz = noise.sample((B, k), generator=gen)
        v = ctx.index_select(0, c).requires_grad_()
        u_w = out.index_select(0, w).requires_grad_()
        u_n = out.index_select(0, nz.reshape(-1)).reshape(B, k, d).requires_grad_()
        b_w = bias.index_select(0, w).requires_grad_()
        b_n = bias.index_select(0, nz.reshape(-1)).reshape(B, k).requires_grad_()
        s = (u_w * v).sum(-1) + b_w
        sn = torch.einsum("bkd,bd->bk", u_n, v) + b_n
        if kind == "nce":
            loss = nce_loss(s, sn, log_q[w], log_q[nz])
        else:
            loss = negative_sampling_loss(s, sn)
        loss.backward()
        with torch.no_grad():
            ctx.index_add_(0, c, v.grad, alpha=-lr)
            out.index_add_(0, w, u_w.grad, alpha=-lr)
            out.index_add_(0, nz.reshape(-1), u_n.grad.reshape(-1, d), alpha=-lr)
            bias.index_add_(0, w, b_w.grad, alpha=-lr)
            bias.index_add_(0, nz.reshape(-1), b_n.grad.reshape(-1), alpha=-lr)

    def full_step():
        c, w = batch()
        v = ctx.index_select(0, c).requires_grad_()
        out.requires_grad_(), bias.requires_grad_()
        logits = torch.addmm(bias, v, out.T)
        cross_entropy(logits, w).backward()
        with torch.no_grad():
            ctx.index_add_(0, c, v.grad, alpha=-lr)
            out.sub_(lr * out.grad)
            bias.sub_(lr * bias.grad)
        out.grad = bias.grad = None
        out.requires_grad_(False), bias.requires_grad_(False)

    return {"nce": lambda: sparse_step("nce"), "negative sampling": lambda: sparse_step("ns"),
            "full softmax": full_step}


def bench_steps(vocab_sizes, d, B, k, repeats, gen, sparse_repeats=None):
    """The step-time table. The two sampled losses are timed with every V interleaved in one loop
    (``sparse_repeats`` rounds, default 12x ``repeats``): a step takes milliseconds, and timing
    one V after another let the machine's drift between them (another process, the CPU clock)
    pass for a dependence on V; per V with 5 repeats the 10^6 / 10^3 ratio ranged 1.37-1.82
    over runs on an idle machine, interleaved with 60 rounds 1.31-1.41. The full softmax (up to
    a second a step) is timed per V with ``repeats``."""
    rows = []
    sparse_repeats = sparse_repeats or 12 * repeats
    print(f"\nOne SGD step, d = {d}, batch {B}, k = {k}: ms per step "
          f"(x: relative to the same loss at V = {vocab_sizes[0]:,}; sampled losses: every V "
          f"interleaved, median of {sparse_repeats})")
    print(f"{'V':>9} {'NCE':>14} {'neg. sampling':>16} {'full softmax':>16} {'full / NCE':>11}")
    steps = {V: make_steps(V, d, B, k, contexts=1000, gen=gen) for V in vocab_sizes}
    sparse = medians({(V, n): steps[V][n] for V in vocab_sizes
                          for n in ("nce", "negative sampling")}, sparse_repeats, warmup=3)
    times = {}
    for V in vocab_sizes:
        full = medians({"full softmax": steps[V]["full softmax"]}, repeats)
        times[V] = {"nce": sparse[(V, "nce")],
                    "negative sampling": sparse[(V, "negative sampling")], **full}
        steps[V] = None  # free the model of this V (the full softmax's gradients are V x d)
    base = times[vocab_sizes[0]]
    for V in vocab_sizes:
        t = times[V]
        cells = " ".join(f"{1e3 * t[n]:>8.2f} ({t[n] / base[n]:>4.1f}x)".rjust(w)
                         for n, w in (("nce", 14), ("negative sampling", 16),
                                      ("full softmax", 16)))
        ratio = t["full softmax"] / t["nce"]
        print(f"{V:>9,} {cells} {ratio:>11.1f}")
        for n in t:
            rows.append(dict(table="step", V=V, peer=n, ratio=t[n] / base[n], ms=1e3 * t[n]))
        rows.append(dict(table="step", V=V, peer="full/nce", ratio=ratio))
    nce_growth = times[vocab_sizes[-1]]["nce"] / base["nce"]
    print(f"NCE step time at V = {vocab_sizes[-1]:,} / at V = {vocab_sizes[0]:,}: "
          f"{nce_growth:.2f} (aim: <= 1.5)")
    return rows


# ------------------------------------------------------------------------------------------------
# Skip-gram with negative sampling: ours (chapter 4) against gensim's Word2Vec(sg=1, negative=5)
# ------------------------------------------------------------------------------------------------
# The chapter's settings (book/04_nce.ipynb, section "Real text"). gensim gets the same ones where
# they map; what does not map is listed in the module docstring.
SG = dict(min_count=5, window=2, dim=48, k=5, t=1e-3, power=0.75, epochs=2, batch=1024, lr=0.01)
# gensim truncates a "sentence" at 10 000 words (MAX_SENTENCE_LEN in word2vec_inner.pyx): the
# corpus goes in as chunks of this many tokens (windows do not cross a chunk's end)
GENSIM_CHUNK = 10_000


def train_ours(ids, counts, *, seed, threads, epochs, dim, max_batches=None):
    """Chapter 4's skip-gram, from the package's pieces; returns (model, seconds, words,
    loop_seconds).

    Subsampling (once, as the chapter), all window pairs, Adam on ``negative_sampling_loss`` with
    k noise words per pair from unigram^0.75. ``words``: corpus words (after min_count, before
    subsampling) that the batches done cover, the count gensim's words/s are measured in too.
    ``seconds`` includes the set-up (subsampling, pairs, alias table), as gensim's ``train()``
    does; ``loop_seconds`` only the batches. ``max_batches`` stops early (a slice, for timing).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(seed)
        t0 = time.perf_counter()
        keep = subsample_keep_probs(counts, t=SG["t"])
        kept = ids[torch.rand(ids.numel(), generator=gen, dtype=torch.float64) < keep[ids]]
        centres, contexts = skipgram_pairs(kept, window=SG["window"])
        noise = AliasSampler(unigram_noise(counts, SG["power"]))
        V, B = counts.numel(), SG["batch"]
        model = ContextModel(V, V, dim, bias=False, generator=gen)
        opt = torch.optim.Adam(model.parameters(), lr=SG["lr"])
        per_epoch = math.ceil(centres.numel() / B)
        batches = [(epoch, start) for epoch in range(epochs)
                   for start in range(0, centres.numel(), B)][:max_batches]
        order = None
        t1 = time.perf_counter()
        for epoch, start in batches:
            if start == 0:
                order = torch.randperm(centres.numel(), generator=gen)
            idx = order[start:start + B]
            c, w = centres[idx], contexts[idx]
            nz = sample_noise(noise, idx.numel(), SG["k"], generator=gen)
            loss = negative_sampling_loss(model.score(c, w), model.score(c, nz))
            opt.zero_grad()
            loss.backward()
            opt.step()
        t2 = time.perf_counter()
    finally:
        torch.set_num_threads(previous)
    return model, t2 - t0, ids.numel() * len(batches) / per_epoch, t2 - t1


def gensim_params(*, seed, workers, epochs, dim):
    """Word2Vec's arguments for the chapter's settings."""
    return dict(sg=1, hs=0, negative=SG["k"], ns_exponent=SG["power"], vector_size=dim,
                window=SG["window"], shrink_windows=False, min_count=SG["min_count"],
                sample=SG["t"], epochs=epochs, seed=seed, workers=workers)


def train_gensim(Word2Vec, sentences, n_words, *, seed, workers, epochs, dim):
    """gensim's skip-gram; returns (model, seconds of ``train()``, words)."""
    model = Word2Vec(**gensim_params(seed=seed, workers=workers, epochs=epochs, dim=dim))
    model.build_vocab(sentences)
    t0 = time.perf_counter()
    model.train(sentences, total_examples=len(sentences), epochs=epochs)
    return model, time.perf_counter() - t0, n_words * epochs


def vectors(model, words):
    """(input, output) vectors ``[V, d]`` float64 in our word order: the centre word's vector
    (our ``context_vectors``, gensim's ``wv``) and the predicted word's (``word_vectors``,
    gensim's ``syn1neg``)."""
    if isinstance(model, ContextModel):
        return (model.context_vectors.detach().double(), model.word_vectors.detach().double())
    rows = [model.wv.key_to_index[w] for w in words]
    return (torch.from_numpy(model.wv.vectors[rows]).double(),
            torch.from_numpy(model.syn1neg[rows]).double())


def pair_similarities(model, words, top):
    """Cosine similarities of all pairs among the ``top`` most frequent words."""
    x = torch.nn.functional.normalize(vectors(model, words)[0][:top], dim=1)
    i, j = torch.triu_indices(top, top, 1)
    return (x[i] * x[j]).sum(1).numpy()


def shifted_pmi_target(ids, counts, draws, min_pairs, gen):
    """The chapter's target ``log p(w | c) - log q(w) - log k`` (Levy & Goldberg) from the window
    pairs of ``draws`` independent subsamplings (neither model's own), and the mask of pairs seen
    at least ``min_pairs`` times per draw on average."""
    V = counts.numel()
    pair_counts = torch.zeros(V, V, dtype=torch.float64)
    keep = subsample_keep_probs(counts, t=SG["t"])
    for _ in range(draws):
        kept = ids[torch.rand(ids.numel(), generator=gen, dtype=torch.float64) < keep[ids]]
        c, w = skipgram_pairs(kept, window=SG["window"])
        pair_counts.index_put_((c, w), torch.ones(c.numel(), dtype=torch.float64),
                               accumulate=True)
    pair_counts /= draws
    p = pair_counts / pair_counts.sum(1, keepdim=True).clamp(min=1e-300)
    target = (p.clamp(min=1e-300).log() - unigram_noise(counts, SG["power"]).log()
              - math.log(SG["k"]))
    return target, pair_counts >= min_pairs


def pmi_correlation(model, words, target, mask):
    """Pearson correlation (as the chapter) of the learned ``u_w . v_c`` with the target."""
    inp, out = vectors(model, words)
    learned = inp @ out.T
    if int(mask.sum()) < 3:
        return float("nan")
    return float(np.corrcoef(learned[mask].numpy(), target[mask].numpy())[0, 1])


def large_score_fraction(model, words, pairs, noise, limit=6.0):
    """Fractions of data scores and of noise scores with ``|u . v| >= limit``: the terms gensim
    leaves out of the update (and the loss) at MAX_EXP = 6."""
    inp, out = vectors(model, words)
    c, w = pairs
    data = (inp[c] * out[w]).sum(1)
    neg = torch.einsum("bd,bkd->bk", inp[c], out[noise])
    return float((data.abs() >= limit).double().mean()), float((neg.abs() >= limit)
                                                               .double().mean())


def say(text):
    """Print a long line wrapped at 100 columns."""
    print(textwrap.fill(text, 100, subsequent_indent="  "))


def spread(values):
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def gensim_loss_check(Word2Vec, sentences, epochs, dim):
    """gensim's running loss: one ``train()`` of ``epochs`` epochs (its float32 total) against
    the sum of ``epochs`` one-epoch ``train()`` calls with the same learning-rate schedule (each
    total small, so exact to float32's 7 digits). workers=1: both compute the same updates (the
    vectors are compared)."""
    from gensim.models.callbacks import CallbackAny2Vec

    class Totals(CallbackAny2Vec):
        def __init__(self):
            self.totals = []

        def on_epoch_end(self, model):
            self.totals.append(model.get_latest_training_loss())

    params = gensim_params(seed=1, workers=1, epochs=epochs, dim=dim)
    one = Word2Vec(**params)
    one.build_vocab(sentences)
    totals = Totals()
    # compute_loss must be given to train(): its default False overrides the constructor's
    one.train(sentences, total_examples=len(sentences), epochs=epochs, compute_loss=True,
              callbacks=[totals])
    split = Word2Vec(**params)
    split.build_vocab(sentences)
    a0, a1 = split.alpha, split.min_alpha
    per_epoch = []
    for e in range(epochs):
        split.train(sentences, total_examples=len(sentences), epochs=1, compute_loss=True,
                    start_alpha=a0 - (a0 - a1) * e / epochs,
                    end_alpha=a0 - (a0 - a1) * (e + 1) / epochs)
        per_epoch.append(float(split.get_latest_training_loss()))
    increments = np.diff([0.0] + [float(x) for x in totals.totals])
    same = float(np.abs(one.wv.vectors - split.wv.vectors).max())
    reported, exact = float(totals.totals[-1]), math.fsum(per_epoch)
    print()
    say(f"gensim's running loss, {epochs} epochs, workers=1 (compute_loss=True passed to "
        f"train(); passed only to the constructor, train()'s default False wins and the loss "
        f"reads 0):")
    say(f"  one train() call: reported total {reported:,.0f} (float32, summed term by term)")
    say(f"  {epochs} one-epoch train() calls, same schedule: sum {exact:,.0f} "
        f"(max |vector difference| between the two models: {same:.1e})")
    say(f"  reported / sum = {reported / exact:.4f}; last epoch: increment of the reported "
        f"total {increments[-1]:,.0f}, one-epoch total {per_epoch[-1]:,.0f}")
    first = next((e for e in range(epochs) if increments[e] < 0.95 * per_epoch[e]), None)
    if first is not None:
        say(f"  the increment first falls 5 % short at epoch {first + 1}, running total "
            f"{float(totals.totals[first]):,.0f} (2^22 = {2**22:,}: float32 spacing 0.5 "
            f"above it)")
    return [dict(table="gensim-loss", peer="reported/exact", ratio=reported / exact)]


def bench_gensim(quick=False, repeats=5, seeds=3, slice_batches=20, loss_epochs=20, top=300,
                 long_epochs=20):
    """Skip-gram: ours against gensim, when gensim is importable. Returns (rows, agreement)."""
    try:
        from gensim.models import Word2Vec
    except ImportError:
        print("\ngensim is not installed: the skip-gram comparison with Word2Vec(sg=1, "
              "negative=5) is skipped (pip install gensim to run it).")
        return [], {}
    import gensim

    tokens = pydoc_corpus()
    epochs, dim, draws, min_pairs = SG["epochs"], SG["dim"], 4, 20
    if quick:
        tokens, epochs, dim, draws, min_pairs = tokens[:6000], 1, 16, 1, 5
        repeats, seeds, slice_batches, loss_epochs, top, long_epochs = 1, 2, 3, 0, 50, 2
    words, counts, ids = build_vocabulary(tokens, min_count=SG["min_count"])
    top = min(top, len(words))
    sentences = [tokens[i:i + GENSIM_CHUNK] for i in range(0, len(tokens), GENSIM_CHUNK)]
    n = ids.numel()
    print()
    say(f"Skip-gram with negative sampling, ours (chapter 4) against gensim "
        f"{gensim.__version__} Word2Vec(sg=1, negative={SG['k']}), on Python's pydoc_data "
        f"topics: {len(tokens):,} tokens, {n:,} in the vocabulary of V = {len(words):,} "
        f"(min_count {SG['min_count']}); window {SG['window']} (fixed), d = {dim}, k = "
        f"{SG['k']}, unigram^{SG['power']} noise, subsampling t = {SG['t']}, {epochs} epochs")
    load0 = os.getloadavg()

    # throughput, interleaved: gensim's full runs and ours (the first `seeds` repeats: these are
    # the models compared below); ours with 1 and 2 threads also on a slice of batches (2 threads
    # on a loaded machine are too slow for full runs), timed without the set-up
    full = f"ours, 1 thread, full {epochs}-epoch runs"
    names = ["gensim, workers=1", "gensim, workers=2", full,
             f"ours, 1 thread ({slice_batches} batches)",
             f"ours, 2 threads ({slice_batches} batches)"]
    wps = {name: [] for name in names}
    gensim_models, gensim_sec, ours_models, full_sec = [], [], [], []
    train_gensim(Word2Vec, sentences, n, seed=0, workers=1, epochs=1, dim=dim)  # warm-up
    train_ours(ids, counts, seed=0, threads=1, epochs=1, dim=dim, max_batches=2)
    for r in range(max(repeats, seeds)):
        if r < repeats:
            for workers in (1, 2):
                model, sec, w = train_gensim(Word2Vec, sentences, n, seed=r + 1,
                                             workers=workers, epochs=epochs, dim=dim)
                wps[names[workers - 1]].append(w / sec)
                if workers == 1:
                    gensim_sec.append(sec)
                    if len(gensim_models) < seeds:
                        gensim_models.append(model)  # workers=1: deterministic given the seed
        if r < seeds:
            model, sec, w, _ = train_ours(ids, counts, seed=r, threads=1, epochs=epochs, dim=dim)
            ours_models.append(model)
            full_sec.append(sec)
            wps[full].append(w / sec)
        if r < repeats:
            for threads in (1, 2):
                _, _, w, sec = train_ours(ids, counts, seed=r, threads=threads, epochs=epochs,
                                          dim=dim, max_batches=slice_batches)
                wps[names[2 + threads]].append(w / sec)
    while len(gensim_models) < seeds:
        gensim_models.append(train_gensim(Word2Vec, sentences, n, seed=len(gensim_models) + 1,
                                          workers=1, epochs=epochs, dim=dim)[0])
    load1 = os.getloadavg()

    med = {name: statistics.median(v) for name, v in wps.items()}
    base = med[full]
    say(f"words per second (corpus words after min_count, before subsampling; median of "
        f"{repeats} interleaved repeats, ours' full runs: of {seeds}); ratio = / ours' full "
        f"1-thread runs")
    say(f"load average (os.getloadavg, as uptime): {load0[0]:.1f} {load0[1]:.1f} "
        f"{load0[2]:.1f} before, {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f} after, on "
        f"{os.cpu_count()} CPUs")
    rows = []
    for name, value in med.items():
        print(f"{name:>38} {value:>12,.0f} {value / base:>8.2f}")
        rows.append(dict(table="skipgram", peer=name, ratio=value / base, words_per_s=value))

    # gensim's linearly decaying SGD needs more passes than our Adam: a second set of gensim
    # models trained for long_epochs (in the chapter's 2 its fit to PMI - log k is far below ours)
    long_models, long_sec = [], []
    for seed in range(1, seeds + 1):
        model, sec, _ = train_gensim(Word2Vec, sentences, n, seed=seed, workers=1,
                                     epochs=long_epochs, dim=dim)
        long_models.append(model)
        long_sec.append(sec)
    sets = {f"ours {epochs} ep.": ours_models, f"gensim {epochs} ep.": gensim_models,
            f"gensim {long_epochs} ep.": long_models}
    say(f"seconds to train one model (1 thread / workers=1, median): ours {epochs} epochs "
        f"{statistics.median(full_sec):.1f}, gensim {epochs} epochs "
        f"{statistics.median(gensim_sec):.2f}, gensim {long_epochs} epochs "
        f"{statistics.median(long_sec):.1f}")

    # agreement: Spearman over the cosine similarities of all pairs among the top words
    sims = {name: [pair_similarities(m, words, top) for m in models]
            for name, models in sets.items()}

    def rho(a, b):
        return float(scipy.stats.spearmanr(a, b).statistic)

    agreement = {}
    say(f"Spearman correlation of the cosine similarities (input vectors) of all "
        f"{top * (top - 1) // 2:,} pairs among the {top} most frequent words; median (range) "
        f"over the pairs of {seeds} runs of each (other seeds)")
    names_ = list(sets)
    for a_i, a in enumerate(names_):
        for b in names_[a_i:]:
            if a == b:
                values = [rho(x, y) for i, x in enumerate(sims[a]) for y in sims[a][i + 1:]]
            elif a.startswith("ours"):
                values = [rho(x, y) for x in sims[a] for y in sims[b]]
            else:
                continue
            agreement[f"{a} vs {b}"] = values
            print(f"{a + ' vs ' + b:>38} {spread(values)}")
    # a shared direction in all vectors makes every cosine large and agrees across seeds
    # without saying anything about the words: the mean cosine shows whether there is one
    say("mean cosine over those pairs: " + ", ".join(
        f"{name} {spread([float(x.mean()) for x in sims[name]])}" for name in sets))

    gen = torch.Generator().manual_seed(12345)
    target, mask = shifted_pmi_target(ids, counts, draws, min_pairs, gen)
    say(f"Pearson correlation of u_w . v_c with PMI - log k (log p(w|c) - log q(w) - log k, "
        f"as the chapter) on the {int(mask.sum()):,} pairs seen >= {min_pairs} times "
        f"(mean of {draws} independent subsamplings)")
    for name, models in sets.items():
        agreement[f"pmi {name}"] = [pmi_correlation(m, words, target, mask) for m in models]
        print(f"{name:>38} {spread(agreement[f'pmi {name}'])}")

    c, w = skipgram_pairs(ids, window=SG["window"])
    pick = torch.randperm(c.numel(), generator=gen)[:20_000]
    pairs = (c[pick], w[pick])
    noise = AliasSampler(unigram_noise(counts, SG["power"])).sample((pick.numel(), SG["k"]),
                                                                    generator=gen)
    say(f"scores |u . v| >= 6 (gensim's MAX_EXP: such a term is left out of its update) on "
        f"{pick.numel():,} corpus pairs and {SG['k']} noise words each, first model of each")
    for name, models in sets.items():
        fd, fn = large_score_fraction(models[0], words, pairs, noise)
        print(f"{name:>38} data {100 * fd:.3f} %, noise {100 * fn:.3f} %")
    if loss_epochs:
        rows += gensim_loss_check(Word2Vec, sentences, loss_epochs, dim)
    return rows, agreement


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gensim-loss-epochs", type=int, default=20,
                        help="epochs of the check of gensim's running loss (0: skip it)")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(0)
    if args.quick:
        sample_V, n, step_V, repeats = [1000, 10000], 10_000, [100, 1000], 2
    else:
        sample_V, n = [10**4, 10**5, 10**6], 10**6
        step_V, repeats = [10**3, 10**4, 10**5, 10**6], args.repeats
    rows = bench_sampling(sample_V, n, repeats, gen)
    rows += bench_steps(step_V, 128, 256, 20, repeats, gen)
    rows += bench_gensim(quick=args.quick, repeats=args.repeats,
                         loss_epochs=args.gensim_loss_epochs)[0]
    samp = [r["ratio"] for r in rows if r.get("table") == "sampling"]
    growth = [r["ratio"] for r in rows if r.get("table") == "step" and r.get("peer") == "nce"]
    report("bench_nce", rows,
           f"alias sampler {min(samp):.1f}-{max(samp):.1f}x faster than its peers; NCE step "
           f"time grows {max(growth):.2f}x from V = {step_V[0]:,} to {step_V[-1]:,}", args.json)
    return rows


if __name__ == "__main__":
    main()
