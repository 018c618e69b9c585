// Launchers of the fused producers (SPEC 7): checks, device guard, current stream. Nothing here
// synchronizes with the host, so both ops can be captured in a CUDA graph.
//
// A given NVFP4 global scale, and MXFP4, take one launch. NVFP4 with its own g needs the amax of
// all of y before any block can be encoded. Rows that fit one cooperative grid (a decode step or a
// prefill chunk) run in it, its CTAs holding their input in registers and exchanging
// the amax through one word each and a grid barrier: one launch, one read (where one thread-block
// cluster holds the CTAs, RMSNorm's row groups or SiLU-mul's y: that cluster, exchanging through
// shared memory). More rows take two
// passes over the whole GPU (the first only reduces the amax of y and writes the new residual),
// the first behind zero_words_kernel as its programmatic dependent. Every kernel here is a
// programmatic dependent of the kernel before it (where its code waits for that kernel): the
// grid-wide passes through launch_dependent (launch_utils.h), the one-launch grid and cluster
// through cooperative_launch.h.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "../common/producer_checks.h"
#include "cooperative_launch.h"
#include "kernels_cuda.h"
#include "launch_utils.h"
#include "producers_kernels.cuh"
#include "silu_mul_octet_kernels.cuh"

namespace fp4ops::cuda {

namespace {

constexpr int kSiluThreads = 256;
constexpr int64_t kSiluMaxSteps = 8;  // blocks per thread, at most (grid_for)
// NVFP4 with its own g over at most this many rows runs as one launch that holds all of its input
// at once (the *_one_launch_kernel): a cooperative grid of CTAs of one or more RMSNorm rows, or
// of kSiluOneLaunchThreads or more output blocks (rms_one_launch_threads, silu_one_launch_threads),
// where the GPU holds every CTA at once; else the zeroing and two grid-wide passes
// (docs/performance.md, "Fused producers").
// Both: a decode step or a prefill chunk (16-bit x: RMSNorm two CTAs per SM, 8 rows of 4096 an
// SM; SiLU-mul two output blocks a thread).
constexpr int64_t kRmsOneLaunchMaxRows = 1024, kSiluOneLaunchMaxRows = 1024;
// SiLU-mul over few outputs (silu_mul_octet_kernels.cuh): a given g and MXFP4 take a thread per
// octet of y up to kSiluOctetsMaxOutputs outputs; NVFP4 with its own g one thread-block cluster
// where one holds y, an octet a thread (docs/performance.md, "Fused producers").
constexpr int64_t kSiluOctetsMaxOutputs = int64_t{1} << 21;

// Threads per CTA of a one-launch grid over `work` units (rows or output blocks), a CTA of t
// threads taking units_per_cta(t) of them: the most, doubling from `threads` up to `max_threads`,
// that leave at least a CTA per SM. Every CTA takes part in the exchange's grid barrier and reads
// every CTA's word after it, so fewer, larger CTAs make the exchange cheaper once there are more
// CTAs than SMs (docs/performance.md, "Fused producers").
template <typename UnitsPerCta>
int one_launch_threads(int64_t work, int threads, int max_threads, UnitsPerCta&& units_per_cta) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  while (threads * 2 <= max_threads && (work + units_per_cta(threads * 2) - 1) / units_per_cta(threads * 2) >= sms) threads *= 2;
  return threads;
}

// The one-launch RMSNorm grid: one CTA of at most kRmsOneCtaMaxThreads where it holds every row
// (2 rows of 4096, 1 of 8192), which then needs no grid barrier (grid_finite_amax); else row
// groups of as many rows as leave about a CTA per SM (at other decode rows, a row a CTA). Larger
// single CTAs (4 rows of 4096 in 512 threads) ran slower than a CTA a row and the barrier
// (docs/performance.md, "Fused producers").
constexpr int kRmsOneCtaMaxThreads = 256;
int rms_one_launch_threads(int64_t rows, int row_threads) {
  const int min_threads = std::max(row_threads, kRmsMinThreads);
  if (rows * row_threads <= kRmsOneCtaMaxThreads) {
    return static_cast<int>(std::max<int64_t>(next_power_of_two(rows * row_threads), min_threads));
  }
  return one_launch_threads(rows, min_threads, kRmsMaxRowThreads, [&](int threads) { return int64_t{threads / row_threads}; });
}

// The one-launch SiLU-mul grid with `blocks_per_thread` output blocks a thread: from
// kSiluOneLaunchThreads up to kSiluOneLaunchMaxThreads.
int silu_one_launch_threads(int64_t num_blocks, int blocks_per_thread) {
  return one_launch_threads(num_blocks, kSiluOneLaunchThreads, kSiluOneLaunchMaxThreads,
                            [&](int threads) { return int64_t{blocks_per_thread} * threads; });
}

// Launches a one-launch kernel over `work` units (rows or blocks), `per_cta` of them per CTA, as
// one cooperative grid of just enough CTAs, with the exchange's words (one per CTA, on `options`'
// device) as the kernel's last argument. False (nothing launched) where the GPU has no
// cooperative launch or cannot hold every CTA at once: the caller takes the two-launch path.
template <typename... KernelArgs, typename... Args>
bool launch_one_grid(void (*kernel)(KernelArgs...), int64_t work, int64_t per_cta, int threads, size_t smem, int device,
                     const at::TensorOptions& options, cudaStream_t stream, Args&&... args) {
  const int64_t ctas = (work + per_cta - 1) / per_cta;
  if (!at::cuda::getCurrentDeviceProperties()->cooperativeLaunch) return false;
  allow_dynamic_smem(kernel, smem, device);
  if (ctas > resident_ctas(kernel, threads, smem, static_cast<size_t>(device))) return false;
  const at::Tensor words = at::empty({ctas}, options.dtype(at::kInt));
  launch_cooperative(kernel, static_cast<int>(ctas), threads, smem, stream, std::forward<Args>(args)...,
                     reinterpret_cast<uint32_t*>(words.mutable_data_ptr<int>()));
  return true;
}

// Launches silu_mul_quantize_cluster_kernel over all of y, an octet a thread, where one cluster of
// kSiluClusterThreads to kSiluClusterMaxThreads a CTA holds it (false where it launches nothing).
template <typename T, class ScaleIndex>
bool launch_silu_cluster(const SiluMulArgs<T>& args, float* g_out, uint8_t* data, uint8_t* scales,
                         const ScaleIndex& scale_index, cudaStream_t stream) {
  const int64_t octets = args.num_blocks * (kNvfp4Block / kOctet);
  return launch_one_cluster_of_fewest_threads(silu_mul_quantize_cluster_kernel<T, ScaleIndex>, octets, kSiluClusterThreads,
                                              kSiluClusterMaxThreads, stream, args, g_out, data, scales, scale_index);
}

// The outputs every producer returns: codes and scales of `logical`, and g (NVFP4) or an empty
// placeholder (MXFP4).
struct ProducerOutputs {
  QuantizedOutputs quantized;
  at::Tensor g;
};

ProducerOutputs allocate_producer_outputs(at::IntArrayRef logical, const at::Tensor& x, const ProducerTarget& target) {
  const at::ScalarType scale_dtype = target.nvfp4 ? at::kFloat8_e4m3fn : at::kFloat8_e8m0fnu;
  return {allocate_quantized(logical, x.options(), target.block(), scale_dtype, target.swizzled),
          target.nvfp4 ? at::empty({}, x.options().dtype(at::kFloat)) : empty_placeholder(x, at::kFloat)};
}

// Calls launch(source) for the target: MXFP4 and a given g once; NVFP4 with its own g first with
// an AmaxTarget (behind the zeroing of its word), then with an Nvfp4Source reading that amax.
template <typename Launch>
void with_sources(const ProducerTarget& target, const std::optional<at::Tensor>& global_scale, ProducerOutputs& out,
                  const at::Tensor& x, cudaStream_t stream, Launch&& launch) {
  if (!target.nvfp4) return launch(Mxfp4Source{target.rule});
  float* g_out = out.g.mutable_data_ptr<float>();
  if (global_scale.has_value()) {
    const at::Tensor given = global_scale->reshape({}).contiguous();
    return launch(Nvfp4Source{given.const_data_ptr<float>(), false, g_out});
  }
  at::Tensor amax_value = at::empty({}, x.options().dtype(at::kFloat));
  uint32_t* amax_bits = reinterpret_cast<uint32_t*>(amax_value.mutable_data_ptr<float>());
  zero_words_kernel<<<1, 1, 0, stream>>>(amax_bits, 1);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch(AmaxTarget{amax_bits});
  launch(Nvfp4Source{amax_value.const_data_ptr<float>(), true, g_out});
}

// With no rows there is nothing to launch, but g still has its value: the given one, or that of
// an amax of 0 (SPEC 2.2: 1).
void set_empty_global_scale(ProducerOutputs& out, const ProducerTarget& target,
                            const std::optional<at::Tensor>& global_scale) {
  if (!target.nvfp4) return;
  if (global_scale.has_value()) {
    out.g.copy_(global_scale->reshape({}));
  } else {
    out.g.fill_(1.0f);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> rms_norm_quantize(
    const at::Tensor& x, const at::Tensor& weight, double eps, const std::optional<at::Tensor>& residual,
    const std::string& format, const std::optional<at::Tensor>& global_scale, const std::string& scale_rule,
    const std::string& scale_layout, bool return_intermediate) {
  const ProducerTarget target = parse_producer_target(format, global_scale, scale_rule, scale_layout, x);
  check_rms_norm_args(x, weight, eps, residual, target);
  const int64_t hidden = x.size(-1);
  TORCH_CHECK(hidden <= kRmsMaxRowThreads * kRmsSpan, "x: the CUDA kernel normalizes rows of at most ",
              int_str(kRmsMaxRowThreads * kRmsSpan), " elements (a row is one thread block's), got ", int_str(hidden));
  const LaunchDevice launch_device(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor input = aligned_contiguous(x);
  const at::Tensor res = residual.has_value() ? aligned_contiguous(*residual) : at::Tensor();
  // The weight as x's dtype or fp32 (exact); another 16-bit dtype is widened to fp32 first.
  const bool weight_as_x = weight.scalar_type() == x.scalar_type();
  const at::Tensor w = aligned_contiguous(weight_as_x ? weight : weight.to(at::kFloat));
  ProducerOutputs out = allocate_producer_outputs(x.sizes(), x, target);
  at::Tensor residual_out = residual.has_value() ? at::empty_like(input) : empty_placeholder(x, x.scalar_type());
  at::Tensor y = return_intermediate ? at::empty(x.sizes(), x.options().dtype(at::kFloat)) : empty_placeholder(x, at::kFloat);
  const int64_t rows = hidden == 0 ? 0 : x.numel() / hidden;
  if (rows == 0) {
    set_empty_global_scale(out, target, global_scale);
    return {out.quantized.data, out.quantized.scales, out.g, residual_out, y};
  }

  const int row_threads = static_cast<int>(std::max<int64_t>(1, next_power_of_two(hidden) / kRmsSpan));
  const int threads = std::max(row_threads, kRmsMinThreads);
  const int64_t row_groups = (rows + threads / row_threads - 1) / (threads / row_threads);
  const int device = x.get_device();
  // A persistent grid, at most as many CTAs as are resident at once: each stages its weights once.
  // MXFP4 without a residual, 16-bit x on sm_90+, also streams its rows through a shared-memory
  // stage (rms_norm_rows_staged) where a row spans warps (input is 16-byte aligned:
  // aligned_contiguous): its kernel, built for one CTA per SM, holds the fewest loads in flight.
  const bool staged_rows = !target.nvfp4 && at::cuda::getCurrentDeviceProperties()->major >= 9 && x.element_size() == 2 &&
                           row_threads >= 64;
  const size_t stage_bytes = static_cast<size_t>(threads / row_threads) * static_cast<size_t>(hidden) * x.element_size();
  const auto launch_rows = [&](auto kernel, auto&& args, auto&&... kernel_args) {
    const size_t smem = rms_smem_bytes(threads) + (args.staged_rows ? stage_bytes : 0);
    allow_dynamic_smem(kernel, smem, device);
    const int resident = resident_ctas(kernel, threads, smem, static_cast<size_t>(device));
    const auto grid = static_cast<unsigned>(std::min<int64_t>(row_groups, resident));
    launch_dependent(kernel, dim3(grid), threads, smem, stream, args, kernel_args...);
  };
  uint8_t* data = out.quantized.data.mutable_data_ptr<uint8_t>();
  uint8_t* scales = static_cast<uint8_t*>(out.quantized.scales.mutable_data_ptr());
  float* intermediate = return_intermediate ? y.mutable_data_ptr<float>() : nullptr;
  dispatch_float_type(x.scalar_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto run = [&](auto weight_tag) {
      using W = typename decltype(weight_tag)::type;
      const RmsNormArgs<T, W> first_pass{
          static_cast<const T*>(input.const_data_ptr()),
          res.defined() ? static_cast<const T*>(res.const_data_ptr()) : nullptr,
          res.defined() ? static_cast<T*>(residual_out.mutable_data_ptr()) : nullptr,
          static_cast<const W*>(w.const_data_ptr()),
          intermediate, rows, static_cast<int>(hidden), row_threads, static_cast<float>(eps)};
      if (target.nvfp4 && !global_scale.has_value() && rows <= kRmsOneLaunchMaxRows) {
        bool launched = false;
        with_scale_index(target.swizzled, x.sizes(), hidden / target.block(), [&](auto scale_index) {
          with_bool(res.defined(), [&](auto with_residual) {
            constexpr bool kResidual = decltype(with_residual)::value;
            using Index = decltype(scale_index);
            // A CTA per SM where the grid fits so; else, for 16-bit x, the instance that fits two.
            constexpr int kDense = kRmsCtasPerSm<T, kResidual, Nvfp4Source>;
            const int one_threads = rms_one_launch_threads(rows, row_threads);
            // Row groups of more than one CTA exchange within one cluster where one holds them.
            const int64_t ctas = (rows + one_threads / row_threads - 1) / (one_threads / row_threads);
            if (ctas > 1 && launch_one_cluster_if_scheduled(rms_norm_quantize_cluster_kernel<T, W, kResidual, Index>, ctas,
                                                            one_threads, rms_smem_bytes(one_threads), stream, first_pass,
                                                            out.g.mutable_data_ptr<float>(), data, scales, scale_index)) {
              launched = true;
              return;
            }
            const auto launch = [&](auto kernel) {
              return launch_one_grid(kernel, rows, one_threads / row_threads, one_threads, rms_smem_bytes(one_threads), device,
                                     x.options(), stream, first_pass, out.g.mutable_data_ptr<float>(), data, scales, scale_index);
            };
            launched = launch(rms_norm_quantize_one_launch_kernel<T, W, kResidual, Index, 1>);
            if constexpr (kDense > 1) {
              if (!launched) launched = launch(rms_norm_quantize_one_launch_kernel<T, W, kResidual, Index, kDense>);
            }
          });
        });
        if (launched) return;
      }
      with_sources(target, global_scale, out, x, stream, [&](auto source) {
        using Source = decltype(source);
        RmsNormArgs<T, W> args = first_pass;
        args.staged_rows = staged_rows && args.residual == nullptr;
        if constexpr (std::is_same_v<Source, AmaxTarget>) {
          args.intermediate = nullptr;
          with_bool(res.defined(), [&](auto with_residual) {
            launch_rows(rms_norm_quantize_kernel<T, W, decltype(with_residual)::value, AmaxTarget, LinearScales>,
                        args, source, data, scales, LinearScales{});
          });
          return;
        } else {
          // After an amax pass the residual add is done: normalize its output, h.
          const bool after_amax = target.nvfp4 && !global_scale.has_value();
          if (after_amax && res.defined()) {
            args.x = args.residual_out;  // a fresh tensor: aligned
            args.residual = nullptr;
            args.residual_out = nullptr;
            args.staged_rows = staged_rows;
          }
          with_scale_index(target.swizzled, x.sizes(), hidden / target.block(), [&](auto scale_index) {
            using Index = decltype(scale_index);
            with_bool(args.residual != nullptr, [&](auto with_residual) {
              launch_rows(rms_norm_quantize_kernel<T, W, decltype(with_residual)::value, Source, Index>,
                          args, source, data, scales, scale_index);
            });
          });
        }
      });
    };
    if (weight_as_x) {
      run(TypeTag<T>{});
    } else {
      run(TypeTag<float>{});
    }
  });
  return {out.quantized.data, out.quantized.scales, out.g, residual_out, y};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> silu_mul_quantize(
    const at::Tensor& x, const std::string& format, const std::optional<at::Tensor>& global_scale,
    const std::string& scale_rule, const std::string& scale_layout, bool return_intermediate) {
  const ProducerTarget target = parse_producer_target(format, global_scale, scale_rule, scale_layout, x);
  check_silu_mul_args(x, target);
  const LaunchDevice launch_device(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor input = aligned_contiguous(x);
  const int64_t width = x.size(-1) / 2;
  const std::vector<int64_t> logical = with_last_dim(x, width);
  ProducerOutputs out = allocate_producer_outputs(logical, x, target);
  at::Tensor y = return_intermediate ? at::empty(logical, x.options().dtype(at::kFloat)) : empty_placeholder(x, at::kFloat);
  const int64_t rows = width == 0 ? 0 : x.numel() / (2 * width);
  if (rows == 0) {
    set_empty_global_scale(out, target, global_scale);
    return {out.quantized.data, out.quantized.scales, out.g, y};
  }
  uint8_t* data = out.quantized.data.mutable_data_ptr<uint8_t>();
  uint8_t* scales = static_cast<uint8_t*>(out.quantized.scales.mutable_data_ptr());
  const auto args_for = [&](auto tag, int64_t block) {
    using T = typename decltype(tag)::type;
    const int64_t num_blocks = rows * width / block;
    const bool small = num_blocks < (int64_t{1} << 32);
    return SiluMulArgs<T>{static_cast<const T*>(input.const_data_ptr()),
                          return_intermediate ? y.mutable_data_ptr<float>() : nullptr,
                          num_blocks,
                          width / block,
                          FastDivU32::make(small ? static_cast<uint32_t>(width / block) : 1u),
                          width};
  };
  dispatch_float_type(x.scalar_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (target.nvfp4 && !global_scale.has_value()) {
      bool launched = false;
      with_scale_index(target.swizzled, logical, width / target.block(), [&](auto scale_index) {
        launched = launch_silu_cluster(args_for(tag, target.block()), out.g.mutable_data_ptr<float>(), data, scales,
                                       scale_index, stream);
      });
      if (launched) return;
    }
    if (target.nvfp4 && !global_scale.has_value() && rows <= kSiluOneLaunchMaxRows) {
      const SiluMulArgs<T> args = args_for(tag, target.block());
      bool launched = false;
      with_scale_index(target.swizzled, logical, width / target.block(), [&](auto scale_index) {
        using Index = decltype(scale_index);
        const auto launch = [&](auto kernel, int blocks_per_thread) {
          const int threads = blocks_per_thread == 1 ? kSiluOneLaunchThreads : silu_one_launch_threads(args.num_blocks, blocks_per_thread);
          return launch_one_grid(kernel, args.num_blocks, int64_t{blocks_per_thread} * threads, threads, 0, x.get_device(),
                                 x.options(), stream, args, out.g.mutable_data_ptr<float>(), data, scales, scale_index);
        };
        // One output block a thread where the grid fits so; else, for 16-bit x, two.
        launched = launch(silu_mul_quantize_one_launch_kernel<T, Index, 1>, 1);
        if constexpr (sizeof(T) == 2) {
          if (!launched) launched = launch(silu_mul_quantize_one_launch_kernel<T, Index, 2>, 2);
        }
      });
      if (launched) return;
    }
    with_sources(target, global_scale, out, x, stream, [&](auto source) {
      using Source = decltype(source);
      SiluMulArgs<T> args = args_for(tag, target.block());
      const unsigned grid = grid_for(args.num_blocks, kSiluThreads, kSiluMaxSteps);
      if constexpr (std::is_same_v<Source, AmaxTarget>) {
        args.intermediate = nullptr;
        launch_dependent(silu_mul_quantize_kernel<T, AmaxTarget, LinearScales>, dim3(grid), kSiluThreads, 0, stream,
                         args, source, data, scales, LinearScales{});
      } else if (rows * width <= kSiluOctetsMaxOutputs) {
        const int64_t octets = args.num_blocks * (target.block() / kOctet);  // a thread each
        const auto octet_grid = static_cast<unsigned>((octets + kSiluThreads - 1) / kSiluThreads);
        with_scale_index(target.swizzled, logical, width / target.block(), [&](auto scale_index) {
          launch_dependent(silu_mul_quantize_octets_kernel<T, Source, decltype(scale_index)>, dim3(octet_grid),
                           kSiluThreads, 0, stream, args, source, data, scales, scale_index);
        });
      } else {
        with_scale_index(target.swizzled, logical, width / target.block(), [&](auto scale_index) {
          launch_dependent(silu_mul_quantize_kernel<T, Source, decltype(scale_index)>, dim3(grid), kSiluThreads, 0,
                           stream, args, source, data, scales, scale_index);
        });
      }
    });
  });
  return {out.quantized.data, out.quantized.scales, out.g, y};
}

}  // namespace fp4ops::cuda
