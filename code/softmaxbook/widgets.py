"""Interactive figures that also work on a page with no kernel.

A rendered page of the book has no Python behind it, so a slider there would move and change
nothing. Each interactive in the book is therefore an :class:`Explorer`, used in two cells:

.. code-block:: python

    explorer = Explorer(draw, [Slider("tau", 0.05, 10.0, value=1.0, log=True, label="τ")])
    explorer.widget()            # cell tagged `remove-output`: live sliders in Jupyter
    explorer.static([{"tau": 0.1}, {"tau": 1.0}, {"tau": 10.0}])   # the book's static fallback

On the built site the cell ``explorer.show()`` replaces ``explorer.widget()``: in a live
Jupyter kernel it displays the same sliders, and when the book's build executes the notebook
(:data:`FRAMES_ENV` set) it displays the explorer's frames instead: every state of a grid drawn
in advance (:meth:`Explorer.frame_states`), with range inputs and a small script of the book's
own (``book/_static/explorer.js``, added by ``book/_ext/explorer_frames.py``) that shows the
frame matching the controls. A reader moves the sliders with no kernel behind the page.

A headless executor (``jupyter nbconvert --execute``, papermill, ``jupyter execute``, pytest's
nbval) has no front end to draw a widget, and nbclient, which they share, can wait forever for
the reply of a cell that opens widgets (jupyter/nbclient#312: it happened to ``nbconvert
--execute`` of chapter 2, 14 minutes at 0 % CPU). There ``show()`` displays the explorer's
default state as one figure and opens no widget (:func:`headless_executor` looks at the command
that started the kernel). ``SOFTMAXBOOK_EXPLORER_FRAMES=live`` forces the widget.

``draw(ax, **values)`` draws one state onto a matplotlib axes. :meth:`Explorer.render` draws one
state into a new figure and returns it, which is what the slider callback does, so the callbacks
are tested without a browser (``tests/test_plotting_widgets.py``). :meth:`Explorer.static` also
draws every slider at both ends, as the widget delivers them, so an end that crashes fails the
chapter's execution.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt

from . import plotting

__all__ = ["Slider", "Choice", "Explorer", "ExplorerView", "FRAMES_ENV", "MIN_FRAMES",
           "headless_executor"]

#: Set to "1" by the book's build (tools/book.py, book/_ext/explorer_frames.py): then
#: :meth:`Explorer.show` displays the precomputed frames instead of the live widget. jupyter-cache
#: keys its cache on the code, not on the environment, so the build sets it for every execution
#: that fills the cache (tools/book.py's prefill and the extension's own), and nothing else
#: writes that cache.
FRAMES_ENV = "SOFTMAXBOOK_EXPLORER_FRAMES"
#: The fewest values a slider is drawn at on the page (unless it has fewer positions at all).
MIN_FRAMES = 15
#: Above this many states the product grid gives way to one sweep per control. Each frame
#: costs ~0.4 s of the build: chapter 2's 15 x 15 grid took 95 s of its execution and
#: chapter 8's 165 states 68 s (the issue's bound is 45 s a chapter); swept, ~30 each.
MAX_PRODUCT = 60
_GRIDS = ("auto", "product", "sweep")
_FORMATS = {"webp": "image/webp", "png": "image/png"}


@dataclass(frozen=True)
class Slider:
    """A numeric control: ``min <= value <= max``; ``log=True`` for a log-scale slider."""

    name: str
    min: float
    max: float
    value: float
    step: float | None = None
    log: bool = False
    label: str | None = None
    integer: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Slider: argument 'name' must be a Python identifier, got {self.name!r}")
        for arg in ("min", "max", "value"):
            v = getattr(self, arg)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"Slider {self.name}: argument '{arg}' must be a finite number, got {v!r}")
        if not self.min < self.max:
            raise ValueError(f"Slider {self.name}: argument 'min' ({self.min}) must be < 'max' ({self.max})")
        if not self.min <= self.value <= self.max:
            raise ValueError(f"Slider {self.name}: argument 'value' ({self.value}) must lie in "
                             f"[{self.min}, {self.max}]")
        if self.log and self.min <= 0:
            raise ValueError(f"Slider {self.name}: a log slider needs 'min' > 0, got {self.min}")
        if self.step is not None and not self.step > 0:
            raise ValueError(f"Slider {self.name}: argument 'step' must be > 0, got {self.step}")

    @property
    def tolerance(self) -> float:
        """How far outside ``[min, max]`` a value may come in and still count as the end: a
        rounding error, not a request. A log slider delivers ``10 ** log10(min)``, which is
        ``0.049999999999999996`` for ``min = 0.05``; a linear one ``min + n * step``."""
        return 1e-9 * max(abs(self.min), abs(self.max), self.max - self.min)

    def validate(self, value: Any) -> float | int:
        """``value`` as a number in ``[min, max]``; a value within :attr:`tolerance` of an end
        (the rounding of the widget, on either side) becomes that end, anything further outside
        raises."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"Explorer: '{self.name}' must be a finite number, got {value!r}")
        if not self.min - self.tolerance <= value <= self.max + self.tolerance:
            raise ValueError(f"Explorer: '{self.name}'={value} is outside [{self.min}, {self.max}]")
        if abs(value - self.min) <= self.tolerance:
            value = self.min
        elif abs(value - self.max) <= self.tolerance:
            value = self.max
        return int(value) if self.integer else float(value)

    def ends(self) -> tuple[float | int, float | int]:
        """The values the widget of :meth:`make` delivers at its two ends, rounding included:
        ``base ** exponent`` for a log slider (``FloatLogSlider`` stores ``log10`` of the
        ends), the last point of the step grid for a linear one."""
        if self.integer:
            return int(self.min), int(self.max)
        if self.log:
            return 10 ** math.log10(self.min), 10 ** math.log10(self.max)
        step = self.step or (self.max - self.min) / 100
        last = self.min + round((self.max - self.min) / step) * step
        return self.min, (last if abs(last - self.max) <= self.tolerance else self.max)

    def positions(self) -> list[float | int] | None:
        """Every value the slider can take when it moves in steps (``step`` given, or an integer
        slider), ends included; None for a continuous slider."""
        if self.step is None and not self.integer:
            return None
        step = self.step or 1
        count = int(math.floor((self.max - self.min) / step + 1e-9)) + 1
        # rounded: 0 + 3 * 0.05 is 0.15000000000000002
        points = [self.validate(round(self.min + i * step, 12)) for i in range(count)]
        if abs(points[-1] - self.max) > self.tolerance:
            points.append(self.validate(self.max))
        return sorted(set(points))

    def grid(self, count: int = MIN_FRAMES) -> list[float | int]:
        """The values at which the book's page draws this slider, sorted, ends and default
        included: at least ``count`` of them, log-spaced for a ``log`` slider (an integer one
        too: its live widget stays linear), evenly spaced otherwise, each rounded to three
        significant digits so that the value shown is the value drawn. A slider that moves in
        steps is drawn at every one of its positions when it has at most ``2 * count`` of them
        (fewer than ``count`` if it has no more), else at ``count`` or more of them."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 2:
            raise ValueError(f"Slider {self.name}: argument 'count' must be an int >= 2, "
                             f"got {count!r}")
        points = self.positions()
        if points is not None and len(points) <= 2 * count:
            values = list(points)
        else:
            values = []
            for n in range(count, 20 * count):
                values = sorted({self._snap(v, points) for v in self._spaced(n)})
                if len(values) >= count:
                    break
        values = sorted(set(values) | {self.validate(self.min), self.validate(self.max)})
        default = self.validate(self.value)
        if default not in values:
            inner = values[1:-1] or values
            scale = (lambda v: math.log(v)) if self.log else (lambda v: v)
            nearest = min(inner, key=lambda v: abs(scale(v) - scale(default)))
            if len(values) > count or nearest not in (values[0], values[-1]):
                values.remove(nearest)
            values = sorted(set(values) | {default})
        return values

    def _spaced(self, n: int) -> list[float]:
        if self.log:
            lo, hi = math.log(self.min), math.log(self.max)
            raw = [math.exp(lo + (hi - lo) * i / (n - 1)) for i in range(n)]
        else:
            raw = [self.min + (self.max - self.min) * i / (n - 1) for i in range(n)]
        raw[0], raw[-1] = self.min, self.max
        return raw

    def _snap(self, v: float, points) -> float | int:
        if points is not None:  # the nearest position the slider can take
            scale = (lambda x: math.log(x)) if self.log and self.min > 0 else (lambda x: x)
            return min(points, key=lambda p: abs(scale(p) - scale(v)))
        if self.integer:
            return self.validate(round(v))
        # three significant digits, and no -0.0 or 1e-17 for a value that is zero
        r = float(f"{v:.3g}") if abs(v) > 1e-9 * (self.max - self.min) else 0.0
        return self.validate(min(max(r, self.min), self.max))

    def make(self):
        import ipywidgets as w

        desc = self.label or self.name
        style = {"description_width": "initial"}
        if self.integer:
            return w.IntSlider(value=int(self.value), min=int(self.min), max=int(self.max),
                               step=int(self.step or 1), description=desc, style=style,
                               continuous_update=False)
        if self.log:
            return w.FloatLogSlider(value=self.value, base=10, min=math.log10(self.min),
                                    max=math.log10(self.max), step=self.step or 0.02,
                                    description=desc, style=style, continuous_update=False)
        return w.FloatSlider(value=self.value, min=self.min, max=self.max,
                             step=self.step or (self.max - self.min) / 100, description=desc,
                             style=style, continuous_update=False)


@dataclass(frozen=True)
class Choice:
    """A control with a few named options (a dropdown)."""

    name: str
    options: tuple
    value: Any
    label: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Choice: argument 'name' must be a Python identifier, got {self.name!r}")
        if len(self.options) == 0:
            raise ValueError(f"Choice {self.name}: argument 'options' is empty")
        if self.value not in self.options:
            raise ValueError(f"Choice {self.name}: argument 'value' {self.value!r} is not one of "
                             f"{self.options!r}")

    def grid(self, count: int = MIN_FRAMES) -> list:
        """Every option (the page offers all of them)."""
        return list(self.options)

    def validate(self, value: Any):
        if value not in self.options:
            raise ValueError(f"Explorer: '{self.name}'={value!r} is not one of {self.options!r}")
        return value

    def make(self):
        import ipywidgets as w

        return w.Dropdown(options=list(self.options), value=self.value,
                          description=self.label or self.name, style={"description_width": "initial"})


class Explorer:
    """An interactive figure: ``draw(ax, **values)`` under a set of controls.

    Parameters
    ----------
    draw : callable
        ``draw(ax, **values)`` draws one state onto ``ax`` (a matplotlib Axes) and labels it.
    controls : sequence of Slider or Choice
        One control per keyword argument of ``draw``.
    height : float
        Height of one panel in inches.
    """

    def __init__(self, draw: Callable[..., Any], controls: Sequence[Slider | Choice], *,
                 height: float = 3.0):
        if not callable(draw):
            raise TypeError(f"Explorer: argument 'draw' must be callable, got {type(draw).__name__}")
        controls = list(controls)
        if not controls or not all(isinstance(c, (Slider, Choice)) for c in controls):
            raise TypeError("Explorer: argument 'controls' must be a non-empty sequence of Slider/Choice")
        names = [c.name for c in controls]
        if len(set(names)) != len(names):
            raise ValueError(f"Explorer: argument 'controls' has repeated names: {names}")
        self.draw = draw
        self.controls = {c.name: c for c in controls}
        self.height = height

    def values(self, **overrides) -> dict[str, Any]:
        """The default values with ``overrides`` applied, each validated against its control."""
        unknown = set(overrides) - set(self.controls)
        if unknown:
            raise ValueError(f"Explorer: unknown control(s) {sorted(unknown)}; known: "
                             f"{sorted(self.controls)}")
        out = {n: c.value for n, c in self.controls.items()}
        out.update({n: self.controls[n].validate(v) for n, v in overrides.items()})
        return out

    def render(self, **values):
        """Draw the state ``values`` (defaults for the rest) into a new figure and return it."""
        fig, ax = plotting.figure(height=self.height)
        self.draw(ax, **self.values(**values))
        return fig

    def static(self, states: Sequence[Mapping[str, Any]], *, ncols: int | None = None,
               titles: bool = True):
        """Small multiples: one panel per state, titled with its values. The book's fallback."""
        states = [self.values(**s) for s in states]
        if not states:
            raise ValueError("Explorer.static: argument 'states' is empty")
        ncols = ncols or min(len(states), 3)
        nrows = math.ceil(len(states) / ncols)
        fig, axes = plotting.figure(ncols=ncols, nrows=nrows, height=self.height * nrows,
                                    squeeze=False)
        flat = axes.ravel()
        for ax, state in zip(flat, states):
            self.draw(ax, **state)
            if titles:
                text = ", ".join(f"{(self.controls[k].label or k)} = {_short(v)}"
                                 for k, v in state.items() if k in self.controls)
                ax.set_title(text)
        for ax in flat[len(states):]:
            ax.set_visible(False)
        self.check_ends()
        return fig

    def check_ends(self) -> int:
        """Draw every slider at both of its ends, as the widget delivers them (:meth:`Slider.ends`),
        the other controls at their defaults, and close those figures: a slider that crashes at
        an end fails here, under nbval, not in a reader's browser. :meth:`static` calls it.
        Returns the number of states drawn."""
        n = 0
        for name, control in self.controls.items():
            if not isinstance(control, Slider):
                continue
            for which, value in zip(("min", "max"), control.ends()):
                fig = None
                try:
                    fig = plotting.figure(height=self.height)[0]
                    self.draw(fig.axes[0], **self.values(**{name: value}))
                except Exception as err:
                    raise RuntimeError(
                        f"Explorer: slider '{name}' fails at its {which} end ({name}={value!r}, "
                        f"the value the widget delivers there): {type(err).__name__}: {err}"
                    ) from err
                finally:
                    if fig is not None:
                        plt.close(fig)
                n += 1
        return n

    def frame_states(self, count: int | Mapping[str, int] | None = None, grid: str = "auto"
                     ) -> tuple[str, dict[str, list], list[tuple[tuple[int, ...], dict]]]:
        """The states the book's page draws in advance.

        Parameters
        ----------
        count : int or mapping name -> int, optional
            The fewest values per slider (:meth:`Slider.grid`); default 25 for an explorer with
            one control, :data:`MIN_FRAMES` (15) otherwise. Choices always offer every option.
        grid : {"auto", "product", "sweep"}
            "product": every combination of the controls' values; "sweep": each control moved
            alone, the others at their defaults; "auto": the product when it has at most
            :data:`MAX_PRODUCT` states, else the sweep.

        Returns
        -------
        (mode, values, states)
            ``mode`` "product" or "sweep" (one control: "product"); ``values`` maps each control
            to its values; ``states`` is a list of ``(indices, state)``: the index of each
            control's value in ``values`` (in the order of the controls) and the state drawn.
        """
        if grid not in _GRIDS:
            raise ValueError(f"Explorer.frame_states: argument 'grid' must be one of {_GRIDS}, "
                             f"got {grid!r}")
        if count is None:
            count = 25 if len(self.controls) == 1 else MIN_FRAMES
        if isinstance(count, Mapping):
            unknown = set(count) - set(self.controls)
            if unknown:
                raise ValueError(f"Explorer.frame_states: argument 'count' names unknown "
                                 f"control(s) {sorted(unknown)}; known: {sorted(self.controls)}")
            counts = {n: count.get(n, MIN_FRAMES) for n in self.controls}
        else:
            counts = {n: count for n in self.controls}
        for n, c in counts.items():
            if isinstance(c, bool) or not isinstance(c, int) or c < 2:
                raise ValueError(f"Explorer.frame_states: argument 'count' must be an int >= 2 "
                                 f"(per control), got {c!r} for '{n}'")
        values = {n: c.grid(counts[n]) for n, c in self.controls.items()}
        names = list(self.controls)
        defaults = [values[n].index(self.controls[n].validate(self.controls[n].value))
                    for n in names]
        size = math.prod(len(v) for v in values.values())
        mode = grid if grid != "auto" else ("product" if size <= MAX_PRODUCT else "sweep")
        if len(names) == 1:
            mode = "product"
        if mode == "product":
            keys = list(itertools.product(*(range(len(values[n])) for n in names)))
        else:
            keys = [tuple(defaults)]
            for j, n in enumerate(names):
                for i in range(len(values[n])):
                    key = tuple(defaults[:j]) + (i,) + tuple(defaults[j + 1:])
                    if key not in keys:
                        keys.append(key)
        states = [(key, {n: values[n][i] for n, i in zip(names, key)}) for key in keys]
        return mode, values, states

    def frames(self, count: int | Mapping[str, int] | None = None, grid: str = "auto", *,
               fmt: str = "webp", dpi: int = 200) -> dict:
        """Draw every state of :meth:`frame_states` into an image.

        ``fmt`` "webp" (lossless: a plot's flat colours compress to a fraction of a PNG) or
        "png"; ``dpi`` 200 gives 1400 pixels across a full-width figure (7 inches): twice the
        density of the page's text width (about 700 CSS px), as the book's other figures
        (tests/test_site_reader.py). Returns ``{"mode", "values", "defaults", "frames", "size"}``:
        ``frames`` a list of ``(indices, state, image bytes, alt text)``, the alt text naming
        the state's values and describing what is drawn (:func:`plotting.describe`);
        ``size`` the (width, height) of a frame in pixels. A state that fails to draw raises
        an error naming it.
        """
        if fmt not in _FORMATS:
            raise ValueError(f"Explorer.frames: argument 'fmt' must be one of "
                             f"{sorted(_FORMATS)}, got {fmt!r}")
        if isinstance(dpi, bool) or not isinstance(dpi, int) or not 30 <= dpi <= 600:
            raise ValueError(f"Explorer.frames: argument 'dpi' must be an int in [30, 600], "
                             f"got {dpi!r}")
        mode, values, states = self.frame_states(count, grid)
        out, size = [], None
        for key, state in states:
            fig = None
            try:
                fig = self.render(**state)
                buf = io.BytesIO()
                # lossless (flat colours), quality = effort: 50 is within 5 % of the smallest
                # file at half the time of the default
                options = ({"pil_kwargs": {"lossless": True, "quality": 50, "method": 2}}
                           if fmt == "webp" else {})
                # not "tight": every frame the same size, so the image does not jump
                fig.savefig(buf, format=fmt, dpi=dpi, **options)
                if size is None:
                    w, h = fig.get_size_inches()
                    size = (round(w * dpi), round(h * dpi))
                what = plotting.describe(fig)
                what = what[len("Figure. "):] if what.startswith("Figure. ") else what
                alt = f"{self.state_text(state)}. {what}"
            except Exception as err:
                raise RuntimeError(f"Explorer.frames: the state {self.state_text(state)} fails "
                                   f"to draw: {type(err).__name__}: {err}") from err
            finally:
                if fig is not None:
                    plt.close(fig)
            out.append((key, state, buf.getvalue(), alt))
        defaults = {n: c.validate(c.value) for n, c in self.controls.items()}
        return {"mode": mode, "values": values, "defaults": defaults, "frames": out,
                "size": size, "fmt": fmt}

    def state_text(self, state: Mapping[str, Any]) -> str:
        """``"τ = 0.5, k = 10"``: a state's values under the controls' labels."""
        return ", ".join(f"{self.controls[n].label or n} = {_short(v)}"
                         for n, v in state.items() if n in self.controls)

    def grid_text(self, mode: str, values: Mapping[str, list]) -> str:
        """The sentence under the controls: which states were drawn in advance."""
        parts = []
        for n, c in self.controls.items():
            label, vals = c.label or n, values[n]
            if isinstance(c, Choice):
                parts.append(f"{label}: all {len(vals)} options")
            elif c.positions() is not None and vals == c.positions():
                parts.append(f"{label}: every value from {_short(vals[0])} to "
                             f"{_short(vals[-1])}" + (f" in steps of {_short(c.step)}"
                                                     if (c.step or 1) != 1 else ""))
            else:
                spacing = "log-spaced" if c.log else "evenly spaced"
                if c.value in vals and not _regular(vals, c.log):
                    # frame_values puts the default in place of the grid value nearest to it
                    # (the slider starts there): the grid is then not evenly spaced around it
                    spacing += (f" except that the default {_short(c.value)} replaces the "
                                f"value nearest to it")
                parts.append(f"{label}: {len(vals)} values from {_short(vals[0])} to "
                             f"{_short(vals[-1])}, {spacing}")
        n_frames = (math.prod(len(v) for v in values.values()) if mode == "product" else
                    1 + sum(len(v) - 1 for v in values.values()))
        head = f"{n_frames} figures drawn in advance, no Python behind this page"
        if len(self.controls) == 1:
            return f"{head} ({parts[0]})."
        if mode == "product":
            return f"{head}: every combination of " + "; ".join(parts) + "."
        defaults = self.state_text({n: c.value for n, c in self.controls.items()})
        return (f"{head}: each control moves alone, the others at their defaults ({defaults}); "
                f"moving one sets the others back. " + "; ".join(parts) + ".")

    def frames_html(self, count: int | Mapping[str, int] | None = None, grid: str = "auto", *,
                    fmt: str = "webp", dpi: int = 200) -> str:
        """The explorer as HTML for the book's page: a label, a range input (a select for a
        Choice) and an ``<output>`` per control, the sentence of :meth:`grid_text`, the default
        frame, and every frame as a data URI in a JSON block that ``book/_ext/explorer_frames.py``
        moves into image files and ``book/_static/explorer.js`` reads."""
        data = self.frames(count, grid, fmt=fmt, dpi=dpi)
        names = list(self.controls)
        key = repr((getattr(self.draw, "__qualname__", ""), [repr(c) for c in
                    self.controls.values()], next(_COUNTER)))
        uid = "sbx-" + hashlib.sha1(key.encode()).hexdigest()[:8]
        mime = _FORMATS[data["fmt"]]
        frames = {",".join(map(str, k)): [f"data:{mime};base64," +
                                          base64.b64encode(img).decode("ascii"), alt]
                  for k, _, img, alt in data["frames"]}
        default_key = ",".join(str(data["values"][n].index(data["defaults"][n])) for n in names)
        controls, spec = [], []
        for n in names:
            c, vals = self.controls[n], data["values"][n]
            cid, label = f"{uid}-{n}", html.escape(c.label or n)
            d = vals.index(data["defaults"][n])
            texts = [_short(v) for v in vals]
            spec.append({"name": n, "text": texts, "default": d})
            if isinstance(c, Choice):
                options = "".join(f'<option value="{i}"{" selected" if i == d else ""}>'
                                  f"{html.escape(t)}</option>" for i, t in enumerate(texts))
                field = f'<select id="{cid}" data-name="{n}" disabled>{options}</select>'
                # the select shows its value itself: no <output>
                controls.append(f'<div class="sbx-control"><label for="{cid}">{label}</label>'
                                f"{field}</div>")
                continue
            field = (f'<input type="range" id="{cid}" data-name="{n}" min="0" '
                     f'max="{len(vals) - 1}" step="1" value="{d}" '
                     f'aria-valuetext="{html.escape(texts[d])}" disabled>')
            controls.append(f'<div class="sbx-control"><label for="{cid}">{label}</label>'
                            f'{field}<output for="{cid}" id="{cid}-out">'
                            f"{html.escape(texts[d])}</output></div>")
        src, alt = frames[default_key]
        w, h = data["size"]
        payload = json.dumps({"mode": data["mode"], "controls": spec, "frames": frames},
                             ensure_ascii=True).replace("</", "<\\/")
        return (f'<div class="sbx-explorer" id="{uid}" data-mode="{data["mode"]}">'
                f'<div class="sbx-controls">{"".join(controls)}</div>'
                f'<p class="sbx-note">{html.escape(self.grid_text(data["mode"], data["values"]))}'
                f"</p>"
                f'<div class="sbx-view"><img class="sbx-frame" src="{src}" '
                f'alt="{html.escape(alt)}" width="{w}" height="{h}" loading="lazy" '
                f'decoding="async"></div>'
                f'<script type="application/json" class="sbx-data">{payload}</script></div>')

    def show(self, count: int | Mapping[str, int] | None = None, grid: str = "auto"
             ) -> "ExplorerView":
        """The explorer for the cell that shows it: in a live kernel the sliders of
        :meth:`widget`; when the book's build executes the notebook (:data:`FRAMES_ENV` is
        "1") the frames of :meth:`frames_html`. Nothing is drawn until it is displayed."""
        self.frame_states(count, grid)  # bad arguments fail here, in the notebook
        return ExplorerView(self, count, grid)

    def widget(self):
        """Sliders and a live figure (needs a Jupyter kernel). Returns the ipywidgets box."""
        import ipywidgets as w
        from IPython.display import display

        controls = {n: c.make() for n, c in self.controls.items()}
        out = w.Output()

        def update(**values):
            with out:
                out.clear_output(wait=True)
                fig = self.render(**values)
                display(fig)
                plt.close(fig)

        # interactive_output draws the initial state itself and redraws on every change.
        w.interactive_output(update, controls)
        return w.VBox([w.HBox(list(controls.values())), out])


