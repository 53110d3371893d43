// Small string helpers shared across subsystems (ASCII only: names, flags,
// type and model identifiers, never user text).
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace headroom {

inline std::string ascii_lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

}  // namespace headroom
