// The byte accounting against numbers derived by hand from published
// configs (cited), and the refusal message for a configuration that cannot fit.
#include "memory/terms.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"
#include "memory/deployment.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

HParams dense(uint32_t n_layer, uint32_t n_embd, uint32_t n_head, uint32_t n_head_kv, uint32_t n_ff,
              uint32_t n_vocab, uint32_t ctx) {
    HParams hp;
    hp.arch = "llama";
    hp.n_layer = n_layer;
    hp.n_embd = n_embd;
    hp.n_head = n_head;
    hp.n_head_kv = n_head_kv;
    hp.head_dim_k = hp.head_dim_v = n_embd / n_head;
    hp.n_ff = n_ff;
    hp.n_vocab = n_vocab;
    hp.n_ctx_train = ctx;
    hp.layer_is_swa.assign(n_layer, false);
    return hp;
}

uint64_t kv_per_token(const HParams& hp, KvDtype dtype = KvDtype::F16) {
    ModelDesc m;
    m.hp = hp;
    EngineConfig c;
    c.kv_dtype = dtype;
    BudgetSpec b;
    b.kv_cache_bytes = 1 << 20;
    return plan_memory(m, c, b).kv_bytes_per_token;
}

TEST(Terms, KvBytesPerTokenMatchesPublishedConfigs) {
    // Meta-Llama-3-8B config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads.
    // 2 (K,V) × 32 × 8 × 128 × 2 B = 131072 B = 128 KiB.
    EXPECT_EQ(kv_per_token(dense(32, 4096, 32, 8, 14336, 128256, 8192)), 128u * 1024);
    // Llama-2-7b (MHA): 2 × 32 × 32 × 128 × 2 = 524288 B (0.5 MiB, as the
    // background articles compute).
    EXPECT_EQ(kv_per_token(dense(32, 4096, 32, 32, 11008, 32000, 4096)), 524288u);
    // SmolLM2-135M: 30 layers, 9 heads of 64, 3 KV heads: 2 × 30 × 3 × 64 × 2 = 23040.
    const HParams smol = dense(30, 576, 9, 3, 1536, 49152, 8192);
    EXPECT_EQ(kv_per_token(smol), 23040u);
    // q8_0 stores 64 values as 2 blocks of 34 bytes: 2 × 30 × 3 × 68 = 12240.
    EXPECT_EQ(kv_per_token(smol, KvDtype::Q8_0), 12240u);
    EXPECT_EQ(kv_per_token(smol, KvDtype::F32), 46080u);
}

TEST(Terms, SlidingWindowLayersHoldOnlyTheWindow) {
    // Gemma 3 270M (GGUF metadata): 18 layers, 1 KV head of 256, window 512,
    // every 6th layer global: 3 global, 15 local.
    HParams hp = dense(18, 640, 4, 1, 2048, 262144, 32768);
    hp.head_dim_k = hp.head_dim_v = 256;
    hp.sliding_window = 512;
    for (uint32_t il = 0; il < 18; ++il) hp.layer_is_swa[il] = (il + 1) % 6 != 0;
    ModelDesc m;
    m.hp = hp;
    EngineConfig c;
    c.max_model_len = 32768;
    c.max_num_batched_tokens = 512;
    c.block_size = 16;
    BudgetSpec b;
    b.device_bytes = 64ull << 30;
    const MemoryPlan p = plan_memory(m, c, b);
    // Per token per layer: 2 × 1 × 256 × 2 B = 1024 B.
    EXPECT_EQ(p.kv_bytes_per_token, 18u * 1024);
    ASSERT_EQ(p.kv_groups.size(), 2u);
    EXPECT_EQ(p.kv_groups[0].bytes_per_token, 3u * 1024);
    EXPECT_EQ(p.kv_groups[1].bytes_per_token, 15u * 1024);
    // Global: 32768 / 16 = 2048 blocks. Local: ceil((512 - 1 + 512) / 16) + 1 = 65 blocks.
    EXPECT_EQ(p.kv_groups[0].max_blocks_per_seq, 2048u);
    EXPECT_EQ(p.kv_groups[1].max_blocks_per_seq, 65u);
    EXPECT_EQ(p.kv_bytes_per_seq, 2048u * 16 * 3 * 1024 + 65u * 16 * 15 * 1024);
}

