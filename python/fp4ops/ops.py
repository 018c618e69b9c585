"""The public functions: checked, thin wrappers over torch.ops.fp4ops.* (SPEC section 6).

The checks and their messages are _checks.py's, the format facts _formats.py's; this module only
puts them together and calls the operators.
"""

from __future__ import annotations

import torch

from ._checks import (
    check_float_input,
    check_last_dim_multiple,
    check_no_grad,
    check_out_dtype,
    check_scale_codes,
    check_scale_layout,
    check_scale_rule,
    check_tensor,
    check_unswizzle_args,
    global_scale_tensor,
    without_grad,
)
from ._formats import MXFP4_BLOCK, NVFP4_BLOCK, global_scale_from_amax, hadamard_sign_mask, sign_mask_of_seed
from .tensor import MXFP4Tensor, NVFP4Tensor


def amax(x: torch.Tensor) -> torch.Tensor:
    """max |x| over the finite elements of x (0 if none), as a float32 0-dim tensor on x's device."""
    check_float_input(x)
    check_no_grad(x, "x", "amax")
    return torch.ops.fp4ops.amax(x)


def _group_global_scale(x: torch.Tensor, group) -> torch.Tensor:
    """SPEC 2.2's g from the amax of every shard in `group`: local amax, all-reduce max, then
    g = amax / 2688 (1 when 0), the same fp32 division the kernels do. No host sync."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("amax_group: torch.distributed is not initialized")
    group_amax = torch.ops.fp4ops.amax(without_grad(x))
    dist.all_reduce(group_amax, op=dist.ReduceOp.MAX, group=group)
    return global_scale_from_amax(group_amax)


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
    Quantization is not differentiable: x (a weight, say) and a global_scale tensor may require
    grad; nothing returned does.
    scale_layout "swizzled" writes the scales straight into SPEC 4's 128x4-atom layout (the one
    torch._scaled_mm takes), [..., ceil(rows/128)*128, ceil(K/64)*4] with zero padding.

    Training-recipe options (docs/recipe.md), fused into one kernel:
    hadamard: True (Transformer Engine's sign vector), an int seed (random signs) or 16 signs:
      quantize x' = x H (16-point Random Hadamard Transform per block; g from amax(x')).
      `reference.inverse_rht` undoes it; rotating both GEMM operands leaves the product unchanged.
    block_2d: one scale per 16x16 tile (weights), repeated on each of the tile's rows.
    stochastic_rounding: E2M1 elements rounded stochastically, reproducible from (seed, offset)
      (Philox4x32-10); seed None draws one from torch's default generator (on the host: under
      torch.compile a graph break, refused with fullgraph=True, where an int seed compiles).
    """
    check_float_input(x)
    check_last_dim_multiple(x, NVFP4_BLOCK, "the NVFP4 block")
    check_scale_layout(scale_layout)
    if amax_group is not None:
        if global_scale is not None:
            raise ValueError("amax_group: give either amax_group or global_scale, not both")
        if hadamard is not False:
            raise ValueError("amax_group: the group amax is of x itself; it cannot be combined with hadamard")
        global_scale = _group_global_scale(x, amax_group)
    recipe = _recipe_args(hadamard, block_2d, stochastic_rounding, seed, offset)
    g_in = without_grad(global_scale_tensor(global_scale, x))
    if recipe is None:
        data, scales, g = torch.ops.fp4ops.quantize_nvfp4(without_grad(x), g_in, scale_layout)
    else:
        if block_2d and x.dim() < 2:
            raise ValueError(f"x: 16x16 block scaling needs at least 2 dimensions, got shape {tuple(x.shape)}")
        data, scales, g, *_ = torch.ops.fp4ops.quantize_nvfp4_recipe(without_grad(x), g_in, scale_layout, True, False, *recipe)
    return NVFP4Tensor(data, scales, g, scale_layout)


def quantize_nvfp4_rowwise_columnwise(x: torch.Tensor, global_scale=None, *, scale_layout: str = "linear",
                                      hadamard=False, block_2d: bool = False, stochastic_rounding: bool = False,
                                      seed: int | None = None, offset: int = 0) -> tuple[NVFP4Tensor, NVFP4Tensor]:
    """Both NVFP4 copies a training step needs, from one read of x [..., rows, K] (rows a multiple
    of 16): (x quantized along K, x^T [..., K, rows] quantized along the rows, stored transposed
    as Transformer Engine does). Options as in quantize_nvfp4; with block_2d the two copies share
    every tile scale, so they dequantize to exact transposes of each other. global_scale None
    gives each copy the g of its own amax (they differ only with hadamard)."""
    check_float_input(x)
    check_last_dim_multiple(x, NVFP4_BLOCK, "the NVFP4 block")
    check_scale_layout(scale_layout)
    if x.dim() < 2 or x.shape[-2] % NVFP4_BLOCK != 0:
        raise ValueError(f"x: the columnwise output needs rows (dimension -2) a multiple of 16, got shape {tuple(x.shape)}")
    recipe = _recipe_args(hadamard, block_2d, stochastic_rounding, seed, offset) or (False, -1, None, 0)
    outs = torch.ops.fp4ops.quantize_nvfp4_recipe(without_grad(x), without_grad(global_scale_tensor(global_scale, x)),
                                                  scale_layout, True, True, *recipe)
    return (NVFP4Tensor(outs[0], outs[1], outs[2], scale_layout),
            NVFP4Tensor(outs[3], outs[4], outs[5], scale_layout))


