"""Real Triton norm kernels registered as implementations (implementations/triton_kernels.py): Liger's
RMSNorm in its llama and gemma casting modes and its LayerNorm, fla's five norms, each on Triton's
interpreter under normdiff's layer, agree with every convention they are declared for, forward and
backward, in one run (one triton worker for all of them)."""
import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from normdiff.harness import api
from normdiff.implementations import catalog

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")
SUITE = "tests/fixtures/suites/triton_small.toml"
KERNELS = Path(sys.prefix) / "kernels"  # fla-core, beside the environment (the Makefile says why)


@pytest.fixture(scope="module")
def report():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(KERNELS))  # fla is found here, and imported from there by the worker
        patch.setenv("PYTHONPATH", str(KERNELS))
        kernels = catalog.triton_kernel_implementations()
        pairs = set().union(*(k.op_conventions for k in kernels))
        suite = api.check_suite(SUITE)
        # the small suite's cases, under each convention a kernel is declared for
        cases = {c.id: c for c in (dataclasses.replace(c, convention=conv) for c in suite.cases
                                   for op, conv in pairs if op == c.op)}
        why = {k.name: k.unavailable_reason() for k in kernels}
        return kernels, api.run_suite(type(suite)("kernels", "", tuple(cases.values())), kernels), why


@pytest.mark.parametrize("name", [k.name for k in catalog.triton_kernel_implementations()])
def test_each_kernel_agrees_with_its_conventions_forward_and_backward(report, name):
    kernels, run, why = report
    impl = next(k for k in kernels if k.name == name)
    if why[name]:
        pytest.skip(why[name])
    rows = run.results[(run.results["implementation"] == name) & (run.results["outcome"] != "unsupported")]
    assert set(rows["convention"]) == {c for _, c in impl.op_conventions}
    assert set(rows["pass"]) == {"forward", "backward"}
    bad = rows[~rows["outcome"].astype(str).isin(["identical", "agree"])]
    assert bad.empty, bad[["case_id", "outcome", "max_ulp"]].to_string()
