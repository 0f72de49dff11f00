"""Interactive figures that also work on a page with no kernel.

A rendered page of the book has no Python behind it, so a slider there would move and change
nothing. Each interactive in the book is therefore an :class:`Explorer`, used in two cells:

.. code-block:: python

    explorer = Explorer(draw, [Slider("tau", 0.05, 10.0, value=1.0, log=True, label="τ")])
    explorer.widget()            # cell tagged `remove-output`: live sliders in Jupyter
    explorer.static([{"tau": 0.1}, {"tau": 1.0}, {"tau": 10.0}])   # the book's static fallback

``draw(ax, **values)`` draws one state onto a matplotlib axes. :meth:`Explorer.render` draws one
state into a new figure and returns it, which is what the slider callback does, so the callbacks
are tested without a browser (``tests/test_plotting_widgets.py``). :meth:`Explorer.static` also
draws every slider at both ends, as the widget delivers them, so an end that crashes fails the
chapter's execution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt

from . import plotting

__all__ = ["Slider", "Choice", "Explorer"]


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


def _short(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
