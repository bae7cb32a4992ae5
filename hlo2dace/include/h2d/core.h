// hlo2dace's C++ helpers: the includes, libmvec's vector math, the floating-point mode XLA runs in (FTZ/DAZ), loops kept scalar, denormals.
#pragma once

// StableHLO elementwise semantics in C++, as XLA computes them on the CPU (where XLA and
// the StableHLO spec disagree, XLA wins: tests/test_elementwise.py compares with jax.jit).
// Prepended to every generated program (sdfg.append_global_code). Integer arithmetic
// goes through unsigned types so overflow wraps instead of being undefined behaviour;
// division, remainder and shifts give XLA's results for every input; complex functions
// follow XLA's own expansions (namespace cx).
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

// H2D_FN marks a helper that tasklets call: under nvcc it compiles for the host and the
// device (the CUDA target's kernels call the same helpers); elsewhere it is nothing, so the
// CPU target's code is what it was. Code under __CUDA_ARCH__ is the device's version.
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define H2D_FN __host__ __device__
#else
#define H2D_FN
#endif

// Vector math: glibc's libmvec holds SIMD versions of libm's functions (`_ZGVdN4v_log`:
// AVX2, four doubles), which glibc declares to GCC only under -ffast-math. These
// declarations give the same symbols other C++ names and the `simd` attribute, without
// fast-math, so that GCC vectorises the loops that call them (libm.so links libmvec as
// needed). Their accuracy is measured in docs/vector-math.md; NaN, infinities and signed
// zeros come out as libm's do. Elements in a loop's scalar remainder get libm's results.
#define H2D_VECTOR_MATH(name, double_parameters, float_parameters) \
    extern "C" double h2d_vm_##name double_parameters __asm__(#name) \
        __attribute__((simd("notinbranch"), const, nothrow)); \
    extern "C" float h2d_vm_##name##f float_parameters __asm__(#name "f") \
        __attribute__((simd("notinbranch"), const, nothrow));
#define H2D_VECTOR_MATH_1(name) H2D_VECTOR_MATH(name, (double), (float))
#define H2D_VECTOR_MATH_2(name) H2D_VECTOR_MATH(name, (double, double), (float, float))
H2D_VECTOR_MATH_1(expm1)
H2D_VECTOR_MATH_1(log)
H2D_VECTOR_MATH_1(log1p)
H2D_VECTOR_MATH_1(sin)
H2D_VECTOR_MATH_1(cos)
H2D_VECTOR_MATH_1(tan)
H2D_VECTOR_MATH_1(tanh)
H2D_VECTOR_MATH_1(cbrt)
H2D_VECTOR_MATH_2(pow)
H2D_VECTOR_MATH_2(atan2)
#undef H2D_VECTOR_MATH_2
#undef H2D_VECTOR_MATH_1
#undef H2D_VECTOR_MATH


