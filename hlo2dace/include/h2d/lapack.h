// The LAPACK kernels behind jaxlib's CPU FFI targets (lapack_?xxxx_ffi), ported so that a
// custom call computes what XLA's does: the same LAPACK routine on the same column-major
// buffers, the same workspace sizes (which decide blocked or unblocked code paths), the same
// info values and the same handling of non-finite input. Appended to a program's global code
// (translate/lapack.py) only when it calls LAPACK; the program links Debian's OpenBLAS and
// LAPACKE through DaCe's OpenBLAS environment. Buffers are in the layouts the custom call
// declares (translate/custom_call.py converts); a kernel copies its input into its output
// first, as jaxlib's do, and then works in place.
#ifndef H2D_LAPACK_H
#define H2D_LAPACK_H

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <cblas.h>
#include <lapack.h>

namespace h2d::lapack {

using lint = lapack_int;
static_assert(sizeof(lint) == sizeof(int32_t), "pivots and info are int32: 32-bit LAPACK needed");
using c64 = std::complex<float>;
using c128 = std::complex<double>;

template <typename T> struct real_of { using type = T; };
template <typename R> struct real_of<std::complex<R>> { using type = R; };
template <typename T> using real_t = typename real_of<T>::type;
template <typename T> constexpr bool is_complex = !std::is_same_v<T, real_t<T>>;

// std::complex and LAPACK's complex types share their layout
inline float* L(float* p) { return p; }
inline double* L(double* p) { return p; }
inline lapack_complex_float* L(c64* p) { return reinterpret_cast<lapack_complex_float*>(p); }
inline lapack_complex_double* L(c128* p) { return reinterpret_cast<lapack_complex_double*>(p); }

// Scratch memory for one call; at least one element, so that no pointer is null.
template <typename T> std::vector<T> scratch(int64_t n) { return std::vector<T>(std::max<int64_t>(n, 1)); }

// A workspace query's answer (LAPACK returns it in the first element of work), or -1.
template <typename T> int64_t queried(T optimal, lint info) {
    return info == 0 ? static_cast<int64_t>(std::real(optimal)) : -1;
}

template <typename T> void copy_if_different(const T* in, T* out, int64_t n) {
    if (in != out && n > 0) std::copy_n(in, n, out);
}

// ------------------------------------------------------------- LAPACK by element type
#define H2D_TYPES(X) X(float, s, float) X(double, d, double) X(c64, c, float) X(c128, z, double)

#define H2D_SAME_SIGNATURE(T, p, R)                                                          \
    inline void getrf(lint* m, lint* n, T* a, lint* lda, lint* ipiv, lint* info) {          \
        LAPACK_##p##getrf(m, n, L(a), lda, ipiv, info);                                     \
    }                                                                                        \
    inline void geqrf(lint* m, lint* n, T* a, lint* lda, T* tau, T* work, lint* lwork,      \
                      lint* info) {                                                          \
        LAPACK_##p##geqrf(m, n, L(a), lda, L(tau), L(work), lwork, info);                   \
    }                                                                                        \
    inline void potrf(char uplo, lint* n, T* a, lint* lda, lint* info) {                    \
        LAPACK_##p##potrf(&uplo, n, L(a), lda, info);                                       \
    }                                                                                        \
    inline void gehrd(lint* n, lint* ilo, lint* ihi, T* a, lint* lda, T* tau, T* work,      \
                      lint* lwork, lint* info) {                                             \
        LAPACK_##p##gehrd(n, ilo, ihi, L(a), lda, L(tau), L(work), lwork, info);            \
    }                                                                                        \
    inline void gtsv(lint* n, lint* nrhs, T* dl, T* d, T* du, T* b, lint* ldb, lint* info) { \
        LAPACK_##p##gtsv(n, nrhs, L(dl), L(d), L(du), L(b), ldb, info);                     \
    }
H2D_TYPES(H2D_SAME_SIGNATURE)
#undef H2D_SAME_SIGNATURE

// Q from reflectors (orgqr / ungqr), multiplication by Q (ormqr / unmqr), reduction to
// tridiagonal form (sytrd / hetrd): one signature, a name per field
#define H2D_RENAMED(T, orgqr_, ormqr_, sytrd_)                                               \
    inline void orgqr(lint* m, lint* n, lint* k, T* a, lint* lda, T* tau, T* work,          \
                      lint* lwork, lint* info) {                                             \
        LAPACK_##orgqr_(m, n, k, L(a), lda, L(tau), L(work), lwork, info);                  \
    }                                                                                        \
    inline void ormqr(char side, char trans, lint* m, lint* n, lint* k, T* a, lint* lda,    \
                      T* tau, T* c, lint* ldc, T* work, lint* lwork, lint* info) {           \
        LAPACK_##ormqr_(&side, &trans, m, n, k, L(a), lda, L(tau), L(c), ldc, L(work),      \
                        lwork, info);                                                        \
    }                                                                                        \
    inline void sytrd(char uplo, lint* n, T* a, lint* lda, real_t<T>* d, real_t<T>* e,      \
                      T* tau, T* work, lint* lwork, lint* info) {                            \
        LAPACK_##sytrd_(&uplo, n, L(a), lda, d, e, L(tau), L(work), lwork, info);           \
    }
