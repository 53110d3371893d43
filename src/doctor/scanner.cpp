// LogScanner: bytes -> lines -> observations -> findings.
//
// Lines. Bytes are cut at '\n'; "\r\n" loses its '\r', a lone '\r' (progress
// bars) and other control bytes become spaces, ANSI escape sequences (CSI and
// OSC) are dropped, and a line keeps at most kMaxLineBytes bytes. The state
// machine survives chunk boundaries, so feed() may be called with any split.
//
// Gate. A line reaches the parsers only if it contains one of the gate words
// below in any case; one pass of an Aho-Corasick automaton (upper-case
// letters folded into its table) decides that, so ordinary log lines cost one
// table lookup per byte and are never lower-cased. Lines that pass get a
// lower-case copy and a PairFilter that lets most anchor searches end early.
//
// Merging. One failure often spans several lines (a wrapped PyTorch message,
// llama.cpp's allocation chain, the kernel's OOM report). An open finding
// takes the lines of the same family that follow within kMergeLines of its
// last line, unless a line repeats a form the finding already has together
// with new numbers: that is the next failure. Consecutive findings with the
// same class and numbers are one finding that occurred n times.
#include <algorithm>
#include <array>
#include <istream>
#include <vector>

#include "doctor/advisor.h"
#include "doctor/doctor.h"
#include "doctor/observation.h"

namespace headroom::doctor {

namespace {

constexpr uint64_t kMergeLines = 8;          // lines of one failure are this close
constexpr uint64_t kWrapperMergeLines = 40;  // a re-raise after the traceback
constexpr uint64_t kTorchJoinLines = 3;      // a wrapped PyTorch message
constexpr uint64_t kHintLines = 80;          // a traceback frame or phase line still applies
constexpr uint64_t kRaiseLines = 30;         // a raise statement's message follows within
constexpr size_t kMaxJoinedBytes = 4096;     // a joined PyTorch message
constexpr size_t kMaxOscBytes = 512;         // an unterminated OSC sequence ends here

// Every anchor a parser or context reader looks for contains one of these.
constexpr std::string_view kGateWords[] = {
    "memory",
    "alloc",
    "mmap",
    "workingset",
    "cumem",
    "hipmem",
    "current device",
    "oom",
    "capac",
    "pytorch",
    "of which",
    "is free",
    "allowed",
    "fragmentation",
    "private pool",
    "max_split",
    "kv cache",
    "kv_cache",
    "kv self",
    "weights",
    "affine_weight",
    "parallellinear",
    "load_single_module",
    "checkpoint shards",
    "safetensors",
    "model loading",
    "buffer",
    "n_ctx",
    "ctx size",
    "model tensors",
    "gpu ram",
    "dispatched",
    "device-side",
    "misaligned",
    "launch failure",
    "resource",
    "file \"",
    "captur",
    "warm",
    "kill",
    "status 5",
    "failed to create context",
    "failed to load model",
    "llama_new_context",
    "llama_context:",
    "mem usage",
    "vllm",
    "sglang",
    "text_generation",
    "text-generation",
    "ollama",
    "llama runner",
    "enginecore",
    "multiproc_executor",
    "llm_engine",
    "scheduler hit",
    "total_gpu",
    "gpu_memory",
    "gpu-memory",
    "shardcannotstart",
    "code 137",
    "status 137",
    "available devices",
    "used_memory",
    "memory.used",
};

// A byte-level DFA over the gate words (Aho-Corasick with the failure links
// folded into the transition table).
class Gate {
  public:
    Gate() {
        next_.assign(256, 0);
        out_.push_back(0);
        for (auto word : kGateWords) {
            uint32_t s = 0;
            for (char c : word) {
                const auto b = static_cast<unsigned char>(c);
                if (next_[s * 256 + b] == 0) {
                    next_[s * 256 + b] = static_cast<uint32_t>(out_.size());
                    out_.push_back(0);
                    next_.resize(out_.size() * 256, 0);
                }
                s = next_[s * 256 + b];
            }
            out_[s] = 1;
        }
        // Breadth-first: fill missing transitions from the failure state.
        // (Upper-case letters are folded in afterwards, so the gate runs on
        // the raw line and only lines that pass are lower-cased.)
        std::vector<uint32_t> fail(out_.size(), 0), queue;
        for (uint32_t b = 0; b < 256; ++b)
            if (next_[b] != 0) queue.push_back(next_[b]);
        for (size_t i = 0; i < queue.size(); ++i) {
            const uint32_t s = queue[i];
            out_[s] = out_[s] | out_[fail[s]];
            for (uint32_t b = 0; b < 256; ++b) {
                const uint32_t t = next_[s * 256 + b];
                if (t != 0) {
                    fail[t] = next_[fail[s] * 256 + b];
                    queue.push_back(t);
                } else {
                    next_[s * 256 + b] = next_[fail[s] * 256 + b];
                }
            }
        }
        for (size_t s = 0; s < out_.size(); ++s)
            for (uint32_t b = 'A'; b <= 'Z'; ++b) next_[s * 256 + b] = next_[s * 256 + b + 32];
    }

