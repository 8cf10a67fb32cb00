"""The user's own code, called in its framework the way `normdiff check` documents.

Three kinds of target, one adapter each:

  * a function: called with `--call` (a template, implementations/calls.py) or, without one, the
    op's call bound by position or by name (keras' `rms_normalization(x, scale=..., epsilon=...)`
    gets its inputs by name); arrays in the framework's type, in the case dtype. An op with several
    results returns them all: a fused add's add_rms_norm(x, residual, weight, eps) -> (y,
    residual_out) (a tuple or list in that order, or a dict by name; the worker reads each).
  * a module class: built with `--init` or with its constructor's parameters matched by their usual
    names (dim / hidden_size / num_features ... and eps / epsilon / variance_epsilon ...), plus
    what its framework needs (flax nnx: rngs); moved to the case dtype where the framework does
    that for a loaded model (torch, MLX, tinygrad); built for the input's shape (keras); its gain
    is the one parameter of the weight's shape (or `--weight-attr`) and receives the case's weight
    bit for bit, and for an op with a bias (LayerNorm) its parameter named bias / beta / b the
    case's bias (a class without one of them runs where the case's is the identity: ones, zeros);
    then called with the op's module call (forward(x), forward(x, gate), a fused add's
    forward(x, residual), which returns (y, residual_out)). For an op over heads
    it is applied to x viewed as (..., heads, head_dim), as Qwen3Attention applies q_norm (or to
    the full vector when the convention's norm spans it, as OLMo2's does, or when its weight does:
    a grouped norm's module takes the whole row, built with dim = the width and its group_size).
  * a graph (onnxruntime): an .onnx file, a ModelProto or a session, or a function that returns
    one, built per dtype / span / eps from the parameters it names (dtype, dim, eps, ...); its
    inputs are fed by name (x, weight, gate, ... through the usual aliases).

A target whose call fails is tried once with the other candidate frameworks' arrays, so the error
can say which `--framework` would run it. Imported only inside the worker of the user's framework
(and in the one-call probe of usercode.py).
"""
from __future__ import annotations

import inspect
import json
import os
import re

import numpy as np

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.ops import OPS, PARAMS, Op
from normdiff.implementations import calls
from normdiff.implementations.frameworks import FRAMEWORKS, graph_framework, user_frameworks
from normdiff.implementations.frameworks.record import Framework
from normdiff.implementations.loading import load_entry, put_module_on_path
from normdiff.implementations.target import UserTarget, locate

INIT_NAMES = ("dim", "eps", "width", "head_dim", "num_heads", "group_size", "dtype", "dtype_name", "config")
# the per-case operands a module class holds as parameters (the weight is its gain)
MODULE_OPERANDS = ("weight", "bias")
# a module's bias parameter: the usual names, and haiku's `offset` (a module-only name: as a
# function's parameter, `offset` more often means a weight offset, so it is no alias of the bias)
BIAS_PARAMETERS = calls.ALIASES["bias"] + ("offset",)



# What a module without a weight or a bias parameter gets on a case that has one (its error rows'
# detail): `normdiff check` judges such a module with the operand's identity only (check.py)
HAS_NO = "has no"
FOUND_NO_GRADIENT = "found no parameter to differentiate for the"
MISSING_OPERAND = re.compile(rf"{HAS_NO} (\w+) parameter \(normdiff looks for|{FOUND_NO_GRADIENT} (\w+)\b")

def make_adapter(target: UserTarget | str, framework: str = "", op: str = "", call: str = "", init: str = "",
                 weight_attr: str = "", forced: bool = False):
    """The forward adapter of a user's target: its UserTarget (what the worker is given), or its
    text and the rest as plain values (UserTarget.params: what a repro script passes)."""
    target = _user_target(target, framework, op, call, init, weight_attr, forced)
    obj = _load(target)
    if target.backward_of(obj):
        raise TypeError(f"{target.shown} takes the upstream gradient first: it is a backward, which runs the backward "
                        f"pass only (--pass backward), as {OPS[target.op].backward_signature}")
    return _forward_adapter(target, obj)


