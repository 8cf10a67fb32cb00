"""The user's own function or module class, called the way `normdiff check` documents.

Functions are called with the op record's call (`normdiff list ops` shows them) in the user's
framework (arrays in the case dtype), e.g. rms_norm(x, weight, eps) or qk_norm(x, weight,
num_heads, eps); a trailing argument the record marks optional may be left out (l2_norm(x) when
its eps has a default). Classes are built as `Cls(dim, eps=eps)`, given the case's weight in their
`weight` attribute or parameter, and called with the record's module call (forward(x) or
forward(x, gate)); for an op over heads a class is applied to x viewed as (..., heads, head_dim),
as Qwen3Attention applies q_norm (or to the full vector when the convention's norm spans it, as
OLMo2's does). An op without a class protocol (the record's module_call is None) refuses classes.
Imported only inside the worker of the user's framework.
"""
from __future__ import annotations

import inspect

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.contracts import Contract
from normdiff.harness.data.ops import OPS, Op
from normdiff.implementations.frameworks import FRAMEWORKS
from normdiff.implementations.frameworks.record import Framework
from normdiff.implementations.loading import load_entry


def make_adapter(target: str, framework: str, op: str):
    try:
        obj = load_entry(target)
    except (AttributeError, FileNotFoundError) as exc:
        raise TypeError(f"cannot load {target}: {exc}") from None
    record, fw = OPS[op], FRAMEWORKS[framework]
    if inspect.isclass(obj):
        if record.module_call is None:
            raise TypeError(f"{target} is a class; for {op} give a function {record.signature}")
        return ClassAdapter(obj, fw, record)
    if callable(obj):
        return FunctionAdapter(obj, fw, record)
    raise TypeError(f"{target} is a {type(obj).__name__}, not a function or a class")


class FunctionAdapter:
    def __init__(self, fn, framework: Framework, record: Op):
        self.fn, self.framework, self.record = fn, framework, record
        self.names = _check_signature(fn, record)

    def __call__(self, op: str, contract: Contract, inputs: CaseInputs):
        values = {name: self.framework.from_numpy(a) for name, a in inputs.arrays.items()}
        values.update(eps=contract.eps, num_heads=inputs.num_heads)
        return self.fn(*(values[name] for name in self.names))


def _check_signature(fn, record: Op) -> tuple[str, ...]:
    """The arguments to pass, or a TypeError that shows the expected call."""
    call = record.call
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return call  # builtins without a signature: just call it
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return call
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    shorter = [call[:len(call) - len(record.optional)]] if record.optional else []
    for names in [call] + shorter:
        if len(required) <= len(names) <= len(positional):
            return names
    shown = f"{getattr(fn, '__name__', fn)}({', '.join(p.name for p in positional)})"
    raise TypeError(f"{shown} has the wrong signature for {record.name}: normdiff calls {record.signature}")


class ClassAdapter:
    def __init__(self, cls, framework: Framework, record: Op):
        self.cls, self.framework, self.record = cls, framework, record
        self.modules: dict[tuple, object] = {}

    def __call__(self, op: str, contract: Contract, inputs: CaseInputs):
        a = inputs.arrays
        width = a["x"].shape[-1]
        # the span the module normalises: each head (width for an op without heads), or the full
        # vector when the convention's norm spans it
        span = width // inputs.num_heads if contract.scope == "head" else width
        module = self._module(span, contract.eps, a)
        args = [self.framework.from_numpy(a[name]) for name in self.record.module_call]
        if span == width:
            return module(*args)
        x = args[0]
        heads = x.reshape(*x.shape[:-1], inputs.num_heads, span)  # as Qwen3Attention feeds q_norm
        return module(heads, *args[1:]).reshape(x.shape)

    def _module(self, dim: int, eps: float, arrays):
        key = (dim, eps, arrays["x"].dtype.str)
        if key not in self.modules:
            try:
                module = self.cls(dim, eps=eps)
            except TypeError as exc:
                raise TypeError(f"{self.cls.__name__} must be constructible as {self.cls.__name__}(dim, eps=...): "
                                f"{exc}") from None
            self.modules[key] = self.framework.prepare_module(module, arrays["x"])
        module = self.modules[key]
        if "weight" in arrays:
            self._set_weight(module, arrays["weight"])
        return module

    def _set_weight(self, module, weight) -> None:
        if not hasattr(module, "weight"):
            raise TypeError(f"{type(module).__name__} has no `weight` to load the case's weights into")
        if self.framework.set_weight is not None:
            self.framework.set_weight(module, "weight", weight)
        else:
            module.weight = self.framework.from_numpy(weight)
