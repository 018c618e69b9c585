// swizzle_scales / unswizzle_scales on the GPU: linear <-> the 128x4 atom layout (SPEC 4). Scale
// tensors are 1/16 (NVFP4) or 1/32 (MXFP4) of the elements, so one byte per thread is enough.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "../common/op_checks.h"
#include "kernels_cuda.h"
#include "launch_utils.h"

namespace fp4ops::cuda {

namespace {

constexpr int kThreads = 256;

// kToSwizzled: linear[s] -> swizzled[offset(s)]; else swizzled[offset(s)] -> linear[s].
template <bool kToSwizzled>
__global__ void move_scales_kernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, int64_t count,
                                   SwizzledScales index) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < count; s += stride) {
    if constexpr (kToSwizzled) {
      dst[index.offset(s)] = src[s];
    } else {
      dst[s] = src[index.offset(s)];
    }
  }
}

template <bool kToSwizzled>
void launch_move(const at::Tensor& in, at::Tensor& out, int64_t count, const SwizzledScales& index) {
  if (count == 0) return;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  move_scales_kernel<kToSwizzled><<<grid_for(count, kThreads), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(in.const_data_ptr()), static_cast<uint8_t*>(out.mutable_data_ptr()), count, index);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor swizzle_scales(const at::Tensor& scales) {
  check_scale_codes(scales, "scales", 1);
  const LaunchDevice launch_device(scales.device());
  const int64_t cols = scales.size(-1);
  // Zeroed first: only real scales are copied, so every padding byte is 0.
  at::Tensor out = at::zeros(scale_shape(scales.sizes(), cols, true), scales.options());
  const at::Tensor in = scales.contiguous();
  launch_move<true>(in, out, in.numel(), swizzled_scales_for(scales.sizes(), cols));
  return out;
}

at::Tensor unswizzle_scales(const at::Tensor& scales, int64_t rows, int64_t cols) {
  const auto linear = check_unswizzle_args(scales, rows, cols);
  const LaunchDevice launch_device(scales.device());
  at::Tensor out = at::empty(linear, scales.options());
  const at::Tensor in = scales.contiguous();
  launch_move<false>(in, out, out.numel(), swizzled_scales_for(linear, cols));
  return out;
}

}  // namespace fp4ops::cuda
