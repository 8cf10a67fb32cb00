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

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normdiff.harness.data.errors import UsageError

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
    if not path.is_file():
        raise UsageError(f"checkpoint not found: {path} (give a .safetensors or .gguf file, or a folder of "
                         ".safetensors files)")
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
    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError) as exc:
        raise UsageError(f"{path} is not a GGUF file gguf can read: {exc}") from None
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
    reader = gguf.GGUFReader(str(checkpoint))

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


# ---- which class holds each tensor ---------------------------------------------------------------

@dataclass(frozen=True)
class Holder:
    module: str  # its module path, e.g. model.layers.0.input_layernorm
    cls: str  # its class, e.g. Qwen3_5RMSNorm
    op: str = ""  # the family table's op@convention for that class ("" when it is not in the table)
    convention: str = ""
    offset: float | None = None  # the contract's weight offset: 1 multiplies by 1 + w, 0 by w; None unknown


def holders(checkpoint: str | Path) -> tuple[dict[str, Holder], str]:
    """{tensor name: Holder} for the norm modules of the model that the checkpoint's config.json
    describes, and the model type; ({}, "") when there is no config.json beside it."""
    folder = Path(checkpoint) if Path(checkpoint).is_dir() else Path(checkpoint).parent
    if is_gguf(checkpoint) or not (folder / "config.json").is_file():
        return {}, ""
    import torch
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # an unknown model type, a config this transformers cannot build
        raise UsageError(f"{folder / 'config.json'}: transformers {transformers.__version__} cannot build its model "
                         f"({type(exc).__name__}: {exc}); without a config.json the norms are found by name") from None
    classes = norm_classes()
    out = {}
    for path, module in model.named_modules():
        cls = type(module).__name__
        if cls in classes or ("norm" in cls.lower() and getattr(module, "weight", None) is not None):
            op, convention = classes.get(cls, ("", ""))
            out[f"{path}.weight"] = Holder(path, cls, op, convention, _offset(op, convention))
    return out, str(getattr(config, "model_type", ""))


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
