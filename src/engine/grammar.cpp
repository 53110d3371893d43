#include "engine/grammar.h"

#include <fmt/format.h>

#include <xgrammar/xgrammar.h>
#include <algorithm>
#include <array>
#include <limits>

#include "tokenizer/tokenizer.h"

namespace headroom {

struct CompiledGrammar::Impl {
    xgrammar::CompiledGrammar grammar;
};

CompiledGrammar::CompiledGrammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGrammar::~CompiledGrammar() = default;
size_t CompiledGrammar::memory_bytes() const {
    return impl_->grammar.MemorySizeBytes();
}

namespace {

// xgrammar's view of the vocabulary: each token's bytes as the output shows
// them. Control tokens render as nothing, which xgrammar takes as "special":
// never allowed inside a grammar's text. The end-of-generation tokens are its
// stop tokens, allowed exactly where the grammar may end.
xgrammar::TokenizerInfo tokenizer_info(const Tokenizer& tokenizer) {
    std::vector<std::string> vocab(static_cast<size_t>(tokenizer.n_vocab()));
    for (int32_t id = 0; id < tokenizer.n_vocab(); ++id)
        tokenizer.append_piece(id, false, vocab[static_cast<size_t>(id)]);
    const auto& eog = tokenizer.end_of_generation_ids();
    std::vector<int32_t> stops(eog.begin(), eog.end());
    return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, std::nullopt, stops, false);
}

// JSON is written compactly (", " and ": " between items): free whitespace
// lets small models loop on newlines until max_tokens.
constexpr bool kAnyWhitespace = false;

// The regex that matches exactly one of `choices` (each escaped).
std::string choice_regex(const std::vector<std::string>& choices) {
    std::string out;
    for (size_t i = 0; i < choices.size(); ++i) {
        if (i) out += '|';
        out += '(';
        for (const char c : choices[i]) {
            if (std::string_view("\\^$.|?*+()[]{}/").find(c) != std::string_view::npos) out += '\\';
            out += c;
        }
        out += ')';
    }
    return out;
}

std::string find_unsupported(const nlohmann::json& schema, const std::string& path, int depth) {
    static constexpr std::array<std::string_view, 10> kIgnored = {"not",
                                                                  "if",
                                                                  "then",
                                                                  "else",
                                                                  "dependentRequired",
                                                                  "dependentSchemas",
                                                                  "uniqueItems",
                                                                  "contains",
                                                                  "minContains",
                                                                  "maxContains"};
    if (!schema.is_object() || depth > 64) return "";
    for (const auto& [key, value] : schema.items()) {
        if (std::find(kIgnored.begin(), kIgnored.end(), key) != kIgnored.end())
            return fmt::format("'{}' at {}", key, path);
        std::string found;
        if (key == "properties" || key == "patternProperties" || key == "$defs" ||
            key == "definitions") {
            if (value.is_object())
                for (const auto& [name, sub] : value.items())
                    if (found.empty())
                        found = find_unsupported(sub, path + "/" + key + "/" + name, depth + 1);
        } else if (key == "items" || key == "additionalProperties" || key == "propertyNames" ||
                   key == "unevaluatedProperties" || key == "unevaluatedItems") {
            found = find_unsupported(value, path + "/" + key, depth + 1);
        } else if (key == "prefixItems" || key == "anyOf" || key == "oneOf" || key == "allOf") {
            if (value.is_array())
                for (size_t i = 0; i < value.size() && found.empty(); ++i)
                    found = find_unsupported(value[i], fmt::format("{}/{}/{}", path, key, i),
                                             depth + 1);
        }
        if (!found.empty()) return found;
    }
    return "";
}

// xgrammar's messages start with the source place that raised them
// ("/path/json_schema_converter.cc:4944: Unsupported type ..."): keep the reason.
std::string reason_of(std::string what) {
    if (const size_t at = what.find(".cc:"); at != std::string::npos)
        if (const size_t colon = what.find(": ", at); colon != std::string::npos)
            what.erase(0, colon + 2);
    while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
    return what;
}

}  // namespace

std::string unsupported_schema_keyword(const nlohmann::json& schema) {
    const std::string found = find_unsupported(schema, "#", 0);
    return found.empty() ? found : "JSON schema keyword " + found + " is not supported";
}

GrammarSpec after_reasoning(const GrammarSpec& spec, bool open) {
    using json = nlohmann::json;
    json constraint;
    switch (spec.kind) {
        case GrammarSpec::Kind::JsonObject:
            constraint = {{"type", "json_schema"}, {"json_schema", {{"type", "object"}}}};
            break;
        case GrammarSpec::Kind::JsonSchema:
            constraint = {{"type", "json_schema"}, {"json_schema", json::parse(spec.text)}};
            break;
        case GrammarSpec::Kind::Regex:
            constraint = {{"type", "regex"}, {"pattern", spec.text}};
            break;
        case GrammarSpec::Kind::Choice:
            constraint = {{"type", "regex"}, {"pattern", choice_regex(spec.choices)}};
            break;
        case GrammarSpec::Kind::Ebnf:
            constraint = {{"type", "grammar"}, {"grammar", spec.text}};
            break;
        case GrammarSpec::Kind::StructuralTag:
            constraint = json::parse(spec.text).at("format");
            break;
    }
    const json think = {{"type", "tag"},
                        {"begin", open ? "" : "<think>"},
                        {"content", {{"type", "any_text"}}},
                        {"end", "</think>"}};
    // A little blank space (bounded: a model must not loop on newlines).
    const json blank = {{"type", "regex"}, {"pattern", "[ \\n]{0,4}"}};
    json elements = json::array();
    if (!open) elements.push_back(blank);
    elements.push_back(open ? think : json{{"type", "optional"}, {"content", think}});
    elements.push_back(blank);
    elements.push_back(constraint);
    GrammarSpec out;
    out.kind = GrammarSpec::Kind::StructuralTag;
    out.text =
        json{{"type", "structural_tag"}, {"format", {{"type", "sequence"}, {"elements", elements}}}}
            .dump();
    return out;
}

