"""`fp4ops.nn`: FP4Linear, a drop-in inference replacement for torch.nn.Linear with FP4 weights.

The weight is stored as ModelOpt-style buffers, so a state_dict is also the checkpoint layout of
`python -m fp4ops quantize`: `weight` packed E2M1 (uint8 [out, in/2]), `weight_scale` (E4M3 per
16 or E8M0 per 32 inputs) and, for NVFP4, `weight_scale_2` (the fp32 decode global scale).
"""

from __future__ import annotations

import os

import torch
from torch import nn

from ._checks import (check_float_input, check_format, check_format_scale_rule, check_quantized, decode_global_scale,
                      skip_patterns)
from ._formats import FORMATS
from .linear import as_rows, linear, with_leading_dims
from .ops import quantize_mxfp4, quantize_nvfp4
from .tensor import MXFP4Tensor, NVFP4Tensor


class FP4Linear(nn.Module):
    """y = x W^T + b with W in NVFP4 or MXFP4. Inference only (no backward).

    An fp16/bf16 input of any shape [..., in_features] goes through fp4ops.linear in its own dtype
    (the bias added inside, one rounding): on CUDA up to 64 rows (128 on Hopper for most weights)
    run the tensor-core kernel family (in_features a multiple of 128), which reads the weight in its
    4-bit form and gives each row
    the same bits whatever the other rows are; more rows dequantize the weight for a cuBLAS
    matmul, unless `batch_invariant` is True (constructor argument or attribute, settable any
    time), which keeps them on the kernel family in row chunks. An fp32 input keeps fp32
    throughout: the weight is dequantized to fp32 for torch.nn.functional.linear (fp4ops.linear
    takes fp16/bf16 or FP4 activations), whose rows may depend on the batch, so with
    batch_invariant set an fp32 input is refused. Every path is within SPEC 5's bound of the exact product
    with the dequantized weight."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, format: str = "nvfp4",
                 device=None, dtype: torch.dtype = torch.bfloat16, batch_invariant: bool = False):
        super().__init__()
        check_format(format)
        block, scale_dtype = FORMATS[format]
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}: expected an int >= 0, got {value!r}")
        if in_features % block != 0:
            raise ValueError(f"in_features: expected a multiple of {block} ({format} block), got {in_features}")
        self.in_features, self.out_features, self.format = in_features, out_features, format
        self.batch_invariant = batch_invariant  # checked by the property's setter
        self.register_buffer("weight", torch.zeros(out_features, in_features // 2, dtype=torch.uint8, device=device))
        scales = torch.zeros(out_features, in_features // block, dtype=torch.uint8, device=device).view(scale_dtype)
        self.register_buffer("weight_scale", scales)
        global_scale = torch.ones((), dtype=torch.float32, device=device) if format == "nvfp4" else None
        self.register_buffer("weight_scale_2", global_scale)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device), requires_grad=False) if bias else None

    @property
    def batch_invariant(self) -> bool:
        """Whether every row count stays on the kernel family (each row's result independent of the
        batch); settable any time. fp16/bf16 inputs only: an fp32 input with it set is refused."""
        return self._batch_invariant

    @batch_invariant.setter
    def batch_invariant(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"batch_invariant: expected a bool, got {type(value).__name__}")
        self._batch_invariant = value

    @classmethod
    def from_linear(cls, linear: nn.Linear, format: str = "nvfp4", *, scale_rule: str = "floor") -> FP4Linear:
        """Quantize a Linear's weight (NVFP4 with its own global scale, or MXFP4 with scale_rule)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear: expected torch.nn.Linear, got {type(linear).__name__}")
        check_format_scale_rule(format, scale_rule)
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
        """Copy an NVFP4Tensor/MXFP4Tensor of shape [out_features, in_features] into the buffers
        (swizzled scales are unswizzled: the buffers hold linear ones)."""
        expected_type = NVFP4Tensor if self.format == "nvfp4" else MXFP4Tensor
        if not isinstance(q, expected_type):
            raise TypeError(f"q: expected {expected_type.__name__} for format {self.format!r}, got {type(q).__name__}")
        check_quantized(q, "q")  # scales of another shape would broadcast in copy_
        if tuple(q.shape) != (self.out_features, self.in_features):
            raise ValueError(f"q: expected shape {(self.out_features, self.in_features)}, got {tuple(q.shape)}")
        if self.weight.is_meta and not q.data.is_meta:
            raise ValueError("q: this layer's buffers are on the meta device, where a copy keeps nothing; "
                             "allocate them first (module.to_empty(device=...))")
        q = q.with_scale_layout("linear")
        self.weight.copy_(q.data)
        self.weight_scale.copy_(q.scales)
        if self.weight_scale_2 is not None:
            self.weight_scale_2.copy_(decode_global_scale(q, "q.global_scale").reshape(()))

    def _apply(self, fn, recurse=True):
        # Module.to(dtype), .half(), .float(), ... convert every floating-point buffer, and float8
        # counts as one: the scale codes and the fp32 global scale would be cast by value (E8M0
        # codes past fp16's range become inf, the global scale loses bits), and the layer would
        # refuse its own buffers. They are the format, so they keep their dtypes and follow only
        # the device fn moves them to; the bias converts as a Linear's does.
        formats = {name: buffer for name, buffer in self._buffers.items() if buffer is not None}
        super()._apply(fn, recurse)
        for name, before in formats.items():
            after = self._buffers[name]
            if after is not None and after.dtype != before.dtype:
                self._buffers[name] = before.to(after.device)
        return self

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # The buffers hold codes: load_state_dict's copy_ would cast another dtype by value (a
        # scale byte 127 stored as uint8, as compressed-tensors stores E8M0, to the code of 127.0).
        # Codes stored as bytes of another one-byte dtype (uint8 scales, float4_e2m1fn_x2 packed
        # elements) are viewed as what they are; the global scale may widen exactly from 16 bits;
        # anything else is refused.
        for name, buffer in self._buffers.items():
            key = prefix + name
            value = state_dict.get(key)
            if buffer is None or not isinstance(value, torch.Tensor) or value.dtype == buffer.dtype:
                continue
            as_bytes = value.dtype == torch.uint8 or (value.dtype == torch.float4_e2m1fn_x2 and buffer.dtype == torch.uint8)
            if as_bytes and buffer.dtype.itemsize == 1:
                state_dict[key] = value.view(buffer.dtype)
            elif buffer.dtype == torch.float32 and value.dtype in (torch.float16, torch.bfloat16):
                state_dict[key] = value.float()  # widened here: load_state_dict(assign=True) keeps the tensor
            else:
                error_msgs.append(f"{key}: expected {buffer.dtype} (codes may come as their bytes), got {value.dtype}: "
                                  f"FP4 codes and scales are not converted by value")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def quantized_weight(self):
        """The weight as an NVFP4Tensor / MXFP4Tensor view of the buffers (no copy)."""
        if self.format == "nvfp4":
            return NVFP4Tensor(self.weight, self.weight_scale, self.weight_scale_2)
        return MXFP4Tensor(self.weight, self.weight_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float_input(x)
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x: expected the last dimension to be {self.in_features}, got {x.shape[-1]}")
        bias = self._parameters.get("bias")  # None where the layer has none (a plain attribute then)
        if x.dtype == torch.float32:
            if self._batch_invariant:
                raise ValueError("x: batch_invariant=True takes float16 or bfloat16 x; a float32 x goes through "
                                 "F.linear with the dequantized weight, whose rows may depend on the batch")
            bias = None if bias is None else bias.to(torch.float32)
            return nn.functional.linear(x, self.quantized_weight().dequantize(torch.float32), bias)
        if torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad)):
            # fp4ops.linear refuses it, naming the argument (the op has no backward).
            return linear(x, self.quantized_weight(), bias, out_dtype=x.dtype, batch_invariant=self._batch_invariant)
        # The call fp4ops.linear makes, without its checks of W: the buffers are its arguments as
        # they are (linear scales; NVFP4's one-element fp32 global scale), their dtypes and shapes
        # set here and kept by load_state_dict, and the op checks every argument again, by name. A
        # decode step calls every layer from the host, where those checks and the NVFP4Tensor view
        # would cost more than the op's own host path (docs/performance.md, "Eager decode").
        buffers = self._buffers
        y = torch.ops.fp4ops.linear(as_rows(x, self.in_features), None, None, buffers["weight"],
                                    buffers["weight_scale"], buffers["weight_scale_2"], bias, x.dtype,
                                    self._batch_invariant)
        return with_leading_dims(y, x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"format={self.format!r}, batch_invariant={self.batch_invariant}")


