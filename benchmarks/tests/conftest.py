"""The lab's tests (python -m pytest benchmarks/tests, from the repository root). They import the
lab as `benchmarks.*` and fp4ops through its public API only; the product's fixtures
(tests/conftest.py) are not theirs."""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_seed():
    """Every test draws new random data; the seed is printed so a failure can be replayed."""
    seed = int(os.environ.get("FP4OPS_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    torch.manual_seed(seed)
    print(f"seed={seed} (replay with FP4OPS_TEST_SEED={seed})")
    return seed
