"""The skip-gram comparison in benchmarks/bench_nce.py runs with gensim and is skipped without it.

gensim is not a dependency of the book: CI has no gensim and exercises the skip path (also run
here by hiding gensim), a machine with gensim runs the tiny --quick comparison.
"""

import pathlib
import runpy
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_nce.py"


@pytest.fixture(scope="module")
def bench():
    return runpy.run_path(str(BENCH), run_name="bench_nce")


def test_skipped_without_gensim(bench, monkeypatch, capsys):
    # None in sys.modules makes the import raise ImportError, as if gensim were not installed
    for name in ("gensim", "gensim.models"):
        monkeypatch.setitem(sys.modules, name, None)
    rows, agreement = bench["bench_gensim"](quick=True)
    assert rows == [] and agreement == {}
    out = capsys.readouterr().out
    assert "gensim is not installed" in out and "pip install gensim" in out


def test_quick_comparison_with_gensim(bench, capsys):
    pytest.importorskip("gensim")
    rows, agreement = bench["bench_gensim"](quick=True)
    peers = [r["peer"] for r in rows]
    assert peers[:2] == ["gensim, workers=1", "gensim, workers=2"]
    assert all(r["table"] == "skipgram" and r["words_per_s"] > 0 and r["ratio"] > 0
               for r in rows)
    # every comparison produced correlations in [-1, 1]: within each kind and across
    assert {"ours 1 ep. vs ours 1 ep.", "gensim 1 ep. vs gensim 1 ep.",
            "ours 1 ep. vs gensim 1 ep."} <= set(agreement)
    values = [v for vs in agreement.values() for v in vs]
    assert values and all(-1 <= v <= 1 for v in values)
    out = capsys.readouterr().out
    assert "Spearman" in out and "PMI - log k" in out and "load average" in out
