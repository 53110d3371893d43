// headroom doctor: explain out-of-memory errors from other engines' logs.
//
// Design. A log is read as a stream of bytes and cut into lines (ANSI colour
// codes and carriage returns removed, each line capped at kMaxLineBytes so a
// megabyte-long line costs no more than a normal one). Every line goes through
// a gate, one pass of an automaton over a few dozen words; only lines that
// mention memory, allocation or an engine reach the parsers. The parsers are
// small scanners, one file per framework family, that look for fixed anchors
// ("tried to allocate", "cudamalloc failed") with memmem() and read the
// numbers with units next to them. No regular expressions touch log text, so
// the whole pass is linear in the size of the log.
//
// A parser turns a line into an Observation: an out-of-memory message, a
// continuation of one (PyTorch wraps its message over several lines,
// llama.cpp reports one failure in three lines), a hint about what the
// program was doing (a traceback frame in from_pretrained), or a number the
// engine printed before failing (model weights, KV cache size). The scanner
// merges the lines of one failure into a Finding, classifies it
// (classify.cpp) and attaches ranked fixes (advise.cpp). Wordings that look
// like an out-of-memory error but match no known form come out as
// `unrecognised`: the tool never guesses a cause it cannot read.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace headroom::doctor {

// Lines longer than this keep their first kMaxLineBytes bytes; the rest is
// skipped and counted in Report::n_long_lines.
inline constexpr size_t kMaxLineBytes = 64 * 1024;
// At most this many findings are kept; further ones are only counted.
inline constexpr size_t kMaxFindings = 1000;

enum class OomClass {
    WeightsTooLarge,     // the model's weights do not fit
    KvCacheTooLarge,     // context length x sequences needs more KV cache than there is
    ActivationsOrBatch,  // a forward pass (batch, prefill chunk, logits) needs more scratch
    Fragmentation,       // the bytes exist but not in one piece (allocator cache, driver)
    OtherProcess,        // other processes hold the memory this one needs
    UtilizationSetting,  // a memory-fraction setting caps the engine below what it needs
    CpuRam,              // host memory, not GPU memory
    NotOom,              // an error people mistake for out-of-memory
    Unrecognised,        // looks like out-of-memory; wording or cause cannot be read
};
std::string_view class_name(OomClass c);

enum class Framework { PyTorch, Vllm, LlamaCpp, Ollama, Tgi, Sglang, Transformers, Host, Unknown };
std::string_view framework_name(Framework f);

// What the program was doing when it failed, read from the failing lines or
// from the traceback and log lines just before them.
enum class Phase { Unknown, Weights, KvCache, Compute, Profiling, SamplerWarmup, CudaGraph };
std::string_view phase_name(Phase p);  // "weights", "kv_cache", ..., "unknown"

// What the advisor knows about the model, when the user names one (`doctor
// -m`): a GGUF file's own tensors, or the planner's description of a Hugging
// Face config or a built-in model, and the planner's sizes in other types.
struct ModelFacts {
    std::string name;
    uint64_t n_params = 0;
    uint64_t weight_bytes = 0;        // as stored (all tensors)
    uint64_t kv_bytes_per_token = 0;  // K and V of one token, all layers, F16
    std::vector<std::pair<std::string, uint64_t>> weight_bytes_by_type;  // "Q4_K" -> bytes
    // The model's weights in other types, as the planner estimates them
    // (`plan --compare-quant`): "q4_k_m", "nf4", "awq", "fp8" -> bytes. The
    // advice names only types listed here.
    std::vector<std::pair<std::string, uint64_t>> weight_bytes_as;
};

struct Fix {
    std::string action;   // "Shorten the context"
    std::string command;  // the exact flag, variable or command: "--max-model-len 7344"
    std::string effect;   // what it buys: "the KV cache holds 7,344 tokens; one request fits"
};

struct Finding {
    Framework framework = Framework::Unknown;
    OomClass oom_class = OomClass::Unrecognised;
    Phase phase = Phase::Unknown;
    uint64_t line = 0;  // 1-based line of the first line of the message
    uint32_t n_occurrences = 1;
    std::string wording;  // which message form matched, e.g. "pytorch-2.1"
    std::string message;  // the message text as logged (first 400 bytes)
    std::string cause;    // one sentence for people

    // Bytes as the log states them or as derived from what it states; empty
    // where the log does not say. deficit = requested - (free + reserved
    // unallocated); negative when the bytes were there but not usable.
    std::optional<uint64_t> requested_bytes, total_bytes, free_bytes, this_process_bytes,
        other_processes_bytes, reserved_unallocated_bytes;
    std::optional<int64_t> deficit_bytes;

    // Token counts that serving engines report instead of bytes.
    std::optional<uint64_t> max_model_len_tokens, kv_cache_tokens, estimated_max_len_tokens,
        prefill_tokens, total_tokens, n_sequences;

    // Numbers of the log that cannot all be true, each said in one sentence
    // with what the doctor reasoned from instead.
    std::vector<std::string> contradictions;

    // What the log's readings (nvidia-smi, memory_summary, llama.cpp's
    // buffer lines) show about this failure, one sentence each.
    std::vector<std::string> evidence;

    std::vector<Fix> fixes;
};

struct Report {
    std::vector<Finding> findings;
    // The readings of a log without a failure, one sentence each.
    std::vector<std::string> evidence;
    uint64_t n_lines = 0;
    uint64_t n_long_lines = 0;        // lines cut at kMaxLineBytes
    uint64_t n_findings_dropped = 0;  // beyond kMaxFindings
};

struct Options {
    std::optional<uint64_t> device_memory_bytes;  // total, when the log does not say it
    std::optional<ModelFacts> model;
};

// Streaming reader: feed() any chunks of the log, then finish() once.
// Memory use is bounded by kMaxLineBytes and kMaxFindings whatever the input.
class LogScanner {
  public:
    explicit LogScanner(Options options = {});
    ~LogScanner();
    LogScanner(const LogScanner&) = delete;
    LogScanner& operator=(const LogScanner&) = delete;

    void feed(std::string_view bytes);
    Report finish();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

Report diagnose(std::string_view log, const Options& options = {});
Report diagnose(std::istream& in, const Options& options = {});

}  // namespace headroom::doctor
