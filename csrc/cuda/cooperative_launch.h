// Host side of the producers' one-launch paths (producers.cu): a cooperative grid, whose CTAs are
// all resident at once, so that cooperative_groups::this_grid().sync() is valid in it.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <utility>

namespace fp4ops::cuda {

// Launches `kernel` as a cooperative grid of `ctas` CTAs: the caller has made sure that the GPU
// has cooperative launch and can hold every CTA at once.
template <typename... KernelArgs, typename... Args>
void launch_cooperative(void (*kernel)(KernelArgs...), int ctas, int threads, size_t smem, cudaStream_t stream,
                        Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace fp4ops::cuda
