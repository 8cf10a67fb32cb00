"""Named suites: TOML data files in cases/suites/, each a list of groups expanded as grids.

A group is a cartesian product:

    [[group]]
    ops = ["rms_norm"]                  # op names
    conventions = ["qwen3", "olmo2"]    # every (op, convention) pair must be defined
    dtypes = ["float32", "bfloat16"]
    shapes = ["8x1024", "4x4096"]       # rows x width; rows x heads x head_dim for qk_norm
    inputs = ["normal", "tiny_rms:1e-3"]
    weights = ["trained"]               # ops with a weight (default ["ones"])
    gates = ["open", "closed"]          # gated_rms_norm (default ["open"])
    samples = 1                         # independent draws of each combination

Pairs a convention does not define are an error, not silently dropped: a suite says what it means.
"""
from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from normdiff.cases.model import Case
from normdiff.harness.contracts import OPS

SUITE_DIR = Path(__file__).parent / "suites"
_GROUP_KEYS = {"ops", "conventions", "dtypes", "shapes", "inputs", "weights", "gates", "samples"}


class SuiteError(ValueError):
    """A malformed suite file; the message names the file, the group and the fix."""


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    cases: tuple[Case, ...]
    path: Path | None = None

    def __len__(self) -> int:
        return len(self.cases)


def available() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SUITE_DIR.glob("*.toml"))}


def load(name_or_path: str) -> Suite:
    """A suite by name (cases/suites/NAME.toml) or by path to a TOML file."""
    path = Path(name_or_path)
    if not (path.suffix == ".toml" and path.exists()):
        suites = available()
        if name_or_path not in suites:
            raise SuiteError(f"unknown suite {name_or_path!r}; known: {', '.join(suites)} "
                             "(or give a path to a .toml suite file)")
        path = suites[name_or_path]
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: not valid TOML: {exc}") from None
    groups = data.get("group")
    if not isinstance(groups, list) or not groups:
        raise SuiteError(f"{path}: no [[group]] tables; a suite lists its cases as groups "
                         "(see cases/suites.py for the format)")
    cases: dict[str, Case] = {}
    for index, group in enumerate(groups, start=1):
        for case in _expand(group, f"{path.name} group {index}"):
            cases.setdefault(case.id, case)  # overlapping groups: a case runs once
    return Suite(path.stem, str(data.get("description", "")), tuple(cases.values()), path)


def _expand(group: dict, where: str):
    extra = set(group) - _GROUP_KEYS
    if extra:
        raise SuiteError(f"{where}: unknown keys {sorted(extra)}; allowed: {sorted(_GROUP_KEYS)}")
    for key in ("ops", "conventions", "dtypes", "shapes", "inputs"):
        if not isinstance(group.get(key), list) or not group[key]:
            raise SuiteError(f"{where}: '{key}' must be a non-empty list")
    samples = group.get("samples", 1)
    for op, conv, dtype, shape, regime, weights, gate, sample in itertools.product(
            group["ops"], group["conventions"], group["dtypes"], group["shapes"], group["inputs"],
            group.get("weights", ["ones"]), group.get("gates", ["open"]), range(samples)):
        try:
            yield _make_case(op, conv, dtype, shape, regime, weights, gate, sample)
        except ValueError as exc:
            raise SuiteError(f"{where}: {exc}") from None


def _make_case(op, conv, dtype, shape, regime, weights, gate, sample) -> Case:
    spec = OPS.get(op)
    if spec is None:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
    try:
        dims = [int(d) for d in str(shape).split("x")]
    except ValueError:
        raise ValueError(f"shape {shape!r} is not like '8x1024' or '8x4x128'") from None
    if spec.has_heads:
        if len(dims) != 3:
            raise ValueError(f"{op} shapes are rows x heads x head_dim, got {shape!r}")
        rows, heads, dim = dims
    else:
        if len(dims) != 2:
            raise ValueError(f"{op} shapes are rows x width, got {shape!r}")
        (rows, dim), heads = dims, 1
    return Case(op=op, convention=conv, dtype=dtype, rows=rows, head_dim=dim, num_heads=heads,
                regime=regime, weights=weights if spec.has_weight else "ones",
                gate=gate if spec.has_gate else "", sample=sample)
