"""Checks for the book's coding exercises.

A coding exercise in a chapter looks like this (see CONTRIBUTING.md, "Exercises")::

    [markdown]  ```{exercise-start} ... ```  the task  ```{exercise-end}```
    [markdown]  ```{solution-start} softmax-stable-lse  :class: dropdown```
    [code, tag "solution"]  def stable_logsumexp(x): ...      <- the learner's cell
    [markdown]  ```{solution-end}```
    [code]  check("softmax-stable-lse", stable_logsumexp)

``check(label, answer)`` compares the learner's object with the reference on several inputs. When
the answer is right it prints one line and returns ``True``. When it is wrong it raises
:class:`ExerciseCheckFailed`, an ``AssertionError`` whose message says which exercise, for which
input, what was expected and what came back, with a hint. In Jupyter the message is shown without
a traceback (``_render_traceback_``); under pytest/nbval it fails the cell, so a broken reference
solution fails CI.

Checks are registered per chapter in ``softmaxbook.exercises.<topic>`` (the label's first word is
the topic) with the :func:`exercise` decorator. Authors of checks use :func:`call` (runs the
learner's function, turning a stub's ``NotImplementedError`` or a crash into a clear message) and
the comparison helpers :func:`expect_close`, :func:`expect_equal`, :func:`expect_true`.

A check draws its random inputs only from :func:`check_generator` ``(seed)``. In a notebook (and
in the tests) the per-run salt is 0 and the inputs are the public ones, the same every time. The
grader runs each check under a secret salt of its own (:func:`salted`), which changes every random
input, and a check adds salted variants of its fixed edge cases when :func:`check_salt` is not 0:
answers precomputed for the public inputs earn nothing there.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import sys
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = [
    "CheckPassed",
    "ExerciseCheckFailed",
    "check",
    "exercise",
    "registered",
    "call",
    "expect_answered",
    "expect_close",
    "expect_equal",
    "expect_true",
    "precision_hint",
    "expect_formula",
    "fail_at_worst_entry",
    "describe",
    "forbidden",
    "watch_calls",
    "ExerciseLabelError",
    "check_generator",
    "check_salt",
    "salted",
]


class ExerciseCheckFailed(AssertionError):
    """Raised by :func:`check` when an answer is not (yet) right; the message says why."""

    def _render_traceback_(self):  # IPython shows this instead of a traceback
        return [f"\x1b[31m{_wrap('✗ ' + self.args[0])}\x1b[0m"]


class ExerciseLabelError(ValueError):
    """Raised by :func:`check` for a label that names no exercise; shown as one line."""

    def _render_traceback_(self):  # IPython shows this instead of a traceback
        return [f"\x1b[31m{_wrap('✗ ' + self.args[0])}\x1b[0m"]


def _wrap(text: str, width: int = 76) -> str:
    """Wrap each line of a message to ``width`` columns (the book's code width), continuation
    lines indented two spaces more than the line they continue."""
    out = []
    for line in text.split("\n"):
        indent = line[:len(line) - len(line.lstrip(" "))]
        out.append(textwrap.fill(line, width=width, subsequent_indent=indent + "  ",
                                 break_long_words=False, break_on_hyphens=False) or line)
    return "\n".join(out)


@dataclass(frozen=True)
class _Exercise:
    label: str
    title: str
    checker: Callable[[Any], int | None]


_REGISTRY: dict[str, _Exercise] = {}
_current: list[_Exercise] = []  # the exercise whose checker is running (for messages)


def exercise(label: str, title: str):
    """Register ``checker(answer)`` as the check of exercise ``label``.

    The checker raises :class:`ExerciseCheckFailed` (through the ``expect_*`` helpers) when the
    answer is wrong, and may return the number of cases it checked.
    """
    if not isinstance(label, str) or "-" not in label:
        raise ValueError(f"exercise: argument 'label' must look like '<topic>-<name>', got {label!r}")

    def register(checker):
        if label in _REGISTRY:
            raise ValueError(f"exercise: label {label!r} is registered twice")
        _REGISTRY[label] = _Exercise(label, title, checker)
        return checker

    return register


def _load(label: str) -> _Exercise:
    if not isinstance(label, str):
        raise TypeError(f"check: argument 'label' must be a str, got {type(label).__name__}")
    topic = label.split("-", 1)[0]
    if label not in _REGISTRY:
        try:
            importlib.import_module(f"{__name__}.{topic}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{topic}":
                raise
    if label not in _REGISTRY:
        same_topic = sorted(k for k in _REGISTRY if k.split("-", 1)[0] == topic)
        known = ", ".join(same_topic or sorted(_REGISTRY)) or "none"
        raise ExerciseLabelError(f"check: argument 'label' {label!r} is not a known exercise "
                                 f"(valid labels: {known})")
    return _REGISTRY[label]


def registered(topic: str | None = None) -> list[str]:
    """Labels of all registered exercises (importing the topic's module first), sorted."""
    if topic is not None:
        importlib.import_module(f"{__name__}.{topic}")
        return sorted(k for k in _REGISTRY if k.split("-", 1)[0] == topic)
    return sorted(_REGISTRY)


def _fail(message: str, hint: str | None = None):
    ex = _current[-1] if _current else None
    head = f"Exercise {ex.label} ({ex.title}): " if ex else ""
    text = head + message
    if hint:
        text += f"\nHint: {hint}"
    raise ExerciseCheckFailed(text)


class CheckPassed:
    """What :func:`check` returns for a right answer: truthy, and silent in Jupyter.

    The ✓ line is printed by :func:`check`; in a notebook this object then displays nothing (no
    stray ``True`` under the message), while ``assert check(...)`` still works in scripts and tests.
    """

    def __init__(self, message: str):
        self.message = message

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return self.message

    def _ipython_display_(self) -> None:
        pass


def check(label: str, answer: Any) -> CheckPassed:
    """Check the learner's ``answer`` to exercise ``label``; print a line and return a truthy
    :class:`CheckPassed` if it is right.

    Raises
    ------
    ExerciseCheckFailed
        With a message naming the exercise, the input, what was expected and what came back.
    """
    ex = _load(label)
    _current.append(ex)
    try:
        expect_answered(answer)
        n = ex.checker(answer)
    finally:
        _current.pop()
    cases = f" on {n} test cases" if isinstance(n, int) and n > 1 else ""
    message = f"✓ Exercise {label} ({ex.title}): correct{cases}."
    # Wrapped to the width of the book's code lines, so the line does not scroll on the page.
    print(_wrap(message))
    return CheckPassed(message)


# ---------------------------------------------------------------------------------------------
# The checks' random inputs: public (salt 0) in a notebook, secret per run under the grader
# ---------------------------------------------------------------------------------------------
_SALT = [0]


def check_salt() -> int:
    """The salt of the checks' inputs in this run: 0 (the public inputs) unless the grader set
    one with :func:`salted`. A check adds salted variants of its fixed cases when it is not 0."""
    return _SALT[0]


@contextmanager
def salted(salt: int):
    """Run the checks inside the block under ``salt`` (0: the public inputs). The grader draws
    a fresh secret salt per notebook; its trusted replay uses the same one, so both sides of the
    grader make the same inputs."""
    if type(salt) is not int or salt < 0:
        raise ValueError(f"salted: argument 'salt' must be an int >= 0, got {salt!r}")
    old = _SALT[0]
    _SALT[0] = salt
    try:
        yield salt
    finally:
        _SALT[0] = old


def check_generator(seed: int) -> torch.Generator:
    """The generator of a check's random inputs: ``torch.Generator().manual_seed(seed)`` under
    salt 0 (the public inputs of the notebook's ``check()``), else seeded from ``seed`` mixed with
    the run's salt (SHA-256), so that every random input changes with the salt."""
    salt = _SALT[0]
    if salt == 0:
        return torch.Generator().manual_seed(seed)
    h = hashlib.sha256(f"softmaxbook-check-inputs:{seed}:{salt}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(h[:8], "little") >> 1)


# ---------------------------------------------------------------------------------------------
# Helpers for writing checkers
# ---------------------------------------------------------------------------------------------

def describe(value: Any, limit: int = 8, digits: int = 6) -> str:
    """A short, readable description of a value for a message (tensors abbreviated)."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().flatten()
        items = ", ".join(_fmt(float(v), digits) if value.is_floating_point() else str(int(v))
                          for v in flat[:limit])
        more = ", …" if flat.numel() > limit else ""
        shape = f" (shape {tuple(value.shape)}, {value.dtype})" if value.dim() > 0 else ""
        body = f"[{items}{more}]" if value.dim() > 0 else items
        return f"tensor({body}){shape}"
    if isinstance(value, float):
        return _fmt(value, digits)
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _fmt(v: float, digits: int = 6) -> str:
    if math.isnan(v) or math.isinf(v):
        return str(v)
    return f"{v:.{digits}g}"


def _values_only(text: str) -> str:
    """A description without its dtype, to tell whether two descriptions *look* the same."""
    return text.split(" (shape")[0]


def _mismatch(got: Any, expected: Any, what: str, input_desc: str) -> str:
    """'expected ... but got ...' that never shows two identical-looking values: where six
    digits agree, the values are shown with all 17, the dtypes are named when they differ, and
    the first differing entry is pointed out when it is not among those shown."""
    shown_e, shown_g = describe(expected), describe(got)
    if _values_only(shown_e) == _values_only(shown_g):
        shown_e, shown_g = describe(expected, digits=17), describe(got, digits=17)
    text = f"for input {input_desc}\n  expected {what} {shown_e}\n  but got{' ' * (len(what) + 3)}{shown_g}"
    if isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor):
        if got.dtype != expected.dtype:
            text += f"\n  (your {what} is {got.dtype}; the expected one is {expected.dtype})"
        if got.shape == expected.shape and got.numel() > 8:
            g, e = got.detach().cpu().flatten(), expected.detach().cpu().flatten()
            g, e = g.to(torch.float64) if g.is_floating_point() else g, e.to(g.dtype)
            differ = torch.nonzero(~((g == e) | (g.isnan() & e.isnan()) if g.is_floating_point()
                                     else g == e)).flatten()
            if differ.numel() and int(differ[0]) >= 8:
                i = int(differ[0])
                index = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), got.shape))
                text += (f"\n  (first difference at index {index}: expected "
                         f"{_fmt(float(e[i]), 17)}, got {_fmt(float(g[i]), 17)})")
    return text


def expect_answered(answer: Any) -> None:
    """Fail with a friendly message if ``answer`` is still the stub's ``...`` or ``None``."""
    if answer is Ellipsis or answer is None:
        _fail("no answer yet: the value is still `...`. Replace it with your answer and run the "
              "cell again.")


class _ForbiddenCall(BaseException):  # not swallowed by a learner's `except Exception`
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class forbidden(torch.overrides.TorchFunctionMode):
    """Inside ``with forbidden({torch.logsumexp: "torch.logsumexp", ...}):`` a call of any of
    the given torch functions (or Tensor methods) raises, so a check can reject an answer that
    uses what the exercise forbids. Keys are the callables, values the names shown to the learner.

    It works through PyTorch's ``__torch_function__`` modes, so it sees calls made anywhere below
    the learner's function, including ``x.logsumexp(...)`` and ``torch.special.logsumexp``.
    """

    def __init__(self, funcs: dict):
        super().__init__()
        # Matched by name, so that torch.logsumexp also catches x.logsumexp(...) and
        # torch.special.logsumexp (different callables with one name).
        self.names = {getattr(f, "__name__", str(f)): shown for f, shown in dict(funcs).items()}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        # torch.special.logsumexp reports itself as "special_logsumexp"
        name = name.removeprefix("special_").removeprefix("_special_")
        if name in self.names:
            raise _ForbiddenCall(self.names[name])
        return func(*args, **(kwargs or {}))


def call(func: Any, *args, input_desc: str | None = None, forbid: dict | None = None,
         forbid_reason: str = "", no_global_rng: bool = False, **kwargs):
    """Call the learner's ``func``; turn a stub or a crash into a clear message.

    ``forbid``: ``{callable: name}`` of torch functions the exercise forbids; using one fails the
    check with a message that names it (``forbid_reason`` says what to use instead).
    ``no_global_rng``: fail when the call draws from torch's global random generator (a sampler
    that ignores its ``generator`` argument).
    """
    if not callable(func):
        _fail(f"expected a function, got {describe(func)}.")
    where = input_desc or ", ".join(describe(a) for a in args)
    state = torch.get_rng_state() if no_global_rng else None
    try:
        if forbid:
            with forbidden(forbid):
                result = func(*args, **kwargs)
        else:
            result = func(*args, **kwargs)
        if state is not None and not torch.equal(state, torch.get_rng_state()):
            torch.set_rng_state(state)
            _fail(f"for input {where} your function drew random numbers from torch's global "
                  f"generator: every random draw must take the `generator` argument "
                  f"(e.g. torch.rand(..., generator=generator)), so that results are "
                  f"reproducible.")
        return result
    except _ForbiddenCall as err:
        _fail(f"for input {where} your function calls {err.name}, which this exercise forbids."
              + (f" {forbid_reason}" if forbid_reason else ""))
    except NotImplementedError:
        _fail("your function still raises NotImplementedError. Replace the `raise "
              "NotImplementedError(...)` line with your implementation and run the cell again.")
    except ExerciseCheckFailed:
        raise
    except Exception as err:  # report any crash of the learner's code as a failed check
        _fail(f"your function raised {type(err).__name__}: {err}\n  for input: {where}")


def _as_float64(x: Any) -> torch.Tensor:
    """``x`` as a tensor; a Python number or list with floats becomes float64, not float32."""
    if isinstance(x, torch.Tensor):
        return x
    t = torch.as_tensor(x)
    return torch.as_tensor(x, dtype=torch.float64) if t.is_floating_point() else t


def expect_close(got: Any, expected: Any, *, input_desc: str, rtol: float = 1e-5,
                 atol: float = 1e-8, what: str = "result", hint: str | None = None) -> None:
    """Fail unless ``got`` equals ``expected`` within tolerance (shapes, NaN and inf included).

    Python numbers (and lists of them) are compared in float64: ``torch.as_tensor(0.1)`` is
    float32, which put a right answer returned as a Python float 1e-8 off and failed it at a
    tight ``rtol``."""
    exp = _as_float64(expected)
    if not isinstance(got, (torch.Tensor, float, int)) or isinstance(got, bool):
        _fail(f"for input {input_desc} the {what} should be a tensor or a number, got "
              f"{type(got).__name__}: {describe(got)}.", hint)
    g = _as_float64(got)
    if g.shape != exp.shape:
        _fail(f"for input {input_desc} the {what} should have shape {tuple(exp.shape)}, got "
              f"{tuple(g.shape)}.", hint)
    g64, e64 = g.detach().to(torch.float64).cpu(), exp.detach().to(torch.float64).cpu()
    if not torch.allclose(g64, e64, rtol=rtol, atol=atol, equal_nan=False):
        diff = (g64 - e64).abs()
        worst = float(diff.nan_to_num(float("inf")).max()) if diff.numel() else 0.0
        _fail(f"{_mismatch(g, exp, what, input_desc)}\n  (largest difference "
              f"{_fmt(worst)}).", hint)


def expect_equal(got: Any, expected: Any, *, input_desc: str, what: str = "result",
                 hint: str | None = None) -> None:
    """Fail unless ``got == expected`` (tensors compared elementwise, shapes included)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or not bool(
                (got.detach().cpu() == expected.detach().cpu()).all()):
            _fail(f"{_mismatch(got, expected, what, input_desc)}.", hint)
    elif got != expected:
        _fail(f"{_mismatch(got, expected, what, input_desc)}.", hint)


@contextmanager
def watch_calls(*targets):
    """Record the names of the Python functions ``targets`` entered while the block runs:
    ``with watch_calls(f, g) as seen: ...`` then ``seen`` is a list of names. A profile hook sees
    the call however the learner imported the function (``forbidden`` covers torch functions)."""
    codes = {t.__code__: t.__name__ for t in targets}
    seen: list = []

    def hook(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            seen.append(codes[frame.f_code])

    old = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield seen
    finally:
        sys.setprofile(old)


def precision_hint(got: torch.Tensor, expected: torch.Tensor,
                   scale: torch.Tensor | float | None = None) -> tuple[float, str | None]:
    """(largest relative difference of ``got`` from ``expected``, a hint or None). Each
    difference is relative to ``|expected|``, or to ``scale`` where that is larger (the size of
    the formula's terms: an answer of 0 has no relative error of its own).

    The hint is for an answer whose values agree with the right ones to four digits or more
    but miss the check's tolerance: the formula is almost surely right and precision was lost
    on the way (a float32 step; an integer tensor that an operation silently turns into float32;
    a constant typed with few digits). Without it such an answer got the hint for a wrong
    derivation beside a value that looked exact (review of the new derivation checks, M2/M3)."""
    g = got.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    diff = (g - e).abs()
    if not bool(torch.isfinite(g).all()) or diff.numel() == 0:
        return math.inf, None
    size = e.abs() if scale is None else torch.maximum(e.abs(), torch.as_tensor(
        scale, dtype=torch.float64).expand_as(e))
    rel = float((diff / size.clamp_min(torch.finfo(torch.float64).tiny)).max())
    if rel > 1e-4:
        return rel, None
    return rel, (f"your values agree with the right ones to about {max(4, int(-math.log10(rel)))}"
                 " significant digits, so the formula is probably right and precision was "
                 "lost on the way: a float32 step (torch.tensor(3) is an integer tensor, and "
                 "torch.log of it or one integer tensor divided by another is float32), or a "
                 "constant typed with few digits. Keep every step in float64.")


def expect_formula(got, expected: torch.Tensor, at, desc: str, what: str, scale, hint: str,
                   known: tuple = (), *, per_entry: bool = True) -> None:
    """``got`` equals a derived formula's values ``expected`` (float64; an infinite entry must
    be matched exactly) at the check's inputs, entry by entry, to 1e-9 of ``scale`` (a tensor
    like ``expected``, or a number: the size of the formula's terms at each entry).

    The failure names the entry furthest off and says whether the answer is too large or too
    small there, but never prints the expected value: a table of them would hand out the result
    of the derivation. ``at`` describes an entry: a dict {name: input tensor} (each shaped like
    ``expected``), or a function of the entry's flat index. ``known`` holds ``(values, hint)``
    pairs of recognised mistakes; an answer within four digits of the right one gets
    :func:`precision_hint`'s hint instead. ``per_entry`` says the answer has one value per entry
    of the inputs (False: the task reduces over a dimension, as its shape message then says).
    Shared by the derivation checks of chapters 4 (nce), 5 (variational) and 6 (estimators).
    """
    shape = tuple(expected.shape)
    expect_true(isinstance(got, torch.Tensor) and got.is_floating_point()
                and tuple(got.shape) == shape,
                f"for input {desc} the {what} should be a float tensor of shape {shape}"
                + (", one value per entry of the inputs" if per_entry else "")
                + f"; got {describe(got)}.",
                hint=("work elementwise with torch operations on the input tensors; do not "
                      "reduce over a dimension or return a Python number." if per_entry else
                      "work with torch operations on the input tensors and reduce over the "
                      "last dimension (the words) only."))
    expect_true(got.dtype == torch.float64,
                f"for input {desc} (float64) your {what} is {got.dtype}: return the inputs' "
                f"dtype.", hint="do not convert to float32 (.float()).")
    g64 = got.detach()

    def matches(values):
        same_inf = torch.isinf(values) & (g64 == values)
        return same_inf | ((g64 - values).abs() <= 1e-9 * scale)

    wrong = ~matches(expected)  # NaN counts as wrong
    if not bool(wrong.any()):
        return
    for values, known_hint in known:
        if bool(matches(values).all()):
            hint = known_hint
            break
    fail_at_worst_entry(g64, expected, wrong, (g64 - expected).abs() / scale, at, desc, what,
                        hint, scale)


def fail_at_worst_entry(got: torch.Tensor, expected: torch.Tensor, wrong: torch.Tensor,
                        err: torch.Tensor, at, desc: str, what: str, hint: str | None,
                        precision_scale=None, digits: int = 10) -> None:
    """Fail, naming the wrong entry furthest off (largest ``err`` among ``wrong``) by its
    inputs and saying whether the answer is too large or too small there; never the expected
    value nor the difference (value ± difference would be the answer: review of the new checks,
    M1). ``at``: a dict {name: input tensor shaped like ``expected``} or a function of the
    entry's flat index. An answer within four digits of the right one gets
    :func:`precision_hint`'s hint (relative to ``precision_scale`` where given)."""
    # the furthest-off among the WRONG entries (a matched -inf would read inf - inf = NaN)
    err = torch.where(wrong, err.nan_to_num(float("inf")), 0.0)
    i = int(err.flatten().argmax())
    where = at(i) if callable(at) else ", ".join(
        f"{name} = {float(v.flatten()[i]):.6g}" for name, v in at.items())
    gi, ei = float(got.flatten()[i]), float(expected.flatten()[i])
    how = ("not a number" if math.isnan(gi) else "too large" if gi > ei else "too small")
    rel, precision = precision_hint(got, expected, precision_scale)
    near = f" (largest relative difference {rel:.1e})" if precision else ""
    if precision:  # a value within four digits: show enough digits to see it is off
        digits = max(digits, 12)
    expect_true(False, f"for input {desc} your {what} is wrong at {int(wrong.sum())} of "
                       f"{wrong.numel()} entries, e.g. for {where} you return {gi:.{digits}g}, "
                       f"which is {how}{near}.",
                hint=precision or hint)


def expect_true(condition: bool, message: str, hint: str | None = None) -> None:
    """Fail with ``message`` unless ``condition`` holds."""
    if not condition:
        _fail(message, hint)
