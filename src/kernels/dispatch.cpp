#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "kernels/kernels.h"

namespace headroom::kernels {

const Ops* avx2_ops() {
    return nullptr;
}
const Ops* avx512_ops() {
    return nullptr;
}

namespace {

const Ops& choose() {
    const char* env = std::getenv("HEADROOM_ISA");
    const std::string_view want = env ? env : "";
    if (want == "ref") return ref_ops();
    if (want == "avx2") {
        if (const Ops* o = avx2_ops()) return *o;
        fail("HEADROOM_ISA=avx2: this CPU or build has no AVX2 kernels");
    }
    if (want == "avx512") {
        if (const Ops* o = avx512_ops()) return *o;
        fail("HEADROOM_ISA=avx512: this CPU or build has no AVX-512 kernels");
    }
    if (!want.empty()) fail("HEADROOM_ISA={}: expected ref, avx2 or avx512", want);
    if (const Ops* o = avx512_ops()) return *o;
    if (const Ops* o = avx2_ops()) return *o;
    return ref_ops();
}

}  // namespace

const Ops& ops() {
    static const Ops& chosen = choose();
    return chosen;
}

}  // namespace headroom::kernels
