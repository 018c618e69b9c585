// Host side of the one-launch paths (the producers' and dynamic NVFP4's): a cooperative grid, whose CTAs are
// all resident at once, so that cooperative_groups::this_grid().sync() is valid in it, or one
// thread-block cluster. Both launch as programmatic dependents of the kernel before them where the
// kernel's code waits for it (code_has_sm90_features), as launch_dependent does: the one-launch
// kernels wait at their start. A cooperative grid may start that way, because the kernel before it
// completes without waiting for anything after it, so every CTA of the grid becomes resident; and
// the kernel after it launches only once every CTA of the grid has triggered (each does so at its
// start), so it never takes the place of a CTA the grid's barrier waits for.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "cluster_exchange.cuh"
#include "launch_utils.h"
#include "pdl_launch.cuh"

namespace fp4ops::cuda {

// Launches `kernel` with `attribute` and, where `dependent`, as the programmatic dependent of the
// kernel before it (only for code that waits for that kernel: code_has_sm90_features).
template <typename... KernelArgs, typename... Args>
void launch_one_launch_kernel(const cudaLaunchAttribute& attribute, bool dependent, void (*kernel)(KernelArgs...), int ctas,
                              int threads, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attributes[2] = {attribute, programmatic_dependent_attribute()};
  C10_CUDA_CHECK(launch_with_attributes(attributes, dependent ? 2 : 1, kernel, dim3(static_cast<unsigned>(ctas)),
                                        static_cast<unsigned>(threads), smem, stream, std::forward<Args>(args)...));
}

// Launches `kernel` as a cooperative grid of `ctas` CTAs: the caller has made sure that the GPU
// has cooperative launch and can hold every CTA at once.
template <typename... KernelArgs, typename... Args>
void launch_cooperative(void (*kernel)(KernelArgs...), int ctas, int threads, size_t smem, cudaStream_t stream,
                        Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  const bool dependent = code_has_sm90_features(kernel, c10::cuda::current_device());
  launch_one_launch_kernel(attribute, dependent, kernel, ctas, threads, smem, stream, std::forward<Args>(args)...);
}

// The largest thread-block cluster of `kernel` in CTAs of `threads` threads with `smem` bytes of
// dynamic shared memory (allowed: allow_dynamic_smem), up to `limit` CTAs, that the current device
// (`device`) schedules: sizes past the portable 8 need the kernel's opt-in, which GPUs without them
// refuse (then 8). Cached per kernel, device, block and `smem` (the occupancy queries cost
// microseconds of host time).
template <typename... KernelArgs>
int max_cluster_ctas(void (*kernel)(KernelArgs...), int threads, size_t smem, int limit, int device) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, size_t, int>, int> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, threads, smem, limit);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  constexpr int kPortableClusterCtas = 8;
  if (limit > kPortableClusterCtas &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    (void)cudaGetLastError();  // the refusal is an answer, not an error to report later
    limit = kPortableClusterCtas;
  }
  int ctas = limit;
  for (; ctas > 1; --ctas) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim = {static_cast<unsigned>(ctas), 1, 1};
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(ctas));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = smem;
    config.attrs = &attribute;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess && clusters > 0) break;
    (void)cudaGetLastError();
  }
  return cache.emplace(key, ctas).first->second;
}

// Launches `kernel` as one thread-block cluster of `ctas` CTAs (the grid is the cluster): the
// caller has made sure that the GPU and the kernel's code have clusters (code_has_sm90_features,
// which also says that the code waits for the kernel before it) and that `ctas` is a cluster
// size the GPU takes (max_cluster_ctas).
template <typename... KernelArgs, typename... Args>
void launch_one_cluster(void (*kernel)(KernelArgs...), int ctas, int threads, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(ctas);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  launch_one_launch_kernel(attribute, true, kernel, ctas, threads, smem, stream, std::forward<Args>(args)...);
}

// Launches `kernel` as one thread-block cluster of `ctas` CTAs of `threads` threads with `smem`
// bytes of dynamic shared memory where the GPU and the kernel's code have clusters (PTX below 9.0,
// as a build for older GPUs that the driver compiles for a newer one, has none) and the GPU
// schedules a cluster that size (max_cluster_ctas); false where it launches nothing.
template <typename... KernelArgs, typename... Args>
bool launch_one_cluster_if_scheduled(void (*kernel)(KernelArgs...), int64_t ctas, int threads, size_t smem,
                                     cudaStream_t stream, Args&&... args) {
  const int device = c10::cuda::current_device();
  if (ctas > kMaxClusterCtas || at::cuda::getCurrentDeviceProperties()->major < 9 || !code_has_sm90_features(kernel, device)) {
    return false;
  }
  allow_dynamic_smem(kernel, smem, device);
  if (ctas > max_cluster_ctas(kernel, threads, smem, kMaxClusterCtas, device)) return false;
  launch_one_cluster(kernel, static_cast<int>(ctas), threads, smem, stream, std::forward<Args>(args)...);
  return true;
}

// Launches `kernel` over `items` work items, an item a thread, as one thread-block cluster (no
// dynamic shared memory) in CTAs of the fewest threads, from min_threads doubling up to
// max_threads, that leave a cluster the GPU schedules: small CTAs spread the reads over more SMs.
// False where no size does (it launches nothing).
template <typename... KernelArgs, typename... Args>
bool launch_one_cluster_of_fewest_threads(void (*kernel)(KernelArgs...), int64_t items, int min_threads,
                                          int max_threads, cudaStream_t stream, const Args&... args) {
  for (int threads = min_threads; threads <= max_threads; threads *= 2) {
    if (launch_one_cluster_if_scheduled(kernel, (items + threads - 1) / threads, threads, 0, stream, args...)) return true;
  }
  return false;
}

}  // namespace fp4ops::cuda
