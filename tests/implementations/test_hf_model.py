"""The model runner inside the torch worker (run in-process here): every site is found and called
in model order, the weights are trained-like, the layouts map onto the op's rows and back, and a
failing swap or a function site leaves the modeling module as it was."""
import numpy as np
import pytest

pytest.importorskip("transformers")
import torch  # noqa: E402

from normdiff.implementations import hf_model  # noqa: E402
from normdiff.implementations.hf_model_families import FAMILIES, HEADS_FIRST, SiteRule  # noqa: E402
from normdiff.implementations.registry import get  # noqa: E402

# per family: the sites a 4-layer model has (its layers' sites, then the final norm)
SITES = {"qwen3": 4 * 4 + 1, "vllm-qwen3": 4 * 4 + 1, "qwen3.5": 3 * 5 + 4 + 1, "olmo2": 4 * 4 + 1, "gemma3": 4 * 6 + 1, "llama": 4 * 2 + 1,
         "gpt-neox": 4 * 2 + 1, "mamba2": 4 * 2 + 1, "deepseek-v3": 4 * 4 + 1, "cohere": 4 * 1 + 1, "olmo": 4 * 2 + 1}


@pytest.fixture(scope="module")
def runs():
    return {name: hf_model.run(name, "bfloat16", 0, 16) for name in FAMILIES}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_site_is_found_and_called_once(runs, name):
    sites = runs[name]["sites"]
    assert len(sites) == SITES[name], [s["path"] for s in sites]
    assert all(len(s["reference"]) == 1 for s in sites)
    kinds = {s["kind"] for s in sites}
    assert kinds == set(FAMILIES[name].plain_kinds())  # fused and quantizing sites only when they are swapped
    # no swap: the swapped run is the reference run, bit for bit
    assert runs[name]["swapped"]["logits"].tobytes() == runs[name]["reference"]["logits"].tobytes()


def test_sites_come_in_the_order_the_model_calls_them(runs):
    paths = [s["path"] for s in runs["qwen3.5"]["sites"]]
    assert paths[:5] == ["model.layers.0.input_layernorm", "model.layers.0.linear_attn.l2norm[0]",
                         "model.layers.0.linear_attn.l2norm[1]", "model.layers.0.linear_attn.norm",
                         "model.layers.0.post_attention_layernorm"]
    assert paths[-1] == "model.norm"
    assert [s["path"] for s in runs["qwen3"]["sites"]][:3] == [
        "model.layers.0.input_layernorm", "model.layers.0.self_attn.q_norm", "model.layers.0.self_attn.k_norm"]


def test_operands_are_laid_out_as_the_op_takes_them(runs):
    by = {s["path"]: s["reference"][0] for s in runs["gemma3"]["sites"]}
    q = by["model.layers.0.self_attn.q_norm"]  # Gemma3 feeds q_norm (batch, heads, tokens, head_dim)
    assert q["arrays"]["x"].shape == (16, 4 * 64) and q["num_heads"] == 4 and q["arrays"]["weight"].shape == (64,)
    olmo = {s["path"]: s["reference"][0] for s in runs["olmo2"]["sites"]}["model.layers.0.self_attn.k_norm"]
    assert olmo["arrays"]["weight"].shape == (2 * 64,) and olmo["num_heads"] == 2  # the whole K projection
    gated = {s["path"]: s["reference"][0] for s in runs["mamba2"]["sites"]}["backbone.layers.0.mixer.norm"]
    assert set(gated["arrays"]) == {"x", "gate", "weight"} and gated["num_heads"] == 2  # n_groups
    l2 = {s["path"]: s["reference"][0] for s in runs["qwen3.5"]["sites"]}["model.layers.0.linear_attn.l2norm[0]"]
    assert l2["arrays"]["x"].dtype == np.float32  # the delta rule upcasts q and k before l2norm
    assert l2["eps"] == 1e-6


def test_a_class_without_weight_or_bias_gets_the_identity(runs):
    olmo = runs["olmo"]["sites"][0]["reference"][0]  # OlmoLayerNorm: neither, eps 1e-5 written in
    assert (olmo["arrays"]["weight"] == 1).all() and (olmo["arrays"]["bias"] == 0).all() and olmo["eps"] == 1e-5
    cohere = runs["cohere"]["sites"][0]["reference"][0]  # CohereLayerNorm: a weight, no bias
    assert (cohere["arrays"]["bias"] == 0).all() and not (cohere["arrays"]["weight"] == 1).all()


def test_a_heads_first_layout_round_trips():
    site = hf_model.Site("q", SiteRule("q_norm", "qk", "qk_norm", "gemma3", HEADS_FIRST), None, 3)
    t = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).reshape(2, 3, 5, 4)
    rows = site.to_rows(t)
    assert rows.shape == (10, 12)
    assert torch.equal(rows[0, 4:8], t[0, 1, 0])  # row = (batch, token), then head by head
    assert torch.equal(site.from_rows(rows, tuple(t.shape)), t)


