"""SPEC.md in plain PyTorch, written for clarity rather than speed.

This module shares no code with the C++/CUDA kernels and formulates the rules differently where it
can (E2M1 rounding as "nearest grid point, ties to the even code" instead of the kernels'
threshold count), so the exact tests that compare the two check the contract, not a copy of it.
Nor does it share code with the rest of the package: the oracle (this module, _reference_core and
_reference_recipe) imports nothing else from fp4ops and states the SPEC's constants itself.
Every function works on any device.
"""

from __future__ import annotations

import torch

from ._reference_core import (  # noqa: F401  (SPEC 1 and 2, public here)
    E2M1_MAGNITUDES,
    E4M3_MAX,
    E4M3_NAN_CODE,
    E8M0_NAN_CODE,
    GLOBAL_SCALE_DIVISOR,
    MXFP4_BLOCK,
    NVFP4_BLOCK,
    amax,
    as_blocks,
    dequantize_nvfp4,
    divide,
    e2m1_decode,
    e2m1_encode,
    e4m3_decode,
    e4m3_encode,
    e8m0_decode,
    encode_nvfp4_blocks,
    nvfp4_global_scale,
    pack_e2m1,
    quantize_nvfp4,
    unpack_e2m1,
)
from ._reference_recipe import (  # noqa: F401  (the training-recipe options, public here)
    e2m1_encode_stochastic,
    hadamard_sign_mask,
    philox4x32_10,
    quantize_nvfp4_recipe,
    rht_fp32,
)


# ----------------------------------------------------------------------------------------------
# MXFP4 (SPEC 3)


def mxfp4_scale_exponent(block_max: torch.Tensor, scale_rule: str = "floor") -> torch.Tensor:
    """The E8M0 code E (int64) of a block whose finite max magnitude is block_max (fp32)."""
    if scale_rule == "floor":
        # floor(log2 bmax) + 127 is the fp32 exponent field for normal numbers; subnormals and 0 -> E 0.
        mantissa, exponent = torch.frexp(block_max.double())  # bmax = mantissa * 2^exponent, mantissa in [0.5, 1)
        e = exponent.long() - 1 + 127 - 2
        e = torch.where(block_max < torch.finfo(torch.float32).tiny, 0, e)
        return e.clamp(min=0)
    if scale_rule == "rceil":
        t = divide(block_max.float(), 6.0).double()
        mantissa, exponent = torch.frexp(t)
        ceil_log2 = torch.where(mantissa == 0.5, exponent.long() - 1, exponent.long())
        return torch.where(t == 0, 0, (ceil_log2 + 127).clamp(0, 254))
    raise ValueError(f"scale_rule: expected 'floor' or 'rceil', got {scale_rule!r}")


def quantize_mxfp4(x: torch.Tensor, scale_rule: str = "floor"):
    """x [..., K] -> (data uint8 [..., K/2], scales float8_e8m0fnu [..., K/32])."""
    blocks = as_blocks(x, MXFP4_BLOCK)
    finite = torch.isfinite(blocks).all(dim=-1, keepdim=True)
    block_max = torch.where(finite, blocks.abs(), 0.0).amax(dim=-1, keepdim=True)
    e = mxfp4_scale_exponent(block_max, scale_rule)
    multiplier = torch.exp2(127.0 - e.double()).float()  # 2^(127-E), exact in fp32
    codes = torch.where(finite, e2m1_encode(blocks * multiplier), 0).to(torch.uint8)
    scales = torch.where(finite, e, E8M0_NAN_CODE).to(torch.uint8)
    return pack_e2m1(codes.flatten(-2)), scales.squeeze(-1).view(torch.float8_e8m0fnu)


def dequantize_mxfp4(data, scales, dtype=torch.bfloat16) -> torch.Tensor:
    values = as_blocks(e2m1_decode(unpack_e2m1(data)), MXFP4_BLOCK) * e8m0_decode(scales).unsqueeze(-1)
    return values.flatten(-2).to(dtype)


# ----------------------------------------------------------------------------------------------
# Unscaled casts


