"""The own JAX implementation: accuracy against the float64 oracle, agreement with the own NumPy
implementation step by step, every knob honoured, and compiled code reused across eps and rows."""
from __future__ import annotations

import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import ml_dtypes  # noqa: E402

from normdiff.cases import suites  # noqa: E402
from normdiff.cases.model import Case, CaseInputs  # noqa: E402
from normdiff.harness.engine import judge  # noqa: E402
from normdiff.harness.data import contracts
from normdiff.harness.data.knobs import KNOBS  # noqa: E402
from normdiff.harness.engine import oracle  # noqa: E402
from normdiff.harness.data.budgets import budget_for  # noqa: E402
from normdiff.harness.data.ops import OPS  # noqa: E402
from normdiff.harness.data.conventions import get_contract, op_conventions  # noqa: E402
from normdiff.harness.data.dtypes import get_format  # noqa: E402
from normdiff.implementations import numpy_own  # noqa: E402


@pytest.fixture(scope="module")
def jax_own():
    # the import turns the compilation cache on; conftest.py has pointed NORMDIFF_JAX_CACHE away
    # from the user's directory before any test module is collected
    from normdiff.implementations import jax_own

    return jax_own


DTYPES = ("float32", "bfloat16", "float16")
REGIMES = ("normal", "tiny_rms:1e-4", "zero_rows", "mean_shift:3")


def cases(op: str, convention: str, dtype: str, weights=("trained", "ones", "large")):
    """Every regime x weight x gate for one pair. Row counts that are not powers of two exercise
    the padding; width 96 makes the division by n inexact in float32."""
    heads = "num_heads" in OPS[op].dims
    return suites.expand(dict(ops=[op], conventions=[convention], dtypes=[dtype],
                              shapes=["5x4x64" if heads else "6x96"],
                              regimes=list(REGIMES + (("head_scales:lognormal",) if heads else ())),
                              weights=list(weights), gates=["open", "closed"]))


def ulp_error(out: np.ndarray, ref: np.ndarray, dtype: str, op: str = "", num_heads: int = 1) -> np.ndarray:
    """In ULPs of `dtype` at ref; for qk_norm_rope at its rotation pair's magnitude, as the judge."""
    with np.errstate(invalid="ignore"):
        err = np.abs(out.astype(np.float64) - ref) / get_format(dtype).ulp(judge.ulp_magnitude(ref, op, num_heads))
    return np.where(np.isnan(ref) & np.isnan(out.astype(np.float64)), 0.0, err)


def budget(case: Case) -> float:
    """The harness's budget (harness/data/budgets.py), except in float32, where jax_own's XLA sums
    are tree-shaped and land within 16 ulp: tighter than the budget, which admits sequential sums."""
    if case.dtype == "float32" and case.op != "qk_norm_rope":
        return 16.0
    return budget_for(case.dtype, case.op, case.span)


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    u = f"u{a.itemsize}"
    both_nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    return (a.view(u) == b.view(u)) | both_nan


# ---- accuracy against the oracle, dtype and shape ---------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op,convention", op_conventions(), ids=[f"{o}@{c}" for o, c in op_conventions()])
def test_error_vs_oracle_within_budget(op, convention, dtype, jax_own):
    worst, worst_id = 0.0, ""
    for case in cases(op, convention, dtype):
        inputs = case.inputs()
        out = jax_own.run(op, case.contract, inputs)
        assert isinstance(out, np.ndarray)
        x = inputs.arrays["x"]
        assert out.dtype == x.dtype and out.shape == x.shape, case.id
        ref = oracle.evaluate(case.contract, inputs.as_float64(), inputs.num_heads)
        assert np.isfinite(ref).all(), case.id  # conventions have eps inside: no NaN anywhere
        err = ulp_error(out, ref, dtype, op, case.num_heads).max()
        assert err <= budget(case), f"{case.id}: {err:.3f} ulp > {budget(case)}"
        if err >= worst:
            worst, worst_id = err, case.id
    print(f"max {worst:.3f} ulp on {worst_id}")


# ---- agreement with numpy_own --------------------------------------------------------------


@pytest.mark.parametrize("dtype", ("bfloat16", "float16"))
def test_bit_identical_to_numpy_own_on_conventions(dtype, jax_own):
    same = total = 0
    for op, convention in op_conventions():
        for case in cases(op, convention, dtype):
            inputs = case.inputs()
            agree = same_bits(jax_own.run(op, case.contract, inputs),
                              numpy_own.run(op, case.contract, inputs))
            same, total = same + agree.sum(), total + agree.size
    # the rest is XLA's rsqrt, which differs from NumPy's 1 / sqrt in ~30% of float32 values
    print(f"{dtype}: {same}/{total} = {same / total:.6f} bit-identical")
    assert same / total >= 0.999


