"""`python -m fp4ops` (the demo): a bad argument is refused by name before any work."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch


def run_demo(*args):
    return subprocess.run([sys.executable, "-m", "fp4ops", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args, message", [
    (["--cols", "48"], "--cols: expected a positive multiple of 32"),
    (["--cols", "0"], "--cols: expected a positive multiple of 32"),
    (["--rows", "0"], "--rows: expected a count >= 1, got 0"),
    (["--rows", "-1"], "--rows: expected a count >= 1, got -1"),
    (["--device", "foo"], "--device: expected cpu or cuda, got 'foo'"),
    (["--device", "meta"], "--device: expected cpu or cuda, got 'meta'"),
])
def test_bad_arguments_are_refused_by_name(args, message):
    run = run_demo(*args)
    assert run.returncode == 2 and message in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and "fp4ops: quantizing" not in run.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused():
    run = run_demo("--device", "cuda")
    assert run.returncode == 2 and "no CUDA GPU is available" in run.stderr and "Traceback" not in run.stderr


def test_a_small_run_prints_its_table():
    run = run_demo("--rows", "16", "--cols", "64", "--device", "cpu")
    assert run.returncode == 0, run.stderr
    assert all(f"| {name}" in run.stdout for name in ("NVFP4 (own amax)", "MXFP4 floor", "MXFP4 rceil"))
