// The AVX-512 table (F, BW, VL, DQ and VNNI, as on Zen 4 and Ice Lake
// onwards): the shared x86 kernels instantiated with 16-lane vectors.
// vpdpbusd does the u8 x s8 multiply-adds of the integer matmuls, 64 per
// instruction; see gemm.h for the tiling and pack.h for the panel layout.
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its
// -W(maybe-)uninitialized reports at every inlined use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "kernels/cpu/x86/isa-table.h"
#include "kernels/cpu/x86/simd-avx512.h"

namespace headroom::kernels::x86 {

const Ops& avx512_table() {
    return IsaTable<Avx512>::ops();
}

}  // namespace headroom::kernels::x86
