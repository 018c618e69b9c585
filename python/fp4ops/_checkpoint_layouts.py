"""How a quantized weight is named and described on disk: the compressed-tensors and ModelOpt
layouts of `python -m fp4ops quantize`, and the configs serving engines read to know them.

compressed-tensors (`nvfp4-pack-quantized` / `mxfp4-pack-quantized`, what compressed-tensors,
transformers and vLLM's W4A16 FP4 schemes read): `<module>.weight_packed` (E2M1 codes, element 2i in
the low nibble, as ours), `<module>.weight_scale` (E4M3; for MXFP4 the E8M0 bytes as uint8) and,
for NVFP4, `<module>.weight_global_scale`: the reciprocal of our decode global scale, shape [1].
ModelOpt (NVFP4 only): `<module>.weight` (codes), `<module>.weight_scale`, `<module>.weight_scale_2`
(our decode global scale, shape []), described by `hf_quant_config.json`.
"""

from __future__ import annotations

import torch

LAYOUTS = ("compressed-tensors", "modelopt")

# The tensor names each layout gives a quantized weight, after the module's prefix.
TENSOR_SUFFIXES = {
    "compressed-tensors": ("weight_packed", "weight_scale", "weight_global_scale"),
    "modelopt": ("weight", "weight_scale", "weight_scale_2"),
}

# The E2M1 magnitudes' mantissas (0.5, 1, 2, 4, 6 -> 1; 1.5, 3, 6 -> 3) and the E4M3 scales'
# mantissas (subnormals included, up to a power of two): a product's rounding depends only on
# these, because scaling by a power of two is exact.
_CODE_MANTISSAS = (1.0, 3.0)
_SCALE_MANTISSAS = tuple(m / 8 for m in range(8, 16))


def _decodes_equal(g: torch.Tensor, reciprocal: torch.Tensor) -> bool:
    """True when compressed-tensors' decode, bf16(code * (scale / reciprocal)), equals ours,
    bf16(code * (scale * g)) (SPEC 2.6), for every code and every E4M3 scale. Both are fp32
    products rounded once to bf16; only the mantissas matter, so checking them covers all values
    (away from fp32's subnormal range)."""
    codes = torch.tensor(_CODE_MANTISSAS)[:, None]
    scales = torch.tensor(_SCALE_MANTISSAS)[None, :]
    ours = (codes * (scales * g)).to(torch.bfloat16)
    theirs = (codes * (scales / reciprocal)).to(torch.bfloat16)
    return bool(torch.equal(ours.view(torch.int16), theirs.view(torch.int16)))


def _neighbours(x: torch.Tensor, reach: int = 3):
    """x, then the fp32 values 1, -1, 2, -2, ... ulps away."""
    bits = x.reshape(()).view(torch.int32)
    yield x.reshape(())
    for step in range(1, reach + 1):
        for sign in (1, -1):
            yield (bits + sign * step).view(torch.float32)


def exact_reciprocal(g: torch.Tensor) -> torch.Tensor | None:
    """The fp32 value near 1/g (1/g first, then its neighbours) with which compressed-tensors'
    decode equals fp4ops.dequantize's in bf16 for every code and scale, or None when there is none:
    for some g (about one bf16 amax mantissa in a hundred) one of our fp32 products is a bf16 tie
    that no reciprocal reproduces."""
    g = g.reshape(()).float().cpu()
    return next((r.clone() for r in _neighbours(torch.ones(()) / g) if _decodes_equal(g, r)), None)


def compressed_tensors_global_scale(g: torch.Tensor) -> torch.Tensor:
    """The decode scale to quantize with in the compressed-tensors layout: g itself when it has an
    exact reciprocal, else the next fp32 above g that has one (one or two ulps up), so that the
    checkpoint decodes the same in compressed-tensors as in fp4ops. Only upward: a larger g keeps
    every block scale within E4M3's range. g is kept when no value in reach has one."""
    bits = g.reshape(()).float().cpu().view(torch.int32)
    for step in range(8):
        candidate = (bits + step).view(torch.float32)
        if exact_reciprocal(candidate) is not None:
            return candidate.clone().to(g.device)
    return g.reshape(())


def reciprocal_global_scale(g: torch.Tensor) -> torch.Tensor:
    """compressed-tensors' weight_global_scale for our decode scale g: fp32 [1], the exact
    reciprocal when g has one (compressed_tensors_global_scale picks such g), else 1/g."""
    r = exact_reciprocal(g)
    return (r if r is not None else torch.ones(()) / g.reshape(()).float().cpu()).reshape(1)


