"""The public functions: checked, thin wrappers over torch.ops.fp4ops.* (SPEC section 6).

Errors use the same words as the C++ checks: the argument, what was expected, what was given.
Wrong types and dtypes raise TypeError; wrong values, shapes and devices raise ValueError.
"""

from __future__ import annotations

import functools

import torch

from ._shapes import MXFP4_BLOCK, NVFP4_BLOCK, scale_shape, swizzled_shape, unpacked_shape
from .tensor import MXFP4Tensor, NVFP4Tensor

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SCALE_RULES = ("floor", "rceil")
SCALE_LAYOUTS = ("linear", "swizzled")
_FLT_MAX = torch.finfo(torch.float32).max
_FLT_HALF_MIN_SUBNORMAL = 2.0**-150  # anything above rounds to a non-zero fp32


def _check_tensor(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")


def _check_float_input(x, name: str = "x") -> None:
    _check_tensor(x, name)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError(f"{name}: expected at least 1 dimension, got a 0-dim tensor")


def _check_no_grad(x, name: str, function: str) -> None:
    """The float-output ops have no backward: refuse an input that would need one, rather than
    hand back an output whose backward fails later, away from the call that caused it."""
    if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{name}: requires grad, but fp4ops.{function} has no backward; "
                           f"call it under torch.no_grad() or pass {name}.detach()")


def _check_last_dim_multiple(x: torch.Tensor, multiple: int, what: str, name: str = "x") -> None:
    if x.shape[-1] % multiple != 0:
        raise ValueError(f"{name}: expected the last dimension to be a multiple of {multiple} ({what}), got {x.shape[-1]}")


def _check_out_dtype(dtype) -> None:
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype: expected torch.float32, torch.float16 or torch.bfloat16, got {dtype}")


def _check_scale_layout(scale_layout) -> None:
    if scale_layout not in SCALE_LAYOUTS:
        raise ValueError(f"scale_layout: expected 'linear' or 'swizzled', got {scale_layout!r}")


def _global_scale_tensor(global_scale, x: torch.Tensor, name: str = "global_scale", x_name: str = "x"):
    """None (computed from amax), a finite Python number > 0, or a trusted fp32 one-element tensor."""
    if global_scale is None:
        return None
    if isinstance(global_scale, torch.Tensor):
        if global_scale.dtype != torch.float32:
            raise TypeError(f"{name}: expected a float32 tensor, got {global_scale.dtype}")
        if global_scale.numel() != 1:
            raise ValueError(f"{name}: expected one element, got shape {tuple(global_scale.shape)}")
        if global_scale.device != x.device:
            raise ValueError(f"{name}: expected a tensor on {x.device} (the device of {x_name}), got {global_scale.device}")
        return global_scale
    if isinstance(global_scale, bool) or not isinstance(global_scale, (int, float)):
        raise TypeError(f"{name}: expected None, a float or a float32 tensor, got {type(global_scale).__name__}")
    # Written as one comparison chain so NaN fails it too; the bounds are fp32's.
    if not (_FLT_HALF_MIN_SUBNORMAL < global_scale <= _FLT_MAX):
        raise ValueError(f"{name}: expected a finite value > 0 (as float32), got {global_scale}")
    return torch.full((), global_scale, dtype=torch.float32, device=x.device)


def amax(x: torch.Tensor) -> torch.Tensor:
    """max |x| over the finite elements of x (0 if none), as a float32 0-dim tensor on x's device."""
    _check_float_input(x)
    _check_no_grad(x, "x", "amax")
    return torch.ops.fp4ops.amax(x)


