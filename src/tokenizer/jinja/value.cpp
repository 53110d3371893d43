#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja/strings.h"

namespace headroom::jinja {

namespace {

thread_local std::shared_ptr<MemoryBudget> t_budget;

void check_text_size(const std::string& out) {
    if (out.size() > kMaxTextBytes)
        fail("text of a value exceeds the limit of {} bytes", kMaxTextBytes);
}

// Guards recursive walks over values that may be cyclic through namespaces.
struct DepthGuard {
    explicit DepthGuard(int& depth) : depth_(depth) {
        if (++depth_ > 2 * kMaxDepth) {
            --depth_;
            fail("value nested deeper than {} levels (or containing itself)", 2 * kMaxDepth);
        }
    }
    ~DepthGuard() { --depth_; }
    int& depth_;
};

// A dict key's identity: 1 == 1.0 == True hash alike in Python.
std::string hash_key(const Value& key) {
    switch (key.kind()) {
        case Value::Kind::String:
            return fmt::format("s{}", key.str());
        case Value::Kind::Bool:
        case Value::Kind::Int:
            return fmt::format("i{}", key.to_int());
        case Value::Kind::Float: {
            const double f = key.as_float();
            if (std::isfinite(f) && f == std::trunc(f) && std::fabs(f) < 9.2e18)
                return fmt::format("i{}", static_cast<int64_t>(f));
            return fmt::format("f{}", float_repr(f));
        }
        case Value::Kind::None:
            return "n";
        default:
            fail("unhashable type: '{}'", key.type_name());
    }
}

void repr_string(std::string& out, std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const bool has_double = s.find('"') != std::string_view::npos;
    const char quote = has_single && !has_double ? '"' : '\'';
    out.push_back(quote);
    for (char32_t cp : decode_utf8(s)) {
        if (cp == static_cast<char32_t>(quote) || cp == '\\') {
            out.push_back('\\');
            out.push_back(static_cast<char>(cp));
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp == '\t') {
            out += "\\t";
        } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD ||
                   (cp >= 0xDC80 && cp <= 0xDCFF)) {
            out += fmt::format("\\x{:02x}", static_cast<uint32_t>(cp & 0xFF));
        } else if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
                   (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF) {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
        } else {
            append_utf8(out, cp);
        }
    }
    out.push_back(quote);
}

void repr_into(std::string& out, const Value& v, int& depth);

void str_into(std::string& out, const Value& v, int& depth) {
    switch (v.kind()) {
        case Value::Kind::Undefined:
            return;
        case Value::Kind::String:
            out += v.str();
            return;
        default:
            repr_into(out, v, depth);
    }
}

void repr_into(std::string& out, const Value& v, int& depth) {
    DepthGuard guard(depth);
    switch (v.kind()) {
        case Value::Kind::Undefined:
            out += "Undefined";
            return;
        case Value::Kind::None:
            out += "None";
            return;
        case Value::Kind::Bool:
            out += v.as_bool() ? "True" : "False";
            return;
        case Value::Kind::Int:
            out += std::to_string(v.as_int());
            return;
        case Value::Kind::Float:
            out += float_repr(v.as_float());
            return;
        case Value::Kind::String:
            repr_string(out, v.str());
            return;
        case Value::Kind::List: {
            if (v.is_generator()) {
                out += "<generator object>";
                return;
            }
            const auto& items = v.items();
            out.push_back(v.is_tuple() ? '(' : '[');
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += ", ";
                repr_into(out, items[i], depth);
                check_text_size(out);
            }
            if (v.is_tuple() && items.size() == 1) out.push_back(',');
            out.push_back(v.is_tuple() ? ')' : ']');
            return;
        }
        case Value::Kind::Dict: {
            const auto& d = v.dict_obj();
            if (d.kind() == DictObject::Kind::Namespace) out += "<Namespace ";
            if (d.kind() == DictObject::Kind::Loop) {
                out += "<LoopContext>";
                return;
            }
            out.push_back('{');
            bool first = true;
            for (const auto& [k, val] : d.entries()) {
                if (!first) out += ", ";
                first = false;
                repr_into(out, k, depth);
                out += ": ";
                repr_into(out, val, depth);
                check_text_size(out);
            }
            out.push_back('}');
            if (d.kind() == DictObject::Kind::Namespace) out.push_back('>');
            return;
        }
        case Value::Kind::Function:
            out += "<function " + v.function_obj().name + ">";
            return;
    }
}