H2D_RENAMED(float, sorgqr, sormqr, ssytrd)
H2D_RENAMED(double, dorgqr, dormqr, dsytrd)
H2D_RENAMED(c64, cungqr, cunmqr, chetrd)
H2D_RENAMED(c128, zungqr, zunmqr, zhetrd)
#undef H2D_RENAMED

// Routines whose complex flavour takes a real workspace (or other arguments) of its own.
#define H2D_REAL(T, p)                                                                        \
    inline void evd(char jobz, char uplo, lint* n, T* a, lint* lda, T* w, T* work,           \
                    lint* lwork, T*, lint*, lint* iwork, lint* liwork, lint* info) {          \
        LAPACK_##p##syevd(&jobz, &uplo, n, a, lda, w, work, lwork, iwork, liwork, info);     \
    }                                                                                         \
    inline void gesdd(char jobz, lint* m, lint* n, T* a, lint* lda, T* s, T* u, lint* ldu,   \
                      T* vt, lint* ldvt, T* work, lint* lwork, T*, lint* iwork, lint* info) { \
        LAPACK_##p##gesdd(&jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, iwork,      \
                          info);                                                              \
    }                                                                                         \
    inline void gesvd(char job, lint* m, lint* n, T* a, lint* lda, T* s, T* u, lint* ldu,    \
                      T* vt, lint* ldvt, T* work, lint* lwork, T*, lint* info) {              \
        LAPACK_##p##gesvd(&job, &job, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, info); \
    }                                                                                         \
    inline void geqp3(lint* m, lint* n, T* a, lint* lda, lint* jpvt, T* tau, T* work,        \
                      lint* lwork, T*, lint* info) {                                          \
        LAPACK_##p##geqp3(m, n, a, lda, jpvt, tau, work, lwork, info);                       \
    }
#define H2D_COMPLEX(T, p, R)                                                                  \
    inline void evd(char jobz, char uplo, lint* n, T* a, lint* lda, R* w, T* work,           \
                    lint* lwork, R* rwork, lint* lrwork, lint* iwork, lint* liwork,           \
                    lint* info) {                                                             \
        LAPACK_##p##heevd(&jobz, &uplo, n, L(a), lda, w, L(work), lwork, rwork, lrwork,      \
                          iwork, liwork, info);                                               \
    }                                                                                         \
    inline void gesdd(char jobz, lint* m, lint* n, T* a, lint* lda, R* s, T* u, lint* ldu,   \
                      T* vt, lint* ldvt, T* work, lint* lwork, R* rwork, lint* iwork,         \
                      lint* info) {                                                           \
        LAPACK_##p##gesdd(&jobz, m, n, L(a), lda, s, L(u), ldu, L(vt), ldvt, L(work), lwork, \
                          rwork, iwork, info);                                                \
    }                                                                                         \
    inline void gesvd(char job, lint* m, lint* n, T* a, lint* lda, R* s, T* u, lint* ldu,    \
                      T* vt, lint* ldvt, T* work, lint* lwork, R* rwork, lint* info) {        \
        LAPACK_##p##gesvd(&job, &job, m, n, L(a), lda, s, L(u), ldu, L(vt), ldvt, L(work),   \
                          lwork, rwork, info);                                                \
    }                                                                                         \
    inline void geqp3(lint* m, lint* n, T* a, lint* lda, lint* jpvt, T* tau, T* work,        \
                      lint* lwork, R* rwork, lint* info) {                                    \
        LAPACK_##p##geqp3(m, n, L(a), lda, jpvt, L(tau), L(work), lwork, rwork, info);       \
    }
