// The byte accounting against numbers derived by hand from published
// configs (cited), and the refusal message for a configuration that cannot fit.
#include "memory/terms.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/units.h"

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

}  // namespace
}  // namespace headroom
