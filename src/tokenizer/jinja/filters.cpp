// jinja2's built-in filters and tests (transformers replaces `tojson` with
// json.dumps(ensure_ascii=False) and its keyword arguments).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja/args.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/strings.h"

namespace headroom::jinja {

namespace {

constexpr std::string_view kFilters[] = {
    "abs",        "attr",     "batch",   "capitalize", "center", "count",  "d",
    "default",    "dictsort", "e",       "escape",     "first",  "float",  "forceescape",
    "format",     "indent",   "int",     "items",      "join",   "last",   "length",
    "list",       "lower",    "map",     "max",        "min",    "pprint", "reject",
    "rejectattr", "replace",  "reverse", "round",      "safe",   "select", "selectattr",
    "sort",       "string",   "sum",     "title",      "tojson", "trim",   "unique",
    "upper",      "wordcount"};
constexpr std::string_view kTests[] = {
    "boolean",  "callable", "defined", "divisibleby", "eq",   "equalto",   "==",     "escaped",
    "even",     "false",    "filter",  "float",       "ge",   ">=",        "gt",     "greaterthan",
    ">",        "in",       "integer", "iterable",    "le",   "<=",        "lower",  "lt",
    "lessthan", "<",        "mapping", "ne",          "!=",   "none",      "number", "odd",
    "sameas",   "sequence", "string",  "test",        "true", "undefined", "upper"};

template <size_t N>
bool one_of(const std::string_view (&names)[N], std::string_view name) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

int64_t length_of(const Value& v) {
    if (v.is_string()) return static_cast<int64_t>(utf8_length(v.str()));
    if (v.is_list() && !v.is_generator()) return static_cast<int64_t>(v.items().size());
    if (v.is_mapping()) return static_cast<int64_t>(v.dict_obj().size());
    if (v.is_undefined()) return 0;
    fail("object of type '{}' has no len()", v.type_name());
}

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value lookup_path(const Value& item, const Value& attribute) {
    if (attribute.is_int()) return get_item(item, attribute);
    Value v = item;
    const std::string path = to_str(attribute);
    size_t start = 0;
    while (true) {
        const size_t dot = path.find('.', start);
        const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
        const auto index = parse_py_int(part, 10);
        v = get_item(v, index && !part.empty() && part[0] != '+' && part[0] != ' '
                            ? Value::integer(*index)
                            : Value::string(part));
        if (dot == std::string::npos) return v;
        start = dot + 1;
    }
}

// Sort key for the case-insensitive filters (sort, dictsort, unique, min, max).
Value fold_case(const Value& v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.str()));
    return v;
}

CallArgs tail_args(const CallArgs& args, size_t from) {
    CallArgs out;
    for (size_t i = from; i < args.positional.size(); ++i)
        out.positional.push_back(args.positional[i]);
    out.named = args.named;
    return out;
}

// select / reject / selectattr / rejectattr.
Value select_items(Interpreter& in, const Value& seq, CallArgs& args, bool by_attribute,
                   bool keep) {
    std::vector<Value> out;
    const size_t test_at = by_attribute ? 1 : 0;
    if (by_attribute && args.positional.empty()) fail("missing attribute for select/reject");
    if (!seq.truthy()) return Value::generator({});
    for (const auto& item : iterate(seq)) {
        const Value subject = by_attribute ? lookup_path(item, args.positional[0]) : item;
        bool pass = false;
        if (args.positional.size() > test_at) {
            CallArgs test_args = tail_args(args, test_at + 1);
            pass = apply_test(in, to_str(args.positional[test_at]), subject, test_args);
        } else {
            pass = subject.truthy();
        }
        if (pass == keep) out.push_back(item);
    }
    return Value::generator(std::move(out));
}

Value map_items(Interpreter& in, const Value& seq, CallArgs& args) {
    std::vector<Value> out;
    if (!seq.truthy()) return Value::generator({});
    const Value* attribute = nullptr;
    const Value* fallback = nullptr;
    for (const auto& [k, v] : args.named) {
        if (k == "attribute") attribute = &v;
        if (k == "default") fallback = &v;
    }
    if (attribute) {
        for (const auto& item : iterate(seq)) {
            Value v = lookup_path(item, *attribute);
            out.push_back(v.is_undefined() && fallback ? *fallback : v);
        }
        return Value::generator(std::move(out));
    }
    if (args.positional.empty()) fail("map() needs a filter name or attribute=");
    const std::string filter = to_str(args.positional[0]);
    for (const auto& item : iterate(seq)) {
        CallArgs filter_args = tail_args(args, 1);
        out.push_back(apply_filter(in, filter, item, filter_args));
    }
    return Value::generator(std::move(out));
}

