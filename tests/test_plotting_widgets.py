"""The book's figure style and the interactive/static Explorer, tested without a browser."""

import os
from pathlib import Path

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


# --- kernel-free explorers: the frames the build draws (issue 24) ------------------------------

def _spacing_ratios(values):
    return [b / a for a, b in zip(values, values[1:])]


def test_slider_grid_spacing_counts_ends_and_default():
    tau = Slider("tau", 0.05, 20.0, value=1.0, log=True).grid(15)
    assert len(tau) >= 15 and tau[0] == 0.05 and tau[-1] == 20.0 and 1.0 in tau
    assert tau == sorted(set(tau))
    ratios = _spacing_ratios(tau)  # log-spaced: about the same ratio between neighbours
    assert max(ratios) / min(ratios) < 1.2
    alpha = Slider("alpha", 0.01, 1.0, value=0.3).grid(15)
    gaps = [b - a for a, b in zip(alpha, alpha[1:])]  # linear: about the same gap
    assert len(alpha) >= 15 and 0.3 in alpha and max(gaps) / min(gaps) < 1.5
    # every value is shown with the digits it is drawn with
    assert all(float(f"{v:.3g}") == v for v in tau + alpha)
    # an integer slider with few positions: all of them, even fewer than 15
    assert Slider("k", 2, 12, value=8, step=1, integer=True).grid(15) == list(range(2, 13))
    assert Slider("s", 0, 150, value=50, step=25, integer=True).grid() == [0, 25, 50, 75, 100,
                                                                         125, 150]
    # a stepped slider with up to 2 * count positions: every one, exactly (no 0.15000000000000002)
    power = Slider("power", 0.0, 1.0, value=0.75, step=0.05).grid(15)
    assert len(power) == 21 and 0.15 in power and 0.75 in power
    # a log-like integer slider: distinct, log-spaced integers
    k = Slider("k", 1, 100, value=10, integer=True, log=True).grid(15)
    assert len(k) >= 15 and k[:4] == [1, 2, 3, 4] and 10 in k and k[-1] == 100
    assert all(isinstance(v, int) for v in k)
    assert Choice("kind", ("a", "b", "c"), "b").grid() == ["a", "b", "c"]


def test_frame_states_product_and_sweep():
    e = Explorer(draw, [Slider("tau", 0.1, 10.0, value=1.0, log=True),
                        Choice("kind", ("bars", "line"), "bars")])
    mode, values, states = e.frame_states()
    assert mode == "product" and len(values["tau"]) >= 15 and values["kind"] == ["bars", "line"]
    assert len(states) == len(values["tau"]) * 2
    assert len({k for k, _ in states}) == len(states)  # one state per key
    for key, state in states:
        assert state == {"tau": values["tau"][key[0]], "kind": values["kind"][key[1]]}
    mode, values, states = e.frame_states(grid="sweep")
    default = values["tau"].index(1.0)
    assert mode == "sweep" and len(states) == len(values["tau"]) + 1
    # at most one control away from its default in every state
    assert all(k[0] == default or k[1] == 0 for k, _ in states)
    # one control: 25 values by default; per-control counts
    one = Explorer(draw, [Slider("tau", 0.1, 10.0, value=1.0, log=True)])
    assert len(one.frame_states()[2]) >= 25
    mode, values, _ = e.frame_states(count={"tau": 20})
    assert len(values["tau"]) >= 20
    # "auto" takes the sweep when the product would be too large
    big = Explorer(lambda ax, a, b: None, [Slider("a", 0.0, 1.0, 0.5), Slider("b", 0.0, 1.0, 0.5)])
    assert big.frame_states(count=7)[0] == "product"  # 49 <= MAX_PRODUCT
    assert big.frame_states(count=15)[0] == "sweep"  # 225 > MAX_PRODUCT


def test_frames_bad_arguments_name_the_argument():
    e = Explorer(draw, [Slider("tau", 0.1, 10.0, value=1.0, log=True)])
    with pytest.raises(ValueError, match="argument 'grid'"):
        e.frame_states(grid="diagonal")
    with pytest.raises(ValueError, match="argument 'count'"):
        e.frame_states(count=1)
    with pytest.raises(ValueError, match="argument 'count' names unknown control"):
        e.frame_states(count={"beta": 15})
    with pytest.raises(ValueError, match="argument 'count'"):
        Slider("tau", 0.1, 10.0, value=1.0).grid(True)
    with pytest.raises(ValueError, match="argument 'fmt'"):
        e.frames(fmt="gif")
    with pytest.raises(ValueError, match="argument 'dpi'"):
        e.frames(dpi=0)
    with pytest.raises(ValueError, match="argument 'grid'"):
        e.show(grid="diagonal")  # fails in the notebook, before anything is drawn


