"""Reading a checkpoint's norm weights: safetensors files parsed here (the header, then only the norm
tensors' bytes), and which HF class each tensor belongs to.

safetensors is an 8-byte little-endian header length, a JSON header {name: {dtype, shape,
data_offsets}}, then the raw bytes; bf16 is read through ml_dtypes, so neither torch nor the
safetensors package is needed to read one. Which class holds a tensor comes from the checkpoint's
config.json: transformers builds the model on the meta device (no memory, no weights, nothing
downloaded), and each norm module's class is looked up in the HF family table
(implementations/hf_families.py), whose contract says whether the class multiplies by w or by 1 + w.
"""
from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normdiff.harness.data.errors import UsageError

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": "bfloat16"}
# a tensor is a norm's when its module's last name says so (no config.json to ask): input_layernorm,
# q_norm, norm, ln_f, ln_1, layer_norm, ...
NORM_NAME = re.compile(r"(^|\.)([a-z0-9_]*norm[a-z0-9_]*|ln(_[a-z0-9]+)?)\.weight$")


@dataclass
class Tensor:
    name: str
    dtype: str  # the file's name for it: BF16, F16, F32, F64
    shape: tuple[int, ...]
    values: np.ndarray  # float64


def files(checkpoint: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint: a file, or every *.safetensors in a folder."""
    path = Path(checkpoint)
    if path.is_dir():
        found = sorted(path.glob("*.safetensors"))
        if not found:
            raise UsageError(f"{path} holds no .safetensors file (normdiff weights reads safetensors checkpoints)")
        return found
    if not path.is_file():
        raise UsageError(f"checkpoint not found: {path} (give a .safetensors file or a folder of them)")
    if path.suffix != ".safetensors":
        raise UsageError(f"{path} is not a .safetensors file (GGUF and pickled checkpoints are not read)")
    return [path]


def _header(path: Path) -> tuple[dict, int]:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise UsageError(f"{path} is not a safetensors file: shorter than its header length")
        (length,) = struct.unpack("<Q", raw)
        if length > 100_000_000:
            raise UsageError(f"{path} is not a safetensors file: a header of {length} bytes")
        try:
            header = json.loads(f.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"{path} is not a safetensors file: its header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise UsageError(f"{path} is not a safetensors file: its header is not a table of tensors")
    header.pop("__metadata__", None)
    return header, 8 + length


def read(checkpoint: str | Path, wanted=None) -> dict[str, Tensor]:
    """The tensors `wanted(name, shape)` picks (default: 1-D tensors whose name is a norm's), as
    float64 values with their stored dtype."""
    import ml_dtypes

    wanted = wanted or (lambda name, shape: len(shape) == 1 and NORM_NAME.search(name) is not None)
    out = {}
    for path in files(checkpoint):
        header, start = _header(path)
        data = np.memmap(path, dtype=np.uint8, mode="r")
        for name, info in header.items():
            shape = tuple(info.get("shape", ()))
            if info.get("dtype") not in DTYPES or not wanted(name, shape):
                continue
            dtype = DTYPES[info["dtype"]]
            dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
            lo, hi = info["data_offsets"]
            raw = np.asarray(data[start + lo:start + hi])
            if raw.size != dtype.itemsize * int(np.prod(shape)):
                raise UsageError(f"{path}: tensor {name!r} has {raw.size} bytes for shape {shape} of {info['dtype']}")
            out[name] = Tensor(name, info["dtype"], shape, raw.view(dtype).astype(np.float64).reshape(shape))
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
    if not (folder / "config.json").is_file():
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
