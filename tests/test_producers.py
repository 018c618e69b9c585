"""The fused producers (SPEC 7): fp4ops.rms_norm_quantize and fp4ops.silu_mul_quantize.

SPEC 7 is a composition: an fp32 intermediate y computed in a stated order, then the plain
quantizer. The tests hold the two halves separately:
- the fused codes, scales and g are, bit for bit, fp4ops.quantize_nvfp4 / quantize_mxfp4 of the op's
  own intermediate (return_intermediate=True) on the same device;
- the intermediate is right: RMSNorm's order is fixed, so the CPU's equals
  reference.rms_norm_intermediate bit for bit and CUDA's equals the CPU's; SiLU-and-mul uses the
  platform's exp, so each platform's y is held to SPEC 7's float64 bound only.
Both ops also have opcheck samples in test_opcheck.py, bad-input cases in bad_inputs.py, and a call
in every_op.py (determinism, CUDA graphs, several GPUs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from conftest import (
    FLOAT_DTYPES,
    as_bytes,
    assert_exact,
    assert_same_bytes,
    cuda_has_kernel,
    edge_cases,
    fp4ops_kernels_launched,
    requires_caching_allocator,
    requires_cuda,
    same_bits,
    takes_one_cluster,
)

import fp4ops
from fp4ops import reference

ops = torch.ops.fp4ops

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
OPS = ["rms_norm_quantize", "silu_mul_quantize"]
# NVFP4 with g computed on the device, given as a Python float, given as a tensor; MXFP4's rules.
TARGETS = ["nvfp4-computed", "nvfp4-float", "nvfp4-tensor", "mxfp4-floor", "mxfp4-rceil"]
LAYOUTS = ["linear", "swizzled"]
BLOCK = {"nvfp4": 16, "mxfp4": 32}
NAN_SCALE = {"nvfp4": 0x7F, "mxfp4": 0xFF}
# Hidden sizes: 16 and 48 are NVFP4 blocks but not MXFP4 ones; 4096, 5120 and 14336 are model widths.
HIDDEN_SIZES = [16, 32, 48, 96, 4096, 5120, 14336]


def needs_kernel(device: str, op: str) -> None:
    """Skip a CUDA case cleanly when this build has no CUDA kernel for the op."""
    if device == "cuda" and not cuda_has_kernel(op):
        pytest.skip(f"this build has no CUDA kernel for fp4ops::{op}")


def assert_same_values(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """Float outputs (the intermediate, the new residual, g): same dtype, shape and bits, except
    that a NaN only has to meet a NaN; its payload and sign are not part of the contract (CUDA
    writes the canonical NaN, the CPU propagates the input's)."""
    try:
        assert_exact(a, b)
    except AssertionError as error:
        raise AssertionError(f"{what}: {error}") from None


def random_input(shape, dtype, device="cpu", scale=None) -> torch.Tensor:
    """Fresh normal values times a random power of two (drawn on the CPU, so a CUDA case can rerun
    the same values on the CPU)."""
    scale = 2.0 ** torch.randint(-3, 4, ()).item() if scale is None else scale
    return (torch.randn(shape) * scale).to(dtype).to(device)


@dataclass
class Target:
    """What a producer quantizes into, as both the public API and the op take it."""

    format: str
    global_scale: object = None  # None, a Python float or an fp32 0-dim tensor (NVFP4)
    scale_rule: str = "floor"
    scale_layout: str = "linear"

    def op_global_scale(self, device) -> torch.Tensor | None:
        g = self.global_scale
        if g is None or isinstance(g, torch.Tensor):
            return g
        return torch.tensor(g, dtype=torch.float32, device=device)

    def kwargs(self) -> dict:
        return dict(format=self.format, global_scale=self.global_scale, scale_rule=self.scale_rule,
                    scale_layout=self.scale_layout)


def make_target(name: str, device: str, layout: str = "linear") -> Target:
    fmt, variant = name.split("-")
    if fmt == "mxfp4":
        return Target("mxfp4", None, variant, layout)
    # A given g near what amax / 2688 gives for these inputs (|y| up to tens), within a factor 4
    # either way: some scales saturate at 448, some blocks fall to small codes.
    g = 2.0 ** torch.empty(()).uniform_(-11, -5).item()
    return Target("nvfp4", {"computed": None, "float": g, "tensor": torch.tensor(g, device=device)}[variant],
                  "floor", layout)


@dataclass
class Produced:
    data: torch.Tensor
    scales: torch.Tensor
    g: torch.Tensor  # 0-dim (NVFP4) or an empty placeholder (MXFP4)
    y: torch.Tensor  # the fp32 intermediate, or an empty placeholder
    new_residual: torch.Tensor | None = None  # rms_norm_quantize only


def run_rms(x, weight, t: Target, eps=1e-6, residual=None, intermediate=True) -> Produced:
    data, scales, g, h, y = ops.rms_norm_quantize(x, weight, eps, residual, t.format, t.op_global_scale(x.device),
                                                  t.scale_rule, t.scale_layout, intermediate)
    return Produced(data, scales, g, y, h)


def run_silu(x, t: Target, intermediate=True) -> Produced:
    data, scales, g, y = ops.silu_mul_quantize(x, t.format, t.op_global_scale(x.device), t.scale_rule,
                                               t.scale_layout, intermediate)
    return Produced(data, scales, g, y)


def run(op: str, x, t: Target, weight=None, **kwargs) -> Produced:
    return run_rms(x, weight, t, **kwargs) if op == "rms_norm_quantize" else run_silu(x, t, **kwargs)


def op_input(op: str, shape, dtype, device="cpu", scale=None):
    """(x, weight) for an op whose quantized output is [..., H] = shape: silu's x is [..., 2H]."""
    if op == "silu_mul_quantize":
        return random_input((*shape[:-1], 2 * shape[-1]), dtype, device, scale), None
    return random_input(shape, dtype, device, scale), random_input(shape[-1:], dtype, device, 1.0)


def quantize_plain(y: torch.Tensor, t: Target):
    """The public quantizer of t on y: (data, scales, global scale or None)."""
    if t.format == "nvfp4":
        q = fp4ops.quantize_nvfp4(y, t.global_scale, scale_layout=t.scale_layout)
        return q.data, q.scales, q.global_scale
    q = fp4ops.quantize_mxfp4(y, scale_rule=t.scale_rule, scale_layout=t.scale_layout)
    return q.data, q.scales, None


def assert_is_quantized_intermediate(out: Produced, t: Target, what: str = "") -> None:
    """SPEC 7's central promise: the fused result is the plain quantizer on the op's own y."""
    data, scales, g = quantize_plain(out.y, t)
    assert_same_bytes(out.data, data, f"{what} data")
    assert out.scales.dtype == scales.dtype
    assert_same_bytes(out.scales, scales, f"{what} scales")
    if t.format == "nvfp4":
        assert out.g.shape == () and out.g.dtype == torch.float32
        assert_exact(out.g, g)
    else:
        assert out.g.shape == (0,) and out.g.dtype == torch.float32  # MXFP4 has no global scale


def assert_same_quantized(a: Produced, b: Produced, what: str) -> None:
    assert_same_bytes(a.data, b.data, f"{what} data")
    assert_same_bytes(a.scales, b.scales, f"{what} scales")
    assert_same_values(a.g, b.g, f"{what} g")


def computed_global_scale(y: torch.Tensor) -> torch.Tensor:
    """SPEC 2.2 on y through the product's own amax: amax / 2688 (a true division), 1 if 0."""
    g = fp4ops.amax(y) / torch.tensor(2688.0, device=y.device)
    return torch.where(g == 0, torch.ones_like(g), g)


def assert_within_rms_bound(y: torch.Tensor, x, weight, eps, residual=None) -> None:
    y64 = reference.rms_norm_float64(x.cpu(), weight.cpu(), eps, None if residual is None else residual.cpu())
    bound = reference.rms_norm_error_bound(y64, x.shape[-1])
    err = (y.cpu().double() - y64).abs()
    assert (err <= bound).all(), f"max err/bound {(err / bound).nan_to_num(posinf=1e9).max().item():.3f}"


def assert_within_silu_bound(y: torch.Tensor, x) -> None:
    x = x.cpu()
    y64 = reference.silu_mul_float64(x)
    bound = reference.silu_mul_error_bound(y64, x[..., x.shape[-1] // 2:])
    err = (y.cpu().double() - y64).abs()
    assert (err <= bound).all(), f"max err/bound {(err / bound).nan_to_num(posinf=1e9).max().item():.3f}"


# ----------------------------------------------------------------------------------------------
# The fused result is the plain quantizer on the intermediate


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_fused_equals_quantizing_its_intermediate(device, op, target, layout, dtype):
    needs_kernel(device, op)
    t = make_target(target, device, layout)
    x, weight = op_input(op, (37, 96), dtype, device)
    out = run(op, x, t, weight)
    assert out.y.dtype == torch.float32 and out.y.shape == (37, 96)
    assert_is_quantized_intermediate(out, t)
    if t.format == "nvfp4" and t.global_scale is None:
        assert_exact(out.g, computed_global_scale(out.y))
    elif t.format == "nvfp4":
        assert_exact(out.g, t.op_global_scale(device).reshape(()))
    # Asking for the intermediate changes nothing else; not asking leaves empty placeholders.
    plain = run(op, x, t, weight, intermediate=False)
    assert_same_quantized(plain, out, "return_intermediate=False")
    assert plain.y.shape == (0,) and plain.y.dtype == torch.float32
    if op == "rms_norm_quantize":
        assert plain.new_residual.shape == (0,) and out.new_residual.shape == (0,)
    # The public function wraps the same bytes in the format's tensor class.
    q = (fp4ops.rms_norm_quantize(x, weight, **t.kwargs()) if op == "rms_norm_quantize"
         else fp4ops.silu_mul_quantize(x, **t.kwargs()))
    assert isinstance(q, fp4ops.NVFP4Tensor if t.format == "nvfp4" else fp4ops.MXFP4Tensor)
    assert q.shape == (37, 96) and q.scale_layout == layout and q.device == x.device
    assert_same_bytes(q.data, out.data, "public data")
    assert_same_bytes(q.scales, out.scales, "public scales")
    if t.format == "nvfp4":
        assert_exact(q.global_scale, out.g)


@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("device", DEVICES)
def test_reference_composites_match_the_cpu_kernels(device, format):
    """reference.rms_norm_quantize is the whole contract in plain PyTorch (its own quantizers, the
    same bits on every device): it equals the op bit for bit. For SiLU-and-mul the reference's exp
    is torch's, so its composite may differ in the last bits; reference.quantize_intermediate of the
    op's own y equals the op."""
    needs_kernel(device, "rms_norm_quantize")
    needs_kernel(device, "silu_mul_quantize")
    x, weight = op_input("rms_norm_quantize", (19, 128), torch.bfloat16, device)
    residual = random_input(x.shape, x.dtype, device)
    for layout in LAYOUTS:
        t = make_target("nvfp4-computed" if format == "nvfp4" else "mxfp4-rceil", device, layout)
        out = run_rms(x, weight, t, residual=residual)
        want, h = reference.rms_norm_quantize(x, weight, 1e-6, residual, **t.kwargs())  # on x's device
        assert_same_values(out.new_residual, h, "new residual")
        assert_same_bytes(out.data, want[0], "rms data")
        assert_same_bytes(out.scales, want[1], "rms scales")
        if format == "nvfp4":
            assert_exact(out.g, want[2])
        silu = run_silu(x, t)
        want = reference.quantize_intermediate(silu.y, **t.kwargs())
        assert_same_bytes(silu.data, want[0], "silu data")
        assert_same_bytes(silu.scales, want[1], "silu scales")


# ----------------------------------------------------------------------------------------------
# The intermediate


def rows_for(hidden: int) -> int:
    return 64 if hidden <= 96 else 3  # few rows for model widths: the CPU reference is plain PyTorch


@pytest.mark.parametrize("residual", [False, True], ids=["no_residual", "residual"])
@pytest.mark.parametrize("hidden", HIDDEN_SIZES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_intermediate(device, dtype, hidden, residual):
    """CPU: bit for bit reference.rms_norm_intermediate (SPEC 7 fixes the order); CUDA: bit for bit
    the CPU kernel. Both within SPEC 7's float64 bound; the quantized result follows y."""
    needs_kernel(device, "rms_norm_quantize")
    x, weight = op_input("rms_norm_quantize", (rows_for(hidden), hidden), dtype)
    r = random_input(x.shape, dtype) if residual else None
    eps = float(torch.rand(()) * 1e-5)
    t = Target("nvfp4")
    cpu = run_rms(x, weight, t, eps, r)
    y, h = reference.rms_norm_intermediate(x, weight, eps, r)
    assert_same_values(cpu.y, y, "CPU intermediate vs reference")
    assert_within_rms_bound(cpu.y, x, weight, eps, r)
    assert (cpu.y != 0).any()
    if residual:
        assert_same_values(cpu.new_residual, h, "new residual")
    if device == "cuda":
        dev = lambda v: None if v is None else v.cuda()  # noqa: E731
        out = run_rms(x.cuda(), weight.cuda(), t, eps, dev(r))
        assert_same_values(out.y, cpu.y, "CUDA intermediate vs CPU")
        assert_same_quantized(out, cpu, "CUDA vs CPU")
        if residual:
            assert_same_values(out.new_residual, cpu.new_residual, "CUDA new residual vs CPU")


@pytest.mark.parametrize(("x_dtype", "w_dtype"), [(torch.bfloat16, torch.float32), (torch.bfloat16, torch.float16),
                                                  (torch.float16, torch.bfloat16), (torch.float32, torch.bfloat16)])
@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_weight_in_another_dtype(device, x_dtype, w_dtype):
    """The weight is widened exactly to fp32, whatever its dtype: the result equals that of the
    fp32 copy of the weight, and the reference."""
    needs_kernel(device, "rms_norm_quantize")
    x = random_input((9, 256), x_dtype, device)
    weight = (torch.randn(256) * 3).to(w_dtype).to(device)
    t = Target("mxfp4", scale_rule="rceil")
    out = run_rms(x, weight, t)
    widened = run_rms(x, weight.float(), t)
    assert_same_values(out.y, widened.y, "intermediate")
    assert_same_quantized(out, widened, "quantized")
    assert_same_values(out.y.cpu(), reference.rms_norm_intermediate(x.cpu(), weight.cpu())[0], "vs reference")


@pytest.mark.parametrize("hidden", HIDDEN_SIZES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_silu_mul_intermediate_within_bound(device, dtype, hidden):
    """Each platform's y within SPEC 7's bound of float64 (gates past +-87, where fp32's exp
    overflows or underflows, included); CPU and CUDA may differ in the last bits, so CUDA is held to
    the bound, not to the CPU's bits. Each platform's quantized result is its own y quantized."""
    needs_kernel(device, "silu_mul_quantize")
    x = random_input((rows_for(hidden), 2 * hidden), torch.float32, scale=4.0)
    x[:, : hidden // 8] = torch.empty(x.shape[0], hidden // 8).uniform_(-120, 120)  # exp's extremes
    x = x.to(dtype)
    t = Target("nvfp4")
    out = run_silu(x.to(device), t)
    assert out.y.shape == (x.shape[0], hidden)
    assert_within_silu_bound(out.y, x)
    assert (out.y != 0).any()
    assert_is_quantized_intermediate(out, t)
    assert_within_silu_bound(reference.silu_mul_intermediate(x), x)  # the reference meets it too


@requires_cuda
def test_cuda_rms_norm_row_limit():
    """SPEC 7: on CUDA H is at most 16384 (a row is one thread block's); that width works and equals
    the CPU, a wider one is refused with an error naming x, not computed wrong."""
    needs_kernel("cuda", "rms_norm_quantize")
    x, weight = op_input("rms_norm_quantize", (2, 16384), torch.bfloat16)
    t = Target("nvfp4")
    cuda, cpu = run_rms(x.cuda(), weight.cuda(), t), run_rms(x, weight, t)
    assert_same_values(cuda.y, cpu.y, "intermediate")
    assert_same_quantized(cuda, cpu, "H 16384")
    with pytest.raises(RuntimeError, match="x: .*16384"):
        run_rms(torch.ones(1, 16384 + 16, device="cuda"), torch.ones(16384 + 16, device="cuda"), t)
    torch.cuda.synchronize()


@requires_cuda
def test_reference_rms_norm_same_bits_on_cuda():
    """The reference divides through tensors and roots in float64 (torch's fp32 sqrt and its CUDA
    division by a Python number are not correctly rounded), so it gives the same bits on CUDA."""
    x, weight = op_input("rms_norm_quantize", (64, 4096), torch.bfloat16, scale=1.0)
    r = random_input(x.shape, x.dtype)
    y, h = reference.rms_norm_intermediate(x, weight, 1e-5, r)
    y_cuda, h_cuda = reference.rms_norm_intermediate(x.cuda(), weight.cuda(), 1e-5, r.cuda())
    assert_same_values(y_cuda, y, "y")
    assert_same_values(h_cuda, h, "h")


# ----------------------------------------------------------------------------------------------
# Global scales, layouts, residual


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_computed_global_scale(device, op):
    """g = amax(y) / 2688 on the device; an all-zero input (amax 0) gives g = 1."""
    needs_kernel(device, op)
    t = Target("nvfp4")
    x, weight = op_input(op, (6, 64), torch.bfloat16, device)
    out = run(op, x, t, weight)
    assert_exact(out.g, computed_global_scale(out.y))
    assert out.g.item() > 0 and out.g.item() != 1.0
    zeros = run(op, torch.zeros_like(x), t, weight)
    assert out.g.device == x.device and zeros.g.item() == 1.0
    assert (as_bytes(zeros.scales) == 0).all() and (zeros.y == 0).all()


# Rows on either side of the CUDA launcher's one-launch limits for NVFP4 with its own g (producers.cu:
# one cooperative grid up to kRmsOneLaunchMaxRows = kSiluOneLaunchMaxRows = 1024 rows where the GPU
# holds the grid; two grid-wide passes above), at model widths. On an H100: 600 RMSNorm rows of
# 4096 are more CTAs than it holds at one per SM (the instance built for two); 300 and 600 rows of
# 16384 more than it holds at all (the two passes below the limit); 2 rows of 4096 run as one
# CTA (a grid without a barrier), 4 and 16 rows (and 2-16 of 16384) as one cluster on Hopper, 17 as
# a grid of a CTA a row: every form must give the same bytes. SiLU-mul: 2 and 4 rows of 14336 run
# as one cluster of CTAs of 256 / 512 threads on Hopper, 5 as the grid; 300 rows of 14336 and 700
# of 4096 take the instance with two output blocks a thread, 700 of 14336 the two passes.
RMS_ONE_LAUNCH_ROWS = [1, 2, 4, 5, 16, 17, 64, 65, 300, 600, 1025]
SILU_ONE_LAUNCH_ROWS = [1, 2, 4, 5, 64, 65, 300, 700, 1025]


@requires_cuda
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rows", RMS_ONE_LAUNCH_ROWS)
@pytest.mark.parametrize("hidden", [4096, 16384])
@pytest.mark.parametrize("residual", [False, True], ids=["no_residual", "residual"])
def test_rms_norm_own_global_scale_across_the_one_launch_rows(residual, hidden, rows, layout):
    """Both CUDA paths: the plain quantizer on the op's own y, and bit for bit the CPU kernel (y,
    the new residual, codes, scales, g)."""
    needs_kernel("cuda", "rms_norm_quantize")
    x, weight = op_input("rms_norm_quantize", (rows, hidden), torch.bfloat16)
    r = random_input(x.shape, torch.bfloat16) if residual else None
    t = Target("nvfp4", scale_layout=layout)
    out = run_rms(x.cuda(), weight.cuda(), t, 1e-6, None if r is None else r.cuda())
    assert_is_quantized_intermediate(out, t)
    assert_exact(out.g, computed_global_scale(out.y))
    cpu = run_rms(x, weight, t, 1e-6, r)
    assert_same_values(out.y, cpu.y, "CUDA intermediate vs CPU")
    assert_same_quantized(out, cpu, "CUDA vs CPU")
    if residual:
        assert_same_values(out.new_residual, cpu.new_residual, "CUDA new residual vs CPU")
    # Without the intermediate (the serving call) the bytes are the same.
    assert_same_quantized(run_rms(x.cuda(), weight.cuda(), t, 1e-6, None if r is None else r.cuda(),
                                  intermediate=False), out, "return_intermediate=False")


@requires_cuda
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rows", SILU_ONE_LAUNCH_ROWS)
@pytest.mark.parametrize("width", [4096, 14336])
def test_silu_mul_own_global_scale_across_the_one_launch_rows(width, rows, layout):
    """Both CUDA paths: the plain quantizer on the op's own y, y within SPEC 7's bound, and the same
    bytes without the intermediate."""
    needs_kernel("cuda", "silu_mul_quantize")
    x, _ = op_input("silu_mul_quantize", (rows, width), torch.bfloat16, "cuda")
    t = Target("nvfp4", scale_layout=layout)
    out = run_silu(x, t)
    assert_is_quantized_intermediate(out, t)
    assert_exact(out.g, computed_global_scale(out.y))
    assert_within_silu_bound(out.y, x)
    assert_same_quantized(run_silu(x, t, intermediate=False), out, "return_intermediate=False")


def one_cluster_kernels(ctas: int) -> tuple[str, ...]:
    """The kernels NVFP4 with its own g may take over `ctas` CTAs (producers.cu): one cluster, or the
    cooperative grid (takes_one_cluster)."""
    return {True: ("cluster",), False: ("one_launch",), None: ("cluster", "one_launch")}[takes_one_cluster(ctas)]


def silu_own_g_kernels(octets: int) -> tuple[str, ...]:
    """SiLU-mul's kernels over y of `octets` octets: a cluster in CTAs of 256 threads, else of 512
    (an octet a thread; one_cluster_kernels)."""
    return one_cluster_kernels(-(-octets // 256) if octets <= 16 * 256 else -(-octets // 512))


def rms_own_g_kernels(rows: int, hidden: int) -> tuple[str, ...]:
    """RMSNorm's kernels over `rows` rows of `hidden` (at most one CTA per SM's worth of rows): one
    CTA where the rows fit 256 threads (a grid of one), else CTAs of a row or of 128 threads
    (one_cluster_kernels)."""
    row_threads = max(1, (1 << (hidden - 1).bit_length()) // 32)
    if rows * row_threads <= 256:
        return ("one_launch",)
    return one_cluster_kernels(-(-rows // max(1, 128 // row_threads)))


# (op, rows, hidden, kernels launched): one up to the op's limit where the grid fits any GPU of 40
# SMs or more (a cooperative grid, or one cluster: rms_own_g_kernels, silu_own_g_kernels), three
# (zeroing, amax pass, quantize pass) above the limit.
OWN_SCALE_LAUNCHES = [
    ("rms_norm_quantize", 1, 4096, 1), ("rms_norm_quantize", 2, 4096, 1), ("rms_norm_quantize", 8, 4096, 1),
    ("rms_norm_quantize", 16, 4096, 1), ("rms_norm_quantize", 17, 4096, 1), ("rms_norm_quantize", 32, 4096, 1),
    ("rms_norm_quantize", 64, 4096, 1), ("rms_norm_quantize", 8, 16384, 1), ("rms_norm_quantize", 64, 16384, 1),
    ("rms_norm_quantize", 65, 4096, 1), ("rms_norm_quantize", 300, 4096, 1), ("rms_norm_quantize", 1025, 4096, 3),
    ("silu_mul_quantize", 1, 4096, 1), ("silu_mul_quantize", 2, 8192, 1), ("silu_mul_quantize", 1, 16400, 1),
    ("silu_mul_quantize", 8, 4096, 1), ("silu_mul_quantize", 32, 4096, 1),
    ("silu_mul_quantize", 8, 16384, 1), ("silu_mul_quantize", 64, 14336, 1), ("silu_mul_quantize", 65, 4096, 1),
    ("silu_mul_quantize", 700, 4096, 1), ("silu_mul_quantize", 1025, 4096, 3),
]


@requires_cuda
@pytest.mark.parametrize(("op", "rows", "hidden", "launches"), OWN_SCALE_LAUNCHES)
def test_own_global_scale_launches(op, rows, hidden, launches):
    """NVFP4 with its own g in one launch up to the op's one-launch rows, in three above them."""
    x, weight = op_input(op, (rows, hidden), torch.bfloat16, "cuda")
    names = fp4ops_kernels_launched(lambda: run(op, x, Target("nvfp4"), weight, intermediate=False))
    assert len(names) == launches, names
    if launches == 1:
        small = rows <= 16  # at most one CTA per SM's worth of rows on any GPU these tests run on
        expected = (silu_own_g_kernels(rows * hidden // 8) if op == "silu_mul_quantize"
                    else rms_own_g_kernels(rows, hidden) if small else ("one_launch",))
        assert any(kernel in names[0] for kernel in expected), names


# SiLU-mul's CUDA kernels by size (producers.cu): a given g and MXFP4 run a thread per octet of y up
# to kSiluOctetsMaxOutputs = 2^21 outputs, a thread per output block above; NVFP4 with its own g
# one cluster up to 4096 octets in CTAs of 256 and 8192 in CTAs of 512 (16 CTAs, where the GPU
# schedules them: silu_own_g_kernels), one cooperative grid above. Each side of each limit, as
# (target, rows, width, a part of the kernel's name; None: silu_own_g_kernels).
SILU_KERNELS = [
    ("nvfp4-float", 1, 4096, "octets"), ("nvfp4-tensor", 512, 4096, "octets"), ("mxfp4-floor", 256, 8192, "octets"),
    ("nvfp4-float", 513, 4096, "silu_mul_quantize_kernel"), ("mxfp4-rceil", 64, 32800, "silu_mul_quantize_kernel"),
    ("nvfp4-computed", 1, 2048, None), ("nvfp4-computed", 1, 16384, None), ("nvfp4-computed", 3, 5472, None),
    ("nvfp4-computed", 2, 16384, None), ("nvfp4-computed", 3, 10928, None), ("nvfp4-computed", 4, 16384, None),
    ("nvfp4-computed", 3, 21856, "one_launch"),
]


@requires_cuda
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("target", "rows", "width", "kernel"), SILU_KERNELS)
def test_silu_mul_kernels_by_size(target, rows, width, kernel, layout):
    """Each of SiLU-mul's CUDA kernels is the plain quantizer on its own y, y within SPEC 7's bound."""
    needs_kernel("cuda", "silu_mul_quantize")
    x, _ = op_input("silu_mul_quantize", (rows, width), torch.bfloat16, "cuda")
    x[0, :8] = float("nan")  # a NaN block, and a block of zeros
    x[-1, 16:48] = 0.0
    t = make_target(target, "cuda", layout)
    out = run_silu(x, t)
    assert_is_quantized_intermediate(out, t)
    assert_within_silu_bound(out.y[1:], x[1:])
    names = fp4ops_kernels_launched(lambda: run_silu(x, t, intermediate=False))
    expected = (kernel,) if kernel else silu_own_g_kernels(rows * width // 8)
    assert len(names) == 1 and any(name in names[0] for name in expected), names


# Gates where the octet kernels' division leaves its in-range sequence for div_rn itself (a zero,
# a gate under 2^-30 or over 2^64 in magnitude, below -44 where 1 + exp(-gate) passes 2^64,
# infinities, NaN), and gates at the edges of that range.
SILU_EDGE_GATES = [0.0, -0.0, 2.0**-30, -(2.0**-30), 2.0**-31, 2.0**-126, 1e-38, 2.0**64, -(2.0**64), 2.0**65,
                   -44.0, -44.5, -88.0, -89.0, -100.0, 88.0, 3e38, float("inf"), -float("inf"), float("nan")]


@requires_cuda
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
def test_silu_mul_octet_and_block_kernels_agree(format, dtype):
    """y is elementwise, so a row's y, codes and scales are the same whether the row comes in a
    call small enough for the octet kernel (its own division sequence) or in one large enough for
    the block kernel (div_rn): random gates and SILU_EDGE_GATES, bit for bit."""
    needs_kernel("cuda", "silu_mul_quantize")
    width = 4096
    x, _ = op_input("silu_mul_quantize", (520, width), dtype)
    edges = torch.tensor(SILU_EDGE_GATES, dtype=torch.float32).to(dtype)
    for row in range(4):  # edge gates at random places of the first rows, among random ones
        x[row, torch.randperm(width)[: 4 * len(edges)]] = edges.repeat(4)
    x = x.cuda()
    t = Target(format, 2.0**-8 if format == "nvfp4" else None)
    large, small = run_silu(x, t), run_silu(x[:4], t)
    assert_exact(small.y, large.y[:4])
    assert_same_bytes(small.data, large.data[:4], "data")
    assert_same_bytes(small.scales, large.scales[:4], "scales")
    large_kernels = fp4ops_kernels_launched(lambda: run_silu(x, t, intermediate=False))
    small_kernels = fp4ops_kernels_launched(lambda: run_silu(x[:4], t, intermediate=False))
    kernels = (large_kernels, small_kernels)
    assert "silu_mul_quantize_kernel" in large_kernels[0] and "octets" in small_kernels[0], kernels


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_given_global_scale_float_and_tensor_agree(device, op):
    """A Python float is g rounded to fp32, the same result as the fp32 tensor; the tensor is
    trusted: a non-positive or non-finite one makes every scale NaN (SPEC 2.2)."""
    needs_kernel(device, op)
    x, weight = op_input(op, (5, 64), torch.float16, device)
    g = 2.0 ** torch.empty(()).uniform_(-11, -5).item() * 1.1  # not a power of two
    call = fp4ops.rms_norm_quantize if op == "rms_norm_quantize" else fp4ops.silu_mul_quantize
    args = (x, weight) if op == "rms_norm_quantize" else (x,)
    as_float = call(*args, global_scale=g)
    as_tensor = call(*args, global_scale=torch.tensor(g, device=device))
    assert_same_bytes(as_float.data, as_tensor.data, "data")
    assert_same_bytes(as_float.scales, as_tensor.scales, "scales")
    assert as_float.global_scale.item() == torch.tensor(g, dtype=torch.float32).item()
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        q = call(*args, global_scale=torch.tensor(bad, device=device))
        assert (as_bytes(q.scales) == 0x7F).all() and (q.data == 0).all()


@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_residual(device, dtype, format):
    """The new residual is bitwise x + residual in x's dtype (what PyTorch's add gives), and the
    quantized output is that of RMSNorm of h = x + residual."""
    needs_kernel(device, "rms_norm_quantize")
    x, weight = op_input("rms_norm_quantize", (2, 7, 160 if format == "mxfp4" else 48), dtype, device)
    r = random_input(x.shape, dtype, device)
    t = make_target("nvfp4-computed" if format == "nvfp4" else "mxfp4-floor", device)
    out = run_rms(x, weight, t, residual=r)
    h = x + r
    assert out.new_residual.dtype == dtype
    assert_same_values(out.new_residual, h, "new residual")
    of_h = run_rms(h, weight, t)
    assert_same_values(out.y, of_h.y, "intermediate")
    assert_same_quantized(out, of_h, "quantized")
    q, new_residual = fp4ops.rms_norm_quantize(x, weight, residual=r, **t.kwargs())
    assert_same_values(new_residual, h, "public new residual")
    assert_same_bytes(q.data, out.data, "public data")
    assert isinstance(fp4ops.rms_norm_quantize(x, weight, **t.kwargs()), type(q))  # no residual: q alone


def quantized_parts(q) -> list[torch.Tensor]:
    """data, scales and (NVFP4) the global scale of a returned NVFP4Tensor / MXFP4Tensor."""
    return [q.data, q.scales] + ([q.global_scale] if isinstance(q, fp4ops.NVFP4Tensor) else [])


@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("device", DEVICES)
def test_inputs_that_require_grad(device, format):
    """An RMSNorm weight is usually a Parameter, and x may come out of a graph that records grad:
    nothing returned requires grad (the ops have no backward), and the bits are those of the same
    call under torch.no_grad()."""
    needs_kernel(device, "rms_norm_quantize")
    hidden = 160 if format == "mxfp4" else 48
    x, weight = op_input("rms_norm_quantize", (3, hidden), torch.bfloat16, device)
    r = random_input(x.shape, torch.bfloat16, device)
    weight = torch.nn.Parameter(weight.clone())
    gate_up = random_input((3, 2 * hidden), torch.bfloat16, device).requires_grad_()
    q, h = fp4ops.rms_norm_quantize(x, weight, residual=r, format=format)
    silu = fp4ops.silu_mul_quantize(gate_up, format=format)
    with torch.no_grad():
        q_no_grad, h_no_grad = fp4ops.rms_norm_quantize(x, weight, residual=r, format=format)
        silu_no_grad = fp4ops.silu_mul_quantize(gate_up, format=format)
    got = quantized_parts(q) + [h] + quantized_parts(silu)
    want = quantized_parts(q_no_grad) + [h_no_grad] + quantized_parts(silu_no_grad)
    assert not any(t.requires_grad for t in got)
    for i, (a, b) in enumerate(zip(got, want)):
        assert_same_bytes(a.reshape(-1), b.reshape(-1), f"output {i}")


def test_a_residual_stream_that_requires_grad_is_refused_by_name():
    """With a residual the op returns the new residual stream, a float tensor whose gradient a
    caller could expect: an x or residual that requires grad is refused (the op has no backward)
    rather than the stream's gradient cut silently. Without a residual nothing float is returned."""
    x, weight = op_input("rms_norm_quantize", (3, 48), torch.bfloat16, "cpu")
    r = random_input(x.shape, torch.bfloat16, "cpu")
    with pytest.raises(RuntimeError, match="x: requires grad, but fp4ops.rms_norm_quantize"):
        fp4ops.rms_norm_quantize(x.clone().requires_grad_(), weight, residual=r)
    with pytest.raises(RuntimeError, match="residual: requires grad, but fp4ops.rms_norm_quantize"):
        fp4ops.rms_norm_quantize(x, weight, residual=r.clone().requires_grad_())
    with torch.no_grad():
        fp4ops.rms_norm_quantize(x.clone().requires_grad_(), weight, residual=r)
    fp4ops.rms_norm_quantize(x.clone().requires_grad_(), weight)


# ----------------------------------------------------------------------------------------------
# Shapes and strides


@pytest.mark.parametrize("rows", [0, 1, 3, 64, 257])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_row_counts(device, op, format, layout, rows):
    """Any number of rows, 0 included (257: a swizzled matrix spanning three 128-row tiles)."""
    needs_kernel(device, op)
    t = make_target(f"{format}-{'computed' if format == 'nvfp4' else 'rceil'}", device, layout)
    x, weight = op_input(op, (rows, 64), torch.bfloat16, device)
    out = run(op, x, t, weight)
    block = BLOCK[format]
    assert out.data.shape == (rows, 32) and out.y.shape == (rows, 64)
    expected_scales = (rows, 64 // block) if layout == "linear" else (-(-rows // 128) * 128, 4)
    assert tuple(out.scales.shape) == expected_scales
    assert_is_quantized_intermediate(out, t)
    if rows == 0 and format == "nvfp4":
        assert out.g.item() == 1.0


# RMSNorm rows that span several warps (on sm_90+ with 16-bit x and no residual, the rows are
# bulk-copied through a shared stage) and outnumber the CTAs any GPU holds at once, so that every
# CTA normalizes several row groups in turn, the stage reused each time. 2064 leaves the row's last
# thread half a span (NVFP4 only: MXFP4 rows are whole 32-element blocks).
MANY_ROW_GROUPS = [(target, rows, hidden) for target in ("nvfp4-float", "nvfp4-computed", "mxfp4-floor")
                   for rows, hidden in ((2000, 4096), (300, 14336), (1200, 2064))
                   if not (target.startswith("mxfp4") and hidden % 32)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("target", "rows", "hidden"), MANY_ROW_GROUPS)
@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_many_row_groups_per_cta(device, target, rows, hidden, dtype, layout):
    """The op's bytes are reference.rms_norm_quantize's for every row, however many row groups each
    CTA takes in turn (on the CPU, which has no grid, a few rows of the same widths), with either
    scale layout."""
    needs_kernel(device, "rms_norm_quantize")
    t = make_target(target, device, layout)
    x, weight = op_input("rms_norm_quantize", (rows if device == "cuda" else 5, hidden), dtype, device)
    out = run_rms(x, weight, t, intermediate=False)
    want = reference.rms_norm_quantize(x, weight, 1e-6, None, **t.kwargs())  # no residual: q alone
    assert_same_bytes(out.data, want[0], "data")
    assert_same_bytes(out.scales, want[1], "scales")
    if t.format == "nvfp4":
        assert_exact(out.g, want[2])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_three_dimensional_input(device, op, format, layout):
    """x [2, 5, H]: rows are the leading dimensions; swizzled scales are one matrix per leading
    index (SPEC 4); with linear scales the result is that of the rows flattened."""
    needs_kernel(device, op)
    t = make_target(f"{format}-{'tensor' if format == 'nvfp4' else 'floor'}", device, layout)
    x, weight = op_input(op, (2, 5, 96), torch.float16, device)
    out = run(op, x, t, weight)
    assert out.data.shape == (2, 5, 48) and out.y.shape == (2, 5, 96)
    assert_is_quantized_intermediate(out, t)
    if layout == "swizzled":
        assert tuple(out.scales.shape) == (2, 128, -(-96 // BLOCK[format] // 4) * 4)
    else:
        flat = run(op, x.reshape(10, -1), t, weight)
        assert_same_bytes(out.data.reshape(10, -1), flat.data, "data")
        assert_same_bytes(out.scales.reshape(10, -1), flat.scales, "scales")


@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device, op, format):
    """A transposed view, a strided slice, a slice at an odd offset and a contiguous view one element
    past an aligned start (misaligned for vector loads) give the contiguous result (and for RMSNorm,
    a strided weight and residual too)."""
    needs_kernel(device, op)
    t = make_target(f"{format}-{'computed' if format == 'nvfp4' else 'rceil'}", device)
    width = 128 if op == "silu_mul_quantize" else 64
    base = random_input((width, 9), torch.bfloat16, device)
    wide = random_input((9, 2 * width + 2), torch.bfloat16, device)
    flat = random_input((9 * width + 1,), torch.bfloat16, device)
    views = [base.t(), wide[:, 1:2 * width + 1:2], wide[:, 2:width + 2], flat[1:].view(9, width)]
    weight = random_input((2 * 64,), torch.float32, device, 1.0)[::2] if op == "rms_norm_quantize" else None
    for view in views:
        assert not view.is_contiguous() or view.storage_offset() > 0
        kwargs = {}
        if op == "rms_norm_quantize":
            r = random_input((9, 2 * 64), torch.bfloat16, device)
            kwargs = dict(residual=r[:, ::2])
            want = run(op, view.contiguous(), t, weight.contiguous(), residual=r[:, ::2].contiguous())
            got = run(op, view, t, weight, **kwargs)
            assert_same_values(got.new_residual, want.new_residual, "new residual")
        else:
            want = run(op, view.contiguous(), t)
            got = run(op, view, t)
        assert_same_values(got.y, want.y, "intermediate")
        assert_same_quantized(got, want, "quantized")


@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_rows_are_independent_of_the_batch(device, op, format):
    """With g given (or MXFP4), each row quantized alone gives that row's bytes of the batch."""
    needs_kernel(device, op)
    t = make_target(f"{format}-{'tensor' if format == 'nvfp4' else 'floor'}", device)
    x, weight = op_input(op, (9, 128), torch.bfloat16, device)
    r = random_input((9, 128), torch.bfloat16, device) if op == "rms_norm_quantize" else None
    kwargs = lambda i: {} if r is None else dict(residual=r if i is None else r[i:i + 1])  # noqa: E731
    batch = run(op, x, t, weight, **kwargs(None))
    for i in range(x.shape[0]):
        row = run(op, x[i:i + 1], t, weight, **kwargs(i))
        assert_same_bytes(row.data, batch.data[i:i + 1], f"row {i} data")
        assert_same_bytes(row.scales, batch.scales[i:i + 1], f"row {i} scales")
        if r is not None:
            assert_same_values(row.new_residual, batch.new_residual[i:i + 1], f"row {i} new residual")


# ----------------------------------------------------------------------------------------------
# Edge values


def blocks_of(codes_or_scales: torch.Tensor, index: tuple[int, int], block: int, per: int) -> torch.Tensor:
    """The entries of row index[0] that belong to element index[1]'s block; `per` entries per
    block (block // 2 data bytes, or 1 scale)."""
    row, element = index
    b = element // block
    return codes_or_scales[row, b * per:(b + 1) * per]


@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_non_finite_rows(device, format):
    """A NaN row is NaN throughout (every block NaN); an Inf row has NaN at the Inf (its block NaN,
    codes 0, never a saturated 6) and zeros elsewhere (rs = 0). Other rows are as without them,
    and so is the computed g (the NaN does not enter amax)."""
    needs_kernel(device, "rms_norm_quantize")
    hidden, block = 128, BLOCK[format]
    x, weight = op_input("rms_norm_quantize", (6, hidden), torch.float32, device)
    where = torch.randint(0, hidden, (3,)).tolist()
    x[0, where[0]], x[1, where[1]], x[2, where[2]] = float("nan"), float("inf"), -float("inf")
    t = make_target("nvfp4-computed" if format == "nvfp4" else "mxfp4-floor", device)
    out = run_rms(x, weight, t)
    assert_is_quantized_intermediate(out, t)
    scales, data, y = as_bytes(out.scales).cpu(), out.data.cpu(), out.y.cpu()
    assert (scales[0] == NAN_SCALE[format]).all() and (data[0] == 0).all() and y[0].isnan().all()
    for row in (1, 2):
        bad = (row, where[row])
        assert (blocks_of(scales, bad, block, 1) == NAN_SCALE[format]).all()
        assert (blocks_of(data, bad, block, block // 2) == 0).all()
        assert y[bad].isnan() and (y[row].isnan().sum() == 1) and (y[row].nan_to_num() == 0).all()
    assert torch.isnan(fp4ops.dequantize(_wrap(out, t), torch.float32)[:3]).sum() == hidden + 2 * block
    clean = run_rms(x[3:], weight, t)
    assert_same_bytes(out.data[3:], clean.data, "finite rows' data")
    assert_same_bytes(out.scales[3:], clean.scales, "finite rows' scales")
    assert_same_values(out.g, clean.g, "g")
    if device == "cpu":
        assert_same_values(out.y, reference.rms_norm_intermediate(x, weight)[0], "vs reference")


def _wrap(out: Produced, t: Target):
    if t.format == "nvfp4":
        return fp4ops.NVFP4Tensor(out.data, out.scales, out.g, t.scale_layout)
    return fp4ops.MXFP4Tensor(out.data, out.scales, t.scale_layout)


@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("device", DEVICES)
def test_silu_mul_non_finite_elements(device, format):
    """NaN in a gate or an up, a gate of +-Inf, an up of Inf: that element's y is NaN or Inf, so its
    block's scale is NaN and its codes 0; the other blocks are unaffected (y is elementwise)."""
    needs_kernel(device, "silu_mul_quantize")
    hidden, block = 128, BLOCK[format]
    x = random_input((5, 2 * hidden), torch.bfloat16, device)
    where = torch.randint(0, hidden, (5,)).tolist()
    nan, inf = float("nan"), float("inf")
    x[0, where[0]] = nan  # gate NaN
    x[1, hidden + where[1]] = nan  # up NaN
    x[2, where[2]] = inf  # gate +Inf: y = Inf * u (or NaN if u is 0)
    x[3, where[3]] = -inf  # gate -Inf: -Inf / Inf = NaN
    x[4, hidden + where[4]] = inf  # up Inf with a finite gate: +-Inf (NaN if the gate is 0)
    t = make_target("nvfp4-computed" if format == "nvfp4" else "mxfp4-rceil", device)
    out = run_silu(x, t)
    assert_is_quantized_intermediate(out, t)
    scales, data, y = as_bytes(out.scales).cpu(), out.data.cpu(), out.y.cpu()
    for row in range(5):
        bad = (row, where[row])
        assert not torch.isfinite(y[bad]) and torch.isfinite(y[row]).sum() == hidden - 1
        assert (blocks_of(scales, bad, block, 1) == NAN_SCALE[format]).all()
        assert (blocks_of(data, bad, block, block // 2) == 0).all()
        assert (scales[row] == NAN_SCALE[format]).sum() == 1
    dequantized = fp4ops.dequantize(_wrap(out, t), torch.float32)
    assert dequantized.isnan().sum() == 5 * block
    if format == "nvfp4":
        assert_exact(out.g, computed_global_scale(out.y))  # amax over the finite elements only


@pytest.mark.parametrize("format", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_zero_rows(device, format):
    """An all-zero row: ss = 0, rs = 1/sqrt(e), y = +-0, scales 0. With eps = 0: rs = 1/0 = Inf and
    y = 0 * Inf = NaN, so the whole row's blocks are NaN (the contract followed literally)."""
    needs_kernel(device, "rms_norm_quantize")
    x, weight = op_input("rms_norm_quantize", (4, 64), torch.bfloat16, device)
    x[1] = 0
    x[3] = -0.0
    t = make_target("nvfp4-computed" if format == "nvfp4" else "mxfp4-floor", device)
    out = run_rms(x, weight, t)
    assert_is_quantized_intermediate(out, t)
    for row in (1, 3):
        assert (out.y[row] == 0).all() and (as_bytes(out.scales)[row] == 0).all()
        assert ((out.data[row] & 0x77) == 0).all()  # codes 0x0 / 0x8: the sign of zero kept
    zero_eps = run_rms(x, weight, t, eps=0.0)
    assert_is_quantized_intermediate(zero_eps, t)
    for row in (1, 3):
        assert zero_eps.y[row].isnan().all()
        assert (as_bytes(zero_eps.scales)[row] == NAN_SCALE[format]).all() and (zero_eps.data[row] == 0).all()
    assert torch.isfinite(zero_eps.y[0::2]).all()
    ref = reference.rms_norm_intermediate(x.cpu(), weight.cpu(), 0.0)[0]
    if device == "cpu":
        assert_same_values(zero_eps.y, ref, "eps = 0 vs reference")
    else:
        assert_same_values(zero_eps.y, run_rms(x.cpu(), weight.cpu(), t, eps=0.0).y, "eps = 0, CUDA vs CPU")


def test_rms_norm_eps_is_taken_as_float32():
    """eps is SPEC 7's e = fp32(eps): the largest double that rounds to a finite fp32 is taken
    (by the op and its wrapper alike), the next one (it rounds to inf, and every rs would be 0) is
    refused, and a numpy float32 is a number like any other."""
    x, weight = torch.randn(2, 64), torch.randn(64)
    last_finite = float(np.nextafter(np.float64(np.finfo(np.float32).max) + 2.0**103, 0))
    for call in (lambda e: fp4ops.rms_norm_quantize(x, weight, e),
                 lambda e: torch.ops.fp4ops.rms_norm_quantize(x, weight, e, None, "nvfp4", None, "floor", "linear", False)):
        call(last_finite)
        with pytest.raises((ValueError, RuntimeError), match="eps: expected a finite .* >= 0.*(in float32)"):
            call(last_finite + 2.0**(127 - 52))
    given = fp4ops.rms_norm_quantize(x, weight, np.float32(1e-5))
    plain = fp4ops.rms_norm_quantize(x, weight, float(np.float32(1e-5)))
    assert torch.equal(given.data, plain.data) and same_bits(given.scales, plain.scales)


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_subnormal_rows(device):
    """fp32 subnormal inputs are values, not zeros (no flush to zero anywhere): their squares
    underflow to 0, so rs = 1/sqrt(e) and y = h * rs * w, tiny but nonzero. With eps = 0, rs = 1/0
    = Inf and y = +-Inf, so every block is NaN."""
    needs_kernel(device, "rms_norm_quantize")
    bits = torch.randint(1, 2**23, (4, 64), dtype=torch.int32)  # every fp32 subnormal but 0
    x = bits.view(torch.float32) * torch.where(torch.rand(4, 64) < 0.5, -1.0, 1.0)
    weight = torch.randn(64)
    t = Target("nvfp4")
    for eps in (1e-6, 0.0):
        out = run_rms(x.to(device), weight.to(device), t, eps)
        assert_same_values(out.y, reference.rms_norm_intermediate(x, weight, eps)[0], f"eps {eps}")
        assert_is_quantized_intermediate(out, t)
        if eps:
            assert (out.y != 0).all() and torch.isfinite(out.y).all()
        else:
            assert torch.isinf(out.y).all() and (as_bytes(out.scales) == NAN_SCALE["nvfp4"]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_huge_and_tiny_magnitudes(device, dtype):
    """Elements anywhere in [2^-60, 2^60] (the bound's range: no square overflows or underflows),
    mixed within a row, and rows wholly near 2^-58; eps = 0, so the tiny rows are normalized, not
    drowned by eps. Rows near 2^70, whose ss overflows, give y = 0 (rs = 1/sqrt(Inf) = 0).
    The weights stay in [0.5, 1.5): with |h_i| down to 2^-60 in a row reaching 2^60, h_i * rs is
    near 2^-120 and a small weight would make y subnormal, where SPEC 7's relative bound does not
    hold (it has no absolute term)."""
    needs_kernel(device, "rms_norm_quantize")
    rows, hidden = 8, 256
    exponents = torch.randint(-60, 60, (rows, hidden)).float()
    signs = torch.where(torch.rand(rows, hidden) < 0.5, -1.0, 1.0)
    x = signs * (1 + torch.rand(rows, hidden)) * torch.exp2(exponents)  # |x| in [2^-60, 2^60]
    x[rows // 2:] = signs[rows // 2:] * 2.0**-58 * (1 + torch.rand(rows - rows // 2, hidden))
    x = x.to(dtype)
    x[-1] = (torch.randn(hidden) * 2.0**70).to(dtype)  # ss overflows
    weight = torch.where(torch.rand(hidden) < 0.5, -1.0, 1.0) * (0.5 + torch.rand(hidden))
    for fmt in ("nvfp4-computed", "mxfp4-rceil"):
        t = make_target(fmt, device)
        out = run_rms(x.to(device), weight.to(device), t, eps=0.0)
        assert_is_quantized_intermediate(out, t)
        assert_within_rms_bound(out.y[:-1], x[:-1], weight, 0.0)
        assert (out.y[-1] == 0).all() and (out.y[:-1] != 0).all()
        if device == "cpu":
            assert_same_values(out.y, reference.rms_norm_intermediate(x, weight, 0.0)[0], "vs reference")
        else:
            assert_same_values(out.y, run_rms(x, weight, t, eps=0.0).y, "CUDA vs CPU")


@pytest.mark.parametrize("case", list(edge_cases(64)))
def test_edge_case_matrix_on_the_cpu(case):
    """conftest's edge-case inputs (subnormals, near FLT_MAX, ties, NaN/Inf, empty, several leading
    dimensions) through both producers: RMSNorm's y is the reference's bit for bit, and both
    quantize their own y."""
    x = edge_cases(64)[case]
    weight = torch.randn(64)
    for target in ("nvfp4-computed", "mxfp4-floor"):
        t = make_target(target, "cpu")
        out = run_rms(x, weight, t)
        assert_same_values(out.y, reference.rms_norm_intermediate(x, weight)[0], "rms intermediate")
        assert_is_quantized_intermediate(out, t, "rms")
        silu = run_silu(torch.cat([x, x.flip(-1)], dim=-1), t)
        assert_is_quantized_intermediate(silu, t, "silu")


# ----------------------------------------------------------------------------------------------
# Bad arguments: a ValueError / TypeError from the Python function, a RuntimeError from the op,
# each naming the argument.


def _x(dtype=torch.bfloat16, hidden=32, device="cpu"):
    return torch.randn(2, hidden, device=device).to(dtype)


PYTHON_ERRORS = [
    # (id, call(device), exception, message fragment)
    ("rms-format", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], format="fp8"), ValueError, "format: expected 'nvfp4' or 'mxfp4', got 'fp8'"),
    ("rms-rceil-nvfp4", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], scale_rule="rceil"), ValueError, "scale_rule: 'rceil' is an MXFP4 rule"),
    ("rms-scale-rule", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], format="mxfp4", scale_rule="round"), ValueError, "scale_rule: expected 'floor' or 'rceil'"),
    ("rms-scale-layout", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], scale_layout="tiled"), ValueError, "scale_layout: expected 'linear' or 'swizzled'"),
    ("rms-global-scale-mxfp4", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], format="mxfp4", global_scale=1.0), ValueError, "global_scale: MXFP4 has no global scale"),
    ("rms-global-scale-zero", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], global_scale=0.0), ValueError, "global_scale: expected a finite value > 0"),
    ("rms-hidden-nvfp4", lambda d: fp4ops.rms_norm_quantize(_x(hidden=24, device=d), _x(hidden=24, device=d)[0]), ValueError, "x: expected the last dimension (the hidden size) to be a multiple of 16 (the NVFP4 block), got 24"),
    ("rms-hidden-mxfp4", lambda d: fp4ops.rms_norm_quantize(_x(hidden=48, device=d), _x(hidden=48, device=d)[0], format="mxfp4"), ValueError, "x: expected the last dimension (the hidden size) to be a multiple of 32 (the MXFP4 block), got 48"),
    ("rms-weight-shape", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(hidden=16, device=d)[0]), ValueError, "weight: expected shape (32,)"),
    ("rms-weight-2d", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[:1]), ValueError, "weight: expected shape (32,)"),
    ("rms-weight-int", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0].int()), TypeError, "weight: expected float32, float16 or bfloat16, got torch.int32"),
    ("rms-residual-dtype", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], residual=_x(torch.float16, device=d)), TypeError, "residual: expected torch.bfloat16 (x's dtype), got torch.float16"),
    ("rms-residual-shape", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], residual=_x(device=d)[:1]), ValueError, "residual: expected shape (2, 32) (x's shape), got (1, 32)"),
    ("rms-residual-not-tensor", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], residual=1.0), TypeError, "residual: expected a torch.Tensor"),
    ("rms-eps-negative", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], eps=-1e-6), ValueError, "eps: expected a finite number >= 0"),
    ("rms-eps-nan", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], eps=float("nan")), ValueError, "eps: expected a finite number >= 0"),
    ("rms-eps-inf", lambda d: fp4ops.rms_norm_quantize(_x(device=d), _x(device=d)[0], eps=float("inf")), ValueError, "eps: expected a finite number >= 0"),
    ("rms-x-int", lambda d: fp4ops.rms_norm_quantize(_x(device=d).int(), _x(device=d)[0]), TypeError, "x: expected float32, float16 or bfloat16, got torch.int32"),
    ("rms-x-float64", lambda d: fp4ops.rms_norm_quantize(_x(torch.float64, device=d), _x(device=d)[0]), TypeError, "x: expected float32, float16 or bfloat16, got torch.float64"),
    ("rms-x-0-dim", lambda d: fp4ops.rms_norm_quantize(_x(device=d)[0, 0], _x(device=d)[0]), ValueError, "x: expected at least 1 dimension"),
    ("silu-format", lambda d: fp4ops.silu_mul_quantize(_x(device=d), format="nvfp8"), ValueError, "format: expected 'nvfp4' or 'mxfp4', got 'nvfp8'"),
    ("silu-rceil-nvfp4", lambda d: fp4ops.silu_mul_quantize(_x(device=d), scale_rule="rceil"), ValueError, "scale_rule: 'rceil' is an MXFP4 rule"),
    ("silu-global-scale-mxfp4", lambda d: fp4ops.silu_mul_quantize(_x(hidden=64, device=d), format="mxfp4", global_scale=torch.tensor(1.0, device=d)), ValueError, "global_scale: MXFP4 has no global scale"),
    ("silu-global-scale-dtype", lambda d: fp4ops.silu_mul_quantize(_x(device=d), global_scale=torch.tensor(1.0, dtype=torch.float64, device=d)), TypeError, "global_scale: expected a float32 tensor"),
    ("silu-odd", lambda d: fp4ops.silu_mul_quantize(_x(hidden=33, device=d)), ValueError, "x: expected an even last dimension (gate, then up), got 33"),
    ("silu-width-nvfp4", lambda d: fp4ops.silu_mul_quantize(_x(hidden=48, device=d)), ValueError, "x: expected half the last dimension (the gate and up width H) to be a multiple of 16 (the NVFP4 block), got 24"),
    ("silu-width-mxfp4", lambda d: fp4ops.silu_mul_quantize(_x(hidden=32, device=d), format="mxfp4"), ValueError, "x: expected half the last dimension (the gate and up width H) to be a multiple of 32 (the MXFP4 block), got 16"),
    ("silu-x-int", lambda d: fp4ops.silu_mul_quantize(_x(device=d).long()), TypeError, "x: expected float32, float16 or bfloat16, got torch.int64"),
    ("silu-scale-layout", lambda d: fp4ops.silu_mul_quantize(_x(device=d), scale_layout="tiled"), ValueError, "scale_layout: expected 'linear' or 'swizzled'"),
]


