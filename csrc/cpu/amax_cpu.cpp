#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "../common/fp4_format.h"
#include "../common/op_checks.h"
#include "kernels_cpu.h"

namespace fp4ops::cpu {

// SPEC 2.1: max |x_i| over the finite elements, 0 when there are none.
float finite_amax(const at::Tensor& x) {
  const at::Tensor input = x.contiguous();
  float result = 0.0f;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "fp4ops_amax_cpu", [&] {
    const scalar_t* values = input.const_data_ptr<scalar_t>();
    result = at::parallel_reduce(
        0, input.numel(), 32768, 0.0f,
        [&](int64_t begin, int64_t end, float partial) {
          for (int64_t i = begin; i < end; ++i) {
            partial = std::max(partial, finite_abs(static_cast<float>(values[i])));
          }
          return partial;
        },
        [](float a, float b) { return std::max(a, b); });
  });
  return result;
}

at::Tensor amax(const at::Tensor& x) {
  check_float_input(x, "x");
  return at::scalar_tensor(finite_amax(x), x.options().dtype(at::kFloat));
}

}  // namespace fp4ops::cpu
