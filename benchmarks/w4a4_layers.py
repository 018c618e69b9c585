"""Llama-3.1-8B decoder layers in W4A4 on fp4ops, without attention: the decode stream's producers
and FP4 x FP4 linears as a serving engine chains them (run by benchmarks/decode_stream.py where
--dtypes has fp4).

Per layer, with h the layer's input and r the residual stream:
- fp4: `rms_norm_quantize(h, residual=r)` (the new residual and FP4 x), `linear` of that FP4 x by
  the q and fused k/v weights, `quantize` of q (attention's output stands in as q itself: the
  o projection's input has q's shape), `linear` by o, `rms_norm_quantize(o, residual)`, `linear`
  by the fused gate/up weight, `silu_mul_quantize`, `linear` by down; the next layer takes
  (down's output, the residual). NVFP4's global scales are static (calibrated on the same batch,
  as a serving engine calibrates once): every producer is one pass. NVFP4 is also timed with
  each producer and quantizer deriving its own g (format "nvfp4 own g": dynamic activation
  scales, the one-launch producers at decode rows).
- unfused: the same W4A4 chain with torch's `x + residual`, `F.rms_norm` and `F.silu(gate) * up`
  in bf16, each followed by fp4ops' quantizer (the sequence the fused producers replace);
- bf16: the same chain in torch (`x + residual`, `F.rms_norm`, `F.linear`, `F.silu(gate) * up`).
Both in CUDA graphs of STACK layers; tokens/s counts the 32 layers of the model and nothing else.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import torch.nn.functional as F

import fp4ops

EPS = 1e-5
LLAMA_8B_LAYERS = 32
STACK = 4
# (hidden, k/v width, MLP width): Llama-3.1-8B on a GPU, small on the CPU (exercises the code only).
LLAMA_8B_DIMS = (4096, 1024, 14336)
CPU_DIMS = (128, 64, 256)


@dataclasses.dataclass
class Layer:
    """One decoder layer's weights: bf16 for torch, FP4 for fp4ops, and the norms' weights."""
    attn_norm: torch.Tensor
    mlp_norm: torch.Tensor
    dense: dict[str, torch.Tensor]  # q, kv, o, gate_up, down: [N, K] bf16
    fp4: dict[str, object]  # the same, quantized
    # NVFP4 x's static global scales (attn, o, mlp, down), set by calibrate(); None for MXFP4.
    scales: dict[str, torch.Tensor | None] = dataclasses.field(default_factory=dict)


def quantize(x: torch.Tensor, fmt: str, global_scale=None):
    return fp4ops.quantize_nvfp4(x, global_scale) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(x)


def make_layers(count: int, fmt: str, device, dims=LLAMA_8B_DIMS) -> list[Layer]:
    hidden, kv, mlp = dims
    shapes = {"q": (hidden, hidden), "kv": (2 * kv, hidden), "o": (hidden, hidden), "gate_up": (2 * mlp, hidden),
              "down": (hidden, mlp)}
    layers = []
    for _ in range(count):
        dense = {name: (torch.randn(n, k, device=device) * k**-0.5).to(torch.bfloat16) for name, (n, k) in shapes.items()}
        norms = [(1 + 0.1 * torch.randn(hidden, device=device)).to(torch.bfloat16) for _ in range(2)]
        layers.append(Layer(*norms, dense, {name: quantize(w, fmt) for name, w in dense.items()}))
    return layers


def fp4_layer(layer: Layer, h: torch.Tensor, r: torch.Tensor, fmt: str,
              record: dict | None = None, own_scales: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(down's output, the residual stream) of one layer on fp4ops; layer.scales the producers' g
    (a producer without one, or every producer with own_scales, derives its own). record: where
    given, each producer's g goes there."""
    g = {} if own_scales else layer.scales

    def kept(name: str, q):
        if record is not None:
            record[name] = q.global_scale
        return q

    x, r = fp4ops.rms_norm_quantize(h, layer.attn_norm, EPS, residual=r, format=fmt, global_scale=g.get("attn"))
    q = fp4ops.linear(kept("attn", x), layer.fp4["q"])
    fp4ops.linear(x, layer.fp4["kv"])
    o = fp4ops.linear(kept("o", quantize(q, fmt, g.get("o"))), layer.fp4["o"])
    x, r = fp4ops.rms_norm_quantize(o, layer.mlp_norm, EPS, residual=r, format=fmt, global_scale=g.get("mlp"))
    gate_up = fp4ops.linear(kept("mlp", x), layer.fp4["gate_up"])
    d = kept("down", fp4ops.silu_mul_quantize(gate_up, format=fmt, global_scale=g.get("down")))
    return fp4ops.linear(d, layer.fp4["down"]), r