    bool matches(std::string_view text) const {
        uint32_t s = 0;
        for (char c : text) {
            s = next_[s * 256 + static_cast<unsigned char>(c)];
            if (out_[s]) return true;
        }
        return false;
    }

  private:
    std::vector<uint32_t> next_;
    std::vector<uint8_t> out_;
};

const Gate& gate() {
    static const Gate g;
    return g;
}

enum class Family { Torch, Vllm, Ggml, Server, Host, Loader, Other };

Family family_of(Wording w, Framework f) {
    switch (w) {
        case Wording::TorchPre21:
        case Wording::TorchCached:
        case Wording::Torch21:
        case Wording::TorchBare:
        case Wording::TorchMps:
        case Wording::TorchCpu:
        case Wording::TorchAllowed:
        case Wording::TorchMemorySummary:
        case Wording::CudaErrorOom:
            return Family::Torch;
        case Wording::VllmNoCacheBlocks:
        case Wording::VllmMaxSeqLen:
        case Wording::VllmServeOneRequest:
        case Wording::VllmFreeMemoryStartup:
        case Wording::VllmSamplerWarmup:
        case Wording::VllmProfileNoKv:
            return Family::Vllm;
        case Wording::OllamaSystemMemory:
        case Wording::TgiPrefill:
        case Wording::TgiTotalTokens:
        case Wording::SglangNotEnoughMemory:
            return Family::Server;
        case Wording::LinuxOomKiller:
        case Wording::CgroupOomKiller:
        case Wording::OomKilled:
        case Wording::ShellKilled:
        case Wording::PythonMemoryError:
        case Wording::HostMmapFailed:
            return Family::Host;
        case Wording::BnbDispatchedToCpu:
            return Family::Loader;
        default:
            break;
    }
    if (f == Framework::LlamaCpp) return Family::Ggml;
    if (f == Framework::Host) return Family::Host;
    return Family::Other;
}

// Forms that only add the phase to a failure already reported may repeat
// within one finding ("failed to allocate compute buffers", then "... compute
// pp buffers"); every other form seen twice is the next failure.
bool may_repeat(Wording w) {
    return w == Wording::GgmlKvFailed || w == Wording::GgmlComputeFailed ||
           w == Wording::GgmlModelLoadFailed || w == Wording::MetalStatus5 ||
           w == Wording::ShellKilled ||  // "Killed", then "exited with code 137"
           w == Wording::Unknown || w == Wording::None;
}

bool is_joinable_torch(Wording w) {
    return w == Wording::TorchPre21 || w == Wording::TorchCached || w == Wording::Torch21 ||
           w == Wording::TorchBare || w == Wording::TorchAllowed;
}

uint64_t bit(Wording w) {
    return 1ull << static_cast<unsigned>(w);
}

template <class T>
void fill(std::optional<T>& dst, const std::optional<T>& src) {
    if (!dst && src) dst = src;
}

void fill_numbers(Numbers& dst, const Numbers& src) {
    fill(dst.requested, src.requested);
    fill(dst.total, src.total);
    fill(dst.free, src.free);
    fill(dst.this_process, src.this_process);
    fill(dst.allocated, src.allocated);
    fill(dst.reserved, src.reserved);
    fill(dst.unallocated, src.unallocated);
    fill(dst.allowed, src.allowed);
    fill(dst.largest_other_process, src.largest_other_process);
    fill(dst.sum_listed_processes, src.sum_listed_processes);
    fill(dst.max_model_len, src.max_model_len);
    fill(dst.kv_tokens, src.kv_tokens);
    fill(dst.estimated_max_len, src.estimated_max_len);
    fill(dst.prefill_tokens, src.prefill_tokens);
    fill(dst.total_tokens, src.total_tokens);
    fill(dst.n_sequences, src.n_sequences);
    fill(dst.utilization, src.utilization);
}

Framework engine_of(const Line& l) {
    if (l.has("vllm") || l.has("enginecore") || l.has("multiproc_executor") || l.has("llm_engine"))
        return Framework::Vllm;
    if (l.has("sglang") || l.has("scheduler hit")) return Framework::Sglang;
    if (l.has("text_generation") || l.has("text-generation")) return Framework::Tgi;
    if (l.has("ollama") || l.has("llama runner")) return Framework::Ollama;
    return Framework::Unknown;
}

// A Python source line in a traceback ("raise ValueError(\"No available
// memory ...") quotes the message; the message itself follows it.
bool is_raise_statement(const Line& l) {
    size_t at = l.find("raise ");
    while (at != Line::npos) {
        size_t i = at + 6;
        const size_t name = i;
        while (i < l.lower.size() &&
               ((l.lower[i] >= 'a' && l.lower[i] <= 'z') || l.lower[i] == '_' || l.lower[i] == '.'))
            ++i;
        if (i > name && i < l.lower.size() && l.lower[i] == '(') return true;
        at = l.find("raise ", at + 6);
    }
    return false;
}

bool same_event(const Finding& a, const Finding& b) {
    return a.framework == b.framework && a.oom_class == b.oom_class && a.wording == b.wording &&
           a.phase == b.phase && a.requested_bytes == b.requested_bytes &&
           a.total_bytes == b.total_bytes && a.free_bytes == b.free_bytes &&
           a.this_process_bytes == b.this_process_bytes &&
           a.other_processes_bytes == b.other_processes_bytes &&
           a.reserved_unallocated_bytes == b.reserved_unallocated_bytes &&
           a.deficit_bytes == b.deficit_bytes && a.max_model_len_tokens == b.max_model_len_tokens &&
           a.kv_cache_tokens == b.kv_cache_tokens && a.prefill_tokens == b.prefill_tokens &&
           a.total_tokens == b.total_tokens && a.n_sequences == b.n_sequences;
}

}  // namespace

std::string_view wording_name(Wording w) {
    switch (w) {
        case Wording::None:
            return "none";
        case Wording::TorchPre21:
            return "pytorch-pre-2.1";
        case Wording::TorchCached:
            return "pytorch-cached";
        case Wording::Torch21:
            return "pytorch-2.1";
        case Wording::TorchBare:
            return "pytorch-bare";
        case Wording::TorchMps:
            return "pytorch-mps";
        case Wording::TorchCpu:
            return "pytorch-cpu";
        case Wording::TorchAllowed:
            return "pytorch-allowed-memory";
        case Wording::TorchMemorySummary:
            return "pytorch-memory-summary";
        case Wording::KvCacheNoRoom:
            return "kv-cache-no-room";
        case Wording::CudaErrorOom:
            return "cuda-error-out-of-memory";
        case Wording::VllmNoCacheBlocks:
            return "vllm-no-cache-blocks";
        case Wording::VllmMaxSeqLen:
            return "vllm-max-seq-len";
        case Wording::VllmServeOneRequest:
            return "vllm-serve-one-request";
        case Wording::VllmFreeMemoryStartup:
            return "vllm-free-memory-on-startup";
        case Wording::VllmProfileNoKv:
            return "vllm-profile-no-kv";
        case Wording::VllmSamplerWarmup:
            return "vllm-sampler-warmup";
        case Wording::GgmlDeviceMallocFailed:
            return "ggml-device-malloc-failed";
        case Wording::GgmlBufferFailed:
            return "ggml-buffer-failed";
        case Wording::GgmlHostBufferFailed:
            return "ggml-host-buffer-failed";
        case Wording::GgmlMetalBufferFailed:
            return "ggml-metal-buffer-failed";
        case Wording::GgmlModelLoadFailed:
            return "ggml-model-load-failed";
        case Wording::GgmlKvFailed:
            return "ggml-kv-cache-failed";
        case Wording::GgmlComputeFailed:
            return "ggml-compute-buffers-failed";
        case Wording::GgmlCudaPool:
            return "ggml-cuda-pool";
        case Wording::GgmlCudaVmmReserve:
            return "ggml-cuda-vmm-reserve";
        case Wording::MetalOutOfMemory:
            return "metal-out-of-memory";
        case Wording::MetalStatus5:
            return "metal-status-5";
        case Wording::OllamaSystemMemory:
            return "ollama-system-memory";
        case Wording::TgiPrefill:
            return "tgi-prefill-tokens";
        case Wording::TgiTotalTokens:
            return "tgi-total-tokens";
        case Wording::SglangNotEnoughMemory:
            return "sglang-not-enough-memory";
        case Wording::BnbDispatchedToCpu:
            return "bitsandbytes-dispatched-to-cpu";
        case Wording::LinuxOomKiller:
            return "linux-oom-killer";
        case Wording::CgroupOomKiller:
            return "cgroup-oom-killer";
        case Wording::OomKilled:
            return "oomkilled";
        case Wording::ShellKilled:
            return "killed";
        case Wording::PythonMemoryError:
            return "python-memoryerror";
        case Wording::HostMmapFailed:
            return "host-mmap-failed";
        case Wording::Unknown:
            return "unknown";
        case Wording::NotOom:
            return "not-oom";
        case Wording::TfBfcNotFailure:
            return "tensorflow-bfc-not-a-failure";
    }
    return "unknown";
}

std::string_view class_name(OomClass c) {
    switch (c) {
        case OomClass::WeightsTooLarge:
            return "weights_too_large";
        case OomClass::KvCacheTooLarge:
            return "kv_cache_too_large";
        case OomClass::ActivationsOrBatch:
            return "activations_or_batch";
        case OomClass::Fragmentation:
            return "fragmentation";
        case OomClass::OtherProcess:
            return "other_process";
        case OomClass::UtilizationSetting:
            return "utilization_setting";
        case OomClass::CpuRam:
            return "cpu_ram";
        case OomClass::NotOom:
            return "not_oom";
        case OomClass::Unrecognised:
            return "unrecognised";
    }
    return "unrecognised";
}

std::string_view framework_name(Framework f) {
    switch (f) {
        case Framework::PyTorch:
            return "pytorch";
        case Framework::Vllm:
            return "vllm";
        case Framework::LlamaCpp:
            return "llama.cpp";
        case Framework::Ollama:
            return "ollama";
        case Framework::Tgi:
            return "tgi";
        case Framework::Sglang:
            return "sglang";
        case Framework::Transformers:
            return "transformers";
        case Framework::Host:
            return "host";
        case Framework::Unknown:
            return "unknown";
    }
    return "unknown";
}

struct LogScanner::Impl {
    struct Open {
        Evidence evidence;
        Framework framework = Framework::Unknown;
        Family family = Family::Other;
        uint64_t first_line = 0;
        uint64_t last_line = 0;
        std::string message;
        std::string torch_text;  // the PyTorch message joined over its lines
    };

