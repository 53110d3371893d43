#include "tokenizer/jinja/parser.h"

#include <initializer_list>

#include "core/error.h"
#include "tokenizer/jinja/lexer.h"

namespace headroom::jinja {

namespace {

class Parser {
  public:
    explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

    std::shared_ptr<const Template> run() {
        auto tmpl = std::make_shared<Template>();
        tmpl->body = parse_body({});
        return tmpl;
    }

  private:
    // Guards recursion depth in the parser.
    struct Nesting {
        Nesting(Parser& p, int& depth, int limit, const char* what) : depth_(depth) {
            if (++depth_ > limit) {
                --depth_;
                p.error(p.cur(), fmt::format("{} nested more than {} deep", what, limit));
            }
        }
        ~Nesting() { --depth_; }
        int& depth_;
    };

    const Token& cur() const { return tokens_[pos_]; }
    const Token& peek(size_t k = 1) const {
        return tokens_[std::min(pos_ + k, tokens_.size() - 1)];
    }
    const Token& next() {
        const Token& t = tokens_[pos_];
        if (pos_ + 1 < tokens_.size()) ++pos_;
        return t;
    }

    [[noreturn]] void error(const Token& at, const std::string& message) const {
        fail("jinja syntax error at line {}, column {}: {}", at.line, at.column, message);
    }

    bool is_op(std::string_view op, const Token& t) const {
        return t.type == TokenType::Operator && t.value == op;
    }
    bool is_op(std::string_view op) const { return is_op(op, cur()); }
    bool is_name(std::string_view name, const Token& t) const {
        return t.type == TokenType::Name && t.value == name;
    }
    bool is_name(std::string_view name) const { return is_name(name, cur()); }

