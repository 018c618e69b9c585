// Does Hopper's warpgroup MMA (wgmma, A in registers, B in shared memory) add a column's products
// exactly as mma.sync m16n8k16 does? The linear kernel family's batch invariance needs that before
// one row count may take wgmma and another mma.sync. Each CTA (one warpgroup) multiplies random
// 64 x 128 A by 128 x 64 B (8 k-steps of 16) onto a random accumulator four ways: mma.sync per
// 8-column tile, and wgmma with n = 64, 32 and 8; then the host compares every output bit for bit
// and counts how often the tensor cores' result differs from the fp64 sum rounded once (so that
// "identical" is not the trivial case of exact sums). Inputs: bf16 and fp16, wide-range normals
// and NVFP4-like operands (E2M1 values times a scale against normal x).
// Build and run on an sm_90 GPU, from benchmarks/probes/:
//   nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a wgmma_bits_probe.cu -o wgmma_bits && ./wgmma_bits
// Result: docs/notebook/performance-log.md ("Linear on the warpgroup MMA").
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

constexpr int kSteps = 8, kK = 16 * kSteps, kN = 64;
struct bf16_tag {};
struct f16_tag {};

// The no-swizzle shared-memory descriptor: address, leading (k half to k half) and stride (8 rows
// to the next 8) byte offsets, all in 16-byte units.
__device__ uint64_t descriptor(uint32_t address, uint32_t leading, uint32_t stride) {
  return (address >> 4 & 0x3FFFu) | static_cast<uint64_t>(leading >> 4 & 0x3FFFu) << 16 |
         static_cast<uint64_t>(stride >> 4 & 0x3FFFu) << 32;
}

__device__ void mma_sync(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bf16_tag) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ void mma_sync(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, f16_tag) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ void wgmma_n8(float (&d)[4], const uint32_t (&a)[4], uint64_t b, bf16_tag) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
__device__ void wgmma_n8(float (&d)[4], const uint32_t (&a)[4], uint64_t b, f16_tag) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
__device__ void wgmma_n32(float (&d)[16], const uint32_t (&a)[4], uint64_t b, bf16_tag) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
__device__ void wgmma_n32(float (&d)[16], const uint32_t (&a)[4], uint64_t b, f16_tag) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
__device__ void wgmma_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b, bf16_tag) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
__device__ void wgmma_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b, f16_tag) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// Lane (g, t) of warp w holds rows 16w + g and 16w + g + 8 of A and D, as m16n8k16 lays them out.
struct Lane {
  int r0, r1, g, t;
};

__device__ void load_d(float* d, int columns, const float* c, Lane l) {
  for (int j = 0; j < columns / 8; ++j) {
    d[4 * j + 0] = c[l.r0 * kN + 8 * j + 2 * l.t], d[4 * j + 1] = c[l.r0 * kN + 8 * j + 2 * l.t + 1];
    d[4 * j + 2] = c[l.r1 * kN + 8 * j + 2 * l.t], d[4 * j + 3] = c[l.r1 * kN + 8 * j + 2 * l.t + 1];
  }
}
__device__ void store_d(const float* d, int columns, float* out, Lane l) {
  for (int j = 0; j < columns / 8; ++j) {
    out[l.r0 * kN + 8 * j + 2 * l.t] = d[4 * j + 0], out[l.r0 * kN + 8 * j + 2 * l.t + 1] = d[4 * j + 1];
    out[l.r1 * kN + 8 * j + 2 * l.t] = d[4 * j + 2], out[l.r1 * kN + 8 * j + 2 * l.t + 1] = d[4 * j + 3];
  }
}

template <int kColumns, class Tag>
__device__ void run_wgmma(const uint32_t (&a)[kSteps][4], uint32_t b_smem, const float* c, float* out, Lane l) {
  float d[kColumns / 2];
  load_d(d, kColumns, c, l);
  constexpr uint32_t kHalf = (kN / 8) * 128;  // the core matrices of one k half of every column
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  for (int s = 0; s < kSteps; ++s) {
    const uint64_t b = descriptor(b_smem + s * 2 * kHalf, kHalf, 128);
    if constexpr (kColumns == 64) wgmma_n64(d, a[s], b, Tag{});
    if constexpr (kColumns == 32) wgmma_n32(d, a[s], b, Tag{});
    if constexpr (kColumns == 8) wgmma_n8(d, a[s], b, Tag{});
  }
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  store_d(d, kColumns, out, l);
}

