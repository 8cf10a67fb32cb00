"""Mutants: the catalogued bugs (harness/bugs.py) running in PyTorch.

A mutant is our own PyTorch module (torch_own.py) built from the convention's contract with one
knob turned the wrong way, so each one is exactly the small diff its bug entry describes
(`normdiff explain BUG` shows the right and the wrong formula). They are the harness's self-test:
the default suite must catch every one, and a mutant that starts agreeing means the harness went
blind. Each registry entry points at `normdiff.implementations.mutants:<bug id>`.
"""
from __future__ import annotations

import functools

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.bugs import BUGS, Bug
from normdiff.harness.data.contracts import Contract


def run_bug(bug: Bug, op: str, contract: Contract, inputs: CaseInputs):
    if contract.record.quantizes:  # the quantizing ops' own code is NumPy's (numpy_own.quantizing)
        from normdiff.implementations import numpy_own

        return numpy_own.run(op, contract.replace(**bug.changes), inputs)
    from normdiff.implementations import torch_own  # torch is imported in the worker only

    # the caller asks for the correct contract; the mutant computes it with its knob turned
    return torch_own.run(op, contract.replace(**bug.changes), inputs)


def __getattr__(name: str):
    if name in BUGS:
        return functools.partial(run_bug, BUGS[name])
    raise AttributeError(name)
