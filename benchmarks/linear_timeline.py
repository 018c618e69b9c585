"""Where a linear layer's time goes in the decode stream: the kernels' timeline inside the CUDA graph.

    python -m benchmarks.linear_timeline                                   # default shapes and rows
    python -m benchmarks.linear_timeline --shapes 4096,4096 --rows 1 16 --formats nvfp4 mxfp4
    python -m benchmarks.linear_timeline --shapes 6144,4096 --rows 1 --bias  # layers with a bias

The decode stream (benchmarks/decode_stream.py) times a graph of distinct FP4Linear layers as a
whole. This replays the same graph under the PyTorch profiler and reads each kernel's start and end
on the GPU, then splits every layer's period (from its first kernel's start to the next layer's) into:
- `prep`: x made ready for the MMA kernel (FP4 x decoded, the warpgroup kernels' x image);
- `main`: the MMA kernel, start to end;
- `reduce tail`: from the MMA kernel's end to the end of the K ranges' reduction (0 without one);
- `handoff`: from the layer's last kernel's end to the next layer's first start (negative where the
  next layer's kernel started before, as programmatic dependent launch allows).
The four add up to the period. Medians over the layers of every replay (the last layer of a replay
has no successor and gives no period). The profiler's own overhead is in these times, so each row
also gives the same graph's time per layer without the profiler (`unprofiled`, decode_stream's
measure: the median of REPLAYS replays over the layer count).

Writes linear_timeline_<tag>.json, .md and .png under --out. Needs a CUDA GPU, except
`--replot JSON`, which draws the table and plot of a saved run again, and `--compare BASE NEW`,
which prints each phase of two saved runs (two builds, e.g. the sides of benchmarks/ab_bench.py)
side by side with the change, for the rows both measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import pathlib
import statistics
import sys

import torch
from tabulate import tabulate

from fp4ops.timing import timed_calls

from .decode_stream import REPLAYS as TIMED_REPLAYS
from .decode_stream import captured_graph, layer_count, make_layers
from .suite.harness import banner, banner_line

SHAPES = [(4096, 4096), (1024, 8192), (14336, 4096), (28672, 8192)]
ROWS = [1, 8, 16, 64]
REPLAYS = 3
# Layers per graph at least: each replay's last layer gives no period, and with few layers the
# first and last layers' start-up and drain weigh on the medians (docs/performance.md, the
# timeline's 28672 x 8192 rows).
MIN_LAYERS = 8
PHASES = ("prep", "main", "reduce_tail", "handoff", "period")


@dataclasses.dataclass(frozen=True)
class Kernel:
    name: str
    start: float  # us
    end: float


def role(name: str) -> str | None:
    """A linear layer's kernel by its role: "main" (the MMA kernel), "reduce" (the K ranges'
    reduction), "prep" (any other fp4ops linear kernel: x decoded or imaged), or None."""
    if "fp4ops::cuda::linear" not in name:
        return None
    if "linear_mma_kernel" in name or "linear_wgmma_kernel" in name:
        return "main"
    return "reduce" if "linear_reduce" in name else "prep"


def launch_order(kernels: list[Kernel]) -> list[Kernel]:
    """The kernels of one stream in launch order, which is their order of ending: every fp4ops
    kernel launched as a programmatic dependent waits (griddepcontrol.wait) for the kernel launched
    before it to complete and then does its own work, and one launched plainly starts after it.
    The profiler's start times do not keep that order: a programmatic dependent can be recorded
    starting before the kernel ahead of it. (Equal ends, which that rules out but a coarse clock
    could give, fall back on the starts.)"""
    return sorted(kernels, key=lambda k: (k.end, k.start))


def layers_of(kernels: list[Kernel]) -> list[dict]:
    """The kernels in launch order (launch_order) grouped per layer: {"prep": [...], "main": Kernel, "reduce": Kernel
    or None}. A layer's prep kernels precede its main kernel; its reduction follows it."""
    layers, pending = [], []
    for kernel in launch_order(kernels):
        kind = role(kernel.name)
        if kind == "prep":
            pending.append(kernel)
        elif kind == "main":
            layers.append({"prep": pending, "main": kernel, "reduce": None})
            pending = []
        elif kind == "reduce":
            if not layers or layers[-1]["reduce"] is not None:
                raise ValueError(f"a reduction without its MMA kernel at {kernel.start:.2f} us")
            layers[-1]["reduce"] = kernel
    if pending:
        raise ValueError(f"{len(pending)} prep kernel(s) after the last MMA kernel")
    return layers


