"""Implementations in any language, run as an external command (`normdiff check --command CMD`).

The protocol (docs/other-languages.md). For each case normdiff
  1. writes the case's inputs to INPUT_PATH, a safetensors file: one tensor per input the op takes
     (`x`, `weight`, `gate`, `positions`: `OPS[op].inputs`), float tensors in the case dtype
     (F32, BF16 or F16), `positions` I64; the header's `__metadata__` (a string map) carries
     `normdiff_protocol` ("1"), `op`, `convention`, `dtype` (float32 | bfloat16 | float16), `eps`
     (Python's shortest round-trip repr, which strtod parses), `num_heads`, `rows`, `width` and
     `contract` (every knob of the contract as JSON);
  2. runs CMD with INPUT_PATH and OUTPUT_PATH appended as its last two arguments, both absolute, in
     a fresh temporary directory per call (which also catches its stdout and stderr). The working
     directory is `cwd` (by default the directory normdiff was started in, so `./my_norm` works);
     the environment adds NORMDIFF_INPUT, NORMDIFF_OUTPUT, NORMDIFF_OP, NORMDIFF_CONVENTION,
     NORMDIFF_DTYPE, NORMDIFF_EPS and NORMDIFF_NUM_HEADS; stdin is empty;
  3. reads OUTPUT_PATH, a safetensors file the command wrote with a tensor `y` shaped like `x` in
     F32, BF16 or F16 (normally the input dtype; another float dtype is measured as it is and the
     report says so). An op with several results writes each of them, by name, shaped like x: a
     fused add (add_rms_norm, inputs `x`, `residual`, `weight`) writes `y` and `residual_out`
     (the metadata's `results` lists them, comma-separated: `y` for every other op). Other
     tensors and the metadata are ignored. A quantizing op (rms_norm_quant and its kind) writes `q`
     shaped like x in its format, F8_E4M3 / F8_E5M2 / I8, or any format's raw bits as U8 (an FP4
     code in the low nibble), and `scale` in F32, F8_E8M0 or F8_E4M3 (NVFP4's), or E8M0 / E4M3
     codes as U8, one per row or block in any shape of that many elements; its input file adds a
     per-tensor scale, `tensor_scale`, as one F32, where the op takes one.

The backward pass (`--pass backward` or `both`, given explicitly: a command is a forward unless
it says otherwise). A backward call's input file adds the upstream gradients, one per result, each
shaped like x, in the case dtype: `dy` (of y), and a fused add's `dresidual_out` (of residual_out);
the metadata's `pass` is "backward" (a forward call's is "forward"), `upstreams` lists the
upstream tensors (`dy`, or `dy,dresidual_out`) and `gradients` names the tensors to write,
comma-separated, from the op record (`dx,dw`, `dx,dgate,dw` for the gated norm, `dx` for the L2
norm, `dx,dresidual,dw` for the fused add); NORMDIFF_PASS says the same. The command writes each
gradient, shaped like its operand (dw like the weight: summed over rows), in F32, BF16 or F16.

Tensors in the input file are laid out largest element size first (positions before the floats),
with the data block starting 8-byte aligned, so every tensor is aligned to its element size and a C
program may point straight into the buffer. There are no gaps between tensors (the format forbids
them).

The file format is read and written here by a small self-contained codec rather than by the
`safetensors` package: safetensors' NumPy API writes BF16 (ml_dtypes' dtype name happens to match)
but cannot load it (`safetensors.numpy.load` raises KeyError: 'BF16', 0.8.0), bf16 is half of
what normdiff checks, and the format is 8 bytes of header length, a JSON header and raw
little-endian bytes. The tests check the codec against the `safetensors` package in both directions
when it is installed.

Every way a command can fail raises an exception whose message names the problem and the fix; the
worker turns it into an `error` outcome. A command that runs past its limit is killed (with any
processes it started: it runs in its own process group) and raises CommandTimeout, a little before
the worker's own per-call limit would kill the whole worker (`command_timeout_for`).
"""
from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time

