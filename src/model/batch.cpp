#include "model/batch.h"

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

}  // namespace headroom
