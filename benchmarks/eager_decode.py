"""Eager decode: FP4Linear as a model runs it without CUDA graphs (a plain PyTorch decode loop).

    python -m benchmarks.eager_decode                          # Llama-3.1-8B's linears, batch 1..64
    python -m benchmarks.eager_decode --rows 1 8 --formats nvfp4

A decode step calls the linears of all 32 Llama-3.1-8B layers (q, k, v, o, gate, up, down; distinct
random weights, each layer its own x, as in benchmarks/decode_stream.py) one by one from Python. Per
implementation (bf16 nn.Linear, FP4Linear in each format; modules called, as a model calls them) and
batch:
- `host`: the host's time to issue one step: from a synchronized start to the last call's return
  (the GPU runs behind it; a step issues fewer launches than the launch queue holds);
- `eager`: the wall time per step of steps issued back to back, then one synchronize: the larger of
  the host's time and the GPU's, what an eager model gets;
- `graph`: the step captured in one CUDA graph and replayed: the GPU's time alone.
`fp4_checked` is the same step through fp4ops.linear with each layer's NVFP4Tensor/MXFP4Tensor
view, every argument checked in Python: FP4Linear's path until it called the op itself (less the
module call's own cost). The per-call table splits one call's host time by layer of the call:
nn.Linear and F.linear (bf16); FP4Linear; fp4ops.linear; the registered op with its arguments
prepared (each call issued back to back, the median over rounds).

Writes eager_<tag>.json, eager_<tag>.md and eager_<tag>.png under --out. On the CPU it runs tiny
shapes with the host clock, to exercise the code only.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time

import torch
import torch.nn.functional as F

import fp4ops
from fp4ops.timing import timed_calls

from .decode_stream import (LLAMA_8B_LINEARS, add_run_arguments, captured_graph, file_tag, label_batches,
                            make_layers, run_device, save_figure)
from .suite.harness import banner, banner_line

LAYERS = 32
STEPS = 20  # steps back to back per eager timing
ROUNDS = 7  # timings per figure; the median is kept
CALLS = 200  # back-to-back calls per per-call timing: their launches stay within the launch queue
CPU_LINEARS = [("q", 128, 256), ("down", 256, 512)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_and_wall_us(steps: dict, device: torch.device, back_to_back: int) -> dict[str, tuple[float, float]]:
    """name -> (host us to issue one step from a synchronized start, wall us per step of
    `back_to_back` steps), medians over ROUNDS; the steps take turns within each round, so that a
    drift in the host's speed (shared machines) reaches every one alike."""
    host: dict[str, list[float]] = {name: [] for name in steps}
    wall: dict[str, list[float]] = {name: [] for name in steps}
    for step in steps.values():
        step()
    for _ in range(ROUNDS):
        for name, step in steps.items():
            _sync(device)
            t0 = time.perf_counter()
            step()
            host[name].append((time.perf_counter() - t0) * 1e6)
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(back_to_back):
                step()
            _sync(device)
            wall[name].append((time.perf_counter() - t0) * 1e6 / back_to_back)
    return {name: (statistics.median(host[name]), statistics.median(wall[name])) for name in steps}


def graph_us(step, device: torch.device) -> float | None:
    """GPU us per step in one CUDA graph, the median of ROUNDS replays (None on the CPU)."""
    if device.type != "cuda":
        return None
    graph = captured_graph(lambda _: step(), None, device)
    return statistics.median(timed_calls(graph.replay, device, ROUNDS)[0])


def as_module(weight: torch.Tensor) -> torch.nn.Linear:
    """A bias-free nn.Linear holding `weight` itself (no copy)."""
    module = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    module.weight = torch.nn.Parameter(weight, requires_grad=False)
    return module