def _rms_op(x, weight=None, eps=1e-6, residual=None, format="nvfp4", global_scale=None, scale_rule="floor",
            scale_layout="linear"):
    weight = x[0] if weight is None else weight
    return ops.rms_norm_quantize(x, weight, eps, residual, format, global_scale, scale_rule, scale_layout, False)


def _silu_op(x, format="nvfp4", global_scale=None, scale_rule="floor", scale_layout="linear"):
    return ops.silu_mul_quantize(x, format, global_scale, scale_rule, scale_layout, False)


OP_ERRORS = [
    ("rms-format", lambda d: _rms_op(_x(device=d), format="fp8"), 'format: expected "nvfp4" or "mxfp4", got "fp8"'),
    ("rms-rceil-nvfp4", lambda d: _rms_op(_x(device=d), scale_rule="rceil"), 'scale_rule: "rceil" is an MXFP4 rule'),
    ("rms-scale-rule", lambda d: _rms_op(_x(device=d), format="mxfp4", scale_rule="round"), 'scale_rule: expected "floor" or "rceil"'),
    ("rms-scale-layout", lambda d: _rms_op(_x(device=d), scale_layout="tiled"), 'scale_layout: expected "linear" or "swizzled"'),
    ("rms-global-scale-mxfp4", lambda d: _rms_op(_x(device=d), format="mxfp4", global_scale=torch.tensor(1.0, device=d)), "global_scale: MXFP4 has no global scale"),
    ("rms-global-scale-shape", lambda d: _rms_op(_x(device=d), global_scale=torch.ones(2, device=d)), "global_scale: expected one element"),
    ("rms-hidden-nvfp4", lambda d: _rms_op(_x(hidden=24, device=d)), "x: expected the last dimension (the hidden size) to be a multiple of 16 (the NVFP4 block), got 24"),
    ("rms-hidden-mxfp4", lambda d: _rms_op(_x(hidden=48, device=d), format="mxfp4"), "x: expected the last dimension (the hidden size) to be a multiple of 32 (the MXFP4 block), got 48"),
    ("rms-weight-shape", lambda d: _rms_op(_x(device=d), weight=_x(hidden=16, device=d)[0]), "weight: expected shape [32] (x's last dimension), got [16]"),
    ("rms-weight-2d", lambda d: _rms_op(_x(device=d), weight=_x(device=d)[:1]), "weight: expected shape [32] (x's last dimension), got [1, 32]"),
    ("rms-weight-int", lambda d: _rms_op(_x(device=d), weight=_x(device=d)[0].int()), "weight: expected float32, float16 or bfloat16, got Int"),
    ("rms-residual-dtype", lambda d: _rms_op(_x(device=d), residual=_x(torch.float16, device=d)), "residual: expected BFloat16 (x's dtype), got Half"),
    ("rms-residual-shape", lambda d: _rms_op(_x(device=d), residual=_x(device=d)[:1]), "residual: expected shape [2, 32] (x's shape), got [1, 32]"),
    ("rms-eps-negative", lambda d: _rms_op(_x(device=d), eps=-1.0), "eps: expected a finite value >= 0"),
    ("rms-eps-nan", lambda d: _rms_op(_x(device=d), eps=float("nan")), "eps: expected a finite value >= 0"),
    ("rms-eps-inf", lambda d: _rms_op(_x(device=d), eps=float("inf")), "eps: expected a finite value >= 0"),
    ("rms-x-int", lambda d: _rms_op(_x(device=d).int(), weight=_x(device=d)[0]), "x: expected float32, float16 or bfloat16, got Int"),
    ("rms-x-0-dim", lambda d: _rms_op(_x(device=d)[0, 0], weight=_x(device=d)[0]), "x: expected at least 1 dimension"),
    ("silu-format", lambda d: _silu_op(_x(device=d), format="nvfp8"), 'format: expected "nvfp4" or "mxfp4", got "nvfp8"'),
    ("silu-rceil-nvfp4", lambda d: _silu_op(_x(device=d), scale_rule="rceil"), 'scale_rule: "rceil" is an MXFP4 rule'),
    ("silu-global-scale-mxfp4", lambda d: _silu_op(_x(hidden=64, device=d), format="mxfp4", global_scale=torch.tensor(1.0, device=d)), "global_scale: MXFP4 has no global scale"),
    ("silu-global-scale-dtype", lambda d: _silu_op(_x(device=d), global_scale=torch.tensor(1.0, dtype=torch.float64, device=d)), "global_scale: expected float32, got Double"),
    ("silu-odd", lambda d: _silu_op(_x(hidden=33, device=d)), "x: expected an even last dimension (gate, then up), got 33"),
    ("silu-width-nvfp4", lambda d: _silu_op(_x(hidden=48, device=d)), "x: expected half the last dimension (the gate and up width H) to be a multiple of 16 (the NVFP4 block), got 24"),
    ("silu-width-mxfp4", lambda d: _silu_op(_x(hidden=32, device=d), format="mxfp4"), "x: expected half the last dimension (the gate and up width H) to be a multiple of 32 (the MXFP4 block), got 16"),
    ("silu-x-int", lambda d: _silu_op(_x(device=d).long()), "x: expected float32, float16 or bfloat16, got Long"),
]


