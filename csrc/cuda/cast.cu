// Launchers for the elementwise E2M1 casts: checks, device guard, current stream, dispatch.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "../common/op_checks.h"
#include "cast_kernels.cuh"
#include "kernels_cuda.h"
#include "launch_utils.h"

namespace fp4ops::cuda {

constexpr int kThreads = 256;
// Vectorized steps per thread, at most (grid_for): the plain quantizer's 256 input bytes per
// thread for the cast to E2M1 (8 elements per step), and the dequantizer's one step of
// kDecodeUnitsPerStep 16-byte stores per thread for the cast from it (docs/performance.md, "Grid
// sizing of the element-wise kernels").
constexpr int64_t kToE2m1MaxSteps = 16;
constexpr int64_t kFromE2m1MaxSteps = 1;

at::Tensor cast_to_e2m1(const at::Tensor& x) {
  check_float_input(x, "x");
  check_last_dim_multiple(x, "x", 2);
  const LaunchDevice launch_device(x.device());
  const at::Tensor input = x.contiguous();
  at::Tensor out = at::empty(with_last_dim(x, x.size(-1) / 2), x.options().dtype(at::kByte));
  const int64_t numel = input.numel();
  if (numel == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  dispatch_float_type(input.scalar_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(input.const_data_ptr());
    uint8_t* packed = out.mutable_data_ptr<uint8_t>();
    if (is_aligned(in, 16) && is_aligned(packed, 4)) {
      const unsigned grid = grid_for(numel / 8, kThreads, kToE2m1MaxSteps);
      cast_to_e2m1_kernel<T, true><<<grid, kThreads, 0, stream>>>(in, packed, numel);
    } else {
      cast_to_e2m1_kernel<T, false><<<grid_for(numel / 2, kThreads), kThreads, 0, stream>>>(in, packed, numel);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor cast_from_e2m1(const at::Tensor& data, at::ScalarType dtype) {
  check_packed(data, "data");
  check_out_dtype(dtype);
  const LaunchDevice launch_device(data.device());
  const at::Tensor packed = data.contiguous();
  at::Tensor out = at::empty(with_last_dim(data, data.size(-1) * 2), data.options().dtype(dtype));
  const int64_t num_bytes = packed.numel();
  if (num_bytes == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  dispatch_float_type(dtype, "dtype", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const uint8_t* in = packed.const_data_ptr<uint8_t>();
    T* values = static_cast<T*>(out.mutable_data_ptr());
    if (is_aligned(in, kCodeBytesPerUnit<T>) && is_aligned(values, 16)) {
      const int64_t num_units = num_bytes / kCodeBytesPerUnit<T>;
      const unsigned grid = grid_for(decode_steps(num_units), kThreads, kFromE2m1MaxSteps);
      cast_from_e2m1_kernel<T, true><<<grid, kThreads, 0, stream>>>(in, values, num_bytes);
    } else {
      cast_from_e2m1_kernel<T, false><<<grid_for(num_bytes, kThreads), kThreads, 0, stream>>>(in, values, num_bytes);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace fp4ops::cuda
