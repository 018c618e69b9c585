// Whether this build holds kernels the current GPU can run (LaunchDevice, launch_utils.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <array>
#include <atomic>
#include <string>

#include "../common/arch.h"
#include "launch_utils.h"

namespace fp4ops::cuda {

namespace {

// Writes the architecture its device code was compiled for. The launchers never run it: asking
// the driver for its attributes is how they learn whether any image of this build (a cubin of the
// GPU's architecture, or PTX it can compile) fits the GPU, which holds for every kernel alike since
// all are built for the same targets (python/fp4ops/_build.py).
__global__ void compiled_arch_kernel(int* arch) {
#if defined(__CUDA_ARCH__)
  *arch = __CUDA_ARCH__;
#endif
}

}  // namespace

void check_built_for_device(int device) {
  static std::array<std::atomic<bool>, 64> checked{};
  const bool cacheable = device >= 0 && device < static_cast<int>(checked.size());
  if (cacheable && checked[device].load()) return;
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, compiled_arch_kernel);
  if (status == cudaErrorNoKernelImageForDevice || status == cudaErrorInvalidDeviceFunction) {
    (void)cudaGetLastError();  // not sticky: clear it so later CUDA calls do not report it
    // Numbers go into the messages as strings (op_checks.h says why).
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
    const std::string name = prop->name, major = std::to_string(prop->major), minor = std::to_string(prop->minor);
    const std::string oldest = std::to_string(FP4OPS_MIN_CUDA_ARCH / 10) + "." + std::to_string(FP4OPS_MIN_CUDA_ARCH % 10);
    TORCH_CHECK_NOT_IMPLEMENTED(prop->major * 10 + prop->minor >= FP4OPS_MIN_CUDA_ARCH, "fp4ops: ", name,
                                " (compute capability ", major, ".", minor, ") is older than the oldest architecture ",
                                "fp4ops supports, ", oldest, " (csrc/common/arch.h); keep the tensors on the CPU");
    TORCH_CHECK_NOT_IMPLEMENTED(false, "fp4ops: this build has no kernels for sm_", major, minor, " (", name,
                                ", compute capability ", major, ".", minor, "); rebuild with FP4OPS_CUDA_ARCHS=", major,
                                ".", minor, " (or TORCH_CUDA_ARCH_LIST) in the environment, e.g. FP4OPS_CUDA_ARCHS=",
                                major, ".", minor, " pip install --no-build-isolation .");
  }
  C10_CUDA_CHECK(status);
  if (cacheable) checked[device].store(true);
}

}  // namespace fp4ops::cuda
