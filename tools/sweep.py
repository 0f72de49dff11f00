#!/usr/bin/env python3
"""Measure how often a chapter's asserts fail by chance: run its code cells once per seed.

    python3 tools/book.py sweep 2 --seeds 300 --start 10000 -j 2
    python3 tools/book.py sweep 02_choice --list            # the code cells, numbered, with asserts
    python3 tools/book.py sweep 2 --cells 0,3-5 --seeds 1000   # only what one assert needs

Each seed runs in a fresh Python process (``SOFTMAXBOOK_SEED`` set, no Jupyter kernel, the Agg
backend, figures closed after every cell and never rendered, widgets skipped). Every ``assert`` in
the chosen cells -- also inside functions and loops -- is rewritten so that it is *recorded*
instead of stopping the run, and where it compares a computed quantity with a threshold its
**margin** is recorded too (positive = passed):

    a < b, a <= b            b - a          a > b, a >= b        a - b
    x < y < z                the smallest of the pairwise margins
    p and q                  the smallest margin of the parts
    (a < b).all(), torch.all(a < b)            min over elements of b - a
    torch.allclose(a, b, rtol, atol) / np.allclose      min(atol + rtol |b| - |a - b|)

For each assert the report gives the seeds run, the failures (with their seeds), the smallest
margin, the margins' mean and standard deviation, ``z`` = mean / sd (how many standard deviations
the typical run lies from the threshold) and the false-alarm rate a normal fit to the margins
predicts, Phi(-z). Beside it the empirical rate's upper 95 % bound (3/n when nothing failed).
An assert whose outcome never varies *and* whose margin is the same under every seed is flagged
``same every seed``: it does not depend on the seed at all, so it is either a deterministic check
(fine, if that is what it is meant to be) or one that cannot fail; it is no statistical evidence.
A cell that raises (not through an assert) is reported with its seeds; later cells still run.

Read z with care: the normal fit assumes roughly normal margins. For ``p > P_CUT`` on a p-value
the margins are uniform and the rate is P_CUT by construction (chapter 8's three such asserts show
z ~ 1.7 with no failure in 300 seeds); for a skewed statistic (a maximum, a count) look at the
smallest margin and the failures, and argue the rate from the statistic's distribution.

The report is printed and written as JSON (default ``_build/sweep/<chapter>-s<start>-n<N>.json``),
with every seed's margin per assert (``margins``: [seed, margin] pairs) for fits on other scales.
Each seed's result is also appended, as it finishes, to ``<report>.partial.jsonl``: a sweep that
is stopped keeps what it ran, and ``--resume`` runs only the seeds still missing. The notebook is
read once, at the start, so editing it during a sweep does not change what is measured.
Note the rates are per assert and per seed; a chapter's rate is at most their sum.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REC = "__sweep_rec__"


# ------------------------------------------------------------------ reading the notebook

def resolve_chapter(name: str) -> Path:
    """'2', '02', '02_choice', 'book/02_choice.ipynb' or any notebook path."""
    p = Path(name)
    if p.suffix == ".ipynb" and p.exists():
        return p.resolve()
    if name.isdigit():
        matches = sorted((ROOT / "book").glob(f"{int(name):02d}_*.ipynb"))
    else:
        matches = sorted((ROOT / "book").glob(f"{name}*.ipynb"))
    if len(matches) != 1:
        found = ", ".join(m.stem for m in matches) or "none"
        raise SystemExit(f"sweep: argument 'chapter' must name one chapter notebook, got {name!r} "
                         f"(matches: {found})")
    return matches[0]


def code_cells(nb_path: Path) -> list[dict]:
    nb = json.loads(nb_path.read_text())
    cells = []
    for c in nb["cells"]:
        if c.get("cell_type") != "code":
            continue
        src = c["source"] if isinstance(c["source"], str) else "".join(c["source"])
        cells.append({"source": src, "tags": c.get("metadata", {}).get("tags", [])})
    return cells


def strip_magics(src: str) -> str:
    """IPython magics and shell lines are not Python: blank them (keeping line numbers)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in src.splitlines())