def unfused_layer(layer: Layer, h: torch.Tensor, r: torch.Tensor, fmt: str,
                  own_scales: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """fp4_layer with each producer unfused: torch's bf16 op, then fp4ops' quantizer (same scales)."""
    g, hidden = {} if own_scales else layer.scales, h.shape[-1]
    r = h + r
    x = quantize(F.rms_norm(r, (hidden,), layer.attn_norm, EPS), fmt, g.get("attn"))
    q = fp4ops.linear(x, layer.fp4["q"])
    fp4ops.linear(x, layer.fp4["kv"])
    r = fp4ops.linear(quantize(q, fmt, g.get("o")), layer.fp4["o"]) + r
    x = quantize(F.rms_norm(r, (hidden,), layer.mlp_norm, EPS), fmt, g.get("mlp"))
    gate, up = fp4ops.linear(x, layer.fp4["gate_up"]).chunk(2, dim=-1)
    return fp4ops.linear(quantize(F.silu(gate) * up, fmt, g.get("down")), layer.fp4["down"]), r


def bf16_layer(layer: Layer, h: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same layer in torch, bf16 throughout."""
    w, hidden = layer.dense, h.shape[-1]
    r = h + r
    x = F.rms_norm(r, (hidden,), layer.attn_norm, EPS)
    q = F.linear(x, w["q"])
    F.linear(x, w["kv"])
    r = F.linear(q, w["o"]) + r
    gate, up = F.linear(F.rms_norm(r, (hidden,), layer.mlp_norm, EPS), w["gate_up"]).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w["down"]), r


def calibrate(layers: list[Layer], fmt: str, h: torch.Tensor, r: torch.Tensor) -> None:
    """Each NVFP4 producer's global scale from its own amax on this batch (one eager pass of
    fp4_layer with the producers deriving g), kept as the layers' static scales."""
    for layer in layers:
        layer.scales = {}
        if fmt == "nvfp4":
            scales = {}
            h, r = fp4_layer(layer, h, r, fmt, record=scales)
            layer.scales = scales


def chained(layers: list[Layer], layer_step, h: torch.Tensor, r: torch.Tensor):
    """A decode step through `layers` in turn from input h and residual r, as decode_stream's
    timer takes it (one ignored argument); layer_step(layer, x, residual) -> (x, residual)."""
    def run(_):
        x, residual = h, r
        for layer in layers:
            x, residual = layer_step(layer, x, residual)
        return x
    return run


def measure(fmt: str, rows_list: list[int], timer, time_stream, fp4_only: bool = False) -> list[dict]:
    """Tokens/s of the model's 32 layers (attention left out) per batch in rows_list: fp4ops in
    W4A4 and, unless fp4_only, the unfused W4A4 chain and torch in bf16; for NVFP4 also a row
    "nvfp4 own g" of the same W4A4 chains with dynamic activation scales (no bf16: the same as the
    static row's). time_stream(fn, x, timer): decode_stream's timer."""
    dims = LLAMA_8B_DIMS if timer.cuda else CPU_DIMS
    stack = STACK if timer.cuda else 1
    layers = make_layers(stack, fmt, timer.device, dims)
    variants = [(fmt, False)] + ([(f"{fmt} own g", True)] if fmt == "nvfp4" else [])
    out = []
    for rows in rows_list:
        h = torch.randn(rows, dims[0], device=timer.device, dtype=torch.bfloat16)
        r = torch.randn(rows, dims[0], device=timer.device, dtype=torch.bfloat16)
        calibrate(layers, fmt, h, r)
        for label, own_scales in variants:
            steps = {"fp4": chained(layers, functools.partial(fp4_layer, fmt=fmt, own_scales=own_scales), h, r)}
            if not fp4_only:
                steps["unfused"] = chained(layers, functools.partial(unfused_layer, fmt=fmt, own_scales=own_scales), h, r)
                if not own_scales:
                    steps["bf16"] = chained(layers, bf16_layer, h, r)
            row = {"format": label, "rows": rows}
            for name, step in steps.items():
                us = time_stream(step, None, timer) * LLAMA_8B_LAYERS / stack
                row[f"{name}_step_us"], row[f"{name}_tokens_per_s"] = us, rows / us * 1e6
            out.append(row)
            others = "".join(f", {name} {row[f'{name}_tokens_per_s']:9.0f}" for name in ("unfused", "bf16") if name in steps)
            print(f"  Llama-3.1-8B layers without attention, W4A4 {label}, batch {rows:>3}: fp4 "
                  f"{row['fp4_tokens_per_s']:9.0f}{others} tokens/s", flush=True)
    return out
