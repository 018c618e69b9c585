"""Checkpoint quantizer: `python -m fp4ops quantize IN.safetensors OUT.safetensors --format nvfp4`.

Every 2-D floating-point `*.weight` whose input dimension is a multiple of the block and whose
name matches no skip pattern (embeddings, norms, the LM head by default; MoE routers always) is
quantized and written
in the ModelOpt layout: `<prefix>.weight` packed E2M1 (uint8 [out, in/2]), `<prefix>.weight_scale`
(E4M3 per 16 / E8M0 per 32 inputs) and, for NVFP4, `<prefix>.weight_scale_2` (fp32 decode global
scale, `w ~= e2m1 * weight_scale * weight_scale_2`). Everything else is copied unchanged. The
weights a serving engine fuses into one layer (q/k/v, gate/up, each expert's w1/w3:
_fused_groups.py) are quantized or left dense together, and with NVFP4 share one global scale,
from the group's joint amax. The file's metadata names the format and every 2-D weight left
dense, with the reason. Tensors are read one at a time; only the output is held in
memory (at most the size of the input). `load_quantized` reads such a file back.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass

import torch

from ._formats import FLOAT_DTYPES, FORMATS, NVFP4_SCALE_DTYPE, SCALE_RULES, global_scale_from_amax
from ._fused_groups import fused_groups, is_router
from .demo import best_device, sqnr_db
from .ops import amax as fp4ops_amax
from .ops import quantize_mxfp4, quantize_nvfp4
from .tensor import MXFP4Tensor, NVFP4Tensor

DEFAULT_SKIP = ("embed", "norm", "lm_head")
BLOCKS = {name: block for name, (block, _) in FORMATS.items()}
SCALE_SUFFIXES = ("weight_scale", "weight_scale_2")


@dataclass
class TensorReport:
    name: str
    shape: tuple
    sqnr_db: float


# safetensors' dtype names of the float dtypes a quantizer takes.
_SAFETENSORS_FLOATS = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def is_linear_weight(name: str, shape, dtype: torch.dtype) -> bool:
    """A 2-D floating-point `*.weight`: what a linear layer's weight looks like in a checkpoint."""
    return name.split(".")[-1] == "weight" and len(shape) == 2 and dtype in FLOAT_DTYPES


def should_quantize(name: str, tensor: torch.Tensor, block: int, skip) -> bool:
    return (is_linear_weight(name, tensor.shape, tensor.dtype) and tensor.shape[-1] % block == 0
            and not is_router(name) and not any(pattern in name for pattern in skip))


def plan(shapes: dict[str, tuple], dtypes: dict[str, torch.dtype], block: int, skip, log=print) -> dict[str, str | None]:
    """For every linear weight: None (quantize it) or why it stays dense. A fused group is decided
    as a whole: one member that must stay dense keeps the others dense too (an engine cannot
    load a half-quantized fused layer), and `log` says so."""
    decision = {}
    for name, shape in shapes.items():
        if not is_linear_weight(name, shape, dtypes[name]):
            continue
        hit = next((pattern for pattern in skip if pattern in name), None)
        if hit is not None:
            decision[name] = f"--skip {hit!r}"
        elif is_router(name):
            decision[name] = "MoE router"
        elif shape[-1] % block:
            decision[name] = f"input dimension {shape[-1]} not a multiple of {block}"
        else:
            decision[name] = None
    groups = fused_groups(decision)
    for key in sorted(set(groups.values())):
        members = sorted(name for name, k in groups.items() if k == key)
        dense = [name for name in members if decision[name] is not None]
        if dense and len(dense) < len(members):
            first = dense[0]
            for name in members:
                if decision[name] is None:
                    decision[name] = f"fused with {first} ({decision[first]})"
            log(f"{first} stays dense ({decision[first]}), so its fused group does too: "
                f"{', '.join(name for name in members if name != first)}")
    return decision


def _refuse_to_overwrite(src: str, dst: str) -> None:
    same = os.path.abspath(src) == os.path.abspath(dst) or (os.path.exists(dst) and os.path.samefile(src, dst))
    if same:
        raise ValueError(f"out: {dst!r} is the input checkpoint; refusing to overwrite it")