def measure_stack(fmt: str, rows_list: list[int], device: torch.device, linears, layers: int) -> list[dict]:
    shapes = [(n, k) for _, n, k in linears]
    fp4_layers, dense = make_layers(shapes, layers, fmt, torch.bfloat16, device)
    dense_layers = [as_module(w) for w, _ in dense]  # what a model calls: the module, not F.linear
    out = []
    for rows in rows_list:
        xs = {k: torch.randn(rows, k, device=device, dtype=torch.bfloat16) for _, k in shapes}
        steps = {"bf16": lambda: [layer(xs[layer.in_features]) for layer in dense_layers],
                 "fp4": lambda: [layer(xs[layer.in_features]) for layer in fp4_layers],
                 "fp4_checked": lambda: [fp4ops.linear(xs[layer.in_features], layer.quantized_weight(), layer.bias,
                                                       out_dtype=torch.bfloat16) for layer in fp4_layers]}
        row = {"format": fmt, "rows": rows, "layers": layers}
        with torch.no_grad():
            timed = host_and_wall_us(steps, device, STEPS if device.type == "cuda" else 2)
            for name, step in steps.items():
                row[f"{name}_host_us"], row[f"{name}_eager_us"] = timed[name]
                row[f"{name}_graph_us"] = graph_us(step, device)
        for name in steps:
            row[f"{name}_eager_tokens_per_s"] = rows / row[f"{name}_eager_us"] * 1e6
            if row[f"{name}_graph_us"] is not None:
                row[f"{name}_graph_tokens_per_s"] = rows / row[f"{name}_graph_us"] * 1e6
        out.append(row)
        print(f"  {fmt} batch {rows:>3}: host us/step bf16 {row['bf16_host_us']:8.0f} fp4 {row['fp4_host_us']:8.0f} "
              f"checked {row['fp4_checked_host_us']:8.0f}; eager tokens/s bf16 {row['bf16_eager_tokens_per_s']:8.0f} "
              f"fp4 {row['fp4_eager_tokens_per_s']:8.0f} checked {row['fp4_checked_eager_tokens_per_s']:8.0f}"
              + (f"; graph fp4 {row['fp4_graph_tokens_per_s']:8.0f}" if "fp4_graph_tokens_per_s" in row else ""),
              flush=True)
    del fp4_layers, dense, dense_layers
    return out


def per_call_us(fn, device: torch.device) -> float:
    """Host us per call of CALLS calls issued back to back from a synchronized start (median)."""
    fn()
    times = []
    for _ in range(ROUNDS):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        times.append((time.perf_counter() - t0) * 1e6 / CALLS)
    _sync(device)
    return statistics.median(times)


def measure_calls(fmt: str, n: int, k: int, device: torch.device) -> dict:
    """Host us per call at each layer of the call stack, one row of x."""
    linear = torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
    layer = fp4ops.nn.FP4Linear.from_linear(linear, fmt)
    w = layer.quantized_weight()
    x = torch.randn(1, k, device=device, dtype=torch.bfloat16)
    g = w.global_scale if fmt == "nvfp4" else None
    calls = {"nn.Linear (bf16)": lambda: linear(x),
             "F.linear (bf16)": lambda: F.linear(x, linear.weight),
             "FP4Linear": lambda: layer(x),
             "fp4ops.linear": lambda: fp4ops.linear(x, w),
             "torch.ops.fp4ops.linear": lambda: torch.ops.fp4ops.linear(x, None, None, w.data, w.scales, g, None,
                                                                        torch.bfloat16, False)}
    with torch.no_grad():
        return {"format": fmt, "n": n, "k": k, **{name: per_call_us(fn, device) for name, fn in calls.items()}}


