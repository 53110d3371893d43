#include "tools/synth.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <set>

#include "core/error.h"
#include "core/progress.h"
#include "core/thread-pool.h"
#include "core/units.h"
#include "format/gguf-writer.h"
#include "kernels/cpu/ref/quant.h"
#include "shape/quant-mix.h"
#include "tools/quantize.h"

namespace headroom {

const std::vector<SynthShape>& synth_shapes() {
    // Published configs: TinyLlama-1.1B, Llama-2-7b, Meta-Llama-3-8B, SmolLM2-135M,
    // Qwen3-30B-A3B, Qwen1.5-MoE-A2.7B, gpt-oss-20b; the "tiny" shapes are for tests
    // (tiny-256: every width a multiple of 256, so the K types and IQ4_XS
    // hold every matrix).
    static const std::vector<SynthShape> kShapes = {
        {"tiny", "llama", 512, 256, 64, 2, 4, 2, 160, 10000.0f, false},
        {"tiny-tied", "llama", 512, 256, 64, 2, 4, 1, 160, 10000.0f, true},
        {"tiny-qwen2", "qwen2", 512, 256, 64, 2, 4, 2, 160, 1000000.0f, false},
        {"tiny-gemma3", "gemma3", 512, 256, 64, 3, 4, 1, 160, 1000000.0f, true, 8, 3},
        {"tiny-qwen3", "qwen3", 512, 256, 64, 2, 4, 2, 160, 1000000.0f, true},
        {"tiny-256", "llama", 512, 256, 256, 2, 4, 2, 512, 10000.0f, false},
        {"smollm2-135m", "llama", 49152, 8192, 576, 30, 9, 3, 1536, 100000.0f, true},
        {"tinyllama-1.1b", "llama", 32000, 2048, 2048, 22, 32, 4, 5632, 10000.0f, false},
        {"llama-2-7b", "llama", 32000, 4096, 4096, 32, 32, 32, 11008, 10000.0f, false},
        {"llama-3-8b", "llama", 128256, 8192, 4096, 32, 32, 8, 14336, 500000.0f, false},
        // Mixtures of experts: 8 experts, 2 (3) per token, so a 37-token
        // prompt sends tokens to every expert and leaves some with few.
        {"tiny-mixtral", "llama", 512, 256, 64, 2, 4, 2, 96, 10000.0f, false, 0, 0, 0, 8, 2},
        {"tiny-qwen3moe", "qwen3moe", 512, 256, 64, 2, 4, 2, 160, 1000000.0f, false, 0, 0, 32, 8, 3,
         64},
        {"tiny-qwen2moe", "qwen2moe", 512, 256, 64, 2, 4, 2, 160, 1000000.0f, false, 0, 0, 0, 8, 2,
         64, 96},
        {"tiny-qwen3moe-256", "qwen3moe", 512, 256, 256, 2, 4, 2, 512, 1000000.0f, false, 0, 0, 0,
         8, 2, 256},
        {"qwen3-30b-a3b", "qwen3moe", 151936, 40960, 2048, 48, 32, 4, 6144, 1000000.0f, false, 0, 0,
         128, 128, 8, 768},
        {"qwen1.5-moe-a2.7b", "qwen2moe", 151936, 8192, 2048, 24, 16, 16, 5632, 1000000.0f, false,
         0, 0, 0, 60, 4, 1408, 5632},
        // gpt-oss: heads wider in total than n_embd, even layers in a window
        // (8 tokens in the tiny one, so a test prompt crosses it), YaRN over
        // an original context small enough that its blend is not trivial.
        {"tiny-gpt-oss", "gpt-oss", 512, 256, 64, 2, 4,  2, 64,    150000.0f,
         false,          8,         2,   32,  8,  2, 64, 0, 32.0f, 64},
        {"gpt-oss-20b", "gpt-oss", 201088, 131072, 2880, 24, 64,   8, 2880,  150000.0f,
         false,         128,       2,      64,     32,   4,  2880, 0, 32.0f, 4096},
    };
    return kShapes;
}

const SynthShape& find_synth_shape(std::string_view name) {
    std::string names;
    for (const auto& s : synth_shapes()) {
        if (s.name == name) return s;
        names += (names.empty() ? "" : ", ") + std::string(s.name);
    }
    fail("synth: unknown shape '{}', expected one of {}", name, names);
}

namespace {

// splitmix64: small, fast, good enough for random weights.
struct Rng {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [-1, 1).
    float uniform() {
        return static_cast<float>(next() >> 40) / static_cast<float>(1ull << 23) - 1.0f;
    }
};

// A SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then
// pieces built so that each is a merge of two earlier ones (single
// characters, then "▁"-prefixed words and character pairs), scored so that
// earlier pieces merge first.
struct SynthVocab {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
};

SynthVocab make_vocab(uint32_t n_vocab) {
    SynthVocab v;
    std::set<std::string> seen;
    auto add = [&](std::string piece, int32_t type) {
        if (v.tokens.size() >= n_vocab || !seen.insert(piece).second) return;
        v.scores.push_back(type == 1 ? -static_cast<float>(v.tokens.size()) : 0.0f);
        v.tokens.push_back(std::move(piece));
        v.types.push_back(type);
    };
    add("<unk>", 2);
    add("<s>", 3);
    add("</s>", 3);
    for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 6);
    const std::string space = "\xE2\x96\x81";  // ▁
    add(space, 1);
    std::vector<std::string> chars;
    for (char c = 'a'; c <= 'z'; ++c) chars.emplace_back(1, c);
    for (char c = 'A'; c <= 'Z'; ++c) chars.emplace_back(1, c);
    for (char c = '0'; c <= '9'; ++c) chars.emplace_back(1, c);
    for (const char* p : {".", ",", "!", "?", "'", "\"", "-", ":", ";", "(", ")"})
        chars.emplace_back(p);
    for (const auto& c : chars) add(c, 1);
    for (const auto& c : chars) add(space + c, 1);
    static const char* kWords[] = {
        "the", "and",  "of",  "to",   "in",   "is",   "it",    "that", "for", "on",  "with", "as",
        "was", "he",   "be",  "at",   "by",   "this", "have",  "from", "or",  "one", "had",  "not",
        "but", "what", "all", "were", "when", "we",   "there", "can",  "an",  "your"};
    // Each word grows one character at a time so every prefix is a piece.
    for (const char* w : kWords) {
        std::string acc = space;
        for (const char* p = w; *p; ++p) {
            acc.push_back(*p);
            add(acc, 1);
        }
    }
    for (size_t i = 0; i < chars.size() && v.tokens.size() < n_vocab; ++i)
        for (size_t j = 0; j < chars.size() && v.tokens.size() < n_vocab; ++j)
            add(chars[i] + chars[j], 1);
    for (size_t i = 0; i < chars.size() && v.tokens.size() < n_vocab; ++i)
        for (size_t j = 0; j < chars.size() && v.tokens.size() < n_vocab; ++j)
            add(space + chars[i] + chars[j], 1);
    // Fill the rest with three-character pieces: "ab" + "c".
    for (size_t i = 0; i < chars.size() && v.tokens.size() < n_vocab; ++i)
        for (size_t j = 0; j < chars.size() && v.tokens.size() < n_vocab; ++j)
            for (size_t k = 0; k < chars.size() && v.tokens.size() < n_vocab; ++k)
                add(chars[i] + chars[j] + chars[k], 1);
    if (v.tokens.size() < n_vocab) fail("synth: cannot build a vocabulary of {} tokens", n_vocab);
    return v;
}

constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

// The hyperparameters, as llama.cpp's GGUF keys name them for the architecture.
void set_hparams(gguf::GgufWriter& w, const SynthShape& s, TensorType type) {
    const std::string a(s.arch);
    w.set_string("general.architecture", a);
    w.set_string("general.name", fmt::format("synthetic {} ({})", s.name, name(type)));
    w.set_u32("general.quantization_version", 2);
    w.set_u32(a + ".context_length", s.n_ctx);
    w.set_u32(a + ".embedding_length", s.n_embd);
    w.set_u32(a + ".block_count", s.n_layer);
    w.set_u32(a + ".feed_forward_length", s.n_ff);
    w.set_u32(a + ".attention.head_count", s.n_head);
    w.set_u32(a + ".attention.head_count_kv", s.n_head_kv);
    w.set_f32(a + ".rope.freq_base", s.rope_base);
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
    const int64_t hd = s.head_size();
    w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(hd));
    if (s.head_dim) {
        w.set_u32(a + ".attention.key_length", s.head_dim);
        w.set_u32(a + ".attention.value_length", s.head_dim);
    }
    if (s.n_expert) {
        w.set_u32(a + ".expert_count", s.n_expert);
        w.set_u32(a + ".expert_used_count", s.n_expert_used);
        if (s.n_ff_exp) w.set_u32(a + ".expert_feed_forward_length", s.n_ff_exp);
        if (s.n_ff_shexp) w.set_u32(a + ".expert_shared_feed_forward_length", s.n_ff_shexp);
    }
    const bool gpt_oss = s.arch == "gpt-oss";
    if (s.sliding_window) {
        w.set_u32(a + ".attention.sliding_window", s.sliding_window);
        // gpt-oss's alternation is the architecture's (llama.cpp reads no key).
        if (!gpt_oss) {
            w.set_u32(a + ".attention.sliding_window_pattern", s.swa_pattern);
            w.set_f32(a + ".rope.freq_base_swa", 10000.0f);
        }
    }
    if (s.yarn_factor > 0) {
        w.set_string(a + ".rope.scaling.type", "yarn");
        w.set_f32(a + ".rope.scaling.factor", s.yarn_factor);
        w.set_u32(a + ".rope.scaling.original_context_length", s.yarn_orig_ctx);
    }
    w.set_u32(a + ".vocab_size", s.n_vocab);
}

