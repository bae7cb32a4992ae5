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
H2D_VECTOR_MATH_1(exp)
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

// ------------------------------------------------------------------ vector math
// h2d::vm::log(x) and so on: libm's functions for float and double that loops vectorise.
namespace vm {
#define H2D_VM_1(name) \
    inline double name(double a) { return h2d_vm_##name(a); } \
    inline float name(float a) { return h2d_vm_##name##f(a); }
#define H2D_VM_2(name) \
    inline double name(double a, double b) { return h2d_vm_##name(a, b); } \
    inline float name(float a, float b) { return h2d_vm_##name##f(a, b); }
H2D_VM_1(exp) H2D_VM_1(expm1) H2D_VM_1(log) H2D_VM_1(log1p) H2D_VM_1(sin) H2D_VM_1(cos)
H2D_VM_1(tan) H2D_VM_1(tanh) H2D_VM_1(cbrt) H2D_VM_2(pow) H2D_VM_2(atan2)
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
inline void scalar_loop() { asm volatile(""); }

template <typename T> struct is_complex_t : std::false_type {};
template <typename T> struct is_complex_t<std::complex<T>> : std::true_type {};
template <typename T> constexpr bool is_complex = is_complex_t<T>::value;
template <typename T> constexpr bool is_int = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T> using uns = std::make_unsigned_t<T>;

template <typename To, typename From> inline To bit_cast(From x) {
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
template <typename T> inline bool is_denormal(T x) {
    if constexpr (std::is_floating_point_v<T>) {
        using I = typename bits_of<T>::type;
        constexpr int mantissa = std::numeric_limits<T>::digits - 1;
        constexpr I magnitude = ~(I(1) << (sizeof(T) * 8 - 1));
        I u = bit_cast<I>(x) & magnitude;
        return u != 0 && (u >> mantissa) == 0;
    } else return false;
}
template <typename T> inline T flush(T x) {
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
template <typename T> inline T blend(bool condition, T a, T b) {
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
template <typename R, typename... C> inline R horner(R x, R c0, C... c) {
    R r = c0;
    ((r = std::fma(x, r, R(c))), ...);
    return r;
}

// ------------------------------------------------------------------ 16-bit floats
inline float f16_to_float(uint16_t bits) { return (float)bit_cast<_Float16>(bits); }
inline uint16_t float_to_f16(float x) { return bit_cast<uint16_t>((_Float16)x); }
inline float round_f16(float x) { return (float)(_Float16)x; }

inline float bf16_to_float(uint16_t bits) { return bit_cast<float>((uint32_t)bits << 16); }
inline uint16_t float_to_bf16(float x) {
    uint32_t u = bit_cast<uint32_t>(x);
    // NaN: keep sign and payload; quieten it unless it came from a bf16 (low half zero, as
    // after a bitcast to bf16), whose bits XLA keeps as they are
    if (std::isnan(x)) return (uint16_t)((u >> 16) | ((u & 0xFFFF) ? 0x40 : 0));
    u += 0x7FFF + ((u >> 16) & 1);  // round to nearest, ties to even
    return (uint16_t)(u >> 16);
}
inline float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// ------------------------------------------------------------------ 8-, 6- and 4-bit floats
// Stored in a byte (f6 and f4 in its low bits), computed in float. `E` exponent bits, `M`
// mantissa bits, exponent bias `B`; how the top of the range is encoded:
//   ieee:   infinities and NaNs as IEEE's formats (f8E5M2, f8E4M3, f8E3M4); overflow: inf;
//   fn:     no infinity, NaN is all ones (f8E4M3FN); overflow and infinities: NaN;
//   fnuz:   no infinity, no -0, NaN is the sign bit alone (f8E4M3FNUZ, f8E5M2FNUZ,
//           f8E4M3B11FNUZ); overflow and infinities: NaN;
//   finite: neither infinity nor NaN (f6E2M3FN, f6E3M2FN, f4E2M1FN); overflow saturates
//           and NaN becomes -0, as XLA converts to f4E2M1FN.
// Conversions from float round to nearest even, as XLA's (and ml_dtypes') do. The ieee
// types' quiet NaN is float's; their other NaN codes become quiet float NaNs that carry the
// code in the mantissa bits below the quiet bit, and convert back to it (so a bitcast keeps
// any NaN, as XLA's does); other float NaNs become the quiet NaN, as XLA converts them.
enum class Top { ieee, fn, fnuz, finite };
template <int E, int M, int B, Top K> struct small_float {
    static constexpr uint32_t sign_bit = 1u << (E + M);
    static constexpr uint32_t magnitude_mask = sign_bit - 1;
    static constexpr uint32_t top_exponent = (1u << E) - 1;
    static constexpr uint32_t quiet = 1u << (M - 1);  // ieee: the quiet NaN's mantissa
    static constexpr uint32_t max_finite = K == Top::ieee ? (top_exponent << M) - 1
                                         : K == Top::fn ? magnitude_mask - 1 : magnitude_mask;
    static float to_float(uint32_t bits) {
        bits &= (sign_bit << 1) - 1;
        const uint32_t magnitude = bits & magnitude_mask;
        const float nan = std::numeric_limits<float>::quiet_NaN();
        const float sign = (bits & sign_bit) ? -1.0f : 1.0f;
        // fnuz's NaN has the sign bit: XLA orders it first under TOTALORDER, as a -NaN
        if (K == Top::fnuz && bits == sign_bit) return -nan;
        if (K == Top::fn && magnitude == magnitude_mask) return std::copysign(nan, sign);
        if (K == Top::ieee && (magnitude >> M) == top_exponent) {
            const uint32_t payload = magnitude & ((1u << M) - 1);
            if (!payload) return sign * std::numeric_limits<float>::infinity();
            return bit_cast<float>(((bits & sign_bit) ? 0x80000000u : 0) | 0x7FC00000u |
                                   ((payload ^ quiet) << (22 - M)));
        }
        const uint32_t exponent = magnitude >> M, mantissa = magnitude & ((1u << M) - 1);
        if (exponent == 0) {  // subnormal: mantissa * 2^(1 - B - M), exact in float
            return sign * ((float)mantissa * bit_cast<float>((uint32_t)(128 - B - M) << 23));
        }
        return sign * bit_cast<float>(((exponent + 127 - B) << 23) | (mantissa << (23 - M)));
    }
    static uint32_t from_float(float x) {
        const uint32_t u = bit_cast<uint32_t>(x), magnitude = u & 0x7FFFFFFFu;
        const uint32_t sign = (u >> 31) ? sign_bit : 0;
        if (magnitude > 0x7F800000u) {  // NaN
            if (K == Top::ieee) {
                const uint32_t payload = ((magnitude >> (22 - M)) & ((1u << M) - 1)) ^ quiet;
                const bool code = (magnitude & 0x400000u) && payload &&
                                  (magnitude & ((1u << (22 - M)) - 1)) == 0;
                return sign | (top_exponent << M) | (code ? payload : quiet);
            }
            if (K == Top::fn) return sign | magnitude_mask;
            return sign_bit;  // fnuz: its NaN; finite: -0
        }
        const int exponent = (int)(magnitude >> 23) - 127;
        bool too_large = magnitude == 0x7F800000u;  // infinity
        uint32_t r = 0;
        if (!too_large && exponent >= 1 - B) {  // a normal number of the small type: rebias
            const uint32_t t = magnitude - ((uint32_t)(127 - B) << 23);
            constexpr int drop = 23 - M;
            r = (t + ((1u << (drop - 1)) - 1) + ((t >> drop) & 1)) >> drop;
            too_large = r > max_finite;
        } else if (!too_large) {  // a subnormal of the small type (or zero)
            const int shift = 23 - M + (1 - B - exponent);
            const uint32_t significand =
                (magnitude & 0x7FFFFFu) | (magnitude >= 0x800000u ? 0x800000u : 0);
            r = shift > 24 ? 0
                : (significand + ((1u << (shift - 1)) - 1) + ((significand >> shift) & 1)) >> shift;
        }
        if (too_large) {
            if (K == Top::ieee) return sign | (top_exponent << M);
            if (K == Top::fn) return sign | magnitude_mask;
            if (K == Top::fnuz) return sign_bit;
            return sign | max_finite;
        }
        if (K == Top::fnuz && r == 0) return 0;
        return sign | r;
    }
};
// A double narrowed to float rounding to odd (inexact results get their last bit set), so
// that rounding the float again to a type of fewer bits rounds as the double would: XLA
// converts f64 to the small floats directly.
inline float float_odd(double x) {
    float f = (float)x;
    if (!std::isfinite(f) || (double)f == x) return f;
    uint32_t u = bit_cast<uint32_t>(f);
    if (std::fabs((double)f) > std::fabs(x)) u -= 1;  // toward zero, then the sticky bit
    return bit_cast<float>(u | 1u);
}
// Rounding to f16 on the way to a small float, NaNs (small floats' codes) left as they are.
template <float (*Round)(float)> inline float unless_nan(float x) {
    return std::isnan(x) ? x : Round(x);
}
#define H2D_SMALL_FLOAT(name, E, M, B, K) \
    using name##_t = small_float<E, M, B, Top::K>; \
    inline float name##_to_float(uint8_t bits) { return name##_t::to_float(bits); } \
    inline uint8_t float_to_##name(float x) { return (uint8_t)name##_t::from_float(x); } \
    inline float round_##name(float x) { return name##_t::to_float(name##_t::from_float(x)); } \
    inline uint8_t double_to_##name(double x) { return (uint8_t)name##_t::from_float(float_odd(x)); } \
    inline double name##_to_double(uint8_t bits) { return name##_t::to_float(bits); }
H2D_SMALL_FLOAT(f8e4m3fn, 4, 3, 7, fn)
H2D_SMALL_FLOAT(f8e5m2, 5, 2, 15, ieee)
H2D_SMALL_FLOAT(f8e4m3fnuz, 4, 3, 8, fnuz)
H2D_SMALL_FLOAT(f8e5m2fnuz, 5, 2, 16, fnuz)
H2D_SMALL_FLOAT(f8e4m3b11fnuz, 4, 3, 11, fnuz)
H2D_SMALL_FLOAT(f8e3m4, 3, 4, 3, ieee)
H2D_SMALL_FLOAT(f8e4m3, 4, 3, 7, ieee)
H2D_SMALL_FLOAT(f6e2m3fn, 2, 3, 1, finite)
H2D_SMALL_FLOAT(f6e3m2fn, 3, 2, 3, finite)
H2D_SMALL_FLOAT(f4e2m1fn, 2, 1, 1, finite)
#undef H2D_SMALL_FLOAT
// f8E8M0FNU: an unsigned power of two 2^(e - 127), e = 0..254, and NaN (0xFF); zero,
// negative numbers, infinities and NaN convert to NaN. XLA rounds on the bits: up from a
// mantissa of one half (a float denormal: from above one half).
// 2^-127 is a float denormal, which arithmetic reads as zero (DAZ) as XLA's does: the asm
// keeps GCC from folding an op on it at compile time, where no DAZ applies.
inline float f8e8m0fnu_to_float(uint8_t bits) {
    if (bits == 0xFF) return std::numeric_limits<float>::quiet_NaN();
    float value = bit_cast<float>(bits ? (uint32_t)bits << 23 : 0x00400000u);
#if defined(__SSE__)
    asm("" : "+x"(value));
#endif
    return value;
}
inline uint8_t float_to_f8e8m0fnu(float x) {
    const uint32_t u = bit_cast<uint32_t>(x);
    if ((u >> 31) || u >= 0x7F800000u || u == 0) return 0xFF;
    const uint32_t exponent = u >> 23, mantissa = u & 0x7FFFFFu;
    if (exponent == 0) return mantissa > 0x400000u ? 1 : 0;
    const uint32_t rounded = exponent + (mantissa >= 0x400000u);
    return rounded >= 0xFF ? 0xFF : (uint8_t)rounded;
}
inline float round_f8e8m0fnu(float x) { return f8e8m0fnu_to_float(float_to_f8e8m0fnu(x)); }
// To a double exactly: 2^-127 stays itself (a float denormal would be flushed on the way).
inline double f8e8m0fnu_to_double(uint8_t bits) {
    return bits == 0 ? 0x1p-127 : (double)f8e8m0fnu_to_float(bits);
}
// From a double, XLA rounds on the double's bits; below 2^-126 it gives 2^-127 for 2^-127
// itself, 2^-126 above it, and NaN below it.
inline uint8_t double_to_f8e8m0fnu(double x) {
    if (!(x > 0) || !std::isfinite(x)) return 0xFF;
    if (x < 0x1p-126) return x < 0x1p-127 ? 0xFF : x == 0x1p-127 ? 0 : 1;
    const uint64_t u = bit_cast<uint64_t>(x);
    const uint64_t rounded = (u >> 52) - 1023 + 127 + ((u & ((1ull << 52) - 1)) >= (1ull << 51));
    return rounded >= 0xFF ? 0xFF : (uint8_t)rounded;
}

// 2- and 4-bit integers live in a byte: wrap a result back to `Bits` bits.
template <int Bits, typename T> inline T wrap(T x) {
    if constexpr (std::is_signed_v<T>) {
        return (T)((int8_t)((uint8_t)x << (8 - Bits)) >> (8 - Bits));
    } else {
        return (T)(x & ((1u << Bits) - 1));
    }
}

// Complex multiplication and division as XLA computes them: MLIR's complex-to-standard
// lowering (the textbook product; Smith's division with its special cases), in which LLVM
// contracts a product feeding an addition into an fma.
namespace cx {
// A complex number made of its parts, written as the two floats the standard lets a
// std::complex be read as: GCC 12 does not vectorise a loop that stores a complex number
// built of two fma results (mandelbrot's z * z + c), and does when the parts are written.
template <typename R> inline std::complex<R> of_parts(R re, R im) {
    std::complex<R> z;
    reinterpret_cast<R*>(&z)[0] = re;
    reinterpret_cast<R*>(&z)[1] = im;
    return z;
}
template <typename R> inline std::complex<R> mul(std::complex<R> x, std::complex<R> y) {
    R a = x.real(), b = x.imag(), c = y.real(), d = y.imag();
    return of_parts(std::fma(a, c, -(b * d)), std::fma(b, c, a * d));
}
template <typename R> inline std::complex<R> div(std::complex<R> x, std::complex<R> y) {
    const R inf = std::numeric_limits<R>::infinity(), zero = 0, one = 1;
    R lr = x.real(), li = x.imag(), rr = y.real(), ri = y.imag();
    R ratio1 = rr / ri;
    R denom1 = std::fma(ratio1, rr, ri);
    R re1 = std::fma(lr, ratio1, li) / denom1;
    R im1 = std::fma(li, ratio1, -lr) / denom1;
    R ratio2 = ri / rr;
    R denom2 = std::fma(ratio2, ri, rr);
    R re2 = std::fma(li, ratio2, lr) / denom2;
    R im2 = std::fma(-lr, ratio2, li) / denom2;
    R arr = std::fabs(rr), ari = std::fabs(ri), alr = std::fabs(lr), ali = std::fabs(li);
    bool smaller_real = arr < ari;
    R re = smaller_real ? re1 : re2, im = smaller_real ? im1 : im2;
    if (!(std::isnan(re) && std::isnan(im))) return {re, im};
    // 1. zero denominator, numerator not all NaN
    if ((!std::isnan(lr) || !std::isnan(li)) && arr == 0 && ari == 0) {
        R signed_inf = std::copysign(inf, rr);
        return {signed_inf * lr, signed_inf * li};
    }
    // 2. infinite numerator, finite denominator
    bool rhs_finite = (arr != inf && !std::isnan(arr)) && (ari != inf && !std::isnan(ari));
    if ((alr == inf || ali == inf) && rhs_finite) {
        R a = std::copysign(alr == inf ? one : zero, lr), b = std::copysign(ali == inf ? one : zero, li);
        return {inf * std::fma(a, rr, b * ri), inf * std::fma(b, rr, -(a * ri))};
    }
    // 3. finite numerator, infinite denominator
    bool lhs_finite = (alr != inf && !std::isnan(alr)) && (ali != inf && !std::isnan(ali));
    if (lhs_finite && (arr == inf || ari == inf)) {
        R c = std::copysign(arr == inf ? one : zero, rr), d = std::copysign(ari == inf ? one : zero, ri);
        return {zero * std::fma(lr, c, li * d), zero * std::fma(li, c, -(lr * d))};
    }
    return {re, im};
}
template <typename R> inline R abs(std::complex<R> z);
template <typename R> inline std::complex<R> sign(std::complex<R> z);
template <typename R> inline std::complex<R> pow(std::complex<R> x, std::complex<R> y);
}  // namespace cx

// ------------------------------------------------------------------ complex products
// One element of a complex matrix product as XLA computes it: its dot thunk calls Eigen,
// which jaxlib builds for AVX (no FMA; a packet holds 4 complex<float> or 2
// complex<double>). Eigen's kernels keep the four real sums a_re b_re, a_im b_im,
// a_im b_re, a_re b_im apart and combine them at the end (re = rr - ii, im = ir + ri),
// in an order that depends on where the element falls in Eigen's blocking (h2d::cdot_order
// picks it): `packet`, each sum in k order; `pairs`, its even and odd terms apart up to a
// multiple of 8, then added, then the rest in order; `quads`, four interleaved partial
// sums up to a multiple of 4, added as (0 + 1) + (2 + 3), then the rest; `scalar`, the
// complex product (rounded) added term by term. The result is then Eigen's alpha (1) times
// it, added to the zeroed output. `reduce`: a product of one row and one column, which
// XLA rewrites into a multiply and a reduce (its dot strength reduction): up to 32 terms
// fused, LLVM contracting the imaginary part's products into the sum; longer, XLA's
// complex products summed by tree_sum.
enum class CdotOrder { packet, pairs, quads, scalar, reduce };
// XLA's tree reduction: a sum of more than 32 terms is padded to a multiple of 32 (the
// padding split around the terms) and summed in windows of 32, each in order from zero,
// and the windows' sums summed the same way.
constexpr int64_t kReduceWindow = 32;
template <typename R> inline std::complex<R> tree_sum(const std::vector<std::complex<R>>& terms) {
    const int64_t n = (int64_t)terms.size();
    if (n <= kReduceWindow) {
        R re = 0, im = 0;
        for (const auto& t : terms) re = re + t.real(), im = im + t.imag();
        return {re, im};
    }
    const int64_t windows = (n + kReduceWindow - 1) / kReduceWindow;
    const int64_t low = (windows * kReduceWindow - n) / 2;
    std::vector<std::complex<R>> sums(windows);
    for (int64_t w = 0; w < windows; ++w) {
        R re = 0, im = 0;
        for (int64_t p = w * kReduceWindow - low; p < (w + 1) * kReduceWindow - low; ++p) {
            if (p >= 0 && p < n) re = re + terms[p].real(), im = im + terms[p].imag();
        }
        sums[w] = {re, im};
    }
    return tree_sum(sums);
}
template <typename R> inline R opaque(R x) {
#if defined(__SSE__)
    asm("" : "+x"(x));
#endif
    return x;
}
template <typename R, typename Lhs, typename Rhs>
inline std::complex<R> eigen_cdot(const Lhs& lhs, const Rhs& rhs, int64_t k, CdotOrder order) {
    R re, im;
    if (order == CdotOrder::reduce) {
        if (k > kReduceWindow) {
            std::vector<std::complex<R>> products(k);
            for (int64_t t = 0; t < k; ++t) products[t] = cx::mul<R>(lhs(t), rhs(t));
            return tree_sum(products);
        }
        re = 0, im = 0;
        for (int64_t t = 0; t < k; ++t) {
            const std::complex<R> x = lhs(t), y = rhs(t);
            re = re + std::fma(x.real(), y.real(), -(x.imag() * y.imag()));
            im = std::fma(x.imag(), y.real(), std::fma(x.real(), y.imag(), im));
        }
        return {re, im};
    }
    if (order == CdotOrder::scalar) {
        re = 0, im = 0;
        for (int64_t t = 0; t < k; ++t) {
            const std::complex<R> x = lhs(t), y = rhs(t);
            // opaque: GCC's vectoriser turns a complex product into fmaddsub, even under
            // -ffp-contract=off
            const R rr = opaque(x.real() * y.real()), ii = opaque(x.imag() * y.imag());
            const R ri = opaque(x.real() * y.imag()), ir = opaque(x.imag() * y.real());
            re = re + (rr - ii);
            im = im + (ri + ir);
        }
    } else {
        const int lanes = order == CdotOrder::quads ? 4 : order == CdotOrder::pairs ? 2 : 1;
        const int64_t split = order == CdotOrder::quads ? k / 4 * 4
                              : order == CdotOrder::pairs ? k / 8 * 8 : 0;
        R rr[4] = {}, ii[4] = {}, ir[4] = {}, ri[4] = {};
        for (int64_t t = 0; t < split; ++t) {
            const std::complex<R> x = lhs(t), y = rhs(t);
            const int l = (int)(t % lanes);
            rr[l] = rr[l] + x.real() * y.real();
            ii[l] = ii[l] + x.imag() * y.imag();
            ir[l] = ir[l] + x.imag() * y.real();
            ri[l] = ri[l] + x.real() * y.imag();
        }
        if (lanes == 4) {
            for (R* s : {rr, ii, ir, ri}) s[0] = (s[0] + s[1]) + (s[2] + s[3]);
        } else if (lanes == 2) {
            for (R* s : {rr, ii, ir, ri}) s[0] = s[0] + s[1];
        }
        for (int64_t t = split; t < k; ++t) {
            const std::complex<R> x = lhs(t), y = rhs(t);
            rr[0] = rr[0] + x.real() * y.real();
            ii[0] = ii[0] + x.imag() * y.imag();
            ir[0] = ir[0] + x.imag() * y.real();
            ri[0] = ri[0] + x.real() * y.imag();
        }
        re = rr[0] + -ii[0], im = ir[0] + ri[0];
    }
    return {R(0) + (re * R(1) - im * R(0)), R(0) + (re * R(0) + im * R(1))};
}
// The order of element (i, j) of an m x n product (see eigen_cdot). XLA computes the
// row-major C = A B as C^T = B^T A^T, so Eigen's rows are C's columns: blocks of two
// packets of them run in order, then one packet and a half packet with even and odd
// terms apart, and a last single column with the swapped kernel (four partial sums) in
// C's rows of whole groups of 4 (Eigen's panels of its columns), else the scalar
// kernel; a product with one row is Eigen's matrix-vector kernel (scalar order), one
// with one row and one column XLA's multiply and reduce.
template <typename R> inline CdotOrder cdot_order(int64_t i, int64_t j, int64_t m, int64_t n) {
    constexpr int64_t packet = std::is_same_v<R, float> ? 4 : 2, half = packet / 2;
    if (m == 1) return n == 1 ? CdotOrder::reduce : CdotOrder::scalar;
    const bool panel = i < m / 4 * 4;
    int64_t done = n / (2 * packet) * (2 * packet);
    if (j < done) return CdotOrder::packet;
    for (int64_t width : {packet, half}) {
        if (n - done >= width) {
            if (j < done + width) return panel ? CdotOrder::pairs : CdotOrder::packet;
            done += width;
        }
    }
    return panel ? CdotOrder::quads : CdotOrder::scalar;
}

// ------------------------------------------------------------------ arithmetic
template <typename T> inline T add(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) return a || b;
    else if constexpr (is_int<T>) return (T)((uns<T>)a + (uns<T>)b);
    else return a + b;
}
template <typename T> inline T sub(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) return a != b;
    else if constexpr (is_int<T>) return (T)((uns<T>)a - (uns<T>)b);
    else return a - b;
}
template <typename T> inline T mul(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) return a && b;
    else if constexpr (is_int<T>) {
        // promote so that e.g. uint16 * uint16 does not overflow a signed int
        using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, uns<T>>;
        return (T)((W)(uns<T>)a * (W)(uns<T>)b);
    } else if constexpr (is_complex<T>) return cx::mul(a, b);
    else return a * b;
}
// x * y + z as XLA's CPU code computes an add or subtract of a product that has no other
// use (fusion.py: ``contraction``): LLVM contracts them into one fused multiply-add, one
// rounding, where the machine has FMA; elsewhere the product is rounded first.
template <typename T> inline T mul_add(T x, T y, T z) {
#if defined(__FMA__)
    return std::fma(x, y, z);
#else
    return x * y + z;
#endif
}
// f16 where the CPU computes in half precision (AVX512-FP16, `__AVX512FP16__` under
// -march=native): LLVM keeps XLA's f16 ops in f16 there, so a contracted f16 product rounds
// once with its add, and f64 converts to f16 in one rounding. Elsewhere LLVM computes each
// f16 op in float and rounds it to f16, and converts f64 through float. Operands are f16
// values held in floats; the results are rounded to f16 by the caller (`fit`), which
// leaves an f16 value as it is.
inline float mul_add_f16(float x, float y, float z) {
#if defined(__AVX512FP16__)
    // exact product, one rounding to double, one to f16: the double's rounding only loses
    // bits of a product below half an f16 unit of z, where z is the f16 result either way
    return (float)(_Float16)std::fma((double)x, (double)y, (double)z);
#else
    return round_f16(x * y) + z;
#endif
}
inline float f64_to_f16(double x) {
#if defined(__AVX512FP16__)
    return (float)(_Float16)x;
#else
    return (float)x;
#endif
}
template <typename T> inline T neg(T a) {
    if constexpr (is_int<T>) return (T)(uns<T>(0) - (uns<T>)a);
    else return -a;
}
// x / 0 = -1 (all bits set); INT_MIN / -1 = INT_MIN (XLA's semantics).
template <typename T> inline T div(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) return b ? a : true;
    else if constexpr (is_int<T>) {
        if (b == 0) return (T)-1;
        if constexpr (std::is_signed_v<T>) {
            if (a == std::numeric_limits<T>::min() && b == (T)-1) return a;
        }
        return (T)(a / b);
    } else if constexpr (is_complex<T>) return cx::div(a, b);
    else return a / b;
}
// x % 0 = x; INT_MIN % -1 = 0; the sign follows the dividend (C's fmod for floats).
template <typename T> inline T rem(T a, T b) {
    if constexpr (std::is_same_v<T, bool>) return b ? false : a;
    else if constexpr (is_int<T>) {
        if (b == 0) return a;
        if constexpr (std::is_signed_v<T>) {
            if (b == (T)-1) return 0;
        }
        return (T)(a % b);
    } else return std::fmod(a, b);
}
template <typename T> inline auto abs_(T a) {
    if constexpr (is_int<T>) return a < 0 ? neg(a) : a;
    else if constexpr (is_complex<T>) return cx::abs(a);
    else return std::abs(a);
}
// NaN-propagating maximum/minimum, max(-0, +0) = +0 and min(-0, +0) = -0; like XLA's
// (vmaxss under DAZ) a denormal result is flushed to zero. Complex: XLA keeps the left
// operand when its real part is >= (<=) the right one's, else takes the right one, as is.
// Selects, not branches: loops over independent elements (maps, a reduction's rows and
// lanes) vectorise them, 4.7x faster than branches on random data; only a long chain of
// dependent calls (one accumulator) ran 2x faster with branches, and reductions fold long
// loops into lanes instead. Ties take the AND (max) or OR (min) of the bits, not a select
// on the sign: GCC 12 gave up on a loop of two maxima of minima with the nested select
// ("no vectype"; pyhpc's superbee limiter).
template <typename T> inline T max_(T a, T b) {
    if constexpr (is_complex<T>) {
        return a.real() >= b.real() ? a : b;
    } else if constexpr (std::is_floating_point_v<T>) {
        using I = typename bits_of<T>::type;
        T m = a > b ? a : b;
        m = a == b ? bit_cast<T>(bit_cast<I>(a) & bit_cast<I>(b)) : m;  // +0 if either is
        m = b != b ? b : m;
        m = a != a ? a : m;
        return flush(m);
    } else return a > b ? a : b;
}
template <typename T> inline T min_(T a, T b) {
    if constexpr (is_complex<T>) {
        return a.real() <= b.real() ? a : b;
    } else if constexpr (std::is_floating_point_v<T>) {
        using I = typename bits_of<T>::type;
        T m = a < b ? a : b;
        m = a == b ? bit_cast<T>(bit_cast<I>(a) | bit_cast<I>(b)) : m;  // -0 if either is
        m = b != b ? b : m;
        m = a != a ? a : m;
        return flush(m);
    } else return a < b ? a : b;
}
// XLA's order (it matters for complex numbers, where ties keep the left operand).
template <typename T> inline T clamp(T lo, T x, T hi) { return min_(max_(lo, x), hi); }

template <typename T> inline T sign(T a) {
    if constexpr (is_complex<T>) {
        return cx::sign(a);
    } else if constexpr (std::is_floating_point_v<T>) {
        // sign(denormal) = zero (DAZ); selected by bits, so that loops vectorise
        return blend((a != a) | (a == 0), flush(a), blend(a > 0, T(1), T(-1)));
    } else if constexpr (std::is_signed_v<T>) {
        return (T)((a > 0) - (a < 0));
    } else {
        return (T)(a != 0);
    }
}

// Integer power as XLA computes it: six rounds of squaring, so only the exponent's low six
// bits count (2^64 = 1); negative exponents give 0 except for bases 1 and -1, and XLA reads
// an unsigned exponent with its top bit set as negative too. Every case is computed and one
// selected (`blend`), so that loops vectorise.
template <typename T> inline T pow_(T a, T b) {
    if constexpr (is_int<T>) {
        using S = std::make_signed_t<T>;
        T result = 1, base = a;
        uns<T> e = (uns<T>)b;
        for (int i = 0; i < 6; ++i) {
            result = blend(bool(e & 1), mul(result, base), result);
            base = mul(base, base);
            e >>= 1;
        }
        const T of_minus_one = blend(bool(b & 1), T(-1), T(1));
        const T negative_power = blend(a == 1, T(1), blend(S(a) == -1, of_minus_one, T(0)));
        return blend(S(b) < 0, negative_power, result);
    } else if constexpr (std::is_same_v<T, bool>) {
        return a || !b;
    } else if constexpr (is_complex<T>) {
        return cx::pow(a, b);
    } else return vm::pow(a, b);
}

// ------------------------------------------------------------------ bits
// Shifts by the bit width or more: 0 (left, logical) or the sign (arithmetic).
template <typename T> inline T shl(T a, T b) {
    constexpr uns<T> W = sizeof(T) * 8;
    if ((uns<T>)b >= W) return 0;
    return (T)((uns<T>)a << (uns<T>)b);
}
template <typename T> inline T shr_logical(T a, T b) {
    constexpr uns<T> W = sizeof(T) * 8;
    if ((uns<T>)b >= W) return 0;
    return (T)((uns<T>)a >> (uns<T>)b);
}
template <typename T> inline T shr_arithmetic(T a, T b) {
    using S = std::make_signed_t<T>;
    constexpr uns<T> W = sizeof(T) * 8;
    if ((uns<T>)b >= W) return (T)((S)a < 0 ? (S)-1 : (S)0);
    return (T)((S)a >> (uns<T>)b);
}
// The same for narrow (2/4-bit) integers stored in a byte: the amount is read as an
// unsigned `Bits`-bit number (negative amounts are out of range), and the arithmetic shift
// extends bit `Bits - 1` for unsigned types too.
template <int Bits, typename T> inline T shl_n(T a, T b) {
    unsigned amount = (uint8_t)b & ((1u << Bits) - 1);
    if (amount >= (unsigned)Bits) return 0;
    return wrap<Bits>((T)((uint8_t)a << amount));
}
template <int Bits, typename T> inline T shr_logical_n(T a, T b) {
    unsigned amount = (uint8_t)b & ((1u << Bits) - 1);
    if (amount >= (unsigned)Bits) return 0;
    return wrap<Bits>((T)((uint8_t)((uint8_t)a & ((1u << Bits) - 1)) >> amount));
}
template <int Bits, typename T> inline T shr_arithmetic_n(T a, T b) {
    unsigned amount = (uint8_t)b & ((1u << Bits) - 1);
    int extended = (int8_t)((uint8_t)a << (8 - Bits)) >> (8 - Bits);
    if (amount >= (unsigned)Bits) return wrap<Bits>((T)(extended < 0 ? -1 : 0));
    return wrap<Bits>((T)(extended >> amount));
}
template <typename T> inline T popcnt(T a) {
    if constexpr (std::is_same_v<T, bool>) return a;
    else return (T)__builtin_popcountll((unsigned long long)(uns<T>)a);
}
template <typename T> inline T clz(T a, int bits = sizeof(T) * 8) {
    unsigned long long u = (unsigned long long)(uns<T>)a & ((bits >= 64) ? ~0ull : ((1ull << bits) - 1));
    if (u == 0) return (T)bits;
    return (T)(__builtin_clzll(u) - (64 - bits));
}
template <typename T> inline T not_(T a) {
    if constexpr (std::is_same_v<T, bool>) return !a;
    else return (T)~a;
}

// ------------------------------------------------------------------ rounding
// std::round and std::trunc do not vectorise (they must not raise inexact); nearbyint does:
// round half to even, then step away from zero where that rounded a half towards it
// (a - r is exact; infinities and NaN stay themselves, -0.3 gives -0.0)
template <typename T> inline T round_afz(T a) {
    const T r = std::nearbyint(a);
    const bool half_towards_zero =
        (std::fabs(a - r) == T(0.5)) & (std::fabs(r) < std::fabs(a));
    return blend(half_towards_zero, r + std::copysign(T(1), a), r);
}
template <typename T> inline T round_even(T a) { return std::nearbyint(a); }

// reduce_precision, XLA's bit-level algorithm (round to nearest even; below the reduced
// type's normal range: zero, above: infinity; NaN stays the input NaN), on the bits of a
// type with `SrcExponent` and `SrcMantissa` bits.
template <typename I, int SrcExponent, int SrcMantissa>
inline I reduce_precision_bits(I bits, int exponent_bits, int mantissa_bits) {
    constexpr int src_mantissa = SrcMantissa;
    constexpr int src_exponent = SrcExponent;
    constexpr int width = 1 + SrcExponent + SrcMantissa;
    const I magnitude = bits & ((I(1) << (width - 1)) - 1);
    const bool is_nan = magnitude > (((I(1) << src_exponent) - 1) << src_mantissa);
    const I input = bits;
    if (mantissa_bits < src_mantissa) {
        int drop = src_mantissa - mantissa_bits;
        I last_kept = ((I)1) << drop;
        I half_minus_one = (last_kept >> 1) - 1;
        I kept_lsb = (bits >> drop) & 1;
        bits += half_minus_one + kept_lsb;
        bits &= ~(last_kept - 1);
    }
    if (exponent_bits < src_exponent) {
        I sign = bits & (((I)1) << (width - 1));
        I exp_bias = (((I)1) << (src_exponent - 1)) - 1;
        I reduced_bias = (((I)1) << (exponent_bits - 1)) - 1;
        I max_exp = exp_bias + reduced_bias;
        I min_exp = exp_bias - reduced_bias;
        I exponent = (bits >> src_mantissa) & ((((I)1) << src_exponent) - 1);
        if (exponent > max_exp) {
            bits = sign | (((((I)1) << src_exponent) - 1) << src_mantissa);  // infinity
        } else if (exponent <= min_exp) {
            bits = sign;  // zero
        }
    }
    return is_nan ? input : bits;
}
template <typename T> inline T reduce_precision(T x, int exponent_bits, int mantissa_bits) {
    using I = typename bits_of<T>::type;
    constexpr int mantissa = std::numeric_limits<T>::digits - 1;
    return bit_cast<T>(reduce_precision_bits<I, sizeof(T) * 8 - 1 - mantissa, mantissa>(
        bit_cast<I>(x), exponent_bits, mantissa_bits));
}
// f16 values (held in a float): XLA reduces the f16 bits themselves, so f16 denormals
// flush to zero when the reduced type's exponent is not wider than f16's.
inline float reduce_precision_f16(float x, int exponent_bits, int mantissa_bits) {
    return f16_to_float(reduce_precision_bits<uint16_t, 5, 10>(
        float_to_f16(x), exponent_bits, mantissa_bits));
}

// ------------------------------------------------------------------ scans
// A scan (a reduce_window whose window spans its dimension: cumsum, cumprod...) as XLA
// computes it: one of up to 16 elements folds each output's window in index order (from
// the init value; `forward` false: the elements from the output's on); a longer one is
// rewritten by XLA's ReduceWindowRewriter into scans of blocks of 16 (the last padded
// with the init value), a scan of the blocks' totals (the same way, recursively), and
// the body applied to an element's block scan and the totals before its block. Each body
// application is XLA's, so each rounding is too.
constexpr int64_t kScanBlock = 16;
// The scratch `xla_scan` needs for n elements per lane (in elements per lane).
inline int64_t xla_scan_scratch(int64_t n) {
    if (n <= kScanBlock) return 0;
    const int64_t blocks = (n + kScanBlock - 1) / kScanBlock;
    return (blocks + 1) * kScanBlock + 2 * blocks + xla_scan_scratch(blocks);
}
// `lanes` independent scans at once (element k of lane l at x[k * lanes + l], out too),
// so that every step is a loop over the lanes, which vectorises; `scratch` holds
// xla_scan_scratch(n) * lanes elements. O(n) per lane: each level of blocks is a 16th of
// the one below.
template <typename T, typename Body>
void xla_scan(const T* __restrict x, int64_t n, int64_t lanes, T init, const Body& body,
              bool forward, T* __restrict out, T* __restrict scratch) {
    if (n <= kScanBlock) {
        for (int64_t i = 0; i < n; ++i) {
            T* __restrict acc = out + i * lanes;
            const T* __restrict element = x + i * lanes;
            if (forward && i == 0) {
                for (int64_t l = 0; l < lanes; ++l) acc[l] = body(init, element[l]);
            } else if (forward) {  // the fold up to i is the fold up to i - 1, one step on
                const T* __restrict before = acc - lanes;
                for (int64_t l = 0; l < lanes; ++l) acc[l] = body(before[l], element[l]);
            } else {  // from element i on, in index order: a fold of its own
                for (int64_t l = 0; l < lanes; ++l) acc[l] = init;
                for (int64_t k = i; k < n; ++k, element += lanes)
                    for (int64_t l = 0; l < lanes; ++l) acc[l] = body(acc[l], element[l]);
            }
        }
        return;
    }
    const int64_t blocks = (n + kScanBlock - 1) / kScanBlock;
    T* inner = scratch;
    T* padded = inner + blocks * kScanBlock * lanes;
    T* totals = padded + kScanBlock * lanes;
    T* across = totals + blocks * lanes;
    T* rest = across + blocks * lanes;
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t first = b * kScanBlock, count = std::min(kScanBlock, n - first);
        const T* block = x + first * lanes;
        if (count < kScanBlock) {  // the last block, padded with the init value
            std::copy(block, block + count * lanes, padded);
            std::fill(padded + count * lanes, padded + kScanBlock * lanes, init);
            block = padded;
        }
        T* scanned = inner + first * lanes;
        xla_scan(block, kScanBlock, lanes, init, body, forward, scanned, rest);
        std::copy(scanned + (forward ? kScanBlock - 1 : 0) * lanes,
                  scanned + (forward ? kScanBlock : 1) * lanes, totals + b * lanes);
    }
    xla_scan(totals, blocks, lanes, init, body, forward, across, rest);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t b = i / kScanBlock;
        const T* __restrict scanned = inner + i * lanes;
        T* __restrict result = out + i * lanes;
        if (forward ? b == 0 : b == blocks - 1) {
            for (int64_t l = 0; l < lanes; ++l) result[l] = body(scanned[l], init);
        } else {
            const T* __restrict before = across + (forward ? b - 1 : b + 1) * lanes;
            for (int64_t l = 0; l < lanes; ++l) result[l] = body(scanned[l], before[l]);
        }
    }
}

// ------------------------------------------------------------------ transcendental
// Real functions as XLA computes them: a denormal argument of expm1 and (f32) tanh comes
// back unchanged, log and log1p read it as zero (DAZ). XLA's own f32 approximations of exp, log,
// tanh, rsqrt... differ from the C library's by a few ULP (the tests allow for that).
template <typename R> inline R rsqrt_r(R a) { return R(1) / std::sqrt(a); }
// XLA's own f64 exponential and expm1, which its CPU backend inlines (exp: a rational
// approximation of e^g after reducing by n ln 2, scaled by 2^n in four factors; expm1:
// e^x - 1 above |x| = 0.5, else tanh(x / 2) (e^x + 1) with XLA's rational tanh); LLVM
// contracts their products and sums into FMAs, hence std::fma. Bit for bit XLA's results.
inline double xla_exp(double x) {
    constexpr double lo = -0x1.6232bdd7abcd2p+9, hi = 0x1.62e42fefa39efp+9;
    const double clamped = blend(x < lo, lo, blend(x > hi, hi, x));  // NaN stays NaN
    // n = floor(x log2(e) + 1/2), rounded to an integer by adding 1.5 2^52, which also
    // leaves it in the low bits (std::floor does not vectorise without -fno-trapping-math,
    // conversions between double and int64 not without AVX-512); |x| is clamped, so n fits;
    // NaN gives 0
    const double t = std::fma(clamped, 0x1.71547652b82fep+0, 0.5);
    const double t_number = blend(t != t, 0.0, t);
    constexpr double shifter = 0x1.8p52;
    const double nearest = (t_number + shifter) - shifter;
    const double n = nearest - blend(nearest > t_number, 1.0, 0.0);
    const int64_t k = bit_cast<int64_t>(n + shifter) - bit_cast<int64_t>(shifter);
    double g = std::fma(-n, 0x1.62e4000000000p-1, clamped);
    g = std::fma(-n, 0x1.7f7d1cf79abcap-20, g);
    const double gg = g * g;
    const double p = std::fma(std::fma(gg, 0x1.089cdd5e44be8p-13, 0x1.f06d10cca2c7ep-6), gg,
                              1.0) * g;
    const double q = std::fma(std::fma(std::fma(gg, 0x1.92eb6bc365fa0p-19,
                                                0x1.4ae39b508b6c0p-9),
                                       gg, 0x1.d17099887e074p-3), gg, 2.0);
    const double r = std::fma(p / (q - p), 2.0, 1.0);
    // 2^n as four factors 2^(n/4) 2^(n/4) 2^(n/4) 2^(n - 3 (n/4)) (XLA clamps n to
    // +-2099, which the clamped x never reaches)
    const int64_t quarter = k >> 2;
    const double scale = bit_cast<double>((uint64_t)((quarter << 52) + 0x3FF0000000000000ll));
    const double rest = bit_cast<double>(
        (uint64_t)(((k - 3 * quarter) << 52) + 0x3FF0000000000000ll));
    const double result = r * scale * scale * scale * rest;
    return blend(x > hi, std::numeric_limits<double>::infinity(), blend(x < lo, 0.0, result));
}
inline double xla_expm1(double x) {
    constexpr double bound = 0x1.1b6d58f246197p+4;
    const double e = xla_exp(x);
    const double half = x * 0.5;
    const double c = blend(half > bound, bound, blend(half < -bound, -bound, half));
    const double w = c * c;
    double num = std::fma(w, 0x1.f9f82e5d782dfp-76, 0x1.c3c836c04b4c8p-61);
    num = std::fma(w, num, 0x1.c3379f905e662p-49);
    num = std::fma(w, num, 0x1.29aff6c8edd96p-38);
    num = std::fma(w, num, 0x1.525a389dce7c2p-29);
    num = std::fma(w, num, 0x1.708819be51cd9p-21);
    num = std::fma(w, num, 0x1.8996f4026a7fap-14);
    num = std::fma(w, num, 0x1.87f80b957ed00p-8);
    num = std::fma(w, num, 0x1.36fba9b450e5ap-3);
    num = std::fma(w, num, 1.0);
    double den = std::fma(w, 0x1.e8630cf903250p-68, 0x1.0aabca9a5fea0p-54);
    den = std::fma(w, den, 0x1.232981aa2bba8p-43);
    den = std::fma(w, den, 0x1.ee2f015ea8065p-34);
    den = std::fma(w, den, 0x1.81f1947c52304p-25);
    den = std::fma(w, den, 0x1.26c82ab46d140p-17);
    den = std::fma(w, den, 0x1.b2e7c4d488c04p-11);
    den = std::fma(w, den, 0x1.1998830265b50p-5);
    den = std::fma(w, den, 0x1.f0d32a2f7dc79p-2);
    den = std::fma(w, den, 1.0);
    const double tanh_half = blend(std::fabs(half) >= 20.0, std::copysign(1.0, half),
                                   c * num / den);
    const double result = blend(std::fabs(x) > 0.5, e + -1.0, tanh_half * (e + 1.0));
    return blend(half == 0.0, x, result);
}
// Each function is computed unconditionally and then selected, so that loops vectorise.
template <typename R> inline R expm1_r(R a) {
    if constexpr (std::is_same_v<R, double>) return xla_expm1(a);
    const R r = vm::expm1(a);
    return is_denormal(a) ? a : r;
}
// XLA's f64 tanh (Eigen's ptanh_double, its polynomials in FMAs): a 19/18-degree
// rational function of x clamped to +-17.714..., and +-1 from |x| = 20 on; bit for bit
// XLA's results, inline, so that loops of any length vectorise it (libmvec's tanh left a
// scalar libm call in every short row's remainder: 3x XLA's time on rows of 10).
inline double xla_tanh(double a) {
    constexpr double c = 17.714196154005176;
    const double x = blend(a > c, c, blend(a < -c, -c, a));  // NaN stays NaN
    const double x2 = x * x;
    const double p = horner(x2, 2.6158007860482230e-23, 7.6534862268749319e-19,
                            3.1309488231386680e-15, 4.2303918148209176e-12,
                            2.4618379131293676e-09, 6.8644367682497074e-07,
                            9.3839087674268880e-05, 5.9809711724441161e-03,
                            1.5184719640284322e-01, 1.0);
    const double q = horner(x2, 6.463747022670968018e-21, 5.782506856739003571e-17,
                            1.293019623712687916e-13, 1.123643448069621992e-10,
                            4.492975677839633985e-08, 8.785185266237658698e-06,
                            8.295161192716231542e-04, 3.437448108450402717e-02,
                            4.851805297361760360e-01, 1.0);
    return blend(std::fabs(a) >= 20.0, std::copysign(1.0, a), x * p / q);
}
template <typename R> inline R tanh_r(R a) {  // f64: XLA reads a denormal as zero
    if constexpr (std::is_same_v<R, double>) return xla_tanh(flush(a));
    const R r = vm::tanh(a);
    return is_denormal(a) ? a : r;
}
// f64 log: glibc's (Arm's optimized-routines math/log.c, MIT licensed), which XLA calls,
// as GCC compiles it for glibc's FMA variant, so bit for bit XLA's results (checked on 16
// million arguments), written without branches so that GCC inlines and vectorises it, on
// AVX2 as on AVX-512: libmvec's log differed from glibc's in 17% of its results, and
// its SIMD variants from each other. Near 1, a polynomial in x - 1; elsewhere
// x = 2^k z, log(x) = k ln 2 + log(c) + log1p(z / c - 1) with c the centre of z's
// 1/128th of [0.6875, 1.375) (tables of 1 / c and log(c), indexed by 64-bit integers,
// which AVX2 gathers).
inline constexpr double kLogInvC[128] = {
    0x1.734f0c3e0de9fp+0, 0x1.713786a2ce91fp+0, 0x1.6f26008fab5a0p+0, 0x1.6d1a61f138c7dp+0,
    0x1.6b1490bc5b4d1p+0, 0x1.69147332f0cbap+0, 0x1.6719f18224223p+0, 0x1.6524f99a51ed9p+0,
    0x1.63356aa8f24c4p+0, 0x1.614b36b9ddc14p+0, 0x1.5f66452c65c4cp+0, 0x1.5d867b5912c4fp+0,
    0x1.5babccb5b90dep+0, 0x1.59d61f2d91a78p+0, 0x1.5805612465687p+0, 0x1.56397cee76bd3p+0,
    0x1.54725e2a77f93p+0, 0x1.52aff42064583p+0, 0x1.50f22dbb2bddfp+0, 0x1.4f38f4734ded7p+0,
    0x1.4d843cfde2840p+0, 0x1.4bd3ec078a3c8p+0, 0x1.4a27fc3e0258ap+0, 0x1.4880524d48434p+0,
    0x1.46dce1b192d0bp+0, 0x1.453d9d3391854p+0, 0x1.43a2744b4845ap+0, 0x1.420b54115f8fbp+0,
    0x1.40782da3ef4b1p+0, 0x1.3ee8f5d57fe8fp+0, 0x1.3d5d9a00b4ce9p+0, 0x1.3bd60c010c12bp+0,
    0x1.3a5242b75dab8p+0, 0x1.38d22cd9fd002p+0, 0x1.3755bc5847a1cp+0, 0x1.35dce49ad36e2p+0,
    0x1.34679984dd440p+0, 0x1.32f5cceffcb24p+0, 0x1.3187775a10d49p+0, 0x1.301c8373e3990p+0,
    0x1.2eb4ebb95f841p+0, 0x1.2d50a0219a9d1p+0, 0x1.2bef9a8b7fd2ap+0, 0x1.2a91c7a0c1babp+0,
    0x1.293726014b530p+0, 0x1.27dfa5757a1f5p+0, 0x1.268b39b1d3bbfp+0, 0x1.2539d838ff5bdp+0,
    0x1.23eb7aac9083bp+0, 0x1.22a012ba940b6p+0, 0x1.2157996cc4132p+0, 0x1.201201dd2fc9bp+0,
    0x1.1ecf4494d480bp+0, 0x1.1d8f5528f6569p+0, 0x1.1c52311577e7cp+0, 0x1.1b17c74cb26e9p+0,
    0x1.19e010c2c1ab6p+0, 0x1.18ab07bb670bdp+0, 0x1.1778a25efbcb6p+0, 0x1.1648d354c31dap+0,
    0x1.151b990275fddp+0, 0x1.13f0ea432d24cp+0, 0x1.12c8b7210f9dap+0, 0x1.11a3028ecb531p+0,
    0x1.107fbda8434afp+0, 0x1.0f5ee0f4e6bb3p+0, 0x1.0e4065d2a9fcep+0, 0x1.0d244632ca521p+0,
    0x1.0c0a77ce2981ap+0, 0x1.0af2f83c636d1p+0, 0x1.09ddb98a01339p+0, 0x1.08cabaf52e7dfp+0,
    0x1.07b9f2f4e28fbp+0, 0x1.06ab58c358f19p+0, 0x1.059eea5ecf92cp+0, 0x1.04949cdd12c90p+0,
    0x1.038c6c6f0ada9p+0, 0x1.02865137932a9p+0, 0x1.0182427ea7348p+0, 0x1.008040614b195p+0,
    0x1.fe01ff726fa1ap-1, 0x1.fa11cc261ea74p-1, 0x1.f6310b081992ep-1, 0x1.f25f63ceeadcdp-1,
    0x1.ee9c8039113e7p-1, 0x1.eae8078cbb1abp-1, 0x1.e741aa29d0c9bp-1, 0x1.e3a91830a99b5p-1,
    0x1.e01e009609a56p-1, 0x1.dca01e577bb98p-1, 0x1.d92f20b7c9103p-1, 0x1.d5cac66fb5ccep-1,
    0x1.d272caa5ede9dp-1, 0x1.cf26e3e6b2ccdp-1, 0x1.cbe6da2a77902p-1, 0x1.c8b266d37086dp-1,
    0x1.c5894bd5d5804p-1, 0x1.c26b533bb9f8cp-1, 0x1.bf583eeece73fp-1, 0x1.bc4fd75db96c1p-1,
    0x1.b951e0c864a28p-1, 0x1.b65e2c5ef3e2cp-1, 0x1.b374867c9888bp-1, 0x1.b094b211d304ap-1,
    0x1.adbe885f2ef7ep-1, 0x1.aaf1d31603da2p-1, 0x1.a82e63fd358a7p-1, 0x1.a5740ef09738bp-1,
    0x1.a2c2a90ab4b27p-1, 0x1.a01a01393f2d1p-1, 0x1.9d79f24db3c1bp-1, 0x1.9ae2505c7b190p-1,
    0x1.9852ef297ce2fp-1, 0x1.95cbaeea44b75p-1, 0x1.934c69de74838p-1, 0x1.90d4f2f6752e6p-1,
    0x1.8e6528effd79dp-1, 0x1.8bfce9fcc007cp-1, 0x1.899c0dabec30ep-1, 0x1.87427aa2317fbp-1,
    0x1.84f00acb39a08p-1, 0x1.82a49e8653e55p-1, 0x1.8060195f40260p-1, 0x1.7e22563e0a329p-1,
    0x1.7beb377dcb5adp-1, 0x1.79baa679725c2p-1, 0x1.77907f2170657p-1, 0x1.756cadbd6130cp-1};
inline constexpr double kLogC[128] = {
    -0x1.7cc7f79e69000p-2, -0x1.76feec20d0000p-2, -0x1.713e31351e000p-2, -0x1.6b85b38287800p-2,
    -0x1.65d5590807800p-2, -0x1.602d076180000p-2, -0x1.5a8ca86909000p-2, -0x1.54f4356035000p-2,
    -0x1.4f637c36b4000p-2, -0x1.49da7fda85000p-2, -0x1.445923989a800p-2, -0x1.3edf439b0b800p-2,
    -0x1.396ce448f7000p-2, -0x1.3401e17bda000p-2, -0x1.2e9e2ef468000p-2, -0x1.2941b3830e000p-2,
    -0x1.23ec58cda8800p-2, -0x1.1e9e129279000p-2, -0x1.1956d2b48f800p-2, -0x1.141679ab9f800p-2,
    -0x1.0edd094ef9800p-2, -0x1.09aa518db1000p-2, -0x1.047e65263b800p-2, -0x1.feb224586f000p-3,
    -0x1.f474a7517b000p-3, -0x1.ea4443d103000p-3, -0x1.e020d44e9b000p-3, -0x1.d60a22977f000p-3,
    -0x1.cc00104959000p-3, -0x1.c202956891000p-3, -0x1.b81178d811000p-3, -0x1.ae2c9ccd3d000p-3,
    -0x1.a45402e129000p-3, -0x1.9a877681df000p-3, -0x1.90c6d69483000p-3, -0x1.87120a645c000p-3,
    -0x1.7d68fb4143000p-3, -0x1.73cb83c627000p-3, -0x1.6a39a9b376000p-3, -0x1.60b3154b7a000p-3,
    -0x1.5737d76243000p-3, -0x1.4dc7b8fc23000p-3, -0x1.4462c51d20000p-3, -0x1.3b08abc830000p-3,
    -0x1.31b996b490000p-3, -0x1.2875490a44000p-3, -0x1.1f3b9f879a000p-3, -0x1.160c8252ca000p-3,
    -0x1.0ce7f57f72000p-3, -0x1.03cdc49fea000p-3, -0x1.f57bdbc4b8000p-4, -0x1.e370896404000p-4,
    -0x1.d17983ef94000p-4, -0x1.bf9674ed8a000p-4, -0x1.adc79202f6000p-4, -0x1.9c0c3e7288000p-4,
    -0x1.8a646b372c000p-4, -0x1.78d01b3ac0000p-4, -0x1.674f145380000p-4, -0x1.55e0e6d878000p-4,
    -0x1.4485cdea1e000p-4, -0x1.333d94d6aa000p-4, -0x1.22079f8c56000p-4, -0x1.10e4698622000p-4,
    -0x1.ffa6c6ad20000p-5, -0x1.dda8d4a774000p-5, -0x1.bbcece4850000p-5, -0x1.9a1894012c000p-5,
    -0x1.788583302c000p-5, -0x1.5715e67d68000p-5, -0x1.35c8a49658000p-5, -0x1.149e364154000p-5,
    -0x1.e72c082eb8000p-6, -0x1.a55f152528000p-6, -0x1.63d62cf818000p-6, -0x1.228fb8caa0000p-6,
    -0x1.c317b20f90000p-7, -0x1.419355daa0000p-7, -0x1.81203c2ec0000p-8, -0x1.0040979240000p-9,
    0x1.feff384900000p-9, 0x1.7dc41353d0000p-7, 0x1.3cea3c4c28000p-6, 0x1.b9fc114890000p-6,
    0x1.1b0d8ce110000p-5, 0x1.58a5bd001c000p-5, 0x1.95c8340d88000p-5, 0x1.d276aef578000p-5,
    0x1.07598e598c000p-4, 0x1.253f5e30d2000p-4, 0x1.42edd8b380000p-4, 0x1.606598757c000p-4,
    0x1.7da76356a0000p-4, 0x1.9ab434e1c6000p-4, 0x1.b78c7bb0d6000p-4, 0x1.d431332e72000p-4,
    0x1.f0a3171de6000p-4, 0x1.067152b914000p-3, 0x1.147858292b000p-3, 0x1.2266ecdca3000p-3,
    0x1.303d7a6c55000p-3, 0x1.3dfc33c331000p-3, 0x1.4ba366b7a8000p-3, 0x1.5933928d1f000p-3,
    0x1.66acd2418f000p-3, 0x1.740f8ec669000p-3, 0x1.815c0f51af000p-3, 0x1.8e92954f68000p-3,
    0x1.9bb3602f84000p-3, 0x1.a8bed1c2c0000p-3, 0x1.b5b515c01d000p-3, 0x1.c2967ccbcc000p-3,
    0x1.cf635d5486000p-3, 0x1.dc1bd3446c000p-3, 0x1.e8c01b8cfe000p-3, 0x1.f5509c0179000p-3,
    0x1.00e6c121fb800p-2, 0x1.071b80e93d000p-2, 0x1.0d46b9e867000p-2, 0x1.13687334bd000p-2,
    0x1.1980d67234800p-2, 0x1.1f8ffe0cc8000p-2, 0x1.2595fd7636800p-2, 0x1.2b9300914a800p-2,
    0x1.3187210436000p-2, 0x1.377266dec1800p-2, 0x1.3d54ffbaf3000p-2, 0x1.432eee32fe000p-2};
inline double glibc_log(double x) {
    const uint64_t bits = bit_cast<uint64_t>(x);
    const double r1 = x - 1.0;
    const double r1_2 = r1 * r1;
    const double r1_3 = r1 * r1_2;
    double p1 = horner(r1, -0x1.999eb43b068ffp-4, 0x1.c7184282ad6cap-4);
    p1 = std::fma(r1_3, -0x1.5521375d145cdp-4, std::fma(r1_2, 0x1.78182f7afd085p-4, p1));
    p1 = std::fma(r1_3, p1, std::fma(r1_2, -0x1.fffffa4423d65p-4,
                                     horner(r1, 0x1.24924a344de3p-3, -0x1.55555556745a7p-3)));
    p1 = std::fma(r1_3, p1, std::fma(r1_2, 0x1.999999995dd0cp-3,
                                     horner(r1, -0x1.ffffffffffdcbp-3, 0x1.5555555555577p-2)));
    const double w1 = r1 * 0x1p27;  // r1 split into 26 high bits and the rest
    const double r1_high = r1 + w1 - w1;
    const double r1_low = r1 - r1_high;
    const double w2 = r1_high * r1_high * -0.5;
    const double hi1 = r1 + w2;
    const double lo1 = std::fma(-0.5 * r1_low, r1_high + r1, r1 - hi1 + w2);
    const double near_one = std::fma(r1_3, p1, lo1) + hi1;
    const uint64_t shifted = bits - 0x3fe6000000000000ull;
    const uint64_t i = (shifted >> 45) % 128;
    // k, a 12-bit two's complement number, as a double: 2^52 + (k + 2048) by its bits
    const uint64_t biased_k = (shifted >> 52) ^ 0x800;
    const double k = bit_cast<double>(0x4330000000000000ull | biased_k) - (0x1p52 + 2048.0);
    const double z = bit_cast<double>(bits - (shifted & 0xfff0000000000000ull));
    const double r = std::fma(z, kLogInvC[i], -1.0);
    const double w = std::fma(k, 0x1.62e42fefa3800p-1, kLogC[i]);
    const double hi = w + r;
    const double lo = std::fma(k, 0x1.ef35793c76730p-45, w - hi + r);
    const double r2 = r * r;
    const double p = std::fma(r2, horner(r, -0x1.55575e506c89fp-3, 0x1.999b324f10111p-3),
                              horner(r, -0x1.fffffffeb459p-3, 0x1.555555551305bp-2));
    const double far = std::fma(r * r2, p, std::fma(r2, -0x1.0000000000001p-1, lo)) + hi;
    // close to 1: x in [1 - 2^-4, 1 + 0x1.09p-4), by its bits
    const bool close = bits - 0x3fee000000000000ull < 0x0003090000000000ull;
    constexpr double inf = std::numeric_limits<double>::infinity();
    // log(+-0) = -inf, log(x < 0) = the default NaN, log(inf) = inf, log(NaN) = NaN
    const double special = blend(x == 0.0, -inf,
                                 blend(x < 0.0, -std::numeric_limits<double>::quiet_NaN(), x));
    return blend((x > 0.0) & (x < inf), blend(close, near_one, far), special);
}
template <typename R> inline R log_r(R a) {  // XLA reads a denormal as zero
    if constexpr (std::is_same_v<R, double>) return glibc_log(flush(a));
    else return vm::log(flush(a));
}

template <typename R> inline R log1p_r(R a) { return vm::log1p(flush(a)); }

// Complex functions, computed as XLA computes them, in two families:
// * sqrt, log, log1p and exp: XLA expands these with StableHLO's
//   stablehlo-complex-math-expander pass when it imports a module; the functions below are
//   that pass's expansion (jaxlib's, for complex<f32> and complex<f64>: they differ only in
//   constants), transcribed op by op by a script, with XLA's rewrite of x / c into
//   x * (1 / c) and of (x * c0) * c1 into x * (c0 * c1) for constants c;
// * the others with MLIR's complex-to-standard lowering, in which LLVM contracts a product
//   feeding an addition into an fma (hence the std::fma calls: -ffp-contract=off here).
namespace cx {
template <typename R> constexpr R pick(float f, double d) {
    if constexpr (std::is_same_v<R, float>) return f; else return (R)d;
}
template <typename R> inline std::complex<R> sqrt(std::complex<R> z) {
    const R v0 = pick<R>(0x1.19435c0000000p+1f, 0x1.19435caffa9f9p+1);
    const R v1 = std::numeric_limits<R>::infinity();
    const R v2 = R(0x1.0000000000000p+1);
    const R v3 = R(0x1.0000000000000p+0);
    const R v4 = pick<R>(0x1.6a09e60000000p+0f, 0x1.6a09e667f3bcdp+0);
    const R v5 = pick<R>(0x1.8dc4220000000p+0f, 0x1.8dc42193d5c03p+0);
    const R v6 = R(0x0.0p+0);
    const R v7 = z.real();
    const bool v8 = v7 >= v6;
    const R v9 = std::fabs(v7);
    const R v10 = z.imag();
    const R v11 = std::fabs(v10);
    const bool v12 = v9 == v11;
    const R v13 = std::sqrt(v9);
    const R v14 = v13 * v5;
    const R v15 = v13 * (v5 * (R(1) / v4));
    const R v16 = max_(v9, v11);
    const R v17 = min_(v9, v11);
    const bool v18 = v16 == v17;
    const R v19 = v4 * v16;
    const R v20 = v17 / v16;
    const R v21 = v20 * v20;
    const R v22 = v3 + v21;
    const R v23 = std::sqrt(v22);
    const bool v24 = v23 == v3;
    const bool v25 = v21 > v6;
    const bool v26 = v24 && v25;
    const R v27 = v16 * v21;
    const R v28 = v27 * (R(1) / v2);
    const R v29 = v16 + v28;
    const R v30 = v16 * v23;
    const R v31 = v26 ? v29 : v30;
    const R v32 = v18 ? v19 : v31;
    const R v33 = v32 * (R(1) / v2);
    const R v34 = v9 * (R(1) / v2);
    const R v35 = v33 + v34;
    const R v36 = std::sqrt(v35);
    const bool v37 = v36 == v6;
    const bool v38 = v36 == v1;
    const bool v39 = v37 || v38;
    const bool v40 = v9 > v11;
    const bool v41 = v9 < v11;
    const R v42 = v9 / v11;
    const R v43 = v11 / v9;
    const R v44 = v41 ? v42 : v43;
    const R v45 = v12 ? v3 : v44;
    const R v46 = std::fabs(v45);
    const R v47 = max_(v3, v46);
    const R v48 = min_(v3, v46);
    const bool v49 = v47 == v48;
    const R v50 = v4 * v47;
    const R v51 = v48 / v47;
    const R v52 = v51 * v51;
    const R v53 = v3 + v52;
    const R v54 = std::sqrt(v53);
    const bool v55 = v54 == v3;
    const bool v56 = v52 > v6;
    const bool v57 = v55 && v56;
    const R v58 = v47 * v52;
    const R v59 = v58 * (R(1) / v2);
    const R v60 = v47 + v59;
    const R v61 = v47 * v54;
    const R v62 = v57 ? v60 : v61;
    const R v63 = v49 ? v50 : v62;
    const R v64 = v3 + v63;
    const R v65 = std::sqrt(v64);
    const R v66 = v65 * (R(1) / v4);
    const R v67 = v13 * v66;
    const R v68 = std::sqrt(v11);
    const R v69 = v45 + v63;
    const R v70 = std::sqrt(v69);
    const R v71 = v70 * (R(1) / v4);
    const R v72 = v68 * v71;
    const R v73 = v40 ? v67 : v72;
    const R v74 = v39 ? v73 : v36;
    const R v75 = v12 ? v15 : v74;
    const R v76 = v68 * (R(1) / v0);
    const R v77 = v13 / v68;
    const R v78 = v68 / v13;
    const R v79 = v41 ? v77 : v78;
    const R v80 = v12 ? v3 : v79;
    const R v81 = v68 * v80;
    const R v82 = v65 * v4;
    const R v83 = v81 / v82;
    const R v84 = v70 * v4;
    const R v85 = v68 / v84;
    const R v86 = v40 ? v83 : v85;
    const R v87 = v36 * v2;
    const R v88 = v11 / v87;
    const R v89 = v39 ? v86 : v88;
    const R v90 = v12 ? v76 : v89;
    const R v91 = v8 ? v75 : v90;
    const bool v92 = v7 < v6;
    const bool v93 = v10 < v6;
    const R v94 = -v75;
    const R v95 = v93 ? v94 : v75;
    const R v96 = -v90;
    const R v97 = v93 ? v96 : v90;
    const R v98 = v92 ? v95 : v97;
    const std::complex<R> v99(v91, v98);
    return v99;
}
template <typename R> inline std::complex<R> log(std::complex<R> z) {
    const R v0 = R(0x1.0000000000000p+0);
    const R v1 = R(0x1.0000000000000p-1);
    const R v2 = R(0x1.0400000000000p+6);
    const R v3 = R(0x1.0010000000000p+12);
    const R v4 = pick<R>(0x1.2ced320000000p+126f, 0x1.2ced32a16a1b1p+126);
    const R v5 = pick<R>(0x1.0000000000000p+27f, 0x1.0000002000000p+27);
    const R v6 = pick<R>(std::numeric_limits<float>::infinity(), 0x1.1ccf385ebc8a0p+1023);
    const R v7 = pick<R>(0x1.fffffe0000000p+127f, 0x1.fffffffffffffp+1023);
    const R v8 = R(-0x1.0000000000000p+0);
    const R v9 = z.real();
    const R v10 = z.imag();
    const R v11 = v10 * v10;
    const R v12 = v9 * v9;
    const bool v13 = v11 > v12;
    const R v14 = v13 ? v11 : v12;
    const R v15 = v8 + v14;
    const R v16 = v13 ? v12 : v11;
    const R v17 = v15 + v16;
    const R v18 = -v11;
    const bool v19 = v7 > v6;
    const bool v20 = v7 > v4;
    const R v21 = v20 ? v3 : v2;
    const R v22 = v19 ? v5 : v21;
    const R v23 = v22 * v10;
    const R v24 = v10 - v23;
    const R v25 = v23 + v24;
    const R v26 = v25 * v25;
    const R v27 = v18 + v26;
    const R v28 = v10 - v25;
    const R v29 = v25 * v28;
    const R v30 = v27 + v29;
    const R v31 = v30 + v29;
    const R v32 = v28 * v28;
    const R v33 = v31 + v32;
    const R v34 = v17 + v33;
    const R v35 = -v12;
    const R v36 = v22 * v9;
    const R v37 = v9 - v36;
    const R v38 = v36 + v37;
    const R v39 = v38 * v38;
    const R v40 = v35 + v39;
    const R v41 = v9 - v38;
    const R v42 = v38 * v41;
    const R v43 = v40 + v42;
    const R v44 = v43 + v42;
    const R v45 = v41 * v41;
    const R v46 = v44 + v45;
    const R v47 = v34 + v46;
    const R v48 = v15 - v8;
    const R v49 = v14 - v48;
    const R v50 = v17 - v15;
    const R v51 = v16 - v50;
    const R v52 = v49 + v51;
    const R v53 = v34 - v17;
    const R v54 = v33 - v53;
    const R v55 = v52 + v54;
    const R v56 = v47 - v34;
    const R v57 = v46 - v56;
    const R v58 = v55 + v57;
    const R v59 = v47 + v58;
    const R v60 = std::fabs(v59);
    const bool v61 = v60 < v1;
    const R v62 = log1p_r(v59);
    const R v63 = v1 * v62;
    const R v64 = std::fabs(v9);
    const R v65 = std::fabs(v10);
    const R v66 = max_(v64, v65);
    const R v67 = log_r(v66);
    const R v68 = min_(v64, v65);
    const bool v69 = v68 == v66;
    const R v70 = v68 / v66;
    const R v71 = v69 ? v0 : v70;
    const R v72 = v71 * v71;
    const R v73 = log1p_r(v72);
    const R v74 = v1 * v73;
    const R v75 = v67 + v74;
    const R v76 = v61 ? v63 : v75;
    const R v77 = std::atan2(v10, v9);
    const std::complex<R> v78(v76, v77);
    return v78;
}
template <typename R> inline std::complex<R> log1p(std::complex<R> z) {
    const R v0 = R(0x1.0400000000000p+6);
    const R v1 = R(0x1.0010000000000p+12);
    const R v2 = pick<R>(0x1.2ced320000000p+126f, 0x1.2ced32a16a1b1p+126);
    const R v3 = pick<R>(0x1.0000000000000p+27f, 0x1.0000002000000p+27);
    const R v4 = pick<R>(std::numeric_limits<float>::infinity(), 0x1.1ccf385ebc8a0p+1023);
    const R v5 = pick<R>(0x1.99999a0000000p-3f, 0x1.999999999999ap-3);
    const R v6 = R(0x1.0000000000000p+0);
    const R v7 = R(0x1.0000000000000p-1);
    const R v8 = pick<R>(0x1.47ae140000000p-7f, 0x1.47ae147ae147bp-7);
    const R v9 = pick<R>(0x1.fffffe0000000p+127f, 0x1.fffffffffffffp+1023);
    const R v10 = z.real();
    const R v11 = std::fabs(v10);
    const R v12 = z.imag();
    const R v13 = std::fabs(v12);
    const R v14 = max_(v11, v13);
    const R v15 = std::sqrt(v9);
    const R v16 = v15 * v8;
    const bool v17 = v14 > v16;
    const R v18 = log_r(v14);
    const R v19 = min_(v11, v13);
    const bool v20 = v19 == v14;
    const R v21 = v19 / v14;
    const R v22 = v21 * v21;
    const R v23 = v20 ? v6 : v22;
    const R v24 = log1p_r(v23);
    const R v25 = v7 * v24;
    const R v26 = v18 + v25;
    const R v27 = v10 + v6;
    const R v28 = std::fabs(v27);
    const R v29 = v28 + v13;
    const bool v30 = v29 < v5;
    const R v31 = v27 * v27;
    const R v32 = v12 * v12;
    const R v33 = v31 + v32;
    const R v34 = log_r(v33);
    const R v35 = v7 * v34;
    const R v36 = v10 + v10;
    const R v37 = v36 + v32;
    const R v38 = v10 * v10;
    const R v39 = v37 + v38;
    const R v40 = -v32;
    const bool v41 = v9 > v4;
    const bool v42 = v9 > v2;
    const R v43 = v42 ? v1 : v0;
    const R v44 = v41 ? v3 : v43;
    const R v45 = v44 * v12;
    const R v46 = v12 - v45;
    const R v47 = v45 + v46;
    const R v48 = v47 * v47;
    const R v49 = v40 + v48;
    const R v50 = v12 - v47;
    const R v51 = v47 * v50;
    const R v52 = v49 + v51;
    const R v53 = v52 + v51;
    const R v54 = v50 * v50;
    const R v55 = v53 + v54;
    const R v56 = v39 + v55;
    const R v57 = -v38;
    const R v58 = v44 * v10;
    const R v59 = v10 - v58;
    const R v60 = v58 + v59;
    const R v61 = v60 * v60;
    const R v62 = v57 + v61;
    const R v63 = v10 - v60;
    const R v64 = v60 * v63;
    const R v65 = v62 + v64;
    const R v66 = v65 + v64;
    const R v67 = v63 * v63;
    const R v68 = v66 + v67;
    const R v69 = v56 + v68;
    const R v70 = v37 - v36;
    const R v71 = v37 - v70;
    const R v72 = v36 - v71;
    const R v73 = v32 - v70;
    const R v74 = v72 + v73;
    const R v75 = v39 - v37;
    const R v76 = v39 - v75;
    const R v77 = v37 - v76;
    const R v78 = v38 - v75;
    const R v79 = v77 + v78;
    const R v80 = v74 + v79;
    const R v81 = v56 - v39;
    const R v82 = v56 - v81;
    const R v83 = v39 - v82;
    const R v84 = v55 - v81;
    const R v85 = v83 + v84;
    const R v86 = v80 + v85;
    const R v87 = v69 - v56;
    const R v88 = v69 - v87;
    const R v89 = v56 - v88;
    const R v90 = v68 - v87;
    const R v91 = v89 + v90;
    const R v92 = v86 + v91;
    const R v93 = v69 + v92;
    const R v94 = log1p_r(v93);
    const R v95 = v7 * v94;
    const R v96 = v30 ? v35 : v95;
    const R v97 = v17 ? v26 : v96;
    const R v98 = std::atan2(v12, v27);
    const std::complex<R> v99(v97, v98);
    return v99;
}
template <typename R> inline std::complex<R> exp(std::complex<R> z) {
    const R v0 = R(0x0.0p+0);
    const R v1 = R(0x1.0000000000000p-1);
    const R v2 = std::numeric_limits<R>::infinity();
    const R v3 = z.real();
    const R v4 = std::exp(v3);
    const bool v5 = v4 == v2;
    const R v6 = v3 * v1;
    const R v7 = std::exp(v6);
    const R v8 = z.imag();
    const R v9 = std::cos(v8);
    const R v10 = v7 * v9;
    const R v11 = v10 * v7;
    const R v12 = v4 * v9;
    const R v13 = v5 ? v11 : v12;
    const bool v14 = v8 == v0;
    const R v15 = std::sin(v8);
    const R v16 = v7 * v15;
    const R v17 = v16 * v7;
    const R v18 = v4 * v15;
    const R v19 = v5 ? v17 : v18;
    const R v20 = v14 ? v0 : v19;
    const std::complex<R> v21(v13, v20);
    return v21;
}

// MLIR's computeAbs: |z|, sqrt(|z|) or 1/sqrt(|z|) by max * sqrt(1 + (min/max)^2).
enum class AbsFn { abs, sqrt, rsqrt };
template <typename R> inline R abs_parts(R re, R im, AbsFn fn) {
    R ar = std::fabs(re), ai = std::fabs(im);
    R mx = max_(ar, ai), mn = min_(ar, ai);
    R ratio = mn / mx;
    R ratio_sq_plus_one = std::fma(ratio, ratio, R(1));
    if (fn == AbsFn::rsqrt) {
        ratio_sq_plus_one = rsqrt_r(ratio_sq_plus_one);
        mn = rsqrt_r(mn);
        mx = rsqrt_r(mx);
    }
    R result = fn == AbsFn::sqrt ? std::sqrt(mx) * std::pow(ratio_sq_plus_one, R(0.25))
                                 : mx * std::sqrt(ratio_sq_plus_one);
    return std::isnan(result) ? mn : result;
}
template <typename R> inline R abs(std::complex<R> z) {
    return abs_parts(z.real(), z.imag(), AbsFn::abs);
}
template <typename R> inline std::complex<R> sign(std::complex<R> z) {
    R re = z.real(), im = z.imag();
    R a = cx::abs(z);
    return (re == 0 && im == 0) ? z : std::complex<R>(re / a, im / a);
}
template <typename R> inline std::complex<R> rsqrt(std::complex<R> z) {
    const R inf = std::numeric_limits<R>::infinity();
    R re = z.real(), im = z.imag();
    R abs_rsqrt = abs_parts(re, im, AbsFn::rsqrt);
    R arg = std::atan2(im, re) * R(-0.5);
    R rr = abs_rsqrt * std::cos(arg), ri = abs_rsqrt * std::sin(arg);
    bool zero = (std::fabs(im) == inf && std::isnan(re)) || std::fabs(re) == inf;
    rr = zero ? std::copysign(R(0), re) : rr;
    ri = zero ? R(-1) * std::copysign(R(0), im) : ri;
    bool is_zero = re == 0 && im == 0;
    return {is_zero ? inf : rr, is_zero ? std::numeric_limits<R>::quiet_NaN() : ri};
}
// cos(x) - 1 (cephes' cosm1 below (pi/4)^2).
template <typename R> inline R cosm1(R x) {
    static constexpr double k[] = {4.7377507964246204691685E-14, -1.1470284843425359765671E-11,
                                   2.0876754287081521758361E-9, -2.7557319214999787979814E-7,
                                   2.4801587301570552304991E-5, -1.3888888888888872993737E-3,
                                   4.1666666666666666609054E-2};
    R x2 = x * x, x4 = x2 * x2;
    R poly = R(k[0]);
    for (int i = 1; i < 7; ++i) poly = std::fma(poly, x2, R(k[i]));
    R small = std::fma(x4, poly, R(-0.5) * x2);
    return x2 >= R(0.61685) ? std::cos(x) + R(-1) : small;
}
template <typename R> inline std::complex<R> expm1(std::complex<R> z) {
    R re = z.real(), im = z.imag();
    R em1 = expm1_r(re);
    R c_m1 = cosm1(im);
    R rr = std::fma(em1, c_m1 + R(1), c_m1);
    R ri = im == 0 ? R(0) : (em1 + R(1)) * std::sin(im);
    return {rr, ri};
}
// MLIR's exp (XLA's own expansions use it: e.g. the logistic op's).
template <typename R> inline std::complex<R> exp_mlir(std::complex<R> z) {
    R e = std::exp(z.real());
    return {e * std::cos(z.imag()), e * std::sin(z.imag())};
}
template <typename R> inline std::complex<R> tanh_parts(R re, R im) {
    const R inf = std::numeric_limits<R>::infinity();
    R two_re = re + re;
    R e1 = expm1_r(two_re), e2 = expm1_r(R(-1) * two_re);
    R real_num = e1 - e2;
    R c = std::cos(im), s = std::sin(im);
    R imag_num = R(4) * (c * s);
    R sum_minus_two = e1 + e2;
    R denom = std::fma(c * c, R(4), sum_minus_two);
    R rr = sum_minus_two == inf ? std::copysign(R(1), re) : real_num / denom;
    R ri = imag_num / denom;
    bool re_inf = std::fabs(re) == inf, num_nan = std::isnan(imag_num);
    if (num_nan && !re_inf) rr = std::numeric_limits<R>::quiet_NaN();
    if (im == 0 || (re_inf && num_nan)) ri = R(0);
    return {rr, ri};
}
template <typename R> inline std::complex<R> tanh(std::complex<R> z) {
    return tanh_parts(z.real(), z.imag());
}
template <typename R> inline std::complex<R> tan(std::complex<R> z) {  // -i tanh(iz)
    std::complex<R> t = tanh_parts(z.imag() * R(-1), z.real());
    return {t.imag(), t.real() * R(-1)};
}
template <typename R> inline std::complex<R> sin(std::complex<R> z) {
    R e = std::exp(z.imag());
    R scaled = R(0.5) * e, reciprocal = R(0.5) / e;
    return {(scaled + reciprocal) * std::sin(z.real()),
            (scaled - reciprocal) * std::cos(z.real())};
}
template <typename R> inline std::complex<R> cos(std::complex<R> z) {
    R e = std::exp(z.imag());
    R scaled = R(0.5) * e, reciprocal = R(0.5) / e;
    return {(reciprocal + scaled) * std::cos(z.real()),
            (reciprocal - scaled) * std::sin(z.real())};
}
template <typename R> inline std::complex<R> pow(std::complex<R> x, std::complex<R> y) {
    using C = std::complex<R>;
    const R inf = std::numeric_limits<R>::infinity();
    R a = x.real(), b = x.imag(), c = y.real(), d = y.imag();
    R r = cx::abs(x);
    R arg = std::atan2(b, a);
    R coeff = std::pow(r, c) * std::exp(-d * arg);
    R q = std::fma(c, arg, d * log_r(r));
    C result(coeff * std::cos(q), coeff * std::sin(q));
    if (r == 0 && d == 0 && 0 <= c) result = c == 0 ? C(1, 0) : C(0, 0);
    if (c == 0 && d == 0) result = C(1, 0);
    if (a == 1 && b == 0) result = C(1, 0);
    if (a == inf && b == 0 && d == 0 && c > 0) result = C(inf, 0);
    if (a == inf && b == 0 && d == 0 && c < 0) result = C(0, 0);
    return result;
}
// MLIR's sqrt and log (used by its atan2).
template <typename R> inline std::complex<R> sqrt_mlir(std::complex<R> z) {
    const R inf = std::numeric_limits<R>::infinity();
    R re = z.real(), im = z.imag();
    R abs_sqrt = abs_parts(re, im, AbsFn::sqrt);
    R half_arg = std::atan2(im, re) * R(0.5);
    R c = std::cos(half_arg), s = std::sin(half_arg);
    R rr = abs_sqrt * c;
    R ri = s == 0 ? R(0) : abs_sqrt * s;
    R abs_im = std::fabs(im);
    if (re == -inf && abs_im != inf && !std::isnan(abs_im)) rr = R(0);
    if (abs_im == inf || re == inf) rr = inf;
    if (std::isnan(abs_sqrt)) ri = std::numeric_limits<R>::quiet_NaN();
    if (abs_im == inf || re == -inf) ri = std::copysign(inf, im);
    if (abs_sqrt == 0) rr = ri = R(0);
    return {rr, ri};
}
template <typename R> inline std::complex<R> log_mlir(std::complex<R> z) {
    return {log_r(cx::abs(z)), std::atan2(z.imag(), z.real())};
}
template <typename R> inline std::complex<R> atan2(std::complex<R> y, std::complex<R> x) {
    using C = std::complex<R>;
    C sum = h2d::add(cx::mul(x, x), cx::mul(y, y));
    C ratio = cx::div(h2d::add(x, cx::mul(C(0, 1), y)), cx::sqrt_mlir(sum));
    return cx::mul(C(0, -1), cx::log_mlir(ratio));
}
}  // namespace cx

// The element types' functions: complex arguments go to cx::.
template <typename T> inline T rsqrt(T a) {
    if constexpr (is_complex<T>) return cx::rsqrt(a); else return rsqrt_r(a);
}
template <typename T> inline T sqrt_(T a) {
    if constexpr (is_complex<T>) return cx::sqrt(a); else return std::sqrt(a);
}
template <typename T> inline T exp_(T a) {
    if constexpr (is_complex<T>) return cx::exp(a);
    else if constexpr (std::is_same_v<T, double>) return xla_exp(a);
    else return vm::exp(a);
}
template <typename T> inline T expm1_(T a) {
    if constexpr (is_complex<T>) return cx::expm1(a); else return expm1_r(a);
}
template <typename T> inline T tanh_(T a) {
    if constexpr (is_complex<T>) return cx::tanh(a); else return tanh_r(a);
}
template <typename T> inline T tan_(T a) {
    if constexpr (is_complex<T>) return cx::tan(a);
    else {  // libmvec flushes tan of the smallest normals to zero: tan(x) rounds to x there
        constexpr T tiny = T(1) / T(1ULL << (std::numeric_limits<T>::digits / 2 + 1));
        return blend(std::fabs(a) < tiny, a, vm::tan(a));
    }
}
template <typename T> inline T sin_(T a) {
    // libmvec's sin reads a denormal as zero (DAZ) where XLA returns it: sin(x) = x
    if constexpr (is_complex<T>) return cx::sin(a);
    else return blend(is_denormal(a), a, vm::sin(a));
}
template <typename T> inline T cos_(T a) {
    if constexpr (is_complex<T>) return cx::cos(a); else return vm::cos(a);
}
template <typename T> inline T log_(T a) {
    if constexpr (is_complex<T>) return cx::log(a); else return log_r(a);
}
template <typename T> inline T log1p_(T a) {
    if constexpr (is_complex<T>) return cx::log1p(a); else return log1p_r(a);
}
template <typename T> inline T cbrt_(T a) {
    // f32: libm's answer for denormals (see cbrtf_of_denormal); f64: libm reads them as
    // zero under DAZ, as XLA does. Either way independent of the libmvec variant.
    if constexpr (std::is_same_v<T, float>) {
        return blend(is_denormal(a), cbrtf_of_denormal, vm::cbrt(a));
    } else return vm::cbrt(flush(a));
}
template <typename T> inline T atan2_(T a, T b) {
    // Denormal arguments read as zero, as DAZ reads every other op's (libmvec's variants
    // differ there: some read them as zero, some do not). XLA calls libm's scalar atan2,
    // whose branches under DAZ give artefacts for them (f64 atan2(d, d) = pi/2, f32 NaN):
    // docs/vector-math.md.
    if constexpr (is_complex<T>) return cx::atan2(a, b); else return vm::atan2(flush(a), flush(b));
}
// The exponential inside XLA's own expansion of the logistic op.
template <typename T> inline T exp_logistic(T a) {
    if constexpr (is_complex<T>) return cx::exp_mlir(a); else return exp_(a);
}
template <typename T> inline bool is_finite(T a) { return std::isfinite(a); }
// select: by bits (floats and integers) or by parts (complex), so that loops vectorise
template <typename T> inline T select(bool c, T a, T b) {
    // by parts: GCC does not vectorise a loop that picks whole complex numbers
    if constexpr (is_complex<T>)
        return cx::of_parts(blend(c, a.real(), b.real()), blend(c, a.imag(), b.imag()));
    else if constexpr (std::is_floating_point_v<T> || std::is_integral_v<T>)
        return blend(c, a, b);
    else return c ? a : b;
}

// A sum of products starting from +0.0, as XLA's are, is never -0.0; OpenBLAS's AVX-512
// complex kernels return -0.0 for a sum of -0.0 products (their AVX2 ones do not). Adding
// +0.0 turns -0.0 into +0.0 and changes nothing else.
template <typename R> inline void no_negative_zero_sums(std::complex<R>* sums, int64_t count) {
    R* parts = reinterpret_cast<R*>(sums);
    for (int64_t i = 0; i < 2 * count; ++i) parts[i] += R(0);
}

// ------------------------------------------------------------------ comparison
// TOTALORDER: -NaN < -Inf < ... < -0 < +0 < ... < +Inf < +NaN, by the sign-magnitude bits.
// The magnitude bits of a negative value flipped: its own inverse.
template <typename I> inline I flip_negative(I i) {
    return (I)(i ^ ((i >> (sizeof(I) * 8 - 1)) & std::numeric_limits<I>::max()));
}
template <typename T> inline auto total_order_key(T a) {
    using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
    return flip_negative(bit_cast<I>(a));
}
template <typename T, typename I> inline T from_total_order_key(I key) {
    return bit_cast<T>(flip_negative(key));
}
// A maximum or minimum reduction in lanes folds the total order keys of its elements,
// flushed first as max_ and min_ flush their results: one integer max or min per element
// in place of a dozen operations, the same bits for every value but NaN. NaNs are kept
// apart: the first of each lane, as max_ and min_ keep the first NaN they meet
// (`kept` if it is a NaN or `x` is not, else `x`).
template <typename T> inline auto order_key(T a) { return total_order_key(flush(a)); }
template <typename T> inline T first_nan(T kept, T x) { return blend(kept != kept || x == x, kept, x); }

// ------------------------------------------------------------------ conversion
// Float to integer as XLA converts: NaN -> 0, out of range saturates.
template <typename To, typename From> inline To convert(From x) {
    if constexpr (is_complex<From> && !is_complex<To>) {
        return convert<To>(x.real());
    } else if constexpr (is_complex<To>) {
        using R = typename To::value_type;
        if constexpr (is_complex<From>) return To((R)x.real(), (R)x.imag());
        else return To(convert<R>(x), R(0));
    } else if constexpr (std::is_same_v<To, bool>) {
        return x != From(0);
    } else if constexpr (is_int<To> && std::is_floating_point_v<From>) {
        if (std::isnan(x)) return 0;
        if (x <= (From)std::numeric_limits<To>::min()) return std::numeric_limits<To>::min();
        if (x >= (From)std::numeric_limits<To>::max()) return std::numeric_limits<To>::max();
        return (To)x;
    } else {
        return (To)x;
    }
}

}  // namespace h2d