def replace_linears(module: nn.Module, format: str = "nvfp4", *, skip=("lm_head",), scale_rule: str = "floor",
                    checkpoint=None) -> list[str]:
    """Swap every nn.Linear under `module` (in place) for an FP4Linear, except those whose
    qualified name contains one of `skip` (a string is one pattern), or whose in_features is not a
    multiple of the block.
    Returns the names swapped.

    checkpoint: an FP4 checkpoint (a path that `fp4ops.checkpoint.load` reads, either layout, or the
    dict it returns). Then the weights come from it instead of quantizing the module's: every
    Linear whose `<name>.weight` is an FP4 tensor there becomes an FP4Linear holding exactly those
    codes and scales (its format; `format`, `skip` and `scale_rule` are not used), with the
    checkpoint's `<name>.bias` where it has one, else the module's bias. Linears stored dense stay
    as they are."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    if checkpoint is not None:
        return _replace_from_checkpoint(module, checkpoint)
    check_format(format)
    check_format_scale_rule(format, scale_rule)
    skip = skip_patterns(skip)
    block = FORMATS[format][0]
    swapped = []
    for parent, child_name, qualified, leaf in _linears(module):
        if any(s in qualified for s in skip) or leaf.in_features % block:
            continue
        setattr(parent, child_name, FP4Linear.from_linear(leaf, format, scale_rule=scale_rule))
        swapped.append(qualified)
    return swapped


def _linears(module: nn.Module):
    """(parent, attribute name, qualified name, module) of every nn.Linear under `module`, listed
    before any is swapped."""
    return [(parent, child_name, f"{name}.{child_name}" if name else child_name, leaf)
            for name, parent in list(module.named_modules()) for child_name, leaf in list(parent.named_children())
            if isinstance(leaf, nn.Linear)]


def _replace_from_checkpoint(module: nn.Module, checkpoint) -> list[str]:
    if isinstance(checkpoint, dict):
        tensors = checkpoint
    elif isinstance(checkpoint, (str, os.PathLike)):
        if not os.path.exists(checkpoint):
            raise ValueError(f"checkpoint: no such file or directory: {str(checkpoint)!r}")
        from .checkpoint import load  # only here: reading checkpoints needs safetensors

        tensors = load(str(checkpoint))
    else:
        raise TypeError(f"checkpoint: expected a path or the dict fp4ops.checkpoint.load returns, "
                        f"got {type(checkpoint).__name__}")
    swapped = []
    for parent, child_name, qualified, leaf in _linears(module):
        q = tensors.get(f"{qualified}.weight")
        if not isinstance(q, (NVFP4Tensor, MXFP4Tensor)):
            continue
        if tuple(q.shape) != (leaf.out_features, leaf.in_features):
            raise ValueError(f"checkpoint: {qualified}.weight has shape {tuple(q.shape)}, but the module is "
                             f"[{leaf.out_features}, {leaf.in_features}]")
        bias = tensors.get(f"{qualified}.bias", leaf.bias)
        _check_checkpoint_bias(bias, f"{qualified}.bias", leaf.out_features)
        # A model built on the meta device (no memory for its dense weights) takes the layer on the
        # checkpoint's device: copied into meta buffers, the codes would be dropped.
        device = q.data.device if leaf.weight.is_meta else leaf.weight.device
        if bias is not None and bias.is_meta and device.type != "meta":
            raise ValueError(f"checkpoint: {qualified}.bias is missing and the module's bias is on the meta device "
                             f"(it holds no values)")
        fp4 = FP4Linear(leaf.in_features, leaf.out_features, bias is not None,
                        format="nvfp4" if isinstance(q, NVFP4Tensor) else "mxfp4", device=device,
                        dtype=bias.dtype if bias is not None else leaf.weight.dtype)
        fp4.load_quantized_weight(q)  # copy_ moves the codes and scales to the module's device
        if bias is not None:
            fp4.bias.data.copy_(bias.detach())
        setattr(parent, child_name, fp4)
        swapped.append(qualified)
    return swapped


def _check_checkpoint_bias(bias, name: str, out_features: int) -> None:
    """A bias from a checkpoint as FP4Linear holds it: None, or [out_features] in a float dtype
    fp4ops.linear takes (a [1] bias would broadcast in copy_)."""
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor) or bias.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        got = bias.dtype if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise TypeError(f"checkpoint: {name} expected a float16, bfloat16 or float32 tensor, got {got}")
    if tuple(bias.shape) != (out_features,):
        raise ValueError(f"checkpoint: {name} expected shape ({out_features},), got {tuple(bias.shape)}")
