"""The norm sites of a model run by normdiff model (implementations/hf_model.py), inside the torch
worker: how each site's call maps onto its op's operands, what the site records, and how a swapped
implementation's output goes on into the model.

  Site         a norm module (or a modeling function, as Qwen3.5's l2norm) computing its op alone.
  FusedSite    the residual add before a norm and the norm as one call (add_rms_norm); hooks catch
               its x (the branch just run) and the running residual (ResidualStream).
  RotarySite   q_norm or k_norm and the RoPE after it as one call (qk_norm_rope); the modeling
               module's apply_rotary_pos_emb is where the call completes.

A quantizing site (rms_norm_quant, or add_rms_norm_quant as a FusedSite) is a Site whose swapped
call returns (q, scale): the model goes on with q * scale per row or block, cast to its dtype, which
is what the FP8 / INT8 linear after the norm computes with (`Site.onward`).
"""
from __future__ import annotations

import contextlib
import importlib
import inspect

import numpy as np
import torch

from normdiff.cases.model import CaseInputs
from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.ops import get_op, quantize
from normdiff.implementations.call_checks import changed_inputs
from normdiff.implementations.frameworks import to_numpy
from normdiff.implementations.frameworks.torch import from_numpy
from normdiff.implementations.hf_model_families import HEADS, HEADS_FIRST, ModelFamily


class SiteFailed(Exception):
    """A swapped implementation raised or returned something the model cannot take."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


class Site:
    """One norm site: how its call maps onto the op's operands, and what it was given and gave."""

    def __init__(self, path: str, rule, module, heads: int):
        self.path, self.rule, self.module, self.heads = path, rule, module, heads
        self.record = get_op(rule.op)
        self.adapter = None  # set for the swapped run
        self.calls: list[dict] = []
        self.order: list[str] = []  # shared by a model's sites: their paths in the order first called

    def eps(self, kwargs: dict, original=None) -> float:
        """The eps this call runs at: the module's, or the function's argument (its default when the
        call leaves it out)."""
        if self.module is None:
            default = inspect.signature(original).parameters["eps"].default if original is not None else None
            return float(kwargs.get("eps", default))
        value = getattr(self.module, "variance_epsilon", getattr(self.module, "eps", None))
        # a class that writes its eps in (OlmoLayerNorm's 1e-5) runs at its convention's
        return float(value if value is not None else get_contract(self.rule.op, self.rule.convention).eps)

    def given(self, args: tuple, kwargs: dict) -> dict:
        """The op's per-row operands (x, gate) as the model's call passes them."""
        call = self.record.module_call or ("x",)
        given = dict(zip(call, args))
        given.update({k: v for k, v in kwargs.items() if k in call})
        if "gate" in call and "gate" not in given:
            given["gate"] = kwargs.get("gate")
        return given

    def operands(self, args: tuple, kwargs: dict) -> tuple[dict, tuple]:
        """The op's arrays (in call order) and the shape of the module's input as the model holds it."""
        given = self.given(args, kwargs)
        arrays = {}
        for name in self.record.inputs:  # x first
            if name in given:
                arrays[name] = to_numpy(self.to_rows(given[name]))
            else:  # a parameter of the module (weight, bias), or its identity where the class has none
                arrays[name] = self.parameter(name, arrays["x"])
        return arrays, tuple(args[0].shape)

    def parameter(self, name: str, x: np.ndarray) -> np.ndarray:
        """The module's `name` parameter; a class without one (CohereLayerNorm's bias, OlmoLayerNorm's
        weight and bias) applies the identity: gain 1 (stored 1 - the convention's offset), bias 0."""
        param = getattr(self.module, name, None)
        if isinstance(param, torch.Tensor):
            return to_numpy(param)
        identity = 1.0 - get_contract(self.rule.op, self.rule.convention).weight_offset if name == "weight" else 0.0
        return np.full(x.shape[-1], identity, dtype=x.dtype)

    def to_rows(self, t: torch.Tensor) -> torch.Tensor:
        if self.rule.layout == HEADS_FIRST:
            t = t.transpose(1, 2)
        if self.rule.layout in (HEADS, HEADS_FIRST):
            return t.reshape(-1, t.shape[-2] * t.shape[-1]).contiguous()
        return t.reshape(-1, t.shape[-1]).contiguous()

    def from_rows(self, t: torch.Tensor, shape: tuple) -> torch.Tensor:
        if self.rule.layout == HEADS_FIRST:
            b, h, n, d = shape
            return t.reshape(b, n, h, d).transpose(1, 2)
        return t.reshape(shape)

    def __call__(self, original, args: tuple, kwargs: dict):
        arrays, shape = self.operands(args, kwargs)
        heads = self.heads  # 1 but for a rule that names its heads' config field (q_norm, k_norm, groups)
        eps = self.eps(kwargs, original)
        onward = None
        if self.adapter is None:
            out = original(*args, **kwargs)
            results = {"y": to_numpy(self.to_rows(out)), **self.reference_extra(args)}
        else:
            results = self.swapped(arrays, heads, eps)
            onward = self.onward(results, eps)
            out = self.from_rows(from_numpy(onward.astype(arrays["x"].dtype, copy=False)), shape)
            self.carry(results, shape)
        self.record_call(arrays, heads, eps, results, onward if self.record.quantizes else None)
        return out

    def record_call(self, arrays: dict, heads: int, eps: float, results: dict, onward=None) -> None:
        if not self.calls:
            self.order.append(self.path)
        y = results if len(results) > 1 else results["y"]
        self.calls.append({"arrays": arrays, "num_heads": heads, "eps": eps, "y": y,
                           **({"onward": onward} if onward is not None else {})})

    def contract(self, eps: float):
        return get_contract(self.rule.op, self.rule.convention).replace(eps=eps)

    def onward(self, results: dict, eps: float) -> np.ndarray:
        """What the swapped call hands on to the model: y; a quantizing op's q * scale (per row or
        block, in float64, the model casting it to its dtype), what the quantized linear after the
        norm computes with: the FP8 error shows in the logits, and a NaN code travels on."""
        if not self.record.quantizes:
            return results["y"]
        try:
            return quantize.dequantized(results["q"], results["scale"], self.contract(eps))
        except (ValueError, TypeError) as exc:
            raise SiteFailed(self.path, f"returned {exc}") from exc

    def reference_extra(self, args: tuple) -> dict:
        """The model's own results beyond y (a fused site's residual_out)."""
        return {}

    def carry(self, results: dict, shape: tuple) -> None:
        """Hand a swapped call's further results on to the model (a fused site's residual_out)."""

    def swapped(self, arrays: dict, heads: int, eps: float) -> dict:
        contract = self.contract(eps)
        inputs = CaseInputs({k: v.copy() for k, v in arrays.items()}, heads)  # the model's own stay as they are
        try:
            value = self.adapter(self.rule.op, contract, inputs)
            values = self.record.by_result(value) if len(self.record.results) > 1 else {"y": value}
            results = {name: to_numpy(v) for name, v in values.items()}
        except Exception as exc:
            raise SiteFailed(self.path, f"raised {type(exc).__name__}: {exc}") from exc
        except SystemExit as exc:  # a model must go on: ending the process is a failure of the site
            raise SiteFailed(self.path, f"called sys.exit({exc.code!r}): an implementation must return its output") \
                from exc
        changed = changed_inputs(arrays, inputs.arrays)
        if changed:  # in a model that input is the residual stream, or the weight of every later call
            raise SiteFailed(self.path, changed)
        for name, y in results.items():
            if name == "scale":  # one per row or block: read in any layout that holds them (onward)
                continue
            if not isinstance(y, np.ndarray) or y.shape != arrays["x"].shape:
                got = getattr(y, "shape", type(y).__name__)
                what = "" if name == "y" else f" as {name}"
                raise SiteFailed(self.path, f"returned {got}{what}; the site needs {arrays['x'].shape}")
        return results


