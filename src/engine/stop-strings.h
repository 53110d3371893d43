// Stop strings on streamed text: a stop string found in the output ends it
// where the string starts (the string itself is never sent), and text that
// could still be the start of one is held back until the next tokens say.
//
//   pending  "…the answer is 42\n\nUs"   stops {"\n\nUser:"}
//   scan     send = 19 ("…the answer is 42"), hold "\n\nUs" (4 bytes)
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace headroom {

struct StopScan {
    size_t send = 0;       // leading bytes of the pending text that may go out now
    bool stopped = false;  // a stop string starts at `send`: the output ends there
};

// The earliest stop string in `pending` (output text not yet sent) ends
// it; with none, the longest tail of `pending` that is a proper prefix of
// some stop string is held back.
StopScan scan_stop_strings(std::string_view pending, std::span<const std::string> stops);

}  // namespace headroom
