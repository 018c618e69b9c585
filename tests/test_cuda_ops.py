"""CUDA kernels of amax, quantize and dequantize against the CPU kernels, bit for bit (GPU only)."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    FLOAT_DTYPES,
    assert_exact,
    assert_same_bytes,
    edge_cases,
    fp4ops_kernels_launched,
    requires_caching_allocator,
    requires_cuda,
    takes_one_cluster,
)

import fp4ops

pytestmark = requires_cuda
CASE_NAMES = list(edge_cases(32))
FORMATS = ["nvfp4_computed_scale", "nvfp4_given_scale", "nvfp4_given_invalid_scale", "mxfp4_floor", "mxfp4_rceil"]


def quantize(x: torch.Tensor, fmt: str, g: torch.Tensor):
    """The op's outputs for one format variant (g: a CPU fp32 scalar, moved to x's device)."""
    if fmt.startswith("nvfp4"):
        q = fp4ops.quantize_nvfp4(x, None if fmt == "nvfp4_computed_scale" else g.to(x.device))
        return q, (q.data, q.scales, q.global_scale)
    q = fp4ops.quantize_mxfp4(x, scale_rule=fmt.removeprefix("mxfp4_"))
    return q, (q.data, q.scales)


def check_cuda_matches_cpu(x: torch.Tensor, fmt: str) -> None:
    g = torch.tensor(float("nan")) if fmt == "nvfp4_given_invalid_scale" else torch.rand(()) * 2.0 ** torch.randint(-20, 20, ()).item()
    q_gpu, got = quantize(x.cuda(), fmt, g)
    q_cpu, want = quantize(x.cpu(), fmt, g)
    assert_same_bytes(got[0], want[0], "data")
    assert_same_bytes(got[1], want[1], "scales")
    if len(got) == 3:
        assert_exact(got[2], want[2])
    for out_dtype in FLOAT_DTYPES:
        assert_exact(q_gpu.dequantize(out_dtype), q_cpu.dequantize(out_dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_edge_cases_match_cpu(case, fmt, dtype):
    check_cuda_matches_cpu(edge_cases(64)[case].to(dtype), fmt)


@pytest.mark.parametrize("numel", [16 * 32, 4096, 1 << 16, (1 << 16) + 64, 1 << 22])
@pytest.mark.parametrize("fmt", FORMATS)
def test_sizes_across_the_single_block_threshold(numel, fmt):
    x = torch.randn(numel // 64, 64, dtype=torch.bfloat16) * torch.exp2(torch.randint(-8, 8, (numel // 64, 1)).float()).bfloat16()
    check_cuda_matches_cpu(x, fmt)


def own_scale_quantize_kernels(numel: int, element_size: int) -> tuple[str, ...]:
    """The kernels dynamic NVFP4 may take over `numel` elements (quantize.cu): one block of 1024
    threads where they hold the input at a chunk (32 bytes of x) a thread; else one cluster of a
    chunk a thread in CTAs of the fewest of 256, 512 or 1024 threads that leave at most 16
    (takes_one_cluster); else one block up to 2^16 elements, or the zeroing, amax and quantize kernels."""
    chunks = numel * element_size // 32
    if chunks <= 1024:
        return ("single_block",)
    threads = next((t for t in (256, 512, 1024) if chunks <= 16 * t), None)
    cluster = takes_one_cluster(-(-chunks // threads)) if threads else False
    other = ("single_block",) if numel <= 1 << 16 else ("zero_words", "amax_kernel", "quantize_kernel")
    return {True: ("cluster",), False: other, None: ("cluster", *other)}[cluster]


# Rows of 4096 each side of the one-cluster bounds: 1024 chunks (4 rows of 16-bit x, 2 of fp32),
# 16384 chunks (64 rows of 16-bit x, 32 of fp32) and CTAs of 256 / 512 threads (16 / 32 rows of
# 16-bit x), and of the single block's 2^16 elements.
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize(("rows", "dtype"), [(1, torch.bfloat16), (4, torch.bfloat16), (5, torch.float16),
                                             (2, torch.float32), (3, torch.float32),
                                             (8, torch.float16), (16, torch.bfloat16),
                                             (17, torch.bfloat16), (32, torch.float16), (33, torch.bfloat16),
                                             (64, torch.bfloat16), (65, torch.bfloat16), (16, torch.float32),
                                             (32, torch.float32), (33, torch.float32)])
def test_own_scale_quantize_kernels_by_size(rows, dtype, layout):
    """Dynamic NVFP4 on each side of each kernel's bound: bit for bit the CPU kernel (codes, scales,
    g), through the kernels own_scale_quantize_kernels names."""
    x = (torch.randn(rows, 4096) * torch.exp2(torch.randint(-8, 8, (rows, 1)).float())).to(dtype)
    x[0, :16] = float("nan")  # a NaN block
    x[-1, torch.randint(0, 4096, ())] = 3e4  # the amax anywhere in the last row
    got = fp4ops.quantize_nvfp4(x.cuda(), scale_layout=layout)
    want = fp4ops.quantize_nvfp4(x, scale_layout=layout)
    assert_same_bytes(got.data, want.data, "data")
    assert_same_bytes(got.scales, want.scales, "scales")
    assert_exact(got.global_scale, want.global_scale)
    x_gpu = x.cuda()
    names = fp4ops_kernels_launched(lambda: fp4ops.quantize_nvfp4(x_gpu, scale_layout=layout))
    expected = own_scale_quantize_kernels(x.numel(), x.element_size())
    if expected == ("zero_words", "amax_kernel", "quantize_kernel"):
        assert len(names) == 3 and all(k in n for k, n in zip(expected, names)), names
    else:
        assert len(names) == 1 and any(k in names[0] for k in expected), names


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_non_contiguous_and_misaligned_views(fmt, dtype):
    base = (torch.randn(40, 200) * 3).to(dtype)
    views = {
        "odd_storage_offset": base.flatten()[1 : 1 + 40 * 128].reshape(40, 128),
        "column_slice": base[:, 8:136],
        "transposed": base[:32, :64].t(),
        "strided_rows": base[::3, :96],
    }
    for v in views.values():
        check_cuda_matches_cpu(v, fmt)
    # Misaligned packed data and scales on the dequantize side.
    q = fp4ops.quantize_mxfp4(base[:, :192].cuda())
    shifted = torch.empty(q.data.numel() + 1, dtype=torch.uint8, device="cuda")[1:].view_as(q.data).copy_(q.data)
    got = fp4ops.MXFP4Tensor(shifted, q.scales).dequantize(torch.float32)
    assert_exact(got, fp4ops.MXFP4Tensor(q.data.cpu(), q.scales.cpu()).dequantize(torch.float32))


def test_amax_matches_cpu():
    for x in list(edge_cases(32).values()) + [torch.randn(1 << 20) * 100, torch.randn(12345)]:
        for dtype in FLOAT_DTYPES:
            v = x.to(dtype)
            assert_exact(fp4ops.amax(v.cuda()), fp4ops.amax(v))
    odd = torch.randn(1001)
    assert_exact(fp4ops.amax(odd.cuda()[1:]), fp4ops.amax(odd[1:]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_amax_of_every_16_bit_value_among_non_finite_neighbours(dtype):
    """16-bit amax keeps |x| + 1 ulp per lane so that Inf turns into a NaN that max drops: every
    bit pattern, as the largest finite magnitude of a 32-element row whose other elements are NaN
    (several payloads, both signs), +-Inf, +-0 and the smallest subnormal, at a random position
    (one row per call). Reference: max |x| over the finite elements, in fp32. Rows this short
    take one group of eight per thread; the two-group loop is the next test's."""
    patterns = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
    inf = 0x7F80 if dtype == torch.bfloat16 else 0x7C00
    quiet = 0x7FC0 if dtype == torch.bfloat16 else 0x7E00
    # NaNs (largest payload, negative, quiet, smallest of either sign), +-Inf, +-0, the smallest subnormal
    others = torch.tensor([0x7FFF, 0xFFFF, quiet, inf + 1, 0x8000 | (inf + 1), inf, 0x8000 | inf, 0, 0x8000, 1],
                          dtype=torch.int32).to(torch.int16)
    row = 32
    rows = others[torch.randint(0, len(others), (1 << 16, row))]
    rows[torch.arange(1 << 16), torch.randint(0, row, (1 << 16,))] = patterns
    values = rows.view(dtype)
    finite = values.float().where(torch.isfinite(values.float()), torch.zeros(()))
    want = finite.abs().amax(dim=1)
    gpu_rows = values.cuda()
    got = torch.stack([fp4ops.amax(gpu_rows[i]) for i in range(gpu_rows.shape[0])]).cpu()
    bad = (got.view(torch.int32) != want.view(torch.int32)).nonzero().flatten()
    assert bad.numel() == 0, f"{bad.numel()} rows differ, first {rows[bad[:4]].tolist()}: got {got[bad[:4]]}, want {want[bad[:4]]}"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_amax_of_large_tensors_with_non_finite_elements_matches_cpu(dtype):
    """Tensors large enough that each thread takes several steps of two groups (more than two
    groups of eight per thread at any grid the launcher picks), an odd tail, NaN and +-Inf
    scattered, and the largest finite magnitude (negative half the time) at a random place, so
    it falls in either group of a step and in the tail alike over the trials."""
    n = 3 * (1 << 23) + 8 * 5 + 3
    for trial in range(6):
        x = torch.randn(n) * 100
        x[torch.randint(0, n, (1000,))] = float("nan")
        x[torch.randint(0, n, (100,))] = float("inf")
        x[torch.randint(0, n, (100,))] = -float("inf")
        place = n - 1 - trial if trial < 2 else torch.randint(0, n, ()).item()  # the tail, then anywhere
        x[place] = 60000.0 if trial % 2 else -60000.0  # finite in fp16 and bf16, above every randn * 100
        v = x.to(dtype)
        assert_exact(fp4ops.amax(v.cuda()), fp4ops.amax(v))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_amax_of_small_tensors_is_one_block_on_each_side_of_its_bound(dtype):
    """amax of at most 32 KB is one launch of one block that writes the result itself (no zeroing
    launch, no atomic): bit for bit the CPU kernel on each side of that bound, 16-byte aligned and
    not, with NaN, +-Inf and the largest finite magnitude at random places; one kernel at or below
    the bound, the zeroing kernel and the grid above it."""
    bound = 32 * 1024 // torch.empty((), dtype=dtype).element_size()
    for numel in (0, 1, 7, 4096, bound - 9, bound, bound + 1, 2 * bound):
        x = torch.randn(numel + 1) * 100
        if numel > 8:
            x[torch.randint(0, numel + 1, (3,))] = float("nan")
            x[torch.randint(0, numel + 1, (2,))] = float("inf")
            x[torch.randint(0, numel + 1, ())] = -float("inf")
            x[torch.randint(0, numel + 1, ())] = -60000.0  # finite in fp16 and bf16
        on_gpu = x.to(dtype).cuda()
        for view in (on_gpu[:numel], on_gpu[1:]):  # 16-byte aligned, then 2 or 4 bytes past
            assert_exact(fp4ops.amax(view), fp4ops.amax(view.cpu()))
        names = fp4ops_kernels_launched(lambda: fp4ops.amax(on_gpu[:numel]))
        if numel <= bound:
            assert len(names) == 1 and "amax_single_block_kernel" in names[0], (numel, names)
        else:
            assert len(names) == 2 and "zero_words" in names[0] and "amax_kernel" in names[1], (numel, names)


