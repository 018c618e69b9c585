"""Reading safetensors checkpoints: a model directory's shards (through its index), the stored
dtypes of their tensors, whether an input is quantized already, and a quantized checkpoint back as
FP4 tensors (`load`, `fold_quantized`). Writing them is checkpoint.py's."""

from __future__ import annotations

import json
import os

import torch

from ._checkpoint_layouts import TENSOR_SUFFIXES, decode_global_scale
from ._formats import FLOAT_DTYPES, FORMATS, MXFP4_SCALE_DTYPE, NVFP4_SCALE_DTYPE
from ._safetensors_writer import torch_dtype
from .tensor import MXFP4Tensor, NVFP4Tensor

BLOCKS = {name: block for name, (block, _) in FORMATS.items()}
INDEX_NAME = "model.safetensors.index.json"



def read_json_object(path: str, argument: str) -> dict:
    """The JSON object in the file at `path`; a file that is unreadable, not JSON or not an object
    is refused with one line naming `argument` and the file."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except OSError as error:
        raise ValueError(f"{argument}: cannot read {path!r} ({error.strerror})") from None
    except ValueError as error:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{argument}: {path!r} is not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{argument}: {path!r} holds a JSON {type(value).__name__}, expected an object")
    return value


def _indexed_shards(directory: str, index: dict, index_path: str, argument: str) -> dict[str, str]:
    """{shard file name: path} of the shards an index's weight_map names. Each must be a file of
    the directory itself: a name with a folder in it would be written outside the output too."""
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(shard, str) for shard in weight_map.values()):
        raise ValueError(f"{argument}: {index_path!r} has no weight_map (tensor name: shard file name)")
    shards = {}
    for name in sorted(set(weight_map.values())):
        path = os.path.join(directory, name)
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise ValueError(f"{argument}: {index_path!r} lists the shard {name!r}, not a file name in the directory")
        if not os.path.isfile(path):
            raise ValueError(f"{argument}: {path!r}, listed in {index_path!r}, does not exist")
        shards[name] = path
    return shards


def input_shards(src: str, argument: str = "src") -> tuple[dict[str, str], dict | None]:
    """{shard file name: path} of a .safetensors file or a model directory, and the directory's
    index (None without one). A bad index or a shard it lists but the directory lacks is refused
    with one line naming `argument` (the caller's name for src) and the file."""
    if os.path.isfile(src):
        return {os.path.basename(src): src}, None
    index_path = os.path.join(src, INDEX_NAME)
    if os.path.isfile(index_path):
        index = read_json_object(index_path, argument)
        return _indexed_shards(src, index, index_path, argument), index
    files = sorted(name for name in os.listdir(src) if name.endswith(".safetensors"))
    if not files:
        raise ValueError(f"{argument}: no .safetensors file in the directory {src!r}")
    return {name: os.path.join(src, name) for name in files}, None


def stored_dtypes(shards: dict[str, str]) -> dict[str, str]:
    """{tensor name: safetensors dtype name} over every shard, from the headers alone. safetensors
    checks on opening that a header parses and that the file holds every byte it describes, so a
    truncated file or one of another format is refused here, by name, before any work."""
    from safetensors import SafetensorError, safe_open

    dtypes = {}
    for path in shards.values():
        try:
            with safe_open(path, framework="pt", device="cpu") as f:
                dtypes.update({name: f.get_slice(name).get_dtype() for name in f.keys()})
        except (SafetensorError, OSError) as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ValueError(f"src: {path!r} is not a readable .safetensors file ({reason})") from None
    return dtypes


def _quantized_weight(dtypes: dict[str, str]) -> str | None:
    """Where the tensors show a weight already quantized (FP4, INT4, FP8, by any tool), how: a
    `weight_packed` (compressed-tensors' packed codes), or a `weight_scale` beside a `weight` that
    is not fp32/fp16/bf16 (ModelOpt's uint8 codes, an FP8 or INT8 weight); None when none does."""
    for name, dtype in sorted(dtypes.items()):
        leaf = name.split(".")[-1]
        if leaf == "weight_packed":
            return f"{name!r} holds packed {dtype} codes"
        weight = name[: -len("_scale")]
        if leaf == "weight_scale" and weight in dtypes and torch_dtype(dtypes[weight]) not in FLOAT_DTYPES:
            return f"{weight!r} is stored as {dtypes[weight]}, with {name!r}"
    return None


def _quantized_by_configs(src: str) -> str | None:
    """How a model directory's configs say that it is quantized already; None where they do not,
    or src is a file. Its config.json is parsed here, before any work: the output's is made from it."""
    if not os.path.isdir(src):
        return None
    config_path = os.path.join(src, "config.json")
    config = read_json_object(config_path, "src") if os.path.isfile(config_path) else {}
    if isinstance(config.get("quantization_config"), dict):
        method = config["quantization_config"].get("quant_method", "unnamed")
        return f"config.json has a quantization_config, quant_method {method!r}"
    if os.path.isfile(os.path.join(src, "hf_quant_config.json")):
        return "it has ModelOpt's hf_quant_config.json"
    return None


def refuse_quantized_input(src: str, dtypes: dict[str, str]) -> None:
    """An input already quantized is refused: its quantized weights are not floating point, so
    they would pass through unchanged, under configs and metadata naming the format and layout
    asked for (a mislabelled checkpoint)."""
    how = _quantized_weight(dtypes) or _quantized_by_configs(src)
    if how is not None:
        raise ValueError(f"src: {src!r} is already quantized ({how}); quantize the original weights instead")


def load_quantized(path: str, device="cpu") -> dict:
    """A quantized .safetensors file (either layout) back as {name: tensor}, each quantized weight
    as one NVFP4Tensor / MXFP4Tensor under its module's `weight` name (its scale tensors folded
    in); other tensors as they are."""
    from safetensors.torch import load_file

    return fold_quantized(load_file(path, device=str(device)))


def load(path: str, device="cpu") -> dict:
    """A quantized checkpoint back as {name: tensor}: a .safetensors file or a model directory (all
    its shards), in the compressed-tensors or ModelOpt layout, ours or another tool's. Each FP4
    weight becomes one NVFP4Tensor / MXFP4Tensor under `<module>.weight` (fold_quantized says
    which are); every other tensor (dense weights, biases, norms, another tool's input scales, the
    weights and scales of other schemes such as INT4 or FP8) is returned as stored."""
    from safetensors.torch import load_file

    if os.path.isdir(path):
        shards, _ = input_shards(path, "path")
        files = list(shards.values())
    elif os.path.isfile(path):
        files = [path]
    else:
        raise ValueError(f"path: no such file or directory: {path!r}")
    raw: dict[str, torch.Tensor] = {}
    for file in files:  # merged first: a weight's scales may sit in another shard
        raw.update(load_file(file, device=str(device)))
    return fold_quantized(raw)


# The format an FP4 weight's block scales name, by their dtype: E4M3 is NVFP4's, E8M0 MXFP4's
# (compressed-tensors stores those as their uint8 bytes). Other schemes store their scales in
# fp32, fp16 or bf16 (INT4 W4A16, INT4-AWQ, FP8), so these dtypes tell FP4 apart from them.
_FP4_SCALE_FORMATS = {NVFP4_SCALE_DTYPE: "nvfp4", MXFP4_SCALE_DTYPE: "mxfp4", torch.uint8: "mxfp4"}
_LAYOUT_TITLES = {"compressed-tensors": "compressed-tensors", "modelopt": "ModelOpt"}


def _layout_of(raw: dict, prefix: str) -> str | None:
    """Which layout's names hold a quantized weight of module `prefix` (its name and a dot): codes
    beside a `weight_scale`; None for a dense one. Whether those are FP4 is _fp4_format's call."""
    if prefix + "weight_scale" not in raw:
        return None
    if prefix + "weight_packed" in raw:
        return "compressed-tensors"
    return "modelopt" if prefix + "weight" in raw else None


def _fp4_format(packed: torch.Tensor, scales: torch.Tensor) -> str | None:
    """"nvfp4" or "mxfp4" where the tensors are FP4 (uint8 codes, two a byte, with E4M3 or E8M0
    scales), None for another scheme under the same names: compressed-tensors' INT4 packs its codes
    into int32, ModelOpt's INT4-AWQ gives its uint8 codes fp16/bf16 scales, FP8 stores float8."""
    if packed.dtype != torch.uint8:
        return None
    return _FP4_SCALE_FORMATS.get(scales.dtype)


def _check_scale_shape(packed_name: str, packed: torch.Tensor, scale_name: str, scales: torch.Tensor,
                       format: str) -> None:
    """One scale per block of each row's K = 2 x (the codes' last dimension) elements: a scale
    tensor of another shape would decode every element with the wrong scale."""
    block = BLOCKS[format]
    k = 2 * packed.shape[-1] if packed.dim() else 0
    if packed.dim() == 0 or k % block:
        raise ValueError(f"{packed_name}: shape {tuple(packed.shape)} holds K = {k} elements a row, not a multiple of "
                         f"{format.upper()}'s block of {block} (its scales {scale_name!r} are {scales.dtype})")
    expected = (*packed.shape[:-1], k // block)
    if tuple(scales.shape) != expected:
        raise ValueError(f"{scale_name}: expected shape {expected}, one {format.upper()} scale per {block} elements "
                         f"of {packed_name} (shape {tuple(packed.shape)}), got {tuple(scales.shape)}")


def _nvfp4_global_scale(raw: dict, name: str, layout: str) -> torch.Tensor:
    """The decode global scale (fp32 []) of an NVFP4 weight from its `name` tensor: ModelOpt's
    weight_scale_2 is it; compressed-tensors' weight_global_scale is its reciprocal. One fp32,
    fp16 or bf16 element, widened to fp32 (exactly); without it the block scales decode nothing."""
    if name not in raw:
        raise ValueError(f"{name}: missing ({_LAYOUT_TITLES[layout]} NVFP4 needs the weight's global scale "
                         f"next to its E4M3 block scales)")
    g = raw[name]
    if g.dtype not in FLOAT_DTYPES or g.numel() != 1:
        raise ValueError(f"{name}: expected NVFP4's global scale, one float32, float16 or bfloat16 element, "
                         f"got {g.dtype} of shape {tuple(g.shape)}")
    g = g.reshape(()).float()
    return decode_global_scale(g).to(g.device) if layout == "compressed-tensors" else g


def _fold_weight(raw: dict, prefix: str, layout: str):
    """(the FP4 tensor of module `prefix`, the names it was folded from), or None where its tensors
    are another scheme's (kept as stored). Tensors that claim FP4 by their dtypes but lack a part or
    do not fit together are refused by name: folding them would decode garbage."""
    packed_name, scale_name, global_name = (prefix + suffix for suffix in TENSOR_SUFFIXES[layout])
    packed, scales = raw[packed_name], raw[scale_name]
    format = _fp4_format(packed, scales)
    if format is None:
        return None
    _check_scale_shape(packed_name, packed, scale_name, scales, format)
    if layout == "compressed-tensors" and prefix + "weight" in raw:
        raise ValueError(f"{prefix}weight: stored beside the FP4 weight {packed_name!r}, whose name it would take")
    if format == "mxfp4":
        return MXFP4Tensor(packed, scales.view(MXFP4_SCALE_DTYPE)), (packed_name, scale_name)
    g = _nvfp4_global_scale(raw, global_name, layout)
    return NVFP4Tensor(packed, scales, g), (packed_name, scale_name, global_name)


def _check_scales_present(raw: dict, name: str) -> None:
    """compressed-tensors writes uint8 `weight_packed` codes for FP4 only (its INT4 packs into
    int32), so uint8 codes without their `weight_scale` are an FP4 weight missing its scales."""
    scale_name = name[: -len("packed")] + "scale"
    if raw[name].dtype == torch.uint8 and scale_name not in raw:
        raise ValueError(f"{scale_name}: missing (the compressed-tensors FP4 codes {name!r} need their block scales)")


def fold_quantized(raw: dict[str, torch.Tensor]) -> dict:
    """{name: tensor} of either layout with each FP4 weight folded into one NVFP4Tensor /
    MXFP4Tensor under `<module>.weight`: uint8 codes [..., K/2] (`weight_packed` or ModelOpt's
    `weight`) with a `weight_scale` of one E4M3 (NVFP4, plus its global scale) or E8M0 / uint8
    (MXFP4) scale per 16 / 32 elements. compressed-tensors' reciprocal global scale becomes our
    decode scale (the one whose bf16 decode equals compressed-tensors'); its uint8 E8M0 bytes
    become E8M0 again (a view, never a value cast). Every other tensor is kept as stored, other
    schemes' quantized weights and scales included; an FP4 weight with a part missing or of the
    wrong shape is a ValueError naming the tensor."""
    out, folded = {}, set()
    for name in raw:
        for suffix in ("weight_packed", "weight"):
            if not name.endswith(suffix) or (name != suffix and not name.endswith("." + suffix)):
                continue
            prefix = name[: -len(suffix)]
            if suffix == "weight_packed":
                _check_scales_present(raw, name)
            layout = _layout_of(raw, prefix)
            if layout is None or TENSOR_SUFFIXES[layout][0] != suffix:
                continue
            weight = _fold_weight(raw, prefix, layout)
            if weight is not None:
                out[prefix + "weight"], parts = weight
                folded.update(parts)
            break
    out.update({name: tensor for name, tensor in raw.items() if name not in folded and name not in out})
    return out
