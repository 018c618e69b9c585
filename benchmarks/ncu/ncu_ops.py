"""One call of each op on 2^26 bf16 elements, for Nsight Compute:

    ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,\
smsp__inst_executed.sum,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,\
dram__throughput.avg.pct_of_peak_sustained_elapsed -k regex:"quantize|amax|gemv|recipe" \
python benchmarks/ncu/ncu_ops.py
"""

import torch

import fp4ops

x = torch.randn(1 << 26, device="cuda", dtype=torch.bfloat16)
g = fp4ops.amax(x) / 2688
fp4ops.quantize_nvfp4(x, g).dequantize(torch.bfloat16)
fp4ops.quantize_mxfp4(x, scale_rule="rceil").dequantize(torch.bfloat16)
# Scale layouts and recipe options on an [8192, 8192] matrix (docs/recipe.md's instruction counts).
matrix = x.view(8192, 8192)
fp4ops.quantize_nvfp4(matrix, g, scale_layout="swizzled")
fp4ops.quantize_nvfp4(matrix, g, hadamard=True)
fp4ops.quantize_nvfp4(matrix, g, stochastic_rounding=True, seed=1)
fp4ops.quantize_nvfp4(matrix, g, block_2d=True)
fp4ops.quantize_nvfp4_rowwise_columnwise(matrix, g)
fp4ops.quantize_nvfp4_rowwise_columnwise(matrix, g, block_2d=True)
a = fp4ops.quantize_nvfp4(torch.randn(8, 4096, 7168, device="cuda", dtype=torch.bfloat16))
fp4ops.gemv(a, torch.randn(8, 7168, device="cuda", dtype=torch.bfloat16))
torch.cuda.synchronize()
