"""torch.library.opcheck over every op and sample: schema, fake kernel, dispatch, aliasing."""

from __future__ import annotations

import pytest
import torch
from conftest import HAS_CUDA, cuda_has_kernel

import fp4ops  # noqa: F401  (registers the ops)

ops = torch.ops.fp4ops


def samples(device: str):
    """(op name, args) pairs covering every op, input dtype, output dtype and option."""
    out = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(3, 64, device=device, dtype=dtype)
        batched = torch.randn(2, 3, 32, device=device, dtype=dtype)
        tall = torch.randn(2, 16, 48, device=device, dtype=dtype)  # rows a multiple of 16: columnwise
        out += [
            ("amax", (x,)),
            ("quantize_nvfp4", (x, None)),
            ("quantize_nvfp4", (batched, torch.tensor(0.01, device=device))),
            ("quantize_mxfp4", (x, "floor")),
            ("quantize_mxfp4", (batched, "rceil")),
            ("quantize_nvfp4", (batched, None, "swizzled")),
            ("quantize_mxfp4", (x, "floor", "swizzled")),
            ("quantize_nvfp4_recipe", (tall, None, "linear", True, True, False, 0x1234, 99, 3)),
            ("quantize_nvfp4_recipe", (batched, torch.tensor(0.5, device=device), "swizzled", True, False, True, -1, None, 0)),
            ("quantize_nvfp4_recipe", (tall, None, "swizzled", False, True, False, -1, None, 0)),
            ("cast_to_e2m1", (x,)),
            *producer_samples(x, batched),
        ]
        data = torch.randint(0, 256, (3, 32), dtype=torch.uint8, device=device)
        e4m3 = torch.randint(0, 0x7F, (3, 4), dtype=torch.uint8, device=device).view(torch.float8_e4m3fn)
        e8m0 = torch.randint(100, 150, (3, 2), dtype=torch.uint8, device=device).view(torch.float8_e8m0fnu)
        out += [
            ("dequantize_nvfp4", (data, e4m3, torch.tensor(0.5, device=device), dtype)),
            ("dequantize_mxfp4", (data, e8m0, dtype)),
            ("dequantize_nvfp4", (data, torch.zeros(128, 4, dtype=torch.float8_e4m3fn, device=device), torch.tensor(0.5, device=device), dtype, "swizzled")),
            ("dequantize_mxfp4", (data, torch.zeros(128, 4, dtype=torch.float8_e8m0fnu, device=device), dtype, "swizzled")),
            ("cast_from_e2m1", (data, dtype)),
        ]
    out += [("swizzle_scales", (e4m3,)), ("swizzle_scales", (e8m0[0],)),
            ("unswizzle_scales", (torch.zeros(2, 128, 8, dtype=torch.uint8, device=device).view(torch.float8_e4m3fn), 130 - 128, 5))]
    out.append(("quantize_nvfp4", (torch.empty(0, 16, device=device), None)))
    nv = torch.ops.fp4ops.quantize_nvfp4(torch.randn(2, 5, 64, device=device), None) if device == "cpu" or cuda_has_kernel("quantize_nvfp4") else None
    mx = torch.ops.fp4ops.quantize_mxfp4(torch.randn(2, 5, 64, device=device), "floor") if nv is not None else None
    if nv is not None:
        b_nv = torch.ops.fp4ops.quantize_nvfp4(torch.randn(2, 64, device=device), None)
        b_mx = torch.ops.fp4ops.quantize_mxfp4(torch.randn(2, 64, device=device), "rceil")
        for b_dtype, out_dtype in ((torch.bfloat16, torch.float16), (torch.float16, torch.float32)):
            b = torch.randn(2, 64, device=device, dtype=b_dtype)
            out += [("gemv_fp4_dense", (nv[0], nv[1], nv[2], b, out_dtype)), ("gemv_fp4_dense", (mx[0], mx[1], None, b, out_dtype))]
        out += [("gemv_fp4_fp4", (nv[0], nv[1], nv[2], b_nv[0], b_nv[1], b_nv[2], torch.bfloat16)),
                ("gemv_fp4_fp4", (mx[0], mx[1], None, b_mx[0], b_mx[1], None, torch.float32))]
        out += linear_samples(device)
    return out


