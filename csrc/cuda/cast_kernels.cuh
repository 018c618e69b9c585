// Elementwise E2M1 casts with no scaling (SPEC 1): raw pointers, no torch headers.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/fp4_format.h"
#include "element_types.cuh"

namespace fp4ops::cuda {

// Eight elements as stored into one word of codes, element i in nibble i (SPEC 1, NaN included).
// bf16 and fp16 without FP4 instructions are encoded in their own format (e2m1x8_encode_16bit:
// no widening, no round-to-odd step); fp32, and Blackwell's hardware cvt, take the fp32 pairs.
template <typename T>
__device__ __forceinline__ uint32_t e2m1x8_encode_group(const Vec8<T>& raw) {
#if defined(__CUDA_ARCH__) && !defined(FP4OPS_HW_FP4)
  if constexpr (sizeof(T) == 2) {
    return e2m1x8_encode_16bit<T>(*reinterpret_cast<const uint32_t(*)[4]>(&raw));
  }
#endif
  float v[8];
  widen8<T>(raw, v);
  uint32_t word = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) word |= e2m1x2_encode(v[2 * j], v[2 * j + 1]) << (8 * j);
  return word;
}

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
      reinterpret_cast<uint32_t*>(out)[i] = e2m1x8_encode_group(load_vec8_streaming(in + i * 8));
    }
    tail_begin = num_vectors * 4;
  }
  for (int64_t i = tail_begin + first; i < numel / 2; i += stride) {
    out[i] = static_cast<uint8_t>(e2m1x2_encode(to_float(in[2 * i]), to_float(in[2 * i + 1])));
  }
}

// in [num_bytes] packed -> out [2 * num_bytes]. kVectorized: units of one 16-byte store
// (kCodeBytesPerUnit<T> code bytes each; input aligned to those bytes, output to 16),
// kDecodeUnitsPerStep per thread and step with their loads first, as in dequantize_kernel; the
// bytes past the last whole unit, and every byte otherwise, one per step.
template <typename T, bool kVectorized>
__global__ void cast_from_e2m1_kernel(const uint8_t* __restrict__ in, T* __restrict__ out, int64_t num_bytes) {
  int64_t tail_begin = 0;
  if constexpr (kVectorized) {
    constexpr int kBytes = kCodeBytesPerUnit<T>;
    using CodeWord = std::conditional_t<kBytes == 4, uint32_t, uint16_t>;
    const int64_t num_units = num_bytes / kBytes;
    const auto load = [&](int64_t u) { return static_cast<uint32_t>(reinterpret_cast<const CodeWord*>(in)[u]); };
    const auto finish = [&](int64_t u, uint32_t word) {
      store_decoded_unit<T, /*kScaled=*/false>(out + u * 2 * kBytes, word, 1.0f);
    };
    for_units_loads_first<kDecodeUnitsPerStep>(num_units, load, finish);
    tail_begin = num_units * kBytes;
  }
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = tail_begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < num_bytes; i += stride) {
    const Float2 pair = e2m1x2_decode(in[i]);
    out[2 * i] = from_float<T>(pair.even);
    out[2 * i + 1] = from_float<T>(pair.odd);
  }
}

}  // namespace fp4ops::cuda
