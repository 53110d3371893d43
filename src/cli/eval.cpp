// headroom eval: score a token sequence (perplexity) and optionally dump
// every position's logits, for checking headroom against other engines.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine-flags.h"
#include "core/error.h"
#include "core/progress.h"
#include "format/gguf-reader.h"
#include "model/registry.h"

namespace headroom::cli {

namespace {

std::vector<int32_t> parse_token_list(const std::string& s) {
    std::vector<int32_t> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        try {
            size_t used = 0;
            const long v = std::stol(item, &used);
            if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
            out.push_back(static_cast<int32_t>(v));
        } catch (const std::exception&) {
            fail("--tokens: '{}' is not a token id, expected comma-separated integers", item);
        }
    }
    return out;
}

struct EvalOptions {
    EngineFlags engine;
    std::string tokens;
    std::string text_file;
    std::string logits_out;
    std::string hidden_out;
    std::string tokens_out;
    uint32_t ctx = 0;
};

// `headroom eval` once its flags are read.
void run_eval(const EvalOptions& o) {
    InstanceOptions io = instance_options(o.engine, 1);
    Instance inst(o.engine.model);
    std::vector<int32_t> tokens;
    if (!o.text_file.empty()) {
        std::ifstream in(o.text_file, std::ios::binary);
        if (!in) fail("-f {}: cannot read", o.text_file);
        std::stringstream ss;
        ss << in.rdbuf();
        tokens = inst.tokenizer().encode(ss.str(), true, false);
    } else if (!o.tokens.empty()) {
        tokens = parse_token_list(o.tokens);
    } else {
        fail("eval: give --tokens IDS or -f FILE");
    }
    if (tokens.size() < 2) fail("--tokens: need at least 2 tokens to score");
    const uint32_t n_vocab = inst.desc().hp.n_vocab;
    for (int32_t t : tokens)
        if (static_cast<uint32_t>(t) >= n_vocab)
            fail("--tokens: id {} is outside the vocabulary of {}", t, n_vocab);
    const uint32_t ctx = o.ctx ? o.ctx : static_cast<uint32_t>(tokens.size());
    EngineConfig& c = io.settings.config;
    if (c.max_model_len == 0) c.max_model_len = ctx;
    if (c.max_model_len < ctx) fail("--ctx {} exceeds --max-model-len {}", ctx, c.max_model_len);
    if (c.max_num_batched_tokens == 0) c.max_num_batched_tokens = std::min<uint32_t>(ctx, 512);
    c.max_logit_rows = c.max_num_batched_tokens;
    io.runner.prefix_caching = false;
    inst.load(io);
    Runner& runner = inst.runner();

    std::unique_ptr<FILE, int (*)(FILE*)> out(nullptr, &std::fclose);
    if (!o.logits_out.empty()) {
        out.reset(std::fopen(o.logits_out.c_str(), "wb"));
        if (!out) fail("--logits-out {}: cannot create", o.logits_out);
    }
    std::unique_ptr<FILE, int (*)(FILE*)> hidden(nullptr, &std::fclose);
    if (!o.hidden_out.empty()) {
        hidden.reset(std::fopen(o.hidden_out.c_str(), "wb"));
        if (!hidden) fail("--hidden-out {}: cannot create", o.hidden_out);
    }
    const uint32_t n_embd = inst.desc().hp.n_embd;
    if (!o.tokens_out.empty()) {
        std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(o.tokens_out.c_str(), "wb"),
                                                &std::fclose);
        if (!f ||
            std::fwrite(tokens.data(), sizeof(int32_t), tokens.size(), f.get()) != tokens.size())
            fail("--tokens-out {}: cannot write", o.tokens_out);
    }
    Batch batch;
    const uint32_t step = runner.plan().config.max_num_batched_tokens;
    batch.reserve(step, 1, step);
    double nll = 0;
    uint64_t n_scored = 0;
    const auto start = std::chrono::steady_clock::now();
    // More than a few forward steps: show how far scoring is.
    Progress progress("scoring", tokens.size(), tokens.size() > 4 * size_t{step});
    for (size_t w0 = 0; w0 < tokens.size(); w0 += ctx) {
        const size_t w1 = std::min(tokens.size(), w0 + ctx);
        SeqKv seq;
        for (size_t c0 = w0; c0 < w1; c0 += step) {
            const size_t c1 = std::min(w1, c0 + step);
            if (!runner.cache().grow(seq, static_cast<uint32_t>(c1 - c0)))
                fail("internal: KV pool too small for one window");
            batch.clear();
            const uint32_t s = batch.add_seq(&seq);
            for (size_t i = c0; i < c1; ++i)
                batch.add_token(tokens[i], static_cast<uint32_t>(i - w0), s, true);
            if (hidden) {
                // The same step again for its hidden states (the KV it writes is the same).
                const float* h = runner.forward(batch, true);
                if (std::fwrite(h, sizeof(float) * n_embd, c1 - c0, hidden.get()) != c1 - c0)
                    fail("--hidden-out {}: write failed", o.hidden_out);
            }
            const float* logits = runner.forward(batch);
            if (out && std::fwrite(logits, sizeof(float) * n_vocab, c1 - c0, out.get()) != c1 - c0)
                fail("--logits-out {}: write failed", o.logits_out);
            // Score predictions of tokens in the window's second half.
            for (size_t i = c0; i < c1; ++i) {
                if (i + 1 >= w1 || i - w0 < (w1 - w0) / 2) continue;
                const float* row = logits + (i - c0) * n_vocab;
                float mx = row[0];
                for (uint32_t v = 1; v < n_vocab; ++v) mx = std::max(mx, row[v]);
                double sum = 0;
                for (uint32_t v = 0; v < n_vocab; ++v)
                    sum += std::exp(static_cast<double>(row[v] - mx));
                nll += std::log(sum) + mx - row[tokens[i + 1]];
                ++n_scored;
            }
            progress.update(
                c1, n_scored ? fmt::format("perplexity {:.4f} so far", std::exp(nll / n_scored))
                             : std::string());
        }
        runner.cache().free(seq);
    }
    progress.finish(fmt::format("{} tokens", tokens.size()));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (n_scored)
        fmt::print("perplexity {:.4f} over {} predictions\n", std::exp(nll / n_scored), n_scored);
    fmt::print(stderr, "{} tokens in {:.2f}s ({:.1f} tokens/s), kv {}\n", tokens.size(), seconds,
               tokens.size() / seconds, name(runner.plan().config.kv_dtype));
}

}  // namespace

