"""Checkpoints written by the real llm-compressor and the real NVIDIA ModelOpt, read by fp4ops.

tests/fixtures/<tool>_<scheme>/ holds what the tool wrote for a tiny random Llama (config.json,
model.safetensors, recipe.yaml or hf_quant_config.json), and <tool>_<scheme>.reference.safetensors
next to it what the tool itself says: every quantized weight as the tool decodes it (bf16) and the
logits of the tool's quantized model on a fixed token batch. tools/make_peer_checkpoints.py made
them and names the versions and commands (llm-compressor 0.14.0.1 with compressed-tensors 0.19.0;
nvidia-modelopt 0.47.0); none of those is needed here, only the fixtures, transformers and
compressed-tensors (test extras).

What is held:
- fp4ops.checkpoint.load folds every quantized linear into an NVFP4Tensor / MXFP4Tensor holding the
  stored codes and scales, passes every other tensor through as stored (activation scales included),
  and names the tensor when a weight's part is missing or of the wrong shape;
- fp4ops.dequantize(bf16) of each is the tool's own decode, bit for bit: compressed-tensors'
  decompressor, ModelOpt's NVFP4QTensor.dequantize. One documented difference: ModelOpt decodes the
  E2M1 code 0x8 (-0, SPEC 1) to +0, so there the sign of zero, and only there, differs;
- a transformers model holding those decoded weights in plain nn.Linear layers (for W4A4 with
  compressed-tensors' own activation quantizer in front) gives bit for bit the logits of the same
  model holding the tool's decoded weights, and the tool's stored logits within a few bf16 ulps (a
  CPU's bf16 rounding varies with its instruction set and library versions): the checkpoint as
  fp4ops reads it is the model the tool ran;
- replace_linears(model, checkpoint=fixture) swaps in FP4Linear modules with those codes and scales;
  each one, given the input the tool's layer saw, is within the sum of two SPEC 5.1 bounds of the
  tool's output (fp4ops.linear's own, and the dequantize-to-bf16 path's, which is what the tool
  computes); its logits are compared with the tool's, the bound in test_replace_linears_...;
- transformers reads the compressed-tensors fixtures on the CPU and reproduces the rebuilt model's
  logits bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
compressed_tensors = pytest.importorskip("compressed_tensors")
safetensors_torch = pytest.importorskip("safetensors.torch")

import fp4ops  # noqa: E402
from fp4ops import reference  # noqa: E402
from fp4ops.checkpoint import load  # noqa: E402
from fp4ops.nn import FP4Linear, replace_linears  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
# fixture: (format, layout, the stored activation scale's name or None)
PEERS = {
    "llmcompressor_nvfp4a16": ("nvfp4", "compressed-tensors", None),
    "llmcompressor_nvfp4": ("nvfp4", "compressed-tensors", "input_global_scale"),
    "llmcompressor_mxfp4a16": ("mxfp4", "compressed-tensors", None),
    "llmcompressor_mxfp4": ("mxfp4", "compressed-tensors", None),  # W4A4, activation scales dynamic
    "modelopt_nvfp4a16": ("nvfp4", "modelopt", None),
    "modelopt_nvfp4": ("nvfp4", "modelopt", "input_scale"),
}
# The tools' W4A4 schemes: their models quantize activations too.
W4A4 = {"llmcompressor_nvfp4", "llmcompressor_mxfp4", "modelopt_nvfp4"}
# ModelOpt fake-quantizes NVFP4 activations only with CUDA: its W4A4 fixture has no logits until
# tools/make_peer_checkpoints.py runs on a GPU (test_modelopt_w4a4_logits_wait_for_a_gpu).
WITH_LOGITS = [name for name in PEERS if name != "modelopt_nvfp4"]
COMPRESSED_TENSORS = [name for name, (_, layout, _) in PEERS.items() if layout == "compressed-tensors"]
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MODULES = sorted(f"model.layers.{i}.{'mlp' if n in ('gate_proj', 'up_proj', 'down_proj') else 'self_attn'}.{n}"
                 for i in range(2) for n in LINEARS)
SCALE_SUFFIXES = ("weight_packed", "weight_scale", "weight_global_scale", "weight_scale_2")


def bits(t: torch.Tensor) -> torch.Tensor:
    """t's bits as an integer tensor of its width, for exact comparisons (-0 != +0, NaN == NaN)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def stored(name: str) -> dict[str, torch.Tensor]:
    return safetensors_torch.load_file(str(FIXTURES / name / "model.safetensors"))


