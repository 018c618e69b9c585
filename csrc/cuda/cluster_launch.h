// Host side of thread-block clusters (sm_90 and later): how many CTAs a kernel's cluster can have
// on this GPU, and the launch. The one-launch paths of the producers (producers.cu) use them.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

namespace fp4ops::cuda {

// The portable cluster size, and the largest non-portable one a kernel can opt in to (where the
// GPU allows it: the occupancy query decides).
constexpr int kPortableClusterCtas = 8;
constexpr int kMaxClusterCtas = 16;

namespace detail {

inline cudaLaunchConfig_t cluster_config(cudaLaunchAttribute& attribute, int ctas, int threads, size_t smem,
                                         cudaStream_t stream) {
  attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(ctas);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return config;
}

}  // namespace detail

// The CTAs of the largest cluster, at most `wanted`, that `kernel` (with `threads` threads and
// `smem` bytes of dynamic shared memory, already allowed) can run as on the current device; 0
// where it cannot use clusters at all: the GPU predates them, or the kernel was compiled for an
// older architecture (PTX below 9.0: a build for older GPUs, even when the driver JIT-compiles it
// for a newer one, has no cluster code). Queried once per kernel, device and shape.
template <typename Kernel>
int cluster_ctas(Kernel kernel, int wanted, int threads, size_t smem, int device) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, int, size_t>, int> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, wanted, threads, smem);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  int ctas = 0;
  cudaFuncAttributes attributes{};
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  if (attributes.ptxVersion >= 90 && at::cuda::getCurrentDeviceProperties()->major >= 9) {
    int largest = std::min(wanted, kPortableClusterCtas);
    if (wanted > kPortableClusterCtas &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) {
      largest = std::min(wanted, kMaxClusterCtas);
    }
    for (int c = largest; c >= 1 && ctas == 0; --c) {
      cudaLaunchAttribute attribute;
      const cudaLaunchConfig_t config = detail::cluster_config(attribute, c, threads, smem, nullptr);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess && clusters >= 1) ctas = c;
    }
    (void)cudaGetLastError();  // a refused size is an answer here, not an error for the next check
  }
  cache.emplace(key, ctas);
  return ctas;
}

// Launches `kernel` as one cluster of `ctas` CTAs (the whole grid).
template <typename... KernelArgs, typename... Args>
void launch_cluster(void (*kernel)(KernelArgs...), int ctas, int threads, size_t smem, cudaStream_t stream,
                    Args&&... args) {
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config = detail::cluster_config(attribute, ctas, threads, smem, stream);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace fp4ops::cuda
