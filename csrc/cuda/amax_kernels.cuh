// Per-tensor amax (SPEC 2.1): max |x| over the finite elements, raw pointers, no torch headers.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../common/fp4_format.h"
#include "element_types.cuh"
#include "grid_dependency.cuh"

namespace fp4ops::cuda {

// Finite max of a block's share, reduced over the whole thread block; every thread gets it.
// `scratch` holds one word per warp.
__device__ __forceinline__ uint32_t block_reduce_max(uint32_t m, uint32_t* scratch) {
  m = __reduce_max_sync(0xFFFFFFFFu, m);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = m;
  __syncthreads();
  m = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : 0u;
  m = __reduce_max_sync(0xFFFFFFFFu, m);
  __syncthreads();  // scratch may be reused right after
  return m;
}

// The finite max |x| of 16-bit x kept on the loaded words, two lanes per instruction. Each lane
// holds |x| + 1 ulp (its magnitude bits plus one, no carry between lanes): an Inf becomes a NaN
// and the largest finite value Inf, every finite value keeps its order, and NaN stays NaN (0x7FFF
// becomes 0x8000, -0). max without .NaN returns the operand that is not NaN, so the running max
// is the finite max plus one ulp. It starts at 0x0001 per lane (zero plus one ulp), above -0.
// Three instructions per pair (LOP3, IADD3, HMNMX2) instead of widening both elements and
// finite_abs on each.
template <typename T>
struct FiniteMax16 {
  static_assert(sizeof(T) == 2, "two elements per 32-bit word");
  uint32_t lanes = 0x00010001u;

  __device__ __forceinline__ void add(const Vec8<T>& raw) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(&raw);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t shifted = (words[j] & 0x7FFF7FFFu) + 0x00010001u;
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        asm("max.bf16x2 %0, %1, %2;" : "=r"(lanes) : "r"(lanes), "r"(shifted));
      } else {
        asm("max.f16x2 %0, %1, %2;" : "=r"(lanes) : "r"(lanes), "r"(shifted));
      }
    }
  }

  // The finite max as fp32 bits (0 where every element was NaN or Inf). Neither lane is NaN, so
  // they compare as integers.
  __device__ __forceinline__ uint32_t bits() const {
    const uint16_t top = static_cast<uint16_t>(max(lanes & 0xFFFFu, lanes >> 16) - 1u);
    T value;
    memcpy(&value, &top, sizeof(top));
    return __float_as_uint(to_float(value));
  }
};

// Finite max of x[0, numel) from this thread's grid-stride share (fp32 bits). For 16-bit x two
// groups of eight a step, `stride` apart, both loads issued before either is reduced, on the
// loaded words (FiniteMax16): the loop then streams at a plain read's rate. fp32 x keeps one
// group a step. Both loop shapes were chosen by measurement (docs/performance.md, "amax: loop
// shape and output zeroing").
template <typename T, bool kAligned>
__device__ __forceinline__ uint32_t thread_finite_max_bits(const T* __restrict__ x, int64_t numel, int64_t first,
                                                           int64_t stride) {
  uint32_t m = 0;
  const int64_t num_groups = numel / 8;
  if constexpr (sizeof(T) == 2) {
    FiniteMax16<T> lanes;
    int64_t g = first;
    for (; g + stride < num_groups; g += 2 * stride) {
      const Vec8<T> a = load_vec8<T, kAligned>(x, g), b = load_vec8<T, kAligned>(x, g + stride);
      lanes.add(a);
      lanes.add(b);
    }
    if (g < num_groups) lanes.add(load_vec8<T, kAligned>(x, g));
    m = lanes.bits();
  } else {
    for (int64_t g = first; g < num_groups; g += stride) {
      float v[8];
      load_group8<T, kAligned>(x, g, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) m = max(m, __float_as_uint(finite_abs(v[j])));
    }
  }
  for (int64_t i = num_groups * 8 + first; i < numel; i += stride) m = max(m, __float_as_uint(finite_abs(to_float(x[i]))));
  return m;
}

// Zeroes words[0, count) for a kernel launched behind it as its programmatic dependent
// (launch_dependent, launch_utils.h): that kernel's blocks start reading their input while this
// runs and wait for it (wait_for_primary_grid) only before their atomics, where behind a memset or
// a fill kernel they would start after it. That takes the zeroing off the critical path of small
// calls replayed in a graph (chosen by measurement: docs/performance.md, "amax: loop shape and
// output zeroing"). One thread; static: each translation unit that launches it has its own copy.
static __global__ void zero_words_kernel(uint32_t* __restrict__ words, int count) {
  let_dependents_launch();
  for (int i = 0; i < count; ++i) words[i] = 0;
}

// out_bits holds 0 when the launch completes (zero_words_kernel as the primary grid, or set
// before an ordinary launch); each block adds its max with one atomicMax.
template <typename T, bool kAligned>
__global__ void amax_kernel(const T* __restrict__ x, int64_t numel, uint32_t* __restrict__ out_bits) {
  __shared__ uint32_t scratch[32];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const uint32_t m = block_reduce_max(thread_finite_max_bits<T, kAligned>(x, numel, first, stride), scratch);
  wait_for_primary_grid();
  if (threadIdx.x == 0 && m != 0) atomicMax(out_bits, m);
}

// amax of an input one thread block reads in one or two steps (quantize.cu's bound): the block's
// max is the amax, written by thread 0, so one launch does the whole op, with no word to zero and
// no atomic (a decode step's activations). A programmatic dependent of the kernel before it
// (launch_dependent), which may write x: it waits before reading.
template <typename T, bool kAligned>
__global__ void amax_single_block_kernel(const T* __restrict__ x, int64_t numel, float* __restrict__ out) {
  let_dependents_launch();
  wait_for_primary_grid();
  __shared__ uint32_t scratch[32];
  const uint32_t m = block_reduce_max(thread_finite_max_bits<T, kAligned>(x, numel, threadIdx.x, blockDim.x), scratch);
  if (threadIdx.x == 0) *out = __uint_as_float(m);
}

}  // namespace fp4ops::cuda
