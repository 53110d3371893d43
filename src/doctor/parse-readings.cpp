// Readings: the tables people paste beside an out-of-memory error to show
// where the memory is. Each reader takes the rows it knows and ignores the
// rest; a block ends at the first line that does not belong to it.
//
//   nvidia-smi      | 0  Tesla P100-SXM2...  Off  | 00000000:05:00.0 Off |   0 |
//                   | N/A 36C P0 41W / 300W |  12799MiB / 16280MiB |  0% Default |
//                   | Processes: ...
//                   |    0   N/A  N/A      1234      C   python        11000MiB |
//   compute-apps    pid, process_name, used_gpu_memory [MiB]
//                   1234, python, 11000 MiB
//   query-gpu       index, memory.used [MiB], memory.total [MiB]
//                   0, 11843 MiB, 12288 MiB
//   gpustat         [6] NVIDIA A100 80GB PCIe | 52'C, 100 % | 10151 / 81920 MB |
//   user:python/1234(10000M) memory_summary  |   PyTorch CUDA memory summary, device ID 0   |
//                   |   CUDA OOMs: 1   |   cudaMalloc retries: 1   |
//                   | Allocated memory      |    1062 MB |    4877 MB | ...
//                   | GPU reserved memory   |   12420 MB | ...
//                   | Non-releasable memory |     780 MB | ...
//   list-devices    Available devices:
//                     ROCm0: AMD Radeon(TM) Graphics (110511 MiB, 110357 MiB free)
//   llama.cpp       llama_kv_cache_init:      CUDA0 KV buffer size =    36.00 MiB
//                   llama_new_context_with_model:      CUDA0 compute buffer size =   504.25 MiB
#include <string>
#include <vector>

#include "core/strings.h"
#include "doctor/observation.h"

namespace headroom::doctor {

namespace {

// Lines a summary may span from its title to its last row.
constexpr uint64_t kSummaryLines = 48;

std::string_view trim(std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '|')) s.remove_suffix(1);
    return s;
}

std::vector<std::string_view> split(std::string_view s, char by) {
    std::vector<std::string_view> parts;
    size_t start = 0;
    for (size_t i = 0; i <= s.size(); ++i) {
        if (i == s.size() || s[i] == by) {
            parts.push_back(trim(s.substr(start, i - start)));
            start = i + 1;
        }
    }
    return parts;
}

std::vector<std::string_view> words(std::string_view s) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && s[i] == ' ') ++i;
        const size_t start = i;
        while (i < s.size() && s[i] != ' ') ++i;
        if (i > start) out.push_back(s.substr(start, i - start));
    }
    return out;
}

std::optional<uint64_t> whole_integer(std::string_view s) {
    size_t end = 0;
    const auto v = integer_at(s, 0, &end);
    if (!v || end != s.size()) return std::nullopt;
    return v;
}

std::optional<uint64_t> whole_bytes(std::string_view s) {
    const auto q = quantity_at(s, 0);
    if (!q || q->end != s.size()) return std::nullopt;
    return q->bytes;
}

template <typename T>
void keep(std::vector<T>& list, T entry) {
    if (list.size() < Readings::kMaxEntries) list.push_back(std::move(entry));
}

// A GPU row whose numbers can be true: some total, no more used than that.
void keep_gpu(Readings& r, const Readings::Gpu& g) {
    if (g.total > 0 && g.used <= g.total) keep(r.gpus, g);
}

// "12799MiB / 16280MiB" anywhere in the line: the used and total of a GPU.
bool used_of_total(std::string_view lower, uint64_t& used, uint64_t& total) {
    for (size_t at = lower.find('/'); at != std::string_view::npos; at = lower.find('/', at + 1)) {
        const auto a = quantity_before(lower, at);
        const auto b = quantity_at(lower, at + 1);
        if (a && b && b->bytes > 0) {
            used = a->bytes;
            total = b->bytes;
            return true;
        }
    }
    return false;
}

