// What does one linear-kernel step's MMA work cost a Hopper SM with each instruction kind, with no
// decode and no memory traffic around it? A step is one warpgroup's: 64 weight rows (4 warps x 16)
// times 128 of K times n = 16, 32 or 64 rows of x, as in csrc/cuda/linear_mma.cuh:
//   mma.sync  each warp 8 kNt m16n8k16, A and B in registers (linear_compute_step's MMAs; its B loads
//             from shared memory left out);
//   RS        wgmma: 8 m64nNk16 with A in registers and B in shared memory, then a wait for them
//             (the prototype of docs/notebook/performance-log.md, "Linear on the warpgroup MMA");
//   RS2       the same, waiting only for the step before, with two A fragment sets kept live;
//   SS        wgmma with A and B in shared memory (the decoded weight stored there), waiting at the
//             end of each step.
// Every SM holds 2 CTAs of 2 warpgroups (RS2, with twice the fragment registers, may fit only one:
// the table says); A changes every step (one XOR per fragment register, in every mode), as a
// decode hands over fresh fragments. Reported: SM cycles per warpgroup step (a warp's clock64 over
// its loop / steps / warpgroups resident per SM), to hold against the cycles an SM may spend on a
// warpgroup step (4 KB of FP4 weight) at copy rate: decode, MMAs and copies together.
// Build and run on an sm_90 GPU, from benchmarks/probes/:
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a mma_rate_probe.cu -o mma_rate && ./mma_rate
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

constexpr int kSteps = 4096;
enum Mode { kMmaSync, kRs, kRs2, kSs };
const char* const kModeNames[] = {"mma.sync", "wgmma RS", "wgmma RS2", "wgmma SS"};

