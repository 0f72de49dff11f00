"""The benchmarks' one timing harness: interleaved repeats, medians, JSON and a summary line.

Every ``bench_*.py`` script times its functions with :func:`interleaved` and ends with
:func:`report`, which prints one summary line and writes the rows as JSON (``--json PATH``;
``python3 tools/book.py bench`` collects them for the README's "Performance" table).

Why interleaved: the machine is shared and its load drifts. Timing A ten times and then B ten
times charges any drift to one of them; running A, B, A, B, ... charges it to both, so their
ratio stays fair. The median is reported (robust to a stray slow call) with the minimum beside it
(other processes only ever add time, so the minimum is the least disturbed single call).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch

__all__ = ["Timing", "interleaved", "report", "add_json_argument"]


class Timing(NamedTuple):
    """Seconds per call of one function: ``median`` and ``minimum`` over the repeats, and the
    ``result`` of its last call (for checking that the compared functions agree)."""
    median: float
    minimum: float
    result: Any = None


def interleaved(fns: dict[Any, Callable[[], Any]], repeats: int, warmup: int = 1) -> dict:
    """Time each function of ``fns`` ``repeats`` times, the functions run alternately, after
    ``warmup`` untimed calls of each (first-touch page faults, kernel selection, caches).

    Returns ``{name: Timing}``.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"interleaved: need repeats >= 1 and warmup >= 0, got {repeats}, "
                         f"{warmup}")
    results = {}
    for name, fn in fns.items():
        for _ in range(warmup):
            results[name] = fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - t0)
    return {name: Timing(statistics.median(ts), min(ts), results[name])
            for name, ts in times.items()}


def add_json_argument(parser) -> None:
    """The ``--json PATH`` option every benchmark script has."""
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the rows, the machine and its load as JSON here")


def _machine() -> dict:
    try:
        load = os.getloadavg()
    except OSError:  # not every platform has it
        load = None
    return {"torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "load_1_5_15": load,
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def report(name: str, rows: list[dict], summary: str, json_path: str | None = None) -> None:
    """Print ``name: summary`` as the script's last line and, given ``json_path``, write
    ``{"benchmark", "summary", "machine", "rows"}`` there (the file is replaced atomically)."""
    print(f"{name}: {summary}")
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"benchmark": name, "summary": summary,
                                   "machine": _machine(), "rows": rows}, indent=1,
                                  default=float) + "\n")
        os.replace(tmp, path)
