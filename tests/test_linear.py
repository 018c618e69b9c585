"""fp4ops.linear (y = x W^T + bias with FP4 weights) against the float64 reference within SPEC 5's
bound, and its promises: leading dimensions, strides, swizzled scales, empty batches, determinism,
rows independent of the batch (CUDA: up to 64 rows, 128 on the warpgroup MMA for most weights,
or any count with batch_invariant=True), NaN confined to its row or column, torch.compile without
a recompile per row count, CUDA graphs.
The >2^31-byte weight is in test_huge.py, the op's opcheck samples in test_opcheck.py and the
bad inputs in bad_inputs.py."""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import random
import re
import shutil
import subprocess

import pytest
import torch
from conftest import HAS_CUDA, assert_exact, built_cubin_archs, requires_caching_allocator, requires_cuda, same_bits

import fp4ops
from fp4ops import reference

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
FORMATS = ["nvfp4", "mxfp4"]
X_KINDS = ["bfloat16", "float16", "fp4"]
OUT_DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# Row counts around the CUDA dispatch (the kernel family's 8-row tiles and its crossover at 64
# rows, 128 on the warpgroup MMA).
ROW_COUNTS = [0, 1, 2, 3, 7, 8, 9, 16, 31, 33, 64, 65, 128, 130]
# (N, K): N not a multiple of 16 (40, 24), K a multiple of 128 (the tensor-core kernels) or not
# (96, 160: the CUDA op's fallback).
SHAPES = [(40, 128), (64, 256), (48, 1024), (16, 4096), (40, 96), (24, 160), (130, 512)]
NAN_CODE = {"nvfp4": 0x7F, "mxfp4": 0xFF}


def quantize(x: torch.Tensor, fmt: str):
    return fp4ops.quantize_nvfp4(x) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(x)


def weight(fmt: str, n: int, k: int, device: str):
    """A quantized [N, K] weight from fresh heavy-tailed data."""
    return quantize(torch.distributions.StudentT(3.0).sample((n, k)).to(device), fmt)


def activations(x_kind: str, fmt: str, shape: tuple, device: str):
    """Fresh x of `shape`: dense (x_kind names the dtype) or FP4 of w's format."""
    x = torch.randn(shape, device=device)
    return quantize(x, fmt) if x_kind == "fp4" else x.to(getattr(torch, x_kind))


def one_row_calls(pool, w, **kwargs) -> torch.Tensor:
    """linear of each row of `pool` alone, stacked: the references of the batch-invariance tests."""
    return torch.cat([fp4ops.linear(pool[i:i + 1], w, **kwargs) for i in range(pool.shape[0])])


@functools.cache
def warpgroup_mma_serves_128_rows() -> bool:
    """Whether this GPU and build run 65-128 rows on the warpgroup MMA at all: compute capability
    9.0 and an sm_90a cubin (False also where the build's cubins cannot be listed: then a call of
    65-128 rows is held to the looser bound of the dequantize path, which the kernel family's
    results also meet)."""
    archs = built_cubin_archs() if HAS_CUDA and torch.cuda.get_device_capability() == (9, 0) else None
    return bool(archs and "sm_90a" in archs)


