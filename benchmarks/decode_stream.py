"""The decode stream: FP4 linears as a model decodes through them, against cuBLAS bf16/fp16.

    python -m benchmarks.decode_stream                        # every shape and row count, H100-sized
    python -m benchmarks.decode_stream --rows 1 4 16 64 --shapes 4096,4096 14336,4096
    python -m benchmarks.decode_stream --llama-only           # the Llama-3.1-8B stack, tokens/s
    python -m benchmarks.decode_stream --fp4-only ...         # the FP4 layers alone (A/Bs of kernels)
    python -m benchmarks.decode_stream --batch-invariant ...  # FP4Linear(batch_invariant=True) throughout
    python -m benchmarks.decode_stream --bias ...             # every layer of the shapes with a bias
    python -m benchmarks.decode_stream --dtypes fp4 --llama-only  # the W4A4 Llama stacks only
    python -m benchmarks.decode_stream --rows 1 --with-gemv   # one row against fp4ops.gemv too
    python -m benchmarks.decode_stream --render benchmarks/results/decode_h200.json  # its table again

How (docs/performance.md, "Targets"): per (N, K), enough distinct weights that their FP4 bytes are
at least 4x the L2, and at least 8 (--min-layers), called back to back in one CUDA graph with no
flush between layers; the time per layer is a graph replay's median over the layer count (with
fewer layers, a graph's first layer, which overlaps nothing, and its last weigh on it).
Implementations, each on the same x:
- `bf16`: F.linear with the weight in x's dtype (cuBLAS), the layer a serving engine would
  otherwise run;
- `fp4`: fp4ops.nn.FP4Linear, whatever path its forward takes for that row count (with
  `--batch-invariant`, the kernel family in row chunks at every count: the price of reproducible
  rows); with `--dtypes fp4` (W4A4), `fp4ops.linear` of x quantized to the weight's format once
  before the graph (as a fused producer would hand it over), bf16 out, at the kernel family's rows
  (<= 64);
- `dequant`: dequantize the FP4 weight, then F.linear (the floor FP4 must never be slower than);
- `gemv` (one row, with --with-gemv): fp4ops.gemv on the FP4 layers' own weights and x, out in
  x's dtype (bf16 for FP4 x): the one-row GEMV kernel, free of the kernel family's batch
  invariance (docs/performance.md, "Linear decode stream", says what that costs).
The cuBLAS and dequantize rows take x in bf16 where the FP4 layer takes FP4 x.
The FP4 layer's share of the same-run copy bandwidth counts its bytes: weight codes, scales, x and y
(`pct_of_copy` in the JSON); the table also gives the share those bytes would need to meet the row
count's speed-up target over the same run's bf16 time (`target_pct_of_copy`), which says where a
target asks for more than the memory delivers. The Llama stack is one decoder layer's
linears (q, k, v, o, gate, up, down) for 4 layers, timed the same way; tokens/s is rows / (time of
the stack x 8), i.e. the linears of the 32-layer model and nothing else (no attention, norms or
sampling). With fp4 among --dtypes, the Llama layers also run in W4A4 with fp4ops' fused producers
feeding the linears, against the same chain unfused and the layers in torch bf16
(benchmarks/w4a4_layers.py: attention left out, the norms and SiLU-mul in; NVFP4 with static
activation scales, and with each op's own as "nvfp4 own g").

Writes decode_<tag>.json (after every shape), decode_<tag>.md and decode_<tag>.png under --out.
On the CPU (no GPU) it runs tiny shapes with a host clock, to exercise the code only.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import statistics

import torch
import torch.nn.functional as F

import fp4ops
from fp4ops.nn import FP4Linear
from fp4ops.timing import timed_calls

from . import w4a4_layers
from .suite.harness import Timer, banner, banner_line, measure_ceilings

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096), (28672, 8192), (8192, 28672), (1024, 8192)]
ROWS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096]
# Llama-3.1-8B: hidden 4096, 32 heads of 128 with 8 KV heads, MLP 14336 (out, in).
LLAMA_8B_LINEARS = [("q", 4096, 4096), ("k", 1024, 4096), ("v", 1024, 4096), ("o", 4096, 4096),
                    ("gate", 14336, 4096), ("up", 14336, 4096), ("down", 4096, 14336)]
LLAMA_8B_LAYERS = 32
LLAMA_STACK_LAYERS = 4
# (rows at most, speed-up over bf16 at least): the linear targets of docs/performance.md.
SPEEDUP_TARGETS = [(16, 3.4), (32, 2.5), (64, 1.6)]
# FP4 x is timed up to the kernel family's rows; above them the op dequantizes both operands.
FP4_X_MAX_ROWS = 64
REPLAYS = 20
# Distinct layers a graph at least (more where 4x the L2 needs them): a model's linears run back to
# back, each overlapping the one before; with two layers a graph, one of them has nothing before it
# (docs/performance.md, "Method").
MIN_LAYERS = 8


def fp4_weight_bytes(n: int, k: int, fmt: str) -> int:
    return n * k // 2 + n * k // (16 if fmt == "nvfp4" else 32)


def layer_bytes(n: int, k: int, fmt: str, x_kind: str, rows: int) -> int:
    """What one layer's call moves at least: the FP4 weight (codes and scales), x (bf16/fp16, or in
    the weight's format for FP4 x) and y (x's dtype, bf16 for FP4 x: two bytes an element)."""
    x_bytes = fp4_weight_bytes(rows, k, fmt) if x_kind == "fp4" else rows * k * 2
    return fp4_weight_bytes(n, k, fmt) + x_bytes + rows * n * 2


def share_of_copy(row: dict, us: float, copy_gbs: float) -> float:
    """Per cent of the same-run copy bandwidth at which the row's layer bytes move in `us`."""
    return 100 * layer_bytes(row["n"], row["k"], row["format"], row["dtype"], row["rows"]) / us / 1e3 / copy_gbs


