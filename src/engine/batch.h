// One forward call's input: tokens from one or more sequences, each with its
// position, ragged (no padding). Decode tokens and prefill chunks of
// different sequences go in the same batch. The vectors are reused from step
// to step (capacity reserved once), so building a batch allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/step-view.h"

namespace headroom {

struct SeqKv;
class KvCache;

struct Batch {
    std::vector<int32_t> tokens;         // (n_tokens)
    std::vector<uint32_t> positions;     // (n_tokens)
    std::vector<uint32_t> seq_of_token;  // (n_tokens) index into seqs
    std::vector<const SeqKv*> seqs;      // the sequences' KV (already grown for these tokens)
    // Tokens whose logits are wanted, in the order of the logits rows.
    std::vector<uint32_t> logit_tokens;

    size_t n_tokens() const { return tokens.size(); }
    void reserve(size_t n_tokens, size_t n_seqs, size_t n_logit_rows);
    void clear();
    // Appends a sequence and returns its index.
    uint32_t add_seq(const SeqKv* seq);
    void add_token(int32_t token, uint32_t pos, uint32_t seq, bool want_logits);
};

// The step view of a batch (kernels/step-view.h), its arrays written into
// `words`, block tables and slots from the cache. Allocates nothing.
// Precondition: the cache has grown every sequence for its tokens, and the
// view fits `words` (step_view_words() in memory/terms.h bounds it).
kernels::StepView make_step_view(const Batch& batch, const KvCache& cache,
                                 std::span<uint32_t> words);

}  // namespace headroom
