"""The catalogue of real backward-pass bugs of normalization layers, as records.

Each record names one deliberately wrong backward: the op@convention it shows on, which of the
backward's outputs it corrupts ("dx", "dw", "dgate"), the dtypes where it is a bug at all, the wrong
formula, what a report shows, and where it was seen (the section "Backward-pass bugs" of
../shared/CATALOGUE.md; where the catalogue names no instance of a variant, `source` says which real
bug it generalises). The mutants are implementations/numpy_backward.py's `bug` knob (one named
deviation per id); diagnosis compares a user's gradients with each bug's exact output
(`backward(..., bug=id, exact=True)`).

Notation (the catalogue's): r = (mean(x^2) + eps)^-1/2, g = dy * (offset + w) [* silu(z)] the
gradient reaching the norm, n the span's width. The exact VJP of the plain-gamma RMSNorm:
    dx_k = g_k r - x_k r^3 / n * sum_i(g_i x_i),   dw_k = sum over rows of dy_k x_k r.
Pure data: imports only from normdiff.harness.data.
"""
from __future__ import annotations

from dataclasses import dataclass

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown
from normdiff.harness.data.ops import GRADIENT_NAMES  # the one operand -> output mapping

OUTPUTS = tuple(GRADIENT_NAMES.values())
# the operand each backward output is the gradient of (the keys backward() returns)
OUTPUT_OPERANDS = {output: operand for operand, output in GRADIENT_NAMES.items()}
ALL_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class BackwardBug:
    id: str
    op: str
    convention: str  # the convention whose backward it corrupts (op_conventions() has the pair)
    outputs: tuple[str, ...]  # the backward outputs it corrupts, among OUTPUTS
    symptom: str  # one sentence: what a report shows
    formula: str  # the wrong formula
    source: str  # the real project / PR where it was seen, or the real bug it generalises
    dtypes: tuple[str, ...] = ALL_DTYPES  # the input dtypes where it is a bug at all
    # a bug that is a rounding, not a formula: its exact (float64, unrounded) output is the correct
    # one, so it is recognised by the size of its error, not by matching an exact output
    rounding: bool = False

    def as_dict(self) -> dict:
        return {"id": self.id, "op": self.op, "convention": self.convention, "outputs": list(self.outputs),
                "symptom": self.symptom, "formula": self.formula, "source": self.source,
                "dtypes": list(self.dtypes), "rounding": self.rounding}


_PROJ = "x_k r^3 / n * sum(g x)"

