"""The lab's tests (python -m pytest benchmarks/tests, from the repository root). They import the
lab as `benchmarks.*` and fp4ops through its public API only. They take the product tests' fresh
random seed per test (tests/conftest.py, loaded as a plain module so that pytest does not register
it twice when both folders run in one session)."""

from __future__ import annotations

import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location(
    "fp4ops_product_conftest", pathlib.Path(__file__).resolve().parents[2] / "tests" / "conftest.py")
_product = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_product)

fresh_seed = _product.fresh_seed  # autouse: every test draws new random data, the seed printed
