// Parser for the Jinja subset: jinja2's grammar and operator precedence
// (filters bind tighter than unary minus; `**` is left-associative; a test
// takes one bare argument as in `x is divisibleby 3`). Statements: if/elif/
// else, for (with loop filter and else), set (plain, namespace attribute, and
// block form), macro, call blocks, filter blocks, with, break/continue, and
// transformers' {% generation %}. include/extends/import are not supported.
#pragma once

#include <memory>
#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace headroom::jinja {

// Limits on how deeply expressions and blocks may nest, so that parsing (and
// later evaluation) of a hostile template cannot exhaust the stack.
inline constexpr int kMaxExprNesting = 128;
inline constexpr int kMaxBlockNesting = 64;

// Throws headroom::Error "jinja syntax error at line L, column C: ..." for
// anything outside the supported grammar.
std::shared_ptr<const Template> parse(std::string_view source);

}  // namespace headroom::jinja
