// Every fp4ops operator schema, in one place. Kernels register per dispatch key in
// cpu/register_cpu.cpp and cuda/register_cuda.cu; fakes live in python/fp4ops/_meta.py.
#include <Python.h>
#include <torch/library.h>

// Importing the AOT-built module `fp4ops._C` runs the static registrations below; the module
// itself exposes nothing.
extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

TORCH_LIBRARY(fp4ops, m) {
  // SPEC 2.1: max |x| over the finite elements, fp32 0-dim (0 when none is finite).
  m.def("amax(Tensor x) -> Tensor");
  // SPEC 2: x [..., K] -> (data uint8 [..., K/2], scales float8_e4m3fn [..., K/16],
  // global_scale fp32 0-dim). global_scale None computes amax / 2688 on the tensor's device.
  // scale_layout "swizzled" (SPEC 4) gives scales [..., ceil(rows/128)*128, ceil(K/64)*4].
  m.def("quantize_nvfp4(Tensor x, Tensor? global_scale, str scale_layout=\"linear\") -> (Tensor, Tensor, Tensor)");
  // SPEC 3: x [..., K] -> (data uint8 [..., K/2], scales float8_e8m0fnu [..., K/32]);
  // scale_rule is "floor" or "rceil".
  m.def("quantize_mxfp4(Tensor x, str scale_rule, str scale_layout=\"linear\") -> (Tensor, Tensor)");
  // SPEC 2.6 / 3: back to fp32, fp16 or bf16 [..., K]; scales in either layout.
  m.def("dequantize_nvfp4(Tensor data, Tensor scales, Tensor global_scale, ScalarType dtype, "
        "str scale_layout=\"linear\") -> Tensor");
  m.def("dequantize_mxfp4(Tensor data, Tensor scales, ScalarType dtype, str scale_layout=\"linear\") -> Tensor");
  // NVFP4 with the training-recipe options (docs/recipe.md): rowwise output (x, blocks along K)
  // and/or columnwise output (x^T per matrix, [..., K, rows], blocks along the rows), 16x16 block
  // scales, the 16-point Hadamard rotation (hadamard_signs: -1 none, else a 16-bit sign mask),
  // stochastic rounding when seed is given. Returns (data, scales, global_scale) for each
  // direction; a direction that is off gives empty data/scales. global_scale None derives each
  // direction's g from the amax of what it quantizes (after the rotation).
  m.def("quantize_nvfp4_recipe(Tensor x, Tensor? global_scale, str scale_layout, bool rowwise, bool columnwise, "
        "bool block_2d, int hadamard_signs, int? seed, int offset) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  // SPEC 4: scale codes [..., rows, cols] (or [cols]) <-> the 128x4-atom layout
  // [..., ceil(rows/128)*128, ceil(cols/4)*4], one matrix per leading index, padding zero.
  m.def("swizzle_scales(Tensor scales) -> Tensor");
  m.def("unswizzle_scales(Tensor scales, int rows, int cols) -> Tensor");
  // SPEC 1 with no scaling: x [..., K] (K even) <-> packed E2M1 uint8 [..., K/2].
  m.def("cast_to_e2m1(Tensor x) -> Tensor");
  m.def("cast_from_e2m1(Tensor data, ScalarType dtype) -> Tensor");
  // SPEC 5: y[l, m] = sum_k A[l, m, k] * B[l, k]. A: data uint8 [L, M, K/2] with scales
  // [L, M, K/block] (float8_e4m3fn: NVFP4 with a_global_scale; float8_e8m0fnu: MXFP4, no global
  // scale). B dense fp16/bf16 [L, K], or FP4 of A's format: data [L, K/2], scales [L, K/block].
  // Output [L, M] in out_dtype (fp16, bf16 or fp32).
  m.def("gemv_fp4_dense(Tensor a_data, Tensor a_scales, Tensor? a_global_scale, Tensor b, ScalarType out_dtype) -> Tensor");
  m.def("gemv_fp4_fp4(Tensor a_data, Tensor a_scales, Tensor? a_global_scale, Tensor b_data, Tensor b_scales, "
        "Tensor? b_global_scale, ScalarType out_dtype) -> Tensor");
  // y = x W^T (+ bias), torch.nn.functional.linear's convention. W: data uint8 [N, K/2] with
  // linear scales [N, K/block] (float8_e4m3fn: NVFP4 with w_global_scale; float8_e8m0fnu: MXFP4).
  // x: dense fp16/bf16 [M, K] (x_scales None), or FP4 of W's format: data uint8 [M, K/2] with
  // linear x_scales [M, K/block] and, NVFP4, x_global_scale. bias [N] (fp16, bf16 or fp32) or
  // None. Output [M, N] in out_dtype (fp16, bf16 or fp32); M may be 0. batch_invariant: rows
  // above the tensor-core kernel family's crossover run on it too (in row chunks) instead of
  // dequantize + cuBLAS, so every row's result is independent of the others.
  m.def("linear(Tensor x, Tensor? x_scales, Tensor? x_global_scale, Tensor w_data, Tensor w_scales, "
        "Tensor? w_global_scale, Tensor? bias, ScalarType out_dtype, bool batch_invariant) -> Tensor");
  // Fused producers (SPEC 7): the fp32 intermediate, then the plain quantizer of `format`
  // ("nvfp4": global_scale is g, None derives it from the intermediate's amax on the device;
  // "mxfp4": scale_rule). Returns (data, scales, g, ...): g is an empty tensor for MXFP4, and the
  // new residual stream (rms_norm_quantize with a residual) and the fp32 intermediate
  // (return_intermediate, for tests) are empty tensors when not asked for.
  // rms_norm_quantize: x [..., H], weight [H], residual like x.
  m.def("rms_norm_quantize(Tensor x, Tensor weight, float eps, Tensor? residual, str format, Tensor? global_scale, "
        "str scale_rule, str scale_layout, bool return_intermediate) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  // silu_mul_quantize: x [..., 2H] (gate, then up) -> the quantized [..., H].
  m.def("silu_mul_quantize(Tensor x, str format, Tensor? global_scale, str scale_rule, str scale_layout, "
        "bool return_intermediate) -> (Tensor, Tensor, Tensor, Tensor)");
}
