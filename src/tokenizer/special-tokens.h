// Cuts special-token texts out of the input before it is tokenized, with the
// result of llama.cpp's tokenizer_st_partition: tokens are tried longest text
// first, and each takes every occurrence, leftmost first and not
// overlapping, that lies in text no earlier token took. Control and unknown
// tokens take part only when parsing special tokens; user-defined ones always.
//
// Rather than searching the text once per special token (6k of them in
// Gemma), one pass over a byte trie of their texts lists every occurrence,
// and the occurrences are then accepted in priority order.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace headroom {

class Vocab;

// A run of input: plain text [offset, offset + length), or one token.
struct Fragment {
    int32_t token = -1;  // -1 for text
    uint32_t offset = 0;
    uint32_t length = 0;
};

class SpecialTokenMatcher {
  public:
    void build(const Vocab& vocab);
    // Appends the fragments of `text` in order. Whitespace that an rstrip or
    // lstrip token swallows belongs to no fragment.
    void partition(const Vocab& vocab, std::string_view text, bool parse_special,
                   std::vector<Fragment>& out) const;
    size_t memory_bytes() const;

  private:
    struct Node {
        int32_t rank = -1;  // index into Vocab::special_ids() of the token ending here
        uint32_t first_edge = 0;
        uint32_t n_edges = 0;
    };
    struct Edge {
        uint8_t byte;
        uint32_t child;
    };
    int32_t child(const Node& node, uint8_t byte) const;

    std::vector<Node> nodes_;  // nodes_[0] is the root
    std::vector<Edge> edges_;  // each node's edges together, sorted by byte
    std::array<bool, 256> starts_{};
    bool any_user_defined_ = false;
};

}  // namespace headroom
