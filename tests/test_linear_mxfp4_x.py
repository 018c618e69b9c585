"""MXFP4 x (W4A4) in fp4ops.linear on CUDA. The op decodes x once per call into bf16 values, exact
for block scales 2^-124 .. 2^116, and runs the dense kernels; in a call with a nonzero block of x
outside that window their CTAs decode the FP4 x in every warp instead. The two must give the
same bits, or a row's result would depend on the other rows of its batch: here every row, in
batches with and without such blocks, is checked bitwise against its one-row call, including rows
whose products are fp32 subnormals (fp32 output), NaN blocks and overflowing blocks; and the rows
outside the window are checked against SPEC 5's bound (a missing recomputation fails it)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import requires_cuda
from test_linear import assert_within_bound, rows_of

import fp4ops

pytestmark = requires_cuda

# Rows of the pool and what is done to them (E8M0 codes). Rows 6-9: one block of ones (codes 0x2)
# with a scale code outside the window, the rest zeros (so a missing recomputation shows in the
# result), (block, code):
OUTSIDE_ROWS = {6: (3, 0), 7: (0, 2), 8: (5, 244), 9: (1, 254)}
FINITE_OUTSIDE_ROWS = [6, 7, 8]  # 9 overflows
NAN_ROW, ZERO_ROW = 10, 11  # a NaN block; an all-zero row with code 0 everywhere (not outside)
# Codes 70..74: with the small-scale weight's 30..34, products of 2^-154 .. 2^-146 times E2M1
# products, which fp32 holds only rounded (subnormals): where an fma and a multiply-then-add differ.
SMALL_SCALE_ROWS = list(range(12, 16))


def with_scales(t, scales_u8: torch.Tensor, data: torch.Tensor | None = None):
    fields = {"scales": scales_u8.view(torch.float8_e8m0fnu)}
    if data is not None:
        fields["data"] = data
    return dataclasses.replace(t, **fields)


def pool_of_rows(k: int) -> fp4ops.MXFP4Tensor:
    x = fp4ops.quantize_mxfp4(torch.randn(16, k, device="cuda"))
    scales, data = x.scales.view(torch.uint8).clone(), x.data.clone()
    for row, (block, code) in OUTSIDE_ROWS.items():
        data[row] = 0
        data[row, block * 16:(block + 1) * 16] = 0x22
        scales[row, block] = code
    scales[NAN_ROW, 2] = 0xFF
    scales[ZERO_ROW] = 0
    data[ZERO_ROW] = 0
    scales[SMALL_SCALE_ROWS] = torch.randint(70, 75, scales[SMALL_SCALE_ROWS].shape, device="cuda", dtype=torch.uint8)
    return with_scales(x, scales, data)


def weights(n: int, k: int) -> dict[str, fp4ops.MXFP4Tensor]:
    w = fp4ops.quantize_mxfp4(torch.distributions.StudentT(3.0).sample((n, k)).cuda())
    small = torch.randint(30, 35, w.scales.shape, device="cuda", dtype=torch.uint8)
    return {"plain": w, "small scales": with_scales(w, small)}


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
# One K range and several (the reduction launch); a small layer and a large one.
@pytest.mark.parametrize(("n", "k"), [(72, 512), (72, 4096), (8192, 4096)])
def test_rows_match_single_calls_whichever_kernel_runs(n, k, out_dtype):
    pool = pool_of_rows(k)
    normal = [0, 1, 2, 3, 4, 5, 10, 11] + SMALL_SCALE_ROWS
    batches = [list(range(16)), normal, normal[:9], normal[:4] + [6], [0, 6], [12, 7, 13], [9, 14, 15, 4], [8] + normal[2:11]]
    batches += [torch.randperm(16)[:m].tolist() for m in (2, 5, 9, 16)]
    as_int = torch.int32 if out_dtype == torch.float32 else torch.int16
    for name, w in weights(n, k).items():
        singles = torch.cat([fp4ops.linear(rows_of(pool, slice(i, i + 1)), w, out_dtype=out_dtype) for i in range(16)])
        for rows in batches:
            y = fp4ops.linear(rows_of(pool, torch.tensor(rows, device="cuda")), w, out_dtype=out_dtype)
            same = (y.view(as_int) == singles[rows].view(as_int)).all(dim=1).cpu()
            assert same.all(), f"{name} weight, batch {rows}: rows {[r for r, s in zip(rows, same) if not s]} differ"
        if name == "small scales" and out_dtype == torch.float32:  # the rounded products reach the output
            tiny = singles[SMALL_SCALE_ROWS].abs()
            assert ((tiny > 0) & (tiny < 2.0**-126)).float().mean() > 0.5
        assert singles[NAN_ROW].isnan().all() and not singles[ZERO_ROW].any()


@pytest.mark.parametrize("n", [40, 8192])
def test_blocks_outside_the_window_within_bound(n):
    pool = pool_of_rows(1024 if n == 40 else 4096)
    w = weights(n, pool.shape[-1])["plain"]
    x = rows_of(pool, torch.tensor(FINITE_OUTSIDE_ROWS + [0, 1], device="cuda"))
    assert_within_bound(fp4ops.linear(x, w, out_dtype=torch.float32), x, w, None, torch.float32, "cuda")
