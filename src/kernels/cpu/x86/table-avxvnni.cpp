// The AVX-VNNI table (AVX2, FMA, F16C and the VEX-encoded vpdpbusd /
// vpdpwssd): the shared x86 kernels instantiated with 8-lane vectors whose
// u8 x s8 products sum into int32 exactly, as AVX-512 VNNI's (simd-avx2.h).
// For the Intel cores that have AVX-VNNI but not AVX-512.
#include "kernels/cpu/x86/isa-table.h"
#include "kernels/cpu/x86/simd-avx2.h"

namespace headroom::kernels::x86 {

const Ops& avxvnni_table() {
    return IsaTable<AvxVnni>::ops();
}

}  // namespace headroom::kernels::x86
