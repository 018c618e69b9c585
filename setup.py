"""Ahead-of-time build of fp4ops._C. Sources and flags come from python/fp4ops/_build.py, the
same module the JIT loader uses. Without a CUDA toolkit the extension is built for CPU only."""

import importlib.util
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent


def load_build_module():
    spec = importlib.util.spec_from_file_location("fp4ops_build", ROOT / "python" / "fp4ops" / "_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def extension():
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    build = load_build_module()
    cuda = build.with_cuda()
    kind = CUDAExtension if cuda else CppExtension
    flags = {"cxx": build.host_flags()}
    if cuda:
        flags["nvcc"] = build.nvcc_flags()
        print(f"fp4ops: building CUDA kernels for {', '.join(build.cuda_archs())}")
    else:
        print("fp4ops: no matching CUDA toolkit (or FP4OPS_FORCE_CPU=1): building the CPU kernels only")
    relative = [str(Path(s).relative_to(ROOT)) for s in build.sources(ROOT, cuda=cuda)]
    return kind("fp4ops._C", relative, extra_compile_args=flags, extra_link_args=build.host_link_flags(),
                py_limited_api=False)


if __name__ == "__main__":
    from torch.utils.cpp_extension import BuildExtension

    setup(
        ext_modules=[extension()],
        cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    )