def _user_target(target: UserTarget | str, framework: str, op: str, call: str, init: str, weight_attr: str,
                 forced: bool) -> UserTarget:
    if isinstance(target, UserTarget):
        return target
    return locate(target, framework=framework, forced=forced, op=op, call=call, init=init, weight_attr=weight_attr)


def _forward_adapter(target: UserTarget, obj):
    """The adapter that calls `obj`, the loaded target, as a forward."""
    record, fw, shown = OPS[target.op], FRAMEWORKS[target.framework], target.shown
    if fw.load_graph is not None:
        graph = fw.load_graph(obj)
        if graph is not None:
            return GraphAdapter(fw, record, shown, graph=graph)
        if callable(obj) and not _takes_x(obj, record):
            return GraphAdapter(fw, record, shown, factory=obj, init=target.init)
    if inspect.isclass(obj):
        if record.module_call is None:
            raise TypeError(f"{shown} is a class; for {target.op} give a function {record.signature}")
        return ClassAdapter(obj, fw, record, target.init, target.call, target.weight_attr, shown)
    if callable(obj):
        return FunctionAdapter(obj, fw, record, target.call, shown, None if target.forced else target.text)
    raise TypeError(f"{shown} is a {type(obj).__name__}, not a function, a class or a graph")


def _load(target: UserTarget | str):
    text = target if isinstance(target, str) else target.text
    if graph_framework(text):  # a graph file: the framework's load_graph opens it
        return text
    if isinstance(target, UserTarget) and target.module and target.source:
        put_module_on_path(target.module, target.source)  # where the parent found it
    try:
        return load_entry(text)
    except (AttributeError, FileNotFoundError) as exc:
        raise TypeError(f"cannot load {text}: {exc}") from None


def _takes_x(fn, record: Op) -> bool:
    """Whether a function in a graph framework takes the op's arrays (rather than building a graph
    from sizes, eps and dtype)."""
    params = calls.parameters(fn)
    arrays = {alias for name in record.inputs for alias in calls.ALIASES.get(name, (name,))}
    return params is None or any(p.name in arrays for p in params)


# What of the contract each adapter's call is given or shaped by, its `sees` (the worker's load
# reports it; a run that judges several conventions at once makes one call for the cases whose
# inputs and these knobs are equal: runner.call_key). A function's or a graph's: the eps and the
# span (_values: eps, and dim from the scope). A module class's also whether it runs per head (the
# weight's span: ClassAdapter._values) and whether a case's weight is the identity that a module
# without one computes (the weight offset: _identity). tests/harness/commands/test_identify.py reads
# each adapter's `contract.` attributes and fails on one its `sees` leaves out.
CALL_SEES = ("eps", "scope")
MODULE_SEES = CALL_SEES + ("weight_span", "weight_offset")


def _values(fw: Framework, contract: Contract, inputs: CaseInputs, arrays: bool = True) -> dict:
    """What a template may name, for one case: the op's inputs in the framework's arrays, its scalar
    parameters, and the sizes and dtype."""
    a = inputs.arrays
    width = a["x"].shape[-1]
    span = width // inputs.num_heads if contract.scope == "head" else width
    values = {"eps": contract.eps, "num_heads": inputs.num_heads, "group_size": width // inputs.num_heads,
              "width": width, "dim": span, "head_dim": width // inputs.num_heads,
              "dtype_name": get_format(a["x"].dtype.name).name, "dtype": _native_dtype(fw, a["x"])}
    if arrays:
        values.update({name: fw.from_numpy(array) for name, array in a.items()})
    return values


def per_head(span: int, width: int, weight_span: str) -> bool:
    """Whether a module class is called per head: the norm's span is one head (`span` < the row's
    `width`) and its weight is one head's (a full-width weight, as a grouped norm's, means a module
    over the whole row). It then gets x viewed as (..., heads, head_dim), as Qwen3Attention feeds
    q_norm, and never sees the heads together (check says so)."""
    return span != width and weight_span != "full"


def _native_dtype(fw: Framework, x: np.ndarray):
    value = fw.from_numpy(x[:0])
    return getattr(value, "dtype", x.dtype)


