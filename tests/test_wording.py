"""normdiff.wording: every sentence that compares an error with its budget, word for word (the
reports, the judge's details in results.csv and the commands' output are compared byte for byte
across runs).
"""
from __future__ import annotations

import numpy as np
import pytest

from normdiff import wording

# ---- the sentences -----------------------------------------------------------------------------


def test_an_error_beside_its_budget():
    assert wording.with_budget(121.375, 2.0) == "121 ulp (budget 2)"
    assert wording.with_budget(43.5625, 5.4375) == "43.6 ulp (budget 5.44)"
    assert wording.with_budget(0.5, None) == "0.5 ulp (budget n/a)"
    assert wording.with_budget(0.5, float("nan")) == "0.5 ulp (budget n/a)"
    assert wording.against(43.5625, 5.4375) == "43.6 ulp against 5.44"
    assert wording.against(np.float64(1.2), 2) == "1.2 ulp against 2"
    assert wording.against_a_budget(1.59, 2.0) == "1.59 ulp against a budget of 2"
    assert wording.max_ulp_with_budget(121.375, 2.015625) == "max_ulp 121.375 (budget 2.01562 ulp)"
    assert wording.max_ulp_with_budget(None, float("nan")) == "max_ulp - (budget - ulp)"
    assert wording.budget_of(3.0, "bfloat16") == "budget 3 ulp of bfloat16"


def test_the_judges_channel_bias_detail():
    assert wording.channel_bias(np.float64(0.4567), 512, np.float64(0.31), 1.0) == (
        "coherent per-channel scale error: a channel's mean error is 0.46 ulp over 512 rows (budget 0.31), "
        "while every element is within 1.00 ulp")


def test_how_many_are_within_or_outside():
    assert wording.outside_the_budget("3 of 40 case(s) of rms_norm@qwen3") == \
        "3 of 40 case(s) of rms_norm@qwen3 outside the budget"
    assert wording.outside_the_budget("7 unexplained rows") == "7 unexplained rows outside the budget"
    assert wording.within_budget(35, 36, "swapped sites") == "35 of 36 swapped sites within budget"
    assert wording.all_within_budget(36, "sites", 1.2, 2.0, "model.norm") == \
        "all 36 sites within budget (worst 1.2 ulp against 2, model.norm)"
    assert wording.leaves_its_budget("the model's own class", "in the unswapped run at a (3 ulp against 2)") == \
        "the model's own class leaves its budget in the unswapped run at a (3 ulp against 2)"
    assert wording.first_out_of_budget("model.layers.0.input_layernorm", "rms_norm: 43.6 ulp against 2, disagree") \
        == "first site out of budget: model.layers.0.input_layernorm (rms_norm: 43.6 ulp against 2, disagree)"


def test_how_an_error_changed_against_its_budget():
    change = "max_ulp 1 -> 9"
    assert wording.still_within_budget("identical -> agree (max_ulp 0 -> 1.2)") == \
        "identical -> agree (max_ulp 0 -> 1.2), within budget"
    assert wording.grew_past_tolerance(change, 8.0, 2.0) == "max_ulp 1 -> 9: grew by 8, more than the tolerance 2 ulp"
    assert wording.shrank_past_tolerance(change, 8.125, 2.015625) == \
        "max_ulp 1 -> 9: shrank by 8.12, more than the tolerance 2.01562 ulp"
    assert wording.grew_share_of_budget("max_ulp 0.5 -> 0.9", 0.1, 2.0, "agree") == \
        "max_ulp 0.5 -> 0.9: grew by more than 10% of the 2 ulp budget, still agree"


@pytest.mark.parametrize("error, budget", [(121.375, 2.0), (0.0, 3.0), (np.float32(1.59), np.float64(2.015625)),
                                           (1e6, 1e-3), (float("inf"), 364.0)])
def test_the_sentences_give_the_strings_the_inline_code_gave(error, budget):
    """The f-strings each sentence replaced (reports/messages.py, check, fuzz, model, repro,
    engine/judge.py, reports/baseline.py), evaluated on the same values."""
    assert wording.with_budget(error, budget) == f"{error:.3g} ulp (budget {budget:.3g})"
    assert wording.against(error, budget) == f"{error:.3g} ulp against {budget:.3g}"
    assert wording.against_a_budget(error, budget) == f"{error:.3g} ulp against a budget of {budget:.3g}"
    assert wording.max_ulp_with_budget(error, budget) == f"max_ulp {error:.6g} (budget {budget:.6g} ulp)"
    assert wording.budget_of(budget, "float16") == f"budget {budget:.6g} ulp of float16"
    assert wording.channel_bias(error, 64, budget, error) == (
        f"coherent per-channel scale error: a channel's mean error is {error:.2f} ulp over 64 rows (budget "
        f"{budget:.2f}), while every element is within {error:.2f} ulp")
    assert wording.grew_past_tolerance("c", error, budget) == \
        f"c: grew by {error:.3g}, more than the tolerance {budget:g} ulp"
    assert wording.grew_share_of_budget("c", 0.1, budget, "agree") == \
        f"c: grew by more than {0.1:.0%} of the {budget:g} ulp budget, still agree"
