"""The user's own function or module class, called the way `normdiff check` documents.

Functions are called with the op's signature in the user's framework (arrays in the case dtype):
    rms_norm(x, weight, eps)          gated_rms_norm(x, gate, weight, eps)
    l2_norm(x, eps)  (or l2_norm(x) when eps has a default)
    qk_norm(x, weight, num_heads, eps)   qk_norm_rope(x, weight, positions, num_heads, eps)
Classes are built as `Cls(dim, eps=eps)`, given the case's weight in their `weight` attribute or
parameter, and called as `forward(x)` or `forward(x, gate)`; for qk_norm a class is applied to
x viewed as (..., heads, head_dim), as Qwen3Attention applies q_norm (or to the full vector when
the convention's norm spans it, as OLMo2's does).
Imported only inside the worker of the user's framework.
"""
from __future__ import annotations

import inspect

import numpy as np

from normdiff.cases.model import CaseInputs
from normdiff.harness.contracts import OPS, Contract
from normdiff.harness.worker import load_entry

# the call each op makes: names of its positional arguments
CALLS = {
    "rms_norm": ("x", "weight", "eps"),
    "gated_rms_norm": ("x", "gate", "weight", "eps"),
    "l2_norm": ("x", "eps"),
    "qk_norm": ("x", "weight", "num_heads", "eps"),
    "qk_norm_rope": ("x", "weight", "positions", "num_heads", "eps"),
}


def make_adapter(target: str, framework: str, op: str):
    try:
        obj = load_entry(target)
    except (AttributeError, FileNotFoundError) as exc:
        raise TypeError(f"cannot load {target}: {exc}") from None
    convert = _converter(framework)
    if inspect.isclass(obj):
        if op == "qk_norm_rope":  # a norm module cannot take the positions; RoPE is not its business
            raise TypeError(f"{target} is a class; for qk_norm_rope give a function "
                            "qk_norm_rope(x, weight, positions, num_heads, eps)")
        return ClassAdapter(obj, convert, op)
    if callable(obj):
        return FunctionAdapter(obj, convert, op)
    raise TypeError(f"{target} is a {type(obj).__name__}, not a function or a class")


def _converter(framework: str):
    if framework == "torch":
        from normdiff.implementations.torch_own import to_torch

        return to_torch
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray
    return lambda a: a


class FunctionAdapter:
    def __init__(self, fn, convert, op: str):
        self.fn, self.convert, self.op = fn, convert, op
        self.names = _check_signature(fn, op)

    def __call__(self, op: str, contract: Contract, inputs: CaseInputs):
        values = {name: self.convert(a) for name, a in inputs.arrays.items()}
        values.update(eps=contract.eps, num_heads=inputs.num_heads)
        return self.fn(*(values[name] for name in self.names))


def _check_signature(fn, op: str) -> tuple[str, ...]:
    """The arguments to pass, or a TypeError that shows the expected call."""
    call = CALLS[op]
    expected = f"{op}({', '.join(call)})"
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return call  # builtins without a signature: just call it
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return call
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    shown = f"{getattr(fn, '__name__', fn)}({', '.join(p.name for p in positional)})"
    if len(required) <= len(call) <= len(positional):
        return call
    if op == "l2_norm" and len(required) <= 1 <= len(positional):
        return ("x",)  # l2_norm(x): its eps has a default, or it takes none
    raise TypeError(f"{shown} has the wrong signature for {op}: normdiff calls {expected}")


class ClassAdapter:
    def __init__(self, cls, convert, op: str):
        self.cls, self.convert, self.op = cls, convert, op
        self.modules: dict[tuple, object] = {}

    def __call__(self, op: str, contract: Contract, inputs: CaseInputs):
        a = inputs.arrays
        x = self.convert(a["x"])
        width = a["x"].shape[-1]
        span = width if (op not in ("qk_norm", "qk_norm_rope") or contract.scope == "full") else width // inputs.num_heads
        module = self._module(span, contract.eps, a)
        if op == "gated_rms_norm":
            return module(x, self.convert(a["gate"]))
        if span == width:
            return module(x)
        heads = x.reshape(*x.shape[:-1], inputs.num_heads, span)  # as Qwen3Attention feeds q_norm
        return module(heads).reshape(x.shape)

    def _module(self, dim: int, eps: float, arrays):
        key = (dim, eps, arrays["x"].dtype.str)
        if key not in self.modules:
            try:
                module = self.cls(dim, eps=eps)
            except TypeError as exc:
                raise TypeError(f"{self.cls.__name__} must be constructible as {self.cls.__name__}(dim, eps=...): "
                                f"{exc}") from None
            self.modules[key] = _to_dtype(module, arrays["x"])
        module = self.modules[key]
        if OPS[self.op].has_weight:
            _set_weight(module, arrays["weight"], self.convert)
        return module


def _to_dtype(module, x: np.ndarray):
    """A torch module in the case dtype, as a model loaded in bf16 holds its norms."""
    if hasattr(module, "to") and hasattr(module, "parameters"):
        from normdiff.implementations.torch_own import to_torch

        return module.to(to_torch(x[:0]).dtype)
    return module


def _set_weight(module, weight: np.ndarray, convert) -> None:
    if not hasattr(module, "weight"):
        raise TypeError(f"{type(module).__name__} has no `weight` to load the case's weights into")
    current = module.weight
    if hasattr(current, "data") and hasattr(current, "copy_"):  # a torch parameter
        import torch

        value = convert(weight)
        if tuple(current.shape) != tuple(value.shape):
            raise TypeError(f"{type(module).__name__}.weight has shape {tuple(current.shape)}; the case's "
                            f"weight is {tuple(value.shape)}")
        with torch.no_grad():
            current.copy_(value)
    else:
        module.weight = convert(weight)