def parse_cells(spec: str | None, n: int) -> list[int]:
    if not spec:
        return list(range(n))
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise SystemExit(f"sweep: argument '--cells' must look like 0,3-5, got {spec!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo or hi >= n:
            raise SystemExit(f"sweep: argument '--cells': {part} is outside the {n} code cells "
                             f"(0-{n - 1})")
        out.extend(range(lo, hi + 1))
    return sorted(set(out))


# ------------------------------------------------------------------ rewriting the asserts

class _Rewriter(ast.NodeTransformer):
    """assert TEST, MSG  ->  __sweep_rec__(ID, lambda: <TEST as margin-recording terms>)"""

    def __init__(self, cell: int, lines: list[str]):
        self.cell, self.lines, self.found = cell, lines, []

    def visit_Assert(self, node: ast.Assert):
        aid = f"{self.cell}:{node.lineno}"
        text = ast.get_source_segment("\n".join(self.lines), node.test) or ast.unparse(node.test)
        self.found.append({"id": aid, "cell": self.cell, "line": node.lineno,
                           "text": " ".join(text.split())})
        body = self._term(node.test, aid)
        call = ast.Call(func=ast.Name(REC, ast.Load()),
                        args=[ast.Constant(aid), ast.Lambda(
                            args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                               kw_defaults=[], defaults=[]),
                            body=body)], keywords=[])
        return ast.copy_location(ast.Expr(call), node)

    def _helper(self, name: str, args: list, keywords=()) -> ast.Call:
        return ast.Call(func=ast.Attribute(ast.Name(REC, ast.Load()), name, ast.Load()),
                        args=args, keywords=list(keywords))

    def _term(self, test: ast.expr, aid: str) -> ast.expr:
        # p and q: each part recorded, short-circuit kept (a later part may need an earlier one)
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            return ast.BoolOp(ast.And(), [self._term(v, aid) for v in test.values])
        if isinstance(test, ast.Compare) and all(
                isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in test.ops):
            ops = [type(op).__name__ for op in test.ops]
            return self._helper("cmp", [ast.Constant(aid), ast.List([test.left, *test.comparators],
                                                                   ast.Load()),
                                        ast.Constant(",".join(ops))])
        # (a < b).all()
        if (isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute)
                and test.func.attr == "all" and not test.args and not test.keywords
                and isinstance(test.func.value, ast.Compare) and len(test.func.value.ops) == 1
                and isinstance(test.func.value.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))):
            cmp = test.func.value
            return self._helper("cmp_all", [ast.Constant(aid), cmp.left, cmp.comparators[0],
                                            ast.Constant(type(cmp.ops[0]).__name__)])
        # torch.all(a < b) / np.all(a < b)
        if (isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute)
                and test.func.attr == "all" and len(test.args) == 1 and not test.keywords
                and isinstance(test.args[0], ast.Compare) and len(test.args[0].ops) == 1
                and isinstance(test.args[0].ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))):
            cmp = test.args[0]
            return self._helper("cmp_all", [ast.Constant(aid), cmp.left, cmp.comparators[0],
                                            ast.Constant(type(cmp.ops[0]).__name__)])
        # torch.allclose(a, b, ...) / np.allclose(a, b, ...)
        if (isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute)
                and test.func.attr == "allclose" and len(test.args) >= 2
                and isinstance(test.func.value, ast.Name)):
            return self._helper("allclose", [ast.Constant(aid), test.func, *test.args],
                                test.keywords)
        return self._helper("plain", [ast.Constant(aid), test])


def rewrite(src: str, cell: int) -> tuple[ast.Module, list[dict]]:
    src = strip_magics(src)
    tree = ast.parse(src)
    rw = _Rewriter(cell, src.splitlines())
    tree = ast.fix_missing_locations(rw.visit(tree))
    return tree, rw.found


# ------------------------------------------------------------------ the worker (one seed)

