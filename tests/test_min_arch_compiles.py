"""Every CUDA source compiles for the oldest architecture the build accepts (csrc/common/arch.h's
minimum), as device code only (PTX, no SASS: seconds per file). The default build has no such pass,
so a kernel that used a newer architecture's instructions outside its feature guard would otherwise
fail only where someone builds for an older GPU (as the SiLU-mul cluster code once did)."""

from __future__ import annotations

import sysconfig
from pathlib import Path
import subprocess

import pytest

from fp4ops import _build

CUDA_SOURCES = sorted((_build.csrc_dir() / "cuda").glob("*.cu"))


def _compiler_or_skip() -> str:
    nvcc = _build.nvcc_path()
    try:
        builds_cuda = nvcc is not None and _build.with_cuda()
    except RuntimeError as refusal:  # nvcc of another CUDA major version than torch's: no CUDA build
        pytest.skip(str(refusal))
    if not builds_cuda:
        pytest.skip("needs nvcc and a CUDA build of torch")
    return nvcc


@pytest.mark.parametrize("source", CUDA_SOURCES, ids=lambda p: p.name)
def test_cuda_source_compiles_for_the_minimum_architecture(source: Path, tmp_path: Path):
    nvcc = _compiler_or_skip()
    from torch.utils import cpp_extension

    arch = _build.min_cuda_arch()
    includes = [*cpp_extension.include_paths("cuda"), sysconfig.get_paths()["include"]]
    command = [nvcc, "-std=c++20", "--expt-relaxed-constexpr", *_build.NVCC_FLAGS, "-ptx",
               f"-gencode=arch=compute_{arch},code=compute_{arch}", f"-I{_build.csrc_dir()}",
               *(flag for d in includes for flag in ("-isystem", d)), str(source), "-o", str(tmp_path / "out.ptx")]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{source.name} does not compile for compute_{arch}:\n{result.stderr[-4000:]}"
    assert (tmp_path / "out.ptx").stat().st_size > 0


def test_the_checked_sources_are_the_builds():
    built = {Path(s) for s in _build.sources(cuda=True) if s.endswith(".cu")}
    assert built and built == set(CUDA_SOURCES)