TEST(Terms, LatentAttentionCachesTheLatentVector) {
    // DeepSeek-V3 config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64:
    // 61 × (512 + 64) × 2 B = 70272 B per token.
    HParams hp = dense(61, 7168, 128, 128, 18432, 129280, 163840);
    hp.kv_lora_rank = 512;
    hp.qk_rope_head_dim = 64;
    EXPECT_EQ(kv_per_token(hp), 61u * 576 * 2);
}

TEST(Terms, ActivationsDoNotGrowWithContext) {
    ModelDesc m;
    m.hp = dense(30, 576, 9, 3, 1536, 49152, 8192);
    BudgetSpec b;
    b.device_bytes = 64ull << 30;
    EngineConfig c;
    c.max_num_batched_tokens = 256;
    c.max_model_len = 1024;
    const uint64_t short_ctx = plan_memory(m, c, b).activations_bytes();
    c.max_model_len = 8192;
    EXPECT_EQ(plan_memory(m, c, b).activations_bytes(), short_ctx);
    // Logits: one row of 49152 f32 per sequence; x: 256 × 576 f32.
    const MemoryPlan p = plan_memory(m, c, b);
    EXPECT_EQ(p.activations.logits.size_bytes, 49152u * 4);
    EXPECT_EQ(p.activations.x.size_bytes, 256u * 576 * 4);
}

TEST(Terms, PoolIsWhatTheBudgetLeavesCappedByDemand) {
    ModelDesc m;
    m.hp = dense(30, 576, 9, 3, 1536, 49152, 8192);
    m.weight_bytes = 100 << 20;
    EngineConfig c;
    c.max_model_len = 8192;
    c.max_num_seqs = 2;
    BudgetSpec b;
    b.device_bytes = 64ull << 30;
    const MemoryPlan roomy = plan_memory(m, c, b);
    EXPECT_TRUE(roomy.fits);
    // Demand: 2 sequences × 512 blocks × 16 tokens × 23040 B.
    EXPECT_EQ(roomy.kv_cache_bytes, 2ull * 512 * 16 * 23040);
    EXPECT_EQ(roomy.max_num_seqs_at_max_model_len, 2u);
    b.device_bytes = 400ull << 20;
    b.mem_fraction = 1.0;
    const MemoryPlan tight = plan_memory(m, c, b);
    EXPECT_LE(tight.total_bytes(), tight.budget_bytes);
    EXPECT_LT(tight.kv_cache_bytes, roomy.kv_cache_bytes);
    EXPECT_EQ(tight.kv_cache_bytes % (16 * 23040), 0u);
}

TEST(Terms, RefusalNamesTheNumbersAndEachFix) {
    ModelDesc m;
    m.hp = dense(30, 576, 9, 3, 1536, 49152, 8192);
    m.weight_bytes = 100 << 20;
    EngineConfig c;
    c.max_model_len = 32768;
    BudgetSpec b;
    b.kv_cache_bytes = 256 << 20;  // 32768 tokens need 23040 × 32768 = 720 MiB
    const MemoryPlan p = plan_memory(m, c, b);
    EXPECT_FALSE(p.fits);
    EXPECT_THAT(p.refusal, HasSubstr("KV for 32768 tokens needs 720 MiB"));
    EXPECT_THAT(p.refusal, HasSubstr("the budget leaves 256 MiB"));
    // 256 MiB / 23040 B = 11650 tokens, rounded down to whole blocks of 16: 11648.
    EXPECT_THAT(p.refusal, HasSubstr("--max-model-len 11648"));
    // q8_0: 12240 × 32768 = 382.5 MiB.
    EXPECT_THAT(p.refusal, HasSubstr("--kv-dtype q8_0 (382 MiB)"));
}

