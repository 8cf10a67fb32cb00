"""ULP budgets: how far from the exact contract a correct implementation may land, derived.

A budget is measured in ULPs of the output dtype at the reference value (or where the op record's
ULP rule counts them), and it is the sum of two derived parts, recorded per row (`tolerance_ulp`):

    budget(dtype, op, n) = chain[dtype][rule]  +  reduction(dtype, n)

**The rounding chain** (`CHAINS`, per rounding rule, which each op record names) bounds the roundings
a correct pipeline takes after its statistic. One fact carries every derivation: a value whose
relative error is at most D lands at most D / u ULPs away (u = 2^-p, p the stored fraction bits: 7
bf16, 10 fp16, 23 fp32; |v| / ulp(v) < 2^p), and the rounding that ends the chain costs up to 1 ULP
of the reference, not 1/2, when its input sits across a power of two from the reference (the rounding
is then in the upper binade's ulp, twice the reference's).
- "single", bf16 / fp16: the Llama cast rounds the normalised value first (relative error <= u: 1
  ULP) and rounds w * that (<= 1): 2. "one_rounding": a contract that multiplies by the weight in
  float32 and rounds once (Gemma, Qwen3.5, OLMo2, torch; ops/record.py ROUNDS_ONCE), and a weightless
  norm (l2_norm), costs <= 1, so a second rounding, worth up to 1.76 ULPs in all, is out of it
  wherever it costs more than the first one's slack, and the rounding chain (engine/chain.py) sees
  it where it does not. The first version budgeted 2 for both, which hid the second rounding.
  LayerNorm's "centred" chain likewise: 2 with the Llama cast, 1 rounding once.
- "three_roundings" (the gated norm in HF's order: round xh, round w * xh, round after the float32
  gate): 1 + 1 + 1 = 3 (measured 2.60, on a bf16 case where w * xh sits just below a power of two).
- "rotation" (QK-Norm then RoPE), bf16 / fp16, counted at each rotated pair's magnitude r: the
  Llama-cast q within 2 ulp(r) (x sqrt(2): y_i = q_i c - q_j s, |c| + |s| <= sqrt(2)), cos and sin
  rounded to the dtype (u relative each: 1), both products (1/2 each: 1) and the sum (<= 1):
  2 sqrt(2) + 1 + 1 + 1 = 5.83, so 6 (measured 2.75 over 900 8x8x128 cases).
- float32, "single" and "three_roundings": the statistic's own roundings (the squares, the division
  by n, + eps: 1.5 ULP of the statistic, half of that in its inverse square root), the square root
  and reciprocal (1) or XLA's rsqrt (up to 3 ULP from 1 / sqrt, measured), x * r and * w (1/2 each),
  the gate's float32 exp, division and product (up to 3), and the final rounding (1): 8 (measured
  5.1 over the default suite). "rotation": the norm's 8 in ulp(q), times sqrt(2), the float32 angle
  (torch's pow is an ulp off at some frequencies, rope.py: up to 4 ULP of r at position 8191), cos
  and sin (1), the products and the sum (2): 18 (measured 5.1). The angle's frequencies are the
  contract's correctly rounded powers, but torch's float32 pow (HF's) is only faithful: where the
  exact power lies within 0.08 ulp of a midpoint (measured over every even D <= 256, four thetas) it
  returns the other float32 neighbour, and the angle then moves by position x ulp(inv_i), which no
  fixed budget can hold (39 ULPs at D = 42 and position ~1240, ~8000 at position 8191 for a low
  frequency: 4.9e-4 relative). So it is not in the budget but in the reference (engine/judge.py,
  `Reference.nearest`): each frequency's pairs are judged against the nearer of its two neighbours,
  one choice per frequency for every row and head (as one inv_freq buffer), within the same 18
  (torch at D = 42: 40.5 ULPs against the nearest powers, 1.18 against the nearer; budget 39).
  The backward's gradients take the same choice, with the exact gradient computed at it: dx's
  projection term sums over the head, so one flipped frequency moves every element of dx
  (`Reference._choice` picks the flips greedily; torch's dw at 1x1x124: 423 ULPs against 89 at the
  nearest powers, 1.75 at its own; hf-qwen3's dx at 3x8x14: 122 against 89, 1.85).

**The reduction** (`reduction`) bounds what the order of the float32 sum of squares may cost: every
order a correct kernel uses (sequential, pairwise, blocked, Kahan, float64 accumulation) is legal,
so the bound is the worst of them, the sequential sum, and it is the deterministic one. For n
non-negative terms, each square rounded once and summed left to right, the computed sum is
S (1 + d) with |d| <= gamma_n = n u32 / (1 - n u32) (Higham, Accuracy and Stability of Numerical
Algorithms, 2nd ed., section 4.2), u32 = 2^-24, and it is reached in practice: once a few outlier
channels make the partial sum large, each small square is rounded against it, and every square below
half its ulp is lost, always in the same direction (a sequential float32 sum is 441 float32 ULPs off
at n = 16384 with four outlier channels, 94 at n = 4096; a mean-zero random model of its errors
predicts about a tenth of that, and failed it). The normalised value is S^(-1/2) times the rest, so
its relative error is half of d, and in ULPs of the output dtype (|v| / ulp(v) < 1 / u_dtype)
    reduction(dtype, n) = gamma_n / 2 / u_dtype  ~  n / 2 * (u32 / u_dtype)   ULPs,
64 float32 ULPs at n = 128, 512 at 1024, 2048 at 4096, 8192 at 16384 (a relative 4.9e-4: the
catalogued bugs sit at 1e-3 and beyond where exposed); for bf16 it is 2^-16 of that (0.03 at 4096),
for fp16 2^-13 (0.25 at 4096, 1 at 16384). Pairwise, blocked, Kahan and float64 sums land far inside
it (3, 12, 3 and 3 float32 ULPs at 16384 on the same rows); MLX's CPU `fast.rms_norm` and tinygrad
(sequential float32 sums) reach 17-18 float32 ULP at n = 4096 on normal rows (CATALOGUE.md), where
the first version's budget (16, with pairwise sums in mind) failed them. n is the normalised span:
head_dim for per-head norms, the whole row otherwise (`Case.span`).

**Centring** (LayerNorm, the "centred" rule): x - mean(x) is computed with a float32 mean, which
any legal order of its sum leaves up to gamma_n mean|x| off (the sequential bound again), plus 2 u32
mean|x| where a kernel takes the fused form x a - m a (a = rsqrt(var + eps): PyTorch's CPU
layer_norm; its two products are rounded against |x| a and |m| a, not the centred value):
g_n = gamma_n + 2 u32 (`centring_gamma`). That error, over sqrt(var + eps), lands in every element
of the span alike, and the judge counts it at the span's scale s (`oracle.span_scale`, the floor
below): rms(u) = sqrt(var / (var + eps)), but no less than the error itself,
E = g_n mean|x| / sqrt(var + eps). In ULPs of the output: g_n kappa / u_dtype with
kappa = mean|x| / (sqrt(var + eps) s) = min(mean|x| / sqrt(var), 1 / g_n) per span, the worst
span of the case (oracle.centring_condition). The first version divided by sqrt(var + eps) alone,
which is right only where var >> eps: where eps dominates the variance rms(u) << 1 and the mean's
error is 1 / rms(u) times larger at the floor (own torch at 1x2, tiny_rms:1e-3: 10.6 ULPs against
10.4; 108 now, kappa 24.6 = mean|x| / std). On a constant span (one element, or every x equal)
u = 0 and rms(u) = 0, while a correct float32 mean still leaves u up to E (torch's bf16 CPU
layer_norm gives 4.8e-7 for one element where the exact u is 0: 5e33 ULPs at a floor of 0); at the
floor E it is at most 1 / u_dtype ULPs (measured 213 bf16 and 1536 fp16 ULPs of 256 and 2048 over
constant rows of 1 to 63 elements), and "mean not subtracted" (u = mean / sqrt(eps), 1 / g_n times
E) stays ~n / 2^24 of the way inside it. Measured over 3000 shifted rows of n = 1..8 at eps 1e-5 and
1e-6 (torch's F.layer_norm and a two-pass float32 kernel): at most 3.2 kappa ULPs beyond the chain,
against the g_n kappa = (n + 2) kappa allowed. kappa is ~0.8 for mean-zero rows, and far more on
rows at mean 1000 with std 1 (kappa 1000), where the centring really is that ill-conditioned. A one-pass
variance E[x^2] - E[x]^2 errs by u32 m^2 / var = u32 kappa^2 relative (already at its one rounding
of E[x^2]), kappa times the two-pass bound per unit of n: the `narrow` regime at widths up to 128 is
where it shows. The chain: the mean's and the variance's divisions and the subtraction (1/2 each on
top of the "single" 8) in float32, 9; one rounding in bf16 / fp16 (PyTorch's CPU layer_norm
computes in float32). Where: the mean's error is one value for the whole span, so it is counted at
the span's scale, not at |y| (which is ~0 wherever x sits near the mean), and y = u * w + b can
cancel to far below |u * w|, which a float32 u errs relative to: ULPs are counted no finer than at
rms(u) |w| + |b| (oracle.centred_floor, the judge's floor).
The backward: kappa enters dx and dw as n kappa u32 (x_hat carries it); db is a sum of dy over rows,
(R + 8) u32 and two dtype roundings.

**A fused residual add** (add_rms_norm, the "residual_sum" rule): h = x + residual rounded to the
input dtype before the norm (HF's decoder order) is one more rounding of the norm's input (a
relative u: 1 ULP) on top of the Llama chain: 3 in bf16 / fp16, 9 in float32; a convention that keeps
the sum in float32 (vLLM's native path) takes the plain norm's chain (`rounding_rule`), so the sum
rounded first where it is kept (up to 3 roundings) is out of it on enough elements. Its second result,
residual_out = h in the dtype, is one correctly rounded sum: half an ULP (`RESULT_BUDGETS`), which a
truncated sum (vs round to nearest) leaves on about half its elements. Its backward: dx and
dresidual are the same gradient (d residual_out + J^T dy), the sum one more dtype rounding.

**Subnormals** are not in the budget but in where ULPs are counted (engine/judge.py, `ulp_floor`):
a Llama cast rounds the normalised value to the dtype before the weight multiply, and below the
dtype's smallest normal that rounding is absolute (half the subnormal spacing), which the weight then
scales: ULPs are counted no finer than at |weight| x the smallest normal.

**Gradients** (the backward pass, `gradient_budget`) are judged at another scale: a gradient is a
sum of terms of both signs (dx = r g - x r^3 / n sum(g x): for a random dy the sum is ~sqrt(n)
times smaller than the sum of its terms' magnitudes), and a float32 sum errs relative to the
magnitudes, not to the result. So ULPs are counted at S, the magnitude of the terms each gradient
is a sum of (engine/vjp.py, `vjp(..., absolute=True)`: every product in absolute value, every
difference a sum), which is >= |gradient|; the forward's `rotation_pair` rule is the same idea for
one product pair. In ULPs of the case dtype at S, a correct backward's error is at most
    rounding(dtype, op, output)  +  float32 part
The float32 part, for every legal order of its float32 sums (sequential the worst, k = n - 1
roundings over a span of n, R - 1 over R rows), derived in tests/implementations/
test_numpy_backward.py (its module docstring; there for numpy's own order, here with k = n):
  dx     the saved 1/rms r is off by gamma_{n+3} / 2 + gamma_2 (the forward's statistic), and enters
         the projection term cubed; that term's sum over the span adds gamma_n of sum|g x|; the
         products and the difference a few u: (2.5 n + 36) u32 relative to S.
  dw     each row's term dy' u carries u's error (n / 2 + 8 u32), and the sum over the R rows (and
         heads, for a shared per-head weight) gamma_R: (R + n / 2 + 8) u32.
  dgate  v = u (offset + w) carries u's error, silu' = s (1 + z (1 - s)) in float32 with exp within
         4 ulp a dozen u: (n / 2 + 16) u32.
converted to ULPs of the dtype as the forward's reduction is (/ u_dtype), plus the forward chain's
float32 constant (its rsqrt and products) for float32. The dtype roundings (bf16 / fp16; none in a
float32 pipeline) are each at most one ULP at S (a relative u of one term of S): the output's final
rounding; for dx the gradient reaching the norm g = dy (offset + w) formed in the dtype (autograd of
a bf16 product) and the scale offset + w rounded to it (the Llama cast multiplies by it); for dw the
normalised value u as the forward rounded it (the Llama cast saves a bf16 u), the product dy u in
the dtype and the final rounding; for dgate the forward's two roundings of v, the product with dy,
silu' and the final one; RoPE's transpose in the dtype adds three (cos and sin rounded, two
products, their sum), a gate's activation in the dtype two (a rounded, the product g a). A
backward that takes every step in the dtype rounds more (its op record's `dtype_backward_roundings`): torch's
autograd of F.normalize (x / max(||x||, eps), in the input dtype) rounds the saved norm, then for the
projection term x / n, / n, dy * that, their row sum, / n (of the norm's backward) and x * that, each
rounding relative to a part of S, the saved norm entering three times: 9; the direct term dy / n
two (the saved norm, the division); their sum one: at most 9 + 1 = 10 ULPs at S for dx (measured
5.57 fp16 and 4.80 bf16 over 720 cases; 3.14 at 19x3 where the budget of 3 failed it), while the
projection dropped stays 55 bf16 / 442 fp16 ULPs out.
Where the exact gradient is within budget of the dtype's overflow threshold a correct one may be
either side of it, finite or the exact value's infinity (engine/judge.py, `overflows_either_way`:
hf-deepseek-v3's fp16 dx with dy large gave 65504 for an exact 65521.6, which rounds to inf).
A Llama cast saves u in the dtype and rounds w * u there too: a u below the dtype's smallest normal
errs absolutely, as in the forward, and dw = dy u and dgate = dy v silu'(z) carry it, so the terms
count u and v no lower than the smallest normal (times max(|offset + w|, 1) for v: engine/vjp.py,
`_subnormal_floor`; HF Qwen3.5's fp16 dgate at an x_hat of 3.8e-6, 10.4 ULPs against 7, is 0.87).
The own float32 NumPy backward lands at 4.95 float32 ULPs at S (tests/implementations/
test_numpy_backward.py, numpy's pairwise sums); the dx budget is 364 at n = 128 and 10284 at 4096
in float32 (a relative 6e-4 of S), 3.0 / 3.2 in bf16: the backward bugs are O(1) relative errors of
one term (tests/implementations/test_backward_mutants.py).

tests/harness/data/test_budgets.py checks these in both directions: correct pipelines (every
reduction order, the Llama cast on subnormals with large gains) within, catalogued bugs outside.
"""
from __future__ import annotations

