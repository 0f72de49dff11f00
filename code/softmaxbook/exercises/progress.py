"""The last cell of a student notebook: which of the chapter's exercises pass their checks.

    progress([("softmax-stable-lse", "stable_logsumexp", "1.3"), ...], globals())

prints one line per exercise (✓ passes, ✗ not yet, · not answered yet, ✎ checked by your
instructor) and a total. It runs the same checks as the ``check(...)`` cells, quietly.
"""

from __future__ import annotations

import contextlib
import io

__all__ = ["progress"]


def progress(exercises, namespace: dict, by_hand=()) -> tuple[int, int]:
    """Print the chapter's progress; returns (passed, checked)."""
    from . import ExerciseCheckFailed, check

    passed = 0
    lines = []
    for label, answer, number in exercises:
        try:
            value = eval(answer, dict(namespace))  # noqa: S307 - the student's own names
        except NameError:
            lines.append(f"·  Exercise {number}: not answered yet ({answer} is not defined)")
            continue
        except Exception as err:  # noqa: BLE001
            lines.append(f"✗  Exercise {number}: {answer} raised {type(err).__name__}")
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                check(label, value)
        except ExerciseCheckFailed as err:
            text = str(err.args[0]) if err.args else ""
            why = "not answered yet" if ("NotImplementedError" in text
                                         or "no answer yet" in text) else "not yet right"
            lines.append(f"{'·' if why.startswith('not answered') else '✗'}  Exercise {number}: "
                         f"{why} (run its check cell for the details)")
            continue
        except Exception as err:  # noqa: BLE001
            lines.append(f"✗  Exercise {number}: the check raised {type(err).__name__}")
            continue
        passed += 1
        lines.append(f"✓  Exercise {number}: passes its check")
    for number, kind in by_hand:
        lines.append(f"✎  Exercise {number} ({kind}): checked by your instructor")
    print("\n".join(lines))
    print(f"{passed} of {len(exercises)} checked exercises pass.")
    return passed, len(exercises)