def knob_mutants(base: contracts.Contract):
    """The contract with each knob turned to each other legal value."""
    values = {name: KNOBS[name].values for name in ("eps_placement", "eps_scale", "statistic", "scope", "gate_activation",
                                                     "gate_order", "cast", "offset_dtype", "rope_order")}
    values.update(weight_offset=(0.0, 1.0, 2.0), eps=(1e-5, 1e-6))
    for knob, legal in values.items():
        for value in legal:
            if getattr(base, knob) != value:
                yield f"{knob}={value}", base.replace(**{knob: value})


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_knob_matches_numpy_own(dtype, jax_own):
    """Each knob mutant (stats_dtype apart, see below) agrees with numpy_own: bit-identical on
    >= 99.9% of elements in bf16/fp16, within 16 ulp in float32 (rsqrt, exp, summation order)."""
    stats = {}
    distinct = {get_contract(op, conv): (op, conv) for op, conv in op_conventions()}  # qwen3.5 = qwen3-next
    for op, convention in distinct.values():
        for case in cases(op, convention, dtype, weights=("trained",)):
            inputs = case.inputs()
            for name, c in knob_mutants(case.contract):
                ours, theirs = jax_own.run(op, c, inputs), numpy_own.run(op, c, inputs)
                assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
                if dtype == "float32":
                    ref = theirs.astype(np.float64)
                    assert ulp_error(ours, ref, dtype, op, case.num_heads).max() <= 16, f"{case.id} {name}"
                agree = same_bits(ours, theirs)
                s, t = stats.get(name, (0, 0))
                stats[name] = (s + agree.sum(), t + agree.size)
    if dtype != "float32":
        low = {k: s / t for k, (s, t) in stats.items() if s / t < 0.999}
        assert not low, f"knobs where jax_own and numpy_own differ on > 0.1% of elements: {low}"


@pytest.mark.parametrize("dtype", ("float32", "float16"))
def test_stats_in_input_dtype_matches_numpy_own(dtype, jax_own):
    # Not bf16: ml_dtypes sums bfloat16 sequentially in bfloat16 (numpy_own's sum of 4096 squares
    # stagnates near 2048), while jnp.sum, like torch on CPU, accumulates in float32 and rounds
    # once.
    # In float16 both accumulate in float32; only the summation order differs, and a stat that
    # rounds to a neighbouring float16 moves a whole row: hence 99%, not 99.9%.
    same = total = 0
    for op, convention in op_conventions():
        for case in cases(op, convention, dtype, weights=("trained",)):
            inputs = case.inputs()
            c = case.contract.replace(stats_dtype="input")
            ours, theirs = jax_own.run(op, c, inputs), numpy_own.run(op, c, inputs)
            if dtype == "float32":  # the same maths as stats_dtype="float32"
                assert ulp_error(ours, theirs.astype(np.float64), dtype, op, case.num_heads).max() <= 16, case.id
            agree = same_bits(ours, theirs)
            same, total = same + agree.sum(), total + agree.size
    print(f"{dtype}: {same / total:.6f} bit-identical")
    assert dtype == "float32" or same / total >= 0.99


def test_fp16_statistics_overflow_gives_all_zeros(jax_own):
    case = Case.of("rms_norm", "qwen3", "float16", "4x128", regime="large")
    inputs = case.inputs()
    assert np.all(jax_own.run("rms_norm", case.contract.replace(stats_dtype="input"), inputs) == 0)
    assert np.all(np.isfinite(jax_own.run("rms_norm", case.contract, inputs)))
    assert np.all(jax_own.run("rms_norm", case.contract, inputs) != 0)


# ---- worked example, mutants, shapes ----------------------------------------------------------


def test_seed_example(jax_own):
    x = np.array([[3.0, 4.0]], np.float32)
    inputs = CaseInputs({"x": x, "weight": np.ones(2, np.float32)}, 1)
    out = jax_own.run("rms_norm", get_contract("rms_norm", "qwen3").replace(eps=0.0), inputs)
    np.testing.assert_allclose(out, [[0.8485281, 1.1313709]], rtol=1e-6)


def test_eps_outside_mutant_is_far_from_oracle(jax_own):
    case = Case.of("rms_norm", "qwen3", "float32", "6x96", regime="tiny_rms:1e-3", weight="trained")
    inputs = case.inputs()
    ref = oracle.evaluate(case.contract, inputs.as_float64())
    out = jax_own.run("rms_norm", case.contract.replace(eps_placement="outside"), inputs)
    assert ulp_error(out, ref, "float32").max() > 100


