// Host memory and loaders, then everything nobody else recognised.
//
//   kernel       Out of memory: Killed process P (python) total-vm:VkB, anon-rss:AkB,
//                  file-rss:FkB, shmem-rss:SkB, ...
//                Memory cgroup out of memory: Killed process P ...   (container limit)
//   Kubernetes   Reason: OOMKilled
//   Python       MemoryError
//   mmap         unable to mmap N bytes from file <F>: Cannot allocate memory (12)
//                  (torch and safetensors mapping a checkpoint: host address space)
//   bitsandbytes Some modules are dispatched on the CPU or the disk. Make sure you have
//                  enough GPU RAM to fit the quantized model. ...
//
// parse_generic catches out-of-memory wordings no parser knows (TensorFlow's
// "OOM when allocating tensor", JAX's RESOURCE_EXHAUSTED, ...) as
// `unrecognised`, and the errors people mistake for out-of-memory (an
// illegal memory access is a kernel bug, not a full GPU) as `not_oom`.
#include "doctor/observation.h"

namespace headroom::doctor {

namespace {

void mark(Observation& out, Wording w, Framework f) {
    out.kind = Observation::Kind::Oom;
    out.wording = w;
    out.framework = f;
}

bool looks_like_error(const Line& l) {
    for (auto word : {"error", "exception", "fatal", "failed", "failure", "abort", "panic",
                      "killed", "critical", "terminated"})
        if (l.has(word)) return true;
    return false;
}

}  // namespace

namespace {

// The shell's report of a SIGKILL ("Killed" alone or glued after a progress
// bar, or a job line "line 28:  7 Killed  cmd ...") or an exit code of 137
// (128 + SIGKILL, as Docker and CI print it).
bool shell_killed(const Line& l) {
    std::string_view s = l.lower;
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    if (s == "killed" || s.ends_with("]killed") || s.ends_with("] killed")) return true;
    for (auto code : {"exit code 137", "exited with code 137", "exit status 137"})
        if (l.has(code)) return true;
    // A job line: a number, then "Killed", then the command.
    for (size_t at = l.find(" killed "); at != Line::npos; at = l.find(" killed ", at + 1)) {
        size_t i = at;
        while (i > 0 && l.lower[i - 1] >= '0' && l.lower[i - 1] <= '9') --i;
        if (i < at && (i == 0 || l.lower[i - 1] == ' ') && l.text.substr(at + 1, 6) == "Killed")
            return true;
    }
    return false;
}

}  // namespace

bool parse_host(const Line& l, Observation& out) {
    if (l.has("unable to mmap")) {
        mark(out, Wording::HostMmapFailed, Framework::Host);
        out.host_memory = true;
        out.numbers.requested = integer_after(l, "unable to mmap");
        // A checkpoint file being mapped is the weights loading.
        for (auto ext : {".safetensors", ".pth", ".bin", ".pt>", ".ckpt", ".gguf"})
            if (l.has(ext)) out.phase = Phase::Weights;
        return true;
    }
    auto& n = out.numbers;
    if (l.has("out of memory: kill")) {  // "Killed process" or older "Kill process"
        mark(out, l.has("memory cgroup") ? Wording::CgroupOomKiller : Wording::LinuxOomKiller,
             Framework::Host);
        out.host_memory = true;
        // Resident set = anonymous + file-backed + shared pages (kernel kB = KiB).
        const auto anon = bytes_after(l, "anon-rss");
        const auto file = bytes_after(l, "file-rss");
        const auto shmem = bytes_after(l, "shmem-rss");
        if (anon) n.this_process = *anon + file.value_or(0) + shmem.value_or(0);
        return true;
    }
    if (l.has("oom-kill:") || l.has("invoked oom-killer") || l.has("oom_reaper:")) {
        // The kernel's surrounding report lines add nothing to the numbers.
        out.kind = Observation::Kind::Continuation;
        out.framework = Framework::Host;
        return true;
    }
    if (shell_killed(l)) {
        mark(out, Wording::ShellKilled, Framework::Host);
        out.host_memory = true;
        return true;
    }
    if (l.has("oomkilled")) {
        mark(out, Wording::OomKilled, Framework::Host);
        out.host_memory = true;
        return true;
    }
    if (l.has("some modules are dispatched on the cpu or the disk") ||
        l.has("make sure you have enough gpu ram to fit")) {
        mark(out, Wording::BnbDispatchedToCpu, Framework::Transformers);
        out.phase = Phase::Weights;
        return true;
    }
    // "MemoryError" raised by Python itself: the line is the exception.
    {
        std::string_view t = l.lower;
        while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
        while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
        if (t == "memoryerror" || t.starts_with("memoryerror:")) {
            mark(out, Wording::PythonMemoryError, Framework::Host);
            out.host_memory = true;
            return true;
        }
    }
    return false;
}

bool parse_generic(const Line& l, Observation& out) {
    if (l.has("the caller indicates that this is not a failure")) {
        out.kind = Observation::Kind::NotOom;
        out.wording = Wording::TfBfcNotFailure;
        out.framework = Framework::Unknown;
        out.numbers.requested = bytes_after(l, "trying to allocate");
        return true;
    }
    for (auto phrase :
         {"not enough memory for kv cache", "not enough memory for the kv cache",
          "insufficient memory for kv cache", "insufficient memory for the kv cache"}) {
        const size_t at = l.find(phrase);
        if (at == Line::npos || is_conditional(l, at)) continue;
        out.kind = Observation::Kind::Oom;
        out.wording = Wording::KvCacheNoRoom;
        out.framework = Framework::Unknown;
        out.phase = Phase::KvCache;
        return true;
    }
    static constexpr std::string_view kNotOom[] = {
        "an illegal memory access was encountered",
        "device-side assert triggered",
        "misaligned address",
        "memory access fault by gpu",
        "unspecified launch failure",
    };
    for (auto w : kNotOom) {
        if (l.has(w)) {
            out.kind = Observation::Kind::NotOom;
            out.wording = Wording::NotOom;
            return true;
        }
    }
    // RESOURCE_EXHAUSTED is also gRPC's "message too large": only with memory words.
    const bool exhausted = (l.has("resource_exhausted") || l.has("resourceexhausted") ||
                            l.has("resource exhausted")) &&
                           (l.has("memory") || l.has("oom") || l.has("allocat"));
    const bool identifier =
        l.has("outofmemory") || l.has("out_of_memory") || l.has("oom when allocating") || exhausted;
    bool phrase = false;
    for (auto anchor : {"out of memory", "out-of-memory"}) {
        const size_t at = l.find(anchor);
        if (at != Line::npos && !is_conditional(l, at) && looks_like_error(l)) phrase = true;
    }
    if (!identifier && !phrase) return false;
    out.kind = Observation::Kind::Oom;
    out.wording = Wording::Unknown;
    out.framework = Framework::Unknown;
    return true;
}

}  // namespace headroom::doctor
