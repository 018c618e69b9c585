// Launchers for amax and the NVFP4 / MXFP4 quantizers: checks, device guard, current stream.
// Nothing here synchronizes with the host, so every op can be captured in a CUDA graph.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "../common/op_checks.h"
#include "cooperative_launch.h"
#include "kernels_cuda.h"
#include "launch_utils.h"
#include "quantize_kernels.cuh"

namespace fp4ops::cuda {

namespace {

constexpr int kThreads = 256;
// Chunks per thread, at most (grid_for; docs/performance.md, "Grid sizing of the element-wise
// kernels").
constexpr int64_t kQuantizeMaxSteps = 8;
// Dynamic NVFP4 of a decode step's activations runs as one launch, cheaper than the zeroing, an
// amax launch and a quantize launch: one block where its threads hold the input at a chunk a thread
// (its reads then take one step, as a cluster's would, without the cluster's exchange); else one
// thread-block cluster of a chunk a thread (up to 64 rows of 4096 in 16-bit x) where the GPU and
// the code have clusters, or else one block up to kSingleBlockMaxNumel elements.
constexpr int kClusterQuantizeThreads = 256;
constexpr int64_t kSingleBlockMaxNumel = 1 << 16;
constexpr int kSingleBlockThreads = 1024;

// amax of at most this many bytes runs as one launch of one block (amax_single_block_kernel), whose
// 1024 threads take every group of eight elements in one step of two groups: up to 16384 16-bit
// elements (four rows of 4096), where a decode step's zeroing launch cost more than the reads.
constexpr int64_t kAmaxSingleBlockMaxBytes = 32 * 1024;

// amax of `input` (contiguous) into the fp32 scalar `out`: one block for small inputs; else
// zero_words_kernel zeroes it and the amax kernel runs as its programmatic dependent.
void launch_amax(const at::Tensor& input, at::Tensor& out, cudaStream_t stream) {
  const int64_t numel = input.numel();
  dispatch_float_type(input.scalar_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(input.const_data_ptr());
    with_bool(is_aligned(x, 16), [&](auto aligned) {
      constexpr bool kAligned = decltype(aligned)::value;
      if (numel * static_cast<int64_t>(sizeof(T)) <= kAmaxSingleBlockMaxBytes) {
        launch_dependent(amax_single_block_kernel<T, kAligned>, 1, kSingleBlockThreads, stream, x, numel,
                         out.mutable_data_ptr<float>());
        return;
      }
      uint32_t* out_bits = reinterpret_cast<uint32_t*>(out.mutable_data_ptr<float>());
      zero_words_kernel<<<1, 1, 0, stream>>>(out_bits, 1);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      const unsigned grid = grid_for(numel / 8 + 1, kThreads);
      launch_dependent(amax_kernel<T, kAligned>, grid, kThreads, stream, x, numel, out_bits);
    });
  });
}

// Calls fn(x, num_chunks, scale_index, aligned) with `input`'s element type resolved: x its typed
// pointer, num_chunks its 32-byte chunks, scale_index the layout `swizzled` names for blocks of
// `block` elements, aligned whether x is 16-byte aligned, as with_bool passes it (one instance per
// case).
// K is a multiple of 16 (NVFP4) or 32 (MXFP4), so a tensor is whole 32-byte chunks of bf16/fp16
// (16 elements) or fp32 (8 elements); 32 fp32 elements also fill whole MXFP4 blocks.
template <class Fn>
void with_quantize_input(const at::Tensor& input, bool swizzled, int block, Fn&& fn) {
  dispatch_float_type(input.scalar_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(input.const_data_ptr());
    const int64_t num_chunks = input.numel() / kElemsPer32Bytes<T>;
    with_scale_index(swizzled, input.sizes(), input.size(-1) / block, [&](auto scale_index) {
      with_bool(is_aligned(x, 16), [&](auto aligned) { fn(x, num_chunks, scale_index, aligned); });
    });
  });
}

// The element type behind with_quantize_input's x.
template <class Pointer>
using ElementOf = std::remove_cv_t<std::remove_pointer_t<Pointer>>;

// Scales go where `swizzled` says (SPEC 4); swizzled outputs were allocated zeroed. The quantize
// kernels launch as programmatic dependents of the kernel before them, which they wait for before
// reading (its launch overlaps that kernel's end, such as a linear's reduction).
template <class Source>
void launch_quantize(const at::Tensor& input, const Source& source, QuantizedOutputs& out, bool swizzled,
                     cudaStream_t stream) {
  uint8_t* data = out.data.mutable_data_ptr<uint8_t>();
  uint8_t* scales = static_cast<uint8_t*>(out.scales.mutable_data_ptr());
  const int block = Source::Format::kBlock;
  with_quantize_input(input, swizzled, block, [&](auto x, int64_t num_chunks, auto scale_index, auto aligned) {
    using T = ElementOf<decltype(x)>;
    const unsigned grid = grid_for(num_chunks, kThreads, kQuantizeMaxSteps);  // >= 1: block 0 also publishes g
    launch_dependent(quantize_kernel<T, decltype(aligned)::value, Source, decltype(scale_index)>, grid, kThreads,
                     stream, x, num_chunks, source, data, scales, scale_index);
  });
}

