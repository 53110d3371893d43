// ChatTemplate on hand-built GGUF files: the template and the bos/eos texts
// come from the metadata; a file without a template gets the built-in one
// for its architecture. Expected prompts are written out by hand from each
// model family's documented format.
#include "tokenizer/chat-template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "test-util.h"

namespace headroom {
namespace {

using test::Bytes;
using ::testing::HasSubstr;

constexpr uint32_t kU32 = 4, kString = 8, kArray = 9;

// A GGUF v3 file with no tensors and the given metadata.
class GgufBuilder {
  public:
    GgufBuilder& str(std::string_view key, std::string_view value) {
        kv_.str(key).u32(kString).str(value);
        ++n_kv_;
        return *this;
    }
    GgufBuilder& u32(std::string_view key, uint32_t value) {
        kv_.str(key).u32(kU32).u32(value);
        ++n_kv_;
        return *this;
    }
    GgufBuilder& tokens(const std::vector<std::string>& tokens) {
        kv_.str("tokenizer.ggml.tokens").u32(kArray).u32(kString).u64(tokens.size());
        for (const auto& t : tokens) kv_.str(t);
        ++n_kv_;
        return *this;
    }
    const std::vector<uint8_t>& build() {
        Bytes b;
        b.u32(0x46554747).u32(3).u64(0).u64(n_kv_);
        b.bytes().insert(b.bytes().end(), kv_.bytes().begin(), kv_.bytes().end());
        b.align(32);
        bytes_ = b.bytes();
        return bytes_;
    }

