"""The harness's self-test: the default suite catches every mutant and no correct implementation
disagrees. A tolerance change that blinds the harness, or a regression in a real implementation,
fails here."""
import json
import subprocess
import sys

import pytest

from normdiff.harness import api
from normdiff.harness.data.backward_bugs import BACKWARD_BUGS
from normdiff.harness.data.bugs import BUGS
from normdiff.harness.data.conventions import get_contract
from normdiff.harness.engine.verdict import failing_rows
from normdiff.reports.views.mutants import kill_summary

REQUIRED = {"eps-outside-sqrt", "gamma-plus-one", "gamma-missing-one", "qk-norm-full-vector", "qk-norm-per-head",
            "eps-wrong-value", "eps-ignored", "stats-low-precision", "offset-low-precision",
            "variance-not-mean-square", "rsqrt-inverted", "gate-before-norm", "gate-sigmoid",
            "gated-norm-offset", "l2-eps-clamp", "l2-eps-outside", "double-offset"}


@pytest.fixture(scope="module")
def default_report():
    pytest.importorskip("torch")
    return api.run_suite("default")


def test_the_catalogue_has_the_required_bugs():
    assert REQUIRED <= set(BUGS) and len(BUGS) >= 16
    for bug in BUGS.values():
        assert bug.right != bug.wrong and bug.seen_in and bug.exposing_regimes
        assert bug.contract != get_contract(bug.op, bug.convention)  # the mutant really turns a knob


@pytest.mark.slow
def test_default_suite_kills_every_mutant(default_report):
    kills = kill_summary(default_report.results).set_index("mutant")
    assert set(kills.index) == set(BUGS) | set(BACKWARD_BUGS)  # both passes' mutants
    missed = kills[~kills["caught"]].index.tolist()
    assert not missed, f"the default suite no longer catches {missed}"


def test_no_correct_implementation_disagrees(default_report):
    bad = failing_rows(default_report.results)
    assert bad.empty, bad[["case_id", "implementation", "outcome", "max_ulp", "detail"]].to_string()
    assert default_report.meta["exit_code"] == 0


def test_mutants_look_plausible_where_the_catalogue_says(default_report):
    rows = default_report.results.set_index(["implementation", "case_id"])
    # eps outside the sqrt passes assert_close in bf16 at rms 1 ...
    typical = rows.loc[("eps-outside-sqrt", "rms_norm@qwen3/bf16/8x1024/normal/w=trained")]
    assert typical["assert_close"] and typical["outcome"] in ("identical", "agree")
    # ... and is badly wrong at rms 1e-3 (catalogue: rel_l2 0.41)
    tiny = rows.loc[("eps-outside-sqrt", "rms_norm@qwen3/fp32/8x1024/tiny_rms:1e-3/w=trained")]
    assert tiny["outcome"] == "disagree" and 0.3 < tiny["rel_l2"] < 0.5
    # gamma + 1 on all-ones weights is a pure x2 rescale: cosine 1.000000
    ones = rows.loc[("gamma-plus-one", "rms_norm@qwen3/fp32/8x1024/normal/w=ones")]
    assert ones["cosine"] == pytest.approx(1.0, abs=1e-6) and ones["scale_ratio"] == pytest.approx(2.0)
    assert ones["outcome"] == "disagree"


def test_backward_mutants_are_caught_on_the_outputs_they_corrupt_only(default_report):
    rows = default_report.results
    back = rows[rows["implementation"].isin(list(BACKWARD_BUGS)) & ~rows["outcome"].isin(["unsupported"])]
    assert set(back["pass"]) == {"backward"}  # a backward mutant's forward is the correct one: not run
    for bug in BACKWARD_BUGS.values():
        mine = back[back["implementation"] == bug.id]
        killed = mine[mine["outcome"].isin(["disagree", "nan_mismatch"])]
        assert set(killed["output"]) == set(bug.outputs), bug.id
        untouched = mine[~mine["output"].isin(bug.outputs)]
        assert untouched["outcome"].isin(["identical", "agree"]).all(), bug.id


def test_a_backward_mutant_looks_plausible_by_cosine(default_report):
    rows = default_report.results.set_index(["implementation", "case_id"])
    # the weight twice in the projection term: dx still points the right way on N(0, 1) dy
    typical = rows.loc[("bwd-weight-twice", "rms_norm@qwen3/fp32/8x1024/normal/w=trained/dy=normal/out=dx")]
    assert typical["outcome"] == "disagree" and typical["cosine"] > 0.99


def test_list_bugs_json():
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "list", "bugs", "--json"],
                          capture_output=True, text=True)
    bugs = {b["id"]: b for b in json.loads(proc.stdout)}
    assert REQUIRED <= set(bugs)
    for field in ("op", "convention", "right", "wrong", "exposes", "seen_in"):
        assert bugs["eps-outside-sqrt"][field]


@pytest.mark.slow
def test_explain_shows_a_plausible_and_a_badly_wrong_case(tmp_path):
    pytest.importorskip("torch")
    plot = tmp_path / "eps.png"
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "explain", "eps-outside-sqrt",
                           "--plot", str(plot)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "right: x * rsqrt(mean(x^2) + eps) * w" in out and "wrong: x / (sqrt(mean(x^2)) + eps) * w" in out
    assert "Looks right here: rms_norm@qwen3/bf16/" in out and "Badly wrong here:" in out
    assert "tiny_rms:1e-4" in out and "fla PR #508" in out
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"
    table = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "explain"], capture_output=True, text=True)
    assert all(bug in table.stdout for bug in REQUIRED)