struct GrammarCompiler::Impl {
    xgrammar::GrammarCompiler compiler;
};

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, size_t cache_bytes)
    : impl_(std::make_unique<Impl>(Impl{xgrammar::GrammarCompiler(
          tokenizer_info(tokenizer), 2, true, static_cast<int64_t>(cache_bytes))})),
      cache_bytes_(cache_bytes),
      n_vocab_(tokenizer.n_vocab()) {}

GrammarCompiler::~GrammarCompiler() = default;

size_t GrammarCompiler::cache_bytes_used() const {
    return static_cast<size_t>(std::max<int64_t>(impl_->compiler.GetCacheSizeBytes(), 0));
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const GrammarSpec& spec,
                                                                std::string* error) const {
    size_t text_bytes = spec.text.size();
    for (const auto& c : spec.choices) text_bytes += c.size();
    if (text_bytes > kMaxGrammarTextBytes) {
        *error = fmt::format("the grammar is {} bytes long; at most {} are accepted", text_bytes,
                             kMaxGrammarTextBytes);
        return nullptr;
    }
    if (spec.kind == GrammarSpec::Kind::JsonSchema) {
        const auto schema = nlohmann::json::parse(spec.text, nullptr, false);
        if (schema.is_discarded()) {
            *error = "the schema is not valid JSON";
            return nullptr;
        }
        if (auto why = unsupported_schema_keyword(schema); !why.empty()) {
            *error = std::move(why);
            return nullptr;
        }
    }
    try {
        xgrammar::GrammarCompiler& c = impl_->compiler;
        auto compiled = [&]() -> xgrammar::CompiledGrammar {
            using Kind = GrammarSpec::Kind;
            switch (spec.kind) {
                case Kind::JsonObject:
                    return c.CompileJSONSchema(R"({"type": "object"})", kAnyWhitespace,
                                               std::nullopt, std::nullopt, false);
                case Kind::JsonSchema:
                    return c.CompileJSONSchema(spec.text, kAnyWhitespace, std::nullopt,
                                               std::nullopt, spec.strict);
                case Kind::Regex:
                    return c.CompileRegex(spec.text);
                case Kind::Choice:
                    return c.CompileRegex(choice_regex(spec.choices));
                case Kind::Ebnf:
                    return c.CompileGrammar(spec.text, "root");
                case Kind::StructuralTag:
                    return c.CompileStructuralTag(spec.text);
            }
            throw std::invalid_argument("unknown grammar kind");
        }();
        auto out = std::make_shared<CompiledGrammar>(
            std::make_unique<CompiledGrammar::Impl>(CompiledGrammar::Impl{std::move(compiled)}));
        if (out->memory_bytes() > cache_bytes_) {
            *error = fmt::format(
                "the compiled grammar takes {} bytes, more than the grammar cache's {} "
                "(--grammar-cache)",
                out->memory_bytes(), cache_bytes_);
            return nullptr;
        }
        return out;
    } catch (const std::exception& e) {
        *error = reason_of(e.what());
        return nullptr;
    }
}

void apply_mask(std::span<float> logits, std::span<const uint32_t> mask) {
    const float ninf = -std::numeric_limits<float>::infinity();
    const size_t n = std::min(logits.size(), mask.size() * 32);
    for (size_t w = 0; w * 32 < n; ++w) {
        const uint32_t bits = mask[w];
        if (bits == ~0u) continue;
        const size_t end = std::min(n, w * 32 + 32);
        for (size_t t = w * 32; t < end; ++t)
            if (!((bits >> (t - w * 32)) & 1u)) logits[t] = ninf;
    }
    // Tokens past the mask (a vocabulary padded beyond the tokenizer's) are never allowed.
    for (size_t t = n; t < logits.size(); ++t) logits[t] = ninf;
}

struct GrammarState::Impl {
    std::shared_ptr<const CompiledGrammar> grammar;
    xgrammar::GrammarMatcher matcher;
};

GrammarState::GrammarState(std::shared_ptr<const CompiledGrammar> grammar) {
    xgrammar::GrammarMatcher m(grammar->impl().grammar);
    impl_ = std::make_unique<Impl>(Impl{std::move(grammar), std::move(m)});
}

GrammarState::~GrammarState() = default;
GrammarState::GrammarState(GrammarState&&) noexcept = default;
GrammarState& GrammarState::operator=(GrammarState&&) noexcept = default;

std::unique_ptr<GrammarState> GrammarState::fork() const {
    auto out = std::make_unique<GrammarState>(impl_->grammar);
    out->impl_->matcher = impl_->matcher.Fork();
    return out;
}

void GrammarState::fill_mask(std::span<uint32_t> mask) {
    int64_t shape[1] = {static_cast<int64_t>(mask.size())};
    DLTensor t{};
    t.data = mask.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    t.strides = nullptr;
    t.byte_offset = 0;
    impl_->matcher.FillNextTokenBitmask(&t, 0);
}

bool GrammarState::accept(int32_t token) {
    return impl_->matcher.AcceptToken(token);
}

bool GrammarState::terminated() const {
    return impl_->matcher.IsTerminated();
}

}  // namespace headroom