  private:
    Bytes kv_;
    uint64_t n_kv_ = 0;
    std::vector<uint8_t> bytes_;
};

const std::vector<ChatMessage> kSystemUser = {{"system", "Be brief."}, {"user", "Hi"}};
const std::vector<ChatMessage> kUser = {{"user", "Hi"}};

TEST(ChatTemplate, UsesTheTemplateAndTokensOfTheFile) {
    GgufBuilder b;
    b.str("general.architecture", "llama")
        .tokens({"<unk>", "<s>", "</s>"})
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .str("tokenizer.chat_template",
             "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
             "{% if add_generation_prompt %}[assistant:{% else %}{{ eos_token }}{% endif %}");
    const auto file = gguf::GgufFile::parse(b.build(), "test.gguf");
    const auto tmpl = ChatTemplate::from_gguf(file);
    EXPECT_EQ(tmpl.source(), "gguf");
    EXPECT_EQ(tmpl.bos_token(), "<s>");
    EXPECT_EQ(tmpl.eos_token(), "</s>");
    EXPECT_EQ(tmpl.apply(kSystemUser, false), "<s>[system:Be brief.][user:Hi]</s>");
    EXPECT_EQ(tmpl.apply(kSystemUser, true), "<s>[system:Be brief.][user:Hi][assistant:");
}

TEST(ChatTemplate, GemmaWithoutTemplateGetsGemmasTemplate) {
    GgufBuilder b;
    b.str("general.architecture", "gemma3")
        .tokens({"<pad>", "<eos>", "<bos>"})
        .u32("tokenizer.ggml.bos_token_id", 2)
        .u32("tokenizer.ggml.eos_token_id", 1);
    const auto tmpl = ChatTemplate::from_gguf(gguf::GgufFile::parse(b.build(), "gemma.gguf"));
    EXPECT_EQ(tmpl.source(), "built-in gemma");
    // Gemma has no system turn: the system text opens the first user turn.
    EXPECT_EQ(tmpl.apply(kSystemUser, true),
              "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    EXPECT_THAT(
        [&] {
            tmpl.apply({{"user", "a"}, {"user", "b"}}, true);
        },
        ::testing::ThrowsMessage<Error>(HasSubstr("Conversation roles must alternate")));
}

TEST(ChatTemplate, LlamaWithLlama3VocabGetsLlama3Template) {
    GgufBuilder b;
    b.str("general.architecture", "llama")
        .tokens({"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"})
        .u32("tokenizer.ggml.bos_token_id", 0)
        .u32("tokenizer.ggml.eos_token_id", 1);
    const auto tmpl = ChatTemplate::from_gguf(gguf::GgufFile::parse(b.build(), "llama3.gguf"));
    EXPECT_EQ(tmpl.source(), "built-in llama3");
    EXPECT_EQ(tmpl.apply(kSystemUser, true),
              "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, OtherArchitecturesFallBackToChatml) {
    GgufBuilder b;
    b.str("general.architecture", "qwen2").tokens({"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
    const auto tmpl = ChatTemplate::from_gguf(gguf::GgufFile::parse(b.build(), "qwen.gguf"));
    EXPECT_EQ(tmpl.source(), "built-in chatml");
    EXPECT_EQ(tmpl.bos_token(), "");
    EXPECT_EQ(tmpl.apply(kUser, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(tmpl.apply(kUser, false), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, BadTemplateOrTokenIdsGiveClearErrors) {
    GgufBuilder b;
    b.str("general.architecture", "llama")
        .tokens({"a"})
        .u32("tokenizer.ggml.bos_token_id", 99)  // out of range: no bos text, no crash
        .str("tokenizer.chat_template", "{% for m in messages %}\n{{ m.content }\n{% endfor %}");
    const auto& bytes = b.build();
    EXPECT_THAT([&] { ChatTemplate::from_gguf(gguf::GgufFile::parse(bytes, "bad.gguf")); },
                ::testing::ThrowsMessage<Error>(
                    HasSubstr("chat template (gguf): jinja syntax error at line 2")));
    EXPECT_THAT([] { ChatTemplate::from_string("{% if %}", "", ""); },
                ::testing::ThrowsMessage<Error>(HasSubstr("line 1, column 7")));
}

TEST(ChatTemplate, OptionsAddVariablesAndPinTheClock) {
    const auto tmpl = ChatTemplate::from_string(
        "{{ strftime_now('%Y-%m-%d') }}|{{ enable_thinking }}|{{ tools|length }}|{{ "
        "messages|length }}",
        "", "");
    ChatTemplateOptions options;
    options.now = 0;  // 1970-01-01 UTC
    options.extra_context = {{"enable_thinking", false},
                             {"tools", {{{"name", "f"}}, {{"name", "g"}}}}};
    EXPECT_EQ(tmpl.apply(kUser, options), "1970-01-01|False|2|1");
    // Without a pinned clock the local date is printed.
    options.now.reset();
    const std::string today = tmpl.apply(kUser, options);
    EXPECT_EQ(today.size(), std::string("yyyy-mm-dd|False|2|1").size());
    options.extra_context = nlohmann::ordered_json::array();
    EXPECT_THAT([&] { tmpl.apply(kUser, options); },
                ::testing::ThrowsMessage<Error>(HasSubstr("must be a JSON object")));
}

TEST(ChatTemplate, RuntimeErrorsAreOneLineWithTheSource) {
    const auto tmpl = ChatTemplate::from_string(
        "{% if messages[0].role == 'system' %}\n{{ raise_exception('System role not supported') "
        "}}\n{% endif %}",
        "", "");
    EXPECT_THAT([&] { tmpl.apply(kSystemUser, true); },
                ::testing::ThrowsMessage<Error>(::testing::StrEq(
                    "chat template (string): jinja error at line 2: System role not supported")));
    EXPECT_EQ(tmpl.apply(kUser, true), "");
}

TEST(ChatTemplate, ApplyIsSafeFromSeveralThreads) {
    const auto tmpl = ChatTemplate::from_string(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content|length "
        "%}"
        "{% endfor %}{{ ns.n }}",
        "", "");
    std::vector<std::thread> threads;
    std::vector<std::string> results(8);
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            std::vector<ChatMessage> messages(100 + t, ChatMessage{"user", "abc"});
            for (int i = 0; i < 50; ++i) results[t] = tmpl.apply(messages, false);
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 8; ++t) EXPECT_EQ(results[t], std::to_string(3 * (100 + t)));
}

}  // namespace
}  // namespace headroom