import numpy as np

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.roundoff import U32, centring_gamma, gamma  # noqa: F401  (budgets' own names too)
from normdiff.harness.data.ops import OPS
from normdiff.harness.data.ops.record import ROUNDINGS, SINGLE, Rounding

# dtype -> rounding rule -> the chain's budget in ULPs: the chains derived above, which the ops'
# records name (harness/data/ops/record.py: Rounding), and any an op module defines for itself
CHAINS: dict[str, dict[str, float]] = {
    dtype: {r.name: r.ulps(dtype) for r in dict.fromkeys(ROUNDINGS + tuple(op.rounding for op in OPS.values()))}
    for dtype in ("float32", "bfloat16", "float16")}
# A further forward result is a value of its own, with its own budget: a fused add's residual_out
# is x + residual, one correctly rounded sum of two values in the dtype (in float32 and rounded once
# alike): half an ULP, so a truncated one (up to a whole ULP, toward zero) is out
RESULT_BUDGETS = {"residual_out": 0.5}
MANTISSA_BITS = {"float32": 23, "bfloat16": 7, "float16": 10}
def unit(dtype: str) -> float:
    """u_dtype = 2^-(p + 1): half an ULP, relative (module docstring)."""
    return 2.0 ** -(MANTISSA_BITS[dtype] + 1)


