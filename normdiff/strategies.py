"""Hypothesis strategies for normdiff's cases, for `normdiff fuzz` and for your own Hypothesis tests::

    from hypothesis import given
    from normdiff import strategies as nds

    @given(nds.cases(op="rms_norm", convention="qwen3", dtypes=["bfloat16"]))
    def test_my_rms_norm(case):
        inputs = case.inputs()                  # the exact bits every implementation gets
        x, w = inputs.arrays["x"], inputs.arrays["weight"]
        ...                                     # case.contract.eps, case.id (replays with Case.from_id)

Every case drawn is a valid `Case` (cases/model.py), built directly from valid values (no filtering,
so no health check trips on rejected draws) and replayable from its id. The draws follow the case
model, each one chosen among the values the earlier ones allow::

    op@convention   a pair some convention defines (get_contract never raises for it)
    dtype           float32, bfloat16, float16: the dtypes with a ULP budget
    shape           rows, then the width (rows x width) or heads x head_dim as the op record writes it:
                    an even head_dim for an op that rotates pairs (qk_norm_rope), groups that divide
                    the width for a grouped norm (its groups ride on the head axis), a multiple of a
                    quantizing contract's block (32 for MX): a pair whose block is wider than
                    max_width is not drawn
    x's regime      cases/regimes.py INPUT_REGIMES; a parameterised one (tiny_rms:1e-3) takes its
                    parameter from a short fixed list, so ids stay short and comparable with the
                    suites'; the head regimes only for ops with heads
    operand regimes each operand the op chooses (weight, gate, bias, residual), its default first
    eps             the convention's config eps first, then 1e-6 and 1e-5
    layout          contiguous first (cases/layouts.py); broadcast only for an op with a per-case
                    operand, which it then holds constant (a varying weight drawn is taken as w=ones)
    pass            forward by default; a backward case draws its upstream gradient's regime and the
                    gradient it judges (a quantizing op, which has no backward, is drawn forward)
    sample          an independent draw of the same configuration, 0 first

Each list is ordered simplest first and integers shrink toward their least value, so a failing
example shrinks toward one row, the smallest width, x normal, the operands' defaults, the config eps,
contiguous memory and sample 0 (Hypothesis' sampled_from shrinks to its first element). Every op
draws the same sequence of choices (`cases`), so a shrink can also move to a simpler op@convention.

In the cases layer: it composes the case model and the data below it, nothing above.
"""
from __future__ import annotations

from collections.abc import Iterable

from hypothesis import strategies as st

from normdiff.cases import layouts as _layouts
from normdiff.cases import regimes as _regimes
from normdiff.cases.model import MAX_CASE_ELEMENTS, MAX_WIDTH, Case
from normdiff.cases.suites import BUDGETED_DTYPES, check_case_memory
from normdiff.harness.data.conventions import CONVENTIONS, get_contract
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.inputs import positive, whole
from normdiff.harness.data.names import resolve, several
from normdiff.harness.data.ops import OPS, PASSES, get_op

__all__ = ["cases", "case_ids", "op_conventions", "dtypes", "shapes_for", "input_regimes", "operand_regimes",
           "eps_values", "layouts", "samples", "block_of", "drawable", "PAIRS", "DTYPES", "REGIME_PARAMETERS", "EPS_VALUES"]

DTYPES = ("float32", "bfloat16", "float16")  # simplest first; every one has a budget
assert set(DTYPES) == set(BUDGETED_DTYPES), "a budgeted dtype the strategies do not draw"
# The parameters a parameterised input regime is drawn with: its default first (cases/regimes.py),
# then the values the suites use, so a fuzzed case id reads like a suite's
REGIME_PARAMETERS = {
    "tiny_rms": ("1e-3", "1e-2", "3e-4", "1e-4"),
    "mean_shift": ("1", "3", "0.3", "-2"),
    "narrow": ("1", "0.1", "4"),
    "head_scales": ("lognormal", "logspace"),
}
EPS_VALUES = (None, 1e-6, 1e-5)  # None: the convention's config eps; then the families' common values
# every (op, convention) pair, in the op records' order, then the conventions' order
PAIRS = tuple((op, c.name) for op in OPS for c in CONVENTIONS.values() if op in c.contracts)
DEFAULT_MAX_ROWS = 8
DEFAULT_MAX_WIDTH = 256
DEFAULT_MAX_HEADS = 8
DEFAULT_MAX_SAMPLE = 255


