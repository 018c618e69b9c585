"""The main job of `python -m fp4ops`: quantize a built-in, seeded, weight-like matrix in every
format on the best device present and report quality and speed."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import ops
from .timing import median_time_us


def weight_like_sample(rows: int, cols: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """A heavy-tailed matrix shaped like an LLM linear weight: Student-t entries (df = 3), row
    scales spread log-normally, and a few outlier input channels 20x larger than the rest."""
    gen = torch.Generator().manual_seed(seed)
    # Student-t with 3 degrees of freedom: z / sqrt(chi^2_3 / 3).
    z = torch.randn(rows, cols, generator=gen)
    chi2 = torch.randn(3, rows, cols, generator=gen).square().sum(0)
    body = z / (chi2 / 3).sqrt()
    row_scale = torch.exp(0.5 * torch.randn(rows, 1, generator=gen)) * 0.02
    outliers = torch.ones(cols)
    outliers[torch.randperm(cols, generator=gen)[: max(1, cols // 256)]] = 20.0
    return (body * row_scale * outliers).to(dtype)


def best_device() -> torch.device:
    """CUDA when a GPU is present and the quantize kernels are built for it, else the CPU."""
    if torch.cuda.is_available() and torch._C._dispatch_has_kernel_for_dispatch_key("fp4ops::quantize_nvfp4", "CUDA"):
        return torch.device("cuda")
    return torch.device("cpu")


@dataclass
class Row:
    name: str
    sqnr_db: float
    max_abs_error: float
    time_us: float
    gb_per_s: float


def sqnr_db(x: torch.Tensor, y: torch.Tensor) -> float:
    """10 log10(sum x^2 / sum (x - y)^2), summed in float64: on the CPU slice by slice, so that the
    float64 copies stay in the cache instead of streaming through memory; on a GPU in one slice."""
    slice_len = 1 << 16 if x.device.type == "cpu" else max(x.numel(), 1)
    signal = torch.zeros((), dtype=torch.float64, device=x.device)
    noise = torch.zeros((), dtype=torch.float64, device=x.device)
    for xs, ys in zip(x.reshape(-1).split(slice_len), y.reshape(-1).split(slice_len)):
        xs = xs.double()
        error = xs - ys.double()
        signal += torch.dot(xs, xs)
        noise += torch.dot(error, error)
    return float(10 * torch.log10(signal / noise))


def run(rows: int = 4096, cols: int = 4096, seed: int = 0, device: torch.device | None = None) -> list[Row]:
    device = device or best_device()
    x = weight_like_sample(rows, cols, seed).to(device)
    variants = {
        "NVFP4 (own amax)": lambda: ops.quantize_nvfp4(x),
        "MXFP4 floor": lambda: ops.quantize_mxfp4(x, scale_rule="floor"),
        "MXFP4 rceil": lambda: ops.quantize_mxfp4(x, scale_rule="rceil"),
    }
    results = []
    for name, quantize in variants.items():
        q = quantize()
        y = q.dequantize(torch.float32)
        moved = x.numel() * x.element_size() + q.data.numel() + q.scales.numel()
        t = median_time_us(quantize, device, repeats=20)
        results.append(Row(name, sqnr_db(x, y), float((x.float() - y).abs().max()), t, moved / t / 1e3))
    return results


def check_arguments(parser, args) -> None:
    """The demo's arguments, each refused by name through parser.error (usage, one line, exit 2)
    before any work."""
    if args.rows < 1:
        parser.error(f"--rows: expected a count >= 1, got {args.rows}")
    if args.cols < 32 or args.cols % 32:
        parser.error(f"--cols: expected a positive multiple of 32 (the MXFP4 block), got {args.cols}")
    if args.device is None:
        return
    try:
        device = torch.device(args.device)
    except (RuntimeError, TypeError):
        parser.error(f"--device: expected cpu or cuda, got {args.device!r}")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device: expected cpu or cuda, got {args.device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device: {args.device!r} asked for, but no CUDA GPU is available")


def main(rows: int, cols: int, seed: int, device: str | None) -> None:
    from tabulate import tabulate

    dev = torch.device(device) if device else best_device()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"fp4ops: quantizing a seeded {rows} x {cols} bf16 weight-like matrix (Student-t, outlier channels) on {name}")
    table = [[r.name, f"{r.sqnr_db:.2f}", f"{r.max_abs_error:.4g}", f"{r.time_us:.1f}", f"{r.gb_per_s:.1f}"] for r in run(rows, cols, seed, dev)]
    print(tabulate(table, headers=["format", "SQNR (dB)", "max |error|", "time (us)", "GB/s"], tablefmt="github"))
