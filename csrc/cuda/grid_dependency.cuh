// The device side of programmatic dependent launch (sm_90 and later; the host side is
// pdl_launch.cuh and launch_dependent, launch_utils.h). Both calls compile to nothing where the
// code has no griddepcontrol (arch.h's FP4OPS_HW_PDL), and such code is launched plainly.
#pragma once

#include "../common/arch.h"

namespace fp4ops::cuda {

// Waits until the grid this one was launched behind has completed and its writes are visible.
// Returns at once after an ordinary launch.
__device__ __forceinline__ void wait_for_primary_grid() {
#if defined(FP4OPS_HW_PDL)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the kernel launched behind this one as its programmatic dependent start: fp4ops.linear's
// first kernel then launches while a producer or quantizer of its x runs, and the kernel after
// it, whose blocks bulk-prefetch the weight to L2 before they wait, with it; each waits
// (wait_for_primary_grid) for this grid to complete before it reads this grid's output. A
// dependent launches once every block has called this or exited, so behind a grid of several
// waves it launches with the last wave. A kernel launched plainly behind this one is unaffected.
__device__ __forceinline__ void let_dependents_launch() {
#if defined(FP4OPS_HW_PDL)
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

}  // namespace fp4ops::cuda