def _build(fn, template: calls.Template, values: dict, extras: dict, shown: str):
    args, kwargs = template.bind(values)
    kwargs.update({k: v for k, v in extras.items() if k not in kwargs})
    try:
        return fn(*args, **kwargs)
    except TypeError as exc:
        # a constructor that indexes or measures its size argument wants a shape tuple (nn.LayerNorm's
        # subclasses: hidden_size[-1]), which a template can give
        shape = " (it wants a shape: --init 'Cls((dim,), eps=eps)')" if re.search(
            r"not subscriptable|has no len|not iterable", str(exc)) else ""
        raise TypeError(f"{shown} cannot be built as {template.text}: {exc}{shape}") from None
    except AttributeError as exc:
        if "config" not in template.names():
            raise
        raise TypeError(f"{shown} cannot be built as {template.text}: the config normdiff gives carries "
                        f"{', '.join(vars(values['config']))} ({exc}); say how to build it with --init, e.g. "
                        "--init 'Cls(dim, eps=eps)'") from None


# the names a config object usually gives a norm (HF's hidden_size and rms_norm_eps, GPT-2's n_embd
# and layer_norm_epsilon, ...): the span, the eps, the heads
CONFIG_SIZES = ("hidden_size", "dim", "d_model", "n_embd", "embed_dim", "model_dim", "width")
CONFIG_EPS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps", "eps", "epsilon",
              "norm_epsilon", "variance_epsilon")


def config_for(values: dict):
    """The config object a constructor that takes one (`def __init__(self, config)`) receives: the
    span, the eps and the head sizes under the names model configs use."""
    from types import SimpleNamespace

    return SimpleNamespace(**{name: values["dim"] for name in CONFIG_SIZES},
                           **{name: values["eps"] for name in CONFIG_EPS},
                           head_dim=values["head_dim"], num_attention_heads=values["num_heads"],
                           num_heads=values["num_heads"])


class FunctionAdapter:
    sees = CALL_SEES

    def __init__(self, fn, framework: Framework, record: Op, call: str, shown: str, detected_from: str | None):
        self.fn, self.framework, self.record, self.shown = fn, framework, record, shown
        self.template = (calls.parse(call, calls.names_for(record)) if call
                         else calls.default_call(fn, record, shown))
        self.detected_from = detected_from  # the target, when its framework was detected (not forced)
        self.hint: str | None = None

    @property
    def takes(self) -> set[str]:
        """The names normdiff gives it (x, weight, eps, ...): what its call binds."""
        return self.template.names()

    def __call__(self, op: str, contract: Contract, inputs: CaseInputs):
        try:
            return self._call(self.framework, contract, inputs)
        except (TypeError, AttributeError) as exc:  # what another framework's arrays might cure
            hint = self._hint(contract, inputs)
            if hint and exc.args and isinstance(exc.args[0], str):  # the same exception, where it was raised
                exc.args = (f"{exc.args[0]} ({hint})",) + exc.args[1:]
            raise

    def _call(self, fw: Framework, contract: Contract, inputs: CaseInputs, leaves: dict | None = None):
        args, kwargs = self.template.bind({**_values(fw, contract, inputs), **(leaves or {})})
        return self.fn(*args, **kwargs)

    def call_with(self, contract: Contract, inputs: CaseInputs, leaves: dict):
        """The call with `leaves` (the framework's differentiable arrays) in place of those inputs."""
        return self._call(self.framework, contract, inputs, leaves)

    def _hint(self, contract: Contract, inputs: CaseInputs) -> str:
        """Which --framework runs it, when another framework's arrays do (tried once)."""
        if self.detected_from is None:
            return ""
        if self.hint is None:
            self.hint = ""
            for name in other_frameworks(self.framework.name):
                try:
                    self._call(FRAMEWORKS[name], contract, inputs)
                except Exception:  # noqa: BLE001 - any failure: not this one either
                    continue
                self.hint = (f"normdiff passed {self.framework.name} arrays, the framework it detected; "
                             f"{self.shown} runs on {name} arrays: say so with --framework {name}")
                break
        return self.hint


