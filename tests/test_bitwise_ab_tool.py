"""tools/bitwise_ab.py, on the CPU: what one build saves, the same build finds equal byte for byte,
and a changed or missing output is named."""

from __future__ import annotations

import torch

from conftest import load_tool


def test_save_then_compare_finds_every_output_equal_and_names_a_changed_one(tmp_path, capsys):
    tool = load_tool("bitwise_ab")
    path = tmp_path / "outputs.pt"
    assert tool.main(["save", str(path), "--device", "cpu"]) == 0
    saved = torch.load(path)
    names = saved["outputs"].keys()
    assert any(name.startswith("every_op") for name in names) and any(name.startswith("linear") for name in names)
    assert tool.main(["compare", str(path), "--device", "cpu"]) == 0
    assert f"{len(names)} equal, 0 differ" in capsys.readouterr().out

    changed, dropped = sorted(names)[3], sorted(names)[-1]
    flipped = saved["outputs"][changed].clone()
    flipped.reshape(-1).view(torch.uint8)[0] ^= 1  # one bit of one output
    saved["outputs"][changed] = flipped
    del saved["outputs"][dropped]
    torch.save(saved, path)
    assert tool.main(["compare", str(path), "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert f"  {changed}\n" in out and f"  {dropped}\n" in out and "2 differ or missing" in out


def test_same_bits_tells_negative_zero_and_nan_payloads_apart():
    tool = load_tool("bitwise_ab")
    assert tool.same_bits(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0]))
    assert not tool.same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))
    quiet, other = torch.tensor([0x7FC00000], dtype=torch.int32), torch.tensor([0x7FC00001], dtype=torch.int32)
    assert not tool.same_bits(quiet.view(torch.float32), other.view(torch.float32))
    assert not tool.same_bits(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
