// The x86 backends' tables. Call only after checking that the CPU has the
// instruction set (dispatch.cpp does): the functions behind them use it.
#pragma once

#include "kernels/kernels.h"

// The readers and the per-block arithmetic of the shared kernels must inline
// into the kernels: called, their vectors would round-trip through the stack.
#define HR_KERNEL_INLINE inline __attribute__((always_inline))

namespace headroom::kernels::x86 {

// Batch tokens per attention work item (attention.h); sizes its scratch.
inline constexpr int kQueryWindow = 16;

const Ops& avx2_table();
const Ops& avx512_table();

}  // namespace headroom::kernels::x86
