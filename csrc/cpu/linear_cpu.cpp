// fp4ops.linear on the CPU: y = x W^T (+ bias) with W (and x, W4A4) in NVFP4 or MXFP4.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../common/block_formats.h"
#include "../common/op_checks.h"
#include "kernels_cpu.h"

namespace fp4ops::cpu {

namespace {

// Rows of W decoded together: each x row is then read once per tile rather than once per output.
constexpr int64_t kTileRows = 8;

// What every output of one call shares.
struct LinearShape {
  int64_t m;      // rows of x
  int64_t n;      // rows of W (outputs per x row)
  int64_t k;      // reduction length
  int64_t block;  // 16 (NVFP4) or 32 (MXFP4)
  bool nvfp4;
};

// A block scale code as the factor it stands for: exact in double, NaN for a NaN code.
inline double block_factor(uint8_t code, bool nvfp4) { return nvfp4 ? e4m3_decode(code) : e8m0_decode(code); }

// Packed E2M1 codes [K/2] -> their values [K] (element 2i in the low nibble), exact.
void decode_e2m1_row(const uint8_t* packed, int64_t k, float* values) {
  for (int64_t i = 0; i < k / 2; ++i) {
    values[2 * i] = e2m1_decode(packed[i] & 0xF);
    values[2 * i + 1] = e2m1_decode(packed[i] >> 4);
  }
}

// One operand's rows as the dot products read them: element values [rows, K] (E2M1 codes decoded,
// or the dense input widened; both exact in float) and one factor per block [rows, K/block]
// (1 for a dense input).
struct DecodedRows {
  std::vector<float> values;
  std::vector<double> factors;
};

DecodedRows decode_x(const at::Tensor& x, const at::Tensor* x_scales, const LinearShape& s) {
  const int64_t blocks = s.k / s.block;
  DecodedRows out{std::vector<float>(s.m * s.k), std::vector<double>(s.m * blocks, 1.0)};
  if (x_scales == nullptr) {
    AT_DISPATCH_SWITCH(x.scalar_type(), "fp4ops_linear_cpu_x",
                       AT_DISPATCH_CASE(at::kHalf, [&] {
                         std::copy_n(x.const_data_ptr<scalar_t>(), s.m * s.k, out.values.begin());
                       }) AT_DISPATCH_CASE(at::kBFloat16, [&] {
                         std::copy_n(x.const_data_ptr<scalar_t>(), s.m * s.k, out.values.begin());
                       }));
    return out;
  }
  const auto* data = x.const_data_ptr<uint8_t>();
  const auto* scales = static_cast<const uint8_t*>(x_scales->const_data_ptr());
  at::parallel_for(0, s.m, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      decode_e2m1_row(data + row * (s.k / 2), s.k, out.values.data() + row * s.k);
      for (int64_t j = 0; j < blocks; ++j) out.factors[row * blocks + j] = block_factor(scales[row * blocks + j], s.nvfp4);
    }
  });
  return out;
}

// sum_k w_k x_k over the blocks of one row pair. Products of floats are exact in double, and so
// is every block sum times its two factors (E4M3, E8M0 and their products lie well inside
// double's range), so the only roundings are the double additions: far below SPEC 5's 2^-10
// bound for any K. A NaN element or factor makes the sum NaN; Inf times a zero code too, as in
// the fp64 reference. Four partial sums per block break the add latency chain; the order is fixed,
// so the result is deterministic.
double dot_blocks(const float* w, const double* w_factors, const float* x, const double* x_factors, int64_t blocks,
                  int64_t block) {
  double acc = 0.0;
  for (int64_t j = 0; j < blocks; ++j) {
    const float* wb = w + j * block;
    const float* xb = x + j * block;
    double p[4] = {0.0, 0.0, 0.0, 0.0};
    for (int64_t i = 0; i < block; i += 4) {
      for (int u = 0; u < 4; ++u) p[u] += static_cast<double>(wb[i + u]) * static_cast<double>(xb[i + u]);
    }
    acc += ((p[0] + p[1]) + (p[2] + p[3])) * (w_factors[j] * x_factors[j]);
  }
  return acc;
}

// d rounded to float "to odd": truncated toward zero, with the last significand bit set when that
// dropped anything. Rounding this float to a format with at least two fewer significand bits
// (fp16, bf16; subnormals and overflow included) gives d correctly rounded, so the fp16/bf16
// outputs see one rounding of the double result, not two.
float round_to_odd_float(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // Inf -> FLT_MAX too
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof(bits));
  return f;
}

