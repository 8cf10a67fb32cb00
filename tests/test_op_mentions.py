"""Only the own implementations and the HF family table know particular ops (the own ones are written
independently per framework: that is the point of differential testing); every other module asks
the op's record (harness/data/ops/, one module per op, which holds its maths too).

A module *branches on an op* when an op's name is an operand of a comparison (`op == "qk_norm"`,
`op in ("rms_norm", ...)`), a key of a dict literal or a subscript, or a `match` pattern, or when it
reads one of the flags the first version's op spec had (`has_weight`, `has_gate`, `has_heads`).
Data that merely names an op (a Contract("rms_norm", ...), a Bug on rms_norm, a known finding's
column value, a built-in's declared pairs) is not a branch: it is what the op means to a convention,
a bug or an implementation.
"""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from normdiff.harness.data.ops import OPS

HERE = Path(__file__).resolve().parent
ALLOWED = {"normdiff.implementations.numpy_own", "normdiff.implementations.torch_own",
           "normdiff.implementations.jax_own", "normdiff.implementations.hf_families"}
FLAGS = {"has_weight", "has_gate", "has_heads"}


def _layers():
    spec = importlib.util.spec_from_file_location("layers", HERE / "test_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _is_op(node) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in OPS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_op(e) for e in node.elts)
    return False


def branches(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_is_op(n) for n in [node.left, *node.comparators]):
            found.append(f"line {node.lineno}: compares with an op name")
        elif isinstance(node, ast.Dict) and any(k is not None and _is_op(k) for k in node.keys):
            found.append(f"line {node.lineno}: a dict keyed by op names")
        elif isinstance(node, ast.Subscript) and _is_op(node.slice):
            found.append(f"line {node.lineno}: subscripted by an op name")
        elif isinstance(node, ast.MatchValue) and _is_op(node.value):
            found.append(f"line {node.lineno}: matches an op name")
        elif isinstance(node, ast.Attribute) and node.attr in FLAGS:
            found.append(f"line {node.lineno}: reads .{node.attr}")
    return found


def test_at_most_four_modules_branch_on_an_op():
    offenders = {m: b for m, src in _layers().sources().items() if (b := branches(src))}
    assert set(offenders) <= ALLOWED, {m: b for m, b in offenders.items() if m not in ALLOWED}
    assert len(ALLOWED) == 4


def test_the_detector_sees_each_kind_of_branch():
    assert branches('if op == "qk_norm": pass')
    assert branches('x = op in ("rms_norm", "l2_norm")')
    assert branches('CALLS = {"rms_norm": ("x", "weight", "eps")}')
    assert branches('y = OPS["gated_rms_norm"]')
    assert branches('if spec.has_gate: pass')
    assert branches('match op:\n    case "l2_norm": pass')
    assert not branches('c = Contract("rms_norm", cast="llama")')  # data naming an op
    assert not branches('if "gate" in arrays: pass')  # an operand, not an op