    explicit Impl(Options o) : options(std::move(o)) {}

    Options options;
    Report report;
    LogContext context;
    Readings readings;
    std::vector<Evidence> evidence;  // of report.findings, index for index
    std::optional<Open> open;
    std::optional<Finding> not_oom;
    struct Raised {
        Observation obs;
        std::string text, lower;
        uint64_t number = 0;
    };
    std::optional<Raised> raised;

    // Line assembly.
    enum class Esc { None, Start, Csi, Osc, OscEnd };
    std::string line;
    std::string lower;
    PairFilter pairs;
    Esc esc = Esc::None;
    size_t osc_bytes = 0;
    bool pending_cr = false;
    bool truncated = false;
    bool line_started = false;

    void push_byte(char c) {
        line_started = true;
        if (line.size() < kMaxLineBytes)
            line.push_back(c);
        else
            truncated = true;
    }

    void end_line() {
        ++report.n_lines;
        if (truncated) ++report.n_long_lines;
        process_line(report.n_lines);
        line.clear();
        truncated = false;
        line_started = false;
        pending_cr = false;
        esc = Esc::None;
    }

    static bool is_plain(unsigned char u) { return u >= 0x20 && u != 0x7F; }

    void feed(std::string_view bytes) {
        for (size_t i = 0; i < bytes.size(); ++i) {
            // Fast path: a run of ordinary bytes outside any escape sequence.
            if (esc == Esc::None && !pending_cr) {
                size_t j = i;
                while (j < bytes.size() && is_plain(static_cast<unsigned char>(bytes[j]))) ++j;
                if (j > i) {
                    line_started = true;
                    const size_t room = kMaxLineBytes - std::min(line.size(), kMaxLineBytes);
                    line.append(bytes.data() + i, std::min(room, j - i));
                    if (j - i > room) truncated = true;
                    i = j;
                    if (i == bytes.size()) break;
                }
            }
            const char c = bytes[i];
            const auto u = static_cast<unsigned char>(c);
            if (c == '\n') {
                end_line();
                continue;
            }
            switch (esc) {
                case Esc::Start:
                    esc = c == '[' ? Esc::Csi : c == ']' ? Esc::Osc : Esc::None;
                    osc_bytes = 0;
                    continue;
                case Esc::Csi:
                    if (u >= 0x20 && u <= 0x3F) continue;  // parameters, intermediates
                    esc = Esc::None;
                    if (u >= 0x40 && u <= 0x7E) continue;  // the final byte
                    break;                                 // malformed: keep the byte
                case Esc::Osc:
                    if (u == 0x07 || ++osc_bytes > kMaxOscBytes)
                        esc = Esc::None;
                    else if (u == 0x1B)
                        esc = Esc::OscEnd;
                    continue;
                case Esc::OscEnd:
                    esc = Esc::None;
                    if (c == '\\') continue;
                    break;
                case Esc::None:
                    break;
            }
            if (pending_cr) {
                pending_cr = false;
                push_byte(' ');
            }
            if (u == 0x1B) {
                esc = Esc::Start;
            } else if (c == '\r') {
                pending_cr = true;
            } else if (u < 0x20 || u == 0x7F) {
                push_byte(' ');
            } else {
                push_byte(c);
            }
        }
    }

