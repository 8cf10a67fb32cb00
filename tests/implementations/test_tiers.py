"""Implementation tiers: the runtimes whose import or compilation would more than double the default
run (keras, tinygrad, torch.compile, an HF export through onnxruntime, Triton kernels interpreted) join a run only when asked
(`normdiff run --full`, api.select(full=True), or by name)."""
import pytest

from normdiff.harness import api
from normdiff.harness.data.errors import UsageError
from normdiff.implementations import registry
from normdiff.implementations.entry import Implementation

FULL = {"keras-ops.rms_normalization", "keras-layers.RMSNormalization", "keras-layers.LayerNormalization",
        "tinygrad-nn.RMSNorm", "tinygrad-nn.LayerNorm", "compile-torch-rmsnorm", "compile-hf-qwen3",
        "compile-torch-layernorm", "onnx-export-hf-qwen3", "liger-rms_norm-llama", "liger-rms_norm-gemma",
        "liger-layer_norm", "fla-rms_norm", "fla-layer_norm", "fla-rms_norm_gated", "fla-l2norm", "fla-rmsnorm_fn-mamba2"}


def test_the_default_selection_leaves_the_full_tier_out():
    default = {i.name for i in api.select()}
    everything = {i.name for i in api.select(full=True)}
    assert everything == {i.name for i in registry.implementations()}
    assert everything - default == FULL
    assert {"mlx-fast.rms_norm", "onnx-LayerNormalization", "numpy", "hf-qwen3"} <= default


def test_a_full_tier_runtime_runs_when_named():
    assert [i.name for i in api.select(["tinygrad-nn.RMSNorm"])] == ["tinygrad-nn.RMSNorm"]


def test_a_tier_is_one_of_the_known_ones():
    with pytest.raises(UsageError, match="tier 'sometimes'"):
        Implementation("x", "user", "numpy", "m:f", frozenset(), tier="sometimes")
