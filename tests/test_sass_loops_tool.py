"""tools/sass_loops.py: the loop it reports in a hand-written listing, and, where cuobjdump and an
sm_90a build exist (no GPU needed), in the linear kernels' machine code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_tool


LISTING = """
        Function : _Z6kernelv
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDS R2, [R1] ;
        /*0020*/              @!P0 BRA 0x60 ;
        /*0030*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0040*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR4][R6.64] ;
        /*0050*/               @P1 BRA 0x30 ;
        /*0060*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0070*/              @!P2 BRA 0x10 ;
        /*0080*/                   EXIT ;
        Function : _Z5otherv
        /*0000*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0010*/               @P0 BRA 0x0 ;
"""


def test_the_longest_backward_branch_over_a_tensor_core_instruction_is_the_loop():
    tool = load_tool("sass_loops")
    functions = tool.parse_functions(LISTING)
    assert set(functions) == {"_Z6kernelv", "_Z5otherv"}
    body = tool.main_loop(functions["_Z6kernelv"])
    # 0x10 .. 0x70 (the outer loop), not 0x30 .. 0x50 (the inner one) nor the forward branch.
    assert [tool.opcode(t) for t in body] == ["LDS", "BRA", "HMMA.16816.F32.BF16", "LDGSTS.E.BYPASS.128", "BRA", "BAR.SYNC.DEFER_BLOCKING", "BRA"]
    assert tool.main_loop(functions["_Z5otherv"]) is None  # a loop without tensor-core instructions


COLD_RETRY = """
        Function : _Z4waitv
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0020*/              @!P0 BRA 0x80 ;
        /*0030*/                   HGMMA.64x128x16.F32.BF16 R24, R8, gdesc[UR8], R24 ;
        /*0040*/               @P1 BRA 0x10 ;
        /*0050*/                   STG.E desc[UR6][R4.64], R24 ;
        /*0060*/                   EXIT ;
        /*0070*/                   BRA 0x70 ;
        /*0080*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0090*/              @!P0 BRA 0x80 ;
        /*00a0*/                   BRA 0x30 ;
"""


def test_a_cold_retry_path_after_the_exit_is_not_the_loop():
    """An mbarrier wait's retry placed after the last EXIT jumps back into the loop: its span from
    0x30 to 0xa0 holds the loop's MMA but is not a loop; the loop is 0x10 .. 0x40."""
    tool = load_tool("sass_loops")
    body = tool.main_loop(tool.parse_functions(COLD_RETRY)["_Z4waitv"])
    assert [tool.opcode(t) for t in body] == ["SYNCS.PHASECHK.TRANS64.TRYWAIT", "BRA", "HGMMA.64x128x16.F32.BF16", "BRA"]


def test_a_binary_without_device_code_has_no_cubins_and_other_failures_raise():
    """A CPU-only build's extension holds no device code, which cuobjdump reports by failing: that
    is no cubins (so the SASS tests skip there), while a file it cannot read is still an error."""
    tool = load_tool("sass_loops")
    cuobjdump = tool.find_tool("cuobjdump")
    if cuobjdump is None:
        pytest.skip("needs cuobjdump (CUDA toolkit or the nvidia-cuda-cuobjdump wheel)")
    assert tool.cubin_archs(cuobjdump, Path(sys.executable).resolve()) == []
    with pytest.raises(subprocess.CalledProcessError):
        tool.cubin_archs(cuobjdump, Path(sys.executable).resolve().parent / "no-such-binary")


def extension_with_sm90a():
    tool = load_tool("sass_loops")
    cuobjdump = tool.find_tool("cuobjdump")
    if cuobjdump is None:
        pytest.skip("needs cuobjdump (CUDA toolkit or the nvidia-cuda-cuobjdump wheel)")
    try:
        binary = tool.default_binary()
    except ImportError:
        pytest.skip("needs the ahead-of-time built extension (fp4ops._C)")
    if "sm_90a" not in tool.cubin_archs(cuobjdump, binary):
        pytest.skip("the extension was built without sm_90a")
    return tool, cuobjdump, binary


def test_linear_kernels_loops_hold_their_mma_count():
    tool, cuobjdump, binary = extension_with_sm90a()
    # One step of 16 weight rows by 128 columns per warp: 8 m16n8k16 MMAs per column tile.
    found = {loop.kernel: loop for loop in tool.loops(binary, "sm_90a", ["linear_mma_kernel<fp4ops::Nvfp4Format, __nv_bfloat16, "],
                                                      cuobjdump)}
    for tiles in (1, 8):
        name = next(k for k in found if f"__nv_bfloat16, {tiles}, false, false>" in k)
        assert found[name].kinds["HMMA"] == 8 * tiles
        assert found[name].instructions > found[name].kinds["HMMA"]


def test_wgmma_kernels_loops_are_one_step_without_the_epilogue():
    """One step of the warpgroup-MMA kernels, both formats: 8 m64nNk16 MMAs (four units, two
    halves), whatever the column tiles, and no store of the sums (the epilogue) in the loop."""
    tool, cuobjdump, binary = extension_with_sm90a()
    found = tool.loops(binary, "sm_90a", ["linear_wgmma_kernel<fp4ops::", "__nv_bfloat16, "], cuobjdump)
    assert {loop.kernel.split(", ")[2] for loop in found} >= {"4", "8", "16"}
    assert {"Nvfp4Format", "Mxfp4Format"} <= {loop.kernel.split("<fp4ops::")[1].split(",")[0] for loop in found}
    for loop in found:
        assert loop.kinds["HGMMA"] == 8, loop.line()
        assert loop.kinds["global stores"] == 0, loop.line()
