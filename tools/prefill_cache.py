"""Execute the chapter notebooks the build's cache lacks, two at a time, and store them in it.

    .venv/bin/python tools/prefill_cache.py CACHE NB [NB ...] [--jobs 2] [--timeout 300]

Jupyter Book (myst-nb, ``execute_notebooks: cache``) executes the notebooks that miss its cache
one after another; on the 2-core CI machine that is most of the build. This runs them first, in
parallel, the way myst-nb would (its own ``single_nb_execution``, kernel in the notebook's folder,
the same timeout) and caches each one that succeeds exactly as myst-nb does
(``cache_notebook_bundle``); the build then finds every notebook in the cache. A notebook that
fails is *not* cached: the build executes it again and reports the failure with its traceback,
as it always did. Prints one JSON line: the notebooks it executed and cached (the test command
uses it: a notebook the build has just executed with the package as it is now needs no second
execution by nbval).

Each kernel gets one thread (``OMP_NUM_THREADS=1``): two kernels with two threads each on two
cores wait on each other (tests/conftest.py measured 7x on a busy machine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def _execute(path: str, timeout: int) -> tuple[str, str | None, dict | None, float]:
    """Run in a worker process: the executed notebook (as a dict) or the error."""
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution

    nb = nbformat.read(path, as_version=4)
    t0 = time.time()
    result = single_nb_execution(nb, cwd=str(Path(path).parent), timeout=timeout,
                                 allow_errors=False, meta_override=True)
    if result.err is not None:
        return path, f"{type(result.err).__name__}", None, time.time() - t0
    return path, None, nb, result.time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache", help="the build's jupyter-cache folder (_config.yml: execute.cache)")
    parser.add_argument("notebooks", nargs="+", help="the .ipynb files the build executes")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks executed at once")
    parser.add_argument("--timeout", type=int, default=300,
                        help="seconds a cell may run (_config.yml: execute.timeout)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"argument --jobs must be >= 1, got {args.jobs}")

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(args.cache)
    todo = []
    for name in args.notebooks:
        path = str(Path(name).resolve())
        nb = nbformat.read(path, as_version=4)
        try:
            cache.match_cache_notebook(nb)
        except KeyError:
            todo.append(path)
    executed = []
    if todo:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ.setdefault("MKL_NUM_THREADS", "1")
        # Longest first would be better; the chapters are of similar length (15-40 s).
        with ProcessPoolExecutor(max_workers=min(args.jobs, len(todo))) as pool:
            futures = [pool.submit(_execute, path, args.timeout) for path in todo]
            for future in futures:
                path, err, nb, seconds = future.result()
                rel = os.path.relpath(path)
                if err is not None:
                    print(f"prefill: {rel} failed ({err}); the build will run it again and "
                          "show the traceback", file=sys.stderr, flush=True)
                    continue
                record = cache.add_nb_to_project(path)
                cache.cache_notebook_bundle(
                    CacheBundleIn(nbformat.from_dict(nb), record.uri,
                                  data={"execution_seconds": seconds}),
                    check_validity=False, overwrite=True)
                executed.append(rel)
                print(f"prefill: {rel} executed in {seconds:.1f} s and cached", file=sys.stderr,
                      flush=True)
    print(json.dumps({"executed": executed, "cached_before": len(args.notebooks) - len(todo)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
