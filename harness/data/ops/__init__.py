"""The ops: one module per op in this folder, each holding its record (`OP`, record.py's `Op`): its
operands, call signatures, knobs, exact forward and VJP, rounding chain and where its ULPs are
counted. The folder is listed at import, so adding an op is adding its module (CONTRIBUTING.md, "Add
an op"); `norm.py` is the maths the norm ops share, `record.py` the types and the shared operands.

    from normdiff.harness.data.ops import OPS, get_op
"""
from __future__ import annotations

import importlib
import pkgutil

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown
from normdiff.harness.data.ops.record import CASE, HEAD_DIMS, PARAMS, PASSES, ROW, Op, Operand, Rounding  # noqa: F401

_NOT_OPS = {"record", "norm", "quantize"}  # the types, and the maths ops share


def _listed() -> dict[str, Op]:
    ops = []
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _NOT_OPS:
            ops.append(importlib.import_module(f"{__name__}.{info.name}").OP)
    return {op.name: op for op in sorted(ops, key=lambda op: (op.order, op.name))}


OPS: dict[str, Op] = _listed()
# a float operand's gradient, as the backward pass's output is named (results.csv `output`)
GRADIENT_NAMES: dict[str, str] = {o.name: o.gradient for op in OPS.values() for o in op.operands if o.dtype == "case"}


def get_op(name: str) -> Op:
    if name not in OPS:
        raise UsageError(unknown("op", name, OPS))
    return OPS[name]
