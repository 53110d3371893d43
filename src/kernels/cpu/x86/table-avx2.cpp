// The AVX2 table (AVX2, FMA, F16C): the shared x86 kernels instantiated
// with 8-lane vectors; u8 x s8 products through vpmaddubsw + vpmaddwd (see
// simd-avx2.h for the saturation rules), the same tiling as AVX-512.
#include "kernels/cpu/x86/isa-table.h"
#include "kernels/cpu/x86/simd-avx2.h"

namespace headroom::kernels::x86 {

const Ops& avx2_table() {
    return IsaTable<Avx2>::ops();
}

}  // namespace headroom::kernels::x86