// Llama 3 8B's KV is 2 x 32 layers x 8 heads x 128 x 2 B = 128 KiB a token.
// 1,024 sequences of 2^22 tokens need 2^10 x 2^22 x 2^17 = 2^49 B: planned.
// 2^32 - 1 of each would pass 2^64 B (the sequences' token lists alone wrap
// to 0), so that configuration is refused, naming its numbers.
TEST(Terms, ConfigurationsPastAnExbibyteAreRefusedNotWrapped) {
    ModelDesc m;
    m.hp = dense(32, 4096, 32, 8, 14336, 128256, 8192);
    m.weight_bytes = 16ull << 30;
    m.source = "llama-3-8b";
    EngineConfig c;
    c.max_model_len = 1u << 22;
    c.max_num_seqs = 1024;
    BudgetSpec b;
    b.device_bytes = 64ull << 30;
    const MemoryPlan p = plan_memory(m, c, b);
    EXPECT_FALSE(p.fits);
    EXPECT_EQ(p.kv_bytes_per_seq, uint64_t{1} << 39);
    c.max_model_len = c.max_num_seqs = 4294967295u;
    EXPECT_THAT([&] { plan_memory(m, c, b); },
                ::testing::ThrowsMessage<Error>(HasSubstr(
                    "llama-3-8b at --max-num-seqs 4294967295, --max-model-len 4294967295, "
                    "--max-num-batched-tokens 4294967295 and --threads 1 would need "
                    "more than 1 EiB")));
}

TEST(Terms, BudgetWithoutRoomForWeightsSaysSo) {
    ModelDesc m;
    m.hp = dense(30, 576, 9, 3, 1536, 49152, 8192);
    m.weight_bytes = 2ull << 30;
    BudgetSpec b;
    b.device_bytes = 1ull << 30;
    const MemoryPlan p = plan_memory(m, EngineConfig{}, b);
    EXPECT_FALSE(p.fits);
    EXPECT_THAT(p.refusal, HasSubstr("weights (2.00 GiB)"));
    EXPECT_THAT(p.refusal, HasSubstr("nothing is left for the KV cache"));
}

// A model split between the CPU and a GPU, its parts' bytes by hand: 4
// layers of 1 MiB on the host (1 MiB + 4 KiB as the GPU holds them), an
// embedding of 8 MiB (the CPU's), an output matrix of 8 MiB and its norm of
// 4 KiB (the GPU's).
ModelDesc split_model() {
    ModelDesc m;
    m.hp = dense(4, 576, 9, 3, 1536, 49152, 8192);
    m.layer_parts.assign(4, {1 << 20, (1 << 20) + 4096});
    m.layer_weight_bytes.assign(4, 1 << 20);
    m.embedding = {8 << 20, 8 << 20};
    m.output = {8 << 20, 8 << 20};
    m.output_norm = {2304, 4096};
    m.weight_bytes = 4 * (1 << 20) + (16 << 20) + 2304;
    m.device_weight_bytes = 4 * ((1 << 20) + 4096) + (16 << 20) + 4096;
    return m;
}

EngineConfig split_config(uint32_t n_cpu_layers) {
    EngineConfig c;
    c.device = "gpu0";
    c.max_model_len = 1024;
    c.max_num_seqs = 1;
    c.n_threads = 2;
    c.n_cpu_layers = n_cpu_layers;
    return c;
}