void add_eval_command(CLI::App& app) {
    auto o = std::make_shared<EvalOptions>();
    auto* cmd = app.add_subcommand(
        "eval",
        "Score a token sequence: perplexity over windows of --ctx tokens (the second half of "
        "each window is scored, as llama.cpp's perplexity tool does), and optionally dump logits");
    // eval is for checking logits against other implementations: exact f32
    // activations unless --act-precision asks for the engine's faster ones.
    o->engine.act_precision = "f32";
    add_engine_flags(cmd, o->engine, 1);
    auto* tok = cmd->add_option("--tokens", o->tokens, "Comma-separated token ids to score");
    cmd->add_option("-f,--file", o->text_file,
                    "Text file to score (tokenized with BOS as the model's metadata says)")
        ->excludes(tok);
    cmd->add_option("--logits-out", o->logits_out,
                    "Write every position's logits here: float32, (n_tokens, n_vocab), row-major");
    cmd->add_option("--hidden-out", o->hidden_out,
                    "Write every position's final hidden state (after the output norm) here: "
                    "float32, (n_tokens, n_embd), row-major");
    cmd->add_option(
        "--tokens-out", o->tokens_out,
        "Write the scored token ids here: int32, one per position (what -f tokenized to)");
    cmd->add_option("--ctx", o->ctx, "Window size in tokens (default: all tokens in one window)");
    cmd->callback([o] { run_eval(*o); });
}

}  // namespace headroom::cli
