#include <torch/library.h>

#include "kernels_cpu.h"

TORCH_LIBRARY_IMPL(fp4ops, CPU, m) {
  m.impl("amax", &fp4ops::cpu::amax);
  m.impl("quantize_nvfp4", &fp4ops::cpu::quantize_nvfp4);
  m.impl("quantize_mxfp4", &fp4ops::cpu::quantize_mxfp4);
  m.impl("dequantize_nvfp4", &fp4ops::cpu::dequantize_nvfp4);
  m.impl("dequantize_mxfp4", &fp4ops::cpu::dequantize_mxfp4);
  m.impl("quantize_nvfp4_recipe", &fp4ops::cpu::quantize_nvfp4_recipe);
  m.impl("swizzle_scales", &fp4ops::cpu::swizzle_scales);
  m.impl("unswizzle_scales", &fp4ops::cpu::unswizzle_scales);
  m.impl("cast_to_e2m1", &fp4ops::cpu::cast_to_e2m1);
  m.impl("cast_from_e2m1", &fp4ops::cpu::cast_from_e2m1);
  m.impl("gemv_fp4_dense", &fp4ops::cpu::gemv_fp4_dense);
  m.impl("gemv_fp4_fp4", &fp4ops::cpu::gemv_fp4_fp4);
  m.impl("linear", &fp4ops::cpu::linear);
  m.impl("rms_norm_quantize", &fp4ops::cpu::rms_norm_quantize);
  m.impl("silu_mul_quantize", &fp4ops::cpu::silu_mul_quantize);
}
