"""The NVFP4 training-recipe options (Hadamard rotation, 16x16 blocks, stochastic rounding,
rowwise + columnwise in one pass) on every device against the plain-PyTorch reference, exactly,
plus the properties each option promises."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import FLOAT_DTYPES, HAS_CUDA, assert_exact, assert_same_bytes

import fp4ops
from fp4ops import reference

DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
TE_MASK = reference.hadamard_sign_mask(reference.TE_RHT_SIGNS)
SEEDED_MASK = reference.hadamard_sign_mask(reference.rht_signs(7).tolist())
# (block_2d, hadamard_signs, stochastic): every combination the op accepts.
OPTIONS = [(b2, h, sr) for b2, h, sr in itertools.product((False, True), (-1, TE_MASK, SEEDED_MASK), (False, True))
           if not (b2 and h >= 0)]


def option_id(opt) -> str:
    b2, h, sr = opt
    return f"{'2d' if b2 else '1d'}-{'rht' + str(h) if h >= 0 else 'norht'}-{'sr' if sr else 'rn'}"


def recipe_op(x, g, layout, rowwise, columnwise, opt, seed, offset):
    b2, h, sr = opt
    return torch.ops.fp4ops.quantize_nvfp4_recipe(x, g, layout, rowwise, columnwise, b2, h, seed if sr else None, offset)


def check_against_reference(x: torch.Tensor, g, rowwise: bool, columnwise: bool, opt, device: str) -> None:
    seed, offset = int(torch.randint(0, 2**62, ())), int(torch.randint(0, 2**40, ()))
    b2, h, sr = opt
    want = reference.quantize_nvfp4_recipe(x.cpu(), g, rowwise=rowwise, columnwise=columnwise, block_2d=b2,
                                           hadamard_signs=h, seed=seed if sr else None, offset=offset)
    g_dev = None if g is None else torch.tensor(g, device=device)
    for layout in ("linear", "swizzled"):
        got = recipe_op(x.to(device), g_dev, layout, rowwise, columnwise, opt, seed, offset)
        for direction, enabled in ((0, rowwise), (3, columnwise)):
            data, scales, g_out = got[direction:direction + 3]
            w_data, w_scales, w_g = want[direction:direction + 3]
            assert_exact(g_out.cpu(), w_g.cpu())
            if not enabled:
                assert data.numel() == 0 and scales.numel() == 0
                continue
            assert_same_bytes(data, w_data, f"data[{direction}] {layout}")
            expected_scales = w_scales if layout == "linear" else reference.swizzle_scales(w_scales)
            assert_same_bytes(scales, expected_scales, f"scales[{direction}] {layout}")


def recipe_input(shape, dtype) -> torch.Tensor:
    x = torch.randn(shape) * torch.exp2(torch.randint(-6, 6, (*shape[:-1], 1)).float())
    return x.to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt", OPTIONS, ids=option_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
# (3, 80, 160): several matrices, each of 2 x 3 tiles (partial in both directions) on CUDA.
@pytest.mark.parametrize("shape", [(48, 96), (2, 32, 272), (3, 80, 160), (16, 4096 + 256), (2, 0, 32)], ids=str)
def test_rowwise_and_columnwise_match_reference(shape, dtype, opt, device):
    check_against_reference(recipe_input(shape, dtype), None, True, True, opt, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt", OPTIONS, ids=option_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
# Rowwise only with 1D scales and 16-bit x takes the per-block kernel on CUDA; (2, 128, 256) has
# no swizzle padding, so it walks the blocks in swizzled-memory order there; (37, 64) and
# (3, 20, 48) end in a partial 16-row strip (2D tiles of fewer rows). Rowwise-only 2D takes the
# strip kernel on CUDA (16 rows x 32 block columns per unit): (2, 40, 1056) has 66 block columns,
# so a partial last unit in both directions, and strips that end inside each matrix. (0, 64): no rows.
@pytest.mark.parametrize("shape", [(37, 64), (3, 20, 48), (128,), (2, 128, 256), (2, 40, 1056), (0, 64)], ids=str)
def test_rowwise_only_match_reference(shape, dtype, opt, device):
    if opt[0] and len(shape) < 2:
        pytest.skip("2D blocks need 2 dimensions")
    check_against_reference(recipe_input(shape, dtype), None, True, False, opt, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt", OPTIONS, ids=option_id)
@pytest.mark.parametrize("columnwise", [False, True])
def test_unaligned_input(columnwise, opt, device):
    """x starting 2 bytes past a 16-byte boundary: the kernels' unaligned load path."""
    storage = recipe_input((1, 32 * 64 + 1), torch.bfloat16).to(device)
    x = storage[0, 1:].reshape(32, 64)
    assert x.data_ptr() % 16 != 0
    check_against_reference(x, None, True, columnwise, opt, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt", OPTIONS, ids=option_id)
def test_columnwise_only_and_given_scale(opt, device):
    check_against_reference(recipe_input((64, 80), torch.float32), 0.003, False, True, opt, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt", OPTIONS, ids=option_id)
# fp32 and bf16 through both directions (the tile kernel on CUDA; 16-bit x has the rotation's
# rowwise sign flips applied as it is loaded); bf16 rowwise only (the per-block kernel for 1D
# scales).
@pytest.mark.parametrize("columnwise, dtype", [(True, torch.float32), (True, torch.bfloat16), (False, torch.bfloat16)],
                         ids=["both-fp32", "both-bf16", "rowwise-bf16"])
def test_special_values(columnwise, dtype, opt, device):
    """NaN/Inf in a block (a rotated group, or a whole 2D tile, goes NaN with codes 0), zeros,
    -0, huge and tiny values."""
    x = torch.randn(32, 64)
    x[3, 5], x[17, 40], x[20, 0] = float("nan"), float("inf"), -float("inf")
    x[8:10] = 0.0
    x[10, :16] = -0.0
    x[11] = 3e38
    x[12] = 1e-40
    check_against_reference(x.to(dtype), None, True, columnwise, opt, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_all_options_off_is_the_plain_quantizer(dtype, device):
    x = recipe_input((3, 50, 96), dtype).to(device)
    plain = fp4ops.quantize_nvfp4(x)
    data, scales, g, *_ = recipe_op(x, None, "linear", True, False, (False, -1, False), None, 0)
    assert_same_bytes(data, plain.data, "data")
    assert_same_bytes(scales, plain.scales, "scales")
    assert_exact(g, plain.global_scale)


@pytest.mark.parametrize("device", DEVICES)
def test_columnwise_is_the_quantized_transpose(device):
    x = recipe_input((2, 48, 160), torch.bfloat16).to(device)
    rows, cols = fp4ops.quantize_nvfp4_rowwise_columnwise(x)
    t = fp4ops.quantize_nvfp4(x.transpose(-1, -2).contiguous())
    assert cols.shape == (2, 160, 48)
    assert_same_bytes(cols.data, t.data, "data")
    assert_same_bytes(cols.scales, t.scales, "scales")
    assert_same_bytes(rows.data, fp4ops.quantize_nvfp4(x).data, "rowwise data")


@pytest.mark.parametrize("device", DEVICES)
def test_2d_copies_dequantize_to_exact_transposes(device):
    w = recipe_input((96, 208), torch.float32).to(device)
    rows, cols = fp4ops.quantize_nvfp4_rowwise_columnwise(w, block_2d=True)
    assert_exact(cols.dequantize(torch.float32), rows.dequantize(torch.float32).t().contiguous())
    tiles = rows.scales.view(torch.uint8).cpu().reshape(6, 16, 13)
    assert (tiles == tiles[:, :1]).all(), "every row of a 16x16 tile carries the tile's scale"


@pytest.mark.parametrize("device", DEVICES)
def test_hadamard_rotation_is_undone(device):
    """quantize(x H) dequantized and rotated back is x within NVFP4's error, and rotating both
    operands of a GEMV leaves the product unchanged within the quantization error."""
    x = torch.randn(64, 512, device=device)
    q = fp4ops.quantize_nvfp4(x, hadamard=True)
    back = reference.inverse_rht(q.dequantize(torch.float32).cpu().double())
    rel = (back - x.cpu().double()).norm() / x.norm().item()
    assert rel < 0.2
    w = torch.randn(300, 512, device=device)
    v = torch.randn(512, device=device)
    qw, qv = fp4ops.quantize_nvfp4(w, hadamard=3), fp4ops.quantize_nvfp4(v, hadamard=3)
    y = fp4ops.gemv(qw, qv, out_dtype=torch.float32).cpu().double()
    exact = w.cpu().double() @ v.cpu().double()
    assert (y - exact).norm() / exact.norm() < 0.25


def test_rht_fp32_is_the_float64_rotation_rounded():
    """Four butterfly stages, each rounding by at most eps/2 of a partial sum bounded by the
    group's l1 norm, then an exact * 1/4: |fp32 - exact| <= eps * l1 / 2 per group."""
    x = torch.randn(50, 64) * torch.exp2(torch.randint(-20, 20, (50, 1)).float())
    fast = reference.rht_fp32(x, TE_MASK).double()
    exact = reference.rht(x.double(), reference.rht_signs(device=x.device))
    l1 = x.double().abs().reshape(50, 4, 16).sum(-1, keepdim=True).expand(50, 4, 16).reshape(50, 64)
    assert ((fast - exact).abs() <= torch.finfo(torch.float32).eps * l1 / 2).all()


@pytest.mark.parametrize("device", DEVICES)
# fp32 takes the tile kernel on CUDA, bf16 (rowwise only, 1D) the per-block kernel.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_stochastic_rounding_at_every_position(dtype, device):
    """Each block leads with 6.375 and g = 1: 6.375 / 6 = 1.0625 lies halfway between E4M3's 1 and
    1.125 and rounds to the even 1, so the scale is 1 and the other 15 elements reach the
    stochastic encoder unscaled: for fp32 every multiple of 1/512 up to 6.375 and its neighbours
    one ulp either side (the encoder's fixed-point positions and their edges), for bf16 every
    value from 0 to 6.375. Above 6 the encoder saturates (the GPU clamps a position that can
    reach 8, so (6, 6.375] checks the clamp). Random signs and order, random bits from a fresh
    seed."""
    if dtype == torch.float32:
        steps = torch.arange(0, 6.375 * 512 + 1, dtype=torch.float32) / 512
        magnitudes = torch.cat([steps, torch.nextafter(steps, torch.tensor(0.0)),
                                torch.nextafter(steps, torch.tensor(7.0))])
        magnitudes = magnitudes[magnitudes <= 6.375]
    else:
        magnitudes = torch.arange(0, 0x40CD, dtype=torch.int16).view(torch.bfloat16).float()  # 0x40CC: 6.375
    values = magnitudes * (torch.randint(0, 2, magnitudes.shape) * 2 - 1)
    values = values[torch.randperm(values.numel())]
    values = torch.cat([values, torch.zeros((-values.numel()) % (15 * 8))]).reshape(-1, 15)
    x = torch.cat([torch.full((values.shape[0], 1), 6.375), values], dim=1).reshape(-1, 128)
    check_against_reference(x.to(dtype), 1.0, True, False, (False, -1, True), device)


@pytest.mark.parametrize("device", DEVICES)
def test_stochastic_rounding_is_unbiased(device):
    """N copies of the same row, each its own random stream: the mean of the dequantized copies
    converges to the expectation of the 8-bit rule, which is within 1/256 of a grid step of x."""
    n, k, g = 4096, 64, 1.0 / 448
    row = torch.rand(k) * 12 - 6
    x = row.expand(n, k).contiguous().to(device)
    q = fp4ops.quantize_nvfp4(x, g, stochastic_rounding=True, seed=1234)
    values = q.dequantize(torch.float32).double().cpu()
    scale = reference.e4m3_decode(q.scales[0].cpu()).double().repeat_interleave(16) * g
    y = row.double() / scale  # the scaled element, on the E2M1 grid's axis
    grid = torch.tensor(reference.E2M1_MAGNITUDES, dtype=torch.float64)
    lower = (torch.searchsorted(grid, y.abs(), right=True) - 1).clamp(max=6)
    step = grid[lower + 1] - grid[lower]
    p_up = torch.floor((y.abs() - grid[lower]) / step * 256) / 256
    saturated = y.abs() >= 6  # the block scale rounded down: these clamp to 6, deterministically
    expected = torch.sign(y) * torch.where(saturated, 6.0, grid[lower] + p_up * step) * scale
    sigma = step * scale * 0.5 / n**0.5
    assert ((values.mean(0) - expected).abs() <= 5 * sigma + 1e-12).all()
    assert ((expected - row.double()).abs()[~saturated] <= (step * scale / 256)[~saturated] + 1e-12).all()


@pytest.mark.parametrize("device", DEVICES)
def test_stochastic_rounding_streams(device):
    x = torch.randn(64, 256, device=device)
    a = fp4ops.quantize_nvfp4(x, stochastic_rounding=True, seed=5, offset=0)
    assert_same_bytes(fp4ops.quantize_nvfp4(x, stochastic_rounding=True, seed=5, offset=0).data, a.data, "same stream")
    assert (fp4ops.quantize_nvfp4(x, stochastic_rounding=True, seed=6).data != a.data).any()
    assert (fp4ops.quantize_nvfp4(x, stochastic_rounding=True, seed=5, offset=1).data != a.data).any()
    assert (fp4ops.quantize_nvfp4(x).data != a.data).any()


@pytest.mark.parametrize("call, error, message", [
    (lambda x: fp4ops.quantize_nvfp4(x, hadamard=True, block_2d=True), ValueError, "block_2d: 16x16 block scaling and the Hadamard"),
    (lambda x: fp4ops.quantize_nvfp4(x, seed=3), ValueError, "seed: given without stochastic_rounding=True"),
    (lambda x: fp4ops.quantize_nvfp4(x, stochastic_rounding=True, seed=1, offset=-1), ValueError, "offset: expected a value in [0, 2^63)"),
    (lambda x: fp4ops.quantize_nvfp4(x, stochastic_rounding=True, seed=1.5), TypeError, "seed: expected an int"),
    (lambda x: fp4ops.quantize_nvfp4(x, hadamard=[1, -1]), ValueError, "hadamard: expected 16 signs"),
    (lambda x: fp4ops.quantize_nvfp4(x[0], block_2d=True), ValueError, "x: 16x16 block scaling needs at least 2 dimensions"),
    (lambda x: fp4ops.quantize_nvfp4_rowwise_columnwise(x[:20]), ValueError, "x: the columnwise output needs rows"),
    (lambda x: torch.ops.fp4ops.quantize_nvfp4_recipe(x, None, "linear", False, False, False, -1, None, 0), RuntimeError,
     "rowwise: expected rowwise or columnwise output"),
    (lambda x: torch.ops.fp4ops.quantize_nvfp4_recipe(x[:20], None, "linear", True, True, False, -1, None, 0), RuntimeError,
     "x: the columnwise output needs rows"),
    (lambda x: torch.ops.fp4ops.quantize_nvfp4_recipe(x, None, "linear", True, False, True, 5, None, 0), RuntimeError,
     "block_2d: 16x16 block scaling and the Hadamard"),
])
def test_recipe_errors_name_the_argument(call, error, message):
    with pytest.raises(error) as info:
        call(torch.randn(32, 64))
    assert message in str(info.value)
