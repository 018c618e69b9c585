// Host-side helpers for the CUDA launchers: dtype -> raw CUDA type dispatch and grid sizing.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "pdl_launch.cuh"

namespace fp4ops::cuda {

// Raises NotImplementedError, naming the GPU's architecture and the build variable, when this build
// holds no kernels the current GPU (`device`) can run; cached per device (arch_check.cu).
void check_built_for_device(int device);

// What every launcher starts with: a device guard for `device`, and check_built_for_device, so a
// GPU the build left out gets a clear error instead of CUDA's "no kernel image" at the launch.
class LaunchDevice {
 public:
  explicit LaunchDevice(const at::Device& device) : guard_(device) { check_built_for_device(guard_.current_device().index()); }

 private:
  c10::cuda::CUDAGuard guard_;
};

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T the raw CUDA type of a float32/float16/bfloat16 dtype.
template <typename Fn>
void dispatch_float_type(at::ScalarType dtype, const char* name, Fn&& fn) {
  switch (dtype) {
    case at::kFloat: return fn(TypeTag<float>{});
    case at::kHalf: return fn(TypeTag<__half>{});
    case at::kBFloat16: return fn(TypeTag<__nv_bfloat16>{});
    default: TORCH_CHECK(false, name, ": expected float32, float16 or bfloat16, got ", dtype);
  }
}

// Calls fn(std::bool_constant<flag>{}): a run-time flag becomes a template argument of the kernel
// (one instance per value), e.g. with_bool(aligned, [&](auto a) { launch(kernel<decltype(a)::value>); }).
template <typename Fn>
void with_bool(bool flag, Fn&& fn) {
  if (flag) {
    fn(std::true_type{});
  } else {
    fn(std::false_type{});
  }
}

inline bool is_aligned(const void* p, std::uintptr_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// t contiguous and 16-byte aligned, for kernels that read with 16-byte vector loads: a misaligned
// view (a storage offset) is copied, which costs a copy only in that rare case.
inline at::Tensor aligned_contiguous(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return is_aligned(c.const_data_ptr(), 16) ? c : c.clone();
}

// Grid for a grid-stride loop over `work_items`: `min_per_sm` blocks per SM (16: at least two
// waves of 256-thread blocks, an SM holding at most 2048 threads, fewer by register use), never
// more than the work needs, and more where a thread would otherwise take over `max_steps` items.
// Each block pays a fixed cost (a kernel's prologue, amax's one atomic), so the grid grows past
// `min_per_sm` only where threads would otherwise loop long. The defaults and each kernel's
// `max_steps` were chosen by measurement (docs/performance.md, "Grid sizing of the element-wise
// kernels").
inline unsigned grid_for(int64_t work_items, int threads_per_block,
                         int64_t max_steps = std::numeric_limits<int64_t>::max(), int64_t min_per_sm = 16) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t wanted = (work_items + threads_per_block - 1) / threads_per_block;
  const int64_t blocks = std::max(sms * min_per_sm, wanted / max_steps + (wanted % max_steps != 0));
  constexpr int64_t kMaxGrid = std::numeric_limits<int32_t>::max();  // gridDim.x; the loop does the rest
  return static_cast<unsigned>(std::max<int64_t>(1, std::min({wanted, blocks, kMaxGrid})));
}

// CTAs of `kernel` one SM holds at once with `threads` threads and `smem` bytes of dynamic shared
// memory (0 where none fits), cached per kernel, device, block size and shared-memory size (the
// occupancy query costs a few microseconds of host time, too much to repeat on every launch). Past
// 48 KB the kernel must be allowed `smem` first (allow_dynamic_smem).
template <typename Kernel>
inline int ctas_per_sm(Kernel kernel, int threads, size_t smem, size_t device) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, size_t, int, size_t>, int> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, threads, smem);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  cache.emplace(key, per_sm);
  return per_sm;
}

// CTAs of `kernel` resident on the whole GPU at once (occupancy times SMs; at least one per SM).
template <typename Kernel>
inline int resident_ctas(Kernel kernel, int threads, size_t smem, size_t device) {
  return std::max(1, ctas_per_sm(kernel, threads, smem, device)) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
}

// Lets `kernel` launch with `smem` bytes of dynamic shared memory on `device`: past 48 KB of shared
// memory in all (its static shared memory counts too) a kernel needs an opt-in, set once per
// kernel and device (raised when a larger size comes).
template <typename Kernel>
inline void allow_dynamic_smem(Kernel kernel, size_t smem, int device) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> allowed;
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& current = allowed[{reinterpret_cast<const void*>(kernel), device}];
  if (current >= smem) return;
  cudaFuncAttributes attributes{};
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  if (attributes.sharedSizeBytes + smem > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  current = smem;
}

