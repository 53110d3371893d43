// Tokenizer speed on a long text: encode and decode times for each model
// given, and with --llama-tokenize, llama.cpp's time for the same text
// (llama-tokenize on the text minus llama-tokenize on an empty file, so
// that loading the vocabulary cancels out) and the ratio.
//
//   tokenizer-bench [--llama-tokenize PATH] [--text FILE] MODEL.gguf...
//
// Without --text the text is tests/data/tokenizer/corpus.txt, unescaped and
// repeated to about 64 KiB (English, code, CJK, emoji, digits, whitespace).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf-reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The corpus lines with their escapes undone (see corpus.txt's header).
std::string corpus_text() {
    const std::string raw =
        read_file(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/tokenizer/corpus.txt");
    std::string text;
    std::istringstream lines(raw);
    for (std::string line; std::getline(lines, line);) {
        if (line.starts_with("#")) continue;
        for (size_t i = 0; i < line.size(); ++i) {
            if (line[i] != '\\' || i + 1 == line.size()) {
                text.push_back(line[i]);
                continue;
            }
            switch (const char c = line[++i]) {
                case 'n':
                    text.push_back('\n');
                    break;
                case 't':
                    text.push_back('\t');
                    break;
                case 'r':
                    text.push_back('\r');
                    break;
                case 'x':
                    text.push_back(
                        static_cast<char>(std::stoi(line.substr(i + 1, 2), nullptr, 16)));
                    i += 2;
                    break;
                case 'u': {
                    const size_t end = line.find('}', i);
                    headroom::unicode::append_utf8(
                        std::stoul(line.substr(i + 2, end - i - 2), nullptr, 16), text);
                    i = end;
                    break;
                }
                default:
                    text.push_back(c);
            }
        }
        text.push_back('\n');
    }
    std::string out;
    while (out.size() < 64 * 1024) out += text;
    return out;
}

template <class Fn>
double median_ms(int n, Fn&& fn) {
    std::vector<double> t;
    for (int i = 0; i < n; ++i) {
        const auto t0 = Clock::now();
        fn();
        t.push_back(ms_since(t0));
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

double run_ms(const std::string& cmd) {
    return median_ms(3, [&] {
        if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "failed: %s\n", cmd.c_str());
    });
}

}  // namespace

int main(int argc, char** argv) {
    std::string peer, text_path;
    std::vector<std::string> models;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--llama-tokenize" && i + 1 < argc) {
            peer = argv[++i];
        } else if (a == "--text" && i + 1 < argc) {
            text_path = argv[++i];
        } else {
            models.push_back(a);
        }
    }
    if (models.empty()) {
        std::fprintf(
            stderr, "usage: tokenizer-bench [--llama-tokenize PATH] [--text FILE] MODEL.gguf...\n");
        return 2;
    }
    const std::string text = text_path.empty() ? corpus_text() : read_file(text_path);
    const auto dir = std::filesystem::temp_directory_path();
    const std::string text_file = (dir / "headroom-tokenizer-bench.txt").string();
    const std::string empty_file = (dir / "headroom-tokenizer-bench-empty.txt").string();
    std::ofstream(text_file, std::ios::binary) << text;
    std::ofstream(empty_file, std::ios::binary) << "";

    std::printf("%-40s %8s %8s %9s %9s %8s %9s %10s %7s\n", "model", "bytes", "tokens", "load_ms",
                "encode_ms", "MB/s", "decode_ms", "peer_ms", "ratio");
    for (const std::string& path : models) {
        try {
            const auto file = headroom::gguf::GgufFile::open(path);
            const auto t0 = Clock::now();
            const auto tok = headroom::Tokenizer::from_gguf(file);
            const double load_ms = ms_since(t0);
            std::vector<int32_t> ids;
            const double encode_ms = median_ms(5, [&] { ids = tok->encode(text, false, true); });
            std::string back;
            const double decode_ms = median_ms(5, [&] { back = tok->decode(ids); });
            double peer_ms = 0;
            if (!peer.empty()) {
                const std::string base =
                    peer + " -m '" + path + "' --no-escape --log-disable --ids -f ";
                peer_ms = run_ms(base + "'" + text_file + "' > /dev/null") -
                          run_ms(base + "'" + empty_file + "' > /dev/null");
            }
            std::printf("%-40s %8zu %8zu %9.1f %9.2f %8.1f %9.2f %10.1f %7.2f\n",
                        std::filesystem::path(path).filename().string().c_str(), text.size(),
                        ids.size(), load_ms, encode_ms, text.size() / encode_ms / 1e3, decode_ms,
                        peer_ms, peer_ms > 0 ? peer_ms / encode_ms : 0.0);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s: %s\n", path.c_str(), e.what());
            return 1;
        }
    }
    std::filesystem::remove(text_file);
    std::filesystem::remove(empty_file);
    return 0;
}
