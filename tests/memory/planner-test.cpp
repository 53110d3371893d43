// The planner against numbers derived by hand from published configs
// (tests/data/hf/README.md and model-table.cpp cite each one) and from
// llama.cpp's quantization rules (src/llama-quant.cpp): KV bytes per token,
// weight bytes per type, parameter counts, refusals, budgets, fit search.
#include "memory/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "shape/model-shape.h"
#include "shape/model-table.h"
#include "shape/quant-mix.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

std::string data(const char* name) {
    return std::string(HEADROOM_TEST_DATA_DIR) + "/hf/" + name;
}

PlanModel from_config(const char* file, WeightType type = WeightType::BF16) {
    return plan_model_from_shape(read_hf_config(data(file)), data(file), "hf-config", type);
}

PlanModel builtin(const char* name, WeightType type = WeightType::BF16) {
    const BuiltinModel* b = find_builtin_model(name);
    EXPECT_NE(b, nullptr) << name;
    return plan_model_from_shape(builtin_shape(*b), name, "builtin", type);
}

Device gpu(uint64_t bytes) {
    Device d;
    d.name = "test GPU";
    d.total_bytes = bytes;
    d.gpu = true;
    return d;
}

Device cpu(uint64_t bytes) {
    Device d = gpu(bytes);
    d.gpu = false;
    return d;
}

Plan plan_at(const PlanModel& m, uint32_t len, uint32_t seqs, KvDtype kv = KvDtype::F16,
             const Device& d = gpu(1024 * GiB)) {
    PlanSettings s;
    s.config.max_model_len = len;
    s.config.max_num_seqs = seqs;
    s.config.kv_dtype = kv;
    return evaluate(m, d, s);
}

TEST(PlannerKv, DenseAndGqaBytesPerToken) {
    // Meta-Llama-3-8B: 2 (K,V) × 32 layers × 8 KV heads × 128 × 2 B = 131072 B = 128 KiB.
    EXPECT_EQ(plan_at(from_config("meta-llama-3-8b.json"), 8192, 1).mem.kv_bytes_per_token,
              128u * 1024);
    EXPECT_EQ(plan_at(builtin("llama-3-8b"), 8192, 1).mem.kv_bytes_per_token, 131072u);
    // Llama-2-7b has one KV head per query head: 2 × 32 × 32 × 128 × 2 = 524288 B.
    EXPECT_EQ(plan_at(builtin("llama-2-7b"), 4096, 1).mem.kv_bytes_per_token, 524288u);
    // Qwen2.5-7B-Instruct: 28 layers, 4 KV heads of 128 (3584 / 28):
    // 2 × 28 × 4 × 128 × 2 = 57344 B. Its sliding_window is off (use_sliding_window false).
    const Plan q = plan_at(builtin("qwen2.5-7b"), 32768, 1);
    EXPECT_EQ(q.mem.kv_bytes_per_token, 57344u);
    ASSERT_EQ(q.mem.kv_groups.size(), 1u);
    EXPECT_EQ(q.mem.kv_groups[0].kind, AttentionKind::Full);
    // q8_0 stores 128 values in 4 blocks of 34 B: 2 × 32 × 8 × 136 = 69632 B.
    EXPECT_EQ(plan_at(builtin("llama-3-8b"), 8192, 1, KvDtype::Q8_0).mem.kv_bytes_per_token,
              69632u);
}

