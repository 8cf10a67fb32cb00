"""Implementations run as external commands (implementations/command.py): the safetensors codec,
a C program checked end to end (right, and with eps outside the sqrt), the protocol seen from the
command's side, and every way a command can fail becoming an outcome with a message that says why."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.cases.suites import Suite
from normdiff.harness import api
from normdiff.harness.data.ops import OPS
from normdiff.harness.data.conventions import get_contract
from normdiff.implementations.entry import Implementation
from normdiff.implementations import command
from normdiff.implementations.command import (CommandError, CommandTimeout, FormatError,
                                              command_implementation, command_problem,
                                              command_timeout_for, decode, encode, make_adapter)

EXAMPLE_C = Path(__file__).resolve().parents[2] / "examples" / "command" / "rms_norm.c"
BF16 = ml_dtypes.bfloat16


# ---------------------------------------------------------------------------------------------
# The safetensors codec


def _sample_tensors():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((3, 5)).astype(BF16),
            "weight": rng.standard_normal(5).astype(np.float16),
            "gate": rng.standard_normal((3, 5)).astype(np.float32),
            "positions": np.array([0, 7, 8191], dtype=np.int64)}


def test_codec_round_trips_every_dtype_bit_for_bit():
    tensors = _sample_tensors() | {"f64": np.array([1 / 3]), "empty": np.zeros((0, 4), np.float32),
                                   "scalar": np.float32(2.5).reshape(()), "flags": np.array([True, False])}
    got, meta = decode(encode(tensors, {"op": "rms_norm", "eps": "1e-06"}))
    assert meta == {"op": "rms_norm", "eps": "1e-06"}
    assert set(got) == set(tensors)
    for name, array in tensors.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape
        assert got[name].tobytes() == array.tobytes()
        assert got[name].flags.writeable


def test_codec_aligns_every_tensor_to_its_element_size():
    data = encode(_sample_tensors(), {"op": "qk_norm_rope"})
    n = int.from_bytes(data[:8], "little")
    assert (8 + n) % 8 == 0  # the data block starts 8-byte aligned
    header = json.loads(data[8:8 + n])
    assert list(header)[1] == "positions"  # int64 first, then the 4- and 2-byte floats
    sizes = {"I64": 8, "F32": 4, "F16": 2, "BF16": 2}
    ends = []
    for name, info in header.items():
        if name != "__metadata__":
            assert info["data_offsets"][0] % sizes[info["dtype"]] == 0
            ends.append(info["data_offsets"])
    assert all(a[1] == b[0] for a, b in zip(ends, ends[1:])) and ends[0][0] == 0  # no gaps


def test_codec_agrees_with_the_safetensors_package():
    safetensors = pytest.importorskip("safetensors")
    from safetensors.numpy import save

    tensors = _sample_tensors()
    ours = encode(tensors, {"op": "rms_norm"})
    theirs = dict(safetensors.deserialize(ours))  # the reference reader accepts ours, bf16 included
    for name, array in tensors.items():
        assert theirs[name]["shape"] == list(array.shape)
        assert bytes(theirs[name]["data"]) == array.tobytes()
    assert theirs["x"]["dtype"] == "BF16" and theirs["positions"]["dtype"] == "I64"
    got, meta = decode(save(tensors, metadata={"k": "v"}))  # and ours reads the reference writer's
    assert meta == {"k": "v"}
    for name, array in tensors.items():
        assert got[name].dtype == array.dtype and got[name].tobytes() == array.tobytes()


@pytest.mark.parametrize("data, message", [
    (b"\x01\x02", "8-byte little-endian header length"),
    ((1000).to_bytes(8, "little") + b"{}", "header of 1000 bytes"),
    ((4).to_bytes(8, "little") + b"{no}", "not JSON"),
    ((2).to_bytes(8, "little") + b"[]", "not an object"),
    (encode({"y": np.zeros(4, np.float32)})[:-4], "data_offsets"),
])
def test_codec_names_what_is_malformed(data, message):
    with pytest.raises(FormatError, match=message):
        decode(data)


def test_codec_rejects_a_wrong_byte_count_and_an_unknown_dtype():
    def with_header(entry, body=b"\0" * 16):
        text = json.dumps({"y": entry}).encode()
        return len(text).to_bytes(8, "little") + text + body

    with pytest.raises(FormatError, match=r"needs 12 bytes, data_offsets \[0, 16\] span 16"):
        decode(with_header({"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}))
    with pytest.raises(FormatError, match="unknown dtype 'F6_E3M2'"):  # (F8_E4M3 and the like: quantizers' codes)
        decode(with_header({"dtype": "F6_E3M2", "shape": [16], "data_offsets": [0, 16]}))


# ---------------------------------------------------------------------------------------------
# A C program, checked end to end

C_CASES = tuple(Case.of("rms_norm", "qwen3", dtype, "4x256", regime=regime, weight="trained")
                for dtype in ("float32", "bfloat16", "float16") for regime in ("normal", "tiny_rms:1e-3"))


@pytest.fixture(scope="session")
def c_programs(tmp_path_factory) -> dict[str, Path]:
    """docs/other-languages.md's example compiled twice: as written, and with -DEPS_OUTSIDE (the bug)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (gcc) on this machine")
    folder = tmp_path_factory.mktemp("c_programs")
    programs = {}
    for name, flags in (("rms_norm", []), ("rms_norm_bug", ["-DEPS_OUTSIDE"])):
        out = folder / name
        subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", *flags, "-o", str(out), str(EXAMPLE_C), "-lm"],
                       check=True, capture_output=True)
        programs[name] = out
    return programs


