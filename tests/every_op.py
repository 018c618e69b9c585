"""One call of every fp4ops op, for the tests that must hold for all of them at once (several GPUs,
determinism, CUDA graph replay)."""

from __future__ import annotations

import torch
from conftest import assert_same_bytes

import fp4ops


def exact_on_cpu(name: str) -> bool:
    """Outputs that match the CPU kernels byte for byte; the GEMVs and linears meet SPEC 5's bound
    instead (CUDA and CPU sum in different orders), and SiLU-and-mul's intermediate SPEC 7's (each
    platform's own exp), so its codes, scales and g can differ between them too."""
    return not name.startswith(("gemv", "linear", "silu_mul"))


def assert_same_bits(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Same dtype, shape and bytes (NaN payloads and the sign of zero included), for any dtype."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    assert_same_bytes(actual.reshape(-1).view(torch.uint8), expected.reshape(-1).view(torch.uint8), what)


def every_op(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """x: float [rows, K] with rows a multiple of 16 and K of 64. Returns name -> output for every
    op (each public function, every quantizer option and both scale layouts)."""
    out: dict[str, torch.Tensor] = {"amax": fp4ops.amax(x)}

    def add(name: str, q) -> None:
        out[f"{name}.data"], out[f"{name}.scales"] = q.data, q.scales
        if isinstance(q, fp4ops.NVFP4Tensor):
            out[f"{name}.global_scale"] = q.global_scale

    nv = fp4ops.quantize_nvfp4(x)
    add("nvfp4", nv)
    add("nvfp4_given_g", fp4ops.quantize_nvfp4(x, 0.01))
    swizzled = fp4ops.quantize_nvfp4(x, scale_layout="swizzled")
    add("nvfp4_swizzled", swizzled)
    mx = fp4ops.quantize_mxfp4(x, scale_rule="rceil")
    add("mxfp4_rceil", mx)
    add("mxfp4_swizzled", fp4ops.quantize_mxfp4(x, scale_layout="swizzled"))
    add("nvfp4_2d", fp4ops.quantize_nvfp4(x, block_2d=True))
    rowwise, columnwise = fp4ops.quantize_nvfp4_rowwise_columnwise(x, hadamard=True, stochastic_rounding=True,
                                                                   seed=1234, offset=5)
    add("recipe_rowwise", rowwise)
    add("recipe_columnwise", columnwise)
    out["dequantize_nvfp4"] = nv.dequantize(torch.float16)
    out["dequantize_nvfp4_swizzled"] = swizzled.dequantize(torch.float32)
    out["dequantize_mxfp4"] = mx.dequantize(torch.bfloat16)
    out["swizzle_scales"] = fp4ops.swizzle_scales(nv.scales)
    out["unswizzle_scales"] = fp4ops.unswizzle_scales(swizzled.scales, *nv.scales.shape)
    out["cast_to_e2m1"] = fp4ops.cast_to_e2m1(x)
    out["cast_from_e2m1"] = fp4ops.cast_from_e2m1(out["cast_to_e2m1"], torch.float16)
    vector = x[0].to(torch.bfloat16)
    out["gemv_nvfp4_bf16"] = fp4ops.gemv(nv, vector)
    out["gemv_nvfp4_nvfp4"] = fp4ops.gemv(nv, fp4ops.quantize_nvfp4(vector), out_dtype=torch.float32)
    out["gemv_mxfp4_mxfp4"] = fp4ops.gemv(mx, fp4ops.quantize_mxfp4(vector))
    out["gemv_swizzled_a"] = fp4ops.gemv(swizzled, vector, out_dtype=torch.bfloat16)
    # linear: the kernel family's row counts, W4A4, and (80 rows) the CUDA op's path above them,
    # with and without batch_invariant.
    rows = x[:80].to(torch.bfloat16)
    bias = x[:, 0].to(torch.float16)  # [N]: one per row of nv
    out["linear_nvfp4_bf16"] = fp4ops.linear(rows[:5], nv, bias)
    out["linear_mxfp4_mxfp4"] = fp4ops.linear(fp4ops.quantize_mxfp4(rows[:16]), mx, out_dtype=torch.float32)
    out["linear_nvfp4_80_rows"] = fp4ops.linear(rows.half(), nv, bias)
    out["linear_swizzled_batch_invariant"] = fp4ops.linear(rows, swizzled, batch_invariant=True)
    # The fused producers (SPEC 7): the computed g (no host sync, so they capture in a graph), a
    # given one, MXFP4 with swizzled scales, and the residual stream RMSNorm returns.
    weight = x[0].to(torch.bfloat16)
    add("rms_norm_nvfp4", fp4ops.rms_norm_quantize(x.to(torch.bfloat16), weight))
    q, out["rms_norm_new_residual"] = fp4ops.rms_norm_quantize(
        x.half(), weight, 1e-5, residual=x.flip(0).half(), format="mxfp4", scale_rule="rceil", scale_layout="swizzled")
    add("rms_norm_mxfp4_residual", q)
    add("rms_norm_nvfp4_given_g", fp4ops.rms_norm_quantize(x, weight, global_scale=0.01, scale_layout="swizzled"))
    add("silu_mul_nvfp4", fp4ops.silu_mul_quantize(x))
    add("silu_mul_nvfp4_given_g", fp4ops.silu_mul_quantize(x.to(torch.bfloat16), global_scale=0.01))
    add("silu_mul_mxfp4_swizzled", fp4ops.silu_mul_quantize(x.half(), format="mxfp4", scale_layout="swizzled"))
    return out