// The dynamic shared memory to launch `kernel` with (`smem` or more, allowed as allow_dynamic_smem)
// so that no SM holds more than ceil(ctas / SMs) of the grid's `ctas` CTAs of `threads` threads,
// nor more than `max_per_sm` (a cap some kernels run faster under), where more would fit: the CTAs
// of a one-wave grid then spread over the SMs one per SM in turn. Otherwise the block scheduler may
// stack them up to the occupancy limit on the SMs that free first (a programmatic dependent
// launches while the kernel before still runs), and the SMs with the most CTAs set the kernel's
// time. A grid of more waves keeps `smem` (or is held to the cap). The larger request also leaves
// less room for the next kernel's early CTAs, which some small grids pay for (docs/performance.md,
// "Linear: dispatch and bounds"). Cached per kernel, device, block, `smem`, `ctas` and `max_per_sm`
// (the occupancy queries cost microseconds of host time).
template <typename Kernel>
inline size_t spreading_dynamic_smem(Kernel kernel, int threads, size_t smem, int64_t ctas, int device,
                                     int max_per_sm = std::numeric_limits<int>::max()) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, size_t, int64_t, int>, size_t> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(std::make_tuple(reinterpret_cast<const void*>(kernel), device, threads, smem, ctas, max_per_sm));
    if (it != cache.end()) return it->second;
  }
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
  const int64_t per_sm = std::min<int64_t>((ctas + prop->multiProcessorCount - 1) / prop->multiProcessorCount, max_per_sm);
  allow_dynamic_smem(kernel, smem, device);
  size_t chosen = smem;
  if (ctas_per_sm(kernel, threads, smem, device) > per_sm) {
    // per_sm + 1 CTAs of this size (with the per-CTA reserve and static shared memory) overflow an SM.
    cudaFuncAttributes attributes{};
    C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    const size_t per_cta = prop->sharedMemPerMultiprocessor / (per_sm + 1) + 1;
    const size_t overhead = prop->reservedSharedMemPerBlock + attributes.sharedSizeBytes;
    if (per_cta > overhead + smem && per_cta - overhead <= prop->sharedMemPerBlockOptin) {
      const size_t spread = per_cta - overhead;
      allow_dynamic_smem(kernel, spread, device);
      if (ctas_per_sm(kernel, threads, spread, device) == per_sm) chosen = spread;
    }
  }
  const std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(std::make_tuple(reinterpret_cast<const void*>(kernel), device, threads, smem, ctas, max_per_sm), chosen);
  return chosen;
}

// Whether `kernel`'s code on the current device (`device`) was compiled from PTX of compute
// capability 9.0 or later, and so has what arch.h's FP4OPS_HW_PDL and FP4OPS_HW_CLUSTER guard. A
// build for older GPUs that embeds their PTX runs on a newer GPU as that PTX compiled by the driver,
// which has none of it. Cached per kernel and device (cudaFuncGetAttributes costs host time).
template <typename Kernel>
inline bool code_has_sm90_features(Kernel kernel, int device) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, bool> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), device);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  cudaFuncAttributes attributes{};
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return cache.emplace(key, attributes.ptxVersion >= 90).first->second;
}

// pdl_launch.cuh's programmatic dependent launch, with torch's error check, where the kernel's
// code waits for the kernel before it (griddepcontrol.wait); otherwise a plain launch, which starts
// once that kernel has completed. Code without the wait (code_has_sm90_features), launched as a
// programmatic dependent on a GPU that honours it, could start as the kernel before exits, ahead of
// that kernel's memory flush, and read what it has not yet written.
template <typename... KernelArgs, typename... Args>
void launch_dependent(void (*kernel)(KernelArgs...), dim3 grid, unsigned threads, size_t smem, cudaStream_t stream,
                      Args&&... args) {
  if (code_has_sm90_features(kernel, c10::cuda::current_device())) {
    C10_CUDA_CHECK(launch_programmatic_dependent(kernel, grid, threads, smem, stream, std::forward<Args>(args)...));
  } else {
    kernel<<<grid, threads, smem, stream>>>(std::forward<Args>(args)...);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}
template <typename... KernelArgs, typename... Args>
void launch_dependent(void (*kernel)(KernelArgs...), unsigned grid, unsigned threads, cudaStream_t stream,
                      Args&&... args) {
  launch_dependent(kernel, dim3(grid), threads, 0, stream, std::forward<Args>(args)...);
}

}  // namespace fp4ops::cuda
