"""Check for the worked example in `tools/chapter_template.ipynb` (the chapter template).

It is the smallest complete coding exercise: normalise non-negative weights into probabilities.
Chapter authors copy its shape; its tests (tests/test_exercises_framework.py) exercise the
framework itself.
"""

import torch

from . import call, check_generator, check_salt, exercise, expect_close, expect_true

CASES = [
    torch.tensor([1.0, 1.0, 2.0]),
    torch.tensor([0.0, 3.0]),
    torch.tensor([[1.0, 3.0], [2.0, 2.0]]),
    torch.tensor([1e-30, 3e-30], dtype=torch.float64),
]


@exercise("template-normalise", "normalise weights along the last dimension")
def _check_normalise(normalise):
    # Random inputs come from check_generator, never manual_seed: under the grader its secret
    # per-run salt changes them, so answers looked up for the public inputs earn nothing. Under a
    # salt the fixed cases get salted variants too (here: rescaled by a random factor).
    g = check_generator(11)
    cases = CASES + [torch.rand(3, 5, generator=g, dtype=torch.float64) + 0.1]
    if check_salt():
        cases += [w * (0.5 + torch.rand((), generator=g).item()) for w in CASES]
    for w in cases:
        got = call(normalise, w.clone(), input_desc=f"w = {w.tolist()}")
        expected = w / w.sum(dim=-1, keepdim=True)
        expect_close(got, expected, input_desc=f"w = {w.tolist()}", rtol=1e-6,
                     hint="divide by the sum over the last dimension, keeping that dimension "
                          "(keepdim=True) so that the shapes broadcast.")
    w = torch.tensor([1.0, 2.0])
    call(normalise, w)
    expect_true(torch.equal(w, torch.tensor([1.0, 2.0])),
                "your function changed its input in place; return a new tensor instead.")
    return len(cases) + 1
