"""`normdiff explain BUG`: its words follow its numbers. It calls a mutant plausible only by the
measures that say so, and the case it shows as looking right is one that passes something."""
import pandas as pd
import pytest

from normdiff.harness.commands import explain


def typical(**columns) -> pd.DataFrame:
    """Typical rows of a mutant: N(0, 1) inputs, finite, at the reference's scale, cosine 1, passing
    assert_close and the budget, unless `columns` say otherwise."""
    n = len(next(iter(columns.values()))) if columns else 3
    base = {"case_id": [f"op@conv/bf16/8x64/normal/w={i}" for i in range(n)], "dtype": ["bfloat16"] * n,
            "regime": ["normal"] * n, "outcome": ["agree"] * n, "nan_count": [0] * n, "inf_count": [0] * n,
            "rms_ratio": [1.0] * n, "cosine": [1.0] * n, "assert_close": [True] * n, "rel_l2": [1e-3] * n}
    return pd.DataFrame({**base, **columns})


def test_a_low_cosine_and_a_failing_assert_close_are_not_called_plausible():
    rows = typical(rms_ratio=[1.12, 2.0, 9.6], cosine=[-0.123354, 0.9, 0.999999], assert_close=[False] * 3,
                   outcome=["disagree"] * 3, rel_l2=[0.126, 1.0, 90.5])
    said = explain._plausible(rows)
    assert "looks plausible only by: finite (0 NaN or Inf). Not by:" in said
    assert "cosine to the reference as low as -0.123354 (below 0.99: it does not point the reference's way)" in said
    assert "output rms 1.12-9.6 x the reference's" in said.split("Not by:")[1]
    assert "pass it on 0/3" in said.split("Not by:")[1]


def test_plausible_by_every_measure_or_by_none():
    assert "it looks plausible by every measure here: finite" in explain._plausible(typical(cosine=[0.999] * 3))
    none = explain._plausible(typical(nan_count=[5, 0, 0], rms_ratio=[0.5] * 3, cosine=[0.1] * 3,
                                      assert_close=[False] * 3, outcome=["nan_mismatch"] * 3))
    assert "it does not look plausible by any measure here: 5 NaN or Inf;" in none
    near = explain._plausible(typical(assert_close=[False] * 3, outcome=["disagree"] * 3))
    assert "looks plausible only by: finite (0 NaN or Inf); output rms 1-1 x the reference's; cosine" in near
    assert near.endswith("Not by: torch.testing.assert_close's defaults pass it on 0/3; rel_l2 0.001-0.001.")


def test_the_case_shown_as_looking_right_passes():
    rows = typical(outcome=["disagree", "agree", "disagree"], cosine=[0.9999, 0.99, 0.9],
                   assert_close=[True, False, False])
    said, best = explain.closest_to_right(rows)
    assert said == "Looks right here" and best["outcome"] == "agree"
    said, best = explain.closest_to_right(rows.assign(outcome="disagree"))
    assert said == "assert_close passes it here, its budget does not" and bool(best["assert_close"])
    said, best = explain.closest_to_right(rows.assign(outcome="disagree", assert_close=False))
    assert said == "Nearest to right on typical inputs, and still caught" and best["cosine"] == 0.9999


def test_explain_says_what_the_mutants_numbers_say():
    pytest.importorskip("torch")
    gamma = explain.explain("gamma-plus-one")
    assert "it looks plausible only by: finite (0 NaN or Inf). Not by: output rms" in gamma
    assert "cosine to the reference as low as -0.12" in gamma and "pass it on 0/45" in gamma
    full = explain.explain("qk-norm-full-vector")
    shown = next(line for line in full.splitlines() if line.startswith(("Looks right here", "assert_close passes",
                                                                         "Nearest to right")))
    # every typical case catches it, and assert_close passes none: it is shown as caught, not as right
    assert shown.startswith("Nearest to right on typical inputs, and still caught: qk_norm@qwen3/bf16/"), shown
    assert "(disagree," in shown
