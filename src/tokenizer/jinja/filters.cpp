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

// ---- filters: one function each; `name` is the name it was called by -----

using Filter = Value (*)(Interpreter&, std::string_view name, const Value&, CallArgs&);

Value filter_length(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    return Value::integer(length_of(v));
}

Value filter_trim(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"chars"});
    std::optional<std::string> chars;
    if (a.get(0) && !a.get(0)->is_none()) chars = a.get_str(0, "");
    return Value::string(py_strip(to_str(v), chars, StripSide::Both));
}

Value filter_default(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"default_value", "boolean"});
    if (v.is_undefined() || (a.get_bool(1, false) && !v.truthy()))
        return a.get_or(0, Value::string(""));
    return v;
}

Value filter_tojson(Interpreter&, std::string_view, const Value& v, CallArgs& args) {
    return tojson(v, args);
}

Value filter_string(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    return v.is_string() ? v : Value::string(to_str(v));
}

Value filter_safe(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    return Value::string(to_str(v), true);
}

// escape and e keep a string already marked safe; forceescape escapes it again.
Value filter_escape(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    if (v.is_safe() && name != "forceescape") return v;
    return Value::string(html_escape(to_str(v)), true);
}

Value filter_upper(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    return Value::string(py_upper(to_str(v)));
}

Value filter_lower(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    return Value::string(py_lower(to_str(v)));
}

Value filter_capitalize(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    return Value::string(py_capitalize(to_str(v)));
}

// jinja2's title capitalizes after whitespace, '-', and opening brackets.
Value filter_title(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    std::string out;
    bool word_start = true;
    for (char32_t cp : decode_utf8(to_str(v))) {
        const bool sep =
            is_py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        append_utf8(out, sep ? cp : word_start ? to_upper(cp) : to_lower(cp));
        word_start = sep;
    }
    return Value::string(std::move(out));
}

Value filter_replace(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"old", "new", "count"});
    auto r = py_replace(to_str(v), to_str(a.require(0)), to_str(a.require(1)), a.get_int(2, -1),
                        SIZE_MAX);
    in.check_string_size(r->size());
    in.charge_bytes(r->size());
    return Value::string(std::move(*r));
}

Value filter_join(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"d", "attribute"});
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

// first and last.
Value filter_end(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    std::vector<Value> items = iterate(v);
    if (items.empty())
        return Value::undefined(fmt::format("No {} item, sequence was empty.", name));
    return name == "first" ? items.front() : items.back();
}

Value filter_list(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    return Value::list(iterate(v));
}

Value filter_reverse(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    if (v.is_string()) {
        std::u32string cps = decode_utf8(v.str());
        std::reverse(cps.begin(), cps.end());
        return Value::string(encode_utf8(cps));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::generator(std::move(items));
}

Value filter_items(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    if (v.is_undefined()) return Value::generator({});
    if (!v.is_mapping()) fail("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, val] : v.dict_obj().entries()) out.push_back(Value::list({k, val}, true));
    return Value::generator(std::move(out));
}

Value filter_dictsort(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"case_sensitive", "by", "reverse"});
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

Value filter_sort(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"reverse", "case_sensitive", "attribute"});
    const bool case_sensitive = a.get_bool(1, false);
    auto items = keyed(v, a.get(2), case_sensitive);
    const bool rev = a.get_bool(0, false);
    std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
        return rev ? less(y.first, x.first) : less(x.first, y.first);
    });
    std::vector<Value> out;
    for (auto& [key, item] : items) out.push_back(std::move(item));
    return Value::list(std::move(out));
}

Value filter_unique(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"case_sensitive", "attribute"});
    const bool case_sensitive = a.get_bool(0, false);
    std::vector<Value> out, seen;
    for (auto& keyed_item : keyed(v, a.get(1), case_sensitive)) {
        const Value& key = keyed_item.first;
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); }))
            continue;
        seen.push_back(key);
        out.push_back(keyed_item.second);
    }
    return Value::generator(std::move(out));
}

// min and max.
Value filter_extreme(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"case_sensitive", "attribute"});
    const bool case_sensitive = a.get_bool(0, false);
    auto items = keyed(v, a.get(1), case_sensitive);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    auto by_key = [](const auto& x, const auto& y) { return less(x.first, y.first); };
    auto it = name == "min" ? std::min_element(items.begin(), items.end(), by_key)
                            : std::max_element(items.begin(), items.end(), by_key);
    return it->second;
}

// select, reject, selectattr and rejectattr.
Value filter_select(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    const bool by_attribute = name.ends_with("attr");
    return select_items(in, v, args, by_attribute, name.starts_with("select"));
}

Value filter_map(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
    return map_items(in, v, args);
}

Value filter_int(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"default", "base"});
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

