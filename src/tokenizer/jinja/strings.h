// Python str operations on UTF-8 text, for the Jinja interpreter. Python
// strings are sequences of code points, so lengths, indices and slices here
// count code points, not bytes. Bytes that are not valid UTF-8 decode to
// U+DC80..U+DCFF (Python's surrogateescape) and encode back to the same
// byte, so any input round-trips unchanged.
//
// Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic;
// other scripts are left as they are.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace headroom::jinja {

std::u32string decode_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(std::u32string_view s);
size_t utf8_length(std::string_view s);

// str.isspace() for one code point.
bool is_py_space(char32_t cp);
char32_t to_upper(char32_t cp);
char32_t to_lower(char32_t cp);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
// str.capitalize(): first code point upper, the rest lower.
std::string py_capitalize(std::string_view s);
// str.title(): a cased letter after an uncased one starts a word.
std::string py_title(std::string_view s);

enum class StripSide { Both, Left, Right };
// str.strip(chars); no `chars` strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, StripSide side);
// str.split(sep, maxsplit) / rsplit; no `sep` splits on runs of whitespace.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
// str.splitlines(keepends).
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// str.replace(old, new, count); count < 0 replaces all. Fails (returns
// nullopt) when the result would exceed `max_bytes`.
std::optional<std::string> py_replace(std::string_view s, std::string_view old,
                                      std::string_view replacement, int64_t count,
                                      size_t max_bytes);
// str.count(sub) (non-overlapping).
int64_t py_count(std::string_view s, std::string_view sub);
// str.find / rfind in code points; -1 when absent.
int64_t py_find(std::string_view s, std::string_view sub, bool from_right);

// Python's int(str, base) for base 10 or 0 (prefix-detected); nullopt if invalid.
std::optional<int64_t> parse_py_int(std::string_view s, int base);
// Python's float(str); nullopt if invalid.
std::optional<double> parse_py_float(std::string_view s);

}  // namespace headroom::jinja
