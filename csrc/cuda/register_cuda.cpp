#include <torch/library.h>

#include "kernels_cuda.h"

// The CUDA kernels of amax, quantize and dequantize are not written yet: on CUDA tensors those
// ops fail in the dispatcher with a message naming the missing CUDA kernel.
TORCH_LIBRARY_IMPL(fp4ops, CUDA, m) {
  m.impl("cast_to_e2m1", &fp4ops::cuda::cast_to_e2m1);
  m.impl("cast_from_e2m1", &fp4ops::cuda::cast_from_e2m1);
}
