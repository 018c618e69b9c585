// Programmatic dependent launch on the bare CUDA runtime (no torch), for the launchers
// (launch_dependent, launch_utils.h) and the lab's probes alike.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace fp4ops::cuda {

// Launches `kernel` with `count` launch attributes (cudaLaunchKernelEx's config, otherwise plain).
template <typename... KernelArgs, typename... Args>
cudaError_t launch_with_attributes(cudaLaunchAttribute* attributes, unsigned count, void (*kernel)(KernelArgs...), dim3 grid,
                                   unsigned threads, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The launch attribute that makes a kernel a programmatic dependent of the kernel before it.
inline cudaLaunchAttribute programmatic_dependent_attribute() {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  return attribute;
}

// Launches `kernel` behind the previous kernel in `stream` as a programmatic dependent (PDL,
// sm_90 and later): its blocks may start once every block of that kernel has called
// griddepcontrol.launch_dependents or exited, so `kernel` must call griddepcontrol.wait before it
// touches anything the previous kernel writes. Stream capture records the same dependency.
template <typename... KernelArgs, typename... Args>
cudaError_t launch_programmatic_dependent(void (*kernel)(KernelArgs...), dim3 grid, unsigned threads, size_t smem,
                                          cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute = programmatic_dependent_attribute();
  return launch_with_attributes(&attribute, 1, kernel, grid, threads, smem, stream, std::forward<Args>(args)...);
}
template <typename... KernelArgs, typename... Args>
cudaError_t launch_programmatic_dependent(void (*kernel)(KernelArgs...), unsigned grid, unsigned threads,
                                          cudaStream_t stream, Args&&... args) {
  return launch_programmatic_dependent(kernel, dim3(grid), threads, 0, stream, std::forward<Args>(args)...);
}

}  // namespace fp4ops::cuda
