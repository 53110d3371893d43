// Tokenizer for the Jinja subset, reproducing jinja2's lexer as
// transformers configures it (trim_blocks and lstrip_blocks on,
// keep_trailing_newline off), because whitespace is part of the prompt:
//
//   - "\r\n" and "\r" become "\n"; one trailing newline of the source is dropped.
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`,
//     `-#}` strip all whitespace after it.
//   - trim_blocks: the first newline after `%}` or `#}` is dropped (not after `}}`).
//   - lstrip_blocks: spaces and tabs between the start of a line and `{%` or
//     `{#` are dropped; `{%+` keeps them, `+%}` keeps the newline.
//   - `{% raw %}...{% endraw %}` is text.
//
// Inside tags, `%}` and `}}` only close the tag when brackets are balanced.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace headroom::jinja {

enum class TokenType : uint8_t {
    Text,        // template text between tags
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,  // value holds the unescaped text
    Int,
    Float,
    Operator,  // value holds the spelling ("==", "(", "|")
    End,
};

struct Token {
    TokenType type = TokenType::End;
    std::string value;
    int64_t int_value = 0;
    double float_value = 0;
    uint32_t line = 1;
    uint32_t column = 1;
};

// Throws headroom::Error with line and column for malformed input (an
// unterminated tag, comment or string, an unexpected character, unbalanced
// brackets).
std::vector<Token> tokenize(std::string_view source);

// "'}}'" or "end of template", for messages.
std::string describe(const Token& token);

}  // namespace headroom::jinja
