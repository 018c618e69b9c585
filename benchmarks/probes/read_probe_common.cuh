// Shared by the read probes (gemv_read_probe.cu, gemv_bulk_probe.cu): the plain read kernel (the
// read-bandwidth ceiling, and the L2 flush between timed calls) and cold-L2 event timing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

// Plain reads: 16 B per lane, 4 loads in flight per thread, grid-stride.
__global__ void __launch_bounds__(512) plain_read(const uint4* a, size_t n, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 v0 = __ldcg(a + i), v1 = __ldcg(a + i + stride), v2 = __ldcg(a + i + 2 * stride), v3 = __ldcg(a + i + 3 * stride);
    acc += v0.x ^ v1.y ^ v2.z ^ v3.w;
  }
  for (; i < n; i += stride) acc += __ldcg(a + i).x;
  if (acc == 0x12345678u) *sink = acc;
}

static unsigned* g_sink;  // where the kernels write if their checksum hits a magic value (never)
static int g_sms;

// Mean of 20 cold-L2 calls (CUDA events), each after a 256 MB read that leaves the L2 clean.
template <typename F>
float time_ms(F launch, const uint8_t* flush, size_t flush_bytes) {
  cudaEvent_t s, e;
  cudaEventCreate(&s), cudaEventCreate(&e);
  float total = 0;
  const int reps = 20;
  for (int r = 0; r < reps + 2; ++r) {
    plain_read<<<g_sms * 4, 512>>>(reinterpret_cast<const uint4*>(flush), flush_bytes / 16, g_sink);
    cudaEventRecord(s), launch(), cudaEventRecord(e), cudaEventSynchronize(e);
    float ms;
    cudaEventElapsedTime(&ms, s, e);
    if (r >= 2) total += ms;
  }
  cudaEventDestroy(s), cudaEventDestroy(e);
  return total / reps;
}
