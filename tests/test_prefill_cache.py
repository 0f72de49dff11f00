"""tools/prefill_cache.py: notebooks missing from the build's cache are executed and cached the
way myst-nb caches them (so the build finds them), a failing one is left out (the build runs it
again and reports it), and one already cached is not executed again."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from conftest import ROOT

TOOL = ROOT / "tools" / "prefill_cache.py"


def _notebook(path, source):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, path)
    return path


def _prefill(cache, *paths, jobs=2):
    proc = subprocess.run([sys.executable, str(TOOL), str(cache), *map(str, paths),
                           "--jobs", str(jobs)], capture_output=True, text=True, timeout=300)
    return proc


def test_executes_caches_and_skips(tmp_path):
    from jupyter_cache import get_cache

    good = _notebook(tmp_path / "good.ipynb", "import os\nprint(os.getcwd())")
    bad = _notebook(tmp_path / "bad.ipynb", "raise RuntimeError('boom')")
    cache = tmp_path / "cache"
    proc = _prefill(cache, good, bad)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [p.endswith("good.ipynb") for p in out["executed"]] == [True]
    assert "bad.ipynb failed" in proc.stderr
    record = get_cache(str(cache)).match_cache_notebook(nbformat.read(good, as_version=4))
    cached = get_cache(str(cache)).get_cache_bundle(record.pk).nb
    # executed in the notebook's folder, as myst-nb does (execution_in_temp is off)
    assert str(tmp_path) in cached.cells[0].outputs[0]["text"]
    with pytest.raises(KeyError):
        get_cache(str(cache)).match_cache_notebook(nbformat.read(bad, as_version=4))
    again = json.loads(_prefill(cache, good).stdout.strip().splitlines()[-1])
    assert again == {"executed": [], "cached_before": 1}


def test_bad_jobs_is_named(tmp_path):
    proc = _prefill(tmp_path / "cache", _notebook(tmp_path / "a.ipynb", "1"), jobs=0)
    assert proc.returncode == 2 and "argument --jobs must be >= 1, got 0" in proc.stderr
