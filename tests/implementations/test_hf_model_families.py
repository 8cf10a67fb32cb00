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
    assert not fam.shadowed([k for k in fam.kinds() if k not in ("add", "rope")])
    assert "norm" in fam.kinds()
    for kind in fam.kinds():
        ((op, convention),) = fam.ops(kind)
        get_contract(op, convention)  # raises for an undefined pair
    ((op, convention),) = fam.ops("norm")
    assert fam.norm_eps() == get_contract(op, convention).eps


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
    assert qwen3.shadowed(("qk", "rope")) == {"qk": "rope"}
    assert qwen3.shadowed(("norm", "add")) == {}  # layer 0's input_layernorm stays a norm site
