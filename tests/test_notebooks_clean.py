"""Every notebook is stored without outputs and with clean metadata (the build executes them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import BOOK, ROOT, chapter_notebooks

NOTEBOOKS = sorted(BOOK.glob("*.ipynb")) + [ROOT / "tools" / "chapter_template.ipynb"]
ALLOWED_NB_METADATA = {"kernelspec", "language_info"}
ALLOWED_CELL_METADATA = {"tags", "mystnb"}
# what a cell's mystnb metadata may hold: a figure's caption and name, an image's alt text
ALLOWED_MYSTNB = {"figure": {"caption", "name"}, "image": {"alt"}}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_without_outputs(path: Path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has outputs"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_clean_metadata(path: Path):
    nb = json.loads(path.read_text())
    extra = set(nb.get("metadata", {})) - ALLOWED_NB_METADATA
    assert not extra, f"{path.name}: notebook metadata has {sorted(extra)} (widget state, etc.)"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    for i, cell in enumerate(nb["cells"]):
        extra = set(cell.get("metadata", {})) - ALLOWED_CELL_METADATA
        assert not extra, f"{path.name} cell {i}: metadata {sorted(extra)}"
        for key, value in cell.get("metadata", {}).get("mystnb", {}).items():
            assert key in ALLOWED_MYSTNB, f"{path.name} cell {i}: mystnb metadata {key!r}"
            extra = set(value) - ALLOWED_MYSTNB[key]
            assert not extra, f"{path.name} cell {i}: mystnb {key} has {sorted(extra)}"


def test_every_chapter_is_in_the_toc():
    in_toc = {p.name for p in chapter_notebooks()}
    on_disk = {p.name for p in BOOK.glob("*.ipynb")}
    assert on_disk == in_toc, f"notebooks not in _toc.yml: {sorted(on_disk - in_toc)}"


@pytest.mark.parametrize("path", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.name)
def test_code_lines_fit_the_page(path: Path):
    """Code lines are at most 76 columns (74 in solution cells, whose box is narrower): the
    browser test finds a longer one only after a full build; this finds it in a second."""
    nb = json.loads(path.read_text())
    long = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        limit = 74 if "solution" in cell.get("metadata", {}).get("tags", []) else 76
        long += [f"cell {i} ({len(line)} > {limit}): {line}"
                 for line in "".join(cell["source"]).splitlines() if len(line) > limit]
    assert not long, f"{path.name}: code lines too wide for the page:\n" + "\n".join(long)
