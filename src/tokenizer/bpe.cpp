#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "core/error.h"
#include "core/strings.h"
#include "format/gguf-reader.h"
#include "tokenizer/unicode.h"

namespace headroom {

namespace {

constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";

// One byte of the word being merged; n == 0 once merged into its left
// neighbour. [start, start + n) is its text in the GPT-2 spelling.
struct Symbol {
    int32_t prev;
    int32_t next;
    uint32_t start;
    uint32_t n;
    int32_t atom;
};

struct Bigram {
    int32_t rank;
    int32_t left;
    int32_t right;
    uint32_t n_left;  // sizes when queued: a change means the pair is stale
    uint32_t n_right;
};

// Lowest rank first; among equal ranks the leftmost pair.
struct WorseBigram {
    bool operator()(const Bigram& a, const Bigram& b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

}  // namespace

struct BpeTokenizer::Scratch {
    std::vector<uint32_t> cpts;
    std::vector<uint8_t> bits;
    std::vector<uint32_t> word_lengths;
    std::string word;     // UTF-8
    std::string spelled;  // GPT-2 spelling of `word`
    std::vector<Symbol> symbols;
    std::vector<Bigram> heap;
};

BpeTokenizer::BpeTokenizer(Vocab vocab, const gguf::GgufFile& file) : Tokenizer(std::move(vocab)) {
    const gguf::Array& merges = file.require_array(kMergesKey);
    if (merges.elem_type != gguf::ValueType::STRING) {
        fail("{}: {} is an array of {}, expected strings", file.path(), kMergesKey,
             gguf::name(merges.elem_type));
    }
    const size_t n_merges = merges.strings.size();
    if (n_merges >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        fail("{}: {} has {} entries, expected fewer than 2^31", file.path(), kMergesKey, n_merges);
    }
    // "left right": llama.cpp splits at the first space after the first byte.
    std::vector<std::pair<std::string_view, std::string_view>> pairs(n_merges);
    for (size_t i = 0; i < n_merges; ++i) {
        const std::string_view m = merges.strings[i];
        const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
        if (space == std::string_view::npos || space + 1 == m.size()) {
            fail("{}: {}[{}] is '{}', expected two tokens separated by a space", file.path(),
                 kMergesKey, i, clipped(m));
        }
        pairs[i] = {m.substr(0, space), m.substr(space + 1)};
    }

    // Operands that are no token become extra atoms.
    std::vector<std::string_view> extra;
    for (const auto& [l, r] : pairs) {
        if (vocab_.find(l) < 0) extra.push_back(l);
        if (vocab_.find(r) < 0) extra.push_back(r);
    }
    std::sort(extra.begin(), extra.end());
    extra.erase(std::unique(extra.begin(), extra.end()), extra.end());
    extra_index_.reset(extra.size());
    for (std::string_view s : extra) add_atom(s);

    merge_slots_.assign(std::bit_ceil(n_merges + n_merges / 2 + 16), MergeSlot{});
    merge_mask_ = merge_slots_.size() - 1;
    merge_result_.resize(n_merges);
    std::string joined;
    for (size_t i = 0; i < n_merges; ++i) {
        const int32_t left = atom_of(pairs[i].first);
        const int32_t right = atom_of(pairs[i].second);
        MergeSlot& slot = merge_slots_[slot_of(left, right)];
        if (slot.left < 0) slot = {left, right, static_cast<int32_t>(i)};  // the first rank wins
        joined.assign(pairs[i].first);
        joined += pairs[i].second;
        merge_result_[i] = atom_of(joined);
    }

    for (int b = 0; b < 256; ++b) {
        std::string spelled;
        unicode::append_utf8(unicode::byte_to_gpt2_codepoint(static_cast<uint8_t>(b)), spelled);
        byte_atom_[b] = atom_of(spelled);
        byte_token_[b] = vocab_.find(std::string(1, static_cast<char>(b)));
    }
}

int32_t BpeTokenizer::atom_of(std::string_view text) const {
    const int32_t id = vocab_.find(text);
    if (id >= 0) return id;
    const int32_t extra = extra_index_.find(text, [this](int32_t i) {
        return std::string_view(extra_blob_).substr(extra_[i].first, extra_[i].second);
    });
    return extra >= 0 ? vocab_.n_tokens() + extra : -1;
}

int32_t BpeTokenizer::add_atom(std::string_view text) {
    const auto index = static_cast<int32_t>(extra_.size());
    extra_.emplace_back(static_cast<uint32_t>(extra_blob_.size()),
                        static_cast<uint32_t>(text.size()));
    extra_blob_ += text;
    extra_index_.insert(index, [this](int32_t i) {
        return std::string_view(extra_blob_).substr(extra_[i].first, extra_[i].second);
    });
    return vocab_.n_tokens() + index;
}

size_t BpeTokenizer::slot_of(int32_t left, int32_t right) const {
    const uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    uint64_t mix = key * 0x9E3779B97F4A7C15ull;
    mix ^= mix >> 32;
    for (size_t i = mix & merge_mask_;; i = (i + 1) & merge_mask_) {
        const MergeSlot& s = merge_slots_[i];
        if (s.left < 0 || (s.left == left && s.right == right)) return i;
    }
}

int32_t BpeTokenizer::rank(int32_t left, int32_t right) const {
    return merge_slots_[slot_of(left, right)].rank;
}

void BpeTokenizer::encode_text(std::string_view text, bool /*after_special*/,
                               std::vector<int32_t>& out) const {
    Scratch s;
    unicode::decode_utf8(text, s.cpts);
    s.bits.resize(s.cpts.size());
    for (size_t i = 0; i < s.cpts.size(); ++i) s.bits[i] = unicode::codepoint_bits(s.cpts[i]);
    split_words(vocab_.pre(), s.cpts, s.bits, s.word_lengths);
    size_t start = 0;
    for (const uint32_t len : s.word_lengths) {
        // Words are re-encoded from codepoints, so invalid input is U+FFFD here.
        s.word.clear();
        for (size_t i = start; i < start + len; ++i) unicode::append_utf8(s.cpts[i], s.word);
        start += len;
        encode_word(s.word, s, out);
    }
}

void BpeTokenizer::encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
    s.spelled.clear();
    s.symbols.clear();
    for (size_t i = 0; i < word.size(); ++i) {
        const auto b = static_cast<uint8_t>(word[i]);
        const auto start = static_cast<uint32_t>(s.spelled.size());
        unicode::append_utf8(unicode::byte_to_gpt2_codepoint(b), s.spelled);
        const auto index = static_cast<int32_t>(i);
        s.symbols.push_back({index - 1, i + 1 == word.size() ? -1 : index + 1, start,
                             static_cast<uint32_t>(s.spelled.size() - start), byte_atom_[b]});
    }
    if (vocab_.ignore_merges()) {
        if (const int32_t id = vocab_.find(s.spelled); id >= 0) {
            out.push_back(id);
            return;
        }
    }

