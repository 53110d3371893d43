// What the readings (nvidia-smi, memory_summary, llama.cpp's buffers) add to
// a finding: numbers the message left out, and one sentence each saying what
// the reading shows and which way it points.
//
//   memory_summary  allocated A, reserved R, non-releasable X (cached bytes in
//                   segments that also hold live blocks). X >= the request:
//                   the bytes were there, in pieces: for fragmentation. X
//                   under a quarter of the request and under 5% of R: the
//                   cache held no pieces to speak of: against it.
//   nvidia-smi      used U of total T per GPU, and the processes listed with
//                   their memory: who holds the GPU. U well above what the
//                   listed processes hold (or no process listed at all) is
//                   memory held outside this view: another container's
//                   process, or a context that outlived its process.
//   llama.cpp       weights + KV + compute per device: which term is largest
//                   on the device that failed.
#include <fmt/format.h>

#include <algorithm>

#include "core/strings.h"
#include "core/units.h"
#include "doctor/advisor.h"

namespace headroom::doctor {

namespace {

// A reading this many lines away from a failure still describes it.
constexpr uint64_t kNearLines = 400;

uint64_t distance(uint64_t a, uint64_t b) {
    return a > b ? a - b : b - a;
}

// " 1.00 GiB", or nothing when the memory is not known.
std::string used_text(const std::optional<uint64_t>& used) {
    return used ? fmt::format(" {}", bytes_text(*used)) : std::string();
}

// "GPU 1", "device 1", "cuda:1" in the message: the device it failed on.
std::optional<uint64_t> device_in(const std::string& message) {
    const std::string lower = ascii_lower(message);
    for (std::string_view anchor : {"gpu ", "device ", "cuda:", "device id "}) {
        const size_t at = lower.find(anchor);
        if (at == std::string::npos) continue;
        size_t end = 0;
        const size_t from = at + anchor.size();
        const auto v = integer_at(lower, from, &end);
        if (v && end > from && *v < 4096) return v;
    }
    return std::nullopt;
}

const Readings::TorchSummary* nearest_summary(const Readings& r, uint64_t line) {
    const Readings::TorchSummary* best = nullptr;
    for (const auto& s : r.summaries) {
        if (!s.allocated && !s.reserved) continue;
        if (distance(s.line, line) > kNearLines) continue;
        if (!best || distance(s.line, line) < distance(best->line, line)) best = &s;
    }
    return best;
}

// The GPU a finding failed on: the one its message names, else the only one
// the readings show; none when the message names a GPU no reading shows.
const Readings::Gpu* gpu_of(const Readings& r, const Finding& f) {
    if (r.gpus.empty()) return nullptr;
    if (const auto d = device_in(f.message)) {
        for (const auto& g : r.gpus)
            if (g.index == d || !g.index) return &g;
        return nullptr;
    }
    for (const auto& g : r.gpus)
        if (g.index != r.gpus.front().index) return nullptr;
    return &r.gpus.front();
}

std::string summary_sentence(const Readings::TorchSummary& s) {
    std::string out = fmt::format("torch.cuda.memory_summary() (line {}):", format_count(s.line));
    if (s.n_ooms) out += fmt::format(" {} CUDA OOMs,", format_count(*s.n_ooms));
    if (s.allocated) out += fmt::format(" {} allocated,", bytes_text(*s.allocated));
    if (s.reserved) out += fmt::format(" {} reserved,", bytes_text(*s.reserved));
    if (s.non_releasable)
        out += fmt::format(" {} of it non-releasable (inactive split blocks),",
                           bytes_text(*s.non_releasable));
    out.pop_back();
    return out;
}

std::string gpu_sentence(const Readings& r, const Readings::Gpu& g) {
    std::string out = fmt::format("{} (line {}): {} of {} in use on GPU {}", g.source,
                                  format_count(g.line), bytes_text(g.used), bytes_text(g.total),
                                  g.index ? std::to_string(*g.index) : std::string("?"));
    // Processes on that GPU (CSV rows name none: they count for any).
    std::vector<const Readings::Process*> on;
    uint64_t listed = 0;
    for (const auto& p : r.processes)
        if (!p.gpu || !g.index || p.gpu == g.index) {
            on.push_back(&p);
            listed += p.used.value_or(0);
        }
    std::stable_sort(on.begin(), on.end(), [](const auto* a, const auto* b) {
        return a->used.value_or(0) > b->used.value_or(0);
    });
    if (!on.empty()) {
        out += "; held by ";
        for (size_t k = 0; k < on.size() && k < 5; ++k) {
            if (k) out += ", ";
            out += fmt::format("{} (pid {}){}", on[k]->name.empty() ? "?" : on[k]->name, on[k]->pid,
                               used_text(on[k]->used));
        }
        if (on.size() > 5) out += fmt::format(" and {} more", on.size() - 5);
    }
    const uint64_t unlisted = g.used > listed ? g.used - listed : 0;
    const bool table_empty = r.empty_process_table && on.empty();
    if ((table_empty || !on.empty()) && unlisted >= std::max<uint64_t>(GiB, g.total / 10)) {
        out += fmt::format(
            ". {} is held by no process listed{}: a process in another container or PID "
            "namespace (nvidia-smi inside a container does not list the host's), or a CUDA "
            "context that outlived its process. On the host: nvidia-smi "
            "--query-compute-apps=pid,used_memory --format=csv, or fuser -v /dev/nvidia*",
            bytes_text(unlisted), table_empty ? " (the process table is empty)" : "");
    }
    return out;
}

std::string buffers_sentence(const Readings& r) {
    std::string out = "llama.cpp's buffers:";
    uint64_t last = 0;
    for (size_t k = 0; k < r.buffers.size(); ++k) {
        const auto& d = r.buffers[k];
        last = std::max(last, d.line);
        std::vector<std::string> terms;
        if (d.weights) terms.push_back(fmt::format("weights {}", bytes_text(d.weights)));
        if (d.kv) terms.push_back(fmt::format("KV {}", bytes_text(d.kv)));
        if (d.compute) terms.push_back(fmt::format("compute {}", bytes_text(d.compute)));
        std::string joined;
        for (size_t j = 0; j < terms.size(); ++j) {
            if (j) joined += " + ";
            joined += terms[j];
        }
        out += fmt::format("{} {} {}", k ? ";" : "", d.device, joined);
        if (terms.size() > 1) out += fmt::format(" = {}", bytes_text(d.weights + d.kv + d.compute));
    }
    out += fmt::format(" (to line {})", format_count(last));
    return out;
}

bool is_device_buffer(const Readings::Buffers& d) {
    const std::string lower = ascii_lower(d.device);
    return !lower.starts_with("cpu") && lower.find("host") == std::string::npos;
}

}  // namespace

void weigh_readings(Finding& f, Evidence& e, const Readings& r) {
    Numbers& n = e.numbers;
    const bool torch = is_torch(e.wording);
    if (const auto* s = torch ? nearest_summary(r, f.line) : nullptr) {
        if (!n.allocated) n.allocated = s->allocated;
        if (!n.reserved) n.reserved = s->reserved;
        if (!n.unallocated && n.reserved && n.allocated && *n.reserved >= *n.allocated)
            n.unallocated = *n.reserved - *n.allocated;
        n.inactive_split = s->non_releasable;
        e.has_summary = true;
        std::string sentence = summary_sentence(*s);
        if (s->non_releasable && n.requested) {
            const uint64_t x = *s->non_releasable, want = *n.requested;
            if (x >= want)
                sentence += fmt::format(
                    ": {} sits in pieces of segments that also hold live tensors, more than the "
                    "{} asked for: for fragmentation",
                    bytes_text(x), bytes_text(want));
            else if (x < want / 4 && (!s->reserved || x < *s->reserved / 20))
                sentence += ": almost nothing is cached in pieces: against fragmentation";
        }
        f.evidence.push_back(sentence);
    }
    if (const auto* g = e.host_memory ? nullptr : gpu_of(r, f)) {
        if (!n.total && !e.context.device_total_bytes) e.context.device_total_bytes = g->total;
        e.has_gpu_reading = true;
        std::string sentence = gpu_sentence(r, *g);
        if (n.requested && g->total - g->used >= *n.requested)
            sentence += fmt::format(
                ". It reports {} free, more than the {} asked for: the reading was taken at "
                "another moment, or (an integrated GPU with unified memory) one allocation is "
                "bounded by the driver's dedicated carve-out or GTT size, not by the free total",
                bytes_text(g->total - g->used), bytes_text(*n.requested));
        f.evidence.push_back(sentence);
    }
    if (is_ggml(e.wording) && std::any_of(r.buffers.begin(), r.buffers.end(), is_device_buffer)) {
        e.has_buffers = true;
        f.evidence.push_back(buffers_sentence(r));
    }
}

std::vector<std::string> describe_readings(const Readings& r) {
    std::vector<std::string> out;
    for (const auto& s : r.summaries)
        if (s.allocated || s.reserved) out.push_back(summary_sentence(s));
    std::vector<std::optional<uint64_t>> seen;
    for (const auto& g : r.gpus) {
        if (std::find(seen.begin(), seen.end(), g.index) != seen.end()) continue;
        seen.push_back(g.index);
        out.push_back(gpu_sentence(r, g));
    }
    if (r.gpus.empty() && !r.processes.empty()) {
        std::string s = "GPU processes:";
        for (size_t k = 0; k < r.processes.size() && k < 8; ++k) {
            const auto& p = r.processes[k];
            s += fmt::format("{} {} (pid {}){}", k ? "," : "", p.name.empty() ? "?" : p.name, p.pid,
                             used_text(p.used));
        }
        out.push_back(s);
    }
    if (std::any_of(r.buffers.begin(), r.buffers.end(), is_device_buffer))
        out.push_back(buffers_sentence(r));
    return out;
}

std::optional<Evidence> summary_failure(const Readings& r, const Options& options, uint64_t& line) {
    for (const auto& s : r.summaries) {
        if (!s.n_ooms || *s.n_ooms == 0 || !s.reserved) continue;
        Evidence e;
        e.wording = Wording::TorchMemorySummary;
        e.wordings_seen = 1ull << static_cast<unsigned>(e.wording);
        e.options = &options;
        e.numbers.reserved = s.reserved;
        e.numbers.this_process = s.reserved;
        e.numbers.allocated = s.allocated;
        if (s.allocated && *s.reserved >= *s.allocated)
            e.numbers.unallocated = *s.reserved - *s.allocated;
        e.numbers.inactive_split = s.non_releasable;
        line = s.line;
        return e;
    }
    return std::nullopt;
}

}  // namespace headroom::doctor
