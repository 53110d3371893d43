// libFuzzer entry point for the GGUF reader: any bytes either parse or raise
// headroom::Error; anything else (a crash, a sanitizer report, another
// exception type) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "format/gguf-reader.h"
#include "shape/hparams.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const auto file = headroom::gguf::GgufFile::parse(std::span(data, size), "fuzz.gguf");
        // Touch what the rest of headroom reads from a parsed file.
        for (const auto& [key, value] : file.metadata()) (void)value.to_display();
        uint64_t sum = 0;
        for (const auto& t : file.tensors()) sum += t.size_bytes ? t.data[t.size_bytes - 1] : 0;
        (void)sum;
        (void)headroom::read_hparams(file, false);
    } catch (const headroom::Error&) {
    }
    return 0;
}
