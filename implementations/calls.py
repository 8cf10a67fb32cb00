"""How normdiff calls a user's code: call templates, and the binding of an op's inputs to a function's
parameters by name.

A template is a Python call expression, parsed with `ast` and never evaluated as code:

    f(x, scale=weight, axis=-1, epsilon=eps)        --call, for a function (or a module's forward)
    Cls(dim, epsilon=eps, dtype=dtype)               --init, for a class

The callee's name is free (f, Cls, anything); each argument is one of the names the op provides (its
inputs and parameters: x, residual, weight, bias, gate, positions, eps, num_heads, group_size; and dim,
width, head_dim, dtype; an explicit backward's template, the call after dy, also the further upstream
gradients: a fused add's dresidual_out)
or a constant (a number, a string, True / False / None, or a tuple of them). Keyword-only parameters
take keywords; `*args` and `**kwargs`, attribute access, calls and operators are refused.

Without a template the op's inputs are bound to the function's parameters by name, through ALIASES
(keras' `scale` is the weight, its `epsilon` the eps, its `beta` the bias), so that a library function
is called as it is.
Imports nothing from normdiff but the errors and the op records (it runs inside workers).
"""
from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import Op

# the names a template may use beyond the op's own call, and what each is
EXTRA_NAMES = {"dim": "the normalised span (head_dim per head, the row otherwise)", "width": "x's last dimension",
               "head_dim": "one head's width",
               "dtype": "the case dtype in the framework's own terms (torch.bfloat16, mx.bfloat16, a NumPy dtype)",
               "dtype_name": "the case dtype's name ('bfloat16', 'float16', 'float32'), as keras' dtype= takes it"}
# parameter names that usually mean each input (first: the name normdiff calls it)
# `tensor_scale` (a quantizing op's per-tensor scale) comes first: where an op takes one, a parameter
# called `scale` is it (vLLM's and FlashInfer's static-quant kernels name it so), and the weight is
# found under its other names; elsewhere `scale` is the weight (haiku, flax). `_meaning` and
# `_bind_by_name` read the names of the op's own call in this order.
ALIASES = {
    "tensor_scale": ("tensor_scale", "scale", "input_scale", "static_scale", "global_scale", "global_sf",
                     "x_scale", "act_scale"),
    "x": ("x", "input", "inputs", "hidden_states", "hidden_state", "a", "tensor", "data", "X"),
    "residual": ("residual", "res", "skip", "residual_in"),
    "weight": ("weight", "scale", "gamma", "w", "g", "norm_weight"),
    "bias": ("bias", "beta", "b"),
    "gate": ("gate", "z", "gating"),
    "positions": ("positions", "position_ids", "pos", "position"),
    "num_heads": ("num_heads", "n_heads", "heads", "nheads", "n_head"),
    "group_size": ("group_size", "groupsize", "group"),
    "eps": ("eps", "epsilon", "variance_epsilon", "norm_eps", "rms_norm_eps", "layer_norm_eps", "variance_eps"),
    # a fused add's second upstream gradient (of residual_out), which its explicit backward takes after dy
    "dresidual_out": ("dresidual_out", "d_residual_out", "dres", "dh"),
    "dim": ("dim", "dims", "hidden_size", "normalized_shape", "d_model", "num_features", "features", "size",
            "n_embd", "n_embed", "embed_dim", "embedding_dim", "hidden_dim", "channels", "num_channels",
            "normalized_dim", "ndim", "dimension", "d_hidden", "model_dim", "n_state", "emb_dim", "shape"),
}
# size parameters that take a shape (a tuple), not a number: torch's F.layer_norm(x, normalized_shape, ...)
SHAPE_PARAMETERS = ("normalized_shape", "shape")
# A constructor's required parameters that no op name means but whose value the op decides: the
# axis normalised (x's last: haiku's `axis`), and the switches that give a module the op's own
# parameters (haiku LayerNorm's create_scale / create_offset, which have no default): True when the
# op has that operand, False otherwise.
AXIS_PARAMETERS = ("axis", "axes", "reduction_axes")
SWITCHES = {"create_scale": "weight", "create_offset": "bias", "elementwise_affine": "weight"}
# A constructor that takes the model's config object (HF style: config.hidden_size, config.rms_norm_eps)
# gets one carrying the usual names (implementations/user.py: config_for)
CONFIG_PARAMETERS = ("config", "cfg")
# positional parameters that must not receive another op input by position (they mean something
# else; a `bias` takes the op's own bias, where it has one)
CONFLICTS = ("axis", "dim", "axes", "bias", "dtype", "keepdims", "keepdim", "p", "ord", "out")