def target_share_of_copy(row: dict, copy_gbs: float) -> float | None:
    """The share of copy FP4Linear's bytes would need to reach the row's speed-up target over the
    same run's bf16 time (None where the row has no target or bf16 was not timed). From ~95% on it
    asks about what a bare read of the same bytes gets."""
    if not row.get("target") or "bf16_us" not in row:
        return None
    return share_of_copy(row, row["bf16_us"] / row["target"], copy_gbs)


def layer_count(n: int, k: int, fmt: str, l2_bytes: int, minimum: int = 2) -> int:
    """Distinct layers whose FP4 weights add up to at least 4x the L2."""
    return max(minimum, math.ceil(4 * l2_bytes / fp4_weight_bytes(n, k, fmt)))


def make_layers(shapes: list[tuple[int, int]], copies: int, fmt: str, dtype: torch.dtype, device,
                batch_invariant: bool = False, bias: bool = False) -> tuple[list, list]:
    """`copies` FP4Linear layers per shape, and the same (weight, bias) in `dtype` for cuBLAS (bias
    None without `bias`)."""
    fp4_layers, dense_layers = [], []
    for _ in range(copies):
        for n, k in shapes:
            linear = torch.nn.Linear(k, n, bias=bias, device=device, dtype=dtype)
            fp4_layers.append(FP4Linear.from_linear(linear, fmt))
            fp4_layers[-1].batch_invariant = batch_invariant
            dense_layers.append((linear.weight.detach(), linear.bias.detach() if bias else None))
    return fp4_layers, dense_layers


def implementations(fp4_layers: list, dense_layers: list, fp4_x=None, with_gemv: bool = False) -> dict:
    """name -> a callable running x through every layer in turn (each layer's own input: a decode
    step's linears do not feed each other's shapes). fp4_x: the FP4 layers take it (W4A4) instead.
    with_gemv (one row of x): also "gemv", fp4ops.gemv of each FP4 layer's weight and that row."""
    def run_fp4(x):
        if fp4_x is not None:
            return [fp4ops.linear(fp4_x, layer.quantized_weight(), layer.bias, out_dtype=torch.bfloat16,
                                  batch_invariant=layer.batch_invariant) for layer in fp4_layers]
        return [layer(x) for layer in fp4_layers]

    def run_dense(x):
        return [F.linear(x, w, b) for w, b in dense_layers]

    def run_dequant(x):
        return [F.linear(x, layer.quantized_weight().dequantize(x.dtype), layer.bias) for layer in fp4_layers]

    def run_gemv(x):
        # The row as the GEMV's B: [K] (an FP4 x's codes and linear scales, row 0).
        b, out_dtype = (fp4_x[0], torch.bfloat16) if fp4_x is not None else (x[0], x.dtype)
        return [fp4ops.gemv(layer.quantized_weight(), b, out_dtype=out_dtype) for layer in fp4_layers]

    impls = {"bf16": run_dense, "fp4": run_fp4, "dequant": run_dequant}
    if with_gemv:
        impls["gemv"] = run_gemv
    return impls


