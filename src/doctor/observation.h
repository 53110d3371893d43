// What a parser reads from one line, and the parsers' entry points. Each
// parser returns true when it recognised the line; the scanner tries them in
// a fixed order and takes the first that does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/doctor.h"
#include "doctor/text.h"

namespace headroom::doctor {

// Every message form doctor knows. A finding records which forms its lines
// matched; a form seen twice starts a new finding (a repeated failure).
enum class Wording : uint8_t {
    None,
    // PyTorch
    TorchPre21,   // "(GPU 0; T total capacity; A already allocated; F free; R reserved ...)"
    TorchCached,  // oldest form, "... F free; C cached)"
    Torch21,      // "GPU 0 has a total capac(i)ty of T of which F is free. ..."
    TorchBare,    // "CUDA out of memory. Tried to allocate X" and nothing more
    TorchMps,
    TorchCpu,
    // "Allocation on device N would exceed allowed memory. (out of memory)"
    // then "Currently allocated / Requested / Device limit / Free (according
    // to CUDA) / PyTorch limit (set by user-supplied memory fraction)", one
    // field a line: the cudaMallocAsync backend (ComfyUI's default, TGI).
    TorchAllowed,
    // torch.cuda.memory_summary() counting CUDA OOMs, in a log without the
    // message itself.
    TorchMemorySummary,
    CudaErrorOom,  // "CUDA error: out of memory" (runtime API error, no numbers)
    // vLLM
    VllmNoCacheBlocks,
    VllmMaxSeqLen,
    VllmServeOneRequest,
    VllmFreeMemoryStartup,
    VllmSamplerWarmup,
    // The profiling summary "model weights take W; non_torch_memory takes N;
    // PyTorch activation peak memory takes A; the rest of the memory reserved
    // for KV Cache is K" with K <= 0: the budget total x utilization is gone
    // before the KV cache.
    VllmProfileNoKv,
    // llama.cpp / ggml
    GgmlDeviceMallocFailed,  // "allocating X MiB on device N: cudaMalloc failed"
    GgmlBufferFailed,        // "failed to allocate CUDA0 buffer of size N"
    GgmlHostBufferFailed,    // "ggml_backend_cpu_buffer_type_alloc_buffer: failed ..."
    GgmlMetalBufferFailed,
    GgmlModelLoadFailed,  // "error loading model: unable to allocate ... buffer"
    GgmlKvFailed,         // "failed to allocate buffer for kv cache"
    GgmlComputeFailed,    // "failed to allocate compute (pp) buffers"
    // "CUDA error: out of memory" then "current device: N, in function
    // ggml_cuda_pool_malloc_vmm / alloc at ..." and the failing call: the
    // CUDA pool of compute scratch could not grow (cuMemCreate,
    // cuMemSetAccess, ggml_cuda_device_malloc) ...
    GgmlCudaPool,
    // ... or could not reserve its virtual address range (cuMemAddressReserve):
    // a driver limit, not a shortage of VRAM.
    GgmlCudaVmmReserve,
    MetalOutOfMemory,  // kIOGPUCommandBufferCallbackErrorOutOfMemory
    MetalStatus5,      // "command buffer N failed with status 5"
    // Ollama, TGI, SGLang, transformers, host
    OllamaSystemMemory,
    TgiPrefill,
    TgiTotalTokens,
    SglangNotEnoughMemory,
    BnbDispatchedToCpu,
    LinuxOomKiller,
    CgroupOomKiller,
    OomKilled,
    // The shell's "Killed" (SIGKILL: "Killed" alone, glued after a progress
    // bar, or a job line "7 Killed  cmd"), or an exit code of 137 (128 + 9).
    ShellKilled,
    PythonMemoryError,
    HostMmapFailed,  // "unable to mmap N bytes from file <F>: Cannot allocate memory (12)"
    // other
    // "Not enough memory for (the) KV cache" from an engine doctor does not
    // otherwise know.
    KvCacheNoRoom,
    Unknown,  // an out-of-memory wording no parser knows
    NotOom,
    // TensorFlow's BFC allocator: "ran out of memory trying to allocate X ...
    // The caller indicates that this is not a failure": a warning, the
    // allocation was retried smaller and the program went on.
    TfBfcNotFailure,
};
std::string_view wording_name(Wording w);

// Numbers the log can state about one failure.
struct Numbers {
    std::optional<uint64_t> requested, total, free, this_process, allocated, reserved, unallocated,
        allowed;
    std::optional<uint64_t> largest_other_process;  // biggest "Process P has X" entry
    std::optional<uint64_t> sum_listed_processes;   // all "Process P has X" entries
    std::optional<uint64_t> n_listed_processes;
    std::optional<uint64_t> max_model_len, kv_tokens, estimated_max_len, prefill_tokens,
        total_tokens, n_sequences;
    std::optional<double> utilization;
    // vLLM's profiling summary: what it took before the KV cache, and what was left (signed).
    std::optional<uint64_t> non_torch, activation_peak;
    std::optional<int64_t> kv_left;
    // torch.cuda.memory_summary()'s "Non-releasable memory": cached bytes in
    // segments that also hold live blocks (inactive split blocks).
    std::optional<uint64_t> inactive_split;
};

struct Observation {
    enum class Kind {
        None,
        Oom,           // a line that is itself an out-of-memory message
        Continuation,  // more of the message an open finding started
        NotOom,        // an error that is not out-of-memory
    };
    Kind kind = Kind::None;
    Wording wording = Wording::None;
    Framework framework = Framework::Unknown;
    Phase phase = Phase::Unknown;
    bool host_memory = false;     // the failing allocation is host RAM
    bool wraps_previous = false;  // re-raises an error logged just before
    Numbers numbers;
};

// Facts an engine logs before it fails; later findings read them.
struct LogContext {
    Framework engine = Framework::Unknown;  // sticky: the engine the log comes from
    Phase hint = Phase::Unknown;            // what the program was doing lately
    uint64_t hint_line = 0;
    std::optional<uint64_t> device_total_bytes;
    std::optional<uint64_t> weights_bytes;
    std::optional<uint64_t> kv_bytes;
    std::optional<uint64_t> n_ctx;
    std::optional<double> utilization;
    uint64_t n_pipeline_copies = 0;  // llama.cpp keeps this many compute buffers
    // Metal: the bytes allocated so far, from "(used / recommended max)" after
    // each buffer (the recommended max working set goes to device_total_bytes).
    std::optional<uint64_t> metal_used;
};

// What the user printed beside the failure to show where the memory is:
// nvidia-smi's table, its --query-compute-apps and --query-gpu CSV, gpustat,
// torch.cuda.memory_summary() and llama.cpp's buffer lines. Read over the
// whole log, before or after the failure; each list keeps its first
// kMaxEntries entries.
struct Readings {
    static constexpr size_t kMaxEntries = 64;
    struct Gpu {
        uint64_t line = 0;
        std::optional<uint64_t> index;
        uint64_t used = 0, total = 0;
        std::string_view source;  // "nvidia-smi", "gpustat", "llama.cpp --list-devices"
    };
    struct Process {
        uint64_t line = 0;
        std::optional<uint64_t> gpu;
        uint64_t pid = 0;
        std::string name;
        std::optional<uint64_t> used;
    };
    struct TorchSummary {
        uint64_t line = 0;
        std::optional<uint64_t> device, n_ooms, n_retries, allocated, reserved, non_releasable;
    };
    struct Buffers {  // llama.cpp's buffers on one device
        uint64_t line = 0;
        std::string device;  // "CUDA0", "CPU_Mapped"
        uint64_t weights = 0, kv = 0, compute = 0;
    };
    std::vector<Gpu> gpus;
    std::vector<Process> processes;
    std::vector<TorchSummary> summaries;
    std::vector<Buffers> buffers;
    std::optional<uint64_t> empty_process_table;  // line of an nvidia-smi process table with no row

