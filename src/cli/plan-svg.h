// `headroom plan --svg FILE`: the plan as a picture, for pasting into an
// issue tracker. One bar per device, the budget split into the four terms
// (each with its size as text and its exact bytes in a tooltip); with --fit
// the configurations that fit, with --compare-quant every weight type, as
// bars on one scale below it. Self-contained SVG: no fonts or scripts, light
// and dark colours by prefers-color-scheme.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "memory/terms.h"

namespace headroom::cli {

// One bar: the four terms of a device against a budget.
struct SvgBar {
    std::string label;    // what the bar is ("cpu", "1. --kv-dtype q8_0", "Q4_K_M")
    std::string note;     // right of it or under it ("fits", "does not fit: ...")
    DeviceTerms terms;    // its sizes
    uint64_t budget = 0;  // 0: no budget line
    bool fits = true;
};

// Candidates side by side: bars on one scale.
struct SvgSection {
    std::string title;
    std::vector<SvgBar> bars;
};

struct SvgPlan {
    std::string title;     // the verdict line
    std::string subtitle;  // total and budget
    std::vector<SvgBar> devices;
    std::vector<SvgSection> sections;
};

std::string plan_svg(const SvgPlan& plan);

}  // namespace headroom::cli
