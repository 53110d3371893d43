// From the lines of one failure to a Finding: the derived numbers, the class,
// the one-line cause and the ranked fixes. Internal to src/doctor/.
#pragma once

#include "doctor/doctor.h"
#include "doctor/observation.h"

namespace headroom::doctor {

// Everything the scanner gathered about one failure.
struct Evidence {
    Wording wording = Wording::None;  // the first (primary) form
    uint64_t wordings_seen = 0;       // bit per Wording
    Phase phase = Phase::Unknown;
    bool host_memory = false;
    Numbers numbers;
    LogContext context;  // as it stood when the failure was read
    const Options* options = nullptr;

    bool saw(Wording w) const { return wordings_seen & (1ull << static_cast<unsigned>(w)); }
};

// Fills the byte fields of `f` from what the log states (see Finding).
void derive_numbers(Finding& f, const Evidence& e);
OomClass classify(const Finding& f, const Evidence& e);
std::string describe_cause(const Finding& f, const Evidence& e);
std::vector<Fix> advise(const Finding& f, const Evidence& e);

}  // namespace headroom::doctor