class ExplorerView:
    """What :meth:`Explorer.show` returns: displayed, it is the live widget in a kernel with a
    front end, the precomputed frames when the build executes the notebook."""

    def __init__(self, explorer: Explorer, count, grid: str):
        self.explorer, self.count, self.grid = explorer, count, grid

    def _ipython_display_(self):
        from IPython.display import display

        mode = os.environ.get(FRAMES_ENV, "")
        if mode == "1":
            text = self.explorer.grid_text(*self.explorer.frame_states(self.count, self.grid)[:2])
            display({"text/html": self.explorer.frames_html(self.count, self.grid),
                     "text/plain": text}, raw=True)
        elif mode != "live" and headless_executor() is not None:
            # no front end to draw a widget, and nbclient may hang on widget messages: the
            # default state as one figure (see the module docstring)
            fig = self.explorer.render()
            display(fig)
            plt.close(fig)
        else:
            display(self.explorer.widget())

    def __repr__(self) -> str:
        names = ", ".join(c.label or n for n, c in self.explorer.controls.items())
        return f"<Explorer of {names}: sliders in Jupyter, precomputed frames on the site>"


#: Programs that execute notebooks with no front end (their kernels' parent process).
HEADLESS = ("jupyter-nbconvert", "nbconvert", "papermill", "jupyter-execute", "nbclient",
            "pytest", "py.test", "jupyter-book", "sphinx-build")