    void process_line(uint64_t number) {
        if (open && number > open->last_line + kWrapperMergeLines) close_open();
        if (raised && number > raised->number + kRaiseLines) promote_raised();
        // The fields of PyTorch's allowed-memory form follow it one a line,
        // most without a word the gate knows.
        const bool allowed_field = open && open->evidence.wording == Wording::TorchAllowed &&
                                   number == open->last_line + 1 && line.size() < kMaxJoinedBytes;
        const bool gated = gate().matches(line);
        const bool table_row = wants_reading(line, readings);
        if (!allowed_field && !gated && !table_row) return;
        lower.resize(line.size());
        std::transform(line.begin(), line.end(), lower.begin(), [](char c) {
            return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
        });
        pairs.build(lower);
        const Line l{line, lower, number, &pairs};
        if (allowed_field && is_allowed_memory_field(l)) {
            join_torch(l);
            return;
        }
        read_readings(l, readings);
        if (!gated) return;

        if (const Framework e = engine_of(l); e != Framework::Unknown) context.engine = e;
        read_python_context(l, context);
        read_vllm_context(l, context);
        read_ggml_context(l, context);
        read_servers_context(l, context);

        Observation obs;
        const bool recognised = parse_vllm(l, obs) || parse_servers(l, obs) || parse_ggml(l, obs) ||
                                parse_pytorch(l, obs) || parse_host(l, obs) ||
                                parse_generic(l, obs);
        if (is_raise_statement(l)) {
            // The source line of a traceback quotes the message, which
            // follows it; when the excerpt ends first, the quote stands in.
            if (recognised && obs.kind == Observation::Kind::Oom &&
                obs.wording != Wording::Unknown && !open && !raised)
                raised = Raised{obs, std::string(l.text), std::string(l.lower), l.number};
            return;
        }
        // Metal's "command buffer failed with status 5" is the failure
        // itself when the buffers allocated so far exceed the working set.
        if (recognised && obs.wording == Wording::MetalStatus5 && !open && context.metal_used &&
            context.device_total_bytes && *context.metal_used > *context.device_total_bytes) {
            obs.kind = Observation::Kind::Oom;
            obs.numbers.this_process = context.metal_used;
        }
        if (!recognised || obs.kind == Observation::Kind::None) {
            if (open && open->family == Family::Torch &&
                is_joinable_torch(open->evidence.wording) &&
                number <= open->last_line + kTorchJoinLines && is_pytorch_continuation(l))
                join_torch(l);
            return;
        }
        switch (obs.kind) {
            case Observation::Kind::NotOom:
                // TensorFlow's warning, wrapped: its first half ("ran out of
                // memory") opened an unknown finding the second half explains.
                if (obs.wording == Wording::TfBfcNotFailure && open &&
                    open->evidence.wording == Wording::Unknown &&
                    number <= open->last_line + kTorchJoinLines)
                    open.reset();
                if (!not_oom) not_oom = make_not_oom(l, obs.wording);
                return;
            case Observation::Kind::Continuation:
                // A line after the traceback that names what the program was
                // doing when it failed (TGI: the shard could not start).
                if (obs.wraps_previous && obs.wording == Wording::None && open &&
                    number <= open->last_line + kWrapperMergeLines) {
                    if (open->evidence.phase == Phase::Unknown) open->evidence.phase = obs.phase;
                    return;
                }
                // ggml's CUDA check follows "CUDA error: out of memory" (read
                // as PyTorch's runtime error) with the call that failed.
                if (open && open->evidence.wording == Wording::CudaErrorOom &&
                    (obs.wording == Wording::GgmlCudaPool ||
                     obs.wording == Wording::GgmlCudaVmmReserve) &&
                    number <= open->last_line + kMergeLines) {
                    open->family = Family::Ggml;
                    open->framework = Framework::LlamaCpp;
                    open->evidence.wording = obs.wording;
                }
                if (open && family_of(obs.wording, obs.framework) == open->family &&
                    number <= open->last_line + kMergeLines) {
                    merge(obs, l);
                    // The reservation failing says more than the pool line before it.
                    if (obs.wording == Wording::GgmlCudaVmmReserve)
                        open->evidence.wording = obs.wording;
                }
                return;
            case Observation::Kind::Oom:
                if (open && can_merge(obs, number)) {
                    merge(obs, l);
                    return;
                }
                // A generic "out of memory" line right before a message doctor
                // knows is a summary of it, not a failure of its own.
                if (open && open->evidence.wording == Wording::Unknown &&
                    obs.wording != Wording::Unknown && number <= open->last_line + kMergeLines)
                    open.reset();
                close_open();
                start(obs, l);
                return;
            case Observation::Kind::None:
                return;
        }
    }