@pytest.mark.parametrize(("call", "exception", "message"), [pytest.param(*c[1:], id=c[0]) for c in PYTHON_ERRORS])
@pytest.mark.parametrize("device", DEVICES)
def test_python_function_refuses(device, call, exception, message):
    with pytest.raises(exception) as info:
        call(device)
    assert message in str(info.value)


@pytest.mark.parametrize(("call", "message"), [pytest.param(*c[1:], id=c[0]) for c in OP_ERRORS])
@pytest.mark.parametrize("device", DEVICES)
def test_op_refuses(device, call, message):
    needs_kernel(device, "rms_norm_quantize")
    needs_kernel(device, "silu_mul_quantize")
    with pytest.raises(RuntimeError) as info:
        call(device)
    assert message in str(info.value)
    if device == "cuda":
        torch.cuda.synchronize()  # nothing was launched that could fault later


@requires_cuda
@pytest.mark.parametrize("on_cpu", ["weight", "residual", "global_scale"])
def test_mixed_devices_refused(on_cpu):
    """weight, residual or global_scale on the CPU with x on CUDA: refused by the function
    (ValueError) and by the op (RuntimeError), naming the argument."""
    x = _x(device="cuda")
    args = dict(weight=x[0], residual=None, global_scale=None)
    args[on_cpu] = {"weight": x[0].cpu(), "residual": x.cpu(), "global_scale": torch.tensor(1.0)}[on_cpu]
    with pytest.raises(ValueError, match=f"{on_cpu}: expected a tensor on cuda"):
        fp4ops.rms_norm_quantize(x, args["weight"], residual=args["residual"], global_scale=args["global_scale"])
    if cuda_has_kernel("rms_norm_quantize"):
        with pytest.raises(RuntimeError, match=f"{on_cpu}: expected a tensor on"):
            _rms_op(x, args["weight"], residual=args["residual"], global_scale=args["global_scale"])
    if on_cpu == "global_scale":
        with pytest.raises(ValueError, match="global_scale: expected a tensor on cuda"):
            fp4ops.silu_mul_quantize(x, global_scale=torch.tensor(1.0))


