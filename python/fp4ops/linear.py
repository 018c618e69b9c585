"""`fp4ops.linear`: y = x W^T (+ bias) with FP4 weights, a checked wrapper over the op."""

from __future__ import annotations

import math

import torch

from ._checks import check_no_grad, check_quantized, check_same_device, check_tensor, decode_global_scale
from ._formats import FLOAT_DTYPES
from .tensor import MXFP4Tensor, NVFP4Tensor

LINEAR_OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DENSE_X_DTYPES = (torch.float16, torch.bfloat16)


def _fp4_x(x, w, k: int):
    """An FP4 x of w's format [..., K] as the op takes it: (data [M, K/2], linear scales
    [M, K/block], global scale or None) and its leading shape."""
    if type(x) is not type(w):
        raise TypeError(f"x: expected {type(w).__name__} (the format of w) or a float16/bfloat16 tensor, "
                        f"got {type(x).__name__}")
    check_quantized(x, "x")
    lead = x.data.shape[:-1]  # x.shape[:-1], without building x.shape
    if x.data.shape[-1] * 2 != k:
        raise ValueError(f"x: expected the last dimension to be {k} (K of w), got {x.shape[-1]}")
    check_same_device(x.data, w.data, "x", "w")
    x = x.with_scale_layout("linear")
    x_global = decode_global_scale(x, "x.global_scale") if isinstance(x, NVFP4Tensor) else None
    check_no_grad(x_global, "x.global_scale", "linear")
    if len(lead) == 1:  # [M, K/2] and [M, K/block] already: no view ops to pay for
        return (x.data, x.scales, x_global), lead
    rows = math.prod(lead)
    return (x.data.reshape(rows, k // 2), x.scales.reshape(rows, k // x.block), x_global), lead


def _dense_x(x, w, k: int):
    check_tensor(x, "x")
    if x.dtype not in DENSE_X_DTYPES:
        raise TypeError(f"x: expected float16 or bfloat16 (or an FP4 tensor of w's format), got {x.dtype}")
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dimension, got a 0-dim tensor")
    if x.shape[-1] != k:
        raise ValueError(f"x: expected the last dimension to be {k} (K of w), got {x.shape[-1]}")
    check_same_device(x, w.data, "x", "w")
    check_no_grad(x, "x", "linear")
    return (as_rows(x, k), None, None), x.shape[:-1]


def as_rows(x: torch.Tensor, k: int) -> torch.Tensor:
    """A dense x [..., K] as the op's [M, K]: x itself where it is 2-D already (a reshape is a
    dispatched view op, a microsecond of host time on every call of a decode step)."""
    return x if x.dim() == 2 else x.reshape(math.prod(x.shape[:-1]), k)


def with_leading_dims(y: torch.Tensor, lead: torch.Size, n: int) -> torch.Tensor:
    """The op's [M, N] output as [..., N] for x's leading dimensions `lead` (y itself for one)."""
    return y if len(lead) == 1 else y.reshape(*lead, n)


def _check_bias(bias, w, n: int) -> None:
    if bias is None:
        return
    check_tensor(bias, "bias")
    if bias.dtype not in FLOAT_DTYPES:
        raise TypeError(f"bias: expected float32, float16 or bfloat16, got {bias.dtype}")
    if tuple(bias.shape) != (n,):
        raise ValueError(f"bias: expected shape ({n},) (N of w), got {tuple(bias.shape)}")
    check_same_device(bias, w.data, "bias", "w")
    check_no_grad(bias, "bias", "linear")


def linear(x, w, bias=None, *, out_dtype: torch.dtype | None = None, batch_invariant: bool = False) -> torch.Tensor:
    """y = x W^T (+ bias), torch.nn.functional.linear's convention, with W an NVFP4Tensor or
    MXFP4Tensor [N, K] (linear or swizzled scales; swizzled ones are unswizzled first, one small
    kernel over the scales) and x either a float16/bfloat16 tensor [..., K] (any leading
    dimensions, any number of rows including none, any strides) or an FP4 tensor of W's format
    [..., K] (W4A4). bias: None or [N] (float16, bfloat16 or float32). Returns [..., N] in
    out_dtype: x's dtype for a dense x, bfloat16 for an FP4 x, unless given (float16, bfloat16
    or float32). Within SPEC 5's bound of the float64 product of the dequantized operands (plus
    bias), deterministic.

    On CUDA the op picks its kernel from the row count itself (no branch here, so one compiled
    graph serves every row count): for K a multiple of 128, up to 64 rows (128 on Hopper's
    warpgroup MMA for most weights, e.g. 4096 x 4096, 14336 x 4096, 6144 x 4096) run the
    tensor-core kernel family, whose result for each row does not depend on the
    other rows; more rows dequantize W for a cuBLAS matmul unless batch_invariant=True, which keeps
    every row count on the kernel family (in row chunks) so that each row's result never depends on
    the batch. Other K always take the cuBLAS path. The CPU kernel computes every output alone and
    ignores batch_invariant."""
    if not isinstance(w, (NVFP4Tensor, MXFP4Tensor)):
        raise TypeError(f"w: expected an NVFP4Tensor or MXFP4Tensor, got {type(w).__name__}")
    check_quantized(w, "w")
    if w.data.dim() != 2:
        raise ValueError(f"w: expected shape [N, K], got {tuple(w.shape)}")
    n, k = w.data.shape[0], w.data.shape[1] * 2  # w.shape, without building a torch.Size
    w = w.with_scale_layout("linear")
    w_global = decode_global_scale(w, "w.global_scale") if isinstance(w, NVFP4Tensor) else None
    check_no_grad(w_global, "w.global_scale", "linear")
    if isinstance(x, (NVFP4Tensor, MXFP4Tensor)):
        (x_data, x_scales, x_global), lead = _fp4_x(x, w, k)
        default_dtype = torch.bfloat16
    else:
        (x_data, x_scales, x_global), lead = _dense_x(x, w, k)
        default_dtype = x.dtype
    out_dtype = default_dtype if out_dtype is None else out_dtype
    if out_dtype not in LINEAR_OUT_DTYPES:
        raise TypeError(f"out_dtype: expected torch.float16, torch.bfloat16 or torch.float32, got {out_dtype}")
    _check_bias(bias, w, n)
    if not isinstance(batch_invariant, bool):
        raise TypeError(f"batch_invariant: expected a bool, got {type(batch_invariant).__name__}")
    y = torch.ops.fp4ops.linear(x_data, x_scales, x_global, w.data, w.scales, w_global, bias, out_dtype,
                                batch_invariant)
    return with_leading_dims(y, lead, n)