    bool can_merge(const Observation& obs, uint64_t number) const {
        const Family f = family_of(obs.wording, obs.framework);
        if (obs.wraps_previous)
            return open->family == Family::Torch &&
                   number <= open->last_line + kWrapperMergeLines &&
                   !open->evidence.saw(obs.wording);
        if (number > open->last_line + kMergeLines) return false;
        // A generic "out of memory" line right after a known message is its summary.
        if (obs.wording == Wording::Unknown) return true;
        if (f != open->family) return false;
        return !open->evidence.saw(obs.wording) || may_repeat(obs.wording);
    }

    // A raise statement no message followed: the failure it quotes.
    void promote_raised() {
        if (!raised) return;
        const Raised r = std::move(*raised);
        raised.reset();
        if (open) return;
        const Line l{r.text, r.lower, r.number};
        start(r.obs, l);
        close_open();
    }

    void start(const Observation& obs, const Line& l) {
        raised.reset();
        Open o;
        o.evidence.wording = obs.wording;
        o.evidence.wordings_seen = bit(obs.wording);
        o.evidence.phase = obs.phase;
        o.evidence.host_memory = obs.host_memory;
        o.evidence.numbers = obs.numbers;
        o.evidence.options = &options;
        o.evidence.context = context;
        o.framework = obs.framework;
        o.family = family_of(obs.wording, obs.framework);
        o.first_line = o.last_line = l.number;
        o.message = clip(l.text, 400);
        if (o.family == Family::Torch && is_joinable_torch(obs.wording))
            o.torch_text = std::string(l.text.substr(0, kMaxJoinedBytes));
        open = std::move(o);
    }