def _hadamard_mask(hadamard) -> int:
    """The kernels' sign mask for `hadamard` (True, False/None, an int seed or 16 signs); -1: off."""
    if hadamard is True:
        return sign_mask_of_seed(None)
    if hadamard is False or hadamard is None:
        return -1
    if isinstance(hadamard, int):
        if not -2**63 <= hadamard < 2**64:
            raise ValueError(f"hadamard: a seed must be in [-2^63, 2^64) (torch.Generator's seeds), got {hadamard}")
        return sign_mask_of_seed(hadamard)
    if isinstance(hadamard, (str, bytes)):
        raise TypeError(f"hadamard: expected a bool, an int seed or 16 signs of +1 or -1, got {type(hadamard).__name__}")
    try:
        signs = torch.as_tensor(hadamard).flatten().tolist()
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"hadamard: expected a bool, an int seed or 16 signs of +1 or -1, "
                        f"got {type(hadamard).__name__}") from None
    return hadamard_sign_mask(signs)


def _draw_seed() -> int:
    """A stochastic-rounding seed from torch's default generator, on the host."""
    return int(torch.randint(0, 2**62, ()).item())


# Kept out of compiled graphs: traced, the drawn int would reach the op as a symbolic value, which
# its `int?` seed does not take. torch.compile breaks the graph there, and under fullgraph refuses
# the call with this reason.
_DRAW_SEED_REASON = "stochastic_rounding with seed=None draws its seed on the host; under fullgraph give seed=<int>"
try:
    _draw_seed = torch.compiler.disable(_draw_seed, reason=_DRAW_SEED_REASON)
except TypeError:  # torch.compiler.disable without `reason`
    _draw_seed = torch.compiler.disable(_draw_seed)


def _recipe_args(hadamard, block_2d, stochastic_rounding, seed, offset):
    """(block_2d, hadamard_signs, seed, offset) for quantize_nvfp4_recipe, or None when every
    option is off (the plain quantizer gives the same bits, faster)."""
    signs = _hadamard_mask(hadamard)
    for name, flag in (("block_2d", block_2d), ("stochastic_rounding", stochastic_rounding)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}: expected a bool, got {type(flag).__name__}")
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
        seed = _draw_seed()
    if signs < 0 and not block_2d and not stochastic_rounding:
        return None
    return block_2d, signs, seed if stochastic_rounding else None, offset


def quantize_mxfp4(x: torch.Tensor, *, scale_rule: str = "floor", scale_layout: str = "linear") -> MXFP4Tensor:
    """MXFP4-quantize x [..., K] (K a multiple of 32); scale_rule "floor" (OCP) or "rceil"."""
    check_float_input(x)
    check_last_dim_multiple(x, MXFP4_BLOCK, "the MXFP4 block")
    check_scale_rule(scale_rule)
    check_scale_layout(scale_layout)
    data, scales = torch.ops.fp4ops.quantize_mxfp4(without_grad(x), scale_rule, scale_layout)
    return MXFP4Tensor(data, scales, scale_layout)


def dequantize(q, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """NVFP4Tensor or MXFP4Tensor -> dense [..., K] of dtype (float32, float16 or bfloat16)."""
    check_out_dtype(dtype)
    if isinstance(q, (NVFP4Tensor, MXFP4Tensor)):
        return q.dequantize(dtype)
    raise TypeError(f"q: expected an NVFP4Tensor or MXFP4Tensor, got {type(q).__name__}")


def swizzle_scales(scales: torch.Tensor) -> torch.Tensor:
    """Linear scale codes [..., rows, cols] (or [cols]) -> SPEC 4's 128x4-atom layout, the one
    torch._scaled_mm and cuBLAS take: [..., ceil(rows/128)*128, ceil(cols/4)*4], one matrix per
    leading index, padding bytes 0."""
    check_scale_codes(scales, 1)
    return torch.ops.fp4ops.swizzle_scales(scales)


def unswizzle_scales(scales: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The inverse of swizzle_scales: swizzled [..., ceil(rows/128)*128, ceil(cols/4)*4] ->
    linear [..., rows, cols] (padding dropped)."""
    check_unswizzle_args(scales, rows, cols)
    return torch.ops.fp4ops.unswizzle_scales(scales, rows, cols)


def cast_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round each element to E2M1 (no scaling; SPEC 1) and pack pairs: [..., K] -> uint8 [..., K/2]."""
    check_float_input(x)
    check_last_dim_multiple(x, 2, "two E2M1 codes per byte")
    return torch.ops.fp4ops.cast_to_e2m1(x)


def cast_from_e2m1(data: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Unpack E2M1 pairs exactly: uint8 (or float4_e2m1fn_x2) [..., N] -> dtype [..., 2N]."""
    check_tensor(data, "data")
    if data.dtype == torch.float4_e2m1fn_x2:
        data = data.view(torch.uint8)
    if data.dtype != torch.uint8:
        raise TypeError(f"data: expected uint8 or torch.float4_e2m1fn_x2 (packed E2M1), got {data.dtype}")
    if data.dim() < 1:
        raise ValueError("data: expected at least 1 dimension, got a 0-dim tensor")
    check_out_dtype(dtype)
    return torch.ops.fp4ops.cast_from_e2m1(data, dtype)
