"""The untrusted half of the grader: runs INSIDE the sandbox, in the student's process.

    python -I -m softmaxbook.exercises.sandbox_runner JOBDIR

Nothing this module computes decides a grade. It runs the student's code cells (IPython, so
magics work), then, for every auto-checked exercise, runs the book's own check with the student's
answer wrapped in a *recorder*: each call the check makes records the student's result as data
(tensors, numbers, containers; :func:`encode`), plus what the call did to its arguments (in-place
changes, generator states), whether it drew from torch's global generator, which watched functions
it entered, the exception it raised, and the first derivatives of its result with respect to
its inputs. The trusted grader (:mod:`softmaxbook.exercises.replay`) re-runs the same check in its
own process on these recorded results and decides there. Anything the student patches here
(the check, the registry, ``torch.allclose``, ``sys.stdout``, this module) changes at most which
results are sent back, i.e. what the student's function "returned".

Files in JOBDIR: ``job.json`` (read), ``progress.jsonl`` (one line per started/finished cell or
check, with the cell's text output, capped) and ``record.pt`` (the recorded calls, written last,
loaded by the grader with ``torch.load(weights_only=True)``).

The checks run under the grader's secret per-run salt (their inputs change with it), which is
in no file: once the cells are done the runner writes ``cells-done`` to one pipe
(``job["ready_fd"]``) and reads the salt from another (``job["salt_fd"]``), which the grader
writes to only then. A record whose calls were made under another salt does not match the
grader's inputs and is flagged. After the checks, the runner writes ``record.pt``, sends its
SHA-256 through the ready pipe (``record <hex>``), and ends with ``os._exit`` (no exit handler
of the notebook runs): the grader accepts ``record.pt`` only with that seal, so a notebook that
rewrites the record afterwards (an exit handler, a thread, a child process) is flagged. The
record is still the notebook's data (its code runs in this process): the grader decodes it
within size and time limits (:func:`softmaxbook.exercises.replay.decode`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import sys
import time


class TimeLimitExceeded(BaseException):  # not swallowed by `except Exception` in a learner's code
    """Raised inside the sandbox when a cell or a check runs past its time limit."""


def _on_alarm(signum, frame):
    raise TimeLimitExceeded("the grader's time limit")


class _Capped(io.TextIOBase):
    """A text stream that keeps at most ``limit`` characters (the rest is counted, not kept)."""

    def __init__(self, limit: int):
        self.limit, self.parts, self.size, self.dropped = limit, [], 0, 0

    def writable(self):
        return True

    def write(self, s):
        s = str(s)
        room = self.limit - self.size
        if room > 0:
            self.parts.append(s[:room])
            self.size += min(len(s), room)
        self.dropped += max(0, len(s) - max(room, 0))
        return len(s)

    def flush(self):
        pass

    def text(self) -> str:
        out = "".join(self.parts)
        if self.dropped:
            out += f"\n[... {self.dropped} more characters of output not kept]"
        return out


# ------------------------------------------------------------------------------------------------
# Values as data
# ------------------------------------------------------------------------------------------------
_MAX_DEPTH = 20


def encode(obj, depth: int = 0):
    """``obj`` as nested lists whose first item says the kind; only types that
    ``torch.load(weights_only=True)`` reads back (tensors, str, numbers, lists, dicts)."""
    import torch

    if depth > _MAX_DEPTH:
        return ["opaque", type(obj).__name__, "(nested too deeply)"]
    if obj is None:
        return ["none"]
    if obj is Ellipsis:
        return ["ellipsis"]
    if isinstance(obj, bool):
        return ["bool", bool(obj)]
    if type(obj) is int:
        return ["int", str(obj)]  # str: arbitrarily large ints
    if type(obj) is float:
        return ["float", obj]
    if type(obj) is complex:
        return ["complex", obj.real, obj.imag]
    if type(obj) is str:
        return ["str", obj]
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.layout != torch.strided or t.device.type != "cpu" or type(obj) is not torch.Tensor \
                and not isinstance(obj, torch.nn.Parameter):
            try:
                t = t.to_dense().cpu()
            except Exception:  # noqa: BLE001
                return ["opaque", type(obj).__name__, _short_repr(obj)]
        return ["tensor", t.clone().contiguous(), bool(obj.requires_grad)]
    if isinstance(obj, torch.Generator):
        return ["generator", obj.get_state()]
    if isinstance(obj, torch.Size):
        return ["size", [int(v) for v in obj]]
    if isinstance(obj, torch.dtype):
        return ["dtype", str(obj)]
    if type(obj) in (list, tuple):
        return ["list" if type(obj) is list else "tuple", [encode(v, depth + 1) for v in obj]]
    if type(obj) is dict:
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in obj.items()]]
    mod = type(obj).__module__
    if mod == "numpy" or mod.startswith("numpy."):
        import numpy as np

        if isinstance(obj, np.ndarray) and obj.dtype.kind in "biufc":
            return ["ndarray", torch.from_numpy(np.ascontiguousarray(obj).copy())]
        if isinstance(obj, np.generic) and obj.dtype.kind in "biufc":
            return ["npscalar", str(obj.dtype), encode(obj.item(), depth + 1)]
    if isinstance(obj, (int, float, str)):  # subclasses (an IntEnum, a custom float)
        return ["opaque", type(obj).__name__, _short_repr(obj)]
    return ["opaque", type(obj).__name__, _short_repr(obj)]


def _short_repr(obj) -> str:
    try:
        text = repr(obj)
    except Exception:  # noqa: BLE001
        text = f"<{type(obj).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."


def digest(obj, depth: int = 0) -> str:
    """A fingerprint of a check's arguments (the grader recomputes it on its own arguments)."""
    import torch

    h = hashlib.sha256()

    def walk(o, d):
        if d > _MAX_DEPTH:
            h.update(b"deep")
            return
        if isinstance(o, torch.Tensor):
            t = o.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            if t.numel():
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(o, torch.Generator):
            h.update(b"G" + o.get_state().numpy().tobytes())
        elif isinstance(o, (list, tuple)):
            h.update(f"L{type(o).__name__}{len(o)}".encode())
            for v in o:
                walk(v, d + 1)
        elif isinstance(o, dict):
            h.update(f"D{len(o)}".encode())
            for k, v in o.items():
                walk(k, d + 1)
                walk(v, d + 1)
        elif o is None or isinstance(o, (bool, int, float, complex, str)):
            h.update(f"V{type(o).__name__}{o!r}".encode())
        elif callable(o):
            h.update(b"F")  # functions the check passes: compared by position only
        else:
            h.update(f"O{type(o).__name__}".encode())

    walk(obj, depth)
    return h.hexdigest()


