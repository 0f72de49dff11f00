"""Benchmark of softmaxbook.gumbel against PyTorch's built-ins.

Prints, for each pair, the median time of ours and of PyTorch's, measured interleaved in the same
run, and the ratio ours / theirs (below 1 means we are faster):

* ``gumbel_softmax`` vs ``torch.nn.functional.gumbel_softmax`` (soft and hard), same shapes;
* ``gumbel_topk`` vs ``torch.multinomial(probs, k, replacement=False)``, on probabilities given
  (the fairest case for multinomial) and from logits (softmax + multinomial);
* ``gumbel_max`` vs ``torch.multinomial(probs, 1)`` and ``Categorical(logits=...).sample()``;
* ``gumbel_rao`` (K = 10 conditional draws) vs straight-through ``F.gumbel_softmax(hard=True)``,
  forward and backward, on the first 1000 columns (K softmaxes cost about K times one);
* ``weighted_reservoir`` over the first row as a stream of 10 chunks vs
  ``torch.multinomial(probs[0], k, replacement=False)`` on the whole row (the reservoir pays for
  one pass with memory for k items plus one chunk).

Our functions validate their arguments on every call (PyTorch's do not); the time of that is
included.

Run: ``.venv/bin/python benchmarks/bench_gumbel.py`` (256 x 100000, k = 100), or ``--quick``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from softmaxbook.gumbel import (gumbel_max, gumbel_rao, gumbel_softmax, gumbel_topk,
                                weighted_reservoir)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import add_json_argument, interleaved, report  # noqa: E402


def main(argv=None) -> list[tuple[str, float, float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats (smoke test)")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--cols", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=9)
    add_json_argument(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.cols, args.k, args.repeats = 8, 1000, 10, 3
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(args.rows, args.cols, generator=gen)
    probs = torch.softmax(logits, -1)
    k = args.k
    narrow = logits[:, :1000].clone()
    row_chunks = list(logits[0].double().chunk(10))

    def backward(make):
        x = narrow.clone().requires_grad_()
        make(x).sum().backward()
        return x.grad

    pairs = [
        ("gumbel_softmax tau=1", lambda: gumbel_softmax(logits, 1.0, generator=gen),
         "F.gumbel_softmax", lambda: F.gumbel_softmax(logits, tau=1.0)),
        ("gumbel_softmax tau=0.5 hard", lambda: gumbel_softmax(logits, 0.5, hard=True, generator=gen),
         "F.gumbel_softmax hard", lambda: F.gumbel_softmax(logits, tau=0.5, hard=True)),
        (f"gumbel_topk k={k}", lambda: gumbel_topk(logits, k, generator=gen),
         "multinomial(probs) w/o repl.", lambda: torch.multinomial(probs, k, replacement=False)),
        (f"gumbel_topk k={k}", lambda: gumbel_topk(logits, k, generator=gen),
         "softmax+multinomial w/o repl.",
         lambda: torch.multinomial(torch.softmax(logits, -1), k, replacement=False)),
        ("gumbel_max", lambda: gumbel_max(logits, generator=gen),
         "multinomial(probs, 1)", lambda: torch.multinomial(probs, 1)),
        ("gumbel_max", lambda: gumbel_max(logits, generator=gen),
         "Categorical(logits).sample()",
         lambda: torch.distributions.Categorical(logits=logits, validate_args=False).sample()),
        ("gumbel_rao K=10 fwd+bwd",
         lambda: backward(lambda x: gumbel_rao(x, 0.5, samples=10, generator=gen)),
         "F.gumbel_softmax hard fwd+bwd",
         lambda: backward(lambda x: F.gumbel_softmax(x, tau=0.5, hard=True))),
        (f"weighted_reservoir k={k}",
         lambda: weighted_reservoir(iter(row_chunks), k, generator=gen),
         "multinomial(probs[0]) w/o repl.",
         lambda: torch.multinomial(probs[0], k, replacement=False)),
    ]
    print(f"shape {args.rows} x {args.cols}, k = {k}, {torch.get_num_threads()} threads, "
          f"median of {args.repeats} interleaved repeats, torch {torch.__version__}")
    print(f"{'ours':30s} {'ms':>8s}   {'PyTorch':30s} {'ms':>8s}   {'ratio':>6s}")
    rows = []
    for ours_name, ours, theirs_name, theirs in pairs:
        t = {n: v.median for n, v in
             interleaved({"ours": ours, "theirs": theirs}, args.repeats, warmup=2).items()}
        ratio = t["ours"] / t["theirs"]
        rows.append((f"{ours_name} / {theirs_name}", t["ours"], t["theirs"], ratio))
        print(f"{ours_name:30s} {1e3 * t['ours']:8.2f}   {theirs_name:30s} {1e3 * t['theirs']:8.2f}"
              f"   {ratio:6.2f}")
    worst = max(rows, key=lambda r: r[3])
    report("bench_gumbel", [dict(case=r[0], ours_s=r[1], peer_s=r[2], ratio=r[3]) for r in rows],
           f"ours / PyTorch {min(r[3] for r in rows):.2f}-{worst[3]:.2f} over {len(rows)} cases "
           f"(slowest: {worst[0]})", args.json)
    return rows


if __name__ == "__main__":
    main()
