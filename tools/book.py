#!/usr/bin/env python3
"""The book's commands. Needs only Python 3.10+; everything else is installed into .venv/.

    python3 tools/book.py build            # strict build of the HTML book -> _build/html
    python3 tools/book.py test             # every test: package, notebooks, exercises, browser
    python3 tools/book.py test-seeds       # every chapter executed again under other seeds
    python3 tools/book.py student [CH ...]   # student notebooks (solutions stubbed) -> work/ (edited ones kept)
    python3 tools/book.py answer-key [CH ...]  # exercises with their solutions -> _build/answer-key
    python3 tools/book.py reader-notebooks  # the notebooks behind the download/Binder/Colab buttons -> _build/reader-notebooks
    python3 tools/book.py build-nosolutions [CH ...]  # the site without solutions -> _build/nosolutions/html
    python3 tools/book.py exercise-index   # book/exercise_index.md (every build writes it first)
    python3 tools/book.py pdf [CH ...] [--no-solutions]  # the book as a PDF (Chromium prints the single-page
                                           # HTML: contents, bookmarks) -> _build/book[-CH][-nosolutions].pdf
    python3 tools/book.py grade SUBMISSIONS/ [-j N]  # each notebook in a sandbox, checked outside it -> _build/grades
    python3 tools/book.py serve            # serve _build/html on http://127.0.0.1:8000
    python3 tools/book.py lab [--authors]  # the student notebooks (work/) in JupyterLab; --authors: book/
    python3 tools/book.py build-chapter book/01_softmax.ipynb   # one chapter alone, strictly
    python3 tools/book.py clean [NB ...]   # strip outputs/metadata (default: book/*.ipynb) before committing
    python3 tools/book.py setup            # (re)create .venv when requirements changed
    python3 tools/book.py sweep CH [--seeds N] [--start S] [--cells LIST]  # assert false-alarm rates
    python3 tools/book.py bench [NAME ...] [--quick]  # benchmarks vs their peers -> _build/bench/*.json

The build and test commands run `setup` first, so on a fresh clone each is one command.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".installed-requirements"
BUILD = ROOT / "_build"
STRICT = ["-W", "-n", "--keep-going"]


def say(msg: str) -> None:
    print(f"\n==> {msg}", flush=True)


def run(cmd: list, **kw) -> None:
    print("$ " + " ".join(str(c) for c in cmd), flush=True)
    result = subprocess.run([str(c) for c in cmd], cwd=ROOT, **kw)
    if result.returncode != 0:
        sys.exit(result.returncode)


def _requirements_hash() -> str:
    h = hashlib.sha256()
    for name in ("requirements.txt", "code/pyproject.toml"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def setup(_args=None) -> None:
    """Create .venv and install requirements.txt into it, unless it is up to date."""
    wanted = _requirements_hash()
    if PY.exists() and STAMP.exists() and STAMP.read_text().strip() == wanted:
        return
    t0 = time.time()
    if not PY.exists():
        say(f"creating the virtual environment {VENV}")
        run([sys.executable, "-m", "venv", VENV])
    say("installing requirements.txt (torch is pinned to the CPU build 2.13.0)")
    run([PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    run([PY, "-m", "pip", "install", "--quiet", "-r", "requirements.txt"])
    STAMP.write_text(wanted + "\n")
    say(f"set-up done in {time.time() - t0:.0f} s")


#: Set for every execution that fills a build's cache: the explorers then draw their frames
#: (softmaxbook.widgets.FRAMES_ENV; jupyter-cache keys on the code, not on the environment).
FRAMES = {"SOFTMAXBOOK_EXPLORER_FRAMES": "1"}


def _jupyter_book(*extra, source: Path | str = ".") -> None:
    env = dict(os.environ, PYTHONWARNINGS="ignore::DeprecationWarning", **FRAMES)
    run([BIN / "jupyter-book", "build", *STRICT, *extra, source], env=env)


def _derived_config(path: Path, *, cache: Path | None = None, hide_solutions: bool = False) -> Path:
    """Write a copy of _config.yml to ``path`` with local paths made absolute and options changed.

    Jupyter Book resolves ``local_extensions`` relative to the config file, so a config written
    elsewhere must name the extension folder absolutely.
    """
    text = (ROOT / "_config.yml").read_text()
    text = text.replace(": book/_ext", f": {ROOT / 'book' / '_ext'}")
    if cache is not None:
        # Its own execution cache, so that two builds never share one database.
        text = text.replace("cache: .jupyter_cache", f"cache: {cache}", 1)
    if hide_solutions:
        marker = "  config:\n"
        if marker not in text:
            sys.exit("_config.yml has no 'sphinx: config:' section")
        text = text.replace(marker, marker + "    book_hide_solutions: true\n", 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


#: The instructors' exercise index, generated from the chapter notebooks before every build
#: (softmaxbook.exercises.index); not committed.
EXERCISE_INDEX = ROOT / "book" / "exercise_index.md"


def exercise_index(_args=None) -> None:
    """Write book/exercise_index.md: every exercise of the chapters in _toc.yml."""
    setup()
    run([PY, "-m", "softmaxbook.exercises.index", ROOT, EXERCISE_INDEX])


def build(_args=None) -> list[str]:
    """Strict build: any warning, broken reference or failing cell fails it."""
    setup()
    exercise_index()
    t0 = time.time()
    say("building the book (notebooks executed; results cached in .jupyter_cache)")
    executed = _prefill_cache()
    _jupyter_book()
    say(f"built in {time.time() - t0:.0f} s. Open {BUILD / 'html' / 'index.html'}")
    return executed


def _chapter_notebooks() -> list[Path]:
    """The notebooks the build executes: every .ipynb the toc names."""
    import re

    toc = (ROOT / "_toc.yml").read_text()
    names = re.findall(r"file:\s*(\S+)", toc) + re.findall(r"root:\s*(\S+)", toc)
    return [ROOT / (n + ".ipynb") for n in names if (ROOT / (n + ".ipynb")).is_file()]


def _prefill_cache() -> list[str]:
    """Execute the notebooks missing from the build's cache two at a time (tools/prefill_cache.py)
    so that the build, which runs them one after another, finds them all cached. Returns the
    notebooks (paths relative to the root) executed and cached just now."""
    import json

    notebooks = _chapter_notebooks()
    env = dict(os.environ, PYTHONWARNINGS="ignore::DeprecationWarning", **FRAMES)
    cmd = [PY, ROOT / "tools" / "prefill_cache.py", ROOT / ".jupyter_cache", *notebooks]
    print("$ " + " ".join(str(c) for c in cmd), flush=True)
    proc = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          text=True)
    if proc.returncode != 0:
        say("prefilling the cache failed; the build executes the notebooks itself")
        return []
    return json.loads(proc.stdout.strip().splitlines()[-1])["executed"]


def _assignment_source(chapters: list, target: Path) -> Path:
    """A source tree at ``target`` for a site of the selected chapters only: the book's pages,
    the toc unchanged (so chapters and exercises keep their numbers), and in place of every
    chapter not selected a one-line page with its title (so links to it still resolve).
    Runs under the venv's Python (it needs nbformat, PyYAML and the package)."""
    import nbformat
    import yaml

    from softmaxbook.exercises.index import _title
    from softmaxbook.exercises.student import select_chapters

    try:
        selected = {p.stem for p in select_chapters(ROOT / "book", chapters)}
    except ValueError as err:
        sys.exit(str(err))
    if target.exists():
        shutil.rmtree(target)
    (target / "book").mkdir(parents=True)
    for item in (ROOT / "book").iterdir():
        if item.name == "_ext" or item.name.startswith("."):
            continue
        if item.is_dir():
            shutil.copytree(item, target / "book" / item.name)
        elif item.suffix != ".ipynb" or item.stem in selected:
            shutil.copy2(item, target / "book" / item.name)
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    for part in toc.get("parts", []):
        for entry in part.get("chapters", []):
            nb_path = ROOT / (entry["file"] + ".ipynb")
            if nb_path.is_file() and nb_path.stem not in selected:
                title = _title(nbformat.read(nb_path, as_version=4), nb_path.stem)
                (target / (entry["file"] + ".md")).write_text(
                    f"# {title}\n\nThis chapter is not part of this assignment.\n")
    (target / "_toc.yml").write_text((ROOT / "_toc.yml").read_text())
    return target


