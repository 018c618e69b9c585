"""Turns suite results (JSON) into the printed table, a Markdown report, one PNG plot per op
family and the README's headline table. Needs no GPU: `python -m benchmarks.suite --report FILE`."""

from __future__ import annotations

import os
import re

from tabulate import tabulate

from . import targets
from .cases import DECODE_MAX_NUMEL, PRODUCER_PLAIN
from .targets import size_label

README_BEGIN, README_END = "<!-- bench:headline:begin -->", "<!-- bench:headline:end -->"


def _us(us: float) -> str:
    return f"{us:.2f}" if us < 100 else f"{us:.0f}"


def ordered(rows: list[dict]) -> list[dict]:
    """By family (in run order), op, dtype and size, fp4ops before the baselines."""
    families = list(dict.fromkeys(r["family"] for r in rows))
    return sorted(rows, key=lambda r: (families.index(r["family"]), r["op"], r["dtype"], r["numel"],
                                       r["impl"] != "fp4ops", r["impl"]))


def table(result: dict) -> str:
    rows = []
    for r in ordered(result["rows"]):
        if "us" not in r:
            rows.append([r["op"], r["impl"], r["dtype"], size_label(r), "", "", "", "", f"skipped: {r['skip']}"])
            continue
        graph = r.get("graph_note", "")
        if r.get("us_graph") is not None:
            graph = _us(r["us_graph"]) + (" (cold, distinct inputs)" if r.get("graph_cold") else "")
        launches = f" ({r['launches']} launch{'es' if r['launches'] != 1 else ''})" if r.get("launches") else ""
        rows.append([r["op"], r["impl"], r["dtype"], size_label(r), _us(r["us"]), graph, f"{r['GBps']:.0f}",
                     f"{r['pct']:.1f}% of {r['ceiling']}", r["check"] + launches])
    return tabulate(rows, headers=["op", "implementation", "dtype", "size", "us (cold L2)", "us (graph replay)",
                                   "GB/s", "share of ceiling", "output check"], tablefmt="github")


def producers_table(result: dict) -> str:
    """Each fused producer against its unfused sequence (speed-up, cold and graph replay) and its
    plain quantizer (% of copy, both); '' where the run has no producer rows."""
    rows = []
    order = list(PRODUCER_PLAIN)  # the producers in run order, each by size
    pairs = sorted(targets.producer_pairs(result, sizes=None), key=lambda t: (order.index(t[0]["op"]), t[0]["numel"]))
    for r, unfused, plain in pairs:
        graph = (f"{unfused['us_graph'] / r['us_graph']:.2f}x" if unfused and unfused.get("us_graph")
                 and r.get("us_graph") else "-")
        rows.append([r["op"], size_label(r), _us(r["us"]), _us(unfused["us"]) if unfused else "-",
                     f"{unfused['us'] / r['us']:.2f}x" if unfused else "-", graph, f"{r['pct']:.1f}%",
                     f"{plain['pct']:.1f}%" if plain else "-", f"{plain['pct'] / r['pct']:.3f}" if plain else "-"])
    if not rows:
        return ""
    return tabulate(rows, headers=["producer (bf16 in)", "rows x H", "us (cold L2)", "unfused us", "speed-up",
                                   "speed-up (graph replay)", "% of copy", "plain quantizer % of copy",
                                   "plain / producer share"], tablefmt="github")


def heading(result: dict) -> str:
    b = result["banner"]
    parts = result.get("parts") or [{"commit": b["commit"], "ceilings_GBps": result["ceilings_GBps"]}]
    runs = "; ".join(f"commit {p['commit']}, same-run ceilings copy {p['ceilings_GBps']['copy']:.0f} GB/s, "
                     f"read {p['ceilings_GBps']['read']:.0f} GB/s" for p in parts)
    return f"{b['gpu']}, driver {b.get('driver', '-')}, torch {b['torch']} (CUDA {b['cuda']}); {len(parts)} run(s): {runs}."


def markdown(result: dict) -> str:
    producers = producers_table(result)
    return (f"# Benchmark suite: {result['banner']['gpu']}\n\n{heading(result)}\n\n## Targets\n\n"
            f"{targets.render(targets.evaluate(result))}\n\n"
            + (f"## Fused producers against the unfused sequence and the plain quantizer\n\n{producers}\n\n"
               if producers else "")
            + f"## Every row\n\n{table(result)}\n")


def merge_by_gpu(results: list[dict]) -> list[dict]:
    """One result per GPU, in first-seen order: the rows of runs on the same GPU concatenated (each
    row keeps the share of its own run's ceiling); the banner and ceilings are the first run's,
    the others' listed under "parts"."""
    merged: dict[str, dict] = {}
    for res in results:
        gpu = res["banner"]["gpu"]
        if gpu not in merged:
            merged[gpu] = {**res, "rows": list(res["rows"]), "parts": []}
        else:
            merged[gpu]["rows"] += res["rows"]
        # A file merged earlier (a family re-run into a saved suite) keeps its own parts.
        merged[gpu]["parts"] += res.get("parts") or [{"commit": res["banner"]["commit"], "ceilings_GBps": res["ceilings_GBps"],
                                                      "families": res.get("config", {}).get("families")}]
    return list(merged.values())


def family_commit(result: dict, family: str) -> str:
    """The commit that measured `family`: the last merged part that ran it, else the banner's."""
    runs = [p["commit"] for p in result.get("parts") or [] if family in (p.get("families") or [])]
    return runs[-1] if runs else result["banner"]["commit"]


