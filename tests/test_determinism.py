"""Every op is bitwise reproducible: 20 runs on the same input give the same bytes, and so do 20
CUDA-graph replays (over alternating inputs, so a replay cannot pass by leaving stale outputs) and
the CPU kernels on one thread or several."""

from __future__ import annotations

import pytest
import torch
from conftest import HAS_CUDA, requires_caching_allocator, requires_cuda
from every_op import assert_same_bits, every_op

RUNS = 20


def heavy_tailed(device: str) -> torch.Tensor:
    return torch.distributions.StudentT(3.0).sample((256, 1024)).to(device)


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if HAS_CUDA else []))
def test_every_op_bitwise_identical_over_20_runs(device):
    x = heavy_tailed(device)
    first = every_op(x)
    for run in range(1, RUNS):
        again = every_op(x)
        for name, expected in first.items():
            assert_same_bits(again[name], expected, f"{name}, run {run + 1}")


def test_every_op_on_the_cpu_gives_the_same_bits_on_one_thread_and_on_several():
    """The CPU kernels split their work over torch's CPU threads (at::parallel_for): each thread
    writes its own outputs and the one cross-thread reduction (amax) is a max, so the bytes must
    not depend on the thread count."""
    x = heavy_tailed("cpu")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = every_op(x)
        torch.set_num_threads(max(threads, 4))
        several = every_op(x)
    finally:
        torch.set_num_threads(threads)
    for name, expected in single.items():
        assert_same_bits(several[name], expected, f"{name}, {max(threads, 4)} threads against 1")


@requires_cuda
@requires_caching_allocator
def test_every_op_bitwise_identical_over_20_graph_replays():
    inputs = [heavy_tailed("cuda"), heavy_tailed("cuda") * 1e-3]
    eager = [every_op(x) for x in inputs]
    static_x = inputs[0].clone()
    side = torch.cuda.Stream()  # warm up on a side stream, as capture wants
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        every_op(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = every_op(static_x)
    for replay in range(RUNS):
        which = replay % 2
        static_x.copy_(inputs[which])
        graph.replay()
        torch.cuda.synchronize()
        for name, expected in eager[which].items():
            assert_same_bits(captured[name], expected, f"{name}, replay {replay + 1}")