TEST(Terms, ASplitPlacesEachPartOnItsDeviceAndGivesTheHostLayersTheirOwnPool) {
    const ModelDesc m = split_model();
    BudgetSpec b;
    b.device_bytes = 64ull << 20;
    b.mem_fraction = 1.0;
    const MemoryPlan p = plan_memory(m, split_config(3), b);
    ASSERT_TRUE(p.fits) << p.refusal;
    // The GPU: one layer, the output matrix and its norm; the host: three
    // layers and the embedding.
    EXPECT_EQ(p.weights_bytes, (1u << 20) + 4096 + (8u << 20) + 4096);
    EXPECT_EQ(p.host_weights_bytes, 3u * (1 << 20) + (8u << 20));
    // KV per layer and token: 2 × 3 heads × 64 × 2 B = 768 B; a block of 16
    // tokens is 12 KiB a layer. Device group: 1 layer; host group: 3.
    ASSERT_EQ(p.kv_groups.size(), 2u);
    const KvGroupPlan& gpu = p.kv_groups[0];
    const KvGroupPlan& host = p.kv_groups[1];
    EXPECT_FALSE(gpu.on_host);
    EXPECT_TRUE(host.on_host);
    EXPECT_EQ(gpu.block_bytes, 16u * 768);
    EXPECT_EQ(host.block_bytes, 3u * 16 * 768);
    // The host's pool has as many blocks as the device's: one number of
    // free blocks per sequence.
    EXPECT_EQ(host.n_blocks, gpu.n_blocks);
    EXPECT_EQ(p.kv_cache_bytes, gpu.n_blocks * gpu.block_bytes);
    EXPECT_EQ(p.host_kv_cache_bytes, host.n_blocks * host.block_bytes);
    // Only the device's terms count against its budget.
    const std::vector<DeviceTerms> d = p.device_terms();
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(d[0].device, "gpu0");
    EXPECT_EQ(d[0].weights_bytes, p.weights_bytes);
    EXPECT_EQ(d[1].weights_bytes, p.host_weights_bytes);
    EXPECT_EQ(d[1].kv_cache_bytes, p.host_kv_cache_bytes);
    EXPECT_LE(p.budgeted_bytes(), p.budget_bytes);
    EXPECT_EQ(p.total_bytes(), d[0].total_bytes() + d[1].total_bytes());
}

// What k layers on the GPU need of it: the device's terms with a pool of
// exactly one sequence of max_model_len.
uint64_t device_need(const ModelDesc& m, uint32_t n_gpu) {
    EngineConfig c = split_config(m.hp.n_layer - n_gpu);
    if (n_gpu == m.hp.n_layer) c.n_threads = 1;
    BudgetSpec probe;
    probe.kv_cache_bytes = 1;
    probe.kv_cache_bytes = plan_memory(m, c, probe).kv_bytes_per_seq;
    return plan_memory(m, c, probe).budgeted_bytes();
}

TEST(Terms, AutoPlacesTheMostLayersWhoseTermsFitTheDevice) {
    const ModelDesc m = split_model();
    for (uint32_t k = 1; k <= 4; ++k) {
        BudgetSpec b;
        b.mem_fraction = 1.0;
        b.device_bytes = device_need(m, k);
        const LayerPlacement at = place_layers(m, split_config(0), b, {});
        ASSERT_TRUE(at.on_gpu) << k;
        EXPECT_EQ(at.n_cpu_layers, 4 - k) << "budget " << b.device_bytes;
        EXPECT_TRUE(at.plan.fits);
        EXPECT_EQ(at.plan.max_num_seqs_at_max_model_len, 1u);
        // A byte less: one layer fewer (or none, below).
        b.device_bytes -= 1;
        const LayerPlacement less = place_layers(m, split_config(0), b, {});
        if (k > 1) {
            ASSERT_TRUE(less.on_gpu);
            EXPECT_EQ(less.n_cpu_layers, 5 - k);
            EXPECT_THAT(less.note,
                        HasSubstr(fmt::format("{} of the model's 4 layers on gpu0", k - 1)));
        } else {
            EXPECT_FALSE(less.on_gpu);
            EXPECT_THAT(less.note, HasSubstr("not even one of the model's 4 layers fits gpu0"));
            EXPECT_THAT(less.note, HasSubstr("running every layer on the CPU"));
        }
    }
}

TEST(Terms, ALayerMoreOnTheGpuTakesItsWeightsAndItsKvThere) {
    const ModelDesc m = split_model();
    // By hand: a layer is 1 MiB + 4 KiB on the GPU, and its KV for one
    // sequence of 1024 tokens is 64 blocks × 16 tokens × 768 B.
    const uint64_t layer = (1u << 20) + 4096 + 64u * 16 * 768;
    EXPECT_EQ(device_need(m, 2) - device_need(m, 1), layer);
    EXPECT_EQ(device_need(m, 3) - device_need(m, 2), layer);
}