def test_c_program_agrees_and_its_eps_bug_disagrees(c_programs):
    right = command_implementation(str(c_programs["rms_norm"]), "rms_norm", "qwen3", name="c")
    wrong = command_implementation(str(c_programs["rms_norm_bug"]), "rms_norm", "qwen3", name="c-bug")
    report = api.run_suite(Suite("c", "", C_CASES), [right, wrong], timeout=30.0)
    got = report.results.set_index(["implementation", "case_id"])["outcome"].astype(str)
    for case in C_CASES:
        assert got[("c", case.id)] in ("identical", "agree"), case.id
        if case.regime == "normal":  # eps = 1e-6 is invisible next to an RMS of 1
            assert got[("c-bug", case.id)] in ("identical", "agree"), case.id
        elif case.dtype != "float16":  # at RMS 1e-3, x / (rms + eps) is 0.1 % off: many ulps
            assert got[("c-bug", case.id)] == "disagree", case.id
    assert report.meta["failing"] == ["c-bug"]
    dtypes = report.results.set_index(["implementation", "case_id"])["output_dtype"]
    assert all(dtypes[("c", case.id)] == case.dtype for case in C_CASES)


def test_a_relative_program_path_is_taken_from_cwd(c_programs):
    impl = command_implementation("./rms_norm", "rms_norm", "qwen3", cwd=str(c_programs["rms_norm"].parent))
    adapter = make_adapter(**dict(impl.params))
    case = C_CASES[1]
    y = adapter(case.op, case.contract, case.inputs())
    assert y.shape == (4, 256) and y.dtype == np.float32


# ---------------------------------------------------------------------------------------------
# The protocol from the command's side (a Python program checks what it is given)


@pytest.fixture(scope="session")
def program(fixtures_dir) -> list[str]:
    return [sys.executable, str(fixtures_dir / "command_program.py")]


OP_CASES = (
    Case.of("rms_norm", "qwen3.5", "bfloat16", "4x64", weight="trained"),
    Case.of("gated_rms_norm", "qwen3.5", "float16", "4x64", weight="trained", gate="open"),
    Case.of("l2_norm", "qwen3.5", "float32", "4x64"),
    Case.of("qk_norm", "olmo2", "bfloat16", "4x4x64", weight="trained"),
    Case.of("qk_norm_rope", "qwen3", "bfloat16", "4x2x32", weight="trained"),
)


def _all_agree(program, cases, ran_cases=None):
    """The rows of `ran_cases` (default `cases`) run through the `correct` command, one
    implementation per case's op@convention, after checking every one ran and agreed."""
    ran_cases = ran_cases or cases
    impls = [command_implementation(program + ["correct"], c.op, c.convention, name=f"py-{c.op}-{c.convention}")
             for c in cases]
    report = api.run_suite(Suite("ops", "", tuple(ran_cases)), impls, timeout=30.0)
    ran = report.results[~report.results["outcome"].isin(["unsupported"])]
    assert len(ran) == len(ran_cases)
    assert set(ran["outcome"].astype(str)) <= {"identical", "agree"}, ran[["case_id", "detail"]].to_string()
    return ran


