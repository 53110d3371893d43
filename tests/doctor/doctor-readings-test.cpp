// The readings (nvidia-smi, its CSV queries, gpustat, memory_summary,
// llama.cpp's buffer and device lines) read row by row, with the sizes
// converted by hand from the rows, and what they change in a diagnosis.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/units.h"
#include "doctor/doctor.h"
#include "doctor/observation.h"

namespace headroom::doctor {
namespace {

Readings read_all(const std::vector<std::string>& lines) {
    Readings r;
    uint64_t number = 0;
    for (const std::string& text : lines) {
        std::string lower(text);
        for (char& c : lower)
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        read_readings(Line{text, lower, ++number}, r);
    }
    return r;
}

std::string joined(const std::vector<std::string>& lines) {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
}

// nvidia-smi 535's layout: two GPUs, three processes.
const std::vector<std::string> kSmi535 = {
    "+---------------------------------------------------------------------------------------+",
    "| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |",
    "|-----------------------------------------+----------------------+----------------------+",
    "| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |",
    "|=========================================+======================+======================|",
    "|   0  NVIDIA GeForce RTX 3060        Off | 00000000:01:00.0  On |                  N/A |",
    "|  0%   50C    P2              40W / 170W |  11843MiB / 12288MiB |      3%      Default |",
    "+-----------------------------------------+----------------------+----------------------+",
    "|   1  NVIDIA GeForce RTX 3060        Off | 00000000:02:00.0 Off |                  N/A |",
    "|  0%   35C    P8              15W / 170W |      5MiB / 12288MiB |      0%      Default |",
    "+-----------------------------------------+----------------------+----------------------+",
    "",
    "+---------------------------------------------------------------------------------------+",
    "| Processes:                                                                            |",
    "|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |",
    "|        ID   ID                                                             Usage      |",
    "|=======================================================================================|",
    "|    0   N/A  N/A      1234      C   python3                                   8000MiB |",
    "|    0   N/A  N/A      2345      C   /usr/bin/ollama serve                     3500MiB |",
    "|    0   N/A  N/A       999      G   /usr/lib/xorg/Xorg                         300MiB |",
    "+---------------------------------------------------------------------------------------+",
};

const std::vector<std::string> kSmi410Empty = {
    "+-----------------------------------------------------------------------------+",
    "| NVIDIA-SMI 410.48                 Driver Version: 410.48                    |",
    "|===============================+======================+======================|",
    "|   0  Tesla P100-SXM2...  Off  | 00000000:05:00.0 Off |                    0 |",
    "| N/A   36C    P0    41W / 300W |  12799MiB / 16280MiB |      0%      Default |",
    "+-------------------------------+----------------------+----------------------+",
    "+-----------------------------------------------------------------------------+",
    "| Processes:                                                       GPU Memory |",
    "|  GPU       PID   Type   Process name                             Usage      |",
    "|=============================================================================|",
    "+-----------------------------------------------------------------------------+",
};

TEST(Readings, NvidiaSmiGpusAndProcesses) {
    const Readings r = read_all(kSmi535);
    ASSERT_EQ(r.gpus.size(), 2u);
    EXPECT_EQ(r.gpus[0].index, 0u);
    EXPECT_EQ(r.gpus[0].used, 11843 * MiB);
    EXPECT_EQ(r.gpus[0].total, 12288 * MiB);
    EXPECT_EQ(r.gpus[1].index, 1u);
    EXPECT_EQ(r.gpus[1].used, 5 * MiB);
    ASSERT_EQ(r.processes.size(), 3u);
    EXPECT_EQ(r.processes[0].pid, 1234u);
    EXPECT_EQ(r.processes[0].name, "python3");
    EXPECT_EQ(r.processes[0].used, 8000 * MiB);
    EXPECT_EQ(r.processes[1].name, "/usr/bin/ollama serve");
    EXPECT_EQ(r.processes[1].used, 3500 * MiB);
    EXPECT_EQ(r.processes[2].pid, 999u);
    EXPECT_FALSE(r.empty_process_table);
}

TEST(Readings, NvidiaSmiOldLayoutWithAnEmptyProcessTable) {
    const Readings r = read_all(kSmi410Empty);
    ASSERT_EQ(r.gpus.size(), 1u);
    EXPECT_EQ(r.gpus[0].used, 12799 * MiB);
    EXPECT_EQ(r.gpus[0].total, 16280 * MiB);
    EXPECT_TRUE(r.processes.empty());
    EXPECT_TRUE(r.empty_process_table);
}

TEST(Readings, ComputeAppsAndQueryGpuCsv) {
    const Readings r = read_all({
        "$ nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
        "pid, process_name, used_gpu_memory [MiB]",
        "4242, python, 10240 MiB",
        "4343, /opt/bin/worker, 512 MiB",
        "$ nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv",
        "index, memory.used [MiB], memory.total [MiB]",
        "0, 11843 MiB, 12288 MiB",
        "after the table",
    });
    ASSERT_EQ(r.processes.size(), 2u);
    EXPECT_EQ(r.processes[0].pid, 4242u);
    EXPECT_EQ(r.processes[0].name, "python");
    EXPECT_EQ(r.processes[0].used, 10 * GiB);
    EXPECT_EQ(r.processes[1].used, 512 * MiB);
    ASSERT_EQ(r.gpus.size(), 1u);
    EXPECT_EQ(r.gpus[0].index, 0u);
    EXPECT_EQ(r.gpus[0].used, 11843 * MiB);
    EXPECT_EQ(r.gpus[0].total, 12288 * MiB);
}

TEST(Readings, Gpustat) {
    const Readings r = read_all(
        {"[6] NVIDIA A100 80GB PCIe | 52'C, 100 % | 10151 / 81920 MB | alice:python/4711(10000M)"});
    ASSERT_EQ(r.gpus.size(), 1u);
    EXPECT_EQ(r.gpus[0].index, 6u);
    EXPECT_EQ(r.gpus[0].used, 10151 * MiB);
    EXPECT_EQ(r.gpus[0].total, 80 * GiB);
    ASSERT_EQ(r.processes.size(), 1u);
    EXPECT_EQ(r.processes[0].pid, 4711u);
    EXPECT_EQ(r.processes[0].name, "python");
    EXPECT_EQ(r.processes[0].used, 10000 * MiB);
}

const std::vector<std::string> kSummary = {
    "|===========================================================================|",
    "|                  PyTorch CUDA memory summary, device ID 0                 |",
    "|---------------------------------------------------------------------------|",
    "|            CUDA OOMs: 1            |        cudaMalloc retries: 2         |",
    "|===========================================================================|",
    "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |",
    "|---------------------------------------------------------------------------|",
    "| Allocated memory      |  18.50 GiB |  19.00 GiB |  90.00 GiB |  71.50 GiB |",
    "|       from large pool |  18.40 GiB |  18.90 GiB |  89.00 GiB |  70.60 GiB |",
    "|---------------------------------------------------------------------------|",
    "| GPU reserved memory   |  21.50 GiB |  21.50 GiB |  24.00 GiB |   2.50 GiB |",
    "|---------------------------------------------------------------------------|",
    "| Non-releasable memory |   2.75 GiB |   3.00 GiB |  40.00 GiB |  37.25 GiB |",
    "|===========================================================================|",
};

TEST(Readings, MemorySummaryRows) {
    const Readings r = read_all(kSummary);
    ASSERT_EQ(r.summaries.size(), 1u);
    const auto& s = r.summaries[0];
    EXPECT_EQ(s.line, 2u);
    EXPECT_EQ(s.device, 0u);
    EXPECT_EQ(s.n_ooms, 1u);
    EXPECT_EQ(s.n_retries, 2u);
    EXPECT_EQ(s.allocated, 18 * GiB + GiB / 2);
    EXPECT_EQ(s.reserved, 21 * GiB + GiB / 2);
    EXPECT_EQ(s.non_releasable, 2 * GiB + 3 * GiB / 4);
}

TEST(Readings, LlamaCppBuffersPerDeviceAndListDevices) {
    const Readings r = read_all({
        "llm_load_tensors:        CPU buffer size =   531.52 MiB",
        "llm_load_tensors:      CUDA0 buffer size =  1594.93 MiB",
        "llama_kv_cache_init:      CUDA0 KV buffer size =    36.00 MiB",
        "llama_new_context_with_model:      CUDA0 compute buffer size =   504.25 MiB",
        "Available devices:",
        "  ROCm0: AMD Radeon(TM) Graphics (110511 MiB, 110357 MiB free)",
    });
    ASSERT_EQ(r.buffers.size(), 2u);
    EXPECT_EQ(r.buffers[0].device, "CPU");
    EXPECT_EQ(r.buffers[0].weights, 557339116u);  // 531.52 x 2^20, rounded
    EXPECT_EQ(r.buffers[1].device, "CUDA0");
    EXPECT_EQ(r.buffers[1].weights, 1672405320u);  // 1594.93 x 2^20
    EXPECT_EQ(r.buffers[1].kv, 36 * MiB);
    EXPECT_EQ(r.buffers[1].compute, 528744448u);  // 504.25 x 2^20
    ASSERT_EQ(r.gpus.size(), 1u);
    EXPECT_EQ(r.gpus[0].index, 0u);
    EXPECT_EQ(r.gpus[0].total, 110511 * MiB);
    EXPECT_EQ(r.gpus[0].used, (110511 - 110357) * MiB);
}

TEST(Readings, EachListKeepsItsFirstEntries) {
    std::vector<std::string> rows = {"pid, process_name, used_gpu_memory [MiB]"};
    for (int i = 0; i < 1000; ++i) rows.push_back(std::to_string(1000 + i) + ", p, 1 MiB");
    const Readings r = read_all(rows);
    EXPECT_EQ(r.processes.size(), Readings::kMaxEntries);
    EXPECT_EQ(r.processes.front().pid, 1000u);
}

// A summary's non-releasable memory (free pieces of segments that hold live
// tensors) covering the request makes it fragmentation, where the message
// alone (1 GiB asked, 512 MiB free, 768 MiB cached on a full 24 GiB card:
// the slack rule) says capacity.
TEST(Readings, SummaryPiecesCoveringTheRequestAreFragmentation) {
    const std::string message =
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a "
        "total capacity of 24.00 GiB of which 100.00 MiB is free. Including non-PyTorch memory, "
        "this process has 23.50 GiB memory in use. Of the allocated memory 22.00 GiB is allocated "
        "by PyTorch, and 768.00 MiB is reserved by PyTorch but unallocated.";
    const Report alone = diagnose(message);
    ASSERT_EQ(alone.findings.size(), 1u);
    EXPECT_EQ(alone.findings[0].oom_class, OomClass::ActivationsOrBatch);

    std::vector<std::string> lines = {message};
    lines.insert(lines.end(), kSummary.begin(), kSummary.end());
    const Report with = diagnose(joined(lines));
    ASSERT_EQ(with.findings.size(), 1u);
    const Finding& f = with.findings[0];
    EXPECT_EQ(f.oom_class, OomClass::Fragmentation) << f.cause;
    ASSERT_EQ(f.evidence.size(), 1u);
    EXPECT_NE(f.evidence[0].find("2.75 GiB of it non-releasable"), std::string::npos)
        << f.evidence[0];
    EXPECT_NE(f.evidence[0].find("for fragmentation"), std::string::npos);
    // The log holds the summary: the fixes do not ask for it again.
    for (const Fix& x : f.fixes) EXPECT_EQ(x.command.find("memory_summary"), std::string::npos);
}

// nvidia-smi beside a bare message gives the device's total, and says that
// no listed process holds what is in use.
TEST(Readings, NvidiaSmiGivesTheTotalAndTheUnlistedMemory) {
    std::vector<std::string> lines = {
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"};
    lines.insert(lines.end(), kSmi410Empty.begin(), kSmi410Empty.end());
    const Report r = diagnose(joined(lines));
    ASSERT_EQ(r.findings.size(), 1u);
    const Finding& f = r.findings[0];
    EXPECT_EQ(f.total_bytes, 16280 * MiB);
    ASSERT_EQ(f.evidence.size(), 1u);
    EXPECT_NE(f.evidence[0].find("12.50 GiB of 15.90 GiB in use on GPU 0"), std::string::npos)
        << f.evidence[0];
    EXPECT_NE(f.evidence[0].find("12.50 GiB is held by no process listed"), std::string::npos);
}

// With two GPUs the message's own device picks the reading; its processes
// are named, largest first.
TEST(Readings, NvidiaSmiNamesWhoHoldsTheFailingGpu) {
    std::vector<std::string> lines = {
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
        "capacity of 12.00 GiB of which 445.00 MiB is free. Including non-PyTorch memory, this "
        "process has 7.81 GiB memory in use."};
    lines.insert(lines.end(), kSmi535.begin(), kSmi535.end());
    const Report r = diagnose(joined(lines));
    ASSERT_EQ(r.findings.size(), 1u);
    const Finding& f = r.findings[0];
    ASSERT_EQ(f.evidence.size(), 1u);
    // 8000 MiB = 7.81 GiB, 3500 MiB = 3.42 GiB.
    EXPECT_NE(f.evidence[0].find("11.57 GiB of 12.00 GiB in use on GPU 0; held by python3 (pid "
                                 "1234) 7.81 GiB, /usr/bin/ollama serve (pid 2345) 3.42 GiB, "
                                 "/usr/lib/xorg/Xorg (pid 999) 300.00 MiB"),
              std::string::npos)
        << f.evidence[0];
    for (const Fix& x : f.fixes)
        EXPECT_EQ(x.command.find("--query-compute-apps"), std::string::npos);
}

// A table right after a memory summary is still read (the summary's block
// takes only its own rows), and a row claiming more used than total is not.
TEST(Readings, TablesAfterASummaryAndImpossibleRows) {
    std::vector<std::string> lines = kSummary;
    lines.insert(lines.end(), kSmi535.begin(), kSmi535.end());
    lines.push_back("index, memory.used [MiB], memory.total [MiB]");
    lines.push_back("3, 12000 MiB, 11000 MiB");
    const Readings r = read_all(lines);
    ASSERT_EQ(r.summaries.size(), 1u);
    EXPECT_EQ(r.gpus.size(), 2u);  // nvidia-smi's two; not the CSV's impossible one
    EXPECT_EQ(r.processes.size(), 3u);
}

// llama.cpp's buffers of a model loaded twice count the later load.
TEST(Readings, AReloadReplacesTheDevicesBuffers) {
    const Readings r = read_all({
        "llm_load_tensors:      CUDA0 buffer size =  1000.00 MiB",
        "llama_kv_cache_init:      CUDA0 KV buffer size =    36.00 MiB",
        "llm_load_tensors:      CUDA0 buffer size =  2000.00 MiB",
    });
    ASSERT_EQ(r.buffers.size(), 1u);
    EXPECT_EQ(r.buffers[0].weights, 2000 * MiB);
    EXPECT_EQ(r.buffers[0].kv, 0u);
}

// A message naming a GPU that no reading shows gets none of their numbers.
TEST(Readings, ReadingsOfAnotherGpuAreNotUsed) {
    std::vector<std::string> lines = {
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has"};
    lines.insert(lines.end(), kSmi410Empty.begin(), kSmi410Empty.end());
    const Report rep = diagnose(joined(lines));
    ASSERT_EQ(rep.findings.size(), 1u);
    EXPECT_TRUE(rep.findings[0].evidence.empty());
}

}  // namespace
}  // namespace headroom::doctor