def _group_global_scale(x: torch.Tensor, group) -> torch.Tensor:
    """SPEC 2.2's g from the amax of every shard in `group`: local amax, all-reduce max, then
    g = amax / 2688 (1 when 0), the same fp32 division the kernels do. No host sync."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("amax_group: torch.distributed is not initialized")
    group_amax = torch.ops.fp4ops.amax(x.detach())
    dist.all_reduce(group_amax, op=dist.ReduceOp.MAX, group=group)
    return _global_scale_from_amax(group_amax)


def _global_scale_from_amax(amax_value: torch.Tensor) -> torch.Tensor:
    """g = amax / 2688 rounded once (1 when 0). The divisor is a tensor on amax's device: PyTorch's
    CUDA kernels turn a division by a Python number into a multiplication by its reciprocal, which
    is 1 ulp off for some amax values (and then every scale of the tensor moves)."""
    g = amax_value / torch.full((), 2688.0, dtype=torch.float32, device=amax_value.device)
    return torch.where(g == 0, torch.ones_like(g), g)


def quantize_nvfp4(x: torch.Tensor, global_scale=None, *, scale_layout: str = "linear", amax_group=None,
                   hadamard=False, block_2d: bool = False, stochastic_rounding: bool = False,
                   seed: int | None = None, offset: int = 0) -> NVFP4Tensor:
    """NVFP4-quantize x [..., K] (K a multiple of 16) along its last dimension.

    global_scale is the *decode* scale g (x ~= e2m1 * e4m3_scale * g). None computes
    g = amax(x) / 2688 on x's device without a host sync; a Python number must be finite and
    > 0; a tensor is trusted as is (a non-positive or non-finite one makes every scale NaN).
    amax_group (a torch.distributed process group, or torch.distributed.group.WORLD): x is one
    shard; the amax is max-reduced over the group first, so every shard shares one g (as
    Transformer Engine does for sequence-parallel tensors). Needs global_scale=None.
    Note: vLLM/FlashInfer/TensorRT-LLM call 2688 / amax (= 1 / g) their "global scale".
    Quantization is not differentiable: x may require grad (a weight, say); nothing returned does.
    scale_layout "swizzled" writes the scales straight into SPEC 4's 128x4-atom layout (the one
    torch._scaled_mm takes), [..., ceil(rows/128)*128, ceil(K/64)*4] with zero padding.

    Training-recipe options (docs/recipe.md), fused into one kernel:
    hadamard: True (Transformer Engine's sign vector), an int seed (random signs) or 16 signs:
      quantize x' = x H (16-point Random Hadamard Transform per block; g from amax(x')).
      `reference.inverse_rht` undoes it; rotating both GEMM operands leaves the product unchanged.
    block_2d: one scale per 16x16 tile (weights), repeated on each of the tile's rows.
    stochastic_rounding: E2M1 elements rounded stochastically, reproducible from (seed, offset)
      (Philox4x32-10); seed None draws one from torch's default generator.
    """
    _check_float_input(x)
    _check_last_dim_multiple(x, NVFP4_BLOCK, "the NVFP4 block")
    _check_scale_layout(scale_layout)
    if amax_group is not None:
        if global_scale is not None:
            raise ValueError("amax_group: give either amax_group or global_scale, not both")
        if hadamard is not False:
            raise ValueError("amax_group: the group amax is of x itself; it cannot be combined with hadamard")
        global_scale = _group_global_scale(x, amax_group)
    recipe = _recipe_args(hadamard, block_2d, stochastic_rounding, seed, offset)
    g_in = _global_scale_tensor(global_scale, x)
    if recipe is None:
        data, scales, g = torch.ops.fp4ops.quantize_nvfp4(x.detach(), g_in, scale_layout)
    else:
        if block_2d and x.dim() < 2:
            raise ValueError(f"x: 16x16 block scaling needs at least 2 dimensions, got shape {tuple(x.shape)}")
        data, scales, g, *_ = torch.ops.fp4ops.quantize_nvfp4_recipe(x.detach(), g_in, scale_layout, True, False, *recipe)
    return NVFP4Tensor(data, scales, g.detach(), scale_layout)


def quantize_nvfp4_rowwise_columnwise(x: torch.Tensor, global_scale=None, *, scale_layout: str = "linear",
                                      hadamard=False, block_2d: bool = False, stochastic_rounding: bool = False,
                                      seed: int | None = None, offset: int = 0) -> tuple[NVFP4Tensor, NVFP4Tensor]:
    """Both NVFP4 copies a training step needs, from one read of x [..., rows, K] (rows a multiple
    of 16): (x quantized along K, x^T [..., K, rows] quantized along the rows, stored transposed
    as Transformer Engine does). Options as in quantize_nvfp4; with block_2d the two copies share
    every tile scale, so they dequantize to exact transposes of each other. global_scale None
    gives each copy the g of its own amax (they differ only with hadamard)."""
    _check_float_input(x)
    _check_last_dim_multiple(x, NVFP4_BLOCK, "the NVFP4 block")
    _check_scale_layout(scale_layout)
    if x.dim() < 2 or x.shape[-2] % NVFP4_BLOCK != 0:
        raise ValueError(f"x: the columnwise output needs rows (dimension -2) a multiple of 16, got shape {tuple(x.shape)}")
    recipe = _recipe_args(hadamard, block_2d, stochastic_rounding, seed, offset) or (False, -1, None, 0)
    outs = torch.ops.fp4ops.quantize_nvfp4_recipe(x.detach(), _global_scale_tensor(global_scale, x), scale_layout,
                                                  True, True, *recipe)
    return (NVFP4Tensor(outs[0], outs[1], outs[2].detach(), scale_layout),
            NVFP4Tensor(outs[3], outs[4], outs[5].detach(), scale_layout))


@functools.lru_cache(maxsize=256)
def _sign_mask_of_seed(seed: int | None) -> int:
    """The kernels' sign mask for rht_signs(seed) (seed None: Transformer Engine's signs), once per
    seed: drawing the signs builds a torch.Generator, ~30 us of host time (2 CPU cores, torch
    2.15) that a loop quantizing with the same seed every step would otherwise pay every call."""
    from .reference import TE_RHT_SIGNS, hadamard_sign_mask, rht_signs

    return hadamard_sign_mask(TE_RHT_SIGNS if seed is None else rht_signs(seed).tolist())


def _recipe_args(hadamard, block_2d, stochastic_rounding, seed, offset):
    """(block_2d, hadamard_signs, seed, offset) for quantize_nvfp4_recipe, or None when every
    option is off (the plain quantizer gives the same bits, faster)."""
    from .reference import hadamard_sign_mask

    if hadamard is True:
        signs = _sign_mask_of_seed(None)
    elif hadamard is False or hadamard is None:
        signs = -1
    elif isinstance(hadamard, int):
        signs = _sign_mask_of_seed(hadamard)
    else:
        signs = hadamard_sign_mask(torch.as_tensor(hadamard).flatten().tolist())
    if not isinstance(block_2d, bool):
        raise TypeError(f"block_2d: expected a bool, got {type(block_2d).__name__}")
    if block_2d and signs >= 0:
        raise ValueError("block_2d: 16x16 block scaling and the Hadamard rotation cannot be combined (as in Transformer Engine)")
    for name, value in (("offset", offset),) + ((("seed", seed),) if seed is not None else ()):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        if not 0 <= value < 2**63:
            raise ValueError(f"{name}: expected a value in [0, 2^63), got {value}")
    if seed is not None and not stochastic_rounding:
        raise ValueError("seed: given without stochastic_rounding=True")
    if stochastic_rounding and seed is None:
        seed = int(torch.randint(0, 2**62, ()).item())
    if signs < 0 and not block_2d and not stochastic_rounding:
        return None
    return block_2d, signs, seed if stochastic_rounding else None, offset


def quantize_mxfp4(x: torch.Tensor, *, scale_rule: str = "floor", scale_layout: str = "linear") -> MXFP4Tensor:
    """MXFP4-quantize x [..., K] (K a multiple of 32); scale_rule "floor" (OCP) or "rceil"."""
    _check_float_input(x)
    _check_last_dim_multiple(x, MXFP4_BLOCK, "the MXFP4 block")
    if scale_rule not in SCALE_RULES:
        raise ValueError(f"scale_rule: expected 'floor' or 'rceil', got {scale_rule!r}")
    _check_scale_layout(scale_layout)
    data, scales = torch.ops.fp4ops.quantize_mxfp4(x.detach(), scale_rule, scale_layout)
    return MXFP4Tensor(data, scales, scale_layout)


def _check_quantized(q) -> None:
    """data, scales (dtype, shape for the layout, device) of an NVFP4Tensor / MXFP4Tensor."""
    block, scale_dtype = q.block, q.scale_dtype
    _check_tensor(q.data, "data")
    if q.data.dtype != torch.uint8:
        raise TypeError(f"data: expected uint8 (packed E2M1), got {q.data.dtype}")
    if q.data.dim() < 1:
        raise ValueError("data: expected at least 1 dimension, got a 0-dim tensor")
    if q.scales.dtype != scale_dtype:
        raise TypeError(f"scales: expected {scale_dtype}, got {q.scales.dtype}")
    logical = unpacked_shape(q.data.shape)
    _check_last_dim_multiple(q.data, block // 2, f"K a multiple of {block}", name="data")
    _check_scale_layout(q.scale_layout)
    expected = scale_shape(logical, block, q.scale_layout)
    if tuple(q.scales.shape) != expected:
        raise ValueError(f"scales: expected shape {expected} ({q.scale_layout} layout) for data of shape {tuple(q.data.shape)}, got {tuple(q.scales.shape)}")
    if q.scales.device != q.data.device:
        raise ValueError(f"scales: expected a tensor on {q.data.device} (the device of data), got {q.scales.device}")


def _decode_global_scale(q, name: str = "global_scale") -> torch.Tensor:
    """An NVFP4Tensor's global scale as the ops take it: a float32 one-element tensor on data's
    device (a finite Python number > 0 is converted)."""
    g = _global_scale_tensor(q.global_scale, q.data, name, "data")
    if g is None:
        raise TypeError(f"{name}: expected a float32 tensor, got None")
    return g


def dequantize(q, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """NVFP4Tensor or MXFP4Tensor -> dense [..., K] of dtype (float32, float16 or bfloat16)."""
    _check_out_dtype(dtype)
    if isinstance(q, NVFP4Tensor):
        _check_quantized(q)
        g = _decode_global_scale(q)
        return torch.ops.fp4ops.dequantize_nvfp4(q.data, q.scales, g, dtype, q.scale_layout)
    if isinstance(q, MXFP4Tensor):
        _check_quantized(q)
        return torch.ops.fp4ops.dequantize_mxfp4(q.data, q.scales, dtype, q.scale_layout)
    raise TypeError(f"q: expected an NVFP4Tensor or MXFP4Tensor, got {type(q).__name__}")


SCALE_DTYPES = (torch.float8_e4m3fn, torch.float8_e8m0fnu)


def _check_scale_codes(scales, min_dim: int) -> None:
    _check_tensor(scales, "scales")
    if scales.dtype not in SCALE_DTYPES:
        raise TypeError(f"scales: expected float8_e4m3fn (NVFP4) or float8_e8m0fnu (MXFP4) scales, got {scales.dtype}")
    if scales.dim() < min_dim:
        raise ValueError(f"scales: expected at least {min_dim} dimension(s), got {scales.dim()}")


def swizzle_scales(scales: torch.Tensor) -> torch.Tensor:
    """Linear scale codes [..., rows, cols] (or [cols]) -> SPEC 4's 128x4-atom layout, the one
    torch._scaled_mm and cuBLAS take: [..., ceil(rows/128)*128, ceil(cols/4)*4], one matrix per
    leading index, padding bytes 0."""
    _check_scale_codes(scales, 1)
    return torch.ops.fp4ops.swizzle_scales(scales)


def unswizzle_scales(scales: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The inverse of swizzle_scales: swizzled [..., ceil(rows/128)*128, ceil(cols/4)*4] ->
    linear [..., rows, cols] (padding dropped)."""
    _check_scale_codes(scales, 2)
    for name, value in (("rows", rows), ("cols", cols)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name}: expected a value >= 0, got {value}")
    expected = swizzled_shape((*scales.shape[:-2], rows, cols), cols)
    if tuple(scales.shape) != expected:
        raise ValueError(f"scales: expected the swizzled shape {expected} for rows = {rows}, cols = {cols}, got {tuple(scales.shape)}")
    return torch.ops.fp4ops.unswizzle_scales(scales, rows, cols)


def cast_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round each element to E2M1 (no scaling; SPEC 1) and pack pairs: [..., K] -> uint8 [..., K/2]."""
    _check_float_input(x)
    _check_last_dim_multiple(x, 2, "two E2M1 codes per byte")
    return torch.ops.fp4ops.cast_to_e2m1(x)


def cast_from_e2m1(data: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Unpack E2M1 pairs exactly: uint8 (or float4_e2m1fn_x2) [..., N] -> dtype [..., 2N]."""
    _check_tensor(data, "data")
    if data.dtype == torch.float4_e2m1fn_x2:
        data = data.view(torch.uint8)
    if data.dtype != torch.uint8:
        raise TypeError(f"data: expected uint8 or torch.float4_e2m1fn_x2 (packed E2M1), got {data.dtype}")
    if data.dim() < 1:
        raise ValueError("data: expected at least 1 dimension, got a 0-dim tensor")
    _check_out_dtype(dtype)
    return torch.ops.fp4ops.cast_from_e2m1(data, dtype)