TEST(Terms, AHostTooSmallForTheCpuLayersIsRefusedNotMovedToTheCpu) {
    const ModelDesc m = split_model();
    BudgetSpec b;
    b.mem_fraction = 1.0;
    b.device_bytes = device_need(m, 2);
    b.host_bytes = 4u << 20;  // less than the embedding alone
    const LayerPlacement at = place_layers(m, split_config(0), b, {});
    ASSERT_TRUE(at.on_gpu);
    EXPECT_EQ(at.n_cpu_layers, 2u);
    EXPECT_FALSE(at.plan.fits);
    EXPECT_TRUE(at.plan.host_short);
    EXPECT_THAT(at.plan.refusal, HasSubstr("the 2 layers on the CPU need"));
    EXPECT_THAT(at.plan.refusal, HasSubstr("of host memory"));
}

TEST(Terms, AnExplicitLayerCountIsPlannedAsAskedOrRefusedWithTheNumbers) {
    const ModelDesc m = split_model();
    BudgetSpec b;
    b.mem_fraction = 1.0;
    b.device_bytes = device_need(m, 2);
    GpuLayers two{GpuLayers::Kind::Count, 2};
    const LayerPlacement ok = place_layers(m, split_config(0), b, two);
    EXPECT_TRUE(ok.plan.fits);
    EXPECT_EQ(ok.n_cpu_layers, 2u);
    const LayerPlacement refused = place_layers(m, split_config(0), b, {GpuLayers::Kind::Count, 3});
    EXPECT_FALSE(refused.plan.fits);
    EXPECT_THAT(refused.plan.refusal, HasSubstr("3 of the 4 layers on gpu0"));
    EXPECT_THAT(refused.plan.refusal, HasSubstr("--n-gpu-layers auto"));
    EXPECT_FALSE(place_layers(m, split_config(0), b, {GpuLayers::Kind::All, 0}).plan.fits);
    const LayerPlacement none = place_layers(m, split_config(0), b, {GpuLayers::Kind::Count, 0});
    EXPECT_FALSE(none.on_gpu);
    EXPECT_THAT(
        [&] {
            place_layers(m, split_config(0), b, {GpuLayers::Kind::Count, 5});
        },
        ::testing::ThrowsMessage<Error>(HasSubstr("the model has 4 layers")));
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

// A device that allocates at most 8 MiB at once cannot hold the 8 MiB + 256 B
// slot of the split model's embedding (8 MiB of data + 16, rounded up to
// 256): refused, naming the tensor's size and the limit. At 9 MiB it fits.
TEST(Terms, ATensorLargerThanOneAllocationIsRefused) {
    ModelDesc m = split_model();
    m.largest_device_tensor_bytes = (8u << 20) + 256;
    m.largest_dense_device_tensor_bytes = (8u << 20) + 256;
    BudgetSpec b;
    b.device_bytes = 64ull << 20;
    b.mem_fraction = 1.0;
    b.max_allocation_bytes = 8u << 20;
    const MemoryPlan small = plan_memory(m, split_config(0), b);
    EXPECT_FALSE(small.fits);
    EXPECT_TRUE(small.allocation_short);
    EXPECT_THAT(small.refusal, HasSubstr("largest weight tensor takes 8.00 MiB"));
    EXPECT_THAT(small.refusal, HasSubstr("at most 8.00 MiB at once"));
    b.max_allocation_bytes = 9u << 20;
    EXPECT_TRUE(plan_memory(m, split_config(0), b).fits);
    // Tensors within the limit, a step's widest activation buffer past it:
    // 512 tokens × the FFN's 1536 × 4 B = 3 MiB.
    m.largest_device_tensor_bytes = m.largest_dense_device_tensor_bytes = 1u << 20;
    b.max_allocation_bytes = 2u << 20;
    EngineConfig step = split_config(0);
    step.max_num_batched_tokens = 512;
    const MemoryPlan buffer = plan_memory(m, step, b);
    EXPECT_TRUE(buffer.allocation_short);
    EXPECT_THAT(buffer.refusal, HasSubstr("largest activation buffer takes 3.00 MiB"));
    // On the host there is no such limit.
    EngineConfig host = split_config(0);
    host.device = "host";
    b.max_allocation_bytes = 1u << 20;
    EXPECT_FALSE(plan_memory(m, host, b).allocation_short);
}

}  // namespace
}  // namespace headroom
