"""A static scan of the code a student wrote, run by the trusted grader (never in the sandbox).

Two kinds of findings:

* notebook-wide **flags**: code that tampers with the checking machinery or escapes the sandbox
  (monkeypatching modules, ``sys.modules``, ``sys.stdout``, torch's dispatch
  (``DisableTorchFunction``, ``__torch_function__``), frame inspection, ``gc``, ``ctypes``,
  processes, sockets, ``/proc``). A flagged notebook earns 0 and the instructor is told why.
* per-exercise **forbidden names**: the functions an exercise forbids, named in the answer's own
  code (the cells that define the answer and the functions it uses). The runtime guard in the
  sandbox can be switched off from inside; this scan cannot.

"Code the student wrote" is every code cell that is not, verbatim, a code cell of the student
notebook the book hands out.
"""

from __future__ import annotations

import ast
import re
import symtable

__all__ = ["student_cells", "notebook_flags", "answer_uses"]

# names whose mere use in a student's cell flags the notebook
_FLAG_ATTRS = {
    "DisableTorchFunction": "switches off torch's function dispatch (the forbidden-function "
                            "guard)",
    "DisableTorchFunctionSubclass": "switches off torch's function dispatch",
    "__torch_function__": "overrides torch's function dispatch",
    "TorchFunctionMode": "overrides torch's function dispatch",
    "_getframe": "inspects the caller's frames", "f_back": "inspects the caller's frames",
    "f_locals": "inspects the caller's frames", "f_globals": "inspects the caller's frames",
    "currentframe": "inspects the caller's frames", "settrace": "installs a tracer",
    "setprofile": "installs a profiler", "get_referrers": "searches the interpreter's objects",
    "get_objects": "searches the interpreter's objects", "modules": None,  # sys.modules only
    "__builtins__": "changes the built-ins", "__globals__": "reaches into other modules",
    "__closure__": "reaches into other functions", "__code__": "rewrites functions",
    "fork": "starts processes", "forkpty": "starts processes", "setsid": "detaches a process",
    "daemon": None, "system": None, "popen": "starts processes", "kill": None,
    "execv": "starts processes", "execve": "starts processes", "spawnv": "starts processes",
    "posix_spawn": "starts processes", "killpg": "stops processes",
    "reload": "reloads modules",
}
_FLAG_MODULES = {
    "ctypes": "loads native code", "subprocess": "starts processes",
    "multiprocessing": "starts processes", "socket": "opens network connections",
    "importlib": "imports or reloads modules by hand", "gc": "searches the interpreter's objects",
    "inspect": "inspects frames and source", "unittest": "patches objects (mock)",
    "mock": "patches objects (mock)", "builtins": "changes the built-ins",
    "threading": "runs code outside the cells", "signal": "changes the grader's signals",
    "pty": "starts processes", "sysconfig": None, "site": "changes the import system",
}
_HARMLESS = {"importlib.resources", "importlib.metadata"}  # data files, versions
_ALLOWED_PACKAGE_IMPORTS = {("softmaxbook.exercises", "check")}


def _norm(src: str) -> str:
    return "\n".join(line.rstrip() for line in src.strip().splitlines())


