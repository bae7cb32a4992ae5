// Runs h2d/ops.h's transcendental functions over an array read from stdin and writes the
// results to stdout: in a loop the compiler vectorises with libmvec (the path of long
// arrays), or in one it may not vectorise (the path of short arrays and loop remainders).
// Built by tests/test_vector_isa.py once per -march level.
//   harness FUNCTION f|d vector|scalar N < N inputs (two arrays for binary functions)
#include "h2d/ops.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

// The functions as the elementwise templates call them (hlo2dace/translate/elementwise.py).
#define H2D_UNARY(X) X(exp_) X(expm1_) X(log_) X(log1p_) X(sin_) X(cos_) X(tan_) X(tanh_) \
    X(cbrt_) X(rsqrt)
#define H2D_BINARY(X) X(pow_) X(atan2_)

#define DEFINE_UNARY(f)                                                                  \
    template <typename T> __attribute__((noinline)) void vector_##f(                    \
            const T* __restrict a, const T*, T* __restrict out, long n) {               \
        for (long i = 0; i < n; ++i) out[i] = h2d::f(a[i]);                             \
    }                                                                                    \
    template <typename T> __attribute__((noinline, optimize("no-tree-vectorize")))      \
    void scalar_##f(const T* __restrict a, const T*, T* __restrict out, long n) {       \
        for (long i = 0; i < n; ++i) out[i] = h2d::f(a[i]);                             \
    }
#define DEFINE_BINARY(f)                                                                 \
    template <typename T> __attribute__((noinline)) void vector_##f(                    \
            const T* __restrict a, const T* __restrict b, T* __restrict out, long n) {  \
        for (long i = 0; i < n; ++i) out[i] = h2d::f(a[i], b[i]);                       \
    }                                                                                    \
    template <typename T> __attribute__((noinline, optimize("no-tree-vectorize")))      \
    void scalar_##f(const T* __restrict a, const T* __restrict b, T* __restrict out,    \
                    long n) {                                                            \
        for (long i = 0; i < n; ++i) out[i] = h2d::f(a[i], b[i]);                       \
    }
H2D_UNARY(DEFINE_UNARY)
H2D_BINARY(DEFINE_BINARY)

template <typename T> int run(const char* name, bool vectorised, long n) {
    T* a = static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64));
    T* b = static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64));
    T* out = static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64));
    bool binary = false;
#define IS_BINARY(f) binary |= !std::strcmp(name, #f);
    H2D_BINARY(IS_BINARY)
    if (std::fread(a, sizeof(T), n, stdin) != size_t(n)) return 2;
    if (binary && std::fread(b, sizeof(T), n, stdin) != size_t(n)) return 2;
    h2d::init_program();
    h2d::enter_fp_mode();
    bool found = false;
#define CALL(f)                                                                          \
    if (!std::strcmp(name, #f)) {                                                        \
        found = true;                                                                    \
        if (vectorised) vector_##f<T>(a, b, out, n); else scalar_##f<T>(a, b, out, n);  \
    }
    H2D_UNARY(CALL)
    H2D_BINARY(CALL)
    h2d::leave_fp_mode();
    if (!found) return 3;
    std::fwrite(out, sizeof(T), n, stdout);
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 5) return 1;
    const bool vectorised = !std::strcmp(argv[3], "vector");
    const long n = std::atol(argv[4]);
    return argv[2][0] == 'f' ? run<float>(argv[1], vectorised, n)
                             : run<double>(argv[1], vectorised, n);
}
