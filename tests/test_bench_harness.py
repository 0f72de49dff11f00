"""The benchmarks' shared timing harness (benchmarks/_harness.py)."""

import json
import runpy
from pathlib import Path

import pytest

H = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "_harness.py"))


def test_interleaved_alternates_and_keeps_the_last_result():
    calls = []

    def make(name):
        def fn():
            calls.append(name)
            return len(calls)
        return fn

    t = H["interleaved"]({"a": make("a"), "b": make("b")}, repeats=3, warmup=2)
    # warm-up of each first, then a, b, a, b, a, b: drift is charged to both
    assert calls == ["a", "a", "b", "b", "a", "b", "a", "b", "a", "b"]
    assert t["a"].result == 9 and t["b"].result == 10
    for timing in t.values():
        assert 0 <= timing.minimum <= timing.median
    with pytest.raises(ValueError, match="repeats >= 1"):
        H["interleaved"]({"a": make("a")}, repeats=0)


def test_report_prints_one_line_and_writes_json(tmp_path, capsys):
    path = tmp_path / "sub" / "bench.json"
    H["report"]("bench_x", [{"case": "c", "ratio": 1.5}], "ours / peer 1.50", str(path))
    assert capsys.readouterr().out == "bench_x: ours / peer 1.50\n"
    data = json.loads(path.read_text())
    assert data["benchmark"] == "bench_x" and data["rows"] == [{"case": "c", "ratio": 1.5}]
    assert {"torch", "threads", "load_1_5_15"} <= set(data["machine"])
    assert [p.name for p in path.parent.iterdir()] == ["bench.json"]  # no temporary left
    H["report"]("bench_x", [], "nothing", None)  # without a path: only the line
    assert capsys.readouterr().out == "bench_x: nothing\n"
