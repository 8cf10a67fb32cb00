"""Named suites: TOML data files in cases/suites/, each a list of groups expanded as grids.

A group is a cartesian product:

    [[group]]
    ops = ["rms_norm"]                  # op names
    conventions = ["qwen3", "olmo2"]    # every (op, convention) pair must be defined
    dtypes = ["float32", "bfloat16"]
    shapes = ["8x1024", "4x4096"]       # as the op writes its shape: rows x width, rows x heads x head_dim
    regimes = ["normal", "tiny_rms:1e-3"]   # x's input regimes ("inputs" is the old name, still read)
    weights = ["trained"]               # ops with a weight (default ["ones"])
    gates = ["open", "closed"]          # ops with a gate (default ["open"])
    eps = ["config", 1e-5]              # eps values ("config": each convention's own; the default)
    samples = 1                         # independent draws of each combination

The operand keys (weights, gates, ...) come from the op records (harness/data/ops.py: an operand's
suite_key); an op that does not take an operand ignores its key. Pairs a convention does not define
are an error, not silently dropped: a suite says what it means.
"""
from __future__ import annotations

import itertools
import tomllib
import warnings
from dataclasses import dataclass
from pathlib import Path

from normdiff.cases.model import Case
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import OPS

SUITE_DIR = Path(__file__).parent / "suites"
# the operands' suite keys, in the op records' order (weights, gates): product order and case order
OPERAND_KEYS = tuple(dict.fromkeys(o.suite_key for op in OPS.values() for o in op.chosen))
_GROUP_KEYS = {"ops", "conventions", "dtypes", "shapes", "regimes", "eps", "samples", *OPERAND_KEYS}
RENAMED_KEYS = {"inputs": "regimes"}  # old name -> new name; the old one is still read


class SuiteError(UsageError):
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


def _renamed(group: dict, where: str) -> dict:
    group = dict(group)
    for old, new in RENAMED_KEYS.items():
        if old in group:
            if new in group:
                raise SuiteError(f"{where}: both '{old}' and '{new}' are given; '{old}' is the old name of "
                                 f"'{new}': keep only '{new}'")
            warnings.warn(f"{where}: the suite key '{old}' is now called '{new}'; rename it", FutureWarning,
                          stacklevel=2)
            group[new] = group.pop(old)
    return group


def expand(group: dict, where: str = "a Python group") -> list[Case]:
    """The cases of one group (a dict with the keys a suite file's [[group]] has), as a suite file
    expands it: from Python, `expand(dict(ops=["rms_norm"], conventions=["qwen3"], ...))`. Each
    case once (an op ignores the keys of operands it does not take, which would repeat it)."""
    return list({case.id: case for case in _expand(group, where)}.values())


def _expand(group: dict, where: str):
    group = _renamed(group, where)
    extra = set(group) - _GROUP_KEYS
    if extra:
        raise SuiteError(f"{where}: unknown keys {sorted(extra)}; allowed: {sorted(_GROUP_KEYS)}")
    for key in ("ops", "conventions", "dtypes", "shapes", "regimes"):
        if not isinstance(group.get(key), list) or not group[key]:
            raise SuiteError(f"{where}: '{key}' must be a non-empty list")
    defaults = {o.suite_key: o.default for op in OPS.values() for o in op.chosen}
    operand_lists = [group.get(key, [defaults[key]]) for key in OPERAND_KEYS]
    samples = group.get("samples", 1)
    for op, conv, dtype, shape, regime, *picked, eps, sample in itertools.product(
            group["ops"], group["conventions"], group["dtypes"], group["shapes"], group["regimes"],
            *operand_lists, group.get("eps", ["config"]), range(samples)):
        try:
            yield _make_case(op, conv, dtype, shape, regime, dict(zip(OPERAND_KEYS, picked)), eps, sample)
        except UsageError as exc:
            raise SuiteError(f"{where}: {exc}") from None


def _make_case(op, conv, dtype, shape, regime, by_key: dict, eps, sample) -> Case:
    """The case; each operand the op chooses takes its regime from the group's key for it."""
    record = OPS.get(op)
    if record is None:
        raise UsageError(f"unknown op {op!r}; known: {', '.join(OPS)}")
    choices = {o.name: by_key[o.suite_key] for o in record.chosen}
    return Case.of(op, conv, dtype, shape, regime, sample, eps, **choices)
