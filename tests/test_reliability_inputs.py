"""The reliability matrix, continued: files that are not files.

Each attempt runs the real `normdiff` program through the matrix of tests/test_reliability.py (its
Attempt, its runner and its five promises: exit status, message, no traceback, no process left,
nothing in TMPDIR, the report folder's state), with what a file-based attempt needs beyond text
files: a named pipe, a symbolic link to a device ("@/dev/zero"), bytes. Each attempt is bounded by
LIMIT seconds, so one that would block for ever (a pipe read) fails instead of hanging the run.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

# the matrix's module, imported under a name of its own (a copy: its tests are not collected twice)
_spec = importlib.util.spec_from_file_location("reliability_matrix", Path(__file__).parent / "test_reliability.py")
matrix = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(matrix)
Attempt, TINY, CASE, check = matrix.Attempt, matrix.TINY, matrix.CASE, matrix.check

LIMIT = 90  # seconds an attempt may take (a refused one takes two or three)
FIFO = os.mkfifo  # a files value that is a callable makes the file: a named pipe

DEEP = b"[" * 100_000 + b"]" * 100_000
BASELINE = ["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "out", "--baseline", "b.json"]

ATTEMPTS = [
    # suites and baselines that are not files: refused by name, before anything is read
    Attempt("suite-fifo", ["run", "--suite", "f.toml", "-i", "numpy"], 2,
            r"f.toml: cannot read it \(Is a named pipe \(FIFO\), not a file\); give a .toml suite file", "absent",
            {"f.toml": FIFO}),
    Attempt("suite-dev-zero", ["run", "--suite", "z.toml", "-i", "numpy"], 2,
            r"z.toml: cannot read it \(Is a character device, not a file\)", "absent", {"z.toml": "@/dev/zero"}),
    Attempt("suite-dev-urandom", ["run", "--suite", "u.toml", "-i", "numpy"], 2,
            r"u.toml: cannot read it \(Is a character device", "absent", {"u.toml": "@/dev/urandom"}),
    Attempt("check-suite-fifo", check("{H}:correct", "--suite", "f.toml"), 2, r"f.toml: cannot read it",
            files={"f.toml": FIFO}),
    Attempt("suite-nested-too-deep", ["run", "--suite", "s.toml"], 2,
            r"s.toml: its values nest deeper than normdiff reads", "absent",
            {"s.toml": "a = " + "[" * 5000 + "]" * 5000 + "\n"}),
    Attempt("baseline-fifo", BASELINE, 2, r"baseline b.json: cannot read it \(Is a named pipe", "absent",
            {**TINY, "b.json": FIFO}),
    Attempt("baseline-dev-zero", BASELINE, 2, r"baseline b.json: cannot read it \(Is a character device", "absent",
            {**TINY, "b.json": "@/dev/zero"}),
    Attempt("baseline-dev-urandom", BASELINE, 2, r"baseline b.json: cannot read it \(Is a character device",
            "absent", {**TINY, "b.json": "@/dev/urandom"}),
    Attempt("baseline-is-a-folder", BASELINE, 2, r"baseline b.json: cannot read it \(Is a directory\)", "absent",
            {**TINY, "b.json/x": ""}),
    Attempt("baseline-nested-too-deep", BASELINE, 2, r"baseline file b.json: its values nest deeper", "absent",
            {**TINY, "b.json": DEEP}),
    # files normdiff writes: a pipe or a device in their place is refused before the run
    Attempt("save-baseline-fifo", ["run", "--suite", "tiny.toml", "-i", "numpy", "--save-baseline", "b.json"], 2,
            r"--save-baseline b.json: is a named pipe \(FIFO\), not a file; give a file name", "absent",
            {**TINY, "b.json": FIFO}),
    Attempt("script-fifo", ["repro", CASE, "-i", "numpy", "--script", "r.py"], 2,
            r"--script r.py: is a named pipe", files={"r.py": FIFO}),
    Attempt("out-manifest-fifo", ["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "out", "-q"], 0, r"^$",
            "complete", {**TINY, "out/.normdiff-manifest.json": FIFO, "out/mine.txt": "mine\n"},
            then=matrix.untouched("out/mine.txt", "mine\n")),
    # a target's file
    Attempt("target-fifo", check("t.py:rms_norm"), 2, r"t.py: cannot read it \(Is a named pipe", files={"t.py": FIFO}),
    Attempt("target-dev-zero", check("z.py:rms_norm"), 2, r"z.py: cannot read it \(Is a character device",
            files={"z.py": "@/dev/zero"}),
]


class _Bounded:
    """The subprocess module, but a run ends after LIMIT seconds (and the attempt fails) instead
    of waiting out the matrix's 300."""

    def __getattr__(self, name):
        return getattr(subprocess, name)

    @staticmethod
    def run(*args, **kwargs):
        return subprocess.run(*args, **{**kwargs, "timeout": min(kwargs.get("timeout", LIMIT), LIMIT)})


def _prepare(work: Path, files: dict, text_files=matrix._prepare) -> None:
    """The matrix's files (text; "@target" a symbolic link), then the others: bytes as they are,
    a callable called with the path (FIFO: a named pipe)."""
    text_files(work, {name: value for name, value in files.items() if isinstance(value, str)})
    for name, value in files.items():
        if isinstance(value, str):
            continue
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, bytes):
            path.write_bytes(value)
        else:
            value(path)


@pytest.mark.parametrize("attempt", [pytest.param(a, id=a.id) for a in ATTEMPTS])
def test_attempt(attempt: Attempt, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(matrix, "_prepare", _prepare)
    monkeypatch.setattr(matrix, "subprocess", _Bounded())
    matrix.test_attempt(attempt, tmp_path)
