"""Exhaustive checks of the element and scale codes (SPEC 1) on the CPU kernels."""

from __future__ import annotations

import pytest
import torch
from conftest import FLOAT_DTYPES, assert_exact, assert_same_bytes

import fp4ops
from fp4ops import reference

E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def all_bit_patterns(dtype: torch.dtype) -> torch.Tensor:
    """Every 16-bit pattern as fp16 or bf16, in an even-length row."""
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cast_every_16bit_pattern(dtype):
    x = all_bit_patterns(dtype)
    assert_same_bytes(fp4ops.cast_to_e2m1(x), reference.cast_to_e2m1(x), f"{dtype} patterns")


def test_cast_random_fp32_patterns():
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 20,), dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    assert_same_bytes(fp4ops.cast_to_e2m1(x), reference.cast_to_e2m1(x), "random fp32 patterns")


# (input, expected code): every rounding tie of the E2M1 grid, both signs, and the points next
# to each tie, which must round away from it.
# (midpoint, lower code, upper code): the tie goes to the even code.
TIES = [(0.25, 0, 1), (0.75, 1, 2), (1.25, 2, 3), (1.75, 3, 4), (2.5, 4, 5), (3.5, 5, 6), (5.0, 6, 7)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("value, lower, upper", TIES)
def test_cast_ties_round_half_to_even(dtype, value, lower, upper):
    code = lower if lower % 2 == 0 else upper
    above = torch.nextafter(torch.tensor(value), torch.tensor(float("inf"))).item()
    below = torch.nextafter(torch.tensor(value), torch.tensor(0.0)).item()
    x = torch.tensor([value, -value, above, below], dtype=torch.float32).to(dtype)
    got = reference.unpack_e2m1(fp4ops.cast_to_e2m1(x)).tolist()
    assert got[0] == code and got[1] == code | 0x8
    if x[2].item() == above:  # the neighbours exist only in fp32; fp16/bf16 round them back
        assert got[2] == upper and got[3] == lower


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cast_specials(dtype):
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([0.0, -0.0, -0.1, inf, -inf, nan, -nan, 6.0, 7.0, -1e30], dtype=dtype)
    got = reference.unpack_e2m1(fp4ops.cast_to_e2m1(x)).tolist()
    # -0.0 and -0.1 keep the sign (0x8); +-Inf saturate to +-6; NaN of either sign gives 0x7.
    assert got == [0x0, 0x8, 0x8, 0x7, 0xF, 0x7, 0x7, 0x7, 0x7, 0xF]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cast_from_every_byte(dtype):
    data = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    expected = torch.tensor([[E2M1_VALUES[b & 0xF], E2M1_VALUES[b >> 4]] for b in range(256)]).flatten().to(dtype)
    assert_exact(fp4ops.cast_from_e2m1(data, dtype), expected)
    assert_exact(fp4ops.cast_from_e2m1(data.view(torch.float4_e2m1fn_x2), dtype), expected)


def test_cast_round_trip_of_grid():
    codes = torch.arange(16, dtype=torch.uint8).repeat(4)
    data = reference.pack_e2m1(codes)
    values = fp4ops.cast_from_e2m1(data, torch.float32)
    assert_same_bytes(fp4ops.cast_to_e2m1(values), data, "decode then encode")


def test_every_e4m3_code_decodes():
    scales = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).reshape(256, 1)
    data = torch.full((256, 8), 0x22, dtype=torch.uint8)  # every element 1.0
    out = fp4ops.dequantize(fp4ops.NVFP4Tensor(data, scales, torch.tensor(1.0)), torch.float32)
    expected = scales.float().expand(256, 16)  # torch's own E4M3 decode, NaN at 0x7F and 0xFF
    assert_exact(out, expected)
    assert torch.isnan(out[0x7F]).all() and torch.isnan(out[0xFF]).all()
    assert out[1, 0].item() == 2.0**-9 and out[0x7E, 0].item() == 448.0


