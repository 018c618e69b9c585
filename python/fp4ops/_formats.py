"""The format facts of SPEC 1-4 that the product needs, stated once: every other module of the
package takes them from here. `fp4ops.reference` restates them on its own (it is the independent
statement of the contract); tests/test_format_facts.py checks that the two agree."""

from __future__ import annotations

import functools

import torch

# SPEC 1: the largest E2M1 and E4M3 magnitudes.
E2M1_MAX = 6.0
E4M3_MAX = 448.0

# SPEC 2-3: elements per block scale along the last dimension, and the scales' dtypes.
NVFP4_BLOCK = 16
MXFP4_BLOCK = 32
NVFP4_SCALE_DTYPE = torch.float8_e4m3fn
MXFP4_SCALE_DTYPE = torch.float8_e8m0fnu
SCALE_DTYPES = (NVFP4_SCALE_DTYPE, MXFP4_SCALE_DTYPE)
FORMATS = {"nvfp4": (NVFP4_BLOCK, NVFP4_SCALE_DTYPE), "mxfp4": (MXFP4_BLOCK, MXFP4_SCALE_DTYPE)}

# The dtypes a quantizer reads and a dequantizer writes.
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

SCALE_RULES = ("floor", "rceil")  # SPEC 3's MXFP4 scale rules
SCALE_LAYOUTS = ("linear", "swizzled")  # SPEC 4

# SPEC 2.2: g = amax / 2688 maps the tensor's largest magnitude onto the largest element (6)
# times the largest block scale (448).
GLOBAL_SCALE_DIVISOR = E2M1_MAX * E4M3_MAX


def global_scale_from_amax(amax_value: torch.Tensor) -> torch.Tensor:
    """g = amax / 2688 rounded once (1 when 0). The divisor is a tensor on amax's device: PyTorch's
    CUDA kernels turn a division by a Python number into a multiplication by its reciprocal, which
    is 1 ulp off for some amax values (and then every scale of the tensor moves)."""
    g = amax_value / torch.full((), GLOBAL_SCALE_DIVISOR, dtype=torch.float32, device=amax_value.device)
    return torch.where(g == 0, torch.ones_like(g), g)


# The 16-point Random Hadamard Transform of the NVFP4 training recipe (docs/recipe.md) rotates
# each 16-element group by diag(S) H16 / 4; the kernels take the sign vector S as a 16-bit mask.
HADAMARD_DIM = 16
# Transformer Engine's fixed ("wgrad") sign vector.
TE_HADAMARD_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def hadamard_signs(seed: int | None) -> tuple[int, ...]:
    """Transformer Engine's signs (seed None), or 16 random +-1 drawn from a torch.Generator
    seeded with `seed`: a seed names the same signs in every release, so the draw must not change."""
    if seed is None:
        return TE_HADAMARD_SIGNS
    bits = torch.randint(0, 2, (HADAMARD_DIM,), generator=torch.Generator().manual_seed(seed))
    return tuple(2 * bit - 1 for bit in bits.tolist())


def hadamard_sign_mask(signs) -> int:
    """A sign vector S (16 entries of +-1) as the kernels' 16-bit mask: bit i set where S_i = -1."""
    values = [float(s) for s in signs]
    if len(values) != HADAMARD_DIM or any(v not in (1.0, -1.0) for v in values):
        raise ValueError(f"hadamard: expected 16 signs of +1 or -1, got {values}")
    return sum(1 << i for i, v in enumerate(values) if v < 0)


@functools.lru_cache(maxsize=256)
def sign_mask_of_seed(seed: int | None) -> int:
    """hadamard_sign_mask(hadamard_signs(seed)), once per seed: drawing the signs builds a
    torch.Generator, which costs more host time than the rest of a quantize call, and a training
    loop quantizes with the same seed every step."""
    return hadamard_sign_mask(hadamard_signs(seed))