import ml_dtypes
import numpy as np

from normdiff import processes
from normdiff.text import byte_size, general, seconds
from normdiff.harness.data import inputs
from normdiff.harness.data.conventions import CONVENTIONS, get_contract
from normdiff.harness.data.dtypes import format_of
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import GRADIENT_NAMES, OPS, PASSES
from normdiff.implementations.entry import Implementation

PROTOCOL = "1"
INPUT_NAME = "input.safetensors"
OUTPUT_NAME = "output.safetensors"
OUTPUT_TENSOR = "y"
OUTPUT_DTYPES = ("F32", "BF16", "F16")  # what normdiff measures
# a quantizing op's results: its codes (engine/quant_judge.py decodes each) and its scales
QUANT_DTYPES = {"q": ("F8_E4M3", "F8_E5M2", "I8", "U8"), "scale": ("F32", "F8_E8M0", "F8_E4M3", "U8")}
DEFAULT_WORKER_TIMEOUT = 60.0  # the runner's default per-call limit (`--timeout`)

# ---------------------------------------------------------------------------------------------
# The safetensors format: u64 little-endian N, N bytes of JSON header, then the data block.
# Header: {"__metadata__": {str: str}, NAME: {"dtype": D, "shape": [...], "data_offsets": [b, e]}}
# with offsets relative to the data block. https://github.com/huggingface/safetensors

# safetensors dtype code -> little-endian NumPy dtype (bf16 is read as <u2 and viewed)
_CODES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("bool"),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn), "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
}
_MAX_HEADER = 100 * 1024 * 1024  # the format's own limit


class FormatError(ValueError):
    """A file that is not valid safetensors (the message says what is wrong with it)."""


def dtype_code(dtype) -> str:
    dtype = np.dtype(dtype)
    for code, d in _CODES.items():
        if dtype == d or (code != "BF16" and dtype == d.newbyteorder(">")):
            return code
    raise FormatError(f"dtype {dtype} has no safetensors code")


def _le_bytes(array: np.ndarray) -> bytes:
    """The array's elements as little-endian bytes, C order (any dtype, bf16 included)."""
    a = np.ascontiguousarray(array)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("="))
    if a.dtype.itemsize > 1:
        a = a.view(f"u{a.dtype.itemsize}").astype(f"<u{a.dtype.itemsize}", copy=False)
    return a.tobytes()


