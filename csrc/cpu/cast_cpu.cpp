#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "../common/fp4_format.h"
#include "../common/op_checks.h"
#include "kernels_cpu.h"

namespace fp4ops::cpu {

// SPEC 1 with no scaling: element 2i in the low nibble, 2i+1 in the high nibble.
at::Tensor cast_to_e2m1(const at::Tensor& x) {
  check_float_input(x, "x");
  check_last_dim_multiple(x, "x", 2);
  const at::Tensor input = x.contiguous();
  at::Tensor out = at::empty(with_last_dim(x, x.size(-1) / 2), x.options().dtype(at::kByte));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "fp4ops_cast_to_e2m1_cpu", [&] {
    const scalar_t* in = input.const_data_ptr<scalar_t>();
    uint8_t* packed = out.mutable_data_ptr<uint8_t>();
    at::parallel_for(0, out.numel(), 32768, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        packed[i] = static_cast<uint8_t>(
            e2m1x2_encode(static_cast<float>(in[2 * i]), static_cast<float>(in[2 * i + 1])));
      }
    });
  });
  return out;
}

at::Tensor cast_from_e2m1(const at::Tensor& data, at::ScalarType dtype) {
  check_packed(data, "data");
  check_out_dtype(dtype);
  const at::Tensor packed = data.contiguous();
  at::Tensor out = at::empty(with_last_dim(data, data.size(-1) * 2), data.options().dtype(dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "fp4ops_cast_from_e2m1_cpu", [&] {
    const uint8_t* in = packed.const_data_ptr<uint8_t>();
    scalar_t* values = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, packed.numel(), 32768, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const Float2 pair = e2m1x2_decode(in[i]);
        values[2 * i] = static_cast<scalar_t>(pair.even);
        values[2 * i + 1] = static_cast<scalar_t>(pair.odd);
      }
    });
  });
  return out;
}

}  // namespace fp4ops::cpu
