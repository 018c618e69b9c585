"""The build module: architecture parsing, gencodes and host flags, and what the built extension links."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import extension_binary

from fp4ops import _build


def test_default_gencodes_are_arch_specific():
    flags = _build.gencode_flags(list(_build.DEFAULT_CUDA_ARCHS))
    assert flags == [
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_100a,code=sm_100a",
        "-gencode=arch=compute_120a,code=sm_120a",
    ]


@pytest.mark.parametrize(
    "spec, archs",
    [
        ("9.0", ["9.0a"]),
        ("9.0a", ["9.0a"]),
        ("9.0;10.0;12.0", ["9.0a", "10.0a", "12.0a"]),
        ("9.0 12.0+PTX", ["9.0a", "12.0a+PTX"]),
        ("8.0+PTX", ["8.0+PTX"]),
        ("8.6", ["8.6"]),
        ("10.0f,9.0,9.0", ["10.0f", "9.0a"]),
        ("8.9", ["8.9"]),
        ("8.0", ["8.0"]),
    ],
)
def test_parse_cuda_archs(spec, archs):
    assert _build.parse_cuda_archs(spec) == archs


@pytest.mark.parametrize("spec", ["7.5", "sm_90", "", "9"])
def test_parse_cuda_archs_rejects(spec):
    with pytest.raises(ValueError, match="FP4OPS_CUDA_ARCHS"):
        _build.parse_cuda_archs(spec)


@pytest.mark.parametrize("spec", ["7.5", "7.0", "9.0;7.5+PTX"])
def test_parse_cuda_archs_refuses_what_the_capability_table_excludes(spec):
    """The minimum comes from csrc/common/arch.h, whose device passes #error below it."""
    with pytest.raises(ValueError, match=r"compute capability >= 8\.0 \(csrc/common/arch\.h\)"):
        _build.parse_cuda_archs(spec)


def test_ptx_entries_embed_the_ptx_too():
    assert _build.gencode_flags(["8.0+PTX", "9.0a"]) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_80,code=compute_80",
        "-gencode=arch=compute_90a,code=sm_90a",
    ]


@pytest.mark.parametrize("archs, defined", [(["9.0a"], True), (["8.0+PTX", "9.0a+PTX"], True), (["8.0+PTX"], False),
                                            (["10.0a", "12.0a"], False)])
def test_host_code_knows_whether_an_sm90a_pass_exists(archs, defined):
    """The linear launcher picks its warpgroup-MMA kernels only where their instructions were built."""
    assert ("-DFP4OPS_BUILD_HAS_SM90A" in _build.nvcc_flags(archs)) == defined


def test_min_cuda_arch_is_the_headers():
    header = (_build.csrc_dir() / "common" / "arch.h").read_text()
    assert _build.min_cuda_arch() == 80
    assert "#define FP4OPS_MIN_CUDA_ARCH 80\n" in header
    assert "__CUDA_ARCH__ < FP4OPS_MIN_CUDA_ARCH * 10" in header


def test_environment_overrides(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "12.0")
    monkeypatch.delenv("FP4OPS_CUDA_ARCHS", raising=False)
    assert _build.cuda_archs() == ["12.0a"]
    monkeypatch.setenv("FP4OPS_CUDA_ARCHS", "9.0")
    assert _build.cuda_archs() == ["9.0a"]


def test_host_flags_keep_fp32_rounding_exact():
    assert "-ffp-contract=off" in _build.host_flags()
    assert not any("fast-math" in f and "no" not in f for f in _build.host_flags() + _build.nvcc_flags(["9.0"]))


@pytest.mark.skipif(not (sys.platform.startswith("linux") and torch.backends.openmp.is_available()),
                    reason="torch runs its CPU threads on OpenMP on Linux builds only")
def test_the_cpu_kernels_link_torchs_openmp_runtime():
    """Compiled without OpenMP, at::parallel_for runs on the calling thread: the built extension
    must need libgomp, which resolves to the copy torch has loaded."""
    assert "-fopenmp" in _build.host_flags() and "-fopenmp" in _build.host_link_flags()
    readelf, binary = shutil.which("readelf"), extension_binary()
    if readelf is None or binary is None:
        pytest.skip("needs readelf and a built extension")
    needed = subprocess.run([readelf, "-d", str(binary)], check=True, capture_output=True, text=True).stdout
    assert "[libgomp.so.1]" in needed
    maps = Path("/proc/self/maps").read_text()
    assert len({line.split()[-1] for line in maps.splitlines() if "libgomp" in line}) == 1
