"""Write the peer-checkpoint fixtures: a tiny Llama quantized by the real llm-compressor and the real
NVIDIA ModelOpt, saved as those tools save it, with what the tool itself says the weights decode
to and the logits of the tool's own quantized model (tests/test_peer_checkpoints.py reads them).

Each tool runs in its own virtual environment (their pins conflict with each other and with the
test extras), never with fp4ops imported:

    python3 -m venv lc && lc/bin/pip install llmcompressor==0.14.0.1
        # brings torch 2.14.0, transformers 5.17.0, compressed-tensors 0.19.0
    lc/bin/python tools/make_peer_checkpoints.py llmcompressor

    python3 -m venv mo && mo/bin/pip install "nvidia-modelopt[hf]==0.47.0" torch==2.15.0
        # brings transformers 5.14.1
    mo/bin/python tools/make_peer_checkpoints.py modelopt             # on the CPU
    mo/bin/python tools/make_peer_checkpoints.py modelopt --device cuda --schemes nvfp4

On a GPU machine with no network but a CUDA PyTorch (2.11 was tried, on the CPU: the same bits),
transformers, accelerate, numpy, scipy, rich, regex, requests and tqdm installed, these wheels
(pure Python but pydantic-core, cp312; 36 MB) are enough, put in a folder WHEELS:
nvidia_modelopt-0.47.0, transformers-5.14.1, tokenizers-0.22.2 (transformers 5.14 wants <= 0.23.0),
pulp-3.3.2 (16 MB), omegaconf-2.4.0, antlr4_python3_runtime-4.13.2, pydantic-2.13.4,
pydantic_core-2.46.4, annotated_types-0.7.0, typing_inspection-0.4.2, setuptools-84.2.1:

    python3 -m pip install --no-index --find-links WHEELS nvidia-modelopt==0.47.0 transformers==5.14.1 tokenizers==0.22.2
    python3 tools/make_peer_checkpoints.py modelopt --device cuda --schemes nvfp4 --out OUT

Fixtures, under tests/fixtures/ (--out): llmcompressor_{nvfp4a16,nvfp4,mxfp4a16,mxfp4} and
modelopt_{nvfp4a16,nvfp4}. Each directory holds the files the tool wrote (config.json with its
quantization_config, generation_config.json, model.safetensors, and recipe.yaml or
hf_quant_config.json), untouched; next to it, NAME.reference.safetensors (outside the directory,
so that no loader takes it for a shard): `<module>.weight` for every quantized linear, the weight
the tool decodes (bf16); `tokens` (int64 [2, 8]) and, where the tool's quantized model ran,
`logits` (its bf16 output on those tokens); from a CUDA run of ModelOpt's W4A4 scheme also
`probe.x` / `probe.x_quantized`, one layer's activation before and after ModelOpt's input
quantizer. The reference's metadata names the tool, the versions, the scheme, the device and how
each piece was obtained.

The model: LlamaForCausalLM, hidden 64, intermediate 128, 2 layers, 4 heads, 2 KV heads, vocabulary
256, untied embeddings, bf16, every dimension a multiple of 32 (MXFP4's block). Its weights come
from a seeded generator here, not from transformers' initializer, so both environments start from
the same bits: linears N(0, 1/in) times a per-tensor factor in [0.5, 2) (so the global scales
differ), embeddings N(0, 1), norms 1 + N(0, 0.1^2). Calibration (W4A4 only): 8 random sequences
of 16 tokens.

llm-compressor: `oneshot(model, recipe=QuantizationModifier(targets="Linear", scheme=S,
ignore=["lm_head"]))` with S in NVFP4A16, NVFP4 (W4A4, with the calibration set), MXFP4A16,
MXFP4 (W4A4, dynamic activation scales), then `save_pretrained(dir, save_compressed=True)`. The
reference weights are compressed-tensors' own decompressor (the registry's compressor for the
format, `decompress`, on the saved tensors); the script checks that they equal the fake-quantized
weight the quantized model used in its forward (`forward_quantize`), bit for bit, and fails if not.
The logits are the quantized model's (fake quantization, activations included for W4A4).

ModelOpt: `mtq.quantize(model, CFG, forward_loop)` with CFG W4A16_NVFP4_CFG (weight-only, no
forward loop) or NVFP4_DEFAULT_CFG (W4A4, the calibration set), then
`export_hf_checkpoint(model, export_dir=dir)`. Export gives the fused q/k/v and gate/up weights
one amax; the tool's quantized model for the reference is a second `mtq.quantize` of the same base
with every quantizer's amax copied from the exported one. On the CPU, ModelOpt's NVFP4 fake
quantization refuses to run ("amax must be a CUDA tensor for dynamic block quantization": it needs
its CUDA extension or Triton), so there the reference model is the real-quantized one
(`mtq.compress`), whose weights are NVFP4QTensor.dequantize of the same codes and scales (the
script checks they equal the exported tensors); W4A16 logits come from it, and W4A4 logits need
`--device cuda` (its activations are fake-quantized on the fly). On CUDA the reference weights are
the fake-quantized weights (`weight_quantizer(weight)`) and the logits the fake-quantized model's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile

import torch

VOCAB, HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS = 256, 64, 128, 2, 4, 2
TOOLS = {
    "llmcompressor": {"nvfp4a16": "NVFP4A16", "nvfp4": "NVFP4", "mxfp4a16": "MXFP4A16", "mxfp4": "MXFP4"},
    "modelopt": {"nvfp4a16": "W4A16_NVFP4_CFG", "nvfp4": "NVFP4_DEFAULT_CFG"},
}
W4A4 = ("nvfp4", "mxfp4")
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")


def base_model(path: str):
    """The tiny Llama, saved to `path` (the tools load a model from a directory); returns its config."""
    import transformers

    config = transformers.LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
                                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                                      tie_word_embeddings=False, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in sorted(model.named_parameters()):
            noise = torch.randn(parameter.shape, generator=generator)
            if "norm" in name:
                value = 1.0 + 0.1 * noise
            elif "embed_tokens" in name:
                value = noise
            else:
                factor = 0.5 + 1.5 * torch.rand((), generator=generator)
                value = noise * factor / parameter.shape[-1] ** 0.5
            parameter.copy_(value)
    model.to(torch.bfloat16).save_pretrained(path)
    return config


def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))


def calibration_ids() -> list[list[int]]:
    generator = torch.Generator().manual_seed(3)
    return [torch.randint(0, VOCAB, (16,), generator=generator).tolist() for _ in range(8)]


def versions(*names: str) -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers", "safetensors", *names)}


def write_reference(directory: str, weights: dict, logits, metadata: dict, extra: dict | None = None) -> None:
    from safetensors.torch import save_file

    tensors = {f"{name}.weight": w.detach().to("cpu", torch.bfloat16).contiguous() for name, w in weights.items()}
    tensors.update({name: t.detach().to("cpu").contiguous() for name, t in (extra or {}).items()})
    tensors["tokens"] = tokens()
    if logits is not None:
        tensors["logits"] = logits.detach().to("cpu").contiguous()
    save_file(tensors, directory.rstrip(os.sep) + ".reference.safetensors",
              metadata={key: value if isinstance(value, str) else json.dumps(value) for key, value in metadata.items()})


def fresh(path: str) -> str:
    if os.path.exists(path):
        shutil.rmtree(path)
    return path


def llmcompressor(out: str, schemes, base: str) -> None:
    import transformers
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.quantization.lifecycle.forward import forward_quantize
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from safetensors.torch import load_file
    from tokenizers import Tokenizer, models, pre_tokenizers

    for scheme in schemes:
        preset = TOOLS["llmcompressor"][scheme]
        model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
        recipe = QuantizationModifier(targets="Linear", scheme=preset, ignore=["lm_head"])
        if preset == "NVFP4":
            # Static activation global scales need calibration data; a dataset needs a processor:
            # a word-level tokenizer over the model's vocabulary (the ids are given, never tokenized).
            tokenizer = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
            tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
            processor = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0", pad_token="t0")
            dataset = Dataset.from_dict({"input_ids": calibration_ids()})
            oneshot(model=model, recipe=recipe, processor=processor, dataset=dataset, num_calibration_samples=8,
                    max_seq_length=16)
        else:
            oneshot(model=model, recipe=recipe)
        fake_quantized = {name: forward_quantize(module, module.weight.data, "weight",
                                                 module.quantization_scheme.weights).clone()
                          for name, module in model.named_modules()
                          if getattr(module, "quantization_scheme", None) is not None}
        with torch.no_grad():
            logits = model(tokens()).logits
        directory = fresh(os.path.join(out, f"llmcompressor_{scheme}"))
        model.save_pretrained(directory, save_compressed=True)

        # compressed-tensors' own decompressor on the saved tensors, with the saved config's scheme.
        config = json.load(open(os.path.join(directory, "config.json")))["quantization_config"]
        group = QuantizationConfig.model_validate(config).config_groups["group_0"]
        compressor = BaseCompressor.load_from_registry(config["format"])
        stored = load_file(os.path.join(directory, "model.safetensors"))
        decompressed = {}
        for name, weight in fake_quantized.items():
            local = {key[len(name) + 1:]: value for key, value in stored.items() if key.startswith(name + ".")}
            decompressed[name] = compressor.decompress(local, group)["weight"]
            if not torch.equal(decompressed[name].view(torch.int16), weight.view(torch.int16)):
                raise SystemExit(f"{scheme}: {name}: the decompressed weight is not the fake-quantized one")
        write_reference(directory, decompressed, logits, {
            "tool": "llmcompressor", "scheme": preset, "versions": versions("llmcompressor", "compressed-tensors"),
            "weights": f"compressed-tensors {config['format']} decompress of the saved tensors "
                       "(equal to the quantized model's fake-quantized weights, checked)",
            "logits": "the oneshot-quantized model on tokens (fake quantization"
                      + (", activations included)" if scheme in W4A4 else ", weights only)"),
            "device": "cpu"})
        print(f"{directory}: {len(decompressed)} quantized linears")


def modelopt(out: str, schemes, base: str, device: str) -> None:
    import modelopt.torch.quantization as mtq
    import transformers
    from modelopt.torch.export import export_hf_checkpoint
    from modelopt.torch.quantization.nn import TensorQuantizer
    from safetensors.torch import load_file

    calibration = torch.tensor(calibration_ids())

    def forward_loop(model):
        with torch.no_grad():
            for row in calibration.to(device):
                model(row[None])

    for scheme in schemes:
        cfg = getattr(mtq, TOOLS["modelopt"][scheme])
        loop = forward_loop if scheme in W4A4 else None  # weight-only calibration reads the weights alone
        model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16).to(device)
        model = mtq.quantize(model, cfg, loop)
        directory = fresh(os.path.join(out, f"modelopt_{scheme}"))
        export_hf_checkpoint(model, export_dir=directory)
        amax = {name: q.amax for name, q in model.named_modules() if isinstance(q, TensorQuantizer) and q.amax is not None}

        # The tool's quantized model as exported: the same quantization, with export's amax.
        replica = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16).to(device)
        replica = mtq.quantize(replica, cfg, loop)
        for name, q in replica.named_modules():
            if name in amax:
                q.amax = amax[name]
        if device == "cpu":
            mtq.compress(replica)
        stored = load_file(os.path.join(directory, "model.safetensors"))
        weights = {}
        for name, module in replica.named_modules():
            if not hasattr(module, "weight_quantizer") or not module.weight_quantizer.is_enabled:
                continue
            with torch.no_grad(), module.quantize_weight():
                weights[name] = module.weight.detach().clone()  # dequantized (CPU) or fake-quantized (CUDA)
            if device == "cpu":
                q = module._parameters["weight"].get_qtensor()
                same = (torch.equal(q._quantized_data.cpu(), stored[f"{name}.weight"])
                        and torch.equal(module.weight_quantizer._scale.cpu().view(torch.uint8),
                                        stored[f"{name}.weight_scale"].view(torch.uint8))
                        and torch.equal(module.weight_quantizer._double_scale.cpu().reshape(()),
                                        stored[f"{name}.weight_scale_2"].reshape(())))
                if not same:
                    raise SystemExit(f"{scheme}: {name}: the real-quantized weight is not the exported one")
        extra, notes = {}, {}
        if device != "cpu":
            notes["fake_quant_vs_export"] = compare_with_export(weights, stored)
            if scheme in W4A4:
                # One layer's activation before and after ModelOpt's input quantizer, so that its
                # activation quantization can be compared with another implementation's offline.
                probe = "model.layers.0.self_attn.q_proj"
                replica.get_submodule(probe).input_quantizer.register_forward_hook(
                    lambda module, inputs, output: extra.update({"probe.x": inputs[0], "probe.x_quantized": output}))
                notes["probe"] = f"{probe}.input_quantizer on tokens"
        logits = None
        if device != "cpu" or scheme not in W4A4:
            with torch.no_grad():
                logits = replica(tokens().to(device)).logits
        how = ("NVFP4QTensor.dequantize of the real-quantized model (mtq.compress), whose codes and scales "
               "equal the exported ones (checked)" if device == "cpu" else
               "weight_quantizer(weight): the fake-quantized weight the quantized model uses")
        write_reference(directory, weights, logits, {
            "tool": "modelopt", "scheme": TOOLS["modelopt"][scheme], "versions": versions("nvidia-modelopt"),
            "weights": how,
            "logits": ("none: ModelOpt's NVFP4 activation fake quantization needs CUDA" if logits is None else
                       "the quantized model on tokens (" + ("real-quantized weights" if device == "cpu"
                                                            else "fake quantization") + ")"),
            "device": device, **notes}, extra)
        print(f"{directory}: {len(weights)} quantized linears, logits {'yes' if logits is not None else 'no'}",
              *(f"{key}: {value}" for key, value in notes.items()), sep="\n  ")


def compare_with_export(weights: dict, stored: dict) -> str:
    """How the fake-quantized weights (CUDA) differ from ModelOpt's own decode of the exported
    tensors (NVFP4QTensor.dequantize, what the CPU reference holds): a count of differing
    elements, and how many of them differ only in the sign of a zero."""
    from modelopt.torch.quantization.qtensor import NVFP4QTensor

    differing = zero_signs = total = 0
    for name, weight in weights.items():
        packed = stored[f"{name}.weight"]
        shape = (packed.shape[0], packed.shape[1] * 2)
        decoded = NVFP4QTensor(shape, torch.bfloat16, packed).dequantize(
            torch.bfloat16, scale=stored[f"{name}.weight_scale"], double_scale=stored[f"{name}.weight_scale_2"],
            block_sizes={-1: 16})
        fake = weight.detach().cpu().to(torch.bfloat16)
        unequal = fake.view(torch.int16) != decoded.view(torch.int16)
        differing += int(unequal.sum())
        zero_signs += int((unequal & (fake == 0) & (decoded == 0)).sum())
        total += fake.numel()
    return f"{differing} of {total} elements differ from NVFP4QTensor.dequantize, {zero_signs} of them only in the sign of zero"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tool", choices=sorted(TOOLS))
    parser.add_argument("--out", default=DEFAULT_OUT, help="fixture root (default: tests/fixtures)")
    parser.add_argument("--schemes", nargs="*", default=None, help="default: all of the tool's")
    parser.add_argument("--device", default="cpu", help="ModelOpt only: cpu or cuda")
    args = parser.parse_args()
    schemes = args.schemes or list(TOOLS[args.tool])
    unknown = set(schemes) - set(TOOLS[args.tool])
    if unknown:
        parser.error(f"schemes: {args.tool} has {', '.join(TOOLS[args.tool])}, not {', '.join(sorted(unknown))}")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as base:
        base_model(base)
        if args.tool == "llmcompressor":
            llmcompressor(os.path.abspath(args.out), schemes, base)
        else:
            modelopt(os.path.abspath(args.out), schemes, base, args.device)


if __name__ == "__main__":
    main()
