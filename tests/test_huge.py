"""More than 2^31 elements through every op on the GPU (64-bit indexing end to end), compared with
the CPU kernels (bytes) or SPEC 5's bound (GEMV) in chunks. The quantizers' 1-D case, dequantize
and amax are in test_cuda_ops.py (test_more_than_2_pow_31_elements). About 20 GiB of GPU memory."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_exact, assert_same_bytes, requires_cuda

import fp4ops
from fp4ops import reference

pytestmark = requires_cuda

# 4097 row blocks of 16: rows*K = 2^31 + 2^19 elements, rows a multiple of 16 (the columnwise
# output) but not of 128 (so the swizzled layout has padding).
ROWS, K = 4097 * 16, 32768
CHUNK_ROWS = 8192


@pytest.fixture(scope="module")
def x_gpu():
    x = torch.randn(ROWS, K, device="cuda", dtype=torch.bfloat16)
    x[-1, -5] = 1000.0  # the amax sits past element 2^31
    return x


@pytest.fixture(scope="module")
def x_cpu(x_gpu):
    return x_gpu.cpu()


def assert_same_in_row_chunks(gpu: torch.Tensor, cpu: torch.Tensor, what: str) -> None:
    assert gpu.shape == cpu.shape, what
    for start in range(0, gpu.shape[0], CHUNK_ROWS):
        assert_same_bytes(gpu[start : start + CHUNK_ROWS], cpu[start : start + CHUNK_ROWS], f"{what}, rows {start}+")


def test_recipe_rowwise_columnwise_hadamard_stochastic(x_gpu, x_cpu):
    options = dict(hadamard=True, stochastic_rounding=True, seed=2**40 + 3, offset=7)
    gpu = fp4ops.quantize_nvfp4_rowwise_columnwise(x_gpu, **options)
    cpu = fp4ops.quantize_nvfp4_rowwise_columnwise(x_cpu, **options)
    for direction, g, c in zip(("rowwise", "columnwise"), gpu, cpu):
        assert_exact(g.global_scale.cpu(), c.global_scale)
        assert_same_in_row_chunks(g.data, c.data, f"{direction} data")
        assert_same_in_row_chunks(g.scales, c.scales, f"{direction} scales")


def test_2d_blocks_swizzled_and_their_dequantize(x_gpu, x_cpu):
    gpu = fp4ops.quantize_nvfp4(x_gpu, block_2d=True, scale_layout="swizzled")
    cpu = fp4ops.quantize_nvfp4(x_cpu, block_2d=True, scale_layout="swizzled")
    assert_same_in_row_chunks(gpu.data, cpu.data, "data")
    assert_same_bytes(gpu.scales, cpu.scales, "swizzled scales")
    y = gpu.dequantize(torch.bfloat16)
    linear = fp4ops.unswizzle_scales(cpu.scales, ROWS, K // 16)
    for start in range(0, ROWS, CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        expected = fp4ops.NVFP4Tensor(cpu.data[rows], linear[rows], cpu.global_scale).dequantize(torch.bfloat16)
        assert_exact(y[rows].cpu(), expected)


def test_casts(x_gpu, x_cpu):
    packed = fp4ops.cast_to_e2m1(x_gpu.view(-1))
    packed_cpu = fp4ops.cast_to_e2m1(x_cpu.view(-1))
    assert_same_in_row_chunks(packed.view(ROWS, -1), packed_cpu.view(ROWS, -1), "cast_to_e2m1")
    unpacked = fp4ops.cast_from_e2m1(packed, torch.float16)
    for start in range(0, ROWS, CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        assert_exact(unpacked.view(ROWS, K)[rows].cpu(), fp4ops.cast_from_e2m1(packed_cpu.view(ROWS, -1)[rows], torch.float16))


def test_swizzle_more_than_2_pow_31_scales():
    rows, cols = 65552, 32770  # 2^31 + 655392 scale bytes, padding in both dimensions
    codes = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    swizzled = fp4ops.swizzle_scales(codes)
    assert_same_bytes(swizzled, fp4ops.swizzle_scales(codes.cpu()), "swizzle_scales")
    assert_same_bytes(fp4ops.unswizzle_scales(swizzled, rows, cols), codes, "unswizzle_scales round trip")


@pytest.mark.parametrize("b_kind", ["bfloat16", "nvfp4"])
def test_gemv_with_more_than_2_pow_31_weights(x_gpu, b_kind):
    a = fp4ops.quantize_nvfp4(x_gpu)
    vector = torch.randn(K, device="cuda", dtype=torch.bfloat16)
    b = vector if b_kind == "bfloat16" else fp4ops.quantize_nvfp4(vector)
    y = fp4ops.gemv(a, b, out_dtype=torch.float32).cpu()
    b_cpu = b.cpu() if b_kind == "bfloat16" else fp4ops.NVFP4Tensor(b.data.cpu(), b.scales.cpu(), b.global_scale.cpu())
    for start in range(0, ROWS, CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        a_rows = fp4ops.NVFP4Tensor(a.data[rows].cpu(), a.scales[rows].cpu(), a.global_scale.cpu())
        ref = reference.gemv_float64(a_rows, b_cpu)
        bound = reference.gemv_error_bound(a_rows, b_cpu, torch.float32)
        assert ((y[rows].double() - ref).abs() <= bound).all(), f"rows {start}+"
