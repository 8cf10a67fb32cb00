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
    dy = ["normal", "aligned"]          # upstream-gradient regimes: each case also runs backward
    passes = ["backward"]               # which passes (default: forward, and backward when dy is given)
    layouts = ["contiguous", "transposed"]  # memory layouts (cases/layouts.py; default contiguous)
    batch_invariance = true             # also call rows alone: bit-identical to the same rows in the call?

A backward case judges each of its op's gradients (dx, dw, dgate) as a case of its own.
The operand keys (weights, gates, ...) come from the op records (harness/data/ops/: an operand's
suite_key); an op that does not take an operand ignores its key. Pairs a convention does not define
are an error, not silently dropped: a suite says what it means.

A suite is checked against SCHEMA before any case is made, and its size (case count, memory
estimate) before anything is drawn: a typo or an absurd shape fails at once with the file, the
group, the key and the fix, never as a traceback, a silently empty grid or a machine out of memory.
"""
from __future__ import annotations

import itertools
import json
import math
import numbers
import os
import re
import tomllib
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

from normdiff.cases import layouts, regimes
from normdiff.cases.model import Case, check_size
from normdiff.harness.data import inputs
from normdiff.harness.data.budgets import CHAINS
from normdiff.harness.data.conventions import CONVENTIONS
from normdiff.harness.data.dtypes import FORMATS, get_format
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import nearest, unknown
from normdiff.harness.data.ops import OPS, PASSES
from normdiff.text import byte_size

SUITE_DIR = Path(__file__).parent / "suites"
# the operands' suite keys, in the op records' order (weights, gates): product order and case order
OPERAND_KEYS = tuple(dict.fromkeys(o.suite_key for op in OPS.values() for o in op.chosen))
RENAMED_KEYS = {"inputs": "regimes"}  # old name -> new name; the old one is still read
TOP_KEYS = ("description", "group")  # a suite file's top-level keys
# Only the dtypes with a ULP budget: a case in any other (float64) could not be judged.
BUDGETED_DTYPES = tuple(f for f in FORMATS if f in CHAINS)

# A group's keys: key -> (kind, what one value is, the known values, required). Every kind but
# "samples" is a non-empty list; its values are checked against the tables the cases are built from
# (the dicts themselves, so an op or convention registered at run time is known), never a copy.
# "names": strings, each a known value; "regimes": input regimes, name and parameter checked
# (regimes.check_input_regime); "shapes": 'ROWSxWIDTH' or 'ROWSxHEADSxHEAD_DIM'; "eps": positive
# finite numbers or "config"; "samples": a whole number.
SCHEMA: dict[str, tuple] = {
    "ops": ("names", "op", OPS, True),
    "conventions": ("names", "convention", CONVENTIONS, True),
    "dtypes": ("names", "dtype", BUDGETED_DTYPES, True),
    "shapes": ("shapes", "shape", None, True),
    "regimes": ("regimes", "input regime", regimes.INPUT_REGIMES, True),
    **{o.suite_key: ("names", f"{o.table} regime", regimes.TABLES[o.table], False)
       for op in OPS.values() for o in op.chosen},
    "eps": ("eps", "eps", None, False),
    "samples": ("samples", "sample count", None, False),
    "dy": ("names", "gradient regime", regimes.GRADIENT_REGIMES, False),
    "passes": ("names", "pass", dict.fromkeys(PASSES), False),
    "layouts": ("names", "layout", layouts.LAYOUTS, False),
    "batch_invariance": ("flag", "true or false", None, False),
}
ELEMENTS = {"names": "strings", "regimes": "strings", "shapes": "strings",
            "eps": 'positive numbers or "config"'}
EXAMPLES = {"shapes": ["8x1024"], "eps": ["config", 1e-5], "samples": 2}  # the rest: a known value
_SHAPE = re.compile(r"\d+(?:x\d+){1,2}")

# Limits, checked before any case is made: a careless suite must not take the machine's memory.
MAX_SAMPLES = 1000
MAX_CASES = 100_000
MAX_SUITE_BYTES = 4 * 2 ** 30  # the default; NORMDIFF_MAX_SUITE_BYTES overrides it
# Bytes a run holds per element of a case's x: the runner draws and prepares every case before the
# workers start and keeps it to the end (harness/engine/runner.py), so memory is the sum over cases:
#   8   the float64 draw and the oracle's float64 copy of the inputs (one case at a time, so
#       transient: counted as headroom, since the largest case dominates a small suite)
#   8   the case-dtype inputs kept (x, and a gate as large as x, at most 4 bytes each)
#   42  the oracle's prepared reference (judge.Reference): exact, rounded, ulp, sign and the ULP
#       floor in float64 (5 x 8) and two bool masks
#   144 one output kept per implementation (case dtype, up to 4 bytes; a few dozen registered: 36)
# about 200: an estimate of the order of magnitude, not an accounting of every temporary.
BYTES_PER_ELEMENT = 8 + 8 + 42 + 36 * 4


class SuiteError(UsageError):
    """A malformed suite file; the message names the file, the group and the fix."""


@dataclass(frozen=True)
class Suite:
    """A suite: its name, description and cases (loaded from a TOML file by `load`)."""

    name: str
    description: str
    cases: tuple[Case, ...]
    path: Path | None = None

    def __len__(self) -> int:
        return len(self.cases)


def available() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SUITE_DIR.glob("*.toml"))}


def load(name_or_path: str) -> Suite:
    """A suite by name (cases/suites/NAME.toml) or by path to a TOML file; checked whole (SCHEMA,
    then the size limits) before any case is made."""
    path = Path(name_or_path)
    if not (path.suffix == ".toml" and path.exists()):
        suites = available()
        if name_or_path not in suites:
            raise SuiteError(f"{unknown('suite', name_or_path, suites)} (or give a path to a .toml suite file)")
        path = suites[name_or_path]
    try:  # a regular file of at most 16 MiB (a pipe, /dev/zero or a folder is refused by name)
        text = inputs.read_text(path, "suite", "give a .toml suite file")
    except inputs.InputError as exc:
        raise SuiteError(str(exc)) from None
    key = (str(path.resolve()), text)
    if key not in _LOADED:
        if len(_LOADED) >= _KEEP:
            _LOADED.clear()
        _LOADED[key] = _parse(path, text)
    return _LOADED[key]


# Suites already made in this process, by file and text: the default suite's 2100 cases take ~0.2 s
# to make, and one process (a notebook, `identify`, the corpus, a test session) loads it again and
# again. Suites and cases are frozen, so sharing them is safe; a changed file is another key.
_LOADED: dict[tuple[str, str], Suite] = {}
_KEEP = 16


def _parse(path: Path, text: str) -> Suite:
    try:
        data = inputs.toml_loads(text)
    except inputs.InputError as exc:
        raise SuiteError(str(exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: not valid TOML: {exc}") from None
    except inputs.TooDeep as exc:
        raise SuiteError(f"{path}: {exc}; a suite's groups are tables of lists") from None
    extra = [k for k in data if k not in TOP_KEYS]
    if extra:  # a misspelt [[groups]] would otherwise read as "no groups", or be ignored beside them
        raise SuiteError(f"{path}: {_unknown_keys(extra, TOP_KEYS, 'top-level key')}; a suite file has only: "
                         f"{', '.join(TOP_KEYS)}")
    if not isinstance(data.get("description", ""), str):
        raise SuiteError(f"{path}: 'description' must be a string, e.g. description = \"what this suite is for\"; "
                         f"got {_describe(data['description'])}")
    groups = data.get("group")
    if not groups:
        raise SuiteError(f"{path}: no [[group]] tables; a suite lists its cases as groups "
                         "(see cases/suites.py for the format)")
    if not isinstance(groups, list):
        raise SuiteError(f"{path}: 'group' must be an array of tables, each begun by [[group]] (two brackets); "
                         f"got {_describe(groups)}")
    checked = [(f"group {i}", _check_group(group, f"{path.name} group {i}")) for i, group in enumerate(groups, 1)]
    _check_size(path.name, checked)
    cases: dict[str, Case] = {}
    for label, group in checked:
        _merge(cases, _expand(group, f"{path.name} {label}"))
    return Suite(path.stem, data.get("description", ""), tuple(cases.values()), path)


def _merge(cases: dict, new) -> dict:
    """Add the `new` cases to `cases` (id -> case) once each: overlapping groups run a case once, in
    its first place, with the batch-invariance check if any of its groups asks for it."""
    for case in new:
        if case.id not in cases:
            cases[case.id] = case
        elif case.batch_check and not cases[case.id].batch_check:
            cases[case.id] = replace(cases[case.id], batch_check=True)
    return cases


def expand(group: dict, where: str = "a Python group") -> list[Case]:
    """The cases of one group (a dict with the keys a suite file's [[group]] has), as a suite file
    expands it: from Python, `expand(dict(ops=["rms_norm"], conventions=["qwen3"], ...))`. Each
    case once (an op ignores the keys of operands it does not take, which would repeat it)."""
    group = _check_group(group, where)
    _check_size(where, [("", group)])
    return list(_merge({}, _expand(group, where)).values())


# ---- the schema ---------------------------------------------------------------------------------


def _check_group(group, where: str) -> dict:
    """The group (old key names renamed), checked against SCHEMA; SuiteError names the key and the fix."""
    if not isinstance(group, dict):
        raise SuiteError(f"{where} is {_describe(group)}, not a table: begin each group with [[group]] "
                         "and give its keys as key = value lines")
    group = _renamed(group, where)
    extra = [k for k in group if k not in SCHEMA]
    if extra:
        raise SuiteError(f"{where}: {_unknown_keys(extra, SCHEMA, 'key')}; a group's keys are: {', '.join(SCHEMA)}")
    if "dy" in group and group.get("passes") == ["forward"]:
        raise SuiteError(f"{where}: 'dy' gives upstream gradients, which only the backward pass uses, and "
                         "'passes' is [\"forward\"]: add \"backward\" to passes or drop dy")
    for key, (kind, what, known, required) in SCHEMA.items():
        try:
            if key not in group:
                if required:
                    raise UsageError(f"'{key}' is missing: every group lists its {key}, e.g. "
                                     f"{key} = {_example(key)}")
            elif kind == "samples":
                _check_samples(group[key])
            elif kind == "flag":
                _check_flag(key, group[key])
            else:
                _check_list(key, group[key], required)
                for item in group[key]:
                    _CHECKS[kind](key, item, what, known)
        except UsageError as exc:
            raise SuiteError(f"{where}: {exc}") from None
    return group


def _check_list(key: str, value, required: bool) -> None:
    if not isinstance(value, (list, tuple)):  # a bare string would be read as its letters
        raise UsageError(f"'{key}' must be a list of {ELEMENTS[SCHEMA[key][0]]}, e.g. {key} = "
                         f"{_example(key, value)}; got {_describe(value)}")
    if not value:
        raise UsageError(f"'{key}' is an empty list, which makes no cases: give at least one value, e.g. "
                         f"{key} = {_example(key)}" + ("" if required else ", or leave the key out"))


def _check_name(key: str, item, what: str, known) -> None:
    _check_string(key, item)
    name = item
    if key == "dtypes":  # dtype aliases ('bf16') read as the dtype they name
        try:
            name = get_format(item).name
        except UsageError:
            pass
        if name in FORMATS and name not in known:
            raise UsageError(f"'{key}': {item!r} has no ULP budget (harness/data/budgets.py), so its cases "
                             f"could not be judged; known: {', '.join(known)}")
    if name not in known:
        raise UsageError(f"'{key}': {unknown(what, item, known)}")


def _check_regime(key: str, item, what: str, known) -> None:
    _check_string(key, item)
    name = regimes.split(item)[0]
    if name not in known:
        raise UsageError(f"'{key}': {unknown(what, name, known)}")
    try:
        regimes.check_input_regime(item, None)  # the parameter; whether the op has heads: at its case
    except UsageError as exc:
        raise UsageError(f"'{key}': {exc}") from None


def _check_shape(key: str, item, what: str, known) -> None:
    _check_string(key, item)
    dims = [int(d) for d in item.split("x")] if _SHAPE.fullmatch(item) else []
    if not dims or min(dims) < 1:
        raise UsageError(f"'{key}': {item!r} is not a shape of positive whole numbers like '8x1024' "
                         "(rows x width) or '8x4x128' (rows x heads x head_dim)")
    try:
        check_size(dims[0], math.prod(dims[1:]))
    except UsageError as exc:
        raise UsageError(f"'{key}': {item!r}: {exc}") from None


def _check_eps(key: str, item, what: str, known) -> None:
    if item == "config":
        return
    if isinstance(item, str):
        raise UsageError(f"'{key}': {item!r} is a string: write a number without quotes (eps = [1e-5]) or "
                         "\"config\" for each convention's own eps")
    if not (isinstance(item, numbers.Real) and not isinstance(item, bool) and 0 < item < math.inf):
        raise UsageError(f"'{key}' holds {_describe(item)}; an eps is a positive finite number or \"config\", "
                         "e.g. eps = [1e-5]")


_CHECKS = {"names": _check_name, "regimes": _check_regime, "shapes": _check_shape, "eps": _check_eps}


def _check_string(key: str, item) -> None:
    if not isinstance(item, str):
        raise UsageError(f"'{key}' must be a list of strings; it holds {_describe(item)}, e.g. "
                         f"{key} = {_example(key)}")


def _check_samples(value) -> None:
    # bool is an int in Python (true == 1); a float or "3" is a typo, not a count
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and 1 <= value <= MAX_SAMPLES):
        raise UsageError(f"'samples' must be a whole number from 1 to {MAX_SAMPLES} (the independent draws of "
                         f"each combination), e.g. samples = {_example('samples')}; got {_describe(value)}")


def _check_flag(key: str, value) -> None:
    if not isinstance(value, bool):
        raise UsageError(f"'{key}' must be true or false (no quotes), e.g. {key} = true; got {_describe(value)}")


def _renamed(group: dict, where: str) -> dict:
    group = dict(group)
    for old, new in RENAMED_KEYS.items():
        if old in group:
            if new in group:
                raise SuiteError(f"{where}: both '{old}' and '{new}' are given; '{old}' is the old name of "
                                 f"'{new}': keep only '{new}'")
            warnings.warn(f"{where}: the suite key '{old}' is now called '{new}'; rename it", FutureWarning,
                          stacklevel=4)
            group[new] = group.pop(old)
    return group


def _unknown_keys(extra: list, known, what: str) -> str:
    return (f"unknown {what}{'s' * (len(extra) > 1)} "
            + ", ".join(f"{k!r}{_did_you_mean(str(k), known)}" for k in extra))


def _did_you_mean(value: str, known) -> str:
    close = nearest(value, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _example(key: str, given=None) -> str:
    """A TOML value for `key`: the user's own value in a list when they gave a bare one."""
    if isinstance(given, (str, int, float)) and not isinstance(given, bool) and key != "samples":
        value = [given]
    elif key in EXAMPLES:
        value = EXAMPLES[key]
    else:
        value = [next(iter(SCHEMA[key][2]))]
    return json.dumps(value)


def _describe(value) -> str:
    """How the user wrote a value, in TOML's words: 'the string '3'', 'a table'."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    for kind, words in ((str, "the string"), (numbers.Integral, "the integer"), (numbers.Real, "the number"),
                        ((list, tuple), "the list")):
        if isinstance(value, kind):
            return f"{words} {value!r}"
    return "a table" if isinstance(value, dict) else f"{type(value).__name__} {value!r}"


# ---- size: before anything is made or drawn ----------------------------------------------------------


def _check_size(where: str, groups: list[tuple[str, dict]]) -> None:
    """Refuse a suite of more than MAX_CASES cases, or of more memory than the limit, from the
    checked groups' counts alone (no case is made; a case's inputs are drawn when it runs)."""
    sizes = [(label, shape, cases, cases * elements * BYTES_PER_ELEMENT)
             for label, group in groups for shape, cases, elements in _grid_sizes(group)]
    count = sum(s[2] for s in sizes)
    if count > MAX_CASES:
        by_group = {label: sum(s[2] for s in sizes if s[0] == label) for label, _ in groups}
        most = max(by_group, key=by_group.get)
        raise SuiteError(f"{where}: this suite makes up to {count} cases"
                         + (f" ({most} makes {by_group[most]})" if most else "")
                         + f"; the most is {MAX_CASES}: give its keys fewer values or split it into several suites")
    limit, total = _byte_limit(), sum(s[3] for s in sizes)
    if total > limit:
        label, shape, cases, _ = max(sizes, key=lambda s: s[3])
        raise SuiteError(f"{where}: this suite needs about {byte_size(total)} of memory (the most: {cases} "
                         f"case{'s' * (cases > 1)} of {shape}{' in ' + label if label else ''}); "
                         + _the_limit(limit, "use fewer rows or cases"))


def check_case_memory(rows: int, width: int, where: str, fix: str) -> None:
    """Refuse, before anything is drawn, one case (a replayed case, the largest a fuzz may draw)
    whose memory estimate is above the limit a suite has: the case a suite refuses, repro and
    fuzz refuse too, in the same words."""
    limit, needed = _byte_limit(), rows * width * BYTES_PER_ELEMENT
    if needed > limit:
        raise UsageError(f"{where}: a case of {rows} x {width} needs about {byte_size(needed)} of memory; "
                         + _the_limit(limit, fix))


def _the_limit(limit: int, fix: str) -> str:
    return f"the limit is {byte_size(limit)}: {fix}, or raise the limit with NORMDIFF_MAX_SUITE_BYTES=<bytes>"


def _grid_sizes(group: dict):
    """(shape, cases of that shape, elements of each case's x) per op and shape of a checked group;
    an op's count leaves out the keys of operands it does not take, as its expansion does."""
    forward, dys = _passes(group)
    for op in group["ops"]:
        keys = ["conventions", "dtypes", "regimes", "eps", "layouts", *(o.suite_key for o in OPS[op].chosen)]
        calls = math.prod(len(group.get(k, [None])) for k in keys) * group.get("samples", 1)
        cases = calls * (forward + len(dys) * len(OPS[op].gradients))
        for shape in group["shapes"]:
            rows, *rest = (int(d) for d in shape.split("x"))
            yield shape, cases, rows * math.prod(rest)


def _byte_limit() -> int:
    text = os.environ.get("NORMDIFF_MAX_SUITE_BYTES", "")
    if not text:
        return MAX_SUITE_BYTES
    try:
        return int(float(text))
    except ValueError:
        raise SuiteError(f"NORMDIFF_MAX_SUITE_BYTES must be a number of bytes, e.g. 17179869184 (16 GiB); "
                         f"got {text!r}") from None


def _expand(group: dict, where: str):
    """The cases of a checked group, in product order; a case the tables refuse (a pair the
    convention does not define, a shape the op does not take) is a SuiteError naming the group."""
    defaults = {o.suite_key: o.default for op in OPS.values() for o in op.chosen}
    operand_lists = [group.get(key, [defaults[key]]) for key in OPERAND_KEYS]
    forward, dys = _passes(group)
    for op, conv, dtype, shape, regime, *picked, eps, layout, sample in itertools.product(
            group["ops"], group["conventions"], group["dtypes"], group["shapes"], group["regimes"],
            *operand_lists, group.get("eps", ["config"]), group.get("layouts", [layouts.DEFAULT]),
            range(group.get("samples", 1))):
        try:
            case = _make_case(op, conv, dtype, shape, regime, dict(zip(OPERAND_KEYS, picked)), eps, sample,
                              layout)
            case = replace(case, batch_check=group.get("batch_invariance", False))
        except UsageError as exc:
            raise SuiteError(f"{where}: {exc}") from None
        if forward:
            yield from case.outputs()  # y, and a fused add's residual_out
        for dy in dys:
            yield from replace(case, dy=dy, output=next(iter(case.record.gradients))).outputs()


def _passes(group: dict) -> tuple[bool, list[str]]:
    """Whether a checked group runs forward, and its backward cases' dy regimes (none: no backward)."""
    passes = group.get("passes", ["forward", "backward"] if "dy" in group else ["forward"])
    dys = list(group.get("dy", ["normal"])) if "backward" in passes else []
    return "forward" in passes, dys


def _make_case(op, conv, dtype, shape, regime, by_key: dict, eps, sample, layout) -> Case:
    """The case; each operand the op chooses takes its regime from the group's key for it."""
    record = OPS[op]
    choices = {o.name: by_key[o.suite_key] for o in record.chosen}
    return Case.of(op, conv, dtype, shape, regime, sample, eps, layout=layout, **choices)


# ---- selecting a pass ---------------------------------------------------------------------------

PASS_CHOICES = ("forward", "backward", "both")


def one_per_call(cases) -> list:
    """The first case of each call (a fused add's y and residual_out, a backward call's gradients
    share one), in order."""
    calls: dict = {}
    for c in cases:
        calls.setdefault(c.call_id, c)
    return list(calls.values())


def for_pass(suite: Suite, which: str = "both") -> Suite:
    """The suite's cases of one pass ("forward" judges y, "backward" the gradients), or all ("both")."""
    if which not in PASS_CHOICES:
        raise UsageError(f"pass must be one of {', '.join(PASS_CHOICES)}; got {which!r}")
    if which == "both":
        return suite
    cases = tuple(c for c in suite.cases if c.pass_ == which)
    if not cases:
        raise UsageError(f"suite {suite.name!r} has no {which} cases"
                         + (": give a group dy = [\"normal\"] to run the backward pass" if which == "backward" else ""))
    return Suite(suite.name, suite.description, cases, suite.path)
