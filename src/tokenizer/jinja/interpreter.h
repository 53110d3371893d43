// Evaluates a parsed template the way jinja2's ImmutableSandboxedEnvironment
// does for transformers' apply_chat_template.
//
// Scoping follows jinja2: `if` shares its scope; each for-loop iteration,
// macro call and `with` block gets a child scope, so a `set` inside a loop is
// gone after the iteration (templates use namespace() to carry state out).
// Lookups walk up the chain at evaluation time, so a macro sees top-level
// variables set after its definition, as in jinja2.
//
// Templates are untrusted. Every expression node, statement and loop
// iteration costs a step, string work a step per 256 bytes and list work a
// step per 4 items (copying is cheap next to evaluating a node). A render
// stops with a headroom::Error, instead of hanging or exhausting memory,
// when it runs out of steps, builds a string or output over
// max_output_bytes, a list over max_items, holds more than max_memory_bytes
// of values at once, or nests macro calls past max_call_depth. Parsing
// already bounds the nesting of expressions and blocks.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace headroom::jinja {

struct RenderLimits {
    size_t max_output_bytes = size_t{16} << 20;   // also caps every string built
    size_t max_memory_bytes = size_t{256} << 20;  // live strings, lists and dicts
    uint64_t max_steps = 10'000'000;              // real templates take ~1000 per message
    int max_call_depth = 64;
    size_t max_items = size_t{1} << 20;  // in one list
};

// Arguments of a call, a filter or a test, already evaluated.
struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> named;
};

class Scope {
  public:
    explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
    // Walks up to the root; nullptr when no scope defines `name`.
    const Value* find(const std::string& name) const;
    void set(const std::string& name, Value value) { vars_[name] = std::move(value); }

  private:
    std::shared_ptr<Scope> parent_;
    std::unordered_map<std::string, Value> vars_;
};

class Interpreter {
  public:
    // `now` is what strftime_now() formats.
    Interpreter(const RenderLimits& limits, const std::tm& now);

    // Renders with `variables` visible on top of the built-in globals.
    // Throws headroom::Error "jinja error at line N: ..." for any runtime error.
    std::string render(const Template& tmpl,
                       const std::vector<std::pair<std::string, Value>>& variables);

    // For built-ins: account work, check sizes, call back into templates.
    void charge_bytes(size_t n_bytes);
    void charge_items(size_t n_items);
    void check_string_size(size_t n_bytes) const;
    void check_items(size_t n_items) const;
    const std::tm& now() const { return now_; }
    // Steps the last render used, to size max_steps.
    uint64_t n_steps() const { return n_steps_; }
    Value call(const Value& callee, CallArgs& args);
    std::shared_ptr<DictObject> make_namespace();

  private:
    enum class Flow { Normal, Break, Continue };

    void step(uint32_t line);
    Flow exec_body(const Body& body);
    Flow exec(const Stmt& s);
    Flow exec_for(const Stmt& s);
    void exec_set(const Stmt& s);
    void define_macro(const Stmt& s);
    Value call_macro(const Stmt& macro, const std::shared_ptr<Scope>& parent, CallArgs& args);
    void exec_call_block(const Stmt& s);
    std::string capture(const Body& body);
    void emit(std::string_view text);
    void assign(const std::vector<std::string>& targets, const Value& value);

    Value eval(const Expr& e);
    Value eval_binary(const Expr& e);
    Value eval_compare(const Expr& e);
    CallArgs eval_args(const CallArgsExpr& args);

    RenderLimits limits_;
    std::tm now_;
    uint64_t n_steps_ = 0;
    uint32_t line_ = 0;
    int call_depth_ = 0;
    std::shared_ptr<Scope> scope_;
    std::string* out_ = nullptr;
    const Value* block_subject_ = nullptr;  // text of the enclosing filter block or block set
    std::vector<std::shared_ptr<DictObject>> namespaces_;
};

}  // namespace headroom::jinja
