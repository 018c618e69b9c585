"""The NVFP4 training-recipe options (docs/recipe.md) in plain PyTorch: the reference the recipe
kernels are tested against bit for bit. Public through `fp4ops.reference`; builds on SPEC 1-2 of
the oracle (_reference_core) and imports nothing else from fp4ops."""

from __future__ import annotations

import math

import torch

from ._reference_core import E2M1_MAGNITUDES, amax, encode_nvfp4_blocks, nvfp4_global_scale

_MASK32 = 0xFFFFFFFF


def hadamard_sign_mask(signs) -> int:
    """A sign vector S (16 entries of +-1) as the kernels' 16-bit mask: bit i set where S_i = -1."""
    values = [float(s) for s in signs]
    if len(values) != 16 or any(v not in (1.0, -1.0) for v in values):
        raise ValueError(f"hadamard: expected 16 signs of +1 or -1, got {values}")
    return sum(1 << i for i, v in enumerate(values) if v < 0)


def rht_fp32(x: torch.Tensor, signs_mask: int) -> torch.Tensor:
    """What the kernels compute for x' = x diag(S) H16 / 4 on each 16-group of the last dimension:
    fp32 sign flips, the butterfly with stages h = 1, 2, 4, 8 (sums and differences in fp32),
    then * 1/4. Differs from `rht` (float64, one rounding) by fp32 rounding only."""
    signs = torch.tensor([-1.0 if signs_mask >> i & 1 else 1.0 for i in range(16)], device=x.device)
    v = (x.float().reshape(*x.shape[:-1], x.shape[-1] // 16, 16) * signs).clone()
    h = 1
    while h < 16:
        # View the group as [16 / (2h), 2, h]: index 0 of the middle axis holds i with bit h clear.
        pairs = v.reshape(*v.shape[:-1], 16 // (2 * h), 2, h)
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        v = torch.stack((a + b, a - b), dim=-2).reshape(v.shape)
        h *= 2
    return (v * 0.25).reshape(x.shape)


def _mulhilo32(multiplier: int, c: torch.Tensor):
    """(high, low) 32-bit halves of multiplier * c for c int64 holding 32-bit values, without
    int64 overflow: split the constant into 16-bit halves."""
    m_lo, m_hi = multiplier & 0xFFFF, multiplier >> 16
    t0, t1 = m_lo * c, m_hi * c  # each < 2^48
    mid = t0 + ((t1 & 0xFFFF) << 16)  # < 2^49
    return (t1 >> 16) + (mid >> 32), mid & _MASK32


def philox4x32_10(block: torch.Tensor, columnwise: bool, offset: int, seed: int) -> torch.Tensor:
    """Philox4x32-10 words [..., 4] (int64 holding uint32) for counters {block low, block high
    (bit 31 set for the columnwise output), offset low, offset high} and key seed."""
    block = block.to(torch.int64)
    c = [block & _MASK32, (block >> 32) ^ (0x80000000 if columnwise else 0),
         torch.full_like(block, offset & _MASK32), torch.full_like(block, (offset >> 32) & _MASK32)]
    k0, k1 = seed & _MASK32, (seed >> 32) & _MASK32
    for _ in range(10):
        hi0, lo0 = _mulhilo32(0xD2511F53, c[0])
        hi1, lo1 = _mulhilo32(0xCD9E8D57, c[2])
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0, k1 = (k0 + 0x9E3779B9) & _MASK32, (k1 + 0xBB67AE85) & _MASK32
    return torch.stack(c, dim=-1)


_GRID = torch.tensor(E2M1_MAGNITUDES)


def e2m1_encode_stochastic(y: torch.Tensor, random_bytes: torch.Tensor) -> torch.Tensor:
    """Stochastic E2M1 codes: with lo <= |y| < hi the neighbouring grid points, round up to hi iff
    floor(256 (|y| - lo) / (hi - lo)) + r >= 256 for the element's random byte r; |y| >= 6
    saturates; the sign bit of y is kept."""
    a = y.abs()
    grid = _GRID.to(y.device)
    lower = (torch.searchsorted(grid, a.contiguous(), right=True) - 1).clamp(0, 7)
    lo = grid[lower]
    hi = grid[(lower + 1).clamp(max=7)]
    position = torch.where(lower < 7, (a - lo) / (hi - lo).clamp(min=0.5), 0.0)
    up = (torch.floor(position * 256).to(torch.int64) + random_bytes) >= 256
    code = torch.where(a >= 6.0, 7, lower + up.to(torch.int64))
    return (code | (torch.signbit(y).to(torch.int64) << 3)).to(torch.uint8)


def _random_bytes(num_blocks_shape, columnwise: bool, offset: int, seed: int, device) -> torch.Tensor:
    """Byte e % 4 of word e // 4 for element e of each block: [..., n, 16]."""
    count = 1
    for n in num_blocks_shape:
        count *= n
    words = philox4x32_10(torch.arange(count, device=device), columnwise, offset, seed)
    shifts = torch.arange(4, device=device) * 8
    return ((words.unsqueeze(-1) >> shifts) & 0xFF).reshape(*num_blocks_shape, 16)


def _direction(x3: torch.Tensor, g, *, block_2d: bool, signs_mask: int, seed, offset: int, columnwise: bool):
    """One direction of the recipe quantizer on matrices x3 [B, rows, K] (blocks along K):
    (data [B, rows, K/2], scales [B, rows, K/16], g)."""
    count, rows, k = x3.shape
    blocks = x3.float().reshape(count, rows, k // 16, 16)
    if signs_mask >= 0:
        blocks = rht_fp32(blocks, signs_mask)
    finite = torch.isfinite(blocks).all(dim=-1, keepdim=True)
    block_max = torch.where(finite, blocks.abs(), 0.0).amax(dim=-1, keepdim=True)
    if block_2d:  # the 16x16 tile's max and finiteness, repeated over its rows
        strips = -(-rows // 16)
        pad = strips * 16 - rows
        tile_max = torch.nn.functional.pad(block_max, (0, 0, 0, 0, 0, pad)).reshape(count, strips, 16, k // 16, 1)
        tile_finite = torch.nn.functional.pad(finite, (0, 0, 0, 0, 0, pad), value=True).reshape(count, strips, 16, k // 16, 1)
        block_max = tile_max.amax(dim=2, keepdim=True).expand_as(tile_max).reshape(count, strips * 16, k // 16, 1)[:, :rows]
        finite = tile_finite.all(dim=2, keepdim=True).expand_as(tile_finite).reshape(count, strips * 16, k // 16, 1)[:, :rows]
    if g is None:
        g = nvfp4_global_scale(amax(blocks))
    encoder = None
    if seed is not None:
        random_bytes = _random_bytes(blocks.shape[:-1], columnwise, offset, seed, x3.device)
        encoder = lambda y: e2m1_encode_stochastic(y, random_bytes)  # noqa: E731
    data, scales = encode_nvfp4_blocks(blocks, block_max, finite, g, encoder)
    return data, scales, g.clone()


def quantize_nvfp4_recipe(x: torch.Tensor, global_scale=None, *, rowwise: bool = True, columnwise: bool = False,
                          block_2d: bool = False, hadamard_signs: int = -1, seed: int | None = None, offset: int = 0):
    """(data, scales, g, data_t, scales_t, g_t) with linear scales, as the quantize_nvfp4_recipe
    op returns them: the rowwise output of x [..., rows, K] and the columnwise output of x^T
    ([..., K, rows], blocks along the rows). global_scale None: each direction's g from the amax
    of what it quantizes (after the rotation)."""
    shape = x.shape
    # Sizes written out, not -1: with zero rows a -1 would be ambiguous.
    x3 = x.reshape(math.prod(shape[:-2]), shape[-2] if x.dim() >= 2 else 1, shape[-1])
    g = None if global_scale is None else torch.as_tensor(global_scale, dtype=torch.float32, device=x.device).reshape(())
    if g is None and signs_mask_is_off(hadamard_signs):
        g = nvfp4_global_scale(amax(x))
    options = dict(block_2d=block_2d, signs_mask=hadamard_signs, seed=seed, offset=offset)
    empty = (torch.empty(0, dtype=torch.uint8, device=x.device), torch.empty(0, dtype=torch.float8_e4m3fn, device=x.device))
    row = col = None
    if rowwise:
        data, scales, g_row = _direction(x3, g, columnwise=False, **options)
        row = (data.reshape(*shape[:-1], shape[-1] // 2), scales.reshape(*shape[:-1], shape[-1] // 16), g_row)
    if columnwise:
        t_shape = (*shape[:-2], shape[-1], shape[-2])
        data, scales, g_col = _direction(x3.transpose(1, 2), g, columnwise=True, **options)
        col = (data.reshape(*t_shape[:-1], t_shape[-1] // 2), scales.reshape(*t_shape[:-1], t_shape[-1] // 16), g_col)
    row = row or (*empty, col[2])
    col = col or (*empty, row[2])
    return (*row, *col)


def signs_mask_is_off(hadamard_signs: int) -> bool:
    return hadamard_signs < 0
