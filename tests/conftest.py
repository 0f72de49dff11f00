"""Shared test configuration.

The test command (`python3 tools/book.py test`) runs pytest on `tests/` and, with `--nbval-lax`,
on every notebook in `book/`: the notebooks' `assert` cells are the book's claims.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")  # tests never open windows

# The test command runs two pytest workers on a 2-core machine: one torch thread each. With two
# threads per worker the small tensors of the tests wait on each other (measured 7x slower on a
# busy machine).
import torch  # noqa: E402

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"


def chapter_notebooks() -> list[Path]:
    """The chapter notebooks of the book, in toc order (read from _toc.yml)."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = []
    for part in toc.get("parts", []):
        for chapter in part.get("chapters", []):
            path = ROOT / (chapter["file"] + ".ipynb")
            if path.exists():
                files.append(path)
    return files


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


SKIP_MARK = "BROWSER TESTS SKIPPED"


def skip_or_fail_browser(reason: str):
    """Browser tests must run in CI; a local run without a browser skips them, loudly."""
    if in_ci():
        pytest.fail(f"browser tests cannot run in CI: {reason}")
    pytest.skip(f"{SKIP_MARK}: {reason}")


def pytest_terminal_summary(terminalreporter):
    # Works under xdist too: skip reports reach the controller with their reason.
    reasons = {str(r.longrepr[2]) for r in terminalreporter.stats.get("skipped", [])
               if isinstance(r.longrepr, tuple) and SKIP_MARK in str(r.longrepr[2])}
    if reasons:
        tr = terminalreporter
        tr.section("BROWSER TESTS WERE SKIPPED", sep="!", red=True, bold=True)
        for reason in sorted(reasons):
            tr.write_line(reason, red=True, bold=True)
        tr.write_line("install Chromium (apt-get install -y chromium) and run the tests again; "
                      "CI always runs them.", red=True)
