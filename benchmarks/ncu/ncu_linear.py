"""fp4ops.linear at decode rows, two calls a case (a warm-up, then the one to read), for Nsight
Compute, e.g.

    ncu --clock-control none --cache-control none --section SpeedOfLight --section WarpStateStats \
--section MemoryWorkloadAnalysis --section SourceCounters -k regex:linear_mma --launch-skip 1 \
--launch-count 1 -o mxfp4_4096 python benchmarks/ncu/ncu_linear.py 4096,4096,1,mxfp4,bfloat16

Each argument is a case N,K,ROWS,FORMAT,X: an N x K weight of FORMAT (nvfp4 or mxfp4) from
random data times ROWS rows of x, X one of bfloat16, float16 or fp4 (x quantized to the weight's
format). Without arguments: 4096^2 and 28672 x 8192 at 1 and 8 rows, both formats, bf16 x. Prints
each case before its calls, so the report's kernels can be matched to the cases in order (the
kernel family launches one to three kernels a call: x's decode or pairing, the main kernel, the
K ranges' reduction).
"""

import sys

import torch

import fp4ops

QUANTIZERS = {"nvfp4": fp4ops.quantize_nvfp4, "mxfp4": fp4ops.quantize_mxfp4}
X_KINDS = ("bfloat16", "float16", "fp4")


def parse_case(text: str) -> tuple[int, int, int, str, str]:
    n, k, rows, fmt, x_kind = text.split(",")
    if fmt not in QUANTIZERS or x_kind not in X_KINDS:
        raise SystemExit(f"{text}: expected N,K,ROWS,FORMAT,X with FORMAT in {sorted(QUANTIZERS)} and X in {X_KINDS}")
    return int(n), int(k), int(rows), fmt, x_kind


def linear_call(n: int, k: int, rows: int, fmt: str, x_kind: str):
    quantize = QUANTIZERS[fmt]
    w = quantize(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    dense = torch.randn(rows, k, device="cuda", dtype=torch.float16 if x_kind == "float16" else torch.bfloat16)
    x = quantize(dense) if x_kind == "fp4" else dense
    return lambda: fp4ops.linear(x, w)


DEFAULT_CASES = [f"{shape},{rows},{fmt},bfloat16" for shape in ("4096,4096", "28672,8192") for rows in (1, 8)
                 for fmt in ("nvfp4", "mxfp4")]

for case in sys.argv[1:] or DEFAULT_CASES:
    call = linear_call(*parse_case(case))
    print(case, flush=True)
    for _ in range(2):
        call()
    torch.cuda.synchronize()
