"""Benchmark of softmaxbook.beam: stochastic beam search against its peers.

Prints median times (functions run interleaved in the same process) and ratios:

* ``stochastic_beam_search / beam_search``: same step function, same k. Stochastic beam search
  keeps k + 1 nodes (the (k+1)-th gives κ for the estimators) and draws V Gumbels per open node
  (conditioning only each node's k + 1 best on the parent's value), so it pays for one more row
  per input in every model call plus the noise. No ``eos``: both
  searches then do the same max_len steps on full beams (with an ``eos`` they would follow
  different paths and stop at different steps, and the ratio would measure that). Measured on
  four models: a bigram table lookup (the search's own overhead dominates), a stateless MLP on the
  last two tokens, a GRU with state, and a larger GRU (hidden 1024, V = 1000, 4 inputs) where the
  model dominates, as in real use.
* ``stochastic_beam_search / per-node reference``: the readable loop that calls the model once
  per node and sorts Python lists (``stochastic_beam_search_reference``), on the MLP model,
  single input.

Run: ``.venv/bin/python benchmarks/bench_beam.py`` or ``--quick`` (a smoke test); ``--threads 1``
on a shared, busy machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from softmaxbook.beam import (
    beam_search,
    stochastic_beam_search,
    stochastic_beam_search_reference,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import add_json_argument, interleaved, report  # noqa: E402


class BigramTable:
    """A random bigram table: the cheapest possible model (a row lookup)."""

    def __init__(self, V, gen):
        self.V = V
        self.table = torch.log_softmax(torch.randn(V + 1, V, generator=gen) * 2, -1)

    def __call__(self, prefixes):
        if prefixes.shape[1] == 0:
            return self.table[torch.full((prefixes.shape[0],), self.V)]
        return self.table[prefixes[:, -1]]


class TrigramMLP(torch.nn.Module):
    """Embeds the last two tokens, one hidden layer: a stateless neural model."""

    def __init__(self, V, hidden, gen):
        super().__init__()
        torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
        self.V = V
        self.emb = torch.nn.Embedding(V + 1, hidden // 2)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, V))

    def forward(self, prefixes):
        n, t = prefixes.shape
        start = torch.full((n, 2), self.V, dtype=torch.long)
        ctx = torch.cat([start, prefixes], dim=1)[:, -2:]
        return torch.log_softmax(self.mlp(self.emb(ctx).flatten(1)) * 3, -1)


class GRUModel(torch.nn.Module):
    """A GRU language model with its hidden state carried by the search (stateful protocol)."""

    def __init__(self, V, hidden, gen):
        super().__init__()
        torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
        self.V = V
        self.emb = torch.nn.Embedding(V + 1, hidden)
        self.cell = torch.nn.GRUCell(hidden, hidden)
        self.out = torch.nn.Linear(hidden, V)

    def forward(self, prefixes, h):
        if prefixes.shape[1] > 0:
            h = self.cell(self.emb(prefixes[:, -1]), h)
        return torch.log_softmax(self.out(h) * 3, -1), h


def main(argv=None) -> list[tuple[str, float, float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (smoke test)")
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--max-len", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads (2 by the book's convention; on a machine shared with "
                             "other busy processes, 1 avoids thread-pool stalls of milliseconds "
                             "per operation that swamp the comparison)")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.vocab, args.hidden, args.k, args.max_len, args.batch, args.repeats = 16, 32, 3, 5, 2, 2
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    V, k, L, B = args.vocab, args.k, args.max_len, args.batch
    eos = None
    bigram = BigramTable(V, gen)
    mlp = TrigramMLP(V, args.hidden, gen)
    gru = GRUModel(V, args.hidden, gen)
    h0 = torch.zeros(B, args.hidden)

    big_V, big_hidden, big_B = (1000, 1024, 4) if not args.quick else (32, 32, 2)
    big_gru = GRUModel(big_V, big_hidden, gen)
    big_h0 = torch.zeros(big_B, big_hidden)

    rows = []
    with torch.no_grad():
        for name, model, kw, vocab, batch in [
            ("bigram table", bigram, {}, V, B),
            ("trigram MLP", mlp, {}, V, B),
            ("GRU (stateful)", gru, {"init_state": h0}, V, B),
            (f"GRU {big_hidden}, V={big_V}, {big_B} inputs", big_gru, {"init_state": big_h0},
             big_V, big_B),
        ]:
            t = interleaved({
                "sbs": lambda: stochastic_beam_search(model, k, L, eos=eos, batch_size=batch,
                                                      generator=gen, **kw),
                "bs": lambda: beam_search(model, k, L, eos=eos, batch_size=batch, **kw),
            }, args.repeats)
            rows.append((f"stochastic_beam_search / beam_search, {name}", t["sbs"], t["bs"]))
        ref_len = min(L, 10)
        t = interleaved({
            "sbs": lambda: stochastic_beam_search(mlp, k, ref_len, eos=eos, generator=gen),
            "ref": lambda: stochastic_beam_search_reference(mlp, k, ref_len, eos=eos,
                                                            generator=gen),
        }, max(1, args.repeats // 2))
        rows.append(("stochastic_beam_search / per-node reference, trigram MLP, 1 input",
                     t["sbs"], t["ref"]))

    print(f"V = {V}, k = {k}, max_len = {L} (reference: {min(L, 10)}), batch = {B} inputs, "
          f"hidden = {args.hidden}, {torch.get_num_threads()} threads, median of {args.repeats} "
          "(ratio: of the medians)")
    width = max(len(r[0]) for r in rows)
    print(f"{'comparison':<{width}}  {'ours (ms)':>10}  {'peer (ms)':>10}  {'ratio':>7}  "
          f"{'ratio of minima':>15}")
    for name, ours, peer in rows:
        print(f"{name:<{width}}  {ours[0] * 1e3:>10.2f}  {peer[0] * 1e3:>10.2f}  "
              f"{ours[0] / peer[0]:>7.3f}  {ours[1] / peer[1]:>15.3f}")
    sbs = [r for r in rows if r[0].startswith("stochastic_beam_search / beam_search")]
    report("bench_beam",
           [dict(case=n, ours_s=o.median, peer_s=p.median, ratio=o.median / p.median,
                 ratio_of_minima=o.minimum / p.minimum) for n, o, p in rows],
           "stochastic / plain beam search " + ", ".join(
               f"{r[0].split(', ', 1)[1]} {r[1].median / r[2].median:.2f}" for r in sbs),
           args.json)
    return rows


if __name__ == "__main__":
    main()