    void merge(const Observation& obs, const Line& l) {
        Evidence& e = open->evidence;
        open->last_line = l.number;
        if (obs.wording == Wording::Unknown && e.wording != Wording::Unknown) return;
        e.wordings_seen |= bit(obs.wording);
        if (e.phase == Phase::Unknown) e.phase = obs.phase;
        e.host_memory = e.host_memory || obs.host_memory;
        if (obs.wraps_previous) {
            open->framework = obs.framework;
            fill_numbers(e.numbers, obs.numbers);
            if (obs.phase != Phase::Unknown) e.phase = obs.phase;
            return;
        }
        // The kernel's report says more than the shell's "Killed" before it.
        if (e.wording == Wording::ShellKilled &&
            (obs.wording == Wording::LinuxOomKiller || obs.wording == Wording::CgroupOomKiller)) {
            e.wording = obs.wording;
            open->first_line = l.number;
            open->message = clip(l.text, 400);
        }
        // ggml's "buffer of size N" is exact; "allocating X MiB" was rounded.
        if ((obs.wording == Wording::GgmlBufferFailed ||
             obs.wording == Wording::GgmlHostBufferFailed) &&
            obs.numbers.requested)
            e.numbers.requested = obs.numbers.requested;
        if (open->family == Family::Torch && !open->torch_text.empty()) {
            join_torch(l);
            return;
        }
        fill_numbers(e.numbers, obs.numbers);
    }

