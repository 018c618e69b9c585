"""The bad-input matrix: every public function and op against inputs it must refuse.

Each case builds its inputs on the device under test (and, for the mixed-device cases, on a
second device), calls one function and names the exception and the message fragment it must
raise. `tests/test_bad_inputs.py` runs the matrix; `tools/bad_input_table.py` prints it for
docs/reliability.md. Kinds follow the reliability issue's list."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import torch

import fp4ops

ops = torch.ops.fp4ops


class Inputs:
    """Valid tensors on `device` (and `other`, the second device of the mixed-device cases), made
    on first use so a case pays only for what it touches."""

    def __init__(self, device: str, other: str = "cpu"):
        self.device, self.other = device, other

    @cached_property
    def x(self) -> torch.Tensor:  # [2, 32] float32
        return torch.randn(2, 32, device=self.device)

    @cached_property
    def nv(self) -> fp4ops.NVFP4Tensor:
        return fp4ops.quantize_nvfp4(self.x)

    @cached_property
    def mx(self) -> fp4ops.MXFP4Tensor:
        return fp4ops.quantize_mxfp4(self.x)

    @cached_property
    def b(self) -> torch.Tensor:  # a GEMV vector for nv / mx
        return torch.randn(32, device=self.device, dtype=torch.float16)

    def nvfp4(self, data=None, scales=None, global_scale=..., layout="linear") -> fp4ops.NVFP4Tensor:
        """self.nv with some fields replaced (the containers do not check; the functions must)."""
        g = self.nv.global_scale if global_scale is ... else global_scale
        return fp4ops.NVFP4Tensor(self.nv.data if data is None else data,
                                  self.nv.scales if scales is None else scales, g, layout)

    def mxfp4(self, data=None, scales=None, layout="linear") -> fp4ops.MXFP4Tensor:
        return fp4ops.MXFP4Tensor(self.mx.data if data is None else data,
                                  self.mx.scales if scales is None else scales, layout)


@dataclass(frozen=True)
class BadInput:
    function: str  # what is called
    kind: str  # the category
    what: str  # the bad input, in words
    call: Callable[[Inputs], object]
    exception: type[Exception]
    message: str  # a fragment of the error message: names the argument
    devices: str = "one"  # "one": any single device; "mixed": device + CPU; "two_gpus": cuda:1 + cuda:0


FLOAT_ERR = "expected float32, float16 or bfloat16"
CASES = [
    # --- dtypes, integer inputs included ---
    BadInput("quantize_nvfp4", "integer input", "x int32", lambda t: fp4ops.quantize_nvfp4(t.x.int()), TypeError, f"x: {FLOAT_ERR}, got torch.int32"),
    BadInput("quantize_nvfp4", "dtype", "x float64", lambda t: fp4ops.quantize_nvfp4(t.x.double()), TypeError, f"x: {FLOAT_ERR}, got torch.float64"),
    BadInput("quantize_nvfp4", "dtype", "x a list", lambda t: fp4ops.quantize_nvfp4([1.0] * 16), TypeError, "x: expected a torch.Tensor, got list"),
    BadInput("quantize_nvfp4", "dtype", "global_scale float64 tensor", lambda t: fp4ops.quantize_nvfp4(t.x, t.x.new_tensor(1.0).double()), TypeError, "global_scale: expected a float32 tensor, got torch.float64"),
    BadInput("quantize_nvfp4", "dtype", "global_scale a str", lambda t: fp4ops.quantize_nvfp4(t.x, "1.0"), TypeError, "global_scale: expected None, a float or a float32 tensor, got str"),
    BadInput("quantize_mxfp4", "integer input", "x uint8", lambda t: fp4ops.quantize_mxfp4(t.x.to(torch.uint8)), TypeError, f"x: {FLOAT_ERR}, got torch.uint8"),
    BadInput("quantize_nvfp4_rowwise_columnwise", "integer input", "x int64", lambda t: fp4ops.quantize_nvfp4_rowwise_columnwise(t.x.long()), TypeError, f"x: {FLOAT_ERR}, got torch.int64"),
    BadInput("amax", "integer input", "x int64", lambda t: fp4ops.amax(t.x.long()), TypeError, f"x: {FLOAT_ERR}, got torch.int64"),
    BadInput("cast_to_e2m1", "integer input", "x int16", lambda t: fp4ops.cast_to_e2m1(t.x.short()), TypeError, f"x: {FLOAT_ERR}, got torch.int16"),
    BadInput("cast_from_e2m1", "dtype", "data int8", lambda t: fp4ops.cast_from_e2m1(t.nv.data.view(torch.int8)), TypeError, "data: expected uint8 or torch.float4_e2m1fn_x2"),
    BadInput("cast_from_e2m1", "dtype", "dtype float64", lambda t: fp4ops.cast_from_e2m1(t.nv.data, torch.float64), TypeError, "dtype: expected torch.float32, torch.float16 or torch.bfloat16, got torch.float64"),
    BadInput("dequantize", "dtype", "NVFP4 with E8M0 scales", lambda t: fp4ops.dequantize(t.nvfp4(scales=t.mx.scales.expand(2, 2).contiguous())), TypeError, "scales: expected torch.float8_e4m3fn, got torch.float8_e8m0fnu"),
    BadInput("dequantize", "dtype", "MXFP4 with E4M3 scales", lambda t: fp4ops.dequantize(t.mxfp4(scales=t.nv.scales[:, :1].contiguous())), TypeError, "scales: expected torch.float8_e8m0fnu, got torch.float8_e4m3fn"),
    BadInput("dequantize", "dtype", "data float32", lambda t: fp4ops.dequantize(t.nvfp4(data=t.nv.data.float())), TypeError, "data: expected uint8 (packed E2M1), got torch.float32"),
    BadInput("dequantize", "dtype", "dtype int8", lambda t: fp4ops.dequantize(t.nv, torch.int8), TypeError, "dtype: expected torch.float32, torch.float16 or torch.bfloat16, got torch.int8"),
    BadInput("dequantize", "dtype", "global_scale None", lambda t: fp4ops.dequantize(t.nvfp4(global_scale=None)), TypeError, "global_scale: expected a float32 tensor, got None"),
    BadInput("dequantize", "dtype", "q a dense tensor", lambda t: fp4ops.dequantize(t.x), TypeError, "q: expected an NVFP4Tensor or MXFP4Tensor, got Tensor"),
    BadInput("gemv", "dtype", "out_dtype float64", lambda t: fp4ops.gemv(t.nv, t.b, out_dtype=torch.float64), TypeError, "out_dtype: expected torch.float16, torch.bfloat16 or torch.float32"),
    BadInput("gemv", "integer input", "b int32", lambda t: fp4ops.gemv(t.nv, t.b.int()), TypeError, "b: expected float16 or bfloat16 (or an FP4 tensor), got torch.int32"),
    BadInput("gemv", "dtype", "b float32", lambda t: fp4ops.gemv(t.nv, t.b.float()), TypeError, "b: expected float16 or bfloat16 (or an FP4 tensor), got torch.float32"),
    BadInput("gemv", "dtype", "a NVFP4, b MXFP4", lambda t: fp4ops.gemv(t.nv, fp4ops.quantize_mxfp4(t.b)), TypeError, "b: expected NVFP4Tensor (the format of a) or a dense tensor, got MXFP4Tensor"),
    BadInput("gemv", "dtype", "a a dense tensor", lambda t: fp4ops.gemv(t.x, t.b), TypeError, "a: expected an NVFP4Tensor or MXFP4Tensor, got Tensor"),
    BadInput("gemv", "dtype", "a NVFP4 with E8M0 scales", lambda t: fp4ops.gemv(t.nvfp4(scales=t.mx.scales.expand(2, 2).contiguous()), t.b), TypeError, "scales: expected torch.float8_e4m3fn, got torch.float8_e8m0fnu"),
    BadInput("gemv", "dtype", "a.global_scale float64", lambda t: fp4ops.gemv(t.nvfp4(global_scale=t.nv.global_scale.double()), t.b), TypeError, "a.global_scale: expected a float32 tensor, got torch.float64"),
    BadInput("gemv", "dtype", "FP4 b without a global scale", lambda t: fp4ops.gemv(t.nv, fp4ops.NVFP4Tensor(t.nv.data[0], t.nv.scales[0], None)), TypeError, "b.global_scale: expected a float32 tensor, got None"),
    BadInput("swizzle_scales", "dtype", "scales float32", lambda t: fp4ops.swizzle_scales(t.x), TypeError, "scales: expected float8_e4m3fn (NVFP4) or float8_e8m0fnu (MXFP4) scales, got torch.float32"),
    # --- shapes that do not match ---
    BadInput("quantize_nvfp4", "shape", "x 0-dim", lambda t: fp4ops.quantize_nvfp4(t.x[0, 0]), ValueError, "x: expected at least 1 dimension, got a 0-dim tensor"),
    BadInput("quantize_nvfp4_rowwise_columnwise", "shape", "rows 2 (not a multiple of 16)", lambda t: fp4ops.quantize_nvfp4_rowwise_columnwise(t.x), ValueError, "x: the columnwise output needs rows (dimension -2) a multiple of 16"),
    BadInput("quantize_nvfp4", "shape", "block_2d on a 1-D x", lambda t: fp4ops.quantize_nvfp4(t.x[0], block_2d=True), ValueError, "x: 16x16 block scaling needs at least 2 dimensions"),
    BadInput("dequantize", "shape", "NVFP4 scales [2, 1] for data [2, 16]", lambda t: fp4ops.dequantize(t.nvfp4(scales=t.nv.scales[:, :1])), ValueError, "scales: expected shape (2, 2) (linear layout) for data of shape (2, 16), got (2, 1)"),
    BadInput("dequantize", "shape", "MXFP4 scales [1, 1] for data [2, 16]", lambda t: fp4ops.dequantize(t.mxfp4(scales=t.mx.scales[:1])), ValueError, "scales: expected shape (2, 1) (linear layout) for data of shape (2, 16), got (1, 1)"),
    BadInput("dequantize", "shape", "data 0-dim", lambda t: fp4ops.dequantize(t.nvfp4(data=t.nv.data[0, 0])), ValueError, "data: expected at least 1 dimension, got a 0-dim tensor"),
    BadInput("gemv", "shape", "a [2, 32], b [64]", lambda t: fp4ops.gemv(t.nv, t.b.repeat(2)), ValueError, "b: expected shape (32,) for a of shape (2, 32), got (64,)"),
    BadInput("gemv", "shape", "a [1, 2, 32], b [3, 32]", lambda t: fp4ops.gemv(t.nvfp4(t.nv.data[None], t.nv.scales[None]), t.b.expand(3, 32)), ValueError, "b: expected shape (1, 32) for a of shape (1, 2, 32), got (3, 32)"),
    BadInput("gemv", "shape", "FP4 b with K 64 for a with K 32", lambda t: fp4ops.gemv(t.nv, fp4ops.quantize_nvfp4(t.b.repeat(2))), ValueError, "b: expected shape (32,) for a of shape (2, 32), got (64,)"),
    BadInput("gemv", "shape", "a 4-D", lambda t: fp4ops.gemv(t.nvfp4(t.nv.data[None, None], t.nv.scales[None, None]), t.b), ValueError, "a: expected shape [M, K] or [L, M, K], got (1, 1, 2, 32)"),
    BadInput("unswizzle_scales", "shape", "rows -1", lambda t: fp4ops.unswizzle_scales(fp4ops.swizzle_scales(t.nv.scales), -1, 2), ValueError, "rows: expected a value >= 0, got -1"),
    BadInput("unswizzle_scales", "shape", "cols a float", lambda t: fp4ops.unswizzle_scales(fp4ops.swizzle_scales(t.nv.scales), 2, 2.0), TypeError, "cols: expected an int, got float"),
    # --- K not a multiple of the block ---
    BadInput("quantize_nvfp4", "K not a multiple of the block", "K 24", lambda t: fp4ops.quantize_nvfp4(t.x[:, :24]), ValueError, "x: expected the last dimension to be a multiple of 16 (the NVFP4 block), got 24"),
    BadInput("quantize_mxfp4", "K not a multiple of the block", "K 16", lambda t: fp4ops.quantize_mxfp4(t.x[:, :16]), ValueError, "x: expected the last dimension to be a multiple of 32 (the MXFP4 block), got 16"),
    BadInput("quantize_nvfp4_rowwise_columnwise", "K not a multiple of the block", "K 8", lambda t: fp4ops.quantize_nvfp4_rowwise_columnwise(t.x[:, :8]), ValueError, "x: expected the last dimension to be a multiple of 16"),
    BadInput("dequantize", "K not a multiple of the block", "MXFP4 data with K 16", lambda t: fp4ops.dequantize(t.mxfp4(data=t.nv.data[:, :8])), ValueError, "data: expected the last dimension to be a multiple of 16 (K a multiple of 32)"),
    BadInput("gemv", "K not a multiple of the block", "MXFP4 a with K 16", lambda t: fp4ops.gemv(t.mxfp4(data=t.nv.data[:, :8]), t.b[:16]), ValueError, "data: expected the last dimension to be a multiple of 16 (K a multiple of 32)"),
    BadInput("cast_to_e2m1", "K not a multiple of the block", "last dimension 3", lambda t: fp4ops.cast_to_e2m1(t.x[:, :3]), ValueError, "x: expected the last dimension to be a multiple of 2 (two E2M1 codes per byte), got 3"),
    # --- global scales passed as Python numbers ---
    *[BadInput("quantize_nvfp4", "global scale", f"global_scale={v!r}", (lambda v: lambda t: fp4ops.quantize_nvfp4(t.x, v))(v), ValueError, "global_scale: expected a finite value > 0 (as float32)")
      for v in (0.0, -2.0, float("nan"), float("inf"), -float("inf"), 1e-60, 1e39)],
    BadInput("dequantize", "global scale", "global_scale=-1.0 in the container", lambda t: fp4ops.dequantize(t.nvfp4(global_scale=-1.0)), ValueError, "global_scale: expected a finite value > 0 (as float32), got -1.0"),
    BadInput("gemv", "global scale", "a.global_scale=inf in the container", lambda t: fp4ops.gemv(t.nvfp4(global_scale=float("inf")), t.b), ValueError, "a.global_scale: expected a finite value > 0 (as float32), got inf"),
    BadInput("quantize_nvfp4", "global scale", "global_scale tensor of 2 elements", lambda t: fp4ops.quantize_nvfp4(t.x, t.x.new_ones(2)), ValueError, "global_scale: expected one element, got shape (2,)"),
    # --- swizzled scales of the wrong padded size ---
    BadInput("dequantize", "swizzled size", "NVFP4 swizzled with linear-shaped scales", lambda t: fp4ops.dequantize(t.nvfp4(layout="swizzled")), ValueError, "scales: expected shape (128, 4) (swizzled layout) for data of shape (2, 16), got (2, 2)"),
    BadInput("dequantize", "swizzled size", "MXFP4 swizzled padded to 256 rows", lambda t: fp4ops.dequantize(t.mxfp4(scales=t.mx.scales.new_zeros(256, 4), layout="swizzled")), ValueError, "scales: expected shape (128, 4) (swizzled layout) for data of shape (2, 16), got (256, 4)"),
    BadInput("gemv", "swizzled size", "a swizzled with linear-shaped scales", lambda t: fp4ops.gemv(t.nvfp4(layout="swizzled"), t.b), ValueError, "scales: expected shape (128, 4) (swizzled layout) for data of shape (2, 16), got (2, 2)"),
    BadInput("unswizzle_scales", "swizzled size", "128x4 scales for rows 129", lambda t: fp4ops.unswizzle_scales(fp4ops.swizzle_scales(t.nv.scales), 129, 2), ValueError, "scales: expected the swizzled shape (256, 4) for rows = 129, cols = 2, got (128, 4)"),
    # --- options ---
    BadInput("quantize_nvfp4", "option", "scale_layout 'tiled'", lambda t: fp4ops.quantize_nvfp4(t.x, scale_layout="tiled"), ValueError, "scale_layout: expected 'linear' or 'swizzled', got 'tiled'"),
    BadInput("quantize_mxfp4", "option", "scale_rule 'round'", lambda t: fp4ops.quantize_mxfp4(t.x, scale_rule="round"), ValueError, "scale_rule: expected 'floor' or 'rceil', got 'round'"),
    BadInput("quantize_nvfp4", "option", "hadamard with 15 signs", lambda t: fp4ops.quantize_nvfp4(t.x, hadamard=[1.0] * 15), ValueError, "hadamard: expected 16 signs of +1 or -1"),
    BadInput("quantize_nvfp4", "option", "block_2d with hadamard", lambda t: fp4ops.quantize_nvfp4(t.x, hadamard=True, block_2d=True), ValueError, "block_2d: 16x16 block scaling and the Hadamard rotation cannot be combined"),
    BadInput("quantize_nvfp4", "option", "block_2d=1", lambda t: fp4ops.quantize_nvfp4(t.x, block_2d=1), TypeError, "block_2d: expected a bool, got int"),
    BadInput("quantize_nvfp4", "option", "stochastic_rounding='no'", lambda t: fp4ops.quantize_nvfp4(t.x, stochastic_rounding="no", seed=1), TypeError, "stochastic_rounding: expected a bool, got str"),
    BadInput("quantize_nvfp4", "option", "hadamard='yes'", lambda t: fp4ops.quantize_nvfp4(t.x, hadamard="yes"), TypeError, "hadamard: expected a bool, an int seed or 16 signs of +1 or -1, got str"),
    BadInput("quantize_nvfp4", "option", "hadamard an object", lambda t: fp4ops.quantize_nvfp4(t.x, hadamard=object()), TypeError, "hadamard: expected a bool, an int seed or 16 signs of +1 or -1, got object"),
    BadInput("quantize_nvfp4", "option", "hadamard seed 2^70", lambda t: fp4ops.quantize_nvfp4(t.x, hadamard=2**70), ValueError, "hadamard: a seed must be in [-2^63, 2^64)"),
    BadInput("dequantize", "requires_grad", "global_scale requires grad", lambda t: fp4ops.dequantize(t.nvfp4(global_scale=t.nv.global_scale.clone().requires_grad_())), RuntimeError, "global_scale: requires grad, but fp4ops.dequantize has no backward"),
    BadInput("quantize_nvfp4", "option", "seed without stochastic_rounding", lambda t: fp4ops.quantize_nvfp4(t.x, seed=1), ValueError, "seed: given without stochastic_rounding=True"),
    BadInput("quantize_nvfp4", "option", "seed -1", lambda t: fp4ops.quantize_nvfp4(t.x, stochastic_rounding=True, seed=-1), ValueError, "seed: expected a value in [0, 2^63), got -1"),
    BadInput("quantize_nvfp4", "option", "offset 1.5", lambda t: fp4ops.quantize_nvfp4(t.x, stochastic_rounding=True, offset=1.5), TypeError, "offset: expected an int, got float"),
    BadInput("quantize_nvfp4", "option", "amax_group with global_scale", lambda t: fp4ops.quantize_nvfp4(t.x, 1.0, amax_group=object()), ValueError, "amax_group: give either amax_group or global_scale, not both"),
    # --- requires_grad (the float ops have no backward; see docs/decisions.md) ---
    BadInput("amax", "requires_grad", "x requires grad", lambda t: fp4ops.amax(t.x.clone().requires_grad_()), RuntimeError, "x: requires grad, but fp4ops.amax has no backward"),
    BadInput("gemv", "requires_grad", "b requires grad", lambda t: fp4ops.gemv(t.nv, t.b.clone().requires_grad_()), RuntimeError, "b: requires grad, but fp4ops.gemv has no backward"),
    BadInput("gemv", "requires_grad", "a.global_scale requires grad", lambda t: fp4ops.gemv(t.nvfp4(global_scale=t.nv.global_scale.clone().requires_grad_()), t.b), RuntimeError, "a.global_scale: requires grad"),
    # --- mixed devices: device under test + CPU ---
    BadInput("quantize_nvfp4", "mixed devices", "global_scale on the other device", lambda t: fp4ops.quantize_nvfp4(t.x, t.x.new_tensor(1.0).to(t.other)), ValueError, "global_scale: expected a tensor on", "mixed"),
    BadInput("dequantize", "mixed devices", "MXFP4 scales on the other device", lambda t: fp4ops.dequantize(t.mxfp4(scales=t.mx.scales.to(t.other))), ValueError, "scales: expected a tensor on", "mixed"),
    BadInput("dequantize", "mixed devices", "NVFP4 global_scale on the other device", lambda t: fp4ops.dequantize(t.nvfp4(global_scale=t.nv.global_scale.to(t.other))), ValueError, "global_scale: expected a tensor on", "mixed"),
    BadInput("gemv", "mixed devices", "dense b on the other device", lambda t: fp4ops.gemv(t.nv, t.b.to(t.other)), ValueError, "b: expected a tensor on", "mixed"),
    BadInput("gemv", "mixed devices", "NVFP4 b on the other device", lambda t: fp4ops.gemv(t.nv, fp4ops.quantize_nvfp4(t.b.to(t.other))), ValueError, "b: expected a tensor on", "mixed"),
    BadInput("gemv", "mixed devices", "a.global_scale on the other device", lambda t: fp4ops.gemv(t.nvfp4(global_scale=t.nv.global_scale.to(t.other)), t.b), ValueError, "a.global_scale: expected a tensor on", "mixed"),
    BadInput("quantize_nvfp4", "mixed devices", "x on cuda:1, global_scale on cuda:0", lambda t: fp4ops.quantize_nvfp4(t.x, t.x.new_tensor(1.0).to(t.other)), ValueError, "global_scale: expected a tensor on cuda:1", "two_gpus"),
    BadInput("dequantize", "mixed devices", "data on cuda:1, scales on cuda:0", lambda t: fp4ops.dequantize(t.nvfp4(scales=t.nv.scales.to(t.other))), ValueError, "scales: expected a tensor on cuda:1", "two_gpus"),
    BadInput("gemv", "mixed devices", "a on cuda:1, b on cuda:0", lambda t: fp4ops.gemv(t.mx, t.b.to(t.other)), ValueError, "b: expected a tensor on cuda:1", "two_gpus"),
    # --- linear (x dense [1, 32] from b, or FP4; w the NVFP4 [2, 32] of x) ---
    BadInput("linear", "dtype", "w a dense tensor", lambda t: fp4ops.linear(t.b[None], t.x), TypeError, "w: expected an NVFP4Tensor or MXFP4Tensor, got Tensor"),
    BadInput("linear", "dtype", "x float64", lambda t: fp4ops.linear(t.x.double(), t.nv), TypeError, "x: expected float16 or bfloat16 (or an FP4 tensor of w's format), got torch.float64"),
    BadInput("linear", "integer input", "x int32", lambda t: fp4ops.linear(t.x.int(), t.nv), TypeError, "x: expected float16 or bfloat16 (or an FP4 tensor of w's format), got torch.int32"),
    BadInput("linear", "dtype", "x MXFP4, w NVFP4", lambda t: fp4ops.linear(t.mx, t.nv), TypeError, "x: expected NVFP4Tensor (the format of w) or a float16/bfloat16 tensor, got MXFP4Tensor"),
    BadInput("linear", "dtype", "out_dtype float64", lambda t: fp4ops.linear(t.b[None], t.nv, out_dtype=torch.float64), TypeError, "out_dtype: expected torch.float16, torch.bfloat16 or torch.float32, got torch.float64"),
    BadInput("linear", "integer input", "bias int64", lambda t: fp4ops.linear(t.b[None], t.nv, t.x[0, :2].long()), TypeError, "bias: expected float32, float16 or bfloat16, got torch.int64"),
    BadInput("linear", "option", "batch_invariant=1", lambda t: fp4ops.linear(t.b[None], t.nv, batch_invariant=1), TypeError, "batch_invariant: expected a bool, got int"),
    BadInput("linear", "dtype", "w with E8M0 scales", lambda t: fp4ops.linear(t.b[None], t.nvfp4(scales=t.mx.scales.expand(2, 2).contiguous())), TypeError, "w.scales: expected torch.float8_e4m3fn, got torch.float8_e8m0fnu"),
    BadInput("linear", "dtype", "w.global_scale None", lambda t: fp4ops.linear(t.b[None], t.nvfp4(global_scale=None)), TypeError, "w.global_scale: expected a float32 tensor, got None"),
    BadInput("linear", "shape", "x with K 64", lambda t: fp4ops.linear(t.b.repeat(2)[None], t.nv), ValueError, "x: expected the last dimension to be 32 (K of w), got 64"),
    BadInput("linear", "shape", "NVFP4 x with K 64", lambda t: fp4ops.linear(fp4ops.quantize_nvfp4(t.b.repeat(2)[None]), t.nv), ValueError, "x: expected the last dimension to be 32 (K of w), got 64"),
    BadInput("linear", "shape", "x 0-dim", lambda t: fp4ops.linear(t.b[0], t.nv), ValueError, "x: expected at least 1 dimension, got a 0-dim tensor"),
    BadInput("linear", "shape", "w 3-D", lambda t: fp4ops.linear(t.b[None], fp4ops.quantize_nvfp4(t.x[None])), ValueError, "w: expected shape [N, K], got (1, 2, 32)"),
    BadInput("linear", "shape", "bias [3] for N 2", lambda t: fp4ops.linear(t.b[None], t.nv, t.x[0, :3]), ValueError, "bias: expected shape (2,) (N of w), got (3,)"),
    BadInput("linear", "swizzled size", "w swizzled with linear-shaped scales", lambda t: fp4ops.linear(t.b[None], t.nvfp4(layout="swizzled")), ValueError, "w.scales: expected shape (128, 4) (swizzled layout) for data of shape (2, 16), got (2, 2)"),
    BadInput("linear", "requires_grad", "x requires grad", lambda t: fp4ops.linear(t.b[None].clone().requires_grad_(), t.nv), RuntimeError, "x: requires grad, but fp4ops.linear has no backward"),
    BadInput("linear", "requires_grad", "bias requires grad", lambda t: fp4ops.linear(t.b[None], t.nv, t.x[0, :2].clone().requires_grad_()), RuntimeError, "bias: requires grad, but fp4ops.linear has no backward"),
    BadInput("linear", "mixed devices", "dense x on the other device", lambda t: fp4ops.linear(t.b[None].to(t.other), t.nv), ValueError, "x: expected a tensor on", "mixed"),
    BadInput("linear", "mixed devices", "NVFP4 x on the other device", lambda t: fp4ops.linear(fp4ops.quantize_nvfp4(t.b[None].to(t.other)), t.nv), ValueError, "x: expected a tensor on", "mixed"),
    BadInput("linear", "mixed devices", "bias on the other device", lambda t: fp4ops.linear(t.b[None], t.nv, t.x[0, :2].to(t.other)), ValueError, "bias: expected a tensor on", "mixed"),
    BadInput("linear", "mixed devices", "w.global_scale on the other device", lambda t: fp4ops.linear(t.b[None], t.nvfp4(global_scale=t.nv.global_scale.to(t.other))), ValueError, "w.global_scale: expected a tensor on", "mixed"),
    BadInput("linear", "mixed devices", "w on cuda:1, x on cuda:0", lambda t: fp4ops.linear(t.b[None].to(t.other), t.nv), ValueError, "x: expected a tensor on cuda:1", "two_gpus"),
    # --- fused producers (x [2, 32]; the RMSNorm weight is x's first row) ---
    BadInput("rms_norm_quantize", "integer input", "x int32", lambda t: fp4ops.rms_norm_quantize(t.x.int(), t.x[0]), TypeError, f"x: {FLOAT_ERR}, got torch.int32"),
    BadInput("rms_norm_quantize", "integer input", "weight int64", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0].long()), TypeError, f"weight: {FLOAT_ERR}, got torch.int64"),
    BadInput("rms_norm_quantize", "dtype", "residual float16 for float32 x", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0], residual=t.x.half()), TypeError, "residual: expected torch.float32 (x's dtype), got torch.float16"),
    BadInput("rms_norm_quantize", "shape", "weight [16] for hidden 32", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0, :16]), ValueError, "weight: expected shape (32,) (x's last dimension), got (16,)"),
    BadInput("rms_norm_quantize", "shape", "residual [1, 32] for x [2, 32]", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0], residual=t.x[:1]), ValueError, "residual: expected shape (2, 32) (x's shape), got (1, 32)"),
    BadInput("rms_norm_quantize", "K not a multiple of the block", "MXFP4 hidden 16", lambda t: fp4ops.rms_norm_quantize(t.x[:, :16], t.x[0, :16], format="mxfp4"), ValueError, "x: expected the last dimension (the hidden size) to be a multiple of 32 (the MXFP4 block), got 16"),
    BadInput("rms_norm_quantize", "option", "eps 1e39 (inf in float32)", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0], 1e39), ValueError, "eps: expected a finite number >= 0, got 1e+39 (infinite in float32)"),
    BadInput("rms_norm_quantize", "option", "eps a tensor", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0], torch.tensor(1e-6)), TypeError, "eps: expected a real number, got Tensor"),
    BadInput("rms_norm_quantize", "option", "format a list", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0], format=["nvfp4"]), TypeError, "format: expected 'nvfp4' or 'mxfp4', got list"),
    BadInput("ops.rms_norm_quantize", "option", "eps 1e39", lambda t: ops.rms_norm_quantize(t.x, t.x[0], 1e39, None, "nvfp4", None, "floor", "linear", False), RuntimeError, "eps: expected a finite value >= 0 (finite in float32 too)"),
    BadInput("rms_norm_quantize", "option", "eps -1", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0], -1.0), ValueError, "eps: expected a finite number >= 0, got -1.0"),
    BadInput("rms_norm_quantize", "option", "scale_rule 'rceil' with NVFP4", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0], scale_rule="rceil"), ValueError, "scale_rule: 'rceil' is an MXFP4 rule"),
    BadInput("rms_norm_quantize", "global scale", "global_scale with MXFP4", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0], format="mxfp4", global_scale=1.0), ValueError, "global_scale: MXFP4 has no global scale; pass None"),
    BadInput("rms_norm_quantize", "mixed devices", "weight on the other device", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0].to(t.other)), ValueError, "weight: expected a tensor on", "mixed"),
    BadInput("rms_norm_quantize", "mixed devices", "residual on the other device", lambda t: fp4ops.rms_norm_quantize(t.x, t.x[0], residual=t.x.to(t.other)), ValueError, "residual: expected a tensor on", "mixed"),
    BadInput("silu_mul_quantize", "integer input", "x int16", lambda t: fp4ops.silu_mul_quantize(t.x.short()), TypeError, f"x: {FLOAT_ERR}, got torch.int16"),
    BadInput("silu_mul_quantize", "shape", "odd last dimension 31", lambda t: fp4ops.silu_mul_quantize(t.x[:, :31]), ValueError, "x: expected an even last dimension (gate, then up), got 31"),
    BadInput("silu_mul_quantize", "K not a multiple of the block", "MXFP4 with H 16", lambda t: fp4ops.silu_mul_quantize(t.x, format="mxfp4"), ValueError, "x: expected half the last dimension (the gate and up width H) to be a multiple of 32 (the MXFP4 block), got 16"),
    BadInput("silu_mul_quantize", "option", "format 'mxfp8'", lambda t: fp4ops.silu_mul_quantize(t.x, format="mxfp8"), ValueError, "format: expected 'nvfp4' or 'mxfp4', got 'mxfp8'"),
    BadInput("silu_mul_quantize", "mixed devices", "global_scale on the other device", lambda t: fp4ops.silu_mul_quantize(t.x, global_scale=t.x.new_tensor(1.0).to(t.other)), ValueError, "global_scale: expected a tensor on", "mixed"),
    # --- the ops themselves (public too): they check again, RuntimeError naming the argument ---
    BadInput("ops.amax", "integer input", "x int32", lambda t: ops.amax(t.x.int()), RuntimeError, "x: expected float32, float16 or bfloat16, got Int"),
    BadInput("ops.quantize_nvfp4", "K not a multiple of the block", "K 24", lambda t: ops.quantize_nvfp4(t.x[:, :24].contiguous(), None), RuntimeError, "x: expected the last dimension to be a multiple of 16, got 24"),
    BadInput("ops.quantize_nvfp4", "global scale", "global_scale of 2 elements", lambda t: ops.quantize_nvfp4(t.x, t.x.new_ones(2)), RuntimeError, "global_scale: expected one element"),
    BadInput("ops.quantize_nvfp4", "dtype", "global_scale float16", lambda t: ops.quantize_nvfp4(t.x, t.x.new_ones((), dtype=torch.float16)), RuntimeError, "global_scale: expected float32, got Half"),
    BadInput("ops.quantize_nvfp4", "mixed devices", "global_scale on the other device", lambda t: ops.quantize_nvfp4(t.x, t.x.new_ones(()).to(t.other)), RuntimeError, "global_scale: expected a tensor on", "mixed"),
    BadInput("ops.quantize_nvfp4", "mixed devices", "x on cuda:1, global_scale on cuda:0", lambda t: ops.quantize_nvfp4(t.x, t.x.new_ones(()).to(t.other)), RuntimeError, "global_scale: expected a tensor on cuda:1", "two_gpus"),
    BadInput("ops.quantize_nvfp4_recipe", "mixed devices", "global_scale on the other device", lambda t: ops.quantize_nvfp4_recipe(t.x, t.x.new_ones(()).to(t.other), "linear", True, False, True, -1, None, 0), RuntimeError, "global_scale: expected a tensor on", "mixed"),
    BadInput("ops.dequantize_nvfp4", "mixed devices", "scales on the other device", lambda t: ops.dequantize_nvfp4(t.nv.data, t.nv.scales.to(t.other), t.nv.global_scale, torch.float32), RuntimeError, "scales: expected a tensor on", "mixed"),
    BadInput("ops.dequantize_nvfp4", "mixed devices", "global_scale on the other device", lambda t: ops.dequantize_nvfp4(t.nv.data, t.nv.scales, t.nv.global_scale.to(t.other), torch.float32), RuntimeError, "global_scale: expected a tensor on", "mixed"),
    BadInput("ops.dequantize_mxfp4", "mixed devices", "scales on the other device", lambda t: ops.dequantize_mxfp4(t.mx.data, t.mx.scales.to(t.other), torch.float32), RuntimeError, "scales: expected a tensor on", "mixed"),
    BadInput("ops.quantize_mxfp4", "option", "scale_rule 'nearest'", lambda t: ops.quantize_mxfp4(t.x, "nearest"), RuntimeError, 'scale_rule: expected "floor" or "rceil", got "nearest"'),
    BadInput("ops.dequantize_nvfp4", "shape", "scales [2, 1]", lambda t: ops.dequantize_nvfp4(t.nv.data, t.nv.scales[:, :1].contiguous(), t.nv.global_scale, torch.float32), RuntimeError, "scales: expected shape [2, 2]"),
    BadInput("ops.dequantize_nvfp4", "dtype", "dtype int32", lambda t: ops.dequantize_nvfp4(t.nv.data, t.nv.scales, t.nv.global_scale, torch.int32), RuntimeError, "dtype: expected float32, float16 or bfloat16, got Int"),
    BadInput("ops.dequantize_mxfp4", "dtype", "data float32", lambda t: ops.dequantize_mxfp4(t.mx.data.float(), t.mx.scales, torch.float32), RuntimeError, "data: expected uint8 (packed E2M1), got Float"),
    BadInput("ops.dequantize_mxfp4", "dtype", "E4M3 scales", lambda t: ops.dequantize_mxfp4(t.mx.data, t.nv.scales[:, :1].contiguous(), torch.float32), RuntimeError, "scales: expected Float8_e8m0fnu, got Float8_e4m3fn"),
    BadInput("ops.dequantize_mxfp4", "K not a multiple of the block", "data with K 16", lambda t: ops.dequantize_mxfp4(t.nv.data[:, :8].contiguous(), t.mx.scales, torch.float32), RuntimeError, "K a multiple of 32"),
    BadInput("ops.dequantize_mxfp4", "swizzled size", "linear-shaped scales, swizzled layout", lambda t: ops.dequantize_mxfp4(t.mx.data, t.mx.scales, torch.float32, "swizzled"), RuntimeError, "scales: expected shape [128, 4]"),
    BadInput("ops.cast_to_e2m1", "K not a multiple of the block", "last dimension 5", lambda t: ops.cast_to_e2m1(t.x[0, :5].contiguous()), RuntimeError, "x: expected the last dimension to be a multiple of 2, got 5"),
    BadInput("ops.gemv_fp4_dense", "shape", "b with K 64", lambda t: ops.gemv_fp4_dense(t.nv.data[None], t.nv.scales[None], t.nv.global_scale, t.b.repeat(2)[None], torch.float16), RuntimeError, "b: expected K = 32 (from a_data), got 64"),
    BadInput("ops.gemv_fp4_dense", "shape", "a_data 2-D", lambda t: ops.gemv_fp4_dense(t.nv.data, t.nv.scales, t.nv.global_scale, t.b[None], torch.float16), RuntimeError, "a_data: expected 3 dimensions [L, M, K/2], got 2"),
    BadInput("ops.gemv_fp4_dense", "mixed devices", "b on the other device", lambda t: ops.gemv_fp4_dense(t.nv.data[None], t.nv.scales[None], t.nv.global_scale, t.b[None].to(t.other), torch.float16), RuntimeError, "b: expected a tensor on", "mixed"),
    BadInput("ops.gemv_fp4_fp4", "dtype", "MXFP4 a with a global scale", lambda t: ops.gemv_fp4_fp4(t.mx.data[None], t.mx.scales[None], t.nv.global_scale, t.mx.data[:1], t.mx.scales[:1], None, torch.float16), RuntimeError, "a_global_scale: expected None for MXFP4"),
    BadInput("ops.gemv_fp4_fp4", "mixed devices", "b_data on the other device", lambda t: ops.gemv_fp4_fp4(t.mx.data[None], t.mx.scales[None], None, t.mx.data[:1].to(t.other), t.mx.scales[:1], None, torch.float16), RuntimeError, "b_data: expected a tensor on", "mixed"),
    BadInput("ops.quantize_nvfp4_recipe", "option", "neither rowwise nor columnwise", lambda t: ops.quantize_nvfp4_recipe(t.x, None, "linear", False, False, False, -1, None, 0), RuntimeError, "rowwise: expected rowwise or columnwise output (or both), got neither"),
    BadInput("ops.quantize_nvfp4_recipe", "option", "offset -1", lambda t: ops.quantize_nvfp4_recipe(t.x, None, "linear", True, False, False, -1, 1, -1), RuntimeError, "offset: expected a value >= 0, got -1"),
    BadInput("ops.swizzle_scales", "dtype", "float32 scales", lambda t: ops.swizzle_scales(t.x), RuntimeError, "scales: expected float8_e4m3fn (NVFP4) or float8_e8m0fnu (MXFP4) scales, got Float"),
    BadInput("ops.cast_from_e2m1", "dtype", "data int8", lambda t: ops.cast_from_e2m1(t.nv.data.view(torch.int8), torch.float32), RuntimeError, "data: expected uint8 (packed E2M1), got Char"),
    BadInput("ops.unswizzle_scales", "shape", "cols -1", lambda t: ops.unswizzle_scales(ops.swizzle_scales(t.nv.scales), 2, -1), RuntimeError, "cols: expected a value >= 0, got -1"),
    BadInput("ops.rms_norm_quantize", "K not a multiple of the block", "hidden 24", lambda t: ops.rms_norm_quantize(t.x[:, :24], t.x[0, :24], 1e-6, None, "nvfp4", None, "floor", "linear", False), RuntimeError, "x: expected the last dimension (the hidden size) to be a multiple of 16 (the NVFP4 block), got 24"),
    BadInput("ops.rms_norm_quantize", "option", "eps NaN", lambda t: ops.rms_norm_quantize(t.x, t.x[0], float("nan"), None, "nvfp4", None, "floor", "linear", False), RuntimeError, "eps: expected a finite value >= 0"),
    BadInput("ops.rms_norm_quantize", "dtype", "residual float16 for float32 x", lambda t: ops.rms_norm_quantize(t.x, t.x[0], 1e-6, t.x.half(), "nvfp4", None, "floor", "linear", False), RuntimeError, "residual: expected Float (x's dtype), got Half"),
    BadInput("ops.rms_norm_quantize", "shape", "weight [1, 32]", lambda t: ops.rms_norm_quantize(t.x, t.x[:1], 1e-6, None, "nvfp4", None, "floor", "linear", False), RuntimeError, "weight: expected shape [32] (x's last dimension), got [1, 32]"),
    BadInput("ops.rms_norm_quantize", "mixed devices", "weight on the other device", lambda t: ops.rms_norm_quantize(t.x, t.x[0].to(t.other), 1e-6, None, "nvfp4", None, "floor", "linear", False), RuntimeError, "weight: expected a tensor on", "mixed"),
    BadInput("ops.silu_mul_quantize", "shape", "odd last dimension 31", lambda t: ops.silu_mul_quantize(t.x[:, :31], "nvfp4", None, "floor", "linear", False), RuntimeError, "x: expected an even last dimension (gate, then up), got 31"),
    BadInput("ops.silu_mul_quantize", "option", "format 'fp4'", lambda t: ops.silu_mul_quantize(t.x, "fp4", None, "floor", "linear", False), RuntimeError, 'format: expected "nvfp4" or "mxfp4", got "fp4"'),
    BadInput("ops.silu_mul_quantize", "global scale", "global_scale with MXFP4", lambda t: ops.silu_mul_quantize(torch.cat([t.x, t.x], -1), "mxfp4", t.x.new_ones(()), "floor", "linear", False), RuntimeError, "global_scale: MXFP4 has no global scale"),
    BadInput("ops.silu_mul_quantize", "mixed devices", "global_scale on the other device", lambda t: ops.silu_mul_quantize(t.x, "nvfp4", t.x.new_ones(()).to(t.other), "floor", "linear", False), RuntimeError, "global_scale: expected a tensor on", "mixed"),
    BadInput("ops.linear", "shape", "x with K 64", lambda t: ops.linear(t.b.repeat(2)[None], None, None, t.nv.data, t.nv.scales, t.nv.global_scale, None, torch.float16, False), RuntimeError, "x: expected K = 32 (from w_data), got 64"),
    BadInput("ops.linear", "shape", "w_data 3-D", lambda t: ops.linear(t.b[None], None, None, t.nv.data[None], t.nv.scales[None], t.nv.global_scale, None, torch.float16, False), RuntimeError, "w_data: expected 2 dimensions [N, K/2], got 3"),
    BadInput("ops.linear", "shape", "bias [3] for N 2", lambda t: ops.linear(t.b[None], None, None, t.nv.data, t.nv.scales, t.nv.global_scale, t.x[0, :3], torch.float16, False), RuntimeError, "bias: expected shape [2] (N from w_data), got [3]"),
    BadInput("ops.linear", "dtype", "x float32", lambda t: ops.linear(t.x, None, None, t.nv.data, t.nv.scales, t.nv.global_scale, None, torch.float16, False), RuntimeError, "x: expected float16 or bfloat16 (or packed E2M1 uint8 with x_scales), got Float"),
    BadInput("ops.linear", "dtype", "NVFP4 w without a global scale", lambda t: ops.linear(t.b[None], None, None, t.nv.data, t.nv.scales, None, None, torch.float16, False), RuntimeError, "w_global_scale: expected a tensor for NVFP4"),
    BadInput("ops.linear", "dtype", "MXFP4 x for NVFP4 w", lambda t: ops.linear(t.mx.data, t.mx.scales, t.nv.global_scale, t.nv.data, t.nv.scales, t.nv.global_scale, None, torch.float16, False), RuntimeError, "x_scales: expected Float8_e4m3fn (the format of w), got Float8_e8m0fnu"),
    BadInput("ops.linear", "dtype", "out_dtype float64", lambda t: ops.linear(t.b[None], None, None, t.nv.data, t.nv.scales, t.nv.global_scale, None, torch.float64, False), RuntimeError, "out_dtype: expected float16, bfloat16 or float32, got Double"),
    BadInput("ops.linear", "mixed devices", "x on the other device", lambda t: ops.linear(t.b[None].to(t.other), None, None, t.nv.data, t.nv.scales, t.nv.global_scale, None, torch.float16, False), RuntimeError, "x: expected a tensor on", "mixed"),
    BadInput("ops.linear", "mixed devices", "bias on the other device", lambda t: ops.linear(t.b[None], None, None, t.nv.data, t.nv.scales, t.nv.global_scale, t.x[0, :2].to(t.other), torch.float16, False), RuntimeError, "bias: expected a tensor on", "mixed"),
]
