// Shared-memory and asynchronous-copy primitives (sm_80+ PTX; the bulk ones sm_90+) that the
// tensor-core GEMV, the linear and the RMSNorm producer stream with. Addresses of shared memory are
// 32-bit shared-window addresses (shared_address).
#pragma once

#include <cstdint>

namespace fp4ops::cuda {

// Asynchronous global -> shared copies (cp.async): data streams through shared memory without
// holding registers, so a warp keeps several copies in flight. .cg: cached in L2 only.
__device__ __forceinline__ void cp_async_16_streaming(uint32_t smem_dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" :: "r"(smem_dst), "l"(src));
}
template <int kBytes>
__device__ __forceinline__ void cp_async_small(uint32_t smem_dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" :: "r"(smem_dst), "l"(src), "n"(kBytes));
}
// The same copies, writing zeros instead where !valid (src-size 0: nothing is read from src, which
// must still be a valid address).
__device__ __forceinline__ void cp_async_16_or_zeros(uint32_t smem_dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(smem_dst), "l"(src), "r"(valid ? 16 : 0));
}
// Brings the line holding `p` into L2 (no register, no ordering: coherent with any later write).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" :: "l"(p)); }
// Brings `bytes` (a multiple of 16, from a 16-byte aligned `p`) into L2 in one bulk operation
// (sm_90+: the tensor memory accelerator), holding no registers and no ordering, like prefetch_l2.
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}

// mbarriers and bulk copies (sm_90+: the tensor memory accelerator): one thread moves a whole span
// while the others compute, holding no registers for it.
//
// An mbarrier in shared memory that completes a phase when its one arrival (arrive_expect_tx) and
// the bytes it expects (complete_tx, from bulk copies) are all in.
__device__ __forceinline__ void mbarrier_init(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
// Makes mbarrier_init visible to the async proxy (the bulk copies' complete_tx); then a CTA barrier.
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits for the phase of `parity` (0 for the first phase, then alternating) to complete.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}
// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory
// through the async proxy, counted on `bar`'s expected bytes.
__device__ __forceinline__ void bulk_copy_to_shared(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src),
               "r"(bytes), "r"(bar)
               : "memory");
}

// Orders this thread's view of shared memory (generic proxy: what the CTA's threads read before a
// barrier) before its next async-proxy operation, such as a bulk copy that overwrites it.
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(kPending));
}

// Shared-memory loads by 32-bit shared address: a hot loop keeps its addresses as offsets that
// advance by constants, instead of generic pointers the compiler re-derives every iteration.
__device__ __forceinline__ uint4 lds_128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts_128(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t addr) {
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint2 lds_64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}
// Four 8x8 matrices of 16-bit elements (rows of 16 bytes, row addresses from lanes 8i..8i+7 for
// matrix i): lane (g, t) receives 32-bit word t of row g of each matrix.
__device__ __forceinline__ uint4 ldmatrix_x4(uint32_t addr) {
  uint4 v;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// `v`, as a value the compiler cannot see how to recompute: for per-thread constants of a hot loop
// (swizzled shared offsets), which it would otherwise rebuild from the thread's indices in every
// iteration instead of keeping one register (it does so even with registers to spare).
__device__ __forceinline__ uint32_t kept_in_register(uint32_t v) {
  asm volatile("" : "+r"(v));
  return v;
}

// Named barrier over `threads` threads (ids 1..15; 0 is __syncthreads).
__device__ __forceinline__ void group_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

}  // namespace fp4ops::cuda
