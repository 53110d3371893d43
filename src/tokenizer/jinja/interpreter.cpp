#include "tokenizer/jinja/interpreter.h"

#include <exception>

#include "core/error.h"
#include "tokenizer/jinja/builtins.h"

namespace headroom::jinja {

namespace {

// Swaps a member for the duration of a scope.
template <class T>
class Restore {
  public:
    Restore(T& slot, T value) : slot_(slot), saved_(std::move(slot)) { slot_ = std::move(value); }
    ~Restore() { slot_ = std::move(saved_); }

  private:
    T& slot_;
    T saved_;
};

}  // namespace

const Value* Scope::find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent_.get()) {
        const auto it = s->vars_.find(name);
        if (it != s->vars_.end()) return &it->second;
    }
    return nullptr;
}

Interpreter::Interpreter(const RenderLimits& limits, const std::tm& now)
    : limits_(limits), now_(now) {}

std::string Interpreter::render(const Template& tmpl,
                                const std::vector<std::pair<std::string, Value>>& variables) {
    ChargeValuesTo charge(std::make_shared<MemoryBudget>(limits_.max_memory_bytes));
    auto globals = std::make_shared<Scope>(nullptr);
    for (auto& [name, value] : builtin_globals()) globals->set(name, std::move(value));
    scope_ = std::make_shared<Scope>(globals);
    for (const auto& [name, value] : variables) scope_->set(name, value);
    std::string out;
    out_ = &out;
    n_steps_ = 0;
    line_ = 0;
    call_depth_ = 0;
    std::string error;
    try {
        if (exec_body(tmpl.body) != Flow::Normal) fail("'break' or 'continue' outside a loop");
    } catch (const std::bad_alloc&) {
        error = "out of memory";
    } catch (const std::exception& e) {
        error = e.what();
    }
    // Namespaces may reference themselves; emptying them frees the cycles.
    for (auto& ns : namespaces_) ns->clear();
    namespaces_.clear();
    scope_.reset();
    out_ = nullptr;
    if (!error.empty()) {
        std::string one_line;
        for (char c : error) one_line += c == '\n' ? std::string("\\n") : std::string(1, c);
        fail("jinja error at line {}: {}", line_, one_line);
    }
    return out;
}

void Interpreter::step(uint32_t line) {
    line_ = line;
    if (++n_steps_ > limits_.max_steps)
        fail("template exceeded its budget of {} evaluation steps", limits_.max_steps);
}

void Interpreter::charge_bytes(size_t n_bytes) {
    n_steps_ += n_bytes / 256;
    if (n_steps_ > limits_.max_steps)
        fail("template exceeded its budget of {} evaluation steps", limits_.max_steps);
}

void Interpreter::charge_items(size_t n_items) {
    n_steps_ += n_items / 4;
    if (n_steps_ > limits_.max_steps)
        fail("template exceeded its budget of {} evaluation steps", limits_.max_steps);
}

void Interpreter::check_string_size(size_t n_bytes) const {
    if (n_bytes > limits_.max_output_bytes)
        fail("string of {} bytes exceeds the limit of {} bytes", n_bytes, limits_.max_output_bytes);
}

void Interpreter::check_items(size_t n_items) const {
    if (n_items > limits_.max_items)
        fail("list of {} items exceeds the limit of {} items", n_items, limits_.max_items);
}

std::shared_ptr<DictObject> Interpreter::make_namespace() {
    auto ns = std::make_shared<DictObject>(DictObject::Kind::Namespace);
    namespaces_.push_back(ns);
    return ns;
}

void Interpreter::emit(std::string_view text) {
    check_string_size(out_->size() + text.size());
    charge_bytes(text.size());
    out_->append(text);
}

std::string Interpreter::capture(const Body& body) {
    std::string text;
    Restore<std::string*> redirect(out_, &text);
    if (exec_body(body) != Flow::Normal) fail("'break' or 'continue' outside a loop");
    return text;
}