@dataclass(frozen=True)
class Arg:
    name: str | None = None  # an op name, or None for a constant or a tuple
    value: object = None
    items: tuple | None = None  # a tuple built from names and constants: normalized_shape=(dim,)

    def resolve(self, values: dict):
        if self.items is not None:
            return tuple(a.resolve(values) for a in self.items)
        return values[self.name] if self.name is not None else self.value

    def names(self) -> set[str]:
        if self.items is not None:
            return {n for a in self.items for n in a.names()}
        return {self.name} if self.name is not None else set()

    def source(self) -> str:
        if self.items is not None:
            inner = ", ".join(a.source() for a in self.items)
            return f"({inner},)" if len(self.items) == 1 else f"({inner})"
        return self.name if self.name is not None else repr(self.value)


@dataclass(frozen=True)
class Template:
    text: str
    args: tuple[Arg, ...]
    kwargs: tuple[tuple[str, Arg], ...]

    def bind(self, values: dict) -> tuple[list, dict]:
        return [a.resolve(values) for a in self.args], {k: a.resolve(values) for k, a in self.kwargs}

    def names(self) -> set[str]:
        return {n for a in self.args for n in a.names()} | {n for _, a in self.kwargs for n in a.names()}


def _constant(node, text: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
        return -node.operand.value
    if isinstance(node, ast.Tuple):
        return tuple(_constant(e, text) for e in node.elts)
    raise UsageError(f"template {text!r}: {ast.unparse(node)!r} is neither a name normdiff provides nor a constant "
                     "(a number, a string, True, False, None or a tuple of them)")


def parse(text: str, allowed: set[str]) -> Template:
    """A template from its text; UsageError names what is wrong and what is allowed."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise UsageError(f"template {text!r} is not a call expression: {exc.msg}") from None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise UsageError(f"template {text!r} must be a call like f(x, weight, eps=eps)")
    def arg(node):
        if isinstance(node, ast.Name):
            if node.id not in allowed:
                raise UsageError(f"template {text!r}: unknown name {node.id!r}; the names are "
                                 f"{', '.join(sorted(allowed))} (constants are written as values)")
            return Arg(node.id)
        if isinstance(node, ast.Tuple) and any(isinstance(e, ast.Name) for e in node.elts):
            return Arg(items=tuple(arg(e) for e in node.elts))  # normalized_shape=(dim,)
        return Arg(None, _constant(node, text))
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise UsageError(f"template {text!r}: *args and **kwargs are not allowed; spell each argument")
    return Template(text, tuple(arg(a) for a in call.args), tuple((k.arg, arg(k.value)) for k in call.keywords))


def names_for(record: Op, backward: bool = False) -> set[str]:
    """The names a template for the op may use; `backward`: an explicit backward's, whose call
    after dy also takes the further upstream gradients (a fused add's dresidual_out)."""
    return set(backward_rest(record) if backward else record.call) | set(EXTRA_NAMES)


def backward_rest(record: Op) -> tuple[str, ...]:
    """What an explicit backward takes after dy: the further upstream gradients, then the forward's
    call (the op record's backward_call without its first entry)."""
    return record.backward_call[1:]


def parameters(fn) -> list[inspect.Parameter] | None:
    """fn's parameters (a class's without self), or None when nothing says what they are. A class
    whose metaclass hides its constructor behind (*args, **kwargs) (flax nnx) is read from its
    __init__; a compiled function without a signature (nanobind: MLX) from its docstring's first line."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return _doc_parameters(fn)
    if inspect.isclass(fn) and params and all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        try:
            params = list(inspect.signature(fn.__init__).parameters.values())[1:]
        except (TypeError, ValueError):
            return None
    return params


def _doc_parameters(fn) -> list[inspect.Parameter] | None:
    """The parameters of a docstring's `name(a: T, b: U = None, *, c=...) -> R` line, read with ast."""
    name, doc = getattr(fn, "__name__", ""), getattr(fn, "__doc__", None) or ""
    line = next((l.strip() for l in doc.splitlines() if l.strip().startswith(f"{name}(")), "") if name else ""
    try:
        args = ast.parse(f"def {line}: pass").body[0].args
    except (SyntaxError, IndexError, AttributeError):
        return None
    kinds = ([(a, inspect.Parameter.POSITIONAL_ONLY) for a in args.posonlyargs]
             + [(a, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in args.args])
    defaults = [None] * (len(kinds) - len(args.defaults)) + list(args.defaults)
    params = [inspect.Parameter(a.arg, kind, default=_default(d)) for (a, kind), d in zip(kinds, defaults)]
    if args.vararg:
        params.append(inspect.Parameter(args.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    params += [inspect.Parameter(a.arg, inspect.Parameter.KEYWORD_ONLY, default=_default(d))
               for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        params.append(inspect.Parameter(args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return params


def _default(node):
    """A docstring default's value (only whether there is one matters: a required parameter has none)."""
    if node is None:
        return inspect.Parameter.empty
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def default_call(fn, record: Op, shown: str, call: tuple[str, ...] | None = None,
                 signature: str | None = None) -> Template:
    """The call normdiff makes without --call: by position in the op's order when the parameters
    there do not say they mean something else (`axis`, `bias`, or another input's name), by name
    (through ALIASES) otherwise; a TypeError that shows the --call to write when neither fits.
    `call` (default the op's) is the names to bind, in order, and `signature` how the error shows
    them (an explicit backward's: `backward_rest`, after dy)."""
    call = record.call if call is None else tuple(call)
    signature = signature or record.signature
    params = parameters(fn)
    if params is None or any(p.kind == p.VAR_POSITIONAL for p in params):
        return Template(signature, tuple(Arg(n) for n in call), ())
    required = [p for p in params if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    shorter = [call[:len(call) - len(record.optional)]] if record.optional else []
    by_name = _bind_by_name(params, call)
    for names in [call] + shorter:
        if len(required) <= len(names) <= len(positional) and _positions_agree(positional, names):
            if names is not call and set(call) <= set(by_name):
                break  # by name it takes the optional ones too (F.normalize's eps, after its p)
            return Template(signature, tuple(Arg(n) for n in names), ())
    complete = "x" in by_name and all(n in by_name for n in call if n != "eps" and n not in record.optional)
    sizes = _sizes(required, by_name)  # a required size: F.layer_norm's normalized_shape, a dim
    if complete and all(p.name in by_name.values() or p.name in sizes for p in required):
        return _keyword_template(params, by_name, sizes)
    shown_params = ", ".join(p.name for p in params)
    suggestion = suggest(params, record, call)
    raise TypeError(f"{shown}({shown_params}) has the wrong signature for {record.name}: normdiff calls "
                    f"{signature}" + (f"; say how to call it with --call '{suggestion}'" if suggestion else
                                      "; say how to call it with --call, e.g. --call 'f(x, weight, eps=eps)'"))


def _by_precedence(names) -> list[str]:
    """Op names in the order their aliases are claimed: ALIASES' order (a tensor_scale claims `scale`
    before the weight does), names without aliases last."""
    order = list(ALIASES)
    return sorted(names, key=lambda n: order.index(n) if n in order else len(order))


def _meaning(param_name: str, call: tuple[str, ...] | None = None) -> str | None:
    """The op name a parameter's name stands for (ALIASES), if any: among the names of `call`
    first, where it is given (the op's own: `scale` is the weight unless the op takes a tensor_scale)."""
    names = _by_precedence(call or ()) + list(ALIASES)
    return next((op_name for op_name in names if param_name in ALIASES.get(op_name, ())), None)


def _positions_agree(positional, names) -> bool:
    """Whether passing `names` by position is safe: no parameter there means something else."""
    for param, name in zip(positional, names):
        meaning = _meaning(param.name, tuple(names))
        if meaning != name and (param.name in CONFLICTS or meaning is not None):
            return False
    return True


def _sizes(required, by_name: dict[str, str]) -> dict[str, Arg]:
    """What a function's required size parameters take, when a dim-like name says what they are: a
    shape given as a tuple (`normalized_shape`, as F.layer_norm takes it) gets (dim,), any other the
    normalised span (dim)."""
    bound = set(by_name.values())
    return {p.name: Arg(items=(Arg("dim"),)) if p.name in SHAPE_PARAMETERS else Arg("dim")
            for p in required if p.name not in bound and _meaning(p.name) == "dim"}


def _keyword_template(params, by_name: dict[str, str], sizes: dict[str, Arg] | None = None) -> Template:
    """The call by name (and the size parameters `sizes` gives); a positional-only parameter is
    passed by position, in its place."""
    args, kwargs = [], []
    for p in params:
        op_name = next((n for n, q in by_name.items() if q == p.name), None)
        given = Arg(op_name) if op_name is not None else (sizes or {}).get(p.name)
        if given is not None:
            (args.append(given) if p.kind == p.POSITIONAL_ONLY else kwargs.append((p.name, given)))
    text = "f(" + ", ".join([a.source() for a in args] + [f"{k}={a.source()}" for k, a in kwargs]) + ")"
    return Template(text, tuple(args), tuple(kwargs))


def _bind_by_name(params, wanted) -> dict[str, str]:
    """op name -> parameter name, for the op names some parameter's name means."""
    found = {}
    for name in _by_precedence(wanted):
        for alias in ALIASES.get(name, (name,)):
            match = next((p for p in params if p.name == alias and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)),
                         None)
            if match is not None and match.name not in found.values():
                found[name] = match.name
                break
    return found


def suggest(params, record: Op, call: tuple[str, ...] | None = None) -> str:
    """A --call template that binds what the names allow (of `call`, default the op's) and passes
    None to other required parameters (a reasonable first guess to show the user)."""
    by_name = _bind_by_name(params, record.call if call is None else call)
    parts = []
    for p in params:
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        op_name = next((n for n, q in by_name.items() if q == p.name), None)
        if op_name is not None:
            parts.append(op_name if p.kind == p.POSITIONAL_ONLY else f"{p.name}={op_name}")
        elif p.default is p.empty:
            parts.append("None" if p.kind == p.POSITIONAL_ONLY else f"{p.name}=None")
    return f"f({', '.join(parts)})" if by_name else ""


def default_init(cls, shown: str, provided: tuple[str, ...] = (), wanted: tuple[str, ...] = ("dim", "eps"),
                 operands: tuple[str, ...] = ()) -> Template:
    """The constructor call without --init: the span to a dim-like parameter, the eps to an eps-like
    one (a class whose eps is called epsilon still gets the case's eps), and any other of `wanted`
    (a graph factory's dtype) to its own name; a required axis -1, a required switch (haiku's
    create_scale) whether the op has that operand (`operands`: the op's inputs), a required config
    the config object (`config`); TypeError when a required parameter means nothing normdiff knows.
    `provided`: the parameters the framework fills itself (flax nnx's rngs)."""
    params = parameters(cls)
    if params is None:
        return Template("Cls(dim, eps=eps)", (Arg("dim"),), (("eps", Arg("eps")),))
    bound = _bind_by_name(params, wanted)
    required = [p for p in params if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    fixed = _fixed(required, set(bound.values()), operands)
    unknown = [p.name for p in required if p.name not in bound.values() and p.name not in provided
               and p.name not in fixed]
    if unknown:
        raise TypeError(f"{shown} needs {', '.join(unknown)}, which normdiff cannot tell what to give: say how to "
                        f"build it with --init, e.g. --init 'Cls(dim, eps=eps)'")
    template = _keyword_template(params, bound, fixed)
    return Template(template.text.replace("f(", "Cls(", 1), template.args, template.kwargs)


def _fixed(required, bound: set[str], operands: tuple[str, ...]) -> dict[str, Arg]:
    """What the required constructor parameters that no op name means get, where the op decides it
    (AXIS_PARAMETERS, SWITCHES, CONFIG_PARAMETERS)."""
    fixed = {}
    for p in required:
        if p.name in bound:
            continue
        if p.name in AXIS_PARAMETERS:
            fixed[p.name] = Arg(None, -1)
        elif p.name in SWITCHES:
            fixed[p.name] = Arg(None, SWITCHES[p.name] in operands)
        elif p.name in CONFIG_PARAMETERS:
            fixed[p.name] = Arg("config")
    return fixed
