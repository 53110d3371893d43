#include "cli/plan-svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/units.h"

namespace headroom::cli {

namespace {

constexpr int kWidth = 900;
constexpr int kMargin = 16;

std::string escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

// Lines of at most `n_chars` characters, broken at spaces (the SVG has no
// text layout of its own; a character is about 7 px at 13 px).
std::vector<std::string> wrap(std::string_view s, size_t n_chars) {
    std::vector<std::string> lines;
    std::string line;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find(' ', i);
        if (j == std::string_view::npos) j = s.size();
        const std::string_view word = s.substr(i, j - i);
        if (!line.empty() && line.size() + 1 + word.size() > n_chars) {
            lines.push_back(std::move(line));
            line.clear();
        }
        if (!line.empty()) line += ' ';
        line += word;
        i = j + 1;
    }
    if (!line.empty()) lines.push_back(std::move(line));
    return lines;
}

struct Term {
    const char* key;
    const char* label;
    uint64_t DeviceTerms::*field;
};
constexpr Term kTerms[] = {{"weights", "weights", &DeviceTerms::weights_bytes},
                           {"kv_cache", "KV cache", &DeviceTerms::kv_cache_bytes},
                           {"activations", "activations", &DeviceTerms::activations_bytes},
                           {"runtime", "runtime", &DeviceTerms::runtime_bytes}};

class Svg {
  public:
    void text(int x, int y, std::string_view s, std::string_view cls,
              std::string_view anchor = "") {
        body_ += fmt::format("<text x=\"{}\" y=\"{}\" class=\"{}\"{}>{}</text>\n", x, y, cls,
                             anchor.empty() ? "" : fmt::format(" text-anchor=\"{}\"", anchor),
                             escape(s));
    }
    void rect(double x, int y, double w, int h, std::string_view cls, std::string_view title) {
        body_ += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" "
            "class=\"{}\"><title>{}</title>"
            "</rect>\n",
            x, y, w, h, cls, escape(title));
    }
    void line(double x, int y0, int y1, std::string_view cls) {
        body_ +=
            fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" class=\"{}\"/>\n", x,
                        y0, x, y1, cls);
    }
    std::string finish(int height) const {
        return fmt::format(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
            "viewBox=\"0 0 {0} {1}\" font-family=\"system-ui, -apple-system, Segoe UI, Roboto, "
            "sans-serif\">\n"
            "<style>\n"
            ".bg{{fill:#ffffff}} .t{{fill:#1d2330;font-size:13px}} .h{{fill:#1d2330;font-size:15px;"
            "font-weight:600}} .m{{fill:#667085;font-size:12px}} "
            ".bad{{fill:#b42318;font-size:12px}}\n"
            ".weights{{fill:#3b6fd8}} .kv_cache{{fill:#1f9d6b}} .activations{{fill:#d98a1c}} "
            ".runtime{{fill:#8a63d2}} .track{{fill:#e7eaf0}} .budget{{stroke:#1d2330;"
            "stroke-width:2;stroke-dasharray:4 3}}\n"
            "@media (prefers-color-scheme: dark) {{ .bg{{fill:#12151b}} .t,.h{{fill:#e4e7ec}} "
            ".m{{fill:#98a2b3}} .bad{{fill:#ff8a80}} .track{{fill:#2a303b}} "
            ".budget{{stroke:#e4e7ec}} }}\n"
            "</style>\n"
            "<rect width=\"100%\" height=\"100%\" class=\"bg\"/>\n{2}</svg>\n",
            kWidth, height, body_);
    }

  private:
    std::string body_;
};

std::string term_title(const Term& t, uint64_t bytes, std::string_view where) {
    return fmt::format("{}{}: {} bytes ({})", t.label, where, format_count(bytes),
                       format_bytes(bytes));
}

// A bar of the four terms from x0, `width` pixels for `scale` bytes.
void bar(Svg& svg, const SvgBar& b, double x0, double width, uint64_t scale, int y, int h) {
    svg.rect(x0, y, width, h, "track", fmt::format("{}: {}", b.label, b.note));
    double x = x0;
    for (const Term& t : kTerms) {
        const uint64_t bytes = b.terms.*t.field;
        const double w =
            scale ? width * static_cast<double>(bytes) / static_cast<double>(scale) : 0;
        if (bytes)
            svg.rect(x, y, std::max(w, 1.0), h, t.key, term_title(t, bytes, " on " + b.label));
        x += w;
    }
    if (b.budget) {
        const double bx = x0 + width * static_cast<double>(b.budget) /
                                   static_cast<double>(std::max(scale, uint64_t{1}));
        svg.line(bx, y - 4, y + h + 4, "budget");
    }
}

}  // namespace

std::string plan_svg(const SvgPlan& p) {
    Svg svg;
    int y = kMargin - 6;
    for (const auto& line : wrap(p.title, 92)) svg.text(kMargin, y += 20, line, "h");
    y += 2;
    for (const auto& line : wrap(p.subtitle, 125)) svg.text(kMargin, y += 16, line, "m");
    y += 6;
    const double full = kWidth - 2 * kMargin;
    for (const SvgBar& d : p.devices) {
        y += 14;
        svg.text(kMargin, y, d.label, "t");
        svg.text(kWidth - kMargin, y, d.note, d.fits ? "m" : "bad", "end");
        y += 8;
        const uint64_t scale = std::max(d.budget, d.terms.total_bytes());
        bar(svg, d, kMargin, full, scale, y, 30);
        y += 30 + 18;
        // The sizes as text, one per term, in the bar's order.
        int x = kMargin;
        for (const Term& t : kTerms) {
            const uint64_t bytes = d.terms.*t.field;
            svg.rect(x, y - 10, 10, 10, t.key, term_title(t, bytes, ""));
            const std::string s = fmt::format("{} {}", t.label, format_bytes(bytes));
            svg.text(x + 14, y, s, "t");
            x += 14 + static_cast<int>(s.size()) * 7 + 18;
        }
        y += 12;
    }
    for (const SvgSection& section : p.sections) {
        if (section.bars.empty()) continue;
        y += 22;
        svg.text(kMargin, y, section.title, "h");
        uint64_t scale = 1;
        for (const SvgBar& c : section.bars)
            scale = std::max({scale, c.budget, c.terms.total_bytes()});
        for (const SvgBar& c : section.bars) {
            y += 22;
            svg.text(kMargin, y, c.label, "t");
            // A label and a note that would meet take two lines.
            if (7.2 * static_cast<double>(c.label.size()) +
                    6.6 * static_cast<double>(c.note.size()) >
                full - 16)
                y += 16;
            svg.text(kWidth - kMargin, y, c.note, c.fits ? "m" : "bad", "end");
            y += 6;
            bar(svg, c, kMargin, full, scale, y, 16);
            y += 16;
        }
        y += 18;
        svg.text(kMargin, y,
                 "one scale for every bar above; the dashed line is the budget; hover a bar for "
                 "its bytes",
                 "m");
    }
    return svg.finish(y + kMargin);
}

}  // namespace headroom::cli
