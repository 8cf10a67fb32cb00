"""Diagnosis on outputs made to order: our NumPy implementation with a knob turned, on suite cases
(the `outputs` fixture, conftest.py)."""
from __future__ import annotations

import numpy as np
import pytest

from normdiff.harness.analysis import diagnosis
from normdiff.harness.data.bugs import BUGS
from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.knobs import KNOBS


@pytest.mark.parametrize("op, convention, changes, bug", [
    # the same catalogued change is named by its id under a convention it was not filed under
    ("rms_norm", "olmo2", {"statistic": "variance"}, "variance-not-mean-square"),
    ("rms_norm", "gemma3", {"weight_offset": 0.0}, "gamma-missing-one"),
    ("rms_norm", "olmo2", {"weight_offset": 1.0}, "gamma-plus-one"),
    ("qk_norm", "gemma3", {"scope": "full"}, "qk-norm-full-vector"),
    ("rms_norm", "llama", {"eps": 1e-6}, "eps-hardcoded"),
    # a LayerNorm where the RMSNorm is meant: knobs the RMS ops' own search never turns
    ("rms_norm", "gemma3", {"centre": True, "statistic": "variance"}, "rms-norm-centred"),
    ("qk_norm", "olmo2", {"centre": True, "statistic": "variance"}, "qk-norm-centred"),
])
def test_a_catalogued_change_carries_its_id_under_any_convention(op, convention, changes, bug, outputs):
    found = diagnosis.diagnose(outputs(op, convention, changes), op, convention)
    best = found.matches[0]
    assert best.name == bug and best.convincing and best.changes == changes, found.matches[:3]


def test_a_change_that_changes_nothing_is_no_candidate(outputs):
    # offset_dtype on a plain-gamma convention: 0 + w is w in any dtype
    found = diagnosis.diagnose(outputs("rms_norm", "olmo2", {"eps_placement": "outside"}), "rms_norm", "olmo2")
    assert found.matches[0].name == "eps-outside-sqrt"
    assert not [m for m in found.matches if m.changes == {"offset_dtype": "input"}]


def test_a_pair_must_explain_clearly_more_than_its_best_single(outputs):
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
    text = diagnosis.fix_for({"cast": "one_rounding"}, get_contract("rms_norm", "qwen3"), "qwen3")
    assert text.startswith("yours: the weight multiplied in float32") and "qwen3: the normalised value rounded" in text


@pytest.mark.parametrize("op, convention, constant, bug", [
    ("layer_norm", "torch", 1e-3, "eps-library-default"),  # keras' LayerNormalization default
    ("rms_norm", "llama", 1e-5, "eps-hardcoded"),  # Llama's own 1e-5, whatever eps it is handed
    ("rms_norm", "qwen3", 1e-5, "eps-wrong-value"),  # another family's value
])
def test_a_constant_eps_is_named_by_where_the_constant_comes_from(op, convention, constant, bug, outputs):
    # the cases at the constant itself agree; diagnosis sees the disagreeing ones
    wrong, right = (outputs(op, convention, changes, eps=("config", 1e-6, 1e-5)) for changes in ({"eps": constant}, {}))
    differ = {cid: out for cid, out in wrong.items() if not np.array_equal(out, right[cid], equal_nan=True)}
    found = diagnosis.diagnose(differ, op, convention)
    best = found.matches[0]
    assert best.name == bug and best.changes == {"eps": constant} and best.convincing, found.matches[:3]


def test_a_pair_is_found_where_neither_change_alone_explains_a_case(outputs):
    # 1 + w and the inverted rsqrt: away from rms 1 each alone is still far off
    changes = {"weight_offset": 1.0, "inverted": True}
    found = diagnosis.diagnose(outputs("rms_norm", "qwen3", changes, regimes=("tiny_rms:1e-3", "tiny_rms:1e-2",
                                                                              "mean_shift:1")), "rms_norm", "qwen3")
    top = found.matches[0]
    assert top.changes == changes and top.name == "gamma-plus-one + rsqrt-inverted" and top.convincing
    assert "neither alone" in top.symptom


