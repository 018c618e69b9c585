"""What users run today, timed beside fp4ops in the same run: the pure-PyTorch reference
(`fp4ops.reference`) eagerly and under torch.compile, PyTorch's own fp8 casts, torchao's NVFP4/MX
quantize (optional), for the GEMV "dequantize then torch.matmul", a bf16 torch.matmul GEMV
and torch._scaled_mm where the GPU has FP4 tensor cores, and for the fused producers the unfused
sequence (PyTorch's bf16 RMSNorm or SiLU-and-mul, then a quantizer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from fp4ops import reference

# The reference is written for clarity: its E2M1 rounding holds float64 distances to all eight
# grid points, about 150 bytes per element at once, so eager runs stop here (2^26 elements ~ 10 GB).
EAGER_MAX_NUMEL = 1 << 26


@dataclass
class Baselines:
    """Which baselines to run, and the compiled reference functions (compiled once, dynamic shapes)."""

    eager: bool = True
    compiled: bool = True
    torchao: bool = True
    _compiled: dict[str, Callable] = field(default_factory=dict)

    def eager_skip(self, numel: int) -> str:
        if not self.eager:
            return "eager baselines not asked for"
        if numel > EAGER_MAX_NUMEL:
            return f"reference eager stops at 2^{EAGER_MAX_NUMEL.bit_length() - 1} elements (float64 intermediates)"
        return ""

    def compiled_fn(self, name: str) -> Callable:
        """torch.compile of reference.<name>, built on first use. dynamic=True keeps one graph
        across sizes (a dimension of 1 still specializes, so decode shapes compile once more)."""
        if name not in self._compiled:
            self._compiled[name] = torch.compile(getattr(reference, name), dynamic=True)
        return self._compiled[name]


def fp8_cast(x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """PyTorch's own bf16/fp16/fp32 -> float8_e4m3fn cast: a pure data mover, one byte out per element."""
    return lambda: x.to(torch.float8_e4m3fn)


def fp8_widen(codes: torch.Tensor, dtype: torch.dtype) -> Callable[[], torch.Tensor]:
    """float8_e4m3fn -> dtype, the dequantize side's data mover."""
    return lambda: codes.to(dtype)


def dequantize_then_matmul(a, b: torch.Tensor) -> Callable[[], torch.Tensor]:
    """What a user without an FP4 GEMV writes: A to bf16, then a batched matmul with B as a column."""
    return lambda: torch.matmul(a.dequantize(b.dtype), b.unsqueeze(-1)).squeeze(-1)


def dense_matmul(w: torch.Tensor, b: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: torch.matmul(w, b.unsqueeze(-1)).squeeze(-1)


def norm_then_quantize(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                       quantize: Callable[[torch.Tensor], object]) -> Callable[[], object]:
    """A model's RMSNorm without a fused producer: h = x + residual (the new residual stream),
    PyTorch's rms_norm in x's dtype written out, then quantized; returns what rms_norm_quantize does."""
    def call():
        h = x if residual is None else x + residual
        q = quantize(torch.nn.functional.rms_norm(h, (x.shape[-1],), weight, eps))
        return q if residual is None else (q, h)
    return call


def silu_mul_then_quantize(x: torch.Tensor, quantize: Callable[[torch.Tensor], object]) -> Callable[[], object]:
    """SiLU-and-mul without a fused producer: silu(gate) * up in x's dtype (x = gate, then up), then quantized."""
    gate, up = x.chunk(2, dim=-1)
    return lambda: quantize(torch.nn.functional.silu(gate) * up)


def scaled_mm_skip(device: torch.device) -> str:
    """Why torch._scaled_mm cannot run FP4 here, or '' where it can (compute capability >= 10)."""
    if device.type != "cuda":
        return "torch._scaled_mm FP4 needs a CUDA GPU"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 10:
        return f"torch._scaled_mm FP4 needs compute capability >= 10 (this GPU: {major}.{minor})"
    if not hasattr(torch, "float4_e2m1fn_x2"):
        return f"torch {torch.__version__} has no float4_e2m1fn_x2"
    return ""
