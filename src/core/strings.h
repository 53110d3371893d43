// Small string helpers shared across subsystems.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace headroom {

// ASCII only: names, flags, type and model identifiers, never user text.
inline std::string ascii_lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Text read from an untrusted file, fit for a one-line message: control
// characters become spaces, and text past max_bytes is cut on a UTF-8
// boundary and marked with its full length ("abc… (100000 bytes)").
inline std::string clipped(std::string_view s, size_t max_bytes = 64) {
    size_t cut = s.size();
    if (cut > max_bytes) {
        cut = max_bytes;
        while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    }
    std::string out(s.substr(0, cut));
    for (char& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = ' ';
    if (cut < s.size()) out += "… (" + std::to_string(s.size()) + " bytes)";
    return out;
}

}  // namespace headroom
