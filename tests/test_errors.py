"""Bad inputs raise clear errors that name the argument, expected and actual value."""

from __future__ import annotations

import pytest
import torch

import fp4ops

x32 = torch.randn(2, 32)
q_nv = fp4ops.quantize_nvfp4(x32)
q_mx = fp4ops.quantize_mxfp4(x32)

PYTHON_CASES = [
    # (call, exception, message fragment)
    (lambda: fp4ops.quantize_nvfp4(x32.to(torch.int32)), TypeError, "x: expected float32, float16 or bfloat16, got torch.int32"),
    (lambda: fp4ops.quantize_nvfp4([1.0] * 16), TypeError, "x: expected a torch.Tensor, got list"),
    (lambda: fp4ops.quantize_nvfp4(torch.randn(2, 24)), ValueError, "x: expected the last dimension to be a multiple of 16"),
    (lambda: fp4ops.quantize_nvfp4(torch.tensor(1.0)), ValueError, "x: expected at least 1 dimension"),
    (lambda: fp4ops.quantize_nvfp4(x32, 0.0), ValueError, "global_scale: expected a finite value > 0"),
    (lambda: fp4ops.quantize_nvfp4(x32, -2.0), ValueError, "global_scale: expected a finite value > 0"),
    (lambda: fp4ops.quantize_nvfp4(x32, float("nan")), ValueError, "global_scale: expected a finite value > 0"),
    (lambda: fp4ops.quantize_nvfp4(x32, float("inf")), ValueError, "global_scale: expected a finite value > 0"),
    (lambda: fp4ops.quantize_nvfp4(x32, 1e-60), ValueError, "global_scale: expected a finite value > 0"),
    (lambda: fp4ops.quantize_nvfp4(x32, "1.0"), TypeError, "global_scale: expected None, a float or a float32 tensor, got str"),
    (lambda: fp4ops.quantize_nvfp4(x32, torch.tensor(1.0, dtype=torch.float64)), TypeError, "global_scale: expected a float32 tensor, got torch.float64"),
    (lambda: fp4ops.quantize_nvfp4(x32, torch.ones(2)), ValueError, "global_scale: expected one element, got shape (2,)"),
    (lambda: fp4ops.quantize_nvfp4(x32, scale_layout="tiled"), ValueError, "scale_layout: expected 'linear'"),
    (lambda: fp4ops.dequantize(fp4ops.NVFP4Tensor(q_nv.data, torch.zeros(2, 4, dtype=torch.float8_e4m3fn), q_nv.global_scale, "swizzled")),
     ValueError, "scales: expected shape (128, 4) (swizzled layout) for data of shape (2, 16), got (2, 4)"),
    (lambda: fp4ops.gemv(fp4ops.NVFP4Tensor(q_nv.data, q_nv.scales, q_nv.global_scale, "swizzled"), torch.randn(32, dtype=torch.half)),
     ValueError, "scales: expected the swizzled shape (128, 4) for rows = 2, cols = 2, got (2, 2)"),
    (lambda: fp4ops.quantize_mxfp4(torch.randn(2, 16)), ValueError, "x: expected the last dimension to be a multiple of 32"),
    (lambda: fp4ops.quantize_mxfp4(x32, scale_rule="round"), ValueError, "scale_rule: expected 'floor' or 'rceil', got 'round'"),
    (lambda: fp4ops.dequantize(x32), TypeError, "q: expected an NVFP4Tensor or MXFP4Tensor, got Tensor"),
    (lambda: fp4ops.dequantize(q_nv, torch.int8), TypeError, "dtype: expected torch.float32, torch.float16 or torch.bfloat16, got torch.int8"),
    (lambda: fp4ops.dequantize(fp4ops.NVFP4Tensor(q_nv.data, q_mx.scales, q_nv.global_scale)), TypeError, "scales: expected torch.float8_e4m3fn, got torch.float8_e8m0fnu"),
    (lambda: fp4ops.dequantize(fp4ops.MXFP4Tensor(q_mx.data, q_nv.scales)), TypeError, "scales: expected torch.float8_e8m0fnu, got torch.float8_e4m3fn"),
    (lambda: fp4ops.dequantize(fp4ops.NVFP4Tensor(q_nv.data, q_nv.scales[:, :1], q_nv.global_scale)), ValueError, "scales: expected shape (2, 2) (linear layout) for data of shape (2, 16), got (2, 1)"),
    (lambda: fp4ops.dequantize(fp4ops.NVFP4Tensor(q_nv.data.float(), q_nv.scales, q_nv.global_scale)), TypeError, "data: expected uint8 (packed E2M1), got torch.float32"),
    (lambda: fp4ops.dequantize(fp4ops.NVFP4Tensor(q_nv.data, q_nv.scales, None)), TypeError, "global_scale: expected a float32 tensor, got None"),
    (lambda: fp4ops.dequantize(fp4ops.MXFP4Tensor(q_nv.data[:, :8], q_mx.scales)), ValueError, "data: expected the last dimension to be a multiple of 16"),
    (lambda: fp4ops.cast_to_e2m1(torch.randn(3)), ValueError, "x: expected the last dimension to be a multiple of 2"),
    (lambda: fp4ops.cast_from_e2m1(torch.zeros(4, dtype=torch.int8)), TypeError, "data: expected uint8 or torch.float4_e2m1fn_x2"),
    (lambda: fp4ops.cast_from_e2m1(torch.zeros(4, dtype=torch.uint8), torch.float64), TypeError, "dtype: expected"),
    (lambda: fp4ops.amax(torch.zeros(3, dtype=torch.int64)), TypeError, "x: expected float32, float16 or bfloat16, got torch.int64"),
    (lambda: fp4ops.amax(x32.clone().requires_grad_()), RuntimeError, "x: requires grad, but fp4ops.amax has no backward"),
    (lambda: fp4ops.gemv(q_nv, torch.randn(32, dtype=torch.half, requires_grad=True)), RuntimeError, "b: requires grad, but fp4ops.gemv has no backward"),
    (lambda: fp4ops.gemv(fp4ops.NVFP4Tensor(q_nv.data, q_nv.scales, torch.tensor(1.0, requires_grad=True)), torch.randn(32, dtype=torch.half)),
     RuntimeError, "a.global_scale: requires grad"),
]