H2D_REAL(float, s)
H2D_REAL(double, d)
H2D_COMPLEX(c64, c, float)
H2D_COMPLEX(c128, z, double)
#undef H2D_REAL
#undef H2D_COMPLEX

inline void geev(char l, char r, lint* n, float* a, float* wr, float* wi, float* vl, float* vr,
                 float* work, lint* lwork, lint* info) {
    LAPACK_sgeev(&l, &r, n, a, n, wr, wi, vl, n, vr, n, work, lwork, info);
}
inline void geev(char l, char r, lint* n, double* a, double* wr, double* wi, double* vl,
                 double* vr, double* work, lint* lwork, lint* info) {
    LAPACK_dgeev(&l, &r, n, a, n, wr, wi, vl, n, vr, n, work, lwork, info);
}
inline void geev(char l, char r, lint* n, c64* a, c64* w, c64* vl, c64* vr, c64* work,
                 lint* lwork, float* rwork, lint* info) {
    LAPACK_cgeev(&l, &r, n, L(a), n, L(w), L(vl), n, L(vr), n, L(work), lwork, rwork, info);
}
inline void geev(char l, char r, lint* n, c128* a, c128* w, c128* vl, c128* vr, c128* work,
                 lint* lwork, double* rwork, lint* info) {
    LAPACK_zgeev(&l, &r, n, L(a), n, L(w), L(vl), n, L(vr), n, L(work), lwork, rwork, info);
}

inline void gees(char jobvs, lint* n, float* a, lint* sdim, float* wr, float* wi, float* vs,
                 float* work, lint* lwork, lint* info) {
    char sort = 'N';
    LAPACK_sgees(&jobvs, &sort, nullptr, n, a, n, sdim, wr, wi, vs, n, work, lwork, nullptr,
                 info);
}
inline void gees(char jobvs, lint* n, double* a, lint* sdim, double* wr, double* wi,
                 double* vs, double* work, lint* lwork, lint* info) {
    char sort = 'N';
    LAPACK_dgees(&jobvs, &sort, nullptr, n, a, n, sdim, wr, wi, vs, n, work, lwork, nullptr,
                 info);
}
inline void gees(char jobvs, lint* n, c64* a, lint* sdim, c64* w, c64* vs, c64* work,
                 lint* lwork, float* rwork, lint* info) {
    char sort = 'N';
    LAPACK_cgees(&jobvs, &sort, nullptr, n, L(a), n, sdim, L(w), L(vs), n, L(work), lwork,
                 rwork, nullptr, info);
}
inline void gees(char jobvs, lint* n, c128* a, lint* sdim, c128* w, c128* vs, c128* work,
                 lint* lwork, double* rwork, lint* info) {
    char sort = 'N';
    LAPACK_zgees(&jobvs, &sort, nullptr, n, L(a), n, sdim, L(w), L(vs), n, L(work), lwork,
                 rwork, nullptr, info);
}

// Column-major triangular solve with alpha = 1 (jaxlib calls BLAS ?trsm).
template <typename T>
void trsm1(char side, char uplo, char trans, char diag, lint m, lint n, const T* a, lint lda,
           T* b, lint ldb) {
    auto s = side == 'L' ? CblasLeft : CblasRight;
    auto u = uplo == 'L' ? CblasLower : CblasUpper;
    auto t = trans == 'N' ? CblasNoTrans : trans == 'T' ? CblasTrans : CblasConjTrans;
    auto d = diag == 'U' ? CblasUnit : CblasNonUnit;
    const T one = T(1);
    if constexpr (std::is_same_v<T, float>) {
        cblas_strsm(CblasColMajor, s, u, t, d, m, n, one, a, lda, b, ldb);
    } else if constexpr (std::is_same_v<T, double>) {
        cblas_dtrsm(CblasColMajor, s, u, t, d, m, n, one, a, lda, b, ldb);
    } else if constexpr (std::is_same_v<T, c64>) {
        cblas_ctrsm(CblasColMajor, s, u, t, d, m, n, &one, a, lda, b, ldb);
    } else {
        cblas_ztrsm(CblasColMajor, s, u, t, d, m, n, &one, a, lda, b, ldb);
    }
}

// ------------------------------------------------------------- the FFI targets' kernels
// Each takes the batch size and matrix dimensions of the logical shapes, the attributes,
// then the operands' buffers and the results' buffers in the custom call's order.

