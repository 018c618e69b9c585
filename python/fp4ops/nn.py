"""`fp4ops.nn`: FP4Linear, a drop-in inference replacement for torch.nn.Linear with FP4 weights.

The weight is stored as ModelOpt-style buffers, so a state_dict is also the checkpoint layout of
`python -m fp4ops quantize`: `weight` packed E2M1 (uint8 [out, in/2]), `weight_scale` (E4M3 per
16 or E8M0 per 32 inputs) and, for NVFP4, `weight_scale_2` (the fp32 decode global scale).
"""

from __future__ import annotations

import torch
from torch import nn

from ._formats import FORMATS
from .gemv import gemv
from .ops import quantize_mxfp4, quantize_nvfp4
from .tensor import MXFP4Tensor, NVFP4Tensor


class FP4Linear(nn.Module):
    """y = x W^T + b with W in NVFP4 or MXFP4. Inference only (no backward).

    A single input row in fp16/bf16 (decoding one token) runs the FP4 x dense GEMV, reading the
    weight once in its 4-bit form; anything else (several rows, fp32 input) dequantizes the weight
    to the input's dtype and calls torch.nn.functional.linear. Both are within SPEC 5's bound of
    the exact product with the dequantized weight."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, format: str = "nvfp4",
                 device=None, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        if format not in FORMATS:
            raise ValueError(f"format: expected 'nvfp4' or 'mxfp4', got {format!r}")
        block, scale_dtype = FORMATS[format]
        if in_features % block != 0:
            raise ValueError(f"in_features: expected a multiple of {block} ({format} block), got {in_features}")
        self.in_features, self.out_features, self.format = in_features, out_features, format
        self.register_buffer("weight", torch.zeros(out_features, in_features // 2, dtype=torch.uint8, device=device))
        scales = torch.zeros(out_features, in_features // block, dtype=torch.uint8, device=device).view(scale_dtype)
        self.register_buffer("weight_scale", scales)
        global_scale = torch.ones((), dtype=torch.float32, device=device) if format == "nvfp4" else None
        self.register_buffer("weight_scale_2", global_scale)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device), requires_grad=False) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, format: str = "nvfp4", *, scale_rule: str = "floor") -> FP4Linear:
        """Quantize a Linear's weight (NVFP4 with its own global scale, or MXFP4 with scale_rule)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear: expected torch.nn.Linear, got {type(linear).__name__}")
        weight = linear.weight.detach()
        bias_dtype = linear.bias.dtype if linear.bias is not None else weight.dtype
        module = cls(linear.in_features, linear.out_features, linear.bias is not None, format=format,
                     device=weight.device, dtype=bias_dtype)
        q = quantize_nvfp4(weight) if format == "nvfp4" else quantize_mxfp4(weight, scale_rule=scale_rule)
        module.load_quantized_weight(q)
        if linear.bias is not None:
            module.bias.data.copy_(linear.bias.detach())
        return module

    def load_quantized_weight(self, q) -> None:
        """Copy an NVFP4Tensor/MXFP4Tensor of shape [out_features, in_features] into the buffers."""
        expected_type = NVFP4Tensor if self.format == "nvfp4" else MXFP4Tensor
        if not isinstance(q, expected_type):
            raise TypeError(f"q: expected {expected_type.__name__} for format {self.format!r}, got {type(q).__name__}")
        if tuple(q.shape) != (self.out_features, self.in_features):
            raise ValueError(f"q: expected shape {(self.out_features, self.in_features)}, got {tuple(q.shape)}")
        self.weight.copy_(q.data)
        self.weight_scale.copy_(q.scales)
        if self.weight_scale_2 is not None:
            self.weight_scale_2.copy_(q.global_scale.reshape(()))

    def quantized_weight(self):
        """The weight as an NVFP4Tensor / MXFP4Tensor view of the buffers (no copy)."""
        if self.format == "nvfp4":
            return NVFP4Tensor(self.weight, self.weight_scale, self.weight_scale_2)
        return MXFP4Tensor(self.weight, self.weight_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x: expected the last dimension to be {self.in_features}, got {x.shape[-1]}")
        w = self.quantized_weight()
        if x.numel() == self.in_features and x.dtype in (torch.float16, torch.bfloat16):
            y = gemv(w, x.reshape(self.in_features), out_dtype=x.dtype).reshape(*x.shape[:-1], self.out_features)
        else:
            y = nn.functional.linear(x, w.dequantize(x.dtype))
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, format={self.format!r}"


def replace_linears(module: nn.Module, format: str = "nvfp4", *, skip=("lm_head",), scale_rule: str = "floor") -> list[str]:
    """Swap every nn.Linear under `module` (in place) for an FP4Linear, except those whose
    qualified name contains one of `skip`, or whose in_features is not a multiple of the block.
    Returns the names swapped."""
    if format not in FORMATS:
        raise ValueError(f"format: expected 'nvfp4' or 'mxfp4', got {format!r}")
    block = FORMATS[format][0]
    swapped = []
    for name, child in list(module.named_modules()):
        for child_name, leaf in list(child.named_children()):
            qualified = f"{name}.{child_name}" if name else child_name
            if not isinstance(leaf, nn.Linear) or any(s in qualified for s in skip) or leaf.in_features % block:
                continue
            setattr(child, child_name, FP4Linear.from_linear(leaf, format, scale_rule=scale_rule))
            swapped.append(qualified)
    return swapped
