// Constrained decoding on the synthetic model's tokenizer: random walks
// through a grammar's masks must spell text the grammar's own definition
// accepts (checked with a JSON parser, std::regex, the choice list), bad
// grammars are refused with the reason, and the mask arithmetic is checked
// by hand.
#include "engine/grammar.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "tokenizer/tokenizer.h"
#include "tools/synth.h"

namespace headroom {
namespace {

using json = nlohmann::json;

const Tokenizer& tokenizer() {
    static const auto tok = [] {
        SynthOptions opt;
        opt.progress = false;
        const auto bytes = make_synth_model(find_synth_shape("tiny"), opt).to_bytes();
        const auto file = gguf::GgufFile::parse(bytes, "tiny.gguf");
        return Tokenizer::from_gguf(file);
    }();
    return *tok;
}

const GrammarCompiler& compiler() {
    static const GrammarCompiler c(tokenizer(), 32u << 20);
    return c;
}

// Follows the grammar from its start, drawing each token uniformly among the
// allowed ones (the stop token once the grammar may end, with probability
// 1/4), and returns the text; `ended` tells whether the grammar finished.
std::string random_walk(const CompiledGrammar& g, uint32_t seed, bool* ended) {
    std::shared_ptr<const CompiledGrammar> shared(&g, [](const CompiledGrammar*) {});
    GrammarState state(shared);
    std::vector<uint32_t> mask(mask_words(tokenizer().n_vocab()));
    std::mt19937 rng(seed);
    std::vector<int32_t> out;
    *ended = false;
    for (int step = 0; step < 400; ++step) {
        state.fill_mask(mask);
        std::vector<int32_t> allowed, stops;
        for (int32_t t = 0; t < tokenizer().n_vocab(); ++t) {
            if (!((mask[static_cast<size_t>(t) / 32] >> (t % 32)) & 1u)) continue;
            (tokenizer().is_end_of_generation(t) ? stops : allowed).push_back(t);
        }
        if (!stops.empty() && (allowed.empty() || rng() % 4 == 0)) {
            EXPECT_TRUE(state.accept(stops[0]));
            EXPECT_TRUE(state.terminated());
            *ended = true;
            break;
        }
        if (allowed.empty()) break;
        const int32_t t = allowed[rng() % allowed.size()];
        EXPECT_TRUE(state.accept(t));
        out.push_back(t);
    }
    return tokenizer().decode(out);
}

// The token whose output text is exactly `text`, or -1.
int32_t token_spelling(std::string_view text) {
    for (int32_t t = 0; t < tokenizer().n_vocab(); ++t) {
        std::string piece;
        tokenizer().append_piece(t, false, piece);
        if (piece == text) return t;
    }
    return -1;
}

std::shared_ptr<const CompiledGrammar> compile_ok(const GrammarSpec& spec) {
    std::string why;
    auto g = compiler().compile(spec, &why);
    EXPECT_TRUE(g) << why;
    return g;
}

TEST(Grammar, JsonSchemaWalksGiveValidInstances) {
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::JsonSchema;
    spec.text = R"({"type": "object", "properties": {"n": {"type": "integer"},
                   "tag": {"enum": ["a", "b"]}}, "required": ["n", "tag"]})";
    const auto g = compile_ok(spec);
    ASSERT_TRUE(g);
    int n_ended = 0;
    for (uint32_t seed = 0; seed < 20; ++seed) {
        bool ended = false;
        const std::string text = random_walk(*g, seed, &ended);
        if (!ended) continue;  // ran out of steps inside a long string
        ++n_ended;
        const json j = json::parse(text, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << text;
        ASSERT_TRUE(j.is_object()) << text;
        // An integer (of any size: nlohmann reads a huge one as a double).
        EXPECT_TRUE(j["n"].is_number()) << text;
        EXPECT_TRUE(std::regex_search(text, std::regex(R"("n": ?-?(0|[1-9][0-9]*)[,}])"))) << text;
        EXPECT_TRUE(j["tag"] == "a" || j["tag"] == "b") << text;
        EXPECT_EQ(j.size(), 2u) << text;  // strict: no other properties
    }
    EXPECT_GT(n_ended, 10);
}

TEST(Grammar, RegexAndChoiceWalksMatch) {
    GrammarSpec re;
    re.kind = GrammarSpec::Kind::Regex;
    re.text = "[0-9]{3}-[a-z]{2,4}";
    const auto g = compile_ok(re);
    ASSERT_TRUE(g);
    for (uint32_t seed = 0; seed < 10; ++seed) {
        bool ended = false;
        const std::string text = random_walk(*g, seed, &ended);
        EXPECT_TRUE(ended);
        EXPECT_TRUE(std::regex_match(text, std::regex("[0-9]{3}-[a-z]{2,4}"))) << text;
    }
    GrammarSpec choice;
    choice.kind = GrammarSpec::Kind::Choice;
    choice.choices = {"yes", "no", "maybe (later)"};
    const auto c = compile_ok(choice);
    ASSERT_TRUE(c);
    for (uint32_t seed = 0; seed < 10; ++seed) {
        bool ended = false;
        const std::string text = random_walk(*c, seed, &ended);
        EXPECT_TRUE(ended);
        EXPECT_TRUE(text == "yes" || text == "no" || text == "maybe (later)") << text;
    }
}

