"""The reliability matrix, continued: the weak spots a careless or hostile user found (issue 33 item 6).

Each attempt runs the real `normdiff` program through the matrix of tests/test_reliability.py, with
the files and the time bound of tests/test_reliability_inputs.py (bytes, named pipes; LIMIT seconds
an attempt), so its five promises hold here too: the exit status, the message, no traceback, no
process left, nothing in TMPDIR, the report folder's state. The Python API's misuse is in
tests/harness/engine/test_runner_faults.py.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest


def _module(name: str, file: str):
    """A test module imported under a name of its own (a copy: its tests are not collected twice)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / file)
    module = sys.modules.get(name)
    if module is None:
        module = sys.modules.setdefault(name, importlib.util.module_from_spec(spec))
        spec.loader.exec_module(module)
    return module


matrix = _module("reliability_matrix", "test_reliability.py")
bounded = _module("reliability_inputs", "test_reliability_inputs.py")
Attempt, TINY, check, run_with = matrix.Attempt, matrix.TINY, matrix.check, matrix.run_with


def seconds_taken(out: str) -> float:
    return float(re.search(r"seconds=([\d.]+)$", out).group(1))


def answered_at_once(work, out):
    """The framework probe did not wait for the thread and the child the code left (nor did the run)."""
    assert "(numpy)" in out and seconds_taken(out) < 30, out


ATTEMPTS = [
    # a thread and a child left running at import: the framework probe answers at once, and the
    # matrix finds nothing left
    Attempt("probe-leaves-a-thread-and-a-child", check("{M}/leaves_a_thread_at_import.py:rms_norm"), 0, r"AGREES",
            then=answered_at_once),
]


@pytest.mark.parametrize("attempt", [pytest.param(a, id=a.id) for a in ATTEMPTS])
def test_attempt(attempt, tmp_path: Path, monkeypatch):
    bounded.test_attempt(attempt, tmp_path, monkeypatch)
