// A progress bar on stderr for long work (quantize, synth, model loading,
// long prompts, scoring). On a terminal it redraws one line; otherwise it
// prints a line every 10%. Work done within half a second shows nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace headroom {

class Progress {
  public:
    Progress(std::string label, uint64_t total, bool enabled = true);
    // Reports `done` of `total` units (bytes, tensors...); `detail` is shown after the bar.
    void update(uint64_t done, const std::string& detail = {});
    // Prints the closing line if anything was shown.
    void finish(const std::string& detail = {});
    // Prints the closing line however quick the work was: for a command
    // (quantize, synth) whose result that line reports.
    void finish_with_summary(const std::string& detail);

  private:
    std::string label_;
    uint64_t total_;
    bool enabled_;
    bool tty_;
    int last_decile_ = -1;
    bool shown_ = false;  // something was printed: finish() closes it
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace headroom