def encode(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    """A safetensors file's bytes. Tensors are laid out largest element size first (stable, so
    otherwise in the order given) and the data block starts 8-byte aligned, so every tensor is
    aligned to its element size."""
    order = sorted(tensors, key=lambda k: -np.asarray(tensors[k]).dtype.itemsize)
    header: dict = {}
    if metadata:
        bad = {k: v for k, v in metadata.items() if not (isinstance(k, str) and isinstance(v, str))}
        if bad:
            raise FormatError(f"safetensors metadata must map strings to strings; got {bad!r}")
        header["__metadata__"] = dict(metadata)
    blobs, offset = [], 0
    for name in order:
        array = np.asarray(tensors[name])
        blob = _le_bytes(array)
        header[name] = {"dtype": dtype_code(array.dtype), "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def decode(data: bytes) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(tensors, metadata) from a safetensors file's bytes; FormatError says what is malformed."""
    header, body, metadata = _split(data)
    return {name: _tensor(name, info, body) for name, info in header.items()}, metadata


def read_selected(path, wanted) -> dict[str, tuple[str, np.ndarray]]:
    """{name: (dtype code, array)} of the tensors of a safetensors file that `wanted(name, shape)`
    picks, read through a memory map: only their bytes (a checkpoint's norms out of gigabytes).
    A path that is not a regular file is an inputs.InputError (a UsageError) naming it."""
    with inputs.open_file(path, "give a .safetensors file") as fh:
        size = os.fstat(fh.fileno()).st_size
        data = np.memmap(fh, dtype=np.uint8, mode="r", shape=(size,)) if size else b""
    header, body, _ = _split(data)
    return {name: (info["dtype"], _tensor(name, info, body)) for name, info in header.items()
            if wanted(name, _shape(name, info))}


def _split(data) -> tuple[dict, memoryview, dict[str, str]]:
    """(header, data block, metadata) of a safetensors file's bytes (or a memory map of them)."""
    if len(data) < 8:
        raise FormatError(f"the file has {len(data)} bytes; a safetensors file starts with an 8-byte "
                          "little-endian header length")
    n = int.from_bytes(bytes(data[:8]), "little")
    if n > _MAX_HEADER:
        raise FormatError(f"the first 8 bytes give a header of {n} bytes; the format allows at most "
                          f"{_MAX_HEADER} (the length must be little-endian u64)")
    if n > len(data) - 8:
        raise FormatError(f"the first 8 bytes give a header of {n} bytes, but the file has only "
                          f"{len(data) - 8} after them (the length must be little-endian u64)")
    try:
        header = inputs.json_loads(bytes(data[8:8 + n]).decode("utf-8"))
    except inputs.TooDeep as exc:
        raise FormatError(f"the {n}-byte header: {exc}") from None
    except ValueError as exc:  # not UTF-8, not JSON
        raise FormatError(f"the {n}-byte header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise FormatError(f"the header is a JSON {type(header).__name__}, not an object")
    body = memoryview(data)[8 + n:]
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise FormatError("__metadata__ must be an object mapping strings to strings")
    return header, body, {str(k): str(v) for k, v in metadata.items()}


def _shape(name: str, info) -> tuple[int, ...]:
    """A header entry's shape, checked (FormatError names the tensor)."""
    where = f"tensor {name!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise FormatError(f"{where}: its header entry must be an object with dtype, shape and "
                          f"data_offsets; got {_clipped(info)}")
    shape = info["shape"]
    if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                            for d in shape)):
        raise FormatError(f"{where}: shape must be a list of non-negative integers; got {_clipped(shape)}")
    return tuple(shape)


def _clipped(value, most: int = 200) -> str:
    """repr(value), at most `most` characters: a malformed entry may be megabytes."""
    text = repr(value)
    return text if len(text) <= most else text[:most] + "..."


def _tensor(name: str, info, body: memoryview) -> np.ndarray:
    where = f"tensor {name!r}"
    shape = _shape(name, info)
    code, offsets = info["dtype"], info["data_offsets"]
    if not isinstance(code, str) or code not in _CODES:
        raise FormatError(f"{where}: unknown dtype {_clipped(code)} (known: {', '.join(_CODES)})")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= len(body)):
        raise FormatError(f"{where}: data_offsets {_clipped(offsets)} must be [begin, end] within the "
                          f"{len(body)}-byte data block that follows the header")
    dtype = _CODES[code]
    count = math.prod(shape)  # a Python int: a product of huge dims does not wrap round
    if offsets[1] - offsets[0] != count * dtype.itemsize:
        raise FormatError(f"{where}: {code} {tuple(shape)} needs {count * dtype.itemsize} bytes, "
                          f"data_offsets {offsets} span {offsets[1] - offsets[0]}")
    data = body[offsets[0]:offsets[1]]
    if code == "BF16":
        array = np.frombuffer(data, dtype="<u2").astype(np.uint16).view(dtype)
    else:
        array = np.frombuffer(data, dtype=dtype).astype(dtype.newbyteorder("="))
    return array.reshape(shape)  # a writable, native-order copy