// a: [cta][64][kK], b: [cta][kN][kK] (16-bit), c: [cta][64][kN]; out: 4 planes of [cta][64][kN]:
// mma.sync, wgmma n64, n32, n8 (columns past n untouched).
template <class Tag>
__global__ void probe(const uint16_t* a_all, const uint16_t* b_all, const float* c_all, float* out) {
  __shared__ __align__(128) uint16_t b_smem[kSteps * 2 * (kN / 8) * 64];
  const size_t cta = blockIdx.x, plane = static_cast<size_t>(gridDim.x) * 64 * kN;
  const uint16_t* a_in = a_all + cta * 64 * kK;
  const uint16_t* b_in = b_all + cta * kN * kK;
  const float* c = c_all + cta * 64 * kN;
  // B as core matrices: (step s, k half h, columns 8jj..8jj+7) holds rows n of k 16s + 8h .. + 7.
  for (int q = threadIdx.x; q < kSteps * 2 * (kN / 8) * 8; q += blockDim.x) {
    const int r = q % 8, jj = q / 8 % (kN / 8), h = q / 8 / (kN / 8) % 2, s = q / 8 / (kN / 8) / 2;
    const uint4 v = *reinterpret_cast<const uint4*>(b_in + (8 * jj + r) * kK + 16 * s + 8 * h);
    *reinterpret_cast<uint4*>(b_smem + ((s * 2 + h) * (kN / 8) + jj) * 64 + r * 8) = v;
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const Lane l{16 * w + lane / 4, 16 * w + lane / 4 + 8, lane / 4, lane % 4};
  const uint32_t* a32 = reinterpret_cast<const uint32_t*>(a_in);
  uint32_t a[kSteps][4];
  for (int s = 0; s < kSteps; ++s) {
    a[s][0] = a32[(l.r0 * kK + 16 * s + 2 * l.t) / 2], a[s][1] = a32[(l.r1 * kK + 16 * s + 2 * l.t) / 2];
    a[s][2] = a32[(l.r0 * kK + 16 * s + 2 * l.t + 8) / 2], a[s][3] = a32[(l.r1 * kK + 16 * s + 2 * l.t + 8) / 2];
  }
  {
    float d[kN / 2];
    load_d(d, kN, c, l);
    const uint32_t* b32 = reinterpret_cast<const uint32_t*>(b_in);
    for (int s = 0; s < kSteps; ++s) {
      for (int j = 0; j < kN / 8; ++j) {
        const int row = (8 * j + l.g) * kK + 16 * s + 2 * l.t;
        mma_sync(reinterpret_cast<float(&)[4]>(d[4 * j]), a[s], b32[row / 2], b32[(row + 8) / 2], Tag{});
      }
    }
    store_d(d, kN, out + cta * 64 * kN, l);
  }
  const uint32_t b_address = static_cast<uint32_t>(__cvta_generic_to_shared(b_smem));
  run_wgmma<64, Tag>(a, b_address, c, out + plane + cta * 64 * kN, l);
  run_wgmma<32, Tag>(a, b_address, c, out + 2 * plane + cta * 64 * kN, l);
  run_wgmma<8, Tag>(a, b_address, c, out + 3 * plane + cta * 64 * kN, l);
}

template <class Tag>
uint16_t to_16bit(float f) {
  uint16_t u;
  if constexpr (std::is_same_v<Tag, bf16_tag>) {
    const __nv_bfloat16 h = __float2bfloat16_rn(f);
    std::memcpy(&u, &h, 2);
  } else {
    const __half h = __float2half_rn(f);
    std::memcpy(&u, &h, 2);
  }
  return u;
}
template <class Tag>
double from_16bit(uint16_t u) {
  if constexpr (std::is_same_v<Tag, bf16_tag>) {
    const uint32_t bits = static_cast<uint32_t>(u) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  } else {
    __half h;
    std::memcpy(&h, &u, 2);
    return __half2float(h);
  }
}

// Returns whether any wgmma output differs from mma.sync's.
template <class Tag>
bool compare(bool nvfp4_like, int ctas, std::mt19937& rng) {
  std::vector<uint16_t> a(static_cast<size_t>(ctas) * 64 * kK), b(static_cast<size_t>(ctas) * kN * kK);
  std::vector<float> c(static_cast<size_t>(ctas) * 64 * kN);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12), code(0, 15), coin(0, 1);
  const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (auto& v : a) {
    const int q = code(rng);
    const float scale = std::ldexp(1.0f + 0.125f * static_cast<float>(rng() % 8), exponent(rng) / 3);
    v = to_16bit<Tag>(nvfp4_like ? (q & 8 ? -1.0f : 1.0f) * e2m1[q & 7] * scale : normal(rng) * std::ldexp(1.0f, exponent(rng)));
  }
  for (auto& v : b) v = to_16bit<Tag>(nvfp4_like ? normal(rng) : normal(rng) * std::ldexp(1.0f, exponent(rng)));
  for (auto& v : c) v = coin(rng) ? 0.0f : normal(rng) * std::ldexp(1.0f, exponent(rng));
  uint16_t *a_dev, *b_dev;
  float *c_dev, *out_dev;
  cudaMalloc(&a_dev, a.size() * 2), cudaMalloc(&b_dev, b.size() * 2);
  cudaMalloc(&c_dev, c.size() * 4), cudaMalloc(&out_dev, c.size() * 4 * 4);
  cudaMemcpy(a_dev, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(b_dev, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(c_dev, c.data(), c.size() * 4, cudaMemcpyHostToDevice);
  probe<Tag><<<ctas, 128>>>(a_dev, b_dev, c_dev, out_dev);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("kernel failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    return true;
  }
  std::vector<float> out(c.size() * 4);
  cudaMemcpy(out.data(), out_dev, out.size() * 4, cudaMemcpyDeviceToHost);
  cudaFree(a_dev), cudaFree(b_dev), cudaFree(c_dev), cudaFree(out_dev);
  const size_t plane = c.size();
  const int widths[4] = {kN, 64, 32, 8};
  size_t differ[4] = {}, compared[4] = {}, inexact = 0, checked = 0;
  for (size_t i = 0; i < plane; ++i) {
    for (int p = 1; p < 4; ++p) {
      if (static_cast<int>(i % kN) >= widths[p]) continue;
      ++compared[p];
      differ[p] += std::memcmp(&out[i], &out[p * plane + i], 4) != 0;
    }
  }
  for (int cta = 0; cta < 4; ++cta) {  // the mma.sync result against the fp64 sum, rounded once
    for (int r = 0; r < 64; ++r) {
      for (int n = 0; n < kN; ++n, ++checked) {
        double sum = c[(static_cast<size_t>(cta) * 64 + r) * kN + n];
        for (int k = 0; k < kK; ++k) {
          sum += from_16bit<Tag>(a[(static_cast<size_t>(cta) * 64 + r) * kK + k]) * from_16bit<Tag>(b[(static_cast<size_t>(cta) * kN + n) * kK + k]);
        }
        inexact += static_cast<float>(sum) != out[(static_cast<size_t>(cta) * 64 + r) * kN + n];
      }
    }
  }
  std::printf("%s %s: outputs unlike mma.sync's: wgmma n64 %zu of %zu, n32 %zu of %zu, n8 %zu of %zu; "
              "mma.sync unlike the fp64 sum rounded once: %zu of %zu\n",
              std::is_same_v<Tag, bf16_tag> ? "bf16" : "fp16", nvfp4_like ? "NVFP4-like" : "wide normals", differ[1],
              compared[1], differ[2], compared[2], differ[3], compared[3], inexact, checked);
  return differ[1] + differ[2] + differ[3] != 0;
}

int main() {
  std::mt19937 rng(std::random_device{}());
  bool any = false;
  for (const bool nvfp4_like : {false, true}) {
    any |= compare<bf16_tag>(nvfp4_like, 512, rng);
    any |= compare<f16_tag>(nvfp4_like, 512, rng);
  }
  std::printf(any ? "wgmma and mma.sync DIFFER\n" : "wgmma and mma.sync give the same bits\n");
  return any ? 1 : 0;
}
