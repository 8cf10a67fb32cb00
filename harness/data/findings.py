"""Known findings: real libraries that disagree with the contract they implement, as data.

A finding stays in every report (its rows keep their real outcome and carry the explanation in the
`known_finding` column), but it does not fail the run: CI then goes red only for a *new*
disagreement. When a finding stops reproducing (the library it was seen in fixed it), the summary
says so.

A finding is matched by behaviour, never by an implementation's name (harness/engine/verdict.py
applies the rule): a row shows it when the row's case has the finding's columns (`where`: op,
pass, output, dtype, regime, ...), its outcome is the finding's, and its numbers are the finding's:
its output is bit-identical to what the library the finding was seen in (`seen_in`, a registered
implementation) gives on the same case where that library shows the finding; or, for a finding
about a failure that has no output (an error), its message matches `detail`. So a user's function
that wraps `F.layer_norm` shows F.layer_norm's findings, and a LayerNorm of its own that merely
errs in the same place does not. This module is pure data.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    seen_in: str  # the registered implementation the finding was seen in: the behaviour to match
    outcome: str  # the outcome its rows show
    # (results column, value) pairs every matching row has; a tuple value: any one of them; a
    # compiled pattern: any value it matches whole (`allows`)
    where: tuple[tuple[str, str | tuple[str, ...] | re.Pattern], ...]
    explanation: str
    # a finding about a failure with no output (an error): the pattern its message (the results'
    # `detail`) contains; None: the output's bits are compared with `seen_in`'s
    detail: re.Pattern | None = None


def allows(expected, actual: str) -> bool:
    """Whether a results cell (as text) is one a finding's `where` value allows."""
    if isinstance(expected, re.Pattern):
        return expected.fullmatch(actual) is not None
    return actual in (expected if isinstance(expected, tuple) else (expected,))



