"""The Random Hadamard Transform reference (d = 16): orthogonal, invertible, and GEMM-preserving,
also through NVFP4 quantize, GEMV and dequantize within the quantization error."""

from __future__ import annotations

import pytest
import torch

import fp4ops
from fp4ops import _formats, reference
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
    """gemv(quantize(w H), x H) == (dequantize(quantize(w H)) H^T) x up to x H's bf16 rounding: the
    rotation passes through quantize and GEMV, and the weight it stands for, rotated back, is within
    NVFP4's error of w. Each step against a bound that holds for every draw (a norm ratio of the
    whole error failed now and then: with the outlier channel's x small, the rounding of the large
    rotated weights' inputs dominates a small product)."""
    k = 256
    w = torch.randn(64, k)
    w[:, 5] *= 40.0  # an outlier input channel
    x = torch.randn(k)
    rotated = fp4ops.quantize_nvfp4(reference.rht(w))
    w_back = reference.inverse_rht(reference.dequantize_exact(rotated))  # float64
    xh = reference.rht(x.double())
    xh_bf16 = xh.to(torch.bfloat16)
    y = fp4ops.gemv(rotated, xh_bf16, out_dtype=torch.float32).double()
    # The GEMV itself: SPEC 5's bound on its own operands.
    exact = reference.gemv_float64(rotated, xh_bf16)
    assert ((y - exact).abs() <= reference.gemv_error_bound(rotated, xh_bf16, torch.float32)).all()
    # The rotation passes through: on the unrounded x H the product is w_back x (float64 sums).
    unrounded = reference.gemv_float64(rotated, xh)
    assert torch.allclose(unrounded, w_back @ x.double(), rtol=1e-12, atol=1e-9)
    # Rounding x H to bf16 moves each input by at most 2^-8 of itself (round to nearest, 8 bits).
    magnitude = reference.dequantize_exact(rotated).abs() @ xh.abs()
    assert ((exact - unrounded).abs() <= 2.0**-8 * magnitude).all()
    assert sqnr_db(w, w_back) > 15.0


def test_rht_of_no_rows_is_no_rows():
    for shape in [(0, 16), (2, 0, 32)]:
        x = torch.randn(shape)
        assert reference.rht(x).shape == shape and reference.inverse_rht(x).shape == shape


def test_rht_rejects_a_last_dimension_not_a_multiple_of_16():
    with pytest.raises(ValueError, match="x: expected the last dimension to be a multiple of 16, got 24"):
        reference.rht(torch.randn(2, 24))


def test_seeded_signs_are_drawn_once_per_seed(monkeypatch):
    # Drawing the signs builds a torch.Generator, more host time than the rest of the call: a loop
    # quantizing with the same seed every step draws them once; the codes are those of the
    # reference's signs for that seed, passed explicitly.
    draws = []
    real = _formats.hadamard_signs
    monkeypatch.setattr(_formats, "hadamard_signs", lambda seed: draws.append(seed) or real(seed))
    _formats.sign_mask_of_seed.cache_clear()
    x = torch.randn(4, 64)
    first = fp4ops.quantize_nvfp4(x, hadamard=12345)
    second = fp4ops.quantize_nvfp4(x, hadamard=12345)
    fp4ops.quantize_nvfp4(x, hadamard=54321)
    assert draws == [12345, 54321]
    assert torch.equal(first.data, second.data) and torch.equal(first.scales, second.scales)
    _formats.sign_mask_of_seed.cache_clear()
    fresh = fp4ops.quantize_nvfp4(x, hadamard=reference.rht_signs(12345).tolist())
    assert torch.equal(first.data, fresh.data) and torch.equal(first.scales, fresh.scales)


def test_product_signs_and_masks_equal_the_references():
    """The kernels' sign masks come from fp4ops._formats, which draws a seed's signs itself; the
    reference draws them on its own. Both must give the same signs for every seed, or the
    recipe's exact tests would compare two different rotations."""
    assert _formats.TE_HADAMARD_SIGNS == reference.TE_RHT_SIGNS
    assert _formats.HADAMARD_DIM == reference.RHT_DIM
    seeds = [None, 0, 1, 7, 12345, -1, -(2**63), 2**31 - 1, 2**32, 2**63 - 1, 2**64 - 1]
    seeds += torch.randint(-(2**62), 2**62, (300,)).tolist()
    for seed in seeds:
        signs = reference.rht_signs(seed)
        assert list(_formats.hadamard_signs(seed)) == signs.tolist(), f"seed {seed}"
        assert _formats.sign_mask_of_seed(seed) == reference.hadamard_sign_mask(signs.tolist()), f"seed {seed}"
        assert _formats.hadamard_sign_mask(signs.tolist()) == reference.hadamard_sign_mask(signs), f"seed {seed}"


@pytest.mark.parametrize("signs", [[1.0] * 15, [1.0] * 15 + [0.5], [1, -1] * 9])
def test_product_and_reference_refuse_the_same_sign_vectors(signs):
    for mask in (_formats.hadamard_sign_mask, reference.hadamard_sign_mask):
        with pytest.raises(ValueError, match=r"hadamard: expected 16 signs of \+1 or -1, got "):
            mask(signs)
