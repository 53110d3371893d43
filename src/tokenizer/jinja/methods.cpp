// Attribute and item access, Python's str/dict/list methods, operators and
// the global functions.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "tokenizer/jinja/args.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/strings.h"

namespace headroom::jinja {

namespace {

constexpr std::string_view kStrMethods[] = {
    "strip",    "lstrip",  "rstrip",  "split",   "rsplit",       "splitlines",   "startswith",
    "endswith", "replace", "upper",   "lower",   "title",        "capitalize",   "swapcase",
    "find",     "rfind",   "count",   "join",    "format",       "isdigit",      "isalpha",
    "isalnum",  "isspace", "islower", "isupper", "removeprefix", "removesuffix", "center"};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values", "copy"};
constexpr std::string_view kDictUnsafe[] = {"pop", "popitem", "setdefault", "update", "clear"};
constexpr std::string_view kListMethods[] = {"index", "count", "copy"};
constexpr std::string_view kListUnsafe[] = {"append", "extend",  "insert", "pop",
                                            "remove", "reverse", "sort",   "clear"};

template <size_t N>
bool one_of(const std::string_view (&names)[N], std::string_view name) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// jinja2's object_type_repr: "None" or "<type> object". Its messages quote it
// for a missing attribute and not for a missing element.
std::string object_type(const Value& v) {
    return v.is_none() ? "None" : fmt::format("{} object", v.type_name());
}

std::string object_name(const Value& v) {
    return fmt::format("'{}'", object_type(v));
}

Value no_attribute(const Value& obj, std::string_view name) {
    return Value::undefined(fmt::format("{} has no attribute '{}'", object_name(obj), name));
}

// Python's tuple-or-str argument of startswith/endswith.
bool affix_matches(const Value& arg, std::string_view s, bool prefix) {
    auto one = [&](const Value& v) {
        if (!v.is_string()) fail("startswith/endswith argument must be str or a tuple of str");
        const std::string& a = v.str();
        return a.size() <= s.size() &&
               (prefix ? s.substr(0, a.size()) == a : s.substr(s.size() - a.size()) == a);
    };
    if (arg.is_list()) {
        for (const auto& v : arg.items())
            if (one(v)) return true;
        return false;
    }
    return one(arg);
}

const std::string& req_str(const Value& v) {
    if (!v.is_string()) fail("expected a str argument, not {}", v.type_name());
    return v.str();
}

std::optional<std::string> opt_str(const Value* v) {
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_string()) fail("expected a str argument, not {}", v->type_name());
    return v->str();
}

Value string_list(std::vector<std::string> parts) {
    std::vector<Value> items;
    items.reserve(parts.size());
    for (auto& p : parts) items.push_back(Value::string(std::move(p)));
    return Value::list(std::move(items));
}

template <class Pred>
bool all_code_points(std::string_view s, Pred pred) {
    const std::u32string cps = decode_utf8(s);
    if (cps.empty()) return false;
    return std::all_of(cps.begin(), cps.end(), pred);
}

Value call_str_method(Interpreter& in, const std::string& s, const std::string& name,
                      CallArgs& args) {
    in.charge_bytes(s.size());
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        ArgBinder a(name, args, {"chars"});
        const StripSide side = name == "strip"    ? StripSide::Both
                               : name == "lstrip" ? StripSide::Left
                                                  : StripSide::Right;
        return Value::string(py_strip(s, opt_str(a.get(0)), side));
    }
    if (name == "split" || name == "rsplit") {
        ArgBinder a(name, args, {"sep", "maxsplit"});
        const auto sep = opt_str(a.get(0));
        if (sep && sep->empty()) fail("empty separator");
        return string_list(py_split(s, sep, a.get_int(1, -1), name == "rsplit"));
    }
    if (name == "splitlines") {
        ArgBinder a(name, args, {"keepends"});
        return string_list(py_splitlines(s, a.get_bool(0, false)));
    }
    if (name == "startswith" || name == "endswith") {
        ArgBinder a(name, args, {"prefix"});
        return Value::boolean(affix_matches(a.require(0), s, name == "startswith"));
    }
    if (name == "replace") {
        ArgBinder a(name, args, {"old", "new", "count"});
        auto r =
            py_replace(s, req_str(a.require(0)), req_str(a.require(1)), a.get_int(2, -1), SIZE_MAX);
        in.check_string_size(r->size());
        in.charge_bytes(r->size());
        return Value::string(std::move(*r));
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
        name == "swapcase") {
        ArgBinder a(name, args, {});
        if (name == "upper") return Value::string(py_upper(s));
        if (name == "lower") return Value::string(py_lower(s));
        if (name == "title") return Value::string(py_title(s));
        if (name == "capitalize") return Value::string(py_capitalize(s));
        std::string out;
        for (char32_t cp : decode_utf8(s))
            append_utf8(out, to_lower(cp) != cp ? to_lower(cp) : to_upper(cp));
        return Value::string(std::move(out));
    }
    if (name == "find" || name == "rfind" || name == "count") {
        ArgBinder a(name, args, {"sub"});
        const std::string& sub = req_str(a.require(0));
        if (name == "count") return Value::integer(py_count(s, sub));
        return Value::integer(py_find(s, sub, name == "rfind"));
    }
    if (name == "join") {
        ArgBinder a(name, args, {"iterable"});
        std::string out;
        size_t i = 0;
        for (const auto& item : iterate(a.require(0))) {
            if (!item.is_string())
                fail("sequence item {}: expected str instance, {} found", i, item.type_name());
            if (i++) out += s;
            out += item.str();
            in.check_string_size(out.size());
        }
        in.charge_bytes(out.size());
        return Value::string(std::move(out));
    }
    if (name == "format") return Value::string(str_format(in, s, args));
    if (name == "removeprefix" || name == "removesuffix") {
        ArgBinder a(name, args, {"affix"});
        const std::string& affix = req_str(a.require(0));
        if (name == "removeprefix")
            return Value::string(s.starts_with(affix) ? s.substr(affix.size()) : s);
        return Value::string(s.ends_with(affix) ? s.substr(0, s.size() - affix.size()) : s);
    }
    if (name == "center") {
        ArgBinder a(name, args, {"width", "fillchar"});
        const int64_t width = a.get_int(0, 0);
        const std::string fill = a.get_str(1, " ");
        const auto len = static_cast<int64_t>(utf8_length(s));
        if (width <= len) return Value::string(s);
        in.check_string_size(static_cast<size_t>(width) * fill.size());
        // Python puts the odd extra column on the left when the width is odd.
        const int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
        std::string out;
        for (int64_t k = 0; k < left; ++k) out += fill;
        out += s;
        for (int64_t k = 0; k < pad - left; ++k) out += fill;
        return Value::string(std::move(out));
    }
    ArgBinder a(name, args, {});
    const std::u32string cps = decode_utf8(s);
    auto is_alpha = [](char32_t c) {
        if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        return to_lower(c) != to_upper(c) || (c >= 0x3040 && c <= 0x30FF) ||
               (c >= 0x3400 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7AF);
    };
    auto is_digit = [](char32_t c) { return c >= '0' && c <= '9'; };
    if (name == "isdigit") return Value::boolean(all_code_points(s, is_digit));
    if (name == "isalpha") return Value::boolean(all_code_points(s, is_alpha));
    if (name == "isalnum")
        return Value::boolean(
            all_code_points(s, [&](char32_t c) { return is_alpha(c) || is_digit(c); }));
    if (name == "isspace") return Value::boolean(all_code_points(s, is_py_space));
    bool has_cased = false, has_lower = false, has_upper = false;
    for (char32_t c : cps) {
        has_lower = has_lower || to_upper(c) != c;
        has_upper = has_upper || to_lower(c) != c;
    }
    has_cased = has_lower || has_upper;
    if (name == "islower") return Value::boolean(has_cased && !has_upper);
    if (name == "isupper") return Value::boolean(has_cased && !has_lower);
    fail("'str' object has no attribute '{}'", name);
}

