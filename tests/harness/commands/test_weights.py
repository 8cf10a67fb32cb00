"""`normdiff weights`: checkpoints built here from small HF models (random init, trained-like norm
weights, saved as safetensors; nothing downloaded) and converted variants of them. A plain Qwen3
checkpoint and a zero-centred Qwen3.5 one are recognised by their classes; against the original,
a double fold, a missing fold and a fold on the gated norm are each named (exit 1), a consistent
fold is not (exit 0); a bare safetensors file is read by tensor names; bad paths exit 2."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from normdiff.harness.commands import checkpoint, cli, weights

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

QWEN35_ZERO_CENTRED = ("input_layernorm", "post_attention_layernorm", "q_norm", "k_norm", "model.norm.")


def _trained_like(model, plain_names=()):
    """Norm weights with the statistics of trained ones (the seed's Qwen3.5 figures): zero-centred
    around +0.24, the final norm around +3.3, plain gains around 1."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                continue
            if any(n in name for n in plain_names):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name == "model.norm.weight":
                p.copy_(3.3 + 1.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.238 + 0.2 * torch.randn(p.shape, generator=g))
    return model


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

    config = Qwen3_5TextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=16, vocab_size=128,
                               layer_types=["linear_attention", "full_attention"], linear_num_value_heads=4,
                               linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)
    torch.manual_seed(0)
    model = _trained_like(m.Qwen3_5ForCausalLM(config), plain_names=("linear_attn.norm",)).to(torch.bfloat16)
    folder = tmp_path_factory.mktemp("qwen35")
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, vocab_size=128)
    torch.manual_seed(0)
    model = _trained_like(Qwen3ForCausalLM(config), plain_names=("norm",))
    folder = tmp_path_factory.mktemp("qwen3")
    model.save_pretrained(folder)
    return folder


