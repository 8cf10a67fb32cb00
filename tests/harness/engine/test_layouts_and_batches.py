"""The layout axis reaches implementations as laid out, and the batch-invariance check calls rows alone."""
import dataclasses


from normdiff.cases.model import Case
from normdiff.cases.suites import Suite
from normdiff.harness import api
from normdiff.harness.data.conventions import op_conventions
from normdiff.implementations import registry
from normdiff.implementations.entry import Implementation

LAYOUTS = ("transposed", "padded", "strided", "offset")
BASE = Case.of("rms_norm", "qwen3", "bfloat16", "8x96", weight="trained")


def _impl(fixtures_dir, module, attr, framework="numpy", **kw):
    return Implementation(f"fx-{attr}", "user", framework, f"{fixtures_dir / module}:{attr}",
                          frozenset(op_conventions()), **kw)


def _outcomes(report) -> dict:
    return {(r.implementation, r.case_id): r for r in report.results.itertuples()}


def test_layouts_reach_numpy_and_torch_and_are_unsupported_where_arrays_have_no_strides():
    cases = [BASE] + [dataclasses.replace(BASE, layout=name) for name in LAYOUTS]
    cases += [dataclasses.replace(c, dy="normal", output=o) for c in cases for o in ("dx", "dw")]
    report = api.run_suite(Suite("t", "", tuple(cases)), [registry.get(n) for n in ("numpy", "torch", "jax")])
    rows = report.results
    ran = rows[rows["implementation"].isin(["numpy", "torch"])]
    assert set(ran["outcome"].astype(str)) <= {"agree", "identical"} and len(ran) == 2 * len(cases)
    jax = rows[(rows["implementation"] == "jax") & (rows["layout"] != "contiguous")]
    assert set(jax["outcome"].astype(str)) == {"unsupported"}
    assert jax["detail"].str.contains("jax arrays have no strides").all()


def test_code_that_reads_memory_as_contiguous_fails_only_in_layouts(fixtures_dir):
    cases = tuple([BASE] + [dataclasses.replace(BASE, layout=name) for name in LAYOUTS])
    from normdiff.harness.commands.usercode import user_implementation

    target = fixtures_dir / "user_raw_pointer.py"
    impls = [user_implementation(f"{target}:rms_norm_torch", "rms_norm", "qwen3"),
             user_implementation(f"{target}:rms_norm_numpy", "rms_norm", "qwen3", framework="numpy")]
    got = _outcomes(api.run_suite(Suite("t", "", cases), impls))
    for impl in impls:
        assert str(got[(impl.name, BASE.id)].outcome) in ("agree", "identical")
        # offset is contiguous (misaligned only): a dense read of it is still right
        wrong = {c.layout for c in cases if str(got[(impl.name, c.id)].outcome) not in ("agree", "identical")}
        assert wrong == {"transposed", "padded", "strided"}, impl.name


def test_rows_alone_are_compared_bit_for_bit_and_a_claimer_that_varies_disagrees(fixtures_dir):
    checked = dataclasses.replace(Case.of("rms_norm", "qwen3.5", "float32", "16x1000", weight="trained"),
                                  batch_check=True)
    plain = Case.of("rms_norm", "qwen3.5", "float32", "8x1000", weight="trained")
    impls = [_impl(fixtures_dir, "misbehaving.py", "correct"),
             _impl(fixtures_dir, "misbehaving.py", "batch_dependent"),
             dataclasses.replace(_impl(fixtures_dir, "misbehaving.py", "batch_dependent"), name="fx-claims",
                                 batch_invariant=True)]
    got = _outcomes(api.run_suite(Suite("t", "", (checked, plain)), impls))
    assert got[("fx-correct", checked.id)].batch_invariant == "yes"
    varies = got[("fx-batch_dependent", checked.id)]
    assert varies.batch_invariant == "no" and str(varies.outcome) in ("agree", "identical")
    claims = got[("fx-claims", checked.id)]
    assert str(claims.outcome) == "disagree" and "claims batch invariance, but row 0 alone differs" in claims.detail
    assert all(got[(i.name, plain.id)].batch_invariant == "" for i in impls)  # not checked


def test_numpy_claims_batch_invariance_and_keeps_it_in_the_default_suites_checks():
    numpy = registry.get("numpy")
    assert numpy.batch_invariant
    from normdiff.cases import suites
    cases = tuple(c for c in suites.load("default").cases if c.batch_check)[:4]
    rows = api.run_suite(Suite("t", "", cases), [numpy]).results
    assert set(rows["batch_invariant"]) == {"yes"} and set(rows["outcome"].astype(str)) <= {"agree", "identical"}
