"""Reading a checkpoint's norm weights (only those tensors' bytes) from safetensors files and GGUF
files, and which HF class each tensor belongs to.

safetensors is read by normdiff's own codec (implementations/command.py, which --command uses),
through a memory map, so neither torch nor the safetensors package is needed to read one; GGUF
through the `gguf` package (an extra: pip install 'normdiff[gguf]'). Which class holds a tensor
comes from the checkpoint's config.json: transformers builds the model on the meta device (no memory, no weights, nothing
downloaded), and each norm module's class is looked up in the HF family table
(implementations/hf_families.py), whose contract says whether the class multiplies by w or by 1 + w.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normdiff.files import INDUCTOR_CACHE_ENV, cache_dir
from normdiff.harness.data import inputs
from normdiff.harness.data.errors import UsageError
from normdiff.text import byte_size

# safetensors' (and our GGUF reading's) names of the float dtypes -> normdiff's formats
FLOAT_CODES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
# a tensor is a norm's when its module's last name says so (no config.json to ask): input_layernorm,
# q_norm, norm, ln_f, ln_1, layer_norm, ...
NORM_NAME = re.compile(r"(^|\.)([a-z0-9_]*norm[a-z0-9_]*|ln(_[a-z0-9]+)?)\.weight$")


@dataclass
class Tensor:
    name: str
    dtype: str  # the file's name for it: BF16, F16, F32, F64
    shape: tuple[int, ...]
    values: np.ndarray  # float64


SUFFIXES = (".safetensors", ".gguf")


def files(checkpoint: str | Path) -> list[Path]:
    """The files of a checkpoint: a .safetensors or .gguf file, or every *.safetensors in a folder."""
    path = Path(checkpoint)
    if path.is_dir():
        found = sorted(path.glob("*.safetensors"))
        if not found:
            raise UsageError(f"{path} holds no .safetensors file (normdiff weights reads safetensors checkpoints "
                             "and .gguf files)")
        return found
    if not os.path.lexists(path):
        raise UsageError(f"checkpoint not found: {path} (give a .safetensors or .gguf file, or a folder of "
                         ".safetensors files)")
    inputs.check_file(path, "give a .safetensors or .gguf file, or a folder of .safetensors files")
    if path.suffix not in SUFFIXES:
        raise UsageError(f"{path} is not a .safetensors or .gguf file (pickled checkpoints are not read)")
    if path.suffix == ".gguf":
        _gguf()  # the package, before any work
    return [path]


def is_gguf(checkpoint: str | Path) -> bool:
    return Path(checkpoint).suffix == ".gguf"


def _gguf():
    try:
        import gguf
    except ImportError:
        raise UsageError("reading a .gguf file needs the gguf package, which is not installed: "
                         "pip install 'normdiff[gguf]'") from None
    return gguf


def named_as_norm(name: str, shape: tuple[int, ...]) -> bool:
    """A 1-D tensor whose module's name is a norm's."""
    return len(shape) == 1 and NORM_NAME.search(name) is not None


def read(checkpoint: str | Path, wanted=named_as_norm) -> dict[str, Tensor]:
    """The tensors `wanted(name, shape)` picks, as float64 values with their stored dtype (float
    ones only)."""
    from normdiff.implementations.command import FormatError, read_selected

    if is_gguf(checkpoint):
        return _read_gguf(Path(checkpoint), wanted)
    out = {}
    for path in files(checkpoint):
        try:
            found = read_selected(path, wanted)
        except FormatError as exc:
            raise UsageError(f"{path} is not a safetensors file: {exc}") from None
        out.update({name: Tensor(name, code, array.shape, array.astype(np.float64))
                    for name, (code, array) in found.items() if code in FLOAT_CODES})
    return out


def _read_gguf(path: Path, wanted) -> dict[str, Tensor]:
    """A GGUF file's float tensors that `wanted` picks (norms are stored unquantized: F32, F16 or
    BF16); GGUF lists a tensor's dims fastest first, reversed here to the usual order."""
    import ml_dtypes

    gguf = _gguf()
    types = {gguf.GGMLQuantizationType.F32: ("F32", np.float32), gguf.GGMLQuantizationType.F16: ("F16", np.float16),
             gguf.GGMLQuantizationType.BF16: ("BF16", ml_dtypes.bfloat16)}
    reader = gguf_reader(path)
    out = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        if t.tensor_type not in types or not wanted(t.name, shape):
            continue
        name, dtype = types[t.tensor_type]
        values = np.asarray(t.data).view(np.uint8).view(dtype).astype(np.float64).reshape(shape)
        out[t.name] = Tensor(t.name, name, shape, values)
    return out