def captured_graph(fn, x: torch.Tensor, device: torch.device) -> torch.cuda.CUDAGraph:
    """fn(x) captured in a CUDA graph, warmed up first on a side stream (lazy loading, cuBLAS
    handles), as graph capture asks, and replayed once."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        fn(x)
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(x)
    graph.replay()
    torch.cuda.synchronize(device)
    return graph


def time_stream(fn, x: torch.Tensor, timer: Timer) -> float:
    """Microseconds for one pass of fn(x): a CUDA graph's replay (median of REPLAYS), or the host
    clock's median on the CPU."""
    with torch.no_grad():
        if not timer.cuda:
            return statistics.median(timed_calls(lambda: fn(x), timer.device, 5)[0])
        graph = captured_graph(fn, x, timer.device)
        return statistics.median(timed_calls(graph.replay, timer.device, REPLAYS)[0])


def target_for(rows: int) -> float | None:
    return next((goal for limit, goal in SPEEDUP_TARGETS if rows <= limit), None)


def measure_shape(shape, fmt, x_kind, rows_list, timer, ceilings, l2_bytes, fp4_only: bool = False,
                  batch_invariant: bool = False, bias: bool = False, min_layers: int = MIN_LAYERS,
                  with_gemv: bool = False) -> list[dict]:
    """x_kind: "bfloat16", "float16", or "fp4" (x in the weight's format, bf16 for the baselines).
    fp4_only: time the FP4 layers alone (an A/B of kernels, whose baselines do not change).
    with_gemv: at one row, time fp4ops.gemv on the same weights too (row key "gemv_us")."""
    n, k = shape
    fp4_x = x_kind == "fp4"
    dtype = torch.bfloat16 if fp4_x else getattr(torch, x_kind)
    copies = layer_count(n, k, fmt, l2_bytes, min_layers) if timer.cuda else 2
    fp4_layers, dense = make_layers([shape], copies, fmt, dtype, timer.device, batch_invariant, bias)
    rows_out = []
    for rows in rows_list:
        x = torch.randn(rows, k, device=timer.device, dtype=dtype)
        xq = (fp4ops.quantize_nvfp4(x) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(x)) if fp4_x else None
        impls = implementations(fp4_layers, dense, xq, with_gemv and rows == 1)
        if fp4_only:
            impls = {name: fn for name, fn in impls.items() if name in ("fp4", "gemv")}
        us = {name: time_stream(fn, x, timer) / copies for name, fn in impls.items()}
        row = {"n": n, "k": k, "format": fmt, "dtype": x_kind, "rows": rows, "layers": copies,
               **{f"{name}_us": value for name, value in us.items()}, "target": target_for(rows)}
        if not fp4_only:
            row["speedup_vs_bf16"] = us["bf16"] / us["fp4"]
            row["speedup_vs_dequant"] = us["dequant"] / us["fp4"]
        row["pct_of_copy"] = share_of_copy(row, us["fp4"], ceilings["copy"])
        if (needed := target_share_of_copy(row, ceilings["copy"])) is not None:
            row["target_pct_of_copy"] = needed
        rows_out.append(row)
        baselines = "" if fp4_only else (f", bf16 {us['bf16']:8.2f} us, dequant {us['dequant']:8.2f} us -> "
                                         f"{row['speedup_vs_bf16']:.2f}x")
        baselines += f", gemv {us['gemv']:8.2f} us" if "gemv" in us else ""
        print(f"  {n:>6} x {k:<6} {fmt} {row['dtype']:<8} rows {rows:>5}: fp4 {us['fp4']:8.2f} us{baselines}"
              + f", {row['pct_of_copy']:.1f}% of copy", flush=True)
    del fp4_layers, dense
    return rows_out


