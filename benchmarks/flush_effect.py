"""Does the L2 flush itself cost the timed call? The suite's flush rewrites a 256 MB buffer before
each timed call, which leaves the L2 full of dirty lines; the timed call's first misses then write
them back to DRAM inside the timed region. This times the same calls after two flushes:

    dirty: the 256 MB buffer rewritten (what the suite did up to this probe)
    clean: the same, then a second 256 MB buffer read, so the L2 holds clean lines only

and prints % of the copy ceiling (itself measured both ways) per row.

    python -m benchmarks.flush_effect   (from the repository root)
"""

import statistics

import torch

import fp4ops
from fp4ops.timing import timed_calls

from benchmarks.suite.harness import CEILING_BYTES, FLUSH_BYTES

device = torch.device("cuda")
dirty_buffer = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
read_buffer = torch.ones(FLUSH_BYTES // 4, dtype=torch.float32, device=device)


def flush_dirty():
    dirty_buffer.fill_(1)


def flush_clean():
    dirty_buffer.fill_(1)
    torch.amax(read_buffer)


def cold_us(fn, flush, reps=30):
    fn()
    torch.cuda.synchronize()
    return statistics.median(timed_calls(fn, device, reps, before_each=flush)[0])


def cases():
    big = torch.randn(CEILING_BYTES // 4, device=device)
    big_out = torch.empty_like(big)
    yield "copy 512 MB (ceiling)", 2 * big.nbytes, lambda: big_out.copy_(big)
    small = torch.randn(31 << 20 >> 2, device=device)
    small_out = torch.empty_like(small)
    yield "copy 31 MB (seed GEMV size)", 2 * small.nbytes, lambda: small_out.copy_(small)
    x26 = torch.randn(1 << 14, 4096, device=device, dtype=torch.bfloat16)
    yield "torch fp8 cast bf16 2^26", 3 * x26.numel(), lambda: x26.to(torch.float8_e4m3fn)
    yield "amax bf16 2^26 (read bytes)", 2 * x26.numel(), lambda: fp4ops.amax(x26)
    yield "nvfp4 quantize bf16 2^26", 2.5625 * x26.numel(), lambda: fp4ops.quantize_nvfp4(x26, 1.0)
    q26 = fp4ops.quantize_nvfp4(x26, 1.0)
    yield "nvfp4 dequantize bf16 2^26", 2.5625 * x26.numel(), lambda: fp4ops.dequantize(q26)
    del x26
    for m, k, l in ((7168, 2048, 4), (7168, 16384, 1), (4096, 7168, 8), (16384, 16384, 1)):
        a = fp4ops.quantize_nvfp4(torch.randn(l, m, k, device=device, dtype=torch.bfloat16))
        b = torch.randn(l, k, device=device, dtype=torch.bfloat16)
        bq = fp4ops.quantize_nvfp4(b)
        weights = l * m * k * (0.5 + 1 / 16)
        yield f"gemv nvfp4 x nvfp4 {(m, k, l)}", weights + l * (k * (0.5 + 1 / 16) + 2 * m), lambda a=a, bq=bq: fp4ops.gemv(a, bq)
        yield f"gemv nvfp4 x bf16 {(m, k, l)}", weights + l * (2 * k + 2 * m), lambda a=a, b=b: fp4ops.gemv(a, b)


def main():
    rows, ceilings = [], {}
    for name, nbytes, fn in cases():
        us = {kind: cold_us(fn, flush) for kind, flush in (("dirty", flush_dirty), ("clean", flush_clean))}
        if name.startswith("copy 512"):
            ceilings = {kind: nbytes / t / 1e3 for kind, t in us.items()}
        rows.append((name, nbytes, us))
    print(f"copy ceiling GB/s: dirty {ceilings['dirty']:.0f}, clean {ceilings['clean']:.0f}")
    print(f"{'case':40s} {'dirty us':>9s} {'clean us':>9s} {'dirty %':>8s} {'clean %':>8s}")
    for name, nbytes, us in rows:
        pct = {kind: 100 * nbytes / us[kind] / 1e3 / ceilings[kind] for kind in us}
        print(f"{name:40s} {us['dirty']:9.2f} {us['clean']:9.2f} {pct['dirty']:7.1f}% {pct['clean']:7.1f}%")


if __name__ == "__main__":
    main()
