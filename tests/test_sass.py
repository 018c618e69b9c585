"""Machine code checks of the built extension (wherever cuobjdump exists; no GPU needed):
the Blackwell cubins use the hardware E2M1 conversions, the Hopper one no fp64 emulation."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

import fp4ops
from conftest import built_cubin_archs, extension_binary, load_tool


find_tool = load_tool("sass_loops").find_tool


CUOBJDUMP = find_tool("cuobjdump")
NVDISASM = find_tool("nvdisasm")
BINARY = extension_binary()
pytestmark = pytest.mark.skipif(
    CUOBJDUMP is None or NVDISASM is None or BINARY is None,
    reason="needs cuobjdump and nvdisasm (CUDA toolkit or the nvidia-cuda-cuobjdump wheel) and a built extension",
)


def cubin_archs() -> set[str]:
    return built_cubin_archs() or set()


def sass_by_function(arch: str) -> dict[str, str]:
    env = dict(os.environ, PATH=f"{Path(NVDISASM).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    out = subprocess.run([CUOBJDUMP, "-sass", "-arch", arch, str(BINARY)], capture_output=True, text=True, env=env, check=True).stdout
    functions, name = {}, None
    for line in out.splitlines():
        match = re.search(r"Function : (\S+)", line)
        if match:
            name = match[1]
            functions[name] = ""
        elif name:
            functions[name] += line + "\n"
    return functions


def writes_memory(sass: str) -> bool:
    """A global store or a global atomic (amax reduces with atomicMax)."""
    return re.search(r"\b(STG|REDG?|ATOMG?)\.", sass) is not None


def require_arch(arch: str) -> None:
    if arch not in cubin_archs():
        pytest.skip(f"the extension was built without {arch} (FP4OPS_CUDA_ARCHS); it has {sorted(cubin_archs())}")


# Kernel names as they appear in mangled symbols; a letter may not precede them, so
# "quantize_kernel" does not also match "dequantize_kernel".
ENCODERS = ("cast_to_e2m1_kernel", "quantize_kernel", "quantize_nvfp4_single_block_kernel", "quantize_nvfp4_cluster_kernel")
DECODERS = ("cast_from_e2m1_kernel", "dequantize_kernel", "gemv_kernel")


def named(symbol: str, kernel: str) -> bool:
    return re.search(rf"(?<![A-Za-z_]){kernel}", symbol) is not None


@pytest.mark.parametrize("arch", ["sm_100a", "sm_120a"])
def test_blackwell_kernels_use_hardware_e2m1(arch):
    require_arch(arch)
    functions = sass_by_function(arch)
    encoders = {n: s for n, s in functions.items() if any(named(n, k) for k in ENCODERS)}
    decoders = {n: s for n, s in functions.items() if any(named(n, k) for k in DECODERS)}
    assert all(any(named(n, k) for n in encoders) for k in ENCODERS)
    assert all(any(named(n, k) for n in decoders) for k in DECODERS)
    for name, sass in encoders.items():
        assert re.search(r"F2FP\.SATFINITE\.E2M1\.F32", sass), f"{name}: no hardware E2M1 encode"
    for name, sass in decoders.items():
        assert re.search(r"F2FP\.F16\.E2M1", sass), f"{name}: no hardware E2M1 decode"


def test_hopper_kernels_have_no_fp64_and_no_empty_body():
    require_arch("sm_90a")
    functions = sass_by_function("sm_90a")
    assert any("cast_to_e2m1" in n for n in functions)
    for name, sass in functions.items():
        assert not re.search(r"\b(DADD|DMUL|DFMA)\b", sass), f"{name}: double-precision emulation"
        assert "F2FP.SATFINITE.E2M1" not in sass
        assert writes_memory(sass), f"{name}: stores nothing (an empty kernel?)"


def test_every_cubin_kernel_stores():
    """Except the warpgroup-MMA kernels outside sm_90a: their bodies trap there, and the launchers
    never pick them (csrc/common/arch.h)."""
    for arch in cubin_archs():
        for name, sass in sass_by_function(arch).items():
            if arch != "sm_90a" and named(name, "linear_wgmma_kernel"):
                assert "BPT.TRAP" in sass, f"{arch} {name}: a warpgroup-MMA kernel that does not trap"
                continue
            assert writes_memory(sass), f"{arch} {name}: stores nothing (an empty kernel?)"


def test_hopper_linear_kernels_use_the_warpgroup_mma():
    require_arch("sm_90a")
    kernels = {n: s for n, s in sass_by_function("sm_90a").items() if named(n, "linear_wgmma_kernel")}
    assert kernels
    for name, sass in kernels.items():
        assert re.search(r"\bHGMMA\.64x(32|64|128)x16\.F32", sass), f"{name}: no HGMMA"
        assert writes_memory(sass), f"{name}: stores nothing"