Value call_method(Interpreter& in, const Value& obj, const std::string& name, CallArgs& args) {
    if (obj.is_string()) return call_str_method(in, obj.str(), name, args);
    if (obj.is_list()) {
        in.charge_items(obj.items().size());
        if (name == "copy") return Value::list(obj.items(), obj.is_tuple());
        ArgBinder a(name, args, {"value"});
        const Value& x = a.require(0);
        const auto& items = obj.items();
        if (name == "count")
            return Value::integer(std::count_if(items.begin(), items.end(),
                                                [&](const Value& v) { return equals(v, x); }));
        for (size_t i = 0; i < items.size(); ++i)
            if (equals(items[i], x)) return Value::integer(static_cast<int64_t>(i));
        fail("{} is not in list", to_repr(x));
    }
    const DictObject& d = obj.dict_obj();
    if (name == "get") {
        ArgBinder a(name, args, {"key", "default"});
        const Value* v = d.find(a.require(0));
        return v ? *v : a.get_or(1, Value::none());
    }
    in.charge_items(d.size());
    ArgBinder a(name, args, {});
    if (name == "copy") {
        auto copy = std::make_shared<DictObject>();
        for (const auto& [k, v] : d.entries()) copy->set(k, v);
        return Value::dict(std::move(copy));
    }
    std::vector<Value> out;
    out.reserve(d.size());
    for (const auto& [k, v] : d.entries()) {
        if (name == "keys")
            out.push_back(k);
        else if (name == "values")
            out.push_back(v);
        else
            out.push_back(Value::list({k, v}, true));
    }
    return Value::list(std::move(out));
}

