"""Rows of an FP4 tensor (NVFP4Tensor / MXFP4Tensor indexing) and moving one between devices."""

from __future__ import annotations

import copy

import pytest
import torch

import fp4ops

from conftest import HAS_CUDA, assert_same_bytes, same_bits

DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
FORMATS = ["nvfp4", "mxfp4"]


def quantize(x: torch.Tensor, fmt: str, scale_layout: str = "linear"):
    return (fp4ops.quantize_nvfp4(x, scale_layout=scale_layout) if fmt == "nvfp4"
            else fp4ops.quantize_mxfp4(x, scale_layout=scale_layout))


def index_cases(device: str) -> dict:
    """Indices over the leading dims of a [5, 3, K] tensor, each as torch would read it."""
    return {
        "int": 2,
        "negative int": -1,
        "slice": slice(1, 4),
        "strided slice": slice(None, None, 2),
        "two dims": (1, slice(0, 2)),
        "int and int": (4, 2),
        "list": [3, 0, 3],
        "long tensor": torch.tensor([[0, 4], [2, 2]], device=device),
        "bool rows": torch.tensor([True, False, True, True, False], device=device),
        "bool over both": torch.rand(5, 3, device=device) > 0.5,
        "empty": slice(2, 2),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_are_the_rows_of_the_dequantized_tensor(device, fmt):
    """q[index] holds exactly the codes and scales of those rows: its dequantization is the same
    index of q's, bit for bit; the NVFP4 global scale is the same tensor."""
    x = torch.randn(5, 3, 128, device=device) * torch.rand(5, 3, 1, device=device).exp2()
    x[1, 2, 7] = float("nan")  # a NaN block travels with its row
    q = quantize(x, fmt)
    whole = q.dequantize(torch.float32)
    for name, index in index_cases(device).items():
        rows = q[index]
        assert type(rows) is type(q) and rows.scale_layout == "linear", name
        assert rows.shape == whole[index].shape, name
        assert rows.scales.dtype == q.scales.dtype and rows.data.dtype == torch.uint8, name
        assert same_bits(rows.dequantize(torch.float32), whole[index]), name
        if fmt == "nvfp4":
            assert rows.global_scale is q.global_scale, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_basic_indices_give_views(device, fmt):
    q = quantize(torch.randn(6, 64, device=device), fmt)
    rows = q[2:5]
    assert rows.data.data_ptr() == q.data[2].data_ptr()
    assert rows.scales.data_ptr() == q.scales[2].data_ptr()
    picked = q[torch.tensor([2, 3, 4], device=device)]
    assert picked.data.data_ptr() != q.data.data_ptr()
    assert_same_bytes(picked.data, rows.data, "data")
    assert_same_bytes(picked.scales, rows.scales, "scales")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_selected_rows_feed_the_linear(device, fmt):
    """FP4 rows picked from a batch run through fp4ops.linear like the batch's own rows (the
    kernel family's rows are batch-invariant; the CPU kernel computes each row alone)."""
    w = quantize(torch.randn(48, 256, device=device), fmt)
    x = quantize(torch.randn(9, 256, device=device), fmt)
    keep = torch.tensor([7, 0, 4], device=device)
    assert_same_bytes(fp4ops.linear(x[keep], w), fp4ops.linear(x, w)[keep], "linear of selected rows")
    assert_same_bytes(fp4ops.linear(x[3], w), fp4ops.linear(x, w)[3], "one row, 1-D")


@pytest.mark.parametrize("fmt", FORMATS)
def test_bad_indices_name_the_index(fmt):
    q = quantize(torch.randn(4, 3, 64), fmt)
    for index in [(0, 0, 0), (slice(None), slice(None), 0), torch.zeros(4, 3, 32, dtype=torch.bool)]:
        with pytest.raises(IndexError, match="index: .*leading dimension"):
            q[index]
    for index in [Ellipsis, (Ellipsis, 0), None, (0, None), 1.5, torch.tensor([1.0]), "0"]:
        with pytest.raises(TypeError, match="index: "):
            q[index]
    vector = quantize(torch.randn(64), fmt)
    with pytest.raises(IndexError, match="index: .*0 leading"):
        vector[0]
    with pytest.raises(ValueError, match="index: .*swizzled"):
        quantize(torch.randn(4, 64), fmt, "swizzled")[0]


@pytest.mark.parametrize("fmt", FORMATS)
def test_out_of_range_rows_raise_as_torch_does(fmt):
    q = quantize(torch.randn(4, 64), fmt)
    with pytest.raises(IndexError):
        q[4]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("scale_layout", ["linear", "swizzled"])
def test_to_moves_every_tensor(fmt, scale_layout):
    q = quantize(torch.randn(130, 64), fmt, scale_layout)
    assert q.to("cpu") is q and q.to(torch.device("cpu")) is q
    if not HAS_CUDA:
        return
    on_gpu = q.to("cuda")
    tensors = ["data", "scales"] + (["global_scale"] if fmt == "nvfp4" else [])
    assert all(getattr(on_gpu, name).is_cuda for name in tensors) and on_gpu.scale_layout == scale_layout
    back = on_gpu.to("cpu", non_blocking=False)
    for name in tensors:
        assert same_bits(getattr(back, name), getattr(q, name)), name
    assert same_bits(on_gpu.dequantize(torch.float32).cpu(), q.dequantize(torch.float32))


def test_to_refuses_what_is_not_a_device_by_name():
    q = fp4ops.quantize_nvfp4(torch.randn(4, 64))
    with pytest.raises(TypeError, match="device: expected a device, got the dtype torch.float16"):
        q.to(torch.float16)
    with pytest.raises(TypeError, match="non_blocking: expected a bool"):
        q.to("cpu", torch.float16)
    with pytest.raises(ValueError, match="device: expected a torch.device or a device string, got 'gpu0'"):
        q.to("gpu0")


@pytest.mark.parametrize("fmt", FORMATS)
def test_iteration_and_len_follow_the_first_dimension(fmt):
    x = torch.randn(3, 2, 64)
    q = quantize(x, fmt)
    rows = list(q)
    assert len(q) == 3 and len(rows) == 3 and len(q[1:1]) == 0
    for i, row in enumerate(rows):
        assert same_bits(row.dequantize(torch.float32), q.dequantize(torch.float32)[i])
    assert bool(q[1:1])  # a container, not a value: __len__ does not make an empty one false
    one_d = q[0, 0]
    with pytest.raises(TypeError, match="iteration over a 1-D"):
        list(one_d)
    with pytest.raises(TypeError, match="len\\(\\) of a 1-D"):
        len(one_d)


@pytest.mark.parametrize("fmt", FORMATS)
def test_equality_is_identity(fmt):
    """The contents are tensors (compared element by element), so == is `is`, as for modules."""
    q = quantize(torch.randn(3, 64), fmt)
    twin = copy.deepcopy(q)
    assert q == q and q != twin and q in [q] and twin not in [q] and hash(q) != hash(twin)


@pytest.mark.parametrize("fmt", FORMATS)
def test_torch_load_takes_fp4_tensors_with_weights_only(fmt, tmp_path):
    q = quantize(torch.randn(5, 64), fmt)
    torch.save({"q": q}, tmp_path / "q.pt")
    loaded = torch.load(tmp_path / "q.pt", weights_only=True)["q"]
    assert type(loaded) is type(q) and loaded.scale_layout == q.scale_layout
    tensors = ["data", "scales"] + (["global_scale"] if fmt == "nvfp4" else [])
    for name in tensors:
        assert same_bits(getattr(loaded, name), getattr(q, name)), name


def test_dequantize_refuses_a_global_scale_that_requires_grad():
    q = fp4ops.quantize_nvfp4(torch.randn(4, 32))
    g = q.global_scale.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="global_scale: requires grad, but fp4ops.dequantize has no backward"):
        fp4ops.NVFP4Tensor(q.data, q.scales, g).dequantize(torch.float32)
    with torch.no_grad():
        assert same_bits(fp4ops.NVFP4Tensor(q.data, q.scales, g).dequantize(torch.float32), q.dequantize(torch.float32))