def gguf_names(checkpoint: str | Path, hf_names) -> dict[str, str]:
    """{HF tensor name: its name in this GGUF file}, by gguf's own tensor map for the file's
    architecture (general.architecture, {arch}.block_count): how llama.cpp's converter names them."""
    gguf = _gguf()
    reader = gguf_reader(checkpoint)

    def field(key):
        f = reader.fields.get(key)
        return f.contents() if f is not None else None

    arch_name = field("general.architecture")
    arch = next((a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch_name), None)
    if arch is None:
        raise UsageError(f"{checkpoint}: gguf {getattr(gguf, '__version__', '')} knows no architecture "
                         f"{arch_name!r}, so its tensor names cannot be matched to the original's")
    table = gguf.get_tensor_name_map(arch, int(field(f"{arch_name}.block_count") or 0))
    out = {}
    for name in hf_names:
        stem = name[:-len(".weight")] if name.endswith(".weight") else name
        mapped = table.get_name(stem)
        if mapped:
            out[name] = mapped + name[len(stem):]
    return out


# ---- a GGUF file's header, checked before gguf reads it ------------------------------------------

# gguf's reader believes the counts and lengths a file gives (a header claiming 2**60 array items
# is a MemoryError, or the machine's memory): each is checked against the bytes the file has, and
# the counts against these, far above any llama.cpp model's (a few thousand tensors, a few dozen
# keys, a vocabulary of 262 144 tokens)
GGUF_MAX_TENSORS = 2 ** 20
GGUF_MAX_KEYS = 2 ** 16
GGUF_MAX_ITEMS = 2 ** 24  # the items of one array value
GGUF_MAX_DIMS = 4  # llama.cpp's GGML_MAX_DIMS
_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUFValueType -> bytes
_STRING, _ARRAY, _UINT32 = 8, 9, 4


class _Header:
    """A cursor over a GGUF file's bytes that refuses to go past their end."""

    def __init__(self, data, order: str):
        self.data, self.at, self.order = data, 0, order

    def take(self, count: int, what: str):
        if count > len(self.data) - self.at:
            raise ValueError(f"{what} at byte {self.at} needs {count} bytes, and the file ends "
                             f"{len(self.data) - self.at} bytes later (truncated?)")
        self.at += count
        return self.data[self.at - count:self.at]

    def number(self, code: str, what: str) -> int:
        return struct.unpack(self.order + code, bytes(self.take(struct.calcsize(code), what)))[0]

    def count(self, what: str, most: int, least_each: int) -> int:
        n = self.number("Q", what)
        if n > most or n * least_each > len(self.data) - self.at:
            raise ValueError(f"{what} is {n}; " + (f"normdiff reads at most {most}" if n > most else
                             f"the {len(self.data) - self.at} bytes left in the file cannot hold that many"))
        return n

    def string(self, what: str) -> bytes:
        return bytes(self.take(self.number("Q", f"the length of {what}"), what))

    def value(self, kind: int, what: str, depth: int = 0):
        if kind in _SCALARS:
            return bytes(self.take(_SCALARS[kind], what))
        if kind == _STRING:
            return self.string(what)
        if kind != _ARRAY or depth:
            raise ValueError(f"{what} has value type {kind}, which GGUF does not define"
                             + (" inside an array" if depth else ""))
        item = self.number("I", f"the item type of {what}")
        least = _SCALARS.get(item, 8)  # a string is at least its 8-byte length
        n = self.count(f"the item count of {what}", GGUF_MAX_ITEMS, least)
        if item in _SCALARS:
            self.take(n * least, what)
        else:
            for _ in range(n):
                self.value(item, f"an item of {what}", depth + 1)
        return None


