"""The runner turns every kind of misbehaviour into an outcome and still completes the run."""
import dataclasses

import pytest

from normdiff.cases import suites
from normdiff.harness.data.ops import OPS

from normdiff.cases.model import Case
from normdiff.cases.suites import Suite
from normdiff.harness import api
from normdiff.implementations import registry
from normdiff.harness.engine import runner
from normdiff.harness.data.conventions import op_conventions
from normdiff.implementations.entry import Implementation
from normdiff.harness.engine import verdict

CASES = (
    Case.of("rms_norm", "qwen3", "bfloat16", "4x128", regime="tiny_rms:1e-3", weight="trained"),
    Case.of("rms_norm", "qwen3.5", "float32", "4x128", weight="trained"),
    Case.of("l2_norm", "qwen3.5", "float16", "4x64"),
)
SUITE = Suite("test", "", CASES)


def fixture_impl(fixtures_dir, attr, batch_rows=False, **kw):
    return Implementation(f"fx-{attr}", "user", "numpy", f"{fixtures_dir / 'misbehaving.py'}:{attr}",
                          frozenset(op_conventions()), batch_rows=batch_rows, **kw)


def outcomes(fixtures_dir, attrs, timeout=20.0):
    impls = [fixture_impl(fixtures_dir, a) for a in attrs]
    report = api.run_suite(SUITE, impls, timeout=timeout)
    return report, report.results.groupby("implementation")["outcome"].apply(lambda s: set(s.astype(str)))


def test_correct_agrees_and_wrong_formulas_disagree(fixtures_dir):
    report, got = outcomes(fixtures_dir, ["correct", "eps_outside", "doubles"])
    assert got["fx-correct"] <= {"identical", "agree"}
    assert got["fx-doubles"] == {"disagree"}
    # eps outside the sqrt only shows at small rms: the tiny-rms case must catch it
    rows = report.results.set_index(["implementation", "case_id"])
    assert rows.loc[("fx-eps_outside", CASES[0].id), "outcome"] == "disagree"
    assert report.meta["exit_code"] == 1 and set(report.meta["failing"]) == {"fx-doubles", "fx-eps_outside"}


def test_failures_become_outcomes_and_the_run_completes(fixtures_dir):
    report, got = outcomes(fixtures_dir, ["raises", "exits", "segfaults", "wrong_shape", "returns_nan",
                                          "not_an_array", "correct"])
    assert got["fx-raises"] == {"error"}
    assert got["fx-exits"] == {"crashed"}
    assert got["fx-segfaults"] == {"crashed"}
    assert got["fx-wrong_shape"] == {"error"}
    assert got["fx-returns_nan"] == {"nan_mismatch"}
    assert got["fx-not_an_array"] == {"error"}
    assert got["fx-correct"] <= {"identical", "agree"}  # unaffected by its neighbours' crashes
    details = report.results.set_index("implementation")["detail"]
    assert "deliberate failure" in details["fx-raises"].iloc[0]
    assert "SIGSEGV" in details["fx-segfaults"].iloc[0]
    assert "status 3" in details["fx-exits"].iloc[0]
    assert "wrong-shaped output" in details["fx-wrong_shape"].iloc[0]
    assert len(report.results) == len(CASES) * 7


@pytest.mark.slow
def test_a_hang_times_out_and_later_cases_still_run(fixtures_dir):
    report, got = outcomes(fixtures_dir, ["hangs", "correct"], timeout=2.0)
    assert got["fx-hangs"] == {"timeout"}
    assert got["fx-correct"] <= {"identical", "agree"}


def test_printing_to_stdout_does_not_break_the_protocol(fixtures_dir):
    _, got = outcomes(fixtures_dir, ["chatty"])
    assert got["fx-chatty"] <= {"identical", "agree"}


def test_missing_framework_is_unavailable_not_failed(fixtures_dir):
    impl = fixture_impl(fixtures_dir, "correct", requires=("no_such_module_xyz",))
    report = api.run_suite(SUITE, [impl])
    assert set(report.results["outcome"].astype(str)) == {"unavailable"}
    assert "no_such_module_xyz is not installed" in report.results["detail"].iloc[0]
    assert report.meta["exit_code"] == 0
    assert verdict.implementation(report.results) == "unavailable"


def test_pairs_not_implemented_have_no_row_and_a_missing_pass_is_unsupported(fixtures_dir):
    impl = Implementation("fx-rms-only", "user", "numpy", f"{fixtures_dir / 'misbehaving.py'}:correct",
                          frozenset({("rms_norm", "qwen3")}))
    backward = Case.of("rms_norm", "qwen3", "float32", "4x128", dy="normal")
    report = api.run_suite(Suite("pairs", "", (*SUITE.cases, *backward.outputs())), [impl])
    got = report.results.set_index("case_id")["outcome"].astype(str)
    assert got[CASES[0].id] in ("identical", "agree")
    assert CASES[1].id not in got and CASES[2].id not in got  # other op@conventions: no row
    rows = report.results.set_index("case_id")
    for c in backward.outputs():  # its op@convention, a pass it lacks: a row that says so
        assert rows.loc[c.id, "outcome"] == "unsupported" and "has no backward pass" in rows.loc[c.id, "detail"]


