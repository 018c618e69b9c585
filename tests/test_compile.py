"""The Python API under torch.compile(fullgraph=True): no graph breaks, same bits as eager."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_exact, assert_same_bytes

import fp4ops


def nvfp4_round_trip(x):
    q = fp4ops.quantize_nvfp4(x)
    return q.data, q.scales, q.dequantize(torch.float32)


def nvfp4_given_scale_round_trip(x):
    q = fp4ops.quantize_nvfp4(x, 0.125)
    return q.data, q.scales, fp4ops.dequantize(q, torch.bfloat16)


def mxfp4_round_trip(x):
    q = fp4ops.quantize_mxfp4(x, scale_rule="rceil")
    return q.data, q.scales, q.dequantize(torch.float16)


def casts_and_amax(x):
    return fp4ops.cast_from_e2m1(fp4ops.cast_to_e2m1(x), torch.float32), fp4ops.amax(x)


def quantize_then_gemv(x):
    q = fp4ops.quantize_mxfp4(x)
    return (fp4ops.gemv(q, x[:, 0, :], out_dtype=torch.float32),)


@pytest.mark.parametrize("fn", [nvfp4_round_trip, nvfp4_given_scale_round_trip, mxfp4_round_trip, casts_and_amax,
                                quantize_then_gemv])
def test_fullgraph_compile_matches_eager(fn):
    torch._dynamo.reset()
    x = torch.randn(4, 8, 64, dtype=torch.bfloat16) * 5
    compiled = torch.compile(fn, fullgraph=True, backend="inductor")
    for got, want in zip(compiled(x), fn(x)):
        if got.dtype in (torch.uint8, torch.float8_e4m3fn, torch.float8_e8m0fnu):
            assert_same_bytes(got, want, fn.__name__)
        else:
            assert_exact(got, want)


def test_compiled_function_can_return_the_tensor_class():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: fp4ops.quantize_nvfp4(x * 2), fullgraph=True)
    x = torch.randn(2, 32)
    q = compiled(x)
    assert isinstance(q, fp4ops.NVFP4Tensor)
    assert_same_bytes(q.data, fp4ops.quantize_nvfp4(x * 2).data, "data")


ALL_FUNCTIONS = [nvfp4_round_trip, nvfp4_given_scale_round_trip, mxfp4_round_trip, casts_and_amax, quantize_then_gemv]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def assert_outputs_match(got_outputs, want_outputs, name):
    for got, want in zip(got_outputs, want_outputs):
        if got.dtype in (torch.uint8, torch.float8_e4m3fn, torch.float8_e8m0fnu):
            assert_same_bytes(got, want, name)
        else:
            assert_exact(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", ALL_FUNCTIONS)
def test_dynamic_shape_compile_matches_eager(fn, device):
    """dynamic=True over several batch sizes and K (the checks on K's block
    multiple become guards, not graph breaks)."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend="inductor")
    for shape in [(4, 8, 64), (3, 5, 128), (7, 2, 96 if fn is not mxfp4_round_trip else 160)]:
        if fn in (mxfp4_round_trip, quantize_then_gemv) and shape[-1] % 32:
            continue
        x = torch.randn(*shape, dtype=torch.bfloat16, device=device) * 5
        assert_outputs_match(compiled(x), fn(x), f"{fn.__name__}{shape}")


def fp4_input_calls(fmt: str, device: str) -> dict:
    """name -> (function, its arguments): every op that takes an FP4 tensor, given one as an input."""
    quantize = fp4ops.quantize_nvfp4 if fmt == "nvfp4" else fp4ops.quantize_mxfp4
    w, x = quantize(torch.randn(48, 128, device=device)), quantize(torch.randn(2, 5, 128, device=device))
    a, b = quantize(torch.randn(3, 48, 128, device=device)), quantize(torch.randn(3, 128, device=device))
    dense_x = torch.randn(5, 128, dtype=torch.bfloat16, device=device)
    return {
        "dequantize": (lambda q: q.dequantize(torch.float32), (w,)),
        "fp4ops.dequantize": (lambda q: fp4ops.dequantize(q, torch.float16), (w,)),
        "linear, dense x": (lambda x, w: fp4ops.linear(x, w), (dense_x, w)),
        "linear, FP4 x": (lambda x, w: fp4ops.linear(x, w), (x, w)),
        "gemv, dense b": (lambda a, b: fp4ops.gemv(a, b), (a, dense_x[:3].half())),
        "gemv, FP4 b": (lambda a, b: fp4ops.gemv(a, b), (a, b)),
        "rows": (lambda x: x[1, 2:].dequantize(), (x,)),
        "swizzled scales": (lambda q: q.with_scale_layout("swizzled").scales, (w,)),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_fp4_tensors_as_compiled_function_inputs(device, fmt):
    """FP4 tensors passed into a fullgraph, dynamic compile (torch 2.11 had read their class's block
    as a symbolic int, which the checks' messages could not format)."""
    for name, (fn, args) in fp4_input_calls(fmt, device).items():
        torch._dynamo.reset()
        compiled = torch.compile(fn, fullgraph=True, dynamic=True)
        assert_outputs_match([compiled(*args)], [fn(*args)], name)


@pytest.mark.parametrize("device", DEVICES)
def test_rows_of_fp4_x_selected_in_a_compiled_function(device):
    """An FP4 tensor's rows (its __getitem__) selected inside a fullgraph, dynamic compile: the
    last tokens of a batch of FP4 activations through the linear, as a decode step does."""
    torch._dynamo.reset()
    w = fp4ops.quantize_nvfp4(torch.randn(48, 128, device=device))
    compiled = torch.compile(lambda x, start: fp4ops.linear(x[:, start:], w), fullgraph=True, dynamic=True)
    for rows, start in [(6, 2), (9, 4), (3, 0)]:
        x = fp4ops.quantize_nvfp4(torch.randn(2, rows, 128, device=device))
        assert_exact(compiled(x, start), fp4ops.linear(x, w)[:, start:])


@pytest.mark.parametrize("device", DEVICES)
def test_stochastic_rounding_without_a_seed_draws_outside_the_graph(device):
    """seed=None draws a seed from torch's generator on the host: a compiled function breaks its
    graph there and draws afresh every call; under fullgraph the refusal says to give a seed
    (before, the drawn int reached the op as a symbolic value its schema refused)."""
    x = torch.randn(8, 64, device=device)

    def fn(t):
        return fp4ops.quantize_nvfp4(t, stochastic_rounding=True).data

    torch._dynamo.reset()
    compiled = torch.compile(fn, dynamic=True)
    assert (compiled(x) != compiled(x)).any()
    torch._dynamo.reset()
    with pytest.raises(Exception, match="draws its seed on the host|_draw_seed"):
        torch.compile(fn, fullgraph=True, dynamic=True)(x)
    torch._dynamo.reset()
    seeded = torch.compile(lambda t: fp4ops.quantize_nvfp4(t, stochastic_rounding=True, seed=7).data, fullgraph=True,
                           dynamic=True)
    assert_same_bytes(seeded(x), fp4ops.quantize_nvfp4(x, stochastic_rounding=True, seed=7).data)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="mode='reduce-overhead' runs CUDA graphs: needs a GPU")
@pytest.mark.parametrize("fn", ALL_FUNCTIONS)
def test_reduce_overhead_mode_matches_eager(fn):
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):  # warm-up, record, replay
        x = torch.randn(4, 8, 64, dtype=torch.bfloat16, device="cuda") * 5
        got = [t.clone() for t in compiled(x)]
        assert_outputs_match(got, fn(x), fn.__name__)