def decode_global_scale(reciprocal: torch.Tensor) -> torch.Tensor:
    """Our decode scale for a compressed-tensors weight_global_scale: fp32 [], near 1/reciprocal,
    chosen so that fp4ops.dequantize gives in bf16 exactly what compressed-tensors decompresses."""
    r = reciprocal.reshape(()).float().cpu()
    for g in _neighbours(torch.ones(()) / r):
        if _decodes_equal(g, r):
            return g.clone()
    return torch.ones(()) / r


def quantized_tensors(prefix: str, q, layout: str) -> dict[str, torch.Tensor]:
    """The tensors one quantized weight (an NVFP4Tensor or MXFP4Tensor with linear scales, on the
    CPU) becomes under `prefix` (the module's name and a dot)."""
    packed, scale, global_scale = (prefix + suffix for suffix in TENSOR_SUFFIXES[layout])
    nvfp4 = hasattr(q, "global_scale")
    if layout == "modelopt":
        if not nvfp4:
            raise ValueError("layout: the ModelOpt layout holds NVFP4 only")
        return {packed: q.data, scale: q.scales, global_scale: q.global_scale.reshape(())}
    if not nvfp4:
        # compressed-tensors reads E8M0 scales as their bytes; a value cast would zero them.
        return {packed: q.data, scale: q.scales.view(torch.uint8)}
    return {packed: q.data, scale: q.scales, global_scale: reciprocal_global_scale(q.global_scale)}


def quantized_entries(prefix: str, shape: tuple, block: int, layout: str) -> dict[str, tuple[str, tuple]]:
    """{name: (safetensors dtype, shape)} of the tensors quantized_tensors gives a weight of
    `shape` [N, K] with blocks of `block` (16: NVFP4, 32: MXFP4), known before it is quantized so
    that a file's header can be written first."""
    packed, scale, global_scale = (prefix + suffix for suffix in TENSOR_SUFFIXES[layout])
    rows, cols = shape
    nvfp4 = block == 16
    entries = {packed: ("U8", (rows, cols // 2)), scale: ("F8_E4M3" if nvfp4 else "U8", (rows, cols // block))}
    if nvfp4:
        entries[global_scale] = ("F32", () if layout == "modelopt" else (1,))
    return entries


def _module_names(weight_names) -> list[str]:
    return sorted({name[: -len(".weight")] for name in weight_names})


def unquantized_linears(dense: dict[str, str], quantized) -> list[str]:
    """The modules an engine must leave dense, exactly: every linear weight left unquantized
    (`dense`), named by its module, and lm_head unless `quantized` (the weights quantized) holds
    its weight. A checkpoint without lm_head's weight ties it to the embeddings, which stay dense,
    and an engine that builds it as a Linear must not look for FP4 tensors; a quantized lm_head
    listed would be loaded dense from tensors that are not there. Embeddings are not linears, so
    they are left out."""
    names = set(_module_names(name for name in dense if "embed" not in name))
    if "lm_head.weight" not in quantized:
        names.add("lm_head")
    return sorted(names)


def compressed_tensors_config(format: str, ignore: list[str]) -> dict:
    """config.json's quantization_config for a weight-only compressed-tensors FP4 checkpoint."""
    nvfp4 = format == "nvfp4"
    weights = {"num_bits": 4, "type": "float", "symmetric": True, "dynamic": False,
               "group_size": 16 if nvfp4 else 32, "strategy": "tensor_group" if nvfp4 else "group",
               "scale_dtype": "torch.float8_e4m3fn" if nvfp4 else "torch.uint8"}
    return {"quant_method": "compressed-tensors", "format": f"{format}-pack-quantized",
            "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                          "output_activations": None, "format": None}},
            "ignore": ignore, "kv_cache_scheme": None}


def modelopt_configs(ignore: list[str], version: str) -> tuple[dict, dict]:
    """hf_quant_config.json and config.json's quantization_config of a ModelOpt W4A16 NVFP4
    checkpoint."""
    quantization = {"quant_algo": "W4A16_NVFP4", "group_size": 16, "exclude_modules": ignore}
    return ({"producer": {"name": "fp4ops", "version": version}, "quantization": quantization},
            {"quant_method": "modelopt", **quantization})