def markdown(result: dict) -> str:
    lines = [f"# Eager decode: {result['banner_line']}", "",
             f"Llama-3.1-8B's linears, {result['layers']} layers a step, called one by one from Python "
             "(python -m benchmarks.eager_decode). Host: the host's time to issue a step; eager: wall time "
             "per step back to back; graph: the same step in one CUDA graph.", "",
             "| format | batch | host us/step bf16 / FP4 / checked | eager tokens/s bf16 / FP4 / checked "
             "| graph tokens/s bf16 / FP4 | FP4 eager / graph |",
             "|---|---|---|---|---|---|"]
    for r in result["stack"]:
        graph = (f"{r['bf16_graph_tokens_per_s']:.0f} / {r['fp4_graph_tokens_per_s']:.0f}"
                 if "fp4_graph_tokens_per_s" in r else "-")
        share = (f"{r['fp4_eager_tokens_per_s'] / r['fp4_graph_tokens_per_s']:.2f}"
                 if "fp4_graph_tokens_per_s" in r else "-")
        lines.append(f"| {r['format']} | {r['rows']} | {r['bf16_host_us']:.0f} / {r['fp4_host_us']:.0f} / "
                     f"{r['fp4_checked_host_us']:.0f} | {r['bf16_eager_tokens_per_s']:.0f} / "
                     f"{r['fp4_eager_tokens_per_s']:.0f} / {r['fp4_checked_eager_tokens_per_s']:.0f} | {graph} | {share} |")
    names = [key for key in result["calls"][0] if key not in ("format", "n", "k")] if result["calls"] else []
    if names:
        lines += ["", "Host us per call, one row of x, calls back to back:", "",
                  "| format | N x K | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        for c in result["calls"]:
            lines.append(f"| {c['format']} | {c['n']} x {c['k']} | " + " | ".join(f"{c[name]:.1f}" for name in names) + " |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for fmt in sorted({r["format"] for r in result["stack"]}):
        rows = [r for r in result["stack"] if r["format"] == fmt]
        line, = ax.plot([r["rows"] for r in rows], [r["fp4_eager_tokens_per_s"] for r in rows], marker="o",
                        label=f"FP4Linear {fmt}, eager")
        ax.plot([r["rows"] for r in rows], [r["fp4_checked_eager_tokens_per_s"] for r in rows], marker=".",
                linestyle="dotted", color=line.get_color(), label=f"fp4ops.linear {fmt}, eager, W checked")
        if "fp4_graph_tokens_per_s" in rows[0]:
            ax.plot([r["rows"] for r in rows], [r["fp4_graph_tokens_per_s"] for r in rows], marker="o",
                    linestyle="dashed", color=line.get_color(), label=f"FP4Linear {fmt}, CUDA graph")
    first = [r for r in result["stack"] if r["format"] == result["stack"][0]["format"]]
    ax.plot([r["rows"] for r in first], [r["bf16_eager_tokens_per_s"] for r in first], marker="s", color="black",
            label="nn.Linear bf16, eager")
    if "bf16_graph_tokens_per_s" in first[0]:
        ax.plot([r["rows"] for r in first], [r["bf16_graph_tokens_per_s"] for r in first], marker="s", color="black",
                linestyle="dashed", label="nn.Linear bf16, CUDA graph")
    ax.set(xscale="log", yscale="log", xlabel="batch", ylabel="tokens/s (linears only)",
           title="Llama-3.1-8B decode step, eager and in a CUDA graph")
    label_batches(ax, sorted({r["rows"] for r in result["stack"]}))
    ax.legend(fontsize=7)
    save_figure(fig, result["banner_line"], path)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.eager_decode", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--formats", nargs="+", choices=["nvfp4", "mxfp4"], default=["nvfp4", "mxfp4"])
    p.add_argument("--layers", type=int, default=None, help=f"decoder layers a step (default {LAYERS}; 1 on the CPU)")
    add_run_arguments(p)
    args = p.parse_args(argv)
    device = run_device(args)
    cuda = device.type == "cuda"
    linears = LLAMA_8B_LINEARS if cuda else CPU_LINEARS
    layers = args.layers or (LAYERS if cuda else 1)
    info = banner(device)
    tag = file_tag(args, info, device)
    result = {"banner": info, "banner_line": banner_line(info), "layers": layers, "stack": [], "calls": []}
    print(result["banner_line"], flush=True)
    for fmt in args.formats:
        result["stack"] += measure_stack(fmt, args.rows, device, linears, layers)
        for _, n, k in linears[:1] + linears[-1:]:
            result["calls"].append(measure_calls(fmt, n, k, device))
            print("  per call, " + ", ".join(f"{key} {value:.1f}" if isinstance(value, float) else f"{value}"
                                            for key, value in result["calls"][-1].items()), flush=True)
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"eager_{tag}.json").write_text(json.dumps(result, indent=1))
    (out_dir / f"eager_{tag}.md").write_text(markdown(result))
    plot(result, out_dir / f"eager_{tag}.png")
    return result


if __name__ == "__main__":
    main()
