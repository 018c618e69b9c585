"""fp4ops: exact NVFP4 / MXFP4 quantize, dequantize, casts, GEMV and linear as PyTorch operators.

Every function is a thin, checked wrapper over a torch.ops.fp4ops.* operator with CPU, CUDA and
fake kernels; `fp4ops.reference` is the same contract (SPEC.md) in plain PyTorch.
"""

from ._loader import load_extension as _load_extension

BUILD = _load_extension()  # 'aot', 'jit-cuda' or 'jit-cpu'

from . import _meta  # noqa: E402  (fakes need the schemas registered above)
from . import reference  # noqa: E402
from .ops import (  # noqa: E402
    amax,
    cast_from_e2m1,
    cast_to_e2m1,
    dequantize,
    quantize_mxfp4,
    quantize_nvfp4,
    quantize_nvfp4_rowwise_columnwise,
    swizzle_scales,
    unswizzle_scales,
)
from .gemv import gemv  # noqa: E402
from .linear import linear  # noqa: E402
from .producers import rms_norm_quantize, silu_mul_quantize  # noqa: E402
from .tensor import MXFP4Tensor, NVFP4Tensor  # noqa: E402
from . import nn  # noqa: E402

__all__ = [
    "MXFP4Tensor",
    "NVFP4Tensor",
    "amax",
    "cast_from_e2m1",
    "cast_to_e2m1",
    "dequantize",
    "gemv",
    "linear",
    "nn",
    "quantize_mxfp4",
    "quantize_nvfp4",
    "quantize_nvfp4_rowwise_columnwise",
    "reference",
    "rms_norm_quantize",
    "silu_mul_quantize",
    "swizzle_scales",
    "unswizzle_scales",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    # fp4ops.checkpoint reads and writes safetensors (an optional dependency): imported on first
    # use, so that `import fp4ops` needs only torch and `fp4ops.checkpoint.load` still works.
    if name == "checkpoint":
        import importlib

        return importlib.import_module(".checkpoint", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
