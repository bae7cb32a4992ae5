/* A stand-in for libmvec's SIMD functions that reads denormal inputs as zero and flushes
 * denormal results to zero before and after calling the real ones: the worst a variant of
 * some instruction set may do (AVX-512's cbrtf reads them as zero; AVX2's does not). Loaded
 * with LD_PRELOAD by tests/test_vector_isa.py, so that a machine without that variant still
 * shows whether the helpers (h2d/ops.h) give XLA's special values whatever the variant does. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

static double flush_d(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    if ((u & 0x7FF0000000000000ull) == 0) u &= 0x8000000000000000ull;
    memcpy(&x, &u, 8);
    return x;
}
static float flush_f(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0) u &= 0x80000000u;
    memcpy(&x, &u, 4);
    return x;
}

#define FLUSH(v, V, S, flush) \
    for (int k = 0; k < (int)(sizeof(V) / sizeof(S)); ++k) v[k] = flush(v[k]);

/* `_ZGV<isa>N<n>v_<name>` (one vector argument) and `..vv_..` (two) */
#define UNARY(isa, arch, V, S, flush, n, name)                                           \
    __attribute__((target(arch))) V _ZGV##isa##N##n##v_##name(V x) {                    \
        static V (*real)(V);                                                             \
        if (!real) real = (V(*)(V))dlsym(RTLD_NEXT, "_ZGV" #isa "N" #n "v_" #name);      \
        FLUSH(x, V, S, flush)                                                            \
        V r = real(x);                                                                   \
        FLUSH(r, V, S, flush)                                                            \
        return r;                                                                        \
    }
#define BINARY(isa, arch, V, S, flush, n, name)                                          \
    __attribute__((target(arch))) V _ZGV##isa##N##n##vv_##name(V x, V y) {              \
        static V (*real)(V, V);                                                          \
        if (!real) real = (V(*)(V, V))dlsym(RTLD_NEXT, "_ZGV" #isa "N" #n "vv_" #name);  \
        FLUSH(x, V, S, flush)                                                            \
        FLUSH(y, V, S, flush)                                                            \
        V r = real(x, y);                                                                \
        FLUSH(r, V, S, flush)                                                            \
        return r;                                                                        \
    }

typedef double d2 __attribute__((vector_size(16)));
typedef float f4 __attribute__((vector_size(16)));
typedef double d4 __attribute__((vector_size(32)));
typedef float f8 __attribute__((vector_size(32)));
typedef double d8 __attribute__((vector_size(64)));
typedef float f16 __attribute__((vector_size(64)));

#define ALL_ISAS(KIND, name)                                         \
    KIND(b, "sse4.2", d2, double, flush_d, 2, name)                  \
    KIND(b, "sse4.2", f4, float, flush_f, 4, name##f)                \
    KIND(d, "avx2", d4, double, flush_d, 4, name)                    \
    KIND(d, "avx2", f8, float, flush_f, 8, name##f)                  \
    KIND(e, "avx512f", d8, double, flush_d, 8, name)                 \
    KIND(e, "avx512f", f16, float, flush_f, 16, name##f)

ALL_ISAS(UNARY, exp)
ALL_ISAS(UNARY, expm1)
ALL_ISAS(UNARY, log)
ALL_ISAS(UNARY, log1p)
ALL_ISAS(UNARY, sin)
ALL_ISAS(UNARY, cos)
ALL_ISAS(UNARY, tan)
ALL_ISAS(UNARY, tanh)
ALL_ISAS(UNARY, cbrt)
ALL_ISAS(BINARY, pow)
ALL_ISAS(BINARY, atan2)