Value bound_method(const Value& obj, const std::string& name) {
    return Value::function(name, [obj, name](Interpreter& in, CallArgs& args) {
        return call_method(in, obj, name, args);
    });
}

Value unsafe(std::string_view type, std::string_view name) {
    return Value::undefined(
        fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type));
}

// Python's clamping of slice bounds.
int64_t slice_index(const Value* v, int64_t n, int64_t fallback, bool negative_step) {
    if (!v || v->is_none()) return fallback;
    if (!v->is_int() && !v->is_bool())
        fail("slice indices must be integers or None or have an __index__ method");
    int64_t i = v->to_int();
    if (i < 0) i += n;
    if (negative_step) return std::clamp<int64_t>(i, -1, n - 1);
    return std::clamp<int64_t>(i, 0, n);
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
    switch (obj.kind()) {
        case Value::Kind::Undefined:
            fail("{}", obj.undefined_hint());
        case Value::Kind::String:
            return one_of(kStrMethods, name) ? bound_method(obj, name) : no_attribute(obj, name);
        case Value::Kind::List:
            if (obj.is_generator()) return no_attribute(obj, name);
            if (one_of(kListMethods, name)) return bound_method(obj, name);
            if (one_of(kListUnsafe, name)) return unsafe(obj.type_name(), name);
            return no_attribute(obj, name);
        case Value::Kind::Dict: {
            if (obj.is_mapping()) {
                if (one_of(kDictMethods, name)) return bound_method(obj, name);
                if (one_of(kDictUnsafe, name)) return unsafe("dict", name);
            }
            const Value* v = obj.dict_obj().find(std::string_view(name));
            return v ? *v : no_attribute(obj, name);
        }
        default:
            return no_attribute(obj, name);
    }
}

Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) fail("{}", obj.undefined_hint());
    const bool int_key = key.is_int() || key.is_bool();
    if (((obj.is_list() && !obj.is_generator()) || obj.is_string()) && int_key) {
        const bool is_str = obj.is_string();
        std::u32string cps;
        if (is_str) cps = decode_utf8(obj.str());
        const auto n = static_cast<int64_t>(is_str ? cps.size() : obj.items().size());
        int64_t i = key.to_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n)
            return Value::undefined(
                fmt::format("{} has no element {}", object_type(obj), key.to_int()));
        if (is_str) return Value::string(encode_utf8(std::u32string_view(cps).substr(i, 1)));
        return obj.items()[i];
    }
    if (obj.is_dict()) {
        const bool hashable =
            !key.is_list() && !key.is_dict() && !key.is_function() && !key.is_undefined();
        if (hashable)
            if (const Value* v = obj.dict_obj().find(key)) return *v;
    }
    if (key.is_string()) return get_attribute(obj, key.str());
    return Value::undefined(fmt::format("{} has no element {}", object_type(obj), to_repr(key)));
}

