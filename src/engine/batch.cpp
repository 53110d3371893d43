#include "engine/batch.h"

#include <algorithm>

#include "core/check.h"
#include "memory/kv-cache.h"

namespace headroom {

void Batch::reserve(size_t n_tokens, size_t n_seqs, size_t n_logit_rows) {
    tokens.reserve(n_tokens);
    positions.reserve(n_tokens);
    seq_of_token.reserve(n_tokens);
    seqs.reserve(n_seqs);
    logit_tokens.reserve(n_logit_rows);
}

void Batch::clear() {
    tokens.clear();
    positions.clear();
    seq_of_token.clear();
    seqs.clear();
    logit_tokens.clear();
}

uint32_t Batch::add_seq(const SeqKv* seq) {
    seqs.push_back(seq);
    return static_cast<uint32_t>(seqs.size() - 1);
}

void Batch::add_token(int32_t token, uint32_t pos, uint32_t seq, bool want_logits) {
    if (want_logits) logit_tokens.push_back(static_cast<uint32_t>(tokens.size()));
    tokens.push_back(token);
    positions.push_back(pos);
    seq_of_token.push_back(seq);
}

kernels::StepView make_step_view(const Batch& batch, const KvCache& cache, std::span<uint32_t> w) {
    const auto T = static_cast<uint32_t>(batch.n_tokens());
    const auto S = static_cast<uint32_t>(batch.seqs.size());
    const auto R = static_cast<uint32_t>(batch.logit_tokens.size());
    const auto G = static_cast<uint32_t>(cache.n_groups());
    kernels::StepView v;
    v.n_tokens = T;
    v.n_seqs = S;
    v.n_logit_rows = R;
    v.n_groups = G;
    v.block_size = cache.block_size();
    v.at.tokens = 0;
    v.at.positions = T;
    v.at.seq_of_token = 2 * T;
    v.at.logit_rows = 3 * T;
    v.at.slots = 3 * T + R;
    v.at.table_start = v.at.slots + G * T;
    v.at.seq_len = v.at.table_start + G * S;
    v.at.tables = v.at.seq_len + S;
    HR_CHECK(v.at.tables <= w.size());
    uint32_t n = v.at.tables;
    for (uint32_t t = 0; t < T; ++t) {
        w[v.at.tokens + t] = static_cast<uint32_t>(batch.tokens[t]);
        w[v.at.positions + t] = batch.positions[t];
        w[v.at.seq_of_token + t] = batch.seq_of_token[t];
        for (uint32_t g = 0; g < G; ++g)
            w[v.at.slots + g * T + t] = static_cast<uint32_t>(
                cache.slot(*batch.seqs[batch.seq_of_token[t]], g, batch.positions[t]));
    }
    std::copy(batch.logit_tokens.begin(), batch.logit_tokens.end(), w.begin() + v.at.logit_rows);
    for (uint32_t g = 0; g < G; ++g) {
        for (uint32_t s = 0; s < S; ++s) {
            const SeqKv& seq = *batch.seqs[s];
            w[v.at.table_start + g * S + s] = n - v.at.tables;
            if (g >= seq.tables.size()) continue;
            HR_CHECK(n + seq.tables[g].size() <= w.size());
            for (int32_t b : seq.tables[g]) w[n++] = static_cast<uint32_t>(b);
        }
    }
    for (uint32_t s = 0; s < S; ++s) w[v.at.seq_len + s] = batch.seqs[s]->n_tokens;
    v.words = w.data();
    v.n_words = n;
    return v;
}

}  // namespace headroom