// A process row of nvidia-smi: "| GPU [GI CI] PID Type Name Memory |".
bool read_smi_process(const Line& l, Readings& r) {
    const size_t bar = l.lower.find('|');
    const std::vector<std::string_view> lw = words(trim(l.lower.substr(bar + 1)));
    const std::vector<std::string_view> tw = words(trim(l.text.substr(bar + 1)));
    if (lw.size() < 4 || lw.size() != tw.size()) return false;
    const auto gpu = whole_integer(lw[0]);
    if (!gpu) return false;
    for (size_t k = 2; k + 1 < lw.size(); ++k) {
        const std::string_view type = lw[k];
        if (type != "c" && type != "g" && type != "c+g" && type != "m" && type != "m+c") continue;
        const auto pid = whole_integer(lw[k - 1]);
        if (!pid) return false;
        Readings::Process p;
        p.line = l.number;
        p.gpu = gpu;
        p.pid = *pid;
        const size_t last = lw.size() - 1;
        p.used = whole_bytes(lw[last]);
        for (size_t j = k + 1; j < last; ++j) {
            if (!p.name.empty()) p.name += ' ';
            p.name += tw[j];
        }
        keep(r.processes, std::move(p));
        return true;
    }
    return false;
}

void read_columns(std::string_view lower, Readings& r) {
    const std::vector<std::string_view> cols = split(lower, ',');
    Readings::Columns c;
    c.n = cols.size();
    for (size_t k = 0; k < cols.size(); ++k) {
        const std::string_view h = cols[k];
        if (h == "pid") c.pid = k;
        if (h == "process_name" || h == "name") c.name = k;
        if (h.starts_with("used_gpu_memory") || h.starts_with("used_memory") ||
            h.starts_with("memory.used"))
            c.used = k;
        if (h.starts_with("memory.total")) c.total = k;
        if (h == "index") c.index = k;
    }
    r.columns = c;
}

bool read_csv_row(const Line& l, Readings& r) {
    const std::vector<std::string_view> lower = split(l.lower, ',');
    const std::vector<std::string_view> text = split(l.text, ',');
    const Readings::Columns& c = r.columns;
    if (lower.size() != c.n || text.size() != c.n || !c.used) return false;
    const auto used = whole_bytes(lower[*c.used]);
    if (r.block == Readings::Block::ComputeAppsCsv) {
        const auto pid = c.pid ? whole_integer(lower[*c.pid]) : std::nullopt;
        if (!pid) return false;
        Readings::Process p;
        p.line = l.number;
        p.pid = *pid;
        if (c.name) p.name = std::string(text[*c.name]);
        p.used = used;
        keep(r.processes, std::move(p));
        return true;
    }
    const auto total = c.total ? whole_bytes(lower[*c.total]) : std::nullopt;
    if (!used || !total) return false;
    Readings::Gpu g;
    g.line = l.number;
    if (c.index) g.index = whole_integer(lower[*c.index]);
    g.used = *used;
    g.total = *total;
    g.source = "nvidia-smi";
    keep_gpu(r, g);
    return true;
}

// gpustat: "[6] NVIDIA A100 80GB PCIe | 52'C, 100 % | 10151 / 81920 MB | user:python/1234(10000M)"
bool read_gpustat(const Line& l, Readings& r) {
    const std::string_view s = trim(l.lower);
    if (s.size() < 4 || s[0] != '[') return false;
    size_t end = 0;
    const auto index = integer_at(s, 1, &end);
    if (!index || end >= s.size() || s[end] != ']') return false;
    const std::vector<std::string_view> fields = split(s, '|');
    if (fields.size() < 3) return false;
    // "10151 / 81920 MB": the unit follows the total only.
    const std::string_view mem = fields[2];
    size_t used_end = 0;
    const auto used_mb = integer_at(mem, 0, &used_end);
    const size_t slash = mem.find('/');
    const auto total = slash == std::string_view::npos ? std::nullopt : quantity_at(mem, slash + 1);
    if (!used_mb || !total || trim(mem.substr(used_end, slash - used_end)) != "") return false;
    if (*used_mb >= (1ull << 40)) return false;
    const uint64_t used = *used_mb << 20;
    keep_gpu(r, Readings::Gpu{l.number, index, used, total->bytes, "gpustat"});
    if (fields.size() < 4) return true;
    // Processes: "user:name/pid(usedM)", separated by spaces.
    const std::vector<std::string_view> tw = words(trim(split(trim(l.text), '|')[3]));
    for (std::string_view w : tw) {
        const size_t slash = w.rfind('/'), open = w.rfind('(');
        if (slash == std::string_view::npos || open == std::string_view::npos || open < slash ||
            !w.ends_with("M)"))
            continue;
        const auto pid = whole_integer(w.substr(slash + 1, open - slash - 1));
        const auto mib = whole_integer(w.substr(open + 1, w.size() - open - 3));
        if (!pid || !mib || *mib >= (1ull << 40)) continue;
        Readings::Process p;
        p.line = l.number;
        p.gpu = index;
        p.pid = *pid;
        const size_t colon = w.find(':');
        const size_t from = colon == std::string_view::npos || colon > slash ? 0 : colon + 1;
        p.name = std::string(w.substr(from, slash - from));
        p.used = *mib << 20;
        keep(r.processes, std::move(p));
    }
    return true;
}

