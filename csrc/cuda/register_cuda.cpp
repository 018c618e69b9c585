#include <torch/library.h>

#include "kernels_cuda.h"

TORCH_LIBRARY_IMPL(fp4ops, CUDA, m) {
  m.impl("amax", &fp4ops::cuda::amax);
  m.impl("quantize_nvfp4", &fp4ops::cuda::quantize_nvfp4);
  m.impl("quantize_mxfp4", &fp4ops::cuda::quantize_mxfp4);
  m.impl("dequantize_nvfp4", &fp4ops::cuda::dequantize_nvfp4);
  m.impl("dequantize_mxfp4", &fp4ops::cuda::dequantize_mxfp4);
  m.impl("quantize_nvfp4_recipe", &fp4ops::cuda::quantize_nvfp4_recipe);
  m.impl("swizzle_scales", &fp4ops::cuda::swizzle_scales);
  m.impl("unswizzle_scales", &fp4ops::cuda::unswizzle_scales);
  m.impl("cast_to_e2m1", &fp4ops::cuda::cast_to_e2m1);
  m.impl("cast_from_e2m1", &fp4ops::cuda::cast_from_e2m1);
  m.impl("gemv_fp4_dense", &fp4ops::cuda::gemv_fp4_dense);
  m.impl("gemv_fp4_fp4", &fp4ops::cuda::gemv_fp4_fp4);
  m.impl("linear", &fp4ops::cuda::linear);
  m.impl("rms_norm_quantize", &fp4ops::cuda::rms_norm_quantize);
  m.impl("silu_mul_quantize", &fp4ops::cuda::silu_mul_quantize);
}
