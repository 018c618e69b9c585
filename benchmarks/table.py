"""Render a bench_ops.py JSON file as a Markdown table: python benchmarks/table.py results/ops_h100.json"""

from __future__ import annotations

import json
import sys

from tabulate import tabulate


def render(path: str) -> str:
    with open(path) as f:
        result = json.load(f)
    b, c = result["banner"], result["ceilings_GBps"]
    head = (f"{b['gpu']}, driver {b.get('driver', '?')}, torch {b['torch']} (CUDA {b['cuda']}), commit {b['commit']}; "
            f"same-run ceilings: copy {c['copy']:.0f} GB/s, read {c['read']:.0f} GB/s.\n\n")
    rows = [[r["op"], r["dtype"], f"2^{r['numel'].bit_length() - 1}", f"{r['us']:.1f}", f"{r['GB/s']:.0f}",
             f"{r['pct']:.1f}% of {r['ceiling']}"] for r in result["rows"]]
    return head + tabulate(rows, headers=["op", "input/output dtype", "elements", "us", "GB/s", "share of ceiling"],
                           tablefmt="github")


if __name__ == "__main__":
    print(render(sys.argv[1]))
