"""A pytest plugin that runs every check under a nonzero salt, as the grader does:
``python -m pytest -p check_salt_plugin tests/test_exercises_softmax.py`` with
``SOFTMAXBOOK_TEST_SALT=<int>`` in the environment (tests/test_grade_salts.py uses it to show that
the checks' known wrong answers are still rejected, and their right answers accepted, under
salted inputs). The package reads no environment variable: only this plugin sets the salt."""

from __future__ import annotations

import os

import softmaxbook.exercises as _exercises

_exercises._SALT[0] = int(os.environ.get("SOFTMAXBOOK_TEST_SALT", "987654321"))
