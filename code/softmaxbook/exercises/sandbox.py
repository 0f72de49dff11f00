"""Run one student notebook in a sandbox (bubblewrap) and bring back its results as data.

This module runs in the trusted grader. It builds the ``bwrap`` command, starts
:mod:`softmaxbook.exercises.sandbox_runner` in it, watches it (cell and notebook time limits,
a process that dies or hangs: the cell is skipped and the run starts again without it) and reads
back what the runner wrote in the scratch folder, size-limited.

The sandbox (see ``book/instructors.md``): no network; its own PID, IPC and UTS namespaces, with a
/proc of its own (no view of the grader's command line or environment); a fresh environment;
read-only: the system's /usr, the Python installation, the virtual environment and the
``softmaxbook`` package -- nothing else of the host (no ``book/``, no ``_build/``, no
submissions, no output folder); writable: only its scratch folder (a copy of the student's own
folder). Run by root, the student's code runs as user ``nobody`` with no capabilities. Limits:
address space (memory), file size, CPU time, number of processes (not enforceable when the grader
runs as an unprivileged user: see instructors.md), open files, wall time; its output is capped.
When the run ends, every process it started dies with it (PID namespace).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Limits", "RunResult", "bwrap_path", "probe", "run_notebook"]

NOBODY = 65534


def bwrap_path() -> str | None:
    """The bubblewrap executable, or None if it is missing or cannot create a sandbox here."""
    exe = shutil.which("bwrap")
    if exe is None:
        return None
    try:
        probe = subprocess.run([exe, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
                                "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return exe if probe.returncode == 0 else None


@dataclass
class Limits:
    memory_mb: int = 4096          # address space of each process
    file_mb: int = 64              # largest file it may write
    cpu_s: int = 1800              # CPU seconds per process
    processes: int = 64            # processes of the sandbox's user (root runs only)
    output_chars: int = 20000      # text output kept per cell


@dataclass
class RunResult:
    cells: dict = field(default_factory=dict)       # cell index -> {"output", "error"}
    problems: list = field(default_factory=list)    # [(cell index or None, message)]
    record: dict | None = None                      # the runner's record.pt, loaded safely
    skipped_checks: dict = field(default_factory=dict)  # label -> status ("timeout"/"error")
    exited: int | None = None                       # cell that called exit()
    seconds: float = 0.0
    cpu_seconds: float = 0.0                        # CPU time the runner reported (untrusted)
    tampered: str | None = None                     # record.pt not what the runner sealed


def _ro_paths() -> list[str]:
    """What the sandbox sees read-only besides /usr: the Python installation, the virtual
    environment, the package (its folder only)."""
    import softmaxbook

    paths = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix),
             os.path.realpath(os.path.dirname(softmaxbook.__file__))}
    paths = {p for p in paths if not p.startswith("/usr/") and p != "/usr"}
    # nested paths: bind the outer one only
    return sorted(p for p in paths if not any(p != q and p.startswith(q + "/") for q in paths))


def _parents(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[:k]) for k in range(1, len(parts) + 1)]


def sandbox_command(bwrap: str, jobdir: Path, argv: list[str], limits: Limits,
                    as_root: bool) -> list[str]:
    cmd = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
           "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv",
           "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/job/home",
           "--setenv", "TMPDIR", "/job/tmp", "--setenv", "MPLBACKEND", "Agg",
           "--setenv", "MPLCONFIGDIR", "/job/tmp", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
           "--setenv", "OMP_NUM_THREADS", "1", "--setenv", "MKL_NUM_THREADS", "1",
           "--setenv", "LANG", "C.UTF-8",
           "--ro-bind", "/usr", "/usr"]
    if not as_root:
        cmd[1:1] = ["--unshare-user"]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = os.path.realpath("/" + link)
        if target.startswith("/usr/"):
            cmd += ["--symlink", target.lstrip("/"), "/" + link]
        elif os.path.isdir("/" + link):
            cmd += ["--ro-bind", "/" + link, "/" + link]
    for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "fonts",
                 "alternatives"):
        if os.path.exists("/etc/" + name):
            cmd += ["--ro-bind", "/etc/" + name, "/etc/" + name]
    made = set()
    for path in _ro_paths():
        for parent in _parents(path):
            if parent not in made:
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", parent]
        cmd += ["--ro-bind", path, path]
    cmd += ["--bind", str(jobdir), "/job", "--chdir", "/job/work", "--proc", "/proc",
            "--dev", "/dev"]
    if as_root:  # the student's code runs as nobody, without capabilities
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "/usr/bin/setpriv",
                "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--"]
    return cmd + argv


def _limits_fn(limits: Limits, as_root: bool):
    import resource

    def apply():
        mb = 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb,) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb * mb,) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if as_root:  # counts the processes of user nobody (the sandbox's user) host-wide
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    return apply


def _read_capped(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return b""


def _progress(path: Path) -> list[dict]:
    out = []
    for line in _read_capped(path, 64 * 1024 * 1024).decode("utf-8", "replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


_MAX_RECORD = 512 * 1024 * 1024
_MAX_READY = 4096  # bytes kept of the ready pipe ("cells-done", then the record's seal)


def _load_record(path: Path, ready: bytes | None = None) -> tuple[dict | None, str | None]:
    """(record, None), or (None, why) when ``path`` exists but is not what the runner sealed
    (``ready``: what it wrote to its ready pipe, whose ``record <sha256>`` lines must all name
    the file's bytes); (None, None) when there is no record. ``ready=None``: no seal needed."""
    import hashlib
    import io

    import torch

    try:
        if path.is_symlink() or not path.exists():
            return None, None
        if not path.is_file() or path.stat().st_size > _MAX_RECORD:
            return None, "the record is not a file or too large"
        with open(path, "rb") as fh:
            raw = fh.read(_MAX_RECORD + 1)
    except OSError:
        return None, None
    if ready is not None:
        seals = {ln.split()[1] for ln in ready.decode("ascii", "replace").splitlines()
                 if ln.startswith("record ") and len(ln.split()) == 2}
        if seals != {hashlib.sha256(raw).hexdigest()}:
            return None, ("the record of results was changed after the checks wrote it"
                          if seals else "the record of results came without its seal")
    try:
        data = torch.load(io.BytesIO(raw), weights_only=True)
    except Exception:  # noqa: BLE001 - a forged record is no record
        return None, "the record of results could not be read"
    return (data, None) if isinstance(data, dict) else (None, "malformed record of results")


def run_notebook(cells: list[tuple[int, str]], checks: list[dict], folder: Path | None,
                 notebook_name: str, *, cell_timeout: float, check_timeout: float,
                 notebook_timeout: float, limits: Limits | None = None,
                 unsafe: bool = False, bwrap: str | None = None, salt: int = 0) -> RunResult:
    """Run the code ``cells`` ([(index, source)]) of one notebook in a sandbox, then record the
    ``checks`` ([{"label", "answer"}]); ``folder`` (the student's folder, copied) is its working
    directory. Never raises for anything the notebook does.

    ``salt`` (the checks' secret per-run inputs, :func:`softmaxbook.exercises.salted`) is in no
    file: it goes through a pipe, written only once the runner says through a second pipe that
    the student's cells are done, so no cell can read it before the checks start. (Pipes, not the
    progress file: a notebook may delete the files of its folder.)"""
    limits = limits or Limits()
    t0 = time.monotonic()
    deadline = t0 + notebook_timeout + check_timeout * (len(checks) + 2) + 120
    result = RunResult()
    skip: list[int] = []
    skip_checks: list[str] = []
    as_root = os.geteuid() == 0
    margin = 20.0
    while True:
        with tempfile.TemporaryDirectory(prefix="softmaxbook-sandbox-") as tmp:
            jobdir = Path(tmp)
            work = jobdir / "work"
            if folder is not None:
                shutil.copytree(folder, work, symlinks=True,
                                ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
                for p in list(work.rglob("*")):  # a link could lead out of the copy
                    if p.is_symlink():
                        p.unlink()
            else:
                work.mkdir()
            (jobdir / "home").mkdir()
            (jobdir / "tmp").mkdir()
            salt_r, salt_w = os.pipe()    # the salt's way in, after the cells (see above)
            ready_r, ready_w = os.pipe()  # the runner's "cells done"
            os.set_blocking(ready_r, False)
            job = dict(cells=cells, checks=checks, skip=skip, skip_checks=skip_checks,
                       cell_timeout=cell_timeout, check_timeout=check_timeout,
                       notebook_timeout=notebook_timeout, max_output=limits.output_chars,
                       cwd="/job/work" if not unsafe else str(work), salt_fd=salt_r,
                       ready_fd=ready_w)
            (jobdir / "job.json").write_text(json.dumps(job))
            if as_root and not unsafe:
                for p in [jobdir, *jobdir.rglob("*")]:
                    os.lchown(p, NOBODY, NOBODY)
            # by its resolved path: the sandbox binds the environment there (a symlinked venv's
            # own path does not exist inside)
            py = os.path.join(os.path.realpath(sys.prefix), "bin", "python")
            if unsafe:
                argv = [py, "-I", "-m", "softmaxbook.exercises.sandbox_runner", str(jobdir)]
                env = {"PATH": "/usr/bin:/bin", "HOME": str(jobdir / "home"),
                       "TMPDIR": str(jobdir / "tmp"), "MPLBACKEND": "Agg",
                       "MPLCONFIGDIR": str(jobdir / "tmp"), "PYTHONDONTWRITEBYTECODE": "1",
                       "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"}
                cmd, cwd = argv, str(work)
            else:
                argv = [py, "-I", "-m", "softmaxbook.exercises.sandbox_runner", "/job"]
                cmd, env, cwd = sandbox_command(bwrap, jobdir, argv, limits, as_root), {}, "/"
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        env=env, cwd=cwd, pass_fds=(salt_r, ready_w),
                                        preexec_fn=_limits_fn(limits, as_root and not unsafe),
                                        start_new_session=True)
            finally:
                os.close(salt_r)
                os.close(ready_w)
            salt_sent, ready = False, b""
            killed = None
            watch_key, since = None, time.monotonic()
            seen_size, events = -1, []
            while True:
                try:
                    proc.wait(timeout=0.25)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                try:
                    size = (jobdir / "progress.jsonl").stat().st_size
                except OSError:
                    size = 0
                if size != seen_size:  # parse again only when the runner wrote something
                    seen_size = size
                    events = _progress(jobdir / "progress.jsonl")
                last = events[-1] if events else None
                ready = (ready + _read_ready(ready_r))[:_MAX_READY]
                if not salt_sent:
                    if b"cells-done" in ready:
                        salt_sent = True
                        _send_salt(salt_w, salt)
                if now > deadline:
                    killed = ("deadline", last)
                elif last is not None and last.get("event") in ("start", "check"):
                    key = (last.get("event"), last.get("cell"), last.get("label"), len(events))
                    if key != watch_key:
                        watch_key, since = key, now
                    limit = cell_timeout if last["event"] == "start" else check_timeout
                    if now - since > limit + margin:
                        killed = ("hang", last)
                if killed:
                    _kill(proc)
                    break
            if not salt_sent:
                os.close(salt_w)
            for _ in range(64):  # the rest of the ready pipe: the seal (its writers are gone)
                more = _read_ready(ready_r)
                if not more:
                    break
                ready = (ready + more)[:_MAX_READY]
            os.close(ready_r)
            events = _progress(jobdir / "progress.jsonl")
            record, result.tampered = _load_record(jobdir / "record.pt", ready)
        for e in events:
            if e.get("event") == "done" and isinstance(e.get("cpu"), (int, float)):
                result.cpu_seconds += float(e["cpu"])  # as the sandbox reports it
            if e.get("event") == "end" and isinstance(e.get("cell"), int):
                result.cells[e["cell"]] = {"output": str(e.get("output", "")),
                                           "error": e.get("error"), "exit": bool(e.get("exit"))}
                if e.get("exit"):
                    result.exited = e["cell"]
            if e.get("event") == "deadline" and isinstance(e.get("cell"), int):
                result.problems.append((e["cell"], f"the notebook ran past its time limit of "
                                                   f"{notebook_timeout:g} s: this cell and later "
                                                   "ones were not run."))
        if record is not None:
            result.record = record
            break
        if result.tampered:
            break
        last = next((e for e in reversed(events) if e.get("event") in ("start", "check")), None)
        why = killed[0] if killed else "died"
        if killed and killed[0] == "deadline":
            result.problems.append((None, "the notebook and its checks ran past the grader's "
                                          "overall time limit and were stopped."))
            break
        if last is None:
            result.problems.append((None, "the sandbox stopped before running any cell "
                                          f"(exit status {proc.returncode})."))
            break
        if last.get("event") == "start" and isinstance(last.get("cell"), int):
            i = last["cell"]
            if i in skip:
                break
            skip.append(i)
            result.problems.append((i, (f"did not finish within {cell_timeout + margin:g} s, "
                                        "ignored the interruption and was skipped.")
                                    if why == "hang" else
                                    "stopped the Python process (or used more memory than "
                                    "allowed) and was skipped."))
            result.cells.pop(i, None)
        elif last.get("event") == "check":
            label = str(last.get("label"))
            if label in skip_checks:
                break
            skip_checks.append(label)
            result.skipped_checks[label] = "timeout" if why == "hang" else "error"
        else:
            break
        if time.monotonic() > deadline:
            break
    result.seconds = time.monotonic() - t0
    return result


def probe(*, unsafe: bool = False, bwrap: str | None = None, limits: Limits | None = None,
          timeout: float = 300) -> str | None:
    """None if the sandbox can start Python and import torch and the book's package (what
    every notebook needs), else what went wrong. A sandbox that cannot start is the grader's
    problem: grading on would give every student an error."""
    code = "import torch\nimport softmaxbook.exercises\nprint('sandbox probe ok')\n"
    run = run_notebook([(0, code)], [], None, "probe.ipynb", cell_timeout=timeout,
                       check_timeout=60, notebook_timeout=timeout, limits=limits,
                       unsafe=unsafe, bwrap=bwrap, salt=0)
    info = run.cells.get(0) or {}
    if run.record is not None and not info.get("error") and \
            "sandbox probe ok" in str(info.get("output", "")):
        return None
    why = "; ".join(m for _, m in run.problems) or (
        f"importing torch and softmaxbook failed: {info['error']}" if info.get("error")
        else "it wrote no results")
    return why


def _read_ready(fd: int) -> bytes:
    """What the runner has written to its ready pipe so far (never blocks)."""
    try:
        return os.read(fd, 65536)
    except (BlockingIOError, OSError):
        return b""


def _send_salt(fd: int, salt: int) -> None:
    """Write the salt to the runner's pipe and close it (a runner that died meanwhile, or a
    full pipe, loses it: its checks then do not run)."""
    try:
        os.set_blocking(fd, False)
        os.write(fd, f"{int(salt)}\n".encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()