TEST(PlannerKv, SlidingWindowLayersHoldOnlyTheWindow) {
    // Gemma 3 27B: 62 layers, 16 KV heads of 128: 2 × 16 × 128 × 2 = 8192 B per layer.
    // Every sixth layer is global (5, 11, ..., 59): 10 global, 52 local with window 1024.
    const Plan g = plan_at(builtin("gemma-3-27b"), 32768, 1);
    ASSERT_EQ(g.mem.kv_groups.size(), 2u);
    EXPECT_EQ(g.mem.kv_groups[0].kind, AttentionKind::Full);
    EXPECT_EQ(g.mem.kv_groups[0].bytes_per_token, 10u * 8192);
    EXPECT_EQ(g.mem.kv_groups[1].kind, AttentionKind::SlidingWindow);
    EXPECT_EQ(g.mem.kv_groups[1].window, 1024u);
    EXPECT_EQ(g.mem.kv_groups[1].bytes_per_token, 52u * 8192);
    // A local layer holds the window plus one step of 512, in blocks of 16,
    // one more for the unaligned start: ceil((1023 + 512) / 16) + 1 = 97 blocks.
    EXPECT_EQ(g.mem.kv_groups[1].max_blocks_per_seq, 97u);
    EXPECT_EQ(g.mem.kv_bytes_per_seq, 2048ull * 16 * 10 * 8192 + 97ull * 16 * 52 * 8192);

    // Gemma 3 270M from its config.json's layer_types: full at 5, 11, 17;
    // 1 KV head of 256: 2 × 1 × 256 × 2 = 1024 B per layer, window 512.
    const Plan s = plan_at(from_config("gemma-3-270m-it.json"), 32768, 1);
    ASSERT_EQ(s.mem.kv_groups.size(), 2u);
    EXPECT_EQ(s.mem.kv_groups[0].bytes_per_token, 3u * 1024);
    EXPECT_EQ(s.mem.kv_groups[1].bytes_per_token, 15u * 1024);
    EXPECT_EQ(s.mem.kv_groups[1].window, 512u);

    // Mistral 7B v0.1: every layer slides over 4096 tokens: 2 × 32 × 8 × 128 × 2
    // = 128 KiB per token, and at 32768 tokens a sequence holds
    // ceil((4095 + 512) / 16) + 1 = 289 blocks, not 2048.
    const Plan m = plan_at(builtin("mistral-7b"), 32768, 1);
    ASSERT_EQ(m.mem.kv_groups.size(), 1u);
    EXPECT_EQ(m.mem.kv_groups[0].kind, AttentionKind::SlidingWindow);
    EXPECT_EQ(m.mem.kv_bytes_per_token, 131072u);
    EXPECT_EQ(m.mem.kv_bytes_per_seq, 289ull * 16 * 131072);

    // gpt-oss-20b: layer_types alternate sliding (window 128) and full over
    // 24 layers; 8 KV heads of 64: 2 × 8 × 64 × 2 = 2048 B per layer.
    const Plan o = plan_at(from_config("gpt-oss-20b.json"), 8192, 1);
    ASSERT_EQ(o.mem.kv_groups.size(), 2u);
    EXPECT_EQ(o.mem.kv_groups[0].bytes_per_token, 12u * 2048);
    EXPECT_EQ(o.mem.kv_groups[1].bytes_per_token, 12u * 2048);
    EXPECT_EQ(o.mem.kv_groups[1].window, 128u);
}

TEST(PlannerKv, LatentAttentionCachesLatentAndRopeDims) {
    // DeepSeek-V3: kv_lora_rank 512 + qk_rope_head_dim 64 per token per layer,
    // 61 layers, 2 B: 61 × 576 × 2 = 70272 B (not 2 × 61 × 128 heads × 192 × 2).
    const Plan d = plan_at(from_config("deepseek-v3.json"), 32768, 1);
    EXPECT_EQ(d.mem.kv_bytes_per_token, 61u * 576 * 2);
    ASSERT_EQ(d.mem.kv_groups.size(), 1u);
    EXPECT_EQ(d.mem.kv_groups[0].kind, AttentionKind::Latent);
    EXPECT_EQ(plan_at(builtin("deepseek-v3"), 32768, 1).mem.kv_bytes_per_token, 70272u);
}

TEST(PlannerWeights, ParameterCountsMatchModelCards) {
    auto near = [](uint64_t n, double published) {
        EXPECT_NEAR(static_cast<double>(n) / published, 1.0, 0.005) << n;
    };
    // Model cards: Qwen2.5-7B-Instruct "Number of Parameters: 7.61B", Qwen2.5-72B-Instruct
    // "72.7B", Meta-Llama-3-8B "8.03B params" (Hub), Llama-2-7b "6.74B params" (Hub),
    // DeepSeek-V3 "671B total parameters" (without the 14B MTP module), gpt-oss-20b "21B".
    near(builtin("qwen2.5-7b").desc.n_params, 7.61e9);
    near(builtin("qwen2.5-72b").desc.n_params, 72.7e9);
    near(builtin("llama-3-8b").desc.n_params, 8.03e9);
    near(builtin("llama-2-7b").desc.n_params, 6.74e9);
    near(builtin("deepseek-v3").desc.n_params, 671e9);
    near(from_config("gpt-oss-20b.json").desc.n_params, 21e9);
}