// A vocabulary of n_vocab pieces with SentencePiece-style scores, and a
// ChatML template.
void set_tokenizer(gguf::GgufWriter& w, uint32_t n_vocab) {
    const SynthVocab vocab = make_vocab(n_vocab);
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string("tokenizer.ggml.pre", "default");
    w.set_strings("tokenizer.ggml.tokens", vocab.tokens);
    w.set_f32s("tokenizer.ggml.scores", vocab.scores);
    w.set_i32s("tokenizer.ggml.token_type", vocab.types);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
    w.set_string("tokenizer.chat_template", kChatMlTemplate);
}

// A gpt-oss layer's tensors (prefix p): attention with biases and sinks,
// the router with its bias, experts with theirs.
template <class Add>
void add_gpt_oss_layer(Add& add, const SynthShape& s, const std::string& p, int64_t hd) {
    const int64_t F = s.n_ff_exp, X = s.n_expert;
    add(p + "attn_norm.weight", {s.n_embd}, true);
    add(p + "attn_q.weight", {s.n_embd, s.n_head * hd}, false);
    add(p + "attn_k.weight", {s.n_embd, s.n_head_kv * hd}, false);
    add(p + "attn_v.weight", {s.n_embd, s.n_head_kv * hd}, false);
    add(p + "attn_q.bias", {s.n_head * hd}, false, false, 0.5f);
    add(p + "attn_k.bias", {s.n_head_kv * hd}, false, false, 0.5f);
    add(p + "attn_v.bias", {s.n_head_kv * hd}, false, false, 0.5f);
    add(p + "attn_output.weight", {s.n_head * hd, s.n_embd}, false);
    add(p + "attn_output.bias", {s.n_embd}, false, false, 0.5f);
    add(p + "attn_sinks.weight", {s.n_head}, false, false, 0.5f);
    add(p + "post_attention_norm.weight", {s.n_embd}, true);
    add(p + "ffn_gate_inp.weight", {s.n_embd, X}, false, true);
    add(p + "ffn_gate_inp.bias", {X}, false, false, 0.5f);
    add(p + "ffn_gate_exps.weight", {s.n_embd, F, X}, false);
    add(p + "ffn_up_exps.weight", {s.n_embd, F, X}, false);
    add(p + "ffn_down_exps.weight", {F, s.n_embd, X}, false);
    add(p + "ffn_gate_exps.bias", {F, X}, false, false, 8.0f);
    add(p + "ffn_up_exps.bias", {F, X}, false, false, 8.0f);
    add(p + "ffn_down_exps.bias", {s.n_embd, X}, false, false, 0.5f);
}

