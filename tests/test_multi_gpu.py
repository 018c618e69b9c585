"""Several GPUs: every op on cuda:1 while cuda:0 is current (the kernels must follow their
tensors' device, not the current one), and both GPUs working at once on their own streams."""

from __future__ import annotations

import pytest
import torch
from every_op import assert_same_bits, every_op, exact_on_cpu

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


def test_every_op_on_cuda1_while_cuda0_is_current():
    x = torch.distributions.StudentT(3.0).sample((256, 1024))
    on_cpu = every_op(x)
    on_cuda0 = every_op(x.to("cuda:0"))
    with torch.cuda.device(0):
        x1 = x.to("cuda:1")
        allocated_on_0 = torch.cuda.memory_allocated(0)
        on_cuda1 = every_op(x1)
        torch.cuda.synchronize(1)
        assert torch.cuda.current_device() == 0
        assert torch.cuda.memory_allocated(0) == allocated_on_0, "an op allocated on cuda:0"
    for name, got in on_cuda1.items():
        assert got.device == torch.device("cuda:1"), name
        assert_same_bits(got, on_cuda0[name], f"{name}: cuda:1 vs cuda:0")
        if exact_on_cpu(name):
            assert_same_bits(got, on_cpu[name], f"{name}: cuda:1 vs cpu")


def test_two_gpus_at_once_on_their_own_streams():
    devices = ["cuda:0", "cuda:1"]
    xs = {d: torch.randn(2048, 4096, device=d) * (i + 1) for i, d in enumerate(devices)}
    expected = {d: every_op(x) for d, x in xs.items()}
    for d in devices:
        torch.cuda.synchronize(d)
    results = {d: [] for d in devices}
    streams = {d: torch.cuda.Stream(device=d) for d in devices}
    for _ in range(3):  # enqueue on both GPUs before waiting on either, so their work overlaps
        for d in devices:
            with torch.cuda.device(d):
                streams[d].wait_stream(torch.cuda.current_stream(d))
                with torch.cuda.stream(streams[d]):
                    results[d].append(every_op(xs[d]))
    for d in devices:
        torch.cuda.synchronize(d)
    for d in devices:
        for run in results[d]:
            for name, got in run.items():
                assert got.device == torch.device(d)
                assert_same_bits(got, expected[d][name], f"{name} on {d}")