def test_two_catalogued_layer_norm_mistakes_are_named_as_a_pair(outputs):
    # the held-out round's unbiased variance together with a one-pass variance
    changes = {"correction": 1, "variance_form": "one_pass"}
    found = diagnosis.diagnose(outputs("layer_norm", "torch", changes, regimes=("normal", "narrow:0.1", "narrow:1",
                                                                                  "mean_shift:1"),
                                       dtypes=("float32", "float16")), "layer_norm", "torch")
    top = found.matches[0]
    assert top.changes == changes and set(top.name.split(" + ")) == {"ln-unbiased-variance", "ln-one-pass-variance"}


def test_a_pair_names_its_catalogued_bug_before_a_change_in_words():
    a = diagnosis.Match("the normalised value rounded", {"cast": "llama"}, 3, 11, 1.0, "")
    b = diagnosis.Match("ln-one-pass-variance", {"variance_form": "one_pass"}, 2, 11, 1.0, "")
    assert diagnosis._pair_name(a, b) == "ln-one-pass-variance + the normalised value rounded"


@pytest.mark.parametrize("op", sorted({b.op for b in BUGS.values()}))
def test_every_change_the_search_tries_is_said_in_words(op):
    # a diagnosis line names a catalogued bug or says the change as a person would, never `knob = value`
    from normdiff.harness.data.conventions import CONVENTIONS

    for conv in CONVENTIONS.values():
        if op in conv.contracts:
            for cand in diagnosis.candidates(op, conv.name):
                for knob, value in cand.changes.items():
                    assert KNOBS[knob].text(value) != f"{knob} = {value!r}", (op, conv.name, knob, value)


def test_a_diagnosis_reworded_for_a_convention_of_the_same_contract_names_it_everywhere():
    # identify.py diagnoses once per contract and rewords for each convention with it
    base = get_contract("rms_norm", "olmo2")
    assert get_contract("rms_norm", "torch") == base
    changes = {"cast": "llama"}
    pair = diagnosis.Match(f"eps-outside-sqrt + {diagnosis.in_words(changes, base, 'olmo2')}",
                           {"eps_placement": "outside", **changes}, 3, 4, 1.0,
                           diagnosis.fix_for({"eps_placement": "outside", **changes}, base, "olmo2"))
    found = diagnosis.reworded(diagnosis.Diagnosis([pair], [], 4), "olmo2", "torch")
    (m,) = found.matches
    assert m.name == f"eps-outside-sqrt + {diagnosis.in_words(changes, base, 'torch')}"
    assert m.fix == diagnosis.fix_for({"eps_placement": "outside", **changes}, base, "torch")
    assert "olmo2" not in m.name + m.fix and (m.matched, m.of, found.examined) == (3, 4, 4)
    # a name that merely contains another convention's name is not touched
    other = diagnosis.reworded(diagnosis.Diagnosis([pair], [], 4), "qwen3", "llama")
    assert other.matches[0].name == pair.name and other.matches[0].fix == pair.fix


def test_a_masked_tail_is_named_only_when_every_power_of_two_width_agrees():
    """Wrong at widths that are not a power of two and right at every power of two: a kernel's
    masked tail (diagnosis.masked_tail_match); any disagreeing power-of-two width, or no agreeing one,
    is something else."""
    bad = ["rms_norm@qwen3/bf16/8x769/normal/w=trained", "rms_norm@qwen3/fp32/4x200/normal/w=trained"]
    good = ["rms_norm@qwen3/bf16/8x1024/normal/w=trained"]
    found = diagnosis.masked_tail_match(bad, good)
    assert found.name == "masked-tail" and found.changes == {"widths": [200, 769]} and found.share == 1.0
    assert diagnosis.masked_tail_match(bad + good, []) is None
    assert diagnosis.masked_tail_match(bad, ["rms_norm@qwen3/bf16/8x123/normal/w=trained"]) is None
    heads = ["qk_norm@qwen3/bf16/4x8x96/normal/w=trained"]  # a head is the row a QK-norm kernel tiles
    assert diagnosis.masked_tail_match(heads, ["qk_norm@qwen3/bf16/4x6x128/normal/w=trained"]).changes == {"widths": [96]}
