"""The decode-stream benchmark's bookkeeping, and one small run on the CPU (no GPU needed)."""

from __future__ import annotations

import json

import pytest
import torch

import fp4ops

from benchmarks import decode_stream


def test_layer_count_covers_four_times_the_l2():
    l2 = 50 << 20
    for n, k in decode_stream.SHAPES:
        for fmt in ("nvfp4", "mxfp4"):
            count = decode_stream.layer_count(n, k, fmt, l2)
            assert count * decode_stream.fp4_weight_bytes(n, k, fmt) >= 4 * l2
            assert count == 2 or (count - 1) * decode_stream.fp4_weight_bytes(n, k, fmt) < 4 * l2


def test_targets_by_row_count():
    assert [decode_stream.target_for(m) for m in (1, 16, 17, 32, 64, 65)] == [3.4, 3.4, 2.5, 2.5, 1.6, None]


def test_cpu_run_writes_every_row(tmp_path):
    result = decode_stream.main(["--device", "cpu", "--out", str(tmp_path), "--shapes", "64,128", "--rows", "1", "2",
                                 "--formats", "nvfp4", "mxfp4", "--no-llama", "--tag", "test"])
    saved = json.loads((tmp_path / "decode_test.json").read_text())
    assert saved["rows"] == result["rows"] and len(saved["rows"]) == 4
    for row in saved["rows"]:
        assert row["fp4_us"] > 0 and row["bf16_us"] > 0 and row["dequant_us"] > 0
        assert row["pct_of_copy"] == decode_stream.share_of_copy(row, row["fp4_us"], saved["ceilings"]["copy"])
        assert row["target_pct_of_copy"] == decode_stream.target_share_of_copy(row, saved["ceilings"]["copy"])
    text = (tmp_path / "decode_test.md").read_text()
    assert text.count("| 64 x 128 |") == 4 and ">= 3.4x" in text
    assert (tmp_path / "decode_test.png").stat().st_size > 0