def reduction(dtype: str, n: int) -> float:
    """What any legal order of the float32 sum of n squares may cost, in ULPs of `dtype`:
    gamma_n / 2 / u_dtype, the deterministic bound of a sequential sum."""
    return gamma(n) / 2.0 / unit(dtype)


def chain(dtype: str, op: str, rule: Rounding | None = None) -> float:
    """The rounding chain of `op` in `dtype` (`rule`: the one its contract takes, `rounding_rule`;
    default the op record's)."""
    if dtype not in CHAINS:
        raise UsageError(f"no ULP budget for dtype {dtype!r}; known: {', '.join(CHAINS)}")
    return (rule or OPS[op].rounding).ulps(dtype)


def rounding_rule(contract) -> Rounding:
    """The chain a contract's roundings follow: its op's, or one its knobs relax it to (a fused add
    that keeps its sum in float32, vLLM's native path, rounds no more than the plain norm)."""
    return OPS[contract.op].rounding_for(contract)


def centring(dtype: str, n: int, condition: float) -> float:
    """What the float32 mean may cost a centring op, in ULPs of `dtype`: g_n kappa / u_dtype,
    g_n = `centring_gamma`, kappa = min(mean|x| / sqrt(var), 1 / g_n) (oracle.centring_condition;
    module docstring, "Centring")."""
    if not condition:
        return 0.0
    return centring_gamma(n) * condition / unit(dtype)


