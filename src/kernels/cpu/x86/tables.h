// The x86 tables' tables. Call only after checking that the CPU has the
// instruction set (dispatch.cpp does): the functions behind them use it.
#pragma once

#include <cstdint>

#include "kernels/cpu/ops.h"

// The readers and the per-block arithmetic of the shared kernels must inline
// into the kernels: called, their vectors would round-trip through the stack.
#define HR_KERNEL_INLINE inline __attribute__((always_inline))

namespace headroom::kernels::x86 {

// Batch tokens per attention work item (attention.h); sizes its scratch.
inline constexpr int kQueryWindow = 16;
// Attention's softmax steps (attention.h): at most kMaxChunkKeys keys, and
// at most kChunkFloats f32 of K (and of V) unless one tile of wide heads
// needs more. They size its scratch.
inline constexpr uint32_t kMaxChunkKeys = 64;
inline constexpr uint32_t kChunkFloats = 4096;
// Keys per attention segment (rounded down to a whole number of chunks):
// each segment of a query's keys runs its softmax steps into a state of its
// own, and the states are folded in order (attention.h).
inline constexpr uint32_t kSegmentKeys = 256;
// Segment states (per query head of one token) each thread's scratch keeps
// for decode steps whose segments run as work items of their own.
inline constexpr uint32_t kSplitStatesPerThread = 64;

const Ops& avx2_table();
const Ops& avxvnni_table();
const Ops& avx512_table();

}  // namespace headroom::kernels::x86