TEST(PlannerWeights, Q4_1MixOfSmolLm2ByHand) {
    // llama.cpp Q4_1: every matrix Q4_1 (20 B per 32) except the tied token
    // embeddings, which take the output's type: Q6_K, and since 576 is not a
    // multiple of 256, Q8_0 (34 B per 32). Norms stay f32.
    //   token_embd 49152 rows × 18 blocks × 34 B          = 30,081,024
    //   per layer: q, o 576×576 → 207,360 each; k, v 576×192 → 69,120 each;
    //              gate, up, down 576×1536 → 552,960 each; 2 norms 4,608
    //              = 2,216,448; × 30 layers                = 66,493,440
    //   output_norm 576 × 4                                 = 2,304
    // total 96,576,768 B: the SmolLM2-135M-Instruct Q4_1 GGUF's tensor bytes.
    const PlanModel m = from_config("smollm2-135m-instruct.json", WeightType::Q4_1);
    EXPECT_EQ(m.desc.weight_bytes, 96576768u);
    EXPECT_EQ(m.desc.n_params, 134515008u);
}

TEST(PlannerWeights, Q4_K_MMixOfGemma3ByHand) {
    // llama.cpp Q4_K_M on Gemma 3 270M (n_embd 640 is not a multiple of 256,
    // so Q4_K falls back to Q5_0 and Q6_K to Q8_0 for rows of 640):
    //   token_embd (tied: output's Q6_K → Q8_0) 262144 × 20 × 34  = 178,257,920
    //   per layer: q 640×1024 Q5_0 450,560; k 640×256 Q5_0 112,640;
    //     o 1024×640 Q4_K 368,640; gate, up 640×2048 Q5_0 901,120 each;
    //     4 norms of 640 and 2 of 256, f32: 12,288        → 2,746,368 × 18
    //   attn_v and ffn_down of the use_more_bits layers (0, 1, 4, 7, 10, 13,
    //     15, 16, 17): v Q6_K → Q8_0 174,080, down Q6_K 1,075,200 → 1,249,280 × 9
    //   the other 9: v Q5_0 112,640, down Q4_K 737,280      →   849,920 × 9
    //   output_norm 2,560
    // total 246,587,904 B: the gemma-3-270m Q4_K_M GGUF's tensor bytes.
    const PlanModel m = from_config("gemma-3-270m-it.json", WeightType::Q4_K_M);
    EXPECT_EQ(m.desc.weight_bytes,
              18ull * 2746368 + 9ull * 1249280 + 9ull * 849920 + 178257920 + 2560);
    EXPECT_EQ(m.desc.weight_bytes, 246587904u);
}

