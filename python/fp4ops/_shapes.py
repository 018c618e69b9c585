"""Output shapes of every op, shared by the checked wrappers and the fake kernels."""

from __future__ import annotations

import torch


def packed_shape(shape: torch.Size | tuple) -> tuple:
    """[..., K] -> [..., K/2]: two E2M1 codes per byte."""
    return (*shape[:-1], shape[-1] // 2)


def unpacked_shape(packed: torch.Size | tuple) -> tuple:
    return (*packed[:-1], packed[-1] * 2)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def matrix_rows(shape: torch.Size | tuple) -> int:
    """Rows of each scale matrix of a tensor [..., rows, K]; a 1-D tensor is one row."""
    return shape[-2] if len(shape) >= 2 else 1


def swizzled_shape(shape: torch.Size | tuple, cols: int) -> tuple:
    """SPEC 4: the scales of [..., rows, K] with `cols` scale columns, swizzled: one padded
    [ceil(rows/128)*128, ceil(cols/4)*4] matrix per leading index (a 1-D tensor has one)."""
    lead = tuple(shape[:-2]) if len(shape) >= 2 else ()
    return (*lead, _round_up(matrix_rows(shape), 128), _round_up(cols, 4))


def scale_shape(shape: torch.Size | tuple, block: int, scale_layout: str = "linear") -> tuple:
    """[..., K] -> [..., K/block]: one scale per block along the last dimension (linear), or its
    swizzled padded shape."""
    if scale_layout == "swizzled":
        return swizzled_shape(shape, shape[-1] // block)
    return (*shape[:-1], shape[-1] // block)
