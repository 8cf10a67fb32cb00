"""A small HF model with normdiff at every norm site: built from its family's config (nothing
downloads), given trained-like norm weights, and run twice on the same tokens: once with its own
norm classes, once with the given implementations swapped into the sites of their kind. Runs inside
the torch worker (`("task", "normdiff.implementations.hf_model:run", ...)`); the parent judges.

Every site records, per call, the op's operands as the implementation receives them (x laid out as
the op's (rows, width), the module's weight and bias, the gate) and the output that went on into
the model. A swapped site hands its operands to the implementation's adapter, the same one a
`normdiff run` calls, so any target that check accepts (a torch class, a NumPy or JAX function, a
mutant, another HF family's class) can stand in a torch model.

Trained-like weights (the seed course's Qwen3.5 figures): a layer norm's gains 1 + d, d drawn as the
layer-0 input_layernorm's stored w - 1 (mean +0.238, range [-0.11, +1.00]); the final norm's as its
(mean +3.309, range [-0.78, +5.31]); stored as gains - the convention's weight offset (w - 1 for a
1 + w family), rounded to the model's dtype as a checkpoint in that dtype is. LayerNorm biases as
trained GPT-2 / Pythia ones. The embedding rows keep transformers' init but are scaled per token by
10**U(-2, 1): trained tables span decades of row norms (rare tokens stay small), and the smallest
rows reach the regime where eps matters, which a table of one scale never does.
"""
from __future__ import annotations

import contextlib
import importlib

import numpy as np
import torch
import transformers

from normdiff.cases.model import CaseInputs
from normdiff.cases.regimes import BIAS_REGIMES, WEIGHT_REGIMES, final_norm_offsets
from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.dtypes import get_format
from normdiff.harness.data.ops import get_op
from normdiff.implementations.frameworks import to_numpy
from normdiff.implementations.frameworks.torch import from_numpy
from normdiff.implementations.hf_model_families import FULL_VECTOR, HEADS, HEADS_FIRST, ModelFamily, get_family
from normdiff.implementations.loading import make_adapter

EMBEDDING_DECADES = (-2.0, 1.0)  # each token row's scale is 10**U(these)


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

    def eps(self, kwargs: dict) -> float:
        if self.module is None:
            return float(kwargs.get("eps", 1e-6))
        value = getattr(self.module, "variance_epsilon", getattr(self.module, "eps", None))
        return float(value)

    def operands(self, args: tuple, kwargs: dict) -> tuple[dict, tuple]:
        """The op's arrays (in call order) and x's shape as the model holds it."""
        call = self.record.module_call or ("x",)
        given = dict(zip(call, args))
        given.update({k: v for k, v in kwargs.items() if k in call})
        if "gate" in call and "gate" not in given:
            given["gate"] = kwargs.get("gate")
        shape = tuple(given["x"].shape)
        arrays = {}
        for name in self.record.inputs:
            if name in given:
                arrays[name] = to_numpy(self.to_rows(given[name]))
            else:  # a parameter of the module (weight, bias)
                arrays[name] = to_numpy(getattr(self.module, name))
        return arrays, shape

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

    def num_heads(self, width: int) -> int:
        if self.rule.layout in (HEADS, HEADS_FIRST, FULL_VECTOR) or self.rule.heads:
            return self.heads
        return 1

    def __call__(self, original, args: tuple, kwargs: dict):
        arrays, shape = self.operands(args, kwargs)
        heads = self.num_heads(arrays["x"].shape[-1])
        eps = self.eps(kwargs)
        if self.adapter is None:
            out = original(*args, **kwargs)
            y = to_numpy(self.to_rows(out))
        else:
            y = self.swapped(arrays, heads, eps)
            out = self.from_rows(from_numpy(y.astype(arrays["x"].dtype, copy=False)), shape)
        if not self.calls:
            self.order.append(self.path)
        self.calls.append({"arrays": arrays, "num_heads": heads, "eps": eps, "y": y})
        return out

    def swapped(self, arrays: dict, heads: int, eps: float) -> np.ndarray:
        contract = get_contract(self.rule.op, self.rule.convention).replace(eps=eps)
        inputs = CaseInputs({k: v.copy() for k, v in arrays.items()}, heads)
        try:
            value = self.adapter(self.rule.op, contract, inputs)
            y = to_numpy(value)
        except Exception as exc:
            raise SiteFailed(self.path, f"raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(y, np.ndarray) or y.shape != arrays["x"].shape:
            got = getattr(y, "shape", type(y).__name__)
            raise SiteFailed(self.path, f"returned {got}; the site needs {arrays['x'].shape}")
        return y


def _wrap(module, site: Site) -> None:
    """Route the module's forward through the site (an instance attribute: the class is untouched)."""
    original = module.forward
    module.forward = lambda *args, **kwargs: site(original, args, kwargs)


# ---- building --------------------------------------------------------------------------------


def build(family: ModelFamily, dtype: str, seed: int) -> torch.nn.Module:
    config_cls = getattr(transformers, family.config)
    model_cls = getattr(transformers, family.model)
    config = config_cls(**dict(family.settings), **{family.eps_field: family.norm_eps()})
    config._attn_implementation = "eager"  # the same attention on every machine
    torch.manual_seed(seed)
    model = model_cls(config).eval().to(getattr(torch, get_format(dtype).name))
    rng = np.random.default_rng(seed)
    _scale_embeddings(model, family, rng)
    for path, module in model.named_modules():
        rule = family.rule_for(path)
        if rule is not None:
            _set_trained(module, rule, rng, final=path == family.final)
    return model


def _scale_embeddings(model, family: ModelFamily, rng) -> None:
    emb = model.get_submodule(family.embedding).weight
    low, high = EMBEDDING_DECADES
    scales = 10.0 ** rng.uniform(low, high, emb.shape[0])
    with torch.no_grad():
        emb.copy_((emb.float() * torch.from_numpy(scales).float()[:, None]).to(emb.dtype))


def _set_trained(module, rule, rng, final: bool) -> None:
    offset = get_contract(rule.op, rule.convention).weight_offset
    with torch.no_grad():
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor):
            n = weight.numel()
            d = final_norm_offsets(rng, (n,)) if final else WEIGHT_REGIMES["trained"](rng, (n,))
            weight.copy_(torch.from_numpy(1.0 + d - offset).reshape(weight.shape).to(weight.dtype))
        bias = getattr(module, "bias", None)
        if isinstance(bias, torch.Tensor):
            bias.copy_(torch.from_numpy(BIAS_REGIMES["trained"](rng, (bias.numel(),))).to(bias.dtype))


