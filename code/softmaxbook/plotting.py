"""One figure style for the whole book.

Every chapter draws with :func:`figure` (which applies the style) and finishes each axes with
:func:`label`, which insists on axis labels. Colours come from :data:`PALETTE`, the Okabe–Ito
palette, which stays distinguishable for the common colour-vision deficiencies (Okabe & Ito 2008,
"Color Universal Design"); :data:`SEQUENTIAL` is a perceptually uniform colormap for heatmaps.
"""

from __future__ import annotations

import re
from typing import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

__all__ = ["PALETTE", "SEQUENTIAL", "DIVERGING", "WIDTH", "use_book_style", "figure", "label",
           "describe", "BookFigure"]

#: Okabe–Ito: blue, orange, bluish green, vermillion, reddish purple, sky blue, yellow, black.
PALETTE: tuple[str, ...] = (
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
)
SEQUENTIAL = "viridis"
DIVERGING = "RdBu_r"
#: The width of a full-width figure in inches (the book's text column at 100 dpi).
WIDTH = 7.0

_STYLE = {
    "figure.figsize": (WIDTH, 3.2),
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "figure.constrained_layout.use": True,
    "font.size": 10,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.prop_cycle": mpl.cycler(color=list(PALETTE)),
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "lines.linewidth": 1.8,
    "image.cmap": SEQUENTIAL,
}


def _sharp_inline_figures() -> None:
    """In a notebook, show figures at twice the pixel density (``retina``): 100-dpi PNGs looked
    blurred on high-density screens. The image keeps its size on the page (its width and height
    are half its pixels); the site shows the same file."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with matplotlib-inline
        return
    shell = get_ipython()
    if shell is None or "inline" not in mpl.get_backend().lower():
        return
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("retina")


def use_book_style() -> None:
    """Apply the book's matplotlib style (idempotent); in a notebook, sharp (2x) figures."""
    mpl.rcParams.update(_STYLE)
    _sharp_inline_figures()


def _plain(text: str) -> str:
    """A label as words: TeX markup ($, \\, braces, ^, _) taken out."""
    text = re.sub(r"\\(mathrm|text|mathbf|operatorname)\s*", "", text)
    text = re.sub(r"\\([A-Za-z]+)", r"\1", text)
    return " ".join(re.sub(r"[${}\\]", "", text).replace("^", " ").split())


def describe(fig: Figure) -> str:
    """A text description of a figure, from its titles, axis labels and legends.

    It is the figure's text form in a notebook (``repr``): the site uses it as the image's
    alternative text (book/_ext/figure_alt.py), so a reader who cannot see the figure learns what
    it plots. Colour bars are named, not described.
    """
    if not isinstance(fig, Figure):
        raise ValueError(f"describe: argument 'fig' must be a matplotlib Figure, got {fig!r}")
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>" and ax.get_visible()]
    parts = []
    sup = getattr(fig, "_suptitle", None)
    head = f"Figure: {_plain(sup.get_text())}." if sup is not None and sup.get_text() else "Figure."
    for i, ax in enumerate(panels, 1):
        title = _plain(ax.get_title() or ax.get_title("left") or ax.get_title("right"))
        x, y = _plain(ax.get_xlabel()), _plain(ax.get_ylabel())
        what = f"{y or 'values'} against {x or 'position'}"
        if not ax.axison and not (x or y):
            # a diagram drawn with its axes off (a simplex, a tree): "values against position"
            # would describe nothing
            what = "a drawing without axes"
        legend = ax.get_legend()
        names = [_plain(t.get_text()) for t in legend.get_texts()] if legend else []
        if ax.images:
            what = f"image, {y or 'rows'} by {x or 'columns'}"
        text = (f"{title}: " if title else "") + what
        if names:
            text += " (" + "; ".join(n for n in names if n) + ")"
        # a capital only for a Latin letter: "τ = 0.5" must not become "Τ = 0.5" (capital tau)
        first = text[:1].upper() if text[:1].isascii() else text[:1]
        parts.append(f"Panel {i}, {text}." if len(panels) > 1 else f"{first}{text[1:]}.")
    n_bars = sum(ax.get_label() == "<colorbar>" for ax in fig.axes)
    if n_bars:
        parts.append(f"With {n_bars} colour bar{'s' if n_bars > 1 else ''}.")
    return " ".join([head] + parts)


class BookFigure(Figure):
    """A matplotlib Figure whose text form is :func:`describe` (made by :func:`figure`)."""

    def __repr__(self) -> str:
        try:
            return describe(self)
        except Exception:  # a description must never break a notebook's output
            return super().__repr__()


def figure(ncols: int = 1, nrows: int = 1, *, height: float | None = None,
           width: float | None = None, squeeze: bool = True, **kwargs):
    """A new figure in the book's style: ``fig, axes = figure(ncols=2)``.

    Parameters
    ----------
    ncols, nrows : int
        Grid of axes, as in :func:`matplotlib.pyplot.subplots`.
    height, width : float, optional
        Size in inches; the default width is :data:`WIDTH` and the height grows with ``nrows``.
    kwargs
        Passed on to :func:`matplotlib.pyplot.subplots` (``sharex``, ``sharey``, ...).
    """
    for name, value in (("ncols", ncols), ("nrows", nrows)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"figure: argument '{name}' must be an int >= 1, got {value!r}")
    use_book_style()
    w = WIDTH if width is None else width
    h = (2.9 * nrows + 0.3) if height is None else height
    kwargs.setdefault("FigureClass", BookFigure)
    return plt.subplots(nrows, ncols, figsize=(w, h), squeeze=squeeze, **kwargs)


def label(ax, xlabel: str, ylabel: str, title: str | None = None, *,
          legend: bool | None = None, legend_loc: str = "best") -> None:
    """Label an axes; every plot in the book has both axis labels.

    ``legend=None`` draws a legend when some artist has a label.
    """
    for name, value in (("xlabel", xlabel), ("ylabel", ylabel)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"label: argument '{name}' must be a non-empty string, got {value!r}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    handles, _ = ax.get_legend_handles_labels()
    if legend or (legend is None and handles):
        ax.legend(loc=legend_loc)


def colours(n: int) -> Sequence[str]:
    """``n`` colours from the palette (cycled when ``n`` exceeds its length)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"colours: argument 'n' must be an int >= 0, got {n!r}")
    return [PALETTE[i % len(PALETTE)] for i in range(n)]


__all__.append("colours")
