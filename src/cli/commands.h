// Each subcommand registers its flags and its action on the top-level app.
// Actions run after parsing; they throw headroom::Error for user-facing
// failures, which main() prints as one line.
#pragma once

#include <CLI/CLI.hpp>

namespace headroom::cli {

void add_doctor_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_run_command(CLI::App& app);
// `bench`: the single-sequence speed benchmark, with `bench serve` under it.
void add_bench_command(CLI::App& app);
// `bench serve`, registered under the bench command.
void add_bench_serve_subcommand(CLI::App& bench);
void add_serve_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_devices_command(CLI::App& app);

}  // namespace headroom::cli