// Any other layer's tensors (prefix p): attention (qwen2's biases, the q/k
// norms of gemma3 and qwen3, gemma3's extra norms), then a dense FFN or
// experts with an optional shared expert.
template <class Add>
void add_layer(Add& add, const SynthShape& s, const std::string& p, int64_t hd) {
    add(p + "attn_norm.weight", {s.n_embd}, true);
    add(p + "attn_q.weight", {s.n_embd, s.n_head * hd}, false);
    add(p + "attn_k.weight", {s.n_embd, s.n_head_kv * hd}, false);
    add(p + "attn_v.weight", {s.n_embd, s.n_head_kv * hd}, false);
    if (s.arch == "qwen2" || s.arch == "qwen2moe") {
        add(p + "attn_q.bias", {s.n_head * hd}, true);
        add(p + "attn_k.bias", {s.n_head_kv * hd}, true);
        add(p + "attn_v.bias", {s.n_head_kv * hd}, true);
    }
    if (s.arch == "gemma3" || s.arch == "qwen3" || s.arch == "qwen3moe") {
        add(p + "attn_q_norm.weight", {hd}, true);
        add(p + "attn_k_norm.weight", {hd}, true);
    }
    if (s.arch == "gemma3") {
        add(p + "post_attention_norm.weight", {s.n_embd}, true);
        add(p + "post_ffw_norm.weight", {s.n_embd}, true);
    }
    add(p + "attn_output.weight", {s.n_head * hd, s.n_embd}, false);
    add(p + "ffn_norm.weight", {s.n_embd}, true);
    if (s.n_expert) {
        const int64_t F = s.n_ff_exp ? s.n_ff_exp : s.n_ff, X = s.n_expert;
        add(p + "ffn_gate_inp.weight", {s.n_embd, X}, false, true);
        add(p + "ffn_gate_exps.weight", {s.n_embd, F, X}, false);
        add(p + "ffn_up_exps.weight", {s.n_embd, F, X}, false);
        add(p + "ffn_down_exps.weight", {F, s.n_embd, X}, false);
        if (s.n_ff_shexp) {
            add(p + "ffn_gate_inp_shexp.weight", {s.n_embd}, false, true);
            add(p + "ffn_gate_shexp.weight", {s.n_embd, s.n_ff_shexp}, false);
            add(p + "ffn_up_shexp.weight", {s.n_embd, s.n_ff_shexp}, false);
            add(p + "ffn_down_shexp.weight", {s.n_ff_shexp, s.n_embd}, false);
        }
        return;
    }
    add(p + "ffn_gate.weight", {s.n_embd, s.n_ff}, false);
    add(p + "ffn_up.weight", {s.n_embd, s.n_ff}, false);
    add(p + "ffn_down.weight", {s.n_ff, s.n_embd}, false);
}

}  // namespace

