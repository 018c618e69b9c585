// CUDA launchers, registered in register_cuda.cpp.
#pragma once

#include <ATen/ATen.h>

namespace fp4ops::cuda {

at::Tensor cast_to_e2m1(const at::Tensor& x);
at::Tensor cast_from_e2m1(const at::Tensor& data, at::ScalarType dtype);

}  // namespace fp4ops::cuda
