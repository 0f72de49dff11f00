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
import time
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


# What one recorded value may hold: the encoder writes a result as nested lists with tensors as
# leaves; an honest answer's result is a few tensors. A record is the notebook's data (the
# notebook can rewrite it), so decoding counts what it builds and refuses more than this.
MAX_NODES = 100_000                 # containers, scalars and tensors in one value
MAX_BYTES = 256 * 1024 * 1024       # tensor data and text in one value
MAX_DEPTH = 25


class _Budget:
    """What is left to decode of one value: nodes, bytes, and the replay's deadline."""

    def __init__(self, nodes: int = MAX_NODES, nbytes: int = MAX_BYTES,
                 deadline: float | None = None):
        self.nodes, self.bytes, self.deadline = nodes, nbytes, deadline

    def take(self, nodes: int = 1, nbytes: int = 0):
        self.nodes -= nodes
        self.bytes -= nbytes
        if self.nodes < 0 or self.bytes < 0:
            raise _Malformed("malformed value (larger than any result the check needs: "
                             f"more than {MAX_NODES} items or {MAX_BYTES >> 20} MiB)")
        if self.deadline is not None and self.nodes % 1024 == 0 and \
                time.monotonic() > self.deadline:
            raise _ReplayTimeout()


def _plain_tensor(t, budget: _Budget | None = None) -> torch.Tensor:
    """``t`` if it is a dense CPU tensor that owns its data (what the encoder writes: contiguous,
    its storage at least as large as its elements); counts its bytes. A stride-0 (expanded) or
    otherwise aliased tensor could stand for far more data than the file holds: refused."""
    if type(t) is not torch.Tensor or t.layout != torch.strided or t.device.type != "cpu" \
            or t.is_quantized or not t.is_contiguous():
        raise _Malformed("malformed value (not a plain tensor)")
    nbytes = t.numel() * t.element_size()
    if t.untyped_storage().nbytes() < nbytes + t.storage_offset() * t.element_size():
        raise _Malformed("malformed value (a tensor larger than its data)")
    if budget is not None:
        budget.take(1, nbytes)
    return t