def other_frameworks(name: str) -> list[str]:
    """The installed user frameworks other than `name`, NumPy first (the cheapest to try)."""
    import importlib.util

    return [n for n in user_frameworks() if n != name and FRAMEWORKS[n].modules
            and all(importlib.util.find_spec(m) is not None for m in FRAMEWORKS[n].modules)]


class ClassAdapter:
    sees = MODULE_SEES

    def __init__(self, cls, framework: Framework, record: Op, init: str, call: str, weight_attr: str, shown: str):
        self.cls, self.framework, self.record, self.shown = cls, framework, record, shown
        self.make = framework.constructor(cls)  # the class, or what stands in for it (haiku's)
        self.extras = framework.init_extras(cls)
        wanted = ("dim", "eps") + tuple(n for n in ("group_size",) if n in record.call)
        self.init = (calls.parse(init, set(INIT_NAMES)) if init
                     else calls.default_init(cls, shown, provided=tuple(self.extras), wanted=wanted,
                                             operands=tuple(record.inputs)))
        self.call = calls.parse(call, calls.names_for(record)) if call else None
        self.weight_attr = weight_attr
        self.modules: dict[tuple, tuple] = {}

    @property
    def takes(self) -> set[str]:
        """The names normdiff gives it: its constructor's (dim, eps, ...) and its forward's."""
        called = self.call.names() if self.call is not None else set(self.record.module_call or ())
        built = self.init.names() | ({"dim", "eps"} if "config" in self.init.names() else set())  # what a config carries
        return built | called | {o for o in MODULE_OPERANDS if o in self.record.inputs}

    def __call__(self, op: str, contract: Contract, inputs: CaseInputs):
        return self.call_with(contract, inputs, {})

    def prepared(self, contract: Contract, inputs: CaseInputs) -> tuple:
        """The module for this case, its weight (and bias) loaded, and {operand: the name of its
        parameter} for the weight and bias it holds."""
        values, heads = self._values(contract, inputs)
        shape = (*np.shape(values["x"])[:-1], inputs.num_heads, values["dim"]) if heads else np.shape(values["x"])
        module = self._module(values, inputs.arrays, shape, contract)
        return module, self.modules[self._key(values, inputs.arrays)][1]

    def _values(self, contract: Contract, inputs: CaseInputs, leaves: dict | None = None) -> tuple[dict, bool]:
        """The values for this case, and whether the module runs per head: when the norm's span is a
        head and the weight is one head's (a full-width weight, as a grouped norm's, means a module
        over the whole row, whose dim is then the width)."""
        values = {**_values(self.framework, contract, inputs), **(leaves or {})}
        heads = per_head(values["dim"], values["width"], contract.weight_span)
        if not heads:
            values["dim"] = values["width"]
        return values, heads

    def _key(self, values: dict, arrays: dict) -> tuple:
        return (values["dim"], values["eps"], values["group_size"] if "group_size" in self.record.call else None,
                arrays["x"].dtype.str)

    def call_with(self, contract: Contract, inputs: CaseInputs, leaves: dict):
        values, heads = self._values(contract, inputs, leaves)
        x, span = values["x"], values["dim"]
        if heads:  # as Qwen3Attention feeds q_norm: (..., heads, head_dim)
            values["x"] = x.reshape(*x.shape[:-1], inputs.num_heads, span)
        module = self._module(values, inputs.arrays, np.shape(values["x"]), contract)
        if self.call is not None:
            args, kwargs = self.call.bind(values)
            out = module(*args, **kwargs)
        else:
            out = module(*(values[name] for name in self.record.module_call))
        return _reshaped(out, x.shape) if heads else out

    def _module(self, values: dict, arrays: dict, shape: tuple, contract: Contract):
        key = self._key(values, arrays)
        if key not in self.modules:
            module = _build(self.make, self.init, {**values, "config": config_for(values)}, self.extras, self.shown)
            module = self.framework.prepare_module(module, arrays["x"])
            self.framework.build(module, np.zeros(shape, dtype=arrays["x"].dtype))
            held = {}
            if "weight" in arrays:
                held["weight"] = self._gain(module, values["dim"], _identity(arrays, "weight", contract))
            if "bias" in arrays:
                held["bias"] = self._bias(module, values["dim"], held.get("weight"))
            self.modules[key] = (module, {k: v for k, v in held.items() if v is not None})
        module, held = self.modules[key]
        for operand in MODULE_OPERANDS:
            if operand not in arrays:
                continue
            if operand in held:
                self._set_weight(module, held[operand], arrays[operand])
            elif not _identity(arrays, operand, contract):
                raise TypeError(f"{self.shown} {HAS_NO} {operand} parameter (normdiff looks for "
                                f"{' / '.join(calls.ALIASES[operand])} of shape ({values['dim']},)), and this case's "
                                f"{operand} is not the identity")
        return module

    def _gain(self, module, span: int, optional: bool = False) -> str | None:
        """The parameter that takes the case's weight: --weight-attr, else the one of shape (span,)
        (a weight-like name breaks a tie: LayerNorm's weight beside its bias); `optional` (the case's
        weight is the identity): None where the class has no parameter of that shape."""
        found = self.framework.weights(module)
        if self.weight_attr:
            if self.weight_attr not in found and not hasattr(module, self.weight_attr):
                raise TypeError(f"{self.shown} has no parameter {self.weight_attr!r}; its parameters: "
                                f"{_listed(found)}")
            return self.weight_attr
        fitting = [name for name, shape in found.items() if tuple(shape) == (span,)]
        if len(fitting) > 1:
            named = [n for n in fitting if n.rpartition(".")[2].rpartition("/")[2] in calls.ALIASES["weight"]]
            fitting = named if len(named) == 1 else fitting
        if not fitting and optional:
            return None
        if not found:  # no parameter at all (MISSING_OPERAND: check judges it with w = ones only)
            raise TypeError(f"{self.shown} {HAS_NO} weight parameter (normdiff looks for its gain as the one parameter "
                            f"of shape ({span},) and found no parameters; name it with --weight-attr)")
        if len(fitting) != 1:
            which = "none" if not fitting else ", ".join(fitting)
            raise TypeError(f"{self.shown}: normdiff looks for its gain as the one parameter of shape ({span},) and "
                            f"found {which} among {_listed(found)}; name it with --weight-attr")
        return fitting[0]

    def _bias(self, module, span: int, gain: str | None) -> str | None:
        """The parameter that takes the case's bias: the one of shape (span,) other than the gain
        whose name is a bias's (bias, beta, b); None when there is none."""
        found = self.framework.weights(module)
        named = [n for n, shape in found.items() if tuple(shape) == (span,) and n != gain
                 and n.rpartition(".")[2].rpartition("/")[2] in BIAS_PARAMETERS]
        return named[0] if len(named) == 1 else None

    def _set_weight(self, module, name: str, weight: np.ndarray) -> None:
        if self.framework.set_weight is not None:
            self.framework.set_weight(module, name, weight)
        else:
            setattr(module, name, self.framework.from_numpy(weight))