def layer_phases(layers: list[dict]) -> list[dict]:
    """Each layer's phases in us (PHASES), for every layer that has a successor in `layers`."""
    out = []
    for layer, successor in itertools.pairwise(layers):
        main, reduce = layer["main"], layer["reduce"]
        first = min([main.start, *(k.start for k in layer["prep"])])
        last_end = max(main.end, reduce.end if reduce else main.end)
        next_first = min([successor["main"].start, *(k.start for k in successor["prep"])])
        out.append({"prep": main.start - first, "main": main.end - main.start,
                    "reduce_tail": (reduce.end - main.end) if reduce else 0.0,
                    "handoff": next_first - last_end, "period": next_first - first})
    return out


def median_phases(phases: list[dict]) -> dict:
    return {name: statistics.median(p[name] for p in phases) for name in PHASES}


def profiled_kernels(graph: torch.cuda.CUDAGraph, replays: int, keep=lambda name: role(name) is not None) -> list[list[Kernel]]:
    """The GPU kernels of each of `replays` replays of `graph` whose names `keep` accepts (default:
    the linear layers' kernels), each replay profiled on its own."""
    from torch.profiler import ProfilerActivity, profile

    runs = []
    for _ in range(replays):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            graph.replay()
            torch.cuda.synchronize()
        runs.append([Kernel(ev.name, ev.time_range.start, ev.time_range.end) for ev in prof.events()
                     if ev.device_type == torch.autograd.DeviceType.CUDA and keep(ev.name)])
    return runs


