"""The eager-decode benchmark: one small run on the CPU (no GPU needed) and its tables."""

from __future__ import annotations

import json

from benchmarks import eager_decode


def test_cpu_run_writes_every_row(tmp_path):
    result = eager_decode.main(["--device", "cpu", "--out", str(tmp_path), "--rows", "1", "3", "--tag", "test"])
    saved = json.loads((tmp_path / "eager_test.json").read_text())
    assert saved["stack"] == result["stack"] and len(saved["stack"]) == 4
    for row in saved["stack"]:
        for name in ("bf16", "fp4", "fp4_checked"):
            assert row[f"{name}_host_us"] > 0 and row[f"{name}_eager_us"] > 0
            assert row[f"{name}_graph_us"] is None and f"{name}_graph_tokens_per_s" not in row
    assert len(saved["calls"]) == 4 and all(c["FP4Linear"] > 0 and c["torch.ops.fp4ops.linear"] > 0 for c in saved["calls"])
    text = (tmp_path / "eager_test.md").read_text()
    assert text.count("| nvfp4 | 1 | ") == 1 and text.count("| mxfp4 | 3 | ") == 1 and text.count("| 128 x 256 |") == 2
    assert (tmp_path / "eager_test.png").stat().st_size > 0


def test_markdown_gives_the_eager_share_of_the_graph():
    row = {"format": "nvfp4", "rows": 8, "bf16_host_us": 900.0, "fp4_host_us": 1000.0, "bf16_eager_tokens_per_s": 80.0,
           "fp4_eager_tokens_per_s": 120.0, "fp4_checked_host_us": 1500.0,
           "fp4_checked_eager_tokens_per_s": 60.0, "bf16_graph_tokens_per_s": 100.0, "fp4_graph_tokens_per_s": 400.0}
    text = eager_decode.markdown({"banner_line": "GPU", "layers": 32, "stack": [row], "calls": []})
    assert "| nvfp4 | 8 | 900 / 1000 / 1500 | 80 / 120 / 60 | 100 / 400 | 0.30 |" in text