class ResidualStream:
    """The residual stream as vLLM's fused decoder holds it: `residual`, the running sum, starts as
    the first decoder layer's input; `branch`, the output of the last branch module (attention,
    MLP) the layers ran. Each fused add site takes (branch, residual) and leaves its residual_out as
    the new residual: in the unswapped run the model's own sum (the norm module's input), in the
    swapped run the implementation's, so a wrong residual_out travels on. transformers' own adds
    are still computed, but every value they feed is a fused site's input, which reads the stream."""

    def __init__(self, model, branches: tuple[str, ...]):
        self.residual = self.branch = None
        layers = [m for _, m in model.named_modules() if all(hasattr(m, b) for b in branches)]
        layers[0].register_forward_pre_hook(self._first_input, with_kwargs=True)
        for layer in layers:
            for name in branches:
                layer.get_submodule(name).register_forward_hook(self._branch_output)

    def _first_input(self, _module, args, kwargs):
        self.residual = args[0] if args else kwargs["hidden_states"]

    def _branch_output(self, _module, _args, out):
        self.branch = out[0] if isinstance(out, tuple) else out


class FusedSite(Site):
    """A norm module that, with the residual add before it, is one fused call (add_rms_norm):
    x = the branch output just added, residual = the stream's running sum (ResidualStream); the
    norm module's own input is their sum, rounded as the model rounds it."""

    def __init__(self, path: str, rule, module, heads: int, stream: ResidualStream):
        super().__init__(path, rule, module, heads)
        self.stream = stream

    def given(self, args: tuple, kwargs: dict) -> dict:
        return {"x": self.stream.branch, "residual": self.stream.residual}

    def reference_extra(self, args: tuple) -> dict:
        self.stream.residual = args[0]
        return {"residual_out": to_numpy(self.to_rows(args[0]))}

    def carry(self, results: dict, shape: tuple) -> None:
        carried = from_numpy(np.ascontiguousarray(results["residual_out"]))
        self.stream.residual = carried.to(self.stream.residual.dtype).reshape(shape)


