"""The checkpoint quantizer (`python -m fp4ops quantize`) and its round-trip loader."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import fp4ops
from fp4ops._fused_groups import fused_groups, is_router
from fp4ops._checkpoint_layouts import compressed_tensors_global_scale, reciprocal_global_scale
from fp4ops.checkpoint import load, load_quantized, quantize_checkpoint


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


# The tensors each layout writes for a quantized weight of each format, after the module's prefix.
LAYOUT_TENSORS = {
    ("nvfp4", "modelopt"): {"weight": torch.uint8, "weight_scale": torch.float8_e4m3fn, "weight_scale_2": torch.float32},
    ("nvfp4", "compressed-tensors"): {"weight_packed": torch.uint8, "weight_scale": torch.float8_e4m3fn,
                                      "weight_global_scale": torch.float32},
    ("mxfp4", "compressed-tensors"): {"weight_packed": torch.uint8, "weight_scale": torch.uint8},
}


@pytest.mark.parametrize("fmt,layout", sorted(LAYOUT_TENSORS))
def test_quantizes_the_linear_weights_in_each_layout(tmp_path, fmt, layout):
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    original = small_checkpoint(src)
    reports = quantize_checkpoint(str(src), str(dst), fmt, layout=layout, device="cpu", progress=False)
    assert sorted(r.name for r in reports) == sorted(QUANTIZED)
    assert all(12 < r.sqnr_db < 25 for r in reports), [r.sqnr_db for r in reports]
    with safe_open(str(dst), framework="pt") as f:
        meta = f.metadata()
        assert meta["quantization_format"] == fmt and meta["source"] == "test" and meta["fp4ops_layout"] == layout
        quantized_keys = set()
        for name in QUANTIZED:
            prefix = name[: -len("weight")]
            for suffix, dtype in LAYOUT_TENSORS[fmt, layout].items():
                assert f.get_tensor(prefix + suffix).dtype == dtype, suffix
                quantized_keys.add(prefix + suffix)
        assert set(f.keys()) == quantized_keys | (set(original) - set(QUANTIZED))
        for name, tensor in original.items():  # everything else copied bit for bit
            if name not in QUANTIZED:
                assert torch.equal(f.get_tensor(name), tensor)
    loaded = load_quantized(str(dst))
    assert set(loaded) == set(original)
    for name in QUANTIZED:
        q = loaded[name]
        assert isinstance(q, fp4ops.NVFP4Tensor if fmt == "nvfp4" else fp4ops.MXFP4Tensor)
        if fmt == "mxfp4":
            again = fp4ops.quantize_mxfp4(original[name])
        else:
            g = fp4ops.amax(original[name]) / torch.tensor(2688.0)
            again = fp4ops.quantize_nvfp4(original[name], g if layout == "modelopt" else compressed_tensors_global_scale(g))
        assert torch.equal(q.data, again.data) and torch.equal(q.scales.view(torch.uint8), again.scales.view(torch.uint8))
        assert torch.equal(q.dequantize(torch.bfloat16), again.dequantize(torch.bfloat16))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_a_weight_the_block_does_not_divide_stays_dense_and_says_so_first(tmp_path, fmt):
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    original = small_checkpoint(src)
    events = []
    quantize_checkpoint(str(src), str(dst), fmt, device="cpu", progress=False, log=events.append)
    block = 16 if fmt == "nvfp4" else 32
    assert events[0] == (f"model.layers.0.odd.weight stays dense (input dimension 24 not a multiple of {block}); "
                         "the output lists it among the dense linears")
    assert "weights quantized on cpu" in events[-1] and len(events) == 2
    with safe_open(str(dst), framework="pt") as f:
        assert torch.equal(f.get_tensor("model.layers.0.odd.weight"), original["model.layers.0.odd.weight"])
        dense = json.loads(f.metadata()["fp4ops_dense_linears"])
        assert dense["model.layers.0.odd.weight"] == f"input dimension 24 not a multiple of {block}"


def test_refuses_to_overwrite_its_input(tmp_path):
    src = tmp_path / "in.safetensors"
    small_checkpoint(src)
    before = src.read_bytes()
    with pytest.raises(ValueError, match="dst: .* is the input checkpoint"):
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


def fused_checkpoint(path) -> dict:
    """One attention block, a dense MLP and a two-expert MoE, with members of each fused group
    on very different scales (the case a per-member global scale gets wrong once fused)."""
    tensors = {
        "model.layers.0.self_attn.q_proj.weight": torch.randn(64, 64, dtype=torch.bfloat16) * 4,
        "model.layers.0.self_attn.k_proj.weight": torch.randn(32, 64, dtype=torch.bfloat16),
        "model.layers.0.self_attn.v_proj.weight": torch.randn(32, 64, dtype=torch.bfloat16) / 64,
        "model.layers.0.mlp.gate_proj.weight": torch.randn(128, 64, dtype=torch.bfloat16),
        "model.layers.0.mlp.up_proj.weight": torch.randn(128, 64, dtype=torch.bfloat16) * 8,
        "model.layers.0.mlp.down_proj.weight": torch.randn(64, 128, dtype=torch.bfloat16),
        "model.layers.1.block_sparse_moe.gate.weight": torch.randn(2, 64, dtype=torch.bfloat16),
        "model.layers.1.block_sparse_moe.experts.0.w1.weight": torch.randn(96, 64, dtype=torch.bfloat16),
        "model.layers.1.block_sparse_moe.experts.0.w3.weight": torch.randn(96, 64, dtype=torch.bfloat16) * 3,
        "model.layers.1.block_sparse_moe.experts.0.w2.weight": torch.randn(64, 96, dtype=torch.bfloat16),
        "model.layers.1.block_sparse_moe.experts.1.w1.weight": torch.randn(96, 64, dtype=torch.bfloat16) / 5,
        "model.layers.1.block_sparse_moe.experts.1.w3.weight": torch.randn(96, 64, dtype=torch.bfloat16),
    }
    save_file(tensors, str(path))
    return tensors


GROUPS = [["model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
           "model.layers.0.self_attn.v_proj.weight"],
          ["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"],
          ["model.layers.1.block_sparse_moe.experts.0.w1.weight", "model.layers.1.block_sparse_moe.experts.0.w3.weight"],
          ["model.layers.1.block_sparse_moe.experts.1.w1.weight", "model.layers.1.block_sparse_moe.experts.1.w3.weight"]]


@pytest.mark.parametrize("layout", ["modelopt", "compressed-tensors"])
def test_fused_groups_share_one_global_scale_from_their_joint_amax(tmp_path, layout):
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    original = fused_checkpoint(src)
    quantize_checkpoint(str(src), str(dst), "nvfp4", layout=layout, device="cpu", progress=False)
    loaded = load_quantized(str(dst))
    with safe_open(str(dst), framework="pt") as f:
        stored = {name: f.get_tensor(name[: -len("weight")] + list(LAYOUT_TENSORS["nvfp4", layout])[2]) for name in original
                  if name[: -len("weight")] + list(LAYOUT_TENSORS["nvfp4", layout])[2] in f.keys()}

    def layout_global_scale(amax: torch.Tensor) -> torch.Tensor:
        """The decode scale the layout quantizes with for this amax. ModelOpt stores g itself;
        compressed-tensors a reciprocal whose decode matches g's (g moved up an ulp or two where g
        has no exact reciprocal)."""
        g = torch.where(amax == 0, torch.ones(()), amax / torch.tensor(2688.0))
        return g if layout == "modelopt" else compressed_tensors_global_scale(g)

    for group in GROUPS:
        g = layout_global_scale(max(fp4ops.amax(original[name]) for name in group))
        expected = g if layout == "modelopt" else reciprocal_global_scale(g)
        for name in group:
            q = loaded[name]
            assert torch.equal(stored[name].view(torch.int32), expected.view(torch.int32)), name
            again = fp4ops.quantize_nvfp4(original[name], g)
            assert torch.equal(q.data, again.data) and torch.equal(q.scales.view(torch.uint8), again.scales.view(torch.uint8))
    alone = "model.layers.0.mlp.down_proj.weight"  # in no group: its own amax (moved like a group's)
    own = fp4ops.quantize_nvfp4(original[alone], layout_global_scale(fp4ops.amax(original[alone])))
    assert torch.equal(loaded[alone].dequantize(), own.dequantize())
    # The one-expert-per-group rule: the two experts' pairs have different scales.
    assert not torch.equal(loaded[GROUPS[2][0]].global_scale, loaded[GROUPS[3][0]].global_scale)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_a_skip_pattern_never_splits_a_fused_group_and_routers_stay_dense(tmp_path, fmt):
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    original = fused_checkpoint(src)
    notes = []
    reports = quantize_checkpoint(str(src), str(dst), fmt, skip=("k_proj",), device="cpu", progress=False,
                                  log=notes.append)
    quantized = {r.name for r in reports}
    router = "model.layers.1.block_sparse_moe.gate.weight"
    assert not quantized & set(GROUPS[0]) and router not in quantized
    assert quantized == set(original) - set(GROUPS[0]) - {router}
    assert len(notes) == 2 and "k_proj.weight stays dense (--skip 'k_proj')" in notes[0] and "q_proj" in notes[0]
    assert notes[1].startswith(f"{len(reports)} weights quantized on cpu: read ") and " GB/s read)" in notes[1]
    with safe_open(str(dst), framework="pt") as f:
        dense = json.loads(f.metadata()["fp4ops_dense_linears"])
        for name in (*GROUPS[0], router):
            assert torch.equal(f.get_tensor(name), original[name])
    assert dense == {GROUPS[0][1]: "--skip 'k_proj'", router: "MoE router",
                     GROUPS[0][0]: f"fused with {GROUPS[0][1]} (--skip 'k_proj')",
                     GROUPS[0][2]: f"fused with {GROUPS[0][1]} (--skip 'k_proj')"}


def test_fused_groups_are_read_off_the_module_names():
    names = ["a.self_attn.q_proj.weight", "a.self_attn.k_proj.weight", "a.self_attn.v_proj.weight",
             "b.attention.self.query.weight", "b.attention.self.key.weight", "b.attention.self.value.weight",
             "c.mlp.gate_proj.weight", "c.mlp.up_proj.weight", "d.mlp.up_proj.weight",  # d: up alone
             "e.experts.0.w1.weight", "e.experts.0.w3.weight", "e.experts.1.w1.weight", "e.experts.1.w3.weight"]
    groups = fused_groups(names)
    by_key = {}
    for name, key in groups.items():
        by_key.setdefault(key, set()).add(name)
    assert sorted(map(sorted, by_key.values())) == sorted(map(sorted, [names[0:3], names[3:6], names[6:8], names[9:11], names[11:13]]))
    assert "d.mlp.up_proj.weight" not in groups
    assert is_router("m.layers.1.mlp.gate.weight") and is_router("m.moe.router.weight")
    assert not is_router("m.layers.1.mlp.gate_proj.weight")
    assert is_router("model.layers.0.mlp.shared_expert_gate.weight")
    assert not is_router("model.layers.0.mlp.shared_expert.gate_proj.weight")


def sharded_model_dir(path) -> dict:
    """A model directory as transformers saves one: config, tokenizer, two shards with an index;
    the q/k/v group straddles the shards."""
    path.mkdir()
    tensors = fused_checkpoint(path / "all.safetensors")
    (path / "all.safetensors").unlink()
    names = sorted(tensors)
    first = {n: tensors[n] for n in names if "self_attn.q_proj" in n or "self_attn.k_proj" in n or "layers.1" in n}
    second = {n: tensors[n] for n in names if n not in first}
    for shard, part in (("model-00001-of-00002.safetensors", first), ("model-00002-of-00002.safetensors", second)):
        save_file(part, str(path / shard), metadata={"format": "pt"})
    index = {"metadata": {"total_size": 0}, "weight_map": {n: ("model-00001-of-00002.safetensors" if n in first
                                                              else "model-00002-of-00002.safetensors") for n in names}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}))
    (path / "tokenizer.json").write_text('{"version": "1.0"}')
    return tensors


def test_a_sharded_model_directory_becomes_a_sharded_quantized_directory(tmp_path):
    src, dst = tmp_path / "model", tmp_path / "model-nvfp4"
    original = sharded_model_dir(src)
    old_mask = os.umask(0o022)
    try:
        reports = quantize_checkpoint(str(src), str(dst), "nvfp4", device="cpu", progress=False)
    finally:
        os.umask(old_mask)
    assert sorted(os.listdir(dst)) == sorted(os.listdir(src))
    assert (dst / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    config = json.loads((dst / "config.json").read_text())
    assert config.pop("quantization_config")["quant_method"] == "compressed-tensors"
    assert config == json.loads((src / "config.json").read_text())
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert index["metadata"]["total_size"] == sum((dst / s).stat().st_size for s in shards)
    held = {}
    for shard in shards:
        with safe_open(str(dst / shard), framework="pt") as f:
            held.update({name: shard for name in f.keys()})
    assert held == index["weight_map"]  # every tensor, scales included, where the index says
    assert {r.name for r in reports} == set(original) - {"model.layers.1.block_sparse_moe.gate.weight"}
    # The q/k/v group straddles the shards and still shares one global scale.
    merged = {}
    for shard in shards:
        merged.update(load_quantized(str(dst / shard)))
    scales = {merged[name].global_scale.item() for name in GROUPS[0]}
    assert len(scales) == 1
    assert stat.S_IMODE((dst / shards[0]).stat().st_mode) == 0o644 and stat.S_IMODE(dst.stat().st_mode) == 0o755
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".fp4ops-")]  # no temporary folder left


def test_a_failure_leaves_no_half_written_output(tmp_path):
    src, dst = tmp_path / "model", tmp_path / "out"
    sharded_model_dir(src)
    save_file({"x.weight": torch.randn(4, 32), "x.weight_scale": torch.ones(())}, str(src / "model-00002-of-00002.safetensors"))
    with pytest.raises(ValueError, match="already has a 'x.weight_scale'"):
        quantize_checkpoint(str(src), str(dst), device="cpu", progress=False)
    assert not dst.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".fp4ops-")]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "fp4ops", "quantize", *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("case", ["missing src", "dst not empty", "dst folder missing", "dst not writable",
                                  "cuda without a GPU", "mxfp4 in the modelopt layout", "unknown format",
                                  "unknown device", "dst is src", "an MXFP4 rule for NVFP4"])
def test_bad_invocations_are_one_line_errors_before_any_work(tmp_path, case):
    src = tmp_path / "model"
    sharded_model_dir(src)
    dst = tmp_path / "out"
    args = [src, dst, "--device", "cpu"]
    if case == "missing src":
        args[0], expected = tmp_path / "nothing", "src: no such file or directory"
    elif case == "dst not empty":
        dst.mkdir()
        (dst / "keep.txt").write_text("mine")
        expected = "exists and is not empty; pass --force"
    elif case == "dst folder missing":
        args[1], expected = tmp_path / "no" / "such" / "out", "does not exist"
    elif case == "dst not writable":  # /proc refuses new folders even to root, whom modes do not stop
        if not os.path.isdir("/proc/self"):
            pytest.skip("needs Linux's /proc")
        args[1], expected = "/proc/fp4ops-out", "dst: "
    elif case == "unknown format":
        args += ["--format", "nvfp8"]
        expected = "argument --format: invalid choice: 'nvfp8'"
    elif case == "unknown device":
        args[3], expected = "bogus", "device: expected a device such as 'cpu'"
    elif case == "dst is src":
        args[1], expected = src, "dst: "
    elif case == "an MXFP4 rule for NVFP4":
        args += ["--scale-rule", "rceil"]
        expected = "scale_rule: 'rceil' is an MXFP4 rule"
    elif case == "mxfp4 in the modelopt layout":
        args += ["--format", "mxfp4", "--layout", "modelopt"]
        expected = "layout: the ModelOpt layout holds NVFP4 only"
    else:
        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
        args[3], expected = "cuda", "no CUDA GPU is available"
    run = run_cli(*args)
    assert run.returncode == 2 and expected in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert "quantizing" not in run.stderr  # no work started
    if case == "dst not empty":
        assert os.listdir(dst) == ["keep.txt"]
        assert run_cli(src, dst, "--device", "cpu", "--force").returncode == 0
        assert "config.json" in os.listdir(dst) and "keep.txt" not in os.listdir(dst)


def test_the_modelopt_layout_writes_hf_quant_config_and_the_matching_quantization_config(tmp_path):
    src, dst = tmp_path / "model", tmp_path / "model-modelopt"
    sharded_model_dir(src)
    quantize_checkpoint(str(src), str(dst), "nvfp4", layout="modelopt", skip=("k_proj",), device="cpu",
                        progress=False, log=lambda note: None)
    hf_quant_config = json.loads((dst / "hf_quant_config.json").read_text())
    excluded = ["lm_head", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.q_proj",
                "model.layers.0.self_attn.v_proj", "model.layers.1.block_sparse_moe.gate"]
    assert hf_quant_config == {"producer": {"name": "fp4ops", "version": fp4ops.__version__},
                               "quantization": {"quant_algo": "W4A16_NVFP4", "group_size": 16,
                                                "exclude_modules": excluded}}
    config = json.loads((dst / "config.json").read_text())
    assert config["quantization_config"] == {"quant_method": "modelopt", **hf_quant_config["quantization"]}


def test_compressed_tensors_ignores_every_linear_left_dense(tmp_path):
    src, dst = tmp_path / "model", tmp_path / "model-mxfp4"
    sharded_model_dir(src)
    save_file({"model.layers.2.odd.weight": torch.randn(8, 24)}, str(src / "model-00002-of-00002.safetensors"))
    index = json.loads((src / "model.safetensors.index.json").read_text())
    index["weight_map"] = {n: s for n, s in index["weight_map"].items() if s.endswith("00001-of-00002.safetensors")}
    index["weight_map"]["model.layers.2.odd.weight"] = "model-00002-of-00002.safetensors"
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    quantize_checkpoint(str(src), str(dst), "mxfp4", device="cpu", progress=False)
    config = json.loads((dst / "config.json").read_text())["quantization_config"]
    assert config["format"] == "mxfp4-pack-quantized" and config["config_groups"]["group_0"]["weights"]["group_size"] == 32
    assert config["ignore"] == ["lm_head", "model.layers.1.block_sparse_moe.gate", "model.layers.2.odd"]
    assert not (dst / "hf_quant_config.json").exists()


@pytest.mark.parametrize("fmt,layout", sorted(LAYOUT_TENSORS))
def test_load_reads_a_quantized_model_directory_of_either_layout(tmp_path, fmt, layout):
    src, dst = tmp_path / "model", tmp_path / "model-fp4"
    original = sharded_model_dir(src)
    quantize_checkpoint(str(src), str(dst), fmt, layout=layout, device="cpu", progress=False)
    loaded = load(str(dst))
    assert set(loaded) == set(original)
    router = "model.layers.1.block_sparse_moe.gate.weight"
    assert torch.equal(loaded[router], original[router])
    for group in GROUPS:
        amaxes = torch.stack([fp4ops.amax(original[name]) for name in group])
        g = amaxes.amax() / torch.tensor(2688.0)
        g = g if layout == "modelopt" else compressed_tensors_global_scale(g)
        for name in group:
            again = fp4ops.quantize_nvfp4(original[name], g) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(original[name])
            q = loaded[name]
            assert type(q) is type(again)
            assert torch.equal(q.data, again.data) and torch.equal(q.scales.view(torch.uint8), again.scales.view(torch.uint8))
            assert torch.equal(q.dequantize(torch.bfloat16), again.dequantize(torch.bfloat16))
    assert load(str(dst / "model-00002-of-00002.safetensors")).keys() <= set(original)
