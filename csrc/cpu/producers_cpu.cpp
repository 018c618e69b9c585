// The fused producers on the CPU (SPEC 7): the fp32 intermediate row by row, then the plain CPU
// quantizer on it. The contract is exactly that composition, so this is its most direct form.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <vector>

#include "../common/producer_checks.h"
#include "../common/producers.h"
#include "kernels_cpu.h"

namespace fp4ops::cpu {

namespace {

// SPEC 7 step 2: the tree over [lo, lo + n) (n a power of two) of the squares of h[0, count),
// zero past count. A range wholly past count adds an exact zero, so it is skipped.
float tree_sum_of_squares(const float* h, int64_t count, int64_t lo, int64_t n) {
  if (lo >= count) return 0.0f;
  if (n == 1) return mul_rn(h[lo], h[lo]);
  return add_rn(tree_sum_of_squares(h, count, lo, n / 2), tree_sum_of_squares(h, count, lo + n / 2, n / 2));
}

// y [rows, H] fp32 from x (and residual: h = dtype(x + r), written to residual_out).
template <typename scalar_t>
void rms_norm_rows(const scalar_t* x, const scalar_t* residual, const float* weight, int64_t rows, int64_t hidden,
                   float eps, scalar_t* residual_out, float* y) {
  const int64_t padded = next_power_of_two(hidden);
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> h(hidden);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t base = r * hidden;
      for (int64_t i = 0; i < hidden; ++i) {
        float v = static_cast<float>(x[base + i]);
        if (residual != nullptr) {
          const scalar_t rounded = static_cast<scalar_t>(add_rn(v, static_cast<float>(residual[base + i])));
          residual_out[base + i] = rounded;
          v = static_cast<float>(rounded);
        }
        h[i] = v;
      }
      const float rs = rms_inverse(tree_sum_of_squares(h.data(), hidden, 0, padded), static_cast<float>(hidden), eps);
      for (int64_t i = 0; i < hidden; ++i) y[base + i] = rms_normalized(h[i], rs, weight[i]);
    }
  });
}

template <typename scalar_t>
void silu_mul_rows(const scalar_t* x, int64_t rows, int64_t width, float* y) {
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* gate = x + r * 2 * width;
      for (int64_t i = 0; i < width; ++i) {
        y[r * width + i] = silu_mul(static_cast<float>(gate[i]), static_cast<float>(gate[width + i]));
      }
    }
  });
}

// The plain quantizer on the intermediate y: (data, scales, g or an empty placeholder).
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_intermediate(const at::Tensor& y, const ProducerTarget& target,
                                                                     const std::optional<at::Tensor>& global_scale,
                                                                     const std::string& scale_rule,
                                                                     const std::string& scale_layout) {
  if (target.nvfp4) return quantize_nvfp4(y, global_scale, scale_layout);
  auto [data, scales] = quantize_mxfp4(y, scale_rule, scale_layout);
  return {data, scales, empty_placeholder(y, at::kFloat)};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> rms_norm_quantize(
    const at::Tensor& x, const at::Tensor& weight, double eps, const std::optional<at::Tensor>& residual,
    const std::string& format, const std::optional<at::Tensor>& global_scale, const std::string& scale_rule,
    const std::string& scale_layout, bool return_intermediate) {
  const ProducerTarget target = parse_producer_target(format, global_scale, scale_rule, scale_layout, x);
  check_rms_norm_args(x, weight, eps, residual, target);
  const at::Tensor input = x.contiguous();
  const at::Tensor w = weight.to(at::kFloat).contiguous();  // exact
  const at::Tensor res = residual.has_value() ? residual->contiguous() : at::Tensor();
  at::Tensor residual_out = residual.has_value() ? at::empty_like(input) : empty_placeholder(x, x.scalar_type());
  at::Tensor y = at::empty(x.sizes(), x.options().dtype(at::kFloat));
  const int64_t hidden = x.size(-1);
  const int64_t rows = hidden == 0 ? 0 : x.numel() / hidden;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "fp4ops_rms_norm_quantize_cpu", [&] {
    rms_norm_rows(input.const_data_ptr<scalar_t>(), res.defined() ? res.const_data_ptr<scalar_t>() : nullptr,
                  w.const_data_ptr<float>(), rows, hidden, static_cast<float>(eps),
                  res.defined() ? residual_out.mutable_data_ptr<scalar_t>() : nullptr, y.mutable_data_ptr<float>());
  });
  auto [data, scales, g] = quantize_intermediate(y, target, global_scale, scale_rule, scale_layout);
  return {data, scales, g, residual_out, return_intermediate ? y : empty_placeholder(x, at::kFloat)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> silu_mul_quantize(
    const at::Tensor& x, const std::string& format, const std::optional<at::Tensor>& global_scale,
    const std::string& scale_rule, const std::string& scale_layout, bool return_intermediate) {
  const ProducerTarget target = parse_producer_target(format, global_scale, scale_rule, scale_layout, x);
  check_silu_mul_args(x, target);
  const at::Tensor input = x.contiguous();
  const int64_t width = x.size(-1) / 2;
  at::Tensor y = at::empty(with_last_dim(x, width), x.options().dtype(at::kFloat));
  const int64_t rows = width == 0 ? 0 : y.numel() / width;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "fp4ops_silu_mul_quantize_cpu", [&] {
    silu_mul_rows(input.const_data_ptr<scalar_t>(), rows, width, y.mutable_data_ptr<float>());
  });
  auto [data, scales, g] = quantize_intermediate(y, target, global_scale, scale_rule, scale_layout);
  return {data, scales, g, return_intermediate ? y : empty_placeholder(x, at::kFloat)};
}

}  // namespace fp4ops::cpu
