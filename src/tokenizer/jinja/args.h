// Binds the arguments of a built-in filter, test, global or method to a
// Python-style signature, with Python's messages for a surplus or unknown
// argument.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/jinja/interpreter.h"

namespace headroom::jinja {

class ArgBinder {
  public:
    // Positional arguments fill `params` in order; keywords fill them by name.
    // With `rest`, surplus positional arguments are kept for rest() instead of failing.
    ArgBinder(std::string_view fn, const CallArgs& args,
              std::initializer_list<std::string_view> params, bool rest = false)
        : fn_(fn), params_(params), bound_(params.size(), nullptr) {
        for (size_t i = 0; i < args.positional.size(); ++i) {
            if (i < bound_.size())
                bound_[i] = &args.positional[i];
            else if (rest)
                rest_.push_back(args.positional[i]);
            else
                fail("{}() takes at most {} argument(s) ({} given)", fn, params.size(),
                     args.positional.size());
        }
        for (const auto& [name, value] : args.named) {
            size_t k = 0;
            while (k < params_.size() && params_[k] != name) ++k;
            if (k == params_.size()) fail("{}() got an unexpected keyword argument '{}'", fn, name);
            if (bound_[k]) fail("{}() got multiple values for argument '{}'", fn, name);
            bound_[k] = &value;
        }
    }

    // nullptr when the argument was not given.
    const Value* get(size_t i) const { return bound_[i]; }
    Value get_or(size_t i, Value fallback) const { return bound_[i] ? *bound_[i] : fallback; }
    const Value& require(size_t i) const {
        if (!bound_[i]) fail("{}() missing required argument '{}'", fn_, params_[i]);
        return *bound_[i];
    }
    // An int argument (bools count as ints), else `fallback` when absent.
    int64_t get_int(size_t i, int64_t fallback) const {
        if (!bound_[i] || bound_[i]->is_none()) return fallback;
        if (!bound_[i]->is_int() && !bound_[i]->is_bool())
            fail("{}() argument '{}' must be an integer, not {}", fn_, params_[i],
                 bound_[i]->type_name());
        return bound_[i]->to_int();
    }
    bool get_bool(size_t i, bool fallback) const {
        return bound_[i] ? bound_[i]->truthy() : fallback;
    }
    std::string get_str(size_t i, std::string fallback) const {
        if (!bound_[i]) return fallback;
        if (!bound_[i]->is_string())
            fail("{}() argument '{}' must be a string, not {}", fn_, params_[i],
                 bound_[i]->type_name());
        return bound_[i]->str();
    }
    const std::vector<Value>& rest() const { return rest_; }

  private:
    std::string_view fn_;
    std::vector<std::string_view> params_;
    std::vector<const Value*> bound_;
    std::vector<Value> rest_;
};

}  // namespace headroom::jinja