def _reshaped(out, shape: tuple):
    """A module's output over heads back in x's shape: each result of an op with several (a tuple
    or list of them, or a dict by name)."""
    if isinstance(out, dict):
        return {name: v.reshape(shape) for name, v in out.items()}
    if isinstance(out, (tuple, list)):
        return type(out)(v.reshape(shape) for v in out)
    return out.reshape(shape)


def _identity(arrays: dict, operand: str, contract: Contract) -> bool:
    """Whether the case's weight (offset + w = 1) or bias (0) leaves the normalised value as it is,
    so that a class without that parameter computes the same function."""
    value = np.asarray(arrays[operand], dtype=np.float64)
    return bool(np.all(value == (1.0 - contract.weight_offset if operand == "weight" else 0.0)))


def _listed(found: dict) -> str:
    return ", ".join(f"{n} {tuple(s)}" for n, s in found.items()) or "none"


class GraphAdapter:
    """A runtime graph fed by input name: one `graph`, or a `factory` called once per (dtype, span,
    eps) with the parameters it names (`init`, or its parameters' names) for what load_graph takes."""

    sees = CALL_SEES

    def __init__(self, framework: Framework, record: Op, shown: str, graph=None, factory=None, init: str = ""):
        self.framework, self.record, self.shown, self.graph, self.factory = framework, record, shown, graph, factory
        self.init = None
        if factory is not None:
            self.init = (calls.parse(init, set(INIT_NAMES)) if init
                         else calls.default_init(factory, shown, wanted=INIT_NAMES))
        self.graphs: dict[tuple, object] = {}

    @property
    def takes(self) -> set[str] | None:
        """What its factory takes (dim, eps, dtype, ...) and the graph's inputs; None for a graph
        file, whose constants normdiff cannot read (it may hold an eps)."""
        return None if self.init is None else self.init.names() | set(self.record.inputs)

    def __call__(self, op: str, contract: Contract, inputs: CaseInputs):
        values = _values(self.framework, contract, inputs, arrays=False)
        graph = self._graph(values)
        feeds = {}
        for given, dtype in self.framework.graph_inputs(graph).items():
            name = _meaning(given)
            if name in inputs.arrays:
                feeds[given] = _fed(inputs.arrays[name], given, dtype, values["dtype_name"])
            elif name in PARAMS:
                feeds[given] = np.asarray(values[name], dtype=dtype or np.float32)
            else:
                raise TypeError(f"{self.shown}: graph input {given!r} is none of what normdiff feeds "
                                f"({', '.join(list(inputs.arrays) + list(PARAMS))}, under their usual names)")
        return self.framework.run_graph(graph, feeds)

    def _graph(self, values: dict):
        if self.factory is None:
            return self.graph
        key = (values["dim"], values["eps"], values["dtype_name"])
        if key not in self.graphs:
            try:
                self.graphs[key] = self.framework.load_graph(_build(self.factory, self.init, values, {}, self.shown))
            except Exception as exc:  # noqa: BLE001 - kept, so every case of this key says the same
                said = str(exc).splitlines()[0] if str(exc) else repr(exc)
                failed = RuntimeError(f"{self.framework.name} cannot load {self.shown}'s graph for "
                                      f"{values['dtype_name']}: {said}")
                self.graphs[key] = failed.with_traceback(exc.__traceback__)  # where it failed: the runtime
            if self.graphs[key] is None:
                self.graphs[key] = TypeError(f"{self.shown} returned nothing {self.framework.name} can load "
                                             "(for onnxruntime: a ModelProto, an InferenceSession or a path)")
        graph = self.graphs[key]
        if isinstance(graph, Exception):
            raise graph
        return graph