def build_nosolutions(args=None) -> None:
    """The same site with every solution removed (book/_ext/solution_free.py); with chapters
    given, a site of those chapters only (the others are one-line pages, numbers unchanged)."""
    setup()
    chapters = list(getattr(args, "chapters", None) or [])
    target = BUILD / "nosolutions"
    if not chapters:
        exercise_index()
        config = _derived_config(BUILD / "nosolutions-config.yml", hide_solutions=True)
        _jupyter_book("--config", config, "--path-output", target)
        say(f"solution-free site: {target / '_build' / 'html' / 'index.html'}")
        return
    src = BUILD / "assignment-src"
    run([PY, Path(__file__).resolve(), "_assignment-source", src, *chapters])
    run([PY, "-m", "softmaxbook.exercises.index", src, src / "book" / "exercise_index.md"])
    config = _derived_config(src / "_config.yml", cache=BUILD / "assignment-cache",
                             hide_solutions=True)
    target = BUILD / "nosolutions-assignment"
    _jupyter_book("--config", config, "--toc", src / "_toc.yml", "--path-output", target,
                  source=src)
    say(f"solution-free site of {', '.join(chapters)}: "
        f"{target / '_build' / 'html' / 'index.html'}")


def build_chapter(args) -> None:
    """Strict build of one chapter on its own (for authors): a toc with just that page."""
    setup()
    page = Path(args.notebook)
    if page.suffix != ".ipynb" or not (ROOT / page).is_file():
        sys.exit(f"build-chapter: argument 'notebook' must be a notebook in book/, got {page}")
    name = page.stem
    target = BUILD / f"chapter-{name}"
    target.mkdir(parents=True, exist_ok=True)
    toc = target / "_toc.yml"
    toc.write_text(f"format: jb-book\nroot: {page.with_suffix('').as_posix()}\n")
    config = _derived_config(target / "_config.yml", cache=target / ".jupyter_cache")
    print("note: references to other chapters ({doc}`01_softmax`, ...) warn in this mode; the full "
          "build resolves them.")
    _jupyter_book("--toc", toc, "--config", config, "--path-output", target)
    say(f"chapter built: {target / '_build' / 'html' / page.with_suffix('.html')}")


