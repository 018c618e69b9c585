"""The suite's rows: for each input, fp4ops' call and the baselines' calls, with the bytes
docs/performance.md (Targets) counts for the op and a check of the timed call's output.

fp4ops' outputs are checked bit for bit against `fp4ops.reference` on sampled rows (first, middle,
last and random ones); a mismatch stops the run. A baseline that computes the same contract (the
reference, eager or compiled) is compared with fp4ops' output and the row says whether it matched;
the others (casts, torchao, matmuls) are timed only, and say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

import fp4ops
from fp4ops import reference

from . import peers
from .baselines import (Baselines, dense_matmul, dequantize_then_matmul, fp8_cast, fp8_widen, norm_then_quantize,
                        scaled_mm_skip, silu_mul_then_quantize)

NVFP4_BYTES = 0.5 + 1 / 16  # per element: packed codes + one E4M3 scale per 16
MXFP4_BYTES = 0.5 + 1 / 32
GRAPH_MAX_NUMEL = 1 << 22  # microsecond kernels: also timed by graph replay
DECODE_MAX_NUMEL = 32 * 4096  # the decode shapes (1 x 4096, 1 x 8192, 32 x 4096)


@dataclass
class Case:
    family: str  # one plot per family
    op: str
    impl: str
    dtype: str
    shape: tuple
    numel: int  # elements (weights for the GEMV)
    bytes: float  # what the call must move (docs/performance.md (Targets)): GB/s, % of the ceiling
    ceiling: str  # "copy" or "read"
    fn: Callable[[], object] | None = None
    check: Callable[[object], str] | None = None  # fp4ops: raises on a mismatch; baselines: a verdict
    skip: str = ""  # why this row was not run
    graph: bool = False
    graph_cold: bool = False  # fn rotates through distinct inputs (Rotation): its graph replay reads them cold
    launches: bool = False


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A view that compares bit patterns (so -0.0 != 0.0 and NaN == NaN of the same code)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.view(ints[t.element_size()]) if t.dtype.is_floating_point else t


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def sample_rows(n: int, device: torch.device) -> torch.Tensor:
    """First, middle, last and six random rows: where indexing bugs show up, plus a spread."""
    picks = torch.cat([torch.tensor([0, n // 2, n - 1]), torch.randint(0, n, (6,))])
    return picks.unique().to(device)


def _require(ok: bool, what: str) -> str:
    if not ok:
        raise AssertionError(what)
    return "bitwise == reference (sampled rows)"


def _verdict(ok: bool) -> str:
    return "bitwise == fp4ops (sampled rows)" if ok else "DIFFERS from fp4ops"


# ----------------------------------------------------------------------------------------------
# Element-wise ops: amax, quantize, dequantize, casts


def elementwise_cases(shape: tuple, dtype: torch.dtype, device: torch.device, base: Baselines | None) -> list[Case]:
    """Every element-wise op on one input x of `shape`; baselines only where `base` is given."""
    x = torch.randn(shape, dtype=dtype, device=device)
    k, numel, e = shape[-1], x.numel(), x.element_size()
    x2 = x.view(-1, k)
    rows = sample_rows(x2.shape[0], device)
    g = reference.nvfp4_global_scale(reference.amax(x))  # computed without fp4ops
    nv, mx = fp4ops.quantize_nvfp4(x, g), fp4ops.quantize_mxfp4(x)
    small = numel <= GRAPH_MAX_NUMEL
    name = str(dtype).removeprefix("torch.")

    def case(family, op, impl, fn, nbytes, check, ceiling="copy", skip=""):
        return Case(family, op, impl, name, shape, numel, numel * nbytes, ceiling, fn, check, skip,
                    graph=small, launches=impl == "fp4ops" and small)

    def rows_of(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(x2.shape[0], -1)[rows]

    def nvfp4_check(q, scale) -> str:
        data, scales, _ = reference.quantize_nvfp4(x2[rows], scale)
        return _require(_same(rows_of(q.data), data) and _same(rows_of(q.scales), scales), "NVFP4 codes or scales")

    def mxfp4_check(q, rule) -> str:
        data, scales = reference.quantize_mxfp4(x2[rows], rule)
        return _require(_same(rows_of(q.data), data) and _same(rows_of(q.scales), scales), f"MXFP4 ({rule})")

    def own_amax_check(q) -> str:
        _require(_same(q.global_scale, g), "global scale != amax / 2688")
        return nvfp4_check(q, g)

    def same_as(expected: Callable[[object], tuple]) -> Callable[[object], str]:
        """Baseline check: its output tuple against fp4ops' tensors on the sampled rows."""
        def check(out) -> str:
            pairs = zip(out if isinstance(out, tuple) else (out,), expected(out))
            return _verdict(all(_same(rows_of(a) if a.dim() else a, b) for a, b in pairs))
        return check

    nv_rows = lambda _: (rows_of(nv.data), rows_of(nv.scales), g)  # noqa: E731
    mx_rows = lambda _: (rows_of(mx.data), rows_of(mx.scales))  # noqa: E731
    dq_nv, dq_mx = nv.dequantize(dtype), mx.dequantize(dtype)
    cases = [
        case("amax", "amax", "fp4ops", lambda: fp4ops.amax(x), e,
             lambda out: _require(_same(out, reference.amax(x)), "amax"), ceiling="read"),
        case("nvfp4 quantize", "nvfp4 quantize (scale given)", "fp4ops", lambda: fp4ops.quantize_nvfp4(x, g),
             e + NVFP4_BYTES, lambda q: nvfp4_check(q, g)),
        case("nvfp4 quantize", "nvfp4 quantize (own amax)", "fp4ops", lambda: fp4ops.quantize_nvfp4(x),
             2 * e + NVFP4_BYTES, own_amax_check),
        case("mxfp4 quantize", "mxfp4 quantize (floor)", "fp4ops", lambda: fp4ops.quantize_mxfp4(x),
             e + MXFP4_BYTES, lambda q: mxfp4_check(q, "floor")),
        case("mxfp4 quantize", "mxfp4 quantize (rceil)", "fp4ops", lambda: fp4ops.quantize_mxfp4(x, scale_rule="rceil"),
             e + MXFP4_BYTES, lambda q: mxfp4_check(q, "rceil")),
        case("dequantize", "nvfp4 dequantize", "fp4ops", lambda: nv.dequantize(dtype), e + NVFP4_BYTES,
             lambda out: _require(_same(rows_of(out), reference.dequantize_nvfp4(
                 rows_of(nv.data), rows_of(nv.scales), g, dtype)), "NVFP4 dequantize")),
        case("dequantize", "mxfp4 dequantize", "fp4ops", lambda: mx.dequantize(dtype), e + MXFP4_BYTES,
             lambda out: _require(_same(rows_of(out), reference.dequantize_mxfp4(
                 rows_of(mx.data), rows_of(mx.scales), dtype)), "MXFP4 dequantize")),
        case("casts", "cast to e2m1", "fp4ops", lambda: fp4ops.cast_to_e2m1(x), e + 0.5,
             lambda out: _require(_same(rows_of(out), reference.cast_to_e2m1(x2[rows])), "cast to E2M1")),
        case("casts", "cast from e2m1", "fp4ops", lambda: fp4ops.cast_from_e2m1(nv.data, dtype), e + 0.5,
             lambda out: _require(_same(rows_of(out), reference.cast_from_e2m1(rows_of(nv.data), dtype)),
                                  "cast from E2M1")),
    ]
    if base is None:
        return cases

    # Baselines: the reference (eager and compiled) computes the same contract, so it is compared.
    amax_ours = fp4ops.amax(x)
    reference_calls = [
        ("amax", "amax", "amax", lambda f: (lambda: f(x)), e, lambda out: _verdict(_same(out, amax_ours)), "read"),
        ("nvfp4 quantize", "nvfp4 quantize (scale given)", "quantize_nvfp4", lambda f: (lambda: f(x, g)),
         e + NVFP4_BYTES, same_as(nv_rows), "copy"),
        ("nvfp4 quantize", "nvfp4 quantize (own amax)", "quantize_nvfp4", lambda f: (lambda: f(x)),
         2 * e + NVFP4_BYTES, same_as(nv_rows), "copy"),
        ("mxfp4 quantize", "mxfp4 quantize (floor)", "quantize_mxfp4", lambda f: (lambda: f(x)),
         e + MXFP4_BYTES, same_as(mx_rows), "copy"),
        ("dequantize", "nvfp4 dequantize", "dequantize_nvfp4", lambda f: (lambda: f(nv.data, nv.scales, g, dtype)),
         e + NVFP4_BYTES, same_as(lambda _: (rows_of(dq_nv),)), "copy"),
        ("dequantize", "mxfp4 dequantize", "dequantize_mxfp4", lambda f: (lambda: f(mx.data, mx.scales, dtype)),
         e + MXFP4_BYTES, same_as(lambda _: (rows_of(dq_mx),)), "copy"),
    ]
    for family, op, function, bind, nbytes, check, ceiling in reference_calls:
        eager_skip = base.eager_skip(numel)
        cases.append(case(family, op, "reference (eager)", None if eager_skip else bind(getattr(reference, function)),
                          nbytes, check, ceiling, eager_skip))
        compile_skip = "" if base.compiled else "torch.compile baselines not asked for"
        if not compile_skip and numel <= DECODE_MAX_NUMEL and op != "nvfp4 quantize (own amax)":
            # Each decode shape recompiles (a dimension of 1 specializes): the decode target's op only.
            compile_skip = "decode shapes: compiled for the own-amax quantize only"
        cases.append(case(family, op, "reference (torch.compile)",
                          None if compile_skip else bind(base.compiled_fn(function)), nbytes, check, ceiling,
                          compile_skip))
    # PyTorch's own casts: data movers with no rounding contract of ours to check.
    codes = x.to(torch.float8_e4m3fn)
    cases += [case("nvfp4 quantize", "nvfp4 quantize (scale given)", "torch bf16->fp8 cast" if dtype == torch.bfloat16
                   else f"torch {name}->fp8 cast", fp8_cast(x), e + 1, lambda _: "timed only (a plain cast)"),
              case("dequantize", "nvfp4 dequantize", f"torch fp8->{name} cast", fp8_widen(codes, dtype), e + 1,
                   lambda _: "timed only (a plain cast)")]
    for op, family, make, nbytes in (("nvfp4 quantize (scale given)", "nvfp4 quantize",
                                      lambda: peers.torchao_nvfp4_quantize(x2, g), e + NVFP4_BYTES),
                                     ("mxfp4 quantize (floor)", "mxfp4 quantize",
                                      lambda: peers.torchao_mxfp4_quantize(x2), e + MXFP4_BYTES)):
        made = make() if base.torchao else "torchao baselines not asked for"
        skip = made if isinstance(made, str) else ""
        cases.append(case(family, op, "torchao", None if skip else made, nbytes,
                          lambda _: "timed only (torchao rounds its own way: docs/performance.md)", skip=skip))
    return cases