    bool skip_op(std::string_view op) {
        if (!is_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(std::string_view name) {
        if (!is_name(name)) return false;
        next();
        return true;
    }
    void expect_op(std::string_view op) {
        if (!skip_op(op)) error(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
    }
    std::string expect_name() {
        if (cur().type != TokenType::Name)
            error(cur(), fmt::format("expected a name, got {}", describe(cur())));
        return next().value;
    }
    void expect_block_end() {
        if (cur().type != TokenType::BlockEnd)
            error(cur(), fmt::format("expected end of statement '%}}', got {}", describe(cur())));
        next();
    }

    ExprPtr node(ExprKind kind, const Token& at) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = at.line;
        return e;
    }
    StmtPtr stmt(StmtKind kind, const Token& at) {
        auto s = std::make_unique<Stmt>();
        s->kind = kind;
        s->line = at.line;
        return s;
    }

    // ---- statements ----

    // Parses until `{% <one of end_names>` (left unconsumed) or the end.
    Body parse_body(std::initializer_list<std::string_view> end_names) {
        Body body;
        while (true) {
            const Token& t = cur();
            switch (t.type) {
                case TokenType::Text: {
                    auto s = stmt(StmtKind::Text, t);
                    s->text = next().value;
                    body.push_back(std::move(s));
                    break;
                }
                case TokenType::VarBegin: {
                    auto s = stmt(StmtKind::Output, next());
                    s->expr = parse_tuple(true, {}, false);
                    if (cur().type != TokenType::VarEnd)
                        error(cur(), fmt::format("expected end of print statement '}}}}', got {}",
                                                 describe(cur())));
                    next();
                    body.push_back(std::move(s));
                    break;
                }
                case TokenType::BlockBegin: {
                    const Token& name = peek();
                    for (auto end : end_names)
                        if (is_name(end, name)) return body;
                    next();
                    body.push_back(parse_statement(end_names));
                    break;
                }
                case TokenType::End: {
                    if (end_names.size() != 0) {
                        std::string names;
                        for (auto n : end_names)
                            names += (names.empty() ? "'" : " or '") + std::string(n) + "'";
                        error(t, fmt::format("unexpected end of template, expected {}", names));
                    }
                    return body;
                }
                default:
                    error(t, fmt::format("unexpected {}", describe(t)));
            }
        }
    }

    // Consumes `{% name %}`.
    void expect_end_tag(std::string_view name) {
        if (cur().type != TokenType::BlockBegin || !is_name(name, peek()))
            error(cur(), fmt::format("expected '{}'", name));
        next();
        next();
        expect_block_end();
    }

    StmtPtr parse_statement(std::initializer_list<std::string_view> enclosing) {
        Nesting guard(*this, block_depth_, kMaxBlockNesting, "blocks");
        const Token& t = cur();
        if (t.type != TokenType::Name)
            error(t, fmt::format("expected a tag name, got {}", describe(t)));
        const std::string tag = t.value;
        if (tag == "for") return parse_for();
        if (tag == "if") return parse_if();
        if (tag == "set") return parse_set();
        if (tag == "macro") return parse_macro();
        if (tag == "call") return parse_call_block();
        if (tag == "filter") return parse_filter_block();
        if (tag == "with") return parse_with();
        if (tag == "generation") {
            auto s = stmt(StmtKind::Generation, next());
            expect_block_end();
            s->body = parse_body({"endgeneration"});
            expect_end_tag("endgeneration");
            return s;
        }
        if (tag == "break" || tag == "continue") {
            auto s = stmt(tag == "break" ? StmtKind::Break : StmtKind::Continue, next());
            expect_block_end();
            return s;
        }
        std::string hint;
        for (auto e : enclosing)
            hint += (hint.empty() ? " (expected '" : " or '") + std::string(e) + "'";
        if (!hint.empty()) hint += ")";
        error(t, fmt::format("unknown or unexpected tag '{}'{}", tag, hint));
    }

    std::vector<std::string> parse_targets(std::string_view end_name) {
        std::vector<std::string> names;
        const bool paren = skip_op("(");
        while (true) {
            names.push_back(expect_name());
            if (!skip_op(",")) break;
            if (is_name(end_name) || is_op(")")) break;
        }
        if (paren) expect_op(")");
        return names;
    }

    StmtPtr parse_for() {
        auto s = stmt(StmtKind::For, next());
        s->targets = parse_targets("in");
        if (!skip_name("in")) error(cur(), fmt::format("expected 'in', got {}", describe(cur())));
        s->expr = parse_tuple(false, {"recursive"}, false);
        if (skip_name("if")) s->cond = parse_expression(true);
        if (is_name("recursive")) error(cur(), "recursive loops are not supported");
        expect_block_end();
        const size_t n_loop_names = n_loop_names_;
        s->body = parse_body({"endfor", "else"});
        s->uses_loop = n_loop_names_ != n_loop_names;
        if (cur().type == TokenType::BlockBegin && is_name("else", peek())) {
            next();
            next();
            expect_block_end();
            s->else_body = parse_body({"endfor"});
        }
        expect_end_tag("endfor");
        return s;
    }

    StmtPtr parse_if() {
        auto s = stmt(StmtKind::If, next());
        while (true) {
            ExprPtr cond = parse_tuple(false, {}, false);
            expect_block_end();
            Body body = parse_body({"elif", "else", "endif"});
            s->branches.emplace_back(std::move(cond), std::move(body));
            next();  // {%
            const std::string tag = next().value;
            if (tag == "elif") continue;
            if (tag == "else") {
                expect_block_end();
                s->else_body = parse_body({"endif"});
                expect_end_tag("endif");
                return s;
            }
            expect_block_end();
            return s;
        }
    }

    StmtPtr parse_set() {
        const Token& at = next();
        std::vector<std::string> targets;
        std::string attr;
        if (cur().type == TokenType::Name && is_op(".", peek())) {
            targets.push_back(next().value);
            next();
            attr = expect_name();
        } else {
            targets = parse_targets("=");
        }
        if (skip_op("=")) {
            auto s = stmt(StmtKind::Set, at);
            s->targets = std::move(targets);
            s->attr = std::move(attr);
            s->expr = parse_tuple(true, {}, false);
            expect_block_end();
            return s;
        }
        if (!attr.empty() || targets.size() != 1)
            error(cur(), "a block set takes a single variable name");
        auto s = stmt(StmtKind::SetBlock, at);
        s->targets = std::move(targets);
        if (is_op("|")) {
            next();
            s->expr = parse_filter(nullptr, true);
        }
        expect_block_end();
        s->body = parse_body({"endset"});
        expect_end_tag("endset");
        return s;
    }

    std::vector<MacroParam> parse_params() {
        std::vector<MacroParam> params;
        expect_op("(");
        while (!is_op(")")) {
            if (!params.empty()) expect_op(",");
            if (is_op(")")) break;
            MacroParam p;
            p.name = expect_name();
            if (skip_op("=")) p.default_value = parse_expression(true);
            params.push_back(std::move(p));
        }
        expect_op(")");
        return params;
    }

    StmtPtr parse_macro() {
        auto s = stmt(StmtKind::Macro, next());
        s->name = expect_name();
        s->params = parse_params();
        expect_block_end();
        s->body = parse_body({"endmacro"});
        expect_end_tag("endmacro");
        return s;
    }

    StmtPtr parse_call_block() {
        auto s = stmt(StmtKind::CallBlock, next());
        if (is_op("(")) s->params = parse_params();
        s->expr = parse_expression(true);
        if (s->expr->kind != ExprKind::Call) error(cur(), "expected a macro call after 'call'");
        expect_block_end();
        s->body = parse_body({"endcall"});
        expect_end_tag("endcall");
        return s;
    }

    StmtPtr parse_filter_block() {
        auto s = stmt(StmtKind::FilterBlock, next());
        s->expr = parse_filter(nullptr, true);
        expect_block_end();
        s->body = parse_body({"endfilter"});
        expect_end_tag("endfilter");
        return s;
    }

    StmtPtr parse_with() {
        auto s = stmt(StmtKind::With, next());
        while (cur().type != TokenType::BlockEnd) {
            if (!s->targets.empty()) expect_op(",");
            s->targets.push_back(expect_name());
            expect_op("=");
            s->values.push_back(parse_expression(true));
        }
        expect_block_end();
        s->body = parse_body({"endwith"});
        expect_end_tag("endwith");
        return s;
    }

    // ---- expressions ----

    bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
        const Token& t = cur();
        if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || is_op(")", t))
            return true;
        for (auto name : extra_end)
            if (is_name(name, t)) return true;
        return false;
    }

    ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                        bool explicit_parentheses) {
        const Token& at = cur();
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (is_tuple_end(extra_end)) break;
            items.push_back(parse_expression(with_condexpr));
            if (is_op(","))
                is_tuple = true;
            else
                break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parentheses)
                error(cur(), fmt::format("expected an expression, got {}", describe(cur())));
        }
        auto e = node(ExprKind::Tuple, at);
        e->items = std::move(items);
        return e;
    }

    ExprPtr parse_expression(bool with_condexpr) {
        Nesting guard(*this, expr_depth_, kMaxExprNesting, "expressions");
        if (!with_condexpr) return parse_or();
        ExprPtr expr = parse_or();
        while (is_name("if")) {
            auto e = node(ExprKind::CondExpr, next());
            e->b = parse_or();
            if (skip_name("else")) e->c = parse_expression(true);
            e->a = std::move(expr);
            expr = std::move(e);
        }
        return expr;
    }

    ExprPtr binary(ExprKind kind, Op op, const Token& at, ExprPtr lhs, ExprPtr rhs) {
        auto e = node(kind, at);
        e->op = op;
        e->a = std::move(lhs);
        e->b = std::move(rhs);
        return e;
    }

    ExprPtr parse_or() {
        ExprPtr lhs = parse_and();
        while (is_name("or")) {
            const Token& at = next();
            lhs = binary(ExprKind::Or, Op::Add, at, std::move(lhs), parse_and());
        }
        return lhs;
    }

    ExprPtr parse_and() {
        ExprPtr lhs = parse_not();
        while (is_name("and")) {
            const Token& at = next();
            lhs = binary(ExprKind::And, Op::Add, at, std::move(lhs), parse_not());
        }
        return lhs;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            Nesting guard(*this, expr_depth_, kMaxExprNesting, "expressions");
            auto e = node(ExprKind::Unary, next());
            e->op = Op::Not;
            e->a = parse_not();
            return e;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const Token& at = cur();
        ExprPtr first = parse_math1();
        std::vector<ExprPtr> operands;
        std::vector<Op> ops;
        while (true) {
            Op op;
            if (is_op("=="))
                op = Op::Eq;
            else if (is_op("!="))
                op = Op::Ne;
            else if (is_op("<"))
                op = Op::Lt;
            else if (is_op("<="))
                op = Op::Le;
            else if (is_op(">"))
                op = Op::Gt;
            else if (is_op(">="))
                op = Op::Ge;
            else if (is_name("in"))
                op = Op::In;
            else if (is_name("not") && is_name("in", peek())) {
                next();
                op = Op::NotIn;
            } else {
                break;
            }
            next();
            ops.push_back(op);
            operands.push_back(parse_math1());
        }
        if (ops.empty()) return first;
        auto e = node(ExprKind::Compare, at);
        e->items.push_back(std::move(first));
        for (auto& o : operands) e->items.push_back(std::move(o));
        e->ops = std::move(ops);
        return e;
    }

    ExprPtr parse_math1() {
        ExprPtr lhs = parse_concat();
        while (is_op("+") || is_op("-")) {
            const Token& at = next();
            lhs = binary(ExprKind::Binary, at.value == "+" ? Op::Add : Op::Sub, at, std::move(lhs),
                         parse_concat());
        }
        return lhs;
    }

    ExprPtr parse_concat() {
        const Token& at = cur();
        ExprPtr first = parse_math2();
        if (!is_op("~")) return first;
        auto e = node(ExprKind::Concat, at);
        e->items.push_back(std::move(first));
        while (skip_op("~")) e->items.push_back(parse_math2());
        return e;
    }

    ExprPtr parse_math2() {
        ExprPtr lhs = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token& at = next();
            const Op op = at.value == "*"    ? Op::Mul
                          : at.value == "/"  ? Op::Div
                          : at.value == "//" ? Op::FloorDiv
                                             : Op::Mod;
            lhs = binary(ExprKind::Binary, op, at, std::move(lhs), parse_pow());
        }
        return lhs;
    }

    ExprPtr parse_pow() {
        ExprPtr lhs = parse_unary(true);
        while (is_op("**")) {
            const Token& at = next();
            lhs = binary(ExprKind::Binary, Op::Pow, at, std::move(lhs), parse_unary(true));
        }
        return lhs;
    }

    ExprPtr parse_unary(bool with_filter) {
        Nesting guard(*this, expr_depth_, kMaxExprNesting, "expressions");
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            const Token& at = next();
            e = node(ExprKind::Unary, at);
            e->op = at.value == "-" ? Op::Neg : Op::Pos;
            e->a = parse_unary(false);
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    ExprPtr literal(const Token& at, Value v) {
        auto e = node(ExprKind::Literal, at);
        e->literal = std::move(v);
        return e;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        switch (t.type) {
            case TokenType::Name: {
                next();
                if (t.value == "true" || t.value == "True") return literal(t, Value::boolean(true));
                if (t.value == "false" || t.value == "False")
                    return literal(t, Value::boolean(false));
                if (t.value == "none" || t.value == "None") return literal(t, Value::none());
                if (t.value == "loop") ++n_loop_names_;
                auto e = node(ExprKind::Name, t);
                e->name = t.value;
                return e;
            }
            case TokenType::String: {
                std::string s = next().value;
                while (cur().type == TokenType::String) s += next().value;
                return literal(t, Value::string(std::move(s)));
            }
            case TokenType::Int:
                next();
                return literal(t, Value::integer(t.int_value));
            case TokenType::Float:
                next();
                return literal(t, Value::floating(t.float_value));
            default:
                break;
        }
        if (skip_op("(")) {
            ExprPtr e = parse_tuple(true, {}, true);
            expect_op(")");
            return e;
        }
        if (is_op("[")) {
            auto e = node(ExprKind::List, next());
            while (!is_op("]")) {
                if (!e->items.empty()) expect_op(",");
                if (is_op("]")) break;
                e->items.push_back(parse_expression(true));
            }
            expect_op("]");
            return e;
        }
        if (is_op("{")) {
            auto e = node(ExprKind::Dict, next());
            while (!is_op("}")) {
                if (!e->items.empty()) expect_op(",");
                if (is_op("}")) break;
                e->items.push_back(parse_expression(true));
                expect_op(":");
                e->items.push_back(parse_expression(true));
            }
            expect_op("}");
            return e;
        }
        error(t, fmt::format("unexpected {}", describe(t)));
    }

    ExprPtr parse_postfix(ExprPtr e) {
        while (true) {
            if (is_op(".") || is_op("["))
                e = parse_subscript(std::move(e));
            else if (is_op("("))
                e = parse_call(std::move(e));
            else
                return e;
        }
    }

    ExprPtr parse_filter_expr(ExprPtr e) {
        while (true) {
            if (is_op("|")) {
                next();
                e = parse_filter(std::move(e), true);
            } else if (is_name("is")) {
                e = parse_test(std::move(e));
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr subject) {
        Nesting guard(*this, expr_depth_, kMaxExprNesting, "expressions");
        const Token& at = next();
        if (at.value == ".") {
            const Token& t = next();
            if (t.type == TokenType::Name) {
                auto e = node(ExprKind::Getattr, at);
                e->a = std::move(subject);
                e->name = t.value;
                return e;
            }
            if (t.type == TokenType::Int) {
                auto e = node(ExprKind::Getitem, at);
                e->a = std::move(subject);
                e->b = literal(t, Value::integer(t.int_value));
                return e;
            }
            error(t, fmt::format("expected a name or number after '.', got {}", describe(t)));
        }
        // `[`: an index, a slice, or a tuple of indices.
        std::vector<ExprPtr> parts;
        while (!is_op("]")) {
            if (!parts.empty()) expect_op(",");
            parts.push_back(parse_subscribed());
        }
        expect_op("]");
        if (parts.empty()) error(at, "empty subscript");
        if (parts.size() == 1 && parts[0]->kind == ExprKind::Slice) {
            parts[0]->a = std::move(subject);
            return std::move(parts[0]);
        }
        auto e = node(ExprKind::Getitem, at);
        e->a = std::move(subject);
        if (parts.size() == 1) {
            e->b = std::move(parts[0]);
        } else {
            for (auto& p : parts)
                if (p->kind == ExprKind::Slice)
                    error(at, "slices inside a tuple subscript are not supported");
            auto t = node(ExprKind::Tuple, at);
            t->items = std::move(parts);
            e->b = std::move(t);
        }
        return e;
    }

    // An index expression or a slice `start:stop:step` (returned as a Slice
    // without a subject).
    ExprPtr parse_subscribed() {
        const Token& at = cur();
        ExprPtr start;
        if (!is_op(":")) {
            start = parse_expression(true);
            if (!is_op(":")) return start;
        }
        next();
        auto e = node(ExprKind::Slice, at);
        e->b = std::move(start);
        if (!is_op("]") && !is_op(",") && !is_op(":")) e->c = parse_expression(true);
        if (skip_op(":"))
            if (!is_op("]") && !is_op(",")) e->d = parse_expression(true);
        return e;
    }

    CallArgsExpr parse_call_args() {
        CallArgsExpr args;
        expect_op("(");
        bool require_comma = false;
        while (!is_op(")")) {
            if (require_comma) {
                expect_op(",");
                if (is_op(")")) break;
            }
            if (skip_op("*")) {
                args.star = parse_expression(true);
            } else if (skip_op("**")) {
                args.double_star = parse_expression(true);
            } else if (cur().type == TokenType::Name && is_op("=", peek())) {
                std::string key = next().value;
                next();
                args.named.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (!args.named.empty()) error(cur(), "positional argument after keyword argument");
                args.positional.push_back(parse_expression(true));
            }
            require_comma = true;
        }
        expect_op(")");
        return args;
    }

    ExprPtr parse_call(ExprPtr callee) {
        Nesting guard(*this, expr_depth_, kMaxExprNesting, "expressions");
        auto e = node(ExprKind::Call, cur());
        e->a = std::move(callee);
        e->args = parse_call_args();
        return e;
    }

    std::string parse_dotted_name() {
        std::string name = expect_name();
        while (skip_op(".")) name += fmt::format(".{}", expect_name());
        return name;
    }

    // `name(args) | name2 ...` applied to `subject` (null for filter blocks).
    ExprPtr parse_filter(ExprPtr subject, bool first_inline) {
        Nesting guard(*this, expr_depth_, kMaxExprNesting, "expressions");
        ExprPtr e = std::move(subject);
        while (first_inline || is_op("|")) {
            if (!first_inline) next();
            first_inline = false;
            auto f = node(ExprKind::Filter, cur());
            f->name = parse_dotted_name();
            if (is_op("(")) f->args = parse_call_args();
            f->a = std::move(e);
            e = std::move(f);
        }
        return e;
    }

    ExprPtr parse_test(ExprPtr subject) {
        Nesting guard(*this, expr_depth_, kMaxExprNesting, "expressions");
        auto e = node(ExprKind::Test, next());
        e->negated = skip_name("not");
        e->name = parse_dotted_name();
        const Token& t = cur();
        if (is_op("(")) {
            e->args = parse_call_args();
        } else if ((t.type == TokenType::Name || t.type == TokenType::String ||
                    t.type == TokenType::Int || t.type == TokenType::Float || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) error(t, "you cannot chain multiple tests with 'is'");
            e->args.positional.push_back(parse_postfix(parse_primary()));
        }
        e->a = std::move(subject);
        return e;
    }

    std::vector<Token> tokens_;
    size_t pos_ = 0;
    int expr_depth_ = 0;
    int block_depth_ = 0;
    size_t n_loop_names_ = 0;  // `loop` names parsed so far
};

}  // namespace

std::shared_ptr<const Template> parse(std::string_view source) {
    return Parser(tokenize(source)).run();
}

}  // namespace headroom::jinja
