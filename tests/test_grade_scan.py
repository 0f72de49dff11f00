"""The grader's static scan (code/softmaxbook/exercises/scan.py), fast, no sandbox: the
findings of the independent tester (issue 23, /work/briefs/findings-grader.md) as regression
tests. Honest code is not flagged and not called forbidden; hidden routes to forbidden functions
are."""

from __future__ import annotations

import pytest

from softmaxbook.exercises import scan

LSE_FORBIDDEN = {"torch.logsumexp", "torch.special.logsumexp", "torch.softmax"}

RIGHT_LSE = (
    "def stable_logsumexp(x):\n"
    "    m = x.amax(dim=-1, keepdim=True)\n"
    "    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))\n"
    "    p = torch.exp(x - m)\n"
    "    return (m + torch.log(p.sum(-1, keepdim=True))).squeeze(-1)\n")
RIGHT_CE = (
    "def mean_cross_entropy(logits, target):\n"
    "    lse = stable_logsumexp(logits)\n"
    "    return (lse - logits.gather(-1, target[:, None]).squeeze(-1)).mean()\n")


# --- finding 0: a local name of the answer is not a top-level line of the same name ----------
@pytest.mark.parametrize("exploration", [
    # the Exercise 1.5 exploration cell the tester used (honest_shadow)
    "logits = torch.tensor([2.0, 1.0, 0.5, -1.0, 1.8])\ntau = 1.7\n"
    "p = torch.softmax(logits / tau, dim=-1)\nprint(tau, p.max().item())\n",
    # testing the answer against torch at top level, with the answer's local and parameter names
    "x = torch.randn(3, 4)\nm = torch.logsumexp(x, -1)  # what torch says\n"
    "print(stable_logsumexp(x) - m)\n",
    "for x in [torch.randn(3)]:\n    print(torch.logsumexp(x, -1))\n",
])
def test_answer_uses_ignores_top_level_names_shared_with_locals(exploration):
    cells = [(10, RIGHT_LSE), (12, RIGHT_CE), (20, exploration)]
    assert scan.answer_uses(cells, "stable_logsumexp", LSE_FORBIDDEN, True) == []
    assert scan.answer_uses(cells, "mean_cross_entropy", LSE_FORBIDDEN, True) == []


def test_answer_uses_still_follows_the_globals_the_answer_reads():
    LSE_FORBIDDEN = {"torch.logsumexp"}
    helper = "_lse = torch.logsumexp\n"
    cells = [(1, helper), (2, "def stable_logsumexp(x):\n    return _lse(x, -1)\n"),
             (3, RIGHT_CE)]
    assert scan.answer_uses(cells, "stable_logsumexp", LSE_FORBIDDEN, False) == [
        "torch.logsumexp"]
    # transitively, through the function the answer calls
    assert scan.answer_uses(cells, "mean_cross_entropy", LSE_FORBIDDEN, False) == [
        "torch.logsumexp"]
    # every binding of a global the answer reads counts (a later, unrun rebinding hides nothing)
    cells = [(1, helper), (2, "if False:\n    _lse = print\n"),
             (3, "def stable_logsumexp(x):\n    return _lse(x, -1)\n")]
    assert scan.answer_uses(cells, "stable_logsumexp", LSE_FORBIDDEN, False) == [
        "torch.logsumexp"]
    # an import inside the answer's body, a nested function, a default argument, a decorator
    for src in ["def stable_logsumexp(x):\n    from torch import logsumexp\n"
                "    return logsumexp(x, -1)\n",
                "def stable_logsumexp(x):\n    def inner(y):\n        return y.logsumexp(-1)\n"
                "    return inner(x)\n",
                "def stable_logsumexp(x, f=torch.logsumexp):\n    return f(x, -1)\n",
                "g = torch.logsumexp\ndef stable_logsumexp(x, f=g):\n    return f(x, -1)\n",
                "class K:\n    f = staticmethod(torch.logsumexp)\n"
                "def stable_logsumexp(x):\n    return K.f(x, -1)\n"]:
        assert scan.answer_uses([(1, src)], "stable_logsumexp", LSE_FORBIDDEN, False) == [
            "torch.logsumexp"], src


