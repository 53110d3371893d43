// Chat templates against renderings by transformers' own renderer (jinja2),
// made by scripts/make-golden-chat.py: the 71 public templates shipped with
// llama.cpp, templates embedded in GGUF files, and the built-in templates
// chosen for GGUF files without one. Every rendering must be byte-identical;
// where jinja2 raised an error (the template's raise_exception(), an undefined
// attribute, a type error), ours must raise one too, carrying jinja2's message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/gguf-reader.h"
#include "model/registry.h"
#include "test-util.h"
#include "tokenizer/chat-template.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// The instant the goldens pinned strftime_now() to: 2025-07-26 12:34:56 UTC.
constexpr std::time_t kFixedNow = 1753533296;

json read_json(const fs::path& path) {
    std::ifstream f(path);
    return json::parse(f);
}

std::string read_text(const fs::path& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<std::string> golden_names() {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(test::data_path("chat/golden")))
        names.push_back(entry.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

// A message's other keys (tool_calls, tool_call_id, name, a null content)
// go to the template as they are.
std::vector<ChatMessage> conversation(const json& messages) {
    std::vector<ChatMessage> out;
    for (const auto& m : messages) {
        ChatMessage msg{m["role"], m["content"].is_string() ? m["content"].get<std::string>() : "",
                        nlohmann::ordered_json::object()};
        for (const auto& [k, v] : m.items())
            if (k != "role" && (k != "content" || !v.is_string()))
                msg.fields[k] = nlohmann::ordered_json::parse(v.dump());
        out.push_back(std::move(msg));
    }
    return out;
}

class GoldenTemplate : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTemplate, RendersLikeTransformers) {
    const json golden = read_json(test::data_path("chat/golden/" + GetParam() + ".json"));
    const json conversations = read_json(test::data_path("chat/conversations.json"));
    const json contexts = read_json(test::data_path("chat/contexts.json"));
    const json tool_conversations = read_json(test::data_path("chat/tool-conversations.json"));
    const fs::path models = models_dir();
    std::optional<ChatTemplate> tmpl;
    if (golden.contains("template")) {
        const fs::path path = models / golden["template"].get<std::string>();
        ASSERT_TRUE(fs::exists(path)) << path << " missing: run scripts/fetch-reference-data.sh";
        tmpl = ChatTemplate::from_string(read_text(path), golden["bos_token"], golden["eos_token"]);
    } else {
        const fs::path path = models / golden["gguf"].get<std::string>();
        ASSERT_TRUE(fs::exists(path))
            << path << " missing: run scripts/fetch-model.sh / fetch-reference-data.sh";
        const auto file = gguf::GgufFile::open(path.string());
        tmpl = ChatTemplate::from_gguf(file);
        EXPECT_EQ(tmpl->bos_token(), golden["bos_token"].get<std::string>());
        EXPECT_EQ(tmpl->eos_token(), golden["eos_token"].get<std::string>());
        if (golden.contains("builtin")) {
            const std::string name = golden["builtin"];
            EXPECT_EQ(tmpl->source(), "built-in " + name);
            EXPECT_EQ(tmpl->text(), golden["template_text"].get<std::string>());
        } else {
            EXPECT_EQ(tmpl->source(), "gguf");
        }
    }
    for (const auto& c : golden["cases"]) {
        std::string label = c["conversation"].get<std::string>() +
                            (c["add_generation_prompt"].get<bool>() ? " +gen" : "");
        ChatTemplateOptions options;
        if (c.contains("context")) {
            label += " with " + c["context"].get<std::string>();
            options.extra_context = contexts[c["context"].get<std::string>()];
        }
        options.add_generation_prompt = c["add_generation_prompt"];
        options.now = kFixedNow;
        const std::string name = c["conversation"];
        const auto messages = conversation(conversations.contains(name) ? conversations[name]
                                                                        : tool_conversations[name]);
        std::string output, error;
        try {
            output = tmpl->apply(messages, options);
        } catch (const Error& e) {
            error = e.what();
        }
        if (c.contains("output")) {
            EXPECT_EQ(error, "") << label;
            EXPECT_EQ(output, c["output"].get<std::string>()) << label;
        } else {
            EXPECT_NE(error, "") << label << ": jinja2 raised " << c["error"];
            EXPECT_NE(error.find(c["error"].get<std::string>()), std::string::npos)
                << label << ": " << error;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Chat, GoldenTemplate, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) {
                             std::string name = info.param;
                             for (char& c : name)
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             return name;
                         });

}  // namespace
}  // namespace headroom
