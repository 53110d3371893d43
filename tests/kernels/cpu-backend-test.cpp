// The CPU backend's weights at load. Repacked copies are cut into a part per
// pool thread, each thread's parts one stream. A tied embedding, which the output
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
#include "kernels/cpu/ref/quant-matmul.h"
#include "kernels/cpu/ref/quant.h"

namespace headroom::kernels {
namespace {

using test::fast_tables;

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

    for (const Ops* ops : fast_tables()) {
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
            // AVX-512, 8 with AVX2 and AVX-VNNI), in 64-byte units.
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

// With a pool of n threads, each matrix's repacked copy is cut into n parts
// of whole row groups, G t / n .. G (t + 1) / n of its G groups, and part t
// of every matrix follows part t of the one uploaded before it (64-byte
// aligned): a thread's share of one decode matmul after another is one
// stream. An expert tensor's experts stay whole; one thread cuts nothing.
// Matmuls through the backend, one token and a batch, equal the spec.
TEST(CpuBackendWeights, EachThreadsPartsOfTheMatricesFollowOneAnother) {
    HR_REQUIRE_FAST_BACKEND();
    const TensorType type = TensorType::Q4_0;
    constexpr int64_t kCols = 256;
    const uint64_t rb = row_bytes(type, kCols);
    const int64_t rows[3] = {40, 24, 72};
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(kCols);
    auto random_rows = [&](int64_t n) {
        std::vector<uint8_t> b(rb * static_cast<uint64_t>(n));
        for (int64_t r = 0; r < n; ++r) {
            for (auto& v : row) v = normal(rng);
            ref::quantize_row(type, row.data(), b.data() + r * rb, kCols);
        }
        return b;
    };
    std::vector<std::vector<uint8_t>> bytes;
    for (const int64_t n : rows) bytes.push_back(random_rows(n));
    const std::vector<uint8_t> experts = random_rows(2 * 32);

    for (const Ops* ops : fast_tables()) {
        const int64_t lanes = ops->packed_group_rows;
        for (const int n_threads : {1, 2, 3}) {
            SCOPED_TRACE(std::string(ops->name) + ", " + std::to_string(n_threads) + " threads");
            Ledger ledger;
            CpuBackend cpu(ledger, n_threads, ops);
            cpu.begin_weights({}, false);
            Weight w[3];
            for (int i = 0; i < 3; ++i)
                w[i] = cpu.upload_matrix({bytes[i].data(), type, rows[i], kCols, rb},
                                         WeightUse::Matmul);
            const Weight e =
                cpu.upload_matrix({experts.data(), type, 32, kCols, rb, 2}, WeightUse::Matmul);
            cpu.end_weights();

            for (uint32_t x = 0; x < 2; ++x) EXPECT_EQ(cpu.matrix(e, x).parts, nullptr);
            for (int i = 0; i < 3; ++i) {
                const Matrix& m = cpu.matrix(w[i]);
                ASSERT_NE(m.packed, nullptr);
                if (n_threads == 1) {
                    EXPECT_EQ(m.parts, nullptr);
                    continue;
                }
                ASSERT_NE(m.parts, nullptr);
                ASSERT_EQ(m.parts->n(), n_threads);
                EXPECT_EQ(m.packed, m.parts->data[0]);
                const int64_t n_groups = (rows[i] + lanes - 1) / lanes;
                for (int t = 0; t <= n_threads; ++t)
                    EXPECT_EQ(m.parts->row0[t], n_groups * t / n_threads * lanes);
                for (int t = 0; t < n_threads; ++t) {
                    const uint64_t part = (m.parts->row0[t + 1] - m.parts->row0[t]) * rb;
                    // What follows part t of this matrix: part t of the next, or
                    // after the last matrix, part t + 1 of the first.
                    const uint8_t* next = i < 2               ? cpu.matrix(w[i + 1]).parts->data[t]
                                          : t + 1 < n_threads ? cpu.matrix(w[0]).parts->data[t + 1]
                                                              : nullptr;
                    if (next) {
                        EXPECT_EQ(m.parts->data[t] + (part + 63) / 64 * 64, next);
                    }
                }
            }

            // y = x @ W^T through the backend, for 1 token (each thread on its
            // parts) and a batch, against the spec.
            const int64_t max_tokens = 20;
            const int64_t max_rows = 72;
            Workspace ws;
            ws.acts_q_bytes = acts_row_bytes(kCols) * max_tokens;
            ws.acts_q = cpu.allocate(Term::Activations, ws.acts_q_bytes, "test acts");
            ws.scratch_per_thread_bytes = thread_scratch_bytes(kCols, 64, 8, 32);
            ws.thread_scratch = cpu.allocate(
                Term::Activations, ws.scratch_per_thread_bytes * n_threads, "test scratch");
            cpu.set_workspace(ws);
            const DevPtr xb = cpu.allocate(Term::Activations, max_tokens * kCols * 4, "x");
            DevPtr yb[3];
            for (auto& y : yb) y = cpu.allocate(Term::Activations, max_tokens * max_rows * 4, "y");
            for (const int64_t n_tokens : {int64_t{1}, max_tokens}) {
                const auto x = test::random_acts(n_tokens, kCols, 5);
                cpu.upload(xb, x.data(), x.size() * 4);
                const Weight* ws3[3] = {&w[0], &w[1], &w[2]};
                cpu.matmul(ws3, xb, n_tokens, yb);
                for (int i = 0; i < 3; ++i) {
                    std::vector<float> spec(static_cast<size_t>(n_tokens * rows[i]));
                    const Matrix stored{bytes[i].data(), type, rows[i], kCols, rb};
                    ref::matmul_int(stored, x.data(), n_tokens, ActPrecision::Int8, spec.data());
                    std::vector<float> y(spec.size());
                    cpu.download(y.data(), yb[i], y.size() * 4);
                    for (size_t k = 0; k < y.size(); ++k)
                        ASSERT_EQ(std::memcmp(&y[k], &spec[k], 4), 0)
                            << n_tokens << " tokens, matrix " << i << ", element " << k;
                }
            }
        }
    }
}

}  // namespace
}  // namespace headroom::kernels
