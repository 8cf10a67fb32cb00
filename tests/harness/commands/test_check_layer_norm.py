"""`normdiff check` on a user's LayerNorm (tests/fixtures/user_layer_norm.py, plain NumPy): the
correct one agrees, the one-pass variance and the unbiased variance disagree and are named, and an
explicit LayerNorm backward (dx, dw, db) agrees."""
import pytest

USER = "tests/fixtures/user_layer_norm.py"


def test_a_correct_user_layer_norm_agrees(check_json):
    code, result = check_json(f"{USER}:layer_norm", "--op", "layer_norm", "--convention", "torch")
    assert code == 0 and result["verdict"] == "agrees", result["cases"]
    assert result["cases"]["total"] >= 60 and result["cases"]["agree"] == result["cases"]["total"]


@pytest.mark.parametrize("name, bug, regime", [("layer_norm_one_pass", "ln-one-pass-variance", "/narrow:"),
                                               ("layer_norm_unbiased", "ln-unbiased-variance", "")])
def test_a_wrong_variance_is_named(name, bug, regime, check_json):
    code, result = check_json(f"{USER}:{name}", "--op", "layer_norm", "--convention", "torch")
    assert code == 1 and result["verdict"] == "disagrees"
    assert result["diagnosis"][0]["bug"] == bug, result["diagnosis"]
    bad = [row["case_id"] for row in result["rows"] if row["outcome"] not in ("identical", "agree")]
    assert bad and all(regime in cid for cid in bad)  # the one-pass variance only where |mean| >> std


def test_an_explicit_layer_norm_backward_agrees_on_dx_dw_and_db(check_json):
    code, result = check_json(f"{USER}:layer_norm_backward", "--op", "layer_norm", "--convention", "torch",
                         "--pass", "backward")
    assert code == 0 and result["verdict"] == "agrees", result["cases"]
    assert {row["case_id"].rpartition("out=")[2] for row in result["rows"]} == {"dx", "dw", "db"}
