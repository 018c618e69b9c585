"""Shared fixtures: fresh random seeds, devices, the edge-case matrix and exact comparisons."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

import fp4ops

HAS_CUDA = torch.cuda.is_available()
FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
FLT_MAX = torch.finfo(torch.float32).max
FLT_TINY = torch.finfo(torch.float32).tiny

requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
# CUDA graph capture allocates through PyTorch's caching allocator; the sanitizer script turns it
# off (PYTORCH_NO_CUDA_MEMORY_CACHING=1) so that memcheck sees every allocation's real bounds.
requires_caching_allocator = pytest.mark.skipif(
    os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1",
    reason="CUDA graph capture needs the caching allocator (PYTORCH_NO_CUDA_MEMORY_CACHING=1 is set)")


# pytest-xdist workers share the machine's cores; each torch's default of one thread per core would
# oversubscribe them many times over, and the float64 references then crawl.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


def pytest_collection_modifyitems(config, items):
    """FP4OPS_TESTS_CUDA_ONLY=1 deselects the tests parametrized with device "cpu": a GPU machine
    whose commands have a time limit spends it on what only it can run (CI runs the CPU half)."""
    if os.environ.get("FP4OPS_TESTS_CUDA_ONLY") != "1":
        return
    on_cpu = [item for item in items if getattr(item, "callspec", None) and item.callspec.params.get("device") == "cpu"]
    if on_cpu:
        config.hook.pytest_deselected(items=on_cpu)
        skipped = set(on_cpu)
        items[:] = [item for item in items if item not in skipped]


@pytest.fixture(autouse=True)
def fresh_seed():
    """Every test draws new random data; the seed is printed so a failure can be replayed."""
    seed = int(os.environ.get("FP4OPS_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    torch.manual_seed(seed)
    print(f"seed={seed} (replay with FP4OPS_TEST_SEED={seed})")
    return seed


def load_tool(name: str):
    """tools/<name>.py as a module (the tools are scripts, not a package), registered under its
    name so that its dataclasses can look their module up."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def extension_binary() -> Path | None:
    """The built extension's shared object (AOT, or the JIT build's), or None where none is built."""
    if fp4ops.BUILD == "aot":
        return Path(importlib.import_module("fp4ops._C").__file__)
    from torch.utils.cpp_extension import _get_build_directory

    built = list(Path(_get_build_directory("fp4ops_jit", verbose=False)).glob("fp4ops_jit*.so"))
    return built[0] if built else None


def built_cubin_archs() -> set[str] | None:
    """The cubin architectures of the built extension (e.g. {"sm_90a", "sm_100a"}), or None where
    cuobjdump or the binary cannot be found."""
    tool = load_tool("sass_loops")
    cuobjdump, binary = tool.find_tool("cuobjdump"), extension_binary()
    if cuobjdump is None or binary is None:
        return None
    return set(tool.cubin_archs(cuobjdump, binary))


def cuda_has_kernel(op_name: str) -> bool:
    return HAS_CUDA and torch._C._dispatch_has_kernel_for_dispatch_key(f"fp4ops::{op_name}", "CUDA")


def fp4ops_kernels_launched(fn) -> list[str]:
    """Names of the fp4ops CUDA kernels that fn() launches. Under compute-sanitizer
    (tools/sanitize.sh), where the torch profiler does not run, the test skips here, after the
    kernels it has run so far."""
    if os.environ.get("FP4OPS_UNDER_SANITIZER"):
        pytest.skip("the torch profiler does not run under compute-sanitizer")
    fn()  # the first call sets the kernels' attributes up; profile a later one
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "fp4ops" in e.name]


