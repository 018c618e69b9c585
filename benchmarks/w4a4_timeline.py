"""Where a W4A4 decoder layer's time goes: the kernels' timeline of benchmarks/w4a4_layers.py's chain
inside its CUDA graph, stage by stage.

    python -m benchmarks.w4a4_timeline                          # default rows, every variant
    python -m benchmarks.w4a4_timeline --rows 8 64 --variants nvfp4 "nvfp4 own g"
    python -m benchmarks.w4a4_timeline --compare BASE.json NEW.json   # two builds, stage by stage

The decode stream times the chain (Llama-3.1-8B's layers without attention, on fp4ops' producers and
FP4 x FP4 linears) as a whole. This replays the same graph under the PyTorch profiler, reads each
fp4ops kernel's end on the GPU, and splits every layer's period into its nine stages (STAGES: the
attention norm, the q and k/v linears, the quantizer of o's input, the o linear, the MLP norm, the
gate/up linear, SiLU-and-mul, the down linear). Each kernel of the chain waits for the one before it
to complete, so a stage's span runs from the previous stage's end (its last kernel's) to its own:
what the stage adds to the chain, whatever it overlapped by starting early (programmatic dependent
launch). The spans add up to the period, from one layer's end to the next's. Medians over the
layers of every replay (a replay's first layer has no predecessor and gives no period). Each row also
gives the same graph's time per layer without the profiler (`unprofiled`), and the kernels each stage
launched in the first layer profiled (which path a producer took: one block, a cluster, a grid, or
separate passes). Where the run has "nvfp4" and "nvfp4 own g" at the same rows, the table of what
dynamic activation scales add to each stage follows, then each linear stage's kernels (x decode,
MMA kernel, reduction): when each ends after the stage before. Batches up to 64 rows (128 on Hopper), where
every linear runs on fp4ops' own kernels: past that a linear dequantizes for `F.linear`, whose
kernels this does not split into stages (it raises, naming the sequence it found).

Writes w4a4_timeline_<tag>.json, .md and .png under --out. Needs a CUDA GPU, except `--replot JSON`
and `--compare BASE NEW` (saved runs).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import pathlib
import re
import statistics
import sys

import torch
from tabulate import tabulate

from fp4ops.timing import timed_calls

from . import w4a4_layers
from .decode_stream import REPLAYS as TIMED_REPLAYS
from .decode_stream import captured_graph
from .linear_timeline import Kernel, launch_order, profiled_kernels, role, saved_run_command
from .suite.harness import banner, banner_line

STAGES = ("attn norm", "q", "kv", "o quantize", "o", "mlp norm", "gate_up", "silu_mul", "down")
# Each stage's kind, in the order w4a4_layers.fp4_layer launches them.
KINDS = ("norm", "linear", "linear", "quantize", "linear", "norm", "linear", "silu_mul", "linear")
PRODUCER_STAGES = tuple(stage for stage, kind in zip(STAGES, KINDS) if kind != "linear")
LINEAR_STAGES = tuple(stage for stage, kind in zip(STAGES, KINDS) if kind == "linear")
VARIANTS = ("nvfp4", "nvfp4 own g", "mxfp4")
ROWS = [1, 8, 32, 64]
LAYERS = 8  # per graph: a replay's first layer gives no period
REPLAYS = 3


class ProfileError(ValueError):
    """A profile whose kernels are not whole layers of the chain; `kernel`: where it first departs."""

    def __init__(self, message: str, kernel: Kernel):
        super().__init__(message)
        self.kernel = kernel


def is_fp4ops(name: str) -> bool:
    return "fp4ops::" in name


def kind_of_group(names: list[str]) -> str:
    """The stage kind of a run of consecutive kernels outside the linears: a norm or SiLU-mul where
    one of them is that producer's (with any zeroing or amax pass of its own g), else a quantizer."""
    if any("rms_norm" in name for name in names):
        return "norm"
    if any("silu_mul" in name for name in names):
        return "silu_mul"
    return "quantize"


