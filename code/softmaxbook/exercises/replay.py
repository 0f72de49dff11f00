"""The trusted half of the grader: decides each exercise in the grader's own process.

The sandbox (:mod:`softmaxbook.exercises.sandbox_runner`) sends back, for every call the book's
check made to the student's function, the result as data. Here the same check runs again, in the
grader's process, on the grader's own inputs, with the student's function replaced by a
:class:`Replay` that hands back the recorded results in order. The comparisons, the messages and
the verdict are therefore computed by code the student's process never touched. A recorded call
whose arguments do not match the grader's (other inputs, another order, missing or extra calls)
fails the exercise and is flagged as tampering.

The check's inputs here are drawn under the same secret per-run salt as in the sandbox
(:func:`softmaxbook.exercises.salted`; the grader passes it to :func:`verdict`), so an honest
record matches them and answers precomputed for the public inputs do not.
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass, field

import torch

__all__ = ["Replay", "ReplayMismatch", "decode", "verdict", "Verdict"]


class ReplayMismatch(BaseException):  # a check's `except Exception` must not swallow it
    """The recorded calls do not match the calls the check makes in the grader."""


class _ReplayTimeout(BaseException):
    pass


class _Malformed(ValueError):
    pass


_DTYPES = {str(getattr(torch, n)): getattr(torch, n) for n in dir(torch)
           if isinstance(getattr(torch, n, None), torch.dtype)}


def decode(obj, depth: int = 0):
    """The value that :func:`softmaxbook.exercises.sandbox_runner.encode` encoded; raises
    ``_Malformed`` for anything that encoder cannot have written."""
    if depth > 25 or not isinstance(obj, list) or not obj or not isinstance(obj[0], str):
        raise _Malformed("malformed value")
    kind, rest = obj[0], obj[1:]
    try:
        if kind == "none":
            return None
        if kind == "ellipsis":
            return Ellipsis
        if kind == "bool":
            return bool(rest[0]) if isinstance(rest[0], bool) else _bad()
        if kind == "int":
            return int(rest[0]) if isinstance(rest[0], str) and len(rest[0]) < 5000 else _bad()
        if kind == "float":
            return float(rest[0]) if isinstance(rest[0], float) else _bad()
        if kind == "complex":
            return complex(float(rest[0]), float(rest[1]))
        if kind == "str":
            return rest[0] if isinstance(rest[0], str) else _bad()
        if kind == "tensor":
            t, grad = rest
            if type(t) is not torch.Tensor:
                _bad()
            t = t.clone()
            if grad and t.is_floating_point():
                t.requires_grad_(True)
            return t
        if kind == "generator":
            g = torch.Generator()
            g.set_state(rest[0])
            return g
        if kind == "size":
            return torch.Size([int(v) for v in rest[0]])
        if kind == "dtype":
            return _DTYPES[rest[0]]
        if kind in ("list", "tuple"):
            items = [decode(v, depth + 1) for v in rest[0]]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in rest[0]}
        if kind == "ndarray":
            import numpy as np

            return np.asarray(rest[0].numpy()).copy() if type(rest[0]) is torch.Tensor else _bad()
        if kind == "npscalar":
            import numpy as np

            return np.dtype(rest[0]).type(decode(rest[1], depth + 1))
        if kind == "opaque":
            name, text = str(rest[0])[:100], str(rest[1])[:200]
            cls = type(name if name.isidentifier() else "object", (), {
                "__repr__": lambda self, t=text: t, "__module__": "student"})
            return cls()
    except _Malformed:
        raise
    except Exception as err:  # noqa: BLE001
        raise _Malformed(f"malformed value ({type(err).__name__})") from None
    raise _Malformed(f"unknown kind {kind!r}")


def _bad():
    raise _Malformed("malformed value")


def _at(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def _set_at(obj, path, value):
    """Replace the item at ``path`` (a list/dict path inside nested containers); returns the new
    top object (tuples are rebuilt)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, tuple):
        items = list(obj)
        items[head] = _set_at(items[head], rest, value)
        return tuple(items)
    obj[head] = _set_at(obj[head], rest, value)
    return obj


