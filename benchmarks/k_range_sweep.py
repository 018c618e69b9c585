"""The linear kernels' K ranges swept: each weight's time per layer at every forced count of K ranges,
against the count linear_splits chooses. From the repository root:

    python -m benchmarks.k_range_sweep --counts 1 2 3 4 6 8 12 16 --out /tmp/sweep -- \\
        --shapes 5120,22016 28672,4096 --rows 1 4 8 16 64 --formats nvfp4 --dtypes bfloat16
    python -m benchmarks.k_range_sweep --plan ...          (the sides and the A/B command, no build)
    python -m benchmarks.k_range_sweep --render /tmp/sweep  (the tables and plot of a sweep's runs)

What it does:
1. copies this tree (benchmarks/ab_bench.py's copy) to <work>/sweep with a knob in linear_splits
   (csrc/cuda/linear.cu): FP4OPS_EXP_SPLITS=C returns min(C, steps) ranges. The knob lives in the
   copy only and never lands: the count must depend on N and K alone (batch invariance, and the
   same bits on every GPU). The kernels split the steps as steps * r / C, so every count from 1 to
   the steps is a valid launch (ranges differ by at most one step, none is empty);
2. runs that copy's ab_bench.py --bench decode, one build: 'base' is the rule, and one --env side
   `ranges<C>_` per count (decode_stream arguments after '--'; --fp4-only and --no-llama added);
3. writes <out>/k_range_sweep.md and .png: per weight, format and x, each count's time over the
   rule's (the fastest run of each), one row per row count. Counts past a weight's steps run as its
   steps and are shown once.

The rule's own count is not printed: it is linear.cu's, which this script does not mirror (the
product tests' copy of it, tests/test_linear.py's linear_splits, does).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import subprocess
import sys
import tempfile

from benchmarks import ab_bench

DEFAULT_COUNTS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 20, 24, 28]
KNOB_ANCHOR = "int linear_splits(int64_t n, int64_t steps) {\n"
KNOB = ("  if (const char* forced = std::getenv(\"FP4OPS_EXP_SPLITS\"); forced != nullptr && std::atoll(forced) >= 1) {\n"
        "    return static_cast<int>(std::min<int64_t>(std::atoll(forced), steps));  // k_range_sweep.py's knob\n"
        "  }\n")
INCLUDE_ANCHOR = "#include <algorithm>\n"
# (n, k, format, x) -> rows -> forced count -> its time over the rule's
Tables = dict[tuple, dict[int, dict[int, float]]]


def side_name(count: int) -> str:
    """The ab_bench side of a forced count (side names end in a letter or '_': runs add the round)."""
    return f"ranges{count}_"


def count_of(side: str) -> int | None:
    """The forced count of a side named by side_name, or None (the rule's 'base')."""
    return int(side[len("ranges"):-1]) if side.startswith("ranges") and side.endswith("_") else None


def with_knob(linear_cu: str) -> str:
    """linear.cu's text with the knob at the top of linear_splits (and <cstdlib> for getenv)."""
    if linear_cu.count(KNOB_ANCHOR) != 1 or linear_cu.count(INCLUDE_ANCHOR) != 1:
        raise ValueError("csrc/cuda/linear.cu no longer has `int linear_splits(int64_t n, int64_t steps) {` and "
                         "`#include <algorithm>` once each: update k_range_sweep.py's anchors")
    patched = linear_cu.replace(KNOB_ANCHOR, KNOB_ANCHOR + KNOB)
    return patched.replace(INCLUDE_ANCHOR, INCLUDE_ANCHOR + "#include <cstdlib>\n")


def knob_tree(work: pathlib.Path) -> pathlib.Path:
    """This tree copied to work/sweep, its linear.cu with the knob."""
    tree = ab_bench.copy_with_base_kernels(None, work, ab_bench.REPO / "csrc", side="sweep")
    linear_cu = tree / "csrc" / "cuda" / "linear.cu"
    linear_cu.write_text(with_knob(linear_cu.read_text()))
    return tree


def ab_command(tree: pathlib.Path, counts: list[int], rounds: int, out: pathlib.Path, time_budget: float | None,
               bench_args: list[str], plan: bool = False) -> list[str]:
    """The copy's ab_bench.py run: one build, the rule as 'base', one --env side per count."""
    command = [sys.executable, str(tree / "benchmarks" / "ab_bench.py"), "--bench", "decode", "--rounds", str(rounds),
               "--out", str(out)]
    command += [arg for count in counts for arg in ("--env", f"{side_name(count)}=FP4OPS_EXP_SPLITS={count}")]
    if time_budget is not None:
        command += ["--time-budget", str(time_budget)]
    if plan:
        command.append("--plan")
    extra = [flag for flag in ("--fp4-only", "--no-llama") if flag not in bench_args]
    return command + ["--", *bench_args, *extra]


def fastest_times(out: pathlib.Path) -> dict[tuple, dict[str, float]]:
    """(n, k, format, x, rows) -> side -> its fastest FP4 layer time (us) over the rounds, from the
    runs' decode JSONs under out/<side><round>/."""
    times: dict[tuple, dict[str, float]] = {}
    for run_dir in sorted(path for path in out.iterdir() if path.is_dir()):
        side = run_dir.name.rstrip("0123456789")
        if side != "base" and count_of(side) is None:
            continue
        for result_file in run_dir.glob("decode_*.json"):
            for row in json.loads(result_file.read_text())["rows"]:
                key = (row["n"], row["k"], row["format"], row["dtype"], row["rows"])
                seen = times.setdefault(key, {})
                seen[side] = min(seen.get(side, math.inf), row["fp4_us"])
    return times


def sweep_tables(times: dict[tuple, dict[str, float]]) -> Tables:
    """(n, k, format, x) -> rows -> effective count -> time over the rule's time, where the rule's
    time is known; a count past the weight's steps runs as its steps (its fastest side kept)."""
    tables: dict[tuple, dict[int, dict[int, float]]] = {}
    for (n, k, fmt, x, rows), by_side in sorted(times.items()):
        if "base" not in by_side:
            continue
        ratios: dict[int, float] = {}
        for side, us in by_side.items():
            if (count := count_of(side)) is not None:
                effective = min(count, k // 128)
                ratios[effective] = min(ratios.get(effective, math.inf), us / by_side["base"])
        tables.setdefault((n, k, fmt, x), {})[rows] = ratios
    return tables


def render_markdown(times: dict[tuple, dict[str, float]], tables: Tables, banner: str) -> str:
    lines = [banner, ""]
    for (n, k, fmt, x), by_rows in tables.items():
        counts = sorted({count for ratios in by_rows.values() for count in ratios})
        lines += [f"## {n} x {k}, {fmt}, x {x} ({k // 128} steps of 128)", "",
                  "| rows | rule us | " + " | ".join(map(str, counts)) + " | best |",
                  "|" + "---|" * (len(counts) + 3)]
        for rows, ratios in sorted(by_rows.items()):
            best = min(ratios, key=ratios.get)
            cells = [f"{ratios[c]:.3f}" if c in ratios else "-" for c in counts]
            lines.append(f"| {rows} | {times[(n, k, fmt, x, rows)]['base']:.2f} | " + " | ".join(cells)
                         + f" | {best} ({ratios[best]:.3f}) |")
        lines.append("")
    return "\n".join(lines)


def render_plot(tables: Tables, path: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(6, max(1, len(tables)))
    grid_rows = math.ceil(len(tables) / columns)
    fig, axes = plt.subplots(grid_rows, columns, figsize=(3.6 * columns, 3.0 * grid_rows), squeeze=False)
    for ax in axes.ravel()[len(tables):]:
        ax.set_visible(False)
    for ax, ((n, k, fmt, x), by_rows) in zip(axes.ravel(), tables.items()):
        for rows, ratios in sorted(by_rows.items()):
            counts = sorted(ratios)
            ax.plot(counts, [ratios[c] for c in counts], marker="o", markersize=3, label=f"{rows} rows")
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{n} x {k} {fmt}, x {x}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("K ranges", fontsize=7)
    axes[0][0].set_ylabel("time / the rule's time", fontsize=7)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    plt.close(fig)


def render(out: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """k_range_sweep.md and .png in out, from the runs there."""
    times = fastest_times(out)
    tables = sweep_tables(times)
    if not tables:
        raise SystemExit(f"{out}: no decode runs of the rule ('base') and forced counts ('ranges<C>_') to compare")
    banner = ("# K ranges swept (benchmarks/k_range_sweep.py)\n\nEach weight's FP4 layer time at a forced count of K "
              "ranges over its time at linear_splits' count (below 1: the forced count is faster), each side's "
              f"fastest run; the runs' banners and logs are in {out}.")
    markdown, plot = out / "k_range_sweep.md", out / "k_range_sweep.png"
    markdown.write_text(render_markdown(times, tables, banner))
    render_plot(tables, plot)
    return markdown, plot


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=DEFAULT_COUNTS, help="forced counts of K ranges")
    parser.add_argument("--rounds", type=int, default=1, help="runs per side (default 1)")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="folder for the runs and the tables")
    parser.add_argument("--work", type=pathlib.Path, default=None, help="folder for the tree's copy")
    parser.add_argument("--time-budget", type=float, default=None, metavar="SECONDS", help="ab_bench.py's")
    parser.add_argument("--plan", action="store_true", help="print the sides and the command, build nothing")
    parser.add_argument("--render", type=pathlib.Path, default=None, metavar="OUT",
                        help="only write the tables and plot of the sweep whose runs are in OUT")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="after '--': decode_stream arguments")
    args = parser.parse_args(argv)
    if args.render is not None:
        print("\n".join(map(str, render(args.render))))
        return
    if any(count < 1 for count in args.counts) or len(set(args.counts)) != len(args.counts):
        parser.error("--counts must be distinct positive integers")
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    work = (args.work or pathlib.Path(tempfile.mkdtemp(prefix="fp4ops-sweep-"))).resolve()
    out = (args.out or work / "results").resolve()
    tree = knob_tree(work)
    command = ab_command(tree, args.counts, args.rounds, out, args.time_budget, bench_args, plan=args.plan)
    subprocess.run(command, cwd=tree, check=True)
    if not args.plan:
        print("\n".join(map(str, render(out))))


if __name__ == "__main__":
    main()
