// Writer -> reader round trip: what is written is what is read back.
#include "format/gguf-writer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "format/gguf-reader.h"

namespace headroom::gguf {
namespace {

TEST(GgufWriter, RoundTripsMetadataAndTensors) {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 3);
    w.set_i32("neg", -7);
    w.set_u64("big", 1ull << 40);
    w.set_f32("eps", 1e-5f);
    w.set_bool("flag", true);
    w.set_strings("tokens", {"a", "bb", ""});
    w.set_f32s("scores", {0.5f, -1.0f});
    w.set_i32s("types", {1, 3, 6});
    std::vector<uint8_t> data(3 * 32 * 4);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
    w.add_tensor("w", TensorType::F32, {32, 3}, data);
    w.add_tensor("q", TensorType::Q8_0, {64}, [](uint8_t* dst) {
        for (int i = 0; i < 68; ++i) dst[i] = static_cast<uint8_t>(100 + i);
    });
    w.set_u32("llama.block_count", 4);  // setting a key again replaces it

    const auto bytes = w.to_bytes();
    const GgufFile g = GgufFile::parse(bytes, "mem.gguf");
    EXPECT_EQ(g.architecture(), "llama");
    EXPECT_EQ(g.require_uint("llama.block_count"), 4u);
    EXPECT_EQ(*g.get_int("neg"), -7);
    EXPECT_EQ(g.require_uint("big"), 1ull << 40);
    EXPECT_FLOAT_EQ(static_cast<float>(*g.get_float("eps")), 1e-5f);
    EXPECT_TRUE(*g.get_bool("flag"));
    const Array& tokens = g.require_array("tokens");
    ASSERT_EQ(tokens.strings.size(), 3u);
    EXPECT_EQ(tokens.strings[1], "bb");
    EXPECT_EQ(tokens.strings[2], "");
    EXPECT_FLOAT_EQ(static_cast<float>(g.require_array("scores").float_at(1)), -1.0f);
    EXPECT_EQ(g.require_array("types").int_at(2), 6);
    ASSERT_EQ(g.tensors().size(), 2u);
    const TensorInfo* t = g.find_tensor("w");
    EXPECT_EQ(t->shape(), (std::vector<int64_t>{32, 3}));
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->size_bytes), data);
    const TensorInfo* q = g.find_tensor("q");
    EXPECT_EQ(q->type, TensorType::Q8_0);
    EXPECT_EQ(q->size_bytes, 68u);
    EXPECT_EQ(q->data[67], 167);
    EXPECT_EQ(q->offset % 32, 0u);

    // The file on disk is the same bytes.
    const auto path = std::filesystem::temp_directory_path() / "headroom-writer-test.gguf";
    w.write(path.string());
    const GgufFile from_disk = GgufFile::open(path.string());
    EXPECT_EQ(from_disk.file_size_bytes(), bytes.size());
    EXPECT_EQ(from_disk.find_tensor("q")->data[0], 100);
    std::filesystem::remove(path);
}

TEST(GgufWriter, CopyMetadataKeepsTypesAndValues) {
    GgufWriter a;
    a.set_string("general.architecture", "qwen2");
    a.set_u32s("u", {1, 2, 3});
    a.set_u8("small", 9);
    const auto bytes_a = a.to_bytes();
    const GgufFile ga = GgufFile::parse(bytes_a, "a.gguf");
    GgufWriter b;
    b.copy_metadata(ga, {"small"});
    const auto bytes_b = b.to_bytes();
    const GgufFile gb = GgufFile::parse(bytes_b, "b.gguf");
    EXPECT_EQ(gb.architecture(), "qwen2");
    EXPECT_EQ(gb.require_array("u").elem_type, ValueType::UINT32);
    EXPECT_EQ(gb.require_array("u").uint_at(2), 3u);
    EXPECT_FALSE(gb.has("small"));
}

}  // namespace
}  // namespace headroom::gguf
