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
from fp4ops.checkpoint import fold_quantized, load, load_quantized, quantize_checkpoint


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


def test_an_already_quantized_checkpoint_is_refused_and_scale_names_never_collide(tmp_path):
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    small_checkpoint(src)
    quantize_checkpoint(str(src), str(dst), device="cpu", progress=False)
    # Its uint8 weights would pass through under a second pass's label: refused before any work.
    already = r"src: .* is already quantized \('model.layers.0.mlp.\w+_proj.weight_packed' holds packed U8 codes\)"
    with pytest.raises(ValueError, match=already):
        quantize_checkpoint(str(dst), str(tmp_path / "twice.safetensors"), device="cpu", progress=False)
    assert not (tmp_path / "twice.safetensors").exists()
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
                                  "unknown device", "dst is src", "an MXFP4 rule for NVFP4", "meta device",
                                  "dst holds src", "truncated shard", "not a safetensors file", "shard missing",
                                  "index without weight_map", "index not JSON", "config not JSON"])
def test_bad_invocations_are_one_line_errors_before_any_work(tmp_path, case):
    src = tmp_path / "model"
    sharded_model_dir(src)
    dst = tmp_path / "out"
    args = [src, dst, "--device", "cpu"]
    shard, index = src / "model-00002-of-00002.safetensors", src / "model.safetensors.index.json"
    if case == "meta device":  # a valid torch device, but one that holds no values to quantize
        args[3], expected = "meta", "device: expected 'cpu' or a CUDA device such as 'cuda:1', got 'meta'"
    elif case == "dst holds src":  # --force would replace dst, and the input inside it with it
        (tmp_path / "outer").mkdir()
        args = [tmp_path / "outer" / "model", tmp_path / "outer", "--device", "cpu", "--force"]
        sharded_model_dir(args[0])
        expected = f"dst: {str(args[1])!r} holds the input {str(args[0])!r}; replacing it would delete the input"
    elif case == "truncated shard":
        shard.write_bytes(shard.read_bytes()[:-100])
        expected = f"src: {str(shard)!r} is not a readable .safetensors file (Error while deserializing header: "
    elif case == "not a safetensors file":
        args[0] = tmp_path / "garbage.safetensors"
        args[0].write_bytes(os.urandom(50))
        expected = f"src: {str(args[0])!r} is not a readable .safetensors file ("
    elif case == "shard missing":
        shard.unlink()
        expected = f"src: {str(shard)!r}, listed in {str(index)!r}, does not exist"
    elif case == "index without weight_map":
        index.write_text(json.dumps({"metadata": {"total_size": 0}}))
        expected = f"src: {str(index)!r} has no weight_map (tensor name: shard file name)"
    elif case == "index not JSON":
        index.write_text('{"weight_map": {')
        expected = f"src: {str(index)!r} is not valid JSON (Expecting "
    elif case == "config not JSON":
        (src / "config.json").write_text("architectures: [Llama]")
        expected = f"src: {str(src / 'config.json')!r} is not valid JSON ("
    elif case == "missing src":
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
    assert run.stderr.startswith("python -m fp4ops quantize: error: ")
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert "quantizing" not in run.stderr  # no work started
    assert not [p for p in tmp_path.rglob(".fp4ops-*")]  # nor a temporary folder left
    if case == "dst holds src":
        assert sorted(os.listdir(args[0])) == sorted(os.listdir(src))  # the input untouched
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