def test_every_op_reaches_the_command_with_its_inputs_and_metadata(program):
    _all_agree(program, OP_CASES)


QUANT_CASES = (
    Case.of("rms_norm_quant", "sglang-fp8", "bfloat16", "4x64", "zero_rows", weight="trained"),  # F8_E4M3, F32
    Case.of("rms_norm_quant", "vllm-int8", "float16", "4x64", weight="trained"),  # I8
    Case.of("rms_norm_quant", "mxfp4", "bfloat16", "4x64", weight="trained"),  # FP4 codes as U8
    Case.of("rms_norm_quant", "aiter-fp8", "float32", "4x64", weight="trained"),  # FNUZ bits as U8
    Case.of("add_rms_norm_quant", "vllm-fp8", "bfloat16", "4x64", weight="trained", residual="large"),
    Case.of("rms_norm_quant_static", "nvfp4", "bfloat16", "4x64", weight="trained", tensor_scale="nvfp4-amax4"),
)


def test_a_quantizing_op_writes_q_and_scale_in_its_formats(program):
    """q in F8_E4M3 / I8 or its codes as U8, the scales in F32 or NVFP4's F8_E4M3; a static op's
    input file carries its per-tensor scale. Each agrees with its contract."""
    ran = _all_agree(program, QUANT_CASES, [o for c in QUANT_CASES for o in c.outputs()])
    dtypes = dict(zip(ran["case_id"], ran["output_dtype"]))
    assert dtypes[QUANT_CASES[0].id] == "float8_e4m3fn" and dtypes[QUANT_CASES[1].id] == "int8"
    assert dtypes[QUANT_CASES[2].id] == "uint8"
    assert dtypes[QUANT_CASES[-1].outputs()[1].id] == "float8_e4m3fn"  # NVFP4's block scales


def test_input_file_and_metadata(tmp_path):
    case = OP_CASES[-1]
    inputs = case.inputs()
    meta = command.input_metadata(case.op, case.contract, inputs, "qwen3")
    path = tmp_path / "in.safetensors"
    command.write_file(path, dict(inputs.arrays), meta)
    tensors, got = command.read_file(path)
    assert set(tensors) == set(OPS[case.op].inputs) == {"x", "weight", "positions"}
    assert tensors["positions"].dtype == np.int64 and tensors["x"].dtype == BF16
    assert got["op"] == "qk_norm_rope" and got["convention"] == "qwen3" and got["dtype"] == "bfloat16"
    assert got["num_heads"] == "2" and (got["rows"], got["width"]) == ("4", "64")
    assert float(got["eps"]) == case.contract.eps and got["normdiff_protocol"] == "1"
    assert json.loads(got["contract"])["rope_theta"] == 1e6


def test_without_a_convention_the_metadata_names_every_matching_one():
    assert command._conventions_of("rms_norm", get_contract("rms_norm", "qwen3")) == "qwen3,llama,deepseek-v3,vllm"
    # eps is a case's own axis: a case at another eps still belongs to the same conventions
    assert command._conventions_of("rms_norm", get_contract("rms_norm", "qwen3").replace(eps=1.0)) == "qwen3,llama,deepseek-v3,vllm"
    assert command._conventions_of("rms_norm", get_contract("rms_norm", "qwen3").replace(cast="one_rounding")) \
        == "olmo2,gemma3n,torch"
    assert command._conventions_of("rms_norm", get_contract("rms_norm", "qwen3").replace(inverted=True)) == ""


# ---------------------------------------------------------------------------------------------
# Failures become outcomes, with messages that name the problem

ONE = (Case.of("rms_norm", "qwen3", "bfloat16", "4x64", weight="trained"),)


