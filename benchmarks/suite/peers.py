"""Peer baselines for the benchmark suite: torchao's NVFP4 and MXFP4 quantize functions.

torchao is an optional dependency. Every function here degrades to a reason string (never an
exception) when torchao is missing, too old or too new, or cannot handle the input, so the
suite can print "skipped: <reason>" in the peer's column and still time everything else.
The file deliberately imports nothing from fp4ops: it must stay usable as a standalone peer.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import warnings
from typing import Callable, Iterator

import torch

# torchao logs at import (e.g. "Skipping import of cpp extensions due to incompatible torch
# version"), and newer torch logs a deprecation for each Enum torchao registers as a pytree
# constant. Neither matters to a benchmark, and both would clutter its table.
_NOISY_LOGGERS = ("torchao", "torch.utils._pytree")
_TRIAL_ROWS = 16  # a few rows are enough to prove that the call works on this device and dtype


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _module(name: str):
    """The imported module, or None. Any failure counts as absent (a torchao built against
    another torch can fail with far more than ImportError)."""
    try:
        with _quiet():
            return importlib.import_module(name)
    except Exception:
        return None


def torchao_version() -> str | None:
    mod = _module("torchao")
    return None if mod is None else str(getattr(mod, "__version__", "unknown"))


def _prepare(x: torch.Tensor, scale_layout: str) -> torch.Tensor | str:
    if scale_layout not in ("linear", "swizzled"):
        return f"scale_layout: expected 'linear' or 'swizzled', got {scale_layout!r}"
    # torchao's plain PyTorch quantizers (nvfp4_quantize, to_mx) assert bf16/fp32 input.
    if x.dtype not in (torch.bfloat16, torch.float32):
        return f"torchao {torchao_version()}: {x.dtype} input is not supported (bf16/fp32 only)"
    # Flatten and make contiguous here, outside the timed callable: torchao requires contiguous input.
    return x.detach().reshape(-1, x.shape[-1]).contiguous()


def _checked(make: Callable[[torch.Tensor], object], x2: torch.Tensor) -> Callable[[], object] | str:
    """A trial call on a small slice first, so a failure (CPU-only op, shape assert, ...) becomes
    a reason string now rather than an exception in the middle of a timing loop."""
    try:
        with _quiet():
            make(x2[:_TRIAL_ROWS])
    except Exception as e:
        return f"torchao {torchao_version()}: {type(e).__name__}: {e}"
    return lambda: make(x2)


def torchao_nvfp4_quantize(x: torch.Tensor, per_tensor_scale: torch.Tensor | None, *,
                           scale_layout: str = "linear") -> Callable[[], object] | str:
    """NVFP4Tensor.to_nvfp4 (block 16, E4M3 scales, PyTorch path, not the Triton kernel).
    per_tensor_scale is the decode scale (amax / 2688), the same convention as torchao's
    per_tensor_amax_to_scale."""
    mod = _module("torchao.prototype.mx_formats.nvfp4_tensor")
    cls = getattr(mod, "NVFP4Tensor", None)
    if cls is None or not hasattr(cls, "to_nvfp4"):
        v = torchao_version()
        return "torchao is not installed (or fails to import)" if v is None else f"torchao {v}: no NVFP4Tensor.to_nvfp4"
    x2 = _prepare(x, scale_layout)
    if isinstance(x2, str):
        return x2
    if per_tensor_scale is not None:
        # torchao asserts a 0-dim scale and divides by it on x's device; convert once, untimed.
        per_tensor_scale = per_tensor_scale.detach().to(x2.device, torch.float32).reshape(())
    swizzled = scale_layout == "swizzled"
    return _checked(lambda t: cls.to_nvfp4(t, block_size=16, per_tensor_scale=per_tensor_scale,
                                           is_swizzled_scales=swizzled, use_triton_kernel=False), x2)


def torchao_mxfp4_quantize(x: torch.Tensor, *, scale_rule: str = "floor",
                           scale_layout: str = "linear") -> Callable[[], object] | str:
    """MXTensor.to_mx with E2M1 elements, block 32, E8M0 scales, torchao's eager PyTorch path."""
    mx = _module("torchao.prototype.mx_formats.mx_tensor")
    cfg = _module("torchao.prototype.mx_formats.config")
    cls, modes = getattr(mx, "MXTensor", None), getattr(cfg, "ScaleCalculationMode", None)
    fp4 = getattr(torch, "float4_e2m1fn_x2", None)
    if cls is None or modes is None or not hasattr(cls, "to_mx") or fp4 is None:
        v = torchao_version()
        return "torchao is not installed (or fails to import)" if v is None else f"torchao {v}: no MXTensor.to_mx / ScaleCalculationMode"
    if scale_rule not in ("floor", "rceil"):
        return f"scale_rule: expected 'floor' or 'rceil', got {scale_rule!r}"
    x2 = _prepare(x, scale_layout)
    if isinstance(x2, str):
        return x2
    # Pass the mode explicitly: 0.18 defaults to FLOOR but plans to flip the default to RCEIL.
    mode = modes.FLOOR if scale_rule == "floor" else modes.RCEIL
    swizzled = scale_layout == "swizzled"
    return _checked(lambda t: cls.to_mx(t, fp4, 32, scaling_mode=mode, is_swizzled_scales=swizzled), x2)


def torchao_note() -> str:
    # Facts read from torchao 0.18's source, then checked bit for bit against an exact reference.
    return (
        "torchao 0.18 NVFP4 (prototype.mx_formats.nvfp4_tensor.nvfp4_quantize) rounds the scale "
        "e4m3((amax/6)/global_scale) RNE and saturating but clamps it below to 2^-6 (no subnormal scales; a "
        "zero block gets 2^-6, not 0) and encodes RNE(x * ((1/global_scale)/scale)), a different rounding order "
        "from x / (scale*global_scale), so near-tie elements can differ (per_tensor_scale=None: one-level, g = 1). "
        "MXFP4 (prototype.mx_formats.mx_tensor.to_mx) defaults to ScaleCalculationMode.FLOOR (fp32 exponent of "
        "amax - 2, OCP; RCEIL opt-in), elements RNE and saturating, exact except blocks whose amax is an fp32 "
        "subnormal (it divides by 2^-126, not 2^-127); both take bf16/fp32 input only."
    )