class RotarySite(Site):
    """q_norm or k_norm and the RoPE the attention applies next, as one call (qk_norm_rope). The norm
    module's call takes x (the projection, (batch, tokens, heads, head_dim)); in the swapped run it
    hands x on unnormalised, and the fused call is made where the attention calls the modeling
    module's `rotary` function with q and k, which then returns the implementation's results. The
    positions are the tokens' (one sequence: 0..T-1)."""

    def __init__(self, path: str, rule, module, heads: int):
        super().__init__(path, rule, module, heads)
        self.pending: list = []  # shared by a model's rotary sites: (site, operands) awaiting the RoPE

    def operands(self, args: tuple, kwargs: dict) -> tuple[dict, tuple]:
        x = args[0]
        batch, tokens = x.shape[0], x.shape[1]
        return {"x": to_numpy(self.to_rows(x)), "weight": to_numpy(self.module.weight),
                "positions": np.tile(np.arange(tokens, dtype=np.int64), batch)}, tuple(x.shape)

    def __call__(self, original, args: tuple, kwargs: dict):
        arrays, shape = self.operands(args, kwargs)
        self.pending.append((self, arrays, shape, self.eps(kwargs)))
        return args[0] if self.adapter is not None else original(*args, **kwargs)

    def rotated(self, arrays: dict, shape: tuple, eps: float, reference: torch.Tensor | None) -> torch.Tensor:
        """The site's output in the attention's layout (batch, heads, tokens, head_dim): the model's
        own (`reference`, recorded) or the implementation's."""
        heads = self.heads
        if reference is not None:
            results = {"y": to_numpy(self.to_rows(reference.transpose(1, 2)))}
            out = reference
        else:
            results = self.swapped(arrays, heads, eps)
            out = self.from_rows(from_numpy(results["y"].astype(arrays["x"].dtype, copy=False)), shape).transpose(1, 2)
        self.record_call(arrays, heads, eps, results)
        return out


@contextlib.contextmanager
def rotary_sites(family: ModelFamily, sites: list[Site]):
    """The modeling module's RoPE function replaced for the forward where a rotary site is: it
    completes the q and k sites the attention's norms just opened."""
    rotary = [s for s in sites if isinstance(s, RotarySite)]
    if not rotary:
        yield
        return
    modeling = importlib.import_module(family.modeling)
    name = rotary[0].rule.rotary
    original = getattr(modeling, name)
    pending = rotary[0].pending
    for s in rotary:
        s.pending = pending

    def replacement(q, k, cos, sin, *args, **kwargs):
        if len(pending) < 2:  # not the model's attention: an implementation's own (hf-qwen3 builds one)
            return original(q, k, cos, sin, *args, **kwargs)
        (q_site, q_arrays, q_shape, q_eps), (k_site, k_arrays, k_shape, k_eps) = pending[:2]
        del pending[:2]
        if q_site.adapter is None:
            q_ref, k_ref = original(q, k, cos, sin, *args, **kwargs)
        else:
            q_ref = k_ref = None
        return (q_site.rotated(q_arrays, q_shape, q_eps, q_ref), k_site.rotated(k_arrays, k_shape, k_eps, k_ref))

    setattr(modeling, name, replacement)
    try:
        yield
    finally:
        setattr(modeling, name, original)
        del pending[:]


def wrap(module, site: Site) -> None:
    """Route the module's forward through the site (an instance attribute: the class is untouched)."""
    original = module.forward
    module.forward = lambda *args, **kwargs: site(original, args, kwargs)


@contextlib.contextmanager
def function_sites(model, family: ModelFamily, sites: list[Site]):
    """The modeling module's norm functions (Qwen3.5's l2norm of q and k) replaced for the forward:
    each call is a site named by the module whose forward makes it and the call's place in it
    (l2norm[0] is q's, l2norm[1] k's)."""
    rules = [r for r in family.sites if r.function]
    if not rules:
        yield
        return
    modeling = importlib.import_module(family.modeling)
    by_path = {s.path: s for s in sites}
    saved, hooks, current = {}, [], {"path": "", "count": 0}

    def enter(path):
        def pre(_module, _args):
            current.update(path=path, count=0)
        return pre

    for rule in rules:
        for path, module in model.named_modules():
            if path.endswith("." + rule.caller):
                hooks.append(module.register_forward_pre_hook(enter(path)))
        original = getattr(modeling, rule.function)
        saved[rule.function] = original

        def replacement(*args, _rule=rule, _original=original, **kwargs):
            name = f"{current['path']}.{_rule.function}[{current['count']}]"
            current["count"] += 1
            if name not in by_path:
                by_path[name] = Site(name, _rule, None, 1)
                by_path[name].order = sites[0].order
                sites.append(by_path[name])
            return by_path[name](_original, args, kwargs)

        setattr(modeling, rule.function, replacement)
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(modeling, name, original)
        for h in hooks:
            h.remove()