def tool_reference(name: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import safe_open

    path = str(FIXTURES / f"{name}.reference.safetensors")
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    return safetensors_torch.load_file(path), metadata


def codes(q) -> torch.Tensor:
    """The E2M1 codes of q, one per element (element 2i in the low nibble)."""
    return torch.stack([q.data & 0xF, q.data >> 4], dim=-1).reshape(q.shape)


def activation_quantizer(name: str, checkpoint: dict):
    """For a compressed-tensors W4A4 fixture, forward pre-hooks {module: hook} applying
    compressed-tensors' own activation fake quantization (the scheme from the fixture's config,
    the stored input_global_scale), as the tool's model does; {} otherwise."""
    if name not in W4A4 or PEERS[name][1] != "compressed-tensors":
        return {}
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp

    config = json.loads((FIXTURES / name / "config.json").read_text())["quantization_config"]
    args = QuantizationConfig.model_validate(config).config_groups["group_0"].input_activations

    def hook_for(global_scale):
        def hook(module, inputs):
            x = inputs[0]
            scale, zero_point = compute_dynamic_scales_and_zp(value=x, args=args, module=module, global_scale=global_scale)
            return (fake_quantize(x=x, scale=scale, zero_point=zero_point, args=args, global_scale=global_scale),)
        return hook

    return {module: hook_for(checkpoint.get(f"{module}.input_global_scale")) for module in MODULES}


def tiny_llama(name: str, checkpoint: dict):
    """A transformers model built from the fixture's config.json (bf16, as the tools load one, so
    that rotary and norm buffers keep their dtypes), with the checkpoint's dense tensors."""
    config = transformers.AutoConfig.from_pretrained(str(FIXTURES / name))
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    dense = {key: value for key, value in checkpoint.items() if not hasattr(value, "scales")}
    missing, unexpected = model.load_state_dict({k: v for k, v in dense.items() if k in model.state_dict()}, strict=False)
    assert sorted(missing) == [f"{m}.weight" for m in MODULES]
    assert not unexpected
    return model


def tools_model(name: str, checkpoint: dict, weights: dict | None = None):
    """The tool's quantized model rebuilt from what fp4ops read: plain nn.Linear layers holding
    fp4ops.dequantize(bf16) of each weight (or, given `weights`, those bf16 weights: the tool's own
    decode), behind the tool library's activation quantizer for compressed-tensors W4A4."""
    model = tiny_llama(name, checkpoint)
    with torch.no_grad():
        for module in MODULES:
            weight = (weights[f"{module}.weight"] if weights is not None
                      else checkpoint[f"{module}.weight"].dequantize(torch.bfloat16))
            model.get_submodule(module).weight.copy_(weight)
    for module, hook in activation_quantizer(name, checkpoint).items():
        model.get_submodule(module).register_forward_pre_hook(hook)
    return model


@pytest.mark.parametrize("name", list(PEERS))
def test_load_folds_every_quantized_linear_and_passes_the_rest_through(name):
    fmt, layout, _ = PEERS[name]
    raw, checkpoint = stored(name), load(str(FIXTURES / name))
    quantized = sorted(k for k, v in checkpoint.items() if isinstance(v, (fp4ops.NVFP4Tensor, fp4ops.MXFP4Tensor)))
    assert quantized == [f"{m}.weight" for m in MODULES]
    assert not [k for k in checkpoint if k.endswith(SCALE_SUFFIXES)]  # every scale tensor folded in
    for module in MODULES:
        q = checkpoint[f"{module}.weight"]
        assert isinstance(q, fp4ops.NVFP4Tensor if fmt == "nvfp4" else fp4ops.MXFP4Tensor)
        packed = raw[f"{module}.weight_packed" if layout == "compressed-tensors" else f"{module}.weight"]
        assert torch.equal(q.data, packed) and q.shape[-1] == 2 * packed.shape[-1]
        assert torch.equal(q.scales.view(torch.uint8), raw[f"{module}.weight_scale"].view(torch.uint8))
        if layout == "modelopt":
            # weight_scale_2 is the decode global scale itself, fp32 [].
            assert torch.equal(bits(q.global_scale.reshape(())), bits(raw[f"{module}.weight_scale_2"]))
        elif fmt == "nvfp4":
            # weight_global_scale is a reciprocal: the decode scale is 1/G or an fp32 neighbour (decisions #18).
            ratio = q.global_scale.double().reshape(()) * raw[f"{module}.weight_global_scale"].double().reshape(())
            assert abs(ratio.item() - 1.0) < 2.0**-21
    folded = {f"{m}.{s}" for m in MODULES for s in SCALE_SUFFIXES + ("weight",)}
    rest = sorted(k for k in raw if k not in folded)
    assert rest == sorted(k for k in checkpoint if k not in quantized)
    for key in rest:
        assert checkpoint[key].dtype == raw[key].dtype and torch.equal(bits(checkpoint[key]), bits(raw[key])), key


@pytest.mark.parametrize("name", list(PEERS))
def test_dequantize_is_the_tools_own_decode_bit_for_bit(name):
    """compressed-tensors: every bf16 bit equal. ModelOpt: equal except that its
    NVFP4QTensor.dequantize maps code 0x8 to +0 where SPEC 1 (and compressed-tensors) keep -0."""
    checkpoint = load(str(FIXTURES / name))
    decoded, metadata = tool_reference(name)
    negative_zeros = 0
    for module in MODULES:
        q = checkpoint[f"{module}.weight"]
        ours = fp4ops.dequantize(q, torch.bfloat16)
        theirs = decoded[f"{module}.weight"]
        assert theirs.dtype == torch.bfloat16 and theirs.shape == ours.shape
        if PEERS[name][1] == "modelopt":
            code_8 = codes(q) == 0x8
            negative_zeros += int(code_8.sum())
            assert bool(torch.signbit(ours[code_8]).all()) and not bool(torch.signbit(theirs[code_8]).any())
            ours = torch.where(code_8, torch.zeros((), dtype=ours.dtype), ours)
        assert torch.equal(bits(ours), bits(theirs)), module
    if PEERS[name][1] == "modelopt":
        assert negative_zeros > 0  # the exception above is not vacuous
    assert json.loads(metadata["versions"])[{"llmcompressor": "llmcompressor", "modelopt": "nvidia-modelopt"}[metadata["tool"]]]


@pytest.mark.parametrize("name", list(PEERS))
def test_activation_scales_are_kept_as_stored(name):
    activation = PEERS[name][2]
    raw, checkpoint = stored(name), load(str(FIXTURES / name))
    stored_scales = sorted(k for k in raw if k.split(".")[-1].startswith("input_"))
    if activation is None:
        assert stored_scales == []  # weight-only, or MXFP4's dynamic activation scales: nothing stored
        return
    assert stored_scales == [f"{m}.{activation}" for m in MODULES]
    for key in stored_scales:
        value = checkpoint[key]
        assert value.dtype == torch.float32 and value.shape == raw[key].shape and torch.equal(bits(value), bits(raw[key]))
        assert value.shape == ((1,) if activation == "input_global_scale" else ())
        assert float(value.reshape(())) > 0


@pytest.mark.parametrize("name,suffix,how", [("llmcompressor_nvfp4a16", "weight_global_scale", "drop"),
                                              ("modelopt_nvfp4a16", "weight_scale_2", "drop"),
                                              ("llmcompressor_mxfp4a16", "weight_scale", "drop"),
                                              ("llmcompressor_nvfp4", "weight_scale", "one column less"),
                                              ("modelopt_nvfp4", "weight_scale", "one row less")])
def test_a_tools_weight_with_a_part_missing_or_misshapen_is_an_error_naming_it(name, suffix, how):
    """A part of one random weight taken away: load names the tensor, where it would otherwise give
    a bare KeyError or fold scales that decode every element with the wrong scale."""
    from fp4ops.checkpoint import fold_quantized

    raw = stored(name)
    module = MODULES[int(torch.randint(len(MODULES), ()))]
    key = f"{module}.{suffix}"
    if how == "drop":
        del raw[key]
        expected = f"{key}: missing ("
    elif how == "one column less":
        raw[key] = raw[key][:, :-1]
        expected = f"{key}: expected shape "
    else:
        raw[key] = raw[key][:-1]
        expected = f"{key}: expected shape "
    with pytest.raises(ValueError) as error:
        fold_quantized(raw)
    assert str(error.value).startswith(expected), str(error.value)


def bf16_ulp(x: torch.Tensor) -> float:
    exponent = torch.floor(torch.log2(x.abs().max().double()))
    return float(torch.exp2(exponent) * torch.finfo(torch.bfloat16).eps)


def assert_near_the_stored_logits(name: str, logits: torch.Tensor, stored_logits: torch.Tensor) -> None:
    """The tool's logits were computed on the machine that made the fixture; a bf16 CPU model's
    rounding depends on the CPU's instruction set and the torch/transformers versions (measured on
    an AVX2 machine with torch 2.15 and transformers 5.24: up to 2.5 bf16 ulps of the largest logit
    from the same weights). So across machines the logits are held to 8 ulps, and exact equality
    is asserted only between models run here. NVFP4 W4A4 (llmcompressor_nvfp4) gets no elementwise
    bound: re-quantizing activations turns rounding-level differences into whole E2M1 steps."""
    assert logits.shape == stored_logits.shape and bool(torch.isfinite(logits).all())
    if name != "llmcompressor_nvfp4":
        difference = (logits.double() - stored_logits.double()).abs().max().item()
        assert difference <= 8 * bf16_ulp(stored_logits), difference


@pytest.mark.parametrize("name", WITH_LOGITS)
def test_the_weights_fp4ops_reads_rebuild_the_tools_model_exactly(name):
    """Same math, same result: nn.Linear layers holding fp4ops.dequantize(bf16) of what load read
    give, bit for bit (rtol = atol = 0), the logits of the same model holding the tool's own decoded
    weights, both run here; and the tool's stored logits within assert_near_the_stored_logits."""
    checkpoint = load(str(FIXTURES / name))
    ref, _ = tool_reference(name)
    with torch.no_grad():
        logits = tools_model(name, checkpoint)(ref["tokens"]).logits
        tools_logits = tools_model(name, checkpoint, weights=ref)(ref["tokens"]).logits
    assert logits.dtype == tools_logits.dtype and torch.equal(logits, tools_logits)
    assert_near_the_stored_logits(name, logits, ref["logits"])


@pytest.mark.parametrize("name", WITH_LOGITS)
def test_replace_linears_runs_the_tools_checkpoint(name):
    """replace_linears(model, checkpoint=DIR) on a model built from the fixture's config.

    Per layer (the input the tool's layer saw, taken from the exact rebuild): |FP4Linear(x) -
    tool(x)| <= fp4ops.linear's SPEC 5.1 bound + the same bound for the dequantize-to-bf16 path,
    which is what the tool computes (weights rounded to bf16 before the matmul: two more unit
    roundoffs per product). Both sit within their bound of the same fp64 product, so they sit
    within the sum of each other.

    Logits: max |FP4Linear model - tool| <= 8 bf16 ulps of the tool's largest logit, for the
    weight-only schemes and MXFP4 W4A4. Why 8: the models differ only in each linear's rounding
    (fp4ops.linear multiplies by the exact fp32 decode code * scale * g and rounds once; the tool
    rounds the decoded NVFP4 weight to bf16 first and accumulates in its own order), about one bf16
    ulp per linear output, carried through two layers; measured: 0 ulps for MXFP4 (its decode is
    exact in bf16), 3.4 for NVFP4. NVFP4 W4A4 (llmcompressor_nvfp4): no elementwise logit bound
    holds. Re-quantizing the activations to FP4 turns rounding-level differences into whole E2M1
    steps (a 2^-9 relative nudge of the embeddings moves the tool's own W4A4 logits by about 20%
    RMS), so that fixture is held by the per-layer bound, the exact rebuild and finite logits."""
    directory = str(FIXTURES / name)
    checkpoint = load(directory)
    ref, _ = tool_reference(name)

    tool = tools_model(name, checkpoint)
    seen = {}
    for module in MODULES:
        tool.get_submodule(module).register_forward_hook(
            lambda mod, inputs, output, module=module: seen.setdefault(module, []).append((inputs[0], output)))
    with torch.no_grad():
        tool(ref["tokens"])

    model = tiny_llama(name, checkpoint)
    swapped = replace_linears(model, checkpoint=directory)
    assert sorted(swapped) == MODULES
    assert isinstance(model.lm_head, torch.nn.Linear) and not isinstance(model.lm_head, FP4Linear)
    for module in MODULES:
        fp4, q = model.get_submodule(module), checkpoint[f"{module}.weight"]
        assert isinstance(fp4, FP4Linear) and fp4.format == PEERS[name][0]
        assert torch.equal(fp4.weight, q.data) and torch.equal(fp4.weight_scale.view(torch.uint8), q.scales.view(torch.uint8))
        for x, y_tool in seen[module]:
            with torch.no_grad():
                y = fp4(x)
            bound = (reference.linear_error_bound(x, q, None, torch.bfloat16)
                     + reference.linear_error_bound(x, q, None, torch.bfloat16, operands_rounded_to=torch.bfloat16))
            assert bool(((y.double() - y_tool.double()).abs() <= bound).all()), module

    for module, hook in activation_quantizer(name, checkpoint).items():
        model.get_submodule(module).register_forward_pre_hook(hook)
    with torch.no_grad():
        logits = model(ref["tokens"]).logits
    assert_near_the_stored_logits(name, logits, ref["logits"])


@pytest.mark.parametrize("name", COMPRESSED_TENSORS)
def test_transformers_reads_the_llmcompressor_fixtures_on_the_cpu(name):
    """transformers with compressed-tensors: the compressed model (activation quantization
    included) gives, bit for bit, the logits of the model rebuilt from fp4ops' decode (both run
    here; the tool's stored logits within assert_near_the_stored_logits), and its decompression
    gives the tool's weights, so fp4ops' decode too."""
    directory = str(FIXTURES / name)
    ref, _ = tool_reference(name)
    model, info = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16,
                                                                    output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        logits = model(ref["tokens"]).logits
        assert torch.equal(logits, tools_model(name, load(directory))(ref["tokens"]).logits)
    assert_near_the_stored_logits(name, logits, ref["logits"])

    decompressed = transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.bfloat16, quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    state, checkpoint = decompressed.state_dict(), load(directory)
    for module in MODULES:
        ours = fp4ops.dequantize(checkpoint[f"{module}.weight"], torch.bfloat16)
        assert torch.equal(bits(state[f"{module}.weight"]), bits(ref[f"{module}.weight"]))
        assert torch.equal(bits(state[f"{module}.weight"]), bits(ours))


def test_every_global_scale_llmcompressor_writes_for_bf16_weights_decodes_exactly():
    """compressed-tensors 0.19 computes weight_global_scale = 2688 / amax in the weight's dtype and
    stores it as fp32, so a bf16 model's G is a bf16 value (the fixtures' are). For every such G,
    across the exponents real weights give, fp4ops' decode scale makes fp4ops.dequantize equal
    compressed-tensors' decode for every E2M1 code and E4M3 scale (decisions #18): what the NVFP4
    fixtures show for 14 weights holds for any weight llm-compressor quantizes in bf16."""
    from fp4ops._checkpoint_layouts import _decodes_equal, decode_global_scale

    for name in ("llmcompressor_nvfp4a16", "llmcompressor_nvfp4"):
        for key, value in stored(name).items():
            if key.endswith(("weight_global_scale", "input_global_scale")):
                assert torch.equal(value.to(torch.bfloat16).float(), value), key
    mantissas = 1.0 + torch.arange(128, dtype=torch.float32) / 128
    for exponent in range(-2, 24):  # G from 1/4 (amax ~ 10^4) to 2^24 (amax ~ 10^-4)
        for reciprocal in mantissas * 2.0**exponent:
            assert _decodes_equal(decode_global_scale(reciprocal.reshape(1)), reciprocal), reciprocal.item()


def test_the_fixtures_carry_the_tools_own_configs():
    for name, (fmt, layout, activation) in PEERS.items():
        config = json.loads((FIXTURES / name / "config.json").read_text())["quantization_config"]
        if layout == "compressed-tensors":
            parsed = compressed_tensors.QuantizationConfig.model_validate(config)
            assert parsed.format == f"{fmt}-pack-quantized" and parsed.ignore == ["lm_head"]
            assert (parsed.config_groups["group_0"].input_activations is not None) == (name in W4A4)
            assert (FIXTURES / name / "recipe.yaml").is_file()
        else:
            hf_quant = json.loads((FIXTURES / name / "hf_quant_config.json").read_text())
            assert hf_quant["producer"] == {"name": "modelopt", "version": "0.47.0"}
            assert hf_quant["quantization"]["quant_algo"] == ("NVFP4" if name in W4A4 else "W4A16_NVFP4")
            assert config["quant_method"] == "modelopt" and "lm_head" in hf_quant["quantization"]["exclude_modules"]
        assert not list((FIXTURES / name).glob("tokenizer*"))
        assert (FIXTURES / name / "model.safetensors").stat().st_size < 200_000


def test_modelopt_w4a4_logits_wait_for_a_gpu():
    """ModelOpt 0.47 fake-quantizes NVFP4 activations only on CUDA ("amax must be a CUDA tensor for
    dynamic block quantization"), so the W4A4 fixture made on the CPU has the tool's weights but
    no logits. Regenerated on a GPU (tools/make_peer_checkpoints.py modelopt --device cuda) it gets
    them: then move it into WITH_LOGITS."""
    ref, metadata = tool_reference("modelopt_nvfp4")
    assert "logits" not in ref and metadata["device"] == "cpu"
    assert "needs CUDA" in metadata["logits"]
