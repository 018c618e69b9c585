"""Quantized tensor containers: packed E2M1 data plus scales, with the logical shape.

The methods call the torch.ops.fp4ops operators themselves (checked as the public functions check
them), so this module sits below ops.py, which builds these tensors."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from ._checks import (
    check_no_grad,
    check_out_dtype,
    check_quantized,
    check_row_index,
    check_scale_codes,
    check_scale_layout,
    check_unswizzle_args,
    decode_global_scale,
)
from ._formats import MXFP4_BLOCK, MXFP4_SCALE_DTYPE, NVFP4_BLOCK, NVFP4_SCALE_DTYPE
from ._shapes import matrix_rows, scale_shape, unpacked_shape


class _PackedE2M1:
    """What both formats share: `data` is uint8 [..., K/2], element 2i in the low nibble. Compared
    (==, hash) by identity: their contents are tensors, which compare element by element."""

    data: torch.Tensor
    scale_layout: str
    block: ClassVar[int]  # elements per block scale
    scale_dtype: ClassVar[torch.dtype]  # the scales' dtype in either layout

    @property
    def shape(self) -> torch.Size:
        """The logical shape [..., K] of the quantized tensor."""
        return torch.Size(unpacked_shape(self.data.shape))

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def float4_data(self) -> torch.Tensor:
        """`data` viewed as torch.float4_e2m1fn_x2 (same memory, same packing)."""
        return self.data.view(torch.float4_e2m1fn_x2)

    def with_scale_layout(self, scale_layout: str):
        """The same tensor with its scales in `scale_layout` ("linear" or "swizzled", SPEC 4);
        self when they already are. Data (and the global scale) are shared, not copied."""
        check_scale_layout(scale_layout)
        if scale_layout == self.scale_layout:
            return self
        if scale_layout == "swizzled":
            check_scale_codes(self.scales, 1)
            scales = torch.ops.fp4ops.swizzle_scales(self.scales)
        else:
            shape = self.shape
            rows, cols = matrix_rows(shape), shape[-1] // self.block
            check_unswizzle_args(self.scales, rows, cols)
            linear = torch.ops.fp4ops.unswizzle_scales(self.scales, rows, cols)
            scales = linear.reshape(scale_shape(shape, self.block))  # a 1-D tensor's [1, cols] -> [cols]
        return dataclasses.replace(self, scales=scales, scale_layout=scale_layout)

    def __getitem__(self, index):
        """The rows `index` selects, as indexing the [..., K] tensor over its leading dimensions
        would (an int, slice, list, integer or bool tensor, or a tuple of them; not K): `x[0]`,
        `x[2:5]`, `x[keep]`. Data and scales are indexed alike, an NVFP4 global scale is shared.
        Basic indices give views of the same memory, advanced ones copies, as for a torch.Tensor.
        Linear scales only (SPEC 4's swizzled layout interleaves rows)."""
        check_row_index(self, index)
        # Through uint8: torch 2.8 has no CPU indexing kernel for its float8 dtypes.
        scales = self.scales.view(torch.uint8)[index].view(self.scales.dtype)
        return dataclasses.replace(self, data=self.data[index], scales=scales)

    def __iter__(self):
        """The rows along the first dimension (self[0], self[1], ...), as iterating a tensor gives
        them; a 1-D FP4 tensor has no leading dimension to iterate (its elements are packed)."""
        if self.data.dim() < 2:
            raise TypeError(f"iteration over a 1-D {type(self).__name__}: its one dimension is K, whose elements are packed")
        return (self[i] for i in range(self.data.shape[0]))

    def __len__(self) -> int:
        """The first dimension's size, as len() of a tensor; TypeError for a 1-D FP4 tensor."""
        if self.data.dim() < 2:
            raise TypeError(f"len() of a 1-D {type(self).__name__}: its one dimension is K, whose elements are packed")
        return self.data.shape[0]

    def __bool__(self) -> bool:
        """Always true: an FP4 tensor is a container, not a value to test (and __len__ must not
        make an empty one false)."""
        return True

    def to(self, device, non_blocking: bool = False):
        """The same tensor on `device`: data, scales and (NVFP4) the global scale moved together;
        self where it is there already, as torch.Tensor.to. The dtype is the format's: see
        dequantize() for a dense tensor."""
        if isinstance(device, torch.dtype):
            raise TypeError(f"device: expected a device, got the dtype {device} (an FP4 tensor's dtype is its format; "
                            f"dequantize(dtype) gives a dense tensor)")
        if not isinstance(non_blocking, bool):
            raise TypeError(f"non_blocking: expected a bool, got {type(non_blocking).__name__}")
        try:
            device = torch.device(device)
        except (TypeError, RuntimeError) as error:
            raise ValueError(f"device: expected a torch.device or a device string, got {device!r} ({error})") from None
        moved = {f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
                 for f in dataclasses.fields(self) if isinstance(getattr(self, f.name), torch.Tensor)}
        if all(moved[name] is getattr(self, name) for name in moved):
            return self
        return dataclasses.replace(self, **moved)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={tuple(self.shape)}, device={self.device}, scale_layout={self.scale_layout!r})"


@dataclass(frozen=True, repr=False, eq=False)
class NVFP4Tensor(_PackedE2M1):
    """NVFP4 (SPEC 2): E2M1 elements, one float8_e4m3fn scale per 16, one fp32 global scale.

    `global_scale` is a *decode* scale (the ModelOpt/torchao convention):
    x ~= e2m1 * scale * global_scale, with global_scale = amax / 2688 by default.
    vLLM, FlashInfer and TensorRT-LLM pass its reciprocal (2688 / amax) as their "global scale".
    """

    data: torch.Tensor  # uint8 [..., K/2]
    scales: torch.Tensor  # float8_e4m3fn [..., K/16], or swizzled (SPEC 4)
    global_scale: torch.Tensor  # float32, 0-dim, on data's device
    scale_layout: str = "linear"
    block: ClassVar[int] = NVFP4_BLOCK
    scale_dtype: ClassVar[torch.dtype] = NVFP4_SCALE_DTYPE

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """The dense [..., K] tensor of dtype (float32, float16 or bfloat16): SPEC 2.6."""
        check_out_dtype(dtype)
        check_quantized(self)
        check_no_grad(self.global_scale, "global_scale", "dequantize")
        g = decode_global_scale(self)
        return torch.ops.fp4ops.dequantize_nvfp4(self.data, self.scales, g, dtype, self.scale_layout)


@dataclass(frozen=True, repr=False, eq=False)
class MXFP4Tensor(_PackedE2M1):
    """MXFP4 (SPEC 3, OCP MX v1.0): E2M1 elements, one float8_e8m0fnu scale per 32."""

    data: torch.Tensor  # uint8 [..., K/2]
    scales: torch.Tensor  # float8_e8m0fnu [..., K/32], or swizzled (SPEC 4)
    scale_layout: str = "linear"
    block: ClassVar[int] = MXFP4_BLOCK
    scale_dtype: ClassVar[torch.dtype] = MXFP4_SCALE_DTYPE

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """The dense [..., K] tensor of dtype (float32, float16 or bfloat16): SPEC 3."""
        check_out_dtype(dtype)
        check_quantized(self)
        return torch.ops.fp4ops.dequantize_mxfp4(self.data, self.scales, dtype, self.scale_layout)


# torch.load's default (weights_only=True) unpickles only allow-listed classes: a saved FP4 tensor
# is plain data (tensors, a layout string), as safe to load as the tensors it holds.
torch.serialization.add_safe_globals([NVFP4Tensor, MXFP4Tensor])
