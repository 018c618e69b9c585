"""The README's Python examples run as written (on the CPU, and on CUDA where there is a GPU), and
their results have the shapes and dtypes the README's comments promise. A README example that no
longer runs is a broken promise to every user who copies it first. Not run here: the blocks that
need a downloaded model or a process group (a transformers checkpoint, the sharded amax); the
APIs they call are tested in test_checkpoint.py, test_peer_checkpoints.py and test_distributed.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import fp4ops
from conftest import requires_cuda

README = Path(__file__).resolve().parents[1] / "README.md"
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]


def python_block(heading: str) -> str:
    """The first ```python block after the README line `heading` (a section title)."""
    text = README.read_text()
    start = text.index(heading)
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match is not None, f"no python block after {heading!r}"
    return match.group(1)


def run_block(heading: str, device: str, namespace: dict | None = None) -> dict:
    """Runs the block with every `device="cuda"` pointed at `device`, in `namespace` (the names an
    example expects from the text around it); returns the namespace."""
    code = python_block(heading).replace('device="cuda"', f'device="{device}"')
    if device != "cuda":
        assert '"cuda"' not in code and ".cuda()" not in code, f"a CUDA-only line the test cannot redirect in {heading!r}"
    namespace = {} if namespace is None else namespace
    exec(compile(code, f"README.md: {heading}", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("device", DEVICES)
def test_quick_example(device):
    ns = run_block("## Quick example", device)
    q, m = ns["q"], ns["m"]
    # The shapes and dtypes the example's comments state.
    assert isinstance(q, fp4ops.NVFP4Tensor) and isinstance(m, fp4ops.MXFP4Tensor)
    assert q.data.dtype == torch.uint8 and tuple(q.data.shape) == (4096, 2048)
    assert q.scales.dtype == torch.float8_e4m3fn and tuple(q.scales.shape) == (4096, 256)
    assert q.global_scale.dtype == torch.float32
    assert m.scales.dtype == torch.float8_e8m0fnu and tuple(m.scales.shape) == (4096, 128)
    assert ns["packed"].dtype == torch.uint8 and tuple(ns["packed"].shape) == (4096, 2048)
    assert ns["w_hat"].dtype == torch.bfloat16 and ns["w_hat"].shape == ns["w"].shape
    # The last lines rebind y: the batch-invariant linear, [8, 128, 4096] in h's dtype.
    assert ns["y"].dtype == torch.bfloat16 and tuple(ns["y"].shape) == (8, 128, 4096)
    # The documented quantities, recomputed: amax of w, and the GEMV against the linear of one row.
    amax = fp4ops.amax(ns["w"])
    assert amax.dim() == 0 and amax.item() == ns["w"].abs().max().float().item()
    gemv = fp4ops.gemv(q, ns["x"])
    assert gemv.dtype == torch.float16 and tuple(gemv.shape) == (4096,)
    # Rows of the FP4 activations, and the weight moved to the CPU.
    xq, last, kept = ns["xq"], ns["last"], ns["kept"]
    assert isinstance(last, fp4ops.NVFP4Tensor) and tuple(last.shape) == (8, 4096) and tuple(kept.shape) == (2, 128, 4096)
    assert torch.equal(last.dequantize(), xq.dequantize()[:, -1]) and last.global_scale is xq.global_scale
    assert ns["q_cpu"].data.device.type == "cpu" and ns["q_cpu"].global_scale.device.type == "cpu"


@pytest.mark.parametrize("device", DEVICES)
def test_recipe_example(device):
    w = torch.randn(256, 512, dtype=torch.bfloat16, device=device)
    ns = run_block("### Swizzled scales and the training recipe", device, {"fp4ops": fp4ops, "w": w, "step": 3})
    plain = fp4ops.quantize_nvfp4(w)
    assert torch.equal(ns["lin"].data, plain.data) and torch.equal(ns["lin"].scales.view(torch.uint8), plain.scales.view(torch.uint8))
    for name in ("h", "t", "s"):
        assert tuple(ns[name].data.shape) == (256, 256), name
    rows, cols = ns["rows"], ns["cols"]
    assert tuple(rows.data.shape) == (256, 256) and tuple(cols.data.shape) == (512, 128)


@pytest.mark.parametrize("device", DEVICES)
def test_model_example(device):
    from fp4ops.nn import FP4Linear

    model = torch.nn.Sequential()
    model.add_module("up", torch.nn.Linear(256, 512))
    model.add_module("act", torch.nn.GELU())
    model.add_module("lm_head", torch.nn.Linear(512, 128))
    model = model.to(device=device, dtype=torch.bfloat16)
    tokens = torch.randn(3, 5, 256, dtype=torch.bfloat16, device=device)
    ns = run_block("### FP4 weights in a model", device, {"torch": torch, "model": model, "tokens": tokens})
    assert ns["swapped"] == ["up"]  # lm_head skipped, as asked
    assert isinstance(model.up, FP4Linear) and isinstance(model.lm_head, torch.nn.Linear)
    assert ns["y"].dtype == torch.bfloat16 and tuple(ns["y"].shape) == (3, 5, 128)
    assert isinstance(ns["layer"], FP4Linear) and ns["layer"].batch_invariant


@pytest.mark.parametrize("device", DEVICES)
def test_w4a4_example(device):
    hidden, inter, rows = 256, 512, 6
    setup = {
        "torch": torch, "fp4ops": fp4ops,
        "x": torch.randn(rows, hidden, dtype=torch.bfloat16, device=device),
        "residual": torch.randn(rows, hidden, dtype=torch.bfloat16, device=device),
        "norm": torch.nn.RMSNorm(hidden, eps=1e-6, device=device, dtype=torch.bfloat16),
        "calibrated_amax": 12.0,
        "w_gate_up": fp4ops.quantize_nvfp4(torch.randn(2 * inter, hidden, dtype=torch.bfloat16, device=device)),
        "g_act_down": torch.tensor(8.0 / 2688, device=device),
        "w_down": fp4ops.quantize_nvfp4(torch.randn(hidden, inter, dtype=torch.bfloat16, device=device)),
    }
    ns = run_block("### FP4 activations straight from the norm and the MLP (W4A4)", device, setup)
    assert isinstance(ns["xq"], fp4ops.NVFP4Tensor) and tuple(ns["xq"].data.shape) == (rows, hidden // 2)
    assert ns["residual"].dtype == torch.bfloat16 and tuple(ns["residual"].shape) == (rows, hidden)
    assert ns["gate_up"].dtype == torch.bfloat16 and tuple(ns["gate_up"].shape) == (rows, 2 * inter)
    assert isinstance(ns["a"], fp4ops.NVFP4Tensor) and tuple(ns["a"].data.shape) == (rows, inter // 2)
    assert ns["y"].dtype == torch.bfloat16 and tuple(ns["y"].shape) == (rows, hidden)
