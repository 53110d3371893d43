#include "tokenizer/pre-tokenizer.h"

#include "tokenizer/unicode.h"

namespace headroom {

namespace {

// Per-codepoint flags for the scanners. A position outside the current piece
// reads as 0, which no class matches: llama.cpp's lookaheads stop there too.
constexpr uint8_t kIn = 0x01;  // inside the piece
constexpr uint8_t kLetter = 0x02;
constexpr uint8_t kNumber = 0x04;
constexpr uint8_t kSpace = 0x08;  // \s
constexpr uint8_t kPunct = 0x10;  // \p{P}
constexpr uint32_t kNone = 0xFFFFFFFF;

uint8_t scanner_flags(uint8_t bits) {
    using unicode::CodepointClass;
    const auto cls = static_cast<CodepointClass>(bits & unicode::kClassMask);
    uint8_t f = kIn;
    if (cls == CodepointClass::Letter) f |= kLetter;
    if (cls == CodepointClass::Number) f |= kNumber;
    if (cls == CodepointClass::Punctuation) f |= kPunct;
    if (bits & unicode::kWhitespaceBit) f |= kSpace;
    return f;
}

struct Text {
    std::span<const uint32_t> cpts;
    std::vector<uint8_t> flags;
};

// One piece [ini, end) of the text being split, and the words cut from it.
class Piece {
  public:
    Piece(const Text& t, size_t ini, size_t end, std::vector<uint32_t>& out)
        : t_(t), end_(end), prev_(ini), out_(out) {}
    uint32_t cpt(size_t pos) const { return pos < end_ ? t_.cpts[pos] : kNone; }
    uint8_t flags(size_t pos) const { return pos < end_ ? t_.flags[pos] : 0; }
    size_t end() const { return end_; }
    // Ends the current word at `end`.
    void cut(size_t end) {
        if (end > prev_) out_.push_back(static_cast<uint32_t>(end - prev_));
        prev_ = end;
    }

