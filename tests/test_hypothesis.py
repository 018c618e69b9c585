"""Property tests on the CPU kernels: random shapes, dtypes, magnitudes and special values."""

from __future__ import annotations

import torch
from conftest import assert_exact, assert_same_bytes
from test_properties import FORMATS, assert_within_half_a_grid_step, quantize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fp4ops
from fp4ops import reference

SPECIALS = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 6.0, -6.0, 448.0, 2.0**-149, 3.4e38]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@st.composite
def tensors(draw, block: int):
    """A tensor with 0-2 leading dims, K a multiple of `block`, values spread over many binades,
    sprinkled with special values."""
    lead = draw(st.lists(st.integers(0, 4), min_size=0, max_size=2))
    k = block * draw(st.integers(1, 4))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    shape = (*lead, k)
    exponent = draw(st.integers(-60, 60))
    spread = draw(st.integers(0, 40))
    x = torch.randn(shape, generator=gen) * torch.exp2(exponent + spread * (torch.rand(shape, generator=gen) - 0.5))
    if x.numel() and draw(st.booleans()):
        positions = torch.randint(0, x.numel(), (draw(st.integers(1, 4)),), generator=gen)
        x.view(-1)[positions] = torch.tensor([draw(st.sampled_from(SPECIALS)) for _ in range(positions.numel())])
    return x.to(dtype)


PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(x=tensors(block=16), given_scale=st.booleans())
def test_nvfp4_matches_reference(x, given_scale):
    g = torch.tensor(0.37) if given_scale else None
    q = fp4ops.quantize_nvfp4(x, g)
    data, scales, g_ref = reference.quantize_nvfp4(x, g)
    assert_same_bytes(q.data, data, "data")
    assert_same_bytes(q.scales, scales, "scales")
    assert_exact(q.global_scale, g_ref)
    assert_exact(q.dequantize(torch.float32), reference.dequantize_nvfp4(data, scales, g_ref, torch.float32))


@PROPERTY_SETTINGS
@given(x=tensors(block=32), scale_rule=st.sampled_from(["floor", "rceil"]))
def test_mxfp4_matches_reference(x, scale_rule):
    q = fp4ops.quantize_mxfp4(x, scale_rule=scale_rule)
    data, scales = reference.quantize_mxfp4(x, scale_rule)
    assert_same_bytes(q.data, data, "data")
    assert_same_bytes(q.scales, scales, "scales")
    assert_exact(q.dequantize(torch.bfloat16), reference.dequantize_mxfp4(data, scales, torch.bfloat16))


@PROPERTY_SETTINGS
@given(x=tensors(block=32))
def test_rceil_round_trip_never_clips(x):
    """rceil's scale covers the block max, so every element of a finite block comes back within
    half an E2M1 step (at most 1, times the scale) and never saturates. Blocks whose max exceeds
    2^127 are left out: an element can round up past FLT_MAX there (e.g. 1.998 * 2^127 -> 4 * 2^126)
    and SPEC's fp32 dequantize then gives Inf."""
    xf = x.float()
    q = fp4ops.quantize_mxfp4(x, scale_rule="rceil")
    y = q.dequantize(torch.float32).double()
    scale = q.scales.float().double().repeat_interleave(32, dim=-1)
    blocks = xf.reshape(*xf.shape[:-1], xf.shape[-1] // 32, 32)
    checked = (torch.isfinite(blocks).all(-1) & (blocks.abs().amax(-1) <= 2.0**127)).repeat_interleave(32, dim=-1)
    err = (y - xf.double()).abs()[checked]
    assert (err <= scale[checked] * (1.0 + 2.0**-20)).all()


@PROPERTY_SETTINGS
@given(x=tensors(block=32), fmt=st.sampled_from(FORMATS))
def test_round_trip_within_specs_bound(x, fmt):
    """dequantize(quantize(x)) within SPEC's bound for every finite x (special values are the
    matches-reference tests' business: a block holding one decodes to NaN)."""
    x = torch.nan_to_num(x.float(), nan=0.0, posinf=1.0, neginf=-1.0).to(x.dtype)
    assert_within_half_a_grid_step(x, quantize(x, fmt), fmt)