// sort / min / max / unique share their key: an optional attribute, case-folded.
std::vector<std::pair<Value, Value>> keyed(const Value& seq, const Value* attribute,
                                           bool case_sensitive) {
    std::vector<std::pair<Value, Value>> out;
    for (const auto& item : iterate(seq))
        out.emplace_back(
            fold_case(attribute ? lookup_path(item, *attribute) : item, case_sensitive), item);
    return out;
}

std::string indent_text(const std::string& s, const Value& width, bool first, bool blank) {
    const std::string indention =
        width.is_string()
            ? width.str()
            : std::string(
                  static_cast<size_t>(std::max<int64_t>(width.is_number() ? width.to_int() : 4, 0)),
                  ' ');
    // jinja2 appends a newline before splitting, so a trailing newline is kept.
    const std::vector<std::string> lines = py_splitlines(s + "\n", false);
    std::string rv;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i) rv += "\n";
        if (i && (blank || !lines[i].empty())) rv += indention;
        rv += lines[i];
    }
    if (first) rv = indention + rv;
    return rv;
}

Value tojson(const Value& v, CallArgs& args) {
    ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonOptions o;
    o.ensure_ascii = a.get_bool(0, false);
    const Value indent = a.get_or(1, Value::none());
    if (!indent.is_none()) {
        o.pretty = true;
        o.item_separator.assign(1, ',');
        o.indent = indent.is_string()
                       ? indent.str()
                       : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                         indent.is_number() ? indent.to_int() : 0, 0, 64)),
                                     ' ');
    }
    if (const Value* sep = a.get(2); sep && !sep->is_none()) {
        if (!sep->is_list() || sep->items().size() != 2 || !sep->items()[0].is_string() ||
            !sep->items()[1].is_string())
            fail("tojson() separators must be a pair of strings");
        o.item_separator = sep->items()[0].str();
        o.key_separator = sep->items()[1].str();
    }
    o.sort_keys = a.get_bool(3, false);
    return Value::string(to_json(v, o));
}

Value round_value(const Value& v, CallArgs& args) {
    ArgBinder a("round", args, {"precision", "method"});
    const int64_t precision = a.get_int(0, 0);
    const std::string method = a.get_str(1, "common");
    if (!v.is_number()) fail("type {} doesn't define __round__ method", v.type_name());
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.to_double() * scale;
    double r;
    if (method == "common")
        r = std::nearbyint(x);  // Python rounds halves to even
    else if (method == "ceil")
        r = std::ceil(x);
    else if (method == "floor")
        r = std::floor(x);
    else
        fail("method must be common, ceil or floor");
    return Value::floating(r / scale);
}

}  // namespace