  private:
    const Text& t_;
    size_t end_;
    size_t prev_;
    std::vector<uint32_t>& out_;
};

template <class Fn>
void for_each_piece(const Text& t, std::span<const uint32_t> in, std::vector<uint32_t>& out,
                    Fn&& split) {
    size_t start = 0;
    for (const uint32_t len : in) {
        Piece p(t, start, start + len, out);
        split(p, start);
        p.cut(start + len);
        start += len;
    }
}

// What a GPT-2 " ?X+" run is made of: kLetter, kNumber, kOther (neither, and
// not space), or 0 (space, or past the piece).
constexpr uint8_t kOther = 0x80;
uint8_t run_class(uint8_t f) {
    if (f & kLetter) return kLetter;
    if (f & kNumber) return kNumber;
    if ((f & kIn) && !(f & kSpace)) return kOther;
    return 0;
}

uint32_t ascii_lower(uint32_t c) {
    // Only ASCII letters lowercase into the contraction letters (s t m d r e v l).
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

// Length of the contraction ('s 't 're 've 'm 'll 'd) at pos, or 0.
size_t contraction_at(const Piece& p, size_t pos, bool ignore_case) {
    if (p.cpt(pos) != '\'' || pos + 1 >= p.end()) return 0;
    const auto lower = [&](uint32_t c) { return ignore_case ? ascii_lower(c) : c; };
    const uint32_t c1 = lower(p.cpt(pos + 1));
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= p.end()) return 0;
    const uint32_t c2 = lower(p.cpt(pos + 2));
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

void split_gpt2(const Text& t, std::span<const uint32_t> in, std::vector<uint32_t>& out) {
    for_each_piece(t, in, out, [](Piece& p, size_t pos) {
        while (pos < p.end()) {
            if (const size_t n = contraction_at(p, pos, false)) {
                pos += n;
                p.cut(pos);
                continue;
            }
            // " ?X+" where X is letters, digits, or neither and not space.
            const uint32_t c = p.cpt(pos);
            uint8_t f = c == ' ' ? p.flags(pos + 1) : p.flags(pos);
            if (const uint8_t run = run_class(f)) {
                pos += c == ' ';
                while (run_class(f) == run) f = p.flags(++pos);
                p.cut(pos);
                continue;
            }
            size_t n_space = 0;
            while (p.flags(pos + n_space) & kSpace) ++n_space;
            if (n_space > 1 && p.cpt(pos + n_space) != kNone) {
                pos += n_space - 1;  // \s+(?!\S): leave one space for the next word
            } else if (n_space > 0) {
                pos += n_space;
            } else {
                pos += 1;
            }
            p.cut(pos);
        }
    });
}

// Llama3 (max_digits 3) and Qwen2 (max_digits 1).
void split_llama3(const Text& t, std::span<const uint32_t> in, std::vector<uint32_t>& out,
                  size_t max_digits) {
    for_each_piece(t, in, out, [max_digits](Piece& p, size_t pos) {
        while (pos < p.end()) {
            if (const size_t n = contraction_at(p, pos, true)) {
                pos += n;
                p.cut(pos);
                continue;
            }
            const uint32_t c = p.cpt(pos);
            const uint8_t f = p.flags(pos);
            // [^\r\n\p{L}\p{N}]?\p{L}+
            if (c != '\r' && c != '\n' && !(f & kNumber) &&
                ((f & kLetter) || (p.flags(pos + 1) & kLetter))) {
                ++pos;
                while (p.flags(pos) & kLetter) ++pos;
                p.cut(pos);
                continue;
            }
            // \p{N}{1,max_digits}
            if (f & kNumber) {
                size_t from = pos;
                while (p.flags(pos) & kNumber) {
                    if (++pos - from >= max_digits) {
                        p.cut(pos);
                        from = pos;
                    }
                }
                p.cut(pos);
                continue;
            }
            // " ?[^\s\p{L}\p{N}]+[\r\n]*"; a lone trailing space also ends here.
            uint8_t f2 = c == ' ' ? p.flags(pos + 1) : f;
            if (!(f2 & (kSpace | kLetter | kNumber))) {
                pos += c == ' ';
                while ((f2 & kIn) && !(f2 & (kSpace | kLetter | kNumber))) f2 = p.flags(++pos);
                while (p.cpt(pos) == '\r' || p.cpt(pos) == '\n') ++pos;
                p.cut(pos);
                continue;
            }
            size_t n_space = 0;
            size_t last_newline_end = 0;
            while (p.flags(pos + n_space) & kSpace) {
                const uint32_t s = p.cpt(pos + n_space);
                if (s == '\r' || s == '\n') last_newline_end = pos + n_space + 1;
                ++n_space;
            }
            if (last_newline_end > 0) {
                pos = last_newline_end;  // \s*[\r\n]+
            } else if (n_space > 1 && p.cpt(pos + n_space) != kNone) {
                pos += n_space - 1;  // \s+(?!\S)
            } else if (n_space > 0) {
                pos += n_space;
            } else {
                pos += 1;
            }
            p.cut(pos);
        }
    });
}

// Each codepoint matching `pred` becomes a word of its own (regex "X").
template <class Pred>
void split_each(const Text& t, std::span<const uint32_t> in, std::vector<uint32_t>& out,
                Pred pred) {
    for_each_piece(t, in, out, [&](Piece& p, size_t pos) {
        for (; pos < p.end(); ++pos) {
            if (pred(p.cpt(pos), p.flags(pos))) {
                p.cut(pos);
                p.cut(pos + 1);
            }
        }
    });
}

// Each maximal run matching `pred` becomes a word (regex "X+").
template <class Pred>
void split_runs(const Text& t, std::span<const uint32_t> in, std::vector<uint32_t>& out,
                Pred pred) {
    for_each_piece(t, in, out, [&](Piece& p, size_t pos) {
        while (pos < p.end()) {
            if (!pred(p.cpt(pos), p.flags(pos))) {
                ++pos;
                continue;
            }
            p.cut(pos);
            while (pos < p.end() && pred(p.cpt(pos), p.flags(pos))) ++pos;
            p.cut(pos);
        }
    });
}

// [0-9][0-9][0-9], matched left to right like std::regex_iterator: digits
// left over before a non-match stay with the gap that follows them.
void split_digit_triples(const Text& t, std::span<const uint32_t> in, std::vector<uint32_t>& out) {
    for_each_piece(t, in, out, [](Piece& p, size_t pos) {
        const auto digit = [&](size_t i) { return p.cpt(i) >= '0' && p.cpt(i) <= '9'; };
        while (pos + 3 <= p.end()) {
            if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
                p.cut(pos);
                pos += 3;
                p.cut(pos);
            } else {
                ++pos;
            }
        }
    });
}

bool is_number(uint32_t c, uint8_t f) {
    return c < 128 ? (c >= '0' && c <= '9') : (f & kNumber) != 0;
}

// [\p{P}\$\+<=>\^~\|] as llama.cpp evaluates it: every ASCII punctuation or
// symbol character except the backtick, and non-ASCII \p{P}.
bool is_default_punct(uint32_t c, uint8_t f) {
    if (c >= 128) return (f & kPunct) != 0;
    return c > 0x20 && c < 0x7F && c != '`' && !(c >= '0' && c <= '9') && !(c >= 'A' && c <= 'Z') &&
           !(c >= 'a' && c <= 'z');
}

}  // namespace

std::string_view name(PreTokenizer kind) {
    switch (kind) {
        case PreTokenizer::Default:
            return "default";
        case PreTokenizer::Gpt2:
            return "gpt2";
        case PreTokenizer::Smollm:
            return "smollm";
        case PreTokenizer::Llama3:
            return "llama3";
        case PreTokenizer::Qwen2:
            return "qwen2";
    }
    return "?";
}

void split_words(PreTokenizer kind, std::span<const uint32_t> cpts, std::span<const uint8_t> bits,
                 std::vector<uint32_t>& lengths) {
    if (cpts.empty()) return;
    Text t{cpts, {}};
    t.flags.resize(cpts.size());
    for (size_t i = 0; i < cpts.size(); ++i) t.flags[i] = scanner_flags(bits[i]);

    std::vector<uint32_t> a{static_cast<uint32_t>(cpts.size())}, b;
    // Runs one stage: the pieces in `a` are split into `b`, which becomes `a`.
    const auto stage = [&](auto&& split) {
        b.clear();
        split(std::span<const uint32_t>(a), b);
        a.swap(b);
    };
    switch (kind) {
        case PreTokenizer::Gpt2:
            stage([&](auto in, auto& out) { split_gpt2(t, in, out); });
            break;
        case PreTokenizer::Smollm:
            stage([&](auto in, auto& out) { split_each(t, in, out, is_number); });
            stage([&](auto in, auto& out) { split_gpt2(t, in, out); });
            break;
        case PreTokenizer::Llama3:
            stage([&](auto in, auto& out) { split_llama3(t, in, out, 3); });
            break;
        case PreTokenizer::Qwen2:
            stage([&](auto in, auto& out) { split_llama3(t, in, out, 1); });
            break;
        case PreTokenizer::Default:
            stage([&](auto in, auto& out) { split_runs(t, in, out, is_default_punct); });
            stage([&](auto in, auto& out) { split_gpt2(t, in, out); });
            stage([&](auto in, auto& out) { split_runs(t, in, out, is_number); });
            stage([&](auto in, auto& out) { split_digit_triples(t, in, out); });
            break;
    }
    lengths.insert(lengths.end(), a.begin(), a.end());
}

}  // namespace headroom