WORK = ROOT / "work"  # the student notebooks: outside _build/, ignored by git, never wiped


def _beside(dest: Path, pristine: Path) -> Path:
    """Where the new version of an edited notebook goes: ``NN_x (new).ipynb``, unless that copy
    was edited too (it differs from what this command wrote there), then ``(new 2)``, ... A
    student may well work in the copy the command pointed them to; it is never overwritten."""
    import filecmp

    k = 1
    while True:
        name = f"{dest.stem} (new).ipynb" if k == 1 else f"{dest.stem} (new {k}).ipynb"
        beside, last = dest.with_name(name), pristine / name
        if not beside.exists() or (last.exists() and filecmp.cmp(beside, last, shallow=False)):
            return beside
        k += 1


def student(args=None) -> None:
    """Student notebooks (solutions replaced by stubs, outputs empty) in work/ (all chapters, or
    the chapters given: an assignment). A notebook there that was edited is never overwritten: the
    new version goes beside it, and the command says so. Glued numbers come from the build's cache
    when there is one (nothing is executed)."""
    import filecmp
    import tempfile

    setup()
    target = Path(getattr(args, "out", None) or WORK).resolve()
    chapters = list(getattr(args, "chapters", None) or [])
    target.mkdir(parents=True, exist_ok=True)
    pristine = target / ".pristine"  # what this command last wrote: unedited if still equal
    pristine.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="student-", dir=target) as tmp:
        fresh = Path(tmp)
        proc = subprocess.run([str(c) for c in [PY, "-m", "softmaxbook.exercises.student",
                                                ROOT / "book", fresh, *chapters, "--glue",
                                                "cache"]], cwd=ROOT, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            sys.exit(proc.returncode)
        kept, written = [], []
        for nb in sorted(fresh.glob("*.ipynb")):
            dest, last = target / nb.name, pristine / nb.name
            edited = dest.exists() and not (last.exists() and filecmp.cmp(dest, last,
                                                                          shallow=False))
            if edited and filecmp.cmp(dest, nb, shallow=False):
                edited = False
            if edited:
                beside = _beside(dest, pristine)
                shutil.copyfile(nb, beside)
                shutil.copyfile(nb, pristine / beside.name)
                kept.append((dest, beside))
            else:
                shutil.copyfile(nb, dest)
                written.append(dest)
            shutil.copyfile(nb, last)
    say(f"student notebooks in {target} ({len(written)} written)")
    for dest, beside in kept:
        print(f"  {dest.name}: you have edited it, so it was left as it is; the new version is "
              f"beside it: {beside.name}")
    if not (ROOT / ".jupyter_cache").is_dir():
        print("  (no build cache: numbers the book computes are shown when you run the notebook;"
              " `python3 tools/book.py build` first puts them in the text)")


def answer_key(args=None) -> None:
    """Answer keys: every exercise with its solution, one notebook per chapter."""
    setup()
    target = BUILD / "answer-key"
    if target.exists():
        shutil.rmtree(target)
    chapters = list(getattr(args, "chapters", None) or [])
    run([PY, "-m", "softmaxbook.exercises.student", ROOT / "book", target, *chapters,
         "--answer-key"])
    say(f"answer keys in {target}")


#: What the reader-notebooks branch holds besides the notebooks: Binder (repo2docker) reads
#: binder/requirements.txt. The CPU build of torch: PyPI's Linux wheel is the multi-GB CUDA one.
BINDER_REQUIREMENTS = """\
# Binder installs this file. The CPU build of torch (PyPI's Linux wheel of torch is the CUDA one).
--extra-index-url https://download.pytorch.org/whl/cpu
torch==2.13.0
./code[book]
"""


def reader_notebooks(args=None) -> None:
    """The tree of the ``reader-notebooks`` branch, which the Binder and Colab buttons open:
    every chapter's reader's notebook in book/ (solutions folded, numbers filled in from the
    build's cache: run `build` first), the package in code/, and binder/requirements.txt.
    The publishing workflow pushes it; nothing is committed to main."""
    setup()
    target = Path(getattr(args, "out", None) or BUILD / "reader-notebooks").resolve()
    if not (ROOT / ".jupyter_cache").is_dir():
        sys.exit("reader-notebooks: no build cache (.jupyter_cache); run `python3 tools/book.py "
                 "build` first, so that the notebooks carry the book's numbers")
    marker = target / ".reader-notebooks"  # this command wrote the folder: safe to replace
    if target.exists() and any(target.iterdir()) and not marker.exists():
        sys.exit(f"reader-notebooks: argument '--out' names {target}, which holds files this "
                 "command did not write; give an empty or new folder")
    if target.exists():
        shutil.rmtree(target)
    (target / "binder").mkdir(parents=True)
    marker.write_text("written by tools/book.py reader-notebooks\n")
    run([PY, "-m", "softmaxbook.exercises.reader", ROOT / "book", target / "book",
         "--glue", "cache"])
    shutil.copytree(ROOT / "code", target / "code", ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "*.pyc"))
    (target / "binder" / "requirements.txt").write_text(BINDER_REQUIREMENTS)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    (target / "README.md").write_text(
        "# The Softmax and Its Tricks: the reader's notebooks\n\n"
        f"Generated from commit {commit} of the main branch by `python3 tools/book.py "
        "reader-notebooks`; do not edit here. Each chapter in book/ with its numbers filled "
        "in and its solutions folded; the site's Binder and Colab buttons open them. On Colab "
        "the first code cell installs the book's package.\n")
    say(f"reader's notebooks in {target / 'book'} (the reader-notebooks branch's tree: {target})")