def test_failures_become_error_outcomes_that_say_why(program, tmp_path):
    modes = ["fails", "segfaults", "nothing", "wrong_shape", "no_y", "malformed", "float64", "float32"]
    impls = [command_implementation(program + [m], "rms_norm", "qwen3", name=m) for m in modes]
    impls.append(command_implementation("no-such-program-xyz --flag", "rms_norm", "qwen3", name="missing"))
    impls.append(command_implementation(program + ["sleeps"], "rms_norm", "qwen3", name="sleeps", timeout=1.0))
    start = time.perf_counter()
    report = api.run_suite(Suite("one", "", ONE), impls, timeout=20.0)
    assert time.perf_counter() - start < 15  # the 0.5 s command limit, not the worker's 20 s
    rows = report.results.set_index("implementation")
    outcome, detail = rows["outcome"].astype(str), rows["detail"]

    assert outcome["fails"] == "error"
    assert "exit status 3" in detail["fails"]
    assert "boom: the kernel could not find its weights" in detail["fails"]
    assert outcome["segfaults"] == "error" and "killed by SIGSEGV" in detail["segfaults"]
    assert outcome["nothing"] == "error" and "wrote no output" in detail["nothing"]
    assert "tensor 'y' shaped like x, (4, 64)" in detail["nothing"]
    assert outcome["wrong_shape"] == "error"
    assert "shape (4, 63); expected (4, 64)" in detail["wrong_shape"]
    assert outcome["no_y"] == "error" and "no tensor 'y' (its tensors: 'out')" in detail["no_y"]
    assert outcome["malformed"] == "error" and "malformed output file" in detail["malformed"]
    assert "not JSON" in detail["malformed"]
    assert outcome["float64"] == "error" and "as F64" in detail["float64"] and "BF16" in detail["float64"]
    # another measured float dtype is judged as it is, and the report says so
    assert outcome["float32"] in ("identical", "agree", "disagree")
    assert rows.loc["float32", "output_dtype"] == "float32"
    assert "returns float32 for bfloat16 input" in detail["float32"]
    assert outcome["missing"] == "error"
    assert "command 'no-such-program-xyz' not found" in detail["missing"]
    assert outcome["sleeps"] == "error"
    assert "did not finish within 0.5 s and was killed" in detail["sleeps"]
    assert report.meta["exit_code"] == 1


def test_a_timeout_kills_what_the_command_started(program, tmp_path):
    pid_file = tmp_path / "pid"
    adapter = make_adapter(program + ["sleeps_with_child", str(pid_file)], timeout=1.0)
    case = ONE[0]
    with pytest.raises(CommandTimeout, match="did not finish within 1 s"):
        adapter(case.op, case.contract, case.inputs())
    pid = int(pid_file.read_text())
    for _ in range(100):  # the grandchild was in the command's process group
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if _is_zombie(pid):
            break
        time.sleep(0.02)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the command's child outlived the timeout")


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False


def test_a_file_without_execute_permission_says_how_to_fix_it(tmp_path):
    script = tmp_path / "norm.py"
    script.write_text("print('hi')\n")
    script.chmod(0o644)
    message = command_problem("./norm.py", cwd=str(tmp_path))
    assert "is not executable" in message and "python3 ./norm.py" in message
    adapter = make_adapter("./norm.py", cwd=str(tmp_path))
    with pytest.raises(CommandError, match="is not executable"):
        adapter("rms_norm", ONE[0].contract, ONE[0].inputs())


def test_command_problem_finds_missing_programs(tmp_path):
    assert command_problem(sys.executable) is None
    assert "command 'nope-xyz' not found: no executable 'nope-xyz' on PATH" in command_problem("nope-xyz")
    (tmp_path / "mine").write_text("#!/bin/sh\n")
    (tmp_path / "mine").chmod(0o755)
    assert "write ./mine" in command_problem("mine", cwd=str(tmp_path))
    assert command_problem("./mine", cwd=str(tmp_path)) is None
    assert "no such file" in command_problem("./gone", cwd=str(tmp_path))
    assert "empty" in command_problem("  ")


# ---------------------------------------------------------------------------------------------
# The registry entry


def test_command_implementation_builds_a_user_entry():
    impl = command_implementation("./rms_norm --fast", "rms_norm", "qwen3", timeout=60.0)
    assert isinstance(impl, Implementation)
    assert (impl.kind, impl.framework, impl.batch_rows) == ("user", "command", False)
    assert impl.worker == "user rms_norm --fast"  # its own worker: never beside our code or another user's
    assert impl.entry == "normdiff.implementations.command:make_adapter"
    assert impl.op_conventions == frozenset({("rms_norm", "qwen3")})
    assert impl.name == "rms_norm --fast"
    params = dict(impl.params)
    assert params["command"] == ("./rms_norm", "--fast") and params["convention"] == "qwen3"
    assert params["cwd"] == os.getcwd()
    assert 50 <= params["timeout"] < 60  # below the worker's limit, so the adapter reports it first
    assert impl.unavailable_reason() is None
    assert pickle.loads(pickle.dumps(impl)) == impl and hash(impl) == hash(pickle.loads(pickle.dumps(impl)))
    assert command_implementation(["a b", "c"], "rms_norm", "qwen3").description == "external command: 'a b' c"


