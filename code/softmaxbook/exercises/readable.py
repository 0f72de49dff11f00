"""Turn the book's MyST markdown into markdown that plain JupyterLab (or Colab) renders.

The chapters are written for Jupyter Book: numbered equations in ```` ```{math} ```` blocks,
``{eq}``, ``{ref}``, ``{doc}``, ``{footcite:p}`` and ``{glue:text}`` roles, ``{note}`` and
``{exercise}`` directives. A notebook reader that does not know MyST shows them as source. The
student export (:mod:`softmaxbook.exercises.student`) passes every markdown cell through
:func:`readable_markdown`:

* ```` ```{math} ```` with ``:label:`` → ``$$ … \\tag{5.3} $$`` (the number the book shows);
* ``{eq}`label``` → ``(5.3)``; ``{ref}`` to an exercise → ``Exercise 5.4``; ``{ref}`text <x>```
  → ``text``; ``{doc}`05_euler_lagrange``` → a link to that notebook, titled;
* ``{glue:text}`key:fmt``` → the value formatted as the book formats it, from the executed
  notebook (:func:`glue_values`: the build's execution cache when it holds this version of the
  notebook, else one execution during the export);
* ``{footcite:p}`key``` → ``(Author, Year)``, ``{footcite:t}`` → ``Author (Year)``, and the
  ```` ```{footbibliography} ```` block → the list of the works the page cites;
* ``{exercise}`` / ``{exercise-start}`` → a bold "Exercise 5.4" line before the task;
  ``{note}`` and other admonitions → a block quote with a bold title; ``(label)=`` targets go.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

__all__ = ["Context", "readable_markdown", "glue_values", "bibliography", "context_for"]

GLUE_PREFIX = "application/papermill.record/"
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}\s*(?P<arg>.*)$")
_OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):\s*(?P<value>.*)$")
_ROLE = re.compile(r"\{(?P<role>[\w:-]+)\}`(?P<body>[^`]*)`")


@dataclass
class Context:
    """What the conversion needs to know about the book around one chapter."""

    chapter_number: int | None = None
    equations: dict[str, str] = field(default_factory=dict)   # label -> "5.3"
    exercises: dict[str, str] = field(default_factory=dict)   # label -> "5.4"
    glue: dict[str, str] | None = None                        # key -> text/plain repr
    references: dict[str, dict] = field(default_factory=dict)  # bib key -> fields
    titles: dict[str, str] = field(default_factory=dict)      # notebook stem -> title
    cited: list[str] = field(default_factory=list)            # keys cited so far, in order


# ------------------------------------------------------------------------------------------------
def bibliography(path: Path) -> dict[str, dict]:
    """``{key: {"authors": [last names], "year", "title", "where"}}`` from a BibTeX file."""
    from pybtex.database import parse_file

    out = {}
    for key, entry in parse_file(str(path)).entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [_latex_free(" ".join(p.last_names)) for p in people]
        f = entry.fields
        where = f.get("journal") or f.get("booktitle") or f.get("publisher") or f.get("howpublished") \
            or f.get("url") or ""
        out[key] = {"authors": names, "year": f.get("year", "n.d."),
                    "title": _latex_free(f.get("title", "")), "where": _latex_free(where),
                    "full": [_latex_free(str(p)) for p in people]}
    return out


def _latex_free(text: str) -> str:
    """BibTeX field text as plain text: commands dropped, accents decoded (latexcodec)."""
    import codecs

    import latexcodec  # noqa: F401 - registers the "ulatex" codec (a pybtex dependency)

    text = re.sub(r"\\texttt\s*\{([^}]*)\}", r"`\1`", text)
    text = re.sub(r"\\(?:emph|textit|textbf|mathrm|textsc)\s*\{([^}]*)\}", r"\1", text)
    if "$" not in text:  # math in a title stays as it is
        try:
            text = codecs.decode(text, "ulatex")
        except Exception:  # noqa: BLE001 - keep the raw text
            pass
    return text.replace("{", "").replace("}", "").replace("\\&", "&").replace("--", "–")


def _who(ref: dict) -> str:
    names = ref["authors"]
    if not names:
        return "Anonymous"
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} and {names[1]}"
    return f"{names[0]} et al."


def glue_values(nb: nbformat.NotebookNode) -> dict[str, str]:
    """``{key: text/plain}`` of every ``glue(...)`` in an executed notebook."""
    out = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is None:
                continue
            data = o.get("data", {})
            text = data.get(GLUE_PREFIX + "text/plain", data.get("text/plain"))
            if text is not None:
                out[name] = "".join(text) if isinstance(text, list) else text
    return out


def executed_notebook(path: Path, cache: Path | None = None, *, execute: bool = True,
                      timeout: int = 600) -> tuple[nbformat.NotebookNode | None, str]:
    """The executed version of the notebook at ``path`` and where it came from: the Jupyter
    cache of the build (``cache``, when it holds this very version of the notebook), else an
    execution now (when ``execute``), else ``(None, "none")``."""
    nb = nbformat.read(path, as_version=4)
    if cache is not None and Path(cache).is_dir():
        try:
            from jupyter_cache import get_cache

            jc = get_cache(str(cache))
            record = jc.match_cache_notebook(nb)
            return jc.get_cache_bundle(record.pk).nb, "cache"
        except Exception:  # noqa: BLE001 - not cached (or an unreadable cache): execute
            pass
    if not execute:
        return None, "none"
    from nbclient import NotebookClient

    # no timing metadata: the notebook's code and metadata stay what the build's cache hashes
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(Path(path).parent)}})
    client.execute()
    return nb, "executed"


# ------------------------------------------------------------------------------------------------
def context_for(nb: nbformat.NotebookNode, chapter_number: int | None = None, *,
                glue: dict[str, str] | None = None, references: dict | None = None,
                titles: dict[str, str] | None = None) -> Context:
    """The :class:`Context` of one chapter notebook."""
    from .index import equation_labels, notebook_exercises

    def num(k: int) -> str:
        return f"{chapter_number}.{k}" if chapter_number is not None else str(k)

    return Context(
        chapter_number=chapter_number,
        equations={label: num(k) for k, label in enumerate(equation_labels(nb), 1)},
        exercises={e.label: e.numbered for e in notebook_exercises(nb, "", chapter_number)},
        glue=glue, references=references or {}, titles=titles or {})


def _format_glue(text: str, spec: str) -> str:
    """As myst_nb.core.variables.format_plain_text formats a glued value."""
    from ast import literal_eval

    try:
        value = literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if spec == "":
        return str(value)
    kind = spec[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, spec)


def _role(m: re.Match, ctx: Context) -> str:
    role, body = m.group("role"), m.group("body")
    explicit = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^>]+)>$", body, re.S)
    text, target = (explicit.group("text"), explicit.group("target")) if explicit else (None, body)
    if role == "eq":
        number = ctx.equations.get(target)
        return f"({number})" if number else f"({target})"
    if role in ("ref", "numref"):
        if text:
            return text
        if target in ctx.exercises:
            return f"Exercise {ctx.exercises[target]}"
        return target
    if role == "doc":
        stem = Path(target).name
        title = text or ctx.titles.get(stem, stem)
        return f"[{title}]({stem}.ipynb)"
    if role.startswith("glue"):
        key, _, spec = target.rpartition(":") if ":" in target else (target, "", "")
        if not key:
            key, spec = target, ""
        if ctx.glue is None:
            # no executed notebook at hand: the number appears when the student runs the cell
            return f"*(`{key}`, computed by the code of this chapter)*"
        if key not in ctx.glue:
            return m.group(0)
        try:
            return _format_glue(ctx.glue[key].strip(), spec)
        except (TypeError, ValueError):
            return ctx.glue[key].strip().strip("'")
    if role.startswith("footcite") or role.startswith("cite"):
        keys = [k.strip() for k in target.split(",") if k.strip()]
        for k in keys:
            if k not in ctx.cited:
                ctx.cited.append(k)
        refs = [(k, ctx.references.get(k)) for k in keys]
        if role.endswith(":t"):
            return "; ".join(f"{_who(r)} ({r['year']})" if r else k for k, r in refs)
        return "(" + "; ".join(f"{_who(r)}, {r['year']}" if r else k for k, r in refs) + ")"
    if role in ("math",):
        return f"${target}$"
    return text or target


def _references(ctx: Context) -> str:
    lines = []
    for key in ctx.cited:
        r = ctx.references.get(key)
        if r is None:
            lines.append(f"- {key}")
            continue
        authors = ", ".join(r["full"]) if r["full"] else "Anonymous"
        where = f" {r['where']}." if r["where"] else ""
        lines.append(f"- {authors} ({r['year']}). {r['title']}.{where}")
    return "\n".join(lines)


def readable_markdown(text: str, ctx: Context) -> str:
    """One markdown cell made readable (see the module docstring)."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"^\s*\([\w:-]+\)=\s*$", line):  # a MyST target
            i += 1
            continue
        m = _FENCE.match(line)
        if m is None:
            out.append(_ROLE.sub(lambda r: _role(r, ctx), line))
            i += 1
            continue
        char, n = m.group("fence")[0], len(m.group("fence"))
        close = re.compile(rf"^\s*{re.escape(char)}{{{n},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), len(lines))
        body = lines[i + 1:end]
        opts = {}
        while body and _OPTION.match(body[0]):
            o = _OPTION.match(body[0])
            opts[o.group("key")] = o.group("value").strip()
            body = body[1:]
        name = m.group("name")
        inner = "\n".join(body).strip("\n")
        if name == "math":
            label = opts.get("label")
            tag = f" \\tag{{{ctx.equations[label]}}}" if label in ctx.equations else ""
            out += ["$$", inner + tag, "$$"]
        elif name == "footbibliography":
            refs = _references(ctx)
            if refs:
                out.append(refs)
        elif name in ("exercise", "exercise-start"):
            number = ctx.exercises.get(opts.get("label", ""), "")
            out.append(f"**Exercise {number}.**" if number else "**Exercise.**")
            if inner:
                out += ["", readable_markdown(inner, ctx)]
        elif name == "exercise-end":
            pass
        elif name in ("code-block", "code", "sourcecode"):
            out += [f"```{m.group('arg')}".rstrip(), inner, "```"]
        else:  # note, warning, admonition, ...: a block quote with a bold title
            title = m.group("arg").strip() or name.replace("-", " ").capitalize()
            quoted = readable_markdown(inner, ctx) if inner else ""
            out.append(f"> **{title}.**")
            for q in quoted.splitlines():
                out.append(f"> {q}" if q.strip() else ">")
        i = end + 1
    return "\n".join(out)
