"""Timing a call: CUDA events on the GPU, a host clock on the CPU. Shared by the main job and the
benchmark suite (fp4ops.bench)."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

HOST_PAD_CYCLES = 100_000  # ~50 us of GPU clock cycles, longer than an op's host-side launch path
# ~2 ms queued before the first call: the host's head start. Timed calls are all enqueued before
# any is waited on, so after it the GPU works through a backlog and a host-side pause (another
# process's CPU load) never leaves it idle inside a timed region. Synchronizing after each call, as
# this did before, let pauses of up to ~1 ms into the timings: one H100 suite run had a GEMV row at
# a median of 409 us against a minimum of 65 us, another an amax row at 54 us against 48 us.
HEAD_START_CYCLES = 4_000_000


def timed_calls(fn: Callable[[], object], device: torch.device, repeats: int,
                before_each: Callable[[], object] | None = None) -> tuple[list[float], object]:
    """Times `repeats` calls of fn (no warm-up), each in microseconds; `before_each` (e.g. an L2
    flush) runs untimed. Returns the times and what the last call returned."""
    times, out = [], None
    if device.type == "cuda":
        torch.cuda._sleep(HEAD_START_CYCLES)
        events = []
        for _ in range(repeats):
            if before_each is not None:
                before_each()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # Keep the GPU busy while the host enqueues the call (the backlog's last line of defence).
            torch.cuda._sleep(HOST_PAD_CYCLES)
            start.record()
            out = fn()
            end.record()
            events.append((start, end))
        events[-1][1].synchronize()
        times = [start.elapsed_time(end) * 1e3 for start, end in events]
    else:
        for _ in range(repeats):
            if before_each is not None:
                before_each()
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