def _names(given, what: str) -> tuple | None:
    """None, one name or several: 'bfloat16' means ('bfloat16',), never its letters; anything but
    strings is a UsageError naming `what`."""
    if given is None:
        return None
    names = several(given, what)
    if not names:
        raise UsageError(f"{what}: give at least one, or None for all")
    return names


def _pair(item) -> tuple[str, str]:
    """(op, convention) from 'op@convention' or a pair of names, each read as the CLI reads it."""
    if isinstance(item, str):
        op, sep, convention = item.partition("@")
        if not sep:
            raise UsageError(f"an op@convention pair is written 'rms_norm@qwen3', got {item!r}")
    elif isinstance(item, (tuple, list)) and len(item) == 2:
        op, convention = item
    else:
        raise UsageError(f"pairs holds (op, convention) pairs or 'op@convention' strings; got {item!r}")
    return resolve("op", op, OPS, what="a pair's op"), resolve("convention", convention, CONVENTIONS, what="a pair's "
                                                                                                           "convention")


def allowed_pairs(op=None, convention=None, pairs=None) -> tuple[tuple[str, str], ...]:
    """The (op, convention) pairs that `op`, `convention` (a name or several, read as the CLI reads
    them: 'Qwen3' is qwen3) and `pairs` (an iterable of (op, convention) or 'op@convention'; None:
    every defined pair) allow, in PAIRS' order; UsageError when none is left or a name is unknown."""
    ops, conventions = _names(op, "op"), _names(convention, "convention")
    ops = ops and tuple(resolve("op", name, OPS) for name in ops)
    conventions = conventions and tuple(resolve("convention", name, CONVENTIONS, "normdiff list conventions")
                                        for name in conventions)
    if pairs is not None and (isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable)):
        raise UsageError(f"pairs must be an iterable of (op, convention) pairs or 'op@convention' strings; got "
                         f"{pairs!r}")
    given = None if pairs is None else {_pair(p) for p in pairs}
    out = tuple(p for p in PAIRS if (ops is None or p[0] in ops) and (conventions is None or p[1] in conventions)
                and (given is None or p in given))
    if not out:
        what = ", ".join(f"{k} {' or '.join(v)}" for k, v in (("op", ops), ("convention", conventions)) if v)
        raise UsageError(f"no op@convention pair is left to draw ({what or 'the pairs given'}): "
                         + (f"convention {' or '.join(conventions)} does not define {' or '.join(ops)}"
                            if ops and conventions and given is None else
                            "give an op and a convention that defines it (normdiff list conventions)"))
    return out


def op_conventions(op=None, convention=None, pairs=None) -> st.SearchStrategy[tuple[str, str]]:
    """(op, convention) pairs some convention defines (`allowed_pairs`), the first simplest."""
    return st.sampled_from(allowed_pairs(op, convention, pairs))


def dtypes(names=None) -> st.SearchStrategy[str]:
    """Canonical dtype names (aliases such as 'bf16' accepted), float32 first."""
    given = _names(names, "dtypes")
    if given is None:
        return st.sampled_from(DTYPES)
    wanted = {get_format(n).name for n in given}
    unbudgeted = sorted(wanted - set(DTYPES))
    if unbudgeted:
        raise UsageError(f"dtype {', '.join(unbudgeted)} has no ULP budget; cases are {', '.join(DTYPES)}")
    return st.sampled_from([d for d in DTYPES if d in wanted])


