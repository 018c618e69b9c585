"""Checkpoint quantizer: `python -m fp4ops quantize SRC DST --format nvfp4|mxfp4`.

SRC is a Hugging Face model directory (config, tokenizer, one or many `*.safetensors` shards with
`model.safetensors.index.json`) or a single `.safetensors` file; DST is a directory holding the
same files with the shards quantized (or, for a file SRC, a `.safetensors` file). Every 2-D
floating-point `*.weight` whose input dimension is a multiple of the block and whose name matches
no skip pattern (embeddings, norms, the LM head by default; MoE routers always) is quantized and
written in one of two layouts (_checkpoint_layouts.py). `--layout compressed-tensors` (the
default, NVFP4 and MXFP4): `<prefix>.weight_packed` packed E2M1 (uint8 [out, in/2]),
`<prefix>.weight_scale` (E4M3 per 16 / E8M0 bytes as uint8 per 32 inputs) and, for NVFP4,
`<prefix>.weight_global_scale` (fp32 [1], the reciprocal of our decode global scale, chosen so
that compressed-tensors decodes exactly what fp4ops does; docs/decisions.md #18), with
config.json's `quantization_config`. `--layout modelopt` (NVFP4 only): `<prefix>.weight`,
`<prefix>.weight_scale` and `<prefix>.weight_scale_2` (fp32 decode global scale,
`w ~= e2m1 * weight_scale * weight_scale_2`), with `hf_quant_config.json` and config.json's
`quantization_config`. Both configs list as ignored exactly the linears left dense: every linear
weight left unquantized, and lm_head unless it was quantized (a checkpoint without its weight ties
it to the embeddings). Everything else is copied unchanged. An input already quantized (by fp4ops
or another tool) is refused: its weights would pass through under our configs' label. The weights
a serving engine fuses into one layer (q/k/v, gate/up, each expert's w1/w3: _fused_groups.py) are
quantized or left dense together, and with NVFP4 share one global scale, from the group's joint
amax, across shards. Each shard's metadata names the format and every 2-D weight left dense, with
the reason. Tensors stream through one at a time (a fused group at once): the next is read while
the current one is quantized (on the GPU when there is one) and the previous one written, so
memory holds a few tensors, never the model; the progress bar counts bytes and the end reports
the wall time and GB/s. The output goes to a temporary sibling of DST and is renamed into place at
the end, with the modes the umask gives; a DST inside SRC gets no copy of itself or of that
temporary folder. `load` reads a quantized file or directory (either layout) back: FP4 weights
folded into FP4 tensors, every other tensor (other schemes' INT4 or FP8 weights included) as stored.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass

import torch

from ._checkpoint_layouts import (LAYOUTS, compressed_tensors_config, compressed_tensors_global_scale, modelopt_configs,
                                  quantized_entries, quantized_tensors, unquantized_linears)
# load, load_quantized and fold_quantized are this module's reading half, kept in their own file.
from ._checkpoint_reading import (BLOCKS, INDEX_NAME, fold_quantized, input_shards, load, load_quantized,  # noqa: F401
                                  refuse_quantized_input, stored_dtypes)
from ._checks import check_format, check_format_scale_rule, skip_patterns
from ._formats import FLOAT_DTYPES, SCALE_RULES, global_scale_from_amax
from ._fused_groups import fused_groups, is_router
from .demo import best_device, sqnr_db
from .ops import amax as fp4ops_amax
from .ops import quantize_mxfp4, quantize_nvfp4
from ._safetensors_writer import SafetensorsWriter, item_size, torch_dtype

DEFAULT_SKIP = ("embed", "norm", "lm_head")
SCALE_SUFFIXES = ("weight_scale", "weight_scale_2", "weight_packed", "weight_global_scale")
DEFAULT_LAYOUT = "compressed-tensors"


@dataclass
class TensorReport:
    name: str
    shape: tuple
    sqnr_db: float


def is_linear_weight(name: str, shape, dtype: torch.dtype) -> bool:
    """A 2-D floating-point `*.weight`: what a linear layer's weight looks like in a checkpoint."""
    return name.split(".")[-1] == "weight" and len(shape) == 2 and dtype in FLOAT_DTYPES


