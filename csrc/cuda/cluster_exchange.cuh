// The one-launch producers' exchange of the amax of y within one thread-block cluster (compute
// capability 9.0 on): each CTA's maximum goes by st.async into every CTA's shared memory, counted
// on the receiver's mbarrier, so the only cluster barrier guards the mbarriers' initialization:
// arrived at on entry (cluster_exchange_begin) and waited for once y is computed
// (cluster_finite_max), so that it overlaps the loads. None is needed after the exchange (a
// barrier.cluster round costs about as much as the rest of a small launch), and none at exit: a
// CTA's own mbarrier wait covers every store into it, so no CTA exits while another can still
// write to it. Without cluster hardware (a build for older GPUs) these trap; their launchers never
// launch them there (code_has_sm90_features).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "../common/arch.h"
#include "async_copy.cuh"

namespace fp4ops::cuda {

// The largest cluster the exchange serves (the non-portable size Hopper schedules).
constexpr int kMaxClusterCtas = 16;

// Shared memory of one CTA's side of the exchange.
struct ClusterExchange {
  alignas(8) uint64_t maxima_in;    // mbarrier: every CTA's word of `maxima` stored
  uint32_t maxima[kMaxClusterCtas];  // word r: CTA r's finite max |y|

  __device__ __forceinline__ uint32_t bar() const { return static_cast<uint32_t>(__cvta_generic_to_shared(&maxima_in)); }
};

// On entry, every thread of every CTA of the cluster: initializes the mbarrier and arrives at the
// cluster barrier that cluster_finite_max waits for.
__device__ __forceinline__ void cluster_exchange_begin(ClusterExchange& exchange) {
#if defined(FP4OPS_HW_CLUSTER)
  if (threadIdx.x == 0) {
    mbarrier_init(exchange.bar());
    fence_mbarrier_init();
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#else
  __trap();
#endif
}

// The max of every CTA's `m` (the same in all of a CTA's threads), in every thread: thread r < the
// cluster's size stores `m` into word `rank` of CTA r's array with st.async, which counts its
// bytes on CTA r's mbarrier, and each CTA reads its array once its own mbarrier has every word. A
// cluster of one CTA takes its own `m`: st.async needs a peer CTA to store to. A max does not
// depend on the order, so this is the amax every other path finds.
__device__ __forceinline__ uint32_t cluster_finite_max(uint32_t m, ClusterExchange& exchange) {
#if defined(FP4OPS_HW_CLUSTER)
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every CTA's mbarrier initialized
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const unsigned ctas = cluster.num_blocks();
  if (ctas == 1) return m;
  const uint32_t bar = exchange.bar();
  if (threadIdx.x == 0) mbarrier_arrive_expect_tx(bar, ctas * sizeof(uint32_t));
  if (threadIdx.x < ctas) {
    const uint32_t word = static_cast<uint32_t>(__cvta_generic_to_shared(&exchange.maxima[cluster.block_rank()]));
    uint32_t remote_word, remote_bar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_word) : "r"(word), "r"(threadIdx.x));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(bar), "r"(threadIdx.x));
    asm volatile("st.async.weak.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote_word),
                 "r"(m), "r"(remote_bar)
                 : "memory");
  }
  mbarrier_wait(bar, 0);
  uint32_t all = 0;
  for (unsigned r = 0; r < ctas; ++r) all = max(all, exchange.maxima[r]);
  return all;
#else
  __trap();
  return m;
#endif
}

}  // namespace fp4ops::cuda
