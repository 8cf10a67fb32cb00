"""A model of vLLM's MXFP4 activation quantizer for the CUTLASS MoE (W4A4) path before PR #43557,
applied to a float32 RMSNorm output, written here from reading it.

csrc/quantization/fp4/mxfp4_experts_quant.cu calls cvt_warp_fp16_to_fp4 (nvfp4_utils.cuh) with
E8M0 scales, blocks of 32 and no tensor-level scale (SFScaleVal = 1). There:
  - the block's largest magnitude is multiplied by an approximate float32 reciprocal of 6;
  - the E8M0 byte is the float32 bit pattern of that quotient shifted right by 23 and masked to 8
    bits: its biased exponent, i.e. floor(log2(amax / 6)), the exponent TRUNCATED (rounded down),
    so the scale is up to one binade below amax / 6 and the block max saturates at 6 (PR #43557);
  - the scale is that byte shifted back into a float32 (a power of two; 0 when the byte is 0);
  - each value is multiplied by the reciprocal of the scale (exact for a power of two; 0 for a zero
    scale) and converted to E2M1 by the saturating round-to-nearest-even cvt (+-6 at most).
"""
import ml_dtypes
import numpy as np

F32 = np.float32
BLOCK = 32


def _rms_norm(x, weight, eps):
    x = np.asarray(x).astype(F32)
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + F32(eps)) * np.asarray(weight).astype(F32)


def rms_norm_mxfp4(x, weight, eps):
    y = _rms_norm(x, weight, eps)
    rows = y.reshape(-1, y.shape[-1])
    blocks = rows.reshape(rows.shape[0], -1, BLOCK)
    sf = np.abs(blocks).max(-1, keepdims=True) * (F32(1) / F32(6))  # amax times 1/6, float32
    byte = (sf.view(np.uint32) >> 23) & 0xFF  # the biased exponent bits: truncated
    scale = (byte << 23).astype(np.uint32).view(F32)  # back to a float32 power of two (or 0)
    with np.errstate(divide="ignore"):
        inv = np.where(scale != 0, F32(1) / np.where(scale != 0, scale, F32(1)), F32(0)).astype(F32)
    t = (blocks * inv).astype(F32)
    q = np.clip(t, F32(-6), F32(6)).astype(ml_dtypes.float4_e2m1fn)  # saturating RNE to E2M1
    return q.reshape(y.shape), scale.reshape(*y.shape[:-1], -1)