# ----------------------------------------------------------------------------------------------
# opcheck, torch.compile, CUDA graphs


def opcheck_samples(device: str):
    """(op, args): every dtype, both formats and layouts, residual, given g, 3-D and empty inputs,
    with and without the intermediate."""
    out = []
    g = torch.tensor(0.01, device=device)
    for dtype in FLOAT_DTYPES:
        x = torch.randn(3, 64, device=device, dtype=dtype)
        x3 = torch.randn(2, 3, 64, device=device, dtype=dtype)
        w = torch.randn(64, device=device, dtype=dtype)
        out += [
            ("rms_norm_quantize", (x, w, 1e-6, None, "nvfp4", None, "floor", "linear", False)),
            ("rms_norm_quantize", (x3, w.float(), 1e-5, torch.randn_like(x3), "nvfp4", g, "floor", "swizzled", True)),
            ("rms_norm_quantize", (x, w, 0.0, torch.randn_like(x), "mxfp4", None, "rceil", "linear", True)),
            ("rms_norm_quantize", (x[:0], w, 1e-6, None, "mxfp4", None, "floor", "swizzled", True)),
            ("silu_mul_quantize", (x, "nvfp4", None, "floor", "linear", True)),
            ("silu_mul_quantize", (x3, "nvfp4", g, "floor", "swizzled", False)),
            ("silu_mul_quantize", (x, "mxfp4", None, "rceil", "swizzled", True)),
            ("silu_mul_quantize", (x3[:, :0], "nvfp4", None, "floor", "linear", False)),
        ]
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    needs_kernel(device, "rms_norm_quantize")
    needs_kernel(device, "silu_mul_quantize")
    for name, args in opcheck_samples(device):
        torch.library.opcheck(getattr(ops, name).default, args)