def test_amax_output_word_is_zeroed_before_the_blocks_add_to_it():
    """The amax kernel starts behind the kernel that zeroes its output word (programmatic
    dependent launch) and must wait for it before its atomics: with freed outputs reused by
    the caching allocator, a missing wait would let a previous, larger amax survive."""
    large = torch.full((1 << 20,), 1000.0, device="cuda")
    small = torch.rand(1 << 16, device="cuda") + 0.5
    want = small.abs().max()
    for _ in range(50):
        fp4ops.amax(large)  # freed at once: the next output may reuse its word
        assert_exact(fp4ops.amax(small), want)


def test_hardware_e4m3_matches_software_over_random_fp32_block_maxima():
    """The GPU encodes scales with cvt.rn.satfinite.e4m3x2 (sm_89+), the CPU in software: with
    g = 1 a block's scale is e4m3(bmax / 6), swept here over 2^22 random fp32 bit patterns."""
    bits = torch.randint(0, 2**31 - 1, (1 << 22,), dtype=torch.int64).to(torch.int32)
    bmax = bits.view(torch.float32)
    blocks = torch.zeros(bmax.numel(), 16)
    blocks[:, 0] = bmax
    blocks[:, 1] = -bmax * 0.3
    gpu = fp4ops.quantize_nvfp4(blocks.cuda(), 1.0)
    cpu = fp4ops.quantize_nvfp4(blocks, 1.0)
    assert_same_bytes(gpu.scales, cpu.scales, "scales")
    assert_same_bytes(gpu.data, cpu.data, "data")


