// libFuzzer entry point for the server's request parser: any body gets either
// a parsed request or an OpenAI error; nothing else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai-json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    for (auto endpoint :
         {headroom::server::Endpoint::Chat, headroom::server::Endpoint::Completion}) {
        headroom::server::GenerationSpec spec;
        (void)headroom::server::parse_generation_request(body, endpoint, spec);
    }
    return 0;
}