def test_command_implementation_rejects_unknown_pairs_and_empty_commands():
    with pytest.raises(ValueError, match="unknown convention 'qwen9'"):
        command_implementation("./x", "rms_norm", "qwen9")
    with pytest.raises(ValueError, match="does not define 'gated_rms_norm'"):
        command_implementation("./x", "gated_rms_norm", "qwen3")
    with pytest.raises(ValueError, match="empty"):
        command_implementation("", "rms_norm", "qwen3")


@pytest.mark.parametrize("worker", [2.0, 10.0, 60.0, 600.0])
def test_the_command_timeout_is_shorter_than_the_workers(worker):
    assert worker * 0.5 <= command_timeout_for(worker) < worker


def test_check_cli_fails_fast_for_a_missing_program():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", "--command", "./no-such-program",
                           "--op", "rms_norm", "--convention", "qwen3"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "command './no-such-program' not found" in proc.stdout


# ---------------------------------------------------------------------------------------------
# The backward pass through a command: dy in the input file, the gradients in the output

BACKWARD = tuple(Case.of(c.op, c.convention, c.dtype, c.shape_text, dy="aligned", **dict(c.choices))
                 for c in OP_CASES)
BOTH = ("forward", "backward")


def test_every_op_backward_reaches_the_command_and_agrees(program):
    impls = [command_implementation(program + ["correct"], c.op, c.convention, name=f"py-{c.op}", passes=BOTH)
             for c in OP_CASES]
    cases = tuple(out for c in BACKWARD for out in c.outputs())
    report = api.run_suite(Suite("bwd", "", OP_CASES + cases), impls, timeout=30.0)
    ran = report.results[report.results["outcome"].astype(str) != "unsupported"]
    assert len(ran) == len(OP_CASES) + len(cases)  # every output of every call, and every forward
    assert set(ran["output"]) == {"y", "dx", "dw", "dgate"}
    assert set(ran["outcome"].astype(str)) <= {"identical", "agree"}, ran[["case_id", "detail"]].to_string()


def test_a_command_is_a_forward_unless_told_otherwise(program):
    forward = command_implementation(program + ["correct"], "rms_norm", "qwen3")
    assert forward.passes == ("forward",) and not forward.backward
    backward = command_implementation(program + ["correct"], "rms_norm", "qwen3", passes=("backward",))
    assert backward.passes == ("backward",) and not backward.entry
    with pytest.raises(ValueError, match="forward pass, the backward or both"):
        command_implementation(program + ["correct"], "rms_norm", "qwen3", passes=("sideways",))


def test_a_backward_command_that_writes_the_wrong_gradients_says_which(program):
    case = BACKWARD[0]
    impls = [command_implementation(program + [m], "rms_norm", "qwen3.5", name=m, passes=("backward",))
             for m in ("no_dw", "dw_per_row", "bwd-weight-missing")]
    report = api.run_suite(Suite("one", "", tuple(case.outputs())), impls, timeout=30.0)
    rows = report.results.set_index(["implementation", "output"])
    detail, outcome = rows["detail"], rows["outcome"].astype(str)
    assert outcome["no_dw", "dx"] == "error" and "no tensor 'dw'" in detail["no_dw", "dx"]
    assert "a tensor 'dw' shaped like weight, (64,)" in detail["no_dw", "dx"]
    assert "pass=backward" in detail["no_dw", "dx"]
    assert outcome["dw_per_row", "dw"] == "error"
    assert "'dw' with shape (4, 64); expected (64,), the shape of weight" in detail["dw_per_row", "dw"]
    # the weight forgotten in dx: dx disagrees, dw (which never needed it) agrees
    assert outcome["bwd-weight-missing", "dx"] == "disagree"
    assert outcome["bwd-weight-missing", "dw"] in ("identical", "agree")