KNOWN: tuple[Finding, ...] = (
    Finding("torch-F.normalize", "nan_mismatch",
            (("op", "l2_norm"), ("dtype", "float16"), ("regime", "zero_rows")),
            "F.normalize clamps the norm with eps=1e-12 in the input dtype; 1e-12 rounds to 0 in fp16, "
            "so an all-zero row is 0/0 = NaN where x / max(norm, eps) gives 0 (bf16 and fp32 keep eps)."),
    Finding("torch-F.normalize", "nan_mismatch",
            (("op", "l2_norm"), ("pass", "backward"), ("dtype", "float16"), ("output", "dx")),
            "F.normalize's autograd backward runs in the input dtype: it forms dy / ||x|| and "
            "dy * x / ||x||^2 in fp16, which overflow to inf once ||x|| < |dy| / 65504 (a tiny row, a large "
            "upstream gradient), and their difference is inf - inf = NaN where the exact gradient is finite "
            "(0 for a one-element row). Reproduce: normdiff repro "
            "'l2_norm@torch/fp16/1x1/tiny_rms:1e-3/dy=large/out=dx' -i torch-F.normalize"),
    Finding("torch-F.normalize", "disagree",
            (("op", "l2_norm"), ("pass", "forward"), ("dtype", ("bfloat16", "float16"))),
            "F.normalize rounds ||x|| to the input dtype before dividing, and the quotient again: two roundings "
            "where the contract's x / max(||x||, eps) rounds once. Every element stays within 1.4 ulp (budget 2), "
            "but 11-35 % of them are values no legal order of one rounding gives (the rounding-chain detector, "
            "engine/chain.py); on rows that are alike (mean 1000, std 1) every row's bf16 norm is off the same "
            "way (2.6e-3 relative), a coherent scale error the channel-bias detector sees (1.05 ulp against "
            "1.045). x / float32 ||x|| rounded once is identical. Reproduce: normdiff repro "
            "'l2_norm@torch/bf16/8x1024/normal' -i torch-F.normalize"),
    Finding("torch-F.normalize", "disagree", (("op", "l2_norm"), ("dtype", "float16"), ("eps", "1e-06")),
            "F.normalize clamps the norm with eps in the input dtype: eps=1e-6 is subnormal in fp16 and rounds "
            "to 1.0133e-6, 1.3% off, so wherever the clamp binds (||x|| < 1e-6) y = x / eps is 1.3% off (15.7 "
            "ulp against 2), and on an all-zero row dx = dy / eps too (19.7 ulp against 10). Reproduce: normdiff "
            "repro 'l2_norm@torch/fp16/24x1/tiny_rms:1e-4/eps=1e-06' -i torch-F.normalize"),
    Finding("torch-F.layer_norm", "disagree", (("op", "layer_norm"), ("pass", "backward"), ("dtype", ("bfloat16", "float16")),
                                 ("output", ("db", "dw"))),
              "PyTorch's CPU layer_norm backward sums db over the rows with partial sums rounded to the input "
              "dtype (bwd-dw-input-dtype's pattern, on the bias): fp16 2.4 ulp at the terms' scale where a float32 "
              "sum rounded once is 0.47 (budget 2.01), bf16 2.06 against 2 (own torch 0.48); dw, summed over the "
              "rows in the same kernel loop, shows the same excess on spiky fp16 rows (4.01 ulp against 3.01, own "
              "torch 0.49); float32 agrees. Reproduce: normdiff repro "
              "'layer_norm@torch/fp16/36x65/spike/w=small/b=zeros/dy=aligned/out=db' -i torch-F.layer_norm, normdiff "
              "repro 'layer_norm@torch/bf16/23x41/normal/w=ones/b=large/dy=aligned/out=db' -i torch-F.layer_norm and "
              "normdiff repro 'layer_norm@torch/fp16/31x53/spike/w=large/b=zeros/dy=aligned/out=dw#28' -i torch-F.layer_norm"),
    Finding("flax-layernorm", "disagree", (("op", "layer_norm"),),
            "flax.nnx.LayerNorm defaults to use_fast_variance=True, the one-pass variance E[x^2] - E[x]^2 "
            "(ln-one-pass-variance's formula): at mean 1000 with std 1 it cancels catastrophically in float32 "
            "(1.4e6 ulp, 10x the two-pass budget), and fuzzing finds it on plain rows too, where two values of a "
            "short row nearly cancel (276 ulp against 180); use_fast_variance=False agrees. Reproduce: normdiff "
            "repro 'layer_norm@torch/fp32/6x2/normal/w=ones/b=zeros' -i flax-layernorm"),
    Finding("flax-rmsnorm-dtype", "nan_mismatch", (("pass", "backward"), ("dtype", "float16"), ("dy", "large")),
            "flax.nnx.RMSNorm with dtype = param_dtype = float16 is differentiated (jax.vjp) through float16 "
            "intermediates: on a one-wide row whose mean square plus eps is ~4e-6 (a term like (ms + eps)^1.5 = 7.7e-9 "
            "is below float16's smallest subnormal) and dy near the overflow edge, dx comes back NaN where the exact "
            "dx is finite (-47654; mechanism inferred, not traced op by op); flax's float32 "
            "defaults (flax-rmsnorm) agree. Reproduce: normdiff repro "
            "'rms_norm@olmo2/fp16/2x1/tiny_rms:1e-3/w=ones/dy=large/out=dx' -i flax-rmsnorm-dtype"),
    Finding("torch-F.layer_norm", "disagree", (("op", "layer_norm"), ("pass", "backward"), ("dtype", ("bfloat16", "float16")),
                                 ("output", ("dx", "dw"))),
              "PyTorch's CPU native_layer_norm saves the mean and 1/std for its backward in the weight's dtype "
              "(bf16 / fp16) rather than float32: at mean 1000 the saved bf16 mean is off by up to 2 against a "
              "std of ~4, so dx and dw are off by tens of ulps (a float32 weight makes it save float32); fuzzing "
              "finds it on plain rows too, where dx cancels to ~0 (two-wide rows: 4.11 ulp at the terms' scale "
              "against 3, own torch 1e-4). Reproduce: normdiff repro "
              "'layer_norm@torch/bf16/8x2/normal/w=ones/b=zeros/dy=normal/out=dx' -i torch-F.layer_norm"),
    Finding("mlx-fast.layer_norm", "disagree", (("op", "layer_norm"), ("pass", "forward"), ("dtype", ("bfloat16", "float16"))),
              "MLX's CPU fast.layer_norm (which mlx.nn.LayerNorm calls) rounds (x - mean) * rsqrt(var + eps) to the "
              "input dtype, then multiplies by w and adds b in that dtype: three roundings where F.layer_norm rounds "
              "once, so where w * x_hat and b nearly cancel a bf16 result is up to 2.24 ulp off (budget 2.02), and "
              "elsewhere, within the budget, up to 36 % of the elements are values one rounding never gives (the "
              "rounding-chain detector, engine/chain.py); float32 and the backward agree."),
    Finding("tinygrad-nn.LayerNorm", "error", (("op", "layer_norm"), ("dtype", "bfloat16"),
                                              ("shape", re.compile(r"([5-9]|[1-9][0-9]+)x1"))),
            "clang-16 (Debian's, the one tinygrad's CPU backend compiles with here) dies with SIGSEGV compiling "
            "tinygrad's bf16 LayerNorm kernel for rows one element wide, from 5 rows up (2, 3 and 4 rows, two "
            "elements wide, fp16 and float32 compile): the call fails, a toolchain bug rather than the norm's. "
            "Reproduce: normdiff repro 'layer_norm@torch/bf16/5x1/normal/w=ones/b=zeros' -i tinygrad-nn.LayerNorm",
            # tinygrad compiles with subprocess.check_output([clang, ...]): a crash is CalledProcessError's
            re.compile(r"died with <Signals\.SIGSEGV")),
    Finding("onnx-RMSNormalization", "error", (("dtype", "bfloat16"),),
            "onnxruntime's CPU provider expands the opset-23 RMSNormalization function into primitive ops and has "
            "no bfloat16 Mul kernel (NOT_IMPLEMENTED: Mul(14)), so no bf16 graph of it runs; float32 and float16 "
            "agree. Reproduce: normdiff repro 'rms_norm@olmo2/bf16/8x128/normal/w=trained' -i onnx-RMSNormalization",
            # the message names the graph's op: another graph missing the same kernel is its own case
            re.compile(r"cannot run RMSNormalization in bfloat16: .*NOT_IMPLEMENTED : Could not find an "
                       r"implementation for Mul\(14\)")),
    Finding("onnx-export-hf-qwen3", "error", (("dtype", "bfloat16"),),
            "HF Qwen3RMSNorm exported by torch.onnx.export multiplies weight * y.to(bfloat16) in bf16 (node /Mul_1); "
            "onnxruntime 1.32's CPU provider has no bf16 Mul kernel, so the graph fails to load (NOT_IMPLEMENTED: "
            "Mul(14)). Reproduce: normdiff repro 'rms_norm@qwen3/bf16/8x128/normal/w=trained' -i onnx-export-hf-qwen3",
            re.compile(r"cannot run export-hf-qwen3 in bfloat16: .*NOT_IMPLEMENTED : Could not find an "
                       r"implementation for Mul\(14\) node with name '/Mul_1'")),
    Finding("tinygrad-nn.LayerNorm", "disagree", (("op", "layer_norm"), ("pass", "forward"),
                                                  ("dtype", ("bfloat16", "float16"))),
            "tinygrad's Tensor.layernorm computes in the input dtype: the mean (summed in float32) is cast back to "
            "bf16 / fp16, and x - mean, its squares, the variance, var + eps and rsqrt are each rounded to it: at "
            "mean 1000 the bf16 mean is off by up to 2 (51 ulp at narrow:4), and in fp16 a square of |x - mean| > 256 "
            "overflows, the variance is inf and the row collapses to the bias (2266 ulp on outlier rows); float32 "
            "agrees."),
)
