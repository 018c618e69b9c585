"""SPEC 1 (element and scale codes) and SPEC 2 (NVFP4) of `fp4ops.reference`: the part of the
oracle that the recipe oracle (_reference_recipe) builds on. Public through `fp4ops.reference`.

Like the rest of the oracle it imports nothing from fp4ops: it restates the SPEC's constants
itself, so a test can compare them with the product's."""

from __future__ import annotations

import torch

E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E4M3_MAX = 448.0
NVFP4_BLOCK = 16
MXFP4_BLOCK = 32
E4M3_NAN_CODE = 0x7F
E8M0_NAN_CODE = 0xFF
GLOBAL_SCALE_DIVISOR = 2688.0  # SPEC 2.2: 6 (largest E2M1) * 448 (largest E4M3)


# ----------------------------------------------------------------------------------------------
# Element and scale codes (SPEC 1)


def e2m1_encode(y: torch.Tensor) -> torch.Tensor:
    """fp32 -> one E2M1 code per element (uint8 0..15), as cvt.rn.satfinite.e2m1x2.f32."""
    y = y.float()
    grid = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float64, device=y.device)
    # |y| in float64 is exact, and so is every distance to the grid below 8.
    a = y.abs().double().clamp(max=6.0).unsqueeze(-1)
    distance = (a - grid).abs()
    nearest = distance.min(dim=-1, keepdim=True).values
    candidates = distance == nearest  # one grid point, or two at a tie
    # At a tie pick the code with an even mantissa bit (code & 1 == 0): round half to even.
    code_ids = torch.arange(8, device=y.device)
    preference = torch.where(candidates, code_ids % 2 * 8 + code_ids, 100)  # even codes first
    magnitude_code = preference.argmin(dim=-1).to(torch.uint8)
    sign = torch.signbit(y).to(torch.uint8) << 3
    code = magnitude_code | sign
    return torch.where(torch.isnan(y), torch.full_like(code, 0x7), code)  # NaN of either sign -> +6


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8 0..15) -> fp32, exactly; code 8 is -0.0."""
    table = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=codes.device)
    magnitude = table[(codes & 0x7).long()]
    return torch.where((codes & 0x8) != 0, -magnitude, magnitude)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes -> [..., K/2] bytes, element 2i in the low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"x: expected the last dimension to be even (two E2M1 codes a byte), got {codes.shape[-1]}")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] codes."""
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)


def e4m3_encode(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> float8_e4m3fn with cvt.rn.satfinite semantics: saturate to +-448, NaN -> 0x7F."""
    x = x.float()
    # torch's cast rounds to nearest even (subnormals included) but does not saturate.
    codes = x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.where(torch.isnan(x), torch.full_like(codes, E4M3_NAN_CODE), codes).view(torch.float8_e4m3fn)


def e4m3_decode(scales: torch.Tensor) -> torch.Tensor:
    return scales.view(torch.float8_e4m3fn).float()


def e8m0_decode(scales: torch.Tensor) -> torch.Tensor:
    """E8M0 -> fp32: 2^(E-127), code 0 is 2^-127 (not 0), 0xFF is NaN."""
    e = scales.view(torch.uint8).double()
    value = torch.exp2(e - 127.0)  # exact in float64, and exactly representable in fp32
    return torch.where(e == E8M0_NAN_CODE, torch.nan, value).float()


def divide(a: torch.Tensor, divisor: float) -> torch.Tensor:
    """a / divisor, rounded once, on every device. PyTorch's CUDA kernels divide by a Python number
    as a multiplication by its rounded reciprocal (two roundings: 1 ulp off for some inputs, which
    moves an E4M3 scale across a rounding boundary), so the divisor goes in as a tensor on a's device."""
    return a / torch.full((), divisor, dtype=a.dtype, device=a.device)


# ----------------------------------------------------------------------------------------------
# NVFP4 (SPEC 2)


def as_blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """x [..., K] as fp32 blocks [..., K/block, block]."""
    if x.shape[-1] % block:
        raise ValueError(f"x: expected the last dimension to be a multiple of {block} (the block), got {x.shape[-1]}")
    return x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)


def amax(x: torch.Tensor) -> torch.Tensor:
    """max |x| over the finite elements (0 if none), fp32 0-dim."""
    a = x.float().abs()
    a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    return a.max() if a.numel() else torch.zeros((), dtype=torch.float32, device=x.device)


def nvfp4_global_scale(amax_value: torch.Tensor) -> torch.Tensor:
    """g = amax / 2688, or 1 when that is 0."""
    g = divide(amax_value.float(), GLOBAL_SCALE_DIVISOR)
    return torch.where(g == 0, torch.ones_like(g), g)


def quantize_nvfp4(x: torch.Tensor, global_scale: torch.Tensor | float | None = None):
    """x [..., K] -> (data uint8 [..., K/2], scales float8_e4m3fn [..., K/16], global_scale fp32 0-dim)."""
    if global_scale is None:
        g = nvfp4_global_scale(amax(x))
    else:
        g = torch.as_tensor(global_scale, dtype=torch.float32, device=x.device).reshape(())
    blocks = as_blocks(x, NVFP4_BLOCK)
    finite = torch.isfinite(blocks).all(dim=-1, keepdim=True)
    block_max = torch.where(finite, blocks.abs(), 0.0).amax(dim=-1, keepdim=True)
    data, scales = encode_nvfp4_blocks(blocks, block_max, finite, g)
    return data, scales, g.clone()


def encode_nvfp4_blocks(blocks, block_max, finite, g, element_codes=None):
    """SPEC 2.3-2.5 for blocks [..., n, 16] given each block's max [..., n, 1] and whether it is
    all finite: (packed codes [..., n * 8], float8_e4m3fn scales [..., n]). element_codes, if
    given, maps the scaled elements to E2M1 codes in place of round-to-nearest."""
    g_valid = (g > 0) & torch.isfinite(g)
    scales = e4m3_encode(divide(block_max, 6.0) / g)
    scale_nan = ~finite | ~g_valid
    scales = torch.where(scale_nan, E4M3_NAN_CODE, scales.view(torch.uint8)).to(torch.uint8)
    decoded = e4m3_decode(scales)
    flt_max = torch.finfo(torch.float32).max
    multiplier = torch.where(decoded == 0, 0.0, (1.0 / (decoded * g)).clamp(max=flt_max))
    codes = (element_codes or e2m1_encode)(blocks * multiplier)
    codes = torch.where(scale_nan, 0, codes).to(torch.uint8)
    return pack_e2m1(codes.flatten(-2)), scales.squeeze(-1).view(torch.float8_e4m3fn)


def dequantize_nvfp4(data, scales, global_scale, dtype=torch.bfloat16) -> torch.Tensor:
    factor = e4m3_decode(scales) * global_scale.float().reshape(())  # f = dec(sb) * g, per block
    values = as_blocks(e2m1_decode(unpack_e2m1(data)), NVFP4_BLOCK) * factor.unsqueeze(-1)
    return values.flatten(-2).to(dtype)
