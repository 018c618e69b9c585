// Launcher for the batched FP4 GEMV: checks, device guard, current stream, dispatch over
// (format, B kind, lane span, output dtype).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <array>
#include <atomic>

#include "../common/op_checks.h"
#include "gemv_kernels.cuh"
#include "gemv_mma.cuh"
#include "kernels_cuda.h"
#include "launch_utils.h"

namespace fp4ops::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

// The tensor-core kernel needs K in whole 128-element ranges, B's staged operands in shared memory
// (K <= kMmaMaxK), scale rows aligned for its 8- or 4-byte copies and a batch count that fits
// grid.y.
constexpr int64_t kMmaMaxK = 32768;

// Warps per tile (warps_k), which fixes the summation order: a function of M and K only, so results
// do not depend on the GPU or on the batch count L (batch-invariant). Few warps per tile, each with
// a long run of segments, stream best while the GPU has warps enough: the fewest (a power of two)
// that give kWarpsWanted warps for one batch (L > 1 only adds more), with at least 8 segments per
// warp and at most 8 warps. The constants were chosen by measurement (docs/performance.md,
// "GEMV: launch rules").
int gemv_warps_per_tile(int64_t tiles, int64_t segments) {
  constexpr int64_t kWarpsWanted = 3000;
  const int64_t most = std::clamp<int64_t>(segments / 8, 1, kMmaMaxWarps);
  int warps_k = 1;
  while (warps_k * 2 <= most && tiles * warps_k < kWarpsWanted) warps_k *= 2;
  return warps_k;
}

// Whether the GPU's DRAM feeds each SM fast enough that the kernel is bound by instruction issue
// rather than by waiting on memory: peak DRAM bytes per second per SM (from the memory clock and
// bus width) at or above kIssueBoundDramBytesPerSm. There the one-CTA-per-SM build, whose loop
// has the registers to keep more work in flight per warp, is the faster one at every size; below
// it, two CTAs per SM hide memory latency better once each SM has work enough. The threshold lies
// between the GPUs measured on either side of it (docs/performance.md, "GEMV: launch rules").
constexpr double kIssueBoundDramBytesPerSm = 30e9;

bool dram_feeds_sms_fast(int device, int64_t sms) {
  static std::array<std::atomic<int>, 64> cached{};  // 0 unknown, 1 no, 2 yes
  if (device >= 0 && device < static_cast<int>(cached.size()) && cached[device].load() != 0) {
    return cached[device].load() == 2;
  }
  int memory_khz = 0, bus_bits = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  const double bytes_per_second = 2.0 * memory_khz * 1e3 * bus_bits / 8.0;  // double data rate
  const bool fast = bytes_per_second / static_cast<double>(sms) >= kIssueBoundDramBytesPerSm;
  if (device >= 0 && device < static_cast<int>(cached.size())) cached[device].store(fast ? 2 : 1);
  return fast;
}

