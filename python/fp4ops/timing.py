"""Timing a call: CUDA events on the GPU, a host clock on the CPU. Shared by the main job and the
benchmark suite (benchmarks/suite, outside the package)."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

HOST_PAD_CYCLES = 100_000  # ~50 us of GPU clock cycles, longer than an op's host-side launch path


def timed_calls(fn: Callable[[], object], device: torch.device, repeats: int,
                before_each: Callable[[], object] | None = None) -> tuple[list[float], object]:
    """Times `repeats` calls of fn (no warm-up), each in microseconds; `before_each` (e.g. an L2
    flush) runs untimed. Returns the times and what the last call returned."""
    times, out = [], None
    for _ in range(repeats):
        if before_each is not None:
            before_each()
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # Keep the GPU busy while the host enqueues the call, so a host-side pause (Python,
            # another process) between the start event and the kernels is not timed.
            torch.cuda._sleep(HOST_PAD_CYCLES)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            out = fn()
            times.append((time.perf_counter() - t0) * 1e6)
    return times, out


def median_time_us(fn: Callable[[], object], device: torch.device, repeats: int = 30,
                   before_each: Callable[[], object] | None = None) -> float:
    """Warm up once, then the median of `repeats` timed calls."""
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return statistics.median(timed_calls(fn, device, repeats, before_each)[0])
