"""The built-in implementations, as registry entries (descriptions only: nothing is imported)."""
from __future__ import annotations

from normdiff.harness.data.backward_bugs import BACKWARD_BUGS
from normdiff.harness.data.bugs import BUGS
from normdiff.harness.data.conventions import op_conventions
from normdiff.implementations.entry import Implementation
from normdiff.implementations.hf_families import FAMILIES


def hf_implementations() -> list[Implementation]:
    # batch_rows: these layers treat rows independently; through the attention path rows are
    # tokens, and nothing mixes tokens before q_norm (hf.py explains).
    # They share the torch worker (frameworks/torch.py says why).
    # The backward pass: autograd through the same layers (hf.py).
    return [Implementation(f"hf-{family.label}", "model", "torch", f"normdiff.implementations.hf:{attr}",
                           frozenset((op, family.convention) for op in family.ops()), family.description(),
                           requires=("transformers",), batch_rows=True,
                           backward=f"normdiff.implementations.hf:{attr}.backward")
            for attr, family in FAMILIES.items()]


def builtin_implementations() -> list[Implementation]:
    # plain gamma, one rounding: olmo2's and torch's rms_norm and olmo2's full-vector qk_norm
    # (builtins.py says why not llama / qwen3)
    one_rounding = frozenset({("rms_norm", "olmo2"), ("rms_norm", "torch"), ("qk_norm", "olmo2")})
    torch_entry, flax_entry = "normdiff.implementations.builtins:", "normdiff.implementations.builtins_jax:"
    return [
        Implementation("torch-F.rms_norm", "framework", "torch", torch_entry + "functional_rms_norm",
                       one_rounding, "torch.nn.functional.rms_norm", batch_rows=True,
                       backward=torch_entry + "functional_rms_norm_backward"),
        Implementation("torch-nn.RMSNorm", "framework", "torch", torch_entry + "module_rms_norm",
                       one_rounding, "torch.nn.RMSNorm, weight in the case dtype", batch_rows=True,
                       backward=torch_entry + "module_rms_norm_backward"),
        # F.layer_norm's own semantics (builtins.py says why not cohere / olmo)
        Implementation("torch-F.layer_norm", "framework", "torch", torch_entry + "functional_layer_norm",
                       frozenset({("layer_norm", "torch")}), "torch.nn.functional.layer_norm (eps 1e-5)",
                       batch_rows=True, backward=torch_entry + "functional_layer_norm_backward"),
        Implementation("torch-nn.LayerNorm", "framework", "torch", torch_entry + "module_layer_norm",
                       frozenset({("layer_norm", "torch")}), "torch.nn.LayerNorm, weight and bias in the case dtype",
                       batch_rows=True, backward=torch_entry + "module_layer_norm_backward"),
        Implementation("torch-F.normalize", "framework", "torch", torch_entry + "normalize",
                       frozenset({("l2_norm", "torch")}), "torch.nn.functional.normalize (p=2, eps 1e-12)",
                       batch_rows=True, backward=torch_entry + "normalize_backward"),
        Implementation("flax-rmsnorm", "framework", "jax", flax_entry + "rms_norm", one_rounding,
                       "flax.nnx.RMSNorm with its defaults (returns float32 for bf16/fp16 input)",
                       requires=("flax",), batch_rows=True, backward=flax_entry + "rms_norm_backward"),
        Implementation("flax-rmsnorm-dtype", "framework", "jax", flax_entry + "rms_norm_in_dtype",
                       one_rounding, "flax.nnx.RMSNorm(dtype=param_dtype=input dtype)",
                       requires=("flax",), batch_rows=True, backward=flax_entry + "rms_norm_in_dtype_backward"),
        # flax's defaults but eps: its fast (one-pass) variance included (builtins_jax.py says why)
        Implementation("flax-layernorm", "framework", "jax", flax_entry + "layer_norm",
                       frozenset({("layer_norm", "torch")}),
                       "flax.nnx.LayerNorm with its defaults but eps (one-pass variance; returns float32 "
                       "for bf16/fp16 input)", requires=("flax",), batch_rows=True,
                       backward=flax_entry + "layer_norm_backward"),
    ]


def mutant_implementations() -> list[Implementation]:
    # one per catalogued bug, each run on the (op, convention) whose contract it corrupts
    forward = [Implementation(bug.id, "mutant", "torch", f"normdiff.implementations.mutants:{bug.id}",
                              frozenset({(bug.op, bug.convention)}), bug.symptom, batch_rows=True)
               for bug in BUGS.values()]
    # backward mutants run the backward pass only (their forward is the correct one), in NumPy:
    # the own kernel-style backward with one deviation (numpy_backward.py)
    backward = [Implementation(bug.id, "mutant", "numpy", "", frozenset({(bug.op, bug.convention)}), bug.symptom,
                               backward="normdiff.implementations.numpy_backward:mutant", params=(("bug", bug.id),))
                for bug in BACKWARD_BUGS.values()]
    return forward + backward


def builtin() -> list[Implementation]:
    every_pair = frozenset(op_conventions())
    return [
        Implementation("numpy", "own", "numpy", "normdiff.implementations.numpy_own:run", every_pair,
                       "own NumPy: float32 statistics, the convention's cast points, bf16 via ml_dtypes; "
                       "backward written as training kernels write it",
                       batch_rows=True, backward="normdiff.implementations.numpy_backward:run_backward"),
        Implementation("torch", "own", "torch", "normdiff.implementations.torch_own:run", every_pair,
                       "own PyTorch modules in the style of the seed's qwen/norm.py (backward: autograd)",
                       batch_rows=True, backward="normdiff.implementations.torch_own:backward"),
        Implementation("jax", "own", "jax", "normdiff.implementations.jax_own:run", every_pair,
                       "own JAX (jax.numpy, jitted once per op and cast, eps traced; backward: jax.vjp)",
                       batch_rows=True, backward="normdiff.implementations.jax_own:backward"),
    ] + hf_implementations() + builtin_implementations() + mutant_implementations()
