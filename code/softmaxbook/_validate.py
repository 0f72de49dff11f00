"""Argument checks shared by every module of the package.

Every public function of :mod:`softmaxbook` validates its inputs with these helpers, so that bad
input gives one kind of message everywhere: it names the argument and says what is wrong, e.g.
``ValueError: softmax: argument 'x' contains NaN (at index (0, 2))``.

The helpers are private (leading underscore): they are not part of the book's teaching, but they
are tested like everything else (``tests/test_validate.py``).
"""

from __future__ import annotations

import math
from numbers import Real

import torch

__all__ = [
    "as_float_tensor",
    "check_finite",
    "check_no_nan",
    "check_no_posinf",
    "check_dim",
    "check_positive_number",
    "check_int",
    "check_generator",
    "check_reduction",
    "reduce_loss",
]


def _where(func: str) -> str:
    return f"{func}: " if func else ""


def as_float_tensor(x, name: str, func: str = "", *, allow_empty: bool = False) -> torch.Tensor:
    """Return ``x`` if it is a floating-point tensor, else raise a ``TypeError`` naming ``name``.

    Python numbers and lists are *not* converted silently: the package works on tensors, and a
    list of ints passed by mistake should fail loudly, not become float64 by accident.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{_where(func)}argument '{name}' must be a torch.Tensor, got {type(x).__name__}"
        )
    if not x.is_floating_point():
        raise TypeError(
            f"{_where(func)}argument '{name}' must have a floating-point dtype "
            f"(float16, bfloat16, float32 or float64), got {x.dtype}; "
            f"convert it with {name}.float() or {name}.double()"
        )
    if not allow_empty and x.numel() == 0:
        raise ValueError(f"{_where(func)}argument '{name}' is empty (shape {tuple(x.shape)})")
    return x


def _first_index(mask: torch.Tensor):
    idx = mask.nonzero()[0].tolist()
    return tuple(idx) if len(idx) != 1 else idx[0]


def check_no_nan(x: torch.Tensor, name: str, func: str = "") -> None:
    """Raise ``ValueError`` if ``x`` contains a NaN, naming the first position."""
    bad = torch.isnan(x)
    if bool(bad.any()):
        raise ValueError(
            f"{_where(func)}argument '{name}' contains NaN (first at index {_first_index(bad)})"
        )


def check_no_posinf(x: torch.Tensor, name: str, func: str = "") -> None:
    """Raise ``ValueError`` if ``x`` contains +inf (−inf is allowed: it means "impossible")."""
    bad = torch.isposinf(x)
    if bool(bad.any()):
        raise ValueError(
            f"{_where(func)}argument '{name}' contains +inf (first at index {_first_index(bad)}); "
            "only -inf is allowed, meaning 'impossible'"
        )


def check_finite(x: torch.Tensor, name: str, func: str = "") -> None:
    """Raise ``ValueError`` if ``x`` contains NaN or ±inf."""
    check_no_nan(x, name, func)
    bad = torch.isinf(x)
    if bool(bad.any()):
        raise ValueError(
            f"{_where(func)}argument '{name}' contains an infinite value "
            f"(first at index {_first_index(bad)}); it must be finite"
        )


def check_dim(x: torch.Tensor, dim: int, name: str, func: str = "") -> int:
    """Check that ``dim`` is a valid dimension of ``x`` and return it as a non-negative int."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{_where(func)}argument 'dim' must be an int, got {type(dim).__name__}")
    if x.dim() == 0:
        raise ValueError(
            f"{_where(func)}argument '{name}' is a 0-d tensor (a scalar); it needs at least one "
            "dimension to reduce over"
        )
    if not -x.dim() <= dim < x.dim():
        raise ValueError(
            f"{_where(func)}argument 'dim'={dim} is out of range for '{name}' with "
            f"{x.dim()} dimension(s) (shape {tuple(x.shape)})"
        )
    dim = dim % x.dim()
    if x.shape[dim] == 0:
        raise ValueError(
            f"{_where(func)}argument '{name}' has an empty dimension {dim} (shape "
            f"{tuple(x.shape)}); there is nothing to reduce over"
        )
    return dim


def check_positive_number(value, name: str, func: str = "", *, allow_zero: bool = False) -> float:
    """Check that ``value`` is a finite real number > 0 (or >= 0) and return it as a float."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(
                f"{_where(func)}argument '{name}' must be a number, got a tensor of shape "
                f"{tuple(value.shape)}"
            )
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{_where(func)}argument '{name}' must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{_where(func)}argument '{name}' must be finite, got {value}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{_where(func)}argument '{name}' must be {bound}, got {value}")
    return value


def check_int(value, name: str, func: str = "", *, minimum: int | None = None,
              maximum: int | None = None) -> int:
    """Check that ``value`` is an int in ``[minimum, maximum]`` and return it."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{_where(func)}argument '{name}' must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{_where(func)}argument '{name}' must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{_where(func)}argument '{name}' must be <= {maximum}, got {value}")
    return value


def check_generator(generator, device: torch.device | str | None = None, func: str = ""):
    """Check that ``generator`` is ``None`` or a ``torch.Generator`` (on ``device`` if given)."""
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{_where(func)}argument 'generator' must be a torch.Generator or None, "
            f"got {type(generator).__name__}"
        )
    if device is not None and torch.device(device).type != generator.device.type:
        raise ValueError(
            f"{_where(func)}argument 'generator' is on {generator.device.type} but the "
            f"tensors are on {torch.device(device).type}; make the generator with "
            f"torch.Generator(device=...)"
        )
    return generator


#: The reductions a loss accepts (as in ``torch.nn.functional``).
REDUCTIONS = ("mean", "sum", "none")


def check_reduction(reduction, func: str = "") -> str:
    """``reduction`` itself if it is one of :data:`REDUCTIONS`, else a ``ValueError`` naming it."""
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"{_where(func)}argument 'reduction' must be one of {REDUCTIONS}, "
                         f"got {reduction!r}")
    return reduction


def reduce_loss(loss: torch.Tensor, reduction: str) -> torch.Tensor:
    """Per-example losses reduced as :func:`check_reduction` accepted: mean, sum or as they are."""
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss
