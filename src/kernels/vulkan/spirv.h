// The compute shaders, compiled by glslc at build time and embedded in the
// binary (cmake/embed-spirv.cmake): one module per source and variant, named
// "<source>[-<variant>]", e.g. "matmul-q4_0-t8", "attention-f16".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace headroom::kernels::vk {

struct SpirvModule {
    std::string_view name;
    const uint32_t* words;
    size_t n_words;
};

// The module of that name, or null.
const SpirvModule* find_spirv(std::string_view name);

}  // namespace headroom::kernels::vk
