"""fp4ops.nn.FP4Linear: a model with its Linear layers swapped to FP4 stays within the
quantization error of the original, forwards through fp4ops.linear, round-trips through
state_dict, compiles without graph breaks and replays in a CUDA graph."""

from __future__ import annotations


import pytest
import torch
from conftest import HAS_CUDA, requires_caching_allocator, same_bits
from torch import nn

import fp4ops
from fp4ops import reference
from fp4ops.nn import FP4Linear, replace_linears

DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


def mlp(device: str) -> nn.Module:
    """A transformer-like MLP block with a head: up, GELU, down, lm_head."""
    model = nn.Sequential()
    model.add_module("up", nn.Linear(128, 512))
    model.add_module("act", nn.GELU())
    model.add_module("down", nn.Linear(512, 128))
    model.add_module("lm_head", nn.Linear(128, 96))
    return model.to(device=device, dtype=torch.bfloat16)


def relative_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_swapped_mlp_stays_within_quantization_error(device, fmt):
    model = mlp(device)
    x = torch.randn(6, 128, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = model(x)
        quantized = mlp(device)
        quantized.load_state_dict(model.state_dict())
        assert replace_linears(quantized, fmt) == ["up", "down"]  # lm_head skipped by default
        assert isinstance(quantized.up, FP4Linear) and isinstance(quantized.lm_head, nn.Linear)
        batch = quantized(x)
        rows = torch.cat([quantized(x[i : i + 1]) for i in range(x.shape[0])])  # one row per call
    # 4-bit weights: ~20 dB (NVFP4) / ~16 dB (MXFP4) on Gaussian weights, i.e. 10-16% relative error.
    assert 0.02 < relative_error(batch, ref) < 0.3
    # One row per call and the whole batch compute the same product (lm_head stays torch's Linear,
    # whose result may depend on the row count).
    assert relative_error(rows, batch) < 2e-2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 64, 200])
def test_forward_is_fp4ops_linear(device, fmt, dtype, rows):
    """fp16/bf16 inputs of any row count go through fp4ops.linear (bias inside, in x's dtype):
    the same bits, within SPEC 5's bound of the float64 product (the bias one more term); with
    batch_invariant set too."""
    fp4 = FP4Linear.from_linear(nn.Linear(256, 40, bias=True).to(device=device, dtype=dtype), fmt)
    x = torch.randn(rows, 1, 256, device=device, dtype=dtype)
    w = fp4.quantized_weight()
    with torch.no_grad():
        y = fp4(x)
        assert y.shape == (rows, 1, 40) and y.dtype == dtype
        assert torch.equal(y, fp4ops.linear(x, w, fp4.bias, out_dtype=dtype))
        fp4.batch_invariant = True
        assert torch.equal(fp4(x), fp4ops.linear(x, w, fp4.bias, out_dtype=dtype, batch_invariant=True))
    bias = fp4.bias.detach().cpu()
    x_cpu = x.cpu().reshape(rows, 256)
    w_cpu = w.to("cpu")
    ref = reference.linear_float64(x_cpu, w_cpu, bias)
    # Past 64 rows the CUDA op dequantizes for cuBLAS, rounding the operands to x's dtype first.
    rounded_to = dtype if device == "cuda" and rows > 64 else None
    bound = reference.linear_error_bound(x_cpu, w_cpu, bias, dtype, rounded_to)
    assert ((y.cpu().reshape(rows, 40).double() - ref).abs() <= bound).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("shape", [(256,), (0, 256), (3, 256), (2, 0, 256), (2, 3, 256)])