def test_batched_rows_give_the_same_result_as_one_case_at_a_time(fixtures_dir):
    many = tuple(Case.of("rms_norm", "qwen3", "bfloat16", "4x128", regime=r, weight="trained")
                 for r in ("normal", "tiny_rms:1e-3", "mean_shift:3", "outliers"))
    suite = Suite("batch", "", many)
    single = fixture_impl(fixtures_dir, "correct")
    batched = Implementation("fx-batched", "user", "numpy", single.entry, single.op_conventions, batch_rows=True)
    assert len(runner.plan([runner.prepare(c) for c in many], batched)) == 1  # really one call
    report = api.run_suite(suite, [single, batched])
    digests = report.results.pivot(index="case_id", columns="implementation", values="output_digest")
    assert (digests["fx-batched"] == digests["fx-correct"]).all()
    assert report.pairs["identical"].all()


def batching_cases():
    """Four same-shaped cases of every op's first convention, in bf16 and fp32: one batch each."""
    cases = []
    for name, record in OPS.items():
        convention = next(c for op, c in op_conventions() if op == name)
        heads = "num_heads" in record.dims
        cases += suites.expand(dict(ops=[name], conventions=[convention], dtypes=["bfloat16", "float32"],
                                    shapes=["4x4x32" if heads else "4x128"], weights=["trained"], gates=["closed"],
                                    biases=["trained"], residuals=["large"],
                                    regimes=["normal", "tiny_rms:1e-3", "zero_rows", "outliers"]))
    return tuple(cases)


@pytest.mark.slow
def test_batched_and_single_runs_are_bit_identical_for_every_op():
    cases = batching_cases()
    own = [registry.get(name) for name in ("numpy", "torch", "jax")]
    single = [dataclasses.replace(impl, name=f"{impl.name}-single", batch_rows=False) for impl in own]
    prepared = runner.prepare_all(list(cases))  # one per call (a fused add's two results share one)
    for impl in own:  # really batched: one call per (op, dtype) group of four calls (of the ops it implements)
        its = [p for p in prepared if (p.case.op, p.case.convention) in impl.op_conventions]
        assert len(runner.plan(prepared, impl)) == len(its) // 4
    report = api.run_suite(Suite("batching", "", cases), own + single)
    digests = report.results.pivot(index="case_id", columns="implementation", values="output_digest")
    assert set(report.results["op"]) == set(OPS)
    for impl in own:
        ran = digests[impl.name].notna()
        assert (digests[impl.name][ran] == digests[f"{impl.name}-single"][ran]).all(), impl.name
        assert (digests[impl.name][ran] != "").all() and ran.sum() >= len(digests) // 2


def test_cases_with_different_weights_are_not_batched_together():
    a = Case.of("rms_norm", "qwen3", "float32", "4x128", weight="trained")
    b = Case.of("rms_norm", "qwen3", "float32", "4x128", weight="large")
    impl = Implementation("x", "own", "numpy", "m:f", frozenset(op_conventions()), batch_rows=True)
    tasks = runner.plan([runner.prepare(a), runner.prepare(b)], impl)
    assert len(tasks) == 2


def test_a_failure_while_judging_costs_outcomes_not_the_run(fixtures_dir, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("judge bug")

    monkeypatch.setattr(runner.judge, "judge", broken)
    report, got = outcomes(fixtures_dir, ["correct"])
    assert got["fx-correct"] == {"error"}
    assert "could not judge this output: ZeroDivisionError: judge bug" in report.results["detail"].iloc[0]


def test_a_run_hands_the_gil_over_quickly_and_restores_the_interval(fixtures_dir):
    # workers' threads need the GIL to send their next call while the collector judges (runner.py)
    import sys

    seen = []
    before = sys.getswitchinterval()
    runner.run(SUITE, [fixture_impl(fixtures_dir, "correct")], timeout=20.0,
               meanwhile=lambda: seen.append(sys.getswitchinterval()))
    assert seen == [runner.GIL_HANDOFF] and runner.GIL_HANDOFF < before
    assert sys.getswitchinterval() == before


def test_one_contracts_calls_under_two_conventions_share_what_is_prepared():
    """qwen3 and deepseek-v3 define one rms_norm contract (eps included): the same inputs under both
    are prepared once, each case keeping its own; olmo2's contract is prepared on its own."""
    first = Case.of("rms_norm", "qwen3", "bfloat16", "4x128", weight="trained")
    same, other = (dataclasses.replace(first, convention=name) for name in ("deepseek-v3", "olmo2"))
    a, b, c = runner.prepare_all([first, same, other])
    assert (a.case, b.case, c.case) == (first, same, other) and b.expected["y"].case == same
    assert b.expected["y"].ref is a.expected["y"].ref and c.expected["y"].ref is not a.expected["y"].ref
    alone = runner.prepare(same)
    assert (alone.ref.exact == b.ref.exact).all() and alone.expected["y"].budget == b.expected["y"].budget


def test_an_implementation_that_shares_calls_makes_one_call_per_contract_and_inputs(fixtures_dir):
    """A registered adapter says nothing of what it reads of the contract: only cases of one contract
    share its call (check without --convention: a user's function says it reads the eps and the span)."""
    from normdiff.harness.engine.columns import C

    first = Case.of("rms_norm", "qwen3", "bfloat16", "4x128", weight="trained")
    cases = (first, *(dataclasses.replace(first, convention=name) for name in ("deepseek-v3", "olmo2")))
    report = api.run_suite(Suite("shared", "", cases), [fixture_impl(fixtures_dir, "correct", shares_calls=True)])
    assert report.meta["calls"] == {"made": 2, "shared": 1}
    errors = dict(zip(report.results[C.case_id], report.results[C.max_ulp]))
    assert errors[cases[0].id] == errors[cases[1].id]  # one output, one reference
    assert "calls" not in api.run_suite(Suite("apart", "", cases), [fixture_impl(fixtures_dir, "correct")]).meta