Value get_slice(Interpreter& in, const Value& obj, const Value* start, const Value* stop,
                const Value* step) {
    if (obj.is_undefined()) fail("{}", obj.undefined_hint());
    if ((!obj.is_list() && !obj.is_string()) || obj.is_generator())
        fail("'{}' object is not subscriptable", obj.type_name());
    int64_t stride = 1;
    if (step && !step->is_none()) {
        if (!step->is_int() && !step->is_bool()) fail("slice indices must be integers or None");
        stride = step->to_int();
        if (stride == 0) fail("slice step cannot be zero");
    }
    const bool is_str = obj.is_string();
    std::u32string cps;
    if (is_str) cps = decode_utf8(obj.str());
    const auto n = static_cast<int64_t>(is_str ? cps.size() : obj.items().size());
    in.charge_bytes(static_cast<size_t>(n));
    const bool neg = stride < 0;
    const int64_t b = slice_index(start, n, neg ? n - 1 : 0, neg);
    const int64_t e = slice_index(stop, n, neg ? -1 : n, neg);
    std::vector<int64_t> idx;
    for (int64_t i = b; neg ? i > e : i < e; i += stride) idx.push_back(i);
    if (is_str) {
        std::u32string out;
        for (int64_t i : idx) out.push_back(cps[i]);
        return Value::string(encode_utf8(out));
    }
    std::vector<Value> out;
    for (int64_t i : idx) out.push_back(obj.items()[i]);
    return Value::list(std::move(out), obj.is_tuple());
}

std::vector<Value> iterate(const Value& value) {
    switch (value.kind()) {
        case Value::Kind::Undefined:
            return {};
        case Value::Kind::List:
            return value.items();
        case Value::Kind::String: {
            std::vector<Value> out;
            for (char32_t cp : decode_utf8(value.str())) {
                std::string ch;
                append_utf8(ch, cp);
                out.push_back(Value::string(std::move(ch)));
            }
            return out;
        }
        case Value::Kind::Dict:
            if (value.is_mapping()) {
                std::vector<Value> out;
                for (const auto& [k, v] : value.dict_obj().entries()) out.push_back(k);
                return out;
            }
            [[fallthrough]];
        default:
            fail("'{}' object is not iterable", value.type_name());
    }
}

bool contains(const Value& container, const Value& item) {
    if (container.is_string()) {
        if (!item.is_string())
            fail("'in <string>' requires string as left operand, not {}", item.type_name());
        return container.str().find(item.str()) != std::string::npos;
    }
    if (container.is_list()) {
        for (const auto& v : container.items())
            if (equals(v, item)) return true;
        return false;
    }
    if (container.is_mapping()) {
        if (item.is_list() || item.is_dict() || item.is_undefined())
            fail("unhashable type: '{}'", item.type_name());
        return container.dict_obj().find(item) != nullptr;
    }
    if (container.is_undefined()) return false;
    fail("argument of type '{}' is not iterable", container.type_name());
}

