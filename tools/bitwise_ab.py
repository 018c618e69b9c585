"""Bitwise A/B of two builds: save every op's outputs on fixed inputs under one build, compare them
under another. A kernel change that claims "the same bits" (a refactor, a new schedule, a dispatch
between equivalent paths) is held to it here, beyond what the tests' random inputs reach.

    PYTHONPATH=/path/to/base/python python tools/bitwise_ab.py save /tmp/outputs.pt
    PYTHONPATH=$PWD/python          python tools/bitwise_ab.py compare /tmp/outputs.pt

The cases: tests/every_op.py's call of every op (each quantizer option, both scale layouts, the
GEMVs, linears and fused producers) on three seeded inputs, and a sweep of fp4ops.linear over the
kernel family's dispatch (weight shapes with one or several K ranges, x staged per step or resident,
1-100 rows, bf16 / fp16 / FP4 x, bias, fp32 output, batch_invariant). `--device cpu` runs smaller
shapes (the CPU kernels take minutes at the GPU's sizes). `compare` prints how many outputs match
byte for byte and which do not, and exits with status 1 if any differs or is missing.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from conftest import same_bits  # noqa: E402
from every_op import every_op  # noqa: E402

import fp4ops  # noqa: E402

# (rows, K) of every_op's inputs: rows a multiple of 16 and at least 80 (its linears take 80 rows).
EVERY_OP_SHAPES = {"cuda": [(80, 1024), (96, 4096), (128, 192)], "cpu": [(80, 256), (96, 128)]}
# fp4ops.linear weights (N, K): several K ranges, a small N (4-warp CTAs), uneven ranges of 9-10
# steps (x resident up to 16 or 32 rows, then staged per step), one K range, and an N no multiple
# of 16 with ranges of 4 steps.
LINEAR_WEIGHTS = {"cuda": [(4096, 4096), (1024, 8192), (10240, 8576), (200, 512), (1000, 2048)],
                  "cpu": [(64, 256), (40, 512)]}
LINEAR_ROWS = [1, 3, 8, 9, 12, 16, 17, 33, 64, 100]


def linear_sweep(device: str, gen: torch.Generator) -> dict[str, torch.Tensor]:
    out = {}
    for n, k in LINEAR_WEIGHTS[device]:
        w_dense = torch.randn(n, k, generator=gen).to(device)
        bias = torch.randn(n, generator=gen).to(device, torch.bfloat16)
        for fmt, quantize in [("nvfp4", fp4ops.quantize_nvfp4), ("mxfp4", fp4ops.quantize_mxfp4)]:
            w = quantize(w_dense)
            for rows in LINEAR_ROWS:
                x32 = torch.randn(rows, k, generator=gen).to(device)
                for x_kind, x in [("bf16", x32.bfloat16()), ("fp16", x32.half()), ("fp4", quantize(x32))]:
                    y = fp4ops.linear(x, w, bias if rows == 3 else None, out_dtype=torch.float32 if rows == 9 else None,
                                      batch_invariant=rows == 100)
                    out[f"linear {n}x{k} {fmt} x={x_kind} rows={rows}"] = y
    return out


def outputs(device: str) -> dict[str, torch.Tensor]:
    """Every case's output, on the CPU, keyed by a readable name."""
    gen = torch.Generator().manual_seed(20261127)
    out = {}
    for rows, k in EVERY_OP_SHAPES[device]:
        x = torch.randn(rows, k, generator=gen).to(device)
        out.update({f"every_op {rows}x{k} {name}": y for name, y in every_op(x).items()})
    out.update(linear_sweep(device, gen))
    if device == "cuda":
        torch.cuda.synchronize()
    return {name: y.detach().cpu() for name, y in out.items()}


def compare(saved: dict[str, torch.Tensor], current: dict[str, torch.Tensor]) -> list[str]:
    """Names whose outputs differ in dtype, shape or any byte, or exist on one side only."""
    return sorted(name for name in saved.keys() | current.keys()
                  if name not in saved or name not in current or not same_bits(saved[name], current[name]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["save", "compare"])
    parser.add_argument("path", type=pathlib.Path, help="the saved outputs (torch.save of a dict)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    current = outputs(args.device)
    if args.mode == "save":
        torch.save({"device": args.device, "outputs": current}, args.path)
        print(f"saved {len(current)} outputs ({args.device}) to {args.path}")
        return 0
    saved = torch.load(args.path)
    if saved["device"] != args.device:
        parser.error(f"{args.path} holds {saved['device']} outputs; compare on that device")
    differ = compare(saved["outputs"], current)
    equal = len(saved["outputs"].keys() & current.keys()) - len(set(differ) & saved["outputs"].keys() & current.keys())
    print(f"compared {len(saved['outputs'])} saved outputs with {len(current)} byte for byte: {equal} equal, "
          f"{len(differ)} differ or missing")
    for name in differ:
        print(f"  {name}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