def _parent_command() -> list[str]:
    """The command line of this process's parent ([] where it cannot be read)."""
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        pass
    try:  # macOS and other systems without /proc
        import subprocess

        out = subprocess.run(["ps", "-o", "command=", "-p", str(ppid)], capture_output=True,
                             text=True, timeout=2).stdout
        return out.split()
    except (OSError, subprocess.SubprocessError):
        return []


def headless_executor(command: Sequence[str] | None = None) -> str | None:
    """The name of the headless notebook executor that started this kernel (nbconvert,
    papermill, pytest, ...), or None (a front end such as JupyterLab, or unknown).

    ``command``: the parent's command line (default: read from the system). Only the program
    and, for ``python [-m] X``, the script or module are looked at, not the other arguments."""
    if command is not None and (isinstance(command, (str, bytes))
                                or not all(isinstance(a, str) for a in command)):
        raise TypeError("headless_executor: argument 'command' must be a list of strings (a "
                        f"command line split into its arguments), got {command!r}")
    args = list(_parent_command() if command is None else command)
    if not args:
        return None
    names = [os.path.basename(args[0])]
    if names[0].startswith("python") and len(args) > 1:
        rest = args[1:]
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            rest = rest[1:]
        if rest[:1] == ["-m"] and len(rest) > 1:
            names.append(rest[1].split(".")[0])
        elif rest:
            names.append(os.path.basename(rest[0]))
    for name in names:
        base = name[:-3] if name.endswith(".py") else name
        if base in HEADLESS:
            return base
    return None


_COUNTER = itertools.count()


def _regular(values: Sequence[float], log: bool) -> bool:
    """Whether ``values`` are evenly spaced (on a log scale for ``log``), up to the rounding to
    3 significant digits of the grid: that moves a value by up to 0.5 % of the largest
    magnitude (linear) or 0.5 % of itself (log), so two steps may differ by twice that."""
    if log and min(values) > 0:
        xs, tol = [math.log(v) for v in values], 0.011
    else:
        xs, tol = list(values), 0.011 * max(abs(v) for v in values)
    steps = [b - a for a, b in zip(xs, xs[1:])]
    return len(steps) < 2 or max(steps) - min(steps) <= tol + 1e-12


def _short(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
