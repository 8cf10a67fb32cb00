"""`normdiff explain BUG`: its words follow its numbers. It calls a mutant plausible only by the
measures that say so, and the case it shows as looking right is one that passes something."""
import re

import numpy as np
import pandas as pd
import pytest

from normdiff.harness.analysis import quant_explain
from normdiff.harness.commands import explain
from normdiff.harness.data import quant


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


def test_plausible_leaves_out_assert_close_where_it_was_not_measured():
    """A quantizing op's codes are not held to assert_close (their judge brackets each code): its
    rows carry None there, and the sentence neither counts it for nor against the mutant."""
    said = explain._plausible(typical(assert_close=[None] * 3), "its q * scale", "calls")
    assert said.startswith("On typical N(0, 1) inputs (3 calls) its q * scale looks plausible by every measure")
    assert "assert_close" not in said


# ---- the quantizing mutants: the format's grid, where saturation bites, the error against the amax ----

def _representable(fmt_name: str) -> np.ndarray:
    """Every finite value of a quantized format, sorted: from its codes (ml_dtypes), or INT8's range."""
    fmt = quant.get_format(fmt_name)
    if not fmt.is_float:
        return np.arange(fmt.low, fmt.max + 1)
    codes = np.arange(256, dtype=np.uint8)
    if fmt_name == "float4_e2m1fn":
        codes = codes[:16]
    values = codes.view(fmt.np_dtype).astype(np.float64)
    return np.unique(values[np.isfinite(values)])


def _assert_adjacent(t: float, shown: str, fmt_name: str):
    """`shown` ('3.25 | 3.5', '448 | NaN beyond', 'on the grid: 448') names the format's values on
    either side of t: representable, with none between them, t between them."""
    grid = _representable(fmt_name)
    fmt = quant.get_format(fmt_name)
    if shown.startswith("on the grid: "):
        assert float(shown.split(": ")[1]) == t and t in grid
        return
    low, high = (part.strip() for part in shown.split("|"))
    if high.endswith("beyond"):
        assert float(low) == fmt.max == grid.max() and t > fmt.max
        return
    if low.endswith("beyond"):
        assert float(high) == fmt.low == grid.min() and t < fmt.low
        return
    low, high = float(low), float(high)
    assert low in grid and high in grid and low < t < high, (t, shown)
    assert not ((grid > low) & (grid < high)).any(), f"a value of {fmt_name} lies between {shown}"