Value filter_float(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"default"});
    if (v.is_number()) return Value::floating(v.to_double());
    if (v.is_undefined()) fail("{}", v.undefined_hint());
    if (v.is_string())
        if (auto f = parse_py_float(v.str())) return Value::floating(*f);
    return a.get_or(0, Value::floating(0.0));
}

Value filter_abs(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
    if (v.is_int() || v.is_bool()) {
        if (v.to_int() == INT64_MIN) fail("integer overflow");
        return Value::integer(std::abs(v.to_int()));
    }
    fail("bad operand type for abs(): '{}'", v.type_name());
}

Value filter_round(Interpreter&, std::string_view, const Value& v, CallArgs& args) {
    return round_value(v, args);
}

Value filter_indent(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"width", "first", "blank"});
    if (v.is_undefined()) fail("{}", v.undefined_hint());
    const std::string out = indent_text(to_str(v), a.get_or(0, Value::integer(4)),
                                        a.get_bool(1, false), a.get_bool(2, false));
    in.check_string_size(out.size());
    return Value::string(out);
}

Value filter_center(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"width"});
    CallArgs method_args;
    method_args.positional.push_back(a.get_or(0, Value::integer(80)));
    return in.call(get_attribute(Value::string(to_str(v)), "center"), method_args);
}

Value filter_format(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
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

Value filter_sum(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"attribute", "start"});
    Value total = a.get_or(1, Value::integer(0));
    for (const auto& item : iterate(v))
        total = binary_op(in, Op::Add, total, a.get(0) ? lookup_path(item, *a.get(0)) : item);
    return total;
}

Value filter_attr(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"name"});
    return get_attribute(v, to_str(a.require(0)));
}

Value filter_batch(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"linecount", "fill_with"});
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

// Runs of word characters (\w+): letters, digits, underscore.
Value filter_wordcount(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    int64_t n = 0;
    bool in_word = false;
    for (char32_t cp : decode_utf8(to_str(v))) {
        const bool word = cp == '_' || (cp >= '0' && cp <= '9') || to_lower(cp) != to_upper(cp) ||
                          (cp >= 0x80 && !is_py_space(cp) && cp > 0xBF);
        if (word && !in_word) ++n;
        in_word = word;
    }
    return Value::integer(n);
}

Value filter_pprint(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    return Value::string(to_repr(v));
}

struct FilterEntry {
    std::string_view name;
    Filter apply;
    // Most filters walk their whole subject once or twice and are charged for
    // its size; these do not.
    bool constant_time = false;
};

constexpr FilterEntry kFilters[] = {
    {"abs", filter_abs},
    {"attr", filter_attr, true},
    {"batch", filter_batch},
    {"capitalize", filter_capitalize},
    {"center", filter_center},
    {"count", filter_length, true},
    {"d", filter_default, true},
    {"default", filter_default, true},
    {"dictsort", filter_dictsort},
    {"e", filter_escape},
    {"escape", filter_escape},
    {"first", filter_end, true},
    {"float", filter_float},
    {"forceescape", filter_escape},
    {"format", filter_format},
    {"indent", filter_indent},
    {"int", filter_int},
    {"items", filter_items},
    {"join", filter_join},
    {"last", filter_end, true},
    {"length", filter_length, true},
    {"list", filter_list},
    {"lower", filter_lower},
    {"map", filter_map},
    {"max", filter_extreme},
    {"min", filter_extreme},
    {"pprint", filter_pprint},
    {"reject", filter_select},
    {"rejectattr", filter_select},
    {"replace", filter_replace},
    {"reverse", filter_reverse},
    {"round", filter_round},
    {"safe", filter_safe},
    {"select", filter_select},
    {"selectattr", filter_select},
    {"sort", filter_sort},
    {"string", filter_string},
    {"sum", filter_sum},
    {"title", filter_title},
    {"tojson", filter_tojson},
    {"trim", filter_trim},
    {"unique", filter_unique},
    {"upper", filter_upper},
    {"wordcount", filter_wordcount},
};

const FilterEntry* find_filter(std::string_view name) {
    for (const auto& f : kFilters)
        if (f.name == name) return &f;
    return nullptr;
}

// ---- tests: one function each; `name` is the name it was called by -------

using Test = bool (*)(Interpreter&, std::string_view name, const Value&, CallArgs&);

// The comparison tests take one argument, `other`; the reference is into `args`.
const Value& other_arg(std::string_view name, CallArgs& args) {
    ArgBinder a(name, args, {"other"});
    return a.require(0);
}

bool test_defined(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {});
    return v.is_undefined() == (name == "undefined");
}