def plan(shapes: dict[str, tuple], dtypes: dict[str, torch.dtype], block: int, skip, log=print) -> dict[str, str | None]:
    """For every linear weight: None (quantize it) or why it stays dense. A fused group is decided
    as a whole: one member that must stay dense keeps the others dense too (an engine cannot
    load a half-quantized fused layer), and `log` says so; so it does for every weight whose input
    dimension the block does not divide (never silently: the user did not ask for those)."""
    decision = {}
    for name, shape in shapes.items():
        if not is_linear_weight(name, shape, dtypes[name]):
            continue
        hit = next((pattern for pattern in skip_patterns(skip) if pattern in name), None)
        if hit is not None:
            decision[name] = f"--skip {hit!r}"
        elif is_router(name):
            decision[name] = "MoE router"
        elif shape[-1] % block:
            decision[name] = f"input dimension {shape[-1]} not a multiple of {block}"
        else:
            decision[name] = None
    by_group: dict[str, list[str]] = {}
    for name, key in fused_groups(decision).items():
        by_group.setdefault(key, []).append(name)
    for key in sorted(by_group):
        members = sorted(by_group[key])
        dense = [name for name in members if decision[name] is not None]
        if dense and len(dense) < len(members):
            first = dense[0]
            for name in members:
                if decision[name] is None:
                    decision[name] = f"fused with {first} ({decision[first]})"
            log(f"{first} stays dense ({decision[first]}), so its fused group does too: "
                f"{', '.join(name for name in members if name != first)}")
    for name, reason in decision.items():
        if reason is not None and reason.startswith("input dimension"):
            log(f"{name} stays dense ({reason}); the output lists it among the dense linears")
    return decision


def _refuse_to_overwrite(src: str, dst: str) -> None:
    same = os.path.abspath(src) == os.path.abspath(dst) or (os.path.exists(dst) and os.path.samefile(src, dst))
    if same:
        raise ValueError(f"dst: {dst!r} is the input checkpoint; refusing to overwrite it")


def _check_device(device) -> None:
    """cpu or a CUDA GPU this machine has: where the quantize kernels run (a meta tensor, for one,
    holds no values to quantize)."""
    try:
        chosen = torch.device(device)
    except (TypeError, RuntimeError):
        raise ValueError(f"device: expected a device such as 'cpu', 'cuda' or 'cuda:1', got {device!r}") from None
    if chosen.type not in ("cpu", "cuda"):
        raise ValueError(f"device: expected 'cpu' or a CUDA device such as 'cuda:1', got {device!r}")
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} asked for, but no CUDA GPU is available")
    if chosen.type == "cuda" and chosen.index is not None and chosen.index >= torch.cuda.device_count():
        raise ValueError(f"device: {device!r} asked for, but this machine has {torch.cuda.device_count()} CUDA GPU(s)")


def _is_inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path != folder and os.path.commonpath([path, folder]) == folder


def _check_arguments(src: str, dst: str, format: str, layout: str, skip, scale_rule, device, force: bool) -> None:
    """Every bad invocation fails here, before any work, with one line naming the argument."""
    check_format(format)
    check_format_scale_rule(format, scale_rule)
    skip_patterns(skip)
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout == "modelopt" and format != "nvfp4":
        raise ValueError(f"layout: the ModelOpt layout holds NVFP4 only; use --layout compressed-tensors for {format}")
    if not os.path.exists(src):
        raise ValueError(f"src: no such file or directory: {src!r}")
    _refuse_to_overwrite(src, dst)
    if os.path.isdir(dst) and _is_inside(src, dst):  # dst is replaced as a whole at the end
        raise ValueError(f"dst: {dst!r} holds the input {src!r}; replacing it would delete the input")
    if device is not None:
        _check_device(device)
    parent = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(parent):
        raise ValueError(f"dst: the folder {parent!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"dst: the folder {parent!r} is not writable")
    if os.path.isdir(src) and os.path.isfile(dst):
        raise ValueError(f"dst: {dst!r} is a file; a model directory is quantized into a directory")
    if os.path.exists(dst) and not force and (os.path.isfile(dst) or os.listdir(dst)):
        raise ValueError(f"dst: {dst!r} exists and is not empty; pass --force to replace it")


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _honour_umask(path: str) -> None:
    """Files and folders get the modes the umask gives new ones (safetensors' temporary-file
    rename would leave its outputs 0600)."""
    mask = _current_umask()
    if os.path.isdir(path):
        os.chmod(path, 0o777 & ~mask)
        for root, dirs, files in os.walk(path):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o777 & ~mask)
            for name in files:
                os.chmod(os.path.join(root, name), 0o666 & ~mask)
    else:
        os.chmod(path, 0o666 & ~mask)


