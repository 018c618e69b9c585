"""Ops chained as a W4A4 model runs them, each fused producer and quantizer reading what the op just
before it wrote (a linear's output, the new residual, a given g).

The producers' and quantizers' kernels launch as programmatic dependents of the kernel before them:
their CTAs start while that kernel ends and wait for it before they read. A kernel that read too
early would see the previous call's bytes, so every chain here runs over fresh inputs and is held,
bit for bit, to the same chain with the device synchronized after every op: run back to back
eagerly, and replayed as one CUDA graph."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from conftest import assert_same_bytes, cuda_has_kernel, requires_caching_allocator, requires_cuda

import fp4ops

HIDDEN, INTER = 1024, 2048
EPS = 1e-5
# NVFP4 with static global scales (one pass each), NVFP4 deriving its own (the one-launch grids up
# to 1024 rows, the zeroing and two passes above), MXFP4.
TARGETS = ["nvfp4-given", "nvfp4-own", "mxfp4"]
# Decode rows (the linear's own kernels), the most rows one launch of a producer takes (its largest
# cooperative grid, launched as a dependent behind a linear), and more than that.
ROWS = [1, 8, 64, 1024, 1100]


@dataclass
class Layer:
    fmt: str
    norms: tuple[torch.Tensor, torch.Tensor]
    weights: dict[str, object]  # q, o, gate_up, down, quantized
    scales: dict[str, torch.Tensor | None]  # each producer's global scale (None: its own)


def make_layer(target: str) -> Layer:
    fmt, variant = target.split("-") if "-" in target else (target, "")
    shapes = {"q": (HIDDEN, HIDDEN), "o": (HIDDEN, HIDDEN), "gate_up": (2 * INTER, HIDDEN), "down": (HIDDEN, INTER)}
    weights = {name: quantize(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k**-0.5, fmt)
               for name, (n, k) in shapes.items()}
    norms = tuple((1 + 0.1 * torch.randn(HIDDEN, device="cuda")).to(torch.bfloat16) for _ in range(2))

    def static_scale():  # near amax / 2688 for these activations: some blocks saturate, some are small
        return torch.tensor(2.0 ** torch.empty(()).uniform_(-10, -7).item(), device="cuda")

    scales = {name: static_scale() if variant == "given" else None for name in ("attn", "o", "mlp", "down")}
    return Layer(fmt, norms, weights, scales)


def quantize(x: torch.Tensor, fmt: str, global_scale=None):
    return fp4ops.quantize_nvfp4(x, global_scale) if fmt == "nvfp4" else fp4ops.quantize_mxfp4(x)


def run_layer(layer: Layer, h: torch.Tensor, r: torch.Tensor, synchronized: bool):
    """(every output of one layer without attention, down's output, the new residual); q stands in
    for attention's output. With `synchronized`, the device is synchronized after every op."""
    outputs: list[torch.Tensor] = []

    def kept(result):
        if synchronized:
            torch.cuda.synchronize()
        for t in result if isinstance(result, tuple) else (result,):
            if isinstance(t, torch.Tensor):
                outputs.append(t)
            else:  # a quantized activation: its codes, scales and (NVFP4) global scale
                outputs.extend([t.data, t.scales] + ([t.global_scale] if isinstance(t, fp4ops.NVFP4Tensor) else []))
        return result

    g, w = layer.scales, layer.weights
    x, r = kept(fp4ops.rms_norm_quantize(h, layer.norms[0], EPS, residual=r, format=layer.fmt, global_scale=g["attn"]))
    q = kept(fp4ops.linear(x, w["q"]))
    o = kept(fp4ops.linear(kept(quantize(q, layer.fmt, g["o"])), w["o"]))
    x, r = kept(fp4ops.rms_norm_quantize(o, layer.norms[1], EPS, residual=r, format=layer.fmt, global_scale=g["mlp"]))
    gate_up = kept(fp4ops.linear(x, w["gate_up"]))
    d = kept(fp4ops.silu_mul_quantize(gate_up, format=layer.fmt, global_scale=g["down"]))
    return outputs, kept(fp4ops.linear(d, w["down"])), r


def run_chain(layers: list[Layer], h: torch.Tensor, r: torch.Tensor, synchronized: bool = False) -> list[torch.Tensor]:
    outputs: list[torch.Tensor] = []
    for layer in layers:
        layer_outputs, h, r = run_layer(layer, h, r, synchronized)
        outputs += layer_outputs
    return outputs


def assert_same_outputs(got: list[torch.Tensor], want: list[torch.Tensor], what: str) -> None:
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert_same_bytes(a.reshape(-1), b.reshape(-1), f"{what}: output {i} of {len(want)}")  # g is 0-dim


def fresh_inputs(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16) for _ in range(2))


# Every test here: each target, each row count, on a GPU.
pytestmark = [requires_cuda, pytest.mark.parametrize("rows", ROWS), pytest.mark.parametrize("target", TARGETS)]


@pytest.fixture
def layers(target) -> list[Layer]:
    """Two layers of `target`, skipping cleanly where the build has no CUDA kernel for an op."""
    for op in ("rms_norm_quantize", "silu_mul_quantize", "linear"):
        if not cuda_has_kernel(op):
            pytest.skip(f"this build has no CUDA kernel for fp4ops::{op}")
    return [make_layer(target) for _ in range(2)]


def test_back_to_back_chain_matches_the_synchronized_one(layers, rows):
    for _ in range(2):
        h, r = fresh_inputs(rows)
        assert_same_outputs(run_chain(layers, h, r), run_chain(layers, h, r, synchronized=True), f"{rows} rows")


@requires_caching_allocator
def test_chain_replayed_as_one_graph_matches_the_synchronized_one(layers, rows):
    static_h, static_r = fresh_inputs(rows)
    side = torch.cuda.Stream()  # warm up on a side stream, as capture wants
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run_chain(layers, static_h, static_r)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run_chain(layers, static_h, static_r)
    for replay in range(3):
        h, r = fresh_inputs(rows)
        static_h.copy_(h)
        static_r.copy_(r)
        graph.replay()
        torch.cuda.synchronize()
        assert_same_outputs(captured, run_chain(layers, h, r, synchronized=True), f"{rows} rows, replay {replay}")
