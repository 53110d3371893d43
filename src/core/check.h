// Invariant checks. A failed CHECK is a bug in headroom, never bad input:
// it prints file, line and the condition and aborts. DCHECK compiles away in
// release builds and is meant for hot loops.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace headroom::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const char* msg) {
    std::fprintf(stderr, "%s:%d: internal error: CHECK(%s) failed%s%s\n", file, line, cond,
                 msg[0] ? ": " : "", msg);
    std::fflush(stderr);
    std::abort();
}
}  // namespace headroom::detail

#define HR_CHECK(cond)                                                                \
    do {                                                                              \
        if (!(cond)) ::headroom::detail::check_failed(__FILE__, __LINE__, #cond, ""); \
    } while (0)

#define HR_CHECK_MSG(cond, msg)                                                        \
    do {                                                                               \
        if (!(cond)) ::headroom::detail::check_failed(__FILE__, __LINE__, #cond, msg); \
    } while (0)

#ifdef NDEBUG
#define HR_DCHECK(cond) \
    do {                \
    } while (0)
#else
#define HR_DCHECK(cond) HR_CHECK(cond)
#endif