class _Recorder:
    """What the rewritten asserts call. One per worker; `results[id]` accumulates over every
    time the assert runs in this seed (loops): passed only if every run passed, margin the
    smallest."""

    def __init__(self):
        self.results: dict[str, dict] = {}
        self.margins: dict[str, list] = {}

    @staticmethod
    def _float(v):
        try:
            import numpy as np
            import torch
            if isinstance(v, torch.Tensor):
                return float(v.detach().double().item()) if v.numel() == 1 else None
            if isinstance(v, np.ndarray):
                return float(v.item()) if v.size == 1 else None
            if isinstance(v, bool):
                return None
            return float(v)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            return None

    def _note(self, aid: str, margin):
        if margin is not None and not math.isnan(margin):
            self.margins.setdefault(aid, []).append(margin)

    def __call__(self, aid: str, thunk):
        start = len(self.margins.get(aid, []))
        try:
            ok = bool(thunk())
            err = None
        except Exception as e:  # the assert's expression itself raised
            ok, err = False, f"{type(e).__name__}: {e}"[:300]
        ms = self.margins.get(aid, [])[start:]
        # one margin per execution: the smallest of its parts
        if ms:
            del self.margins[aid][start:]
        r = self.results.setdefault(aid, {"runs": 0, "failed": False, "margin": None,
                                          "error": None})
        r["runs"] += 1
        r["failed"] = r["failed"] or not ok
        if err and not r["error"]:
            r["error"] = err
        if ms:
            m = min(ms)
            r["margin"] = m if r["margin"] is None else min(r["margin"], m)

    def cmp(self, aid, operands, ops):
        ok = True
        for a, b, op in zip(operands, operands[1:], ops.split(",")):
            if op == "Lt":
                res, m = a < b, (b, a)
            elif op == "LtE":
                res, m = a <= b, (b, a)
            elif op == "Gt":
                res, m = a > b, (a, b)
            else:
                res, m = a >= b, (a, b)
            hi, lo = self._float(m[0]), self._float(m[1])
            self._note(aid, None if hi is None or lo is None else hi - lo)
            if not bool(res):
                ok = False
                break  # as Python does: later pairs are not evaluated
        return ok

    def cmp_all(self, aid, a, b, op):
        import torch
        ta, tb = torch.as_tensor(a).double(), torch.as_tensor(b).double()
        diff = (tb - ta) if op in ("Lt", "LtE") else (ta - tb)
        if diff.numel():
            self._note(aid, float(diff.min()))
        res = {"Lt": ta < tb, "LtE": ta <= tb, "Gt": ta > tb, "GtE": ta >= tb}[op]
        return bool(res.all())

    def allclose(self, aid, func, a, b, *args, **kw):
        import torch
        rtol = kw.get("rtol", args[0] if len(args) > 0 else 1e-5)
        atol = kw.get("atol", args[1] if len(args) > 1 else 1e-8)
        try:
            ta, tb = torch.as_tensor(a).double(), torch.as_tensor(b).double()
            slack = atol + rtol * tb.abs() - (ta - tb).abs()
            finite = torch.isfinite(slack)
            if finite.any():
                self._note(aid, float(slack[finite].min()))
        except Exception:
            pass
        return func(a, b, *args, **kw)

    def plain(self, aid, value):
        return value


def worker(nb: Path, cells: list[int], out: Path, sources: list[dict] | None = None) -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.show = lambda *a, **k: None
    try:  # no kernel: displays go nowhere; live widgets are skipped
        import IPython.display as ipd
        ipd.display = lambda *a, **k: None
    except ImportError:
        pass
    try:
        from softmaxbook import widgets
        widgets.Explorer.widget = lambda self, *a, **k: None
    except ImportError:
        pass

    rec = _Recorder()
    ns = {"__name__": "__main__", REC: rec, "display": lambda *a, **k: None}
    # read once by the parent (run_seeds): editing the notebook during a sweep changes nothing
    all_cells = sources if sources is not None else code_cells(nb)
    cell_report = {}
    sys.path.insert(0, str(nb.parent))
    os.chdir(nb.parent)
    for i in cells:
        t0 = time.perf_counter()
        err = None
        try:
            tree, _ = rewrite(all_cells[i]["source"], i)
            exec(compile(tree, f"<cell {i}>", "exec"), ns)
        except BaseException as e:  # noqa: BLE001 - a cell may raise anything, SystemExit too
            err = f"{type(e).__name__}: {e}"[:400]
        finally:
            plt.close("all")
        cell_report[i] = {"seconds": round(time.perf_counter() - t0, 3), "error": err}
    out.write_text(json.dumps({"cells": cell_report, "asserts": rec.results}))


