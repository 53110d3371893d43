// Python's string formatting: `fmt % args` (printf style, also the `format`
// filter) and str.format() with the format-spec mini-language.
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/strings.h"

namespace headroom::jinja {

namespace {

// One field of Python's format-spec mini-language:
// [[fill]align][sign][#][0][width][,|_][.precision][type]
std::string format_field(Interpreter& in, const Value& v, std::string_view spec) {
    if (spec.empty()) return to_str(v);
    const std::u32string s = decode_utf8(spec);
    size_t i = 0;
    char32_t fill = ' ';
    char align = 0;
    auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
    if (s.size() >= 2 && is_align(s[1]))
        fill = s[0], align = static_cast<char>(s[1]), i = 2;
    else if (!s.empty() && is_align(s[0]))
        align = static_cast<char>(s[0]), i = 1;
    char sign = '-';
    if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' '))
        sign = static_cast<char>(s[i++]);
    bool alt = false;
    if (i < s.size() && s[i] == '#') alt = true, ++i;
    if (i < s.size() && s[i] == '0' && !align) fill = '0', align = '=', ++i;
    size_t width = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') width = width * 10 + (s[i++] - '0');
    char grouping = 0;
    if (i < s.size() && (s[i] == ',' || s[i] == '_')) grouping = static_cast<char>(s[i++]);
    int precision = -1;
    if (i < s.size() && s[i] == '.') {
        precision = 0;
        ++i;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9')
            precision = precision * 10 + (s[i++] - '0');
    }
    char type = i < s.size() ? static_cast<char>(s[i++]) : 0;
    if (i != s.size()) fail("Invalid format specifier '{}'", spec);
    in.check_string_size(width);
    std::string body, prefix;
    if (v.is_string() || (!v.is_number() && type == 0)) {
        if (type != 0 && type != 's')
            fail("Unknown format code '{}' for object of type 'str'", type);
        body = to_str(v);
        if (precision >= 0) body = encode_utf8(decode_utf8(body).substr(0, precision));
        if (!align) align = '<';
    } else {
        if (!v.is_number())
            fail("Unknown format code '{}' for object of type '{}'", type, v.type_name());
        if (!align) align = '>';
        const bool as_int =
            (v.is_int() || v.is_bool()) &&
            (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b');
        if (as_int) {
            const int64_t n = v.to_int();
            const uint64_t mag = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
            if (n < 0)
                prefix = "-";
            else if (sign != '-')
                prefix = std::string(1, sign);
            switch (type) {
                case 'x':
                    body = fmt::format("{:x}", mag), prefix += alt ? "0x" : "";
                    break;
                case 'X':
                    body = fmt::format("{:X}", mag), prefix += alt ? "0X" : "";
                    break;
                case 'o':
                    body = fmt::format("{:o}", mag), prefix += alt ? "0o" : "";
                    break;
                case 'b':
                    body = fmt::format("{:b}", mag), prefix += alt ? "0b" : "";
                    break;
                default:
                    body = std::to_string(mag);
            }
        } else {
            if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b')
                fail("Unknown format code '{}' for object of type 'float'", type);
            double f = v.to_double();
            if (std::signbit(f))
                prefix = "-", f = -f;
            else if (sign != '-')
                prefix = std::string(1, sign);
            const int p = precision < 0 ? 6 : precision;
            switch (type) {
                case 'f':
                case 'F':
                    body = fmt::format("{:.{}f}", f, p);
                    break;
                case 'e':
                case 'E':
                    body = fmt::format(fmt::runtime(type == 'e' ? "{:.{}e}" : "{:.{}E}"), f, p);
                    break;
                case '%':
                    body = fmt::format("{:.{}f}%", f * 100, p);
                    break;
                case 'g':
                case 'G':
                    body = fmt::format(fmt::runtime(type == 'g' ? "{:.{}g}" : "{:.{}G}"), f,
                                       p == 0 ? 1 : p);
                    break;
                default:
                    body =
                        precision < 0 ? float_repr(f) : fmt::format("{:.{}g}", f, p == 0 ? 1 : p);
            }
        }
        if (grouping) {
            const size_t dot = std::min(body.find_first_not_of("0123456789"), body.size());
            std::string grouped;
            for (size_t k = 0; k < dot; ++k) {
                if (k && (dot - k) % 3 == 0) grouped.push_back(grouping);
                grouped.push_back(body[k]);
            }
            body = grouped + body.substr(dot);
        }
    }
    const size_t len = utf8_length(prefix) + utf8_length(body);
    if (len >= width) return prefix + body;
    const size_t pad = width - len;
    std::string fill_s;
    append_utf8(fill_s, fill);
    auto repeat = [&](size_t n) {
        std::string r;
        for (size_t k = 0; k < n; ++k) r += fill_s;
        return r;
    };
    switch (align) {
        case '<':
            return prefix + body + repeat(pad);
        case '^':
            return repeat(pad / 2) + prefix + body + repeat(pad - pad / 2);
        case '=':
            return prefix + repeat(pad) + body;
        default:
            return repeat(pad) + prefix + body;
    }
}

int64_t int_for_format(const Value& v, char conv) {
    if (v.is_int() || v.is_bool()) return v.to_int();
    if (v.is_float()) {
        const double f = v.as_float();
        if (!std::isfinite(f) || std::fabs(f) >= 9.2e18)
            fail("cannot convert float {} to integer", float_repr(f));
        return static_cast<int64_t>(f);
    }
    fail("%{} format: a real number is required, not {}", conv, v.type_name());
}

}  // namespace

// Python's str.format with auto and explicit field numbering, names,
// `.attr` / `[key]` lookups, !r/!s conversions and format specs.
std::string str_format(Interpreter& in, const std::string& fmt_str, const CallArgs& args) {
    std::string out;
    size_t auto_index = 0;
    enum class Numbering { Unknown, Auto, Manual } numbering = Numbering::Unknown;
    for (size_t i = 0; i < fmt_str.size(); ++i) {
        const char c = fmt_str[i];
        if (c == '}') {
            if (i + 1 < fmt_str.size() && fmt_str[i + 1] == '}')
                ++i;
            else
                fail("Single '}}' encountered in format string");
            out.push_back('}');
            continue;
        }
        if (c != '{') {
            out.push_back(c);
            continue;
        }
        if (i + 1 < fmt_str.size() && fmt_str[i + 1] == '{') {
            out.push_back('{');
            ++i;
            continue;
        }
        const size_t close = fmt_str.find('}', i);
        if (close == std::string::npos) fail("Single '{{' encountered in format string");
        std::string field = fmt_str.substr(i + 1, close - i - 1);
        i = close;
        std::string spec, conversion;
        if (const size_t colon = field.find(':'); colon != std::string::npos) {
            spec = field.substr(colon + 1);
            field.resize(colon);
        }
        if (const size_t bang = field.find('!'); bang != std::string::npos) {
            conversion = field.substr(bang + 1);
            field.resize(bang);
        }
        size_t end = field.find_first_of(".[");
        const std::string head = field.substr(0, end);
        Value v;
        if (head.empty() || std::isdigit(static_cast<unsigned char>(head[0]))) {
            // Python forbids mixing "{}" with "{0}".
            if (head.empty() ? numbering == Numbering::Manual : numbering == Numbering::Auto)
                fail("cannot switch between automatic and manual field numbering");
            numbering = head.empty() ? Numbering::Auto : Numbering::Manual;
            const auto parsed = parse_py_int(head, 10);
            if (!head.empty() && !parsed) fail("invalid format field '{}'", head);
            const size_t index = head.empty() ? auto_index++ : static_cast<size_t>(*parsed);
            if (index >= args.positional.size())
                fail("Replacement index {} out of range for positional args tuple", index);
            v = args.positional[index];
        } else {
            auto it = std::find_if(args.named.begin(), args.named.end(),
                                   [&](const auto& kv) { return kv.first == head; });
            if (it == args.named.end()) fail("KeyError: '{}'", head);
            v = it->second;
        }
        while (end != std::string::npos && end < field.size()) {
            if (field[end] == '.') {
                const size_t next = field.find_first_of(".[", end + 1);
                v = get_attribute(
                    v, field.substr(end + 1, next == std::string::npos ? next : next - end - 1));
                end = next;
            } else {
                const size_t rb = field.find(']', end);
                if (rb == std::string::npos) fail("Missing ']' in format string");
                const std::string key = field.substr(end + 1, rb - end - 1);
                const auto as_int = parse_py_int(key, 10);
                v = get_item(v, as_int ? Value::integer(*as_int) : Value::string(key));
                end = rb + 1;
            }
        }
        if (conversion == "r")
            v = Value::string(to_repr(v));
        else if (conversion == "s")
            v = Value::string(to_str(v));
        else if (!conversion.empty())
            fail("Unknown conversion specifier {}", conversion);
        out += format_field(in, v, spec);
        in.check_string_size(out.size());
    }
    return out;
}

std::string printf_format(Interpreter& in, const std::string& fmt_str, const Value& args) {
    std::vector<Value> values;
    const bool mapping = args.is_mapping();
    if (args.is_tuple())
        values = args.items();
    else if (!mapping)
        values.push_back(args);
    size_t next = 0;
    std::string out;
    for (size_t i = 0; i < fmt_str.size(); ++i) {
        if (fmt_str[i] != '%') {
            out.push_back(fmt_str[i]);
            continue;
        }
        if (++i >= fmt_str.size()) fail("incomplete format");
        Value v;
        bool have_value = false;
        if (fmt_str[i] == '(') {
            const size_t close = fmt_str.find(')', i);
            if (close == std::string::npos || !mapping) fail("format requires a mapping");
            const Value* found =
                args.dict_obj().find(std::string_view(fmt_str).substr(i + 1, close - i - 1));
            if (!found) fail("KeyError: '{}'", fmt_str.substr(i + 1, close - i - 1));
            v = *found;
            have_value = true;
            i = close + 1;
        }
        std::string flags;
        while (i < fmt_str.size() &&
               std::string_view("-+ #0").find(fmt_str[i]) != std::string_view::npos)
            flags.push_back(fmt_str[i++]);
        auto number = [&]() {
            std::string digits;
            if (i < fmt_str.size() && fmt_str[i] == '*') {
                ++i;
                if (next >= values.size()) fail("not enough arguments for format string");
                return std::to_string(int_for_format(values[next++], '*'));
            }
            while (i < fmt_str.size() && std::isdigit(static_cast<unsigned char>(fmt_str[i])))
                digits.push_back(fmt_str[i++]);
            return digits;
        };
        const std::string width = number();
        std::string precision;
        if (i < fmt_str.size() && fmt_str[i] == '.') {
            ++i;
            precision = fmt::format(".{}", number());
            if (precision == ".") precision = ".0";
        }
        while (i < fmt_str.size() && (fmt_str[i] == 'h' || fmt_str[i] == 'l' || fmt_str[i] == 'L'))
            ++i;
        if (i >= fmt_str.size()) fail("incomplete format");
        const char conv = fmt_str[i];
        if (conv == '%') {
            out.push_back('%');
            continue;
        }
        if (!have_value) {
            if (next >= values.size()) fail("not enough arguments for format string");
            v = values[next++];
        }
        const bool numeric = conv != 's' && conv != 'r' && conv != 'a' && conv != 'c';
        const bool left = flags.find('-') != std::string::npos;
        // printf right-aligns strings too; '0' padding applies to numbers only.
        std::string spec = left ? "<" : numeric ? "" : ">";
        if (numeric) {
            if (flags.find('+') != std::string::npos)
                spec += "+";
            else if (flags.find(' ') != std::string::npos)
                spec += " ";
            if (flags.find('#') != std::string::npos) spec += "#";
            if (!left && flags.find('0') != std::string::npos) spec += "0";
        }
        spec += width + precision;
        switch (conv) {
            case 's':
                v = Value::string(to_str(v));
                spec += "s";
                break;
            case 'r':
            case 'a':
                v = Value::string(to_repr(v));
                spec += "s";
                break;
            case 'd':
            case 'i':
            case 'u':
                v = Value::integer(int_for_format(v, conv));
                spec += "d";
                break;
            case 'x':
            case 'X':
            case 'o':
                v = Value::integer(int_for_format(v, conv));
                spec += conv;
                break;
            case 'e':
            case 'E':
            case 'f':
            case 'F':
            case 'g':
            case 'G':
                if (!v.is_number()) fail("must be real number, not {}", v.type_name());
                v = Value::floating(v.to_double());
                spec += conv;
                break;
            case 'c': {
                std::string ch;
                if (v.is_string())
                    ch = v.str();
                else
                    append_utf8(ch, static_cast<char32_t>(int_for_format(v, conv)));
                v = Value::string(std::move(ch));
                spec += "s";
                break;
            }
            default:
                fail("unsupported format character '{}'", conv);
        }
        out += format_field(in, v, spec);
        in.check_string_size(out.size());
    }
    if (!mapping && next < values.size())
        fail("not all arguments converted during string formatting");
    return out;
}

}  // namespace headroom::jinja
