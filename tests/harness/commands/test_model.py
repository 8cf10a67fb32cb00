"""`normdiff model` as a user runs it: their class in every site, the first site out of budget
named, exit 0/1; usage errors exit 2 before any model is built; and the teaching table (every
forward mutant that has a site in some family is named at its first site in some dtype)."""
import json

import pytest

from normdiff.harness.commands import cli
from normdiff.harness.commands.model import mutants

pytest.importorskip("transformers")


def _model(capsys, *args):
    code = cli.main(["model", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def swaps(fixtures_dir):
    """A target in the fixtures: a torch class from torch_module.py, a NumPy function from model_swaps.py."""
    return lambda name: f"{fixtures_dir / 'user' / ('torch_module.py' if name[0].isupper() else 'model_swaps.py')}:{name}"


def test_a_correct_port_agrees_in_every_site(capsys, swaps):
    # Qwen3RMSNorm as a port writes it
    code, out, _ = _model(capsys, "--family", "qwen3", "--norm", swaps("MyRMSNorm"), "--tokens", "64")
    assert code == 0, out
    assert "AGREES: 9 of 9 swapped sites within budget" in out
    assert "logits: bit-identical" in out  # the same float32 statistics and cast as Qwen3RMSNorm


def test_a_buggy_port_is_named_at_its_first_site(capsys, swaps):
    code, out, _ = _model(capsys, "--family", "llama", "--norm", swaps("EpsOutsideRMSNorm"), "--json")
    assert code == 1
    result = json.loads(out)
    assert result["verdict"] == "disagrees" and result["first_diverging"] == "model.layers.0.input_layernorm"
    assert result["logits"]["top1_agreement"] < 1
    assert len(out.strip().splitlines()) == 1


def test_a_numpy_port_runs_in_a_torch_model(capsys, swaps):
    code, out, _ = _model(capsys, "--family", "gemma3", "--qk", "numpy", "--norm", swaps("numpy_rms_norm"),
                          "--tokens", "32", "--json")
    result = json.loads(out)
    # the port computes w * x_hat, and Gemma3's convention is (1 + w) * x_hat: named at the first norm
    assert code == 1 and result["first_diverging"] == "model.layers.0.input_layernorm"
    assert all(s["outcome"] in ("identical", "agree") for s in result["sites"] if s["kind"] == "qk")


def test_a_port_that_raises_stops_the_model_at_its_site(capsys, swaps):
    code, out, _ = _model(capsys, "--family", "qwen3", "--qk", swaps("RaisingRMSNorm"))
    assert code == 1
    assert "model.layers.0.self_attn.q_norm: the swapped implementation raised RuntimeError: kernel not built" in out
    assert "first site out of budget: model.layers.0.self_attn.q_norm (qk: it failed, no output)" in out
    assert "Traceback" not in out


def test_a_wrong_shape_is_named(capsys, swaps):
    code, out, _ = _model(capsys, "--family", "qwen3", "--norm", swaps("halves_the_row"), "--json")
    result = json.loads(out)
    assert code == 1 and result["failed"]["path"] == "model.layers.0.input_layernorm"
    assert "returned (128, 128); the site needs (128, 256)" in result["failed"]["why"]


@pytest.mark.parametrize("args, says", [
    (["--family", "qwen3", "--gated", "numpy"], "qwen3 has no gated sites; its kinds: norm, qk"),
    (["--family", "qwen3"], "nothing to swap in"),
    (["--norm", "numpy"], "give --family"),
    (["--family", "qwen3", "--norm", "no-such-thing"], "no-such-thing"),
    (["--family", "qwen3", "--norm", "ln-one-pass-variance"], "it implements layer_norm"),
    (["--family", "qwen3", "--norm", "bwd-weight-twice"], "backward"),
    (["--mutants", "--family", "qwen3"], "without --family"),
    (["--family", "qwen3", "--norm", "numpy", "--dtype", "float16", "--dtype", "float32"], "one --dtype"),
    (["--family", "qwen3", "--norm", "numpy", "--dtype", "float8"], "float8"),
    (["--family", "qwen3", "--norm", "numpy", "--tokens", "1000"], "--tokens"),
])
def test_usage_errors_exit_2_and_say_what_to_fix(capsys, args, says):
    code, out, err = _model(capsys, *args)
    assert code == 2, out + err
    assert says in out + err


def test_the_teaching_table_names_every_mutant_that_has_a_site():
    table = mutants(tokens=128)
    rows = {r.mutant: r for r in table.rows}
    no_site = {name for name, r in rows.items() if not r.runs}
    # HF runs the residual add and the norm as two calls, and q_norm and RoPE as two calls
    assert no_site == {"qk-norm-after-rope", "add-residual-after-norm", "add-residual-truncated",
                       "add-sum-rounded-first"}, no_site
    never = {name for name, r in rows.items() if r.runs and not r.caught_in}
    # one-pass variance cancels only when |mean| >> std; this model's hidden states have mean ~ 0
    assert never == {"ln-one-pass-variance"}, never
    for name, r in rows.items():
        for dtype in r.caught_in:  # every site of its kind is the mutant: the first one called is layer 0's
            first = r.runs[dtype].first_diverging
            assert ".layers.0." in first.path and first.kind == r.kind, (name, dtype, first.path)
    assert rows["stats-low-precision"].caught_in == ["float16"]  # tiny rows' x^2 underflows in fp16 only
    assert rows["offset-low-precision"].runs["bfloat16"].first_diverging.detail.startswith("coherent per-channel")
    assert rows["eps-hardcoded"].caught_in == ["bfloat16", "float16", "float32"]  # Llama's 1e-5 vs the mutant's 1e-6