def stages_of(kernels: list[Kernel]) -> list[tuple[str, list[Kernel]]]:
    """The fp4ops kernels in launch order split into stages, (kind, kernels) each: every linear call
    is its x preparation, one MMA kernel and its reduction (linear_timeline.role); the kernels
    between two linears are one producer's or quantizer's (linear_timeline.launch_order orders them)."""
    stages: list[tuple[str, list[Kernel]]] = []
    for kernel in launch_order(kernels):
        part = role(kernel.name)
        last = stages[-1] if stages else None
        if part is None:
            if last is not None and last[0] != "linear":
                last[1].append(kernel)
            else:
                stages.append(("other", [kernel]))
        elif part == "reduce":
            if last is None or last[0] != "linear" or not any(role(k.name) == "main" for k in last[1]):
                raise ProfileError(f"a reduction without its MMA kernel, ending at {kernel.end:.2f} us", kernel)
            last[1].append(kernel)
        else:  # "prep" or "main": a new linear call unless this one has not reached its MMA kernel yet
            opens = last is None or last[0] != "linear" or any(role(k.name) == "main" for k in last[1])
            if opens:
                stages.append(("linear", [kernel]))
            else:
                last[1].append(kernel)
    return [(kind_of_group([k.name for k in group]) if kind == "other" else kind, group) for kind, group in stages]


