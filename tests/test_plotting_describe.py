"""softmaxbook.plotting.describe: a figure's text form, used by the site as its alt text."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from softmaxbook import plotting


def test_describe_names_panels_labels_and_legends():
    fig, axes = plotting.figure(ncols=2)
    axes[0].plot([0, 1], [1, 0], label=r"$\tau = 0.5$")
    plotting.label(axes[0], r"logit $z$", "loss", title="Squared error")
    image = axes[1].imshow(np.zeros((2, 2)))
    fig.colorbar(image, ax=axes[1])
    plotting.label(axes[1], "class", "example")
    fig.suptitle(r"Softmax of $\mathrm{logits}$")
    text = repr(fig)
    assert text == plotting.describe(fig)
    assert text == ("Figure: Softmax of logits. Panel 1, Squared error: loss against logit z "
                    "(tau = 0.5). Panel 2, image, example by class. With 1 colour bar.")
    plt.close(fig)


def test_describe_one_panel_and_bad_input():
    fig, ax = plotting.figure()
    ax.plot([0, 1])
    plotting.label(ax, "step", "error")
    assert repr(fig) == "Figure. Error against step."
    plt.close(fig)
    with pytest.raises(ValueError, match="argument 'fig'"):
        plotting.describe("not a figure")
