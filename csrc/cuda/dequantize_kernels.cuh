// NVFP4 / MXFP4 dequantize kernel (SPEC 2.6, 3): raw pointers, no torch headers.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/block_formats.h"
#include "../common/scale_layout.h"
#include "element_types.cuh"

namespace fp4ops::cuda {

// What a dequantize kernel needs to decode a block scale code: the format, whose decode_scale
// (block_formats.h) the CPU kernel shares. NVFP4's global scale g stays on the device (no host
// sync); each thread reads it once.
struct Nvfp4Decoding {
  using Format = Nvfp4Format;
  const float* global_scale;  // fp32, one element

  __device__ __forceinline__ Nvfp4Format format() const { return {*global_scale}; }
};

struct Mxfp4Decoding {
  using Format = Mxfp4Format;

  // The scale rule only matters to encoding; an E8M0 code decodes the same under either.
  __device__ __forceinline__ Mxfp4Format format() const { return {Mxfp4ScaleRule::kFloor}; }
};

// out = E2M1(code) * decoded block scale, one rounding to OutT. Each unit writes one 16-byte
// vector (8 outputs from 4 code bytes for bf16/fp16, 4 outputs from 2 code bytes for fp32);
// kDecodeUnitsPerStep units per thread and step, their code and scale loads first
// (for_units_loads_first). kAligned: the code bytes can be read as one word (out is freshly
// allocated, hence 16-byte aligned).
template <typename OutT, bool kAligned, class Decoding, class ScaleIndex>
__global__ void dequantize_kernel(const uint8_t* __restrict__ data,    // [num_units * kPerUnit / 2]
                                  const uint8_t* __restrict__ scales,  // block b at scale_index.offset(b)
                                  int64_t num_units, Decoding decoding, ScaleIndex scale_index, OutT* __restrict__ out) {
  constexpr int kBytes = kCodeBytesPerUnit<OutT>;
  constexpr int kPerUnit = 2 * kBytes;  // outputs per 16-byte store
  using CodeWord = std::conditional_t<kBytes == 4, uint32_t, uint16_t>;
  struct Loaded {
    uint32_t codes, scale_code;
  };
  const typename Decoding::Format format = decoding.format();
  const auto load = [&](int64_t u) {
    Loaded loaded{0u, scales[scale_index.offset(u * kPerUnit / Decoding::Format::kBlock)]};
    if constexpr (kAligned) {
      loaded.codes = reinterpret_cast<const CodeWord*>(data)[u];
    } else {
#pragma unroll
      for (int b = 0; b < kBytes; ++b) loaded.codes |= static_cast<uint32_t>(data[u * kBytes + b]) << (8 * b);
    }
    return loaded;
  };
  const auto finish = [&](int64_t u, const Loaded& loaded) {
    store_decoded_unit<OutT, /*kScaled=*/true>(out + u * kPerUnit, loaded.codes, format.decode_scale(loaded.scale_code));
  };
  for_units_loads_first<kDecodeUnitsPerStep>(num_units, load, finish);
}

}  // namespace fp4ops::cuda
