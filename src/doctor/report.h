// Rendering a doctor Report for people (cause first, then numbers, then
// fixes) and for tools (JSON with null where the log does not say).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "doctor/doctor.h"

namespace headroom::doctor {

std::string render_text(const Report& report);

// {"findings": [{"framework", "class", "line", "requested_bytes", "total_bytes",
//   "free_bytes", "this_process_bytes", "other_processes_bytes",
//   "reserved_unallocated_bytes", "deficit_bytes", "fixes": [...], ...}], ...}
nlohmann::ordered_json render_json(const Report& report);

}  // namespace headroom::doctor
