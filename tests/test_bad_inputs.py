"""The bad-input matrix (tests/bad_inputs.py): each case raises its exception with a message that
names the argument, on every device it applies to, and leaves nothing running that could fault
later (CUDA is synchronized after each case; tools/sanitize.sh runs this file under memcheck)."""

from __future__ import annotations

import re

import pytest
import torch
from bad_inputs import CASES, Inputs
from conftest import requires_cuda

import fp4ops

requires_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


def _matrix():
    """(case, device, other device) for every place a case applies."""
    for case in CASES:
        name = re.sub(r"\W+", "_", f"{case.function}-{case.what}").strip("_")
        if case.devices == "one":
            yield pytest.param(case, "cpu", "cpu", id=f"cpu-{name}")
            yield pytest.param(case, "cuda", "cuda", id=f"cuda-{name}", marks=requires_cuda)
        elif case.devices == "mixed":  # both ways round: the device under test, the other one
            yield pytest.param(case, "cuda", "cpu", id=f"cuda+cpu-{name}", marks=requires_cuda)
            yield pytest.param(case, "cpu", "cuda", id=f"cpu+cuda-{name}", marks=requires_cuda)
        else:
            yield pytest.param(case, "cuda:1", "cuda:0", id=f"cuda1+cuda0-{name}", marks=requires_two_gpus)


@pytest.mark.parametrize(("case", "device", "other"), list(_matrix()))
def test_bad_input(case, device, other):
    with pytest.raises(case.exception) as info:
        case.call(Inputs(device, other))
    assert case.message in str(info.value)
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # an out-of-bounds launch would surface here


def test_matrix_covers_every_public_function_and_op():
    called = {case.function for case in CASES}
    public = {name for name in fp4ops.__all__ if callable(getattr(fp4ops, name)) and name[0].islower()}
    ops = {name.replace("fp4ops::", "ops.") for name in torch._C._dispatch_get_all_op_names() if name.startswith("fp4ops::")}
    assert public | ops <= called, f"no bad-input case for {sorted((public | ops) - called)}"


def test_quantizing_a_tensor_that_requires_grad():
    """A weight (requires_grad) quantizes; nothing returned requires grad, and under no_grad the
    float ops accept it."""
    w = torch.nn.Parameter(torch.randn(4, 32))
    q = fp4ops.quantize_nvfp4(w)
    assert not any(t.requires_grad for t in (q.data, q.scales, q.global_scale))
    assert not fp4ops.quantize_mxfp4(w).scales.requires_grad
    g = torch.tensor(0.01, requires_grad=True)  # a given global scale that requires grad
    given = [fp4ops.quantize_nvfp4(w, g), fp4ops.quantize_nvfp4(w, g, hadamard=True),
             *fp4ops.quantize_nvfp4_rowwise_columnwise(torch.randn(16, 32, requires_grad=True), g)]
    assert not any(t.requires_grad for q in given for t in (q.data, q.scales, q.global_scale))
    with torch.no_grad():
        assert fp4ops.amax(w) == w.abs().max()
        assert fp4ops.gemv(q, w[0].half()).shape == (4,)
