// A byte address in one backend's memory: which of its allocations and where
// in it. Only the backend that made it can read what it points to; the model
// and the engine carry these handles around and never dereference them.
#pragma once

#include <cstdint>

namespace headroom::kernels {

struct DevPtr {
    uint32_t buffer = 0;  // the backend's allocation; 0 is null
    uint64_t offset = 0;  // bytes into it

    explicit operator bool() const { return buffer != 0; }
    DevPtr operator+(uint64_t bytes) const { return {buffer, offset + bytes}; }
    bool operator==(const DevPtr&) const = default;
};

}  // namespace headroom::kernels
