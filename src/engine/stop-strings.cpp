#include "engine/stop-strings.h"

#include <algorithm>

namespace headroom {

StopScan scan_stop_strings(std::string_view pending, std::span<const std::string> stops) {
    size_t stop_at = std::string_view::npos;
    size_t longest = 0;
    for (const std::string& stop : stops) {
        stop_at = std::min(stop_at, pending.find(stop));
        longest = std::max(longest, stop.size());
    }
    if (stop_at != std::string_view::npos) return {stop_at, true};
    for (size_t k = std::min(pending.size(), longest ? longest - 1 : 0); k > 0; --k) {
        const std::string_view tail = pending.substr(pending.size() - k);
        for (const std::string& stop : stops)
            if (stop.size() > k && std::string_view(stop).starts_with(tail))
                return {pending.size() - k, false};
    }
    return {pending.size(), false};
}

}  // namespace headroom
