// One forward step's inputs besides the weights and the KV region: the
// tokens, their positions and sequences, which rows want logits, where each
// token's K and V go (the slot mapping), and the block tables attention
// reads. It is one array of 32-bit words, so a device takes the whole of it
// in one copy; the runner builds it from the batch and the KV cache
// (engine/runner.cpp) in storage reserved at start-up.
//
// Arrays (word offsets in `at`):
//   tokens       (n_tokens)            token ids
//   positions    (n_tokens)            position of each token in its sequence
//   seq_of_token (n_tokens)            index of its sequence in this step
//   logit_rows   (n_logit_rows)        tokens whose logits are wanted, in row order
//   slots        (n_groups, n_tokens)  block × block_size + position % block_size:
//                                      where the token's K and V are written
//   table_start  (n_groups, n_seqs)    where sequence s's block table of group g starts in tables
//   tables       (...)                 block ids, -1 for blocks out of a window
//   seq_len      (n_seqs)              tokens with K and V once the step is done
#pragma once

#include <cstdint>

namespace headroom::kernels {

struct StepView {
    uint32_t n_tokens = 0;
    uint32_t n_seqs = 0;
    uint32_t n_logit_rows = 0;
    uint32_t n_groups = 0;
    uint32_t block_size = 0;
    struct Offsets {
        uint32_t tokens = 0, positions = 0, seq_of_token = 0, logit_rows = 0, slots = 0,
                 table_start = 0, tables = 0, seq_len = 0;
    } at;
    const uint32_t* words = nullptr;
    uint32_t n_words = 0;

    const int32_t* tokens() const { return reinterpret_cast<const int32_t*>(words + at.tokens); }
    const uint32_t* positions() const { return words + at.positions; }
    const uint32_t* seq_of_token() const { return words + at.seq_of_token; }
    const uint32_t* logit_rows() const { return words + at.logit_rows; }
    const uint32_t* seq_len() const { return words + at.seq_len; }
    // Where token t's K and V rows go in group g.
    int32_t slot(uint32_t g, uint32_t t) const {
        return static_cast<int32_t>(words[at.slots + g * n_tokens + t]);
    }
    // Sequence s's block table of group g.
    const int32_t* table(uint32_t g, uint32_t s) const {
        return reinterpret_cast<const int32_t*>(words + at.tables +
                                                words[at.table_start + g * n_seqs + s]);
    }
};

}  // namespace headroom::kernels
