"""The chapters run on a plain kernel: ``softmaxbook.glue`` writes what ``myst_nb.glue`` writes,
and no notebook imports anything that ``pip install "softmaxbook[book]"`` does not bring."""

import ast
import json
import sys
import tomllib
from pathlib import Path
from unittest import mock

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
# import name -> distribution name, where they differ
DIST = {"sklearn": "scikit-learn", "IPython": "ipython", "PIL": "pillow"}


def _captured(fn, *args, mystnb=True, **kwargs):
    calls = []

    def fake(obj, **kw):
        calls.append((obj, kw))

    with mock.patch("IPython.display.display", fake):
        if mystnb:
            with mock.patch("myst_nb.ext.glue.ipy_display", fake):
                fn(*args, **kwargs)
        else:
            fn(*args, **kwargs)
    return calls


@pytest.mark.parametrize("value", [0.0312, "text", 3, torch.tensor([1.0, 2.0]), [1, 2]])
@pytest.mark.parametrize("display", [True, False])
def test_same_output_as_myst_nb(value, display):
    from myst_nb import glue as theirs

    from softmaxbook.glue import glue as ours

    assert _captured(ours, "x", value, display=display) == \
        _captured(theirs, "x", value, display=display)


def test_works_without_myst_nb(monkeypatch):
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # import myst_nb now raises
    from softmaxbook.glue import glue

    calls = _captured(glue, "n", 7, mystnb=False)
    assert calls[0][1]["metadata"]["scrapbook"] == {"name": "n", "mime_prefix": ""}
    with pytest.raises(ModuleNotFoundError):
        import myst_nb  # noqa: F401


@pytest.mark.parametrize("name", ["", "  ", None, 3])
def test_bad_name(name):
    from softmaxbook.glue import glue

    with pytest.raises(ValueError, match="name"):
        glue(name, 1.0)


def test_bad_display():
    from softmaxbook.glue import glue

    with pytest.raises(TypeError, match="display"):
        glue("a", 1.0, display="no")


def _imports(path):
    names = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "\n".join(line for line in "".join(cell["source"]).splitlines()
                        if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def _requirement_names(reqs):
    out = set()
    for r in reqs:
        name = r.split(";")[0]
        for sep in "<>=!~[ ":
            name = name.split(sep)[0]
        out.add(name.strip().lower())
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_needs_only_the_package_and_its_book_extra(path):
    project = tomllib.loads((ROOT / "code" / "pyproject.toml").read_text())["project"]
    allowed = _requirement_names(project["dependencies"]) | \
        _requirement_names(project["optional-dependencies"]["book"]) | {"softmaxbook"}
    missing = sorted(
        name for name in _imports(path)
        if name not in sys.stdlib_module_names
        and DIST.get(name, name).lower() not in allowed)
    assert not missing, (
        f"{path.name} imports {missing}, which `pip install \"softmaxbook[book]\"` does not "
        "install, so it fails on a plain kernel such as Colab (glue: use softmaxbook.glue)")


def test_colab_install_line_is_exact():
    """The intro's install line names the repository of _config.yml, the package's extra, and
    the folder the package lives in."""
    import yaml

    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    intro = (ROOT / "book" / "intro.md").read_text()
    # two lines (IPython fills {url} in a ! command) so that the code block fits the page
    lines = f'url = "git+{url}#subdirectory=code"\n!pip install "softmaxbook[book] @ {{url}}"'
    assert lines in intro, f"book/intro.md must give the exact install lines\n{lines}"
    project = tomllib.loads((ROOT / "code" / "pyproject.toml").read_text())["project"]
    assert project["name"] == "softmaxbook" and "book" in project["optional-dependencies"]


# checked(claim): the visible line under a folded assert cell


def test_checked_prints_one_plain_line(capsys):
    from softmaxbook.glue import checked

    checked("  the shifted softmax equals the unshifted one to 1e-12 ")
    assert capsys.readouterr().out == \
        "\u2713 checked: the shifted softmax equals the unshifted one to 1e-12\n"


@pytest.mark.parametrize("claim, error, match", [
    (None, TypeError, "argument 'claim' must be a str, got NoneType"),
    (3, TypeError, "argument 'claim' must be a str, got int"),
    ("", ValueError, "argument 'claim' must say what was checked"),
    ("   ", ValueError, "argument 'claim' must say what was checked"),
    ("two\nlines", ValueError, "argument 'claim' must be one line"),
    ("x" * 201, ValueError, "argument 'claim' must be at most 200 characters, got 201"),
    ("one ` tick", ValueError, "argument 'claim' has an unpaired backtick"),
])
def test_checked_bad_claim(claim, error, match, capsys):
    from softmaxbook.glue import checked

    with pytest.raises(error, match=match) as info:
        checked(claim)
    assert str(info.value).startswith("checked: ")
    assert capsys.readouterr().out == ""


def test_checked_in_a_kernel_is_one_stream_line():
    """Executed as a notebook cell after a print: one stdout stream, the line last."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from softmaxbook.glue import checked\nprint('table')\nassert 1 + 1 == 2\n"
        "checked('one plus one is two')")]
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    assert [(o.output_type, o.name) for o in outputs] == [("stream", "stdout")]
    assert outputs[0].text == "table\n\u2713 checked: one plus one is two\n"


@pytest.mark.parametrize("value, spec, text", [
    (__import__("numpy").float64(2.25), ".1f", "2.2"),
    (__import__("numpy").float32(0.5), ".3f", "0.500"),
    (__import__("numpy").int64(7), "d", "7"),
    (torch.tensor(1.0 / 3, dtype=torch.float64), ".4f", "0.3333"),
    (torch.tensor(3), "d", "3"),
    (0.125, ".2%", "12.50%"),
])
def test_glued_scalars_are_formatted_by_myst_nb(value, spec, text):
    # the strict build formats {glue:text}`name:spec` with MyST-NB's own function; NumPy
    # scalars and 0-d tensors used to reach it as 'np.float64(2.25)' and 'tensor(0.3333)'
    from myst_nb.core.variables import format_plain_text

    from softmaxbook.glue import glue

    (bundle, _), = _captured(glue, "v", value, display=False, mystnb=False)
    plain = bundle["application/papermill.record/text/plain"]
    assert format_plain_text(plain, spec) == text
    # the full double precision survives
    if isinstance(value, float) or getattr(value, "dtype", None) in (torch.float64,):
        assert ast.literal_eval(plain) == float(value)