    // Where the reader is.
    enum class Block { None, SmiGpus, SmiProcesses, ComputeAppsCsv, GpuCsv, Summary, LlamaDevices };
    Block block = Block::None;
    uint64_t block_line = 0;          // the last line that belonged to the block
    std::optional<uint64_t> smi_gpu;  // the GPU whose row was read last
    size_t n_rows = 0;
    struct Columns {
        std::optional<size_t> pid, name, used, total, index;
        size_t n = 0;
    } columns;
};
// Cheap test on the raw line: may it belong to a table the reader reads?
// (Table rows carry none of the gate's words.)
bool wants_reading(std::string_view raw, const Readings& r);
bool read_readings(const Line& line, Readings& r);

// Parsers (one file per framework family).
bool parse_pytorch(const Line& line, Observation& out);
// Reads the numbers of a PyTorch message (possibly wrapped over several
// lines and joined) and returns its form.
Wording parse_pytorch_message(const Line& message, Numbers& out);
bool is_pytorch_continuation(const Line& line);
// A field line of the TorchAllowed form ("Requested : 512.00 KiB"); these
// lines carry no memory word, so the scanner asks before its gate.
bool is_allowed_memory_field(const Line& line);
bool parse_vllm(const Line& line, Observation& out);
bool parse_ggml(const Line& line, Observation& out);
bool parse_servers(const Line& line, Observation& out);  // Ollama, TGI, SGLang
bool parse_host(const Line& line, Observation& out);     // kernel, containers, bitsandbytes
bool parse_generic(const Line& line, Observation& out);  // unknown wordings, not-OOM errors

// Context readers: engine markers, phase hints and numbers logged before a
// failure. Return true when they took something from the line.
bool read_python_context(const Line& line, LogContext& ctx);
bool read_vllm_context(const Line& line, LogContext& ctx);
bool read_ggml_context(const Line& line, LogContext& ctx);
bool read_servers_context(const Line& line, LogContext& ctx);

}  // namespace headroom::doctor