def grade(args) -> None:
    """Grade submitted student notebooks (softmaxbook.exercises.grade): each runs in a
    bubblewrap sandbox, every verdict is decided outside it; gradebook and feedback."""
    setup()
    subs = Path(args.submissions).resolve()
    if not subs.is_dir():
        sys.exit(f"grade: argument 'submissions' must be a folder, got {args.submissions}")
    out = Path(args.out).resolve() if args.out else BUILD / "grades"
    extra = ["-j", args.jobs]
    if args.chapters:
        extra += ["--chapters", *args.chapters]
    if args.points:
        extra += ["--points", *args.points]
    extra += ["--fresh"] if args.fresh else []
    extra += ["--unsafe"] if args.unsafe else []
    run([PY, "-m", "softmaxbook.exercises.grade", subs, "--book", ROOT / "book", "--toc", ROOT,
         "--out", out, "--cell-timeout", args.cell_timeout, "--check-timeout",
         args.check_timeout, "--notebook-timeout", args.notebook_timeout, *extra])
    say(f"gradebook: {out / 'gradebook.csv'}; feedback per student: {out / 'feedback'}")


def _pdf_config(path: Path, *, cache: Path | None = None, hide_solutions: bool = False) -> Path:
    """The config of the PDF's single-page build: the book's, plus tools/pdf/singlehtml_nodes.py
    (without it Sphinx's singlehtml builder knows none of myst-nb's nodes: see that file)."""
    config = _derived_config(path, cache=cache, hide_solutions=hide_solutions)
    text = config.read_text()
    marker = "  local_extensions:\n"
    if marker not in text:
        sys.exit("_config.yml has no 'sphinx: local_extensions:' section")
    config.write_text(text.replace(
        marker, marker + f"    singlehtml_nodes: {ROOT / 'tools' / 'pdf'}\n", 1))
    return config


