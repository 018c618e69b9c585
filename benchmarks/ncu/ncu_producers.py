"""The fused producers at decode rows, two calls each (a warm-up, then the one to read), for
Nsight Compute, e.g.

    ncu --clock-control none --cache-control none --section SpeedOfLight --section WarpStateStats \
--section SourceCounters -k regex:"rms_norm|silu_mul" python benchmarks/ncu/ncu_producers.py

Prints each case's name before its calls, so the report's kernels can be matched to the cases in
order; case numbers as arguments (from 0) run only those. Cases: RMSNorm with a residual (NVFP4
with a given g, MXFP4) at 1 and 8 rows of 4096, and SiLU-mul at 8 rows of 14336 (NVFP4 with a
given g and with its own).
"""

import sys

import torch

import fp4ops

dtype = torch.bfloat16
g = torch.tensor(1.0 / 64, device="cuda")
norm_weight = torch.rand(4096, device="cuda", dtype=dtype) + 0.5


def rms_norm_with_residual(rows: int, format: str):
    x = torch.randn(rows, 4096, device="cuda", dtype=dtype)
    residual = torch.randn_like(x)
    return lambda: fp4ops.rms_norm_quantize(x, norm_weight, residual=residual, format=format,
                                            global_scale=g if format == "nvfp4" else None)


def silu_mul(rows: int, global_scale):
    x = torch.randn(rows, 2 * 14336, device="cuda", dtype=dtype)
    return lambda: fp4ops.silu_mul_quantize(x, global_scale=global_scale)


cases = {
    "rms_norm residual nvfp4 g given, 1 x 4096": rms_norm_with_residual(1, "nvfp4"),
    "rms_norm residual mxfp4, 1 x 4096": rms_norm_with_residual(1, "mxfp4"),
    "rms_norm residual nvfp4 g given, 8 x 4096": rms_norm_with_residual(8, "nvfp4"),
    "rms_norm residual mxfp4, 8 x 4096": rms_norm_with_residual(8, "mxfp4"),
    "silu_mul nvfp4 g given, 8 x 14336": silu_mul(8, g),
    "silu_mul nvfp4 own g, 8 x 14336": silu_mul(8, None),
}
chosen = [int(arg) for arg in sys.argv[1:]] or range(len(cases))
for name, call in (list(cases.items())[i] for i in chosen):
    print(name, flush=True)
    for _ in range(2):
        call()
    torch.cuda.synchronize()
