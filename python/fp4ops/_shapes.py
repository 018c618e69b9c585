"""Output shapes of every op, shared by the checked wrappers and the fake kernels."""

from __future__ import annotations

import torch

NVFP4_BLOCK = 16
MXFP4_BLOCK = 32


def packed_shape(shape: torch.Size | tuple) -> tuple:
    """[..., K] -> [..., K/2]: two E2M1 codes per byte."""
    return (*shape[:-1], shape[-1] // 2)


def unpacked_shape(packed: torch.Size | tuple) -> tuple:
    return (*packed[:-1], packed[-1] * 2)


def scale_shape(shape: torch.Size | tuple, block: int) -> tuple:
    """[..., K] -> [..., K/block]: one scale per block along the last dimension."""
    return (*shape[:-1], shape[-1] // block)