def layers_of(kernels: list[Kernel]) -> list[list[list[Kernel]]]:
    """The stages grouped per layer (STAGES' order), each stage its kernels; raises where the
    profile's sequence is not whole layers of KINDS."""
    stages = stages_of(kernels)
    kinds = tuple(kind for kind, _ in stages)
    if len(stages) % len(KINDS) or kinds != KINDS * (len(stages) // len(KINDS)):
        expected = KINDS * (len(stages) // len(KINDS) + 1)
        first = next((i for i, kind in enumerate(kinds) if kind != expected[i]), len(kinds) - 1)
        raise ProfileError(f"the profile's stages are not whole layers of {KINDS}: {kinds}", stages[first][1][0])
    return [[group for _, group in stages[i:i + len(KINDS)]] for i in range(0, len(stages), len(KINDS))]


def stage_boundaries(predecessor: list[list[Kernel]], layer: list[list[Kernel]]) -> list[float]:
    """The predecessor's last end, then each of the layer's stages' last ends (us): stage i runs
    from boundary i to boundary i + 1."""
    return [max(k.end for k in predecessor[-1])] + [max(k.end for k in group) for group in layer]


def layer_spans(layers: list[list[list[Kernel]]]) -> list[dict]:
    """Each layer's span per stage and its period (us), for every layer with a predecessor: a
    stage's span runs from the previous stage's last end to its own."""
    out = []
    for predecessor, layer in itertools.pairwise(layers):
        ends = stage_boundaries(predecessor, layer)
        spans = {stage: end - start for stage, start, end in zip(STAGES, ends, ends[1:])}
        out.append({**spans, "period": ends[-1] - ends[0]})
    return out


LINEAR_ROLES = ("prep", "main", "reduce")  # linear_timeline.role: x decode, MMA kernel, K ranges' reduction


def linear_kernel_ends(layers: list[list[list[Kernel]]]) -> list[dict]:
    """For each layer with a predecessor, each linear stage's kernels by role: the last end of the
    role's kernels after the previous stage's end (us; the reduction's is the stage's span, and an
    x decode that finished under the stage before is negative). Where in a linear stage the time
    goes that layer_spans gives whole."""
    out = []
    for predecessor, layer in itertools.pairwise(layers):
        starts = stage_boundaries(predecessor, layer)[:-1]
        ends = {}
        for stage, kind, start, group in zip(STAGES, KINDS, starts, layer):
            if kind == "linear":
                by_role = {}
                for kernel in group:
                    part = role(kernel.name)
                    by_role[part] = max(by_role.get(part, kernel.end), kernel.end)
                ends[stage] = {part: end - start for part, end in by_role.items()}
        out.append(ends)
    return out


def median_linear_ends(per_layer: list[dict]) -> dict:
    """{stage: {role: median}} over the layers, for the roles every layer's stage has."""
    out = {}
    for stage in per_layer[0]:
        roles = [part for part in LINEAR_ROLES if all(part in layer[stage] for layer in per_layer)]
        out[stage] = {part: statistics.median(layer[stage][part] for layer in per_layer) for part in roles}
    return out


def short_name(name: str) -> str:
    """A kernel's function name without namespace and template arguments."""
    found = re.search(r"(\w+)(?:<|\()", name.removeprefix("void "))
    return found.group(1) if found else name


def stage_kernels(layer: list[list[Kernel]]) -> dict[str, list[str]]:
    return {stage: [short_name(k.name) for k in launch_order(group)] for stage, group in zip(STAGES, layer)}


def listing(kernels: list[Kernel], around: Kernel, count: int = 12) -> str:
    """The `count` kernels either side of `around`, in launch order, one line each: start and end
    (us from the first start), short name."""
    ordered = launch_order(kernels)
    origin = min(k.start for k in ordered) if ordered else 0.0
    at = ordered.index(around) if around in ordered else len(ordered)
    ordered = ordered[max(0, at - count):at + count]
    return "\n".join(f"  {k.start - origin:10.3f} {k.end - origin:10.3f}  {short_name(k.name)}" for k in ordered)


def variant_format(variant: str) -> tuple[str, bool]:
    """("nvfp4" or "mxfp4", whether the producers derive their own g)."""
    return variant.removesuffix(" own g"), variant.endswith(" own g")


def measure(variant: str, rows: int, layers: list, device: torch.device) -> dict:
    """One row of the table: `layers` (w4a4_layers.make_layers, in the variant's format) chained in
    one graph at `rows` rows, timed without the profiler, then profiled."""
    fmt, own_scales = variant_format(variant)
    layer_count = len(layers)
    hidden = w4a4_layers.LLAMA_8B_DIMS[0]
    h = torch.randn(rows, hidden, device=device, dtype=torch.bfloat16)
    r = torch.randn(rows, hidden, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        w4a4_layers.calibrate(layers, fmt, h, r)
        step = w4a4_layers.chained(layers, functools.partial(w4a4_layers.fp4_layer, fmt=fmt, own_scales=own_scales), h, r)
        graph = captured_graph(step, h, device)
        unprofiled = statistics.median(timed_calls(graph.replay, device, TIMED_REPLAYS)[0]) / layer_count
        runs = profiled_kernels(graph, REPLAYS, keep=is_fp4ops)
    spans, ends, kernels = [], [], None
    for run in runs:
        try:
            grouped = layers_of(run)
        except ProfileError as error:
            raise ProfileError(f"{variant}, {rows} rows: {error}; the kernels around it (us from the first start):\n"
                               + listing(run, error.kernel), error.kernel) from error
        if len(grouped) != layer_count:
            raise RuntimeError(f"{variant}, {rows} rows: {len(grouped)} layers in the profile, expected {layer_count}")
        spans += layer_spans(grouped)
        ends += linear_kernel_ends(grouped)
        kernels = kernels or stage_kernels(grouped[0])
    medians = {name: statistics.median(s[name] for s in spans) for name in (*STAGES, "period")}
    return {"variant": variant, "rows": rows, "layers": layer_count, "span_us": {s: medians[s] for s in STAGES},
            "period_us": medians["period"], "unprofiled_us": unprofiled, "kernels": kernels,
            "linear_ends_us": median_linear_ends(ends)}


def row_cells(row: dict) -> list[float]:
    return [row["span_us"][s] for s in STAGES] + [row["period_us"], row["unprofiled_us"]]


def own_g_costs(rows: list[dict]) -> list[list]:
    """Per batch where both were measured: "nvfp4 own g" minus "nvfp4", each stage and the period (us)."""
    static = {r["rows"]: r for r in rows if r["variant"] == "nvfp4"}
    body = []
    for own in (r for r in rows if r["variant"] == "nvfp4 own g" and r["rows"] in static):
        base = static[own["rows"]]
        body.append([own["rows"], *(a - b for a, b in zip(row_cells(own), row_cells(base)))])
    return body


def linear_ends_cell(by_role: dict) -> str:
    return " / ".join(f"{by_role[part]:.2f}" if part in by_role else "-" for part in LINEAR_ROLES)


def markdown(result: dict) -> str:
    head = ["variant", "rows", *(f"{s} us" for s in STAGES), "period us", "unprofiled us"]
    body = [[r["variant"], r["rows"], *row_cells(r)] for r in result["rows"]]
    text = (f"# W4A4 layer timeline: {result['banner_line']}\n\n"
            "Each stage's span (the previous stage's end to its own: what it adds to the chain), medians over "
            "the layers of each graph replay (python -m benchmarks.w4a4_timeline); the spans add up to the period.\n\n"
            + tabulate(body, head, tablefmt="github", floatfmt=".2f") + "\n")
    costs = own_g_costs(result["rows"])
    if costs:
        text += ("\nWhat dynamic activation scales add (nvfp4 own g - nvfp4), us:\n\n"
                 + tabulate(costs, ["rows", *STAGES, "period", "unprofiled"], tablefmt="github", floatfmt="+.2f") + "\n")
    ends = [[r["variant"], r["rows"], *(linear_ends_cell(r["linear_ends_us"][s]) for s in LINEAR_STAGES)]
            for r in result["rows"] if "linear_ends_us" in r]  # runs before the key have none
    if ends:
        text += ("\nThe linears' kernels: when each ends after the stage before (x decode / MMA kernel / reduction, "
                 "us; the reduction's is the stage's span, and a negative x decode ended under the stage before):\n\n"
                 + tabulate(ends, ["variant", "rows", *LINEAR_STAGES], tablefmt="github", disable_numparse=True) + "\n")
    if result.get("failed"):  # runs before failing rows were kept have no key
        text += "\nNot measured (the profile was not whole layers of the chain): " + "; ".join(result["failed"]) + ".\n"
    paths = [[r["variant"], r["rows"], *(" + ".join(r["kernels"][s]) for s in PRODUCER_STAGES)] for r in result["rows"]]
    return text + ("\nThe producers' kernels (first layer profiled):\n\n"
                   + tabulate(paths, ["variant", "rows", *PRODUCER_STAGES], tablefmt="github") + "\n")


def plot(result: dict, path: pathlib.Path) -> None:
    """One horizontal bar per (variant, rows): the period split into the stages' spans, with the
    unprofiled time per layer marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    height = 0.3 * len(rows) + 2.0  # inches
    fig, ax = plt.subplots(figsize=(10, height))
    places = range(len(rows))
    left = [0.0] * len(rows)
    colors = plt.get_cmap("tab10").colors
    for i, stage in enumerate(STAGES):
        widths = [r["span_us"][stage] for r in rows]
        ax.barh(places, widths, left=left, color=colors[i % len(colors)], label=stage)
        left = [a + b for a, b in zip(left, widths)]
    ax.scatter([r["unprofiled_us"] for r in rows], places, marker="|", s=160, color="black", zorder=3,
               label="per layer without the profiler")
    ax.set_yticks(list(places), [f"{r['variant']}, {r['rows']} row{'s' if r['rows'] != 1 else ''}" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="us per layer (median over the layers of the replays)",
           title="Where a W4A4 decoder layer's time goes in the decode graph")
    fig.legend(fontsize=7, loc="lower center", ncol=5)
    fig.suptitle(result["banner_line"], fontsize=8)
    fig.tight_layout(rect=(0, 0.55 / height, 1, 1))  # a strip at the bottom for the legend
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: dict, out: pathlib.Path, tag: str) -> None:
    (out / f"w4a4_timeline_{tag}.md").write_text(markdown(result))
    plot(result, out / f"w4a4_timeline_{tag}.png")


def comparison(base: dict, new: dict) -> str:
    """Markdown: for each (variant, rows) in both runs, every stage's span, the period and the
    unprofiled time, new - base (us), so that a slower layer shows which stage moved."""
    base_rows = {(r["variant"], r["rows"]): r for r in base["rows"]}
    body = []
    for r in new["rows"]:
        b = base_rows.get((r["variant"], r["rows"]))
        if b is not None:
            body.append([r["variant"], r["rows"], *(f"{r['span_us'][s] - b['span_us'][s]:+.2f}" for s in STAGES),
                         f"{b['period_us']:.2f} -> {r['period_us']:.2f}", f"{b['unprofiled_us']:.2f} -> {r['unprofiled_us']:.2f}"])
    head = ["variant", "rows", *STAGES, "period us", "unprofiled us"]
    return (f"# W4A4 layer timeline, two runs\n\nbase: {base['banner_line']}\n\nnew: {new['banner_line']}\n\n"
            "Each stage's span new - base (us); the period and unprofiled time base -> new; rows both runs measured.\n\n"
            + (tabulate(body, head, tablefmt="github", disable_numparse=True) if body else "(no row in common)") + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=ROWS, help="batch sizes (decode rows, at most 64; 128 on Hopper)")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                   help='"nvfp4" (static activation scales), "nvfp4 own g" (dynamic), "mxfp4"')
    p.add_argument("--layers", type=int, default=LAYERS, help="layers per graph (at least 2)")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--tag", default=None, help="file name tag (default: the GPU, e.g. h100)")
    p.add_argument("--replot", metavar="JSON", default=None, help="draw the .md and .png of a saved run again (no GPU needed)")
    p.add_argument("--compare", nargs=2, metavar=("BASE", "NEW"), default=None,
                   help="print two saved runs' stages side by side (no GPU needed)")
    args = p.parse_args(argv)
    if args.layers < 2:
        p.error("--layers: at least 2 (a replay's first layer gives no period)")
    return args


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    saved = saved_run_command(args, "w4a4_timeline_", write_outputs, comparison)
    if saved is not None:
        return saved
    if not torch.cuda.is_available():
        print("w4a4_timeline needs a CUDA GPU", file=sys.stderr)
        return None
    device = torch.device("cuda")
    info = banner(device)
    result = {"banner": info, "banner_line": banner_line(info), "rows": [], "failed": []}
    print(result["banner_line"], flush=True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = args.tag or info["gpu"].split()[-1].lower()
    layers = {}
    for variant, rows in itertools.product(args.variants, args.rows):
        fmt = variant_format(variant)[0]
        if fmt not in layers:
            layers.clear()  # one format's weights on the GPU at a time
            layers[fmt] = w4a4_layers.make_layers(args.layers, fmt, device)
        try:
            row = measure(variant, rows, layers[fmt], device)
        except ProfileError as error:  # the other rows still tell where the time goes
            print(error, file=sys.stderr, flush=True)
            result["failed"].append(f"{variant}, {rows} rows")
            continue
        result["rows"].append(row)
        print(f"  {variant}, {rows} rows: period {row['period_us']:.2f} us (unprofiled {row['unprofiled_us']:.2f}); "
              + ", ".join(f"{s} {row['span_us'][s]:.2f}" for s in STAGES), flush=True)
        (out / f"w4a4_timeline_{tag}.json").write_text(json.dumps(result, indent=1))
    write_outputs(result, out, tag)
    print(markdown(result))
    return result


if __name__ == "__main__":
    sys.exit(1 if (main() or {}).get("failed") else 0)
