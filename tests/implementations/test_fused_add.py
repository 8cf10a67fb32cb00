"""The fused residual add (add_rms_norm: h = x + residual, y = rms_norm(h), returns (y,
residual_out)) through the whole pipeline: the own NumPy / torch / JAX implementations agree with
the float64 oracle on both results and all three gradients (dx, dresidual, dw) under both
conventions (qwen3: h rounded to the input dtype before the norm; vllm: kept in float32); the
registered mutants (torch_own with one residual knob turned) disagree on exactly the result they
corrupt; user code (NumPy forwards and an explicit backward through `normdiff check`, torch / JAX
forwards differentiated with both upstream gradients, a torch module forward(x, residual)) and the
--command protocol carry both results and both upstream gradients."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

from normdiff.cases.model import Case  # noqa: E402
from normdiff.cases.suites import Suite  # noqa: E402
from normdiff.harness import api  # noqa: E402
from normdiff.harness.commands.usercode import user_implementation  # noqa: E402
from normdiff.harness.engine import oracle  # noqa: E402
from normdiff.harness.engine.vjp import vjp  # noqa: E402
from normdiff.implementations import numpy_backward, numpy_own  # noqa: E402
from normdiff.implementations.command import command_implementation  # noqa: E402
from normdiff.implementations.user import make_backward_adapter  # noqa: E402

OP = "add_rms_norm"
CONVENTIONS = ("qwen3", "vllm")
DTYPES = ("float32", "bfloat16", "float16")
REGIMES = ("normal", "tiny_rms:1e-3", "outliers")
RESIDUALS = ("normal", "large")
PASSING = ("identical", "agree")
OWN = ("numpy", "torch", "jax")
MUTANTS = ("add-residual-truncated", "add-residual-after-norm", "add-sum-rounded-first")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "user_fused_add.py"
PROGRAM = Path(__file__).resolve().parents[1] / "fixtures" / "command_program.py"

# user code in torch and JAX, written to a temporary file: vLLM's forward_native with a residual
TORCH_USER = '''
import torch

def _norm(h, weight, eps, dtype):
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)

def add_rms_norm(x, residual, weight, eps):
    h = x.float() + residual.float()
    return _norm(h, weight, eps, x.dtype), h.to(x.dtype)

class AddRMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states, residual):
        h = hidden_states.float() + residual.float()
        return _norm(h, self.weight, self.variance_epsilon, hidden_states.dtype), h.to(hidden_states.dtype)
'''
JAX_USER = '''
import jax
import jax.numpy as jnp

def add_rms_norm(x, residual, weight, eps):
    h = x.astype(jnp.float32) + residual.astype(jnp.float32)
    y = (h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + eps)).astype(x.dtype)
    return {"y": weight * y, "residual_out": h.astype(x.dtype)}
'''
# an explicit backward whose parameters are named by the aliases, returning a dict by name
ALIASED_BACKWARD = '''
import user_fused_add

def backward(dy, dh, x, res, w, eps):
    dx, dres, dw = user_fused_add.add_rms_norm_backward(dy, dh, x, res, w, eps)
    return {"dx": dx, "dresidual": dres, "dw": dw}
'''


def _case(convention: str, dtype: str, regime: str, residual: str, **extra) -> Case:
    return Case.of(OP, convention, dtype, "16x1024", regime, weight="trained", residual=residual, **extra)


def _cases() -> list[Case]:
    """Each forward call's two results, and each backward call's three gradients."""
    out = []
    for conv in CONVENTIONS:
        for dtype in DTYPES:
            for regime in REGIMES:
                for res in RESIDUALS:
                    out += _case(conv, dtype, regime, res).outputs()
                    out += _case(conv, dtype, regime, res, dy="normal").outputs()
    return out


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fused_add_user")
    for name, text in (("torch_user.py", TORCH_USER), ("jax_user.py", JAX_USER)):
        (folder / name).write_text(textwrap.dedent(text))
    return folder


@pytest.fixture(scope="module")
def results(user_files):
    users = [user_implementation(f"{user_files / 'torch_user.py'}:add_rms_norm", OP, "vllm", name="user-torch-fn"),
             user_implementation(f"{user_files / 'torch_user.py'}:AddRMSNorm", OP, "vllm", name="user-torch-class"),
             user_implementation(f"{user_files / 'jax_user.py'}:add_rms_norm", OP, "vllm", name="user-jax-fn")]
    report = api.run_suite(Suite("fused-add", "", tuple(_cases())), api.select([*OWN, *MUTANTS]) + users, passes="both")
    df = report.results
    return df[df["outcome"] != "unsupported"]  # mutants and user code declare one convention, the forward


def _failing(rows) -> str:
    bad = rows[~rows["outcome"].isin(PASSING)]
    return bad[["implementation", "case_id", "outcome", "max_ulp", "tolerance_ulp", "detail"]].to_string()


@pytest.mark.parametrize("impl", OWN)
def test_own_implementations_agree_on_both_results_and_every_gradient(results, impl):
    rows = results[results["implementation"] == impl]
    # 2 conventions x 3 dtypes x 3 regimes x 2 residuals, each y, residual_out, dx, dresidual, dw
    assert len(rows) == 2 * 3 * 3 * 2 * 5
    assert set(rows["output"]) == {"y", "residual_out", "dx", "dresidual", "dw"}
    assert rows["outcome"].isin(PASSING).all(), _failing(rows)
    # residual_out is one correctly rounded sum: within half an ulp, as its budget says
    assert (rows.loc[rows["output"] == "residual_out", "max_ulp"] <= 0.5).all()


def test_the_own_implementations_round_residual_out_alike():
    """residual_out bit for bit across numpy / torch / JAX (JAX without float64: TwoSum), nearest
    and truncated, and y bit for bit on nearly every bf16 / fp16 element."""
    import jax  # noqa: F401

    from normdiff.implementations import jax_own, torch_own
    from normdiff.implementations.frameworks.torch import to_numpy

    for conv in CONVENTIONS:
        for dtype in ("bfloat16", "float16", "float32"):
            case = _case(conv, dtype, "outliers", "large")
            inputs = case.inputs()
            for rounding in ("nearest", "truncate"):
                contract = case.contract.replace(residual_rounding=rounding)
                ny, nh = numpy_own.run(OP, contract, inputs)
                ty, th = (to_numpy(t) for t in torch_own.run(OP, contract, inputs))
                jy, jh = jax_own.run(OP, contract, inputs)
                for other in (th, jh):
                    assert np.array_equal(nh.view(np.uint8), np.asarray(other).view(np.uint8)), (conv, dtype, rounding)
                if dtype != "float32":
                    for other in (ty, jy):
                        assert np.mean(ny.astype(np.float64) != np.asarray(other).astype(np.float64)) < 1e-3


def test_mutants_disagree_on_what_they_corrupt(results):
    own = results[results["implementation"] == "torch"].set_index("case_id")

    def of(mutant, dtype, output):
        r = results[(results["implementation"] == mutant) & (results["dtype"] == dtype)
                    & (results["output"] == output)]
        assert len(r) == 3 * 2, (mutant, dtype, output)  # its convention's regimes x residuals
        return r

    # residual_out truncated (vllm): residual_out off by up to an ulp on every case, y untouched
    # (vLLM's norm reads the float32 sum, not residual_out): the correct torch_own's y, bit for bit
    for dtype in DTYPES:
        assert (of("add-residual-truncated", dtype, "residual_out")["outcome"] == "disagree").all()
        y = of("add-residual-truncated", dtype, "y")
        assert y["outcome"].isin(PASSING).all()
        assert np.array_equal(y["max_ulp"].to_numpy(), own.loc[y["case_id"], "max_ulp"].to_numpy())
    # the residual added after the norm (qwen3): y wrong everywhere, residual_out still the sum
    for dtype in DTYPES:
        assert (of("add-residual-after-norm", dtype, "y")["outcome"] == "disagree").all()
        assert of("add-residual-after-norm", dtype, "residual_out")["outcome"].isin(PASSING).all()
    # the sum rounded to bf16 before the variance where vLLM keeps it in float32: one more
    # rounding, out of the float32-sum budget on most bf16 cases (1-2 ulp per element), invisible in
    # float32; residual_out is the same sum, rounded the same way
    bf16 = of("add-sum-rounded-first", "bfloat16", "y")
    assert (bf16["outcome"] == "disagree").sum() >= 4, bf16[["case_id", "outcome", "max_ulp"]].to_string()
    assert of("add-sum-rounded-first", "float32", "y")["outcome"].isin(PASSING).all()
    for dtype in DTYPES:
        assert of("add-sum-rounded-first", dtype, "residual_out")["outcome"].isin(PASSING).all()


@pytest.mark.parametrize("impl", ["user-torch-fn", "user-torch-class", "user-jax-fn"])
def test_user_forwards_differentiated_with_both_upstreams(results, impl):
    """A torch / JAX forward returning (y, residual_out) (a tuple, or a dict by name), a torch
    module's forward(x, residual) too, differentiated by its framework with dy and dresidual_out."""
    rows = results[results["implementation"] == impl]
    assert len(rows) == 3 * 3 * 2 * 5  # vllm's cases: dtypes x regimes x residuals, both passes
    assert set(rows["output"]) == {"y", "residual_out", "dx", "dresidual", "dw"}
    assert rows["outcome"].isin(PASSING).all(), _failing(rows)