@pytest.mark.parametrize("bias", [False, True])
def test_forward_matches_fp4ops_linear_for_every_shape(device, fmt, shape, bias):
    """forward calls the op without fp4ops.linear's checks of W: the same bits and shape for x
    of one, two or three dimensions, with no rows, and non-contiguous."""
    fp4 = FP4Linear.from_linear(nn.Linear(256, 24, bias=bias).to(device=device, dtype=torch.bfloat16), fmt)
    w = fp4.quantized_weight()
    x = torch.randn(*shape, device=device, dtype=torch.bfloat16)
    strided = torch.randn(*shape[:-1], 2 * shape[-1], device=device, dtype=torch.bfloat16)[..., ::2]
    with torch.no_grad():
        for xi in (x, strided):
            y = fp4(xi)
            assert y.shape == (*shape[:-1], 24) and y.dtype == torch.bfloat16
            assert torch.equal(y, fp4ops.linear(xi, w, fp4.bias, out_dtype=torch.bfloat16))


@pytest.mark.parametrize(
    "change, exception, message",
    [
        (lambda layer: layer.bias.requires_grad_(), RuntimeError, "bias: requires grad, but fp4ops.linear has no backward"),
        (lambda layer: setattr(layer, "weight_scale", layer.weight_scale[:, :2].clone()), RuntimeError,
         "w_scales: expected shape [8, 4] (linear layout)"),
        (lambda layer: setattr(layer, "weight", layer.weight.float()), RuntimeError, "w_data: expected uint8"),
    ],
)
def test_forward_refuses_a_changed_layer_by_name(change, exception, message):
    """A layer whose bias was set to require grad, or whose buffers were replaced by tensors of
    other shapes or dtypes, fails with an error that names the argument (the op checks W again)."""
    layer = FP4Linear(64, 8)
    change(layer)
    with pytest.raises(exception) as info:
        layer(torch.randn(2, 64, dtype=torch.bfloat16))
    assert message in str(info.value)


