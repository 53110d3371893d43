// Syntax tree of a parsed Jinja template. Expressions and statements are
// plain structs tagged by kind; the interpreter switches on the kind. Every
// node keeps its source line for runtime error messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace headroom::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
    Literal,   // literal
    Name,      // name
    List,      // items
    Tuple,     // items
    Dict,      // items: key0, value0, key1, value1, ...
    Getattr,   // a.name
    Getitem,   // a[b]
    Slice,     // a[b:c:d], each of b, c, d may be null
    Unary,     // op a  (Neg, Pos, Not)
    Binary,    // a op b (arithmetic)
    And,       // a and b
    Or,        // a or b
    Concat,    // items joined with ~
    Compare,   // items[0] ops[0] items[1] ops[1] items[2] ...
    CondExpr,  // a if b else c (c may be null)
    Call,      // a(args)
    Filter,    // a | name(args); a is null inside {% filter %} blocks
    Test,      // a is [not] name(args)
};

enum class Op : uint8_t {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Pow,
    Neg,
    Pos,
    Not,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
};

struct CallArgsExpr {
    std::vector<ExprPtr> positional;
    std::vector<std::pair<std::string, ExprPtr>> named;
    ExprPtr star;         // *args
    ExprPtr double_star;  // **kwargs
};

struct Expr {
    ExprKind kind = ExprKind::Literal;
    uint32_t line = 0;
    Op op = Op::Add;
    bool negated = false;  // Test: `is not`
    std::string name;      // Name, Getattr attribute, Filter or Test name
    Value literal;
    ExprPtr a, b, c, d;
    std::vector<ExprPtr> items;
    std::vector<Op> ops;  // Compare
    CallArgsExpr args;    // Call, Filter, Test
};

enum class StmtKind : uint8_t {
    Text,         // text
    Output,       // {{ expr }}
    If,           // branches
    For,          // targets in expr [if cond] body [else else_body]
    Set,          // targets = expr, or ns.attr = expr (attr non-empty)
    SetBlock,     // {% set target | filter %}body{% endset %}
    Macro,        // name(params) body
    CallBlock,    // {% call(params) expr %}body{% endcall %}
    FilterBlock,  // {% filter expr %}body{% endfilter %}; expr's innermost subject is null
    With,         // {% with targets = values %}body{% endwith %}
    Break,
    Continue,
    Generation,  // {% generation %}body{% endgeneration %}: transformers' assistant-mask marker
};

struct MacroParam {
    std::string name;
    ExprPtr default_value;  // null when required
};

struct Stmt {
    StmtKind kind = StmtKind::Text;
    uint32_t line = 0;
    std::string text;
    ExprPtr expr;
    ExprPtr cond;                                    // For: loop filter
    std::vector<std::string> targets;                // For, Set, SetBlock, With
    std::string attr;                                // Set: namespace attribute
    std::vector<std::pair<ExprPtr, Body>> branches;  // If: condition and body per if/elif
    Body body;
    Body else_body;
    std::string name;                // Macro
    std::vector<MacroParam> params;  // Macro, CallBlock
    std::vector<ExprPtr> values;     // With
    bool uses_loop = false;          // For: the body mentions `loop`
};

struct Template {
    Body body;
};

}  // namespace headroom::jinja