def test_eps_none_zero_row_is_nan_and_padding_stays_out(jax_own):
    case = Case.of("rms_norm", "qwen3", "float32", "3x16", regime="zero_rows")  # rows 0, 2 are zero
    out = jax_own.run("rms_norm", case.contract.replace(eps_placement="none"), case.inputs())
    assert out.shape == (3, 16)
    assert np.isnan(out[0]).all() and np.isnan(out[2]).all() and np.isfinite(out[1]).all()


def test_leading_dims_are_rows(jax_own):
    case = Case.of("qk_norm", "qwen3", "bfloat16", "6x4x32", "head_scales:lognormal", weight="trained")
    flat = case.inputs()
    x = flat.arrays["x"].reshape(2, 3, 128)
    inputs = CaseInputs({"x": x, "weight": flat.arrays["weight"]}, 4)
    out = jax_own.run("qk_norm", case.contract, inputs)
    assert out.shape == (2, 3, 128) and out.dtype == ml_dtypes.bfloat16
    assert same_bits(out, numpy_own.run("qk_norm", case.contract, inputs)).all()


# ---- rounding helper ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", (ml_dtypes.bfloat16, np.float16))
def test_round_matches_a_cast(dtype, jax_own):
    """_round must be the cast, subnormals, overflow and ties included (reduce_precision alone
    flushes float16 subnormals to zero)."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    edges = [65504, 65519.99, 65520, 2.9802322e-08, 2.9802326e-08, 6.1035156e-05, -0.0, np.inf,
             -np.inf, np.nan]
    tiny = (rng.standard_normal(200_000) * 1e-5).astype(np.float32)  # float16 subnormals
    v = np.concatenate([bits.view(np.float32), tiny, np.float32(edges)])
    got = np.asarray(jax.jit(lambda a: jax_own._round(a, dtype))(v))
    with np.errstate(over="ignore", invalid="ignore"):
        want = v.astype(dtype).astype(np.float32)
    assert same_bits(got, want).all()


# ---- compiled code reuse ----------------------------------------------------------------------


def test_new_eps_and_rows_reuse_the_compiled_function(jax_own):
    compiles = []

    def listener(event, duration, **kwargs):
        if event.startswith("/jax/core/compile/"):
            compiles.append(event)

    contract = get_contract("rms_norm", "llama")
    first = Case.of("rms_norm", "llama", "float32", "5x40").inputs()  # width 40: used by no other test
    jax_own.run("rms_norm", contract, first)
    n_functions, n_shapes = len(jax_own._JITTED), jax_own.jitted(contract, 1)._cache_size()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for rows, eps in ((7, 1e-5), (8, 1e-6), (6, 3e-7)):  # all pad to 8 rows
            inputs = Case.of("rms_norm", "llama", "float32", f"{rows}x40").inputs()
            out = jax_own.run("rms_norm", contract.replace(eps=eps), inputs)
            assert out.shape == (rows, 40)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []
    assert len(jax_own._JITTED) == n_functions
    assert jax_own.jitted(contract.replace(eps=1e-3), 1)._cache_size() == n_shapes


def test_weight_offset_is_traced_and_scope_full_ignores_heads(jax_own):
    c = get_contract("qk_norm", "olmo2")
    assert jax_own.static_key(c, 4) == jax_own.static_key(c.replace(weight_offset=1.0), 8)
    per_head = get_contract("qk_norm", "qwen3")
    assert jax_own.static_key(per_head, 4) != jax_own.static_key(per_head, 8)


def test_padded_rows(jax_own):
    assert [jax_own.padded_rows(n) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]


# ---- compilation cache directory --------------------------------------------------------------


def test_unwritable_cache_dir_leaves_cache_off(tmp_path, monkeypatch, jax_own):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(jax_own.CACHE_ENV, str(blocker / "cache"))  # a directory under a file
    assert jax_own.enable_compile_cache() is None
    monkeypatch.setenv(jax_own.CACHE_ENV, "")
    assert jax_own.enable_compile_cache() is None


def test_cache_dir_follows_the_environment(jax_own):
    expected = os.environ.get(jax_own.CACHE_ENV,
                              os.path.join(os.path.expanduser("~"), ".cache", "normdiff", "jax"))
    assert jax_own.CACHE_DIR == (expected or None)
    if expected:
        assert jax.config.jax_compilation_cache_dir == expected