def install(model, family: ModelFamily) -> list[Site]:
    """Every norm site of the model, in module order, each wrapped; function sites (l2norm) are
    wrapped by `function_sites` around a forward."""
    sites, order = [], []
    config = model.config
    for path, module in model.named_modules():
        rule = family.rule_for(path)
        if rule is None:
            continue
        heads = int(getattr(config, rule.heads)) if rule.heads else 1
        site = Site(path, rule, module, heads)
        site.order = order
        _wrap(module, site)
        sites.append(site)
    return sites


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


# ---- running ---------------------------------------------------------------------------------


def run(family: str, dtype: str = "bfloat16", seed: int = 0, tokens: int = 128, swaps: dict | None = None) -> dict:
    """Both runs. `swaps`: kind -> Implementation. The result (plain data, for the parent):
    sites: [{path, kind, op, convention, reference: [call], swapped: [call]}], each call
    {arrays, num_heads, eps, y}; logits and last hidden state of each run; `failed` when a
    swapped implementation raised or returned the wrong shape ({path, why}; the swapped run stops
    there)."""
    fam = get_family(family)
    model = build(fam, dtype, seed)
    sites = install(model, fam)
    vocab = model.config.vocab_size
    ids = torch.from_numpy(np.random.default_rng(seed + 1).permutation(vocab)[:tokens].astype(np.int64))[None]
    reference = _forward(model, fam, sites, ids)
    if reference["failed"]:  # only a swapped site raises SiteFailed; kept for the one that says why
        raise RuntimeError(f"the unswapped model failed at {reference['failed']['path']}")
    adapters = {kind: make_adapter(impl) for kind, impl in (swaps or {}).items()}
    for site in sites:
        site.adapter = adapters.get(site.rule.kind)
    by_path = {s.path: s for s in sites}
    swapped = _forward(model, fam, sites, ids)
    failed = swapped.pop("failed")
    return {"family": family, "dtype": get_format(dtype).name, "seed": seed, "tokens": ids[0].tolist(),
            "transformers": transformers.__version__, "torch": torch.__version__,
            "sites": [_site_data(by_path[p], reference["calls"], swapped["calls"]) for p in reference["calls"]],
            "reference": {k: reference[k] for k in ("logits", "hidden")},
            "swapped": None if failed else {k: swapped[k] for k in ("logits", "hidden")}, "failed": failed}


def _forward(model, family: ModelFamily, sites: list[Site], ids) -> dict:
    for s in sites:
        s.calls = []
    del sites[0].order[:]
    try:
        with torch.no_grad(), function_sites(model, family, sites):
            out = model(ids, output_hidden_states=True)
    except SiteFailed as exc:  # what the sites before it were given and gave is kept
        out, failed = None, {"path": exc.path, "why": exc.why}
    else:
        failed = None
    calls = {path: next(s for s in sites if s.path == path).calls for path in sites[0].order}
    if out is None:
        return {"calls": calls, "failed": failed}
    return {"calls": calls, "logits": to_numpy(out.logits[0]), "hidden": to_numpy(out.hidden_states[-1][0]),
            "failed": None}


def _site_data(site: Site, reference: dict, swapped: dict) -> dict:
    return {"path": site.path, "kind": site.rule.kind, "op": site.rule.op, "convention": site.rule.convention,
            "reference": reference.get(site.path, []), "swapped": swapped.get(site.path, [])}