def bits(t: torch.Tensor) -> torch.Tensor:
    """t's bits as an integer tensor of its width, for exact comparisons (-0 != +0, NaN == NaN)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def other_schemes(rows: int = 64, cols: int = 256) -> dict[str, dict[str, torch.Tensor]]:
    """Quantized weights of other schemes, named as their tools name them, with fresh random
    values: compressed-tensors' INT4 W4A16 (codes packed into int32, bf16 scales per 128, the
    shape) with and without a zero point, ModelOpt's INT4-AWQ (uint8 codes, fp16 scales per 128),
    compressed-tensors' FP8 (float8 weight, fp32 per-channel scale), and FP4-sized uint8 codes
    whose scales are fp32 or bf16 (not FP4's E4M3 or E8M0)."""
    packed_int4 = torch.randint(-2**31, 2**31 - 1, (rows, cols // 8), dtype=torch.int32)
    return {
        "int4 w4a16": {"l.weight_packed": packed_int4, "l.weight_shape": torch.tensor([rows, cols]),
                       "l.weight_scale": torch.rand(rows, cols // 128, dtype=torch.bfloat16)},
        "int4 asymmetric": {"l.weight_packed": packed_int4, "l.weight_shape": torch.tensor([rows, cols]),
                            "l.weight_scale": torch.rand(rows, cols // 128, dtype=torch.bfloat16),
                            "l.weight_zero_point": torch.randint(0, 255, (rows // 8, cols // 128), dtype=torch.int32)},
        "modelopt int4 awq": {"l.weight": torch.randint(0, 256, (rows, cols // 2), dtype=torch.uint8),
                              "l.weight_scale": torch.rand(rows, cols // 128, dtype=torch.float16),
                              "l.pre_quant_scale": torch.rand(cols, dtype=torch.float16)},
        "fp8": {"l.weight": torch.randn(rows, cols).to(torch.float8_e4m3fn), "l.weight_scale": torch.rand(rows, 1)},
        "uint8 codes, fp32 scales": {"l.weight_packed": torch.randint(0, 256, (rows, cols // 2), dtype=torch.uint8),
                                     "l.weight_scale": torch.rand(rows, cols // 16)},
        "uint8 codes, bf16 scales": {"l.weight": torch.randint(0, 256, (rows, cols // 2), dtype=torch.uint8),
                                     "l.weight_scale": torch.rand(rows, cols // 32, dtype=torch.bfloat16)},
    }


@pytest.mark.parametrize("scheme", sorted(other_schemes()))
def test_load_keeps_other_schemes_quantized_weights_as_stored(tmp_path, scheme):
    """Only FP4 is folded: another scheme's codes and scales come back as stored, every tensor bit for
    bit, beside a dense bias and an FP4 weight that is folded."""
    stored = {**other_schemes()[scheme], "l.bias": torch.randn(64, dtype=torch.bfloat16)}
    q = fp4ops.quantize_nvfp4(torch.randn(32, 64))
    fp4 = {"f.weight_packed": q.data, "f.weight_scale": q.scales,
           "f.weight_global_scale": (1 / q.global_scale).reshape(1)}
    save_file({**stored, **fp4}, str(tmp_path / "mixed.safetensors"))
    loaded = load(str(tmp_path / "mixed.safetensors"))
    assert set(loaded) == set(stored) | {"f.weight"}
    for name, tensor in stored.items():
        assert type(loaded[name]) is torch.Tensor and loaded[name].dtype == tensor.dtype, name
        assert torch.equal(bits(loaded[name]), bits(tensor)), name
    assert isinstance(loaded["f.weight"], fp4ops.NVFP4Tensor) and torch.equal(loaded["f.weight"].data, q.data)


def fp4_entry(layout: str, fmt: str) -> dict[str, torch.Tensor]:
    """One freshly quantized random weight, `proj`, as the layout stores it."""
    from fp4ops._checkpoint_layouts import quantized_tensors

    x = torch.randn(32, 128)
    q = fp4ops.quantize_nvfp4(x) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(x)
    return quantized_tensors("proj.", q, layout)


# (layout, format, tensor changed, how, the error's start)
BROKEN_FP4 = [
    ("compressed-tensors", "nvfp4", "proj.weight_global_scale", "drop",
     "proj.weight_global_scale: missing (compressed-tensors NVFP4 needs the weight's global scale"),
    ("modelopt", "nvfp4", "proj.weight_scale_2", "drop",
     "proj.weight_scale_2: missing (ModelOpt NVFP4 needs the weight's global scale"),
    ("compressed-tensors", "nvfp4", "proj.weight_scale", "drop",
     "proj.weight_scale: missing (the compressed-tensors FP4 codes 'proj.weight_packed' need their block scales)"),
    ("compressed-tensors", "nvfp4", "proj.weight_scale", "half the columns",
     "proj.weight_scale: expected shape (32, 8), one NVFP4 scale per 16 elements of proj.weight_packed "
     "(shape (32, 64)), got (32, 4)"),
    ("modelopt", "nvfp4", "proj.weight_scale", "half the rows",
     "proj.weight_scale: expected shape (32, 8), one NVFP4 scale per 16 elements of proj.weight (shape (32, 64)), "
     "got (16, 8)"),
    ("compressed-tensors", "mxfp4", "proj.weight_scale", "half the columns",
     "proj.weight_scale: expected shape (32, 4), one MXFP4 scale per 32 elements of proj.weight_packed "
     "(shape (32, 64)), got (32, 2)"),
    ("compressed-tensors", "mxfp4", "proj.weight_packed", "an odd number of columns",
     "proj.weight_packed: shape (32, 63) holds K = 126 elements a row, not a multiple of MXFP4's block of 32"),
    ("compressed-tensors", "nvfp4", "proj.weight_global_scale", "two elements",
     "proj.weight_global_scale: expected NVFP4's global scale, one float32, float16 or bfloat16 element, "
     "got torch.float32 of shape (2,)"),
    ("modelopt", "nvfp4", "proj.weight_scale_2", "as int32",
     "proj.weight_scale_2: expected NVFP4's global scale, one float32, float16 or bfloat16 element, "
     "got torch.int32 of shape ()"),
]


@pytest.mark.parametrize("layout,fmt,name,how,message", BROKEN_FP4, ids=[f"{c[1]} {c[2]} {c[3]}" for c in BROKEN_FP4])
def test_an_fp4_weight_with_a_part_missing_or_misshapen_is_an_error_naming_the_tensor(tmp_path, layout, fmt, name,
                                                                                      how, message):
    stored = fp4_entry(layout, fmt)
    if how == "drop":
        del stored[name]
    elif how == "half the columns":
        stored[name] = stored[name][:, : stored[name].shape[1] // 2]
    elif how == "half the rows":
        stored[name] = stored[name][: stored[name].shape[0] // 2]
    elif how == "an odd number of columns":
        stored[name] = stored[name][:, :-1]
    elif how == "two elements":
        stored[name] = stored[name].repeat(2)
    else:
        stored[name] = stored[name].view(torch.int32)
    path = tmp_path / "broken.safetensors"
    save_file({key: value.contiguous() for key, value in stored.items()}, str(path))
    with pytest.raises(ValueError) as error:
        load(str(path))
    assert str(error.value).startswith(message), str(error.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_modelopt_global_scale_of_any_float_dtype_decodes_as_fp32(dtype):
    x = torch.randn(16, 64)
    g = (fp4ops.amax(x) / 2688).to(dtype).float()  # a value the dtype holds exactly
    q = fp4ops.quantize_nvfp4(x, g)
    loaded = fold_quantized({"p.weight": q.data, "p.weight_scale": q.scales, "p.weight_scale_2": g.to(dtype)})
    assert loaded["p.weight"].global_scale.dtype == torch.float32
    assert torch.equal(loaded["p.weight"].dequantize(torch.float32), q.dequantize(torch.float32))


def model_dir_with_head(path, tied: bool) -> dict:
    """sharded_model_dir's model with embeddings and, unless tied to them, an LM head of its own."""
    tensors = sharded_model_dir(path)
    extra = {"model.embed_tokens.weight": torch.randn(96, 64, dtype=torch.bfloat16)}
    if not tied:
        extra["lm_head.weight"] = torch.randn(96, 64, dtype=torch.bfloat16)
    save_file(extra, str(path / "head.safetensors"))
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["weight_map"].update(dict.fromkeys(extra, "head.safetensors"))
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return {**tensors, **extra}


ATTENTION = ["model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj"]
ROUTER = "model.layers.1.block_sparse_moe.gate"


@pytest.mark.parametrize("layout", ["compressed-tensors", "modelopt"])
@pytest.mark.parametrize("tied,skip,expected", [
    (False, ("embed", "norm", "lm_head"), ["lm_head", ROUTER]),
    (False, ("q_proj",), [*ATTENTION, ROUTER]),  # --skip replaces the defaults: lm_head is quantized
    (True, ("q_proj",), ["lm_head", *ATTENTION, ROUTER]),  # no lm_head.weight: tied to the dense embeddings
], ids=["lm_head skipped", "lm_head quantized", "lm_head tied"])
def test_the_configs_list_exactly_the_linears_left_dense(tmp_path, layout, tied, skip, expected):
    src, dst = tmp_path / "model", tmp_path / "out"
    model_dir_with_head(src, tied)
    reports = quantize_checkpoint(str(src), str(dst), "nvfp4", layout=layout, skip=skip, device="cpu", progress=False,
                                  log=lambda note: None)
    assert ("lm_head.weight" in {r.name for r in reports}) == ("lm_head" not in expected)
    quantization_config = json.loads((dst / "config.json").read_text())["quantization_config"]
    if layout == "modelopt":
        assert quantization_config["exclude_modules"] == expected
        assert json.loads((dst / "hf_quant_config.json").read_text())["quantization"]["exclude_modules"] == expected
    else:
        assert quantization_config["ignore"] == expected


def test_the_skip_option_says_it_replaces_the_default_patterns():
    run = run_cli("--help")
    assert run.returncode == 0
    text = " ".join(run.stdout.split())
    assert "the patterns given replace the default ones (['embed', 'norm', 'lm_head'])" in text, text


@pytest.mark.parametrize("layout,fmt", [("compressed-tensors", "nvfp4"), ("modelopt", "nvfp4"),
                                        ("compressed-tensors", "mxfp4")])
def test_requantizing_a_quantized_directory_is_refused_before_any_work(tmp_path, layout, fmt):
    src, once, twice = tmp_path / "model", tmp_path / "once", tmp_path / "twice"
    sharded_model_dir(src)
    quantize_checkpoint(str(src), str(once), fmt, layout=layout, device="cpu", progress=False, log=lambda note: None)
    for again in ([], ["--format", "mxfp4"], ["--layout", "modelopt"]):
        run = run_cli(once, twice, "--device", "cpu", *again)
        assert run.returncode == 2 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
        assert run.stderr.startswith(f"python -m fp4ops quantize: error: src: {str(once)!r} is already quantized ("), \
            run.stderr
        assert "quantizing to" not in run.stderr and not twice.exists()  # the progress bar never started


@pytest.mark.parametrize("how", ["int4 tensors", "a quantization_config", "hf_quant_config.json"])
def test_another_tools_quantized_checkpoint_is_refused(tmp_path, how):
    """Not FP4, or said so only by its configs: its config would be overwritten with ours all the same."""
    src = tmp_path / "model"
    sharded_model_dir(src)
    if how == "int4 tensors":
        save_file(other_schemes()["int4 w4a16"], str(src / "int4.safetensors"))
        index = json.loads((src / "model.safetensors.index.json").read_text())
        index["weight_map"].update(dict.fromkeys(other_schemes()["int4 w4a16"], "int4.safetensors"))
        (src / "model.safetensors.index.json").write_text(json.dumps(index))
        expected = "'l.weight_packed' holds packed I32 codes"
    elif how == "a quantization_config":
        config = json.loads((src / "config.json").read_text())
        (src / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": "gptq"}}))
        expected = "config.json has a quantization_config, quant_method 'gptq'"
    else:
        (src / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
        expected = "it has ModelOpt's hf_quant_config.json"
    with pytest.raises(ValueError) as error:
        quantize_checkpoint(str(src), str(tmp_path / "out"), device="cpu", progress=False)
    assert str(error.value) == (f"src: {str(src)!r} is already quantized ({expected}); "
                                "quantize the original weights instead")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("inside", ["q", "sub/q"])
def test_an_output_inside_its_input_holds_no_temporary_folder_and_no_copy_of_itself(tmp_path, inside):
    src = tmp_path / "model"
    sharded_model_dir(src)
    (src / "sub").mkdir()
    (src / "sub" / "notes.txt").write_text("kept")
    dst = src / inside
    expected = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    for force in (False, True):  # the second time dst exists inside src, and is replaced
        quantize_checkpoint(str(src), str(dst), device="cpu", progress=False, force=force)
        assert sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file()) == expected
        assert not list(tmp_path.rglob(".fp4ops-*"))
        assert (dst / "sub" / "notes.txt").read_text() == "kept"