template <typename out_t>
out_t round_once(double d) {
  if constexpr (std::is_floating_point_v<out_t>) {
    return static_cast<out_t>(d);
  } else {
    return static_cast<out_t>(round_to_odd_float(d));  // c10::Half / c10::BFloat16 round to nearest even
  }
}

// Every output y[m, n] = (sum over blocks of the block sum times both block factors) times the
// global scales, plus bias, rounded once to out_t. Parallel over tiles of W rows; each tile is
// decoded once and met with every x row.
template <typename out_t>
void linear_tiles(const LinearShape& s, const DecodedRows& x, const uint8_t* w_data, const uint8_t* w_scales,
                  double global, const double* bias, out_t* out) {
  const int64_t blocks = s.k / s.block;
  const int64_t tiles = (s.n + kTileRows - 1) / kTileRows;
  at::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> w(kTileRows * s.k);
    std::vector<double> w_factors(kTileRows * blocks);
    for (int64_t tile = begin; tile < end; ++tile) {
      const int64_t n0 = tile * kTileRows, rows = std::min(kTileRows, s.n - n0);
      for (int64_t r = 0; r < rows; ++r) {
        decode_e2m1_row(w_data + (n0 + r) * (s.k / 2), s.k, w.data() + r * s.k);
        for (int64_t j = 0; j < blocks; ++j) {
          w_factors[r * blocks + j] = block_factor(w_scales[(n0 + r) * blocks + j], s.nvfp4);
        }
      }
      for (int64_t m = 0; m < s.m; ++m) {
        const float* xm = x.values.data() + m * s.k;
        const double* xf = x.factors.data() + m * blocks;
        for (int64_t r = 0; r < rows; ++r) {
          double y = dot_blocks(w.data() + r * s.k, w_factors.data() + r * blocks, xm, xf, blocks, s.block) * global;
          if (bias != nullptr) y += bias[n0 + r];
          out[m * s.n + n0 + r] = round_once<out_t>(y);
        }
      }
    }
  });
}

double global_or_one(const std::optional<at::Tensor>& g) { return g.has_value() ? g->item<float>() : 1.0; }

}  // namespace

at::Tensor linear(const at::Tensor& x, const std::optional<at::Tensor>& x_scales,
                  const std::optional<at::Tensor>& x_global_scale, const at::Tensor& w_data, const at::Tensor& w_scales,
                  const std::optional<at::Tensor>& w_global_scale, const std::optional<at::Tensor>& bias,
                  at::ScalarType out_dtype, bool /*batch_invariant: every CPU output is computed alone*/) {
  check_linear(x, x_scales, x_global_scale, w_data, w_scales, w_global_scale, bias, out_dtype);
  const bool nvfp4 = w_scales.scalar_type() == at::kFloat8_e4m3fn;
  const LinearShape shape{x.size(0), w_data.size(0), w_data.size(1) * 2, nvfp4 ? kNvfp4Block : kMxfp4Block, nvfp4};
  at::Tensor out = at::empty({shape.m, shape.n}, x.options().dtype(out_dtype));
  if (out.numel() == 0) return out;

  const at::Tensor xc = x.contiguous(), wd = w_data.contiguous(), ws = w_scales.contiguous();
  const at::Tensor xs = x_scales.has_value() ? x_scales->contiguous() : at::Tensor();
  const DecodedRows x_rows = decode_x(xc, x_scales.has_value() ? &xs : nullptr, shape);
  // Both global scales are fp32, so their product is exact in double.
  const double global = global_or_one(w_global_scale) * global_or_one(x_global_scale);
  const at::Tensor b = bias.has_value() ? bias->to(at::kDouble).contiguous() : at::Tensor();
  const double* bias_ptr = bias.has_value() ? b.const_data_ptr<double>() : nullptr;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out_dtype, "fp4ops_linear_cpu", [&] {
    linear_tiles<scalar_t>(shape, x_rows, wd.const_data_ptr<uint8_t>(), static_cast<const uint8_t*>(ws.const_data_ptr()),
                           global, bias_ptr, out.mutable_data_ptr<scalar_t>());
  });
  return out;
}

}  // namespace fp4ops::cpu
