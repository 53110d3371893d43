// jinja2's built-in filters, tests and globals, Python's str/dict/list
// methods, and the operators whose meaning depends on the operand types,
// with Python's semantics and error messages. Names that jinja2 would reject
// at compile time (an unknown filter or test) fail here when evaluated.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/value.h"

namespace headroom::jinja {

// `subject | name(args)`.
Value apply_filter(Interpreter& in, std::string_view name, const Value& subject, CallArgs& args);
// `subject is name(args)`.
bool apply_test(Interpreter& in, std::string_view name, const Value& subject, CallArgs& args);
// raise_exception, strftime_now, range, dict, namespace.
std::vector<std::pair<std::string, Value>> builtin_globals();

// `obj.name`: a bound method for str/dict/list methods, else an item of a
// dict or namespace, else Undefined. Fails when `obj` is Undefined.
Value get_attribute(const Value& obj, const std::string& name);
// `obj[key]`: an item, else an attribute (as jinja2's getitem falls back), else Undefined.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]`; null bounds are Python's None.
Value get_slice(Interpreter& in, const Value& obj, const Value* start, const Value* stop,
                const Value* step);

// Python's iter(): list items, str code points, dict keys; nothing for Undefined.
std::vector<Value> iterate(const Value& value);
// Python's `item in container`.
bool contains(const Value& container, const Value& item);
// + - * / // % ** with Python's typing rules; `%` on a str formats.
Value binary_op(Interpreter& in, Op op, const Value& a, const Value& b);
// Python's `fmt % args`; `args` is a tuple, a mapping (for %(name)s) or one value.
std::string printf_format(Interpreter& in, const std::string& fmt, const Value& args);
// Python's fmt.format(*args, **kwargs).
std::string str_format(Interpreter& in, const std::string& fmt, const CallArgs& args);

}  // namespace headroom::jinja