def block_maxima_at_e4m3_boundaries(g: float) -> torch.Tensor:
    """fp32 block maxima m whose quotient m / 6 / g lies on, or a few ulps from, every rounding
    boundary of the E4M3 scale: the midpoints between neighbouring codes (ties included), the
    first one 2^-10 and 464 (saturation), plus 0 and fp32 subnormals."""
    values = torch.arange(0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
    boundaries = torch.cat([(values[:-1] + values[1:]) / 2, torch.tensor([464.0])])
    centre = (boundaries * 6 * g).float()
    ulps = torch.arange(-6, 7, dtype=torch.int32)
    bits = (centre.view(torch.int32)[:, None] + ulps).flatten()
    m = torch.cat([bits.view(torch.float32), torch.tensor([0.0, 1e-45, 1e-40, 2.0**-126])])
    return m[torch.isfinite(m) & (m >= 0)]


@pytest.mark.parametrize("g", [1.0, 0.37, 3.1e-5, 2.0**-100, 2.0**-101, 2.0**100, 2.0**101, 1e-40, 3e38])
@pytest.mark.parametrize("path", ["plain", "stochastic", "2d", "rowwise_columnwise", "rowwise_columnwise_2d"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scale_codes_at_e4m3_rounding_boundaries(dtype, g, path):
    """Every NVFP4 kernel (the plain quantizer, the per-block recipe kernel, the 2D strip kernel,
    the two-copy tile kernel) must give the CPU's scale codes and element codes exactly where a
    block's quotient m / 6 / g sits on or next to an E4M3 rounding boundary, for ordinary, tiny,
    subnormal and huge g. Each 16-row group shares its maximum m in column 0, so the rowwise and
    the columnwise blocks (and the 16x16 tiles) all see it. bf16 x rounds m to 8 bits, which
    still lands exactly on the ties whenever 6 g times the midpoint is a bf16 value (g = 1), and
    takes the 16-bit kernels (the two-copy call's own instance among them). 2^-100 and 2^100 are
    the ends of the range where the kernels bracket the divisions (ScaleBracket), 2^-101 and 2^101
    just outside it."""
    m = block_maxima_at_e4m3_boundaries(g).repeat_interleave(16)
    x = (torch.rand(m.numel(), 32) * 2 - 1) * m[:, None]
    x[:, 0] = m * torch.where(torch.rand(m.numel()) < 0.5, -1.0, 1.0)
    x = x.to(dtype)
    scale = torch.tensor(g, dtype=torch.float32)
    options = {"stochastic": {"stochastic_rounding": True, "seed": 7}}.get(path, {})
    if path.endswith("2d"):
        options = {"block_2d": True}
    if path.startswith("rowwise_columnwise"):
        outputs = [fp4ops.quantize_nvfp4_rowwise_columnwise(v, scale.to(v.device), **options) for v in (x.cuda(), x)]
    else:
        outputs = [(fp4ops.quantize_nvfp4(v, scale.to(v.device), **options),) for v in (x.cuda(), x)]
    for gpu, cpu in zip(*outputs):
        assert_same_bytes(gpu.scales, cpu.scales, "scales")
        assert_same_bytes(gpu.data, cpu.data, "data")


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_more_than_2_pow_31_elements(fmt):
    """One row of 2^31 + 48 (NVFP4) / 2^31 + 96 (MXFP4) bf16 elements: int64 indexing end to end,
    compared with the CPU in chunks (each chunk quantized with the GPU's global scale)."""
    numel = 2**31 + (48 if fmt == "nvfp4" else 96)
    x = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
    x[-7] = 1000.0  # the amax sits past 2^31
    q = fp4ops.quantize_nvfp4(x) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(x)
    if fmt == "nvfp4":
        assert_exact(q.global_scale.cpu(), torch.tensor(1000.0) / 2688)
    y = q.dequantize(torch.bfloat16)
    chunk = 1 << 28
    for start in range(0, numel, chunk):
        piece = x[start : start + chunk].cpu()
        ref = fp4ops.quantize_nvfp4(piece, q.global_scale.cpu()) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(piece)
        assert_same_bytes(q.data[start // 2 : (start + chunk) // 2], ref.data, f"data at {start}")
        block = 16 if fmt == "nvfp4" else 32
        assert_same_bytes(q.scales[start // block : (start + chunk) // block], ref.scales, f"scales at {start}")
        assert_exact(y[start : start + chunk].cpu(), ref.dequantize(torch.bfloat16))
    assert fp4ops.amax(x).item() == 1000.0


def all_ops(x: torch.Tensor, g: torch.Tensor):
    nv = fp4ops.quantize_nvfp4(x)
    nv_given = fp4ops.quantize_nvfp4(x, g)
    mx = fp4ops.quantize_mxfp4(x, scale_rule="rceil")
    return [fp4ops.amax(x), nv.data, nv.scales, nv.global_scale, nv_given.data, nv.dequantize(torch.float16),
            mx.data, mx.scales, mx.dequantize(torch.bfloat16), fp4ops.cast_to_e2m1(x)]


@requires_caching_allocator
@pytest.mark.parametrize("numel", [4096, 1 << 20])  # the single-block and the two-launch NVFP4 paths
def test_cuda_graph_capture_and_replay(numel):
    x = torch.randn(numel // 256, 256, device="cuda")
    g = torch.tensor(0.01, device="cuda")
    all_ops(x, g)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = all_ops(x, g)
    for _ in range(2):
        x.copy_(torch.randn_like(x) * 7)  # new data in the captured input: replay must see it
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(outs, all_ops(x.cpu(), g.cpu())):
            if got.dtype in (torch.uint8, torch.float8_e4m3fn, torch.float8_e8m0fnu):
                assert_same_bytes(got, want, "graph replay")
            else:
                assert_exact(got, want)


def test_two_streams():
    xs = [torch.randn(512, 1024, device="cuda") * (i + 1) for i in range(2)]
    streams = [torch.cuda.Stream() for _ in xs]
    outs = []
    for x, s in zip(xs, streams):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            outs.append(fp4ops.quantize_nvfp4(x).dequantize(torch.float32))
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    for x, out in zip(xs, outs):
        assert_exact(out, fp4ops.quantize_nvfp4(x.cpu()).dequantize(torch.float32))
