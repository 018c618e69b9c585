"""Batched FP4 GEMV (SPEC 5) against the float64 reference, on every device with a kernel."""

from __future__ import annotations

import pytest
import torch
from conftest import HAS_CUDA, cuda_has_kernel, requires_caching_allocator

import fp4ops
from fp4ops import reference

DEVICES = ["cpu"] + (["cuda"] if cuda_has_kernel("gemv_fp4_dense") else [])
OUT_DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def quantize(x: torch.Tensor, fmt: str):
    return fp4ops.quantize_nvfp4(x) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(x)


def operands(fmt: str, b_kind: str, shape: tuple, device: str):
    """A quantized [.., M, K] and B ([.., K], FP4 or dense) from fresh heavy-tailed data."""
    *lead, m, k = shape
    a = quantize(torch.distributions.StudentT(3.0).sample(shape).to(device), fmt)
    b_dense = torch.randn(*lead, k, device=device)
    b = quantize(b_dense, fmt) if b_kind == "fp4" else b_dense.to(getattr(torch, b_kind))
    return a, b


def assert_within_contract(y: torch.Tensor, a, b, out_dtype: torch.dtype) -> None:
    ref = reference.gemv_float64(a, b)
    bound = reference.gemv_error_bound(a, b, out_dtype)
    err = (y.double() - ref).abs()
    finite = torch.isfinite(ref)
    assert (torch.isnan(y) == torch.isnan(ref)).all()
    assert (err[finite] <= bound[finite]).all(), f"max err/bound {(err[finite] / bound[finite]).max().item():.3f}"
    assert (y.double().abs()[finite] > 0).any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("b_kind", ["fp4", "bfloat16", "float16"])
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
# K % 128 == 0 takes the CUDA tensor-core kernel (M not a multiple of its 8-row tile; K = 128,
# 16384 + 128: a last segment of half length; small M with K >= 4096 splits a tile over 2-8 warps);
# K = 32 the CUDA-core kernel. Shapes with many tiles per warp group: test_many_tiles_per_group.
@pytest.mark.parametrize(
    "shape",
    [(3, 40, 256), (1, 7, 32), (64, 1024), (2, 5, 2048), (2, 33, 4096), (1, 16, 128), (17, 1024, 256),
     (2, 9, 16384 + 128)],
)
def test_matches_float64_reference(shape, fmt, b_kind, out_dtype, device):
    a, b = operands(fmt, b_kind, shape, device)
    y = fp4ops.gemv(a, b, out_dtype=out_dtype)
    assert y.shape == shape[:-1] and y.dtype == out_dtype and y.device.type == device
    assert_within_contract(y.cpu(), a.to("cpu"), b.to("cpu"), out_dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_largest_scales_and_negative_codes(device, out_dtype):
    """Codes +-6 with E4M3 scales of 448 on both sides: block products of 6 * 6 * 448 * 448 per
    element, beyond fp16's range, must not overflow inside the kernel."""
    l, m, k = 2, 8, 128
    a_codes = torch.where(torch.rand(l, m, k) < 0.5, 0x7, 0xF).to(torch.uint8)
    b_codes = torch.where(torch.rand(l, k) < 0.5, 0x7, 0xF).to(torch.uint8)
    a = fp4ops.NVFP4Tensor(reference.pack_e2m1(a_codes).to(device), torch.full((l, m, k // 16), 448.0).to(torch.float8_e4m3fn).to(device), torch.tensor(1.0, device=device))
    b = fp4ops.NVFP4Tensor(reference.pack_e2m1(b_codes).to(device), torch.full((l, k // 16), 448.0).to(torch.float8_e4m3fn).to(device), torch.tensor(1.0, device=device))
    y = fp4ops.gemv(a, b, out_dtype=out_dtype)
    assert torch.isfinite(y).all()
    assert_within_contract(y.cpu(), a.to("cpu"), b.to("cpu"), out_dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("k", [64, 384])
@pytest.mark.parametrize("nan_block", ["last", "first"])
def test_row_touching_a_nan_block_is_nan(device, fmt, k, nan_block):
    """K = 384 ends in a half segment on the CUDA kernel: its second range lies past the row, where
    the next row's first block begins (nan_block="first" puts the NaN there for row 1)."""
    x = torch.randn(4, 6, k)
    x[1, 2, k - 59 if nan_block == "last" else 5] = float("nan")
    a = quantize(x.to(device), fmt)
    b = torch.randn(4, k, device=device, dtype=torch.bfloat16)
    y = fp4ops.gemv(a, b, out_dtype=torch.float32)
    assert torch.isnan(y[1, 2]) and torch.isnan(y).sum() == 1
    b_fp4 = quantize(torch.randn(4, k, device=device), fmt)
    y = fp4ops.gemv(a, b_fp4, out_dtype=torch.float32)
    assert torch.isnan(y[1, 2]) and torch.isnan(y).sum() == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b_kind", ["bfloat16", "float16"])
def test_nan_in_dense_b_reaches_only_its_batch(device, b_kind):
    a, b = operands("nvfp4", b_kind, (3, 20, 256), device)
    b[1, 200] = float("nan")
    y = fp4ops.gemv(a, b, out_dtype=torch.float32)
    assert torch.isnan(y[1]).all() and not torch.isnan(y[0]).any() and not torch.isnan(y[2]).any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("a_code, b_code", [(254, 0), (0, 254), (200, 60), (60, 80), (50, 74), (1, 110)])
def test_mxfp4_scale_products_spanning_the_fp32_range(device, a_code, b_code):
    """E8M0 scales 2^127 x 2^-127 (and the reverse): the product is moderate, though either
    scale alone times a block sum leaves fp32's range. (60, 80), (50, 74), (1, 110): products of
    2^-114, 2^-130 and 2^-143, below the 2^-100 that the scaling applies first (it splits 2^sum
    into two powers of two), the last two with subnormal block results. Codes +-6 and +-0.5
    mixed."""
    l, m, k = 2, 16, 256
    magnitudes = torch.tensor([0x1, 0x7, 0x9, 0xF], dtype=torch.uint8)
    a_codes = magnitudes[torch.randint(0, 4, (l, m, k))]
    b_codes = magnitudes[torch.randint(0, 4, (l, k))]
    e8m0 = torch.float8_e8m0fnu
    a = fp4ops.MXFP4Tensor(reference.pack_e2m1(a_codes).to(device), torch.full((l, m, k // 32), a_code, dtype=torch.uint8).view(e8m0).to(device))
    b = fp4ops.MXFP4Tensor(reference.pack_e2m1(b_codes).to(device), torch.full((l, k // 32), b_code, dtype=torch.uint8).view(e8m0).to(device))
    y = fp4ops.gemv(a, b, out_dtype=torch.float32)
    assert torch.isfinite(y).all()
    assert_within_contract(y.cpu(), a.to("cpu"), b.to("cpu"), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b_kind", ["fp4", "bfloat16", "float16"])
def test_largest_k_of_the_tensor_core_kernel(device, b_kind):
    """K = 32768 stages 64 KB of B operands per CTA (past the 48 KB default); 32768 + 128 goes to
    the CUDA-core kernel."""
    for k in (32768, 32768 + 128):
        a, b = operands("nvfp4", b_kind, (1, 20, k), device)
        assert_within_contract(fp4ops.gemv(a, b, out_dtype=torch.float32).cpu(), a.to("cpu"), b.to("cpu"), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_tiny_bf16_b_with_large_scales(device, fmt):
    """bf16 B values near fp32's subnormal range: their products with A must not be flushed."""
    l, m, k = 1, 16, 256
    a = quantize(torch.randn(l, m, k, device=device) * (2.0**100 if fmt == "mxfp4" else 1.0), fmt)
    b = (torch.randn(l, k, device=device) * 2.0**-128).to(torch.bfloat16)
    for out_dtype in (torch.float32, torch.bfloat16):
        assert_within_contract(fp4ops.gemv(a, b, out_dtype=out_dtype).cpu(), a.to("cpu"), b.to("cpu"), out_dtype)


# bf16 B values the CUDA kernel can stage times 2^70 (2^-62 <= |b| < 2^57, zeros, inf, NaN) and
# values that send their batch to the unshifted staging: the smallest and largest on each side.
BF16_SHIFT_RANGE_EDGES = [2.0**-62, -(2.0**-62), (2 - 2.0**-7) * 2.0**56, -(2 - 2.0**-7) * 2.0**56]
BF16_OUTSIDE_SHIFT_RANGE = [(2 - 2.0**-7) * 2.0**-63, 2.0**57, -(2.0**-133), 2.0**100]


def with_zero_a_column(a, column: int):
    """a with the codes of one K column set to +0 in every row (its scale blocks unchanged)."""
    data = a.data.clone()
    data[..., column // 2] &= 0xF0 if column % 2 == 0 else 0x0F
    if isinstance(a, fp4ops.NVFP4Tensor):
        return fp4ops.NVFP4Tensor(data, a.scales, a.global_scale)
    return fp4ops.MXFP4Tensor(data, a.scales)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("shape", [(3, 40, 384), (2, 9, 4096 + 128)])
def test_bf16_b_outside_the_shift_range_gives_the_same_bits(shape, fmt, device):
    """A bf16 B value outside [2^-62, 2^57) makes the CUDA kernel (its one-CTA-per-SM build,
    which these short calls get on every GPU) stage that batch unshifted and decode A with its
    bf16 multiply. Put where A's column is zero, it adds nothing, so the other staging must give
    bitwise the same result; B also holds the edges of the range, and the shifted batches (0 and
    2) stay shifted next to the unshifted one. The shifted staging runs only where the launcher
    calls the GPU issue-bound (an H200, not an H100: gemv.cu); elsewhere every batch is staged
    unshifted and this checks the contract and determinism only."""
    a, b = operands(fmt, "bfloat16", shape, device)
    column = shape[-1] - 3
    a = with_zero_a_column(a, column)
    edges = torch.tensor(BF16_SHIFT_RANGE_EDGES, dtype=torch.bfloat16, device=device)
    b[:, 5 : 5 + len(edges)] = edges
    expected = fp4ops.gemv(a, b, out_dtype=torch.float32)
    assert_within_contract(expected.cpu(), a.to("cpu"), b.to("cpu"), torch.float32)
    for outside in BF16_OUTSIDE_SHIFT_RANGE:
        b_outside = b.clone()
        b_outside[1, column] = outside
        y = fp4ops.gemv(a, b_outside, out_dtype=torch.float32)
        assert torch.equal(y.view(torch.int32), expected.view(torch.int32)), outside


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_bf16_b_at_the_shift_range_edges(device, fmt):
    """B made only of the shift range's edges and the values just outside it, A's codes all of
    +-0.5 and +-6 (the smallest and largest products on both sides of each edge)."""
    l, m, k = 2, 16, 512
    magnitudes = torch.tensor([0x1, 0x7, 0x9, 0xF], dtype=torch.uint8)
    codes = reference.pack_e2m1(magnitudes[torch.randint(0, 4, (l, m, k))])
    if fmt == "nvfp4":
        a = fp4ops.NVFP4Tensor(codes, torch.full((l, m, k // 16), 1.0).to(torch.float8_e4m3fn), torch.tensor(1.0))
    else:
        a = fp4ops.MXFP4Tensor(codes, torch.full((l, m, k // 32), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu))
    a = a.to(device)
    for values in (BF16_SHIFT_RANGE_EDGES, BF16_SHIFT_RANGE_EDGES + BF16_OUTSIDE_SHIFT_RANGE):
        pool = torch.tensor(values, dtype=torch.bfloat16)
        b = pool[torch.randint(0, len(values), (l, k))].to(device)
        assert_within_contract(fp4ops.gemv(a, b, out_dtype=torch.float32).cpu(), a.to("cpu"), b.to("cpu"), torch.float32)


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs the CUDA GEMV kernel")
@pytest.mark.parametrize("b_kind", ["fp4", "bfloat16"])
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
# Enough 8-row tiles that every warp group of the tensor-core kernel streams several of them (its
# grid is one resident wave of up to 16 groups per CTA), a tile split over 1, 2 and 8 warps. Checked on a
# sample of rows (every 13th and the last 40, so both ends of every group's share are among them
# for some groups) against the float64 reference on the CPU. (1, 11264, 16384) is long work (over
# 640 segments per SM on a 132-SM GPU), which the H100 runs on the kernel's two-CTA build; the
# others take its one-CTA build there (gemv.cu).
@pytest.mark.parametrize(
    "shape",
    [(2, 9000, 4096), (1, 40000, 1024), (1, 150000, 256), (1, 5000, 16384 + 128), (1, 3000, 32768), (1, 11264, 16384)],
)
def test_many_tiles_per_group(shape, fmt, b_kind):
    a, b = operands(fmt, b_kind, shape, "cuda")
    y = fp4ops.gemv(a, b, out_dtype=torch.float32).cpu()
    m = shape[-2]
    rows = torch.cat([torch.arange(0, m, 13), torch.arange(m - 40, m)]).unique()
    a_rows = a.to("cpu")
    if isinstance(a_rows, fp4ops.NVFP4Tensor):
        a_rows = fp4ops.NVFP4Tensor(a_rows.data[..., rows, :], a_rows.scales[..., rows, :], a_rows.global_scale)
    else:
        a_rows = fp4ops.MXFP4Tensor(a_rows.data[..., rows, :], a_rows.scales[..., rows, :])
    assert_within_contract(y[..., rows], a_rows, b.to("cpu"), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b_kind", ["fp4", "bfloat16"])
@pytest.mark.parametrize("shape", [(4, 300, 4096), (3, 50, 16384 + 128), (2, 9000, 2048)])
def test_batch_invariant(shape, b_kind, device):
    """Batch l of an L-batch call is bitwise what a call with that batch alone gives: the kernel's
    summation order depends on M and K only."""
    a, b = operands("nvfp4", b_kind, shape, device)
    y = fp4ops.gemv(a, b)
    for l in range(shape[0]):
        a_l = fp4ops.NVFP4Tensor(a.data[l : l + 1], a.scales[l : l + 1], a.global_scale)
        if b_kind == "fp4":
            b_l = fp4ops.NVFP4Tensor(b.data[l : l + 1], b.scales[l : l + 1], b.global_scale)
        else:
            b_l = b[l : l + 1]
        assert torch.equal(fp4ops.gemv(a_l, b_l).view(torch.int16), y[l : l + 1].view(torch.int16))


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic(device):
    a, b = operands("nvfp4", "bfloat16", (4, 256, 4096), device)
    first = fp4ops.gemv(a, b)
    for _ in range(5):
        assert torch.equal(fp4ops.gemv(a, b).view(torch.int16), first.view(torch.int16))


@pytest.mark.parametrize("device", DEVICES)
def test_seed_layout_is_a_free_permute(device):
    """The seed problem stores a as [M, K/2, L] viewed from [L, M, K/2] memory (scales
    [M, K/16, L] likewise); permute(2, 0, 1) gives our layout back without a copy."""
    l, m, k = 3, 16, 128
    q = fp4ops.quantize_nvfp4(torch.randn(l, m, k, device=device))
    seed_a, seed_scales = q.data.permute(1, 2, 0), q.scales.permute(1, 2, 0)  # what the seed hands over
    ours = fp4ops.NVFP4Tensor(seed_a.permute(2, 0, 1), seed_scales.permute(2, 0, 1), q.global_scale)
    assert ours.data.data_ptr() == q.data.data_ptr() and ours.data.is_contiguous()
    b = torch.randn(l, k, device=device, dtype=torch.float16)
    assert torch.equal(fp4ops.gemv(ours, b), fp4ops.gemv(q, b))


def test_swizzle_matches_the_spec_formula():
    rows, cols = 200, 9
    scales = torch.randint(1, 255, (rows, cols), dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
    flat = reference.swizzle_scales_128x4(scales).view(torch.uint8)
    assert flat.numel() == 256 * 12
    expected = torch.zeros(256 * 12, dtype=torch.uint8)
    for i in range(rows):
        for j in range(cols):
            offset = ((i // 128) * 3 + j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4
            expected[offset] = scales.view(torch.uint8)[i, j]
    assert torch.equal(flat, expected)  # every padding byte is zero too


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.get_device_capability() < (10, 0),
                    reason="torch._scaled_mm with FP4 needs compute capability >= 10 (Blackwell)")
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_scaled_mm_reference_agrees(fmt):
    a, b = operands(fmt, "fp4", (2, 256, 1024), "cuda")
    assert_within_contract(reference.scaled_mm_gemv(a, b, torch.float32).cpu(), a.to("cpu"), b.to("cpu"), torch.float32)


@pytest.mark.parametrize(
    "call, exception, message",
    [
        (lambda a, b: fp4ops.gemv(a, b[..., :32]), ValueError, "b: expected shape (2, 64)"),
        (lambda a, b: fp4ops.gemv(a, b.float()), TypeError, "b: expected float16 or bfloat16"),
        (lambda a, b: fp4ops.gemv(a, fp4ops.quantize_mxfp4(b.float())), TypeError, "b: expected NVFP4Tensor"),
        (lambda a, b: fp4ops.gemv(a, b, out_dtype=torch.int8), TypeError, "out_dtype: expected"),
        (lambda a, b: fp4ops.gemv(b, b), TypeError, "a: expected an NVFP4Tensor or MXFP4Tensor"),
    ],
)
def test_bad_inputs(call, exception, message):
    a = fp4ops.quantize_nvfp4(torch.randn(2, 8, 64))
    b = torch.randn(2, 64, dtype=torch.bfloat16)
    with pytest.raises(exception) as info:
        call(a, b)
    assert message in str(info.value)


def test_op_checks_name_the_argument():
    a = fp4ops.quantize_nvfp4(torch.randn(2, 8, 64))
    with pytest.raises(RuntimeError, match="b: expected K = 64"):
        torch.ops.fp4ops.gemv_fp4_dense(a.data, a.scales, a.global_scale, torch.randn(2, 32, dtype=torch.half), torch.half)
    with pytest.raises(RuntimeError, match="a_global_scale: expected a tensor for NVFP4"):
        torch.ops.fp4ops.gemv_fp4_dense(a.data, a.scales, None, torch.randn(2, 64, dtype=torch.half), torch.half)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b_kind", ["fp4", "bfloat16"])
@pytest.mark.parametrize("k", [16, 48, 4096 + 16])
def test_nvfp4_k_not_a_multiple_of_32(device, b_kind, k):
    a, b = operands("nvfp4", b_kind, (2, 33, k), device)
    assert_within_contract(fp4ops.gemv(a, b, out_dtype=torch.float32).cpu(), a.to("cpu"), b.to("cpu"), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_misaligned_and_strided_operands(device):
    a, b = operands("nvfp4", "bfloat16", (2, 16, 256), device)
    shifted = torch.empty(a.data.numel() + 1, dtype=torch.uint8, device=device)[1:].view_as(a.data).copy_(a.data)
    a_shifted = fp4ops.NVFP4Tensor(shifted, a.scales, a.global_scale)
    b_strided = torch.stack([b, b], dim=-1)[..., 0]  # non-contiguous view of the same values
    assert torch.equal(fp4ops.gemv(a_shifted, b_strided), fp4ops.gemv(a, b))


@requires_caching_allocator
@pytest.mark.skipif("cuda" not in DEVICES, reason="needs the CUDA GEMV kernel")
def test_cuda_graph_capture_and_replay():
    a, b = operands("mxfp4", "float16", (4, 64, 1024), "cuda")
    fp4ops.gemv(a, b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = fp4ops.gemv(a, b)
    b.copy_(torch.randn_like(b))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, fp4ops.gemv(a, b))