gguf::GgufWriter make_synth_model(const SynthShape& s, const SynthOptions& opt) {
    if (!ref::can_quantize(opt.type))
        fail("synth: cannot write weights of type {}", name(opt.type));
    gguf::GgufWriter w;
    set_hparams(w, s, opt.type);
    set_tokenizer(w, s.n_vocab);
    const bool gpt_oss = s.arch == "gpt-oss";
    const int64_t hd = s.head_size();

    auto pool = std::make_shared<ThreadPool>(opt.n_threads);
    uint64_t tensor_index = 0;
    // is_norm: an f32 vector around 1; f32: random weights kept in f32 (a
    // router, as llama.cpp's quantize keeps it); bias > 0: an f32 vector in
    // [-bias, bias) (gpt-oss's biases and sinks; its experts' gate and up
    // biases reach past the SwiGLU's clamp at 7). gpt-oss in MXFP4 is as
    // published: the experts MXFP4, the other matrices Q8_0.
    auto add = [&](const std::string& name, std::vector<int64_t> shape, bool is_norm,
                   bool f32 = false, float bias = 0.0f) {
        const bool q8_0 =
            gpt_oss && opt.type == TensorType::MXFP4 && name.find("_exps.") == std::string::npos;
        const TensorType type = is_norm || f32 || bias > 0
                                    ? TensorType::F32
                                    : fit_type_to_row(q8_0 ? TensorType::Q8_0 : opt.type,
                                                      static_cast<uint64_t>(shape[0]));
        const uint64_t seed = opt.seed * 1000003ull + tensor_index++;
        const int64_t n_cols = shape[0];
        int64_t n_rows = 1;
        for (size_t d = 1; d < shape.size(); ++d) n_rows *= shape[d];
        const float amplitude = is_norm    ? 0.0f
                                : bias > 0 ? bias
                                           : std::sqrt(3.0f / static_cast<float>(n_cols));
        w.add_tensor(name, type, shape, [=](uint8_t* dst) {
            const uint64_t bytes_per_row = row_bytes(type, static_cast<uint64_t>(n_cols));
            // Distinct random rows for small tensors; big ones tile a pool
            // of 256 random rows, picked at random (fast to write).
            const int64_t n_pool = n_rows <= 4096 ? n_rows : 256;
            pool->parallel_for(n_pool, [&](int64_t begin, int64_t end, int) {
                std::vector<float> row(static_cast<size_t>(n_cols));  // (n_cols,) f32
                for (int64_t r = begin; r < end; ++r) {
                    Rng rng{seed * 7919ull + static_cast<uint64_t>(r)};
                    for (auto& x : row)
                        x = is_norm ? 1.0f + 0.1f * rng.uniform() : amplitude * rng.uniform();
                    ref::quantize_row(type, row.data(), dst + r * bytes_per_row, n_cols);
                }
            });
            Rng pick{seed ^ 0xABCDEFull};
            for (int64_t r = n_pool; r < n_rows; ++r) {
                const auto src = static_cast<int64_t>(pick.next() % static_cast<uint64_t>(n_pool));
                std::memcpy(dst + r * bytes_per_row, dst + src * bytes_per_row, bytes_per_row);
            }
        });
    };
    add("token_embd.weight", {s.n_embd, s.n_vocab}, false);
    for (uint32_t il = 0; il < s.n_layer; ++il) {
        const std::string p = fmt::format("blk.{}.", il);
        if (gpt_oss)
            add_gpt_oss_layer(add, s, p, hd);
        else
            add_layer(add, s, p, hd);
    }
    add("output_norm.weight", {s.n_embd}, true);
    if (!s.tied_embeddings) add("output.weight", {s.n_embd, s.n_vocab}, false);
    return w;
}

void write_synth_model(const SynthShape& shape, const SynthOptions& opt, const std::string& path) {
    const gguf::GgufWriter w = make_synth_model(shape, opt);
    Progress progress(fmt::format("synth {} {}", shape.name, name(opt.type)), 1000, opt.progress);
    w.write(path, [&](size_t i, size_t n, uint64_t done, uint64_t total) {
        progress.update(total ? done * 1000 / total : 1000,
                        fmt::format("{}/{} tensors, {}", i, n, format_bytes(done)));
    });
    progress.finish_with_summary(path);
}

}  // namespace headroom