    void join_torch(const Line& l) {
        open->last_line = l.number;
        std::string& t = open->torch_text;
        if (t.size() < kMaxJoinedBytes) {
            t.push_back(' ');
            t.append(l.text.substr(0, kMaxJoinedBytes - std::min(t.size(), kMaxJoinedBytes)));
        }
        std::string joined_lower(t.size(), ' ');
        std::transform(t.begin(), t.end(), joined_lower.begin(), [](char c) {
            return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
        });
        const Line joined{t, joined_lower, open->first_line};
        Numbers n;
        const Wording w = parse_pytorch_message(joined, n);
        open->evidence.numbers = n;
        open->evidence.wording = w;
        open->evidence.wordings_seen |= bit(w);
        open->message = clip(t, 400);
    }

    Finding make_not_oom(const Line& l, Wording w) {
        Finding f;
        f.oom_class = OomClass::NotOom;
        f.framework = engine_of(l) != Framework::Unknown ? engine_of(l) : context.engine;
        f.line = l.number;
        f.wording = std::string(wording_name(w));
        f.message = clip(l.text, 400);
        Evidence e;
        e.wording = w;
        e.options = &options;
        f.cause = describe_cause(f, e);
        f.fixes = advise(f, e);
        return f;
    }

    Framework decide_framework(const Open& o) const {
        const Framework engine = context.engine;
        if (o.framework == Framework::LlamaCpp && engine == Framework::Ollama)
            return Framework::Ollama;
        if ((o.framework == Framework::PyTorch || o.framework == Framework::Unknown) &&
            engine != Framework::Unknown)
            return engine;
        return o.framework;
    }

