"""One seed per chapter, overridable from the environment.

Every random draw in a chapter comes from the seed that the chapter sets once, in its first code
cell::

    SEED, generator = seed_everything(2019)   # SOFTMAXBOOK_SEED overrides 2019

The environment variable ``SOFTMAXBOOK_SEED`` (a non-negative integer) replaces the chapter's
default, so that the same notebook can be executed under other seeds
(``python3 tools/book.py test-seeds`` does this for every chapter). A claim the book checks with an
``assert`` must hold under every seed, not only under the default one.

Besides the returned ``torch.Generator``, :func:`seed_everything` seeds the global random state of
``torch``, ``numpy`` and ``random``, because some draws do not take a generator (the initial
weights of ``torch.nn`` layers, scikit-learn's ``random_state=None``). Independent streams for
separate experiments come from :func:`generator` with a name: the same (seed, name) always gives
the same stream, and different names give unrelated streams, so adding an experiment does not
change the draws of another.
"""

from __future__ import annotations

import hashlib
import os
import random

import numpy as np
import torch

__all__ = ["ENV_VAR", "chapter_seed", "seed_everything", "current_seed", "derive_seed",
           "generator", "numpy_rng"]

#: The environment variable that overrides every chapter's default seed.
ENV_VAR = "SOFTMAXBOOK_SEED"

_MAX_SEED = 2**63 - 1
_current: int | None = None


def _check_seed(seed, name: str, where: str) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{where}: argument '{name}' must be an int, got {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"{where}: argument '{name}' must be in [0, 2**63 - 1], got {seed}")
    return seed


def chapter_seed(default: int) -> int:
    """The seed a chapter uses: ``SOFTMAXBOOK_SEED`` when it is set, else ``default``.

    Raises ``ValueError`` when the environment variable is set but is not a non-negative integer
    (a typo must not silently fall back to the default).
    """
    default = _check_seed(default, "default", "chapter_seed")
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"chapter_seed: environment variable {ENV_VAR} must be a non-negative "
                         f"integer, got {text!r}") from None
    if not 0 <= value <= _MAX_SEED:
        raise ValueError(f"chapter_seed: environment variable {ENV_VAR} must be in "
                         f"[0, 2**63 - 1], got {value}")
    return value


def seed_everything(default: int) -> tuple[int, torch.Generator]:
    """Set the chapter's seed once: returns ``(seed, generator)``.

    ``seed`` is :func:`chapter_seed` of ``default``; ``generator`` is a CPU ``torch.Generator``
    seeded with it. The global states of ``torch``, ``numpy.random`` and ``random`` are seeded
    too (derived from ``seed``), for the draws that take no generator.
    """
    seed = chapter_seed(default)
    global _current
    _current = seed
    torch.manual_seed(derive_seed(seed, "torch-global"))
    np.random.seed(derive_seed(seed, "numpy-global") % 2**32)
    random.seed(derive_seed(seed, "python-global"))
    return seed, torch.Generator().manual_seed(seed)


def current_seed() -> int:
    """The seed set by the last :func:`seed_everything` call (``RuntimeError`` before any)."""
    if _current is None:
        raise RuntimeError("current_seed: no seed is set yet; call seed_everything(default) first")
    return _current


def derive_seed(seed: int, name: str) -> int:
    """A seed for the stream ``name`` derived from ``seed`` (SHA-256; stable across runs and
    platforms, unlike Python's ``hash``)."""
    seed = _check_seed(seed, "seed", "derive_seed")
    if not isinstance(name, str) or not name:
        raise ValueError(f"derive_seed: argument 'name' must be a non-empty str, got {name!r}")
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & _MAX_SEED


def generator(name: str, *, seed: int | None = None, device=None) -> torch.Generator:
    """A ``torch.Generator`` for the independent stream ``name`` of the chapter's seed.

    ``seed`` defaults to :func:`current_seed`; ``device`` to the CPU.
    """
    base = current_seed() if seed is None else seed
    g = torch.Generator(device=device) if device is not None else torch.Generator()
    return g.manual_seed(derive_seed(base, name))


def numpy_rng(name: str, *, seed: int | None = None) -> np.random.Generator:
    """A NumPy ``Generator`` for the stream ``name`` (for SciPy and scikit-learn)."""
    base = current_seed() if seed is None else seed
    return np.random.default_rng(derive_seed(base, name))