def cast_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    return pack_e2m1(e2m1_encode(x))


def cast_from_e2m1(data: torch.Tensor, dtype=torch.bfloat16) -> torch.Tensor:
    return e2m1_decode(unpack_e2m1(data)).to(dtype)


# ----------------------------------------------------------------------------------------------
# GEMV (SPEC 5)


def _linear_scales(q, block: int) -> torch.Tensor:
    """q's scale codes [..., K/block]: as stored, or SPEC 4's swizzled layout undone (rows of a
    1-D tensor: one)."""
    if q.scale_layout != "swizzled":
        return q.scales
    cols = q.data.shape[-1] * 2 // block
    linear = unswizzle_scales(q.scales, q.data.shape[-2] if q.data.dim() >= 2 else 1, cols)
    return linear.reshape(*q.data.shape[:-1], cols)


def dequantize_exact(q) -> torch.Tensor:
    """An NVFP4Tensor/MXFP4Tensor (either scale layout) as float64, exactly (every product of
    codes and scales fits)."""
    values = e2m1_decode(unpack_e2m1(q.data)).double()
    block = NVFP4_BLOCK if q.scales.dtype == torch.float8_e4m3fn else MXFP4_BLOCK
    scales = _linear_scales(q, block)
    if block == NVFP4_BLOCK:
        factor = e4m3_decode(scales).double() * q.global_scale.double()
    else:
        factor = e8m0_decode(scales).double()
    blocks = values.reshape(*values.shape[:-1], values.shape[-1] // block, block)
    return (blocks * factor.unsqueeze(-1)).flatten(-2)


def gemv_float64(a, b) -> torch.Tensor:
    """y[l, m] = sum_k A[l, m, k] * B[l, k] in float64 on the dequantized operands (SPEC 5's
    reference). a: NVFP4Tensor/MXFP4Tensor [L, M, K] or [M, K]; b: the same format or dense."""
    a64 = dequantize_exact(a)
    b64 = dequantize_exact(b) if hasattr(b, "scales") else b.double()
    return (a64 * b64.unsqueeze(-2)).sum(-1)


def gemv_error_bound(a, b, out_dtype: torch.dtype) -> torch.Tensor:
    """SPEC 5's tolerance per output: 2^-10 * sum_k |A_k B_k| + half an ulp of out_dtype at |ref|."""
    a64 = dequantize_exact(a)
    b64 = dequantize_exact(b) if hasattr(b, "scales") else b.double()
    magnitude = (a64 * b64.unsqueeze(-2)).abs().sum(-1)
    return 2.0**-10 * magnitude + half_ulp(gemv_float64(a, b), out_dtype)


def half_ulp(ref: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """Half an ulp of out_dtype at |ref|: 0.5 * eps * 2^floor(log2 |ref|), and no smaller than half
    the subnormal spacing."""
    finfo = torch.finfo(out_dtype)
    exponent = torch.floor(torch.log2(ref.abs().clamp(min=finfo.smallest_normal)))
    return 0.5 * finfo.eps * torch.exp2(exponent)


def _dense_or_exact(t) -> torch.Tensor:
    return dequantize_exact(t) if hasattr(t, "scales") else t.double()


def linear_float64(x, w, bias=None) -> torch.Tensor:
    """y = x W^T (+ bias) in float64 on the dequantized operands: fp4ops.linear's reference.
    x: dense [..., K] or NVFP4Tensor/MXFP4Tensor [..., K] (linear scales); w: NVFP4Tensor /
    MXFP4Tensor [N, K]; bias: [N] or None. Returns [..., N]."""
    y = _dense_or_exact(x) @ dequantize_exact(w).T
    return y if bias is None else y + bias.double()


def linear_error_bound(x, w, bias, out_dtype: torch.dtype, operands_rounded_to: torch.dtype | None = None) -> torch.Tensor:
    """SPEC 5's tolerance for fp4ops.linear per output, the bias counted as one more product:
    2^-10 * (sum_k |x_k W_nk| + |bias_n|) + half an ulp of out_dtype at |ref|. operands_rounded_to:
    the CUDA op's dequantize + cuBLAS path (docs/SPEC.md 5.1), where the dequantized operands (and
    the bias) are rounded to that 16-bit dtype first: each product then carries up to twice its unit
    roundoff more, 2 * u * (sum_k |x_k W_nk| + |bias_n|)."""
    magnitude = _dense_or_exact(x).abs() @ dequantize_exact(w).abs().T
    if bias is not None:
        magnitude = magnitude + bias.double().abs()
    two_unit_roundoffs = 0.0 if operands_rounded_to is None else torch.finfo(operands_rounded_to).eps
    return (2.0**-10 + two_unit_roundoffs) * magnitude + half_ulp(linear_float64(x, w, bias), out_dtype)


def swizzle_scales(scales: torch.Tensor) -> torch.Tensor:
    """SPEC 4 in tensor operations: scale codes [..., rows, cols] (or [cols], one row) -> the
    cuBLAS/tcgen05 128x4 block-scale layout, [..., ceil(rows/128)*128, ceil(cols/4)*4] per leading
    index, padding bytes zero; byte (i, j) of a matrix lands at
    ((i // 128) * ceil(cols / 4) + j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4."""
    matrices = scales.view(torch.uint8)
    if matrices.dim() == 1:
        matrices = matrices.unsqueeze(0)
    *lead, rows, cols = matrices.shape
    padded_rows, padded_cols = -(-rows // 128) * 128, -(-cols // 4) * 4
    padded = torch.zeros(*lead, padded_rows, padded_cols, dtype=torch.uint8, device=scales.device)
    padded[..., :rows, :cols] = matrices
    # [row atoms, 4 ((i % 128) // 32), 32 (i % 32), col atoms, 4 (j % 4)]
    #   -> [row atoms, col atoms, 32, 4, 4], i.e. 512-byte atoms in row-major atom order.
    n = len(lead)
    atoms = padded.reshape(*lead, padded_rows // 128, 4, 32, padded_cols // 4, 4)
    atoms = atoms.permute(*range(n), n, n + 3, n + 2, n + 1, n + 4)
    return atoms.reshape(*lead, padded_rows, padded_cols).view(scales.dtype)


def unswizzle_scales(scales: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The inverse of swizzle_scales: [..., padded rows, padded cols] -> [..., rows, cols]."""
    *lead, padded_rows, padded_cols = scales.shape
    expected = (-(-rows // 128) * 128, -(-cols // 4) * 4)
    if (padded_rows, padded_cols) != expected:
        raise ValueError(f"scales: expected the swizzled shape [..., {expected[0]}, {expected[1]}] for rows = {rows}, "
                         f"cols = {cols}, got {tuple(scales.shape)}")
    n = len(lead)
    atoms = scales.view(torch.uint8).reshape(*lead, padded_rows // 128, padded_cols // 4, 32, 4, 4)
    atoms = atoms.permute(*range(n), n, n + 3, n + 2, n + 1, n + 4)
    return atoms.reshape(*lead, padded_rows, padded_cols)[..., :rows, :cols].contiguous().view(scales.dtype)


def swizzle_scales_128x4(scales: torch.Tensor) -> torch.Tensor:
    """[rows, cols] scale codes swizzled (swizzle_scales) and flattened, as torch._scaled_mm takes them."""
    return swizzle_scales(scales).reshape(-1)


def scaled_mm_gemv(a, b, out_dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """The same GEMV through torch._scaled_mm (FP4 tensor cores; compute capability >= 10 only):
    scales swizzled to the 128x4 layout, B padded to 128 rows, one call per batch index, NVFP4
    global scales multiplied in afterwards. a [L, M, K] or [M, K]; b the same FP4 format [L, K]/[K]."""
    batched = a.data.dim() == 3
    a_data = a.data if batched else a.data.unsqueeze(0)
    a_scales = a.scales if batched else a.scales.unsqueeze(0)
    b_data = b.data if batched else b.data.unsqueeze(0)
    b_scales = b.scales if batched else b.scales.unsqueeze(0)
    outs = []
    for l in range(a_data.shape[0]):
        b_rows = torch.zeros(128, b_data.shape[-1], dtype=torch.uint8, device=b_data.device)
        b_rows[0] = b_data[l]
        b_scale_rows = torch.zeros(128, b_scales.shape[-1], dtype=torch.uint8, device=b_data.device)
        b_scale_rows[0] = b_scales[l].view(torch.uint8)
        y = torch._scaled_mm(
            a_data[l].view(torch.float4_e2m1fn_x2),
            b_rows.view(torch.float4_e2m1fn_x2).t(),
            swizzle_scales_128x4(a_scales[l]),
            swizzle_scales_128x4(b_scale_rows.view(b_scales.dtype)),
            out_dtype=torch.float32,
        )[:, 0]
        if a.scales.dtype == torch.float8_e4m3fn:
            y = y * a.global_scale * b.global_scale
        outs.append(y.to(out_dtype))
    out = torch.stack(outs)
    return out if batched else out.squeeze(0)


# ----------------------------------------------------------------------------------------------
# Fused producers (SPEC 7): the fp32 intermediate of RMSNorm and of SiLU-and-mul, its float64
# counterpart and bound, and the quantized result (the plain quantizers on the intermediate).


def _tensor_like(value: float, like: torch.Tensor) -> torch.Tensor:
    """`value` as an fp32 0-dim tensor on like's device (rounded to fp32 once). An operand that is
    a tensor keeps PyTorch's CUDA kernels from rewriting a division as a multiplication by a
    rounded reciprocal (see divide)."""
    return torch.full((), value, dtype=torch.float32, device=like.device)


def _next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _check_rms_norm(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None) -> None:
    if tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(f"weight: expected shape ({x.shape[-1]},), got {tuple(weight.shape)}")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"residual: expected x's shape and dtype, got {tuple(residual.shape)} {residual.dtype}")


def rms_norm_residual(x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
    """SPEC 7 RMSNorm step 1: h = x, or the fp32 sum x + residual rounded once to x's dtype."""
    return x if residual is None else (x.float() + residual.float()).to(x.dtype)


def pairwise_sum(v: torch.Tensor) -> torch.Tensor:
    """SPEC 7 RMSNorm step 2's tree over the last dimension, in fp32: zero-padded to the next power
    of two P, then neighbours added level by level (element 2i + element 2i+1), which is
    tree(lo, n) = tree(lo, n/2) + tree(lo + n/2, n/2) evaluated from the leaves up."""
    n = v.shape[-1]
    v = torch.nn.functional.pad(v.float(), (0, _next_power_of_two(n) - n))
    while v.shape[-1] > 1:
        v = v[..., 0::2] + v[..., 1::2]
    return v[..., 0]


def rms_norm_intermediate(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                          residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """SPEC 7 RMSNorm steps 1-4 in fp32, one rounding per operation: (y fp32 [..., H], h in x's
    dtype). x, residual [..., H]; weight [H] of any float dtype (widened exactly)."""
    _check_rms_norm(x, weight, residual)
    h = rms_norm_residual(x, residual)
    hf = h.float()
    hidden = hf.shape[-1]
    ss = pairwise_sum(hf * hf).unsqueeze(-1)
    mean = ss / _tensor_like(float(hidden), hf)  # H < 2^24: exact in fp32
    # torch.sqrt on fp32 CPU tensors is not correctly rounded (its vectorized kernels are 1 ulp off
    # for a good fraction of inputs); the float64 root rounded to fp32 is, since 53 >= 2 * 24 + 2.
    root = torch.sqrt((mean + _tensor_like(eps, hf)).double()).float()  # e = fp32(eps)
    rs = _tensor_like(1.0, hf) / root
    y = (hf * rs) * weight.float()
    return y, h


def rms_norm_float64(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                     residual: torch.Tensor | None = None) -> torch.Tensor:
    """SPEC 7 RMSNorm in float64 on the same h, w and e = fp32(eps): the bound's reference."""
    _check_rms_norm(x, weight, residual)
    h = rms_norm_residual(x, residual).double()
    e = float(torch.tensor(eps, dtype=torch.float32))
    rs = 1.0 / torch.sqrt((h * h).sum(-1, keepdim=True) / h.shape[-1] + e)
    return h * rs * weight.double()


def rms_norm_error_bound(y64: torch.Tensor, hidden: int, weight: torch.Tensor | None = None) -> torch.Tensor:
    """SPEC 7's RMSNorm tolerance: (log2(P) + 12) * 2^-25 * |y64| + 2^-149 * (1 + |w|), P the next
    power of two >= H. SPEC 7 states it where no square overflows or underflows (every nonzero
    |h_i| in [2^-60, 2^60]). The absolute term covers a y among fp32's subnormals (a tiny h_i
    times a small weight), whose two roundings are absolute; without `weight` it is left out,
    which is the stricter test wherever y is normal."""
    levels = _next_power_of_two(hidden).bit_length() - 1  # log2(P)
    bound = (levels + 12) * 2.0**-25 * y64.abs()
    if weight is not None:
        bound = bound + 2.0**-149 * (1 + weight.double().abs())
    return bound


def _gate_up(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if x.shape[-1] % 2:
        raise ValueError(f"x: expected an even last dimension (gate, then up), got {x.shape[-1]}")
    width = x.shape[-1] // 2
    return x[..., :width], x[..., width:]


def silu_mul_intermediate(x: torch.Tensor) -> torch.Tensor:
    """SPEC 7 SiLU-and-mul in fp32: (g / (1 + exp(-g))) * u, x [..., 2H] = gate then up. The
    exponential is torch's, which matches neither kernel's bit for bit (SPEC 7 lets each platform
    use its own): compare this with the kernels within silu_mul_error_bound, not exactly."""
    gate, up = (t.float() for t in _gate_up(x))
    denominator = _tensor_like(1.0, gate) + torch.exp(-gate)
    return (gate / denominator) * up


def silu_mul_float64(x: torch.Tensor) -> torch.Tensor:
    gate, up = (t.double() for t in _gate_up(x))
    return gate / (1.0 + torch.exp(-gate)) * up


def silu_mul_error_bound(y64: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SPEC 7's SiLU-and-mul tolerance: 7 * 2^-24 * |y64| + 2^-118 * |u| + 2^-149 (the second term
    covers gates below about -87, where fp32's exp(-g) overflows and y becomes +-0; the third a
    y among fp32's subnormals, whose last rounding is absolute). up: x[..., H:]."""
    return 7 * 2.0**-24 * y64.abs() + 2.0**-118 * up.double().abs() + 2.0**-149


def quantize_intermediate(y: torch.Tensor, format: str = "nvfp4", global_scale=None, scale_rule: str = "floor",
                          scale_layout: str = "linear"):
    """The plain quantizer of `format` on an fp32 intermediate: (data, scales, g) for NVFP4,
    (data, scales) for MXFP4, the scales swizzled (SPEC 4) when scale_layout is "swizzled"."""
    if format == "nvfp4":
        if scale_rule != "floor":
            raise ValueError(f"scale_rule: {scale_rule!r} is an MXFP4 rule")
        data, scales, g = quantize_nvfp4(y, global_scale)
        out = [data, scales, g]
    elif format == "mxfp4":
        if global_scale is not None:
            raise ValueError("global_scale: MXFP4 has no global scale")
        out = list(quantize_mxfp4(y, scale_rule))
    else:
        raise ValueError(f"format: expected 'nvfp4' or 'mxfp4', got {format!r}")
    if scale_layout == "swizzled":
        out[1] = swizzle_scales(out[1])
    elif scale_layout != "linear":
        raise ValueError(f"scale_layout: expected 'linear' or 'swizzled', got {scale_layout!r}")
    return tuple(out)


def rms_norm_quantize(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, residual: torch.Tensor | None = None,
                      format: str = "nvfp4", global_scale=None, scale_rule: str = "floor",
                      scale_layout: str = "linear"):
    """fp4ops.rms_norm_quantize's result as quantize_intermediate gives it; with a residual,
    (that, h): h the new residual stream."""
    y, h = rms_norm_intermediate(x, weight, eps, residual)
    q = quantize_intermediate(y, format, global_scale, scale_rule, scale_layout)
    return q if residual is None else (q, h)


def silu_mul_quantize(x: torch.Tensor, format: str = "nvfp4", global_scale=None, scale_rule: str = "floor",
                      scale_layout: str = "linear"):
    """fp4ops.silu_mul_quantize's result, on torch's exp (so equal to a kernel's only where the
    exponentials agree; the tests quantize the kernel's own intermediate for exact checks)."""
    return quantize_intermediate(silu_mul_intermediate(x), format, global_scale, scale_rule, scale_layout)


# ----------------------------------------------------------------------------------------------
# Random Hadamard Transform (d = 16), the Transformer Engine NVFP4 recipe's rotation: each
# 16-element group of the last dimension becomes x' = x H with H = diag(S) H16 / 4, H16 the
# Sylvester Hadamard matrix and S a sign vector. H is orthogonal (H H^T = I, exactly in binary
# floating point: its entries are +-1/4), so (x H)(w H)^T = x w^T: rotate both GEMM operands
# along K and the product is unchanged, while outliers spread over their group before quantizing.

RHT_DIM = 16
# Transformer Engine's fixed ("wgrad") sign vector.
TE_RHT_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def rht_signs(seed: int | None = None, device=None) -> torch.Tensor:
    """The sign vector S: Transformer Engine's fixed one (seed None), or 16 random +-1 from seed."""
    if seed is None:
        return torch.tensor(TE_RHT_SIGNS, dtype=torch.float64, device=device)
    bits = torch.randint(0, 2, (RHT_DIM,), generator=torch.Generator().manual_seed(seed))
    return (2 * bits - 1).to(dtype=torch.float64, device=device)


def rht_matrix(signs: torch.Tensor) -> torch.Tensor:
    """H = diag(S) H16 / 4 in float64, H16[i, j] = (-1)^popcount(i & j)."""
    i = torch.arange(RHT_DIM)
    parity = torch.zeros(RHT_DIM, RHT_DIM, dtype=torch.int64)
    for bit in range(4):  # popcount(i & j) mod 2, bit by bit
        parity ^= ((i[:, None] >> bit) & (i[None, :] >> bit)) & 1
    h16 = (1 - 2 * parity).to(torch.float64).to(signs.device)
    return signs.to(torch.float64)[:, None] * h16 / 4


def rht(x: torch.Tensor, signs: torch.Tensor | None = None) -> torch.Tensor:
    """x' = x H on every 16-element group of the last dimension (a multiple of 16), computed in
    float64 and returned in x's dtype."""
    if x.shape[-1] % RHT_DIM:
        raise ValueError(f"x: expected the last dimension to be a multiple of {RHT_DIM}, got {x.shape[-1]}")
    h = rht_matrix(signs if signs is not None else rht_signs(device=x.device))
    groups = x.double().reshape(*x.shape[:-1], x.shape[-1] // RHT_DIM, RHT_DIM)  # no -1: zero rows
    return (groups @ h).reshape(x.shape).to(x.dtype)


def inverse_rht(y: torch.Tensor, signs: torch.Tensor | None = None) -> torch.Tensor:
    """The inverse of rht: y H^T per group."""
    if y.shape[-1] % RHT_DIM:
        raise ValueError(f"y: expected the last dimension to be a multiple of {RHT_DIM}, got {y.shape[-1]}")
    h = rht_matrix(signs if signs is not None else rht_signs(device=y.device))
    groups = y.double().reshape(*y.shape[:-1], y.shape[-1] // RHT_DIM, RHT_DIM)  # no -1: zero rows
    return (groups @ h.T).reshape(y.shape).to(y.dtype)
