"""The swizzled (128x4 atom) scale layout of SPEC 4, on every device: the layout itself against
SPEC's formula, swizzle/unswizzle ops, quantizers writing it directly, dequantize and GEMV
reading it, and torch._scaled_mm consuming it where FP4 _scaled_mm runs. All exact."""

from __future__ import annotations

import pytest
import torch
from conftest import FLOAT_DTYPES, HAS_CUDA, assert_exact, assert_same_bytes, requires_cuda

import fp4ops
from fp4ops import reference

DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
# (logical shape of x) with rows around the 128-row atom and scale columns around the 4-column
# one (K / 16 = 3, 4, 5 and K / 32 = 1, 2, 3).
# (128, 256) and (2, 256, 128) have no padding: the CUDA quantizers then walk the blocks in
# swizzled-memory order.
SHAPES = [(64,), (96,), (1, 48), (127, 64), (128, 160), (129, 96), (300, 32 * 5), (2, 3, 64), (3, 130, 96), (128, 256),
          (2, 256, 128)]
SCALE_DTYPES = [torch.float8_e4m3fn, torch.float8_e8m0fnu]


def spec_swizzle(scales: torch.Tensor) -> torch.Tensor:
    """SPEC 4's byte-offset formula applied element by element (slow, obviously right)."""
    raw = scales.view(torch.uint8).cpu()
    lead = tuple(raw.shape[:-2]) if raw.dim() >= 2 else ()
    rows, cols = (raw.shape[-2], raw.shape[-1]) if raw.dim() >= 2 else (1, raw.shape[-1])
    count = 1
    for n in lead:
        count *= n
    matrices = raw.reshape(count, rows, cols)
    col_atoms, row_atoms = -(-cols // 4), -(-rows // 128)
    flat = torch.zeros(count, row_atoms * 128 * col_atoms * 4, dtype=torch.uint8)
    i = torch.arange(rows).reshape(-1, 1)
    j = torch.arange(cols).reshape(1, -1)
    offset = ((i // 128) * col_atoms + j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4
    for m in range(count):
        flat[m, offset.flatten()] = matrices[m].flatten()
    return flat.reshape(*lead, row_atoms * 128, col_atoms * 4).view(scales.dtype)


def random_scales(shape, dtype, device="cpu") -> torch.Tensor:
    # Never 0: a zero scale would hide a byte that landed in padding.
    return torch.randint(1, 0x7F, shape, dtype=torch.uint8, device=device).view(dtype)


@pytest.mark.parametrize("shape", [(5,), (1, 4), (3, 7), (128, 4), (129, 9), (2, 200, 6), (2, 2, 33, 1), (0, 3)])
def test_reference_layout_is_spec_formula(shape):
    scales = random_scales(shape, torch.float8_e4m3fn)
    swizzled = reference.swizzle_scales(scales)
    assert_same_bytes(swizzled, spec_swizzle(scales), "swizzled")
    rows = shape[-2] if len(shape) >= 2 else 1
    back = reference.unswizzle_scales(swizzled, rows, shape[-1])
    assert_same_bytes(back.reshape(shape), scales, "unswizzled")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", SCALE_DTYPES)
@pytest.mark.parametrize("shape", [(5,), (3, 7), (128, 4), (129, 9), (2, 200, 6), (0, 3), (2, 0, 5)])
def test_swizzle_ops_match_reference(shape, dtype, device):
    scales = random_scales(shape, dtype, device)
    swizzled = fp4ops.swizzle_scales(scales)
    assert swizzled.dtype == dtype and swizzled.device == scales.device
    assert_same_bytes(swizzled, reference.swizzle_scales(scales.cpu()), "swizzled")
    rows = shape[-2] if len(shape) >= 2 else 1
    back = fp4ops.unswizzle_scales(swizzled, rows, shape[-1])
    assert_same_bytes(back.reshape(shape), scales, "unswizzled")


def quantize(x: torch.Tensor, fmt: str, scale_layout: str):
    if fmt == "nvfp4":
        return fp4ops.quantize_nvfp4(x, scale_layout=scale_layout)
    if fmt == "nvfp4_given_scale":
        return fp4ops.quantize_nvfp4(x, 0.0123, scale_layout=scale_layout)
    return fp4ops.quantize_mxfp4(x, scale_rule=fmt.removeprefix("mxfp4_"), scale_layout=scale_layout)


FORMATS = ["nvfp4", "nvfp4_given_scale", "mxfp4_floor", "mxfp4_rceil"]


def padding_mask(logical_shape, block: int) -> torch.Tensor:
    """True at every byte of the swizzled scales that holds no real scale."""
    cols = logical_shape[-1] // block
    marker = torch.ones(*logical_shape[:-1], cols, dtype=torch.uint8).view(torch.float8_e4m3fn)
    return reference.swizzle_scales(marker).view(torch.uint8) == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[-1] % 32 == 0], ids=str)
def test_quantizers_write_swizzled_scales(shape, fmt, dtype, device):
    x = (torch.randn(shape) * torch.exp2(torch.randint(-10, 10, shape[:-1] + (1,)).float())).to(dtype).to(device)
    linear = quantize(x, fmt, "linear")
    swizzled = quantize(x, fmt, "swizzled")
    assert swizzled.scale_layout == "swizzled"
    assert_same_bytes(swizzled.data, linear.data, "data")
    assert_same_bytes(swizzled.scales, reference.swizzle_scales(linear.scales.cpu()), "scales")
    padding = padding_mask(shape, swizzled.block)
    assert (swizzled.scales.view(torch.uint8).cpu()[padding] == 0).all(), "padding bytes must be 0"
    if fmt.startswith("nvfp4"):
        assert_exact(swizzled.global_scale, linear.global_scale)
    for out_dtype in FLOAT_DTYPES:
        assert_exact(swizzled.dequantize(out_dtype), linear.dequantize(out_dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("numel", [1 << 16, (1 << 16) + 64 * 3, 1 << 20])
def test_swizzled_across_the_single_launch_threshold(numel, device):
    """Dynamic NVFP4 runs as one launch up to 2^16 elements on CUDA and as two above: both write
    the swizzled layout."""
    x = torch.randn(numel // 64, 64, dtype=torch.bfloat16, device=device)
    linear = fp4ops.quantize_nvfp4(x)
    swizzled = fp4ops.quantize_nvfp4(x, scale_layout="swizzled")
    assert_same_bytes(swizzled.scales, reference.swizzle_scales(linear.scales.cpu()), "scales")


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fmt", ["nvfp4_given_scale", "mxfp4_floor"])
@pytest.mark.parametrize("shape", [(32768, 512), (2, 16384, 512)], ids=str)
def test_swizzled_over_many_grid_strides(shape, fmt, dtype):
    """Large enough that each thread of the CUDA quantizer takes several grid-stride steps, which
    (no padding here) advance its block index by whole 128-row atom bands."""
    x = torch.randn(shape, device="cuda", dtype=dtype)
    linear = quantize(x, fmt, "linear")
    swizzled = quantize(x, fmt, "swizzled")
    assert_same_bytes(swizzled.data, linear.data, "data")
    assert_same_bytes(swizzled.scales, reference.swizzle_scales(linear.scales.cpu()), "scales")


@pytest.mark.parametrize("device", DEVICES)
def test_padding_is_zero_over_dirty_memory(device):
    """Fill the allocator's blocks with 0xFF first: padding must still come out 0, not stale."""
    for _ in range(3):
        junk = torch.full((130 * 128,), 0xFF, dtype=torch.uint8, device=device)
        del junk
    x = torch.randn(130, 48 * 16, device=device)
    q = fp4ops.quantize_nvfp4(x, scale_layout="swizzled")
    assert (q.scales.view(torch.uint8).cpu()[padding_mask(x.shape, 16)] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4_floor"])
def test_with_scale_layout_round_trip(fmt, device):
    for shape in ((96,), (129, 64), (2, 3, 64)):
        q = quantize(torch.randn(shape, device=device), fmt, "linear")
        s = q.with_scale_layout("swizzled")
        assert s.scale_layout == "swizzled" and s.data is q.data
        back = s.with_scale_layout("linear")
        assert back.scales.shape == q.scales.shape
        assert_same_bytes(back.scales, q.scales, "scales")
        assert q.with_scale_layout("linear") is q


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4_rceil"])
def test_gemv_accepts_swizzled_scales(fmt, device):
    a_x = torch.randn(3, 200, 256, device=device)
    b_x = torch.randn(3, 256, device=device)
    a_lin, b_lin = quantize(a_x, fmt, "linear"), quantize(b_x, fmt, "linear")
    a_swz, b_swz = quantize(a_x, fmt, "swizzled"), quantize(b_x, fmt, "swizzled")
    assert_exact(fp4ops.gemv(a_swz, b_swz), fp4ops.gemv(a_lin, b_lin))
    b_dense = b_x.to(torch.bfloat16)
    assert_exact(fp4ops.gemv(a_swz, b_dense, out_dtype=torch.float32), fp4ops.gemv(a_lin, b_dense, out_dtype=torch.float32))


def test_swizzled_errors_name_the_argument():
    q = fp4ops.quantize_nvfp4(torch.randn(130, 64), scale_layout="swizzled")
    wrong = fp4ops.NVFP4Tensor(q.data, q.scales[:128], q.global_scale, "swizzled")
    with pytest.raises(ValueError, match="scales: expected shape"):
        fp4ops.dequantize(wrong)
    with pytest.raises(ValueError, match="scale_layout: expected 'linear' or 'swizzled'"):
        fp4ops.quantize_mxfp4(torch.randn(4, 64), scale_layout="blocked")
    with pytest.raises(ValueError, match="scales: expected the swizzled shape"):
        fp4ops.unswizzle_scales(q.scales, 257, 4)
    with pytest.raises(TypeError, match="scales: expected float8_e4m3fn"):
        fp4ops.swizzle_scales(q.scales.view(torch.uint8))
    with pytest.raises(RuntimeError, match="scales: expected shape"):
        torch.ops.fp4ops.dequantize_nvfp4(q.data, q.scales, q.global_scale, torch.float32, "linear")


requires_fp4_scaled_mm = pytest.mark.skipif(
    not (HAS_CUDA and torch.cuda.get_device_capability() >= (10, 0)),
    reason="torch._scaled_mm with FP4 needs compute capability >= 10 (Blackwell)")


@requires_fp4_scaled_mm
def test_scaled_mm_consumes_our_swizzled_scales():
    """An NVFP4 GEMM through torch._scaled_mm with the scales exactly as our quantizer wrote
    them, against the fp64 product of the dequantized operands."""
    a = fp4ops.quantize_nvfp4(torch.randn(256, 512, device="cuda"), scale_layout="swizzled")
    w = fp4ops.quantize_nvfp4(torch.randn(192, 512, device="cuda"), scale_layout="swizzled")
    y = torch._scaled_mm(a.float4_data, w.float4_data.t(), a.scales.reshape(-1), w.scales.reshape(-1),
                         out_dtype=torch.float32) * a.global_scale * w.global_scale
    ref = a.dequantize(torch.float32).double() @ w.dequantize(torch.float32).double().t()
    bound = 2.0**-10 * (a.dequantize(torch.float32).double().abs() @ w.dequantize(torch.float32).double().abs().t())
    assert ((y.double() - ref).abs() <= bound + 1e-30).all()
