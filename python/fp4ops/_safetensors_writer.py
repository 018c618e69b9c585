"""A .safetensors file written one tensor at a time, in any order.

`safetensors.torch.save_file` needs every tensor of a file in memory at once; the checkpoint
quantizer must not hold more than the tensors it is working on. The format allows streaming: the
header (8-byte little-endian length, then JSON naming each tensor's dtype, shape and byte range)
depends only on the tensors' names, dtypes and shapes, which the quantizer knows before it reads
any data. So the whole layout is fixed up front and each tensor is written into its byte range as
it becomes ready. The layout is safetensors' own: the header padded with spaces to a multiple of
8 bytes, tensors ordered by element size (largest first), then by name, so every tensor starts
aligned to its element size, and no gaps. Files read back with `safetensors.safe_open`.
"""

from __future__ import annotations

import json
import math

import torch

# safetensors' dtype names of the torch dtypes a checkpoint may hold (every tensor that is not
# quantized passes through with its own dtype).
SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.uint16: "U16", torch.uint32: "U32", torch.uint64: "U64", torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2", torch.float8_e8m0fnu: "F8_E8M0",
}
_TORCH_DTYPES = {name: dtype for dtype, name in SAFETENSORS_DTYPES.items()}
_ITEM_SIZES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
               "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}


def item_size(dtype: str) -> int:
    """Bytes per element of a safetensors dtype name."""
    if dtype not in _ITEM_SIZES:
        raise ValueError(f"dtype: unknown safetensors dtype {dtype!r}")
    return _ITEM_SIZES[dtype]


def torch_dtype(name: str) -> torch.dtype | None:
    """The torch dtype of a safetensors dtype name, None for one torch lacks here."""
    return _TORCH_DTYPES.get(name)


def dtype_name(dtype: torch.dtype) -> str:
    if dtype not in SAFETENSORS_DTYPES:
        raise ValueError(f"dtype: safetensors has no name for {dtype}")
    return SAFETENSORS_DTYPES[dtype]


class SafetensorsWriter:
    """`entries` is {name: (safetensors dtype name, shape)}, every tensor the file will hold;
    `write(name, tensor)` stores one (in any order, each once); `close()` checks that all were
    written. Use as a context manager."""

    def __init__(self, path: str, entries: dict[str, tuple[str, tuple]], metadata: dict[str, str] | None = None):
        self.path, self.entries = path, dict(entries)
        order = sorted(entries, key=lambda name: (-item_size(entries[name][0]), name))
        header: dict = {"__metadata__": dict(metadata)} if metadata else {}
        offset = 0
        self.ranges: dict[str, tuple[int, int]] = {}
        for name in order:
            dtype, shape = entries[name]
            size = math.prod(shape) * item_size(dtype)
            self.ranges[name] = (offset, offset + size)
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
            offset += size
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        self.data_start = 8 + len(text)
        self.data_size = offset
        self.written: set[str] = set()
        self.file = open(path, "wb")
        self.file.write(len(text).to_bytes(8, "little") + text)
        self.file.truncate(self.data_start + offset)

    def write(self, name: str, tensor: torch.Tensor) -> None:
        if name not in self.entries:
            raise ValueError(f"name: {name!r} is not among the file's tensors")
        if name in self.written:
            raise ValueError(f"name: {name!r} was written already")
        dtype, shape = self.entries[name]
        if tuple(tensor.shape) != tuple(shape) or dtype_name(tensor.dtype) != dtype:
            raise ValueError(f"tensor: {name!r} is {tensor.dtype} {tuple(tensor.shape)}, "
                             f"the header says {dtype} {tuple(shape)}")
        raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        begin, end = self.ranges[name]
        assert raw.numel() == end - begin
        self.file.seek(self.data_start + begin)
        self.file.write(memoryview(raw.numpy()))
        self.written.add(name)

    def close(self) -> None:
        """Close the file; raises if a tensor of the header was never written (its bytes would be
        zeros that read back as data)."""
        if self.file.closed:
            return
        self.file.close()
        missing = sorted(set(self.entries) - self.written)
        if missing:
            raise RuntimeError(f"{self.path}: {len(missing)} tensor(s) never written, e.g. {missing[0]!r}")

    def __enter__(self) -> "SafetensorsWriter":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self.file.close()