def test_quantizing_a_tensor_that_requires_grad():
    """A weight (requires_grad) quantizes; nothing returned requires grad, and under no_grad the
    float ops accept it."""
    w = torch.nn.Parameter(torch.randn(4, 32))
    q = fp4ops.quantize_nvfp4(w)
    assert not any(t.requires_grad for t in (q.data, q.scales, q.global_scale))
    assert not fp4ops.quantize_mxfp4(w).scales.requires_grad
    with torch.no_grad():
        assert fp4ops.amax(w) == w.abs().max()
        assert fp4ops.gemv(q, w[0].half()).shape == (4,)


@pytest.mark.parametrize("case", range(len(PYTHON_CASES)))
def test_python_api_errors(case):
    call, exception, message = PYTHON_CASES[case]
    with pytest.raises(exception) as info:
        call()
    assert message in str(info.value)


ops = torch.ops.fp4ops
e4m3 = torch.zeros(2, 2, dtype=torch.float8_e4m3fn)
OP_CASES = [
    # The ops check again (they are public too): RuntimeError naming the argument.
    (lambda: ops.amax(x32.int()), "x: expected float32, float16 or bfloat16, got Int"),
    (lambda: ops.quantize_nvfp4(torch.randn(2, 24), None), "x: expected the last dimension to be a multiple of 16, got 24"),
    (lambda: ops.quantize_nvfp4(x32, torch.ones(2)), "global_scale: expected one element"),
    (lambda: ops.quantize_nvfp4(x32, torch.ones((), dtype=torch.float16)), "global_scale: expected float32, got Half"),
    (lambda: ops.quantize_mxfp4(x32, "nearest"), 'scale_rule: expected "floor" or "rceil", got "nearest"'),
    (lambda: ops.dequantize_nvfp4(q_nv.data, e4m3[:, :1], q_nv.global_scale, torch.float32), "scales: expected shape [2, 2]"),
    (lambda: ops.dequantize_nvfp4(q_nv.data, q_nv.scales, q_nv.global_scale, torch.int32), "dtype: expected float32, float16 or bfloat16, got Int"),
    (lambda: ops.dequantize_mxfp4(q_mx.data.float(), q_mx.scales, torch.float32), "data: expected uint8 (packed E2M1), got Float"),
    (lambda: ops.dequantize_mxfp4(q_mx.data, q_nv.scales, torch.float32), "scales: expected Float8_e8m0fnu, got Float8_e4m3fn"),
    (lambda: ops.dequantize_mxfp4(q_nv.data[:, :8], q_mx.scales, torch.float32), "K a multiple of 32"),
    (lambda: ops.cast_to_e2m1(torch.randn(5)), "x: expected the last dimension to be a multiple of 2, got 5"),
]


@pytest.mark.parametrize("case", range(len(OP_CASES)))
def test_op_errors(case):
    call, message = OP_CASES[case]
    with pytest.raises(RuntimeError) as info:
        call()
    assert message in str(info.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_mixed_devices():
    with pytest.raises(ValueError, match="global_scale: expected a tensor on cuda"):
        fp4ops.quantize_nvfp4(x32.cuda(), torch.tensor(1.0))
    with pytest.raises(ValueError, match="scales: expected a tensor on cuda"):
        fp4ops.dequantize(fp4ops.MXFP4Tensor(q_mx.data.cuda(), q_mx.scales))