def quantize_checkpoint(src: str, dst: str, format: str = "nvfp4", *, layout: str = DEFAULT_LAYOUT,
                        skip=DEFAULT_SKIP, scale_rule: str = "floor", device=None, progress: bool = True, log=print,
                        force: bool = False) -> list[TensorReport]:
    """Quantize the linear weights of `src` into `dst`; returns one report (name, shape, SQNR in
    dB against the original) per quantized tensor. `log` takes the run's notes: fused groups kept
    dense as a whole, then one closing line with the wall time and GB/s.

    src: a .safetensors file, or a model directory (one or many shards, with or without
    model.safetensors.index.json). dst: for a file, a .safetensors file or a directory; for a
    directory, a directory: the shards under their input names (each quantized weight with its
    scales in its own shard), the index rewritten, every other file copied. The output is written
    to a temporary sibling and renamed into place at the end, so a failure leaves no half-written
    dst; an existing dst is replaced only with force=True. A directory dst gets the layout's
    configs: config.json's quantization_config (when src has a config.json) and, for ModelOpt,
    hf_quant_config.json."""
    import shutil
    import tempfile

    _check_arguments(src, dst, format, layout, skip, scale_rule, device, force)
    started = time.perf_counter()
    shards, index = input_shards(src)
    refuse_quantized_input(src, stored_dtypes(shards))
    to_directory = os.path.isdir(src) or not dst.endswith(".safetensors")
    device = torch.device(device) if device is not None else best_device()
    try:
        work = tempfile.mkdtemp(prefix=".fp4ops-", dir=os.path.dirname(os.path.abspath(dst)))
    except OSError as error:  # what os.access cannot tell: a read-only file system, or root's limits
        raise ValueError(f"dst: cannot write in {os.path.dirname(os.path.abspath(dst))!r}: {error.strerror}") from None
    try:
        run = _quantize_shards(shards, work, format, layout, skip, scale_rule, device, progress, log)
        weight_map = run.weight_map
        if os.path.isdir(src):
            _copy_other_files(src, work, dst)
        if to_directory:
            _write_configs(work, format, layout, run.dense, {report.name for report in run.reports})
        if index is not None:
            total = sum(os.path.getsize(os.path.join(work, name)) for name in set(weight_map.values()))
            new_index = {**index, "metadata": {**index.get("metadata", {}), "total_size": total}, "weight_map": weight_map}
            with open(os.path.join(work, INDEX_NAME), "w") as f:
                json.dump(new_index, f, indent=2, sort_keys=True)
        if os.path.exists(dst):
            shutil.rmtree(dst) if os.path.isdir(dst) else os.remove(dst)
        if to_directory:
            os.replace(work, dst)
        else:
            os.replace(os.path.join(work, next(iter(shards))), dst)
            shutil.rmtree(work)
        _honour_umask(dst)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    seconds = time.perf_counter() - started
    log(f"{len(run.reports)} weights quantized on {device}: read {run.bytes_read / 1e9:.3f} GB, wrote "
        f"{run.bytes_written / 1e9:.3f} GB in {seconds:.2f} s ({run.bytes_read / 1e9 / seconds:.2f} GB/s read)")
    return run.reports


def _copy_other_files(src: str, work: str, dst: str) -> None:
    """Every file and folder of the model directory src but its shards and index, into work. Where
    the output sits inside src (`quantize m m/q`), its own paths are left out at any depth: the work
    folder and dst (an earlier output that --force replaces), so that no output holds a copy of
    itself or of a temporary folder."""
    import shutil

    own = {os.path.realpath(work), os.path.realpath(dst)}

    def outputs(folder: str, names: list[str]) -> list[str]:
        return [name for name in names if os.path.realpath(os.path.join(folder, name)) in own]

    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry.endswith(".safetensors") or entry == INDEX_NAME or os.path.realpath(path) in own:
            continue
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(work, entry), ignore=outputs)
        else:
            shutil.copy2(path, os.path.join(work, entry))


