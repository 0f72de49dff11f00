"""One figure style for the whole book.

Every chapter draws with :func:`figure` (which applies the style) and finishes each axes with
:func:`label`, which insists on axis labels. Colours come from :data:`PALETTE`, the Okabe–Ito
palette, which stays distinguishable for the common colour-vision deficiencies (Okabe & Ito 2008,
"Color Universal Design"); :data:`SEQUENTIAL` is a perceptually uniform colormap for heatmaps.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt

__all__ = ["PALETTE", "SEQUENTIAL", "DIVERGING", "WIDTH", "use_book_style", "figure", "label"]

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


def use_book_style() -> None:
    """Apply the book's matplotlib style (idempotent)."""
    mpl.rcParams.update(_STYLE)


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