__device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t leading, uint32_t stride) {
  return (address >> 4 & 0x3FFFu) | static_cast<uint64_t>(leading >> 4 & 0x3FFFu) << 16 |
         static_cast<uint64_t>(stride >> 4 & 0x3FFFu) << 32;
}
__device__ __forceinline__ void mma_sync(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory"); }

template <int kNt>
__device__ void wgmma_rs(float (&d)[kNt][4], const uint32_t (&a)[4], uint64_t b);
template <>
__device__ __forceinline__ void wgmma_rs<2>(float (&d)[2][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_rs<4>(float (&d)[4][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_rs<8>(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

template <int kNt>
__device__ void wgmma_ss(float (&d)[kNt][4], uint64_t a, uint64_t b);
template <>
__device__ __forceinline__ void wgmma_ss<2>(float (&d)[2][4], uint64_t a, uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
               : "l"(a), "l"(b), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_ss<4>(float (&d)[4][4], uint64_t a, uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
               : "l"(a), "l"(b), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_ss<8>(float (&d)[8][4], uint64_t a, uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
               : "l"(a), "l"(b), "r"(1));
}

// A step's fragments: [k16][4 registers] (unit u, half hm at 2u + hm), each changed by the step.
__device__ __forceinline__ void touch(uint32_t (&a)[8][4], int step) {
  const uint32_t flip = step & 1 ? 0x00010001u : 0u;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
#pragma unroll
    for (int r = 0; r < 4; ++r) a[k][r] ^= flip;
  }
}

template <int kMode, int kNt>
__global__ void __launch_bounds__(256, kMode == kRs2 ? 1 : 2) rate_kernel(float* sink, long long* cycles) {
  // x: [k16 s][k half h][8 columns jj] core matrices of 128 bytes; A (SS): per warpgroup, [s][h][8 rows rr].
  __shared__ __align__(128) uint16_t x_smem[8 * 2 * 8 * 64];
  __shared__ __align__(128) uint16_t a_smem[2][8 * 2 * 8 * 64];
  for (int i = threadIdx.x; i < 8 * 2 * 8 * 64; i += blockDim.x) {
    x_smem[i] = 0x3F80 ^ (i & 7);
    a_smem[0][i] = a_smem[1][i] = 0x3F80 ^ (i & 3);
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = warp / 4;
  uint32_t a[8][4], a_next[8][4];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
#pragma unroll
    for (int r = 0; r < 4; ++r) a[k][r] = a_next[k][r] = 0x3F803F80u ^ (lane + k + r);
  }
  float d[kNt][4] = {};
  const uint32_t x_base = static_cast<uint32_t>(__cvta_generic_to_shared(x_smem));
  const uint32_t a_base = static_cast<uint32_t>(__cvta_generic_to_shared(a_smem[group]));
  const long long start = clock64();
  for (int step = 0; step < kSteps; ++step) {
    if constexpr (kMode == kMmaSync) {
      touch(a, step);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
#pragma unroll
        for (int j = 0; j < kNt; ++j) mma_sync(d[j], a[k], a[k][j & 3], a[k][(j + 1) & 3]);
      }
    } else if constexpr (kMode == kRs) {
      touch(a, step);
      fence();
#pragma unroll
      for (int k = 0; k < 8; ++k) wgmma_rs<kNt>(d, a[k], descriptor(x_base + k * 2 * 1024, 1024, 128));
      commit();
      wait<0>();
    } else if constexpr (kMode == kRs2) {  // two steps a turn, one fragment set each
      touch(a, step);
      fence();
#pragma unroll
      for (int k = 0; k < 8; ++k) wgmma_rs<kNt>(d, a[k], descriptor(x_base + k * 2 * 1024, 1024, 128));
      commit();
      wait<1>();
      touch(a_next, ++step);
      fence();
#pragma unroll
      for (int k = 0; k < 8; ++k) wgmma_rs<kNt>(d, a_next[k], descriptor(x_base + k * 2 * 1024, 1024, 128));
      commit();
      wait<1>();
    } else {
      touch(a, step);  // the same ALU work as the other modes
      fence();
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        wgmma_ss<kNt>(d, descriptor(a_base + k * 2 * 1024, 1024, 128), descriptor(x_base + k * 2 * 1024, 1024, 128));
      }
      commit();
      wait<0>();
    }
  }
  wait<0>();
  const long long stop = clock64();
  float sum = a[0][0] + a_next[0][0];
#pragma unroll
  for (int j = 0; j < kNt; ++j) sum += d[j][0] + d[j][1] + d[j][2] + d[j][3];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
  if (threadIdx.x == 0) cycles[blockIdx.x] = stop - start;
}

template <int kMode, int kNt>
void run(int ctas, float* sink, long long* cycles) {
  int fit = 0;  // CTAs an SM can hold; 2 are launched per SM
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, rate_kernel<kMode, kNt>, 256, 0);
  const int per_sm = fit < 2 ? fit : 2;
  rate_kernel<kMode, kNt><<<ctas, 256>>>(sink, cycles);  // warm-up
  rate_kernel<kMode, kNt><<<ctas, 256>>>(sink, cycles);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("%s n=%d: %s\n", kModeNames[kMode], 8 * kNt, cudaGetErrorString(cudaGetLastError()));
    return;
  }
  long long host[2048], total = 0;
  cudaMemcpy(host, cycles, ctas * sizeof(long long), cudaMemcpyDeviceToHost);
  for (int i = 0; i < ctas; ++i) total += host[i];
  const double per_step = static_cast<double>(total) / ctas / kSteps;
  std::printf("| %s | %d | %d | %.0f | %.0f |\n", kModeNames[kMode], 8 * kNt, per_sm, per_step, per_step / (2 * per_sm));
}

template <int kNt>
void run_all(int ctas, float* sink, long long* cycles) {
  run<kMmaSync, kNt>(ctas, sink, cycles);
  run<kRs, kNt>(ctas, sink, cycles);
  run<kRs2, kNt>(ctas, sink, cycles);
  run<kSs, kNt>(ctas, sink, cycles);
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int ctas = 2 * prop.multiProcessorCount;
  float* sink;
  long long* cycles;
  cudaMalloc(&sink, ctas * 256 * sizeof(float));
  cudaMalloc(&cycles, ctas * sizeof(long long));
  std::printf("%s, %d SMs, CTAs of 2 warpgroups, 2 per SM launched\n\n"
              "| MMA kind | n | CTAs resident per SM | warp cycles per step | SM cycles per warpgroup step |\n|---|---|---|---|---|\n",
              prop.name, prop.multiProcessorCount);
  run_all<2>(ctas, sink, cycles);
  run_all<4>(ctas, sink, cycles);
  run_all<8>(ctas, sink, cycles);
  return 0;
}
