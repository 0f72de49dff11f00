"""Render the LaTeX in references.bib instead of printing it (the ``book`` bibliography style).

pybtex decodes accents (``{\\'e}``) and escapes (``\\_``) but prints every other command as it
stands: a title such as ``NaN gradient of \\texttt{logsumexp} when all inputs are $-\\infty$`` came
out as ``NaN gradient of \\texttt logsumexp when all inputs are $-\\infty $``. The style ``book``
(the configured ``alpha`` style with one step more) rewrites each field before formatting:

* ``\\texttt{x}``, ``\\emph{x}``, ``\\textit{x}``, ``\\textbf{x}``, ``\\textsc{x}``, ``\\textrm{x}``
  become ``{x}`` (the words, protected from case changes);
* inline math ``$...$`` becomes plain Unicode text: ``\\log``, ``\\exp`` and the like lose their
  backslash, ``\\infty`` and Greek letters become their symbols, ``-`` a minus sign, braces go.

Anything still LaTeX after that (an unknown command, a stray ``$``) is a warning naming the entry
and field, so the strict build fails until the entry or this table is mended.
"""

from __future__ import annotations

import codecs
import re

from sphinx.util import logging

logger = logging.getLogger(__name__)

TEXT_COMMANDS = ("texttt", "emph", "textit", "textbf", "textsc", "textrm", "textsf", "mbox")
MATH_WORDS = ("log", "exp", "max", "min", "sup", "inf", "lim", "sin", "cos", "tanh", "arg")
MATH_SYMBOLS = {
    "infty": "∞", "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε",
    "varepsilon": "ε", "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π", "sigma": "σ",
    "tau": "τ", "phi": "φ", "varphi": "φ", "Phi": "Φ", "Sigma": "Σ", "sum": "∑", "prod": "∏",
    "leq": "≤", "le": "≤", "geq": "≥", "ge": "≥", "neq": "≠", "approx": "≈", "times": "×",
    "cdot": "·", "to": "→", "in": "∈", "ldots": "…", "cdots": "⋯", "partial": "∂",
    "nabla": "∇", "pm": "±",
}
_MATH = re.compile(r"(?<!\\)\$(.+?)(?<!\\)\$")
_TEXT_COMMAND = re.compile(r"\\(" + "|".join(TEXT_COMMANDS) + r")\s*\{")
_COMMAND = re.compile(r"\\([A-Za-z]+)\s*")
_LEFTOVER = re.compile(r"\\[A-Za-z]+|(?<!\\)\$")


def _math_to_text(math: str) -> str:
    def command(m: re.Match) -> str:
        name = m.group(1)
        if name in MATH_WORDS:
            return name
        if name in MATH_SYMBOLS:
            return MATH_SYMBOLS[name]
        if name in ("left", "right", "mathrm", "operatorname", "text"):
            return ""
        return "\\" + name + " "  # left for the check to report

    text = re.sub(r"\\[,;!: ]", " ", math)
    text = _COMMAND.sub(command, text)
    text = text.replace("{", "").replace("}", "")
    text = re.sub(r"(?<![A-Za-z])-", "\u2212", text)
    return text


def tex_to_text(value: str) -> str:
    """One field's LaTeX with text commands and inline math rewritten (see the module doc)."""
    value = _MATH.sub(lambda m: _math_to_text(m.group(1)), value)
    while True:
        m = _TEXT_COMMAND.search(value)
        if m is None:
            return value
        value = value[:m.start()] + "{" + value[m.end():]


def leftover_latex(value: str) -> list[str]:
    """LaTeX that pybtex would print as it stands (after its own decoding of accents)."""
    import latexcodec  # noqa: F401 (registers the codec)

    return _LEFTOVER.findall(codecs.decode(value, "ulatex"))


def _style_class(base):
    from pybtex.database import Entry

    class BookStyle(base):
        """``base`` with every field passed through :func:`tex_to_text` first."""

        def format_entry(self, label, entry, bib_data=None):
            fields = {}
            for name, value in entry.fields.items():
                text = tex_to_text(value)
                left = leftover_latex(text)
                if left:
                    logger.warning("references.bib: entry %r, field %r: LaTeX the site cannot "
                                   "render: %s (book/_ext/bib_latex.py lists what it can)",
                                   entry.key, name, ", ".join(sorted(set(left))))
                fields[name] = text
            clean = Entry(entry.type, fields=fields, persons=entry.persons)
            clean.key = entry.key
            return super().format_entry(label, clean, bib_data=bib_data)

    return BookStyle


def register(base_name: str = "alpha") -> None:
    """Register the style ``book`` (``base_name`` plus the LaTeX rewriting) with pybtex."""
    import pybtex.plugin

    base = pybtex.plugin.find_plugin("pybtex.style.formatting", base_name)
    pybtex.plugin.register_plugin("pybtex.style.formatting", "book", _style_class(base),
                                  force=True)


def setup(app):
    register()
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