def converted(src: Path, dst: Path, change) -> Path:
    """A copy of the checkpoint at `src` whose tensors are change(name, tensor)."""
    shutil.copytree(src, dst)
    tensors = load_file(str(src / "model.safetensors"))
    save_file({k: change(k, t) for k, t in tensors.items()}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def zero_centred(name: str) -> bool:
    return "norm" in name and "linear_attn.norm" not in name


def fold(name, t):  # what a converter for a runtime that multiplies by w does to Qwen3.5
    return t + 1 if zero_centred(name) else t


def run(capsys, *args):
    code = cli.main(["weights", *map(str, args), "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out
    return code, json.loads(out[0])


def test_a_zero_centred_qwen35_checkpoint_is_recognised_by_its_classes(capsys, qwen35):
    code, got = run(capsys, qwen35)
    by_name = {w["name"]: w for w in got["weights"]}
    assert code == 0 and got["model_type"].startswith("qwen3_5")
    gated = by_name["model.layers.0.linear_attn.norm.weight"]
    assert gated["cls"] == "Qwen3_5RMSNormGated" and gated["expects"] == weights.PLAIN == gated["looks"]
    layer0 = by_name["model.layers.0.input_layernorm.weight"]
    assert layer0["cls"] == "Qwen3_5RMSNorm" and layer0["expects"] == weights.ZERO_CENTRED == layer0["looks"]
    assert layer0["dtype"] == "BF16" and -0.6 < layer0["min"] < 0 < layer0["mean"] < 0.5
    # bf16 holds the stored w, but not most gains 1 + w (the seed's 1 + 0.001 -> 1.0)
    assert layer0["bf16_gains_changed"] > 32 and 0 < layer0["bf16_gain_max_rel"] < 2.0 ** -8
    assert {n for n, w in by_name.items() if w["expects"] == weights.ZERO_CENTRED} == \
        {n for n in by_name if zero_centred(n)}
    assert by_name["model.layers.1.self_attn.q_norm.weight"]["shape"] == [16]


def test_a_plain_qwen3_checkpoint_is_recognised(capsys, qwen3):
    code, got = run(capsys, qwen3)
    assert code == 0 and got["model_type"] == "qwen3" and len(got["weights"]) == 2 * 4 + 1
    assert all(w["expects"] == weights.PLAIN == w["looks"] and w["cls"] == "Qwen3RMSNorm" for w in got["weights"])
    assert all(w["bf16_gains_changed"] is None for w in got["weights"])


def test_a_consistent_fold_is_not_an_error(capsys, qwen35, tmp_path):
    code, got = run(capsys, converted(qwen35, tmp_path / "folded", fold), "--against", qwen35)
    changes = {w["name"]: w["change"] for w in got["weights"]}
    assert code == 0 and got["wrong"] == 0
    assert changes == {n: "+1" if zero_centred(n) else "same" for n in changes}
    assert "the conversion folds the +1 of zero-centred norms" in got["notes"]


@pytest.mark.parametrize("change, name, verdict", [
    (lambda n, t: t + 2 if n == "model.norm.weight" else fold(n, t), "model.norm.weight", "double-folded"),
    (lambda n, t: t if n == "model.layers.1.input_layernorm.weight" else fold(n, t),
     "model.layers.1.input_layernorm.weight", "fold missing"),
    (lambda n, t: t + 1 if "norm" in n else t, "model.layers.0.linear_attn.norm.weight", "fold where none belongs"),
])
def test_a_wrong_fold_is_named_by_tensor(capsys, qwen35, tmp_path, change, name, verdict):
    code, got = run(capsys, converted(qwen35, tmp_path / "bad", change), "--against", qwen35)
    wrong = {w["name"]: w["verdict"] for w in got["weights"] if w["verdict"] in weights.WRONG}
    assert code == 1 and wrong == {name: verdict}, wrong
    text_code = cli.main(["weights", str(tmp_path / "bad"), "--against", str(qwen35)])
    text = capsys.readouterr().out
    assert text_code == 1 and f"->  {verdict.upper()}" in text and "1 norm tensor converted wrong" in text


def test_a_dropped_norm_tensor_is_missing_and_a_changed_dtype_is_noted(capsys, qwen35, tmp_path):
    dst = tmp_path / "dropped"
    shutil.copytree(qwen35, dst)
    tensors = load_file(str(qwen35 / "model.safetensors"))
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    tensors = {k: fold(k, t).float() if k == "model.norm.weight" else fold(k, t) for k, t in tensors.items()}
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    code, got = run(capsys, dst, "--against", qwen35)
    wrong = {w["name"]: w["verdict"] for w in got["weights"] if w["verdict"] in weights.WRONG}
    assert code == 1 and wrong == {"model.layers.1.self_attn.k_norm.weight": "missing"}
    assert "model.norm.weight: dtype BF16 -> F32" in got["notes"]


def test_a_bare_safetensors_file_is_read_by_tensor_names(capsys, qwen35, tmp_path):
    bare = tmp_path / "bare.safetensors"
    shutil.copy(qwen35 / "model.safetensors", bare)
    code, got = run(capsys, bare)
    names = {w["name"] for w in got["weights"]}
    assert code == 0 and names == {n for n in load_file(str(bare)) if n.endswith("norm.weight")}
    assert all(w["expects"] == "" for w in got["weights"]) and "found by name" in got["notes"][0]
    # its statistics alone: the zero-centred layers look zero-centred, the gated norm plain
    looks = {w["name"]: w["looks"] for w in got["weights"]}
    assert looks["model.layers.0.input_layernorm.weight"] == weights.ZERO_CENTRED
    assert looks["model.layers.0.linear_attn.norm.weight"] == weights.PLAIN


def test_the_reader_matches_safetensors_bit_for_bit(qwen35):
    ours = checkpoint.read(qwen35, lambda name, shape: True)
    theirs = load_file(str(qwen35 / "model.safetensors"))
    assert set(ours) == set(theirs)
    for name, t in theirs.items():
        np.testing.assert_array_equal(ours[name].values, t.to(torch.float64).numpy())


@pytest.mark.parametrize("args, says", [
    (["nosuch"], "checkpoint not found"),
    (["{tmp}/empty"], "holds no .safetensors file"),
    (["{tmp}/x.bin"], "is not a .safetensors or .gguf file"),
    (["{tmp}/junk.safetensors"], "is not a safetensors file"),
])
def test_bad_paths_exit_2(capsys, tmp_path, args, says):
    (tmp_path / "x.bin").write_bytes(b"0")
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    assert cli.main(["weights", *[a.format(tmp=tmp_path) for a in args]]) == 2
    assert says in capsys.readouterr().err


def gguf_of(original: Path, path: Path, change) -> Path:
    """A GGUF file as llama.cpp's converter writes one from `original` (qwen35, F32 norms, its
    tensor names), each norm tensor change(hf_name, values)."""
    gguf = pytest.importorskip("gguf")
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == "qwen35")
    names = gguf.get_tensor_name_map(arch, 2)
    writer = gguf.GGUFWriter(str(path), "qwen35")
    writer.add_block_count(2)
    for name, t in sorted(load_file(str(original / "model.safetensors")).items()):
        if "norm" in name:
            writer.add_tensor(names.get_name(name[:-len(".weight")]) + ".weight",
                              change(name, t.to(torch.float32)).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_conversion_is_matched_by_llama_cpp_names_and_its_double_fold_named(capsys, qwen35, tmp_path):
    good = gguf_of(qwen35, tmp_path / "good.gguf", fold)
    code, got = run(capsys, good, "--against", qwen35)
    by_name = {w["name"]: w for w in got["weights"]}
    assert code == 0 and got["model_type"] == "gguf" and got["wrong"] == 0
    assert by_name["output_norm.weight"]["original_name"] == "model.norm.weight"
    assert by_name["output_norm.weight"]["change"] == "+1" and by_name["blk.0.ssm_norm.weight"]["change"] == "same"
    # llama.cpp multiplies by the stored w: a folded GGUF looks as its runtime expects
    assert all(w["expects"] == weights.PLAIN for w in got["weights"])
    assert "model.norm.weight: dtype" not in " ".join(got["notes"])  # BF16 -> F32 is noted under the GGUF name
    bad = gguf_of(qwen35, tmp_path / "bad.gguf", lambda n, t: t + 2 if n == "model.norm.weight" else fold(n, t))
    code, got = run(capsys, bad, "--against", qwen35)
    assert code == 1 and {w["name"]: w["verdict"] for w in got["weights"] if w["verdict"] in weights.WRONG} == \
        {"output_norm.weight": "double-folded"}