# ----------------------------------------------------------------------------------------------
# GEMV (SPEC 5)

GEMV_SEED_SHAPES = [(7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4)]
GEMV_2POW28_SHAPE = (16384, 16384, 1)
GEMV_SHAPES = GEMV_SEED_SHAPES + [GEMV_2POW28_SHAPE]


# The weights of the GEMV rows: several distinct copies taken in turn, so that back-to-back calls
# read cold weights, as a decode loop does layer after layer. The graph replay (20 calls queued at
# once) then shows what the launch gaps of cold-L2 events hide; with one weight it would time an
# L2-resident matrix at the seed shape's size (33 MB against the H100's 50 MB L2).
WEIGHT_TURN_L2S = 3  # one turn over the copies reads at least this many L2 sizes


def weight_copies(weight_bytes: float, device: torch.device) -> int:
    """How many distinct weights a GEMV row rotates through: at least two, and at least
    WEIGHT_TURN_L2S L2 sizes per turn (one on the CPU, which has nothing to keep cold)."""
    if device.type != "cuda":
        return 1
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20
    return max(2, math.ceil(WEIGHT_TURN_L2S * l2 / weight_bytes))


class Rotation:
    """fn(inputs[0]), fn(inputs[1]), ... in turn. `last` is the input of the latest call, against
    which its output is checked (in a captured graph: the last captured call, which every replay
    repeats)."""

    def __init__(self, inputs: list, fn: Callable[[object], object]):
        self.inputs, self.fn, self.calls, self.last = inputs, fn, 0, None

    def __call__(self) -> object:
        self.last = self.inputs[self.calls % len(self.inputs)]
        self.calls += 1
        return self.fn(self.last)


