"""The persistent evaluation session (`normdiff fuzz`'s engine): its workers start once and serve
many evaluations, each judged as the runner judges it; a crash or a hang is that evaluation's
outcome and the next one runs on a fresh worker; closing it (also on Ctrl-C) leaves nothing behind;
what fails is what fails a run, mutants and known findings included."""
import os

import pytest

from normdiff.cases.model import Case
from normdiff.cases.suites import Suite
from normdiff.harness.data.conventions import op_conventions
from normdiff.harness.engine import runner
from normdiff.harness.engine.session import Session
from normdiff.implementations.entry import Implementation

RMS = Case.of("rms_norm", "qwen3", "bfloat16", "2x64", weight="trained")
TINY = Case.of("rms_norm", "qwen3", "float32", "2x64", regime="tiny_rms:1e-4", weight="trained")
FUSED = Case.of("add_rms_norm", "vllm", "bfloat16", "2x32", weight="trained")
BACKWARD = Case.of("rms_norm", "qwen3", "float32", "2x16", weight="trained", dy="normal")


def fixture_impl(fixtures_dir, attr, kind="user", pairs=None, worker=""):
    return Implementation(f"fx-{attr}", kind, "numpy", f"{fixtures_dir / 'misbehaving.py'}:{attr}",
                          frozenset(pairs or op_conventions()), worker=worker)




def by_impl(outcomes):
    return {(o.impl.name, o.case.id): o.measurement for o in outcomes}


def test_one_worker_serves_every_evaluation_and_each_is_judged_as_a_run_judges_it(fixtures_dir, workers_left):
    correct = fixture_impl(fixtures_dir, "correct", worker="fx")
    wrong = fixture_impl(fixtures_dir, "eps_outside", worker="fx")
    only_l2 = Implementation("fx-l2-only", "user", "numpy", correct.entry, frozenset({("l2_norm", "torch")}),
                             worker="fx")
    with Session([correct, wrong, only_l2], timeout=30) as session:
        pid = session.workers["fx"].proc.pid
        first = by_impl(session.evaluate([RMS]))
        second = by_impl(session.evaluate([TINY, FUSED]))
        assert session.workers["fx"].proc.pid == pid  # the same process, started once
    assert first[("fx-correct", RMS.id)].outcome in ("identical", "agree")
    assert first[("fx-l2-only", RMS.id)].outcome == "unsupported"
    assert second[("fx-eps_outside", TINY.id)].outcome == "disagree"
    # every output of a call: the fused add's y and its residual_out
    assert {k[1] for k in second if k[0] == "fx-correct"} == {TINY.id, FUSED.id, FUSED.with_output("residual_out").id}
    # the same judgement as a run of the same cases
    data = runner.run(Suite("s", "", (TINY,)), [wrong], timeout=30)
    assert data.outcomes[0].measurement.max_ulp == second[("fx-eps_outside", TINY.id)].max_ulp
    assert workers_left() == []


def test_a_backward_call_judges_every_gradient(fixtures_dir):
    from normdiff.implementations import registry

    with Session([registry.get("numpy")], timeout=30) as session:
        got = by_impl(session.evaluate([BACKWARD]))
    assert {cid for _, cid in got} == {c.id for c in BACKWARD.outputs()}
    assert {m.outcome for m in got.values()} <= {"identical", "agree"}


def test_the_prepared_reference_is_cached_by_call(fixtures_dir, monkeypatch):
    calls = []
    real = runner.prepare
    monkeypatch.setattr(runner, "prepare", lambda case, outputs=None: calls.append(case.id) or real(case, outputs))
    with Session([fixture_impl(fixtures_dir, "correct")], timeout=30) as session:
        session.evaluate([RMS])
        session.evaluate([RMS, TINY])
        session.evaluate([RMS])
    assert calls == [RMS.id, TINY.id]


@pytest.mark.parametrize("attr, outcome, says", [("segfaults", "crashed", "SIGSEGV"),
                                                 ("hangs", "timeout", "no reply within 1 s")])
def test_a_crash_or_a_hang_is_an_outcome_and_the_next_evaluation_runs_on_a_fresh_worker(fixtures_dir, attr, outcome,
                                                                                        says, workers_left):
    bad = fixture_impl(fixtures_dir, attr)
    with Session([bad], timeout=1) as session:
        for case in (RMS, TINY):  # the second is really called: no "not run after a hang"
            (got,) = session.evaluate([case])
            assert got.measurement.outcome == outcome and says in got.measurement.detail, got.measurement.detail
            assert session.failures([got]) == [got]
    assert workers_left() == []


def test_closing_on_ctrl_c_leaves_no_process_and_no_folder(fixtures_dir, workers_left):
    hangs = fixture_impl(fixtures_dir, "hangs")
    session = Session([hangs, fixture_impl(fixtures_dir, "correct", worker="other")], timeout=60)
    import threading

    with pytest.raises(KeyboardInterrupt):
        with session:
            folder = session._tmp_dir
            timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), 2))
            timer.start()
            session.evaluate([RMS])  # two workers: the hang is waited on in a thread
    assert workers_left() == [] and not os.path.exists(folder)


def test_an_implementation_that_cannot_load_is_reported_before_any_case(fixtures_dir, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('broken at import')\n")
    impl = Implementation("fx-broken", "user", "numpy", f"{broken}:f", frozenset(op_conventions()))
    gone = Implementation("fx-gone", "user", "numpy", f"{broken}:f", frozenset(op_conventions()),
                          requires=("no_such_module_xyz",))
    with Session([impl, gone], timeout=30) as session:
        assert "broken at import" in session.failed["fx-broken"][1]
        assert "no_such_module_xyz" in session.unavailable["fx-gone"]
        got = by_impl(session.evaluate([RMS]))
    assert got[("fx-broken", RMS.id)].outcome == "error" and got[("fx-gone", RMS.id)].outcome == "unavailable"