// lapack_?trsm_ffi: y_out = op(x) \ y (side L) or y / op(x) (side R)
template <typename T>
void trsm_ffi(int64_t batch, int64_t m, int64_t n, char side, char uplo, char trans, char diag,
          const T* x, const T* y, T* y_out) {
    copy_if_different(y, y_out, batch * m * n);
    if (m == 0 || n == 0) return;  // nothing to solve (BLAS would only complain of lda = 0)
    const int64_t k = side == 'L' ? m : n;
    for (int64_t i = 0; i < batch; ++i) {
        trsm1<T>(side, uplo, trans, diag, m, n, x + i * k * k, k, y_out + i * m * n, m);
    }
}

// lapack_?getrf_ffi: LU with partial pivoting; 1-based pivots
template <typename T>
void getrf_ffi(int64_t batch, int64_t m, int64_t n, const T* x, T* x_out, int32_t* ipiv,
           int32_t* info) {
    copy_if_different(x, x_out, batch * m * n);
    lint m_v = m, n_v = n, lda = m;
    for (int64_t i = 0; i < batch; ++i) {
        lint info_v = 0;
        getrf(&m_v, &n_v, x_out + i * m * n, &lda, ipiv + i * std::min(m, n), &info_v);
        info[i] = info_v;
    }
}

// lapack_?geqrf_ffi: Householder QR (R above the diagonal, reflectors below, taus)
template <typename T>
void geqrf_ffi(int64_t batch, int64_t m, int64_t n, const T* x, T* x_out, T* tau) {
    copy_if_different(x, x_out, batch * m * n);
    lint m_v = m, n_v = n, lda = m, query = -1, info = 0;
    T optimal{};
    geqrf(&m_v, &n_v, nullptr, &lda, nullptr, &optimal, &query, &info);
    lint lwork = queried(optimal, info);
    auto work = scratch<T>(lwork);
    for (int64_t i = 0; i < batch; ++i) {
        geqrf(&m_v, &n_v, x_out + i * m * n, &lda, tau + i * std::min(m, n), work.data(),
              &lwork, &info);
    }
}

// lapack_?geqp3_ffi: QR with column pivoting (jpvt in and out, 1-based)
template <typename T>
void geqp3_ffi(int64_t batch, int64_t m, int64_t n, const T* x, const int32_t* jpvt, T* x_out,
           int32_t* jpvt_out, T* tau) {
    copy_if_different(x, x_out, batch * m * n);
    copy_if_different(jpvt, jpvt_out, batch * n);
    lint m_v = m, n_v = n, lda = m, query = -1, info = 0;
    T optimal{};
    real_t<T> rwork_query[1];
    geqp3(&m_v, &n_v, nullptr, &lda, nullptr, nullptr, &optimal, &query, rwork_query, &info);
    lint lwork = queried(optimal, info);
    auto work = scratch<T>(lwork);
    auto rwork = scratch<real_t<T>>(2 * n);
    for (int64_t i = 0; i < batch; ++i) {
        geqp3(&m_v, &n_v, x_out + i * m * n, &lda, jpvt_out + i * n, tau + i * std::min(m, n),
              work.data(), &lwork, rwork.data(), &info);
    }
}

// lapack_?orgqr_ffi / ?ungqr: the first n columns of Q from k reflectors
template <typename T>
void orgqr_ffi(int64_t batch, int64_t m, int64_t n, int64_t k, const T* x, const T* tau,
           T* x_out) {
    copy_if_different(x, x_out, batch * m * n);
    lint m_v = m, n_v = n, k_v = k, lda = m, query = -1, info = 0;
    T optimal{};
    orgqr(&m_v, &n_v, &k_v, nullptr, &lda, nullptr, &optimal, &query, &info);
    lint lwork = queried(optimal, info);
    auto work = scratch<T>(lwork);
    for (int64_t i = 0; i < batch; ++i) {
        orgqr(&m_v, &n_v, &k_v, x_out + i * m * n, &lda, const_cast<T*>(tau) + i * k,
              work.data(), &lwork, &info);
    }
}

