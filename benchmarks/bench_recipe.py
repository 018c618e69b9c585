"""Cost of each NVFP4 training-recipe option over the plain quantizer, on the GPU.

    python -m benchmarks.bench_recipe [--sizes 26 28] [--k 8192] [--json PATH]   (from the repository root)

x is a bf16 [2^n / K, K] matrix, the global scale is given (so every row times one pass over x),
cold L2, CUDA events, median of 30 calls (the suite's harness, benchmarks.suite.harness; the suite's
"nvfp4 recipe" family times the same calls and checks their outputs). "cost" is the time
over the plain quantizer's; "share" is bandwidth against the same-run copy ceiling with the bytes
each variant must move (rowwise + columnwise writes two outputs).
"""

from __future__ import annotations

import argparse
import json

import torch
from tabulate import tabulate

import fp4ops

from benchmarks.suite.cases import RECIPE_VARIANTS
from benchmarks.suite.harness import Timer, banner, banner_line, measure_ceilings


def rows_for(numel: int, k: int, copy_gbs: float, timer: Timer) -> list[dict]:
    x = torch.randn(numel // k, k, device="cuda", dtype=torch.bfloat16)
    g = fp4ops.amax(x) / 2688
    out_bytes = 0.5 + 1 / 16
    cases = [(name, lambda both=both, o=options: (fp4ops.quantize_nvfp4_rowwise_columnwise if both
                                                   else fp4ops.quantize_nvfp4)(x, g, **o), 2 if both else 1)
             for name, options, both in RECIPE_VARIANTS]
    out = []
    plain_us = None
    for name, fn, outputs in cases:
        us = timer.cold(fn).us
        plain_us = plain_us or us
        gbs = numel * (2 + outputs * out_bytes) / us / 1e3
        out.append({"variant": name, "numel": numel, "k": k, "us": us, "GB/s": gbs, "pct_copy": 100 * gbs / copy_gbs,
                    "cost_vs_plain": us / plain_us / outputs})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[26, 28], help="log2 of the element counts")
    parser.add_argument("--k", type=int, default=8192, help="columns of x")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    timer = Timer(torch.device("cuda"))
    info, ceil = banner(timer.device), measure_ceilings(timer)
    print(banner_line(info, ceil))
    rows = []
    for log2 in args.sizes:
        rows += rows_for(1 << log2, args.k, ceil["copy"], timer)
    print(tabulate([[r["variant"], f"2^{r['numel'].bit_length() - 1}", f"{r['us']:.1f}", f"{r['GB/s']:.0f}",
                     f"{r['pct_copy']:.1f}%", f"{r['cost_vs_plain']:.2f}x"] for r in rows],
                   headers=["variant", "numel", "us", "GB/s", "share of copy", "time / plain (per output)"],
                   tablefmt="github"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"banner": info, "ceilings_GBps": ceil, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
