"""Bandwidth of amax, quantize and dequantize on the GPU, as a share of the same-run ceilings.

    python benchmarks/bench_ops.py [--sizes 26 28] [--dtypes bfloat16 float32] [--json PATH]

Cold L2 (a 256 MB buffer is rewritten before each timed call), CUDA events, median of 30 calls,
bytes per element as in PERF.md. The output of the last timed call is checked against the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess

import torch
from tabulate import tabulate

import fp4ops
from fp4ops.timing import median_time_us

FLUSH = None


def flush_l2() -> None:
    global FLUSH
    if FLUSH is None:
        FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    FLUSH.fill_(1)


def time_us(fn, reps: int = 30) -> float:
    """Cold-L2 median of `reps` calls."""
    return median_time_us(fn, torch.device("cuda"), repeats=reps, before_each=flush_l2)


def ceilings() -> dict[str, float]:
    """Device copy (read + write) and read-only reduction bandwidth over 512 MB, in GB/s."""
    src = torch.randn(128 << 20, device="cuda")  # 512 MB
    dst = torch.empty_like(src)
    copy_us = time_us(lambda: dst.copy_(src))
    read_us = time_us(lambda: torch.amax(src))
    return {"copy": 2 * src.nbytes / copy_us / 1e3, "read": src.nbytes / read_us / 1e3}


def check(x: torch.Tensor, fmt: str, q) -> None:
    """The timed call's output, first 2^20 elements, against the CPU kernel."""
    n = 1 << 20
    piece = x[:n].cpu()
    if fmt == "nvfp4":
        ref = fp4ops.quantize_nvfp4(piece, q.global_scale.cpu())
        assert torch.equal(ref.data, q.data[: n // 2].cpu()), "nvfp4 data differs from the CPU kernel"
    else:
        ref = fp4ops.quantize_mxfp4(piece)
        assert torch.equal(ref.data, q.data[: n // 2].cpu()), "mxfp4 data differs from the CPU kernel"


def rows_for(numel: int, dtype: torch.dtype, ceil: dict[str, float]) -> list[dict]:
    x = torch.randn(numel, device="cuda", dtype=dtype)
    e = x.element_size()
    g = fp4ops.amax(x) / 2688
    nv, mx = fp4ops.quantize_nvfp4(x, g), fp4ops.quantize_mxfp4(x)
    cases = [
        ("amax", lambda: fp4ops.amax(x), e, "read"),
        ("nvfp4 quantize (scale given)", lambda: fp4ops.quantize_nvfp4(x, g), e + 0.5 + 1 / 16, "copy"),
        ("nvfp4 quantize (own amax)", lambda: fp4ops.quantize_nvfp4(x), 2 * e + 0.5 + 1 / 16, "copy"),
        ("mxfp4 quantize (floor)", lambda: fp4ops.quantize_mxfp4(x), e + 0.5 + 1 / 32, "copy"),
        ("mxfp4 quantize (rceil)", lambda: fp4ops.quantize_mxfp4(x, scale_rule="rceil"), e + 0.5 + 1 / 32, "copy"),
        ("nvfp4 dequantize", lambda: nv.dequantize(dtype), e + 0.5 + 1 / 16, "copy"),
        ("mxfp4 dequantize", lambda: mx.dequantize(dtype), e + 0.5 + 1 / 32, "copy"),
    ]
    out = []
    for name, fn, bytes_per_elem, ceiling in cases:
        us = time_us(fn)
        gbs = numel * bytes_per_elem / us / 1e3
        out.append({"op": name, "dtype": str(dtype).removeprefix("torch."), "numel": numel, "us": us, "GB/s": gbs,
                    "ceiling": ceiling, "pct": 100 * gbs / ceil[ceiling]})
    check(x, "nvfp4", fp4ops.quantize_nvfp4(x, g))
    check(x, "mxfp4", fp4ops.quantize_mxfp4(x))
    return out


def banner() -> dict:
    # FP4OPS_GIT_COMMIT names the commit where the tree was copied without its .git folder.
    commit = os.environ.get("FP4OPS_GIT_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "commit": commit or "unknown", "driver": driver_version(), "host": platform.node()}


def driver_version() -> str:
    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[26, 28], help="log2 of the element counts")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    info = banner()
    ceil = ceilings()
    print(f"{info['gpu']} | torch {info['torch']} CUDA {info['cuda']} | commit {info['commit']} | "
          f"copy {ceil['copy']:.0f} GB/s, read {ceil['read']:.0f} GB/s")
    rows = []
    for log2 in args.sizes:
        for dtype in args.dtypes:
            rows += rows_for(1 << log2, getattr(torch, dtype), ceil)
    print(tabulate([[r["op"], r["dtype"], f"2^{r['numel'].bit_length() - 1}", f"{r['us']:.1f}", f"{r['GB/s']:.0f}",
                     f"{r['pct']:.1f}% of {r['ceiling']}"] for r in rows],
                   headers=["op", "dtype", "numel", "us", "GB/s", "share"], tablefmt="github"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"banner": info, "ceilings_GBps": ceil, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
