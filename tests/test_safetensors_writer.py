"""The streaming .safetensors writer the checkpoint quantizer stores its shards with."""

from __future__ import annotations

import random

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from fp4ops._safetensors_writer import SafetensorsWriter, dtype_name


def mixed_tensors() -> dict[str, torch.Tensor]:
    """Fresh random tensors of every element size, odd byte counts and a 0-dim one included."""
    return {
        "a.weight": torch.randn(7, 5, dtype=torch.bfloat16),
        "a.weight_packed": torch.randint(0, 256, (3, 7), dtype=torch.uint8),
        "a.weight_scale": torch.randn(3, 1).to(torch.float8_e4m3fn),
        "a.weight_global_scale": torch.rand(1),
        "b.weight_scale_2": torch.rand(()),
        "b.ids": torch.randint(-2**40, 2**40, (3,), dtype=torch.int64),
        "b.half": torch.randn(5, dtype=torch.float16),
        "b.mask": torch.rand(9) > 0.5,
        "b.empty": torch.empty(0, 4),
        "c.e8m0": torch.randint(0, 255, (4,), dtype=torch.uint8).view(torch.float8_e8m0fnu),
        "c.u16": torch.randint(0, 2**16, (3,), dtype=torch.int32).to(torch.uint16),
        "c.u32": torch.randint(0, 2**31, (2,), dtype=torch.int64).to(torch.uint32),
    }


def test_tensors_written_in_any_order_read_back_bit_for_bit(tmp_path):
    tensors = mixed_tensors()
    path = str(tmp_path / "out.safetensors")
    entries = {name: (dtype_name(t.dtype), tuple(t.shape)) for name, t in tensors.items()}
    order = list(tensors)
    random.shuffle(order)
    with SafetensorsWriter(path, entries, {"quantized_by": "test"}) as writer:
        for name in order:
            writer.write(name, tensors[name])
    back = load_file(path)
    assert set(back) == set(tensors)
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape
        assert torch.equal(back[name].view(torch.uint8), tensor.view(torch.uint8)) if tensor.dim() else \
            torch.equal(back[name].reshape(1).view(torch.uint8), tensor.reshape(1).view(torch.uint8))
    with safe_open(path, framework="pt") as f:
        assert f.metadata() == {"quantized_by": "test"}


def test_the_layout_is_aligned_and_gapless_like_safetensors_own(tmp_path):
    """Tensors start at multiples of their element size and the byte ranges tile the data."""
    tensors = mixed_tensors()
    entries = {name: (dtype_name(t.dtype), tuple(t.shape)) for name, t in tensors.items()}
    with SafetensorsWriter(str(tmp_path / "x.safetensors"), entries) as writer:
        for name, tensor in tensors.items():
            writer.write(name, tensor)
    assert writer.data_start % 8 == 0
    ranges = sorted(writer.ranges.values())
    assert ranges[0][0] == 0 and ranges[-1][1] == writer.data_size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    for name, (begin, _) in writer.ranges.items():
        assert begin % tensors[name].element_size() == 0, name


def test_a_tensor_never_written_is_an_error_not_zeros(tmp_path):
    tensors = mixed_tensors()
    entries = {name: (dtype_name(t.dtype), tuple(t.shape)) for name, t in tensors.items()}
    writer = SafetensorsWriter(str(tmp_path / "x.safetensors"), entries)
    writer.write("a.weight", tensors["a.weight"])
    with pytest.raises(RuntimeError, match="never written"):
        writer.close()


@pytest.mark.parametrize("name,tensor,message", [
    ("a.weight", torch.randn(5, 7, dtype=torch.bfloat16), "header says BF16"),
    ("a.weight", torch.randn(7, 5, dtype=torch.float16), "header says BF16"),
    ("c.weight", torch.randn(7, 5, dtype=torch.bfloat16), "not among"),
])
def test_a_tensor_unlike_its_header_entry_is_refused(tmp_path, name, tensor, message):
    entries = {"a.weight": ("BF16", (7, 5))}
    with pytest.raises(ValueError, match=message):
        with SafetensorsWriter(str(tmp_path / "x.safetensors"), entries) as writer:
            writer.write(name, tensor)


def test_a_tensor_written_twice_is_refused(tmp_path):
    tensor = torch.randn(7, 5, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="written already"):
        with SafetensorsWriter(str(tmp_path / "x.safetensors"), {"a.weight": ("BF16", (7, 5))}) as writer:
            writer.write("a.weight", tensor)
            writer.write("a.weight", tensor)
