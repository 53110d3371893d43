#include "shape/model-table.h"
#include "core/strings.h"

#include <cctype>
#include <nlohmann/json.hpp>
#include <string>

namespace headroom {

namespace {

std::string lower(std::string_view s) {
    return ascii_lower(s);
}

}  // namespace

const std::vector<BuiltinModel>& builtin_models() {
    // Each entry copies the keys of the config.json at `source` that the
    // planner reads; nothing is derived or rounded.
    static const std::vector<BuiltinModel> kModels = {
        {"llama-2-7b", "Meta Llama 2 7B",
         "https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json",
         R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
             "vocab_size": 32000, "max_position_embeddings": 4096,
             "tie_word_embeddings": false, "torch_dtype": "float16"})"},
        {"llama-2-13b", "Meta Llama 2 13B",
         "https://huggingface.co/meta-llama/Llama-2-13b-hf/blob/main/config.json",
         R"({"model_type": "llama", "hidden_size": 5120, "intermediate_size": 13824,
             "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 40,
             "vocab_size": 32000, "max_position_embeddings": 4096,
             "tie_word_embeddings": false, "torch_dtype": "float16"})"},
        {"llama-2-70b", "Meta Llama 2 70B",
         "https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json",
         R"({"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
             "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
             "vocab_size": 32000, "max_position_embeddings": 4096,
             "tie_word_embeddings": false, "torch_dtype": "float16"})"},
        {"llama-3-8b", "Meta Llama 3 8B",
         "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
         R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 8192,
             "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
        {"llama-3.1-8b", "Meta Llama 3.1 8B",
         "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
         R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 131072,
             "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
        {"llama-3-70b", "Meta Llama 3 70B",
         "https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
         R"({"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
             "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 8192,
             "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
        {"llama-3.1-70b", "Meta Llama 3.1 70B",
         "https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json",
         R"({"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
             "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
             "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072,
             "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
        {"qwen2.5-7b", "Qwen2.5 7B Instruct",
         "https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json",
         R"({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
             "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "vocab_size": 152064, "max_position_embeddings": 32768,
             "sliding_window": 131072, "use_sliding_window": false,
             "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
        {"qwen2.5-14b", "Qwen2.5 14B Instruct",
         "https://huggingface.co/Qwen/Qwen2.5-14B-Instruct/blob/main/config.json",
         R"({"model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 13824,
             "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
             "vocab_size": 152064, "max_position_embeddings": 32768,
             "sliding_window": 131072, "use_sliding_window": false,
             "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
        {"qwen2.5-32b", "Qwen2.5 32B Instruct",
         "https://huggingface.co/Qwen/Qwen2.5-32B-Instruct/blob/main/config.json",
         R"({"model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 27648,
             "num_hidden_layers": 64, "num_attention_heads": 40, "num_key_value_heads": 8,
             "vocab_size": 152064, "max_position_embeddings": 32768,
             "sliding_window": 131072, "use_sliding_window": false,
             "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
        {"qwen2.5-72b", "Qwen2.5 72B Instruct",
         "https://huggingface.co/Qwen/Qwen2.5-72B-Instruct/blob/main/config.json",
         R"({"model_type": "qwen2", "hidden_size": 8192, "intermediate_size": 29568,
             "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
             "vocab_size": 152064, "max_position_embeddings": 32768,
             "sliding_window": 131072, "use_sliding_window": false,
             "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
        {"mistral-7b", "Mistral 7B v0.1 (4096-token sliding window)",
         "https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json",
         R"({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096,
             "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
        {"gemma-3-27b", "Google Gemma 3 27B (text)",
         "https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json",
         R"({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",
             "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
             "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
             "vocab_size": 262208, "max_position_embeddings": 131072,
             "sliding_window": 1024, "sliding_window_pattern": 6},
             "torch_dtype": "bfloat16"})"},
        {"qwen3-30b-a3b", "Qwen3-30B-A3B (MoE, 128 experts, 8 per token)",
         "https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
         R"({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
             "moe_intermediate_size": 768, "num_hidden_layers": 48,
             "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
             "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
             "mlp_only_layers": [], "norm_topk_prob": true, "vocab_size": 151936,
             "max_position_embeddings": 40960, "rope_theta": 1000000.0,
             "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
        {"deepseek-v3", "DeepSeek-V3 (671B MoE, latent attention)",
         "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
         R"({"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
             "moe_intermediate_size": 2048, "num_hidden_layers": 61,
             "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
             "max_position_embeddings": 163840, "n_routed_experts": 256,
             "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
             "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
             "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
             "num_nextn_predict_layers": 1, "topk_method": "noaux_tc",
             "tie_word_embeddings": false, "torch_dtype": "bfloat16",
             "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                     "weight_block_size": [128, 128]}})"},
    };
    return kModels;
}

const BuiltinModel* find_builtin_model(std::string_view name) {
    const std::string want = lower(name);
    for (const auto& m : builtin_models())
        if (want == m.name) return &m;
    return nullptr;
}

ModelShape builtin_shape(const BuiltinModel& model) {
    ModelShape s =
        shape_from_hf_config(nlohmann::json::parse(model.config_json), std::string(model.name));
    s.hp.name = std::string(model.description);
    return s;
}

}  // namespace headroom