Interpreter::Flow Interpreter::exec_body(const Body& body) {
    for (const auto& s : body) {
        const Flow flow = exec(*s);
        if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
    step(s.line);
    switch (s.kind) {
        case StmtKind::Text:
            emit(s.text);
            break;
        case StmtKind::Output: {
            const Value v = eval(*s.expr);
            if (v.is_string())
                emit(v.str());
            else
                emit(to_str(v));
            break;
        }
        case StmtKind::If:
            for (const auto& [cond, body] : s.branches)
                if (eval(*cond).truthy()) return exec_body(body);
            return exec_body(s.else_body);
        case StmtKind::For:
            return exec_for(s);
        case StmtKind::Set:
            exec_set(s);
            break;
        case StmtKind::SetBlock: {
            Value v = Value::string(capture(s.body));
            if (s.expr) {
                Restore<const Value*> subject(block_subject_, &v);
                v = eval(*s.expr);
            }
            scope_->set(s.targets[0], std::move(v));
            break;
        }
        case StmtKind::FilterBlock: {
            const Value text = Value::string(capture(s.body));
            Restore<const Value*> subject(block_subject_, &text);
            emit(to_str(eval(*s.expr)));
            break;
        }
        case StmtKind::Macro:
            define_macro(s);
            break;
        case StmtKind::CallBlock:
            exec_call_block(s);
            break;
        case StmtKind::With: {
            std::vector<Value> values;
            for (const auto& v : s.values) values.push_back(eval(*v));
            Restore<std::shared_ptr<Scope>> inner(scope_, std::make_shared<Scope>(scope_));
            for (size_t i = 0; i < values.size(); ++i) scope_->set(s.targets[i], values[i]);
            return exec_body(s.body);
        }
        case StmtKind::Generation:
            return exec_body(s.body);
        case StmtKind::Break:
            return Flow::Break;
        case StmtKind::Continue:
            return Flow::Continue;
    }
    return Flow::Normal;
}

void Interpreter::assign(const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
        scope_->set(targets[0], value);
        return;
    }
    const std::vector<Value> parts = iterate(value);
    if (parts.size() != targets.size())
        fail("cannot unpack {} values into {} names", parts.size(), targets.size());
    for (size_t i = 0; i < parts.size(); ++i) scope_->set(targets[i], parts[i]);
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s) {
    std::vector<Value> items = iterate(eval(*s.expr));
    if (s.cond) {
        // The loop filter sees the loop variables but not `loop`.
        std::vector<Value> kept;
        for (auto& item : items) {
            step(s.line);
            Restore<std::shared_ptr<Scope>> inner(scope_, std::make_shared<Scope>(scope_));
            assign(s.targets, item);
            if (eval(*s.cond).truthy()) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    // `else` runs outside the loop: a break there ends an enclosing loop.
    if (items.empty()) return exec_body(s.else_body);
    const auto n = static_cast<int64_t>(items.size());
    // One `loop` object per loop, updated in place each iteration as jinja2's
    // LoopContext is; built only when the body mentions it.
    enum Slot { kIndex, kIndex0, kRevindex, kRevindex0, kFirst, kLast, kPrev, kNext };
    std::shared_ptr<DictObject> loop;
    if (s.uses_loop) {
        loop = std::make_shared<DictObject>(DictObject::Kind::Loop);
        for (const char* key :
             {"index", "index0", "revindex", "revindex0", "first", "last", "previtem", "nextitem"})
            loop->set(Value::string(key), Value());
        loop->set(Value::string("length"), Value::integer(n));
        loop->set(Value::string("depth"), Value::integer(1));
        loop->set(Value::string("depth0"), Value::integer(0));
        std::weak_ptr<DictObject> self = loop;
        loop->set(Value::string("cycle"),
                  Value::function("loop.cycle", [self](Interpreter&, CallArgs& a) {
                      const auto obj = self.lock();
                      if (!obj || a.positional.empty()) fail("no items for cycling given");
                      const int64_t i = obj->entries()[kIndex0].second.as_int();
                      return a.positional[i % a.positional.size()];
                  }));
    }
    const Value no_previous = Value::undefined("there is no previous item");
    const Value no_next = Value::undefined("there is no next item");
    for (int64_t i = 0; i < n; ++i) {
        step(s.line);
        Restore<std::shared_ptr<Scope>> inner(scope_, std::make_shared<Scope>(scope_));
        assign(s.targets, items[i]);
        if (loop) {
            loop->set_at(kIndex, Value::integer(i + 1));
            loop->set_at(kIndex0, Value::integer(i));
            loop->set_at(kRevindex, Value::integer(n - i));
            loop->set_at(kRevindex0, Value::integer(n - i - 1));
            loop->set_at(kFirst, Value::boolean(i == 0));
            loop->set_at(kLast, Value::boolean(i == n - 1));
            loop->set_at(kPrev, i > 0 ? items[i - 1] : no_previous);
            loop->set_at(kNext, i + 1 < n ? items[i + 1] : no_next);
            scope_->set("loop", Value::dict(loop));
        }
        if (exec_body(s.body) == Flow::Break) break;
    }
    return Flow::Normal;
}

void Interpreter::exec_set(const Stmt& s) {
    Value v = eval(*s.expr);
    if (s.attr.empty()) {
        assign(s.targets, v);
        return;
    }
    const Value* ns = scope_->find(s.targets[0]);
    if (!ns || !ns->is_dict() || ns->dict_obj().kind() != DictObject::Kind::Namespace)
        fail("cannot assign attribute on non-namespace object '{}'", s.targets[0]);
    if (s.attr[0] == '_')
        fail("cannot store underscore-prefixed attribute '{}' on a namespace", s.attr);
    ns->dict_mut().set(Value::string(s.attr), std::move(v));
}

void Interpreter::define_macro(const Stmt& s) {
    const Stmt* macro = &s;
    // Weak: the macro lives in the scope it closes over; a strong reference would be a cycle.
    std::weak_ptr<Scope> closure = scope_;
    scope_->set(s.name, Value::function(s.name, [macro, closure](Interpreter& in, CallArgs& args) {
                    auto parent = closure.lock();
                    if (!parent) fail("macro '{}' called after its scope ended", macro->name);
                    return in.call_macro(*macro, parent, args);
                }));
}

// Binds arguments as jinja2 does: positional then keyword; missing ones take
// their default or are Undefined; extras land in `varargs` and `kwargs`.
Value Interpreter::call_macro(const Stmt& macro, const std::shared_ptr<Scope>& parent,
                              CallArgs& args) {
    if (call_depth_ >= limits_.max_call_depth)
        fail("macro calls nested deeper than {}", limits_.max_call_depth);
    Restore<int> depth(call_depth_, call_depth_ + 1);
    auto frame = std::make_shared<Scope>(parent);
    const auto& params = macro.params;
    std::vector<bool> bound(params.size(), false);
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
        if (i < params.size()) {
            frame->set(params[i].name, args.positional[i]);
            bound[i] = true;
        } else {
            varargs.push_back(args.positional[i]);
        }
    }
    auto kwargs = std::make_shared<DictObject>();
    for (auto& [name, value] : args.named) {
        size_t k = 0;
        while (k < params.size() && params[k].name != name) ++k;
        if (k < params.size() && bound[k])
            fail("macro '{}' got multiple values for argument '{}'", macro.name, name);
        if (k < params.size()) {
            bound[k] = true;
            frame->set(name, value);
        } else if (name == "caller" && macro.kind == StmtKind::Macro) {
            frame->set(name, value);
        } else {
            kwargs->set(Value::string(name), value);
        }
    }
    frame->set("varargs", Value::list(std::move(varargs), true));
    frame->set("kwargs", Value::dict(kwargs));
    Restore<std::shared_ptr<Scope>> inner(scope_, frame);
    for (size_t k = 0; k < params.size(); ++k) {
        if (bound[k]) continue;
        const auto& p = params[k];
        frame->set(p.name, p.default_value ? eval(*p.default_value)
                                           : Value::undefined(fmt::format(
                                                 "parameter '{}' was not provided", p.name)));
    }
    return Value::string(capture(macro.body));
}

void Interpreter::exec_call_block(const Stmt& s) {
    const Stmt* block = &s;
    std::shared_ptr<Scope> closure = scope_;
    Value caller = Value::function("caller", [block, closure](Interpreter& in, CallArgs& args) {
        return in.call_macro(*block, closure, args);
    });
    const Expr& call = *s.expr;
    const Value callee = eval(*call.a);
    CallArgs args = eval_args(call.args);
    args.named.emplace_back("caller", std::move(caller));
    emit(to_str(this->call(callee, args)));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
    if (callee.is_function()) return callee.function_obj().call(*this, args);
    if (callee.is_undefined()) fail("{}", callee.undefined_hint());
    fail("'{}' object is not callable", callee.type_name());
}

CallArgs Interpreter::eval_args(const CallArgsExpr& args) {
    CallArgs out;
    for (const auto& e : args.positional) out.positional.push_back(eval(*e));
    for (const auto& [name, e] : args.named) out.named.emplace_back(name, eval(*e));
    if (args.star)
        for (auto& v : iterate(eval(*args.star))) out.positional.push_back(std::move(v));
    if (args.double_star) {
        const Value kw = eval(*args.double_star);
        if (!kw.is_mapping()) fail("argument after ** must be a mapping, not {}", kw.type_name());
        for (const auto& [k, v] : kw.dict_obj().entries()) {
            if (!k.is_string()) fail("keywords must be strings");
            out.named.emplace_back(k.str(), v);
        }
    }
    return out;
}

Value Interpreter::eval(const Expr& e) {
    step(e.line);
    switch (e.kind) {
        case ExprKind::Literal:
            return e.literal;
        case ExprKind::Name: {
            const Value* v = scope_->find(e.name);
            return v ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
        }
        case ExprKind::List:
        case ExprKind::Tuple: {
            std::vector<Value> items;
            items.reserve(e.items.size());
            for (const auto& item : e.items) items.push_back(eval(*item));
            return Value::list(std::move(items), e.kind == ExprKind::Tuple);
        }
        case ExprKind::Dict: {
            auto d = std::make_shared<DictObject>();
            for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
                Value k = eval(*e.items[i]);
                d->set(std::move(k), eval(*e.items[i + 1]));
            }
            return Value::dict(std::move(d));
        }
        case ExprKind::Getattr:
            return get_attribute(eval(*e.a), e.name);
        case ExprKind::Getitem: {
            const Value obj = eval(*e.a);
            return get_item(obj, eval(*e.b));
        }
        case ExprKind::Slice: {
            const Value obj = eval(*e.a);
            Value bounds[3];
            const Expr* parts[3] = {e.b.get(), e.c.get(), e.d.get()};
            for (int i = 0; i < 3; ++i)
                if (parts[i]) bounds[i] = eval(*parts[i]);
            return get_slice(*this, obj, parts[0] ? &bounds[0] : nullptr,
                             parts[1] ? &bounds[1] : nullptr, parts[2] ? &bounds[2] : nullptr);
        }
        case ExprKind::Unary: {
            const Value v = eval(*e.a);
            if (e.op == Op::Not) return Value::boolean(!v.truthy());
            if (v.is_undefined()) fail("{}", v.undefined_hint());
            if (!v.is_number())
                fail("bad operand type for unary {}: '{}'", e.op == Op::Neg ? '-' : '+',
                     v.type_name());
            if (e.op == Op::Pos) return v.is_bool() ? Value::integer(v.to_int()) : v;
            if (v.is_float()) return Value::floating(-v.as_float());
            if (v.to_int() == INT64_MIN) fail("integer overflow");
            return Value::integer(-v.to_int());
        }
        case ExprKind::Binary:
            return eval_binary(e);
        case ExprKind::And: {
            Value lhs = eval(*e.a);
            return lhs.truthy() ? eval(*e.b) : lhs;
        }
        case ExprKind::Or: {
            Value lhs = eval(*e.a);
            return lhs.truthy() ? lhs : eval(*e.b);
        }
        case ExprKind::Concat: {
            std::string s;
            for (const auto& item : e.items) {
                s += to_str(eval(*item));
                check_string_size(s.size());
            }
            charge_bytes(s.size());
            return Value::string(std::move(s));
        }
        case ExprKind::Compare:
            return eval_compare(e);
        case ExprKind::CondExpr:
            if (eval(*e.b).truthy()) return eval(*e.a);
            if (e.c) return eval(*e.c);
            return Value::undefined(
                fmt::format("the inline if-expression on line {} evaluated to false and no else "
                            "section was defined.",
                            e.line));
        case ExprKind::Call: {
            const Value callee = eval(*e.a);
            CallArgs args = eval_args(e.args);
            return call(callee, args);
        }
        case ExprKind::Filter: {
            const Value subject = e.a ? eval(*e.a) : (block_subject_ ? *block_subject_ : Value());
            CallArgs args = eval_args(e.args);
            step(e.line);
            return apply_filter(*this, e.name, subject, args);
        }
        case ExprKind::Test: {
            const Value subject = eval(*e.a);
            CallArgs args = eval_args(e.args);
            step(e.line);
            return Value::boolean(apply_test(*this, e.name, subject, args) != e.negated);
        }
    }
    return Value();
}