class _Forbidden(Exception):
    pass


class Replay:
    """Stands for the student's function in the grader: returns the recorded results in order,
    after checking that the grader calls it with the recorded arguments."""

    def __init__(self, label: str, calls: list, name: str = "answer"):
        self.label, self.calls, self.i = label, list(calls), 0
        self.__name__ = self.__qualname__ = name
        self.forbidden_names: set[str] = set()
        self.package_forbidden = False
        self._snapshot = _package_snapshot()

    def __call__(self, *args, **kwargs):
        from . import _ForbiddenCall
        from .sandbox_runner import digest

        with torch._C.DisableTorchFunction():
            self._note_forbidden()
            if self.i >= len(self.calls):
                raise ReplayMismatch(f"the check called the function {self.i + 1} times, the "
                                     f"sandbox sent back {len(self.calls)} results")
            rec = self.calls[self.i]
            self.i += 1
            if not isinstance(rec, dict) or rec.get("digest") != digest([list(args), kwargs]):
                raise ReplayMismatch(f"call {self.i}: the sandbox's arguments are not the "
                                     "check's")
            where = [list(args), kwargs]
            try:
                for path, state in rec.get("generators", []):
                    g = _at(where, path)
                    if isinstance(g, torch.Generator):
                        g.set_state(state)
                for path, value in rec.get("changed", []):
                    t = _at(where, path)
                    if isinstance(t, torch.Tensor) and isinstance(value, torch.Tensor) \
                            and value.shape == t.shape:
                        with torch.no_grad():
                            t.data.copy_(value)
            except (KeyError, IndexError, TypeError, RuntimeError):
                raise ReplayMismatch(f"call {self.i}: malformed record") from None
            if rec.get("rng"):
                torch.rand(1)  # the student's function drew from the global generator
            self._replay_seen(rec.get("seen", []))
            outcome = rec.get("outcome")
        if outcome == "forbidden":
            raise _ForbiddenCall(str(rec.get("name", "a forbidden function")))
        if outcome == "timeout":
            raise _ReplayTimeout()
        if outcome == "raise":
            typename = str(rec.get("type", "Exception"))[:100]
            message = str(rec.get("message", ""))
            if rec.get("notimpl"):
                raise NotImplementedError(message)
            if rec.get("kind") != "exception":
                raise _StudentBaseException(f"{typename}: {message}")
            cls = type(typename if typename.isidentifier() else "Exception", (Exception,), {})
            raise cls(message)
        if outcome != "return":
            raise ReplayMismatch(f"call {self.i}: no result")
        with torch._C.DisableTorchFunction():
            try:
                value = decode(rec.get("value"))
            except _Malformed as err:
                raise ReplayMismatch(f"call {self.i}: {err}") from None
            return self._graft(value, rec.get("jacobians", []), where)

    def _graft(self, value, jacobians, where):
        """Give the recorded result the recorded first derivatives with respect to the grader's
        own input tensors (value unchanged; d value / d input = J)."""
        if not jacobians:
            return value
        sums: dict = {}
        for po, pi, jac in jacobians:
            try:
                out = _at(value, po)
                inp = _at(where, pi)
            except (KeyError, IndexError, TypeError):
                raise ReplayMismatch("malformed derivatives") from None
            if not (isinstance(out, torch.Tensor) and isinstance(inp, torch.Tensor)
                    and isinstance(jac, torch.Tensor) and inp.requires_grad
                    and tuple(jac.shape) == tuple(out.shape) + tuple(inp.shape)):
                raise ReplayMismatch("malformed derivatives")
            delta = (inp - inp.detach()).to(jac.dtype)
            term = torch.tensordot(jac, delta, dims=inp.dim()) if inp.dim() else jac * delta
            key = tuple(po)
            sums[key] = term if key not in sums else sums[key] + term
        for po, term in sums.items():
            out = _at(value, po)
            grafted = out.detach() + term.to(out.dtype)
            value = _set_at(value, list(po), grafted)
        return value

    def _note_forbidden(self):
        from . import forbidden

        try:
            stack = torch.overrides._get_current_function_mode_stack()
        except Exception:  # noqa: BLE001
            stack = []
        for mode in stack:
            if isinstance(mode, forbidden):
                self.forbidden_names.update(mode.names.values())
        hook = sys.getprofile()  # watch_calls: the functions the check watches are forbidden
        names = getattr(getattr(hook, "__code__", None), "co_freevars", ())
        if "codes" in names and hook.__closure__ is not None:
            codes = hook.__closure__[names.index("codes")].cell_contents
            if isinstance(codes, dict):
                self.forbidden_names.update(str(v) for v in codes.values())
        for (mod, name), value in self._snapshot.items():
            if getattr(sys.modules.get(mod), name, value) is not value:
                self.package_forbidden = True  # the check patched the book's own functions

    @staticmethod
    def _replay_seen(names):
        if not names:
            return
        from .sandbox_runner import _hook_seen

        seen = _hook_seen(sys.getprofile())
        if seen is not None:
            seen.extend(str(n) for n in names)