def pdf(args=None) -> None:
    """A PDF of the book (or of the chapters given; with --no-solutions, the students' handout,
    built like `build-nosolutions`): Sphinx's single-page HTML build, printed by Chromium through
    Playwright (tools/pdf/printer.py: print CSS, a contents list with page numbers, bookmarks)
    -> _build/book[-CHAPTERS][-nosolutions].pdf."""
    setup()
    chapters = list(getattr(args, "chapters", None) or [])
    hide = bool(getattr(args, "no_solutions", False))
    suffix = "-nosolutions" if hide else ""
    t0 = time.time()
    if chapters:
        src = BUILD / ("pdf-src" + suffix)
        run([PY, Path(__file__).resolve(), "_assignment-source", src, *chapters])
        run([PY, "-m", "softmaxbook.exercises.index", src, src / "book" / "exercise_index.md"])
        # its own execution cache (two PDFs may be made at once), a copy of the book's: the
        # chapters are not executed again (jupyter-cache matches notebooks by content)
        cache = BUILD / ("pdf-cache" + suffix)
        if (ROOT / ".jupyter_cache").is_dir():
            shutil.copytree(ROOT / ".jupyter_cache", cache, dirs_exist_ok=True)
        config = _pdf_config(src / "_config.yml", cache=cache, hide_solutions=hide)
        out = BUILD / ("pdf-assignment" + suffix)
        _jupyter_book("--builder", "singlehtml", "--config", config, "--toc", src / "_toc.yml",
                      "--path-output", out, source=src)
        html = out / "_build" / "singlehtml" / "index.html"
        name = "book-" + "-".join(chapters).replace("/", "_")
    else:
        exercise_index()
        say("building the single-page HTML (notebooks from the build's cache)")
        config = _pdf_config(BUILD / f"pdf{suffix}-config.yml", hide_solutions=hide)
        out = BUILD / ("pdf" + suffix)
        _jupyter_book("--builder", "singlehtml", "--config", config, "--path-output", out)
        html = out / "_build" / "singlehtml" / "index.html"
        name = "book"
    target = BUILD / f"{name}{suffix}.pdf"
    run([PY, Path(__file__).resolve(), "_print-pdf", html, target, *(["--handout"] if hide else [])])
    say(f"PDF written in {time.time() - t0:.0f} s: {target}")


