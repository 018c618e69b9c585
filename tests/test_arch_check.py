"""A GPU whose architecture the build left out gets NotImplementedError naming its architecture
and the build variable, not CUDA's "no kernel image" at a launch (csrc/cuda/arch_check.cu)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import HAS_CUDA

# Builds the extension for one architecture the GPU cannot run (a cubin runs only on its own
# major version), in a fresh process: this process already holds the real build's operators.
PROBE = textwrap.dedent("""
    import importlib.util, torch
    import torch.utils.cpp_extension as cpp
    spec = importlib.util.spec_from_file_location("fp4ops_build", {build_module!r})  # not the package:
    _build = importlib.util.module_from_spec(spec)                                     # it loads the real build
    spec.loader.exec_module(_build)
    cpp.load(name="fp4ops_arch_check_probe", sources=_build.sources(cuda=True), build_directory={build_dir!r},
             extra_cflags=_build.host_flags(), extra_ldflags=_build.host_link_flags(),
             extra_cuda_cflags=_build.nvcc_flags([{arch!r}]), with_cuda=True,
             is_python_module=False, verbose=False)
    x = torch.randn(64, device="cuda")
    assert torch.ops.fp4ops.amax(x.cpu()).item() == x.abs().max().item()  # the CPU kernel still runs
    for call in (lambda: torch.ops.fp4ops.amax(x), lambda: torch.ops.fp4ops.cast_to_e2m1(x)):
        try:
            call()
        except NotImplementedError as error:
            print("NotImplementedError:", error)
        else:
            raise SystemExit("no error")
    assert torch.ones(4, device="cuda").sum().item() == 4  # the failed lookup left no CUDA error behind
""")


def other_major_arch(major: int) -> str:
    """An architecture fp4ops builds whose cubins a GPU of compute capability `major`.x cannot run."""
    return "8.9" if major != 8 else "9.0"


@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_gpu_without_built_kernels_raises_not_implemented(tmp_path):
    from fp4ops import _build

    major, minor = torch.cuda.get_device_capability()
    script = PROBE.format(build_module=_build.__file__, build_dir=str(tmp_path),
                          arch=other_major_arch(major))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    messages = [line for line in done.stdout.splitlines() if line.startswith("NotImplementedError:")]
    assert len(messages) == 2, done.stdout
    for message in messages:
        assert f"no kernels for sm_{major}{minor}" in message
        assert f"FP4OPS_CUDA_ARCHS={major}.{minor}" in message
