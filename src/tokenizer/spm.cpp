#include "tokenizer/spm.h"

#include <queue>

#include "tokenizer/unicode.h"

namespace headroom {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // ▁

// A run of the escaped text in the doubly linked list of pieces; n == 0 once
// merged into its left neighbour.
struct Symbol {
    int32_t prev;
    int32_t next;
    uint32_t start;
    uint32_t n;
};

struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t size;  // bytes of the merged text when queued
};

// Best score first; among equal scores the leftmost pair.
struct WorseBigram {
    bool operator()(const Bigram& a, const Bigram& b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
        int32_t id = vocab_.find(std::string_view(name, sizeof(name)));
        if (id < 0) id = vocab_.find(std::string_view(std::string(1, static_cast<char>(b))));
        if (id < 0) id = vocab_.unk_id();
        byte_tokens_[b] = id;
    }
}

void SpmTokenizer::encode_text(std::string_view text, bool after_special,
                               std::vector<int32_t>& out) const {
    std::string s;
    s.reserve(text.size() + 3 + text.size() / 2);
    if (vocab_.add_space_prefix() && after_special) s += kSpace;
    for (char c : text) {
        if (c == ' ') {
            s += kSpace;
        } else {
            s.push_back(c);
        }
    }

    std::vector<Symbol> symbols;
    symbols.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) {
        const size_t n =
            std::min(unicode::utf8_sequence_length(static_cast<uint8_t>(s[pos])), s.size() - pos);
        const auto index = static_cast<int32_t>(symbols.size());
        symbols.push_back({index - 1, pos + n == s.size() ? -1 : index + 1,
                           static_cast<uint32_t>(pos), static_cast<uint32_t>(n)});
        pos += n;
    }

    std::vector<Bigram> storage;
    storage.reserve(symbols.size());
    std::priority_queue<Bigram, std::vector<Bigram>, WorseBigram> queue(WorseBigram{},
                                                                        std::move(storage));
    const auto try_add = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const uint32_t size = symbols[left].n + symbols[right].n;
        const int32_t id = vocab_.find(std::string_view(s).substr(symbols[left].start, size));
        if (id >= 0) queue.push({vocab_.score(id), left, right, size});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        Symbol& left = symbols[b.left];
        Symbol& right = symbols[b.right];
        // Stale: one side has merged with something else since.
        if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;
        left.n += right.n;
        right.n = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = b.left;
        try_add(left.prev, b.left);
        try_add(b.left, left.next);
    }

    for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
        const std::string_view piece = std::string_view(s).substr(symbols[i].start, symbols[i].n);
        const int32_t id = vocab_.find(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        for (char c : piece) {
            const int32_t byte_id = byte_tokens_[static_cast<uint8_t>(c)];
            if (byte_id >= 0) out.push_back(byte_id);
        }
    }
}

void SpmTokenizer::append_normal_piece(int32_t id, std::string& out) const {
    const std::string_view text = vocab_.text(id);
    for (size_t pos = 0; pos < text.size();) {
        if (text.substr(pos, kSpace.size()) == kSpace) {
            out.push_back(' ');
            pos += kSpace.size();
        } else {
            out.push_back(text[pos++]);
        }
    }
}

}  // namespace headroom