def systematic_part(dtype: str, n: int, condition: float = 0.0) -> float:
    """The part of a forward budget a legal float32 order may spend alike on every row (its sum of
    squares, a centring's mean): the channel-bias check allows a channel's mean error this much more."""
    return reduction(dtype, n) + centring(dtype, n, condition)


def budget_for(dtype: str, op: str, n: int, condition: float = 0.0, result: str = "y",
               rule: str | None = None) -> float:
    """The ULP budget of `op`'s cases in `dtype` over a normalised span of n elements; `condition`
    is a centring op's kappa (0 for the others); `result` the forward result judged (y, or a fused
    add's residual_out, whose budget is its own); `rule` the contract's rounding rule
    (`rounding_rule`; default the op's)."""
    if result != "y":
        chain(dtype, op)  # an unknown dtype says so
        return RESULT_BUDGETS[result]
    return chain(dtype, op, rule) + (systematic_part(dtype, n, condition) if OPS[op].reduces else 0.0)


# A correct backward's roundings in the case dtype, each <= 1 ULP at S (module docstring):
# output -> the count for every op, plus what its rounding chain's backward adds (RoPE's transpose 3,
# a gate's activation 2, a fused add's sum of the two upstream gradients 1: ops/record.py Rounding)
GRADIENT_ROUNDINGS = {"dx": 3, "dw": 3, "dgate": 5, "db": 2, "dresidual": 3}