def print_pdf(html: Path, target: Path, chromium: str | None = None, handout: bool = False) -> int:
    """Print the page ``html`` to ``target`` as a book (tools/pdf/printer.py: A4, print CSS, title
    page, contents with page numbers, bookmarks, page numbers in the footer) after MathJax has
    finished; ``handout``: the students' copy (a solution-free build). Returns the number of
    pages. Runs under the venv's Python."""
    sys.path.insert(0, str(ROOT / "tools" / "pdf"))
    import printer

    return printer.print_book(html, target, handout=handout, chromium=chromium)["pages"]


def test(args=None) -> None:
    """Every test. The browser tests need the built site, so the strict build runs first."""
    setup()
    fresh = set(build())
    t0 = time.time()
    # A chapter the build has just executed (with the package as it is now, under the default
    # seed, every cell's failure failing the build) needs no second execution by nbval; one the
    # build took from its cache (executed with an older package, perhaps) does.
    chapters = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "book").glob("*.ipynb"))]
    again = [c for c in chapters if c not in fresh]
    if len(again) < len(chapters):
        say(f"{len(chapters) - len(again)} chapters were executed by the build just now; nbval "
            f"executes the other {len(again)}")
    say("running the tests (package, exercises, notebooks via nbval, student notebooks, browser)")
    extra = list(getattr(args, "pytest_args", None) or [])
    run([PY, "-m", "pytest", "-n", "2", "--dist", "loadfile", "--nbval-lax", "-p", "no:cacheprovider",
         "tests", *again, "tools/chapter_template.ipynb", *extra])
    say(f"tests passed in {time.time() - t0:.0f} s")


#: The further seeds under which `test-seeds` executes every chapter (each chapter's default seed
#: is the one `test` and the build use). Fixed, so that a failure can be reproduced.
EXTRA_SEEDS = (101, 202)


def test_seeds(args=None) -> None:
    """Execute every chapter notebook again under each of EXTRA_SEEDS (SOFTMAXBOOK_SEED set):
    every claim the book asserts must hold beyond the seed the chapter happens to use."""
    setup()
    seeds = list(getattr(args, "seeds", None) or EXTRA_SEEDS)
    extra = list(getattr(args, "pytest_args", None) or [])
    notebooks = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "book").glob("*.ipynb"))
    for seed in seeds:
        t0 = time.time()
        say(f"executing {len(notebooks)} chapters with SOFTMAXBOOK_SEED={seed}")
        env = dict(os.environ, SOFTMAXBOOK_SEED=str(seed))
        run([PY, "-m", "pytest", "-n", "2", "--dist", "loadfile", "--nbval-lax", "-p",
             "no:cacheprovider", "-q", *notebooks, *extra], env=env)
        say(f"seed {seed}: every chapter passed in {time.time() - t0:.0f} s")


def serve(args) -> None:
    site = BUILD / "html"
    if not (site / "index.html").exists():
        build()
    say(f"serving {site} on http://127.0.0.1:{args.port} (Ctrl-C to stop)")
    run([sys.executable, "-m", "http.server", str(args.port), "--bind", "127.0.0.1",
         "--directory", site])


def clean(args=None) -> None:
    """Strip outputs, execution counts and non-essential metadata from notebooks in place."""
    setup()
    code = """
import sys, nbformat
for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in ("kernelspec", "language_info")}
    for cell in nb.cells:
        # tags (remove-input, solution, ...) and mystnb (a figure's caption, name and alt text)
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in ("tags", "mystnb")}
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, path)
    print("cleaned", path)
"""
    paths = list(getattr(args, "notebooks", None) or [])
    paths = paths or sorted(str(p) for p in (ROOT / "book").glob("*.ipynb"))
    run([PY, "-c", code, *paths])


def sweep(args) -> None:
    """Run a chapter's code cells once per seed and report every assert's failures and margins
    (tools/sweep.py does the work, inside .venv)."""
    setup()
    run([PY, ROOT / "tools" / "sweep.py", *args.sweep_args])