template <class Format, typename BT>
bool launch_mma(const GemvArgs& args, at::Tensor& out, cudaStream_t stream) {
  using Layout = MmaGemvLayout<Format, BT>;
  const int64_t batches = args.rows / args.m;
  if (args.k % kRangeElems != 0 || args.k > kMmaMaxK || batches > 65535 ||
      !is_aligned(args.a_scales, Layout::kBlocksPerRange)) {
    return false;
  }
  const int64_t segments = (args.k + kSegmentElems - 1) / kSegmentElems;
  const int64_t tiles = (args.m + kMmaTileRows - 1) / kMmaTileRows;
  const int warps_k = gemv_warps_per_tile(tiles, segments);
  // Groups per CTA: up to 16 warps, but fewer where the tiles would not fill every SM (with one
  // warp per tile, 16 groups per CTA would put M = 4096, L = 1 on 32 SMs).
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t groups = std::clamp<int64_t>((tiles * batches + sms - 1) / sms, 1, kMmaMaxWarpsPerCta / warps_k);
  const int warps = static_cast<int>(groups) * warps_k;
  const size_t smem = Layout::smem_bytes(segments, warps);
  // Little work per SM: one CTA per SM instead of all that fit, so each CTA's fixed cost (staging B,
  // the ring's first round trip) is spread over more tiles; past kShortWorkSegmentsPerSm, more
  // CTAs per SM hide latency better (docs/performance.md, "GEMV: launch rules"). Only where the
  // batches still spread over >= 90% of the SMs at one CTA each (not e.g. L = 100, which would get
  // 100 CTAs). The summation order does not depend on the grid.
  constexpr int64_t kShortWorkSegmentsPerSm = 640;
  const bool short_work = tiles * batches * segments < kShortWorkSegmentsPerSm * sms &&
                          (sms / batches) * batches * 10 >= sms * 9;
  // The kernel's build (gemv_mma.cuh): the one for one CTA per SM, with the registers that frees,
  // where a call gets one CTA per SM anyway (short work) or the GPU is issue-bound (above); its
  // shifted bf16-B path only on the latter, where it pays for its range check of B
  // (docs/performance.md, "GEMV: launch rules").
  const int device = out.get_device();
  const bool issue_bound = dram_feeds_sms_fast(device, sms);
  const bool one_cta_per_sm = short_work || issue_bound;
  dispatch_float_type(out.scalar_type(), "out_dtype", [&](auto tag) {
    using OutT = typename decltype(tag)::type;
    const auto kernel = one_cta_per_sm ? gemv_mma_kernel_one_cta_per_sm<Format, BT, OutT> : gemv_mma_kernel<Format, BT, OutT>;
    allow_dynamic_smem(kernel, smem, device);
    // As many CTAs as are resident at once, shared among the batches, never more groups than
    // tiles: each group then streams an even share of its batch's tiles in one wave.
    int resident = resident_ctas(kernel, warps * 32, smem, device);
    if (short_work) resident = std::min(resident, static_cast<int>(sms));
    const int64_t per_batch = std::clamp<int64_t>(resident / batches, 1, (tiles + groups - 1) / groups);
    const dim3 grid(static_cast<unsigned>(per_batch), static_cast<unsigned>(batches));
    const MmaSchedule schedule{warps_k, tiles / per_batch, tiles % per_batch, /*shift_bf16_b=*/issue_bound};
    kernel<<<grid, warps * 32, smem, stream>>>(args, static_cast<OutT*>(out.mutable_data_ptr()), schedule);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

template <class Format, typename BT>
void launch(const GemvArgs& args, at::Tensor& out, cudaStream_t stream) {
  if (args.rows == 0) return;
  if (launch_mma<Format, BT>(args, out, stream)) return;
  const unsigned grid = static_cast<unsigned>((args.rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  dispatch_float_type(out.scalar_type(), "out_dtype", [&](auto tag) {
    using OutT = typename decltype(tag)::type;
    OutT* y = static_cast<OutT*>(out.mutable_data_ptr());
    if (args.k % 32 == 0) {
      gemv_kernel<Format, BT, 32, OutT><<<grid, kWarpsPerBlock * 32, 0, stream>>>(args, y);
    } else if constexpr (Format::kBlock == 16) {
      gemv_kernel<Format, BT, 16, OutT><<<grid, kWarpsPerBlock * 32, 0, stream>>>(args, y);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor run(const at::Tensor& a_data, const at::Tensor& a_scales, const std::optional<at::Tensor>& a_global,
               const at::Tensor& b, const at::Tensor* b_scales, const std::optional<at::Tensor>& b_global,
               at::ScalarType out_dtype) {
  const LaunchDevice launch_device(a_data.device());
  const at::Tensor a = aligned_contiguous(a_data), sa = a_scales.contiguous(), bb = aligned_contiguous(b);
  const at::Tensor sb = b_scales ? b_scales->contiguous() : at::Tensor();
  const at::Tensor ga = a_global ? a_global->reshape({}).contiguous() : at::Tensor();
  const at::Tensor gb = b_global ? b_global->reshape({}).contiguous() : at::Tensor();
  at::Tensor out = at::empty({a.size(0), a.size(1)}, a.options().dtype(out_dtype));
  const GemvArgs args{a.const_data_ptr<uint8_t>(),
                      static_cast<const uint8_t*>(sa.const_data_ptr()),
                      a_global ? ga.const_data_ptr<float>() : nullptr,
                      bb.const_data_ptr(),
                      b_scales ? static_cast<const uint8_t*>(sb.const_data_ptr()) : nullptr,
                      b_global ? gb.const_data_ptr<float>() : nullptr,
                      a.size(0) * a.size(1),
                      a.size(1),
                      a.size(2) * 2};
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const bool nvfp4 = sa.scalar_type() == at::kFloat8_e4m3fn;
  const auto with_format = [&](auto format_tag) {
    using Format = typename decltype(format_tag)::type;
    if (b_scales != nullptr) return launch<Format, uint8_t>(args, out, stream);
    if (bb.scalar_type() == at::kHalf) return launch<Format, __half>(args, out, stream);
    return launch<Format, __nv_bfloat16>(args, out, stream);
  };
  if (nvfp4) {
    with_format(TypeTag<Nvfp4Format>{});
  } else {
    with_format(TypeTag<Mxfp4Format>{});
  }
  return out;
}

}  // namespace

at::Tensor gemv_fp4_dense(const at::Tensor& a_data, const at::Tensor& a_scales,
                          const std::optional<at::Tensor>& a_global_scale, const at::Tensor& b,
                          at::ScalarType out_dtype) {
  check_gemv_a(a_data, a_scales, a_global_scale);
  check_gemv_b(a_data, a_scales, b, nullptr, std::nullopt);
  check_gemv_out_dtype(out_dtype);
  return run(a_data, a_scales, a_global_scale, b, nullptr, std::nullopt, out_dtype);
}

at::Tensor gemv_fp4_fp4(const at::Tensor& a_data, const at::Tensor& a_scales,
                        const std::optional<at::Tensor>& a_global_scale, const at::Tensor& b_data,
                        const at::Tensor& b_scales, const std::optional<at::Tensor>& b_global_scale,
                        at::ScalarType out_dtype) {
  check_gemv_a(a_data, a_scales, a_global_scale);
  check_gemv_b(a_data, a_scales, b_data, &b_scales, b_global_scale);
  check_gemv_out_dtype(out_dtype);
  return run(a_data, a_scales, a_global_scale, b_data, &b_scales, b_global_scale, out_dtype);
}

}  // namespace fp4ops::cuda