def quantize_checkpoint(src: str, dst: str, format: str = "nvfp4", *, skip=DEFAULT_SKIP, scale_rule: str = "floor",
                        device=None, progress: bool = True, log=print) -> list[TensorReport]:
    """Quantize the linear weights of the safetensors file `src` into `dst`; returns one report
    (name, shape, SQNR in dB against the original) per quantized tensor. `log` takes the notes on
    fused groups kept dense as a whole."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    from tqdm import tqdm

    if format not in BLOCKS:
        raise ValueError(f"format: expected 'nvfp4' or 'mxfp4', got {format!r}")
    _refuse_to_overwrite(src, dst)
    device = torch.device(device) if device is not None else best_device()
    out: dict[str, torch.Tensor] = {}
    reports = []
    with safe_open(src, framework="pt", device="cpu") as f:
        metadata = dict(f.metadata() or {})
        names = list(f.keys())
        slices = {name: f.get_slice(name) for name in names}
        shapes = {name: tuple(piece.get_shape()) for name, piece in slices.items()}
        dtypes = {name: _SAFETENSORS_FLOATS.get(piece.get_dtype(), torch.uint8) for name, piece in slices.items()}
        decision = plan(shapes, dtypes, BLOCKS[format], skip, log=log)
        groups = fused_groups([name for name, reason in decision.items() if reason is None])
        group_scales: dict[str, torch.Tensor] = {}

        def joint_global_scale(key: str) -> torch.Tensor:
            """SPEC 2.2's g from the amax of every member of a fused group (read one at a time)."""
            if key not in group_scales:
                members = [name for name, k in groups.items() if k == key]
                amaxes = [fp4ops_amax(f.get_tensor(name).to(device)) for name in members]
                group_scales[key] = global_scale_from_amax(torch.stack(amaxes).amax())
            return group_scales[key]

        for name in tqdm(names, desc=f"quantizing to {format}", unit="tensor", disable=not progress):
            tensor = f.get_tensor(name)
            if decision.get(name, "not a linear weight") is not None:
                out[name] = tensor
                continue
            x = tensor.to(device)
            if format == "nvfp4":
                q = quantize_nvfp4(x, joint_global_scale(groups[name]) if name in groups else None)
            else:
                q = quantize_mxfp4(x, scale_rule=scale_rule)
            prefix = name[: -len("weight")]
            for suffix in SCALE_SUFFIXES:
                if prefix + suffix in names:
                    raise ValueError(f"src: {name!r} already has a {prefix + suffix!r}: is it quantized already?")
            out[name] = q.data.cpu()
            out[prefix + "weight_scale"] = q.scales.cpu()
            if format == "nvfp4":
                out[prefix + "weight_scale_2"] = q.global_scale.reshape(()).cpu()
            reports.append(TensorReport(name, tuple(tensor.shape), sqnr_db(x, q.dequantize(torch.float32))))
    dense = {name: reason for name, reason in decision.items() if reason is not None}
    metadata.update({"quantization_format": format, "quantized_by": "fp4ops", "fp4ops_scale_rule": scale_rule,
                     "fp4ops_quantized_tensors": str(len(reports)), "fp4ops_dense_linears": json.dumps(dense)})
    save_file(out, dst, metadata=metadata)
    return reports


def load_quantized(path: str, device="cpu") -> dict:
    """A quantized checkpoint back as {name: tensor}, each quantized weight as one NVFP4Tensor /
    MXFP4Tensor under its `weight` name (its scale tensors folded in)."""
    from safetensors.torch import load_file

    raw = load_file(path, device=str(device))
    out = {}
    for name, tensor in raw.items():
        prefix = name[: -len("weight")] if name.split(".")[-1] == "weight" else None
        scales = raw.get(prefix + "weight_scale") if prefix is not None else None
        if scales is None:
            if not any(name.endswith(suffix) and name[: -len(suffix)] + "weight" in raw for suffix in SCALE_SUFFIXES):
                out[name] = tensor
        elif scales.dtype == NVFP4_SCALE_DTYPE:
            out[name] = NVFP4Tensor(tensor, scales, raw[prefix + "weight_scale_2"])
        else:
            out[name] = MXFP4Tensor(tensor, scales)
    return out


def print_report(reports: list[TensorReport], plot_path: str | None) -> None:
    """The per-tensor SQNR table (worst first) and, if asked, a PNG histogram of it."""
    from tabulate import tabulate

    rows = sorted(reports, key=lambda r: r.sqnr_db)
    print(tabulate([[r.name, "x".join(map(str, r.shape)), f"{r.sqnr_db:.2f}"] for r in rows],
                   headers=["tensor", "shape", "SQNR dB"], tablefmt="github"))
    if rows:
        values = torch.tensor([r.sqnr_db for r in rows])
        print(f"{len(rows)} tensors quantized; SQNR dB min {values.min():.2f}, median {values.median():.2f}, max {values.max():.2f}")
    if plot_path and rows:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.hist([r.sqnr_db for r in rows], bins=min(30, max(5, len(rows))))
        ax.set_xlabel("SQNR (dB)")
        ax.set_ylabel("tensors")
        ax.set_title(f"Per-tensor SQNR of {len(rows)} quantized weights")
        fig.tight_layout()
        fig.savefig(plot_path, dpi=120)
        plt.close(fig)
        print(f"histogram: {plot_path}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fp4ops quantize", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", help="input .safetensors")
    parser.add_argument("dst", help="output .safetensors (never the input)")
    parser.add_argument("--format", choices=sorted(BLOCKS), default="nvfp4")
    parser.add_argument("--scale-rule", choices=list(SCALE_RULES), default="floor", help="MXFP4 only")
    parser.add_argument("--skip", nargs="*", default=list(DEFAULT_SKIP),
                        help="name substrings to leave unquantized (default: %(default)s)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the best one present)")
    parser.add_argument("--plot", default=None, help="PNG histogram of the SQNRs (default: DST + '.sqnr.png')")
    args = parser.parse_args(argv)
    reports = quantize_checkpoint(args.src, args.dst, args.format, skip=tuple(args.skip), scale_rule=args.scale_rule,
                                  device=args.device)
    print_report(reports, args.plot if args.plot is not None else args.dst + ".sqnr.png")
