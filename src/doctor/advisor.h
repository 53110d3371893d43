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
    // Readings the log already holds (see weigh_readings): the fixes do not
    // ask for them again.
    bool has_summary = false, has_gpu_reading = false, has_buffers = false;

    bool saw(Wording w) const { return wordings_seen & (1ull << static_cast<unsigned>(w)); }
};

bool is_torch(Wording w);  // a PyTorch allocator message (any form)
bool is_ggml(Wording w);   // a llama.cpp / ggml message

// Judges one failure: numbers, class, cause and fixes (in that order; each
// reads what the one before wrote).
void judge(Finding& f, const Evidence& e);

// Fills numbers the failure's message left out from the readings near it
// (memory_summary, nvidia-smi) and adds what each reading shows to
// f.evidence.
void weigh_readings(Finding& f, Evidence& e, const Readings& r);
// One sentence per reading, for a log with readings and no failure.
std::vector<std::string> describe_readings(const Readings& r);
// A memory_summary that counts CUDA OOMs, in a log without the OOM message:
// the failure as the summary shows it, at `line`.
std::optional<Evidence> summary_failure(const Readings& r, const Options& options, uint64_t& line);

// Fills the byte fields of `f` from what the log states (see Finding).
void derive_numbers(Finding& f, const Evidence& e);
OomClass classify(const Finding& f, const Evidence& e);
std::string describe_cause(const Finding& f, const Evidence& e);
std::vector<Fix> advise(const Finding& f, const Evidence& e);

}  // namespace headroom::doctor
