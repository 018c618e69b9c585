"""Argument checks of the public functions and tensor methods, in one place.

Errors use the same words as the C++ checks: the argument, what was expected, what was given.
Wrong types and dtypes raise TypeError; wrong values, shapes and devices raise ValueError.
"""

from __future__ import annotations

import operator

import torch

from ._formats import FLOAT_DTYPES, FORMATS, SCALE_DTYPES, SCALE_LAYOUTS, SCALE_RULES
from ._shapes import scale_shape, swizzled_shape, unpacked_shape

_FLT_MAX = torch.finfo(torch.float32).max
_FLT_HALF_MIN_SUBNORMAL = 2.0**-150  # anything above rounds to a non-zero fp32


def check_tensor(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")


def check_float_input(x, name: str = "x") -> None:
    check_tensor(x, name)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError(f"{name}: expected at least 1 dimension, got a 0-dim tensor")


def check_no_grad(x, name: str, function: str) -> None:
    """The float-output ops have no backward: refuse an input that would need one, rather than
    hand back an output whose backward fails later, away from the call that caused it."""
    if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{name}: requires grad, but fp4ops.{function} has no backward; "
                           f"call it under torch.no_grad() or pass {name}.detach()")


def without_grad(t):
    """t as an op without a backward takes it (the quantizers' and producers' inputs, which may
    require grad: a weight, an RMSNorm's Parameter): detached where it requires grad, so that no
    output carries a backward the op does not have; else t itself (a detach is a dispatched op,
    host time on every call of a decode step). Anything but a tensor passes through."""
    return t.detach() if isinstance(t, torch.Tensor) and t.requires_grad else t


def check_last_dim_multiple(x: torch.Tensor, multiple: int, what: str, name: str = "x") -> None:
    if x.shape[-1] % multiple != 0:
        raise ValueError(f"{name}: expected the last dimension to be a multiple of {multiple} ({what}), got {x.shape[-1]}")


def check_out_dtype(dtype) -> None:
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype: expected torch.float32, torch.float16 or torch.bfloat16, got {dtype}")


def check_scale_layout(scale_layout) -> None:
    if scale_layout not in SCALE_LAYOUTS:
        raise ValueError(f"scale_layout: expected 'linear' or 'swizzled', got {scale_layout!r}")


def check_scale_rule(scale_rule) -> None:
    if scale_rule not in SCALE_RULES:
        raise ValueError(f"scale_rule: expected 'floor' or 'rceil', got {scale_rule!r}")


def check_format(format) -> None:
    if not isinstance(format, str):
        raise TypeError(f"format: expected 'nvfp4' or 'mxfp4', got {type(format).__name__}")
    if format not in FORMATS:
        raise ValueError(f"format: expected 'nvfp4' or 'mxfp4', got {format!r}")


def check_format_scale_rule(format: str, scale_rule) -> None:
    """scale_rule is MXFP4's choice ('floor' or 'rceil'); NVFP4 takes only the default."""
    check_scale_rule(scale_rule)
    if format == "nvfp4" and scale_rule != "floor":
        raise ValueError(f"scale_rule: {scale_rule!r} is an MXFP4 rule; NVFP4 block scales follow SPEC 2.3 "
                         "(leave the default 'floor')")


def skip_patterns(skip) -> tuple[str, ...]:
    """`skip` (names containing any of them stay dense) as a tuple of strings: one string is one
    pattern, not the characters a loop over it would give."""
    if isinstance(skip, str):
        return (skip,)
    try:
        patterns = tuple(skip)
    except TypeError:
        raise TypeError(f"skip: expected a string or an iterable of strings, got {type(skip).__name__}") from None
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"skip: expected strings, got {type(pattern).__name__} {pattern!r}")
    return patterns


def check_same_device(b, a, name: str = "b", ref_name: str = "a") -> None:
    if b.device != a.device:
        raise ValueError(f"{name}: expected a tensor on {a.device} (the device of {ref_name}), got {b.device}")


def global_scale_tensor(global_scale, x: torch.Tensor, name: str = "global_scale", x_name: str = "x"):
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


def decode_global_scale(q, name: str = "global_scale") -> torch.Tensor:
    """An NVFP4Tensor's global scale as the ops take it: a float32 one-element tensor on data's
    device (a finite Python number > 0 is converted)."""
    g = global_scale_tensor(q.global_scale, q.data, name, "data")
    if g is None:
        raise TypeError(f"{name}: expected a float32 tensor, got None")
    return g


