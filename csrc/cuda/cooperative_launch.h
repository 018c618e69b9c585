// Host side of the producers' one-launch paths (producers.cu): a cooperative grid, whose CTAs are
// all resident at once, so that cooperative_groups::this_grid().sync() is valid in it, or one
// thread-block cluster.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <utility>

#include "pdl_launch.cuh"

namespace fp4ops::cuda {

// Launches `kernel` as a cooperative grid of `ctas` CTAs: the caller has made sure that the GPU
// has cooperative launch and can hold every CTA at once.
template <typename... KernelArgs, typename... Args>
void launch_cooperative(void (*kernel)(KernelArgs...), int ctas, int threads, size_t smem, cudaStream_t stream,
                        Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  C10_CUDA_CHECK(launch_with_attribute(attribute, kernel, dim3(static_cast<unsigned>(ctas)), static_cast<unsigned>(threads), smem, stream,
                                       std::forward<Args>(args)...));
}

// Launches `kernel` as one thread-block cluster of `ctas` CTAs (the grid is the cluster): the
// caller has made sure that the GPU and the kernel's build have clusters and that `ctas` is a
// cluster size the GPU takes.
template <typename... KernelArgs, typename... Args>
void launch_one_cluster(void (*kernel)(KernelArgs...), int ctas, int threads, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(ctas);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  C10_CUDA_CHECK(launch_with_attribute(attribute, kernel, dim3(static_cast<unsigned>(ctas)), static_cast<unsigned>(threads), smem, stream,
                                       std::forward<Args>(args)...));
}

}  // namespace fp4ops::cuda
