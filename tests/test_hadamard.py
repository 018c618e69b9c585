"""The Random Hadamard Transform reference (d = 16): orthogonal, invertible, and GEMM-preserving,
also through NVFP4 quantize, GEMV and dequantize within the quantization error."""

from __future__ import annotations

import pytest
import torch

import fp4ops
from fp4ops import reference
from fp4ops.demo import sqnr_db


@pytest.mark.parametrize("seed", [None, 7, 12345])
def test_rht_matrix_is_orthogonal_and_built_from_16x16_hadamard(seed):
    signs = reference.rht_signs(seed)
    h = reference.rht_matrix(signs)
    assert torch.equal(h @ h.T, torch.eye(16, dtype=torch.float64))  # exact: entries are +-1/4
    assert torch.equal(h.abs(), torch.full((16, 16), 0.25, dtype=torch.float64))
    assert torch.equal(signs.abs(), torch.ones(16, dtype=torch.float64))
    assert torch.equal((h * 4)[:, 0], signs)  # column 0 of H16 is all ones, so column 0 of H is S / 4


def test_default_signs_are_transformer_engines_and_seeds_differ():
    assert reference.rht_signs().tolist() == [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]
    assert len({tuple(reference.rht_signs(s).tolist()) for s in range(8)}) > 1
    assert torch.equal(reference.rht_signs(5), reference.rht_signs(5))


def test_rht_round_trips_and_preserves_products():
    x = torch.randn(3, 8, 64, dtype=torch.float64)
    w = torch.randn(32, 64, dtype=torch.float64)
    signs = reference.rht_signs(99)
    assert torch.allclose(reference.inverse_rht(reference.rht(x, signs), signs), x, rtol=0, atol=1e-13)
    assert torch.allclose(reference.rht(x, signs) @ reference.rht(w, signs).T, x @ w.T, rtol=0, atol=1e-11)


def test_rotated_gemv_through_nvfp4_equals_the_unrotated_product_with_the_quantized_weight():
    """gemv(quantize(w H), x H) == (dequantize(quantize(w H)) H^T) x: the rotation passes through
    quantize and GEMV (up to x H's bf16 rounding), and the weight it stands for, rotated back, is
    within NVFP4's error of w."""
    k = 256
    w = torch.randn(64, k)
    w[:, 5] *= 40.0  # an outlier input channel
    x = torch.randn(k)
    rotated = fp4ops.quantize_nvfp4(reference.rht(w))
    w_back = reference.inverse_rht(rotated.dequantize(torch.float32)).double()
    y = fp4ops.gemv(rotated, reference.rht(x).to(torch.bfloat16), out_dtype=torch.float32).double()
    want = w_back @ x.double()
    assert ((y - want).norm() / want.norm()).item() < 1e-2  # bf16 rounding of x H: ~2^-9 per element
    assert sqnr_db(w, w_back) > 15.0


def test_rht_rejects_a_last_dimension_not_a_multiple_of_16():
    with pytest.raises(ValueError, match="x: expected the last dimension to be a multiple of 16, got 24"):
        reference.rht(torch.randn(2, 24))


def test_seeded_signs_are_drawn_once_per_seed(monkeypatch):
    # Drawing the signs builds a torch.Generator (~30 us of host time): a loop quantizing with the
    # same seed every step draws them once; the codes are those of freshly drawn signs.
    from fp4ops import ops

    draws = []
    real = reference.rht_signs
    monkeypatch.setattr(reference, "rht_signs", lambda seed=None, device=None: draws.append(seed) or real(seed, device))
    ops._sign_mask_of_seed.cache_clear()
    x = torch.randn(4, 64)
    first = fp4ops.quantize_nvfp4(x, hadamard=12345)
    second = fp4ops.quantize_nvfp4(x, hadamard=12345)
    fp4ops.quantize_nvfp4(x, hadamard=54321)
    assert draws == [12345, 54321]
    assert torch.equal(first.data, second.data) and torch.equal(first.scales, second.scales)
    ops._sign_mask_of_seed.cache_clear()
    fresh = fp4ops.quantize_nvfp4(x, hadamard=real(12345).tolist())
    assert torch.equal(first.data, fresh.data) and torch.equal(first.scales, fresh.scales)