def check_quantized(q, name: str = "") -> None:
    """data, scales (dtype, shape for the layout, device) of an NVFP4Tensor / MXFP4Tensor; with a
    name (the argument's), the messages say `name.data`, `name.scales`."""
    block, scale_dtype = q.block, q.scale_dtype
    data, scales = f"{name}.data" if name else "data", f"{name}.scales" if name else "scales"
    check_tensor(q.data, data)
    if q.data.dtype != torch.uint8:
        raise TypeError(f"{data}: expected uint8 (packed E2M1), got {q.data.dtype}")
    if q.data.dim() < 1:
        raise ValueError(f"{data}: expected at least 1 dimension, got a 0-dim tensor")
    if q.scales.dtype != scale_dtype:
        raise TypeError(f"{scales}: expected {scale_dtype}, got {q.scales.dtype}")
    logical = unpacked_shape(q.data.shape)
    # The message is formatted only on failure: under torch.compile(dynamic=True), with an FP4
    # tensor among the compiled function's inputs, torch 2.11 reads its class's block as a
    # symbolic int, which dynamo cannot format into a string (a graph break, an error at fullgraph).
    if q.data.shape[-1] % (block // 2) != 0:
        check_last_dim_multiple(q.data, block // 2, f"K a multiple of {block}", name=data)
    check_scale_layout(q.scale_layout)
    expected = scale_shape(logical, block, q.scale_layout)
    if tuple(q.scales.shape) != expected:
        raise ValueError(f"{scales}: expected shape {expected} ({q.scale_layout} layout) for data of shape {tuple(q.data.shape)}, got {tuple(q.scales.shape)}")
    if q.scales.device != q.data.device:
        raise ValueError(f"{scales}: expected a tensor on {q.data.device} (the device of {data}), got {q.scales.device}")


def _dims_indexed(index) -> int:
    """How many leading dimensions `index` takes, as torch would read it on a tensor; TypeError for
    what an FP4 tensor's rows cannot be selected by."""
    if isinstance(index, tuple):
        return sum(_dims_indexed(part) for part in index)
    if index is None or index is Ellipsis:
        raise TypeError("index: None and ... are not taken (index the leading dimensions, before K)")
    if isinstance(index, torch.Tensor):
        if index.dtype == torch.bool:
            return max(index.dim(), 1)
        if index.dtype.is_floating_point or index.dtype.is_complex:
            raise TypeError(f"index: expected integer or bool indices, got a {index.dtype} tensor")
        return 1
    if isinstance(index, (slice, list)):
        return 1
    try:
        operator.index(index)
    except TypeError:
        raise TypeError(f"index: expected an int, slice, list, integer or bool tensor, or a tuple of them; "
                        f"got {type(index).__name__}") from None
    return 1


def check_row_index(q, index) -> None:
    """Rows of an FP4 tensor are selected over its leading dimensions only: its last (K, packed two
    elements a byte, one scale a block) is not indexable element by element; and only with linear
    scales, since the swizzled layout interleaves 128-row groups (SPEC 4)."""
    if q.scale_layout != "linear":
        raise ValueError("index: rows of a tensor with swizzled scales cannot be selected (SPEC 4 interleaves "
                         "128-row groups); select them from q.with_scale_layout('linear')")
    leading, indexed = q.data.dim() - 1, _dims_indexed(index)
    if indexed > leading:
        raise IndexError(f"index: an FP4 tensor of shape {tuple(q.shape)} is indexed over its {leading} leading "
                         f"dimension(s) only, not K; got an index over {indexed}")


def check_scale_codes(scales, min_dim: int) -> None:
    check_tensor(scales, "scales")
    if scales.dtype not in SCALE_DTYPES:
        raise TypeError(f"scales: expected float8_e4m3fn (NVFP4) or float8_e8m0fnu (MXFP4) scales, got {scales.dtype}")
    if scales.dim() < min_dim:
        raise ValueError(f"scales: expected at least {min_dim} dimension(s), got {scales.dim()}")


def check_unswizzle_args(scales, rows, cols) -> None:
    """Swizzled scale codes and the linear shape [rows, cols] they are unswizzled to."""
    check_scale_codes(scales, 2)
    for name, value in (("rows", rows), ("cols", cols)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name}: expected a value >= 0, got {value}")
    expected = swizzled_shape((*scales.shape[:-2], rows, cols), cols)
    if tuple(scales.shape) != expected:
        raise ValueError(f"scales: expected the swizzled shape {expected} for rows = {rows}, cols = {cols}, got {tuple(scales.shape)}")