// lapack_?ormqr_ffi / ?unmqr: c_out = op(Q) c (left) or c op(Q) (right)
template <typename T>
void ormqr_ffi(int64_t batch, int64_t a_rows, int64_t a_cols, int64_t m, int64_t n, int64_t k,
           bool left, bool transpose, const T* a, const T* tau, const T* c, T* c_out) {
    copy_if_different(c, c_out, batch * m * n);
    char side = left ? 'L' : 'R';
    char trans = transpose ? (is_complex<T> ? 'C' : 'T') : 'N';
    lint m_v = m, n_v = n, k_v = k, lda = left ? a_rows : n, ldc = m, query = -1, info = 0;
    T optimal{};
    ormqr(side, trans, &m_v, &n_v, &k_v, nullptr, &lda, nullptr, nullptr, &ldc, &optimal,
          &query, &info);
    lint lwork = queried(optimal, info);
    auto work = scratch<T>(lwork);
    for (int64_t i = 0; i < batch; ++i) {
        ormqr(side, trans, &m_v, &n_v, &k_v, const_cast<T*>(a) + i * a_rows * a_cols, &lda,
              const_cast<T*>(tau) + i * k, c_out + i * m * n, &ldc, work.data(), &lwork, &info);
    }
}

// lapack_?potrf_ffi: Cholesky factor in the uplo triangle; the other is left as it was.
// A NaN pivot is a failure in reference LAPACK and in jaxlib's OpenBLAS, but not in older
// OpenBLAS builds (Debian 12's): their info is corrected to the first NaN pivot.
template <typename T> int64_t first_nan_pivot(const T* x, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        if (std::isnan(std::real(x[j * n + j]))) return j + 1;
    }
    return 0;
}

template <typename T>
void potrf_ffi(int64_t batch, int64_t n, char uplo, const T* x, T* x_out, int32_t* info) {
    copy_if_different(x, x_out, batch * n * n);
    lint n_v = n, lda = n;
    for (int64_t i = 0; i < batch; ++i) {
        lint info_v = 0;
        potrf(uplo, &n_v, x_out + i * n * n, &lda, &info_v);
        info[i] = info_v == 0 ? first_nan_pivot(x_out + i * n * n, n) : info_v;
    }
}

// lapack_?gesdd_ffi: SVD by divide and conquer; mode A (full U, Vt), S (thin), N (none)
template <typename T>
void gesdd_ffi(int64_t batch, int64_t m, int64_t n, int64_t u_rows, int64_t u_cols,
           int64_t vt_rows, int64_t vt_cols, char mode, const T* x, T* x_out, real_t<T>* s,
           T* u, T* vt, int32_t* info) {
    copy_if_different(x, x_out, batch * m * n);
    lint m_v = m, n_v = n, lda = m, ldu = m, ldvt = vt_rows, query = -1, info_v = 0;
    lint ldvt_query = mode == 'A' ? n : std::min(m, n);
    T optimal{};
    gesdd(mode, &m_v, &n_v, nullptr, &lda, nullptr, nullptr, &ldu, nullptr, &ldvt_query,
          &optimal, &query, nullptr, nullptr, &info_v);
    lint lwork = queried(optimal, info_v);
    const int64_t mn = std::min(m, n), mx = std::max(m, n);
    int64_t rwork_size = 0;
    if constexpr (is_complex<T>) {
        rwork_size = mode == 'N' ? 7 * mn
                                 : std::max(5 * mn * mn + 5 * mn, 2 * mx * mn + 2 * mn * mn + mn);
    }
    auto work = scratch<T>(lwork);
    auto rwork = scratch<real_t<T>>(rwork_size);
    auto iwork = scratch<lint>(8 * mn);
    for (int64_t i = 0; i < batch; ++i) {
        gesdd(mode, &m_v, &n_v, x_out + i * m * n, &lda, s + i * mn, u + i * u_rows * u_cols,
              &ldu, vt + i * vt_rows * vt_cols, &ldvt, work.data(), &lwork, rwork.data(),
              iwork.data(), &info_v);
        info[i] = info_v;
    }
}

// lapack_?gesvd_ffi: SVD by QR iteration (SvdAlgorithm.QR)
template <typename T>
void gesvd_ffi(int64_t batch, int64_t m, int64_t n, int64_t u_rows, int64_t u_cols,
           int64_t vt_rows, int64_t vt_cols, char mode, const T* x, T* x_out, real_t<T>* s,
           T* u, T* vt, int32_t* info) {
    copy_if_different(x, x_out, batch * m * n);
    lint m_v = m, n_v = n, lda = m, ldu = m, ldvt = vt_rows, query = -1, info_v = 0;
    lint ldvt_query = mode == 'A' ? n : std::min(m, n);
    T optimal{};
    gesvd(mode, &m_v, &n_v, nullptr, &lda, nullptr, nullptr, &ldu, nullptr, &ldvt_query,
          &optimal, &query, nullptr, &info_v);
    lint lwork = queried(optimal, info_v);
    const int64_t mn = std::min(m, n);
    auto work = scratch<T>(lwork);
    auto rwork = scratch<real_t<T>>(is_complex<T> ? 5 * mn : 0);
    for (int64_t i = 0; i < batch; ++i) {
        gesvd(mode, &m_v, &n_v, x_out + i * m * n, &lda, s + i * mn, u + i * u_rows * u_cols,
              &ldu, vt + i * vt_rows * vt_cols, &ldvt, work.data(), &lwork, rwork.data(),
              &info_v);
        info[i] = info_v;
    }
}

