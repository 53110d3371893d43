// Errors on the cold path (load, configuration, start-up) are thrown as one
// type whose message is meant for a person: the function or file, the bad
// value and what was expected. They are caught once, at the CLI's main, the
// HTTP handler and the public API. Hot paths return status values instead.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace headroom {

class Error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace headroom
