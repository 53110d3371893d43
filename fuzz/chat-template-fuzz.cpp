// libFuzzer entry point for chat templates (untrusted: they come from GGUF
// files): any source either fails to parse or renders within the limits,
// raising only headroom::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/chat-template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto tmpl = headroom::ChatTemplate::from_string(
            std::string(reinterpret_cast<const char*>(data), size), "<s>", "</s>");
        headroom::jinja::RenderLimits limits;
        limits.max_steps = 200000;
        limits.max_output_bytes = 1 << 20;
        limits.max_memory_bytes = 16 << 20;
        tmpl.set_limits(limits);
        (void)tmpl.apply(
            {{"system", "Be brief."}, {"user", "Hi {{ there }}"}, {"assistant", "Hello."}}, true);
    } catch (const headroom::Error&) {
    }
    return 0;
}
