"""`fp4ops.gemv`: batched FP4 matrix-vector products (SPEC 5), a checked wrapper over the ops."""

from __future__ import annotations

import torch

from ._checks import check_no_grad, check_quantized, check_same_device, check_tensor, decode_global_scale
from .tensor import MXFP4Tensor, NVFP4Tensor

GEMV_OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def gemv(a, b, *, out_dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """y[l, m] = sum_k A[l, m, k] * B[l, k] for A an NVFP4Tensor/MXFP4Tensor [L, M, K] (or [M, K])
    and B the same format [L, K] (or [K]) or a dense float16/bfloat16 tensor of that shape.
    NVFP4 global scales are applied. Returns [L, M] (or [M]) in out_dtype (fp16, bf16 or fp32).

    The seed problem's layout (a as [M, K/2, L] viewed from [L, M, K/2] memory, scales
    [M, K/16, L]) is the same memory: pass `a.permute(2, 0, 1)` (free, no copy) as data/scales.

    Swizzled scales (SPEC 4) are accepted: they are unswizzled first (one small extra kernel over
    the scales, 1/8 of A's bytes for NVFP4); the GEMV kernels read the linear layout."""
    if not isinstance(a, (NVFP4Tensor, MXFP4Tensor)):
        raise TypeError(f"a: expected an NVFP4Tensor or MXFP4Tensor, got {type(a).__name__}")
    if out_dtype not in GEMV_OUT_DTYPES:
        raise TypeError(f"out_dtype: expected torch.float16, torch.bfloat16 or torch.float32, got {out_dtype}")
    check_quantized(a, "a")
    a = a.with_scale_layout("linear")
    if a.data.dim() not in (2, 3):
        raise ValueError(f"a: expected shape [M, K] or [L, M, K], got {tuple(a.shape)}")
    batched = a.data.dim() == 3
    k = a.shape[-1]
    a_data = a.data if batched else a.data.unsqueeze(0)
    a_scales = a.scales if batched else a.scales.unsqueeze(0)
    a_global = decode_global_scale(a, "a.global_scale") if isinstance(a, NVFP4Tensor) else None
    check_no_grad(a_global, "a.global_scale", "gemv")
    expected_b = (a_data.shape[0], k) if batched else (k,)
    if isinstance(b, (NVFP4Tensor, MXFP4Tensor)):
        if type(b) is not type(a):
            raise TypeError(f"b: expected {type(a).__name__} (the format of a) or a dense tensor, got {type(b).__name__}")
        check_quantized(b, "b")
        b = b.with_scale_layout("linear")
        if tuple(b.shape) != expected_b:
            raise ValueError(f"b: expected shape {expected_b} for a of shape {tuple(a.shape)}, got {tuple(b.shape)}")
        check_same_device(b, a)
        b_data = b.data if batched else b.data.unsqueeze(0)
        b_scales = b.scales if batched else b.scales.unsqueeze(0)
        b_global = decode_global_scale(b, "b.global_scale") if isinstance(b, NVFP4Tensor) else None
        check_no_grad(b_global, "b.global_scale", "gemv")
        y = torch.ops.fp4ops.gemv_fp4_fp4(a_data, a_scales, a_global, b_data, b_scales, b_global, out_dtype)
    else:
        check_tensor(b, "b")
        if b.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"b: expected float16 or bfloat16 (or an FP4 tensor), got {b.dtype}")
        if tuple(b.shape) != expected_b:
            raise ValueError(f"b: expected shape {expected_b} for a of shape {tuple(a.shape)}, got {tuple(b.shape)}")
        check_same_device(b, a)
        check_no_grad(b, "b", "gemv")
        y = torch.ops.fp4ops.gemv_fp4_dense(a_data, a_scales, a_global, b if batched else b.unsqueeze(0), out_dtype)
    return y if batched else y.squeeze(0)
