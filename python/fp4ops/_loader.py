"""Load the fp4ops extension once, at import: the AOT-built `fp4ops._C` when it exists, else a JIT
build of the same sources with the same flags (python/fp4ops/_build.py), cached by torch."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import torch  # noqa: F401  (loads libtorch, which the extension links against)

from . import _build

JIT_NAME = "fp4ops_jit"


def _load_jit() -> str:
    import torch.utils.cpp_extension as cpp

    root = _build.repo_root()
    if not (_build.csrc_dir(root) / "ops.cpp").exists():
        raise ImportError(
            "fp4ops: the compiled extension fp4ops._C is missing and the C++ sources are not next to "
            f"the package (looked in {_build.csrc_dir(root)}); reinstall with `pip install --no-build-isolation .`"
        )
    cuda = _build.with_cuda()
    what = f"CUDA ({', '.join(_build.cuda_archs())}) and CPU" if cuda else "CPU"
    print(
        f"fp4ops: compiling the {what} kernels just in time (once; cached by torch under "
        f"{cpp._get_build_directory(JIT_NAME, verbose=False)})...",
        file=sys.stderr,
        flush=True,
    )
    cpp.load(
        name=JIT_NAME,
        sources=_build.sources(root, cuda=cuda),
        extra_cflags=_build.host_flags(),
        extra_ldflags=_build.host_link_flags(),
        extra_cuda_cflags=_build.nvcc_flags() if cuda else None,
        with_cuda=cuda,
        is_python_module=False,
        verbose=False,
    )
    return "jit-cuda" if cuda else "jit-cpu"


def load_extension() -> str:
    """Register the torch.ops.fp4ops kernels; returns how: 'aot', 'jit-cuda' or 'jit-cpu'."""
    if importlib.util.find_spec("fp4ops._C") is not None:
        importlib.import_module("fp4ops._C")  # an import error here is real: never hide it behind a JIT build
        return "aot"
    return _load_jit()