def check_gguf_header(data) -> None:
    """Walk a GGUF file's header (its keys and tensor infos) within the file's bytes, and check that
    each tensor's data lies within the file; ValueError says what is wrong and where."""
    gguf = _gguf()
    if bytes(data[:4]) != b"GGUF":
        raise ValueError("it does not begin with the GGUF magic bytes")
    head = _Header(data, "<")
    head.take(4, "the magic")
    if head.number("I", "the version") & 0xFFFF == 0:  # written on a big-endian machine
        head.order = ">"
    tensors = head.count("the tensor count", GGUF_MAX_TENSORS, 24)
    keys = head.count("the key count", GGUF_MAX_KEYS, 13)
    alignment = 32
    for i in range(keys):
        key = head.string(f"key {i}'s name").decode("utf-8", "replace")
        value = head.value(head.number("I", f"the type of key {key!r}"), f"key {key!r}")
        if key == "general.alignment" and value is not None and len(value) == 4:
            alignment = struct.unpack(head.order + "I", value)[0]
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"general.alignment is {alignment}, not a power of two")
    infos = []
    for i in range(tensors):
        name = head.string(f"tensor {i}'s name").decode("utf-8", "replace")
        dims = head.number("I", f"the dimension count of tensor {name!r}")
        if dims > GGUF_MAX_DIMS:
            raise ValueError(f"tensor {name!r} has {dims} dimensions; GGUF tensors have at most {GGUF_MAX_DIMS}")
        shape = [head.number("Q", f"a dimension of tensor {name!r}") for _ in range(dims)]
        kind = head.number("I", f"the type of tensor {name!r}")
        infos.append((name, shape, kind, head.number("Q", f"the data offset of tensor {name!r}")))
    start = -(-head.at // alignment) * alignment
    for name, shape, kind, offset in infos:
        try:
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            raise ValueError(f"tensor {name!r} has type {kind}, which gguf does not know") from None
        need = math.prod(shape) // block * size
        if start + offset + need > len(data):
            raise ValueError(f"tensor {name!r} ({'x'.join(map(str, shape))}) needs {need} bytes at offset "
                             f"{start + offset}, past the end of the file ({len(data)} bytes)")


def gguf_reader(path):
    """gguf's reader of the GGUF file `path`, once its header is checked (check_gguf_header); a
    file that is not a regular one, or not GGUF, is a UsageError naming it."""
    gguf = _gguf()
    with inputs.open_file(path, "give a .gguf file") as fh:
        size = os.fstat(fh.fileno()).st_size
        data = np.memmap(fh, dtype=np.uint8, mode="r", shape=(size,)) if size else b""
    try:
        check_gguf_header(data)
        return gguf.GGUFReader(str(path))
    except (ValueError, IndexError, KeyError, OSError) as exc:
        raise UsageError(f"{path} is not a GGUF file gguf can read: {exc}") from None


# ---- which class holds each tensor ---------------------------------------------------------------

@dataclass(frozen=True)
class Holder:
    module: str  # its module path, e.g. model.layers.0.input_layernorm
    cls: str  # its class, e.g. Qwen3_5RMSNorm
    op: str = ""  # the family table's op@convention for that class ("" when it is not in the table)
    convention: str = ""
    offset: float | None = None  # the contract's weight offset: 1 multiplies by 1 + w, 0 by w; None unknown


# What a config.json may ask for. Its model is built on the meta device (no weights), but each module
# is Python objects of about 3 KiB (measured, transformers 5.2 on the meta device: a Qwen3 of 64
# layers has 720 modules more than one of 16, and takes 2.0 MB more), and a torch layer computes its
# size from the widths (a width of 2**40 overflows it): each count is bounded far above any released
# model (Llama 3.1 405B: 126 layers, a width
# of 16 384, 53 248 in its MLP; Gemma 3: 262 144 tokens; DeepSeek-V3: 256 experts).
CONFIG_LIMITS = {  # what: (its keys, the most)
    "layers": (("num_hidden_layers", "n_layer", "num_layers", "n_layers"), 1024),
    "width": (("hidden_size", "n_embd", "d_model", "intermediate_size", "n_inner", "ffn_dim",
               "moe_intermediate_size", "head_dim"), 2 ** 20),
    "vocabulary": (("vocab_size",), 2 ** 24),
    "heads": (("num_attention_heads", "num_key_value_heads", "n_head"), 2 ** 14),
    "experts": (("num_experts", "num_local_experts", "n_routed_experts"), 4096),
}
MODULE_BYTES = 4096  # a module's Python objects, rounded up from the 3 KiB measured
MODULES_PER_LAYER = 16  # a decoder layer: attention (q, k, v, o, norms, rotary), MLP, two norms
MAX_CONFIG_BYTES = 4 * 2 ** 30  # what building its modules may take


def check_config(path: Path) -> dict:
    """A checkpoint's config.json, read as a regular file of at most 16 MiB, parsed, and its counts
    checked against CONFIG_LIMITS and its modules' memory against MAX_CONFIG_BYTES before
    transformers builds anything; a UsageError names the file, the key and the number."""
    fix = "give the model's config.json, or remove it to find the norms by their names"
    text = inputs.read_text(path, "config", fix)  # not a file, too large, not UTF-8: a UsageError
    try:
        config = inputs.json_loads(text)
    except inputs.TooDeep as exc:
        raise UsageError(f"{path}: {exc}; {fix}") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc}); {fix}") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: a JSON {type(config).__name__}, not an object; {fix}")
    found = {}
    for where, part in [("", config)] + [(f"{k}.", v) for k, v in config.items() if isinstance(v, dict)]:
        for what, (keys, most) in CONFIG_LIMITS.items():
            for key in keys:
                value = part.get(key)
                if value is None:
                    continue
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
                    raise UsageError(f"{path}: {where}{key} is {value!r}; normdiff builds a model of at most "
                                     f"{most} {what} (a whole number): {fix}")
                found[what] = max(found.get(what, 0), value)
    modules = found.get("layers", 0) * (MODULES_PER_LAYER + 4 * found.get("experts", 0))
    if modules * MODULE_BYTES > MAX_CONFIG_BYTES:
        raise UsageError(f"{path}: its model has about {modules} modules ({found['layers']} layers of "
                         f"{found.get('experts', 0)} experts), which need about {byte_size(modules * MODULE_BYTES)} "
                         f"to build; the limit is {byte_size(MAX_CONFIG_BYTES)}: {fix}")
    return config