def _is_progress_cell(src: str) -> bool:
    """The book's own progress cell (:func:`softmaxbook.exercises.student.make_student_notebook`),
    recognised by its form, not by its tag (an editor or a copy may drop the tag, or the handout
    may have changed since): ``from softmaxbook.exercises.progress import progress`` and one call
    ``progress([(label, answer, number), ...], globals(), by_hand=[(number, kind), ...])`` with
    literal strings only, each answer a plain (dotted) name (``progress`` evaluates it)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return False
    if len(tree.body) != 2:
        return False
    imp, call = tree.body
    if not (isinstance(imp, ast.ImportFrom) and imp.module == "softmaxbook.exercises.progress"
            and imp.level == 0 and len(imp.names) == 1 and imp.names[0].name == "progress"
            and imp.names[0].asname is None):
        return False
    if not (isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)):
        return False
    c = call.value
    if not (isinstance(c.func, ast.Name) and c.func.id == "progress" and len(c.args) == 2
            and isinstance(c.args[1], ast.Call) and isinstance(c.args[1].func, ast.Name)
            and c.args[1].func.id == "globals" and not c.args[1].args
            and not c.args[1].keywords
            and all(k.arg == "by_hand" for k in c.keywords) and len(c.keywords) <= 1):
        return False

    def literal_rows(node, width):
        return isinstance(node, (ast.List, ast.Tuple)) and all(
            isinstance(row, ast.Tuple) and len(row.elts) == width and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in row.elts)
            for row in node.elts)

    if not literal_rows(c.args[0], 3) or not all(
            re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", row.elts[1].value)
            for row in c.args[0].elts):
        return False
    return all(literal_rows(k.value, 2) for k in c.keywords)


def student_cells(submitted: list[tuple[int, str]], pristine: list[str]) -> list[tuple[int, str]]:
    """The cells of ``submitted`` ([(index, source)]) that are not verbatim book cells, nor the
    book's progress cell (recognised by its form: :func:`_is_progress_cell`)."""
    known = {_norm(s) for s in pristine}
    return [(i, s) for i, s in submitted if _norm(s) not in known and not _is_progress_cell(s)]


