"""The contract: one op with every knob that changes its numbers set.

A contract fixes what is multiplied by the weight, where epsilon goes, which span is normalised, how
the gate is applied and where results are rounded to the output dtype (the knobs, `knobs.py`). A
convention (`conventions.py`, named after the model family that defines it) maps each op it defines
to a contract. Conventions and bugs live in the same space: a mutant is a contract with one knob
turned the wrong way, so diagnosis is a search over these fields. Pure data.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from normdiff.harness.data import knobs as K
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown
from normdiff.harness.data.ops import OPS, Op
from normdiff.text import general


@dataclass(frozen=True)
class Contract:
    """One op with every knob that changes its numbers.

    Exact maths (what the float64 oracle evaluates):
      stat  = mean(x^2) | sum(x^2) | mean((x - mean x)^2)      over `scope`
      eps  *= 1 | n | max(x^2)           (eps_scale "one"; "span": the normalised width n;
                                          "max_square": over the span, an anti-overflow rescale)
      y     = x / sqrt(stat + eps)       (eps_placement "inside";
              x / (sqrt(stat) + eps) "outside"; x / max(sqrt(stat), eps) "clamp"; none: no eps;
                                          `inverted` multiplies by the denominator instead)
      y    *= weight_offset + w          (when the op has a weight)
      y    *= act(gate)                  (gated op; "gate_then_norm" multiplies x first instead)
    layer_norm: x is centred first when `centre` (x - mean x over the span; the variance statistic
    then divides by n - `correction`), and the bias is added: y = y * (offset + w) + b
    ("after_scale"), or (y + b) * (offset + w) ("before_scale", a bug). `variance_form` "one_pass"
    (E[x^2] - E[x]^2 in float32) is the same maths, so a rounding knob: the oracle ignores it.
    add_rms_norm: h = x + residual (exact), y = the norm of h ("before_norm"; "after_norm", a bug:
    y = norm(x) + residual); it also returns residual_out = h. Where h is rounded (`residual_dtype`)
    and how (`residual_rounding`) are rounding knobs.

    Rounding (what correct low-precision implementations do, and what the ULP budgets absorb):
      cast "one_rounding": (y * (offset + w.float())).to(dtype)   Gemma, Qwen3.5, OLMo2, torch
      cast "llama":        (offset + w) * y.to(dtype)             Llama, Qwen2/3
    `stats_dtype` / `offset_dtype` say where the statistics and `offset + w` are computed; a correct
    implementation uses float32, mutants use the input dtype.

    qk_norm_rope: the per-head norm above (x is q or k, rows are tokens), then rotary position
    embedding in HF's `rotate_half` form on each head of D = head_dim:
      y     = q * cos + rotate_half(q) * sin,   rotate_half(q) = cat(-q[..., D/2:], q[..., :D/2])
      cos, sin = cos(cat(a, a)), sin(cat(a, a)),   a[t, i] = angle of token t, frequency i < D/2
    `rope_order` "norm_then_rope" is Qwen3's order; "rope_then_norm" rotates x first and normalises
    and weighs the rotated vector (the qk-norm-after-rope bug: a rotation keeps each head's RMS, so
    the two orders are the same maths when the weight is uniform, and differ when it is not).
    The angles are part of the contract, and they are float32, as HF's Qwen3RotaryEmbedding makes
    them (`rope.py` has the function and says why exact float64 angles would be another contract).
    Rounding (not in the oracle): HF's apply_rotary_pos_emb rounds cos and sin to the input dtype
    and computes q * cos, rotate_half(q) * sin and their sum in the input dtype, on top of the
    norm's roundings; `budgets.py` derives the budget and the judge says where its ULPs are counted
    (at the magnitude of each rotated pair, not at |y|).
    """

    op: str
    eps: float = 1e-6
    weight_offset: float = 0.0
    eps_placement: str = "inside"
    eps_scale: str = "one"
    statistic: str = "mean_square"
    # ops over heads only: the span normalised ("head": each head_dim slice; "full": all H*D) and
    # the span the weight covers ("head": shape (head_dim,), shared by heads; "full": shape (H*D,)).
    # For the row ops there is a single "head", so both are trivially "head".
    scope: str = "head"
    weight_span: str = "head"
    gate_activation: str = "silu"
    gate_order: str = "norm_then_gate"
    cast: str = "one_rounding"
    stats_dtype: str = "float32"
    offset_dtype: str = "float32"
    # multiply by the denominator instead of dividing by it (the rsqrt-inverted bug)
    inverted: bool = False
    # ops that rotate only: where the rotation sits relative to the norm, and RoPE's base (HF's
    # default 10000; the qwen3 convention sets Qwen3's 1e6). Ignored by every other op.
    rope_order: str = "norm_then_rope"
    rope_theta: float = 10000.0
    # ops that centre (layer_norm): x - mean(x) normalised, the variance's divisor n - correction,
    # and how a float32 implementation sums the variance (a rounding knob); where the bias goes
    centre: bool = False
    correction: int = 0
    variance_form: str = "two_pass"
    bias_order: str = "after_scale"
    # fused residual adds (add_rms_norm): where h = x + residual is rounded and how, and whether the
    # norm sees it (rounding knobs but the last, which the oracle honours)
    residual_dtype: str = "input"
    residual_rounding: str = "nearest"
    residual_order: str = "before_norm"
    # quantizing norms (rms_norm_quant, add_rms_norm_quant; ops/quantize.py): q = y / scale rounded
    # once to quant_dtype, scale = max(round(max(amax, amax_floor) / quant_max), scale_floor) over
    # each row (quant_group 0) or block of quant_group columns; `quant_input` where y is rounded
    # before (a rounding knob), `saturate` the clamp, `scale_from` what the amax is taken of
    quant_dtype: str = "float8_e4m3fn"
    quant_max: float = 448.0
    quant_group: int = 0
    scale_rounding: str = "none"
    amax_floor: float = 0.0
    scale_floor: float = 0.0
    quant_input: str = "float32"
    saturate: bool = True
    scale_from: str = "y"
    amax_bound: str = "floor"
    zero_guard: bool = True
    quant_rounding: str = "nearest"
    # a quantizing norm given a per-tensor scale (rms_norm_quant_static): what that scale means
    tensor_scale: str = "divisor"

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise UsageError(unknown("op", self.op, OPS))
        for name, knob in K.KNOBS.items():
            if knob.values and getattr(self, name) not in knob.values:
                raise UsageError(f"contract knob {name}={getattr(self, name)!r} is not one of {knob.values}")
        theta = self.rope_theta
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 1.0 < theta < float("inf"):
            raise UsageError(f"contract knob rope_theta={theta!r} must be a finite number > 1")

    @property
    def record(self) -> Op:
        """The op's record (ops.py)."""
        return OPS[self.op]

    def replace(self, **changes) -> "Contract":
        return dataclasses.replace(self, **changes)

    def knobs(self) -> dict:
        """The fields as a plain dict (for reports and JSON)."""
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """A one-line formula that a person can check against their code, composed from the knob
        groups that apply to the op."""
        if self.record.describe is not None:  # an op whose maths is not a norm's says it itself
            return self.record.describe(self)
        applies = self.record.applies
        var = "var(x)" if not self.correction else f"var(x, n - {self.correction})"
        if applies("variance_form") and self.variance_form == "one_pass":
            var = f"(E[x^2] - E[x]^2){'' if not self.correction else f' * n / (n - {self.correction})'}"
        stat = {"mean_square": "mean(x^2)", "sum_square": "sum(x^2)", "variance": var}[self.statistic]
        eps = {"one": "eps", "span": "n*eps", "max_square": "eps*max(x^2)"}[self.eps_scale]
        norm = {"inside": f"x * rsqrt({stat} + {eps})", "outside": f"x / (sqrt({stat}) + {eps})",
                "clamp": f"x / max(sqrt({stat}), {eps})", "none": f"x * rsqrt({stat})"}[self.eps_placement]
        if self.inverted:
            norm = f"x / ({norm.replace('x * ', '', 1).replace('x / ', '1 / ', 1)})"
        if applies("centre") and self.centre:
            norm = norm.replace("x * ", "(x - mean x) * ", 1).replace("x / ", "(x - mean x) / ", 1)
        gated = applies("gate_order")
        if gated and self.gate_order == "gate_then_norm":
            norm = norm.replace("x", f"(x*{self.gate_activation}(z))")
        parts = [norm]
        if applies("weight_offset"):
            parts.append("(1 + w)" if self.weight_offset == 1 else "w" if self.weight_offset == 0
                         else f"({general(self.weight_offset)} + w)")
        if gated and self.gate_order == "norm_then_gate":
            parts.append(f"{self.gate_activation}(z)")
        text = " * ".join(parts)
        if applies("bias_order"):
            text = (f"{text} + b" if self.bias_order == "after_scale"
                    else f"({parts[0]} + b) * {' * '.join(parts[1:])}")
        if applies("residual_order"):
            h = "h = x + residual" + (" (rounded to the input dtype)" if self.residual_dtype == "input" else " (float32)")
            text = (f"{h}; y = {text.replace('x', 'h')}" if self.residual_order == "before_norm"
                    else f"{h}; y = {text} + residual")
            text += "; returns (y, h" + (" truncated" if self.residual_rounding == "truncate" else "") + ")"
        text += f", eps={general(self.eps)}"
        if applies("scope"):
            span = self.record.span_name
            text += f", over each {span}" if self.scope == "head" else ", over the full H*D vector"
        if applies("cast"):
            text += ", Llama cast" if self.cast == "llama" else ", one rounding"
        if applies("rope_order"):
            rope = f"RoPE (rotate_half, theta={general(self.rope_theta)}, float32 angles)"
            text = (f"{text}; then {rope}" if self.rope_order == "norm_then_rope"
                    else f"{rope} first; then {text}")
        return text