// lapack_?syevd_ffi / ?heevd: eigenvalues (ascending) and eigenvectors of a symmetric or
// Hermitian matrix; jaxlib passes the minimal workspaces, not the queried ones
template <typename T>
void syevd_ffi(int64_t batch, int64_t n, char mode, char uplo, const T* x, T* x_out,
           real_t<T>* w, int32_t* info) {
    copy_if_different(x, x_out, batch * n * n);
    const bool vectors = mode == 'V';
    int64_t work_size, rwork_size = 0;
    if constexpr (is_complex<T>) {
        work_size = vectors ? 2 * n + n * n : n + 1;
        rwork_size = vectors ? 1 + 5 * n + 2 * n * n : std::max<int64_t>(n, 1);
    } else {
        work_size = vectors ? 1 + 6 * n + 2 * n * n : 2 * n + 1;
    }
    const int64_t iwork_size = vectors ? 3 + 5 * n : 1;
    lint n_v = n, lda = n, lwork = work_size, lrwork = rwork_size, liwork = iwork_size;
    auto work = scratch<T>(work_size);
    auto rwork = scratch<real_t<T>>(rwork_size);
    auto iwork = scratch<lint>(iwork_size);
    for (int64_t i = 0; i < batch; ++i) {
        lint info_v = 0;
        evd(mode, uplo, &n_v, x_out + i * n * n, &lda, w + i * n, work.data(), &lwork,
            rwork.data(), &lrwork, iwork.data(), &liwork, &info_v);
        info[i] = info_v;
    }
}

// LAPACK's real eigenvectors pack a conjugate pair into two columns (re, im).
template <typename R>
void unpack_eigenvectors(int64_t n, const R* imag, const R* packed, std::complex<R>* out) {
    for (int64_t j = 0; j < n;) {
        if (imag[j] == R(0) || std::isnan(imag[j])) {
            for (int64_t i = 0; i < n; ++i) out[j * n + i] = {packed[j * n + i], R(0)};
            ++j;
        } else {
            for (int64_t i = 0; i < n; ++i) {
                const R re = packed[j * n + i], im = packed[(j + 1) * n + i];
                out[j * n + i] = {re, im};
                out[(j + 1) * n + i] = {re, -im};
            }
            j += 2;
        }
    }
}

template <typename T> bool all_finite(const T* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        if constexpr (is_complex<T>) {
            if (!std::isfinite(x[i].real()) || !std::isfinite(x[i].imag())) return false;
        } else if (!std::isfinite(x[i])) {
            return false;
        }
    }
    return true;
}

// lapack_sgeev_ffi / dgeev: eigenvalues as real and imaginary parts, complex eigenvectors;
// a matrix with a non-finite element is not factorised (info -4)
template <typename T>
void geev_real_ffi(int64_t batch, int64_t n, char left, char right, const T* x, T* wr, T* wi,
               std::complex<T>* vl, std::complex<T>* vr, int32_t* info) {
    lint n_v = n, query = -1, info_v = 0;
    T optimal{};
    geev(left, right, &n_v, nullptr, nullptr, nullptr, nullptr, nullptr, &optimal, &query,
         &info_v);
    lint lwork = queried(optimal, info_v);
    auto work = scratch<T>(lwork);
    auto a = scratch<T>(n * n), packed_l = scratch<T>(n * n), packed_r = scratch<T>(n * n);
    for (int64_t i = 0; i < batch; ++i) {
        std::copy_n(x + i * n * n, n * n, a.data());
        if (!all_finite(a.data(), n * n)) {
            info[i] = -4;
            continue;
        }
        geev(left, right, &n_v, a.data(), wr + i * n, wi + i * n, packed_l.data(),
             packed_r.data(), work.data(), &lwork, &info_v);
        info[i] = info_v;
        if (info_v == 0) {
            unpack_eigenvectors(n, wi + i * n, packed_l.data(), vl + i * n * n);
            unpack_eigenvectors(n, wi + i * n, packed_r.data(), vr + i * n * n);
        }
    }
}