def measure_llama(fmt, dtype, rows_list, timer, fp4_only: bool = False, batch_invariant: bool = False) -> list[dict]:
    shapes = [(n, k) for _, n, k in LLAMA_8B_LINEARS]
    stack = LLAMA_STACK_LAYERS if timer.cuda else 1
    fp4_layers, dense = make_layers(shapes, stack, fmt, dtype, timer.device, batch_invariant)
    out = []
    for rows in rows_list:
        # Each linear takes an x of its input width; the stack runs them in model order.
        xs = {k: torch.randn(rows, k, device=timer.device, dtype=dtype) for k in {k for _, k in shapes}}
        steps = {"bf16": lambda _: [F.linear(xs[w.shape[1]], w) for w, _ in dense],
                 "fp4": lambda _: [layer(xs[layer.in_features]) for layer in fp4_layers]}
        if fp4_only:
            del steps["bf16"]
        us = {name: time_stream(step, None, timer) * LLAMA_8B_LAYERS / stack for name, step in steps.items()}
        row = {"format": fmt, "dtype": str(dtype).removeprefix("torch."), "rows": rows}
        for name, value in us.items():
            row[f"{name}_step_us"], row[f"{name}_tokens_per_s"] = value, rows / value * 1e6
        out.append(row)
        bf16 = f", bf16 {row['bf16_tokens_per_s']:9.0f} tokens/s" if "bf16_tokens_per_s" in row else ""
        print(f"  Llama-3.1-8B linears, {fmt} {row['dtype']}, batch {rows:>3}: fp4 {row['fp4_tokens_per_s']:9.0f} "
              f"tokens/s{bf16}", flush=True)
    return out


def cell(row: dict, key: str, spec: str, suffix: str = "") -> str:
    """row[key] formatted, or '-' where the run did not time it (--fp4-only)."""
    return format(row[key], spec) + suffix if key in row else "-"


