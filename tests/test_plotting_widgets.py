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
