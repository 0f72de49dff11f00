"""The book's figure style and the interactive/static Explorer, tested without a browser."""

import matplotlib
import matplotlib.pyplot as plt
import pytest

from softmaxbook import plotting
from softmaxbook.widgets import Choice, Explorer, Slider


def draw(ax, tau, kind="bars"):
    ax.bar([0, 1], [tau, 1.0]) if kind == "bars" else ax.plot([0, 1], [tau, 1.0], label=kind)
    plotting.label(ax, "item", "value")


def test_style_and_palette():
    fig, axes = plotting.figure(ncols=2)
    assert len(axes) == 2
    assert matplotlib.rcParams["axes.prop_cycle"].by_key()["color"][:3] == list(plotting.PALETTE[:3])
    plt.close(fig)
    assert len(set(plotting.PALETTE)) == 8 and plotting.colours(10)[8] == plotting.PALETTE[0]
    with pytest.raises(ValueError, match="argument 'ncols'"):
        plotting.figure(ncols=0)


def test_label_requires_both_axis_labels():
    fig, ax = plotting.figure()
    with pytest.raises(ValueError, match="argument 'ylabel'"):
        plotting.label(ax, "x", "")
    ax.plot([0, 1], label="a line")
    plotting.label(ax, "x", "y", title="t")
    assert ax.get_legend() is not None and ax.get_title() == "t"
    plt.close(fig)


def test_render_and_static_draw_the_requested_states():
    e = Explorer(draw, [Slider("tau", 0.1, 10.0, value=1.0, log=True), Choice("kind", ("bars", "line"), "bars")])
    fig = e.render(tau=5.0)
    assert [p.get_height() for p in fig.axes[0].patches] == [5.0, 1.0]
    plt.close(fig)
    fig = e.static([{"tau": 0.1}, {"tau": 2.0, "kind": "line"}, {"tau": 9.0}, {"tau": 1.0}], ncols=3)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 4 and "tau = 2" in visible[1].get_title()
    assert visible[1].lines[0].get_ydata()[0] == 2.0
    plt.close(fig)


def test_bad_states_and_controls_are_rejected():
    e = Explorer(draw, [Slider("tau", 0.1, 10.0, value=1.0)])
    with pytest.raises(ValueError, match="'tau'=20 is outside"):
        e.render(tau=20)
    with pytest.raises(ValueError, match="unknown control"):
        e.render(temperature=1.0)
    with pytest.raises(ValueError, match="log slider needs 'min' > 0"):
        Slider("t", 0.0, 1.0, value=0.5, log=True)
    with pytest.raises(ValueError, match="must lie in"):
        Slider("t", 0.0, 1.0, value=2.0)
    with pytest.raises(ValueError, match="repeated names"):
        Explorer(draw, [Slider("tau", 0, 1, 0.5), Slider("tau", 0, 1, 0.5)])
    with pytest.raises(TypeError, match="argument 'draw'"):
        Explorer(None, [Slider("tau", 0, 1, 0.5)])
    with pytest.raises(ValueError, match="not one of"):
        Choice("kind", ("a",), "b")


def test_widget_builds_sliders_and_a_live_figure():
    import ipywidgets as w

    calls = []

    def counting_draw(ax, tau):
        calls.append(tau)
        draw(ax, tau)

    e = Explorer(counting_draw, [Slider("tau", 0.1, 10.0, value=1.0, log=True)])
    box = e.widget()
    slider = box.children[0].children[0]
    assert isinstance(slider, w.FloatLogSlider) and slider.value == pytest.approx(1.0)
    assert len(calls) == 1  # the initial state, drawn once
    n = len(calls)
    slider.value = 3.0  # moving the slider redraws with the new value
    assert len(calls) == n + 1 and calls[-1] == pytest.approx(3.0)


# --- the ends of a slider --------------------------------------------------------------------
# A log slider stores log10 of its ends, so at its ends it delivers 10 ** log10(min), which for
# min = 0.05 is 0.049999999999999996: just outside [min, max]. It used to raise there.

