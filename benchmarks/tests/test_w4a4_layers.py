"""The W4A4 layer chain of the decode stream, on the CPU: it computes the bf16 layer's result."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmarks import w4a4_layers


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(F.cosine_similarity(a.float().flatten(), b.float().flatten(), dim=0))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_the_w4a4_layer_follows_the_bf16_layer(fmt):
    """One layer of fresh random weights and rows: the W4A4 chain (producers with static scales,
    FP4 x FP4 linears), fused or not, gives down's output and the residual close to the bf16
    chain's. The bounds
    hold with room over fresh draws (W4A4 cosines 0.92-0.98 on 4 x 128, the residual above 0.98),
    while a chain with gate and up swapped stays under 0.8."""
    (layer,) = w4a4_layers.make_layers(1, fmt, "cpu", w4a4_layers.CPU_DIMS)
    h, r = (torch.randn(4, w4a4_layers.CPU_DIMS[0], dtype=torch.bfloat16) for _ in range(2))
    w4a4_layers.calibrate([layer], fmt, h, r)
    assert sorted(layer.scales) == (["attn", "down", "mlp", "o"] if fmt == "nvfp4" else [])
    assert all(g.dim() == 0 and g.dtype == torch.float32 for g in layer.scales.values())
    ref_out, ref_residual = w4a4_layers.bf16_layer(layer, h, r)
    for chain in (w4a4_layers.fp4_layer, w4a4_layers.unfused_layer):
        for own_scales in (False, True):  # the calibrated scales, or each producer's own g
            out, residual = chain(layer, h, r, fmt, own_scales=own_scales)
            assert out.shape == ref_out.shape == h.shape and out.dtype == torch.bfloat16
            assert cosine(out, ref_out) > 0.88 and cosine(residual, ref_residual) > 0.95


def test_own_scales_ignore_the_calibrated_ones():
    """With own_scales every NVFP4 producer derives g from its own input, whatever the layer holds:
    on the calibration batch that is the g calibrate() kept, bit for bit, and on another batch not."""
    (layer,) = w4a4_layers.make_layers(1, "nvfp4", "cpu", w4a4_layers.CPU_DIMS)
    h, r = (torch.randn(4, w4a4_layers.CPU_DIMS[0], dtype=torch.bfloat16) for _ in range(2))
    w4a4_layers.calibrate([layer], "nvfp4", h, r)
    derived: dict = {}
    w4a4_layers.fp4_layer(layer, h, r, "nvfp4", record=derived, own_scales=True)
    assert all(torch.equal(derived[name], g) for name, g in layer.scales.items()) and sorted(derived) == sorted(layer.scales)
    other: dict = {}
    w4a4_layers.fp4_layer(layer, 3 * h, r, "nvfp4", record=other, own_scales=True)
    assert not torch.equal(other["attn"], layer.scales["attn"])