# ------------------------------------------------------------------ the driver

def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def summarise(asserts: list[dict], runs: list[dict]) -> list[dict]:
    rows = []
    for a in asserts:
        seeds, fails, margins, errors, by_seed = [], [], [], {}, []
        for r in runs:
            res = r.get("asserts", {}).get(a["id"])
            if res is None:
                continue
            seeds.append(r["seed"])
            if res["failed"]:
                fails.append(r["seed"])
            if res["error"]:
                errors.setdefault(res["error"], []).append(r["seed"])
            if res["margin"] is not None:
                margins.append(res["margin"])
                by_seed.append([r["seed"], res["margin"]])
        row = dict(a, seeds_run=len(seeds), failures=len(fails), failed_seeds=fails[:50],
                   errors={k: v[:10] for k, v in errors.items()}, min_margin=None,
                   mean=None, sd=None, z=None, normal_rate=None,
                   upper95=(3.0 / len(seeds) if seeds and not fails else None),
                   same_every_seed=False)
        if seeds and fails:
            row["empirical_rate"] = len(fails) / len(seeds)
        if margins:
            n = len(margins)
            mean = sum(margins) / n
            sd = math.sqrt(sum((m - mean) ** 2 for m in margins) / (n - 1)) if n > 1 else 0.0
            row.update(min_margin=min(margins), mean=mean, sd=sd)
            if sd > 0:
                row["z"] = mean / sd
                row["normal_rate"] = _phi(-mean / sd)
            # identical up to rounding (4 ulp): the margin does not depend on the seed at all
            spread = max(margins) - min(margins)
            scale = max(abs(min(margins)), abs(max(margins)))
            row["same_every_seed"] = (n == len(seeds) > 1 and not fails
                                      and spread <= 4 * 2.2e-16 * scale)
        # every seed's margin, [seed, margin]: a skewed statistic (a ratio, a gap) is judged on
        # another scale than the normal fit's (its log, say), which needs the values themselves
        row["margins"] = by_seed
        rows.append(row)
    return rows


def _fmt(v, spec=".3g"):
    return "-" if v is None else format(v, spec)


def report(rows: list[dict], cells: dict, nb: Path, seeds: list[int], wall: float) -> str:
    out = [f"sweep of {nb.stem}: {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}), "
           f"{len(rows)} asserts, {wall:.0f} s", ""]
    out.append(f"{'assert':>8} {'seeds':>5} {'fail':>4} {'min margin':>11} {'mean':>10} "
               f"{'sd':>9} {'z':>6} {'normal':>8} {'<=95%':>7}  text")
    for r in rows:
        flag = "  SAME EVERY SEED" if r["same_every_seed"] else ""
        out.append(f"{r['id']:>8} {r['seeds_run']:>5} {r['failures']:>4} "
                   f"{_fmt(r['min_margin']):>11} {_fmt(r['mean']):>10} {_fmt(r['sd']):>9} "
                   f"{('>99' if r['z'] and r['z'] > 99 else _fmt(r['z'], '.1f')):>6} {_fmt(r['normal_rate'], '.1e'):>8} "
                   f"{_fmt(r['upper95'], '.0e'):>7}  {r['text'][:70]}{flag}")
        if r["failures"]:
            out.append(f"{'':>8} failed under seeds {r['failed_seeds'][:20]}")
        for e, s in r["errors"].items():
            out.append(f"{'':>8} raised {e[:90]} (seeds {s[:5]})")
    bad = {i: c for i, c in cells.items() if c["errors"]}
    for i, c in bad.items():
        for e, s in c["errors"].items():
            out.append(f"cell {i} raised under {len(s)} seeds {s[:10]}: {e[:150]}")
    missing = [r for r in rows if r["seeds_run"] == 0]
    if missing:
        out.append(f"{len(missing)} asserts never ran (a cell stopped before them, or a function "
                   f"holding them was never called): {', '.join(r['id'] for r in missing)}")
    stat = [r for r in rows if r["z"] is not None and not r["same_every_seed"]]
    if stat:
        worst = max(stat, key=lambda r: r["normal_rate"])
        out.append(f"\n{len(stat)} asserts with a seed-dependent margin; the largest "
                   f"normal-fit rate is {worst['normal_rate']:.1e} ({worst['id']}).")
    return "\n".join(out)


