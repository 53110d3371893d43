// libFuzzer entry point for the server's request parser: any body gets either
// a parsed request or an OpenAI error; nothing else. A request that parses
// with an output constraint or tools has its grammar compiled (against the
// synthetic model's vocabulary): a bad schema, regex or EBNF grammar is an
// error, never a crash. The body is also read as a model's answer by every
// tool-call parser.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "engine/grammar.h"
#include "format/gguf-reader.h"
#include "format/gguf-writer.h"
#include "server/openai-json.h"
#include "server/tool-calls.h"
#include "tokenizer/tokenizer.h"
#include "tools/synth.h"

namespace {

const headroom::GrammarCompiler& compiler() {
    static const auto tokenizer = [] {
        headroom::SynthOptions opt;
        opt.progress = false;
        const auto bytes =
            headroom::make_synth_model(headroom::find_synth_shape("tiny"), opt).to_bytes();
        return headroom::Tokenizer::from_gguf(headroom::gguf::GgufFile::parse(bytes, "tiny"));
    }();
    static const headroom::GrammarCompiler c(*tokenizer, 8u << 20);
    return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace headroom::server;
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    for (auto endpoint : {Endpoint::Chat, Endpoint::Completion}) {
        GenerationSpec spec;
        if (parse_generation_request(body, endpoint, spec)) continue;
        auto grammar = spec.grammar ? spec.grammar
                                    : tool_grammar(ToolFormat::Hermes, spec.tools, spec.tool_choice,
                                                   spec.parallel_tool_calls);
        if (grammar) {
            std::string why;
            (void)compiler().compile(*grammar, &why);
        }
    }
    for (auto format : {ToolFormat::Generic, ToolFormat::Hermes, ToolFormat::Llama3,
                        ToolFormat::Mistral, ToolFormat::Harmony, ToolFormat::DeepSeek}) {
        (void)parse_answer(format, body, true);
        AnswerSplitter s(format, true, size % 2 == 1);
        for (size_t i = 0; i < body.size(); i += 7) (void)s.push(body.substr(i, 7));
        (void)s.finish();
    }
    return 0;
}