def gemv_cases(m: int, k: int, l: int, device: torch.device, base: Baselines | None) -> list[Case]:
    """FP4 x FP4 and FP4 x bf16 for NVFP4 and MXFP4 A; baselines use the NVFP4 x bf16 bytes."""
    b_dense = torch.randn(l, k, device=device, dtype=torch.bfloat16)
    weights = m * k * l
    copies = weight_copies(weights * NVFP4_BYTES, device)
    cases = []
    for fmt, quantize, elem_bytes in (("nvfp4", fp4ops.quantize_nvfp4, NVFP4_BYTES),
                                      ("mxfp4", fp4ops.quantize_mxfp4, MXFP4_BYTES)):
        a_copies = [quantize(torch.randn(l, m, k, device=device, dtype=torch.bfloat16)) for _ in range(copies)]
        b_fp4 = quantize(b_dense)
        for kind, b, b_bytes in ((f"{fmt} x {fmt}", b_fp4, k * elem_bytes), (f"{fmt} x bf16", b_dense, 2 * k)):
            calls = Rotation(a_copies, lambda a, b=b: fp4ops.gemv(a, b))
            cases.append(Case("gemv", f"gemv {kind}", "fp4ops", kind, (m, k, l), weights,
                              l * (m * k * elem_bytes + b_bytes + 2 * m), "copy",
                              fn=calls, check=lambda y, calls=calls, b=b: _gemv_check(y, calls.last, b),
                              graph=True, graph_cold=device.type == "cuda"))
        if fmt == "nvfp4":
            nv_copies, nv_b = a_copies, b_fp4
    # Read-only kernels over the same bytes, cold: what merely reading this much costs. The ceilings
    # are measured over 512 MB; a read of a few tens of MB spends a visible share of its time
    # ramping up and draining, which no GEMV of that size avoids either (docs/performance.md).
    read_bytes = l * (m * k * NVFP4_BYTES + 2 * k + 2 * m)
    same_bytes = torch.zeros(int(read_bytes) // 2, device=device, dtype=torch.bfloat16)
    for impl, fn in (("read of the same bytes (torch.amax)", lambda: torch.amax(same_bytes)),
                     ("read of the same bytes (fp4ops amax)", lambda: fp4ops.amax(same_bytes))):
        cases.append(Case("gemv", "gemv nvfp4 x bf16", impl, "nvfp4 x bf16", (m, k, l), weights, same_bytes.nbytes,
                          "copy", fn=fn, check=lambda _: "timed only (a read of this size)"))
    if base is None:
        return cases
    w = torch.randn(l, m, k, device=device, dtype=torch.bfloat16)
    mm_skip = scaled_mm_skip(device)
    # The FP4 baselines rotate through fp4ops' weights too; the bf16 matrix alone is 3.6x their bytes.
    for impl, fn, skip in (("dequantize + torch.matmul", Rotation(nv_copies, lambda a: dequantize_then_matmul(a, b_dense)()), ""),
                           ("bf16 torch.matmul", dense_matmul(w, b_dense), ""),
                           ("torch._scaled_mm", Rotation(nv_copies, lambda a: reference.scaled_mm_gemv(a, nv_b)), mm_skip)):
        cases.append(Case("gemv", "gemv nvfp4 x bf16" if impl != "torch._scaled_mm" else "gemv nvfp4 x nvfp4", impl,
                          "nvfp4 x bf16", (m, k, l), weights, read_bytes, "copy", None if skip else fn,
                          lambda _: "timed only (different rounding)", skip, graph=True,
                          graph_cold=device.type == "cuda" and impl != "bf16 torch.matmul"))
    return cases


def _gemv_check(y: torch.Tensor, a, b) -> str:
    """SPEC 5's bound on 64 rows of the first and of the last batch index, in float64."""
    for l in {0, y.shape[0] - 1}:
        rows = slice(0, 64)
        a_small, b_small = a[l:l + 1, rows], b[l:l + 1]
        err = (y[l:l + 1, rows].double() - reference.gemv_float64(a_small, b_small)).abs()
        _require(bool((err <= reference.gemv_error_bound(a_small, b_small, y.dtype)).all()), "GEMV outside SPEC 5")
    return "within SPEC 5's bound (64 rows of the first and last batch)"


# ----------------------------------------------------------------------------------------------
# The NVFP4 training-recipe options (docs/recipe.md), fp4ops only


RECIPE_VARIANTS = [  # (name, options, rowwise + columnwise)
    ("plain", {}, False), ("swizzled scales", {"scale_layout": "swizzled"}, False),
    ("hadamard (TE signs)", {"hadamard": True}, False), ("hadamard (seeded signs)", {"hadamard": 7}, False),
    ("2D 16x16 blocks", {"block_2d": True}, False),
    ("stochastic rounding", {"stochastic_rounding": True, "seed": 1}, False),
    ("rowwise + columnwise", {}, True), ("rowwise + columnwise, 2D", {"block_2d": True}, True),
    ("rowwise + columnwise, hadamard + SR", {"hadamard": True, "stochastic_rounding": True, "seed": 1}, True),
]


def recipe_cases(numel: int, device: torch.device, k: int = 8192) -> list[Case]:
    """Each option on a bf16 [numel / k, k] matrix with the global scale given; checked against the
    CPU kernel on the first 256 rows (a prefix of every output, for every option but the
    columnwise copy under stochastic rounding, whose random stream is indexed by the full shape)."""
    x = torch.randn(numel // k, k, device=device, dtype=torch.bfloat16)
    g = reference.nvfp4_global_scale(reference.amax(x))
    head = x[:256].cpu()
    cases = []
    for name, options, both in RECIPE_VARIANTS:
        quantize = fp4ops.quantize_nvfp4_rowwise_columnwise if both else fp4ops.quantize_nvfp4
        nbytes = numel * (2 + (2 if both else 1) * NVFP4_BYTES)
        cases.append(Case("nvfp4 recipe", f"recipe: {name}", "fp4ops", "bfloat16", tuple(x.shape), numel, nbytes,
                          "copy", fn=lambda q=quantize, o=options: q(x, g, **o),
                          check=lambda out, q=quantize, o=options: _recipe_check(out, q(head, g.cpu(), **o), o)))
    return cases


def _recipe_check(out, expected, options: dict) -> str:
    outs, refs = (out, expected) if isinstance(out, tuple) else ((out,), (expected,))
    for which, (got, want) in enumerate(zip(outs, refs)):
        if which == 1 and options.get("stochastic_rounding"):
            continue  # the columnwise random stream is indexed by the whole shape
        for field_name in ("data", "scales"):
            a, b = getattr(got, field_name), getattr(want, field_name)
            # rowwise: the first rows; columnwise (stored transposed): the first columns.
            piece = a[: b.shape[0]] if which == 0 else a[:, : b.shape[1]]
            _require(_same(piece.cpu(), b), f"recipe {field_name} ({'columnwise' if which else 'rowwise'})")
    partial = len(outs) == 2 and options.get("stochastic_rounding")
    return "bitwise == CPU kernel, first 256 rows" + (" (rowwise copy only)" if partial else "")


# ----------------------------------------------------------------------------------------------
# Fused producers (SPEC 7): RMSNorm (optionally after a residual add) or SiLU-and-mul, straight
# into NVFP4 / MXFP4. Each row's size is the output's rows x H (SiLU's x is rows x 2H), bf16 input.

# Decode (1-64 rows, launch-bound: also timed by graph replay) to prefill rows at Llama-like
# widths, and 16384 x 16384: 2^28 output elements, the bandwidth targets' size.
PRODUCER_SHAPES = [(rows, hidden) for hidden in (4096, 8192, 16384) for rows in (1, 8, 64, 1024, 8192)]
PRODUCER_SHAPES.append((16384, 16384))
PRODUCER_EPS = 1e-6


@dataclass(frozen=True)
class Producer:
    op: str
    kind: str  # "rms_norm" or "silu_mul"
    format: str  # "nvfp4" or "mxfp4"
    scale_given: bool = False  # NVFP4: a calibrated global scale (the serving case), else the op's own amax
    residual: bool = False

    @property
    def plain(self) -> str:
        """The op of the plain quantizer doing this producer's quantize step (its own rows)."""
        if self.format == "mxfp4":
            return "plain mxfp4 quantize (floor)"
        return f"plain nvfp4 quantize ({'scale given' if self.scale_given else 'own amax'})"

    def bytes_per_element(self, e: int) -> float:
        """Per output element, each tensor counted once (docs/performance.md's convention): the
        input's reads (RMSNorm x, with a residual also the residual read and the new residual
        written; SiLU gate and up), a second read of the input for the own amax (two passes, as
        the own-amax quantize row counts), codes and scales written. RMSNorm's weight is per call."""
        read = e if self.kind == "rms_norm" else 2 * e
        stream = read + (2 * e if self.residual else 0)
        second = 0 if self.format == "mxfp4" or self.scale_given else (e if self.kind == "rms_norm" else read)
        return stream + second + (NVFP4_BYTES if self.format == "nvfp4" else MXFP4_BYTES)


PRODUCERS = [
    Producer("rms_norm_quantize nvfp4 (scale given)", "rms_norm", "nvfp4", scale_given=True),
    Producer("rms_norm_quantize nvfp4 + residual (scale given)", "rms_norm", "nvfp4", scale_given=True, residual=True),
    Producer("rms_norm_quantize nvfp4 (own amax)", "rms_norm", "nvfp4"),
    Producer("rms_norm_quantize mxfp4 (floor)", "rms_norm", "mxfp4"),
    Producer("silu_mul_quantize nvfp4 (scale given)", "silu_mul", "nvfp4", scale_given=True),
    Producer("silu_mul_quantize nvfp4 (own amax)", "silu_mul", "nvfp4"),
    Producer("silu_mul_quantize mxfp4 (floor)", "silu_mul", "mxfp4"),
]
PRODUCER_PLAIN = {p.op: p.plain for p in PRODUCERS}  # the targets pair each producer with its plain quantizer


def _intermediate(kind: str, x, weight, residual) -> torch.Tensor:
    """The fp32 intermediate y as the producer's kernel computes it (the op's return_intermediate,
    which the public wrappers do not expose); SPEC 7: the quantized output is the plain quantizer
    of exactly this y."""
    if kind == "rms_norm":
        return torch.ops.fp4ops.rms_norm_quantize(x, weight, PRODUCER_EPS, residual, "nvfp4", None, "floor",
                                                  "linear", True)[4]
    return torch.ops.fp4ops.silu_mul_quantize(x, "nvfp4", None, "floor", "linear", True)[3]


def _intermediate_verdict(kind: str, y_rows, x_rows, weight, r_rows) -> str:
    """The sampled rows of the kernel's y against fp4ops.reference's SPEC 7 intermediate: RMSNorm's
    order is fixed (bitwise, on either device), SiLU's exp is the platform's (SPEC 7's float64 bound)."""
    if kind == "rms_norm":
        want, _ = reference.rms_norm_intermediate(x_rows, weight, PRODUCER_EPS, r_rows)
        _require(_same(y_rows, want), "RMSNorm intermediate != reference.rms_norm_intermediate")
        return "; intermediate bitwise == reference"
    y64 = reference.silu_mul_float64(x_rows)
    bound = reference.silu_mul_error_bound(y64, x_rows[..., x_rows.shape[-1] // 2:])
    _require(bool(((y_rows.double() - y64).abs() <= bound).all()), "SiLU-and-mul intermediate outside SPEC 7")
    return "; intermediate within SPEC 7's bound"


def _quantize(fmt: str, y: torch.Tensor, g):
    """The plain quantizer of `fmt` (g: NVFP4's global scale, None for its own amax)."""
    return fp4ops.quantize_nvfp4(y, g) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(y)


def producer_cases(rows: int, hidden: int, device: torch.device, base: Baselines | None) -> list[Case]:
    """Every producer on bf16 inputs with an output of rows x hidden, the plain quantizers on a
    bf16 tensor of the output's shape, and (with `base`) the unfused sequences: PyTorch's bf16
    rms_norm (after the residual add) or silu(gate) * up, then fp4ops' quantizer."""
    dtype, e = torch.bfloat16, 2
    x = torch.randn(rows, hidden, dtype=dtype, device=device)
    residual = torch.randn_like(x)
    weight = (1 + 0.1 * torch.randn(hidden, device=device)).to(dtype)  # near 1, as trained norms are
    gate_up = torch.randn(rows, 2 * hidden, dtype=dtype, device=device)
    numel = rows * hidden
    picks = sample_rows(rows, device)
    small = numel <= GRAPH_MAX_NUMEL

    def case(op, impl, fn, nbytes, check):
        return Case("producers", op, impl, "bfloat16", (rows, hidden), numel, nbytes, "copy", fn, check,
                    graph=small, launches=impl == "fp4ops" and small)

    def rows_of(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(rows, -1)[picks]

    def quantized_check(q, want_rows, g, fmt) -> None:
        """q bitwise == the reference quantizer of `want_rows` on the sampled rows."""
        if fmt == "nvfp4":
            _require(_same(q.global_scale, g), "NVFP4 global scale")
            data, scales, _ = reference.quantize_nvfp4(want_rows, g)
        else:
            data, scales = reference.quantize_mxfp4(want_rows, "floor")
        _require(_same(rows_of(q.data), data) and _same(rows_of(q.scales), scales), f"{fmt.upper()} codes or scales")

    # Each producer's input (x, residual) by (kind, with a residual), and from its kernel's
    # intermediate (1 GB of fp32 at 2^28, so one at a time) the sampled rows and the global scale
    # amax(y) / 2688, computed by the reference: what the own-amax rows must find, and the
    # calibrated scale the others take.
    inputs = {("rms_norm", False): (x, None), ("rms_norm", True): (x, residual), ("silu_mul", False): (gate_up, None)}
    sampled, scale_of = {}, {}
    for key, (inp, res) in inputs.items():
        y = _intermediate(key[0], inp, weight, res)
        sampled[key], scale_of[key] = y[picks], reference.nvfp4_global_scale(reference.amax(y))
        if key == ("rms_norm", False):
            plain_input = y.to(dtype)  # the plain quantizers' bf16 tensor: RMSNorm's output, rounded
        del y
    plain_g = reference.nvfp4_global_scale(reference.amax(plain_input))

    cases = []
    for p in PRODUCERS:
        key = (p.kind, p.residual)
        (inp, res), g = inputs[key], scale_of[key]
        given = g if p.scale_given else None
        if p.kind == "rms_norm":
            fn = lambda p=p, inp=inp, res=res, given=given: fp4ops.rms_norm_quantize(
                inp, weight, PRODUCER_EPS, residual=res, format=p.format, global_scale=given)
        else:
            fn = lambda p=p, inp=inp, given=given: fp4ops.silu_mul_quantize(inp, format=p.format, global_scale=given)

        def check(out, p=p, key=key, inp=inp, res=res, g=g) -> str:
            q, new_residual = out if p.residual else (out, None)
            if new_residual is not None:  # SPEC 7: bitwise what x + residual gives in PyTorch
                _require(_same(rows_of(new_residual), inp[picks] + res[picks]), "new residual != x + residual")
            quantized_check(q, sampled[key], g, p.format)
            return ("bitwise == reference quantizer of its intermediate (sampled rows)"
                    + _intermediate_verdict(p.kind, sampled[key], inp[picks], weight,
                                            None if res is None else res[picks]))

        nbytes = numel * p.bytes_per_element(e) + (hidden * e if p.kind == "rms_norm" else 0)
        cases.append(case(p.op, "fp4ops", fn, nbytes, check))
        if base is not None:
            quantize = lambda y, p=p, given=given: _quantize(p.format, y, given)  # noqa: E731
            unfused = (norm_then_quantize(inp, res, weight, PRODUCER_EPS, quantize) if p.kind == "rms_norm"
                       else silu_mul_then_quantize(inp, quantize))
            cases.append(case(p.op, _unfused_name(p), unfused, nbytes,
                              lambda _: "timed only (rounds the activation to bf16 before quantizing)"))

    # One plain quantizer per quantize step, on a bf16 tensor of the output's shape (the SiLU
    # producers share them): what a producer's bandwidth is held to. Its bytes are RMSNorm's
    # without the weight: one read of the input (two for the own amax), codes and scales written.
    for p in PRODUCERS:
        if p.kind != "rms_norm" or p.residual:
            continue
        given = plain_g if p.scale_given else None

        def plain_check(q, p=p) -> str:
            quantized_check(q, plain_input[picks], plain_g, p.format)
            return "bitwise == reference (sampled rows)"

        cases.append(case(p.plain, "fp4ops", lambda p=p, given=given: _quantize(p.format, plain_input, given),
                          numel * p.bytes_per_element(e), plain_check))
    return cases


def _unfused_name(p: Producer) -> str:
    first = {"rms_norm": "torch add + rms_norm" if p.residual else "torch rms_norm",
             "silu_mul": "torch silu(gate) * up"}[p.kind]
    return f"unfused: {first}, fp4ops quantize"


def suite_groups(sizes: list[int], dtypes: list[torch.dtype], families: set[str], device: torch.device,
                 base: Baselines, gemv_shapes: list[tuple[int, int, int]],
                 producer_shapes: list[tuple[int, int]]) -> Iterator[tuple[str, Callable[[], list[Case]]]]:
    """(label, builder) per input; builders run lazily so one input is alive at a time."""
    elementwise = {"amax", "nvfp4 quantize", "mxfp4 quantize", "dequantize", "casts"}
    if families & elementwise:
        for shape in ((1, 4096), (1, 8192), (32, 4096)):
            yield f"decode {shape}", lambda s=shape: elementwise_cases(s, torch.bfloat16, device, base)
        for log2 in sizes:
            for dtype in dtypes:
                shape = ((1 << log2) // 4096, 4096)
                with_base = base if dtype == torch.bfloat16 else None
                yield f"2^{log2} {dtype}", lambda s=shape, d=dtype, b=with_base: elementwise_cases(s, d, device, b)
    if "gemv" in families:
        for shape in gemv_shapes:
            yield f"gemv {shape}", lambda s=shape: gemv_cases(*s, device, base)
    if "nvfp4 recipe" in families:
        for log2 in sizes:
            if (1 << log2) >= 256 * 8192:
                yield f"recipe 2^{log2}", lambda n=1 << log2: recipe_cases(n, device)
    if "producers" in families:  # bf16 only: what a model's norms and MLPs feed a quantizer
        for rows, hidden in producer_shapes:
            yield f"producers {rows} x {hidden}", lambda r=rows, h=hidden: producer_cases(r, h, device, base)
