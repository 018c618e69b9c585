"""More than 2^31 elements through every op on the GPU (64-bit indexing end to end). The GPU
computes the whole tensor; row chunks of it are checked against the CPU kernels (bytes) or SPEC 5's
bound (GEMV): the first chunk, one centred on element 2^31, the last one and a random one (the CPU
kernels would take minutes over all 2^31 elements). The quantizers' 1-D case, dequantize and amax
are in test_cuda_ops.py (test_more_than_2_pow_31_elements); fp4ops.linear reads a weight of more
than 2^31 bytes. Needs about 30 GiB of GPU memory."""

from __future__ import annotations

import pytest
import torch
from conftest import HAS_CUDA, assert_exact, assert_same_bytes

import fp4ops
from fp4ops import reference

pytestmark = pytest.mark.skipif(not HAS_CUDA or torch.cuda.get_device_properties(0).total_memory < 40 * 2**30,
                                reason="needs a CUDA GPU with 40 GiB")

# 4097 row blocks of 16: rows*K = 2^31 + 2^19 elements, rows a multiple of 16 (the columnwise
# output) but not of 128 (so the swizzled layout has padding). Row 65536 starts at element 2^31.
ROWS, K = 4097 * 16, 32768
CHUNK = 4096  # rows per checked chunk, a multiple of 128