    std::vector<Symbol>& sym = s.symbols;
    std::vector<Bigram>& heap = s.heap;  // a heap under WorseBigram, reused across words
    heap.clear();
    const auto try_add = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0 || sym[left].atom < 0 || sym[right].atom < 0) return;
        const int32_t r = rank(sym[left].atom, sym[right].atom);
        if (r < 0) return;
        heap.push_back({r, left, right, sym[left].n, sym[right].n});
        std::push_heap(heap.begin(), heap.end(), WorseBigram{});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), WorseBigram{});
        const Bigram b = heap.back();
        heap.pop_back();
        Symbol& left = sym[b.left];
        Symbol& right = sym[b.right];
        if (left.n != b.n_left || right.n != b.n_right) continue;  // stale
        left.n += right.n;
        left.atom = merge_result_[b.rank];
        right.n = 0;
        left.next = right.next;
        if (right.next >= 0) sym[right.next].prev = b.left;
        try_add(left.prev, b.left);
        try_add(b.left, left.next);
    }

    for (int32_t i = sym.empty() ? -1 : 0; i != -1; i = sym[i].next) {
        if (sym[i].atom >= 0 && sym[i].atom < vocab_.n_tokens()) {
            out.push_back(sym[i].atom);
            continue;
        }
        for (uint32_t k = sym[i].start; k < sym[i].start + sym[i].n; ++k) {
            const int32_t id = byte_token_[static_cast<uint8_t>(s.spelled[k])];
            if (id >= 0) out.push_back(id);
        }
    }
}

void BpeTokenizer::append_normal_piece(int32_t id, std::string& out) const {
    const std::string_view text = vocab_.text(id);
    for (size_t pos = 0; pos < text.size();) {
        const size_t from = pos;
        const int byte = unicode::gpt2_codepoint_to_byte(unicode::decode_utf8(text, pos));
        if (byte >= 0) {
            out.push_back(static_cast<char>(byte));
            continue;
        }
        // A character GPT-2's spelling does not use; llama.cpp marks it so.
        std::string utf8;
        size_t p = from;
        unicode::append_utf8(unicode::decode_utf8(text, p), utf8);
        out += "[UNK_BYTE_0x";
        for (char c : utf8) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
        out += text;
        out += "]";
    }
}

size_t BpeTokenizer::model_memory_bytes() const {
    return sizeof(*this) + merge_slots_.capacity() * sizeof(MergeSlot) +
           merge_result_.capacity() * sizeof(int32_t) + extra_blob_.capacity() +
           extra_.capacity() * sizeof(extra_[0]) + extra_index_.memory_bytes();
}

}  // namespace headroom