// The 3-bit, 2-bit and IQ4 mixes on Meta-Llama-3-8B (32 layers, 32 query
// heads on 8 KV heads: grouped 4 to 1; every row a multiple of 256), each
// tensor's type by hand from llama.cpp's llama_tensor_get_type.
TEST(PlannerWeights, LowBitMixesOfLlama3ByHand) {
    const ModelShape shape = read_hf_config(data("meta-llama-3-8b.json"));
    const std::vector<WeightTensor> tensors = tensor_inventory(shape);
    using T = TensorType;
    struct Want {
        T other, output, attn_v_first, attn_v, attn_output, ffn_down_first, ffn_down;
        int32_t n_first_v, n_first_down;  // layers below these take the _first types
    };
    const std::pair<WeightType, Want> cases[] = {
        // Q2_K: attn_v Q4_K (grouped 4 or more), ffn_down and attn_output Q3_K.
        {WeightType::Q2_K, {T::Q2_K, T::Q6_K, T::Q4_K, T::Q4_K, T::Q3_K, T::Q3_K, T::Q3_K, 0, 0}},
        {WeightType::Q3_K_S, {T::Q3_K, T::Q6_K, T::Q3_K, T::Q3_K, T::Q3_K, T::Q3_K, T::Q3_K, 0, 0}},
        // Q3_K_M: attn_v of layers 0-1 Q5_K, the rest Q4_K; ffn_down of the
        // first 32/16 layers Q5_K, the rest Q4_K; attn_output Q4_K.
        {WeightType::Q3_K_M, {T::Q3_K, T::Q6_K, T::Q5_K, T::Q4_K, T::Q4_K, T::Q5_K, T::Q4_K, 2, 2}},
        {WeightType::Q3_K_L, {T::Q3_K, T::Q6_K, T::Q5_K, T::Q5_K, T::Q5_K, T::Q5_K, T::Q5_K, 0, 0}},
        // IQ4_XS / IQ4_NL: attn_v Q5_K (grouped 4 or more), ffn_down of the
        // first 32/8 layers Q5_K.
        {WeightType::IQ4_XS,
         {T::IQ4_XS, T::Q6_K, T::Q5_K, T::Q5_K, T::IQ4_XS, T::Q5_K, T::IQ4_XS, 0, 4}},
        {WeightType::IQ4_NL,
         {T::IQ4_NL, T::Q6_K, T::Q5_K, T::Q5_K, T::IQ4_NL, T::Q5_K, T::IQ4_NL, 0, 4}},
    };
    for (const auto& [type, want] : cases) {
        const std::vector<T> got = choose_tensor_types(tensors, shape.hp, gguf_recipe(type));
        ASSERT_EQ(got.size(), tensors.size());
        for (size_t i = 0; i < tensors.size(); ++i) {
            const WeightTensor& t = tensors[i];
            SCOPED_TRACE(t.name + " as " + std::string(name(type)));
            if (!t.is_matrix()) {
                EXPECT_EQ(got[i], T::F32);
            } else if (t.name == "output.weight") {
                EXPECT_EQ(got[i], want.output);
            } else if (t.name.ends_with("attn_v.weight")) {
                EXPECT_EQ(got[i], t.layer < want.n_first_v ? want.attn_v_first : want.attn_v);
            } else if (t.name.ends_with("attn_output.weight")) {
                EXPECT_EQ(got[i], want.attn_output);
            } else if (t.name.ends_with("ffn_down.weight")) {
                EXPECT_EQ(got[i],
                          t.layer < want.n_first_down ? want.ffn_down_first : want.ffn_down);
            } else {
                EXPECT_EQ(got[i], want.other);
            }
        }
    }
    // Rows that 256 does not divide: llama.cpp's tensor_type_fallback.
    EXPECT_EQ(fit_type_to_row(T::Q2_K, 576), T::Q4_0);
    EXPECT_EQ(fit_type_to_row(T::Q3_K, 576), T::Q4_0);
    EXPECT_EQ(fit_type_to_row(T::IQ4_XS, 576), T::IQ4_NL);
    EXPECT_EQ(fit_type_to_row(T::Q3_K, 40), T::F16);
}

TEST(PlannerWeights, SixteenBitAndHfFormats) {
    const PlanModel bf16 = builtin("llama-3-8b", WeightType::BF16);
    // GGUF bf16: 2 B per weight, the 65 norms of 4096 in f32 (2 B more each).
    EXPECT_EQ(bf16.desc.weight_bytes, 2 * bf16.desc.n_params + 65ull * 4096 * 2);
    // FP8 checkpoints: linear layers 1 B + an f32 scale per output row;
    // embeddings, lm_head and norms 2 B. Linear weights: 8,030,261,248 -
    // 2 × 128256 × 4096 - 65 × 4096 = 6,979,588,096 over 32 layers of
    // 4096+1024+1024+4096 + 3 × 14336... rows.
    const PlanModel fp8 = builtin("llama-3-8b", WeightType::FP8);
    const uint64_t linear = 8030261248ull - 2ull * 128256 * 4096 - 65ull * 4096;
    const uint64_t rows = 32ull * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096);
    EXPECT_EQ(fp8.desc.weight_bytes,
              linear + rows * 4 + 2ull * (2ull * 128256 * 4096 + 65ull * 4096));
    // AWQ cannot group SmolLM2's rows of 576 inputs by 128: refused by name.
    EXPECT_THAT([] { from_config("smollm2-135m-instruct.json", WeightType::AWQ); },
                ::testing::ThrowsMessage<Error>(HasSubstr("not a multiple of the group size 128")));
}

