// What each CUDA architecture gives fp4ops, in one table. Kernels test these macros for a
// feature, never an __CUDA_ARCH__ number (`defined(__CUDA_ARCH__)` only tells device code from host
// code); python/fp4ops/_build.py reads FP4OPS_MIN_CUDA_ARCH from this file, so the build refuses
// what the kernels cannot compile for.
//
// | macro               | instructions it allows                              | device passes         |
// |---------------------|-----------------------------------------------------|-----------------------|
// | (minimum)           | cp.async, mma.sync bf16, redux, max.bf16x2          | sm_80 and later       |
// | FP4OPS_HW_MAX_ABS16 | max.NaN.xorsign.abs on bf16x2 / f16x2               | sm_86 and later       |
// | FP4OPS_HW_E4M3      | cvt f32 -> e4m3x2, cvt e4m3x2 -> f16x2              | sm_89 and later       |
// | FP4OPS_HW_PDL       | griddepcontrol (programmatic dependent launch),     | sm_90 and later       |
// |                     | cp.async.bulk.prefetch.L2                           |                       |
// | FP4OPS_HW_CLUSTER   | thread-block clusters: barrier.cluster, mapa,       | sm_90 and later       |
// |                     | st.async into a peer CTA's shared memory            |                       |
// | FP4OPS_HW_WGMMA     | wgmma.mma_async (warpgroup MMA), fence.proxy.async  | sm_90a                |
// | FP4OPS_HW_FP4       | cvt f32 -> e2m1x2, cvt e2m1x2 -> f16x2              | sm_100a, sm_103a,     |
// |                     |                                                     | sm_120a, sm_121a, 'f' |
//
// Below each feature's architecture the kernels take a software path with the same bits (the
// software E4M3 and fp16 decodes, the max on widened values), which the tests hold to the
// contract like the hardware paths. A plain (not arch-specific) Blackwell pass lacks the E2M1
// cvt; rather than fall back to the slow path without anyone noticing, it does not compile. Host code (the CPU kernels, the launchers) sees none of these macros and takes the
// software paths, which the tests hold to the same bits.
//
// FP4OPS_HW_WGMMA has no software path: the kernels that need it are launched only on compute
// capability 9.0 in a build with an sm_90a pass (host code sees FP4OPS_BUILD_HAS_SM90A, which
// _build.py defines for such builds), and in the other passes their bodies trap. Nor has
// FP4OPS_HW_CLUSTER: the one-cluster kernels are launched only on compute capability 9.0 and later
// where the kernel's code has clusters (the launchers check its PTX version), and in the other
// passes their bodies trap. Likewise a kernel is launched as a programmatic dependent only where its
// code has FP4OPS_HW_PDL's wait (launch_dependent checks its PTX version), and plainly elsewhere.
#pragma once

// Compute capability x 10, as _build.py's parse_cuda_archs counts it.
#define FP4OPS_MIN_CUDA_ARCH 80

#if defined(__CUDA_ARCH__)

#if __CUDA_ARCH__ < FP4OPS_MIN_CUDA_ARCH * 10
#error "fp4ops: the kernels need compute capability 8.0 or later (see csrc/common/arch.h)"
#endif

#if (defined(__CUDA_ARCH_SPECIFIC__) && __CUDA_ARCH_SPECIFIC__ >= 1000) || \
    (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000)
#define FP4OPS_HW_FP4 1
#elif __CUDA_ARCH__ >= 1000
#error "fp4ops: Blackwell must be built arch-specific (sm_100a/sm_120a), e.g. FP4OPS_CUDA_ARCHS=10.0a"
#endif

#if __CUDA_ARCH__ >= 860
#define FP4OPS_HW_MAX_ABS16 1
#endif

#if __CUDA_ARCH__ >= 890
#define FP4OPS_HW_E4M3 1
#endif

#if __CUDA_ARCH__ >= 900
#define FP4OPS_HW_PDL 1
#define FP4OPS_HW_CLUSTER 1
#endif

// Hopper's warpgroup MMA exists in the arch-specific pass only (python/fp4ops/_build.py builds
// every 9.0 entry as sm_90a); Blackwell has no wgmma.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP4OPS_HW_WGMMA 1
#endif

#endif  // __CUDA_ARCH__