def producer_samples(x: torch.Tensor, batched: torch.Tensor):
    """The fused producers on x [3, 64] and batched [2, 3, 32]: both formats and layouts, a weight
    in x's dtype and in fp32, a residual, a given g, with and without the intermediate."""
    g = torch.tensor(0.01, device=x.device)
    w = torch.randn(64, device=x.device)
    return [
        ("rms_norm_quantize", (x, w.to(x.dtype), 1e-6, None, "nvfp4", None, "floor", "linear", False)),
        ("rms_norm_quantize", (x, w, 1e-5, torch.randn_like(x), "mxfp4", None, "rceil", "swizzled", True)),
        ("rms_norm_quantize", (batched, w[:32], 0.0, None, "nvfp4", g, "floor", "swizzled", True)),
        ("silu_mul_quantize", (x, "nvfp4", None, "floor", "linear", True)),
        ("silu_mul_quantize", (x, "mxfp4", None, "floor", "swizzled", False)),
        ("silu_mul_quantize", (batched, "nvfp4", g, "floor", "linear", False)),
    ]


def linear_samples(device: str):
    """linear: dense and FP4 x of both formats, with and without bias, every output dtype, no
    rows, a crossover row count and batch_invariant."""
    w_nv = ops.quantize_nvfp4(torch.randn(24, 128, device=device), None)
    w_mx = ops.quantize_mxfp4(torch.randn(24, 128, device=device), "floor")
    out = []
    cases = ((3, torch.bfloat16, torch.float16, False), (0, torch.float16, torch.float32, False),
             (65, torch.bfloat16, torch.bfloat16, True))
    for rows, x_dtype, out_dtype, invariant in cases:
        x = torch.randn(rows, 128, device=device, dtype=x_dtype)
        bias = torch.randn(24, device=device, dtype=x_dtype) if rows else None
        x_nv = ops.quantize_nvfp4(x.float(), None)
        x_mx = ops.quantize_mxfp4(x.float(), "rceil")
        out += [("linear", (x, None, None, *w_nv, bias, out_dtype, invariant)),
                ("linear", (x, None, None, w_mx[0], w_mx[1], None, None, out_dtype, invariant)),
                ("linear", (*x_nv, *w_nv, None, out_dtype, invariant)),
                ("linear", (x_mx[0], x_mx[1], None, *w_mx, None, bias, out_dtype, invariant))]
    return out


# opcheck's schema test compares each input before and after the call with torch.allclose, which
# torch does not implement for float8 tensors on the CPU; for the ops whose inputs include float8
# scales it runs every other test (fake kernel, dispatch, AOT) and the test below checks mutation.
ALL_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e8m0fnu)


def opcheck_utils(args) -> tuple[str, ...]:
    has_float8 = any(isinstance(a, torch.Tensor) and a.dtype in FLOAT8 for a in args)
    return ALL_TESTS[1:] if has_float8 else ALL_TESTS


DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_every_op(device):
    checked = set()
    for name, args in samples(device):
        if device == "cuda" and not cuda_has_kernel(name):
            continue
        torch.library.opcheck(getattr(ops, name).default, args, test_utils=opcheck_utils(args))
        checked.add(name)
    expected = {n for n, _ in samples("cpu")} if device == "cpu" else checked
    assert checked == expected and checked


@pytest.mark.parametrize("device", DEVICES)
def test_dequantize_leaves_float8_inputs_untouched(device):
    for name, args in samples(device):
        if not name.startswith("dequantize") or (device == "cuda" and not cuda_has_kernel(name)):
            continue
        before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        out = getattr(ops, name)(*args)
        for a, b in zip(args, before):
            if isinstance(a, torch.Tensor):
                assert torch.equal(a.view(torch.uint8) if a.dtype in FLOAT8 else a, b.view(torch.uint8) if b.dtype in FLOAT8 else b)
                assert out.data_ptr() != a.data_ptr()


@pytest.mark.parametrize("device", DEVICES)
def test_a_meta_tensor_among_real_ones_is_refused_by_name(device):
    """A real meta tensor among CPU or CUDA ones sends the call to the fake kernel (Meta outranks
    the backends): each op's fake must refuse it, naming the argument, rather than hand back its
    empty tensors as results. Every sample of every op, each tensor argument but the first moved
    to meta in turn."""
    moved_any = set()
    for name, args in samples(device):
        if device == "cuda" and not cuda_has_kernel(name):
            continue
        schema = getattr(ops, name).default._schema
        for i, arg in enumerate(args):
            first = next(j for j, a in enumerate(args) if isinstance(a, torch.Tensor))
            if not isinstance(arg, torch.Tensor) or i == first:
                continue
            changed = list(args)
            changed[i] = arg.to("meta")
            with pytest.raises(RuntimeError, match=f"^{schema.arguments[i].name}: expected a tensor on {device}"):
                getattr(ops, name)(*changed)
            moved_any.add(name)
    assert moved_any
