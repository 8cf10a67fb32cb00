"""The whole-model table (pure data): every family's kinds map to one op and convention each, the
conventions exist, and a module path finds its longest matching rule."""
import pytest

from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.errors import UsageError
from normdiff.implementations.hf_model_families import FAMILIES, KINDS, get_family


@pytest.mark.parametrize("name", list(FAMILIES))
def test_each_kind_is_one_op_and_convention(name):
    fam = FAMILIES[name]
    assert set(fam.kinds()) <= set(KINDS)
    assert not fam.shadowed(fam.plain_kinds())
    assert "norm" in fam.kinds()
    for kind in fam.kinds():
        pairs = fam.ops(kind)
        if kind in ("quant", "add_quant"):  # one op at the conventions whose norm part is the family's
            assert len({op for op, _ in pairs}) == 1 and pairs[0][1] == "vllm-fp8"
        else:
            assert len(pairs) == 1
        for op, convention in pairs:
            get_contract(op, convention)  # raises for an undefined pair
    ((op, convention),) = fam.ops("norm")
    assert fam.norm_eps() == get_contract(op, convention).eps


def test_a_quantizing_convention_stands_where_its_norm_is_the_familys():
    quant = {name: [c for _, c in fam.ops("quant")] for name, fam in FAMILIES.items() if "quant" in fam.kinds()}
    assert set(quant) == {"qwen3", "vllm-qwen3", "llama"}  # gemma3, qwen3.5: (1 + w); olmo2: post-norms
    for conventions in quant.values():
        # y rounded to bf16 as the Llama cast rounds it (vLLM's kernels), or kept in float32 (any cast)
        assert {"vllm-fp8", "vllm-int8", "vllm-fp8-group", "sglang-fp8", "mxfp8", "ocp-mxfp8", "aiter-fp8"} <= set(
            conventions)
        # act_quant rounds the one-rounding norm of DeepSeek's own code to bf16: HF's Llama cast is not it
        assert "deepseek-v3-fp8" not in conventions and "deepseek-v3.1-ue8m0" not in conventions
    assert [c for _, c in FAMILIES["qwen3"].ops("add_quant")] == ["vllm-fp8", "vllm-int8", "aiter-fp8", "sglang-fp8"]


def test_quantizing_sites_take_the_pre_linear_norms_only_when_swapped():
    qwen3 = FAMILIES["qwen3"]
    post = "model.layers.1.post_attention_layernorm"
    assert qwen3.rule_for(post).kind == "norm"
    assert qwen3.rule_for(post, ("quant",)).op == "rms_norm_quant"
    assert qwen3.rule_for(post, ("quant",)).own_pair == ("rms_norm", "qwen3")  # what the model's own class is judged at
    assert qwen3.rule_for(post, ("quant", "add_quant", "add")).kind == "add_quant"
    assert qwen3.rule_for("model.norm", ("quant", "add_quant")).kind == "norm"  # lm_head is not quantized
    assert qwen3.rule_for("model.layers.0.self_attn.q_norm", ("quant",)).kind == "qk"
    # layer 0's input_layernorm has no add before it: a quant site when --quant is given, else a norm site
    assert qwen3.first_rule("model.layers.0.input_layernorm", ("add_quant", "quant")).kind == "quant"
    assert qwen3.first_rule("model.layers.0.input_layernorm", ("add_quant",)).kind == "norm"
    assert qwen3.shadowed(("quant", "add_quant")) == {}
    # --add's running sum passes every norm after a branch: quant alone would take them unfused
    assert qwen3.unfused(("add", "quant")) == "quant" and qwen3.unfused(("add", "add_quant", "quant")) is None
    assert qwen3.shadowed(("norm", "quant", "add")) == {"norm": ("quant", "add")}  # the final norm is --add's


def test_the_issue_families_are_there():
    assert {"qwen3", "qwen3.5", "olmo2", "gemma3", "llama"} <= set(FAMILIES)
    assert set(FAMILIES["qwen3.5"].kinds()) == {"norm", "qk", "gated", "l2"}


def test_the_longest_suffix_wins():
    qwen35, mamba2 = FAMILIES["qwen3.5"], FAMILIES["mamba2"]
    assert qwen35.rule_for("model.layers.0.linear_attn.norm").kind == "gated"
    assert qwen35.rule_for("model.norm").kind == "norm"
    assert qwen35.rule_for("model.layers.3.self_attn.q_norm").kind == "qk"
    assert qwen35.rule_for("model.layers.0.mlp") is None
    assert mamba2.rule_for("backbone.layers.2.mixer.norm").op == "group_gated_rms_norm"
    assert mamba2.rule_for("backbone.layers.2.norm").op == "rms_norm"


def test_llama_runs_at_its_convention_eps_not_the_config_default():
    assert FAMILIES["llama"].norm_eps() == 1e-5  # LlamaConfig's default is 1e-6


def test_an_unknown_family_lists_the_known_ones():
    with pytest.raises(UsageError, match="qwen3.5"):
        get_family("qwen4")


def test_a_fused_kind_takes_its_modules_only_when_swapped():
    qwen3 = FAMILIES["qwen3"]
    assert qwen3.rule_for("model.layers.0.post_attention_layernorm").kind == "norm"
    assert qwen3.rule_for("model.layers.0.post_attention_layernorm", ("add",)).kind == "add"
    # input_layernorm is fused too; install() keeps the first one (layer 0's) a plain norm site
    assert qwen3.rule_for("model.layers.1.input_layernorm", ("add",)).first_plain
    assert qwen3.rule_for("model.layers.0.self_attn.q_norm", ("rope",)).op == "qk_norm_rope"
    assert qwen3.shadowed(("qk", "rope")) == {"qk": ("rope",)}
    assert qwen3.shadowed(("norm", "add")) == {}  # layer 0's input_layernorm stays a norm site