def test_answer_uses_the_honest_shadow_notebook():
    """The tester's notebook honest_shadow: right answers, exploration cell with top-level
    ``p = torch.softmax(...)``: was 'forbidden' for both exercises."""
    import nbformat
    from pathlib import Path

    from softmaxbook.exercises.student import make_student_notebook

    book = Path(__file__).resolve().parents[1] / "book"
    nb = make_student_notebook(nbformat.read(book / "01_softmax.ipynb", as_version=4))
    handout = [c.source for c in nb.cells if c.cell_type == "code"]
    code = [(i, s) for i, s in enumerate(handout)] + [
        (100, RIGHT_LSE), (101, RIGHT_CE),
        (102, "# Exercise 1.5: your exploration here.\n"
              "logits = torch.tensor([2.0, 1.0, 0.5, -1.0, 1.8])\ntau = 1.7\n"
              "p = torch.softmax(logits / tau, dim=-1)\nprint(tau, p.max().item())\n")]
    mine = scan.student_cells(code, handout)
    assert scan.notebook_flags(mine, {}) == []
    assert scan.answer_uses(mine, "stable_logsumexp", LSE_FORBIDDEN, True) == []
    assert scan.answer_uses(mine, "mean_cross_entropy", LSE_FORBIDDEN, True) == []


# --- findings 0b and 13: configuration lines and the book's own progress cell ---------------
@pytest.mark.parametrize("source", [
    "import matplotlib.pyplot as plt\nplt.rcParams['figure.figsize'] = (8, 4)",
    "import matplotlib as mpl\nmpl.rcParams['font.size'] = 12",
    "import os\nos.environ['OMP_NUM_THREADS'] = '1'",
    "import torch\ntorch.backends.cudnn.deterministic = True",
    "import torch\ntorch.backends.cudnn.benchmark = False",
    "pd.options.display.max_rows = 10",  # pandas is not installed here (an import is flagged)
    "import os\ndel os.environ['OMP_NUM_THREADS']",
])
def test_scan_does_not_flag_configuration_lines(source):
    assert scan.notebook_flags([(0, source)], {0: 1}) == [], source


@pytest.mark.parametrize("source", [
    "import os\nos.environ = {}",
    "import torch\ntorch.backends = None",
    "import matplotlib.pyplot as plt\nplt.rcParams.__class__ = dict",
    "import torch\ntorch.backends.__dict__['x'] = 1",
    "import torch\ntorch.softmax = torch.exp",
])
def test_scan_still_flags_module_assignments_that_are_not_configuration(source):
    assert scan.notebook_flags([(0, source)], {0: 1}), source


PROGRESS = ("from softmaxbook.exercises.progress import progress\n\n"
            "progress([\n    ('softmax-stable-lse', 'stable_logsumexp', '1.1'),\n"
            "    ('softmax-cross-entropy', 'mean_cross_entropy', '1.2')\n"
            "], globals(), by_hand=[('1.3', 'derivation')])")


def test_the_books_progress_cell_is_not_the_students_code_without_its_tag():
    """The tester's notebook colab (finding 13): the cell tags dropped, the book's verbatim
    progress cell (or one from an older handout) flagged the notebook."""
    from softmaxbook.exercises.student import make_student_notebook
    import nbformat
    from pathlib import Path

    book = Path(__file__).resolve().parents[1] / "book"
    nb = make_student_notebook(nbformat.read(book / "01_softmax.ipynb", as_version=4))
    cells = [c.source for c in nb.cells if c.cell_type == "code"]
    progress_cells = [s for s in cells if "import progress" in s]
    assert progress_cells
    older = PROGRESS.replace("'1.1'", "'1.1'),\n    ('a', 'b', 'c'")  # another handout's rows
    for src in progress_cells + [PROGRESS, older]:
        assert scan.student_cells([(5, src)], []) == [], src
        assert scan.notebook_flags(scan.student_cells([(5, src)], []), {}) == []