@pytest.mark.parametrize("fmt_name", ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float4_e2m1fn", "int8"])
def test_the_grid_around_a_quotient_is_the_formats_own_neighbours(fmt_name):
    fmt = quant.get_format(fmt_name)
    rng = np.random.default_rng(7)
    quotients = np.concatenate([rng.uniform(-1.2, 1.2, 300) * fmt.max, rng.uniform(-0.02, 0.02, 50),
                                [3.3, -3.3, 430.0, 465.0, fmt.max * 1.1, -fmt.max * 1.1]])
    for t in quotients:
        _assert_adjacent(float(t), quant_explain.neighbours(float(t), fmt), fmt_name)
    assert quant_explain.neighbours(3.3, quant.get_format("float8_e4m3fn")) == "3.25 | 3.5"
    assert quant_explain.neighbours(430.0, quant.get_format("float8_e4m3fn")) == "416 | 448"
    assert quant_explain.neighbours(470.0, quant.get_format("float8_e4m3fn")) == "448 | NaN beyond"
    assert quant_explain.overflow(quant.get_format("float8_e4m3fn")) == 464.0
    assert quant_explain.overflow(quant.get_format("float8_e4m3fnuz")) == 248.0


GRID = re.compile(r"^ {6}(contract|mutant) +scale (\S+)(?: = 2\^(-?\d+))?, y / scale = (\S+) \((.*?)\) -> (.*)$")


def _quant_explained(bug_id: str) -> tuple[str, dict]:
    """explain's text for a quantizing bug, and its grid lines parsed: {(section, who): fields}."""
    pytest.importorskip("torch")
    text = explain.explain(bug_id)
    grids, section = {}, None
    for line in text.splitlines():
        if line.startswith(("Looks right here", "assert_close passes", "Nearest to right")):
            section = "right"
        elif line.startswith("Exposed by"):
            section = "worst"
        m = GRID.match(line)
        if m:
            who, scale, exponent, t, around, rest = m.groups()
            grids[(section, who)] = {"scale": float(scale), "exponent": exponent, "t": float(t),
                                     "around": around, "rest": rest}
    return text, grids


def _check_grids(grids: dict, fmt_name: str):
    assert {who for _, who in grids} == {"contract", "mutant"}
    for g in grids.values():
        _assert_adjacent(g["t"], g["around"], fmt_name)


def test_explain_quant_no_saturation_shows_the_nan_past_464_and_the_max_448():
    text, grids = _quant_explained("quant-no-saturation")
    lines = text.splitlines()
    # the cases shown are calls (their q), never a scale row
    shown = [line for line in lines if line.startswith(("Nearest to right", "Looks right here", "Exposed by"))]
    assert len(shown) == 2 and not any("out=scale" in line for line in shown), shown
    assert "torch.testing.assert_close" not in text and " ulp (" not in text  # no bf16 ULP wording for codes
    _check_grids(grids, "float8_e4m3fn")
    worst = grids[("worst", "mutant")]
    assert abs(worst["t"]) > 464 and worst["around"] in ("448 | NaN beyond", "NaN beyond | -448")
    assert worst["rest"].startswith("by the contract's rule 448 (clamped); it wrote NaN") or \
        worst["rest"].startswith("by the contract's rule -448 (clamped); it wrote NaN"), worst
    assert grids[("worst", "contract")]["rest"].startswith(("q 448 (clamped)", "q -448 (clamped)"))
    # where saturation bites: a positive count past 448, NaN written for some, 448 by the contract
    bites = re.search(r"with its scale (\d+) quotients \|y / scale\| pass 448, the largest (\S+);", text)
    assert bites and int(bites[1]) > 0 and float(bites[2]) > 464
    wrote = re.search(r"there it wrote NaN for (\d+)(?:, \+-448 for (\d+))?; the contract, with its own scale, "
                      r"\+-448 for (\d+)", text)
    assert wrote and int(wrote[1]) > 0 and int(wrote[1]) + int(wrote[2] or 0) == int(wrote[3]) == int(bites[1])
    assert "an unclamped cast rounds up to 464 to 448 and gives NaN past it" in text
    # the amax table: only the blocks whose amax lands past the max with its scale have NaN or error
    table = _amax_rows(text)
    assert all(r["nan"] == 0 for r in table if r["high"] <= 1.0) and any(r["nan"] > 0 for r in table if r["low"] >= 1.0)


def _amax_rows(text: str) -> list[dict]:
    """The amax table's bins: the key's range and the counts and errors of each."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Error against the block's amax"))
    rows = []
    for line in lines[start + 2:]:
        cells = line.split()
        if not cells or cells[0].startswith("(") or cells[0] == "amax":
            if not cells or cells[0].startswith("("):
                break
            continue
        low, _, high = cells[0].partition("-")
        rows.append({"low": float(low), "high": float(high or low), "blocks": int(cells[1]), "past": int(cells[-5]),
                     "nan": int(cells[-4]), "off": int(cells[-3]), "error": float(cells[-2]),
                     "contract": float(cells[-1])})
    return rows


def test_explain_quant_e8m0_rounded_down_shows_half_the_contracts_scale_and_the_saturation():
    text, grids = _quant_explained("quant-e8m0-rounded-down")
    _check_grids(grids, "float8_e4m3fn")
    for section in ("right", "worst"):
        contract, mutant = grids[(section, "contract")], grids[(section, "mutant")]
        assert mutant["scale"] * 2 == pytest.approx(contract["scale"], rel=1e-3)  # (4 digits shown)
        assert int(mutant["exponent"]) == int(contract["exponent"]) - 1  # one binade down, both powers of two
    assert "  its scale: 0.5 x the contract's (each case's median), 100% of a case's scales outside" in text
    assert "its scale is 0.5 x the contract's" in text
    # q is right given its (wrong) scale: the judge catches the scale, and the largest values saturate
    assert "its q, judged with its own scale: 0% of a case's codes outside the legal ones, 0 NaN or Inf; caught on 0/" in text
    bites = re.search(r"with its scale (\d+) quotients \|y / scale\| pass 448, the largest (\S+); with the contract's "
                      r"scale none\n +there it wrote \+-448 for (\d+)", text)
    assert bites and int(bites[1]) == int(bites[3]) > 0 and 448 < float(bites[2]) <= 896
    # every block's amax lands in (1, 2] x the max with its scale: all saturate, the error grows with it
    table = [r for r in _amax_rows(text)]
    assert all(1.0 <= r["low"] and r["high"] <= 2.0 and r["past"] > 0 for r in table)
    errors = [r["error"] for r in table]
    assert errors == sorted(errors) and errors[-1] > 3 * table[-1]["contract"]


def test_explain_quant_y_rounded_first_shows_one_code_off_in_the_formats_ulps():
    text, grids = _quant_explained("quant-y-rounded-first")
    _check_grids(grids, "float8_e4m3fn")
    worst = grids[("worst", "mutant")]
    once, wrote = re.match(r"by the contract's rule (\S+); it wrote (\S+), q \* scale", worst["rest"]).groups()
    fmt = quant.get_format("float8_e4m3fn")
    assert abs(float(wrote) - float(once)) == fmt.spacing(max(abs(float(wrote)), abs(float(once))))  # one code
    assert "in ULPs of float8_e4m3fn: its q is 1 from what the contract's rule writes for y / its scale, outside" in text
    assert "Badly wrong here: rms_norm_quant@sglang-fp8/bf16/" in text or "Badly wrong here: rms_norm_quant@sglang-fp8/fp16/" in text


def test_explain_quant_plot_adds_the_amax_panel(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    report = explain.run_bug(explain.get_bug("quant-e8m0-nearest"))
    q_ids = report.results.loc[report.results["output"] == "q", "case_id"]
    measured = [quant_explain.call_of(cid, report.outputs, "quant-e8m0-nearest") for cid in q_ids]
    points = quant_explain.amax_points([c for c in measured if c is not None])
    x, error = points["mutant"]
    _, contract = points["contract"]
    assert points["xlabel"] == "amax / (its scale x 448)" and points["max"] == 1.0
    # E8M0 rounded to nearest: the blocks it rounds down land past the max and lose more than the contract
    assert (x > 1).any() and (x <= 1).any() and error[x > 1].mean() > 2 * contract[x > 1].mean()
    assert np.allclose(error[x <= 1], contract[x <= 1])
    plot = tmp_path / "q.png"
    text = explain.explain("quant-e8m0-nearest", plot=str(plot))
    assert text.endswith(f"plot written to {plot}") and plot.read_bytes()[:4] == b"\x89PNG"