def bench(args=None) -> None:
    """Run the benchmark scripts (benchmarks/bench_*.py; NAME: e.g. softmax) one after another,
    each writing _build/bench/<script>.json, then print their one-line summaries together with
    the machine's load before and after (timings on a busy machine are not worth quoting)."""
    setup()
    names = list(getattr(args, "names", None) or [])
    scripts = sorted((ROOT / "benchmarks").glob("bench_*.py"))
    known = {p.stem.removeprefix("bench_"): p for p in scripts}
    unknown = [n for n in names if n.removeprefix("bench_") not in known]
    if unknown:
        sys.exit(f"bench: no benchmark named {', '.join(unknown)} (there are: "
                 f"{', '.join(known)})")
    chosen = [known[n.removeprefix("bench_")] for n in names] or scripts
    out = BUILD / "bench"
    out.mkdir(parents=True, exist_ok=True)
    extra = ["--quick"] if getattr(args, "quick", False) else []
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for script in chosen:
        say(f"{script.name}{' --quick' if extra else ''}")
        run([PY, script, *extra, "--json", out / f"{script.stem}.json"])
    say("summaries (one line each; the JSON files hold every row):")
    import json
    for script in chosen:
        data = json.loads((out / f"{script.stem}.json").read_text())
        print(f"  {data['benchmark']}: {data['summary']}")
    if load0 is not None:
        print(f"  load average (1 min) before: {load0:.1f}, after: {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")


