"""Properties that hold for every input: the error bound of SPEC's rounding, and amax."""

from __future__ import annotations

import pytest
import torch

import fp4ops


FORMATS = ["nvfp4", "mxfp4_floor", "mxfp4_rceil"]


def half_grid_step(scaled_magnitude: torch.Tensor) -> torch.Tensor:
    """Half the E2M1 grid spacing around a magnitude in [0, 6]: 0.25 below 2, 0.5 to 4, 1 to 6."""
    return torch.where(scaled_magnitude < 2, 0.25, torch.where(scaled_magnitude < 4, 0.5, 1.0)).double()


def block_factors(q) -> torch.Tensor:
    """The fp32 decode factor f of each block (SPEC 2.6: dec(sb) * g, rounded to fp32)."""
    if isinstance(q, fp4ops.NVFP4Tensor):
        return q.scales.float() * q.global_scale
    return q.scales.float()


def quantize(x: torch.Tensor, fmt: str):
    return fp4ops.quantize_nvfp4(x) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(x, scale_rule=fmt[6:])


def assert_within_half_a_grid_step(x: torch.Tensor, q, fmt: str) -> None:
    """SPEC's round-trip bound for finite x: each element comes back within half an E2M1 step
    (times its block's decode factor f), or saturated to +-6 f, or flushed to 0 with its block."""
    block = 16 if fmt == "nvfp4" else 32
    f32 = block_factors(q).repeat_interleave(block, dim=-1)  # decode factor of each element
    f = f32.double()
    y = fp4ops.dequantize(q, torch.float32).double()
    xd = x.double()
    flushed = f == 0  # NVFP4 blocks under the smallest E4M3 scale (2^-9 * g) decode to 0
    assert (y[flushed] == 0).all()
    if flushed.any():
        assert (xd.abs()[flushed] <= 6 * 2.0**-10 * q.global_scale.double()).all()
    scaled = torch.where(flushed, 0.0, xd.abs() / f)
    saturated = scaled > 6
    # Rounded up past FLT_MAX (e.g. rceil: 1.998 * 2^127 -> 4 * 2^126): SPEC's fp32 decode is Inf.
    overflowed = torch.isinf(y) & torch.isfinite(xd)
    assert (xd.abs()[overflowed] > 2.0**127).all()
    bound = half_grid_step(scaled) * f * (1 + 2.0**-20)  # slack for the fp32 multiply by 1/f
    assert ((y - xd).abs() <= bound)[~saturated & ~flushed & ~overflowed].all()
    # Where SPEC saturates (floor's scale can leave |x| / f up to 8) the code is +-6 exactly.
    assert (y[saturated].abs() == (6 * f32[saturated]).double()).all()
    if fmt == "mxfp4_rceil":
        assert (scaled <= 6 * (1 + 2.0**-23)).all()  # rceil never saturates (up to bmax / 6 rounding)
    if fmt == "nvfp4":
        # With a normal E4M3 scale (relative step 2^-3) only the scale's rounding can saturate:
        # t = (bmax / 6) / g rounds to dec(sb) >= t / (1 + 2^-4) (a tie rounded down to an even
        # mantissa reaches it), and the fp32 roundings of bmax / 6, t and f = dec(sb) * g add at
        # most 3 ulps (2^-24 each) on top: |x| / f <= 6 (1 + 2^-4)(1 + 2^-22).
        normal = (q.scales.float() >= 2.0**-6).repeat_interleave(block, dim=-1)
        assert (scaled[normal] <= 6 * (1 + 2.0**-4) * (1 + 2.0**-22)).all()


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantized_within_half_a_grid_step(fmt):
    x = torch.distributions.StudentT(3.0).sample((64, 512)) * torch.exp2(torch.randint(-20, 20, (64, 1)).float())
    q = quantize(x, fmt)
    assert_within_half_a_grid_step(x, q, fmt)
    assert torch.linalg.vector_norm(q.dequantize(torch.float32)) > 0


def test_amax_is_the_finite_max():
    x = torch.randn(1000) * 1e3
    x[torch.randint(0, 1000, (20,))] = float("nan")
    x[torch.randint(0, 1000, (5,))] = float("inf")
    x[7] = -float("inf")
    finite = x[torch.isfinite(x)]
    assert fp4ops.amax(x).item() == finite.abs().max().item()
    assert fp4ops.amax(x).dtype == torch.float32 and fp4ops.amax(x).dim() == 0
    assert fp4ops.amax(torch.full((4, 4), float("nan"))).item() == 0.0