bool equals_at(const Value& a, const Value& b, int& depth) {
    DepthGuard guard(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
        return a.to_int() == b.to_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::Undefined:
        case Value::Kind::None:
            return true;
        case Value::Kind::String:
            return a.str() == b.str();
        case Value::Kind::List: {
            if (a.is_generator() || b.is_generator()) return &a.list_obj() == &b.list_obj();
            if (a.is_tuple() != b.is_tuple()) return false;
            const auto &x = a.items(), &y = b.items();
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!equals_at(x[i], y[i], depth)) return false;
            return true;
        }
        case Value::Kind::Dict: {
            const auto &x = a.dict_obj(), &y = b.dict_obj();
            if (x.kind() != DictObject::Kind::Dict || y.kind() != DictObject::Kind::Dict)
                return &x == &y;
            if (x.size() != y.size()) return false;
            for (const auto& [k, v] : x.entries()) {
                const Value* other = y.find(k);
                if (!other || !equals_at(v, *other, depth)) return false;
            }
            return true;
        }
        case Value::Kind::Function:
            return &a.function_obj() == &b.function_obj();
        default:
            return false;
    }
}

bool less_at(const Value& a, const Value& b, int& depth) {
    DepthGuard guard(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.to_double() < b.to_double();
        return a.to_int() < b.to_int();
    }
    if (a.is_string() && b.is_string())
        return a.str() < b.str();  // UTF-8 order is code point order
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_generator() &&
        !b.is_generator()) {
        const auto &x = a.items(), &y = b.items();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (equals_at(x[i], y[i], depth)) continue;
            return less_at(x[i], y[i], depth);
        }
        return x.size() < y.size();
    }
    if (a.is_undefined() || b.is_undefined())
        fail("{}", a.is_undefined() ? a.undefined_hint() : b.undefined_hint());
    fail("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
    out.push_back('"');
    for (char32_t cp : decode_utf8(s)) {
        switch (cp) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (cp < 0x20) {
                    out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
                } else if (ensure_ascii && cp > 0x7E && cp != 0x7F) {
                    if (cp >= 0x10000) {
                        const char32_t v = cp - 0x10000;
                        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10),
                                           0xDC00 + (v & 0x3FF));
                    } else {
                        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
                    }
                } else {
                    append_utf8(out, cp);
                }
        }
    }
    out.push_back('"');
}

std::string json_float(double f) {
    if (std::isnan(f)) return "NaN";
    if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
    return float_repr(f);
}

void json_into(std::string& out, const Value& v, const JsonOptions& o, int level, int& depth) {
    DepthGuard guard(depth);
    auto newline = [&](int lvl) {
        out.push_back('\n');
        for (int i = 0; i < lvl; ++i) out += o.indent;
    };
    switch (v.kind()) {
        case Value::Kind::None:
            out += "null";
            return;
        case Value::Kind::Bool:
            out += v.as_bool() ? "true" : "false";
            return;
        case Value::Kind::Int:
            out += std::to_string(v.as_int());
            return;
        case Value::Kind::Float:
            out += json_float(v.as_float());
            return;
        case Value::Kind::String:
            json_string(out, v.str(), o.ensure_ascii);
            return;
        case Value::Kind::List: {
            if (v.is_generator()) break;
            const auto& items = v.items();
            if (items.empty()) {
                out += "[]";
                return;
            }
            out.push_back('[');
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += o.item_separator;
                if (o.pretty) newline(level + 1);
                json_into(out, items[i], o, level + 1, depth);
                check_text_size(out);
            }
            if (o.pretty) newline(level);
            out.push_back(']');
            return;
        }
        case Value::Kind::Dict: {
            const auto& d = v.dict_obj();
            if (d.kind() != DictObject::Kind::Dict) break;
            if (d.size() == 0) {
                out += "{}";
                return;
            }
            std::vector<const std::pair<Value, Value>*> entries;
            for (const auto& e : d.entries()) entries.push_back(&e);
            if (o.sort_keys)
                std::stable_sort(entries.begin(), entries.end(), [&](auto* x, auto* y) {
                    return less_at(x->first, y->first, depth);
                });
            out.push_back('{');
            for (size_t i = 0; i < entries.size(); ++i) {
                const auto& [k, val] = *entries[i];
                if (i) out += o.item_separator;
                if (o.pretty) newline(level + 1);
                switch (k.kind()) {
                    case Value::Kind::String:
                        json_string(out, k.str(), o.ensure_ascii);
                        break;
                    case Value::Kind::Float:
                        out += fmt::format("\"{}\"", json_float(k.as_float()));
                        break;
                    case Value::Kind::Bool:
                        out += k.as_bool() ? "\"true\"" : "\"false\"";
                        break;
                    case Value::Kind::Int:
                        out += fmt::format("\"{}\"", k.as_int());
                        break;
                    case Value::Kind::None:
                        out += "\"null\"";
                        break;
                    default:
                        fail("keys must be str, int, float, bool or None, not {}", k.type_name());
                }
                out += o.key_separator;
                json_into(out, val, o, level + 1, depth);
                check_text_size(out);
            }
            if (o.pretty) newline(level);
            out.push_back('}');
            return;
        }
        default:
            break;
    }
    if (v.is_undefined()) fail("Object of type Undefined is not JSON serializable");
    fail("Object of type {} is not JSON serializable", v.type_name());
}

}  // namespace