def lab(args=None) -> None:
    """JupyterLab on the student notebooks in work/ (written first if missing); the authors'
    notebooks in book/ (solutions visible) only with --authors. Works as root."""
    setup()
    if getattr(args, "authors", False):
        folder = ROOT / "book"
    else:
        folder = WORK
        if not list(folder.glob("*.ipynb")):
            student(argparse.Namespace(chapters=[], out=None))
    cmd = [BIN / "jupyter", "lab", folder]
    if os.name != "nt" and os.geteuid() == 0:
        cmd.append("--allow-root")  # Jupyter refuses root without it
    run(cmd + list(getattr(args, "lab_args", None) or []))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup", help="create/update .venv").set_defaults(func=setup)
    sub.add_parser("build", help="strict build of the HTML book").set_defaults(func=build)
    p = sub.add_parser("test", help="run every test (builds the book first)")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="extra arguments for pytest")
    p.set_defaults(func=test)
    p = sub.add_parser("test-seeds", help="execute every chapter under further seeds")
    p.add_argument("--seeds", type=int, nargs="+", help=f"seeds to use (default: {EXTRA_SEEDS})")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="extra arguments for pytest")
    p.set_defaults(func=test_seeds)
    p = sub.add_parser("bench", help="run the benchmarks against their peers -> _build/bench")
    p.add_argument("names", nargs="*", help="only these (e.g. softmax gumbel); default: all")
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke test, no timings "
                                                        "worth quoting)")
    p.set_defaults(func=bench)
    p = sub.add_parser("build-chapter", help="strict build of one chapter alone (for authors)")
    p.add_argument("notebook", help="e.g. book/01_softmax.ipynb")
    p.set_defaults(func=build_chapter)
    chapters_help = "only these chapters (e.g. 05_euler_lagrange or 5); default: all"
    p = sub.add_parser("student", help="write student notebooks to work/ (an edited one is "
                                       "kept; the new version goes beside it)")
    p.add_argument("chapters", nargs="*", help=chapters_help)
    p.add_argument("--out", help="the folder (default: work/)")
    p.set_defaults(func=student)
    p = sub.add_parser("reader-notebooks", help="the reader's notebooks (numbers filled in, "
                                                "solutions folded) and the tree of the branch "
                                                "the launch buttons open -> "
                                                "_build/reader-notebooks")
    p.add_argument("--out", help="the folder (default: _build/reader-notebooks)")
    p.set_defaults(func=reader_notebooks)
    p = sub.add_parser("answer-key", help="write answer keys (exercises and solutions) to "
                                          "_build/answer-key")
    p.add_argument("chapters", nargs="*", help=chapters_help)
    p.set_defaults(func=answer_key)
    sub.add_parser("exercise-index", help="write book/exercise_index.md (done by every build)"
                   ).set_defaults(func=exercise_index)
    p = sub.add_parser("grade", help="grade submitted student notebooks, each in a sandbox "
                                     "-> _build/grades")
    p.add_argument("submissions", help="a folder with one folder (or notebook) per student")
    p.add_argument("--out", help="where to write gradebook.csv and feedback/ (default: "
                                 "_build/grades)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="students graded at once (1)")
    p.add_argument("--chapters", nargs="+", help="the assignment's chapters: fix the columns")
    p.add_argument("--points", nargs="*", default=[], metavar="LABEL=N",
                   help="points per exercise (default 1)")
    p.add_argument("--fresh", action="store_true", help="grade everyone again (default: a "
                                                        "rerun keeps unchanged students)")
    p.add_argument("--unsafe", action="store_true",
                   help="without bubblewrap: run the notebooks unsandboxed (dangerous)")
    p.add_argument("--cell-timeout", type=float, default=120, help="seconds per cell (120)")
    p.add_argument("--check-timeout", type=float, default=60, help="seconds per check (60)")
    p.add_argument("--notebook-timeout", type=float, default=900,
                   help="seconds per notebook, after which no further cell starts (900)")
    p.set_defaults(func=grade)
    p = sub.add_parser("build-nosolutions", help="build the site without solutions")
    p.add_argument("chapters", nargs="*", help=chapters_help + " (then the site goes to "
                                                               "_build/nosolutions-assignment)")
    p.set_defaults(func=build_nosolutions)
    p = sub.add_parser("pdf", help="a PDF of the book (Chromium prints the single-page HTML) "
                                   "-> _build/book.pdf")
    p.add_argument("chapters", nargs="*", help=chapters_help)
    p.add_argument("--no-solutions", action="store_true",
                   help="the students' handout, without solutions -> _build/book[-CHAPTERS]"
                        "-nosolutions.pdf")
    p.set_defaults(func=pdf)
    p = sub.add_parser("_print-pdf", help=argparse.SUPPRESS)
    p.add_argument("html")
    p.add_argument("target")
    p.add_argument("--handout", action="store_true")
    p.set_defaults(func=lambda a: print_pdf(Path(a.html), Path(a.target), handout=a.handout))
    p = sub.add_parser("_assignment-source", help=argparse.SUPPRESS)
    p.add_argument("target")
    p.add_argument("chapters", nargs="+")
    p.set_defaults(func=lambda a: _assignment_source(a.chapters, Path(a.target)))
    p = sub.add_parser("serve", help="serve the built site on 127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=serve)
    p = sub.add_parser("clean", help="strip outputs and metadata from notebooks (default: book/*.ipynb)")
    p.add_argument("notebooks", nargs="*", help="only these notebooks")
    p.set_defaults(func=clean)
    p = sub.add_parser("lab", help="open the student notebooks (work/) in JupyterLab")
    p.add_argument("--authors", action="store_true",
                   help="open the authors' notebooks in book/ instead (solutions visible)")
    p.add_argument("lab_args", nargs=argparse.REMAINDER,
                   help="options for JupyterLab, e.g. --no-browser --port 8893")
    p.set_defaults(func=lab)
    p = sub.add_parser("sweep", help="measure the false-alarm rate of a chapter's asserts over "
                                     "many seeds (see tools/sweep.py --help)", add_help=False)
    p.add_argument("sweep_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=sweep)
    args, unknown = parser.parse_known_args(argv)
    if args.command == "lab":
        # everything book.py does not know goes to JupyterLab (--no-browser, --port 8893, ...),
        # with or without a separating "--"
        extra = unknown + list(args.lab_args or [])
        args.lab_args = [a for i, a in enumerate(extra) if not (a == "--" and i == 0)]
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.func(args)


if __name__ == "__main__":
    main()