def gpu_tag(result: dict) -> str:
    """'h100', 'h200', ... from the GPU's name; 'cpu' for the CPU mode."""
    name = result["banner"]["gpu"]
    match = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name)
    return match.group(1).lower() if match else re.sub(r"\W+", "_", name.split("(")[0].strip().lower())


def plot(result: dict, out_dir: str, prefix: str) -> list[str]:
    """One PNG per family: % of the ceiling against size (GEMV: against shape), one line per
    implementation and dtype, the 100% line drawn. Returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    families = dict.fromkeys(r["family"] for r in result["rows"])
    for family in families:
        rows = [r for r in result["rows"] if r["family"] == family and "us" in r]
        if not rows:
            continue
        # The decode shapes are in the table only (the GEMV's x axis is its shape list).
        sized = rows if family == "gemv" else [r for r in rows if r["numel"] > DECODE_MAX_NUMEL]
        if not sized:
            continue
        fig, ax = plt.subplots(figsize=(9, 5))
        ax.set_prop_cycle(color=plt.cm.tab20.colors)  # more lines than tab10 has colors
        if family == "gemv":
            shapes = list(dict.fromkeys(tuple(r["shape"]) for r in rows))
            for line in dict.fromkeys((r["impl"], r["op"]) for r in rows):
                pts = [(shapes.index(tuple(r["shape"])), r["pct"]) for r in rows if (r["impl"], r["op"]) == line]
                ax.plot(*zip(*pts), marker="o", label=f"{line[0]}: {line[1].removeprefix('gemv ')}")
            ax.set_xticks(range(len(shapes)), [f"{m}x{k}x{l}" for m, k, l in shapes])
            ax.set_xlabel("(M, K, L)")
        else:
            for line in dict.fromkeys((r["impl"], r["op"], r["dtype"]) for r in sized):
                pts = sorted((r["numel"].bit_length() - 1, r["pct"]) for r in sized
                             if (r["impl"], r["op"], r["dtype"]) == line)
                style = "-" if line[0] == "fp4ops" else "--"
                ax.plot(*zip(*pts), style, marker="o", label=f"{line[0]}: {line[1]}, {line[2]}")
            ax.set_xlabel("log2(elements)")
        ax.axhline(100, color="black", linewidth=1)
        ceiling = rows[0]["ceiling"]
        ax.set_ylabel(f"% of same-run {ceiling} bandwidth")
        ax.set_title(f"{family}: {result['banner']['gpu']}, commit {family_commit(result, family)}")
        ax.set_ylim(0, 110)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path = os.path.join(out_dir, f"{prefix}_{family.replace(' ', '_')}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def headline(results: list[dict]) -> str:
    """The README table: fp4ops at 2^28 bf16 elements (GEMV: the 2^28-weight shape) per GPU, and
    the speed-ups over the same run's baselines on the first GPU. The recipe options stay out."""
    first = results[0]
    index = {(r["op"], r["impl"], r["dtype"], r["numel"]): r for r in first["rows"] if "us" in r}

    def speedup(op, impl, dtype, numel, ours_us):
        b = index.get((op, impl, dtype, numel))
        return f"{b['us'] / ours_us:.1f}x" if b else "-"

    picks = [(r["op"], r["dtype"], r["numel"]) for r in ordered(first["rows"]) if r["impl"] == "fp4ops" and "us" in r
             and r["family"] not in ("nvfp4 recipe", "producers")  # these have their own tables
             and ((r["family"] != "gemv" and r["dtype"] == "bfloat16" and r["numel"] == 1 << 28)
                  or (r["family"] == "gemv" and r["numel"] == 1 << 28))]
    rows = []
    for op, dtype, numel in picks:
        mine = index[(op, "fp4ops", dtype, numel)]
        shares = []
        for res in results:
            other = next((r for r in res["rows"] if "us" in r and (r["op"], r["impl"], r["dtype"], r["numel"])
                          == (op, "fp4ops", dtype, numel)), None)
            shares.append(f"{other['pct']:.0f}% of {other['ceiling']}" if other else "-")
        base_dtype = "nvfp4 x bf16" if mine["family"] == "gemv" else dtype
        rows.append([op, *shares, f"{mine['us']:.0f}",
                     speedup(op, "reference (torch.compile)", dtype, numel, mine["us"]),
                     speedup(op, "torch bf16->fp8 cast", dtype, numel, mine["us"]),
                     speedup(op, "torchao", dtype, numel, mine["us"]),
                     speedup(op, "dequantize + torch.matmul", base_dtype, numel, mine["us"])])
    gpus = [res["banner"]["gpu"].replace("NVIDIA ", "") for res in results]
    return tabulate(rows, headers=["op (bf16, 2^28 elements / weights)", *gpus, f"us ({gpus[0]})",
                                   "vs torch.compile(reference)", "vs fp8 cast", "vs torchao",
                                   "vs dequantize + matmul"], tablefmt="github")


def update_readme(path: str, text: str) -> None:
    with open(path) as f:
        readme = f.read()
    if README_BEGIN not in readme or README_END not in readme:
        raise ValueError(f"{path}: no {README_BEGIN} ... {README_END} markers to put the headline table between")
    start, end = readme.index(README_BEGIN) + len(README_BEGIN), readme.index(README_END)
    with open(path, "w") as f:
        f.write(readme[:start] + "\n" + text + "\n" + readme[end:])
