"""The Python API under torch.compile(fullgraph=True): no graph breaks, same bits as eager."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_exact, assert_same_bytes

import fp4ops


def nvfp4_round_trip(x):
    q = fp4ops.quantize_nvfp4(x)
    return q.data, q.scales, q.dequantize(torch.float32)


def nvfp4_given_scale_round_trip(x):
    q = fp4ops.quantize_nvfp4(x, 0.125)
    return q.data, q.scales, fp4ops.dequantize(q, torch.bfloat16)


def mxfp4_round_trip(x):
    q = fp4ops.quantize_mxfp4(x, scale_rule="rceil")
    return q.data, q.scales, q.dequantize(torch.float16)


def casts_and_amax(x):
    return fp4ops.cast_from_e2m1(fp4ops.cast_to_e2m1(x), torch.float32), fp4ops.amax(x)


def quantize_then_gemv(x):
    q = fp4ops.quantize_mxfp4(x)
    return (fp4ops.gemv(q, x[:, 0, :], out_dtype=torch.float32),)


@pytest.mark.parametrize("fn", [nvfp4_round_trip, nvfp4_given_scale_round_trip, mxfp4_round_trip, casts_and_amax,
                                quantize_then_gemv])
def test_fullgraph_compile_matches_eager(fn):
    torch._dynamo.reset()
    x = torch.randn(4, 8, 64, dtype=torch.bfloat16) * 5
    compiled = torch.compile(fn, fullgraph=True, backend="inductor")
    for got, want in zip(compiled(x), fn(x)):
        if got.dtype in (torch.uint8, torch.float8_e4m3fn, torch.float8_e8m0fnu):
            assert_same_bytes(got, want, fn.__name__)
        else:
            assert_exact(got, want)


def test_compiled_function_can_return_the_tensor_class():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: fp4ops.quantize_nvfp4(x * 2), fullgraph=True)
    x = torch.randn(2, 32)
    q = compiled(x)
    assert isinstance(q, fp4ops.NVFP4Tensor)
    assert_same_bytes(q.data, fp4ops.quantize_nvfp4(x * 2).data, "data")
