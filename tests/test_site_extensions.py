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


def test_explorer_frames_become_files_addressed_from_the_page():
    import base64

    ext = _load("explorer_frames")
    one, two = b"RIFF-frame-one", b"RIFF-frame-two"
    uri = lambda data: "data:image/webp;base64," + base64.b64encode(data).decode()  # noqa: E731
    text = (f'<div class="sbx-explorer"><img src="{uri(one)}"><script>{{"frames": '
            f'{{"0": ["{uri(one)}", "a"], "1": ["{uri(two)}", "b"]}}}}</script></div>')
    written = {}
    out, n = ext.externalise(text, written.__setitem__, "book/01_softmax.html")
    assert n == 3 and "data:image" not in out
    assert sorted(written.values()) == [one, two]  # one file per distinct frame
    names = sorted(written)
    assert all(name.endswith(".webp") for name in names)
    assert out.count(f"../_images/explorers/{names[0]}") + out.count(
        f"../_images/explorers/{names[1]}") == 3
    # a page at the top of the site addresses them without ../
    out, _ = ext.externalise(text, written.__setitem__, "index.html")
    assert '"_images/explorers/' in out


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