Value apply_filter(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    if (!one_of(kFilters, name)) fail("no filter named '{}'", name);
    // Most filters walk their whole subject once or twice; these few do not.
    const bool constant_time = name == "length" || name == "count" || name == "default" ||
                               name == "d" || name == "first" || name == "last" || name == "attr";
    if (!constant_time) {
        if (v.is_list()) in.charge_items(v.items().size());
        if (v.is_dict()) in.charge_items(v.dict_obj().size());
        if (v.is_string()) in.charge_bytes(v.str().size());
    }
    const std::string fn(name);
    if (name == "length" || name == "count") {
        ArgBinder a(fn, args, {});
        return Value::integer(length_of(v));
    }
    if (name == "trim") {
        ArgBinder a(fn, args, {"chars"});
        std::optional<std::string> chars;
        if (a.get(0) && !a.get(0)->is_none()) chars = a.get_str(0, "");
        return Value::string(py_strip(to_str(v), chars, StripSide::Both));
    }
    if (name == "default" || name == "d") {
        ArgBinder a(fn, args, {"default_value", "boolean"});
        if (v.is_undefined() || (a.get_bool(1, false) && !v.truthy()))
            return a.get_or(0, Value::string(""));
        return v;
    }
    if (name == "tojson") return tojson(v, args);
    if (name == "string") {
        ArgBinder a(fn, args, {});
        return v.is_string() ? v : Value::string(to_str(v));
    }
    if (name == "safe") {
        ArgBinder a(fn, args, {});
        return Value::string(to_str(v), true);
    }
    if (name == "escape" || name == "e" || name == "forceescape") {
        ArgBinder a(fn, args, {});
        if (v.is_safe() && name != "forceescape") return v;
        return Value::string(html_escape(to_str(v)), true);
    }
    if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
        ArgBinder a(fn, args, {});
        const std::string s = to_str(v);
        if (name == "upper") return Value::string(py_upper(s));
        if (name == "lower") return Value::string(py_lower(s));
        if (name == "capitalize") return Value::string(py_capitalize(s));
        // jinja2's title capitalizes after whitespace, '-', and opening brackets.
        std::string out;
        bool word_start = true;
        for (char32_t cp : decode_utf8(s)) {
            const bool sep =
                is_py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            append_utf8(out, sep ? cp : word_start ? to_upper(cp) : to_lower(cp));
            word_start = sep;
        }
        return Value::string(std::move(out));
    }
    if (name == "replace") {
        ArgBinder a(fn, args, {"old", "new", "count"});
        auto r = py_replace(to_str(v), to_str(a.require(0)), to_str(a.require(1)), a.get_int(2, -1),
                            SIZE_MAX);
        in.check_string_size(r->size());
        in.charge_bytes(r->size());
        return Value::string(std::move(*r));
    }
    if (name == "join") {
        ArgBinder a(fn, args, {"d", "attribute"});
        const std::string sep =
            a.get_or(0, Value::string("")).is_string() ? a.get_str(0, "") : to_str(*a.get(0));
        std::string out;
        bool first = true;
        for (const auto& item : iterate(v)) {
            if (!first) out += sep;
            first = false;
            out += to_str(a.get(1) ? lookup_path(item, *a.get(1)) : item);
            in.check_string_size(out.size());
        }
        in.charge_bytes(out.size());
        return Value::string(std::move(out));
    }
    if (name == "first" || name == "last") {
        ArgBinder a(fn, args, {});
        std::vector<Value> items = iterate(v);
        if (items.empty())
            return Value::undefined(fmt::format("No {} item, sequence was empty.", name));
        return name == "first" ? items.front() : items.back();
    }
    if (name == "list") {
        ArgBinder a(fn, args, {});
        return Value::list(iterate(v));
    }
    if (name == "reverse") {
        ArgBinder a(fn, args, {});
        if (v.is_string()) {
            std::u32string cps = decode_utf8(v.str());
            std::reverse(cps.begin(), cps.end());
            return Value::string(encode_utf8(cps));
        }
        std::vector<Value> items = iterate(v);
        std::reverse(items.begin(), items.end());
        return Value::generator(std::move(items));
    }
    if (name == "items") {
        ArgBinder a(fn, args, {});
        if (v.is_undefined()) return Value::generator({});
        if (!v.is_mapping()) fail("Can only get item pairs from a mapping.");
        std::vector<Value> out;
        for (const auto& [k, val] : v.dict_obj().entries())
            out.push_back(Value::list({k, val}, true));
        return Value::generator(std::move(out));
    }
    if (name == "dictsort") {
        ArgBinder a(fn, args, {"case_sensitive", "by", "reverse"});
        if (!v.is_mapping()) fail("dictsort() needs a mapping, not {}", v.type_name());
        const bool cs = a.get_bool(0, false);
        const std::string by = a.get_str(1, "key");
        if (by != "key" && by != "value") fail("You can only sort by either 'key' or 'value'");
        std::vector<Value> entries;
        for (const auto& [k, val] : v.dict_obj().entries())
            entries.push_back(Value::list({k, val}, true));
        const size_t pos = by == "key" ? 0 : 1;
        std::stable_sort(entries.begin(), entries.end(), [&](const Value& x, const Value& y) {
            return less(fold_case(x.items()[pos], cs), fold_case(y.items()[pos], cs));
        });
        if (a.get_bool(2, false)) std::reverse(entries.begin(), entries.end());
        return Value::list(std::move(entries));
    }
    if (name == "sort" || name == "unique" || name == "min" || name == "max") {
        const bool is_sort = name == "sort";
        ArgBinder a(
            fn, args,
            is_sort
                ? std::initializer_list<std::string_view>{"reverse", "case_sensitive", "attribute"}
                : std::initializer_list<std::string_view>{"case_sensitive", "attribute"});
        const bool cs = a.get_bool(is_sort ? 1 : 0, false);
        auto items = keyed(v, a.get(is_sort ? 2 : 1), cs);
        if (name == "unique") {
            std::vector<Value> out, seen;
            for (auto& entry : items) {
                const Value& key = entry.first;
                if (std::any_of(seen.begin(), seen.end(),
                                [&](const Value& s) { return equals(s, key); }))
                    continue;
                seen.push_back(key);
                out.push_back(entry.second);
            }
            return Value::generator(std::move(out));
        }
        auto by_key = [](const auto& x, const auto& y) { return less(x.first, y.first); };
        if (is_sort) {
            const bool rev = a.get_bool(0, false);
            std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
                return rev ? less(y.first, x.first) : less(x.first, y.first);
            });
            std::vector<Value> out;
            for (auto& [key, item] : items) out.push_back(std::move(item));
            return Value::list(std::move(out));
        }
        if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        auto it = name == "min" ? std::min_element(items.begin(), items.end(), by_key)
                                : std::max_element(items.begin(), items.end(), by_key);
        return it->second;
    }
    if (name == "map") return map_items(in, v, args);
    if (name == "select" || name == "reject")
        return select_items(in, v, args, false, name == "select");
    if (name == "selectattr" || name == "rejectattr")
        return select_items(in, v, args, true, name == "selectattr");
    if (name == "int") {
        ArgBinder a(fn, args, {"default", "base"});
        const Value fallback = a.get_or(0, Value::integer(0));
        if (v.is_int()) return v;
        if (v.is_bool()) return Value::integer(v.to_int());
        if (v.is_float()) {
            if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) >= 9.2e18)
                fail("cannot convert float {} to integer", float_repr(v.as_float()));
            return Value::integer(static_cast<int64_t>(v.as_float()));
        }
        if (v.is_undefined()) fail("{}", v.undefined_hint());
        if (v.is_string()) {
            if (auto i = parse_py_int(v.str(), static_cast<int>(a.get_int(1, 10))))
                return Value::integer(*i);
            if (auto f = parse_py_float(v.str()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18)
                return Value::integer(static_cast<int64_t>(*f));
        }
        return fallback;
    }
    if (name == "float") {
        ArgBinder a(fn, args, {"default"});
        if (v.is_number()) return Value::floating(v.to_double());
        if (v.is_undefined()) fail("{}", v.undefined_hint());
        if (v.is_string())
            if (auto f = parse_py_float(v.str())) return Value::floating(*f);
        return a.get_or(0, Value::floating(0.0));
    }
    if (name == "abs") {
        ArgBinder a(fn, args, {});
        if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
        if (v.is_int() || v.is_bool()) {
            if (v.to_int() == INT64_MIN) fail("integer overflow");
            return Value::integer(std::abs(v.to_int()));
        }
        fail("bad operand type for abs(): '{}'", v.type_name());
    }
    if (name == "round") return round_value(v, args);
    if (name == "indent") {
        ArgBinder a(fn, args, {"width", "first", "blank"});
        if (v.is_undefined()) fail("{}", v.undefined_hint());
        const std::string out = indent_text(to_str(v), a.get_or(0, Value::integer(4)),
                                            a.get_bool(1, false), a.get_bool(2, false));
        in.check_string_size(out.size());
        return Value::string(out);
    }
    if (name == "center") {
        ArgBinder a(fn, args, {"width"});
        CallArgs method_args;
        method_args.positional.push_back(a.get_or(0, Value::integer(80)));
        return in.call(get_attribute(Value::string(to_str(v)), "center"), method_args);
    }
    if (name == "format") {
        if (!args.named.empty() && !args.positional.empty())
            fail("can't handle positional and keyword arguments at the same time");
        Value fmt_args;
        if (!args.named.empty()) {
            auto d = std::make_shared<DictObject>();
            for (auto& [k, val] : args.named) d->set(Value::string(k), val);
            fmt_args = Value::dict(std::move(d));
        } else {
            fmt_args = Value::list(args.positional, true);
        }
        return Value::string(printf_format(in, to_str(v), fmt_args));
    }
    if (name == "sum") {
        ArgBinder a(fn, args, {"attribute", "start"});
        Value total = a.get_or(1, Value::integer(0));
        for (const auto& item : iterate(v))
            total = binary_op(in, Op::Add, total, a.get(0) ? lookup_path(item, *a.get(0)) : item);
        return total;
    }
    if (name == "attr") {
        ArgBinder a(fn, args, {"name"});
        return get_attribute(v, to_str(a.require(0)));
    }
    if (name == "batch") {
        ArgBinder a(fn, args, {"linecount", "fill_with"});
        const int64_t n = a.get_int(0, 1);
        if (n <= 0) fail("batch() linecount must be positive");
        std::vector<Value> out, current;
        for (const auto& item : iterate(v)) {
            current.push_back(item);
            if (static_cast<int64_t>(current.size()) == n)
                out.push_back(Value::list(std::move(current))), current = {};
        }
        if (!current.empty()) {
            if (a.get(1))
                while (static_cast<int64_t>(current.size()) < n) current.push_back(*a.get(1));
            out.push_back(Value::list(std::move(current)));
        }
        return Value::generator(std::move(out));
    }
    if (name == "wordcount") {
        ArgBinder a(fn, args, {});
        // Runs of word characters (\w+): letters, digits, underscore.
        int64_t n = 0;
        bool in_word = false;
        for (char32_t cp : decode_utf8(to_str(v))) {
            const bool word = cp == '_' || (cp >= '0' && cp <= '9') ||
                              to_lower(cp) != to_upper(cp) ||
                              (cp >= 0x80 && !is_py_space(cp) && cp > 0xBF);
            if (word && !in_word) ++n;
            in_word = word;
        }
        return Value::integer(n);
    }
    if (name == "pprint") {
        ArgBinder a(fn, args, {});
        return Value::string(to_repr(v));
    }
    fail("no filter named '{}'", name);
}