def _package_snapshot() -> dict:
    """The functions of the book's modules (not the checks'), to see which ones a check
    replaces by a tripwire while it calls the answer."""
    snap = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith("softmaxbook.") or name.startswith(
                "softmaxbook.exercises"):
            continue
        for key, value in list(vars(mod).items()):
            if callable(value) and not isinstance(value, type):
                snap[(name, key)] = value
    return snap


class _StudentBaseException(BaseException):
    pass


@dataclass
class Verdict:
    status: str   # passed, failed, missing, timeout, error
    message: str
    tampered: str | None = None
    forbidden_names: set = field(default_factory=set)
    package_forbidden: bool = False


def verdict(label: str, entry: dict | None, check_timeout: float = 60,
            salt: int = 0) -> Verdict:
    """The grade of exercise ``label`` from the sandbox's record ``entry``, decided here with
    the check's inputs drawn under ``salt`` (the one the sandbox's checks ran under)."""
    from . import ExerciseCheckFailed, check, salted

    if entry is None:
        return Verdict("error", "the check was not run (the notebook did not get that far).")
    answer = entry.get("answer")
    if answer == "missing":
        return Verdict("missing", f"no answer: {entry.get('message', 'name not defined')}.")
    if answer == "timeout":
        return Verdict("timeout", "evaluating the answer did not finish in time.")
    if answer == "error":
        return Verdict("error", f"evaluating the answer raised {entry.get('message', '?')}")
    if answer == "value":
        try:
            value = decode(entry.get("value"))
        except _Malformed as err:
            return Verdict("error", "the answer could not be read back.", tampered=str(err))
    elif answer == "function":
        from . import _load

        _load(label)  # the check's module and the book's modules it uses, before the snapshot
        value = Replay(label, entry.get("calls") or [])
    else:
        return Verdict("error", "no result came back for this exercise.")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), salted(salt):
            check(label, value)
    except ReplayMismatch as err:
        return Verdict("error", "the results sent back by the notebook do not match the "
                                "check's inputs.", tampered=str(err))
    except _ReplayTimeout:
        return Verdict("timeout", f"the check did not finish within {check_timeout:g} s "
                                  "(an endless loop?).")
    except ExerciseCheckFailed as err:
        msg = str(err.args[0]) if err.args else str(err)
        return Verdict("failed", msg, forbidden_names=getattr(value, "forbidden_names", set()),
                       package_forbidden=getattr(value, "package_forbidden", False))
    except _StudentBaseException as err:
        return Verdict("error", f"your function raised {err}")
    except Exception as err:  # noqa: BLE001 - the check crashed on the answer: a failed check
        return Verdict("error", f"the check raised {type(err).__name__}: {str(err)[:300]}")
    if isinstance(value, Replay) and value.i != len(value.calls):
        return Verdict("error", "the notebook sent back more results than the check asked for.",
                       tampered=f"{len(value.calls)} results for {value.i} calls")
    return Verdict("passed", "passed", forbidden_names=getattr(value, "forbidden_names", set()),
                   package_forbidden=getattr(value, "package_forbidden", False))
