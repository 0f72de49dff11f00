"""Benchmark of softmaxbook.gumbel against PyTorch's built-ins.

Prints, for each pair, the median time of ours and of PyTorch's, measured interleaved in the same
run, and the ratio ours / theirs (below 1 means we are faster):

* ``gumbel_softmax`` vs ``torch.nn.functional.gumbel_softmax`` (soft and hard), same shapes;
* ``gumbel_topk`` vs ``torch.multinomial(probs, k, replacement=False)``, on probabilities given
  (the fairest case for multinomial) and from logits (softmax + multinomial);
* ``gumbel_max`` vs ``torch.multinomial(probs, 1)`` and ``Categorical(logits=...).sample()``.

Our functions validate their arguments on every call (PyTorch's do not); the time of that is
included.

Run: ``.venv/bin/python benchmarks/bench_gumbel.py`` (256 x 100000, k = 100), or ``--quick``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from softmaxbook.gumbel import gumbel_max, gumbel_softmax, gumbel_topk


def interleaved(fns: dict, repeats: int, warmup: int = 2) -> dict:
    """Median seconds per call of each function, the functions run alternately."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv=None) -> list[tuple[str, float, float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats (smoke test)")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--cols", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.cols, args.k, args.repeats = 8, 1000, 10, 3
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(args.rows, args.cols, generator=gen)
    probs = torch.softmax(logits, -1)
    k = args.k

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
    ]
    print(f"shape {args.rows} x {args.cols}, k = {k}, {torch.get_num_threads()} threads, "
          f"median of {args.repeats} interleaved repeats, torch {torch.__version__}")
    print(f"{'ours':30s} {'ms':>8s}   {'PyTorch':30s} {'ms':>8s}   {'ratio':>6s}")
    rows = []
    for ours_name, ours, theirs_name, theirs in pairs:
        t = interleaved({"ours": ours, "theirs": theirs}, args.repeats)
        ratio = t["ours"] / t["theirs"]
        rows.append((f"{ours_name} / {theirs_name}", t["ours"], t["theirs"], ratio))
        print(f"{ours_name:30s} {1e3 * t['ours']:8.2f}   {theirs_name:30s} {1e3 * t['theirs']:8.2f}"
              f"   {ratio:6.2f}")
    return rows


if __name__ == "__main__":
    main()