@pytest.mark.parametrize("source", [
    # code hidden in an answer string, which progress() evaluates
    PROGRESS.replace("'stable_logsumexp'", "\"__import__('os').system('x')\""),
    PROGRESS + "\nimport sys\nsys.modules.clear()",
    PROGRESS.replace("import progress", "import progress, _REGISTRY"),
    PROGRESS.replace("globals()", "vars()"),
    PROGRESS.replace("progress([", "progress = print\nprogress(["),
])
def test_a_progress_lookalike_is_still_scanned(source):
    mine = scan.student_cells([(5, source)], [])
    assert mine and scan.notebook_flags(mine, {5: 1}), source


# --- finding 6: names hidden in strings, helper files, torch's function-mode stack ----------
@pytest.mark.parametrize("source", [
    # the tester's ops_hidden / ce_ops_hidden / pop_guard / file_helper / bash_helper cells
    "import operator\nimport torch\n"
    "_lse = operator.attrgetter('ops.aten.logsum' + 'exp.default')(torch)",
    "import operator\nf = operator.attrgetter('ops.aten.cross_entropy_loss.default')(torch)",
    "import operator\npop = operator.attrgetter('_C._pop_torch_function_stack')(torch)",
    "from operator import attrgetter\nf = attrgetter(name)(torch)",
    "from operator import methodcaller\nf = methodcaller('logsum' + 'exp', -1)",
    "f = torch.__getattribute__('logsum' + 'exp')",
    "f = type(torch).__getattribute__(torch, 'logsumexp')",
    "f = torch.__dict__['logsum' + 'exp']",
    "d = vars(torch)\nf = d['logsumexp']",
    "f = getattr(torch, '_C')",
    "f = getattr(torch, 'ops')",
    "open('helper.py', 'w').write('import torch')",
    "from pathlib import Path\nPath('h' + '.py').write_text(src)",
    "name = 'helper'\nopen(f'{name}.py', 'w').write(src)",
    "from helper import lse",
    "import helper",
    "from .helper import lse",
    "%%writefile helper.py\nimport torch\n",
    "%%bash\necho 'import torch' > helper.py\n",
    "!echo 'x = 1' > helper.py",
    "s = 'torch._C._pop_torch_function_stack'",
    "from operator import attrgetter as ag\nf = ag(name)(torch)",
    "import operator\nag = operator.attrgetter\nf = ag(name)(torch)",
    "from torch._C import _pop_torch_function_stack",
    "from torch import _C",
    "import torch.overrides",
])
def test_scan_flags_names_hidden_in_strings_and_helper_files(source):
    assert scan.notebook_flags([(0, source)], {0: 1}), source


@pytest.mark.parametrize("source", [
    "from operator import attrgetter\nrows.sort(key=attrgetter('score'))",
    "import operator\nf = operator.itemgetter(1)",
    "import matplotlib.pyplot as plt\nfig = plt.figure()",
    "value = getattr(obj, 'shape')",
    "import numpy as np\nimport torch\nimport scipy.stats",
])
def test_scan_does_not_flag_harmless_lookups(source):
    assert scan.notebook_flags([(0, source)], {0: 1}) == [], source


@pytest.mark.parametrize("answer", [
    "def stable_logsumexp(x):\n    return torch.ops.aten.logsumexp.default(x, [-1])\n",
    "import torch\nops = torch.ops\ndef stable_logsumexp(x):\n"
    "    return ops.aten.logsumexp.default(x, [-1])\n",
    "from torch import ops\ndef stable_logsumexp(x):\n"
    "    return ops.aten.logsumexp.default(x, [-1])\n",
])
def test_answer_uses_torch_ops_is_forbidden(answer):
    """The runtime guard (a __torch_function__ mode) does not see torch.ops.aten calls."""
    used = scan.answer_uses([(1, answer)], "stable_logsumexp", {"torch.logsumexp"}, False)
    assert any(u.startswith("torch.ops") for u in used), used
    # where nothing is forbidden, torch.ops is not reported
    assert scan.answer_uses([(1, answer)], "stable_logsumexp", set(), False) == []
