#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "../common/block_formats.h"
#include "../common/op_checks.h"
#include "kernels_cpu.h"

namespace fp4ops::cpu {

namespace {

// What every row of one GEMV shares.
struct GemvShape {
  int64_t rows;   // L * M
  int64_t m;      // rows per batch index
  int64_t k;      // reduction length
  int64_t block;  // 16 (NVFP4) or 32 (MXFP4)
  bool nvfp4;
};

inline float block_scale(uint8_t code, bool nvfp4) { return nvfp4 ? e4m3_decode(code) : e8m0_decode(code); }

inline float e2m1_at(const uint8_t* packed, int64_t k) { return e2m1_decode((packed[k / 2] >> (4 * (k % 2))) & 0xF); }

// SPEC 5 in fp32: per block, the exact-product partial sum times the block scales; blocks summed
// in order; the NVFP4 global scales once per row; one rounding to the output dtype. A NaN scale or
// input propagates to the row. b_scales == nullptr means B is dense (b_t), else packed E2M1.
template <typename b_t, typename out_t>
void gemv_rows(const GemvShape& s,
               const uint8_t* a_data,    // [rows, K/2]
               const uint8_t* a_scales,  // [rows, K/block]
               const b_t* b,             // [L, K] dense, or uint8 [L, K/2] packed
               const uint8_t* b_scales,  // [L, K/block] or nullptr
               float global_a, float global_b,  // NVFP4 global scales (1 otherwise), applied per row
               out_t* out) {                    // [rows]
  const int64_t num_blocks = s.k / s.block;
  at::parallel_for(0, s.rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t l = row / s.m;
      const uint8_t* a = a_data + row * (s.k / 2);
      float acc = 0.0f;
      for (int64_t j = 0; j < num_blocks; ++j) {
        float partial = 0.0f;
        for (int64_t i = j * s.block; i < (j + 1) * s.block; ++i) {
          float b_value;
          if (b_scales == nullptr) {
            b_value = static_cast<float>(b[l * s.k + i]);
          } else {
            b_value = e2m1_at(reinterpret_cast<const uint8_t*>(b) + l * (s.k / 2), i);
          }
          partial += e2m1_at(a, i) * b_value;
        }
        const uint8_t sa = a_scales[row * num_blocks + j];
        float scaled;
        if (b_scales != nullptr && !s.nvfp4) {
          scaled = scale_by_e8m0_pair(partial, sa, b_scales[l * num_blocks + j], 0);  // no overflow on the way
        } else {
          scaled = partial * block_scale(sa, s.nvfp4);
          if (b_scales != nullptr) scaled *= block_scale(b_scales[l * num_blocks + j], s.nvfp4);
        }
        acc += scaled;
      }
      out[row] = static_cast<out_t>(acc * global_a * global_b);  // one at a time: no early overflow
    }
  });
}

float global_or_one(const std::optional<at::Tensor>& g) { return g.has_value() ? g->item<float>() : 1.0f; }

template <typename b_t>
at::Tensor run_gemv(const at::Tensor& a_data, const at::Tensor& a_scales, float global_a, float global_b,
                    const at::Tensor& b,
                    const at::Tensor* b_scales, at::ScalarType out_dtype, int64_t block) {
  const at::Tensor a = a_data.contiguous(), sa = a_scales.contiguous(), bb = b.contiguous();
  const at::Tensor sb = b_scales ? b_scales->contiguous() : at::Tensor();
  const int64_t l = a.size(0), m = a.size(1);
  at::Tensor out = at::empty({l, m}, a.options().dtype(out_dtype));
  const GemvShape shape{l * m, m, a.size(2) * 2, block, sa.scalar_type() == at::kFloat8_e4m3fn};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out_dtype, "fp4ops_gemv_cpu", [&] {
    gemv_rows<b_t, scalar_t>(shape, a.const_data_ptr<uint8_t>(), static_cast<const uint8_t*>(sa.const_data_ptr()),
                             static_cast<const b_t*>(bb.const_data_ptr()),
                             b_scales ? static_cast<const uint8_t*>(sb.const_data_ptr()) : nullptr, global_a, global_b,
                             out.mutable_data_ptr<scalar_t>());
  });
  return out;
}

}  // namespace

at::Tensor gemv_fp4_dense(const at::Tensor& a_data, const at::Tensor& a_scales,
                          const std::optional<at::Tensor>& a_global_scale, const at::Tensor& b,
                          at::ScalarType out_dtype) {
  const int64_t block = check_gemv_a(a_data, a_scales, a_global_scale);
  check_gemv_b(a_data, a_scales, b, nullptr, std::nullopt);
  check_gemv_out_dtype(out_dtype);
  const float g = global_or_one(a_global_scale);
  if (b.scalar_type() == at::kHalf) return run_gemv<at::Half>(a_data, a_scales, g, 1.0f, b, nullptr, out_dtype, block);
  return run_gemv<at::BFloat16>(a_data, a_scales, g, 1.0f, b, nullptr, out_dtype, block);
}

at::Tensor gemv_fp4_fp4(const at::Tensor& a_data, const at::Tensor& a_scales,
                        const std::optional<at::Tensor>& a_global_scale, const at::Tensor& b_data,
                        const at::Tensor& b_scales, const std::optional<at::Tensor>& b_global_scale,
                        at::ScalarType out_dtype) {
  const int64_t block = check_gemv_a(a_data, a_scales, a_global_scale);
  check_gemv_b(a_data, a_scales, b_data, &b_scales, b_global_scale);
  check_gemv_out_dtype(out_dtype);
  return run_gemv<uint8_t>(a_data, a_scales, global_or_one(a_global_scale), global_or_one(b_global_scale), b_data,
                           &b_scales, out_dtype, block);
}

}  // namespace fp4ops::cpu
