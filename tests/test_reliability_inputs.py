"""The reliability matrix, continued: files that are not files, and numbers at the edges.

Each attempt runs the real `normdiff` program through the matrix of tests/test_reliability.py (its
Attempt, its runner and its five promises: exit status, message, no traceback, no process left,
nothing in TMPDIR, the report folder's state), with what a file-based attempt needs beyond text
files: a named pipe, a symbolic link to a device ("@/dev/zero"), bytes. Each attempt is bounded by
LIMIT seconds, so one that would block for ever (a pipe read) fails instead of hanging the run.
"""
from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

# the matrix's module, imported under a name of its own (a copy: its tests are not collected twice)
_spec = importlib.util.spec_from_file_location("reliability_matrix", Path(__file__).parent / "test_reliability.py")
matrix = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(matrix)
Attempt, TINY, CASE, check, suite = matrix.Attempt, matrix.TINY, matrix.CASE, matrix.check, matrix.suite

LIMIT = 90  # seconds an attempt may take (a refused one takes two or three)
FIFO = os.mkfifo  # a files value that is a callable makes the file: a named pipe


def safetensors(header, body: bytes = b"") -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def norm(values) -> bytes:
    import numpy as np

    data = np.asarray(values, dtype=np.float32).tobytes()
    return safetensors({"model.norm.weight": {"dtype": "F32", "shape": [len(values)], "data_offsets": [0, len(data)]}},
                       data)


def gguf(tensors: int = 0, keys: int = 0, body: bytes = b"") -> bytes:
    """A GGUF v3 file's bytes: the magic, the version, the counts as given, then `body`."""
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, keys) + body


def gguf_string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


