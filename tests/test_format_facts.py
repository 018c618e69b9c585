"""The product's format facts (fp4ops._formats, the one place the package states them) equal the
oracle's: fp4ops.reference restates the SPEC on its own, so a fact changed on one side only
fails here rather than in every exact test at once."""

from __future__ import annotations

import pytest
import torch

import fp4ops
from fp4ops import _formats, nn, reference
from fp4ops.checkpoint import BLOCKS


def test_block_sizes_and_largest_magnitudes():
    assert (_formats.NVFP4_BLOCK, _formats.MXFP4_BLOCK) == (reference.NVFP4_BLOCK, reference.MXFP4_BLOCK) == (16, 32)
    assert _formats.E2M1_MAX == max(reference.E2M1_MAGNITUDES) == 6.0
    assert _formats.E4M3_MAX == reference.E4M3_MAX == torch.finfo(torch.float8_e4m3fn).max
    assert _formats.GLOBAL_SCALE_DIVISOR == reference.GLOBAL_SCALE_DIVISOR == 2688.0


def test_scale_dtypes_are_those_the_reference_writes():
    x = torch.randn(2, 64)
    assert reference.quantize_nvfp4(x)[1].dtype == _formats.NVFP4_SCALE_DTYPE == torch.float8_e4m3fn
    assert reference.quantize_mxfp4(x)[1].dtype == _formats.MXFP4_SCALE_DTYPE == torch.float8_e8m0fnu
    assert set(_formats.SCALE_DTYPES) == {_formats.NVFP4_SCALE_DTYPE, _formats.MXFP4_SCALE_DTYPE}


def test_every_product_module_uses_the_same_facts():
    assert (fp4ops.NVFP4Tensor.block, fp4ops.NVFP4Tensor.scale_dtype) == _formats.FORMATS["nvfp4"]
    assert (fp4ops.MXFP4Tensor.block, fp4ops.MXFP4Tensor.scale_dtype) == _formats.FORMATS["mxfp4"]
    assert nn.FORMATS == _formats.FORMATS
    assert BLOCKS == {"nvfp4": _formats.NVFP4_BLOCK, "mxfp4": _formats.MXFP4_BLOCK}


def test_scale_rules_are_the_references():
    block_max = torch.tensor([0.0, 1.0, 5.0, 6.5e4])
    for rule in _formats.SCALE_RULES:
        reference.mxfp4_scale_exponent(block_max, rule)
    with pytest.raises(ValueError, match="scale_rule: expected 'floor' or 'rceil', got 'ceil'"):
        reference.mxfp4_scale_exponent(block_max, "ceil")
    with pytest.raises(ValueError, match="scale_rule: expected 'floor' or 'rceil', got 'ceil'"):
        fp4ops.quantize_mxfp4(torch.randn(32), scale_rule="ceil")


def test_global_scale_rule_equals_the_references_bit_for_bit():
    """g = amax / 2688 (1 when 0), one rounding, on random amax of every magnitude and the edges."""
    amax = torch.cat([torch.rand(10_000) * torch.exp2(torch.randint(-140, 128, (10_000,)).float()),
                      torch.tensor([0.0, torch.finfo(torch.float32).tiny, 2.0**-149, 2688.0, 6.0 * 448,
                                    torch.finfo(torch.float32).max])])
    amax = amax.clamp(max=torch.finfo(torch.float32).max)
    product = _formats.global_scale_from_amax(amax)
    oracle = reference.nvfp4_global_scale(amax)
    assert torch.equal(product.view(torch.int32), oracle.view(torch.int32))
    assert product[amax == 0].eq(1.0).all() and (amax == 0).any()
    # and it is the g the quantizer computes from its own amax
    x = torch.randn(8, 64) * 37.0
    assert torch.equal(fp4ops.quantize_nvfp4(x).global_scale, _formats.global_scale_from_amax(fp4ops.amax(x)))