def _meaning(name: str) -> str | None:
    return next((op_name for op_name, aliases in calls.ALIASES.items() if name in aliases), None)


def _fed(array: np.ndarray, name: str, wanted, dtype_name: str) -> np.ndarray:
    """The case's array, refused when the graph's input has another float type (a graph is typed)."""
    if wanted is not None and np.dtype(wanted) != array.dtype and array.dtype != np.int64:
        raise TypeError(f"graph input {name!r} is {get_format(np.dtype(wanted).name).name}; this case is {dtype_name}: "
                        "select the cases of its dtype with --dtype, or give a function that builds the graph for a "
                        "dtype")
    return array


# ---------------------------------------------------------------------------------------------
# The one-call probe (usercode.py runs it in a separate process when the imports do not decide)


def probe_main(request: str) -> None:
    """Print {"framework": NAME}: the first candidate whose arrays the target takes and whose own
    kind of array it returns, else the first it runs with, else null; then exit at once."""
    from normdiff import processes

    processes.die_with_parent()  # SIGKILLed with normdiff (the parent kills it, and what it left, itself)
    status = 1
    try:
        asked = json.loads(request)
        if asked.get("module") and asked.get("source"):  # a module where the parent found it (python -P)
            put_module_on_path(asked["module"], asked["source"])
        print(json.dumps({"framework": probe(asked["target"], asked["op"], asked["candidates"])}), flush=True)
        status = 0
    except BaseException:  # noqa: BLE001 - its import raised, or called sys.exit: no answer (the run says why)
        pass
    finally:  # now, without waiting for a thread the code left running (Python would, at exit)
        os._exit(status)


