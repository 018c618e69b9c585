"""Runs the suite: builds one input at a time, times every case on it, checks the timed outputs and
writes the rows (JSON after every input, so an interrupted run keeps what it measured)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from .baselines import Baselines
from .cases import GEMV_SHAPES, PRODUCER_SHAPES, Case, suite_groups
from .harness import Timer, banner, banner_line, count_launches, measure_ceilings

FAMILIES = ("amax", "nvfp4 quantize", "mxfp4 quantize", "dequantize", "casts", "gemv", "nvfp4 recipe", "producers")


@dataclass
class SuiteConfig:
    device: torch.device
    sizes: list[int] = field(default_factory=lambda: [20, 22, 24, 26, 28])  # log2 of the element counts
    dtypes: list[torch.dtype] = field(default_factory=lambda: [torch.bfloat16, torch.float16, torch.float32])
    families: tuple[str, ...] = FAMILIES
    gemv_shapes: list[tuple[int, int, int]] = field(default_factory=lambda: list(GEMV_SHAPES))  # (M, K, L)
    producer_shapes: list[tuple[int, int]] = field(default_factory=lambda: list(PRODUCER_SHAPES))  # (rows, H)
    reps: int = 30
    baselines: Baselines = field(default_factory=Baselines)
    json_path: str | None = None


class CheckFailed(RuntimeError):
    """An fp4ops output differs from the reference: the run's numbers would mean nothing."""


def measure(case: Case, timer: Timer, ceilings: dict[str, float]) -> dict:
    row = {"family": case.family, "op": case.op, "impl": case.impl, "dtype": case.dtype, "shape": list(case.shape),
           "numel": case.numel, "bytes": case.bytes, "ceiling": case.ceiling}
    if case.fn is None:
        return {**row, "skip": case.skip or "not available"}
    ours = case.impl == "fp4ops"
    try:
        timing = timer.cold(case.fn)
        verdicts = [case.check(timing.output)] if case.check else []
        if case.graph:
            timer.graph(case.fn, timing)
            if timing.us_graph is not None and case.check:
                verdicts.append(case.check(timing.output))  # the graph's own output
        launches = count_launches(case.fn, timer.device) if case.launches else None
    except AssertionError as error:
        raise CheckFailed(f"{case.op}, {case.dtype} {case.shape}: fp4ops output differs from the reference: {error}")
    except Exception as error:  # a baseline that cannot run here (memory, compiler) loses its row only
        if ours:
            raise
        return {**row, "skip": f"failed: {type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}"}
    gbps = case.bytes / timing.us / 1e3
    return {**row, "us": timing.us, "us_min": timing.us_min, "us_p90": timing.us_p90, "us_graph": timing.us_graph, "graph_cold": case.graph_cold, "graph_note": timing.graph_note, "retries": timing.retries, "GBps": gbps,
            "pct": 100 * gbps / ceilings[case.ceiling], "launches": launches, "check": "; ".join(dict.fromkeys(verdicts))}


def run_suite(config: SuiteConfig) -> dict:
    timer = Timer(config.device, reps=config.reps)
    info, ceilings = banner(config.device), measure_ceilings(timer)
    print(banner_line(info, ceilings), flush=True)
    result = {"banner": info, "ceilings_GBps": ceilings, "rows": [],
              "config": {"sizes": config.sizes, "dtypes": [str(d).removeprefix("torch.") for d in config.dtypes],
                         "families": list(config.families), "gemv_shapes": config.gemv_shapes,
                         "producer_shapes": config.producer_shapes, "reps": config.reps}}
    groups = list(suite_groups(config.sizes, config.dtypes, set(config.families), config.device, config.baselines,
                               config.gemv_shapes, config.producer_shapes))
    # fp4ops' rows first, for every input, then the baselines' (each input built anew): the
    # baselines' large temporaries and compiler worker processes cannot disturb fp4ops' timings.
    passes = [("fp4ops", lambda c: c.impl == "fp4ops"), ("baselines", lambda c: c.impl != "fp4ops")]
    work = [(name, keep, build) for name, keep in passes for _, build in groups]
    for name, keep, build in tqdm(work, desc="benchmark", unit="input", dynamic_ncols=True):
        cases = [c for c in build() if c.family in config.families and keep(c)]
        for case in cases:
            try:
                result["rows"].append(measure(case, timer, ceilings))
            except CheckFailed:
                save(result, config.json_path)
                raise
        del cases
        if config.device.type == "cuda":
            torch.cuda.empty_cache()
        save(result, config.json_path)
    return result


def save(result: dict, path: str | None) -> None:
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
