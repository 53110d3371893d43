// Values of the Jinja subset used by chat templates. They follow Python's
// semantics, because the templates are written against jinja2 and their
// output must match it byte for byte: str() and repr() of every type,
// truthiness, == across int/float/bool, ordered dicts, and an Undefined that
// renders as "" but fails when used as an object (jinja2's default Undefined).
//
// Strings are immutable and shared (like Python's), so copying a Value is
// cheap; lists and dicts are shared too. Templates cannot mutate lists or
// dicts (the sandbox forbids append/pop/update), only namespace attributes, so
// sharing is never observable except through namespaces, as in Python.
//
// Containers record their nesting depth when built; building one deeper than
// kMaxDepth fails, which bounds every recursive walk (repr, tojson, ==) and
// the destructor's recursion on hostile templates.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace headroom::jinja {

class Value;
class Interpreter;
struct CallArgs;

inline constexpr int kMaxDepth = 256;

// Bytes held by the strings, lists and dicts a render creates. Each value is
// small enough on its own (strings are capped), but a template could keep
// many of them; the budget bounds their sum while they are alive.
class MemoryBudget {
  public:
    explicit MemoryBudget(size_t max_bytes) : max_bytes_(max_bytes) {}
    // Throws headroom::Error when the live total would pass max_bytes.
    void charge(size_t n_bytes);
    void release(size_t n_bytes) { used_bytes_ -= n_bytes; }
    size_t used_bytes() const { return used_bytes_; }

  private:
    size_t max_bytes_;
    size_t used_bytes_ = 0;
};

// While alive, values created on this thread are charged to `budget` (and
// give the bytes back when destroyed). Values created outside any scope are free.
class ChargeValuesTo {
  public:
    explicit ChargeValuesTo(std::shared_ptr<MemoryBudget> budget);
    ~ChargeValuesTo();
    ChargeValuesTo(const ChargeValuesTo&) = delete;
    ChargeValuesTo& operator=(const ChargeValuesTo&) = delete;

  private:
    std::shared_ptr<MemoryBudget> previous_;
};

struct ListObject {
    std::vector<Value> items;
    bool is_tuple = false;
    // The lazy result of map/select/...: always true, no len(), no indexing.
    bool is_generator = false;
    int depth = 1;
};

// An insertion-ordered dict. Keys are scalars (str, int, float, bool, None);
// int-valued floats and bools hash like ints, as in Python.
class DictObject {
  public:
    enum class Kind : uint8_t { Dict, Namespace, Loop };

    explicit DictObject(Kind kind = Kind::Dict);
    ~DictObject();
    DictObject(const DictObject&) = delete;
    DictObject& operator=(const DictObject&) = delete;
    Kind kind() const { return kind_; }
    size_t size() const;  // defined below, once Value is complete
    const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
    // nullptr when absent. Throws headroom::Error for an unhashable key.
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const;
    void set(Value key, Value value);
    // Replaces the value of entry `index` (in entries() order) in place.
    void set_at(size_t index, Value value);
    int depth() const { return depth_; }
    // Drops every entry; breaks namespace reference cycles at the end of a render.
    void clear();

  private:
    Kind kind_;
    int depth_ = 1;
    std::shared_ptr<MemoryBudget> budget_;
    size_t charged_bytes_ = 0;
    std::vector<std::pair<Value, Value>> entries_;
    std::unordered_map<std::string, size_t> index_;  // hash key -> position in entries_
};

struct Function {
    std::string name;
    std::function<Value(Interpreter&, CallArgs&)> call;
};

class Value {
  public:
    enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

    // Undefined; `hint` is jinja2's message for using it ("'x' is undefined").
    Value() = default;
    static Value undefined(std::string hint);
    static Value none();
    static Value boolean(bool b);
    static Value integer(int64_t i);
    static Value floating(double f);
    static Value string(std::string s, bool safe = false);
    static Value list(std::vector<Value> items, bool is_tuple = false);
    static Value generator(std::vector<Value> items);
    static Value dict(std::shared_ptr<DictObject> dict);
    static Value function(std::string name, std::function<Value(Interpreter&, CallArgs&)> call);