Value binary_op(Interpreter& in, Op op, const Value& a, const Value& b) {
    if (a.is_undefined()) fail("{}", a.undefined_hint());
    if (b.is_undefined()) fail("{}", b.undefined_hint());
    static constexpr std::string_view kSymbols[] = {"+", "-", "*", "/", "//", "%", "**"};
    const std::string_view symbol = kSymbols[static_cast<int>(op)];
    if (a.is_number() && b.is_number()) {
        const bool floats = a.is_float() || b.is_float();
        if (op == Op::Div || (floats && op != Op::Pow)) {
            const double x = a.to_double(), y = b.to_double();
            switch (op) {
                case Op::Add:
                    return Value::floating(x + y);
                case Op::Sub:
                    return Value::floating(x - y);
                case Op::Mul:
                    return Value::floating(x * y);
                case Op::Div:
                    if (y == 0) fail("division by zero");
                    return Value::floating(x / y);
                case Op::FloorDiv:
                    if (y == 0) fail("float floor division by zero");
                    return Value::floating(std::floor(x / y));
                case Op::Mod: {
                    if (y == 0) fail("float modulo");
                    double r = std::fmod(x, y);
                    if (r != 0 && ((r < 0) != (y < 0))) r += y;
                    return Value::floating(r);
                }
                default:
                    break;
            }
        }
        if (op == Op::Pow) {
            if (!floats && b.to_int() >= 0) {
                int64_t base = a.to_int(), e = b.to_int(), r = 1;
                while (e > 0) {
                    if ((e & 1) && __builtin_mul_overflow(r, base, &r))
                        fail("integer overflow in '**'");
                    e >>= 1;
                    if (e > 0 && __builtin_mul_overflow(base, base, &base))
                        fail("integer overflow in '**'");
                }
                return Value::integer(r);
            }
            const double x = a.to_double(), y = b.to_double();
            if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
            return Value::floating(std::pow(x, y));
        }
        const int64_t x = a.to_int(), y = b.to_int();
        int64_t r = 0;
        bool overflow = false;
        switch (op) {
            case Op::Add:
                overflow = __builtin_add_overflow(x, y, &r);
                break;
            case Op::Sub:
                overflow = __builtin_sub_overflow(x, y, &r);
                break;
            case Op::Mul:
                overflow = __builtin_mul_overflow(x, y, &r);
                break;
            case Op::FloorDiv:
            case Op::Mod: {
                if (y == 0) fail("integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) fail("integer overflow");
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
                r = op == Op::FloorDiv ? q : m;
                break;
            }
            default:
                break;
        }
        if (overflow) fail("integer overflow in '{}'", symbol);
        return Value::integer(r);
    }
    if (op == Op::Add && a.is_string() && b.is_string()) {
        in.check_string_size(a.str().size() + b.str().size());
        in.charge_bytes(a.str().size() + b.str().size());
        // markupsafe: joining a plain string to a Markup one escapes the plain one.
        if (a.is_safe() || b.is_safe())
            return Value::string((a.is_safe() ? a.str() : html_escape(a.str())) +
                                     (b.is_safe() ? b.str() : html_escape(b.str())),
                                 true);
        return Value::string(a.str() + b.str());
    }
    if (op == Op::Add && a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() &&
        !a.is_generator() && !b.is_generator()) {
        in.check_items(a.items().size() + b.items().size());
        in.charge_items(a.items().size() + b.items().size());
        std::vector<Value> items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return Value::list(std::move(items), a.is_tuple());
    }
    if (op == Op::Mul && (a.is_string() || a.is_list() || b.is_string() || b.is_list()) &&
        !a.is_generator() && !b.is_generator()) {
        const Value& seq = a.is_string() || a.is_list() ? a : b;
        const Value& count = &seq == &a ? b : a;
        if (count.is_int() || count.is_bool()) {
            const int64_t n = std::max<int64_t>(count.to_int(), 0);
            if (seq.is_string()) {
                const size_t len = seq.str().size();
                if (len && static_cast<uint64_t>(n) > SIZE_MAX / len)
                    in.check_string_size(SIZE_MAX);
                in.check_string_size(len * n);
                in.charge_bytes(len * n);
                std::string out;
                out.reserve(len * n);
                for (int64_t k = 0; k < n; ++k) out += seq.str();
                return Value::string(std::move(out));
            }
            const size_t len = seq.items().size();
            if (len && static_cast<uint64_t>(n) > SIZE_MAX / len) in.check_items(SIZE_MAX);
            in.check_items(len * n);
            in.charge_items(len * n);
            std::vector<Value> items;
            items.reserve(len * n);
            for (int64_t k = 0; k < n; ++k)
                items.insert(items.end(), seq.items().begin(), seq.items().end());
            return Value::list(std::move(items), seq.is_tuple());
        }
        fail("can't multiply sequence by non-int of type '{}'", count.type_name());
    }
    if (op == Op::Mod && a.is_string()) {
        std::string s = printf_format(in, a.str(), b);
        return Value::string(std::move(s));
    }
    if (op == Op::Add && a.is_string())
        fail("can only concatenate str (not \"{}\") to str", b.type_name());
    if (op == Op::Add && a.is_list())
        fail("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(),
             a.type_name());
    fail("unsupported operand type(s) for {}: '{}' and '{}'", symbol, a.type_name(), b.type_name());
}

std::vector<std::pair<std::string, Value>> builtin_globals() {
    std::vector<std::pair<std::string, Value>> g;
    g.emplace_back("raise_exception",
                   Value::function("raise_exception", [](Interpreter&, CallArgs& args) -> Value {
                       ArgBinder a("raise_exception", args, {"message"});
                       fail("{}", to_str(a.get_or(0, Value::string(""))));
                   }));
    g.emplace_back(
        "strftime_now", Value::function("strftime_now", [](Interpreter& in, CallArgs& args) {
            ArgBinder a("strftime_now", args, {"format"});
            const std::string format = a.get_str(0, "");
            if (format.size() > 256) fail("strftime_now() format longer than 256 bytes");
            if (format.empty()) return Value::string("");
            char buf[4096];
            // A trailing space tells "empty result" apart from "did not fit".
            const size_t n = std::strftime(buf, sizeof buf, (format + " ").c_str(), &in.now());
            if (n == 0) fail("strftime_now() result too long");
            return Value::string(std::string(buf, n - 1));
        }));
    g.emplace_back(
        "range", Value::function("range", [](Interpreter& in, CallArgs& args) {
            ArgBinder a("range", args, {"start", "stop", "step"});
            int64_t start = 0, stop = 0;
            const int64_t step = a.get_int(2, 1);
            if (a.get(1))
                start = a.get_int(0, 0), stop = a.get_int(1, 0);
            else
                stop = a.get_int(0, 0);
            if (step == 0) fail("range() arg 3 must not be zero");
            const double n =
                std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                        static_cast<double>(step)));
            if (n > 100000)
                fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
            in.charge_bytes(static_cast<size_t>(n) * 64);
            std::vector<Value> items;
            for (int64_t i = 0; i < static_cast<int64_t>(n); ++i)
                items.push_back(Value::integer(start + i * step));
            return Value::list(std::move(items));
        }));
    g.emplace_back(
        "dict", Value::function("dict", [](Interpreter&, CallArgs& args) {
            auto d = std::make_shared<DictObject>();
            if (args.positional.size() > 1)
                fail("dict expected at most 1 argument, got {}", args.positional.size());
            if (!args.positional.empty()) {
                const Value& src = args.positional[0];
                if (src.is_mapping()) {
                    for (const auto& [k, v] : src.dict_obj().entries()) d->set(k, v);
                } else {
                    for (const auto& pair : iterate(src)) {
                        const auto kv = iterate(pair);
                        if (kv.size() != 2)
                            fail("dictionary update sequence element has length {}; 2 is required",
                                 kv.size());
                        d->set(kv[0], kv[1]);
                    }
                }
            }
            for (auto& [k, v] : args.named) d->set(Value::string(k), v);
            return Value::dict(std::move(d));
        }));
    g.emplace_back(
        "namespace", Value::function("namespace", [](Interpreter& in, CallArgs& args) {
            auto ns = in.make_namespace();
            if (args.positional.size() > 1) fail("namespace expected at most 1 argument");
            auto add = [&](const Value& k, const Value& v) {
                if (k.is_string() && k.str().starts_with("_"))
                    fail("cannot store underscore-prefixed attribute '{}' on a namespace", k.str());
                ns->set(k, v);
            };
            if (!args.positional.empty()) {
                const Value& src = args.positional[0];
                if (!src.is_dict()) fail("namespace() argument must be a mapping");
                for (const auto& [k, v] : src.dict_obj().entries()) add(k, v);
            }
            for (auto& [k, v] : args.named) add(Value::string(k), v);
            return Value::dict(ns);
        }));
    return g;
}

}  // namespace headroom::jinja
