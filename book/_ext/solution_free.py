"""The solution-free site (``book_hide_solutions: true``) gives out no solution, by any route.

Three ways a solution could leave that site, and what this extension does about each:

1. **On the page.** sphinx-exercise has its own ``hide_solutions`` option, but with the gated form
   (``solution-start`` ... ``solution-end``, which the book uses so that solution code cells sit in
   the dropdown) it drops only the start marker: the code cells stay on the page and the orphaned
   end marker fails the strict build ("unknown node type: solution_end_node"). The transform
   below runs after sphinx-exercise has merged each gated block into one solution node (its
   priority 10), and removes the whole node, code cells included.
2. **The download button.** Sphinx copies every page's source to ``_sources/`` and the theme's
   download button links to it: for a chapter that is the full notebook. When the build finishes,
   each notebook there is replaced by the student notebook
   (:func:`softmaxbook.exercises.student.make_student_notebook`: solutions removed, solution code
   cells stubbed, outputs empty), so the button hands out what ``book.py student`` writes: its
   markdown readable without MyST too (numbered equations, the glued numbers from this build's
   execution cache, exercise numbers, citations; :mod:`softmaxbook.exercises.readable`).
3. **Launch buttons and repository links.** Binder and Colab open the notebook from the
   repository, which holds the solutions; so do the repository and issue buttons lead there. In
   this build they are switched off (there is no student copy of the notebooks in the repository
   to point them at); a student downloads the notebook and opens it where they like.
"""

from __future__ import annotations

from pathlib import Path

from sphinx.transforms import SphinxTransform
from sphinx.util import logging

logger = logging.getLogger(__name__)


class RemoveSolutions(SphinxTransform):
    default_priority = 11  # after sphinx_exercise.transforms.MergeGatedSolutions (10)

    def apply(self):
        if not self.config.book_hide_solutions:
            return
        from sphinx_exercise.nodes import solution_node

        for node in list(self.document.findall(solution_node)):
            node.parent.remove(node)


def _no_launch_buttons(app, config) -> None:
    """Switch off launch, repository and issue buttons (they lead to the full notebooks)."""
    if not config.book_hide_solutions:
        return
    options = dict(config.html_theme_options or {})
    options["launch_buttons"] = {}
    for key in ("use_repository_button", "use_issues_button", "use_edit_page_button",
                "use_source_button"):
        options[key] = False
    config.html_theme_options = options


def studentise_sources(sources: Path, *, srcdir: Path | None = None,
                       cache: Path | None = None) -> list[Path]:
    """Replace every notebook under ``sources`` (a site's ``_sources``) by its student version.

    With ``srcdir`` (the book's source folder, holding ``_toc.yml``) the student notebooks are
    the readable ones ``book.py student`` writes: equation and exercise numbers from the toc,
    citations from ``references.bib`` beside the notebook, and the glued numbers from the
    execution cache ``cache`` (never a new execution; without a cached run the ``{glue}`` roles
    stay). Returns the notebooks replaced. A notebook the student export cannot read is an error:
    the site must not go out with a full notebook in it.
    """
    import nbformat

    from softmaxbook.exercises.student import _chapter_numbers, _context, make_student_notebook

    numbers = _chapter_numbers(Path(srcdir)) if srcdir is not None else {}
    done = []
    for path in sorted(Path(sources).rglob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        context = None
        if srcdir is not None:
            original = Path(srcdir) / path.relative_to(sources)
            book = original.parent if original.is_file() else path.parent
            context = _context(path, nb, numbers.get(path.stem), book,
                               Path(cache) if cache else None, "cache")
        nbformat.write(make_student_notebook(nb, chapter=path.stem, context=context), path)
        done.append(path)
    return done


def _studentise(app, exception) -> None:
    if exception is not None or not app.config.book_hide_solutions:
        return
    if app.builder.format != "html":
        return
    cache = getattr(app.config, "nb_execution_cache_path", "") or None
    if cache and not Path(cache).is_absolute():
        cache = Path(app.srcdir) / cache
    done = studentise_sources(Path(app.outdir) / "_sources", srcdir=Path(app.srcdir),
                              cache=cache)
    logger.info("solution_free: %d downloadable notebooks replaced by student notebooks", len(done))


def setup(app):
    app.add_config_value("book_hide_solutions", False, "env")
    app.add_transform(RemoveSolutions)
    app.connect("config-inited", _no_launch_buttons, priority=900)
    app.connect("build-finished", _studentise)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.2"}