def measure(shape, rows: int, fmt: str, device: torch.device, l2_bytes: int, bias: bool = False) -> dict:
    n, k = shape
    copies = layer_count(n, k, fmt, l2_bytes, minimum=MIN_LAYERS)
    layers, _ = make_layers([shape], copies, fmt, torch.bfloat16, device, bias=bias)
    x = torch.randn(rows, k, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        graph = captured_graph(lambda x: [layer(x) for layer in layers], x, device)
        unprofiled = statistics.median(timed_calls(graph.replay, device, TIMED_REPLAYS)[0]) / copies
        runs = profiled_kernels(graph, REPLAYS)
    phases = []
    for kernels in runs:
        grouped = layers_of(kernels)
        if len(grouped) != copies:
            raise RuntimeError(f"{n} x {k}, {rows} rows: {len(grouped)} layers in the profile, expected {copies} "
                               "(did the profiler record the graph's kernels?)")
        phases += layer_phases(grouped)
    kinds = sorted({role(kernel.name) for kernel in runs[0]})
    return {"n": n, "k": k, "format": fmt, "bias": bias, "rows": rows, "layers": copies, "kernels": kinds,
            **{f"{name}_us": value for name, value in median_phases(phases).items()}, "unprofiled_us": unprofiled}


def layer_kind(row: dict) -> str:
    """The weight's format, and "+ bias" for layers with one (runs before --bias have no key)."""
    return row["format"] + (" + bias" if row.get("bias") else "")


def markdown(result: dict) -> str:
    head = ["N x K", "format", "rows", "layers", "prep us", "main us", "reduce tail us", "handoff us", "period us",
            "unprofiled us"]
    body = [[f"{r['n']} x {r['k']}", layer_kind(r), r["rows"], r["layers"],
             *(f"{r[f'{name}_us']:.2f}" for name in (*PHASES, "unprofiled"))] for r in result["rows"]]
    return (f"# Linear layer timeline: {result['banner_line']}\n\n"
            "Medians over the layers of each graph replay (python -m benchmarks.linear_timeline); "
            "prep + main + reduce tail + handoff = period.\n\n"
            + tabulate(body, head, tablefmt="github") + "\n")


def plot(result: dict, path: pathlib.Path) -> None:
    """One horizontal bar per (shape, rows): the period split into the reduction's tail and the rest
    (x preparation and the MMA kernel after the layer before; where the next layer starts early
    the hand-off is negative and counted there), with the unprofiled time per layer marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    formats = sorted({layer_kind(r) for r in rows})
    labels = [f"{r['n']} x {r['k']}, {r['rows']} row{'s' if r['rows'] != 1 else ''}"
              + (f", {layer_kind(r)}" if len(formats) > 1 else "") for r in rows]
    tails = [r["reduce_tail_us"] for r in rows]
    rest = [r["period_us"] - r["reduce_tail_us"] for r in rows]
    height = 0.32 * len(rows) + 1.8  # inches
    fig, ax = plt.subplots(figsize=(9, height))
    places = range(len(rows))
    ax.barh(places, rest, color="tab:blue", label="x prep + MMA kernel after the layer before")
    ax.barh(places, tails, left=rest, color="tab:orange", label="K ranges' reduction after the MMA kernel")
    ax.scatter([r["unprofiled_us"] for r in rows], places, marker="|", s=160, color="black", zorder=3,
               label="time per layer without the profiler")
    ax.set_yticks(list(places), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="us per layer (median over the layers of the replays)",
           title=f"Where a linear layer's time goes in the decode graph ({', '.join(formats) or '-'})")
    fig.legend(fontsize=7, loc="lower center", ncol=3)
    fig.suptitle(result["banner_line"], fontsize=8)
    fig.tight_layout(rect=(0, 0.3 / height, 1, 1))  # a 0.3-inch strip at the bottom for the legend
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: dict, out: pathlib.Path, tag: str) -> None:
    (out / f"linear_timeline_{tag}.md").write_text(markdown(result))
    plot(result, out / f"linear_timeline_{tag}.png")


def saved_run_command(args: argparse.Namespace, prefix: str, write_outputs, comparison) -> dict | None:
    """A timeline's commands on saved runs, no GPU needed: --replot JSON writes the run's .md and
    .png next to its JSON (named <prefix><tag>.json) again; --compare BASE NEW prints
    comparison(base, new). None when neither was asked for."""
    if args.replot:
        path = pathlib.Path(args.replot)
        result = json.loads(path.read_text())
        write_outputs(result, path.parent, path.stem.removeprefix(prefix))
        return result
    if args.compare:
        base, new = (json.loads(pathlib.Path(path).read_text()) for path in args.compare)
        print(comparison(base, new))
        return {"base": base, "new": new}
    return None


def row_key(row: dict) -> tuple:
    return row["n"], row["k"], layer_kind(row), row["rows"]


def comparison(base: dict, new: dict) -> str:
    """Markdown: for each (shape, format, rows) in both runs, every phase base -> new (us) and the
    change new - base, so that a slower period shows which phase moved."""
    base_rows = {row_key(r): r for r in base["rows"]}
    names = (*PHASES, "unprofiled")
    head = ["N x K", "format", "rows", *(f"{name} us" for name in names)]
    body = []
    for r in new["rows"]:
        b = base_rows.get(row_key(r))
        if b is None:
            continue
        cells = [f"{b[f'{name}_us']:.2f} -> {r[f'{name}_us']:.2f} ({r[f'{name}_us'] - b[f'{name}_us']:+.2f})" for name in names]
        body.append([f"{r['n']} x {r['k']}", layer_kind(r), r["rows"], *cells])
    return (f"# Linear layer timeline, two runs\n\nbase: {base['banner_line']}\n\nnew: {new['banner_line']}\n\n"
            "Each phase base -> new (new - base), us; rows measured by both runs only.\n\n"
            + (tabulate(body, head, tablefmt="github") if body else "(no row in common)") + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", metavar="N,K", default=None, help="weight shapes (default: four of the decode stream's)")
    p.add_argument("--rows", type=int, nargs="+", default=ROWS)
    p.add_argument("--formats", "--format", nargs="+", choices=["nvfp4", "mxfp4"], default=["nvfp4"],
                   help="weight formats, each shape and row count timed in each (default: nvfp4)")
    p.add_argument("--bias", action="store_true", help="layers with a bias (bf16, as x)")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--tag", default=None, help="file name tag (default: the GPU, e.g. h100)")
    p.add_argument("--replot", metavar="JSON", default=None,
                   help="draw the .md and .png of a saved linear_timeline_<tag>.json again (no GPU needed)")
    p.add_argument("--compare", nargs=2, metavar=("BASE", "NEW"), default=None,
                   help="print two saved runs' phases side by side (no GPU needed)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    saved = saved_run_command(args, "linear_timeline_", write_outputs, comparison)
    if saved is not None:
        return saved
    if not torch.cuda.is_available():
        print("linear_timeline needs a CUDA GPU", file=sys.stderr)
        return None
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    device = torch.device("cuda")
    info = banner(device)
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    result = {"banner": info, "banner_line": banner_line(info), "rows": []}
    print(result["banner_line"], flush=True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = args.tag or info["gpu"].split()[-1].lower()  # "NVIDIA H200" -> h200, as decode_stream names its files
    for shape, rows, fmt in itertools.product(shapes, args.rows, args.formats):
        row = measure(shape, rows, fmt, device, l2_bytes, args.bias)
        result["rows"].append(row)
        print("  " + ", ".join(f"{key} {row[key]:.2f}" if isinstance(row[key], float) else f"{key} {row[key]}"
                               for key in row), flush=True)
        (out / f"linear_timeline_{tag}.json").write_text(json.dumps(result, indent=1))
    write_outputs(result, out, tag)
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
