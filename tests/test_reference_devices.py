"""fp4ops.reference gives the same bits on every device, and so does the Python-side global scale.

PyTorch's CUDA kernels divide by a Python number as a multiplication by its rounded reciprocal
(two roundings). The reference therefore divides by 6 and 2688 through a tensor divisor; these
tests build inputs where the two roundings change the result, check on the CPU that they do (so
the tests can fail), and compare CUDA against the CPU bit for bit."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_same_bytes, requires_cuda

import fp4ops
from fp4ops import _formats, reference


def near_e4m3_midpoints() -> torch.Tensor:
    """Block maxima v with v / 6 within a few fp32 ulps of a midpoint between two E4M3 values."""
    values = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    midpoints = (values[1:] + values[:-1]) / 2
    midpoints = midpoints[midpoints > 2.0**-6]
    steps = torch.arange(-8, 9, dtype=torch.float64) * 2.0**-24
    return (6 * midpoints.double()[:, None] * (1 + steps)).float().flatten()


def blocks_with_maxima(maxima: torch.Tensor, block: int) -> torch.Tensor:
    """One block per maximum: the maximum first, then smaller random values of either sign."""
    maxima = maxima[: maxima.numel() // 4 * 4]  # four blocks per row
    rest = (torch.rand(maxima.numel(), block - 1) * 2 - 1) * maxima[:, None]
    return torch.cat([maxima[:, None], rest], dim=1).reshape(-1, 4 * block)


def test_inputs_are_sensitive_to_reciprocal_division():
    v = near_e4m3_midpoints()
    exact = reference.e4m3_encode(v / torch.tensor(6.0)).view(torch.uint8)
    via_reciprocal = reference.e4m3_encode(v * torch.tensor(1 / 6, dtype=torch.float32)).view(torch.uint8)
    assert (exact != via_reciprocal).sum() >= 5
    amax = torch.rand(100_000) * 1000
    assert (amax / torch.tensor(2688.0) != amax * torch.tensor(1 / 2688, dtype=torch.float32)).any()


@requires_cuda
def test_reference_nvfp4_same_bits_on_cuda():
    x = blocks_with_maxima(near_e4m3_midpoints(), 16)
    g = torch.tensor(1.0)
    cpu = reference.quantize_nvfp4(x, g)
    cuda = reference.quantize_nvfp4(x.cuda(), g.cuda())
    for a, b, what in zip(cuda, cpu, ("data", "scales", "global scale")):
        assert_same_bytes(a.cpu().view(torch.uint8) if a.dim() else a.cpu().reshape(1).view(torch.uint8),
                          b.view(torch.uint8) if b.dim() else b.reshape(1).view(torch.uint8), what)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
def test_kernels_match_reference_near_ties(device):
    x = blocks_with_maxima(near_e4m3_midpoints(), 32)
    data, scales, _ = reference.quantize_nvfp4(x, torch.tensor(1.0))
    q = fp4ops.quantize_nvfp4(x.to(device), torch.tensor(1.0, device=device))
    assert_same_bytes(q.scales, scales, "NVFP4 scales")
    assert_same_bytes(q.data, data, "NVFP4 data")
    data, scales = reference.quantize_mxfp4(x, "rceil")
    m = fp4ops.quantize_mxfp4(x.to(device), scale_rule="rceil")
    assert_same_bytes(m.scales, scales, "MXFP4 scales")
    assert_same_bytes(m.data, data, "MXFP4 data")


@requires_cuda
def test_reference_mxfp4_rceil_same_bits_on_cuda():
    x = blocks_with_maxima(near_e4m3_midpoints(), 32)
    cpu = reference.quantize_mxfp4(x, "rceil")
    cuda = reference.quantize_mxfp4(x.cuda(), "rceil")
    assert_same_bytes(cuda[0], cpu[0], "data")
    assert_same_bytes(cuda[1], cpu[1], "scales")


@requires_cuda
@pytest.mark.parametrize("where", ["reference", "product"])
def test_global_scale_same_bits_on_cuda(where):
    amax = torch.rand(100_000) * 1000
    fn = reference.nvfp4_global_scale if where == "reference" else _formats.global_scale_from_amax
    assert_same_bytes(fn(amax.cuda()).cpu().view(torch.uint8), (amax / torch.tensor(2688.0)).view(torch.uint8), "g")
    # and the kernels' own-amax path agrees with it on a tensor whose amax is each of a few values
    for value in amax[:8].tolist():
        x = torch.full((1, 16), value, device="cuda")
        assert_same_bytes(fp4ops.quantize_nvfp4(x).global_scale.reshape(1), fn(torch.tensor([value], device="cuda")), "g")