def test_weights_are_trained_like_and_stored_by_the_convention():
    qwen3 = hf_model.build(FAMILIES["qwen3"], "float32", 0)
    qwen35 = hf_model.build(FAMILIES["qwen3.5"], "float32", 0)
    plain = qwen3.model.layers[0].input_layernorm.weight.detach().numpy()
    centred = qwen35.model.layers[0].input_layernorm.weight.detach().numpy()
    assert -0.11 <= plain.min() - 1 and plain.max() - 1 <= 1.0 and abs(plain.mean() - 1.238) < 0.05  # w = 1 + d
    assert -0.11 <= centred.min() and centred.max() <= 1.0 and abs(centred.mean() - 0.238) < 0.05  # w - 1 = d
    final = qwen35.model.norm.weight.detach().numpy()
    assert -0.78 <= final.min() and final.max() <= 5.31 and abs(final.mean() - 3.309) < 0.3


def test_embedding_rows_span_decades_so_that_eps_matters_somewhere():
    model = hf_model.build(FAMILIES["qwen3"], "float32", 0)
    rms = model.model.embed_tokens.weight.detach().pow(2).mean(-1).sqrt().numpy()
    assert rms.max() / rms.min() > 100
    assert (rms ** 2 < 1e-5).any()  # rows whose mean square is near eps


def _raising(op, contract, inputs):
    raise RuntimeError("no kernel")


def test_a_failing_swap_stops_the_model_there_and_restores_the_functions(monkeypatch):
    import transformers.models.qwen3_5.modeling_qwen3_5 as modeling

    original = modeling.l2norm
    monkeypatch.setattr(hf_model, "make_adapter", lambda impl: _raising)
    result = hf_model.run("qwen3.5", "bfloat16", 0, 8, {"l2": get("numpy")})
    assert result["failed"] == {"path": "model.layers.0.linear_attn.l2norm[0]", "why": "raised RuntimeError: no kernel"}
    assert result["swapped"] is None
    assert modeling.l2norm is original


def test_buffers_made_in_float32_stay_float32_in_a_bf16_model():
    # as from_pretrained(dtype=bfloat16) builds it; a model.to(bfloat16) would round RoPE's frequencies
    model = hf_model.build(FAMILIES["qwen3"], "bfloat16", 0)
    assert model.model.layers[0].input_layernorm.weight.dtype == torch.bfloat16
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    assert float(model.model.rotary_emb.inv_freq[1]) == pytest.approx(1e6 ** (-2 / 64), rel=1e-6)  # Qwen3's base


def test_a_fused_site_takes_the_branch_output_and_the_running_sum():
    result = hf_model.run("qwen3", "bfloat16", 0, 8, {"add": get("numpy")})
    add = [s for s in result["sites"] if s["kind"] == "add"]
    # as vLLM's decoder runs: every norm after a branch, all but layer 0's input_layernorm
    assert [s["path"] for s in add] == ["model.layers.0.post_attention_layernorm"] + [
        f"model.layers.{i}.{name}" for i in range(1, 4) for name in ("input_layernorm", "post_attention_layernorm")
    ] + ["model.norm"]
    assert [s["kind"] for s in result["sites"]][0] == "norm"
    call = add[0]["reference"][0]
    h = call["y"]["residual_out"]
    x, residual = call["arrays"]["x"].astype(np.float32), call["arrays"]["residual"].astype(np.float32)
    assert np.array_equal((x + residual).astype(h.dtype), h)  # the model's own sum, rounded as it rounds it
    later = add[1]["reference"][0]  # layer 1's input_layernorm: layer 0's MLP output onto its post-attention sum
    assert np.array_equal(later["arrays"]["residual"], h)
    assert result["swapped"]["logits"].tobytes() == result["reference"]["logits"].tobytes()


def test_a_wrong_residual_out_travels_on():
    result = hf_model.run("qwen3", "bfloat16", 0, 8, {"add": get("add-residual-truncated")})
    assert result["failed"] is None
    assert result["swapped"]["logits"].tobytes() != result["reference"]["logits"].tobytes()


def test_rotary_sites_give_the_models_own_rope_back_and_restore_the_function():
    import transformers.models.qwen3.modeling_qwen3 as modeling

    original = modeling.apply_rotary_pos_emb
    result = hf_model.run("qwen3", "bfloat16", 0, 8, {"rope": get("hf-qwen3")})
    rope = [s for s in result["sites"] if s["kind"] == "rope"]
    assert len(rope) == 8 and rope[0]["path"] == "model.layers.0.self_attn.q_norm"
    assert rope[0]["reference"][0]["arrays"]["positions"].tolist() == list(range(8))
    assert result["swapped"]["logits"].tobytes() == result["reference"]["logits"].tobytes()
    assert modeling.apply_rotary_pos_emb is original