// A row of memory_summary: the first quantity after the label's column.
std::optional<uint64_t> summary_current(const Line& l, std::string_view label) {
    const size_t at = l.find(label);
    if (at == Line::npos) return std::nullopt;
    const size_t bar = l.lower.find('|', at);
    if (bar == std::string_view::npos) return std::nullopt;
    const auto q = quantity_at(l.lower, bar + 1);
    return q ? std::optional<uint64_t>(q->bytes) : std::nullopt;
}

bool read_summary(const Line& l, Readings& r) {
    // The title, or (an excerpt without it) the row that counts the OOMs.
    const bool in_summary = r.block == Readings::Block::Summary && !r.summaries.empty() &&
                            l.number <= r.summaries.back().line + kSummaryLines;
    if (l.has("memory summary, device id") || (!in_summary && l.has("cuda ooms:"))) {
        Readings::TorchSummary s;
        s.line = l.number;
        s.device = integer_after(l, "device id");
        s.n_ooms = integer_after(l, "cuda ooms:");
        s.n_retries = integer_after(l, "cudamalloc retries:");
        keep(r.summaries, s);
        r.block = Readings::Block::Summary;
        r.block_line = l.number;
        return true;
    }
    if (r.block != Readings::Block::Summary || r.summaries.empty() ||
        l.number > r.summaries.back().line + kSummaryLines)
        return false;
    Readings::TorchSummary& s = r.summaries.back();
    bool took = false;
    auto take = [&](std::optional<uint64_t>& dst, std::optional<uint64_t> v) {
        if (v && !dst) {
            dst = v;
            took = true;
        }
    };
    take(s.n_ooms, integer_after(l, "cuda ooms:"));
    take(s.n_retries, integer_after(l, "cudamalloc retries:"));
    take(s.allocated, summary_current(l, "allocated memory"));
    take(s.reserved, summary_current(l, "gpu reserved memory"));
    take(s.non_releasable, summary_current(l, "non-releasable memory"));
    r.block_line = l.number;
    return took;  // other rows of the table fall through to the other readers
}

// llama.cpp's "<device> model|KV|compute buffer size = X" lines, summed per device.
bool read_ggml_buffer(const Line& l, Readings& r) {
    if (!l.has("buffer size") || !(l.has("load_tensors") || l.has("kv_cache") ||
                                   l.has("llama_new_context") || l.has("llama_context")))
        return false;
    const size_t at = l.find("buffer size");
    const auto bytes = bytes_after(l, "buffer size");
    if (!bytes) return false;
    // The device is the word before the term ("CUDA0 KV buffer size") or
    // before "buffer size" itself (older "CUDA0 buffer size").
    std::vector<std::string_view> before = words(l.text.substr(0, at));
    if (before.empty()) return false;
    std::string_view term = before.back();
    const std::string lower_term = ascii_lower(term);
    const bool named_term = lower_term == "model" || lower_term == "kv" ||
                            lower_term == "compute" || lower_term == "output" ||
                            lower_term == "input";
    if (named_term) before.pop_back();
    if (before.empty()) return false;
    std::string_view device = before.back();
    if (device.ends_with(':')) return false;  // "load_tensors: buffer size" names no device
    Readings::Buffers* b = nullptr;
    for (auto& x : r.buffers)
        if (x.device == device) b = &x;
    if (!b) {
        if (r.buffers.size() >= Readings::kMaxEntries) return false;
        r.buffers.push_back({l.number, std::string(device), 0, 0, 0});
        b = &r.buffers.back();
    }
    // Weights again after the device's KV or compute: the model was loaded
    // anew (a runner restarted); the later load is the one that counts.
    const bool weights = lower_term != "kv" && lower_term != "compute" && lower_term != "output" &&
                         lower_term != "input";
    if (weights && (b->kv || b->compute)) b->weights = b->kv = b->compute = 0;
    b->line = l.number;
    if (lower_term == "kv")
        b->kv += *bytes;
    else if (lower_term == "compute" || lower_term == "output" || lower_term == "input")
        b->compute += *bytes;
    else
        b->weights += *bytes;
    return true;
}