    Kind kind() const { return static_cast<Kind>(data_.index()); }
    bool is_undefined() const { return kind() == Kind::Undefined; }
    bool is_none() const { return kind() == Kind::None; }
    bool is_bool() const { return kind() == Kind::Bool; }
    bool is_int() const { return kind() == Kind::Int; }
    bool is_float() const { return kind() == Kind::Float; }
    // int, float or bool (bool is an int in Python).
    bool is_number() const { return is_int() || is_float() || is_bool(); }
    bool is_string() const { return kind() == Kind::String; }
    bool is_list() const { return kind() == Kind::List; }
    bool is_tuple() const { return is_list() && list_obj().is_tuple; }
    bool is_generator() const { return is_list() && list_obj().is_generator; }
    bool is_dict() const { return kind() == Kind::Dict; }
    // A plain dict (jinja2's `mapping`), not a namespace or loop object.
    bool is_mapping() const { return is_dict() && dict_obj().kind() == DictObject::Kind::Dict; }
    bool is_function() const { return kind() == Kind::Function; }
    // A string marked safe (markupsafe.Markup): `+` escapes plain strings joined to it.
    bool is_safe() const { return safe_; }

    const std::string& undefined_hint() const;
    bool as_bool() const { return std::get<bool>(data_); }
    int64_t as_int() const { return std::get<int64_t>(data_); }
    double as_float() const { return std::get<double>(data_); }
    // Precondition: is_number().
    double to_double() const;
    // Precondition: is_int() or is_bool().
    int64_t to_int() const { return is_bool() ? as_bool() : as_int(); }
    const std::string& str() const { return *std::get<StringPtr>(data_); }
    const ListObject& list_obj() const { return *std::get<ListPtr>(data_); }
    const std::vector<Value>& items() const { return list_obj().items; }
    const DictObject& dict_obj() const { return *std::get<DictPtr>(data_); }
    DictObject& dict_mut() const { return *std::get<DictPtr>(data_); }
    const std::shared_ptr<DictObject>& dict_ptr() const { return std::get<DictPtr>(data_); }
    const Function& function_obj() const { return *std::get<FunctionPtr>(data_); }

    // Nesting depth of containers (1 for a scalar).
    int depth() const;
    // Python truthiness.
    bool truthy() const;
    // Python's type name, for messages ("str", "NoneType", "dict").
    std::string type_name() const;

  private:
    struct UndefinedData {
        std::shared_ptr<const std::string> hint;
    };
    struct NoneData {};
    using StringPtr = std::shared_ptr<const std::string>;
    using ListPtr = std::shared_ptr<const ListObject>;
    using DictPtr = std::shared_ptr<DictObject>;
    using FunctionPtr = std::shared_ptr<const Function>;

    // Alternative order matches Kind.
    std::variant<UndefinedData, NoneData, bool, int64_t, double, StringPtr, ListPtr, DictPtr,
                 FunctionPtr>
        data_;
    bool safe_ = false;
};

// Text built from a value (str, repr, JSON) fails beyond this size: a small
// list can repeat one large string many times.
inline constexpr size_t kMaxTextBytes = size_t{64} << 20;

// Python's str(): what `{{ value }}` prints ("None", "True", "['a', 1]"; "" for Undefined).
std::string to_str(const Value& value);
// Python's repr() ("'a'", "{'k': [1, 2.5]}").
std::string to_repr(const Value& value);
// Python's repr() of a float ("2.0", "1e+16", "0.30000000000000004").
std::string float_repr(double f);

// Python's ==.
bool equals(const Value& a, const Value& b);
// Python's <; throws headroom::Error for unordered types ("'<' not supported ...").
bool less(const Value& a, const Value& b);

struct JsonOptions {
    std::string indent;  // used when `pretty`
    bool pretty = false;
    std::string item_separator = ", ";
    std::string key_separator = ": ";
    bool sort_keys = false;
    bool ensure_ascii = false;
};
// Python's json.dumps; throws headroom::Error for values JSON cannot hold.
std::string to_json(const Value& value, const JsonOptions& options);

// HTML escaping as markupsafe.escape does it (&, <, >, ", ').
std::string html_escape(std::string_view s);

inline size_t DictObject::size() const {
    return entries_.size();
}

}  // namespace headroom::jinja
