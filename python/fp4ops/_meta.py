"""Fake (meta) kernels: output shapes and dtypes only, for torch.compile and FakeTensor tracing."""

from __future__ import annotations

import functools
import inspect

import torch

from ._formats import FORMATS, MXFP4_BLOCK, MXFP4_SCALE_DTYPE, NVFP4_BLOCK, NVFP4_SCALE_DTYPE
from ._shapes import packed_shape, scale_shape, swizzled_shape, unpacked_shape


def _one_device(fake):
    """A fake kernel that first checks every tensor argument is on the first one's device, as the
    real kernels do. A real meta tensor among CPU or CUDA ones sends the whole call here (Meta
    outranks the backends in dispatch), and the empty tensors made on the first argument's device
    would come back as if they were results."""
    parameters = inspect.signature(fake)

    @functools.wraps(fake)
    def checked(*args, **kwargs):
        tensors = [(name, value) for name, value in parameters.bind(*args, **kwargs).arguments.items()
                   if isinstance(value, torch.Tensor)]
        first_name, first = tensors[0]
        for name, value in tensors[1:]:
            if value.device != first.device:
                raise RuntimeError(f"{name}: expected a tensor on {first.device} (the device of {first_name}), "
                                   f"got {value.device}")
        return fake(*args, **kwargs)

    return checked


@torch.library.register_fake("fp4ops::amax")
@_one_device
def _amax_fake(x):
    return x.new_empty((), dtype=torch.float32)


@torch.library.register_fake("fp4ops::quantize_nvfp4")
@_one_device
def _quantize_nvfp4_fake(x, global_scale, scale_layout="linear"):
    return (
        x.new_empty(packed_shape(x.shape), dtype=torch.uint8),
        x.new_empty(scale_shape(x.shape, NVFP4_BLOCK, scale_layout), dtype=NVFP4_SCALE_DTYPE),
        x.new_empty((), dtype=torch.float32),
    )


@torch.library.register_fake("fp4ops::quantize_mxfp4")
@_one_device
def _quantize_mxfp4_fake(x, scale_rule, scale_layout="linear"):
    return (
        x.new_empty(packed_shape(x.shape), dtype=torch.uint8),
        x.new_empty(scale_shape(x.shape, MXFP4_BLOCK, scale_layout), dtype=MXFP4_SCALE_DTYPE),
    )


@torch.library.register_fake("fp4ops::dequantize_nvfp4")
@_one_device
def _dequantize_nvfp4_fake(data, scales, global_scale, dtype, scale_layout="linear"):
    return data.new_empty(unpacked_shape(data.shape), dtype=dtype)


@torch.library.register_fake("fp4ops::dequantize_mxfp4")
@_one_device
def _dequantize_mxfp4_fake(data, scales, dtype, scale_layout="linear"):
    return data.new_empty(unpacked_shape(data.shape), dtype=dtype)


@torch.library.register_fake("fp4ops::quantize_nvfp4_recipe")
@_one_device
def _quantize_nvfp4_recipe_fake(x, global_scale, scale_layout, rowwise, columnwise, block_2d, hadamard_signs, seed, offset):
    def direction(shape, enabled):
        if not enabled:
            return x.new_empty((0,), dtype=torch.uint8), x.new_empty((0,), dtype=NVFP4_SCALE_DTYPE)
        return (x.new_empty(packed_shape(shape), dtype=torch.uint8),
                x.new_empty(scale_shape(shape, NVFP4_BLOCK, scale_layout), dtype=NVFP4_SCALE_DTYPE))

    transposed = (*x.shape[:-2], x.shape[-1], x.shape[-2]) if x.dim() >= 2 else x.shape
    g = x.new_empty((), dtype=torch.float32)
    return (*direction(x.shape, rowwise), g, *direction(transposed, columnwise), x.new_empty((), dtype=torch.float32))


@torch.library.register_fake("fp4ops::swizzle_scales")
@_one_device
def _swizzle_scales_fake(scales):
    return scales.new_empty(swizzled_shape(scales.shape, scales.shape[-1]))


@torch.library.register_fake("fp4ops::unswizzle_scales")
@_one_device
def _unswizzle_scales_fake(scales, rows, cols):
    return scales.new_empty((*scales.shape[:-2], rows, cols))


@torch.library.register_fake("fp4ops::cast_to_e2m1")
@_one_device
def _cast_to_e2m1_fake(x):
    return x.new_empty(packed_shape(x.shape), dtype=torch.uint8)


@torch.library.register_fake("fp4ops::cast_from_e2m1")
@_one_device
def _cast_from_e2m1_fake(data, dtype):
    return data.new_empty(unpacked_shape(data.shape), dtype=dtype)


@torch.library.register_fake("fp4ops::gemv_fp4_dense")
@_one_device
def _gemv_fp4_dense_fake(a_data, a_scales, a_global_scale, b, out_dtype):
    return a_data.new_empty(a_data.shape[:2], dtype=out_dtype)


@torch.library.register_fake("fp4ops::gemv_fp4_fp4")
@_one_device
def _gemv_fp4_fp4_fake(a_data, a_scales, a_global_scale, b_data, b_scales, b_global_scale, out_dtype):
    return a_data.new_empty(a_data.shape[:2], dtype=out_dtype)


@torch.library.register_fake("fp4ops::linear")
@_one_device
def _linear_fake(x, x_scales, x_global_scale, w_data, w_scales, w_global_scale, bias, out_dtype, batch_invariant):
    return x.new_empty((x.shape[0], w_data.shape[0]), dtype=out_dtype)


def _producer_outputs(x, logical, format, scale_layout):
    block, scale_dtype = FORMATS[format]
    g = x.new_empty((), dtype=torch.float32) if format == "nvfp4" else x.new_empty((0,), dtype=torch.float32)
    return (x.new_empty(packed_shape(logical), dtype=torch.uint8),
            x.new_empty(scale_shape(logical, block, scale_layout), dtype=scale_dtype), g)


@torch.library.register_fake("fp4ops::rms_norm_quantize")
@_one_device
def _rms_norm_quantize_fake(x, weight, eps, residual, format, global_scale, scale_rule, scale_layout,
                            return_intermediate):
    new_residual = x.new_empty(x.shape) if residual is not None else x.new_empty((0,))
    intermediate = x.new_empty(x.shape if return_intermediate else (0,), dtype=torch.float32)
    return (*_producer_outputs(x, x.shape, format, scale_layout), new_residual, intermediate)


@torch.library.register_fake("fp4ops::silu_mul_quantize")
@_one_device
def _silu_mul_quantize_fake(x, format, global_scale, scale_rule, scale_layout, return_intermediate):
    logical = (*x.shape[:-1], x.shape[-1] // 2)
    intermediate = x.new_empty(logical if return_intermediate else (0,), dtype=torch.float32)
    return (*_producer_outputs(x, logical, format, scale_layout), intermediate)