def test_layer_bytes_count_weight_x_and_y():
    n, k = 256, 512
    weight = {"nvfp4": n * k // 2 + n * k // 16, "mxfp4": n * k // 2 + n * k // 32}
    for fmt in ("nvfp4", "mxfp4"):
        assert decode_stream.layer_bytes(n, k, fmt, "bfloat16", 3) == weight[fmt] + 3 * k * 2 + 3 * n * 2
        assert decode_stream.layer_bytes(n, k, fmt, "float16", 1) == weight[fmt] + k * 2 + n * 2
        # FP4 x: its codes and scales in the weight's format; y in bf16.
        assert decode_stream.layer_bytes(n, k, fmt, "fp4", 2) == weight[fmt] + 2 * weight[fmt] // n + 2 * n * 2


def test_target_share_is_the_share_at_the_target_time():
    """A layer that met its target exactly would move its bytes at the target's share of copy; no
    share where the row has no target or bf16 was not timed."""
    row = {"n": 4096, "k": 4096, "format": "nvfp4", "dtype": "bfloat16", "rows": 8, "bf16_us": 12.0, "target": 3.4}
    needed = decode_stream.target_share_of_copy(row, 4000.0)
    assert needed == pytest.approx(decode_stream.share_of_copy(row, 12.0 / 3.4, 4000.0), rel=1e-12)
    assert needed == pytest.approx(100 * decode_stream.layer_bytes(4096, 4096, "nvfp4", "bfloat16", 8) / (12.0 / 3.4) / 4e6)
    assert decode_stream.target_share_of_copy({**row, "target": None}, 4000.0) is None
    assert decode_stream.target_share_of_copy({k: v for k, v in row.items() if k != "bf16_us"}, 4000.0) is None


def test_render_rebuilds_a_saved_runs_table(tmp_path):
    decode_stream.main(["--device", "cpu", "--out", str(tmp_path), "--shapes", "64,128", "--rows", "1", "2",
                        "--formats", "nvfp4", "--no-llama", "--tag", "test"])
    table = tmp_path / "decode_test.md"
    written = table.read_text()
    table.unlink()
    decode_stream.main(["--render", str(tmp_path / "decode_test.json")])
    assert table.read_text() == written and "target's %" in written


def test_markdown_lists_the_llama_rows():
    result = {"banner_line": "GPU", "rows": [], "llama": [
        {"format": "nvfp4", "dtype": "bfloat16", "rows": 8, "fp4_tokens_per_s": 3000.0, "bf16_tokens_per_s": 1000.0}]}
    assert "| nvfp4 | bfloat16 | 8 | 3000 | 1000 | 3.00x |" in decode_stream.markdown(result)


def test_cpu_run_with_fp4_x(tmp_path):
    """W4A4 rows: x quantized to the weight's format, only up to the kernel family's rows."""
    result = decode_stream.main(["--device", "cpu", "--out", str(tmp_path), "--shapes", "64,128", "--rows", "1", "65",
                                 "--formats", "nvfp4", "--dtypes", "fp4", "--no-llama", "--tag", "test"])
    assert [(r["dtype"], r["rows"]) for r in result["rows"]] == [("fp4", 1)]
    assert result["rows"][0]["fp4_us"] > 0 and "pct_of_copy" in result["rows"][0]
    assert "| 64 x 128 | nvfp4 | fp4 | 1 |" in (tmp_path / "decode_test.md").read_text()


def test_fp4_only_times_the_fp4_layers_alone(tmp_path):
    """An A/B of kernels skips the baselines; the tables show '-' where a figure was not timed."""
    result = decode_stream.main(["--device", "cpu", "--out", str(tmp_path), "--shapes", "64,128", "--rows", "1", "2",
                                 "--formats", "nvfp4", "--fp4-only", "--tag", "test"])
    assert [sorted(k for k in row if k.endswith("_us")) for row in result["rows"]] == [["fp4_us"], ["fp4_us"]]
    assert all("speedup_vs_bf16" not in row for row in result["rows"]) and "pct_of_copy" in result["rows"][0]
    assert result["llama"] and all("bf16_tokens_per_s" not in row and row["fp4_tokens_per_s"] > 0 for row in result["llama"])
    text = (tmp_path / "decode_test.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 64 x 128 | nvfp4 | bfloat16 | 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5:10] == ["-"] * 5 and float(cells[10]) > 0 and cells[11] == "-"  # FP4's share, no target's
    assert "| nvfp4 | bfloat16 | 1 |" in text and text.rstrip().endswith("| - | - |")
    assert (tmp_path / "decode_test.png").stat().st_size > 0


def test_batch_invariant_runs_every_fp4_layer_invariant(tmp_path, monkeypatch):
    """--batch-invariant builds every FP4 layer with batch_invariant=True and says so in the table."""
    built = []
    original = decode_stream.make_layers

    def recording_make_layers(*args, **kwargs):
        layers = original(*args, **kwargs)
        built.extend(layers[0])
        return layers

    monkeypatch.setattr(decode_stream, "make_layers", recording_make_layers)
    result = decode_stream.main(["--device", "cpu", "--out", str(tmp_path), "--shapes", "64,128", "--rows", "65",
                                 "--formats", "nvfp4", "--batch-invariant", "--tag", "test"])
    assert result["batch_invariant"] and built and all(layer.batch_invariant for layer in built)
    assert "batch_invariant=True" in (tmp_path / "decode_test.md").read_text()
    assert result["rows"][0]["fp4_us"] > 0 and result["llama"]


def test_bias_gives_every_shape_layer_a_bias(tmp_path, monkeypatch):
    """--bias builds every layer of --shapes with a bias (the Llama stack without), passes it to
    all three implementations, and says so in the table."""
    built = []
    original = decode_stream.make_layers

    def recording_make_layers(*args, **kwargs):
        layers = original(*args, **kwargs)
        built.append(layers)
        return layers

    monkeypatch.setattr(decode_stream, "make_layers", recording_make_layers)
    result = decode_stream.main(["--device", "cpu", "--out", str(tmp_path), "--shapes", "64,128", "--rows", "1", "3",
                                 "--formats", "nvfp4", "--dtypes", "bfloat16", "fp4", "--llama-rows", "1",
                                 "--bias", "--tag", "test"])
    assert result["bias"] and "Every layer of the shapes with a bias." in (tmp_path / "decode_test.md").read_text()
    shape_runs, llama_run = built[:-1], built[-1]
    assert shape_runs and all(layer.bias is not None and b is not None for fp4, dense in shape_runs
                              for layer, (_, b) in zip(fp4, dense, strict=True))
    assert all(layer.bias is None and b is None for layer, (_, b) in zip(*llama_run, strict=True))
    # The three implementations give one layer's output within the FP4 bound of each other only
    # if each adds the same bias: check it directly on a layer with a large bias.
    fp4_layers, dense = shape_runs[0]
    layer, (w, b) = fp4_layers[0], dense[0]
    with torch.no_grad():
        b.fill_(1000.0), layer.bias.fill_(1000.0)
        x = torch.randn(2, 128, dtype=torch.bfloat16)
        outs = {name: fn(x)[0].float() for name, fn in decode_stream.implementations(fp4_layers[:1], dense[:1]).items()}
    assert all((out - 1000).abs().max() < 100 for out in outs.values())
    assert len(result["rows"]) == 4 and all(row["fp4_us"] > 0 for row in result["rows"])


def test_fp4_x_also_runs_the_w4a4_layers(tmp_path):
    """With fp4 among --dtypes, the Llama layers run in W4A4 on fp4ops' producers (small on the CPU)
    against torch bf16, in their own table; without, they do not run."""
    result = decode_stream.main(["--device", "cpu", "--out", str(tmp_path), "--shapes", "64,128", "--rows", "1",
                                 "--formats", "nvfp4", "mxfp4", "--dtypes", "fp4", "--llama-only", "--tag", "test"])
    assert [(r["format"], r["rows"]) for r in result["llama_w4a4"]] == [
        ("nvfp4", 1), ("nvfp4 own g", 1), ("nvfp4", 2), ("nvfp4 own g", 2), ("mxfp4", 1), ("mxfp4", 2)]
    for r in result["llama_w4a4"]:  # the own-g rows leave bf16 to the static rows beside them
        names = ("fp4", "unfused") if r["format"].endswith("own g") else ("fp4", "unfused", "bf16")
        assert all(r[f"{name}_tokens_per_s"] > 0 for name in names) and ("bf16_tokens_per_s" in r) == ("bf16" in names)
    text = (tmp_path / "decode_test.md").read_text()
    assert "W4A4 tokens/s" in text and "| mxfp4 | 2 |" in text and "| nvfp4 own g | 2 |" in text
    plain = decode_stream.main(["--device", "cpu", "--out", str(tmp_path), "--llama-only", "--tag", "plain"])
    assert plain["llama_w4a4"] == [] and "W4A4" not in (tmp_path / "decode_plain.md").read_text()


def test_with_gemv_times_the_gemv_at_one_row(tmp_path):
    """--with-gemv adds fp4ops.gemv on the same weights at one row (dense and FP4 x), and its table."""
    result = decode_stream.main(["--device", "cpu", "--out", str(tmp_path), "--shapes", "64,128", "--rows", "1", "2",
                                 "--formats", "nvfp4", "mxfp4", "--dtypes", "bfloat16", "fp4", "--no-llama",
                                 "--fp4-only", "--with-gemv", "--tag", "test"])
    assert len(result["rows"]) == 8
    for row in result["rows"]:
        assert ("gemv_us" in row) == (row["rows"] == 1) and row["fp4_us"] > 0
        assert row.get("gemv_us", 1.0) > 0
    text = (tmp_path / "decode_test.md").read_text()
    assert "| 64 x 128 | nvfp4 | fp4 |" in text.split("One row against fp4ops.gemv")[1]
    assert sum(line.startswith("| 64 x 128 |") for line in text.split("One row against fp4ops.gemv")[1].splitlines()) == 4


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("fp4_x", [False, True])
def test_with_gemv_runs_the_gemv_on_the_layers_own_weights(fmt, fp4_x):
    """Each layer's GEMV output is fp4ops.gemv of that layer's weight and x's row (quantized on its
    own where x is FP4), in x's dtype (bf16 for FP4 x)."""
    quantize = fp4ops.quantize_nvfp4 if fmt == "nvfp4" else fp4ops.quantize_mxfp4
    fp4_layers, dense = decode_stream.make_layers([(32, 64)], 2, fmt, torch.float16, "cpu")
    x = torch.randn(1, 64, dtype=torch.float16)
    b, out_dtype = (quantize(x[0]), torch.bfloat16) if fp4_x else (x[0], torch.float16)
    outs = decode_stream.implementations(fp4_layers, dense, quantize(x) if fp4_x else None, with_gemv=True)["gemv"](x)
    assert len(outs) == 2
    for layer, y in zip(fp4_layers, outs):
        assert y.dtype == out_dtype and y.shape == (32,)
        torch.testing.assert_close(y, fp4ops.gemv(layer.quantized_weight(), b, out_dtype=out_dtype), rtol=0, atol=0)
    assert "gemv" not in decode_stream.implementations(fp4_layers, dense)


def test_with_gemv_refuses_layers_with_a_bias(capsys):
    with pytest.raises(SystemExit):
        decode_stream.main(["--device", "cpu", "--rows", "1", "--with-gemv", "--bias"])
    assert "--with-gemv" in capsys.readouterr().err