def gradient_float32_part(output: str, n: int, reduced_rows: int = 1, op: str = "") -> float:
    """The float32 part of a gradient's error, relative to its scale S, in units of u32 (`op`: an op
    whose record budgets a gradient of its own, ops/record.py `gradient_budgets`)."""
    own = {name: part for name, _, part in OPS[op].gradient_budgets} if op in OPS else {}
    if output in own:
        return own[output](n, reduced_rows)
    if output in ("dx", "dresidual"):  # a fused add's residual gets x's gradient
        return 2.5 * n + 36
    if output == "dw":
        return reduced_rows + n / 2 + 8
    if output == "dgate":
        return n / 2 + 16
    if output == "db":
        return reduced_rows + 8
    raise UsageError(f"no budget for backward output {output!r}; known: {', '.join(GRADIENT_ROUNDINGS)}")


def gradient_systematic(dtype: str, output: str, n: int, reduced_rows: int = 1, condition: float = 0.0,
                        op: str = "") -> float:
    """A gradient budget's float32 part, in ULPs of the dtype (what the channel-bias check allows
    on top of its own budget: see `systematic_part`)."""
    centred = centring_gamma(n) / U32 * condition if output in ("dx", "dw") else 0.0
    return (gradient_float32_part(output, n, reduced_rows, op) + centred) * U32 / unit(dtype)


