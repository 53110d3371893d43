// The reader against hand-built files: every value type, tolerant integer
// reads, and one malformed file per validation rule. Each malformed file must
// produce one Error naming the offset and the field, never a crash.
#include "format/gguf-reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "core/error.h"
#include "test-util.h"

namespace headroom::gguf {
namespace {

using test::Bytes;
using ::testing::HasSubstr;

constexpr uint32_t kString = 8, kArray = 9, kU32 = 4, kI32 = 5, kU64 = 10, kF32 = 6, kBool = 7;

// Header, then `kv` (already encoded), then tensor infos and data.
struct FileBuilder {
    uint32_t version = 3;
    uint64_t n_kv = 0;
    Bytes kv;
    uint64_t n_tensors = 0;
    Bytes infos;
    Bytes data;
    uint64_t alignment = 32;

    FileBuilder() { string_kv("general.architecture", "llama"); }
    FileBuilder& string_kv(std::string_view key, std::string_view value) {
        kv.str(key).u32(kString).str(value);
        ++n_kv;
        return *this;
    }
    FileBuilder& u32_kv(std::string_view key, uint32_t value) {
        kv.str(key).u32(kU32).u32(value);
        ++n_kv;
        return *this;
    }
    // A tensor info; data of `n_bytes` is appended at `offset` if offset is the current end.
    FileBuilder& tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type,
                        uint64_t offset) {
        infos.str(name).u32(static_cast<uint32_t>(dims.size()));
        for (auto d : dims) infos.u64(d);
        infos.u32(type).u64(offset);
        ++n_tensors;
        return *this;
    }
    std::vector<uint8_t> build() const {
        Bytes b;
        b.u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
        b.bytes().insert(b.bytes().end(), kv.bytes().begin(), kv.bytes().end());
        b.bytes().insert(b.bytes().end(), infos.bytes().begin(), infos.bytes().end());
        b.align(alignment);
        b.bytes().insert(b.bytes().end(), data.bytes().begin(), data.bytes().end());
        return b.bytes();
    }
};

std::string parse_error(const std::vector<uint8_t>& bytes) {
    try {
        GgufFile::parse(bytes, "test.gguf");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(GgufReader, ParsesEveryValueTypeAndNestedArrays) {
    FileBuilder f;
    f.kv.str("u8").u32(0).put<uint8_t>(200);
    f.kv.str("i8").u32(1).put<int8_t>(-100);
    f.kv.str("u16").u32(2).put<uint16_t>(60000);
    f.kv.str("i16").u32(3).put<int16_t>(-30000);
    f.kv.str("u32").u32(4).put<uint32_t>(4000000000u);
    f.kv.str("i32").u32(5).put<int32_t>(-2000000000);
    f.kv.str("f32").u32(6).put<float>(1.5f);
    f.kv.str("bool").u32(7).put<uint8_t>(1);
    f.kv.str("str").u32(8).str("héllo");
    f.kv.str("u64").u32(10).put<uint64_t>(1ull << 60);
    f.kv.str("i64").u32(11).put<int64_t>(-(1ll << 60));
    f.kv.str("f64").u32(12).put<double>(-2.25);
    f.kv.str("arr_f32").u32(kArray).u32(kF32).u64(3).put<float>(1).put<float>(2).put<float>(3);
    f.kv.str("arr_str").u32(kArray).u32(kString).u64(2).str("a").str("bc");
    // [[1, 2], [3]] as an array of arrays of i32.
    f.kv.str("nested").u32(kArray).u32(kArray).u64(2);
    f.kv.u32(kI32).u64(2).put<int32_t>(1).put<int32_t>(2);
    f.kv.u32(kI32).u64(1).put<int32_t>(3);
    f.n_kv += 15;
    const auto bytes = f.build();
    const GgufFile g = GgufFile::parse(bytes, "t.gguf");
    EXPECT_EQ(*g.get_uint("u8"), 200u);
    EXPECT_EQ(*g.get_int("i8"), -100);
    EXPECT_EQ(*g.get_uint("u16"), 60000u);
    EXPECT_EQ(*g.get_int("i16"), -30000);
    EXPECT_EQ(*g.get_uint("u32"), 4000000000u);
    EXPECT_EQ(*g.get_int("i32"), -2000000000);
    EXPECT_FLOAT_EQ(*g.get_float("f32"), 1.5f);
    EXPECT_TRUE(*g.get_bool("bool"));
    EXPECT_EQ(*g.get_string("str"), "héllo");
    EXPECT_EQ(*g.get_uint("u64"), 1ull << 60);
    EXPECT_EQ(*g.get_int("i64"), -(1ll << 60));
    EXPECT_DOUBLE_EQ(*g.get_float("f64"), -2.25);
    const Array* a = g.get_array("arr_f32");
    ASSERT_NE(a, nullptr);
    ASSERT_EQ(a->n, 3u);
    EXPECT_FLOAT_EQ(a->float_at(2), 3.0f);
    const Array* s = g.get_array("arr_str");
    ASSERT_EQ(s->strings.size(), 2u);
    EXPECT_EQ(s->strings[1], "bc");
    const Array* nested = g.get_array("nested");
    ASSERT_EQ(nested->arrays.size(), 2u);
    const auto& first = std::get<Array>(nested->arrays[0].data);
    EXPECT_EQ(first.n, 2u);
    EXPECT_EQ(first.int_at(1), 2);
    EXPECT_EQ(std::get<Array>(nested->arrays[1].data).int_at(0), 3);
    EXPECT_EQ(g.metadata().size(), 16u);
    EXPECT_EQ(g.version(), 3u);
}

TEST(GgufReader, IntegersAreReadTolerantly) {
    FileBuilder f;
    f.kv.str("as_i32").u32(kI32).put<int32_t>(30);
    f.kv.str("as_u64").u32(kU64).put<uint64_t>(30);
    f.kv.str("negative").u32(kI32).put<int32_t>(-1);
    f.kv.str("text").u32(kString).str("30");
    f.n_kv += 4;
    const auto bytes = f.build();
    const GgufFile g = GgufFile::parse(bytes, "t.gguf");
    EXPECT_EQ(g.require_uint("as_i32"), 30u);
    EXPECT_EQ(g.require_uint("as_u64"), 30u);
    EXPECT_DOUBLE_EQ(*g.get_float("as_i32"), 30.0);
    EXPECT_THAT([&] { g.require_uint("negative"); },
                ::testing::ThrowsMessage<Error>(HasSubstr("expected a non-negative integer")));
    EXPECT_THAT([&] { g.get_uint("text"); }, ::testing::ThrowsMessage<Error>(HasSubstr("'text'")));
    EXPECT_THAT([&] { g.require_uint("absent.key"); },
                ::testing::ThrowsMessage<Error>(HasSubstr("'absent.key' is missing")));
    EXPECT_FALSE(g.get_uint("absent.key").has_value());
}

TEST(GgufReader, ReadsVersion2AndTensorData) {
    FileBuilder f;
    f.version = 2;
    f.tensor("w", {32, 2}, 0 /*F32*/, 0);
    f.tensor("b", {4}, 1 /*F16*/, 256);
    for (int i = 0; i < 64; ++i) f.data.put<float>(static_cast<float>(i));
    f.data.put<uint16_t>(0x3C00).put<uint16_t>(0).put<uint16_t>(0).put<uint16_t>(0);
    const auto bytes = f.build();
    const GgufFile g = GgufFile::parse(bytes, "t.gguf");
    ASSERT_EQ(g.tensors().size(), 2u);
    const TensorInfo* w = g.find_tensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->size_bytes, 256u);
    EXPECT_EQ(w->n_rows(), 2);
    float last;
    std::memcpy(&last, w->data + 63 * 4, 4);
    EXPECT_EQ(last, 63.0f);
    EXPECT_EQ(g.find_tensor("b")->size_bytes, 8u);
    EXPECT_EQ(g.data_offset() % 32, 0u);
    EXPECT_EQ(g.tensor_bytes_total(), 264u);
}

TEST(GgufReader, HonoursGeneralAlignment) {
    FileBuilder f;
    f.alignment = 64;
    f.u32_kv("general.alignment", 64);
    f.tensor("a", {4}, 0, 0);
    f.tensor("b", {4}, 0, 64);
    f.data.zeros(64 + 16);
    const auto bytes = f.build();
    const GgufFile g = GgufFile::parse(bytes, "t.gguf");
    EXPECT_EQ(g.alignment(), 64u);
    EXPECT_EQ(g.data_offset() % 64, 0u);
}

struct Malformed {
    const char* what;
    std::vector<uint8_t> bytes;
    std::vector<std::string> expect;  // substrings of the message
};

std::vector<Malformed> malformed_files() {
    std::vector<Malformed> cases;
    auto add = [&](const char* what, std::vector<uint8_t> b, std::vector<std::string> expect) {
        cases.push_back({what, std::move(b), std::move(expect)});
    };
    add("empty", {}, {"byte 0", "magic", "too short"});
    {
        Bytes b;
        b.raw("GGML").u32(3).u64(0).u64(0);
        add("bad magic", b.bytes(), {"byte 0", "magic", "not a GGUF file"});
    }
    for (uint32_t v : {1u, 4u}) {
        FileBuilder f;
        f.version = v;
        add("bad version", f.build(), {"byte 4", "version", "expected 2 or 3"});
    }
    {
        FileBuilder f;
        f.n_tensors = 1ull << 40;
        add("tensor count beyond file", f.build(), {"byte 8", "tensor_count", "cannot fit"});
    }
    {
        FileBuilder f;
        f.n_kv = 1ull << 40;
        add("kv count beyond file", f.build(), {"byte 16", "metadata_kv_count", "cannot fit"});
    }
    {
        FileBuilder f;
        f.kv.u64(1ull << 50);  // a key whose length runs past the end
        f.n_kv += 1;
        add("key length beyond file", f.build(), {"byte 69", "metadata key", "exceeds"});
    }
    {
        FileBuilder f;
        f.kv.str("").u32(kU32).u32(1);
        f.n_kv += 1;
        add("empty key", f.build(), {"metadata key", "empty key"});
    }
    {
        FileBuilder f;
        f.kv.str("k").u32(13).u32(0);
        f.n_kv += 1;
        add("unknown value type", f.build(), {"metadata 'k'", "value type 13 is unknown"});
    }
    {
        FileBuilder f;
        f.kv.str("k").u32(kString).u64(1000).raw("short");
        f.n_kv += 1;
        add("string beyond file", f.build(), {"metadata 'k'", "needs 1000 bytes"});
    }
    {
        FileBuilder f;
        f.kv.str("k").u32(kArray).u32(kU32).u64(1ull << 40);
        f.n_kv += 1;
        add("array beyond file", f.build(), {"metadata 'k'", "cannot fit"});
    }
    {
        FileBuilder f;
        f.kv.str("k").u32(kArray).u32(14).u64(1);
        f.n_kv += 1;
        add("array of unknown type", f.build(), {"metadata 'k'", "value type 14 is unknown"});
    }
    {
        FileBuilder f;
        f.kv.str("k").u32(kArray);
        for (int i = 0; i < 10; ++i) f.kv.u32(kArray).u64(1);
        f.kv.zeros(64);
        f.n_kv += 1;
        add("arrays nested too deep", f.build(), {"metadata 'k'", "nested deeper"});
    }
    {
        FileBuilder f;
        f.kv.str("k").u32(kBool).put<uint8_t>(7);
        f.n_kv += 1;
        add("bool not 0/1", f.build(), {"metadata 'k'", "expected 0 or 1"});
    }
    {
        FileBuilder f;
        f.string_kv("general.architecture", "llama");
        add("duplicate key", f.build(), {"general.architecture", "duplicate key"});
    }
    {
        FileBuilder f;
        f.u32_kv("general.alignment", 24);
        add("alignment not a power of two", f.build(), {"general.alignment", "power of two"});
    }
    {
        FileBuilder f;
        f.kv = Bytes();
        f.n_kv = 0;
        f.u32_kv("llama.block_count", 1);
        add("missing architecture", f.build(), {"general.architecture", "missing"});
    }
    {
        FileBuilder f;
        f.kv = Bytes();
        f.n_kv = 0;
        f.u32_kv("general.architecture", 1);
        add("architecture not a string", f.build(), {"general.architecture", "expected a string"});
    }
    for (uint32_t n_dims : {0u, 5u}) {
        FileBuilder f;
        f.infos.str("t").u32(n_dims);
        f.infos.zeros(64);
        f.n_tensors = 1;
        add("bad n_dims", f.build(), {"tensor 't'", "n_dims", "expected 1..4"});
    }
    {
        FileBuilder f;
        f.tensor("t", {32, 0}, 0, 0);
        add("zero dimension", f.build(), {"tensor 't'", "dimension 1 is 0", "expected > 0"});
    }
    {
        FileBuilder f;
        f.tensor("t", {1ull << 32, 1ull << 32}, 0, 0);
        add("element count overflow", f.build(), {"tensor 't'", "overflows"});
    }
    {
        FileBuilder f;
        f.tensor("t", {32}, 5 /* removed Q4_2 */, 0);
        add("unknown tensor type", f.build(), {"tensor 't'", "tensor type 5 is unknown"});
    }
    {
        FileBuilder f;
        f.tensor("t", {33}, 2 /* Q4_0 */, 0);
        f.data.zeros(64);
        add("row not a multiple of the block", f.build(), {"tensor 't'", "block size 32"});
    }
    {
        FileBuilder f;
        f.tensor("t", {4}, 0, 4);
        f.data.zeros(64);
        add("misaligned offset", f.build(), {"tensor 't'", "not a multiple of the alignment"});
    }
    {
        FileBuilder f;
        f.tensor("t", {64}, 0, 0);
        f.data.zeros(100);  // needs 256
        add("data outside file", f.build(), {"tensor 't'", "outside", "data section"});
    }
    {
        FileBuilder f;
        f.tensor("a", {16}, 0, 0);
        f.tensor("b", {16}, 0, 32);  // a occupies [0, 64)
        f.data.zeros(128);
        add("overlapping tensors", f.build(), {"tensor 'b'", "overlaps tensor 'a'"});
    }
    {
        FileBuilder f;
        f.tensor("a", {4}, 0, 0);
        f.tensor("a", {4}, 0, 32);
        f.data.zeros(64);
        add("duplicate tensor name", f.build(), {"tensor 'a'", "duplicate tensor name"});
    }
    {
        FileBuilder f;
        f.tensor("t", {4}, 0, 0);
        f.data.zeros(16);
        auto bytes = f.build();
        bytes.resize(bytes.size() - 20);  // cut into the tensor infos' padding and data
        add("truncated", bytes, {"test.gguf"});
    }
    return cases;
}

TEST(GgufReader, EveryMalformedFileGivesOneClearError) {
    for (const auto& c : malformed_files()) {
        SCOPED_TRACE(c.what);
        const std::string msg = parse_error(c.bytes);
        ASSERT_FALSE(msg.empty()) << "accepted a malformed file";
        EXPECT_THAT(msg, HasSubstr("test.gguf"));
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
        for (const auto& e : c.expect) EXPECT_THAT(msg, HasSubstr(e));
    }
}

TEST(GgufReader, EveryTruncationOfAValidFileIsAnErrorNotACrash) {
    FileBuilder f;
    f.u32_kv("llama.block_count", 2);
    f.kv.str("arr").u32(kArray).u32(kString).u64(2).str("x").str("yz");
    f.n_kv += 1;
    f.tensor("w", {32, 2}, 8 /* Q8_0 */, 0);
    f.data.zeros(68);
    const auto full = f.build();
    ASSERT_NO_THROW(GgufFile::parse(full, "test.gguf"));
    for (size_t n = 0; n < full.size(); ++n) {
        std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
        EXPECT_FALSE(parse_error(cut).empty()) << "accepted a file cut to " << n << " bytes";
    }
}

TEST(GgufReader, OpenNamesTheFileWhenItIsMissing) {
    EXPECT_THAT([] { GgufFile::open("/nonexistent/model.gguf"); },
                ::testing::ThrowsMessage<Error>(HasSubstr("/nonexistent/model.gguf")));
}

}  // namespace
}  // namespace headroom::gguf
