"""The one place that knows how to build the fp4ops extension.

Both `setup.py` (ahead of time) and `fp4ops._loader` (just in time, through
`torch.utils.cpp_extension.load`) take their sources and flags from here, so the two builds
cannot drift apart. This module imports nothing from fp4ops, so setup.py can load it by path.

Environment:
  FP4OPS_CUDA_ARCHS      e.g. "9.0" or "9.0;10.0;12.0" (default: 9.0a, 10.0a, 12.0a). Hopper and
                         Blackwell entries always build arch-specific ("9.0" -> sm_90a, "10.0" ->
                         sm_100a): the warpgroup MMA and the hardware FP4 conversions exist only
                         there (an sm_90a cubin runs on every compute capability 9.0 GPU).
  TORCH_CUDA_ARCH_LIST   used when FP4OPS_CUDA_ARCHS is unset (same syntax). An entry's "+PTX"
                         embeds its PTX too, e.g. "8.0+PTX": on a newer GPU, which no sm_80
                         cubin fits, the driver compiles that PTX and the sm_80 code path runs
                         there for real (no CUDA_FORCE_PTX_JIT: it would force PyTorch's own
                         kernels, which ship without PTX, onto PTX too, and they fail).
  FP4OPS_FORCE_CPU=1     build without CUDA even when a toolkit is present.
  MAX_JOBS               parallel compile jobs (read by torch's ninja build).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

DEFAULT_CUDA_ARCHS = ("9.0a", "10.0a", "12.0a")
HOST_FLAGS = [
    "-O3",
    # Exact fp32 rounding in the scale math must not depend on the compiler: no contraction
    # into FMA, no fast-math.
    "-ffp-contract=off",
    "-fno-fast-math",
]
NVCC_FLAGS = [
    "-O3",
    "-lineinfo",
    "-Xcompiler=-ffp-contract=off",
    # Keep nvcc's exact defaults explicit; the kernels also use __fmul_rn/__fdiv_rn where the
    # contract needs exact rounding, so a global --use_fast_math could not break them.
    "--prec-div=true",
    "--ftz=false",
]


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def csrc_dir(root: Path | None = None) -> Path:
    return (root or repo_root()) / "csrc"


def min_cuda_arch(root: Path | None = None) -> int:
    """The oldest compute capability (x 10) the kernels compile for: FP4OPS_MIN_CUDA_ARCH of
    csrc/common/arch.h, the capability table the kernels follow (one source for both)."""
    header = csrc_dir(root) / "common" / "arch.h"
    match = re.search(r"^#define FP4OPS_MIN_CUDA_ARCH (\d+)$", header.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"fp4ops: no FP4OPS_MIN_CUDA_ARCH in {header}")
    return int(match[1])


def parse_cuda_archs(spec: str) -> list[str]:
    """'9.0;10.0 8.0+PTX' -> ['9.0a', '10.0a', '8.0+PTX'] (Hopper and Blackwell always
    arch-specific; '+PTX' also embeds the PTX, which the driver compiles for newer GPUs)."""
    archs = []
    minimum = min_cuda_arch()
    for item in re.split(r"[;,\s]+", spec.strip()):
        if not item:
            continue
        match = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", item)
        if match is None:
            raise ValueError(f"FP4OPS_CUDA_ARCHS: expected entries like 9.0 or 10.0a, got {item!r}")
        major, minor, suffix = int(match[1]), int(match[2]), match[3]
        number = major * 10 + minor
        if number < minimum:
            raise ValueError(f"FP4OPS_CUDA_ARCHS: fp4ops needs compute capability >= {minimum // 10}.{minimum % 10} "
                             f"(csrc/common/arch.h), got {item!r}")
        if number >= 90 and suffix == "":
            suffix = "a"
        arch = f"{major}.{minor}{suffix}{match[4] or ''}"
        if arch not in archs:
            archs.append(arch)
    if not archs:
        raise ValueError(f"FP4OPS_CUDA_ARCHS: no architecture in {spec!r}")
    return archs


def cuda_archs() -> list[str]:
    spec = os.environ.get("FP4OPS_CUDA_ARCHS") or os.environ.get("TORCH_CUDA_ARCH_LIST")
    return parse_cuda_archs(spec) if spec else list(DEFAULT_CUDA_ARCHS)


def gencode_flags(archs: list[str]) -> list[str]:
    flags = []
    for arch in archs:
        code = arch.removesuffix("+PTX").replace(".", "")
        flags.append(f"-gencode=arch=compute_{code},code=sm_{code}")
        if arch.endswith("+PTX"):
            flags.append(f"-gencode=arch=compute_{code},code=compute_{code}")
    return flags


def nvcc_path() -> str | None:
    from torch.utils.cpp_extension import CUDA_HOME

    if CUDA_HOME and (Path(CUDA_HOME) / "bin" / "nvcc").exists():
        return str(Path(CUDA_HOME) / "bin" / "nvcc")
    return shutil.which("nvcc")


def nvcc_version(nvcc: str) -> tuple[int, int]:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release (\d+)\.(\d+)", out)
    if match is None:
        raise RuntimeError(f"fp4ops: cannot read the CUDA version from `{nvcc} --version`:\n{out}")
    return int(match[1]), int(match[2])


def with_cuda() -> bool:
    """Build the CUDA kernels? Yes when torch has CUDA and a matching nvcc exists."""
    import torch

    if os.environ.get("FP4OPS_FORCE_CPU") == "1" or torch.version.cuda is None:
        return False
    nvcc = nvcc_path()
    if nvcc is None:
        return False
    toolkit_major = nvcc_version(nvcc)[0]
    torch_major = int(torch.version.cuda.split(".")[0])
    if toolkit_major != torch_major:
        raise RuntimeError(
            f"fp4ops: nvcc is CUDA {toolkit_major}.x but torch was built with CUDA {torch.version.cuda}; "
            "install a torch wheel for the same CUDA major version (or set FP4OPS_FORCE_CPU=1)"
        )
    return True


def sources(root: Path | None = None, cuda: bool = True) -> list[str]:
    base = csrc_dir(root)
    files = [base / "ops.cpp", *sorted((base / "cpu").glob("*.cpp"))]
    if cuda:
        files += sorted((base / "cuda").glob("*.cu")) + sorted((base / "cuda").glob("*.cpp"))
    return [str(f) for f in files]


def openmp_flags() -> list[str]:
    """-fopenmp, for compiling and linking the CPU kernels, where torch runs its CPU threads on
    OpenMP (its Linux builds): at::parallel_for is inline, and compiled without OpenMP it runs its
    whole range on the calling thread. The extension then shares torch's OpenMP runtime (the same
    libgomp.so.1, already loaded) and its thread count (torch.set_num_threads)."""
    import torch

    return ["-fopenmp"] if sys.platform.startswith("linux") and torch.backends.openmp.is_available() else []


def host_flags() -> list[str]:
    return list(HOST_FLAGS) + openmp_flags()


def host_link_flags() -> list[str]:
    return openmp_flags()


def nvcc_flags(archs: list[str] | None = None) -> list[str]:
    archs = archs if archs is not None else cuda_archs()
    # The launchers pick the warpgroup-MMA kernels only where an sm_90a pass exists (csrc/common/arch.h).
    has_sm90a = any(a.removesuffix("+PTX") == "9.0a" for a in archs)
    return NVCC_FLAGS + gencode_flags(archs) + (["-DFP4OPS_BUILD_HAS_SM90A"] if has_sm90a else [])