ARCH = gguf_string(b"general.architecture") + struct.pack("<I", 8) + gguf_string(b"llama")
DEEP = b"[" * 100_000 + b"]" * 100_000
CONFIG = {"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "vocab_size": 256}
WIDE = ["fuzz", "-i", "numpy", "--op", "rms_norm", "-c", "qwen3", "--max-examples", "1", "--no-database"]
FIFO_OUTPUT = "import os, sys\nos.mkfifo(sys.argv[-1])\n"  # a --command that leaves a pipe as its output
BASELINE = ["run", "--suite", "tiny.toml", "-i", "numpy", "--out", "out", "--baseline", "b.json"]
NOT_A_FILE = r"\(Is a (named pipe \(FIFO\)|character device), not a file\)"

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
    Attempt("suite-mean-shift-overflows", ["run", "--suite", "s.toml", "-i", "numpy"], 2,
            r"s.toml group 1: input regime 'mean_shift:1e5' draws values up to about 100008 .* float16 rounds "
            r"65520 and above to Inf", "absent",
            {"s.toml": suite(regime="mean_shift:1e5").replace("bfloat16", "float16")}),
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
    # a target's file, a command's output
    Attempt("target-fifo", check("t.py:rms_norm"), 2, r"t.py: cannot read it \(Is a named pipe", files={"t.py": FIFO}),
    Attempt("target-dev-zero", check("z.py:rms_norm"), 2, r"z.py: cannot read it \(Is a character device",
            files={"z.py": "@/dev/zero"}),
    Attempt("command-output-fifo", ["check", "--command", "{py} fifo_out.py", "--op", "rms_norm", "--convention",
                                    "qwen3", *matrix.FAST], 2,
            r"wrote a malformed output file: it is not a file \(Is a named pipe", files={"fifo_out.py": FIFO_OUTPUT}),
    # checkpoints: safetensors, GGUF, config.json
    Attempt("safetensors-fifo", ["weights", "w.safetensors"], 2, r"w.safetensors: cannot read it " + NOT_A_FILE,
            files={"w.safetensors": FIFO}),
    Attempt("safetensors-dev-zero", ["weights", "w.safetensors"], 2, r"w.safetensors: cannot read it " + NOT_A_FILE,
            files={"w.safetensors": "@/dev/zero"}),
    Attempt("safetensors-dev-urandom", ["weights", "w.safetensors"], 2, r"cannot read it " + NOT_A_FILE,
            files={"w.safetensors": "@/dev/urandom"}),
    Attempt("safetensors-a-folder-in-a-checkpoint", ["weights", "ckpt"], 2,
            r"ckpt/model.safetensors: cannot read it \(Is a directory\)", files={"ckpt/model.safetensors/x": ""}),
    Attempt("safetensors-header-2-60", ["weights", "w.safetensors"], 2,
            r"header of 1152921504606846976 bytes; the format allows at most 104857600",
            files={"w.safetensors": struct.pack("<Q", 2 ** 60) + b"{}"}),
    Attempt("safetensors-header-nested", ["weights", "w.safetensors"], 2,
            r"w.safetensors is not a safetensors file: the 200000-byte header: its values nest deeper",
            files={"w.safetensors": safetensors(DEEP)}),
    Attempt("safetensors-shape-not-a-list", ["weights", "w.safetensors"], 2,
            r"tensor 'model.norm.weight': shape must be a list of non-negative integers; got 5",
            files={"w.safetensors": safetensors({"model.norm.weight": {"dtype": "F32", "shape": 5,
                                                                       "data_offsets": [0, 4]}}, b"\0" * 4)}),
    Attempt("safetensors-nan-weights", ["weights", "w.safetensors"], 1,
            r"2 of 4 values are NaN or Inf .*\n1 norm tensor holds NaN or Inf",
            files={"w.safetensors": norm([1.0, float("nan"), 1.5, float("inf")])}),
    Attempt("gguf-fifo", ["weights", "w.gguf"], 2, r"w.gguf: cannot read it \(Is a named pipe", files={"w.gguf": FIFO}),
    Attempt("gguf-truncated", ["weights", "w.gguf"], 2,
            r"w.gguf is not a GGUF file gguf can read: key 'general.architecture' at byte \d+ needs 5 bytes, and "
            r"the file ends 2 bytes later \(truncated\?\)", files={"w.gguf": gguf(0, 1, ARCH)[:-3]}),
    Attempt("gguf-tensor-count-2-62", ["weights", "w.gguf"], 2,
            r"the tensor count is 4611686018427387904; normdiff reads at most 1048576", files={"w.gguf": gguf(2 ** 62)}),
    Attempt("gguf-key-count-2-62", ["weights", "w.gguf"], 2,
            r"the key count is 4611686018427387904; normdiff reads at most 65536", files={"w.gguf": gguf(0, 2 ** 62)}),
    Attempt("gguf-array-2-60-items", ["weights", "w.gguf"], 2,
            r"the item count of key 'x' is 1152921504606846976; normdiff reads at most 16777216",
            files={"w.gguf": gguf(0, 1, gguf_string(b"x") + struct.pack("<IIQ", 9, 0, 2 ** 60))}),
    Attempt("gguf-tensor-past-the-end", ["weights", "w.gguf"], 2,
            r"tensor 'output_norm.weight' \(1099511627776\) needs 4398046511104 bytes at offset \d+, past the end",
            files={"w.gguf": gguf(1, 0, gguf_string(b"output_norm.weight") + struct.pack("<IQIQ", 1, 2 ** 40, 0, 0))}),
    Attempt("config-a-billion-layers", ["weights", "ckpt"], 2,
            r"ckpt/config.json: num_hidden_layers is 1000000000; normdiff builds a model of at most 1024 layers",
            files={"ckpt/model.safetensors": norm([1.0] * 4),
                   "ckpt/config.json": json.dumps({**CONFIG, "num_hidden_layers": 10 ** 9})}),
    Attempt("config-a-huge-vocabulary", ["weights", "ckpt"], 2,
            r"ckpt/config.json: vocab_size is 1125899906842624; normdiff builds a model of at most 16777216",
            files={"ckpt/model.safetensors": norm([1.0] * 4),
                   "ckpt/config.json": json.dumps({**CONFIG, "num_hidden_layers": 2, "vocab_size": 2 ** 50})}),
    Attempt("config-too-many-modules", ["weights", "ckpt"], 2,
            r"ckpt/config.json: its model has about \d+ modules \(1000 layers of 4000 experts\), which need about "
            r"[\d.]+ GiB to build; the limit is 4 GiB",
            files={"ckpt/model.safetensors": norm([1.0] * 4),
                   "ckpt/config.json": json.dumps({**CONFIG, "num_hidden_layers": 1000, "num_experts": 4000})}),
    Attempt("config-fifo", ["weights", "ckpt"], 2, r"ckpt/config.json: cannot read it \(Is a named pipe",
            files={"ckpt/model.safetensors": norm([1.0] * 4), "ckpt/config.json": FIFO}),
    Attempt("config-nested-too-deep", ["weights", "ckpt"], 2, r"ckpt/config.json: its values nest deeper",
            files={"ckpt/model.safetensors": norm([1.0] * 4), "ckpt/config.json": '{"a": ' + DEEP.decode() + "}"}),
    # numbers at the edges: refused when parsed, with the maximum named
    Attempt("timeout-1e10", check("{H}:correct", "--timeout", "1e10"), 2,
            r"argument --timeout: '1e10': give at most 86400 seconds \(one day\)"),
    Attempt("timeout-1e300", ["run", "--suite", "tiny.toml", "-i", "numpy", "--timeout", "1e300"], 2,
            r"'1e300': give at most 86400 seconds", "absent", TINY),
    Attempt("repro-timeout-1e10", ["repro", CASE, "-i", "numpy", "--timeout", "1e10"], 2, r"at most 86400 seconds"),
    Attempt("fuzz-max-time-1e10", [*WIDE, "--max-time", "1e10"], 2, r"--max-time: '1e10': give at most 86400"),
    Attempt("model-timeout-1e10", ["model", "--family", "qwen3", "--target", "norm=numpy", "--timeout", "1e10"], 2,
            r"--timeout: '1e10': give at most 86400"),
    Attempt("repro-case-of-50-gib", ["repro", "rms_norm@qwen3/bf16/65536x4096/normal/w=trained", "-i", "numpy"], 2,
            r"case rms_norm@qwen3/bf16/65536x4096/normal/w=trained: a case of 65536 x 4096 needs about 50.5 GiB of "
            r"memory; the limit is 4 GiB: replay a smaller case, or raise the limit with NORMDIFF_MAX_SUITE_BYTES"),
    Attempt("repro-mean-shift-overflows", ["repro", "rms_norm@qwen3/bf16/4x128/mean_shift:1e300/w=trained", "-i",
                                           "numpy"], 2, r"bfloat16 rounds .* and above to Inf"),
    Attempt("fuzz-widest-shapes", [*WIDE, "--max-rows", "256", "--max-width", "1048576"], 2,
            r"max_rows 256 x max_width 1048576: a case of 256 x 1048576 needs about 50.5 GiB of memory"),
    Attempt("fuzz-seed-2-40", [*WIDE, "--seed", str(2 ** 40)], 2,
            r"--seed: '1099511627776': give a whole number from 0 to 4294967295"),
    Attempt("fuzz-max-examples-1e12", [*WIDE[:-3], "--no-database", "--max-examples", str(10 ** 12), "--max-time",
                                       "1"], 2,
            r"--max-examples: '1000000000000': give a whole number from 1 to 1000000"),
    Attempt("model-seed-2-64", ["model", "--family", "qwen3", "--target", "norm=numpy", "--seed", str(2 ** 64)], 2,
            r"--seed: '18446744073709551616': give a whole number from 0 to 4294967295"),
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