def probe(target: str, op: str, candidates: list[str]) -> str | None:
    from normdiff.cases.model import Case
    from normdiff.harness.data.conventions import CONVENTIONS

    obj = _load(target)
    if inspect.isclass(obj):
        bases = [b.__module__ for b in inspect.getmro(obj)]
        return next((n for n in candidates if FRAMEWORKS[n].module_types and
                     any(m.startswith(FRAMEWORKS[n].module_types) for m in bases)), None)
    record = OPS[op]
    convention = next(c for c in CONVENTIONS.values() if op in c.contracts)
    case = Case.of(op, convention.name, "float32", "2x2x8" if "num_heads" in record.dims else "2x16")
    inputs = case.inputs()
    ran = None
    for name in candidates:
        fw = FRAMEWORKS[name]
        try:
            fw.setup()
            out = FunctionAdapter(obj, fw, record, "", target, None)(op, case.contract, inputs)
        except Exception:  # noqa: BLE001 - it does not take this framework's arrays
            continue
        if isinstance(out, dict):  # an op with several results (a fused add's): judged by its y
            out = out.get("y")
        elif isinstance(out, (tuple, list)) and out:
            out = out[0]
        own = fw.array_types and type(out).__module__.startswith(fw.array_types)
        if own or (name == "numpy" and isinstance(out, np.ndarray)):
            return name
        ran = ran or name
    return ran


# ---------------------------------------------------------------------------------------------
# The backward pass of user code

def make_backward_adapter(target: UserTarget | str, framework: str = "", op: str = "", call: str = "", init: str = "",
                          weight_attr: str = "", forced: bool = False):
    """The backward adapter of a user's target (given as to make_adapter): an explicit backward
    (first parameter dy: UserTarget.backward_of) called as the op's backward_call, in any
    framework; or a forward differentiated by its framework (torch autograd, a custom
    torch.autograd.Function's own backward included; jax.vjp)."""
    target = _user_target(target, framework, op, call, init, weight_attr, forced)
    obj = _load(target)
    record, fw = OPS[target.op], FRAMEWORKS[target.framework]
    if target.backward_of(obj):
        return ExplicitBackward(obj, fw, record, target.call, target.shown)
    if fw.differentiate is None:
        raise TypeError(f"normdiff differentiates torch and JAX code; for {fw.name} give an explicit backward, "
                        f"{record.backward_signature}")
    forward = _forward_adapter(target, obj)
    if isinstance(forward, GraphAdapter):
        raise TypeError(f"{target.shown} is a graph: normdiff cannot differentiate it; give an explicit backward, "
                        f"{record.backward_signature}")
    return DifferentiatedForward(forward, fw, record)