def _tensors(obj, path=()):
    """(path, tensor) for the tensors among the arguments (in lists, tuples and dict values)."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, path + (i,))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, (str, int)):
                yield from _tensors(v, path + (k,))


def _generators(obj, path=()):
    import torch

    if isinstance(obj, torch.Generator):
        yield path, obj
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _generators(v, path + (i,))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, (str, int)):
                yield from _generators(v, path + (k,))


_MAX_JAC_INPUTS = 64        # input entries (that require grad) for which derivatives are sent
_MAX_JAC_OUTPUTS = 2_000_000


def _jacobians(result, arguments) -> list:
    """[[output path, argument path, J]] with J = d result[out] / d argument[arg] (shape
    out.shape + arg.shape), for small inputs that require grad (a sampler differentiable in
    loc and scale)."""
    import torch

    outs = [(p, t) for p, t in _tensors(result) if t.requires_grad and t.is_floating_point()
            and t.numel() <= _MAX_JAC_OUTPUTS]
    ins = [(p, t) for p, t in _tensors(arguments) if t.requires_grad and t.is_floating_point()]
    if not outs or not ins or sum(t.numel() for _, t in ins) > _MAX_JAC_INPUTS:
        return []
    found = []
    for po, out in outs:
        v = torch.zeros_like(out, requires_grad=True)
        try:
            grads = torch.autograd.grad(out, [t for _, t in ins], grad_outputs=v,
                                        create_graph=True, allow_unused=True)
        except Exception:  # noqa: BLE001 - no graph to the inputs: nothing to send
            continue
        for (pi, inp), g in zip(ins, grads):
            if g is None:
                continue
            cols = []
            for j in range(inp.numel()):
                gj = g.reshape(-1)[j]
                if not gj.requires_grad:
                    cols.append(torch.zeros_like(out))
                    continue
                (col,) = torch.autograd.grad(gj, v, retain_graph=True, allow_unused=True)
                cols.append(torch.zeros_like(out) if col is None else col.detach())
            jac = torch.stack(cols, dim=-1).reshape(tuple(out.shape) + tuple(inp.shape))
            found.append([list(po), list(pi), jac.detach().clone()])
    return found


class Recorder:
    """Wraps the student's function: calls it exactly as the check does and records the call."""

    def __init__(self, func, calls: list):
        self.func, self.calls = func, calls
        for name in ("__name__", "__qualname__", "__doc__", "__module__", "__wrapped__"):
            if hasattr(func, name):
                try:
                    setattr(self, name, getattr(func, name))
                except Exception:  # noqa: BLE001
                    pass
        self.__wrapped__ = func  # inspect.unwrap finds the student's function

    def __call__(self, *args, **kwargs):
        import torch

        from . import _ForbiddenCall

        with torch._C.DisableTorchFunction():
            rec = {"digest": digest([list(args), kwargs]), "rng": False, "seen": []}
            before = {p: digest(t) for p, t in _tensors([list(args), kwargs])}
            rng = torch.get_rng_state()
        hook = sys.getprofile()
        seen_list = _hook_seen(hook)
        n_seen = len(seen_list) if seen_list is not None else 0
        self.calls.append(rec)
        try:
            result = self.func(*args, **kwargs)
        except _ForbiddenCall as err:
            rec.update(outcome="forbidden", name=str(err.name))
            raise
        except TimeLimitExceeded:
            rec.update(outcome="timeout")
            raise
        except BaseException as err:
            rec.update(outcome="raise", kind=("exception" if isinstance(err, Exception)
                                              else "base"),
                       type=type(err).__name__, message=str(err)[:2000],
                       notimpl=isinstance(err, NotImplementedError))
            raise
        finally:
            with torch._C.DisableTorchFunction():
                rec["rng"] = not torch.equal(rng, torch.get_rng_state())
                if seen_list is not None:
                    rec["seen"] = [str(s) for s in seen_list[n_seen:]]
                where = [list(args), kwargs]
                rec["changed"] = [[list(p), t.detach().clone()] for p, t in _tensors(where)
                                  if p in before and digest(t) != before[p]]
                rec["generators"] = [[list(p), g.get_state()] for p, g in _generators(where)]
        with torch._C.DisableTorchFunction():
            rec.update(outcome="return", value=encode(result))
            try:
                rec["jacobians"] = _jacobians(result, [list(args), kwargs])
            except Exception:  # noqa: BLE001
                rec["jacobians"] = []
        return result


