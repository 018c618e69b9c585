"""The checkpoint-throughput benchmark: one small run on the CPU (transformers needed)."""

from __future__ import annotations

import json

import pytest

from benchmarks import checkpoint_throughput

pytest.importorskip("transformers")


def test_cpu_run_quantizes_every_pair_and_reads_it_back(tmp_path):
    rows = checkpoint_throughput.main(["--devices", "cpu", "--hidden", "64", "--layers", "2", "--intermediate", "128",
                                       "--vocab", "256", "--shard", "100KB", "--out", str(tmp_path), "--tag", "test"])
    saved = json.loads((tmp_path / "checkpoint_test.json").read_text())
    assert saved["rows"] == rows and saved["shards"] >= 2
    assert [(r["format"], r["layout"]) for r in rows] == checkpoint_throughput.PAIRS
    for row in rows:
        assert row["weights"] == 2 * 7 and row["seconds"] > 0 and row["gb_per_s"] > 0
        assert row["min_sqnr_db"] > 15
    assert "| cpu" in (tmp_path / "checkpoint_test.md").read_text()