void MemoryBudget::charge(size_t n_bytes) {
    if (n_bytes > max_bytes_ - std::min(used_bytes_, max_bytes_))
        fail("template values exceed the memory limit of {} bytes", max_bytes_);
    used_bytes_ += n_bytes;
}

ChargeValuesTo::ChargeValuesTo(std::shared_ptr<MemoryBudget> budget)
    : previous_(std::exchange(t_budget, std::move(budget))) {}

ChargeValuesTo::~ChargeValuesTo() {
    t_budget = std::move(previous_);
}

DictObject::DictObject(Kind kind) : kind_(kind), budget_(t_budget) {}

DictObject::~DictObject() {
    if (budget_) budget_->release(charged_bytes_);
}

const Value* DictObject::find(const Value& key) const {
    const auto it = index_.find(hash_key(key));
    return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* DictObject::find(std::string_view key) const {
    std::string h = "s";
    h += key;
    const auto it = index_.find(h);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void DictObject::set(Value key, Value value) {
    const int d = std::max(key.depth(), value.depth()) + 1;
    if (d > kMaxDepth) fail("value nested deeper than {} levels", kMaxDepth);
    depth_ = std::max(depth_, d);
    std::string h = hash_key(key);
    if (const auto it = index_.find(h); it != index_.end()) {
        entries_[it->second].second = std::move(value);
        return;
    }
    // An entry, its hash key and the index node.
    const size_t n_bytes = sizeof(entries_[0]) + 2 * h.size() + 64;
    if (budget_) budget_->charge(n_bytes);
    charged_bytes_ += n_bytes;
    index_.emplace(std::move(h), entries_.size());
    entries_.emplace_back(std::move(key), std::move(value));
}

void DictObject::set_at(size_t index, Value value) {
    depth_ = std::max(depth_, value.depth() + 1);
    if (depth_ > kMaxDepth) fail("value nested deeper than {} levels", kMaxDepth);
    entries_[index].second = std::move(value);
}

void DictObject::clear() {
    // Move out first: destroying a value may re-enter this object through a cycle.
    auto entries = std::move(entries_);
    entries_.clear();
    index_.clear();
}

Value Value::undefined(std::string hint) {
    Value v;
    v.data_ = UndefinedData{std::make_shared<const std::string>(std::move(hint))};
    return v;
}

Value Value::none() {
    Value v;
    v.data_ = NoneData{};
    return v;
}

Value Value::boolean(bool b) {
    Value v;
    v.data_ = b;
    return v;
}

Value Value::integer(int64_t i) {
    Value v;
    v.data_ = i;
    return v;
}

Value Value::floating(double f) {
    Value v;
    v.data_ = f;
    return v;
}

Value Value::string(std::string s, bool safe) {
    Value v;
    if (t_budget) {
        const size_t n_bytes = sizeof(std::string) + s.capacity();
        t_budget->charge(n_bytes);
        v.data_ = StringPtr(new std::string(std::move(s)),
                            [budget = t_budget, n_bytes](const std::string* p) {
                                budget->release(n_bytes);
                                delete p;
                            });
    } else {
        v.data_ = std::make_shared<const std::string>(std::move(s));
    }
    v.safe_ = safe;
    return v;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
    int depth = 1;
    for (const auto& item : items) depth = std::max(depth, item.depth() + 1);
    if (depth > kMaxDepth) fail("value nested deeper than {} levels", kMaxDepth);
    ListPtr obj;
    if (t_budget) {
        const size_t n_bytes = sizeof(ListObject) + items.capacity() * sizeof(Value);
        t_budget->charge(n_bytes);
        obj = ListPtr(new ListObject{std::move(items), is_tuple, false, depth},
                      [budget = t_budget, n_bytes](const ListObject* p) {
                          budget->release(n_bytes);
                          delete p;
                      });
    } else {
        obj = std::make_shared<const ListObject>(
            ListObject{std::move(items), is_tuple, false, depth});
    }
    Value v;
    v.data_ = std::move(obj);
    return v;
}

Value Value::generator(std::vector<Value> items) {
    Value v = list(std::move(items));
    std::const_pointer_cast<ListObject>(std::get<ListPtr>(v.data_))->is_generator = true;
    return v;
}

Value Value::dict(std::shared_ptr<DictObject> dict) {
    Value v;
    v.data_ = std::move(dict);
    return v;
}

Value Value::function(std::string name, std::function<Value(Interpreter&, CallArgs&)> call) {
    Value v;
    v.data_ = std::make_shared<const Function>(Function{std::move(name), std::move(call)});
    return v;
}

const std::string& Value::undefined_hint() const {
    static const std::string kDefault = "undefined value";
    const auto& hint = std::get<UndefinedData>(data_).hint;
    return hint ? *hint : kDefault;
}

double Value::to_double() const {
    if (is_float()) return as_float();
    return static_cast<double>(to_int());
}

int Value::depth() const {
    if (is_list()) return list_obj().depth;
    if (is_dict()) return dict_obj().depth();
    return 1;
}

bool Value::truthy() const {
    switch (kind()) {
        case Kind::Undefined:
        case Kind::None:
            return false;
        case Kind::Bool:
            return as_bool();
        case Kind::Int:
            return as_int() != 0;
        case Kind::Float:
            return as_float() != 0.0;
        case Kind::String:
            return !str().empty();
        case Kind::List:
            return is_generator() || !items().empty();
        case Kind::Dict:
            return dict_obj().kind() != DictObject::Kind::Dict || dict_obj().size() > 0;
        case Kind::Function:
            return true;
    }
    return false;
}

std::string Value::type_name() const {
    switch (kind()) {
        case Kind::Undefined:
            return "Undefined";
        case Kind::None:
            return "NoneType";
        case Kind::Bool:
            return "bool";
        case Kind::Int:
            return "int";
        case Kind::Float:
            return "float";
        case Kind::String:
            return "str";
        case Kind::List:
            return is_generator() ? "generator" : is_tuple() ? "tuple" : "list";
        case Kind::Dict:
            switch (dict_obj().kind()) {
                case DictObject::Kind::Namespace:
                    return "Namespace";
                case DictObject::Kind::Loop:
                    return "LoopContext";
                default:
                    return "dict";
            }
        case Kind::Function:
            return "function";
    }
    return "object";
}

std::string to_str(const Value& value) {
    if (value.is_string()) return value.str();
    std::string out;
    int depth = 0;
    str_into(out, value, depth);
    return out;
}

std::string to_repr(const Value& value) {
    std::string out;
    int depth = 0;
    repr_into(out, value, depth);
    return out;
}

std::string float_repr(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
    if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
    // Shortest round-tripping digits, then Python's layout: positional for
    // decimal exponents in [-4, 16), scientific otherwise.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    const size_t e_at = sci.find('e');
    const int exponent = std::stoi(sci.substr(e_at + 1));
    std::string mantissa = sci.substr(0, e_at);
    const bool negative = mantissa[0] == '-';
    if (negative) mantissa.erase(0, 1);
    std::string digits;
    for (char c : mantissa)
        if (c != '.') digits.push_back(c);
    std::string out = negative ? "-" : "";
    if (exponent >= -4 && exponent < 16) {
        if (exponent < 0) {
            out += fmt::format("0.{}{}", std::string(-exponent - 1, '0'), digits);
        } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
            out += fmt::format("{}{}.0", digits, std::string(exponent + 1 - digits.size(), '0'));
        } else {
            out +=
                fmt::format("{}.{}", digits.substr(0, exponent + 1), digits.substr(exponent + 1));
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += fmt::format(".{}", digits.substr(1));
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out;
}

bool equals(const Value& a, const Value& b) {
    int depth = 0;
    return equals_at(a, b, depth);
}

bool less(const Value& a, const Value& b) {
    int depth = 0;
    return less_at(a, b, depth);
}

std::string to_json(const Value& value, const JsonOptions& options) {
    std::string out;
    int depth = 0;
    json_into(out, value, options, 0, depth);
    return out;
}

std::string html_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out.push_back(c);
        }
    }
    return out;
}

}  // namespace headroom::jinja