def write_file(path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    with open(path, "wb") as fh:
        fh.write(encode(tensors, metadata))


def read_file(path, max_bytes: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """A safetensors file's tensors; with `max_bytes`, a larger file is refused before it is read
    (a pipe or a device in its place is refused before it is opened)."""
    try:
        with inputs.open_file(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            if max_bytes is not None and size > max_bytes:
                raise FormatError(f"the file has {byte_size(size)}; this case's output needs at most "
                                  f"{byte_size(max_bytes)}")
            return decode(fh.read())
    except inputs.InputError as exc:
        raise FormatError(f"it is not a file ({exc.why})") from None


def read_header(path) -> dict:
    """Only the JSON header of a safetensors file (its tensors' dtypes and shapes), read without its
    data: a wrongly shaped output is refused without reading what may be gigabytes."""
    try:
        with inputs.open_file(path) as fh:
            head = fh.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 0 or n > _MAX_HEADER:
                return {}
            header = inputs.json_loads(fh.read(n).decode("utf-8"))
    except ValueError:  # not a file (read_file says so), not UTF-8, not JSON, nested too deeply
        return {}
    return header if isinstance(header, dict) else {}


# ---------------------------------------------------------------------------------------------
# Running a command


class CommandError(RuntimeError):
    """The command failed or wrote something unusable; the message names the problem and the fix."""


class CommandTimeout(TimeoutError):
    """The command ran past its time limit and was killed."""


def split_command(command) -> list[str]:
    try:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    except ValueError as exc:  # an unbalanced quote
        raise UsageError(f"cannot split the command {command!r} as a shell would: {exc}") from None
    if not argv:
        raise UsageError("the command is empty; give the program to run, e.g. --command ./my_norm")
    return argv


def command_timeout_for(worker_timeout: float) -> float:
    """The command's limit under a worker's per-call limit: a little shorter, so that the adapter
    kills the command and reports it before the worker itself is killed (whose `timeout` outcome
    would say nothing about the command, and would cost a worker restart)."""
    return max(min(worker_timeout - 2.0, worker_timeout * 0.9), worker_timeout * 0.5)


def command_problem(command, cwd: str | None = None) -> str | None:
    """Why `command` cannot be started from `cwd`, or None: a quick check a front end can make
    before running a suite (the adapter raises the same message per call)."""
    try:
        argv = split_command(command)
    except ValueError as exc:
        return str(exc)
    return _program_problem(argv[0], cwd or os.getcwd())


def _program_problem(program: str, cwd: str) -> str | None:
    if os.sep in program or (os.altsep and os.altsep in program):
        path = os.path.normpath(os.path.join(cwd, program))
        if not os.path.exists(path):
            return (f"command {program!r} not found: no such file {path!r} (relative paths are "
                    f"taken from {cwd})")
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            return (f"command {program!r} is not executable: {path!r} "
                    f"{'is a directory' if os.path.isdir(path) else 'lacks the execute permission'}; "
                    f"build it, `chmod +x {program}`, or run it through its interpreter "
                    f"(e.g. `python3 {program}`)")
        return None
    if shutil.which(program) is None:
        local = os.path.join(cwd, program)
        hint = (f"; there is a {program!r} in {cwd}: write ./{program}" if os.path.exists(local)
                else "; give a path (./prog) or install it")
        return f"command {program!r} not found: no executable {program!r} on PATH{hint}"
    return None


def _tail(path: str, limit: int = 500) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - 4 * limit))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return " ".join(text.split())[-limit:]


def _conventions_of(op: str, contract) -> str:
    """Every convention whose contract for `op` is `contract` up to its eps (a case's own axis)."""
    return ",".join(c.name for c in CONVENTIONS.values()
                    if op in c.contracts and c.contracts[op].replace(eps=contract.eps) == contract)


def input_metadata(op: str, contract, inputs, convention: str, pass_: str = "forward") -> dict[str, str]:
    x = inputs.arrays["x"]
    meta = {"normdiff_protocol": PROTOCOL, "op": op, "convention": convention,
            "dtype": format_of(x).name, "eps": repr(float(contract.eps)),
            "num_heads": str(inputs.num_heads), "rows": str(int(np.prod(x.shape[:-1]))),
            "width": str(x.shape[-1]), "contract": json.dumps(contract.knobs(), sort_keys=True),
            "pass": pass_, "results": ",".join(OPS[op].results)}
    if pass_ == "backward":
        meta["upstreams"] = ",".join(OPS[op].upstreams)
        meta["gradients"] = ",".join(_gradients(op, inputs))
    return meta


def _upstream_tensors(op: str, dy) -> dict[str, np.ndarray]:
    """A backward call's upstream gradients by their tensor names: dy (of y), d<result> for each
    further result (a fused add's dresidual_out); `dy` is one array, or {result: array}."""
    record = OPS[op]
    given = dict(dy) if isinstance(dy, dict) else {"y": dy}
    missing = [r for r in record.results if r not in given]
    if missing:
        raise ValueError(f"a backward call of {op} needs an upstream gradient of {', '.join(missing)}")
    return {name: np.asarray(given[r]) for name, r in zip(record.upstreams, record.results)}


def _gradients(op: str, inputs) -> dict[str, str]:
    """The backward's output tensors: gradient name -> the operand it is the gradient of (those the
    case holds: a weightless call has no dw)."""
    return {g: operand for g, operand in OPS[op].gradients.items() if operand in inputs.arrays}


def _adapter(command, timeout: float, cwd: str | None, convention: str | None, pass_: str):
    argv = split_command(command)
    shown = shlex.join(argv)
    workdir = os.path.abspath(cwd or os.getcwd())

    def call(op, contract, inputs, dy=None):
        problem = _program_problem(argv[0], workdir)
        if problem:
            raise CommandError(problem)
        conv = convention if convention is not None else _conventions_of(op, contract)
        metadata = input_metadata(op, contract, inputs, conv, pass_)
        tensors = dict(inputs.arrays, **(_upstream_tensors(op, dy) if pass_ == "backward" else {}))
        if pass_ == "backward":
            wanted = {g: inputs.arrays[operand].shape for g, operand in _gradients(op, inputs).items()}
        else:  # y (or q), and any further result (residual_out), each shaped like x; scales any shape
            wanted = {name: None if name == "scale" else inputs.arrays["x"].shape for name in OPS[op].results}
        with tempfile.TemporaryDirectory(prefix="normdiff-cmd-") as tmp:
            in_path, out_path = os.path.join(tmp, INPUT_NAME), os.path.join(tmp, OUTPUT_NAME)
            write_file(in_path, tensors, metadata)
            env = dict(os.environ, NORMDIFF_INPUT=in_path, NORMDIFF_OUTPUT=out_path, NORMDIFF_OP=op,
                       NORMDIFF_CONVENTION=conv, NORMDIFF_DTYPE=metadata["dtype"],
                       NORMDIFF_EPS=metadata["eps"], NORMDIFF_NUM_HEADS=metadata["num_heads"],
                       NORMDIFF_PASS=pass_)
            stdout_path, stderr_path = os.path.join(tmp, "stdout.txt"), os.path.join(tmp, "stderr.txt")
            _run(argv, shown, workdir, env, in_path, out_path, stdout_path, stderr_path, timeout)
            out = _read_output(shown, out_path, wanted, inputs.arrays["x"].dtype, stderr_path, pass_)
        if pass_ == "forward":
            results = OPS[op].results
            return out[OUTPUT_TENSOR] if len(results) == 1 else tuple(out[name] for name in results)
        return {operand: out[g] for g, operand in _gradients(op, inputs).items()}

    call.command = shown
    call.timeout = timeout
    return call


def make_adapter(command, timeout: float = command_timeout_for(DEFAULT_WORKER_TIMEOUT),
                 cwd: str | None = None, convention: str | None = None):
    """The adapter (op, contract, inputs) -> y (a fused add: (y, residual_out)) that runs `command`
    once per call (protocol above).
    `timeout` is the command's own limit in seconds; keep it below the runner's per-call limit
    (`command_timeout_for`). `convention` is only passed on to the command; when None the metadata
    names every convention whose contract for the op is the one given (comma-separated)."""
    return _adapter(command, timeout, cwd, convention, "forward")


def make_backward_adapter(command, timeout: float = command_timeout_for(DEFAULT_WORKER_TIMEOUT),
                          cwd: str | None = None, convention: str | None = None):
    """The backward adapter (op, contract, inputs, dy) -> {operand: gradient}: the same command,
    called with dy (and a fused add's dresidual_out: dy is then {result: gradient}) in its input
    file and metadata pass=backward, writing dx, dw (, dgate; a fused add's dx, dresidual, dw)."""
    return _adapter(command, timeout, cwd, convention, "backward")


def _run(argv, shown, workdir, env, in_path, out_path, stdout_path, stderr_path, timeout) -> None:
    start = time.perf_counter()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        try:
            proc = subprocess.Popen(argv + [in_path, out_path], cwd=workdir, env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True, preexec_fn=processes.child_setup())
        except FileNotFoundError as exc:
            raise CommandError(f"command {argv[0]!r} not found: {exc.strerror} (from {workdir})") from None
        except PermissionError as exc:
            raise CommandError(f"command {argv[0]!r} is not executable: {exc.strerror}; `chmod +x` it "
                               "or run it through its interpreter") from None
        except OSError as exc:  # e.g. ENOEXEC: a script without a #! line
            raise CommandError(f"command {argv[0]!r} could not be started: {exc}; if it is a script, "
                               "give it a #! line or run it through its interpreter") from None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise CommandTimeout(
                f"command '{shown}' did not finish within {general(timeout)} s and was killed; make it faster "
                f"or allow more time (--timeout; the command gets a little less than the per-call "
                f"limit){_said(stderr_path)}") from None
        finally:
            _kill_group(proc)  # what it started ends with it, however it ended
    if code < 0:
        name = _signal_name(-code)
        raise CommandError(f"command '{shown}' was killed by {name} after "
                           f"{seconds(time.perf_counter() - start, 2)}{_said(stderr_path)}")
    if code != 0:
        said = _said(stderr_path) or _said(stdout_path, "stdout")
        raise CommandError(f"command '{shown}' failed with exit status {code}{said or ' (and printed nothing)'}")


def _said(path: str, stream: str = "stderr") -> str:
    tail = _tail(path)
    return f"; its {stream} ends: {tail}" if tail else ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill_group(proc: subprocess.Popen) -> None:
    """The command's session and everything below it (a daemonized grandchild too: see
    normdiff/processes.py)."""
    processes.kill_tree(proc.pid)  # before the wait: the unreaped pid still names its group
    proc.wait()


def output_limit(wanted: dict) -> int:
    """The largest output file a call can need: a header of 1 MiB (ours take 200 bytes), every
    wanted tensor as float32 (the widest measured dtype), and as much again for tensors the command
    adds (read, then ignored); a tensor of any shape (a quantizer's scales, fewer than x's values)
    as large as the largest other."""
    sizes = [int(np.prod(shape)) for shape in wanted.values() if shape is not None]
    largest = max(sizes, default=0)
    return 8 + 2 ** 20 + 2 * 4 * sum(largest if shape is None else int(np.prod(shape)) for shape in wanted.values())


def _read_output(shown: str, out_path: str, wanted: dict, dtype, stderr_path: str,
                 pass_: str = "forward") -> dict[str, np.ndarray]:
    """The tensors `wanted` (name -> shape, None: any shape) from the command's output file, each checked."""
    names = ", ".join(f"a tensor '{n}' shaped like {_operand_of(n)}, {tuple(shape)}" if shape is not None else
                      f"a tensor '{n}', one per row or block" for n, shape in wanted.items())
    layout = (f"write a safetensors file with {names} to the last argument (also $NORMDIFF_OUTPUT)"
              + (" (this is a backward call: metadata pass=backward, dy in the input)" if pass_ == "backward" else ""))
    if not os.path.exists(out_path):
        raise CommandError(f"command '{shown}' exited with status 0 but wrote no output: {layout}"
                           f"{_said(stderr_path)}")
    header = read_header(out_path)
    for name, shape in wanted.items():
        entry = header.get(name)
        if shape is not None and isinstance(entry, dict) and isinstance(entry.get("shape"), list) \
                and tuple(entry["shape"]) != shape:
            raise CommandError(f"command '{shown}' wrote '{name}' with shape {tuple(entry['shape'])}; "
                               f"expected {tuple(shape)}, the shape of {_operand_of(name)}")
    try:
        tensors, _ = read_file(out_path, max_bytes=output_limit(wanted))
    except FormatError as exc:
        raise CommandError(f"command '{shown}' wrote a malformed output file: {exc}. It must {layout}: "
                           "8 bytes of little-endian header length, the JSON header, the raw data") from None
    missing = [n for n in wanted if n not in tensors]
    if missing:
        have = ", ".join(repr(k) for k in tensors) or "none"
        raise CommandError(f"command '{shown}' wrote no tensor {', '.join(map(repr, missing))} (its tensors: "
                           f"{have}); {layout}")
    for name, shape in wanted.items():
        code = dtype_code(tensors[name].dtype)
        allowed = QUANT_DTYPES.get(name, OUTPUT_DTYPES)
        if code not in allowed:
            raise CommandError(f"command '{shown}' wrote '{name}' as {code}; normdiff measures "
                               f"{', '.join(allowed)}: " + (f"write it in the input dtype, {dtype_code(dtype)}"
                                                            if name not in QUANT_DTYPES else "write it as one of those"))
        if shape is not None and tensors[name].shape != shape:
            raise CommandError(f"command '{shown}' wrote '{name}' with shape {tuple(tensors[name].shape)}; "
                               f"expected {tuple(shape)}, the shape of {_operand_of(name)}")
    return {name: tensors[name] for name in wanted}


def _operand_of(name: str) -> str:
    """The operand an output tensor is shaped like: y (and every result) and dx like x, dw like the
    weight, dresidual like the residual."""
    gradients = {g: o for o, g in GRADIENT_NAMES.items()}
    return gradients.get(name, "x")


# ---------------------------------------------------------------------------------------------
# Registry entry


def command_implementation(command, op: str, convention: str, name: str | None = None,
                           timeout: float = DEFAULT_WORKER_TIMEOUT, cwd: str | None = None,
                           passes=("forward",)) -> Implementation:
    """An Implementation that runs `command` (a string, split like a shell would, or a list of
    arguments) on every case of `op`@`convention`.

    `timeout` is the per-call limit the run will use (`--timeout`, run_suite's `timeout`); the
    command itself is killed at `command_timeout_for(timeout)`, a little earlier, so that a slow
    command is reported as such and the worker survives. `cwd` (default: the current directory,
    resolved now) is where the command runs and where a relative program path is looked up.
    `passes` are those the command implements (forward, backward or both: the protocol above).
    Unknown op or convention raise UsageError; whether the program exists is not
    checked here (see `command_problem`)."""
    argv = split_command(command)
    if not passes or set(passes) - set(PASSES):
        raise UsageError(f"a command implements the forward pass, the backward or both; got passes={passes!r}")
    passes = tuple(p for p in PASSES if p in passes)
    get_contract(op, convention)  # raises ValueError naming the unknown or undefined pair
    if name is None:
        name = " ".join([os.path.basename(argv[0])] + argv[1:])
        name = name if len(name) <= 40 else name[:39] + "…"
    return Implementation(
        name=name, kind="user", framework="command",
        entry="normdiff.implementations.command:make_adapter" if "forward" in passes else "",
        backward="normdiff.implementations.command:make_backward_adapter" if "backward" in passes else "",
        op_conventions=frozenset({(op, convention)}),
        description=f"external command: {shlex.join(argv)}",
        batch_rows=False,
        params=(("command", tuple(argv)), ("timeout", command_timeout_for(timeout)),
                ("cwd", os.path.abspath(cwd or os.getcwd())), ("convention", convention)),
        replay=("--command", shlex.join(argv)),  # repro gives it the pass its case id names
    )
