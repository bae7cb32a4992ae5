// hlo2dace's C++ helpers: the product kernel of few rows (plan/products.py's "few_rows").
// (Included through h2d/ops.h; each topic header builds on the one before it.)
#pragma once

#include "conversion.h"

#include <cstring>

namespace h2d {

#if !defined(__CUDACC__)  // the CPU's kernel: nvcc knows no GCC pragma, a GPU has cuBLAS
// C (m x n, rows ldc apart) = alpha A (m x k; element (i, p) at a[i * a_row + p * a_col]) times
// B (k x n, rows ldb apart, each row contiguous), for m up to a few dozen rows: per strip
// of C's columns, blocks of rows accumulate in registers while B's strip is read once from
// where it lies. OpenBLAS packs B on every call first, which at these shapes costs more than
// the product: 8 x 1024 by 1024 x 1024 in f32 took it 0.50 ms on a Zen 4 core, this 0.17
// (XLA's YNNPACK 0.18). Each element of C sums its k products in order, by fused
// multiply-adds, whatever the strips' partition among threads: the same bits for every
// thread count. Register blocks by the vector width: AVX-512 8 rows of 2 vectors, AVX and
// SSE 4 of 2.
namespace few_rows {
#if defined(__AVX512F__)
constexpr int vector_bytes = 64, block_rows = 8;
#elif defined(__AVX__)
constexpr int vector_bytes = 32, block_rows = 4;
#else
constexpr int vector_bytes = 16, block_rows = 4;
#endif
constexpr int block_vectors = 2;
template <typename T> using vector __attribute__((vector_size(vector_bytes))) = T;

// B's rows are a page apart or more in the programs this serves (a 1024-wide f32 matrix):
// the hardware prefetchers do not cross pages, so a strip from memory waited on every row
// (1.07 ms against OpenBLAS's 0.67); prefetched 16 rows ahead, 0.60.
constexpr int64_t prefetch_rows = 16;
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")  // the multiply-adds fused, as BLAS's and XLA's
// rows x (vectors lanes) elements of C: a register block
template <typename T, int Rows, int Vectors>
inline void block(int64_t k, const T* __restrict a, int64_t a_row, int64_t a_col,
                  const T* __restrict b, int64_t ldb, T* __restrict c, int64_t ldc, T alpha) {
    using V = vector<T>;
    constexpr int lanes = vector_bytes / sizeof(T);
    V sums[Rows][Vectors];
    for (int i = 0; i < Rows; i++)
        for (int v = 0; v < Vectors; v++) sums[i][v] = V{};
    for (int64_t p = 0; p < k; p++) {
        for (int v = 0; v < Vectors; v++)
            __builtin_prefetch(b + (p + prefetch_rows) * ldb + v * lanes);
        V row[Vectors];
        for (int v = 0; v < Vectors; v++)
            std::memcpy(&row[v], b + p * ldb + v * lanes, sizeof(V));
        for (int i = 0; i < Rows; i++) {
            const T x = a[i * a_row + p * a_col];
            for (int v = 0; v < Vectors; v++) sums[i][v] += x * row[v];
        }
    }
    for (int i = 0; i < Rows; i++)
        for (int v = 0; v < Vectors; v++) {
            const V scaled = sums[i][v] * alpha;  // alpha times the sum, as BLAS scales
            std::memcpy(c + i * ldc + v * lanes, &scaled, sizeof(V));
        }
}
// all rows of a strip of C's columns, Vectors vectors wide
template <typename T, int Vectors>
inline void strip(int64_t m, int64_t k, const T* a, int64_t a_row, int64_t a_col, const T* b,
                  int64_t ldb, T* c, int64_t ldc, T alpha) {
    int64_t i = 0;
    for (; i + block_rows <= m; i += block_rows)
        block<T, block_rows, Vectors>(k, a + i * a_row, a_row, a_col, b, ldb, c + i * ldc, ldc,
                                      alpha);
    for (; i + 4 <= m; i += 4)
        block<T, 4, Vectors>(k, a + i * a_row, a_row, a_col, b, ldb, c + i * ldc, ldc, alpha);
    for (; i < m; i++)
        block<T, 1, Vectors>(k, a + i * a_row, a_row, a_col, b, ldb, c + i * ldc, ldc, alpha);
}
// the last columns, fewer than a vector's lanes: row by row, B's rows in order
template <typename T>
inline void narrow(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_row, int64_t a_col,
                   const T* b, int64_t ldb, T* c, int64_t ldc, T alpha) {
    for (int64_t i = 0; i < m; i++) {
        T* __restrict out = c + i * ldc;
        for (int64_t j = 0; j < n; j++) out[j] = T(0);
        for (int64_t p = 0; p < k; p++) {
            const T x = a[i * a_row + p * a_col];
            for (int64_t j = 0; j < n; j++) out[j] += x * b[p * ldb + j];
        }
        for (int64_t j = 0; j < n; j++) out[j] *= alpha;
    }
}
#pragma GCC pop_options
}  // namespace few_rows

// The product of few rows over `parts` threads (strips of columns shared out).
template <typename T>
inline void few_rows_product(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_row,
                             int64_t a_col, const T* b, int64_t ldb, T* c, int64_t ldc,
                             T alpha, int parts) {
    using namespace few_rows;
    constexpr int64_t lanes = vector_bytes / sizeof(T), wide = lanes * block_vectors;
    const int64_t strips = n / wide, vectors = (n - strips * wide) / lanes;
    #pragma omp parallel for schedule(static) if (parts > 1) num_threads(parts)
    for (int64_t s = 0; s < strips; s++)
        strip<T, block_vectors>(m, k, a, a_row, a_col, b + s * wide, ldb, c + s * wide, ldc,
                                alpha);
    for (int64_t v = 0; v < vectors; v++) {
        const int64_t j = strips * wide + v * lanes;
        strip<T, 1>(m, k, a, a_row, a_col, b + j, ldb, c + j, ldc, alpha);
    }
    const int64_t done = strips * wide + vectors * lanes;
    if (done < n)
        narrow<T>(m, n - done, k, a, a_row, a_col, b + done, ldb, c + done, ldc, alpha);
}
#endif

}  // namespace h2d