TEST(Grammar, EbnfWalksFollowTheRules) {
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::Ebnf;
    spec.text = "root ::= \"(\" num (\",\" num)* \")\"\nnum ::= [1-9] [0-9]*";
    const auto g = compile_ok(spec);
    ASSERT_TRUE(g);
    for (uint32_t seed = 0; seed < 10; ++seed) {
        bool ended = false;
        const std::string text = random_walk(*g, seed, &ended);
        if (!ended) continue;
        EXPECT_TRUE(std::regex_match(text, std::regex(R"(\([1-9][0-9]*(,[1-9][0-9]*)*\))")))
            << text;
    }
}

TEST(Grammar, BadGrammarsAreRefusedWithTheReason) {
    std::string why;
    GrammarSpec ebnf;
    ebnf.kind = GrammarSpec::Kind::Ebnf;
    ebnf.text = "root ::= \"a\" |\nfoo ::= ";
    EXPECT_FALSE(compiler().compile(ebnf, &why));
    EXPECT_NE(why.find("line"), std::string::npos) << why;
    GrammarSpec schema;
    schema.kind = GrammarSpec::Kind::JsonSchema;
    schema.text = R"({"type": "object", "properties": )";
    why.clear();
    EXPECT_FALSE(compiler().compile(schema, &why));
    EXPECT_FALSE(why.empty());
    GrammarSpec huge;
    huge.kind = GrammarSpec::Kind::Regex;
    huge.text = std::string(kMaxGrammarTextBytes + 1, 'a');
    why.clear();
    EXPECT_FALSE(compiler().compile(huge, &why));
    EXPECT_NE(why.find("at most"), std::string::npos) << why;
}

TEST(Grammar, AGrammarLargerThanTheCacheIsRefused) {
    const GrammarCompiler small(tokenizer(), 1024);
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::JsonObject;
    std::string why;
    EXPECT_FALSE(small.compile(spec, &why));
    EXPECT_NE(why.find("grammar cache"), std::string::npos) << why;
}

TEST(Grammar, ForkContinuesFromTheSamePlace) {
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::Choice;
    spec.choices = {"ab", "ac"};
    const auto g = compile_ok(spec);
    ASSERT_TRUE(g);
    GrammarState s(g);
    const int32_t a = token_spelling("a"), b = token_spelling("b"), x = token_spelling("x");
    ASSERT_GE(a, 0);
    ASSERT_GE(b, 0);
    ASSERT_GE(x, 0);
    ASSERT_TRUE(s.accept(a));
    auto f = s.fork();
    EXPECT_FALSE(f->accept(x));
    EXPECT_TRUE(f->accept(b));
    EXPECT_TRUE(s.accept(b));  // the original is where it was
}

// Whether the grammar takes `text` (as the tokenizer spells it) and may end there.
bool takes(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
    GrammarState s(g);
    for (int32_t t : tokenizer().encode(text, false, false))
        if (!s.accept(t)) return false;
    return s.accept(tokenizer().end_of_generation_ids().at(0));
}

TEST(Grammar, AfterReasoningTheConstraintHoldsOnlyForTheAnswer) {
    GrammarSpec schema;
    schema.kind = GrammarSpec::Kind::JsonSchema;
    schema.text = R"({"type": "object", "properties": {"a": {"type": "integer"}},
                      "required": ["a"], "additionalProperties": false})";
    const auto optional = compile_ok(after_reasoning(schema, false));
    ASSERT_TRUE(optional);
    EXPECT_TRUE(takes(optional, R"({"a": 1})"));
    EXPECT_TRUE(takes(optional, "<think>any text, {not json</think>\n\n{\"a\": 2}"));
    EXPECT_FALSE(takes(optional, "<think>no answer</think>"));
    EXPECT_FALSE(takes(optional, "plain text"));
    EXPECT_FALSE(takes(optional, "<think>x</think>{\"b\": 1}"));
    // The prompt opened the block: the answer starts inside it.
    const auto open = compile_ok(after_reasoning(schema, true));
    ASSERT_TRUE(open);
    EXPECT_TRUE(takes(open, "still thinking</think>{\"a\": 3}"));
    EXPECT_FALSE(takes(open, R"({"a": 1})"));
}

TEST(Grammar, ApplyMaskSetsDisallowedToMinusInfinity) {
    std::vector<float> logits(40, 1.0f);
    std::vector<uint32_t> mask = {0x80000001u, 0x2u};  // tokens 0, 31, 33
    apply_mask(logits, mask);
    for (size_t t = 0; t < logits.size(); ++t) {
        const bool allowed = t == 0 || t == 31 || t == 33;
        EXPECT_EQ(logits[t], allowed ? 1.0f : -std::numeric_limits<float>::infinity()) << t;
    }
    EXPECT_EQ(mask_words(40), 2u);
    EXPECT_EQ(mask_words(64), 2u);
    EXPECT_EQ(mask_words(65), 3u);
}

}  // namespace
}  // namespace headroom