def rms_norm_then_silu(x, weight, residual, gate_up):
    """Both public functions in one compiled graph, through their tensor classes."""
    q, h = fp4ops.rms_norm_quantize(x, weight, 1e-5, residual=residual)
    m = fp4ops.silu_mul_quantize(gate_up, format="mxfp4", scale_rule="rceil", scale_layout="swizzled")
    return q.data, q.scales, q.global_scale, h, m.data, m.scales


@pytest.mark.parametrize("device", DEVICES)
def test_compile_dynamic_rows_without_recompiling(device):
    """fullgraph, dynamic=True: one graph for every row count (past 1, which dynamo specializes);
    results bitwise equal to eager."""
    needs_kernel(device, "rms_norm_quantize")
    needs_kernel(device, "silu_mul_quantize")
    torch._dynamo.reset()
    compiled = torch.compile(rms_norm_then_silu, fullgraph=True, dynamic=True)
    weight = random_input((64,), torch.bfloat16, device, 1.0)
    for i, rows in enumerate((5, 17, 130)):
        args = (random_input((rows, 64), torch.bfloat16, device), weight, random_input((rows, 64), torch.bfloat16, device),
                random_input((rows, 128), torch.bfloat16, device))
        with torch._dynamo.config.patch(error_on_recompile=i >= 1):
            got = compiled(*args)
        for a, b, what in zip(got, rms_norm_then_silu(*args), ("data", "scales", "g", "h", "silu data", "silu scales")):
            if a.dtype in (torch.float32, torch.bfloat16):
                assert_same_values(a, b, f"{rows} rows: {what}")
            else:
                assert_same_bytes(a, b, f"{rows} rows: {what}")