def test_frames_draw_every_state_with_its_own_alt_text():
    import io

    from PIL import Image

    e = Explorer(draw, [Slider("tau", 0.1, 10.0, value=1.0, log=True, label="τ"),
                        Choice("kind", ("bars", "line"), "bars")], height=2.0)
    before = set(plt.get_fignums())
    data = e.frames(count=3, dpi=40)
    assert set(plt.get_fignums()) == before  # every frame's figure is closed
    frames = data["frames"]
    assert len(frames) == len(data["values"]["tau"]) * 2
    images = [img for _, _, img, _ in frames]
    assert len(set(images)) == len(images)  # every state looks different
    first = Image.open(io.BytesIO(images[0]))
    assert first.format == "WEBP" and first.size == data["size"] == (280, 80)
    alts = [alt for _, _, _, alt in frames]
    assert len(set(alts)) == len(alts)
    assert alts[0].startswith("τ = 0.1, kind = bars. Value against item")


def test_frames_name_a_state_that_fails():
    def fragile(ax, tau):
        if tau > 5:
            raise ZeroDivisionError("too hot")
        draw(ax, tau)

    e = Explorer(fragile, [Slider("tau", 0.1, 10.0, value=1.0, log=True)])
    with pytest.raises(RuntimeError, match=r"state tau = 5\.\d+ fails to draw: ZeroDivisionError"):
        e.frames(count=15, dpi=30)
    plt.close("all")


def test_frames_html_has_labelled_controls_outputs_and_every_frame():
    import html as htmllib
    import json
    import re

    e = Explorer(draw, [Slider("tau", 0.1, 10.0, value=1.0, log=True, label="τ"),
                        Choice("kind", ("bars", "line"), "line")])
    page = e.frames_html(count=4, dpi=30)
    mode, values, states = e.frame_states(count=4)
    ids = re.findall(r'<input type="range" id="([^"]+)"', page)
    assert len(ids) == 1
    assert f'<label for="{ids[0]}">τ</label>' in page and f'<output for="{ids[0]}"' in page
    assert f'max="{len(values["tau"]) - 1}"' in page and 'value="' in page
    assert re.search(r'<select id="[^"]+" data-name="kind"', page)
    assert '<option value="1" selected>line</option>' in page
    data = json.loads(re.search(r'<script type="application/json" class="sbx-data">(.*?)</script>',
                                page).group(1))
    assert data["mode"] == "product" and len(data["frames"]) == len(states)
    assert all(src.startswith("data:image/webp;base64,") for src, _ in data["frames"].values())
    assert [c["text"] for c in data["controls"]][1] == ["bars", "line"]
    # the default frame is the one shown, with its alt
    default = f'{values["tau"].index(1.0)},1'
    assert htmllib.escape(data["frames"][default][1]) in page
    assert 'loading="lazy"' in page
    note = re.search(r'<p class="sbx-note">(.*?)</p>', page).group(1)
    assert "every combination" in note and "log-spaced" in note
    # two explorers on one page get different ids
    assert re.search(r'id="(sbx-\w+)"', page).group(1) != re.search(
        r'id="(sbx-\w+)"', e.frames_html(count=2, dpi=30)).group(1)


def test_show_is_the_widget_live_and_the_frames_in_the_build(monkeypatch):
    import ipywidgets as w
    from IPython.core.formatters import DisplayFormatter

    from softmaxbook import widgets

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append((a, k)))
    e = Explorer(draw, [Slider("tau", 0.1, 10.0, value=1.0, log=True)])
    view = e.show(count=3)
    assert "sliders in Jupyter" in repr(view)
    monkeypatch.delenv(widgets.FRAMES_ENV, raising=False)
    monkeypatch.setattr(widgets, "_parent_command", lambda: ["/usr/bin/python3",
                                                             "/usr/bin/jupyter-lab"])
    view._ipython_display_()
    assert isinstance(shown[-1][0][0], w.VBox)  # live: the ipywidget
    monkeypatch.setenv(widgets.FRAMES_ENV, "1")
    view._ipython_display_()
    bundle = shown[-1][0][0]
    assert shown[-1][1] == {"raw": True} and 'class="sbx-explorer"' in bundle["text/html"]
    assert bundle["text/plain"].startswith("3 figures drawn in advance")
    assert DisplayFormatter  # IPython calls _ipython_display_ before any other repr
    plt.close("all")


@pytest.mark.parametrize("command, name", [
    (["/v/bin/python3.11", "/v/bin/jupyter-nbconvert", "--to", "notebook", "--execute"],
     "jupyter-nbconvert"),
    (["/v/bin/python", "-m", "pytest", "--nbval-lax", "book/02_choice.ipynb"], "pytest"),
    (["papermill", "in.ipynb", "out.ipynb"], "papermill"),
    (["python", "-u", "-m", "nbclient.cli", "x.ipynb"], "nbclient"),
    (["/v/bin/python", "/v/bin/jupyter-execute", "x.ipynb"], "jupyter-execute"),
    (["/v/bin/python", "/v/bin/jupyter-lab"], None),
    (["/v/bin/python", "-m", "jupyterlab"], None),
    (["/v/bin/python", "/home/u/pytest-notes/jupyter-lab", "--notebook-dir=/papermill"], None),
    ([], None),
])
def test_headless_executor_is_read_from_the_program_only(command, name):
    from softmaxbook.widgets import headless_executor

    assert headless_executor(command) == name


