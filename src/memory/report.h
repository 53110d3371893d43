// The memory report: predicted terms next to what the ledger holds, for
// people (a table in the spirit of torch.cuda.memory_summary) and tools
// (JSON, the shape of `run --memory-report-json` and GET /v1/memory).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "core/ledger.h"
#include "kernels/backend.h"
#include "memory/kv-cache.h"
#include "memory/terms.h"

namespace headroom {

struct ProcessMemory {
    uint64_t rss_bytes = 0;        // now
    uint64_t rss_start_bytes = 0;  // before the model was loaded
};

// The engine configuration as reported by `run --memory-report-json`, /v1/memory and `plan --json`.
nlohmann::json engine_config_json(const EngineConfig& config);

// `ledgers`: one snapshot per device, the backend's first (the host only,
// for the CPU backend). Each device's terms are reported with what the plan
// predicted for it; "terms" and "predicted" at the top are their sums.
nlohmann::json memory_report_json(const MemoryPlan& plan, std::span<const LedgerSnapshot> ledgers,
                                  const KvCache& cache, const ProcessMemory& process);
std::string memory_report_table(const MemoryPlan& plan, std::span<const LedgerSnapshot> ledgers,
                                const KvCache& cache, const ProcessMemory& process);
// One line: "memory: weights 92.1 MiB, kv 180 MiB (2% used), activations 10 MiB, runtime 12 MiB;
// RSS 301 MiB", with the device when it is not the host.
std::string memory_summary_line(const MemoryPlan& plan, std::span<const LedgerSnapshot> ledgers,
                                const KvCache& cache, const ProcessMemory& process);
// A backend's name and traffic between host and device, for the report:
// the last step's and the totals since it opened.
struct BackendTraffic {
    std::string name;
    kernels::StepStats last_step;
    kernels::StepStats totals;
    uint64_t n_steps = 0;
};
nlohmann::json traffic_json(const BackendTraffic& t);
// One line for the table ("" on the CPU, which moves nothing).
std::string traffic_line(const BackendTraffic& t);

// The backend's allocations in its device's entry of a memory report
// ("allocations", "largest_allocation_bytes"), and its limit on one
// ("max_allocation_bytes", where it has one).
void add_allocations(nlohmann::json& report, kernels::Backend& backend);

// The terms of several snapshots added up (the whole process).
LedgerSnapshot sum_ledgers(std::span<const LedgerSnapshot> ledgers);

}  // namespace headroom