TEST(PlannerRefusals, UnknownModelsAndSettingsAreNamed) {
    EXPECT_THAT([] { read_hf_config(data("unknown-arch.json")); },
                ::testing::ThrowsMessage<Error>(HasSubstr("model_type 'rwkv7' is not one")));
    EXPECT_THAT([] { read_hf_config(data("linear-attention.json")); },
                ::testing::ThrowsMessage<Error>(HasSubstr("layer 0 is 'linear_attention'")));
    // A head size q8_0's 32-element blocks do not divide.
    const nlohmann::json odd = {{"model_type", "llama"},         {"hidden_size", 2560},
                                {"num_hidden_layers", 2},        {"num_attention_heads", 32},
                                {"intermediate_size", 6912},     {"vocab_size", 1000},
                                {"max_position_embeddings", 512}};
    const PlanModel m = plan_model_from_shape(shape_from_hf_config(odd, "odd"), "odd", "hf-config",
                                              WeightType::F16);
    EXPECT_THAT([&] { plan_at(m, 512, 1, KvDtype::Q8_0); },
                ::testing::ThrowsMessage<Error>(HasSubstr("key size 80 is not a multiple")));
}

// Widths whose products pass 64 bits: refused by their parameter count (hand
// counted here) instead of planned with wrapped byte counts.
TEST(PlannerRefusals, ConfigsPastTwoToTheFiftyParametersAreRefused) {
    nlohmann::json config = {{"model_type", "llama"},    {"hidden_size", 2048},
                             {"num_hidden_layers", 22},  {"num_attention_heads", 32},
                             {"num_key_value_heads", 4}, {"intermediate_size", 5632},
                             {"vocab_size", 32000},      {"max_position_embeddings", 2048}};
    // TinyLlama 1.1B's shape plans.
    EXPECT_NO_THROW(shape_from_hf_config(config, "tinyllama"));
    // 2^32 - 1 wide: the embedding alone has (2^32 - 1) * 32000 = 1.37e14
    // parameters, and each layer's q, k, v, o and FFN matrices multiply it
    // again by the head sizes (2^27 - 1 for q): far past 2^50.
    config["hidden_size"] = 4294967295u;
    EXPECT_THAT([&] { shape_from_hf_config(config, "wide"); },
                ::testing::ThrowsMessage<Error>(HasSubstr("more than 2^50")));
    config["hidden_size"] = 2048;
    config["num_hidden_layers"] = 4097;
    EXPECT_THAT([&] { shape_from_hf_config(config, "deep"); },
                ::testing::ThrowsMessage<Error>(HasSubstr("'num_hidden_layers' is 4097")));
}

TEST(PlannerBudget, ReserveComesOffBeforeTheFractionAndGpusPayAContext) {
    const PlanModel m = builtin("llama-3-8b", WeightType::Q4_K_M);
    PlanSettings s;
    s.config.max_model_len = 4096;
    s.mem_fraction = 0.9;
    s.reserve_bytes = 4 * GiB;
    const Plan g = evaluate(m, gpu(24 * GiB), s);
    EXPECT_EQ(g.mem.budget_bytes, static_cast<uint64_t>(20.0 * GiB * 0.9));
    EXPECT_EQ(g.mem.runtime.device_context_bytes, kCudaContextBytes);
    const Plan c = evaluate(m, cpu(24 * GiB), s);
    EXPECT_EQ(c.mem.runtime.device_context_bytes, 0u);
    EXPECT_EQ(c.mem.runtime_bytes() + kCudaContextBytes,
              g.mem.runtime_bytes() + c.mem.runtime.thread_stacks_bytes);
}

TEST(PlannerBudget, LayersOnTheCpuLeaveTheDeviceTheirWeightsAndKv) {
    const PlanModel m = builtin("llama-3-8b", WeightType::Q4_K_M);
    PlanSettings s;
    s.config.max_model_len = 8192;
    s.config.max_num_seqs = 2;
    const Plan all = evaluate(m, gpu(80 * GiB), s);
    s.config.n_cpu_layers = 12;
    const Plan part = evaluate(m, gpu(80 * GiB), s);
    uint64_t off = 0;
    for (uint32_t il = 0; il < 12; ++il) off += m.desc.layer_weight_bytes[il];
    EXPECT_EQ(part.mem.weights_bytes, all.mem.weights_bytes - off);
    // 20 of 32 layers keep their KV on the device: 2 × 20 × 8 × 128 × 2 B per token.
    EXPECT_EQ(part.mem.kv_bytes_per_token, 2u * 20 * 8 * 128 * 2);
    EXPECT_EQ(part.host_bytes, off + 2ull * 8192 * 2 * 12 * 8 * 128 * 2);
}

