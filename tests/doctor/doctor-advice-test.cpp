// Classes and fixes that need more than a log line: a model's real sizes,
// --device-memory, the memory-fraction cap, and which findings a log reports.
#include <gtest/gtest.h>

#include <string>

#include "doctor/doctor.h"

namespace headroom::doctor {
namespace {

bool any_fix(const Finding& f, const std::string& text) {
    for (const auto& x : f.fixes)
        if (x.action.find(text) != std::string::npos || x.command.find(text) != std::string::npos ||
            x.effect.find(text) != std::string::npos)
            return true;
    return false;
}

// Qwen2.5-14B: 14.77e9 parameters in F16 (2 bytes each); K and V of 48 layers
// x 8 KV heads x 128 dims x 2 bytes = 196,608 bytes per token.
ModelFacts qwen_14b() {
    ModelFacts m;
    m.name = "Qwen2.5-14B";
    m.n_params = 14'770'000'000;
    m.weight_bytes = 29'540'000'000;
    m.kv_bytes_per_token = 48 * 8 * (128 + 128) * 2;
    m.weight_bytes_by_type = {{"F32", 1'000'000}, {"F16", 29'539'000'000}};
    // The planner's sizes in other types, as `doctor -m` fills them (here:
    // 14.77e9 parameters at llama.cpp's average bits per weight of each mix).
    m.weight_bytes_as = {{"q8_0", 15'693'125'000},
                         {"q6_k", 12'111'400'000},
                         {"q5_k_m", 10'505'162'500},
                         {"q4_k_m", 8'954'312'500},
                         {"q4_0", 8'307'500'000},
                         // Linear layers only (13.21e9 parameters) in 4.5 bits (NF4 with
                         // an f32 absmax per 64) or 8 bits; the untied embeddings and
                         // lm_head (2 x 152,064 x 5,120) stay 2 bytes: 7.43e9 + 3.11e9.
                         {"nf4", 10'546'000'000},
                         {"fp8", 16'324'000'000}};
    return m;
}

// The example of ../background/004: reserved below allocated, which PyTorch
// never prints. By hand: this process holds at least the 70.12 GiB
// allocated; others hold 80.00 - 6.72 - 70.12 = 3.16 GiB; the 2.00 GiB were
// among the 6.72 GiB free but not as one block.
TEST(DoctorNumbers, ReservedBelowAllocatedIsAContradictionAndTheRestDecides) {
    const Report r = diagnose(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
        "80.00 GiB total capacity; 70.12 GiB already allocated; 6.72 GiB free; 8.75 GiB reserved "
        "in total by PyTorch)\n");
    ASSERT_EQ(r.findings.size(), 1u);
    const Finding& f = r.findings[0];
    constexpr double GiB = 1024.0 * 1024 * 1024;
    ASSERT_EQ(f.contradictions.size(), 1u);
    EXPECT_NE(f.contradictions[0].find("8.75 GiB"), std::string::npos) << f.contradictions[0];
    EXPECT_EQ(*f.this_process_bytes, static_cast<uint64_t>(70.12 * GiB + 0.5));
    EXPECT_NEAR(static_cast<double>(*f.other_processes_bytes) / GiB, 3.16, 0.005);
    EXPECT_EQ(class_name(f.oom_class), "fragmentation") << f.cause;
    EXPECT_TRUE(any_fix(f, "expandable_segments")) << f.cause;
}

// Allocated beyond the device (Windows lends host memory as "shared GPU memory").
TEST(DoctorNumbers, AllocatedBeyondTheDeviceIsSaid) {
    const Report r = diagnose(
        "CUDA out of memory. Tried to allocate 252.00 MiB. GPU 0 has a total capacity of 6.00 GiB "
        "of which 0 bytes is free. Of the allocated memory 20.56 GiB is allocated by PyTorch, and "
        "25.86 MiB is reserved by PyTorch but unallocated.\n");
    ASSERT_EQ(r.findings.size(), 1u);
    ASSERT_EQ(r.findings[0].contradictions.size(), 1u);
    EXPECT_NE(r.findings[0].contradictions[0].find("20.56 GiB allocated on a 6.00 GiB device"),
              std::string::npos)
        << r.findings[0].contradictions[0];
}

// A consistent message has none.
TEST(DoctorNumbers, ConsistentNumbersHaveNoContradiction) {
    const Report r = diagnose(
        "CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB total capacity; 781.59 "
        "MiB already allocated; 3.03 GiB free; 1.24 GiB reserved in total by PyTorch)\n");
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_TRUE(r.findings[0].contradictions.empty());
}

// vLLM's profiling summary with a negative rest. By hand: the budget is
// 23.58 x 0.90 = 21.22 GiB; weights 19.80 + non-torch 0.20 + activations
// 1.74 = 21.74 GiB, 0.52 GiB more than the budget; the weights alone are
// below it, so the setting, not the model, is what leaves nothing.
TEST(DoctorNumbers, VllmProfileThatLeavesNothingForTheKvCache) {
    const Report r = diagnose(
        "INFO worker.py:241] the current vLLM instance can use total_gpu_memory (23.58GiB) x "
        "gpu_memory_utilization (0.90) = 21.22GiB\n"
        "INFO worker.py:241] model weights take 19.80GiB; non_torch_memory takes 0.20GiB; PyTorch "
        "activation peak memory takes 1.74GiB; the rest of the memory reserved for KV Cache is "
        "-0.52GiB.\n");
    ASSERT_EQ(r.findings.size(), 1u);
    const Finding& f = r.findings[0];
    constexpr double GiB = 1024.0 * 1024 * 1024;
    EXPECT_EQ(class_name(f.oom_class), "utilization_setting") << f.cause;
    EXPECT_EQ(phase_name(f.phase), "profiling");
    EXPECT_NEAR(static_cast<double>(*f.requested_bytes) / GiB, 21.74, 0.005);
    EXPECT_NEAR(static_cast<double>(*f.deficit_bytes) / GiB, 0.52, 0.005);
    EXPECT_TRUE(any_fix(f, "--gpu-memory-utilization 0.97")) << f.cause;
    // With weights past the budget no utilization below 1 helps: the model is too large.
    const Report big = diagnose(
        "INFO the current vLLM instance can use total_gpu_memory (23.58GiB) x "
        "gpu_memory_utilization (0.90) = 21.22GiB\n"
        "INFO model weights take 21.90GiB; non_torch_memory takes 0.20GiB; PyTorch activation "
        "peak memory takes 1.74GiB; the rest of the memory reserved for KV Cache is -2.62GiB.\n");
    ASSERT_EQ(big.findings.size(), 1u);
    EXPECT_EQ(class_name(big.findings[0].oom_class), "weights_too_large") << big.findings[0].cause;
}

size_t fix_index(const Finding& f, const std::string& text) {
    for (size_t i = 0; i < f.fixes.size(); ++i)
        if (f.fixes[i].command.find(text) != std::string::npos) return i;
    return f.fixes.size();
}

std::string torch21(const char* requested, const char* total, const char* free,
                    const char* allocated, const char* unallocated) {
    return std::string("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ") +
           requested + ". GPU 0 has a total capacity of " + total + " of which " + free +
           " is free. Of the allocated memory " + allocated + " is allocated by PyTorch, and " +
           unallocated + " is reserved by PyTorch but unallocated.\n";
}

// Fragmentation leads only when it is the cause.
TEST(DoctorNumbers, FragmentationOnlyWhenTheCacheCoversWhatFreeMemoryLacked) {
    // 1.08 GiB free + 1.83 GiB cached covers 1.96 GiB: the cache is what failed.
    Report r = diagnose(torch21("1.96 GiB", "79.15 GiB", "1.08 GiB", "75.80 GiB", "1.83 GiB"));
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(class_name(r.findings[0].oom_class), "fragmentation") << r.findings[0].cause;
    EXPECT_EQ(fix_index(r.findings[0], "expandable_segments"), 0u);
    // A full card whose 300 MiB of slack exceeds a 20 MiB request: capacity,
    // with the allocator setting as a later fix.
    r = diagnose(torch21("20.00 MiB", "23.65 GiB", "5.00 MiB", "23.20 GiB", "300.00 MiB"));
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(class_name(r.findings[0].oom_class), "activations_or_batch") << r.findings[0].cause;
    const size_t i = fix_index(r.findings[0], "expandable_segments");
    EXPECT_GT(i, 0u);
    EXPECT_LT(i, r.findings[0].fixes.size());
    // More than free plus cached on a mostly free card: one oversized tensor.
    r = diagnose(torch21("75.00 GiB", "79.15 GiB", "70.00 GiB", "8.00 GiB", "500.00 MiB"));
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(class_name(r.findings[0].oom_class), "activations_or_batch") << r.findings[0].cause;
}

TEST(DoctorAdvice, NamesTheQuantizationThatFits) {
    // llama.cpp loading the F16 weights (written for this test) on a GPU
    // whose size comes from --device-memory.
    const std::string log =
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 28172.00 MiB on device 0: "
        "cudaMalloc failed: out of memory\n"
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n";
    Options opt;
    opt.model = qwen_14b();
    opt.device_memory_bytes = 1175ull * (1ull << 30) / 100;  // 11.75 GiB
    const Report r = diagnose(log, opt);
    ASSERT_EQ(r.findings.size(), 1u);
    const Finding& f = r.findings[0];
    EXPECT_EQ(f.oom_class, OomClass::WeightsTooLarge) << f.cause;
    // 29.54e9 B = 27.51 GiB. Q8_0 (15.69e9 B), Q6_K (12.11e9) and Q5_K_M
    // (10.51e9) leave less than a quarter of 11.75 GiB; Q4_K_M: 14.77e9 x 4.85 / 8
    // = 8.954e9 B = 8.34 GiB.
    EXPECT_TRUE(any_fix(f,
                        "Qwen2.5-14B in F16 needs 27.51 GiB of weights; this GPU has 11.75 GiB: "
                        "use Q4_K_M, 8.34 GiB"))
        << f.fixes[0].effect;
    EXPECT_TRUE(any_fix(f, "llama-quantize model.gguf model-Q4_K_M.gguf Q4_K_M"));
}

TEST(DoctorAdvice, ModelFactsDecideWhatAPlainMessageLeavesOpen) {
    // The message as the background article quotes it, wrapped over three lines.
    const std::string log =
        "torch.cuda.OutOfMemoryError: CUDA out of memory.\n"
        "Tried to allocate 2.00 GiB.\n"
        "GPU 0 has a total capacity of 11.75 GiB of which 0.00 GiB is free.\n";
    Options opt;
    opt.model = qwen_14b();
    const Report r = diagnose(log, opt);
    ASSERT_EQ(r.findings.size(), 1u);
    const Finding& f = r.findings[0];
    EXPECT_EQ(f.oom_class, OomClass::WeightsTooLarge) << f.cause;
    // NF4 (10.546e9 B = 9.82 GiB) leaves less than a quarter of 11.75 GiB:
    // no bitsandbytes type fits with room for the KV cache.
    EXPECT_TRUE(any_fix(f, "even 4-bit NF4 (bitsandbytes) (9.82 GiB) leaves too little"))
        << f.fixes[0].effect;
    // Without the model the same message has no weights to blame.
    const Report plain = diagnose(log);
    ASSERT_EQ(plain.findings.size(), 1u);
    EXPECT_EQ(plain.findings[0].oom_class, OomClass::Unrecognised);
}

TEST(DoctorAdvice, TurnsTokenCountsIntoBytesWithTheModel) {
    const std::string log =
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
        "that can be stored in KV cache (7344). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine.";
    Options opt;
    opt.model = qwen_14b();
    const Report r = diagnose(log, opt);
    ASSERT_EQ(r.findings.size(), 1u);
    const Finding& f = r.findings[0];
    EXPECT_EQ(f.oom_class, OomClass::KvCacheTooLarge);
    EXPECT_EQ(f.requested_bytes, uint64_t{32768} * 196608);  // 6 GiB
    EXPECT_EQ(f.free_bytes, uint64_t{7344} * 196608);        // 1,443,889,152
    EXPECT_EQ(f.deficit_bytes, int64_t{32768 - 7344} * 196608);
    EXPECT_TRUE(any_fix(f, "--max-model-len 7344"));
    EXPECT_TRUE(any_fix(f, "(1.34 GiB)"));  // 1,443,889,152 / 2^30 = 1.345
    EXPECT_TRUE(any_fix(f, "--kv-cache-dtype fp8"));
}

TEST(DoctorAdvice, DeviceMemoryFillsTheTotalOnlyWhenTheLogLacksIt) {
    const std::string gpu =
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4480.00 MiB on device 3: "
        "cudaMalloc failed: out of memory\n"
        "llama_kv_cache_init: failed to allocate buffer for kv cache\n";
    Options opt;
    opt.device_memory_bytes = 24ull << 30;
    Report r = diagnose(gpu, opt);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].total_bytes, 24ull << 30);
    EXPECT_EQ(r.findings[0].oom_class, OomClass::KvCacheTooLarge);

    const std::string stated =
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a "
        "total capacity of 23.65 GiB of which 11.06 MiB is free.";
    r = diagnose(stated, opt);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].total_bytes,
              2365ull * (1ull << 30) / 100 + 1);  // 23.65 GiB = ...137.6, rounded up

    const std::string host =
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 100 bytes.";
    r = diagnose(host, opt);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_FALSE(r.findings[0].total_bytes.has_value());
}

TEST(DoctorAdvice, MemoryFractionCapIsAUtilizationSetting) {
    // PyTorch 2.2+'s wording with set_per_process_memory_fraction in effect,
    // written for this test: 2.63 GiB allowed of 8.00 GiB, 1.20 + 2.13 GiB needed.
    const std::string log =
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.13 GiB. GPU 0 has a total "
        "capacity of 8.00 GiB of which 6.10 GiB is free. Including non-PyTorch memory, this "
        "process has 1.20 GiB memory in use. 2.63 GiB allowed; Of the allocated memory 954.00 MiB "
        "is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.";
    const Report r = diagnose(log);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].oom_class, OomClass::UtilizationSetting) << r.findings[0].cause;
    EXPECT_TRUE(any_fix(r.findings[0], "set_per_process_memory_fraction(1.0)"));
}

TEST(DoctorAdvice, NotOomOnlyWhenThereIsNoOutOfMemoryError) {
    const std::string oom =
        "RuntimeError: CUDA out of memory. Tried to allocate 1024.00 MiB (GPU 0; 15.90 GiB total "
        "capacity; 14.25 GiB already allocated; 991.56 MiB free; 607.00 KiB cached)\n";
    const std::string fault =
        "RuntimeError: CUDA error: an illegal memory access was encountered\n";
    Report r = diagnose(fault + "noise\n" + oom);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].oom_class, OomClass::ActivationsOrBatch);
    r = diagnose(fault);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0].oom_class, OomClass::NotOom);
    EXPECT_TRUE(any_fix(r.findings[0], "CUDA_LAUNCH_BLOCKING=1"));
}

TEST(DoctorAdvice, TracebackFramesNameTheProfilingPhase) {
    // The frames are vLLM's (https://github.com/vllm-project/vllm/issues/7854);
    // the error line after them is written for this test.
    const std::string log =
        "[rank0]:   File \"/opt/conda/lib/python3.10/site-packages/vllm/worker/worker.py\", line "
        "179, in determine_num_available_blocks\n"
        "[rank0]:     self.model_runner.profile_run()\n"
        "[rank0]:   File \"/opt/conda/lib/python3.10/site-packages/vllm/worker/model_runner.py\", "
        "line 940, in profile_run\n"
        "[rank0]:     self.execute_model(model_input, kv_caches, intermediate_tensors)\n"
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n";
    const Report r = diagnose(log);
    ASSERT_EQ(r.findings.size(), 1u);
    const Finding& f = r.findings[0];
    EXPECT_EQ(f.framework, Framework::Vllm);
    EXPECT_EQ(f.phase, Phase::Profiling);
    EXPECT_EQ(f.oom_class, OomClass::ActivationsOrBatch);
    ASSERT_FALSE(f.fixes.empty());
    EXPECT_EQ(f.fixes[0].command, "--max-num-batched-tokens 2048");
}

TEST(DoctorAdvice, EveryClassLeadsWithItsOwnFix) {
    struct Case {
        const char* log;
        const char* first_command;
    };
    const Case cases[] = {
        // fragmentation -> allocator setting first
        {"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a "
         "total capacity of 23.65 GiB of which 1.66 GiB is free. Including non-PyTorch memory, "
         "this process has 20.81 GiB memory in use. Of the allocated memory 12.09 GiB is "
         "allocated by PyTorch, and 4.84 GiB is reserved by PyTorch but unallocated.",
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
        // other processes -> measure who holds the GPU first
        {"CUDA out of memory. Tried to allocate 1.69 GiB (GPU 0; 14.56 GiB total capacity; "
         "649.97 MiB already allocated; 1.31 GiB free; 1.01 GiB reserved in total by PyTorch)",
         "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"},
        // TGI prefill -> halve the prefill budget
        {"Not enough memory to handle 4096 prefill tokens. You need to decrease "
         "`--max-batch-prefill-tokens`",
         "--max-batch-prefill-tokens 2048"},
        // SGLang -> a bigger static fraction
        {"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
         "--mem-fraction-static 0.9"},
    };
    for (const auto& c : cases) {
        const Report r = diagnose(c.log);
        ASSERT_EQ(r.findings.size(), 1u) << c.log;
        ASSERT_FALSE(r.findings[0].fixes.empty());
        EXPECT_EQ(r.findings[0].fixes[0].command, c.first_command) << c.log;
    }
}

}  // namespace
}  // namespace headroom::doctor