BACKWARD_BUGS: dict[str, BackwardBug] = {
    b.id: b
    for b in (
        BackwardBug(
            "bwd-weight-twice", "rms_norm", "qwen3", ("dx",),
            "dx's projection term scaled elementwise by w a second time: right for all-ones weights, "
            "wrong wherever the weight is trained, worst when dy is aligned with y",
            "dx_k = g_k r - w_k x_k r^3 / n * sum(g x)   (g = dy w: the weight once in the sum and "
            "once more outside it)",
            "NVIDIA/Megatron-LM PR #6859 (BatchInvariantRMSNormFn computed - w_k r^3 x_k s / D, "
            "s = sum_i g_i x_i w_i)"),
        BackwardBug(
            "bwd-weight-missing", "rms_norm", "qwen3", ("dx",),
            "dx computed as if the weight were all ones: dw is right, dx off by the per-channel "
            "weight (exact again for all-ones weights)",
            f"dx_k = dy_k r - {_PROJ.replace('g x', 'dy x')}   (g = dy, not dy * (offset + w))",
            "karpathy/llm.c PR #763 review (a reviewer's own RMSNorm backward forgot the weight in dx)"),
        BackwardBug(
            "bwd-offset-missing", "rms_norm", "qwen3.5", ("dx",),
            "the zero-centred weight's +1 honoured in the forward but not in dx: dx about w / (1 + w) "
            "of its size per channel (~0.2 for trained weights), dw right",
            f"g = dy * w where dy * (1 + w) belongs; dx_k = g_k r - {_PROJ}",
            "NVIDIA/Megatron-LM PR #6859 (forward and backward disagreeing on zero_centered_gamma; "
            "there the forward dropped the offset while the backward honoured it)"),
        BackwardBug(
            "bwd-offset-added", "rms_norm", "qwen3", ("dx",),
            "a 1 + w backward under a plain-gamma forward: dx about (1 + w) / w times too large per "
            "channel (unbounded near w = 0), dw right",
            f"g = dy * (1 + w) where dy * w belongs; dx_k = g_k r - {_PROJ}",
            "NVIDIA/Megatron-LM PR #6859, reversed (the catalogue's 'or the reverse': the offset in "
            "the backward only)"),
        BackwardBug(
            "bwd-dw-input-dtype", "rms_norm", "qwen3", ("dw",),
            "dw's partial sums across rows held in the input dtype: an error growing with the rows "
            "(bf16, 4096 rows of aligned dy: ~2 % in 128-row blocks, ~50 % as one running sum), dx exact",
            "s_i = dtype(s_(i-1) + dy_i * u_i): every running sum of dw's row reduction (each 128-row "
            "block's, then the partials') rounded to bf16 / fp16 after each add",
            "NVIDIA/apex #1652 (weight gradients of FusedRMSNorm and MixedFusedRMSNorm differ: partial "
            "sums of dW in low precision across rows)",
            dtypes=("bfloat16", "float16"), rounding=True),
        BackwardBug(
            "bwd-dw-one-block", "rms_norm", "qwen3", ("dw",),
            "dw summed over the first 128-row block only: exact up to 128 rows, beyond that the first "
            "128 rows' sum (128 / rows of the right one for terms of one sign), dx exact",
            "dw = sum over rows 0..127 of dy * u (the first block's partial sum; the other blocks' "
            "partials dropped)",
            "generalises intel/torch-xpu-ops PR #4790 (a dgamma path switch at a row threshold, there "
            "aliasing dgamma into dbeta's slot): here the multi-block path returns one block's partial"),
        BackwardBug(
            "bwd-saved-var", "rms_norm", "qwen3", ("dx", "dw"),
            "the backward reads mean(x^2) + eps where rsqrt(mean(x^2) + eps) was meant: right only at "
            "rms(x) = 1, near-zero gradients for small rows (1e-3 of their size at rms 0.1)",
            "r' = mean(x^2) + eps in place of r: dx_k = g_k r' - x_k r'^3 / n * sum(g x), "
            "dw = sum dy * x * r'",
            "flagos-ai/FlagGems PR #5771 (KunlunXin: the forward stored var instead of rrms; backward "
            "near-zero gradients)"),
        BackwardBug(
            "bwd-projection-dropped", "rms_norm", "qwen3", ("dx",),
            "the norm's backward taken as elementwise, the RMS a constant: dx right only where dy is "
            "orthogonal to y, off by g's component along x (22 % of max |dx| for aligned dy)",
            "dx = r g   (the projection term - x r^3 / n * sum(g x) left out)",
            "generalises the catalogue's weight-applied-twice (Megatron-LM PR #6859) and "
            "wrong-saved-statistic (FlagGems PR #5771) projection-term errors to the term's absence"),
        BackwardBug(
            "bwd-eps-outside", "rms_norm", "qwen3", ("dx", "dw"),
            "the backward recomputes 1 / (sqrt(mean x^2) + eps) while the forward used "
            "rsqrt(mean x^2 + eps): invisible at rms 1, ~40 % off at rms 1e-3",
            "r' = 1 / (sqrt(mean(x^2)) + eps): dx_k = g_k r' - x_k r'^3 / n * sum(g x), "
            "dw = sum dy * x * r'",
            "generalises the eps-outside-sqrt forward bug (fla PR #508, reverted; tilelang #1243) to a "
            "backward that places eps differently from its forward"),
        BackwardBug(
            "bwd-gate-sigmoid-grad", "gated_rms_norm", "qwen3.5", ("dgate",),
            "the gate's gradient uses sigmoid' = s (1 - s) where silu' = s (1 + z (1 - s)) belongs: "
            "dgate wrong, dx and dw right",
            "dgate = dy * v * s (1 - s), s = sigmoid(z), v = rms_norm(x) * w",
            "generalises the gate-activation swap of fla #1182 (sigmoid for silu in the forward) to "
            "the backward's derivative alone"),
        BackwardBug(
            "bwd-l2-projection-dropped", "l2_norm", "qwen3.5", ("dx",),
            "the L2 norm's backward without its projection term: dx keeps the component along y, "
            "which the true gradient removes",
            "dx = dy / sqrt(sum(x^2) + eps)   (the term - x r^3 * sum(dy x) left out)",
            "generalises the catalogue's projection-term errors (Megatron-LM PR #6859, FlagGems PR "
            "#5771) to the L2 norm of Qwen3.5's q/k before the delta rule"),
        BackwardBug(
            "bwd-rope-not-transposed", "qk_norm_rope", "qwen3", ("dx", "dw"),
            "RoPE's backward rotates the gradient by R instead of R^T (the sin sign): every position "
            "but 0 wrong, in dx and dw alike",
            "dy' = dy * cos + rotate_half(dy) * sin   (where dy * cos - rotate_half(dy) * sin belongs)",
            "no catalogued instance: generalises ggml #1491 (a wrong sign in one backend's "
            "rms_norm_back path) to the sign of RoPE's backward rotation"),
    )
}


def get_backward_bug(bug_id: str) -> BackwardBug:
    if bug_id not in BACKWARD_BUGS:
        raise UsageError(unknown("backward bug", bug_id, BACKWARD_BUGS, "normdiff list bugs"))
    return BACKWARD_BUGS[bug_id]