def _write_configs(out_dir: str, format: str, layout: str, dense: dict[str, str], quantized: set[str]) -> None:
    """The layout's configs in out_dir: quantization_config added to a copied config.json, and for
    ModelOpt hf_quant_config.json. Both name the modules an engine must leave dense: `dense` (the
    linear weights left dense) and lm_head unless `quantized` (the weights quantized) holds it."""
    import sys

    version = sys.modules[__package__].__version__  # the package is imported before its modules
    ignore = unquantized_linears(dense, quantized)
    if layout == "modelopt":
        hf_quant_config, quantization_config = modelopt_configs(ignore, version)
        with open(os.path.join(out_dir, "hf_quant_config.json"), "w") as f:
            json.dump(hf_quant_config, f, indent=2)
    else:
        quantization_config = compressed_tensors_config(format, ignore)
    config_path = os.path.join(out_dir, "config.json")
    if os.path.isfile(config_path):
        with open(config_path) as f:
            config = json.load(f)
        config["quantization_config"] = quantization_config
        with open(config_path, "w") as f:
            json.dump(config, f, indent=2)


@dataclass
class _ShardsRun:
    reports: list[TensorReport]
    weight_map: dict[str, str]  # tensor name: shard
    dense: dict[str, str]  # linear weight left dense: why
    bytes_read: int
    bytes_written: int


def _work_units(names: list[str], groups: dict[str, str]) -> list[list[str]]:
    """The input tensors in order, one unit each, except that a fused group's members form one
    unit (where its first member stands): the group's global scale needs all of them at once."""
    members: dict[str, list[str]] = {}
    for name in names:
        if name in groups:
            members.setdefault(groups[name], []).append(name)
    units = []
    for name in names:
        if name not in groups:
            units.append([name])
        elif members[groups[name]][0] == name:
            units.append(members[groups[name]])
    return units


def _quantize_shards(shards: dict[str, str], out_dir: str, format: str, layout: str, skip, scale_rule: str, device,
                     progress: bool, log) -> _ShardsRun:
    """Every shard into out_dir under its own name. The plan (which weights, which fused groups)
    and every output file's header are made over all shards first: a group's members may sit in
    different shards. Then the tensors stream through: a reader thread loads the next unit (a
    tensor, or a fused group) while this one is quantized on `device`, and a writer thread stores
    the previous unit's outputs into their byte ranges, so memory holds about three units, never
    the model or a whole shard."""
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import ExitStack

    from safetensors import safe_open
    from tqdm import tqdm

    with ExitStack() as stack:
        handles = {shard: stack.enter_context(safe_open(path, framework="pt", device="cpu")) for shard, path in shards.items()}
        home = {name: shard for shard, f in handles.items() for name in f.keys()}
        slices = {name: handles[shard].get_slice(name) for name, shard in home.items()}
        shapes = {name: tuple(piece.get_shape()) for name, piece in slices.items()}
        stored = {name: piece.get_dtype() for name, piece in slices.items()}
        dtypes = {name: torch_dtype(kind) for name, kind in stored.items()}  # plan() quantizes float ones only
        decision = plan(shapes, dtypes, BLOCKS[format], skip, log=log)
        quantized = {name for name, reason in decision.items() if reason is None}
        for name in sorted(quantized):
            taken = [name[: -len("weight")] + suffix for suffix in SCALE_SUFFIXES if name[: -len("weight")] + suffix in home]
            if taken:
                raise ValueError(f"src: {name!r} already has a {taken[0]!r}: is it quantized already?")
        groups = fused_groups(sorted(quantized))
        dense = {name: reason for name, reason in decision.items() if reason is not None}

        entries: dict[str, dict[str, tuple[str, tuple]]] = {shard: {} for shard in handles}
        weight_map = {}
        for name, shard in home.items():
            own = (quantized_entries(name[: -len("weight")], shapes[name], BLOCKS[format], layout) if name in quantized
                   else {name: (stored[name], shapes[name])})
            entries[shard].update(own)
            weight_map.update(dict.fromkeys(own, shard))
        quantized_per_shard = Counter(home[name] for name in quantized)
        writers = {}
        for shard, f in handles.items():
            metadata = {"format": "pt", **(f.metadata() or {})}
            metadata.update({"quantization_format": format, "quantized_by": "fp4ops", "fp4ops_scale_rule": scale_rule,
                             "fp4ops_quantized_tensors": str(quantized_per_shard[shard]),  # this shard's
                             "fp4ops_layout": layout,
                             "fp4ops_dense_linears": json.dumps(dense)})  # in the whole model
            writers[shard] = stack.enter_context(SafetensorsWriter(os.path.join(out_dir, shard), entries[shard], metadata))

        def read(unit: list[str]) -> dict[str, torch.Tensor]:
            return {name: handles[home[name]].get_tensor(name) for name in unit}

        def write(outputs: dict[str, torch.Tensor]) -> None:
            for name, tensor in outputs.items():
                writers[weight_map[name]].write(name, tensor)

        def global_scale(members: list[torch.Tensor]) -> torch.Tensor:
            """SPEC 2.2's g from the joint amax of a unit (a fused group's members share it); in
            the compressed-tensors layout moved up to the nearest value whose stored reciprocal
            decodes exactly as fp4ops does (g itself for almost every amax)."""
            g = global_scale_from_amax(torch.stack([fp4ops_amax(x) for x in members]).amax())
            return compressed_tensors_global_scale(g) if layout == "compressed-tensors" else g

        reports = []
        units = _work_units(list(home), groups)
        sizes = {name: math.prod(shapes[name]) * item_size(stored[name]) for name in home}
        bar = tqdm(total=sum(sizes.values()), desc=f"quantizing to {format}", unit="B", unit_scale=True,
                   disable=not progress)
        with ThreadPoolExecutor(1, thread_name_prefix="fp4ops-read") as reader, \
                ThreadPoolExecutor(1, thread_name_prefix="fp4ops-write") as writer:
            next_read = reader.submit(read, units[0]) if units else None
            last_write = None
            for i, unit in enumerate(units):
                tensors = next_read.result()
                if i + 1 < len(units):
                    next_read = reader.submit(read, units[i + 1])
                outputs = {name: tensors[name] for name in unit if name not in quantized}
                on_device = {name: tensors[name].to(device) for name in unit if name in quantized}
                g = global_scale(list(on_device.values())) if on_device and format == "nvfp4" else None
                for name, x in on_device.items():
                    q = quantize_nvfp4(x, g) if g is not None else quantize_mxfp4(x, scale_rule=scale_rule)
                    outputs.update(quantized_tensors(name[: -len("weight")], q.to("cpu"), layout))
                    reports.append(TensorReport(name, shapes[name], sqnr_db(x, q.dequantize(torch.float32))))
                del tensors, on_device
                if last_write is not None:
                    last_write.result()
                last_write = writer.submit(write, outputs)
                bar.update(sum(sizes[name] for name in unit))
            if last_write is not None:
                last_write.result()
        bar.close()
        bytes_written = sum(w.data_size for w in writers.values())
    return _ShardsRun(reports, weight_map, dense, sum(sizes.values()), bytes_written)


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