namespace h2d {

// Whether this is the device's compilation of the code (nvcc compiles it twice): the
// helpers that reproduce XLA's CPU results bit for bit (glibc's f64 log, Eigen's tanh,
// XLA's exp) run on the host only; the device calls CUDA's math library, as XLA's GPU
// backend does.
#if defined(__CUDA_ARCH__)
inline constexpr bool on_device = true;
#else
inline constexpr bool on_device = false;
#endif

// ------------------------------------------------------------------ vector math
// h2d::vm::log(x) and so on: libm's functions for float and double that loops vectorise.
// On the device, CUDA's math library, as XLA's GPU backend calls it (libdevice).
namespace vm {
#if defined(__CUDA_ARCH__)
#define H2D_VM_1(name) \
    H2D_FN inline double name(double a) { return ::name(a); } \
    H2D_FN inline float name(float a) { return ::name##f(a); }
#define H2D_VM_2(name) \
    H2D_FN inline double name(double a, double b) { return ::name(a, b); } \
    H2D_FN inline float name(float a, float b) { return ::name##f(a, b); }
#else
#define H2D_VM_1(name) \
    H2D_FN inline double name(double a) { return h2d_vm_##name(a); } \
    H2D_FN inline float name(float a) { return h2d_vm_##name##f(a); }
#define H2D_VM_2(name) \
    H2D_FN inline double name(double a, double b) { return h2d_vm_##name(a, b); } \
    H2D_FN inline float name(float a, float b) { return h2d_vm_##name##f(a, b); }
#endif
H2D_VM_1(expm1) H2D_VM_1(log) H2D_VM_1(log1p) H2D_VM_1(sin) H2D_VM_1(cos) H2D_VM_1(tan)
H2D_VM_1(tanh) H2D_VM_1(cbrt) H2D_VM_2(pow) H2D_VM_2(atan2)
#if defined(__CUDA_ARCH__)
H2D_VM_1(exp)  // the host computes exp as XLA does (h2d::xla_exp), with no call
#endif
#undef H2D_VM_2
#undef H2D_VM_1
}  // namespace vm


// XLA runs CPU code with denormals flushed to zero (FTZ) and read as zero (DAZ); so do we,
// for the calling thread during a call and for the OpenMP workers from initialisation on.
constexpr unsigned kFlushDenormals = 0x8040;  // MXCSR FTZ | DAZ
inline thread_local unsigned saved_fp_mode = 0;
inline void enter_fp_mode() {
#if defined(__SSE__)
    saved_fp_mode = _mm_getcsr();
    _mm_setcsr(saved_fp_mode | kFlushDenormals);
#endif
}
inline void leave_fp_mode() {
#if defined(__SSE__)
    _mm_setcsr(saved_fp_mode);
#endif
}
inline void init_worker_fp_mode() {
#if defined(__SSE__) && defined(_OPENMP)
    unsigned caller = _mm_getcsr();
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() | kFlushDenormals);
    _mm_setcsr(caller);
#endif
}

// What glibc's scalar cbrtf, which XLA's CPU code calls, returns for a denormal input
// under DAZ: one value for all of them (-5.5951735e-16 with glibc 2.36, whatever the
// input's sign: it takes the exponent from the bits, then computes with the input read
// as zero). libmvec's variants disagree (AVX2's gives libm's value, AVX-512's gives +-0),
// so h2d::cbrt_ selects this value, asked of libm once when the program loads.
inline float cbrtf_of_denormal = 0.0f;

// Run once when a program's library is initialised.
inline void init_program() {
    init_worker_fp_mode();
    enter_fp_mode();
    volatile float denormal = 1e-40f;
    cbrtf_of_denormal = ::cbrtf(denormal);
    leave_fp_mode();
}

// Called in the loops that tasklets run inside a map (reductions, windows, naive products):
// GCC 12 -O3 -march=native vectorises the map's loop across such guarded loop nests into
// wrong code (indices of the wrong stride, depending on the arrays' alignment); an asm
// statement makes the loop nest unvectorisable, at no cost of its own. An unguarded
// inner loop over independent elements may leave it out (a reduction's rows, blocks and
// lanes, which should vectorise) when a loop around it calls it, so that the map's loop
// still cannot be vectorised across the nest.
#if defined(__CUDA_ARCH__)
H2D_FN inline void scalar_loop() {}
#else
H2D_FN inline void scalar_loop() { asm volatile(""); }
#endif

template <typename T> struct is_complex_t : std::false_type {};
template <typename T> struct is_complex_t<std::complex<T>> : std::true_type {};
template <typename T> constexpr bool is_complex = is_complex_t<T>::value;
template <typename T> constexpr bool is_int = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T> using uns = std::make_unsigned_t<T>;

template <typename To, typename From> H2D_FN inline To bit_cast(From x) {
    static_assert(sizeof(To) == sizeof(From), "bit_cast of different sizes");
    To y;
    std::memcpy(&y, &x, sizeof(To));
    return y;
}

// Denormals as XLA's arithmetic sees them under FTZ/DAZ. Bit operations, so that they work
// whatever the floating-point mode: `flush` turns a denormal into a zero of its sign.
template <typename T> struct bits_of {
    using type = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
};
template <typename T> H2D_FN inline bool is_denormal(T x) {
    if constexpr (std::is_floating_point_v<T>) {
        using I = typename bits_of<T>::type;
        constexpr int mantissa = std::numeric_limits<T>::digits - 1;
        constexpr I magnitude = ~(I(1) << (sizeof(T) * 8 - 1));
        I u = bit_cast<I>(x) & magnitude;
        return u != 0 && (u >> mantissa) == 0;
    } else return false;
}
template <typename T> H2D_FN inline T flush(T x) {
    if constexpr (std::is_floating_point_v<T>) {
        using I = typename bits_of<T>::type;
        return is_denormal(x) ? bit_cast<T>(bit_cast<I>(x) & (I(1) << (sizeof(T) * 8 - 1))) : x;
    } else if constexpr (is_complex<T>) {
        return T(flush(x.real()), flush(x.imag()));
    } else return x;
}

// `condition ? a : b` by bits: GCC sinks a call computed for `b` into a branch of a
// floating-point `?:`, which stops the loop from vectorising; not into this. Integers
// too: a `?:` with a loop-invariant operand, or one in a loop of selects, stays scalar.
template <typename T> H2D_FN inline T blend(bool condition, T a, T b) {
    if constexpr (std::is_same_v<T, bool>) {
        return (condition & a) | (!condition & b);
    } else if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        const U mask = U(U(0) - U(condition));
        return T((U(a) & mask) | (U(b) & U(~mask)));
    } else {
        using I = typename bits_of<T>::type;
        const I mask = I(0) - I(condition);
        return bit_cast<T>((bit_cast<I>(a) & mask) | (bit_cast<I>(b) & ~mask));
    }
}

// c0 x^n + c1 x^(n-1) + ... + cn in FMAs, unrolled as written (a loop over a table of
// coefficients stays a loop inside the element loop, which then does not vectorise)
template <typename R, typename... C> H2D_FN inline R horner(R x, R c0, C... c) {
    R r = c0;
    ((r = std::fma(x, r, R(c))), ...);
    return r;
}

}  // namespace h2d