def test_every_e8m0_code_decodes():
    scales = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e8m0fnu).reshape(256, 1)
    data = torch.full((256, 16), 0x22, dtype=torch.uint8)
    out = fp4ops.dequantize(fp4ops.MXFP4Tensor(data, scales), torch.float32)
    expected = torch.tensor([2.0 ** (e - 127) for e in range(255)] + [float("nan")]).reshape(256, 1).expand(256, 32)
    assert_exact(out, expected)
    assert out[0, 0].item() == 2.0**-127  # code 0 is 2^-127, never 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_e4m3_scale_rounding_over_every_16bit_magnitude(dtype):
    """Blocks whose max is each positive finite fp16/bf16 value: with g = 1 the scale code is
    e4m3(bmax / 6), which walks the whole E4M3 range, subnormals, ties and saturation included."""
    x = all_bit_patterns(dtype).float()
    magnitudes = x[torch.isfinite(x) & (x > 0)]
    blocks = magnitudes.reshape(-1, 1) * torch.linspace(1.0, 0.0, 16).reshape(1, 16)
    blocks = blocks.to(dtype)
    q = fp4ops.quantize_nvfp4(blocks, 1.0)
    data, scales, _ = reference.quantize_nvfp4(blocks, torch.tensor(1.0))
    assert_same_bytes(q.scales, scales, "scales")
    assert_same_bytes(q.data, data, "data")


@pytest.mark.parametrize("scale_rule", ["floor", "rceil"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_e8m0_scale_rules_over_every_16bit_magnitude(dtype, scale_rule):
    """Blocks whose max is each positive finite fp16/bf16 value (bf16 reaches down to the fp32
    subnormals, where rceil's quotient bmax / 6 rounds coarser than bmax)."""
    x = all_bit_patterns(dtype).float()
    magnitudes = x[torch.isfinite(x) & (x > 0)]
    blocks = (magnitudes.reshape(-1, 1) * torch.linspace(1.0, -0.5, 32).reshape(1, 32)).to(dtype)
    q = fp4ops.quantize_mxfp4(blocks, scale_rule=scale_rule)
    data, scales = reference.quantize_mxfp4(blocks, scale_rule)
    assert_same_bytes(q.scales, scales, "scales")
    assert_same_bytes(q.data, data, "data")


@pytest.mark.parametrize("scale_rule", ["floor", "rceil"])
def test_e8m0_scale_rules_over_random_fp32_maxima(scale_rule):
    """2^20 random positive fp32 bit patterns as block maxima, subnormals and the rceil switch
    point near 2^-123 included."""
    bits = torch.randint(1, 0x7F800000, (1 << 20,), dtype=torch.int64).to(torch.int32)
    bits[: 1 << 12] = torch.randint(1, 0x02000000, (1 << 12,), dtype=torch.int64).to(torch.int32)  # below 2^-123
    blocks = torch.zeros(bits.numel(), 32)
    blocks[:, 0] = bits.view(torch.float32)
    q = fp4ops.quantize_mxfp4(blocks, scale_rule=scale_rule)
    _, scales = reference.quantize_mxfp4(blocks, scale_rule)
    assert_same_bytes(q.scales, scales, "scales")


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("shape", [(5, 64), (64,), (2, 3, 64), (130, 64)], ids=str)
def test_reference_dequantize_exact_reads_either_scale_layout(fmt, shape):
    """The float64 reference (and the GEMV and linear references built on it) takes what the
    product takes: swizzled scales are undone first, a 1-D tensor's included."""
    x = torch.randn(shape)
    quantize = fp4ops.quantize_nvfp4 if fmt == "nvfp4" else fp4ops.quantize_mxfp4
    linear, swizzled = quantize(x), quantize(x, scale_layout="swizzled")
    expected = reference.dequantize_exact(linear)
    assert expected.shape == shape
    assert_exact(reference.dequantize_exact(swizzled), expected)


@pytest.mark.parametrize("call, message", [
    (lambda: reference.cast_to_e2m1(torch.tensor([[1.0, 2.0, 3.0]])), "x: expected the last dimension to be even"),
    (lambda: reference.quantize_nvfp4(torch.randn(0, 24)), "x: expected the last dimension to be a multiple of 16"),
    (lambda: reference.quantize_mxfp4(torch.randn(2, 48)), "x: expected the last dimension to be a multiple of 32"),
    (lambda: reference.unswizzle_scales(fp4ops.quantize_nvfp4(torch.randn(3, 64), scale_layout="swizzled").scales,
                                        200, 4), "scales: expected the swizzled shape [..., 256, 4]"),
])
def test_reference_refuses_what_the_product_refuses(call, message):
    """The reference's public functions refuse a K the block does not divide (and swizzled scales
    of another size) instead of pairing codes or blocks across it."""
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