@requires_cuda
@requires_caching_allocator
@pytest.mark.parametrize("target", ["nvfp4-computed", "nvfp4-tensor", "mxfp4-rceil"])
def test_cuda_graph_capture_and_replay(target):
    """The computed g stays on the device (no host sync), so capture works; replays over fresh
    inputs give the eager bytes."""
    needs_kernel("cuda", "rms_norm_quantize")
    needs_kernel("cuda", "silu_mul_quantize")
    t = make_target(target, "cuda", "swizzled")
    static_x = random_input((40, 256), torch.bfloat16, "cuda")
    static_r = random_input((40, 256), torch.bfloat16, "cuda")
    weight = random_input((256,), torch.float32, "cuda", 1.0)

    def both():
        return run_rms(static_x, weight, t, residual=static_r), run_silu(static_x, t)

    side = torch.cuda.Stream()  # warm up on a side stream, as capture wants
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        both()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = both()
    for _ in range(3):
        static_x.copy_(random_input(static_x.shape, torch.bfloat16, "cuda"))
        static_r.copy_(random_input(static_r.shape, torch.bfloat16, "cuda"))
        graph.replay()
        torch.cuda.synchronize()
        for got, want, what in zip(captured, both(), ("rms", "silu")):
            assert_same_quantized(got, want, what)
            assert_same_values(got.y, want.y, f"{what} intermediate")
        assert_same_values(captured[0].new_residual, static_x + static_r, "new residual")