def _parse(src: str):
    # IPython magics and shell escapes are not Python: blank them for the parser
    lines = [("pass" if ln.lstrip().startswith(("%", "!")) else ln) for ln in src.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


# configuration namespaces of modules: assigning an entry changes settings (figure size, the
# environment, cuDNN's determinism, pandas' display), not the functions a check or an answer calls
_CONFIG_NAMESPACES = {"rcParams", "environ", "options", "backends"}


def _is_configuration(target) -> bool:
    """``plt.rcParams["figure.figsize"]``, ``os.environ["OMP_NUM_THREADS"]``,
    ``torch.backends.cudnn.deterministic``, ``pd.options.display.max_rows``: an entry *inside* a
    configuration namespace directly below a module (not the namespace itself, no private or
    dunder names on the way)."""
    path = []
    node = target
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        path.append(node.attr if isinstance(node, ast.Attribute) else "[]")
        node = node.value
    if not isinstance(node, ast.Name):
        return False
    path.append(node.id)
    path.reverse()
    return (len(path) >= 3 and path[1] in _CONFIG_NAMESPACES
            and not any(part.startswith("_") for part in path))


# Names a student's code reaches through strings (finding 6 of issue 23's tester): the scan
# cannot read a name built at run time, so the routes themselves are flagged.
_BY_NAME = {"attrgetter", "methodcaller"}
_DISPATCH_WORDS = ("torch_function", "function_stack", "_python_dispatch", "DisableTorch",
                   "_dispatch_tls", "_pop_mode", "_push_mode")


def _risky_name(text: str) -> bool:
    """A literal attribute path (``"ops.aten.logsumexp"``, ``"_C._pop_torch_function_stack"``)
    that leads to private or dispatch internals, the aten operators or a flagged name."""
    return any(part.startswith("_") or part in ("ops", "aten", "overrides") or
               (part in _FLAG_ATTRS and _FLAG_ATTRS[part]) for part in text.split(".")) or \
        any(w in text for w in _DISPATCH_WORDS)


def _magic_flags(i, src: str, add) -> None:
    """IPython magics and shell lines that write Python files (``%%writefile helper.py``,
    ``!echo ... > helper.py``, a ``%%bash`` cell): code that arrives as data is never scanned."""
    lines = src.splitlines()
    magic = [ln for ln in lines if ln.lstrip().startswith(("%", "!"))]
    if lines and lines[0].lstrip().startswith("%%"):
        magic = lines
    text = "\n".join(magic)
    if re.search(r"\.py(?![A-Za-z0-9_])", text):
        add(i, "a .py file from a magic or shell line", "writes or runs Python code the scan "
                                                          "cannot read")
    if any(w in text for w in _DISPATCH_WORDS + ("torch._C", "torch.ops")):
        add(i, "torch internals in a magic or shell line", "uses torch's internal dispatch")


def _string_route_flags(i, tree, add) -> None:
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.search(r"\.py[cw]?$", node.value.strip()):
                add(i, repr(node.value[-40:]), "names a Python file (a module written by the "
                                               "notebook is code the scan cannot read)")
            if any(w in node.value for w in _DISPATCH_WORDS):
                add(i, repr(node.value[:40]), "names torch's function-mode internals")
        elif isinstance(node, ast.Attribute) and node.attr in ("__getattribute__", "__dict__",
                                                               "__getattr__"):
            add(i, f"...{node.attr}", "looks up attributes by a name in a string")
        elif isinstance(node, ast.Attribute) and node.attr in _BY_NAME or \
                isinstance(node, ast.Name) and node.id in _BY_NAME:
            if id(node) not in called:  # judged at the call below, unless passed around
                add(i, getattr(node, "attr", None) or node.id, "looks up attributes by a name "
                                                              "in a string")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                add(i, f"from {'.' * node.level}{mod} import ...", "imports a module of the "
                                                                  "notebook's own folder")
            elif mod.startswith(("torch._C", "torch.overrides", "torch._dynamo",
                                 "torch.utils._python_dispatch", "torch.ops", "torch._ops")):
                add(i, f"from {mod} import ...", "uses torch's internal dispatch")
            else:
                _not_installed(i, mod, add)
            for a in node.names:
                if a.name in _BY_NAME and a.asname or a.name.startswith("_") or \
                        a.name == "ops" and mod == "torch" or \
                        any(w in a.name for w in _DISPATCH_WORDS):
                    add(i, f"from {mod} import {a.name}", "reaches attributes by name or "
                                                           "torch's internals")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(("torch._C", "torch.overrides", "torch._dynamo",
                                      "torch.utils._python_dispatch", "torch._ops")):
                    add(i, f"import {a.name}", "uses torch's internal dispatch")
                else:
                    _not_installed(i, a.name, add)
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else (
                f.id if isinstance(f, ast.Name) else "")
            if name in _BY_NAME or name == "getattr" and len(node.args) > 1:
                args = node.args[1:2] if name == "getattr" else list(node.args)
                for a in args:
                    if not (isinstance(a, ast.Constant) and isinstance(a.value, str)):
                        add(i, f"{name}(<computed name>)", "looks up an attribute by a "
                                                           "computed name")
                    elif _risky_name(a.value):
                        add(i, f"{name}({a.value!r})", "reaches private attributes, torch's "
                                                       "dispatch or aten operators by name")
            elif name == "vars":
                add(i, "vars(...)", "looks up attributes by a name in a string")


def _not_installed(i, module: str, add) -> None:
    """An import of a module that is neither installed nor part of Python: a file the notebook
    wrote or the student handed in beside it, whose code the scan never reads."""
    import importlib.util
    import sys

    top = module.split(".")[0]
    if not top or top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        add(i, f"import {module}", "imports a module that is not an installed package (a file "
                                   "written by the notebook or handed in beside it is code the "
                                   "scan cannot read)")


def notebook_flags(cells: list[tuple[int, str]], code_numbers: dict[int, int | str]) -> list[str]:
    """Reasons to flag the notebook, one line each ("code cell 3: ... sys.modules ...")."""
    found: list[str] = []

    def add(i, what, why):
        msg = f"code cell {code_numbers.get(i, i)}: `{what}` {why}"
        if msg not in found:
            found.append(msg)

    for i, src in cells:
        if "/proc" in src or "/work/" in src or "gradebook" in src:
            add(i, "/proc" if "/proc" in src else ("gradebook" if "gradebook" in src
                                                   else "/work/"),
                "reads the grader's or other students' files")
        _magic_flags(i, src, add)
        tree = _parse(src)
        if tree is not None:
            _string_route_flags(i, tree, add)
        if tree is None:
            for name, why in _FLAG_ATTRS.items():
                if why and re.search(rf"\b{re.escape(name)}\b", src):
                    add(i, name, why)
            continue
        imported_modules: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    top = a.name.split(".")[0]
                    imported_modules.add(a.asname or top)
                    why = _FLAG_MODULES.get(top) or _FLAG_MODULES.get(a.name.split(".")[-1])
                    if why and a.name not in _HARMLESS:
                        add(i, f"import {a.name}", why)
                    if a.name.startswith("softmaxbook.exercises"):
                        add(i, f"import {a.name}", "reaches into the checking code")
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                top = mod.split(".")[0]
                why = _FLAG_MODULES.get(top) or _FLAG_MODULES.get(mod.split(".")[-1])
                if why and mod not in _HARMLESS:
                    add(i, f"from {mod} import ...", why)
                for a in node.names:
                    if mod.startswith("softmaxbook.exercises") and \
                            (mod, a.name) not in _ALLOWED_PACKAGE_IMPORTS:
                        add(i, f"from {mod} import {a.name}", "reaches into the checking code")
                    if mod == "softmaxbook" and a.name == "exercises":
                        add(i, "from softmaxbook import exercises", "reaches into the checking "
                                                                    "code")
                    w = _FLAG_ATTRS.get(a.name)
                    if w:
                        add(i, f"from {mod} import {a.name}", w)
                    if a.name in _FLAG_MODULES and _FLAG_MODULES[a.name]:
                        add(i, f"from {mod} import {a.name}", _FLAG_MODULES[a.name])
            elif isinstance(node, ast.Attribute):
                dotted = _dotted(node) or ""
                why = _FLAG_ATTRS.get(node.attr)
                if node.attr == "modules" and dotted.endswith("sys.modules"):
                    why = "changes or reads the module table"
                elif node.attr in ("system", "kill", "daemon") and \
                        dotted.split(".")[0] in ("os", "posix"):
                    why = "starts or stops processes"
                elif node.attr in ("modules", "system", "kill", "daemon"):
                    why = None
                if dotted.startswith(("torch._C", "torch.overrides", "torch._dynamo",
                                      "torch.utils._python_dispatch")):
                    why = "uses torch's internal dispatch"
                if dotted.startswith("softmaxbook.exercises"):
                    why = "reaches into the checking code"
                if why:
                    add(i, dotted or node.attr, why)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id == "getattr" and len(node.args) > 1 and \
                    not isinstance(node.args[1], ast.Constant):
                add(i, "getattr(..., <computed name>)", "looks up an attribute by a computed "
                                                        "name")
            elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__import__"):
                add(i, node.id, "changes the built-ins or imports by hand")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("setattr", "delattr", "exec", "eval", "compile",
                                     "globals", "vars", "__import__"):
                add(i, f"{node.func.id}(...)", "changes objects or runs code by name")
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete))
                           else [node.target])
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, (ast.Attribute, ast.Subscript)):
                            base = sub.value
                            while isinstance(base, (ast.Attribute, ast.Subscript)):
                                base = base.value
                            dotted = _dotted(sub.value) if isinstance(sub.value, (
                                ast.Attribute, ast.Name)) else None
                            if _is_configuration(sub):
                                break
                            if isinstance(base, ast.Name) and (
                                    base.id in imported_modules or base.id in (
                                        "torch", "sys", "np", "numpy", "math", "os", "nn", "F",
                                        "softmaxbook", "builtins", "check")):
                                add(i, f"{dotted or base.id}... = ", "changes a module "
                                                                     "(monkeypatching)")
                            break
    return found