// lapack_cgeev_ffi / zgeev
template <typename T>
void geev_complex_ffi(int64_t batch, int64_t n, char left, char right, const T* x, T* w, T* vl,
                  T* vr, int32_t* info) {
    lint n_v = n, query = -1, info_v = 0;
    T optimal{};
    real_t<T> rwork_query[1];
    geev(left, right, &n_v, nullptr, nullptr, nullptr, nullptr, &optimal, &query, rwork_query,
         &info_v);
    lint lwork = queried(optimal, info_v);
    auto work = scratch<T>(lwork);
    auto rwork = scratch<real_t<T>>(2 * n);
    auto a = scratch<T>(n * n);
    for (int64_t i = 0; i < batch; ++i) {
        std::copy_n(x + i * n * n, n * n, a.data());
        if (!all_finite(a.data(), n * n)) {
            info[i] = -4;
            continue;
        }
        geev(left, right, &n_v, a.data(), w + i * n, vl + i * n * n, vr + i * n * n,
             work.data(), &lwork, rwork.data(), &info_v);
        info[i] = info_v;
    }
}

// lapack_?gees_ffi (real): Schur form, Schur vectors, eigenvalues; no sorting
template <typename T>
void gees_real_ffi(int64_t batch, int64_t n, char mode, const T* x, T* x_out, T* vs, T* wr,
               T* wi, int32_t* selected, int32_t* info) {
    copy_if_different(x, x_out, batch * n * n);
    lint n_v = n, query = -1, info_v = 0, sdim = 0;
    T optimal{};
    gees(mode, &n_v, nullptr, nullptr, nullptr, nullptr, nullptr, &optimal, &query, &info_v);
    lint lwork = queried(optimal, info_v);
    auto work = scratch<T>(lwork);
    for (int64_t i = 0; i < batch; ++i) {
        gees(mode, &n_v, x_out + i * n * n, &sdim, wr + i * n, wi + i * n, vs + i * n * n,
             work.data(), &lwork, &info_v);
        selected[i] = sdim;
        info[i] = info_v;
    }
}

// lapack_?gees_ffi (complex)
template <typename T>
void gees_complex_ffi(int64_t batch, int64_t n, char mode, const T* x, T* x_out, T* vs, T* w,
                  int32_t* selected, int32_t* info) {
    copy_if_different(x, x_out, batch * n * n);
    lint n_v = n, query = -1, info_v = 0, sdim = 0;
    T optimal{};
    gees(mode, &n_v, nullptr, nullptr, nullptr, nullptr, &optimal, &query, nullptr, &info_v);
    lint lwork = queried(optimal, info_v);
    auto work = scratch<T>(lwork);
    auto rwork = scratch<real_t<T>>(n);
    for (int64_t i = 0; i < batch; ++i) {
        gees(mode, &n_v, x_out + i * n * n, &sdim, w + i * n, vs + i * n * n, work.data(),
             &lwork, rwork.data(), &info_v);
        selected[i] = sdim;
        info[i] = info_v;
    }
}

// lapack_?gehrd_ffi: Hessenberg reduction of rows and columns low..high (1-based)
template <typename T>
void gehrd_ffi(int64_t batch, int64_t m, int64_t n, int32_t low, int32_t high, const T* x,
           T* x_out, T* tau, int32_t* info) {
    copy_if_different(x, x_out, batch * m * n);
    lint n_v = n, lda = m, lo = low, hi = high, query = -1, info_v = 0;
    T optimal{};
    gehrd(&n_v, &lo, &hi, nullptr, &lda, nullptr, &optimal, &query, &info_v);
    lint lwork = queried(optimal, info_v);
    auto work = scratch<T>(lwork);
    for (int64_t i = 0; i < batch; ++i) {
        gehrd(&n_v, &lo, &hi, x_out + i * m * n, &lda, tau + i * (n - 1), work.data(), &lwork,
              &info_v);
        info[i] = info_v;
    }
}

