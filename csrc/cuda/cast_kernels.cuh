// Elementwise E2M1 casts with no scaling (SPEC 1): raw pointers, no torch headers.
#pragma once

#include <cstdint>

#include "../common/fp4_format.h"
#include "element_types.cuh"

namespace fp4ops::cuda {

// in [numel] -> out [numel / 2] packed. kVectorized: 8 elements (16 or 32 bytes, 16-byte
// aligned) in, one 4-byte word out per step; otherwise one byte per step, any alignment.
template <typename T, bool kVectorized>
__global__ void cast_to_e2m1_kernel(const T* __restrict__ in, uint8_t* __restrict__ out, int64_t numel) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t tail_begin = 0;
  if constexpr (kVectorized) {
    const int64_t num_vectors = numel / 8;
    for (int64_t i = first; i < num_vectors; i += stride) {
      float v[8];
      widen8<T>(load_vec8_streaming(in + i * 8), v);
      uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) word |= e2m1x2_encode(v[2 * j], v[2 * j + 1]) << (8 * j);
      reinterpret_cast<uint32_t*>(out)[i] = word;
    }
    tail_begin = num_vectors * 4;
  }
  for (int64_t i = tail_begin + first; i < numel / 2; i += stride) {
    out[i] = static_cast<uint8_t>(e2m1x2_encode(to_float(in[2 * i]), to_float(in[2 * i + 1])));
  }
}

// in [num_bytes] packed -> out [2 * num_bytes]. kVectorized: 4 bytes in (4-byte aligned), 8
// elements out as 16-byte vectors (16-byte aligned output); otherwise one byte per step.
template <typename T, bool kVectorized>
__global__ void cast_from_e2m1_kernel(const uint8_t* __restrict__ in, T* __restrict__ out, int64_t num_bytes) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t tail_begin = 0;
  if constexpr (kVectorized) {
    const int64_t num_words = num_bytes / 4;
    for (int64_t i = first; i < num_words; i += stride) {
      const uint32_t word = __ldcs(reinterpret_cast<const unsigned int*>(in) + i);
      Vec8<T> y;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const Float2 pair = e2m1x2_decode((word >> (8 * j)) & 0xFFu);
        y.v[2 * j] = from_float<T>(pair.even);
        y.v[2 * j + 1] = from_float<T>(pair.odd);
      }
      store_vec8(out + i * 8, y);
    }
    tail_begin = num_words * 4;
  }
  for (int64_t i = tail_begin + first; i < num_bytes; i += stride) {
    const Float2 pair = e2m1x2_decode(in[i]);
    out[2 * i] = from_float<T>(pair.even);
    out[2 * i + 1] = from_float<T>(pair.odd);
  }
}

}  // namespace fp4ops::cuda
