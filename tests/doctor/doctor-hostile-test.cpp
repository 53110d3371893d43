// Input nobody should write but logs contain: binary garbage, a 100 MB log,
// a 10^6-character line, lines made of near-matches. The scanner must finish
// in time linear in the input and keep its memory bounded. (ctest gives
// these tests a timeout; they do not time themselves.)
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "doctor/doctor.h"

namespace headroom::doctor {
namespace {

const std::string kTorchOom =
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total "
    "capacity of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process "
    "has 23.60 GiB memory in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and "
    "194.87 MiB is reserved by PyTorch but unallocated.\n";

TEST(DoctorHostile, RandomBinary) {
    std::mt19937_64 rng(7);
    LogScanner s;
    std::string chunk;
    for (int i = 0; i < 64; ++i) {
        chunk.resize(1 + rng() % (256 * 1024));
        for (char& c : chunk) c = static_cast<char>(rng());
        s.feed(chunk);
    }
    const Report r = s.finish();
    EXPECT_GT(r.n_lines, 0u);
    EXPECT_LE(r.findings.size(), kMaxFindings);
}

// Printable garbage made of the very words the parsers look for.
TEST(DoctorHostile, RandomAnchorSoup) {
    static const char* kWords[] = {"out of memory",
                                   "Tried to allocate",
                                   "GiB",
                                   "MiB",
                                   "(GPU 0;",
                                   "total capacity;",
                                   "of which",
                                   "is free.",
                                   "Process 12 has",
                                   "this process has",
                                   "allowed;",
                                   "cudaMalloc failed: out of memory",
                                   "failed to allocate CUDA0 buffer of size",
                                   "\x1b[31m",
                                   "\x1b]0;",
                                   "\r",
                                   "\n",
                                   " ",
                                   "0",
                                   "1.5",
                                   "99999999999999999999",
                                   ",",
                                   "KV cache (",
                                   "max seq len (",
                                   "Killed process",
                                   "anon-rss:",
                                   "kB",
                                   "OOMKilled",
                                   "File \"x.py\", line 1, in load_model",
                                   "raise ValueError(",
                                   "MPS backend out of memory",
                                   "Not enough memory to handle",
                                   "prefill tokens",
                                   "total tokens with"};
    std::mt19937_64 rng(11);
    LogScanner s;
    std::string chunk;
    for (int i = 0; i < 200'000; ++i) {
        chunk += kWords[rng() % std::size(kWords)];
        if (chunk.size() > 4096) {
            s.feed(chunk);
            chunk.clear();
        }
    }
    s.feed(chunk);
    const Report r = s.finish();
    EXPECT_LE(r.findings.size(), kMaxFindings);
}

TEST(DoctorHostile, HundredMegabyteLog) {
    // Realistic noise with the same failure every 20,000 lines: one finding
    // that occurred n times.
    const std::string noise[] = {
        "INFO 12-20 20:25:46 worker.py:241] Memory profiling takes 19.77 seconds\n",
        "INFO:     172.17.0.1:48732 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n",
        "llama_kv_cache_init:      CUDA0 KV buffer size =   800.00 MiB\n",
        "[12:01:07] Step 1500 (5.00%): 412.3 ms/it, loss 2.3145, lr 3.0e-4, tokens/s 18234\n",
        "2025-06-02 10:00:01 DEBUG scheduler: 14 running, 2 waiting, KV cache usage 81.3%\n",
    };
    const uint64_t target = 100ull << 20;
    uint64_t bytes = 0, n_lines = 0, n_oom = 0;
    LogScanner s;
    std::string chunk;
    while (bytes < target) {
        const std::string& line = (n_lines % 20'000 == 19'999) ? kTorchOom : noise[n_lines % 5];
        if (&line == &kTorchOom) ++n_oom;
        chunk += line;
        bytes += line.size();
        ++n_lines;
        if (chunk.size() >= (1 << 20)) {
            s.feed(chunk);
            chunk.clear();
        }
    }
    s.feed(chunk);
    const Report r = s.finish();
    EXPECT_EQ(r.n_lines, n_lines);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].n_occurrences, n_oom);
    EXPECT_EQ(r.findings[0].line, 20'000u);
    EXPECT_EQ(r.findings[0].oom_class, OomClass::ActivationsOrBatch);
}

TEST(DoctorHostile, ManyDifferentFindingsAreCapped) {
    LogScanner s;
    for (int i = 0; i < 3000; ++i)
        s.feed("DefaultCPUAllocator: can't allocate memory: you tried to allocate " +
               std::to_string(1000 + i) + " bytes.\n\n\n\n\n\n\n\n\n\n");
    const Report r = s.finish();
    EXPECT_EQ(r.findings.size(), kMaxFindings);
    EXPECT_EQ(r.n_findings_dropped, 3000 - kMaxFindings);
}

TEST(DoctorHostile, MillionCharacterLine) {
    std::string log(1'000'000, 'a');
    for (size_t i = 0; i < log.size(); i += 97) log[i] = ' ';
    log += "\n" + kTorchOom;
    const Report r = diagnose(log);
    EXPECT_EQ(r.n_lines, 2u);
    EXPECT_EQ(r.n_long_lines, 1u);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].line, 2u);
    EXPECT_EQ(r.findings[0].requested_bytes, 22u << 20);
}

TEST(DoctorHostile, MillionCharacterMessageLine) {
    // The message opens a line whose tail is a megabyte of near-matches.
    std::string log = kTorchOom.substr(0, kTorchOom.size() - 1);
    while (log.size() < 1'000'000) log += " of which 1.00 GiB is free. Process 1 has 2 GiB";
    const Report r = diagnose(log);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.n_long_lines, 1u);
    EXPECT_EQ(r.findings[0].requested_bytes, 22u << 20);
}

TEST(DoctorHostile, RepetitiveNearMatches) {
    // Lines that almost match, each near the length cap, several thousand times.
    const std::string stems[] = {"out of memor",
                                 "tried to allocat",
                                 "total capacit",
                                 "cudamalloc failed: out of memor",
                                 "\x1b[",
                                 "\x1b]",
                                 "9999999999999999999999999999.9999 ",
                                 "process 1 has ",
                                 "memory memory ",
                                 "failed to allocate  buffer of size "};
    LogScanner s;
    for (int n = 0; n < 40; ++n) {
        for (const auto& stem : stems) {
            std::string line;
            while (line.size() < kMaxLineBytes) line += stem;
            line += '\n';
            s.feed(line);
        }
    }
    const Report r = s.finish();
    EXPECT_EQ(r.n_lines, 400u);
    EXPECT_GE(r.n_long_lines, 240u);  // escape-only lines keep no text
    EXPECT_TRUE(r.findings.empty());
}

TEST(DoctorHostile, EmptyAndTinyInputs) {
    EXPECT_TRUE(diagnose("").findings.empty());
    EXPECT_EQ(diagnose("").n_lines, 0u);
    EXPECT_EQ(diagnose("\n").n_lines, 1u);
    EXPECT_EQ(diagnose("x").n_lines, 1u);
    EXPECT_TRUE(diagnose(std::string(1, '\0')).findings.empty());
    EXPECT_TRUE(diagnose("\x1b").findings.empty());
    EXPECT_TRUE(diagnose("\r\r\r").findings.empty());
}

}  // namespace
}  // namespace headroom::doctor