def test_show_under_a_headless_executor_draws_one_figure_and_opens_no_widget(monkeypatch):
    """nbconvert --execute of chapter 2 once waited 14 minutes at 0 % CPU on the explorer cell's
    widget messages (jupyter/nbclient#312): under such an executor no widget is opened."""
    from matplotlib.figure import Figure

    from softmaxbook import widgets

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append((a, k)))
    monkeypatch.delenv(widgets.FRAMES_ENV, raising=False)
    monkeypatch.setattr(widgets, "_parent_command",
                        lambda: ["/v/bin/python", "/v/bin/jupyter-nbconvert", "--execute"])
    made = []
    monkeypatch.setattr(Explorer, "widget", lambda self: made.append(self))
    view = Explorer(draw, [Slider("tau", 0.1, 10.0, value=1.0, log=True)]).show(count=3)
    view._ipython_display_()
    assert made == [] and isinstance(shown[-1][0][0], Figure)
    monkeypatch.setenv(widgets.FRAMES_ENV, "live")  # the way to force the widget
    view._ipython_display_()
    assert len(made) == 1
    plt.close("all")


def test_nbconvert_executes_an_explorer_cell_without_a_widget(tmp_path):
    """End to end: `jupyter nbconvert --execute` of a notebook with an explorer finishes and
    saves the default state as a PNG (no widget view)."""
    import subprocess
    import sys

    import nbformat

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(
            "import numpy as np\nfrom softmaxbook.widgets import Explorer, Slider\n\n"
            "def draw(ax, t=1.0):\n    x = np.linspace(-3, 3, 50)\n"
            "    ax.plot(x, np.tanh(t * x))\n\n"
            "explorer = Explorer(draw, [Slider('t', 0.1, 3.0, 1.0)])"),
        nbformat.v4.new_code_cell("explorer.show()"),
        nbformat.v4.new_code_cell("print('after')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path = tmp_path / "w.ipynb"
    nbformat.write(nb, path)
    env = {k: v for k, v in os.environ.items() if k != "SOFTMAXBOOK_EXPLORER_FRAMES"}
    jupyter = Path(sys.executable).with_name("jupyter")
    subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute", "--inplace",
                    "--ExecutePreprocessor.timeout=240", str(path)], check=True, env=env,
                   timeout=300, capture_output=True)
    out = nbformat.read(path, as_version=4)
    kinds = [k for o in out.cells[1].outputs for k in o.get("data", {})]
    assert "image/png" in kinds and not any("widget" in k for k in kinds), kinds
    assert out.cells[2].outputs[0]["text"] == "after\n"


def test_describe_keeps_greek_and_names_a_drawing_without_axes():
    """The review (R3) read the alt text "τ = 0.5. Τ = 0.5: values against position." (a capital
    tau, and words that describe nothing) under chapter 7's simplex explorer."""
    fig, ax = plotting.figure()
    ax.set_title("τ = 0.5")
    ax.set_axis_off()
    assert plotting.describe(fig) == "Figure. τ = 0.5: a drawing without axes."
    fig2, ax2 = plotting.figure()
    ax2.set_title("loss by step")
    ax2.set_xlabel("step")
    assert plotting.describe(fig2) == "Figure. Loss by step: values against step."
    plt.close("all")


@pytest.mark.parametrize("slider, swapped", [
    (Slider("a", -1.0, 1.0, 0.3), True),          # 0.3 replaces 0.333: not evenly spaced
    (Slider("b", -1.0, 1.0, 0.0), False),
    (Slider("t", -3.0, 1.0, 0.0), False),         # 3-digit rounding is not a swap
    (Slider("tau", 0.05, 10.0, 0.7, log=True), True),
    (Slider("tau", 0.1, 10.0, 1.0, log=True), False),
])
def test_grid_sentence_says_where_the_default_breaks_the_spacing(slider, swapped):
    e = Explorer(draw, [slider])
    text = e.grid_text(*e.frame_states()[:2])
    assert ("replaces the value nearest to it" in text) == swapped, text


def test_headless_executor_names_a_bad_command():
    from softmaxbook.widgets import headless_executor

    with pytest.raises(TypeError, match="argument 'command'"):
        headless_executor("jupyter-nbconvert --execute")
    with pytest.raises(TypeError, match="argument 'command'"):
        headless_executor([1, 2])