bool test_none(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_none();
}
bool test_string(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_string();
}
bool test_mapping(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_mapping();
}
bool test_boolean(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_bool();
}
// true and false.
bool test_bool_value(Interpreter&, std::string_view name, const Value& v, CallArgs&) {
    return v.is_bool() && v.as_bool() == (name == "true");
}
bool test_integer(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_int();
}
bool test_float(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_float();
}
bool test_number(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_number();
}
bool test_iterable(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping() ||
           (v.is_dict() && v.dict_obj().kind() == DictObject::Kind::Loop);
}
bool test_sequence(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
}
bool test_callable(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_function() || v.is_undefined();
}
bool test_escaped(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return v.is_safe();
}

// lower and upper: str.islower() / str.isupper().
bool test_case(Interpreter& in, std::string_view name, const Value& v, CallArgs&) {
    CallArgs none;
    return in
        .call(get_attribute(Value::string(to_str(v)), name == "lower" ? "islower" : "isupper"),
              none)
        .truthy();
}

// odd, even and divisibleby.
bool test_parity(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    ArgBinder a(name, args, {"num"});
    const int64_t d = name == "divisibleby" ? a.get_int(0, 1) : 2;
    if (!v.is_int() && !v.is_bool())
        fail("'{}' test needs an integer, not {}", name, v.type_name());
    const Value m = binary_op(in, Op::Mod, v, Value::integer(d));
    return name == "odd" ? m.to_int() == 1 : m.to_int() == 0;
}

bool test_eq(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    return equals(v, other_arg(name, args));
}
bool test_ne(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    return !equals(v, other_arg(name, args));
}
bool test_lt(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    return less(v, other_arg(name, args));
}
bool test_le(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    const Value& other = other_arg(name, args);
    return less(v, other) || equals(v, other);
}
bool test_gt(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    return less(other_arg(name, args), v);
}
bool test_ge(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    const Value& other = other_arg(name, args);
    return less(other, v) || equals(v, other);
}
bool test_in(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    return contains(other_arg(name, args), v);
}

// Identity: containers must be the same object; scalars compare by value
// (Python interns the small ints and strings templates compare).
bool test_sameas(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
    const Value& other = other_arg(name, args);
    if (v.kind() != other.kind()) return false;
    if (v.is_list()) return &v.list_obj() == &other.list_obj();
    if (v.is_dict()) return &v.dict_obj() == &other.dict_obj();
    if (v.is_function()) return &v.function_obj() == &other.function_obj();
    return equals(v, other);
}

bool test_filter(Interpreter&, std::string_view, const Value& v, CallArgs&);
bool test_test(Interpreter&, std::string_view, const Value& v, CallArgs&);

struct TestEntry {
    std::string_view name;
    Test apply;
};

constexpr TestEntry kTests[] = {
    {"boolean", test_boolean},
    {"callable", test_callable},
    {"defined", test_defined},
    {"divisibleby", test_parity},
    {"eq", test_eq},
    {"equalto", test_eq},
    {"==", test_eq},
    {"escaped", test_escaped},
    {"even", test_parity},
    {"false", test_bool_value},
    {"filter", test_filter},
    {"float", test_float},
    {"ge", test_ge},
    {">=", test_ge},
    {"gt", test_gt},
    {"greaterthan", test_gt},
    {">", test_gt},
    {"in", test_in},
    {"integer", test_integer},
    {"iterable", test_iterable},
    {"le", test_le},
    {"<=", test_le},
    {"lower", test_case},
    {"lt", test_lt},
    {"lessthan", test_lt},
    {"<", test_lt},
    {"mapping", test_mapping},
    {"ne", test_ne},
    {"!=", test_ne},
    {"none", test_none},
    {"number", test_number},
    {"odd", test_parity},
    {"sameas", test_sameas},
    {"sequence", test_sequence},
    {"string", test_string},
    {"test", test_test},
    {"true", test_bool_value},
    {"undefined", test_defined},
    {"upper", test_case},
};

const TestEntry* find_test(std::string_view name) {
    for (const auto& t : kTests)
        if (t.name == name) return &t;
    return nullptr;
}

bool test_filter(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return find_filter(to_str(v)) != nullptr;
}
bool test_test(Interpreter&, std::string_view, const Value& v, CallArgs&) {
    return find_test(to_str(v)) != nullptr;
}

}  // namespace

Value apply_filter(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    const FilterEntry* filter = find_filter(name);
    if (!filter) fail("no filter named '{}'", name);
    if (!filter->constant_time) {
        if (v.is_list()) in.charge_items(v.items().size());
        if (v.is_dict()) in.charge_items(v.dict_obj().size());
        if (v.is_string()) in.charge_bytes(v.str().size());
    }
    return filter->apply(in, name, v, args);
}

bool apply_test(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
    const TestEntry* test = find_test(name);
    if (!test) fail("no test named '{}'", name);
    return test->apply(in, name, v, args);
}

}  // namespace headroom::jinja