def test_forward_refuses_an_input_that_requires_grad():
    layer = FP4Linear(64, 8)
    x = torch.randn(2, 64, dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(RuntimeError, match="x: requires grad, but fp4ops.linear has no backward"):
        layer(x)
    with torch.no_grad():
        assert layer(x).shape == (2, 8)


@pytest.mark.parametrize("device", DEVICES)
def test_float32_input_stays_float32(device):
    """fp4ops.linear takes fp16/bf16 activations; an fp32 x gets the fp32 dequantized weight and
    torch.nn.functional.linear, in fp32."""
    fp4 = FP4Linear.from_linear(nn.Linear(64, 24).to(device), "mxfp4")
    x = torch.randn(5, 64, device=device)
    with torch.no_grad():
        y = fp4(x)
        expected = nn.functional.linear(x, fp4.quantized_weight().dequantize(torch.float32), fp4.bias)
    assert y.dtype == torch.float32 and torch.equal(y, expected)


def test_batch_invariant_is_a_constructor_argument_and_an_attribute():
    layer = FP4Linear(64, 8, batch_invariant=True)
    assert layer.batch_invariant and "batch_invariant=True" in repr(layer)
    layer.batch_invariant = False
    assert "batch_invariant=False" in repr(layer)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_state_dict_round_trip(device, fmt):
    linear = nn.Linear(64, 32).to(device=device, dtype=torch.bfloat16)
    fp4 = FP4Linear.from_linear(linear, fmt)
    state = fp4.state_dict()
    expected_keys = {"weight", "weight_scale", "bias"} | ({"weight_scale_2"} if fmt == "nvfp4" else set())
    assert set(state) == expected_keys
    assert state["weight"].dtype == torch.uint8 and state["weight"].shape == (32, 32)
    fresh = FP4Linear(64, 32, format=fmt, device=device)
    fresh.load_state_dict(state)
    x = torch.randn(3, 64, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(fresh(x), fp4(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("convert", [lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.float(),
                                     lambda m: m.double(), lambda m: m.to(m.weight.device, torch.float16)],
                         ids=["to bf16", "half", "float", "double", "to device and dtype"])
def test_dtype_conversion_keeps_the_codes_and_converts_the_bias(device, fmt, convert):
    """Module.to(dtype) and .half() convert every floating-point buffer, float8 included: the
    layer keeps its codes, scales and global scale bit for bit, and only the bias converts."""
    layer = FP4Linear.from_linear(nn.Linear(64, 32).to(device), fmt)
    before = {name: buffer.clone() for name, buffer in layer.named_buffers()}
    converted = convert(layer)
    target = next(b.dtype for b in convert(nn.Linear(1, 1, device=device)).parameters())
    assert converted is layer and layer.bias.dtype == target and layer.bias.device == before["weight"].device
    for name, buffer in layer.named_buffers():
        assert buffer.dtype == before[name].dtype and same_bits(buffer, before[name]), name
    if target != torch.float64:
        x = torch.randn(3, 64, device=device, dtype=target)
        with torch.no_grad():
            expected = nn.functional.linear(x.float(), layer.quantized_weight().dequantize(torch.float32),
                                            layer.bias.float())
            torch.testing.assert_close(layer(x).float(), expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("stored_as", ["uint8", "float4_e2m1fn_x2"])
def test_state_dict_codes_stored_as_bytes_load_as_codes(fmt, stored_as):
    """Scale codes saved as their bytes (compressed-tensors stores E8M0 so) and packed elements as
    float4_e2m1fn_x2 are the same codes: viewed, not cast by value as load_state_dict would."""
    fp4 = FP4Linear.from_linear(nn.Linear(64, 32), fmt)
    state = fp4.state_dict()
    if stored_as == "uint8":
        state["weight_scale"] = state["weight_scale"].view(torch.uint8).clone()
    else:
        state["weight"] = state["weight"].clone().view(torch.float4_e2m1fn_x2)
    fresh = FP4Linear(64, 32, format=fmt)
    fresh.load_state_dict(state)
    for name, buffer in fp4.named_buffers():
        assert same_bits(getattr(fresh, name), buffer), name


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_state_dict_scales_of_another_dtype_are_refused_by_name(fmt):
    state = FP4Linear.from_linear(nn.Linear(64, 32), fmt).state_dict()
    state["weight_scale"] = state["weight_scale"].float()
    with pytest.raises(RuntimeError, match="weight_scale: expected torch.float8_e.* got torch.float32"):
        FP4Linear(64, 32, format=fmt).load_state_dict(state)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_swizzled_weights_load_as_linear_scales(fmt):
    w = torch.randn(24, 64)
    q = fp4ops.quantize_nvfp4(w) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(w)
    layer = FP4Linear(64, 24, format=fmt)
    layer.load_quantized_weight(q.with_scale_layout("swizzled"))
    assert torch.equal(layer.weight_scale.view(torch.uint8), q.scales.view(torch.uint8))
    assert torch.equal(layer.weight, q.data)


@pytest.mark.parametrize("assign", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_global_scale_loads_widened_to_float32(dtype, assign):
    """A global scale saved in 16 bits widens exactly, also with assign=True (meta-device
    loading), which keeps the state dict's tensor instead of copying into the buffer."""
    fp4 = FP4Linear.from_linear(nn.Linear(64, 32), "nvfp4")
    state = fp4.state_dict()
    state["weight_scale_2"] = torch.tensor(0.75).to(dtype)
    fresh = FP4Linear(64, 32, format="nvfp4")
    fresh.load_state_dict(state, assign=assign)
    assert fresh.weight_scale_2.dtype == torch.float32 and fresh.weight_scale_2.item() == 0.75
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    assert fresh(x).shape == (3, 32)


def test_load_quantized_weight_takes_a_float_global_scale_and_refuses_meta_buffers():
    q = fp4ops.quantize_nvfp4(torch.randn(32, 64))
    as_float = fp4ops.NVFP4Tensor(q.data, q.scales, q.global_scale.item())
    layer = FP4Linear(64, 32, format="nvfp4")
    layer.load_quantized_weight(as_float)
    assert same_bits(layer.weight_scale_2, q.global_scale.reshape(()))
    with torch.device("meta"):
        on_meta = FP4Linear(64, 32, format="nvfp4")
    with pytest.raises(ValueError, match="q: this layer's buffers are on the meta device"):
        on_meta.load_quantized_weight(q)


@pytest.mark.parametrize("bias_in_checkpoint", [True, False])
def test_replace_linears_from_a_checkpoint_on_a_meta_model_holds_the_codes(tmp_path, bias_in_checkpoint):
    """A model built on the meta device (no memory for dense weights) takes its FP4 layers on the
    checkpoint's device, holding its codes; a bias the checkpoint lacks cannot come from meta."""
    def model():
        m = nn.Sequential()
        m.add_module("up", nn.Linear(64, 96))
        m.add_module("down", nn.Linear(96, 32))
        return m.to(torch.bfloat16)
    source = model()
    replace_linears(source, "nvfp4", skip=())
    state = source.state_dict()
    if not bias_in_checkpoint:
        del state["down.bias"]
    with torch.device("meta"):
        target = model()
    if not bias_in_checkpoint:
        with pytest.raises(ValueError, match="down.bias is missing and the module's bias is on the meta device"):
            replace_linears(target, checkpoint=state_as_checkpoint(state))
        return
    assert replace_linears(target, checkpoint=state_as_checkpoint(state)) == ["up", "down"]
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        assert same_bits(target(x), source(x))


def state_as_checkpoint(state: dict) -> dict:
    """An FP4Linear model's state dict as fp4ops.checkpoint.load returns a checkpoint: each
    layer's weight an NVFP4Tensor, its bias a tensor."""
    out = {}
    for key, value in state.items():
        if key.endswith(".weight"):
            layer = key[: -len(".weight")]
            out[key] = fp4ops.NVFP4Tensor(value, state[f"{layer}.weight_scale"], state[f"{layer}.weight_scale_2"])
        elif key.endswith(".bias"):
            out[key] = value
    return out


def test_a_string_skip_is_one_pattern():
    model = nn.Sequential()
    model.add_module("q_proj", nn.Linear(64, 64))
    model.add_module("lm_head", nn.Linear(64, 16))
    assert replace_linears(model, "nvfp4", skip="lm_head") == ["q_proj"]
    assert isinstance(model.lm_head, nn.Linear)


@pytest.mark.parametrize("device", DEVICES)
def test_fullgraph_compile(device):
    model = mlp(device)
    replace_linears(model, "nvfp4")
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    with torch.no_grad():
        for rows in (1, 5):
            x = torch.randn(rows, 128, device=device, dtype=torch.bfloat16)
            torch.testing.assert_close(compiled(x), model(x), rtol=2e-2, atol=2e-2)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@requires_caching_allocator
def test_cuda_graph_replay():
    model = mlp("cuda")
    replace_linears(model, "mxfp4")
    x = torch.randn(1, 128, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        model(x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = model(x)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, model(x))


@pytest.mark.skipif(not HAS_CUDA, reason="mode='reduce-overhead' runs CUDA graphs: needs a GPU")
@requires_caching_allocator
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_reduce_overhead_compile_matches_eager(fmt):
    """torch.compile's CUDA-graph mode, the README's advice for decoding: the same bits as eager
    calls (the op is opaque to the compiler), through warm-up, recording and replays."""
    torch._dynamo.reset()
    model = nn.Sequential(*(FP4Linear.from_linear(nn.Linear(k, n).to("cuda", torch.bfloat16), fmt)
                            for k, n in ((128, 512), (512, 128))))
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for rows in (1, 1, 1, 1, 5, 5, 5, 5):
            x = torch.randn(rows, 128, device="cuda", dtype=torch.bfloat16)
            assert torch.equal(compiled(x).clone(), model(x))


@pytest.mark.parametrize(
    "call, exception, message",
    [
        (lambda: FP4Linear(64, 8, format="fp8"), ValueError, "format: expected 'nvfp4' or 'mxfp4', got 'fp8'"),
        (lambda: FP4Linear(48, 8, format="mxfp4"), ValueError, "in_features: expected a multiple of 32"),
        (lambda: FP4Linear.from_linear(nn.Conv1d(4, 4, 1)), TypeError, "linear: expected torch.nn.Linear"),
        (lambda: FP4Linear(64, 8)(torch.randn(2, 32)), ValueError, "x: expected the last dimension to be 64, got 32"),
        (lambda: FP4Linear(64, 8)(torch.randn(2, 64, dtype=torch.float64)), TypeError,
         "x: expected float32, float16 or bfloat16, got torch.float64"),
        (lambda: FP4Linear(64, 8).load_quantized_weight(fp4ops.quantize_mxfp4(torch.randn(8, 64))), TypeError,
         "q: expected NVFP4Tensor for format 'nvfp4'"),
        (lambda: FP4Linear(64, 8).load_quantized_weight(fp4ops.quantize_nvfp4(torch.randn(4, 64))), ValueError,
         "q: expected shape (8, 64), got (4, 64)"),
        (lambda: FP4Linear(64, -8), ValueError, "out_features: expected an int >= 0, got -8"),
        (lambda: FP4Linear(-16, 8), ValueError, "in_features: expected an int >= 0, got -16"),
        (lambda: FP4Linear.from_linear(nn.Linear(64, 8), "nvfp4", scale_rule="rceil"), ValueError,
         "scale_rule: 'rceil' is an MXFP4 rule"),
        (lambda: FP4Linear.from_linear(nn.Linear(64, 8), "mxfp4", scale_rule="ceil"), ValueError,
         "scale_rule: expected 'floor' or 'rceil', got 'ceil'"),
        (lambda: replace_linears(nn.Linear(64, 8), "mxfp4", scale_rule="ceil"), ValueError,
         "scale_rule: expected 'floor' or 'rceil', got 'ceil'"),
        (lambda: replace_linears(nn.Linear(64, 8), skip=3), TypeError, "skip: expected a string or an iterable"),
        (lambda: FP4Linear(64, 8, batch_invariant=1), TypeError, "batch_invariant: expected a bool, got int"),
        (lambda: setattr(FP4Linear(64, 8), "batch_invariant", "yes"), TypeError, "batch_invariant: expected a bool"),
        (lambda: FP4Linear(64, 8, batch_invariant=True)(torch.randn(2, 64)), ValueError,
         "x: batch_invariant=True takes float16 or bfloat16 x"),
        (lambda: FP4Linear(64, 8).load_quantized_weight(
            fp4ops.NVFP4Tensor(torch.zeros(8, 32, dtype=torch.uint8), torch.zeros(8, 1, dtype=torch.float8_e4m3fn),
                               torch.ones(()))), ValueError, "q.scales: expected shape (8, 4)"),
        (lambda: replace_linears("model"), TypeError, "module: expected a torch.nn.Module, got str"),
        (lambda: replace_linears(nn.Linear(64, 8), checkpoint=123), TypeError, "checkpoint: expected a path or the dict"),
        (lambda: replace_linears(nn.Linear(64, 8), checkpoint="/no/such/checkpoint"), ValueError,
         "checkpoint: no such file or directory"),
        (lambda: replace_linears(nn.Sequential(nn.Linear(64, 8)), checkpoint={
            "0.weight": fp4ops.quantize_nvfp4(torch.randn(8, 64)), "0.bias": torch.tensor([5.0])}), ValueError,
         "checkpoint: 0.bias expected shape (8,), got (1,)"),
        (lambda: replace_linears(nn.Sequential(nn.Linear(64, 8)), checkpoint={
            "0.weight": fp4ops.quantize_nvfp4(torch.randn(8, 64)), "0.bias": torch.zeros(8, dtype=torch.int64)}),
         TypeError, "checkpoint: 0.bias expected a float16, bfloat16 or float32 tensor, got torch.int64"),
        (lambda: replace_linears(nn.Linear(64, 8), skip=["a", None]), TypeError, "skip: expected strings"),
    ],
)
def test_bad_arguments(call, exception, message):
    with pytest.raises(exception) as info:
        call()
    assert message in str(info.value)