def _names_in(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bound_at_top(node) -> set[str]:
    """The global names a top-level statement binds (defs, assignments, imports, loop
    variables, ``with ... as``), not those bound inside the functions or classes it defines."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name.split(".")[0]) for a in node.names}
    out: set[str] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
            continue
        if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                          ast.GeneratorExp)):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name.split(".")[0]) for a in n.names}
        todo.extend(ast.iter_child_nodes(n))
    return out


def _free_names(node) -> set[str]:
    """The global names a top-level statement reads: what its code (function bodies included,
    decorators, defaults) resolves in the notebook's namespace. A function's parameters and the
    names it binds itself are its own, not the notebook's (a local ``p`` is not a top-level
    ``p``)."""
    try:
        table = symtable.symtable(ast.unparse(node), "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError):
        return _names_in(node)
    out: set[str] = set()
    todo = [table]
    while todo:
        t = todo.pop()
        for sym in t.get_symbols():
            if not sym.is_referenced():
                continue
            if t.get_type() == "module" or sym.is_global() or (
                    t.get_type() == "class" and not sym.is_local()):
                out.add(sym.get_name())
        todo.extend(t.get_children())
    return out


def answer_uses(cells: list[tuple[int, str]], answer: str, forbidden: set[str],
                package: bool) -> list[str]:
    """The forbidden names that the answer's code uses: the cells' top-level statements that
    bind the global names in ``answer`` and, transitively, those binding the global names their
    code reads (a function's parameters and local variables are not followed: a top-level line
    elsewhere that assigns the same name is not the answer's code). ``forbidden`` holds names
    as the check shows them ("torch.logsumexp", "Tensor.backward (autograd)"); ``package``: the
    check also forbids the book's own functions (any use of ``softmaxbook`` counts). Code that
    reaches the aten operators (``torch.ops``) counts as a forbidden function whenever the
    exercise forbids any: the runtime guard does not see them."""
    defs: dict[str, list] = {}
    for _, src in cells:
        tree = _parse(src)
        if tree is None:
            continue
        for node in tree.body:
            for name in _bound_at_top(node):
                defs.setdefault(name, []).append(node)
    try:
        start = _names_in(ast.parse(answer, mode="eval"))
    except SyntaxError:
        start = set()
    todo, done, nodes = list(start), set(), []
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        for node in defs.get(name, []):
            if any(node is n for n in nodes):
                continue
            nodes.append(node)
            todo.extend(_free_names(node) - done)
    imports: list[tuple[str, str]] = []  # (module, name) imported by the answer's code
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.ImportFrom):
                imports.extend((sub.module or "", a.name) for a in sub.names)
            elif isinstance(sub, ast.Import):
                imports.extend((a.name, "") for a in sub.names)
    targets = []
    for shown in forbidden:
        dotted = shown.split()[0].rstrip(",.;")
        parts = dotted.split(".")
        targets.append((shown, parts[-1], parts[-2] if len(parts) > 1 else ""))
    hits: list[str] = []
    for node in nodes:
        for sub in ast.walk(node):
            if forbidden and isinstance(sub, ast.Attribute) and sub.attr == "ops" and \
                    (_dotted(sub) or "").split(".")[0] in ("torch", "ops"):
                hits.append("torch.ops (the aten operators behind the forbidden functions)")
            if isinstance(sub, ast.Attribute):
                owner = sub.value.attr if isinstance(sub.value, ast.Attribute) else (
                    sub.value.id if isinstance(sub.value, ast.Name) else "")
                for shown, last, prev in targets:
                    if sub.attr == last and (prev in ("", "torch", "Tensor", "F", "functional",
                                                      "special", "nn")
                                             or owner == prev):
                        hits.append(shown)
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and \
                    sub.func.id == "getattr" and len(sub.args) > 1 and \
                    isinstance(sub.args[1], ast.Constant):
                for shown, last, _ in targets:
                    if sub.args[1].value == last:
                        hits.append(shown)
    for module, name in imports:
        if forbidden and (module.startswith(("torch.ops", "torch._ops")) or
                          module == "torch" and name == "ops"):
            hits.append("torch.ops (the aten operators behind the forbidden functions)")
        for shown, last, _ in targets:
            if name == last:
                hits.append(shown)
        if package and module.startswith("softmaxbook") and not module.startswith(
                "softmaxbook.exercises"):
            hits.append(f"{module}.{name}" if name else module)
    return sorted(set(hits))
