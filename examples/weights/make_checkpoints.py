"""Build the two checkpoints docs/weights.md reads, from a small Qwen3.5 made in code (nothing is
downloaded):

    python examples/weights/make_checkpoints.py orig double

ORIG: the model in bf16, its norm weights trained-like (zero-centred around +0.24, the final norm
around +3.3, the gated norm's plain gains around 1; the figures of the seed course's Qwen3.5), with
its config.json. DOUBLE: a conversion of it that folded the +1 of every zero-centred norm into the
stored weight, but added 2 to the final one, as GGUF conversions have shipped; it keeps ORIG's
config.json. tests/harness/commands/test_weights.py builds the same model.
"""
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers.models.qwen3_5 import modeling_qwen3_5
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig


def zero_centred(name: str) -> bool:
    """Qwen3.5 multiplies by 1 + w in every norm but its gated one (linear_attn.norm)."""
    return "norm" in name and "linear_attn.norm" not in name


def original(folder: Path) -> None:
    config = Qwen3_5TextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=16, vocab_size=128,
                               layer_types=["linear_attention", "full_attention"], linear_num_value_heads=4,
                               linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)
    torch.manual_seed(0)
    model = modeling_qwen3_5.Qwen3_5ForCausalLM(config)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                continue
            if not zero_centred(name):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name == "model.norm.weight":
                p.copy_(3.3 + 1.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.238 + 0.2 * torch.randn(p.shape, generator=g))
    model.to(torch.bfloat16).save_pretrained(folder)


def double_folded(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst)
    tensors = load_file(str(src / "model.safetensors"))
    for name, t in tensors.items():
        if zero_centred(name):
            tensors[name] = t + (2 if name == "model.norm.weight" else 1)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    orig, double = map(Path, sys.argv[1:3])
    original(orig)
    double_folded(orig, double)