def linear_splits(n: int, k: int) -> int:
    """linear.cu's linear_splits: the K ranges of an N x K weight."""
    tiles, steps = -(-n // 16), k // 128
    nearest = (2 * 2048 + tiles) // (2 * tiles)
    most = max(1, steps // 8)
    if tiles * most < 512:
        most = max(most, steps // 4)
    one_range_fills = 6 * tiles >= 5 * 2048
    if 1 <= nearest <= most and nearest * tiles <= 2048 and (nearest > 1 or one_range_fills):
        if -(-steps // nearest) <= (56 if nearest == 1 else 40):
            return nearest
    wanted = max(nearest, -(-steps // 28))
    splits = min(max(wanted, 1), most, -(-4096 // tiles))
    return next((equal for equal in range(splits, most + 1) if steps % equal == 0), splits)


def eight_warp_ctas(n: int, k: int, row_chunks: int) -> int:
    """linear.cu's eight_warp_ctas for an N x K weight: CTAs of 8 warps of 16 weight rows, times
    the K ranges, times the row chunks."""
    return -(-n // 128) * linear_splits(n, k) * row_chunks


def kernel_family_rows(n: int, k: int, fmt: str) -> int:
    """Rows up to which a CUDA call of an N x K weight of format `fmt` runs the kernel family
    without batch_invariant (linear.cu's linear_row_bounds): 128 where the warpgroup MMA serves
    them and either one 128-row chunk's grid of 8-warp CTAs fills the SMs once or two 64-row chunks
    fit one wave of two CTAs an SM with K ranges of at least 8 steps; else 64 (either format)."""
    if not warpgroup_mma_serves_128_rows():
        return 64
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = linear_splits(n, k)
    long_ranges = -(-(k // 128) // splits) >= 8
    return 128 if eight_warp_ctas(n, k, 1) >= sms or (eight_warp_ctas(n, k, 2) <= 2 * sms and long_ranges) else 64


def test_linear_splits_copy_matches_linear_cu(tmp_path):
    """This file's linear_splits against linear.cu's, the function cut from the source and built by
    the host compiler (kLinearTileRows from linear_mma.cuh), over random weights and the edges: the
    GPU tests' preconditions and row bounds rely on the copy being exact."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("needs a host C++ compiler")
    cuda = pathlib.Path(__file__).resolve().parents[1] / "csrc" / "cuda"
    source = (cuda / "linear.cu").read_text()
    begin = source.index("int linear_splits(int64_t n, int64_t steps) {")
    tile_rows = re.search(r"constexpr int kLinearTileRows = (\d+);", (cuda / "linear_mma.cuh").read_text()).group(1)
    program = tmp_path / "linear_splits.cpp"
    headers = "#include <algorithm>\n#include <cstdint>\n#include <cstdio>\n"
    program.write_text(f"{headers}constexpr int kLinearTileRows = {tile_rows};\n"
                       + source[begin:source.index("\n}\n", begin) + 3]
                       + "int main() { long n, s; while (std::scanf(\"%ld %ld\", &n, &s) == 2) "
                         "std::printf(\"%d\\n\", linear_splits(n, s)); }\n")
    subprocess.run([compiler, "-std=c++17", "-O1", str(program), "-o", str(tmp_path / "linear_splits")], check=True)
    weights = [(random.randrange(1, 1 << 17), 128 * random.randrange(1, 1000)) for _ in range(5000)]
    edges = (1, 16, 17, 1365, 1366, 1706, 1707, 2048, 2049, 4096, 65536)
    weights += [(16 * tiles, k) for tiles in edges for k in (128, 3584, 7168, 8192)]
    run = subprocess.run([str(tmp_path / "linear_splits")], input="".join(f"{n} {k // 128}\n" for n, k in weights),
                         capture_output=True, text=True, check=True)
    assert [int(count) for count in run.stdout.split()] == [linear_splits(n, k) for n, k in weights]


def dequantize_path_dtype(device: str, x, w, out_dtype: torch.dtype, batch_invariant: bool = False):
    """The 16-bit dtype the CUDA op's dequantize + cuBLAS path rounds its operands to (docs/SPEC.md
    5.1), or None where the call runs the kernel family (K a multiple of 128 with at most
    kernel_family_rows(N, K, format) rows, or batch_invariant) or on the CPU."""
    rows, k = x.shape[:-1].numel(), x.shape[-1]
    if device != "cuda" or rows == 0:
        return None
    fmt = "nvfp4" if isinstance(w, fp4ops.NVFP4Tensor) else "mxfp4"
    if k % 128 == 0 and (batch_invariant or rows <= kernel_family_rows(w.shape[0], k, fmt)):
        return None
    if isinstance(x, torch.Tensor):
        return x.dtype
    return torch.bfloat16 if out_dtype == torch.float32 else out_dtype


def assert_within_bound(y: torch.Tensor, x, w, bias, out_dtype: torch.dtype, device: str = "cpu") -> None:
    """SPEC 5's bound against the float64 product of the dequantized operands, the bias counted as
    one more product (plus the dequantize path's rounding where the CUDA call takes it); and not
    all zero, so a kernel writing nothing cannot pass."""
    rounded_to = dequantize_path_dtype(device, x, w, out_dtype)
    x, w, bias = x.to("cpu"), w.to("cpu"), None if bias is None else bias.to("cpu")
    ref = reference.linear_float64(x, w, bias)
    bound = reference.linear_error_bound(x, w, bias, out_dtype, rounded_to)
    assert y.dtype == out_dtype and y.shape == ref.shape
    assert torch.isfinite(ref).all()
    err = (y.cpu().double() - ref).abs()
    assert (err <= bound).all(), f"max err/bound {(err / bound).max().item():.3f}"
    if ref.numel():
        assert (y != 0).any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_kind", X_KINDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"N{s[0]}-K{s[1]}")
@pytest.mark.parametrize("m", ROW_COUNTS)
def test_matches_float64_reference(m, shape, fmt, x_kind, device):
    """Every output dtype, each without and with a bias (its dtype rotating over the three)."""
    n, k = shape
    w = weight(fmt, n, k, device)
    x = activations(x_kind, fmt, (m, k), device)
    for i, out_dtype in enumerate(OUT_DTYPES):
        bias_dtype = OUT_DTYPES[(i + 1) % len(OUT_DTYPES)]
        for bias in (None, torch.randn(n, device=device, dtype=bias_dtype) * 4):
            y = fp4ops.linear(x, w, bias, out_dtype=out_dtype)
            assert y.device.type == device
            assert_within_bound(y, x, w, bias, out_dtype, device)


@pytest.mark.parametrize(("out_dtype", "half_ulp_exponent"),
                         [(torch.float16, 11), (torch.bfloat16, 8), (torch.float32, 24)])
def test_cpu_kernel_rounds_once(out_dtype, half_ulp_exponent):
    """The CPU kernel rounds its (here exact) double result once: 1 + half an ulp at 1 + 2^-30
    rounds up, 1 + half an ulp - 2^-30 down, where rounding through an fp32 intermediate would see
    a tie and round both to even (1). MXFP4 W4A4 with codes +-1 in three blocks, whose E8M0 scales
    make the block sums 1, half an ulp and 2^-30. The CUDA kernels promise SPEC 5's bound only."""
    positions = [0, 32, 64]
    w_codes = torch.zeros(1, 96, dtype=torch.uint8)
    w_codes[0, positions] = 0x2  # +1
    x_codes = torch.zeros(3, 96, dtype=torch.uint8)
    x_codes[:, positions] = torch.tensor([[0x2, 0x2, 0x2], [0x2, 0x2, 0xA], [0xA, 0xA, 0xA]], dtype=torch.uint8)
    e8m0 = torch.float8_e8m0fnu
    w_scales = torch.tensor([[127, 127 - half_ulp_exponent, 127 - 30]], dtype=torch.uint8).view(e8m0)
    w = fp4ops.MXFP4Tensor(reference.pack_e2m1(w_codes), w_scales)
    x = fp4ops.MXFP4Tensor(reference.pack_e2m1(x_codes), torch.full((3, 3), 127, dtype=torch.uint8).view(e8m0))
    up = 1 + 2.0 ** (1 - half_ulp_exponent)
    assert_exact(fp4ops.linear(x, w, out_dtype=out_dtype), torch.tensor([[up], [1.0], [-up]], dtype=out_dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_kind", X_KINDS)
def test_default_out_dtype(device, x_kind):
    w = weight("nvfp4", 24, 64, device)
    y = fp4ops.linear(activations(x_kind, "nvfp4", (3, 64), device), w)
    assert y.dtype == (torch.bfloat16 if x_kind == "fp4" else getattr(torch, x_kind))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_kind", ["bfloat16", "fp4"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_leading_dimensions(device, fmt, x_kind):
    w = weight(fmt, 40, 256, device)
    bias = torch.randn(40, device=device)
    x = activations(x_kind, fmt, (2, 3, 256), device)
    y = fp4ops.linear(x, w, bias)
    assert y.shape == (2, 3, 40)
    if x_kind == "fp4":
        flat = dataclasses.replace(x, data=x.data.reshape(6, -1), scales=x.scales.reshape(6, -1))
    else:
        flat = x.reshape(6, 256)
    assert_exact(y.reshape(6, 40), fp4ops.linear(flat, w, bias))
    assert_within_bound(y, x, w, bias, y.dtype, device)
    one = flat[4]  # a 1-D x [K] gives [N], as torch.nn.functional.linear does
    assert_exact(fp4ops.linear(one, w, bias), y[1, 1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_kind", ["bfloat16", "fp4"])
def test_empty_batch(device, x_kind):
    w = weight("nvfp4", 40, 128, device)
    for shape in ((0, 128), (2, 0, 128)):
        y = fp4ops.linear(activations(x_kind, "nvfp4", shape, device), w, torch.randn(40, device=device))
        assert y.shape == (*shape[:-1], 40) and y.device.type == device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m", [5, 64, 100])
def test_non_contiguous_x(device, m):
    """Transposed, row-strided and column-sliced views give the bits of their contiguous copies."""
    k = 256
    w = weight("nvfp4", 40, k, device)
    views = {
        "transposed": torch.randn(k, m, device=device, dtype=torch.bfloat16).T,
        "every_other_row": torch.randn(2 * m, k, device=device, dtype=torch.bfloat16)[::2],
        "column_slice": torch.randn(m, k + 64, device=device, dtype=torch.bfloat16)[:, 32 : 32 + k],
        "leading_dims_permuted": torch.randn(k, 1, m, device=device, dtype=torch.bfloat16).permute(1, 2, 0),
    }
    for name, x in views.items():
        assert not x.is_contiguous(), name
        assert_exact(fp4ops.linear(x, w), fp4ops.linear(x.contiguous(), w))
    xq = fp4ops.quantize_nvfp4(torch.randn(2 * m, k, device=device))
    strided = xq[::2]
    packed = xq[torch.arange(0, 2 * m, 2, device=device)]  # an advanced index copies: contiguous
    assert strided.data.data_ptr() == xq.data.data_ptr() and packed.data.is_contiguous()
    assert_exact(fp4ops.linear(strided, w), fp4ops.linear(packed, w))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_kind", ["bfloat16", "fp4"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m", [3, 100])
def test_swizzled_scales_give_the_linear_result(device, fmt, x_kind, m):
    w = weight(fmt, 130, 256, device)  # 130 rows: the swizzled layout pads to 256
    x = activations(x_kind, fmt, (m, 256), device)
    expected = fp4ops.linear(x, w)
    x_swizzled = x if x_kind != "fp4" else x.with_scale_layout("swizzled")
    assert_exact(fp4ops.linear(x_swizzled, w.with_scale_layout("swizzled")), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_kind", ["bfloat16", "fp4"])
@pytest.mark.parametrize("m", [1, 64, 130])
def test_deterministic(device, x_kind, m):
    w = weight("nvfp4", 256, 1024, device)
    x = activations(x_kind, "nvfp4", (m, 1024), device)
    first = fp4ops.linear(x, w, out_dtype=torch.float32)
    for _ in range(4):
        assert same_bits(fp4ops.linear(x, w, out_dtype=torch.float32), first)


@requires_cuda
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", [130, 1000])
def test_k_range_partials_of_a_partial_last_tile(n, fmt):
    """K = 4096 gives these weights several K ranges, whose partial sums the kernels store and a
    second kernel adds: N = 130 and 1000 leave the last 16-row tile partly past N (stores that
    must skip the rows past N), and 130 is no multiple of 4 (no row of the partials starts on a
    16-byte boundary). Each row bitwise its one-row call at 1-64 rows (and 100 with
    batch_invariant), within SPEC 5's bound at 64."""
    w, pool, singles = assert_rows_are_single_calls_within_bound(fmt, n, 4096, (2, 9, 17, 33, 64), 64, pool_rows=100)
    assert_rows_match_single_calls(w, pool, singles, 100, batch_invariant=True)


@requires_cuda
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("n", "k"), [(512, 14336), (130, 16384)])
def test_more_k_ranges_than_one_batch_of_loads(n, k, fmt):
    """More K ranges than the reductions load at once (kLinearReduceBatch, 8): 512 x 14336 has 28
    ranges, 130 x 16384 has 32 (linear_splits), so each output's partials are added over several
    batches of loads. 512 x 14336 is reduced one feature a thread up to 16 rows and four above, so
    each row bitwise its one-row call across 1-64 rows compares the two reduction kernels' orders;
    130 (no multiple of 4) takes the one-feature kernel at every row count. Within SPEC 5's bound."""
    assert linear_splits(n, k) > 2 * 8
    assert_rows_are_single_calls_within_bound(fmt, n, k, (5, 16, 40, 64), 16)


@requires_cuda
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("n", "k"), [(40, 2048), (2048, 4608)])
def test_scale_windows_from_inside_a_window(n, k, fmt):
    """The kernels copy a weight row's block scales 32 bytes at a time where its scale row is a
    multiple of 32 bytes, one window of 4 (NVFP4) or 8 (MXFP4) steps, else a step at a time
    (linear_mma.cuh, LinearScaleRing). 40 x 2048 has 4 K ranges, from steps 0, 4, 8 and 12: MXFP4's
    64-byte scale rows start two of them inside a window. 2048 x 4608 has 4, from steps 0, 9, 18
    and 27: NVFP4's 288-byte rows start three inside a window; MXFP4's 144 bytes take the step
    copies. Each row bitwise its one-row call through the one-tile, two-tile and warpgroup kernels,
    within SPEC 5's bound at 64 rows."""
    assert linear_splits(n, k) == 4
    assert_rows_are_single_calls_within_bound(fmt, n, k, (2, 5, 9, 16, 33, 64), 64)


@requires_cuda
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("features_per_thread", [1, 4])
def test_bias_of_outputs_past_the_reduction_grid(fmt, features_per_thread):
    """The reductions read their first output's bias before their dependency wait and later
    outputs' in their loop, which runs only where a call has more outputs (one feature a thread:
    N odd) or quads of outputs (four: N % 4 == 0, past 16 rows) than the grid has threads
    (grid_for: 16 CTAs of 256 an SM). 64 rows of an N x 4096 weight, N from the SM count so that
    they do, with at least two K ranges: the biased call is the unbiased call plus the bias."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid_threads, rows, k = 16 * 256 * sms, 64, 4096
    # Outputs a quarter more than the threads (N odd), or quads a twentieth more (N % 4 == 0). So
    # many weight rows take one K range where ranges of K / 128 steps may be long enough
    # (linear_splits); K = 4096's 32 steps are past the longest, so there are at least two.
    n = (grid_threads * 5 // 4) // rows | 1 if features_per_thread == 1 else 4 * -(-(grid_threads * 21 // 20) // rows)
    assert rows * n // features_per_thread > grid_threads and linear_splits(n, k) >= 2
    w = weight(fmt, n, k, "cuda")
    x = activations("bfloat16", fmt, (rows, k), "cuda")
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    # The kernel family's epilogue multiplies the fp32 sum by the global scales, adds the bias and
    # rounds once, so with fp32 out the biased call is the unbiased call plus the bias, bit for bit
    # (not so on the CPU, whose sums are doubles that take the bias before their rounding).
    unbiased = fp4ops.linear(x, w, out_dtype=torch.float32)
    assert_exact(fp4ops.linear(x, w, bias, out_dtype=torch.float32), unbiased + bias.float())


@requires_cuda
@pytest.mark.parametrize("fmt", FORMATS)
def test_64_row_ctas_of_twelve_warps(fmt):
    """6144 x 4096 (a fused q/k/v weight): at 33-64 rows on Hopper its grid of 8-warp CTAs would put
    two CTAs on some SMs and one on the others, so its CTAs take 12 warps instead
    (linear_wgmma_64_row_warps). Each row bitwise its one-row call; within SPEC 5's bound at 64."""
    assert_rows_are_single_calls_within_bound(fmt, 6144, 4096, (33, 48, 64), 64)


def assert_rows_are_single_calls_within_bound(fmt: str, n: int, k: int, row_counts, bound_rows: int, pool_rows: int = 64):
    """On CUDA, an N x K weight of `fmt` and a pool of `pool_rows` random bf16 rows: linear of m of
    them is, row by row, their one-row calls, for each m in row_counts; the first bound_rows rows
    within SPEC 5's bound. Returns the weight, the pool and the one-row results."""
    w = weight(fmt, n, k, "cuda")
    pool = activations("bfloat16", fmt, (pool_rows, k), "cuda")
    singles = one_row_calls(pool, w)
    for m in row_counts:
        assert_rows_match_single_calls(w, pool, singles, m)
    x = pool[:bound_rows]
    assert_within_bound(fp4ops.linear(x, w, out_dtype=torch.float32), x, w, None, torch.float32, "cuda")
    return w, pool, singles


def assert_rows_match_single_calls(w, pool, singles: torch.Tensor, m: int, **kwargs) -> None:
    """linear of m random rows of pool equals, row by row, the one-row results `singles`."""
    index = torch.randperm(singles.shape[0])[:m]
    y = fp4ops.linear(pool[index.to(singles.device)], w, **kwargs)
    matches = (y.view(torch.int16) == singles[index.to(singles.device)].view(torch.int16)).all(dim=1).cpu()
    assert matches.all(), f"M = {m}: rows {index[~matches].tolist()} of the pool differ from their one-row calls"


@pytest.mark.parametrize("x_kind", ["bfloat16", "fp4"])
@pytest.mark.parametrize("fmt", FORMATS)
# K = 4096 is where the CUDA kernels may split a row's reduction over several warps; the CPU
# kernel computes every output alone, so one K shows it there.
@pytest.mark.parametrize(("device", "k"), [("cpu", 1024), pytest.param("cuda", 1024, marks=requires_cuda),
                                          pytest.param("cuda", 4096, marks=requires_cuda)])
def test_each_row_independent_of_the_batch_up_to_64_rows(device, k, fmt, x_kind):
    """For every M in 1..64, each row of linear(x) is bitwise linear(that row alone), the other
    rows drawn at random from a pool."""
    w = weight(fmt, 72, k, device)
    pool = activations(x_kind, fmt, (64, k), device)
    singles = one_row_calls(pool, w)
    for m in range(1, 65):
        assert_rows_match_single_calls(w, pool, singles, m)


@requires_cuda
@pytest.mark.parametrize("x_kind", ["bfloat16", "float16"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_long_k_ranges_agree_across_row_counts(fmt, x_kind):
    """A weight whose K ranges are long and uneven (N 10240, K 8576: 67 steps, prime, in 3 ranges
    of 22, 22 and 23 steps: linear_splits and the kernels' split of the steps), where x staged once
    per CTA takes up to 11 rows (12 with the zeroed row, at the longest range's 23 steps) and the
    per-step kernel the rest: every row of every batch bitwise equals its one-row call, and the
    first rows are within SPEC 5's bound."""
    w = weight(fmt, 10240, 8576, "cuda")
    pool = activations(x_kind, fmt, (64, 8576), "cuda")
    singles = one_row_calls(pool, w)
    for m in (2, 8, 9, 13, 16, 17, 27, 32, 33, 64):
        assert_rows_match_single_calls(w, pool, singles, m)
    assert_within_bound(singles[:4], pool[:4], w, None, getattr(torch, x_kind), "cuda")


@requires_cuda
@pytest.mark.parametrize("x_kind", ["bfloat16", "fp4"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_row_chunks_of_a_small_grid_agree_across_row_counts(fmt, x_kind):
    """1024 x 8192 (8 K ranges of 8 steps: 512 warps of 16 weight rows), where on a GPU of 86 SMs
    or more 33-64 rows run as two row chunks of 32 with x resident in each (both formats; MXFP4 also
    on smaller GPUs, whose grids have fewer warps per SM still): every row of every batch bitwise
    equals its one-row call, and the first rows are within SPEC 5's bound."""
    w = weight(fmt, 1024, 8192, "cuda")
    pool = activations(x_kind, fmt, (64, 8192), "cuda")
    singles = one_row_calls(pool, w)
    for m in (32, 33, 40, 47, 63, 64):
        assert_rows_match_single_calls(w, pool, singles, m)
    assert_within_bound(singles[:4], pool[:4], w, None, singles.dtype, "cuda")


@requires_cuda
@pytest.mark.parametrize("x_kind", ["bfloat16", "float16", "fp4"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("n", "k"), [(1024, 8192), (6144, 4096), (16384, 4096), (8192, 28672)])
def test_each_row_independent_of_the_batch_up_to_128_rows_on_the_warpgroup_mma(n, k, fmt, x_kind):
    """Where the warpgroup MMA serves 65-128 rows: 1024 x 8192 (8 K ranges of 8 steps: 64 CTAs of
    8 warps a chunk) in two row chunks of 8 column tiles; 16384 x 4096 (4 K ranges of 8 steps) and
    8192 x 28672 (8 of 28 steps), 512 CTAs of 8 warps (two waves on any GPU up to 256 SMs), in one
    chunk of 16, with NVFP4's CTAs of 12 or 8 warps as the GPU's SMs and the ranges decide (132
    SMs: 12 for the short ranges, 8 for the long); 6144 x 4096 (192 CTAs of 8 warps) in one
    chunk of 16 where its 12-warp grid fits one wave (132 SMs: 128 CTAs); and with batch_invariant
    more rows in such chunks: every row of every batch bitwise equals its one-row call, and the
    first rows are within SPEC 5's bound."""
    if kernel_family_rows(n, k, fmt) != 128:
        pytest.skip("this weight's 65-128 rows do not run the kernel family here: it needs the warpgroup MMA "
                    "(compute capability 9.0, sm_90a) and a grid that linear_row_bounds takes")
    w = weight(fmt, n, k, "cuda")
    pool = activations(x_kind, fmt, (200, k), "cuda")
    singles = one_row_calls(pool, w)
    for m in (65, 66, 72, 97, 120, 127, 128):
        assert_rows_match_single_calls(w, pool, singles, m)
    for m in (129, 200):
        assert_rows_match_single_calls(w, pool, singles, m, batch_invariant=True)
    assert_within_bound(singles[:4], pool[:4], w, None, singles.dtype, "cuda")


@requires_cuda
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("n", "k"), [(1024, 4096), (4096, 4096), (5120, 4096), (6144, 4096), (8192, 4096)])
def test_rows_past_the_bound_take_the_path_the_tests_expect(n, k, fmt):
    """kernel_family_rows (this file's copy of linear.cu's linear_row_bounds, which the bounds of
    the other tests rely on) against the op on this GPU: with fp32 out and bf16 x, the dequantize +
    cuBLAS path returns bf16 values (docs/SPEC.md 5.1) where the kernel family's fp32 sums are not
    all bf16 values, so each call shows which path it took. Shapes on both sides of every branch of
    the rule on 132 SMs: 1024 x 4096 (4-step ranges), 4096^2 (two chunks), 5120 x 4096 and
    6144 x 4096 (one wave of 12-warp CTAs), 8192 x 4096 (1.94 waves)."""
    w = weight(fmt, n, k, "cuda")
    bound = kernel_family_rows(n, k, fmt)
    for m in (64, 65, 128, 129):
        y = fp4ops.linear(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), w, out_dtype=torch.float32)
        took_dequantize = bool((y == y.to(torch.bfloat16).float()).all())
        assert took_dequantize == (m > bound), f"{m} rows: expected {'dequantize' if m > bound else 'the kernel family'}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_kind", ["bfloat16", "fp4"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_batch_invariant_above_64_rows(device, fmt, x_kind):
    w = weight(fmt, 72, 1024, device)
    pool = activations(x_kind, fmt, (200, 1024), device)
    singles = one_row_calls(pool, w)
    for m in (65, 100, 200):
        assert_rows_match_single_calls(w, pool, singles, m, batch_invariant=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_kind", X_KINDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m", [5, 64, 100])
def test_nan_in_a_row_of_x_stays_in_that_row(device, fmt, x_kind, m):
    k = 256
    w = weight(fmt, 40, k, device)
    dense = torch.randn(m, k, device=device)
    g = fp4ops.quantize_nvfp4(dense).global_scale  # kept: the NaN must not move the amax
    if x_kind != "fp4":
        make = lambda t: t.to(getattr(torch, x_kind))  # noqa: E731
    else:
        make = (lambda t: fp4ops.quantize_nvfp4(t, g)) if fmt == "nvfp4" else fp4ops.quantize_mxfp4  # noqa: E731
    clean = fp4ops.linear(make(dense), w, out_dtype=torch.float32)
    row, col = int(torch.randint(0, m, ())), int(torch.randint(0, k, ()))
    dense[row, col] = float("nan")
    y = fp4ops.linear(make(dense), w, out_dtype=torch.float32)
    others = torch.arange(m, device=device) != row
    assert torch.isnan(y[row]).all()
    assert same_bits(y[others], clean[others])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_kind", ["bfloat16", "fp4"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m", [3, 100])
def test_nan_block_scale_in_w_makes_its_column_nan(device, fmt, x_kind, m):
    n, k = 40, 256
    w = weight(fmt, n, k, device)
    x = activations(x_kind, fmt, (m, k), device)
    clean = fp4ops.linear(x, w, out_dtype=torch.float32)
    column, block = int(torch.randint(0, n, ())), int(torch.randint(0, w.scales.shape[1], ()))
    scales = w.scales.clone()
    scales.view(torch.uint8)[column, block] = NAN_CODE[fmt]
    y = fp4ops.linear(x, dataclasses.replace(w, scales=scales), out_dtype=torch.float32)
    others = torch.arange(n, device=device) != column
    assert torch.isnan(y[:, column]).all()
    assert same_bits(y[:, others], clean[:, others])


def linear_of_parts(x, w_data, w_scales, w_global, bias, quantize_x: bool):
    """fp4ops.linear with W built from its tensors (a compiled function's inputs are tensors)."""
    x = fp4ops.quantize_nvfp4(x) if quantize_x else x
    return fp4ops.linear(x, fp4ops.NVFP4Tensor(w_data, w_scales, w_global), bias)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_kind", ["bfloat16", "fp4"])
def test_compile_dynamic_rows_without_recompiling(device, x_kind):
    """fullgraph, dynamic=True: one graph for M = 1 (dynamo specializes sizes 0 and 1), one for
    every other M, across the CUDA op's 64-row crossover; results bitwise equal to eager."""
    torch._dynamo.reset()
    w = weight("nvfp4", 40, 256, device)
    bias = torch.randn(40, device=device, dtype=torch.bfloat16)
    args = (w.data, w.scales, w.global_scale, bias, x_kind == "fp4")
    compiled = torch.compile(linear_of_parts, fullgraph=True, dynamic=True)
    for i, m in enumerate((1, 5, 17, 64, 100)):
        x = torch.randn(m, 256, device=device, dtype=torch.bfloat16)
        with torch._dynamo.config.patch(error_on_recompile=i >= 2):
            got = compiled(x, *args)
        assert_exact(got, linear_of_parts(x, *args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_compile_fp4linear_dynamic_rows_without_recompiling(device, fmt):
    torch._dynamo.reset()
    layer = fp4ops.nn.FP4Linear.from_linear(torch.nn.Linear(256, 40).to(device), fmt)
    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for i, m in enumerate((1, 5, 17, 64, 100)):
            x = torch.randn(2, m, 256, device=device, dtype=torch.bfloat16)
            with torch._dynamo.config.patch(error_on_recompile=i >= 2):
                got = compiled(x)
            assert_exact(got, layer(x))


@requires_cuda
@requires_caching_allocator
@pytest.mark.parametrize("x_kind", ["bfloat16", "fp4"])
@pytest.mark.parametrize("m", [4, 48])
def test_cuda_graph_capture_and_replay(m, x_kind):
    w = weight("nvfp4", 96, 1024, "cuda")
    bias = torch.randn(96, device="cuda", dtype=torch.float16)
    args = (w.data, w.scales, w.global_scale, bias, x_kind == "fp4")
    static_x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()  # warm up on a side stream, as capture wants
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        linear_of_parts(static_x, *args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = linear_of_parts(static_x, *args)
    for _ in range(3):
        static_x.copy_(torch.randn_like(static_x))
        graph.replay()
        torch.cuda.synchronize()
        assert same_bits(captured, linear_of_parts(static_x, *args))