class _OneLineErrors(argparse.ArgumentParser):
    """argparse's usage errors (an unknown format, a missing argument) as the one line every other
    bad invocation gets, without the usage block; --help still prints it."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None) -> None:
    import sys

    parser = _OneLineErrors(prog="python -m fp4ops quantize", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", help="input: a .safetensors file or a model directory (shards, index, config, ...)")
    parser.add_argument("dst", help="output: a directory (a .safetensors file for a file input); never the input")
    parser.add_argument("--format", choices=sorted(BLOCKS), default="nvfp4")
    parser.add_argument("--layout", choices=list(LAYOUTS), default=DEFAULT_LAYOUT,
                        help="tensor names and configs: compressed-tensors (NVFP4, MXFP4) or modelopt (NVFP4 only)")
    parser.add_argument("--scale-rule", choices=list(SCALE_RULES), default="floor", help="MXFP4 only")
    parser.add_argument("--skip", nargs="*", default=list(DEFAULT_SKIP),
                        help="name substrings to leave unquantized; the patterns given replace the default ones "
                             "(%(default)s), so repeat those to keep them; never splits a fused group")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the best one present)")
    parser.add_argument("--force", action="store_true", help="replace an existing, non-empty dst")
    parser.add_argument("--plot", default=None, help="PNG histogram of the SQNRs (default: DST + '.sqnr.png')")
    args = parser.parse_args(argv)
    try:
        reports = quantize_checkpoint(args.src, args.dst, args.format, layout=args.layout, skip=tuple(args.skip), scale_rule=args.scale_rule,
                                      device=args.device, force=args.force)
    except ValueError as error:  # a bad invocation or input: one line, no traceback
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        sys.exit(2)
    print_report(reports, args.plot if args.plot is not None else args.dst.rstrip(os.sep) + ".sqnr.png")