def test_log_slider_ends_are_what_the_widget_delivers():
    import math

    import ipywidgets as w

    s = Slider("tau", 0.05, 20.0, value=1.0, log=True)
    lo, hi = s.ends()
    assert lo == 10 ** math.log10(0.05) and lo < 0.05  # the rounding is real
    assert hi == 10 ** math.log10(20.0) and hi > 20.0
    widget = s.make()
    widget.value = 1e-9  # the widget clamps to its own ends
    assert widget.value == lo
    widget.value = 1e9
    assert widget.value == hi


def test_values_at_a_rounded_end_are_clamped_not_rejected():
    seen = []

    def drawing(ax, tau):
        seen.append(tau)
        draw(ax, tau)

    e = Explorer(drawing, [Slider("tau", 0.05, 20.0, value=1.0, log=True)])
    lo, hi = e.controls["tau"].ends()
    for end, exact in ((lo, 0.05), (hi, 20.0)):
        plt.close(e.render(tau=end))
        assert seen[-1] == exact  # the draw function sees the end itself
    # further out than a rounding error is still an error
    with pytest.raises(ValueError, match="outside"):
        e.render(tau=0.0499)
    with pytest.raises(ValueError, match="outside"):
        e.render(tau=20.001)


def test_linear_slider_end_on_its_step_grid():
    s = Slider("alpha", 0.01, 1.0, value=0.3)  # default step (max - min) / 100
    lo, hi = s.ends()
    assert lo == 0.01 and abs(hi - 1.0) < 1e-12
    assert s.validate(hi) == 1.0 and s.validate(1.0 + 1e-12) == 1.0
    assert Slider("k", 2, 12, value=8, step=1, integer=True).ends() == (2, 12)


def test_live_widget_survives_both_ends():
    calls = []

    def counting_draw(ax, tau):
        calls.append(tau)
        draw(ax, tau)

    e = Explorer(counting_draw, [Slider("tau", 0.05, 20.0, value=1.0, log=True)])
    slider = e.widget().children[0].children[0]
    for end in (1e-9, 1e9):  # dragged past the end: the widget delivers its end
        slider.value = end
    assert calls[-2:] == [0.05, 20.0]


def test_static_draws_every_slider_at_both_ends_and_names_a_failing_one():
    calls = []

    def fragile(ax, tau, beta):
        calls.append((tau, beta))
        if beta > 9.99:
            raise ZeroDivisionError("too hot")
        draw(ax, tau)

    e = Explorer(fragile, [Slider("tau", 0.05, 20.0, value=1.0, log=True),
                           Slider("beta", 0.1, 10.0, value=1.0)])
    before = set(plt.get_fignums())
    with pytest.raises(RuntimeError, match=r"slider 'beta' fails at its max end \(beta=10"
                                           r".*ZeroDivisionError: too hot"):
        e.static([{"tau": 1.0}])
    assert set(plt.get_fignums()) - before <= {max(plt.get_fignums())}  # only static's own
    plt.close("all")
    assert (0.05, 1.0) in calls and (20.0, 1.0) in calls and (1.0, 0.1) in calls

    ok = Explorer(draw, [Slider("tau", 0.05, 20.0, value=1.0, log=True),
                         Choice("kind", ("bars", "line"), "bars")])
    before = set(plt.get_fignums())
    fig = ok.static([{"tau": 1.0}])
    assert set(plt.get_fignums()) - before == {fig.number}  # the end figures are closed
    assert ok.check_ends() == 2
    plt.close(fig)


def test_every_chapter_with_sliders_draws_its_static_fallback():
    # Explorer.static drives every slider to both ends, so a chapter's sliders are tested at
    # their ends only if the chapter calls static (nbval executes it).
    import json
    from pathlib import Path

    book = Path(__file__).resolve().parents[1] / "book"
    for path in sorted(book.glob("*.ipynb")):
        code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                         if c["cell_type"] == "code")
        if "Slider(" in code:
            assert ".static(" in code, f"{path.name} has sliders but no Explorer.static call"