def markdown(result: dict) -> str:
    notes = " FP4Linear with batch_invariant=True." if result.get("batch_invariant") else ""
    notes += " Every layer of the shapes with a bias." if result.get("bias") else ""
    copy_gbs = result.get("ceilings", {}).get("copy")
    lines = [f"# Decode stream: {result['banner_line']}", "",
             f"Per layer, distinct weights back to back in one CUDA graph (python -m benchmarks.decode_stream).{notes} "
             "% of copy: the share of the same-run copy bandwidth at which the layer's bytes (FP4 weight, x and y) "
             "move; target's %: the share they would need to move at to meet the speed-up target over this run's "
             "bf16 time (from ~95% on, about what a bare read of the same bytes gets).", "",
             "| N x K | format | x | rows | FP4Linear us | bf16 us | dequant + linear us | vs bf16 | target | vs dequant | "
             "% of copy | target's % |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        target = "-"
        if r["target"] and "speedup_vs_bf16" in r:
            target = f">= {r['target']}x {'met' if r['speedup_vs_bf16'] >= r['target'] else 'NOT met'}"
        shares = ["-", "-"]
        if copy_gbs:
            needed = target_share_of_copy(r, copy_gbs)
            shares = [f"{share_of_copy(r, r['fp4_us'], copy_gbs):.1f}", "-" if needed is None else f"{needed:.1f}"]
        lines.append(f"| {r['n']} x {r['k']} | {r['format']} | {r['dtype']} | {r['rows']} | {r['fp4_us']:.2f} | {cell(r, 'bf16_us', '.2f')} | "
                     f"{cell(r, 'dequant_us', '.2f')} | {cell(r, 'speedup_vs_bf16', '.2f', 'x')} | {target} | "
                     f"{cell(r, 'speedup_vs_dequant', '.2f', 'x')} | {' | '.join(shares)} |")
    against_gemv = [r for r in result["rows"] if "gemv_us" in r]
    if against_gemv:
        lines += ["", "One row against fp4ops.gemv on the same weights (the one-row GEMV kernel, whose rows the "
                  "kernel family's batch invariance does not bind):", "",
                  "| N x K | format | x | FP4Linear us | GEMV us | FP4Linear / GEMV |", "|---|---|---|---|---|---|"]
        for r in against_gemv:
            lines.append(f"| {r['n']} x {r['k']} | {r['format']} | {r['dtype']} | {r['fp4_us']:.2f} | {r['gemv_us']:.2f} | "
                         f"{r['fp4_us'] / r['gemv_us']:.3f} |")
    if result["llama"]:
        lines += ["", "Llama-3.1-8B, the linears of all 32 layers per decode step (nothing else):", "",
                  "| format | x | batch | FP4Linear tokens/s | bf16 tokens/s | ratio |", "|---|---|---|---|---|---|"]
        for r in result["llama"]:
            ratio = f"{r['fp4_tokens_per_s'] / r['bf16_tokens_per_s']:.2f}x" if "bf16_tokens_per_s" in r else "-"
            lines.append(f"| {r['format']} | {r['dtype']} | {r['rows']} | {r['fp4_tokens_per_s']:.0f} | {cell(r, 'bf16_tokens_per_s', '.0f')} | "
                         f"{ratio} |")
    if result.get("llama_w4a4"):
        lines += ["", "Llama-3.1-8B layers without attention (norms, linears, SiLU-mul), all 32 per decode step: W4A4 on "
                  "fp4ops' fused producers and FP4 x FP4 linears against the same with torch's norms and SiLU-mul "
                  "then fp4ops' quantizer (unfused), and torch bf16 (benchmarks/w4a4_layers.py):", "",
                  "| format | batch | W4A4 tokens/s | W4A4 unfused tokens/s | bf16 tokens/s | vs unfused | vs bf16 |",
                  "|---|---|---|---|---|---|---|"]
        for r in result["llama_w4a4"]:
            ratios = [f"{r['fp4_tokens_per_s'] / r[key]:.2f}x" if key in r else "-"
                      for key in ("unfused_tokens_per_s", "bf16_tokens_per_s")]
            rates = [f"{r['fp4_tokens_per_s']:.0f}", cell(r, "unfused_tokens_per_s", ".0f"), cell(r, "bf16_tokens_per_s", ".0f")]
            lines.append(f"| {r['format']} | {r['rows']} | {' | '.join(rates)} | {' | '.join(ratios)} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    # One line per (format, x): the median over the weight shapes, the band their range.
    speedups: dict[tuple, dict[int, list]] = {}
    for r in result["rows"]:
        if "speedup_vs_bf16" in r:
            speedups.setdefault((r["format"], r["dtype"]), {}).setdefault(r["rows"], []).append(r["speedup_vs_bf16"])
    for (fmt, dtype), by_rows in speedups.items():
        rows = sorted(by_rows)
        line, = left.plot(rows, [statistics.median(by_rows[m]) for m in rows], marker="o", label=f"{fmt}, x {dtype}")
        left.fill_between(rows, [min(by_rows[m]) for m in rows], [max(by_rows[m]) for m in rows], color=line.get_color(),
                          alpha=0.12)
    for limit, goal in SPEEDUP_TARGETS:
        left.hlines(goal, 1, limit, colors="gray", linestyles="dashed")
    left.axhline(1.0, color="black", linewidth=0.8)
    left.set(xscale="log", xlabel="rows (tokens in the batch)", ylabel="speed-up over cuBLAS bf16",
             title="FP4Linear per layer: median over the shapes, band: their range"
             + ("\n(batch_invariant=True)" if result.get("batch_invariant") else ""))
    if speedups:
        left.legend(fontsize=7)
    else:
        left.text(0.5, 0.5, "baselines not timed (--fp4-only)", ha="center", transform=left.transAxes)
    for fmt in sorted({r["format"] for r in result["llama"]}):
        points = [(r["rows"], r["fp4_tokens_per_s"]) for r in result["llama"] if r["format"] == fmt]
        right.plot(*zip(*points), marker="o", label=f"FP4Linear {fmt}")
    points = [(r["rows"], r["bf16_tokens_per_s"]) for r in result["llama"]
              if r["format"] == result["llama"][0]["format"] and "bf16_tokens_per_s" in r]
    if points:
        right.plot(*zip(*points), marker="s", color="black", label="nn.Linear bf16")
    right.set(xscale="log", yscale="log", xlabel="batch", ylabel="tokens/s (linears only)", title="Llama-3.1-8B decode step")
    if result["llama"]:
        right.legend(fontsize=7)
        label_batches(right, sorted({r["rows"] for r in result["llama"]}))
    save_figure(fig, result["banner_line"], path)


def label_batches(ax, batches: list[int]) -> None:
    """The batches timed as the x axis' ticks, plain numbers (a log axis over less than a decade
    labels its minor ticks)."""
    ax.set_xticks(batches, [str(b) for b in batches], minor=False)
    ax.set_xticks([], minor=True)


def save_figure(fig, banner_line: str, path: pathlib.Path) -> None:
    """The run's banner over the figure, written to path and closed."""
    import matplotlib.pyplot as plt

    fig.suptitle(banner_line, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """--device, --out and --tag: where a decode benchmark runs and what it writes."""
    parser.add_argument("--device", default=None, help="cuda (default when present) or cpu (exercises the code only)")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tag", default=None, help="file name tag (default: the GPU, e.g. h100)")


def run_device(args: argparse.Namespace) -> torch.device:
    return torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))


def file_tag(args: argparse.Namespace, info: dict, device: torch.device) -> str:
    """--tag, else the GPU's model (h100 of "NVIDIA H100 80GB HBM3"), else the device type."""
    words = info["gpu"].split()
    return args.tag or (words[1].lower() if device.type == "cuda" and len(words) > 1 else device.type)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.decode_stream", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", metavar="N,K", default=None, help="weight shapes (default: the Llama 8B/70B set)")
    p.add_argument("--rows", type=int, nargs="+", default=None, help="rows of x (default 1 .. 4096)")
    p.add_argument("--formats", nargs="+", choices=["nvfp4", "mxfp4"], default=["nvfp4", "mxfp4"])
    p.add_argument("--dtypes", nargs="+", choices=["bfloat16", "float16", "fp4"], default=["bfloat16"],
                   help="x: bf16, fp16, or fp4 (W4A4: x in the weight's format, rows up to 64)")
    p.add_argument("--llama-rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--llama-only", action="store_true", help="only the Llama-3.1-8B stack")
    p.add_argument("--no-llama", action="store_true", help="skip the Llama-3.1-8B stack")
    p.add_argument("--fp4-only", action="store_true",
                   help="time the FP4 layers alone, not cuBLAS bf16 nor dequantize + F.linear (A/Bs of the kernels)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="FP4Linear(batch_invariant=True): the kernel family in row chunks at every row count")
    p.add_argument("--bias", action="store_true",
                   help="every layer of --shapes with a bias in x's dtype (the Llama stack has none)")
    p.add_argument("--with-gemv", action="store_true",
                   help="at one row, also time fp4ops.gemv on the same weights (not with --bias: the GEMV takes none)")
    p.add_argument("--min-layers", type=int, default=MIN_LAYERS,
                   help=f"distinct layers a graph at least (default {MIN_LAYERS}; more where 4x the L2 needs them)")
    p.add_argument("--render", metavar="JSON", type=pathlib.Path, default=None,
                   help="no run: rebuild a saved run's table (decode_<tag>.md beside its JSON; the plot is left as it is)")
    add_run_arguments(p)
    args = p.parse_args(argv)
    if args.render is not None:
        result = json.loads(args.render.read_text())
        args.render.with_suffix(".md").write_text(markdown(result))
        print(markdown(result))
        return result
    if args.with_gemv and args.bias:
        p.error("--with-gemv: fp4ops.gemv takes no bias, so it cannot stand in for layers with one (--bias)")
    device = run_device(args)
    cuda = device.type == "cuda"
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else (SHAPES if cuda else [(256, 512)])
    rows_list = args.rows or (ROWS if cuda else [1, 3])
    timer = Timer(device)
    info = banner(device)
    ceilings = measure_ceilings(timer)
    tag = file_tag(args, info, device)
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"banner": info, "ceilings": ceilings, "banner_line": banner_line(info, ceilings),
              "batch_invariant": args.batch_invariant, "bias": args.bias, "rows": [], "llama": [], "llama_w4a4": []}
    print(result["banner_line"], flush=True)
    l2_bytes = info.get("l2_mb", 50) << 20
    json_path = out_dir / f"decode_{tag}.json"
    with torch.no_grad():
        if not args.llama_only:
            for fmt in args.formats:
                for x_kind in args.dtypes:
                    rows_here = [r for r in rows_list if r <= FP4_X_MAX_ROWS] if x_kind == "fp4" else rows_list
                    for shape in shapes:
                        result["rows"] += measure_shape(shape, fmt, x_kind, rows_here, timer, ceilings, l2_bytes, args.fp4_only,
                                                        args.batch_invariant, args.bias, args.min_layers, args.with_gemv)
                        json_path.write_text(json.dumps(result, indent=1))
                        if cuda:
                            torch.cuda.empty_cache()
        if not args.no_llama:
            llama_dtype = next((getattr(torch, d) for d in args.dtypes if d != "fp4"), torch.bfloat16)
            for fmt in args.formats:
                result["llama"] += measure_llama(fmt, llama_dtype, args.llama_rows if cuda else [1, 2], timer, args.fp4_only,
                                                 args.batch_invariant)
                if "fp4" in args.dtypes:
                    result["llama_w4a4"] += w4a4_layers.measure(fmt, args.llama_rows if cuda else [1, 2], timer, time_stream,
                                                                args.fp4_only)
    json_path.write_text(json.dumps(result, indent=1))
    (out_dir / f"decode_{tag}.md").write_text(markdown(result))
    plot(result, out_dir / f"decode_{tag}.png")
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