def checked_chunks() -> list[slice]:
    boundary = 2**31 // K - CHUNK // 2
    random_start = int(torch.randint(0, ROWS // CHUNK, ())) * CHUNK
    starts = sorted({0, boundary, random_start, (ROWS - 1) // CHUNK * CHUNK})
    return [slice(start, min(start + CHUNK, ROWS)) for start in starts]


@pytest.fixture(scope="module")
def x():
    x = torch.randn(ROWS, K, device="cuda", dtype=torch.bfloat16)
    x[-1, -5] = 1000.0  # the amax sits past element 2^31
    return x


def g_of(amax: torch.Tensor) -> torch.Tensor:
    """The global scale the kernels derive from an amax (CPU quantizer on a block holding it)."""
    return fp4ops.quantize_nvfp4(amax.cpu().reshape(1).expand(16).contiguous()).global_scale


def rotated_amax(x: torch.Tensor, signs_mask: int, columnwise: bool) -> torch.Tensor:
    """amax of x rotated along rows (or along columns), computed in chunks on the GPU."""
    amax = torch.zeros((), device=x.device)
    for start in range(0, K if columnwise else ROWS, CHUNK):
        piece = x[:, start : start + CHUNK].T if columnwise else x[start : start + CHUNK]
        amax = torch.maximum(amax, reference.rht_fp32(piece.contiguous(), signs_mask).abs().amax())
    return amax


def test_recipe_rowwise_columnwise_hadamard(x):
    rowwise, columnwise = fp4ops.quantize_nvfp4_rowwise_columnwise(x, hadamard=True)
    mask = reference.hadamard_sign_mask(reference.TE_RHT_SIGNS)
    g_row, g_col = g_of(rotated_amax(x, mask, False)), g_of(rotated_amax(x, mask, True))
    assert_exact(rowwise.global_scale.cpu(), g_row)
    assert_exact(columnwise.global_scale.cpu(), g_col)
    for rows in checked_chunks():
        piece = x[rows].cpu()
        expected_row = fp4ops.quantize_nvfp4(piece, g_row, hadamard=True)
        expected_col = fp4ops.quantize_nvfp4_rowwise_columnwise(piece, g_col, hadamard=True)[1]
        assert_same_bytes(rowwise.data[rows], expected_row.data, f"rowwise data, rows {rows}")
        assert_same_bytes(rowwise.scales[rows], expected_row.scales, f"rowwise scales, rows {rows}")
        bytes_, blocks = slice(rows.start // 2, rows.stop // 2), slice(rows.start // 16, rows.stop // 16)
        assert_same_bytes(columnwise.data[:, bytes_], expected_col.data, f"columnwise data, rows {rows}")
        assert_same_bytes(columnwise.scales[:, blocks], expected_col.scales, f"columnwise scales, rows {rows}")


def test_stochastic_rounding_2d_swizzled_and_dequantize(x):
    """SR's random stream is keyed by the block index, so a chunk cannot be redone alone: the
    rowwise SR copy is checked whole on the CPU, which is affordable for one direction."""
    gpu = fp4ops.quantize_nvfp4(x, 0.25, block_2d=True, stochastic_rounding=True, seed=2**40 + 3, offset=7,
                                scale_layout="swizzled")
    linear_scales = fp4ops.unswizzle_scales(gpu.scales, ROWS, K // 16)
    y = gpu.dequantize(torch.bfloat16)
    for rows in checked_chunks():
        expected = fp4ops.quantize_nvfp4(x[rows].cpu(), 0.25, block_2d=True)  # the 2D scales do not depend on SR
        assert_same_bytes(linear_scales[rows], expected.scales, f"2D scales, rows {rows}")
        q_rows = fp4ops.NVFP4Tensor(gpu.data[rows].cpu(), linear_scales[rows].cpu(), gpu.global_scale.cpu())
        assert_exact(y[rows].cpu(), q_rows.dequantize(torch.bfloat16))
    cpu = fp4ops.quantize_nvfp4(x.cpu(), 0.25, block_2d=True, stochastic_rounding=True, seed=2**40 + 3, offset=7)
    for start in range(0, ROWS, 8 * CHUNK):
        rows = slice(start, start + 8 * CHUNK)
        assert_same_bytes(gpu.data[rows], cpu.data[rows], f"SR data, rows {rows}")


def test_casts(x):
    packed = fp4ops.cast_to_e2m1(x.view(-1)).view(ROWS, K // 2)
    unpacked = fp4ops.cast_from_e2m1(packed.view(-1), torch.float16).view(ROWS, K)
    for rows in checked_chunks():
        expected = fp4ops.cast_to_e2m1(x[rows].cpu())
        assert_same_bytes(packed[rows], expected, f"cast_to_e2m1, rows {rows}")
        assert_exact(unpacked[rows].cpu(), fp4ops.cast_from_e2m1(expected, torch.float16))


def test_swizzle_more_than_2_pow_31_scales():
    rows, cols = 65552, 32770  # 2^31 + 655392 scale bytes, padding in both dimensions
    codes = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    swizzled = fp4ops.swizzle_scales(codes)
    assert swizzled.shape == (65664, 32772)
    last_atoms = slice(65536, None)  # the final row of 128x4 atoms: past byte 2^31, with the padding
    expected = fp4ops.swizzle_scales(codes[last_atoms].cpu())
    assert_same_bytes(swizzled[last_atoms], expected, "swizzled scales past 2^31")
    assert_same_bytes(fp4ops.unswizzle_scales(swizzled, rows, cols), codes, "unswizzle_scales round trip")


@pytest.mark.parametrize("b_kind", ["bfloat16", "nvfp4"])
def test_gemv_with_more_than_2_pow_31_weights(x, b_kind):
    a = fp4ops.quantize_nvfp4(x)
    vector = torch.randn(K, device="cuda", dtype=torch.bfloat16)
    b = vector if b_kind == "bfloat16" else fp4ops.quantize_nvfp4(vector)
    y = fp4ops.gemv(a, b, out_dtype=torch.float32).cpu()
    b_cpu = b.cpu() if b_kind == "bfloat16" else fp4ops.NVFP4Tensor(b.data.cpu(), b.scales.cpu(), b.global_scale.cpu())
    for rows in checked_chunks():
        a_rows = fp4ops.NVFP4Tensor(a.data[rows].cpu(), a.scales[rows].cpu(), a.global_scale.cpu())
        ref = reference.gemv_float64(a_rows, b_cpu)
        bound = reference.gemv_error_bound(a_rows, b_cpu, torch.float32)
        assert ((y[rows].double() - ref).abs() <= bound).all(), f"rows {rows}"


@pytest.mark.parametrize(("m", "batch_invariant"), [(3, False), (80, False), (80, True)])
def test_linear_with_more_than_2_pow_31_weight_bytes(m, batch_invariant):
    """W of N = 2^17 + 16 rows by K = 2^15: 2^31 + 2^18 bytes of codes (row 2^17 starts at byte
    2^31), random codes and moderate E4M3 scales made on the GPU. The outputs of W rows at both
    ends, around byte 2^31 and at random are checked against the float64 reference of those rows;
    3 rows run the kernel family, 80 the path above it (and the kernel family in row chunks)."""
    n, k = 2**17 + 16, 2**15
    data = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
    scales = torch.randint(0x30, 0x48, (n, k // 16), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    w = fp4ops.NVFP4Tensor(data, scales, torch.tensor(0.01, device="cuda"))
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda")
    y = fp4ops.linear(x, w, bias, out_dtype=torch.float32, batch_invariant=batch_invariant)
    assert y.shape == (m, n)
    random_rows = torch.randint(0, n, (64,), device="cuda")
    rows = torch.cat([torch.arange(0, 64, device="cuda"), torch.arange(2**17 - 48, 2**17 + 16, device="cuda"),
                      random_rows]).unique()
    w_rows = fp4ops.NVFP4Tensor(data[rows].cpu(), scales[rows].cpu(), w.global_scale.cpu())
    x_cpu, bias_rows, y_rows = x.cpu(), bias[rows].cpu(), y[:, rows].cpu().double()
    del data, scales, w, y
    torch.cuda.empty_cache()
    ref = reference.linear_float64(x_cpu, w_rows, bias_rows)
    # 80 rows without batch_invariant: the dequantize + cuBLAS path, operands rounded to bf16.
    rounded_to = torch.bfloat16 if m > 64 and not batch_invariant else None
    bound = reference.linear_error_bound(x_cpu, w_rows, bias_rows, torch.float32, rounded_to)
    err = (y_rows - ref).abs()
    assert (err <= bound).all(), f"max err/bound {(err / bound).max().item():.3f}"
