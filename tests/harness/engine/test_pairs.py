"""The pairs table's rows (engine/pairs.py): each pair of distinct outputs measured once, and the
pairs of a run measured case by case while it is collected, the same rows as after it."""
from collections import Counter

import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.engine import judge, pairs, tables
from normdiff.harness.engine.runner import Outcome, prepare
from normdiff.implementations import registry


def outcomes_of(case_id: str, names=("numpy", "torch", "jax")) -> list[Outcome]:
    """Outcomes of `case_id`: the first two implementations with the correctly rounded bits, the
    third with its first element a ulp off."""
    p = prepare(Case.from_id(case_id))
    e = p.expected["y"]
    fmt = get_format(p.case.dtype)
    exact = e.ref.exact
    same = fmt.round(exact).astype(np.float32)
    off = same.copy()
    off[0, 0] += fmt.ulp(np.abs(exact[0, 0]))
    impls = [registry.get(n) for n in names]
    return [Outcome(p.case, impl, judge.judge(out, e.ref, fmt, e.budget), out, 0.0, e.ref.floor)
            for impl, out in zip(impls, (same, same.copy(), off))]


def test_pairs_of_the_same_bits_are_measured_once_and_read_alike(monkeypatch):
    outcomes = outcomes_of("rms_norm@qwen3/bf16/4x64/normal/w=ones")
    calls = []
    real = pairs.ulp_distance
    monkeypatch.setattr(pairs, "ulp_distance", lambda *a: calls.append(1) or real(*a))
    table = tables.pairs_frame(outcomes).set_index(["a", "b"])
    assert len(calls) == 1  # jax against numpy's bits, and the same bits of torch: one measurement
    assert table.loc[("jax", "numpy"), "max_ulp"] == table.loc[("jax", "torch"), "max_ulp"] > 0.5
    assert table.loc[("numpy", "torch"), "identical"] and not table.loc[("jax", "numpy"), "identical"]
    assert "same_nonfinite" not in table.columns


def test_a_cases_pairs_are_measured_when_its_last_outcome_arrives():
    first = outcomes_of("rms_norm@qwen3/bf16/4x64/normal/w=ones")
    second = outcomes_of("rms_norm@qwen3/fp16/4x64/normal/w=ones")
    pairing = pairs.Pairing(Counter(o.case.id for o in first + second))
    pairing.add(first[:2] + second[:1])
    assert pairing.rows == []  # neither case has all its outcomes yet
    pairing.add(first[2:])
    assert {r["case_id"] for r in pairing.rows} == {first[0].case.id} and len(pairing.rows) == 3
    pairing.add(second[1:])
    assert not pairing.pending
    collected = tables.pairs_frame(rows=pairing.rows)
    after = tables.pairs_frame(first + second)
    assert collected.equals(after) and len(after) == 6


@pytest.mark.parametrize("kind_of_third", ["mutant", "not run"])
def test_mutants_and_outcomes_without_output_take_no_part(kind_of_third):
    outcomes = outcomes_of("rms_norm@qwen3/bf16/4x64/normal/w=ones", ("numpy", "torch", "gamma-plus-one"))
    if kind_of_third == "not run":
        outcomes[2] = Outcome(outcomes[2].case, registry.get("jax"), judge.failure("timeout", "hung"))
    assert [(r["a"], r["b"]) for r in pairs.rows(outcomes)] == [("numpy", "torch")]