def holders(checkpoint: str | Path) -> tuple[dict[str, Holder], str]:
    """{tensor name: Holder} for the norm modules of the model that the checkpoint's config.json
    describes, and the model type; ({}, "") when there is no config.json beside it."""
    folder = Path(checkpoint) if Path(checkpoint).is_dir() else Path(checkpoint).parent
    if is_gguf(checkpoint) or not os.path.lexists(folder / "config.json"):
        return {}, ""
    check_config(folder / "config.json")
    with _compile_cache_not_in_tmp():
        import torch
        import transformers

        try:
            config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
            with torch.device("meta"):
                model = transformers.AutoModelForCausalLM.from_config(config)
        except Exception as exc:  # an unknown model type, a config this transformers cannot build
            raise UsageError(f"{folder / 'config.json'}: transformers {transformers.__version__} cannot build its "
                             f"model ({type(exc).__name__}: {exc}); without a config.json the norms are found by "
                             "name") from None
    classes = norm_classes()
    out = {}
    for path, module in model.named_modules():
        cls = type(module).__name__
        if cls in classes or ("norm" in cls.lower() and getattr(module, "weight", None) is not None):
            op, convention = classes.get(cls, ("", ""))
            out[f"{path}.weight"] = Holder(path, cls, op, convention, _offset(op, convention))
    return out, str(getattr(config, "model_type", ""))


@contextlib.contextmanager
def _compile_cache_not_in_tmp():
    """Importing torch._dynamo (transformers does) makes torch inductor's cache folder, by default
    TMPDIR/torchinductor_USER, and leaves it there, though nothing is compiled here. Unless the
    user chose it ($TORCHINDUCTOR_CACHE_DIR) or torch was imported already, it is normdiff's own
    compile cache while the block runs (the one the workers' torch.compile uses), else a
    temporary folder removed after it; $TORCHINDUCTOR_CACHE_DIR is then as it was."""
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ or "torch._dynamo" in sys.modules:
        yield
        return
    path = cache_dir(INDUCTOR_CACHE_ENV, "inductor")
    scratch = None if path else tempfile.mkdtemp(prefix="normdiff-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path or scratch
    try:
        yield
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)  # torch's import set it to the same folder
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def norm_classes() -> dict[str, tuple[str, str]]:
    """class name -> (op, convention), for the norm classes of the HF family table."""
    from normdiff.implementations.hf_families import FAMILIES, MODULE

    out = {}
    for family in FAMILIES.values():
        for op, part in family.ops().items():
            if part.how == MODULE:
                out.setdefault(part.name, (op, family.convention))
    return out


def _offset(op: str, convention: str) -> float | None:
    if not op:
        return None
    from normdiff.harness.data.conventions import get_contract

    return float(get_contract(op, convention).weight_offset)