def decode(obj, depth: int = 0, budget: _Budget | None = None):
    """The value that :func:`softmaxbook.exercises.sandbox_runner.encode` encoded; raises
    ``_Malformed`` for anything that encoder cannot have written, and for values beyond
    :data:`MAX_NODES` items, :data:`MAX_BYTES` bytes or :data:`MAX_DEPTH` levels (counted as
    they are built: a record that shares one list many times, a tiny file, is refused before it
    is expanded); ``_ReplayTimeout`` once ``budget.deadline`` has passed."""
    if budget is None:
        budget = _Budget()
    if depth > MAX_DEPTH or not isinstance(obj, list) or not obj or not isinstance(obj[0], str):
        raise _Malformed("malformed value")
    budget.take()
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
            if not isinstance(rest[0], str):
                _bad()
            budget.take(0, len(rest[0]))
            return rest[0]
        if kind == "tensor":
            t, grad = rest
            t = _plain_tensor(t, budget).clone()
            if grad and t.is_floating_point():
                t.requires_grad_(True)
            return t
        if kind == "generator":
            g = torch.Generator()
            g.set_state(_plain_tensor(rest[0], budget))
            return g
        if kind == "size":
            if not isinstance(rest[0], list) or len(rest[0]) > 64:
                _bad()
            return torch.Size([int(v) for v in rest[0]])
        if kind == "dtype":
            return _DTYPES[rest[0]]
        if kind in ("list", "tuple"):
            if not isinstance(rest[0], list):
                _bad()
            items = [decode(v, depth + 1, budget) for v in rest[0]]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            if not isinstance(rest[0], list):
                _bad()
            return {decode(k, depth + 1, budget): decode(v, depth + 1, budget)
                    for k, v in rest[0]}
        if kind == "ndarray":
            import numpy as np

            return np.asarray(_plain_tensor(rest[0], budget).numpy()).copy()
        if kind == "npscalar":
            import numpy as np

            return np.dtype(rest[0]).type(decode(rest[1], depth + 1, budget))
        if kind == "opaque":
            name, text = str(rest[0])[:100], str(rest[1])[:200]
            cls = type(name if name.isidentifier() else "object", (), {
                "__repr__": lambda self, t=text: t, "__module__": "student"})
            return cls()
    except (_Malformed, _ReplayTimeout):
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

    def __init__(self, label: str, calls: list, name: str = "answer",
                 deadline: float | None = None):
        self.label, self.calls, self.i = label, list(calls), 0
        self.deadline = deadline  # time.monotonic() after which the replay stops
        self.__name__ = self.__qualname__ = name
        self.forbidden_names: set[str] = set()
        self.package_forbidden = False
        self._snapshot = _package_snapshot()

    def __call__(self, *args, **kwargs):
        from . import _ForbiddenCall
        from .sandbox_runner import digest

        with torch._C.DisableTorchFunction():
            self._note_forbidden()
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise _ReplayTimeout()
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
                            and value.shape == t.shape and _plain_tensor(value) is value:
                        with torch.no_grad():
                            t.data.copy_(value)
            except (KeyError, IndexError, TypeError, RuntimeError, _Malformed):
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
            message = str(rec.get("message", ""))[:2000]
            if rec.get("notimpl"):
                raise NotImplementedError(message)
            if rec.get("kind") != "exception":
                raise _StudentBaseException(f"{typename}: {message}")
            cls = type(typename if typename.isidentifier() else "Exception", (Exception,), {})
            raise cls(message)
        if outcome != "return":
            raise ReplayMismatch(f"call {self.i}: no result")
        with torch._C.DisableTorchFunction():
            budget = _Budget(deadline=self.deadline)
            try:
                value = decode(rec.get("value"), budget=budget)
            except _Malformed as err:
                raise ReplayMismatch(f"call {self.i}: {err}") from None
            return self._graft(value, rec.get("jacobians", []), where, budget)

    def _graft(self, value, jacobians, where, budget=None):
        """Give the recorded result the recorded first derivatives with respect to the grader's
        own input tensors (value unchanged; d value / d input = J)."""
        if not jacobians:
            return value
        sums: dict = {}
        if not isinstance(jacobians, list) or len(jacobians) > 1000:
            raise ReplayMismatch("malformed derivatives")
        for item in jacobians:
            try:
                po, pi, jac = item
                out = _at(value, po)
                inp = _at(where, pi)
                _plain_tensor(jac, budget)
            except (KeyError, IndexError, TypeError, ValueError, _Malformed):
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
            salt: int = 0, replay_timeout: float | None = None) -> Verdict:
    """The grade of exercise ``label`` from the sandbox's record ``entry``, decided here with
    the check's inputs drawn under ``salt`` (the one the sandbox's checks ran under).
    ``replay_timeout`` (default ``2 * check_timeout + 60`` s: the replay only compares, the
    sandbox also computed) bounds the time spent here on one record: past it, the replay stops
    at its next recorded call or while decoding, and the record is flagged."""
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
    if replay_timeout is None:
        replay_timeout = 2 * check_timeout + 60
    deadline = time.monotonic() + replay_timeout  # the replay's own time limit
    if answer == "value":
        try:
            value = decode(entry.get("value"), budget=_Budget(deadline=deadline))
        except _Malformed as err:
            return Verdict("error", "the answer could not be read back.", tampered=str(err))
        except _ReplayTimeout:
            return Verdict("error", "the answer could not be read back in time.",
                           tampered="decoding the recorded value ran past the time limit")
    elif answer == "function":
        from . import _load

        _load(label)  # the check's module and the book's modules it uses, before the snapshot
        calls = entry.get("calls") or []
        if not isinstance(calls, list) or len(calls) > 100_000:
            return Verdict("error", "the results sent back could not be read.",
                           tampered="malformed list of calls")
        value = Replay(label, calls, deadline=deadline)
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
        if time.monotonic() > deadline:  # here, not in the sandbox: the record is at fault
            return Verdict("error", "the results sent back by the notebook could not be "
                                    "checked in time.",
                           tampered=f"replaying the record took over {replay_timeout:g} s")
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