    void close_open() {
        if (!open) return;
        Open& o = *open;
        Evidence& e = o.evidence;
        // A traceback frame or phase line shortly before the failure names the
        // phase (the context was copied when the failure's first line was read).
        const LogContext& before = e.context;
        if (e.phase == Phase::Unknown && before.hint != Phase::Unknown &&
            before.hint_line + kHintLines >= o.first_line)
            e.phase = before.hint;
        e.context.engine = context.engine;
        Finding f;
        f.framework = decide_framework(o);
        f.line = o.first_line;
        f.phase = e.phase;
        f.wording = std::string(wording_name(e.wording));
        f.message = o.message;
        judge(f, e);
        if (!report.findings.empty() && same_event(report.findings.back(), f)) {
            ++report.findings.back().n_occurrences;
        } else if (report.findings.size() < kMaxFindings) {
            report.findings.push_back(std::move(f));
            evidence.push_back(std::move(e));
        } else {
            ++report.n_findings_dropped;
        }
        open.reset();
    }

    Report finish() {
        if (line_started || !line.empty() || truncated) end_line();
        close_open();
        promote_raised();
        weigh();
        if (report.findings.empty() && not_oom) report.findings.push_back(std::move(*not_oom));
        if (report.findings.empty()) report.evidence = describe_readings(readings);
        return std::move(report);
    }

    // The readings of the whole log, wherever they stood, judged with each
    // failure once it is complete.
    void weigh() {
        for (size_t i = 0; i < report.findings.size(); ++i) {
            Finding& f = report.findings[i];
            Evidence& e = evidence[i];
            weigh_readings(f, e, readings);
            if (!f.evidence.empty()) judge(f, e);
        }
        uint64_t line = 0;
        if (!report.findings.empty()) return;
        if (auto e = summary_failure(readings, options, line)) {
            Finding f;
            f.framework = Framework::PyTorch;
            f.line = line;
            f.wording = std::string(wording_name(e->wording));
            f.message = "PyTorch CUDA memory summary";
            weigh_readings(f, *e, readings);
            judge(f, *e);
            report.findings.push_back(std::move(f));
        }
    }
};

LogScanner::LogScanner(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {}
LogScanner::~LogScanner() = default;

void LogScanner::feed(std::string_view bytes) {
    impl_->feed(bytes);
}

Report LogScanner::finish() {
    return impl_->finish();
}

Report diagnose(std::string_view log, const Options& options) {
    LogScanner s(options);
    s.feed(log);
    return s.finish();
}

Report diagnose(std::istream& in, const Options& options) {
    LogScanner s(options);
    std::vector<char> buf(1 << 16);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        const auto n = in.gcount();
        if (n <= 0) break;
        s.feed(std::string_view(buf.data(), static_cast<size_t>(n)));
    }
    return s.finish();
}

}  // namespace headroom::doctor
