"""Fused producers (SPEC 7): RMSNorm (with an optional residual add) and SiLU-and-mul, straight
into NVFP4 or MXFP4, without writing the bf16 activation in between.

Each computes an fp32 intermediate in SPEC 7's order and quantizes it; the result is, bit for
bit, `quantize_nvfp4` / `quantize_mxfp4` of that intermediate.
"""

from __future__ import annotations

import math
import numbers

import torch

from ._checks import (check_float_input, check_format, check_format_scale_rule, check_no_grad, check_same_device,
                      check_scale_layout, check_tensor, global_scale_tensor, without_grad)
from ._formats import FORMATS
from .tensor import MXFP4Tensor, NVFP4Tensor


def _check_target(format, global_scale, scale_rule, scale_layout, x):
    """(block, the global-scale tensor or None) for `format`; the options checked as the op does."""
    check_format(format)
    check_format_scale_rule(format, scale_rule)
    check_scale_layout(scale_layout)
    if format == "mxfp4" and global_scale is not None:
        raise ValueError("global_scale: MXFP4 has no global scale; pass None")
    return FORMATS[format][0], global_scale_tensor(global_scale, x)


# Doubles from FLT_MAX + half its ulp (2^103) up round to fp32 infinity (the tie goes to the even
# 2^128); the sum is exact in a double. A comparison, not struct.pack: torch.compile traces it.
_FIRST_EPS_ROUNDING_TO_INF = 3.4028234663852886e38 + 2.0**103


def _check_eps(eps) -> None:
    """SPEC 7's e = fp32(eps): a real number (numpy's included) whose fp32 rounding is finite and
    >= 0 (1e39 rounds to inf, and rs would then be 0 for every row)."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps: expected a real number, got {type(eps).__name__}")
    eps = float(eps)
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps: expected a finite number >= 0, got {eps!r}")
    if eps >= _FIRST_EPS_ROUNDING_TO_INF:
        raise ValueError(f"eps: expected a finite number >= 0, got {eps!r} (infinite in float32)")


def _check_width(width: int, block: int, format: str, what: str) -> None:
    if width % block != 0:
        raise ValueError(f"x: expected {what} to be a multiple of {block} (the {format.upper()} block), got {width}")


def _wrap(format, data, scales, g, scale_layout):
    if format == "nvfp4":
        return NVFP4Tensor(data, scales, g, scale_layout)
    return MXFP4Tensor(data, scales, scale_layout)


def rms_norm_quantize(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, residual: torch.Tensor | None = None,
                      format: str = "nvfp4", global_scale=None, scale_rule: str = "floor",
                      scale_layout: str = "linear"):
    """Quantize rms_norm(x) * weight (x [..., H], weight [H]) to `format` in one pass.

    With `residual` (x's shape and dtype): h = x + residual (rounded to x's dtype, as PyTorch's
    add) is normalized instead, and (q, h) is returned: h is the new residual stream. Without: q.
    global_scale (NVFP4): the decode scale g as in quantize_nvfp4; None derives it from the amax of
    the normalized values on the device (two passes, no host sync); a given one (calibrated,
    static: the serving case) is one pass. scale_rule is MXFP4's. SPEC 7 states the arithmetic.
    """
    check_float_input(x)
    block, g = _check_target(format, global_scale, scale_rule, scale_layout, x)
    _check_width(x.shape[-1], block, format, "the last dimension (the hidden size)")
    check_float_input(weight, "weight")
    if tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(f"weight: expected shape ({x.shape[-1]},) (x's last dimension), got {tuple(weight.shape)}")
    check_same_device(weight, x, "weight", "x")
    _check_eps(eps)
    if residual is not None:
        check_tensor(residual, "residual")
        if residual.dtype != x.dtype:
            raise TypeError(f"residual: expected {x.dtype} (x's dtype), got {residual.dtype}")
        if residual.shape != x.shape:
            raise ValueError(f"residual: expected shape {tuple(x.shape)} (x's shape), got {tuple(residual.shape)}")
        check_same_device(residual, x, "residual", "x")
        # The new residual stream is a float output that a caller could expect gradients through;
        # the op has no backward, so refuse rather than cut the stream's gradient silently.
        check_no_grad(x, "x", "rms_norm_quantize (with a residual)")
        check_no_grad(residual, "residual", "rms_norm_quantize")
    data, scales, g_out, new_residual, _ = torch.ops.fp4ops.rms_norm_quantize(
        without_grad(x), without_grad(weight), float(eps), without_grad(residual), format, without_grad(g), scale_rule,
        scale_layout, False)
    q = _wrap(format, data, scales, g_out, scale_layout)
    return q if residual is None else (q, new_residual)


def silu_mul_quantize(x: torch.Tensor, *, format: str = "nvfp4", global_scale=None, scale_rule: str = "floor",
                      scale_layout: str = "linear"):
    """Quantize silu(gate) * up to `format` in one pass, x [..., 2H] = gate then up (vLLM's and
    Hugging Face's order); the result has logical shape [..., H]. global_scale, scale_rule and
    scale_layout as in rms_norm_quantize. SPEC 7 states the arithmetic."""
    check_float_input(x)
    block, g = _check_target(format, global_scale, scale_rule, scale_layout, x)
    if x.shape[-1] % 2 != 0:
        raise ValueError(f"x: expected an even last dimension (gate, then up), got {x.shape[-1]}")
    _check_width(x.shape[-1] // 2, block, format, "half the last dimension (the gate and up width H)")
    data, scales, g_out, _ = torch.ops.fp4ops.silu_mul_quantize(without_grad(x), format, without_grad(g), scale_rule,
                                                              scale_layout, False)
    return _wrap(format, data, scales, g_out, scale_layout)
