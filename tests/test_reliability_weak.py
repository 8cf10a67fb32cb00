"""The reliability matrix, continued: the weak spots a careless or hostile user found (issue 33 item 6).

Each attempt runs the real `normdiff` program through the matrix of tests/test_reliability.py, with
the files and the time bound of tests/test_reliability_inputs.py (bytes, named pipes; LIMIT seconds
an attempt), so its five promises hold here too: the exit status, the message, no traceback, no
process left, nothing in TMPDIR, the report folder's state. The Python API's misuse is in
tests/harness/engine/test_runner_faults.py.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
import xml.etree.ElementTree as ET
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

FOLDER = {"some_folder/norm.py": matrix.MYNORM}
CHECKPOINT = {"ckpt/model.safetensors": bounded.norm([1.0] * 64),
              "ckpt/config.json": json.dumps({**bounded.CONFIG, "num_hidden_layers": 1, "head_dim": 16})}
SHOWN = 1000  # normdiff.text.SHOWN: the characters of a message shown in one place


def seconds_taken(out: str) -> float:
    return float(re.search(r"seconds=([\d.]+)$", out).group(1))


def answered_at_once(work, out):
    """The framework probe did not wait for the thread and the child the code left (nor did the run)."""
    assert "(numpy)" in out and seconds_taken(out) < 30, out


def clipped(work, out):
    assert len(out) < SHOWN + 600, len(out)


def shown_escaped(work, out):
    """The message's newlines, bidirectional controls, NUL and lone surrogate, in every report file:
    printable (escapes), and junit.xml well-formed."""
    for name in ("summary.md", "report.html", "junit.xml"):
        text = (work / "out" / name).read_text(encoding="utf-8")
        assert not re.search("[\u202e\u2028\x00\x0b\x0c\ud800-\udfff]", text), name
        assert "u202eline" in text and "x0b" in text, name
    ET.fromstring((work / "out" / "junit.xml").read_bytes())


ATTEMPTS = [
    # a target that is a folder: one line, saying so
    Attempt("target-a-folder", check("some_folder:rms_norm"), 2,
            r"cannot run it: target 'some_folder:rms_norm': some_folder is a folder, not a Python file; give "
            r"FILE.py:NAME \(a file in it\)", files=FOLDER),
    Attempt("target-flag-a-folder", ["check", "--target", "some_folder", "--op", "rms_norm", "--convention", "qwen3"],
            2, r"target 'some_folder': some_folder is a folder", files=FOLDER),
    Attempt("run-target-a-folder", run_with("some_folder:rms_norm"), 2,
            r"^normdiff: error: target 'some_folder:rms_norm': some_folder is a folder", "absent",
            {**TINY, **FOLDER}),
    # empty values: named, not read as "the current folder", "nothing" or a KeyError
    Attempt("suite-empty", ["run", "--suite", ""], 2, r"argument --suite: an empty suite name \(''\); known: default",
            "absent"),
    Attempt("target-empty", check(""), 2, r"argument target: an empty target: give FILE.py:NAME"),
    Attempt("target-flag-empty", ["check", "--target", " ", "--op", "rms_norm"], 2,
            r"argument --target: an empty target"),
    Attempt("run-target-empty", run_with(""), 2, r"argument --target/--with: an empty target", "absent", TINY),
    Attempt("run-command-empty", ["run", "--suite", "tiny.toml", "--command", "", "--op", "rms_norm", "--convention",
                                  "qwen3"], 2, r"argument --command/--with-command: an empty command", "absent", TINY),
    Attempt("implementation-empty", ["run", "-i", ""], 2, r"argument --implementation/-i: an empty implementation "
                                                          r"name \(''\)", "absent"),
    Attempt("op-empty", ["check", "{H}:correct", "--op", "", "--convention", "qwen3"], 2,
            r"argument --op: an empty op name \(''\); known: add_rms_norm"),
    Attempt("weights-empty", ["weights", ""], 2, r"argument checkpoint: an empty path: give a .safetensors or .gguf"),
    Attempt("eps-nan", check("{H}:correct", "--eps", "nan"), 2, r"argument --eps: 'nan': give a finite number above 0"),
    # a thread and a child left running at import: the framework probe answers at once, and the
    # matrix finds nothing left
    Attempt("probe-leaves-a-thread-and-a-child", check("{M}/leaves_a_thread_at_import.py:rms_norm"), 0, r"AGREES",
            then=answered_at_once),
    # what the code returns: a masked array's masked elements are not values; a tensor subclass is a tensor
    Attempt("returns-masked-array", check("{H}:returns_masked"), 2,
            r"returned a masked array with \d+ of \d+ elements masked: a masked element holds no value to judge; "
            r"return a plain array"),
    Attempt("returns-tensor-subclass", check("{M}/torch_subclass.py:returns_subclass", "--pass", "forward"), 0,
            r"AGREES"),
    # an exception's message: 5 MB, or with newlines, bidirectional controls, NUL and a lone surrogate
    Attempt("exception-of-5-mb", check("{H}:raises_huge"), 2,
            r"cannot run it: ValueError: x{%d}\.\.\. \(\d+ more characters\)" % (SHOWN - len("ValueError: ")),
            then=clipped),
    Attempt("exception-bidi-in-reports", run_with("{H}:raises_bidi"), 1, r"report written to out", "complete", TINY,
            then=shown_escaped),
    # a checkpoint with its config.json: transformers' import (torch._dynamo) leaves no folder in TMPDIR
    Attempt("weights-leave-nothing-in-tmp", ["weights", "ckpt"], 0, r"Qwen3RMSNorm expects plain \(w\)",
            files=CHECKPOINT),
]


@pytest.mark.parametrize("attempt", [pytest.param(a, id=a.id) for a in ATTEMPTS])
def test_attempt(attempt, tmp_path: Path, monkeypatch):
    bounded.test_attempt(attempt, tmp_path, monkeypatch)
