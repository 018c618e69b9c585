"""MXFP4 x (W4A4) in fp4ops.linear on CUDA. The op decodes x once per call into its exact bf16
values (bf16 holds every MXFP4 value below 2^128, the smallest scales as subnormals) and runs the
dense bf16 kernels, so each result is bitwise that of the same call with x dequantized to bf16.
Checked here over every kernel kind (1-64 rows), with blocks at both ends of the E8M0 range (codes
0 and 2, 244 and 254, and 253 with elements of 2^128, which become infinities as in the bf16
dequantization), NaN blocks, an all-zero row and products below fp32's normal range; every row of
every batch bitwise against its one-row call; the finite rows within SPEC 5's bound."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import requires_cuda, same_bits
from test_linear import assert_within_bound, one_row_calls

import fp4ops

pytestmark = requires_cuda

# Rows of the pool and what is done to them (E8M0 codes). Rows 6-10: one block of ones (codes 0x2)
# or of sixes (0x7) with an extreme scale code, the rest zeros, (block, code, element code):
EDGE_ROWS = {6: (3, 0, 0x2), 7: (0, 2, 0x2), 8: (5, 244, 0x2), 9: (1, 254, 0x2), 10: (2, 253, 0x7)}
FINITE_EDGE_ROWS = [6, 7, 8]  # 9 overflows fp32 in the sums, 10 already in x (6 * 2^126)
NAN_ROW, ZERO_ROW = 11, 12  # a NaN block; an all-zero row with code 0 everywhere
# Codes 70..74: with the small-scale weight's 30..34, products of 2^-154 .. 2^-146 times E2M1
# products, below fp32's normal range.
SMALL_SCALE_ROWS = list(range(13, 16))


def with_scales(t, scales_u8: torch.Tensor, data: torch.Tensor | None = None):
    fields = {"scales": scales_u8.view(torch.float8_e8m0fnu)}
    if data is not None:
        fields["data"] = data
    return dataclasses.replace(t, **fields)


def pool_of_rows(k: int) -> fp4ops.MXFP4Tensor:
    x = fp4ops.quantize_mxfp4(torch.randn(16, k, device="cuda"))
    scales, data = x.scales.view(torch.uint8).clone(), x.data.clone()
    for row, (block, code, element) in EDGE_ROWS.items():
        data[row] = 0
        data[row, block * 16:(block + 1) * 16] = element * 0x11
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


# One K range and several (the reduction launch); a small layer and a large one.
SHAPES = [(72, 512), (72, 4096), (8192, 4096)]


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_results_are_those_of_the_bf16_dequantized_x(n, k, out_dtype):
    pool = pool_of_rows(k)
    dense = pool.dequantize(torch.bfloat16)
    assert torch.isinf(dense[10]).any() and not torch.isinf(dense[:10]).any()
    for name, w in weights(n, k).items():
        for m in (1, 5, 9, 16, 17, 33, 64):
            rows = torch.arange(m, device="cuda") % 16
            y = fp4ops.linear(pool[rows], w, out_dtype=out_dtype)
            assert same_bits(y, fp4ops.linear(dense[rows], w, out_dtype=out_dtype)), f"{name} weight, {m} rows"


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_rows_match_single_calls_whatever_the_batch(n, k, out_dtype):
    pool = pool_of_rows(k)
    normal = [0, 1, 2, 3, 4, 5, NAN_ROW, ZERO_ROW] + SMALL_SCALE_ROWS
    batches = [list(range(16)), normal, normal[:9], normal[:4] + [6], [0, 6], [13, 7, 14], [9, 14, 15, 4], [8] + normal[2:11]]
    batches += [torch.randperm(16)[:m].tolist() for m in (2, 5, 9, 16)]
    batches += [torch.randint(0, 16, (m,)).tolist() for m in (17, 40, 64)]
    as_int = torch.int32 if out_dtype == torch.float32 else torch.int16
    for name, w in weights(n, k).items():
        singles = one_row_calls(pool, w, out_dtype=out_dtype)
        for rows in batches:
            y = fp4ops.linear(pool[torch.tensor(rows, device="cuda")], w, out_dtype=out_dtype)
            same = (y.view(as_int) == singles[rows].view(as_int)).all(dim=1).cpu()
            assert same.all(), f"{name} weight, batch {rows}: rows {[r for r, s in zip(rows, same) if not s]} differ"
        assert singles[NAN_ROW].isnan().all() and not singles[ZERO_ROW].any()


@pytest.mark.parametrize("n", [40, 8192])
def test_edge_blocks_within_bound(n):
    pool = pool_of_rows(1024 if n == 40 else 4096)
    w = weights(n, pool.shape[-1])["plain"]
    x = pool[torch.tensor(FINITE_EDGE_ROWS + [0, 1], device="cuda")]
    assert_within_bound(fp4ops.linear(x, w, out_dtype=torch.float32), x, w, None, torch.float32, "cuda")