TEST(PlannerBudget, CapacityIsTheLargestThatFits) {
    const PlanModel m = builtin("llama-3-8b", WeightType::BF16);
    const Device d = *find_device("rtx-4090");
    PlanSettings s;
    s.config.max_model_len = 8192;
    s.config.max_num_seqs = 4;
    const Capacity cap = capacity(m, d, s);
    auto fits = [&](uint32_t len, uint32_t seqs) {
        PlanSettings t = s;
        t.config.max_model_len = len;
        t.config.max_num_seqs = seqs;
        return evaluate(m, d, t).fits_all();
    };
    // 24564 MiB × 0.9 less 15 GiB of weights leaves room for about six 1 GiB sequences.
    EXPECT_EQ(cap.max_num_seqs_at_max_model_len, 6u);
    EXPECT_TRUE(fits(8192, 6));
    EXPECT_FALSE(fits(8192, 7));
    // Four sequences reach the trained context (8192) and no further is asked.
    EXPECT_EQ(cap.max_model_len_at_max_num_seqs, 8192u);
    EXPECT_TRUE(cap.len_is_trained_context);
    s.config.max_num_seqs = 12;
    const Capacity c12 = capacity(m, d, s);
    EXPECT_TRUE(fits(c12.max_model_len_at_max_num_seqs, 12));
    EXPECT_FALSE(fits(c12.max_model_len_at_max_num_seqs + 1, 12));
    EXPECT_LT(c12.max_model_len_at_max_num_seqs, 8192u);
}

TEST(PlannerFit, SuggestionsFitAndRespectPins) {
    // Llama 3 8B in bf16 (15 GiB of weights) on a 12 GiB RTX 3060.
    const PlanModel m = builtin("llama-3-8b", WeightType::BF16);
    const Device d = *find_device("rtx-3060");
    PlanSettings s;
    s.config.max_model_len = 8192;
    s.config.max_num_seqs = 2;
    ASSERT_FALSE(evaluate(m, d, s).mem.fits);
    Pins pins;
    pins.kv_dtype = true;
    const auto sugg = fit_search(m, d, s, pins, 20);
    ASSERT_FALSE(sugg.empty());
    for (const auto& x : sugg) {
        EXPECT_TRUE(x.plan.fits_all());
        EXPECT_LE(x.plan.mem.total_bytes(), x.plan.mem.budget_bytes);
        EXPECT_EQ(x.plan.mem.config.kv_dtype, KvDtype::F16);
        EXPECT_FALSE(x.changes.empty());
        EXPECT_THAT(x.headroom_cmd, HasSubstr("--max-model-len"));
    }
    for (size_t i = 1; i < sugg.size(); ++i) EXPECT_LE(sugg[i - 1].cost, sugg[i].cost);
    // The best keeps all 8192 tokens × 2: a 4-bit or 8-bit type, no layers on the CPU.
    EXPECT_EQ(sugg[0].plan.mem.config.max_model_len, 8192u);
    EXPECT_EQ(sugg[0].plan.mem.config.n_cpu_layers, 0u);
    ASSERT_TRUE(sugg[0].weight_type.has_value());
    EXPECT_THAT(sugg[0].vllm_cmd, HasSubstr("--gpu-memory-utilization 0.90"));

    pins.weight_type = true;
    pins.cpu_layers = true;
    for (const auto& x : fit_search(m, d, s, pins, 20)) EXPECT_FALSE(x.weight_type.has_value());
}

