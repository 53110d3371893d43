// Constrained decoding: a grammar says which tokens may come next, and the
// sampler draws only among those. Built on xgrammar's C++ core (the library
// vLLM, SGLang and TensorRT-LLM use): a JSON schema, a regex, a list of
// choices, an EBNF grammar or a structural tag (free text with tool calls in
// it) is compiled once against the vocabulary into a CompiledGrammar; each
// sequence then walks it with a GrammarState:
//
//   per step, before sampling:  mask = state.fill_mask()      (n_vocab bits)
//                               logits[t] = -inf where bit t is 0
//   after sampling token t:     state.accept(t)
//
// The mask of a sequence depends only on the tokens it accepted, so the
// engine fills the masks of a step while the forward pass runs.
//
// Compiling is the costly part (every grammar state's token set is
// precomputed), so the GrammarCompiler caches compiled grammars under a byte
// cap, part of the plan's runtime term (memory/terms.h: grammar_cache_bytes). A
// grammar larger than the cap, or one from a text over kMaxGrammarTextBytes,
// is refused with an error, never an out-of-memory. Compile errors (a schema
// that does not parse, an unsupported keyword, an EBNF syntax error) come
// back as the message xgrammar gives, which names the place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace headroom {

class Tokenizer;

// What a request constrains its output to.
struct GrammarSpec {
    enum class Kind {
        JsonObject,     // any JSON object
        JsonSchema,     // text: the schema (JSON)
        Regex,          // text: the pattern
        Choice,         // choices: exactly one of these strings
        Ebnf,           // text: GBNF-style EBNF with a rule named root
        StructuralTag,  // text: xgrammar's structural tag (JSON)
    };
    Kind kind = Kind::JsonObject;
    std::string text;
    std::vector<std::string> choices;
    // JsonSchema: objects take no properties beyond the schema's unless it
    // says additionalProperties (OpenAI's strict); false follows JSON
    // Schema's default (extra properties allowed).
    bool strict = true;
};

// Why xgrammar cannot enforce a JSON schema exactly ("" if it can): a
// keyword it would ignore (not, if/then/else, uniqueItems, contains...),
// named with its place in the schema ("uniqueItems at #/properties/tags").
std::string unsupported_schema_keyword(const nlohmann::json& schema);

// The same constraint for a model that reasons first: free text in a
// <think>...</think> block, then (after blank space) `spec`. `open`: the
// prompt already opened the block (the answer starts inside it); otherwise
// the block is optional.
GrammarSpec after_reasoning(const GrammarSpec& spec, bool open);

// Longest schema, regex or grammar text accepted (bytes).
inline constexpr size_t kMaxGrammarTextBytes = 256 * 1024;

// A grammar compiled against one vocabulary. Immutable, shared by the
// sequences that use it and the compiler's cache.
class CompiledGrammar {
  public:
    struct Impl;
    explicit CompiledGrammar(std::unique_ptr<Impl> impl);
    ~CompiledGrammar();
    size_t memory_bytes() const;
    const Impl& impl() const { return *impl_; }

  private:
    std::unique_ptr<Impl> impl_;
};

// Compiles grammars for one tokenizer, caching them. Thread-safe: HTTP
// threads compile while the engine thread matches.
class GrammarCompiler {
  public:
    // cache_bytes: the most the cache of compiled grammars holds; also the
    // largest one grammar may be.
    GrammarCompiler(const Tokenizer& tokenizer, size_t cache_bytes);
    ~GrammarCompiler();
    GrammarCompiler(const GrammarCompiler&) = delete;
    GrammarCompiler& operator=(const GrammarCompiler&) = delete;

    // The compiled grammar, or null with *error set to why not.
    std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec,
                                                   std::string* error) const;
    size_t cache_bytes_used() const;
    size_t cache_bytes_cap() const { return cache_bytes_; }
    int32_t n_vocab() const { return n_vocab_; }

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    size_t cache_bytes_;
    int32_t n_vocab_;
};

// 32-bit words of a mask over n_vocab tokens: bit t % 32 of word t / 32.
inline size_t mask_words(int32_t n_vocab) {
    return (static_cast<size_t>(n_vocab) + 31) / 32;
}

// Sets logits[t] = -inf wherever bit t of `mask` is 0.
void apply_mask(std::span<float> logits, std::span<const uint32_t> mask);

// One sequence's place in a grammar.
class GrammarState {
  public:
    explicit GrammarState(std::shared_ptr<const CompiledGrammar> grammar);
    ~GrammarState();
    GrammarState(GrammarState&&) noexcept;
    GrammarState& operator=(GrammarState&&) noexcept;
    // A copy at the same place (a sample forked from its leader).
    std::unique_ptr<GrammarState> fork() const;

    // Fills `mask` (mask_words(n_vocab) words) with the tokens allowed next.
    void fill_mask(std::span<uint32_t> mask);
    // Advances by one sampled token; false if the grammar does not allow it
    // (the state is then unchanged).
    bool accept(int32_t token);
    // The grammar reached its end (a stop token was accepted, or nothing can follow).
    bool terminated() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace headroom