Value Interpreter::eval_binary(const Expr& e) {
    const Value a = eval(*e.a);
    const Value b = eval(*e.b);
    step(e.line);
    return binary_op(*this, e.op, a, b);
}

Value Interpreter::eval_compare(const Expr& e) {
    Value lhs = eval(*e.items[0]);
    for (size_t i = 0; i < e.ops.size(); ++i) {
        Value rhs = eval(*e.items[i + 1]);
        step(e.line);
        bool r = false;
        switch (e.ops[i]) {
            case Op::Eq:
                r = equals(lhs, rhs);
                break;
            case Op::Ne:
                r = !equals(lhs, rhs);
                break;
            case Op::Lt:
                r = less(lhs, rhs);
                break;
            case Op::Gt:
                r = less(rhs, lhs);
                break;
            case Op::Le:
                r = less(lhs, rhs) || equals(lhs, rhs);
                break;
            case Op::Ge:
                r = less(rhs, lhs) || equals(lhs, rhs);
                break;
            case Op::In:
            case Op::NotIn:
                if (rhs.is_list()) charge_items(rhs.items().size());
                if (rhs.is_string()) charge_bytes(rhs.str().size());
                r = contains(rhs, lhs) == (e.ops[i] == Op::In);
                break;
            default:
                break;
        }
        if (!r) return Value::boolean(false);
        lhs = std::move(rhs);
    }
    return Value::boolean(true);
}

}  // namespace headroom::jinja