def gradient_budget(dtype: str, op: str, output: str, n: int, reduced_rows: int = 1,
                    condition: float = 0.0) -> float:
    """The ULP budget of a backward output at its scale S (module docstring): the dtype roundings a
    correct backward may take, plus its float32 part for every legal order of its sums over the
    span n and, for dw and db, over `reduced_rows` (rows x the heads that share a per-head weight);
    for a centring op the error the float32 mean carries into x_hat (`condition`, kappa) enters dx
    and dw as it enters the forward."""
    chain(dtype, op)  # an unknown dtype says so
    float32 = gradient_systematic(dtype, output, n, reduced_rows, condition, op)
    rule = OPS[op].rounding
    if dtype == "float32":
        return rule.ulps("float32") + float32
    own = {name: rounds for name, rounds, _ in OPS[op].gradient_budgets}
    rounds = dict(OPS[op].dtype_backward_roundings).get(output, own[output] if output in own else GRADIENT_ROUNDINGS[output])
    return rounds + rule.backward_roundings(output) + float32


def budget_table() -> dict:
    """What a report records: per dtype the chain of every op ("*") and of the ops whose rule gives
    another, and the reduction allowance at the usual spans."""
    chains = {}
    for dtype in CHAINS:
        usual = SINGLE.ulps(dtype)
        chains[dtype] = {"*": usual, **{op.name: op.rounding.ulps(dtype) for op in OPS.values()
                                        if op.rounding.ulps(dtype) != usual}}
    spans = (64, 128, 1024, 4096, 16384)
    return {"chains": chains,
            "reduction": {dtype: {str(n): round(reduction(dtype, n), 4) for n in spans} for dtype in CHAINS},
            "gradients": {dtype: {out: {str(n): round(gradient_budget(dtype, "rms_norm", out, n, 64), 3)
                                        for n in (128, 1024, 4096)} for out in GRADIENT_ROUNDINGS}
                          for dtype in CHAINS},
            "gradient_rule": "backward outputs: ULPs of the dtype at S, the magnitude of their terms "
                             "(vjp absolute=True); budget = dtype roundings + float32 part (harness/data/budgets.py); "
                             "the table's dw at 64 reduced rows",
            "rule": "budget = chain[dtype][op's rounding rule] + gamma_n / 2 / u_dtype (~ n / 2 * u32 / u_dtype), "
                    "n the normalised span (harness/data/budgets.py)"}


# A fixed per-channel scale error (for example `bf16(1 + w)`) stays within ~1.5 ulp elementwise, so
# the ULP budget cannot see it; its mean error per channel over many rows can. Judged only with
# enough rows to average the rounding noise away (mean of R errors: ~0.3-0.5 ulp / sqrt(R)), and
# never below a floor: the Llama cast itself leaves a per-channel mean of up to 0.30 ulp at 128 rows
# (measured), while bf16(1 + w) leaves 0.79.
CHANNEL_BIAS_MIN_ROWS = 32
CHANNEL_BIAS_FLOOR_ULP = 0.5
CHANNEL_BIAS_NOISE_ULP = 6.0  # budget = max(floor, this / sqrt(rows))


def channel_bias_budget(rows: int) -> float | None:
    """The largest mean error (in ulps) a channel may carry over `rows` rows; None: not judged."""
    budget = float(channel_bias_budgets(np.array([rows]))[0])
    return None if np.isnan(budget) else budget


def channel_bias_budgets(rows: np.ndarray) -> np.ndarray:
    """The budget of each channel's row count at once, NaN where not judged (the judge asks for
    thousands of channels per output: one Python call each cost ~1 s a run)."""
    rows = np.asarray(rows, dtype=np.float64)
    with np.errstate(divide="ignore"):
        budgets = np.maximum(CHANNEL_BIAS_FLOOR_ULP, CHANNEL_BIAS_NOISE_ULP / np.sqrt(rows))
    return np.where(rows < CHANNEL_BIAS_MIN_ROWS, np.nan, budgets)
