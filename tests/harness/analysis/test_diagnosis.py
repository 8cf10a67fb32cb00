"""Diagnosis on outputs made to order: our NumPy implementation with a knob turned, on suite cases."""
from __future__ import annotations

import numpy as np
import pytest

from normdiff.cases import suites
from normdiff.harness.analysis import diagnosis
from normdiff.implementations import numpy_own


def outputs(op, convention, changes, regimes=("normal", "tiny_rms:1e-3", "mean_shift:1"), eps=("config", 1e-5),
            dtypes=("bfloat16", "float32")):
    heads = op in ("qk_norm", "qk_norm_rope")
    cases = suites.expand(dict(ops=[op], conventions=[convention], dtypes=list(dtypes),
                               shapes=["8x4x64" if heads else "8x256"], regimes=list(regimes), weights=["trained"],
                               eps=list(eps)))
    with np.errstate(all="ignore"):
        return {c.id: numpy_own.run(op, c.contract.replace(**changes), c.inputs()) for c in cases}


@pytest.mark.parametrize("op, convention, changes, bug", [
    # the same catalogued change is named by its id under a convention it was not filed under
    ("rms_norm", "olmo2", {"statistic": "variance"}, "variance-not-mean-square"),
    ("rms_norm", "gemma3", {"weight_offset": 0.0}, "gamma-missing-one"),
    ("rms_norm", "olmo2", {"weight_offset": 1.0}, "gamma-plus-one"),
    ("qk_norm", "gemma3", {"scope": "full"}, "qk-norm-full-vector"),
    ("rms_norm", "llama", {"eps": 1e-6}, "eps-hardcoded"),
])
def test_a_catalogued_change_carries_its_id_under_any_convention(op, convention, changes, bug):
    found = diagnosis.diagnose(outputs(op, convention, changes), op, convention)
    best = found.matches[0]
    assert best.name == bug and best.convincing and best.changes == changes, found.matches[:3]


def test_a_change_that_changes_nothing_is_no_candidate():
    # offset_dtype on a plain-gamma convention: 0 + w is w in any dtype
    found = diagnosis.diagnose(outputs("rms_norm", "olmo2", {"eps_placement": "outside"}), "rms_norm", "olmo2")
    assert found.matches[0].name == "eps-outside-sqrt"
    assert not [m for m in found.matches if m.changes == {"offset_dtype": "input"}]


def test_a_pair_must_explain_clearly_more_than_its_best_single():
    found = diagnosis.diagnose(outputs("rms_norm", "qwen3", {"eps_placement": "outside"}), "rms_norm", "qwen3")
    assert found.matches[0].name == "eps-outside-sqrt" and len(found.matches[0].changes) == 1
    best = found.matches[0].matched
    for pair in (m for m in found.matches if len(m.changes) == 2):
        assert pair.matched >= best + 2 and "more of the" in pair.symptom
    # a real pair, which no single change explains, is found and says what it adds
    two = diagnosis.diagnose(outputs("rms_norm", "qwen3", {"eps_placement": "outside", "weight_offset": 1.0}),
                             "rms_norm", "qwen3")
    top = two.matches[0]
    assert top.changes == {"eps_placement": "outside", "weight_offset": 1.0} and "more of the" in top.symptom


def test_below_coverage_it_is_only_the_closest():
    m = diagnosis.Match("x", {"cast": "llama"}, 3, 12, 1.0, "fix")
    assert not m.convincing and diagnosis.Match("x", {}, 6, 12, 1.0, "fix").convincing


def test_fix_texts_describe_the_change_both_ways():
    from normdiff.harness.data.conventions import get_contract

    text = diagnosis.fix_for({"cast": "one_rounding"}, get_contract("rms_norm", "qwen3"), "qwen3")
    assert text.startswith("yours: the weight multiplied in float32") and "qwen3: the normalised value rounded" in text
