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

import dataclasses

import numpy as np
import torch
import transformers

from normdiff.cases.regimes import BIAS_REGIMES, WEIGHT_REGIMES, final_norm_offsets
from normdiff.harness.data.conventions import get_contract
from normdiff.harness.data.dtypes import get_format
from normdiff.implementations.frameworks import to_numpy
from normdiff.implementations.hf_model_families import ModelFamily, get_family
from normdiff.implementations.hf_model_sites import (FusedSite, ResidualStream, RotarySite, Site, SiteFailed,
                                                     function_sites, rotary_sites, wrap)
from normdiff.implementations.loading import make_adapter

EMBEDDING_DECADES = (-2.0, 1.0)  # each token row's scale is 10**U(these)


# ---- building --------------------------------------------------------------------------------


def build(family: ModelFamily, dtype: str, seed: int) -> torch.nn.Module:
    config_cls = getattr(transformers, family.config)
    model_cls = getattr(transformers, family.model)
    config = config_cls(**dict(family.settings), **({family.eps_field: family.norm_eps()} if family.eps_field else {}))
    config._attn_implementation = "eager"  # the same attention on every machine
    torch.manual_seed(seed)
    # built as from_pretrained(dtype=...) builds it: under that default dtype, so that buffers made
    # in float32 on purpose stay float32 (RoPE's inv_freq: a model.to(bfloat16) would round it, and
    # transformers' own RoPE then sits ~30 bf16 ulp from the float32-angle contract at position 124)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, get_format(dtype).name))
    try:
        model = model_cls(config).eval()
    finally:
        torch.set_default_dtype(previous)
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


def install(model, family: ModelFamily, kinds=(), conventions: dict | None = None) -> list[Site]:
    """Every norm site of the model, in module order, each wrapped; function sites (l2norm) are
    wrapped by `function_sites` around a forward. `kinds`: those swapped (a fused, rotary or
    quantizing site is one only when its kind is swapped); `conventions`: kind -> the convention its
    sites run at, where the kind has a choice (a quantizing kind: its rule's default otherwise)."""
    sites, order, plain_once = [], [], set()
    config = model.config
    fused = [r for r in family.sites if r.fuses and r.kind in kinds]
    stream = ResidualStream(model, fused[0].fuses) if fused else None
    for path, module in list(model.named_modules()):
        rule = family.rule_for(path, kinds)
        if rule is not None and rule.first_plain and rule.suffix not in plain_once:
            plain_once.add(rule.suffix)
            rule = family.first_rule(path, kinds)
        if rule is None:
            continue
        if rule.kind in (conventions or {}):
            rule = dataclasses.replace(rule, convention=conventions[rule.kind])
        heads = int(getattr(config, rule.heads)) if rule.heads else 1
        if rule.fuses:
            site = FusedSite(path, rule, module, heads, stream)
        elif rule.rotary:
            site = RotarySite(path, rule, module, heads)
        else:
            site = Site(path, rule, module, heads)
        site.order = order
        wrap(module, site)
        sites.append(site)
    return sites


# ---- running ---------------------------------------------------------------------------------


def run(family: str, dtype: str = "bfloat16", seed: int = 0, tokens: int = 128, swaps: dict | None = None,
        conventions: dict | None = None) -> dict:
    """Both runs. `swaps`: kind -> Implementation; `conventions`: kind -> the convention of a kind
    that has a choice (install). The result (plain data, for the parent):
    sites: [{path, kind, op, convention, own, reference: [call], swapped: [call]}], each call
    {arrays, num_heads, eps, y} (and `onward` where the site's results are not what went on: a
    quantizing site's q * scale); `own` the op and convention the model's own class computes there;
    logits and last hidden state of each run; `failed` when a swapped implementation raised or
    returned the wrong shape ({path, why}; the swapped run stops there)."""
    fam = get_family(family)
    model = build(fam, dtype, seed)
    sites = install(model, fam, tuple(swaps or ()), conventions)
    vocab = model.config.vocab_size
    ids = torch.from_numpy(np.random.default_rng(seed + 1).permutation(vocab)[:tokens].astype(np.int64))[None]
    reference = _forward(model, fam, sites, ids)  # no adapter yet: no site can fail
    adapters = {kind: make_adapter(impl) for kind, impl in (swaps or {}).items()}
    for site in sites:
        site.adapter = adapters.get(site.rule.kind)
    by_path = {s.path: s for s in sites}
    swapped = _forward(model, fam, sites, ids)
    failed = swapped.pop("failed")
    return {"family": family, "dtype": get_format(dtype).name, "seed": seed, "tokens": ids[0].tolist(),
            # plain str: unpickling torch's TorchVersion would import torch in the parent
            "transformers": str(transformers.__version__), "torch": str(torch.__version__),
            "sites": [_site_data(by_path[p], reference["calls"], swapped["calls"]) for p in reference["calls"]],
            "reference": {k: reference[k] for k in ("logits", "hidden")},
            "swapped": None if failed else {k: swapped[k] for k in ("logits", "hidden")}, "failed": failed}


def _forward(model, family: ModelFamily, sites: list[Site], ids) -> dict:
    for s in sites:
        s.calls = []
    del sites[0].order[:]
    try:
        with torch.no_grad(), function_sites(model, family, sites), rotary_sites(family, sites):
            out = model(ids, output_hidden_states=True)
    except SiteFailed as exc:  # what the sites before it were given and gave is kept
        out, failed = None, {"path": exc.path, "why": exc.why}
    else:
        failed = None
    by_path = {s.path: s for s in sites}
    calls = {path: by_path[path].calls for path in sites[0].order}
    if out is None:
        return {"calls": calls, "failed": failed}
    return {"calls": calls, "logits": to_numpy(out.logits[0]), "hidden": to_numpy(out.hidden_states[-1][0]),
            "failed": None}


def _site_data(site: Site, reference: dict, swapped: dict) -> dict:
    return {"path": site.path, "kind": site.rule.kind, "op": site.rule.op, "convention": site.rule.convention,
            "own": list(site.rule.own_pair), "reference": reference.get(site.path, []),
            "swapped": swapped.get(site.path, [])}
