"""Quantize and dequantize CPU kernels against the reference, exactly (rtol=0, atol=0)."""

from __future__ import annotations

import pytest
import torch
from conftest import FLOAT_DTYPES, assert_exact, assert_same_bytes, edge_cases

import fp4ops
from fp4ops import reference

CASE_NAMES = list(edge_cases(32))
FORMATS = ["nvfp4_computed_scale", "nvfp4_given_scale", "mxfp4_floor", "mxfp4_rceil"]


def quantize_both(x: torch.Tensor, fmt: str):
    """(kernel result, reference result) as tuples of tensors for one format variant."""
    if fmt == "nvfp4_computed_scale":
        q = fp4ops.quantize_nvfp4(x)
        return (q.data, q.scales, q.global_scale), reference.quantize_nvfp4(x)
    if fmt == "nvfp4_given_scale":
        g = torch.rand(()) * 10.0 ** torch.randint(-6, 6, ()).item() + 1e-30
        q = fp4ops.quantize_nvfp4(x, g)
        return (q.data, q.scales, q.global_scale), reference.quantize_nvfp4(x, g)
    rule = fmt.removeprefix("mxfp4_")
    q = fp4ops.quantize_mxfp4(x, scale_rule=rule)
    return (q.data, q.scales), reference.quantize_mxfp4(x, rule)


def check_quantize(x: torch.Tensor, fmt: str) -> None:
    got, want = quantize_both(x, fmt)
    assert_same_bytes(got[0], want[0], "data")
    assert_same_bytes(got[1], want[1], "scales")
    assert got[1].dtype == want[1].dtype
    if len(got) == 3:
        assert_exact(got[2], want[2])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_quantize_matches_reference(case, fmt, dtype):
    check_quantize(edge_cases(64)[case].to(dtype), fmt)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_quantize_smallest_k(fmt, dtype):
    k = 16 if fmt.startswith("nvfp4") else 32
    check_quantize((torch.randn(7, k) * 100).to(dtype), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantize_large_random(fmt):
    check_quantize(torch.randn(129, 4096) * torch.exp2(torch.randint(-30, 30, (129, 1)).float()), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantize_non_contiguous_and_offset_views(fmt):
    base = torch.randn(10, 130)
    for view in (base[:, 1:129], base[:, :128].t().contiguous().t(), base[::2, 2:66]):
        check_quantize(view, fmt)


def test_invalid_global_scale_tensor_makes_every_scale_nan():
    x = torch.randn(3, 32)
    for g in (0.0, -1.0, float("inf"), float("nan")):
        q = fp4ops.quantize_nvfp4(x, torch.tensor(g))
        assert (q.scales.view(torch.uint8) == 0x7F).all() and (q.data == 0).all()
        assert torch.isnan(q.dequantize(torch.float32)).all()
        data, scales, _ = reference.quantize_nvfp4(x, torch.tensor(g))
        assert_same_bytes(q.scales, scales, "scales")


def test_nan_block_dequantizes_to_nan_and_neighbours_survive():
    x = torch.randn(1, 64)
    x[0, 20] = float("nan")
    for q in (fp4ops.quantize_nvfp4(x), fp4ops.quantize_mxfp4(x)):
        out = q.dequantize(torch.float32)
        block = 16 if isinstance(q, fp4ops.NVFP4Tensor) else 32
        nan_block = slice(20 // block * block, 20 // block * block + block)
        assert torch.isnan(out[0, nan_block]).all()
        rest = torch.ones(64, dtype=torch.bool)
        rest[nan_block] = False
        assert torch.isfinite(out[0, rest]).all() and out[0, rest].abs().sum() > 0


def random_bytes(shape) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.int32).to(torch.uint8)


@pytest.mark.parametrize("out_dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_dequantize_random_codes_matches_reference(fmt, out_dtype):
    """Every code and scale byte, NaN scales and huge products included."""
    data = random_bytes((5, 3, 64))
    if fmt == "nvfp4":
        scales = random_bytes((5, 3, 8)).view(torch.float8_e4m3fn)
        # g in [2^(k-1), 2^k), k >= -20: some products stay above fp16's smallest subnormal, so
        # the all-zero guard below holds for every output dtype (k down to -40 flushed whole fp16
        # outputs to zero now and then); k up to 40 still overflows fp16.
        g = torch.exp2(torch.randint(-20, 40, ()).float()) * (0.5 + 0.5 * torch.rand(()))
        got = fp4ops.dequantize(fp4ops.NVFP4Tensor(data, scales, g), out_dtype)
        want = reference.dequantize_nvfp4(data, scales, g, out_dtype)
    else:
        scales = random_bytes((5, 3, 4)).view(torch.float8_e8m0fnu)
        got = fp4ops.dequantize(fp4ops.MXFP4Tensor(data, scales), out_dtype)
        want = reference.dequantize_mxfp4(data, scales, out_dtype)
    assert_exact(got, want)
    assert (got.float() != 0).any()  # an all-zero output cannot pass


@pytest.mark.parametrize("out_dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_round_trip_matches_reference(case, fmt, out_dtype):
    x = edge_cases(32)[case]
    got, want = quantize_both(x, fmt)
    if fmt.startswith("nvfp4"):
        q = fp4ops.NVFP4Tensor(*got)
        expected = reference.dequantize_nvfp4(*want, out_dtype)
    else:
        q = fp4ops.MXFP4Tensor(*got)
        expected = reference.dequantize_mxfp4(*want, out_dtype)
    assert_exact(fp4ops.dequantize(q, out_dtype), expected)
    assert q.dequantize(out_dtype).shape == x.shape


def test_empty_tensors():
    for shape in [(0, 32), (2, 0), (0,)]:
        x = torch.empty(shape)
        q = fp4ops.quantize_nvfp4(x)
        assert q.data.shape == (*shape[:-1], shape[-1] // 2) and q.global_scale.item() == 1.0
        assert q.dequantize().shape == shape
        m = fp4ops.quantize_mxfp4(x)
        assert m.scales.shape == (*shape[:-1], shape[-1] // 32) and m.dequantize().shape == shape
        assert fp4ops.amax(x).item() == 0.0
        assert fp4ops.cast_from_e2m1(fp4ops.cast_to_e2m1(x)).shape == shape


def test_amax_matches_reference():
    for x in edge_cases(32).values():
        assert_exact(fp4ops.amax(x), reference.amax(x))
