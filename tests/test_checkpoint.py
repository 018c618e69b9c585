"""The checkpoint quantizer (`python -m fp4ops quantize`) and its round-trip loader."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import fp4ops
from fp4ops.checkpoint import load_quantized, quantize_checkpoint


def small_checkpoint(path) -> dict:
    """A llama-shaped toy: embeddings, a norm, two MLP projections, an odd-sized weight, a bias and
    the LM head, with fresh random values."""
    tensors = {
        "model.embed_tokens.weight": torch.randn(100, 64, dtype=torch.bfloat16),
        "model.layers.0.input_layernorm.weight": torch.ones(64, dtype=torch.bfloat16),
        "model.layers.0.mlp.up_proj.weight": torch.randn(128, 64, dtype=torch.bfloat16),
        "model.layers.0.mlp.up_proj.bias": torch.randn(128, dtype=torch.bfloat16),
        "model.layers.0.mlp.down_proj.weight": torch.randn(64, 128, dtype=torch.float32),
        "model.layers.0.odd.weight": torch.randn(8, 24, dtype=torch.bfloat16),
        "lm_head.weight": torch.randn(100, 64, dtype=torch.bfloat16),
    }
    save_file(tensors, str(path), metadata={"source": "test"})
    return tensors


QUANTIZED = ["model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"]


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_quantizes_the_linear_weights_in_the_modelopt_layout(tmp_path, fmt):
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    original = small_checkpoint(src)
    reports = quantize_checkpoint(str(src), str(dst), fmt, device="cpu", progress=False)
    assert sorted(r.name for r in reports) == sorted(QUANTIZED)
    assert all(12 < r.sqnr_db < 25 for r in reports), [r.sqnr_db for r in reports]
    with safe_open(str(dst), framework="pt") as f:
        meta = f.metadata()
        assert meta["quantization_format"] == fmt and meta["source"] == "test"
        keys = set(f.keys())
        for name in QUANTIZED:
            prefix = name[: -len("weight")]
            assert f.get_tensor(name).dtype == torch.uint8
            assert f.get_tensor(prefix + "weight_scale").dtype == (torch.float8_e4m3fn if fmt == "nvfp4" else torch.float8_e8m0fnu)
            assert (prefix + "weight_scale_2" in keys) == (fmt == "nvfp4")
        for name, tensor in original.items():  # everything else copied bit for bit
            if name not in QUANTIZED:
                assert torch.equal(f.get_tensor(name), tensor)
    loaded = load_quantized(str(dst))
    assert set(loaded) == set(original)
    for name in QUANTIZED:
        q = loaded[name]
        assert isinstance(q, fp4ops.NVFP4Tensor if fmt == "nvfp4" else fp4ops.MXFP4Tensor)
        again = fp4ops.quantize_nvfp4(original[name]) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(original[name])
        assert torch.equal(q.data, again.data) and torch.equal(q.scales.view(torch.uint8), again.scales.view(torch.uint8))


def test_refuses_to_overwrite_its_input(tmp_path):
    src = tmp_path / "in.safetensors"
    small_checkpoint(src)
    before = src.read_bytes()
    with pytest.raises(ValueError, match="out: .* is the input checkpoint"):
        quantize_checkpoint(str(src), str(tmp_path / "." / "in.safetensors"), progress=False)
    assert src.read_bytes() == before


def test_a_quantized_checkpoint_passes_through_and_scale_names_never_collide(tmp_path):
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    small_checkpoint(src)
    quantize_checkpoint(str(src), str(dst), device="cpu", progress=False)
    # uint8 weights are not floating point: a second pass quantizes nothing.
    assert quantize_checkpoint(str(dst), str(tmp_path / "twice.safetensors"), device="cpu", progress=False) == []
    clash = tmp_path / "clash.safetensors"
    save_file({"w.weight": torch.randn(4, 32), "w.weight_scale": torch.ones(())}, str(clash))
    with pytest.raises(ValueError, match="'w.weight' already has a 'w.weight_scale'"):
        quantize_checkpoint(str(clash), str(tmp_path / "x.safetensors"), device="cpu", progress=False)


def test_command_line_prints_the_table_and_writes_the_histogram(tmp_path):
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    small_checkpoint(src)
    run = subprocess.run([sys.executable, "-m", "fp4ops", "quantize", str(src), str(dst), "--format", "mxfp4",
                          "--scale-rule", "rceil", "--device", "cpu", "--skip", "embed", "norm", "lm_head", "odd"],
                         capture_output=True, text=True, check=True)
    assert "SQNR dB" in run.stdout and "2 tensors quantized" in run.stdout
    assert (tmp_path / "out.safetensors.sqnr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "quantizing to mxfp4" in run.stderr  # the progress bar
