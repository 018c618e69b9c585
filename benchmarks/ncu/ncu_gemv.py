"""One GEMV call per (B kind, seed shape) for Nsight Compute, e.g.

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
--section MemoryWorkloadAnalysis -k regex:gemv python benchmarks/ncu/ncu_gemv.py [M K L]
"""

import sys

import torch

import fp4ops

m, k, l = (int(v) for v in sys.argv[1:4]) if len(sys.argv) > 3 else (7168, 16384, 1)
a = fp4ops.quantize_nvfp4(torch.randn(l, m, k, device="cuda", dtype=torch.bfloat16))
b = torch.randn(l, k, device="cuda", dtype=torch.bfloat16)
fp4ops.gemv(a, b)
fp4ops.gemv(a, fp4ops.quantize_nvfp4(b))
torch.cuda.synchronize()