void launch_quantize_nvfp4_single_block(const at::Tensor& input, at::Tensor& scale_out, QuantizedOutputs& out,
                                        bool swizzled, cudaStream_t stream) {
  uint8_t* data = out.data.mutable_data_ptr<uint8_t>();
  uint8_t* scales = static_cast<uint8_t*>(out.scales.mutable_data_ptr());
  float* g = scale_out.mutable_data_ptr<float>();
  with_quantize_input(input, swizzled, kNvfp4Block, [&](auto x, int64_t num_chunks, auto scale_index, auto aligned) {
    using T = ElementOf<decltype(x)>;
    launch_dependent(quantize_nvfp4_single_block_kernel<T, decltype(aligned)::value, decltype(scale_index)>, 1,
                     kSingleBlockThreads, stream, x, num_chunks, g, data, scales, scale_index);
  });
}

// Launches quantize_nvfp4_cluster_kernel over `input` (not empty), a chunk a thread, where one
// cluster of kClusterQuantizeThreads to kClusterQuantizeMaxThreads a CTA holds it (false where it
// launches nothing).
bool launch_quantize_nvfp4_cluster(const at::Tensor& input, at::Tensor& scale_out, QuantizedOutputs& out, bool swizzled,
                                   cudaStream_t stream) {
  uint8_t* data = out.data.mutable_data_ptr<uint8_t>();
  uint8_t* scales = static_cast<uint8_t*>(out.scales.mutable_data_ptr());
  float* g = scale_out.mutable_data_ptr<float>();
  bool launched = false;
  with_quantize_input(input, swizzled, kNvfp4Block, [&](auto x, int64_t num_chunks, auto scale_index, auto aligned) {
    using T = ElementOf<decltype(x)>;
    const auto kernel = quantize_nvfp4_cluster_kernel<T, decltype(aligned)::value, decltype(scale_index)>;
    launched = launch_one_cluster_of_fewest_threads(kernel, num_chunks, kClusterQuantizeThreads,
                                                    kClusterQuantizeMaxThreads, stream, x, num_chunks, g, data,
                                                    scales, scale_index);
  });
  return launched;
}

}  // namespace

at::Tensor amax(const at::Tensor& x) {
  check_float_input(x, "x");
  const LaunchDevice launch_device(x.device());
  const at::Tensor input = x.contiguous();
  at::Tensor out = at::empty({}, x.options().dtype(at::kFloat));
  launch_amax(input, out, at::cuda::getCurrentCUDAStream());
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_nvfp4(const at::Tensor& x,
                                                              const std::optional<at::Tensor>& global_scale,
                                                              const std::string& scale_layout) {
  check_float_input(x, "x");
  check_last_dim_multiple(x, "x", kNvfp4Block);
  const bool swizzled = parse_scale_layout(scale_layout);
  // Before the guard: a CPU x with a CUDA global_scale dispatches here too.
  if (global_scale.has_value()) check_global_scale(*global_scale, x, "x");
  const LaunchDevice launch_device(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor input = x.contiguous();
  QuantizedOutputs out = allocate_quantized(x, kNvfp4Block, at::kFloat8_e4m3fn, swizzled);
  at::Tensor g = at::empty({}, x.options().dtype(at::kFloat));
  if (global_scale.has_value()) {
    const at::Tensor given = global_scale->reshape({}).contiguous();
    launch_quantize(input, Nvfp4Source{given.const_data_ptr<float>(), false, g.mutable_data_ptr<float>()}, out, swizzled, stream);
  } else if (input.numel() * input.element_size() / 32 <= kSingleBlockThreads ||  // 32-byte chunks
             !launch_quantize_nvfp4_cluster(input, g, out, swizzled, stream)) {
    if (input.numel() <= kSingleBlockMaxNumel) {
      launch_quantize_nvfp4_single_block(input, g, out, swizzled, stream);
    } else {
      at::Tensor amax_value = at::empty({}, x.options().dtype(at::kFloat));
      launch_amax(input, amax_value, stream);
      launch_quantize(input, Nvfp4Source{amax_value.const_data_ptr<float>(), true, g.mutable_data_ptr<float>()}, out,
                      swizzled, stream);
    }
  }
  return {out.data, out.scales, g};
}

std::tuple<at::Tensor, at::Tensor> quantize_mxfp4(const at::Tensor& x, const std::string& scale_rule,
                                                  const std::string& scale_layout) {
  check_float_input(x, "x");
  check_last_dim_multiple(x, "x", kMxfp4Block);
  const Mxfp4ScaleRule rule = parse_scale_rule(scale_rule);
  const bool swizzled = parse_scale_layout(scale_layout);
  const LaunchDevice launch_device(x.device());
  const at::Tensor input = x.contiguous();
  QuantizedOutputs out = allocate_quantized(x, kMxfp4Block, at::kFloat8_e8m0fnu, swizzled);
  if (input.numel() > 0) launch_quantize(input, Mxfp4Source{rule}, out, swizzled, at::cuda::getCurrentCUDAStream());
  return {out.data, out.scales};
}

}  // namespace fp4ops::cuda