def takes_one_cluster(ctas: int) -> bool | None:
    """Whether a one-launch path of `ctas` CTAs (the producers' and dynamic NVFP4's) runs as one
    thread-block cluster: where the GPU and the build's code have clusters (compute capability 9.0
    on; not a build for older GPUs compiled by the driver) and the GPU schedules one that size (8
    CTAs anywhere, 16 on Hopper and B200). None (either) for 9-16 CTAs on other GPUs. The build's
    architectures come from FP4OPS_CUDA_ARCHS, as the build took them: run the tests with the value
    the extension was built with (tools/gpu_check.sh does)."""
    from fp4ops import _build

    has_cluster_code = any(not arch.startswith("8.") for arch in _build.cuda_archs())
    major = torch.cuda.get_device_capability()[0]
    if major < 9 or not has_cluster_code or ctas > 16:
        return False
    return True if ctas <= 8 or major in (9, 10) else None


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a uint8/fp8 tensor, for exact comparisons."""
    return t.view(torch.uint8) if t.dtype != torch.uint8 else t


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads and the sign of zero included), for any dtype."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def assert_same_bytes(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    a, e = as_bytes(actual).cpu(), as_bytes(expected).cpu()
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    mismatch = (a != e).nonzero()
    assert mismatch.numel() == 0, (
        f"{what}: {mismatch.shape[0]} of {a.numel()} bytes differ; first at {mismatch[0].tolist()}: "
        f"{a[tuple(mismatch[0])].item():#04x} != {e[tuple(mismatch[0])].item():#04x}"
    )


def assert_exact(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Values equal exactly (rtol=0, atol=0), NaN where the other is NaN, same dtype and shape."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected.cpu(), rtol=0, atol=0, equal_nan=True)
    # assert_close treats -0.0 == 0.0; the sign of zero is part of the contract too.
    signs_differ = torch.signbit(actual.cpu()) != torch.signbit(expected.cpu())
    both_nan = torch.isnan(actual.cpu()) & torch.isnan(expected.cpu())
    assert not (signs_differ & ~both_nan).any(), "sign of zero differs"


def _ties(k: int) -> torch.Tensor:
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0])
    row = torch.cat([ties, -ties]).repeat(k // 16)
    return row.reshape(1, k)


def edge_cases(k: int) -> dict[str, torch.Tensor]:
    """The foundation issue's edge-case matrix, as fp32 tensors with last dimension k (a multiple
    of 32), fresh random values where the case has any."""
    n = 4 * k
    randn = torch.randn(3, k)
    cases = {
        "random_normal": randn,
        "heavy_tailed": torch.distributions.StudentT(2.0).sample((5, k)),
        "wide_magnitudes": torch.randn(6, k) * torch.exp2(torch.randint(-140, 120, (6, k)).float()),
        "all_zero": torch.zeros(2, k),
        "negative_zero": torch.full((2, k), -0.0),
        "zero_blocks": randn * (torch.arange(k) // 16 % 2 == 0),
        "nan_inf_blocks": randn.clone().index_put_((torch.tensor([0, 1, 2]), torch.tensor([0, 17, 33 % k])),
                                                  torch.tensor([float("nan"), float("inf"), -float("inf")])),
        "subnormal_only": torch.randint(-(2**23) + 1, 2**23, (2, k), dtype=torch.int32).view(torch.float32).abs()
        * torch.where(torch.rand(2, k) < 0.5, -1.0, 1.0),
        "near_flt_max": FLT_MAX * (1 - torch.rand(2, k) * 2.0**-10) * torch.sign(torch.randn(2, k)),
        "tiny_beside_large": torch.where(torch.arange(k) < k // 2, torch.randn(2, k) * 1e-30, torch.randn(2, k) * 1e30),
        "ties": _ties(k) * torch.exp2(torch.randint(-8, 9, (1, 1)).float()),
        "grid_values_scaled": torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6]).repeat(n // 8).reshape(4, k)
        * torch.exp2(torch.randint(-20, 20, (4, 1)).float()),
        "ragged_leading_dims": torch.randn(3, 5, 7, k),
        "one_row": torch.randn(1, k),
        "empty_rows": torch.randn(0, k),
    }
    return cases
