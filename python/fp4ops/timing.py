"""Median time of a call: CUDA events on the GPU, a host clock on the CPU. Shared by the main job
and the benchmarks."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def median_time_us(fn: Callable[[], object], device: torch.device, repeats: int = 30,
                   before_each: Callable[[], object] | None = None) -> float:
    """Warm up once, then time `repeats` calls; `before_each` (e.g. an L2 flush) runs untimed."""
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    times = []
    for _ in range(repeats):
        if before_each is not None:
            before_each()
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)
