"""quantize_nvfp4(x, amax_group=group): shards share one global scale, the one the whole tensor
would get. Two processes over gloo on the CPU (runs in CI), and over NCCL on two GPUs."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import fp4ops

WORLD = 2


def _shard_worker(rank: int, backend: str, init_file: str, seed: int) -> None:
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        full = torch.randn(8, 64, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)
        full[5, 3] = 40.0  # the amax lives on rank 1's shard
        shard = full.chunk(WORLD)[rank].to(device=device, dtype=torch.bfloat16)
        q = fp4ops.quantize_nvfp4(shard, amax_group=dist.group.WORLD)
        whole = fp4ops.quantize_nvfp4(full.to(device=device, dtype=torch.bfloat16))
        assert torch.equal(q.global_scale, whole.global_scale), (q.global_scale, whole.global_scale)
        rows = slice(rank * 4, rank * 4 + 4)
        assert torch.equal(q.data, whole.data[rows])
        assert torch.equal(q.scales.view(torch.uint8), whole.scales[rows].view(torch.uint8))
    finally:
        dist.destroy_process_group()


def _run(backend: str, tmp_path, seed: int) -> None:
    mp.spawn(_shard_worker, args=(backend, str(tmp_path / "init"), seed), nprocs=WORLD, join=True)


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")
def test_gloo_shards_share_the_whole_tensors_global_scale(tmp_path, fresh_seed):
    _run("gloo", tmp_path, fresh_seed)


@pytest.mark.skipif(torch.cuda.device_count() < 2 or not dist.is_nccl_available(), reason="needs two GPUs and NCCL")
def test_nccl_shards_share_the_whole_tensors_global_scale(tmp_path, fresh_seed, monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast
    _run("nccl", tmp_path, fresh_seed)


def test_amax_group_excludes_global_scale():
    with pytest.raises(ValueError, match="amax_group: give either amax_group or global_scale"):
        fp4ops.quantize_nvfp4(torch.randn(2, 16), 1.0, amax_group=object())


def test_amax_group_needs_an_initialized_process_group():
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialized here")
    with pytest.raises(RuntimeError, match="amax_group: torch.distributed is not initialized"):
        fp4ops.quantize_nvfp4(torch.randn(2, 16), amax_group=object())
