"""The CUDA E2M1 cast kernels against the CPU kernels, bit for bit (GPU only)."""

from __future__ import annotations

import pytest
import torch
from conftest import FLOAT_DTYPES, assert_exact, assert_same_bytes, requires_cuda

import fp4ops

pytestmark = requires_cuda


def test_every_fp32_bit_pattern_matches_cpu():
    """All 2^32 fp32 inputs, in chunks of 2^28 generated on the GPU."""
    chunk = 1 << 28
    checked = 0
    for start in range(-(2**31), 2**31, chunk):
        x = torch.arange(start, start + chunk, dtype=torch.int32, device="cuda").view(torch.float32)
        gpu = fp4ops.cast_to_e2m1(x).cpu()
        cpu = fp4ops.cast_to_e2m1(x.cpu())
        assert_same_bytes(gpu, cpu, f"fp32 patterns from {start:#x}")
        checked += x.numel()
    assert checked == 2**32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_16bit_pattern_matches_cpu(dtype):
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    assert_same_bytes(fp4ops.cast_to_e2m1(x.cuda()), fp4ops.cast_to_e2m1(x), str(dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_decode_every_byte_matches_cpu(dtype):
    data = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(3)
    assert_exact(fp4ops.cast_from_e2m1(data.cuda(), dtype), fp4ops.cast_from_e2m1(data, dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_random_shapes_views_and_offsets(dtype):
    base = (torch.randn(33, 1030) * 4).to(dtype)
    views = {
        "contiguous": base[:, :1024],
        "odd_storage_offset": base.flatten()[1:1 + 33 * 1024].reshape(33, 1024),
        "transposed": base[:32, :64].t(),
        "strided_rows": base[::3, 2:66],
        "ragged_tail": base.flatten()[: 33 * 1030 - 6],
        "empty": base[:0],
    }
    for name, v in views.items():
        assert_same_bytes(fp4ops.cast_to_e2m1(v.cuda()), fp4ops.cast_to_e2m1(v), name)
        packed = fp4ops.cast_to_e2m1(v)
        assert_exact(fp4ops.cast_from_e2m1(packed.cuda(), dtype), fp4ops.cast_from_e2m1(packed, dtype))
    odd = torch.randint(0, 256, (4097,), dtype=torch.int32).to(torch.uint8)
    assert_exact(fp4ops.cast_from_e2m1(odd[1:].cuda(), dtype), fp4ops.cast_from_e2m1(odd[1:], dtype))


def test_large_tensor_uses_every_grid_stride():
    x = torch.randn(1 << 26, device="cuda", dtype=torch.bfloat16) * 3
    assert_same_bytes(fp4ops.cast_to_e2m1(x), fp4ops.cast_to_e2m1(x.cpu()), "2^26 bf16")


def test_runs_on_the_current_stream():
    x = torch.randn(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        packed = fp4ops.cast_to_e2m1(x)
        values = fp4ops.cast_from_e2m1(packed, torch.float32)
    torch.cuda.current_stream().wait_stream(side)
    assert_exact(values.cpu(), fp4ops.cast_from_e2m1(fp4ops.cast_to_e2m1(x.cpu()), torch.float32))