// Qwen3-30B-A3B in Q4_K_M (about 17 GiB) on a 12 GiB RTX 3060: its experts
// are 3 × 128 × 768 × 2048 parameters a layer, 94% of the weights. Kept in
// host memory (--cpu-moe) they leave about 1 GiB of dense and attention
// weights on the GPU, and a token reads 8 of each layer's 128 experts.
TEST(PlannerFit, ExpertsOnTheCpuWhenThatIsWhatFits) {
    const PlanModel m = builtin("qwen3-30b-a3b", WeightType::Q4_K_M);
    const Device d = *find_device("rtx-3060");
    PlanSettings s;
    s.config.max_model_len = 8192;
    ASSERT_FALSE(evaluate(m, d, s).mem.fits);
    // The experts' bytes per layer, by hand: 3 tensors of 128 × 768 rows of
    // 2048, in Q4_K (144 B per 256 weights); Q4_K_M makes some layers'
    // ffn_down Q6_K (210 B per 256), so each layer lies between the two.
    const uint64_t q4k_layer = 3ull * 128 * 768 * 2048 / 256 * 144;
    ASSERT_EQ(m.desc.layer_expert_parts.size(), 48u);
    uint64_t experts = 0;
    for (const auto& e : m.desc.layer_expert_parts) {
        EXPECT_GE(e.host, q4k_layer);
        EXPECT_LE(e.host, q4k_layer * 210 / 144);  // ffn_down at most Q6_K
        experts += e.host;
    }
    PlanSettings moe = s;
    moe.config.experts_on_cpu = true;
    const Plan p = evaluate(m, d, moe);
    EXPECT_TRUE(p.fits_all());
    EXPECT_EQ(p.mem.weights_bytes, m.desc.weight_bytes - experts);
    EXPECT_EQ(p.host_bytes, experts);

    Pins pins;
    const auto sugg = fit_search(m, d, s, pins, 20);
    ASSERT_FALSE(sugg.empty());
    bool offered = false;
    for (const auto& x : sugg) {
        EXPECT_TRUE(x.plan.fits_all());
        if (!x.plan.mem.config.experts_on_cpu) continue;
        offered = true;
        // llama.cpp runs only the GGUF types.
        if (!x.llama_cpp_cmd.empty()) {
            EXPECT_THAT(x.llama_cpp_cmd, HasSubstr("--cpu-moe"));
        }
        EXPECT_THAT(x.headroom_cmd, HasSubstr("--cpu-moe"));
        EXPECT_THAT(x.changes.back(), HasSubstr("experts on the CPU"));
    }
    EXPECT_TRUE(offered);
    // Experts on the CPU keep the whole context and the model's own weights:
    // cheaper than moving whole layers off the GPU.
    EXPECT_TRUE(sugg[0].plan.mem.config.experts_on_cpu);
    pins.cpu_moe = true;
    for (const auto& x : fit_search(m, d, s, pins, 20))
        EXPECT_FALSE(x.plan.mem.config.experts_on_cpu);
}

TEST(PlannerCompare, WeightTypesAtOneConfiguration) {
    // The numbers the OOM articles quote for a 14B model: FP16 28 GB, INT8
    // 14 GB, 4-bit 8 GB; Qwen2.5-14B has 14.77B parameters with embeddings.
    const PlanModel m = builtin("qwen2.5-14b", WeightType::BF16);
    PlanSettings s;
    s.config.max_model_len = 4096;
    const auto rows = compare_quant(m, *find_device("rtx-3060"), s);
    ASSERT_GE(rows.size(), 6u);
    EXPECT_EQ(rows[0].label, "BF16");
    EXPECT_NEAR(rows[0].plan.mem.weights_bytes / 1e9, 29.5, 0.1);
    for (const auto& r : rows) {
        // KV does not depend on the weights: 2 × 48 × 8 × 128 × 2 B × 4096 tokens.
        EXPECT_EQ(r.kv_needed_bytes, 4096ull * 2 * 48 * 8 * 128 * 2);
        if (r.type == WeightType::Q8_0) {
            EXPECT_NEAR(r.plan.mem.weights_bytes / 1e9, 15.7, 0.1);
        }
        if (r.type == WeightType::Q4_K_M) {
            EXPECT_NEAR(r.plan.mem.weights_bytes / 1e9, 9.0, 0.1);
            EXPECT_TRUE(r.plan.fits_all());
        }
    }
}

TEST(PlannerDevices, TableAndNvidiaSmi) {
    const auto d = find_device("RTX 4090");
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->total_bytes, 24564ull * MiB);
    EXPECT_TRUE(find_device("a100_80").has_value());
    EXPECT_FALSE(find_device("rtx 9999").has_value());
    const auto s =
        parse_nvidia_smi("NVIDIA H100 80GB HBM3, 81559, 1024\nNVIDIA H100 80GB HBM3, 81559, 0\n");
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(s->total_bytes, 81559ull * MiB);
    EXPECT_EQ(s->used_bytes, 1024ull * MiB);
    EXPECT_FALSE(parse_nvidia_smi("").has_value());
}

}  // namespace
}  // namespace headroom
