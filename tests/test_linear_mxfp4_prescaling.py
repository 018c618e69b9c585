"""MXFP4 weights in fp4ops.linear on CUDA. The kernels multiply each block's E8M0 scale into the
decoded weight so that the MMAs sum a whole K range, exactly for the codes whose values the MMA's
type holds: bf16 x (value x 2^(E - 132)) codes 0..133; fp16 x (the value itself) a window of 25-30
codes that depends on the GPU's E2M1 decoder (107..136 on Hopper, 104..128 on Ampere and Ada's
code path, 113..140 with Blackwell's conversion). A block with a code outside it (NaN included)
adds zeros there and its sum after the main loop; the other blocks of its step, other rows' too,
keep their factors. Here weights sit at the edges
of both windows: codes 0..6 (bf16 subnormals; below fp16's window), single blocks at each window's
first and last code and one past them, whole warps of rows above both, and an all-zero row; every
result is checked against SPEC 5's bound (a step left out or added twice fails it), and every row
of every batch of 1..64 rows (65-160 where the warpgroup MMA takes 128-row chunks) bitwise
against its one-row call, across the mma.sync and warpgroup-MMA kernels."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import requires_cuda
from test_linear import assert_rows_match_single_calls, assert_within_bound, kernel_family_rows, one_row_calls

import fp4ops

# The first 48 weight rows (three warps of 16 rows) and their scale codes.
EDGE_ROWS = 48
TYPICAL, TINY, OUTSIDE = range(0, 16), range(16, 32), range(32, 48)
# row: (block, code) in the typical warp: the windows' first and last codes and their neighbours.
SINGLE_BLOCKS = {3: (5, 150), 12: (30, 134), 9: (17, 133), 0: (1, 103), 1: (2, 104), 2: (3, 106), 4: (6, 107),
                 5: (9, 112), 6: (10, 113), 7: (12, 128), 8: (14, 129), 10: (20, 136), 11: (25, 137), 13: (27, 140),
                 14: (29, 141)}
ZERO_ROW = 40  # code 0 and zero elements, among the outside rows


def edge_weight(n: int, k: int) -> fp4ops.MXFP4Tensor:
    """An [n, k] MXFP4 weight from heavy-tailed data, its first EDGE_ROWS rows set as above."""
    w = fp4ops.quantize_mxfp4(torch.distributions.StudentT(3.0).sample((n, k)).cuda())
    scales, data = w.scales.view(torch.uint8).clone(), w.data.clone()
    blocks = scales.shape[1]
    scales[TINY.start:TINY.stop] = torch.randint(0, 7, (len(TINY), blocks), device="cuda", dtype=torch.uint8)
    scales[OUTSIDE.start:OUTSIDE.stop] = torch.randint(142, 201, (len(OUTSIDE), blocks), device="cuda", dtype=torch.uint8)
    for row, (block, code) in SINGLE_BLOCKS.items():
        scales[row, block] = code
    scales[ZERO_ROW], data[ZERO_ROW] = 0, 0
    return dataclasses.replace(w, data=data, scales=scales.view(torch.float8_e8m0fnu))


def first_rows(w: fp4ops.MXFP4Tensor, rows: int) -> fp4ops.MXFP4Tensor:
    return w[:rows]


@requires_cuda
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
# One small layer (two K ranges of 4 steps); one whose K ranges of 9-10 steps put 17-32 rows on
# the kernel that stages x per step.
@pytest.mark.parametrize(("n", "k"), [(48, 1024), (10240, 8576)])
def test_window_edges_within_bound(n, k, out_dtype, x_dtype):
    w = edge_weight(n, k)
    x = torch.randn(64, k, device="cuda", dtype=x_dtype)
    for m in (1, 9, 17, 40, 64):
        y = fp4ops.linear(x[:m], w, out_dtype=out_dtype)
        assert_within_bound(y[:, :EDGE_ROWS], x[:m], first_rows(w, EDGE_ROWS), None, out_dtype, "cuda")
    # The edges were reached: the tiny rows' results lie far below fp32's normal products of
    # weights near 1, the outside rows' far above, and the zero row is zero.
    tiny, big = y[:, TINY.start:TINY.stop].abs().float(), y[:, OUTSIDE.start:OUTSIDE.stop].abs().float()
    assert (tiny > 0).float().mean() > 0.9 and (tiny < 2.0**-100).all()
    assert (big.median() > 2.0**60) and not y[:, ZERO_ROW].any()


@requires_cuda
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("n", "k"), [(48, 1024), (10240, 8576)])
def test_window_edges_rows_match_single_calls(n, k, x_dtype):
    w = edge_weight(n, k)
    pool = torch.randn(64, k, device="cuda", dtype=x_dtype)
    singles = one_row_calls(pool, w)
    for m in range(1, 65):
        assert_rows_match_single_calls(w, pool, singles, m)


@requires_cuda
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16])
def test_window_edges_up_to_128_rows_on_the_warpgroup_mma(x_dtype):
    """The edges at 65-128 rows, where the warpgroup MMA serves them in one chunk of 16 column
    tiles (10240 x 8576: 560 CTAs of 8 warps, over 1.5 waves on any GPU up to 373 SMs), and past
    128 rows with batch_invariant: within SPEC 5's bound, and each row bitwise its one-row call."""
    n, k = 10240, 8576
    if kernel_family_rows(n, k, "mxfp4") != 128:
        pytest.skip("this weight's 65-128 rows do not run the kernel family here: it needs the warpgroup MMA "
                    "(compute capability 9.0, sm_90a) and a grid that linear_row_bounds takes")
    w = edge_weight(n, k)
    pool = torch.randn(160, k, device="cuda", dtype=x_dtype)
    singles = one_row_calls(pool, w)
    for m in (65, 100, 128):
        assert_rows_match_single_calls(w, pool, singles, m)
    assert_rows_match_single_calls(w, pool, singles, 160, batch_invariant=True)
    y = fp4ops.linear(pool[:128], w, out_dtype=torch.float32)
    assert_within_bound(y[:4, :EDGE_ROWS], pool[:4], first_rows(w, EDGE_ROWS), None, torch.float32, "cuda")
    big = y[:, OUTSIDE.start:OUTSIDE.stop].abs()
    assert big.median() > 2.0**60 and not y[:, ZERO_ROW].any()


