#include "tokenizer/jinja/lexer.h"

#include <array>
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja/strings.h"

namespace headroom::jinja {

namespace {

// Byte length of the Python whitespace code point (regex \s) at `pos`, or 0.
size_t space_len(std::string_view s, size_t pos) {
    const auto b = static_cast<unsigned char>(s[pos]);
    if (b < 0x80) return is_py_space(b) ? 1 : 0;
    size_t n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    if (pos + n > s.size()) return 0;
    const std::u32string cp = decode_utf8(s.substr(pos, n));
    return cp.size() == 1 && is_py_space(cp[0]) ? n : 0;
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) {
    return is_name_start(c) || is_digit(c);
}

// Whole text is Python whitespace (and not empty): jinja2's `\s+` fullmatch.
bool all_space(std::string_view s) {
    if (s.empty()) return false;
    for (char32_t cp : decode_utf8(s))
        if (!is_py_space(cp)) return false;
    return true;
}

std::string rstrip_space(std::string_view s) {
    return py_strip(s, std::nullopt, StripSide::Right);
}

// jinja2 passes newline-normalized string literals through Python's
// `unicode-escape` codec.
std::string unescape(std::string_view body, uint32_t line, uint32_t column) {
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
        if (body[i] != '\\' || i + 1 == body.size()) {
            out.push_back(body[i]);
            continue;
        }
        const char c = body[++i];
        auto hex = [&](int n) -> char32_t {
            char32_t v = 0;
            for (int k = 1; k <= n; ++k) {
                const char h = i + k < body.size() ? body[i + k] : '\0';
                int d = -1;
                if (h >= '0' && h <= '9') d = h - '0';
                if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
                if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
                if (d < 0)
                    fail(
                        "jinja syntax error at line {}, column {}: truncated \\{} escape in string",
                        line, column, c);
                v = v * 16 + d;
            }
            i += n;
            return v;
        };
        switch (c) {
            case '\n':
                break;
            case '\\':
            case '\'':
            case '"':
                out.push_back(c);
                break;
            case 'a':
                out.push_back('\a');
                break;
            case 'b':
                out.push_back('\b');
                break;
            case 'f':
                out.push_back('\f');
                break;
            case 'n':
                out.push_back('\n');
                break;
            case 'r':
                out.push_back('\r');
                break;
            case 't':
                out.push_back('\t');
                break;
            case 'v':
                out.push_back('\v');
                break;
            case 'x':
                append_utf8(out, hex(2));
                break;
            case 'u':
                append_utf8(out, hex(4));
                break;
            case 'U': {
                const char32_t cp = hex(8);
                if (cp > 0x10FFFF)
                    fail("jinja syntax error at line {}, column {}: illegal Unicode character",
                         line, column);
                append_utf8(out, cp);
                break;
            }
            default:
                if (c >= '0' && c <= '7') {
                    char32_t v = c - '0';
                    for (int k = 0;
                         k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
                         ++k)
                        v = v * 8 + (body[++i] - '0');
                    append_utf8(out, v);
                } else {
                    out.push_back('\\');
                    out.push_back(c);
                }
        }
    }
    return out;
}

class Lexer {
  public:
    explicit Lexer(std::string_view source) {
        src_.reserve(source.size());
        for (size_t i = 0; i < source.size(); ++i) {
            if (source[i] == '\r') {
                src_.push_back('\n');
                if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
            } else {
                src_.push_back(source[i]);
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    }

    std::vector<Token> run() {
        while (pos_ < src_.size()) {
            const size_t start = find_tag(pos_);
            if (start == std::string::npos) {
                emit_text(src_.substr(pos_));
                break;
            }
            std::string text = src_.substr(pos_, start - pos_);
            const char kind = src_[start + 1];
            const char sign =
                start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')
                    ? src_[start + 2]
                    : '\0';
            if (sign == '-') {
                text = rstrip_space(text);
            } else if (sign != '+' && kind != '{') {
                const size_t nl = text.rfind('\n');
                const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
                if ((l_pos > 0 || line_starting_) &&
                    all_space(std::string_view(text).substr(l_pos)))
                    text.resize(l_pos);
            }
            emit_text(text);
            size_t raw_end = 0;
            if (kind == '%' && is_raw_begin(start, raw_end)) {
                lex_raw(start, raw_end);
                continue;
            }
            pos_ = start + 2 + (sign ? 1 : 0);
            line_starting_ = false;
            if (kind == '#') {
                lex_comment(start);
            } else {
                push(kind == '{' ? TokenType::VarBegin : TokenType::BlockBegin,
                     src_.substr(start, 2), start);
                lex_tag(kind == '{', start);
            }
        }
        push(TokenType::End, "", src_.size());
        return std::move(out_);
    }

  private:
    size_t find_tag(size_t from) const {
        for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1))
            if (p + 1 < src_.size() &&
                (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#'))
                return p;
        return std::string::npos;
    }

    // Line and column of a byte offset; offsets are queried in increasing order.
    void locate(size_t offset, uint32_t& line, uint32_t& column) {
        if (offset < scan_) scan_ = 0, line_ = 1, line_start_ = 0;
        while (scan_ < offset && scan_ < src_.size()) {
            if (src_[scan_] == '\n') ++line_, line_start_ = scan_ + 1;
            ++scan_;
        }
        line = line_;
        column = static_cast<uint32_t>(offset - line_start_ + 1);
    }

    [[noreturn]] void error(size_t offset, std::string_view message) {
        uint32_t line = 0, column = 0;
        locate(offset, line, column);
        fail("jinja syntax error at line {}, column {}: {}", line, column, message);
    }

    Token& push(TokenType type, std::string value, size_t offset) {
        Token t;
        t.type = type;
        t.value = std::move(value);
        locate(offset, t.line, t.column);
        out_.push_back(std::move(t));
        return out_.back();
    }

    void emit_text(std::string text) {
        if (!text.empty()) push(TokenType::Text, std::move(text), pos_);
    }

    // {%(-|+)? raw (-%}\s*|%})
    bool is_raw_begin(size_t start, size_t& end) const {
        size_t p = start + 2;
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
        while (p < src_.size() && space_len(src_, p)) p += space_len(src_, p);
        if (src_.compare(p, 3, "raw") != 0) return false;
        p += 3;
        if (p < src_.size() && is_name_char(src_[p])) return false;
        while (p < src_.size() && space_len(src_, p)) p += space_len(src_, p);
        if (src_.compare(p, 3, "-%}") == 0) {
            p += 3;
            while (p < src_.size() && space_len(src_, p)) p += space_len(src_, p);
        } else if (src_.compare(p, 2, "%}") == 0) {
            p += 2;
        } else {
            return false;
        }
        end = p;
        return true;
    }

    void lex_raw(size_t start, size_t body) {
        for (size_t p = src_.find("{%", body); p != std::string::npos; p = src_.find("{%", p + 1)) {
            size_t q = p + 2;
            const char sign =
                q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : '\0';
            if (sign) ++q;
            while (q < src_.size() && space_len(src_, q)) q += space_len(src_, q);
            if (src_.compare(q, 6, "endraw") != 0) continue;
            q += 6;
            while (q < src_.size() && space_len(src_, q)) q += space_len(src_, q);
            size_t end = 0;
            if (!match_block_end(q, end)) continue;
            std::string text = src_.substr(body, p - body);
            if (sign == '-') {
                text = rstrip_space(text);
            } else if (sign != '+') {
                const size_t nl = text.rfind('\n');
                const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
                const bool line_starting = src_[body - 1] == '\n';
                if ((l_pos > 0 || line_starting) && all_space(std::string_view(text).substr(l_pos)))
                    text.resize(l_pos);
            }
            pos_ = body;
            emit_text(text);
            line_starting_ = src_[end - 1] == '\n';
            pos_ = end;
            return;
        }
        error(start, "missing end of raw directive");
    }

    // `+%}`, `-%}` and following whitespace, or `%}` and one newline.
    bool match_block_end(size_t p, size_t& end) const {
        if (src_.compare(p, 3, "+%}") == 0) {
            end = p + 3;
        } else if (src_.compare(p, 3, "-%}") == 0) {
            end = p + 3;
            while (end < src_.size() && space_len(src_, end)) end += space_len(src_, end);
        } else if (src_.compare(p, 2, "%}") == 0) {
            end = p + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;
        } else {
            return false;
        }
        return true;
    }

    void lex_comment(size_t start) {
        for (size_t q = src_.find("#}", pos_); q != std::string::npos; q = src_.find("#}", q + 1)) {
            size_t end = q + 2;
            if (q > pos_ && src_[q - 1] == '-') {
                while (end < src_.size() && space_len(src_, end)) end += space_len(src_, end);
            } else if (!(q > pos_ && src_[q - 1] == '+')) {
                if (end < src_.size() && src_[end] == '\n') ++end;
            }
            line_starting_ = src_[end - 1] == '\n';
            pos_ = end;
            return;
        }
        error(start, "missing end of comment tag");
    }

    void lex_tag(bool variable, size_t start) {
        std::vector<char> balance;
        while (true) {
            if (pos_ >= src_.size())
                error(start, variable ? "unexpected end of template, expected '}}'"
                                      : "unexpected end of template, expected '%}'");
            if (balance.empty()) {
                size_t end = 0;
                if (variable) {
                    if (src_.compare(pos_, 3, "-}}") == 0) {
                        end = pos_ + 3;
                        while (end < src_.size() && space_len(src_, end))
                            end += space_len(src_, end);
                    } else if (src_.compare(pos_, 2, "}}") == 0) {
                        end = pos_ + 2;
                    }
                } else {
                    match_block_end(pos_, end);
                }
                if (end) {
                    push(variable ? TokenType::VarEnd : TokenType::BlockEnd, "", pos_);
                    line_starting_ = src_[end - 1] == '\n';
                    pos_ = end;
                    return;
                }
            }
            const char c = src_[pos_];
            if (const size_t n = space_len(src_, pos_)) {
                pos_ += n;
            } else if (is_digit(c)) {
                lex_number();
            } else if (is_name_start(c)) {
                const size_t b = pos_;
                while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
                push(TokenType::Name, src_.substr(b, pos_ - b), b);
            } else if (c == '\'' || c == '"') {
                lex_string();
            } else {
                lex_operator(balance);
            }
        }
    }

    void lex_number() {
        const size_t b = pos_;
        auto digits = [&] {
            while (pos_ < src_.size() &&
                   (is_digit(src_[pos_]) ||
                    (src_[pos_] == '_' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1]))))
                ++pos_;
        };
        const bool after_dot = b > 0 && src_[b - 1] == '.';
        // Prefixed integers: 0x.., 0o.., 0b..
        if (src_[b] == '0' && b + 1 < src_.size() &&
            (src_[b + 1] == 'x' || src_[b + 1] == 'X' || src_[b + 1] == 'o' || src_[b + 1] == 'O' ||
             src_[b + 1] == 'b' || src_[b + 1] == 'B')) {
            pos_ += 2;
            while (pos_ < src_.size() && (is_name_char(src_[pos_]))) ++pos_;
            const auto v = parse_py_int(std::string_view(src_).substr(b, pos_ - b), 0);
            if (!v) error(b, "invalid integer literal");
            push(TokenType::Int, src_.substr(b, pos_ - b), b).int_value = *v;
            return;
        }
        digits();
        bool is_float = false;
        if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
            ++pos_;
            digits();
            is_float = true;
        }
        if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
            size_t p = pos_ + 1;
            if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
            if (p < src_.size() && is_digit(src_[p])) {
                pos_ = p;
                digits();
                is_float = true;
            }
        }
        const std::string text = src_.substr(b, pos_ - b);
        if (is_float) {
            const auto v = parse_py_float(text);
            if (!v) error(b, "invalid float literal");
            push(TokenType::Float, text, b).float_value = *v;
        } else {
            const auto v = parse_py_int(text, 10);
            if (!v) error(b, "integer literal out of range");
            push(TokenType::Int, text, b).int_value = *v;
        }
    }

    void lex_string() {
        const size_t b = pos_;
        const char quote = src_[pos_++];
        while (pos_ < src_.size() && src_[pos_] != quote) pos_ += src_[pos_] == '\\' ? 2 : 1;
        if (pos_ >= src_.size()) error(b, "unterminated string literal");
        ++pos_;
        uint32_t line = 0, column = 0;
        locate(b, line, column);
        push(TokenType::String,
             unescape(std::string_view(src_).substr(b + 1, pos_ - b - 2), line, column), b);
    }

    void lex_operator(std::vector<char>& balance) {
        static constexpr std::array<std::string_view, 6> kTwo = {
            "//", "**", "==", "!=", ">=", "<="};
        for (auto op : kTwo) {
            if (src_.compare(pos_, 2, op) == 0) {
                push(TokenType::Operator, std::string(op), pos_);
                pos_ += 2;
                return;
            }
        }
        const char c = src_[pos_];
        if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
            error(pos_, fmt::format("unexpected character '{}'", c));
        if (c == '(' || c == '[' || c == '{')
            balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        if (c == ')' || c == ']' || c == '}') {
            if (balance.empty()) error(pos_, fmt::format("unexpected '{}'", c));
            if (balance.back() != c)
                error(pos_, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
            balance.pop_back();
        }
        push(TokenType::Operator, std::string(1, c), pos_);
        ++pos_;
    }

    std::string src_;
    size_t pos_ = 0;
    bool line_starting_ = true;
    std::vector<Token> out_;
    size_t scan_ = 0, line_start_ = 0;
    uint32_t line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
    return Lexer(source).run();
}

std::string describe(const Token& token) {
    switch (token.type) {
        case TokenType::Text:
            return "template text";
        case TokenType::VarBegin:
            return "'{{'";
        case TokenType::VarEnd:
            return "'}}'";
        case TokenType::BlockBegin:
            return "'{%'";
        case TokenType::BlockEnd:
            return "'%}'";
        case TokenType::String:
            return "string literal";
        case TokenType::Int:
        case TokenType::Float:
            return "number " + token.value;
        case TokenType::End:
            return "end of template";
        default:
            return "'" + token.value + "'";
    }
}

}  // namespace headroom::jinja
