// Hopper's warpgroup MMA (wgmma, sm_90a) with the A operand in registers and B in shared memory,
// and the bulk copies and mbarriers that feed it, for the linear kernels of linear_wgmma.cuh.
//
// A warpgroup (4 consecutive warps) computes D[64 x n] += A[64 x 16] B[16 x n]: warp w of the group
// holds rows 16w .. 16w + 15 of A and D in exactly the registers of mma.sync m16n8k16 (A: a0 a1 a2 a3
// = rows g, g + 8 at k 2t, 2t + 1, then at k 2t + 8, 2t + 9; D: column tile j's four values in
// d[j]). So a warp that builds m16n8k16 A fragments can hand them to wgmma unchanged, and its
// accumulators read out the same way. The hardware adds each column's products as mma.sync does:
// the same bits whatever n (checked on the GPU by the linear tests' batch invariance, which mixes
// both instruction kinds across row counts).
//
// B: n rows of 16 elements (K-major) in 128-byte-swizzle atoms (wgmma_swizzled_descriptor). wgmma
// reads shared memory through the async proxy, as bulk copies write it: data written by bulk copies
// needs no proxy fence before an MMA reads it, only the mbarrier wait for the copy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "async_copy.cuh"

namespace fp4ops::cuda {

// The shared-memory matrix descriptor of K-major B in 128-byte-swizzle atoms (8 rows of 128 bytes,
// 1024-byte aligned; row r's 16-byte chunk c stored at chunk c XOR r % 8): start address (the
// unswizzled address of the slice's first chunk, within an atom), groups of 8 rows
// `group_stride_bytes` apart, layout type 1 (128-byte swizzle). Fields in 16-byte units, 14 bits each:
// shared addresses stay below 256 KB. The leading byte offset is unused by this layout (set to 1).
__device__ __forceinline__ uint64_t wgmma_swizzled_descriptor(uint32_t address, uint32_t group_stride_bytes) {
  const uint64_t lo = (address >> 4 & 0x3FFFu) | 1u << 16;
  return lo | static_cast<uint64_t>(group_stride_bytes >> 4 & 0x3FFFu) << 32 | uint64_t{1} << 62;
}

// The instructions below exist on sm_90a only: call them from code compiled where FP4OPS_HW_WGMMA is
// defined.
// Orders this thread's earlier register writes (A fragments, accumulators) before the next wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most kPending committed groups are in flight; their registers are free after it.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// The asm operands: column tile j's four accumulators, read and written (FP4OPS_WGMMA_D4: tiles j to
// j + 3), then the A fragment, the B descriptor and the accumulate flag (always 1).
#define FP4OPS_WGMMA_D(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define FP4OPS_WGMMA_D4(j) FP4OPS_WGMMA_D(j), FP4OPS_WGMMA_D(j + 1), FP4OPS_WGMMA_D(j + 2), FP4OPS_WGMMA_D(j + 3)
#define FP4OPS_WGMMA_AB "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1)

#define FP4OPS_WGMMA_M64N32K16(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, " \
      "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n" \
      : FP4OPS_WGMMA_D4(0) \
      : FP4OPS_WGMMA_AB)

#define FP4OPS_WGMMA_M64N64K16(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n" \
      : FP4OPS_WGMMA_D4(0), FP4OPS_WGMMA_D4(4) \
      : FP4OPS_WGMMA_AB)

#define FP4OPS_WGMMA_M64N128K16(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n" \
      : FP4OPS_WGMMA_D4(0), FP4OPS_WGMMA_D4(4), FP4OPS_WGMMA_D4(8), FP4OPS_WGMMA_D4(12) \
      : FP4OPS_WGMMA_AB)

// The instruction of one shape (SHAPE: one of the macros above) for T's element type.
#define FP4OPS_WGMMA_OF_TYPE(SHAPE) \
  if constexpr (std::is_same_v<T, __nv_bfloat16>) { \
    SHAPE("bf16"); \
  } else { \
    SHAPE("f16"); \
  }

// d += a b for n = 8 kNt columns, kNt = 4, 8 or 16: one m64nNk16 instruction of element type T (bf16
// or fp16) with fp32 accumulators, the accumulate predicate always set. The PTX differs between
// the element types only in their names (TYPE in the macros below).
template <typename T, int kNt>
struct WgmmaM64K16 {
  static_assert(kNt == 4 || kNt == 8 || kNt == 16, "wgmma tiles of 4, 8 or 16 column tiles only");
  static __device__ __forceinline__ void run(float (&d)[kNt][4], const uint32_t (&a)[4], uint64_t b) {
    if constexpr (kNt == 4) {
      FP4OPS_WGMMA_OF_TYPE(FP4OPS_WGMMA_M64N32K16)
    } else if constexpr (kNt == 8) {
      FP4OPS_WGMMA_OF_TYPE(FP4OPS_WGMMA_M64N64K16)
    } else {
      FP4OPS_WGMMA_OF_TYPE(FP4OPS_WGMMA_M64N128K16)
    }
  }
};

#undef FP4OPS_WGMMA_OF_TYPE
#undef FP4OPS_WGMMA_M64N32K16
#undef FP4OPS_WGMMA_M64N64K16
#undef FP4OPS_WGMMA_M64N128K16
#undef FP4OPS_WGMMA_AB
#undef FP4OPS_WGMMA_D4
#undef FP4OPS_WGMMA_D

}  // namespace fp4ops::cuda
