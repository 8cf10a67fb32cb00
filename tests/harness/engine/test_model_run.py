"""normdiff model's engine: a site call is judged as a case on the call's own inputs; the model's
own classes swapped into their family give logits bit-identical to the unswapped model, and our own
implementations stay within every site's budget (Issue 16's done-when, in bf16)."""
import numpy as np
import pytest

from normdiff.cases.model import Case, CaseInputs
from normdiff.harness.engine import model_run, runner
from normdiff.harness.engine.pool import Worker
from normdiff.implementations.entry import Implementation
from normdiff.implementations.hf_model_families import FAMILIES
from normdiff.implementations.registry import get

pytest.importorskip("transformers")

# the family's own class for each kind, as a registered implementation (GPT-NeoX's norm is nn.LayerNorm;
# Mamba2's block norm is LlamaRMSNorm's code)
OWN = {"qwen3": "hf-qwen3", "vllm-qwen3": "hf-qwen3", "qwen3.5": "hf-qwen3.5", "olmo2": "hf-olmo2", "gemma3": "hf-gemma3", "llama": "hf-llama",
       "gpt-neox": {"norm": "torch-nn.LayerNorm"}, "mamba2": {"norm": "hf-llama", "gated": "hf-mamba2"},
       "deepseek-v3": "hf-deepseek-v3", "cohere": "hf-cohere", "olmo": "hf-olmo"}


def _plain(family: str) -> list[str]:
    """The kinds that are one module each (add and rope fuse two steps, quant and add_quant quantize:
    no HF class is that call)."""
    return list(FAMILIES[family].plain_kinds())


def _own(family: str, kind: str) -> str:
    own = OWN[family]
    return own[kind] if isinstance(own, dict) else own


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = Worker("torch", timeout=300, tmp_dir=str(tmp_path_factory.mktemp("model-worker")))
    yield w
    w.close()


def test_prepare_judges_the_inputs_it_is_given():
    case = Case.of("rms_norm", "qwen3", "float32", "4x8")
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    given = CaseInputs({"x": x, "weight": np.ones(8, np.float32)}, 1)
    exact = runner.prepare(case, inputs=given).expected["y"].ref.exact
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(exact, want, rtol=1e-12)


def test_a_site_call_is_judged_on_its_own_inputs():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 64)).astype(np.float32)
    w = (1 + rng.normal(0, 0.1, 64)).astype(np.float32)
    y64 = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w
    site = {"op": "rms_norm", "convention": "qwen3"}
    call = {"arrays": {"x": x, "weight": w}, "num_heads": 1, "eps": 1e-6, "y": y64.astype(np.float32)}
    assert model_run.judge_call(site, call).outcome in ("identical", "agree")
    off = dict(call, y=(y64 * (1 + 200 * 2.0 ** -23)).astype(np.float32))  # ~200 ulp
    m = model_run.judge_call(site, off)
    assert m.outcome == "disagree" and m.max_ulp > m.tolerance_ulp


def test_compare_says_identical_only_for_the_same_bits():
    a = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], np.float32)
    assert model_run.compare(a, a.copy(), top1=True).identical
    b = a.copy()
    b[1, 0] = 0.5
    c = model_run.compare(b, a, top1=True)
    assert not c.identical and c.top1_agreement == 0.5 and c.max_abs == 2.5


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_models_own_classes_give_its_logits_bit_for_bit(worker, family):
    swaps = {kind: get(_own(family, kind)) for kind in _plain(family)}
    run = model_run.run(family, swaps, "bfloat16", 0, 64, worker=worker)
    assert run.agrees, [(s.path, s.outcome, s.max_ulp) for s in run.sites if not s.passing]
    assert run.logits.identical and run.hidden.identical
    assert not run.own_out_of_budget


@pytest.mark.parametrize("family", list(FAMILIES))
def test_our_numpy_in_every_site_stays_within_every_budget(worker, family):
    swaps = {kind: get("numpy") for kind in _plain(family)}
    run = model_run.run(family, swaps, "bfloat16", 0, 64, worker=worker)
    assert run.agrees, [(s.path, s.outcome, s.max_ulp, s.budget) for s in run.sites if not s.passing]
    assert run.first_diverging is None
    assert run.logits.top1_agreement >= 0.9


@pytest.mark.parametrize("family, kinds", [("qwen3", ("add", "rope")), ("vllm-qwen3", ("add",)),
                                           ("vllm-qwen3", ("quant", "add_quant", "add"))])  # vLLM's FP8 decoder
def test_our_numpy_in_the_fused_sites_stays_within_every_budget(worker, family, kinds):
    run = model_run.run(family, {kind: get("numpy") for kind in kinds}, "bfloat16", 0, 64, worker=worker)
    assert run.agrees, [(s.path, s.outcome, s.max_ulp, s.budget) for s in run.sites if not s.passing]
    assert {s.kind for s in run.sites if s.implementation} == set(kinds)


def test_transformers_unfused_add_is_out_of_vllms_budget(worker):
    # vLLM #52104: the native path keeps x + residual in float32 for the variance; transformers rounds it
    run = model_run.run("vllm-qwen3", {"add": get("numpy")}, "bfloat16", 0, 128, worker=worker)
    assert run.agrees
    out = {s.path for s in run.own_out_of_budget}
    assert {f"model.layers.{i}.post_attention_layernorm" for i in range(4)} <= out
    assert all(".post_attention_layernorm" in p or ".input_layernorm" in p or p == "model.norm" for p in out)


def _misbehaving(fixtures_dir, attr: str) -> Implementation:
    return Implementation(attr, "user", "numpy", f"{fixtures_dir / 'misbehaving.py'}:{attr}",
                          frozenset({("rms_norm", "llama")}))


def test_a_crash_in_a_site_ends_the_worker_not_normdiff(fixtures_dir):
    with pytest.raises(model_run.ModelRunError, match="SIGSEGV"):
        model_run.run("llama", {"norm": _misbehaving(fixtures_dir, "segfaults")}, tokens=8, timeout=120)


def test_nan_out_of_a_site_is_counted_through_to_the_logits(worker, fixtures_dir):
    run = model_run.run("llama", {"norm": _misbehaving(fixtures_dir, "returns_nan")}, tokens=8, worker=worker)
    assert run.first_diverging.path == "model.layers.0.input_layernorm"
    assert run.first_diverging.outcome == "nan_mismatch"
    assert run.logits.nonfinite > 0 and not run.agrees


def test_a_mutant_is_named_at_its_first_site_and_drift_follows(worker):
    run = model_run.run("qwen3", {"norm": get("gamma-plus-one")}, "bfloat16", 0, 64, worker=worker)
    assert not run.agrees
    assert run.first_diverging.path == "model.layers.0.input_layernorm"
    assert run.first_diverging.input_drift == 0  # the first site sees the unswapped model's input
    later = [s for s in run.sites if s.path == "model.layers.1.input_layernorm"][0]
    assert later.input_drift > 0.1  # and everything downstream has drifted
    # the unswapped sites (q_norm, k_norm) are the model's own classes, judged but not on trial
    assert all(s.passing for s in run.sites if not s.implementation)
    assert run.logits.top1_agreement < 0.9
