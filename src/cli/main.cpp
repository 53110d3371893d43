// headroom: an LLM inference engine built around memory.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
    CLI::App app{
        "headroom: LLM inference that knows where every byte goes.\n"
        "Plans memory before loading, never dies of out-of-memory, explains other engines' OOMs.",
        "headroom"};
    app.set_version_flag("--version", HEADROOM_VERSION);
    app.require_subcommand(1);
    app.get_formatter()->column_width(36);
    headroom::cli::add_run_command(app);
    headroom::cli::add_doctor_command(app);
    headroom::cli::add_serve_command(app);
    headroom::cli::add_plan_command(app);
    headroom::cli::add_devices_command(app);
    headroom::cli::add_inspect_command(app);
    headroom::cli::add_quantize_command(app);
    headroom::cli::add_convert_command(app);
    headroom::cli::add_synth_command(app);
    headroom::cli::add_eval_command(app);
    headroom::cli::add_bench_command(app);
    // llama.cpp's -ngl, which CLI11 cannot name (one dash, several letters).
    std::vector<char*> args(argv, argv + argc);
    static char n_gpu_layers[] = "--n-gpu-layers";
    for (char*& a : args)
        if (std::string_view(a) == "-ngl") a = n_gpu_layers;
    try {
        app.parse(static_cast<int>(args.size()), args.data());
    } catch (const CLI::ParseError& e) {
        // --help and --version print and exit 0; a usage error prints and
        // exits 2, as getopt-style tools do, not with CLI11's own numbers.
        return app.exit(e) == 0 ? 0 : 2;
    } catch (const headroom::Error& e) {
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        fmt::print(stderr, "error: out of host memory\n");
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    }
    // Output that never reached stdout (a full disk) is a failure, not a
    // success with a truncated file.
    std::cout.flush();
    errno = 0;
    if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout) {
        fmt::print(stderr, "error: writing to stdout: {}\n",
                   errno ? std::strerror(errno) : "write failed");
        return 1;
    }
    return 0;
}
