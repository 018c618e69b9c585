"""tools/sass_loops.py: the loop it reports in a hand-written listing, and, where cuobjdump and an
sm_90a build exist (no GPU needed), in the linear kernels' machine code."""

from __future__ import annotations

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