def _hook_seen(hook):
    """The ``seen`` list of a :func:`softmaxbook.exercises.watch_calls` profile hook, if any."""
    names = getattr(getattr(hook, "__code__", None), "co_freevars", ())
    if hook is None or "seen" not in names or hook.__closure__ is None:
        return None
    return hook.__closure__[names.index("seen")].cell_contents


# ------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------
class _Progress:
    def __init__(self, path: str, limit: int):
        self.fh = open(path, "a", buffering=1)
        self.limit = limit

    def __call__(self, **entry):
        line = json.dumps(entry)
        if len(line) > self.limit:
            entry["output"] = entry.get("output", "")[: self.limit // 2] + "\n[... cut]"
            line = json.dumps(entry)[: self.limit * 2]
        self.fh.write(line + "\n")
        self.fh.flush()


def run(jobdir: str) -> int:
    with open(os.path.join(jobdir, "job.json")) as fh:
        job = json.load(fh)
    progress = _Progress(os.path.join(jobdir, "progress.jsonl"), job.get("max_output", 20000))
    os.chdir(job.get("cwd", jobdir))
    sys.path.insert(0, os.getcwd())
    import matplotlib

    matplotlib.use("Agg")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    # exit() and quit() end the notebook (the plain shell has no ask_exit of its own)
    shell.ask_exit = lambda: setattr(shell, "exit_now", True)
    shell.colors = "NoColor" if hasattr(shell, "colors") else None
    cell_timeout = float(job["cell_timeout"])
    check_timeout = float(job["check_timeout"])
    deadline = time.monotonic() + float(job["notebook_timeout"])
    signal.signal(signal.SIGALRM, _on_alarm)
    real_out, real_err = sys.stdout, sys.stderr
    skip = set(job.get("skip", []))
    exited = None
    for i, source in job["cells"]:
        if i in skip:
            continue
        if time.monotonic() > deadline:
            progress(event="deadline", cell=i)
            break
        progress(event="start", cell=i)
        buf = _Capped(job.get("max_output", 20000))
        sys.stdout = sys.stderr = buf
        signal.setitimer(signal.ITIMER_REAL, cell_timeout)
        try:
            result = shell.run_cell(source, store_history=False, silent=False)
        except BaseException as err:  # noqa: BLE001 - IPython lets a few through
            result = None
            buf.write(f"{type(err).__name__}: {err}")
            error = (type(err).__name__, str(err)[:500])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdout, sys.stderr = real_out, real_err
        if result is not None:
            err = result.error_in_exec or result.error_before_exec
            error = (type(err).__name__, str(err)[:500]) if err is not None else None
        asked_exit = bool(getattr(shell, "exit_now", False)) or (
            error is not None and error[0] == "SystemExit")
        progress(event="end", cell=i, output=buf.text(),
                 error=None if asked_exit else error, exit=asked_exit)
        if asked_exit:
            exited = i
            break
    shell.exit_now = False
    progress(event="cells-done")
    salt = _read_salt(job.get("salt_fd"), timeout=60.0) if _say_ready(job.get("ready_fd")) \
        else None  # (the ready pipe stays open: the record's seal goes through it too)
    import torch

    from . import check, salted

    records = []
    for item in job["checks"] if salt is not None else []:
        label, answer = item["label"], item["answer"]
        if label in set(job.get("skip_checks", [])):
            continue
        progress(event="check", label=label)
        entry = {"label": label, "calls": []}
        records.append(entry)
        buf = _Capped(2000)
        sys.stdout = sys.stderr = buf
        signal.setitimer(signal.ITIMER_REAL, check_timeout)
        try:
            try:
                value = eval(answer, shell.user_ns)  # noqa: S307 - the student's own process
            except NameError as err:
                entry.update(answer="missing", message=str(err)[:500])
                continue
            except TimeLimitExceeded:
                entry.update(answer="timeout")
                continue
            except BaseException as err:  # noqa: BLE001
                entry.update(answer="error", message=f"{type(err).__name__}: {str(err)[:500]}")
                continue
            if callable(value) and not isinstance(value, torch.Tensor):
                entry["answer"] = "function"
                try:
                    with salted(salt):
                        check(label, Recorder(value, entry["calls"]))
                    entry["local"] = "passed"
                except TimeLimitExceeded:
                    entry["local"] = "timeout"
                except BaseException as err:  # noqa: BLE001
                    entry["local"] = f"{type(err).__name__}"
            else:
                entry.update(answer="value", value=encode(value))
        except TimeLimitExceeded:
            entry["local"] = "timeout"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdout, sys.stderr = real_out, real_err
    data = io.BytesIO()
    torch.save({"records": records, "exited": exited, "salt_received": salt is not None},
               data)
    data = data.getvalue()
    tmp = os.path.join(jobdir, "record.pt.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, os.path.join(jobdir, "record.pt"))
    # the seal: the grader accepts record.pt only if it still has these bytes (a notebook's
    # exit handler, thread or child process that rewrites it afterwards is caught)
    _seal(job.get("ready_fd"), hashlib.sha256(data).hexdigest())
    import resource

    use = resource.getrusage(resource.RUSAGE_SELF)
    progress(event="done", cpu=round(use.ru_utime + use.ru_stime, 2))
    return 0


def _say_ready(fd) -> bool:
    """Tell the grader through the pipe ``fd`` that the cells are done (it then sends the
    salt); False if that pipe is gone (the notebook closed it)."""
    if type(fd) is not int:
        return False
    try:
        os.write(fd, b"cells-done\n")
        return True
    except OSError:
        return False


def _seal(fd, sha256: str) -> None:
    """Send the record's SHA-256 through the ready pipe ``fd`` and close it."""
    if type(fd) is not int:
        return
    try:
        os.write(fd, f"record {sha256}\n".encode())
    except OSError:
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _read_salt(fd, timeout: float) -> int | None:
    """The salt the grader writes to the pipe ``fd`` after the cells (a line with an int), or
    None when none came (no pipe, end of file, garbage, or ``timeout`` seconds passed)."""
    import select

    if type(fd) is not int:
        return None
    data, end = b"", time.monotonic() + timeout
    try:
        os.set_blocking(fd, False)
        while b"\n" not in data and len(data) < 64:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            try:
                chunk = os.read(fd, 64)
            except BlockingIOError:  # someone else read it first
                continue
            if not chunk:
                break
            data += chunk
        text = data.split(b"\n", 1)[0].decode("ascii")
        salt = int(text)
        return salt if salt >= 0 else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


if __name__ == "__main__":
    status = run(sys.argv[1])
    # os._exit, not sys.exit: the exit handlers a notebook registered (atexit, weakref
    # finalizers, __del__) never run after the record is written and sealed
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status)
