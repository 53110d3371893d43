// The CPU backend's weights at load. A tied embedding, which the output
// matmul and get_rows both read, is repacked for the matmul where the file is
// mapped, and its rows read back from the file as get_rows reads them after
// its pages are dropped; read into memory, it stays as stored (dropping
// those bytes would lose them, and two copies would hold it twice). An
// embedding only looked up stays as stored. The weights term counts each
// upload's file bytes once either way.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string_view>

#include "core/ledger.h"
#include "core/mapped-file.h"
#include "kernel-test-util.h"
#include "kernels/cpu/cpu-backend.h"
#include "kernels/cpu/ref/quant.h"

namespace headroom::kernels {
namespace {

using test::fast_backends;

TEST(CpuBackendWeights, ATiedEmbeddingIsRepackedWhereItsFileIsMapped) {
    HR_REQUIRE_FAST_BACKEND();
    // 40 rows: AVX-512's last row group of 16 is half full. After a page of other
    // bytes, so the matrix's own pages are dropped.
    constexpr int64_t kRows = 40, kCols = 512;
    constexpr uint64_t kAt = 4096;
    const TensorType type = TensorType::Q8_0;
    const uint64_t rb = row_bytes(type, kCols);
    std::vector<uint8_t> bytes(kAt + rb * kRows, 0x5A);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(kCols);
    for (int64_t r = 0; r < kRows; ++r) {
        for (auto& v : row) v = normal(rng);
        ref::quantize_row(type, row.data(), bytes.data() + kAt + r * rb, kCols);
    }
    const std::string path = ::testing::TempDir() + "tied-embedding.bin";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    const MappedFile file(path);

    for (const Ops* ops : fast_backends()) {
        SCOPED_TRACE(ops->name);
        for (const bool mapped : {true, false}) {
            SCOPED_TRACE(mapped ? "mapped" : "read into memory");
            const std::vector<uint8_t> in_memory(bytes);
            const std::span<const uint8_t> data =
                mapped ? file.bytes() : std::span<const uint8_t>(in_memory);
            const HostTensor t{data.data() + kAt, type, kRows, kCols, rb};
            Ledger ledger;
            CpuBackend cpu(ledger, 2, ops);
            cpu.begin_weights(data, mapped);
            const Weight tied = cpu.upload_matrix(t, WeightUse::MatmulAndRows);
            const Weight lookup = cpu.upload_matrix(t, WeightUse::Rows);
            cpu.end_weights();

            const Matrix& m = cpu.matrix(tied);
            EXPECT_EQ(m.packed != nullptr, mapped);
            EXPECT_EQ(cpu.matrix(lookup).packed, nullptr);
            // Whole row groups (a vector's int32 lanes: 16 rows with
            // AVX-512, 8 with AVX2), in 64-byte units.
            const int64_t lanes = std::string_view(ops->name) == "avx512" ? 16 : 8;
            const uint64_t packed = static_cast<uint64_t>((kRows + lanes - 1) / lanes * lanes) * rb;
            EXPECT_EQ(cpu.packed_bytes(), mapped ? (packed + 63) / 64 * 64 : 0);
            EXPECT_EQ(ledger.snapshot()[Term::Weights].allocated_bytes, 2 * rb * kRows);
            // The rows get_rows reads, from the file (its dropped pages come back).
            EXPECT_EQ(m.data, data.data() + kAt);
            EXPECT_EQ(std::memcmp(m.data, bytes.data() + kAt, rb * kRows), 0);
        }
    }
}

}  // namespace
}  // namespace headroom::kernels