class ExplicitBackward:
    """fn(dy, <the op's call>) -> the gradients in the call's operand order (dx, dw; dx, dgate, dw
    for the gated norm), a dict of them by name (dx / x, ...), or dx alone for an op with only x.
    An op with several results takes one upstream gradient per result, dy first: a fused add's
    fn(dy, dresidual_out, x, residual, weight, eps) -> (dx, dresidual, dw) (the record's
    backward_call; the upstreams after dy bind like the call, by position or by name: dh, dres)."""

    def __init__(self, fn, framework: Framework, record: Op, call: str, shown: str):
        import functools

        self.fn, self.framework, self.record, self.shown = fn, framework, record, shown
        # the call after dy binds like a forward's: by position, or by name through the aliases
        rest = calls.backward_rest(record)
        signature = f"{record.name}_backward(dy, {', '.join(rest)})"
        self.template = (calls.parse(call, calls.names_for(record, backward=True)) if call
                         else calls.default_call(functools.partial(fn, None), record, shown, rest, signature))

    @property
    def takes(self) -> set[str]:
        return self.template.names()

    def __call__(self, op: str, contract: Contract, inputs: CaseInputs, dy) -> dict:
        upstream = dict(dy) if isinstance(dy, dict) else {"y": dy}
        missing = [r for r in self.record.results if r not in upstream]
        if missing:
            raise ValueError(f"no upstream gradient of {', '.join(missing)} to call {self.shown} with")
        given = {name: self.framework.from_numpy(np.asarray(upstream[result]))
                 for name, result in zip(self.record.upstreams, self.record.results)}  # dy, dresidual_out
        first = given.pop("dy")
        values = {**_values(self.framework, contract, inputs), **given}
        args, kwargs = self.template.bind(values)
        return self.named(self.fn(first, *args, **kwargs))

    def named(self, value) -> dict:
        wanted = list(self.record.gradients.items())  # (dx, x), (dw, weight), ...
        if isinstance(value, dict):
            by_name = {operand: value.get(out, value.get(operand)) for out, operand in wanted}
            return {k: v for k, v in by_name.items() if v is not None}
        if isinstance(value, (tuple, list)):
            if len(value) != len(wanted):
                raise TypeError(f"{self.shown} returned {len(value)} values; {self.record.backward_signature} "
                                f"returns {len(wanted)}")
            return {operand: v for (_, operand), v in zip(wanted, value)}
        if len(wanted) == 1:
            return {"x": value}
        raise TypeError(f"{self.shown} returned a {type(value).__name__}; {self.record.backward_signature} returns "
                        f"a tuple of {len(wanted)}")


class DifferentiatedForward:
    """J^T dy of a user's forward (a function or a module class), by its framework's autograd. For
    an op with several results (a fused add's (y, residual_out)) dy is {result: upstream gradient}
    and the forward's results (a tuple, a list or a dict by name) are differentiated together: the
    gradients are the sum of each result's J^T times its upstream gradient."""

    def __init__(self, forward, framework: Framework, record: Op):
        self.forward, self.framework, self.record = forward, framework, record

    @property
    def takes(self) -> set[str] | None:
        return getattr(self.forward, "takes", None)

    def __call__(self, op: str, contract: Contract, inputs: CaseInputs, dy) -> dict:
        floats = {n: a for n, a in inputs.arrays.items() if n in self.record.gradients.values()}
        if isinstance(self.forward, ClassAdapter):  # its gain is a parameter, not an input
            return self._module(contract, inputs, floats, dy)

        def run(leaves):
            return self._results(self.forward.call_with(contract, inputs, leaves))
        return self.framework.differentiate(run, floats, dy, {})

    def _results(self, out):
        """A multi-result forward's value as the tuple of its results, in the record's order (what
        the frameworks' vjp pairs with the upstream gradients); a one-result op's as it is."""
        results = self.record.results
        if len(results) == 1:
            return out
        if isinstance(out, dict):
            missing = [r for r in results if out.get(r) is None]
            if missing:
                raise TypeError(f"{self.forward.shown} returned a dict without {', '.join(missing)}: return "
                                f"({', '.join(results)})")
            return tuple(out[r] for r in results)
        if not isinstance(out, (tuple, list)) or len(out) != len(results):
            got = f"{len(out)} values" if isinstance(out, (tuple, list)) else f"one {type(out).__name__}"
            raise TypeError(f"{self.forward.shown} returned {got}; {self.record.name} returns {len(results)}: "
                            f"({', '.join(results)})")
        return tuple(out)

    def _module(self, contract, inputs, floats, dy) -> dict:
        held = [name for name in MODULE_OPERANDS if floats.pop(name, None) is not None]  # parameters, not inputs
        adapter = self.forward
        module, names = adapter.prepared(contract, inputs)
        params = {operand: _attribute(module, names[operand]) for operand in held if names.get(operand)}

        def run(leaves):
            return self._results(adapter.call_with(contract, inputs, leaves))
        grads = self.framework.differentiate(run, floats, dy, params)
        for operand in held:
            if operand not in grads:
                raise TypeError(f"{adapter.shown}: normdiff {FOUND_NO_GRADIENT} {operand}")
        return grads


def _attribute(module, dotted: str):
    for part in dotted.split("."):
        module = getattr(module, part)
    return module