// llama.cpp's --list-devices row: "ROCm0: AMD Radeon(TM) Graphics (110511 MiB, 110357 MiB free)".
bool read_llama_device(const Line& l, Readings& r) {
    const size_t colon = l.lower.find(':');
    const size_t open = l.lower.rfind('(');
    if (colon == std::string_view::npos || open == std::string_view::npos || open < colon)
        return false;
    const std::vector<std::string_view> parts = split(l.lower.substr(open + 1), ',');
    if (parts.size() != 2 || !parts[1].ends_with("free)")) return false;
    const auto total = quantity_at(parts[0], 0);
    const auto free = quantity_at(parts[1], 0);
    if (!total || !free || free->bytes > total->bytes) return false;
    const std::string_view name = trim(l.lower.substr(0, colon));
    size_t digits = name.size();
    while (digits > 0 && name[digits - 1] >= '0' && name[digits - 1] <= '9') --digits;
    Readings::Gpu g;
    g.line = l.number;
    if (digits < name.size()) g.index = whole_integer(name.substr(digits));
    g.used = total->bytes - free->bytes;
    g.total = total->bytes;
    g.source = "llama.cpp --list-devices";
    keep_gpu(r, g);
    return true;
}

}  // namespace

bool wants_reading(std::string_view raw, const Readings& r) {
    if (r.block == Readings::Block::ComputeAppsCsv || r.block == Readings::Block::GpuCsv ||
        r.block == Readings::Block::LlamaDevices)
        return true;
    size_t i = 0;
    while (i < raw.size() && raw[i] == ' ') ++i;
    return i < raw.size() && (raw[i] == '|' || raw[i] == '+' || raw[i] == '[');
}

bool read_readings(const Line& l, Readings& r) {
    using Block = Readings::Block;
    const std::string_view s = trim(l.lower);
    const bool bordered = !s.empty() && (s[0] == '|' || s[0] == '+');

    // CSV blocks: a header row, then rows with as many columns.
    if (r.block == Block::ComputeAppsCsv || r.block == Block::GpuCsv) {
        if (read_csv_row(l, r)) return true;
        r.block = Block::None;
    }
    if (l.has(",") && (l.has("used_gpu_memory") || l.has("used_memory") || l.has("memory.used"))) {
        read_columns(l.lower, r);
        r.block = r.columns.pid ? Block::ComputeAppsCsv : Block::GpuCsv;
        r.block_line = l.number;
        return true;
    }
    if (r.block == Block::LlamaDevices) {
        if (read_llama_device(l, r)) return true;
        r.block = Block::None;
    }
    if (l.has("available devices:")) {
        r.block = Block::LlamaDevices;
        return true;
    }
    if (read_summary(l, r)) return true;
    if (r.block == Block::Summary && !bordered) r.block = Block::None;
    if (read_ggml_buffer(l, r)) return true;
    if (read_gpustat(l, r)) return true;

    // nvidia-smi.
    if (l.has("nvidia-smi") && bordered) {
        r.block = Block::SmiGpus;
        r.smi_gpu.reset();
        return true;
    }
    if (l.has("processes:") && bordered) {
        r.block = Block::SmiProcesses;
        r.block_line = l.number;
        r.n_rows = 0;
        return true;
    }
    if (r.block == Block::SmiProcesses) {
        if (bordered && read_smi_process(l, r)) {
            ++r.n_rows;
            return true;
        }
        if (l.has("no running processes found")) {
            r.empty_process_table = l.number;
            return true;
        }
        // The table's bottom border, or the first line after it.
        if (!bordered || s[0] == '+') {
            if (r.n_rows == 0 && !r.empty_process_table) r.empty_process_table = r.block_line;
            r.block = Block::None;
        }
        return bordered;
    }
    if (!bordered) return false;
    // A GPU row ("|   0  Tesla P100 ... | bus id | ... |") names the GPU the
    // memory row under it belongs to.
    const std::vector<std::string_view> cells = split(s.substr(1), '|');
    if (!cells.empty()) {
        const std::vector<std::string_view> w = words(cells[0]);
        if (w.size() >= 2 && whole_integer(w[0]) && w[1][0] >= 'a' && w[1][0] <= 'z') {
            r.smi_gpu = whole_integer(w[0]);
            if (r.block == Block::None || r.block == Block::Summary) r.block = Block::SmiGpus;
            return true;
        }
    }
    if (r.block == Block::SmiGpus) {
        for (std::string_view cell : cells) {
            uint64_t used = 0, total = 0;
            if (used_of_total(cell, used, total)) {
                keep_gpu(r, Readings::Gpu{l.number, r.smi_gpu, used, total, "nvidia-smi"});
                return true;
            }
        }
    }
    return false;
}

}  // namespace headroom::doctor
