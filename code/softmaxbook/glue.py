"""``glue(name, value)``: hand a computed value to the book's prose, without needing Jupyter Book.

The chapters quote their numbers from executed cells: ``glue("ece_before", ece)`` in a cell and
``{glue:text}`ece_before:.3f``` in the text. Jupyter Book's MyST-NB reads these values from the
cell outputs. Its own ``myst_nb.glue`` would make every chapter import ``myst_nb``, which a plain
kernel (Colab, a student's own Python with only this package installed) does not have, so the
first cell would fail there. This function writes exactly the output ``myst_nb.glue`` writes
(checked against it in ``tests/test_glue.py``), using IPython alone: a display of the value's
MIME bundle with ``{"scrapbook": {"name": ..., "mime_prefix": ...}}`` in its metadata, the
format MyST-NB's glue reader looks for.
"""

from __future__ import annotations

from typing import Any

# The MIME prefix MyST-NB (after papermill/scrapbook) gives values glued with display=False,
# so that a notebook front end does not show them. Same string as myst_nb.ext.glue.GLUE_PREFIX.
GLUE_PREFIX = "application/papermill.record/"

__all__ = ["glue", "GLUE_PREFIX"]


def glue(name: str, variable: Any, display: bool = True) -> None:
    """Store ``variable``'s displayed value under ``name`` for the book's ``{glue}`` roles.

    Parameters
    ----------
    name : str
        A non-empty name, unique in the notebook; the prose refers to the value by it.
    variable : object
        Any object; what is stored is how Jupyter *displays* it (its MIME bundle), as with
        ``myst_nb.glue``.
    display : bool
        Show the value in the notebook as well (default). With ``False`` it is stored under a
        MIME type no front end renders.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"glue: name must be a non-empty string, got {name!r}")
    if not isinstance(display, bool):
        raise TypeError(f"glue: display must be True or False, got {display!r}")
    # Imported here so that importing softmaxbook never needs IPython (scripts, the grader).
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display

    mimebundle, metadata = format_display_data(variable)
    mime_prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = dict(name=name, mime_prefix=mime_prefix)
    ipy_display({mime_prefix + k: v for k, v in mimebundle.items()}, raw=True,
                metadata=metadata)
