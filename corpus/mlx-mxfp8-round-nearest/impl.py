"""A model of MLX's mxfp8 quantizer (Metal kernel and CPU fallback) at 846d176, applied to a float32
RMSNorm output, written here from reading it.

mlx/backend/metal/kernels/fp_quantized.h L2106-L2154 (fp_quantize), one simdgroup per block of 32:
  - the block's largest magnitude (simd_max of |w|) is divided by E4M3's 448 in float32;
  - that quotient is converted to an E8M0 scale by fp8_e8m0 (mlx/backend/metal/kernels/fp8.h L51-L67;
    the CPU's to_fp8_e8m0, mlx/backend/cpu/quantized.cpp L1049-L1061, is the same): its log2 is
    ROUNDED TO NEAREST (half away from zero) and clamped to [-127, 127], then biased by 127; so about
    half the blocks get a scale below amax / 448 and their largest values saturate (PR #4353);
  - each value is multiplied by the reciprocal of the decoded scale (exact: a power of two) and
    converted by fp8_e4m3 (fp8.h L3-L30): round to nearest even, saturating at 448.
A zero block: the byte 127 (scale 1), as the installed MLX gives (log2(0) is not finite here).
"""
import ml_dtypes
import numpy as np

F32 = np.float32
BLOCK = 32
FP8_MAX = F32(448.0)
ROUND_UP = False  # PR #4353 rounds the exponent up


def _rms_norm(x, weight, eps):
    x = np.asarray(x).astype(F32)
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + F32(eps)) * np.asarray(weight).astype(F32)


def _e8m0_exponent(s):
    le = np.log2(s.astype(np.float64))  # the log2 of the float32 quotient
    if ROUND_UP:
        n = np.ceil(le)
    else:
        n = np.sign(le) * np.floor(np.abs(le) + 0.5)  # nearest, half away from zero
    n = np.where(s > 0, n, 0.0)  # zero block: byte 127
    return np.clip(n, -127, 127)


def rms_norm_mxfp8(x, weight, eps):
    y = _rms_norm(x, weight, eps)
    rows = y.reshape(-1, y.shape[-1])
    blocks = rows.reshape(rows.shape[0], -1, BLOCK)
    s = np.abs(blocks).max(-1, keepdims=True) / FP8_MAX  # amax / 448 in float32
    scale = np.exp2(_e8m0_exponent(s)).astype(F32)  # the decoded E8M0 scale
    t = (blocks * (F32(1) / scale)).astype(F32)  # times the reciprocal (exact)
    q = np.clip(t, -FP8_MAX, FP8_MAX).astype(ml_dtypes.float8_e4m3fn)  # saturating RNE
    return q.reshape(y.shape), scale.reshape(*y.shape[:-1], -1)
