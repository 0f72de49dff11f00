"""The book's Sphinx extensions (book/_ext) on their own, without a build."""

from __future__ import annotations

import importlib.util

from conftest import ROOT


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "book" / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bib_latex_renders_text_commands_and_inline_math():
    bib = _load("bib_latex")
    assert bib.tex_to_text(r"NaN gradient of \texttt{logsumexp} when all are $-\infty$") == (
        "NaN gradient of {logsumexp} when all are \u2212\u221e")
    assert bib.tex_to_text(r"Computing $\log(1 - \exp(-|a|))$") == (
        "Computing log(1 \u2212 exp(\u2212|a|))")
    assert bib.tex_to_text(r"\emph{A \textbf{b}} c") == "{A {b}} c"
    assert bib.leftover_latex(bib.tex_to_text(r"H{\"a}rm \_ 5\%")) == []


def test_bib_latex_reports_what_it_cannot_render():
    bib = _load("bib_latex")
    assert bib.leftover_latex(bib.tex_to_text(r"a \foo{b}")) == [r"\foo"]
    assert bib.leftover_latex(bib.tex_to_text(r"$\mathcal{O}(n)$")) == [r"\mathcal"]
    assert bib.leftover_latex("costs 5 $") == ["$"]


def test_checked_lines_come_off_the_end_of_a_printed_output():
    ext = _load("folds")
    mark = "\u2713 checked: "
    assert ext.split_claims(f"table\n  row\n{mark}a\n{mark}b `c`\n") == (
        "table\n  row", ["a", "b `c`"])
    assert ext.split_claims(f"{mark}only\n") == ("", ["only"])
    # a mark that is not at the end is printed text, left alone
    assert ext.split_claims(f"{mark}x\nafter\n") == (f"{mark}x\nafter", [])


def test_checked_line_html_is_escaped_with_code_in_backticks():
    ext = _load("folds")
    html = ext.claim_html("`torch.log_softmax` gives 0 < 1e-7 & <b>")
    assert html.startswith('<p class="checked-claim"><span class="checked-mark" '
                           'aria-hidden="true">\u2713</span> checked: ')
    assert "<code>torch.log_softmax</code> gives 0 &lt; 1e-7 &amp; &lt;b&gt;</p>" in html