bool apply_test(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    if (!one_of(kTests, name)) fail("no test named '{}'", name);
    const std::string fn(name);
    if (name == "defined" || name == "undefined") {
        ArgBinder a(fn, args, {});
        return v.is_undefined() == (name == "undefined");
    }
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_mapping();
    if (name == "boolean") return v.is_bool();
    if (name == "true" || name == "false") return v.is_bool() && v.as_bool() == (name == "true");
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "number") return v.is_number();
    if (name == "iterable")
        return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping() ||
               (v.is_dict() && v.dict_obj().kind() == DictObject::Kind::Loop);
    if (name == "sequence")
        return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
    if (name == "callable") return v.is_function() || v.is_undefined();
    if (name == "escaped") return v.is_safe();
    if (name == "lower" || name == "upper") {
        CallArgs none;
        return in
            .call(get_attribute(Value::string(to_str(v)), name == "lower" ? "islower" : "isupper"),
                  none)
            .truthy();
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
        ArgBinder a(fn, args, {"num"});
        const int64_t d = name == "divisibleby" ? a.get_int(0, 1) : 2;
        if (!v.is_int() && !v.is_bool())
            fail("'{}' test needs an integer, not {}", name, v.type_name());
        const Value m = binary_op(in, Op::Mod, v, Value::integer(d));
        return name == "odd" ? m.to_int() == 1 : m.to_int() == 0;
    }
    if (name == "filter" || name == "test") {
        const std::string target = to_str(v);
        return name == "filter" ? one_of(kFilters, target) : one_of(kTests, target);
    }
    ArgBinder a(fn, args, {"other"});
    const Value& other = a.require(0);
    if (name == "eq" || name == "equalto" || name == "==") return equals(v, other);
    if (name == "ne" || name == "!=") return !equals(v, other);
    if (name == "lt" || name == "lessthan" || name == "<") return less(v, other);
    if (name == "le" || name == "<=") return less(v, other) || equals(v, other);
    if (name == "gt" || name == "greaterthan" || name == ">") return less(other, v);
    if (name == "ge" || name == ">=") return less(other, v) || equals(v, other);
    if (name == "in") return contains(other, v);
    if (name == "sameas") {
        // Identity: containers must be the same object; scalars compare by value
        // (Python interns the small ints and strings templates compare).
        if (v.kind() != other.kind()) return false;
        if (v.is_list()) return &v.list_obj() == &other.list_obj();
        if (v.is_dict()) return &v.dict_obj() == &other.dict_obj();
        if (v.is_function()) return &v.function_obj() == &other.function_obj();
        return equals(v, other);
    }
    fail("no test named '{}'", name);
}

}  // namespace headroom::jinja
