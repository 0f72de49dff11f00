"""The download button of the full site gives the reader's notebook, not the authors' source.

Sphinx copies each page's source to ``_sources/`` and the theme's download button links to it:
for a chapter that is ``book/NN_x.ipynb`` as the authors write it (MyST roles and directives,
``{glue:text}`` placeholders, open solutions), which plain JupyterLab and Colab show as source.
When the build finishes, each notebook there is replaced by its reader's notebook
(:func:`softmaxbook.exercises.reader.make_reader_notebook`: numbered equations, the glued numbers
of this build's execution cache, citations, solutions folded, a first cell that installs the
package where it is missing). The Binder and Colab buttons open the same notebooks from the
``reader-notebooks`` branch that ``tools/book.py reader-notebooks`` writes and the publishing
workflow pushes (``_config.yml``: ``repository.branch``).

The solution-free site (``book_hide_solutions``) is left to ``solution_free.py``, which puts the
student notebooks there instead.
"""

from __future__ import annotations

from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)


def readerise_sources(sources: Path, *, srcdir: Path, cache: Path | None = None) -> list[Path]:
    """Replace every chapter notebook under ``sources`` (a site's ``_sources``) by its reader's
    notebook; glued numbers from ``cache`` only (nothing is executed). Returns those replaced."""
    import nbformat

    from softmaxbook.exercises.reader import make_reader_notebook
    from softmaxbook.exercises.student import _chapter_numbers, _context

    numbers = _chapter_numbers(Path(srcdir))
    done = []
    for path in sorted(Path(sources).rglob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        original = Path(srcdir) / path.relative_to(sources)
        book = original.parent if original.is_file() else path.parent
        context = _context(path, nb, numbers.get(path.stem), book,
                           Path(cache) if cache else None, "cache")
        nbformat.write(make_reader_notebook(nb, chapter=path.stem, context=context), path)
        done.append(path)
    return done


def _readerise(app, exception) -> None:
    if exception is not None or getattr(app.config, "book_hide_solutions", False):
        return
    if app.builder.format != "html" or not (Path(app.outdir) / "_sources").is_dir():
        return
    cache = getattr(app.config, "nb_execution_cache_path", "") or None
    if cache and not Path(cache).is_absolute():
        cache = Path(app.srcdir) / cache
    done = readerise_sources(Path(app.outdir) / "_sources", srcdir=Path(app.srcdir), cache=cache)
    logger.info("reader_notebooks: %d downloadable notebooks replaced by reader's notebooks",
                len(done))


def setup(app):
    app.connect("build-finished", _readerise)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
