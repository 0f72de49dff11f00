"""``glue(name, value)``: hand a computed value to the book's prose, without needing Jupyter Book.

The chapters quote their numbers from executed cells: ``glue("ece_before", ece)`` in a cell and
``{glue:text}`ece_before:.3f``` in the text. Jupyter Book's MyST-NB reads these values from the
cell outputs. Its own ``myst_nb.glue`` would make every chapter import ``myst_nb``, which a plain
kernel (Colab, a student's own Python with only this package installed) does not have, so the
first cell would fail there. This function writes exactly the output ``myst_nb.glue`` writes
(checked against it in ``tests/test_glue.py``), using IPython alone: a display of the value's
MIME bundle with ``{"scrapbook": {"name": ..., "mime_prefix": ...}}`` in its metadata, the
format MyST-NB's glue reader looks for.

``checked(claim)`` is its neighbour for the other direction: the last line of a cell whose
asserts check a claim of the prose prints "✓ checked: <claim>" under the cell, so that a reader
of the book, where the cell's code is folded, sees *that* the claim is checked without reading
the check.
"""

from __future__ import annotations

from typing import Any

# The MIME prefix MyST-NB (after papermill/scrapbook) gives values glued with display=False,
# so that a notebook front end does not show them. Same string as myst_nb.ext.glue.GLUE_PREFIX.
GLUE_PREFIX = "application/papermill.record/"

__all__ = ["glue", "checked", "GLUE_PREFIX", "CHECK_MARK"]

# What a checked claim starts with, in the notebook and on the site.
CHECK_MARK = "\u2713 checked: "


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

    mimebundle, metadata = format_display_data(_plain_number(variable))
    mime_prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = dict(name=name, mime_prefix=mime_prefix)
    ipy_display({mime_prefix + k: v for k, v in mimebundle.items()}, raw=True,
                metadata=metadata)


def _plain_number(value: Any) -> Any:
    """A NumPy scalar or a 0-d torch tensor as the Python number it holds; anything else as is.

    MyST-NB formats ``{glue:text}`name:.2f``` by ``literal_eval`` of the stored text/plain, and
    the text of ``np.float64(2.25)`` (NumPy 2) or ``tensor(2.2500)`` is not a literal: the strict
    build failed on it (chapter 4 review, R5). A Python float's text is, to every digit.
    """
    if type(value).__module__ == "numpy" and hasattr(value, "item") and \
            getattr(value, "shape", None) == ():
        return value.item()
    torch = __import__("sys").modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) and value.dim() == 0:
        return value.item()
    return value


def checked(claim: str) -> None:
    """Print "✓ checked: <claim>", the last line of a cell whose asserts check a claim.

    Call it as the last line of a cell, after the asserts it summarises: it is reached only when
    they all passed. The book folds such a cell's code (tag ``hide-input``) and the reader sees
    this line instead, as a styled note (book/_ext/folds.py turns the printed line into
    a paragraph of class ``checked-claim``). Say only what the asserts above it check.

    Parameters
    ----------
    claim : str
        One line of plain text (no line break), at most 200 characters; `text` in backticks is
        shown as code on the site.

    Notes
    -----
    A printed line, not a rich display: in a notebook it reads as plain text, and myst-nb wraps
    every rich display of a cell with a captioned figure in that figure (the figure would
    appear twice).
    """
    if not isinstance(claim, str):
        raise TypeError(f"checked: argument 'claim' must be a str, got {type(claim).__name__}")
    if not claim.strip():
        raise ValueError(f"checked: argument 'claim' must say what was checked, got {claim!r}")
    if "\n" in claim or "\r" in claim:
        raise ValueError(f"checked: argument 'claim' must be one line, got {claim!r}")
    if len(claim) > 200:
        raise ValueError(
            f"checked: argument 'claim' must be at most 200 characters, got {len(claim)}")
    if claim.count("`") % 2:
        raise ValueError(f"checked: argument 'claim' has an unpaired backtick: {claim!r}")
    print(CHECK_MARK + claim.strip())