def _preload() -> None:
    """Import what every chapter imports, once, before forking: each seed's process then starts
    in milliseconds instead of re-importing torch (~2 s). No torch operation runs here, so no
    thread pool exists yet when the children are forked."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy  # noqa: F401
    plt.close(plt.figure())  # the font manager loads once, here, not in every seed's process
    import torch  # noqa: F401
    try:
        import softmaxbook  # noqa: F401
        from softmaxbook import plotting, seeding, widgets  # noqa: F401
    except ImportError:
        pass


def _child(nb: Path, cells: list[int], seed: int, out: Path, log: Path, threads: int,
           sources: list[dict]) -> None:
    """The forked process of one seed: its own output file, its own seed, then the cells.
    Whatever happens, it ends here with os._exit: a forked child that returned would go on
    running the parent's scheduling loop and run seeds twice."""
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.environ.update(SOFTMAXBOOK_SEED=str(seed), OMP_NUM_THREADS=str(threads),
                          MKL_NUM_THREADS=str(threads))
        import torch
        torch.set_num_threads(threads)
        worker(nb, cells, out, sources)
        code = 0
    except BaseException:  # noqa: BLE001 - reported through the log
        try:
            import traceback
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run_seeds(nb: Path, cells: list[int], seeds: list[int], *, jobs: int, threads: int,
              timeout: float, tmp: Path, progress=None, journal: Path | None = None,
              done: dict | None = None) -> list[dict]:
    """One forked process per seed, at most `jobs` at a time; a seed running longer than
    `timeout` seconds is killed and reported. Each finished seed is appended to `journal`
    (JSON lines) at once, so a stopped sweep keeps what it ran; seeds in `done` are not rerun."""
    import signal
    _preload()
    sources = code_cells(nb)
    done = dict(done or {})
    pending, running, results = [s for s in seeds if s not in done], {}, dict(done)
    while pending or running:
        while pending and len(running) < jobs:
            seed = pending.pop(0)
            out, log = tmp / f"seed-{seed}.json", tmp / f"seed-{seed}.log"
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(nb, cells, seed, out, log, threads, sources)
            running[pid] = (seed, time.time(), out, log)
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.02)
            now = time.time()
            for p, (seed, t0, _, _) in list(running.items()):
                if now - t0 > timeout:
                    os.kill(p, signal.SIGKILL)
                    results[seed] = {"crash": f"more than {timeout:.0f} s: killed"}
            continue
        seed, t0, out, log = running.pop(pid)
        result = {"seed": seed, "seconds": round(time.time() - t0, 2)}
        if out.exists():
            result.update(json.loads(out.read_text()))
        else:
            tail = log.read_text(errors="replace")[-400:] if log.exists() else ""
            result.update(cells={}, asserts={}, crash=results.get(seed, {}).get(
                "crash", f"exit status {status}: {tail}"))
        for f in (out, log):
            if f.exists():
                f.unlink()
        results[seed] = result
        if journal is not None:
            with open(journal, "a") as f:
                f.write(json.dumps(result) + "\n")
        if progress:
            progress(len([r for r in results.values() if "seed" in r]), len(seeds))
    return [results[s] for s in seeds]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="book.py sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chapter", help="2, 02_choice, or a notebook path")
    ap.add_argument("--seeds", type=int, default=300, help="how many seeds (300)")
    ap.add_argument("--start", type=int, default=10_000, help="first seed (10000)")
    ap.add_argument("--cells", help="code cells to run, e.g. 0,3-5 (default: all; see --list)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="seeds run at once (2)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per seed (1)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per seed (600)")
    ap.add_argument("--json", help="where to write the JSON report")
    ap.add_argument("--list", action="store_true", help="list the code cells and their asserts")
    ap.add_argument("--resume", action="store_true",
                    help="keep the seeds a stopped sweep with the same report path finished")
    args = ap.parse_args(argv)

    for name in ("seeds", "jobs", "threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"sweep: argument '--{name}' must be >= 1, got "
                             f"{getattr(args, name)}")
    if args.start < 0:
        raise SystemExit(f"sweep: argument '--start' must be >= 0, got {args.start}")
    if not args.timeout > 0:  # also NaN; a zero limit would kill every seed at once
        raise SystemExit(f"sweep: argument '--timeout' must be a positive number of seconds, "
                         f"got {args.timeout}")
    nb = resolve_chapter(args.chapter)
    cells_src = code_cells(nb)
    chosen = parse_cells(args.cells, len(cells_src))
    asserts = []
    for i in chosen:
        try:
            _, found = rewrite(cells_src[i]["source"], i)
        except SyntaxError as e:
            raise SystemExit(f"sweep: code cell {i} of {nb.name} is not Python: {e}")
        asserts.extend(found)

    if args.list:
        for i, c in enumerate(cells_src):
            first = next((ln for ln in c["source"].splitlines() if ln.strip()), "")
            mark = "*" if i in chosen else " "
            tags = f" [{','.join(c['tags'])}]" if c["tags"] else ""
            print(f"{mark}{i:3d}{tags} {first[:80]}")
            for a in (x for x in asserts if x["cell"] == i):
                print(f"       assert {a['id']}: {a['text'][:90]}")
        return 0

    seeds = list(range(args.start, args.start + args.seeds))
    import shutil
    import tempfile
    target = Path(args.json) if args.json else (
        ROOT / "_build" / "sweep" / f"{nb.stem}-s{args.start}-n{args.seeds}.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    # every finished seed goes to the journal at once; --resume reruns only the missing seeds
    journal = target.with_suffix(".partial.jsonl")
    done = {}
    if args.resume and journal.exists():
        for line in journal.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:  # a line cut short when the sweep was stopped
                continue
            if r.get("seed") in seeds and "crash" not in r:
                done[r["seed"]] = r
        print(f"  resuming: {len(done)} seeds already in {journal}", file=sys.stderr)
    elif journal.exists():
        journal.unlink()
    # private scratch space (a shared folder could be cleaned by someone else mid-sweep)
    tmp = Path(tempfile.mkdtemp(prefix="sweep-"))
    t0 = time.time()

    def progress(done, total):
        if done == total or done % max(1, total // 10) == 0:
            print(f"  {done}/{total} seeds, {time.time() - t0:.0f} s", file=sys.stderr,
                  flush=True)

    runs = run_seeds(nb, chosen, seeds, jobs=args.jobs, threads=args.threads,
                     timeout=args.timeout, tmp=tmp, progress=progress, journal=journal,
                     done=done)
    shutil.rmtree(tmp, ignore_errors=True)
    wall = time.time() - t0

    cells: dict[int, dict] = {}
    for r in runs:
        for i, c in r.get("cells", {}).items():
            e = cells.setdefault(int(i), {"seconds": [], "errors": {}})
            e["seconds"].append(c["seconds"])
            if c["error"]:
                e["errors"].setdefault(c["error"], []).append(r["seed"])
    crashes = {r["seed"]: r["crash"] for r in runs if "crash" in r}
    rows = summarise(asserts, runs)
    text = report(rows, cells, nb, seeds, wall)
    if crashes:
        text += f"\n{len(crashes)} seeds crashed or timed out: " + "; ".join(
            f"{s}: {m[:120]}" for s, m in list(crashes.items())[:5])
    print(text)
    target.write_text(json.dumps({
        "notebook": str(nb), "seeds": seeds, "cells": chosen, "wall_seconds": wall,
        "asserts": rows, "cell_errors": {i: c["errors"] for i, c in cells.items()},
        "cell_seconds_median": {i: sorted(c["seconds"])[len(c["seconds"]) // 2]
                                for i, c in cells.items()},
        "crashes": crashes}, indent=1))
    journal.unlink(missing_ok=True)
    print(f"\nJSON: {target}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
