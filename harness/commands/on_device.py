"""A Triton kernel on a GPU beside the interpreter: where a GPU is present, `normdiff check` runs a
Triton target's cases twice, interpreted on the CPU (the `triton` framework, which any CI can run)
and compiled on the device (`triton_gpu`), and puts the two side by side: the device run's own
verdict, and how far apart the two runs' outputs are case by case. The interpreter with normdiff's
layer computes what the GPU computes up to the order of a reduction inside tl.sum and libdevice's
last ulp (docs/triton.md), so a case where they are further apart than the judge's budget is a
difference the interpreter does not model: the device's answer is the one that ships. Without a
GPU the section says why it did not run, and nothing else changes.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from normdiff.harness import api
from normdiff.harness.engine.judge import output_format, ulp_apart
from normdiff.implementations.entry import Implementation
from normdiff.text import ulps

INTERPRETED, COMPILED = "triton", "triton_gpu"


def device_twin(impl: Implementation) -> Implementation | None:
    """The same user code compiled on a GPU (framework triton_gpu), or None when `impl` is not run
    by Triton's interpreter."""
    if impl.framework != INTERPRETED or impl.target is None:
        return None
    target = replace(impl.target, framework=COMPILED, forced=True)
    return replace(impl, framework=COMPILED, target=target, params=(), worker="")


def beside(impl: Implementation, cases, interpreted, timeout: float, keep_calling: bool, judge) -> dict:
    """The device section of a check: {} for code the interpreter does not run; {"skipped": why}
    without a GPU; else the compiled run's verdict and counts (`judge(report, twin)`: check's judged)
    and the side by side of the two runs' outputs (`interpreted`: the interpreter run's report)."""
    twin = device_twin(impl)
    if twin is None:
        return {}
    why = twin.unavailable_reason()
    if why:
        return {"skipped": why}
    report = api.run_suite(cases, [twin], timeout=timeout, keep_outputs=True, keep_calling=keep_calling,
                           diagnose=False)
    result = judge(report, twin)
    return {"verdict": result.verdict, "cases": result.cases,
            **side_by_side(interpreted.outputs, report.outputs, impl.name, twin.name, cases)}


def side_by_side(interpreted: dict, compiled: dict, name: str, twin: str, cases) -> dict:
    """How far apart the two runs' outputs are ({(case id, implementation): array} each): the cases
    both answered, how many are bit-identical, and the worst distance in ULPs of the case's output
    format (inf where their NaN or Inf patterns differ) with its case."""
    compared, identical, worst = 0, 0, {"case": "", "ulp_apart": 0.0}
    for case in cases.cases:
        a, b = interpreted.get((case.id, name)), compiled.get((case.id, twin))
        if a is None or b is None:
            continue
        compared += 1
        if np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True):
            identical += 1
            continue
        dist = ulp_apart(np.asarray(a), np.asarray(b), output_format(case))
        if dist > worst["ulp_apart"] or not worst["case"]:
            worst = {"case": case.id, "ulp_apart": dist}
    return {"compared": compared, "bit_identical": identical, "worst": worst if compared > identical else {}}


def lines(device: dict) -> list[str]:
    """The section as describe prints it (nothing for code the interpreter does not run)."""
    if not device:
        return []
    if "skipped" in device:
        return [f"  on a GPU: not run ({device['skipped']}); the verdict above is the interpreter's"]
    c = device["cases"]
    text = (f"  on a GPU (compiled): {device['verdict'].upper()}, {c['agree']} of {c['total']} agree; "
            f"beside the interpreter, {device['bit_identical']} of {device['compared']} cases bit-identical")
    worst = device.get("worst")
    if worst:
        text += f", at most {ulps(worst['ulp_apart'])} apart ({worst['case']})"
    return [text]
