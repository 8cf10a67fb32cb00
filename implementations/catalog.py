"""The built-in implementations, as registry entries (descriptions only: nothing is imported)."""
from __future__ import annotations

from dataclasses import dataclass

from normdiff.harness.data.backward_bugs import BACKWARD_BUGS
from normdiff.harness.data.bugs import BUGS
from normdiff.harness.data.conventions import op_conventions
from normdiff.harness.data.ops import OPS
from normdiff.implementations.entry import Implementation
from normdiff.implementations.hf_families import FAMILIES


@dataclass(frozen=True)
class ModelImplementation(Implementation):
    """A HuggingFace family's layers: it refuses, before the call, a case its layer cannot take
    (hf_families.Family.refusal: an operand the class has no parameter for, a hard-coded eps, an
    odd head_dim its attention cannot be built with)."""

    family: str = ""  # its key in hf_families.FAMILIES

    def case_problem(self, case) -> str | None:
        if not self.supports(case.op, case.convention, case.pass_):
            return None
        return FAMILIES[self.family].refusal(case.op, case)


def hf_implementations() -> list[Implementation]:
    # batch_rows: these layers treat rows independently; through the attention path rows are
    # tokens, and nothing mixes tokens before q_norm (hf.py explains).
    # They share the torch worker (frameworks/torch.py says why).
    # The backward pass: autograd through the same layers (hf.py).
    return [ModelImplementation(f"hf-{family.label}", "model", "torch", f"normdiff.implementations.hf:{attr}",
                                frozenset((op, family.convention) for op in family.ops()), family.description(),
                                requires=("transformers",), batch_rows=True,
                                backward=f"normdiff.implementations.hf:{attr}.backward", family=attr)
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
    forward = [Implementation(bug.id, "mutant", "numpy" if OPS[bug.op].quantizes else "torch",
                              f"normdiff.implementations.mutants:{bug.id}",
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
                       # NumPy reduces each contiguous row pairwise, an order set by the row's length
                       # alone: a row's bits cannot depend on the rows beside it
                       batch_rows=True, batch_invariant=True,
                       backward="normdiff.implementations.numpy_backward:run_backward"),
        Implementation("torch", "own", "torch", "normdiff.implementations.torch_own:run", every_pair,
                       "own PyTorch modules in the style of the seed's qwen/norm.py (backward: autograd)",
                       batch_rows=True, backward="normdiff.implementations.torch_own:backward"),
        Implementation("jax", "own", "jax", "normdiff.implementations.jax_own:run", every_pair,
                       "own JAX (jax.numpy, jitted once per op and cast, eps traced; backward: jax.vjp)",
                       batch_rows=True, backward="normdiff.implementations.jax_own:backward"),
    ] + hf_implementations() + builtin_implementations() + runtime_implementations() + triton_kernel_implementations() \
        + mutant_implementations()


def _mlx_keras_tinygrad() -> list[Implementation]:
    """MLX, keras 3 (JAX backend) and tinygrad's own norms, each declared for the convention whose
    contract it computes (runtime_mlx.py, runtime_keras.py and runtime_tinygrad.py say why)."""
    mlx_entry, keras_entry = "normdiff.implementations.runtime_mlx:", "normdiff.implementations.runtime_keras:"
    tinygrad_entry = "normdiff.implementations.runtime_tinygrad:"
    # the Llama cast, plain gamma: x * rsqrt rounded to the input dtype, then times w in it
    llama_cast = frozenset({("rms_norm", "qwen3"), ("rms_norm", "llama"), ("rms_norm", "deepseek-v3"),
                            ("qk_norm", "qwen3")})
    # plain gamma, one rounding (as torch's built-ins: builtins.py)
    one_rounding = frozenset({("rms_norm", "olmo2"), ("rms_norm", "torch"), ("qk_norm", "olmo2")})
    layer_norm = frozenset({("layer_norm", "torch")})
    return [
        Implementation("mlx-fast.rms_norm", "framework", "mlx", mlx_entry + "fast_rms_norm", llama_cast,
                       "mlx.core.fast.rms_norm (CPU): float32 statistics, the Llama cast", batch_rows=True,
                       backward=mlx_entry + "fast_rms_norm_backward"),
        Implementation("mlx-nn.RMSNorm", "framework", "mlx", mlx_entry + "nn_rms_norm", llama_cast,
                       "mlx.nn.RMSNorm, weight in the case dtype", batch_rows=True,
                       backward=mlx_entry + "nn_rms_norm_backward"),
        Implementation("mlx-quantize", "framework", "mlx", mlx_entry + "quantize_mx",
                       frozenset({("rms_norm_quant", "mxfp8"), ("rms_norm_quant", "mxfp4"),
                                  ("rms_norm_quant_static", "nvfp4")}),
                       "mx.quantize(mode='mxfp8' / 'mxfp4' / 'nvfp4') of mx.fast.rms_norm's float32 output (CPU): "
                       "E8M0 scales rounded up, NVFP4's E4M3 scales under the case's global scale; FP4 ties "
                       "rounded toward zero", batch_rows=True),
        Implementation("mlx-fast.layer_norm", "framework", "mlx", mlx_entry + "fast_layer_norm", layer_norm,
                       "mlx.core.fast.layer_norm (CPU): float32 statistics; rounded to the input dtype, then "
                       "times w and plus b in it (three roundings)", batch_rows=True,
                       backward=mlx_entry + "fast_layer_norm_backward"),
        Implementation("mlx-nn.LayerNorm", "framework", "mlx", mlx_entry + "nn_layer_norm", layer_norm,
                       "mlx.nn.LayerNorm, weight and bias in the case dtype", batch_rows=True,
                       backward=mlx_entry + "nn_layer_norm_backward"),
        Implementation("keras-ops.rms_normalization", "framework", "keras", keras_entry + "ops_rms_normalization",
                       one_rounding, "keras.ops.rms_normalization (JAX backend): float32, one rounding",
                       batch_rows=True, tier="full"),
        Implementation("keras-layers.RMSNormalization", "framework", "keras", keras_entry + "layer_rms_normalization",
                       one_rounding, "keras.layers.RMSNormalization, default dtype policy (returns float32 for "
                       "bf16/fp16 input)", batch_rows=True, tier="full"),
        Implementation("keras-layers.LayerNormalization", "framework", "keras",
                       keras_entry + "layer_layer_normalization", layer_norm,
                       "keras.layers.LayerNormalization, default dtype policy (returns float32 for bf16/fp16 "
                       "input)", batch_rows=True, tier="full"),
        Implementation("tinygrad-nn.RMSNorm", "framework", "tinygrad", tinygrad_entry + "nn_rms_norm", llama_cast,
                       "tinygrad.nn.RMSNorm (CPU, clang), weight in the case dtype: the Llama cast",
                       batch_rows=True, tier="full"),
        Implementation("tinygrad-nn.LayerNorm", "framework", "tinygrad", tinygrad_entry + "nn_layer_norm",
                       layer_norm, "tinygrad.nn.LayerNorm (CPU, clang), weight and bias in the case dtype: "
                       "statistics rounded to the input dtype", batch_rows=True, tier="full"),
    ]


# ---- onnxruntime graphs and torch.compile (runtime_onnx.py, runtime_compile.py) ---------------
# (this block and _onnx_and_compile: the onnx / torch.compile port; the helpers above are others')


def compiler_missing() -> str | None:
    """Why torch.compile's inductor cannot build its CPU kernels here (no C++ compiler), or None.
    Inductor runs $CXX (default g++): looked up on PATH, nothing imported."""
    import os
    import shutil

    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        return (f"torch.compile's inductor backend builds C++ for the CPU with {compiler!r} ($CXX, default "
                "g++), which is not on PATH; install one (`apt-get install g++`) or point CXX at it")
    return None


class CompiledImplementation(Implementation):
    """A torch.compile implementation: unavailable, with the reason, without a C++ compiler."""

    def unavailable_reason(self) -> str | None:
        return super().unavailable_reason() or compiler_missing()


def _onnx_and_compile() -> list[Implementation]:
    """onnxruntime running graphs built in code (and HF Qwen3RMSNorm exported by torch.onnx), and
    torch.compile (inductor, CPU) of our own torch modules and of Qwen3RMSNorm: forward only, each
    declared for the contract it computes (runtime_onnx.py and runtime_compile.py say why)."""
    onnx_entry, compile_entry = "normdiff.implementations.runtime_onnx:", "normdiff.implementations.runtime_compile:"
    # onnxruntime's RMSNormalization kernel computes in float32 and rounds once: plain gamma, one rounding
    one_rounding = frozenset({("rms_norm", "olmo2"), ("rms_norm", "torch")})
    layer_norm, qwen3 = frozenset({("layer_norm", "torch")}), frozenset({("rms_norm", "qwen3")})
    # y kept in float32 and a linear scale: the contracts a float32 norm before QuantizeLinear computes
    quantize_linear = frozenset((op, convention) for op in ("rms_norm_quant", "add_rms_norm_quant")
                                for convention in ("sglang-fp8", "aiter-fp8"))
    # torch.compile: one case per call (each shape is a compilation), in a worker of its own
    compiled = dict(worker="torch-compile", batch_rows=False, tier="full")
    return [
        Implementation("onnx-RMSNormalization", "framework", "onnxruntime", onnx_entry + "rms_norm", one_rounding,
                       "ONNX RMSNormalization (opset 23, stash_type float32) on onnxruntime's CPU provider; "
                       "no bf16 (no bf16 Mul kernel)", requires=("onnx",), batch_rows=True),
        Implementation("onnx-QuantizeLinear", "framework", "onnxruntime", onnx_entry + "quantizing_norm",
                       quantize_linear, "ONNX RMSNormalization in float32 (the inputs cast to it: bf16 runs), the "
                       "scale per row from ReduceMax |y| (Max with the amax floor; a zero scale guarded by Where), "
                       "QuantizeLinear to FP8 (opset 23, saturate=1) on onnxruntime's CPU provider; x + residual "
                       "added in float32 first for the fused add",
                       requires=("onnx",), batch_rows=True),
        Implementation("onnx-LayerNormalization", "framework", "onnxruntime", onnx_entry + "layer_norm", layer_norm,
                       "ONNX LayerNormalization (opset 17, stash_type float32) on onnxruntime's CPU provider",
                       requires=("onnx",), batch_rows=True),
        Implementation("onnx-SimplifiedLayerNormalization", "framework", "onnxruntime",
                       onnx_entry + "simplified_layer_norm", one_rounding,
                       "onnxruntime's SimplifiedLayerNormalization kernel (default domain), CPU provider",
                       requires=("onnx",), batch_rows=True),
        Implementation("onnx-export-hf-qwen3", "model", "onnxruntime", onnx_entry + "exported_qwen3", qwen3,
                       "HF Qwen3RMSNorm exported by torch.onnx.export (legacy exporter, opset 17), run on "
                       "onnxruntime's CPU provider; no bf16 (no bf16 Mul kernel)",
                       requires=("onnx", "torch", "transformers"), batch_rows=True,
                       # it exports with torch + transformers, which the torch worker has imported
                       worker="torch", tier="full"),
        CompiledImplementation("compile-torch-rmsnorm", "framework", "torch", compile_entry + "own_rms_norm", qwen3,
                               "own torch RMSNorm (Llama cast) under torch.compile (inductor, CPU, "
                               "dynamic=False)", **compiled),
        CompiledImplementation("compile-hf-qwen3", "model", "torch", compile_entry + "hf_qwen3", qwen3,
                               "HF Qwen3RMSNorm under torch.compile (inductor, CPU, dynamic=False)",
                               requires=("transformers",), **compiled),
        CompiledImplementation("compile-torch-layernorm", "framework", "torch", compile_entry + "own_layer_norm",
                               layer_norm, "own torch LayerNorm under torch.compile (inductor, CPU, "
                               "dynamic=False)", **compiled),
    ]


class OutsideImplementation(Implementation):
    """A kernel whose library normdiff's extras leave out (fla): unavailable with how to get it."""

    def unavailable_reason(self) -> str | None:
        import importlib.util

        if any(importlib.util.find_spec(m) is None for m in self.requires):
            return (f"{', '.join(self.requires)} is not installed: pip install fla-core einops (no extra of normdiff's: "
                    "transformers runs Qwen3.5's gated delta rule through fla once it imports, on any device; "
                    "`make kernels` puts it in .venv/kernels, for PYTHONPATH)")
        return super().unavailable_reason()


def triton_kernel_implementations() -> list[Implementation]:
    """Liger-Kernel's and flash-linear-attention's Triton norm kernels on Triton's interpreter, each
    declared for the conventions whose contract it computes (triton_kernels.py says which and why).
    Full tier: the interpreter runs a program a row, ~15 s each over the default suite."""
    entry = "normdiff.implementations.triton_kernels:"

    def kernel(name, attr, pairs, description, library):
        made = Implementation if library == "liger_kernel" else OutsideImplementation
        return made(name, "framework", "triton", entry + attr, frozenset(pairs), description,
                    requires=(library,), backward=f"{entry}{attr}.backward", tier="full")

    llama, plus_one = [("rms_norm", "qwen3"), ("rms_norm", "llama")], [("rms_norm", "gemma3"), ("rms_norm", "qwen3.5")]
    one_rounding, layer_norm = [("rms_norm", "olmo2"), ("rms_norm", "torch")], [("layer_norm", "torch")]
    gated = [("gated_rms_norm", "qwen3.5"), ("gated_rms_norm", "qwen3-next")]
    l2 = [("l2_norm", "qwen3.5"), ("l2_norm", "qwen3-next")]
    liger, fla, interpreted = "Liger-Kernel", "flash-linear-attention", "(Triton, interpreted)"
    rows = [  # (name, adapter, the pairs it computes, what it is)
        ("liger-rms_norm-llama", "liger_rms_norm_llama", llama, f"{liger} LigerRMSNormFunction, casting_mode 'llama'"),
        ("liger-rms_norm-gemma", "liger_rms_norm_gemma", plus_one,
         f"{liger} LigerRMSNormFunction, casting_mode 'gemma', offset 1"),
        ("liger-layer_norm", "liger_layer_norm", layer_norm, f"{liger} LigerLayerNormFunction"),
        ("fla-rms_norm", "fla_rms_norm", one_rounding, f"{fla} fla.modules.norm rms_norm"),
        ("fla-layer_norm", "fla_layer_norm", layer_norm, f"{fla} fla.modules.norm layer_norm"),
        ("fla-rms_norm_gated", "fla_rms_norm_gated", gated, f"{fla} rms_norm_gated, the fused norm-gate"),
        ("fla-l2norm", "fla_l2norm", l2, f"{fla} l2norm"),
        ("fla-rmsnorm_fn-mamba2", "fla_mamba2_gated", [("group_gated_rms_norm", "mamba2")],
         f"{fla} layernorm_gated rmsnorm_fn, norm_before_gate=False: mamba_ssm's grouped gated norm"),
    ]
    return [kernel(name, attr, pairs, f"{what} {interpreted}", "liger_kernel" if name.startswith("liger") else "fla")
            for name, attr, pairs, what in rows]


def runtime_implementations() -> list[Implementation]:
    """The runtimes' ports: MLX, keras, tinygrad (_mlx_keras_tinygrad), onnxruntime and
    torch.compile (_onnx_and_compile)."""
    return _mlx_keras_tinygrad() + _onnx_and_compile()