def _check(target: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", target, "--op", OP,
                           "--convention", "vllm", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


def test_check_a_numpy_fused_add():
    correct = _check(f"{FIXTURE}:add_rms_norm")
    assert correct["verdict"] == "agrees" and correct["framework"] == "numpy", correct["message"]
    assert correct["cases"]["disagree"] == 0 and correct["cases"]["total"] > 0

    truncated = _check(f"{FIXTURE}:add_rms_norm_truncated")
    assert truncated["verdict"] == "disagrees"
    assert truncated["diagnosis"] and truncated["diagnosis"][0]["bug"] == "add-residual-truncated", truncated["diagnosis"]
    assert truncated["cases"]["disagree"] == truncated["cases"]["total"] // 2  # every residual_out, no y

    backward = _check(f"{FIXTURE}:add_rms_norm_backward")
    assert backward["verdict"] == "agrees", backward["message"]
    assert backward["cases"]["total"] > 0 and backward["cases"]["disagree"] == 0
    assert {r["case_id"].rpartition("out=")[2] for r in backward["rows"]} == {"dx", "dresidual", "dw"}


def test_an_explicit_backward_binds_the_upstreams_by_their_aliases(monkeypatch, tmp_path):
    """backward(dy, dh, x, res, w, eps) -> {dx, dresidual, dw}: dh is dresidual_out, res the
    residual; the same gradients as the positional one."""
    (tmp_path / "aliased.py").write_text(textwrap.dedent(ALIASED_BACKWARD))
    monkeypatch.syspath_prepend(str(FIXTURE.parent))
    case = _case("vllm", "bfloat16", "normal", "large", dy="normal")
    inputs = case.inputs()
    dy = case.upstreams(oracle.results(case.contract, inputs.arrays))
    aliased = make_backward_adapter(f"{tmp_path / 'aliased.py'}:backward", "numpy", OP)(OP, case.contract, inputs, dy)
    plain = make_backward_adapter(f"{FIXTURE}:add_rms_norm_backward", "numpy", OP)(OP, case.contract, inputs, dy)
    assert list(aliased) == list(plain) == ["x", "residual", "weight"]
    for name in plain:
        assert np.array_equal(np.asarray(aliased[name]), np.asarray(plain[name]))


def test_the_kernel_style_backward_is_the_exact_vjp_when_exact():
    """numpy_backward(exact=True) on every residual knob: the oracle's VJP to float64 rounding."""
    for conv in CONVENTIONS:
        case = _case(conv, "bfloat16", "outliers", "large", dy="normal")
        inputs = case.inputs()
        dy = case.upstreams(oracle.results(case.contract, inputs.arrays))
        for changes in ({}, {"residual_order": "after_norm"}, {"residual_rounding": "truncate"},
                        {"residual_dtype": "float32" if conv == "qwen3" else "input"}):
            contract = case.contract.replace(**changes)
            mine = numpy_backward.backward(OP, contract, inputs, dy, exact=True)
            exact = vjp(contract, inputs.arrays, dy, inputs.num_heads)
            assert list(mine) == ["x", "residual", "weight"]
            for name, ref in exact.items():
                assert np.max(np.abs(mine[name] - ref)) <= 1e-12 * np.max(np.abs(ref)), (conv, changes, name)


def test_the_command_protocol_carries_both_results_and_both_upstreams():
    impl = command_implementation([sys.executable, str(PROGRAM), "correct"], OP, "vllm", name="cmd-fused-add",
                                  passes=("forward", "backward"))
    cases = []
    for dtype in ("bfloat16", "float16"):
        cases += _case("vllm", dtype, "normal", "large").outputs()
        cases += _case("vllm", dtype, "normal", "large", dy="aligned").outputs()
    report = api.run_suite(Suite("cmd", "", tuple(cases)), [impl], timeout=60.0, passes="both")
    rows = report.results
    assert set(rows["output"]) == {"y", "residual_out", "dx", "dresidual", "dw"}
    assert len(rows) == len(cases)
    assert rows["outcome"].isin(PASSING).all(), _failing(rows)
