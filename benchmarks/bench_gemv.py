"""Batched FP4 GEMV bandwidth on the GPU against the same-run copy ceiling and two baselines.

    python benchmarks/bench_gemv.py [--json PATH]

Shapes (M, K, L): the seed problem's three and a 2^28-weight one. Bytes per PERF.md: per batch
M*K*(0.5 + 1/16) + K*(0.5 + 1/16) + 2M (FP4 x FP4) or M*K*(0.5 + 1/16) + 2K + 2M (FP4 x bf16).
Cold L2, CUDA events, median of 30. Baselines in the same run: dequantize A to bf16 then
torch.matmul, and a bf16 torch.matmul GEMV of the same shape. The timed output is checked
against the float64 reference's error bound.
"""

from __future__ import annotations

import argparse
import json

import torch
from bench_ops import banner, ceilings, time_us
from tabulate import tabulate

import fp4ops
from fp4ops import reference

SHAPES = [(7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4), (16384, 16384, 1)]


def check(y: torch.Tensor, a, b) -> None:
    """The timed output against SPEC 5's bound on the first 64 rows of batch 0."""
    rows = slice(0, 64)
    a_small = fp4ops.NVFP4Tensor(a.data[:1, rows].cpu(), a.scales[:1, rows].cpu(), a.global_scale.cpu())
    b_small = (fp4ops.NVFP4Tensor(b.data[:1].cpu(), b.scales[:1].cpu(), b.global_scale.cpu())
               if isinstance(b, fp4ops.NVFP4Tensor) else b[:1].cpu())
    err = (y[:1, rows].cpu().double() - reference.gemv_float64(a_small, b_small)).abs()
    assert (err <= reference.gemv_error_bound(a_small, b_small, y.dtype)).all(), "GEMV output outside SPEC 5's bound"


def rows_for(m: int, k: int, l: int, ceil: dict) -> list[dict]:
    a = fp4ops.quantize_nvfp4(torch.randn(l, m, k, device="cuda", dtype=torch.bfloat16))
    b_dense = torch.randn(l, k, device="cuda", dtype=torch.bfloat16)
    b_fp4 = fp4ops.quantize_nvfp4(b_dense)
    w_bf16 = torch.randn(l, m, k, device="cuda", dtype=torch.bfloat16)
    a_bytes = m * k * (0.5 + 1 / 16)
    out = []
    for name, b, bytes_per_batch in (("fp4 x fp4", b_fp4, a_bytes + k * (0.5 + 1 / 16) + 2 * m),
                                     ("fp4 x bf16", b_dense, a_bytes + 2 * k + 2 * m)):
        us = time_us(lambda: fp4ops.gemv(a, b))
        check(fp4ops.gemv(a, b), a, b)
        gbs = l * bytes_per_batch / us / 1e3
        out.append({"impl": f"fp4ops {name}", "M": m, "K": k, "L": l, "us": us, "GB/s": gbs,
                    "pct_copy": 100 * gbs / ceil["copy"]})
    fp4_us = out[1]["us"]
    dq_us = time_us(lambda: torch.matmul(a.dequantize(torch.bfloat16), b_dense.unsqueeze(-1)))
    bf16_us = time_us(lambda: torch.matmul(w_bf16, b_dense.unsqueeze(-1)))
    out.append({"impl": "dequantize + torch.matmul", "M": m, "K": k, "L": l, "us": dq_us, "speedup_vs": dq_us / fp4_us})
    out.append({"impl": "bf16 torch.matmul", "M": m, "K": k, "L": l, "us": bf16_us, "speedup_vs": bf16_us / fp4_us})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    info, ceil = banner(), ceilings()
    print(f"{info['gpu']} | commit {info['commit']} | copy {ceil['copy']:.0f} GB/s")
    rows = [r for shape in SHAPES for r in rows_for(*shape, ceil)]
    print(tabulate([[r["impl"], f"({r['M']}, {r['K']}, {r['L']})", f"{r['us']:.1f}",
                     f"{r['GB/s']:.0f}" if "GB/s" in r else "", f"{r['pct_copy']:.1f}%" if "pct_copy" in r else "",
                     f"fp4ops fp4 x bf16 is {r['speedup_vs']:.2f}x faster" if "speedup_vs" in r else ""] for r in rows],
                   headers=["implementation", "(M, K, L)", "us", "GB/s", "% of copy", "vs baseline"], tablefmt="github"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"banner": info, "ceilings_GBps": ceil, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
