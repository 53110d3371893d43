// What a parser reads from one line, and the parsers' entry points. Each
// parser returns true when it recognised the line; the scanner tries them in
// a fixed order and takes the first that does.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

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
    PythonMemoryError,
    HostMmapFailed,  // "unable to mmap N bytes from file <F>: Cannot allocate memory (12)"
    // other
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
    std::optional<uint64_t> max_model_len, kv_tokens, estimated_max_len, prefill_tokens,
        total_tokens, n_sequences;
    std::optional<double> utilization;
    // vLLM's profiling summary: what it took before the KV cache, and what was left (signed).
    std::optional<uint64_t> non_torch, activation_peak;
    std::optional<int64_t> kv_left;
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