// lapack_?sytrd_ffi / ?hetrd: reduction to real symmetric tridiagonal form
template <typename T>
void sytrd_ffi(int64_t batch, int64_t m, int64_t n, int64_t tau_size, char uplo, const T* x,
           T* x_out, real_t<T>* d, real_t<T>* e, T* tau, int32_t* info) {
    copy_if_different(x, x_out, batch * m * n);
    lint n_v = n, lda = m, query = -1, info_v = 0;
    T optimal{};
    sytrd('L', &n_v, nullptr, &lda, nullptr, nullptr, nullptr, &optimal, &query, &info_v);
    lint lwork = queried(optimal, info_v);
    auto work = scratch<T>(lwork);
    for (int64_t i = 0; i < batch; ++i) {
        sytrd(uplo, &n_v, x_out + i * m * n, &lda, d + i * n, e + i * (n - 1),
              tau + i * tau_size, work.data(), &lwork, &info_v);
        info[i] = info_v;
    }
}

// lapack_?gtsv_ffi: tridiagonal solve; dl[0] and du[n-1] are unused
template <typename T>
void gtsv_ffi(int64_t batch, int64_t m, int64_t nrhs, const T* dl, const T* d, const T* du,
          const T* b, T* dl_out, T* d_out, T* du_out, T* b_out, int32_t* info) {
    copy_if_different(dl, dl_out, batch * m);
    copy_if_different(d, d_out, batch * m);
    copy_if_different(du, du_out, batch * m);
    copy_if_different(b, b_out, batch * m * nrhs);
    lint m_v = m, nrhs_v = nrhs;
    for (int64_t i = 0; i < batch; ++i) {
        lint info_v = 0;
        gtsv(&m_v, &nrhs_v, dl_out + i * m + 1, d_out + i * m, du_out + i * m,
             b_out + i * m * nrhs, &m_v, &info_v);
        info[i] = info_v;
    }
}

// ------------------------------------------------------------- StableHLO ops
// stablehlo.cholesky as XLA's CPU expander computes it, on row-major matrices: the factor
// in the requested triangle, zeros in the other, all NaN where a pivot's square root is
// NaN (a negative or NaN pivot). A row-major matrix is its transpose in column-major order,
// so LAPACK factorises the opposite triangle in place. XLA divides each column by its
// pivot's square root, the diagonal element included: a zero pivot is no failure of its
// own, but gives 0 / 0 = NaN there and NaNs in every later pivot, so only a zero last
// pivot leaves a result (with a NaN in the corner).
template <typename T>
void cholesky(int64_t batch, int64_t n, bool lower, const T* a, T* out) {
    copy_if_different(a, out, batch * n * n);
    lint n_v = n, lda = std::max<int64_t>(n, 1);
    const real_t<T> q = std::numeric_limits<real_t<T>>::quiet_NaN();
    T nan = T(q), zero_by_zero = T(q);  // a complex 0 / 0 is NaN in both parts
    if constexpr (is_complex<T>) zero_by_zero = T(q, q);
    for (int64_t i = 0; i < batch; ++i) {
        T* x = out + i * n * n;
        lint info = 0;
        potrf(lower ? 'U' : 'L', &n_v, x, &lda, &info);
        const bool zero_last = info == n && std::real(x[n * n - 1]) == 0;
        const bool failed = (info > 0 && !zero_last) || first_nan_pivot(x, n) > 0;
        for (int64_t r = 0; r < n; ++r) {
            for (int64_t c = 0; c < n; ++c) {
                T& v = x[r * n + c];
                if (failed) {
                    v = nan;
                } else if (lower ? c > r : c < r) {
                    v = T(0);
                }
            }
        }
        if (zero_last && !failed) x[n * n - 1] = zero_by_zero;
    }
}

// stablehlo.triangular_solve on row-major matrices: the row-major b (m x k) is the
// column-major b^T, and op(a) x = b <=> x^T op(a)^T = b^T, where the row-major a is the
// column-major a^T: so LAPACK solves from the other side with the other triangle.
template <typename T>
void triangular_solve(int64_t batch, int64_t m, int64_t k, bool left_side, bool lower,
                      bool unit_diagonal, char trans, const T* a, const T* b, T* out) {
    copy_if_different(b, out, batch * m * k);
    if (m == 0 || k == 0) return;
    const int64_t n = left_side ? m : k;
    for (int64_t i = 0; i < batch; ++i) {
        trsm1<T>(left_side ? 'R' : 'L', lower ? 'U' : 'L', trans, unit_diagonal ? 'U' : 'N',
                 k, m, a + i * n * n, n, out + i * m * k, k);
    }
}

}  // namespace h2d::lapack

#endif  // H2D_LAPACK_H
