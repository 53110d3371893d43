// The safetensors header reader against hand-built files: a valid file's
// tensors at the byte offsets written, and one malformed file per validation
// rule, each one Error naming the file and the tensor, never a crash.
#include "format/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

namespace headroom::safetensors {
namespace {

using ::testing::HasSubstr;

// 8-byte little-endian length, the JSON header, then `data_bytes` bytes 0, 1, 2...
std::vector<uint8_t> file(const std::string& header, size_t data_bytes) {
    std::vector<uint8_t> out(8 + header.size() + data_bytes);
    const uint64_t n = header.size();
    std::memcpy(out.data(), &n, 8);
    std::memcpy(out.data() + 8, header.data(), header.size());
    for (size_t i = 0; i < data_bytes; ++i) out[8 + header.size() + i] = static_cast<uint8_t>(i);
    return out;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
    try {
        parse_header(bytes, "m.safetensors");
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(Safetensors, ReadsTensorsAtTheirOffsets) {
    // b: 2 x 3 BF16 = 12 bytes at [0, 12); a: 4 F32 = 16 bytes at [12, 28).
    const std::string header =
        R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[4],"data_offsets":[12,28]},)"
        R"("b":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}})";
    const auto bytes = file(header, 28);
    const Header h = parse_header(bytes, "m.safetensors");
    ASSERT_EQ(h.tensors.size(), 2u);
    EXPECT_EQ(h.data_offset, 8 + header.size());
    // Sorted by where their data lies.
    EXPECT_EQ(h.tensors[0].name, "b");
    EXPECT_EQ(h.tensors[0].dtype, Dtype::BF16);
    EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(h.tensors[0].begin, h.data_offset);
    EXPECT_EQ(h.tensors[0].size_bytes, 12u);
    EXPECT_EQ(h.tensors[1].name, "a");
    EXPECT_EQ(h.tensors[1].begin, h.data_offset + 12);
    EXPECT_EQ(h.tensors[1].n_elements(), 4u);
    EXPECT_EQ(bytes[h.tensors[1].begin], 12);  // the data byte written at offset 12
}

TEST(Safetensors, RefusesEachMalformedHeaderByName) {
    const std::string t = R"("dtype":"F16","shape":[2,2],"data_offsets":)";
    EXPECT_THAT(error_of({1, 2, 3}), HasSubstr("too short"));
    auto lying_length = file("{}", 0);
    lying_length[0] = 200;
    EXPECT_THAT(error_of(lying_length), HasSubstr("header is said to be 200 bytes"));
    EXPECT_THAT(error_of(file("{not json", 0)), HasSubstr("not valid JSON"));
    EXPECT_THAT(error_of(file("[1,2]", 0)), HasSubstr("expected a JSON object"));
    EXPECT_THAT(error_of(file(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", 2)),
                HasSubstr("tensor 'w': dtype \"Q4\" is not one headroom reads"));
    EXPECT_THAT(error_of(file(R"({"w":{"dtype":"F16","shape":[2,-1],"data_offsets":[0,8]}})", 8)),
                HasSubstr("not a positive integer"));
    EXPECT_THAT(error_of(file(R"({"w":{)" + t + "[0,8]}}", 4)),
                HasSubstr("data_offsets [0, 8] lie outside the 4 bytes of data"));
    EXPECT_THAT(error_of(file(R"({"w":{)" + t + "[0,6]}}", 8)),
                HasSubstr("shape [2,2] of F16 needs 8 bytes but data_offsets [0, 6] hold 6"));
    EXPECT_THAT(error_of(file(R"({"w":{)" + t + R"([0,8]},"v":{)" + t + "[4,12]}}", 12)),
                HasSubstr("overlap"));
    EXPECT_THAT(error_of(file(R"({"w":{"dtype":"F16","shape":[4]}})", 8)),
                HasSubstr("tensor 'w': 'data_offsets' is missing"));
    EXPECT_THAT(
        error_of(file(R"({"w":{"dtype":"F16","shape":[1,1,1,1,1],"data_offsets":[0,2]}})", 2)),
        HasSubstr("at most 4"));
}

}  // namespace
}  // namespace headroom::safetensors
