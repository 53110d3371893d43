#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace headroom {

namespace {

// Work shorter than this shows no progress at all.
constexpr double kQuietSeconds = 0.5;

}  // namespace

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total == 0 ? 1 : total),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

void Progress::update(uint64_t done, const std::string& detail) {
    if (!enabled_) return;
    const double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
    const auto now = std::chrono::steady_clock::now();
    const double elapsed_s = std::chrono::duration<double>(now - start_).count();
    if (elapsed_s < kQuietSeconds) return;
    shown_ = true;
    if (tty_) {
        if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
        last_draw_ = now;
        constexpr int kWidth = 30;
        const int filled = static_cast<int>(frac * kWidth);
        std::string bar(static_cast<size_t>(filled), '#');
        bar.resize(kWidth, '.');
        std::string eta;
        if (frac > 0.02 && frac < 1.0)
            eta = fmt::format(" eta {:.0f}s", elapsed_s / frac - elapsed_s);
        fmt::print(stderr, "\r{} [{}] {:3.0f}% {}{}\x1b[K", label_, bar, frac * 100, detail, eta);
    } else {
        const int decile = static_cast<int>(frac * 10);
        if (decile == last_decile_) return;
        last_decile_ = decile;
        fmt::print(stderr, "{}: {:3.0f}% {} ({:.1f}s)\n", label_, frac * 100, detail, elapsed_s);
    }
    std::fflush(stderr);
}

void Progress::finish(const std::string& detail) {
    if (shown_) finish_with_summary(detail);
}

void Progress::finish_with_summary(const std::string& detail) {
    if (!enabled_) return;
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (tty_)
        fmt::print(stderr, "\r{}: done {} in {:.1f}s\x1b[K\n", label_, detail, elapsed_s);
    else
        fmt::print(stderr, "{}: done {} in {:.1f}s\n", label_, detail, elapsed_s);
    std::fflush(stderr);
}

}  // namespace headroom