def _check_limits(max_rows: int, max_width: int, min_width: int, max_heads: int) -> None:
    for name, value in (("max_rows", max_rows), ("max_width", max_width), ("min_width", min_width),
                        ("max_heads", max_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{name} must be a whole number >= 1, got {value!r}")
    if min_width > max_width:
        raise UsageError(f"min_width {min_width} is above max_width {max_width}")
    if max_width > MAX_WIDTH or max_rows * max_width > MAX_CASE_ELEMENTS:
        raise UsageError(f"cases are at most {MAX_WIDTH} wide and {MAX_CASE_ELEMENTS} elements; got "
                         f"max_rows {max_rows} x max_width {max_width}")
    check_case_memory(max_rows, max_width, f"max_rows {max_rows} x max_width {max_width}",
                      "give a smaller max_rows or max_width")


def shapes_for(op: str, max_rows: int = DEFAULT_MAX_ROWS, max_width: int = DEFAULT_MAX_WIDTH, min_width: int = 1,
               max_heads: int = DEFAULT_MAX_HEADS) -> st.SearchStrategy[tuple[int, int, int]]:
    """(rows, width, num_heads) for `op`, as its record's dims write the shape: rows x width, or
    rows x heads x head_dim with width = heads * head_dim <= max_width (head_dim even where the op
    rotates pairs). Shrinks toward 1 row, then the narrowest width (one head)."""
    record = get_op(op)
    _check_limits(max_rows, max_width, min_width, max_heads)
    step = 2 if record.even_head_dim else 1
    if "num_heads" not in record.dims:
        return st.tuples(st.integers(1, max_rows), st.integers(min_width, max_width), st.just(1))
    if max_width < step:
        raise UsageError(f"{op} rotates pairs of channels: max_width must be at least 2")

    @st.composite
    def headed(draw):
        rows = draw(st.integers(1, max_rows))
        heads = draw(st.integers(1, max(1, min(max_heads, max_width // step))))
        # the narrowest head that keeps the width at least min_width, the widest that keeps it in bounds
        lowest = max(1, -(-min_width // (heads * step)))
        highest = max(lowest, max_width // (heads * step))
        head_dim = step * draw(st.integers(lowest, highest))
        return rows, heads * head_dim, heads

    return headed()


def _regime_names(op: str | None, wanted: tuple | None) -> list[str]:
    """x's input regimes for `op` (None: an op without heads), normal first, each parameterised one
    with its parameters; `wanted` keeps the families (tiny_rms) or full names (tiny_rms:1e-3) given."""
    dims = get_op(op).dims if op else ("rows", "width")
    names = []
    for name, spec in _regimes.INPUT_REGIMES.items():
        if spec.needs_heads and "num_heads" not in dims:
            continue
        params = REGIME_PARAMETERS.get(name, (spec.param_default,)) if spec.param_default else (None,)
        names += [name if p is None else f"{name}:{p}" for p in params]
    if wanted is not None:
        for w in wanted:
            _regimes.check_input_regime(w, None)
        full = [n for n in names if n in wanted or _regimes.split(n)[0] in wanted]
        # a full name with a parameter not in the fixed list is drawn as given
        names = full + [w for w in wanted if ":" in w and w not in full and _regimes.split(w)[0] in
                        {_regimes.split(n)[0] for n in names}]
    return sorted(names, key=lambda n: n != "normal")


def input_regimes(op: str | None = None, regimes=None) -> st.SearchStrategy[str]:
    """x's input regime names for `op` (with parameters: 'tiny_rms:1e-3'), "normal" first. `regimes`:
    families or full names to keep."""
    names = _regime_names(op, _names(regimes, "regimes"))
    if not names:
        raise UsageError(f"no input regime of {regimes!r} fits {op} (the head regimes need an op with heads)")
    return st.sampled_from(names)


def operand_regimes(op: str, constant_per_case: bool = False) -> st.SearchStrategy[tuple]:
    """The regimes of the operands `op` chooses, as Case.choices ((operand, regime), ...) in the
    record's order; each operand's default regime first (w=ones, z=open, b=zeros, r=normal).
    `constant_per_case`: the per-case operands (weight, bias) only constant (for a broadcast layout)."""
    record = get_op(op)
    parts = []
    for operand in record.chosen:
        table = list(_regimes.TABLES[operand.table])
        ordered = [operand.default] + [r for r in table if r != operand.default]
        if constant_per_case and operand.per_case_array:
            ordered = [r for r in ordered if r in _layouts.CONSTANT_WEIGHTS]
        parts.append(st.sampled_from(ordered).map(lambda regime, name=operand.name: (name, regime)))
    return st.tuples(*parts)


def eps_values(values: Iterable = EPS_VALUES) -> st.SearchStrategy[float | None]:
    """eps values: None (the convention's config eps) first, then the others given (each a finite
    number above 0)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise UsageError(f"eps must be a list of eps values (numbers, or None for the convention's own); got {values!r}")
    values = list(dict.fromkeys(None if v is None or (isinstance(v, str) and v == "config") else positive(v, "eps")
                                for v in values))
    if not values:
        raise UsageError("eps: give at least one value (None or 'config' for the convention's own)")
    return st.sampled_from(sorted(values, key=lambda v: v is not None))


def layouts(names=None, per_case: dict | None = None) -> st.SearchStrategy[str]:
    """Memory layouts (cases/layouts.py), contiguous first. `per_case` ({operand: regime} of a case's
    per-case operands; None: not known) leaves broadcast out unless all of them are constant."""
    given = _names(names, "layouts")
    for name in given or ():
        _layouts.get_layout(name)
    allowed = []
    for name, layout in _layouts.LAYOUTS.items():
        if given is not None and name not in given:
            continue
        if layout.moves == _layouts.PER_CASE and per_case is not None and (
                not per_case or any(r not in _layouts.CONSTANT_WEIGHTS for r in per_case.values())):
            continue
        allowed.append(name)
    if not allowed:  # only broadcast was asked, and these operands cannot hold it
        raise UsageError(f"no layout of {list(given or ())} fits operands {per_case}")
    return st.sampled_from(sorted(allowed, key=lambda n: n != _layouts.DEFAULT))


def samples(max_sample: int = DEFAULT_MAX_SAMPLE) -> st.SearchStrategy[int]:
    """A case's sample number (an independent draw of the same configuration), 0 first."""
    return st.integers(0, whole(max_sample, "max_sample", 0))


def _check_passes(passes) -> tuple[str, ...]:
    given = _names(passes, "passes")
    bad = [p for p in given if p not in PASSES]
    if bad:
        raise UsageError(f"passes are {', '.join(PASSES)}; got {', '.join(map(repr, bad))}")
    return tuple(p for p in PASSES if p in given)


def cases(op=None, convention=None, *, pairs=None, dtypes=None, passes=("forward",),
          max_rows: int = DEFAULT_MAX_ROWS, max_width: int = DEFAULT_MAX_WIDTH, min_width: int = 1,
          max_heads: int = DEFAULT_MAX_HEADS, regimes=None, layouts=None, eps: Iterable = EPS_VALUES,
          max_sample: int = DEFAULT_MAX_SAMPLE) -> st.SearchStrategy[Case]:
    """Valid cases, drawn in the case model's order (the module's docstring) and shrinking toward
    the simplest. Every argument narrows what is drawn::

        op, convention   a name or several (None: any); `pairs` an iterable of (op, convention) or
                         'op@convention' (what an implementation implements)
        dtypes           names (None: float32, bfloat16, float16)
        passes           "forward" and/or "backward" (a backward case: its dy regime and the gradient it judges)
        max_rows, max_width, min_width, max_heads   the shape's bounds
        regimes          x's input regimes: families (tiny_rms) or full names (tiny_rms:1e-4)
        layouts          memory layouts (None: every one; frameworks without strides run contiguous only)
        eps              the eps values (None or "config": the convention's own)
        max_sample       the largest sample number

    Arguments are checked when the strategy is made (UsageError), never while drawing.

    Every case of one strategy is drawn as the same sequence of choices, whatever its op: the head
    count, the operands' regimes (one draw per slot: an op's first, second chosen operand), dy and
    the output index are drawn for every op and left unused where it has none. Hypothesis shrinks
    toward shorter choice sequences first, so an op that drew fewer choices (an L2 norm has no
    weight) would otherwise count as simpler than rms_norm whatever its other values, and a shrink
    could not move from one op to another. A draw no op of the strategy can use is not made (each
    costs Hypothesis ~0.1 ms)."""
    passes = _check_passes(passes)
    _check_limits(max_rows, max_width, min_width, max_heads)
    given_pairs = allowed_pairs(op, convention, pairs)
    chosen_pairs = drawable(given_pairs, passes, min_width, max_width)
    if not chosen_pairs:
        raise UsageError(f"no op@convention pair of {', '.join('@'.join(p) for p in given_pairs)} can be drawn: a "
                         f"quantizing op has no backward pass, and its width must be a multiple of its block (up to "
                         f"max_width {max_width})")
    dtype_strategy = _dtypes(dtypes)
    if isinstance(max_sample, bool) or not isinstance(max_sample, int) or max_sample < 0:
        raise UsageError(f"max_sample must be a whole number >= 0, got {max_sample!r}")
    wanted_regimes = _names(regimes, "regimes")
    wanted_layouts = _names(layouts, "layouts")
    for name in wanted_layouts or ():
        _layouts.get_layout(name)
    layout_names = sorted((n for n in _layouts.LAYOUTS if wanted_layouts is None or n in wanted_layouts),
                          key=lambda n: n != _layouts.DEFAULT)
    # only per-case layouts (broadcast) asked: their operands must be constant, and an op must have one
    only_per_case = all(_layouts.LAYOUTS[n].moves == _layouts.PER_CASE for n in layout_names)
    x_regimes = {}
    for o in dict.fromkeys(p[0] for p in chosen_pairs):
        names = _regime_names(o, wanted_regimes)
        if names and not (only_per_case and not any(d.per_case_array for d in OPS[o].chosen)):
            x_regimes[o] = st.sampled_from(names)
    chosen_pairs = tuple(p for p in chosen_pairs if p[0] in x_regimes)
    if not chosen_pairs:
        raise UsageError(f"no case fits: regimes {list(wanted_regimes or ['any'])} and layouts "
                         f"{list(wanted_layouts or ['any'])} leave no op to draw (the head regimes need an op with "
                         "heads; broadcast an op with a weight)")
    for o in x_regimes:
        if OPS[o].even_head_dim and max_width < 2:
            raise UsageError(f"{o} rotates pairs of channels: max_width must be at least 2")
    # each operand an op chooses, its default regime first (only constant ones for a per-case operand
    # when every layout asked lays those out), drawn as an index into its table: one draw per slot
    # (an op's first, second chosen operand), whichever operand fills the slot
    tables, constant = {}, {}
    for record in OPS.values():
        for operand in record.chosen:
            table = [operand.default] + [r for r in _regimes.TABLES[operand.table] if r != operand.default]
            # what a stride-0 operand is drawn as when its drawn regime varies: its default if that
            # is constant (a bias' zeros), else the first constant one (a weight's ones)
            constant[operand.name] = next((r for r in table if r in _layouts.CONSTANT_WEIGHTS), None)
            if only_per_case and operand.per_case_array:
                table = [r for r in table if r in _layouts.CONSTANT_WEIGHTS]
            tables[operand.name] = table
    drawn_ops = [OPS[o] for o in x_regimes]
    slots = max(len(r.chosen) for r in drawn_ops)
    slot_strategy = st.integers(0, max(len(t) for t in tables.values()) - 1)
    backward = "backward" in passes
    most_outputs = max(max(len(r.results), len(r.gradients) if backward else 1) for r in drawn_ops)
    # draws no op of this strategy can use are not made at all (the same for every example of it)
    heads_strategy = st.integers(1, max_heads) if any("num_heads" in r.dims for r in drawn_ops) else st.just(1)
    dy_strategy = st.sampled_from(list(_regimes.GRADIENT_REGIMES)) if backward else st.just("")
    output_strategy = st.integers(0, most_outputs - 1) if most_outputs > 1 else st.just(0)
    eps_strategy = eps_values(eps)
    pair_strategy = st.sampled_from(chosen_pairs)
    rows_strategy = st.integers(1, max_rows)
    size_strategy = st.integers(min_width, max_width)
    layout_strategy = st.sampled_from(layout_names)
    pass_strategy = st.sampled_from(passes)
    sample_strategy = samples(max_sample)

    @st.composite
    def draw_case(draw) -> Case:
        op_name, conv = draw(pair_strategy)
        record = OPS[op_name]
        dtype = draw(dtype_strategy)
        rows = draw(rows_strategy)
        heads = draw(heads_strategy)
        size = draw(size_strategy)
        width, heads = _width(record, heads, size, min_width, max_width, block_of(op_name, conv))
        regime = draw(x_regimes[op_name])
        picks = [draw(slot_strategy) for _ in range(slots)]
        eps_value = draw(eps_strategy)
        layout = draw(layout_strategy)
        pass_ = draw(pass_strategy)
        dy = draw(dy_strategy)
        index = draw(output_strategy)
        sample = draw(sample_strategy)
        choices = tuple((o.name, tables[o.name][pick % len(tables[o.name])]) for o, pick in zip(record.chosen, picks))
        per_case = [o.name for o in record.chosen if o.per_case_array]
        if _layouts.LAYOUTS[layout].moves == _layouts.PER_CASE:
            if not per_case:  # nothing to lay out with stride 0 (an L2 norm has no weight)
                layout = next(n for n in layout_names if _layouts.LAYOUTS[n].moves != _layouts.PER_CASE)
            else:  # a stride-0 operand holds one value: a varying one is drawn as ones
                choices = tuple((n, r if n not in per_case or r in _layouts.CONSTANT_WEIGHTS else constant[n])
                                for n, r in choices)
        if record.quantizes and not _layouts.LAYOUTS[layout].strides:  # its scales are not shaped like x
            layout = next((n for n in layout_names if _layouts.LAYOUTS[n].strides), _layouts.DEFAULT)
        pass_ = pass_ if record.backward else "forward"  # (drawn all the same: one sequence for every op)
        outputs = list(record.gradients) if pass_ == "backward" else list(record.results)
        return Case(op=op_name, convention=conv, dtype=dtype, rows=rows, width=width, num_heads=heads,
                    regime=regime, choices=choices, eps=eps_value, sample=sample,
                    dy=dy if pass_ == "backward" else "", output=outputs[index % len(outputs)], layout=layout)

    return draw_case()


_dtypes = dtypes  # `cases` takes a parameter of that name


def block_of(op: str, convention: str) -> int:
    """The columns a quantizing contract's scale covers (0: a whole row, or an op that does not
    quantize): a width must be a multiple of it."""
    return get_contract(op, convention).quant_group if OPS[op].quantizes else 0


def drawable(pairs, passes, min_width: int = 1, max_width: int = DEFAULT_MAX_WIDTH) -> tuple[tuple[str, str], ...]:
    """The pairs a case can be drawn for in `passes`: a quantizing op only in the forward pass, and
    only where a multiple of its block lies within [min_width, max_width]."""
    return tuple(p for p in pairs if (OPS[p[0]].backward or "forward" in passes)
                 and (not block_of(*p) or max_width // block_of(*p) * block_of(*p) >= max(min_width, 1)))


def _width(record, heads: int, size: int, min_width: int, max_width: int, block: int = 0) -> tuple[int, int]:
    """(width, num_heads) from the drawn head count and size: the width itself for an op without
    heads (a multiple of a quantizing contract's block: the nearest at or below it, at least one
    block and at least min_width); for one with heads, `heads` heads of the widest head_dim (even where the op rotates pairs)
    that keeps heads x head_dim within `size`, never below min_width nor above max_width. Smaller
    draws give smaller widths, so both shrink toward one narrow head."""
    if "num_heads" not in record.dims:
        if block:  # (_drawable left only pairs with such a multiple in range)
            return max(size // block * block, -(-max(min_width, 1) // block) * block), 1
        return size, 1
    step = 2 if record.even_head_dim else 1
    heads = max(1, min(heads, max_width // step))
    unit = heads * step
    lowest, highest = max(1, -(-min_width // unit)), max(1, max_width // unit)
    return unit * min(max(size // unit, min(lowest, highest)), highest), heads


def case_ids(**kwargs) -> st.SearchStrategy[str]:
    """The ids of `cases(**kwargs)` (each replays with Case.from_id)."""
    return cases(**kwargs).map(lambda c: c.id)