@requires_cuda
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m", [3, 40])  # the mma.sync kernel, the warpgroup-MMA kernel
@pytest.mark.parametrize("code", [150, 255])  # outside both windows; NaN
def test_outside_block_leaves_other_rows_bitwise(code, m, x_dtype):
    """One block of one weight row set outside the window changes no other output column's bits,
    though the other rows of its warp share the step: x spans many binades, so that the sums round
    and a different order of additions would show."""
    n, k = 48, 1024
    w = fp4ops.quantize_mxfp4(torch.distributions.StudentT(3.0).sample((n, k)).cuda())
    scales = w.scales.view(torch.uint8).clone()
    scales.clamp_(113, 128)  # every clean block inside every window
    spread = 2.0 ** torch.randint(-12, 13, (m, k), device="cuda")
    x = (torch.randn(m, k, device="cuda") * spread).to(x_dtype)
    clean = fp4ops.linear(x, dataclasses.replace(w, scales=scales.view(torch.float8_e8m0fnu)), out_dtype=torch.float32)
    row, block = int(torch.randint(0, n, ())), int(torch.randint(0, k // 32, ()))
    scales[row, block] = code
    y = fp4ops.linear(x, dataclasses.replace(w, scales=scales.view(torch.float8_e8m0fnu)), out_dtype=torch.float32)
    others = torch.arange(n, device="cuda") != row
    assert torch.equal(y[:, others].view(torch.int32), clean[:, others].view(torch.int32))
    if code == 255:
        assert torch.isnan(y[:, row]).all()
